/*
 * test_metrics.c — the /metrics renderer (bigfleet/metrics.h) on a real
 * segment set: exposition structure (HELP/TYPE once per family before its
 * samples, counters end in _total, no duplicate series), histograms
 * (cumulative, Go's le spelling, +Inf == _count, _sum in seconds), label
 * escaping, the series computed from the published cycle result (inventory
 * with merged "0" buckets and combinations that disappear rendered as 0,
 * demand, shortfalls by age and priority class), execute outcomes, the
 * actions queue depth, processes, rings.
 */
#include <check.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bigfleet/metrics.h"
#include "bigfleet/process.h"
#include "bigfleet/util.h"

#include "shm_fixture.h"
#include "check_run.h"

static void setup(void)
{
    shm_fixture_create("metrics", NULL, 3);
    bf_metrics_forget();
}

static void teardown(void)
{
    shm_fixture_remove();
}

static char *render(void)
{
    struct bf_strbuf b = {0};
    ck_assert_int_eq(bf_metrics_render(&g_s, &b), 0);
    ck_assert(!b.failed);
    ck_assert_uint_gt(b.len, 0);
    ck_assert_int_eq(b.p[b.len - 1], '\n');
    return b.p; /* caller frees */
}

/* The value of the sample line that starts with `series ` (exact name and
 * labels), or -1 when absent. */
static double value_of(const char *text, const char *series)
{
    size_t l = strlen(series);
    for (const char *p = text; p && *p;) {
        const char *nl = strchr(p, '\n');
        if (strncmp(p, series, l) == 0 && p[l] == ' ')
            return strtod(p + l + 1, NULL);
        p = nl ? nl + 1 : NULL;
    }
    return -1;
}

/* ------------------------------------------------------------ structure */

struct fam {
    char name[160];
    char type[16];
    bool help;
};

static const char *family_of(const char *metric, struct fam *f, int nf)
{
    for (int i = 0; i < nf; i++)
        if (strcmp(f[i].name, metric) == 0)
            return f[i].type;
    return NULL;
}

START_TEST(every_family_is_declared_once_before_its_samples_and_no_series_repeats)
{
    /* some data everywhere: a published result, an executor outcome */
    atomic_store(&g_s.st->executor.outcomes[BF_ACT_RECLAIM][BF_OUT_FENCED], 1);
    char *t = render();
    static struct fam fams[1024];
    int nf = 0;
    static char seen[8192][200];
    int ns = 0;
    char *save = NULL;
    char *copy = strdup(t);
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "# HELP ", 7) == 0) {
            char name[160];
            ck_assert_int_eq(sscanf(line + 7, "%159s", name), 1);
            ck_assert_msg(!family_of(name, fams, nf), "HELP after TYPE or twice: %s", name);
            ck_assert_int_lt(nf, 1024);
            snprintf(fams[nf].name, sizeof fams[nf].name, "%s", name);
            fams[nf].help = true;
            fams[nf].type[0] = 0;
            nf++;
            continue;
        }
        if (strncmp(line, "# TYPE ", 7) == 0) {
            char name[160], type[16];
            ck_assert_int_eq(sscanf(line + 7, "%159s %15s", name, type), 2);
            ck_assert_int_gt(nf, 0);
            ck_assert_str_eq(fams[nf - 1].name, name);
            ck_assert_str_eq(fams[nf - 1].type, "");
            snprintf(fams[nf - 1].type, sizeof fams[nf - 1].type, "%s", type);
            if (strcmp(type, "counter") == 0) {
                size_t l = strlen(name);
                ck_assert_msg(l > 6 && strcmp(name + l - 6, "_total") == 0,
                              "counter without _total: %s", name);
            }
            ck_assert_msg(strncmp(name, "bigfleet_shard_", 15) == 0 ||
                              strncmp(name, "bigfleet_appliance_", 19) == 0,
                          "unprefixed family %s", name);
            continue;
        }
        ck_assert_msg(line[0] != '#', "stray comment %s", line);
        /* a sample: name[{labels}] value */
        char metric[200];
        size_t k = 0;
        while (line[k] && line[k] != '{' && line[k] != ' ' && k < sizeof metric - 1) {
            metric[k] = line[k];
            k++;
        }
        metric[k] = 0;
        ck_assert_msg(isalpha((unsigned char)metric[0]) || metric[0] == '_', "bad name %s", line);
        const char *type = family_of(metric, fams, nf);
        if (!type) { /* histogram parts */
            char base[200];
            snprintf(base, sizeof base, "%s", metric);
            char *suf = NULL;
            if ((suf = strstr(base, "_bucket")) && suf[7] == 0)
                *suf = 0;
            else if ((suf = strstr(base, "_sum")) && suf[4] == 0)
                *suf = 0;
            else if ((suf = strstr(base, "_count")) && suf[6] == 0)
                *suf = 0;
            type = family_of(base, fams, nf);
            ck_assert_msg(type && strcmp(type, "histogram") == 0, "sample of undeclared %s",
                          metric);
            ck_assert_str_eq(fams[nf - 1].name, base); /* samples follow their header */
        } else {
            ck_assert_str_eq(fams[nf - 1].name, metric);
        }
        /* the series (everything before the value) is unique */
        const char *sp = strrchr(line, ' ');
        ck_assert_ptr_nonnull(sp);
        char *end = NULL;
        strtod(sp + 1, &end);
        ck_assert_msg(end && *end == 0, "bad value in %s", line);
        ck_assert_int_lt(ns, 8192);
        snprintf(seen[ns], sizeof seen[ns], "%.*s", (int)(sp - line), line);
        for (int i = 0; i < ns; i++)
            ck_assert_msg(strcmp(seen[i], seen[ns]) != 0, "duplicate series %s", seen[ns]);
        ns++;
    }
    ck_assert_int_gt(nf, 100);
    /* the reference/shard.md §7 families the appliance has data for */
    static const char *const want[][2] = {
        {"bigfleet_shard_cycle_duration_seconds", "histogram"},
        {"bigfleet_shard_cycle_phase_duration_seconds", "histogram"},
        {"bigfleet_shard_provisioning_latency_seconds", "histogram"},
        {"bigfleet_shard_configure_phase_seconds", "histogram"},
        {"bigfleet_shard_request_bootstrap_seconds", "histogram"},
        {"bigfleet_shard_drain_phase_seconds", "histogram"},
        {"bigfleet_shard_actions_total", "counter"},
        {"bigfleet_shard_action_execute_outcomes_total", "counter"},
        {"bigfleet_shard_actions_deferred_total", "counter"},
        {"bigfleet_shard_actions_dropped_total", "counter"},
        {"bigfleet_shard_actions_deduped_total", "counter"},
        {"bigfleet_shard_verdicts_dropped_total", "counter"},
        {"bigfleet_shard_action_queue_depth", "gauge"},
        {"bigfleet_shard_execute_inflight", "gauge"},
        {"bigfleet_shard_inventory_machines", "gauge"},
        {"bigfleet_shard_demand_machines", "gauge"},
        {"bigfleet_shard_shortfalls", "gauge"},
        {"bigfleet_shard_shortfalls_aged", "gauge"},
        {"bigfleet_shard_shortfalls_by_priority", "gauge"},
        {"bigfleet_shard_session_lifecycle_total", "counter"},
        {"bigfleet_shard_active_sessions", "gauge"},
        {"bigfleet_shard_session_identity_rejected_total", "counter"},
        {"bigfleet_shard_reclaims_capped_total", "counter"},
        {"bigfleet_shard_idle_releases_total", "counter"},
        {"bigfleet_shard_rollup_quarantined", "gauge"},
        {"bigfleet_shard_actions_suppressed_total", "counter"},
        {"bigfleet_shard_actuation_paused", "gauge"},
        {"bigfleet_shard_actions_dryrun_total", "counter"},
        {"bigfleet_shard_machines_rejected_total", "counter"},
        {"bigfleet_shard_rollups_rejected_total", "counter"},
        {"bigfleet_appliance_process_restarts_total", "counter"},
        {"bigfleet_appliance_ring_depth", "gauge"},
        {"bigfleet_appliance_ring_drops_total", "counter"},
        {"bigfleet_appliance_seqlock_retries_total", "counter"},
        {"bigfleet_appliance_changelog_overflows_total", "counter"},
        {"bigfleet_appliance_mirror_rescans_total", "counter"},
        {"bigfleet_appliance_strings_bytes_used", "gauge"},
        {"bigfleet_appliance_strings_intern_failures_total", "counter"},
        {"bigfleet_appliance_full_reinits_total", "counter"},
        {"bigfleet_appliance_records_repaired_total", "counter"},
        {"bigfleet_appliance_reconcile_passes_total", "counter"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const char *ty = family_of(want[i][0], fams, nf);
        ck_assert_msg(ty, "missing family %s", want[i][0]);
        ck_assert_msg(strcmp(ty, want[i][1]) == 0, "%s is %s", want[i][0], ty);
    }
    free(copy);
    free(t);
}
END_TEST

/* ------------------------------------------------------------ histograms */

START_TEST(histograms_are_cumulative_with_go_bounds_inf_sum_and_count)
{
    struct bf_hist *h = &g_s.st->cycle.cycle_duration;
    int64_t vals[] = {500000, 1000000, 1500000, 3000000, 9000000000LL, 20000000000LL};
    double sum = 0;
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        bf_hist_observe(h, 0.001, 2, 14, vals[i]);
        sum += (double)vals[i] / 1e9;
    }
    bf_hist_observe(&g_s.st->cycle.phase_duration[BF_PHASE_PHASE2], 0.001, 2, 14, 2500000);
    char *t = render();
    const char *n = "bigfleet_shard_cycle_duration_seconds";
    static const char *const le[14] = {"0.001", "0.002", "0.004", "0.008", "0.016",
                                       "0.032", "0.064", "0.128", "0.256", "0.512",
                                       "1.024", "2.048", "4.096", "8.192"};
    double prev = 0;
    char s[160];
    for (int i = 0; i < 14; i++) {
        snprintf(s, sizeof s, "%s_bucket{le=\"%s\"}", n, le[i]);
        double v = value_of(t, s);
        ck_assert_msg(v >= prev, "%s = %g", s, v);
        prev = v;
    }
    snprintf(s, sizeof s, "%s_bucket{le=\"0.001\"}", n);
    ck_assert_int_eq((int)value_of(t, s), 2); /* 0.5 ms and exactly 1 ms */
    snprintf(s, sizeof s, "%s_bucket{le=\"0.002\"}", n);
    ck_assert_int_eq((int)value_of(t, s), 3);
    snprintf(s, sizeof s, "%s_bucket{le=\"8.192\"}", n);
    ck_assert_int_eq((int)value_of(t, s), 4);
    snprintf(s, sizeof s, "%s_bucket{le=\"+Inf\"}", n);
    ck_assert_int_eq((int)value_of(t, s), 6);
    snprintf(s, sizeof s, "%s_count", n);
    ck_assert_int_eq((int)value_of(t, s), 6);
    snprintf(s, sizeof s, "%s_sum", n);
    ck_assert_double_eq_tol(value_of(t, s), sum, 1e-9);
    ck_assert(value_of(t, "bigfleet_shard_cycle_phase_duration_seconds_bucket{phase=\"phase2\","
                          "le=\"0.002\"}") == 0);
    ck_assert(value_of(t, "bigfleet_shard_cycle_phase_duration_seconds_bucket{phase=\"phase2\","
                          "le=\"0.004\"}") == 1);
    ck_assert(value_of(t, "bigfleet_shard_cycle_phase_duration_seconds_count{phase=\"emit\"}") ==
              0);
    /* exp(0.01, 2, 20): the last finite bound is 0.01 * 2^19 */
    ck_assert(value_of(t, "bigfleet_shard_provisioning_latency_seconds_bucket{le=\"5242.88\"}") ==
              0);
    ck_assert(value_of(t, "bigfleet_shard_provisioning_latency_seconds_bucket{le=\"10485.76\"}") <
              0);
    ck_assert(value_of(t, "bigfleet_shard_configure_phase_seconds_bucket{le=\"327.68\"}") == 0);
    free(t);
}
END_TEST

/* ------------------------------------------------------------ labels */

START_TEST(label_values_are_escaped)
{
    static const char name[] = "we\"ird\\clu\nster";
    uint32_t ref;
    ck_assert_int_eq(bf_str_intern(&g_s, name, sizeof name - 1, &ref), 0);
    struct bf_cluster_rec r;
    memset(&r, 0, sizeof r);
    r.name_ref = ref;
    r.in_use = 1;
    r.quarantine_held = 2;
    r.rollups_rejected = 5;
    bf_cluster_write(&g_s, 0, &r);
    atomic_store(&g_s.needs->n_clusters, 1);
    char *t = render();
    ck_assert(
        value_of(t, "bigfleet_shard_rollup_quarantined{cluster=\"we\\\"ird\\\\clu\\nster\"}") == 2);
    ck_assert(
        value_of(t, "bigfleet_shard_rollups_rejected_total{cluster=\"we\\\"ird\\\\clu\\nster\"}") ==
        5);
    free(t);
    /* the primitive itself */
    struct bf_strbuf b = {0};
    bf_metrics_label_value(&b, "a\\b\"c\nd", 7);
    ck_assert_str_eq(b.p, "a\\\\b\\\"c\\nd");
    bf_sb_free(&b);
}
END_TEST

/* ------------------------------------------------------------ published result */

static void publish_counts(uint64_t cycle, const struct bf_inv_counts *k,
                           const struct bf_shortfall_row *sf, uint32_t nsf, uint32_t sf_total)
{
    struct bf_state_main *st = g_s.st;
    uint64_t seq = atomic_load(&st->publish_seq);
    atomic_store(&st->publish_seq, seq + 1);
    uint32_t b = atomic_load(&st->published) ^ 1u;
    struct bf_cycle_result *r = &st->result[b];
    memset(r, 0, sizeof *r);
    r->cycle = cycle;
    r->computed_at_ns = bf_now_ns();
    r->counts = *k;
    memcpy(r->shortfalls, sf, nsf * sizeof *sf);
    r->n_shortfalls = nsf;
    r->shortfalls_total = sf_total;
    atomic_store(&st->published, b);
    atomic_store(&st->publish_seq, seq + 2);
}

START_TEST(result_gauges_merge_zero_buckets_and_keep_vanished_combinations_at_zero)
{
    char *t = render();
    /* before the first cycle: no inventory series, demand and shortfalls at 0 */
    ck_assert(strstr(t, "bigfleet_shard_inventory_machines{") == NULL);
    ck_assert(value_of(t, "bigfleet_shard_demand_machines{interruption_penalty_bucket=\"0\"}") ==
              0);
    ck_assert(value_of(t, "bigfleet_shard_shortfalls") == 0);
    ck_assert(value_of(t, "bigfleet_appliance_result_cycle") == 0);
    free(t);
    static struct bf_inv_counts k;
    memset(&k, 0, sizeof k);
    k.by_state_ct_bucket[BF_STATE_IDLE][BF_CT_SPOT][0] = 2;             /* unspecified ... */
    k.by_state_ct_bucket[BF_STATE_IDLE][BF_CT_SPOT][1] = 3;             /* ... and ZERO share "0" */
    k.by_state_ct_bucket[BF_STATE_CONFIGURED][BF_CT_ON_DEMAND][16] = 4; /* $8192 */
    k.by_state_ct_bucket[BF_STATE_CONFIGURED][BF_CT_BARE_METAL][27] = 1; /* pinned */
    k.demand_rows_by_bucket[0] = 1;
    k.demand_rows_by_bucket[1] = 1;
    k.demand_rows_by_bucket[2] = 6;
    k.demand_rows_by_bucket[26] = 2;
    int t1 = bf_type_intern(&g_s, "m6i.large"), z1 = bf_zone_intern(&g_s, "zone-\"a\"");
    ck_assert_int_gt(t1, 0);
    ck_assert_int_gt(z1, 0);
    k.by_state_type_zone[BF_STATE_IDLE][t1][z1] = 5;
    k.total_machines = 10;
    k.total_needs = 10;
    struct bf_shortfall_row sf[5];
    memset(sf, 0, sizeof sf);
    int32_t ages[5] = {1, 9, 10, 299, 300};
    int32_t prios[5] = {99, 100, 999, 1000, 1000000};
    for (int i = 0; i < 5; i++) {
        sf[i].age_cycles = ages[i];
        sf[i].priority = prios[i];
    }
    publish_counts(12, &k, sf, 5, 140);
    t = render();
    const char *inv = "bigfleet_shard_inventory_machines";
    char s[256];
    snprintf(s, sizeof s,
             "%s{state=\"Idle\",capacity_type=\"Spot\",interruption_penalty_bucket=\"0\"}", inv);
    ck_assert(value_of(t, s) == 5);
    snprintf(s, sizeof s,
             "%s{state=\"Configured\",capacity_type=\"OnDemand\",interruption_penalty_bucket="
             "\"8192\"}",
             inv);
    ck_assert(value_of(t, s) == 4);
    snprintf(s, sizeof s,
             "%s{state=\"Configured\",capacity_type=\"BareMetal\",interruption_penalty_bucket="
             "\"pinned\"}",
             inv);
    ck_assert(value_of(t, s) == 1);
    snprintf(s, sizeof s,
             "%s{state=\"Idle\",capacity_type=\"OnDemand\",interruption_penalty_bucket=\"0\"}",
             inv);
    ck_assert(value_of(t, s) < 0); /* never present: not rendered */
    ck_assert(value_of(t, "bigfleet_shard_demand_machines{interruption_penalty_bucket=\"0\"}") ==
              2);
    ck_assert(value_of(t, "bigfleet_shard_demand_machines{interruption_penalty_bucket=\"0.5\"}") ==
              6);
    ck_assert(
        value_of(t, "bigfleet_shard_demand_machines{interruption_penalty_bucket=\"8388608\"}") ==
        2);
    ck_assert(
        value_of(t, "bigfleet_shard_demand_machines{interruption_penalty_bucket=\"pinned\"}") == 0);
    ck_assert(value_of(t, "bigfleet_shard_shortfalls") == 140);
    ck_assert(value_of(t, "bigfleet_shard_shortfalls_aged{bucket=\"1-9\"}") == 2);
    ck_assert(value_of(t, "bigfleet_shard_shortfalls_aged{bucket=\"10-59\"}") == 1);
    ck_assert(value_of(t, "bigfleet_shard_shortfalls_aged{bucket=\"60-299\"}") == 1);
    ck_assert(value_of(t, "bigfleet_shard_shortfalls_aged{bucket=\"300+\"}") == 1);
    ck_assert(value_of(t, "bigfleet_shard_shortfalls_by_priority{priority_class=\"other\"}") == 1);
    ck_assert(value_of(t, "bigfleet_shard_shortfalls_by_priority{priority_class=\"batch\"}") == 2);
    ck_assert(value_of(t, "bigfleet_shard_shortfalls_by_priority{priority_class=\"service\"}") ==
              1);
    ck_assert(value_of(t, "bigfleet_shard_shortfalls_by_priority{priority_class=\"critical\"}") ==
              1);
    ck_assert(value_of(t, "bigfleet_appliance_inventory_machines_by_type{state=\"Idle\","
                          "instance_type=\"m6i.large\",zone=\"zone-\\\"a\\\"\"}") == 5);
    ck_assert(value_of(t, "bigfleet_appliance_result_cycle") == 12);
    free(t);
    /* the spot machines go away: the combination stays, at 0 */
    k.by_state_ct_bucket[BF_STATE_IDLE][BF_CT_SPOT][0] = 0;
    k.by_state_ct_bucket[BF_STATE_IDLE][BF_CT_SPOT][1] = 0;
    k.by_state_type_zone[BF_STATE_IDLE][t1][z1] = 0;
    publish_counts(13, &k, sf, 0, 0);
    t = render();
    snprintf(s, sizeof s,
             "%s{state=\"Idle\",capacity_type=\"Spot\",interruption_penalty_bucket=\"0\"}", inv);
    ck_assert(value_of(t, s) == 0);
    ck_assert(value_of(t, "bigfleet_appliance_inventory_machines_by_type{state=\"Idle\","
                          "instance_type=\"m6i.large\",zone=\"zone-\\\"a\\\"\"}") == 0);
    ck_assert(value_of(t, "bigfleet_shard_shortfalls_aged{bucket=\"1-9\"}") == 0);
    ck_assert(value_of(t, "bigfleet_shard_shortfalls") == 0);
    free(t);
    /* a fresh process does not know the vanished combination */
    bf_metrics_forget();
    t = render();
    ck_assert(value_of(t, s) < 0);
    free(t);
}
END_TEST

/* ------------------------------------------------------------ actions */

START_TEST(outcomes_queue_depth_inflight_and_kinds)
{
    struct bf_state_main *st = g_s.st;
    atomic_store(&st->executor.outcomes[BF_ACT_BOOTSTRAP][BF_OUT_SUCCESS], 7);
    atomic_store(&st->executor.outcomes[BF_ACT_PREEMPT][BF_OUT_RACED_TO_IDLE], 2);
    atomic_store(&st->cycle.actions_total[BF_ACT_DELETE], 9);
    atomic_store(&st->cycle.actions_suppressed[BF_ACT_RECLAIM], 4);
    atomic_store(&st->cycle.actions_dryrun[BF_ACT_PROVISION], 3);
    atomic_store(&st->reconciler.machines_rejected[BF_REJECT_PRICE], 11);
    atomic_store(&st->actuation_paused, 1);
    struct bf_action_msg a;
    memset(&a, 0, sizeof a);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(bf_ring_push(&g_s, BF_RING_ACTIONS, &a), 0);
    atomic_store(&st->executor.inflight, 2);
    char *t = render();
    ck_assert(value_of(t, "bigfleet_shard_action_execute_outcomes_total{kind=\"Bootstrap\","
                          "outcome=\"success\"}") == 7);
    ck_assert(value_of(t, "bigfleet_shard_action_execute_outcomes_total{kind=\"Preempt\","
                          "outcome=\"transition_raced_to_idle\"}") == 2);
    ck_assert(value_of(t, "bigfleet_shard_action_execute_outcomes_total{kind=\"Delete\","
                          "outcome=\"missing_profile\"}") == 0);
    ck_assert(strstr(t, "kind=\"unspecified\"") == NULL);
    ck_assert(value_of(t, "bigfleet_shard_actions_total{kind=\"Delete\"}") == 9);
    ck_assert(value_of(t, "bigfleet_shard_actions_suppressed_total{kind=\"Reclaim\"}") == 4);
    ck_assert(value_of(t, "bigfleet_shard_actions_dryrun_total{kind=\"Provision\"}") == 3);
    ck_assert(value_of(t, "bigfleet_shard_machines_rejected_total{reason=\"price\"}") == 11);
    ck_assert(value_of(t, "bigfleet_shard_machines_rejected_total{reason=\"structural\"}") == 0);
    ck_assert(
        value_of(
            t, "bigfleet_shard_machines_rejected_total{reason=\"interruption_probability\"}") == 0);
    ck_assert(value_of(t, "bigfleet_shard_actuation_paused") == 1);
    ck_assert(value_of(t, "bigfleet_shard_action_queue_depth") == 3);
    ck_assert(value_of(t, "bigfleet_shard_execute_inflight") == 2);
    ck_assert(value_of(t, "bigfleet_appliance_ring_depth{ring=\"actions\"}") == 5);
    ck_assert(value_of(t, "bigfleet_appliance_ring_pushes_total{ring=\"actions\"}") == 5);
    ck_assert(value_of(t, "bigfleet_appliance_ring_bytes{ring=\"boot_resp\"}") == 0);
    ck_assert(value_of(t, "bigfleet_appliance_ring_depth{ring=\"boot_resp\"}") < 0);
    free(t);
    /* a malformed action (kind 0) shows up once there is one */
    atomic_store(&st->executor.outcomes[0][BF_OUT_OTHER], 1);
    t = render();
    ck_assert(value_of(t, "bigfleet_shard_action_execute_outcomes_total{kind=\"unspecified\","
                          "outcome=\"other\"}") == 1);
    free(t);
}
END_TEST

START_TEST(processes_report_restarts_liveness_and_heartbeat_age)
{
    struct bf_state_main *st = g_s.st;
    int64_t now = bf_now_ns();
    atomic_store(&st->proc[BF_ROLE_CYCLE].pid, 4242);
    atomic_store(&st->proc[BF_ROLE_CYCLE].child_state, BF_CHILD_ACTIVE);
    atomic_store(&st->proc[BF_ROLE_CYCLE].heartbeat_ns, now - 3 * BF_NS_PER_SEC);
    atomic_store(&st->proc[BF_ROLE_CYCLE].started_ns, now - 10 * BF_NS_PER_SEC);
    atomic_store(&st->proc[BF_ROLE_CYCLE].restarts, 2);
    atomic_store(&g_s.inv->seqlock_retries[BF_ROLE_SESSION], 17);
    atomic_store(&g_s.changelog[BF_CL_EXECUTOR].overflows, 1);
    char *t = render();
    ck_assert(value_of(t, "bigfleet_appliance_process_up{role=\"cycle\"}") == 1);
    ck_assert(value_of(t, "bigfleet_appliance_process_up{role=\"executor\"}") == 0);
    ck_assert(value_of(t, "bigfleet_appliance_process_restarts_total{role=\"cycle\"}") == 2);
    double age = value_of(t, "bigfleet_appliance_process_heartbeat_age_seconds{role=\"cycle\"}");
    ck_assert_msg(age >= 3 && age < 60, "age %g", age);
    ck_assert(value_of(t, "bigfleet_appliance_process_heartbeat_age_seconds{role=\"executor\"}") <
              0);
    /* the embedded provider only when it was ever started */
    ck_assert(value_of(t, "bigfleet_appliance_process_up{role=\"simprovider\"}") < 0);
    ck_assert(value_of(t, "bigfleet_appliance_process_restarts_total{role=\"simprovider\"}") < 0);
    ck_assert(value_of(t, "bigfleet_appliance_seqlock_retries_total{role=\"session\"}") == 17);
    ck_assert(value_of(t, "bigfleet_appliance_changelog_overflows_total{writer=\"executor\"}") ==
              1);
    ck_assert(value_of(t, "bigfleet_appliance_shard_epoch") == 3);
    free(t);
    atomic_store(&st->proc[BF_ROLE_SIMPROVIDER].started_ns, now);
    t = render();
    ck_assert(value_of(t, "bigfleet_appliance_process_up{role=\"simprovider\"}") == 0);
    free(t);
}
END_TEST

START_TEST(the_float_spelling_is_gos)
{
    struct bf_strbuf b = {0};
    bf_metrics_float(&b, 0.25);
    bf_metrics_printf(&b, " ");
    bf_metrics_float(&b, 1e6);
    bf_metrics_printf(&b, " ");
    bf_metrics_float(&b, 1.0 / 0.0);
    bf_metrics_printf(&b, " ");
    bf_metrics_float(&b, 0);
    ck_assert_str_eq(b.p, "0.25 1e+06 +Inf 0");
    bf_sb_free(&b);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("metrics");
    TCase *tc = tcase_create("render");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, every_family_is_declared_once_before_its_samples_and_no_series_repeats);
    tcase_add_test(tc, histograms_are_cumulative_with_go_bounds_inf_sum_and_count);
    tcase_add_test(tc, label_values_are_escaped);
    tcase_add_test(tc, result_gauges_merge_zero_buckets_and_keep_vanished_combinations_at_zero);
    tcase_add_test(tc, outcomes_queue_depth_inflight_and_kinds);
    tcase_add_test(tc, processes_report_restarts_liveness_and_heartbeat_age);
    tcase_add_test(tc, the_float_spelling_is_gos);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(suite());
}
