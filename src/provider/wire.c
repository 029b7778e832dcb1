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
 * The walker runs on the protobuf wire reader (bigfleet/pbwire.h: varints up
 * to 10 bytes and 64 bits, length-delimited fields bounded by their parent,
 * groups refused); unknown fields are skipped by wire type, the last
 * occurrence of a scalar wins, embedded messages (host, resources) merge
 * across occurrences.
 * The shape hash (XXH3-128 over fields 4, 5, 6, 9, 10, 13 as on the wire)
 * lets the caller cache the interned machine profile per shape.
 */
#include <errno.h>
#include <string.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "bigfleet/pbwire.h"
#include "bigfleet/provider.h"

/* Validates a map entry {1: key (LEN), 2: value (LEN)} and returns its parts. */
static int map_entry(const uint8_t *p, size_t len, struct bf_prov_bytes *k, struct bf_prov_bytes *v)
{
    struct bf_pb_reader r;
    struct bf_pb_field f;
    int rc;
    /* the usual encoding, {1: key}{2: value} with one-byte tags and
     * lengths, or the key alone: read directly (the reader below gives the
     * same parts for these bytes) */
    if (len >= 2 && p[0] == 0x0a && p[1] < 0x80 && (size_t)p[1] + 2 <= len) {
        size_t kl = p[1], rest = len - 2 - kl;
        const uint8_t *q = p + 2 + kl;
        if (rest == 0 || (rest >= 2 && q[0] == 0x12 && q[1] < 0x80 && (size_t)q[1] + 2 == rest)) {
            k->p = p + 2;
            k->len = kl;
            v->p = rest ? q + 2 : (const uint8_t *)"";
            v->len = rest ? q[1] : 0;
            return 0;
        }
    }
    k->p = v->p = NULL;
    k->len = v->len = 0;
    bf_pb_reader_init(&r, p, len);
    while ((rc = bf_pb_next(&r, &f)) == 1) {
        if (f.num == 1 || f.num == 2) {
            if (f.wt != BF_PB_LEN)
                return -EBADMSG;
            struct bf_prov_bytes *t = f.num == 1 ? k : v;
            t->p = f.p;
            t->len = f.len;
        }
    }
    if (rc)
        return -EBADMSG;
    if (!k->p)
        k->p = (const uint8_t *)"";
    if (!v->p)
        v->p = (const uint8_t *)"";
    return 0;
}

/* Counts (and validates) the entries of a Resources message. */
static int resources_count(const uint8_t *p, size_t len, uint32_t *n)
{
    struct bf_pb_reader r;
    struct bf_pb_field f;
    int rc;
    bf_pb_reader_init(&r, p, len);
    while ((rc = bf_pb_next(&r, &f)) == 1) {
        if (f.num == 1) {
            struct bf_prov_bytes k, v;
            if (f.wt != BF_PB_LEN || map_entry(f.p, f.len, &k, &v))
                return -EBADMSG;
            (*n)++;
        }
    }
    return rc ? -EBADMSG : 0;
}

static int host_decode(const uint8_t *p, size_t len, struct bf_prov_machine *m)
{
    struct bf_pb_reader r;
    struct bf_pb_field f;
    int rc;
    m->has_host = true;
    bf_pb_reader_init(&r, p, len);
    while ((rc = bf_pb_next(&r, &f)) == 1) {
        if (f.num == 1 || f.num == 2) {
            if (f.wt != BF_PB_LEN)
                return -EBADMSG;
            struct bf_prov_bytes *t = f.num == 1 ? &m->host_provider : &m->host_ref;
            t->p = f.p;
            t->len = f.len;
        }
    }
    return rc ? -EBADMSG : 0;
}

/* Whether a Machine field has its schema's wire type (provider.proto); a
 * field we do not read (unknown, or reserved 11) is skipped whatever its type.
 * One rule for the full decode and the peek, so both accept the same bytes.
 * A table, not a switch: the peek asks once per field of every listed
 * machine (~17 fields, 500K machines a resync walk). */
#define WT_ANY 0xff
static const uint8_t machine_wt[16] = {
    WT_ANY,    BF_PB_LEN, BF_PB_VARINT, BF_PB_LEN, BF_PB_LEN, BF_PB_LEN, BF_PB_VARINT, BF_PB_I64,
    BF_PB_I64, BF_PB_LEN, BF_PB_LEN,    WT_ANY,    BF_PB_LEN, BF_PB_LEN, BF_PB_LEN,    BF_PB_LEN};
static inline bool machine_wt_ok(const struct bf_pb_field *f)
{
    return f->num >= 16 || machine_wt[f->num] == WT_ANY || machine_wt[f->num] == f->wt;
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
    /* shape fields usually sit next to each other on the wire: hash each
     * contiguous run once (XXH3's streaming digest equals the one-shot hash
     * of the concatenation, so the runs' boundaries do not change it) */
    XXH3_state_t hs;
    bool streaming = false;
    const uint8_t *run = NULL, *run_end = NULL;
    struct bf_pb_reader r;
    struct bf_pb_field f;
    int rc;
    bf_pb_reader_init(&r, m->buf, len);
    while ((rc = bf_pb_next(&r, &f)) == 1) {
        if (!machine_wt_ok(&f))
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
            if (f.num == 2)
                m->state = (int32_t)(uint32_t)f.varint;
            else
                m->capacity_type = (int32_t)(uint32_t)f.varint;
            break;
        case 7:
        case 8: {
            double d = bf_pb_double(f.varint);
            if (f.num == 7)
                m->price_per_hour = d;
            else
                m->interruption_probability = d;
            break;
        }
        case 3:
            if (host_decode(f.p, f.len, m))
                return -EBADMSG;
            break;
        case 9:
        case 13:
            if (resources_count(f.p, f.len, f.num == 9 ? &m->n_resources : &m->n_allocatable))
                return -EBADMSG;
            break;
        case 10:
        case 15: {
            struct bf_prov_bytes k, v;
            if (map_entry(f.p, f.len, &k, &v))
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
            s->p = f.p;
            s->len = f.len;
        }
        if (f.num == 4 || f.num == 5 || f.num == 6 || f.num == 9 || f.num == 10 || f.num == 13) {
            if (run && f.start == run_end) {
                run_end = f.end;
                continue;
            }
            if (run) {
                if (!streaming)
                    XXH3_128bits_reset(&hs);
                streaming = true;
                XXH3_128bits_update(&hs, run, (size_t)(run_end - run));
            }
            run = f.start;
            run_end = f.end;
        }
    }
    if (rc)
        return -EBADMSG;
    XXH128_hash_t h;
    if (streaming) {
        XXH3_128bits_update(&hs, run, (size_t)(run_end - run));
        h = XXH3_128bits_digest(&hs);
    } else {
        h = XXH3_128bits(run ? run : empty, run ? (size_t)(run_end - run) : 0);
    }
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
    if (!p)
        p = empty;
    const uint8_t *q = p, *end = p + len;
    while (q < end) {
        /* the common fields: a one-byte tag of fields 1..15 and a one-byte
         * length or varint value (labels, names, state, capacity type), or a
         * fixed 8 bytes (price, interruption probability); the same checks
         * as bf_pb_next and machine_wt_ok, without filling a struct (the
         * peek reads ~15 fields of each of 500K machines a resync walk) */
        uint8_t t = *q;
        if (t < 0x80 && t >= 0x08) {
            uint8_t want = machine_wt[t >> 3], wt = t & 7;
            if (want != WT_ANY && want != wt)
                return -EBADMSG; /* bf_pb_next or machine_wt_ok refuses it too */
            size_t room = (size_t)(end - q);
            if (wt == BF_PB_LEN && room >= 2 && q[1] < 0x80) {
                size_t l = q[1];
                if (l > room - 2)
                    return -EBADMSG;
                if (t == 0x0a) {
                    id->p = q + 2;
                    id->len = l;
                }
                q += 2 + l;
                continue;
            }
            if (wt == BF_PB_VARINT && room >= 2 && q[1] < 0x80) {
                if (t == 0x10)
                    *state = q[1];
                q += 2;
                continue;
            }
            if (wt == BF_PB_I64) {
                if (room < 9)
                    return -EBADMSG;
                q += 9;
                continue;
            }
        }
        struct bf_pb_reader r;
        struct bf_pb_field f;
        bf_pb_reader_init(&r, q, (size_t)(end - q));
        if (bf_pb_next(&r, &f) != 1 || !machine_wt_ok(&f))
            return -EBADMSG;
        if (f.num == 1) {
            id->p = f.p;
            id->len = f.len;
        } else if (f.num == 2) {
            *state = (int32_t)(uint32_t)f.varint;
        }
        q = r.p;
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

/* One field of [*pp, end), advancing *pp: 1, 0 at the end, -EBADMSG. */
static int next_at(const uint8_t **pp, const uint8_t *end, struct bf_pb_field *f)
{
    struct bf_pb_reader r = {*pp, end};
    int rc = bf_pb_next(&r, f);
    *pp = r.p;
    return rc;
}

int bf_prov_map_next(struct bf_prov_map_iter *it, struct bf_prov_bytes *key,
                     struct bf_prov_bytes *value)
{
    struct bf_pb_field f;
    int rc;
    for (;;) {
        if (it->nested && it->ip && it->ip < it->iend) {
            if ((rc = next_at(&it->ip, it->iend, &f)) < 0)
                return -EBADMSG;
            if (f.num != 1)
                continue;
            if (f.wt != BF_PB_LEN)
                return -EBADMSG;
            return map_entry(f.p, f.len, key, value) ? -EBADMSG : 1;
        }
        if ((rc = next_at(&it->p, it->end, &f)) <= 0)
            return rc;
        if (f.num != it->field)
            continue;
        if (f.wt != BF_PB_LEN)
            return -EBADMSG;
        if (it->nested) {
            it->ip = f.p;
            it->iend = f.p + f.len;
            continue;
        }
        return map_entry(f.p, f.len, key, value) ? -EBADMSG : 1;
    }
}

/* The usual MachineList entry: tag 0x0a (field 1, length-delimited) and a
 * length of one or two bytes that fits; reads it as bf_pb_next would and
 * advances *pp (true), or leaves *pp for bf_pb_next (false). One branch per
 * machine instead of the general reader's, twice per page (decode, iterate). */
static inline bool list_machine_at(const uint8_t **pp, const uint8_t *end, const uint8_t **mp,
                                   size_t *ml)
{
    const uint8_t *q = *pp;
    size_t room = (size_t)(end - q), l, h;
    if (room < 2 || q[0] != 0x0a)
        return false;
    if (q[1] < 0x80) {
        l = q[1];
        h = 2;
    } else if (room >= 3 && q[2] < 0x80) {
        l = (size_t)(q[1] & 0x7f) | (size_t)q[2] << 7;
        h = 3;
    } else {
        return false;
    }
    if (l > room - h)
        return false; /* bf_pb_next refuses it */
    *mp = q + h;
    *ml = l;
    *pp = q + h + l;
    return true;
}

int bf_prov_list_decode(const uint8_t *p, size_t len, struct bf_prov_list *l)
{
    static const uint8_t empty[1] = {0};
    struct bf_pb_reader r;
    struct bf_pb_field f;
    int rc;
    memset(l, 0, sizeof *l);
    l->buf = p ? p : empty;
    l->len = len;
    l->revision.p = empty;
    bf_pb_reader_init(&r, l->buf, len);
    for (;;) {
        const uint8_t *mp;
        size_t ml;
        if (list_machine_at(&r.p, r.end, &mp, &ml)) {
            l->n_machines++;
            continue;
        }
        if ((rc = bf_pb_next(&r, &f)) != 1)
            break;
        if (f.num == 1 || f.num == 2) {
            if (f.wt != BF_PB_LEN)
                return -EBADMSG;
            if (f.num == 1) {
                l->n_machines++;
            } else {
                l->revision.p = f.p;
                l->revision.len = f.len;
            }
        }
    }
    return rc ? -EBADMSG : 0;
}

void bf_prov_list_iter_init(struct bf_prov_list_iter *it, const struct bf_prov_list *l)
{
    it->p = l->buf;
    it->end = l->buf + l->len;
}

int bf_prov_list_next(struct bf_prov_list_iter *it, struct bf_prov_bytes *machine)
{
    struct bf_pb_field f;
    int rc;
    if (list_machine_at(&it->p, it->end, &machine->p, &machine->len))
        return 1;
    while ((rc = next_at(&it->p, it->end, &f)) == 1) {
        if (f.num == 1) {
            if (f.wt != BF_PB_LEN)
                return -EBADMSG;
            machine->p = f.p;
            machine->len = f.len;
            return 1;
        }
    }
    return rc;
}

int bf_prov_ack_decode(const uint8_t *p, size_t len, struct bf_prov_ack *a)
{
    static const uint8_t empty[1] = {0};
    struct bf_pb_reader r;
    struct bf_pb_field f;
    int rc;
    memset(a, 0, sizeof *a);
    a->operation_id.p = empty;
    bf_pb_reader_init(&r, p ? p : empty, len);
    const uint8_t *mp = NULL;
    size_t ml = 0;
    while ((rc = bf_pb_next(&r, &f)) == 1) {
        if (f.num == 1 || f.num == 2) {
            if (f.wt != BF_PB_LEN)
                return -EBADMSG;
            if (f.num == 1) {
                a->operation_id.p = f.p;
                a->operation_id.len = f.len;
            } else {
                /* a split sub-message would merge; a provider never splits it, and
                 * the last occurrence is what a TransitionAck means */
                mp = f.p;
                ml = f.len;
                a->has_machine = true;
            }
        }
    }
    if (rc)
        return -EBADMSG;
    if (a->has_machine)
        return bf_prov_machine_decode(mp, ml, &a->machine);
    return 0;
}
