/*
 * observe.c — cross-cycle bookkeeping and observation: acquisition parking
 * (seeds/000 §2.2, engine.md §7), the shortfall ledger (seeds/000 §6), the
 * per-Need verdicts of ADR-0061 with its amendment (seeds/003), and the
 * AvailableCapacity hints with coalescing and rate limiting (seeds/000 §7).
 *
 * Design notes. Parking feeds decisions (it is stamped before Phase 1);
 * everything else here is observation only and runs after the phases, so the
 * verdict instrumentation cannot change an action (a golden test proves it).
 * Ledger entries hold references on the strings and profiles they name, so an
 * entry stays meaningful after its Need disappears. Keys that are string
 * triples are hashed; equal hashes chain through a linear re-probe of the
 * 64-bit key and the map is rebuilt after every sweep.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cycle/engine/engine_internal.h"

/* ------------------------------------------------------------------ parking */

static uint64_t park_hash(uint32_t cluster, uint32_t group, uint32_t fp)
{
    return bfe_mix64(bfe_mix64(((uint64_t)cluster << 32) | group) ^ (uint64_t)fp * 0x9e37u);
}

static uint32_t park_find(const struct bf_engine *e, uint32_t cluster, uint32_t group, uint32_t fp)
{
    uint64_t h = park_hash(cluster, group, fp);
    for (;; h++) {
        uint32_t i = bfe_u64map_get(&e->park_map, h, NONE32);
        if (i == NONE32)
            return NONE32;
        const struct park_entry *p = &e->park[i];
        if (p->used && p->cluster == cluster && p->group == group && p->fp == fp)
            return i;
    }
}

static int park_insert(struct bf_engine *e, uint32_t idx)
{
    const struct park_entry *p = &e->park[idx];
    uint64_t h = park_hash(p->cluster, p->group, p->fp);
    while (bfe_u64map_get(&e->park_map, h, NONE32) != NONE32)
        h++;
    return bfe_u64map_put(&e->park_map, h, idx);
}

void bfe_park_stamp(struct bf_engine *e)
{
    for (uint32_t i = 0; i < e->n_d; i++) {
        struct dneed *d = &e->d[i];
        d->parked = false;
        d->park_age = 0;
        if (!d->cp->has_same || !e->n_park)
            continue;
        uint32_t pi = park_find(e, e->clusters[d->cluster].name, d->group, d->cp->fp);
        if (pi == NONE32)
            continue;
        uint32_t age = e->park[pi].age;
        d->park_age = age;
        d->parked = age >= e->cfg.park_after_cycles &&
                    (e->cfg.reprobe_every_cycles == 0 || age % e->cfg.reprobe_every_cycles != 0);
    }
}

int bfe_park_record(struct bf_engine *e)
{
    for (uint32_t i = 0; i < e->n_d; i++) {
        struct dneed *d = &e->d[i];
        if (!d->cp->has_same || bf_vec_is_zero(&d->rem))
            continue;
        uint32_t cl = e->clusters[d->cluster].name;
        uint32_t pi = park_find(e, cl, d->group, d->cp->fp);
        if (d->nboot + d->nprov > 0 || d->same_sat) {
            if (pi != NONE32)
                e->park[pi].seen = 0; /* progress: forget the age */
            d->park_age = 0;          /* the verdict reports the forgotten age */
            continue;
        }
        if (pi == NONE32) {
            TRY(GROW(e->park, e->cap_park, e->n_park + 1));
            pi = e->n_park++;
            e->park[pi] = (struct park_entry){cl, d->group, d->cp->fp, 0, 0, true};
            bfe_intern_retain(&e->in, cl);
            bfe_intern_retain(&e->in, d->group);
            bfe_intern_retain(&e->in, d->cp->fp);
            TRY(park_insert(e, pi));
        }
        if (e->park[pi].seen != e->stamp) {
            e->park[pi].age++;
            e->park[pi].seen = e->stamp;
        }
        /* the verdict's parked_age_cycles is the age after this cycle's
         * update, as Go's recordNeedViews reads it (docs/fidelity.md V2);
         * the parking decision itself used the age before it */
        d->park_age = e->park[pi].age;
    }
    /* forget every class not seen this cycle (resolved, progressed or gone) */
    uint32_t k = 0;
    for (uint32_t i = 0; i < e->n_park; i++) {
        struct park_entry *p = &e->park[i];
        if (p->seen == e->stamp) {
            e->park[k++] = *p;
            continue;
        }
        bfe_intern_release(&e->in, p->cluster);
        bfe_intern_release(&e->in, p->group);
        bfe_intern_release(&e->in, p->fp);
    }
    if (k != e->n_park || e->park_map.n != k) {
        e->n_park = k;
        bfe_u64map_clear(&e->park_map);
        for (uint32_t i = 0; i < k; i++)
            TRY(park_insert(e, i));
    }
    return 0;
}

/* ------------------------------------------------------------------ shortfalls */

static struct bf_engine *sf_e;
static int short_cmp(const void *a, const void *b)
{
    const struct bf_engine_shortfall *x = a, *y = b;
    if (x->priority != y->priority)
        return x->priority > y->priority ? -1 : 1;
    if (x->age_cycles != y->age_cycles)
        return x->age_cycles > y->age_cycles ? -1 : 1;
    return strcmp(x->fingerprint, y->fingerprint);
}

static void short_out(const struct bf_engine *e, const struct short_entry *s,
                      struct bf_engine_shortfall *o)
{
    o->fingerprint = bfe_str(&e->in, s->fp);
    o->profile = &s->cp->prof;
    o->priority = s->cp->prio;
    o->ipb = s->cp->ipb;
    o->deficit = s->deficit;
    o->age_cycles = s->age;
}

/* short_cmp's order on two ledger entries */
static int entry_cmp(const struct bf_engine *e, uint32_t a, uint32_t b)
{
    const struct short_entry *x = &e->shortl[a], *y = &e->shortl[b];
    if (x->cp->prio != y->cp->prio)
        return x->cp->prio > y->cp->prio ? -1 : 1;
    if (x->age != y->age)
        return x->age > y->age ? -1 : 1;
    return strcmp(bfe_str(&e->in, x->fp), bfe_str(&e->in, y->fp));
}

static int entry_qcmp(const void *a, const void *b)
{
    return entry_cmp(sf_e, *(const uint32_t *)a, *(const uint32_t *)b);
}

/* h[0..n) a heap whose root is the last entry in short_cmp's order: moves
 * h[i] down to its place */
static void top_sift(const struct bf_engine *e, uint32_t *h, uint32_t n, uint32_t i)
{
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && entry_cmp(e, h[l], h[m]) > 0)
            m = l;
        if (r < n && entry_cmp(e, h[r], h[m]) > 0)
            m = r;
        if (m == i)
            return;
        uint32_t t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

/*
 * The first cap (< n_shortl) entries of the ledger in short_cmp's order into
 * e->shorts, sorted: what sorting them all and keeping cap gives, as the
 * order is total (fingerprints are unique in the ledger), in O(n log cap)
 * with most entries refused by one comparison with the last one kept.
 * 0 or -ENOMEM.
 */
static int shorts_top(struct bf_engine *e, uint32_t cap)
{
    if (!cap)
        return 0;
    uint32_t *h = ANEW(&e->ar, uint32_t, cap);
    if (!h)
        return -ENOMEM;
    for (uint32_t i = 0; i < cap; i++)
        h[i] = i;
    for (uint32_t i = cap / 2; i-- > 0;)
        top_sift(e, h, cap, i);
    for (uint32_t i = cap; i < e->n_shortl; i++)
        if (entry_cmp(e, i, h[0]) < 0) {
            h[0] = i;
            top_sift(e, h, cap, 0);
        }
    sf_e = e;
    bfe_qsort(h, cap, sizeof *h, entry_qcmp);
    sf_e = NULL;
    for (uint32_t i = 0; i < cap; i++)
        short_out(e, &e->shortl[h[i]], &e->shorts[i]);
    return 0;
}

/*
 * The ledger index of cp's fingerprint, NONE32 if it has no entry: the
 * index cp remembers when its entry still holds that fingerprint (entries
 * are unique per fingerprint, so it is the map's answer), the map's
 * otherwise; the reference engine always asks the map.
 */
static uint32_t short_find(const struct bf_engine *e, const struct cprof *cp)
{
    uint32_t si = cp->short_i;
    if (!(e->cfg.flags & BF_ENGINE_F_REFERENCE) && si < e->n_shortl && e->shortl[si].fp == cp->fp)
        return si;
    return bfe_u64map_get(&e->short_map, cp->fp, NONE32);
}

static int shortfalls(struct bf_engine *e)
{
    for (uint32_t u = 0; u < e->n_unres; u++) {
        const struct dneed *d = &e->d[e->unres[u].need];
        uint32_t fp = d->cp->fp;
        uint32_t si = short_find(e, d->cp);
        if (si == NONE32) {
            TRY(GROW(e->shortl, e->cap_shortl, e->n_shortl + 1));
            si = e->n_shortl;
            TRY(bfe_u64map_put(&e->short_map, fp, si));
            e->n_shortl++;
            struct short_entry *s = &e->shortl[si];
            memset(s, 0, sizeof *s);
            s->fp = fp;
            s->cp = d->cp;
            s->used = true;
            bfe_intern_retain(&e->in, fp);
            d->cp->refs++;
        }
        d->cp->short_i = si;
        struct short_entry *s = &e->shortl[si];
        if (s->seen != e->stamp) {
            s->age++; /* a new entry starts at 1 */
            s->seen = e->stamp;
            s->deficit = e->unres[u].deficit;
        } else {
            bfe_vec_add_scaled(&s->deficit, &e->unres[u].deficit, 1);
        }
    }
    /* entries not present this cycle are removed */
    uint32_t k = 0;
    for (uint32_t i = 0; i < e->n_shortl; i++) {
        struct short_entry *s = &e->shortl[i];
        if (s->seen == e->stamp) {
            if (k != i)
                s->cp->short_i = k; /* (s->cp's hint: the verdicts' lookup) */
            e->shortl[k++] = *s;
            continue;
        }
        bfe_intern_release(&e->in, s->fp);
        bfe_cprof_release(e, s->cp);
    }
    if (k != e->n_shortl) {
        e->n_shortl = k;
        bfe_u64map_clear(&e->short_map);
        for (uint32_t i = 0; i < k; i++)
            TRY(bfe_u64map_put(&e->short_map, e->shortl[i].fp, i));
    }
    uint32_t cap = e->cfg.shortfall_cap;
    if (!(e->cfg.flags & BF_ENGINE_F_REFERENCE) && k > cap) {
        /* only the first cap entries are published: select them */
        TRY(GROW(e->shorts, e->cap_shorts, cap ? cap : 1));
        TRY(shorts_top(e, cap));
        e->n_shorts = cap;
        return 0;
    }
    TRY(GROW(e->shorts, e->cap_shorts, k ? k : 1));
    for (uint32_t i = 0; i < k; i++)
        short_out(e, &e->shortl[i], &e->shorts[i]);
    sf_e = e;
    bfe_qsort(e->shorts, k, sizeof *e->shorts, short_cmp);
    sf_e = NULL;
    e->n_shorts = k < cap ? k : cap;
    return 0;
}

/* ------------------------------------------------------------------ verdicts */

static void matching_supply(struct bf_engine *e, const struct dneed *d, struct bf_engine_verdict *v)
{
    struct cprof *cp = d->cp;
    uint64_t idle = 0, conf = 0, spec = 0;
    uint32_t ntypes = cp->pinned ? cp->npin : 1;
    for (uint32_t t = 0; t < ntypes; t++) {
        const struct leaflist *cls_list = bfe_cprof_classes(e, cp, t);
        for (uint32_t i = 0; cls_list && i < cls_list->n; i++) {
            const struct mclass *c = &e->cls[cls_list->v[i]];
            uint32_t ci = c->count[BF_STATE_IDLE], cc = c->count[BF_STATE_CONFIGURED],
                     cs = c->count[BF_STATE_SPECULATIVE];
            if (!ci && !cc && !cs)
                continue;
            if (!bf_vec_covers(&c->alloc, &d->minu) || !bfe_match_class(e, cp, cls_list->v[i]))
                continue;
            idle += ci;
            conf += cc;
            spec += cs;
        }
    }
    uint32_t cap = e->cfg.matching_supply_cap;
    v->has_matching_supply = true;
    v->matching_supply.capped = idle >= cap || conf >= cap || spec >= cap;
    v->matching_supply.idle = (uint32_t)(idle < cap ? idle : cap);
    v->matching_supply.configured = (uint32_t)(conf < cap ? conf : cap);
    v->matching_supply.speculative = (uint32_t)(spec < cap ? spec : cap);
}

struct vkey {
    int32_t prio;
    uint32_t rank;
    int64_t arrival;
    uint32_t idx;
};

static int vkey_cmp(const void *a, const void *b)
{
    const struct vkey *x = a, *y = b;
    if (x->prio != y->prio)
        return x->prio > y->prio ? -1 : 1;
    if (x->arrival != y->arrival)
        return x->arrival < y->arrival ? -1 : 1;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static inline bool vkey_lt(const struct vkey *x, const struct vkey *y)
{
    if (x->prio != y->prio)
        return x->prio > y->prio;
    if (x->arrival != y->arrival)
        return x->arrival < y->arrival;
    if (x->rank != y->rank)
        return x->rank < y->rank;
    return x->idx < y->idx;
}

/* Merges sorted x[0..nx) and y[0..ny) into out (stable: x first on ties). */
static inline void vkey_merge(struct vkey *out, const struct vkey *x, uint32_t nx,
                              const struct vkey *y, uint32_t ny)
{
    uint32_t i = 0, j = 0, k = 0;
    while (i < nx && j < ny)
        out[k++] = vkey_lt(&y[j], &x[i]) ? y[j++] : x[i++];
    while (i < nx)
        out[k++] = x[i++];
    while (j < ny)
        out[k++] = y[j++];
}

/* bfe_sort_tail for vkeys with the comparison inlined (vkey_cmp's order: a
 * total order, idx being unique): the sorted prefix, then the rest sorted by
 * a bottom-up merge sort (insertion runs of 16), then the two merged. */
static void vkey_sort_tail(struct vkey *v, uint32_t n, struct vkey *tmp)
{
    uint32_t p = 1;
    while (p < n && !vkey_lt(&v[p], &v[p - 1]))
        p++;
    if (p >= n)
        return;
    struct vkey *t = v + p, *a = t, *b = tmp;
    uint32_t m = n - p;
    for (uint32_t lo = 0; lo < m; lo += 16) {
        uint32_t hi = lo + 16 < m ? lo + 16 : m;
        for (uint32_t i = lo + 1; i < hi; i++) {
            struct vkey x = a[i];
            uint32_t j = i;
            while (j > lo && vkey_lt(&x, &a[j - 1])) {
                a[j] = a[j - 1];
                j--;
            }
            a[j] = x;
        }
    }
    for (uint32_t w = 16; w < m; w *= 2) {
        for (uint32_t lo = 0; lo < m; lo += 2 * w) {
            uint32_t mid = lo + w < m ? lo + w : m, hi = lo + 2 * w < m ? lo + 2 * w : m;
            vkey_merge(b + lo, a + lo, mid - lo, a + mid, hi - mid);
        }
        struct vkey *x = a;
        a = b;
        b = x;
    }
    if (a != t)
        memcpy(t, a, m * sizeof *t);
    /* merge the prefix v[0..p) and the sorted tail t[0..m) through tmp */
    vkey_merge(tmp, v, p, t, m);
    memcpy(v, tmp, n * sizeof *v);
}

/* how many rows ahead the verdicts fetch a group string */
#define VERDICT_AHEAD 8

static int verdicts(struct bf_engine *e)
{
    uint32_t n = e->n_d;
    e->n_verdicts = 0;
    e->n_unsat = 0;
    TRY(GROW(e->verdicts, e->cap_verdicts, n ? n : 1));
    struct vkey *k = ANEW(&e->ar, struct vkey, n ? n : 1);
    struct vkey *tmp = ANEW(&e->ar, struct vkey, n ? n : 1);
    if (!k || !tmp)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i++)
        k[i] =
            (struct vkey){e->d[i].cp->prio, e->clusters[e->d[i].cluster].rank, e->d[i].arrival, i};
    /* the snapshot rows are in this order already; the folded rows follow */
    if (e->cfg.flags & BF_ENGINE_F_REFERENCE)
        bfe_sort_tail(k, n, sizeof *k, vkey_cmp, tmp); /* the library sort */
    else
        vkey_sort_tail(k, n, tmp);
    for (uint32_t j = 0; j < n; j++) {
        /* the group's length is read from its string, a scattered line */
        if (j + VERDICT_AHEAD < n)
            __builtin_prefetch(e->in.v[e->d[k[j + VERDICT_AHEAD].idx].group]);
        uint32_t i = k[j].idx;
        const struct dneed *d = &e->d[i];
        struct bf_engine_verdict *v = &e->verdicts[j];
        memset(v, 0, sizeof *v);
        v->index = i;
        v->cluster = bfe_str(&e->in, e->clusters[d->cluster].name);
        v->fingerprint = bfe_str(&e->in, d->cp->fp);
        v->profile = &d->cp->prof;
        v->aggregate = d->agg;
        v->min_unit = d->minu;
        v->arrival_ns = d->arrival;
        v->group = bfe_str(&e->in, d->group);
        v->group_len = bfe_strlen(&e->in, d->group);
        v->folded_members = d->folded;
        v->satisfied = bf_vec_is_zero(&d->rem);
        e->n_unsat += !v->satisfied;
        if (!v->satisfied)
            v->residual_deficit = d->rem;
        v->claimed_count = d->claimed;
        v->bootstrap_count = d->nboot;
        v->provision_count = d->nprov;
        v->same_domain = d->has_domain ? bfe_str(&e->in, d->domain) : "";
        v->same_satisfiable = d->same_sat;
        v->acquisition_parked = d->parked;
        v->n_same_candidates = d->ncand;
        v->same_candidates = d->cands;
        /* Go joins Phase 2's summary from its Unresolved list only: a Need
         * whose deficit Phase 2 covered shows no summary (fidelity.md V3) */
        if (d->victims && d->unresolved != NONE32) {
            v->has_preemption = true;
            v->preemption.victims_found = d->victims;
            v->preemption.capacity_freed = d->freed;
        }
        if (v->satisfied) {
            v->unmet_reason = BF_UNMET_UNSPECIFIED;
            continue;
        }
        if (d->parked)
            v->parked_age_cycles = d->park_age;
        uint32_t si = short_find(e, d->cp);
        if (si != NONE32)
            v->age_cycles_unmet = e->shortl[si].age;
        matching_supply(e, d, v);
        /* Go: a Need that claimed anything trivially has matching supply
         * (occ RunCycle barrier, fidelity.md V1) */
        bool exists = d->claimed > 0 || v->matching_supply.idle || v->matching_supply.configured ||
                      v->matching_supply.speculative;
        if (d->cp->has_same && (!d->same_sat || d->parked || !d->has_domain))
            v->unmet_reason = BF_UNMET_TOPOLOGY_UNSATISFIABLE;
        else if (!exists)
            v->unmet_reason = BF_UNMET_NO_MATCHING_SUPPLY;
        else if (d->unresolved != NONE32 && e->unres[d->unresolved].preempted)
            v->unmet_reason = BF_UNMET_PREEMPTION_EXHAUSTED;
        else
            v->unmet_reason = BF_UNMET_PRIORITY_STARVED;
    }
    e->n_verdicts = n;
    return 0;
}

/* ------------------------------------------------------------------ AvailableCapacity */

static uint64_t ac_key(uint32_t cluster, uint32_t fp)
{
    return ((uint64_t)cluster << 32) | fp;
}

static void ac_figures(struct bf_engine *e, struct cprof *cp)
{
    if (cp->ac_stamp == e->stamp)
        return;
    cp->ac_stamp = e->stamp;
    if (!(e->cfg.flags & BF_ENGINE_F_REFERENCE) && !e->by_state[BF_STATE_IDLE] &&
        !e->by_state[BF_STATE_SPECULATIVE]) {
        /* no Idle and no Speculative leaf: every count is 0 and no Idle
         * price is seen, pinned or not */
        cp->ac_idle = cp->ac_spec = 0;
        cp->ac_cost = 0;
        return;
    }
    if (!cp->pinned) {
        cp->ac_idle = e->by_state[BF_STATE_IDLE];
        cp->ac_spec = e->by_state[BF_STATE_SPECULATIVE];
        cp->ac_cost = 0;
        return;
    }
    uint64_t idle = 0, spec = 0;
    double cost = 0;
    bool have = false;
    for (uint32_t t = 0; t < cp->npin; t++) {
        uint32_t idx = bfe_u64map_get(&e->type_classes_map, cp->pin[t], NONE32);
        if (idx != NONE32) {
            const struct leaflist *cl = &e->type_classes[idx];
            for (uint32_t i = 0; i < cl->n; i++) {
                idle += e->cls[cl->v[i]].count[BF_STATE_IDLE];
                spec += e->cls[cl->v[i]].count[BF_STATE_SPECULATIVE];
            }
        }
        uint32_t lid = bfe_u64map_get(&e->list_map, LK_TYPE(BF_STATE_IDLE, cp->pin[t]), NONE32);
        if (lid == NONE32)
            continue;
        const struct leaflist *ll = &e->lists[lid];
        for (uint32_t i = 0; i < ll->n; i++) {
            double p = e->leaves[ll->v[i]].k.price;
            if (!have || p < cost) {
                cost = p;
                have = true;
            }
        }
    }
    cp->ac_idle = (uint32_t)(idle > UINT32_MAX ? UINT32_MAX : idle);
    cp->ac_spec = (uint32_t)(spec > UINT32_MAX ? UINT32_MAX : spec);
    cp->ac_cost = have ? cost : 0;
}

/* the cluster's distinct compiled profiles in the order its Needs first name
 * them (kept until its demand changes) */
static int ac_profiles(struct bf_engine *e, struct cluster *cl)
{
    if (cl->acl_valid)
        return 0;
    /* a profile already listed in this pass carries its mark (the
     * reference engine asks a map); the entry hint is the profile's own */
    bool ref = e->cfg.flags & BF_ENGINE_F_REFERENCE;
    struct bfe_u64map *seen = &e->norm_map[2];
    uint64_t mark = ++e->acl_marks;
    if (ref)
        bfe_u64map_clear(seen);
    cl->nacl = 0;
    for (uint32_t i = 0; i < cl->n_needs; i++) {
        struct cprof *cp = cl->needs[i].cp;
        if (ref) {
            if (bfe_u64map_get(seen, cp->idx, NONE32) != NONE32)
                continue;
            TRY(bfe_u64map_put(seen, cp->idx, i));
        } else if (cp->acl_mark == mark) {
            continue;
        }
        TRY(GROW(cl->acl, cl->capacl, cl->nacl + 1));
        TRY(GROW(cl->acl_ac, cl->capacl_ac, cl->nacl + 1));
        cp->acl_mark = mark; /* (after the growth: a failed pass lists it again) */
        cl->acl_ac[cl->nacl] = ref ? NONE32 : cp->ac_i;
        cl->acl[cl->nacl++] = cp;
    }
    cl->acl_valid = true;
    return 0;
}

static int ac_hints(struct bf_engine *e, int64_t now_ns)
{
    e->n_hints = 0;
    for (uint32_t k = 0; k < e->n_clusters; k++) {
        uint32_t ci = e->cluster_order[k];
        struct cluster *cl = &e->clusters[ci];
        if (!cl->session_live || !cl->n_needs)
            continue;
        TRY(ac_profiles(e, cl));
        for (uint32_t i = 0; i < cl->nacl; i++) {
            struct cprof *cp = cl->acl[i]; /* one hint per distinct fingerprint */
            ac_figures(e, cp);
            uint64_t total = (uint64_t)cp->ac_idle + cp->ac_spec;
            int32_t count = total > INT32_MAX ? INT32_MAX : (int32_t)total;
            uint8_t conf = cp->ac_idle   ? BF_AC_CONFIDENCE_HIGH
                           : cp->ac_spec ? BF_AC_CONFIDENCE_MEDIUM
                                         : BF_AC_CONFIDENCE_NONE;
            double cost = cp->ac_cost;
            uint64_t key = ac_key(cl->name, cp->fp);
            /* the entry's index of the last cycle, if it still names this
             * pair (entries are unique per pair; forgetting moves them) */
            uint32_t ai = cl->acl_ac[i];
            if (ai >= e->n_ac || e->ac[ai].cluster != cl->name || e->ac[ai].fp != cp->fp)
                ai = bfe_u64map_get(&e->ac_map, key, NONE32);
            if (ai == NONE32) {
                TRY(GROW(e->ac, e->cap_ac, e->n_ac + 1));
                ai = e->n_ac;
                TRY(bfe_u64map_put(&e->ac_map, key, ai));
                e->n_ac++;
                e->ac[ai] = (struct ac_entry){cl->name, cp->fp, 0, 0, 0, 0, 0, false};
                bfe_intern_retain(&e->in, cl->name);
                bfe_intern_retain(&e->in, cp->fp);
            }
            cl->acl_ac[i] = ai;
            cp->ac_i = ai;
            struct ac_entry *a = &e->ac[ai];
            a->seen = e->stamp;
            bool emit;
            if (!a->used)
                emit = true;
            else if (a->count == count && a->conf == conf && a->cost == cost)
                emit = false; /* coalesce */
            else
                emit = e->cfg.ac_min_interval_ns <= 0 ||
                       now_ns - a->last_ns >= e->cfg.ac_min_interval_ns;
            if (!emit)
                continue;
            a->used = true;
            a->count = count;
            a->conf = conf;
            a->cost = cost;
            a->last_ns = now_ns;
            TRY(GROW(e->hints, e->cap_hints, e->n_hints + 1));
            struct bf_engine_ac_hint *h = &e->hints[e->n_hints++];
            h->cluster = bfe_str(&e->in, cl->name);
            h->fingerprint = bfe_str(&e->in, cp->fp);
            h->profile = &cp->prof;
            h->available_count = count;
            h->confidence = conf;
            h->cost_per_hour = cost;
        }
    }
    /* forget (cluster, fingerprint) pairs no longer demanded by a live cluster */
    uint32_t k = 0;
    for (uint32_t i = 0; i < e->n_ac; i++) {
        if (e->ac[i].seen == e->stamp) {
            e->ac[k++] = e->ac[i];
            continue;
        }
        bfe_intern_release(&e->in, e->ac[i].cluster);
        bfe_intern_release(&e->in, e->ac[i].fp);
    }
    if (k != e->n_ac) {
        e->n_ac = k;
        bfe_u64map_clear(&e->ac_map);
        for (uint32_t i = 0; i < k; i++)
            TRY(bfe_u64map_put(&e->ac_map, ac_key(e->ac[i].cluster, e->ac[i].fp), i));
    }
    return 0;
}

void bf_engine_ac_forget(struct bf_engine *e, const char *cluster)
{
    if (!e || !cluster)
        return;
    uint32_t name = bfe_intern_find(&e->in, cluster, strlen(cluster));
    if (name == NONE32)
        return;
    uint32_t k = 0;
    for (uint32_t i = 0; i < e->n_ac; i++) {
        if (e->ac[i].cluster != name) {
            e->ac[k++] = e->ac[i];
            continue;
        }
        bfe_intern_release(&e->in, e->ac[i].cluster);
        bfe_intern_release(&e->in, e->ac[i].fp);
    }
    e->n_ac = k;
    bfe_u64map_clear(&e->ac_map);
    for (uint32_t i = 0; i < k; i++)
        bfe_u64map_put(&e->ac_map, ac_key(e->ac[i].cluster, e->ac[i].fp), i);
}

/* ------------------------------------------------------------------ driver */

int bfe_observe(struct bf_engine *e, int64_t now_ns)
{
    TRY(shortfalls(e));
    if (!(e->cfg.flags & BF_ENGINE_F_NO_VERDICTS))
        TRY(verdicts(e));
    else
        e->n_verdicts = 0;
    TRY(ac_hints(e, now_ns));
    return 0;
}

void bfe_ledgers_free(struct bf_engine *e)
{
    /* strings and profiles are freed wholesale by the caller */
    free(e->park);
    bfe_u64map_free(&e->park_map);
    free(e->shortl);
    bfe_u64map_free(&e->short_map);
    free(e->ac);
    bfe_u64map_free(&e->ac_map);
}
