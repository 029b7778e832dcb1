/*
 * wire.c — the session's scans of operator messages (see
 * bigfleet/opmsg.h): route an OperatorMessage without unpacking it,
 * pre-count a rollup's Needs, read Hello.cluster_id byte-exact.
 *
 * Design notes: every scan runs on the protobuf wire reader
 * (bigfleet/pbwire.h), which bounds every length by the buffer, so malformed
 * input yields -EBADMSG, never a read past the end. No allocation except
 * bf_opmsg_member_bytes' result.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/opmsg.h"

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
            return -E2BIG; /* see opmsg.h: bounded work per message */
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

int bf_rollup_scan_top(const uint8_t *buf, size_t len, struct bf_rollup_top *out)
{
    struct bf_pb_reader r;
    struct bf_pb_field f;
    bf_pb_reader_init(&r, buf, len);
    uint64_t n = 0;
    *out = (struct bf_rollup_top){.cluster_id = (const uint8_t *)""};
    int rc;
    while ((rc = bf_pb_next(&r, &f)) == 1) {
        if (f.num == 3) {
            if (f.wt != BF_PB_LEN)
                return -EBADMSG;
            n++;
        } else if (f.num == 1) {
            if (f.wt != BF_PB_LEN)
                return -EBADMSG;
            out->cluster_id = f.p;
            out->cluster_id_len = f.len;
        } else if (f.num == 2) {
            if (f.wt != BF_PB_VARINT)
                return -EBADMSG;
            out->timestamp = (int64_t)f.varint;
        }
    }
    if (rc != 0)
        return -EBADMSG;
    out->n_needs = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
    return 0;
}

int bf_rollup_count_needs(const uint8_t *buf, size_t len, uint32_t *n_needs)
{
    struct bf_rollup_top t;
    int rc = bf_rollup_scan_top(buf, len, &t);
    if (rc == 0)
        *n_needs = t.n_needs;
    return rc;
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
