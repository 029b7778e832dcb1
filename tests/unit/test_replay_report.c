/*
 * test_replay_report.c — the report of bigfleet-replay (tools/replay/
 * report.c, scrape.c): peak selection, satisfied shares, latency
 * percentiles, the acceptance verdict, the files written, and reading the
 * shard's /metrics text.
 */
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_replay.h"
#include "check_run.h"

START_TEST(percentile_is_nearest_rank)
{
    int64_t v[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    ck_assert_int_eq(rp_percentile(v, 10, 50), 5);
    ck_assert_int_eq(rp_percentile(v, 10, 99), 10);
    ck_assert_int_eq(rp_percentile(v, 10, 90), 9);
    ck_assert_int_eq(rp_percentile(v, 10, 0), 1);
    ck_assert_int_eq(rp_percentile(v, 1, 99), 1);
    ck_assert_int_eq(rp_percentile(v, 0, 50), 0);
}
END_TEST

START_TEST(prometheus_text_parses_sums_labels_and_histograms)
{
    const char *txt =
        "# HELP bigfleet_shard_actions_total actions\n"
        "# TYPE bigfleet_shard_actions_total counter\n"
        "bigfleet_shard_actions_total{kind=\"Provision\"} 12\n"
        "bigfleet_shard_actions_total{kind=\"Reclaim\"} 3\n"
        "bigfleet_shard_inventory_machines{state=\"Idle\",capacity_type=\"OnDemand\","
        "interruption_penalty_bucket=\"0\"} 4\n"
        "bigfleet_shard_inventory_machines{state=\"Idle\",capacity_type=\"BareMetal\","
        "interruption_penalty_bucket=\"0\"} 2\n"
        "weird{msg=\"a,b=\\\"c}\\\"\"} 1\n"
        "lat_bucket{le=\"0.1\"} 10\n"
        "lat_bucket{le=\"1\"} 90\n"
        "lat_bucket{le=\"+Inf\"} 100\n"
        "lat_count 100\n"
        "up 1 1700000000000\n";
    struct rp_prom p;
    ck_assert_int_eq(rp_prom_parse(txt, strlen(txt), &p), 0);
    ck_assert_double_eq(rp_prom_sum(&p, "bigfleet_shard_actions_total", NULL), 15);
    ck_assert_double_eq(rp_prom_sum(&p, "bigfleet_shard_actions_total", "kind=\"Reclaim\""), 3);
    ck_assert_double_eq(rp_prom_sum(&p, "bigfleet_shard_inventory_machines", "state=\"Idle\""), 6);
    ck_assert_double_eq(rp_prom_sum(&p, "bigfleet_shard_inventory_machines",
                                    "state=\"Idle\",capacity_type=\"BareMetal\""),
                        2);
    ck_assert_double_eq(rp_prom_sum(&p, "up", NULL), 1);
    /* not exported at all: NaN, not 0 */
    ck_assert(isnan(rp_prom_sum(&p, "bigfleet_shard_missing_total", NULL)));
    ck_assert(isnan(rp_prom_sum(&p, "bigfleet_shard_actions_total", "kind=\"Delete\"")));
    char b[64];
    ck_assert(rp_prom_label(p.v[4].labels, "msg", b, sizeof b));
    ck_assert_str_eq(b, "a,b=\"c}\"");
    /* p50 falls in (0.1, 1]: 10 + 80 * f = 50 -> f = 0.5 -> 0.55 */
    ck_assert_double_eq_tol(rp_prom_hist_quantile(&p, "lat", 0.5), 0.55, 1e-9);
    /* p99 beyond the last finite bucket: its bound */
    ck_assert_double_eq_tol(rp_prom_hist_quantile(&p, "lat", 0.99), 1.0, 1e-9);
    ck_assert(isnan(rp_prom_hist_quantile(&p, "none", 0.5)));
    rp_prom_free(&p);
    ck_assert_int_eq(rp_prom_parse("x{a=\"1\" 2\n", 11, &p), -EINVAL);
    ck_assert_int_eq(rp_prom_parse("x notanumber\n", 13, &p), -EINVAL);
}
END_TEST

/* A finished run with a hand-made timeline. */
struct frun {
    struct rp_config cfg;
    struct rp_trace t;
    struct rp_model m;
    struct rp_run r;
    struct rp_cluster cl[1];
    struct rp_tick ticks[3];
};

static void frun_init(struct frun *f)
{
    memset(f, 0, sizeof *f);
    f->cfg.shard_addr = "127.0.0.1:1";
    f->cfg.cycle_hint_ns = BF_NS_PER_SEC;
    f->cfg.reclaim_window_ns = 2 * BF_NS_PER_SEC;
    load_trace(&f->t, POD_HEADER "a,1000,1024,0,0,,LS,Running,0,100,0\n");
    ck_assert_int_eq(rp_model_build(&f->m, &f->t, NULL, 0, true), 0);
    struct rp_run *r = &f->r;
    r->cfg = &f->cfg;
    r->trace = &f->t;
    r->model = &f->m;
    r->clock = (struct rp_clock){.from = 0,
                                 .until = 100,
                                 .speed = 50,
                                 .interval_ns = BF_NS_PER_SEC,
                                 .offset = 0,
                                 .clusters = 1};
    r->cl = f->cl;
    r->n_cl = 1;
    f->cl[0].k_last = 2;
    r->ticks = f->ticks;
    r->n_ticks = 3;
    /* k0: small, fully covered; k1: the peak, gpu 90% covered; k2: 50% cpu */
    f->ticks[0] = (struct rp_tick){.demand = {1000, 1024, 0},
                                   .covered = {1000, 1024, 0},
                                   .bound = {2000, 2048, 0},
                                   .weight = 1,
                                   .clusters = 1,
                                   .cost = 1.5};
    f->ticks[1] = (struct rp_tick){.demand = {8000, 8192, 4000},
                                   .covered = {8000, 8192, 3600},
                                   .bound = {8000, 8192, 4000},
                                   .weight = 9,
                                   .clusters = 1,
                                   .cost = 20,
                                   .pods = 7,
                                   .needs = 2};
    f->ticks[2] = (struct rp_tick){.demand = {2000, 1024, 0},
                                   .covered = {1000, 1024, 0},
                                   .bound = {1000, 1024, 0},
                                   .weight = 2,
                                   .clusters = 1};
    static int64_t lat[5] = {5 * BF_NS_PER_MS, 1 * BF_NS_PER_MS, 3 * BF_NS_PER_MS, 4 * BF_NS_PER_MS,
                             2 * BF_NS_PER_MS};
    r->lat = malloc(sizeof lat);
    memcpy(r->lat, lat, sizeof lat);
    r->n_lat = 5;
}

static void frun_free(struct frun *f)
{
    free(f->r.lat);
    rp_model_free(&f->m);
    rp_trace_free(&f->t);
}

START_TEST(summary_picks_the_price_weighted_peak_and_its_shares)
{
    struct frun f;
    frun_init(&f);
    struct rp_summary s;
    rp_report_summarize(&f.r, &s);
    ck_assert(s.have_peak);
    ck_assert_uint_eq(s.peak_k, 1);
    ck_assert_double_eq_tol(s.peak_trace_s, 50, 1e-9); /* 1 s wall x 50 */
    ck_assert_double_eq_tol(s.sat_peak[RP_CPU], 1.0, 1e-12);
    ck_assert_double_eq_tol(s.sat_peak[RP_GPU], 0.9, 1e-12);
    ck_assert_double_eq_tol(s.sat_peak_min, 0.9, 1e-12);
    ck_assert_double_eq_tol(s.sat_min, 0.5, 1e-12);
    ck_assert_double_eq_tol(s.sat_mean, (1.0 + 0.9 + 0.5) / 3, 1e-12);
    ck_assert_double_eq_tol(s.cost_peak, 20, 1e-12);
    /* latency: sorted, nearest rank */
    ck_assert_int_eq(s.lat_p50, 3 * BF_NS_PER_MS);
    ck_assert_int_eq(s.lat_p99, 5 * BF_NS_PER_MS);
    ck_assert_int_eq(s.lat_max, 5 * BF_NS_PER_MS);
    /* target: one rollup interval + two cycles */
    ck_assert_int_eq(s.lat_target_ns, 3 * BF_NS_PER_SEC);
    ck_assert(s.pass_latency);
    ck_assert(s.pass_reclaims);
    ck_assert(!s.pass_satisfied); /* 90% < 99% */
    ck_assert(!s.pass);
    frun_free(&f);
}
END_TEST

START_TEST(acceptance_fails_on_a_reclaim_of_a_still_demanded_machine_or_slow_binding)
{
    struct frun f;
    frun_init(&f);
    f.ticks[1].covered[RP_GPU] = 4000;
    struct rp_summary s;
    rp_report_summarize(&f.r, &s);
    ck_assert(s.pass);
    f.r.reclaim_still_demanded = 1;
    rp_report_summarize(&f.r, &s);
    ck_assert(!s.pass_reclaims);
    ck_assert(!s.pass);
    f.r.reclaim_still_demanded = 0;
    f.r.lat[0] = 4 * BF_NS_PER_SEC; /* p99 of 5 samples is the max */
    rp_report_summarize(&f.r, &s);
    ck_assert(!s.pass_latency);
    ck_assert(!s.pass);
    frun_free(&f);
}
END_TEST

START_TEST(contended_acceptance_wants_preemptions_none_of_higher_demand_and_qos_order)
{
    struct frun f;
    frun_init(&f);
    f.cfg.contended = true;
    /* per qos over the run: LS 3/4 of its GPUs, Burstable 1/2, BE 1/4 */
    for (int k = 0; k < 3; k++) {
        f.ticks[k].demand_q[RP_QOS_LS][RP_GPU] = 4000;
        f.ticks[k].covered_q[RP_QOS_LS][RP_GPU] = 3000;
        f.ticks[k].demand_q[RP_QOS_BURSTABLE][RP_GPU] = 2000;
        f.ticks[k].covered_q[RP_QOS_BURSTABLE][RP_GPU] = 1000;
        f.ticks[k].demand_q[RP_QOS_BE][RP_GPU] = 4000;
        f.ticks[k].covered_q[RP_QOS_BE][RP_GPU] = 1000;
    }
    struct rp_summary s;
    rp_report_summarize(&f.r, &s);
    ck_assert_double_eq_tol(s.sat_q[RP_QOS_LS], 0.75, 1e-12);
    ck_assert_double_eq_tol(s.sat_q[RP_QOS_BURSTABLE], 0.5, 1e-12);
    ck_assert_double_eq_tol(s.sat_q[RP_QOS_BE], 0.25, 1e-12);
    ck_assert(isnan(s.sat_q[RP_QOS_GUARANTEED])); /* no demand: not a class of the run */
    ck_assert(s.pass_qos_order);
    /* no preemption at all: a contended run that never contended fails */
    ck_assert(!s.pass_preempted);
    ck_assert(!s.pass);
    /* the satisfied share at peak (90%) and the latency are not criteria here */
    f.r.preempt_by[RP_QOS_LS][RP_QOS_BE] = 3;
    f.r.lat[0] = 60 * BF_NS_PER_SEC;
    rp_report_summarize(&f.r, &s);
    ck_assert_uint_eq(s.preemptions, 3);
    ck_assert(s.pass);
    /* one preemption of higher-priority demand fails it */
    f.r.preempt_by[RP_QOS_BURSTABLE][RP_QOS_LS] = 1;
    f.r.preempt_of_higher = 1;
    rp_report_summarize(&f.r, &s);
    ck_assert(!s.pass_no_higher);
    ck_assert(!s.pass);
    f.r.preempt_of_higher = 0;
    /* BE better served than Burstable: out of order */
    for (int k = 0; k < 3; k++)
        f.ticks[k].covered_q[RP_QOS_BE][RP_GPU] = 3000;
    rp_report_summarize(&f.r, &s);
    ck_assert(!s.pass_qos_order);
    ck_assert(!s.pass);
    frun_free(&f);
}
END_TEST

static char *slurp(const char *path)
{
    FILE *fp = fopen(path, "r");
    if (!fp)
        return NULL;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, fp);
    buf[n] = 0;
    fclose(fp);
    return buf;
}

START_TEST(report_files_are_written_with_the_figures)
{
    struct frun f;
    frun_init(&f);
    struct rp_summary s;
    rp_report_summarize(&f.r, &s);
    char dir[] = "/tmp/rp-report-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char sub[128];
    snprintf(sub, sizeof sub, "%s/a/b", dir); /* created like mkdir -p */
    ck_assert_int_eq(rp_report_write(&f.r, &s, sub), 0);
    char p[256];
    snprintf(p, sizeof p, "%s/report.json", sub);
    const char *j = slurp(p);
    ck_assert_ptr_nonnull(j);
    ck_assert_ptr_nonnull(
        strstr(j, "\"satisfied\": {\"at_peak\": {\"rollup\": 1, \"trace_s\": 50, \"min\": 0.9"));
    ck_assert_ptr_nonnull(strstr(j, "\"p99\": 0.005000"));
    ck_assert_ptr_nonnull(strstr(j, "\"acceptance\": {\"pass\": false"));
    ck_assert_ptr_nonnull(strstr(j, "[1, 50, 1, 7, 2, 8.000, 8.000, 4.000, 8.000, 8.000, 3.600"));
    /* balanced braces and brackets: a cheap well-formedness check */
    int depth = 0;
    bool inq = false;
    for (const char *c = j; *c; c++) {
        if (*c == '"' && c[-1] != '\\')
            inq = !inq;
        if (!inq)
            depth += (*c == '{' || *c == '[') - (*c == '}' || *c == ']');
        ck_assert_int_ge(depth, 0);
    }
    ck_assert_int_eq(depth, 0);
    snprintf(p, sizeof p, "%s/demand.svg", sub);
    const char *svg = slurp(p);
    ck_assert_ptr_nonnull(svg);
    ck_assert_ptr_nonnull(strstr(svg, "<svg xmlns"));
    ck_assert_ptr_nonnull(strstr(svg, "</svg>"));
    snprintf(p, sizeof p, "%s/binding-latency.svg", sub);
    ck_assert_ptr_nonnull(slurp(p));
    snprintf(p, sizeof p, "%s/cost.svg", sub); /* no catalog: says so */
    svg = slurp(p);
    ck_assert_ptr_nonnull(svg);
    ck_assert_ptr_nonnull(strstr(svg, "no catalog"));
    snprintf(p, sizeof p, "%s/report.txt", sub);
    const char *txt = slurp(p);
    ck_assert_ptr_nonnull(strstr(txt, "acceptance   FAIL"));
    /* the first lines map wall time to trace time */
    ck_assert_ptr_nonnull(strstr(txt,
                                 "\nbigfleet-replay report\n  time         trace day 0 00:00 .. "
                                 "day 0 00:01 (100 s, all of t.csv) replayed in 2 s of wall time\n"
                                 "               1 s of wall time = 50 s of trace (speed 50x)"));
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
    /* an unwritable place is an error naming it */
    ck_assert_int_lt(rp_report_write(&f.r, &s, "/proc/self/nope"), 0);
    frun_free(&f);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("replay_report");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, percentile_is_nearest_rank);
    tcase_add_test(tc, prometheus_text_parses_sums_labels_and_histograms);
    tcase_add_test(tc, summary_picks_the_price_weighted_peak_and_its_shares);
    tcase_add_test(tc, acceptance_fails_on_a_reclaim_of_a_still_demanded_machine_or_slow_binding);
    tcase_add_test(tc, contended_acceptance_wants_preemptions_none_of_higher_demand_and_qos_order);
    tcase_add_test(tc, report_files_are_written_with_the_figures);
    suite_add_tcase(s, tc);
    return check_run(s);
}
