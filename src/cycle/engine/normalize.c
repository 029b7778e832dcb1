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

struct fold {
    uint32_t cluster;
    struct cprof *stripped;
    struct cprof *orig;
    bf_vec agg;
    uint32_t members;
    int64_t arrival;
    uint64_t hash;
    uint32_t next;  /* chain of equal hashes */
    char *aggkey;
};

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
    uint32_t lists[2] = {cl->list_conf, cl->list_cfg};
    for (int k = 0; k < 2; k++) {
        if (lists[k] == NONE32)
            continue;
        const struct leaflist *ll = &e->lists[lists[k]];
        for (uint32_t i = 0; i < ll->n; i++) {
            uint32_t c = e->leaves[ll->v[i]].k.cls;
            if (covers_all_positive(&e->cls[c].alloc, agg) && bfe_match_class(e, cp, c))
                return true;
        }
    }
    return false;
}

static bool fits_shard(struct bf_engine *e, struct cprof *cp, const bf_vec *agg)
{
    uint32_t ntypes = cp->pinned ? cp->npin : 1;
    for (uint32_t t = 0; t < ntypes; t++) {
        const struct leaflist *cls_list;
        if (cp->pinned) {
            uint32_t idx = bfe_u64map_get(&e->type_classes_map, cp->pin[t]);
            cls_list = idx == NONE32 ? NULL : &e->type_classes[idx];
        } else {
            cls_list = &e->all_classes;
        }
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
    struct u64map map;
};

static int memo_get(struct bf_engine *e, struct memotab *mt, uint32_t cluster, struct cprof *cp,
                    const bf_vec *agg, bool *out)
{
    uint64_t h = memo_hash(cluster, cp, agg);
    uint32_t i = bfe_u64map_get(&mt->map, h);
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
    if (bfe_u64map_put(&mt->map, h, mt->n))
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

static struct bf_engine *fold_e;
static int fold_cmp(const void *a, const void *b)
{
    const struct fold *x = a, *y = b;
    const struct bf_engine *e = fold_e;
    int c = bfe_strcmp_id(&e->in, e->clusters[x->cluster].name, e->clusters[y->cluster].name);
    if (c)
        return c;
    c = bfe_strcmp_id(&e->in, x->stripped->fp, y->stripped->fp);
    if (c)
        return c;
    return strcmp(x->aggkey, y->aggkey);
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

int bfe_normalize(struct bf_engine *e)
{
    uint32_t n = e->n_snap;
    if (GROW(e->d, e->cap_d, n ? n : 1))
        return -ENOMEM;
    e->n_d = 0;
    if (!e->any_same) {
        for (uint32_t i = 0; i < n; i++) {
            uint32_t ci = (uint32_t)(e->snap[i] >> 32), ni = (uint32_t)e->snap[i];
            dneed_from(&e->d[i], ci, &e->clusters[ci].needs[ni]);
        }
        e->n_d = n;
        return 0;
    }
    struct memotab shard = {0}, local = {0};
    struct fold *folds = NULL;
    uint32_t nf = 0, capf = 0;
    struct u64map fmap = {0};
    int rc = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t ci = (uint32_t)(e->snap[i] >> 32), ni = (uint32_t)e->snap[i];
        const struct need_in *need = &e->clusters[ci].needs[ni];
        struct cprof *cp = need->cp;
        bool fold = false;
        if (cp->has_same) {
            if ((rc = memo_get(e, &shard, NONE32, cp, &need->agg, &fold)))
                goto out;
            if (!fold && (rc = memo_get(e, &local, ci, cp, &need->agg, &fold)))
                goto out;
        }
        if (!fold) {
            dneed_from(&e->d[e->n_d++], ci, need);
            continue;
        }
        struct cprof *st = bfe_cprof_stripped(e, cp);
        if (!st) {
            rc = -ENOMEM;
            goto out;
        }
        uint64_t h = bfe_mix64(bfe_hash_bytes(&need->agg, sizeof need->agg, 9) ^
                               ((uint64_t)ci << 32) ^ st->idx);
        uint32_t head = bfe_u64map_get(&fmap, h), f;
        for (f = head; f != NONE32; f = folds[f].next)
            if (folds[f].cluster == ci && folds[f].stripped == st &&
                bf_vec_eq(&folds[f].agg, &need->agg))
                break;
        if (f == NONE32) {
            if (nf == capf) {
                uint32_t nc = capf ? capf * 2 : 64;
                struct fold *nv = ANEW(&e->ar, struct fold, nc);
                if (!nv) {
                    rc = -ENOMEM;
                    goto out;
                }
                if (nf)
                    memcpy(nv, folds, nf * sizeof *nv);
                folds = nv;
                capf = nc;
            }
            f = nf++;
            folds[f] = (struct fold){.cluster = ci, .stripped = st, .orig = cp, .agg = need->agg,
                                     .members = 0, .arrival = 0, .hash = h, .next = head};
            if ((rc = bfe_u64map_put(&fmap, h, f)))
                goto out;
        }
        folds[f].members++;
        if (need->arrival && (!folds[f].arrival || need->arrival < folds[f].arrival))
            folds[f].arrival = need->arrival;
    }
    for (uint32_t f = 0; f < nf; f++)
        if (!(folds[f].aggkey = aggkey_of(e, &folds[f].agg))) {
            rc = -ENOMEM;
            goto out;
        }
    fold_e = e;
    bfe_qsort(folds, nf, sizeof *folds, fold_cmp);
    fold_e = NULL;
    if (GROW(e->d, e->cap_d, e->n_d + nf + 1)) {
        rc = -ENOMEM;
        goto out;
    }
    for (uint32_t f = 0; f < nf; f++) {
        struct dneed *d = &e->d[e->n_d++];
        memset(d, 0, sizeof *d);
        d->cluster = folds[f].cluster;
        d->cp = folds[f].stripped;
        d->agg = folds[f].agg;
        bf_vec_scale(&d->agg, folds[f].members);
        d->minu = folds[f].agg;
        d->arrival = folds[f].arrival;
        d->group = 0;
        d->folded = folds[f].members;
    }
out:
    bfe_u64map_free(&shard.map);
    bfe_u64map_free(&local.map);
    bfe_u64map_free(&fmap);
    return rc;
}
