/*
 * phase23.c — Phase 2, priority inversions (reference/engine.md §5), and
 * Phase 3, reclaim and idle release (§6, seeds/004 ADR-0036).
 *
 * Phase 2: Phase 1's unsatisfied Needs by priority desc (stable); victims are
 * Configured machines of strictly lower assigned priority that pass
 * MatchProfile (any cluster), ranked by VictimScore desc then id, minus the
 * machines this cycle's credit pass gave to Needs of the preemptor's
 * priority or higher (a prefix of each leaf; docs/engine.md §3); a Phase-2
 * local claimed set (per-leaf prefix counter); MinUnit and the Same domain
 * filter per Need. Candidate leaves are cached per (profile, preemptor
 * priority) for the cycle; only the priority lists below P are visited.
 *
 * Phase 3: clusters with Configured supply in id order, skipping clusters
 * whose first rollup has not arrived (ADR-0036) and clusters whose claimed
 * count equals their Configured count; the unclaimed remainder is emitted in
 * keep-priority order, except machines Phase 2 picked as victims this cycle
 * (they already carry a Preempt; Go emits both and the shard's enqueue
 * de-duplication drops the Reclaim, so dropping it here changes no outcome
 * and keeps the reclaim cap counting only real reclaims). Then Deletes for unclaimed Idle machines
 * past their CapacityType hold, in id order (the hold structure is ordered by idle-since, so only
 * expired machines are visited). Releases are never gated.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cycle/engine/engine_internal.h"

double bf_engine_victim_score(const struct bf_engine_config *c, int32_t p, int32_t v, uint8_t ipb,
                              uint8_t rpb)
{
    double gap = (double)p - (double)v;
    if (gap < 0)
        gap = 0;
    double drain = c->drain_estimate_s > 1 ? c->drain_estimate_s : 1;
    double pen = bf_bucket_upper_bound(ipb), rec = bf_bucket_upper_bound(rpb);
    if (pen < 0.01)
        pen = 0.01;
    if (rec < 0.01)
        rec = 0.01;
    double s = gap * c->w_priority + (1.0 / drain) * c->w_drain;
    if (!isinf(pen))
        s += (1.0 / pen) * c->w_interruption;
    if (!isinf(rec))
        s += (1.0 / rec) * c->w_reclamation;
    return s;
}

int64_t bf_engine_drain_grace_s(int32_t p, int32_t v)
{
    int64_t gap = (int64_t)p - (int64_t)v;
    if (gap > 900000)
        return 10;
    if (gap > 500000)
        return 30;
    if (gap > 100000)
        return 120;
    return 600;
}

/* ------------------------------------------------------------------ Phase 2 */

struct vcache {
    uint32_t *leaves;
    double *score;
    uint32_t n;
};

static bool pinned_has(const struct cprof *cp, uint32_t itype)
{
    for (uint32_t i = 0; i < cp->npin; i++)
        if (cp->pin[i] == itype)
            return true;
    return false;
}

static int victims_of(struct bf_engine *e, struct cprof *cp, int32_t P, struct bfe_u64map *vmap,
                      struct vcache **vc, uint32_t *nvc, uint32_t *capvc, struct vcache **out)
{
    uint64_t key = ((uint64_t)cp->idx << 32) | (uint32_t)P;
    uint32_t idx = bfe_u64map_get(vmap, key, NONE32);
    if (idx != NONE32) {
        *out = &(*vc)[idx];
        return 0;
    }
    uint32_t total = 0;
    for (uint32_t k = 0; k < e->n_prio && e->prio_keys[k] < P; k++)
        total += e->lists[e->prio_lists[k]].n;
    if (*nvc == *capvc) {
        uint32_t nc = *capvc ? *capvc * 2 : 16;
        struct vcache *nv = ANEW(&e->ar, struct vcache, nc);
        if (!nv)
            return -ENOMEM;
        if (*nvc)
            memcpy(nv, *vc, *nvc * sizeof *nv);
        *vc = nv;
        *capvc = nc;
    }
    struct vcache *c = &(*vc)[*nvc];
    c->leaves = ANEW(&e->ar, uint32_t, total ? total : 1);
    c->score = ANEW(&e->ar, double, total ? total : 1);
    if (!c->leaves || !c->score)
        return -ENOMEM;
    c->n = 0;
    for (uint32_t k = 0; k < e->n_prio && e->prio_keys[k] < P; k++) {
        const struct leaflist *ll = &e->lists[e->prio_lists[k]];
        for (uint32_t i = 0; i < ll->n; i++) {
            const struct leaf *l = &e->leaves[ll->v[i]];
            if (cp->pinned && !pinned_has(cp, e->cls[l->k.cls].itype))
                continue;
            if (!bfe_match_class(e, cp, l->k.cls))
                continue;
            c->leaves[c->n] = ll->v[i];
            c->score[c->n] = bf_engine_victim_score(&e->cfg, P, l->k.prio, l->k.ipb, l->k.rpb);
            c->n++;
        }
    }
    TRY(bfe_u64map_put(vmap, key, *nvc));
    *out = c;
    (*nvc)++;
    return 0;
}

/*
 * How much of leaf l this cycle's credit pass gave to Needs of priority >= p.
 * Credit runs in priority order and claims each leaf as a prefix in id order
 * (one run per Need and leaf), so that part is a prefix too: a preemptor of
 * priority p starts its victims after it. Without this, a machine configured
 * for a lower-priority Need (its assigned priority) but credited this cycle
 * to a Need of priority >= p of its cluster would be taken from that Need.
 */
static int credited_at_or_above(struct bf_engine *e, const struct leaf *l, int32_t p, uint32_t *out)
{
    uint32_t end = 0;
    /* a cluster leaf's credit claims are kept by credit.c: onto the runs first */
    if (l->cluster_idx != NONE32)
        TRY(bfe_credit_load_runs(e, l->cluster_idx));
    for (uint32_t r = l->runs; r != NONE32; r = e->runs[r].next) {
        const struct run *ru = &e->runs[r];
        if (e->d[ru->need].cp->prio >= p && ru->start + ru->count > end)
            end = ru->start + ru->count;
    }
    *out = end;
    return 0;
}

static int add_unresolved(struct bf_engine *e, uint32_t di, bool preempted)
{
    struct dneed *d = &e->d[di];
    TRY(GROW(e->unres, e->cap_unres, e->n_unres + 1));
    struct bf_engine_unresolved *u = &e->unres[e->n_unres];
    u->need = di;
    u->deficit = d->p2rem;
    u->preempted = preempted;
    u->victims_found = d->victims;
    u->capacity_freed = d->freed;
    d->unresolved = e->n_unres++;
    return 0;
}

static int u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int bfe_phase2(struct bf_engine *e)
{
    e->n_unres = 0;
    uint32_t n = 0;
    for (uint32_t i = 0; i < e->n_d; i++)
        n += !bf_vec_is_zero(&e->d[i].rem);
    if (!n)
        return 0;
    uint64_t *ord = ANEW(&e->ar, uint64_t, n);
    if (!ord)
        return -ENOMEM;
    n = 0;
    for (uint32_t i = 0; i < e->n_d; i++)
        if (!bf_vec_is_zero(&e->d[i].rem))
            ord[n++] = ((uint64_t)((int64_t)INT32_MAX - e->d[i].cp->prio) << 32) | i;
    bfe_qsort(ord, n, sizeof *ord, u64_cmp);
    /* the lowest priority any leaf is listed under: a Need at or below it
     * has no victim (victims_of's lists are those of priorities < the
     * Need's, all empty) and is unresolved as it is, without its victim
     * set; the reference engine builds every set */
    bool any = false;
    int32_t lowest = 0;
    for (uint32_t k = 0; k < e->n_prio && !any; k++)
        if (e->lists[e->prio_lists[k]].n) {
            any = true;
            lowest = e->prio_keys[k];
        }
    bool skip = !(e->cfg.flags & BF_ENGINE_F_REFERENCE);
    struct bfe_u64map *vmap = &e->victim_map;
    bfe_u64map_clear(vmap);
    struct vcache *vc = NULL;
    uint32_t nvc = 0, capvc = 0;
    int rc = 0;
    for (uint32_t k = 0; k < n && !rc; k++) {
        uint32_t di = (uint32_t)ord[k];
        struct dneed *d = &e->d[di];
        struct cprof *cp = d->cp;
        d->p2rem = d->rem;
        if (d->parked || (cp->has_same && !d->has_domain)) {
            rc = add_unresolved(e, di, false);
            continue;
        }
        if (skip && (!any || cp->prio <= lowest)) {
            rc = add_unresolved(e, di, false); /* no victim: d->victims is 0 */
            continue;
        }
        struct vcache *c;
        if ((rc = victims_of(e, cp, cp->prio, vmap, &vc, &nvc, &capvc, &c)))
            break;
        struct arena_mark mk = bfe_arena_mark(&e->sc);
        struct mcur *cur = ANEW(&e->sc, struct mcur, c->n ? c->n : 1);
        if (!cur) {
            rc = -ENOMEM;
            break;
        }
        uint32_t nc = 0;
        for (uint32_t i = 0; i < c->n; i++) {
            struct leaf *l = bfe_leaf_cyc(e, c->leaves[i]);
            uint32_t kept;
            if ((rc = credited_at_or_above(e, l, cp->prio, &kept)))
                break;
            if (l->p2taken < kept)
                l->p2taken = kept; /* Needs come by priority desc: kept only grows */
            if (l->p2taken >= l->sl.n)
                continue;
            const struct mclass *cl = &e->cls[l->k.cls];
            if (!bf_vec_covers(&cl->alloc, &d->minu))
                continue;
            if (cp->has_same && bfe_class_attr(e, cl, cp->same_kind, cp->same_key) != d->domain)
                continue;
            bfe_mcur_init(e, &cur[nc++], c->leaves[i], l->p2taken, -c->score[i], 0);
        }
        if (rc) {
            bfe_arena_release(&e->sc, mk);
            break;
        }
        struct merge m;
        bfe_merge_init(&m, e, cur, nc);
        uint32_t slot, li;
        while (!bf_vec_is_zero(&d->p2rem) && bfe_merge_next(&m, &slot, &li)) {
            struct leaf *l = &e->leaves[li];
            l->p2taken++;
            const bf_vec *a = &e->cls[l->k.cls].alloc;
            bfe_vec_sub_scaled(&d->p2rem, a, 1);
            bfe_vec_add_scaled(&d->freed, a, 1);
            d->victims++;
            struct bf_engine_action act = {0};
            act.kind = BF_ACTION_PREEMPT;
            act.reason = BF_REASON_PHASE2_INVERSION;
            act.slot = slot;
            act.need = di;
            act.cluster = bfe_str(&e->in, l->k.cluster);
            act.fingerprint = "";
            act.group = "";
            act.grace_s = bf_engine_drain_grace_s(cp->prio, l->k.prio);
            act.preemptor_priority = cp->prio;
            if ((rc = bfe_emit(e, &act)))
                break;
        }
        bfe_arena_release(&e->sc, mk);
        if (!rc && !bf_vec_is_zero(&d->p2rem))
            rc = add_unresolved(e, di, d->victims > 0);
    }
    return rc;
}

/* ------------------------------------------------------------------ Phase 3 */

static bool slot_claimed(struct bf_engine *e, uint32_t slot)
{
    return bfe_claimed_rank(e, slot) != NONE32;
}

static struct bf_engine *id_sort_e;
static int slot_id_cmp(const void *a, const void *b)
{
    return bfe_id_cmp(id_sort_e, *(const uint32_t *)a, *(const uint32_t *)b);
}

static bool expired(int64_t now_ns, int64_t since_s, int64_t hold_s)
{
    int64_t since_ns, hold_ns, el;
    if (__builtin_mul_overflow(since_s, (int64_t)1000000000, &since_ns) ||
        __builtin_mul_overflow(hold_s, (int64_t)1000000000, &hold_ns) ||
        __builtin_sub_overflow(now_ns, since_ns, &el))
        return false;
    return el >= hold_ns;
}

int bfe_phase3(struct bf_engine *e, int64_t now_ns)
{
    /* 6.1 reclaim */
    for (uint32_t k = 0; k < e->n_clusters; k++) {
        uint32_t ci = e->cluster_order[k];
        struct cluster *cl = &e->clusters[ci];
        if (!cl->conf_count || !cl->first_rollup || !cl->ntl[0])
            continue;
        if (bfe_credit_cluster_claimed(e, ci) >= cl->conf_count)
            continue;
        uint32_t nl = 0;
        for (uint32_t t = 0; t < cl->ntl[0]; t++)
            nl += e->lists[cl->tl[0][t]].n;
        struct arena_mark mk = bfe_arena_mark(&e->sc);
        struct mcur *cur = ANEW(&e->sc, struct mcur, nl ? nl : 1);
        if (!cur)
            return -ENOMEM;
        uint32_t nc = 0;
        for (uint32_t t = 0; t < cl->ntl[0]; t++) {
            const struct leaflist *ll = &e->lists[cl->tl[0][t]];
            for (uint32_t i = 0; i < ll->n; i++) {
                struct leaf *l = bfe_leaf_cyc(e, ll->v[i]);
                /* Phase 2 victims (the p2taken prefix) already carry a Preempt:
                 * no second action for the same machine */
                uint32_t taken = bfe_leaf_taken(e, l);
                uint32_t from = taken > l->p2taken ? taken : l->p2taken;
                bfe_mcur_init(e, &cur[nc++], ll->v[i], from, l->k.price, -l->rp_dollars);
            }
        }
        struct merge m;
        bfe_merge_init(&m, e, cur, nc);
        uint32_t slot;
        const char *name = bfe_str(&e->in, cl->name);
        while (bfe_merge_next(&m, &slot, NULL)) {
            struct bf_engine_action a = {0};
            a.kind = BF_ACTION_RECLAIM;
            a.reason = BF_REASON_PHASE3_EXCESS;
            a.slot = slot;
            a.need = NONE32;
            a.cluster = name;
            a.fingerprint = "";
            a.group = "";
            a.grace_s = e->cfg.reclaim_grace_s;
            TRY(bfe_emit(e, &a));
        }
        bfe_arena_release(&e->sc, mk);
    }
    /* 6.2 idle release */
    const int64_t holds[2] = {e->cfg.ondemand_hold_s, e->cfg.spot_hold_s};
    uint32_t nrel = 0;
    for (int r = 0; r < 2; r++)
        nrel += holds[r] > 0 ? e->release[r].n : 0;
    if (!nrel)
        return 0;
    struct arena_mark mk = bfe_arena_mark(&e->sc);
    uint32_t *v = ANEW(&e->sc, uint32_t, nrel);
    if (!v)
        return -ENOMEM;
    uint32_t nv = 0;
    for (int r = 0; r < 2; r++) {
        if (holds[r] <= 0)
            continue;
        const struct slotlist *sl = &e->release[r];
        for (uint32_t c = 0; c < sl->nch; c++) {
            bool stop = false;
            for (uint32_t o = 0; o < sl->ch[c]->n; o++) {
                uint32_t slot = sl->ch[c]->s[o];
                if (!expired(now_ns, e->idle_since[slot], holds[r])) {
                    stop = true;
                    break;
                }
                if (!slot_claimed(e, slot))
                    v[nv++] = slot;
            }
            if (stop)
                break;
        }
    }
    id_sort_e = e;
    bfe_qsort(v, nv, sizeof *v, slot_id_cmp);
    id_sort_e = NULL;
    int rc = 0;
    for (uint32_t i = 0; i < nv && !rc; i++) {
        struct bf_engine_action a = {0};
        a.kind = BF_ACTION_DELETE;
        a.reason = BF_REASON_PHASE3_RELEASE;
        a.slot = v[i];
        a.need = NONE32;
        a.cluster = "";
        a.fingerprint = "";
        a.group = "";
        rc = bfe_emit(e, &a);
    }
    bfe_arena_release(&e->sc, mk);
    return rc;
}
