/*
 * report.c — the replay's report: the summary figures, the text printed at
 * the end, report.json and two hand-written SVG plots (demand vs bound
 * capacity over trace time; the binding-latency distribution).
 *
 * Definitions (docs/replay.md "Report"):
 *  - timeline point k = rollup k of every cluster, sampled just before the
 *    cluster's rollup k+1 (the shard had one interval to act on it):
 *    demand (sum of the Needs' aggregates), covered (what the Configured
 *    machines bound to the cluster cover of each Need, each machine credited
 *    to one Need), bound (allocatable of all Configured machines), cost ($/h
 *    of every machine Configuring, Configured or Draining for a cluster);
 *  - satisfied share of a point = min over cpu/memory/gpu of covered/demand;
 *  - peak = the point with the largest list-price-weighted demand
 *    (0.033 $/vCPU, 0.00375 $/GiB, 2.00 $/GPU: the simprovider's list price);
 *  - lower bound at the peak = sum over the peak's Needs of the LP bound
 *    (bound.c) over the catalog types eligible for each Need.
 * Runs after the loop stopped; single-threaded.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bigfleet/json.h"
#include "bigfleet/util.h"
#include "run.h"

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : (x > y);
}

static const double dim_price[RP_DIMS] = {0.033 / 1000, 0.00375 / 1024, 2.0 / 1000};

static double point_min_share(const struct rp_tick *t, double *per_dim)
{
    double m = 1;
    for (int d = 0; d < RP_DIMS; d++) {
        double s = t->demand[d] > 0 ? t->covered[d] / t->demand[d] : 1;
        if (per_dim)
            per_dim[d] = s;
        if (t->demand[d] > 0 && s < m)
            m = s;
    }
    return m;
}

/* min over the dimensions with demand of covered / demand; NaN without demand */
static double share_of(const double *demand, const double *covered)
{
    double m = NAN;
    for (int d = 0; d < RP_DIMS; d++) {
        if (demand[d] <= 0)
            continue;
        double x = covered[d] / demand[d];
        if (isnan(m) || x < m)
            m = x;
    }
    return m;
}

/* The acceptance order of a contended run: LS >= Burstable >= BE among the
 * classes with demand, within 0.1 percentage point (equal shares at 100%
 * are equal, not an inversion). */
static bool qos_ordered(const double *sat)
{
    static const int order[] = {RP_QOS_LS, RP_QOS_BURSTABLE, RP_QOS_BE};
    double above = NAN;
    for (size_t i = 0; i < sizeof order / sizeof *order; i++) {
        double v = sat[order[i]];
        if (isnan(v))
            continue;
        if (!isnan(above) && v > above + 0.001)
            return false;
        above = v;
    }
    return true;
}

void rp_report_summarize(struct rp_run *r, struct rp_summary *s)
{
    memset(s, 0, sizeof *s);
    double best = -1;
    double sum = 0;
    double dq[RP_QOS_COUNT][RP_DIMS] = {{0}}, cq[RP_QOS_COUNT][RP_DIMS] = {{0}};
    s->sat_min = 1;
    for (size_t k = 0; k < r->n_ticks; k++) {
        const struct rp_tick *t = &r->ticks[k];
        if (t->clusters == 0)
            continue;
        for (int q = 0; q < RP_QOS_COUNT; q++)
            for (int d = 0; d < RP_DIMS; d++) {
                dq[q][d] += t->demand_q[q][d];
                cq[q][d] += t->covered_q[q][d];
            }
        if (t->weight > 0) {
            double m = point_min_share(t, NULL);
            sum += m;
            s->sat_samples++;
            if (m < s->sat_min)
                s->sat_min = m;
        }
        if (t->weight > best) {
            best = t->weight;
            s->peak_k = k;
            s->have_peak = t->weight > 0;
        }
    }
    s->sat_mean = s->sat_samples ? sum / (double)s->sat_samples : 1;
    if (!s->sat_samples)
        s->sat_min = 1;
    if (s->have_peak) {
        const struct rp_tick *t = &r->ticks[s->peak_k];
        s->peak_trace_s = (double)r->clock.from +
                          (double)s->peak_k * (double)r->clock.interval_ns / 1e9 * r->clock.speed;
        s->sat_peak_min = point_min_share(t, s->sat_peak);
        double wd = 0, wc = 0;
        for (int d = 0; d < RP_DIMS; d++) {
            wd += t->demand[d] * dim_price[d];
            wc += t->covered[d] * dim_price[d];
        }
        s->sat_peak_weighted = wd > 0 ? wc / wd : 1;
        s->cost_peak = t->cost;
        /* the bound of the peak's Needs and the split of the gap, both taken
         * at the sample itself (cost.c) */
        s->split_peak = t->split;
        s->lower_bound_peak = t->split.lower_bound;
        s->lb_infeasible_needs = t->split.needs_without_type;
        for (int q = 0; q < RP_QOS_COUNT; q++)
            s->sat_q_peak[q] = share_of(t->demand_q[q], t->covered_q[q]);
    } else {
        for (int q = 0; q < RP_QOS_COUNT; q++)
            s->sat_q_peak[q] = NAN;
    }
    for (int q = 0; q < RP_QOS_COUNT; q++)
        s->sat_q[q] = share_of(dq[q], cq[q]);
    s->pods_window = r->pods_observed + r->pods_unobserved;
    for (int p = 0; p <= RP_QOS_COUNT; p++)
        for (int v = 0; v < RP_QOS_COUNT + 2; v++)
            s->preemptions += r->preempt_by[p][v];
    if (r->n_lat) {
        qsort(r->lat, r->n_lat, sizeof *r->lat, cmp_i64);
        s->lat_p50 = rp_percentile(r->lat, r->n_lat, 50);
        s->lat_p90 = rp_percentile(r->lat, r->n_lat, 90);
        s->lat_p99 = rp_percentile(r->lat, r->n_lat, 99);
        s->lat_max = r->lat[r->n_lat - 1];
    }
    if (r->n_e2e) {
        qsort(r->e2e, r->n_e2e, sizeof *r->e2e, cmp_i64);
        s->e2e_p50 = rp_percentile(r->e2e, r->n_e2e, 50);
        s->e2e_p99 = rp_percentile(r->e2e, r->n_e2e, 99);
    }
    s->lat_target_ns = r->clock.interval_ns + 2 * r->cfg->cycle_hint_ns;
    s->pass_satisfied = s->have_peak && s->sat_peak_min >= 0.99;
    s->pass_reclaims = r->reclaim_still_demanded == 0;
    s->pass_latency = s->lat_p99 <= s->lat_target_ns;
    s->pass_preempted = s->preemptions > 0;
    s->pass_no_higher = r->preempt_of_higher == 0;
    s->pass_qos_order = qos_ordered(s->sat_q);
    if (r->cfg->contended)
        s->pass = s->pass_preempted && s->pass_no_higher && s->pass_qos_order && s->pass_reclaims &&
                  !r->interrupted;
    else
        s->pass = s->pass_satisfied && s->pass_reclaims && s->pass_latency && !r->interrupted;
}

/* ------------------------------------------------------------ text */

static void fmt_dur(int64_t ns, char *b, size_t n)
{
    if (ns < BF_NS_PER_MS)
        snprintf(b, n, "%.0f us", (double)ns / 1e3);
    else if (ns < BF_NS_PER_SEC)
        snprintf(b, n, "%.1f ms", (double)ns / 1e6);
    else
        snprintf(b, n, "%.2f s", (double)ns / 1e9);
}

static void fmt_trace_time(double s, char *b, size_t n)
{
    long long t = (long long)s;
    snprintf(b, n, "day %lld %02lld:%02lld (t=%lld s)", t / 86400, t % 86400 / 3600, t % 3600 / 60,
             t);
}

static double metric(const struct rp_run *r, const char *name, const char *match)
{
    return r->have_final_metrics ? rp_prom_sum(&r->final_metrics, name, match) : NAN;
}

/* "12" or "-" (not exported by the shard) */
static const char *num_or_dash(double v, char *b, size_t n)
{
    if (isnan(v))
        snprintf(b, n, "-");
    else
        snprintf(b, n, "%.0f", v);
    return b;
}

/* A span of trace seconds the way a person says it: "45 s", "7.2 min", "20 h", "3 d". */
static void fmt_span(double sec, char *b, size_t n)
{
    if (sec < 120)
        snprintf(b, n, "%.3g s", sec);
    else if (sec < 2 * 3600)
        snprintf(b, n, "%.3g min", sec / 60);
    else if (sec < 2 * 86400)
        snprintf(b, n, "%.3g h", sec / 3600);
    else
        snprintf(b, n, "%.3g d", sec / 86400);
}

/* "day 146 06:00" */
static void fmt_day(int64_t t, char *b, size_t n)
{
    if (t < 0)
        t = 0;
    snprintf(b, n, "day %lld %02d:%02d", (long long)(t / 86400), (int)(t % 86400 / 3600),
             (int)(t % 3600 / 60));
}

/* The first lines: how wall time maps to trace time. */
static void print_time(const struct rp_run *r, FILE *f)
{
    const struct rp_clock *ck = &r->clock;
    const struct rp_trace *t = r->trace;
    const char *base = strrchr(t->path, '/');
    base = base ? base + 1 : t->path;
    char a[48], b[48], c[48], d[48], e[48];
    fmt_day(ck->from, a, sizeof a);
    fmt_day(ck->until, b, sizeof b);
    fmt_span((double)(ck->until - ck->from), c, sizeof c);
    double wall_s =
        ((double)(ck->until - ck->from) + (double)(r->n_cl - 1) * (double)ck->offset) / ck->speed;
    char what[160];
    if (t->snapshot)
        snprintf(what, sizeof what, "a snapshot: %zu pods arriving over %s, then held", t->n_pods,
                 (fmt_span((double)t->snap_ramp, e, sizeof e), e));
    else if (r->cfg->busiest)
        snprintf(what, sizeof what, "the busiest %s of %s", c, base);
    else if (ck->from == t->first_create && ck->until == t->end)
        snprintf(what, sizeof what, "all of %s", base);
    else
        snprintf(what, sizeof what, "a window of %s", base);
    if (r->cfg->busiest || t->snapshot)
        fprintf(f, "  time         trace %s .. %s (%s) replayed in %.0f s of wall time\n", a, b,
                what, wall_s);
    else
        fprintf(f, "  time         trace %s .. %s (%s, %s) replayed in %.0f s of wall time\n", a, b,
                c, what, wall_s);
    fmt_span(ck->speed, a, sizeof a);
    fmt_span((double)ck->interval_ns / 1e9 * ck->speed, b, sizeof b);
    fmt_dur(ck->interval_ns, d, sizeof d);
    fprintf(
        f,
        "               1 s of wall time = %s of trace (speed %.0fx); a rollup every %s of wall "
        "time = every %s of trace\n",
        a, ck->speed, d, b);
    if (r->n_cl > 1) {
        fmt_span((double)ck->offset, a, sizeof a);
        fmt_dur((int64_t)((double)ck->offset / ck->speed * 1e9), b, sizeof b);
        fprintf(f,
                "               %u clusters: copy i replays the same window %s of trace (%s of "
                "wall time) after copy i-1\n",
                r->n_cl, a, b);
    }
}

/* "LS 97.1%, Burstable 80.0%, BE 41.2%" over the classes with demand */
static void qos_list(const double *sat, char *b, size_t n)
{
    static const int order[] = {RP_QOS_GUARANTEED, RP_QOS_LS, RP_QOS_BURSTABLE, RP_QOS_BE};
    size_t l = 0;
    b[0] = 0;
    for (size_t i = 0; i < sizeof order / sizeof *order && l < n; i++) {
        if (isnan(sat[order[i]]))
            continue;
        l += (size_t)snprintf(b + l, n - l, "%s%s %.1f%%", l ? ", " : "",
                              rp_qos_table[order[i]].name, 100 * sat[order[i]]);
    }
}

static void print_qos(const struct rp_summary *s, FILE *f)
{
    char a[160], b[160];
    qos_list(s->sat_q, a, sizeof a);
    qos_list(s->sat_q_peak, b, sizeof b);
    fprintf(f, "               by qos over the run: %s; at peak: %s\n", a, b);
}

/* short names of the parts of the gap, for the text report */
static const char *const part_short[RP_COST_PARTS] = {
    "idle inside machines", "dearer types", "re-used from Idle", "unclaimed",
    "configuring",          "draining",     "uncovered demand",
};

/* rounding noise of the incremental sums (|v| < half a cent) prints as 0.00, not -0.00 */
static double dollars(double v)
{
    return fabs(v) < 0.005 ? 0 : v;
}

static void print_split(const struct rp_run *r, const struct rp_summary *s, FILE *f)
{
    const struct rp_cost_split *sp = &s->split_peak;
    fprintf(f, "               gap at peak $%.2f/h =", s->cost_peak - s->lower_bound_peak);
    for (int p = 0; p < RP_COST_PARTS; p++)
        fprintf(f, "%s %s $%.2f", p ? " +" : "", part_short[p], dollars(sp->part[p]));
    fprintf(f, "\n");
    /* over the run: mean of each part, as a share of the mean gap */
    double mean[RP_COST_PARTS] = {0}, gap = 0;
    size_t n = 0;
    for (size_t k = 0; k < r->n_ticks; k++) {
        if (!r->ticks[k].clusters)
            continue;
        n++;
        for (int p = 0; p < RP_COST_PARTS; p++)
            mean[p] += r->ticks[k].split.part[p];
    }
    if (!n)
        return;
    for (int p = 0; p < RP_COST_PARTS; p++)
        gap += (mean[p] /= (double)n);
    fprintf(f, "               mean gap over the run $%.2f/h =", gap);
    for (int p = 0; p < RP_COST_PARTS; p++)
        fprintf(f, "%s %s $%.2f", p ? " +" : "", part_short[p], dollars(mean[p]));
    fprintf(f, " (cost.svg)\n");
}

static void print_preemptions(const struct rp_run *r, FILE *f)
{
    uint64_t total = 0;
    for (int p = 0; p <= RP_QOS_COUNT; p++)
        for (int v = 0; v < RP_QOS_COUNT + 2; v++)
            total += r->preempt_by[p][v];
    fprintf(f, "  preemptions  %llu", (unsigned long long)total);
    for (int p = RP_QOS_COUNT; p >= 0; p--) {
        uint64_t row = 0;
        for (int v = 0; v < RP_QOS_COUNT + 2; v++)
            row += r->preempt_by[p][v];
        if (!row)
            continue;
        fprintf(f, "; by %s %llu (of demand", p < RP_QOS_COUNT ? rp_qos_table[p].name : "other",
                (unsigned long long)row);
        bool first = true;
        for (int v = RP_QOS_COUNT + 1; v >= 0; v--) {
            if (!r->preempt_by[p][v])
                continue;
            fprintf(f, "%s %s %llu", first ? "" : ",",
                    v == RP_VICTIM_UNKNOWN ? "unjudged"
                    : v == RP_VICTIM_SPARE ? "none (spare)"
                                           : rp_qos_table[v].name,
                    (unsigned long long)r->preempt_by[p][v]);
            first = false;
        }
        fprintf(f, ")");
    }
    fprintf(f, "\n               of higher-priority demand: %llu\n",
            (unsigned long long)r->preempt_of_higher);
    for (uint64_t i = 0; i < r->preempt_of_higher && i < 5; i++)
        fprintf(f, "    at +%.3f s: %s (%s) of %s, preemptor priority %d\n",
                (double)r->preempt_of_higher_ev[i].at_ns / 1e9, r->preempt_of_higher_ev[i].machine,
                r->preempt_of_higher_ev[i].type, r->preempt_of_higher_ev[i].cluster,
                (int)r->preempt_of_higher_ev[i].preemptor_priority);
}

static void print_verdicts(const struct rp_run *r, FILE *f)
{
    const struct rp_inspect *in = &r->inspect;
    if (!in->calls)
        return;
    if (!in->have_last) {
        fprintf(f, "  verdicts     ShardRead/InspectNeeds: %llu calls, none answered (%s)\n",
                (unsigned long long)in->calls, in->last_error);
        return;
    }
    const struct rp_inspect_poll *w = &in->worst;
    fprintf(f,
            "  verdicts     the shard's own (InspectNeeds, %llu polls): at most %u of %u Needs "
            "unsatisfied (at +%.0f s: priority starved %u, no matching supply %u, preemption "
            "exhausted %u, topology %u), parked %u, %u with Phase 2 victims",
            (unsigned long long)in->calls, w->unsatisfied, w->needs, (double)w->at_ns / 1e9,
            w->unmet_reason[1], w->unmet_reason[2], w->unmet_reason[4], w->unmet_reason[3],
            w->parked, w->preempting);
    if (w->unsatisfied) {
        fprintf(f, "; unsatisfied by qos:");
        for (int q = RP_QOS_COUNT; q >= 0; q--)
            if (w->unsatisfied_q[q])
                fprintf(f, " %s %u", q < RP_QOS_COUNT ? rp_qos_table[q].name : "other",
                        w->unsatisfied_q[q]);
    }
    fprintf(f, "\n               last poll: %u of %u unsatisfied, parked %u%s%s\n",
            in->last.unsatisfied, in->last.needs, in->last.parked, in->errors ? "; errors: " : "",
            in->errors ? in->last_error : "");
}

void rp_report_print(const struct rp_run *r, const struct rp_summary *s, FILE *f)
{
    const struct rp_config *cfg = r->cfg;
    char a[64], b[64], c[64], d[64];
    fprintf(f, "\nbigfleet-replay report%s%s\n", cfg->contended ? " (contended run)" : "",
            r->interrupted ? " (INTERRUPTED: partial)" : "");
    print_time(r, f);
    fprintf(f, "  trace        %s: %zu pods (%zu rows, %zu skipped), window %lld..%lld s%s%s\n",
            r->trace->path, r->trace->n_pods, r->trace->rows, r->trace->skipped,
            (long long)r->clock.from, (long long)r->clock.until,
            r->trace->snapshot ? "; snapshot: " : "", r->trace->snapshot ? r->trace->snap_why : "");
    if (r->trace->qos_default >= 0)
        fprintf(f, "               no qos column: every pod is %s\n",
                rp_qos_table[r->trace->qos_default].name);
    fprintf(f,
            "  replay       %u cluster%s over %u connection%s, speed %.0fx, rollup every %s "
            "(= %.0f s of trace), %.1f s wall\n",
            r->n_cl, r->n_cl == 1 ? "" : "s", r->n_clients, r->n_clients == 1 ? "" : "s",
            r->clock.speed, (fmt_dur(r->clock.interval_ns, a, sizeof a), a),
            (double)r->clock.interval_ns / 1e9 * r->clock.speed,
            (double)(r->end_ns - r->start_ns) / 1e9);
    uint64_t sent = 0, acked = 0, coalesced = 0;
    for (uint32_t i = 0; i < r->n_cl; i++) {
        sent += r->cl[i].rollups_sent;
        acked += r->cl[i].acks_rollup;
        coalesced += r->cl[i].rollups_coalesced;
    }
    fprintf(f,
            "  pods         %llu of the window's %llu seen in a rollup (%.1f%%), %llu lived and "
            "died between two rollups; classes %zu\n",
            (unsigned long long)r->pods_observed, (unsigned long long)s->pods_window,
            s->pods_window ? 100.0 * (double)r->pods_observed / (double)s->pods_window : 0,
            (unsigned long long)r->pods_unobserved, r->model->n_classes);
    fprintf(f, "  rollups      %llu sent, %llu acked, %llu coalesced\n", (unsigned long long)sent,
            (unsigned long long)acked, (unsigned long long)coalesced);
    if (s->have_peak) {
        fmt_trace_time(s->peak_trace_s, a, sizeof a);
        fprintf(f,
                "  satisfied    at peak (%s): %.2f%% (cpu %.2f%%, memory %.2f%%, gpu %.2f%%; "
                "price-weighted %.2f%%)\n",
                a, 100 * s->sat_peak_min, 100 * s->sat_peak[RP_CPU], 100 * s->sat_peak[RP_MEM],
                100 * s->sat_peak[RP_GPU], 100 * s->sat_peak_weighted);
        fprintf(f, "               over time: mean %.2f%%, min %.2f%% (%zu points)\n",
                100 * s->sat_mean, 100 * s->sat_min, s->sat_samples);
        print_qos(s, f);
    } else {
        fprintf(f, "  satisfied    no demand was replayed\n");
    }
    fmt_dur(s->lat_p50, a, sizeof a);
    fmt_dur(s->lat_p99, b, sizeof b);
    fmt_dur(s->lat_max, c, sizeof c);
    fmt_dur(s->lat_target_ns, d, sizeof d);
    fprintf(f,
            "  binding      first rollup -> Configured: p50 %s, p99 %s, max %s (%zu pods; "
            "target p99 <= %s)\n",
            a, b, c, r->n_lat, d);
    if (r->have_final_metrics) { /* the shard's own cycle, next to the binding it drives */
        const char *h = "bigfleet_shard_cycle_duration_seconds";
        double c50 = rp_prom_hist_quantile(&r->final_metrics, h, 0.5);
        double c99 = rp_prom_hist_quantile(&r->final_metrics, h, 0.99);
        double cn =
            rp_prom_sum(&r->final_metrics, "bigfleet_shard_cycle_duration_seconds_count", NULL);
        if (!isnan(c50) && !isnan(c99)) {
            fmt_dur((int64_t)(c50 * 1e9), a, sizeof a);
            fmt_dur((int64_t)(c99 * 1e9), b, sizeof b);
            fprintf(f, "  shard cycle  p50 %s, p99 %s (%.0f cycles; /metrics histogram)\n", a, b,
                    cn);
        }
    }
    fmt_dur(s->e2e_p50, a, sizeof a);
    fmt_dur(s->e2e_p99, b, sizeof b);
    fprintf(f,
            "               pod created -> Configured: p50 %s, p99 %s; %llu pods fit in "
            "machines already bound, %llu deleted before bound, %llu never bound\n",
            a, b, (unsigned long long)r->pods_covered_at_once,
            (unsigned long long)r->pods_deleted_unbound, (unsigned long long)r->pods_never_bound);
    fprintf(f,
            "  machines     provisioned %llu, reclaimed %llu, preempted %llu, drained %llu, "
            "failed %llu",
            (unsigned long long)r->provisioned, (unsigned long long)r->reclaimed,
            (unsigned long long)r->preempted, (unsigned long long)r->drained,
            (unsigned long long)r->failed);
    if (r->have_final_metrics) {
        char rel[24];
        fprintf(
            f, ", released %s (shard /metrics)",
            num_or_dash(metric(r, "bigfleet_shard_idle_releases_total", NULL), rel, sizeof rel));
    }
    fprintf(f, "\n");
    if (s->have_peak && r->model->n_types) {
        fprintf(f, "  cost         at peak $%.2f/h; lower bound $%.2f/h (%.2fx)%s\n", s->cost_peak,
                s->lower_bound_peak,
                s->lower_bound_peak > 0 ? s->cost_peak / s->lower_bound_peak : 0,
                s->lb_infeasible_needs ? " [some Needs fit no catalog type]" : "");
        print_split(r, s, f);
    }
    if (s->preemptions || cfg->contended)
        print_preemptions(r, f);
    fprintf(f, "  reclaims of still-demanded machines: %llu\n",
            (unsigned long long)r->reclaim_still_demanded);
    for (uint64_t i = 0; i < r->reclaim_still_demanded && i < RP_RECLAIM_SAMPLES; i++)
        fprintf(f, "    at +%.3f s: %s (%s) of %s\n", (double)r->still_demanded[i].at_ns / 1e9,
                r->still_demanded[i].machine, r->still_demanded[i].type,
                r->still_demanded[i].cluster);
    if (r->have_final_metrics) {
        char n1[24], n2[24], n3[24], n4[24], n5[24];
        fprintf(
            f,
            "  shard        rollups received %s, accepted %s, rejected %s; actions: provision %s, "
            "bootstrap %s",
            num_or_dash(metric(r, "bigfleet_shard_session_rollups_received_total", NULL), n1,
                        sizeof n1),
            num_or_dash(metric(r, "bigfleet_shard_session_rollups_accepted_total", NULL), n2,
                        sizeof n2),
            num_or_dash(metric(r, "bigfleet_shard_session_rollups_rejected_total", NULL), n3,
                        sizeof n3),
            num_or_dash(metric(r, "bigfleet_shard_actions_total", "kind=\"Provision\""), n4,
                        sizeof n4),
            num_or_dash(metric(r, "bigfleet_shard_actions_total", "kind=\"Bootstrap\""), n5,
                        sizeof n5));
        fprintf(f, ", reclaim %s, preempt %s, delete %s",
                num_or_dash(metric(r, "bigfleet_shard_actions_total", "kind=\"Reclaim\""), n1,
                            sizeof n1),
                num_or_dash(metric(r, "bigfleet_shard_actions_total", "kind=\"Preempt\""), n2,
                            sizeof n2),
                num_or_dash(metric(r, "bigfleet_shard_actions_total", "kind=\"Delete\""), n3,
                            sizeof n3));
        double p50 = rp_prom_hist_quantile(&r->final_metrics,
                                           "bigfleet_shard_provisioning_latency_seconds", 0.5);
        double p99 = rp_prom_hist_quantile(&r->final_metrics,
                                           "bigfleet_shard_provisioning_latency_seconds", 0.99);
        if (!isnan(p50))
            fprintf(f, "; provisioning latency p50 %.3f s, p99 %.3f s", p50, p99);
        fprintf(f, "\n");
    } else if (cfg->metrics_addr) {
        fprintf(f, "  shard        /metrics not read: %s\n", r->metrics_error);
    }
    print_verdicts(r, f);
    if (r->ticks_skipped || r->send_errors || r->bad_msgs || r->nsu_no_shape || r->reclaim_unknown)
        fprintf(f,
                "  anomalies    ticks skipped %llu, send errors %llu, bad frames %llu, "
                "Configured updates without a shape %llu, reclaims of unknown machines %llu\n",
                (unsigned long long)r->ticks_skipped, (unsigned long long)r->send_errors,
                (unsigned long long)r->bad_msgs, (unsigned long long)r->nsu_no_shape,
                (unsigned long long)r->reclaim_unknown);
    if (cfg->contended)
        fprintf(f,
                "  acceptance   %s (contended: >= 1 preemption: %s; 0 preemptions of "
                "higher-priority demand: %s; satisfied LS >= Burstable >= BE: %s; 0 reclaims of "
                "still-demanded machines: %s)\n",
                s->pass ? "PASS" : "FAIL", s->pass_preempted ? "yes" : "no",
                s->pass_no_higher ? "yes" : "no", s->pass_qos_order ? "yes" : "no",
                s->pass_reclaims ? "yes" : "no");
    else
        fprintf(f,
                "  acceptance   %s (satisfied at peak >= 99%%: %s; 0 reclaims of still-demanded "
                "machines: %s; binding p99 <= rollup interval + 2 cycles: %s)\n",
                s->pass ? "PASS" : "FAIL", s->pass_satisfied ? "yes" : "no",
                s->pass_reclaims ? "yes" : "no", s->pass_latency ? "yes" : "no");
}

/* ------------------------------------------------------------ JSON */

/* a string literal escaped by the base layer's JSON writer (bigfleet/json.h) */
static void jstr(FILE *f, const char *s)
{
    struct bf_strbuf b = {0};
    bf_json_escape(&b, s, strlen(s));
    fputs(b.failed || !b.p ? "null" : b.p, f);
    bf_sb_free(&b);
}

static void jnum(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, "%.10g", v);
    else
        fputs("null", f);
}

/* , "key": {"p50": q, "p99": q, "count": n} of a Prometheus histogram */
static void jhist(FILE *f, const struct rp_prom *p, const char *key, const char *metric)
{
    char count[128];
    snprintf(count, sizeof count, "%s_count", metric);
    fprintf(f, ", \"%s\": {\"p50\": ", key);
    jnum(f, rp_prom_hist_quantile(p, metric, 0.5));
    fprintf(f, ", \"p99\": ");
    jnum(f, rp_prom_hist_quantile(p, metric, 0.99));
    fprintf(f, ", \"count\": ");
    jnum(f, rp_prom_sum(p, count, NULL));
    fputc('}', f);
}

static void write_json(FILE *f, const struct rp_run *r, const struct rp_summary *s)
{
    const struct rp_config *cfg = r->cfg;
    fprintf(f, "{\n  \"tool\": \"bigfleet-replay\",\n  \"interrupted\": %s,\n",
            r->interrupted ? "true" : "false");
    fprintf(f, "  \"input\": {\"trace\": ");
    jstr(f, r->trace->path);
    fprintf(f, ", \"rows\": %zu, \"pods\": %zu, \"skipped_rows\": %zu, \"skipped_samples\": [",
            r->trace->rows, r->trace->n_pods, r->trace->skipped);
    for (size_t i = 0; i < r->trace->skipped && i < RP_SKIP_SAMPLES; i++) {
        if (i)
            fputs(", ", f);
        jstr(f, r->trace->skip_samples[i]);
    }
    fprintf(f, "], \"catalog\": ");
    if (cfg->catalog_path)
        jstr(f, cfg->catalog_path);
    else
        fputs("null", f);
    fprintf(f,
            ", \"instance_types\": %zu, \"classes\": %zu, \"pinned\": %s, "
            "\"unfittable_pods\": %zu, \"snapshot\": ",
            r->model->n_types, r->model->n_classes, r->model->pin ? "true" : "false",
            r->model->unfittable_pods);
    if (r->trace->snapshot) {
        fprintf(f, "{\"ramp_s\": %lld, \"hold_s\": %lld, \"why\": ", (long long)r->trace->snap_ramp,
                (long long)r->trace->snap_hold);
        jstr(f, r->trace->snap_why);
        fputc('}', f);
    } else {
        fputs("null", f);
    }
    fprintf(f, ", \"qos_default\": ");
    if (r->trace->qos_default >= 0)
        jstr(f, rp_qos_table[r->trace->qos_default].name);
    else
        fputs("null", f);
    fprintf(f, "},\n");
    fprintf(f, "  \"replay\": {\"shard_addr\": ");
    jstr(f, cfg->shard_addr);
    fprintf(f,
            ", \"clusters\": %u, \"connections\": %u, \"from_s\": %lld, \"until_s\": %lld, "
            "\"speed\": %.10g, \"rollup_interval_s\": %.6g, \"trace_s_per_rollup\": %.6g, "
            "\"cluster_offset_s\": %lld, \"cycle_interval_hint_s\": %.6g, \"wall_s\": %.3f, "
            "\"shard_epoch\": %lld, \"busiest_s\": %lld, \"contended\": %s},\n",
            r->n_cl, r->n_clients, (long long)r->clock.from, (long long)r->clock.until,
            r->clock.speed, (double)r->clock.interval_ns / 1e9,
            (double)r->clock.interval_ns / 1e9 * r->clock.speed, (long long)r->clock.offset,
            (double)cfg->cycle_hint_ns / 1e9, (double)(r->end_ns - r->start_ns) / 1e9,
            (long long)r->shard_epoch, (long long)cfg->busiest, cfg->contended ? "true" : "false");
    uint64_t sent = 0, acked = 0, coalesced = 0, unsent = 0, restarts = 0, timeouts = 0;
    for (uint32_t i = 0; i < r->n_cl; i++) {
        sent += r->cl[i].rollups_sent;
        acked += r->cl[i].acks_rollup;
        coalesced += r->cl[i].rollups_coalesced;
        unsent += r->cl[i].rollups_unsent;
        restarts += r->cl[i].sessions_started ? r->cl[i].sessions_started - 1 : 0;
        timeouts += r->cl[i].sessions_timed_out;
    }
    fprintf(
        f,
        "  \"protocol\": {\"rollups_sent\": %llu, \"rollup_acks\": %llu, \"rollups_coalesced\": "
        "%llu, \"session_restarts\": %llu, \"sessions_timed_out\": %llu, \"bootstrap_requests\": "
        "%llu, "
        "\"bootstrap_cluster_mismatch\": %llu, \"reclaim_instructions\": %llu, "
        "\"node_state_updates\": %llu, \"available_capacity_updates\": %llu, "
        "\"bad_frames\": %llu, \"send_errors\": %llu, \"ticks_skipped\": %llu},\n",
        (unsigned long long)sent, (unsigned long long)acked,
        (unsigned long long)(coalesced + unsent), (unsigned long long)restarts,
        (unsigned long long)timeouts, (unsigned long long)r->boot_req,
        (unsigned long long)r->boot_cluster_mismatch, (unsigned long long)r->reclaim_msgs,
        (unsigned long long)r->nsu, (unsigned long long)r->ac_updates,
        (unsigned long long)r->bad_msgs, (unsigned long long)r->send_errors,
        (unsigned long long)r->ticks_skipped);
    fprintf(f,
            "  \"pods\": {\"window\": %llu, \"observed\": %llu, \"observed_share\": %.6f, "
            "\"between_rollups\": %llu, \"latency_samples\": %zu, "
            "\"covered_at_once\": %llu, \"deleted_before_bound\": %llu, \"never_bound\": %llu},\n",
            (unsigned long long)s->pods_window, (unsigned long long)r->pods_observed,
            s->pods_window ? (double)r->pods_observed / (double)s->pods_window : 0.0,
            (unsigned long long)r->pods_unobserved, r->n_lat,
            (unsigned long long)r->pods_covered_at_once,
            (unsigned long long)r->pods_deleted_unbound, (unsigned long long)r->pods_never_bound);
    fprintf(f, "  \"satisfied\": {\"at_peak\": ");
    if (s->have_peak) {
        fprintf(f, "{\"rollup\": %zu, \"trace_s\": %.0f, \"min\": ", s->peak_k, s->peak_trace_s);
        jnum(f, s->sat_peak_min);
        fprintf(f, ", \"cpu\": ");
        jnum(f, s->sat_peak[RP_CPU]);
        fprintf(f, ", \"memory\": ");
        jnum(f, s->sat_peak[RP_MEM]);
        fprintf(f, ", \"gpu\": ");
        jnum(f, s->sat_peak[RP_GPU]);
        fprintf(f, ", \"price_weighted\": ");
        jnum(f, s->sat_peak_weighted);
        const struct rp_tick *t = &r->ticks[s->peak_k];
        fprintf(f, ", \"demand\": {\"cpu_cores\": %.3f, \"memory_gib\": %.3f, \"gpus\": %.3f}",
                t->demand[RP_CPU] / 1000, t->demand[RP_MEM] / 1024, t->demand[RP_GPU] / 1000);
        fprintf(f, ", \"pods\": %u, \"needs\": %u}", t->pods, t->needs);
    } else {
        fputs("null", f);
    }
    fprintf(f, ", \"mean\": ");
    jnum(f, s->sat_mean);
    fprintf(f, ", \"min\": ");
    jnum(f, s->sat_min);
    fprintf(f, ", \"points\": %zu, \"by_qos\": {", s->sat_samples);
    for (int q = 0; q < RP_QOS_COUNT; q++) {
        fprintf(f, "%s\"%s\": {\"over_run\": ", q ? ", " : "", rp_qos_table[q].name);
        jnum(f, s->sat_q[q]);
        fprintf(f, ", \"at_peak\": ");
        jnum(f, s->sat_q_peak[q]);
        fputc('}', f);
    }
    fprintf(f, "}},\n");
    fprintf(
        f,
        "  \"binding_latency_s\": {\"definition\": \"first rollup carrying the pod -> its Need "
        "covered by Configured machines bound to the cluster\", \"samples\": %zu, \"p50\": %.6f, "
        "\"p90\": %.6f, \"p99\": %.6f, \"max\": %.6f, \"target_p99\": %.6f, "
        "\"from_pod_creation\": {\"samples\": %zu, \"p50\": %.6f, \"p99\": %.6f}, \"histogram\": [",
        r->n_lat, (double)s->lat_p50 / 1e9, (double)s->lat_p90 / 1e9, (double)s->lat_p99 / 1e9,
        (double)s->lat_max / 1e9, (double)s->lat_target_ns / 1e9, r->n_e2e,
        (double)s->e2e_p50 / 1e9, (double)s->e2e_p99 / 1e9);
    /* power-of-two buckets from 1 ms: le = 0.001 * 2^i s */
    size_t j = 0;
    for (int i = 0; i < 24; i++) {
        int64_t le = (int64_t)(BF_NS_PER_MS * ((double)(1u << i)));
        size_t n0 = j;
        while (j < r->n_lat && r->lat[j] <= le)
            j++;
        fprintf(f, "%s{\"le\": %.3f, \"count\": %zu}", i ? ", " : "", (double)le / 1e9, j - n0);
    }
    fprintf(f, ", {\"le\": null, \"count\": %zu}]},\n", r->n_lat - j);
    fprintf(f,
            "  \"machines\": {\"provisioned\": %llu, \"reclaimed\": %llu, \"preempted\": %llu, "
            "\"drained\": %llu, \"failed\": %llu, \"released\": ",
            (unsigned long long)r->provisioned, (unsigned long long)r->reclaimed,
            (unsigned long long)r->preempted, (unsigned long long)r->drained,
            (unsigned long long)r->failed);
    jnum(f, metric(r, "bigfleet_shard_idle_releases_total", NULL));
    fprintf(f, ", \"seen\": %zu, \"shapes\": %zu, \"reclaims_of_unknown_machines\": %llu},\n",
            r->n_m, r->shapes.n, (unsigned long long)r->reclaim_unknown);
    fprintf(f,
            "  \"reclaims_still_demanded\": {\"count\": %llu, \"window_s\": %.3f, \"samples\": [",
            (unsigned long long)r->reclaim_still_demanded, (double)cfg->reclaim_window_ns / 1e9);
    for (uint64_t i = 0; i < r->reclaim_still_demanded && i < RP_RECLAIM_SAMPLES; i++) {
        const struct rp_reclaim_event *e = &r->still_demanded[i];
        fprintf(f, "%s{\"at_s\": %.6f, \"machine\": ", i ? ", " : "", (double)e->at_ns / 1e9);
        jstr(f, e->machine);
        fputs(", \"cluster\": ", f);
        jstr(f, e->cluster);
        fputs(", \"type\": ", f);
        jstr(f, e->type);
        fputc('}', f);
    }
    fprintf(f, "]},\n  \"cost_per_hour\": {\"at_peak\": ");
    jnum(f, s->have_peak ? s->cost_peak : NAN);
    fprintf(f, ", \"lower_bound_at_peak\": ");
    jnum(f, s->have_peak && r->model->n_types ? s->lower_bound_peak : NAN);
    fprintf(f, ", \"ratio\": ");
    jnum(f, s->lower_bound_peak > 0 ? s->cost_peak / s->lower_bound_peak : NAN);
    fprintf(f, ", \"needs_fitting_no_type\": %llu, \"gap_at_peak\": ",
            (unsigned long long)s->lb_infeasible_needs);
    jnum(f, s->have_peak && r->model->n_types ? s->cost_peak - s->lower_bound_peak : NAN);
    fprintf(f, ", \"split_at_peak\": ");
    if (s->have_peak && r->model->n_types) {
        fputc('{', f);
        for (int p = 0; p < RP_COST_PARTS; p++) {
            fprintf(f, "%s\"%s\": ", p ? ", " : "", rp_cost_part_key[p]);
            jnum(f, s->split_peak.part[p]);
        }
        fprintf(f, "}, \"split_sum_at_peak\": ");
        jnum(f, rp_cost_split_gap(&s->split_peak));
    } else {
        fputs("null, \"split_sum_at_peak\": null", f);
    }
    fprintf(f, "},\n");
    fprintf(f,
            "  \"preemptions\": {\"total\": %llu, \"of_higher_priority_demand\": %llu, "
            "\"judging_s\": %.3f, \"by_preemptor\": {",
            (unsigned long long)s->preemptions, (unsigned long long)r->preempt_of_higher,
            (double)r->preempt_judge_ns / 1e9);
    bool pfirst = true;
    for (int p = 0; p <= RP_QOS_COUNT; p++) {
        uint64_t row = 0;
        for (int v = 0; v < RP_QOS_COUNT + 2; v++)
            row += r->preempt_by[p][v];
        if (!row)
            continue;
        fprintf(f, "%s\"%s\": {", pfirst ? "" : ", ",
                p < RP_QOS_COUNT ? rp_qos_table[p].name : "other");
        for (int v = 0; v < RP_QOS_COUNT + 2; v++)
            fprintf(f, "%s\"%s\": %llu", v ? ", " : "",
                    v == RP_VICTIM_UNKNOWN ? "unjudged"
                    : v == RP_VICTIM_SPARE ? "spare"
                                           : rp_qos_table[v].name,
                    (unsigned long long)r->preempt_by[p][v]);
        fputc('}', f);
        pfirst = false;
    }
    fprintf(f, "}, \"samples\": [");
    for (uint64_t i = 0; i < r->preempt_of_higher && i < RP_RECLAIM_SAMPLES; i++) {
        const struct rp_reclaim_event *e = &r->preempt_of_higher_ev[i];
        fprintf(f, "%s{\"at_s\": %.6f, \"machine\": ", i ? ", " : "", (double)e->at_ns / 1e9);
        jstr(f, e->machine);
        fputs(", \"cluster\": ", f);
        jstr(f, e->cluster);
        fprintf(f, ", \"preemptor_priority\": %d}", (int)e->preemptor_priority);
    }
    fprintf(f, "]},\n");
    fprintf(f, "  \"shard_verdicts\": ");
    if (r->inspect.have_last) {
        const struct rp_inspect_poll *ps[2] = {&r->inspect.worst, &r->inspect.last};
        fprintf(f, "{\"polls\": %llu, \"errors\": %llu", (unsigned long long)r->inspect.calls,
                (unsigned long long)r->inspect.errors);
        for (int i = 0; i < 2; i++) {
            const struct rp_inspect_poll *w = ps[i];
            fprintf(f,
                    ", \"%s\": {\"at_s\": %.3f, \"needs\": %u, \"unsatisfied\": %u, "
                    "\"parked\": %u, \"with_victims\": %u, \"priority_starved\": %u, "
                    "\"no_matching_supply\": %u, \"topology_unsatisfiable\": %u, "
                    "\"preemption_exhausted\": %u, \"unsatisfied_by_qos\": {",
                    i ? "last" : "most_unsatisfied", (double)w->at_ns / 1e9, w->needs,
                    w->unsatisfied, w->parked, w->preempting, w->unmet_reason[1],
                    w->unmet_reason[2], w->unmet_reason[3], w->unmet_reason[4]);
            for (int q = 0; q <= RP_QOS_COUNT; q++)
                fprintf(f, "%s\"%s\": %u", q ? ", " : "",
                        q < RP_QOS_COUNT ? rp_qos_table[q].name : "other", w->unsatisfied_q[q]);
            fputs("}}", f);
        }
        fputs("},\n", f);
    } else if (r->inspect.calls) {
        fputs("{\"error\": ", f);
        jstr(f, r->inspect.last_error);
        fputs("},\n", f);
    } else {
        fputs("null,\n", f);
    }
    fprintf(f, "  \"shard_metrics\": ");
    if (r->have_final_metrics) {
        const struct rp_prom *p = &r->final_metrics;
        static const char *kinds[] = {"Provision", "Bootstrap", "Reclaim", "Preempt", "Delete"};
        fprintf(f, "{\"actions_total\": {");
        for (size_t i = 0; i < 5; i++) {
            char m[64];
            snprintf(m, sizeof m, "kind=\"%s\"", kinds[i]);
            fprintf(f, "%s\"%s\": ", i ? ", " : "", kinds[i]);
            jnum(f, rp_prom_sum(p, "bigfleet_shard_actions_total", m));
        }
        fprintf(f, "}, \"execute_outcomes\": {");
        /* every (kind, outcome) pair present */
        bool first = true;
        for (size_t i = 0; i < p->n; i++) {
            if (strcmp(p->v[i].name, "bigfleet_shard_action_execute_outcomes_total"))
                continue;
            char k[64], o[64];
            if (!rp_prom_label(p->v[i].labels, "kind", k, sizeof k) ||
                !rp_prom_label(p->v[i].labels, "outcome", o, sizeof o))
                continue;
            char key[140];
            snprintf(key, sizeof key, "%s/%s", k, o);
            fprintf(f, "%s", first ? "" : ", ");
            jstr(f, key);
            fputs(": ", f);
            jnum(f, p->v[i].value);
            first = false;
        }
        fprintf(f, "}, \"inventory\": {");
        for (int st = 1; st < BF_STATE_COUNT; st++) {
            char m[64];
            snprintf(m, sizeof m, "state=\"%s\"", bf_state_name(st));
            fprintf(f, "%s\"%s\": ", st > 1 ? ", " : "", bf_state_name(st));
            jnum(f, rp_prom_sum(p, "bigfleet_shard_inventory_machines", m));
        }
        /* {key, metric}: the session's rollup counters, then top-level totals */
        static const char *const sums[][2] = {
            {"received", "bigfleet_shard_session_rollups_received_total"},
            {"accepted", "bigfleet_shard_session_rollups_accepted_total"},
            {"rejected", "bigfleet_shard_session_rollups_rejected_total"},
            {"quarantined", "bigfleet_shard_session_rollups_quarantined_total"},
            {"idle_releases_total", "bigfleet_shard_idle_releases_total"},
            {"rollups_rejected_total", "bigfleet_shard_rollups_rejected_total"},
            {"reclaims_capped_total", "bigfleet_shard_reclaims_capped_total"},
        };
        for (size_t k = 0; k < sizeof sums / sizeof *sums; k++) {
            /* 0: opens session_rollups; 4: closes it */
            const char *sep = k == 0 ? "}, \"session_rollups\": {" : k == 4 ? "}, " : ", ";
            fprintf(f, "%s\"%s\": ", sep, sums[k][0]);
            jnum(f, rp_prom_sum(p, sums[k][1], NULL));
        }
        jhist(f, p, "provisioning_latency_s", "bigfleet_shard_provisioning_latency_seconds");
        jhist(f, p, "cycle_duration_s", "bigfleet_shard_cycle_duration_seconds");
        fputc('}', f);
    } else if (cfg->metrics_addr) {
        fputs("{\"error\": ", f);
        jstr(f, r->metrics_error);
        fputc('}', f);
    } else {
        fputs("null", f);
    }
    fprintf(
        f,
        ",\n  \"acceptance\": {\"pass\": %s, \"contended\": %s, \"satisfied_at_peak_ge_99pct\": "
        "%s, \"no_reclaims_of_still_demanded\": %s, \"latency_p99_within_target\": %s, "
        "\"preempted\": %s, \"no_preemption_of_higher_priority\": %s, "
        "\"satisfied_ordered_by_qos\": %s},\n",
        s->pass ? "true" : "false", cfg->contended ? "true" : "false",
        s->pass_satisfied ? "true" : "false", s->pass_reclaims ? "true" : "false",
        s->pass_latency ? "true" : "false", s->pass_preempted ? "true" : "false",
        s->pass_no_higher ? "true" : "false", s->pass_qos_order ? "true" : "false");
    fprintf(f, "  \"clusters\": [");
    for (uint32_t i = 0; i < r->n_cl; i++) {
        const struct rp_cluster *c = &r->cl[i];
        uint64_t configured = 0;
        for (size_t q = 0; q < c->n_conf; q++)
            configured += (uint64_t)c->conf[q].n;
        fprintf(f, "%s\n    {\"id\": ", i ? "," : "");
        jstr(f, c->id);
        fprintf(f,
                ", \"rollups_sent\": %llu, \"ticks_skipped\": %llu, \"rollup_acks\": %llu, "
                "\"sessions\": %llu, \"last_rollup\": %lld, \"needs\": %zu, \"pods\": %zu, "
                "\"configured\": %llu, \"mean_cost_split\": ",
                (unsigned long long)c->rollups_sent, (unsigned long long)c->ticks_skipped,
                (unsigned long long)c->acks_rollup, (unsigned long long)c->sessions_started,
                (long long)c->cur_k, c->n_needs, c->n_alive, (unsigned long long)configured);
        if (c->split_n) {
            fprintf(f, "{\"cost\": %.4f, \"lower_bound\": %.4f", c->split_sum.cost / c->split_n,
                    c->split_sum.lower_bound / c->split_n);
            for (int p = 0; p < RP_COST_PARTS; p++)
                fprintf(f, ", \"%s\": %.4f", rp_cost_part_key[p],
                        c->split_sum.part[p] / c->split_n);
            fputs("}}", f);
        } else {
            fputs("null}", f);
        }
    }
    fprintf(f, "],\n");
    fprintf(f,
            "  \"timeline\": {\"columns\": [\"rollup\", \"trace_s\", \"clusters\", \"pods\", "
            "\"needs\", "
            "\"demand_cpu_cores\", \"demand_memory_gib\", \"demand_gpus\", \"covered_cpu_cores\", "
            "\"covered_memory_gib\", \"covered_gpus\", \"bound_cpu_cores\", \"bound_memory_gib\", "
            "\"bound_gpus\", \"cost_per_hour\", \"lower_bound_per_hour\"");
    for (int p = 0; p < RP_COST_PARTS; p++)
        fprintf(f, ", \"%s\"", rp_cost_part_key[p]);
    for (int q = 0; q < RP_QOS_COUNT; q++)
        fprintf(f, ", \"satisfied_%s\"", rp_qos_table[q].name);
    fprintf(f, "], \"rows\": [");
    bool first = true;
    for (size_t k = 0; k < r->n_ticks; k++) {
        const struct rp_tick *t = &r->ticks[k];
        if (!t->clusters)
            continue;
        double ts =
            (double)r->clock.from + (double)k * (double)r->clock.interval_ns / 1e9 * r->clock.speed;
        fprintf(f,
                "%s\n    [%zu, %.0f, %u, %u, %u, %.3f, %.3f, %.3f, %.3f, %.3f, %.3f, %.3f, %.3f, "
                "%.3f, %.4f, %.4f",
                first ? "" : ",", k, ts, t->clusters, t->pods, t->needs, t->demand[RP_CPU] / 1000,
                t->demand[RP_MEM] / 1024, t->demand[RP_GPU] / 1000, t->covered[RP_CPU] / 1000,
                t->covered[RP_MEM] / 1024, t->covered[RP_GPU] / 1000, t->bound[RP_CPU] / 1000,
                t->bound[RP_MEM] / 1024, t->bound[RP_GPU] / 1000, t->cost, t->split.lower_bound);
        for (int p = 0; p < RP_COST_PARTS; p++)
            fprintf(f, ", %.4f", t->split.part[p]);
        for (int q = 0; q < RP_QOS_COUNT; q++) {
            fputs(", ", f);
            jnum(f, share_of(t->demand_q[q], t->covered_q[q]));
        }
        fputc(']', f);
        first = false;
    }
    fprintf(f, "]}\n}\n");
}

/* ------------------------------------------------------------ SVG */

static double nice_step(double range, int ticks)
{
    if (range <= 0)
        return 1;
    double raw = range / ticks, p = pow(10, floor(log10(raw))), m = raw / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

static void svg_text(FILE *f, double x, double y, const char *anchor, int size, const char *fill,
                     const char *txt)
{
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"%d\" fill=\"%s\">", x, y,
            anchor, size, fill);
    for (const char *p = txt; *p; p++) {
        if (*p == '<')
            fputs("&lt;", f);
        else if (*p == '>')
            fputs("&gt;", f);
        else if (*p == '&')
            fputs("&amp;", f);
        else
            fputc(*p, f);
    }
    fputs("</text>\n", f);
}

static void write_demand_svg(FILE *f, const struct rp_run *r)
{
    const int W = 1000, PH = 230, L = 80, R = 30, T = 50, GAP = 40;
    const int H = T + 3 * PH + 2 * GAP + 80;
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            W, H, W, H);
    char title[256];
    const char *base = strrchr(r->trace->path, '/');
    snprintf(title, sizeof title, "Demand vs bound capacity over trace time - %s, %u cluster%s",
             base ? base + 1 : r->trace->path, r->n_cl, r->n_cl == 1 ? "" : "s");
    svg_text(f, W / 2.0, 24, "middle", 16, "#222", title);
    static const char *names[RP_DIMS] = {"CPU (cores)", "memory (GiB)", "GPUs"};
    static const double scale[RP_DIMS] = {1000, 1024, 1000};
    double x0 = (double)r->clock.from / 86400, x1 = (double)r->clock.until / 86400;
    double span_days = ((double)(r->n_ticks ? r->n_ticks - 1 : 1) * (double)r->clock.interval_ns /
                        1e9 * r->clock.speed) /
                       86400;
    if (x0 + span_days > x1)
        x1 = x0 + span_days;
    if (x1 <= x0)
        x1 = x0 + 1;
    for (int d = 0; d < RP_DIMS; d++) {
        double top = T + d * (PH + GAP), bot = top + PH;
        double ymax = 0;
        for (size_t k = 0; k < r->n_ticks; k++) {
            const struct rp_tick *t = &r->ticks[k];
            if (!t->clusters)
                continue;
            ymax = fmax(ymax, fmax(t->demand[d], t->bound[d]) / scale[d]);
        }
        if (ymax <= 0)
            ymax = 1;
        double step = nice_step(ymax, 4);
        ymax = ceil(ymax * 1.05 / step) * step;
        fprintf(f,
                "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%d\" fill=\"#fafafa\" "
                "stroke=\"#999\"/>\n",
                L, top, W - L - R, PH);
        for (double y = 0; y <= ymax + 1e-9; y += step) {
            double py = bot - y / ymax * PH;
            fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", L,
                    W - R, py, py);
            char lab[32];
            snprintf(lab, sizeof lab, "%g", y);
            svg_text(f, L - 6, py + 4, "end", 11, "#444", lab);
        }
        svg_text(f, L + 4, top - 6, "start", 13, "#222", names[d]);
        double xs = nice_step(x1 - x0, 8);
        for (double x = ceil(x0 / xs) * xs; x <= x1 + 1e-9; x += xs) {
            double px = L + (x - x0) / (x1 - x0) * (W - L - R);
            fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n",
                    px, px, top, bot);
            char lab[32];
            snprintf(lab, sizeof lab, "%g", x);
            svg_text(f, px, bot + 14, "middle", 10, "#444", lab);
        }
        /* bound capacity, then demand (wide), then covered (dashed, on top):
         * where covered == demand the blue shows on both sides of the green */
        static const int order[3] = {1, 0, 2};
        static const char *colors[3] = {"#1f77b4", "#ff7f0e", "#2ca02c"};
        static const char *style[3] = {" stroke-width=\"3.5\" stroke-opacity=\"0.55\"",
                                       " stroke-width=\"1.5\"",
                                       " stroke-width=\"1.5\" stroke-dasharray=\"5,3\""};
        for (int oi = 0; oi < 3; oi++) {
            int series = order[oi];
            fprintf(f, "<polyline fill=\"none\" stroke=\"%s\"%s points=\"", colors[series],
                    style[series]);
            for (size_t k = 0; k < r->n_ticks; k++) {
                const struct rp_tick *t = &r->ticks[k];
                if (!t->clusters)
                    continue;
                double v = series == 0 ? t->demand[d] : series == 1 ? t->bound[d] : t->covered[d];
                double xd =
                    x0 + (double)k * (double)r->clock.interval_ns / 1e9 * r->clock.speed / 86400;
                double px = L + (xd - x0) / (x1 - x0) * (W - L - R);
                double py = bot - (v / scale[d]) / ymax * PH;
                fprintf(f, "%.1f,%.1f ", px, py);
            }
            fputs("\"/>\n", f);
        }
    }
    double ly = H - 14;
    static const char *leg[3] = {"demand (rollups)", "bound capacity (Configured)",
                                 "demand covered by bound machines"};
    static const char *lc[3] = {"#1f77b4", "#ff7f0e", "#2ca02c"};
    for (int i = 0; i < 3; i++) {
        double lx = L + i * 290;
        fprintf(f,
                "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                "stroke-width=\"3\"%s/>\n",
                lx, lx + 24, ly - 4, ly - 4, lc[i],
                i == 2   ? " stroke-dasharray=\"5,3\""
                : i == 0 ? " stroke-opacity=\"0.55\""
                         : "");
        svg_text(f, lx + 30, ly, "start", 12, "#222", leg[i]);
    }
    svg_text(f, W / 2.0, T + 3 * PH + 2 * GAP + 34, "middle", 12, "#444", "trace time (days)");
    fputs("</svg>\n", f);
}

static void write_latency_svg(FILE *f, const struct rp_run *r, const struct rp_summary *s)
{
    const int W = 900, H = 420, L = 70, R = 60, T = 50, B = 60;
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            W, H, W, H);
    char title[200];
    snprintf(title, sizeof title, "Binding latency (first rollup -> Configured), %zu pods",
             r->n_lat);
    svg_text(f, W / 2.0, 24, "middle", 16, "#222", title);
    double pw = W - L - R, ph = H - T - B;
    fprintf(f,
            "<rect x=\"%d\" y=\"%d\" width=\"%.0f\" height=\"%.0f\" fill=\"#fafafa\" "
            "stroke=\"#999\"/>\n",
            L, T, pw, ph);
    if (r->n_lat == 0) {
        svg_text(f, W / 2.0, H / 2.0, "middle", 14, "#666", "no binding-latency samples");
        fputs("</svg>\n", f);
        return;
    }
    /* log-x from 100 us to max(2 x max, target x 2) */
    double lo = 1e-4,
           hi = fmax((double)s->lat_max / 1e9 * 1.5, (double)s->lat_target_ns / 1e9 * 1.5);
    if (hi <= lo * 10)
        hi = lo * 10;
    double llo = log10(lo), lhi = log10(hi);
    enum { NB = 48 };
    size_t bins[NB] = {0}, maxb = 1;
    for (size_t i = 0; i < r->n_lat; i++) {
        double v = fmax((double)r->lat[i] / 1e9, lo);
        int b = (int)((log10(v) - llo) / (lhi - llo) * NB);
        if (b < 0)
            b = 0;
        if (b >= NB)
            b = NB - 1;
        bins[b]++;
    }
    for (int b = 0; b < NB; b++)
        if (bins[b] > maxb)
            maxb = bins[b];
    for (int b = 0; b < NB; b++) {
        if (!bins[b])
            continue;
        double x = L + pw * b / NB, h = ph * 0.95 * (double)bins[b] / (double)maxb;
        fprintf(f,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#9ecae1\" "
                "stroke=\"#3182bd\" stroke-width=\"0.5\"/>\n",
                x, T + ph - h, pw / NB, h);
    }
    /* CDF */
    fputs("<polyline fill=\"none\" stroke=\"#08519c\" stroke-width=\"2\" points=\"", f);
    for (size_t i = 0; i < r->n_lat; i++) {
        if (i + 1 < r->n_lat && r->lat[i + 1] == r->lat[i])
            continue;
        double v = fmax((double)r->lat[i] / 1e9, lo);
        double x = L + pw * (log10(v) - llo) / (lhi - llo);
        double y = T + ph - ph * (double)(i + 1) / (double)r->n_lat;
        fprintf(f, "%.1f,%.1f ", x, y);
    }
    fputs("\"/>\n", f);
    for (int e = (int)floor(llo); e <= (int)ceil(lhi); e++) {
        double x = L + pw * (e - llo) / (lhi - llo);
        if (x < L - 0.5 || x > L + pw + 0.5)
            continue;
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%.0f\" stroke=\"#ddd\"/>\n", x, x,
                T, T + ph);
        char lab[32];
        double v = pow(10, e);
        if (v < 1e-3)
            snprintf(lab, sizeof lab, "%g us", v * 1e6);
        else if (v < 1)
            snprintf(lab, sizeof lab, "%g ms", v * 1e3);
        else
            snprintf(lab, sizeof lab, "%g s", v);
        svg_text(f, x, T + ph + 16, "middle", 11, "#444", lab);
    }
    for (int q = 0; q <= 4; q++) {
        double y = T + ph - ph * q / 4.0;
        char lab[16];
        snprintf(lab, sizeof lab, "%d%%", q * 25);
        svg_text(f, L + pw + 6, y + 4, "start", 11, "#08519c", lab);
    }
    struct {
        double v;
        const char *name, *color;
    } marks[3] = {{(double)s->lat_p50 / 1e9, "p50", "#31a354"},
                  {(double)s->lat_p99 / 1e9, "p99", "#e6550d"},
                  {(double)s->lat_target_ns / 1e9, "target", "#d62728"}};
    for (int i = 0; i < 3; i++) {
        double v = fmax(marks[i].v, lo);
        double x = L + pw * (log10(v) - llo) / (lhi - llo);
        fprintf(f,
                "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%.0f\" stroke=\"%s\" "
                "stroke-width=\"1.5\" stroke-dasharray=\"4,3\"/>\n",
                x, x, T, T + ph, marks[i].color);
        char d[32], lab[64];
        fmt_dur((int64_t)(marks[i].v * 1e9), d, sizeof d);
        snprintf(lab, sizeof lab, "%s %s", marks[i].name, d);
        bool right = x > L + pw * 0.8;
        svg_text(f, right ? x - 4 : x + 4, T + 16 + 15 * i, right ? "end" : "start", 11,
                 marks[i].color, lab);
    }
    char cnt[64];
    snprintf(cnt, sizeof cnt, "%zu pods in the tallest bar", maxb);
    svg_text(f, L + 6, T + ph - 6, "start", 10, "#3182bd", cnt);
    svg_text(f, L + pw / 2, H - 18, "middle", 12, "#444",
             "latency (log scale); bars: histogram, line: cumulative share (right axis)");
    fputs("</svg>\n", f);
}

static int write_file(const char *dir, const char *name,
                      void (*fn)(FILE *, const struct rp_run *, const struct rp_summary *),
                      const struct rp_run *r, const struct rp_summary *s)
{
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        int e = errno;
        fprintf(stderr, "bigfleet-replay: %s: %s\n", tmp, strerror(e));
        return -e;
    }
    fn(f, r, s);
    if (fflush(f) || ferror(f)) {
        int e = errno ? errno : EIO;
        fclose(f);
        fprintf(stderr, "bigfleet-replay: %s: %s\n", tmp, strerror(e));
        return -e;
    }
    fclose(f);
    if (rename(tmp, path)) {
        int e = errno;
        fprintf(stderr, "bigfleet-replay: %s: %s\n", path, strerror(e));
        return -e;
    }
    return 0;
}

static void json_fn(FILE *f, const struct rp_run *r, const struct rp_summary *s)
{
    write_json(f, r, s);
}
static void demand_fn(FILE *f, const struct rp_run *r, const struct rp_summary *s)
{
    (void)s;
    write_demand_svg(f, r);
}
static void latency_fn(FILE *f, const struct rp_run *r, const struct rp_summary *s)
{
    write_latency_svg(f, r, s);
}
static void cost_fn(FILE *f, const struct rp_run *r, const struct rp_summary *s)
{
    (void)s;
    rp_cost_svg(f, r);
}
static void text_fn(FILE *f, const struct rp_run *r, const struct rp_summary *s)
{
    rp_report_print(r, s, f);
}

int rp_report_write(const struct rp_run *r, const struct rp_summary *s, const char *dir)
{
    char cur[4096];
    size_t l = 0;
    /* mkdir -p */
    for (const char *p = dir;; p++) {
        if (*p == '/' || !*p) {
            if (l && mkdir(cur, 0755) && errno != EEXIST) {
                int e = errno;
                fprintf(stderr, "bigfleet-replay: --report %s: %s\n", dir, strerror(e));
                return -e;
            }
        }
        if (!*p)
            break;
        if (l + 1 >= sizeof cur)
            return -ENAMETOOLONG;
        cur[l++] = *p;
        cur[l] = 0;
    }
    int rc;
    if ((rc = write_file(dir, "report.json", json_fn, r, s)) ||
        (rc = write_file(dir, "report.txt", text_fn, r, s)) ||
        (rc = write_file(dir, "demand.svg", demand_fn, r, s)) ||
        (rc = write_file(dir, "cost.svg", cost_fn, r, s)) ||
        (rc = write_file(dir, "binding-latency.svg", latency_fn, r, s)))
        return rc;
    return 0;
}
