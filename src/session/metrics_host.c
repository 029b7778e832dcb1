/*
 * metrics_host.c — the appliance-as-a-host series of /metrics
 * (docs/metrics.md "Host, configuration and RPC latency"): build info,
 * resource use per process, outbound RPC latency by method and status,
 * configuration reloads and the live settings, least-privilege and TLS
 * facts, health and reflection calls.
 *
 * Everything is read from st->host (one writer per field, shm_layout.h)
 * with relaxed loads, like the rest of bf_metrics_render(): a scrape never
 * blocks a writer. Latency histograms are rendered only for the
 * (method, code) pairs that have observations, so an idle appliance does
 * not export 100 empty histograms; the provider series add the
 * reconciler's (List, Get) and the executor's (Create, Configure, Drain,
 * Delete, Get) blocks.
 */
#include <stdio.h>
#include <string.h>

#include "bigfleet/config.h"
#include "bigfleet/log.h"
#include "bigfleet/metrics.h"
#include "bigfleet/net.h"
#include "bigfleet/process.h"
#include "bigfleet/provider.h"
#include "build_info.h"

#define LD(x) ((unsigned long long)BF_STAT_GET(x))

static void one(struct bf_strbuf *b, const char *name, const char *type, const char *help, double v)
{
    bf_metrics_header(b, name, type, help);
    bf_metrics_printf(b, "%s ", name);
    bf_metrics_float(b, v);
    bf_metrics_printf(b, "\n");
}

static void sum_hist(struct bf_hist *out, const struct bf_hist *a, const struct bf_hist *c)
{
    for (int i = 0; i < BF_HIST_MAX_BUCKETS; i++)
        BF_STAT_SET(out->bucket[i],
                    BF_STAT_GET(a->bucket[i]) + (c ? BF_STAT_GET(c->bucket[i]) : 0));
    BF_STAT_SET(out->count, LD(a->count) + (c ? LD(c->count) : 0));
    BF_STAT_SET(out->sum_ns, LD(a->sum_ns) + (c ? LD(c->sum_ns) : 0));
}

static void render_usage(const struct bf_state_main *st, struct bf_strbuf *b)
{
    static const struct {
        const char *name, *type, *help;
    } fam[3] = {
        {"bigfleet_appliance_process_cpu_seconds_total", "counter",
         "User and system CPU time of the role's processes, previous instances included "
         "(sampled by the supervisor about once a second)."},
        {"bigfleet_appliance_process_resident_memory_bytes", "gauge",
         "Resident set size of the role's current process."},
        {"bigfleet_appliance_process_open_fds", "gauge",
         "Open file descriptors of the role's current process."},
    };
    for (int f = 0; f < 3; f++) {
        bf_metrics_header(b, fam[f].name, fam[f].type, fam[f].help);
        for (int r = 0; r < BF_ROLE_COUNT; r++) {
            const struct bf_proc_usage *u = &st->host.usage[r];
            if (r != BF_ROLE_SUPERVISOR && !BF_STAT_GET(st->proc[r].started_ns))
                continue; /* the embedded provider when a real one is used */
            if (!LD(u->cpu_ns) && !LD(u->rss_bytes) && !LD(u->cpu_ns_dead))
                continue; /* not sampled yet */
            char lab[40];
            snprintf(lab, sizeof lab, "role=\"%s\"", bf_role_name(r));
            bf_metrics_printf(b, "%s{%s} ", fam[f].name, lab);
            if (f == 0)
                bf_metrics_float(b, (double)(LD(u->cpu_ns) + LD(u->cpu_ns_dead)) / 1e9);
            else if (f == 1)
                bf_metrics_printf(b, "%llu", LD(u->rss_bytes));
            else
                bf_metrics_printf(b, "%u", BF_STAT_GET(u->open_fds));
            bf_metrics_printf(b, "\n");
        }
    }
}

static void render_rpc(const struct bf_state_main *st, struct bf_strbuf *b)
{
    const char *name = "bigfleet_appliance_provider_rpc_duration_seconds";
    bf_metrics_header(b, name, "histogram",
                      "CapacityProvider RPCs by method and final gRPC status, call to reply "
                      "(reconciler and executor), exp(0.001, 2, 16).");
    for (int m = 0; m < BF_RPC_PROVIDER_METHODS; m++)
        for (int c = 0; c < BF_RPC_CODES; c++) {
            struct bf_hist h;
            sum_hist(&h, &st->host.provider_rpc[0].h[m][c], &st->host.provider_rpc[1].h[m][c]);
            if (!LD(h.count))
                continue;
            char lab[96];
            snprintf(lab, sizeof lab, "method=\"%s\",code=\"%s\"", bf_prov_rpc_name(m),
                     bf_net_code_name(c));
            bf_metrics_hist(b, name, lab, &h, 0.001, 2, 16);
        }
    name = "bigfleet_appliance_coordinator_rpc_duration_seconds";
    bf_metrics_header(b, name, "histogram",
                      "Coordinator RPCs by method and final gRPC status, call to reply "
                      "(session), exp(0.001, 2, 16).");
    for (int c = 0; c < BF_RPC_CODES; c++) {
        const struct bf_hist *h = &st->host.coordinator_rpc[0][c];
        if (!LD(h->count))
            continue;
        char lab[96];
        snprintf(lab, sizeof lab, "method=\"ReportShard\",code=\"%s\"", bf_net_code_name(c));
        bf_metrics_hist(b, name, lab, h, 0.001, 2, 16);
    }
}

static void render_config(const struct bf_shm *s, struct bf_strbuf *b)
{
    const struct bf_state_main *st = s->st;
    const struct bf_host_state *h = &st->host;
    const char *n = "bigfleet_appliance_config_reloads_total";
    bf_metrics_header(b, n, "counter",
                      "SIGHUP configuration reloads: applied (the configuration was valid), failed "
                      "(invalid: nothing changed).");
    bf_metrics_printf(b, "%s{result=\"applied\"} %llu\n%s{result=\"failed\"} %llu\n", n,
                      LD(h->reloads), n, LD(h->reload_failures));
    n = "bigfleet_appliance_config_reload_changes_total";
    bf_metrics_header(b, n, "counter",
                      "Settings a reload found changed: applied live, or refused because they need "
                      "a restart.");
    bf_metrics_printf(b, "%s{result=\"applied\"} %llu\n%s{result=\"needs_restart\"} %llu\n", n,
                      LD(h->reload_changes_applied), n, LD(h->reload_changes_rejected));
    int64_t last = BF_STAT_GET(h->last_reload_ns);
    one(b, "bigfleet_appliance_config_last_reload_success", "gauge",
        "0 when the last SIGHUP's configuration was invalid (nothing changed); 1 otherwise, "
        "also before any reload.",
        last ? (double)BF_STAT_GET(h->last_reload_ok) : 1.0);
    if (last)
        one(b, "bigfleet_appliance_config_last_reload_timestamp_seconds", "gauge",
            "Unix time of the last SIGHUP (absent before the first).", (double)last / 1e9);
    struct bf_live_values v;
    if (bf_live_read(s, &v) == 0) {
        one(b, "bigfleet_appliance_reclaim_cap_fraction", "gauge",
            "Rail 1 in force (--reclaim-cap-fraction; 0 = off).", v.reclaim_cap_fraction);
        one(b, "bigfleet_appliance_max_actions_per_cycle", "gauge",
            "Actions cap in force (--max-actions-per-cycle; 0 = unlimited).",
            (double)v.max_actions_per_cycle);
        n = "bigfleet_appliance_log_level";
        bf_metrics_header(b, n, "gauge", "The log level in force (1 for the current one).");
        static const char *lv[] = {"debug", "info", "warn", "error"};
        for (int i = 0; i < 4; i++)
            bf_metrics_printf(b, "%s{level=\"%s\"} %d\n", n, lv[i], v.log_level == i);
        one(b, "bigfleet_appliance_tls_enabled", "gauge",
            "1 when every gRPC edge uses mutual TLS (--tls-cert/--tls-key/--tls-ca); 0 is "
            "plaintext h2c.",
            v.tls_cert[0] && v.tls_key[0] && v.tls_ca[0] ? 1.0 : 0.0);
    }
    one(b, "bigfleet_appliance_children_run_as_root", "gauge",
        "1 when the child processes run as root (--allow-root).",
        BF_STAT_GET(h->children_uid) == 0 ? 1.0 : 0.0);
    one(b, "bigfleet_appliance_embedded_provider", "gauge",
        "1 when the shard provisions from the embedded simulated provider (no --provider-addr): "
        "not a production set-up.",
        (double)BF_STAT_GET(h->embedded_provider));
    one(b, "bigfleet_appliance_systemd_watchdog_pings_total", "counter",
        "WATCHDOG=1 notifications sent by the supervisor (WatchdogSec=).",
        (double)LD(h->watchdog_pings));
    one(b, "bigfleet_appliance_actions_held_at_dispatch_total", "counter",
        "Actions queued before the kill switch was turned on and held by the executor (audited "
        "\"suppressed\", not executed).",
        (double)LD(h->actions_held_at_dispatch));
}

void bf_metrics_render_host(const struct bf_shm *s, struct bf_strbuf *b)
{
    const struct bf_state_main *st = s->st;
    bf_metrics_header(b, "bigfleet_appliance_build_info", "gauge",
                      "Always 1; the labels name the build.");
    bf_metrics_printf(b,
                      "bigfleet_appliance_build_info{version=\"%s\",commit=\"%s\","
                      "shm_layout_version=\"%u\"} 1\n",
                      BF_VERSION, BF_BUILD_COMMIT, (unsigned)BF_SHM_LAYOUT_VERSION);
    render_usage(st, b);
    render_rpc(st, b);
    render_config(s, b);
    const struct bf_host_state *h = &st->host;
    one(b, "bigfleet_shard_grpc_health_checks_total", "counter",
        "grpc.health.v1.Health/Check calls.", (double)LD(h->health_checks));
    one(b, "bigfleet_shard_grpc_health_watches_total", "counter",
        "grpc.health.v1.Health/Watch calls started.", (double)LD(h->health_watches));
    one(b, "bigfleet_shard_grpc_reflection_requests_total", "counter",
        "Server reflection requests (v1 and v1alpha).", (double)LD(h->reflection_calls));
}
