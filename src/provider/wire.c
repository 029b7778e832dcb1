/*
 * wire.c — zero-copy decoding of the provider's replies (bigfleet/provider.h):
 * Machine, its maps, MachineList and TransitionAck, straight from the gRPC
 * message bytes.
 *
 * Design notes: a full List of 500K machines is one ~100 MB message; unpacking
 * it with protobuf-c would allocate tens of millions of small objects. Here a
 * Machine is walked once (field numbers of wire.md §4), its strings stay
 * slices of the reply buffer, and its maps are walked again only when the
 * caller needs them (the reconciler's fast path reads id and state only).
 * The walker follows the protobuf encoding rules: varints up to 10 bytes,
 * length-delimited fields bounded by their parent, unknown fields skipped by
 * wire type, last occurrence of a scalar wins, embedded messages (host,
 * resources) merge across occurrences. Group wire types (3, 4) are refused.
 * The shape hash (XXH3-128 over fields 4, 5, 6, 9, 10, 13 as on the wire)
 * lets the caller cache the interned machine profile per shape.
 */
#include <errno.h>
#include <string.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "bigfleet/provider.h"

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

static int rd_varint(const uint8_t **pp, const uint8_t *end, uint64_t *v)
{
    const uint8_t *p = *pp;
    uint64_t x = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (p >= end)
            return -EBADMSG;
        uint8_t b = *p++;
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *pp = p;
            *v = x;
            return 0;
        }
    }
    return -EBADMSG;
}

/* Reads one field header and, for LEN fields, the payload slice; for other
 * wire types the value (varint) or the 8/4 raw bytes (in *v). */
struct field {
    uint32_t num;
    int wt;
    uint64_t v;
    const uint8_t *data; /* LEN payload, or the field's first byte */
    size_t len;
    const uint8_t *start; /* tag start (for hashing the raw field) */
    const uint8_t *stop;  /* one past the field */
};

static int rd_field(const uint8_t **pp, const uint8_t *end, struct field *f)
{
    uint64_t tag;
    f->start = *pp;
    if (rd_varint(pp, end, &tag))
        return -EBADMSG;
    if ((tag >> 3) == 0 || (tag >> 3) > 0x1fffffff)
        return -EBADMSG;
    f->num = (uint32_t)(tag >> 3);
    f->wt = (int)(tag & 7);
    switch (f->wt) {
    case WT_VARINT:
        if (rd_varint(pp, end, &f->v))
            return -EBADMSG;
        break;
    case WT_I64:
        if (end - *pp < 8)
            return -EBADMSG;
        memcpy(&f->v, *pp, 8); /* little-endian host (x86-64/arm64) */
        *pp += 8;
        break;
    case WT_I32: {
        if (end - *pp < 4)
            return -EBADMSG;
        uint32_t x;
        memcpy(&x, *pp, 4);
        f->v = x;
        *pp += 4;
        break;
    }
    case WT_LEN: {
        uint64_t l;
        if (rd_varint(pp, end, &l) || l > (uint64_t)(end - *pp))
            return -EBADMSG;
        f->data = *pp;
        f->len = (size_t)l;
        *pp += l;
        break;
    }
    default:
        return -EBADMSG; /* groups (3, 4) and 6, 7 */
    }
    f->stop = *pp;
    return 0;
}

/* Validates a map entry {1: key (LEN), 2: value (LEN)} and returns its parts. */
static int map_entry(const uint8_t *p, size_t len, struct bf_prov_bytes *k, struct bf_prov_bytes *v)
{
    const uint8_t *end = p + len;
    k->p = v->p = NULL;
    k->len = v->len = 0;
    while (p < end) {
        struct field f;
        if (rd_field(&p, end, &f))
            return -EBADMSG;
        if (f.num == 1 || f.num == 2) {
            if (f.wt != WT_LEN)
                return -EBADMSG;
            struct bf_prov_bytes *t = f.num == 1 ? k : v;
            t->p = f.data;
            t->len = f.len;
        }
    }
    if (!k->p)
        k->p = (const uint8_t *)"";
    if (!v->p)
        v->p = (const uint8_t *)"";
    return 0;
}

/* Counts (and validates) the entries of a Resources message. */
static int resources_count(const uint8_t *p, size_t len, uint32_t *n)
{
    const uint8_t *end = p + len;
    while (p < end) {
        struct field f;
        if (rd_field(&p, end, &f))
            return -EBADMSG;
        if (f.num == 1) {
            struct bf_prov_bytes k, v;
            if (f.wt != WT_LEN || map_entry(f.data, f.len, &k, &v))
                return -EBADMSG;
            (*n)++;
        }
    }
    return 0;
}

static int host_decode(const uint8_t *p, size_t len, struct bf_prov_machine *m)
{
    const uint8_t *end = p + len;
    m->has_host = true;
    while (p < end) {
        struct field f;
        if (rd_field(&p, end, &f))
            return -EBADMSG;
        if (f.num == 1 || f.num == 2) {
            if (f.wt != WT_LEN)
                return -EBADMSG;
            struct bf_prov_bytes *t = f.num == 1 ? &m->host_provider : &m->host_ref;
            t->p = f.data;
            t->len = f.len;
        }
    }
    return 0;
}

int bf_prov_machine_decode(const uint8_t *p, size_t len, struct bf_prov_machine *m)
{
    static const uint8_t empty[1] = {0};
    memset(m, 0, sizeof *m);
    m->buf = p ? p : empty;
    m->len = len;
    struct bf_prov_bytes *strs[] = {&m->id,   &m->host_provider, &m->host_ref, &m->instance_type,
                                    &m->zone, &m->last_error,    &m->cluster};
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
        strs[i]->p = empty;
    XXH3_state_t hs;
    XXH3_128bits_reset(&hs);
    const uint8_t *end = m->buf + len, *q = m->buf;
    while (q < end) {
        struct field f;
        if (rd_field(&q, end, &f))
            return -EBADMSG;
        struct bf_prov_bytes *s = NULL;
        switch (f.num) {
        case 1:
            s = &m->id;
            break;
        case 4:
            s = &m->instance_type;
            break;
        case 5:
            s = &m->zone;
            break;
        case 12:
            s = &m->last_error;
            break;
        case 14:
            s = &m->cluster;
            break;
        case 2:
        case 6:
            if (f.wt != WT_VARINT)
                return -EBADMSG;
            if (f.num == 2)
                m->state = (int32_t)(uint32_t)f.v;
            else
                m->capacity_type = (int32_t)(uint32_t)f.v;
            break;
        case 7:
        case 8: {
            if (f.wt != WT_I64)
                return -EBADMSG;
            double d;
            memcpy(&d, &f.v, 8);
            if (f.num == 7)
                m->price_per_hour = d;
            else
                m->interruption_probability = d;
            break;
        }
        case 3:
            if (f.wt != WT_LEN || host_decode(f.data, f.len, m))
                return -EBADMSG;
            break;
        case 9:
        case 13:
            if (f.wt != WT_LEN ||
                resources_count(f.data, f.len, f.num == 9 ? &m->n_resources : &m->n_allocatable))
                return -EBADMSG;
            break;
        case 10:
        case 15: {
            struct bf_prov_bytes k, v;
            if (f.wt != WT_LEN || map_entry(f.data, f.len, &k, &v))
                return -EBADMSG;
            if (f.num == 10)
                m->n_labels++;
            else
                m->n_metadata++;
            break;
        }
        default:
            break; /* unknown or reserved (11): skipped */
        }
        if (s) {
            if (f.wt != WT_LEN)
                return -EBADMSG;
            s->p = f.data;
            s->len = f.len;
        }
        if (f.num == 4 || f.num == 5 || f.num == 6 || f.num == 9 || f.num == 10 || f.num == 13)
            XXH3_128bits_update(&hs, f.start, (size_t)(f.stop - f.start));
    }
    XXH128_hash_t h = XXH3_128bits_digest(&hs);
    m->shape_hash[0] = h.low64;
    m->shape_hash[1] = h.high64;
    return 0;
}

int bf_prov_machine_peek(const uint8_t *p, size_t len, struct bf_prov_bytes *id, int32_t *state)
{
    static const uint8_t empty[1] = {0};
    id->p = empty;
    id->len = 0;
    *state = 0;
    const uint8_t *end = (p ? p : empty) + len, *q = p ? p : empty;
    while (q < end) {
        struct field f;
        if (rd_field(&q, end, &f))
            return -EBADMSG;
        switch (f.num) {
        case 1:
        case 3:
        case 4:
        case 5:
        case 9:
        case 10:
        case 12:
        case 13:
        case 14:
        case 15:
            if (f.wt != WT_LEN)
                return -EBADMSG;
            if (f.num == 1) {
                id->p = f.data;
                id->len = f.len;
            }
            break;
        case 2:
        case 6:
            if (f.wt != WT_VARINT)
                return -EBADMSG;
            if (f.num == 2)
                *state = (int32_t)(uint32_t)f.v;
            break;
        case 7:
        case 8:
            if (f.wt != WT_I64)
                return -EBADMSG;
            break;
        default:
            break;
        }
    }
    return 0;
}

void bf_prov_map_iter_init(struct bf_prov_map_iter *it, const struct bf_prov_machine *m,
                           enum bf_prov_map_which which)
{
    it->p = m->buf;
    it->end = m->buf + m->len;
    it->ip = it->iend = NULL;
    it->field = (uint32_t)which;
    it->nested = which == BF_PROV_MAP_RESOURCES || which == BF_PROV_MAP_ALLOCATABLE;
}

int bf_prov_map_next(struct bf_prov_map_iter *it, struct bf_prov_bytes *key,
                     struct bf_prov_bytes *value)
{
    for (;;) {
        if (it->nested && it->ip && it->ip < it->iend) {
            struct field f;
            if (rd_field(&it->ip, it->iend, &f))
                return -EBADMSG;
            if (f.num != 1)
                continue;
            if (f.wt != WT_LEN)
                return -EBADMSG;
            return map_entry(f.data, f.len, key, value) ? -EBADMSG : 1;
        }
        if (it->p >= it->end)
            return 0;
        struct field f;
        if (rd_field(&it->p, it->end, &f))
            return -EBADMSG;
        if (f.num != it->field)
            continue;
        if (f.wt != WT_LEN)
            return -EBADMSG;
        if (it->nested) {
            it->ip = f.data;
            it->iend = f.data + f.len;
            continue;
        }
        return map_entry(f.data, f.len, key, value) ? -EBADMSG : 1;
    }
}

int bf_prov_list_decode(const uint8_t *p, size_t len, struct bf_prov_list *l)
{
    static const uint8_t empty[1] = {0};
    memset(l, 0, sizeof *l);
    l->buf = p ? p : empty;
    l->len = len;
    l->revision.p = empty;
    const uint8_t *q = l->buf, *end = l->buf + len;
    while (q < end) {
        struct field f;
        if (rd_field(&q, end, &f))
            return -EBADMSG;
        if (f.num == 1 || f.num == 2) {
            if (f.wt != WT_LEN)
                return -EBADMSG;
            if (f.num == 1) {
                l->n_machines++;
            } else {
                l->revision.p = f.data;
                l->revision.len = f.len;
            }
        }
    }
    return 0;
}

void bf_prov_list_iter_init(struct bf_prov_list_iter *it, const struct bf_prov_list *l)
{
    it->p = l->buf;
    it->end = l->buf + l->len;
}

int bf_prov_list_next(struct bf_prov_list_iter *it, struct bf_prov_bytes *machine)
{
    while (it->p < it->end) {
        struct field f;
        if (rd_field(&it->p, it->end, &f))
            return -EBADMSG;
        if (f.num == 1) {
            if (f.wt != WT_LEN)
                return -EBADMSG;
            machine->p = f.data;
            machine->len = f.len;
            return 1;
        }
    }
    return 0;
}

int bf_prov_ack_decode(const uint8_t *p, size_t len, struct bf_prov_ack *a)
{
    static const uint8_t empty[1] = {0};
    memset(a, 0, sizeof *a);
    a->operation_id.p = empty;
    const uint8_t *q = p ? p : empty, *end = q + len;
    const uint8_t *mp = NULL;
    size_t ml = 0;
    while (q < end) {
        struct field f;
        if (rd_field(&q, end, &f))
            return -EBADMSG;
        if (f.num == 1 || f.num == 2) {
            if (f.wt != WT_LEN)
                return -EBADMSG;
            if (f.num == 1) {
                a->operation_id.p = f.data;
                a->operation_id.len = f.len;
            } else {
                /* a split sub-message would merge; a provider never splits it, and
                 * the last occurrence is what a TransitionAck means */
                mp = f.data;
                ml = f.len;
                a->has_machine = true;
            }
        }
    }
    if (a->has_machine)
        return bf_prov_machine_decode(mp, ml, &a->machine);
    return 0;
}
