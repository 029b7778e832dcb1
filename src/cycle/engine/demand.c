/*
 * demand.c — per-cluster demand (full-replacement rollups), compiled profiles
 * and MatchProfile, the per-cluster flags, and the NeedsTable snapshot order.
 *
 * Design notes. A rollup is copied on ingest: each Need's profile is
 * deep-copied, canonicalised (bf_profile_canonicalize) and fingerprinted
 * (bf_profile_fingerprint); Needs sharing a fingerprint share one compiled
 * profile (requirement keys and values interned, pinned instance types
 * resolved, a per-class match cache). MatchProfile (engine.md §1.10) is a
 * per-class predicate because every attribute it reads is a class attribute.
 * The snapshot order (priority desc, arrival asc, cluster asc, rollup order)
 * is rebuilt only when some cluster's demand actually changed.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cycle/engine/engine_internal.h"

/* ------------------------------------------------------------------ profile copies */

static size_t profile_size(const struct bf_need_profile *p)
{
    size_t sz = (size_t)p->n_reqs * sizeof(struct bf_requirement) +
                (size_t)p->n_spread * sizeof(struct bf_spread);
    for (uint32_t i = 0; i < p->n_reqs; i++) {
        sz += strlen(p->reqs[i].key) + 1;
        sz += (size_t)p->reqs[i].n_values * sizeof(char *);
        for (uint32_t j = 0; j < p->reqs[i].n_values; j++)
            sz += strlen(p->reqs[i].values[j]) + 1;
    }
    for (uint32_t i = 0; i < p->n_spread; i++)
        sz += strlen(p->spread[i].topology_key) + 1;
    return sz + 16;
}

/* Deep copy into one block (pointer arrays first, then the strings, so
 * every array stays aligned); skip_same drops Same requirements. */
static void *profile_copy(const struct bf_need_profile *src, struct bf_need_profile *dst,
                          bool skip_same)
{
    size_t sz = profile_size(src);
    char *mem = malloc(sz);
    if (!mem)
        return NULL;
    size_t nvals = 0;
    for (uint32_t i = 0; i < src->n_reqs; i++)
        nvals += src->reqs[i].n_values;
    *dst = *src;
    dst->reqs = (struct bf_requirement *)(void *)mem;
    dst->spread = (struct bf_spread *)(void *)(mem + (size_t)src->n_reqs * sizeof *dst->reqs);
    const char **vp =
        (const char **)(void *)((char *)dst->spread + (size_t)src->n_spread * sizeof *dst->spread);
    char *p = (char *)(vp + nvals);
    uint32_t nr = 0;
    for (uint32_t i = 0; i < src->n_reqs; i++) {
        const struct bf_requirement *r = &src->reqs[i];
        if (skip_same && r->op == BF_OP_SAME)
            continue;
        struct bf_requirement *d = &dst->reqs[nr++];
        d->op = r->op;
        d->n_values = r->n_values;
        d->values = vp;
        vp += r->n_values;
        size_t kl = strlen(r->key) + 1;
        memcpy(p, r->key, kl);
        d->key = p;
        p += kl;
        for (uint32_t j = 0; j < r->n_values; j++) {
            size_t vl = strlen(r->values[j]) + 1;
            memcpy(p, r->values[j], vl);
            d->values[j] = p;
            p += vl;
        }
    }
    dst->n_reqs = nr;
    for (uint32_t i = 0; i < src->n_spread; i++) {
        dst->spread[i] = src->spread[i];
        size_t kl = strlen(src->spread[i].topology_key) + 1;
        memcpy(p, src->spread[i].topology_key, kl);
        dst->spread[i].topology_key = p;
        p += kl;
    }
    return mem;
}

static bool profile_valid(const struct bf_need_profile *p)
{
    if ((p->n_reqs && !p->reqs) || (p->n_spread && !p->spread))
        return false;
    for (uint32_t i = 0; i < p->n_reqs; i++) {
        if (!p->reqs[i].key || (p->reqs[i].n_values && !p->reqs[i].values))
            return false;
        for (uint32_t j = 0; j < p->reqs[i].n_values; j++)
            if (!p->reqs[i].values[j])
                return false;
    }
    for (uint32_t i = 0; i < p->n_spread; i++)
        if (!p->spread[i].topology_key)
            return false;
    return true;
}

/* ------------------------------------------------------------------ compiled profiles */

static uint8_t key_kind(const char *k)
{
    if (strcmp(k, BF_LABEL_INSTANCE_TYPE) == 0)
        return RK_ITYPE;
    if (strcmp(k, BF_LABEL_ZONE) == 0)
        return RK_ZONE;
    return RK_LABEL;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static void cprof_destroy(struct bf_engine *e, struct cprof *cp)
{
    for (uint32_t i = 0; i < cp->nreq; i++) {
        bfe_intern_release(&e->in, cp->req[i].key);
        for (uint32_t j = 0; j < cp->req[i].nv; j++)
            bfe_intern_release(&e->in, cp->req[i].vals[j]);
        free(cp->req[i].vals);
    }
    free(cp->req);
    for (uint32_t i = 0; i < cp->npin; i++)
        bfe_intern_release(&e->in, cp->pin[i]);
    free(cp->pin);
    bfe_intern_release(&e->in, cp->same_key);
    bfe_intern_release(&e->in, cp->spread_key);
    free(cp->mcache);
    free(cp->prof_mem);
    if (cp->fp != NONE32) {
        bfe_u64map_del(&e->cprof_map, cp->fp, NULL);
        bfe_intern_release(&e->in, cp->fp);
    }
    if (cp->idx != NONE32) {
        e->cprofs[cp->idx] = NULL;
        if (!GROW(e->cprof_free, e->cap_cprof_free, e->n_cprof_free + 1))
            e->cprof_free[e->n_cprof_free++] = cp->idx;
    }
    struct cprof *st = cp->stripped;
    free(cp);
    if (st)
        bfe_cprof_release(e, st);
}

void bfe_cprof_release(struct bf_engine *e, struct cprof *cp)
{
    if (cp && --cp->refs == 0)
        cprof_destroy(e, cp);
}

static int compile(struct bf_engine *e, struct cprof *cp)
{
    const struct bf_need_profile *p = &cp->prof;
    cp->prio = p->priority;
    cp->ipb = p->ipb;
    cp->rpb = p->rpb;
    cp->ip_dollars = bf_bucket_upper_bound(p->ipb);
    cp->same_key = 0;
    cp->spread_key = 0;
    if (p->n_reqs) {
        cp->req = calloc(p->n_reqs, sizeof *cp->req);
        if (!cp->req)
            return -ENOMEM;
    }
    for (uint32_t i = 0; i < p->n_reqs; i++) {
        const struct bf_requirement *r = &p->reqs[i];
        struct creq *c = &cp->req[i];
        c->op = r->op;
        c->kind = key_kind(r->key);
        c->key = bfe_intern(&e->in, r->key, strlen(r->key));
        if (c->key == NONE32) {
            c->key = 0;
            return -ENOMEM;
        }
        cp->nreq = i + 1;
        if (r->n_values) {
            c->vals = malloc((size_t)r->n_values * sizeof(uint32_t));
            if (!c->vals)
                return -ENOMEM;
        }
        for (uint32_t j = 0; j < r->n_values; j++) {
            uint32_t v = bfe_intern(&e->in, r->values[j], strlen(r->values[j]));
            if (v == NONE32)
                return -ENOMEM;
            c->vals[c->nv++] = v;
        }
        bfe_qsort(c->vals, c->nv, sizeof(uint32_t), cmp_u32);
        if (r->op == BF_OP_SAME && !cp->has_same) {
            cp->has_same = true;
            cp->same_kind = c->kind;
            cp->same_key = c->key;
            bfe_intern_retain(&e->in, c->key);
        }
    }
    int si = bf_profile_strict_spread_index(p);
    if (si >= 0) {
        cp->strict_spread = true;
        const char *k = p->spread[si].topology_key;
        cp->spread_kind = key_kind(k);
        cp->spread_key = bfe_intern(&e->in, k, strlen(k));
        if (cp->spread_key == NONE32) {
            cp->spread_key = 0;
            return -ENOMEM;
        }
        cp->skew = p->spread[si].max_skew > 1 ? p->spread[si].max_skew : 1;
    }
    int pi = bf_profile_pinned_types_index(p);
    if (pi >= 0) {
        const struct bf_requirement *r = &p->reqs[pi];
        cp->pinned = true;
        cp->pin = malloc((size_t)r->n_values * sizeof(uint32_t));
        if (!cp->pin)
            return -ENOMEM;
        /* values are sorted (canonical); de-duplicate adjacent repeats */
        for (uint32_t j = 0; j < r->n_values; j++) {
            if (j && strcmp(r->values[j], r->values[j - 1]) == 0)
                continue;
            uint32_t v = bfe_intern(&e->in, r->values[j], strlen(r->values[j]));
            if (v == NONE32)
                return -ENOMEM;
            cp->pin[cp->npin++] = v;
        }
    }
    return 0;
}

/* The compiled profile whose fingerprint is fps[0..fl), with one more
 * reference, or NULL when the engine holds none. */
static struct cprof *cprof_find(struct bf_engine *e, const char *fps, size_t fl)
{
    uint32_t fid = bfe_intern_find(&e->in, fps, fl);
    if (fid == NONE32)
        return NULL;
    uint32_t idx = bfe_u64map_get(&e->cprof_map, fid, NONE32);
    if (idx == NONE32)
        return NULL;
    struct cprof *cp = e->cprofs[idx];
    cp->refs++;
    return cp;
}

/* Finds or creates the compiled profile for p (p need not be canonical; it
 * is copied). known_fp: p's fingerprint from the caller (struct
 * bf_engine_need), or NULL to compute it from the canonical copy. Returns it
 * with one more reference, or NULL on ENOMEM. */
static struct cprof *cprof_get_ex(struct bf_engine *e, const struct bf_need_profile *p,
                                  bool skip_same, const char *known_fp)
{
    if (known_fp && !known_fp[0])
        known_fp = NULL; /* no fingerprint: compute it */
    if (known_fp) {
        struct cprof *cp = cprof_find(e, known_fp, strlen(known_fp));
        if (cp)
            return cp;
    }
    struct bf_need_profile copy;
    void *mem = profile_copy(p, &copy, skip_same);
    if (!mem)
        return NULL;
    bf_profile_canonicalize(&copy);
    char buf[512];
    char *owned = NULL; /* a fingerprint longer than buf */
    const char *fps = known_fp;
    size_t fl = known_fp ? strlen(known_fp) : 0;
    if (!known_fp) {
        fl = bf_profile_fingerprint(&copy, buf, sizeof buf);
        fps = buf;
        if (fl >= sizeof buf) {
            if (!(owned = malloc(fl + 1))) {
                free(mem);
                return NULL;
            }
            bf_profile_fingerprint(&copy, owned, fl + 1);
            fps = owned;
        }
        struct cprof *cp = cprof_find(e, fps, fl);
        if (cp) {
            free(mem);
            free(owned);
            return cp;
        }
    }
    struct cprof *cp = calloc(1, sizeof *cp);
    if (!cp) {
        free(mem);
        free(owned);
        return NULL;
    }
    cp->refs = 1;
    cp->serial = ++e->cprof_serial;
    cp->idx = NONE32;
    cp->prof = copy;
    cp->prof_mem = mem;
    cp->fp = bfe_intern(&e->in, fps, fl);
    cp->fp_computed = !known_fp;
    free(owned);
    if (cp->fp == NONE32 || compile(e, cp))
        goto fail;
    uint32_t idx;
    if (e->n_cprof_free) {
        idx = e->cprof_free[--e->n_cprof_free];
    } else {
        if (GROW(e->cprofs, e->cap_cprofs, e->n_cprofs + 1))
            goto fail;
        idx = e->n_cprofs++;
    }
    if (bfe_u64map_put(&e->cprof_map, cp->fp, idx)) {
        e->cprof_free[e->n_cprof_free++] = idx; /* capacity exists: was popped or new */
        goto fail;
    }
    e->cprofs[idx] = cp;
    cp->idx = idx;
    return cp;
fail:
    if (cp->fp == NONE32)
        cp->fp = 0; /* destroy then releases nothing and deletes a key not in the map */
    cprof_destroy(e, cp);
    return NULL;
}

static bool str_is(const char *a, const char *b)
{
    return a == b || strcmp(a, b) == 0;
}

/* a and b are the same profile, field by field and in the same order */
static bool profile_same(const struct bf_need_profile *a, const struct bf_need_profile *b)
{
    if (a->priority != b->priority || a->ipb != b->ipb || a->rpb != b->rpb ||
        a->n_reqs != b->n_reqs || a->n_spread != b->n_spread)
        return false;
    for (uint32_t i = 0; i < a->n_reqs; i++) {
        const struct bf_requirement *x = &a->reqs[i], *y = &b->reqs[i];
        if (x->op != y->op || x->n_values != y->n_values || !str_is(x->key, y->key))
            return false;
        for (uint32_t j = 0; j < x->n_values; j++)
            if (!str_is(x->values[j], y->values[j]))
                return false;
    }
    for (uint32_t i = 0; i < a->n_spread; i++) {
        const struct bf_spread *x = &a->spread[i], *y = &b->spread[i];
        if (x->max_skew != y->max_skew || x->when != y->when ||
            !str_is(x->topology_key, y->topology_key))
            return false;
    }
    return true;
}

/*
 * The compiled profile a rollup's Need n gets when it is the one held cp
 * (a Need of the cluster's previous rollup) has, with one more reference;
 * NULL when that is not shown cheaply (the caller then looks it up). Exactly
 * what cprof_get_ex returns, without copying, canonicalising, fingerprinting
 * or hashing: a caller's fingerprint equal to cp's is found as cp (the map
 * holds one profile per fingerprint); without one, a profile equal to cp's
 * canonical copy canonicalises to it (sorting a sorted array is the identity)
 * and so has the fingerprint cp computed from it.
 */
static struct cprof *cprof_held(struct bf_engine *e, struct cprof *cp,
                                const struct bf_engine_need *n)
{
    bool by_fp = n->fingerprint && n->fingerprint[0];
    if (by_fp) {
        size_t fl = bfe_strlen(&e->in, cp->fp);
        if (strncmp(n->fingerprint, bfe_str(&e->in, cp->fp), fl) != 0 || n->fingerprint[fl])
            return NULL;
    } else if (!cp->fp_computed || !profile_same(&n->profile, &cp->prof)) {
        return NULL;
    }
    e->held_reused[by_fp ? 0 : 1]++;
    cp->refs++;
    return cp;
}

/* the group string id a Need of n's group gets when it is id (retained), or
 * NONE32 when it is another string */
static uint32_t group_held(struct bf_engine *e, uint32_t id, const struct bf_engine_need *n)
{
    if (!n->group_len)
        return id == 0 ? 0 : NONE32;
    if (id == 0 || bfe_strlen(&e->in, id) != n->group_len ||
        memcmp(bfe_str(&e->in, id), n->group, n->group_len) != 0)
        return NONE32;
    bfe_intern_retain(&e->in, id);
    return id;
}

struct cprof *bfe_cprof_get(struct bf_engine *e, const struct bf_need_profile *p)
{
    return cprof_get_ex(e, p, false, NULL);
}

struct cprof *bfe_cprof_stripped(struct bf_engine *e, struct cprof *cp)
{
    if (!cp->stripped)
        cp->stripped = cprof_get_ex(e, &cp->prof, true, NULL);
    return cp->stripped;
}

/* ------------------------------------------------------------------ MatchProfile */

static bool has_val(const struct creq *r, uint32_t v)
{
    uint32_t lo = 0, hi = r->nv;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (r->vals[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < r->nv && r->vals[lo] == v;
}

static bool match_compute(const struct bf_engine *e, const struct cprof *cp, const struct mclass *c)
{
    for (uint32_t i = 0; i < cp->nreq; i++) {
        const struct creq *r = &cp->req[i];
        uint32_t v = bfe_class_attr(e, c, r->kind, r->key);
        bool ok;
        switch (r->op) {
        case BF_OP_IN:
            ok = v != NONE32 && has_val(r, v);
            break;
        case BF_OP_NOT_IN:
            ok = v == NONE32 || !has_val(r, v);
            break;
        case BF_OP_EXISTS:
            ok = v != NONE32;
            break;
        case BF_OP_DOES_NOT_EXIST:
            ok = v == NONE32;
            break;
        case BF_OP_SAME:
            ok = v != NONE32 && (r->nv == 0 || has_val(r, v));
            break;
        default:
            ok = false; /* Unspecified and unknown operators never match */
            break;
        }
        if (!ok)
            return false;
    }
    return true;
}

bool bfe_match_class(struct bf_engine *e, struct cprof *cp, uint32_t cls)
{
    const struct mclass *c = &e->cls[cls];
    if (cls < cp->mcap) {
        uint32_t m = cp->mcache[cls];
        if (m && (m >> 2) == c->gen)
            return (m & 3) == 3;
    } else {
        uint32_t ncap = cp->mcap;
        if (bfe_grow((void **)&cp->mcache, &ncap, e->n_cls > cls ? e->n_cls : cls + 1,
                     sizeof(uint32_t)) == 0) {
            memset(cp->mcache + cp->mcap, 0, (ncap - cp->mcap) * sizeof(uint32_t));
            cp->mcap = ncap;
        }
    }
    bool ok = match_compute(e, cp, c);
    if (cls < cp->mcap)
        cp->mcache[cls] = (c->gen << 2) | (ok ? 3u : 1u);
    return ok;
}

/* ------------------------------------------------------------------ rollups */

/* The fold groups are normalize.c's cache over a cluster's needs: cleared
 * here, below it, where the needs change (and by the driver on free). */
void bfe_fold_groups_clear(struct cluster *cl)
{
    for (uint32_t i = 0; i < cl->nfg; i++)
        free(cl->fg[i].aggkey);
    cl->nfg = 0;
    cl->fg_valid = false;
}

static void needs_unref(struct bf_engine *e, struct need_in *v, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        bfe_cprof_release(e, v[i].cp);
        bfe_intern_release(&e->in, v[i].group);
    }
}

static void needs_release(struct bf_engine *e, struct need_in *v, uint32_t n)
{
    needs_unref(e, v, n);
    free(v);
}

/* An array for n Needs (contents undefined) and its length in *cap: the
 * spare when it fits without holding more than twice what is asked (a
 * steady republish alternates between two arrays whose pages stay mapped),
 * else a new one. NULL for n == 0 or on ENOMEM. */
static struct need_in *needs_buf_take(struct bf_engine *e, uint32_t n, uint32_t *cap)
{
    *cap = 0;
    if (!n)
        return NULL;
    struct need_in *v;
    if (e->needs_spare && e->cap_needs_spare >= n && e->cap_needs_spare / 2 <= n) {
        v = e->needs_spare;
        *cap = e->cap_needs_spare;
        e->needs_spare = NULL;
        e->cap_needs_spare = 0;
        return v;
    }
    if ((v = malloc((size_t)n * sizeof *v)))
        *cap = n;
    return v;
}

/* Gives back an array of cap Needs no longer referenced: kept as the spare
 * when it is the largest seen, else freed. */
static void needs_buf_put(struct bf_engine *e, struct need_in *v, uint32_t cap)
{
    if (!v)
        return;
    if (cap <= e->cap_needs_spare) {
        free(v);
        return;
    }
    free(e->needs_spare);
    e->needs_spare = v;
    e->cap_needs_spare = cap;
}

static uint32_t count_same(const struct need_in *v, uint32_t n)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++)
        k += v[i].cp->has_same;
    return k;
}

int bf_engine_set_needs(struct bf_engine *e, const char *cluster, uint64_t generation,
                        const struct bf_engine_need *needs, size_t n)
{
    if (!e || !cluster || !cluster[0] || (n && !needs) || n > UINT32_MAX / 2)
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!profile_valid(&needs[i].profile) || (needs[i].group_len && !needs[i].group))
            return -EINVAL;
    uint32_t name = bfe_intern(&e->in, cluster, strlen(cluster));
    if (name == NONE32)
        return -ENOMEM;
    uint32_t ci = bfe_cluster_get(e, name, true);
    bfe_intern_release(&e->in, name);
    if (ci == NONE32)
        return -ENOMEM;
    struct cluster *c = &e->clusters[ci];
    if (c->has_gen && c->generation == generation)
        return 0;
    uint32_t vcap;
    struct need_in *v = needs_buf_take(e, (uint32_t)n, &vcap);
    if (n && !v)
        return -ENOMEM;
    bool fp_ok = !(e->cfg.flags & BF_ENGINE_F_REFERENCE);
    /* A rollup mostly repeats the previous one: each Need is first compared
     * with the held Need at its position, then with the one after the last
     * match (a Need added or removed shifts the rest); the reference engine
     * always looks up. */
    const struct need_in *held = fp_ok ? e->clusters[ci].needs : NULL;
    uint32_t nheld = fp_ok ? e->clusters[ci].n_needs : 0, next = 0;
    for (size_t i = 0; i < n; i++) {
        const struct need_in *o = NULL;
        v[i] = (struct need_in){0}; /* every memo unset */
        uint32_t at[2] = {(uint32_t)i, next};
        for (int t = 0; t < 2 && !v[i].cp; t++)
            if (at[t] < nheld && (t == 0 || at[1] != at[0]) &&
                (v[i].cp = cprof_held(e, held[at[t]].cp, &needs[i]))) {
                o = &held[at[t]];
                next = at[t] + 1;
            }
        if (!v[i].cp)
            v[i].cp =
                cprof_get_ex(e, &needs[i].profile, false, fp_ok ? needs[i].fingerprint : NULL);
        v[i].group = !v[i].cp ? NONE32 : o ? group_held(e, o->group, &needs[i]) : NONE32;
        if (v[i].cp && v[i].group == NONE32)
            v[i].group = bfe_intern(&e->in, needs[i].group, needs[i].group_len);
        if (!v[i].cp || v[i].group == NONE32) {
            if (v[i].group == NONE32)
                v[i].group = 0;
            needs_unref(e, v, (uint32_t)i + 1);
            needs_buf_put(e, v, vcap);
            return -ENOMEM;
        }
        v[i].agg = needs[i].aggregate;
        v[i].minu = needs[i].min_unit;
        v[i].arrival = needs[i].arrival_ns;
    }
    c = &e->clusters[ci];
    bool same = c->n_needs == n;
    for (size_t i = 0; same && i < n; i++) {
        const struct need_in *a = &c->needs[i], *b = &v[i];
        same = a->cp == b->cp && a->group == b->group && a->arrival == b->arrival &&
               bf_vec_eq(&a->agg, &b->agg) && bf_vec_eq(&a->minu, &b->minu);
    }
    if (same) {
        c->has_gen = true;
        c->generation = generation;
        needs_unref(e, v, (uint32_t)n);
        needs_buf_put(e, v, vcap);
        return 0;
    }
    /* the fold flags, all clear (kept allocated across rollups) */
    if (n > c->cap_fold) {
        uint8_t *fold = malloc(n);
        if (!fold) {
            needs_unref(e, v, (uint32_t)n);
            needs_buf_put(e, v, vcap);
            return -ENOMEM;
        }
        free(c->fold);
        c->fold = fold;
        c->cap_fold = (uint32_t)n;
    }
    if (n)
        memset(c->fold, 0, n);
    c->has_gen = true;
    c->generation = generation;
    e->n_same_total -= c->n_same;
    bfe_fold_groups_clear(c); /* its stripped profiles may go with the old needs */
    needs_unref(e, c->needs, c->n_needs);
    needs_buf_put(e, c->needs, c->cap_needs);
    c->needs = v;
    c->cap_needs = vcap;
    c->n_needs = (uint32_t)n;
    c->n_same = count_same(v, (uint32_t)n);
    e->n_same_total += c->n_same;
    c->snap_changed = true;
    c->acl_valid = false;
    c->dver++; /* its normalized demand: the pre-pass memo no longer applies */
    e->snap_dirty = true;
    return 0;
}

int bf_engine_set_needs_arrival(struct bf_engine *e, const char *cluster, uint64_t generation,
                                int64_t arrival_ns)
{
    if (!e || !cluster || !cluster[0])
        return -EINVAL;
    uint32_t name = bfe_intern_find(&e->in, cluster, strlen(cluster));
    uint32_t ci = name == NONE32 ? NONE32 : bfe_cluster_get(e, name, false);
    if (ci == NONE32 || !e->clusters[ci].has_gen)
        return -ENOENT;
    struct cluster *c = &e->clusters[ci];
    if (c->generation == generation)
        return 0;
    c->generation = generation;
    /* what bf_engine_set_needs does with the same rows at this arrival:
     * identical content keeps every memo, anything else replaces the
     * demand (here in place: the profiles, groups and vectors are the
     * held ones) and invalidates what the replacement invalidates */
    bool same = true;
    for (uint32_t i = 0; same && i < c->n_needs; i++)
        same = c->needs[i].arrival == arrival_ns;
    if (same)
        return 0;
    for (uint32_t i = 0; i < c->n_needs; i++) {
        /* as bf_engine_set_needs builds a row: its inputs, and every memo
         * (NormalizeDemand's fold decision) zeroed */
        const struct need_in *o = &c->needs[i];
        c->needs[i] = (struct need_in){
            .cp = o->cp, .agg = o->agg, .minu = o->minu, .arrival = arrival_ns, .group = o->group};
    }
    if (c->n_needs)
        memset(c->fold, 0, c->n_needs);
    bfe_fold_groups_clear(c);
    c->snap_changed = true;
    c->acl_valid = false;
    c->dver++;
    e->snap_dirty = true;
    return 0;
}

int bf_engine_set_cluster_flags(struct bf_engine *e, const char *cluster, bool first_rollup,
                                bool session_live)
{
    if (!e || !cluster || !cluster[0])
        return -EINVAL;
    uint32_t name = bfe_intern(&e->in, cluster, strlen(cluster));
    if (name == NONE32)
        return -ENOMEM;
    uint32_t ci = bfe_cluster_get(e, name, true);
    bfe_intern_release(&e->in, name);
    if (ci == NONE32)
        return -ENOMEM;
    e->clusters[ci].first_rollup = first_rollup;
    e->clusters[ci].session_live = session_live;
    return 0;
}

/* ------------------------------------------------------------------ ordering */

static struct bf_engine *sort_ctx;

static int cluster_name_cmp(const void *a, const void *b)
{
    const struct bf_engine *e = sort_ctx;
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return bfe_strcmp_id(&e->in, e->clusters[x].name, e->clusters[y].name);
}

void bfe_cluster_sort(struct bf_engine *e)
{
    if (!e->cluster_order_dirty)
        return;
    for (uint32_t i = 0; i < e->n_clusters; i++)
        e->cluster_order[i] = i;
    sort_ctx = e;
    bfe_qsort(e->cluster_order, e->n_clusters, sizeof(uint32_t), cluster_name_cmp);
    sort_ctx = NULL;
    for (uint32_t i = 0; i < e->n_clusters; i++)
        e->clusters[e->cluster_order[i]].rank = i;
    e->cluster_order_dirty = false;
}

static int snapkey_cmp(const void *a, const void *b)
{
    const struct snapkey *x = a, *y = b;
    if (x->prio != y->prio)
        return x->prio > y->prio ? -1 : 1;
    if (x->arrival != y->arrival)
        return x->arrival < y->arrival ? -1 : 1;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return x->ref < y->ref ? -1 : x->ref > y->ref;
}

static void snapkey_of(const struct bf_engine *e, uint32_t c, uint32_t i, struct snapkey *k)
{
    const struct cluster *cl = &e->clusters[c];
    k->prio = cl->needs[i].cp->prio;
    k->arrival = cl->needs[i].arrival;
    k->rank = cl->rank;
    k->ref = ((uint64_t)c << 32) | i;
}

/*
 * The NeedsTable snapshot order (engine.md §1.7): priority desc, arrival asc,
 * cluster id asc, rollup order, of the Needs NormalizeDemand passes through
 * (the folded ones, fold[i], are not read in this order: a subset of a
 * sorted sequence keeps its order). Kept sorted across cycles: when only
 * some clusters' demand or fold decisions changed, their old rows are
 * dropped and their new rows (sorted) are merged in, O(P + m log m) for P
 * pass-through rows. Cluster ranks moving (a new cluster) forces a full sort.
 */
int bfe_demand_snapshot(struct bf_engine *e)
{
    bool ranks_moved = e->cluster_order_dirty;
    bfe_cluster_sort(e);
    if (ranks_moved)
        e->snap_full = true;
    if (e->snap_dirty && (e->cfg.flags & BF_ENGINE_F_REFERENCE))
        e->snap_full = true; /* reference mode: always the plain full sort */
    if (!e->snap_dirty && !e->snap_full)
        return 0;
    uint32_t total = 0, fresh = 0;
    for (uint32_t c = 0; c < e->n_clusters; c++) {
        struct cluster *cl = &e->clusters[c];
        if (e->snap_full || cl->snap_changed) {
            uint32_t k = 0;
            for (uint32_t i = 0; i < cl->n_needs; i++)
                k += !cl->fold[i];
            cl->n_pass_through = k;
            fresh += k;
        }
        total += cl->n_pass_through;
    }
    if (GROW(e->snap, e->cap_snap, total ? total : 1) ||
        GROW(e->snapk, e->cap_snapk, total ? total : 1) ||
        GROW(e->snapk2, e->cap_snapk2, total ? total : 1))
        return -ENOMEM;
    /* the fresh rows, sorted, at the tail of snapk2 */
    struct snapkey *nk = e->snapk2 + (total - fresh);
    uint32_t nf = 0;
    for (uint32_t c = 0; c < e->n_clusters; c++) {
        const struct cluster *cl = &e->clusters[c];
        if (!(e->snap_full || cl->snap_changed))
            continue;
        for (uint32_t i = 0; i < cl->n_needs; i++)
            if (!cl->fold[i])
                snapkey_of(e, c, i, &nk[nf++]);
    }
    bfe_qsort(nk, nf, sizeof *nk, snapkey_cmp);
    /* merge with the kept rows of unchanged clusters into snapk2's head;
     * the write index never overtakes the fresh tail's read index */
    uint32_t w = 0, a = 0, b = 0;
    uint32_t nold = e->snap_full ? 0 : e->n_snap;
    /* the changed flags, contiguous (one byte per cluster, not a cluster
     * struct per kept row) */
    uint8_t *chg = ANEW(&e->ar, uint8_t, e->n_clusters ? e->n_clusters : 1);
    if (!chg)
        return -ENOMEM;
    for (uint32_t c = 0; c < e->n_clusters; c++)
        chg[c] = e->clusters[c].snap_changed;
    while (a < nold || b < nf) {
        const struct snapkey *x = NULL;
        while (a < nold && chg[e->snapk[a].ref >> 32])
            a++;
        if (a < nold)
            x = &e->snapk[a];
        if (x && (b >= nf || snapkey_cmp(x, &nk[b]) < 0)) {
            e->snapk2[w++] = *x;
            a++;
        } else if (b < nf) {
            e->snapk2[w++] = nk[b++];
        } else {
            break;
        }
    }
    struct snapkey *t = e->snapk;
    uint32_t tc = e->cap_snapk;
    e->snapk = e->snapk2;
    e->cap_snapk = e->cap_snapk2;
    e->snapk2 = t;
    e->cap_snapk2 = tc;
    for (uint32_t i = 0; i < w; i++)
        e->snap[i] = e->snapk[i].ref;
    e->n_snap = w;
    for (uint32_t c = 0; c < e->n_clusters; c++)
        e->clusters[c].snap_changed = false;
    e->snap_dirty = false;
    e->snap_full = false;
    return 0;
}

void bfe_demand_free(struct bf_engine *e)
{
    for (uint32_t c = 0; c < e->n_clusters; c++) {
        needs_release(e, e->clusters[c].needs, e->clusters[c].n_needs);
        e->clusters[c].needs = NULL;
        e->clusters[c].n_needs = 0;
        e->clusters[c].cap_needs = 0;
    }
    free(e->needs_spare);
    e->needs_spare = NULL;
    e->cap_needs_spare = 0;
    /* ledgers may still hold references: free every profile outright (the
     * interner is freed wholesale after this) */
    for (uint32_t i = 0; i < e->n_cprofs; i++) {
        struct cprof *cp = e->cprofs[i];
        if (!cp)
            continue;
        for (uint32_t r = 0; r < cp->nreq; r++)
            free(cp->req[r].vals);
        free(cp->req);
        free(cp->pin);
        free(cp->mcache);
        free(cp->prof_mem);
        free(cp);
        e->cprofs[i] = NULL;
    }
    free(e->cprofs);
    free(e->cprof_free);
    bfe_u64map_free(&e->cprof_map);
    free(e->snap);
    free(e->snapk);
    free(e->snapk2);
}
