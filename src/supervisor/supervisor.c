/*
 * supervisor.c — bigfleet-shardd's supervisor: segment lifecycle, children,
 * reaping, repair, restarts, crash-loop escalation and graceful stop.
 *
 * Modelled on PostgreSQL's postmaster (reference/aesthetics.md §1.2, §4): the
 * supervisor is never in the data path. It touches shared memory only to
 * create it, to publish the wake eventfds and appliance flags, and to repair
 * what a reaped child could have left half-written.
 *
 * Start-up: resolve the children's account (privdrop.c) and probe io_uring
 * with it (probe.c: exit 69 when refused); flock /dev/shm/bigfleet.<id>.lock
 * (O_NOFOLLOW; a live appliance with the same id, or orphaned children still
 * holding the inherited lock fd, make us refuse to start); bump the epoch in
 * LMDB and hand the data dir to the account; bind the listeners (--listen,
 * --metrics-addr: a bind failure is a fatal configuration, exit 78); unlink
 * stale segments; create the segments (0600, or 0640 with --inspect-group,
 * owned by the account) and publish the live configuration; create one
 * eventfd per role; start the embedded simulated provider when
 * --provider-addr is empty; fork+exec the four children, each dropping to
 * the account before exec and receiving the effective configuration as
 * explicit flags (bf_config_child_argv).
 *
 * Readiness (systemd Type=notify): READY=1 once the session accepts on every
 * listener and the cycle requested the first reconcile; WATCHDOG=1 from the
 * loop below while it turns (WatchdogSec=); STOPPING=1 at stop.
 *
 * SIGHUP (reload.c): re-reads the configuration; live settings reach the
 * children through the state segment, the others are logged and refused.
 *
 * Child death (signalfd SIGCHLD, waitpid loop): repair (records left odd by
 * the dead pid -> even + NEEDS_REFRESH; a string lock it held; its cluster
 * rows' writer word), then restart the role at once. More than
 * --crash-loop-restarts restarts of one role within --crash-loop-window
 * escalate to a full re-initialisation: stop every child, recreate the
 * segments (generation + 1), start them all again. More than
 * --crash-loop-max-reinits of those within --crash-loop-reinit-window: the
 * supervisor gives up (exit 1) and leaves the restart policy to systemd
 * (a new epoch, a fresh provider List). A child's exit 3 (fatal
 * configuration) stops the appliance with exit 78, never respawned.
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bigfleet/log.h"
#include "bigfleet/net.h"
#include "bigfleet/process.h"
#include "bigfleet/rollup.h"
#include "bigfleet/util.h"
#include "supervisor.h"
#include "supervisor_internal.h"

static const int child_roles[NCHILD_ROLES] = {BF_ROLE_SESSION, BF_ROLE_RECONCILER, BF_ROLE_CYCLE,
                                              BF_ROLE_EXECUTOR};
#define STOP_GRACE_NS      (4LL * BF_NS_PER_SEC)
#define HEARTBEAT_STALL_NS (120LL * BF_NS_PER_SEC)
#define CHILD_ARGV_MAX     256
#define CHILD_ARGBUF       (64 * 1024)

static int take_lock(struct sup *s)
{
    snprintf(s->lock_path, sizeof s->lock_path, "/dev/shm/bigfleet.%s.lock", s->cfg->id);
    /* no CLOEXEC: children hold it; O_NOFOLLOW: /dev/shm is world-writable */
    s->lock_fd = open(s->lock_path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NOCTTY, 0644);
    if (s->lock_fd < 0) {
        int e = errno;
        BF_ERROR("cannot open lock file", "path=%s error=\"%s\"", s->lock_path, strerror(e));
        fprintf(stderr, "bigfleet-shardd: lock file %s: %s%s\n", s->lock_path, strerror(e),
                e == ELOOP ? " (a symbolic link: refusing to follow it)" : "");
        return -e;
    }
    struct stat lst;
    if (fstat(s->lock_fd, &lst) != 0 || !S_ISREG(lst.st_mode) || lst.st_uid != geteuid()) {
        fprintf(stderr,
                "bigfleet-shardd: lock file %s is not a regular file owned by uid %u; "
                "refusing to use it (remove it if no appliance with --id %s runs)\n",
                s->lock_path, (unsigned)geteuid(), s->cfg->id);
        BF_ERROR("lock file has a foreign owner or type", "path=%s", s->lock_path);
        close(s->lock_fd);
        s->lock_fd = -1;
        return -EPERM;
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
    struct bf_shm_owner own = {
        .uid = (uint32_t)s->priv.uid, .gid = (uint32_t)s->priv.seg_gid, .mode = s->priv.seg_mode};
    if (!s->priv.drop) {
        own.uid = (uint32_t)-1;
        if (!s->cfg->inspect_group[0])
            own.gid = (uint32_t)-1;
    }
    rc = bf_shm_set_owner(&s->shm, &own, err, sizeof err);
    if (rc) {
        BF_ERROR("cannot hand the shared segments to the children's account", "error=\"%s\"", err);
        return rc;
    }
    /* the standard Kubernetes resource names own their slots from the start:
     * no operator's or provider's names can crowd them out (docs/security.md) */
    for (int i = 0; i < BF_RESERVED_DIMS_N; i++)
        if (bf_dim_intern(&s->shm, bf_reserved_dims[i]) < 0)
            BF_WARN("cannot reserve a resource name", "name=%s", bf_reserved_dims[i]);
    struct bf_state_main *st = s->shm.st;
    struct bf_live_values live;
    bf_live_from_config(&live, &s->run);
    bf_live_publish(&s->shm, &live);
    for (int r = 0; r < BF_ROLE_COUNT; r++)
        if (s->wake_fd[r] >= 0)
            BF_SHARED_STORE(st->proc[r].wake_fd, (uint32_t)s->wake_fd[r]);
    BF_SHARED_STORE(st->host.grpc_listen_fd, s->grpc_fd);
    BF_SHARED_STORE(st->host.http_listen_fd, s->http_fd);
    BF_SHARED_STORE(st->host.embedded_provider, s->with_sim ? 1 : 0);
    BF_SHARED_STORE(st->host.children_uid, (uint32_t)s->priv.uid);
    BF_SHARED_STORE(st->host.watchdog_enabled, s->watchdog_ns > 0 ? 1 : 0);
    size_t total = bf_shm_total_bytes(&s->shm);
    BF_INFO("shared segments created",
            "id=%s epoch=%lld generation=%u max_machines=%u max_needs=%u max_clusters=%u "
            "bytes=%zu inventory_bytes_per_machine=%.1f owner=%s mode=%04o",
            s->cfg->id, (long long)s->epoch, s->generation, s->caps.max_machines, s->caps.max_needs,
            s->caps.max_clusters, total,
            (double)bf_shm_segment_bytes(&s->shm, BF_SEG_INVENTORY) / s->caps.max_machines,
            s->priv.name, s->priv.seg_mode);
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
    static char argbuf[CHILD_ARGBUF];
    static char *args[CHILD_ARGV_MAX];
    char title[64];
    const char *path;
    if (role == BF_ROLE_SIMPROVIDER) {
        static char addr_arg[BF_ADDR_MAX + 16];
        static char simargs[2048];
        int n = 0;
        snprintf(title, sizeof title, "bigfleet-simprovider");
        args[n++] = title;
        snprintf(addr_arg, sizeof addr_arg, "--addr=%s", s->cfg->sim_listen);
        args[n++] = addr_arg;
        snprintf(simargs, sizeof simargs, "%s", s->cfg->sim_args);
        for (char *tok = strtok(simargs, " \t"); tok && n < CHILD_ARGV_MAX - 1;
             tok = strtok(NULL, " \t"))
            args[n++] = tok;
        args[n] = NULL;
        path = s->sim_path;
    } else {
        snprintf(title, sizeof title, "bigfleet-shardd: %s", bf_role_name(role));
        if (bf_config_child_argv(&s->run, title, bf_role_name(role), argbuf, sizeof argbuf, args,
                                 CHILD_ARGV_MAX) < 0) {
            BF_ERROR("child arguments do not fit", "role=%s", bf_role_name(role));
            return -E2BIG;
        }
        path = s->self_path;
    }
    /* ASSIGNED before the fork: the child marks its slot ACTIVE once attached,
     * and a store after the fork could land later and undo that */
    if (s->shm.st)
        BF_SHARED_STORE(s->shm.st->proc[role].child_state, BF_CHILD_ASSIGNED);
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        sigset_t all;
        sigemptyset(&all);
        sigprocmask(SIG_SETMASK, &all, NULL);
        /* the listening sockets go to the session only (close-on-exec elsewhere) */
        if (role == BF_ROLE_SESSION) {
            if (s->grpc_fd > 0)
                fcntl(s->grpc_fd, F_SETFD, 0);
            if (s->http_fd > 0)
                fcntl(s->http_fd, F_SETFD, 0);
        }
        /* the lock fd stays open in the child (orphans keep the id locked) */
        int rc = bf_priv_drop(&s->priv);
        if (rc) {
            fprintf(stderr, "bigfleet-shardd: cannot switch to account %s: %s\n", s->priv.name,
                    strerror(-rc));
            _exit(BF_EXIT_NO_RESPAWN);
        }
        /* after the credential change, which clears it */
        prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
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
        BF_SHARED_STORE(slot->pid, (uint32_t)pid);
        BF_SHARED_STORE(slot->started_ns, c->started_ns);
    }
    BF_INFO("child started", "role=%s child_pid=%d user=%s", bf_role_name(role), (int)pid,
            s->priv.name);
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
    struct bf_repair_report rep;
    bf_shm_repair_dead_writer(&s->shm, (uint32_t)pid, role, &rep);
    if (rep.records > 0) {
        BF_STAT_ADD(s->shm.st->supervisor.records_repaired, (uint64_t)rep.records);
        BF_WARN("repaired machine records left half-written", "role=%s dead_pid=%d records=%d",
                bf_role_name(role), (int)pid, rep.records);
    }
    if (rep.locks > 0) {
        BF_STAT_ADD(s->shm.st->supervisor.locks_recovered, (uint64_t)rep.locks);
        BF_WARN("released the string lock a dead child held", "role=%s dead_pid=%d",
                bf_role_name(role), (int)pid);
    }
    if (rep.cluster_rows > 0) {
        BF_STAT_ADD(s->shm.st->supervisor.clusters_repaired, (uint64_t)rep.cluster_rows);
        BF_WARN("repaired cluster rows left mid-write", "dead_pid=%d cluster_rows=%d", (int)pid,
                rep.cluster_rows);
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
                    BF_SHARED_STORE(s->shm.st->proc[r].pid, 0);
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

/* True when another full re-initialisation would exceed --crash-loop-max-reinits. */
static bool reinits_exhausted(struct sup *s)
{
    int64_t now = bf_mono_ns();
    int recent = 0;
    for (int i = 0; i < s->n_reinits && i < MAX_RESTART_HISTORY; i++)
        if (now - s->reinit_at[i] <= s->cfg->crash_loop_reinit_window_ns)
            recent++;
    return recent >= s->cfg->crash_loop_max_reinits;
}

static int full_reinit(struct sup *s)
{
    if (reinits_exhausted(s)) {
        BF_ERROR("crash loop persists after the allowed full re-initialisations; giving up",
                 "reinits=%d window_s=%lld", s->cfg->crash_loop_max_reinits,
                 (long long)(s->cfg->crash_loop_reinit_window_ns / BF_NS_PER_SEC));
        if (s->shm.st)
            BF_STAT_INC(s->shm.st->host.reinits_refused);
        return -ELOOP;
    }
    s->reinit_at[s->n_reinits % MAX_RESTART_HISTORY] = bf_mono_ns();
    s->n_reinits++;
    BF_ERROR("crash loop: re-initialising every child and the shared segments", "generation=%u",
             s->generation + 1);
    stop_children(s, SIGTERM);
    bf_shm_detach(&s->shm);
    s->generation++;
    int rc = create_segments(s);
    if (rc)
        return rc;
    BF_STAT_SET(s->shm.st->supervisor.full_reinits, s->generation);
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
            clean_slot = BF_SHARED_LOAD(slot->child_state) != BF_CHILD_ACTIVE;
            BF_SHARED_STORE(slot->pid, 0);
            BF_SHARED_STORE(slot->last_exit_status, st);
            BF_STAT_INC(s->shm.st->supervisor.child_exits);
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
            BF_ERROR("child reported a fatal configuration; stopping the appliance", "role=%s",
                     bf_role_name(r));
            c->no_respawn = true;
            s->stopping = true;
            s->exit_code = BF_EXIT_CONFIG;
            continue;
        }
        if (s->shm.st) {
            /* the dead instance's last sample moves to the dead total, so the
             * counter never goes back when the successor's first sample lands */
            struct bf_proc_usage *u = &s->shm.st->host.usage[r];
            BF_STAT_ADD(u->cpu_ns_dead, BF_STAT_TAKE(u->cpu_ns));
            BF_STAT_SET(u->rss_bytes, 0);
            BF_STAT_SET(u->open_fds, 0);
        }
        note_restart(c);
        if (s->shm.st)
            BF_STAT_INC(s->shm.st->proc[r].restarts);
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
        int64_t hb = BF_STAT_GET(s->shm.st->proc[r].heartbeat_ns);
        int64_t since = hb ? now - hb : now - c->started_ns;
        if (since > HEARTBEAT_STALL_NS) {
            BF_ERROR("child stopped heartbeating, killing it",
                     "role=%s child_pid=%d stalled_s=%lld", bf_role_name(r), (int)c->pid,
                     (long long)(since / BF_NS_PER_SEC));
            kill(c->pid, SIGKILL);
        }
    }
}

/* Resource use of every live process, about once a second. */
static void sample_usage(struct sup *s)
{
    int64_t now = bf_mono_ns();
    if (!s->shm.st || now - s->last_usage_ns < BF_NS_PER_SEC)
        return;
    s->last_usage_ns = now;
    bf_usage_sample(getpid(), &s->shm.st->host.usage[BF_ROLE_SUPERVISOR]);
    for (int r = 1; r < BF_ROLE_COUNT; r++)
        if (s->kids[r].pid > 0)
            bf_usage_sample(s->kids[r].pid, &s->shm.st->host.usage[r]);
}

/* READY=1 once the session accepts on every listener and the cycle asked
 * for the first reconcile (so /readyz and health follow within one pass). */
static void maybe_ready(struct sup *s)
{
    if (s->ready_sent || !s->shm.st)
        return;
    struct bf_state_main *st = s->shm.st;
    if (!BF_SHARED_LOAD(st->host.session_listening) || BF_SHARED_LOAD(st->reconcile_req_seq) == 0)
        return;
    s->ready_sent = true;
    char msg[256];
    snprintf(msg, sizeof msg, "READY=1\nSTATUS=serving shard %s (epoch %lld)\nMAINPID=%d",
             s->cfg->id, (long long)s->epoch, (int)getpid());
    bf_sd_notify(msg);
    BF_INFO("ready", "id=%s epoch=%lld", s->cfg->id, (long long)s->epoch);
}

static void feed_watchdog(struct sup *s)
{
    if (!s->watchdog_ns)
        return;
    int64_t now = bf_mono_ns();
    if (now - s->last_watchdog_ns < s->watchdog_ns / 2)
        return;
    s->last_watchdog_ns = now;
    if (bf_sd_notify("WATCHDOG=1") > 0 && s->shm.st)
        BF_STAT_INC(s->shm.st->host.watchdog_pings);
}

/* Binds --listen and --metrics-addr before any child exists. */
static int bind_listeners(struct sup *s)
{
    int rc = bf_net_listen_socket(s->cfg->listen, &s->grpc_fd);
    if (rc) {
        fprintf(stderr, "bigfleet-shardd: cannot listen on --listen %s: %s\n", s->cfg->listen,
                strerror(-rc));
        BF_ERROR("cannot bind --listen", "listen=%s error=\"%s\"", s->cfg->listen, strerror(-rc));
        s->grpc_fd = -1;
        return rc;
    }
    const char *m = s->cfg->metrics_addr;
    if (m[0] && strcmp(m, "0") != 0) {
        rc = bf_net_listen_socket(m, &s->http_fd);
        if (rc) {
            fprintf(stderr, "bigfleet-shardd: cannot listen on --metrics-addr %s: %s\n", m,
                    strerror(-rc));
            BF_ERROR("cannot bind --metrics-addr", "metrics_addr=%s error=\"%s\"", m,
                     strerror(-rc));
            s->http_fd = -1;
            return rc;
        }
    }
    BF_INFO("listening", "listen=%s grpc_port=%d metrics_addr=%s http_port=%d", s->cfg->listen,
            bf_net_socket_port(s->grpc_fd), m, s->http_fd > 0 ? bf_net_socket_port(s->http_fd) : 0);
    return 0;
}

/* --check-config: everything that can be checked without starting. */
static int check_config(struct sup *s)
{
    const struct bf_config *cfg = s->cfg;
    char err[512];
    int bad = 0;
    if (bf_priv_resolve(cfg, &s->priv, err, sizeof err) != 0) {
        fprintf(stderr, "bigfleet-shardd: %s\n", err);
        bad++;
    }
    const char *addrs[][2] = {{"--listen", cfg->listen},
                              {"--metrics-addr", cfg->metrics_addr},
                              {"--provider-addr", cfg->provider_addr},
                              {"--coordinator-addr", cfg->coordinator_addr},
                              {"--sim-listen", cfg->sim_listen}};
    for (size_t i = 0; i < sizeof addrs / sizeof addrs[0]; i++) {
        const char *a = addrs[i][1];
        if (!a[0] || (i == 1 && strcmp(a, "0") == 0))
            continue;
        if (bf_net_addr_check(a) != 0) {
            fprintf(stderr, "bigfleet-shardd: %s %s: not a host:port address\n", addrs[i][0], a);
            bad++;
        }
    }
    const char *files[][2] = {
        {"--tls-cert", cfg->tls_cert}, {"--tls-key", cfg->tls_key}, {"--tls-ca", cfg->tls_ca}};
    for (size_t i = 0; i < 3; i++) {
        if (files[i][1][0] && access(files[i][1], R_OK) != 0) {
            fprintf(stderr, "bigfleet-shardd: %s %s: %s\n", files[i][0], files[i][1],
                    strerror(errno));
            bad++;
        }
    }
    if (s->with_sim && access(s->sim_path, X_OK) != 0) {
        fprintf(stderr,
                "bigfleet-shardd: --provider-addr is empty and the embedded simulated provider "
                "%s is missing\n",
                s->sim_path);
        bad++;
    }
    if (bad)
        return 2;
    printf("bigfleet-shardd: configuration OK (id %s, children run as %s, config file %s)\n",
           cfg->id, s->priv.name, cfg->config_file[0] ? cfg->config_file : "none");
    return 0;
}

/* A start refused after the lock was taken: leave nothing behind (the lock
 * file, segments, listening sockets). */
static int abandon_start(struct sup *s, int code)
{
    if (s->shm.st) {
        bf_shm_detach(&s->shm);
        bf_shm_unlink(s->cfg->id);
    }
    if (s->grpc_fd >= 0)
        close(s->grpc_fd);
    if (s->http_fd >= 0)
        close(s->http_fd);
    s->grpc_fd = s->http_fd = -1;
    unlink(s->lock_path);
    close(s->lock_fd);
    s->lock_fd = -1;
    return code;
}

int bf_supervisor_main(const struct bf_config *cfg, int argc, char **argv)
{
    bf_log_init("supervisor", bf_log_level_parse(cfg->log_level));
    prctl(PR_SET_NAME, "bf-supervisor", 0, 0, 0);
    /* blocked from the start: a SIGHUP (reload) or SIGTERM that arrives while
     * the appliance is being set up waits for the loop instead of killing
     * the supervisor half-way (children unblock them before exec) */
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    sigprocmask(SIG_BLOCK, &mask, NULL);
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
    s->run = *cfg;
    s->grpc_fd = s->http_fd = -1;
    if (cfg->check_config)
        return check_config(s);
    if (s->with_sim) {
        if (access(s->sim_path, X_OK) != 0) {
            fprintf(stderr,
                    "bigfleet-shardd: --provider-addr is empty and the embedded simulated "
                    "provider %s is missing\n",
                    s->sim_path);
            return BF_EXIT_CONFIG;
        }
        snprintf(s->run.provider_addr, sizeof s->run.provider_addr, "%s", cfg->sim_listen);
    }
    char err[512];
    if (bf_priv_resolve(cfg, &s->priv, err, sizeof err) != 0) {
        fprintf(stderr, "bigfleet-shardd: %s\n", err);
        BF_ERROR("fatal configuration", "error=\"%s\"", err);
        return BF_EXIT_CONFIG;
    }
    if (bf_probe_io_uring(&s->priv, cfg->seccomp, err, sizeof err) != 0) {
        fprintf(stderr,
                "bigfleet-shardd: %s (docs/operating.md: kernel and container requirements)\n",
                err);
        BF_ERROR("io_uring unavailable", "error=\"%s\"", err);
        return BF_EXIT_UNAVAILABLE;
    }

    if (take_lock(s) != 0)
        return 1;
    if (bf_epoch_bump(cfg->data_dir, &s->epoch, err, sizeof err) != 0) {
        BF_ERROR("cannot bump the shard epoch", "error=\"%s\"", err);
        fprintf(stderr, "bigfleet-shardd: %s\n", err);
        return abandon_start(s, 1);
    }
    if (bf_priv_own_dir(&s->priv, cfg->data_dir, err, sizeof err) != 0) {
        BF_ERROR("fatal configuration", "error=\"%s\"", err);
        fprintf(stderr, "bigfleet-shardd: %s\n", err);
        return abandon_start(s, BF_EXIT_CONFIG);
    }
    if (bind_listeners(s) != 0)
        return abandon_start(s, BF_EXIT_CONFIG);
    s->watchdog_ns = bf_sd_watchdog_ns();
    for (int r = 1; r < BF_ROLE_COUNT; r++) {
        s->wake_fd[r] = eventfd(0, EFD_NONBLOCK); /* inherited by the children */
        if (s->wake_fd[r] < 0) {
            BF_ERROR("eventfd", "error=\"%s\"", strerror(errno));
            return abandon_start(s, 1);
        }
    }
    if (create_segments(s) != 0)
        return abandon_start(s, 1);

    signal(SIGPIPE, SIG_IGN);
    int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0) {
        BF_ERROR("signalfd", "error=\"%s\"", strerror(errno));
        return abandon_start(s, 1);
    }

    BF_INFO("starting", "id=%s epoch=%lld listen=%s metrics_addr=%s provider=%s", cfg->id,
            (long long)s->epoch, cfg->listen, cfg->metrics_addr,
            s->with_sim ? "embedded-simprovider" : cfg->provider_addr);
    start_all(s);

    int tick_ms = 1000;
    if (s->watchdog_ns && s->watchdog_ns / 4 / BF_NS_PER_MS < tick_ms)
        tick_ms = (int)(s->watchdog_ns / 4 / BF_NS_PER_MS) + 1;
    while (!s->stopping) {
        struct pollfd pfd = {sfd, POLLIN, 0};
        int pr = poll(&pfd, 1, s->ready_sent ? tick_ms : 20);
        if (pr > 0) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
                if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) {
                    BF_INFO("stop requested", "signal=%u", si.ssi_signo);
                    s->stopping = true;
                } else if (si.ssi_signo == SIGHUP) {
                    bf_sup_reload(s);
                }
            }
        }
        reap(s);
        watch_heartbeats(s);
        sample_usage(s);
        maybe_ready(s);
        feed_watchdog(s);
    }

    bf_sd_notify("STOPPING=1\nSTATUS=stopping");
    if (s->shm.st)
        BF_SHARED_STORE(s->shm.st->shutting_down, 1);
    stop_children(s, SIGTERM);
    bf_shm_detach(&s->shm);
    bf_shm_unlink(cfg->id);
    unlink(s->lock_path);
    close(s->lock_fd);
    BF_INFO("stopped", "id=%s", cfg->id);
    return s->exit_code;
}
