/*
 * grpc_server.c — the gRPC server (bigfleet/net.h): nghttp2 server sessions
 * driven with nghttp2_session_mem_recv/mem_send (1.52: no *2 APIs) over
 * conn.c, gRPC framing, Trailers-Only errors, grpc-timeout deadlines,
 * keepalive PINGs, GOAWAY on shutdown, identity from the mTLS peer.
 *
 * Design notes
 *   - Per connection (struct sconn): the conn, one nghttp2 session, the list
 *     of its calls, a timer (handshake/preface timeout, then keepalive).
 *     Per stream (struct bf_net_call): parser state, outbox, deadline timer;
 *     a few hundred bytes while idle, no buffers.
 *   - Outbound DATA uses NGHTTP2_DATA_FLAG_NO_COPY: payload bytes go from
 *     the call's outbox straight into the conn's output buffer. The read
 *     callback returns NGHTTP2_ERR_DEFERRED when the outbox is empty; sends
 *     resume it. Trailers are submitted from the read callback at EOF.
 *   - After our END_STREAM (trailers) on a stream the client has not
 *     half-closed, RST_STREAM(NO_ERROR) follows, as grpc-go does.
 *   - Reentrancy: user callbacks run inside nghttp2 callbacks; they may call
 *     send/finish/cancel (nghttp2_submit_* is allowed there) but the
 *     connection is never torn down from inside nghttp2. Entry points from
 *     the loop bump srv->depth; bf_net_server_free() inside a callback is
 *     finished when the depth returns to zero.
 *   - Bad input is counted in srv->stats and logged once per connection.
 *   - Idle memory (issue 18): each session allocates through sconn_mem,
 *     which gives nghttp2's frame buffer (the one 16 KiB chunk the session
 *     allocates when it is created and keeps until it is deleted) pages of
 *     its own. Once a connection has been quiet for FB_IDLE_NS and nghttp2
 *     has nothing to write (so no frame is being serialised in it), those
 *     pages go back to the kernel (MADV_DONTNEED); the next frame faults a
 *     fresh zero page in. The buffer's contents between frames are dead:
 *     nghttp2 writes every frame into it from its start before reading it.
 *   - Recycled assembly buffers (issue 18, stop 27): a message of 1 MiB or
 *     more is assembled in a fresh anonymous mapping, and first touching
 *     its pages cost more than ingesting an unchanged 50K-Need rollup on a
 *     virtual machine (docs/performance.md, "Ingest (target 3; i18-ingest,
 *     stop 27)"). A mapped buffer that comes back — a message the handler
 *     did not take (the parser's release), or a taken one freed with
 *     bf_net_msg_free on any thread (through msg_return, one slot, under
 *     a lock) — is kept as the server's spare (struct bf_grpc_spare) and the
 *     next large message on any of its connections starts in it. At most
 *     RECV_SPARE_MAX bytes are kept idle in each of the two places, whoever
 *     sent them; a buffer in use is charged to its connection's inbound
 *     budget as any other (bf_grpc_parser's take_spare), then to the
 *     handler's budget once taken.
 *   - The idle spare is charged too (stop 28): its capacity counts against
 *     the server-wide inbound budget (spare.charge = &inbound), so idle
 *     spare + partial messages <= max_inbound_buffered whatever peers do;
 *     the budget yields it (inbound.yield): a message the budget would
 *     refuse frees the idle spare first, so it never costs a peer its
 *     admission. A buffer returned through msg_return is moved into the
 *     spare (charged, or freed when it does not fit) at the next message
 *     start or the spare timer's next tick. The timer (SPARE_IDLE_NS) runs
 *     while the spare holds a buffer or one may come back, and releases a
 *     spare no message has used for a whole period: idle memory goes back
 *     to the kernel 5-10 s after the last large message.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <protobuf-c/protobuf-c.h>

#include "bigfleet/log.h"
#include "bigfleet/util.h"
#include "net/guard.h"
#include "net/h2_common.h"

#define SRV_BATCH       (128u * 1024)
#define MAX_HEADER_LIST 65536u      /* advertised and enforced on decoded request headers */
#define STALL_RATE      (64u << 10) /* bytes a second a partial message must at least move */
#define FLOOD_CLOSE_NS  (1 * BF_NS_PER_SEC)  /* GOAWAY flush time before a flood conn is cut */
#define LIMIT_LOG_NS    (10 * BF_NS_PER_SEC) /* at most one limit log line per this, per reason */
#define FB_IDLE_NS      (1 * BF_NS_PER_SEC)  /* quiet this long: frame buffer pages back */
#define FB_PAGE         4096u

/* the largest assembly buffer kept for reuse, idle, in each place (the
 * server's spare, msg_return): a 50K-Need rollup is ~7 MB */
#define RECV_SPARE_MAX (16u << 20)
/* The spare timer's period: an idle spare is released after one to two of
 * them without a message starting in it, and a returned buffer waits in
 * msg_return at most one of them before a loop charges or frees it. */
#define SPARE_IDLE_NS (5 * BF_NS_PER_SEC)

/* A taken buffer freed by its handler (bf_net_msg_free, any thread) waits
 * here until a server's loop moves it into that server's spare (take_return:
 * at the next message start, or the spare timer's next tick). One slot per
 * process: the handler's buffer outlives any one server. */
static struct {
    pthread_mutex_t mu;
    uint8_t *buf;
    size_t cap;
    unsigned servers; /* live servers: with none, a freed buffer is not kept */
    uint64_t out;     /* recyclable buffers taken (bf_net_call_take_message), not yet freed */
} msg_return = {.mu = PTHREAD_MUTEX_INITIALIZER};

static bool recyclable(size_t cap)
{
    return cap >= BF_GRPC_MMAP_MIN && cap <= RECV_SPARE_MAX;
}

struct method_ent {
    struct bf_net_method m;
    size_t path_len;
};

struct bf_net_server {
    struct bf_net_loop *loop;
    struct bf_listener *listener;
    struct bf_tls_ctx *tls;
    struct method_ent *methods;
    size_t n_methods;
    struct bf_net_server_opts o;
    struct bf_net_stats stats;
    struct bf_grpc_budget inbound;   /* partially received messages, all calls */
    struct bf_grpc_spare spare;      /* recycled assembly buffer (loop thread), charged to
                                        inbound while idle (inbound.yield) */
    struct bf_net_timer spare_timer; /* SPARE_IDLE_NS ticks while a buffer may come back */
    struct bf_list conns;
    uint32_t nconns;
    uint32_t max_method_recv;                 /* largest per-method receive limit */
    struct bf_conn_counts peers;              /* open connections per peer address */
    struct bf_conn_counts idents;             /* open connections per mTLS identity */
    int64_t peer_log_ns, ident_log_ns;        /* last limit log lines (rate-limited) */
    int64_t flood_log_ns[BF_NET_FLOOD_COUNT]; /* ... per flood kind */
    nghttp2_session_callbacks *cbs;
    nghttp2_option *h2opt;
    int depth;
    bool free_pending, destroying, shutting_down, shutdown_reported;
    struct bf_net_timer grace_timer;
    struct bf_net_timer done_timer;
    void (*shutdown_done)(void *);
    void *shutdown_arg;
    uint16_t port;
};

struct sconn {
    struct conn c;
    struct bf_net_server *srv;
    nghttp2_session *h2;
    struct bf_list link;
    struct bf_list calls;
    char *identity;
    bool identity_bad, identity_logged, bad_logged;
    bool got_settings, goaway_sent, ping_out;
    bool peer_counted, ident_counted;
    int64_t ping_sent, last_rx;
    struct bf_net_timer timer;
    struct bf_list drain_q;        /* calls whose outbox emptied (on_drain pending) */
    struct bf_grpc_budget inbound; /* this connection's share (parent: the server's) */
    struct bf_h2_guard guard;      /* frame-level flood accounting */
    uint32_t ncalls;               /* calls not yet done */
    uint8_t flood;                 /* enum bf_net_flood: closing as a flood */
    /* nghttp2's frame buffer (sconn_mem): page-aligned, released when quiet */
    uint8_t fb_pages; /* whole pages of it */
    bool fb_creating; /* inside nghttp2_session_server_new3 */
    bool fb_released; /* pages given back since the last activity */
    int64_t flood_at;
    int64_t idle_since; /* mono ns since ncalls became 0 */
    int64_t last_tx;    /* mono ns nghttp2 last had something to write */
    struct bf_cc_key peer_key, ident_key;
    uint8_t *fb;
};
/* one jemalloc size class (issue 18): a field more moves every connection to 1,024 bytes */
_Static_assert(sizeof(struct sconn) <= 896, "struct sconn: keep it in the 896-byte class");

struct bf_net_call {
    struct sconn *sc;
    const struct method_ent *me;
    struct bf_list link;
    struct bf_list drain_link;
    /* request headers */
    int64_t deadline;
    struct bf_net_timer deadline_timer;
    /* inbound */
    struct bf_grpc_parser parser;
    uint8_t *req;
    size_t req_len;
    size_t req_charged;  /* bytes of req charged to the inbound budgets */
    int64_t begun_ns;    /* headers complete */
    int64_t last_msg_ns; /* last complete inbound message */
    int64_t last_rx_ns;  /* last DATA bytes */
    int64_t part_ns;     /* a partial message started (0 = none) */
    /* during on_message of a streaming call: the assembled buffer the layer
     * owns (NULL when delivered in place) and its inbound-budget charge;
     * bf_net_call_take_message moves both to the handler (cur_taken) */
    const uint8_t *cur_msg;
    size_t cur_charge;
    struct bf_net_timer guard_timer; /* first message, idle stream, stalled message */
    /* outbound */
    struct outbox out;
    char *status_msg; /* percent-encoded */
    void *user;
    /* The 4-byte fields and the flags (one bit each) together at the end:
     * 384 bytes, a jemalloc size class below 448 (issue 18, stop 29). */
    int32_t sid;
    uint32_t n_req;
    uint32_t hdr_bytes; /* decoded request header list (name + value + 32 each) */
    int status;
    /* the flags below are bit-fields sharing one memory location: read and
     * written on the loop thread only (a write from another thread would
     * race with its neighbours) */
    /* request headers */
    bool is_post : 1, ct_ok : 1, bad_timeout : 1, encoded : 1, unknown_path : 1;
    /* inbound */
    bool remote_closed : 1;
    bool got_msg : 1; /* the first message arrived */
    bool cur_taken : 1;
    /* outbound */
    bool headers_sent : 1, deferred : 1, trailers_sent : 1, rst_sent : 1, had_bytes : 1;
    bool finished : 1; /* finish/cancel/reject decided the outcome */
    bool rejected : 1; /* answered by the layer; handler never engaged */
    bool engaged : 1;  /* handler callbacks may run */
    bool done : 1;
};
_Static_assert(sizeof(struct bf_net_call) <= 384,
               "struct bf_net_call: keep it in the 384-byte class");

static void srv_enter(struct bf_net_server *s)
{
    s->depth++;
}
static void server_destroy(struct bf_net_server *s);
static void srv_leave(struct bf_net_server *s)
{
    if (--s->depth == 0 && s->free_pending && !s->destroying)
        server_destroy(s);
}

static void sconn_log_bad(struct sconn *sc, const char *what, const char *detail)
{
    if (sc->bad_logged)
        return;
    sc->bad_logged = true;
    BF_WARN("gRPC connection: bad input", "peer=%s what=\"%s\" detail=\"%s\"", sc->c.peer, what,
            detail ? detail : "");
}

/* A warn line at most every LIMIT_LOG_NS per *last (a flood of refused
 * connections must not flood the log); the count since the last line is in it. */
static void srv_log_limited(int64_t *last, uint64_t count, const char *what, const char *peer,
                            const char *detail)
{
    int64_t now = bf_mono_ns();
    if (*last && now - *last < LIMIT_LOG_NS)
        return;
    *last = now;
    BF_WARN(what, "peer=%s detail=\"%s\" total=%llu", peer, detail, (unsigned long long)count);
}

/* The peer went over a frame limit: GOAWAY(ENHANCE_YOUR_CALM), feed nothing
 * more to HTTP/2, cut the connection if the GOAWAY is not flushed in time. */
static void sconn_flood(struct sconn *sc, int reason)
{
    struct bf_net_server *srv = sc->srv;
    if (sc->flood)
        return;
    sc->flood = (uint8_t)reason;
    srv->stats.flood_closes[reason]++;
    uint64_t total = 0;
    for (int i = 0; i < BF_NET_FLOOD_COUNT; i++)
        total += srv->stats.flood_closes[i];
    srv_log_limited(&srv->flood_log_ns[reason], total,
                    "gRPC connection closed as an HTTP/2 flood (GOAWAY ENHANCE_YOUR_CALM)",
                    sc->c.peer, bf_net_flood_name(reason));
    nghttp2_session_terminate_session(sc->h2, NGHTTP2_ENHANCE_YOUR_CALM);
    bf_conn_mark_dirty(&sc->c);
    bf_net_timer_start(&sc->timer, FLOOD_CLOSE_NS, 0);
}

/* ------------------------------------------------------------ call end */

/* Runs the spare timer while the spare holds a buffer or a taken one may
 * come back (loop thread). */
static void spare_watch(struct bf_net_server *srv)
{
    if (!srv->destroying && !bf_net_timer_active(&srv->spare_timer))
        bf_net_timer_start(&srv->spare_timer, SPARE_IDLE_NS, SPARE_IDLE_NS);
}

static void call_drop_req(struct bf_net_call *call)
{
    if (call->req_charged)
        bf_grpc_budget_refund(&call->sc->inbound, call->req_charged);
    bf_grpc_buf_free(call->req, call->req_charged);
    call->req_charged = 0;
    call->req = NULL;
}

static void call_free(struct bf_net_call *call)
{
    bf_net_timer_stop(&call->deadline_timer);
    bf_net_timer_stop(&call->guard_timer);
    bf_grpc_parser_reset(&call->parser);
    if (call->sc->srv->spare.buf) /* a partial message's buffer may have become the spare */
        spare_watch(call->sc->srv);
    outbox_clear(&call->out);
    call_drop_req(call);
    free(call->status_msg);
    free(call);
}

static void sconn_idle_arm(struct sconn *sc);

/* The stream is gone (closed, reset, or the connection died). */
static void call_done(struct bf_net_call *call, int code)
{
    if (call->done)
        return;
    call->done = true;
    struct sconn *sc = call->sc;
    struct bf_net_server *srv = sc->srv;
    bf_list_del(&call->link);
    bf_list_del(&call->drain_link);
    bf_net_timer_stop(&call->deadline_timer);
    bf_net_timer_stop(&call->guard_timer);
    if (sc->ncalls && --sc->ncalls == 0) {
        sc->idle_since = bf_mono_ns();
        sconn_idle_arm(sc);
    }
    if (sc->h2)
        nghttp2_session_set_stream_user_data(sc->h2, call->sid, NULL);
    bf_stats_done(&srv->stats, code);
    if (call->engaged && call->me->m.on_done)
        call->me->m.on_done(call, code, call->me->m.arg);
    call_free(call);
}

/* ------------------------------------------------------------ sending */

static ssize_t data_read_cb(nghttp2_session *h2, int32_t sid, uint8_t *buf, size_t length,
                            uint32_t *flags, nghttp2_data_source *src, void *ud)
{
    (void)buf;
    (void)ud;
    struct bf_net_call *call = src->ptr;
    size_t n = outbox_take(&call->out, length, flags);
    if (n == call->out.bytes) {
        if (call->finished) {
            char code[8];
            snprintf(code, sizeof code, "%d", call->status);
            nghttp2_nv tr[2] = {BF_NV("grpc-status", code, strlen(code))};
            size_t ntr = 1;
            if (call->status_msg && *call->status_msg)
                tr[ntr++] =
                    (nghttp2_nv)BF_NV("grpc-message", call->status_msg, strlen(call->status_msg));
            *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
            /* copy names/values: status_msg may be freed before the frame goes */
            for (size_t i = 0; i < ntr; i++)
                tr[i].flags = NGHTTP2_NV_FLAG_NONE;
            if (nghttp2_submit_trailer(h2, sid, tr, ntr) != 0)
                return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
            call->trailers_sent = true;
        } else if (n == 0) {
            call->deferred = true;
            return NGHTTP2_ERR_DEFERRED;
        }
    }
    return (ssize_t)n;
}

static int send_data_cb(nghttp2_session *h2, nghttp2_frame *frame, const uint8_t *framehd,
                        size_t length, nghttp2_data_source *src, void *ud)
{
    (void)h2;
    (void)frame;
    struct sconn *sc = ud;
    struct bf_net_call *call = src->ptr;
    int r = outbox_send_frame(&call->out, &sc->c, framehd, length, H2_BODY_BATCH);
    if (r)
        return r;
    if (call->out.bytes == 0 && call->had_bytes && call->engaged && call->me->m.on_drain &&
        !call->finished) {
        call->had_bytes = false;
        bf_list_del(&call->drain_link);
        bf_list_add_tail(&sc->drain_q, &call->drain_link);
    }
    return 0;
}

static int submit_headers(struct bf_net_call *call)
{
    static const char ct[] = "application/grpc";
    /* content-type is not indexed: its entry would stay in our HPACK
     * encoder's table for the connection's life (~150 bytes an idle
     * connection; issue 18, stop 29); its name is still the static table's */
    nghttp2_nv hdrs[] = {BF_NVS(":status", "200"), BF_NVS("content-type", ct)};
    hdrs[1].flags |= NGHTTP2_NV_FLAG_NO_INDEX;
    nghttp2_data_provider prd = {.source.ptr = call, .read_callback = data_read_cb};
    int r = nghttp2_submit_response(call->sc->h2, call->sid, hdrs, 2, &prd);
    if (r == 0)
        call->headers_sent = true;
    return r;
}

static void call_kick(struct bf_net_call *call)
{
    struct sconn *sc = call->sc;
    if (!call->headers_sent) {
        if (submit_headers(call) != 0)
            return;
    } else if (call->deferred) {
        call->deferred = false;
        nghttp2_session_resume_data(sc->h2, call->sid);
    }
    bf_conn_mark_dirty(&sc->c);
}

/* Trailers-Only (or a plain HTTP error when http_status != 200). */
static void submit_trailers_only(struct bf_net_call *call, int http_status)
{
    char st[8], code[8];
    snprintf(st, sizeof st, "%d", http_status);
    snprintf(code, sizeof code, "%d", call->status);
    nghttp2_nv h[4] = {
        {(uint8_t *)":status", (uint8_t *)st, 7, strlen(st), NGHTTP2_NV_FLAG_NO_COPY_NAME},
        BF_NVS("content-type", "application/grpc"),
        {(uint8_t *)"grpc-status", (uint8_t *)code, 11, strlen(code), NGHTTP2_NV_FLAG_NO_COPY_NAME},
    };
    size_t n = 3;
    if (call->status_msg && *call->status_msg)
        h[n++] = (nghttp2_nv){(uint8_t *)"grpc-message", (uint8_t *)call->status_msg, 12,
                              strlen(call->status_msg), NGHTTP2_NV_FLAG_NO_COPY_NAME};
    if (nghttp2_submit_response(call->sc->h2, call->sid, h, n, NULL) == 0) {
        call->headers_sent = true;
        call->trailers_sent = true;
    }
    bf_conn_mark_dirty(&call->sc->c);
}

static int call_set_status(struct bf_net_call *call, int code, const char *msg)
{
    call->finished = true;
    call->status = code;
    free(call->status_msg);
    call->status_msg = NULL;
    if (msg && *msg) {
        call->status_msg = bf_grpc_percent_encode(msg);
        if (!call->status_msg)
            return -ENOMEM;
    }
    return 0;
}

static int call_finish_internal(struct bf_net_call *call, int code, const char *msg,
                                bool drop_queue)
{
    if (call->finished || call->done)
        return -EPIPE;
    if (code < 0 || code >= BF_NET_CODE_COUNT)
        code = BF_NET_UNKNOWN;
    call_set_status(call, code, msg);
    if (drop_queue)
        outbox_drop_unsent(&call->out);
    if (!call->headers_sent && call->out.bytes == 0)
        submit_trailers_only(call, 200);
    else
        call_kick(call);
    return 0;
}

static void call_reject(struct bf_net_call *call, int http_status, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void call_reject(struct bf_net_call *call, int http_status, int code, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    call->rejected = true;
    call->engaged = false;
    call_set_status(call, code, msg);
    submit_trailers_only(call, http_status);
}

int bf_net_call_finish(struct bf_net_call *call, int code, const char *message)
{
    return call_finish_internal(call, code, message, false);
}

static int call_enqueue(struct bf_net_call *call, struct omsg *m)
{
    outbox_push(&call->out, m);
    call->had_bytes = true;
    call->sc->srv->stats.msgs_out++;
    call_kick(call);
    return 0;
}

int bf_net_call_send(struct bf_net_call *call, const void *msg, size_t len)
{
    if (call->finished || call->done)
        return -EPIPE;
    struct omsg *m;
    int rc = omsg_copy(msg, len, call->sc->srv->o.max_send_message, &m);
    return rc ? rc : call_enqueue(call, m);
}

int bf_net_call_send_pb(struct bf_net_call *call, const struct ProtobufCMessage *pm)
{
    if (call->finished || call->done)
        return -EPIPE;
    struct omsg *m;
    int rc = omsg_pack(pm, call->sc->srv->o.max_send_message, &m);
    return rc ? rc : call_enqueue(call, m);
}

int bf_net_call_send_lend(struct bf_net_call *call, void *msg, size_t len,
                          bf_net_release_fn release, void *arg)
{
    if (call->finished || call->done) {
        omsg_release_ext(msg, release, arg);
        return -EPIPE;
    }
    struct omsg *m;
    int rc = omsg_lend(msg, len, call->sc->srv->o.max_send_message, release, arg, &m);
    return rc ? rc : call_enqueue(call, m);
}

int bf_net_call_send_take(struct bf_net_call *call, void *msg, size_t len)
{
    return bf_net_call_send_lend(call, msg, len, NULL, NULL);
}

int bf_net_call_reply_lend(struct bf_net_call *call, void *msg, size_t len,
                           bf_net_release_fn release, void *arg)
{
    int r = bf_net_call_send_lend(call, msg, len, release, arg);
    if (r < 0)
        return r;
    return bf_net_call_finish(call, BF_NET_OK, NULL);
}

int bf_net_call_reply_take(struct bf_net_call *call, void *msg, size_t len)
{
    return bf_net_call_reply_lend(call, msg, len, NULL, NULL);
}

int bf_net_call_reply(struct bf_net_call *call, const void *msg, size_t len)
{
    int r = bf_net_call_send(call, msg, len);
    if (r < 0)
        return r;
    return bf_net_call_finish(call, BF_NET_OK, NULL);
}

int bf_net_call_reply_pb(struct bf_net_call *call, const struct ProtobufCMessage *m)
{
    int r = bf_net_call_send_pb(call, m);
    if (r < 0)
        return r;
    return bf_net_call_finish(call, BF_NET_OK, NULL);
}

void bf_net_call_cancel(struct bf_net_call *call)
{
    if (call->done || call->rst_sent)
        return;
    call->rst_sent = true;
    if (!call->finished)
        call_set_status(call, BF_NET_CANCELLED, NULL);
    nghttp2_submit_rst_stream(call->sc->h2, NGHTTP2_FLAG_NONE, call->sid, NGHTTP2_CANCEL);
    bf_conn_mark_dirty(&call->sc->c);
}

static uint32_t method_max(const struct bf_net_call *call)
{
    uint32_t smax = call->sc->srv->o.max_recv_message;
    uint32_t m = call->me ? call->me->m.max_recv_message : 0;
    return m && m < smax ? m : smax;
}

void bf_net_call_set_max_recv(struct bf_net_call *call, uint32_t max)
{
    uint32_t mm = method_max(call);
    call->parser.max = max && max < mm ? max : mm;
}

size_t bf_net_call_outbox_bytes(const struct bf_net_call *call)
{
    return call->out.bytes;
}
const char *bf_net_call_identity(const struct bf_net_call *call)
{
    return call->sc->identity;
}
const char *bf_net_call_path(const struct bf_net_call *call)
{
    return call->me ? call->me->m.path : "";
}
const char *bf_net_call_peer(const struct bf_net_call *call)
{
    return call->sc->c.peer;
}
int64_t bf_net_call_deadline(const struct bf_net_call *call)
{
    return call->deadline;
}
bool bf_net_call_finished(const struct bf_net_call *call)
{
    return call->finished || call->done;
}
void bf_net_call_set_user(struct bf_net_call *call, void *user)
{
    call->user = user;
}
void *bf_net_call_user(const struct bf_net_call *call)
{
    return call->user;
}

/* ------------------------------------------------------------ receiving */

static void deadline_cb(struct bf_net_timer *t, void *arg)
{
    (void)t;
    struct bf_net_call *call = arg;
    struct bf_net_server *srv = call->sc->srv;
    srv_enter(srv);
    if (!call->finished && !call->done) {
        /* queued messages are pointless now: drop what HTTP/2 has not taken */
        call_finish_internal(call, BF_NET_DEADLINE_EXCEEDED, "deadline exceeded", true);
    }
    srv_leave(srv);
}

static bool single_request(const struct bf_net_call *call)
{
    return call->me->m.kind == BF_NET_UNARY || call->me->m.kind == BF_NET_SERVER_STREAMING;
}

/*
 * The call's time limits on inbound traffic (first message, idle stream,
 * stalled message). Returns the next instant one could fire (0 = none) and,
 * if one fired, finishes the call.
 */
static int64_t call_guard_check(struct bf_net_call *call, int64_t now)
{
    struct bf_net_server *srv = call->sc->srv;
    const struct bf_net_server_opts *o = &srv->o;
    if (call->finished || call->done || !call->engaged)
        return 0;
    int64_t next = 0;
#define NEXT(t)                                                                                    \
    do {                                                                                           \
        if (!next || (t) < next)                                                                   \
            next = (t);                                                                            \
    } while (0)
    bool single = single_request(call);
    bool first_done = single ? call->remote_closed : call->got_msg;
    if (o->first_message_timeout_ns > 0 && !first_done) {
        int64_t at = call->begun_ns + o->first_message_timeout_ns;
        if (now >= at) {
            srv->stats.first_message_timeouts++;
            char m[96];
            snprintf(m, sizeof m, "no request message within %lld ms of the call's start",
                     (long long)(o->first_message_timeout_ns / BF_NS_PER_MS));
            sconn_log_bad(call->sc, "first message timeout", bf_net_call_path(call));
            bf_grpc_parser_reset(&call->parser);
            call_finish_internal(call, BF_NET_DEADLINE_EXCEEDED, m, true);
            return 0;
        }
        NEXT(at);
    }
    if (o->stream_idle_timeout_ns > 0 && !single && call->got_msg && !call->remote_closed) {
        int64_t at = call->last_msg_ns + o->stream_idle_timeout_ns;
        if (now >= at) {
            srv->stats.idle_stream_timeouts++;
            char m[96];
            snprintf(m, sizeof m, "no message on the stream for %lld s",
                     (long long)(o->stream_idle_timeout_ns / BF_NS_PER_SEC));
            BF_INFO("gRPC call: idle stream ended", "peer=%s path=%s", call->sc->c.peer,
                    bf_net_call_path(call));
            bf_grpc_parser_reset(&call->parser);
            call_finish_internal(call, BF_NET_DEADLINE_EXCEEDED, m, true);
            return 0;
        }
        NEXT(at);
    }
    if (o->msg_stall_timeout_ns > 0 && call->part_ns) {
        int64_t stall_at = call->last_rx_ns + o->msg_stall_timeout_ns;
        int64_t total_at = call->part_ns + o->msg_stall_timeout_ns +
                           (int64_t)(call->parser.msg_len / STALL_RATE) * BF_NS_PER_SEC;
        int64_t at = stall_at < total_at ? stall_at : total_at;
        if (now >= at) {
            srv->stats.stalled_messages++;
            char m[160];
            snprintf(m, sizeof m,
                     "message stopped arriving (%zu of %u bytes after %lld ms; partial messages "
                     "hold server memory)",
                     call->parser.have, call->parser.msg_len,
                     (long long)((now - call->part_ns) / BF_NS_PER_MS));
            sconn_log_bad(call->sc, "stalled gRPC message", m);
            bf_grpc_parser_reset(&call->parser);
            call->part_ns = 0;
            call_finish_internal(call, BF_NET_RESOURCE_EXHAUSTED, m, true);
            return 0;
        }
        NEXT(at);
    }
#undef NEXT
    return next;
}

static void guard_cb(struct bf_net_timer *t, void *arg)
{
    (void)t;
    struct bf_net_call *call = arg;
    struct bf_net_server *srv = call->sc->srv;
    srv_enter(srv);
    int64_t now = bf_mono_ns();
    int64_t next = call_guard_check(call, now);
    if (next && !call->done)
        bf_net_timer_start(&call->guard_timer, next - now, 0);
    srv_leave(srv);
}

/* (Re)arms the guard timer if a limit may now fire earlier than it is set for. */
static void call_guard_arm(struct bf_net_call *call)
{
    int64_t now = bf_mono_ns();
    int64_t next = call_guard_check(call, now);
    if (!next || call->done)
        return;
    if (!bf_net_timer_active(&call->guard_timer) || call->guard_timer.expiry > next)
        bf_net_timer_start(&call->guard_timer, next - now, 0);
}

static void call_begin(struct bf_net_call *call)
{
    struct sconn *sc = call->sc;
    struct bf_net_server *srv = sc->srv;
    if (!call->is_post) {
        srv->stats.bad_messages++;
        call_reject(call, 405, BF_NET_INTERNAL, "gRPC requires method POST");
        return;
    }
    if (!call->ct_ok) {
        srv->stats.bad_messages++;
        call_reject(call, 415, BF_NET_INVALID_ARGUMENT, "invalid gRPC request content-type");
        return;
    }
    if (call->bad_timeout) {
        srv->stats.bad_messages++;
        call_reject(call, 200, BF_NET_INTERNAL, "malformed grpc-timeout");
        return;
    }
    if (sc->identity_bad) {
        srv->stats.identity_rejected++;
        if (!sc->identity_logged) {
            sc->identity_logged = true;
            BF_WARN("mTLS peer rejected: certificate must carry exactly one bigfleet:// URI SAN",
                    "peer=%s", sc->c.peer);
        }
        call_reject(call, 200, BF_NET_PERMISSION_DENIED,
                    "client certificate must carry exactly one bigfleet:// URI SAN");
        return;
    }
    if (!call->me) {
        call_reject(call, 200, BF_NET_UNIMPLEMENTED, "unknown method");
        return;
    }
    call->engaged = true;
    call->parser.max = method_max(call);
    call->begun_ns = bf_mono_ns();
    if (call->deadline) {
        int64_t left = call->deadline - bf_mono_ns();
        bf_net_timer_start(&call->deadline_timer, left, 0);
    }
    if (call->me->m.on_call)
        call->me->m.on_call(call, call->me->m.arg);
    if (!call->done)
        call_guard_arm(call);
}

static void call_remote_end(struct bf_net_call *call)
{
    call->remote_closed = true;
    if (!call->engaged || call->finished || call->done)
        return;
    struct bf_net_server *srv = call->sc->srv;
    if (!bf_grpc_parser_idle(&call->parser)) {
        srv->stats.bad_messages++;
        sconn_log_bad(call->sc, "truncated gRPC message", bf_net_call_path(call));
        call_finish_internal(call, BF_NET_INTERNAL, "truncated gRPC message", true);
        return;
    }
    if (single_request(call)) {
        if (call->n_req != 1) {
            srv->stats.bad_messages++;
            call_finish_internal(call, BF_NET_INTERNAL,
                                 call->n_req ? "too many request messages for a unary method"
                                             : "missing request message",
                                 true);
            return;
        }
        uint8_t *req = call->req;
        size_t charged = call->req_charged;
        call->req = NULL;
        call->req_charged = 0;
        struct sconn *sc = call->sc;
        call->me->m.on_message(call, req ? req : (const uint8_t *)"", call->req_len,
                               call->me->m.arg);
        bf_grpc_buf_free(req, charged);
        if (charged)
            bf_grpc_budget_refund(&sc->inbound, charged);
        if (call->done)
            return;
    }
    if (call->me->m.on_half_close && !call->done)
        call->me->m.on_half_close(call, call->me->m.arg);
}

static int on_parsed(void *arg, const uint8_t *msg, size_t len, bool compressed)
{
    struct bf_net_call *call = arg;
    struct bf_net_server *srv = call->sc->srv;
    if (call->finished || call->done)
        return -1; /* an earlier message of this DATA frame finished the call */
    srv->stats.msgs_in++;
    call->got_msg = true;
    call->last_msg_ns = bf_mono_ns();
    if (compressed) {
        srv->stats.bad_messages++;
        return call->encoded ? BF_NET_UNIMPLEMENTED : BF_NET_INTERNAL;
    }
    if (single_request(call)) {
        if (++call->n_req > 1)
            return BF_NET_INTERNAL;
        /* held until the half-close, charged like a partial message: an
         * assembled message's buffer is taken over with its charge */
        if (msg && msg == call->parser.msg_owned) {
            call->req = (uint8_t *)msg;
            call->req_charged = call->parser.msg_charge;
            call->req_len = len;
            return BF_GRPC_MSG_KEPT;
        }
        size_t charge = len ? len : 1;
        const struct bf_grpc_budget *over = bf_grpc_budget_charge(&call->sc->inbound, charge);
        if (over) {
            call->parser.over_budget = true;
            call->parser.refused_by = over;
            return BF_NET_RESOURCE_EXHAUSTED;
        }
        call->req = bf_grpc_buf_alloc(charge);
        if (!call->req) {
            bf_grpc_budget_refund(&call->sc->inbound, charge);
            return BF_NET_RESOURCE_EXHAUSTED;
        }
        call->req_charged = charge;
        memcpy(call->req, msg, len);
        call->req_len = len;
        return 0;
    }
    call->cur_msg = msg && msg == call->parser.msg_owned ? msg : NULL;
    call->cur_charge = call->cur_msg ? call->parser.msg_charge : 0;
    call->cur_taken = false;
    call->me->m.on_message(call, msg, len, call->me->m.arg);
    bool taken = call->cur_taken;
    call->cur_msg = NULL;
    call->cur_charge = 0;
    call->cur_taken = false;
    /* a taken buffer is the handler's: KEPT stops the parser freeing it. A
     * call the handler finished gets no more messages (the check above). */
    return taken ? BF_GRPC_MSG_KEPT : (call->finished || call->done) ? -1 : 0;
}

int bf_net_call_take_message(struct bf_net_call *call, const uint8_t *msg,
                             struct bf_net_msg_buf *out)
{
    if (!call->cur_msg || msg != call->cur_msg || call->cur_taken)
        return -ENOENT;
    /* the handler accounts for these bytes from now on (net.h) */
    if (call->cur_charge)
        bf_grpc_budget_refund(&call->sc->inbound, call->cur_charge);
    if (recyclable(call->cur_charge)) {
        pthread_mutex_lock(&msg_return.mu);
        msg_return.out++; /* may come back through msg_return: the timer drains it */
        pthread_mutex_unlock(&msg_return.mu);
        spare_watch(call->sc->srv);
    }
    out->base = (uint8_t *)call->cur_msg;
    out->cap = call->cur_charge;
    call->cur_taken = true;
    return 0;
}

void bf_net_msg_free(struct bf_net_msg_buf *b)
{
    uint8_t *old = NULL;
    size_t old_cap = 0;
    if (b->base && recyclable(b->cap)) {
        /* kept for the next large message (the larger of two) */
        pthread_mutex_lock(&msg_return.mu);
        if (msg_return.out)
            msg_return.out--;
        if (!msg_return.servers) {
            old = b->base; /* no server left to reuse it */
            old_cap = b->cap;
        } else if (!msg_return.buf || msg_return.cap < b->cap) {
            old = msg_return.buf;
            old_cap = msg_return.cap;
            msg_return.buf = b->base;
            msg_return.cap = b->cap;
        } else {
            old = b->base;
            old_cap = b->cap;
        }
        pthread_mutex_unlock(&msg_return.mu);
    } else {
        old = b->base;
        old_cap = b->cap;
    }
    bf_grpc_buf_free(old, old_cap); /* outside the lock: a munmap is not free */
    b->base = NULL;
    b->cap = 0;
}

/* Moves a returned buffer into the server's spare, where it is charged to
 * the inbound budget (once per message start and per spare tick: an
 * uncontended lock). bf_grpc_spare_put keeps the larger of the two and frees
 * the other, or frees it when the budget is in use by messages. */
static void take_return(struct bf_net_server *srv)
{
    pthread_mutex_lock(&msg_return.mu);
    uint8_t *buf = msg_return.buf;
    size_t cap = msg_return.cap;
    msg_return.buf = NULL;
    msg_return.cap = 0;
    pthread_mutex_unlock(&msg_return.mu);
    if (buf) {
        bf_grpc_spare_put(&srv->spare, buf, cap);
        spare_watch(srv);
    }
}

static void spare_timer_cb(struct bf_net_timer *t, void *arg)
{
    (void)t;
    struct bf_net_server *srv = arg;
    bool held = bf_grpc_spare_tick(&srv->spare); /* first: a buffer drained below is kept */
    take_return(srv);
    pthread_mutex_lock(&msg_return.mu);
    bool more = msg_return.out > 0 || msg_return.buf;
    pthread_mutex_unlock(&msg_return.mu);
    if (!held && !srv->spare.buf && !more)
        bf_net_timer_stop(&srv->spare_timer);
}

static int on_data_chunk_cb(nghttp2_session *h2, uint8_t flags, int32_t sid, const uint8_t *data,
                            size_t len, void *ud)
{
    (void)flags;
    (void)ud;
    struct bf_net_call *call = nghttp2_session_get_stream_user_data(h2, sid);
    if (!call || !call->engaged || call->finished || call->done)
        return 0;
    struct sconn *sc = call->sc;
    call->last_rx_ns = bf_mono_ns();
    if (bf_grpc_parser_idle(&call->parser))
        take_return(sc->srv); /* a message may start in this chunk */
    int r = bf_grpc_parser_feed(&call->parser, data, len, on_parsed, call);
    if (sc->srv->spare.buf) /* a finished message's buffer may have become the spare */
        spare_watch(sc->srv);
    if (r == 0 && !call->done) {
        if (bf_grpc_parser_idle(&call->parser)) {
            call->part_ns = 0;
        } else if (!call->part_ns || call->last_msg_ns >= call->part_ns) {
            /* a partial message began here (maybe right after one completed) */
            call->part_ns = call->last_rx_ns;
            call_guard_arm(call);
        }
    }
    if (r > 0 && !call->done) {
        struct bf_net_server *srv = sc->srv;
        const char *msg = "bad gRPC message";
        char buf[128];
        if (r == BF_NET_RESOURCE_EXHAUSTED && call->parser.over_budget &&
            call->parser.refused_by == &sc->inbound) {
            srv->stats.inbound_conn_refusals++;
            snprintf(buf, sizeof buf,
                     "connection's share of the inbound buffer budget exhausted (%zu of %zu "
                     "bytes in use)",
                     sc->inbound.used, sc->inbound.max);
            msg = buf;
            sconn_log_bad(sc, "connection inbound budget exhausted", msg);
        } else if (r == BF_NET_RESOURCE_EXHAUSTED && call->parser.over_budget) {
            snprintf(buf, sizeof buf,
                     "server inbound buffer budget exhausted (%zu of %zu bytes in use)",
                     srv->inbound.used, srv->inbound.max);
            msg = buf;
            sconn_log_bad(sc, "inbound buffer budget exhausted", msg);
        } else if (r == BF_NET_RESOURCE_EXHAUSTED) {
            srv->stats.oversize_messages++;
            snprintf(buf, sizeof buf, "received message larger than max (%u vs. %u)",
                     call->parser.msg_len, call->parser.max);
            msg = buf;
            sconn_log_bad(call->sc, "oversize gRPC message", msg);
        } else if (r == BF_NET_UNIMPLEMENTED || (r == BF_NET_INTERNAL && call->n_req <= 1)) {
            msg = call->n_req > 1 ? "too many request messages for a unary method"
                                  : "compressed messages are not supported";
        } else if (r == BF_NET_INTERNAL) {
            msg = "too many request messages for a unary method";
        }
        bf_grpc_parser_reset(&call->parser);
        call->part_ns = 0;
        call_finish_internal(call, r, msg, true);
    }
    return 0;
}

static int on_begin_headers_cb(nghttp2_session *h2, const nghttp2_frame *frame, void *ud)
{
    struct sconn *sc = ud;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    struct bf_net_call *call = calloc(1, sizeof *call);
    if (!call)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    call->sc = sc;
    call->sid = frame->hd.stream_id;
    bf_list_init(&call->drain_link);
    bf_list_add_tail(&sc->calls, &call->link);
    bf_grpc_parser_init(&call->parser, sc->srv->o.max_recv_message, &sc->inbound);
    call->parser.spare = &sc->srv->spare;
    bf_timer_init(&call->deadline_timer, sc->c.loop, deadline_cb, call);
    bf_timer_init(&call->guard_timer, sc->c.loop, guard_cb, call);
    call->unknown_path = true;
    sc->ncalls++;
    nghttp2_session_set_stream_user_data(h2, call->sid, call);
    sc->srv->stats.streams_started++;
    sc->srv->stats.streams_open++;
    return 0;
}

static int on_header_cb(nghttp2_session *h2, const nghttp2_frame *frame, const uint8_t *name,
                        size_t nlen, const uint8_t *value, size_t vlen, uint8_t flags, void *ud)
{
    (void)flags;
    struct sconn *sc = ud;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0; /* client trailers: nothing we use */
    struct bf_net_call *call = nghttp2_session_get_stream_user_data(h2, frame->hd.stream_id);
    if (!call)
        return 0;
    /* the decoded list is bounded as advertised (an HPACK bomb: small
     * references to a large table entry) */
    if (call->hdr_bytes > MAX_HEADER_LIST)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* refused already */
    call->hdr_bytes +=
        (uint32_t)(nlen + vlen + 32 > MAX_HEADER_LIST ? MAX_HEADER_LIST + 1 : nlen + vlen + 32);
    if (call->hdr_bytes > MAX_HEADER_LIST) {
        sc->srv->stats.header_list_refusals++;
        sconn_log_bad(sc, "request header list too large", "over 64 KiB decoded");
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* RST_STREAM; the connection goes on */
    }
    if (h2_name_is(name, nlen, ":method")) {
        call->is_post = vlen == 4 && memcmp(value, "POST", 4) == 0;
    } else if (h2_name_is(name, nlen, ":path")) {
        for (size_t i = 0; i < sc->srv->n_methods; i++) {
            const struct method_ent *me = &sc->srv->methods[i];
            if (me->path_len == vlen && memcmp(me->m.path, value, vlen) == 0) {
                call->me = me;
                break;
            }
        }
    } else if (h2_name_is(name, nlen, "content-type")) {
        call->ct_ok = bf_grpc_content_type_ok(value, vlen);
    } else if (h2_name_is(name, nlen, "grpc-timeout")) {
        int64_t ns;
        if (bf_grpc_timeout_parse((const char *)value, vlen, &ns) < 0) {
            call->bad_timeout = true;
        } else {
            int64_t now = bf_mono_ns();
            call->deadline = ns > INT64_MAX - now ? INT64_MAX : now + ns;
        }
    } else if (h2_name_is(name, nlen, "grpc-encoding")) {
        call->encoded = !(vlen == 8 && memcmp(value, "identity", 8) == 0);
    }
    return 0;
}

static int on_frame_recv_cb(nghttp2_session *h2, const nghttp2_frame *frame, void *ud)
{
    struct sconn *sc = ud;
    switch (frame->hd.type) {
    case NGHTTP2_HEADERS: {
        struct bf_net_call *call = nghttp2_session_get_stream_user_data(h2, frame->hd.stream_id);
        if (!call)
            break;
        if (frame->headers.cat == NGHTTP2_HCAT_REQUEST)
            call_begin(call);
        if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)
            call_remote_end(call);
        break;
    }
    case NGHTTP2_DATA:
        if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) {
            struct bf_net_call *call =
                nghttp2_session_get_stream_user_data(h2, frame->hd.stream_id);
            if (call)
                call_remote_end(call);
        }
        break;
    case NGHTTP2_SETTINGS:
        if (!(frame->hd.flags & NGHTTP2_FLAG_ACK) && !sc->got_settings) {
            sc->got_settings = true;
            /* the handshake limit is met: the timer now serves keepalive and idleness */
            bf_net_timer_start(&sc->timer, 0, 0);
        }
        break;
    case NGHTTP2_PING:
        if (frame->hd.flags & NGHTTP2_FLAG_ACK)
            sc->ping_out = false;
        break;
    default:
        break;
    }
    return 0;
}

static int on_frame_send_cb(nghttp2_session *h2, const nghttp2_frame *frame, void *ud)
{
    struct sconn *sc = ud;
    if (frame->hd.type == NGHTTP2_GOAWAY && frame->goaway.error_code != NGHTTP2_NO_ERROR) {
        sc->srv->stats.protocol_errors++;
        sconn_log_bad(sc, "HTTP/2 connection error",
                      nghttp2_http2_strerror(frame->goaway.error_code));
    } else if (frame->hd.type == NGHTTP2_HEADERS && (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
        struct bf_net_call *call = nghttp2_session_get_stream_user_data(h2, frame->hd.stream_id);
        /* our side is complete: stop a client that is still sending */
        if (call && !call->remote_closed && !call->rst_sent) {
            call->rst_sent = true;
            nghttp2_submit_rst_stream(h2, NGHTTP2_FLAG_NONE, call->sid, NGHTTP2_NO_ERROR);
        }
    }
    return 0;
}

static int on_stream_close_cb(nghttp2_session *h2, int32_t sid, uint32_t error_code, void *ud)
{
    (void)ud;
    struct bf_net_call *call = nghttp2_session_get_stream_user_data(h2, sid);
    if (!call)
        return 0;
    int code;
    if (call->finished && (call->trailers_sent || call->rst_sent))
        code = call->status;
    else if (error_code == NGHTTP2_NO_ERROR && call->finished)
        code = call->status;
    else
        code = BF_NET_CANCELLED; /* the client reset the stream or the session failed it */
    if (!call->finished && error_code != NGHTTP2_NO_ERROR && error_code != NGHTTP2_CANCEL &&
        error_code != NGHTTP2_REFUSED_STREAM) {
        call->sc->srv->stats.protocol_errors++;
        sconn_log_bad(call->sc, "stream reset with error", nghttp2_http2_strerror(error_code));
    }
    call_done(call, code);
    return 0;
}

static int on_begin_frame_cb(nghttp2_session *h2, const nghttp2_frame_hd *hd, void *ud)
{
    (void)h2;
    struct sconn *sc = ud;
    if (sc->flood)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    int r =
        bf_h2_guard_frame(&sc->guard, hd->type, hd->flags, hd->stream_id, hd->length, bf_mono_ns());
    if (r == 0)
        return 0;
    sconn_flood(sc, r);
    return NGHTTP2_ERR_CALLBACK_FAILURE; /* stop before nghttp2 acts on the frame */
}

static int on_invalid_frame_cb(nghttp2_session *h2, const nghttp2_frame *frame, int lib_error,
                               void *ud)
{
    (void)h2;
    (void)frame;
    struct sconn *sc = ud;
    sconn_log_bad(sc, "invalid HTTP/2 frame", nghttp2_strerror(lib_error));
    return 0;
}

/* ------------------------------------------------------------ keepalive */

/* ------------------------------------------------------------ nghttp2 memory */

static void *sconn_mem_malloc(size_t n, void *ud)
{
    struct sconn *sc = ud;
    if (sc->fb_creating && !sc->fb && n >= 4 * FB_PAGE && n < 255 * FB_PAGE) {
        /* the frame buffer chunk: pages of its own so that they can be released */
        size_t sz = (n + FB_PAGE - 1) & ~(size_t)(FB_PAGE - 1);
        sc->fb = aligned_alloc(FB_PAGE, sz);
        sc->fb_pages = sc->fb ? (uint8_t)(n / FB_PAGE) : 0;
        return sc->fb;
    }
    return malloc(n);
}

static void sconn_mem_free(void *p, void *ud)
{
    struct sconn *sc = ud;
    if (p && p == sc->fb) {
        sc->fb = NULL;
        sc->fb_pages = 0;
    }
    free(p);
}

static void *sconn_mem_calloc(size_t n, size_t sz, void *ud)
{
    (void)ud;
    return calloc(n, sz);
}

static void *sconn_mem_realloc(void *p, size_t n, void *ud)
{
    struct sconn *sc = ud;
    if (!p) /* nghttp2 allocates its buffers with realloc(NULL, n) */
        return sconn_mem_malloc(n, ud);
    if (p == sc->fb) { /* nghttp2 does not resize it; if it ever does, forget it */
        sc->fb = NULL;
        sc->fb_pages = 0;
    }
    return realloc(p, n);
}

/* Gives the frame buffer's whole pages back when nghttp2 has nothing to
 * write (no frame lives in it). */
static void sconn_fb_release(struct sconn *sc)
{
    if (!sc->fb || sc->fb_released || !sc->h2 || nghttp2_session_want_write(sc->h2))
        return;
    size_t len = (size_t)sc->fb_pages * FB_PAGE;
    if (len && madvise(sc->fb, len, MADV_DONTNEED) == 0) {
        sc->fb_released = true;
        sc->srv->stats.idle_buffer_releases++;
    }
}

/* Something was received or is to be sent: the frame buffer is in use
 * again; release it after FB_IDLE_NS of quiet (sconn_timer_cb). */
static void sconn_fb_active(struct sconn *sc, int64_t now)
{
    sc->last_tx = now;
    if (!sc->fb_released)
        return;
    sc->fb_released = false;
    if (!sc->got_settings || sc->flood || sc->c.state != C_OPEN)
        return;
    int64_t at = now + FB_IDLE_NS;
    if (!bf_net_timer_active(&sc->timer) || sc->timer.expiry > at)
        bf_net_timer_start(&sc->timer, FB_IDLE_NS, 0);
}

static void sconn_timer_cb(struct bf_net_timer *t, void *arg)
{
    (void)t;
    struct sconn *sc = arg;
    struct bf_net_server *srv = sc->srv;
    srv_enter(srv);
    int64_t now = bf_mono_ns();
    int64_t next = 0;
    if (sc->flood) {
        bf_conn_abort(&sc->c, -ECONNRESET); /* the GOAWAY did not flush in time */
        goto out;
    }
    if (!sc->got_settings) {
        if (sc->c.tio.ssl && !sc->c.tls_done)
            srv->stats.handshake_failures++;
        else
            srv->stats.protocol_errors++;
        sconn_log_bad(sc, "handshake timeout", "no HTTP/2 preface in time");
        bf_conn_abort(&sc->c, -ETIMEDOUT);
        goto out;
    }
    if (srv->o.keepalive_ns > 0) {
        if (sc->ping_out) {
            if (now - sc->ping_sent >= srv->o.keepalive_timeout_ns) {
                srv->stats.keepalive_timeouts++;
                BF_INFO("gRPC connection: keepalive timeout", "peer=%s", sc->c.peer);
                bf_conn_abort(&sc->c, -ETIMEDOUT);
                goto out;
            }
            next = sc->ping_sent + srv->o.keepalive_timeout_ns;
        } else if (now - sc->last_rx >= srv->o.keepalive_ns) {
            sc->ping_out = true;
            sc->ping_sent = now;
            nghttp2_submit_ping(sc->h2, NGHTTP2_FLAG_NONE, NULL);
            bf_conn_mark_dirty(&sc->c);
            next = now + srv->o.keepalive_timeout_ns;
        } else {
            next = sc->last_rx + srv->o.keepalive_ns;
        }
    }
    if (sc->fb && !sc->fb_released) {
        int64_t quiet = sc->last_rx > sc->last_tx ? sc->last_rx : sc->last_tx;
        int64_t at = quiet + FB_IDLE_NS;
        if (now >= at)
            sconn_fb_release(sc);
        if (!sc->fb_released) {
            if (now >= at)
                at = now + FB_IDLE_NS; /* output pending: look again later */
            if (!next || at < next)
                next = at;
        }
    }
    if (srv->o.conn_idle_timeout_ns > 0 && sc->ncalls == 0 && !sc->goaway_sent) {
        int64_t at = sc->idle_since + srv->o.conn_idle_timeout_ns;
        if (now >= at) {
            srv->stats.conns_idle_closed++;
            BF_INFO("gRPC connection closed: no call for the idle timeout", "peer=%s idle_s=%lld",
                    sc->c.peer, (long long)(srv->o.conn_idle_timeout_ns / BF_NS_PER_SEC));
            sc->goaway_sent = true;
            nghttp2_session_terminate_session(sc->h2, NGHTTP2_NO_ERROR);
            bf_conn_mark_dirty(&sc->c);
        } else if (!next || at < next) {
            next = at;
        }
    }
    if (next)
        bf_net_timer_start(&sc->timer, next - now, 0);
out:
    srv_leave(srv);
}

/* The connection just became idle: make sure the timer looks at it in time. */
static void sconn_idle_arm(struct sconn *sc)
{
    struct bf_net_server *srv = sc->srv;
    if (srv->o.conn_idle_timeout_ns <= 0 || !sc->got_settings || sc->flood || sc->goaway_sent ||
        sc->c.state != C_OPEN)
        return;
    int64_t at = sc->idle_since + srv->o.conn_idle_timeout_ns;
    if (!bf_net_timer_active(&sc->timer) || sc->timer.expiry > at)
        bf_net_timer_start(&sc->timer, at - bf_mono_ns(), 0);
}

/* ------------------------------------------------------------ conn ops */

static int sconn_on_ready(struct conn *c)
{
    struct sconn *sc = BF_CONTAINER_OF(c, struct sconn, c);
    struct bf_net_server *srv = sc->srv;
    if (bf_tls_alpn_h2(&c->tio) < 0) {
        srv->stats.handshake_failures++;
        sconn_log_bad(sc, "TLS ALPN", "peer did not negotiate h2");
        return -EPROTO;
    }
    if (bf_tls_ctx_mtls(srv->tls)) {
        int n = bf_tls_peer_identity(&c->tio, &sc->identity);
        if (n != 1) {
            sc->identity_bad = true;
            BF_WARN("mTLS peer identity invalid", "peer=%s bigfleet_uris=%d", c->peer, n);
        } else if (srv->o.max_conns_per_identity) {
            struct bf_cc_key k;
            bf_cc_key_str(&k, sc->identity);
            if (bf_cc_get(&srv->idents, &k) >= srv->o.max_conns_per_identity) {
                srv->stats.conns_identity_limited++;
                char d[200];
                snprintf(d, sizeof d, "%s already holds %u connections", sc->identity,
                         srv->o.max_conns_per_identity);
                srv_log_limited(&srv->ident_log_ns, srv->stats.conns_identity_limited,
                                "gRPC connection refused: per-identity connection limit", c->peer,
                                d);
                return -EPERM;
            }
            if (bf_cc_inc(&srv->idents, &k) > 0) {
                sc->ident_key = k;
                sc->ident_counted = true;
            }
        }
    }
    return 0;
}

static int sconn_on_data(struct conn *c, const uint8_t *p, size_t n)
{
    struct sconn *sc = BF_CONTAINER_OF(c, struct sconn, c);
    struct bf_net_server *srv = sc->srv;
    if (sc->flood)
        return 0; /* closing as a flood: nothing more reaches HTTP/2 */
    sc->last_rx = bf_mono_ns();
    sconn_fb_active(sc, sc->last_rx);
    srv_enter(srv);
    ssize_t r = nghttp2_session_mem_recv(sc->h2, p, n);
    int ret = 0;
    if (r < 0 && sc->flood) {
        bf_conn_mark_dirty(c); /* flush the GOAWAY; sconn_done() then closes */
    } else if (r < 0) {
        srv->stats.protocol_errors++;
        sconn_log_bad(sc,
                      r == NGHTTP2_ERR_BAD_CLIENT_MAGIC ? "bad HTTP/2 connection preface"
                                                        : "HTTP/2 error",
                      nghttp2_strerror((int)r));
        ret = -EPROTO;
    }
    srv_leave(srv);
    return ret;
}

static int sconn_produce(struct conn *c)
{
    struct sconn *sc = BF_CONTAINER_OF(c, struct sconn, c);
    struct bf_net_server *srv = sc->srv;
    srv_enter(srv);
    if (nghttp2_session_want_write(sc->h2))
        sconn_fb_active(sc, bf_mono_ns());
    int r = h2_produce(c, sc->h2, SRV_BATCH);
    /* on_drain: outside nghttp2, after the output step */
    while (r == 0 && !bf_list_empty(&sc->drain_q) && c->state == C_OPEN) {
        struct bf_net_call *call =
            BF_CONTAINER_OF(sc->drain_q.next, struct bf_net_call, drain_link);
        bf_list_del(&call->drain_link);
        if (call->engaged && !call->done && call->out.bytes == 0 && call->me->m.on_drain)
            call->me->m.on_drain(call, call->me->m.arg);
    }
    srv_leave(srv);
    return r;
}

static bool sconn_done(struct conn *c)
{
    struct sconn *sc = BF_CONTAINER_OF(c, struct sconn, c);
    return !nghttp2_session_want_read(sc->h2) && !nghttp2_session_want_write(sc->h2);
}

static void server_check_shutdown(struct bf_net_server *srv);

static void sconn_on_close(struct conn *c, int err)
{
    (void)err;
    struct sconn *sc = BF_CONTAINER_OF(c, struct sconn, c);
    struct bf_net_server *srv = sc->srv;
    srv_enter(srv);
    bf_net_timer_stop(&sc->timer);
    while (!bf_list_empty(&sc->calls)) {
        struct bf_net_call *call = BF_CONTAINER_OF(sc->calls.next, struct bf_net_call, link);
        call_done(call, call->finished && call->trailers_sent ? call->status : BF_NET_CANCELLED);
    }
    nghttp2_session_del(sc->h2);
    sc->h2 = NULL;
    if (sc->peer_counted)
        bf_cc_dec(&srv->peers, &sc->peer_key);
    if (sc->ident_counted)
        bf_cc_dec(&srv->idents, &sc->ident_key);
    sc->peer_counted = sc->ident_counted = false;
    bf_list_del(&sc->link);
    srv->nconns--;
    server_check_shutdown(srv);
    srv_leave(srv);
}

static void sconn_release(struct conn *c)
{
    struct sconn *sc = BF_CONTAINER_OF(c, struct sconn, c);
    free(sc->identity);
    free(sc);
}

static const struct conn_ops sconn_ops = {
    .on_ready = sconn_on_ready,
    .on_data = sconn_on_data,
    .produce = sconn_produce,
    .done = sconn_done,
    .on_close = sconn_on_close,
    .release = sconn_release,
};

/* ------------------------------------------------------------ accept */

static void srv_on_accept(void *owner, int fd)
{
    struct bf_net_server *srv = owner;
    srv->stats.conns_accepted++;
    if (srv->shutting_down || srv->nconns >= srv->o.max_connections) {
        srv->stats.conns_rejected++;
        close(fd);
        return;
    }
    struct bf_cc_key pk;
    bool have_pk = false;
    if (srv->o.max_conns_per_peer) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0) {
            bf_cc_key_addr(&pk, (struct sockaddr *)&ss);
            have_pk = true;
            if (bf_cc_get(&srv->peers, &pk) >= srv->o.max_conns_per_peer) {
                srv->stats.conns_rejected++;
                srv->stats.conns_peer_limited++;
                char peer[64], d[96];
                bf_addr_format((struct sockaddr *)&ss, peer, sizeof peer);
                snprintf(d, sizeof d, "%u connections open from this address",
                         srv->o.max_conns_per_peer);
                srv_log_limited(&srv->peer_log_ns, srv->stats.conns_peer_limited,
                                "gRPC connection refused: per-peer connection limit", peer, d);
                close(fd);
                return;
            }
        }
    }
    struct sconn *sc = calloc(1, sizeof *sc);
    if (!sc) {
        srv->stats.conns_rejected++;
        close(fd);
        return;
    }
    if (srv->tls)
        bf_tls_ctx_maybe_reload(&srv->tls);
    sc->srv = srv;
    bf_list_init(&sc->calls);
    bf_list_init(&sc->drain_q);
    nghttp2_mem mem = {sc, sconn_mem_malloc, sconn_mem_free, sconn_mem_calloc, sconn_mem_realloc};
    sc->fb_creating = true;
    int hr = nghttp2_session_server_new3(&sc->h2, srv->cbs, sc, srv->h2opt, &mem);
    sc->fb_creating = false;
    if (hr != 0) {
        free(sc);
        srv->stats.conns_rejected++;
        close(fd);
        return;
    }
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, srv->o.max_concurrent_streams},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, srv->o.stream_window},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, MAX_HEADER_LIST},
    };
    nghttp2_submit_settings(sc->h2, NGHTTP2_FLAG_NONE, iv, sizeof iv / sizeof iv[0]);
    nghttp2_session_set_local_window_size(sc->h2, NGHTTP2_FLAG_NONE, 0,
                                          (int32_t)srv->o.conn_window);
    if (bf_conn_init_accepted(&sc->c, srv->loop, fd, &sconn_ops, &srv->stats, srv->tls) < 0) {
        nghttp2_session_del(sc->h2);
        free(sc);
        srv->stats.conns_rejected++;
        close(fd);
        return;
    }
    bf_list_add_tail(&srv->conns, &sc->link);
    srv->nconns++;
    if (have_pk && bf_cc_inc(&srv->peers, &pk) > 0) {
        sc->peer_key = pk;
        sc->peer_counted = true;
    }
    sc->inbound.max = srv->o.max_inbound_per_conn;
    sc->inbound.parent = &srv->inbound;
    bf_h2_guard_init(&sc->guard, srv->o.max_new_streams_per_second);
    sc->last_rx = bf_mono_ns();
    sc->idle_since = sc->last_rx;
    bf_timer_init(&sc->timer, srv->loop, sconn_timer_cb, sc);
    bf_net_timer_start(&sc->timer, srv->o.handshake_timeout_ns, 0);
    bf_conn_mark_dirty(&sc->c);
}

/* ------------------------------------------------------------ lifecycle */

static int make_callbacks(nghttp2_session_callbacks **out)
{
    nghttp2_session_callbacks *cbs;
    if (nghttp2_session_callbacks_new(&cbs) != 0)
        return -ENOMEM;
    nghttp2_session_callbacks_set_on_begin_frame_callback(cbs, on_begin_frame_cb);
    nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers_cb);
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header_cb);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv_cb);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk_cb);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close_cb);
    nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send_cb);
    nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(cbs, on_invalid_frame_cb);
    nghttp2_session_callbacks_set_send_data_callback(cbs, send_data_cb);
    *out = cbs;
    return 0;
}

static void done_timer_cb(struct bf_net_timer *t, void *arg)
{
    (void)t;
    struct bf_net_server *srv = arg;
    if (srv->shutdown_done)
        srv->shutdown_done(srv->shutdown_arg);
}

static void server_check_shutdown(struct bf_net_server *srv)
{
    if (srv->shutting_down && !srv->shutdown_reported && srv->nconns == 0 && !srv->destroying) {
        srv->shutdown_reported = true;
        bf_net_timer_stop(&srv->grace_timer);
        bf_net_timer_start(&srv->done_timer, 0, 0); /* report from the loop, not from here */
    }
}

static void grace_cb(struct bf_net_timer *t, void *arg)
{
    (void)t;
    struct bf_net_server *srv = arg;
    srv_enter(srv);
    while (!bf_list_empty(&srv->conns)) {
        struct sconn *sc = BF_CONTAINER_OF(srv->conns.next, struct sconn, link);
        bf_conn_abort(&sc->c, -ECANCELED);
    }
    server_check_shutdown(srv);
    srv_leave(srv);
}

int bf_net_server_new(struct bf_net_loop *loop, const struct bf_net_server_opts *opts,
                      struct bf_net_server **out)
{
    if (!loop || !opts || !out || !opts->addr || (opts->n_methods && !opts->methods) ||
        opts->max_new_streams_per_second > BF_H2G_STREAM_RATE_MAX)
        return -EINVAL;
    for (size_t i = 0; i < opts->n_methods; i++) {
        const struct bf_net_method *m = &opts->methods[i];
        if (!m->path || m->path[0] != '/' || !m->on_message || m->kind > BF_NET_BIDI_STREAMING)
            return -EINVAL;
    }
    struct bf_net_server *srv = calloc(1, sizeof *srv);
    if (!srv)
        return -ENOMEM;
    srv->loop = loop;
    srv->o = *opts;
    srv->o.methods = NULL;
    memset(&srv->o.tls, 0, sizeof srv->o.tls);
    srv->o.addr = NULL;
    if (!srv->o.max_connections)
        srv->o.max_connections = 16384;
    if (!srv->o.max_concurrent_streams)
        srv->o.max_concurrent_streams = 1024;
    if (!srv->o.max_recv_message)
        srv->o.max_recv_message = BF_NET_MAX_MESSAGE;
    if (!srv->o.max_send_message)
        srv->o.max_send_message = BF_NET_MAX_MESSAGE;
    if (!srv->o.max_inbound_buffered)
        srv->o.max_inbound_buffered = BF_NET_MAX_INBOUND_BUFFERED;
    if (srv->o.max_inbound_buffered < srv->o.max_recv_message)
        srv->o.max_inbound_buffered = srv->o.max_recv_message; /* one largest message fits */
    srv->inbound.max = srv->o.max_inbound_buffered;
    srv->spare.max =
        srv->o.max_recv_message < RECV_SPARE_MAX ? srv->o.max_recv_message : RECV_SPARE_MAX;
    srv->spare.charge = &srv->inbound; /* idle, it counts against the budget ... */
    srv->inbound.yield = &srv->spare;  /* ... and gives way to any message */
    for (size_t i = 0; i < opts->n_methods; i++) {
        uint32_t m = opts->methods[i].max_recv_message;
        m = m && m < srv->o.max_recv_message ? m : srv->o.max_recv_message;
        if (m > srv->max_method_recv)
            srv->max_method_recv = m;
    }
    if (!srv->o.max_inbound_per_conn)
        srv->o.max_inbound_per_conn = srv->o.max_inbound_buffered / 4;
    if (srv->o.max_inbound_per_conn < srv->max_method_recv)
        srv->o.max_inbound_per_conn = srv->max_method_recv;
    if (srv->o.max_inbound_per_conn > srv->o.max_inbound_buffered)
        srv->o.max_inbound_per_conn = srv->o.max_inbound_buffered;
    if (!srv->o.msg_stall_timeout_ns)
        srv->o.msg_stall_timeout_ns = 20 * BF_NS_PER_SEC;
    bf_cc_init(&srv->peers);
    bf_cc_init(&srv->idents);
    if (!srv->o.stream_window)
        srv->o.stream_window = 1u << 20;
    if (!srv->o.conn_window)
        srv->o.conn_window = 16u << 20;
    if (srv->o.stream_window > 0x7fffffff)
        srv->o.stream_window = 0x7fffffff;
    if (srv->o.conn_window > 0x7fffffff)
        srv->o.conn_window = 0x7fffffff;
    if (!srv->o.keepalive_ns)
        srv->o.keepalive_ns = 120 * BF_NS_PER_SEC;
    if (!srv->o.keepalive_timeout_ns)
        srv->o.keepalive_timeout_ns = 20 * BF_NS_PER_SEC;
    if (!srv->o.handshake_timeout_ns)
        srv->o.handshake_timeout_ns = 10 * BF_NS_PER_SEC;
    bf_list_init(&srv->conns);
    bf_timer_init(&srv->grace_timer, loop, grace_cb, srv);
    bf_timer_init(&srv->done_timer, loop, done_timer_cb, srv);
    bf_timer_init(&srv->spare_timer, loop, spare_timer_cb, srv);
    int r = -ENOMEM;
    srv->n_methods = opts->n_methods;
    srv->methods = calloc(opts->n_methods ? opts->n_methods : 1, sizeof *srv->methods);
    if (!srv->methods)
        goto out_fail;
    for (size_t i = 0; i < opts->n_methods; i++) {
        srv->methods[i].m = opts->methods[i];
        srv->methods[i].path_len = strlen(opts->methods[i].path);
    }
    const struct bf_net_tls_config *tc = &opts->tls;
    bool any_tls = (tc->cert_file && *tc->cert_file) || (tc->key_file && *tc->key_file) ||
                   (tc->ca_file && *tc->ca_file);
    if (any_tls) {
        r = bf_tls_ctx_new(tc, BF_TLS_SERVER, &srv->tls);
        if (r < 0)
            goto out_fail;
    }
    r = -ENOMEM;
    if (make_callbacks(&srv->cbs) < 0)
        goto out_fail;
    if (nghttp2_option_new(&srv->h2opt) != 0)
        goto out_fail;
    nghttp2_option_set_no_closed_streams(srv->h2opt, 1);
    nghttp2_option_set_max_send_header_block_length(srv->h2opt, 65536);
    if (opts->listen_fd > 0)
        r = bf_listener_adopt(loop, opts->listen_fd, true, srv_on_accept, srv,
                              &srv->stats.accept_errors, &srv->listener);
    else
        r = bf_listener_open(loop, opts->addr, srv_on_accept, srv, &srv->stats.accept_errors,
                             &srv->listener);
    if (r < 0) {
        BF_ERROR("gRPC server: cannot listen", "addr=\"%s\" err=\"%s\"", opts->addr, strerror(-r));
        goto out_fail;
    }
    srv->port = srv->listener->port;
    BF_INFO("gRPC server listening", "addr=\"%s\" port=%u tls=%s", opts->addr, srv->port,
            !srv->tls                   ? "off"
            : bf_tls_ctx_mtls(srv->tls) ? "mtls"
                                        : "tls");
    pthread_mutex_lock(&msg_return.mu);
    msg_return.servers++; /* (server_destroy: --) */
    pthread_mutex_unlock(&msg_return.mu);
    *out = srv;
    return 0;
out_fail:
    if (srv->h2opt)
        nghttp2_option_del(srv->h2opt);
    if (srv->cbs)
        nghttp2_session_callbacks_del(srv->cbs);
    bf_tls_ctx_unref(srv->tls);
    free(srv->methods);
    free(srv);
    return r;
}

int bf_net_server_reload_tls(struct bf_net_server *srv, const struct bf_net_tls_config *tls)
{
    if (!srv->tls)
        return -EINVAL; /* plaintext stays plaintext: a restart changes the mode */
    struct bf_tls_ctx *n;
    int r = bf_tls_ctx_new(tls, BF_TLS_SERVER, &n);
    if (r < 0)
        return r;
    if (bf_tls_ctx_mtls(n) != bf_tls_ctx_mtls(srv->tls)) {
        bf_tls_ctx_unref(n);
        return -EINVAL;
    }
    bf_tls_ctx_unref(srv->tls); /* open connections hold their own reference */
    srv->tls = n;
    BF_INFO("TLS files re-read", "cert=\"%s\" ca=\"%s\"", tls->cert_file,
            tls->ca_file ? tls->ca_file : "");
    return 0;
}

uint16_t bf_net_server_port(const struct bf_net_server *srv)
{
    return srv->port;
}

void bf_net_server_stats(const struct bf_net_server *srv, struct bf_net_stats *out)
{
    *out = srv->stats;
    out->inbound_budget_refusals = srv->inbound.refused;
    size_t spare = srv->spare.buf ? srv->spare.cap : 0;
    out->inbound_buffered_bytes = srv->inbound.used - (srv->spare.charge ? spare : 0);
    out->inbound_spare_bytes = spare; /* the rest of inbound.used */
    out->inbound_spare_releases = srv->spare.idle_releases;
    out->recv_buffer_reuses = srv->spare.reuses;
}

void bf_net_server_shutdown(struct bf_net_server *srv, int64_t grace_ns, void (*done)(void *),
                            void *arg)
{
    if (srv->shutting_down)
        return;
    srv_enter(srv);
    srv->shutting_down = true;
    srv->shutdown_done = done;
    srv->shutdown_arg = arg;
    bf_listener_close(srv->listener);
    srv->listener = NULL;
    struct bf_list *it = srv->conns.next;
    while (it != &srv->conns) {
        struct sconn *sc = BF_CONTAINER_OF(it, struct sconn, link);
        it = it->next;
        if (sc->got_settings && sc->h2) {
            nghttp2_submit_goaway(sc->h2, NGHTTP2_FLAG_NONE,
                                  nghttp2_session_get_last_proc_stream_id(sc->h2), NGHTTP2_NO_ERROR,
                                  NULL, 0);
            sc->goaway_sent = true;
            bf_conn_mark_dirty(&sc->c);
        } else {
            bf_conn_abort(&sc->c, -ECANCELED); /* never got going */
        }
    }
    bf_net_timer_start(&srv->grace_timer, grace_ns > 0 ? grace_ns : 0, 0);
    server_check_shutdown(srv);
    srv_leave(srv);
}

static void server_destroy(struct bf_net_server *srv)
{
    srv->destroying = true;
    srv->depth++;
    bf_listener_close(srv->listener);
    srv->listener = NULL;
    bf_net_timer_stop(&srv->grace_timer);
    bf_net_timer_stop(&srv->done_timer);
    while (!bf_list_empty(&srv->conns)) {
        struct sconn *sc = BF_CONTAINER_OF(srv->conns.next, struct sconn, link);
        bf_conn_abort(&sc->c, -ECANCELED);
    }
    nghttp2_option_del(srv->h2opt);
    nghttp2_session_callbacks_del(srv->cbs);
    bf_tls_ctx_unref(srv->tls);
    bf_cc_free(&srv->peers);
    bf_cc_free(&srv->idents);
    bf_net_timer_stop(&srv->spare_timer);
    bf_grpc_spare_release(&srv->spare);
    uint8_t *box = NULL;
    size_t box_cap = 0;
    pthread_mutex_lock(&msg_return.mu);
    if (--msg_return.servers == 0) { /* nobody left to reuse a returned buffer */
        box = msg_return.buf;
        box_cap = msg_return.cap;
        msg_return.buf = NULL;
        msg_return.cap = 0;
    }
    pthread_mutex_unlock(&msg_return.mu);
    bf_grpc_buf_free(box, box_cap);
    free(srv->methods);
    free(srv);
}

void bf_net_server_free(struct bf_net_server *srv)
{
    if (!srv || srv->destroying)
        return;
    if (srv->depth > 0) {
        srv->free_pending = true;
        return;
    }
    server_destroy(srv);
}
