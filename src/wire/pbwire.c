/*
 * pbwire.c — the protobuf wire reader's out-of-line parts and the
 * unknown-field scan (see bigfleet/pbwire.h; bf_pb_next, the varint fast
 * path and the writer are static inline there).
 *
 * Design notes: every length read from the wire is a 64-bit number compared
 * with the bytes left before it is used, so no input can make a read leave
 * [p, end). Nothing allocates. A failed read leaves the cursor where it was,
 * so callers can report the offset of the bad field.
 */
#include <errno.h>
#include <string.h>

#include "bigfleet/pbwire.h"

int bf_pb_read_varint_slow(const uint8_t **pp, const uint8_t *end, uint64_t *v)
{
    const uint8_t *p = *pp;
    uint64_t x = 0;
    for (int i = 0; i < BF_PB_VARINT_MAX; i++) {
        if (p >= end)
            return -EBADMSG;
        uint8_t b = *p++;
        if (i == BF_PB_VARINT_MAX - 1 && b > 1)
            return -EBADMSG; /* more than 64 bits, or an 11th byte */
        x |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *pp = p;
            *v = x;
            return 0;
        }
    }
    return -EBADMSG; /* not reached: the 10th byte ends or fails above */
}

int bf_pb_skip(const uint8_t **pp, const uint8_t *end, int wt)
{
    const uint8_t *p = *pp;
    uint64_t v;
    switch (wt) {
    case BF_PB_VARINT:
        if (bf_pb_read_varint(&p, end, &v))
            return -EBADMSG;
        break;
    case BF_PB_I64:
        if (end - p < 8)
            return -EBADMSG;
        p += 8;
        break;
    case BF_PB_I32:
        if (end - p < 4)
            return -EBADMSG;
        p += 4;
        break;
    case BF_PB_LEN:
        if (bf_pb_read_varint(&p, end, &v) || p - *pp > BF_PB_VARINT32_MAX ||
            v > (uint64_t)(end - p))
            return -EBADMSG;
        p += v;
        break;
    default:
        return -EBADMSG;
    }
    *pp = p;
    return 0;
}

static bool known_field(uint64_t known, uint32_t num)
{
    return num < 64 && (known >> num & 1);
}

int bf_pb_scan(const uint8_t *p, size_t len, uint64_t known, struct bf_pb_scan *out)
{
    struct bf_pb_reader r;
    struct bf_pb_field f;
    memset(out, 0, sizeof *out);
    bf_pb_reader_init(&r, p, len);
    int rc;
    while ((rc = bf_pb_next(&r, &f)) == 1) {
        out->fields++;
        if (known_field(known, f.num))
            continue;
        if (!out->unknown)
            out->first_unknown = f.num;
        out->unknown++;
        out->unknown_bytes += (size_t)(f.end - f.start);
    }
    return rc;
}

int bf_pb_strip_unknown(uint8_t *p, size_t len, uint64_t known, size_t *newlen,
                        struct bf_pb_scan *st)
{
    struct bf_pb_scan tmp;
    struct bf_pb_scan *s = st ? st : &tmp;
    int rc = bf_pb_scan(p, len, known, s);
    if (rc)
        return rc;
    if (!s->unknown) {
        *newlen = len;
        return 0;
    }
    /* the message is well-formed: compact the known fields forward */
    struct bf_pb_reader r;
    struct bf_pb_field f;
    uint8_t *w = p;
    bf_pb_reader_init(&r, p, len);
    while (bf_pb_next(&r, &f) == 1) {
        if (!known_field(known, f.num))
            continue;
        size_t n = (size_t)(f.end - f.start);
        if (w != f.start)
            memmove(w, f.start, n);
        w += n;
    }
    *newlen = (size_t)(w - p);
    return 0;
}
