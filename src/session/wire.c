/*
 * wire.c — a minimal protobuf wire scanner for the session (see
 * bigfleet/session.h): route an OperatorMessage without unpacking it,
 * pre-count a rollup's Needs, read Hello.cluster_id byte-exact.
 *
 * Design notes: no allocation except bf_opmsg_member_bytes' result; every
 * length is checked against the remaining buffer before use (lengths are
 * 64-bit on the wire), so malformed input yields -EBADMSG, never a read
 * past the end.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/session.h"

static int read_varint(struct bf_pb_reader *r, uint64_t *v)
{
    uint64_t x = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (r->p >= r->end)
            return -EBADMSG;
        uint8_t b = *r->p++;
        if (shift == 63 && (b & 0x7e))
            return -EBADMSG; /* more than 64 bits */
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -EBADMSG;
}

int bf_pb_next(struct bf_pb_reader *r, struct bf_pb_field *f)
{
    if (r->p >= r->end)
        return 0;
    f->start = r->p;
    uint64_t tag;
    if (read_varint(r, &tag) != 0)
        return -EBADMSG;
    uint64_t num = tag >> 3;
    if (num == 0 || num > 536870911u)
        return -EBADMSG;
    f->num = (uint32_t)num;
    f->wt = (uint8_t)(tag & 7);
    f->p = NULL;
    f->len = 0;
    f->varint = 0;
    switch (f->wt) {
    case BF_PB_VARINT:
        return read_varint(r, &f->varint) == 0 ? 1 : -EBADMSG;
    case BF_PB_I64:
        if (r->end - r->p < 8)
            return -EBADMSG;
        for (int i = 7; i >= 0; i--)
            f->varint = f->varint << 8 | r->p[i];
        r->p += 8;
        return 1;
    case BF_PB_I32:
        if (r->end - r->p < 4)
            return -EBADMSG;
        for (int i = 3; i >= 0; i--)
            f->varint = f->varint << 8 | r->p[i];
        r->p += 4;
        return 1;
    case BF_PB_LEN: {
        uint64_t l;
        if (read_varint(r, &l) != 0)
            return -EBADMSG;
        if (l > (uint64_t)(r->end - r->p))
            return -EBADMSG;
        f->p = r->p;
        f->len = (size_t)l;
        r->p += l;
        return 1;
    }
    default:
        return -EBADMSG; /* groups and reserved wire types */
    }
}

int bf_opmsg_classify(const uint8_t *msg, size_t len, int *payload, const uint8_t **sub,
                      size_t *sublen, uint32_t *parts)
{
    struct bf_pb_reader r;
    struct bf_pb_field f;
    bf_pb_reader_init(&r, msg, len);
    *payload = 0;
    *sub = NULL;
    *sublen = 0;
    *parts = 0;
    int rc;
    uint32_t fields = 0;
    while ((rc = bf_pb_next(&r, &f)) == 1) {
        if (++fields > BF_OPMSG_MAX_FIELDS)
            return -E2BIG; /* see session.h: bounded work per message */
        if (f.num < 1 || f.num > 4)
            continue; /* unknown field: skipped, as every decoder does */
        if (f.wt != BF_PB_LEN)
            return -EBADMSG;
        if ((int)f.num != *payload) {
            *payload = (int)f.num;
            *parts = 0;
        }
        (*parts)++;
        *sub = f.p;
        *sublen = f.len;
    }
    return rc == 0 ? 0 : -EBADMSG;
}

int bf_opmsg_member_bytes(const uint8_t *msg, size_t len, uint32_t num, uint32_t oneof_lo,
                          uint32_t oneof_hi, uint8_t **out, size_t *outlen)
{
    struct bf_pb_reader r;
    struct bf_pb_field f;
    /* pass 1: where the run of `num` in effect starts, and its size */
    const uint8_t *run = NULL;
    size_t total = 0;
    bf_pb_reader_init(&r, msg, len);
    int rc;
    uint32_t cur = 0;
    while ((rc = bf_pb_next(&r, &f)) == 1) {
        if (f.num < oneof_lo || f.num > oneof_hi)
            continue;
        if (f.wt != BF_PB_LEN)
            return -EBADMSG;
        if (f.num != cur) {
            cur = f.num;
            run = f.start;
            total = 0;
        }
        total += f.len;
    }
    if (rc != 0)
        return -EBADMSG;
    *out = NULL;
    *outlen = 0;
    if (cur != num)
        return 0;
    uint8_t *buf = malloc(total ? total : 1);
    if (!buf)
        return -ENOMEM;
    size_t at = 0;
    bf_pb_reader_init(&r, run, (size_t)(msg + len - run));
    while (bf_pb_next(&r, &f) == 1) {
        if (f.num == num && f.wt == BF_PB_LEN) {
            memcpy(buf + at, f.p, f.len);
            at += f.len;
        }
    }
    *out = buf;
    *outlen = at;
    return 0;
}

int bf_rollup_count_needs(const uint8_t *buf, size_t len, uint32_t *n_needs)
{
    struct bf_pb_reader r;
    struct bf_pb_field f;
    bf_pb_reader_init(&r, buf, len);
    uint64_t n = 0;
    int rc;
    while ((rc = bf_pb_next(&r, &f)) == 1) {
        if (f.num == 1 && f.wt != BF_PB_LEN)
            return -EBADMSG;
        if (f.num == 2 && f.wt != BF_PB_VARINT)
            return -EBADMSG;
        if (f.num == 3) {
            if (f.wt != BF_PB_LEN)
                return -EBADMSG;
            n++;
        }
    }
    if (rc != 0)
        return -EBADMSG;
    *n_needs = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
    return 0;
}

int bf_hello_cluster_id(const uint8_t *sub, size_t len, const uint8_t **id, size_t *idlen)
{
    struct bf_pb_reader r;
    struct bf_pb_field f;
    bf_pb_reader_init(&r, sub, len);
    *id = NULL;
    *idlen = 0;
    int rc;
    while ((rc = bf_pb_next(&r, &f)) == 1) {
        if (f.num != 1)
            continue;
        if (f.wt != BF_PB_LEN)
            return -EBADMSG;
        *id = f.p; /* last one wins */
        *idlen = f.len;
    }
    return rc == 0 ? 0 : -EBADMSG;
}

bool bf_cluster_id_valid(const uint8_t *id, size_t len)
{
    if (!id || len == 0 || len > BF_CLUSTER_ID_MAX)
        return false;
    for (size_t i = 0; i < len; i++)
        if (id[i] < 0x21 || id[i] > 0x7e)
            return false;
    return true;
}
