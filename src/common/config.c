/*
 * config.c — the flag table of bigfleet-shardd and its parser.
 *
 * One table: name, type, field offset, default (as the text --help shows and
 * the parser applies), bounds and help. Defaults are applied by parsing the
 * default text with the same code as a flag value, so --help can never
 * disagree with behaviour.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bigfleet/config.h"
#include "bigfleet/log.h"
#include "bigfleet/util.h"

enum opt_type { T_STR, T_BOOL, T_INT, T_U32, T_DOUBLE, T_DURATION };

struct opt {
    const char *name;
    enum opt_type type;
    size_t off;
    size_t size;
    const char *def;
    double min, max;
    const char *help;
    bool hidden;
};

#define F(field) offsetof(struct bf_config, field), sizeof(((struct bf_config *)0)->field)

static const struct opt opts[] = {
    {"id", T_STR, F(id), "shard-0", 0, 0,
     "stable shard id: names the shared segments (/dev/shm/bigfleet.<id>.*), the fencing "
     "token and the coordinator reports"},
    {"listen", T_STR, F(listen), "127.0.0.1:7780", 0, 0,
     "gRPC address for Shard/Session and ShardRead (host:port, or :port for every interface); "
     "plaintext is refused off loopback unless --insecure-plaintext"},
    {"metrics-addr", T_STR, F(metrics_addr), ":8780", 0, 0,
     "HTTP address for /metrics, /healthz, /readyz; \"0\" disables the HTTP server"},
    {"data-dir", T_STR, F(data_dir), "./data", 0, 0,
     "state directory (LMDB: shard epoch, coordinator term); alias --state-dir"},
    {"state-dir", T_STR, F(data_dir), NULL, 0, 0, "alias of --data-dir"},
    {"provider-addr", T_STR, F(provider_addr), "", 0, 0,
     "host:port of a CapacityProvider gRPC service; empty starts the embedded "
     "bigfleet-simprovider child"},
    {"coordinator-addr", T_STR, F(coordinator_addr), "", 0, 0,
     "coordinator gRPC address; empty = no coordinator client (the shard runs identically)"},
    {"advertise-addr", T_STR, F(advertise_addr), "", 0, 0,
     "address reported to the coordinator; empty = --listen"},
    {"coordinator-heartbeat-interval", T_DURATION, F(coordinator_heartbeat_ns), "10s", 0.1, 86400,
     "ReportShard period"},
    {"tls-cert", T_STR, F(tls_cert), "", 0, 0,
     "PEM certificate; with --tls-key and --tls-ca: mTLS (TLS 1.3) on every gRPC edge"},
    {"tls-key", T_STR, F(tls_key), "", 0, 0, "PEM private key for --tls-cert"},
    {"tls-ca", T_STR, F(tls_ca), "", 0, 0,
     "PEM CA bundle: clients must present a certificate it signed (bigfleet:// URI SAN)"},
    {"insecure-plaintext", T_BOOL, F(insecure_plaintext), "false", 0, 0,
     "serve gRPC without TLS on a --listen address that is not loopback: anyone who reaches it "
     "can claim any cluster_id and read every cluster's Needs"},
    {"cycle-interval", T_DURATION, F(cycle_interval_ns), "10s", 0.001, 86400,
     "decision cycle period (an accepted rollup also wakes a cycle)"},
    {"max-actions-per-cycle", T_INT, F(max_actions_per_cycle), "0", 0, 1e9,
     "cap on actions handed to execution per cycle (0 = unlimited); the tail is deferred"},
    {"actuation-paused", T_BOOL, F(actuation_paused), "false", 0, 0,
     "kill switch (ADR-0046 rail 3): cycles run in full, nothing executes"},
    {"reclaim-cap-fraction", T_DOUBLE, F(reclaim_cap_fraction), "0.05", 0, 1,
     "rail 1: at most max(1, floor(f x Configured)) reclaims per cluster per cycle; 0 disables"},
    {"empty-rollup-guard", T_BOOL, F(empty_rollup_guard), "true", 0, 0,
     "rail 2: hold a rollup keeping < 10% of >= 10 prior rows until 3 confirm it"},
    {"dry-run", T_BOOL, F(dry_run), "false", 0, 0,
     "shadow mode: decided actions are logged and audited, never executed"},
    {"audit-log", T_STR, F(audit_log), "", 0, 0,
     "path of the JSONL decision audit log (one record per executed/suppressed/dry-run "
     "action); empty = off"},
    {"execute-concurrency", T_INT, F(execute_concurrency), "128", 1, 65536,
     "actions in flight at once (concurrent provider RPCs)"},
    {"execute-timeout", T_DURATION, F(execute_timeout_ns), "30s", 0.001, 86400,
     "deadline of one action, independent of the cycle"},
    {"bootstrap-timeout", T_DURATION, F(bootstrap_timeout_ns), "30s", 0.001, 86400,
     "deadline for the operator's bootstrap blob"},
    {"reconcile-timeout", T_DURATION, F(reconcile_timeout_ns), "10s", 0.001, 86400,
     "deadline of one provider reconcile pass (the cycle waits at most this long)"},
    {"local-bootstrap", T_BOOL, F(local_bootstrap), "false", 0, 0,
     "make bootstrap blobs locally (a stub naming the cluster) instead of asking the operator"},
    {"incremental-reconcile", T_BOOL, F(incremental_reconcile), "false", 0, 0,
     "use the provider's since_revision cursor (deltas only; no removals)"},
    {"available-capacity-interval", T_DURATION, F(available_capacity_interval_ns), "5s", 0, 86400,
     "minimum gap between AvailableCapacityUpdate emits per (cluster, fingerprint)"},
    {"metrics-warmup-cycles", T_INT, F(metrics_warmup_cycles), "0", 0, 1e9,
     "skip cycle histogram observations for the first N cycles"},
    {"max-machines", T_U32, F(max_machines), "600000", 16, 16777216,
     "inventory capacity (machine records in the shared segment)"},
    {"max-needs", T_U32, F(max_needs), "65536", 16, 16777216, "Need rows across all clusters"},
    {"max-clusters", T_U32, F(max_clusters), "4096", 1, 1048576, "operator clusters"},
    {"grpc-inbound-budget-mib", T_U32, F(grpc_inbound_budget_mib), "1024", 256, 1048576,
     "MiB all gRPC calls on --listen may hold in partially received messages; a message "
     "that would exceed it is refused with RESOURCE_EXHAUSTED"},
    {"max-rollup-mib", T_U32, F(max_rollup_mib), "0", 0, 256,
     "largest Shard/Session message (a rollup) in MiB; 0 = 2 KiB per --max-needs row, at least "
     "4, at most 256"},
    {"max-conns-per-peer", T_U32, F(max_conns_per_peer), "256", 0, 1048576,
     "open gRPC connections from one IP address (0 = unlimited); more are closed at accept"},
    {"max-conns-per-identity", T_U32, F(max_conns_per_identity), "16", 0, 1048576,
     "open gRPC connections per mTLS client identity (0 = unlimited)"},
    {"cluster-max-needs", T_U32, F(cluster_max_needs), "0", 0, 16777216,
     "Need rows one cluster may hold; 0 = a quarter of --max-needs (at least 16); a rollup "
     "over it is rejected"},
    {"cluster-max-groups", T_U32, F(cluster_max_groups), "1024", 0, 16777216,
     "distinct co-location groups in one cluster's rollup (0 = unlimited)"},
    {"cluster-max-string-kib", T_U32, F(cluster_max_string_kib), "0", 0, 16777216,
     "KiB of the shared string table one cluster's rollups may add (while the session runs); "
     "0 = 1/16 of the string arena"},
    {"cluster-max-new-dims", T_U32, F(cluster_max_new_dims), "2", 0, 8,
     "resource names one cluster may add to the shard-wide dimension table beyond the "
     "reserved Kubernetes ones"},
    {"max-priority", T_INT, F(max_priority), "1000000000", -2147483648.0, 2147483647.0,
     "highest Need priority taken from an operator; higher ones are clamped to it (default: "
     "Kubernetes' highest user-definable PriorityClass value)"},
    {"grpc-handshake-timeout", T_DURATION, F(grpc_handshake_timeout_ns), "10s", 0.01, 3600,
     "a gRPC connection's TLS handshake, HTTP/2 preface and first SETTINGS must be done within "
     "this of the accept"},
    {"grpc-stall-timeout", T_DURATION, F(grpc_stall_timeout_ns), "20s", 0.01, 3600,
     "a partially received gRPC message that gets no byte for this long (or takes longer than "
     "this plus 1 s per 64 KiB) ends its call: partial messages hold memory"},
    {"session-hello-timeout", T_DURATION, F(session_hello_timeout_ns), "10s", 0.01, 3600,
     "a Shard/Session stream must send its Hello (an InspectNeeds call its request) within this"},
    {"http-head-timeout", T_DURATION, F(http_head_timeout_ns), "5s", 0.01, 3600,
     "an HTTP/1.1 request head on --metrics-addr must be complete this long after its first "
     "byte (not extended by later bytes)"},
    {"sim-listen", T_STR, F(sim_listen), "127.0.0.1:7781", 0, 0,
     "listen address of the embedded simulated provider"},
    {"sim-args", T_STR, F(sim_args), "", 0, 0,
     "extra arguments for the embedded bigfleet-simprovider (space separated)"},
    {"crash-loop-restarts", T_INT, F(crash_loop_restarts), "5", 1, 1000,
     "restarts of one child within --crash-loop-window that trigger a full re-initialisation"},
    {"crash-loop-window", T_DURATION, F(crash_loop_window_ns), "30s", 1, 86400,
     "window for --crash-loop-restarts"},
    {"log-level", T_STR, F(log_level), "info", 0, 0, "debug, info, warn or error"},
    {"role", T_STR, F(role), "supervisor", 0, 0, "internal: child role", true},
};
#define NOPTS (sizeof opts / sizeof opts[0])

static int set_value(struct bf_config *c, const struct opt *o, const char *v, char *err,
                     size_t errlen)
{
    void *p = (char *)c + o->off;
    char *end;
    switch (o->type) {
    case T_STR:
        if (strlen(v) >= o->size) {
            snprintf(err, errlen, "--%s: value too long (max %zu bytes)", o->name, o->size - 1);
            return -1;
        }
        memcpy(p, v, strlen(v) + 1);
        return 0;
    case T_BOOL:
        if (!strcasecmp(v, "true") || !strcmp(v, "1") || !strcasecmp(v, "yes")) {
            *(bool *)p = true;
            return 0;
        }
        if (!strcasecmp(v, "false") || !strcmp(v, "0") || !strcasecmp(v, "no")) {
            *(bool *)p = false;
            return 0;
        }
        snprintf(err, errlen, "--%s: invalid boolean \"%s\" (use true or false)", o->name, v);
        return -1;
    case T_INT:
    case T_U32: {
        errno = 0;
        long long x = strtoll(v, &end, 10);
        if (errno || end == v || *end || x < (long long)o->min || x > (long long)o->max) {
            snprintf(err, errlen, "--%s: invalid value \"%s\" (integer in [%.0f, %.0f])", o->name,
                     v, o->min, o->max);
            return -1;
        }
        if (o->type == T_INT)
            *(int32_t *)p = (int32_t)x;
        else
            *(uint32_t *)p = (uint32_t)x;
        return 0;
    }
    case T_DOUBLE: {
        errno = 0;
        double x = strtod(v, &end);
        if (errno || end == v || *end || isnan(x) || x < o->min || x > o->max) {
            snprintf(err, errlen, "--%s: invalid value \"%s\" (number in [%g, %g])", o->name, v,
                     o->min, o->max);
            return -1;
        }
        *(double *)p = x;
        return 0;
    }
    case T_DURATION: {
        int64_t ns;
        if (bf_parse_duration(v, &ns) != 0) {
            snprintf(err, errlen, "--%s: invalid duration \"%s\" (e.g. 10s, 250ms, 1m30s)", o->name,
                     v);
            return -1;
        }
        if ((double)ns < o->min * 1e9 || (double)ns > o->max * 1e9) {
            snprintf(err, errlen, "--%s: duration %s out of range [%gs, %gs]", o->name, v, o->min,
                     o->max);
            return -1;
        }
        *(int64_t *)p = ns;
        return 0;
    }
    }
    return -1;
}

void bf_config_defaults(struct bf_config *c)
{
    memset(c, 0, sizeof *c);
    char err[256];
    for (size_t i = 0; i < NOPTS; i++)
        if (opts[i].def)
            set_value(c, &opts[i], opts[i].def, err, sizeof err);
}

bool bf_config_tls(const struct bf_config *c)
{
    return c->tls_cert[0] && c->tls_key[0] && c->tls_ca[0];
}

uint32_t bf_config_max_rollup_bytes(const struct bf_config *c)
{
    if (c->max_rollup_mib)
        return c->max_rollup_mib << 20;
    uint64_t b = (uint64_t)c->max_needs * 2048;
    if (b < (4u << 20))
        b = 4u << 20;
    if (b > (256u << 20))
        b = 256u << 20;
    return (uint32_t)b;
}

uint32_t bf_config_cluster_max_needs(const struct bf_config *c)
{
    uint32_t n = c->cluster_max_needs ? c->cluster_max_needs : c->max_needs / 4;
    if (n < 16)
        n = 16;
    return n > c->max_needs ? c->max_needs : n;
}

void bf_config_usage(FILE *f, const char *prog)
{
    fprintf(f,
            "Usage: %s [flags]\n\n"
            "The BigFleet shard appliance: a supervisor that creates the shared segments and\n"
            "runs the session, reconciler, cycle and executor processes (and, without\n"
            "--provider-addr, the embedded simulated provider).\n\nFlags:\n",
            prog);
    for (size_t i = 0; i < NOPTS; i++) {
        const struct opt *o = &opts[i];
        if (o->hidden)
            continue;
        const char *arg = o->type == T_BOOL       ? "[=bool]"
                          : o->type == T_DURATION ? " duration"
                          : o->type == T_STR      ? " string"
                          : o->type == T_DOUBLE   ? " float"
                                                  : " int";
        fprintf(f, "  --%s%s\n      %s", o->name, arg, o->help);
        if (o->def)
            fprintf(f, " (default \"%s\")", o->def);
        fputc('\n', f);
    }
    fprintf(f, "  --help\n      print this help and exit\n  --version\n      print the version and "
               "exit\n");
}

static bool valid_id(const char *id)
{
    size_t l = strlen(id);
    if (l == 0 || l > 63)
        return false;
    for (size_t i = 0; i < l; i++) {
        char ch = id[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '-' || ch == '_' || ch == '.'))
            return false;
    }
    return true;
}

int bf_config_parse(struct bf_config *c, int argc, char **argv, FILE *out, char *err, size_t errlen)
{
    bf_config_defaults(c);
    struct option lo[NOPTS + 3];
    for (size_t i = 0; i < NOPTS; i++) {
        lo[i].name = opts[i].name;
        lo[i].has_arg = opts[i].type == T_BOOL ? optional_argument : required_argument;
        lo[i].flag = NULL;
        lo[i].val = 1000 + (int)i;
    }
    lo[NOPTS] = (struct option){"help", no_argument, NULL, 'h'};
    lo[NOPTS + 1] = (struct option){"version", no_argument, NULL, 'V'};
    lo[NOPTS + 2] = (struct option){NULL, 0, NULL, 0};
    optind = 1;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, ":", lo, NULL)) != -1) {
        if (ch == 'h') {
            bf_config_usage(out ? out : stdout, "bigfleet-shardd");
            return BF_CONFIG_EXIT_OK;
        }
        if (ch == 'V') {
            fprintf(out ? out : stdout, "bigfleet-shardd %s\n", BF_VERSION);
            return BF_CONFIG_EXIT_OK;
        }
        if (ch == '?' || ch == ':') {
            const char *bad = argv[optind - 1];
            if (ch == ':')
                snprintf(err, errlen, "%s: missing value", bad);
            else
                snprintf(err, errlen, "unknown flag %s", bad);
            return BF_CONFIG_USAGE;
        }
        const struct opt *o = &opts[ch - 1000];
        const char *v = optarg;
        if (o->type == T_BOOL && !v)
            v = "true";
        if (set_value(c, o, v, err, errlen) != 0)
            return BF_CONFIG_USAGE;
    }
    if (optind < argc) {
        snprintf(err, errlen, "unexpected argument \"%s\" (flags only)", argv[optind]);
        return BF_CONFIG_USAGE;
    }
    if (!valid_id(c->id)) {
        snprintf(err, errlen, "--id: invalid shard id \"%s\" (1-63 of [A-Za-z0-9._-])", c->id);
        return BF_CONFIG_USAGE;
    }
    if (!c->listen[0]) {
        snprintf(err, errlen, "--listen is required");
        return BF_CONFIG_USAGE;
    }
    int tls = !!c->tls_cert[0] + !!c->tls_key[0] + !!c->tls_ca[0];
    if (tls != 0 && tls != 3) {
        snprintf(err, errlen,
                 "--tls-cert, --tls-key and --tls-ca must be given together (got %s%s%s)",
                 c->tls_cert[0] ? "--tls-cert " : "", c->tls_key[0] ? "--tls-key " : "",
                 c->tls_ca[0] ? "--tls-ca" : "");
        return BF_CONFIG_USAGE;
    }
    if (tls == 0 && !c->insecure_plaintext) {
        int lb = bf_addr_is_loopback(c->listen);
        if (lb <= 0) {
            snprintf(err, errlen,
                     "--listen %s: plaintext gRPC off loopback would let anyone who reaches it "
                     "claim any cluster and read every cluster's Needs; give --tls-cert, "
                     "--tls-key and --tls-ca (mTLS), or --insecure-plaintext to accept that%s",
                     c->listen, lb < 0 ? " (the address does not parse or resolve)" : "");
            return BF_CONFIG_USAGE;
        }
    }
    if (bf_log_level_parse(c->log_level) < 0) {
        snprintf(err, errlen, "--log-level: invalid level \"%s\" (debug, info, warn, error)",
                 c->log_level);
        return BF_CONFIG_USAGE;
    }
    static const char *roles[] = {"supervisor", "session", "reconciler", "cycle", "executor"};
    bool role_ok = false;
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++)
        role_ok |= strcmp(c->role, roles[i]) == 0;
    if (!role_ok) {
        snprintf(err, errlen, "--role: unknown role \"%s\"", c->role);
        return BF_CONFIG_USAGE;
    }
    if (!c->advertise_addr[0])
        snprintf(c->advertise_addr, sizeof c->advertise_addr, "%s", c->listen);
    return BF_CONFIG_OK;
}
