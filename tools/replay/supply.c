/*
 * supply.c — what the operator knows of the machines bound to its clusters,
 * and which part of its demand they cover.
 *
 * Shapes. A NodeStateUpdate carries the node identity (labels + resources,
 * ADR-0016). Machines with equal labels (minus the per-machine topology
 * labels zone, rack and hostname) and equal resources are interchangeable
 * for every requirement this emulator sends, so supply is counted per
 * shape, not per machine: attribution costs O(needs x shapes), independent
 * of the fleet size.
 *
 * Attribution. The shard credits each bound machine to at most one Need
 * (engine.md §1.10: no packing math, a machine gives its whole allocatable
 * to the Need that claims it). The emulator cannot see the shard's claims
 * (BootstrapRequest carries no machine id), so it recomputes a claim set.
 * The engine's own credit order (engine.md §4.2: Needs by priority,
 * machines Configured then Configuring, cheapest first) is greedy and not
 * stable under additions (a cheaper machine bound for a low-priority Need
 * is credited to a higher one first), so "what the bound machines can
 * host" takes the better of that order and a most-constrained-first order
 * (RP_ORDER_BEST). A reclaim verdict mirrors the engine (RP_ORDER_ENGINE)
 * and is confirmed with the LP relaxation of the claim problem
 * (rp_max_coverage), so a claim order that merely differs from the
 * shard's can never make a legitimate reclaim look wrong. docs/replay.md
 * "Report" explains how coverage feeds the satisfaction figures, the
 * binding latency and the reclaim check.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/strbuf.h"
#include "replay.h"

static bool label_is_topology(const char *k)
{
    return !strcmp(k, BF_LABEL_ZONE) || !strcmp(k, BF_SIM_LABEL_RACK) ||
           !strcmp(k, "kubernetes.io/hostname");
}

struct kv {
    const char *k, *v;
};

static int cmp_kv(const void *a, const void *b)
{
    return strcmp(((const struct kv *)a)->k, ((const struct kv *)b)->k);
}

static bool shape_equal(const struct rp_shape *s, const char *type, const struct kv *l, size_t n,
                        const rp_res *alloc)
{
    if (strcmp(s->type, type) || s->n_labels != n)
        return false;
    for (int d = 0; d < RP_DIMS; d++)
        if (s->alloc.v[d] != alloc->v[d])
            return false;
    for (size_t i = 0; i < n; i++)
        if (strcmp(s->keys[i], l[i].k) || strcmp(s->values[i], l[i].v))
            return false;
    return true;
}

static int match_grow(struct rp_shapes *s, const struct rp_model *m)
{
    size_t nc = m->n_classes, ns = s->match_shapes ? s->match_shapes * 2 : 64;
    while (ns < s->n)
        ns *= 2;
    int8_t *nm = malloc((nc ? nc : 1) * ns);
    if (!nm)
        return -ENOMEM;
    memset(nm, -1, (nc ? nc : 1) * ns);
    for (size_t c = 0; c < s->match_classes && c < nc; c++)
        memcpy(nm + c * ns, s->match + c * s->match_shapes, s->match_shapes);
    free(s->match);
    s->match = nm;
    s->match_classes = nc;
    s->match_shapes = ns;
    return 0;
}

int rp_shape_intern(struct rp_shapes *s, const struct rp_model *m, size_t n_labels,
                    const char *const *keys, const char *const *values, const rp_res *alloc)
{
    struct kv stackl[32];
    struct kv *l = n_labels <= 32 ? stackl : malloc(n_labels * sizeof *l);
    if (!l)
        return -ENOMEM;
    size_t n = 0;
    const char *type = "";
    for (size_t i = 0; i < n_labels; i++) {
        if (!strcmp(keys[i], BF_LABEL_INSTANCE_TYPE))
            type = values[i];
        if (label_is_topology(keys[i]))
            continue;
        l[n].k = keys[i];
        l[n].v = values[i];
        n++;
    }
    qsort(l, n, sizeof *l, cmp_kv);
    /* duplicate keys (map semantics: the last wins) collapse */
    size_t u = 0;
    for (size_t i = 0; i < n; i++) {
        if (u && !strcmp(l[u - 1].k, l[i].k))
            l[u - 1] = l[i];
        else
            l[u++] = l[i];
    }
    n = u;
    /* no instance-type label (the shard synthesises it into NodeStateUpdate
     * labels, shard.md §4.5; the provider keeps it a top-level field): infer
     * it from the catalog when exactly one type has this exact shape */
    char inferred[BF_SIM_NAME_MAX];
    if (!type[0] && m->n_types) {
        const char *model = NULL;
        for (size_t i = 0; i < n; i++)
            if (!strcmp(l[i].k, BF_SIM_LABEL_GPU_MODEL))
                model = l[i].v;
        int hits = 0;
        for (size_t k = 0; k < m->n_types; k++) {
            const struct bf_sim_type *ty = &m->types[k];
            if (ty->cpu_milli == alloc->v[RP_CPU] && ty->memory_mib == alloc->v[RP_MEM] &&
                (int64_t)ty->gpus * 1000 == alloc->v[RP_GPU] &&
                (!model || !strcmp(model, ty->gpu_model))) {
                if (!hits++)
                    snprintf(inferred, sizeof inferred, "%s", ty->name);
            }
        }
        if (hits == 1)
            type = inferred;
    }
    int rc;
    for (size_t i = 0; i < s->n; i++) {
        if (shape_equal(&s->v[i], type, l, n, alloc)) {
            rc = (int)i;
            goto out;
        }
    }
    if (s->n == s->cap && bf_grow((void **)&s->v, &s->cap, s->n + 1, sizeof *s->v)) {
        rc = -ENOMEM;
        goto out;
    }
    struct rp_shape *sh = &s->v[s->n];
    memset(sh, 0, sizeof *sh);
    sh->type = strdup(type);
    sh->keys = calloc(n ? n : 1, sizeof *sh->keys);
    sh->values = calloc(n ? n : 1, sizeof *sh->values);
    if (!sh->type || !sh->keys || !sh->values) {
        free(sh->type);
        free(sh->keys);
        free(sh->values);
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        sh->keys[i] = strdup(l[i].k);
        sh->values[i] = strdup(l[i].v);
        sh->n_labels++;
        if (!sh->keys[i] || !sh->values[i]) {
            s->n++; /* freed with the set */
            rc = -ENOMEM;
            goto out;
        }
    }
    sh->alloc = *alloc;
    sh->catalog = -1;
    for (size_t k = 0; k < m->n_types; k++) {
        if (!strcmp(m->types[k].name, type)) {
            sh->catalog = (int32_t)k;
            sh->price = m->types[k].price_per_hour;
            break;
        }
    }
    s->n++;
    if (s->n > s->match_shapes || s->match_classes != m->n_classes) {
        if ((rc = match_grow(s, m)))
            goto out;
    }
    rc = (int)(s->n - 1);
out:
    if (l != stackl)
        free(l);
    return rc;
}

void rp_shapes_free(struct rp_shapes *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++) {
        for (uint32_t j = 0; j < s->v[i].n_labels; j++) {
            free(s->v[i].keys[j]);
            free(s->v[i].values[j]);
        }
        free(s->v[i].keys);
        free(s->v[i].values);
        free(s->v[i].type);
    }
    free(s->v);
    free(s->match);
    memset(s, 0, sizeof *s);
}

static const char *shape_label(const struct rp_shape *s, const char *key)
{
    for (uint32_t i = 0; i < s->n_labels; i++)
        if (!strcmp(s->keys[i], key))
            return s->values[i];
    if (!strcmp(key, BF_LABEL_INSTANCE_TYPE) && s->type[0])
        return s->type;
    return NULL;
}

static bool value_in(const struct bf_requirement *r, const char *v)
{
    for (uint32_t i = 0; i < r->n_values; i++)
        if (!strcmp(r->values[i], v))
            return true;
    return false;
}

/* One requirement against one attribute value (NULL = absent). */
static bool req_ok(const struct bf_requirement *r, const char *v)
{
    switch (r->op) {
    case BF_OP_IN:
        return v && value_in(r, v);
    case BF_OP_NOT_IN:
        return !v || !value_in(r, v);
    case BF_OP_EXISTS:
        return v != NULL;
    case BF_OP_DOES_NOT_EXIST:
        return v == NULL;
    case BF_OP_SAME:
        return v && (r->n_values == 0 || value_in(r, v));
    default:
        return false;
    }
}

bool rp_class_matches_shape(struct rp_shapes *s, const struct rp_model *m, uint32_t cls,
                            uint32_t shape)
{
    int8_t *cache = NULL;
    if (s->match && cls < s->match_classes && shape < s->match_shapes) {
        cache = &s->match[(size_t)cls * s->match_shapes + shape];
        if (*cache >= 0)
            return *cache;
    }
    const struct rp_class *c = &m->classes[cls];
    bool ok = true;
    for (uint32_t i = 0; i < c->prof.n_reqs && ok; i++)
        ok = req_ok(&c->prof.reqs[i], shape_label(&s->v[shape], c->prof.reqs[i].key));
    if (cache)
        *cache = ok;
    return ok;
}

static bool covers(const rp_res *have, const rp_res *want)
{
    for (int d = 0; d < RP_DIMS; d++)
        if (want->v[d] > 0 && have->v[d] < want->v[d])
            return false;
    return true;
}

bool rp_need_eligible(struct rp_shapes *s, const struct rp_model *m, const struct rp_need *n,
                      uint32_t shape)
{
    return covers(&s->v[shape].alloc, &n->min_unit) && rp_class_matches_shape(s, m, n->cls, shape);
}

/* ------------------------------------------------------------ attribution */

struct actx {
    const struct rp_model *m;
    const struct rp_need *needs;
    const struct rp_shapes *s;
    const struct rp_supply_ent *sup;
    const uint32_t *n_elig;  /* per need (RP_ORDER_CONSTRAINED) */
    const uint32_t *contest; /* per supply entry (RP_ORDER_CONSTRAINED) */
    int order;
};

static int cmp_need_order(const void *a, const void *b, void *arg)
{
    const struct actx *x = arg;
    uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
    if (x->order == RP_ORDER_CONSTRAINED && x->n_elig[i] != x->n_elig[j])
        return x->n_elig[i] < x->n_elig[j] ? -1 : 1;
    int32_t pi = x->m->classes[x->needs[i].cls].prof.priority;
    int32_t pj = x->m->classes[x->needs[j].cls].prof.priority;
    if (pi != pj)
        return pi > pj ? -1 : 1;
    return i < j ? -1 : (i > j); /* stable: the rollup order */
}

static int cmp_sup_order(const void *a, const void *b, void *arg)
{
    const struct actx *x = arg;
    uint32_t ia = *(const uint32_t *)a, ib = *(const uint32_t *)b;
    const struct rp_supply_ent *p = &x->sup[ia], *q = &x->sup[ib];
    if (x->order == RP_ORDER_CONSTRAINED && x->contest[ia] != x->contest[ib])
        return x->contest[ia] < x->contest[ib] ? -1 : 1;
    if (p->tier != q->tier)
        return p->tier < q->tier ? -1 : 1;
    double pp = x->s->v[p->shape].price, pq = x->s->v[q->shape].price;
    if (pp != pq)
        return pp < pq ? -1 : 1;
    return p->shape < q->shape ? -1 : (p->shape > q->shape);
}

/* Normalised size of a demand (for tie-breaks): the sum of its dimensions
 * relative to a 1-CPU / 1-GiB / 1-GPU unit. */
static double demand_size(const rp_res *r)
{
    return r->v[RP_CPU] / 1000.0 + r->v[RP_MEM] / 1024.0 + r->v[RP_GPU] / 1000.0;
}

static int cmp_need_constrained(const void *a, const void *b, void *arg)
{
    const struct actx *x = arg;
    uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
    if (x->n_elig[i] != x->n_elig[j])
        return x->n_elig[i] < x->n_elig[j] ? -1 : 1;
    double si = demand_size(&x->needs[i].agg), sj = demand_size(&x->needs[j].agg);
    if (si != sj)
        return si < sj ? -1 : 1; /* the smaller one fits in the gaps first */
    return cmp_need_order(a, b, arg);
}

static bool short_of(const rp_res *agg, const rp_res *cov)
{
    for (int d = 0; d < RP_DIMS; d++)
        if (cov->v[d] < agg->v[d])
            return true;
    return false;
}

/*
 * One greedy pass in the given order. take[i * n_sup + j] receives the
 * machines of supply entry j claimed by Need i, cov[i] their summed
 * allocatable (not capped).
 */
static int attribute_one(struct rp_shapes *s, const struct rp_model *m, const struct rp_need *needs,
                         size_t n_needs, const struct rp_supply_ent *sup, size_t n_sup,
                         int order_kind, int64_t *take, rp_res *cov)
{
    memset(take, 0, n_needs * (n_sup ? n_sup : 1) * sizeof *take);
    memset(cov, 0, n_needs * sizeof *cov);
    uint32_t *order = malloc(n_needs * sizeof *order);
    uint32_t *sorder = malloc((n_sup ? n_sup : 1) * sizeof *sorder);
    int64_t *avail = malloc((n_sup ? n_sup : 1) * sizeof *avail);
    uint32_t *n_elig = calloc(n_needs, sizeof *n_elig);
    uint32_t *contest = calloc(n_sup ? n_sup : 1, sizeof *contest);
    int rc = 0;
    if (!order || !sorder || !avail || !n_elig || !contest) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t j = 0; j < n_sup; j++) {
        avail[j] = sup[j].n > 0 ? sup[j].n : 0;
        sorder[j] = (uint32_t)j;
    }
    for (size_t i = 0; i < n_needs; i++) {
        order[i] = (uint32_t)i;
        if (order_kind != RP_ORDER_CONSTRAINED)
            continue;
        for (size_t j = 0; j < n_sup; j++) {
            if (avail[j] > 0 && rp_need_eligible(s, m, &needs[i], sup[j].shape)) {
                n_elig[i]++;
                contest[j]++;
            }
        }
    }
    struct actx ctx = {m, needs, s, sup, n_elig, contest, order_kind};
    qsort_r(order, n_needs, sizeof *order,
            order_kind == RP_ORDER_CONSTRAINED ? cmp_need_constrained : cmp_need_order, &ctx);
    qsort_r(sorder, n_sup, sizeof *sorder, cmp_sup_order, &ctx);
    for (size_t oi = 0; oi < n_needs; oi++) {
        uint32_t i = order[oi];
        for (size_t q = 0; q < n_sup && short_of(&needs[i].agg, &cov[i]); q++) {
            uint32_t j = sorder[q];
            if (avail[j] <= 0 || !rp_need_eligible(s, m, &needs[i], sup[j].shape))
                continue;
            /* claiming identical machines one by one until remaining is zero
             * takes the largest per-dimension ceil of them */
            const rp_res *a = &s->v[sup[j].shape].alloc;
            int64_t k = 0;
            for (int d = 0; d < RP_DIMS; d++) {
                int64_t r = needs[i].agg.v[d] - cov[i].v[d];
                if (r > 0 && a->v[d] > 0) {
                    int64_t kd = (r + a->v[d] - 1) / a->v[d];
                    if (kd > k)
                        k = kd;
                }
            }
            if (k == 0)
                k = avail[j]; /* helps no missing dimension: claimed while short */
            if (k > avail[j])
                k = avail[j];
            avail[j] -= k;
            take[(size_t)i * n_sup + j] += k;
            for (int d = 0; d < RP_DIMS; d++)
                cov[i].v[d] += k * a->v[d];
        }
    }
out:
    free(order);
    free(sorder);
    free(avail);
    free(n_elig);
    free(contest);
    return rc;
}

/*
 * Repair: a short Need takes machines from Needs that stay covered without
 * them (over-coverage left by whole machines and by the claim order).
 */
static void repair(struct rp_shapes *s, const struct rp_model *m, const struct rp_need *needs,
                   size_t n_needs, const struct rp_supply_ent *sup, size_t n_sup, int64_t *take,
                   rp_res *cov)
{
    for (int pass = 0; pass < 4; pass++) {
        bool moved = false;
        for (size_t n = 0; n < n_needs; n++) {
            if (!short_of(&needs[n].agg, &cov[n]))
                continue;
            for (size_t j = 0; j < n_sup && short_of(&needs[n].agg, &cov[n]); j++) {
                if (!rp_need_eligible(s, m, &needs[n], sup[j].shape))
                    continue;
                const rp_res *a = &s->v[sup[j].shape].alloc;
                bool helps = false;
                for (int d = 0; d < RP_DIMS; d++)
                    helps |= cov[n].v[d] < needs[n].agg.v[d] && a->v[d] > 0;
                if (!helps)
                    continue;
                for (size_t h = 0; h < n_needs && short_of(&needs[n].agg, &cov[n]); h++) {
                    if (h == n)
                        continue;
                    while (take[h * n_sup + j] > 0 && short_of(&needs[n].agg, &cov[n])) {
                        bool keeps = true;
                        for (int d = 0; d < RP_DIMS; d++)
                            keeps &= cov[h].v[d] - a->v[d] >= needs[h].agg.v[d];
                        if (!keeps)
                            break;
                        take[h * n_sup + j]--;
                        take[n * n_sup + j]++;
                        for (int d = 0; d < RP_DIMS; d++) {
                            cov[h].v[d] -= a->v[d];
                            cov[n].v[d] += a->v[d];
                        }
                        moved = true;
                    }
                }
            }
        }
        if (!moved)
            break;
    }
}

static double score_cov(const struct rp_need *needs, size_t n, const rp_res *cov)
{
    double sc = 0;
    for (size_t i = 0; i < n; i++)
        for (int d = 0; d < RP_DIMS; d++)
            if (needs[i].agg.v[d] > 0)
                sc += cov[i].v[d] >= needs[i].agg.v[d]
                          ? 1.0
                          : (double)cov[i].v[d] / (double)needs[i].agg.v[d];
    return sc;
}

int rp_attribute(struct rp_shapes *s, const struct rp_model *m, const struct rp_need *needs,
                 size_t n_needs, const struct rp_supply_ent *sup, size_t n_sup, int order,
                 rp_res *residual, rp_res *covered)
{
    return rp_attribute_take(s, m, needs, n_needs, sup, n_sup, order, residual, covered, NULL);
}

int rp_attribute_take(struct rp_shapes *s, const struct rp_model *m, const struct rp_need *needs,
                      size_t n_needs, const struct rp_supply_ent *sup, size_t n_sup, int order,
                      rp_res *residual, rp_res *covered, int64_t *take_out)
{
    if (n_needs == 0)
        return 0;
    size_t nt = n_needs * (n_sup ? n_sup : 1);
    int64_t *take = malloc(nt * sizeof *take), *take2 = NULL;
    rp_res *cov = malloc(n_needs * sizeof *cov), *cov2 = NULL;
    int rc = 0;
    if (!take || !cov) {
        rc = -ENOMEM;
        goto out;
    }
    rc = attribute_one(s, m, needs, n_needs, sup, n_sup,
                       order == RP_ORDER_BEST ? RP_ORDER_ENGINE : order, take, cov);
    if (rc || order != RP_ORDER_BEST)
        goto done;
    bool any_short = false;
    for (size_t i = 0; i < n_needs; i++)
        any_short |= short_of(&needs[i].agg, &cov[i]);
    if (!any_short)
        goto done;
    repair(s, m, needs, n_needs, sup, n_sup, take, cov);
    take2 = malloc(nt * sizeof *take2);
    cov2 = malloc(n_needs * sizeof *cov2);
    if (!take2 || !cov2) {
        rc = -ENOMEM;
        goto out;
    }
    rc = attribute_one(s, m, needs, n_needs, sup, n_sup, RP_ORDER_CONSTRAINED, take2, cov2);
    if (rc)
        goto out;
    repair(s, m, needs, n_needs, sup, n_sup, take2, cov2);
    if (score_cov(needs, n_needs, cov2) > score_cov(needs, n_needs, cov)) {
        memcpy(cov, cov2, n_needs * sizeof *cov);
        memcpy(take, take2, nt * sizeof *take);
    }
done:
    if (take_out)
        memcpy(take_out, take, nt * sizeof *take);
    for (size_t i = 0; i < n_needs; i++) {
        for (int d = 0; d < RP_DIMS; d++) {
            int64_t left = needs[i].agg.v[d] - cov[i].v[d];
            residual[i].v[d] = left > 0 ? left : 0;
            if (covered)
                covered[i].v[d] = needs[i].agg.v[d] - residual[i].v[d];
        }
    }
out:
    free(take);
    free(take2);
    free(cov);
    free(cov2);
    return rc;
}

double rp_max_coverage(struct rp_shapes *s, const struct rp_model *m, const struct rp_need *needs,
                       size_t n_needs, const struct rp_supply_ent *sup, size_t n_sup, int32_t focus)
{
    if (n_needs == 0)
        return 0;
    /* distinct shapes with supply (tiers merged) */
    size_t ns = 0;
    uint32_t *shape = malloc((n_sup + 1) * sizeof *shape);
    int64_t *count = malloc((n_sup + 1) * sizeof *count);
    uint8_t *elig = NULL, *need_in = calloc(n_needs, 1), *shape_in = NULL;
    double *A = NULL, *b = NULL, *c = NULL, result = -1;
    if (!shape || !count || !need_in)
        goto out;
    for (size_t j = 0; j < n_sup; j++) {
        if (sup[j].n <= 0)
            continue;
        size_t k = 0;
        while (k < ns && shape[k] != sup[j].shape)
            k++;
        if (k == ns) {
            shape[ns] = sup[j].shape;
            count[ns++] = 0;
        }
        count[k] += sup[j].n;
    }
    if (focus >= 0) {
        size_t k = 0;
        while (k < ns && shape[k] != (uint32_t)focus)
            k++;
        if (k == ns) {
            shape[ns] = (uint32_t)focus;
            count[ns++] = 0;
        }
    }
    elig = calloc(n_needs * (ns ? ns : 1), 1);
    shape_in = calloc(ns ? ns : 1, 1);
    if (!elig || !shape_in)
        goto out;
    for (size_t i = 0; i < n_needs; i++)
        for (size_t k = 0; k < ns; k++)
            elig[i * ns + k] = rp_need_eligible(s, m, &needs[i], shape[k]);
    /* the connected component of `focus` (or everything) */
    if (focus < 0) {
        memset(need_in, 1, n_needs);
        memset(shape_in, 1, ns);
    } else {
        for (size_t k = 0; k < ns; k++)
            shape_in[k] = shape[k] == (uint32_t)focus;
        for (bool grew = true; grew;) {
            grew = false;
            for (size_t i = 0; i < n_needs; i++)
                for (size_t k = 0; k < ns; k++)
                    if (elig[i * ns + k] && (need_in[i] != shape_in[k])) {
                        need_in[i] = shape_in[k] = 1;
                        grew = true;
                    }
        }
    }
    /* variables: y(i,k) for eligible pairs in the component, then z(i,d) */
    size_t ny = 0, nz = 0;
    for (size_t i = 0; i < n_needs; i++) {
        if (!need_in[i])
            continue;
        for (size_t k = 0; k < ns; k++)
            ny += elig[i * ns + k] && shape_in[k] && count[k] > 0;
        for (int d = 0; d < RP_DIMS; d++)
            nz += needs[i].agg.v[d] > 0;
    }
    if (nz == 0) {
        result = 0;
        goto out;
    }
    size_t cols = ny + nz, rows = ns + 2 * nz;
    A = calloc(rows * cols, sizeof *A);
    b = calloc(rows, sizeof *b);
    c = calloc(cols, sizeof *c);
    if (!A || !b || !c)
        goto out;
    size_t y = 0, z = ny, zr = 0;
    for (size_t i = 0; i < n_needs; i++) {
        if (!need_in[i])
            continue;
        size_t y0 = y;
        for (size_t k = 0; k < ns; k++) {
            if (!(elig[i * ns + k] && shape_in[k] && count[k] > 0))
                continue;
            A[k * cols + y] = 1; /* supply row k */
            y++;
        }
        for (int d = 0; d < RP_DIMS; d++) {
            if (needs[i].agg.v[d] <= 0)
                continue;
            size_t row = ns + zr; /* z - sum(a/agg) y <= 0 */
            A[row * cols + z] = 1;
            size_t yy = y0;
            for (size_t k = 0; k < ns; k++) {
                if (!(elig[i * ns + k] && shape_in[k] && count[k] > 0))
                    continue;
                A[row * cols + yy] = -(double)s->v[shape[k]].alloc.v[d] / (double)needs[i].agg.v[d];
                yy++;
            }
            A[(ns + nz + zr) * cols + z] = 1; /* z <= 1 */
            b[ns + nz + zr] = 1;
            c[z] = 1;
            z++;
            zr++;
        }
    }
    for (size_t k = 0; k < ns; k++)
        b[k] = (double)count[k];
    double opt;
    if (rp_simplex_max(rows, cols, A, b, c, &opt, NULL) == 0)
        result = opt;
out:
    free(shape);
    free(count);
    free(elig);
    free(need_in);
    free(shape_in);
    free(A);
    free(b);
    free(c);
    return result;
}

int rp_machine_needed(struct rp_shapes *s, const struct rp_model *m, const struct rp_need *needs,
                      size_t n_needs, const struct rp_supply_ent *sup, size_t n_sup, uint32_t shape)
{
    if (n_needs == 0)
        return 0;
    rp_res *res = malloc(n_needs * sizeof *res);
    if (!res)
        return -ENOMEM;
    int rc = rp_attribute(s, m, needs, n_needs, sup, n_sup, RP_ORDER_ENGINE, res, NULL);
    if (rc) {
        free(res);
        return rc;
    }
    const rp_res *a = &s->v[shape].alloc;
    int short_ = 0;
    for (size_t i = 0; i < n_needs && !short_; i++) {
        if (!rp_need_eligible(s, m, &needs[i], shape))
            continue;
        for (int d = 0; d < RP_DIMS; d++)
            if (res[i].v[d] > 0 && a->v[d] > 0)
                short_ = 1;
    }
    free(res);
    if (!short_)
        return 0;
    /* confirm: does taking the machine away lower the best coverage? */
    struct rp_supply_ent *with = malloc((n_sup + 1) * sizeof *with);
    if (!with)
        return -ENOMEM;
    if (n_sup)
        memcpy(with, sup, n_sup * sizeof *sup);
    with[n_sup] = (struct rp_supply_ent){shape, 1, 0};
    double cov_with = rp_max_coverage(s, m, needs, n_needs, with, n_sup + 1, (int32_t)shape);
    double cov_without = rp_max_coverage(s, m, needs, n_needs, sup, n_sup, (int32_t)shape);
    free(with);
    if (cov_with < 0 || cov_without < 0)
        return -ENOMEM;
    return cov_with - cov_without > 1e-7 ? 1 : 0;
}
