/*
 * normalize.c — NormalizeDemand (ADR-0041, reference/engine.md §3): a Same
 * Need whose whole aggregate fits on one machine is folded, with its class
 * (cluster, Same-stripped fingerprint, aggregate), into one plain atomic Need
 * appended after every pass-through Need.
 *
 * Design notes. The existence check is class-level (every machine of a class
 * has the same attributes and allocatable): the Need's own cluster's
 * Configured/Configuring leaves, then the shard-wide Idle and Speculative
 * classes (the pinned types' classes when pinned). Shard-wide results are
 * memoised per (profile, aggregate) and per-cluster results per (cluster,
 * profile, aggregate) for the cycle; memoisation never changes a result. The
 * output D is rebuilt every cycle against this cycle's mirror.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cycle/engine/engine_internal.h"

struct memo {
    uint64_t hash;
    uint32_t cluster; /* NONE32: shard-wide */
    const struct cprof *cp;
    bf_vec agg;
    bool result;
    uint32_t next;
};

static bool covers_all_positive(const bf_vec *alloc, const bf_vec *agg)
{
    return bf_vec_covers(alloc, agg);
}

static bool fits_cluster(struct bf_engine *e, uint32_t ci, struct cprof *cp, const bf_vec *agg)
{
    const struct cluster *cl = &e->clusters[ci];
    for (int si = 0; si < 2; si++) {
        for (uint32_t t = 0; t < cl->ntl[si]; t++) {
            const struct leaflist *ll = &e->lists[cl->tl[si][t]];
            for (uint32_t i = 0; i < ll->n; i++) {
                uint32_t c = e->leaves[ll->v[i]].k.cls;
                if (covers_all_positive(&e->cls[c].alloc, agg) && bfe_match_class(e, cp, c))
                    return true;
            }
        }
    }
    return false;
}

static bool fits_shard(struct bf_engine *e, struct cprof *cp, const bf_vec *agg)
{
    uint32_t ntypes = cp->pinned ? cp->npin : 1;
    for (uint32_t t = 0; t < ntypes; t++) {
        const struct leaflist *cls_list = bfe_cprof_classes(e, cp, t);
        for (uint32_t i = 0; cls_list && i < cls_list->n; i++) {
            const struct mclass *c = &e->cls[cls_list->v[i]];
            if (!c->count[BF_STATE_IDLE] && !c->count[BF_STATE_SPECULATIVE])
                continue;
            if (covers_all_positive(&c->alloc, agg) && bfe_match_class(e, cp, cls_list->v[i]))
                return true;
        }
    }
    return false;
}

static uint64_t memo_hash(uint32_t cluster, const struct cprof *cp, const bf_vec *agg)
{
    uint64_t h = bfe_hash_bytes(agg, sizeof *agg, 5);
    return bfe_mix64(h ^ ((uint64_t)cluster << 32) ^ cp->idx);
}

struct memotab {
    struct memo *v;
    uint32_t n, cap;
    struct bfe_u64map *map;
};

static int memo_get(struct bf_engine *e, struct memotab *mt, uint32_t cluster, struct cprof *cp,
                    const bf_vec *agg, bool *out)
{
    uint64_t h = memo_hash(cluster, cp, agg);
    uint32_t i = bfe_u64map_get(mt->map, h, NONE32);
    uint32_t head = i;
    for (; i != NONE32; i = mt->v[i].next) {
        const struct memo *m = &mt->v[i];
        if (m->cluster == cluster && m->cp == cp && bf_vec_eq(&m->agg, agg)) {
            *out = m->result;
            return 0;
        }
    }
    bool r = cluster == NONE32 ? fits_shard(e, cp, agg) : fits_cluster(e, cluster, cp, agg);
    if (mt->n == mt->cap) {
        uint32_t nc = mt->cap ? mt->cap * 2 : 64;
        struct memo *nv = ANEW(&e->ar, struct memo, nc);
        if (!nv)
            return -ENOMEM;
        if (mt->n)
            memcpy(nv, mt->v, mt->n * sizeof *nv);
        mt->v = nv;
        mt->cap = nc;
    }
    mt->v[mt->n] = (struct memo){h, cluster, cp, *agg, r, head};
    if (bfe_u64map_put(mt->map, h, mt->n))
        return -ENOMEM;
    mt->n++;
    *out = r;
    return 0;
}

static char *aggkey_of(struct bf_engine *e, const bf_vec *agg)
{
    /* "name=milli;" over the non-zero dimensions sorted by name */
    int order[BF_MAX_DIMS];
    char names[BF_MAX_DIMS][BF_DIM_NAME_MAX + 8];
    int n = 0;
    for (int i = 0; i < BF_MAX_DIMS; i++) {
        if (agg->v[i] == 0)
            continue;
        if (e->have_dims && (uint32_t)i < e->dims.n)
            snprintf(names[i], sizeof names[i], "%s", e->dims.names[i]);
        else
            snprintf(names[i], sizeof names[i], "d%d", i);
        order[n++] = i;
    }
    for (int i = 1; i < n; i++) {
        int x = order[i], j = i;
        while (j > 0 && strcmp(names[order[j - 1]], names[x]) > 0) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = x;
    }
    char buf[BF_MAX_DIMS * (BF_DIM_NAME_MAX + 32) + 1];
    size_t l = 0;
    buf[0] = 0;
    for (int i = 0; i < n; i++)
        l += (size_t)snprintf(buf + l, sizeof buf - l, "%s=%lld;", names[order[i]],
                              (long long)agg->v[order[i]]);
    char *s = bfe_arena_alloc(&e->ar, l + 1);
    if (s)
        memcpy(s, buf, l + 1);
    return s;
}

static char *aggkey_dup(struct bf_engine *e, const bf_vec *agg)
{
    struct arena_mark mk = bfe_arena_mark(&e->ar);
    char *k = aggkey_of(e, agg);
    char *d = k ? strdup(k) : NULL;
    bfe_arena_release(&e->ar, mk);
    return d;
}

static int fold_group_cmp(const void *a, const void *b)
{
    const struct fold_group *x = a, *y = b;
    int c = strcmp(x->fps, y->fps);
    return c ? c : strcmp(x->aggkey, y->aggkey);
}

/* (Re)computes one cluster's fold decisions and groups when its demand or
 * the supply they depend on changed (every cycle in reference mode). */
static int cluster_folds(struct bf_engine *e, uint32_t ci, struct memotab *shard,
                         struct memotab *local)
{
    struct cluster *cl = &e->clusters[ci];
    bool memo = !(e->cfg.flags & BF_ENGINE_F_REFERENCE);
    uint64_t vs = e->shard_supply_ver, vc = cl->supply_ver;
    if (memo && cl->fg_valid && cl->fg_vs == vs && cl->fg_vc == vc)
        return 0;
    bfe_fold_groups_clear(cl);
    bool changed = false; /* a fold decision moved: the cluster's rows differ */
    for (uint32_t i = 0; i < cl->n_needs; i++) {
        struct need_in *need = &cl->needs[i];
        struct cprof *cp = need->cp;
        if (!cp->has_same)
            continue;
        bool fold;
        if (memo && need->fold_known && need->fold_vs == vs && need->fold_vc == vc) {
            fold = need->fold;
        } else {
            int rc = memo_get(e, shard, NONE32, cp, &need->agg, &fold);
            if (!rc && !fold)
                rc = memo_get(e, local, ci, cp, &need->agg, &fold);
            if (rc)
                return rc;
            if (!need->fold_known || need->fold != fold) {
                changed = true;
                cl->snap_changed = true; /* its pass-through Needs (the snapshot order's) moved */
                e->snap_dirty = true;
            }
            need->fold_known = true;
            need->fold = fold;
            cl->fold[i] = fold;
            need->fold_vs = vs;
            need->fold_vc = vc;
        }
        if (!fold)
            continue;
        struct cprof *st = bfe_cprof_stripped(e, cp);
        if (!st)
            return -ENOMEM;
        uint32_t g;
        for (g = 0; g < cl->nfg; g++)
            if (cl->fg[g].stripped == st && bf_vec_eq(&cl->fg[g].agg, &need->agg))
                break;
        if (g == cl->nfg) {
            if (GROW(cl->fg, cl->capfg, cl->nfg + 1))
                return -ENOMEM;
            struct fold_group *x = &cl->fg[cl->nfg];
            memset(x, 0, sizeof *x);
            x->stripped = st;
            x->fps = bfe_str(&e->in, st->fp);
            x->agg = need->agg;
            x->aggkey = aggkey_dup(e, &need->agg);
            if (!x->aggkey)
                return -ENOMEM;
            cl->nfg++;
        }
        struct fold_group *x = &cl->fg[g];
        x->members++;
        if (need->arrival && (!x->arrival || need->arrival < x->arrival))
            x->arrival = need->arrival;
    }
    /* the cluster's groups in their D order: stripped fingerprint, then the
     * aggregate key (distinct per group) */
    bfe_qsort(cl->fg, cl->nfg, sizeof *cl->fg, fold_group_cmp);
    cl->fg_valid = true;
    cl->fg_vs = vs;
    cl->fg_vc = vc;
    /* the same fold decisions over the same Needs make the same groups and
     * rows; otherwise the pre-pass checks the cluster's memo rows one by one
     * against the Needs now in their places (credit.c, struct rkey) */
    if (changed)
        cl->dver++;
    return 0;
}

static void dneed_from(struct dneed *d, uint32_t ci, const struct need_in *n)
{
    memset(d, 0, sizeof *d);
    d->cluster = ci;
    d->cp = n->cp;
    d->agg = n->agg;
    d->minu = n->minu;
    d->arrival = n->arrival;
    d->group = n->group;
}

/* how many pass-through rows ahead NormalizeDemand fetches a Need row */
#define NORM_AHEAD 8

int bfe_normalize(struct bf_engine *e)
{
    uint32_t nf = 0;
    e->any_same = e->n_same_total > 0;
    if (e->any_same) {
        for (int k = 0; k < 2; k++)
            bfe_u64map_clear(&e->norm_map[k]);
        struct memotab shard = {.map = &e->norm_map[0]}, local = {.map = &e->norm_map[1]};
        for (uint32_t ci = 0; ci < e->n_clusters; ci++) {
            struct cluster *cl = &e->clusters[ci];
            if (!cl->n_same) {
                if (cl->nfg)
                    bfe_fold_groups_clear(cl);
                continue;
            }
            int rc = cluster_folds(e, ci, &shard, &local);
            if (rc)
                return rc;
            nf += cl->nfg;
        }
    }
    /* the pass-through Needs in snapshot order (the order holds only them:
     * it is merged after the fold decisions), then their rows, which are
     * scattered over the clusters' Need arrays: fetched ahead */
    TRY(bfe_demand_snapshot(e));
    uint32_t npt = e->n_snap;
    const uint64_t *pt = e->snap;
    if (GROW(e->d, e->cap_d, npt + nf ? npt + nf : 1))
        return -ENOMEM;
    e->n_d = 0;
    for (uint32_t i = 0; i < npt; i++) {
        if (i + NORM_AHEAD < npt) {
            uint64_t r = pt[i + NORM_AHEAD];
            const char *p = (const char *)&e->clusters[r >> 32].needs[(uint32_t)r];
            __builtin_prefetch(p);
            __builtin_prefetch(p + 64);
            __builtin_prefetch(p + 128);
        }
        uint32_t ci = (uint32_t)(pt[i] >> 32), ni = (uint32_t)pt[i];
        dneed_from(&e->d[e->n_d++], ci, &e->clusters[ci].needs[ni]);
    }
    if (!nf)
        return 0;
    /* then one Need per fold class, ordered by (cluster id, stripped fp,
     * aggregate key): clusters in name order, each cluster's groups sorted */
    for (uint32_t k = 0; k < e->n_clusters; k++) {
        uint32_t ci = e->cluster_order[k];
        for (uint32_t g = 0; g < e->clusters[ci].nfg; g++) {
            const struct fold_group *x = &e->clusters[ci].fg[g];
            struct dneed *d = &e->d[e->n_d++];
            memset(d, 0, sizeof *d);
            d->cluster = ci;
            d->cp = x->stripped;
            d->agg = x->agg;
            bf_vec_scale(&d->agg, x->members);
            d->minu = x->agg;
            d->arrival = x->arrival;
            d->group = 0;
            d->folded = x->members;
        }
    }
    return 0;
}
