/*
 * main.c — bigfleet-simprovider: the simulated CapacityProvider as a gRPC
 * server (the appliance's embedded default when --provider-addr is empty,
 * and the provider of the conformance suite, the integration tests and the
 * benchmarks). The core is libbfsim (include/bigfleet/simprovider.h,
 * docs/simprovider.md); this file only parses flags, serves it on a bf_net
 * loop (src/simprovider/sim_server.c) and stops cleanly.
 *
 * Flags: --addr (default :9000), --tls-cert/--tls-key/--tls-ca (all three:
 * mTLS; none: h2c), --http-addr (optional HTTP/1.1: /healthz, /stats JSON,
 * /metrics, and the test-only fault injection /admin/fail?id=&reason=),
 * --rpc-latency D (the reply latency of all six RPCs at once), --log-level,
 * --help, --version; every option of bf_sim_config_set() as --<name> (see
 * --help); conformance-harness aliases --seed-count N (= --seed-speculative)
 * and --use-fake-backend (accepted, no effect: the simulation is the backend).
 *
 * Start-up prints "READY grpc=<port> http=<port|0>" on stdout once listening.
 * SIGTERM/SIGINT: GOAWAY, up to 2 s for calls in flight, state flushed (with
 * --state), exit 0. Exit 2 on a usage error, 1 when the server cannot start.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bigfleet/config.h"
#include "bigfleet/log.h"
#include "bigfleet/model.h"
#include "bigfleet/net.h"
#include "bigfleet/simprovider.h"
#include "bigfleet/util.h"
#include "simprovider/sim_server.h"

/* Options of bf_sim_config_set(); 1 = the value is optional (booleans). */
static const struct {
    const char *name;
    int optional;
} sim_opts[] = {
    {"provider", 0},
    {"catalog", 0},
    {"spot-variants", 1},
    {"zones", 0},
    {"zone-names", 0},
    {"racks-per-zone", 0},
    {"seed-speculative", 0},
    {"seed-speculative-per-node", 0},
    {"seed-idle", 0},
    {"seed-configured", 0},
    {"seed-clusters", 0},
    {"cluster-prefix", 0},
    {"seed-priority", 0},
    {"create-latency", 0},
    {"configure-latency", 0},
    {"drain-latency", 0},
    {"delete-latency", 0},
    {"create-failure", 0},
    {"configure-failure", 0},
    {"drain-failure", 0},
    {"delete-failure", 0},
    {"defer-instant", 1},
    {"create-reply-latency", 0},
    {"configure-reply-latency", 0},
    {"drain-reply-latency", 0},
    {"delete-reply-latency", 0},
    {"get-reply-latency", 0},
    {"list-reply-latency", 0},
    {"create-error", 0},
    {"configure-error", 0},
    {"drain-error", 0},
    {"delete-error", 0},
    {"get-error", 0},
    {"list-error", 0},
    {"max-hosts", 0},
    {"max-hosts-per-type", 0},
    {"spot-interruption-rate", 0},
    {"spot-tick", 0},
    {"bare-metal-delete", 0},
    {"max-metadata-bytes", 0},
    {"state", 0},
    {"state-fsync", 1},
    {"state-map-size", 0},
    {"rng-seed", 0},
};
#define N_SIM_OPTS (sizeof sim_opts / sizeof sim_opts[0])

enum {
    O_ADDR = 1000,
    O_HTTP,
    O_CERT,
    O_KEY,
    O_CA,
    O_RPC_LATENCY,
    O_SEED_COUNT,
    O_FAKE_BACKEND,
    O_LOG_LEVEL,
    O_HELP,
    O_VERSION,
    O_SIM = 2000
};

static struct bf_net_loop *g_loop;
static struct bf_sim *g_sim;
static struct bf_simsrv *g_srv;

static void usage(FILE *f, const char *prog)
{
    fprintf(f,
            "usage: %s [flags]\n"
            "bigfleet-simprovider: a simulated bigfleet.v1alpha1.CapacityProvider (gRPC)\n\n"
            "  --addr HOST:PORT                listen address (default :9000)\n"
            "  --tls-cert F --tls-key F --tls-ca F   mTLS (all three) or none (h2c)\n"
            "  --http-addr HOST:PORT           optional HTTP: /healthz /stats /metrics\n"
            "                                  /admin/fail?id=ID&reason=TEXT (test-only)\n"
            "  --rpc-latency D                 reply latency of all six RPCs (distribution)\n"
            "  --seed-count N                  alias of --seed-speculative\n"
            "  --use-fake-backend              accepted for the conformance harness; no effect\n"
            "  --log-level L                   debug, info, warn, error (default info)\n"
            "  --help, --version\n\n"
            "simulation:\n%s",
            prog, bf_sim_config_help());
}

static void on_signal(int sig)
{
    (void)sig;
    if (g_loop)
        bf_net_loop_stop_async(g_loop);
}

/* ------------------------------------------------------------ HTTP */

static int query_param(const char *q, const char *name, char *out, size_t n)
{
    size_t nl = strlen(name);
    for (const char *p = q; p && *p;) {
        const char *amp = strchr(p, '&');
        size_t l = amp ? (size_t)(amp - p) : strlen(p);
        if (l > nl && !strncmp(p, name, nl) && p[nl] == '=') {
            size_t o = 0;
            for (size_t i = nl + 1; i < l && o + 1 < n; i++) {
                char c = p[i];
                if (c == '+') {
                    c = ' ';
                } else if (c == '%' && i + 2 < l) {
                    char hex[3] = {p[i + 1], p[i + 2], 0};
                    c = (char)strtol(hex, NULL, 16);
                    i += 2;
                }
                out[o++] = c;
            }
            out[o] = 0;
            return 0;
        }
        p = amp ? amp + 1 : NULL;
    }
    return -ENOENT;
}

static void http_handler(const struct bf_net_http_request *req, struct bf_net_http_response *resp,
                         void *arg)
{
    (void)arg;
    struct bf_sim_stats st;
    bf_sim_get_stats(g_sim, &st);
    static const char *const kinds[BF_SIM_RPC_COUNT] = {"create", "configure", "drain",
                                                        "delete", "get",       "list"};
    if (!strcmp(req->path, "/healthz")) {
        bf_net_http_printf(resp, "ok\n");
    } else if (!strcmp(req->path, "/stats")) {
        bf_net_http_set_status(resp, 200, "application/json");
        bf_net_http_printf(resp, "{\"machines\":%zu,\"revision\":%lld,\"hosts_in_use\":%u",
                           bf_sim_machine_count(g_sim), (long long)bf_sim_revision(g_sim),
                           bf_sim_hosts_in_use(g_sim));
        bf_net_http_printf(resp, ",\"by_state\":{");
        for (int s = 1; s < BF_STATE_COUNT; s++)
            bf_net_http_printf(resp, "%s\"%s\":%zu", s > 1 ? "," : "", bf_state_name(s),
                               bf_sim_count_in_state(g_sim, s));
        bf_net_http_printf(resp, "}");
        const struct {
            const char *name;
            const uint64_t *v;
            int n;
        } arrays[] = {{"calls", st.calls, BF_SIM_RPC_COUNT},
                      {"accepted", st.accepted, BF_SIM_KIND_COUNT},
                      {"idempotent", st.idempotent, BF_SIM_KIND_COUNT},
                      {"completed", st.completed, BF_SIM_KIND_COUNT},
                      {"failed", st.failed, BF_SIM_KIND_COUNT}};
        for (size_t a = 0; a < sizeof arrays / sizeof arrays[0]; a++) {
            bf_net_http_printf(resp, ",\"%s\":{", arrays[a].name);
            for (int k = 0; k < arrays[a].n; k++)
                bf_net_http_printf(resp, "%s\"%s\":%llu", k ? "," : "", kinds[k],
                                   (unsigned long long)arrays[a].v[k]);
            bf_net_http_printf(resp, "}");
        }
        bf_net_http_printf(resp,
                           ",\"discarded\":%llu,\"fenced\":%llu,\"exhausted\":%llu,"
                           "\"spot_interruptions\":%llu,\"injected_errors\":%llu,"
                           "\"flushes\":%llu,\"flush_errors\":%llu}\n",
                           (unsigned long long)st.discarded, (unsigned long long)st.fenced,
                           (unsigned long long)st.exhausted,
                           (unsigned long long)st.spot_interruptions,
                           (unsigned long long)st.injected_errors, (unsigned long long)st.flushes,
                           (unsigned long long)st.flush_errors);
    } else if (!strcmp(req->path, "/metrics")) {
        bf_net_http_set_status(resp, 200, "text/plain; version=0.0.4; charset=utf-8");
        bf_net_http_printf(resp, "# HELP bigfleet_sim_calls_total RPCs received by method.\n"
                                 "# TYPE bigfleet_sim_calls_total counter\n");
        for (int k = 0; k < BF_SIM_RPC_COUNT; k++)
            bf_net_http_printf(resp, "bigfleet_sim_calls_total{method=\"%s\"} %llu\n",
                               bf_sim_rpc_name(k), (unsigned long long)st.calls[k]);
        bf_net_http_printf(resp, "# HELP bigfleet_sim_machines Machines in the pool by state.\n"
                                 "# TYPE bigfleet_sim_machines gauge\n");
        for (int s = 1; s < BF_STATE_COUNT; s++)
            bf_net_http_printf(resp, "bigfleet_sim_machines{state=\"%s\"} %zu\n", bf_state_name(s),
                               bf_sim_count_in_state(g_sim, s));
        bf_net_http_printf(resp,
                           "# HELP bigfleet_sim_fenced_total FAILED_PRECONDITION replies.\n"
                           "# TYPE bigfleet_sim_fenced_total counter\n"
                           "bigfleet_sim_fenced_total %llu\n",
                           (unsigned long long)st.fenced);
    } else if (!strcmp(req->path, "/admin/fail")) {
        char id[1100], reason[512];
        if (query_param(req->query, "id", id, sizeof id) ||
            query_param(req->query, "reason", reason, sizeof reason)) {
            bf_net_http_set_status(resp, 400, NULL);
            bf_net_http_printf(resp, "need id and reason\n");
            return;
        }
        int rc = bf_sim_fail_machine(g_sim, id, reason, bf_mono_ns());
        bf_simsrv_rearm(g_srv);
        bf_net_http_set_status(resp, rc == 0 ? 200 : rc == -ENOENT ? 404 : 400, NULL);
        bf_net_http_printf(resp, "%s\n", rc == 0 ? "failed" : strerror(-rc));
    } else {
        bf_net_http_set_status(resp, 404, NULL);
        bf_net_http_printf(resp, "not found\n");
    }
}

/* ------------------------------------------------------------ main */

static bool g_shutdown_done;
static void shutdown_done(void *arg)
{
    (void)arg;
    g_shutdown_done = true;
}

int main(int argc, char **argv)
{
    const char *addr = ":9000", *http_addr = NULL, *log_level = "info";
    struct bf_net_tls_config tls = {0};
    struct bf_sim_config cfg;
    bf_sim_config_init(&cfg);

    struct option lo[N_SIM_OPTS + 16];
    size_t n = 0;
    lo[n++] = (struct option){"addr", required_argument, 0, O_ADDR};
    lo[n++] = (struct option){"http-addr", required_argument, 0, O_HTTP};
    lo[n++] = (struct option){"tls-cert", required_argument, 0, O_CERT};
    lo[n++] = (struct option){"tls-key", required_argument, 0, O_KEY};
    lo[n++] = (struct option){"tls-ca", required_argument, 0, O_CA};
    lo[n++] = (struct option){"rpc-latency", required_argument, 0, O_RPC_LATENCY};
    lo[n++] = (struct option){"seed-count", required_argument, 0, O_SEED_COUNT};
    lo[n++] = (struct option){"use-fake-backend", optional_argument, 0, O_FAKE_BACKEND};
    lo[n++] = (struct option){"log-level", required_argument, 0, O_LOG_LEVEL};
    lo[n++] = (struct option){"help", no_argument, 0, O_HELP};
    lo[n++] = (struct option){"version", no_argument, 0, O_VERSION};
    for (size_t i = 0; i < N_SIM_OPTS; i++)
        lo[n++] = (struct option){sim_opts[i].name,
                                  sim_opts[i].optional ? optional_argument : required_argument, 0,
                                  O_SIM + (int)i};
    lo[n] = (struct option){0, 0, 0, 0};

    char err[256];
    int o;
    opterr = 0;
    while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        int rc = 0;
        switch (o) {
        case O_ADDR:
            addr = optarg;
            break;
        case O_HTTP:
            http_addr = optarg;
            break;
        case O_CERT:
            tls.cert_file = optarg;
            break;
        case O_KEY:
            tls.key_file = optarg;
            break;
        case O_CA:
            tls.ca_file = optarg;
            break;
        case O_LOG_LEVEL:
            if (bf_log_level_parse(optarg) < 0) {
                fprintf(stderr, "bigfleet-simprovider: --log-level: unknown level \"%s\"\n",
                        optarg);
                return 2;
            }
            log_level = optarg;
            break;
        case O_RPC_LATENCY: {
            static const char *const rl[] = {"create-reply-latency", "configure-reply-latency",
                                             "drain-reply-latency",  "delete-reply-latency",
                                             "get-reply-latency",    "list-reply-latency"};
            for (size_t i = 0; i < 6 && !rc; i++)
                rc = bf_sim_config_set(&cfg, rl[i], optarg, err, sizeof err);
            if (rc)
                snprintf(err, sizeof err, "--rpc-latency: bad value \"%s\"", optarg);
            break;
        }
        case O_SEED_COUNT:
            rc = bf_sim_config_set(&cfg, "seed-speculative", optarg, err, sizeof err);
            if (rc)
                snprintf(err, sizeof err, "--seed-count: bad value \"%s\"", optarg);
            break;
        case O_FAKE_BACKEND:
            break;
        case O_HELP:
            usage(stdout, argv[0]);
            return 0;
        case O_VERSION:
            printf("bigfleet-simprovider %s\n", BF_VERSION);
            return 0;
        case '?':
            fprintf(stderr, "bigfleet-simprovider: unknown flag or missing value: %s\n",
                    argv[optind - 1]);
            usage(stderr, argv[0]);
            return 2;
        default:
            if (o >= O_SIM && o < O_SIM + (int)N_SIM_OPTS) {
                const char *name = sim_opts[o - O_SIM].name;
                rc = bf_sim_config_set(&cfg, name, optarg ? optarg : "true", err, sizeof err);
            }
            break;
        }
        if (rc) {
            fprintf(stderr, "bigfleet-simprovider: %s\n", err);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "bigfleet-simprovider: unexpected argument \"%s\"\n", argv[optind]);
        return 2;
    }
    if (bf_net_tls_config_check(&tls) < 0) {
        fprintf(stderr, "bigfleet-simprovider: --tls-cert, --tls-key and --tls-ca go together\n");
        return 2;
    }
    bf_log_init("simprovider", bf_log_level_parse(log_level));
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    int rc = bf_sim_open(&cfg, &g_sim, err, sizeof err);
    if (rc) {
        BF_ERROR("cannot open the simulated provider", "error=\"%s\"", err);
        fprintf(stderr, "bigfleet-simprovider: %s\n", err);
        return rc == -EINVAL ? 2 : 1;
    }
    int exit_code = 1;
    struct bf_net_http_server *hs = NULL;
    if ((rc = bf_net_loop_new(NULL, &g_loop)) < 0) {
        BF_ERROR("cannot create the event loop", "error=\"%s\"", strerror(-rc));
        goto out_sim;
    }
    struct bf_simsrv_opts so = {.addr = addr, .tls = tls};
    /* A predecessor killed with SIGKILL can keep its listening socket for a
     * moment (its io_uring is torn down asynchronously): retry the bind for
     * up to 3 s instead of failing the restart. */
    int64_t bind_until = bf_mono_ns() + 3 * BF_NS_PER_SEC;
    while ((rc = bf_simsrv_new(g_loop, g_sim, &so, &g_srv)) == -EADDRINUSE &&
           bf_mono_ns() < bind_until)
        usleep(50 * 1000);
    if (rc < 0) {
        BF_ERROR("cannot listen", "addr=%s error=\"%s\"", addr, strerror(-rc));
        goto out_loop;
    }
    if (http_addr && http_addr[0]) {
        struct bf_net_http_server_opts ho = {.addr = http_addr, .handler = http_handler};
        if ((rc = bf_net_http_server_new(g_loop, &ho, &hs)) < 0) {
            BF_ERROR("cannot listen (HTTP)", "addr=%s error=\"%s\"", http_addr, strerror(-rc));
            goto out_srv;
        }
    }
    size_t ntypes;
    bf_sim_types(g_sim, &ntypes);
    BF_INFO("listening",
            "addr=%s port=%u http_port=%u machines=%zu types=%zu revision=%lld state=%s tls=%s",
            addr, bf_simsrv_port(g_srv), hs ? bf_net_http_server_port(hs) : 0,
            bf_sim_machine_count(g_sim), ntypes, (long long)bf_sim_revision(g_sim),
            cfg.state_path ? cfg.state_path : "memory", tls.cert_file ? "mtls" : "off");
    printf("READY grpc=%u http=%u\n", bf_simsrv_port(g_srv), hs ? bf_net_http_server_port(hs) : 0);
    fflush(stdout);

    rc = bf_net_loop_run(g_loop);
    BF_INFO("stopping", "rc=%d", rc);
    bf_simsrv_shutdown(g_srv, 2 * BF_NS_PER_SEC, shutdown_done, NULL);
    int64_t until = bf_mono_ns() + 3 * BF_NS_PER_SEC;
    while (!g_shutdown_done && bf_mono_ns() < until)
        bf_net_loop_run_once(g_loop, 50 * BF_NS_PER_MS);
    exit_code = rc < 0 ? 1 : 0;
    bf_net_http_server_free(hs);
out_srv:
    bf_simsrv_free(g_srv);
    for (int i = 0; i < 5; i++)
        bf_net_loop_run_once(g_loop, 5 * BF_NS_PER_MS);
out_loop:
    bf_net_loop_free(g_loop);
out_sim:
    bf_sim_close(g_sim);
    return exit_code;
}
