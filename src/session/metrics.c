/*
 * metrics.c — Prometheus text rendering of the shared state
 * (bigfleet/metrics.h). First version: the session's own series, the
 * per-cluster rollup counters and the rail-2 gauge, readiness. The rest of
 * reference/shard.md §7 is added here by the metrics work.
 *
 * Reads only: counters with atomic loads, cluster rows with
 * bf_cluster_read (a row that stays mid-write for the whole retry budget is
 * skipped for this scrape).
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/metrics.h"

void bf_metrics_buf_init(struct bf_metrics_buf *b)
{
    memset(b, 0, sizeof *b);
}

void bf_metrics_buf_free(struct bf_metrics_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

static bool reserve(struct bf_metrics_buf *b, size_t extra)
{
    if (b->oom)
        return false;
    if (b->len + extra + 1 <= b->cap)
        return true;
    size_t c = b->cap ? b->cap : 16384;
    while (c < b->len + extra + 1)
        c *= 2;
    char *d = realloc(b->data, c);
    if (!d) {
        b->oom = true;
        return false;
    }
    b->data = d;
    b->cap = c;
    return true;
}

void bf_metrics_printf(struct bf_metrics_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char tmp[512];
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof tmp) {
        if (reserve(b, (size_t)n)) {
            memcpy(b->data + b->len, tmp, (size_t)n + 1);
            b->len += (size_t)n;
        }
        return;
    }
    if (!reserve(b, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void bf_metrics_header(struct bf_metrics_buf *b, const char *name, const char *type,
                       const char *help)
{
    bf_metrics_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void bf_metrics_label_value(struct bf_metrics_buf *b, const char *v, size_t len)
{
    if (!reserve(b, len * 2))
        return;
    for (size_t i = 0; i < len; i++) {
        char c = v[i];
        if (c == '\\' || c == '"') {
            b->data[b->len++] = '\\';
            b->data[b->len++] = c;
        } else if (c == '\n') {
            b->data[b->len++] = '\\';
            b->data[b->len++] = 'n';
        } else {
            b->data[b->len++] = c;
        }
    }
    b->data[b->len] = 0;
}

void bf_metrics_hist(struct bf_metrics_buf *b, const char *name, const char *labels,
                     const struct bf_hist *h, double start, double factor, int n)
{
    if (n > BF_HIST_MAX_BUCKETS - 1)
        n = BF_HIST_MAX_BUCKETS - 1;
    const char *sep = labels[0] ? "," : "";
    uint64_t cum = 0;
    double bound = start;
    for (int i = 0; i < n; i++) {
        cum += atomic_load_explicit(&h->bucket[i], memory_order_relaxed);
        bf_metrics_printf(b, "%s_bucket{%s%sle=\"%.6g\"} %llu\n", name, labels, sep, bound,
                          (unsigned long long)cum);
        bound *= factor;
    }
    cum += atomic_load_explicit(&h->bucket[n], memory_order_relaxed);
    bf_metrics_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep,
                      (unsigned long long)cum);
    const char *lb = labels[0] ? "{" : "", *le = labels[0] ? "}" : "";
    bf_metrics_printf(b, "%s_sum%s%s%s %.9f\n", name, lb, labels, le,
                      (double)atomic_load_explicit(&h->sum_ns, memory_order_relaxed) / 1e9);
    bf_metrics_printf(b, "%s_count%s%s%s %llu\n", name, lb, labels, le, (unsigned long long)cum);
}

#define LD(x) ((unsigned long long)atomic_load_explicit(&(x), memory_order_relaxed))

static void counter(struct bf_metrics_buf *b, const char *name, const char *help,
                    unsigned long long v)
{
    bf_metrics_header(b, name, "counter", help);
    bf_metrics_printf(b, "%s %llu\n", name, v);
}

static void gauge(struct bf_metrics_buf *b, const char *name, const char *help, long long v)
{
    bf_metrics_header(b, name, "gauge", help);
    bf_metrics_printf(b, "%s %lld\n", name, v);
}

static void render_clusters(const struct bf_shm *s, struct bf_metrics_buf *b)
{
    uint32_t n = atomic_load_explicit(&s->needs->n_clusters, memory_order_acquire);
    if (n > s->max_clusters)
        n = s->max_clusters;
    struct bf_cluster_rec *r = calloc(n ? n : 1, sizeof *r);
    bool *ok = calloc(n ? n : 1, sizeof *ok);
    if (!r || !ok) {
        free(r);
        free(ok);
        b->oom = true;
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

int bf_metrics_render(const struct bf_shm *s, struct bf_metrics_buf *b)
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
          (long long)atomic_load_explicit(&ss->active_sessions, memory_order_relaxed));
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
    gauge(b, "bigfleet_shard_coordinator_term", "Coordinator term high-water mark.",
          (long long)atomic_load_explicit(&ss->coordinator_term, memory_order_relaxed));
    bf_metrics_header(b, "bigfleet_shard_session_rollup_ingest_seconds", "histogram",
                      "Time to decode, convert and publish one rollup.");
    bf_metrics_hist(b, "bigfleet_shard_session_rollup_ingest_seconds", "", &ss->rollup_ingest,
                    0.0001, 2, 20);
    gauge(b, "bigfleet_shard_needs_rows", "Need rows live across clusters.",
          (long long)atomic_load_explicit(&s->needs->rows_used, memory_order_relaxed));
    gauge(b, "bigfleet_shard_ready", "1 once the first provider reconcile succeeded (/readyz).",
          (long long)atomic_load_explicit(&st->first_reconcile_done, memory_order_relaxed));
    render_clusters(s, b);
    return b->oom ? -ENOMEM : 0;
}
