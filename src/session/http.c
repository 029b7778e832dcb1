/*
 * http.c — the probes server on --metrics-addr ("0" disables it):
 * /healthz 200 always (the HTTP server answers), /readyz 200 once the
 * first provider reconcile succeeded (latched by the reconciler in
 * st->first_reconcile_done) else 503, /metrics the Prometheus text of
 * bf_metrics_render plus this process's own transport counters. Neither
 * probe depends on the coordinator (seed 000 §1, reference/shard.md §1.2
 * item 11).
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "bigfleet/util.h"

#include "bigfleet/log.h"
#include "bigfleet/metrics.h"
#include "session_internal.h"

/* The transport counters struct bf_net_stats has beyond the ones above. */
static void net_more(struct bf_strbuf *b, const char *prefix, const char *what,
                     const struct bf_net_stats *ns, bool grpc)
{
    const struct {
        const char *suffix, *type, *help;
        uint64_t v;
        bool grpc_only;
        bool http_only;
    } m[] = {
        {"accept_errors_total", "counter", "accept() failures (EMFILE, ...)", ns->accept_errors,
         false},
        {"bad_messages_total", "counter",
         "truncated or compressed gRPC messages and bad request headers", ns->bad_messages, true},
        {"keepalive_timeouts_total", "counter", "connections closed after an unanswered PING",
         ns->keepalive_timeouts, true},
        {"streams_started_total", "counter", "calls received", ns->streams_started, true},
        {"streams_open", "gauge", "calls in progress", ns->streams_open, true},
        {"messages_received_total", "counter", "gRPC messages received", ns->msgs_in, true},
        {"messages_sent_total", "counter", "gRPC messages queued for sending", ns->msgs_out, true},
        {"received_bytes_total", "counter", "bytes read from the wire", ns->bytes_in, false},
        {"sent_bytes_total", "counter", "bytes written to the wire", ns->bytes_out, false},
        {"requests_total", "counter", "HTTP requests answered", ns->http_requests, false},
        {"connections_accepted_total", "counter", "connections accepted", ns->conns_accepted,
         false},
        {"connections_open", "gauge", "connections open", ns->conns_open, false},
        {"connections_peer_limited_total", "counter",
         "connections refused at accept: --max-conns-per-peer open from that address",
         ns->conns_peer_limited, true},
        {"connections_identity_limited_total", "counter",
         "connections closed after the TLS handshake: --max-conns-per-identity open",
         ns->conns_identity_limited, true},
        {"connections_idle_closed_total", "counter",
         "connections closed after 5 min without a call", ns->conns_idle_closed, true},
        {"inbound_connection_refusals_total", "counter",
         "messages refused (RESOURCE_EXHAUSTED): their connection held its share of the inbound "
         "budget",
         ns->inbound_conn_refusals, true},
        {"stalled_messages_total", "counter",
         "partial messages that stopped arriving (RESOURCE_EXHAUSTED)", ns->stalled_messages, true},
        {"first_message_timeouts_total", "counter",
         "calls without their first message (a Session's Hello) in time (DEADLINE_EXCEEDED)",
         ns->first_message_timeouts, true},
        {"idle_stream_timeouts_total", "counter",
         "streams without an inbound message for 10 min (DEADLINE_EXCEEDED)",
         ns->idle_stream_timeouts, true},
        {"header_list_refusals_total", "counter",
         "streams reset: decoded request headers over 64 KiB", ns->header_list_refusals, true},
        {"connections_evicted_total", "counter",
         "connections closed to admit a new one when every slot was taken (slowest request head "
         "first)",
         ns->conns_evicted, false, true},
        {"request_head_timeouts_total", "counter",
         "request heads not complete within 5 s of their first byte (408)", ns->head_timeouts,
         false, true},
    };
    char name[128], help[256];
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        if ((m[i].grpc_only && !grpc) || (m[i].http_only && grpc))
            continue;
        if (grpc && (strcmp(m[i].suffix, "requests_total") == 0 ||
                     strcmp(m[i].suffix, "connections_accepted_total") == 0 ||
                     strcmp(m[i].suffix, "connections_open") == 0))
            continue; /* the gRPC ones are rendered above under their first names */
        snprintf(name, sizeof name, "%s_%s", prefix, m[i].suffix);
        snprintf(help, sizeof help, "%s: %s.", what, m[i].help);
        bf_metrics_header(b, name, m[i].type, help);
        bf_metrics_printf(b, "%s %llu\n", name, (unsigned long long)m[i].v);
    }
    if (!grpc)
        return;
    snprintf(name, sizeof name, "%s_flood_closes_total", prefix);
    snprintf(help, sizeof help,
             "%s: connections closed as HTTP/2 floods (GOAWAY ENHANCE_YOUR_CALM), by reason.",
             what);
    bf_metrics_header(b, name, "counter", help);
    for (int r = 1; r < BF_NET_FLOOD_COUNT; r++)
        bf_metrics_printf(b, "%s{reason=\"%s\"} %llu\n", name, bf_net_flood_name(r),
                          (unsigned long long)ns->flood_closes[r]);
    snprintf(name, sizeof name, "%s_calls_finished_total", prefix);
    snprintf(help, sizeof help, "%s: calls finished, by final gRPC status.", what);
    bf_metrics_header(b, name, "counter", help);
    for (int c = 0; c < BF_NET_CODE_COUNT; c++)
        bf_metrics_printf(b, "%s{code=\"%s\"} %llu\n", name, bf_net_code_name(c),
                          (unsigned long long)ns->calls_by_code[c]);
}

static void local_metrics(struct ss *ss, struct bf_strbuf *b)
{
    struct bf_net_stats ns;
    if (!ss->srv)
        return;
    bf_net_server_stats(ss->srv, &ns);
    static const struct {
        const char *name, *help;
        size_t off;
    } c[] = {
        {"bigfleet_shard_grpc_connections_accepted_total", "gRPC connections accepted.",
         offsetof(struct bf_net_stats, conns_accepted)},
        {"bigfleet_shard_grpc_connections_rejected_total", "gRPC connections refused at accept.",
         offsetof(struct bf_net_stats, conns_rejected)},
        {"bigfleet_shard_grpc_handshake_failures_total", "TLS handshakes that failed.",
         offsetof(struct bf_net_stats, handshake_failures)},
        {"bigfleet_shard_grpc_protocol_errors_total", "HTTP/2 protocol errors.",
         offsetof(struct bf_net_stats, protocol_errors)},
        {"bigfleet_shard_grpc_oversize_messages_total",
         "Messages over the 256 MiB receive limit (RESOURCE_EXHAUSTED).",
         offsetof(struct bf_net_stats, oversize_messages)},
        {"bigfleet_shard_grpc_inbound_budget_refusals_total",
         "Messages refused (RESOURCE_EXHAUSTED) because partially received messages of all "
         "calls held the server's inbound buffer budget.",
         offsetof(struct bf_net_stats, inbound_budget_refusals)},
        {"bigfleet_shard_grpc_identity_rejected_total",
         "Calls refused: mTLS peer without exactly one bigfleet:// SAN.",
         offsetof(struct bf_net_stats, identity_rejected)},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        bf_metrics_header(b, c[i].name, "counter", c[i].help);
        bf_metrics_printf(b, "%s %llu\n", c[i].name,
                          (unsigned long long)*(const uint64_t *)((const char *)&ns + c[i].off));
    }
    bf_metrics_header(b, "bigfleet_shard_grpc_connections_open", "gauge", "gRPC connections open.");
    bf_metrics_printf(b, "bigfleet_shard_grpc_connections_open %llu\n",
                      (unsigned long long)ns.conns_open);
    bf_metrics_header(b, "bigfleet_shard_grpc_inbound_buffered_bytes", "gauge",
                      "Bytes held by partially received gRPC messages (all calls).");
    bf_metrics_printf(b, "bigfleet_shard_grpc_inbound_buffered_bytes %llu\n",
                      (unsigned long long)ns.inbound_buffered_bytes);
    bf_metrics_header(b, "bigfleet_shard_grpc_inbound_spare_bytes", "gauge",
                      "The idle recycled assembly buffer, charged to the inbound buffer budget "
                      "beside the partially received messages.");
    bf_metrics_printf(b, "bigfleet_shard_grpc_inbound_spare_bytes %llu\n",
                      (unsigned long long)ns.inbound_spare_bytes);
    bf_metrics_header(b, "bigfleet_shard_grpc_inbound_spare_releases_total", "counter",
                      "Idle recycled assembly buffers released: unused for 5-10 s, or to make "
                      "room in the inbound buffer budget for a message.");
    bf_metrics_printf(b, "bigfleet_shard_grpc_inbound_spare_releases_total %llu\n",
                      (unsigned long long)ns.inbound_spare_releases);
    net_more(b, "bigfleet_shard_grpc", "gRPC server (--listen)", &ns, true);
    if (ss->http) {
        struct bf_net_stats hs;
        bf_net_http_server_stats(ss->http, &hs);
        net_more(b, "bigfleet_appliance_http", "HTTP probes server (--metrics-addr)", &hs, false);
    }
    bf_metrics_header(b, "bigfleet_appliance_session_loop_recv_buffer_exhausted_total", "counter",
                      "Times the session's io_uring loop ran out of provided receive buffers.");
    bf_metrics_printf(b, "bigfleet_appliance_session_loop_recv_buffer_exhausted_total %llu\n",
                      (unsigned long long)bf_net_loop_enobufs(ss->loop));
    const struct local_counters *l = &ss->lc;
    struct {
        const char *name, *help;
        uint64_t v;
    } x[] = {
        {"bigfleet_shard_session_slow_readers_closed_total",
         "Streams reset because the operator stopped reading (outbox bound or stall).",
         l->slow_closed},
        {"bigfleet_shard_session_bad_frames_total", "Malformed or unknown OperatorMessages.",
         l->frames_bad},
        {"bigfleet_shard_session_oversize_frames_total",
         "Hello or ReclaimAck frames over their 64 KiB limit, or OperatorMessages of more than "
         "1024 top-level fields (the stream is ended).",
         l->frames_oversize},
        {"bigfleet_shard_session_unknown_fields_dropped_total",
         "Unknown protobuf fields counted and dropped (never kept) while decoding small frames.",
         l->unknown_fields},
        {"bigfleet_shard_session_rollups_shed_total",
         "Rollups not queued: queued rollups were over their memory budget.", l->rollups_shed},
        {"bigfleet_shard_session_bootstrap_no_session_total",
         "Bootstrap requests answered NO_SESSION.", l->boot_no_session},
        {"bigfleet_shard_session_reclaim_no_session_total",
         "Reclaims for a cluster without a session (drain proceeds without the operator).",
         l->reclaim_no_session},
        {"bigfleet_shard_session_resync_passes_total",
         "Inventory scans that resynced connecting operators.", l->resync_passes},
        {"bigfleet_shard_session_resync_updates_total", "NodeStateUpdates queued by resync scans.",
         l->resync_updates},
    };
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++) {
        bf_metrics_header(b, x[i].name, "counter", x[i].help);
        bf_metrics_printf(b, "%s %llu\n", x[i].name, (unsigned long long)x[i].v);
    }
    struct ingest_counters ic;
    bf_ingest_read_counters(ss->ig, &ic);
    struct {
        const char *name, *help;
        uint64_t v;
    } y[] = {
        {"bigfleet_shard_session_rollup_timestamps_clamped_total",
         "Rollups whose timestamp_unix_nanos was in the future or over 60 s old: the receive time "
         "orders their Needs instead.",
         ic.timestamps_clamped},
        {"bigfleet_shard_session_priorities_clamped_total",
         "Needs whose priority was above --max-priority and was clamped to it.",
         ic.priorities_clamped},
        {"bigfleet_shard_session_need_unknown_fields_dropped_total",
         "Unknown protobuf fields counted and dropped while decoding CapacityNeeds.",
         ic.unknown_fields},
        {"bigfleet_shard_session_rollups_unchanged_total",
         "Accepted rollups that repeated the cluster's previous accepted rollup apart from its "
         "timestamp: their published Need rows were reused (with the new arrival) instead of "
         "decoding every Need again.",
         ic.rollups_unchanged},
        {"bigfleet_shard_session_rollup_needs_reused_total",
         "CapacityNeeds of changed rollups whose bytes repeated a Need of the cluster's previous "
         "accepted rollup: their published row was reused instead of converting them again.",
         ic.needs_reused},
        {"bigfleet_shard_session_rollups_inline_total",
         "Rollups small enough (256 KiB) to be ingested on the event loop while the ingest "
         "lane was idle, instead of being handed to the ingest thread.",
         ic.rollups_inline},
        {"bigfleet_shard_session_resource_names_registered_total",
         "Resource names added to the shard-wide dimension table for operators' rollups.",
         ic.dims_registered},
    };
    for (size_t i = 0; i < sizeof y / sizeof y[0]; i++) {
        bf_metrics_header(b, y[i].name, "counter", y[i].help);
        bf_metrics_printf(b, "%s %llu\n", y[i].name, (unsigned long long)y[i].v);
    }
    static const char *quotas[4] = {"needs", "groups", "strings", "dims"};
    bf_metrics_header(b, "bigfleet_shard_session_rollups_over_quota_total", "counter",
                      "Rollups rejected by a per-cluster quota (--cluster-max-*), by quota.");
    for (int i = 0; i < 4; i++)
        bf_metrics_printf(b, "bigfleet_shard_session_rollups_over_quota_total{quota=\"%s\"} %llu\n",
                          quotas[i], (unsigned long long)ic.over_quota[i]);
    bf_metrics_header(b, "bigfleet_appliance_insecure_plaintext", "gauge",
                      "1 when Shard/Session and ShardRead are served without TLS (--listen "
                      "without --tls-cert/--tls-key/--tls-ca), else 0.");
    bf_metrics_printf(b, "bigfleet_appliance_insecure_plaintext %d\n",
                      bf_config_tls(ss->cfg) ? 0 : 1);
    bf_metrics_header(
        b, "bigfleet_shard_coordinator_assigned_domains", "gauge",
        "Topology domains assigned to this shard by the coordinator (persisted in LMDB).");
    bf_metrics_printf(b, "bigfleet_shard_coordinator_assigned_domains %u\n", bf_coord_domains(ss));
    bf_metrics_header(b, "bigfleet_shard_session_outbox_bytes", "gauge",
                      "Bytes held in session outboxes (all sessions).");
    bf_metrics_printf(b, "bigfleet_shard_session_outbox_bytes %zu\n", ss->outbox_total);
    bf_metrics_header(b, "bigfleet_appliance_cycle_interval_seconds", "gauge",
                      "--cycle-interval (a cycle also runs as soon as demand changes).");
    bf_metrics_printf(b, "bigfleet_appliance_cycle_interval_seconds ");
    bf_metrics_float(b, (double)ss->cfg->cycle_interval_ns / 1e9);
    bf_metrics_printf(b, "\n");
    bf_metrics_header(b, "bigfleet_shard_grpc_health_watches_open", "gauge",
                      "grpc.health.v1.Health/Watch streams open.");
    bf_metrics_printf(b, "bigfleet_shard_grpc_health_watches_open %u\n",
                      bf_session_health_watches_open());
    bf_session_inspect_metrics(b);
}

static void handler(const struct bf_net_http_request *req, struct bf_net_http_response *resp,
                    void *arg)
{
    struct ss *ss = arg;
    if (strcmp(req->path, "/healthz") == 0) {
        bf_net_http_printf(resp, "ok\n");
    } else if (strcmp(req->path, "/readyz") == 0) {
        if (BF_SHARED_LOAD(ss->shm->st->first_reconcile_done)) {
            bf_net_http_printf(resp, "ok\n");
        } else {
            bf_net_http_set_status(resp, 503, NULL);
            bf_net_http_printf(resp, "first provider reconcile not yet complete\n");
        }
    } else if (strcmp(req->path, "/metrics") == 0) {
        struct bf_strbuf b = {0};
        bf_metrics_render(ss->shm, &b);
        local_metrics(ss, &b);
        if (b.failed) {
            bf_net_http_set_status(resp, 500, NULL);
            bf_net_http_printf(resp, "out of memory rendering metrics\n");
        } else {
            bf_net_http_set_status(resp, 200, "text/plain; version=0.0.4; charset=utf-8");
            bf_net_http_append(resp, b.p, b.len);
        }
        bf_sb_free(&b);
    } else {
        bf_net_http_set_status(resp, 404, NULL);
        bf_net_http_printf(resp, "not found\n");
    }
}

int bf_session_http_start(struct ss *ss)
{
    const char *addr = ss->cfg->metrics_addr;
    if (!addr[0] || strcmp(addr, "0") == 0) {
        BF_INFO("HTTP probes server disabled", "metrics_addr=\"%s\"", addr);
        return 0;
    }
    struct bf_net_http_server_opts o = {.addr = addr,
                                        .handler = handler,
                                        .arg = ss,
                                        .head_timeout_ns = ss->cfg->http_head_timeout_ns,
                                        .listen_fd =
                                            BF_SHARED_LOAD(ss->shm->st->host.http_listen_fd)};
    int rc;
    int64_t until = bf_mono_ns() + 5 * BF_NS_PER_SEC; /* see start_grpc() */
    while ((rc = bf_net_http_server_new(ss->loop, &o, &ss->http)) == -EADDRINUSE &&
           bf_mono_ns() < until && !bf_child_stopping())
        usleep(50 * 1000);
    if (rc)
        BF_ERROR("cannot start the HTTP probes server", "addr=%s error=\"%s\"", addr,
                 strerror(-rc));
    return rc;
}
