/*
 * same.c — the Same Needs' domain ranking over shared acquirable supply
 * (the fast path of the pre-pass's Same arm, reference/engine.md §4.3).
 *
 * The pre-pass ranks a Same Need's domains by ChooseSameBucket's rules over
 * buckets holding its own cluster's creditable supply plus the shard-wide
 * acquirable (Idle + Speculative) supply left after earlier Same Needs'
 * virtual consumption. phase1.c's full derivation folds every class of the
 * Need's instance types into buckets and ranks all of them, for every Same
 * Need. Here the acquirable part is shared:
 *   - a pool per (compiled profile, MinUnit) holds, per domain, the
 *     acquirable count and capacity of the classes the fold would visit,
 *     built once per cycle and kept exact as Needs consume (a domain's sums
 *     are recomputed from its classes, so saturation behaves as in the fold);
 *   - a ranking per (pool, aggregate) holds the pool's domains sorted by
 *     bfe_key_better as if they had no creditable supply (cred = own = 0),
 *     kept sorted as consumption changes a domain;
 *   - a Need ranks its creditable domains (a few: its cluster's leaves)
 *     with their acquirable supply added, and merges that short sorted list
 *     with the shared ranking, skipping the domains it already ranked.
 * bfe_key_better is a strict total order (it ends on the domain string), so
 * the merge yields exactly the order of ranking every bucket: the same best
 * domain, satisfiability and top-K candidates with the same coverage. Sums of
 * non-negative terms saturate to the same value in any order. The
 * randomized suite holds this path to the full derivation
 * (BF_ENGINE_F_NO_INCREMENTAL / BF_ENGINE_F_REFERENCE use phase1.c's).
 *
 * Storage: pools and rankings live in the cycle arena (e->ar) and are
 * dropped with it; e->apools is reset by the pre-pass at the start of every
 * cycle.
 *
 * ChooseSameBucket's keys themselves (bfe_rank_key_of, bfe_key_better,
 * bfe_coverage_per_mille) are defined here, below phase1.c and credit.c,
 * which both rank with them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cycle/engine/engine_internal.h"

struct adom {
    uint32_t value; /* domain string id */
    uint32_t count; /* acquirable machines */
    bf_vec total;   /* their capacity */
};

struct arent {
    struct rank_key k;
    int32_t cov;
    uint32_t dom; /* index into the pool's domains */
};

struct arank {
    struct arank *next;
    const struct apool *pool;
    uint32_t hnext; /* next object with the same lookup key */
    bf_vec agg;
    struct arent *v; /* sorted best first; capacity: the pool's domains */
    uint32_t n;
};

struct apool {
    struct apool *next;
    uint32_t hnext; /* next object with the same lookup key */
    const struct cprof *cp;
    bf_vec minu;
    uint32_t *cls;  /* classes the fold visits, by id */
    uint32_t *cdom; /* their domain index */
    uint32_t ncls;
    struct adom *dom; /* by domain string id */
    uint32_t ndom;
    struct arank *ranks;
};

/* ------------------------------------------------------------------ bucket keys */

/* ChooseSameBucket's comparison (engine.md §4.3), shared by both paths: the
 * full derivation's fold (phase1.c) and the shared rankings below. */

double bfe_same_score(const bf_vec *total, const bf_vec *deficit, bool capped)
{
    double s = 0;
    for (int i = 0; i < BF_MAX_DIMS; i++) {
        if (deficit->v[i] <= 0)
            continue;
        double t = (double)total->v[i] / (double)deficit->v[i];
        if (capped && t > 1)
            t = 1;
        s += t;
    }
    return s;
}

void bfe_rank_key_of(const struct same_bucket *b, const bf_vec *d, struct rank_key *k)
{
    k->sat = bf_vec_covers(&b->total, d);
    k->cred = bfe_same_score(&b->cred_total, d, true);
    k->own = bfe_same_score(&b->own_total, d, true);
    k->score = bfe_same_score(&b->total, d, !k->sat);
    k->count = b->count;
    k->value = b->value;
}

/* ChooseSameBucket's replacement rules 2-8 (engine.md §4.3): does c beat b? */
bool bfe_key_better(const struct bf_engine *e, const struct rank_key *c, const struct rank_key *b)
{
    if (c->sat != b->sat)
        return c->sat;
    if (c->sat) {
        if (c->cred != b->cred)
            return c->cred > b->cred;
        if (c->own != b->own)
            return c->own > b->own;
    }
    if (c->score != b->score)
        return c->sat ? c->score < b->score : c->score > b->score;
    if (c->cred != b->cred)
        return c->cred > b->cred;
    if (c->count != b->count)
        return c->count > b->count;
    return bfe_strcmp_id(&e->in, c->value, b->value) < 0;
}

bool bfe_same_better(const struct bf_engine *e, const struct same_bucket *c,
                     const struct same_bucket *b, const bf_vec *d)
{
    struct rank_key kc, kb;
    bfe_rank_key_of(c, d, &kc);
    bfe_rank_key_of(b, d, &kb);
    return bfe_key_better(e, &kc, &kb);
}

int bfe_same_choose(const struct bf_engine *e, const struct same_bucket *bk, uint32_t n,
                    const bf_vec *d)
{
    int best = -1;
    struct rank_key kb, kc;
    for (uint32_t i = 0; i < n; i++) {
        if (bk[i].count == 0)
            continue;
        bfe_rank_key_of(&bk[i], d, &kc);
        if (best < 0 || bfe_key_better(e, &kc, &kb)) {
            best = (int)i;
            kb = kc;
        }
    }
    return best;
}

int32_t bfe_coverage_per_mille(const bf_vec *total, const bf_vec *d)
{
    double worst = 1.0;
    for (int i = 0; i < BF_MAX_DIMS; i++) {
        if (d->v[i] <= 0)
            continue;
        double t = (double)total->v[i] / (double)d->v[i];
        if (t < worst)
            worst = t;
    }
    if (worst < 0)
        worst = 0;
    return (int32_t)(worst * 1000.0);
}

/* ------------------------------------------------------------------ pools */

static uint32_t class_avail(struct bf_engine *e, uint32_t ci)
{
    const struct mclass *c = bfe_class_cyc(e, ci);
    return c->count[BF_STATE_IDLE] - c->consumed[0] + c->count[BF_STATE_SPECULATIVE] -
           c->consumed[1];
}

/* the domain's sums from its classes, as the fold adds them */
static void dom_sum(struct bf_engine *e, struct apool *p, uint32_t di)
{
    struct adom *d = &p->dom[di];
    d->count = 0;
    bf_vec_zero(&d->total);
    for (uint32_t i = 0; i < p->ncls; i++) {
        if (p->cdom[i] != di)
            continue;
        uint32_t avail = class_avail(e, p->cls[i]);
        if (!avail)
            continue;
        d->count += avail;
        bfe_vec_add_scaled(&d->total, &e->cls[p->cls[i]].alloc, avail);
    }
}

static int u32_cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static int u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint32_t dom_find(const struct apool *p, uint32_t value)
{
    uint32_t lo = 0, hi = p->ndom;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (p->dom[mid].value < value)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < p->ndom && p->dom[lo].value == value ? lo : NONE32;
}

static int pool_build(struct bf_engine *e, struct cprof *cp, const bf_vec *minu, struct apool **out)
{
    uint32_t ntypes = cp->pinned ? cp->npin : 1, total = 0;
    for (uint32_t t = 0; t < ntypes; t++) {
        const struct leaflist *cl = NULL;
        if (cp->pinned) {
            uint32_t idx = bfe_u64map_get(&e->type_classes_map, cp->pin[t], NONE32);
            cl = idx == NONE32 ? NULL : &e->type_classes[idx];
        } else {
            cl = &e->all_classes;
        }
        total += cl ? cl->n : 0;
    }
    struct apool *p = ANEW(&e->ar, struct apool, 1);
    uint64_t *pairs = ANEW(&e->ar, uint64_t, total ? total : 1);
    if (!p || !pairs)
        return -ENOMEM;
    memset(p, 0, sizeof *p);
    p->cp = cp;
    p->minu = *minu;
    /* the classes the fold would visit: with Idle or Speculative machines,
     * matching, covering MinUnit, carrying the Same key */
    uint32_t n = 0;
    for (uint32_t t = 0; t < ntypes; t++) {
        const struct leaflist *cl = NULL;
        if (cp->pinned) {
            uint32_t idx = bfe_u64map_get(&e->type_classes_map, cp->pin[t], NONE32);
            cl = idx == NONE32 ? NULL : &e->type_classes[idx];
        } else {
            cl = &e->all_classes;
        }
        for (uint32_t i = 0; cl && i < cl->n; i++) {
            uint32_t ci = cl->v[i];
            const struct mclass *c = &e->cls[ci];
            if (!c->count[BF_STATE_IDLE] && !c->count[BF_STATE_SPECULATIVE])
                continue;
            if (!bfe_match_class(e, cp, ci) || !bf_vec_covers(&c->alloc, minu))
                continue;
            uint32_t v = bfe_class_attr(e, c, cp->same_kind, cp->same_key);
            if (v == NONE32)
                continue;
            pairs[n++] = ((uint64_t)ci << 32) | v;
        }
    }
    bfe_qsort(pairs, n, sizeof *pairs, u64_cmp); /* by class id */
    p->cls = ANEW(&e->ar, uint32_t, n ? n : 1);
    p->cdom = ANEW(&e->ar, uint32_t, n ? n : 1);
    uint32_t *vals = ANEW(&e->ar, uint32_t, n ? n : 1);
    if (!p->cls || !p->cdom || !vals)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i++)
        vals[i] = (uint32_t)pairs[i];
    bfe_qsort(vals, n, sizeof *vals, u32_cmp);
    uint32_t nd = 0;
    for (uint32_t i = 0; i < n; i++)
        if (!nd || vals[nd - 1] != vals[i])
            vals[nd++] = vals[i];
    p->dom = ANEW(&e->ar, struct adom, nd ? nd : 1);
    if (!p->dom)
        return -ENOMEM;
    for (uint32_t i = 0; i < nd; i++)
        p->dom[i].value = vals[i];
    p->ndom = nd;
    p->ncls = n;
    for (uint32_t i = 0; i < n; i++) {
        p->cls[i] = (uint32_t)(pairs[i] >> 32);
        p->cdom[i] = dom_find(p, (uint32_t)pairs[i]);
    }
    for (uint32_t i = 0; i < nd; i++)
        dom_sum(e, p, i);
    p->next = e->apools;
    e->apools = p;
    *out = p;
    return 0;
}

/* per-cycle lookup of pools and rankings: a u64 key of their inputs to the
 * first object with that key; equal keys chain through `hnext` */
static uint64_t pool_key(const struct cprof *cp, const bf_vec *minu)
{
    return bfe_mix64(bfe_hash_bytes(minu, sizeof *minu, 17) ^ ((uint64_t)cp->idx << 1));
}

static uint64_t rank_key_hash(const struct apool *p, const bf_vec *agg)
{
    return bfe_mix64(bfe_hash_bytes(agg, sizeof *agg, 19) ^ (uint64_t)(uintptr_t)p ^ 1);
}

static int obj_put(struct bf_engine *e, uint64_t key, void *obj, uint32_t *chain)
{
    TRY(GROW(e->aobj, e->cap_aobj, e->n_aobj + 1));
    uint32_t idx = e->n_aobj++;
    e->aobj[idx] = obj;
    *chain = bfe_u64map_get(&e->amap, key, NONE32);
    if (*chain != NONE32)
        bfe_u64map_del(&e->amap, key, NULL);
    return bfe_u64map_put(&e->amap, key, idx);
}

static int pool_get(struct bf_engine *e, struct cprof *cp, const bf_vec *minu, struct apool **out)
{
    uint64_t key = pool_key(cp, minu);
    for (uint32_t i = bfe_u64map_get(&e->amap, key, NONE32); i != NONE32;) {
        struct apool *p = e->aobj[i];
        if (p->cp == cp && bf_vec_eq(&p->minu, minu)) {
            *out = p;
            return 0;
        }
        i = p->hnext;
    }
    TRY(pool_build(e, cp, minu, out));
    return obj_put(e, key, *out, &(*out)->hnext);
}

/* ------------------------------------------------------------------ rankings */

static void ent_of(const struct apool *p, uint32_t di, const bf_vec *agg, struct arent *x)
{
    struct same_bucket b;
    memset(&b, 0, sizeof b);
    b.value = p->dom[di].value;
    b.count = p->dom[di].count;
    b.total = p->dom[di].total;
    bfe_rank_key_of(&b, agg, &x->k);
    x->cov = bfe_coverage_per_mille(&b.total, agg);
    x->dom = di;
}

/* stable merge sort of entries by bfe_key_better (a total order) */
static void ent_sort(const struct bf_engine *e, struct arent *v, struct arent *tmp, uint32_t n)
{
    if (n < 2)
        return;
    if (n <= 16) {
        for (uint32_t i = 1; i < n; i++) {
            struct arent x = v[i];
            uint32_t j = i;
            while (j > 0 && bfe_key_better(e, &x.k, &v[j - 1].k)) {
                v[j] = v[j - 1];
                j--;
            }
            v[j] = x;
        }
        return;
    }
    uint32_t h = n / 2;
    ent_sort(e, v, tmp, h);
    ent_sort(e, v + h, tmp, n - h);
    uint32_t i = 0, j = h, k = 0;
    while (i < h && j < n)
        tmp[k++] = bfe_key_better(e, &v[j].k, &v[i].k) ? v[j++] : v[i++];
    while (i < h)
        tmp[k++] = v[i++];
    while (j < n)
        tmp[k++] = v[j++];
    memcpy(v, tmp, n * sizeof *v);
}

static int rank_get(struct bf_engine *e, struct apool *p, const bf_vec *agg,
                    const struct arank **out)
{
    uint64_t key = rank_key_hash(p, agg);
    for (uint32_t i = bfe_u64map_get(&e->amap, key, NONE32); i != NONE32;) {
        struct arank *r = e->aobj[i];
        if (r->pool == p && bf_vec_eq(&r->agg, agg)) {
            *out = r;
            return 0;
        }
        i = r->hnext;
    }
    struct arank *r = ANEW(&e->ar, struct arank, 1);
    struct arent *v = ANEW(&e->ar, struct arent, p->ndom ? p->ndom : 1);
    if (!r || !v)
        return -ENOMEM;
    memset(r, 0, sizeof *r);
    r->pool = p;
    r->agg = *agg;
    r->v = v;
    for (uint32_t di = 0; di < p->ndom; di++)
        if (p->dom[di].count)
            ent_of(p, di, agg, &v[r->n++]);
    struct arena_mark mk = bfe_arena_mark(&e->sc);
    struct arent *tmp = ANEW(&e->sc, struct arent, r->n ? r->n : 1);
    if (!tmp)
        return -ENOMEM;
    ent_sort(e, v, tmp, r->n);
    bfe_arena_release(&e->sc, mk);
    r->next = p->ranks;
    p->ranks = r;
    TRY(obj_put(e, key, r, &r->hnext));
    *out = r;
    return 0;
}

/* domain di of pool p changed: its entry moves to its new place */
static void rank_move(const struct bf_engine *e, const struct apool *p, struct arank *r,
                      uint32_t di)
{
    for (uint32_t i = 0; i < r->n; i++)
        if (r->v[i].dom == di) {
            memmove(r->v + i, r->v + i + 1, (r->n - i - 1) * sizeof *r->v);
            r->n--;
            break;
        }
    if (!p->dom[di].count)
        return;
    struct arent x;
    ent_of(p, di, &r->agg, &x);
    uint32_t pos = 0;
    while (pos < r->n && bfe_key_better(e, &r->v[pos].k, &x.k))
        pos++;
    memmove(r->v + pos + 1, r->v + pos, (r->n - pos) * sizeof *r->v);
    r->v[pos] = x;
    r->n++;
}

void bfe_acq_reset(struct bf_engine *e)
{
    e->apools = NULL;
    e->n_aobj = 0;
    bfe_u64map_clear(&e->amap);
}

void bfe_acq_consumed(struct bf_engine *e, uint32_t ci)
{
    for (struct apool *p = e->apools; p; p = p->next) {
        uint32_t lo = 0, hi = p->ncls;
        while (lo < hi) {
            uint32_t mid = (lo + hi) / 2;
            if (p->cls[mid] < ci)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo >= p->ncls || p->cls[lo] != ci)
            continue;
        uint32_t di = p->cdom[lo];
        dom_sum(e, p, di);
        for (struct arank *r = p->ranks; r; r = r->next)
            rank_move(e, p, r, di);
    }
}

/* ------------------------------------------------------------------ choosing */

static int mark_domains(struct bf_engine *e, const struct cbk *cb, uint32_t nb)
{
    if (++e->dom_stamp == 0) {
        memset(e->scratch_dom_stamp, 0, (size_t)e->cap_scratch * sizeof(uint32_t));
        e->dom_stamp = 1;
    }
    for (uint32_t i = 0; i < nb; i++) {
        uint32_t v = cb[i].value;
        if (v >= e->cap_scratch) {
            uint32_t c1 = e->cap_scratch, c2 = e->cap_scratch;
            if (GROW(e->scratch_dom, c1, v + 1) || GROW(e->scratch_dom_stamp, c2, v + 1))
                return -ENOMEM;
            uint32_t nc = c1 < c2 ? c1 : c2;
            memset(e->scratch_dom_stamp + e->cap_scratch, 0,
                   (nc - e->cap_scratch) * sizeof(uint32_t));
            e->cap_scratch = nc;
        }
        e->scratch_dom_stamp[v] = e->dom_stamp;
    }
    return 0;
}

int bfe_same_rank(struct bf_engine *e, struct dneed *d, const struct cbk *cb, uint32_t nb)
{
    const struct arank *R = NULL;
    struct apool *P = NULL;
    if (!d->parked) {
        TRY(pool_get(e, d->cp, &d->minu, &P));
        TRY(rank_get(e, P, &d->agg, &R));
    }
    TRY(mark_domains(e, cb, nb));
    struct arena_mark mk = bfe_arena_mark(&e->sc);
    struct arent *ks = ANEW(&e->sc, struct arent, nb ? nb : 1);
    struct arent *tmp = ANEW(&e->sc, struct arent, nb ? nb : 1);
    if (!ks || !tmp)
        return -ENOMEM;
    /* the creditable domains with their acquirable supply added: the rank
     * key bfe_rank_key_of gives that bucket (cred_total = the creditable
     * total), with the two scores of the creditable part as recorded */
    for (uint32_t i = 0; i < nb; i++) {
        const struct cbk *b = &cb[i];
        uint32_t di = P ? dom_find(P, b->value) : NONE32;
        bf_vec total = b->total;
        uint32_t count = b->count;
        if (di != NONE32 && P->dom[di].count) {
            count += P->dom[di].count;
            bfe_vec_add_scaled(&total, &P->dom[di].total, 1);
        }
        struct rank_key *k = &ks[i].k;
        k->sat = bf_vec_covers(&total, &d->agg);
        k->cred = b->cred;
        k->own = b->own;
        k->score = bfe_same_score(&total, &d->agg, !k->sat);
        k->count = count;
        k->value = b->value;
        ks[i].cov = bfe_coverage_per_mille(&total, &d->agg);
        ks[i].dom = i;
    }
    ent_sort(e, ks, tmp, nb);
    /* merged with the acquirable-only domains: the best, then the candidates */
    uint32_t cap = (e->cfg.flags & BF_ENGINE_F_NO_VERDICTS) ? 0 : e->cfg.same_candidate_cap;
    uint32_t want = cap ? cap : 1;
    struct bf_engine_domain_coverage *out =
        cap ? ANEW(&e->ar, struct bf_engine_domain_coverage, cap) : NULL;
    uint32_t *vals = cap ? ANEW(&e->ar, uint32_t, cap) : NULL;
    if (cap && (!out || !vals))
        return -ENOMEM;
    uint32_t got = 0, i = 0, j = 0;
    d->has_domain = d->same_sat = false;
    d->domain = 0;
    while (got < want) {
        while (R && j < R->n && R->v[j].k.value < e->cap_scratch &&
               e->scratch_dom_stamp[R->v[j].k.value] == e->dom_stamp)
            j++; /* ranked with its creditable supply */
        const struct arent *a = i < nb ? &ks[i] : NULL, *b = R && j < R->n ? &R->v[j] : NULL;
        if (!a && !b)
            break;
        bool take_a = a && (!b || bfe_key_better(e, &a->k, &b->k));
        const struct arent *x = take_a ? a : b;
        if (got == 0) {
            d->has_domain = true;
            d->domain = x->k.value;
            d->same_sat = x->k.sat;
        }
        if (got < cap) {
            vals[got] = x->k.value;
            out[got].domain = bfe_str(&e->in, x->k.value);
            out[got].coverage_per_mille = x->cov;
            out[got].satisfiable = x->k.sat;
        }
        got++;
        if (take_a)
            i++;
        else
            j++;
    }
    d->ncand = got < cap ? got : cap;
    d->cands = d->ncand ? out : NULL;
    d->cand_vals = d->ncand ? vals : NULL;
    bfe_arena_release(&e->sc, mk);
    return 0;
}
