/*
 * grpc_client.c — the gRPC client (bigfleet/net.h): one HTTP/2 connection
 * (nghttp2 client session over conn.c) shared by every call, per-call
 * deadlines, cancellation, reconnect with exponential backoff, fail-fast
 * while the server is unreachable.
 *
 * Design notes
 *   - States: CONNECTING (calls wait in a bounded queue), READY (calls go
 *     out at once), BACKOFF (calls fail with UNAVAILABLE; a timer starts the
 *     next attempt: initial x1.6 per failure up to the max, +-20% jitter).
 *     A connection that got the server's SETTINGS and is later lost
 *     reconnects at once (backoff reset); one that never became healthy
 *     counts as a failed attempt.
 *   - GOAWAY from the server: that connection keeps its open streams (it
 *     closes once they end); new calls go to a fresh connection. Streams
 *     above the GOAWAY's last id end with UNAVAILABLE (not retried).
 *   - A stream's user-visible end ("delivery") and its memory are separate:
 *     a call that hits its deadline or is cancelled is delivered at once
 *     (deadline) or on the next iteration (cancel), RST_STREAM(CANCEL) is
 *     queued, and the struct lives on as a zombie until nghttp2 closes the
 *     stream, so nghttp2 never holds a dangling data-source pointer.
 *   - Deliveries that must not happen inside the API call that caused them
 *     are queued on cl->finishing and run from a zero-delay timer.
 *   - With bf_net_client_set_unary_after_recv (the reconciler's client),
 *     unary replies completed by received bytes are delivered after
 *     nghttp2_session_mem_recv returns (cc->recv_done, in arrival order),
 *     not from inside its stream-close callback: there the callback may
 *     start its next call and put it on the wire (bf_net_client_flush)
 *     before it works on the reply, so the server answers meanwhile (issue
 *     18, stop 28: a resync walk's pages). Inside nghttp2 (cc->in_h2)
 *     bf_net_client_flush does nothing.
 *   - Reentrancy: like the server, loop entry points bump cl->depth and
 *     bf_net_client_free() inside a callback completes afterwards.
 *   - Host names are resolved at every connection attempt on a helper
 *     thread (resolve.c) that signals an eventfd the loop watches, bounded
 *     by the connect timeout: a slow or dead DNS server never stalls the
 *     loop and the other work it carries (the executor's in-flight
 *     actions, the session's operators). Literal addresses connect at once.
 */
#include <errno.h>
#include <stdio.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include <protobuf-c/protobuf-c.h>

#include "bigfleet/log.h"
#include "bigfleet/util.h"
#include "net/h2_common.h"

#define CLI_BATCH (128u * 1024)
/* Responses of this size and more start in the recycled receive buffer (a
 * List page of 4,096 machines is ~0.9 MB: below BF_GRPC_MMAP_MIN, so with
 * the default every page was assembled in new memory regrown by doubling) */
#define CLI_SPARE_MIN (256u * 1024)

struct cconn;

struct bf_net_client {
    struct bf_net_loop *loop;
    char *addr;
    char host[256];
    uint16_t port;
    bool addr_is_name;                /* host is resolved at each attempt */
    struct sockaddr_storage addr_lit; /* else the literal address, parsed once */
    socklen_t addr_lit_len;
    char *server_name;
    char *authority;
    struct bf_tls_ctx *tls;
    struct bf_net_client_opts o;
    enum bf_net_client_state state;
    struct cconn *active;
    struct bf_list cconns;
    struct bf_list pending; /* streams waiting for a connection */
    uint32_t npending;
    struct bf_list finishing; /* deliveries queued for the kick timer */
    struct bf_net_timer backoff_timer, kick_timer;
    int64_t backoff_cur;
    int last_err;
    bool last_err_resolve;      /* last_err came from name resolution */
    struct bf_resolve *resolve; /* name resolution in flight */
    int res_efd;                /* its completion eventfd (-1 until needed) */
    struct bf_net_watch *res_watch;
    struct bf_net_timer resolve_timer; /* bounds it by the connect timeout */
    struct bf_net_stats stats;
    nghttp2_session_callbacks *cbs;
    nghttp2_option *h2opt;
    struct bf_grpc_spare spare; /* the recycled assembly buffer of large responses */
    int depth;
    bool free_pending, destroying;
    bool unary_after_recv; /* bf_net_client_set_unary_after_recv */
};

struct cconn {
    struct conn c;
    struct bf_net_client *cl;
    nghttp2_session *h2;
    struct bf_list link;
    struct bf_list streams;
    uint32_t nstreams;
    bool ready, got_settings, goaway, counted_failure;
    bool ping_out;
    int64_t ping_sent, last_rx;
    struct bf_net_timer timer; /* connect timeout, then keepalive */
    struct bf_list drain_q;
    struct bf_list recv_done; /* unary streams closed by mem_recv, delivered after it */
    int in_h2;                /* inside nghttp2_session_mem_recv / mem_send */
    bool in_recv;             /* inside nghttp2_session_mem_recv */
};

enum { S_NEW, S_PENDING, S_ACTIVE };

struct bf_net_stream {
    struct bf_net_client *cl;
    struct cconn *cc;
    int32_t sid;
    uint8_t where;
    struct bf_list link;       /* cl->pending or cc->streams */
    struct bf_list fin_link;   /* cl->finishing or cc->recv_done */
    struct bf_list drain_link; /* cc->drain_q */
    bool unary;
    bf_net_unary_fn ucb;
    struct bf_net_stream_cbs cbs;
    void *arg;
    void *user;
    char *path;
    int64_t deadline;
    struct bf_net_timer deadline_timer;
    /* outbound */
    struct outbox out;
    bool half_close, eos_sent, deferred, had_bytes;
    /* inbound */
    struct bf_grpc_parser parser;
    uint8_t *resp;
    size_t resp_len;
    size_t resp_cap; /* > 0: resp is an assembly buffer (bf_grpc_buf_free); 0: malloc */
    uint32_t n_resp;
    int http_status;
    bool got_status;
    int status;
    char *status_msg;
    /* end */
    bool local_set; /* outcome decided on our side (deadline, cancel, error) */
    int local_code;
    char *local_msg;
    bool delivered;
    bool closed; /* nghttp2 closed the stream (or it never existed) */
};

static void cl_enter(struct bf_net_client *cl)
{
    cl->depth++;
}
static void client_destroy(struct bf_net_client *cl);
static void cl_leave(struct bf_net_client *cl)
{
    if (--cl->depth == 0 && cl->free_pending && !cl->destroying)
        client_destroy(cl);
}

/* ------------------------------------------------------------ ending */

static void stream_free(struct bf_net_stream *s)
{
    bf_net_timer_stop(&s->deadline_timer);
    bf_list_del(&s->link);
    bf_list_del(&s->fin_link);
    bf_list_del(&s->drain_link);
    outbox_clear(&s->out);
    bf_grpc_parser_reset(&s->parser);
    if (s->resp_cap)
        bf_grpc_spare_put(s->cl->destroying ? NULL : &s->cl->spare, s->resp, s->resp_cap);
    else
        free(s->resp);
    free(s->status_msg);
    free(s->local_msg);
    free(s->path);
    free(s);
}

/* Runs the user's completion (once). */
static void stream_deliver(struct bf_net_stream *s, int code, const char *msg)
{
    if (s->delivered)
        return;
    s->delivered = true;
    bf_list_del(&s->fin_link);
    bf_net_timer_stop(&s->deadline_timer);
    struct bf_net_client *cl = s->cl;
    if (s->where == S_PENDING && cl->npending)
        cl->npending--;
    if (s->where == S_PENDING)
        bf_list_del(&s->link);
    bf_stats_done(&cl->stats, code);
    if (!msg)
        msg = "";
    if (s->unary) {
        bool ok = code == BF_NET_OK;
        s->ucb(s->arg, code, msg, ok ? (s->resp ? s->resp : (const uint8_t *)"") : NULL,
               ok ? s->resp_len : 0);
    } else if (s->cbs.on_done) {
        s->cbs.on_done(s, code, msg, s->arg);
    }
}

/* Delivers and frees if nghttp2 no longer knows the stream. */
static void stream_end(struct bf_net_stream *s, int code, const char *msg)
{
    stream_deliver(s, code, msg);
    if (s->closed || s->where != S_ACTIVE)
        stream_free(s);
}

static void set_local(struct bf_net_stream *s, int code, const char *msg)
{
    if (s->local_set)
        return;
    s->local_set = true;
    s->local_code = code;
    s->local_msg = msg ? strdup(msg) : NULL;
}

/* Queue the delivery for the next iteration (never inside the API call). */
static void stream_finish_later(struct bf_net_stream *s, int code, const char *msg)
{
    set_local(s, code, msg);
    if (s->delivered)
        return;
    bf_list_del(&s->fin_link);
    bf_list_add_tail(&s->cl->finishing, &s->fin_link);
    bf_net_timer_start(&s->cl->kick_timer, 0, 0);
}

/* Resets an active stream on the wire (the zombie waits for close). */
static void stream_rst(struct bf_net_stream *s)
{
    if (s->where == S_ACTIVE && !s->closed && s->cc && s->cc->h2) {
        nghttp2_submit_rst_stream(s->cc->h2, NGHTTP2_FLAG_NONE, s->sid, NGHTTP2_CANCEL);
        bf_conn_mark_dirty(&s->cc->c);
    }
}

static void kick_cb(struct bf_net_timer *t, void *arg)
{
    (void)t;
    struct bf_net_client *cl = arg;
    cl_enter(cl);
    /* snapshot: deliveries can queue new ones */
    struct bf_list batch;
    bf_list_init(&batch);
    while (!bf_list_empty(&cl->finishing)) {
        struct bf_list *n = cl->finishing.next;
        bf_list_del(n);
        bf_list_add_tail(&batch, n);
    }
    while (!bf_list_empty(&batch)) {
        struct bf_net_stream *s = BF_CONTAINER_OF(batch.next, struct bf_net_stream, fin_link);
        bf_list_del(&s->fin_link);
        stream_end(s, s->local_code, s->local_msg);
    }
    cl_leave(cl);
}

static void deadline_cb(struct bf_net_timer *t, void *arg)
{
    (void)t;
    struct bf_net_stream *s = arg;
    struct bf_net_client *cl = s->cl;
    cl_enter(cl);
    set_local(s, BF_NET_DEADLINE_EXCEEDED, "deadline exceeded");
    stream_rst(s);
    stream_end(s, BF_NET_DEADLINE_EXCEEDED, "deadline exceeded");
    cl_leave(cl);
}

/* ------------------------------------------------------------ sending */

static ssize_t data_read_cb(nghttp2_session *h2, int32_t sid, uint8_t *buf, size_t length,
                            uint32_t *flags, nghttp2_data_source *src, void *ud)
{
    (void)h2;
    (void)sid;
    (void)buf;
    (void)ud;
    struct bf_net_stream *s = src->ptr;
    size_t n = outbox_take(&s->out, length, flags);
    if (n == s->out.bytes) {
        if (s->half_close) {
            *flags |= NGHTTP2_DATA_FLAG_EOF;
            s->eos_sent = true;
        } else if (n == 0) {
            s->deferred = true;
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
    struct cconn *cc = ud;
    struct bf_net_stream *s = src->ptr;
    int r = outbox_send_frame(&s->out, &cc->c, framehd, length, H2_BODY_BATCH);
    if (r)
        return r;
    if (s->out.bytes == 0 && s->had_bytes && s->cbs.on_drain && !s->delivered) {
        s->had_bytes = false;
        bf_list_del(&s->drain_link);
        bf_list_add_tail(&cc->drain_q, &s->drain_link);
    }
    return 0;
}

static void stream_kick(struct bf_net_stream *s)
{
    if (s->where != S_ACTIVE || s->closed)
        return;
    if (s->deferred) {
        s->deferred = false;
        nghttp2_session_resume_data(s->cc->h2, s->sid);
    }
    bf_conn_mark_dirty(&s->cc->c);
}

static void client_connect(struct bf_net_client *cl);

/* Puts a stream on the wire on cc. */
static void stream_submit(struct bf_net_stream *s, struct cconn *cc)
{
    struct bf_net_client *cl = s->cl;
    char tmo[16];
    nghttp2_nv nva[9];
    size_t n = 0;
    nva[n++] = (nghttp2_nv)BF_NVS(":method", "POST");
    if (cl->tls)
        nva[n++] = (nghttp2_nv)BF_NVS(":scheme", "https");
    else
        nva[n++] = (nghttp2_nv)BF_NVS(":scheme", "http");
    nva[n++] = (nghttp2_nv)BF_NV(":path", s->path, strlen(s->path));
    nva[n++] = (nghttp2_nv)BF_NV(":authority", cl->authority, strlen(cl->authority));
    nva[n++] = (nghttp2_nv)BF_NVS("content-type", "application/grpc");
    nva[n++] = (nghttp2_nv)BF_NVS("te", "trailers");
    nva[n++] = (nghttp2_nv)BF_NVS("user-agent", "bigfleet-c/1 (nghttp2)");
    if (s->deadline) {
        int64_t left = s->deadline - bf_mono_ns();
        if (left <= 0) {
            stream_finish_later(s, BF_NET_DEADLINE_EXCEEDED, "deadline exceeded");
            return;
        }
        size_t tl = bf_grpc_timeout_format(left, tmo);
        nva[n++] = (nghttp2_nv){(uint8_t *)"grpc-timeout", (uint8_t *)tmo, 12, tl,
                                NGHTTP2_NV_FLAG_NO_COPY_NAME};
    }
    nghttp2_data_provider prd = {.source.ptr = s, .read_callback = data_read_cb};
    int32_t sid = nghttp2_submit_request(cc->h2, NULL, nva, n, &prd, s);
    if (sid < 0) {
        if (sid == NGHTTP2_ERR_STREAM_ID_NOT_AVAILABLE) {
            /* this connection is used up: park the stream and open a new one */
            cc->goaway = true;
            if (cl->active == cc)
                cl->active = NULL;
            s->where = S_PENDING;
            bf_list_add_tail(&cl->pending, &s->link);
            cl->npending++;
            if (!cl->active)
                client_connect(cl);
            return;
        }
        stream_finish_later(s, BF_NET_INTERNAL, nghttp2_strerror(sid));
        return;
    }
    s->sid = sid;
    s->cc = cc;
    s->where = S_ACTIVE;
    bf_list_add_tail(&cc->streams, &s->link);
    cc->nstreams++;
    bf_conn_mark_dirty(&cc->c);
}

static void flush_pending(struct bf_net_client *cl)
{
    while (!bf_list_empty(&cl->pending) && cl->active && cl->active->ready && !cl->active->goaway) {
        struct bf_net_stream *s = BF_CONTAINER_OF(cl->pending.next, struct bf_net_stream, link);
        bf_list_del(&s->link);
        cl->npending--;
        s->where = S_NEW;
        stream_submit(s, cl->active);
    }
}

static void fail_pending(struct bf_net_client *cl, int code, const char *msg)
{
    while (!bf_list_empty(&cl->pending)) {
        struct bf_net_stream *s = BF_CONTAINER_OF(cl->pending.next, struct bf_net_stream, link);
        stream_end(s, code, msg); /* unlinks from pending */
    }
}

static struct bf_net_stream *stream_new(struct bf_net_client *cl, const char *path,
                                        int64_t timeout_ns)
{
    if (cl->destroying || cl->free_pending) {
        errno = ECANCELED;
        return NULL;
    }
    if (!path || path[0] != '/') {
        errno = EINVAL;
        return NULL;
    }
    struct bf_net_stream *s = calloc(1, sizeof *s);
    if (!s || !(s->path = strdup(path))) {
        free(s);
        errno = ENOMEM;
        return NULL;
    }
    s->cl = cl;
    s->where = S_NEW;
    bf_list_init(&s->link);
    bf_list_init(&s->fin_link);
    bf_list_init(&s->drain_link);
    bf_grpc_parser_init(&s->parser, cl->o.max_recv_message, NULL);
    s->parser.spare = &cl->spare;
    bf_timer_init(&s->deadline_timer, cl->loop, deadline_cb, s);
    if (timeout_ns > 0) {
        s->deadline = bf_mono_ns() + timeout_ns;
        bf_net_timer_start(&s->deadline_timer, timeout_ns, 0);
    }
    return s;
}

static void stream_start(struct bf_net_stream *s)
{
    struct bf_net_client *cl = s->cl;
    cl->stats.streams_started++;
    cl->stats.streams_open++;
    if (cl->active && cl->active->ready && !cl->active->goaway) {
        stream_submit(s, cl->active);
    } else if (cl->state == BF_NET_CLIENT_BACKOFF) {
        char msg[160];
        snprintf(msg, sizeof msg, "connection to %s unavailable: %s", cl->addr,
                 strerror(cl->last_err ? cl->last_err : ECONNREFUSED));
        stream_finish_later(s, BF_NET_UNAVAILABLE, msg);
    } else if (cl->npending >= cl->o.max_pending) {
        stream_finish_later(s, BF_NET_UNAVAILABLE, "too many calls waiting for a connection");
    } else {
        s->where = S_PENDING;
        bf_list_add_tail(&cl->pending, &s->link);
        cl->npending++;
        if (!cl->active)
            client_connect(cl);
    }
}

static int stream_enqueue(struct bf_net_stream *s, struct omsg *m)
{
    outbox_push(&s->out, m);
    s->had_bytes = true;
    s->cl->stats.msgs_out++;
    stream_kick(s);
    return 0;
}

struct bf_net_stream *bf_net_client_unary(struct bf_net_client *cl, const char *path,
                                          const void *req, size_t len, int64_t timeout_ns,
                                          bf_net_unary_fn cb, void *arg)
{
    if (!cb || (len && !req)) {
        errno = EINVAL;
        return NULL;
    }
    struct omsg *m;
    int rc = omsg_copy(req, len, cl->o.max_send_message, &m);
    if (rc) {
        errno = -rc;
        return NULL;
    }
    struct bf_net_stream *s = stream_new(cl, path, timeout_ns);
    if (!s) {
        free(m);
        return NULL;
    }
    s->unary = true;
    s->ucb = cb;
    s->arg = arg;
    outbox_push(&s->out, m);
    s->half_close = true;
    cl->stats.msgs_out++;
    stream_start(s);
    return s;
}

struct bf_net_stream *bf_net_client_unary_pb(struct bf_net_client *cl, const char *path,
                                             const struct ProtobufCMessage *req, int64_t timeout_ns,
                                             bf_net_unary_fn cb, void *arg)
{
    size_t len = protobuf_c_message_get_packed_size(req);
    if (len > cl->o.max_send_message) {
        errno = EMSGSIZE;
        return NULL;
    }
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf) {
        errno = ENOMEM;
        return NULL;
    }
    protobuf_c_message_pack(req, buf);
    struct bf_net_stream *s = bf_net_client_unary(cl, path, buf, len, timeout_ns, cb, arg);
    int e = errno;
    free(buf);
    errno = e;
    return s;
}

struct bf_net_stream *bf_net_client_call(struct bf_net_client *cl, const char *path,
                                         int64_t timeout_ns, const struct bf_net_stream_cbs *cbs,
                                         void *arg)
{
    if (!cbs || !cbs->on_done || !cbs->on_message) {
        errno = EINVAL;
        return NULL;
    }
    struct bf_net_stream *s = stream_new(cl, path, timeout_ns);
    if (!s)
        return NULL;
    s->cbs = *cbs;
    s->arg = arg;
    stream_start(s);
    return s;
}

int bf_net_stream_send(struct bf_net_stream *s, const void *msg, size_t len)
{
    if (s->half_close || s->delivered || s->local_set)
        return -EPIPE;
    struct omsg *m;
    int rc = omsg_copy(msg, len, s->cl->o.max_send_message, &m);
    return rc ? rc : stream_enqueue(s, m);
}

int bf_net_stream_send_lend(struct bf_net_stream *s, void *msg, size_t len,
                            bf_net_release_fn release, void *arg)
{
    if (s->half_close || s->delivered || s->local_set) {
        omsg_release_ext(msg, release, arg);
        return -EPIPE;
    }
    struct omsg *m;
    int rc = omsg_lend(msg, len, s->cl->o.max_send_message, release, arg, &m);
    return rc ? rc : stream_enqueue(s, m);
}

int bf_net_stream_send_pb(struct bf_net_stream *s, const struct ProtobufCMessage *pm)
{
    if (s->half_close || s->delivered || s->local_set)
        return -EPIPE;
    struct omsg *m;
    int rc = omsg_pack(pm, s->cl->o.max_send_message, &m);
    return rc ? rc : stream_enqueue(s, m);
}

int bf_net_stream_close_send(struct bf_net_stream *s)
{
    if (s->half_close || s->delivered || s->local_set)
        return -EPIPE;
    s->half_close = true;
    stream_kick(s);
    return 0;
}

void bf_net_stream_cancel(struct bf_net_stream *s)
{
    if (s->delivered || s->local_set)
        return;
    stream_rst(s);
    stream_finish_later(s, BF_NET_CANCELLED, "cancelled by the client");
}

size_t bf_net_stream_outbox_bytes(const struct bf_net_stream *s)
{
    return s->out.bytes;
}
void bf_net_stream_set_user(struct bf_net_stream *s, void *user)
{
    s->user = user;
}
void *bf_net_stream_user(const struct bf_net_stream *s)
{
    return s->user;
}

/* ------------------------------------------------------------ receiving */

static int on_parsed(void *arg, const uint8_t *msg, size_t len, bool compressed)
{
    struct bf_net_stream *s = arg;
    s->cl->stats.msgs_in++;
    if (compressed)
        return BF_NET_INTERNAL;
    if (s->unary) {
        if (++s->n_resp > 1)
            return BF_NET_INTERNAL;
        if (msg == s->parser.msg_owned) { /* assembled: take the buffer, no copy */
            s->resp = (uint8_t *)msg;
            s->resp_cap = s->parser.msg_charge;
            s->resp_len = len;
            return BF_GRPC_MSG_KEPT;
        }
        s->resp = malloc(len ? len : 1);
        if (!s->resp)
            return BF_NET_RESOURCE_EXHAUSTED;
        memcpy(s->resp, msg, len);
        s->resp_len = len;
        return 0;
    }
    s->cbs.on_message(s, msg, len, s->arg);
    return (s->delivered || s->local_set) ? -1 : 0;
}

static int on_data_chunk_cb(nghttp2_session *h2, uint8_t flags, int32_t sid, const uint8_t *data,
                            size_t len, void *ud)
{
    (void)flags;
    (void)ud;
    struct bf_net_stream *s = nghttp2_session_get_stream_user_data(h2, sid);
    if (!s || s->delivered || s->local_set)
        return 0;
    int r = bf_grpc_parser_feed(&s->parser, data, len, on_parsed, s);
    if (r > 0) {
        const char *msg = "bad gRPC message from the server";
        if (r == BF_NET_RESOURCE_EXHAUSTED) {
            s->cl->stats.oversize_messages++;
            msg = "received message larger than max";
        } else if (s->n_resp > 1) {
            msg = "server sent more than one response to a unary call";
        } else {
            s->cl->stats.bad_messages++;
        }
        bf_grpc_parser_reset(&s->parser);
        set_local(s, r, msg);
        stream_rst(s);
    }
    return 0;
}

static int on_header_cb(nghttp2_session *h2, const nghttp2_frame *frame, const uint8_t *name,
                        size_t nlen, const uint8_t *value, size_t vlen, uint8_t flags, void *ud)
{
    (void)flags;
    (void)ud;
    if (frame->hd.type != NGHTTP2_HEADERS)
        return 0;
    struct bf_net_stream *s = nghttp2_session_get_stream_user_data(h2, frame->hd.stream_id);
    if (!s)
        return 0;
    if (h2_name_is(name, nlen, ":status")) {
        int st = 0;
        for (size_t i = 0; i < vlen && i < 3; i++)
            st = st * 10 + (value[i] - '0');
        s->http_status = st;
    } else if (h2_name_is(name, nlen, "grpc-status")) {
        s->got_status = true;
        s->status = bf_grpc_status_parse(value, vlen);
    } else if (h2_name_is(name, nlen, "grpc-message")) {
        free(s->status_msg);
        s->status_msg = bf_grpc_percent_decode(value, vlen);
    }
    return 0;
}

static void cconn_schedule_keepalive(struct cconn *cc);

static int on_frame_recv_cb(nghttp2_session *h2, const nghttp2_frame *frame, void *ud)
{
    struct cconn *cc = ud;
    struct bf_net_client *cl = cc->cl;
    switch (frame->hd.type) {
    case NGHTTP2_SETTINGS:
        if (!(frame->hd.flags & NGHTTP2_FLAG_ACK) && !cc->got_settings) {
            cc->got_settings = true;
            cl->backoff_cur = cl->o.backoff_initial_ns; /* healthy: reset the backoff */
            bf_net_timer_stop(&cc->timer);
            cconn_schedule_keepalive(cc);
        }
        break;
    case NGHTTP2_GOAWAY:
        cc->goaway = true;
        if (cl->active == cc) {
            cl->active = NULL;
            if (!cl->destroying)
                client_connect(cl);
        }
        break;
    case NGHTTP2_PING:
        if (frame->hd.flags & NGHTTP2_FLAG_ACK)
            cc->ping_out = false;
        break;
    case NGHTTP2_HEADERS:
    case NGHTTP2_DATA:
        /* The server ended the call (trailers, or DATA, with END_STREAM) while
         * we are still sending (a bidi or client-streaming call): gRPC says the
         * call is over. grpc-js does not follow its trailers with RST_STREAM,
         * so close our half with RST_STREAM NO_ERROR; the stream then closes
         * and completes with the server's status (on_stream_close). */
        if ((frame->hd.flags & NGHTTP2_FLAG_END_STREAM) && frame->hd.stream_id > 0 &&
            !nghttp2_session_get_stream_local_close(h2, frame->hd.stream_id)) {
            struct bf_net_stream *s = nghttp2_session_get_stream_user_data(h2, frame->hd.stream_id);
            if (s && !s->closed)
                nghttp2_submit_rst_stream(h2, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                                          NGHTTP2_NO_ERROR);
        }
        break;
    default:
        break;
    }
    return 0;
}

static int on_stream_close_cb(nghttp2_session *h2, int32_t sid, uint32_t error_code, void *ud)
{
    struct cconn *cc = ud;
    struct bf_net_stream *s = nghttp2_session_get_stream_user_data(h2, sid);
    if (!s)
        return 0;
    s->closed = true;
    bf_list_del(&s->link);
    if (cc->nstreams)
        cc->nstreams--;
    int code;
    const char *msg = NULL;
    char buf[128];
    if (s->local_set) {
        code = s->local_code;
        msg = s->local_msg;
    } else if (s->got_status) {
        code = s->status;
        msg = s->status_msg;
        if (!bf_grpc_parser_idle(&s->parser)) {
            code = BF_NET_INTERNAL;
            msg = "server ended the stream inside a message";
        } else if (code == BF_NET_OK && s->unary && s->n_resp != 1) {
            code = BF_NET_INTERNAL;
            msg = "server sent no response to a unary call";
        }
    } else if (error_code != NGHTTP2_NO_ERROR) {
        code = bf_grpc_code_from_h2(error_code);
        snprintf(buf, sizeof buf, "stream reset by the server: %s",
                 nghttp2_http2_strerror(error_code));
        msg = buf;
    } else if (s->http_status && s->http_status != 200) {
        code = bf_grpc_code_from_http(s->http_status);
        snprintf(buf, sizeof buf, "HTTP status %d without grpc-status", s->http_status);
        msg = buf;
    } else {
        code = BF_NET_INTERNAL;
        msg = "server closed the stream without grpc-status";
    }
    if (cc->in_recv && cc->cl->unary_after_recv && s->unary &&
        !s->delivered) { /* delivered after mem_recv returns */
        set_local(s, code, msg);
        bf_list_del(&s->fin_link);
        bf_list_add_tail(&cc->recv_done, &s->fin_link);
        return 0;
    }
    stream_end(s, code, msg);
    return 0;
}

/* A request HEADERS that never left (cancelled while queued behind the
 * peer's MAX_CONCURRENT_STREAMS, or the session is going away). When
 * nghttp2 had not opened the stream it will not report a close for it, so
 * end it here. */
static int on_frame_not_send_cb(nghttp2_session *h2, const nghttp2_frame *frame, int lib_error,
                                void *ud)
{
    struct cconn *cc = ud;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    /* if nghttp2 opened the stream it reports the close itself (and it
     * still holds our pointer): leave it to on_stream_close */
    if (nghttp2_session_find_stream(h2, frame->hd.stream_id))
        return 0;
    for (struct bf_list *it = cc->streams.next; it != &cc->streams; it = it->next) {
        struct bf_net_stream *s = BF_CONTAINER_OF(it, struct bf_net_stream, link);
        if (s->sid != frame->hd.stream_id || s->closed)
            continue;
        s->closed = true;
        bf_list_del(&s->link);
        if (cc->nstreams)
            cc->nstreams--;
        stream_end(s, s->local_set ? s->local_code : BF_NET_UNAVAILABLE,
                   s->local_set ? s->local_msg : nghttp2_strerror(lib_error));
        break;
    }
    return 0;
}

/* ------------------------------------------------------------ connection */

static void cconn_fail_streams(struct cconn *cc, int code, const char *msg)
{
    while (!bf_list_empty(&cc->streams)) {
        struct bf_net_stream *s = BF_CONTAINER_OF(cc->streams.next, struct bf_net_stream, link);
        bf_list_del(&s->link);
        s->closed = true;
        if (s->local_set)
            stream_end(s, s->local_code, s->local_msg);
        else
            stream_end(s, code, msg);
    }
    cc->nstreams = 0;
}

static void cconn_schedule_keepalive(struct cconn *cc)
{
    struct bf_net_client *cl = cc->cl;
    if (cl->o.keepalive_ns > 0)
        bf_net_timer_start(&cc->timer, cl->o.keepalive_ns, 0);
}

static void cconn_timer_cb(struct bf_net_timer *t, void *arg)
{
    (void)t;
    struct cconn *cc = arg;
    struct bf_net_client *cl = cc->cl;
    cl_enter(cl);
    int64_t now = bf_mono_ns();
    if (!cc->got_settings) {
        BF_WARN("gRPC client: connect timeout", "addr=\"%s\"", cl->addr);
        bf_conn_abort(&cc->c, -ETIMEDOUT);
    } else if (cc->ping_out) {
        if (now - cc->ping_sent >= cl->o.keepalive_timeout_ns) {
            cl->stats.keepalive_timeouts++;
            BF_WARN("gRPC client: keepalive timeout", "addr=\"%s\"", cl->addr);
            bf_conn_abort(&cc->c, -ETIMEDOUT);
        } else {
            bf_net_timer_start(&cc->timer, cc->ping_sent + cl->o.keepalive_timeout_ns - now, 0);
        }
    } else if (cc->nstreams > 0 && now - cc->last_rx >= cl->o.keepalive_ns) {
        cc->ping_out = true;
        cc->ping_sent = now;
        nghttp2_submit_ping(cc->h2, NGHTTP2_FLAG_NONE, NULL);
        bf_conn_mark_dirty(&cc->c);
        bf_net_timer_start(&cc->timer, cl->o.keepalive_timeout_ns, 0);
    } else {
        int64_t next = cc->last_rx + cl->o.keepalive_ns - now;
        bf_net_timer_start(&cc->timer, next > 0 ? next : cl->o.keepalive_ns, 0);
    }
    cl_leave(cl);
}

static int cconn_on_ready(struct conn *c)
{
    struct cconn *cc = BF_CONTAINER_OF(c, struct cconn, c);
    struct bf_net_client *cl = cc->cl;
    if (c->tio.ssl) {
        if (bf_tls_alpn_h2(&c->tio) != 1) {
            cl->stats.handshake_failures++;
            BF_WARN("gRPC client: server did not negotiate h2", "addr=\"%s\"", cl->addr);
            return -EPROTO;
        }
        if (bf_tls_verify_name(&c->tio, cl->server_name) < 0) {
            cl->stats.handshake_failures++;
            BF_WARN("gRPC client: server certificate does not match name",
                    "addr=\"%s\" name=\"%s\"", cl->addr, cl->server_name);
            return -EPERM;
        }
    }
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, cl->o.stream_window},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, 65536},
    };
    nghttp2_submit_settings(cc->h2, NGHTTP2_FLAG_NONE, iv, sizeof iv / sizeof iv[0]);
    nghttp2_session_set_local_window_size(cc->h2, NGHTTP2_FLAG_NONE, 0, (int32_t)cl->o.conn_window);
    cc->ready = true;
    cc->last_rx = bf_mono_ns();
    if (cl->active == cc) {
        cl->state = BF_NET_CLIENT_READY;
        cl_enter(cl);
        flush_pending(cl);
        cl_leave(cl);
    }
    return 0;
}

static int cconn_on_data(struct conn *c, const uint8_t *p, size_t n)
{
    struct cconn *cc = BF_CONTAINER_OF(c, struct cconn, c);
    struct bf_net_client *cl = cc->cl;
    cc->last_rx = bf_mono_ns();
    cl_enter(cl);
    cc->in_h2++;
    cc->in_recv = true;
    ssize_t r = nghttp2_session_mem_recv(cc->h2, p, n);
    cc->in_recv = false;
    cc->in_h2--;
    /* the unary replies these bytes completed, outside nghttp2 */
    while (!bf_list_empty(&cc->recv_done)) {
        struct bf_net_stream *s =
            BF_CONTAINER_OF(cc->recv_done.next, struct bf_net_stream, fin_link);
        bf_list_del(&s->fin_link);
        stream_end(s, s->local_code, s->local_msg);
    }
    int ret = 0;
    if (r < 0) {
        cl->stats.protocol_errors++;
        BF_WARN("gRPC client: HTTP/2 error from server", "addr=\"%s\" err=\"%s\"", cl->addr,
                nghttp2_strerror((int)r));
        ret = -EPROTO;
    }
    cl_leave(cl);
    return ret;
}

static int cconn_produce(struct conn *c)
{
    struct cconn *cc = BF_CONTAINER_OF(c, struct cconn, c);
    struct bf_net_client *cl = cc->cl;
    cl_enter(cl);
    cc->in_h2++;
    int r = h2_produce(c, cc->h2, CLI_BATCH);
    cc->in_h2--;
    while (r == 0 && !bf_list_empty(&cc->drain_q) && c->state == C_OPEN) {
        struct bf_net_stream *s =
            BF_CONTAINER_OF(cc->drain_q.next, struct bf_net_stream, drain_link);
        bf_list_del(&s->drain_link);
        if (!s->delivered && s->out.bytes == 0 && s->cbs.on_drain)
            s->cbs.on_drain(s, s->arg);
    }
    cl_leave(cl);
    return r;
}

static bool cconn_done(struct conn *c)
{
    struct cconn *cc = BF_CONTAINER_OF(c, struct cconn, c);
    return !nghttp2_session_want_read(cc->h2) && !nghttp2_session_want_write(cc->h2);
}

static void enter_backoff(struct bf_net_client *cl);

static void cconn_on_close(struct conn *c, int err)
{
    struct cconn *cc = BF_CONTAINER_OF(c, struct cconn, c);
    struct bf_net_client *cl = cc->cl;
    cl_enter(cl);
    bf_net_timer_stop(&cc->timer);
    bool was_active = cl->active == cc;
    bool healthy = cc->got_settings;
    if (was_active)
        cl->active = NULL;
    /* decide the client state first: callbacks below may start new calls */
    if (was_active && !cl->destroying) {
        if (healthy) {
            cl->state = BF_NET_CLIENT_CONNECTING;
        } else {
            cl->stats.connect_failures++;
            cl->last_err = err ? -err : ECONNRESET;
            cl->last_err_resolve = false;
            BF_WARN("gRPC client: connect failed", "addr=\"%s\" err=\"%s\"", cl->addr,
                    strerror(cl->last_err));
            cl->state = BF_NET_CLIENT_BACKOFF;
        }
    }
    char msg[160];
    if (cl->destroying)
        snprintf(msg, sizeof msg, "client closed");
    else
        snprintf(msg, sizeof msg, "connection to %s lost: %s", cl->addr,
                 err ? strerror(-err) : "closed by peer");
    cconn_fail_streams(cc, cl->destroying ? BF_NET_CANCELLED : BF_NET_UNAVAILABLE, msg);
    nghttp2_session_del(cc->h2);
    cc->h2 = NULL;
    bf_list_del(&cc->link);
    if (was_active && !cl->destroying) {
        if (healthy)
            client_connect(cl); /* a healthy connection went away: reconnect now */
        else if (!cl->active)
            enter_backoff(cl);
    }
    cl_leave(cl);
}

static void cconn_release(struct conn *c)
{
    struct cconn *cc = BF_CONTAINER_OF(c, struct cconn, c);
    free(cc);
}

static const struct conn_ops cconn_ops = {
    .on_ready = cconn_on_ready,
    .on_data = cconn_on_data,
    .produce = cconn_produce,
    .done = cconn_done,
    .on_close = cconn_on_close,
    .release = cconn_release,
};

static void backoff_cb(struct bf_net_timer *t, void *arg)
{
    (void)t;
    struct bf_net_client *cl = arg;
    cl_enter(cl);
    if (!cl->active)
        client_connect(cl);
    cl_leave(cl);
}

static void enter_backoff(struct bf_net_client *cl)
{
    cl->state = BF_NET_CLIENT_BACKOFF;
    char msg[160];
    snprintf(msg, sizeof msg, "connection to %s unavailable: %s%s", cl->addr,
             cl->last_err_resolve ? "cannot resolve host name: " : "",
             strerror(cl->last_err ? cl->last_err : ECONNREFUSED));
    /* waiting calls fail; delivered from the loop (we may be inside an API call) */
    while (!bf_list_empty(&cl->pending)) {
        struct bf_net_stream *s = BF_CONTAINER_OF(cl->pending.next, struct bf_net_stream, link);
        bf_list_del(&s->link);
        cl->npending--;
        s->where = S_NEW;
        stream_finish_later(s, BF_NET_UNAVAILABLE, msg);
    }
    int64_t d = cl->backoff_cur;
    /* +-20% jitter */
    int64_t j = (int64_t)(bf_random_u64() % 4001) - 2000;
    d += d / 10000 * j;
    if (d < 1000000)
        d = 1000000;
    bf_net_timer_start(&cl->backoff_timer, d, 0);
    int64_t next = (int64_t)((double)cl->backoff_cur * 1.6);
    cl->backoff_cur = next > cl->o.backoff_max_ns ? cl->o.backoff_max_ns : next;
}

static void connect_failed(struct bf_net_client *cl, int r, bool resolving)
{
    cl->stats.connect_failures++;
    cl->last_err = -r;
    cl->last_err_resolve = resolving;
    if (resolving)
        BF_WARN("gRPC client: cannot resolve host name", "addr=\"%s\" err=\"%s\"", cl->addr,
                r == -EHOSTUNREACH ? "no such host or no address" : strerror(-r));
    else
        BF_WARN("gRPC client: cannot connect", "addr=\"%s\" err=\"%s\"", cl->addr, strerror(-r));
    enter_backoff(cl);
}

static void connect_to(struct bf_net_client *cl, const struct sockaddr_storage *ss, socklen_t sl);

static void resolve_done_cb(struct bf_net_watch *w, uint64_t count, void *arg)
{
    (void)w;
    (void)count;
    struct bf_net_client *cl = arg;
    if (!cl->resolve || cl->destroying)
        return;
    struct sockaddr_storage ss;
    socklen_t sl = 0;
    int r = bf_resolve_take(cl->resolve, &ss, &sl);
    if (r == -EINPROGRESS)
        return;
    cl->resolve = NULL;
    bf_net_timer_stop(&cl->resolve_timer);
    cl_enter(cl);
    if (r < 0)
        connect_failed(cl, r, true);
    else
        connect_to(cl, &ss, sl);
    cl_leave(cl);
}

static void resolve_timeout_cb(struct bf_net_timer *t, void *arg)
{
    (void)t;
    struct bf_net_client *cl = arg;
    if (!cl->resolve)
        return;
    bf_resolve_abandon(cl->resolve); /* its thread frees it when getaddrinfo returns */
    cl->resolve = NULL;
    cl_enter(cl);
    connect_failed(cl, -ETIMEDOUT, true);
    cl_leave(cl);
}

/* Starts resolving cl->host off the loop; 0 or a negative errno. */
static int resolve_begin(struct bf_net_client *cl)
{
    if (cl->res_efd < 0) {
        cl->res_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (cl->res_efd < 0)
            return -errno;
        int r = bf_net_watch_eventfd(cl->loop, cl->res_efd, resolve_done_cb, cl, &cl->res_watch);
        if (r < 0) {
            close(cl->res_efd);
            cl->res_efd = -1;
            return r;
        }
    }
    int r = bf_resolve_start(cl->host, cl->port, cl->res_efd, &cl->resolve);
    if (r < 0)
        return r;
    bf_net_timer_start(&cl->resolve_timer, cl->o.connect_timeout_ns, 0);
    return 0;
}

static void client_connect(struct bf_net_client *cl)
{
    if (cl->active || cl->destroying || cl->resolve)
        return;
    cl->state = BF_NET_CLIENT_CONNECTING;
    cl->stats.connect_attempts++;
    bf_net_timer_stop(&cl->backoff_timer);
    if (!cl->addr_is_name) {
        connect_to(cl, &cl->addr_lit, cl->addr_lit_len);
        return;
    }
    int r = resolve_begin(cl);
    if (r < 0)
        connect_failed(cl, r, true);
}

static void connect_to(struct bf_net_client *cl, const struct sockaddr_storage *ss, socklen_t sl)
{
    if (cl->tls)
        bf_tls_ctx_maybe_reload(&cl->tls);
    struct cconn *cc = NULL;
    int r = -ENOMEM;
    cc = calloc(1, sizeof *cc);
    if (!cc)
        goto out_fail;
    cc->cl = cl;
    bf_list_init(&cc->streams);
    bf_list_init(&cc->drain_q);
    bf_list_init(&cc->recv_done);
    if (nghttp2_session_client_new2(&cc->h2, cl->cbs, cc, cl->h2opt) != 0)
        goto out_fail;
    r = bf_conn_init_connect(&cc->c, cl->loop, (const struct sockaddr *)ss, sl, &cconn_ops,
                             &cl->stats, cl->tls, cl->server_name, 0);
    if (r < 0)
        goto out_fail;
    bf_list_add_tail(&cl->cconns, &cc->link);
    cl->active = cc;
    bf_timer_init(&cc->timer, cl->loop, cconn_timer_cb, cc);
    bf_net_timer_start(&cc->timer, cl->o.connect_timeout_ns, 0);
    return;
out_fail:
    if (cc) {
        if (cc->h2)
            nghttp2_session_del(cc->h2);
        free(cc);
    }
    connect_failed(cl, r, false);
}

/* ------------------------------------------------------------ lifecycle */

/* Releases what bf_net_client_new allocated (any of it may still be NULL). */
static void client_release(struct bf_net_client *cl)
{
    if (cl->h2opt)
        nghttp2_option_del(cl->h2opt);
    if (cl->cbs)
        nghttp2_session_callbacks_del(cl->cbs);
    bf_tls_ctx_unref(cl->tls);
    bf_grpc_spare_release(&cl->spare);
    free(cl->addr);
    free(cl->server_name);
    free(cl->authority);
    free(cl);
}

int bf_net_client_new(struct bf_net_loop *loop, const struct bf_net_client_opts *opts,
                      struct bf_net_client **out)
{
    if (!loop || !opts || !opts->addr || !out)
        return -EINVAL;
    struct sockaddr_storage ss;
    socklen_t sl = 0;
    char host[256];
    uint16_t port;
    /* syntax only: a host name is resolved at each connection attempt */
    int r = bf_addr_parse_literal(opts->addr, &ss, &sl, host, sizeof host, &port);
    if (r < 0)
        return r;
    struct bf_net_client *cl = calloc(1, sizeof *cl);
    if (!cl)
        return -ENOMEM;
    cl->res_efd = -1;
    cl->port = port;
    cl->addr_is_name = r == 1;
    cl->addr_lit = ss;
    cl->addr_lit_len = sl;
    cl->loop = loop;
    cl->o = *opts;
    cl->o.addr = NULL;
    cl->o.server_name = NULL;
    memset(&cl->o.tls, 0, sizeof cl->o.tls);
    if (!cl->o.connect_timeout_ns)
        cl->o.connect_timeout_ns = 20 * BF_NS_PER_SEC;
    if (!cl->o.backoff_initial_ns)
        cl->o.backoff_initial_ns = BF_NS_PER_SEC;
    if (!cl->o.backoff_max_ns)
        cl->o.backoff_max_ns = 30 * BF_NS_PER_SEC;
    if (cl->o.backoff_max_ns < cl->o.backoff_initial_ns)
        cl->o.backoff_max_ns = cl->o.backoff_initial_ns;
    if (!cl->o.keepalive_timeout_ns)
        cl->o.keepalive_timeout_ns = 20 * BF_NS_PER_SEC;
    if (!cl->o.max_recv_message)
        cl->o.max_recv_message = BF_NET_MAX_MESSAGE;
    cl->spare.max = cl->o.max_recv_message < BF_NET_RECV_SPARE_MAX ? cl->o.max_recv_message
                                                                   : BF_NET_RECV_SPARE_MAX;
    cl->spare.min = CLI_SPARE_MIN;
    if (!cl->o.max_send_message)
        cl->o.max_send_message = BF_NET_MAX_MESSAGE;
    if (!cl->o.max_pending)
        cl->o.max_pending = 1024;
    if (!cl->o.stream_window || cl->o.stream_window > 0x7fffffff)
        cl->o.stream_window = 1u << 20;
    if (!cl->o.conn_window || cl->o.conn_window > 0x7fffffff)
        cl->o.conn_window = 16u << 20;
    cl->backoff_cur = cl->o.backoff_initial_ns;
    snprintf(cl->host, sizeof cl->host, "%s", host[0] ? host : "127.0.0.1");
    bf_list_init(&cl->cconns);
    bf_list_init(&cl->pending);
    bf_list_init(&cl->finishing);
    bf_timer_init(&cl->backoff_timer, loop, backoff_cb, cl);
    bf_timer_init(&cl->kick_timer, loop, kick_cb, cl);
    bf_timer_init(&cl->resolve_timer, loop, resolve_timeout_cb, cl);
    r = -ENOMEM;
    cl->addr = strdup(opts->addr);
    cl->server_name =
        strdup(opts->server_name && *opts->server_name ? opts->server_name : cl->host);
    if (!cl->addr || !cl->server_name)
        goto out_fail;
    {
        size_t al = strlen(cl->server_name) + 16;
        cl->authority = malloc(al);
        if (!cl->authority)
            goto out_fail;
        bool v6 = strchr(cl->server_name, ':') != NULL;
        snprintf(cl->authority, al, v6 ? "[%s]:%u" : "%s:%u", cl->server_name, port);
    }
    const struct bf_net_tls_config *tc = &opts->tls;
    bool any_tls = (tc->cert_file && *tc->cert_file) || (tc->key_file && *tc->key_file) ||
                   (tc->ca_file && *tc->ca_file);
    if (any_tls) {
        r = bf_tls_ctx_new(tc, BF_TLS_CLIENT, &cl->tls);
        if (r < 0)
            goto out_fail;
    }
    r = -ENOMEM;
    if (nghttp2_session_callbacks_new(&cl->cbs) != 0)
        goto out_fail;
    nghttp2_session_callbacks_set_on_header_callback(cl->cbs, on_header_cb);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cl->cbs, on_frame_recv_cb);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cl->cbs, on_data_chunk_cb);
    nghttp2_session_callbacks_set_on_stream_close_callback(cl->cbs, on_stream_close_cb);
    nghttp2_session_callbacks_set_send_data_callback(cl->cbs, send_data_cb);
    nghttp2_session_callbacks_set_on_frame_not_send_callback(cl->cbs, on_frame_not_send_cb);
    if (nghttp2_option_new(&cl->h2opt) != 0)
        goto out_fail;
    nghttp2_option_set_no_closed_streams(cl->h2opt, 1);
    nghttp2_option_set_peer_max_concurrent_streams(cl->h2opt, 100);
    client_connect(cl);
    *out = cl;
    return 0;
out_fail:
    client_release(cl);
    return r;
}

void bf_net_client_set_unary_after_recv(struct bf_net_client *cl, bool on)
{
    cl->unary_after_recv = on;
}

void bf_net_client_flush(struct bf_net_client *cl)
{
    struct cconn *cc = cl->active;
    if (!cc || cc->in_h2 || !cc->h2 || !cc->ready)
        return;
    cl_enter(cl);
    bf_conn_flush_now(&cc->c);
    cl_leave(cl);
}

enum bf_net_client_state bf_net_client_state(const struct bf_net_client *cl)
{
    return cl->state;
}

void bf_net_client_stats(const struct bf_net_client *cl, struct bf_net_stats *out)
{
    *out = cl->stats;
    out->recv_buffer_reuses = cl->spare.reuses;
}

static void client_destroy(struct bf_net_client *cl)
{
    cl->destroying = true;
    cl->depth++;
    bf_net_timer_stop(&cl->backoff_timer);
    bf_net_timer_stop(&cl->kick_timer);
    bf_net_timer_stop(&cl->resolve_timer);
    bf_resolve_abandon(cl->resolve);
    cl->resolve = NULL;
    bf_net_watch_free(cl->res_watch);
    if (cl->res_efd >= 0)
        close(cl->res_efd);
    fail_pending(cl, BF_NET_CANCELLED, "client closed");
    while (!bf_list_empty(&cl->finishing)) {
        struct bf_net_stream *s =
            BF_CONTAINER_OF(cl->finishing.next, struct bf_net_stream, fin_link);
        bf_list_del(&s->fin_link);
        stream_end(s, s->local_code, s->local_msg);
    }
    while (!bf_list_empty(&cl->cconns)) {
        struct cconn *cc = BF_CONTAINER_OF(cl->cconns.next, struct cconn, link);
        bf_conn_abort(&cc->c, -ECANCELED);
    }
    client_release(cl);
}

void bf_net_client_free(struct bf_net_client *cl)
{
    if (!cl || cl->destroying)
        return;
    if (cl->depth > 0) {
        cl->free_pending = true;
        return;
    }
    client_destroy(cl);
}
