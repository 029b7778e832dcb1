/*
 * metrics.c — Prometheus text rendering of the shared state
 * (bigfleet/metrics.h; every series is listed in docs/metrics.md).
 *
 * What is rendered, per scrape, from the shared segments only:
 *   - reference/shard.md §7, with the Go original's names, types, labels and
 *     buckets: cycle and phase histograms and action counters (cycle stats),
 *     execute outcomes, in-flight, idle releases and the executor's latency
 *     histograms (executor stats), the actions ring depth, the rejected-
 *     machine counters (reconciler stats), the session series, the rail-2
 *     gauge and per-cluster rejected rollups (cluster rows), and the gauges
 *     computed from the cycle's last published result (inventory, demand,
 *     shortfalls);
 *   - the appliance's own series (bigfleet_appliance_*): processes, rings,
 *     seqlocks, change logs, mirror rescans, the string table, the
 *     supervisor's repairs, reconcile passes, the published result.
 *
 * Reads only: counters with relaxed atomic loads (each has one writer,
 * named in shm_layout.h), the published result with bf_result_read
 * (publish_seq rule, bounded retries; a scrape that loses every race omits
 * the result-derived series and counts it), cluster rows with
 * bf_cluster_read (a row mid-write for the whole retry budget is skipped
 * for this scrape). Work per scrape is bounded by the segment capacities,
 * never by the inventory: one ~150 KiB copy of the result, the cluster
 * rows (--max-clusters), fixed tables. No machine record is read.
 *
 * Label combinations that disappear: inventory_machines (and the
 * appliance's by-type breakdown) are rendered for every combination
 * present in the last published counts, and keep being rendered with 0 once
 * a combination seen earlier by this process is gone (the Go shard leaves
 * the stale value instead). The memory of seen combinations is process-
 * local: a restarted session process starts empty. Rendering is therefore
 * not reentrant: one renderer per process (the session's loop thread).
 *
 * Files: this one renders the shard and appliance series and calls the
 * host series (metrics_host.c); both write through the exposition
 * primitives of metrics_text.c, which call neither (no circle between the
 * files; scripts/lint-includes).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/ledger.h"
#include "bigfleet/metrics.h"
#include "bigfleet/process.h"
#include "bigfleet/util.h"

#define LD(x) ((unsigned long long)BF_STAT_GET(x))

static void counter(struct bf_strbuf *b, const char *name, const char *help, unsigned long long v)
{
    bf_metrics_header(b, name, "counter", help);
    bf_metrics_printf(b, "%s %llu\n", name, v);
}

static void gauge(struct bf_strbuf *b, const char *name, const char *help, long long v)
{
    bf_metrics_header(b, name, "gauge", help);
    bf_metrics_printf(b, "%s %lld\n", name, v);
}

static void render_clusters(const struct bf_shm *s, struct bf_strbuf *b)
{
    uint32_t n = BF_SHARED_LOAD(s->needs->n_clusters);
    if (n > s->max_clusters)
        n = s->max_clusters;
    struct bf_cluster_rec *r = calloc(n ? n : 1, sizeof *r);
    bool *ok = calloc(n ? n : 1, sizeof *ok);
    if (!r || !ok) {
        free(r);
        free(ok);
        b->failed = true;
        return;
    }
    for (uint32_t i = 0; i < n; i++)
        ok[i] = bf_cluster_read(s, i, &r[i], NULL) == 0 && r[i].in_use;
    static const struct {
        const char *name, *type, *help;
        int field;
    } series[] = {
        {"bigfleet_shard_rollups_rejected_total", "counter",
         "Rollups rejected at ingest (malformed or invalid); the last good demand was kept.", 0},
        {"bigfleet_shard_rollup_quarantined", "gauge",
         "Consecutive rollups held by the empty-rollup guard (rail 2); 0 when accepted.", 1},
        {"bigfleet_shard_cluster_rollups_accepted_total", "counter",
         "Rollups accepted into the needs table, per cluster.", 2},
        {"bigfleet_shard_cluster_rollups_quarantined_total", "counter",
         "Rollups held by rail 2, per cluster.", 3},
        {"bigfleet_shard_cluster_need_rows", "gauge", "Need rows of the cluster's accepted demand.",
         4},
        {"bigfleet_shard_cluster_connected", "gauge",
         "1 while an operator session holds the cluster.", 5},
        {"bigfleet_shard_cluster_first_rollup_received", "gauge",
         "1 once any rollup (even empty or held) arrived: the ADR-0036 reclaim gate is open.", 6},
        {"bigfleet_shard_cluster_last_rollup_timestamp_seconds", "gauge",
         "Arrival time of the cluster's last rollup (any outcome), Unix seconds.", 7},
    };
    for (size_t k = 0; k < sizeof series / sizeof series[0]; k++) {
        bf_metrics_header(b, series[k].name, series[k].type, series[k].help);
        for (uint32_t i = 0; i < n; i++) {
            if (!ok[i])
                continue;
            uint32_t nl = 0;
            const char *nm = bf_str(s, r[i].name_ref, &nl);
            if (!nm)
                continue;
            bf_metrics_printf(b, "%s{cluster=\"", series[k].name);
            bf_metrics_label_value(b, nm, nl);
            switch (series[k].field) {
            case 0:
                bf_metrics_printf(b, "\"} %llu\n", (unsigned long long)r[i].rollups_rejected);
                break;
            case 1:
                bf_metrics_printf(b, "\"} %u\n", r[i].quarantine_held);
                break;
            case 2:
                bf_metrics_printf(b, "\"} %llu\n", (unsigned long long)r[i].rollups_accepted);
                break;
            case 3:
                bf_metrics_printf(b, "\"} %llu\n", (unsigned long long)r[i].rollups_quarantined);
                break;
            case 4:
                bf_metrics_printf(b, "\"} %u\n", r[i].rows_count);
                break;
            case 5:
                bf_metrics_printf(b, "\"} %u\n", r[i].connected);
                break;
            case 6:
                bf_metrics_printf(b, "\"} %u\n", r[i].first_rollup);
                break;
            default:
                bf_metrics_printf(b, "\"} %.3f\n", (double)r[i].last_rollup_ns / 1e9);
                break;
            }
        }
    }
    free(r);
    free(ok);
}

static void render_session(const struct bf_shm *s, struct bf_strbuf *b)
{
    const struct bf_state_main *st = s->st;
    const struct bf_stats_session *ss = &st->session;
    bf_metrics_header(b, "bigfleet_shard_session_lifecycle_total", "counter",
                      "Operator session lifecycle events.");
    static const char *ev[3] = {"installed", "removed", "replaced"};
    for (int i = 0; i < 3; i++)
        bf_metrics_printf(b, "bigfleet_shard_session_lifecycle_total{event=\"%s\"} %llu\n", ev[i],
                          LD(ss->lifecycle[i]));
    gauge(b, "bigfleet_shard_active_sessions", "Operator sessions currently installed.",
          (long long)BF_STAT_GET(ss->active_sessions));
    counter(b, "bigfleet_shard_session_identity_rejected_total",
            "Sessions refused because the client certificate does not authorize the cluster.",
            LD(ss->identity_rejected));
    counter(b, "bigfleet_shard_session_hello_rejected_total",
            "Sessions refused before install (no Hello first, bad cluster_id, cluster table full).",
            LD(ss->hello_rejected));
    counter(b, "bigfleet_shard_session_rollups_received_total", "Rollups received on any stream.",
            LD(ss->rollups_received));
    counter(b, "bigfleet_shard_session_rollups_accepted_total",
            "Rollups accepted into the needs table.", LD(ss->rollups_accepted));
    counter(b, "bigfleet_shard_session_rollups_rejected_total",
            "Rollups rejected at ingest; the last good demand was kept.", LD(ss->rollups_rejected));
    counter(b, "bigfleet_shard_session_rollups_quarantined_total",
            "Rollups held by the empty-rollup guard (rail 2).", LD(ss->rollups_quarantined));
    counter(b, "bigfleet_shard_session_rollups_superseded_total",
            "Queued rollups replaced by a newer one before ingest.", LD(ss->rollups_superseded));
    counter(b, "bigfleet_shard_session_outbox_coalesced_total",
            "Queued node-state/available-capacity updates replaced by a newer one (same key).",
            LD(ss->outbox_coalesced));
    counter(b, "bigfleet_shard_session_outbox_dropped_total",
            "Coalescable updates dropped because a session's key bound was reached.",
            LD(ss->outbox_dropped));
    counter(b, "bigfleet_shard_session_bootstrap_requests_total",
            "BootstrapRequests sent to operators.", LD(ss->boot_requests));
    counter(b, "bigfleet_shard_session_bootstrap_late_responses_total",
            "BootstrapBlobResponses for unknown or expired requests (dropped).",
            LD(ss->boot_late_responses));
    counter(b, "bigfleet_shard_session_reclaim_instructions_total",
            "ReclaimInstructions sent to operators.", LD(ss->reclaim_instructions));
    counter(b, "bigfleet_shard_session_reclaim_acks_total", "ReclaimAcks matched.",
            LD(ss->reclaim_acks));
    counter(b, "bigfleet_shard_session_node_updates_total", "NodeStateUpdates sent.",
            LD(ss->node_updates));
    counter(b, "bigfleet_shard_session_available_capacity_updates_total",
            "AvailableCapacityUpdates sent.", LD(ss->ac_updates));
    counter(b, "bigfleet_shard_coordinator_reports_total", "ReportShard calls that succeeded.",
            LD(ss->coordinator_reports));
    counter(b, "bigfleet_shard_coordinator_report_errors_total", "ReportShard calls that failed.",
            LD(ss->coordinator_errors));
    counter(b, "bigfleet_shard_coordinator_stale_replies_total",
            "ReportAcks from a coordinator term below the high-water mark (a deposed "
            "leader's), ignored whole.",
            LD(ss->coordinator_stale_replies));
    counter(b, "bigfleet_shard_coordinator_stale_reply_instructions_total",
            "Instructions carried by those stale ReportAcks, rejected unapplied.",
            LD(ss->coordinator_stale_reply_instructions));
    gauge(b, "bigfleet_shard_coordinator_term", "Coordinator term high-water mark.",
          (long long)BF_STAT_GET(ss->coordinator_term));
    bf_metrics_header(b, "bigfleet_shard_session_rollup_ingest_seconds", "histogram",
                      "Time to decode, convert and publish one rollup.");
    bf_metrics_hist(b, "bigfleet_shard_session_rollup_ingest_seconds", "", &ss->rollup_ingest,
                    0.0001, 2, 20);
    gauge(b, "bigfleet_shard_needs_rows", "Need rows live across clusters.",
          (long long)BF_STAT_GET(s->needs->rows_used));
    gauge(b, "bigfleet_shard_ready", "1 once the first provider reconcile succeeded (/readyz).",
          (long long)BF_STAT_GET(st->first_reconcile_done));
    counter(b, "bigfleet_shard_inspect_needs_calls_total", "ShardRead/InspectNeeds calls received.",
            LD(ss->inspect_calls));
    counter(b, "bigfleet_shard_inspect_needs_denied_total",
            "InspectNeeds calls refused: under mTLS the peer is neither bigfleet://readonly nor "
            "bigfleet://admin.",
            LD(ss->inspect_denied));
}

/* ------------------------------------------------------------ helpers */

static const char *const cl_names[BF_CHANGELOG_WRITERS] = {"reconciler", "executor", "supervisor"};

/* One sample line: name{labels} value (labels "" or k="v",...). */
static void sample_f(struct bf_strbuf *b, const char *name, const char *labels, double v)
{
    if (labels[0])
        bf_metrics_printf(b, "%s{%s} ", name, labels);
    else
        bf_metrics_printf(b, "%s ", name);
    bf_metrics_float(b, v);
    bf_metrics_printf(b, "\n");
}

/* A family over the five action kinds (label kind = Bootstrap ... Delete). */
static void per_kind(struct bf_strbuf *b, const char *name, const char *help,
                     const _Atomic uint64_t *v)
{
    bf_metrics_header(b, name, "counter", help);
    for (int k = 1; k < BF_ACT_KIND_COUNT; k++)
        bf_metrics_printf(b, "%s{kind=\"%s\"} %llu\n", name, bf_action_kind_name(k), LD(v[k]));
}

static void hist(struct bf_strbuf *b, const char *name, const char *help, const struct bf_hist *h,
                 double start, double factor, int n)
{
    bf_metrics_header(b, name, "histogram", help);
    bf_metrics_hist(b, name, "", h, start, factor, n);
}

/* ------------------------------------------------------------ shard.md §7: counters */

static void render_actions(const struct bf_shm *s, struct bf_strbuf *b)
{
    const struct bf_state_main *st = s->st;
    const struct bf_stats_cycle *cs = &st->cycle;
    const struct bf_stats_executor *xs = &st->executor;
    hist(b, "bigfleet_shard_cycle_duration_seconds",
         "Duration of one cycle (reconcile wait through publish); not observed during the "
         "metrics warm-up.",
         &cs->cycle_duration, 0.001, 2, 14);
    bf_metrics_header(b, "bigfleet_shard_cycle_phase_duration_seconds", "histogram",
                      "Duration of each phase of a cycle.");
    for (int p = 0; p < BF_PHASE_COUNT; p++) {
        char lab[32];
        snprintf(lab, sizeof lab, "phase=\"%s\"", bf_phase_label(p));
        bf_metrics_hist(b, "bigfleet_shard_cycle_phase_duration_seconds", lab,
                        &cs->phase_duration[p], 0.001, 2, 14);
    }
    /* samples come from the executor (synchronous Configure) and the
     * reconciler (asynchronous completion): one histogram, summed */
    struct bf_hist prov;
    const struct bf_hist *ph[2] = {&xs->provisioning_latency, &st->reconciler.provisioning_latency};
    for (int k = 0; k < BF_HIST_MAX_BUCKETS; k++)
        BF_STAT_SET(prov.bucket[k], BF_STAT_GET(ph[0]->bucket[k]) + BF_STAT_GET(ph[1]->bucket[k]));
    BF_STAT_SET(prov.count, BF_STAT_GET(ph[0]->count) + BF_STAT_GET(ph[1]->count));
    BF_STAT_SET(prov.sum_ns, BF_STAT_GET(ph[0]->sum_ns) + BF_STAT_GET(ph[1]->sum_ns));
    hist(b, "bigfleet_shard_provisioning_latency_seconds",
         "From a (cluster, fingerprint) first appearing in a rollup to a machine for it reaching "
         "Configured; one sample per stamp.",
         &prov, 0.01, 2, 20);
    hist(b, "bigfleet_shard_configure_phase_seconds",
         "Configure call to Configured (success path only).", &xs->configure_phase, 0.01, 2, 16);
    hist(b, "bigfleet_shard_request_bootstrap_seconds",
         "Time to obtain a bootstrap blob from the operator (every request).",
         &xs->request_bootstrap, 0.01, 2, 16);
    hist(b, "bigfleet_shard_drain_phase_seconds",
         "Drain call to its end, after a successful Drain call (asynchronous drains included).",
         &xs->drain_phase, 0.01, 2, 16);
    per_kind(b, "bigfleet_shard_actions_total",
             "Actions decided for execution after the rails (audit-only dispositions excluded; "
             "counted before the in-flight dedup).",
             cs->actions_total);
    bf_metrics_header(b, "bigfleet_shard_action_execute_outcomes_total", "counter",
                      "Finished executions by kind and outcome (reference/shard.md §3.7 labels).");
    for (int k = 0; k < BF_ACT_KIND_COUNT; k++)
        for (int o = 0; o < BF_OUT_COUNT; o++) {
            unsigned long long v = LD(xs->outcomes[k][o]);
            if (k == 0 && v == 0)
                continue; /* malformed actions (no kind): only once there are any */
            bf_metrics_printf(
                b,
                "bigfleet_shard_action_execute_outcomes_total{kind=\"%s\",outcome=\"%s\"} %llu\n",
                k ? bf_action_kind_name(k) : "unspecified", bf_outcome_label(o), v);
        }
    counter(b, "bigfleet_shard_actions_deferred_total",
            "Actions deferred to a later cycle by --max-actions-per-cycle.",
            LD(cs->actions_deferred));
    counter(b, "bigfleet_shard_actions_dropped_total",
            "Actions dropped because the actions ring was full (re-derived next cycle).",
            LD(cs->actions_dropped));
    counter(b, "bigfleet_shard_verdicts_dropped_total",
            "Verdict rows (NeedView) a cycle could not publish, or published without a detail: "
            "the state segment's file could not grow or the string table was full.",
            LD(cs->verdicts_dropped));
    counter(b, "bigfleet_shard_actions_deduped_total",
            "Actions not enqueued: the machine left the action's start state or already had an "
            "action in flight.",
            LD(cs->actions_deduped));
    /* the ring keeps an action until the executor finished it (and every one
     * before it); what waits for a worker is that minus the ones in flight */
    uint64_t depth = bf_ring_depth(s, BF_RING_ACTIONS);
    int64_t infl = BF_STAT_GET(xs->inflight);
    uint64_t waiting = infl > 0 && (uint64_t)infl < depth ? depth - (uint64_t)infl
                       : infl > 0                         ? 0
                                                          : depth;
    gauge(b, "bigfleet_shard_action_queue_depth",
          "Actions enqueued and not yet started by an executor worker.", (long long)waiting);
    gauge(b, "bigfleet_shard_execute_inflight", "Actions being executed.", (long long)infl);
    counter(b, "bigfleet_shard_reclaims_capped_total",
            "Reclaims dropped this cycle by the per-cluster reclaim cap (rail 1).",
            LD(cs->reclaims_capped));
    counter(b, "bigfleet_shard_idle_releases_total",
            "Finished Deletes (idle machines released to the provider).", LD(xs->idle_releases));
    per_kind(b, "bigfleet_shard_actions_suppressed_total",
             "Actions decided while actuation is paused (--actuation-paused): audited only.",
             cs->actions_suppressed);
    per_kind(b, "bigfleet_shard_actions_dryrun_total",
             "Actions decided in --dry-run: audited only.", cs->actions_dryrun);
    gauge(b, "bigfleet_shard_actuation_paused", "1 while actuation is paused (kill switch).",
          (long long)BF_STAT_GET(st->actuation_paused));
    bf_metrics_header(b, "bigfleet_shard_machines_rejected_total", "counter",
                      "Provider machine records refused by the Invariant screen, by reason.");
    for (int r = BF_REJECT_STRUCTURAL; r <= BF_REJECT_PROBABILITY; r++)
        bf_metrics_printf(b, "bigfleet_shard_machines_rejected_total{reason=\"%s\"} %llu\n",
                          bf_reject_reason_label(r), LD(st->reconciler.machines_rejected[r]));
}

/* ------------------------------------------------------------ the published result */

/* Label index of a penalty bucket: UNSPECIFIED (0) and ZERO (1) share the
 * label "0" (bf_bucket_label), so they are one series. */
#define NLB (BF_BUCKET_COUNT - 1)
static int lb_of(int bucket)
{
    return bucket <= 1 ? 0 : bucket - 1;
}
static const char *lb_label(int li)
{
    return bf_bucket_label(li == 0 ? 0 : li + 1);
}

/* Combinations rendered at least once by this process (see the file comment). */
static uint8_t g_seen_inv[BF_STATE_COUNT][BF_CT_COUNT][NLB];
static uint8_t g_seen_type[BF_STATE_COUNT][BF_MAX_TYPES][BF_MAX_ZONES];
static uint64_t g_result_read_failures;

void bf_metrics_forget(void)
{
    memset(g_seen_inv, 0, sizeof g_seen_inv);
    memset(g_seen_type, 0, sizeof g_seen_type);
    g_result_read_failures = 0;
}

static void render_result(const struct bf_shm *s, struct bf_strbuf *b)
{
    struct bf_cycle_result *r = malloc(sizeof *r);
    if (!r) {
        b->failed = true;
        return;
    }
    int rc = bf_result_read(s, r, NULL);
    if (rc)
        g_result_read_failures++;
    counter(b, "bigfleet_appliance_metrics_result_read_failures_total",
            "Scrapes that omitted the result-derived series: the cycle republished during every "
            "copy.",
            g_result_read_failures);
    if (rc) {
        free(r);
        return;
    }
    const struct bf_inv_counts *k = &r->counts;
    bool have = r->cycle > 0;
    /* inventory_machines{state,capacity_type,interruption_penalty_bucket} */
    bf_metrics_header(b, "bigfleet_shard_inventory_machines", "gauge",
                      "Machines by state, capacity type and assigned interruption penalty bucket, "
                      "as of the last cycle (0 for a combination seen earlier and now gone).");
    for (int st = 0; st < BF_STATE_COUNT; st++)
        for (int ct = 0; ct < BF_CT_COUNT; ct++) {
            uint32_t v[NLB] = {0};
            if (have)
                for (int bk = 0; bk < BF_BUCKET_COUNT; bk++)
                    v[lb_of(bk)] += k->by_state_ct_bucket[st][ct][bk];
            for (int li = 0; li < NLB; li++) {
                if (v[li])
                    g_seen_inv[st][ct][li] = 1;
                if (!g_seen_inv[st][ct][li])
                    continue;
                bf_metrics_printf(b,
                                  "bigfleet_shard_inventory_machines{state=\"%s\",capacity_type="
                                  "\"%s\",interruption_penalty_bucket=\"%s\"} %u\n",
                                  bf_state_name(st), bf_capacity_type_name(ct), lb_label(li),
                                  v[li]);
            }
        }
    bf_metrics_header(b, "bigfleet_shard_demand_machines", "gauge",
                      "Need rows by interruption penalty bucket, as of the last cycle.");
    uint32_t d[NLB] = {0};
    for (int bk = 0; bk < BF_BUCKET_COUNT && have; bk++)
        d[lb_of(bk)] += k->demand_rows_by_bucket[bk];
    for (int li = 0; li < NLB; li++)
        bf_metrics_printf(b,
                          "bigfleet_shard_demand_machines{interruption_penalty_bucket=\"%s\"} %u\n",
                          lb_label(li), d[li]);
    gauge(b, "bigfleet_shard_shortfalls",
          "Shortfall ledger size (distinct unmet fingerprints; not capped at 100).",
          (long long)r->shortfalls_total);
    uint32_t ns = r->n_shortfalls > BF_SHORTFALL_MAX ? BF_SHORTFALL_MAX : r->n_shortfalls;
    uint32_t aged[4] = {0}, prio[4] = {0};
    for (uint32_t i = 0; i < ns; i++) {
        int32_t a = r->shortfalls[i].age_cycles, p = r->shortfalls[i].priority;
        aged[a < 10 ? 0 : a < 60 ? 1 : a < 300 ? 2 : 3]++;
        prio[p >= 1000000 ? 2 : p >= 1000 ? 1 : p >= 100 ? 0 : 3]++;
    }
    static const char *const age_l[4] = {"1-9", "10-59", "60-299", "300+"};
    static const char *const prio_l[4] = {"batch", "service", "critical", "other"};
    bf_metrics_header(b, "bigfleet_shard_shortfalls_aged", "gauge",
                      "Top-100 shortfalls by age in cycles.");
    for (int i = 0; i < 4; i++)
        bf_metrics_printf(b, "bigfleet_shard_shortfalls_aged{bucket=\"%s\"} %u\n", age_l[i],
                          aged[i]);
    bf_metrics_header(b, "bigfleet_shard_shortfalls_by_priority", "gauge",
                      "Top-100 shortfalls by priority class (batch 100-999, service 1000-999999, "
                      "critical >= 1000000, other < 100).");
    for (int i = 0; i < 4; i++)
        bf_metrics_printf(b, "bigfleet_shard_shortfalls_by_priority{priority_class=\"%s\"} %u\n",
                          prio_l[i], prio[i]);
    /* the appliance's view of the same result */
    gauge(b, "bigfleet_appliance_result_cycle",
          "Cycle number of the last published result (0: none yet).", (long long)r->cycle);
    bf_metrics_header(b, "bigfleet_appliance_result_timestamp_seconds", "gauge",
                      "Wall time the last result was published (0: none yet).");
    sample_f(b, "bigfleet_appliance_result_timestamp_seconds", "", (double)r->computed_at_ns / 1e9);
    bf_metrics_header(b, "bigfleet_appliance_result_cycle_duration_seconds", "gauge",
                      "Duration of the cycle that produced the last result.");
    sample_f(b, "bigfleet_appliance_result_cycle_duration_seconds", "", (double)r->cycle_ns / 1e9);
    gauge(b, "bigfleet_appliance_result_needs", "Need rows the last cycle saw.",
          (long long)k->total_needs);
    gauge(b, "bigfleet_appliance_result_unsatisfied_needs",
          "Needs the last cycle left (partly) unsatisfied.", (long long)r->unsatisfied);
    gauge(b, "bigfleet_appliance_result_verdict_rows",
          "Rows of the published verdict ledger (what InspectNeeds serves).",
          (long long)r->n_verdicts);
    gauge(b, "bigfleet_appliance_result_actions", "Actions the last cycle decided.",
          (long long)r->actions);
    gauge(b, "bigfleet_appliance_result_machines", "Machines the last cycle saw.",
          (long long)k->total_machines);
    bf_metrics_header(b, "bigfleet_appliance_inventory_machines_by_type", "gauge",
                      "Machines by state, instance type and zone, as of the last cycle (0 for a "
                      "combination seen earlier and now gone).");
    for (int st = 0; st < BF_STATE_COUNT; st++)
        for (uint32_t t = 0; t < BF_MAX_TYPES; t++)
            for (uint32_t z = 0; z < BF_MAX_ZONES; z++) {
                uint32_t v = have ? k->by_state_type_zone[st][t][z] : 0;
                if (v)
                    g_seen_type[st][t][z] = 1;
                if (!g_seen_type[st][t][z])
                    continue;
                const char *tn = bf_type_name(s, t), *zn = bf_zone_name(s, z);
                bf_metrics_printf(
                    b,
                    "bigfleet_appliance_inventory_machines_by_type{state=\"%s\",instance_type=\"",
                    bf_state_name(st));
                bf_metrics_label_value(b, tn, strlen(tn));
                bf_metrics_printf(b, "\",zone=\"");
                bf_metrics_label_value(b, zn, strlen(zn));
                bf_metrics_printf(b, "\"} %u\n", v);
            }
    free(r);
}

/* ------------------------------------------------------------ the appliance's own */

static void render_processes(const struct bf_shm *s, struct bf_strbuf *b)
{
    const struct bf_state_main *st = s->st;
    int64_t now = bf_now_ns();
    bool show[BF_ROLE_COUNT] = {false};
    for (int r = BF_ROLE_SESSION; r < BF_ROLE_COUNT; r++)
        show[r] = r != BF_ROLE_SIMPROVIDER || BF_STAT_GET(st->proc[r].started_ns) != 0;
    bf_metrics_header(b, "bigfleet_appliance_process_restarts_total", "counter",
                      "Restarts of a role's process by the supervisor.");
    for (int r = 1; r < BF_ROLE_COUNT; r++)
        if (show[r])
            bf_metrics_printf(b, "bigfleet_appliance_process_restarts_total{role=\"%s\"} %u\n",
                              bf_role_name(r), BF_STAT_GET(st->proc[r].restarts));
    bf_metrics_header(b, "bigfleet_appliance_process_up", "gauge",
                      "1 while the role's process is running and attached (its slot is active; the "
                      "embedded provider, which does not attach: while it runs).");
    for (int r = 1; r < BF_ROLE_COUNT; r++)
        if (show[r])
            bf_metrics_printf(b, "bigfleet_appliance_process_up{role=\"%s\"} %d\n", bf_role_name(r),
                              BF_STAT_GET(st->proc[r].pid) != 0 &&
                                  (r == BF_ROLE_SIMPROVIDER || /* not attached to the segments */
                                   BF_STAT_GET(st->proc[r].child_state) == BF_CHILD_ACTIVE));
    bf_metrics_header(b, "bigfleet_appliance_process_heartbeat_age_seconds", "gauge",
                      "Seconds since the role's process last turned its loop (absent before the "
                      "first heartbeat).");
    for (int r = 1; r < BF_ROLE_COUNT; r++) {
        int64_t hb = BF_STAT_GET(st->proc[r].heartbeat_ns);
        if (!show[r] || !hb)
            continue;
        char lab[40];
        snprintf(lab, sizeof lab, "role=\"%s\"", bf_role_name(r));
        sample_f(b, "bigfleet_appliance_process_heartbeat_age_seconds", lab,
                 now > hb ? (double)(now - hb) / 1e9 : 0.0);
    }
    bf_metrics_header(b, "bigfleet_appliance_process_start_time_seconds", "gauge",
                      "Start time of the role's current process, Unix seconds.");
    for (int r = 1; r < BF_ROLE_COUNT; r++) {
        int64_t t = BF_STAT_GET(st->proc[r].started_ns);
        if (!show[r] || !t)
            continue;
        char lab[40];
        snprintf(lab, sizeof lab, "role=\"%s\"", bf_role_name(r));
        sample_f(b, "bigfleet_appliance_process_start_time_seconds", lab, (double)t / 1e9);
    }
    const struct bf_stats_supervisor *sv = &st->supervisor;
    counter(b, "bigfleet_appliance_child_exits_total", "Child processes reaped by the supervisor.",
            LD(sv->child_exits));
    counter(b, "bigfleet_appliance_records_repaired_total",
            "Machine records a dead writer left mid-write, repaired by the supervisor.",
            LD(sv->records_repaired));
    counter(b, "bigfleet_appliance_clusters_repaired_total",
            "Cluster rows a dead session left mid-write, repaired by the supervisor.",
            LD(sv->clusters_repaired));
    counter(b, "bigfleet_appliance_locks_recovered_total",
            "Shared locks (string table) held by a dead process and recovered.",
            LD(sv->locks_recovered));
    counter(b, "bigfleet_appliance_full_reinits_total",
            "Crash loops answered by re-creating every segment.", LD(sv->full_reinits));
    gauge(b, "bigfleet_appliance_segment_generation",
          "Full re-initialisations of the segments since the first start.",
          (long long)s->state_hdr->generation);
    gauge(b, "bigfleet_appliance_shard_epoch", "Shard epoch (+1 per supervisor start).",
          (long long)s->state_hdr->epoch);
    gauge(b, "bigfleet_appliance_dry_run", "1 when started with --dry-run.",
          (long long)BF_STAT_GET(st->dry_run));
}

static void render_rings(const struct bf_shm *s, struct bf_strbuf *b)
{
    bf_metrics_header(b, "bigfleet_appliance_ring_depth", "gauge",
                      "Messages waiting in a fixed-size ring between two processes.");
    for (int r = 0; r < BF_RING_COUNT; r++)
        if (s->ring[r]->kind == BF_RING_FIXED)
            bf_metrics_printf(b, "bigfleet_appliance_ring_depth{ring=\"%s\"} %llu\n",
                              bf_ring_label(r), (unsigned long long)bf_ring_depth(s, r));
    bf_metrics_header(b, "bigfleet_appliance_ring_capacity", "gauge",
                      "Capacity of a fixed-size ring, in messages.");
    for (int r = 0; r < BF_RING_COUNT; r++)
        if (s->ring[r]->kind == BF_RING_FIXED)
            bf_metrics_printf(b, "bigfleet_appliance_ring_capacity{ring=\"%s\"} %llu\n",
                              bf_ring_label(r), (unsigned long long)s->ring[r]->capacity);
    bf_metrics_header(b, "bigfleet_appliance_ring_bytes", "gauge",
                      "Bytes waiting in a byte ring (bootstrap responses).");
    for (int r = 0; r < BF_RING_COUNT; r++)
        if (s->ring[r]->kind == BF_RING_BYTES)
            bf_metrics_printf(b, "bigfleet_appliance_ring_bytes{ring=\"%s\"} %llu\n",
                              bf_ring_label(r), (unsigned long long)bf_ring_depth(s, r));
    bf_metrics_header(b, "bigfleet_appliance_ring_capacity_bytes", "gauge",
                      "Capacity of a byte ring.");
    for (int r = 0; r < BF_RING_COUNT; r++)
        if (s->ring[r]->kind == BF_RING_BYTES)
            bf_metrics_printf(b, "bigfleet_appliance_ring_capacity_bytes{ring=\"%s\"} %llu\n",
                              bf_ring_label(r), (unsigned long long)s->ring[r]->capacity);
    bf_metrics_header(b, "bigfleet_appliance_ring_pushes_total", "counter",
                      "Messages pushed into a ring.");
    for (int r = 0; r < BF_RING_COUNT; r++)
        bf_metrics_printf(b, "bigfleet_appliance_ring_pushes_total{ring=\"%s\"} %llu\n",
                          bf_ring_label(r), LD(s->ring[r]->pushes));
    bf_metrics_header(b, "bigfleet_appliance_ring_drops_total", "counter",
                      "Pushes refused because the ring was full.");
    for (int r = 0; r < BF_RING_COUNT; r++)
        bf_metrics_printf(b, "bigfleet_appliance_ring_drops_total{ring=\"%s\"} %llu\n",
                          bf_ring_label(r), LD(s->ring[r]->drops));
}

static void render_shm(const struct bf_shm *s, struct bf_strbuf *b)
{
    const struct bf_inv_meta *m = s->inv;
    bf_metrics_header(b, "bigfleet_appliance_seqlock_retries_total", "counter",
                      "Machine-record reads repeated because a writer held or moved the record, by "
                      "reading role.");
    for (int r = 0; r < BF_ROLE_COUNT; r++)
        bf_metrics_printf(b, "bigfleet_appliance_seqlock_retries_total{role=\"%s\"} %llu\n",
                          bf_role_name(r), LD(m->seqlock_retries[r]));
    bf_metrics_header(b, "bigfleet_appliance_seqlock_giveups_total", "counter",
                      "Machine-record reads abandoned after the retry budget, by reading role.");
    for (int r = 0; r < BF_ROLE_COUNT; r++)
        bf_metrics_printf(b, "bigfleet_appliance_seqlock_giveups_total{role=\"%s\"} %llu\n",
                          bf_role_name(r), LD(m->seqlock_giveups[r]));
    bf_metrics_header(b, "bigfleet_appliance_changelog_overflows_total", "counter",
                      "Full rescans the cycle had to make because a record writer's change log "
                      "lapped it, by writer.");
    for (int w = 0; w < BF_CHANGELOG_WRITERS; w++)
        bf_metrics_printf(b, "bigfleet_appliance_changelog_overflows_total{writer=\"%s\"} %llu\n",
                          cl_names[w], LD(s->changelog[w].overflows));
    bf_metrics_header(b, "bigfleet_appliance_changelog_lag", "gauge",
                      "Change-log entries appended and not yet consumed by the cycle, by writer.");
    for (int w = 0; w < BF_CHANGELOG_WRITERS; w++) {
        uint64_t h = BF_STAT_GET(s->changelog[w].head), t = BF_STAT_GET(s->changelog[w].tail);
        bf_metrics_printf(b, "bigfleet_appliance_changelog_lag{writer=\"%s\"} %llu\n", cl_names[w],
                          (unsigned long long)(h > t ? h - t : 0));
    }
    gauge(b, "bigfleet_appliance_changelog_capacity", "Entries per change log.",
          (long long)s->changelog_mask + 1);
    const struct bf_stats_cycle *cs = &s->st->cycle;
    counter(b, "bigfleet_appliance_mirror_rescans_total",
            "Full rescans of the records by the cycle's inventory mirror.", LD(cs->mirror_rescans));
    counter(b, "bigfleet_appliance_cycles_total", "Cycles run.", LD(cs->cycles));
    counter(b, "bigfleet_appliance_reconcile_waits_timed_out_total",
            "Cycles that ran on the current view because the reconcile pass they asked for did "
            "not finish within --reconcile-timeout.",
            LD(cs->reconcile_waits_timed_out));
    counter(b, "bigfleet_appliance_ac_hints_sent_total",
            "AvailableCapacity hints handed to the session.", LD(cs->ac_hints_sent));
    counter(b, "bigfleet_appliance_ac_hints_dropped_total",
            "AvailableCapacity hints dropped: the hints ring was full.", LD(cs->ac_hints_dropped));
    /* string table */
    gauge(b, "bigfleet_appliance_strings_bytes_used", "String-table arena bytes in use.",
          (long long)LD(m->strtab.arena_used));
    gauge(b, "bigfleet_appliance_strings_bytes_capacity", "String-table arena size.",
          (long long)s->arena_bytes);
    gauge(b, "bigfleet_appliance_strings_entries", "Strings interned (never freed).",
          (long long)LD(m->strtab.entries));
    counter(b, "bigfleet_appliance_strings_intern_failures_total",
            "Interns refused because the arena or its hash was full.",
            LD(m->strtab.intern_failures));
    counter(b, "bigfleet_appliance_strings_lock_steals_total",
            "String-table locks taken over from a dead owner.", LD(m->strtab.lock_steals));
    gauge(b, "bigfleet_appliance_id_index_used",
          "Occupied machine-id index slots (tombstones included).",
          (long long)BF_STAT_GET(m->index_used));
    gauge(b, "bigfleet_appliance_id_index_capacity", "Machine-id index slots.",
          (long long)s->index_mask + 1);
    gauge(b, "bigfleet_appliance_machines", "Machine records in the inventory segment.",
          (long long)BF_STAT_GET(m->n_machines));
    gauge(b, "bigfleet_appliance_machines_capacity", "Machine record slots (--max-machines).",
          (long long)s->max_machines);
    gauge(b, "bigfleet_appliance_needs_capacity", "Need rows per cycle (--max-needs).",
          (long long)s->max_needs);
    counter(b, "bigfleet_appliance_records_inserted_total", "Machine records inserted.",
            LD(m->records_inserted));
    counter(b, "bigfleet_appliance_records_removed_total", "Machine records removed.",
            LD(m->records_removed));
}

static void render_reconciler_executor(const struct bf_shm *s, struct bf_strbuf *b)
{
    const struct bf_stats_reconciler *rs = &s->st->reconciler;
    counter(b, "bigfleet_appliance_reconcile_passes_total",
            "Provider reconcile passes finished (successful or not).", LD(rs->reconciles));
    counter(b, "bigfleet_appliance_reconcile_errors_total",
            "Reconcile passes that failed or could not start.", LD(rs->reconcile_errors));
    counter(b, "bigfleet_appliance_reconcile_machines_inserted_total",
            "Machines added to the inventory by reconcile.", LD(rs->machines_inserted));
    counter(b, "bigfleet_appliance_reconcile_machines_updated_total",
            "Machine records updated by reconcile.", LD(rs->machines_updated));
    counter(b, "bigfleet_appliance_reconcile_machines_removed_total",
            "Machines removed by reconcile (gone at the provider).", LD(rs->machines_removed));
    counter(b, "bigfleet_appliance_reconcile_skipped_pending_total",
            "Machines reconcile left alone because an action was in flight on them.",
            LD(rs->machines_skipped_pending));
    counter(b, "bigfleet_appliance_reconcile_metadata_decode_errors_total",
            "shard_metadata values skipped as malformed, or penalty dollars that are not a "
            "bucket bound (applied as the covering bucket), while restoring assignments.",
            LD(rs->metadata_decode_errors));
    gauge(b, "bigfleet_appliance_reconcile_last_listed_machines",
          "Machines the provider listed in the last complete walk (a full resync).",
          (long long)LD(rs->last_list_machines));
    bf_metrics_header(b, "bigfleet_appliance_reconcile_last_success_timestamp_seconds", "gauge",
                      "Wall time of the last successful reconcile pass (0: none yet).");
    sample_f(b, "bigfleet_appliance_reconcile_last_success_timestamp_seconds", "",
             (double)BF_STAT_GET(rs->last_reconcile_ns) / 1e9);
    hist(b, "bigfleet_appliance_reconcile_duration_seconds",
         "Duration of a successful reconcile pass (one List page or delta: list + apply).",
         &rs->reconcile_duration, 0.001, 2, 14);
    counter(b, "bigfleet_appliance_reconcile_resyncs_total",
            "Full resync walks completed (every machine listed, removals applied).",
            LD(rs->resyncs));
    counter(b, "bigfleet_appliance_reconcile_resync_aborts_total",
            "Resync walks that ended without removals (a List failed or the executor's change "
            "log lapped during the walk).",
            LD(rs->resync_aborts));
    bf_metrics_header(b, "bigfleet_appliance_reconcile_last_resync_timestamp_seconds", "gauge",
                      "Wall time of the last completed resync walk (0: none yet).");
    sample_f(b, "bigfleet_appliance_reconcile_last_resync_timestamp_seconds", "",
             (double)BF_STAT_GET(rs->last_resync_ns) / 1e9);
    hist(b, "bigfleet_appliance_reconcile_resync_duration_seconds",
         "Duration of a completed resync walk, first page asked to removals done.",
         &rs->resync_duration, 0.001, 2, 16);
    gauge(b, "bigfleet_appliance_reconcile_incremental",
          "1 while reconcile uses the provider's since_revision deltas; 0 when every pass is a "
          "full List (--incremental-reconcile=false, or a provider without cursors).",
          (long long)LD(rs->incremental));
    const struct bf_stats_executor *xs = &s->st->executor;
    counter(b, "bigfleet_appliance_audit_records_total", "Audit-log records written.",
            LD(xs->audit_records));
    counter(b, "bigfleet_appliance_audit_errors_total", "Audit-log writes that failed.",
            LD(xs->audit_errors));
    counter(b, "bigfleet_appliance_executor_ring_drops_total",
            "Executor pushes to the session (node events, reclaims, bootstrap requests) refused "
            "because a ring was full.",
            LD(xs->ring_drops));
}

/* ADR-0055 ownership partition (docs/adr0055.md, docs/metrics.md). */
static void render_ownership(const struct bf_shm *s, struct bf_strbuf *b)
{
    const struct bf_ownership_state *o = &s->st->own;
    const struct bf_stats_reconciler *rs = &s->st->reconciler;
    static const char *const kinds[BF_OWN_KINDS] = {"unknown",           "assign_domain",
                                                    "unassign_domain",   "reassign_speculative",
                                                    "cross_shard_drain", "transfer_ownership"};
    static const char *const outcomes[BF_OWN_OUTCOMES] = {
        "unspecified", "accepted", "rejected_stale", "rejected_invalid", "failed"};
    bf_metrics_header(b, "bigfleet_shard_coordinator_instructions_total", "counter",
                      "Coordinator instructions answered, by payload kind and InstructAck outcome "
                      "(a redelivery re-acked from the dedup set counts as accepted).");
    for (int k = 0; k < BF_OWN_KINDS; k++)
        for (int x = 0; x < BF_OWN_OUTCOMES; x++) {
            unsigned long long v = LD(o->instructions[k][x]);
            if (v || (k && (x == 1 || x == 4)))
                bf_metrics_printf(b,
                                  "bigfleet_shard_coordinator_instructions_total{kind=\"%s\","
                                  "outcome=\"%s\"} %llu\n",
                                  kinds[k], outcomes[x], v);
        }
    static const char *const modes[] = {"unknown", "own_all", "partitioned", "no_store"};
    uint32_t mode = BF_STAT_GET(o->mode);
    bf_metrics_header(b, "bigfleet_shard_ownership_mode", "gauge",
                      "1 for the partition mode in force (own_all: --ownership=all, or auto before "
                      "the first domain; partitioned: domains and transfers decide; no_store: "
                      "LMDB unavailable).");
    for (uint32_t m = 1; m < 4; m++)
        bf_metrics_printf(b, "bigfleet_shard_ownership_mode{mode=\"%s\"} %d\n", modes[m],
                          mode == m);
    gauge(b, "bigfleet_shard_owned_machines",
          "Machines in the owned set (LMDB under --data-dir): what this shard adopted and holds.",
          (long long)LD(rs->owned_machines));
    gauge(b, "bigfleet_shard_reserved_for_transfer_machines",
          "Machines drained by a CrossShardDrain and reserved for the TransferOwnership that "
          "should follow (cleared at the TTL).",
          (long long)BF_STAT_GET(o->n_reserved));
    gauge(b, "bigfleet_shard_ownership_held_machines",
          "Machines in the inventory held out of every decision: reserved for a transfer, or "
          "unbound and no longer owned.",
          (long long)BF_STAT_GET(o->n_held));
    gauge(b, "bigfleet_shard_ownership_transfers_in",
          "Machines transferred (or reassigned) to this shard, remembered in LMDB.",
          (long long)LD(o->n_in));
    gauge(b, "bigfleet_shard_ownership_transfers_out",
          "Machines transferred (or reassigned) away from this shard, never adopted again "
          "unless transferred back.",
          (long long)LD(o->n_out));
    gauge(b, "bigfleet_shard_ownership_generation",
          "Changes committed to the partition's rule inputs (domains, transfers).",
          (long long)LD(o->generation));
    counter(b, "bigfleet_shard_ownership_machines_transferred_out_total",
            "Idle machines given to another shard by TransferOwnership.", LD(o->transferred_out));
    counter(b, "bigfleet_shard_ownership_machines_transferred_in_total",
            "Machines taken over from another shard by TransferOwnership.", LD(o->transferred_in));
    counter(b, "bigfleet_shard_ownership_speculative_out_total",
            "Speculative slots given away by ReassignSpeculative.", LD(o->speculative_out));
    counter(b, "bigfleet_shard_ownership_speculative_in_total",
            "Speculative slots taken over by ReassignSpeculative.", LD(o->speculative_in));
    counter(b, "bigfleet_shard_ownership_cross_shard_drains_total",
            "Preempt actions issued for CrossShardDrain.", LD(o->drained));
    counter(b, "bigfleet_shard_ownership_reservations_expired_total",
            "Transfer reservations that reached their TTL without a transfer.",
            LD(o->reservations_expired));
    counter(b, "bigfleet_shard_ownership_store_errors_total",
            "LMDB failures of the ownership store (the instruction was answered FAILED).",
            LD(o->store_errors));
    counter(b, "bigfleet_shard_reconcile_machines_not_owned_total",
            "Listed machines not adopted because another shard owns them.",
            LD(rs->machines_not_owned));
    counter(b, "bigfleet_shard_reconcile_machines_released_total",
            "Machines removed from the inventory because this shard no longer owns them.",
            LD(rs->machines_released));
    gauge(b, "bigfleet_shard_ownership_release_blocked_machines",
          "Machines no longer owned but kept while bound to a cluster or in flight.",
          (long long)LD(rs->release_blocked));
    counter(b, "bigfleet_shard_owned_set_store_errors_total",
            "Failed writes of the owned set (retried by the next synchronisation).",
            LD(rs->owned_store_errors));
}

int bf_metrics_render(const struct bf_shm *s, struct bf_strbuf *b)
{
    render_session(s, b);
    render_actions(s, b);
    render_result(s, b);
    render_clusters(s, b);
    render_processes(s, b);
    render_rings(s, b);
    render_shm(s, b);
    render_reconciler_executor(s, b);
    render_ownership(s, b);
    bf_metrics_render_host(s, b);
    return b->failed ? -ENOMEM : 0;
}
