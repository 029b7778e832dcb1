/*
 * h2_common.h — pieces shared by the gRPC server and client on nghttp2:
 * the per-call outbox of framed messages, header helpers, and the
 * "produce" step that moves nghttp2 output into a conn.
 */
#ifndef BF_NET_H2_COMMON_H
#define BF_NET_H2_COMMON_H

#include <errno.h>
#include <nghttp2/nghttp2.h>
#include <protobuf-c/protobuf-c.h>
#include <stdlib.h>
#include <string.h>

#include "net/grpc_wire.h"
#include "net/net_internal.h"

/* One framed message (5-byte prefix + payload) waiting to be sent: the
 * payload follows the prefix in data[], or (a message handed over without a
 * copy, omsg_take / omsg_lend) lives in ext, a malloc'd buffer freed with
 * the omsg, or given back through rel (omsg_lend). */
struct omsg {
    struct omsg *next;
    size_t len;            /* prefix + payload */
    uint8_t *ext;          /* the payload when not in data[] (owned), or NULL */
    bf_net_release_fn rel; /* gives ext back instead of free(), or NULL */
    void *rel_arg;
    uint8_t data[];
};

/* FIFO of framed messages with a read offset into the head. */
struct outbox {
    struct omsg *head, *tail;
    uint32_t off;  /* read offset into head (a framed message is < 4 GiB: 32-bit prefix) */
    uint32_t held; /* bytes of the DATA frame nghttp2 holds after WOULDBLOCK: promised,
                    * outbox_drop_unsent keeps them (review-s32b) */
    size_t bytes;  /* not yet handed to nghttp2 */
};

static inline struct omsg *omsg_new(size_t payload)
{
    struct omsg *m = malloc(sizeof *m + BF_GRPC_PREFIX + payload);
    if (!m)
        return NULL;
    m->next = NULL;
    m->len = BF_GRPC_PREFIX + payload;
    m->ext = NULL;
    m->rel = NULL;
    m->rel_arg = NULL;
    bf_grpc_prefix(m->data, (uint32_t)payload);
    return m;
}

/* The payload buffer of a message handed over without a copy: given back
 * (rel) or freed. */
static inline void omsg_release_ext(void *ext, bf_net_release_fn rel, void *arg)
{
    if (rel)
        rel(ext, arg);
    else
        free(ext);
}

static inline void omsg_free(struct omsg *m)
{
    omsg_release_ext(m->ext, m->rel, m->rel_arg);
    free(m);
}

/* A framed message whose payload is msg itself (owned by the omsg from this
 * call on, released on every error too): no copy. omsg_take: msg is
 * malloc'd and freed with free(); omsg_lend: given back with rel(msg, arg).
 * 0, -EMSGSIZE or -ENOMEM. */
static inline int omsg_lend(void *msg, size_t len, size_t max, bf_net_release_fn rel, void *arg,
                            struct omsg **out)
{
    struct omsg *m = len > max ? NULL : malloc(sizeof *m + BF_GRPC_PREFIX);
    if (!m) {
        omsg_release_ext(msg, rel, arg);
        return len > max ? -EMSGSIZE : -ENOMEM;
    }
    m->next = NULL;
    m->len = BF_GRPC_PREFIX + len;
    m->ext = msg;
    m->rel = rel;
    m->rel_arg = arg;
    bf_grpc_prefix(m->data, (uint32_t)len);
    *out = m;
    return 0;
}
static inline int omsg_take(void *msg, size_t len, size_t max, struct omsg **out)
{
    return omsg_lend(msg, len, max, NULL, NULL, out);
}

/* A framed copy of a len-byte payload (msg may be NULL when len is 0), or of
 * a protobuf message packed into one; max is the peer-facing send limit.
 * 0 (*out owns the message), -EMSGSIZE (over max) or -ENOMEM. */
static inline int omsg_copy(const void *msg, size_t len, size_t max, struct omsg **out)
{
    if (len > max)
        return -EMSGSIZE;
    struct omsg *m = omsg_new(len);
    if (!m)
        return -ENOMEM;
    if (len)
        memcpy(m->data + BF_GRPC_PREFIX, msg, len);
    *out = m;
    return 0;
}
static inline int omsg_pack(const ProtobufCMessage *pm, size_t max, struct omsg **out)
{
    size_t len = protobuf_c_message_get_packed_size(pm);
    if (len > max)
        return -EMSGSIZE;
    struct omsg *m = omsg_new(len);
    if (!m)
        return -ENOMEM;
    protobuf_c_message_pack(pm, m->data + BF_GRPC_PREFIX);
    *out = m;
    return 0;
}

static inline void outbox_push(struct outbox *o, struct omsg *m)
{
    if (o->tail)
        o->tail->next = m;
    else
        o->head = m;
    o->tail = m;
    o->bytes += m->len;
}

static inline void outbox_clear(struct outbox *o)
{
    struct omsg *m = o->head;
    while (m) {
        struct omsg *n = m->next;
        omsg_free(m);
        m = n;
    }
    memset(o, 0, sizeof *o);
}

/* Drops every message not yet started (a partly sent head stays, so the
 * peer never sees a truncated message). */
static inline void outbox_drop_unsent(struct outbox *o)
{
    size_t need = (size_t)o->off + o->held; /* from the head's start: sent or promised */
    struct omsg *m = o->head, *last = NULL;
    size_t at = 0;
    while (m && at < need) {
        last = m;
        at += m->len;
        m = m->next;
    }
    if (!last) {
        outbox_clear(o);
        return;
    }
    last->next = NULL;
    o->tail = last;
    while (m) {
        struct omsg *n = m->next;
        o->bytes -= m->len;
        omsg_free(m);
        m = n;
    }
}

/* Moves up to n bytes from the outbox into conn (bf_conn_write). Returns
 * bytes moved or -ENOMEM. */
static inline ssize_t outbox_to_conn(struct outbox *o, struct conn *c, size_t n)
{
    size_t done = 0;
    while (done < n && o->head) {
        struct omsg *m = o->head;
        size_t avail = m->len - o->off;
        size_t take = n - done < avail ? n - done : avail;
        if (m->ext && o->off < BF_GRPC_PREFIX) { /* the prefix, then the payload */
            size_t h = BF_GRPC_PREFIX - o->off < take ? BF_GRPC_PREFIX - o->off : take;
            if (bf_conn_write(c, m->data + o->off, h) < 0 || bf_conn_write(c, m->ext, take - h) < 0)
                return -ENOMEM;
        } else if (bf_conn_write(c, m->ext ? m->ext + (o->off - BF_GRPC_PREFIX) : m->data + o->off,
                                 take) < 0) {
            return -ENOMEM;
        }
        o->off += take;
        done += take;
        if (o->off == m->len) {
            o->head = m->next;
            if (!o->head)
                o->tail = NULL;
            o->off = 0;
            omsg_free(m);
        }
    }
    o->bytes -= done;
    return (ssize_t)done;
}

/* The two halves of an nghttp2 DATA frame with NO_COPY, for the server's
 * calls and the client's streams alike:
 * outbox_take: the payload length of the next frame (at most `length`, what
 * the outbox holds), NO_COPY flagged when there is any; the caller then
 * decides the end of the stream (it differs: trailers vs END_STREAM);
 * outbox_send_frame: writes the 9-byte frame header and `length` bytes of the
 * outbox into conn; 0, NGHTTP2_ERR_WOULDBLOCK (conn already holds `batch`
 * bytes or more: nothing written) or NGHTTP2_ERR_CALLBACK_FAILURE.
 *
 * Why WOULDBLOCK (issue 18, stop 32): nghttp2_session_mem_send calls the
 * send_data callback for one NO_COPY frame after another inside one call,
 * until the flow-control windows close, so h2_produce's batch bound never
 * applied to a NO_COPY body: with an 8 MiB stream window a 14 MB List page
 * put 8 MiB into the conn's output buffer in one produce (regrown and
 * copied, new pages faulted in, freed when drained, for every window's
 * worth). On WOULDBLOCK mem_send returns 0 and keeps the frame; the next
 * produce (when the send completes) offers the same frame again, so the
 * output stays at about `batch` bytes whatever the window.
 *
 * The bound for a body is H2_BODY_BATCH (1 MiB), not the 128 KiB a produce
 * stops at between nghttp2 calls: the next produce waits for the send in
 * flight to complete, so a 0.9 MB List page of the resync walk cut into
 * 128 KiB sends paid seven send round trips instead of one (resync walk
 * at 500K, 3 alternated pairs: 96-109 ms -> 120-164 ms wall, the
 * simulator's CPU +40-70 %). A 1 MiB bound sends such a page in one go and
 * still keeps an 8 MiB window's worth out of the buffer. */
#define H2_BODY_BATCH (1024u * 1024)
static inline size_t outbox_take(const struct outbox *o, size_t length, uint32_t *flags)
{
    size_t n = o->bytes < length ? o->bytes : length;
    if (n > 0)
        *flags |= NGHTTP2_DATA_FLAG_NO_COPY;
    return n;
}
static inline int outbox_send_frame(struct outbox *o, struct conn *c, const uint8_t *framehd,
                                    size_t length, size_t batch)
{
    if (bf_conn_queued(c) >= batch) {
        o->held = (uint32_t)length; /* promised to nghttp2: outbox_drop_unsent keeps it */
        return NGHTTP2_ERR_WOULDBLOCK;
    }
    o->held = 0;
    if (bf_conn_write(c, framehd, 9) < 0)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    if (outbox_to_conn(o, c, length) != (ssize_t)length)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    return 0;
}

#define BF_NV(n, v, vl)                                                                            \
    {                                                                                              \
        (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, (vl),                                       \
            NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE                           \
    }
#define BF_NVS(n, v) BF_NV(n, v, sizeof(v) - 1)

/* Pulls output from the session into the conn until it has ~batch bytes. */
static inline int h2_produce(struct conn *c, nghttp2_session *h2, size_t batch)
{
    while (bf_conn_queued(c) < batch) {
        const uint8_t *p;
        ssize_t n = nghttp2_session_mem_send(h2, &p);
        if (n < 0)
            return -EPROTO;
        if (n == 0)
            break;
        if (bf_conn_write(c, p, (size_t)n) < 0)
            return -ENOMEM;
    }
    return 0;
}

static inline bool h2_name_is(const uint8_t *name, size_t len, const char *lit)
{
    size_t l = strlen(lit);
    return len == l && memcmp(name, lit, l) == 0;
}

#endif /* BF_NET_H2_COMMON_H */
