/*
 * main.c — bigfleet-replay: flags, input loading, the run, the report.
 *
 * Exit status: 0 the replay ran (and, with --check, passed the acceptance
 * criteria); 1 runtime failure (shard unreachable, event loop error);
 * 2 usage or input error (the message names the flag, or the file and
 * line); 3 --check and an acceptance criterion failed; 130 interrupted
 * (SIGINT/SIGTERM: the report of the part replayed is still written).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bigfleet/config.h"
#include "bigfleet/log.h"
#include "bigfleet/util.h"
#include "run.h"

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: bigfleet-replay --trace PODS.csv [options]\n"
        "\n"
        "Replays a pod trace (../shared/data/openb) through a BigFleet shard as K operators\n"
        "speaking Shard/Session, and reports what the shard did (docs/replay.md).\n"
        "\n"
        "input\n"
        "  --trace PATH            pod list CSV (also the first positional argument)\n"
        "  --catalog PATH          the simulated provider's catalog (openb node list or explicit\n"
        "                          catalog): fitting-type pins, prices, the cost lower bound\n"
        "  --spot-variants         the catalog has -spot twins (as the simprovider flag)\n"
        "  --no-pin                do not pin each pod to the catalog types that can host it\n"
        "  --skip-bad-rows         skip and count malformed rows instead of failing\n"
        "  --snapshot MODE         a pod list without creation/deletion times: off (default:\n"
        "                          an error), auto (replay it as a snapshot), ramp (every list,\n"
        "                          times or not): pods arrive in file order over --snapshot-ramp\n"
        "                          and stay --snapshot-hold more (defaults 1d and 1d)\n"
        "  --default-qos Q         qos of every pod when the list has no qos column (LS, "
        "Burstable,\n"
        "                          BE, Guaranteed; a snapshot defaults to LS)\n"
        "  --check-input           load and check the pod list and the catalog, print a summary\n"
        "                          and exit (0, or 2 with the error)\n"
        "shard\n"
        "  --shard-addr ADDR       Shard/Session address (default 127.0.0.1:7780)\n"
        "  --metrics-addr ADDR     the shard's /metrics (progress, report); default none\n"
        "  --tls-cert/--tls-key/--tls-ca PATH   TLS (ca) or mTLS (all three)\n"
        "  --cycle-interval DUR    the shard's cycle interval, for the latency target (default "
        "1s)\n"
        "clusters\n"
        "  --clusters K            copies of the trace, one operator each (default 1)\n"
        "  --connections N         HTTP/2 connections carrying the K sessions (default K/100)\n"
        "  --cluster-prefix S      cluster ids S0, S1, ... (default openb-)\n"
        "  --cluster-offset T      trace time between two copies (default 1h)\n"
        "time\n"
        "  --from T --until T      trace window (default: the whole trace); T = seconds or\n"
        "  --duration T            2d12h / 36h / 90m / 45s; --duration = until - from\n"
        "  --busiest T             the window is the T-long stretch of the trace with the most\n"
        "                          pods alive in it (excludes --from/--until/--duration)\n"
        "  --speed X               trace seconds per wall second (default 1)\n"
        "  --wall DUR              replay the window in this wall time (sets --speed)\n"
        "  --rollup-interval DUR   WALL time between two rollups of a cluster (default 10s);\n"
        "                          each rollup samples the trace --speed x that much later\n"
        "  --settle DUR            wait after the last rollup before measuring (default 2s)\n"
        "  --connect-timeout DUR   every session must be accepted within (default 30s)\n"
        "  --reclaim-window DUR    rollups a reclaim is checked against (default 2s)\n"
        "  --session-timeout DUR   re-dial a session silent that long (no Hello ack, or no\n"
        "                          frame while rollups go unacknowledged; default 10s)\n"
        "output\n"
        "  --report DIR            write report.json, report.txt, demand.svg, cost.svg,\n"
        "                          binding-latency.svg\n"
        "  --progress MODE         auto (default), tty (refresh in place), plain, off\n"
        "  --check                 exit 3 unless the acceptance criteria hold\n"
        "  --contended             the supply is meant to be short: acceptance = at least one\n"
        "                          preemption, none taken from demand of the preemptor's\n"
        "                          priority or higher, satisfaction ordered by qos class\n"
        "  --inspect-interval DUR  poll ShardRead/InspectNeeds for the shard's verdicts (unmet\n"
        "                          reasons, parked Needs) this often; 0 = never (default 5s)\n"
        "  --explain               print the pod -> CapacityRequest mapping and exit\n"
        "  --print-catalog         print --catalog as an explicit catalog CSV and exit\n"
        "  --log-level LEVEL       debug, info, warn (default), error\n"
        "  --help, --version\n");
}

enum {
    O_TRACE = 256,
    O_CATALOG,
    O_SPOT,
    O_NOPIN,
    O_SKIP,
    O_SHARD,
    O_METRICS,
    O_CERT,
    O_KEY,
    O_CA,
    O_CYCLE,
    O_CLUSTERS,
    O_CONNS,
    O_PREFIX,
    O_OFFSET,
    O_FROM,
    O_UNTIL,
    O_DURATION,
    O_SPEED,
    O_WALL,
    O_INTERVAL,
    O_SETTLE,
    O_CTIMEOUT,
    O_RWINDOW,
    O_REPORT,
    O_PROGRESS,
    O_CHECK,
    O_EXPLAIN,
    O_LOGLEVEL,
    O_HELP,
    O_VERSION,
    O_STIMEOUT,
    O_PRINTCAT,
    O_SNAPSHOT,
    O_SNAPRAMP,
    O_SNAPHOLD,
    O_DEFQOS,
    O_CHECKIN,
    O_BUSIEST,
    O_CONTENDED,
    O_INSPECT
};

static const struct option longopts[] = {
    {"trace", required_argument, 0, O_TRACE},
    {"catalog", required_argument, 0, O_CATALOG},
    {"spot-variants", no_argument, 0, O_SPOT},
    {"no-pin", no_argument, 0, O_NOPIN},
    {"skip-bad-rows", no_argument, 0, O_SKIP},
    {"snapshot", required_argument, 0, O_SNAPSHOT},
    {"snapshot-ramp", required_argument, 0, O_SNAPRAMP},
    {"snapshot-hold", required_argument, 0, O_SNAPHOLD},
    {"default-qos", required_argument, 0, O_DEFQOS},
    {"check-input", no_argument, 0, O_CHECKIN},
    {"busiest", required_argument, 0, O_BUSIEST},
    {"contended", no_argument, 0, O_CONTENDED},
    {"inspect-interval", required_argument, 0, O_INSPECT},
    {"shard-addr", required_argument, 0, O_SHARD},
    {"metrics-addr", required_argument, 0, O_METRICS},
    {"tls-cert", required_argument, 0, O_CERT},
    {"tls-key", required_argument, 0, O_KEY},
    {"tls-ca", required_argument, 0, O_CA},
    {"cycle-interval", required_argument, 0, O_CYCLE},
    {"clusters", required_argument, 0, O_CLUSTERS},
    {"connections", required_argument, 0, O_CONNS},
    {"cluster-prefix", required_argument, 0, O_PREFIX},
    {"cluster-offset", required_argument, 0, O_OFFSET},
    {"from", required_argument, 0, O_FROM},
    {"until", required_argument, 0, O_UNTIL},
    {"duration", required_argument, 0, O_DURATION},
    {"speed", required_argument, 0, O_SPEED},
    {"wall", required_argument, 0, O_WALL},
    {"rollup-interval", required_argument, 0, O_INTERVAL},
    {"settle", required_argument, 0, O_SETTLE},
    {"connect-timeout", required_argument, 0, O_CTIMEOUT},
    {"reclaim-window", required_argument, 0, O_RWINDOW},
    {"session-timeout", required_argument, 0, O_STIMEOUT},
    {"report", required_argument, 0, O_REPORT},
    {"progress", required_argument, 0, O_PROGRESS},
    {"check", no_argument, 0, O_CHECK},
    {"explain", no_argument, 0, O_EXPLAIN},
    {"print-catalog", no_argument, 0, O_PRINTCAT},
    {"log-level", required_argument, 0, O_LOGLEVEL},
    {"help", no_argument, 0, O_HELP},
    {"version", no_argument, 0, O_VERSION},
    {0, 0, 0, 0},
};

static int bad(const char *flag, const char *v, const char *why)
{
    fprintf(stderr, "bigfleet-replay: --%s: %s \"%s\"\n", flag, why, v);
    return 2;
}

static int parse_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
    char *e;
    errno = 0;
    unsigned long v = strtoul(s, &e, 10);
    if (!*s || *e || errno || v < lo || v > hi || s[0] == '-')
        return -1;
    *out = (uint32_t)v;
    return 0;
}

static int parse_dur(const char *s, int64_t lo, int64_t *out)
{
    int64_t v;
    if (bf_parse_duration(s, &v) || v < lo)
        return -1;
    *out = v;
    return 0;
}

/* --explain: the mapping, one line per class, and the catalog it pins to. */
static void explain(const struct rp_model *m, const struct rp_trace *t)
{
    printf("%zu pods -> %zu classes (aggregation keys)%s\n", t->n_pods, m->n_classes,
           m->pin ? ", pinned to fitting catalog types" : "");
    for (int q = 0; q < RP_QOS_COUNT; q++)
        printf("  qos %-10s -> priority %6d, interruption $%g (bucket %u), reclamation $%g "
               "(bucket %u)\n",
               rp_qos_table[q].name, rp_qos_table[q].priority, rp_qos_table[q].interruption_dollars,
               bf_bucket_for_dollars(rp_qos_table[q].interruption_dollars),
               rp_qos_table[q].reclamation_dollars,
               bf_bucket_for_dollars(rp_qos_table[q].reclamation_dollars));
    for (size_t i = 0; i < m->n_classes; i++) {
        const struct rp_class *c = &m->classes[i];
        printf("class %zu: %u pods, %s%s, %u fitting types\n  %s\n", i, c->pods,
               rp_qos_table[c->qos].name, c->gpu ? ", GPU" : ", CPU only", c->n_fit, c->fp);
    }
    if (m->n_types) {
        printf("catalog: %zu instance types\n", m->n_types);
        for (size_t k = 0; k < m->n_types; k++)
            printf("  %-32s cpu %6.1f  mem %8lld MiB  gpu %2d %-8s %-10s $%.4f/h  (%u nodes)\n",
                   m->types[k].name, m->types[k].cpu_milli / 1000.0,
                   (long long)m->types[k].memory_mib, m->types[k].gpus, m->types[k].gpu_model,
                   bf_capacity_type_name(m->types[k].capacity_type), m->types[k].price_per_hour,
                   m->types[k].trace_nodes);
        if (m->unfittable_pods)
            printf("warning: %zu pods fit no instance type of the catalog\n", m->unfittable_pods);
    }
}

int main(int argc, char **argv)
{
    struct rp_config cfg = {
        .shard_addr = "127.0.0.1:7780",
        .cluster_prefix = "openb-",
        .pin = true,
        .clusters = 1,
        .speed = 0,
        .interval_ns = 10 * BF_NS_PER_SEC,
        .offset = 3600,
        .settle_ns = 2 * BF_NS_PER_SEC,
        .connect_timeout_ns = 30 * BF_NS_PER_SEC,
        .reclaim_window_ns = 2 * BF_NS_PER_SEC,
        .session_timeout_ns = 10 * BF_NS_PER_SEC,
        .cycle_hint_ns = BF_NS_PER_SEC,
        .progress = -1,
        .trace_opts = {.default_qos = -1},
        .inspect_interval_ns = 5 * BF_NS_PER_SEC,
    };
    int log_level = BF_LOG_WARN;
    bool print_catalog = false;
    double speed = 0;
    int opt;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        const char *name = NULL;
        for (const struct option *o = longopts; o->name; o++)
            if (o->val == opt)
                name = o->name;
        switch (opt) {
        case O_TRACE:
            cfg.trace_path = optarg;
            break;
        case O_CATALOG:
            cfg.catalog_path = optarg;
            break;
        case O_SPOT:
            cfg.spot_variants = true;
            break;
        case O_NOPIN:
            cfg.pin = false;
            break;
        case O_SKIP:
            cfg.trace_opts.skip_bad = true;
            break;
        case O_SNAPSHOT:
            if (!strcmp(optarg, "off"))
                cfg.trace_opts.snapshot = RP_SNAP_OFF;
            else if (!strcmp(optarg, "auto"))
                cfg.trace_opts.snapshot = RP_SNAP_AUTO;
            else if (!strcmp(optarg, "ramp"))
                cfg.trace_opts.snapshot = RP_SNAP_RAMP;
            else
                return bad(name, optarg, "want off, auto or ramp, got");
            break;
        case O_SNAPRAMP:
        case O_SNAPHOLD: {
            int64_t v;
            if (rp_parse_trace_seconds(optarg, &v) || v <= 0)
                return bad(name, optarg, "want a positive trace span, got");
            *(opt == O_SNAPRAMP ? &cfg.trace_opts.ramp : &cfg.trace_opts.hold) = v;
            break;
        }
        case O_DEFQOS:
            if ((cfg.trace_opts.default_qos = rp_qos_parse(optarg, strlen(optarg))) < 0)
                return bad(name, optarg, "want LS, Burstable, BE or Guaranteed, got");
            break;
        case O_CHECKIN:
            cfg.check_input = true;
            break;
        case O_BUSIEST:
            if (rp_parse_trace_seconds(optarg, &cfg.busiest) || cfg.busiest <= 0)
                return bad(name, optarg, "invalid trace span");
            break;
        case O_CONTENDED:
            cfg.contended = true;
            break;
        case O_INSPECT:
            if (parse_dur(optarg, 0, &cfg.inspect_interval_ns))
                return bad(name, optarg, "invalid duration");
            break;
        case O_SHARD:
            cfg.shard_addr = optarg;
            break;
        case O_METRICS:
            cfg.metrics_addr = *optarg ? optarg : NULL;
            break;
        case O_CERT:
            cfg.tls.cert_file = optarg;
            break;
        case O_KEY:
            cfg.tls.key_file = optarg;
            break;
        case O_CA:
            cfg.tls.ca_file = optarg;
            break;
        case O_CYCLE:
            if (parse_dur(optarg, 1, &cfg.cycle_hint_ns))
                return bad(name, optarg, "invalid duration");
            break;
        case O_CLUSTERS:
            if (parse_u32(optarg, 1, 1000000, &cfg.clusters))
                return bad(name, optarg, "want an integer in 1..1000000, got");
            break;
        case O_CONNS:
            if (parse_u32(optarg, 1, 100000, &cfg.connections))
                return bad(name, optarg, "want an integer in 1..100000, got");
            break;
        case O_PREFIX:
            if (!*optarg || strlen(optarg) > 40)
                return bad(name, optarg, "want 1..40 characters, got");
            cfg.cluster_prefix = optarg;
            break;
        case O_OFFSET:
            if (rp_parse_trace_seconds(optarg, &cfg.offset))
                return bad(name, optarg, "invalid trace time");
            break;
        case O_FROM:
            if (rp_parse_trace_seconds(optarg, &cfg.from))
                return bad(name, optarg, "invalid trace time");
            cfg.from_set = true;
            break;
        case O_UNTIL:
            if (rp_parse_trace_seconds(optarg, &cfg.until))
                return bad(name, optarg, "invalid trace time");
            cfg.until_set = true;
            break;
        case O_DURATION:
            if (rp_parse_trace_seconds(optarg, &cfg.duration) || cfg.duration <= 0)
                return bad(name, optarg, "invalid trace span");
            cfg.duration_set = true;
            break;
        case O_SPEED: {
            char *e;
            speed = strtod(optarg, &e);
            if (!*optarg || *e || !(speed > 0) || !isfinite(speed) || speed > 1e12)
                return bad(name, optarg, "want a positive number, got");
            break;
        }
        case O_WALL:
            if (parse_dur(optarg, BF_NS_PER_MS, &cfg.wall_ns))
                return bad(name, optarg, "want a duration >= 1ms, got");
            break;
        case O_INTERVAL:
            if (parse_dur(optarg, BF_NS_PER_MS, &cfg.interval_ns))
                return bad(name, optarg, "want a duration >= 1ms, got");
            break;
        case O_SETTLE:
            if (parse_dur(optarg, 0, &cfg.settle_ns))
                return bad(name, optarg, "invalid duration");
            break;
        case O_CTIMEOUT:
            if (parse_dur(optarg, BF_NS_PER_MS, &cfg.connect_timeout_ns))
                return bad(name, optarg, "invalid duration");
            break;
        case O_RWINDOW:
            if (parse_dur(optarg, 0, &cfg.reclaim_window_ns))
                return bad(name, optarg, "invalid duration");
            break;
        case O_STIMEOUT:
            if (parse_dur(optarg, 10 * BF_NS_PER_MS, &cfg.session_timeout_ns))
                return bad(name, optarg, "want a duration >= 10ms, got");
            break;
        case O_REPORT:
            cfg.report_dir = optarg;
            break;
        case O_PROGRESS:
            if (!strcmp(optarg, "auto"))
                cfg.progress = -1;
            else if (!strcmp(optarg, "tty"))
                cfg.progress = 2;
            else if (!strcmp(optarg, "plain"))
                cfg.progress = 1;
            else if (!strcmp(optarg, "off"))
                cfg.progress = 0;
            else
                return bad(name, optarg, "want auto, tty, plain or off, got");
            break;
        case O_CHECK:
            cfg.check = true;
            break;
        case O_EXPLAIN:
            cfg.explain = true;
            break;
        case O_PRINTCAT:
            print_catalog = true;
            break;
        case O_LOGLEVEL:
            if ((log_level = bf_log_level_parse(optarg)) < 0)
                return bad(name, optarg, "want debug, info, warn or error, got");
            break;
        case O_HELP:
            usage(stdout);
            return 0;
        case O_VERSION:
            printf("bigfleet-replay %s\n", BF_VERSION);
            return 0;
        case ':':
            fprintf(stderr, "bigfleet-replay: %s needs a value\n", argv[optind - 1]);
            return 2;
        default:
            fprintf(stderr, "bigfleet-replay: unknown option %s (see --help)\n", argv[optind - 1]);
            return 2;
        }
    }
    if (optind < argc && !cfg.trace_path)
        cfg.trace_path = argv[optind++];
    if (optind < argc) {
        fprintf(stderr, "bigfleet-replay: unexpected argument \"%s\"\n", argv[optind]);
        return 2;
    }
    if (!cfg.trace_path && !print_catalog) {
        fprintf(stderr, "bigfleet-replay: --trace is required (see --help)\n");
        return 2;
    }
    if (cfg.busiest && (cfg.from_set || cfg.until_set || cfg.duration_set)) {
        fprintf(stderr, "bigfleet-replay: --busiest excludes --from, --until and --duration\n");
        return 2;
    }
    if (speed > 0 && cfg.wall_ns) {
        fprintf(stderr, "bigfleet-replay: --speed and --wall exclude each other\n");
        return 2;
    }
    if (cfg.until_set && cfg.duration_set) {
        fprintf(stderr, "bigfleet-replay: --until and --duration exclude each other\n");
        return 2;
    }
    if (bf_net_tls_config_check(&cfg.tls) < 0 &&
        !(cfg.tls.ca_file && !cfg.tls.cert_file && !cfg.tls.key_file)) {
        fprintf(stderr, "bigfleet-replay: TLS wants --tls-ca alone (TLS) or all of --tls-cert, "
                        "--tls-key, --tls-ca (mTLS)\n");
        return 2;
    }
    if (cfg.progress < 0)
        cfg.progress = isatty(STDERR_FILENO) ? 2 : 1;
    bf_log_init("replay", log_level);

    char err[512];
    int code = 0;
    struct rp_trace trace;
    struct rp_model model;
    struct rp_run run;
    struct bf_sim_type *types = NULL;
    size_t n_types = 0;
    bool have_model = false;
    memset(&model, 0, sizeof model);
    memset(&run, 0, sizeof run);
    memset(&trace, 0, sizeof trace);
    int rc = 0;
    if (cfg.trace_path &&
        (rc = rp_trace_load(cfg.trace_path, &cfg.trace_opts, &trace, err, sizeof err))) {
        fprintf(stderr, "bigfleet-replay: %s\n", err);
        return 2;
    }
    if (trace.skipped)
        fprintf(stderr, "bigfleet-replay: skipped %zu malformed row%s of %s (first: %s)\n",
                trace.skipped, trace.skipped == 1 ? "" : "s", trace.path, trace.skip_samples[0]);
    if (cfg.catalog_path) {
        rc = bf_sim_catalog_load(cfg.catalog_path, cfg.spot_variants, &types, &n_types, err,
                                 sizeof err);
        if (rc) {
            fprintf(stderr, "bigfleet-replay: %s\n", err);
            code = 2;
            goto out;
        }
    }
    if (print_catalog) {
        if (!types) {
            fprintf(stderr, "bigfleet-replay: --print-catalog needs --catalog\n");
            code = 2;
            goto out;
        }
        static const char *ct[] = {"unspecified", "bare-metal", "reserved", "on-demand", "spot"};
        printf("type,cpu_milli,memory_mib,gpu,model,capacity_type,price_per_hour,"
               "interruption_probability\n");
        for (size_t k = 0; k < n_types; k++)
            printf("%s,%lld,%lld,%d,%s,%s,%.4f,%.4f\n", types[k].name,
                   (long long)types[k].cpu_milli, (long long)types[k].memory_mib, types[k].gpus,
                   types[k].gpu_model, ct[types[k].capacity_type < 5 ? types[k].capacity_type : 0],
                   types[k].price_per_hour, types[k].interruption_probability);
        goto out;
    }
    if (rp_model_build(&model, &trace, types, n_types, cfg.pin)) {
        fprintf(stderr, "bigfleet-replay: out of memory\n");
        code = 1;
        goto out;
    }
    have_model = true;
    if (model.unfittable_pods)
        fprintf(stderr,
                "bigfleet-replay: warning: %zu pods fit no instance type of %s (they are "
                "sent unpinned and cannot be satisfied)\n",
                model.unfittable_pods, cfg.catalog_path);
    if (trace.snapshot)
        fprintf(stderr,
                "bigfleet-replay: %s is replayed as a snapshot (%s): its %zu pods arrive in "
                "file order over %lld s of trace and stay %lld s more%s%s\n",
                trace.path, trace.snap_why, trace.n_pods, (long long)trace.snap_ramp,
                (long long)trace.snap_hold, trace.qos_default >= 0 ? "; no qos column: all " : "",
                trace.qos_default >= 0 ? rp_qos_table[trace.qos_default].name : "");
    else if (trace.qos_default >= 0)
        fprintf(stderr, "bigfleet-replay: %s has no qos column: every pod is %s (--default-qos)\n",
                trace.path, rp_qos_table[trace.qos_default].name);
    if (cfg.explain) {
        explain(&model, &trace);
        goto out;
    }
    if (cfg.check_input) {
        printf("%s: %zu pods (%zu rows, %zu skipped), %zu classes, trace %lld..%lld s%s; "
               "catalog %s: %zu instance types\n",
               trace.path, trace.n_pods, trace.rows, trace.skipped, model.n_classes,
               (long long)trace.first_create, (long long)trace.end,
               trace.snapshot ? " (snapshot)" : "", cfg.catalog_path ? cfg.catalog_path : "none",
               n_types);
        goto out;
    }

    run.cfg = &cfg;
    run.trace = &trace;
    run.model = &model;
    run.types = types;
    run.n_types = n_types;
    run.n_cl = cfg.clusters;
    struct rp_clock *ck = &run.clock;
    if (cfg.busiest) {
        ck->from = rp_trace_busiest(&trace, cfg.busiest);
        ck->until = ck->from + cfg.busiest < trace.end ? ck->from + cfg.busiest : trace.end;
    } else {
        ck->from = cfg.from_set ? cfg.from : trace.first_create;
        ck->until = cfg.until_set      ? cfg.until
                    : cfg.duration_set ? ck->from + cfg.duration
                                       : trace.end;
    }
    if (ck->until <= ck->from) {
        fprintf(stderr, "bigfleet-replay: empty window: --from %lld is not before --until %lld\n",
                (long long)ck->from, (long long)ck->until);
        code = 2;
        goto out;
    }
    ck->interval_ns = cfg.interval_ns;
    ck->offset = cfg.offset;
    ck->clusters = cfg.clusters;
    double span = (double)(ck->until - ck->from) + (double)(cfg.clusters - 1) * (double)cfg.offset;
    ck->speed = cfg.wall_ns ? span / ((double)cfg.wall_ns / 1e9) : speed > 0 ? speed : 1;
    cfg.speed = ck->speed;
    BF_INFO("replay plan", "pods=%zu classes=%zu clusters=%u from=%lld until=%lld speed=%.6g",
            trace.n_pods, model.n_classes, cfg.clusters, (long long)ck->from, (long long)ck->until,
            ck->speed);
    fprintf(stderr,
            "bigfleet-replay: %zu pods (%zu classes), %u cluster%s -> %s; trace %lld..%lld s at "
            "%.0fx, a rollup every %.3g s wall = %.0f s of trace\n",
            trace.n_pods, model.n_classes, cfg.clusters, cfg.clusters == 1 ? "" : "s",
            cfg.shard_addr, (long long)ck->from, (long long)ck->until, ck->speed,
            (double)ck->interval_ns / 1e9, (double)ck->interval_ns / 1e9 * ck->speed);

    rc = rp_run_execute(&run);
    if (rc == 0 || run.started) {
        struct rp_summary sum;
        rp_report_summarize(&run, &sum);
        rp_report_print(&run, &sum, stdout);
        fflush(stdout);
        if (cfg.report_dir && rp_report_write(&run, &sum, cfg.report_dir) == 0)
            printf("  report       %s/report.json, report.txt, demand.svg, cost.svg, "
                   "binding-latency.svg\n",
                   cfg.report_dir);
        if (run.interrupted)
            code = 130;
        else if (rc)
            code = 1;
        else if (cfg.check && !sum.pass)
            code = 3;
    } else {
        code = 1;
    }
out:
    rp_run_free(&run);
    if (have_model)
        rp_model_free(&model);
    rp_trace_free(&trace);
    free(types);
    return code;
}
