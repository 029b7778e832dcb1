/*
 * phase1.c — Phase 1, assignment (reference/engine.md §4), as the
 * deterministic sequential equivalent of §4.6:
 *   1. the credit pre-pass over normalized demand D stably sorted by
 *      priority desc: own-cluster Configured then Configuring (keep-priority
 *      order), then the shard's own in-flight Creating machines (id order,
 *      fingerprint-own; group+fingerprint-own for Same Needs); the Same arm
 *      ranks domains (ChooseSameBucket, §4.3), claims incumbent-first inside
 *      the chosen domain and virtually consumes its acquirable supply;
 *   2. the worker phase, one Need at a time in precedence order (priority,
 *      interruption bucket, reclamation bucket; desc; stable on D): Idle then
 *      Speculative pools, FindBasic / FindSame / FindSpread, one proposal per
 *      state for topology-constrained Needs;
 *   3. the barrier: per-Need deficits and the action list (per Need in D
 *      order: Bootstraps in pick order, then Provisions in pick order).
 *
 * Fast path: candidates are leaves (see engine_internal.h). Credit is leaf
 * arithmetic: a group of leaves with equal keys is either claimed whole or is
 * the group where the remaining deficit reaches zero, where the exact count
 * is computed (one leaf, or identical allocatable) or walked machine by
 * machine in id order. BF_ENGINE_F_REFERENCE walks every claim machine by
 * machine instead; both give identical claims (tested).
 *
 * Layering (no circle between the engine's files, scripts/lint-includes):
 * this file calls down to credit.c, which keeps the pre-pass outcomes
 * across cycles and derives the changed ones by calling back the per-Need
 * pre-pass through prepass_ops; the Same buckets' ranking keys
 * (ChooseSameBucket, bfe_key_better) live in same.c, below both.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cycle/engine/engine_internal.h"

static inline const struct leaflist *list_at(const struct bf_engine *e, uint64_t key)
{
    uint32_t id = bfe_u64map_get(&e->list_map, key, NONE32);
    return id == NONE32 ? NULL : &e->lists[id];
}

static inline const bf_vec *leaf_alloc(const struct bf_engine *e, uint32_t li)
{
    return &e->cls[e->leaves[li].k.cls].alloc;
}

static int claim(struct bf_engine *e, uint32_t di, uint32_t li, uint32_t count)
{
    if (!count)
        return 0;
    if (e->leaves[li].cluster_idx != NONE32)
        return bfe_credit_claim(e, di, li, count); /* kept across cycles (credit.c) */
    struct leaf *l = bfe_leaf_cyc(e, li);
    uint32_t start = l->taken;
    if (l->runs != NONE32 && e->runs[l->runs].need == di &&
        e->runs[l->runs].start + e->runs[l->runs].count == start) {
        e->runs[l->runs].count += count;
    } else {
        TRY(GROW(e->runs, e->cap_runs, e->n_runs + 1));
        e->runs[e->n_runs] = (struct run){start, count, di, l->runs};
        l->runs = e->n_runs++;
    }
    l->taken += count;
    e->d[di].claimed += count;
    e->claimed_state[l->k.state] += count;
    return 0;
}

static int pick(struct bf_engine *e, uint32_t di, uint32_t slot, uint8_t state)
{
    TRY(GROW(e->picks, e->cap_picks, e->n_picks + 1));
    struct dneed *d = &e->d[di];
    uint32_t p = e->n_picks++;
    e->picks[p] = (struct pick){slot, NONE32, state};
    if (d->picks == NONE32)
        d->picks = p;
    else
        e->picks[d->picks_tail].next = p;
    d->picks_tail = p;
    if (state == BF_STATE_IDLE)
        d->nboot++;
    else
        d->nprov++;
    return 0;
}

/* Machines of allocatable `a` needed to bring rem to zero (rem non-zero). */
static int64_t need_count(const bf_vec *rem, const bf_vec *a)
{
    int64_t k = 0;
    for (int i = 0; i < BF_MAX_DIMS; i++) {
        if (rem->v[i] <= 0)
            continue;
        if (a->v[i] <= 0)
            return INT64_MAX;
        int64_t q = rem->v[i] / a->v[i] + (rem->v[i] % a->v[i] != 0);
        if (q > k)
            k = q;
    }
    return k;
}

static int cand_key_cmp(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (x->k1 != y->k1)
        return x->k1 < y->k1 ? -1 : 1;
    if (x->k2 != y->k2)
        return x->k2 < y->k2 ? -1 : 1;
    return x->leaf < y->leaf ? -1 : x->leaf > y->leaf;
}

/* cand_key_cmp as a predicate; the order is total (leaves are distinct) */
static inline bool cand_lt(const struct cand *x, const struct cand *y)
{
    if (x->k1 != y->k1)
        return x->k1 < y->k1;
    if (x->k2 != y->k2)
        return x->k2 < y->k2;
    return x->leaf < y->leaf;
}

/* Sorts by cand_key_cmp. Credit sorts one short list per Need per state
 * (~16 leaves in the realistic catalog, ~9K lists per cycle at 500K), where
 * an inline insertion sort beats qsort's indirect compares; the order is
 * total, so the result is the same. */
static void cand_sort(struct cand *c, uint32_t n)
{
    if (n > 32) {
        bfe_qsort(c, n, sizeof *c, cand_key_cmp);
        return;
    }
    for (uint32_t i = 1; i < n; i++) {
        struct cand x = c[i];
        uint32_t j = i;
        while (j > 0 && cand_lt(&x, &c[j - 1])) {
            c[j] = c[j - 1];
            j--;
        }
        c[j] = x;
    }
}

/*
 * Walks cands machine by machine in (k1, k2, id) order from each leaf's first
 * unclaimed machine, claiming until rem is zero or `limit` machines were
 * taken (limit < 0: no limit). picks: record each as a Phase 1 acquisition.
 */
static int walk_take(struct bf_engine *e, uint32_t di, const struct cand *c, uint32_t n,
                     bf_vec *rem, int64_t limit, bool picks)
{
    if (!n || bf_vec_is_zero(rem) || limit == 0)
        return 0;
    struct arena_mark mk = bfe_arena_mark(&e->sc);
    struct mcur *cur = ANEW(&e->sc, struct mcur, n);
    if (!cur)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i++)
        bfe_mcur_init(e, &cur[i], c[i].leaf, bfe_leaf_taken(e, &e->leaves[c[i].leaf]), c[i].k1,
                      c[i].k2);
    struct merge m;
    bfe_merge_init(&m, e, cur, n);
    uint32_t slot, li;
    int rc = 0;
    while (!bf_vec_is_zero(rem) && limit != 0 && bfe_merge_next(&m, &slot, &li)) {
        if ((rc = claim(e, di, li, 1)))
            break;
        if (picks && (rc = pick(e, di, slot, e->leaves[li].k.state)))
            break;
        bfe_vec_sub_scaled(rem, leaf_alloc(e, li), 1);
        if (limit > 0)
            limit--;
    }
    bfe_arena_release(&e->sc, mk);
    return rc;
}

/* reverse cursor over a leaf's unclaimed range, for selecting the id-order tail */
struct rcur {
    uint32_t leaf, ci, off, left, slot;
};

static int rcur_cmp(const struct bf_engine *e, const struct rcur *a, const struct rcur *b)
{
    return bfe_id_cmp(e, b->slot, a->slot); /* max-heap on id */
}

static void rsift(const struct bf_engine *e, struct rcur *h, uint32_t n, uint32_t i)
{
    struct rcur x = h[i];
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && rcur_cmp(e, &h[c + 1], &h[c]) < 0)
            c++;
        if (rcur_cmp(e, &h[c], &x) >= 0)
            break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
}

/*
 * Claims every available machine of the equal-key leaves c[0..n) except the
 * last `excl` in id order (what a forward walk stopping `excl` machines before
 * the end would claim), visiting only the excluded tail. The caller advances
 * rem (all allocatables are equal).
 */
static int take_all_but_last(struct bf_engine *e, uint32_t di, const struct cand *c, uint32_t n,
                             uint64_t excl)
{
    struct arena_mark mk = bfe_arena_mark(&e->sc);
    struct rcur *h = ANEW(&e->sc, struct rcur, n);
    uint32_t *dropped = ANEW(&e->sc, uint32_t, n);
    if (!h || !dropped)
        return -ENOMEM;
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++) {
        dropped[i] = 0;
        const struct slotlist *sl = &e->leaves[c[i].leaf].sl;
        if (!c[i].avail)
            continue;
        struct rcur r = {.leaf = i, .left = c[i].avail};
        bfe_sl_seek(sl, sl->n - 1, &r.ci, &r.off);
        r.slot = bfe_sl_at(sl, r.ci, r.off);
        h[m++] = r;
    }
    for (uint32_t i = m / 2; i-- > 0;)
        rsift(e, h, m, i);
    while (excl-- && m) {
        struct rcur *top = &h[0];
        dropped[top->leaf]++;
        if (--top->left == 0) {
            h[0] = h[--m];
        } else {
            const struct slotlist *sl = &e->leaves[c[top->leaf].leaf].sl;
            if (top->off == 0) {
                top->ci--;
                top->off = sl->ch[top->ci]->n - 1;
            } else {
                top->off--;
            }
            top->slot = bfe_sl_at(sl, top->ci, top->off);
        }
        if (m > 1)
            rsift(e, h, m, 0);
    }
    int rc = 0;
    for (uint32_t i = 0; i < n && !rc; i++)
        rc = claim(e, di, c[i].leaf, c[i].avail - dropped[i]);
    bfe_arena_release(&e->sc, mk);
    return rc;
}

/* Credit: claims along c (sorted in place) until rem is zero. */
static int credit_walk(struct bf_engine *e, uint32_t di, struct cand *c, uint32_t n, bf_vec *rem)
{
    if (!n || bf_vec_is_zero(rem))
        return 0;
    if (e->cfg.flags & BF_ENGINE_F_REFERENCE)
        return walk_take(e, di, c, n, rem, -1, false);
    cand_sort(c, n);
    uint32_t i = 0;
    while (i < n && !bf_vec_is_zero(rem)) {
        uint32_t j = i + 1;
        while (j < n && c[j].k1 == c[i].k1 && c[j].k2 == c[i].k2)
            j++;
        bf_vec total;
        bf_vec_zero(&total);
        const bf_vec *a0 = leaf_alloc(e, c[i].leaf);
        bool same_alloc = true;
        for (uint32_t k = i; k < j; k++) {
            const bf_vec *a = leaf_alloc(e, c[k].leaf);
            bfe_vec_add_scaled(&total, a, c[k].avail);
            if (a != a0 && !bf_vec_eq(a, a0))
                same_alloc = false;
        }
        if (!bf_vec_covers(&total, rem)) {
            for (uint32_t k = i; k < j; k++)
                TRY(claim(e, di, c[k].leaf, c[k].avail));
            bfe_vec_sub_scaled(rem, &total, 1);
            i = j;
            continue;
        }
        if (j - i == 1) {
            int64_t k = need_count(rem, a0);
            TRY(claim(e, di, c[i].leaf, (uint32_t)k)); /* k <= avail: total covers rem */
            bfe_vec_sub_scaled(rem, a0, k);
        } else if (same_alloc) {
            int64_t k = need_count(rem, a0);
            uint64_t avail = 0;
            for (uint32_t q = i; q < j; q++)
                avail += c[q].avail;
            if ((uint64_t)k * 2 <= avail) {
                TRY(walk_take(e, di, c + i, j - i, rem, k, false));
            } else {
                /* mostly consumed: select the excluded tail instead */
                TRY(take_all_but_last(e, di, c + i, j - i, avail - (uint64_t)k));
                bfe_vec_sub_scaled(rem, a0, k);
            }
        } else {
            TRY(walk_take(e, di, c + i, j - i, rem, -1, false));
        }
        break;
    }
    return 0;
}

/* Appends the eligible unclaimed leaves of list `ll` to the scratch array. */
struct gather {
    struct cand *c;
    uint32_t n, cap;
};

static int gather_push(struct bf_engine *e, struct gather *g, const struct cand *x)
{
    if (g->n == g->cap) {
        uint32_t nc = g->cap ? g->cap * 2 : 64;
        struct cand *nv = ANEW(&e->sc, struct cand, nc);
        if (!nv)
            return -ENOMEM;
        if (g->n)
            memcpy(nv, g->c, g->n * sizeof *nv);
        g->c = nv;
        g->cap = nc;
    }
    g->c[g->n++] = *x;
    return 0;
}

/* ------------------------------------------------------------------ pre-pass */

static void vclamp(bf_vec *v)
{
    for (int i = 0; i < BF_MAX_DIMS; i++)
        if (v->v[i] < 0)
            v->v[i] = 0;
}

/* keep-priority leaves of one list that the Need may be credited */
static int gather_list(struct bf_engine *e, struct dneed *d, uint32_t list, struct gather *g,
                       uint8_t part, uint8_t kkind, uint32_t kkey, bool need_dom)
{
    if (list == NONE32)
        return 0;
    const struct leaflist *ll = &e->lists[list];
    for (uint32_t i = 0; i < ll->n; i++) {
        uint32_t li = ll->v[i];
        const struct leaf *l = &e->leaves[li];
        uint32_t avail = l->sl.n - bfe_leaf_taken(e, l);
        if (!avail)
            continue;
        if (!bfe_match_class(e, d->cp, l->k.cls))
            continue;
        const struct mclass *c = &e->cls[l->k.cls];
        if (!bf_vec_covers(&c->alloc, &d->minu))
            continue;
        struct cand x = {.leaf = li, .avail = avail, .dom = NONE32, .part = part};
        if (need_dom) {
            x.dom = bfe_class_attr(e, c, kkind, kkey);
            if (x.dom == NONE32)
                continue;
            x.own = l->k.group == d->group && l->k.fp == d->cp->fp;
        }
        if (l->k.state == BF_STATE_CREATING) {
            x.k1 = x.k2 = 0; /* id order */
        } else {
            x.k1 = l->k.price;
            x.k2 = -l->rp_dollars;
        }
        TRY(gather_push(e, g, &x));
    }
    return 0;
}

/* the Need's own cluster's Configured (si 0) or Configuring (si 1) leaves */
static int gather_credit(struct bf_engine *e, struct dneed *d, int si, struct gather *g,
                         uint8_t part, uint8_t kkind, uint32_t kkey, bool need_dom)
{
    const struct cluster *cl = &e->clusters[d->cluster];
    uint32_t cap = (cl->ntl[si] > d->cp->npin ? cl->ntl[si] : d->cp->npin) + 1;
    uint32_t stackl[16];
    uint32_t *lists = cap <= 16 ? stackl : ANEW(&e->sc, uint32_t, cap);
    if (!lists)
        return -ENOMEM;
    uint32_t n = bfe_cluster_lists(e, d->cluster, si, d->cp, lists, cap);
    for (uint32_t i = 0; i < n; i++)
        TRY(gather_list(e, d, lists[i], g, part, kkind, kkey, need_dom));
    return 0;
}

static int prepass_plain(struct bf_engine *e, uint32_t di)
{
    struct dneed *d = &e->d[di];
    struct arena_mark mk = bfe_arena_mark(&e->sc);
    struct gather g = {0};
    int rc = 0;
    if (!bf_vec_is_zero(&d->rem)) {
        if ((rc = gather_credit(e, d, 0, &g, 0, 0, 0, false)) ||
            (rc = credit_walk(e, di, g.c, g.n, &d->rem)))
            goto out;
    }
    if (!bf_vec_is_zero(&d->rem)) {
        g.n = 0;
        if ((rc = gather_credit(e, d, 1, &g, 1, 0, 0, false)) ||
            (rc = credit_walk(e, di, g.c, g.n, &d->rem)))
            goto out;
    }
    if (!bf_vec_is_zero(&d->rem)) {
        /* read even when nothing is Creating: the incremental pre-pass keeps
         * this outcome only while the list stays empty */
        uint32_t lid = bfe_u64map_get(&e->list_map, LK_CFP(d->cp->fp), NONE32);
        bfe_credit_creating_read(e, lid);
        if (e->by_state[BF_STATE_CREATING] == 0)
            goto out;
        g.n = 0;
        if ((rc = gather_list(e, d, lid, &g, 2, 0, 0, false)) ||
            (rc = credit_walk(e, di, g.c, g.n, &d->rem)))
            goto out;
    }
out:
    bfe_arena_release(&e->sc, mk);
    return rc;
}

/* ------------------------------------------------------------------ Same buckets */

static int choose_keys(const struct bf_engine *e, const struct rank_key *k, uint32_t n)
{
    int best = -1;
    for (uint32_t i = 0; i < n; i++) {
        if (k[i].count == 0)
            continue;
        if (best < 0 || bfe_key_better(e, &k[i], &k[best]))
            best = (int)i;
    }
    return best;
}

static const struct bf_engine *rank_e;
static const struct rank_key *rank_k;

static int bucket_rank_cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    if (bfe_key_better(rank_e, &rank_k[x], &rank_k[y]))
        return -1;
    if (bfe_key_better(rank_e, &rank_k[y], &rank_k[x]))
        return 1;
    return 0;
}

/* the top-K domains, best first (ADR-0061 amendment; observation only) */
static int same_candidates(struct bf_engine *e, struct dneed *d, const struct same_bucket *bk,
                           const struct rank_key *keys, uint32_t n, const bf_vec *def)
{
    uint32_t cap = e->cfg.same_candidate_cap;
    uint32_t *idx = ANEW(&e->sc, uint32_t, n ? n : 1);
    if (!idx)
        return -ENOMEM;
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++)
        if (bk[i].count)
            idx[m++] = i;
    if (m > cap) {
        /* partial selection: the best `cap` by repeated scans (cap is small) */
        for (uint32_t t = 0; t < cap; t++) {
            uint32_t b = t;
            for (uint32_t q = t + 1; q < m; q++)
                if (bfe_key_better(e, &keys[idx[q]], &keys[idx[b]]))
                    b = q;
            uint32_t x = idx[t];
            idx[t] = idx[b];
            idx[b] = x;
        }
        m = cap;
    } else {
        rank_e = e;
        rank_k = keys;
        bfe_qsort(idx, m, sizeof *idx, bucket_rank_cmp);
        rank_e = NULL;
    }
    d->ncand = m;
    d->cands = m ? ANEW(&e->ar, struct bf_engine_domain_coverage, m) : NULL;
    d->cand_vals = m ? ANEW(&e->ar, uint32_t, m) : NULL;
    if (m && (!d->cands || !d->cand_vals))
        return -ENOMEM;
    for (uint32_t i = 0; i < m; i++) {
        const struct same_bucket *b = &bk[idx[i]];
        d->cand_vals[i] = b->value;
        d->cands[i].domain = bfe_str(&e->in, b->value);
        d->cands[i].coverage_per_mille = bfe_coverage_per_mille(&b->total, def);
        d->cands[i].satisfiable = keys[idx[i]].sat;
    }
    return 0;
}

/* bucket index for domain v, creating it */
static int bucket_of(struct bf_engine *e, struct same_bucket **bk, uint32_t *n, uint32_t *cap,
                     uint32_t v, uint32_t *out)
{
    if (v >= e->cap_scratch) {
        uint32_t c1 = e->cap_scratch, c2 = e->cap_scratch;
        if (GROW(e->scratch_dom, c1, v + 1) || GROW(e->scratch_dom_stamp, c2, v + 1))
            return -ENOMEM;
        uint32_t nc = c1 < c2 ? c1 : c2;
        memset(e->scratch_dom_stamp + e->cap_scratch, 0, (nc - e->cap_scratch) * sizeof(uint32_t));
        e->cap_scratch = nc;
    }
    if (e->scratch_dom_stamp[v] == e->dom_stamp) {
        *out = e->scratch_dom[v];
        return 0;
    }
    if (*n == *cap) {
        uint32_t nc = *cap ? *cap * 2 : 16;
        struct same_bucket *nb = ANEW(&e->sc, struct same_bucket, nc);
        if (!nb)
            return -ENOMEM;
        if (*n)
            memcpy(nb, *bk, *n * sizeof *nb);
        *bk = nb;
        *cap = nc;
    }
    struct same_bucket *b = &(*bk)[*n];
    memset(b, 0, sizeof *b);
    b->value = v;
    e->scratch_dom[v] = *n;
    e->scratch_dom_stamp[v] = e->dom_stamp;
    *out = (*n)++;
    return 0;
}

/* Virtual consumption of domain v's acquirable supply (ADR-0041 rider). */
static int consume_domain(struct bf_engine *e, struct dneed *d, uint32_t v, bf_vec *r)
{
    static const uint8_t states[2] = {BF_STATE_IDLE, BF_STATE_SPECULATIVE};
    struct cprof *cp = d->cp;
    for (int si = 0; si < 2 && !bf_vec_is_zero(r); si++) {
        uint32_t ntypes = cp->pinned ? cp->npin : 1;
        for (uint32_t t = 0; t < ntypes && !bf_vec_is_zero(r); t++) {
            const struct leaflist *ll = cp->pinned ? list_at(e, LK_TYPE(states[si], cp->pin[t]))
                                                   : list_at(e, LK_STATE(states[si]));
            if (!ll)
                continue;
            struct arena_mark mk = bfe_arena_mark(&e->sc);
            struct mcur *cur = ANEW(&e->sc, struct mcur, ll->n ? ll->n : 1);
            if (!cur)
                return -ENOMEM;
            uint32_t nc = 0;
            for (uint32_t i = 0; i < ll->n; i++) {
                uint32_t li = ll->v[i];
                struct leaf *l = bfe_leaf_cyc(e, li);
                if (l->consumed >= l->sl.n)
                    continue;
                const struct mclass *c = &e->cls[l->k.cls];
                if (!bfe_match_class(e, cp, l->k.cls) || !bf_vec_covers(&c->alloc, &d->minu))
                    continue;
                if (bfe_class_attr(e, c, cp->same_kind, cp->same_key) != v)
                    continue;
                /* pinned buckets are price then id; ListByState is id order */
                bfe_mcur_init(e, &cur[nc++], li, l->consumed, cp->pinned ? l->k.price : 0, 0);
            }
            struct merge m;
            bfe_merge_init(&m, e, cur, nc);
            uint32_t slot, li;
            int rc = 0;
            while (!bf_vec_is_zero(r) && bfe_merge_next(&m, &slot, &li)) {
                struct leaf *l = &e->leaves[li];
                l->consumed++;
                bfe_class_cyc(e, l->k.cls)->consumed[si]++;
                bfe_vec_sub_scaled(r, leaf_alloc(e, li), 1);
                if ((rc = bfe_credit_consume(e, li, 1)))
                    break;
            }
            bfe_arena_release(&e->sc, mk);
            if (rc)
                return rc;
        }
    }
    return 0;
}

static int prepass_same(struct bf_engine *e, uint32_t di)
{
    struct dneed *d = &e->d[di];
    struct cprof *cp = d->cp;
    struct arena_mark mk = bfe_arena_mark(&e->sc);
    struct gather g = {0};
    struct same_bucket *bk = NULL;
    uint32_t nb = 0, capb = 0;
    int rc = 0;
    e->dom_stamp++;
    if (e->dom_stamp == 0) {
        memset(e->scratch_dom_stamp, 0, (size_t)e->cap_scratch * sizeof(uint32_t));
        e->dom_stamp = 1;
    }
    /* 1. creditable buckets: Configured, Configuring (keep order), own Creating (id) */
    if ((rc = gather_credit(e, d, 0, &g, 0, cp->same_kind, cp->same_key, true)) ||
        (rc = gather_credit(e, d, 1, &g, 1, cp->same_kind, cp->same_key, true)))
        goto out;
    {
        uint32_t n0 = g.n;
        uint32_t lid = bfe_u64map_get(&e->list_map, LK_CFP(cp->fp), NONE32);
        bfe_credit_creating_read(e, lid);
        if ((rc = gather_list(e, d, lid, &g, 2, cp->same_kind, cp->same_key, true)))
            goto out;
        /* Creating is creditable only when gang-own (group and fingerprint) */
        uint32_t k = n0;
        for (uint32_t i = n0; i < g.n; i++)
            if (g.c[i].own)
                g.c[k++] = g.c[i];
        g.n = k;
    }
    for (uint32_t i = 0; i < g.n; i++) {
        uint32_t b;
        if ((rc = bucket_of(e, &bk, &nb, &capb, g.c[i].dom, &b)))
            goto out;
        const bf_vec *a = leaf_alloc(e, g.c[i].leaf);
        struct same_bucket *x = &bk[b];
        x->count += g.c[i].avail;
        x->cred_count += g.c[i].avail;
        bfe_vec_add_scaled(&x->total, a, g.c[i].avail);
        bfe_vec_add_scaled(&x->cred_total, a, g.c[i].avail);
        if (g.c[i].own)
            bfe_vec_add_scaled(&x->own_total, a, g.c[i].avail);
    }
    if (!(e->cfg.flags & (BF_ENGINE_F_REFERENCE | BF_ENGINE_F_NO_INCREMENTAL))) {
        /* 2.-4. over the shared acquirable supply (same.c); the creditable
         * buckets are recorded for a later cycle's re-ranking (credit.c) */
        const struct cbk *cb = NULL;
        if ((rc = bfe_credit_cbk(e, bk, nb, &d->agg, &cb)) || (rc = bfe_same_rank(e, d, cb, nb)))
            goto out;
        if (!d->has_domain)
            goto out;
    } else {
        /* 2. acquirable fold (not when parked): shard-wide Idle + Speculative */
        if (!d->parked) {
            static const uint8_t states[2] = {BF_STATE_IDLE, BF_STATE_SPECULATIVE};
            uint32_t ntypes = cp->pinned ? cp->npin : 1;
            for (uint32_t t = 0; t < ntypes; t++) {
                const struct leaflist *cls_list;
                if (cp->pinned) {
                    uint32_t idx = bfe_u64map_get(&e->type_classes_map, cp->pin[t], NONE32);
                    cls_list = idx == NONE32 ? NULL : &e->type_classes[idx];
                } else {
                    cls_list = &e->all_classes;
                }
                if (!cls_list)
                    continue;
                for (uint32_t i = 0; i < cls_list->n; i++) {
                    uint32_t ci = cls_list->v[i];
                    struct mclass *c = &e->cls[ci];
                    if (!c->count[BF_STATE_IDLE] && !c->count[BF_STATE_SPECULATIVE])
                        continue;
                    if (!bfe_match_class(e, cp, ci) || !bf_vec_covers(&c->alloc, &d->minu))
                        continue;
                    uint32_t v = bfe_class_attr(e, c, cp->same_kind, cp->same_key);
                    if (v == NONE32)
                        continue;
                    c = bfe_class_cyc(e, ci);
                    uint32_t avail = 0;
                    for (int si = 0; si < 2; si++)
                        avail += c->count[states[si]] - c->consumed[si];
                    if (!avail)
                        continue;
                    uint32_t b;
                    if ((rc = bucket_of(e, &bk, &nb, &capb, v, &b)))
                        goto out;
                    bk[b].count += avail;
                    bfe_vec_add_scaled(&bk[b].total, &c->alloc, avail);
                }
            }
        }
        /* 3./4. choose the domain */
        struct rank_key *keys = ANEW(&e->sc, struct rank_key, nb ? nb : 1);
        if (!keys) {
            rc = -ENOMEM;
            goto out;
        }
        for (uint32_t i = 0; i < nb; i++)
            bfe_rank_key_of(&bk[i], &d->agg, &keys[i]);
        int best = choose_keys(e, keys, nb);
        if (!(e->cfg.flags & BF_ENGINE_F_NO_VERDICTS) && nb &&
            (rc = same_candidates(e, d, bk, keys, nb, &d->agg)))
            goto out;
        if (best < 0) {
            d->has_domain = false;
            d->same_sat = false;
            goto out;
        }
        d->has_domain = true;
        d->domain = bk[best].value;
        d->same_sat = keys[best].sat;
    }
    /* 5. claim the chosen domain's creditable members, incumbent first */
    {
        struct cand *seg = ANEW(&e->sc, struct cand, g.n ? g.n : 1);
        if (!seg) {
            rc = -ENOMEM;
            goto out;
        }
        for (int own = 1; own >= 0 && !bf_vec_is_zero(&d->rem); own--) {
            for (uint8_t part = 0; part < 3 && !bf_vec_is_zero(&d->rem); part++) {
                uint32_t ns = 0;
                for (uint32_t i = 0; i < g.n; i++)
                    if (g.c[i].dom == d->domain && g.c[i].own == (bool)own && g.c[i].part == part)
                        seg[ns++] = g.c[i];
                if ((rc = credit_walk(e, di, seg, ns, &d->rem)))
                    goto out;
            }
        }
    }
    /* 6. the consumption rider */
    if (!d->parked && !bf_vec_is_zero(&d->rem)) {
        bf_vec r = d->rem;
        rc = consume_domain(e, d, d->domain, &r);
    }
out:
    bfe_arena_release(&e->sc, mk);
    return rc;
}

/* the consumption rider of a Same Need whose claims stand (credit.c's
 * re-ranking): virtually consumes the chosen domain's acquirable supply for
 * the Need's remaining deficit */
static int same_consume(struct bf_engine *e, uint32_t di)
{
    struct dneed *d = &e->d[di];
    bf_vec r = d->rem;
    return consume_domain(e, d, d->domain, &r);
}

/* ------------------------------------------------------------------ worker phase */

/* Matching leaves of the Idle (si 0) or Speculative (si 1) pool for cp. */
static int pool(struct bf_engine *e, struct cprof *cp, int si, const uint32_t **out, uint32_t *n)
{
    static const uint8_t states[2] = {BF_STATE_IDLE, BF_STATE_SPECULATIVE};
    if (cp->stamp != e->stamp) {
        cp->stamp = e->stamp;
        cp->pool_built[0] = cp->pool_built[1] = false;
    }
    if (!cp->pool_built[si]) {
        uint32_t total = 0;
        uint32_t ntypes = cp->pinned ? cp->npin : 1;
        for (uint32_t t = 0; t < ntypes; t++) {
            const struct leaflist *ll = cp->pinned ? list_at(e, LK_TYPE(states[si], cp->pin[t]))
                                                   : list_at(e, LK_STATE(states[si]));
            total += ll ? ll->n : 0;
        }
        uint32_t *v = ANEW(&e->ar, uint32_t, total ? total : 1);
        if (!v)
            return -ENOMEM;
        uint32_t k = 0;
        for (uint32_t t = 0; t < ntypes; t++) {
            const struct leaflist *ll = cp->pinned ? list_at(e, LK_TYPE(states[si], cp->pin[t]))
                                                   : list_at(e, LK_STATE(states[si]));
            for (uint32_t i = 0; ll && i < ll->n; i++)
                if (bfe_match_class(e, cp, e->leaves[ll->v[i]].k.cls))
                    v[k++] = ll->v[i];
        }
        cp->pool_v[si] = v;
        cp->pool_n[si] = k;
        cp->pool_built[si] = true;
    }
    *out = cp->pool_v[si];
    *n = cp->pool_n[si];
    return 0;
}

enum { DOM_ANY = 0, DOM_EQ = 1, DOM_HAS = 2 };

/* unclaimed, MinUnit-covering pool leaves as candidates keyed by pool order */
static int pool_cands(struct bf_engine *e, struct dneed *d, int si, int dmode, uint8_t kkind,
                      uint32_t kkey, uint32_t dval, struct gather *g)
{
    const uint32_t *pl;
    uint32_t pn;
    TRY(pool(e, d->cp, si, &pl, &pn));
    for (uint32_t i = 0; i < pn; i++) {
        uint32_t li = pl[i];
        const struct leaf *l = &e->leaves[li];
        uint32_t avail = l->sl.n - bfe_leaf_taken(e, l);
        if (!avail)
            continue;
        const struct mclass *c = &e->cls[l->k.cls];
        if (!bf_vec_covers(&c->alloc, &d->minu))
            continue;
        struct cand x = {.leaf = li, .avail = avail, .dom = NONE32};
        if (dmode != DOM_ANY) {
            x.dom = bfe_class_attr(e, c, kkind, kkey);
            if (x.dom == NONE32 || (dmode == DOM_EQ && x.dom != dval))
                continue;
        }
        x.k1 = si == 0 ? l->k.price : bf_effective_cost(l->k.price, l->k.prob, d->cp->ip_dollars);
        x.k2 = 0;
        TRY(gather_push(e, g, &x));
    }
    return 0;
}

static int find_basic(struct bf_engine *e, uint32_t di, int si)
{
    struct dneed *d = &e->d[di];
    struct arena_mark mk = bfe_arena_mark(&e->sc);
    struct gather g = {0};
    int rc = pool_cands(e, d, si, DOM_ANY, 0, 0, 0, &g);
    if (!rc)
        rc = walk_take(e, di, g.c, g.n, &d->rem, -1, true);
    bfe_arena_release(&e->sc, mk);
    return rc;
}

static int cand_dom_cmp(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (x->dom != y->dom)
        return x->dom < y->dom ? -1 : 1;
    return x->leaf < y->leaf ? -1 : x->leaf > y->leaf;
}

static int find_same(struct bf_engine *e, uint32_t di, int si)
{
    struct dneed *d = &e->d[di];
    struct cprof *cp = d->cp;
    struct arena_mark mk = bfe_arena_mark(&e->sc);
    struct gather g = {0};
    int rc;
    if (d->has_domain) {
        rc = pool_cands(e, d, si, DOM_EQ, cp->same_kind, cp->same_key, d->domain, &g);
        if (!rc)
            rc = walk_take(e, di, g.c, g.n, &d->rem, -1, true);
        goto out;
    }
    /* fallback: group the pool by K value; atomic first, then coverage */
    rc = pool_cands(e, d, si, DOM_HAS, cp->same_kind, cp->same_key, 0, &g);
    if (rc || !g.n)
        goto out;
    bfe_qsort(g.c, g.n, sizeof *g.c, cand_dom_cmp);
    int64_t best_lo = -1, best_hi = -1;
    bool best_atomic = false;
    uint64_t best_avail = 0;
    double best_head = 0;
    for (uint32_t i = 0; i < g.n;) {
        uint32_t j = i + 1;
        while (j < g.n && g.c[j].dom == g.c[i].dom)
            j++;
        uint64_t avail = 0;
        bf_vec capv;
        bf_vec_zero(&capv);
        uint32_t head = i;
        struct mcur hc, xc;
        for (uint32_t k = i; k < j; k++) {
            avail += g.c[k].avail;
            bfe_vec_add_scaled(&capv, leaf_alloc(e, g.c[k].leaf), g.c[k].avail);
            if (k == i) {
                bfe_mcur_init(e, &hc, g.c[k].leaf, bfe_leaf_taken(e, &e->leaves[g.c[k].leaf]),
                              g.c[k].k1, 0);
            } else {
                bfe_mcur_init(e, &xc, g.c[k].leaf, bfe_leaf_taken(e, &e->leaves[g.c[k].leaf]),
                              g.c[k].k1, 0);
                if (bfe_mcur_cmp(e, &xc, &hc) < 0) {
                    hc = xc;
                    head = k;
                }
            }
        }
        bool atomic = bf_vec_covers(&capv, &d->rem);
        double headp = e->leaves[g.c[head].leaf].k.price;
        bool take = false;
        if (best_lo < 0) {
            take = true;
        } else if (atomic != best_atomic) {
            take = atomic;
        } else if (atomic) {
            if (headp != best_head)
                take = headp < best_head;
            else
                take = bfe_strcmp_id(&e->in, g.c[i].dom, g.c[best_lo].dom) < 0;
        } else {
            if (avail != best_avail)
                take = avail > best_avail;
            else if (headp != best_head)
                take = headp < best_head;
            else
                take = bfe_strcmp_id(&e->in, g.c[i].dom, g.c[best_lo].dom) < 0;
        }
        if (take) {
            best_lo = i;
            best_hi = j;
            best_atomic = atomic;
            best_avail = avail;
            best_head = headp;
        }
        i = j;
    }
    rc = walk_take(e, di, g.c + best_lo, (uint32_t)(best_hi - best_lo), &d->rem, -1, true);
out:
    bfe_arena_release(&e->sc, mk);
    return rc;
}

static int find_spread(struct bf_engine *e, uint32_t di, int si)
{
    struct dneed *d = &e->d[di];
    struct cprof *cp = d->cp;
    struct arena_mark mk = bfe_arena_mark(&e->sc);
    struct gather g = {0};
    int rc = pool_cands(e, d, si, DOM_HAS, cp->spread_kind, cp->spread_key, 0, &g);
    if (rc || !g.n)
        goto out;
    bfe_qsort(g.c, g.n, sizeof *g.c, cand_dom_cmp);
    uint32_t ng = 0;
    for (uint32_t i = 0; i < g.n; i++)
        if (i == 0 || g.c[i].dom != g.c[i - 1].dom)
            ng++;
    struct merge *m = ANEW(&e->sc, struct merge, ng);
    struct mcur *cur = ANEW(&e->sc, struct mcur, g.n);
    uint32_t *cnt = ANEW(&e->sc, uint32_t, ng);
    uint32_t *dom = ANEW(&e->sc, uint32_t, ng);
    if (!m || !cur || !cnt || !dom) {
        rc = -ENOMEM;
        goto out;
    }
    for (uint32_t i = 0, k = 0; i < g.n; k++) {
        uint32_t j = i + 1;
        while (j < g.n && g.c[j].dom == g.c[i].dom)
            j++;
        for (uint32_t q = i; q < j; q++)
            bfe_mcur_init(e, &cur[q], g.c[q].leaf, bfe_leaf_taken(e, &e->leaves[g.c[q].leaf]),
                          g.c[q].k1, 0);
        bfe_merge_init(&m[k], e, cur + i, j - i);
        cnt[k] = 0;
        dom[k] = g.c[i].dom;
        i = j;
    }
    uint32_t skew = (uint32_t)cp->skew;
    while (!bf_vec_is_zero(&d->rem)) {
        uint32_t mn = UINT32_MAX;
        for (uint32_t k = 0; k < ng; k++)
            if (cnt[k] < mn)
                mn = cnt[k];
        /* Each domain's head is its next machine in pool order (price for
         * Idle, effective cost for Speculative), but domains compete on the
         * head's price per hour, as Go's FindSpread does (docs/fidelity.md
         * item 1). */
        int best = -1;
        double bprice = 0;
        for (uint32_t k = 0; k < ng; k++) {
            uint32_t hl;
            if (!bfe_merge_peek(&m[k], NULL, &hl, NULL))
                continue; /* exhausted */
            if (cnt[k] > mn + skew - 1)
                continue;
            double hp = e->leaves[hl].k.price;
            if (best < 0 || hp < bprice ||
                (hp == bprice && bfe_strcmp_id(&e->in, dom[k], dom[best]) < 0)) {
                best = (int)k;
                bprice = hp;
            }
        }
        if (best < 0)
            break;
        uint32_t slot, li;
        bfe_merge_next(&m[best], &slot, &li);
        if ((rc = claim(e, di, li, 1)) || (rc = pick(e, di, slot, e->leaves[li].k.state)))
            break;
        bfe_vec_sub_scaled(&d->rem, leaf_alloc(e, li), 1);
        cnt[best]++;
    }
out:
    bfe_arena_release(&e->sc, mk);
    return rc;
}

static int worker(struct bf_engine *e, uint32_t di)
{
    struct dneed *d = &e->d[di];
    for (int si = 0; si < 2; si++) {
        if (bf_vec_is_zero(&d->rem))
            break;
        if (d->cp->has_same) {
            if (d->parked)
                continue;
            TRY(find_same(e, di, si));
        } else if (d->cp->strict_spread) {
            TRY(find_spread(e, di, si));
        } else {
            TRY(find_basic(e, di, si));
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ driver */

/* the pre-pass of one normalized Need (credit.c calls it through prepass_ops
 * for every Need it derives) */
static int prepass_need(struct bf_engine *e, uint32_t di)
{
    /* a zero-aggregate Same Need still ranks its domains (Go's
     * seedSameProfile does; docs/fidelity.md V5): it claims nothing */
    if (bf_vec_is_zero(&e->d[di].rem) && !e->d[di].cp->has_same)
        return 0;
    return e->d[di].cp->has_same ? prepass_same(e, di) : prepass_plain(e, di);
}

static const struct bfe_prepass_ops prepass_ops = {prepass_need, same_consume};

static int u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int bfe_u128_cmp(const void *a, const void *b)
{
    unsigned __int128 x, y;
    memcpy(&x, a, sizeof x);
    memcpy(&y, b, sizeof y);
    return x < y ? -1 : x > y;
}

static uint64_t prio_desc_key(int32_t p)
{
    return (uint64_t)((int64_t)INT32_MAX - (int64_t)p);
}

int bfe_phase1(struct bf_engine *e)
{
    uint32_t n = e->n_d;
    memset(e->claimed_state, 0, sizeof e->claimed_state);
    e->n_runs = 0;
    e->n_picks = 0;
    for (uint32_t i = 0; i < n; i++) {
        struct dneed *d = &e->d[i];
        d->rem = d->agg;
        vclamp(&d->rem);
        d->claimed = d->nboot = d->nprov = 0;
        d->picks = d->picks_tail = NONE32;
        d->has_domain = d->same_sat = false;
        d->domain = 0;
        d->cands = NULL;
        d->cand_vals = NULL;
        d->ncand = 0;
        d->unresolved = NONE32;
        d->victims = 0;
        bf_vec_zero(&d->freed);
    }
    e->t_credit_ns = 0;
    int64_t t0 = bfe_mono_ns();
    uint64_t *ord = ANEW(&e->ar, uint64_t, n ? n : 1);
    uint64_t *tmp = ANEW(&e->ar, uint64_t, n ? n : 1);
    if (!ord || !tmp)
        return -ENOMEM;
    /* 1. pre-pass: priority desc, stable on D (credit.c keeps what did not
     * change since the last cycle and derives the rest here) */
    for (uint32_t i = 0; i < n; i++)
        ord[i] = (prio_desc_key(e->d[i].cp->prio) << 32) | i;
    bfe_sort_tail(ord, n, sizeof *ord, u64_cmp, tmp);
    TRY(bfe_credit_prepass(e, ord, n, &prepass_ops));
    e->t_credit_ns = bfe_mono_ns() - t0;
    if (!n)
        return 0;
    /* 2. worker phase: precedence (priority, ipb, rpb) desc, stable on D */
    uint32_t q = 0;
    unsigned __int128 *qk = ANEW(&e->ar, unsigned __int128, n);
    if (!qk)
        return -ENOMEM;
    /* no Idle and no Speculative leaf at all: every pool is empty (the
     * state lists hold every leaf; the type lists are parts of them), so a
     * plain Need's worker (find_basic) takes nothing and is left out; the
     * reference engine runs every worker */
    const struct leaflist *li = list_at(e, LK_STATE(BF_STATE_IDLE));
    const struct leaflist *ls = list_at(e, LK_STATE(BF_STATE_SPECULATIVE));
    bool no_pool = !(e->cfg.flags & BF_ENGINE_F_REFERENCE) && (!li || !li->n) && (!ls || !ls->n);
    for (uint32_t i = 0; i < n; i++) {
        const struct dneed *d = &e->d[i];
        if (bf_vec_is_zero(&d->rem))
            continue;
        if (no_pool && !d->cp->has_same && !d->cp->strict_spread)
            continue;
        uint64_t hi = (prio_desc_key(d->cp->prio) << 16) | ((uint64_t)(255 - d->cp->ipb) << 8) |
                      (uint64_t)(255 - d->cp->rpb);
        qk[q++] = ((unsigned __int128)hi << 32) | i;
    }
    /* insertion-friendly: sort 128-bit keys */
    for (uint32_t i = 1; i < q && q <= 32; i++) {
        unsigned __int128 x = qk[i];
        uint32_t j = i;
        while (j > 0 && qk[j - 1] > x) {
            qk[j] = qk[j - 1];
            j--;
        }
        qk[j] = x;
    }
    if (q > 32)
        bfe_qsort(qk, q, sizeof *qk, bfe_u128_cmp);
    for (uint32_t k = 0; k < q; k++)
        TRY(worker(e, (uint32_t)qk[k]));
    /* 3. barrier: actions per Need in D order */
    for (uint32_t i = 0; i < n; i++) {
        const struct dneed *d = &e->d[i];
        if (!d->nboot && !d->nprov)
            continue;
        for (int pass = 0; pass < 2; pass++) {
            uint8_t want = pass == 0 ? BF_STATE_IDLE : BF_STATE_SPECULATIVE;
            for (uint32_t p = d->picks; p != NONE32; p = e->picks[p].next) {
                if (e->picks[p].state != want)
                    continue;
                struct bf_engine_action a = {0};
                a.kind = pass == 0 ? BF_ACTION_BOOTSTRAP : BF_ACTION_PROVISION;
                a.reason = pass == 0 ? BF_REASON_PHASE1_IDLE : BF_REASON_PHASE1_SPECULATIVE;
                a.slot = e->picks[p].slot;
                a.need = i;
                a.priority = d->cp->prio;
                a.ipb = d->cp->ipb;
                a.rpb = d->cp->rpb;
                a.cluster = bfe_str(&e->in, e->clusters[d->cluster].name);
                a.fingerprint = bfe_str(&e->in, d->cp->fp);
                a.group = bfe_str(&e->in, d->group);
                a.group_len = bfe_strlen(&e->in, d->group);
                TRY(bfe_emit(e, &a));
            }
        }
    }
    return 0;
}
