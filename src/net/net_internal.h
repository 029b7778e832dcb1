/*
 * net_internal.h — private structures shared by the files in src/net: the
 * loop, timers, listeners, and the byte-stream connection (`struct conn`)
 * that the HTTP/2 server, HTTP/2 client and HTTP/1.1 server sit on.
 *
 * Layering
 *   loop.c     io_uring ring, provided-buffer ring, timer heap, deferred
 *              calls, fd watches, listeners (multishot accept).
 *   conn.c     one TCP connection: multishot recv, one outstanding send with
 *              partial-write handling, optional TLS (tls.c) in between, and
 *              the close sequence (drain -> SHUT_WR -> linger -> close).
 *   grpc_server.c / grpc_client.c / http1.c   the upper layers, plugged in
 *              through struct conn_ops.
 *
 * Lifetime of a conn
 *   The upper layer embeds struct conn. bf_conn_abort() (or the end of a
 *   graceful close) calls ops->on_close exactly once; the upper layer drops
 *   its protocol state there. The memory is handed back through
 *   ops->release only when no io_uring operation refers to the conn any
 *   more and no conn-level handler is on the stack (c->busy == 0).
 */
#ifndef BF_NET_INTERNAL_H
#define BF_NET_INTERNAL_H

#include <errno.h>
#include <liburing.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include "bigfleet/net.h"
#include "bigfleet/strbuf.h"

#define BF_CONTAINER_OF(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

/* ---------------------------------------------------------------- lists */

struct bf_list {
    struct bf_list *next, *prev;
};
static inline void bf_list_init(struct bf_list *l)
{
    l->next = l->prev = l;
}
static inline bool bf_list_empty(const struct bf_list *l)
{
    return l->next == l;
}
static inline void bf_list_add_tail(struct bf_list *head, struct bf_list *n)
{
    n->prev = head->prev;
    n->next = head;
    head->prev->next = n;
    head->prev = n;
}
static inline void bf_list_del(struct bf_list *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->next = n->prev = n;
}

/* ---------------------------------------------------------------- timers */

#define BF_TIMER_IDLE UINT32_MAX

struct bf_net_timer {
    struct bf_net_loop *loop;
    int64_t expiry; /* bf_mono_ns */
    int64_t period; /* 0 = one-shot */
    uint32_t heap_idx;
    bool heap_alloc;   /* created by bf_net_timer_new (freed by bf_net_timer_free) */
    bool free_pending; /* freed inside its own callback */
    bf_net_timer_fn fn;
    void *arg;
};

/* Embedded timers: initialise, then bf_net_timer_start/stop; never free. */
void bf_timer_init(struct bf_net_timer *t, struct bf_net_loop *loop, bf_net_timer_fn fn, void *arg);

/* ---------------------------------------------------------------- loop */

/* user_data tags in the low 3 bits (objects are malloc'd, 16-aligned). */
enum {
    BF_OP_IGNORE = 0, /* cancel requests and other fire-and-forget ops */
    BF_OP_ACCEPT = 1,
    BF_OP_RECV = 2,
    BF_OP_SEND = 3,
    BF_OP_CONNECT = 4,
    BF_OP_POLL = 5,
};
#define BF_OP_MASK      7u
#define BF_UD(ptr, tag) ((uint64_t)(uintptr_t)(ptr) | (uint64_t)(tag))

/*
 * Completion callbacks. Every object that submits operations (a listener,
 * a watch, a connection) starts with a struct bf_loop_handler and submits
 * BF_UD(object, BF_OP_*): the loop hands each completion to the object's
 * own complete() with the tag, never knowing what the object is. A
 * BF_OP_IGNORE completion goes to nobody (its recv buffer, if any, back to
 * the ring). Loop thread only.
 */
struct bf_loop_handler {
    void (*complete)(struct bf_loop_handler *h, unsigned op, int res, unsigned flags);
};

/*
 * A connection as the loop sees it: a handler, on the loop's list of
 * endpoints (freed with the loop) and, when it asked for a flush, on its
 * dirty list. The owner embeds it as its first member (so its address is
 * the operation's user_data) and sets ops before any operation.
 */
struct bf_loop_endpoint;
struct bf_loop_endpoint_ops {
    /* send what is queued (the loop calls it before it next waits) */
    void (*flush)(struct bf_loop_endpoint *ep);
    /* the loop is being freed and its ring is gone: no operation comes back */
    void (*free_leftover)(struct bf_loop_endpoint *ep);
};
struct bf_loop_endpoint {
    struct bf_loop_handler h; /* first */
    const struct bf_loop_endpoint_ops *ops;
    bool dirty;                /* on loop->dirty */
    struct bf_list link;       /* loop->conns */
    struct bf_list dirty_link; /* loop->dirty */
};

#define BF_NET_BGID  7
#define BF_TLS_STAGE 16384

struct bf_defer {
    void (*fn)(void *arg);
    void *arg;
};

struct bf_net_loop {
    struct io_uring ring;
    bool ring_ok;
    /* provided-buffer ring for multishot recv */
    struct io_uring_buf_ring *br;
    size_t br_size;
    uint8_t *bufs;
    size_t bufs_size;
    unsigned nbufs, bufsz;
    uint64_t enobufs;
    /* idle release of the buffers' pages (loop.c, bufs_idle_cb) */
    bool bufs_used;         /* a buffer came back in this iteration */
    bool bufs_touched;      /* pages may be resident since the last release */
    int64_t bufs_last_ns;   /* mono ns of the last iteration that used a buffer */
    uint64_t bufs_releases; /* times the pages were given back */
    struct bf_net_timer bufs_timer;
    /* timers: binary min-heap on expiry */
    struct bf_net_timer **heap;
    uint32_t nheap;
    size_t capheap;
    struct bf_net_timer *running_timer; /* callback in progress (free-inside-callback) */
    /* deferred calls */
    struct bf_defer *defer;
    size_t ndefer, capdefer;
    /* connections to flush before the next wait */
    struct bf_list dirty;
    /* everything alive, for bf_net_loop_free */
    struct bf_list conns, listeners, watches;
    /* stop */
    int wake_fd;
    struct bf_net_watch *wake_watch;
    bool stop;
    /* > 0 while a conn_flush produces output (its callbacks, e.g. on_drain,
     * may try to flush): bf_conn_flush_now then does nothing, so a flush is
     * never entered inside another (the same conn's buffers, the shared TLS
     * staging below) */
    unsigned producing;
    /* TLS plaintext staging (one conn produces at a time) and read scratch */
    uint8_t tls_stage[BF_TLS_STAGE];
    size_t tls_stage_len;
    uint8_t tls_read[BF_TLS_STAGE];
};

/* Times the loop gave its provided buffers' pages back to the kernel after
 * BF_LOOP_BUFS_IDLE_NS without a receive, when no
 * completion was waiting (loop.c: bufs_idle_cb; never without DEFER_TASKRUN). */
#define BF_LOOP_BUFS_IDLE_NS (1 * BF_NS_PER_SEC)
uint64_t bf_loop_buffer_releases(const struct bf_net_loop *loop);

/* An SQE, submitting the queue first if it is full. Never NULL in practice
 * (aborts the process if the ring is unusable, which is a bug). */
struct io_uring_sqe *bf_loop_sqe(struct bf_net_loop *loop);
void bf_loop_cancel(struct bf_net_loop *loop, uint64_t user_data);
/* Hands the queued SQEs to the kernel now (no wait). */
void bf_loop_submit(struct bf_net_loop *loop);
/* The provided buffer bid, and giving it back to the ring. */
const uint8_t *bf_loop_buffer(struct bf_net_loop *loop, unsigned bid);
void bf_loop_recycle(struct bf_net_loop *loop, unsigned bid);

/* ------------------------------------------------------------ listeners */

struct bf_listener {
    struct bf_loop_handler h; /* first: BF_OP_ACCEPT completions */
    struct bf_net_loop *loop;
    int fd;
    uint16_t port;
    bool armed;   /* multishot accept outstanding */
    bool closing; /* owner gone; freed when the accept op ends */
    bool shared;  /* inherited socket other processes also hold: never shut down */
    void (*on_accept)(void *owner, int fd);
    void *owner;
    uint64_t *accept_errors;
    struct bf_net_timer retry; /* re-arm after EMFILE and friends */
    struct bf_list link;
};

/* Parses "host:port" / ":port" / "[v6]:port" into *ss, resolving a host
 * name synchronously (getaddrinfo: may block; listeners at startup only).
 * -EINVAL (syntax or resolution). host_out (optional) receives the host part
 * ("" for ":port"). */
int bf_addr_parse(const char *addr, struct sockaddr_storage *ss, socklen_t *len, char *host_out,
                  size_t host_cap, uint16_t *port_out);
/* The same without resolving: 0 = a literal address (or ":port"), *ss and
 * *len filled; 1 = a host name, *ss untouched, to be resolved with
 * bf_addr_resolve(host_out, *port_out, ...) (*ss zeroed); -EINVAL = syntax (or host_out
 * too small). host_out and port_out are filled in both success cases
 * (host_out optional only when the caller never resolves). Never blocks. */
int bf_addr_parse_literal(const char *addr, struct sockaddr_storage *ss, socklen_t *len,
                          char *host_out, size_t host_cap, uint16_t *port_out);
/* Resolves a host name (getaddrinfo: blocks; call it off the loop thread),
 * preferring IPv4. 0, -EHOSTUNREACH (no such name / no address), -EAGAIN
 * (temporary DNS failure), -ENOMEM. Thread-safe. */
int bf_addr_resolve(const char *host, uint16_t port, struct sockaddr_storage *ss, socklen_t *len);

/*
 * Asynchronous name resolution (resolve.c), so that a slow or dead DNS
 * server never stalls an event loop: bf_resolve_start() runs
 * bf_addr_resolve() on a detached thread and signals `efd` (an eventfd the
 * caller watches; it is dup'ed, so the caller may close its own copy at any
 * time) when the result is ready. The loop thread then calls
 * bf_resolve_take(), which frees the job. A job the caller no longer wants
 * (timeout, shutdown) is handed back with bf_resolve_abandon(): the thread
 * frees it when getaddrinfo returns and never signals. Loop-thread only,
 * except the job's own thread.
 */
struct bf_resolve;
/* 0 and *out; -ENOMEM, -EMFILE (dup), -EAGAIN (no thread). */
int bf_resolve_start(const char *host, uint16_t port, int efd, struct bf_resolve **out);
/* -EINPROGRESS while running (spurious wake-up; the job is kept); otherwise
 * the job is freed and the result returned: 0 with *ss and *len, or the
 * bf_addr_resolve error. */
int bf_resolve_take(struct bf_resolve *r, struct sockaddr_storage *ss, socklen_t *len);
void bf_resolve_abandon(struct bf_resolve *r);
/* Tests only: bf_addr_resolve() first sleeps this long (a slow DNS server). */
extern _Atomic int64_t bf_resolve_test_delay_ns;
/* "ip:port" of a socket address. */
void bf_addr_format(const struct sockaddr *sa, char *out, size_t cap);

int bf_listener_open(struct bf_net_loop *loop, const char *addr, void (*on_accept)(void *, int),
                     void *owner, uint64_t *accept_errors, struct bf_listener **out);
/* Accepts on an already bound and listening socket (adopted: closed with
 * the listener). shared: other processes hold it too (inherited from the
 * supervisor), so closing never shuts it down. -ENOTSOCK if fd is not a
 * listening stream socket, -ENOMEM. */
int bf_listener_adopt(struct bf_net_loop *loop, int fd, bool shared, void (*on_accept)(void *, int),
                      void *owner, uint64_t *accept_errors, struct bf_listener **out);
/* Stops accepting and closes the socket; the memory goes when the kernel
 * returns the accept operation. */
void bf_listener_close(struct bf_listener *l);

/* ---------------------------------------------------------------- conns */

struct conn;

struct conn_ops {
    /* transport is up (TCP connected / TLS handshake done). <0: abort. */
    int (*on_ready)(struct conn *c);
    /* plaintext bytes arrived. <0: abort with that error. */
    int (*on_data)(struct conn *c, const uint8_t *p, size_t n);
    /* write pending output with bf_conn_write() (no send in flight). <0: abort. */
    int (*produce)(struct conn *c);
    /* true when the upper layer is finished: close gracefully once flushed */
    bool (*done)(struct conn *c);
    /* the connection is closed (once). err: 0 clean, -errno. */
    void (*on_close)(struct conn *c, int err);
    /* give the memory back (no I/O refers to it any more). */
    void (*release)(struct conn *c);
};

enum conn_state {
    C_CONNECTING = 0, /* client: TCP connect in flight */
    C_HANDSHAKE,      /* TLS handshake in progress */
    C_OPEN,           /* established */
    C_DRAIN,          /* closing: flushing what is queued */
    C_LINGER,         /* SHUT_WR sent: discarding input until EOF or the linger timer */
    C_CLOSED          /* on_close ran; waiting for ops to come back */
};

struct obuf {
    uint8_t *p;
    size_t len, off, cap;
};
/* Room for n more bytes (bf_grow); 0 or -ENOMEM (the buffer unchanged). */
static inline int obuf_reserve(struct obuf *b, size_t n)
{
    size_t need;
    if (__builtin_add_overflow(b->len, n, &need))
        return -ENOMEM;
    return bf_grow((void **)&b->p, &b->cap, need, 1);
}
/* Appends n bytes; 0 or -ENOMEM (nothing appended). */
static inline int obuf_append(struct obuf *b, const void *p, size_t n)
{
    if (obuf_reserve(b, n))
        return -ENOMEM;
    memcpy(b->p + b->len, p, n);
    b->len += n;
    return 0;
}

struct WOLFSSL;
struct bf_tls_ctx;

/*
 * The TLS layer's in/out interface (tls.c sees nothing else of a
 * connection): ciphertext comes in through in/in_len (the caller points
 * them at what it received; wolfSSL consumes from the front), ciphertext
 * goes out through out() (0, -EPIPE when the transport is closed, other
 * -errno). The owner fills is_client and out before bf_tls_session_new().
 */
struct bf_tls_io {
    struct WOLFSSL *ssl;    /* NULL: no TLS on this connection */
    struct bf_tls_ctx *ctx; /* reference held while ssl lives */
    struct bf_list blocks;  /* wolfSSL's large blocks for this session (tls.c) */
    const uint8_t *in;      /* TLS ciphertext being fed to wolfSSL */
    size_t in_len;
    bool is_client;
    /* wolfSSL without the OpenSSL layer (tls.c): what the verify callback
     * read from the verified leaf (the two small fields sit in padding) */
    bool name_checked; /* client: wolfSSL matched the server name */
    int8_t peer_uris;  /* server: bf_tls_leaf_identity of the leaf (INT8_MIN: none yet) */
    int (*out)(struct bf_tls_io *io, const void *p, size_t n);
    char *peer_ident; /* server: the one bigfleet URI SAN (malloc) or NULL */
};

struct conn {
    struct bf_loop_endpoint ep; /* first: the loop's completions and flushes */
    struct bf_net_loop *loop;
    const struct conn_ops *ops;
    struct bf_net_stats *stats;
    int fd;
    uint8_t state;
    bool is_client;
    bool recv_armed, send_inflight, connect_inflight;
    bool up_closed; /* on_close ran */
    bool tls_done;
    int busy;
    struct bf_tls_io tio; /* TLS state (tio.ssl NULL: plaintext) */
    struct obuf spill;    /* ciphertext wolfSSL did not take yet (rare) */
    struct obuf inflight, pending;
    struct bf_net_timer timer; /* connect timeout / linger */
    char peer[56];
    /* client connect */
    struct sockaddr_storage addr;
    socklen_t addrlen;
};

/* Server side: adopt an accepted fd. tls may be NULL. */
int bf_conn_init_accepted(struct conn *c, struct bf_net_loop *loop, int fd,
                          const struct conn_ops *ops, struct bf_net_stats *stats,
                          struct bf_tls_ctx *tls);
/* Client side: socket + io_uring connect to addr. sni: TLS name (may be NULL). */
int bf_conn_init_connect(struct conn *c, struct bf_net_loop *loop, const struct sockaddr *sa,
                         socklen_t salen, const struct conn_ops *ops, struct bf_net_stats *stats,
                         struct bf_tls_ctx *tls, const char *sni, int64_t timeout_ns);
/* Append output (only inside ops->produce). -ENOMEM. */
int bf_conn_write(struct conn *c, const void *p, size_t n);
/* Bytes queued for the socket (pending + in flight). */
size_t bf_conn_queued(const struct conn *c);
/* Ask for a flush before the loop next waits. */
void bf_conn_mark_dirty(struct conn *c);
/* Flush now (produce, and hand the send to the kernel) when the connection
 * is open and no send is in flight; otherwise nothing (the loop flushes as
 * usual). Inside ops->produce of any conn of the loop (loop->producing) it
 * does nothing. */
void bf_conn_flush_now(struct conn *c);
/* Graceful close: flush, TLS close_notify, SHUT_WR, linger, close. */
void bf_conn_close(struct conn *c);
/* Immediate close (err: 0 or -errno, passed to on_close). */
void bf_conn_abort(struct conn *c, int err);
bool bf_conn_is_open(const struct conn *c);
/* The peer certificate's bigfleet identity, see tls.c. */

/* ---------------------------------------------------------------- TLS */

enum bf_tls_role { BF_TLS_SERVER, BF_TLS_CLIENT };

/* Reference-counted wolfSSL context. */
int bf_tls_ctx_new(const struct bf_net_tls_config *cfg, enum bf_tls_role role,
                   struct bf_tls_ctx **out);
void bf_tls_ctx_ref(struct bf_tls_ctx *t);
/*
 * Certificate rotation (wire.md §7): at most once a second, if the cert or
 * key file's mtime changed, builds a new context from them (same CA bytes)
 * and swaps *t; open connections keep the old one until they close.
 * Returns 1 reloaded, 0 nothing to do, <0 reload failed (old one kept).
 */
int bf_tls_ctx_maybe_reload(struct bf_tls_ctx **t);
void bf_tls_ctx_unref(struct bf_tls_ctx *t);
/* true when the context verifies client certificates (mTLS server). */
bool bf_tls_ctx_mtls(const struct bf_tls_ctx *t);
/* Per-connection session, I/O callbacks bound to io (io->is_client and
 * io->out filled first). -ENOMEM / -EIO. */
int bf_tls_session_new(struct bf_tls_io *io, struct bf_tls_ctx *t, const char *sni);
void bf_tls_session_free(struct bf_tls_io *io);
/*
 * After the handshake (and the peer checks that read the certificate):
 * frees wolfSSL's handshake resources and returns to the kernel the
 * all-zero pages of the connection's WOLFSSL object and session (contents
 * unchanged). Returns the bytes given back. Loop thread of c only.
 */
size_t bf_tls_session_trim(struct bf_tls_io *io);
/* Drives the handshake. 1 done, 0 in progress (wants input), <0 failed. */
int bf_tls_handshake(struct bf_tls_io *io);
/* Decrypts what is buffered into buf (cap bytes at a time): calls
 * emit(io, p, n) per chunk, which returns <0 (error: returned), 0 (more) or
 * 1 (stop: the connection is no longer open; 0 returned). 0 ok / wants
 * more, 1 peer sent close_notify, <0 error. */
int bf_tls_read(struct bf_tls_io *io, uint8_t *buf, size_t cap,
                int (*emit)(struct bf_tls_io *io, const uint8_t *p, size_t n));
/* Encrypts n bytes and hands the records to io->out. -EIO. */
int bf_tls_write(struct bf_tls_io *io, const void *p, size_t n);
/* close_notify to io->out. */
void bf_tls_shutdown(struct bf_tls_io *io);
/*
 * The identity of a certificate (DER; parsed, not verified: give it a leaf
 * whose chain verified) by wire.md §7: its URI SANs with scheme bigfleet
 * (case-insensitive; one with an embedded NUL is not a URI) are counted
 * (saturating at INT8_MAX); exactly one is the identity: *ident gets a
 * malloc'd copy with the scheme in lower case (caller frees). Returns the
 * count (0, 1, 2+; *ident is NULL unless 1), -EINVAL if der does not parse
 * as a certificate (wolfSSL's parser; without WOLFSSL_FPKI it refuses a
 * relative URI SAN), -ENOMEM if the copy failed. Never 1 without *ident.
 */
int bf_tls_leaf_identity(const uint8_t *der, size_t len, char **ident);
/*
 * The peer's identity (bf_tls_leaf_identity of its verified leaf): 1 with
 * *ident set (caller frees), 0 or 2+ URI SANs (no identity), -1 if the peer
 * sent no certificate, -EINVAL / -ENOMEM as bf_tls_leaf_identity.
 */
int bf_tls_peer_identity(struct bf_tls_io *io, char **ident);
/* Client: the peer certificate matches name (DNS SAN or IP SAN). 0 / -EPERM. */
int bf_tls_verify_name(struct bf_tls_io *io, const char *name);
/* Negotiated ALPN is "h2" (1), none (0), or something else (-1). */
int bf_tls_alpn_h2(struct bf_tls_io *io);
/* Last wolfSSL error text for logs. */
const char *bf_tls_error_string(int ret, char *buf, size_t cap);

/* ---------------------------------------------------------------- misc */

/* Status bookkeeping shared by server and client. */
static inline void bf_stats_done(struct bf_net_stats *st, int code)
{
    if (code < 0 || code >= BF_NET_CODE_COUNT)
        code = BF_NET_UNKNOWN;
    st->calls_by_code[code]++;
    if (st->streams_open)
        st->streams_open--;
}

#endif /* BF_NET_INTERNAL_H */
