/*
 * bench_session.c — figures for the session process, measured against the
 * real bigfleet-shardd (supervisor + children) over loopback with our own
 * gRPC client (bf_net) playing the operators:
 *
 *   1. rollup ingest: rollups/s and the send -> "rollup" Acknowledgement
 *      latency (p50/p99) at 1K, 10K and 50K Need rows per rollup (every row
 *      a distinct profile), for one operator in a closed loop (latency) and
 *      for four operators at once (throughput through the single ingest
 *      lane). The first rollup of each size (profiles interned cold) is
 *      reported apart. While 50K-row rollups ingest, a fifth operator pings
 *      with Hello: its ack p99 shows the event loop is not held up by
 *      ingest.
 *   2. sessions held: N operator connections (default 10,000), one TCP
 *      connection and one Shard/Session stream each, Hello acknowledged,
 *      then one small rollup each; the session process's RSS before and
 *      after (VmRSS, /proc/<pid>/status), connect rate, rollup rate.
 *
 * Usage: bench_session [--results DIR] [--sessions N] [--seconds S] [--ingest-only]
 * --ingest-only: only the one-operator 1K and 50K cases (every Need
 * changed, 1 % changed, unchanged) of part 1, after an empty rollup
 * repeated (the round trip's floor), printed and not written (for
 * before/after runs).
 * --convert N: no appliance; bf_rollup_convert of N-row rollups (the two
 * "changed" demands alternating), then bf_rollup_convert_incremental of
 * the same and of two demands that differ in 1 % of the Needs, and
 * bf_rollup_digest, timed in this process on a scratch segment for
 * --seconds each; prints fastest and median. --convert-case K: only the
 * K-th of those four (0-3; for perf).
 * --ingest-case K: --ingest-only, but only its K-th case (0 the empty
 * rollup; 1-3 1K every Need changed, 1 % changed, unchanged; 4-6 the same
 * at 50K; 7 and 8: four operators at once, 1K, every Need / 1 % changed;
 * for perf). --shardd-arg FLAG: one more flag for bigfleet-shardd (e.g.
 * --cycle-min-gap=1s). The srv_cpu, cyc_cpu and cli_cpu columns are the CPU
 * time (user + system) per rollup of the session process, the cycle process
 * and this client over the closed loop (10 ms ticks: read them over
 * seconds, not milliseconds); cyc/roll: cycles run per steady rollup (the
 * shard's cycle counter; --cycle-min-gap coalesces them); cyc_ms: their mean
 * duration (the shard's cycle histogram, past its warm-up cycles).
 * --window K: each operator keeps K rollups outstanding on its one stream
 * (sends the next as each ack arrives) instead of the closed loop (K = 1,
 * the default): the operator sending before the previous ack, as the Go
 * operator's sendLoop may. Columns win (K) and supsd: steady rollups the
 * session superseded (a newer one replaced it while it waited for the
 * ingest lane; no ack, by reference/wire.md §2, so rollups/s counts the
 * acked ones only). ack_p50/p99 are then from each rollup's own send. The
 * superseded count is the shard's; with several operators and large
 * rollups it is charged to whichever operator's ack comes next.
 * Needs RLIMIT_NOFILE >= N + ~200 in this process and in bigfleet-shardd
 * (both raise their soft limit to the hard one; `ulimit -Hn` must allow it,
 * e.g. `ulimit -n 32768` before running, or run as a user whose hard limit
 * is high enough). Writes DIR/bench_session.json (default results/).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_common.h"
#include "bigfleet/net.h"
#include "bigfleet/rollup.h"
#include "bigfleet/shm.h"
#include "bigfleet/util.h"
#include "bigfleet/v1alpha1/shard.pb-c.h"

/* ------------------------------------------------------------ appliance */

struct shard {
    pid_t pid;
    char id[64];
    char dir[256];
    char addr[64];
    struct bf_shm shm;
};

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) ||
        getsockname(fd, (struct sockaddr *)&a, &l))
        return -1;
    close(fd);
    return ntohs(a.sin_port);
}

static struct shard *g_running; /* stopped by atexit on a fatal error */
static const char *g_extra_arg; /* --shardd-arg: one more flag for bigfleet-shardd */
static void shard_stop(struct shard *s);
static void stop_running(void)
{
    if (g_running)
        shard_stop(g_running);
}

static void shard_start(struct shard *s, const char *max_needs)
{
    char exe[1024];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 64);
    if (n <= 0) {
        perror("readlink");
        exit(1);
    }
    exe[n] = 0;
    *strrchr(exe, '/') = 0;
    strcat(exe, "/../bin/bigfleet-shardd");
    snprintf(s->dir, sizeof s->dir, "/tmp/bf-bench-session-XXXXXX");
    if (!mkdtemp(s->dir)) {
        perror("mkdtemp");
        exit(1);
    }
    snprintf(s->id, sizeof s->id, "bench-session-%d", (int)getpid());
    snprintf(s->addr, sizeof s->addr, "127.0.0.1:%d", free_port());
    char a_id[96], a_listen[96], a_data[300], a_needs[64], a_cneeds[64], a_log[300];
    snprintf(a_id, sizeof a_id, "--id=%s", s->id);
    snprintf(a_listen, sizeof a_listen, "--listen=%s", s->addr);
    snprintf(a_data, sizeof a_data, "--data-dir=%s/data", s->dir);
    snprintf(a_needs, sizeof a_needs, "--max-needs=%s", max_needs);
    snprintf(a_cneeds, sizeof a_cneeds, "--cluster-max-needs=%s", max_needs);
    snprintf(a_log, sizeof a_log, "%s/shardd.log", s->dir);
    s->pid = fork();
    if (s->pid == 0) {
        int fd = open(a_log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(exe, "bigfleet-shardd", a_id, a_listen, a_data, a_needs, "--metrics-addr=0",
              "--provider-addr=127.0.0.1:1", "--log-level=warn", "--max-clusters=16384",
              "--empty-rollup-guard=false" /* the bench empties clusters between cases */,
              /* one loopback peer holds every session, and one cluster the whole table */
              "--max-conns-per-peer=0", a_cneeds, "--cluster-max-string-kib=16777216", g_extra_arg,
              (char *)NULL);
        _exit(127);
    }
    g_running = s;
    int64_t end = bf_mono_ns() + 10 * BF_NS_PER_SEC;
    char err[256];
    while (bf_mono_ns() < end) {
        if (bf_shm_attach(&s->shm, s->id, true, err, sizeof err) == 0 &&
            atomic_load(&s->shm.st->proc[BF_ROLE_SESSION].child_state) == BF_CHILD_ACTIVE) {
            usleep(100 * 1000); /* listener up */
            return;
        }
        bf_shm_detach(&s->shm);
        usleep(20 * 1000);
    }
    fprintf(stderr, "bench_session: the appliance did not start (log: %s)\n", a_log);
    exit(1);
}

static void shard_stop(struct shard *s)
{
    g_running = NULL;
    bf_shm_detach(&s->shm);
    kill(s->pid, SIGTERM);
    for (int i = 0; i < 100; i++) {
        if (waitpid(s->pid, NULL, WNOHANG) == s->pid)
            goto done;
        usleep(50 * 1000);
    }
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
done:;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", s->dir);
}

static long rss_kib(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld", &v) == 1)
            break;
    if (f)
        fclose(f);
    return v;
}

/* ------------------------------------------------------------ operators */

#define MAX_WINDOW 64

struct op {
    struct bf_net_client *cl;
    struct bf_net_stream *st;
    int idx;
    bool hello_acked;
    bool done;
    int64_t sent_ns;
    uint32_t acks;
    uint32_t sends;
    uint32_t want; /* rollups to send (the loop stops sending at `want` sends) */
    /* --window: rollups sent and not yet answered (their send times, oldest
     * first); at most `win` of them (1: the closed loop). A rollup the
     * session superseded (a newer one replaced it while it waited for the
     * ingest lane: no ack, by the spec) is answered by the shard's
     * rollups_superseded counter (`dropped`). */
    uint32_t win;
    uint32_t n_out;
    int64_t out_ns[MAX_WINDOW];
    uint32_t dropped;
    const uint8_t *const *msg;
    const size_t *msg_len;
    double *lat;
    uint32_t n_lat, cap_lat;
    bool ping; /* send Hello pings instead of rollups */
    bool lend; /* msg outlives every send (the ingest cases): lent, not copied */
};

static struct bf_net_loop *g_loop;
static int g_hello_acks, g_rollup_acks, g_failed;
static _Atomic uint64_t *g_superseded; /* the shard's rollups_superseded counter */
static uint64_t g_superseded_seen;

static void keep_msg(void *msg, void *arg)
{
    (void)msg;
    (void)arg; /* the case's rollups are freed after the case */
}

/* consecutive rollups alternate between the two demands (k = sends & 1: in
 * the closed loop the same as acks & 1). The ingest cases lend the encoded
 * rollup (no copy per send: an operator encodes each rollup once); the
 * sessions case frees its message right after the send, so it is copied. */
static void op_send(struct op *o)
{
    o->sent_ns = bf_mono_ns();
    uint32_t k = o->sends & 1;
    o->sends++;
    if (o->n_out < MAX_WINDOW)
        o->out_ns[o->n_out++] = o->sent_ns;
    int rc = o->lend
                 ? bf_net_stream_send_lend(o->st, (void *)o->msg[k], o->msg_len[k], keep_msg, NULL)
                 : bf_net_stream_send(o->st, o->msg[k], o->msg_len[k]);
    if (rc != 0)
        g_failed++;
}

/* keeps `win` rollups outstanding while fewer than `want` were sent */
static void op_pump(struct op *o)
{
    uint32_t win = o->win ? o->win : 1;
    while (!o->done && o->st && o->n_out < win && o->sends < o->want)
        op_send(o);
}

static uint32_t op_answered(const struct op *o)
{
    return o->acks + o->dropped;
}

/* Rollups the session superseded since the last look: the ones waiting
 * behind the one in process (the second-oldest outstanding onwards) */
static void op_drop_superseded(struct op *o)
{
    if (!g_superseded)
        return;
    uint64_t now = atomic_load(g_superseded);
    uint64_t d = now - g_superseded_seen;
    g_superseded_seen = now;
    while (d-- && o->n_out > 1) {
        memmove(&o->out_ns[1], &o->out_ns[2], (o->n_out - 2) * sizeof o->out_ns[0]);
        o->n_out--;
        o->dropped++;
    }
}

static uint8_t g_hello[2][128];
static size_t g_hello_len[2];

static void on_msg(struct bf_net_stream *st, const uint8_t *m, size_t len, void *arg)
{
    (void)st;
    struct op *o = arg;
    Bigfleet__V1alpha1__ShardMessage *sm = bigfleet__v1alpha1__shard_message__unpack(NULL, len, m);
    if (!sm)
        return;
    if (sm->payload_case == BIGFLEET__V1ALPHA1__SHARD_MESSAGE__PAYLOAD_ACK) {
        int64_t now = bf_mono_ns();
        if (!strcmp(sm->ack->echo, "hello") && !o->hello_acked) {
            o->hello_acked = true;
            g_hello_acks++;
        } else if (!strcmp(sm->ack->echo, "hello") && o->ping) {
            if (o->n_lat < o->cap_lat)
                o->lat[o->n_lat++] = (double)(now - o->sent_ns) / 1e6;
            o->acks++;
            o->sent_ns = now;
            if (!o->done)
                bf_net_stream_send(o->st, g_hello[o->idx & 1], g_hello_len[o->idx & 1]);
        } else if (!strcmp(sm->ack->echo, "rollup") && !o->ping) {
            /* acks come in send order: this one answers the oldest outstanding
             * rollup the session did not supersede */
            op_drop_superseded(o);
            int64_t sent = o->sent_ns;
            if (o->n_out) {
                sent = o->out_ns[0];
                memmove(&o->out_ns[0], &o->out_ns[1], (o->n_out - 1) * sizeof o->out_ns[0]);
                o->n_out--;
            }
            if (o->n_lat < o->cap_lat)
                o->lat[o->n_lat++] = (double)(now - sent) / 1e6;
            o->acks++;
            g_rollup_acks++;
            op_pump(o);
        }
    }
    bigfleet__v1alpha1__shard_message__free_unpacked(sm, NULL);
}

static void on_done(struct bf_net_stream *st, int code, const char *msg, void *arg)
{
    (void)st;
    struct op *o = arg;
    o->st = NULL;
    if (!o->done) {
        g_failed++;
        fprintf(stderr, "operator %d: stream ended %s %s\n", o->idx, bf_net_code_name(code),
                msg ? msg : "");
    }
}

static const struct bf_net_stream_cbs CBS = {.on_message = on_msg, .on_done = on_done};

static size_t pack_hello(const char *cluster, uint8_t *buf)
{
    Bigfleet__V1alpha1__Hello h = BIGFLEET__V1ALPHA1__HELLO__INIT;
    h.cluster_id = (char *)cluster;
    h.protocol_version = "v1alpha1";
    Bigfleet__V1alpha1__OperatorMessage m = BIGFLEET__V1ALPHA1__OPERATOR_MESSAGE__INIT;
    m.payload_case = BIGFLEET__V1ALPHA1__OPERATOR_MESSAGE__PAYLOAD_HELLO;
    m.hello = &h;
    return bigfleet__v1alpha1__operator_message__pack(&m, buf);
}

static int op_open(struct op *o, const char *addr, int idx)
{
    memset(o, 0, sizeof *o);
    o->idx = idx;
    struct bf_net_client_opts co = {.addr = addr, .connect_timeout_ns = 30 * BF_NS_PER_SEC};
    if (bf_net_client_new(g_loop, &co, &o->cl) != 0)
        return -1;
    o->st = bf_net_client_call(o->cl, "/bigfleet.v1alpha1.Shard/Session", 0, &CBS, o);
    if (!o->st)
        return -1;
    char cluster[32];
    snprintf(cluster, sizeof cluster, "bench-%d", idx);
    uint8_t b[128];
    size_t n = pack_hello(cluster, b);
    return bf_net_stream_send(o->st, b, n);
}

static void op_close(struct op *o)
{
    o->done = true;
    if (o->cl)
        bf_net_client_free(o->cl);
    o->cl = NULL;
    free(o->lat);
    o->lat = NULL;
}

static bool run_until(bool (*pred)(void *), void *arg, int64_t timeout_ns)
{
    int64_t end = bf_mono_ns() + timeout_ns;
    while (!pred(arg)) {
        if (bf_mono_ns() > end)
            return false;
        bf_net_loop_run_once(g_loop, 20 * BF_NS_PER_MS);
    }
    return true;
}

static int g_target;
static bool hellos_reached(void *a)
{
    (void)a;
    return g_hello_acks >= g_target || g_failed;
}
static bool rollups_reached(void *a)
{
    (void)a;
    return g_rollup_acks >= g_target || g_failed;
}

/* ------------------------------------------------------------ rollups */

/* rows Needs, every one a distinct profile; the Needs i with i % every == 0
 * ask for `cpu` CPUs, the others for 4 (every 1: all of them) */
static uint8_t *build_rollup_some(const char *cluster, uint32_t rows, const char *cpu,
                                  uint32_t every, size_t *len)
{
    Bigfleet__V1alpha1__CapacityNeed *nd = calloc(rows, sizeof *nd);
    Bigfleet__V1alpha1__CapacityNeed **ndp = calloc(rows, sizeof *ndp);
    Bigfleet__V1alpha1__NodeSelectorRequirement *rq = calloc(2 * (size_t)rows, sizeof *rq);
    Bigfleet__V1alpha1__NodeSelectorRequirement **rqp = calloc(2 * (size_t)rows, sizeof *rqp);
    Bigfleet__V1alpha1__CapacityNeed__AggregateResourcesEntry ag[3], *agp[2], *agp4[2];
    Bigfleet__V1alpha1__CapacityNeed__MinUnitEntry mu, *mup[1];
    static char types[50][32], zones[3][16];
    static char *tv[50], *zv[3];
    for (int i = 0; i < 50; i++) {
        snprintf(types[i], sizeof types[i], "type-%02d.xlarge", i);
        tv[i] = types[i];
    }
    for (int i = 0; i < 3; i++) {
        snprintf(zones[i], sizeof zones[i], "zone-%c", 'a' + i);
        zv[i] = zones[i];
    }
    bigfleet__v1alpha1__capacity_need__aggregate_resources_entry__init(&ag[0]);
    ag[0].key = "cpu";
    ag[0].value = (char *)cpu;
    bigfleet__v1alpha1__capacity_need__aggregate_resources_entry__init(&ag[1]);
    ag[1].key = "memory";
    ag[1].value = "64Gi";
    agp[0] = &ag[0];
    agp[1] = &ag[1];
    bigfleet__v1alpha1__capacity_need__aggregate_resources_entry__init(&ag[2]);
    ag[2].key = "cpu";
    ag[2].value = "4";
    agp4[0] = &ag[2];
    agp4[1] = &ag[1];
    bigfleet__v1alpha1__capacity_need__min_unit_entry__init(&mu);
    mu.key = "cpu";
    mu.value = "1";
    mup[0] = &mu;
    for (uint32_t i = 0; i < rows; i++) {
        Bigfleet__V1alpha1__CapacityNeed *n = &nd[i];
        bigfleet__v1alpha1__capacity_need__init(n);
        for (int k = 0; k < 2; k++) {
            bigfleet__v1alpha1__node_selector_requirement__init(&rq[2 * i + k]);
            rqp[2 * i + k] = &rq[2 * i + k];
        }
        rq[2 * i].key = "node.kubernetes.io/instance-type";
        rq[2 * i].operator_ = 1;
        rq[2 * i].n_values = 1;
        rq[2 * i].values = &tv[i % 50];
        rq[2 * i + 1].key = "topology.kubernetes.io/zone";
        rq[2 * i + 1].operator_ = 1;
        rq[2 * i + 1].n_values = 1;
        rq[2 * i + 1].values = &zv[i % 3];
        n->n_requirements = 2;
        n->requirements = &rqp[2 * i];
        n->priority = (int32_t)(i / 150); /* with type x zone: every row a distinct profile */
        n->interruption_penalty_bucket = (i % 20) + 1;
        n->reclamation_penalty_bucket = 10;
        n->n_aggregate_resources = 2;
        n->aggregate_resources = i % every == 0 ? agp : agp4;
        n->n_min_unit = 1;
        n->min_unit = mup;
        ndp[i] = n;
    }
    Bigfleet__V1alpha1__ClusterCapacityNeeds cn = BIGFLEET__V1ALPHA1__CLUSTER_CAPACITY_NEEDS__INIT;
    cn.cluster_id = (char *)cluster;
    cn.timestamp_unix_nanos = bf_now_ns();
    cn.n_needs = rows;
    cn.needs = ndp;
    Bigfleet__V1alpha1__OperatorMessage m = BIGFLEET__V1ALPHA1__OPERATOR_MESSAGE__INIT;
    m.payload_case = BIGFLEET__V1ALPHA1__OPERATOR_MESSAGE__PAYLOAD_ROLLUP;
    m.rollup = &cn;
    *len = bigfleet__v1alpha1__operator_message__get_packed_size(&m);
    uint8_t *buf = malloc(*len);
    bigfleet__v1alpha1__operator_message__pack(&m, buf);
    free(nd);
    free(ndp);
    free(rq);
    free(rqp);
    return buf;
}

static uint8_t *build_rollup(const char *cluster, uint32_t rows, const char *cpu, size_t *len)
{
    return build_rollup_some(cluster, rows, cpu, 1, len);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *v, uint32_t n, double p)
{
    if (!n)
        return 0;
    qsort(v, n, sizeof *v, cmp_d);
    uint32_t i = (uint32_t)(p * (n - 1) + 0.5);
    return v[i];
}

struct ingest_fig {
    uint32_t rows, ops;
    bool unchanged; /* every rollup repeats the previous one apart from its timestamp */
    uint32_t every; /* changed: one Need in `every` differs between consecutive rollups */
    double cold_ms, rps, p50, p99, ping_p99;
    double ingest_us; /* mean time inside the session's ingest thread (its own histogram) */
    /* CPU time per steady rollup (user + system, /proc/<pid>/stat, 10 ms ticks
     * over the whole run): the session process, the cycle process, and this
     * client process */
    double srv_cpu_us, cyc_cpu_us, cli_cpu_us;
    double cycles_per_rollup; /* cycles the cycle process ran per steady rollup */
    double cycle_ms; /* their mean duration (the shard's cycle histogram; past its warm-up) */
    uint32_t rollups;
    size_t bytes;
    uint32_t window;     /* rollups outstanding per operator (1: the closed loop) */
    uint32_t superseded; /* steady rollups the session superseded (no ack, by the spec) */
};

static struct op *g_ops;
static int g_nops;
static uint32_t g_window = 1; /* --window K: rollups outstanding per operator (1: closed loop) */
static bool all_done(void *a)
{
    (void)a;
    for (int i = 0; i < g_nops; i++)
        if (!g_ops[i].ping && op_answered(&g_ops[i]) < g_ops[i].want)
            return g_failed > 0;
    return true;
}

static void bench_ingest(struct shard *sh, uint32_t rows, int nops, double seconds, bool ping,
                         bool unchanged, uint32_t every, struct ingest_fig *f)
{
    memset(f, 0, sizeof *f);
    f->rows = rows;
    f->ops = (uint32_t)nops;
    f->unchanged = unchanged;
    f->every = every;
    /* the window is for one operator only: the shard counts superseded
     * rollups shard-wide, so with several operators they could not be
     * charged to the one whose rollup was replaced (review-s32a) */
    f->window = nops == 1 ? g_window : 1;
    int total = nops + (ping ? 1 : 0);
    struct op *ops = calloc((size_t)total, sizeof *ops);
    uint8_t *msgs[8][2];
    size_t lens[8][2];
    g_hello_acks = 0;
    g_failed = 0;
    static int base;
    base += 100;
    for (int i = 0; i < total; i++) {
        if (op_open(&ops[i], sh->addr, base + i) != 0) {
            fprintf(stderr, "cannot open operator\n");
            exit(1);
        }
        if (i < nops) {
            char cluster[32];
            snprintf(cluster, sizeof cluster, "bench-%d", base + i);
            msgs[i][0] = build_rollup(cluster, rows, "4", &lens[i][0]);
            /* changed: the two alternate (one quantity differs in every row,
             * or in one row of `every`); unchanged: the same demand, built
             * again (a later timestamp) */
            msgs[i][1] =
                build_rollup_some(cluster, rows, unchanged ? "4" : "5", every, &lens[i][1]);
            ops[i].msg = (const uint8_t *const *)msgs[i];
            ops[i].msg_len = lens[i];
            ops[i].lend = true;
            f->bytes = lens[i][0];
        } else {
            ops[i].ping = true;
        }
        ops[i].cap_lat = 100000;
        ops[i].lat = calloc(ops[i].cap_lat, sizeof(double));
    }
    g_ops = ops;
    g_nops = total;
    g_target = total;
    g_superseded = &sh->shm.st->session.rollups_superseded;
    g_superseded_seen = atomic_load(g_superseded);
    if (!run_until(hellos_reached, NULL, 20 * BF_NS_PER_SEC) || g_failed) {
        fprintf(stderr, "hello acks missing\n");
        exit(1);
    }
    /* cold: the first rollup of every operator (profiles interned) */
    for (int i = 0; i < nops; i++)
        ops[i].want = 1;
    int64_t t0 = bf_mono_ns();
    for (int i = 0; i < nops; i++)
        op_send(&ops[i]);
    if (!run_until(all_done, NULL, 120 * BF_NS_PER_SEC)) {
        fprintf(stderr, "cold rollups timed out\n");
        exit(1);
    }
    f->cold_ms = (double)(bf_mono_ns() - t0) / 1e6;
    for (int i = 0; i < nops; i++)
        ops[i].n_lat = 0;
    /* steady: closed loop for `seconds` */
    for (int i = 0; i < nops; i++) {
        ops[i].want = UINT32_MAX;
        ops[i].win = f->window;
    }
    if (ping) {
        struct op *p = &ops[nops];
        p->sent_ns = bf_mono_ns();
        bf_net_stream_send(p->st, g_hello[0], g_hello_len[0]);
    }
    uint32_t a0 = 0;
    for (int i = 0; i < nops; i++)
        a0 += ops[i].acks;
    uint64_t sup0 = atomic_load(g_superseded);
    struct bf_hist *ih = &sh->shm.st->session.rollup_ingest;
    uint64_t ic0 = atomic_load(&ih->count), is0 = atomic_load(&ih->sum_ns);
    pid_t spid = (pid_t)atomic_load(&sh->shm.st->proc[BF_ROLE_SESSION].pid);
    pid_t cpid = (pid_t)atomic_load(&sh->shm.st->proc[BF_ROLE_CYCLE].pid);
    double sc0 = bench_proc_cpu_s(spid), cc0 = bench_proc_cpu_s(cpid),
           lc0 = bench_proc_cpu_s(getpid());
    uint64_t ncyc0 = atomic_load(&sh->shm.st->cycle.cycles);
    struct bf_hist *ch = &sh->shm.st->cycle.cycle_duration;
    uint64_t hc0 = atomic_load(&ch->count), hs0 = atomic_load(&ch->sum_ns);
    t0 = bf_mono_ns();
    for (int i = 0; i < nops; i++)
        op_pump(&ops[i]);
    int64_t end = t0 + (int64_t)(seconds * 1e9);
    while (bf_mono_ns() < end && !g_failed)
        bf_net_loop_run_once(g_loop, 20 * BF_NS_PER_MS);
    for (int i = 0; i < nops; i++)
        ops[i].want = 0; /* no new sends; the answers in flight are drained below */
    double el = (double)(bf_mono_ns() - t0) / 1e9;
    uint32_t a1 = 0;
    for (int i = 0; i < nops; i++)
        a1 += ops[i].acks;
    f->rollups = a1 - a0;
    f->superseded = (uint32_t)(atomic_load(g_superseded) - sup0);
    if (f->rollups) {
        f->srv_cpu_us = (bench_proc_cpu_s(spid) - sc0) * 1e6 / f->rollups;
        f->cyc_cpu_us = (bench_proc_cpu_s(cpid) - cc0) * 1e6 / f->rollups;
        f->cli_cpu_us = (bench_proc_cpu_s(getpid()) - lc0) * 1e6 / f->rollups;
        f->cycles_per_rollup =
            (double)(atomic_load(&sh->shm.st->cycle.cycles) - ncyc0) / f->rollups;
        uint64_t dc = atomic_load(&ch->count) - hc0;
        f->cycle_ms = dc ? (double)(atomic_load(&ch->sum_ns) - hs0) / 1e6 / (double)dc : 0;
    }
    f->rps = f->rollups / el;
    uint64_t ic1 = atomic_load(&ih->count), is1 = atomic_load(&ih->sum_ns);
    f->ingest_us = ic1 > ic0 ? (double)(is1 - is0) / (double)(ic1 - ic0) / 1e3 : 0;
    double *all = calloc(f->rollups + 16, sizeof *all);
    uint32_t n = 0;
    for (int i = 0; i < nops; i++)
        for (uint32_t k = 0; k < ops[i].n_lat && n < f->rollups + 16; k++)
            all[n++] = ops[i].lat[k];
    f->p50 = pct(all, n, 0.50);
    f->p99 = pct(all, n, 0.99);
    if (ping)
        f->ping_p99 = pct(ops[nops].lat, ops[nops].n_lat, 0.99);
    free(all);
    /* the rollup each operator still has in flight is answered before we go on */
    for (int i = 0; i < nops; i++)
        ops[i].want = ops[i].sends;
    if (!run_until(all_done, NULL, 60 * BF_NS_PER_SEC)) {
        fprintf(stderr, "bench_session: rollups still unanswered after 60 s (%d operators)\n",
                nops);
        g_failed++;
    }
    /* release the rows (an empty rollup each) so the next case has the table;
     * the case's rollups are lent to the stream: freed once it is closed */
    uint8_t *lent[8][2];
    for (int i = 0; i < nops; i++) {
        lent[i][0] = msgs[i][0];
        lent[i][1] = msgs[i][1];
        char cluster[32];
        snprintf(cluster, sizeof cluster, "bench-%d", base + i);
        msgs[i][0] = msgs[i][1] = build_rollup(cluster, 0, "0", &lens[i][0]);
        lens[i][1] = lens[i][0];
        ops[i].want = ops[i].sends + 1;
        op_send(&ops[i]);
    }
    if (!run_until(all_done, NULL, 60 * BF_NS_PER_SEC)) {
        fprintf(stderr, "bench_session: the releasing rollups unanswered after 60 s\n");
        g_failed++;
    }
    for (int i = 0; i < total; i++)
        op_close(&ops[i]);
    for (int k = 0; k < 50; k++)
        bf_net_loop_run_once(g_loop, 2 * BF_NS_PER_MS);
    for (int i = 0; i < nops; i++) {
        free(msgs[i][0]);
        free(lent[i][0]);
        free(lent[i][1]);
    }
    free(ops);
}

static void print_fig(const struct ingest_fig *x)
{
    char ping[16] = "-";
    if (x->ping_p99 > 0)
        snprintf(ping, sizeof ping, "%.2fms", x->ping_p99);
    char kind[16];
    snprintf(kind, sizeof kind, "%s", x->unchanged ? "unchanged" : "changed");
    if (!x->unchanged && x->every > 1)
        snprintf(kind, sizeof kind, "ch-1/%u", x->every);
    printf("%7u %4u %9s %10zu %10.1f %8.2fms %8.2fms %10.1f %8s %10.1f %8.1f %8.1f %8.1f %9.3f "
           "%8.1f %4u %6u\n",
           x->rows, x->ops, kind, x->bytes, x->rps, x->p50, x->p99, x->cold_ms, ping, x->ingest_us,
           x->srv_cpu_us, x->cyc_cpu_us, x->cli_cpu_us, x->cycles_per_rollup, x->cycle_ms,
           x->window, x->superseded);
    fflush(stdout);
}

/* ------------------------------------------------------------ sessions */

struct sess_fig {
    int sessions, held;
    long rss_before_kib, rss_after_kib, rss_after_rollup_kib;
    double connect_s, hello_per_s, rollup_s;
};

static void bench_sessions(struct shard *sh, int n, struct sess_fig *f)
{
    memset(f, 0, sizeof *f);
    f->sessions = n;
    pid_t spid = (pid_t)atomic_load(&sh->shm.st->proc[BF_ROLE_SESSION].pid);
    f->rss_before_kib = rss_kib(spid);
    struct op *ops = calloc((size_t)n, sizeof *ops);
    g_hello_acks = 0;
    g_failed = 0;
    int64_t t0 = bf_mono_ns();
    const int batch = 500;
    for (int i = 0; i < n; i += batch) {
        int m = i + batch < n ? batch : n - i;
        for (int k = 0; k < m; k++)
            if (op_open(&ops[i + k], sh->addr, 1000000 + i + k) != 0) {
                fprintf(stderr, "operator %d: cannot open (%s)\n", i + k, strerror(errno));
                exit(1);
            }
        g_target = i + m;
        if (!run_until(hellos_reached, NULL, 60 * BF_NS_PER_SEC) || g_failed) {
            fprintf(stderr, "sessions: %d of %d acknowledged\n", g_hello_acks, i + m);
            break;
        }
    }
    f->connect_s = (double)(bf_mono_ns() - t0) / 1e9;
    f->hello_per_s = g_hello_acks / f->connect_s;
    /* hold for a moment, then count */
    int64_t hold = bf_mono_ns() + 2 * BF_NS_PER_SEC;
    while (bf_mono_ns() < hold)
        bf_net_loop_run_once(g_loop, 50 * BF_NS_PER_MS);
    f->held = (int)atomic_load(&sh->shm.st->session.active_sessions);
    f->rss_after_kib = rss_kib(spid);
    /* one small rollup from every session */
    uint8_t *rb[2];
    size_t rl[2];
    g_rollup_acks = 0;
    g_target = g_hello_acks;
    t0 = bf_mono_ns();
    for (int i = 0; i < n; i++) {
        if (!ops[i].hello_acked)
            continue;
        char cluster[32];
        snprintf(cluster, sizeof cluster, "bench-%d", 1000000 + i);
        rb[0] = build_rollup(cluster, 4, "2", &rl[0]);
        ops[i].msg = (const uint8_t *const *)rb;
        ops[i].msg_len = rl;
        ops[i].want = 1;
        op_send(&ops[i]);
        free(rb[0]);
    }
    run_until(rollups_reached, NULL, 120 * BF_NS_PER_SEC);
    f->rollup_s = (double)(bf_mono_ns() - t0) / 1e9;
    f->rss_after_rollup_kib = rss_kib(spid);
    for (int i = 0; i < n; i++)
        op_close(&ops[i]);
    for (int k = 0; k < 100; k++)
        bf_net_loop_run_once(g_loop, 5 * BF_NS_PER_MS);
    free(ops);
}

/* ------------------------------------------------------------ conversion alone */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The ClusterCapacityNeeds inside build_rollup_some's OperatorMessage. */
static uint8_t *bare_rollup(uint32_t rows, const char *cpu, uint32_t every, size_t *len)
{
    size_t ml;
    uint8_t *m = build_rollup_some("bench-convert", rows, cpu, every, &ml);
    Bigfleet__V1alpha1__OperatorMessage *om =
        bigfleet__v1alpha1__operator_message__unpack(NULL, ml, m);
    if (!om || !om->rollup) {
        fprintf(stderr, "bench_session: cannot unpack the rollup\n");
        exit(1);
    }
    *len = bigfleet__v1alpha1__cluster_capacity_needs__get_packed_size(om->rollup);
    uint8_t *b = malloc(*len);
    bigfleet__v1alpha1__cluster_capacity_needs__pack(om->rollup, b);
    bigfleet__v1alpha1__operator_message__free_unpacked(om, NULL);
    free(m);
    return b;
}

/* Converts b[0], b[1], b[0], ... for `seconds` (after one cold conversion)
 * and prints the fastest and median time of one conversion. inc: through
 * bf_rollup_convert_incremental, each rollup reusing the one before it (the
 * previous result's rows in memory, as the ingest thread's memo gives). */
static void convert_loop(struct bf_shm *s, uint32_t cref, uint8_t *const b[2], const size_t len[2],
                         uint32_t rows, bool inc, const char *what, double seconds)
{
    struct bf_rollup r[2];
    bf_rollup_init(&r[0]);
    bf_rollup_init(&r[1]);
    struct bf_rollup_limits lim = {
        .max_rows = rows, .strtab_quota = UINT64_MAX, .max_priority = INT32_MAX};
    struct bf_rollup_digest_key key;
    for (size_t i = 0; i < sizeof key.secret; i++)
        key.secret[i] = (uint8_t)(i * 131 + 7);
    char err[256];
    uint32_t cap = 1u << 16, n = 0;
    int64_t *tc = malloc(cap * sizeof *tc), *td = malloc(cap * sizeof *td);
    uint64_t reused = 0;
    int rc = 0;
    int64_t cold = 0, end = 0;
    for (uint32_t it = 0; rc == 0 && it < cap + 1; it++) {
        struct bf_rollup *cur = &r[it & 1], *pr = &r[(it + 1) & 1];
        struct bf_rollup_prev prev = {.needs = pr->needs_memo,
                                      .n_needs = pr->needs_in,
                                      .rows = pr->rows,
                                      .fp_refs = pr->fp_refs,
                                      .n_rows = pr->n};
        /* incremental: as the ingest thread does, the digest first, keeping
         * the Needs' hashes for the conversion (bf_rollup_digest_needs) */
        struct bf_rollup_digest d;
        int64_t tdg = bf_mono_ns();
        if (inc)
            bf_rollup_digest_needs(b[it & 1], len[it & 1], &key, rows, cur, &d);
        int64_t t0 = bf_mono_ns();
        rc =
            inc ? bf_rollup_convert_incremental(s, b[it & 1], len[it & 1], "bench-convert", cref,
                                                &lim, &key, it ? &prev : NULL, cur, err, sizeof err)
                : bf_rollup_convert(s, b[it & 1], len[it & 1], "bench-convert", cref, &lim, cur,
                                    err, sizeof err);
        int64_t t1 = bf_mono_ns();
        if (!it) {
            cold = t1 - t0;
            end = bf_mono_ns() + (int64_t)(seconds * 1e9);
            continue;
        }
        if (!inc)
            bf_rollup_digest(b[it & 1], len[it & 1], &key, &d);
        td[n] = inc ? t0 - tdg : bf_mono_ns() - t1;
        tc[n++] = t1 - t0;
        reused += cur->reused;
        if (bf_mono_ns() >= end)
            break;
    }
    if (rc != 0 || !n) {
        fprintf(stderr, "bench_session: conversion failed: %s\n", err);
        exit(1);
    }
    qsort(tc, n, sizeof *tc, cmp_i64);
    qsort(td, n, sizeof *td, cmp_i64);
    printf("%-34s %u rows (%zu bytes), %u conversions: cold %.1f us, fastest %.1f us, median "
           "%.1f us, reused %.1f%%; digest fastest %.1f us, median %.1f us\n",
           what, rows, len[0], n, cold / 1e3, tc[0] / 1e3, tc[n / 2] / 1e3,
           100.0 * (double)reused / ((double)n * rows), td[0] / 1e3, td[n / 2] / 1e3);
    fflush(stdout);
    free(tc);
    free(td);
    bf_rollup_free(&r[0]);
    bf_rollup_free(&r[1]);
}

static void bench_convert(uint32_t rows, double seconds, int only)
{
    struct bf_shm s;
    char id[64], err[256];
    snprintf(id, sizeof id, "bench-convert-%d", (int)getpid());
    struct bf_shm_caps caps = {.max_machines = 600000, .max_needs = 262144, .max_clusters = 4};
    if (bf_shm_create(&s, id, &caps, 1, 0, err, sizeof err) != 0) {
        fprintf(stderr, "bench_session: scratch segment: %s\n", err);
        exit(1);
    }
    for (int i = 0; i < BF_RESERVED_DIMS_N; i++)
        bf_dim_intern(&s, bf_reserved_dims[i]);
    uint32_t cref = 0;
    bf_str_intern(&s, "bench-convert", 13, &cref);
    size_t len[2], plen[2];
    /* every Need changes between consecutive rollups; one Need in 100 does */
    uint8_t *b[2] = {bare_rollup(rows, "4", 1, &len[0]), bare_rollup(rows, "5", 1, &len[1])};
    uint8_t *p[2] = {b[0], bare_rollup(rows, "5", 100, &plen[1])};
    plen[0] = len[0];
    printf("conversion alone (one process, no appliance):\n");
    if (only < 0 || only == 0)
        convert_loop(&s, cref, b, len, rows, false, "every Need changed, full:", seconds);
    if (only < 0 || only == 1)
        convert_loop(&s, cref, b, len, rows, true, "every Need changed, incremental:", seconds);
    if (only < 0 || only == 2)
        convert_loop(&s, cref, p, plen, rows, true, "1% of Needs changed, incremental:", seconds);
    if (only < 0 || only == 3)
        convert_loop(&s, cref, p, plen, rows, false, "1% of Needs changed, full:", seconds);
    free(b[0]);
    free(b[1]);
    free(p[1]);
    bf_shm_detach(&s);
    bf_shm_unlink(id);
}

/* ------------------------------------------------------------ main */

int main(int argc, char **argv)
{
    const char *results = "results";
    int nsess = 10000;
    double seconds = 5;
    bool ingest_only = false;
    uint32_t convert_rows = 0;
    int convert_case = -1;
    int ingest_case = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--results") && i + 1 < argc)
            results = argv[++i];
        else if (!strcmp(argv[i], "--sessions") && i + 1 < argc)
            nsess = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--ingest-only"))
            ingest_only = true;
        else if (!strcmp(argv[i], "--convert") && i + 1 < argc)
            convert_rows = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--convert-case") && i + 1 < argc)
            convert_case = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--shardd-arg") && i + 1 < argc)
            g_extra_arg = argv[++i];
        else if (!strcmp(argv[i], "--window") && i + 1 < argc) {
            int w = atoi(argv[++i]);
            g_window = w < 1 ? 1 : w > MAX_WINDOW ? MAX_WINDOW : (uint32_t)w;
        } else if (!strcmp(argv[i], "--ingest-case") && i + 1 < argc) {
            ingest_only = true;
            ingest_case = atoi(argv[++i]);
        }
    }
    if (convert_rows) {
        bench_convert(convert_rows, seconds, convert_case);
        return 0;
    }
    signal(SIGPIPE, SIG_IGN);
    atexit(stop_running);
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    if ((long)rl.rlim_cur < nsess + 200) {
        int n = (int)rl.rlim_cur - 200;
        fprintf(stderr,
                "bench_session: RLIMIT_NOFILE hard limit %ld allows %d sessions, not %d "
                "(raise it: ulimit -Hn)\n",
                (long)rl.rlim_max, n, nsess);
        nsess = n;
    }
    g_hello_len[0] = pack_hello("bench-ping-a", g_hello[0]);
    g_hello_len[1] = pack_hello("bench-ping-b", g_hello[1]);
    if (bf_net_loop_new(NULL, &g_loop) != 0) {
        fprintf(stderr, "bench_session: io_uring unavailable\n");
        return 1;
    }
    struct shard sh;
    shard_start(&sh, "262144");
    static const uint32_t sizes[] = {1000, 10000, 50000};
    struct ingest_fig one[3], four[3], same[2], part[2];
    printf("rollup ingest (bigfleet-shardd over loopback, every row a distinct profile)\n");
    printf("%7s %4s %9s %10s %10s %9s %9s %10s %8s %10s %8s %8s %8s %9s %8s %4s %6s\n", "rows",
           "ops", "rollups", "bytes", "rollups/s", "ack_p50", "ack_p99", "cold_ms", "ping_p99",
           "ingest_us", "srv_cpu", "cyc_cpu", "cli_cpu", "cyc/roll", "cyc_ms", "win", "supsd");
    if (ingest_only) {
        /* the round trip's floor: an empty rollup, repeated */
        struct ingest_fig empty;
        if (ingest_case < 0 || ingest_case == 0) {
            bench_ingest(&sh, 0, 1, seconds, false, true, 1, &empty);
            print_fig(&empty);
        }
        for (int k = 0; k < 3; k += 2) {
            int c = 1 + (k / 2) * 3; /* --ingest-case: 1-3 the 1K cases, 4-6 the 50K ones */
            if (ingest_case < 0 || ingest_case == c) {
                bench_ingest(&sh, sizes[k], 1, seconds, false, false, 1, &one[k]);
                print_fig(&one[k]);
            }
            if (ingest_case < 0 || ingest_case == c + 1) {
                bench_ingest(&sh, sizes[k], 1, seconds, false, false, 100, &part[k / 2]);
                print_fig(&part[k / 2]);
            }
            if (ingest_case < 0 || ingest_case == c + 2) {
                bench_ingest(&sh, sizes[k], 1, seconds, false, true, 1, &same[k / 2]);
                print_fig(&same[k / 2]);
            }
        }
        if (ingest_case == 7 || ingest_case == 8) { /* four operators (the lane shared) */
            bench_ingest(&sh, sizes[0], 4, seconds, false, false, ingest_case == 7 ? 1 : 100,
                         &four[0]);
            print_fig(&four[0]);
        }
        shard_stop(&sh);
        bf_net_loop_free(g_loop);
        return g_failed ? 1 : 0;
    }
    for (int k = 0; k < 3; k++) {
        bench_ingest(&sh, sizes[k], 1, seconds, k == 2, false, 1, &one[k]);
        print_fig(&one[k]);
        bench_ingest(&sh, sizes[k], 4, seconds, false, false, 1, &four[k]);
        print_fig(&four[k]);
        if (k != 1) { /* 1 % of the Needs changed, and the unchanged-rollup path, at 1K and 50K */
            bench_ingest(&sh, sizes[k], 1, seconds, false, false, 100, &part[k / 2]);
            print_fig(&part[k / 2]);
            bench_ingest(&sh, sizes[k], 1, seconds, false, true, 1, &same[k / 2]);
            print_fig(&same[k / 2]);
        }
    }
    shard_stop(&sh);

    shard_start(&sh, "65536");
    struct sess_fig sf;
    bench_sessions(&sh, nsess, &sf);
    printf("\nsessions held: %d of %d (connect+Hello %.2fs, %.0f/s); session RSS %ld KiB idle, "
           "%ld KiB with the sessions (%.1f KiB/session), %ld KiB after a rollup each "
           "(%.2fs for %d rollups)\n",
           sf.held, sf.sessions, sf.connect_s, sf.hello_per_s, sf.rss_before_kib, sf.rss_after_kib,
           sf.held ? (double)(sf.rss_after_kib - sf.rss_before_kib) / sf.held : 0.0,
           sf.rss_after_rollup_kib, sf.rollup_s, sf.held);
    shard_stop(&sh);
    bf_net_loop_free(g_loop);

    mkdir(results, 0755);
    char path[512];
    snprintf(path, sizeof path, "%s/bench_session.json", results);
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return 1;
    }
    struct utsname u;
    uname(&u);
    fprintf(f, "{\n  \"host\": \"%s %s\", \"cpus\": %ld,\n  \"ingest\": [\n", u.sysname, u.release,
            sysconf(_SC_NPROCESSORS_ONLN));
    for (int k = 0; k < 10; k++) {
        struct ingest_fig *x = k < 6   ? (k % 2 ? &four[k / 2] : &one[k / 2])
                               : k < 8 ? &same[k - 6]
                                       : &part[k - 8];
        fprintf(
            f,
            "    {\"rows\": %u, \"operators\": %u, \"rollups_kind\": \"%s\", "
            "\"needs_changed_1_in\": %u, \"rollup_bytes\": %zu, \"rollups\": %u, "
            "\"rollups_per_s\": %.2f, \"ack_p50_ms\": %.3f, \"ack_p99_ms\": %.3f, "
            "\"cold_first_ms\": %.1f, \"hello_ping_p99_ms\": %.3f, \"ingest_mean_us\": %.1f}%s\n",
            x->rows, x->ops, x->unchanged ? "unchanged" : "changed", x->unchanged ? 0 : x->every,
            x->bytes, x->rollups, x->rps, x->p50, x->p99, x->cold_ms, x->ping_p99, x->ingest_us,
            k < 9 ? "," : "");
    }
    fprintf(f,
            "  ],\n  \"sessions\": {\"target\": %d, \"held\": %d, \"connect_s\": %.3f, "
            "\"rss_idle_kib\": %ld, \"rss_held_kib\": %ld, \"rss_after_rollups_kib\": %ld, "
            "\"rollup_each_s\": %.3f}\n}\n",
            sf.sessions, sf.held, sf.connect_s, sf.rss_before_kib, sf.rss_after_kib,
            sf.rss_after_rollup_kib, sf.rollup_s);
    fclose(f);
    printf("wrote %s\n", path);
    return g_failed ? 1 : 0;
}
