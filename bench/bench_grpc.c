/*
 * bench_grpc.c — figures for the gRPC stack (src/net): prints them and writes
 * results/bench_grpc.json. Not a test: nothing is asserted.
 *
 *   1. unary RPCs/s, our client -> our server, over h2c and over TLS 1.3;
 *      the server runs in a child process pinned to CPU 0, the client is
 *      pinned to CPU 1; the server's CPU time (user+sys from /proc) gives
 *      RPCs per server-CPU-second ("on one core") and CPU per 1,000 RPCs;
 *   2. the same unary load from h2load (nghttp2-client), if installed
 *      (h2c only; h2load cannot see grpc-status, the server counts OKs);
 *   3. concurrent open bidi streams held (Shard/Session, Hello + Ack each):
 *      the server's RSS before and after (the connections quiet for 1.5 s:
 *      idle), per stream, and what the second half of the connections
 *      adds (without per-process costs), then rounds of one
 *      rollup per stream (one message in, one ack out) with the server's
 *      CPU time per 1,000 messages. Two shapes: one connection per stream
 *      (one operator per cluster), 100 streams per connection, and one mTLS
 *      connection per stream (client certificate bigfleet://cluster/c1).
 *
 *   bench_grpc [--seconds S] [--streams N] [--out FILE] [--quick] [--bidi-only]
 *
 *   --bidi-only skips 1 and 2 (the connection-memory figures alone).
 */
#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_common.h"
#include "bigfleet/log.h"
#include "bigfleet/net.h"
#include "bigfleet/util.h"
#include "bigfleet/v1alpha1/provider.pb-c.h"
#include "bigfleet/v1alpha1/shard.pb-c.h"

#define P_GET     "/bigfleet.v1alpha1.CapacityProvider/Get"
#define P_SESSION "/bigfleet.v1alpha1.Shard/Session"

/* ------------------------------------------------------------ server child */

static struct bf_net_loop *g_sloop;
static uint64_t g_ok;

static void on_term(int sig)
{
    (void)sig;
    if (g_sloop)
        bf_net_loop_stop_async(g_sloop);
}

static void get_msg(struct bf_net_call *call, const uint8_t *m, size_t n, void *arg)
{
    (void)arg;
    /* echo the request bytes back as a Machine{id} (field 1 has the same tag) */
    bf_net_call_reply(call, m, n);
    g_ok++;
}

static const uint8_t ACK[] = {0x0a, 0x07, 0x0a, 0x05, 'h', 'e', 'l', 'l', 'o'};

static void session_msg(struct bf_net_call *call, const uint8_t *m, size_t n, void *arg)
{
    (void)m, (void)n, (void)arg;
    bf_net_call_send(call, ACK, sizeof ACK); /* ShardMessage{ack{echo:"hello"}} */
}

static void session_half_close(struct bf_net_call *call, void *arg)
{
    (void)arg;
    bf_net_call_finish(call, BF_NET_OK, NULL);
}

static void pin(int cpu)
{
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
        return;
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    sched_setaffinity(0, sizeof s, &s);
}

static void raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

/* The server process: a fresh exec of this binary (so its RSS is its own,
 * not pages inherited from the client), started with --serve-fd. */
/* jemalloc introspection when linked (not in sanitizer builds) */
extern int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen)
    __attribute__((weak));
static volatile sig_atomic_t g_report;
static int g_report_fd = -1;

static void on_usr1(int sig)
{
    (void)sig;
    g_report = 1;
}

/* On SIGUSR1: return freed pages to the kernel (so RSS shows live memory, not
 * jemalloc's dirty-page cache) and report the live heap bytes on the pipe. */
static void report_tick(struct bf_net_timer *t, void *arg)
{
    (void)t, (void)arg;
    if (!g_report)
        return;
    g_report = 0;
    uint64_t allocated = 0;
    if (mallctl) {
        mallctl("arena.4096.purge", NULL, NULL, NULL, 0); /* MALLCTL_ARENAS_ALL */
        uint64_t epoch = 1;
        size_t sz = sizeof epoch;
        mallctl("epoch", &epoch, &sz, &epoch, sz);
        size_t a = 0;
        sz = sizeof a;
        if (mallctl("stats.allocated", &a, &sz, NULL, 0) == 0)
            allocated = a;
    }
    uint64_t rep[2] = {allocated, bf_net_tls_heap_bytes()};
    if (write(g_report_fd, rep, sizeof rep) != (ssize_t)sizeof rep)
        g_report_fd = -1;
}

static int serve_main(int fd, const char *cert, const char *key, const char *ca)
{
    signal(SIGUSR1, on_usr1);
    pin(0);
    raise_nofile();
    signal(SIGTERM, on_term);
    signal(SIGPIPE, SIG_IGN);
    struct bf_net_loop_opts lo = {.recv_buffers = 1024};
    if (bf_net_loop_new(&lo, &g_sloop) < 0)
        return 1;
    static const struct bf_net_method methods[] = {
        {P_GET, BF_NET_UNARY, NULL, get_msg, NULL, NULL, NULL, NULL},
        {P_SESSION, BF_NET_BIDI_STREAMING, NULL, session_msg, session_half_close, NULL, NULL, NULL},
    };
    /* The unary modes open tens of thousands of streams a second on one
     * connection, far above the default flood limit (200/s) that a shard's
     * peers stay under: raise it to the most the server accepts, so the
     * figures are the framing's cost, not reconnections after GOAWAY. */
    struct bf_net_server_opts so = {.addr = "127.0.0.1:0",
                                    .methods = methods,
                                    .n_methods = 2,
                                    .max_connections = 65536,
                                    .max_new_streams_per_second = 1000000};
    so.tls.cert_file = cert;
    so.tls.key_file = key;
    so.tls.ca_file = ca;
    struct bf_net_server *srv;
    if (bf_net_server_new(g_sloop, &so, &srv) < 0)
        return 1;
    uint16_t pt = bf_net_server_port(srv);
    if (write(fd, &pt, sizeof pt) != (ssize_t)sizeof pt)
        return 1;
    g_report_fd = fd;
    struct bf_net_timer *rt = bf_net_timer_new(g_sloop, report_tick, NULL);
    bf_net_timer_start(rt, 20 * BF_NS_PER_MS, 20 * BF_NS_PER_MS);
    bf_net_loop_run(g_sloop);
    bf_net_timer_free(rt);
    close(fd);
    bf_net_server_free(srv);
    bf_net_loop_free(g_sloop);
    return 0;
}

static int g_server_rfd = -1;

/* Starts the server process; returns its pid and port. */
static pid_t spawn_server(const struct bf_net_tls_config *tls, uint16_t *port)
{
    int p[2];
    if (pipe(p) < 0)
        return -1;
    pid_t pid = fork();
    if (pid != 0) {
        close(p[1]);
        if (read(p[0], port, sizeof *port) != (ssize_t)sizeof *port)
            *port = 0;
        g_server_rfd = p[0]; /* memory reports (server_mem) */
        return pid;
    }
    close(p[0]);
    char fdarg[16];
    snprintf(fdarg, sizeof fdarg, "%d", p[1]);
    if (tls && tls->ca_file)
        execl("/proc/self/exe", "bench_grpc", "--serve-fd", fdarg, "--cert", tls->cert_file,
              "--key", tls->key_file, "--ca", tls->ca_file, (char *)NULL);
    else if (tls)
        execl("/proc/self/exe", "bench_grpc", "--serve-fd", fdarg, "--cert", tls->cert_file,
              "--key", tls->key_file, (char *)NULL);
    else
        execl("/proc/self/exe", "bench_grpc", "--serve-fd", fdarg, (char *)NULL);
    _exit(127);
}

static void stop_server(pid_t pid)
{
    kill(pid, SIGTERM);
    int st;
    waitpid(pid, &st, 0);
    if (g_server_rfd >= 0)
        close(g_server_rfd);
    g_server_rfd = -1;
}

static long proc_rss_kb(pid_t pid);

/* The server's RSS after it purged freed pages, its live heap bytes, and
 * the part of them wolfSSL holds. */
static void server_mem(pid_t pid, long *rss_kb, uint64_t *heap, uint64_t *wolf)
{
    uint64_t rep[2] = {0, 0};
    kill(pid, SIGUSR1);
    if (read(g_server_rfd, rep, sizeof rep) != (ssize_t)sizeof rep)
        rep[0] = rep[1] = 0;
    *heap = rep[0];
    *wolf = rep[1];
    usleep(20000);
    *rss_kb = proc_rss_kb(pid);
}

static long proc_rss_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

/* ------------------------------------------------------------ unary load */

struct uload {
    struct bf_net_client *cl;
    int64_t end;
    uint64_t done, errors;
    int inflight;
};

static const uint8_t REQ[] = {0x0a, 0x02, 'm', '1'}; /* MachineRef{id:"m1"} */

static void issue(struct uload *u);

static void ucb(void *arg, int code, const char *msg, const uint8_t *resp, size_t len)
{
    (void)msg, (void)resp, (void)len;
    struct uload *u = arg;
    u->inflight--;
    if (code == BF_NET_OK)
        u->done++;
    else
        u->errors++;
    if (bf_mono_ns() < u->end)
        issue(u);
}

static void issue(struct uload *u)
{
    if (bf_net_client_unary(u->cl, P_GET, REQ, sizeof REQ, 10 * BF_NS_PER_SEC, ucb, u))
        u->inflight++;
    else
        u->errors++;
}

/* Every connection issues `depth` calls, each re-issued on completion until end. */
static void start_all(struct uload *u, int conns, int depth, int64_t end)
{
    for (int c = 0; c < conns; c++) {
        u[c].end = end;
        for (int i = 0; i < depth; i++)
            issue(&u[c]);
    }
}

static int inflight_total(const struct uload *u, int conns)
{
    int n = 0;
    for (int c = 0; c < conns; c++)
        n += u[c].inflight;
    return n;
}

struct unary_fig {
    double rps, server_cpu, rps_per_core, cpu_ms_per_1k, server_util;
    uint64_t calls, errors;
};

static struct unary_fig unary_bench(const struct bf_net_tls_config *stls,
                                    const struct bf_net_client_opts *ctmpl, int conns, int depth,
                                    double seconds)
{
    struct unary_fig fg = {0};
    uint16_t port;
    pid_t pid = spawn_server(stls, &port);
    if (pid < 0 || !port)
        return fg;
    struct bf_net_loop *l;
    bf_net_loop_new(NULL, &l);
    char addr[32];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", port);
    struct uload *u = calloc((size_t)conns, sizeof *u);
    for (int c = 0; c < conns; c++) {
        struct bf_net_client_opts o = *ctmpl;
        o.addr = addr;
        bf_net_client_new(l, &o, &u[c].cl);
    }
    /* warm-up */
    int64_t t = bf_mono_ns();
    start_all(u, conns, depth, t + BF_NS_PER_SEC / 2);
    for (;;) {
        bf_net_loop_run_once(l, 10 * BF_NS_PER_MS);
        if (!inflight_total(u, conns) && bf_mono_ns() > t + BF_NS_PER_SEC / 2)
            break;
    }
    /* measure */
    double cpu0 = bench_proc_cpu_s(pid);
    t = bf_mono_ns();
    for (int c = 0; c < conns; c++)
        u[c].done = u[c].errors = 0;
    start_all(u, conns, depth, t + (int64_t)(seconds * BF_NS_PER_SEC));
    for (;;) {
        bf_net_loop_run_once(l, 10 * BF_NS_PER_MS);
        if (!inflight_total(u, conns))
            break;
    }
    double wall = (double)(bf_mono_ns() - t) / BF_NS_PER_SEC;
    double cpu = bench_proc_cpu_s(pid) - cpu0;
    for (int c = 0; c < conns; c++) {
        fg.calls += u[c].done;
        fg.errors += u[c].errors;
        bf_net_client_free(u[c].cl);
    }
    for (int i = 0; i < 5; i++)
        bf_net_loop_run_once(l, 5 * BF_NS_PER_MS);
    bf_net_loop_free(l);
    free(u);
    stop_server(pid);
    fg.rps = (double)fg.calls / wall;
    fg.server_cpu = cpu;
    fg.server_util = cpu / wall;
    fg.rps_per_core = cpu > 0 ? (double)fg.calls / cpu : 0;
    fg.cpu_ms_per_1k = fg.calls ? cpu * 1000.0 / ((double)fg.calls / 1000.0) : 0;
    return fg;
}

/* ------------------------------------------------------------ h2load */

struct h2load_fig {
    bool ran;
    double rps, server_cpu, rps_per_core;
    uint64_t ok;
};

static struct h2load_fig h2load_bench(uint64_t n)
{
    struct h2load_fig fg = {0};
    if (system("command -v h2load >/dev/null 2>&1") != 0)
        return fg;
    uint16_t port;
    pid_t pid = spawn_server(NULL, &port);
    if (pid < 0 || !port)
        return fg;
    char body[] = "/tmp/bench_grpc_get.XXXXXX";
    int fd = mkstemp(body);
    const uint8_t framed[] = {0, 0, 0, 0, 4, 0x0a, 0x02, 'm', '1'};
    if (write(fd, framed, sizeof framed) != (ssize_t)sizeof framed) {
        close(fd);
        stop_server(pid);
        return fg;
    }
    close(fd);
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "h2load -n %llu -c 4 -m 64 -t 1 -d %s -H 'content-type: application/grpc' "
             "-H 'te: trailers' http://127.0.0.1:%u%s 2>&1",
             (unsigned long long)n, body, port, P_GET);
    double cpu0 = bench_proc_cpu_s(pid);
    FILE *p = popen(cmd, "r");
    char line[512];
    while (p && fgets(line, sizeof line, p)) {
        double rps;
        unsigned long long ok;
        const char *comma = strchr(line, ',');
        if (strncmp(line, "finished in", 11) == 0 && comma &&
            sscanf(comma + 1, " %lf req/s", &rps) == 1)
            fg.rps = rps;
        if (sscanf(line, "requests: %*u total, %*u started, %*u done, %llu succeeded", &ok) == 1)
            fg.ok = ok;
    }
    if (p)
        pclose(p);
    fg.server_cpu = bench_proc_cpu_s(pid) - cpu0;
    fg.rps_per_core = fg.server_cpu > 0 ? (double)fg.ok / fg.server_cpu : 0;
    fg.ran = fg.rps > 0;
    unlink(body);
    stop_server(pid);
    return fg;
}

/* ------------------------------------------------------------ bidi streams */

struct bstream {
    struct bf_net_stream *s;
    int acks;
    int done;
};
static int g_acks, g_done, g_fail;

static void b_msg(struct bf_net_stream *s, const uint8_t *m, size_t n, void *arg)
{
    (void)s, (void)m, (void)n;
    struct bstream *b = arg;
    b->acks++;
    g_acks++;
}

static void b_done(struct bf_net_stream *s, int code, const char *msg, void *arg)
{
    (void)s;
    struct bstream *b = arg;
    b->done = 1;
    b->s = NULL;
    g_done++;
    if (code != BF_NET_OK) {
        if (g_fail++ < 3)
            fprintf(stderr, "stream ended: %s %s\n", bf_net_code_name(code), msg);
    }
}

static const struct bf_net_stream_cbs BCBS = {b_msg, NULL, b_done};
static const uint8_t HELLO[] = {0x0a, 0x04, 0x0a, 0x02, 'c', '1'}; /* OperatorMessage{hello{c1}} */
static const uint8_t ROLLUP[] = {0x12, 0x04, 0x0a, 0x02, 'c', '1'};

struct bidi_fig {
    int streams, conns, opened;
    long rss_base_kb, rss_open_kb, rss_raw_kb, client_rss_kb, rss_half_kb;
    int opened_half;
    uint64_t heap_base, heap_open, wolf_base, wolf_open;
    double open_secs, bytes_per_stream, heap_per_stream, wolf_per_stream;
    double marginal_bytes_per_stream; /* second half of the connections only */
    double cpu_ms_per_1k_msgs;
    double msgs_per_sec;
    int rounds;
};

static bool wait_acks(struct bf_net_loop *l, int want, int64_t max_ns)
{
    int64_t until = bf_mono_ns() + max_ns;
    while (g_acks < want && bf_mono_ns() < until)
        bf_net_loop_run_once(l, 10 * BF_NS_PER_MS);
    return g_acks >= want;
}

#define IDLE_SETTLE_MS 1500

static void settle(struct bf_net_loop *l)
{
    int64_t until = bf_mono_ns() + IDLE_SETTLE_MS * BF_NS_PER_MS;
    while (bf_mono_ns() < until)
        bf_net_loop_run_once(l, 10 * BF_NS_PER_MS);
}

static struct bidi_fig bidi_bench(int streams, int conns, int rounds,
                                  const struct bf_net_tls_config *stls,
                                  const struct bf_net_tls_config *ctls)
{
    struct bidi_fig fg = {.streams = streams, .conns = conns, .rounds = rounds};
    uint16_t port;
    pid_t pid = spawn_server(stls, &port);
    if (pid < 0 || !port)
        return fg;
    usleep(100000);
    server_mem(pid, &fg.rss_base_kb, &fg.heap_base, &fg.wolf_base);
    struct bf_net_loop_opts lo = {.recv_buffers = 2048};
    struct bf_net_loop *l;
    bf_net_loop_new(&lo, &l);
    char addr[32];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", port);
    struct bf_net_client **cl = calloc((size_t)conns, sizeof *cl);
    struct bstream *bs = calloc((size_t)streams, sizeof *bs);
    g_acks = g_done = g_fail = 0;
    int64_t t0 = bf_mono_ns();
    /* open in batches so the listen backlog is never the bottleneck */
    int per = streams / conns;
    for (int c = 0; c < conns; c++) {
        struct bf_net_client_opts o = {.addr = addr, .connect_timeout_ns = 60 * BF_NS_PER_SEC};
        if (ctls)
            o.tls = *ctls;
        if (bf_net_client_new(l, &o, &cl[c]) < 0) {
            fprintf(stderr, "client %d failed\n", c);
            break;
        }
        for (int k = 0; k < per; k++) {
            struct bstream *b = &bs[c * per + k];
            b->s = bf_net_client_call(cl[c], P_SESSION, 0, &BCBS, b);
            if (b->s)
                bf_net_stream_send(b->s, HELLO, sizeof HELLO);
        }
        if (c % 250 == 249)
            wait_acks(l, (c + 1) * per, 30 * BF_NS_PER_SEC);
        if (c + 1 == conns / 2 && conns >= 2) {
            /* the marginal cost: what the second half adds, without the
             * per-process costs the first connections pay (recv buffer
             * ring pages, wolfSSL's ECC fixed-point cache, allocator
             * metadata) */
            wait_acks(l, (c + 1) * per, 60 * BF_NS_PER_SEC);
            settle(l);
            uint64_t h, w;
            server_mem(pid, &fg.rss_half_kb, &h, &w);
            fg.opened_half = g_acks;
        }
    }
    wait_acks(l, streams, 60 * BF_NS_PER_SEC);
    fg.open_secs = (double)(bf_mono_ns() - t0) / BF_NS_PER_SEC;
    fg.opened = g_acks;
    /* let the connections go idle (quiet for IDLE_SETTLE_MS: the server
     * gives idle connections' frame buffer pages back after 1 s), then the
     * server's RSS */
    settle(l);
    fg.rss_raw_kb = proc_rss_kb(pid); /* before purging jemalloc's dirty pages */
    server_mem(pid, &fg.rss_open_kb, &fg.heap_open, &fg.wolf_open);
    fg.client_rss_kb = proc_rss_kb(getpid());
    fg.bytes_per_stream =
        fg.opened ? (double)(fg.rss_open_kb - fg.rss_base_kb) * 1024.0 / fg.opened : 0;
    fg.heap_per_stream = fg.opened ? (double)(fg.heap_open - fg.heap_base) / fg.opened : 0;
    fg.marginal_bytes_per_stream =
        fg.opened > fg.opened_half && fg.opened_half > 0
            ? (double)(fg.rss_open_kb - fg.rss_half_kb) * 1024.0 / (fg.opened - fg.opened_half)
            : 0;
    fg.wolf_per_stream = fg.opened ? ((double)fg.wolf_open - (double)fg.wolf_base) / fg.opened : 0;
    /* message rounds: one rollup per stream in, one ack out */
    double cpu0 = bench_proc_cpu_s(pid);
    int64_t r0 = bf_mono_ns();
    /* at least `rounds`, and at least 2 s so the tick-granular CPU time is meaningful */
    int r;
    for (r = 0; r < rounds || bf_mono_ns() - r0 < 2 * BF_NS_PER_SEC; r++) {
        int base = g_acks;
        for (int i = 0; i < streams; i++)
            if (bs[i].s)
                bf_net_stream_send(bs[i].s, ROLLUP, sizeof ROLLUP);
        if (!wait_acks(l, base + fg.opened, 60 * BF_NS_PER_SEC))
            break;
    }
    rounds = fg.rounds = r;
    double secs = (double)(bf_mono_ns() - r0) / BF_NS_PER_SEC;
    double cpu = bench_proc_cpu_s(pid) - cpu0;
    double msgs = 2.0 * fg.opened * rounds;
    fg.cpu_ms_per_1k_msgs = msgs > 0 ? cpu * 1000.0 / (msgs / 1000.0) : 0;
    fg.msgs_per_sec = secs > 0 ? msgs / secs : 0;
    /* close: half-close every stream, wait for the OKs */
    for (int i = 0; i < streams; i++)
        if (bs[i].s)
            bf_net_stream_close_send(bs[i].s);
    int64_t until = bf_mono_ns() + 30 * BF_NS_PER_SEC;
    while (g_done < fg.opened && bf_mono_ns() < until)
        bf_net_loop_run_once(l, 10 * BF_NS_PER_MS);
    for (int c = 0; c < conns; c++)
        bf_net_client_free(cl[c]);
    for (int i = 0; i < 5; i++)
        bf_net_loop_run_once(l, 5 * BF_NS_PER_MS);
    bf_net_loop_free(l);
    free(cl);
    free(bs);
    stop_server(pid);
    return fg;
}

/* ------------------------------------------------------------ main */

static char g_pki[64];

static bool make_pki(void)
{
    snprintf(g_pki, sizeof g_pki, "/tmp/bench-grpc-pki-%d", getpid());
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s && cd %s && "
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
             "-keyout ca.key -out ca.crt -days 1 -subj /CN=bench-ca 2>/dev/null && "
             "openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
             "-keyout s.key -subj /CN=localhost -out s.csr 2>/dev/null && "
             "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > s.ext && "
             "openssl x509 -req -in s.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 "
             "-extfile s.ext -out s.crt 2>/dev/null && "
             "openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
             "-keyout c.key -subj /CN=c1 -out c.csr 2>/dev/null && "
             "printf 'subjectAltName=URI:bigfleet://cluster/c1\\n' > c.ext && "
             "openssl x509 -req -in c.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 "
             "-extfile c.ext -out c.crt 2>/dev/null",
             g_pki, g_pki);
    return system(cmd) == 0;
}

static void print_unary(FILE *f, const char *name, const struct unary_fig *u, int conns, int depth,
                        bool last)
{
    fprintf(f,
            "    \"%s\": {\"connections\": %d, \"in_flight_per_connection\": %d, \"calls\": %llu, "
            "\"errors\": %llu, \"rpcs_per_sec\": %.0f, \"server_cpu_utilization\": %.2f, "
            "\"rpcs_per_server_cpu_second\": %.0f, \"server_cpu_ms_per_1000_rpcs\": %.2f}%s\n",
            name, conns, depth, (unsigned long long)u->calls, (unsigned long long)u->errors, u->rps,
            u->server_util, u->rps_per_core, u->cpu_ms_per_1k, last ? "" : ",");
}

static void print_bidi(FILE *f, const char *name, const struct bidi_fig *b, bool last)
{
    fprintf(f,
            "    \"%s\": {\"streams\": %d, \"connections\": %d, \"opened\": %d, \"open_seconds\": "
            "%.2f, \"server_rss_base_kib\": %ld, \"server_rss_open_kib\": %ld, "
            "\"server_rss_open_before_purge_kib\": %ld, \"server_rss_bytes_per_stream\": %.0f, "
            "\"server_rss_marginal_bytes_per_stream\": %.0f, "
            "\"server_heap_bytes_per_stream\": %.0f, \"server_wolfssl_bytes_per_stream\": %.0f, "
            "\"client_rss_kib\": %ld, \"rounds\": %d, "
            "\"messages_per_sec\": %.0f, \"server_cpu_ms_per_1000_messages\": %.3f}%s\n",
            name, b->streams, b->conns, b->opened, b->open_secs, b->rss_base_kb, b->rss_open_kb,
            b->rss_raw_kb, b->bytes_per_stream, b->marginal_bytes_per_stream, b->heap_per_stream,
            b->wolf_per_stream, b->client_rss_kb, b->rounds, b->msgs_per_sec, b->cpu_ms_per_1k_msgs,
            last ? "" : ",");
}

int main(int argc, char **argv)
{
    double seconds = 3;
    int streams = 10000;
    const char *out = "results/bench_grpc.json";
    static const struct option lo[] = {
        {"seconds", required_argument, 0, 's'}, {"streams", required_argument, 0, 'n'},
        {"out", required_argument, 0, 'o'},     {"quick", no_argument, 0, 'q'},
        {"bidi-only", no_argument, 0, 'b'},     {"serve-fd", required_argument, 0, 'F'},
        {"cert", required_argument, 0, 'C'},    {"key", required_argument, 0, 'K'},
        {"ca", required_argument, 0, 'A'},      {0, 0, 0, 0}};
    int c;
    int serve_fd = -1;
    bool bidi_only = false;
    const char *cert = NULL, *key = NULL, *ca_arg = NULL;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 'F':
            serve_fd = atoi(optarg);
            break;
        case 'C':
            cert = optarg;
            break;
        case 'K':
            key = optarg;
            break;
        case 'A':
            ca_arg = optarg;
            break;
        case 's':
            seconds = atof(optarg);
            break;
        case 'n':
            streams = atoi(optarg);
            break;
        case 'o':
            out = optarg;
            break;
        case 'b':
            bidi_only = true;
            break;
        case 'q':
            seconds = 1;
            streams = 1000;
            break;
        default:
            fprintf(stderr,
                    "usage: %s [--seconds S] [--streams N] [--out FILE] [--quick] "
                    "[--bidi-only]\n",
                    argv[0]);
            return 2;
        }
    }
    bf_log_init("bench-grpc", BF_LOG_WARN);
    if (serve_fd >= 0)
        return serve_main(serve_fd, cert, key, ca_arg);
    signal(SIGPIPE, SIG_IGN);
    raise_nofile();
    pin(1);

    printf("bench_grpc: %ld CPUs; server pinned to CPU 0, client to CPU 1\n",
           sysconf(_SC_NPROCESSORS_ONLN));
    struct bf_net_client_opts plain = {0};
    struct unary_fig h2c1 = {0}, h2c4 = {0}, tls1 = {0};
    struct h2load_fig hl = {0};
    bool pki = make_pki();
    char crt[128], keyf[128], ca[128], ccrt[128], ckey[128];
    snprintf(crt, sizeof crt, "%s/s.crt", g_pki);
    snprintf(keyf, sizeof keyf, "%s/s.key", g_pki);
    snprintf(ca, sizeof ca, "%s/ca.crt", g_pki);
    snprintf(ccrt, sizeof ccrt, "%s/c.crt", g_pki);
    snprintf(ckey, sizeof ckey, "%s/c.key", g_pki);
    if (!bidi_only) {
        h2c1 = unary_bench(NULL, &plain, 1, 128, seconds);
        printf("unary h2c, 1 conn x 128 in flight: %.0f RPC/s, server CPU %.0f%%, %.0f RPC per "
               "server-CPU-second, %.2f ms CPU per 1000 RPCs (errors %llu)\n",
               h2c1.rps, h2c1.server_util * 100, h2c1.rps_per_core, h2c1.cpu_ms_per_1k,
               (unsigned long long)h2c1.errors);
        h2c4 = unary_bench(NULL, &plain, 4, 64, seconds);
        printf("unary h2c, 4 conns x 64 in flight: %.0f RPC/s, server CPU %.0f%%, %.0f RPC per "
               "server-CPU-second, %.2f ms CPU per 1000 RPCs (errors %llu)\n",
               h2c4.rps, h2c4.server_util * 100, h2c4.rps_per_core, h2c4.cpu_ms_per_1k,
               (unsigned long long)h2c4.errors);
        if (pki) {
            struct bf_net_tls_config stls = {crt, keyf, NULL};
            struct bf_net_client_opts ctls = {.tls = {NULL, NULL, ca}};
            tls1 = unary_bench(&stls, &ctls, 1, 128, seconds);
            printf("unary TLS 1.3, 1 conn x 128 in flight: %.0f RPC/s, server CPU %.0f%%, %.0f RPC "
                   "per server-CPU-second, %.2f ms CPU per 1000 RPCs (errors %llu)\n",
                   tls1.rps, tls1.server_util * 100, tls1.rps_per_core, tls1.cpu_ms_per_1k,
                   (unsigned long long)tls1.errors);
        }
        hl = h2load_bench((uint64_t)(200000 * seconds));
        if (hl.ran)
            printf("h2load h2c, 4 conns x 64 streams: %.0f req/s, %.0f req per server-CPU-second\n",
                   hl.rps, hl.rps_per_core);
    }

    struct bidi_fig b[3];
    const char *bname[3] = {"one_stream_per_connection", "hundred_streams_per_connection",
                            "one_stream_per_connection_mtls"};
    int nb = 0;
    b[nb++] = bidi_bench(streams, streams, 5, NULL, NULL);
    b[nb++] = bidi_bench(streams, streams / 100 > 0 ? streams / 100 : 1, 5, NULL, NULL);
    if (pki) {
        struct bf_net_tls_config sm = {crt, keyf, ca}, cm = {ccrt, ckey, ca};
        b[nb++] = bidi_bench(streams, streams, 5, &sm, &cm);
    }
    for (int i = 0; i < nb; i++)
        printf("bidi %s: %d/%d streams open on %d connections in %.2fs; server RSS %ld -> %ld KiB "
               "(%ld before purge; %.0f RSS bytes (second half: %.0f), %.0f heap bytes (wolfSSL "
               "%.0f) per stream); "
               "%.0f msgs/s, "
               "%.3f ms server CPU per 1000 messages\n",
               bname[i], b[i].opened, b[i].streams, b[i].conns, b[i].open_secs, b[i].rss_base_kb,
               b[i].rss_open_kb, b[i].rss_raw_kb, b[i].bytes_per_stream,
               b[i].marginal_bytes_per_stream, b[i].heap_per_stream, b[i].wolf_per_stream,
               b[i].msgs_per_sec, b[i].cpu_ms_per_1k_msgs);
    if (pki) {
        char rm[128];
        snprintf(rm, sizeof rm, "rm -rf %s", g_pki);
        if (system(rm) != 0)
            fprintf(stderr, "could not remove %s\n", g_pki);
    }

    char *slash = strrchr(out, '/');
    if (slash) {
        char dir[256];
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - out), out);
        mkdir(dir, 0755);
    }
    FILE *f = fopen(out, "w");
    if (!f) {
        fprintf(stderr, "cannot write %s: %s\n", out, strerror(errno));
        return 1;
    }
    fprintf(f, "{\n  \"benchmark\": \"bench_grpc\",\n  \"cpus\": %ld,\n  \"seconds\": %.1f,\n",
            sysconf(_SC_NPROCESSORS_ONLN), seconds);
    if (!bidi_only) {
        fprintf(f, "  \"unary\": {\n");
        print_unary(f, "h2c_1conn", &h2c1, 1, 128, false);
        print_unary(f, "h2c_4conn", &h2c4, 4, 64, !pki);
        if (pki)
            print_unary(f, "tls13_1conn", &tls1, 1, 128, true);
        fprintf(f, "  },\n");
    }
    if (hl.ran)
        fprintf(f,
                "  \"h2load_h2c\": {\"connections\": 4, \"streams_per_connection\": 64, "
                "\"req_per_sec\": %.0f, \"succeeded\": %llu, \"req_per_server_cpu_second\": "
                "%.0f},\n",
                hl.rps, (unsigned long long)hl.ok, hl.rps_per_core);
    fprintf(f, "  \"bidi\": {\n");
    for (int i = 0; i < nb; i++)
        print_bidi(f, bname[i], &b[i], i == nb - 1);
    fprintf(f, "  }\n}\n");
    fclose(f);
    printf("wrote %s\n", out);
    return 0;
}
