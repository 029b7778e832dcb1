/*
 * fuzz.h — shared helpers of the libFuzzer targets (tests/fuzz/fuzz_*.c).
 *
 * Every target defines LLVMFuzzerTestOneInput, is built with ASan + UBSan
 * (make fuzz-build) and checks properties with FUZZ_CHECK: a failed property
 * aborts, so libFuzzer keeps the input as a crash like any memory error.
 * docs/fuzzing.md lists each target's input and properties.
 */
#ifndef BF_FUZZ_H
#define BF_FUZZ_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <protobuf-c/protobuf-c.h>

#include "bigfleet/pbdecode.h"
#include "bigfleet/pbwire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz property failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__);      \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/*
 * The inputs the wire module (bigfleet/pbwire.h) refuses on purpose where
 * protobuf-c 1.4 accepts them (docs/fuzzing.md, "Known differences"):
 *   1. a tag whose field number is 0 or above 2^29-1: protobuf-c reads a
 *      tag of up to 5 bytes into 32 bits (dropping what does not fit) and
 *      keeps any number it does not know as an unknown field, 0 included
 *      when written in two or more bytes;
 *   2. a varint whose 10th byte is above 1 (over 64 bits): protobuf-c drops
 *      the extra bits.
 * fuzz_pb_stricter(p, end) reads the field at p with those relaxed rules,
 * independently of the wire module, and says whether it is one of them.
 */
static inline int fuzz_raw_varint(const uint8_t **pp, const uint8_t *end, uint64_t *v, bool *over)
{
    uint64_t x = 0;
    const uint8_t *p = *pp;
    for (int i = 0; i < 10; i++) {
        if (p >= end)
            return -1;
        uint8_t b = *p++;
        if (i == 9 && b > 1)
            *over = true;
        x |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *pp = p;
            *v = x;
            return 0;
        }
    }
    return -1;
}

static inline bool fuzz_pb_stricter(const uint8_t *p, const uint8_t *end)
{
    uint64_t tag, v;
    bool over = false;
    const uint8_t *q = p;
    if (fuzz_raw_varint(&q, end, &tag, &over))
        return false;
    if (over || (q - p) > 5)
        return false; /* protobuf-c refuses a tag over 5 bytes too */
    uint32_t t32 = (uint32_t)tag;
    if ((t32 >> 3) == 0 && q - p == 1)
        return false; /* a one-byte tag 0: protobuf-c refuses it too */
    if ((tag >> 3) == 0 || (tag >> 3) > 536870911u)
        return true;
    int wt = (int)(tag & 7);
    if (wt == 0 || wt == 2) {
        over = false;
        if (fuzz_raw_varint(&q, end, &v, &over))
            return false;
        return over;
    }
    return false;
}

/* True when p..p+len read as a message, and every length-delimited payload
 * in it read as a message too (down to `depth` levels), holds one of the
 * encodings fuzz_pb_stricter names: for decoders that walk nested messages
 * with the wire module. */
static inline bool fuzz_pb_stricter_anywhere(const uint8_t *p, size_t len, int depth)
{
    const uint8_t *end = p + len;
    while (p < end) {
        if (fuzz_pb_stricter(p, end))
            return true;
        uint64_t tag, v;
        bool over = false;
        if (fuzz_raw_varint(&p, end, &tag, &over))
            return false;
        switch (tag & 7) {
        case 0:
            if (fuzz_raw_varint(&p, end, &v, &over))
                return false;
            break;
        case 1:
            if (end - p < 8)
                return false;
            p += 8;
            break;
        case 5:
            if (end - p < 4)
                return false;
            p += 4;
            break;
        case 2:
            if (fuzz_raw_varint(&p, end, &v, &over) || v > (uint64_t)(end - p))
                return false;
            if (depth > 0 && fuzz_pb_stricter_anywhere(p, (size_t)v, depth - 1))
                return true;
            p += v;
            break;
        default:
            return false;
        }
    }
    return false;
}

/* Where bf_pb_next first fails on one message level (NULL: it does not). */
static inline const uint8_t *fuzz_pb_first_error(const uint8_t *p, size_t len)
{
    struct bf_pb_reader r;
    struct bf_pb_field f;
    int rc;
    bf_pb_reader_init(&r, p, len);
    while ((rc = bf_pb_next(&r, &f)) == 1)
        ;
    return rc ? r.p : NULL;
}

/* True when m or any message inside it kept an unknown field numbered 0
 * (protobuf-c re-emits it as a one-byte 0x00 tag, which it then refuses). */
static inline bool fuzz_pb_has_unknown0(const ProtobufCMessage *m)
{
    if (!m)
        return false;
    for (unsigned i = 0; i < m->n_unknown_fields; i++)
        if (m->unknown_fields[i].tag == 0)
            return true;
    const ProtobufCMessageDescriptor *d = m->descriptor;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (f->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        const char *base = (const char *)m;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)(base + f->quantifier_offset);
            ProtobufCMessage *const *v = *(ProtobufCMessage *const *const *)(base + f->offset);
            for (size_t k = 0; k < n; k++)
                if (fuzz_pb_has_unknown0(v[k]))
                    return true;
        } else {
            if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
                *(const uint32_t *)(base + f->quantifier_offset) != f->id)
                continue;
            if (fuzz_pb_has_unknown0(*(ProtobufCMessage *const *)(base + f->offset)))
                return true;
        }
    }
    return false;
}

/*
 * decode -> encode -> decode -> encode with protobuf-c: when the input
 * unpacks, its re-encoding must unpack again and encode to the same bytes
 * (the canonical form is a fixed point), except for the protobuf-c defect
 * fuzz_pb_has_unknown0 names. Returns the first unpacked message
 * (free with protobuf_c_message_free_unpacked) or NULL when the input does
 * not unpack.
 */
static inline ProtobufCMessage *fuzz_pb_roundtrip(const ProtobufCMessageDescriptor *d,
                                                  const uint8_t *data, size_t size)
{
    ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, size, data);
    if (!m)
        return NULL;
    size_t n1 = protobuf_c_message_get_packed_size(m);
    uint8_t *b1 = malloc(n1 + 1);
    FUZZ_CHECK(b1);
    FUZZ_CHECK(protobuf_c_message_pack(m, b1) == n1);
    ProtobufCMessage *m2 = protobuf_c_message_unpack(d, NULL, n1, b1);
    if (!m2) {
        /* the one known protobuf-c defect: an unknown field 0 it accepted */
        FUZZ_CHECK(fuzz_pb_has_unknown0(m));
        free(b1);
        return m;
    }
    size_t n2 = protobuf_c_message_get_packed_size(m2);
    FUZZ_CHECK(n2 == n1);
    uint8_t *b2 = malloc(n2 + 1);
    FUZZ_CHECK(b2);
    FUZZ_CHECK(protobuf_c_message_pack(m2, b2) == n2);
    FUZZ_CHECK(memcmp(b1, b2, n1) == 0);
    protobuf_c_message_free_unpacked(m2, NULL);
    free(b1);
    free(b2);
    return m;
}

/* Unknown fields kept anywhere in m (0 after bf_pb_unpack, always). */
static inline size_t fuzz_pb_unknown_count(const ProtobufCMessage *m)
{
    if (!m)
        return 0;
    size_t n = m->n_unknown_fields;
    const ProtobufCMessageDescriptor *d = m->descriptor;
    const char *base = (const char *)m;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (f->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t k = *(const size_t *)(base + f->quantifier_offset);
            ProtobufCMessage *const *v = *(ProtobufCMessage *const *const *)(base + f->offset);
            for (size_t j = 0; j < k; j++)
                n += fuzz_pb_unknown_count(v[j]);
        } else if (!(f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) ||
                   *(const uint32_t *)(base + f->quantifier_offset) == f->id) {
            n += fuzz_pb_unknown_count(*(ProtobufCMessage *const *)(base + f->offset));
        }
    }
    return n;
}

/*
 * The session's decode of peer bytes (bigfleet/pbdecode.h, bf_pb_unpack) next
 * to protobuf-c's plain unpack `plain` of the same bytes (may be NULL).
 * Properties: a documented result only; an accepted message keeps no
 * unknown field at any depth and its encoding unpacks with protobuf-c to
 * the same encoding; when protobuf-c kept no unknown field either, both
 * decoded the same message (equal encodings); the allocation bound holds.
 */
static inline void fuzz_pb_bounded(const ProtobufCMessageDescriptor *d, const uint8_t *data,
                                   size_t size, const ProtobufCMessage *plain)
{
    ProtobufCMessage *m = NULL;
    struct bf_pb_decode_info info;
    int rc = bf_pb_unpack(d, data, size, &m, &info);
    FUZZ_CHECK(rc == 0 || rc == -EBADMSG || rc == -E2BIG || rc == -ENOMEM);
    FUZZ_CHECK(info.charged <= 3 * size + BF_PB_DECODE_SLACK);
    if (rc != 0) {
        FUZZ_CHECK(m == NULL);
        return;
    }
    FUZZ_CHECK(m != NULL && fuzz_pb_unknown_count(m) == 0);
    size_t n1 = protobuf_c_message_get_packed_size(m);
    uint8_t *b1 = malloc(n1 + 1);
    FUZZ_CHECK(b1 && protobuf_c_message_pack(m, b1) == n1);
    ProtobufCMessage *m2 = protobuf_c_message_unpack(d, NULL, n1, b1);
    FUZZ_CHECK(m2 != NULL);
    uint8_t *b2 = malloc(n1 + 1);
    FUZZ_CHECK(b2 && protobuf_c_message_get_packed_size(m2) == n1 &&
               protobuf_c_message_pack(m2, b2) == n1 && memcmp(b1, b2, n1) == 0);
    if (plain && fuzz_pb_unknown_count(plain) == 0) {
        size_t n3 = protobuf_c_message_get_packed_size(plain);
        uint8_t *b3 = malloc(n3 + 1);
        FUZZ_CHECK(b3 && protobuf_c_message_pack(plain, b3) == n3);
        FUZZ_CHECK(n3 == n1 && memcmp(b1, b3, n1) == 0);
        free(b3);
    }
    protobuf_c_message_free_unpacked(m2, NULL);
    protobuf_c_message_free_unpacked(m, NULL); /* plain malloc blocks */
    free(b1);
    free(b2);
}

/* A NUL-terminated copy of the input (for text parsers). */
static inline char *fuzz_cstr(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    FUZZ_CHECK(s);
    memcpy(s, data, size);
    s[size] = 0;
    return s;
}

#endif /* BF_FUZZ_H */
