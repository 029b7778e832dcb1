/*
 * bound.c — the cost lower bound of the report and small statistics.
 *
 * Lower bound of one Need: the cheapest fractional mix of the catalog types
 * eligible for it (its requirements, and each type hosting its MinUnit)
 * that covers its aggregate in every dimension:
 *
 *     min  sum_t p_t x_t   s.t.  sum_t alloc_t,d x_t >= agg_d  (d = cpu, memory, gpu),  x >= 0
 *
 * Any real assignment (whole machines, each machine to one Need) costs at
 * least the sum of these bounds over the Needs. The dual has only three
 * variables,
 *
 *     max  sum_d agg_d y_d  s.t.  sum_d alloc_t,d y_d <= p_t  for every t,  y >= 0,
 *
 * and the origin is feasible (prices are >= 0), so a textbook tableau
 * simplex with Bland's rule solves it with no phase 1; by strong duality
 * its optimum is the primal optimum. Unbounded dual = infeasible primal (a
 * dimension that none of the types provides): -1.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"

#define EPS 1e-9

int rp_simplex_max(size_t rows, size_t cols, const double *A, const double *b, const double *c,
                   double *opt, double *x)
{
    size_t w = cols + rows + 1; /* variables, slacks, rhs */
    double *t = calloc((rows + 1) * w, sizeof *t);
    size_t *basis = malloc((rows ? rows : 1) * sizeof *basis);
    if (!t || !basis) {
        free(t);
        free(basis);
        return -ENOMEM;
    }
#define T(r, k) t[(r)*w + (k)]
    for (size_t r = 0; r < rows; r++) {
        for (size_t k = 0; k < cols; k++)
            T(r, k) = A[r * cols + k];
        T(r, cols + r) = 1;
        T(r, w - 1) = b[r];
        basis[r] = cols + r;
    }
    for (size_t k = 0; k < cols; k++)
        T(rows, k) = -c[k];
    int rc = 1;
    size_t limit = 50 * (rows + cols) + 1000;
    for (size_t iter = 0; iter < 4 * limit; iter++) {
        /* entering column: Dantzig's rule (most negative reduced cost); after
         * `limit` pivots Bland's rule (lowest index), which cannot cycle */
        size_t enter = w;
        double best = -EPS;
        for (size_t k = 0; k + 1 < w; k++) {
            if (T(rows, k) < best) {
                enter = k;
                if (iter >= limit)
                    break;
                best = T(rows, k);
            }
        }
        if (enter == w) {
            *opt = T(rows, w - 1);
            if (x) {
                memset(x, 0, cols * sizeof *x);
                for (size_t r = 0; r < rows; r++)
                    if (basis[r] < cols)
                        x[basis[r]] = T(r, w - 1);
            }
            rc = 0;
            break;
        }
        size_t leave = rows;
        double ratio_best = INFINITY;
        for (size_t r = 0; r < rows; r++) {
            if (T(r, enter) > EPS) {
                double ratio = T(r, w - 1) / T(r, enter);
                if (ratio < ratio_best - EPS ||
                    (ratio <= ratio_best + EPS && leave < rows && basis[r] < basis[leave])) {
                    ratio_best = ratio < ratio_best ? ratio : ratio_best;
                    leave = r;
                }
            }
        }
        if (leave == rows)
            break; /* unbounded */
        double pv = T(leave, enter);
        for (size_t k = 0; k < w; k++)
            T(leave, k) /= pv;
        for (size_t r = 0; r <= rows; r++) {
            if (r == leave)
                continue;
            double f = T(r, enter);
            if (f == 0)
                continue;
            for (size_t k = 0; k < w; k++)
                T(r, k) -= f * T(leave, k);
        }
        basis[leave] = enter;
    }
#undef T
    free(t);
    free(basis);
    return rc;
}

double rp_lp_bound(const struct bf_sim_type *types, const uint32_t *idx, size_t n,
                   const rp_res *agg)
{
    return rp_lp_bound_dual(types, idx, n, agg, NULL);
}

double rp_lp_bound_dual(const struct bf_sim_type *types, const uint32_t *idx, size_t n,
                        const rp_res *agg, double *y)
{
    double c[RP_DIMS] = {agg->v[RP_CPU] / 1000.0, agg->v[RP_MEM] / 1024.0, agg->v[RP_GPU] / 1000.0};
    bool any = false;
    if (y)
        memset(y, 0, RP_DIMS * sizeof *y);
    for (int d = 0; d < RP_DIMS; d++)
        any |= c[d] > 0;
    if (!any)
        return 0;
    if (n == 0)
        return -1;
    /* the dual: max agg.y s.t. alloc_t.y <= price_t, y >= 0 */
    double *A = malloc(n * RP_DIMS * sizeof *A), *b = malloc(n * sizeof *b);
    if (!A || !b) {
        free(A);
        free(b);
        return -1;
    }
    for (size_t r = 0; r < n; r++) {
        const struct bf_sim_type *ty = &types[idx[r]];
        A[r * RP_DIMS + 0] = ty->cpu_milli / 1000.0;
        A[r * RP_DIMS + 1] = ty->memory_mib / 1024.0;
        A[r * RP_DIMS + 2] = ty->gpus;
        b[r] = ty->price_per_hour;
    }
    double opt = -1;
    int rc = rp_simplex_max(n, RP_DIMS, A, b, c, &opt, y);
    free(A);
    free(b);
    return rc == 0 ? opt : -1;
}

/* The attribute a catalog type's machines carry for a label key, or NULL. */
static const char *type_attr(const struct bf_sim_type *ty, const char *key, char *buf, size_t n)
{
    if (!strcmp(key, BF_LABEL_INSTANCE_TYPE))
        return ty->name;
    if (ty->gpus > 0 && !strcmp(key, BF_SIM_LABEL_GPU_MODEL) && ty->gpu_model[0])
        return ty->gpu_model;
    if (ty->gpus > 0 && !strcmp(key, BF_SIM_LABEL_GPU_COUNT)) {
        snprintf(buf, n, "%d", ty->gpus);
        return buf;
    }
    return NULL;
}

size_t rp_need_types(const struct rp_model *m, const struct rp_need *n, uint32_t *out, size_t cap)
{
    const struct rp_class *c = &m->classes[n->cls];
    size_t k = 0;
    for (size_t t = 0; t < m->n_types && k < cap; t++) {
        const struct bf_sim_type *ty = &m->types[t];
        if (ty->cpu_milli < n->min_unit.v[RP_CPU] || ty->memory_mib < n->min_unit.v[RP_MEM] ||
            (int64_t)ty->gpus * 1000 < n->min_unit.v[RP_GPU])
            continue;
        bool ok = true;
        for (uint32_t i = 0; i < c->prof.n_reqs && ok; i++) {
            const struct bf_requirement *r = &c->prof.reqs[i];
            char buf[16];
            const char *v = type_attr(ty, r->key, buf, sizeof buf);
            bool in = false;
            for (uint32_t j = 0; v && j < r->n_values; j++)
                in |= !strcmp(r->values[j], v);
            switch (r->op) {
            case BF_OP_IN:
                ok = v && in;
                break;
            case BF_OP_NOT_IN:
                ok = !v || !in;
                break;
            case BF_OP_EXISTS:
                ok = v != NULL;
                break;
            case BF_OP_DOES_NOT_EXIST:
                ok = v == NULL;
                break;
            case BF_OP_SAME:
                ok = v && (r->n_values == 0 || in);
                break;
            default:
                ok = false;
            }
        }
        if (ok)
            out[k++] = (uint32_t)t;
    }
    return k;
}

int64_t rp_percentile(const int64_t *sorted, size_t n, double pct)
{
    if (n == 0)
        return 0;
    double r = ceil(pct / 100.0 * (double)n);
    size_t i = r < 1 ? 0 : (size_t)r - 1;
    if (i >= n)
        i = n - 1;
    return sorted[i];
}
