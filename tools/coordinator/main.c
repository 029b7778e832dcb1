/*
 * main.c — bigfleet-coordinator (docs/coordinator.md): one replica of the
 * BigFleet coordinator, with its durable state and leader election in etcd,
 * and `bigfleet-coordinator ctl`, a small admin client of the service.
 *
 * Design notes
 *   - One io_uring loop (src/net): the gRPC server, the etcd client, the
 *     /metrics server and two timers (the election tick, a third of the
 *     lease TTL; the rebalance pass, --rebalance-interval).
 *   - SIGTERM/SIGINT: revoke the lease (the next leader takes over at
 *     once), then exit 0. kill -9 leaves the lease to expire (--lease-ttl).
 *   - Exit codes: 0 orderly, 1 runtime failure, 2 usage.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bigfleet/config.h"
#include "bigfleet/log.h"
#include "bigfleet/net.h"
#include "bigfleet/simprovider.h"
#include "bigfleet/util.h"
#include "coordinator.h"

static struct bf_net_loop *g_loop;

static void on_signal(int sig)
{
    (void)sig;
    if (g_loop)
        bf_net_loop_stop_async(g_loop);
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: bigfleet-coordinator [options]\n"
            "       bigfleet-coordinator ctl --coordinator ADDR[,ADDR...] COMMAND [ARGS]\n"
            "\n"
            "A BigFleet coordinator replica: bigfleet.v1alpha1.Coordinator on --listen, state\n"
            "and leader election in etcd, the seed-002 rebalance loop on the leader.\n"
            "\n"
            "  --id NAME                  replica name (default: the host name and pid)\n"
            "  --listen ADDR              gRPC address (default 127.0.0.1:7790)\n"
            "  --metrics-addr ADDR        /metrics, /healthz, /readyz (default 127.0.0.1:7791; "
            "0 = none)\n"
            "  --etcd-endpoints LIST      etcd gRPC endpoints (default 127.0.0.1:2379)\n"
            "  --etcd-prefix P            key prefix (default /bigfleet/coordinator/)\n"
            "  --etcd-timeout DUR         per etcd call (default 5s)\n"
            "  --lease-ttl SECONDS        leader lease (default 10)\n"
            "  --rebalance-interval DUR   rebalance pass period (default 5s)\n"
            "  --rebalance BOOL           run the rebalance loop (default true)\n"
            "  --min-age N                cheap tiers need age_cycles > N (default 5)\n"
            "  --preempt-min-age N        Tier 3 needs age_cycles > N (default 12)\n"
            "  --cooldown-passes N        reverse-flow block after a move (default 8)\n"
            "  --donor-margin N           machines of a flow a donor keeps (default 1)\n"
            "  --min-benefit F            least share of a need one move covers (default 0.25)\n"
            "  --tier3 BOOL               allow cross-shard drains (default true)\n"
            "  --catalog FILE             instance types (openb node list or catalog CSV):\n"
            "                             sizes moves from deficits (default: 1 machine a move)\n"
            "  --quota-provider NAME      quota ledger key (default default)\n"
            "  --quota-region NAME        (default default)\n"
            "  --log-level LEVEL          debug|info|warn|error (default info)\n"
            "  --help, --version\n"
            "\n"
            "ctl commands: assign-domain KEY VALUE SHARD | unassign-domain KEY VALUE |\n"
            "  assign-cluster CLUSTER SHARD | remove-shard SHARD | list-shards | list-domains |\n"
            "  list-clusters | list-quotas | list-reports [SHARD]\n");
}

static bool parse_bool(const char *s, bool *out)
{
    if (!strcmp(s, "true") || !strcmp(s, "1")) {
        *out = true;
        return true;
    }
    if (!strcmp(s, "false") || !strcmp(s, "0")) {
        *out = false;
        return true;
    }
    return false;
}

static bool parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *e;
    errno = 0;
    long long v = strtoll(s, &e, 10);
    if (errno || *e || e == s || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static bool set_str(char *dst, size_t cap, const char *v)
{
    if (strlen(v) >= cap)
        return false;
    strcpy(dst, v);
    return true;
}

int co_ctl_main(int argc, char **argv);

static struct coord g_c;

static void on_tick(struct bf_net_timer *t, void *arg)
{
    (void)t;
    co_leader_tick(arg);
}

static void on_rebalance(struct bf_net_timer *t, void *arg)
{
    (void)t;
    co_rebalance_pass(arg);
}

static int load_catalog(struct coord *c)
{
    if (!c->cfg.catalog[0])
        return 0;
    struct bf_sim_type *ts = NULL;
    size_t n = 0;
    char err[256] = "";
    int rc = bf_sim_catalog_load(c->cfg.catalog, false, &ts, &n, err, sizeof err);
    if (rc) {
        fprintf(stderr, "bigfleet-coordinator: --catalog %s: %s\n", c->cfg.catalog,
                err[0] ? err : strerror(-rc));
        return rc;
    }
    c->types = calloc(n ? n : 1, sizeof *c->types);
    if (!c->types) {
        free(ts);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        c->types[i].name = strdup(ts[i].name);
        c->types[i].alloc[0] = ts[i].cpu_milli;
        c->types[i].alloc[1] = ts[i].memory_mib;
        c->types[i].alloc[2] = (int64_t)ts[i].gpus * 1000;
    }
    c->n_types = n;
    free(ts);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "ctl"))
        return co_ctl_main(argc - 1, argv + 1);
    struct coord *c = &g_c;
    struct co_config *cfg = &c->cfg;
    char host[64] = "coordinator";
    gethostname(host, sizeof host - 1);
    snprintf(cfg->id, sizeof cfg->id, "%s-%d", host, (int)getpid());
    strcpy(cfg->listen, "127.0.0.1:7790");
    strcpy(cfg->metrics, "127.0.0.1:7791");
    strcpy(cfg->etcd, "127.0.0.1:2379");
    strcpy(cfg->prefix, "/bigfleet/coordinator/");
    strcpy(cfg->quota_provider, "default");
    strcpy(cfg->quota_region, "default");
    cfg->lease_ttl_s = 10;
    cfg->rebalance_ns = 5 * BF_NS_PER_SEC;
    cfg->etcd_timeout_ns = 5 * BF_NS_PER_SEC;
    cfg->rebalance = true;
    co_rb_config_defaults(&cfg->rb);
    const char *log_level = "info";
    enum {
        O_ID = 256,
        O_LISTEN,
        O_METRICS,
        O_ETCD,
        O_PREFIX,
        O_ETCD_TIMEOUT,
        O_TTL,
        O_INTERVAL,
        O_REBALANCE,
        O_MIN_AGE,
        O_PMIN_AGE,
        O_COOL,
        O_MARGIN,
        O_BENEFIT,
        O_TIER3,
        O_CATALOG,
        O_QP,
        O_QR,
        O_LOG,
        O_HELP,
        O_VERSION
    };
    static const struct option opts[] = {
        {"id", 1, NULL, O_ID},
        {"listen", 1, NULL, O_LISTEN},
        {"metrics-addr", 1, NULL, O_METRICS},
        {"etcd-endpoints", 1, NULL, O_ETCD},
        {"etcd-prefix", 1, NULL, O_PREFIX},
        {"etcd-timeout", 1, NULL, O_ETCD_TIMEOUT},
        {"lease-ttl", 1, NULL, O_TTL},
        {"rebalance-interval", 1, NULL, O_INTERVAL},
        {"rebalance", 1, NULL, O_REBALANCE},
        {"min-age", 1, NULL, O_MIN_AGE},
        {"preempt-min-age", 1, NULL, O_PMIN_AGE},
        {"cooldown-passes", 1, NULL, O_COOL},
        {"donor-margin", 1, NULL, O_MARGIN},
        {"min-benefit", 1, NULL, O_BENEFIT},
        {"tier3", 1, NULL, O_TIER3},
        {"catalog", 1, NULL, O_CATALOG},
        {"quota-provider", 1, NULL, O_QP},
        {"quota-region", 1, NULL, O_QR},
        {"log-level", 1, NULL, O_LOG},
        {"help", 0, NULL, O_HELP},
        {"version", 0, NULL, O_VERSION},
        {0},
    };
    int o;
    int64_t v;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        bool ok = true;
        switch (o) {
        case O_ID:
            ok = optarg[0] && set_str(cfg->id, sizeof cfg->id, optarg);
            break;
        case O_LISTEN:
            ok = !bf_net_addr_check(optarg) && set_str(cfg->listen, sizeof cfg->listen, optarg);
            break;
        case O_METRICS:
            ok = (!strcmp(optarg, "0") || !bf_net_addr_check(optarg)) &&
                 set_str(cfg->metrics, sizeof cfg->metrics, optarg);
            break;
        case O_ETCD:
            ok = set_str(cfg->etcd, sizeof cfg->etcd, optarg);
            break;
        case O_PREFIX:
            ok = optarg[0] && optarg[strlen(optarg) - 1] == '/' &&
                 set_str(cfg->prefix, sizeof cfg->prefix, optarg);
            break;
        case O_ETCD_TIMEOUT:
            ok = !bf_parse_duration(optarg, &cfg->etcd_timeout_ns) && cfg->etcd_timeout_ns > 0;
            break;
        case O_TTL:
            ok = parse_int(optarg, 2, 3600, &cfg->lease_ttl_s);
            break;
        case O_INTERVAL:
            ok = !bf_parse_duration(optarg, &cfg->rebalance_ns) &&
                 cfg->rebalance_ns >= 10 * BF_NS_PER_MS;
            break;
        case O_REBALANCE:
            ok = parse_bool(optarg, &cfg->rebalance);
            break;
        case O_MIN_AGE:
            ok = parse_int(optarg, 0, 1000000, &v) && ((cfg->rb.min_age = (int32_t)v), 1);
            break;
        case O_PMIN_AGE:
            ok = parse_int(optarg, 0, 1000000, &v) && ((cfg->rb.preempt_min_age = (int32_t)v), 1);
            break;
        case O_COOL:
            ok = parse_int(optarg, 0, 1000000, &v) && ((cfg->rb.cooldown_passes = (uint32_t)v), 1);
            break;
        case O_MARGIN:
            ok = parse_int(optarg, 0, 1000000, &v) && ((cfg->rb.donor_margin = (int32_t)v), 1);
            break;
        case O_BENEFIT: {
            char *e;
            cfg->rb.min_benefit = strtod(optarg, &e);
            ok = !*e && cfg->rb.min_benefit >= 0 && cfg->rb.min_benefit <= 1;
            break;
        }
        case O_TIER3:
            ok = parse_bool(optarg, &cfg->rb.tier3);
            break;
        case O_CATALOG:
            ok = set_str(cfg->catalog, sizeof cfg->catalog, optarg);
            break;
        case O_QP:
            ok = optarg[0] && set_str(cfg->quota_provider, sizeof cfg->quota_provider, optarg);
            break;
        case O_QR:
            ok = set_str(cfg->quota_region, sizeof cfg->quota_region, optarg);
            break;
        case O_LOG:
            log_level = optarg;
            ok = bf_log_level_parse(optarg) >= 0;
            break;
        case O_HELP:
            usage(stdout);
            return 0;
        case O_VERSION:
            printf("bigfleet-coordinator %s\n", BF_VERSION);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "bigfleet-coordinator: bad value for --%s: \"%s\"\n",
                    opts[o - O_ID].name, optarg);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "bigfleet-coordinator: unexpected argument \"%s\"\n", argv[optind]);
        return 2;
    }
    bf_log_init("coordinator", bf_log_level_parse(log_level));
    if (load_catalog(c))
        return 2;
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    int rc = bf_net_loop_new(NULL, &g_loop);
    if (rc) {
        BF_ERROR("cannot create the io_uring loop", "error=\"%s\"", strerror(-rc));
        return 1;
    }
    c->loop = g_loop;
    int exit_code = 1;
    if ((rc = co_etcd_new(g_loop, cfg->etcd, cfg->etcd_timeout_ns, &c->etcd))) {
        BF_ERROR("bad --etcd-endpoints", "value=\"%s\"", cfg->etcd);
        exit_code = 2;
        goto out;
    }
    if (co_server_start(c) || co_http_start(c))
        goto out;
    c->tick = bf_net_timer_new(g_loop, on_tick, c);
    c->rebal = bf_net_timer_new(g_loop, on_rebalance, c);
    if (!c->tick || !c->rebal)
        goto out;
    int64_t tick = cfg->lease_ttl_s * BF_NS_PER_SEC / 3;
    bf_net_timer_start(c->tick, 0, tick < 200 * BF_NS_PER_MS ? 200 * BF_NS_PER_MS : tick);
    bf_net_timer_start(c->rebal, cfg->rebalance_ns, cfg->rebalance_ns);
    BF_INFO("coordinator started",
            "id=%s listen=%s metrics=%s etcd=%s prefix=%s lease_ttl_s=%" PRId64
            " rebalance_interval_ms=%" PRId64 " catalog_types=%zu",
            cfg->id, cfg->listen, cfg->metrics, cfg->etcd, cfg->prefix, cfg->lease_ttl_s,
            (int64_t)(cfg->rebalance_ns / BF_NS_PER_MS), c->n_types);
    bf_net_loop_run(g_loop);
    BF_INFO("coordinator stopping", "id=%s leader=%d", cfg->id, co_is_leader(c));
    co_leader_stop(c);
    /* let the revoke go out (bounded) */
    for (int i = 0; i < 20; i++)
        bf_net_loop_run_once(g_loop, 10 * BF_NS_PER_MS);
    exit_code = 0;
out:
    bf_net_timer_free(c->tick);
    bf_net_timer_free(c->rebal);
    if (c->http)
        bf_net_http_server_free(c->http);
    co_server_stop(c);
    co_etcd_free(c->etcd);
    co_store_clear(&c->st);
    for (size_t i = 0; i < c->n_types; i++)
        free((char *)c->types[i].name);
    free(c->types);
    bf_net_loop_free(g_loop);
    return exit_code;
}
