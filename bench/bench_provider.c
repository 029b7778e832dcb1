/*
 * bench_provider.c — figures for the provider path through the real gRPC
 * stack, with bigfleet-simprovider as a separate process (as in the
 * appliance) and the reconciler / executor engines (src/reconciler,
 * src/executor) on this process's event loop over private shared segments:
 *
 *   1. reconcile of a 500K-machine pool: the cold full pass (every machine
 *      inserted), a steady-state full pass (the state-match fast path), and
 *      incremental passes after k = 0, 100, 1,000, 10,000 provider changes;
 *   2. actions executed per second by the executor at concurrency 128 with a
 *      zero-latency provider: Provision (Create + Configure, local bootstrap
 *      blob, audit log on) and Reclaim (Drain);
 *   3. the same Provisions with every provider reply held uniform(50 ms,
 *      150 ms) ("100 +- 50 ms").
 *
 * This process plays the cycle (it pushes actions exactly as the cycle does)
 * and the session (it drains the NODE_EXEC and RECLAIM rings). Speed is
 * reported, never asserted. Usage:
 *   bench_provider [--results DIR] [--machines N] [--actions N]
 *                  [--latency-actions N] [--concurrency N] [--page N]
 *                  [--reconcile-only] [--walks N]
 * (--page: machines per page of the paged resync walk, default BF_RECON_PAGE;
 * --reconcile-only: part 1 alone, for profiling and repeated runs;
 * --walks: resync walks measured, the median reported, default 3, max 64)
 * Prints a table and writes DIR/bench_provider.json (default results/).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_common.h"
#include "bigfleet/blobs.h"
#include "bigfleet/log.h"
#include "bigfleet/provider.h"
#include "bigfleet/util.h"
#include "executor/executor.h"
#include "reconciler/reconciler.h"

static struct bf_net_loop *loop;

/* ------------------------------------------------------------ clean-up
 * The simulator and the private segments go away however this process
 * ends: exit (atexit), SIGINT/SIGTERM (the handler), or SIGKILL (the
 * simulator dies with us through PR_SET_PDEATHSIG; the next run removes
 * segments of bench runs whose process is gone). */
static volatile pid_t cleanup_sim_pid;
static char cleanup_paths[4][96]; /* /dev/shm/bigfleet.<id>.<segment> */

static void cleanup_set_shard(const char *id)
{
    static const char *const seg[4] = {"inventory", "needs", "rings", "state"};
    for (int i = 0; i < 4; i++)
        snprintf(cleanup_paths[i], sizeof cleanup_paths[i], "/dev/shm/bigfleet.%s.%s", id, seg[i]);
}

static void cleanup_now(void)
{
    pid_t p = cleanup_sim_pid;
    if (p > 0)
        kill(p, SIGTERM);
    for (int i = 0; i < 4; i++)
        if (cleanup_paths[i][0])
            unlink(cleanup_paths[i]);
}

static void on_fatal_signal(int sig)
{
    cleanup_now(); /* kill and unlink only: async-signal-safe */
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Segments of earlier runs (bigfleet.bench-prov-<pid>.*) whose process is gone. */
static void remove_stale_segments(void)
{
    DIR *d = opendir("/dev/shm");
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int pid = 0, n = 0;
        if (sscanf(e->d_name, "bigfleet.bench-prov-%d.%n", &pid, &n) != 1 || n == 0 || pid <= 0)
            continue;
        if (kill(pid, 0) == 0 || errno != ESRCH)
            continue; /* alive (or not ours to judge) */
        char path[512];
        snprintf(path, sizeof path, "/dev/shm/%s", e->d_name);
        if (unlink(path) == 0)
            fprintf(stderr, "bench_provider: removed a stale segment %s\n", path);
    }
    closedir(d);
}

struct sim {
    pid_t pid;
    char addr[64];
};

static void die(const char *what, int rc)
{
    fprintf(stderr, "bench_provider: %s: %s\n", what, rc < 0 ? strerror(-rc) : "failed");
    exit(1);
}

/* Starts build/bin/bigfleet-simprovider (next to this binary's ../bin). */
static struct sim sim_start(const char *self, char *const extra[])
{
    char dir[1024], path[1100];
    snprintf(dir, sizeof dir, "%s", self);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    snprintf(path, sizeof path, "%s/../bin/bigfleet-simprovider", dir);
    int p[2];
    if (pipe(p))
        die("pipe", -errno);
    struct sim s = {0};
    s.pid = fork();
    if (s.pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* dies with the bench, however it ends */
        dup2(p[1], 1);
        close(p[0]);
        char *argv[32] = {path, "--addr=127.0.0.1:0", "--log-level=error"};
        int n = 3;
        for (int i = 0; extra[i] && n < 30; i++)
            argv[n++] = extra[i];
        argv[n] = NULL;
        execv(path, argv);
        _exit(127);
    }
    close(p[1]);
    cleanup_sim_pid = s.pid;
    char buf[256];
    size_t got = 0;
    int64_t end = bf_mono_ns() + 60 * BF_NS_PER_SEC;
    while (got < sizeof buf - 1 && bf_mono_ns() < end) {
        ssize_t r = read(p[0], buf + got, sizeof buf - 1 - got);
        if (r <= 0)
            break;
        got += (size_t)r;
        buf[got] = 0;
        char *m = strstr(buf, "READY grpc=");
        if (m && strchr(m, '\n')) {
            snprintf(s.addr, sizeof s.addr, "127.0.0.1:%d", atoi(m + 11));
            close(p[0]);
            return s;
        }
    }
    die("simprovider did not start", -EIO);
    return s;
}

/* CPU seconds (user + system) of this process (bench_proc_cpu_s: another's) */
static double cpu_self_s(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

static void sim_stop(struct sim *s)
{
    kill(s->pid, SIGTERM);
    waitpid(s->pid, NULL, 0);
    cleanup_sim_pid = 0;
}

static struct bf_shm *shm_new(const char *id, uint32_t machines)
{
    static struct bf_shm shm;
    char err[256];
    bf_shm_detach(&shm);
    bf_shm_unlink(id);
    memset(&shm, 0, sizeof shm);
    struct bf_shm_caps caps = {.max_machines = machines, .max_needs = 1024, .max_clusters = 64};
    int rc = bf_shm_create(&shm, id, &caps, 1, 0, err, sizeof err);
    if (rc) {
        fprintf(stderr, "bench_provider: %s\n", err);
        exit(1);
    }
    return &shm;
}

/* ------------------------------------------------------------ reconcile */

struct pass {
    bool done;
    struct bf_recon_result r;
};
static void pass_done(void *arg, const struct bf_recon_result *r)
{
    struct pass *p = arg;
    p->done = true;
    p->r = *r;
}

/* One reconcile as the cycle asks for it: a delta, or a whole walk (every
 * page; list and apply times summed over the pages). */
static struct bf_recon_result run_pass(struct bf_recon *rc)
{
    struct bf_recon_result sum = {0};
    for (;;) {
        struct pass p = {0};
        int e = bf_recon_step(rc, true, bf_mono_ns(), pass_done, &p);
        if (e != 1)
            die("reconcile start", e < 0 ? e : -EINVAL);
        while (!p.done)
            bf_net_loop_run_once(loop, 10 * BF_NS_PER_MS);
        if (p.r.status != BF_PROV_OK) {
            fprintf(stderr, "bench_provider: reconcile pass: status %d (kind %d)\n", p.r.status,
                    p.r.kind);
            exit(1);
        }
        int64_t l = sum.list_ns + p.r.list_ns, a = sum.apply_ns + p.r.apply_ns;
        uint32_t listed = sum.listed + p.r.listed;
        sum = p.r;
        sum.list_ns = l;
        sum.apply_ns = a;
        sum.listed = listed;
        if (p.r.kind == BF_RECON_DELTA || p.r.full)
            return sum;
    }
}

/* index of the median of n passes by list + apply */
static int median_of(const struct bf_recon_result *r, int n)
{
    int idx[64];
    for (int i = 0; i < n; i++)
        idx[i] = i;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && r[idx[j]].list_ns + r[idx[j]].apply_ns <
                                     r[idx[j - 1]].list_ns + r[idx[j - 1]].apply_ns;
             j--) {
            int t = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = t;
        }
    return idx[n / 2];
}

struct creates {
    int outstanding;
};
static void create_done(void *arg, const struct bf_prov_result *r, const struct bf_prov_ack *a)
{
    (void)r, (void)a;
    ((struct creates *)arg)->outstanding--;
}

/* k Creates at the provider (not timed), on Speculative machines from slot off */
static void provider_changes(struct bf_shm *s, struct bf_prov_client *cl, uint32_t off, int k)
{
    struct creates c = {0};
    uint32_t hwm = bf_inv_hwm(s), done = 0;
    for (uint32_t i = off; i < hwm && (int)done < k; i++) {
        struct bf_machine_rec rec;
        if (bf_inv_read(s, i, &rec) || rec.state != BF_STATE_SPECULATIVE)
            continue;
        uint32_t l;
        const char *id = bf_str(s, rec.id, &l);
        if (bf_prov_create(cl, id, l, 0, create_done, &c, NULL) == 0) {
            c.outstanding++;
            done++;
        }
        while (c.outstanding >= 256)
            bf_net_loop_run_once(loop, BF_NS_PER_MS);
    }
    while (c.outstanding)
        bf_net_loop_run_once(loop, BF_NS_PER_MS);
}

/* ------------------------------------------------------------ execute */

static void drain_session_rings(struct bf_shm *s)
{
    struct bf_node_event_msg ev;
    struct bf_reclaim_msg rm;
    while (bf_ring_pop(s, BF_RING_NODE_EXEC, &ev) == 0)
        ;
    while (bf_ring_pop(s, BF_RING_RECLAIM, &rm) == 0)
        ;
}

/* Pushes one action per machine in `state` (up to n), then runs the executor
 * until every one is done. Returns the elapsed seconds. */
static double run_actions(struct bf_shm *s, struct bf_exec *e, int kind, int state, int n,
                          uint32_t need, uint32_t cluster, int *pushed, uint64_t *successes)
{
    uint64_t before = atomic_load(&s->st->executor.outcomes[kind][BF_OUT_SUCCESS]);
    uint32_t hwm = bf_inv_hwm(s);
    *pushed = 0;
    int64_t t0 = bf_mono_ns();
    for (uint32_t i = 0; i < hwm && *pushed < n; i++) {
        struct bf_machine_rec rec;
        if (bf_inv_read(s, i, &rec) || !(rec.flags & BF_REC_VALID) || rec.state != state ||
            bf_pending(s, i))
            continue;
        uint8_t tag = bf_pending_mark(s, i);
        struct bf_action_msg a = {
            .serial = atomic_fetch_add(&s->st->action_serial, 1) + 1,
            .slot = i,
            .machine_id_ref = rec.id,
            .cluster_ref = kind == BF_ACT_RECLAIM ? rec.cluster : cluster,
            .need_profile_ref = need,
            .grace_seconds = kind == BF_ACT_RECLAIM ? 600 : 0,
            .kind = (uint8_t)kind,
            .reason = kind == BF_ACT_RECLAIM ? BF_REASON_P3_EXCESS : BF_REASON_P1_SPECULATIVE,
            .pending_tag = tag,
        };
        if (bf_ring_push(s, BF_RING_ACTIONS, &a))
            die("actions ring full", -ENOSPC);
        (*pushed)++;
    }
    for (;;) {
        bf_exec_poll(e);
        drain_session_rings(s);
        if (bf_ring_depth(s, BF_RING_ACTIONS) == 0 && bf_exec_inflight(e) == 0)
            break;
        bf_net_loop_run_once(loop, BF_NS_PER_MS);
    }
    *successes = atomic_load(&s->st->executor.outcomes[kind][BF_OUT_SUCCESS]) - before;
    return (bf_mono_ns() - t0) / 1e9;
}

struct exec_fig {
    int actions;
    uint64_t ok;
    double seconds, per_s;
};

static struct exec_fig exec_bench(const char *self, const char *shard, int n, int kind_second,
                                  const char *latency, uint32_t conc, struct exec_fig *second)
{
    char seed[64], lat[96];
    snprintf(seed, sizeof seed, "--seed-count=%d", n / 5 + 1);
    snprintf(lat, sizeof lat, "--rpc-latency=%s", latency ? latency : "0");
    char *args[] = {seed, lat, NULL};
    struct sim sim = sim_start(self, args);
    struct bf_shm *s = shm_new(shard, (uint32_t)(n + n / 2 + 64));
    struct bf_prov_client *cl;
    struct bf_prov_opts po = {.addr = sim.addr, .shard_id = "bench", .epoch = 1};
    int rc = bf_prov_client_new(loop, &po, &cl);
    if (rc)
        die("client", rc);
    struct bf_recon *rcn;
    struct bf_recon_opts ro = {0};
    if ((rc = bf_recon_new(s, cl, &ro, &rcn)))
        die("recon", rc);
    run_pass(rcn);
    char audit[128];
    snprintf(audit, sizeof audit, "/tmp/bench-provider-audit-%d.jsonl", (int)getpid());
    int afd = open(audit, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
    struct bf_exec *e;
    struct bf_exec_opts xo = {.concurrency = conc, .local_bootstrap = true, .audit_fd = afd};
    if ((rc = bf_exec_new(loop, s, cl, &xo, &e)))
        die("executor", rc);
    static const char *vals[] = {"m6i.large", "r6i.xlarge", "c6i.4xlarge", "n2-standard-32",
                                 "a3-highgpu-8g"};
    struct bf_requirement req = {
        .key = BF_LABEL_INSTANCE_TYPE, .op = BF_OP_IN, .n_values = 5, .values = vals};
    struct bf_need_profile p = {.priority = 10000, .ipb = 12, .rpb = 14, .n_reqs = 1, .reqs = &req};
    uint32_t need, fp, cluster;
    if (bf_nprofile_intern(s, &p, &need, &fp) || bf_str_intern_cstr(s, "bench-cluster", &cluster))
        die("intern", -ENOSPC);
    while (bf_prov_client_state(cl) != BF_NET_CLIENT_READY)
        bf_net_loop_run_once(loop, BF_NS_PER_MS);
    struct exec_fig f = {0};
    f.seconds = run_actions(s, e, BF_ACT_PROVISION, BF_STATE_SPECULATIVE, n, need, cluster,
                            &f.actions, &f.ok);
    f.per_s = f.actions / f.seconds;
    if (second) {
        memset(second, 0, sizeof *second);
        second->seconds = run_actions(s, e, kind_second, BF_STATE_CONFIGURED, n, need, cluster,
                                      &second->actions, &second->ok);
        second->per_s = second->actions / second->seconds;
    }
    bf_exec_close(e);
    bf_recon_free(rcn);
    bf_prov_client_free(cl);
    bf_exec_free(e);
    close(afd);
    unlink(audit);
    sim_stop(&sim);
    return f;
}

/* ------------------------------------------------------------ main */

int main(int argc, char **argv)
{
    const char *results = "results";
    int machines = 500000, actions = 20000, lat_actions = 2000;
    uint32_t conc = 128, page = BF_RECON_PAGE;
    bool reconcile_only = false;
    int walks = 3;
    static const struct option lo[] = {{"results", required_argument, 0, 'r'},
                                       {"machines", required_argument, 0, 'm'},
                                       {"actions", required_argument, 0, 'a'},
                                       {"latency-actions", required_argument, 0, 'l'},
                                       {"concurrency", required_argument, 0, 'c'},
                                       {"page", required_argument, 0, 'p'},
                                       {"reconcile-only", no_argument, 0, 'R'},
                                       {"walks", required_argument, 0, 'w'},
                                       {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (o) {
        case 'r':
            results = optarg;
            break;
        case 'm':
            machines = atoi(optarg);
            break;
        case 'a':
            actions = atoi(optarg);
            break;
        case 'l':
            lat_actions = atoi(optarg);
            break;
        case 'c':
            conc = (uint32_t)atoi(optarg);
            break;
        case 'p':
            page = (uint32_t)atoi(optarg);
            break;
        case 'R':
            reconcile_only = true;
            break;
        case 'w':
            walks = atoi(optarg);
            if (walks < 1 || walks > 64)
                walks = 3;
            break;
        default:
            fprintf(stderr,
                    "usage: %s [--results DIR] [--machines N] [--actions N] "
                    "[--latency-actions N] [--concurrency N] [--page N] [--reconcile-only] "
                    "[--walks N]\n",
                    argv[0]);
            return 2;
        }
    }
    bf_log_init("bench", BF_LOG_ERROR);
    signal(SIGPIPE, SIG_IGN);
    remove_stale_segments();
    int rc = bf_net_loop_new(NULL, &loop);
    if (rc)
        die("loop", rc);
    char shard[64];
    snprintf(shard, sizeof shard, "bench-prov-%d", (int)getpid());
    cleanup_set_shard(shard);
    atexit(cleanup_now);
    signal(SIGINT, on_fatal_signal);
    signal(SIGTERM, on_fatal_signal);

    /* 1. reconcile of the big pool */
    char seed[64];
    snprintf(seed, sizeof seed, "--seed-count=%d", machines / 5);
    char *args[] = {seed, NULL};
    int64_t ts = bf_mono_ns();
    struct sim sim = sim_start(argv[0], args);
    double seed_s = (bf_mono_ns() - ts) / 1e9;
    struct bf_shm *s = shm_new(shard, (uint32_t)(machines + machines / 5 + 64));
    struct bf_prov_client *cl, *changer;
    struct bf_prov_opts po = {.addr = sim.addr, .shard_id = "bench", .epoch = 1};
    struct bf_prov_opts co = {.addr = sim.addr, .shard_id = ""};
    if ((rc = bf_prov_client_new(loop, &po, &cl)) || (rc = bf_prov_client_new(loop, &co, &changer)))
        die("client", rc);
    struct bf_recon *rcn;
    struct bf_recon_opts ro = {.incremental = true, .page_size = page, .startup_page_size = page};
    if ((rc = bf_recon_new(s, cl, &ro, &rcn)))
        die("recon", rc);
    /* cold: the start-up walk of an empty inventory (one List, every machine inserted) */
    struct bf_recon_result cold = run_pass(rcn);
    /* steady, unpaged: the same one-List walk over a whole inventory (fast path) */
    struct bf_recon_result steady[3], paged[64];
    for (int i = 0; i < 3; i++) {
        atomic_store(&s->st->first_reconcile_done, 0);
        bf_recon_reset_cursor(rcn);
        steady[i] = run_pass(rcn);
    }
    /* steady, paged: the resync walk the appliance runs beside its cycles
     * (pages of BF_RECON_PAGE; list and apply summed over the pages) */
    atomic_store(&s->st->first_reconcile_done, 1);
    /* a mark for profilers attaching to both processes for the walks only */
    fprintf(stderr, "bench_provider: resync walks start (pid %d, simulator pid %d)\n",
            (int)getpid(), (int)sim.pid);
    double walk_cpu_self = 0, walk_cpu_sim = 0;
    for (int i = 0; i < walks; i++) {
        bf_recon_reset_cursor(rcn);
        double c0 = cpu_self_s(), p0 = bench_proc_cpu_s(sim.pid);
        paged[i] = run_pass(rcn);
        walk_cpu_self += cpu_self_s() - c0;
        walk_cpu_sim += bench_proc_cpu_s(sim.pid) - p0;
        /* a pause: the simulator's HTTP/2 flood guard allows 200 new streams
         * a second beyond a burst of 400, and a walk is 123 of them */
        for (int64_t until = bf_mono_ns() + 700 * BF_NS_PER_MS; bf_mono_ns() < until;)
            bf_net_loop_run_once(loop, 10 * BF_NS_PER_MS);
    }
    int ks[4] = {0, 100, 1000, 10000};
    struct bf_recon_result inc[4];
    run_pass(rcn); /* a cursor */
    uint32_t off = 0;
    for (int i = 0; i < 4; i++) {
        provider_changes(s, changer, off, ks[i]);
        off += (uint32_t)ks[i] * 2;
        inc[i] = run_pass(rcn);
        while (1) { /* a truncated delta: the rest, as the background catch-up */
            struct pass p = {0};
            if (bf_recon_step(rcn, false, bf_mono_ns(), pass_done, &p) != 1)
                break;
            while (!p.done)
                bf_net_loop_run_once(loop, 10 * BF_NS_PER_MS);
            if (p.r.kind != BF_RECON_DELTA) { /* a walk page: not part of this figure */
                while (bf_recon_step(rcn, false, bf_mono_ns(), pass_done, &p) == 1 && !p.r.full)
                    ;
                break;
            }
            inc[i].listed += p.r.listed;
            inc[i].list_ns += p.r.list_ns;
            inc[i].apply_ns += p.r.apply_ns;
        }
    }
    int mi = median_of(steady, 3), mp = median_of(paged, walks);
    /* the walk's wall time (first page asked to removals done): with pages
     * asked ahead (pipelined), list and apply overlap and their sum is not
     * the walk's time */
    int64_t walls[64];
    for (int i = 0; i < walks; i++) {
        int j = i;
        for (; j > 0 && walls[j - 1] > paged[i].walk_ns; j--)
            walls[j] = walls[j - 1];
        walls[j] = paged[i].walk_ns;
    }
    double wall_med =
        (walks % 2 ? walls[walks / 2] : (walls[walks / 2 - 1] + walls[walks / 2]) / 2) / 1e6;
    bf_recon_free(rcn);
    bf_prov_client_free(changer);
    bf_prov_client_free(cl);
    sim_stop(&sim);

    /* 2. and 3. the executor */
    struct exec_fig reclaim = {0}, zero = {0}, slow = {0};
    if (!reconcile_only) {
        zero = exec_bench(argv[0], shard, actions, BF_ACT_RECLAIM, NULL, conc, &reclaim);
        slow = exec_bench(argv[0], shard, lat_actions, 0, "uniform(50ms,150ms)", conc, NULL);
    }
    bf_shm_detach(s);
    bf_shm_unlink(shard);

    printf("bench_provider (simprovider as a separate process, real gRPC, %d machines)\n",
           machines);
    printf("  simprovider start + seeding                     %8.2f s\n", seed_s);
    printf("  reconcile, full, cold (insert all)    listed %7u  list %8.1f ms  apply %8.1f ms"
           "  (%u pages, %.1f ms wall)\n",
           cold.listed, cold.list_ns / 1e6, cold.apply_ns / 1e6, cold.walk_pages,
           cold.walk_ns / 1e6);
    printf("  reconcile, full, steady (fast path)   listed %7u  list %8.1f ms  apply %8.1f ms\n",
           steady[mi].listed, steady[mi].list_ns / 1e6, steady[mi].apply_ns / 1e6);
    printf("  reconcile, resync walk, pages of %u  listed %7u  list %8.1f ms  apply %8.1f ms"
           "  (%u pages, %.1f ms wall; median of %d)\n",
           page, paged[mp].listed, paged[mp].list_ns / 1e6, paged[mp].apply_ns / 1e6,
           paged[mp].walk_pages, paged[mp].walk_ns / 1e6, walks);
    printf("  resync walk wall time, median of %d walks: %.1f ms (min %.1f, max %.1f)\n", walks,
           wall_med, walls[0] / 1e6, walls[walks - 1] / 1e6);
    printf("  resync walk CPU (mean of %d walks): reconciler %.1f ms, simulated provider %.1f ms\n",
           walks, walk_cpu_self * 1e3 / walks, walk_cpu_sim * 1e3 / walks);
    for (int i = 0; i < 4; i++)
        printf("  reconcile, incremental, %5d changes listed %7u  list %8.3f ms  apply %8.3f ms\n",
               ks[i], inc[i].listed, inc[i].list_ns / 1e6, inc[i].apply_ns / 1e6);
    if (!reconcile_only) {
        printf(
            "  execute, zero latency, concurrency %u: Provision (Create+Configure) %d in %.2f s = "
            "%.0f actions/s (%.0f RPC/s); success %llu\n",
            conc, zero.actions, zero.seconds, zero.per_s, 2 * zero.per_s,
            (unsigned long long)zero.ok);
        printf("  execute, zero latency, concurrency %u: Reclaim (Drain) %d in %.2f s = %.0f "
               "actions/s; "
               "success %llu\n",
               conc, reclaim.actions, reclaim.seconds, reclaim.per_s,
               (unsigned long long)reclaim.ok);
        printf(
            "  execute, reply latency uniform(50ms,150ms), concurrency %u: Provision %d in %.2f s "
            "= %.0f actions/s (bound: %u / 0.2 s = %.0f/s); success %llu\n",
            conc, slow.actions, slow.seconds, slow.per_s, conc, conc / 0.2,
            (unsigned long long)slow.ok);
    }

    mkdir(results, 0755);
    char path[1024];
    snprintf(path, sizeof path, "%s/bench_provider.json", results);
    FILE *f = fopen(path, "w");
    if (f) {
        struct utsname u;
        uname(&u);
        fprintf(f, "{\n  \"host\": \"%s %s\", \"cpus\": %ld, \"machines\": %d,\n", u.sysname,
                u.release, sysconf(_SC_NPROCESSORS_ONLN), machines);
        fprintf(
            f,
            "  \"reconcile\": {\"full_cold\": {\"listed\": %u, \"list_ms\": %.1f, \"apply_ms\": "
            "%.1f},\n    \"full_steady\": {\"listed\": %u, \"list_ms\": %.1f, \"apply_ms\": "
            "%.1f},\n    \"walk_paged\": {\"page\": %u, \"listed\": %u, \"pages\": %u, "
            "\"list_ms\": %.1f, \"apply_ms\": %.1f, \"wall_ms\": %.1f, \"wall_median_ms\": %.1f, "
            "\"cpu_reconciler_ms\": "
            "%.1f, "
            "\"cpu_provider_ms\": %.1f},\n    \"incremental\": [",
            cold.listed, cold.list_ns / 1e6, cold.apply_ns / 1e6, steady[mi].listed,
            steady[mi].list_ns / 1e6, steady[mi].apply_ns / 1e6, page, paged[mp].listed,
            paged[mp].walk_pages, paged[mp].list_ns / 1e6, paged[mp].apply_ns / 1e6,
            paged[mp].walk_ns / 1e6, wall_med, walk_cpu_self * 1e3 / walks,
            walk_cpu_sim * 1e3 / walks);
        for (int i = 0; i < 4; i++)
            fprintf(f, "%s{\"changes\": %d, \"listed\": %u, \"list_ms\": %.3f, \"apply_ms\": %.3f}",
                    i ? ", " : "", ks[i], inc[i].listed, inc[i].list_ns / 1e6,
                    inc[i].apply_ns / 1e6);
        fprintf(
            f,
            "]},\n  \"execute\": {\"concurrency\": %u,\n    \"zero_latency_provision\": "
            "{\"actions\": %d, \"seconds\": %.3f, \"per_s\": %.0f, \"success\": %llu},\n"
            "    \"zero_latency_reclaim\": {\"actions\": %d, \"seconds\": %.3f, \"per_s\": %.0f, "
            "\"success\": %llu},\n    \"latency_50_150ms_provision\": {\"actions\": %d, "
            "\"seconds\": %.3f, \"per_s\": %.0f, \"success\": %llu}}\n}\n",
            conc, zero.actions, zero.seconds, zero.per_s, (unsigned long long)zero.ok,
            reclaim.actions, reclaim.seconds, reclaim.per_s, (unsigned long long)reclaim.ok,
            slow.actions, slow.seconds, slow.per_s, (unsigned long long)slow.ok);
        fclose(f);
        printf("  written %s\n", path);
    }
    bf_net_loop_free(loop);
    return 0;
}
