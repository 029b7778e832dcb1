/*
 * pbdecode.c — bounded protobuf-c decoding of untrusted bytes (see
 * bigfleet/pbdecode.h).
 *
 * Design notes
 *   - The bytes are read with the one protobuf wire reader
 *     (bigfleet/pbwire.h: bf_pb_next, its 10th-byte check and bounds).
 *   - One recursive walker does both passes: with out == NULL it only
 *     counts unknown fields (the common case has none, and then protobuf-c
 *     reads the caller's bytes directly); with out set it writes the
 *     stripped message. A nested message's length prefix is reserved at
 *     the input prefix's width, the stripped content written after it, and
 *     the content moved down when the new prefix is shorter, so the output
 *     never outgrows the input.
 *   - The allocator counts into a stack struct; protobuf-c frees with the
 *     same callbacks during the decode and with free() afterwards (the
 *     blocks come from malloc), so callers use the usual free_unpacked(m,
 *     NULL).
 */
#include <errno.h>
#include <malloc.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/pbdecode.h"
#include "bigfleet/pbwire.h"

/* The wire types a field of this type may arrive with (packed repeated
 * numerics also as LEN). */
static bool wt_ok(const ProtobufCFieldDescriptor *f, unsigned wt)
{
    bool repeated = f->label == PROTOBUF_C_LABEL_REPEATED;
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_BOOL:
    case PROTOBUF_C_TYPE_ENUM:
        return wt == BF_PB_VARINT || (repeated && wt == BF_PB_LEN);
    case PROTOBUF_C_TYPE_FIXED32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_FLOAT:
        return wt == BF_PB_I32 || (repeated && wt == BF_PB_LEN);
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_DOUBLE:
        return wt == BF_PB_I64 || (repeated && wt == BF_PB_LEN);
    case PROTOBUF_C_TYPE_STRING:
    case PROTOBUF_C_TYPE_BYTES:
    case PROTOBUF_C_TYPE_MESSAGE:
        return wt == BF_PB_LEN;
    }
    return false;
}

/*
 * Walks one message's fields in [p, end): counts unknown fields into
 * *unknown and sets *olen to the stripped message's length; with out set
 * it also writes the stripped message there. Returns 0 or -EBADMSG.
 */
static int walk(const ProtobufCMessageDescriptor *d, const uint8_t *p, const uint8_t *end,
                int depth, uint8_t *out, size_t *olen, uint64_t *unknown)
{
    if (depth > BF_PB_DECODE_MAX_DEPTH)
        return -EBADMSG;
    struct bf_pb_reader r;
    struct bf_pb_field f;
    bf_pb_reader_init(&r, p, (size_t)(end - p));
    size_t o = 0;
    int rc;
    while ((rc = bf_pb_next(&r, &f)) == 1) {
        const ProtobufCFieldDescriptor *fd = protobuf_c_message_descriptor_get_field(d, f.num);
        if (!fd) {
            (*unknown)++;
            continue; /* skipped: not copied, not kept */
        }
        if (!wt_ok(fd, f.wt))
            return -EBADMSG;
        size_t whole = (size_t)(f.end - f.start);
        if (fd->type != PROTOBUF_C_TYPE_MESSAGE) {
            if (out)
                memcpy(out + o, f.start, whole);
            o += whole;
            continue;
        }
        /* a nested message: strip it too; its tag is kept, its length prefix
         * rewritten (never wider than the input's: the content only shrinks) */
        const uint8_t *q = f.start; /* the tag as sent (it may be non-minimal) */
        uint64_t tag;
        bf_pb_read_varint(&q, f.end, &tag);
        size_t taglen = (size_t)(q - f.start);
        size_t pw = (size_t)(f.p - q); /* the input prefix's width */
        if (out)
            memcpy(out + o, f.start, taglen);
        o += taglen;
        size_t clen = 0;
        rc = walk(fd->descriptor, f.p, f.p + f.len, depth + 1, out ? out + o + pw : NULL, &clen,
                  unknown);
        if (rc)
            return rc;
        size_t nw = bf_pb_varint_len(clen);
        if (out) {
            bf_pb_put_varint(out + o, clen);
            if (nw < pw)
                memmove(out + o + nw, out + o + pw, clen);
        }
        o += nw + clen;
    }
    if (rc < 0)
        return -EBADMSG;
    *olen = o;
    return 0;
}

/* ------------------------------------------------------------ allocator */

struct budget {
    size_t used, peak, max;
    bool over;
};

/* Charged at what the allocator really reserved (malloc_usable_size: the
 * size class, not the request); plain malloc blocks, so the caller frees
 * the result with free_unpacked(m, NULL). */
static void *b_alloc(void *data, size_t size)
{
    struct budget *b = data;
    if (b->used + size > b->max) {
        b->over = true;
        return NULL;
    }
    void *p = malloc(size ? size : 1);
    if (!p)
        return NULL;
    size_t c = malloc_usable_size(p);
    if (b->used + c > b->max) {
        free(p);
        b->over = true;
        return NULL;
    }
    b->used += c;
    if (b->used > b->peak)
        b->peak = b->used;
    return p;
}

static void b_free(void *data, void *ptr)
{
    struct budget *b = data;
    if (!ptr)
        return;
    b->used -= malloc_usable_size(ptr);
    free(ptr);
}

int bf_pb_unpack(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len,
                 ProtobufCMessage **out, struct bf_pb_decode_info *info)
{
    struct bf_pb_decode_info dummy;
    if (!info)
        info = &dummy;
    memset(info, 0, sizeof *info);
    *out = NULL;
    if (!data && len)
        return -EBADMSG;
    const uint8_t *end = data + len;
    size_t stripped = 0; /* the stripped length: shorter than len also when a nested
                            message's length prefix is wider than needed */
    int rc = walk(desc, data, end, 0, NULL, &stripped, &info->unknown_fields);
    if (rc)
        return rc;
    size_t slen = len; /* nothing to strip: protobuf-c reads the caller's bytes, all of them */
    const uint8_t *src = data;
    uint8_t *copy = NULL;
    if (info->unknown_fields) {
        /* the stripped message (slen <= len bytes); while writing, each open
         * nesting level may sit up to 9 bytes (a wider input prefix) further
         * out before its content moves down */
        size_t cap = stripped + 10 * (BF_PB_DECODE_MAX_DEPTH + 2);
        copy = malloc(cap ? cap : 1);
        if (!copy)
            return -ENOMEM;
        uint64_t again = 0;
        size_t wlen = 0;
        rc = walk(desc, data, end, 0, copy, &wlen, &again);
        if (rc) {
            free(copy);
            return rc;
        }
        slen = wlen;
        src = copy;
    }
    struct budget b = {.max = (copy ? 2 : 3) * len + BF_PB_DECODE_SLACK};
    ProtobufCAllocator a = {.alloc = b_alloc, .free = b_free, .allocator_data = &b};
    ProtobufCMessage *m = protobuf_c_message_unpack(desc, &a, slen, src);
    free(copy);
    info->charged = b.peak;
    if (!m)
        return b.over ? -E2BIG : -EBADMSG;
    *out = m;
    return 0;
}
