/*
 * cost.c — where the cost goes: the gap between what the machines bound to
 * the clusters cost and the lower bound of the report, split into parts
 * that add up to it (docs/replay.md §5 "Where the cost goes"), and the
 * stacked plot of those parts over trace time (cost.svg).
 *
 * The split of one cluster at one timeline point (rp_cost_split_add):
 *  - its Configured machines that are not draining are credited to its
 *    Needs as for the satisfied share (rp_attribute_take, RP_ORDER_BEST:
 *    whole machines, each to one Need);
 *  - each Need n gets the dual solution y_n of its LP bound
 *    (rp_lp_bound_dual): the marginal $/h of a core, a GiB and a GPU for
 *    that Need; y_n.agg_n is its bound LB_n, and y_n.alloc_t <= price_t for
 *    every type eligible for it;
 *  - a machine of price p and allocatable a credited to n is split into
 *    y_n.a (what the bound would pay for a) and p - y_n.a >= 0 (the type
 *    premium: a dearer type than n's cheapest mix). Summed over n's
 *    machines, y_n.cap_n = LB_n + y_n.(cap_n - agg_n)+ - y_n.(agg_n - cap_n)+:
 *    the bound, plus capacity credited but idle inside the machines, minus
 *    demand not covered yet;
 *  - the premium of a shape is shared between "fresh" and "re-used from
 *    Idle" pro rata of the cluster's machines of that shape bound before
 *    (the shard credits machines of one shape without regard to history);
 *  - Configured machines credited to no Need, and the machines configuring
 *    or draining, are parts of their own.
 * Every term is computed, none is derived as a remainder, so the test that
 * the parts add up to cost - lower bound is a real check of the algebra.
 *
 * Units: dollars per hour; resources as rp_res (milli-CPU, MiB, milli-GPU).
 * Single-threaded (the replay's event loop, then the report).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run.h"

const char *const rp_cost_part_key[RP_COST_PARTS] = {
    "idle_inside_machines", "type_premium", "idle_reuse_premium", "unclaimed",
    "configuring",          "draining",     "uncovered_demand",
};
const char *const rp_cost_part_label[RP_COST_PARTS] = {
    "idle inside bound machines (whole machines, MinUnit)",
    "dearer types than the cheapest mix",
    "the same, on machines re-used from Idle",
    "Configured, claimed by no Need",
    "still configuring",
    "still draining",
    "demand not covered yet (negative)",
};

/* y (per core, GiB, GPU) . r (milli-CPU, MiB, milli-GPU), dollars per hour */
static double value_of(const double *y, const int64_t *r)
{
    return y[RP_CPU] * (double)r[RP_CPU] / 1000.0 + y[RP_MEM] * (double)r[RP_MEM] / 1024.0 +
           y[RP_GPU] * (double)r[RP_GPU] / 1000.0;
}

int rp_cost_split_add(struct rp_shapes *s, const struct rp_model *m, const struct rp_need *needs,
                      size_t n_needs, const struct rp_supply_ent *sup, size_t n_sup,
                      const int32_t *reused, double configuring, double draining,
                      struct rp_cost_split *acc)
{
    acc->part[RP_COST_CONFIGURING] += configuring;
    acc->part[RP_COST_DRAINING] += draining;
    acc->cost += configuring + draining;
    double conf_cost = 0;
    for (size_t j = 0; j < n_sup; j++)
        conf_cost += (double)sup[j].n * s->v[sup[j].shape].price;
    acc->cost += conf_cost;
    if (n_needs == 0) {
        acc->part[RP_COST_UNCLAIMED] += conf_cost;
        return 0;
    }
    size_t ns = n_sup ? n_sup : 1;
    int64_t *take = calloc(n_needs * ns, sizeof *take);
    rp_res *resid = malloc(n_needs * sizeof *resid);
    uint32_t *idx = malloc((m->n_types ? m->n_types : 1) * sizeof *idx);
    int rc = 0;
    if (!take || !resid || !idx) {
        rc = -ENOMEM;
        goto out;
    }
    if (n_sup && (rc = rp_attribute_take(s, m, needs, n_needs, sup, n_sup, RP_ORDER_BEST, resid,
                                         NULL, take)))
        goto out;
    double credited = 0;
    for (size_t i = 0; i < n_needs; i++) {
        double y[RP_DIMS];
        size_t nt = rp_need_types(m, &needs[i], idx, m->n_types);
        if (rp_lp_bound_dual(m->types, idx, nt, &needs[i].agg, y) < 0) {
            acc->needs_without_type++;
            memset(y, 0, sizeof y);
        }
        acc->lower_bound += value_of(y, needs[i].agg.v);
        int64_t cap[RP_DIMS] = {0};
        for (size_t j = 0; j < n_sup; j++) {
            int64_t k = take[i * ns + j];
            if (k <= 0)
                continue;
            const struct rp_shape *sh = &s->v[sup[j].shape];
            for (int d = 0; d < RP_DIMS; d++)
                cap[d] += k * sh->alloc.v[d];
            double premium = (double)k * (sh->price - value_of(y, sh->alloc.v));
            double share = 0;
            if (reused && sup[j].n > 0)
                share = (double)(reused[j] < sup[j].n ? reused[j] : sup[j].n) / (double)sup[j].n;
            acc->part[RP_COST_TYPE_PREMIUM] += premium * (1 - share);
            acc->part[RP_COST_IDLE_REUSE] += premium * share;
            credited += (double)k * sh->price;
        }
        int64_t over[RP_DIMS], under[RP_DIMS];
        for (int d = 0; d < RP_DIMS; d++) {
            int64_t diff = cap[d] - needs[i].agg.v[d];
            over[d] = diff > 0 ? diff : 0;
            under[d] = diff < 0 ? -diff : 0;
        }
        acc->part[RP_COST_IDLE_INSIDE] += value_of(y, over);
        acc->part[RP_COST_UNCOVERED] -= value_of(y, under);
    }
    acc->part[RP_COST_UNCLAIMED] += conf_cost - credited;
out:
    free(take);
    free(resid);
    free(idx);
    return rc;
}

double rp_cost_split_gap(const struct rp_cost_split *c)
{
    double g = 0;
    for (int p = 0; p < RP_COST_PARTS; p++)
        g += c->part[p];
    return g;
}

/* ------------------------------------------------------------ the plot */

static void text(FILE *f, double x, double y, const char *anchor, int size, const char *fill,
                 const char *s)
{
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"%d\" fill=\"%s\">", x, y,
            anchor, size, fill);
    for (; *s; s++) {
        if (*s == '<')
            fputs("&lt;", f);
        else if (*s == '>')
            fputs("&gt;", f);
        else if (*s == '&')
            fputs("&amp;", f);
        else
            fputc(*s, f);
    }
    fputs("</text>\n", f);
}

static double step_of(double range, int ticks)
{
    if (range <= 0)
        return 1;
    double raw = range / ticks, p = pow(10, floor(log10(raw))), q = raw / p;
    return (q <= 1 ? 1 : q <= 2 ? 2 : q <= 5 ? 5 : 10) * p;
}

/* Stack order, bottom to top, and colours: the bound, then the parts. */
static const int stack_part[] = {RP_COST_IDLE_INSIDE, RP_COST_TYPE_PREMIUM, RP_COST_IDLE_REUSE,
                                 RP_COST_UNCLAIMED,   RP_COST_CONFIGURING,  RP_COST_DRAINING};
#define N_STACK ((int)(sizeof stack_part / sizeof *stack_part))
static const char *const stack_color[N_STACK + 1] = {"#bdbdbd", "#fd8d3c", "#9e9ac8", "#dd3497",
                                                     "#e31a1c", "#6baed6", "#8c6d31"};

void rp_cost_svg(FILE *f, const struct rp_run *r)
{
    const int W = 1000, H = 560, L = 80, R = 30, T = 50, B = 150;
    double pw = W - L - R, ph = H - T - B;
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
            "<defs><pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
            "patternTransform=\"rotate(45)\"><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" "
            "stroke=\"#444\" stroke-width=\"1.2\"/></pattern></defs>\n",
            W, H, W, H);
    const char *base = strrchr(r->trace->path, '/');
    char title[256];
    snprintf(title, sizeof title, "Where the cost goes ($/h over trace time) - %s, %u cluster%s",
             base ? base + 1 : r->trace->path, r->n_cl, r->n_cl == 1 ? "" : "s");
    text(f, W / 2.0, 24, "middle", 16, "#222", title);
    /* points with a sample, their x (days) and stacked tops */
    size_t n = 0;
    for (size_t k = 0; k < r->n_ticks; k++)
        n += r->ticks[k].clusters > 0;
    fprintf(f,
            "<rect x=\"%d\" y=\"%d\" width=\"%.0f\" height=\"%.0f\" fill=\"#fafafa\" "
            "stroke=\"#999\"/>\n",
            L, T, pw, ph);
    if (n == 0 || !r->model->n_types) {
        text(f, W / 2.0, H / 2.0, "middle", 14, "#666",
             r->model->n_types ? "no timeline points" : "no catalog: no lower bound to compare");
        fputs("</svg>\n", f);
        return;
    }
    double *xs = malloc(n * sizeof *xs), *lay = calloc(n * (N_STACK + 2), sizeof *lay);
    double *cost = malloc(n * sizeof *cost);
    if (!xs || !lay || !cost) {
        free(xs);
        free(lay);
        free(cost);
        fputs("</svg>\n", f);
        return;
    }
    double x0 = INFINITY, x1 = -INFINITY, ymax = 0;
    size_t i = 0;
    for (size_t k = 0; k < r->n_ticks; k++) {
        const struct rp_tick *t = &r->ticks[k];
        if (!t->clusters)
            continue;
        xs[i] = ((double)r->clock.from +
                 (double)k * (double)r->clock.interval_ns / 1e9 * r->clock.speed) /
                86400;
        x0 = fmin(x0, xs[i]);
        x1 = fmax(x1, xs[i]);
        /* lay[i][0] = 0, lay[i][1] = bound, lay[i][l + 1] = bound + parts below l */
        double top = fmax(0, t->split.lower_bound);
        lay[i * (N_STACK + 2) + 1] = top;
        for (int l = 0; l < N_STACK; l++) {
            top += fmax(0, t->split.part[stack_part[l]]);
            lay[i * (N_STACK + 2) + l + 2] = top;
        }
        cost[i] = t->split.cost;
        ymax = fmax(ymax, fmax(top, cost[i]));
        i++;
    }
    if (x1 <= x0)
        x1 = x0 + 1;
    if (ymax <= 0)
        ymax = 1;
    double ystep = step_of(ymax, 5);
    ymax = ceil(ymax * 1.05 / ystep) * ystep;
#define PX(x) (L + ((x)-x0) / (x1 - x0) * pw)
#define PY(y) (T + ph - (y) / ymax * ph)
    for (double y = 0; y <= ymax + 1e-9; y += ystep) {
        fprintf(f, "<line x1=\"%d\" x2=\"%.0f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", L,
                L + pw, PY(y), PY(y));
        char lab[32];
        snprintf(lab, sizeof lab, "%g", y);
        text(f, L - 6, PY(y) + 4, "end", 11, "#444", lab);
    }
    double xstep = step_of(x1 - x0, 8);
    for (double x = ceil(x0 / xstep) * xstep; x <= x1 + 1e-9; x += xstep) {
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%.0f\" stroke=\"#eee\"/>\n", PX(x),
                PX(x), T, T + ph);
        char lab[32];
        snprintf(lab, sizeof lab, "%g", x);
        text(f, PX(x), T + ph + 14, "middle", 10, "#444", lab);
    }
    /* layers: polygon between lay[l] and lay[l + 1] */
    for (int l = 0; l <= N_STACK; l++) {
        fprintf(f, "<polygon fill=\"%s\" fill-opacity=\"0.85\" stroke=\"none\" points=\"",
                stack_color[l]);
        for (size_t p = 0; p < n; p++)
            fprintf(f, "%.1f,%.1f ", PX(xs[p]), PY(lay[p * (N_STACK + 2) + l + 1]));
        for (size_t p = n; p-- > 0;)
            fprintf(f, "%.1f,%.1f ", PX(xs[p]), PY(lay[p * (N_STACK + 2) + l]));
        fputs("\"/>\n", f);
    }
    /* uncovered demand: hatched between the cost line and the top of the stack */
    fputs("<polygon fill=\"url(#hatch)\" stroke=\"none\" points=\"", f);
    for (size_t p = 0; p < n; p++)
        fprintf(f, "%.1f,%.1f ", PX(xs[p]), PY(lay[p * (N_STACK + 2) + N_STACK + 1]));
    for (size_t p = n; p-- > 0;)
        fprintf(f, "%.1f,%.1f ", PX(xs[p]),
                PY(fmin(cost[p], lay[p * (N_STACK + 2) + N_STACK + 1])));
    fputs("\"/>\n", f);
    fputs("<polyline fill=\"none\" stroke=\"#000\" stroke-width=\"1.6\" points=\"", f);
    for (size_t p = 0; p < n; p++)
        fprintf(f, "%.1f,%.1f ", PX(xs[p]), PY(cost[p]));
    fputs("\"/>\n", f);
#undef PX
#undef PY
    text(f, L + pw / 2, T + ph + 34, "middle", 12, "#444", "trace time (days)");
    text(f, 18, T + ph / 2, "middle", 12, "#444", "$/h");
    /* legend, two columns */
    const char *names[N_STACK + 3];
    const char *colors[N_STACK + 3];
    names[0] = "lower bound (cheapest fractional mix per Need)";
    colors[0] = stack_color[0];
    for (int l = 0; l < N_STACK; l++) {
        names[l + 1] = rp_cost_part_label[stack_part[l]];
        colors[l + 1] = stack_color[l + 1];
    }
    names[N_STACK + 1] = rp_cost_part_label[RP_COST_UNCOVERED];
    colors[N_STACK + 1] = "url(#hatch)";
    names[N_STACK + 2] = "cost of the bound machines (line)";
    colors[N_STACK + 2] = "#000";
    for (int l = 0; l < N_STACK + 3; l++) {
        double lx = L + (l % 2) * 450, ly = T + ph + 58 + (l / 2) * 18;
        if (l == N_STACK + 2)
            fprintf(f,
                    "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#000\" "
                    "stroke-width=\"2\"/>\n",
                    lx, lx + 18, ly - 4, ly - 4);
        else
            fprintf(f,
                    "<rect x=\"%.1f\" y=\"%.1f\" width=\"18\" height=\"11\" fill=\"%s\" "
                    "stroke=\"#666\" stroke-width=\"0.5\"/>\n",
                    lx, ly - 10, colors[l]);
        text(f, lx + 24, ly, "start", 12, "#222", names[l]);
    }
    fputs("</svg>\n", f);
    free(xs);
    free(lay);
    free(cost);
}
