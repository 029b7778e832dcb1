/*
 * bigfleet/pbwire.h — the protobuf wire format, once: a bounded reader of
 * untrusted bytes, a writer, and an unknown-field scan. Every hand-written
 * protobuf path of the appliance sits on it (the session's OperatorMessage
 * scanner and rollup converter, the provider Machine/List/TransitionAck
 * decoder, the simulated provider's request decoders and Machine encoder);
 * everything else goes through protobuf-c.
 *
 * Encoding rules (protobuf "Encoding" reference, proto3):
 *   - a varint is 1..10 bytes, little-endian base 128; the 10th byte may
 *     carry only bit 63 (0x00 or 0x01): anything more is over 64 bits and
 *     malformed (protobuf-c 1.4 drops the extra bits and accepts it: the
 *     one place this reader is stricter, see docs/fuzzing.md);
 *   - a tag is a varint: field number (1 .. 2^29-1) << 3 | wire type, at
 *     most 5 bytes; a length is a varint of at most 5 bytes too (both are
 *     32-bit varints: C++ protobuf and protobuf-c refuse a longer encoding,
 *     even a zero-padded one, so this reader does as well);
 *   - wire types 0 varint, 1 fixed 8 bytes, 2 length-delimited (a varint
 *     length, bounded by the enclosing buffer), 5 fixed 4 bytes. Groups (3, 4)
 *     are deprecated and refused, 6 and 7 do not exist;
 *   - fixed-width values are little-endian on the wire and are returned in
 *     host order.
 *
 * Error convention: every reader returns 0 (or 1 for "a field was read")
 * on success and -EBADMSG for malformed input, and never reads outside
 * [buffer, buffer + len). Nothing here allocates or keeps state beyond the
 * caller's structs, and every function is safe from any thread on distinct
 * arguments.
 *
 * Writer functions write at p and return one past the last byte written; the
 * caller sizes the buffer with the matching *_len function. They are
 * static inline: the simulated provider's List encoder writes tens of
 * millions of fields per full List (docs/simprovider.md §6).
 */
#ifndef BIGFLEET_PBWIRE_H
#define BIGFLEET_PBWIRE_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Wire types. */
#define BF_PB_VARINT 0
#define BF_PB_I64    1
#define BF_PB_LEN    2
#define BF_PB_SGROUP 3 /* refused */
#define BF_PB_EGROUP 4 /* refused */
#define BF_PB_I32    5

#define BF_PB_FIELD_MAX    536870911u /* 2^29 - 1 */
#define BF_PB_VARINT_MAX   10         /* bytes */
#define BF_PB_VARINT32_MAX 5          /* bytes of a tag or a length */

/* ================================================================ reader */

/* One field as found on the wire. For BF_PB_LEN, p/len are the payload (a
 * slice of the input); for the other wire types `varint` holds the value
 * (fixed-width values in host order, zero-extended). start/end delimit the
 * whole field, tag included. */
struct bf_pb_field {
    uint32_t num;
    uint8_t wt;
    uint64_t varint;
    const uint8_t *p;
    size_t len;
    const uint8_t *start; /* first byte of the tag */
    const uint8_t *end;   /* one past the field's last byte */
};

/* A cursor over one message's bytes (borrowed; the caller keeps them alive). */
struct bf_pb_reader {
    const uint8_t *p;
    const uint8_t *end;
};

/* buf may be NULL when len is 0. */
static inline void bf_pb_reader_init(struct bf_pb_reader *r, const uint8_t *buf, size_t len)
{
    r->p = buf;
    r->end = buf ? buf + len : buf; /* NULL + 0 is undefined behaviour */
}

/* Out-of-line part of bf_pb_read_varint (values of three bytes or more). */
int bf_pb_read_varint_slow(const uint8_t **pp, const uint8_t *end, uint64_t *v);

/*
 * Reads one varint at *pp (bounded by end) into *v and advances *pp.
 * Returns 0, or -EBADMSG (truncated, longer than 10 bytes, over 64 bits) with
 * *pp unchanged.
 */
static inline int bf_pb_read_varint(const uint8_t **pp, const uint8_t *end, uint64_t *v)
{
    const uint8_t *p = *pp;
    if (p < end && *p < 0x80) {
        *v = *p;
        *pp = p + 1;
        return 0;
    }
    if (end - p >= 2 && p[1] < 0x80) { /* lengths of 128 .. 16383 bytes */
        *v = (uint64_t)(p[0] & 0x7f) | (uint64_t)p[1] << 7;
        *pp = p + 2;
        return 0;
    }
    return bf_pb_read_varint_slow(pp, end, v);
}

/* Little-endian fixed-width values in host order. */
static inline uint64_t bf_pb_le64(const uint8_t *p)
{
    uint64_t x;
    memcpy(&x, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    x = __builtin_bswap64(x);
#endif
    return x;
}

static inline uint32_t bf_pb_le32(const uint8_t *p)
{
    uint32_t x;
    memcpy(&x, p, 4);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    x = __builtin_bswap32(x);
#endif
    return x;
}

/*
 * Reads the next field and advances the reader past it. Returns 1 with *f
 * filled, 0 at the end of the buffer, -EBADMSG for malformed input
 * (truncated tag, value or length; a varint over 10 bytes or 64 bits; a tag
 * or a length over 5 bytes; field number 0 or above BF_PB_FIELD_MAX; groups
 * (wire types 3/4) or wire types 6/7). After -EBADMSG the reader is not
 * advanced.
 *
 * Inline: the provider's List decoder reads ~20 fields per Machine, 500K
 * Machines per full List.
 */
static inline __attribute__((always_inline)) int bf_pb_next(struct bf_pb_reader *r,
                                                            struct bf_pb_field *f)
{
    const uint8_t *p = r->p, *end = r->end;
    if (p >= end)
        return 0;
    /* The common shapes first, read without taking a local's address (so
     * tag, value and length stay in registers): a one-byte tag (fields
     * 1..15) with a varint of at most 5 bytes, or with a length of one or
     * two bytes that fits the buffer. Every other case (longer tags,
     * lengths or varints, other wire types, anything truncated) takes the
     * general path below, so results and errors are the same for every
     * input (i18-ingest6, stop 32: ~1/3 of the rollup conversion's Need
     * walk waited on the general path's stack loads). */
    if (end - p >= 2 && p[0] >= 8 && p[0] < 0x80) {
        uint32_t t = p[0];
        if ((t & 7) == BF_PB_VARINT) {
            uint64_t v = 0;
            const uint8_t *q = p + 1;
            for (unsigned sh = 0; sh < 35 && q < end; sh += 7) {
                uint8_t b = *q++;
                v |= (uint64_t)(b & 0x7f) << sh;
                if (b < 0x80) {
                    *f = (struct bf_pb_field){
                        .num = t >> 3, .wt = BF_PB_VARINT, .varint = v, .start = p, .end = q};
                    r->p = q;
                    return 1;
                }
            }
        } else if ((t & 7) == BF_PB_LEN) {
            size_t l = p[1];
            const uint8_t *q = p + 2;
            int fits = 1;
            if (l >= 0x80) {
                fits = end - p >= 3 && p[2] < 0x80;
                if (fits) {
                    l = (l & 0x7f) | (size_t)p[2] << 7;
                    q = p + 3;
                }
            }
            if (fits && l <= (size_t)(end - q)) {
                *f = (struct bf_pb_field){
                    .num = t >> 3, .wt = BF_PB_LEN, .p = q, .len = l, .start = p, .end = q + l};
                r->p = q + l;
                return 1;
            }
        }
    }
    uint64_t tag;
    if (bf_pb_read_varint(&p, end, &tag) || p - r->p > BF_PB_VARINT32_MAX)
        return -EBADMSG;
    uint64_t num = tag >> 3;
    if (num == 0 || num > BF_PB_FIELD_MAX)
        return -EBADMSG;
    f->start = r->p;
    f->num = (uint32_t)num;
    f->wt = (uint8_t)(tag & 7);
    f->p = NULL;
    f->len = 0;
    switch (f->wt) {
    case BF_PB_VARINT:
        if (bf_pb_read_varint(&p, end, &f->varint))
            return -EBADMSG;
        break;
    case BF_PB_I64:
        if (end - p < 8)
            return -EBADMSG;
        f->varint = bf_pb_le64(p);
        p += 8;
        break;
    case BF_PB_I32:
        if (end - p < 4)
            return -EBADMSG;
        f->varint = bf_pb_le32(p);
        p += 4;
        break;
    case BF_PB_LEN: {
        uint64_t l;
        const uint8_t *lp = p;
        if (bf_pb_read_varint(&p, end, &l) || p - lp > BF_PB_VARINT32_MAX ||
            l > (uint64_t)(end - p))
            return -EBADMSG;
        f->varint = 0;
        f->p = p;
        f->len = (size_t)l;
        p += l;
        break;
    }
    default:
        return -EBADMSG; /* groups (3, 4) and wire types 6, 7 */
    }
    f->end = p;
    r->p = p;
    return 1;
}

/*
 * Skips the value of a field whose tag (wire type wt) was just read at *pp.
 * Returns 0 with *pp advanced, or -EBADMSG (truncated; wt a group or 6/7).
 */
int bf_pb_skip(const uint8_t **pp, const uint8_t *end, int wt);

/* Reads the elements of a packed repeated varint field (the payload of a LEN
 * field) one at a time: 1 with *v, 0 at the end, -EBADMSG. */
static inline int bf_pb_packed_next(struct bf_pb_reader *r, uint64_t *v)
{
    if (r->p >= r->end)
        return 0;
    return bf_pb_read_varint(&r->p, r->end, v) == 0 ? 1 : -EBADMSG;
}

/* ============================================================ unknown fields */

/*
 * Unknown-field accounting of one message level. A message's known fields
 * are given as a bit mask: bit n set = field number n is known (1..63; no
 * message of the BigFleet protocol numbers a field above 63, so every field
 * number >= 64 is unknown). Nested messages are not entered: call again on a
 * known LEN field's payload to scan its level.
 */
struct bf_pb_scan {
    uint32_t fields;        /* fields on the wire at this level */
    uint32_t unknown;       /* of which unknown */
    uint32_t first_unknown; /* number of the first unknown field, 0 when none */
    size_t unknown_bytes;   /* bytes the unknown fields take, tags included */
};

#define BF_PB_KNOWN(n) ((uint64_t)1 << (n)) /* n in 1..63 */

/* Returns 0 with *out filled, or -EBADMSG (the message is malformed; *out
 * holds what was counted before the bad field). */
int bf_pb_scan(const uint8_t *p, size_t len, uint64_t known, struct bf_pb_scan *out);

/*
 * Removes the unknown fields of one message level in place (the known ones
 * keep their order and bytes): after it, protobuf-c unpacks the message
 * without keeping any unknown field. *newlen gets the new length. Returns 0,
 * or -EBADMSG with the buffer unchanged. *st (may be NULL) gets the scan of
 * the original bytes.
 */
int bf_pb_strip_unknown(uint8_t *p, size_t len, uint64_t known, size_t *newlen,
                        struct bf_pb_scan *st);

/* ================================================================ writer */

static inline size_t bf_pb_varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline uint8_t *bf_pb_put_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

static inline size_t bf_pb_tag_len(uint32_t field)
{
    return bf_pb_varint_len((uint64_t)field << 3);
}

static inline uint8_t *bf_pb_put_tag(uint8_t *p, uint32_t field, int wt)
{
    return bf_pb_put_varint(p, (uint64_t)field << 3 | (uint64_t)wt);
}

/* A varint field: tag and value. */
static inline size_t bf_pb_varint_field_len(uint32_t field, uint64_t v)
{
    return bf_pb_tag_len(field) + bf_pb_varint_len(v);
}

static inline uint8_t *bf_pb_put_varint_field(uint8_t *p, uint32_t field, uint64_t v)
{
    return bf_pb_put_varint(bf_pb_put_tag(p, field, BF_PB_VARINT), v);
}

/* A length-delimited field of n payload bytes: tag, length, payload. */
static inline size_t bf_pb_ld_len(uint32_t field, size_t n)
{
    return bf_pb_tag_len(field) + bf_pb_varint_len(n) + n;
}

/* Tag and length only (the caller writes the n payload bytes after). */
static inline uint8_t *bf_pb_put_ld_header(uint8_t *p, uint32_t field, size_t n)
{
    return bf_pb_put_varint(bf_pb_put_tag(p, field, BF_PB_LEN), n);
}

static inline uint8_t *bf_pb_put_ld(uint8_t *p, uint32_t field, const void *data, size_t n)
{
    p = bf_pb_put_ld_header(p, field, n);
    if (n)
        memcpy(p, data, n);
    return p + n;
}

/* A fixed64 / double field (tag + 8 bytes little-endian). */
static inline uint8_t *bf_pb_put_fixed64(uint8_t *p, uint32_t field, uint64_t v)
{
    p = bf_pb_put_tag(p, field, BF_PB_I64);
    for (int i = 0; i < 8; i++)
        *p++ = (uint8_t)(v >> (8 * i));
    return p;
}

static inline uint8_t *bf_pb_put_double(uint8_t *p, uint32_t field, double d)
{
    uint64_t u;
    memcpy(&u, &d, 8);
    return bf_pb_put_fixed64(p, field, u);
}

/* A fixed32 / float field (tag + 4 bytes little-endian). */
static inline uint8_t *bf_pb_put_fixed32(uint8_t *p, uint32_t field, uint32_t v)
{
    p = bf_pb_put_tag(p, field, BF_PB_I32);
    for (int i = 0; i < 4; i++)
        *p++ = (uint8_t)(v >> (8 * i));
    return p;
}

/* The double stored in a BF_PB_I64 field's value. */
static inline double bf_pb_double(uint64_t bits)
{
    double d;
    memcpy(&d, &bits, 8);
    return d;
}

#endif /* BIGFLEET_PBWIRE_H */
