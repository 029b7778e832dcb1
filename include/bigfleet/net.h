/*
 * bigfleet/net.h — the network stack of every networked process:
 *
 *   - one single-threaded io_uring event loop per process (multishot accept,
 *     multishot recv into a provided-buffer ring, one outstanding send per
 *     connection, timers, eventfd/fd watches, deferred calls);
 *   - a gRPC server (HTTP/2 via nghttp2, h2c or TLS 1.3 / mTLS via wolfSSL)
 *     with unary, client-, server- and bidi-streaming methods;
 *   - a gRPC client (one connection reused by many concurrent streams,
 *     per-call deadlines, reconnect with backoff, fail-fast while down);
 *   - a small HTTP/1.1 GET server for /metrics, /healthz, /readyz.
 *
 * Implements ARCHITECTURE.md §5 and reference/wire.md §1 (paths, 256 MiB
 * message limit) and §7 (identities from the peer's bigfleet:// URI SAN).
 *
 * Threads and processes
 *   Everything here belongs to the loop that created it and must only be used
 *   from that loop's thread: no locks anywhere. Create the loop after fork()
 *   (the io_uring instance must never be shared across fork); only
 *   bf_net_loop_stop_async() may be called from a signal handler.
 *
 * Callbacks
 *   All callbacks run on the loop thread, from bf_net_loop_run()/run_once().
 *   A callback that reports the end of something (on_done, a unary
 *   completion) is never invoked from inside the API call that started it:
 *   a call that fails at once completes on the next loop iteration.
 *   Freeing a server or client from inside one of its own callbacks is
 *   allowed (the free is finished once the callback returns); freeing the
 *   loop from a callback is not.
 *
 * Messages
 *   Messages are opaque byte strings (serialized protobuf); the layer adds
 *   and strips the 5-byte gRPC length prefix. Outbound bytes are copied at
 *   the call, so the caller keeps ownership of its buffers. Inbound message
 *   pointers are valid only during the callback that receives them.
 *   Compression is not supported (a compressed inbound message fails the
 *   call with UNIMPLEMENTED, or INTERNAL without grpc-encoding).
 *
 * Errors
 *   Functions return 0 or a negative errno unless stated otherwise:
 *   -EINVAL bad argument or configuration, -ENOMEM, -EPIPE the call or
 *   stream is already finished, -EMSGSIZE a message over the send limit,
 *   -EADDRINUSE etc. from bind/listen, -EIO a TLS setup failure (logged).
 */
#ifndef BIGFLEET_NET_H
#define BIGFLEET_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct ProtobufCMessage; /* <protobuf-c/protobuf-c.h>; only needed for the _pb helpers */

/* 256 MiB: the BigFleet send and receive limit on every edge (wire.md §1). */
#define BF_NET_MAX_MESSAGE (256u << 20)
/* The largest receive buffer a client keeps between calls for the next large
 * response (struct bf_net_stats.recv_buffer_reuses): one per client, never
 * more than its max_recv_message; freed by bf_net_client_free. */
#define BF_NET_RECV_SPARE_MAX (64u << 20)
/* Default bound on a server's partially received messages, all calls. */
#define BF_NET_MAX_INBOUND_BUFFERED ((size_t)1 << 30)

/* ------------------------------------------------------------ status codes */

/* gRPC status codes (values as on the wire, grpc/doc/statuscodes.md). */
enum bf_net_code {
    BF_NET_OK = 0,
    BF_NET_CANCELLED = 1,
    BF_NET_UNKNOWN = 2,
    BF_NET_INVALID_ARGUMENT = 3,
    BF_NET_DEADLINE_EXCEEDED = 4,
    BF_NET_NOT_FOUND = 5,
    BF_NET_ALREADY_EXISTS = 6,
    BF_NET_PERMISSION_DENIED = 7,
    BF_NET_RESOURCE_EXHAUSTED = 8,
    BF_NET_FAILED_PRECONDITION = 9,
    BF_NET_ABORTED = 10,
    BF_NET_OUT_OF_RANGE = 11,
    BF_NET_UNIMPLEMENTED = 12,
    BF_NET_INTERNAL = 13,
    BF_NET_UNAVAILABLE = 14,
    BF_NET_DATA_LOSS = 15,
    BF_NET_UNAUTHENTICATED = 16,
    BF_NET_CODE_COUNT = 17
};

/* "OK", "CANCELLED", ... ("UNKNOWN" for out-of-range values). */
const char *bf_net_code_name(int code);

/* ------------------------------------------------------------------ stats */

/*
 * Why the gRPC server closed a connection as a flood (GOAWAY
 * ENHANCE_YOUR_CALM, then close): the peer went over a per-connection limit
 * of the HTTP/2 frame guard (src/net/guard.h has the figures). Counted in
 * bf_net_stats.flood_closes[reason]; the limits hold whatever libnghttp2
 * version is installed.
 */
enum bf_net_flood {
    BF_NET_FLOOD_NONE = 0,
    BF_NET_FLOOD_RAPID_RESET = 1,    /* RST_STREAM over its rate (CVE-2023-44487) */
    BF_NET_FLOOD_STREAMS = 2,        /* new streams over their rate */
    BF_NET_FLOOD_CONTINUATION = 3,   /* header block over 4 CONTINUATIONs or 64 KiB
                                        (CVE-2024-28182) */
    BF_NET_FLOOD_PING = 4,           /* PINGs over their rate (CVE-2019-9512) */
    BF_NET_FLOOD_SETTINGS = 5,       /* SETTINGS over their rate (CVE-2019-9515) */
    BF_NET_FLOOD_PRIORITY = 6,       /* PRIORITY frames over their rate */
    BF_NET_FLOOD_EMPTY_FRAMES = 7,   /* empty DATA frames over their rate (CVE-2019-9518) */
    BF_NET_FLOOD_UNKNOWN_FRAMES = 8, /* extension frames over their rate */
    BF_NET_FLOOD_COUNT = 9
};
/* "rapid_reset", "streams", "continuation", "ping", "settings", "priority",
 * "empty_frames", "unknown_frames" ("none" for 0, "unknown" out of range):
 * the metric label values. */
const char *bf_net_flood_name(int reason);

/*
 * Counters of one server, client or HTTP server (monotonic unless marked
 * gauge). Exported by the owning process as metrics. Bad input is counted
 * here and logged (warn) once per connection; the loop carries on.
 */
struct bf_net_stats {
    uint64_t conns_accepted;     /* server: accepted TCP connections */
    uint64_t conns_rejected;     /* server: closed at once (max_connections, shutdown) */
    uint64_t conns_open;         /* gauge: connections currently open */
    uint64_t accept_errors;      /* server: accept() failures (EMFILE, ...) */
    uint64_t connect_attempts;   /* client: TCP connect attempts */
    uint64_t connect_failures;   /* client: attempts that failed (refused, timeout, TLS) */
    uint64_t handshake_failures; /* TLS handshakes that failed or timed out, bad ALPN */
    uint64_t protocol_errors;    /* bad preface, HTTP/2 connection errors, bad HTTP/1.1 */
    uint64_t oversize_messages;  /* gRPC messages over the receive limit (RESOURCE_EXHAUSTED) */
    uint64_t inbound_budget_refusals; /* server: messages refused because partially received
                                         messages of all calls held max_inbound_buffered
                                         (RESOURCE_EXHAUSTED) */
    uint64_t inbound_buffered_bytes;  /* server gauge: bytes held by partially received
                                         messages */
    uint64_t bad_messages;        /* truncated or compressed gRPC messages, bad request headers */
    uint64_t identity_rejected;   /* calls refused: mTLS peer without exactly one bigfleet:// SAN */
    uint64_t keepalive_timeouts;  /* connections closed because a PING went unanswered */
    uint64_t streams_started;     /* gRPC calls started (server: received; client: issued) */
    uint64_t streams_open;        /* gauge: calls not yet done */
    uint64_t msgs_in, msgs_out;   /* gRPC messages received / queued for sending */
    uint64_t bytes_in, bytes_out; /* bytes on the wire (TLS: ciphertext) */
    uint64_t http_requests;       /* HTTP/1.1 requests answered */
    uint64_t calls_by_code[BF_NET_CODE_COUNT]; /* finished calls by final status */
    /* hostile peers (docs/security.md); each is also logged (warn, rate-limited) */
    uint64_t conns_peer_limited;     /* server: refused at accept, max_conns_per_peer */
    uint64_t conns_identity_limited; /* server: closed after the TLS handshake,
                                        max_conns_per_identity */
    uint64_t conns_idle_closed;      /* server: no call for conn_idle_timeout_ns (GOAWAY) */
    uint64_t conns_evicted;          /* HTTP server: slow or idle connections closed to
                                        admit a new one when every slot was taken */
    uint64_t head_timeouts;          /* HTTP server: request head not complete within
                                        head_timeout_ns of its first byte (408) */
    uint64_t inbound_conn_refusals;  /* server: messages refused because their connection
                                        held its share of the inbound budget */
    uint64_t stalled_messages;       /* server: partial messages that stopped arriving
                                        (RESOURCE_EXHAUSTED) */
    uint64_t first_message_timeouts; /* server: calls without a first message within
                                        first_message_timeout_ns (DEADLINE_EXCEEDED) */
    uint64_t idle_stream_timeouts;   /* server: calls without an inbound message for
                                        stream_idle_timeout_ns (DEADLINE_EXCEEDED) */
    uint64_t header_list_refusals;   /* server: streams reset: decoded request headers
                                        over 64 KiB (an HPACK bomb) */
    uint64_t flood_closes[BF_NET_FLOOD_COUNT]; /* server: connections closed as floods */
    uint64_t idle_buffer_releases;             /* server: times an idle connection's HTTP/2 frame
                                                  buffer pages went back to the kernel */
    uint64_t recv_buffer_reuses;     /* client: responses of >= 256 KiB assembled in the client's
                                        recycled receive buffer (one kept between calls, at most
                                        BF_NET_RECV_SPARE_MAX) instead of new memory; server:
                                        requests of >= 1 MiB assembled in the server's */
    uint64_t inbound_spare_bytes;    /* server gauge: the idle recycled assembly buffer,
                                        charged to max_inbound_buffered beside
                                        inbound_buffered_bytes (released when a message
                                        needs the room, or after 5-10 s unused) */
    uint64_t inbound_spare_releases; /* server: idle recycled buffers released (unused
                                        for a period, or to make room in the budget) */
    uint64_t out_buffer_grows;       /* output buffers grown past 16 KiB (in one step to
                                        256 KiB; freed when the output drains): about
                                        two per burst of output */
    uint64_t out_queued_max;         /* high-water mark: the most output bytes one
                                        connection held (pending + in flight); about
                                        128 KiB + a frame whatever the messages and
                                        windows (a NO_COPY body streams through) */
};

/* -------------------------------------------------------------- the loop */

struct bf_net_loop;

struct bf_net_loop_opts {
    unsigned sq_entries;       /* io_uring SQ size; 0 = 1024 (CQ: 8x, at least 16384) */
    unsigned recv_buffers;     /* provided recv buffers (power of two); 0 = 512 */
    unsigned recv_buffer_size; /* bytes each; 0 = 16384 */
};

/*
 * Creates a loop: an io_uring instance (SINGLE_ISSUER|DEFER_TASKRUN when the
 * kernel has them), one provided-buffer ring registered by hand (liburing
 * 2.3), and an internal eventfd for bf_net_loop_stop_async(). opts may be
 * NULL. Returns 0 and *out, or -errno from io_uring (-ENOSYS, -EPERM when
 * io_uring is disabled, -ENOMEM).
 */
int bf_net_loop_new(const struct bf_net_loop_opts *opts, struct bf_net_loop **out);
/*
 * Destroys the loop (tearing down the ring cancels every in-flight
 * operation). Free servers, clients, HTTP servers, timers and watches
 * first; connections that were still closing are then released here.
 * Not allowed from inside a loop callback.
 */
void bf_net_loop_free(struct bf_net_loop *loop);
/* Runs until bf_net_loop_stop(). Returns 0, or -errno if io_uring fails. */
int bf_net_loop_run(struct bf_net_loop *loop);
/*
 * One iteration: runs deferred calls, submits pending work, waits up to
 * max_wait_ns (0 = do not wait; < 0 = until something happens) and
 * dispatches completions and expired timers. Returns the number of events
 * handled (>= 0) or -errno. For tests and for embedding.
 */
int bf_net_loop_run_once(struct bf_net_loop *loop, int64_t max_wait_ns);
/* Makes bf_net_loop_run() return after the current iteration. */
void bf_net_loop_stop(struct bf_net_loop *loop);
/* As bf_net_loop_stop(), async-signal-safe (writes the loop's eventfd). */
void bf_net_loop_stop_async(struct bf_net_loop *loop);
/* Runs fn(arg) on the next iteration, before waiting. -ENOMEM. */
int bf_net_loop_defer(struct bf_net_loop *loop, void (*fn)(void *arg), void *arg);
/* Counters of the loop itself: recv buffer exhaustion (-ENOBUFS re-arms). */
uint64_t bf_net_loop_enobufs(const struct bf_net_loop *loop);

/* ----------------------------------------------------------------- timers */

struct bf_net_timer;
typedef void (*bf_net_timer_fn)(struct bf_net_timer *t, void *arg);

/* A stopped timer (NULL on ENOMEM). Monotonic clock, nanoseconds. */
struct bf_net_timer *bf_net_timer_new(struct bf_net_loop *loop, bf_net_timer_fn fn, void *arg);
/*
 * (Re)arms: first expiry after delay_ns (<= 0: next iteration), then every
 * period_ns if period_ns > 0 (one-shot otherwise). A periodic timer keeps
 * its phase (no drift); missed periods are skipped, not replayed.
 */
void bf_net_timer_start(struct bf_net_timer *t, int64_t delay_ns, int64_t period_ns);
void bf_net_timer_stop(struct bf_net_timer *t);
bool bf_net_timer_active(const struct bf_net_timer *t);
/* Stops and frees; allowed inside the timer's own callback. NULL is a no-op. */
void bf_net_timer_free(struct bf_net_timer *t);

/* ---------------------------------------------------------------- watches */

struct bf_net_watch;
/* count: the eventfd counter that was read and reset (>= 1). */
typedef void (*bf_net_eventfd_fn)(struct bf_net_watch *w, uint64_t count, void *arg);
/* revents: poll(2) bits (POLLIN, POLLERR, POLLHUP, ...). */
typedef void (*bf_net_fd_fn)(struct bf_net_watch *w, int fd, unsigned revents, void *arg);

/*
 * Watches an eventfd: whenever it becomes readable the loop reads (and so
 * resets) its counter and calls fn with the value. The fd is switched to
 * O_NONBLOCK; it is not closed by the watch. Used to drain shared-memory
 * rings whose producers signal an eventfd. Returns 0 and *out, -EBADF,
 * -ENOMEM.
 */
int bf_net_watch_eventfd(struct bf_net_loop *loop, int efd, bf_net_eventfd_fn fn, void *arg,
                         struct bf_net_watch **out);
/*
 * Watches any pollable fd for events (POLLIN, POLLOUT, ...), level
 * triggered: fn runs on every iteration in which the fd is ready, so it
 * must consume the readiness (e.g. read a signalfd). Not closed by the
 * watch. Returns 0 and *out, -EBADF, -ENOMEM.
 */
int bf_net_watch_fd(struct bf_net_loop *loop, int fd, unsigned events, bf_net_fd_fn fn, void *arg,
                    struct bf_net_watch **out);
/* Stops the watch (no callback after this returns). Allowed inside its callback. */
void bf_net_watch_free(struct bf_net_watch *w);

/* ------------------------------------------------------------------- TLS */

/*
 * PEM file paths (borrowed for the duration of the _new call).
 *   server: cert+key => TLS 1.3; cert+key+ca => mTLS (client certificate
 *           required and verified against ca); nothing => plaintext h2c.
 *   client: ca => TLS 1.3 verifying the server; cert+key+ca => mTLS.
 * BigFleet processes accept only all-three or none (wire.md §7):
 * bf_net_tls_config_check() is that rule.
 */
struct bf_net_tls_config {
    const char *cert_file;
    const char *key_file;
    const char *ca_file;
};
/* 1 = all three set (mTLS), 0 = none (plaintext), -EINVAL = partial. */
int bf_net_tls_config_check(const struct bf_net_tls_config *tls);
/* Bytes wolfSSL holds on the heap in this process right now (all its
 * allocations go through src/net's counting allocator). Any thread. */
uint64_t bf_net_tls_heap_bytes(void);

/*
 * Certificates and keys are re-read when their file mtime changes (checked
 * at most once a second, when a server accepts or a client connects); open
 * connections keep the pair they started with. The CA bundle is read once.
 *
 * Addresses: "host:port", ":port" (all IPv4 interfaces), "[v6addr]:port".
 * host is an IPv4/IPv6 literal or a name. A listener resolves its name
 * synchronously (getaddrinfo) when it is created; a client resolves at each
 * connection attempt on a helper thread, bounded by connect_timeout_ns, so
 * the loop never blocks on DNS; a failed resolution is a failed attempt
 * (UNAVAILABLE, backoff). bf_net_client_new() only checks the syntax. Port 0
 * binds an ephemeral port (see bf_net_server_port()).
 */

/* ------------------------------------------------------------ gRPC server */

struct bf_net_server;
struct bf_net_call;

enum bf_net_rpc_kind {
    BF_NET_UNARY = 0,            /* one request, one response */
    BF_NET_SERVER_STREAMING = 1, /* one request, many responses */
    BF_NET_CLIENT_STREAMING = 2, /* many requests, one response */
    BF_NET_BIDI_STREAMING = 3    /* many both ways */
};

/*
 * One method. Callbacks run in this order for a call:
 *   on_call            once, when the request headers arrive (optional);
 *   on_message         per inbound message. For UNARY and SERVER_STREAMING
 *                      the single request is delivered once, after the
 *                      client half-closed (zero or two requests end the
 *                      call with INTERNAL before any handler sees it);
 *   on_half_close      the client finished sending (optional);
 *   on_drain           the outbox fell to zero after having held bytes
 *                      (optional; resume a paused producer);
 *   on_done            exactly once, last: the call is over with its final
 *                      status code (OK/any code we sent, CANCELLED when the
 *                      peer reset the stream or the connection died,
 *                      DEADLINE_EXCEEDED when grpc-timeout expired). The
 *                      call pointer is invalid after on_done returns.
 * Any callback may send, finish or cancel; sends and finishes are also
 * allowed later from any loop callback (timers, watches) until on_done.
 * A call whose deadline passes is finished with DEADLINE_EXCEEDED by the
 * layer (queued messages are dropped).
 */
struct bf_net_method {
    const char *path; /* "/bigfleet.v1alpha1.Shard/Session"; borrowed, must outlive the server */
    enum bf_net_rpc_kind kind;
    void (*on_call)(struct bf_net_call *call, void *arg);
    void (*on_message)(struct bf_net_call *call, const uint8_t *msg, size_t len, void *arg);
    void (*on_half_close)(struct bf_net_call *call, void *arg);
    void (*on_drain)(struct bf_net_call *call, void *arg);
    void (*on_done)(struct bf_net_call *call, int code, void *arg);
    void *arg;
    /* Receive limit of this method's messages in bytes; 0 = the server's
     * max_recv_message (never above it). A message declaring more ends the
     * call with RESOURCE_EXHAUSTED at its 5-byte prefix, before any of it is
     * buffered. bf_net_call_set_max_recv() narrows it per call. */
    uint32_t max_recv_message;
};

struct bf_net_server_opts {
    const char *addr;                    /* "host:port" / ":port" */
    struct bf_net_tls_config tls;        /* see above */
    const struct bf_net_method *methods; /* copied (paths borrowed) */
    size_t n_methods;
    uint32_t max_connections;        /* 0 = 16384; beyond: closed at accept, counted */
    uint32_t max_concurrent_streams; /* per connection (SETTINGS); 0 = 1024 */
    /* New streams one connection may open per second (a token bucket with
     * a burst of twice this); the stream that empties it closes the
     * connection as a flood (GOAWAY ENHANCE_YOUR_CALM, flood_closes
     * [BF_NET_FLOOD_STREAMS]). 0 = 200 per second; at most 1,000,000
     * (-EINVAL above). grpc-js and grpc-go open one stream per call. */
    uint32_t max_new_streams_per_second;
    uint32_t max_recv_message; /* 0 = BF_NET_MAX_MESSAGE */
    uint32_t max_send_message; /* 0 = BF_NET_MAX_MESSAGE */
    /* Bytes all calls together may hold in partially received messages (a
     * message that arrives whole in one read costs nothing here); a message
     * whose assembly would go past it ends its call with RESOURCE_EXHAUSTED
     * ("server inbound buffer budget exhausted"), logged and counted
     * (inbound_budget_refusals). 0 = BF_NET_MAX_INBOUND_BUFFERED; never
     * below max_recv_message. */
    size_t max_inbound_buffered;
    uint32_t stream_window;       /* initial per-stream receive window; 0 = 1 MiB */
    uint32_t conn_window;         /* connection receive window; 0 = 16 MiB */
    int64_t keepalive_ns;         /* PING after this much silence; 0 = 120 s, < 0 = off */
    int64_t keepalive_timeout_ns; /* close if the PING is unanswered; 0 = 20 s */
    int64_t handshake_timeout_ns; /* TLS handshake + HTTP/2 preface + first SETTINGS,
                                     absolute from accept; 0 = 10 s */
    /* One connection's share of max_inbound_buffered; 0 = a quarter of it,
     * never below the largest method limit. */
    size_t max_inbound_per_conn;
    uint32_t max_conns_per_peer;     /* open connections per peer IP address; 0 = unlimited;
                                        beyond: closed at accept, counted */
    uint32_t max_conns_per_identity; /* mTLS: open connections per bigfleet:// identity;
                                        0 = unlimited; beyond: closed after the handshake */
    /* A partially received message that gets no new byte for this long, or
     * takes longer than this plus 1 s per 64 KiB declared, ends its call
     * with RESOURCE_EXHAUSTED (stalled_messages). 0 = 20 s, < 0 = off. */
    int64_t msg_stall_timeout_ns;
    /* A call whose first message (unary / server-streaming: the request and
     * the half-close) has not arrived this long after its headers ends with
     * DEADLINE_EXCEEDED (first_message_timeouts). 0 = off. */
    int64_t first_message_timeout_ns;
    /* A client-/bidi-streaming call with no inbound message for this long
     * (after its first) ends with DEADLINE_EXCEEDED (idle_stream_timeouts).
     * 0 = off. */
    int64_t stream_idle_timeout_ns;
    /* A connection without calls for this long gets GOAWAY(NO_ERROR) and is
     * closed (conns_idle_closed). 0 = off. */
    int64_t conn_idle_timeout_ns;
    /* > 0: accept on this already bound and listening socket instead of
     * binding addr (an fd inherited from the supervisor, which keeps its own
     * copy: the server closes its copy and never shuts the socket down);
     * addr then only names it in logs. 0 = bind addr. */
    int listen_fd;
};

/*
 * Binds, listens and starts accepting on the loop. Identity rule (mTLS):
 * the connection is accepted, and the peer certificate's URI SANs with
 * scheme bigfleet are collected; exactly one => it is the identity of every
 * call on the connection; zero or two or more => every call on that
 * connection is answered PERMISSION_DENIED by this layer (the handlers never
 * see it), counted in identity_rejected and logged once. This mirrors the
 * Go original (PeerIdentity error => PermissionDenied). Binding the
 * identity to message content (cluster_id, readonly/admin) is the handler's
 * job: finish with BF_NET_PERMISSION_DENIED.
 * Unknown paths get UNIMPLEMENTED; a non-POST request 405; a content-type
 * that is not application/grpc[+proto|;...] 415.
 * Returns 0 and *out, -EINVAL (bad address, bad options, partial TLS
 * config for a server: cert without key), -EIO (TLS files unreadable),
 * -errno from socket/bind/listen.
 */
int bf_net_server_new(struct bf_net_loop *loop, const struct bf_net_server_opts *opts,
                      struct bf_net_server **out);
/* The bound port (host byte order); useful with port 0. */
uint16_t bf_net_server_port(const struct bf_net_server *srv);
/*
 * Re-reads the certificate, key and CA files (a SIGHUP): new connections use
 * them, open ones keep the pair they started with. 0; -EINVAL for a
 * plaintext server or a change between TLS and mTLS (needs a restart);
 * -EIO (unreadable or mismatched files: the running files stay).
 */
int bf_net_server_reload_tls(struct bf_net_server *srv, const struct bf_net_tls_config *tls);
/*
 * Binds and listens (backlog 4096, SO_REUSEADDR, close-on-exec) on addr
 * ("host:port", ":port", "[v6]:port"; a name is resolved synchronously):
 * for a supervisor that binds before it forks. 0 and *fd_out, -EINVAL (bad
 * address), -errno from socket/bind/listen.
 */
int bf_net_listen_socket(const char *addr, int *fd_out);
/* Syntax check of a listen or dial address, without resolving: 0 or -EINVAL. */
int bf_net_addr_check(const char *addr);
/* The local port of a bound socket, or -errno. */
int bf_net_socket_port(int fd);
void bf_net_server_stats(const struct bf_net_server *srv, struct bf_net_stats *out);
/*
 * Graceful shutdown: stops accepting, sends GOAWAY (NO_ERROR, last stream
 * id) on every connection, lets started calls run; after grace_ns the
 * remaining calls are cancelled (on_done CANCELLED) and connections closed.
 * done(arg) runs once every connection is closed (may be NULL). The server
 * must still be freed with bf_net_server_free().
 */
void bf_net_server_shutdown(struct bf_net_server *srv, int64_t grace_ns, void (*done)(void *arg),
                            void *arg);
/* Immediate close: every unfinished call gets on_done(CANCELLED) inside this call. */
void bf_net_server_free(struct bf_net_server *srv);

/* Queues one message (copied, framed). -EPIPE after finish/on_done,
 * -EMSGSIZE over max_send_message, -ENOMEM. */
int bf_net_call_send(struct bf_net_call *call, const void *msg, size_t len);
/* protobuf-c convenience: packs m and sends it. */
int bf_net_call_send_pb(struct bf_net_call *call, const struct ProtobufCMessage *m);
/*
 * bf_net_call_send without the copy: msg (len bytes, from malloc) becomes
 * the call's, is sent from where it is, and is freed with free() once the
 * last byte is handed to the connection or the call ends — and on every
 * error return too (the caller never frees it). msg may be NULL when len
 * is 0. Same returns as bf_net_call_send. For large replies (a provider's
 * List page: megabytes) the copy it saves is one pass over the reply.
 */
int bf_net_call_send_take(struct bf_net_call *call, void *msg, size_t len);
/*
 * bf_net_call_send_take with the buffer given back instead of freed:
 * release(msg, arg) runs once, on the loop thread, when the last byte is
 * handed to the connection or the call ends (bf_net_server_free included),
 * and on every error return (before it returns). msg need not come from
 * malloc. For a sender that recycles its large reply buffers: memory of
 * 8 MiB and more that jemalloc gets back goes back to the kernel at once
 * (its oversize arena), and every page of the next such buffer is a page
 * fault (~14-20 us each on a PVM guest; issue 18, stop 32). release may
 * run inside the net layer's nghttp2 callbacks and inside bf_net_* calls
 * (the error returns, bf_net_server_free): it must only take the buffer
 * back, never call a bf_net_* function.
 */
typedef void (*bf_net_release_fn)(void *msg, void *arg);
int bf_net_call_send_lend(struct bf_net_call *call, void *msg, size_t len,
                          bf_net_release_fn release, void *arg);
/*
 * Ends the call with a status after the queued messages: trailers
 * grpc-status / grpc-message (percent-encoded). With nothing sent yet it is
 * a Trailers-Only response. message may be NULL. -EPIPE if already
 * finished. on_done follows once the stream is closed.
 */
int bf_net_call_finish(struct bf_net_call *call, int code, const char *message);
/* send(msg) then finish(OK): the usual unary reply. */
int bf_net_call_reply(struct bf_net_call *call, const void *msg, size_t len);
/* bf_net_call_send_take(msg) then finish(OK): a unary reply without the copy
 * (msg is the call's in every case). */
int bf_net_call_reply_take(struct bf_net_call *call, void *msg, size_t len);
/* bf_net_call_send_lend(msg) then finish(OK). */
int bf_net_call_reply_lend(struct bf_net_call *call, void *msg, size_t len,
                           bf_net_release_fn release, void *arg);
int bf_net_call_reply_pb(struct bf_net_call *call, const struct ProtobufCMessage *m);
/*
 * Sets this call's receive limit for messages whose prefix arrives after
 * this call (bytes; 0 = the method's limit; clamped to the method's limit).
 * The session keeps a stream small until its Hello is accepted.
 */
void bf_net_call_set_max_recv(struct bf_net_call *call, uint32_t max);
/* Resets the stream (RST_STREAM CANCEL): the client sees CANCELLED. on_done(CANCELLED) follows. */
void bf_net_call_cancel(struct bf_net_call *call);
/*
 * Zero-copy hand-off of a received message's buffer (CLIENT_STREAMING and
 * BIDI_STREAMING methods; the session's rollups).
 *
 * A message that spans several HTTP/2 DATA frames is assembled in a buffer
 * the layer owns and charges to the connection's share of the inbound
 * budget (max_inbound_buffered) while it is partial. Called from on_message
 * with the msg pointer on_message received, bf_net_call_take_message moves
 * that buffer to the caller: *out gets the allocation (out->base == msg,
 * out->cap its size in bytes) and the layer refunds its inbound-budget
 * charge at once, so from here on the CALLER bounds and accounts for those
 * bytes (the session charges them to its ingest budget). The buffer belongs
 * to no call or connection any more: it may outlive both and be freed on any
 * thread, exactly once, with bf_net_msg_free(). The bytes stay valid and
 * unchanged until then; msg must not be used after on_message other than
 * through out->base.
 *
 * Returns 0, or -ENOENT (nothing taken; msg stays the layer's and is valid
 * only during on_message, as usual) when the message was delivered in place
 * (it arrived whole inside one DATA frame), when called outside on_message
 * or with another pointer, or for UNARY/SERVER_STREAMING requests.
 */
struct bf_net_msg_buf {
    uint8_t *base; /* the allocation; the message starts here */
    size_t cap;    /* its size in bytes (what it holds in memory) */
};
int bf_net_call_take_message(struct bf_net_call *call, const uint8_t *msg,
                             struct bf_net_msg_buf *out);
/* Frees a buffer from bf_net_call_take_message (any thread). NULL base: no-op. */
void bf_net_msg_free(struct bf_net_msg_buf *b);
/*
 * Backpressure: bytes queued on this call and not yet handed to HTTP/2 (they
 * wait for the peer's flow-control window or the socket). A session bounds
 * a slow reader's outbox with this.
 */
size_t bf_net_call_outbox_bytes(const struct bf_net_call *call);
/* The peer's bigfleet:// identity (mTLS), or NULL (plaintext, TLS without
 * client certs). Owned by the connection: valid until on_done. */
const char *bf_net_call_identity(const struct bf_net_call *call);
const char *bf_net_call_path(const struct bf_net_call *call);
/* "ip:port" of the peer. */
const char *bf_net_call_peer(const struct bf_net_call *call);
/* The call's deadline on the monotonic clock (bf_mono_ns), or 0 if none. */
int64_t bf_net_call_deadline(const struct bf_net_call *call);
/* True once finish/cancel was called or the call ended. */
bool bf_net_call_finished(const struct bf_net_call *call);
void bf_net_call_set_user(struct bf_net_call *call, void *user);
void *bf_net_call_user(const struct bf_net_call *call);

/* ------------------------------------------------------------ gRPC client */

struct bf_net_client;
struct bf_net_stream;

enum bf_net_client_state {
    BF_NET_CLIENT_CONNECTING = 0, /* connect/handshake in progress; calls wait (bounded) */
    BF_NET_CLIENT_READY = 1,      /* connected; calls go out at once */
    BF_NET_CLIENT_BACKOFF = 2     /* last attempt failed; calls fail fast with UNAVAILABLE */
};

struct bf_net_client_opts {
    const char *addr;             /* "host:port" of the server; copied */
    struct bf_net_tls_config tls; /* ca => TLS, + cert/key => mTLS; none => h2c */
    const char *server_name;      /* TLS name to verify and :authority; NULL = host of addr */
    int64_t connect_timeout_ns;   /* TCP + TLS + preface; 0 = 20 s */
    int64_t backoff_initial_ns;   /* first retry delay; 0 = 1 s */
    int64_t backoff_max_ns;       /* 0 = 30 s (x1.6 per failure, +-20% jitter) */
    int64_t keepalive_ns;         /* PING while calls are open and the link is silent; 0 = off */
    int64_t keepalive_timeout_ns; /* 0 = 20 s */
    uint32_t max_recv_message;    /* 0 = BF_NET_MAX_MESSAGE */
    uint32_t max_send_message;    /* 0 = BF_NET_MAX_MESSAGE */
    uint32_t max_pending;   /* calls waiting for a connection; 0 = 1024; beyond: UNAVAILABLE */
    uint32_t stream_window; /* 0 = 1 MiB */
    uint32_t conn_window;   /* 0 = 16 MiB */
};

/*
 * Creates a client and starts connecting. One HTTP/2 connection carries all
 * its calls (as many concurrent streams as the server allows; beyond that
 * nghttp2 queues them). When the server sends GOAWAY the open calls finish
 * on the old connection and new calls go to a new one. When the connection
 * fails, its calls end with UNAVAILABLE and the client retries with
 * exponential backoff; meanwhile new calls fail fast with UNAVAILABLE.
 * Returns 0 and *out, -EINVAL, -EIO (TLS files), -ENOMEM.
 */
int bf_net_client_new(struct bf_net_loop *loop, const struct bf_net_client_opts *opts,
                      struct bf_net_client **out);
/* Every unfinished call completes with CANCELLED inside this call; then no more callbacks. */
void bf_net_client_free(struct bf_net_client *cl);
enum bf_net_client_state bf_net_client_state(const struct bf_net_client *cl);
/*
 * Unary replies completed by received bytes are then delivered after
 * nghttp2 has parsed those bytes (still in the same loop iteration, in
 * arrival order) instead of from inside nghttp2's receive: there a unary
 * callback may start its next call and put it on the wire at once with
 * bf_net_client_flush(). Off by default (callers that do not flush keep the
 * old timing). Loop thread.
 */
void bf_net_client_set_unary_after_recv(struct bf_net_client *cl, bool on);
/*
 * Puts the calls started so far on the wire now (HTTP/2 output produced and
 * its send handed to the kernel) instead of when the loop next waits: a
 * unary callback that starts its next call and then works on the reply
 * (a resync walk's next List page before this page is applied) lets the
 * server answer meanwhile. Works from unary callbacks of a client set with
 * bf_net_client_set_unary_after_recv(); elsewhere (inside nghttp2: other
 * callbacks; inside any connection's output production on this loop, such
 * as an on_drain callback or a completion during a send; with a send
 * already in flight; while connecting) it does nothing and the loop sends
 * as usual. Loop thread.
 */
void bf_net_client_flush(struct bf_net_client *cl);
void bf_net_client_stats(const struct bf_net_client *cl, struct bf_net_stats *out);

/*
 * Unary completion: code is the gRPC status, message the (decoded)
 * grpc-message or "" , resp/len the response message when code == OK
 * (valid only during the callback).
 */
typedef void (*bf_net_unary_fn)(void *arg, int code, const char *message, const uint8_t *resp,
                                size_t len);
/*
 * Starts a unary call. timeout_ns > 0 sets a deadline (sent as grpc-timeout
 * and enforced locally: DEADLINE_EXCEEDED + RST_STREAM CANCEL); <= 0 = none.
 * cb runs exactly once, never from inside this call. Returns a handle usable
 * with bf_net_stream_cancel() until cb runs, or NULL with errno set (EINVAL,
 * EMSGSIZE, ENOMEM) and cb never called.
 */
struct bf_net_stream *bf_net_client_unary(struct bf_net_client *cl, const char *path,
                                          const void *req, size_t len, int64_t timeout_ns,
                                          bf_net_unary_fn cb, void *arg);
struct bf_net_stream *bf_net_client_unary_pb(struct bf_net_client *cl, const char *path,
                                             const struct ProtobufCMessage *req, int64_t timeout_ns,
                                             bf_net_unary_fn cb, void *arg);

/* Streaming call callbacks. on_done runs exactly once, last; the stream
 * handle is invalid after it returns. */
struct bf_net_stream_cbs {
    void (*on_message)(struct bf_net_stream *s, const uint8_t *msg, size_t len, void *arg);
    void (*on_drain)(struct bf_net_stream *s, void *arg); /* optional: outbox emptied */
    void (*on_done)(struct bf_net_stream *s, int code, const char *message, void *arg);
};
/*
 * Starts a streaming call (server-streaming, client-streaming or bidi: the
 * wire is the same). Send with bf_net_stream_send(), half-close with
 * bf_net_stream_close_send(), cancel with bf_net_stream_cancel().
 * cbs is copied. Returns the stream or NULL with errno (EINVAL, ENOMEM).
 */
struct bf_net_stream *bf_net_client_call(struct bf_net_client *cl, const char *path,
                                         int64_t timeout_ns, const struct bf_net_stream_cbs *cbs,
                                         void *arg);
/* Queues a message. -EPIPE after close_send or done, -EMSGSIZE, -ENOMEM. */
int bf_net_stream_send(struct bf_net_stream *s, const void *msg, size_t len);
/* The same without the copy: msg is lent until release(msg, arg) runs, with
 * bf_net_call_send_lend's contract (once, on the loop thread, when the last
 * byte is handed to the connection or the stream ends, and on every error
 * return before it returns; release must not call a bf_net_* function).
 * Order: a message still queued when the stream ends (cancel, deadline,
 * reset, lost connection, bf_net_client_free) is given back AFTER on_done
 * has run, up to one loop step later (when nghttp2 lets the stream go), so
 * what release needs (arg) must outlive on_done: free it in release.
 * release NULL: msg is malloc'd and goes to free() instead. */
int bf_net_stream_send_lend(struct bf_net_stream *s, void *msg, size_t len,
                            bf_net_release_fn release, void *arg);
int bf_net_stream_send_pb(struct bf_net_stream *s, const struct ProtobufCMessage *m);
/* Half-close: END_STREAM after the queued messages. -EPIPE if already closed. */
int bf_net_stream_close_send(struct bf_net_stream *s);
/* Cancels (RST_STREAM CANCEL); on_done / the unary cb follows with CANCELLED
 * on the next iteration unless the call had already ended. */
void bf_net_stream_cancel(struct bf_net_stream *s);
size_t bf_net_stream_outbox_bytes(const struct bf_net_stream *s);
void bf_net_stream_set_user(struct bf_net_stream *s, void *user);
void *bf_net_stream_user(const struct bf_net_stream *s);

/* ------------------------------------------------------------ HTTP/1.1 */

struct bf_net_http_server;
struct bf_net_http_response;

struct bf_net_http_request {
    const char *method; /* "GET" or "HEAD" (others are answered 405 by the layer) */
    const char *path;   /* "/metrics" (no query) */
    const char *query;  /* after '?', or "" */
};

/*
 * Fills the response synchronously (default 200 "text/plain; charset=utf-8",
 * empty body). For HEAD the body is computed but not sent.
 */
typedef void (*bf_net_http_fn)(const struct bf_net_http_request *req,
                               struct bf_net_http_response *resp, void *arg);

/* Sets status and content type (copied; NULL keeps the current one). */
void bf_net_http_set_status(struct bf_net_http_response *resp, int status,
                            const char *content_type);
/* Appends to the body. -ENOMEM (the response becomes a 500). */
int bf_net_http_append(struct bf_net_http_response *resp, const void *data, size_t len);
int bf_net_http_printf(struct bf_net_http_response *resp, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

struct bf_net_http_server_opts {
    const char *addr;
    bf_net_http_fn handler;
    void *arg;
    uint32_t max_connections; /* slots; 0 = 256 */
    int64_t idle_timeout_ns;  /* keep-alive idle limit between requests; 0 = 30 s */
    int64_t head_timeout_ns;  /* a request head must be complete this long after its
                                 first byte (absolute: not reset by later bytes);
                                 else 408 and close; 0 = 5 s */
    int listen_fd;            /* > 0: an inherited listening socket (see bf_net_server_opts) */
};

/*
 * A plaintext HTTP/1.1 server (persistent connections, pipelining, GET and
 * HEAD only, no request bodies, request head <= 8 KiB: else 431/400 and
 * the connection is closed). Slots: when all max_connections are taken, a
 * new connection evicts the connection that has waited longest inside a
 * request head (a slow client), else the longest idle keep-alive one, else
 * the oldest (conns_evicted): a flood of slow clients cannot keep a probe
 * out. Returns 0 and *out or -errno as bf_net_server_new().
 */
int bf_net_http_server_new(struct bf_net_loop *loop, const struct bf_net_http_server_opts *opts,
                           struct bf_net_http_server **out);
uint16_t bf_net_http_server_port(const struct bf_net_http_server *hs);
void bf_net_http_server_stats(const struct bf_net_http_server *hs, struct bf_net_stats *out);
void bf_net_http_server_free(struct bf_net_http_server *hs);

#ifdef __cplusplus
}
#endif

#endif /* BIGFLEET_NET_H */
