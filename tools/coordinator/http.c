/*
 * http.c — bigfleet-coordinator's /metrics (Prometheus text), /healthz and
 * /readyz (200 on the leader, 503 "follower" elsewhere: a load balancer or
 * a script finds the leader with it). Names: docs/coordinator.md.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/net.h"
#include "coordinator.h"

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void metrics(struct coord *c, struct bf_net_http_response *r)
{
    const struct co_rb_stats *st = co_rb_stats(c->rb);
    bf_net_http_printf(r,
                       "# TYPE bigfleet_coordinator_leader gauge\nbigfleet_coordinator_leader %d\n",
                       co_is_leader(c));
    bf_net_http_printf(r,
                       "# TYPE bigfleet_coordinator_term gauge\nbigfleet_coordinator_term %lld\n",
                       (long long)c->term);
    bf_net_http_printf(r,
                       "# TYPE bigfleet_coordinator_elections_total counter\n"
                       "bigfleet_coordinator_elections_total %llu\n"
                       "# TYPE bigfleet_coordinator_stepdowns_total counter\n"
                       "bigfleet_coordinator_stepdowns_total %llu\n"
                       "# TYPE bigfleet_coordinator_etcd_errors_total counter\n"
                       "bigfleet_coordinator_etcd_errors_total %llu\n"
                       "# TYPE bigfleet_coordinator_etcd_rejected_keys_total counter\n"
                       "bigfleet_coordinator_etcd_rejected_keys_total %llu\n",
                       (unsigned long long)c->elections, (unsigned long long)c->stepdowns,
                       (unsigned long long)c->etcd_errors, (unsigned long long)c->st.rejected);
    bf_net_http_printf(r,
                       "# TYPE bigfleet_coordinator_reports_total counter\n"
                       "bigfleet_coordinator_reports_total %llu\n"
                       "# TYPE bigfleet_coordinator_reports_rejected_total counter\n"
                       "bigfleet_coordinator_reports_rejected_total %llu\n"
                       "# TYPE bigfleet_coordinator_reports_out_of_order_total counter\n"
                       "bigfleet_coordinator_reports_out_of_order_total %llu\n"
                       "# TYPE bigfleet_coordinator_instructions_sent_total counter\n"
                       "bigfleet_coordinator_instructions_sent_total %llu\n"
                       "# TYPE bigfleet_coordinator_instruction_acks_total counter\n"
                       "bigfleet_coordinator_instruction_acks_total %llu\n",
                       (unsigned long long)c->reports, (unsigned long long)c->reports_rejected,
                       (unsigned long long)c->stale_reports, (unsigned long long)c->instr_sent,
                       (unsigned long long)c->acks);
    bf_net_http_printf(
        r,
        "# TYPE bigfleet_coordinator_instructions_dropped_on_stepdown_total counter\n"
        "bigfleet_coordinator_instructions_dropped_on_stepdown_total %llu\n"
        "# TYPE bigfleet_coordinator_moves_dropped_on_stepdown_total counter\n"
        "bigfleet_coordinator_moves_dropped_on_stepdown_total %llu\n"
        "# TYPE bigfleet_coordinator_quota_updates_queued gauge\n"
        "bigfleet_coordinator_quota_updates_queued %u\n"
        "# TYPE bigfleet_coordinator_quota_updates_dropped_total counter\n"
        "bigfleet_coordinator_quota_updates_dropped_total %llu\n",
        (unsigned long long)c->instr_dropped_stepdown,
        (unsigned long long)c->moves_dropped_stepdown, c->n_qadj,
        (unsigned long long)c->quota_dropped);
    /* a deposed leader's last answer is older than its resumption (the
     * multi-shard job's zombie check) */
    bf_net_http_printf(r,
                       "# TYPE bigfleet_coordinator_last_report_answered_timestamp_seconds gauge\n"
                       "bigfleet_coordinator_last_report_answered_timestamp_seconds %.3f\n",
                       (double)c->last_report_ns / 1e9);
    bf_net_http_printf(r,
                       "# TYPE bigfleet_coordinator_shards gauge\nbigfleet_coordinator_shards %u\n",
                       c->st.n_shards);
    bf_net_http_printf(r, "# TYPE bigfleet_coordinator_pending_instructions gauge\n");
    for (uint32_t i = 0; i < c->n_soft; i++)
        bf_net_http_printf(r, "bigfleet_coordinator_pending_instructions{shard=\"%s\"} %u\n",
                           c->soft[i].id, c->soft[i].n_pend);
    bf_net_http_printf(r,
                       "# TYPE bigfleet_coordinator_rebalance_passes_total counter\n"
                       "bigfleet_coordinator_rebalance_passes_total %llu\n",
                       (unsigned long long)st->passes);
    static const char *metric[4] = {"moves_started_total", "moves_completed_total",
                                    "machines_moved_total", "moves_failed_total"};
    const uint64_t *vals[4] = {st->started, st->completed, st->machines, st->failed};
    for (int m = 0; m < 4; m++) {
        bf_net_http_printf(r, "# TYPE bigfleet_coordinator_%s counter\n", metric[m]);
        for (int t = 1; t <= 3; t++)
            bf_net_http_printf(r, "bigfleet_coordinator_%s{tier=\"%d\"} %llu\n", metric[m], t,
                               (unsigned long long)vals[m][t]);
    }
    bf_net_http_printf(
        r,
        "# TYPE bigfleet_coordinator_moves_blocked_total counter\n"
        "bigfleet_coordinator_moves_blocked_total{reason=\"cooldown\"} %llu\n"
        "bigfleet_coordinator_moves_blocked_total{reason=\"donor_margin\"} %llu\n"
        "bigfleet_coordinator_moves_blocked_total{reason=\"donor_short_itself\"} %llu\n"
        "bigfleet_coordinator_moves_blocked_total{reason=\"min_benefit\"} %llu\n"
        "bigfleet_coordinator_moves_blocked_total{reason=\"demand_gone\"} %llu\n"
        "# TYPE bigfleet_coordinator_shortfalls_passed_over_total counter\n"
        "bigfleet_coordinator_shortfalls_passed_over_total{reason=\"young\"} %llu\n"
        "bigfleet_coordinator_shortfalls_passed_over_total{reason=\"topology_constrained\"} "
        "%llu\n"
        "bigfleet_coordinator_shortfalls_passed_over_total{reason=\"move_in_flight\"} %llu\n"
        "bigfleet_coordinator_shortfalls_passed_over_total{reason=\"settling\"} %llu\n"
        "bigfleet_coordinator_shortfalls_passed_over_total{reason=\"too_young_to_preempt\"} "
        "%llu\n"
        "bigfleet_coordinator_shortfalls_passed_over_total{reason=\"no_donor\"} %llu\n"
        "# TYPE bigfleet_coordinator_moves_in_flight gauge\n"
        "bigfleet_coordinator_moves_in_flight %u\n"
        "# TYPE bigfleet_coordinator_shortfalls_satisfied_total counter\n"
        "bigfleet_coordinator_shortfalls_satisfied_total %llu\n",
        (unsigned long long)st->blocked_cooldown, (unsigned long long)st->blocked_margin,
        (unsigned long long)st->blocked_demand, (unsigned long long)st->blocked_benefit,
        (unsigned long long)st->abandoned_pull, (unsigned long long)st->young,
        (unsigned long long)st->topo, (unsigned long long)st->in_flight,
        (unsigned long long)st->settling, (unsigned long long)st->tier3_young,
        (unsigned long long)st->uncovered, co_rb_moves_in_flight(c->rb),
        (unsigned long long)st->satisfied);
    size_t nf;
    const struct rb_flow_count *f = co_rb_flows(c->rb, &nf);
    bf_net_http_printf(r, "# TYPE bigfleet_coordinator_flow_machines_total counter\n");
    for (size_t i = 0; i < nf; i++)
        bf_net_http_printf(r,
                           "bigfleet_coordinator_flow_machines_total{from=\"%s\",to=\"%s\","
                           "tier=\"%d\"} %llu\n",
                           f[i].from, f[i].to, f[i].tier, (unsigned long long)f[i].machines);
    size_t nl;
    const double *lat = co_rb_latencies_ms(c->rb, &nl);
    double *sorted = nl ? malloc(nl * sizeof *sorted) : NULL;
    bf_net_http_printf(r, "# TYPE bigfleet_coordinator_shortfall_to_satisfied_seconds summary\n");
    if (sorted) {
        memcpy(sorted, lat, nl * sizeof *sorted);
        qsort(sorted, nl, sizeof *sorted, cmp_d);
        double sum = 0;
        for (size_t i = 0; i < nl; i++)
            sum += sorted[i];
        static const double qs[3] = {0.5, 0.9, 0.99};
        for (int i = 0; i < 3; i++)
            bf_net_http_printf(
                r,
                "bigfleet_coordinator_shortfall_to_satisfied_seconds{quantile=\"%g\"} "
                "%.3f\n",
                qs[i], sorted[(size_t)(qs[i] * (double)(nl - 1))] / 1e3);
        bf_net_http_printf(r, "bigfleet_coordinator_shortfall_to_satisfied_seconds_sum %.3f\n",
                           sum / 1e3);
        free(sorted);
    }
    bf_net_http_printf(r, "bigfleet_coordinator_shortfall_to_satisfied_seconds_count %zu\n", nl);
}

static void handler(const struct bf_net_http_request *req, struct bf_net_http_response *resp,
                    void *arg)
{
    struct coord *c = arg;
    if (!strcmp(req->path, "/metrics")) {
        bf_net_http_set_status(resp, 200, "text/plain; version=0.0.4; charset=utf-8");
        metrics(c, resp);
    } else if (!strcmp(req->path, "/healthz")) {
        bf_net_http_printf(resp, "ok\n");
    } else if (!strcmp(req->path, "/readyz")) {
        if (co_is_leader(c)) {
            bf_net_http_printf(resp, "leader term %lld\n", (long long)c->term);
        } else {
            bf_net_http_set_status(resp, 503, NULL);
            bf_net_http_printf(resp, "follower (leader: %s)\n",
                               c->leader_seen[0] ? c->leader_seen : "none");
        }
    } else {
        bf_net_http_set_status(resp, 404, NULL);
        bf_net_http_printf(resp, "not found\n");
    }
}

int co_http_start(struct coord *c)
{
    if (!c->cfg.metrics[0] || !strcmp(c->cfg.metrics, "0"))
        return 0;
    struct bf_net_http_server_opts o = {.addr = c->cfg.metrics, .handler = handler, .arg = c};
    return bf_net_http_server_new(c->loop, &o, &c->http);
}
