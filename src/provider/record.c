/*
 * record.c — a provider Machine becomes a shared-memory machine record
 * (bigfleet/provider.h): the screen (machine.Invariant plus structural
 * checks, shard.md §3.5/§3.6), the conversion with interning, the per-shape
 * profile cache, and the shard_metadata restore (wire.md §10).
 *
 * Design notes
 *   - The screen runs on the decoded view before anything is interned, so a
 *     rejected record never grows the (append-only) string table.
 *   - Interning a MachineProfileBlob costs an encode and a hash-table probe
 *     under the string lock; machines of one shape share the raw bytes of
 *     their shape fields, so the result is cached per 128-bit shape hash
 *     (process-local, open addressing, never evicted: shapes are few).
 *   - Host refs: a cloud host ref is unique per host. When it equals the
 *     machine id only the provider is interned (BF_REC_HOST_IS_ID). When the
 *     string table cannot take another host string the record keeps the
 *     provider alone (still "host set" for Invariant) and the caller is told.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/blobs.h"
#include "bigfleet/hmap.h"
#include "bigfleet/provider.h"

#define WHY(...)                                                                                   \
    do {                                                                                           \
        if (why && why_len)                                                                        \
            snprintf(why, why_len, __VA_ARGS__);                                                   \
    } while (0)

int bf_prov_machine_check(const struct bf_prov_machine *m, char *why, size_t why_len)
{
    if (why && why_len)
        why[0] = 0;
    if (m->id.len == 0) {
        WHY("machine has no id");
        return BF_REJECT_STRUCTURAL;
    }
    if (m->id.len > BF_PROV_ID_MAX || memchr(m->id.p, 0, m->id.len)) {
        WHY("machine id is longer than %d bytes or holds a NUL byte", BF_PROV_ID_MAX);
        return BF_REJECT_STRUCTURAL;
    }
    if (m->state < BF_STATE_SPECULATIVE || m->state > BF_STATE_FAILED) {
        WHY("unknown machine state %d", (int)m->state);
        return BF_REJECT_STRUCTURAL;
    }
    if (m->cluster.len > BF_PROV_ID_MAX || memchr(m->cluster.p, 0, m->cluster.len)) {
        WHY("cluster id is longer than %d bytes or holds a NUL byte", BF_PROV_ID_MAX);
        return BF_REJECT_STRUCTURAL;
    }
    struct bf_invariant_input in = {
        .state = m->state,
        .host_set = m->host_provider.len > 0 || m->host_ref.len > 0,
        .cluster_set = m->cluster.len > 0,
        .has_id = true,
        .has_last_error = m->last_error.len > 0,
        .price_per_hour = m->price_per_hour,
        .interruption_probability = m->interruption_probability,
    };
    return bf_machine_invariant(&in, why, why_len);
}

/* ------------------------------------------------------------ shape cache */

/* the machine's shape hash (XXH3-128, provider/wire.c) -> its interned
 * profile and indexes (bigfleet/hmap.h) */
struct shape_key {
    uint64_t h0, h1;
};
struct shape_ent {
    uint32_t profile;
    uint16_t type_idx, zone_idx;
    uint8_t ct;
};
static inline uint64_t shape_hash(struct shape_key k)
{
    return k.h0; /* already a hash */
}
static inline bool shape_eq(struct shape_key a, struct shape_key b)
{
    return a.h0 == b.h0 && a.h1 == b.h1;
}
BF_HMAP_DEFINE(shape_map, struct shape_key, struct shape_ent, shape_hash, shape_eq)

struct bf_prov_shape_cache {
    struct shape_map t;
};

struct bf_prov_shape_cache *bf_prov_shape_cache_new(void)
{
    struct bf_prov_shape_cache *c = calloc(1, sizeof *c);
    if (!c || shape_map_reserve(&c->t, 128)) {
        free(c);
        return NULL;
    }
    return c;
}

void bf_prov_shape_cache_free(struct bf_prov_shape_cache *c)
{
    if (!c)
        return;
    shape_map_free(&c->t);
    free(c);
}

/* ------------------------------------------------------------ conversion */

/* Scratch for NUL-terminated copies of map entries. */
struct kvbuf {
    char *mem;
    size_t used, cap;
};

static const char *kv_dup(struct kvbuf *b, const struct bf_prov_bytes *x)
{
    if (memchr(x->p, 0, x->len))
        return NULL;
    if (b->used + x->len + 1 > b->cap)
        return NULL;
    char *d = b->mem + b->used;
    memcpy(d, x->p, x->len);
    d[x->len] = 0;
    b->used += x->len + 1;
    return d;
}

/* Collects one map into kv[] (NUL-terminated copies). Returns the count or -1
 * with why set. */
static int collect(const struct bf_prov_machine *m, enum bf_prov_map_which which, uint32_t n,
                   struct bf_kv *kv, struct kvbuf *b, const char *what, char *why, size_t why_len)
{
    struct bf_prov_map_iter it;
    struct bf_prov_bytes k, v;
    uint32_t i = 0;
    int r;
    bf_prov_map_iter_init(&it, m, which);
    while ((r = bf_prov_map_next(&it, &k, &v)) == 1 && i < n) {
        kv[i].key = kv_dup(b, &k);
        kv[i].value = kv_dup(b, &v);
        if (!kv[i].key || !kv[i].value) {
            WHY("%s entry holds a NUL byte", what);
            return -1;
        }
        if (!kv[i].key[0]) {
            WHY("%s entry with an empty key", what);
            return -1;
        }
        i++;
    }
    if (r < 0) {
        WHY("malformed %s", what);
        return -1;
    }
    return (int)i;
}

static int name_copy(char *dst, size_t cap, const struct bf_prov_bytes *x)
{
    if (x->len >= cap || memchr(x->p, 0, x->len))
        return -1;
    memcpy(dst, x->p, x->len);
    dst[x->len] = 0;
    return 0;
}

/* Interns the machine's profile (cache miss path). */
static int shape_intern(struct bf_shm *s, const struct bf_prov_machine *m, struct shape_ent *e,
                        char *why, size_t why_len)
{
    char type[BF_NAME_MAX], zone[BF_NAME_MAX];
    if (name_copy(type, sizeof type, &m->instance_type) || name_copy(zone, sizeof zone, &m->zone)) {
        WHY("instance type or zone name longer than %d bytes or holding a NUL byte",
            BF_NAME_MAX - 1);
        return BF_REJECT_STRUCTURAL;
    }
    uint32_t total = m->n_resources + m->n_labels + m->n_allocatable;
    struct kvbuf b = {0};
    b.cap = m->len + 3u * total + 16;
    b.mem = malloc(b.cap);
    struct bf_kv *kv = calloc(total ? total : 1, sizeof *kv);
    int rc = 0;
    if (!b.mem || !kv) {
        rc = -ENOMEM;
        goto out;
    }
    struct bf_kv *res = kv, *lab = kv + m->n_resources, *alc = lab + m->n_labels;
    int nr = collect(m, BF_PROV_MAP_RESOURCES, m->n_resources, res, &b, "resources", why, why_len);
    int nl =
        nr < 0 ? -1 : collect(m, BF_PROV_MAP_LABELS, m->n_labels, lab, &b, "labels", why, why_len);
    int na = nl < 0 ? -1
                    : collect(m, BF_PROV_MAP_ALLOCATABLE, m->n_allocatable, alc, &b, "allocatable",
                              why, why_len);
    if (na < 0) {
        rc = BF_REJECT_STRUCTURAL;
        goto out;
    }
    /* quantities: parseable, non-negative; names registered as dimensions */
    bf_vec vr, va;
    char err[160];
    int r1 = bf_resources_to_vec(s, (uint32_t)nr, res, &vr, err, sizeof err);
    int r2 = r1 ? r1 : bf_resources_to_vec(s, (uint32_t)na, alc, &va, err, sizeof err);
    if (r1 == -ETIMEDOUT || r2 == -ETIMEDOUT) {
        rc = -ETIMEDOUT;
        goto out;
    }
    if (r1 || r2) {
        WHY("%s", (r1 ? r1 : r2) == -ENOSPC ? "more resource names than the shard holds" : err);
        rc = BF_REJECT_STRUCTURAL;
        goto out;
    }
    for (int d = 0; d < BF_MAX_DIMS; d++)
        if (vr.v[d] < 0 || va.v[d] < 0) {
            WHY("negative resource quantity");
            rc = BF_REJECT_STRUCTURAL;
            goto out;
        }
    int ct = m->capacity_type >= BF_CT_UNSPECIFIED && m->capacity_type < BF_CT_COUNT
                 ? m->capacity_type
                 : BF_CT_UNSPECIFIED;
    struct bf_mprofile_input in = {
        .instance_type = type,
        .zone = zone,
        .capacity_type = ct,
        .n_resources = (uint32_t)nr,
        .resources = res,
        .n_labels = (uint32_t)nl,
        .labels = lab,
        .n_allocatable = (uint32_t)na,
        .allocatable = alc,
    };
    uint32_t ref;
    rc = bf_mprofile_intern(s, &in, &ref, err, sizeof err);
    if (rc == -EINVAL) {
        WHY("%s", err);
        rc = BF_REJECT_STRUCTURAL;
        goto out;
    }
    if (rc)
        goto out;
    int ti = bf_type_intern(s, type), zi = bf_zone_intern(s, zone);
    if (ti == -ETIMEDOUT || zi == -ETIMEDOUT) {
        rc = -ETIMEDOUT;
        goto out;
    }
    if (ti < 0 || zi < 0) {
        WHY("%s registry full (instance type \"%s\", zone \"%s\")",
            ti < 0 ? "instance type" : "zone", type, zone);
        rc = BF_REJECT_STRUCTURAL;
        goto out;
    }
    e->profile = ref;
    e->type_idx = (uint16_t)ti;
    e->zone_idx = (uint16_t)zi;
    e->ct = (uint8_t)ct;
out:
    free(b.mem);
    free(kv);
    return rc;
}

static int intern_bytes(struct bf_shm *s, const struct bf_prov_bytes *x, uint32_t *ref)
{
    if (!x->len) {
        *ref = 0;
        return 0;
    }
    return bf_str_intern(s, x->p, (uint32_t)x->len, ref);
}

int bf_prov_machine_build(struct bf_shm *s, struct bf_prov_shape_cache *c,
                          const struct bf_prov_machine *m, uint32_t id_ref,
                          struct bf_machine_rec *out, bool *host_degraded, char *why,
                          size_t why_len)
{
    memset(out, 0, sizeof *out);
    if (host_degraded)
        *host_degraded = false;
    struct shape_key key = {m->shape_hash[0], m->shape_hash[1]};
    struct shape_ent e = {0};
    const struct shape_ent *hit = c ? shape_map_ref(&c->t, key) : NULL;
    if (hit) {
        e = *hit;
    } else {
        int rc = shape_intern(s, m, &e, why, why_len);
        if (rc)
            return rc;
        if (c)
            shape_map_put(&c->t, key, e); /* a cache: a failed put costs time only */
    }
    int rc;
    if (!id_ref) {
        if ((rc = intern_bytes(s, &m->id, &id_ref)))
            return rc;
        bf_inv_index_prefetch(s, id_ref); /* a new machine: its insert probes there next */
    }
    out->id = id_ref;
    out->profile = e.profile;
    out->type_idx = e.type_idx;
    out->zone_idx = e.zone_idx;
    out->capacity_type = e.ct;
    out->state = (uint8_t)m->state;
    out->price_per_hour = (float)m->price_per_hour;
    out->interruption_probability = (float)m->interruption_probability;
    if ((rc = intern_bytes(s, &m->cluster, &out->cluster)))
        return rc;
    if (m->last_error.len &&
        bf_str_intern_soft(s, m->last_error.p, (uint32_t)m->last_error.len, &out->last_error)) {
        /* the reserve protects essential strings: keep a bounded message */
        if ((rc = bf_str_intern_cstr(s, "provider error (message dropped: string table reserve)",
                                     &out->last_error)))
            return rc;
    }
    if (m->host_provider.len || m->host_ref.len) {
        bool is_id = m->host_ref.len == m->id.len && !memcmp(m->host_ref.p, m->id.p, m->id.len);
        if (is_id || !m->host_ref.len) {
            if ((rc = intern_bytes(s, &m->host_provider, &out->host)))
                return rc;
            if (is_id)
                out->flags |= BF_REC_HOST_IS_ID;
        } else {
            size_t n = m->host_provider.len + 1 + m->host_ref.len;
            uint8_t stackb[256];
            uint8_t *hb = n <= sizeof stackb ? stackb : malloc(n);
            if (!hb)
                return -ENOMEM;
            memcpy(hb, m->host_provider.p, m->host_provider.len);
            hb[m->host_provider.len] = 0;
            memcpy(hb + m->host_provider.len + 1, m->host_ref.p, m->host_ref.len);
            rc = bf_str_intern_soft(s, hb, (uint32_t)n, &out->host);
            if (hb != stackb)
                free(hb);
            if (rc == -ENOSPC || rc == -E2BIG) {
                /* degrade: keep the provider alone ("host set" still holds) */
                struct bf_prov_bytes p = m->host_provider;
                if (!p.len) {
                    p.p = (const uint8_t *)"?";
                    p.len = 1;
                }
                if ((rc = intern_bytes(s, &p, &out->host)))
                    return rc;
                if (host_degraded)
                    *host_degraded = true;
            } else if (rc) {
                return rc;
            }
        }
    }
    return 0;
}

int bf_prov_machine_assignment(struct bf_shm *s, const struct bf_prov_machine *m,
                               struct bf_machine_rec *rec)
{
    if (!m->n_metadata)
        return 0;
    /* only our five keys are decoded; a duplicate key: the last one wins */
    static const char *const known[5] = {BF_MD_PRIORITY, BF_MD_INTERRUPTION, BF_MD_RECLAMATION,
                                         BF_MD_FINGERPRINT, BF_MD_GROUP};
    struct bf_prov_bytes val[5];
    bool have[5] = {false};
    struct bf_prov_map_iter it;
    struct bf_prov_bytes k, v;
    bf_prov_map_iter_init(&it, m, BF_PROV_MAP_METADATA);
    int r;
    while ((r = bf_prov_map_next(&it, &k, &v)) == 1)
        for (int i = 0; i < 5; i++)
            if (k.len == strlen(known[i]) && !memcmp(k.p, known[i], k.len)) {
                val[i] = v;
                have[i] = true;
            }
    struct bf_md_entry ents[5];
    size_t n = 0;
    for (int i = 0; i < 5; i++)
        if (have[i])
            ents[n++] = (struct bf_md_entry){known[i], val[i].p, val[i].len};
    struct bf_assignment a = {0};
    uint32_t found = 0;
    int bad = bf_shard_metadata_decode(ents, n, &a, &found);
    if (r < 0)
        bad++;
    if (found & BF_MD_HAS_PRIORITY)
        rec->assigned_priority = a.priority;
    if (found & BF_MD_HAS_IPD)
        rec->ipb = a.ipb;
    if (found & BF_MD_HAS_RPD)
        rec->rpb = a.rpb;
    int rc;
    if (found & BF_MD_HAS_FINGERPRINT) {
        struct bf_prov_bytes f = {(const uint8_t *)a.fingerprint, a.fingerprint_len};
        if ((rc = intern_bytes(s, &f, &rec->fingerprint)))
            return rc;
    }
    if (found & BF_MD_HAS_GROUP) {
        struct bf_prov_bytes g = {(const uint8_t *)a.group, a.group_len};
        if ((rc = intern_bytes(s, &g, &rec->group)))
            return rc;
    }
    return bad;
}
