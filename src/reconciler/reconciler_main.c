/*
 * reconciler_main.c — entry point of the reconciler process
 * (bigfleet-shardd --role=reconciler): the provider's view of every machine.
 *
 * Protocol (docs/internals.md "Reconcile handshake"): the cycle stores
 * st->reconcile_req_seq = N and wakes us; the next pass that starts serves
 * it (reconciler.h: a delta page, or, before the first complete walk or
 * with a provider that has no cursors, a full List); then we store
 * reconcile_ok_seq = N on success, always reconcile_done_seq = N, and wake
 * the cycle. Requests that arrive during a pass are served by the next one.
 * A page of a background resync walk serves no request; a page of the
 * start-up walk serves one only once /readyz is latched (a restarted
 * reconciler: the inventory is already whole) or when it fails, so the first
 * cycles of a new appliance see the whole pool. first_reconcile_done is
 * latched when the first walk completes (/readyz).
 *
 * Loop: one bf_net loop (provider client), the wake eventfd watched, a
 * 100 ms timer that re-checks the request sequence (bounded latency even for
 * a producer that cannot signal our eventfd), starts background work when
 * it is due (bf_recon_step) and writes the heartbeat. SIGTERM: the loop
 * stops after the current iteration; a pass in flight is cancelled; exit 0.
 */
#include <errno.h>
#include <string.h>

#include "bigfleet/log.h"
#include "bigfleet/ownership.h"
#include "bigfleet/process.h"
#include "bigfleet/provider.h"
#include "bigfleet/util.h"
#include "reconciler/reconciler.h"

struct rmain {
    struct bf_child ch;
    struct bf_net_loop *loop;
    struct bf_prov_client *client;
    struct bf_recon *recon;
    uint64_t pass_seq;   /* request being served */
    bool pass_requested; /* a request was pending when the pass started */
    uint64_t passes;
    bool closing;              /* tearing down: a cancelled pass must not start another */
    struct bf_net_timer *sync; /* the owned set's next synchronisation slice */
};

static void maybe_start(struct rmain *m);
static void arm_sync(struct rmain *m);

static void pass_done(void *arg, const struct bf_recon_result *r)
{
    struct rmain *m = arg;
    struct bf_state_main *st = m->ch.shm.st;
    struct bf_stats_reconciler *rs = &st->reconciler;
    int64_t total = r->list_ns + r->apply_ns;
    bool ok = r->status == BF_PROV_OK;
    m->passes++;
    BF_STAT_INC(rs->reconciles);
    BF_STAT_SET(rs->incremental, bf_recon_incremental(m->recon) ? 1 : 0);
    if (ok) {
        BF_STAT_SET(rs->last_reconcile_ns, bf_now_ns());
        bf_hist_observe(&rs->reconcile_duration, 0.001, 2, 14, total);
        if (r->full) {
            BF_STAT_SET(rs->last_list_machines, r->walk_listed);
            BF_STAT_INC(rs->resyncs);
            BF_STAT_SET(rs->last_resync_ns, bf_now_ns());
            bf_hist_observe(&rs->resync_duration, 0.001, 2, 16, r->walk_ns);
        }
        if (r->full && !BF_SHARED_LOAD(st->first_reconcile_done)) {
            BF_SHARED_STORE(st->first_reconcile_done, 1);
            BF_INFO("first reconcile complete (ready)", "machines=%u pages=%u ms=%.1f",
                    r->walk_listed, r->walk_pages, r->walk_ns / 1e6);
        }
        bool loud =
            r->inserted || r->removed || r->rejected || r->errors || r->walk_aborted || r->released;
        bf_log(loud ? BF_LOG_INFO : BF_LOG_DEBUG, "reconciled",
               "seq=%llu kind=%s full=%d listed=%u fast=%u updated=%u inserted=%u removed=%u "
               "skipped_pending=%u rejected=%u errors=%u node_events=%u refreshed=%u "
               "not_owned=%u released=%u list_ms=%.1f apply_ms=%.1f",
               (unsigned long long)m->pass_seq, r->kind == BF_RECON_DELTA ? "delta" : "walk",
               r->full, r->listed, r->fast, r->updated, r->inserted, r->removed, r->skipped_pending,
               r->rejected, r->errors, r->node_events, r->refreshed, r->not_owned, r->released,
               r->list_ns / 1e6, r->apply_ns / 1e6);
        if (r->full)
            BF_INFO("resync walk complete", "pages=%u listed=%u removed=%u ms=%.1f", r->walk_pages,
                    r->walk_listed, r->removed, r->walk_ns / 1e6);
    } else {
        BF_STAT_INC(rs->reconcile_errors);
    }
    if (r->walk_aborted)
        BF_STAT_INC(rs->resync_aborts);
    /* a page of an unfinished walk answers only once the inventory is whole */
    bool answers =
        m->pass_requested && (r->kind == BF_RECON_DELTA || r->full || !ok || r->walk_aborted ||
                              BF_SHARED_LOAD(st->first_reconcile_done));
    if (answers) {
        if (ok)
            BF_SHARED_STORE(st->reconcile_ok_seq, m->pass_seq);
        BF_SHARED_STORE(st->reconcile_done_seq, m->pass_seq);
        bf_wake(&m->ch.shm, BF_ROLE_CYCLE);
    }
    if (bf_child_stopping()) {
        bf_net_loop_stop(m->loop);
    } else {
        maybe_start(m);
        arm_sync(m); /* slices skipped while the List was in flight resume 1 ms from now */
    }
}

static void maybe_start(struct rmain *m)
{
    if (m->closing || bf_recon_busy(m->recon) || bf_child_stopping())
        return;
    struct bf_state_main *st = m->ch.shm.st;
    uint64_t req = BF_SHARED_LOAD(st->reconcile_req_seq);
    uint64_t done = BF_STAT_GET(st->reconcile_done_seq);
    bool requested = req > done;
    int rc = bf_recon_step(m->recon, requested, bf_mono_ns(), pass_done, m);
    if (rc == 1) {
        m->pass_seq = req;
        m->pass_requested = requested;
        return;
    }
    if (rc < 0) {
        BF_ERROR("cannot start a reconcile pass", "error=\"%s\"", strerror(-rc));
        if (requested) { /* answer the request: the cycle runs on the current view */
            BF_STAT_INC(st->reconciler.reconcile_errors);
            BF_SHARED_STORE(st->reconcile_done_seq, req);
            bf_wake(&m->ch.shm, BF_ROLE_CYCLE);
        }
    }
}

static void on_wake(struct bf_net_watch *w, uint64_t count, void *arg)
{
    (void)w, (void)count;
    struct rmain *m = arg;
    if (bf_child_stopping()) {
        bf_net_loop_stop(m->loop);
        return;
    }
    maybe_start(m);
}

/* ADR-0055 owned-set synchronisation, off the readiness path: one slice, and
 * the next one 1 ms later while slices remain, so a cycle's request (the
 * wake eventfd) is served between slices. */
static void arm_sync(struct rmain *m)
{
    if (m->sync && bf_recon_ownership_sync_pending(m->recon) && !bf_net_timer_active(m->sync))
        bf_net_timer_start(m->sync, BF_NS_PER_MS, 0);
}

static void owned_sync(struct rmain *m)
{
    if (!bf_recon_ownership_idle(m->recon))
        return;
    bf_child_heartbeat(&m->ch);
    arm_sync(m);
}

static void on_sync(struct bf_net_timer *t, void *arg)
{
    (void)t;
    struct rmain *m = arg;
    if (bf_child_stopping()) {
        bf_net_loop_stop(m->loop);
        return;
    }
    owned_sync(m);
}

static void on_tick(struct bf_net_timer *t, void *arg)
{
    (void)t;
    struct rmain *m = arg;
    bf_child_heartbeat(&m->ch);
    struct bf_live_values v;
    bf_child_reloaded(&m->ch, &v); /* SIGHUP: the log level */
    if (bf_child_stopping()) {
        bf_net_loop_stop(m->loop);
        return;
    }
    maybe_start(m);
    owned_sync(m);
}

int bf_reconciler_main(const struct bf_config *cfg)
{
    static struct rmain m; /* one per process */
    memset(&m, 0, sizeof m);
    if (bf_child_start(&m.ch, cfg, BF_ROLE_RECONCILER) != 0)
        return BF_EXIT_ERROR;
    int exit_code = BF_EXIT_ERROR;
    struct bf_net_watch *watch = NULL;
    struct bf_net_timer *tick = NULL;
    int rc = bf_net_loop_new(NULL, &m.loop);
    if (rc) {
        BF_ERROR("cannot create the event loop", "error=\"%s\"", strerror(-rc));
        if (rc == -EPERM || rc == -ENOSYS || rc == -EACCES)
            exit_code = BF_EXIT_NO_RESPAWN; /* io_uring refused: restarting cannot help */
        goto out_child;
    }
    struct bf_prov_opts po;
    bf_prov_opts_from_config(&po, cfg, m.ch.shm.inv_hdr->epoch);
    po.latency = &m.ch.shm.st->host.provider_rpc[0];
    if ((rc = bf_prov_client_new(m.loop, &po, &m.client))) {
        BF_ERROR("cannot create the provider client", "addr=%s error=\"%s\"", cfg->provider_addr,
                 strerror(-rc));
        exit_code = rc == -EINVAL ? BF_EXIT_NO_RESPAWN : BF_EXIT_ERROR;
        goto out_loop;
    }
    struct bf_recon_opts ro = {.incremental = cfg->incremental_reconcile,
                               .list_timeout_ns = cfg->reconcile_timeout_ns,
                               .resync_interval_ns = cfg->reconcile_resync_interval_ns,
                               .page_size = cfg->reconcile_page_size,
                               .data_dir = cfg->data_dir,
                               .ownership = bf_own_policy_parse(cfg->ownership)};
    if ((rc = bf_recon_new(&m.ch.shm, m.client, &ro, &m.recon))) {
        BF_ERROR("cannot create the reconciler", "error=\"%s\"", strerror(-rc));
        goto out_client;
    }
    if (m.ch.wake_fd >= 0 &&
        (rc = bf_net_watch_eventfd(m.loop, m.ch.wake_fd, on_wake, &m, &watch))) {
        BF_ERROR("cannot watch the wake eventfd", "error=\"%s\"", strerror(-rc));
        goto out_recon;
    }
    if (!(tick = bf_net_timer_new(m.loop, on_tick, &m))) {
        BF_ERROR("cannot create a timer", "error=\"%s\"", strerror(ENOMEM));
        goto out_recon;
    }
    bf_net_timer_start(tick, 100 * BF_NS_PER_MS, 100 * BF_NS_PER_MS);
    m.sync = bf_net_timer_new(m.loop, on_sync, &m); /* NULL: slices from the tick alone */
    BF_INFO("started",
            "id=%s provider=%s epoch=%lld mode=%s list_timeout=%llds resync_interval=%llds "
            "page_size=%u",
            cfg->id, cfg->provider_addr, (long long)po.epoch,
            cfg->incremental_reconcile ? "incremental" : "full",
            (long long)(cfg->reconcile_timeout_ns / BF_NS_PER_SEC),
            (long long)(cfg->reconcile_resync_interval_ns / BF_NS_PER_SEC),
            cfg->reconcile_page_size);
    maybe_start(&m); /* the start-up pass */
    rc = bf_net_loop_run(m.loop);
    exit_code = rc < 0 ? BF_EXIT_ERROR : BF_EXIT_OK;
    BF_INFO("stopping", "id=%s passes=%llu", cfg->id, (unsigned long long)m.passes);
out_recon:
    m.closing = true;
    bf_net_timer_free(tick);
    bf_net_timer_free(m.sync);
    bf_net_watch_free(watch);
out_client:
    m.closing = true;
    bf_prov_client_free(m.client); /* a pass in flight completes CANCELLED here */
    bf_recon_free(m.recon);
out_loop:
    bf_net_loop_free(m.loop);
out_child:
    bf_child_finish(&m.ch);
    return exit_code;
}
