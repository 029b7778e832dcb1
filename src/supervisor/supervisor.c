/*
 * supervisor.c — bigfleet-shardd's supervisor: segment lifecycle, children,
 * reaping, repair, restarts, crash-loop escalation and graceful stop.
 *
 * Modelled on PostgreSQL's postmaster (reference/aesthetics.md §1.2, §4): the
 * supervisor is never in the data path. It touches shared memory only to
 * create it, to publish the wake eventfds and appliance flags, and to repair
 * what a reaped child could have left half-written.
 *
 * Start-up: flock /dev/shm/bigfleet.<id>.lock (a live appliance with the same
 * id, or orphaned children still holding the inherited lock fd, make us
 * refuse to start); bump the epoch in LMDB; unlink stale segments; create
 * the segments; create one eventfd per role; start the embedded simulated
 * provider when --provider-addr is empty; fork+exec the four children.
 *
 * Child death (signalfd SIGCHLD, waitpid loop): repair (records left odd by
 * the dead pid -> even + NEEDS_REFRESH; a string lock it held; its cluster
 * rows' writer word), then restart the role at once. More than
 * --crash-loop-restarts restarts of one role within --crash-loop-window
 * escalate to a full re-initialisation: stop every child, recreate the
 * segments (generation + 1), start them all again.
 *
 * Stop (SIGTERM/SIGINT): SIGTERM to every child, SIGKILL after 4 s, unlink
 * the segments and the lock file, exit 0.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bigfleet/log.h"
#include "bigfleet/process.h"
#include "bigfleet/session.h"
#include "bigfleet/util.h"
#include "supervisor.h"

#define NCHILD_ROLES 4
static const int child_roles[NCHILD_ROLES] = {BF_ROLE_SESSION, BF_ROLE_RECONCILER, BF_ROLE_CYCLE,
                                              BF_ROLE_EXECUTOR};
#define MAX_RESTART_HISTORY 64
#define STOP_GRACE_NS       (4LL * BF_NS_PER_SEC)
#define HEARTBEAT_STALL_NS  (120LL * BF_NS_PER_SEC)

struct child {
    int role;
    pid_t pid;
    int64_t started_ns;
    int64_t restart_at[MAX_RESTART_HISTORY];
    int n_restarts;
    bool no_respawn;
};

struct sup {
    const struct bf_config *cfg;
    int argc;
    char **argv;
    struct bf_shm shm;
    struct bf_shm_caps caps;
    int64_t epoch;
    uint32_t generation;
    int lock_fd;
    char lock_path[256];
    int wake_fd[BF_ROLE_COUNT];
    struct child kids[BF_ROLE_COUNT];
    bool with_sim;
    char sim_path[PATH_MAX];
    char self_path[PATH_MAX];
    char provider_arg[BF_ADDR_MAX + 32];
    bool stopping;
    int exit_code;
};

static int take_lock(struct sup *s)
{
    snprintf(s->lock_path, sizeof s->lock_path, "/dev/shm/bigfleet.%s.lock", s->cfg->id);
    s->lock_fd = open(s->lock_path, O_RDWR | O_CREAT, 0644); /* no CLOEXEC: children hold it */
    if (s->lock_fd < 0) {
        BF_ERROR("cannot open lock file", "path=%s error=\"%s\"", s->lock_path, strerror(errno));
        return -errno;
    }
    if (flock(s->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        char buf[32] = "";
        ssize_t n = pread(s->lock_fd, buf, sizeof buf - 1, 0);
        if (n > 0)
            buf[n] = 0;
        for (char *p = buf; *p; p++)
            if (*p == '\n')
                *p = 0;
        fprintf(stderr,
                "bigfleet-shardd: another appliance with --id %s is running (supervisor pid %s); "
                "refusing to start\n",
                s->cfg->id, buf[0] ? buf : "unknown");
        BF_ERROR("refusing to start: shard id in use", "id=%s holder_pid=%s", s->cfg->id, buf);
        close(s->lock_fd);
        s->lock_fd = -1;
        return -EBUSY;
    }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (ftruncate(s->lock_fd, 0) != 0 || pwrite(s->lock_fd, pid, (size_t)n, 0) != n)
        BF_WARN("cannot record pid in lock file", "path=%s", s->lock_path);
    return 0;
}

static int create_segments(struct sup *s)
{
    if (bf_shm_unlink(s->cfg->id) == 0)
        BF_WARN("reclaimed stale segments of a dead appliance", "id=%s", s->cfg->id);
    char err[512];
    int rc = bf_shm_create(&s->shm, s->cfg->id, &s->caps, s->epoch, s->generation, err, sizeof err);
    if (rc) {
        BF_ERROR("cannot create shared segments", "error=\"%s\"", err);
        return rc;
    }
    bf_shm_set_role(&s->shm, BF_ROLE_SUPERVISOR);
    /* the standard Kubernetes resource names own their slots from the start:
     * no operator's or provider's names can crowd them out (docs/security.md) */
    for (int i = 0; i < BF_RESERVED_DIMS_N; i++)
        if (bf_dim_intern(&s->shm, bf_reserved_dims[i]) < 0)
            BF_WARN("cannot reserve a resource name", "name=%s", bf_reserved_dims[i]);
    struct bf_state_main *st = s->shm.st;
    atomic_store(&st->actuation_paused, s->cfg->actuation_paused ? 1 : 0);
    atomic_store(&st->dry_run, s->cfg->dry_run ? 1 : 0);
    for (int r = 0; r < BF_ROLE_COUNT; r++)
        if (s->wake_fd[r] >= 0)
            atomic_store(&st->proc[r].wake_fd, (uint32_t)s->wake_fd[r]);
    size_t total = bf_shm_total_bytes(&s->shm);
    BF_INFO("shared segments created",
            "id=%s epoch=%lld generation=%u max_machines=%u max_needs=%u max_clusters=%u "
            "bytes=%zu inventory_bytes_per_machine=%.1f",
            s->cfg->id, (long long)s->epoch, s->generation, s->caps.max_machines, s->caps.max_needs,
            s->caps.max_clusters, total,
            (double)s->shm.len[BF_SEG_INVENTORY] / s->caps.max_machines);
    return 0;
}

static void exe_dir(char *buf, size_t n)
{
    ssize_t l = readlink("/proc/self/exe", buf, n - 1);
    if (l <= 0) {
        snprintf(buf, n, ".");
        return;
    }
    buf[l] = 0;
    char *slash = strrchr(buf, '/');
    if (slash)
        *slash = 0;
}

/* fork + exec one child; returns its pid or -errno */
static pid_t spawn(struct sup *s, int role)
{
    char role_arg[32];
    char title[64];
    char *args[512];
    int n = 0;
    if (role == BF_ROLE_SIMPROVIDER) {
        static char addr_arg[BF_ADDR_MAX + 16];
        static char simargs[2048];
        snprintf(title, sizeof title, "bigfleet-simprovider");
        args[n++] = title;
        snprintf(addr_arg, sizeof addr_arg, "--addr=%s", s->cfg->sim_listen);
        args[n++] = addr_arg;
        snprintf(simargs, sizeof simargs, "%s", s->cfg->sim_args);
        for (char *tok = strtok(simargs, " \t"); tok && n < 500; tok = strtok(NULL, " \t"))
            args[n++] = tok;
    } else {
        snprintf(title, sizeof title, "bigfleet-shardd: %s", bf_role_name(role));
        args[n++] = title;
        for (int i = 1; i < s->argc && n < 500; i++)
            args[n++] = s->argv[i];
        if (s->with_sim)
            args[n++] = s->provider_arg;
        snprintf(role_arg, sizeof role_arg, "--role=%s", bf_role_name(role));
        args[n++] = role_arg;
    }
    args[n] = NULL;
    const char *path = role == BF_ROLE_SIMPROVIDER ? s->sim_path : s->self_path;
    /* ASSIGNED before the fork: the child marks its slot ACTIVE once attached,
     * and a store after the fork could land later and undo that */
    if (s->shm.st)
        atomic_store(&s->shm.st->proc[role].child_state, BF_CHILD_ASSIGNED);
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        sigset_t all;
        sigemptyset(&all);
        sigprocmask(SIG_SETMASK, &all, NULL);
        prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
        if (role != BF_ROLE_SIMPROVIDER && s->lock_fd >= 0) {
            /* the lock fd stays open in the child (orphans keep the id locked) */
        }
        execv(path, args);
        fprintf(stderr, "bigfleet-shardd: exec %s: %s\n", path, strerror(errno));
        _exit(BF_EXIT_NO_RESPAWN);
    }
    struct child *c = &s->kids[role];
    c->role = role;
    c->pid = pid;
    c->started_ns = bf_now_ns();
    if (s->shm.st) {
        struct bf_proc_slot *slot = &s->shm.st->proc[role];
        atomic_store(&slot->pid, (uint32_t)pid);
        atomic_store(&slot->started_ns, c->started_ns);
    }
    BF_INFO("child started", "role=%s child_pid=%d", bf_role_name(role), (int)pid);
    return pid;
}

static void start_all(struct sup *s)
{
    if (s->with_sim && !s->kids[BF_ROLE_SIMPROVIDER].no_respawn)
        spawn(s, BF_ROLE_SIMPROVIDER);
    for (int i = 0; i < NCHILD_ROLES; i++)
        if (!s->kids[child_roles[i]].no_respawn)
            spawn(s, child_roles[i]);
}

static int role_of_pid(struct sup *s, pid_t pid)
{
    for (int r = 0; r < BF_ROLE_COUNT; r++)
        if (s->kids[r].pid == pid)
            return r;
    return -1;
}

static bool any_alive(struct sup *s)
{
    for (int r = 0; r < BF_ROLE_COUNT; r++)
        if (s->kids[r].pid > 0)
            return true;
    return false;
}

static void repair_after(struct sup *s, int role, pid_t pid)
{
    if (!s->shm.st || role == BF_ROLE_SIMPROVIDER)
        return;
    int n = bf_inv_repair_dead_writer(&s->shm, (uint32_t)pid);
    if (n > 0) {
        atomic_fetch_add(&s->shm.st->supervisor.records_repaired, (uint64_t)n);
        BF_WARN("repaired machine records left half-written", "role=%s dead_pid=%d records=%d",
                bf_role_name(role), (int)pid, n);
    }
    /* cluster rows are latches: readers are unaffected; clear the writer word and
     * make the seq even by copying the intact copy over the torn one */
    uint32_t nc = atomic_load(&s->shm.needs->n_clusters);
    for (uint32_t i = 0; i < nc && i < s->shm.max_clusters; i++) {
        struct bf_shm_cluster *c = &s->shm.clusters[i];
        if (atomic_load(&c->writer) != (uint32_t)pid)
            continue;
        uint32_t seq = atomic_load(&c->seq);
        int good = (int)(seq & 1u); /* readers were reading this copy */
        for (int w = 0; w < BF_CLUSTER_WORDS; w++)
            atomic_store(&c->w[!good][w], atomic_load(&c->w[good][w]));
        if (seq & 1u) {
            /* copy 1 is intact and now also in copy 0: publish even */
            atomic_store_explicit(&c->seq, seq + 1, memory_order_release);
        }
        atomic_store(&c->writer, 0);
        atomic_fetch_add(&s->shm.st->supervisor.clusters_repaired, 1);
        BF_WARN("repaired a cluster row left mid-write", "dead_pid=%d cluster_row=%u", (int)pid, i);
    }
    /* stamps written by the session: make any odd stamp even */
    if (role == BF_ROLE_SESSION) {
        for (uint32_t i = 0; i <= s->shm.stamp_mask; i++) {
            uint32_t seq = atomic_load(&s->shm.stamps[i].seq);
            if (seq & 1u)
                atomic_store(&s->shm.stamps[i].seq, seq + 1);
        }
    }
}

static void stop_children(struct sup *s, int sig_first)
{
    for (int r = 0; r < BF_ROLE_COUNT; r++)
        if (s->kids[r].pid > 0)
            kill(s->kids[r].pid, sig_first);
    int64_t deadline = bf_mono_ns() + STOP_GRACE_NS;
    while (any_alive(s)) {
        int st;
        pid_t p = waitpid(-1, &st, WNOHANG);
        if (p > 0) {
            int r = role_of_pid(s, p);
            if (r >= 0) {
                s->kids[r].pid = 0;
                if (s->shm.st)
                    atomic_store(&s->shm.st->proc[r].pid, 0);
            }
            continue;
        }
        if (bf_mono_ns() > deadline) {
            for (int r = 0; r < BF_ROLE_COUNT; r++)
                if (s->kids[r].pid > 0) {
                    BF_WARN("child ignored SIGTERM, killing", "role=%s child_pid=%d",
                            bf_role_name(r), (int)s->kids[r].pid);
                    kill(s->kids[r].pid, SIGKILL);
                }
            deadline = bf_mono_ns() + STOP_GRACE_NS;
        }
        usleep(10000);
    }
}

static int full_reinit(struct sup *s)
{
    BF_ERROR("crash loop: re-initialising every child and the shared segments", "generation=%u",
             s->generation + 1);
    stop_children(s, SIGTERM);
    bf_shm_detach(&s->shm);
    s->generation++;
    int rc = create_segments(s);
    if (rc)
        return rc;
    atomic_store(&s->shm.st->supervisor.full_reinits, s->generation);
    for (int r = 0; r < BF_ROLE_COUNT; r++)
        s->kids[r].n_restarts = 0;
    start_all(s);
    return 0;
}

static bool crash_looping(struct sup *s, struct child *c)
{
    int64_t now = bf_mono_ns();
    int64_t window = s->cfg->crash_loop_window_ns;
    int recent = 0;
    for (int i = 0; i < c->n_restarts && i < MAX_RESTART_HISTORY; i++)
        if (now - c->restart_at[i] <= window)
            recent++;
    return recent >= s->cfg->crash_loop_restarts;
}

static void note_restart(struct child *c)
{
    int i = c->n_restarts % MAX_RESTART_HISTORY;
    c->restart_at[i] = bf_mono_ns();
    c->n_restarts++;
}

static void reap(struct sup *s)
{
    int st;
    pid_t pid;
    bool reinit = false;
    while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
        int r = role_of_pid(s, pid);
        if (r < 0)
            continue;
        struct child *c = &s->kids[r];
        c->pid = 0;
        bool clean_slot = true;
        if (s->shm.st) {
            struct bf_proc_slot *slot = &s->shm.st->proc[r];
            clean_slot = atomic_load(&slot->child_state) != BF_CHILD_ACTIVE;
            atomic_store(&slot->pid, 0);
            atomic_store(&slot->last_exit_status, st);
            atomic_fetch_add(&s->shm.st->supervisor.child_exits, 1);
        }
        if (WIFEXITED(st))
            BF_WARN("child exited", "role=%s child_pid=%d status=%d clean_slot=%d", bf_role_name(r),
                    (int)pid, WEXITSTATUS(st), clean_slot);
        else
            BF_WARN("child killed", "role=%s child_pid=%d signal=%d", bf_role_name(r), (int)pid,
                    WTERMSIG(st));
        repair_after(s, r, pid);
        if (s->stopping)
            continue;
        if (WIFEXITED(st) && WEXITSTATUS(st) == BF_EXIT_NO_RESPAWN) {
            BF_ERROR("child asked not to be restarted; stopping the appliance", "role=%s",
                     bf_role_name(r));
            c->no_respawn = true;
            s->stopping = true;
            s->exit_code = 1;
            continue;
        }
        note_restart(c);
        if (s->shm.st)
            atomic_fetch_add(&s->shm.st->proc[r].restarts, 1);
        if (crash_looping(s, c)) {
            reinit = true;
            continue;
        }
        spawn(s, r);
    }
    if (reinit && !s->stopping) {
        if (full_reinit(s) != 0) {
            s->stopping = true;
            s->exit_code = 1;
        }
    }
}

static void watch_heartbeats(struct sup *s)
{
    if (!s->shm.st)
        return;
    int64_t now = bf_now_ns();
    for (int i = 0; i < NCHILD_ROLES; i++) {
        int r = child_roles[i];
        struct child *c = &s->kids[r];
        if (c->pid <= 0)
            continue;
        int64_t hb = atomic_load(&s->shm.st->proc[r].heartbeat_ns);
        int64_t since = hb ? now - hb : now - c->started_ns;
        if (since > HEARTBEAT_STALL_NS) {
            BF_ERROR("child stopped heartbeating, killing it",
                     "role=%s child_pid=%d stalled_s=%lld", bf_role_name(r), (int)c->pid,
                     (long long)(since / BF_NS_PER_SEC));
            kill(c->pid, SIGKILL);
        }
    }
}

int bf_supervisor_main(const struct bf_config *cfg, int argc, char **argv)
{
    bf_log_init("supervisor", bf_log_level_parse(cfg->log_level));
    prctl(PR_SET_NAME, "bf-supervisor", 0, 0, 0);
    static struct sup S;
    struct sup *s = &S;
    memset(s, 0, sizeof *s);
    s->cfg = cfg;
    s->argc = argc;
    s->argv = argv;
    s->lock_fd = -1;
    s->caps.max_machines = cfg->max_machines;
    s->caps.max_needs = cfg->max_needs;
    s->caps.max_clusters = cfg->max_clusters;
    for (int r = 0; r < BF_ROLE_COUNT; r++)
        s->wake_fd[r] = -1;

    char dir[PATH_MAX - 64];
    exe_dir(dir, sizeof dir);
    snprintf(s->self_path, sizeof s->self_path, "%s/bigfleet-shardd", dir);
    if (access(s->self_path, X_OK) != 0) {
        ssize_t l = readlink("/proc/self/exe", s->self_path, sizeof s->self_path - 1);
        if (l > 0)
            s->self_path[l] = 0;
    }
    snprintf(s->sim_path, sizeof s->sim_path, "%s/bigfleet-simprovider", dir);
    s->with_sim = cfg->provider_addr[0] == 0;
    if (s->with_sim) {
        if (access(s->sim_path, X_OK) != 0) {
            fprintf(stderr,
                    "bigfleet-shardd: --provider-addr is empty and the embedded simulated "
                    "provider %s is missing\n",
                    s->sim_path);
            return 1;
        }
        snprintf(s->provider_arg, sizeof s->provider_arg, "--provider-addr=%s", cfg->sim_listen);
    }

    if (take_lock(s) != 0)
        return 1;
    char err[512];
    if (bf_epoch_bump(cfg->data_dir, &s->epoch, err, sizeof err) != 0) {
        BF_ERROR("cannot bump the shard epoch", "error=\"%s\"", err);
        fprintf(stderr, "bigfleet-shardd: %s\n", err);
        return 1;
    }
    for (int r = 1; r < BF_ROLE_COUNT; r++) {
        s->wake_fd[r] = eventfd(0, EFD_NONBLOCK); /* inherited by the children */
        if (s->wake_fd[r] < 0) {
            BF_ERROR("eventfd", "error=\"%s\"", strerror(errno));
            return 1;
        }
    }
    if (create_segments(s) != 0)
        return 1;

    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0) {
        BF_ERROR("signalfd", "error=\"%s\"", strerror(errno));
        return 1;
    }

    BF_INFO("starting", "id=%s epoch=%lld listen=%s metrics_addr=%s provider=%s", cfg->id,
            (long long)s->epoch, cfg->listen, cfg->metrics_addr,
            s->with_sim ? "embedded-simprovider" : cfg->provider_addr);
    start_all(s);
    bf_sd_notify("READY=1\nSTATUS=shard running");

    while (!s->stopping) {
        struct pollfd pfd = {sfd, POLLIN, 0};
        int pr = poll(&pfd, 1, 1000);
        if (pr > 0) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
                if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) {
                    BF_INFO("stop requested", "signal=%u", si.ssi_signo);
                    s->stopping = true;
                } else if (si.ssi_signo == SIGHUP) {
                    BF_INFO("SIGHUP ignored (configuration is static)", "%s", "");
                }
            }
        }
        reap(s);
        watch_heartbeats(s);
    }

    bf_sd_notify("STOPPING=1");
    if (s->shm.st)
        atomic_store(&s->shm.st->shutting_down, 1);
    stop_children(s, SIGTERM);
    bf_shm_detach(&s->shm);
    bf_shm_unlink(cfg->id);
    unlink(s->lock_path);
    close(s->lock_fd);
    BF_INFO("stopped", "id=%s", cfg->id);
    return s->exit_code;
}
