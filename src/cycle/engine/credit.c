/*
 * credit.c — the incremental Phase 1 credit pre-pass (issue 18): a cycle
 * re-derives only the pre-pass outcomes whose inputs changed since the last
 * cycle and keeps the others, with the same result as deriving all of them.
 *
 * What a Need's pre-pass outcome depends on (phase1.c, reference/engine.md
 * §4.1-§4.3). The pre-pass visits the normalized Needs in priority order; a
 * Need credits its own cluster's Configured and Configuring leaves (the
 * cluster lists), then its fingerprint's Creating leaves; a Same Need also
 * ranks domains by the shard-wide acquirable (Idle + Speculative) supply of
 * its instance types minus what earlier Same Needs virtually consumed, and
 * may consume some itself. So a Need's outcome is a function of
 *   (a) the cluster's normalized demand (its rows and their order),
 *   (b) the claims earlier Needs of the same cluster made on the cluster
 *       lists it reads, and the leaves of those lists,
 *   (c) its fingerprint's Creating list,
 *   (d) Same only: the parking flag, the Idle/Speculative counts of its
 *       instance types, and the virtual consumption of their leaves so far.
 * Each is versioned or recorded: (a) the cluster's demand version (dver,
 * bumped by set_needs and by a NormalizeDemand fold that changed; when it
 * moved, each row's key, below), (b) the cluster's supply version (cver,
 * bumped by every change to a leaf of its lists) plus, inside a cycle, a
 * per-list flag saying whether the claims on the list so far equal the
 * previous cycle's, (c) the list must still be empty (a Need that read a
 * non-empty one makes its cluster "volatile": derived again next cycle,
 * since Creating leaves are shared by every cluster demanding the
 * fingerprint), (d) the parking flag and a version per instance type (a
 * clock value taken by every Idle/Speculative count change) and the exact
 * consumption it saw on the leaves of its types.
 *
 * The memo (struct pmemo, one per cluster) keeps, per normalized Need in
 * the cluster's pre-pass order, its outcome (deficit, claims as runs on
 * leaves, chosen domain, candidates, consumption) and those inputs. Credit
 * claims on cluster leaves are kept on the leaves across cycles (ctaken,
 * valid while the leaf's epoch equals its cluster's), so a kept outcome
 * costs nothing on the leaves.
 *
 * A cycle: a cluster whose supply version moved, whose row count changed,
 * or that is volatile, is FRESH (new epoch: every claim on its leaves is
 * gone; every Need derived). Otherwise REPLAY: each Need in turn, in the
 * global pre-pass order, is kept when its inputs are unchanged (its claims
 * are on the leaves already, its consumption is applied again). When the
 * cluster's demand version moved (a rollup, a fold) the row's own Need is
 * one of those inputs: the row is kept only while the Need now in its place
 * has the key (struct rkey: compiled profile serial, group, aggregate,
 * MinUnit) it was derived for, the inputs prepass_need reads from its own
 * Need (the parking flag is checked apart); a derived row takes the claims of
 * the rows from it on back from the lists of both the old and the new Need,
 * and marks both sets diverged when its claims differ. The first Need whose inputs
 * changed turns the cluster PARTIAL: the claims of that Need and of every
 * later Need of the cluster are taken back from the lists it reads (rolled
 * back), it is derived, and where its claims differ from its memo the lists
 * are marked diverged, so a later Need reading them is derived too. Kept
 * Needs of a PARTIAL cluster put their claims back on rolled-back lists.
 * Derived and kept Needs together build the cluster's new memo.
 *
 * BF_ENGINE_F_REFERENCE and BF_ENGINE_F_NO_INCREMENTAL make every cluster
 * FRESH every cycle (the full derivation), which the randomized suite runs
 * beside this path under churn and requires to decide identically.
 *
 * Layering: Phase 1 (phase1.c) calls bfe_credit_prepass with its per-Need
 * derivation (struct bfe_prepass_ops), which records through the hooks
 * below; this file calls down only (same.c, the mirror). The acquirable
 * supply versions (d) are kept by the mirror (bfe_acq_ver).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cycle/engine/engine_internal.h"

/* memcpy of n elements that accepts NULL arrays when n is 0 */
#define COPY_N(dst, src, n)                                                                        \
    do {                                                                                           \
        if (n)                                                                                     \
            memcpy((dst), (src), (size_t)(n) * sizeof *(dst));                                     \
    } while (0)

/* ------------------------------------------------------------------ memo storage */

static void pm_clear(struct bf_engine *e, struct pmemo *pm)
{
    for (uint32_t i = 0; i < pm->nrows; i++) {
        if (pm->rows[i].has_domain)
            bfe_intern_release(&e->in, pm->rows[i].domain);
        bfe_intern_release(&e->in, pm->keys[i].group);
    }
    for (uint32_t i = 0; i < pm->ncands; i++)
        bfe_intern_release(&e->in, pm->cand_ids[i]);
    pm->nrows = pm->nruns = pm->nev = pm->ndep = pm->ncv = pm->nlists = pm->ncands = 0;
    pm->ncb = pm->waste = pm->nlv = 0;
    pm->valid = false;
    pm->tot[0] = pm->tot[1] = 0;
}

static void pm_free(struct bf_engine *e, struct pmemo *pm)
{
    pm_clear(e, pm);
    free(pm->rows);
    free(pm->runs);
    free(pm->ev);
    free(pm->dep);
    free(pm->cv);
    free(pm->lists);
    free(pm->cands);
    free(pm->cand_ids);
    free(pm->cb);
    free(pm->keys);
    free(pm->lv);
    memset(pm, 0, sizeof *pm);
}

void bfe_credit_free(struct bf_engine *e)
{
    for (uint32_t c = 0; c < e->n_clusters; c++) {
        pm_free(e, &e->clusters[c].pm[0]);
        pm_free(e, &e->clusters[c].pm[1]);
    }
    free(e->cons);
    bfe_u64map_free(&e->amap);
    free(e->aobj);
}

static inline struct pmemo *memo_of(struct cluster *cl)
{
    return &cl->pm[cl->pcur];
}

static inline struct pmemo *build_of(struct cluster *cl)
{
    return &cl->pm[cl->pcur ^ 1];
}

/* ------------------------------------------------------------------ consumption */

/* position of leaf li in e->cons (sorted by leaf id), or where it goes */
static uint32_t cons_pos(const struct bf_engine *e, uint32_t li)
{
    uint32_t lo = 0, hi = e->n_cons;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (e->cons[mid].leaf < li)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int cons_note(struct bf_engine *e, uint32_t li, uint32_t n)
{
    bfe_acq_consumed(e, e->leaves[li].k.cls); /* the shared rankings follow */
    uint32_t p = cons_pos(e, li);
    if (p < e->n_cons && e->cons[p].leaf == li) {
        e->cons[p].n += n;
        return 0;
    }
    TRY(GROW(e->cons, e->cap_cons, e->n_cons + 1));
    memmove(e->cons + p + 1, e->cons + p, (e->n_cons - p) * sizeof *e->cons);
    e->cons[p] = (struct cons_ent){li, n};
    e->n_cons++;
    return 0;
}

/* the consumption a Need of profile cp reads: leaves of its instance types */
static bool cons_visible(const struct bf_engine *e, const struct cprof *cp, uint32_t li)
{
    if (!cp->pinned)
        return true;
    uint32_t it = e->cls[e->leaves[li].k.cls].itype;
    for (uint32_t t = 0; t < cp->npin; t++)
        if (cp->pin[t] == it)
            return true;
    return false;
}

/* applies consumption (leaf li, n machines) as consume_domain does */
static int consume_apply(struct bf_engine *e, uint32_t li, uint32_t n)
{
    struct leaf *l = bfe_leaf_cyc(e, li);
    l->consumed += n;
    bfe_class_cyc(e, l->k.cls)->consumed[l->k.state == BF_STATE_IDLE ? 0 : 1] += n;
    return cons_note(e, li, n);
}

/* ------------------------------------------------------------------ hooks */

static struct prow *rec_row(struct bf_engine *e, struct pmemo **pm)
{
    if (!e->rec_pm)
        return NULL;
    *pm = e->rec_pm;
    return &(*pm)->rows[e->rec_row];
}

int bfe_credit_claim(struct bf_engine *e, uint32_t di, uint32_t li, uint32_t count)
{
    struct leaf *l = &e->leaves[li];
    struct pmemo *pm;
    struct prow *row = rec_row(e, &pm);
    /* a cluster leaf is credited only by its own cluster's Needs, which are
     * derived inside a recorded row */
    if (!row || e->rec_ci != l->cluster_idx)
        return -EINVAL;
    struct cluster *cl = &e->clusters[l->cluster_idx];
    if (l->cepoch != cl->cepoch) {
        l->cepoch = cl->cepoch;
        l->ctaken = 0;
    }
    uint32_t start = l->ctaken;
    struct crun *last = row->nrun ? &pm->runs[row->run0 + row->nrun - 1] : NULL;
    if (last && last->leaf == li && last->start + last->count == start) {
        last->count += count;
    } else {
        TRY(GROW(pm->runs, pm->capruns, pm->nruns + 1));
        pm->runs[pm->nruns++] = (struct crun){li, start, count};
        row->nrun++;
    }
    l->ctaken += count;
    row->ccount[l->k.state == BF_STATE_CONFIGURED ? 0 : 1] += count;
    e->d[di].claimed += count;
    return 0;
}

int bfe_credit_consume(struct bf_engine *e, uint32_t li, uint32_t count)
{
    struct pmemo *pm;
    struct prow *row = rec_row(e, &pm);
    if (!row)
        return -EINVAL; /* consumption happens only in a derived Same row */
    TRY(cons_note(e, li, count));
    struct cons_ent *last = row->nev ? &pm->ev[row->ev0 + row->nev - 1] : NULL;
    if (last && last->leaf == li) {
        last->n += count;
        return 0;
    }
    /* a leaf is consumed in one stretch per Need (merge order) or again
     * later: look back for it */
    for (uint32_t i = 0; i < row->nev; i++)
        if (pm->ev[row->ev0 + i].leaf == li) {
            pm->ev[row->ev0 + i].n += count;
            return 0;
        }
    TRY(GROW(pm->ev, pm->capev, pm->nev + 1));
    pm->ev[pm->nev++] = (struct cons_ent){li, count};
    row->nev++;
    return 0;
}

void bfe_credit_creating_read(struct bf_engine *e, uint32_t list)
{
    e->rec_creat_read = true;
    if (list != NONE32 && e->lists[list].n > 0)
        e->rec_creat_busy = true;
}

int bfe_credit_cbk(struct bf_engine *e, const struct same_bucket *bk, uint32_t nb,
                   const bf_vec *agg, const struct cbk **out)
{
    struct pmemo *pm;
    struct prow *row = rec_row(e, &pm);
    if (!row)
        return -EINVAL;
    TRY(GROW(pm->cb, pm->capcb, pm->ncb + nb));
    *out = nb ? pm->cb + pm->ncb : NULL; /* (no buckets: cb may be NULL) */
    for (uint32_t i = 0; i < nb; i++) {
        /* the creditable bucket's rank scores, as bfe_rank_key_of takes them
         * (its count and total equal cred_count and cred_total here) */
        struct rank_key k;
        bfe_rank_key_of(&bk[i], agg, &k);
        pm->cb[pm->ncb++] = (struct cbk){bk[i].value, bk[i].count, bk[i].total, k.cred, k.own};
    }
    row->ncb += nb;
    return 0;
}

static bool creating_nonempty(const struct bf_engine *e, uint32_t fp)
{
    uint32_t lid = bfe_u64map_get(&e->list_map, LK_CFP(fp), NONE32);
    return lid != NONE32 && e->lists[lid].n > 0;
}

/* ------------------------------------------------------------------ per-cycle list flags */

static inline struct leaflist *list_cyc(struct bf_engine *e, uint32_t lid)
{
    struct leaflist *ll = &e->lists[lid];
    if (ll->fstamp != e->stamp) {
        ll->fstamp = e->stamp;
        ll->rolled = ll->diverged = false;
    }
    return ll;
}

static inline bool list_diverged(const struct bf_engine *e, uint32_t lid)
{
    const struct leaflist *ll = &e->lists[lid];
    return ll->fstamp == e->stamp && ll->diverged;
}

static inline bool list_rolled(const struct bf_engine *e, uint32_t lid)
{
    const struct leaflist *ll = &e->lists[lid];
    return ll->fstamp == e->stamp && ll->rolled;
}

/* ------------------------------------------------------------------ rows */

enum { ROW_DERIVE = 0, ROW_KEEP = 1, ROW_RERANK = 2 };

/* the row was derived for a Need with d's own inputs */
static bool key_is(const struct rkey *k, const struct dneed *d)
{
    return k->serial == d->cp->serial && k->group == d->group && bf_vec_eq(&k->agg, &d->agg) &&
           bf_vec_eq(&k->minu, &d->minu);
}

/* What row r of memo pm needs (d is its normalized Need): ROW_KEEP when its
 * inputs are unchanged; ROW_RERANK when only the acquirable supply it ranked
 * domains over moved (a Same Need; its own cluster's inputs are unchanged);
 * ROW_DERIVE otherwise. */
static int row_check(const struct bf_engine *e, const struct cluster *cl, uint32_t r,
                     const struct dneed *d)
{
    const struct pmemo *pm = &cl->pm[cl->pcur];
    const struct prow *m = &pm->rows[r];
    if (cl->dkeys && !key_is(&pm->keys[r], d))
        return ROW_DERIVE; /* another Need (or the same one changed) is in its place */
    /* a row reads only its own cluster's lists: none diverged, none to check */
    for (uint32_t i = 0; cl->dvstamp == e->stamp && i < m->nl; i++)
        if (list_diverged(e, pm->lists[m->l0 + i]))
            return ROW_DERIVE;
    const struct cprof *cp = d->cp;
    if (m->creat_busy || (m->reach_creat && creating_nonempty(e, cp->fp)))
        return ROW_DERIVE;
    if (!cp->has_same)
        return ROW_KEEP;
    if (m->parked != d->parked)
        return ROW_DERIVE;
    if (d->parked)
        return ROW_KEEP;
    for (uint32_t i = 0; i < m->ndep; i++)
        if (bfe_acq_ver(e, pm->dep[m->dep0 + i].itype) != pm->dep[m->dep0 + i].ver)
            return ROW_RERANK;
    /* the consumption it sees now equals what it saw (both by leaf id) */
    uint32_t k = 0;
    for (uint32_t i = 0; i < e->n_cons; i++) {
        if (!cons_visible(e, cp, e->cons[i].leaf))
            continue;
        if (k >= m->ncv || pm->cv[m->cv0 + k].leaf != e->cons[i].leaf ||
            pm->cv[m->cv0 + k].n != e->cons[i].n)
            return ROW_RERANK;
        k++;
    }
    return k == m->ncv ? ROW_KEEP : ROW_RERANK;
}

/* appends an empty row to pm */
static int row_new(struct pmemo *pm, struct prow **out)
{
    TRY(GROW(pm->rows, pm->caprows, pm->nrows + 1));
    TRY(GROW(pm->keys, pm->capkeys, pm->nrows + 1));
    struct prow *r = &pm->rows[pm->nrows++];
    memset(r, 0, sizeof *r);
    r->run0 = pm->nruns;
    r->ev0 = pm->nev;
    r->dep0 = pm->ndep;
    r->cv0 = pm->ncv;
    r->l0 = pm->nlists;
    r->cand0 = pm->ncands;
    r->cb0 = pm->ncb;
    *out = r;
    return 0;
}

/* copies row r of src (kept as it is) to the end of dst */
static int row_transfer(struct bf_engine *e, const struct pmemo *src, uint32_t r, struct pmemo *dst)
{
    const struct prow *m = &src->rows[r];
    TRY(GROW(dst->runs, dst->capruns, dst->nruns + m->nrun));
    TRY(GROW(dst->ev, dst->capev, dst->nev + m->nev));
    TRY(GROW(dst->dep, dst->capdep, dst->ndep + m->ndep));
    TRY(GROW(dst->cv, dst->capcv, dst->ncv + m->ncv));
    TRY(GROW(dst->lists, dst->caplists, dst->nlists + m->nl));
    TRY(GROW(dst->cands, dst->capcands, dst->ncands + m->ncand));
    TRY(GROW(dst->cand_ids, dst->capcand_ids, dst->ncands + m->ncand));
    TRY(GROW(dst->cb, dst->capcb, dst->ncb + m->ncb));
    struct prow *x;
    TRY(row_new(dst, &x));
    struct prow at = *x;
    *x = *m;
    x->run0 = at.run0;
    x->ev0 = at.ev0;
    x->dep0 = at.dep0;
    x->cv0 = at.cv0;
    x->l0 = at.l0;
    x->cand0 = at.cand0;
    x->cb0 = at.cb0;
    COPY_N(dst->runs + at.run0, src->runs + m->run0, m->nrun);
    COPY_N(dst->ev + at.ev0, src->ev + m->ev0, m->nev);
    COPY_N(dst->dep + at.dep0, src->dep + m->dep0, m->ndep);
    COPY_N(dst->cv + at.cv0, src->cv + m->cv0, m->ncv);
    COPY_N(dst->lists + at.l0, src->lists + m->l0, m->nl);
    COPY_N(dst->cands + at.cand0, src->cands + m->cand0, m->ncand);
    COPY_N(dst->cand_ids + at.cand0, src->cand_ids + m->cand0, m->ncand);
    COPY_N(dst->cb + at.cb0, src->cb + m->cb0, m->ncb);
    dst->nruns += m->nrun;
    dst->nev += m->nev;
    dst->ndep += m->ndep;
    dst->ncv += m->ncv;
    dst->nlists += m->nl;
    dst->ncands += m->ncand;
    dst->ncb += m->ncb;
    if (x->has_domain)
        bfe_intern_retain(&e->in, x->domain);
    for (uint32_t i = 0; i < m->ncand; i++)
        bfe_intern_retain(&e->in, dst->cand_ids[at.cand0 + i]);
    dst->keys[dst->nrows - 1] = src->keys[r];
    bfe_intern_retain(&e->in, src->keys[r].group);
    return 0;
}

/* takes back the claims of rows r.. of pm on list lid (their outcome is to be
 * re-derived or put back as it is) */
static void list_rollback(struct bf_engine *e, const struct pmemo *pm, uint32_t r, uint32_t lid)
{
    for (uint32_t q = r; q < pm->nrows; q++) {
        const struct prow *m = &pm->rows[q];
        for (uint32_t i = 0; i < m->nrun; i++) {
            const struct crun *x = &pm->runs[m->run0 + i];
            struct leaf *l = &e->leaves[x->leaf];
            if (l->list[LL_CLUSTER] == lid)
                l->ctaken -= x->count;
        }
    }
    struct leaflist *ll = list_cyc(e, lid);
    ll->rolled = true;
}

/* a kept row's claims go back onto the lists rolled back this cycle */
static void claims_back(struct bf_engine *e, const struct pmemo *pm, const struct prow *m)
{
    for (uint32_t i = 0; i < m->nrun; i++) {
        const struct crun *x = &pm->runs[m->run0 + i];
        struct leaf *l = &e->leaves[x->leaf];
        if (list_rolled(e, l->list[LL_CLUSTER]))
            l->ctaken += x->count;
    }
}

/* outputs of a kept row onto its normalized Need */
static void row_output(struct bf_engine *e, const struct prow *m, uint32_t di)
{
    struct dneed *d = &e->d[di];
    d->rem = m->rem;
    d->claimed = m->claimed;
    d->has_domain = m->has_domain;
    d->domain = m->has_domain ? m->domain : 0;
    d->same_sat = m->same_sat;
    d->ncand = m->ncand;
    d->cands = NULL; /* pointed into the final memo by finish() */
}

static int row_keep(struct bf_engine *e, struct cluster *cl, uint32_t r, uint32_t di)
{
    struct pmemo *pm = memo_of(cl);
    struct prow *m = &pm->rows[r];
    if (cl->pmode == PM_PARTIAL)
        claims_back(e, pm, m);
    for (uint32_t i = 0; i < m->nev; i++)
        TRY(consume_apply(e, pm->ev[m->ev0 + i].leaf, pm->ev[m->ev0 + i].n));
    m->dindex = di;
    row_output(e, m, di);
    if (cl->pmode == PM_PARTIAL)
        TRY(row_transfer(e, pm, r, build_of(cl)));
    return 0;
}

/* the inputs a Same Need reads outside its cluster: the acquirable supply
 * versions of its instance types and the consumption it sees */
static int same_inputs(struct bf_engine *e, struct pmemo *pm, struct prow *x,
                       const struct cprof *cp)
{
    uint32_t nt = cp->pinned ? cp->npin : 1;
    x->dep0 = pm->ndep;
    x->ndep = 0;
    TRY(GROW(pm->dep, pm->capdep, pm->ndep + nt));
    for (uint32_t t = 0; t < nt; t++) {
        uint32_t it = cp->pinned ? cp->pin[t] : NONE32;
        pm->dep[pm->ndep++] = (struct cdep){it, bfe_acq_ver(e, it)};
        x->ndep++;
    }
    x->cv0 = pm->ncv;
    x->ncv = 0;
    for (uint32_t i = 0; i < e->n_cons; i++) {
        if (!cons_visible(e, cp, e->cons[i].leaf))
            continue;
        TRY(GROW(pm->cv, pm->capcv, pm->ncv + 1));
        pm->cv[pm->ncv++] = e->cons[i];
        x->ncv++;
    }
    return 0;
}

static int cands_record(struct bf_engine *e, struct pmemo *pm, struct prow *x,
                        const struct dneed *d)
{
    x->cand0 = pm->ncands;
    x->ncand = 0;
    if (!d->ncand)
        return 0;
    TRY(GROW(pm->cands, pm->capcands, pm->ncands + d->ncand));
    TRY(GROW(pm->cand_ids, pm->capcand_ids, pm->ncands + d->ncand));
    for (uint32_t i = 0; i < d->ncand; i++) {
        uint32_t id = d->cand_vals[i];
        bfe_intern_retain(&e->in, id);
        pm->cands[pm->ncands] = d->cands[i];
        pm->cand_ids[pm->ncands] = id;
        pm->ncands++;
    }
    x->ncand = d->ncand;
    return 0;
}

/* A row's entries of one kind (array a of elements of sz bytes, *n in use):
 * the new ones [*at, *at + k), appended last, replace the old ones
 * [old0, old0 + oldn) when they fit (and are popped from the end), else the
 * old ones are left behind; either way what no row refers to is counted as
 * waste. */
static void settle(void *a, size_t sz, uint32_t *n, uint32_t *at, uint32_t k, uint32_t old0,
                   uint32_t oldn, uint32_t *waste)
{
    if (k > oldn || *at + k != *n) {
        *waste += oldn;
        return;
    }
    if (k)
        memmove((char *)a + (size_t)old0 * sz, (char *)a + (size_t)*at * sz, (size_t)k * sz);
    *n -= k;
    *at = old0;
    *waste += oldn - k;
}

/* the candidates d's ranking produced are the ones row was recorded with
 * (in memo t): same domains, coverage and satisfiability, in order */
static bool cands_equal(const struct pmemo *t, const struct prow *was, const struct dneed *d)
{
    if (d->ncand != was->ncand)
        return false;
    for (uint32_t i = 0; i < d->ncand; i++) {
        const struct bf_engine_domain_coverage *a = &t->cands[was->cand0 + i], *b = &d->cands[i];
        if (t->cand_ids[was->cand0 + i] != d->cand_vals[i] ||
            a->coverage_per_mille != b->coverage_per_mille || a->satisfiable != b->satisfiable)
            return false;
    }
    return true;
}

/*
 * A Same Need whose own cluster's inputs are unchanged but whose acquirable
 * supply moved: its domains are ranked again from its recorded creditable
 * buckets. When the chosen domain is the one it had, its claims stand (they
 * depend on its cluster's leaves and the domain only) and only the
 * satisfiability, the candidates and the consumption rider are derived
 * again; the row is updated in place. Returns 1, or 0 when the domain moved
 * (the row is to be derived), or -errno.
 */
static int row_rerank(struct bf_engine *e, const struct bfe_prepass_ops *ops, uint32_t ci,
                      uint32_t r, uint32_t di)
{
    struct cluster *cl = &e->clusters[ci];
    struct pmemo *pm = memo_of(cl);
    const struct prow *m = &pm->rows[r];
    struct dneed *d = &e->d[di];
    /* ranked from the recorded buckets in place (their scores included) */
    int rc = bfe_same_rank(e, d, m->ncb ? pm->cb + m->cb0 : NULL, m->ncb);
    if (rc)
        return rc;
    if (d->has_domain != m->has_domain || (d->has_domain && d->domain != m->domain)) {
        d->has_domain = d->same_sat = false;
        d->domain = 0;
        d->cands = NULL;
        d->ncand = 0;
        return 0;
    }
    /* the row, in the memo that keeps it */
    struct pmemo *t = pm;
    uint32_t ti = r;
    if (cl->pmode == PM_PARTIAL) {
        claims_back(e, pm, m);
        t = build_of(cl);
        TRY(row_transfer(e, pm, r, t));
        ti = t->nrows - 1;
    }
    struct prow *x = &t->rows[ti];
    const struct prow was = *x; /* its entries: replaced by those recorded now */
    x->dindex = di;
    x->same_sat = d->same_sat;
    TRY(same_inputs(e, t, x, d->cp));
    bool same_cands = cands_equal(t, &was, d);
    if (!same_cands)
        TRY(cands_record(e, t, x, d));
    d->rem = x->rem;
    d->claimed = x->claimed;
    x->ev0 = t->nev;
    x->nev = 0;
    if (!bf_vec_is_zero(&d->rem)) {
        e->rec_pm = t;
        e->rec_ci = ci;
        e->rec_row = ti;
        rc = ops->same_consume(e, di);
        e->rec_pm = NULL;
        e->rec_ci = NONE32;
        TRY(rc);
    }
    /* the new entries were appended; where they fit in the row's old ones
     * they move there (every cycle re-ranks most Same Needs: appending
     * alone would make the memo copy itself out of its waste often) */
    settle(t->dep, sizeof *t->dep, &t->ndep, &x->dep0, x->ndep, was.dep0, was.ndep, &t->waste);
    settle(t->cv, sizeof *t->cv, &t->ncv, &x->cv0, x->ncv, was.cv0, was.ncv, &t->waste);
    settle(t->ev, sizeof *t->ev, &t->nev, &x->ev0, x->nev, was.ev0, was.nev, &t->waste);
    if (same_cands) /* the ranking came out as recorded: nothing recorded */
        return 1;
    if (x->ncand <= was.ncand && x->cand0 + x->ncand == t->ncands)
        for (uint32_t i = 0; i < x->ncand; i++) /* the ids they overwrite */
            bfe_intern_release(&e->in, t->cand_ids[was.cand0 + i]);
    uint32_t c0 = x->cand0;
    settle(t->cand_ids, sizeof *t->cand_ids, &t->ncands, &c0, x->ncand, was.cand0, was.ncand,
           &t->waste);
    if (c0 != x->cand0) { /* the candidates follow their ids */
        COPY_N(t->cands + c0, t->cands + x->cand0, x->ncand);
        x->cand0 = c0;
    }
    return 1;
}

static bool runs_equal(const struct pmemo *a, const struct prow *x, const struct pmemo *b,
                       const struct prow *y)
{
    if (x->nrun != y->nrun)
        return false;
    return !x->nrun || memcmp(a->runs + x->run0, b->runs + y->run0, x->nrun * sizeof *a->runs) == 0;
}

/* derives row r (normalized Need di) of cluster ci */
static int row_derive(struct bf_engine *e, const struct bfe_prepass_ops *ops, uint32_t ci,
                      uint32_t r, uint32_t di)
{
    struct cluster *cl = &e->clusters[ci];
    struct pmemo *old = memo_of(cl), *pm = build_of(cl);
    struct dneed *d = &e->d[di];
    const struct cprof *cp = d->cp;
    if (cl->pmode == PM_REPLAY) {
        /* the first derived row: the rows kept so far start the new memo */
        cl->pmode = PM_PARTIAL;
        for (uint32_t q = 0; q < r; q++)
            TRY(row_transfer(e, old, q, pm));
    }
    if (cl->pmode == PM_PARTIAL) {
        const struct prow *m = &old->rows[r];
        for (uint32_t i = 0; i < m->nl; i++)
            if (!list_rolled(e, old->lists[m->l0 + i]))
                list_rollback(e, old, r, old->lists[m->l0 + i]);
    }
    struct prow *x;
    TRY(row_new(pm, &x));
    x->dindex = di;
    x->parked = d->parked;
    pm->keys[pm->nrows - 1] = (struct rkey){cp->serial, d->group, d->agg, d->minu};
    bfe_intern_retain(&e->in, d->group);
    /* the cluster lists it reads */
    for (int si = 0; si < 2; si++) {
        uint32_t cap = (cl->ntl[si] > cp->npin ? cl->ntl[si] : cp->npin) + 1;
        TRY(GROW(pm->lists, pm->caplists, pm->nlists + cap));
        uint32_t k = bfe_cluster_lists(e, ci, si, cp, pm->lists + pm->nlists, cap);
        pm->nlists += k;
        x->nl += k;
    }
    /* another Need in the row's place (dkeys) may read other lists: the
     * claims of the rows from r on come off those too before it reads them */
    if (cl->pmode == PM_PARTIAL)
        for (uint32_t i = 0; i < x->nl; i++)
            if (!list_rolled(e, pm->lists[x->l0 + i]))
                list_rollback(e, old, r, pm->lists[x->l0 + i]);
    /* a parked Same Need reads no acquirable supply (no fold, no rider) */
    if (cp->has_same && !d->parked)
        TRY(same_inputs(e, pm, x, cp));
    e->rec_pm = pm;
    e->rec_ci = ci;
    e->rec_row = pm->nrows - 1;
    e->rec_creat_read = e->rec_creat_busy = false;
    int rc = ops->need(e, di);
    e->rec_pm = NULL;
    e->rec_ci = NONE32;
    if (rc)
        return rc;
    x = &pm->rows[pm->nrows - 1];
    x->reach_creat = e->rec_creat_read;
    x->creat_busy = e->rec_creat_busy;
    x->rem = d->rem;
    x->claimed = d->claimed;
    x->has_domain = d->has_domain;
    x->domain = d->has_domain ? d->domain : 0;
    if (x->has_domain)
        bfe_intern_retain(&e->in, x->domain);
    x->same_sat = d->same_sat;
    TRY(cands_record(e, pm, x, d));
    if (cl->pmode == PM_PARTIAL && !runs_equal(old, &old->rows[r], pm, x)) {
        /* later Needs reading these lists see other claims (the old row's
         * lists too: the Need in its place may have read other ones) */
        const struct prow *m = &old->rows[r];
        for (uint32_t i = 0; i < x->nl; i++)
            list_cyc(e, pm->lists[x->l0 + i])->diverged = true;
        for (uint32_t i = 0; i < m->nl; i++)
            list_cyc(e, old->lists[m->l0 + i])->diverged = true;
        if (x->nl || m->nl)
            cl->dvstamp = e->stamp;
    }
    return 0;
}

/* ------------------------------------------------------------------ driver */

/* the versions of the cluster's lists, as the memo's outcomes saw them */
static int memo_lists(const struct bf_engine *e, const struct cluster *cl, struct pmemo *pm)
{
    pm->nlv = 0;
    TRY(GROW(pm->lv, pm->caplv, cl->ntl[0] + cl->ntl[1] + 1));
    for (int si = 0; si < 2; si++)
        for (uint32_t i = 0; i < cl->ntl[si]; i++)
            pm->lv[pm->nlv++] = (struct lver){cl->tl[si][i], e->lists[cl->tl[si][i]].ver};
    return 0;
}

static int memo_seal(const struct bf_engine *e, const struct cluster *cl, struct pmemo *pm)
{
    pm->valid = true;
    pm->dver = cl->dver;
    pm->cver = cl->cver;
    pm->tot[0] = pm->tot[1] = 0;
    for (uint32_t r = 0; r < pm->nrows; r++) {
        pm->tot[0] += pm->rows[r].ccount[0];
        pm->tot[1] += pm->rows[r].ccount[1];
    }
    return memo_lists(e, cl, pm);
}

/* A list whose leaves changed since the memo: its claims start from none
 * (the leaves of old claims may be gone) and every Need reading it is
 * derived (the list counts as rolled back from the first row, diverged). */
static bool lists_changed(struct bf_engine *e, struct cluster *cl, const struct pmemo *pm)
{
    bool any = false;
    for (uint32_t i = 0; i < pm->nlv; i++) {
        struct leaflist *ll = &e->lists[pm->lv[i].list];
        if (ll->ver == pm->lv[i].ver)
            continue;
        for (uint32_t k = 0; k < ll->n; k++) {
            struct leaf *l = &e->leaves[ll->v[k]];
            l->ctaken = 0;
            l->cepoch = cl->cepoch;
        }
        ll = list_cyc(e, pm->lv[i].list);
        ll->rolled = ll->diverged = true;
        cl->dvstamp = e->stamp;
        any = true;
    }
    return any;
}

static int finish(struct bf_engine *e)
{
    uint32_t tot[2] = {0, 0};
    for (uint32_t ci = 0; ci < e->n_clusters; ci++) {
        struct cluster *cl = &e->clusters[ci];
        if (cl->pmode != PM_REPLAY) {
            pm_clear(e, memo_of(cl));
            cl->pcur ^= 1;
            TRY(memo_seal(e, cl, memo_of(cl)));
        } else {
            if (cl->lists_reset)
                TRY(memo_lists(e, cl, memo_of(cl))); /* no Need reads the lists that changed */
            memo_of(cl)->dver = cl->dver;            /* every row's key still matched */
        }
        struct pmemo *pm = memo_of(cl);
        /* rows re-ranked in place leave entries behind: copy the live ones */
        uint32_t live = pm->ndep + pm->ncv + pm->nev + pm->ncands - pm->waste;
        if (pm->waste > 64 && pm->waste > live) {
            struct pmemo *nb = build_of(cl);
            for (uint32_t r = 0; r < pm->nrows; r++)
                TRY(row_transfer(e, pm, r, nb));
            pm_clear(e, pm);
            cl->pcur ^= 1;
            TRY(memo_seal(e, cl, nb));
            pm = nb;
        }
        /* candidates point into the memo (stable until it is replaced) */
        for (uint32_t r = 0; r < pm->nrows; r++) {
            const struct prow *m = &pm->rows[r];
            if (m->ncand)
                e->d[m->dindex].cands = pm->cands + m->cand0;
        }
        tot[0] += pm->tot[0];
        tot[1] += pm->tot[1];
    }
    e->claimed_state[BF_STATE_CONFIGURED] += tot[0];
    e->claimed_state[BF_STATE_CONFIGURING] += tot[1];
    return 0;
}

/* how many steps ahead the pre-pass fetches a memo row */
#define PREPASS_AHEAD 8

int bfe_credit_prepass(struct bf_engine *e, const uint64_t *ord, uint32_t n,
                       const struct bfe_prepass_ops *ops)
{
    bool incr =
        !(e->cfg.flags & (BF_ENGINE_F_REFERENCE | BF_ENGINE_F_NO_INCREMENTAL)) && !e->memo_broken;
    e->memo_broken = true; /* until this pass completes */
    e->rec_pm = NULL;
    e->rec_ci = NONE32;
    e->n_cons = 0;
    e->pp_kept = e->pp_reranked = e->pp_derived = e->pp_dkept = 0;
    bfe_acq_reset(e);
    for (uint32_t ci = 0; ci < e->n_clusters; ci++)
        e->clusters[ci].nrows_now = 0;
    for (uint32_t i = 0; i < e->n_d; i++)
        e->clusters[e->d[i].cluster].nrows_now++;
    for (uint32_t ci = 0; ci < e->n_clusters; ci++) {
        struct cluster *cl = &e->clusters[ci];
        struct pmemo *pm = memo_of(cl);
        cl->pstamp = e->stamp;
        cl->prow_next = 0;
        pm_clear(e, build_of(cl));
        cl->lists_reset = false;
        cl->dkeys = false;
        if (incr && pm->valid && pm->cver == cl->cver && pm->nrows == cl->nrows_now) {
            /* demand moved (a rollup, a fold): its rows are checked one by
             * one against the Needs now in their places */
            cl->dkeys = pm->dver != cl->dver;
            cl->pmode = PM_REPLAY;
            cl->lists_reset = lists_changed(e, cl, pm);
        } else {
            cl->pmode = PM_FRESH;
            cl->cepoch = ++e->epoch_ctr; /* every claim on its leaves is gone */
        }
    }
    /* each step's memo row, so that the rows a few steps ahead (scattered
     * over the clusters' memos: the order is by priority) are fetched early */
    uint32_t *rowi = ANEW(&e->ar, uint32_t, n ? n : 1);
    if (!rowi)
        return -ENOMEM;
    for (uint32_t k = 0; k < n; k++)
        rowi[k] = e->clusters[e->d[(uint32_t)ord[k]].cluster].prow_next++;
    for (uint32_t ci = 0; ci < e->n_clusters; ci++)
        e->clusters[ci].prow_next = 0;
    for (uint32_t k = 0; k < n; k++) {
        if (k + PREPASS_AHEAD < n) {
            const struct cluster *ca = &e->clusters[e->d[(uint32_t)ord[k + PREPASS_AHEAD]].cluster];
            const struct pmemo *pa = &ca->pm[ca->pcur];
            if (ca->pmode != PM_FRESH && rowi[k + PREPASS_AHEAD] < pa->nrows) {
                const char *p = (const char *)&pa->rows[rowi[k + PREPASS_AHEAD]];
                __builtin_prefetch(p);
                __builtin_prefetch(p + 64);
                __builtin_prefetch(p + sizeof(struct prow) - 1);
            }
        }
        uint32_t di = (uint32_t)ord[k];
        uint32_t ci = e->d[di].cluster;
        struct cluster *cl = &e->clusters[ci];
        uint32_t r = cl->prow_next++;
        int what = cl->pmode == PM_FRESH ? ROW_DERIVE : row_check(e, cl, r, &e->d[di]);
        if (what == ROW_RERANK) {
            int rc = row_rerank(e, ops, ci, r, di);
            if (rc < 0)
                return rc;
            if (rc) {
                e->pp_reranked++;
                e->pp_dkept += cl->dkeys;
                continue;
            }
            what = ROW_DERIVE; /* the chosen domain moved */
        }
        if (what == ROW_KEEP) {
            e->pp_kept++;
            e->pp_dkept += cl->dkeys;
            TRY(row_keep(e, cl, r, di));
        } else {
            e->pp_derived++;
            TRY(row_derive(e, ops, ci, r, di));
        }
    }
    TRY(finish(e));
    e->memo_broken = false;
    return 0;
}

/* ------------------------------------------------------------------ queries */

uint32_t bfe_credit_owner(const struct bf_engine *e, uint32_t li, uint32_t r)
{
    const struct leaf *l = &e->leaves[li];
    if (l->cluster_idx == NONE32)
        return NONE32;
    const struct cluster *cl = &e->clusters[l->cluster_idx];
    const struct pmemo *pm = &cl->pm[cl->pcur];
    for (uint32_t q = 0; q < pm->nrows; q++) {
        const struct prow *m = &pm->rows[q];
        for (uint32_t i = 0; i < m->nrun; i++) {
            const struct crun *x = &pm->runs[m->run0 + i];
            if (x->leaf == li && r >= x->start && r < x->start + x->count)
                return m->dindex;
        }
    }
    return NONE32;
}

int bfe_credit_load_runs(struct bf_engine *e, uint32_t ci)
{
    struct cluster *cl = &e->clusters[ci];
    if (cl->rstamp == e->stamp)
        return 0;
    const struct pmemo *pm = &cl->pm[cl->pcur];
    uint32_t n = 0;
    for (uint32_t q = 0; pm->valid && q < pm->nrows; q++)
        n += pm->rows[q].nrun;
    TRY(GROW(e->runs, e->cap_runs, e->n_runs + n));
    for (uint32_t q = 0; pm->valid && q < pm->nrows; q++) {
        const struct prow *m = &pm->rows[q];
        for (uint32_t i = 0; i < m->nrun; i++) {
            const struct crun *x = &pm->runs[m->run0 + i];
            struct leaf *l = bfe_leaf_cyc(e, x->leaf);
            e->runs[e->n_runs] = (struct run){x->start, x->count, m->dindex, l->runs};
            l->runs = e->n_runs++;
        }
    }
    cl->rstamp = e->stamp;
    return 0;
}

uint32_t bfe_credit_cluster_claimed(const struct bf_engine *e, uint32_t ci)
{
    const struct cluster *cl = &e->clusters[ci];
    const struct pmemo *pm = &cl->pm[cl->pcur];
    return pm->valid ? pm->tot[0] : 0;
}
