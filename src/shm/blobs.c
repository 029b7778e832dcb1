/*
 * blobs.c — machine and Need profiles as interned protobuf blobs, their
 * decode caches, resource map <-> vector conversion, and the shard_metadata
 * echo encoding (see bigfleet/blobs.h).
 *
 * Canonical encoding: key/value lists are sorted by key before packing and
 * requirements/spreads are canonicalised, so equal shapes produce equal bytes
 * and the string table dedupes them into one ref.
 *
 * The caches keep each unpacked protobuf message alive for the life of the
 * cache; decoded structs point into it.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/blobs.h"
#include "bigfleet/internal/blobs.pb-c.h"
#include "bigfleet/v1alpha1/capacity.pb-c.h"

#define ERR(...)                                                                                   \
    do {                                                                                           \
        if (err && errlen)                                                                         \
            snprintf(err, errlen, __VA_ARGS__);                                                    \
    } while (0)

/* ------------------------------------------------------------ resources */

int bf_resources_to_vec(struct bf_shm *s, uint32_t n, const struct bf_kv *kv, bf_vec *out,
                        char *err, size_t errlen)
{
    bf_vec_zero(out);
    for (uint32_t i = 0; i < n; i++) {
        if (!kv[i].key || !kv[i].key[0]) {
            ERR("empty resource name");
            return -EINVAL;
        }
        int64_t milli;
        const char *v = kv[i].value ? kv[i].value : "";
        int rc = bf_quantity_parse(v, strlen(v), &milli);
        if (rc) {
            ERR("resource %s: invalid quantity \"%s\"", kv[i].key, v);
            return rc == -ERANGE ? -ERANGE : -EINVAL;
        }
        int d = s ? bf_dim_intern(s, kv[i].key) : -EINVAL;
        if (d < 0) {
            if (d == -ENOSPC)
                ERR("resource %s: more than %d distinct resource names", kv[i].key, BF_MAX_DIMS);
            else
                ERR("resource %s: cannot register the dimension", kv[i].key);
            return d;
        }
        out->v[d] = milli; /* a duplicate key: last wins */
    }
    return 0;
}

uint32_t bf_vec_to_kv(const struct bf_shm *s, const bf_vec *v, struct bf_kv kv[BF_MAX_DIMS],
                      char buf[BF_MAX_DIMS][32])
{
    struct bf_dims d;
    bf_shm_dims(s, &d);
    uint32_t n = 0;
    for (uint32_t i = 0; i < d.n; i++) {
        if (v->v[i] == 0)
            continue;
        bf_quantity_format(v->v[i], bf_dim_is_bytes(d.names[i]), buf[n], 32);
        kv[n].key = s->inv->dim_names[i];
        kv[n].value = buf[n];
        n++;
    }
    return n;
}

/* ------------------------------------------------------------ machine profiles */

static int kv_cmp(const void *a, const void *b)
{
    const Bigfleet__Internal__KV *x = *(Bigfleet__Internal__KV *const *)a;
    const Bigfleet__Internal__KV *y = *(Bigfleet__Internal__KV *const *)b;
    return strcmp(x->key, y->key);
}

/* sorted, de-duplicated (last wins) copy of kv as protobuf-c messages */
static size_t build_kvs(uint32_t n, const struct bf_kv *in, Bigfleet__Internal__KV *store,
                        Bigfleet__Internal__KV **ptrs)
{
    for (uint32_t i = 0; i < n; i++) {
        bigfleet__internal__kv__init(&store[i]);
        store[i].key = (char *)(in[i].key ? in[i].key : "");
        store[i].value = (char *)(in[i].value ? in[i].value : "");
        ptrs[i] = &store[i];
    }
    /* stable: mergesort-like via insertion keeps input order among equals */
    for (uint32_t i = 1; i < n; i++) {
        Bigfleet__Internal__KV *x = ptrs[i];
        uint32_t j = i;
        while (j > 0 && kv_cmp(&ptrs[j - 1], &x) > 0) {
            ptrs[j] = ptrs[j - 1];
            j--;
        }
        ptrs[j] = x;
    }
    size_t m = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (m > 0 && strcmp(ptrs[m - 1]->key, ptrs[i]->key) == 0)
            ptrs[m - 1] = ptrs[i]; /* last wins */
        else
            ptrs[m++] = ptrs[i];
    }
    return m;
}

int bf_mprofile_intern(struct bf_shm *s, const struct bf_mprofile_input *in, uint32_t *ref,
                       char *err, size_t errlen)
{
    uint32_t total = in->n_resources + in->n_labels + in->n_allocatable;
    Bigfleet__Internal__KV *store = calloc(total ? total : 1, sizeof *store);
    Bigfleet__Internal__KV **ptrs = calloc(total ? total : 1, sizeof *ptrs);
    if (!store || !ptrs) {
        free(store);
        free(ptrs);
        return -ENOMEM;
    }
    bf_vec scratch;
    int rc = bf_resources_to_vec(s, in->n_resources, in->resources, &scratch, err, errlen);
    if (rc == 0)
        rc = bf_resources_to_vec(s, in->n_allocatable, in->allocatable, &scratch, err, errlen);
    for (uint32_t i = 0; rc == 0 && i < in->n_labels; i++)
        if (!in->labels[i].key || !in->labels[i].key[0]) {
            ERR("empty label key");
            rc = -EINVAL;
        }
    if (rc) {
        free(store);
        free(ptrs);
        return rc;
    }
    Bigfleet__Internal__MachineProfileBlob b = BIGFLEET__INTERNAL__MACHINE_PROFILE_BLOB__INIT;
    b.instance_type = (char *)(in->instance_type ? in->instance_type : "");
    b.zone = (char *)(in->zone ? in->zone : "");
    b.capacity_type = in->capacity_type;
    uint32_t at = 0;
    b.resources = ptrs + at;
    b.n_resources = build_kvs(in->n_resources, in->resources, store + at, ptrs + at);
    at += in->n_resources;
    b.labels = ptrs + at;
    b.n_labels = build_kvs(in->n_labels, in->labels, store + at, ptrs + at);
    at += in->n_labels;
    b.allocatable = ptrs + at;
    b.n_allocatable = build_kvs(in->n_allocatable, in->allocatable, store + at, ptrs + at);
    size_t len = bigfleet__internal__machine_profile_blob__get_packed_size(&b);
    uint8_t stackbuf[1024];
    uint8_t *buf = len <= sizeof stackbuf ? stackbuf : malloc(len);
    if (!buf) {
        free(store);
        free(ptrs);
        return -ENOMEM;
    }
    bigfleet__internal__machine_profile_blob__pack(&b, buf);
    rc = bf_str_intern(s, buf, (uint32_t)len, ref);
    if (rc)
        ERR("cannot intern a machine profile: %s", strerror(-rc));
    if (buf != stackbuf)
        free(buf);
    free(store);
    free(ptrs);
    return rc;
}

const char *bf_mprofile_attr(const struct bf_mprofile *p, const char *key)
{
    if (p->instance_type[0] && strcmp(key, BF_LABEL_INSTANCE_TYPE) == 0)
        return p->instance_type;
    if (p->zone[0] && strcmp(key, BF_LABEL_ZONE) == 0)
        return p->zone;
    /* labels are sorted: binary search */
    uint32_t lo = 0, hi = p->n_labels;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        int c = strcmp(p->labels[mid].key, key);
        if (c == 0)
            return p->labels[mid].value;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* ------------------------------------------------------------ need profiles */

/* bf_nprofile_intern with a string-arena reserve (bf_nprofile_intern_need). */
static int nprofile_intern(struct bf_shm *s, struct bf_need_profile *p, uint64_t reserve,
                           uint32_t *ref, uint32_t *fingerprint_ref)
{
    bf_profile_canonicalize(p);
    char *fp = bf_profile_fingerprint_dup(p);
    if (!fp)
        return -ENOMEM;
    int rc = -ENOMEM;
    Bigfleet__V1alpha1__NodeSelectorRequirement *reqs = calloc(p->n_reqs + 1, sizeof *reqs);
    Bigfleet__V1alpha1__NodeSelectorRequirement **rp = calloc(p->n_reqs + 1, sizeof *rp);
    Bigfleet__V1alpha1__TopologySpread *spr = calloc(p->n_spread + 1, sizeof *spr);
    Bigfleet__V1alpha1__TopologySpread **sp = calloc(p->n_spread + 1, sizeof *sp);
    uint8_t *buf = NULL;
    if (!reqs || !rp || !spr || !sp)
        goto out;
    for (uint32_t i = 0; i < p->n_reqs; i++) {
        bigfleet__v1alpha1__node_selector_requirement__init(&reqs[i]);
        reqs[i].key = (char *)p->reqs[i].key;
        reqs[i].operator_ = (Bigfleet__V1alpha1__NodeSelectorRequirement__Operator)p->reqs[i].op;
        reqs[i].n_values = p->reqs[i].n_values;
        reqs[i].values = (char **)p->reqs[i].values;
        rp[i] = &reqs[i];
    }
    for (uint32_t i = 0; i < p->n_spread; i++) {
        bigfleet__v1alpha1__topology_spread__init(&spr[i]);
        spr[i].topology_key = (char *)p->spread[i].topology_key;
        spr[i].max_skew = p->spread[i].max_skew;
        spr[i].when_unsatisfiable =
            (Bigfleet__V1alpha1__TopologySpread__WhenUnsatisfiable)p->spread[i].when;
        sp[i] = &spr[i];
    }
    Bigfleet__Internal__NeedProfileBlob b = BIGFLEET__INTERNAL__NEED_PROFILE_BLOB__INIT;
    b.n_requirements = p->n_reqs;
    b.requirements = rp;
    b.n_spread = p->n_spread;
    b.spread = sp;
    b.priority = p->priority;
    b.interruption_penalty_bucket = p->ipb;
    b.reclamation_penalty_bucket = p->rpb;
    b.fingerprint = fp;
    size_t len = bigfleet__internal__need_profile_blob__get_packed_size(&b);
    buf = malloc(len ? len : 1);
    if (!buf)
        goto out;
    bigfleet__internal__need_profile_blob__pack(&b, buf);
    if (reserve) {
        uint32_t have;
        uint64_t cost = 0;
        size_t fl = strlen(fp);
        if (bf_str_find(s, buf, (uint32_t)len, &have) != 0)
            cost += bf_str_cost((uint32_t)len);
        if (fingerprint_ref && bf_str_find(s, fp, (uint32_t)fl, &have) != 0)
            cost += bf_str_cost((uint32_t)fl);
        uint64_t used = atomic_load_explicit(&s->inv->strtab.arena_used, memory_order_relaxed);
        if (used + reserve + cost > s->arena_bytes) {
            rc = -ENOSPC;
            goto out;
        }
    }
    rc = bf_str_intern(s, buf, (uint32_t)len, ref);
    if (rc == 0 && fingerprint_ref)
        rc = bf_str_intern_cstr(s, fp, fingerprint_ref);
out:
    free(buf);
    free(reqs);
    free(rp);
    free(spr);
    free(sp);
    free(fp);
    return rc;
}

int bf_nprofile_intern(struct bf_shm *s, struct bf_need_profile *p, uint32_t *ref,
                       uint32_t *fingerprint_ref)
{
    return nprofile_intern(s, p, 0, ref, fingerprint_ref);
}

int bf_nprofile_intern_need(struct bf_shm *s, const Bigfleet__V1alpha1__CapacityNeed *n,
                            uint64_t reserve, uint32_t *ref, uint32_t *fingerprint_ref, char *err,
                            size_t errlen)
{
    if ((int)n->interruption_penalty_bucket < 0 ||
        (int)n->interruption_penalty_bucket > BF_BUCKET_MAX) {
        ERR("interruption_penalty_bucket %d out of range [0,27]",
            (int)n->interruption_penalty_bucket);
        return -EINVAL;
    }
    if ((int)n->reclamation_penalty_bucket < 0 ||
        (int)n->reclamation_penalty_bucket > BF_BUCKET_MAX) {
        ERR("reclamation_penalty_bucket %d out of range [0,27]",
            (int)n->reclamation_penalty_bucket);
        return -EINVAL;
    }
    struct bf_requirement *reqs = calloc(n->n_requirements + 1, sizeof *reqs);
    struct bf_spread *spr = calloc(n->n_spread + 1, sizeof *spr);
    const char **vals = NULL;
    size_t nvals = 0;
    for (size_t i = 0; i < n->n_requirements; i++)
        nvals += n->requirements[i]->n_values;
    vals = calloc(nvals + 1, sizeof *vals);
    int rc = -ENOMEM;
    if (!reqs || !spr || !vals)
        goto out;
    rc = -EINVAL;
    size_t vi = 0;
    for (size_t i = 0; i < n->n_requirements; i++) {
        const Bigfleet__V1alpha1__NodeSelectorRequirement *r = n->requirements[i];
        if ((int)r->operator_ < 0 || (int)r->operator_ > BF_OP_MAX) {
            ERR("requirement %s: unknown operator %d", r->key, (int)r->operator_);
            goto out;
        }
        if (!r->key || !r->key[0]) {
            ERR("requirement with an empty key");
            goto out;
        }
        reqs[i].key = r->key;
        reqs[i].op = (uint8_t)r->operator_;
        reqs[i].n_values = (uint32_t)r->n_values;
        reqs[i].values = vals + vi;
        for (size_t j = 0; j < r->n_values; j++)
            vals[vi++] = r->values[j];
    }
    for (size_t i = 0; i < n->n_spread; i++) {
        const Bigfleet__V1alpha1__TopologySpread *t = n->spread[i];
        if ((int)t->when_unsatisfiable < 0 || (int)t->when_unsatisfiable > 2) {
            ERR("spread %s: unknown when_unsatisfiable %d", t->topology_key,
                (int)t->when_unsatisfiable);
            goto out;
        }
        if (!t->topology_key || !t->topology_key[0]) {
            ERR("spread with an empty topology_key");
            goto out;
        }
        spr[i].topology_key = t->topology_key;
        spr[i].max_skew = t->max_skew;
        spr[i].when = (uint8_t)t->when_unsatisfiable;
    }
    struct bf_need_profile p = {.priority = n->priority,
                                .ipb = (uint8_t)n->interruption_penalty_bucket,
                                .rpb = (uint8_t)n->reclamation_penalty_bucket,
                                .n_reqs = (uint32_t)n->n_requirements,
                                .reqs = reqs,
                                .n_spread = (uint32_t)n->n_spread,
                                .spread = spr};
    rc = nprofile_intern(s, &p, reserve, ref, fingerprint_ref);
    if (rc == -ENOSPC && reserve)
        ERR("the shared string table is nearly full (%llu bytes kept in reserve): cannot intern "
            "a need profile",
            (unsigned long long)reserve);
    else if (rc)
        ERR("cannot intern a need profile: %s", strerror(-rc));
out:
    free(reqs);
    free(spr);
    free(vals);
    return rc;
}

/* ------------------------------------------------------------ caches */

struct centry {
    uint32_t ref;
    void *val;
};

struct cmap {
    struct centry *e;
    uint32_t cap, n;
};

struct bf_blob_cache {
    struct cmap m, np;
};

static uint32_t hash32(uint32_t x)
{
    return (uint32_t)(((uint64_t)x * 0x9E3779B97F4A7C15ULL) >> 32);
}

static void *cmap_get(struct cmap *m, uint32_t ref)
{
    if (!m->cap)
        return NULL;
    for (uint32_t i = hash32(ref) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (!m->e[i].val)
            return NULL;
        if (m->e[i].ref == ref)
            return m->e[i].val;
    }
}

static int cmap_put(struct cmap *m, uint32_t ref, void *val)
{
    if ((m->n + 1) * 2 > m->cap) {
        uint32_t nc = m->cap ? m->cap * 2 : 64;
        struct centry *ne = calloc(nc, sizeof *ne);
        if (!ne)
            return -ENOMEM;
        for (uint32_t i = 0; i < m->cap; i++) {
            if (!m->e[i].val)
                continue;
            uint32_t j = hash32(m->e[i].ref) & (nc - 1);
            while (ne[j].val)
                j = (j + 1) & (nc - 1);
            ne[j] = m->e[i];
        }
        free(m->e);
        m->e = ne;
        m->cap = nc;
    }
    uint32_t j = hash32(ref) & (m->cap - 1);
    while (m->e[j].val)
        j = (j + 1) & (m->cap - 1);
    m->e[j].ref = ref;
    m->e[j].val = val;
    m->n++;
    return 0;
}

struct mentry {
    struct bf_mprofile p;
    Bigfleet__Internal__MachineProfileBlob *msg;
    struct bf_kv *kvs;
};

struct nentry {
    struct bf_nprofile p;
    Bigfleet__Internal__NeedProfileBlob *msg;
    struct bf_requirement *reqs;
    struct bf_spread *spread;
};

struct bf_blob_cache *bf_blob_cache_new(void)
{
    return calloc(1, sizeof(struct bf_blob_cache));
}

void bf_blob_cache_free(struct bf_blob_cache *c)
{
    if (!c)
        return;
    for (uint32_t i = 0; i < c->m.cap; i++) {
        struct mentry *e = c->m.e[i].val;
        if (!e)
            continue;
        bigfleet__internal__machine_profile_blob__free_unpacked(e->msg, NULL);
        free(e->kvs);
        free(e);
    }
    for (uint32_t i = 0; i < c->np.cap; i++) {
        struct nentry *e = c->np.e[i].val;
        if (!e)
            continue;
        bigfleet__internal__need_profile_blob__free_unpacked(e->msg, NULL);
        free(e->reqs);
        free(e->spread);
        free(e);
    }
    free(c->m.e);
    free(c->np.e);
    free(c);
}

static void kv_vec(const struct bf_shm *s, const struct bf_kv *kv, uint32_t n, bf_vec *out)
{
    bf_vec_zero(out);
    for (uint32_t i = 0; i < n; i++) {
        int d = bf_dim_lookup(s, kv[i].key);
        int64_t milli;
        if (d >= 0 && bf_quantity_parse(kv[i].value, strlen(kv[i].value), &milli) == 0)
            out->v[d] = milli;
    }
}

const struct bf_mprofile *bf_mprofile_get(struct bf_blob_cache *c, const struct bf_shm *s,
                                          uint32_t ref)
{
    static const struct bf_kv none[1];
    static const struct bf_mprofile empty = {
        .instance_type = "", .zone = "", .labels = none, .resources = none, .allocatable = none};
    if (ref == 0)
        return &empty;
    struct mentry *e = cmap_get(&c->m, ref);
    if (e)
        return &e->p;
    uint32_t len;
    const char *b = bf_str(s, ref, &len);
    if (!b)
        return NULL;
    Bigfleet__Internal__MachineProfileBlob *msg =
        bigfleet__internal__machine_profile_blob__unpack(NULL, len, (const uint8_t *)b);
    if (!msg)
        return NULL;
    e = calloc(1, sizeof *e);
    size_t nkv = msg->n_resources + msg->n_labels + msg->n_allocatable;
    if (e)
        e->kvs = calloc(nkv + 1, sizeof *e->kvs);
    if (!e || !e->kvs) {
        if (e)
            free(e->kvs);
        bigfleet__internal__machine_profile_blob__free_unpacked(msg, NULL);
        free(e);
        return NULL;
    }
    e->msg = msg;
    struct bf_kv *k = e->kvs;
    e->p.ref = ref;
    e->p.instance_type = msg->instance_type;
    e->p.zone = msg->zone;
    e->p.capacity_type = msg->capacity_type;
    e->p.resources = k;
    e->p.n_resources = (uint32_t)msg->n_resources;
    for (size_t i = 0; i < msg->n_resources; i++, k++)
        *k = (struct bf_kv){msg->resources[i]->key, msg->resources[i]->value};
    e->p.labels = k;
    e->p.n_labels = (uint32_t)msg->n_labels;
    for (size_t i = 0; i < msg->n_labels; i++, k++)
        *k = (struct bf_kv){msg->labels[i]->key, msg->labels[i]->value};
    e->p.allocatable = k;
    e->p.n_allocatable = (uint32_t)msg->n_allocatable;
    for (size_t i = 0; i < msg->n_allocatable; i++, k++)
        *k = (struct bf_kv){msg->allocatable[i]->key, msg->allocatable[i]->value};
    kv_vec(s, e->p.resources, e->p.n_resources, &e->p.resources_vec);
    kv_vec(s, e->p.allocatable, e->p.n_allocatable, &e->p.allocatable_vec);
    e->p.effective = e->p.n_allocatable ? e->p.allocatable_vec : e->p.resources_vec;
    cmap_put(&c->m, ref, e);
    return &e->p;
}

const struct bf_nprofile *bf_nprofile_get(struct bf_blob_cache *c, const struct bf_shm *s,
                                          uint32_t ref)
{
    struct nentry *e = cmap_get(&c->np, ref);
    if (e)
        return &e->p;
    uint32_t len;
    const char *b = bf_str(s, ref, &len);
    if (!b || ref == 0)
        return NULL;
    Bigfleet__Internal__NeedProfileBlob *msg =
        bigfleet__internal__need_profile_blob__unpack(NULL, len, (const uint8_t *)b);
    if (!msg)
        return NULL;
    e = calloc(1, sizeof *e);
    if (e) {
        e->reqs = calloc(msg->n_requirements + 1, sizeof *e->reqs);
        e->spread = calloc(msg->n_spread + 1, sizeof *e->spread);
    }
    if (!e || !e->reqs || !e->spread) {
        if (e) {
            free(e->reqs);
            free(e->spread);
        }
        free(e);
        bigfleet__internal__need_profile_blob__free_unpacked(msg, NULL);
        return NULL;
    }
    e->msg = msg;
    for (size_t i = 0; i < msg->n_requirements; i++) {
        e->reqs[i].key = msg->requirements[i]->key;
        e->reqs[i].op = (uint8_t)msg->requirements[i]->operator_;
        e->reqs[i].n_values = (uint32_t)msg->requirements[i]->n_values;
        e->reqs[i].values = (const char **)msg->requirements[i]->values;
    }
    for (size_t i = 0; i < msg->n_spread; i++) {
        e->spread[i].topology_key = msg->spread[i]->topology_key;
        e->spread[i].max_skew = msg->spread[i]->max_skew;
        e->spread[i].when = (uint8_t)msg->spread[i]->when_unsatisfiable;
    }
    e->p.ref = ref;
    e->p.p.priority = msg->priority;
    e->p.p.ipb = (uint8_t)msg->interruption_penalty_bucket;
    e->p.p.rpb = (uint8_t)msg->reclamation_penalty_bucket;
    e->p.p.n_reqs = (uint32_t)msg->n_requirements;
    e->p.p.reqs = e->reqs;
    e->p.p.n_spread = (uint32_t)msg->n_spread;
    e->p.p.spread = e->spread;
    e->p.fingerprint = msg->fingerprint;
    uint32_t fr = 0;
    bf_str_find(s, msg->fingerprint, (uint32_t)strlen(msg->fingerprint), &fr);
    e->p.fingerprint_ref = fr;
    cmap_put(&c->np, ref, e);
    return &e->p;
}

/* ------------------------------------------------------------ shard_metadata */

void bf_shard_metadata_encode(const struct bf_assignment *a, struct bf_md_encoded *o)
{
    int n = snprintf(o->prio, sizeof o->prio, "%d", (int)a->priority);
    size_t li = bf_format_float_go(bf_bucket_upper_bound(a->ipb), o->ipd, sizeof o->ipd);
    size_t lr = bf_format_float_go(bf_bucket_upper_bound(a->rpb), o->rpd, sizeof o->rpd);
    o->e[0] = (struct bf_md_entry){BF_MD_PRIORITY, (const uint8_t *)o->prio, (size_t)n};
    o->e[1] = (struct bf_md_entry){BF_MD_INTERRUPTION, (const uint8_t *)o->ipd, li};
    o->e[2] = (struct bf_md_entry){BF_MD_RECLAMATION, (const uint8_t *)o->rpd, lr};
    o->e[3] = (struct bf_md_entry){BF_MD_FINGERPRINT, (const uint8_t *)a->fingerprint,
                                   a->fingerprint_len};
    o->e[4] = (struct bf_md_entry){BF_MD_GROUP, (const uint8_t *)a->group, a->group_len};
}

int bf_shard_metadata_decode(const struct bf_md_entry *e, size_t n, struct bf_assignment *a,
                             uint32_t *found)
{
    int bad = 0;
    *found = 0;
    for (size_t i = 0; i < n; i++) {
        const char *k = e[i].key;
        const char *v = (const char *)e[i].value;
        size_t l = e[i].len;
        if (strcmp(k, BF_MD_PRIORITY) == 0) {
            char tmp[24];
            if (l == 0 || l >= sizeof tmp || memchr(v, 0, l)) {
                bad++;
                continue;
            }
            memcpy(tmp, v, l);
            tmp[l] = 0;
            char *end;
            errno = 0;
            long long x = strtoll(tmp, &end, 10);
            if (errno || *end || x < INT32_MIN || x > INT32_MAX) {
                bad++;
                continue;
            }
            a->priority = (int32_t)x;
            *found |= BF_MD_HAS_PRIORITY;
        } else if (strcmp(k, BF_MD_INTERRUPTION) == 0 || strcmp(k, BF_MD_RECLAMATION) == 0) {
            double d;
            if (bf_parse_float(v, l, &d) != 0 || isnan(d)) {
                bad++;
                continue;
            }
            /* Shards write only a bucket's upper bound (wire.md §10); another
             * value breaks store-and-echo: applied as the bucket covering it,
             * and counted (docs/fidelity.md item 4) */
            uint8_t b = bf_bucket_for_dollars(d);
            if (d != bf_bucket_upper_bound(b))
                bad++;
            if (k[strlen("bigfleet.lucy.sh/assigned-")] == 'i') {
                a->ipb = b;
                *found |= BF_MD_HAS_IPD;
            } else {
                a->rpb = b;
                *found |= BF_MD_HAS_RPD;
            }
        } else if (strcmp(k, BF_MD_FINGERPRINT) == 0) {
            a->fingerprint = v;
            a->fingerprint_len = (uint32_t)l;
            *found |= BF_MD_HAS_FINGERPRINT;
        } else if (strcmp(k, BF_MD_GROUP) == 0) {
            a->group = v;
            a->group_len = (uint32_t)l;
            *found |= BF_MD_HAS_GROUP;
        }
    }
    return bad;
}
