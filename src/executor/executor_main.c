/*
 * executor_main.c — entry point of the executor process
 * (bigfleet-shardd --role=executor): actions from the cycle executed as
 * concurrent provider RPCs (executor.h).
 *
 * Start-up: the audit log (--audit-log) is opened
 * O_WRONLY|O_APPEND|O_CREAT|O_NOFOLLOW (0640); failing to open it is a fatal
 * configuration error (exit 3: the supervisor stops the appliance, as the Go
 * shard refuses to start). A SIGHUP reopens it (rotation: logrotate renames
 * the file, then SIGHUP), at the path the reload set; a reopen that fails
 * keeps writing to the old file and logs the error. The
 * provider client carries the fencing token (shard id, the epoch of the
 * inventory header, a fresh sequence per attempt).
 *
 * Loop: one bf_net loop; the wake eventfd drains BOOT_RESP and the ACTIONS
 * ring; a 100 ms timer does the same (bounded latency for a producer that
 * cannot signal our eventfd, e.g. a test helper) and writes the heartbeat.
 * SIGTERM: stop taking actions, cancel the calls in flight (those actions end
 * flagged for refresh), exit 0.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "bigfleet/log.h"
#include "bigfleet/process.h"
#include "bigfleet/provider.h"
#include "bigfleet/util.h"
#include "executor/executor.h"

struct xmain {
    struct bf_child ch;
    struct bf_net_loop *loop;
    struct bf_prov_client *client;
    struct bf_exec *exec;
    uint64_t live_seen;
};

static void on_wake(struct bf_net_watch *w, uint64_t count, void *arg)
{
    (void)w, (void)count;
    struct xmain *m = arg;
    if (bf_child_stopping()) {
        bf_net_loop_stop(m->loop);
        return;
    }
    bf_exec_poll(m->exec);
}

static int open_audit(const char *path)
{
    return open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0640);
}

/* SIGHUP: the log level (bf_child_reloaded) and the audit log reopened. */
static void apply_live(struct xmain *m)
{
    struct bf_live_values v;
    bool first = m->live_seen == 0;
    if (!bf_child_reloaded(&m->ch, &v))
        return;
    m->live_seen = v.generation;
    if (first)
        return; /* opened at start */
    int fd = -1;
    if (v.audit_log[0]) {
        fd = open_audit(v.audit_log);
        if (fd < 0) {
            BF_ERROR("cannot reopen the audit log; still writing to the previous file",
                     "path=\"%s\" error=\"%s\"", v.audit_log, strerror(errno));
            return;
        }
    }
    int old = bf_exec_set_audit_fd(m->exec, fd);
    if (old >= 0)
        close(old);
    BF_INFO("audit log reopened", "path=\"%s\"", v.audit_log);
}

static void on_tick(struct bf_net_timer *t, void *arg)
{
    (void)t;
    struct xmain *m = arg;
    bf_child_heartbeat(&m->ch);
    apply_live(m);
    if (bf_child_stopping()) {
        bf_net_loop_stop(m->loop);
        return;
    }
    bf_exec_poll(m->exec);
}

int bf_executor_main(const struct bf_config *cfg)
{
    static struct xmain m;
    memset(&m, 0, sizeof m);
    if (bf_child_start(&m.ch, cfg, BF_ROLE_EXECUTOR) != 0)
        return BF_EXIT_ERROR;
    int exit_code = BF_EXIT_ERROR, audit_fd = -1, rc;
    struct bf_net_watch *watch = NULL;
    struct bf_net_timer *tick = NULL;
    struct bf_live_values live;
    if (bf_child_reloaded(&m.ch, &live))
        m.live_seen = live.generation; /* a restarted executor opens what the last SIGHUP set */
    else
        bf_live_from_config(&live, cfg);
    if (live.audit_log[0]) {
        audit_fd = open_audit(live.audit_log);
        if (audit_fd < 0) {
            BF_ERROR("cannot open the audit log", "path=\"%s\" error=\"%s\"", live.audit_log,
                     strerror(errno));
            exit_code = BF_EXIT_NO_RESPAWN;
            goto out_child;
        }
    }
    if ((rc = bf_net_loop_new(NULL, &m.loop))) {
        BF_ERROR("cannot create the event loop", "error=\"%s\"", strerror(-rc));
        if (rc == -EPERM || rc == -ENOSYS || rc == -EACCES)
            exit_code = BF_EXIT_NO_RESPAWN; /* io_uring refused: restarting cannot help */
        goto out_audit;
    }
    struct bf_prov_opts po;
    bf_prov_opts_from_config(&po, cfg, m.ch.shm.inv_hdr->epoch);
    po.latency = &m.ch.shm.st->host.provider_rpc[1];
    if ((rc = bf_prov_client_new(m.loop, &po, &m.client))) {
        BF_ERROR("cannot create the provider client", "addr=%s error=\"%s\"", cfg->provider_addr,
                 strerror(-rc));
        exit_code = rc == -EINVAL ? BF_EXIT_NO_RESPAWN : BF_EXIT_ERROR;
        goto out_loop;
    }
    struct bf_exec_opts xo = {
        .concurrency = (uint32_t)cfg->execute_concurrency,
        .execute_timeout_ns = cfg->execute_timeout_ns,
        .bootstrap_timeout_ns = cfg->bootstrap_timeout_ns,
        .local_bootstrap = cfg->local_bootstrap,
        .audit_fd = audit_fd,
    };
    if ((rc = bf_exec_new(m.loop, &m.ch.shm, m.client, &xo, &m.exec))) {
        BF_ERROR("cannot create the executor", "error=\"%s\"", strerror(-rc));
        goto out_client;
    }
    if (m.ch.wake_fd >= 0 &&
        (rc = bf_net_watch_eventfd(m.loop, m.ch.wake_fd, on_wake, &m, &watch))) {
        BF_ERROR("cannot watch the wake eventfd", "error=\"%s\"", strerror(-rc));
        goto out_exec;
    }
    if (!(tick = bf_net_timer_new(m.loop, on_tick, &m))) {
        BF_ERROR("cannot create a timer", "error=\"%s\"", strerror(ENOMEM));
        goto out_exec;
    }
    bf_net_timer_start(tick, 100 * BF_NS_PER_MS, 100 * BF_NS_PER_MS);
    uint64_t backlog = bf_ring_depth(&m.ch.shm, BF_RING_ACTIONS);
    BF_INFO("started",
            "id=%s provider=%s epoch=%lld concurrency=%d execute_timeout_ms=%lld "
            "bootstrap=%s audit_log=\"%s\" redelivered=%llu",
            cfg->id, cfg->provider_addr, (long long)po.epoch, cfg->execute_concurrency,
            (long long)(cfg->execute_timeout_ns / BF_NS_PER_MS),
            cfg->local_bootstrap ? "local" : "session", live.audit_log,
            (unsigned long long)backlog);
    bf_exec_poll(m.exec); /* the backlog (redelivered actions included) */
    rc = bf_net_loop_run(m.loop);
    exit_code = rc < 0 ? BF_EXIT_ERROR : BF_EXIT_OK;
    BF_INFO("stopping", "id=%s inflight=%u", cfg->id, bf_exec_inflight(m.exec));
out_exec:
    bf_net_timer_free(tick);
    bf_net_watch_free(watch);
    bf_exec_close(m.exec);
out_client:
    bf_prov_client_free(m.client); /* calls in flight complete CANCELLED here */
    if (m.exec)
        audit_fd = bf_exec_set_audit_fd(m.exec, -1); /* the current one (reopened or not) */
    bf_exec_free(m.exec);
out_loop:
    bf_net_loop_free(m.loop);
out_audit:
    if (audit_fd >= 0)
        close(audit_fd);
out_child:
    bf_child_finish(&m.ch);
    return exit_code;
}
