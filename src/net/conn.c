/*
 * conn.c — one TCP connection on the io_uring loop: multishot recv from the
 * provided-buffer ring, one outstanding send with partial-write handling,
 * optional TLS (wolfSSL over custom I/O callbacks, tls.c) and the close
 * sequence. The upper layers (HTTP/2 server/client, HTTP/1.1) plug in
 * through struct conn_ops (net_internal.h).
 *
 * Design notes
 *   - Output: the upper layer writes only from ops->produce (called by
 *     conn_flush when no send is in flight) into `pending`; TLS records that
 *     wolfSSL emits by itself (handshake, alerts, tickets) also land in
 *     `pending`. A send takes `pending` over as `inflight` (swap), so the
 *     buffer the kernel is reading is never reallocated. Short sends are
 *     resubmitted from the offset. Produce stops at CONN_BATCH bytes, so a
 *     large message streams through a bounded buffer; buffers are freed
 *     when drained, so idle connections hold no output memory.
 *   - Input: plaintext goes straight from the provided buffer to
 *     ops->on_data; TLS ciphertext is offered to wolfSSL from the provided
 *     buffer and anything it did not take is copied to `spill`. The buffer
 *     is returned to the ring before the CQE handler returns.
 *   - Close: bf_conn_close() = drain (TLS close_notify, flush) -> SHUT_WR ->
 *     linger (discard input until EOF, at most 1 s) -> bf_conn_abort(0).
 *     bf_conn_abort() shuts the socket down, cancels recv/send/connect, runs
 *     ops->on_close once, and ops->release runs when the last CQE is back.
 *   - Layering: conn.c is above loop.c and tls.c. The loop reaches a conn
 *     only through its struct bf_loop_endpoint (completion callback, flush,
 *     free with the loop), tls.c only through its struct bf_tls_io
 *     (ciphertext in, tls_out); neither calls into this file.
 */
#include <errno.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bigfleet/log.h"
#include "bigfleet/util.h"
#include "net/net_internal.h"

#define CONN_BATCH (128u * 1024)
#define LINGER_NS  (1 * BF_NS_PER_SEC)
/* Output beyond this grows straight to CONN_OUT_ROOM (pending_append) */
#define CONN_OUT_SMALL (16u * 1024)
#define CONN_OUT_ROOM                                                                              \
    (1024u * 1024 + 2 * CONN_BATCH) /* a body batch (H2_BODY_BATCH) and what crossed it */

static void obuf_release(struct obuf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* Appends to the pending output. Small outputs grow as obuf_append grows
 * them; once they pass CONN_OUT_SMALL the buffer goes to CONN_OUT_ROOM (or
 * what is needed) in one step instead of doubling from 16 KiB, where every
 * step copied what it held. A produce stops at about CONN_BATCH between
 * nghttp2 calls (h2_produce) and, for a NO_COPY body, at about H2_BODY_BATCH
 * between its DATA frames (outbox_send_frame answers NGHTTP2_ERR_WOULDBLOCK
 * once the conn holds that much; before issue 18's stop 32 one nghttp2_session_mem_send
 * handed over every frame the windows allowed: 8 MiB with the provider
 * client's window, regrown, copied and faulted in anew for every window's
 * worth of a List page). So the two buffers stay at CONN_OUT_ROOM and are
 * swapped, not freed, while output flows; larger ones (TLS records of a
 * batch, a large HEADERS block) are freed at the next swap, and all when the
 * output drains (conn_flush). The high-water mark of pending + in flight is
 * struct bf_net_stats.out_queued_max. 0 or -ENOMEM. */
static int pending_append(struct conn *c, const void *p, size_t n)
{
    struct obuf *b = &c->pending;
    size_t need;
    if (__builtin_add_overflow(b->len, n, &need))
        return -ENOMEM;
    if (need > b->cap && need > CONN_OUT_SMALL) {
        if (bf_grow((void **)&b->p, &b->cap, need > CONN_OUT_ROOM ? need : CONN_OUT_ROOM, 1))
            return -ENOMEM;
        c->stats->out_buffer_grows++;
    }
    if (obuf_append(b, p, n))
        return -ENOMEM;
    size_t q = bf_conn_queued(c);
    if (q > c->stats->out_queued_max)
        c->stats->out_queued_max = q;
    return 0;
}

/* The TLS layer's output (struct bf_tls_io.out): records to the pending
 * output, refused once the connection is closed. */
static int tls_out(struct bf_tls_io *io, const void *p, size_t n)
{
    struct conn *c = BF_CONTAINER_OF(io, struct conn, tio);
    if (c->state == C_CLOSED)
        return -EPIPE;
    return pending_append(c, p, n) < 0 ? -ENOMEM : 0;
}

static void conn_complete(struct bf_loop_handler *h, unsigned op, int res, unsigned flags);
static void conn_flush_ep(struct bf_loop_endpoint *ep);
static void conn_free_leftover(struct bf_loop_endpoint *ep);

static const struct bf_loop_endpoint_ops conn_ep_ops = {
    .flush = conn_flush_ep,
    .free_leftover = conn_free_leftover,
};

/* The loop's completions reach the conn through its first member. */
_Static_assert(offsetof(struct conn, ep) == 0 && offsetof(struct bf_loop_endpoint, h) == 0,
               "BF_UD(c, op) must be the address of c's handler");

/* Binds c to the loop's callbacks and the TLS layer's output. */
static void conn_bind(struct conn *c)
{
    c->ep.h.complete = conn_complete;
    c->ep.ops = &conn_ep_ops;
    c->tio.is_client = c->is_client;
    c->tio.out = tls_out;
}

static void linger_cb(struct bf_net_timer *t, void *arg)
{
    (void)t;
    struct conn *c = arg;
    bf_conn_abort(c, 0);
}

static void conn_common_init(struct conn *c, struct bf_net_loop *loop, int fd,
                             const struct conn_ops *ops, struct bf_net_stats *stats)
{
    c->loop = loop;
    c->ops = ops;
    c->stats = stats;
    c->fd = fd;
    bf_list_init(&c->ep.dirty_link);
    bf_list_add_tail(&loop->conns, &c->ep.link);
    bf_timer_init(&c->timer, loop, linger_cb, c);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    stats->conns_open++;
}

static void arm_recv(struct conn *c)
{
    struct io_uring_sqe *sqe = bf_loop_sqe(c->loop);
    io_uring_prep_recv_multishot(sqe, c->fd, NULL, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = BF_NET_BGID;
    io_uring_sqe_set_data64(sqe, BF_UD(c, BF_OP_RECV));
    c->recv_armed = true;
}

int bf_conn_init_accepted(struct conn *c, struct bf_net_loop *loop, int fd,
                          const struct conn_ops *ops, struct bf_net_stats *stats,
                          struct bf_tls_ctx *tls)
{
    c->fd = fd;
    c->is_client = false;
    conn_bind(c);
    if (tls) {
        int r = bf_tls_session_new(&c->tio, tls, NULL);
        if (r < 0)
            return r;
        c->state = C_HANDSHAKE;
    } else {
        c->state = C_OPEN;
    }
    conn_common_init(c, loop, fd, ops, stats);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0)
        bf_addr_format((struct sockaddr *)&ss, c->peer, sizeof c->peer);
    else
        strcpy(c->peer, "?");
    arm_recv(c);
    return 0;
}

int bf_conn_init_connect(struct conn *c, struct bf_net_loop *loop, const struct sockaddr *sa,
                         socklen_t salen, const struct conn_ops *ops, struct bf_net_stats *stats,
                         struct bf_tls_ctx *tls, const char *sni, int64_t timeout_ns)
{
    (void)timeout_ns;
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    c->fd = fd;
    c->is_client = true;
    conn_bind(c);
    if (tls) {
        int r = bf_tls_session_new(&c->tio, tls, sni);
        if (r < 0) {
            close(fd);
            c->fd = -1;
            return r;
        }
    }
    c->state = C_CONNECTING;
    conn_common_init(c, loop, fd, ops, stats);
    memcpy(&c->addr, sa, salen);
    c->addrlen = salen;
    bf_addr_format(sa, c->peer, sizeof c->peer);
    struct io_uring_sqe *sqe = bf_loop_sqe(loop);
    io_uring_prep_connect(sqe, fd, (struct sockaddr *)&c->addr, c->addrlen);
    io_uring_sqe_set_data64(sqe, BF_UD(c, BF_OP_CONNECT));
    c->connect_inflight = true;
    return 0;
}

bool bf_conn_is_open(const struct conn *c)
{
    return c->state == C_OPEN;
}

size_t bf_conn_queued(const struct conn *c)
{
    return (c->pending.len) + (c->inflight.len - c->inflight.off);
}

void bf_conn_mark_dirty(struct conn *c)
{
    if (c->ep.dirty || c->state == C_CLOSED)
        return;
    c->ep.dirty = true;
    bf_list_add_tail(&c->loop->dirty, &c->ep.dirty_link);
}

static void maybe_release(struct conn *c)
{
    if (c->state != C_CLOSED || c->busy || c->recv_armed || c->send_inflight || c->connect_inflight)
        return;
    bf_list_del(&c->ep.link);
    if (c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
    }
    if (c->tio.ssl)
        bf_tls_session_free(&c->tio);
    obuf_release(&c->inflight);
    obuf_release(&c->pending);
    obuf_release(&c->spill);
    c->ops->release(c);
}

void bf_conn_abort(struct conn *c, int err)
{
    if (c->state == C_CLOSED)
        return;
    c->state = C_CLOSED;
    if (c->ep.dirty) {
        bf_list_del(&c->ep.dirty_link);
        c->ep.dirty = false;
    }
    bf_net_timer_stop(&c->timer);
    if (c->fd >= 0)
        shutdown(c->fd, SHUT_RDWR);
    if (c->recv_armed)
        bf_loop_cancel(c->loop, BF_UD(c, BF_OP_RECV));
    if (c->send_inflight)
        bf_loop_cancel(c->loop, BF_UD(c, BF_OP_SEND));
    if (c->connect_inflight)
        bf_loop_cancel(c->loop, BF_UD(c, BF_OP_CONNECT));
    if (c->stats->conns_open)
        c->stats->conns_open--;
    if (!c->up_closed) {
        c->up_closed = true;
        c->busy++;
        c->ops->on_close(c, err);
        c->busy--;
    }
    maybe_release(c);
}

void bf_conn_close(struct conn *c)
{
    if (c->state >= C_DRAIN)
        return;
    if (c->state == C_CONNECTING) {
        bf_conn_abort(c, 0);
        return;
    }
    if (c->tio.ssl && c->tls_done)
        bf_tls_shutdown(&c->tio);
    c->state = C_DRAIN;
    bf_conn_mark_dirty(c);
}

int bf_conn_write(struct conn *c, const void *p, size_t n)
{
    if (!c->tio.ssl)
        return pending_append(c, p, n);
    struct bf_net_loop *l = c->loop;
    const uint8_t *s = p;
    while (n > 0) {
        size_t space = BF_TLS_STAGE - l->tls_stage_len;
        size_t take = n < space ? n : space;
        memcpy(l->tls_stage + l->tls_stage_len, s, take);
        l->tls_stage_len += take;
        s += take;
        n -= take;
        if (l->tls_stage_len == BF_TLS_STAGE) {
            int r = bf_tls_write(&c->tio, l->tls_stage, l->tls_stage_len);
            l->tls_stage_len = 0;
            if (r < 0)
                return r;
        }
    }
    return 0;
}

static int conn_write_end(struct conn *c)
{
    struct bf_net_loop *l = c->loop;
    if (!c->tio.ssl || l->tls_stage_len == 0)
        return 0;
    int r = bf_tls_write(&c->tio, l->tls_stage, l->tls_stage_len);
    l->tls_stage_len = 0;
    return r;
}

static void submit_send(struct conn *c)
{
    struct io_uring_sqe *sqe = bf_loop_sqe(c->loop);
    io_uring_prep_send(sqe, c->fd, c->inflight.p + c->inflight.off,
                       c->inflight.len - c->inflight.off, MSG_NOSIGNAL);
    io_uring_sqe_set_data64(sqe, BF_UD(c, BF_OP_SEND));
    c->send_inflight = true;
}

static void conn_flush(struct conn *c)
{
    if (c->send_inflight || c->state == C_CLOSED || c->state == C_CONNECTING)
        return;
    c->busy++;
    if (c->state == C_OPEN && c->pending.len < CONN_BATCH) {
        c->loop->producing++;
        int r = c->ops->produce(c);
        int r2 = conn_write_end(c);
        c->loop->producing--;
        if (r < 0 || r2 < 0) {
            bf_conn_abort(c, r < 0 ? r : r2);
            goto out;
        }
        if (c->state == C_CLOSED)
            goto out;
    }
    if (c->pending.len > 0) {
        struct obuf t = c->inflight;
        c->inflight = c->pending;
        c->inflight.off = 0;
        c->pending = t;
        c->pending.len = c->pending.off = 0;
        if (c->pending.cap > CONN_OUT_ROOM) /* do not keep an oversized spare */
            obuf_release(&c->pending);
        submit_send(c);
        goto out;
    }
    /* nothing to send: give the memory back */
    obuf_release(&c->inflight);
    obuf_release(&c->pending);
    if (c->state == C_OPEN && c->ops->done(c))
        bf_conn_close(c);
    if (c->state == C_DRAIN) {
        if (c->pending.len > 0) { /* close_notify just queued */
            bf_conn_mark_dirty(c);
        } else {
            shutdown(c->fd, SHUT_WR);
            c->state = C_LINGER;
            bf_net_timer_start(&c->timer, LINGER_NS, 0);
        }
    }
out:
    c->busy--;
    maybe_release(c);
}

void bf_conn_flush_now(struct conn *c)
{
    /* not inside another flush's output production (any conn of this loop) */
    if (c->state != C_OPEN || c->send_inflight || c->loop->producing)
        return;
    if (c->ep.dirty) { /* this is that flush */
        bf_list_del(&c->ep.dirty_link);
        c->ep.dirty = false;
    }
    c->busy++;
    conn_flush(c);
    bool sending = c->send_inflight;
    c->busy--;
    if (sending)
        bf_loop_submit(c->loop);
    maybe_release(c);
}

/* Plaintext from bf_tls_read: to the upper layer; stop once it closed us. */
static int tls_emit(struct bf_tls_io *io, const uint8_t *p, size_t n)
{
    struct conn *c = BF_CONTAINER_OF(io, struct conn, tio);
    int r = c->ops->on_data(c, p, n);
    if (r < 0)
        return r;
    return c->state != C_OPEN;
}

static void conn_input_tls(struct conn *c, const uint8_t *data, size_t n)
{
    bool from_spill = false;
    if (c->spill.len > c->spill.off) {
        if (obuf_append(&c->spill, data, n) < 0) {
            bf_conn_abort(c, -ENOMEM);
            return;
        }
        c->tio.in = c->spill.p + c->spill.off;
        c->tio.in_len = c->spill.len - c->spill.off;
        from_spill = true;
    } else {
        c->tio.in = data;
        c->tio.in_len = n;
    }
    size_t offered = c->tio.in_len;
    if (!c->tls_done) {
        int r = bf_tls_handshake(&c->tio);
        if (r < 0) {
            char eb[128];
            c->stats->handshake_failures++;
            BF_WARN("TLS handshake failed", "peer=%s err=\"%s\"", c->peer,
                    bf_tls_error_string(r, eb, sizeof eb));
            c->tio.in = NULL;
            c->tio.in_len = 0;
            if (c->is_client)
                bf_conn_abort(c, -EPROTO); /* the caller wants the failure now */
            else
                bf_conn_close(c); /* flush the alert wolfSSL queued, then close */
            return;
        }
        if (r == 0)
            goto keep;
        c->tls_done = true;
        c->state = C_OPEN;
        r = c->ops->on_ready(c);
        if (r < 0) {
            bf_conn_abort(c, r);
            return;
        }
        bf_tls_session_trim(&c->tio); /* handshake state and zero pages back */
        if (c->state != C_OPEN)
            goto keep;
    }
    {
        int r = bf_tls_read(&c->tio, c->loop->tls_read, sizeof c->loop->tls_read, tls_emit);
        if (c->state == C_CLOSED)
            return;
        if (r == 1) { /* close_notify */
            bf_conn_abort(c, 0);
            return;
        }
        if (r < 0) {
            char eb[128];
            c->stats->protocol_errors++;
            BF_WARN("TLS read failed", "peer=%s err=\"%s\"", c->peer,
                    bf_tls_error_string(r, eb, sizeof eb));
            bf_conn_abort(c, -EPROTO);
            return;
        }
    }
keep:
    if (c->state == C_CLOSED)
        return;
    if (from_spill) {
        c->spill.off += offered - c->tio.in_len;
        if (c->spill.off == c->spill.len)
            obuf_release(&c->spill);
    } else if (c->tio.in_len > 0) {
        if (obuf_append(&c->spill, c->tio.in, c->tio.in_len) < 0) {
            bf_conn_abort(c, -ENOMEM);
            return;
        }
    }
    c->tio.in = NULL;
    c->tio.in_len = 0;
}

static void conn_input(struct conn *c, const uint8_t *data, size_t n)
{
    c->stats->bytes_in += n;
    if (c->state == C_LINGER || c->state == C_DRAIN)
        return;
    if (c->tio.ssl) {
        conn_input_tls(c, data, n);
    } else {
        int r = c->ops->on_data(c, data, n);
        if (r < 0) {
            bf_conn_abort(c, r);
            return;
        }
    }
    bf_conn_mark_dirty(c);
}

static void handle_recv(struct conn *c, int res, unsigned flags)
{
    if (!(flags & IORING_CQE_F_MORE))
        c->recv_armed = false;
    if (res > 0) {
        unsigned bid = flags >> IORING_CQE_BUFFER_SHIFT;
        if (c->state != C_CLOSED)
            conn_input(c, bf_loop_buffer(c->loop, bid), (size_t)res);
        bf_loop_recycle(c->loop, bid);
    } else if (res == 0) {
        if (c->state != C_CLOSED)
            bf_conn_abort(c, 0); /* peer closed */
        return;
    } else if (res == -ENOBUFS) {
        c->loop->enobufs++;
    } else if (res != -ECANCELED) {
        if (c->state != C_CLOSED)
            bf_conn_abort(c, res);
        return;
    }
    if (!c->recv_armed && c->state != C_CLOSED && res != -ECANCELED)
        arm_recv(c);
}

static void handle_send(struct conn *c, int res)
{
    c->send_inflight = false;
    if (c->state == C_CLOSED)
        return;
    if (res < 0) {
        bf_conn_abort(c, res);
        return;
    }
    c->stats->bytes_out += (uint64_t)res;
    c->inflight.off += (size_t)res;
    if (c->inflight.off < c->inflight.len) {
        submit_send(c); /* short send: the rest */
        return;
    }
    c->inflight.len = c->inflight.off = 0;
    conn_flush(c);
}

static void handle_connect(struct conn *c, int res)
{
    c->connect_inflight = false;
    if (c->state == C_CLOSED)
        return;
    if (res < 0) {
        bf_conn_abort(c, res);
        return;
    }
    arm_recv(c);
    if (c->tio.ssl) {
        c->state = C_HANDSHAKE;
        int r = bf_tls_handshake(&c->tio); /* ClientHello into pending */
        if (r < 0) {
            c->stats->handshake_failures++;
            bf_conn_abort(c, -EPROTO);
            return;
        }
        bf_conn_mark_dirty(c);
        return;
    }
    c->state = C_OPEN;
    int r = c->ops->on_ready(c);
    if (r < 0) {
        bf_conn_abort(c, r);
        return;
    }
    bf_conn_mark_dirty(c);
}

/* The loop's completion callback for c's recv, send and connect. */
static void conn_complete(struct bf_loop_handler *h, unsigned op, int res, unsigned flags)
{
    struct conn *c = BF_CONTAINER_OF(h, struct conn, ep.h);
    c->busy++;
    switch (op) {
    case BF_OP_RECV:
        handle_recv(c, res, flags);
        break;
    case BF_OP_SEND:
        handle_send(c, res);
        break;
    case BF_OP_CONNECT:
        handle_connect(c, res);
        break;
    default:
        break;
    }
    c->busy--;
    maybe_release(c);
}

static void conn_flush_ep(struct bf_loop_endpoint *ep)
{
    conn_flush(BF_CONTAINER_OF(ep, struct conn, ep));
}

static void conn_free_leftover(struct bf_loop_endpoint *ep)
{
    struct conn *c = BF_CONTAINER_OF(ep, struct conn, ep);
    /* the ring is gone: no operation will come back */
    c->recv_armed = c->send_inflight = c->connect_inflight = false;
    c->busy = 0;
    if (c->state != C_CLOSED)
        bf_conn_abort(c, -ECANCELED);
    else
        maybe_release(c);
}
