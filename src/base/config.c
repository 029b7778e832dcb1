/*
 * config.c — the flag table of bigfleet-shardd and its parser: defaults, an
 * optional configuration file (--config, libinih), BIGFLEET_SHARDD_*
 * environment variables and the command line, in increasing precedence.
 *
 * One table: name, type, field offset, default (as the text --help shows and
 * the parser applies), bounds, help, and whether SIGHUP may change the value
 * of a running appliance (`live`). Defaults are applied by parsing the
 * default text with the same code as a flag value, so --help can never
 * disagree with behaviour; the file and the environment go through the same
 * set_value() as a flag, so every layer has the same rules and messages.
 *
 * Children never read the file or the environment: the supervisor passes
 * them its effective configuration as explicit flags (bf_config_child_argv),
 * so a child restarted after the file changed still runs the configuration
 * the appliance runs (a SIGHUP reload reaches children through the state
 * segment, bigfleet/shm.h bf_live_*).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <ini.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bigfleet/config.h"
#include "bigfleet/log.h"
#include "bigfleet/util.h"

extern char **environ;

int bf_own_policy_parse(const char *s)
{
    if (!s)
        return -1;
    if (!strcmp(s, "auto"))
        return BF_OWN_POLICY_AUTO;
    if (!strcmp(s, "all"))
        return BF_OWN_POLICY_ALL;
    if (!strcmp(s, "partitioned"))
        return BF_OWN_POLICY_PARTITIONED;
    return -1;
}

enum opt_type { T_STR, T_BOOL, T_INT, T_U32, T_DOUBLE, T_DURATION };

struct opt {
    const char *name;
    enum opt_type type;
    size_t off;
    size_t size;
    const char *def;
    double min, max;
    const char *help;
    bool hidden; /* internal: not in --help, not settable from a file or the environment */
    bool live;   /* a SIGHUP reload applies a new value without a restart */
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
     "state directory (LMDB: shard epoch, coordinator term, ownership partition); alias "
     "--state-dir"},
    {"state-dir", T_STR, F(data_dir), NULL, 0, 0, "alias of --data-dir"},
    {"provider-addr", T_STR, F(provider_addr), "", 0, 0,
     "host:port of a CapacityProvider gRPC service; empty starts the embedded "
     "bigfleet-simprovider child"},
    {"coordinator-addr", T_STR, F(coordinator_addr), "", 0, 0,
     "coordinator gRPC address, or up to 8 comma-separated replica addresses (the report "
     "goes to the next one when a replica is not the leader or unreachable); empty = no "
     "coordinator client (the shard runs identically)"},
    {"advertise-addr", T_STR, F(advertise_addr), "", 0, 0,
     "address reported to the coordinator; empty = --listen"},
    {"coordinator-heartbeat-interval", T_DURATION, F(coordinator_heartbeat_ns), "10s", 0.1, 86400,
     "ReportShard period"},
    {"ownership", T_STR, F(ownership), "auto", 0, 0,
     "ADR-0055 partition of a provider shared by several shards: auto (own every listed "
     "machine until the coordinator first assigns a domain), all (always), partitioned "
     "(only assigned domains and transfers in, from the start: for shards sharing one "
     "provider)"},
    {"transfer-reservation-ttl", T_DURATION, F(transfer_reservation_ttl_ns), "10m", 0.1, 7 * 86400,
     "ADR-0055: how long a machine drained by a CrossShardDrain stays reserved for the "
     "TransferOwnership that should follow, counted after its drain grace"},
    {"tls-cert", T_STR, F(tls_cert), "", 0, 0,
     "PEM certificate; with --tls-key and --tls-ca: mTLS (TLS 1.3) on every gRPC edge; "
     "SIGHUP re-reads the three files",
     false, true},
    {"tls-key", T_STR, F(tls_key), "", 0, 0, "PEM private key for --tls-cert", false, true},
    {"tls-ca", T_STR, F(tls_ca), "", 0, 0,
     "PEM CA bundle: clients must present a certificate it signed (bigfleet:// URI SAN)", false,
     true},
    {"insecure-plaintext", T_BOOL, F(insecure_plaintext), "false", 0, 0,
     "serve gRPC without TLS on a --listen address that is not loopback: anyone who reaches it "
     "can claim any cluster_id and read every cluster's Needs"},
    {"cycle-interval", T_DURATION, F(cycle_interval_ns), "10s", 0.001, 86400,
     "decision cycle period (an accepted rollup also wakes a cycle)"},
    {"cycle-min-gap", T_DURATION, F(cycle_min_gap_ns), "5ms", 0, 1,
     "least time between the starts of cycles woken by demand changes: a change within it "
     "of the last one waits out the gap, then one cycle takes every change made meanwhile. "
     "Costs at most this much decision latency and caps demand cycles at 1/gap per second; "
     "0 = a cycle per change (periodic and deferral cycles are never delayed, ownership work at "
     "most by the gap); at most 1s"},
    {"transparent-huge-pages", T_BOOL, F(transparent_huge_pages), "false", 0, 0,
     "the cycle process's big arrays (the engine's inventory mirror, ~100 MB at 500K machines) "
     "take transparent huge pages: a restarted cycle's first rescan faults once per 2 MiB "
     "instead of per 4 KiB, but on a virtual machine huge pages can stall periodically (on a "
     "VM with software shadow page tables (PVM): every 512 ms, which set the 500K cycle p99 at "
     "12-17 ms against ~6 ms "
     "without); false = 4 KiB pages for them under any system THP policy (docs/operating.md "
     "\"Huge pages\": when to turn it on)"},
    {"max-actions-per-cycle", T_INT, F(max_actions_per_cycle), "0", 0, 1e9,
     "cap on actions handed to execution per cycle (0 = unlimited); the tail is deferred", false,
     true},
    {"actuation-paused", T_BOOL, F(actuation_paused), "false", 0, 0,
     "kill switch (ADR-0046 rail 3): cycles run in full, nothing executes", false, true},
    {"reclaim-cap-fraction", T_DOUBLE, F(reclaim_cap_fraction), "0.05", 0, 1,
     "rail 1: at most max(1, floor(f x Configured)) reclaims per cluster per cycle; 0 disables",
     false, true},
    {"empty-rollup-guard", T_BOOL, F(empty_rollup_guard), "true", 0, 0,
     "rail 2: hold a rollup keeping < 10% of >= 10 prior rows until 3 confirm it"},
    {"dry-run", T_BOOL, F(dry_run), "false", 0, 0,
     "shadow mode: decided actions are logged and audited, never executed", false, true},
    {"audit-log", T_STR, F(audit_log), "", 0, 0,
     "path of the JSONL decision audit log (one record per executed/suppressed/dry-run "
     "action); empty = off; SIGHUP reopens it (log rotation)",
     false, true},
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
    {"incremental-reconcile", T_BOOL, F(incremental_reconcile), "true", 0, 0,
     "reconcile with the provider's since_revision cursor: a cycle waits only for the changes "
     "since the last pass, and a paged full resync runs beside the cycles every "
     "--reconcile-resync-interval (removals); false = every cycle waits for a full List of "
     "every machine (the Go shard's default). A provider without cursors gets full Lists "
     "either way (logged)"},
    {"reconcile-resync-interval", T_DURATION, F(reconcile_resync_interval_ns), "60s", 0.01, 86400,
     "incremental mode: from the end of one full resync walk to the start of the next; a "
     "machine removed at the provider leaves the inventory within about this long"},
    {"reconcile-page-size", T_U32, F(reconcile_page_size), "4096", 1, 16777216,
     "incremental mode: machines per provider List page (max_results) of deltas and resync "
     "walks; a cycle waits for at most one page of a resync"},
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
    {"log-level", T_STR, F(log_level), "info", 0, 0, "debug, info, warn or error", false, true},
    {"config", T_STR, F(config_file), "", 0, 0,
     "configuration file: \"name = value\" lines with the flag names (INI syntax, optional "
     "[shardd] section); flags override BIGFLEET_SHARDD_<NAME> environment variables, which "
     "override the file; SIGHUP re-reads it"},
    {"check-config", T_BOOL, F(check_config), "false", 0, 0,
     "validate the configuration (flags, environment, file, user, TLS files, addresses), "
     "print the result and exit: 0 valid, 2 invalid"},
    {"user", T_STR, F(user), "", 0, 0,
     "account the child processes run as (the supervisor keeps only the lock, the segments, "
     "the data dir and the listeners); empty: \"bigfleet\" when started as root and that "
     "account exists, else the starting user"},
    {"allow-root", T_BOOL, F(allow_root), "false", 0, 0,
     "allow the child processes to run as root (refused otherwise)"},
    {"inspect-group", T_STR, F(inspect_group), "", 0, 0,
     "group allowed to read the shared segments (mode 0640, for bigfleet-inspect); empty: "
     "segments are 0600, readable by --user only"},
    {"seccomp", T_BOOL, F(seccomp), "false", 0, 0,
     "confine each child with a seccomp allow-list of the system calls its role makes "
     "(io_uring included; docs/operating.md lists them)"},
    {"crash-loop-max-reinits", T_INT, F(crash_loop_max_reinits), "3", 1, 1000,
     "full re-initialisations within --crash-loop-reinit-window after which the supervisor "
     "gives up and exits 1"},
    {"crash-loop-reinit-window", T_DURATION, F(crash_loop_reinit_window_ns), "1h", 1, 604800,
     "window for --crash-loop-max-reinits"},
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
            "--provider-addr, the embedded simulated provider).\n\n"
            "Every flag can also be set as BIGFLEET_SHARDD_<NAME> in the environment (dashes\n"
            "as underscores: BIGFLEET_SHARDD_DATA_DIR) or as \"name = value\" in the --config\n"
            "file; flags override the environment, which overrides the file.\n\nFlags:\n",
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

static const struct opt *find_opt(const char *name)
{
    for (size_t i = 0; i < NOPTS; i++)
        if (strcmp(opts[i].name, name) == 0)
            return &opts[i];
    return NULL;
}

/* Formats the value of o in c as its flag text (parses back to the same value). */
static void format_value(const struct bf_config *c, const struct opt *o, char *buf, size_t n)
{
    const void *p = (const char *)c + o->off;
    switch (o->type) {
    case T_STR:
        snprintf(buf, n, "%s", (const char *)p);
        return;
    case T_BOOL:
        snprintf(buf, n, "%s", *(const bool *)p ? "true" : "false");
        return;
    case T_INT:
        snprintf(buf, n, "%d", *(const int32_t *)p);
        return;
    case T_U32:
        snprintf(buf, n, "%u", *(const uint32_t *)p);
        return;
    case T_DOUBLE:
        snprintf(buf, n, "%.17g", *(const double *)p);
        return;
    case T_DURATION: {
        int64_t ns = *(const int64_t *)p, back;
        bf_format_duration(ns, buf, n);
        if (bf_parse_duration(buf, &back) != 0 || back != ns)
            snprintf(buf, n, "%lldns", (long long)ns);
        return;
    }
    }
    snprintf(buf, n, "?");
}

static bool same_value(const struct bf_config *a, const struct bf_config *b, const struct opt *o)
{
    const char *pa = (const char *)a + o->off, *pb = (const char *)b + o->off;
    if (o->type == T_STR)
        return strcmp(pa, pb) == 0;
    return memcmp(pa, pb, o->size) == 0;
}

/* --------------------------------------------------------- the file layer */

struct file_ctx {
    struct bf_config *c;
    const char *origin;
    char *err;
    size_t errlen;
    bool seen[NOPTS];
    bool failed;
};

static int ini_cb(void *user, const char *section, const char *name, const char *value)
{
    struct file_ctx *fx = user;
    if (fx->failed)
        return 0;
    if (section[0] && strcmp(section, "shardd") != 0 && strcmp(section, "bigfleet-shardd") != 0) {
        snprintf(fx->err, fx->errlen, "%s: unknown section [%s] (use no section or [shardd])",
                 fx->origin, section);
        fx->failed = true;
        return 0;
    }
    char key[64];
    size_t l = strlen(name);
    if (l >= sizeof key)
        l = sizeof key - 1;
    for (size_t i = 0; i < l; i++)
        key[i] = name[i] == '_' ? '-'
                                : (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] + 32 : name[i]);
    key[l] = 0;
    const struct opt *o = find_opt(key);
    if (!o || o->hidden || strcmp(key, "config") == 0 || strcmp(key, "check-config") == 0) {
        snprintf(fx->err, fx->errlen, "%s: unknown setting \"%s\"", fx->origin, name);
        fx->failed = true;
        return 0;
    }
    size_t idx = (size_t)(o - opts);
    if (fx->seen[idx]) {
        snprintf(fx->err, fx->errlen, "%s: \"%s\" is set twice", fx->origin, key);
        fx->failed = true;
        return 0;
    }
    fx->seen[idx] = true;
    char e[384];
    if (set_value(fx->c, o, value, e, sizeof e) != 0) {
        snprintf(fx->err, fx->errlen, "%s: %s", fx->origin, e + 2); /* drop the "--" */
        fx->failed = true;
        return 0;
    }
    return 1;
}

int bf_config_apply_text(struct bf_config *c, const char *text, size_t len, const char *origin,
                         char *err, size_t errlen)
{
    if (len > BF_CONFIG_FILE_MAX) {
        snprintf(err, errlen, "%s: larger than %u bytes", origin, BF_CONFIG_FILE_MAX);
        return -EFBIG;
    }
    /* libinih splits a line longer than its buffer into two "lines" and reads
     * NUL as the end of the text: refuse both before it sees them */
    size_t line = 1, col = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == 0) {
            snprintf(err, errlen, "%s:%zu: NUL byte", origin, line);
            return -EINVAL;
        }
        if (text[i] == '\n') {
            line++;
            col = 0;
        } else if (++col > BF_CONFIG_LINE_MAX) {
            snprintf(err, errlen, "%s:%zu: line longer than %u bytes", origin, line,
                     BF_CONFIG_LINE_MAX);
            return -EINVAL;
        }
    }
    char *copy = malloc(len + 1);
    if (!copy) {
        snprintf(err, errlen, "%s: out of memory", origin);
        return -ENOMEM;
    }
    memcpy(copy, text, len);
    copy[len] = 0;
    /* libinih's runtime knobs (Debian's build exports them): no continuation
     * lines (an indented line is an error, not a silent append), whole-line
     * comments with # or ;, inline comments only after whitespace, a heap
     * line buffer as long as our longest accepted line, stop at the first
     * error. Process-wide: config parsing is single-threaded (start-up and
     * the supervisor's SIGHUP). */
    ini_allow_multiline = false;
    ini_allow_inline_comments = true;
    ini_inline_comment_prefixes = (char *)";#";
    ini_use_stack = false;
    ini_allow_realloc = true;
    ini_max_line = BF_CONFIG_LINE_MAX + 3;
    ini_stop_on_first_error = true;
    ini_allow_no_value = false;
    static struct file_ctx fx; /* NOPTS bools; static keeps the stack small for fuzzing */
    memset(&fx, 0, sizeof fx);
    fx.c = c;
    fx.origin = origin;
    fx.err = err;
    fx.errlen = errlen;
    char inner[400] = "";
    fx.err = inner;
    fx.errlen = sizeof inner;
    int r = ini_parse_string(copy, ini_cb, &fx);
    free(copy);
    if (r == 0 && !fx.failed)
        return 0;
    if (fx.failed && r > 0) {
        /* "<origin>: msg" -> "<origin>:<line>: msg" */
        size_t ol = strlen(origin);
        snprintf(err, errlen, "%s:%d:%s", origin, r,
                 inner + (strncmp(inner, origin, ol) ? 0 : ol + 1));
    } else if (fx.failed) {
        snprintf(err, errlen, "%s", inner);
    } else if (r > 0) {
        snprintf(err, errlen, "%s:%d: syntax error (expected \"name = value\" or [section])",
                 origin, r);
    } else {
        snprintf(err, errlen, "%s: cannot parse (error %d)", origin, r);
    }
    return -EINVAL;
}

static int apply_file(struct bf_config *c, const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        snprintf(err, errlen, "--config %s: %s", path, strerror(errno));
        return -errno;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        snprintf(err, errlen, "--config %s: not a regular file", path);
        return -EINVAL;
    }
    if (st.st_size > BF_CONFIG_FILE_MAX) {
        close(fd);
        snprintf(err, errlen, "--config %s: larger than %u bytes", path, BF_CONFIG_FILE_MAX);
        return -EFBIG;
    }
    char *buf = malloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (buf && got < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    if (!buf) {
        snprintf(err, errlen, "--config %s: out of memory", path);
        return -ENOMEM;
    }
    int r = bf_config_apply_text(c, buf, got, path, err, errlen);
    free(buf);
    return r;
}

/* ------------------------------------------------------ the environment layer */

static int apply_env(struct bf_config *c, char *const *envp, char *err, size_t errlen)
{
    static const char prefix[] = BF_CONFIG_ENV_PREFIX;
    for (size_t e = 0; envp && envp[e]; e++) {
        const char *kv = envp[e];
        if (strncmp(kv, prefix, sizeof prefix - 1) != 0)
            continue;
        const char *eq = strchr(kv, '=');
        if (!eq)
            continue;
        const char *n0 = kv + sizeof prefix - 1;
        char key[64];
        size_t l = (size_t)(eq - n0);
        if (l == 0 || l >= sizeof key) {
            snprintf(err, errlen, "%.*s: unknown setting", (int)(eq - kv), kv);
            return -EINVAL;
        }
        for (size_t i = 0; i < l; i++)
            key[i] = n0[i] == '_' ? '-' : (char)(n0[i] >= 'A' && n0[i] <= 'Z' ? n0[i] + 32 : n0[i]);
        key[l] = 0;
        const struct opt *o = find_opt(key);
        if (!o || o->hidden || strcmp(key, "check-config") == 0) {
            snprintf(err, errlen, "%.*s: unknown setting (no flag --%s)", (int)(eq - kv), kv, key);
            return -EINVAL;
        }
        char e2[384];
        if (set_value(c, o, eq + 1, e2, sizeof e2) != 0) {
            snprintf(err, errlen, "%.*s: %s", (int)(eq - kv), kv, e2);
            return -EINVAL;
        }
    }
    return 0;
}

/* ------------------------------------------------------------ flags, all */

static void long_options(struct option *lo)
{
    for (size_t i = 0; i < NOPTS; i++) {
        lo[i].name = opts[i].name;
        lo[i].has_arg = opts[i].type == T_BOOL ? optional_argument : required_argument;
        lo[i].flag = NULL;
        lo[i].val = 1000 + (int)i;
    }
    lo[NOPTS] = (struct option){"help", no_argument, NULL, 'h'};
    lo[NOPTS + 1] = (struct option){"version", no_argument, NULL, 'V'};
    lo[NOPTS + 2] = (struct option){NULL, 0, NULL, 0};
}

/*
 * One getopt pass over argv. apply = false: only syntax, --help/--version,
 * and the two values the layers depend on (--config, --role). apply = true:
 * every flag's value over c.
 */
static int flags_pass(struct bf_config *c, int argc, char **argv, bool apply, FILE *out,
                      char *config_path, size_t cp_len, bool *is_child, char *err, size_t errlen)
{
    struct option lo[NOPTS + 3];
    long_options(lo);
    optind = 0; /* glibc: 0 re-initialises getopt fully (1 keeps the position inside an
                 * unfinished cluster of short options from an earlier parse) */
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, ":", lo, NULL)) != -1) {
        if (ch == 'h') {
            if (!apply)
                continue;
            bf_config_usage(out ? out : stdout, "bigfleet-shardd");
            return BF_CONFIG_EXIT_OK;
        }
        if (ch == 'V') {
            if (!apply)
                continue;
            fprintf(out ? out : stdout, "bigfleet-shardd %s\n", BF_VERSION);
            return BF_CONFIG_EXIT_OK;
        }
        if (ch == '?' || ch == ':') {
            const char *bad = argv[optind - 1];
            char shortopt[3] = {'-', (char)optopt, 0};
            if (optopt > 0 && optopt < 1000) /* a short option (none is defined) */
                bad = shortopt;
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
        if (!apply) {
            if (strcmp(o->name, "config") == 0)
                snprintf(config_path, cp_len, "%s", v);
            if (strcmp(o->name, "role") == 0)
                *is_child = strcmp(v, "supervisor") != 0;
            continue;
        }
        if (set_value(c, o, v, err, errlen) != 0)
            return BF_CONFIG_USAGE;
    }
    if (optind < argc) {
        snprintf(err, errlen, "unexpected argument \"%s\" (flags only)", argv[optind]);
        return BF_CONFIG_USAGE;
    }
    return BF_CONFIG_OK;
}

int bf_config_validate(struct bf_config *c, char *err, size_t errlen)
{
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
    if (bf_own_policy_parse(c->ownership) < 0) {
        snprintf(err, errlen, "--ownership: invalid value \"%s\" (auto, all, partitioned)",
                 c->ownership);
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

int bf_config_load(struct bf_config *c, int argc, char **argv, char *const *envp, FILE *out,
                   char *err, size_t errlen)
{
    char path[BF_PATH_MAX] = "";
    bool child = false;
    bf_config_defaults(c);
    int rc = flags_pass(c, argc, argv, false, out, path, sizeof path, &child, err, errlen);
    if (rc != BF_CONFIG_OK)
        return rc;
    if (!child) {
        /* the file named by the flag, else by BIGFLEET_SHARDD_CONFIG */
        static const char cfg_env[] = BF_CONFIG_ENV_PREFIX "CONFIG=";
        for (size_t e = 0; !path[0] && envp && envp[e]; e++)
            if (strncmp(envp[e], cfg_env, sizeof cfg_env - 1) == 0)
                snprintf(path, sizeof path, "%s", envp[e] + sizeof cfg_env - 1);
        if (path[0] && apply_file(c, path, err, errlen) != 0)
            return BF_CONFIG_USAGE;
        if (apply_env(c, envp, err, errlen) != 0)
            return BF_CONFIG_USAGE;
    }
    rc = flags_pass(c, argc, argv, true, out, NULL, 0, NULL, err, errlen);
    if (rc != BF_CONFIG_OK)
        return rc;
    snprintf(c->config_file, sizeof c->config_file, "%s", path);
    return bf_config_validate(c, err, errlen);
}

int bf_config_parse(struct bf_config *c, int argc, char **argv, FILE *out, char *err, size_t errlen)
{
    return bf_config_load(c, argc, argv, environ, out, err, errlen);
}

int bf_config_child_argv(const struct bf_config *c, const char *prog, const char *role, char *buf,
                         size_t cap, char **argv, int max_argv)
{
    int n = 0;
    size_t used = 0;
#define PUSH(str)                                                                                  \
    do {                                                                                           \
        size_t l_ = strlen(str) + 1;                                                               \
        if (n >= max_argv - 1 || used + l_ > cap)                                                  \
            return -E2BIG;                                                                         \
        memcpy(buf + used, str, l_);                                                               \
        argv[n++] = buf + used;                                                                    \
        used += l_;                                                                                \
    } while (0)
    PUSH(prog);
    char v[BF_CONFIG_LINE_MAX + 8];
    for (size_t i = 0; i < NOPTS; i++) {
        const struct opt *o = &opts[i];
        if (o->hidden || !o->def || strcmp(o->name, "config") == 0 ||
            strcmp(o->name, "check-config") == 0)
            continue;
        format_value(c, o, v, sizeof v);
        if (o->type == T_BOOL) {
            char f[96];
            snprintf(f, sizeof f, "--%s=%s", o->name, v);
            PUSH(f);
        } else {
            char f[96];
            snprintf(f, sizeof f, "--%s", o->name);
            PUSH(f);
            PUSH(v);
        }
    }
    char r[48];
    snprintf(r, sizeof r, "--role=%s", role);
    PUSH(r);
#undef PUSH
    argv[n] = NULL;
    return n;
}

int bf_config_diff(const struct bf_config *running, const struct bf_config *next,
                   bf_config_diff_fn fn, void *arg)
{
    int changed = 0;
    char a[BF_CONFIG_LINE_MAX + 8], b[BF_CONFIG_LINE_MAX + 8];
    for (size_t i = 0; i < NOPTS; i++) {
        const struct opt *o = &opts[i];
        if (o->hidden || !o->def || strcmp(o->name, "check-config") == 0 ||
            strcmp(o->name, "config") == 0)
            continue;
        if (same_value(running, next, o))
            continue;
        format_value(running, o, a, sizeof a);
        format_value(next, o, b, sizeof b);
        changed++;
        if (fn)
            fn(o->name, a, b, o->live, arg);
    }
    return changed;
}

void bf_config_copy_live(struct bf_config *running, const struct bf_config *next)
{
    for (size_t i = 0; i < NOPTS; i++)
        if (opts[i].live)
            memcpy((char *)running + opts[i].off, (const char *)next + opts[i].off, opts[i].size);
}

bool bf_config_is_live(const char *name)
{
    const struct opt *o = find_opt(name);
    return o && o->live;
}
