/*
 * fuzz_pbwire_diff.c — the wire module (bigfleet/pbwire.h) against
 * protobuf-c 1.4. Input: a selector byte naming one of the message types a
 * peer sends us (table below), then the bytes.
 *
 * The target decodes the bytes twice: with protobuf-c, and with a
 * descriptor-driven decoder written here on bf_pb_next (the same rules
 * protobuf-c applies above the wire: a known field must come with its wire
 * type, except a bool, which protobuf-c takes with any wire type (its value:
 * any byte after the tag non-zero; C++ protobuf keeps such a field as
 * unknown, docs/fuzzing.md); packed repeated scalars as LEN; every nested
 * message must decode).
 *
 * Properties:
 *   - both reject, or both accept; where only protobuf-c accepts, the
 *     first bad field is one of the two documented stricter encodings
 *     (fuzz_pb_stricter, docs/fuzzing.md) and nothing else;
 *   - when both accept, every field has the same value: singular scalars,
 *     strings and bytes the last occurrence's (strings as protobuf-c keeps
 *     them: cut at a NUL), repeated fields every element in order (packed
 *     and unpacked runs concatenated), nested messages recursively (a
 *     message field given once, every element of a repeated one; a field or
 *     oneof member given more than once is compared occurrence by occurrence
 *     against protobuf-c's decode of each, since what protobuf-c keeps then
 *     is its own merge, see docs/fuzzing.md), the oneof case the last
 *     member, and the unknown fields in order with their number, wire type
 *     and bytes;
 *   - bf_pb_scan counts the fields and the unknown fields protobuf-c sees,
 *     and bf_pb_strip_unknown leaves a message protobuf-c decodes to the
 *     same known fields and no unknown field at the top level.
 */
#include "bigfleet/pbwire.h"
#include "bigfleet/v1alpha1/capacity.pb-c.h"
#include "bigfleet/v1alpha1/coordinator.pb-c.h"
#include "bigfleet/v1alpha1/provider.pb-c.h"
#include "bigfleet/v1alpha1/shard.pb-c.h"
#include "bigfleet/v1alpha1/shardread.pb-c.h"
#include "../interop/pbc_fields.h"
#include "fuzz.h"
#include "grpc/health/v1/health.pb-c.h"
#include "grpc/reflection/v1/reflection.pb-c.h"

/* The messages peers send: selector byte % count. Keep the order: seeds
 * (scripts/fuzz-seeds) name types by these indices. */
static const ProtobufCMessageDescriptor *const types[] = {
    &bigfleet__v1alpha1__machine__descriptor,                     /* 0 provider Get */
    &bigfleet__v1alpha1__machine_list__descriptor,                /* 1 provider List */
    &bigfleet__v1alpha1__transition_ack__descriptor,              /* 2 provider acks */
    &bigfleet__v1alpha1__operator_message__descriptor,            /* 3 operator stream */
    &bigfleet__v1alpha1__cluster_capacity_needs__descriptor,      /* 4 rollup */
    &bigfleet__v1alpha1__capacity_need__descriptor,               /* 5 one Need */
    &bigfleet__v1alpha1__coordinator_instruction__descriptor,     /* 6 coordinator */
    &bigfleet__v1alpha1__report_ack__descriptor,                  /* 7 coordinator */
    &bigfleet__v1alpha1__inspect_needs_request__descriptor,       /* 8 ShardRead */
    &bigfleet__v1alpha1__inspect_needs_response__descriptor,      /* 9 bigfleet-inspect */
    &bigfleet__v1alpha1__create_request__descriptor,              /* 10 simulated provider */
    &bigfleet__v1alpha1__configure_request__descriptor,           /* 11 */
    &bigfleet__v1alpha1__drain_request__descriptor,               /* 12 */
    &bigfleet__v1alpha1__delete_request__descriptor,              /* 13 */
    &bigfleet__v1alpha1__machine_ref__descriptor,                 /* 14 */
    &bigfleet__v1alpha1__list_filter__descriptor,                 /* 15 */
    &bigfleet__v1alpha1__shard_message__descriptor,               /* 16 replay's operator */
    &grpc__health__v1__health_check_request__descriptor,          /* 17 health */
    &grpc__health__v1__health_list_request__descriptor,           /* 18 */
    &grpc__reflection__v1__server_reflection_request__descriptor, /* 19 reflection */
};
#define N_TYPES (sizeof types / sizeof types[0])

/* The input holds one of the documented stricter encodings (judged on the
 * raw bytes; a protobuf-c-only acceptance is then not a difference). */
static bool g_stricter;

/* ------------------------------------------------------------ field access */

/* The wire type a field's values come with (not packed). */
static int wire_type_of(ProtobufCType t)
{
    switch (t) {
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_FIXED32:
    case PROTOBUF_C_TYPE_FLOAT:
        return BF_PB_I32;
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_DOUBLE:
        return BF_PB_I64;
    case PROTOBUF_C_TYPE_STRING:
    case PROTOBUF_C_TYPE_BYTES:
    case PROTOBUF_C_TYPE_MESSAGE:
        return BF_PB_LEN;
    default:
        return BF_PB_VARINT;
    }
}

/* A scalar's value as protobuf-c stores it, from the wire value v. */
static void scalar_from_wire(ProtobufCType t, uint64_t v, void *out)
{
    switch (t) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_ENUM:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_FIXED32:
    case PROTOBUF_C_TYPE_FLOAT: {
        uint32_t x = (uint32_t)v;
        memcpy(out, &x, 4);
        break;
    }
    case PROTOBUF_C_TYPE_SINT32: {
        uint32_t u = (uint32_t)v;
        int32_t x = (int32_t)((u >> 1) ^ (~(u & 1) + 1));
        memcpy(out, &x, 4);
        break;
    }
    case PROTOBUF_C_TYPE_SINT64: {
        int64_t x = (int64_t)((v >> 1) ^ (~(v & 1) + 1));
        memcpy(out, &x, 8);
        break;
    }
    case PROTOBUF_C_TYPE_BOOL: {
        protobuf_c_boolean b = v != 0;
        memcpy(out, &b, sizeof b);
        break;
    }
    default:
        memcpy(out, &v, 8);
        break;
    }
}

/* protobuf-c's value of a bool occurrence: any of the bytes after the tag
 * (length prefix included) has a low bit set, whatever the wire type. */
static uint64_t bool_of(const struct bf_pb_field *f)
{
    const uint8_t *q = f->start;
    uint64_t tag;
    bool over = false;
    FUZZ_CHECK(fuzz_raw_varint(&q, f->end, &tag, &over) == 0);
    for (; q < f->end; q++)
        if (*q & 0x7f)
            return 1;
    return 0;
}

/* ------------------------------------------------------------ the model */

static bool decode_cmp(const ProtobufCMessageDescriptor *d, const uint8_t *p, size_t len,
                       const ProtobufCMessage *m, int depth);

/* Compares one occurrence of a message field against protobuf-c's decode of
 * that occurrence alone. Returns whether the model accepts it. */
static bool sub_alone(const ProtobufCMessageDescriptor *d, const uint8_t *p, size_t len, int depth)
{
    ProtobufCMessage *s = protobuf_c_message_unpack(d, NULL, len, p);
    bool ok = decode_cmp(d, p, len, s, depth + 1);
    if (s)
        protobuf_c_message_free_unpacked(s, NULL);
    return ok;
}

/* Packed elements of a LEN payload into out (capacity cap, elt size es). */
static bool packed(ProtobufCType t, const uint8_t *p, size_t len, uint8_t *out, size_t *n)
{
    struct bf_pb_reader r;
    bf_pb_reader_init(&r, p, len);
    size_t es = pbc_elem_size(t);
    int wt = wire_type_of(t);
    if (wt == BF_PB_I32 || wt == BF_PB_I64) {
        size_t w = wt == BF_PB_I32 ? 4 : 8;
        if (len % w)
            return false;
        for (size_t i = 0; i < len / w; i++) {
            uint64_t v = w == 4 ? bf_pb_le32(p + i * w) : bf_pb_le64(p + i * w);
            if (out)
                scalar_from_wire(t, v, out + es * *n);
            (*n)++;
        }
        return true;
    }
    uint64_t v;
    int rc;
    while ((rc = bf_pb_packed_next(&r, &v)) == 1) {
        if (out)
            scalar_from_wire(t, v, out + es * *n);
        (*n)++;
    }
    if (rc) { /* an element over 64 bits is documented difference 2 */
        const uint8_t *q = r.p;
        bool over = false;
        if (fuzz_raw_varint(&q, r.end, &v, &over) == 0 && over)
            g_stricter = true;
    }
    return rc == 0;
}

/*
 * The model's decode of d from p..len, compared with m (protobuf-c's decode
 * of the same bytes, NULL when it refused). Returns whether the model
 * accepts. Accept/reject disagreement and value differences abort.
 */
static bool decode_cmp(const ProtobufCMessageDescriptor *d, const uint8_t *p, size_t len,
                       const ProtobufCMessage *m, int depth)
{
    FUZZ_CHECK(depth < 64);
    struct bf_pb_reader r;
    struct bf_pb_field f;
    int rc;
    bool ok = true;
    /* per field: occurrences, elements, last occurrence */
    size_t nf = d->n_fields;
    size_t *occ = calloc(nf + 1, sizeof *occ);
    size_t *elts = calloc(nf + 1, sizeof *elts);
    FUZZ_CHECK(occ && elts);
    size_t unknown = 0;
    bf_pb_reader_init(&r, p, len);
    /* pass 1: acceptance and counts */
    while (ok && (rc = bf_pb_next(&r, &f)) == 1) {
        const ProtobufCFieldDescriptor *fd = protobuf_c_message_descriptor_get_field(d, f.num);
        if (!fd) {
            unknown++;
            continue;
        }
        size_t i = (size_t)(fd - d->fields);
        int want = wire_type_of(fd->type);
        bool rep = fd->label == PROTOBUF_C_LABEL_REPEATED;
        if (rep && f.wt == BF_PB_LEN && want != BF_PB_LEN) {
            size_t n = 0;
            if (!packed(fd->type, f.p, f.len, NULL, &n))
                ok = false;
            elts[i] += n;
        } else if (fd->type == PROTOBUF_C_TYPE_BOOL) {
            elts[i]++; /* protobuf-c takes a bool with any wire type (difference 3) */
        } else if (f.wt != want) {
            ok = false;
        } else if (fd->type == PROTOBUF_C_TYPE_MESSAGE) {
            elts[i]++;
            /* validity of each occurrence; values compared in pass 2 */
        } else {
            elts[i]++;
        }
        occ[i]++;
    }
    if (ok && rc != 0)
        ok = false;
    if (!ok) {
        if (m) /* protobuf-c accepted: only a documented stricter encoding may explain it */
            FUZZ_CHECK(g_stricter);
        free(occ);
        free(elts);
        return false;
    }
    /* nested messages: each occurrence must decode in both */
    bool nested_ok = true;
    size_t *seen = calloc(nf + 1, sizeof *seen);
    FUZZ_CHECK(seen);
    bf_pb_reader_init(&r, p, len);
    while (nested_ok && bf_pb_next(&r, &f) == 1) {
        const ProtobufCFieldDescriptor *fd = protobuf_c_message_descriptor_get_field(d, f.num);
        if (!fd || fd->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        size_t i = (size_t)(fd - d->fields);
        size_t k = seen[i]++;
        const ProtobufCMessageDescriptor *sd = fd->descriptor;
        if (m && fd->label == PROTOBUF_C_LABEL_REPEATED) {
            ProtobufCMessage **arr = *(ProtobufCMessage ***)pbc_member(m, fd);
            FUZZ_CHECK(k < pbc_count(m, fd));
            nested_ok = decode_cmp(sd, f.p, f.len, arr[k], depth + 1);
        } else if (m && occ[i] == 1 &&
                   (!(fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) ||
                    *(const uint32_t *)((const char *)m + fd->quantifier_offset) == fd->id)) {
            nested_ok =
                decode_cmp(sd, f.p, f.len, *(ProtobufCMessage **)pbc_member(m, fd), depth + 1);
        } else {
            nested_ok = sub_alone(sd, f.p, f.len, depth);
        }
    }
    free(seen);
    if (!nested_ok) {
        if (m)
            FUZZ_CHECK(g_stricter);
        free(occ);
        free(elts);
        return false;
    }
    if (!m) {
        /* the model accepts what protobuf-c refused */
        fprintf(stderr, "pbwire_diff: protobuf-c refuses a %s the wire module accepts\n", d->name);
        FUZZ_CHECK(m != NULL);
    }
    /* pass 2: values */
    for (size_t i = 0; i < nf; i++) {
        const ProtobufCFieldDescriptor *fd = &d->fields[i];
        if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
            FUZZ_CHECK(pbc_count(m, fd) == elts[i]);
            if (fd->type == PROTOBUF_C_TYPE_MESSAGE || !elts[i])
                continue;
            size_t es = pbc_elem_size(fd->type), n = 0;
            uint8_t *want = calloc(elts[i] + 1, es);
            FUZZ_CHECK(want);
            bf_pb_reader_init(&r, p, len);
            while (bf_pb_next(&r, &f) == 1) {
                if (f.num != fd->id)
                    continue;
                if (f.wt == BF_PB_LEN && wire_type_of(fd->type) != BF_PB_LEN) {
                    FUZZ_CHECK(packed(fd->type, f.p, f.len, want, &n));
                } else if (fd->type == PROTOBUF_C_TYPE_STRING) {
                    const char *s = ((char **)*(void **)pbc_member(m, fd))[n];
                    const uint8_t *nul = memchr(f.p, 0, f.len);
                    size_t l = nul ? (size_t)(nul - f.p) : f.len;
                    FUZZ_CHECK(strlen(s) == l && memcmp(s, f.p, l) == 0);
                    n++;
                } else if (fd->type == PROTOBUF_C_TYPE_BYTES) {
                    const ProtobufCBinaryData *b =
                        &((ProtobufCBinaryData *)*(void **)pbc_member(m, fd))[n];
                    FUZZ_CHECK(b->len == f.len && (f.len == 0 || memcmp(b->data, f.p, f.len) == 0));
                    n++;
                } else {
                    scalar_from_wire(fd->type,
                                     fd->type == PROTOBUF_C_TYPE_BOOL ? bool_of(&f) : f.varint,
                                     want + es * n);
                    n++;
                }
            }
            FUZZ_CHECK(n == elts[i]);
            if (fd->type != PROTOBUF_C_TYPE_STRING && fd->type != PROTOBUF_C_TYPE_BYTES)
                FUZZ_CHECK(memcmp(want, *(void **)pbc_member(m, fd), es * n) == 0);
            free(want);
            continue;
        }
        bool oneof = fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF;
        uint32_t oneof_case =
            oneof ? *(const uint32_t *)((const char *)m + fd->quantifier_offset) : 0;
        if (oneof) {
            /* the case names the last member of this oneof on the wire */
            uint32_t last = 0;
            bf_pb_reader_init(&r, p, len);
            while (bf_pb_next(&r, &f) == 1) {
                const ProtobufCFieldDescriptor *g =
                    protobuf_c_message_descriptor_get_field(d, f.num);
                if (g && (g->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
                    g->quantifier_offset == fd->quantifier_offset)
                    last = f.num;
            }
            FUZZ_CHECK(oneof_case == last);
            if (oneof_case != fd->id)
                continue;
        }
        if (!occ[i]) {
            if (oneof)
                continue;
            /* absent: protobuf-c holds the default */
            if (fd->type == PROTOBUF_C_TYPE_STRING)
                FUZZ_CHECK(*(char **)pbc_member(m, fd) && (*(char **)pbc_member(m, fd))[0] == 0);
            else if (fd->type == PROTOBUF_C_TYPE_BYTES)
                FUZZ_CHECK(((ProtobufCBinaryData *)pbc_member(m, fd))->len == 0);
            else if (fd->type == PROTOBUF_C_TYPE_MESSAGE)
                FUZZ_CHECK(*(void **)pbc_member(m, fd) == NULL);
            else {
                uint8_t zero[8] = {0};
                FUZZ_CHECK(memcmp(pbc_member(m, fd), zero, pbc_elem_size(fd->type)) == 0);
            }
            continue;
        }
        if (fd->type == PROTOBUF_C_TYPE_MESSAGE) {
            FUZZ_CHECK(*(void **)pbc_member(m, fd) != NULL);
            continue; /* compared in the nested pass */
        }
        /* the last occurrence's value */
        struct bf_pb_field lastf = {0};
        bf_pb_reader_init(&r, p, len);
        while (bf_pb_next(&r, &f) == 1)
            if (f.num == fd->id)
                lastf = f;
        if (fd->type == PROTOBUF_C_TYPE_STRING) {
            const char *s = *(char **)pbc_member(m, fd);
            const uint8_t *nul = memchr(lastf.p, 0, lastf.len);
            size_t l = nul ? (size_t)(nul - lastf.p) : lastf.len;
            FUZZ_CHECK(s && strlen(s) == l && (l == 0 || memcmp(s, lastf.p, l) == 0));
        } else if (fd->type == PROTOBUF_C_TYPE_BYTES) {
            const ProtobufCBinaryData *b = pbc_member(m, fd);
            FUZZ_CHECK(b->len == lastf.len &&
                       (b->len == 0 || memcmp(b->data, lastf.p, b->len) == 0));
        } else {
            uint8_t want[8] = {0};
            scalar_from_wire(
                fd->type, fd->type == PROTOBUF_C_TYPE_BOOL ? bool_of(&lastf) : lastf.varint, want);
            FUZZ_CHECK(memcmp(pbc_member(m, fd), want, pbc_elem_size(fd->type)) == 0);
        }
    }
    /* unknown fields: number, wire type and the bytes after the tag, in order */
    FUZZ_CHECK(m->n_unknown_fields == unknown);
    size_t u = 0;
    bf_pb_reader_init(&r, p, len);
    while (bf_pb_next(&r, &f) == 1) {
        if (protobuf_c_message_descriptor_get_field(d, f.num))
            continue;
        const ProtobufCMessageUnknownField *uf = &m->unknown_fields[u++];
        const uint8_t *after = f.start;
        uint64_t tag;
        bool over = false;
        FUZZ_CHECK(fuzz_raw_varint(&after, f.end, &tag, &over) == 0);
        FUZZ_CHECK(uf->tag == f.num && (int)uf->wire_type == f.wt);
        FUZZ_CHECK(uf->len == (size_t)(f.end - after) && memcmp(uf->data, after, uf->len) == 0);
    }
    free(occ);
    free(elts);
    return true;
}

/* ------------------------------------------------------------ entry */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const ProtobufCMessageDescriptor *d = types[data[0] % N_TYPES];
    const uint8_t *p = data + 1;
    size_t len = size - 1;
    /* the documented stricter encodings anywhere in the bytes exempt a
     * protobuf-c-only acceptance */
    g_stricter = fuzz_pb_stricter_anywhere(p, len, 64);
    ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, len, p);
    bool ok = decode_cmp(d, p, len, m, 0); /* aborts on any unexplained difference */
    if (ok) {
        /* bf_pb_scan and bf_pb_strip_unknown agree with protobuf-c */
        uint64_t known = 0;
        for (unsigned i = 0; i < d->n_fields; i++)
            if (d->fields[i].id < 64)
                known |= BF_PB_KNOWN(d->fields[i].id);
        struct bf_pb_scan sc;
        FUZZ_CHECK(bf_pb_scan(p, len, known, &sc) == 0);
        size_t big = 0;
        for (unsigned i = 0; i < d->n_fields; i++)
            big += d->fields[i].id >= 64;
        if (!big)
            FUZZ_CHECK(sc.unknown == m->n_unknown_fields);
        uint8_t *copy = malloc(len + 1);
        FUZZ_CHECK(copy);
        memcpy(copy, p, len);
        size_t nl;
        FUZZ_CHECK(bf_pb_strip_unknown(copy, len, known, &nl, &sc) == 0 && nl <= len);
        ProtobufCMessage *s = protobuf_c_message_unpack(d, NULL, nl, copy);
        FUZZ_CHECK(s != NULL);
        if (!big) {
            FUZZ_CHECK(s->n_unknown_fields == 0);
            /* the same known fields: pack both without top-level unknowns */
            unsigned nu = m->n_unknown_fields;
            m->n_unknown_fields = 0;
            size_t a = protobuf_c_message_get_packed_size(m);
            size_t b = protobuf_c_message_get_packed_size(s);
            FUZZ_CHECK(a == b);
            uint8_t *pa = malloc(a + 1), *pb = malloc(b + 1);
            FUZZ_CHECK(pa && pb);
            protobuf_c_message_pack(m, pa);
            protobuf_c_message_pack(s, pb);
            FUZZ_CHECK(memcmp(pa, pb, a) == 0);
            free(pa);
            free(pb);
            m->n_unknown_fields = nu;
        }
        protobuf_c_message_free_unpacked(s, NULL);
        free(copy);
    }
    if (m)
        protobuf_c_message_free_unpacked(m, NULL);
    return 0;
}
