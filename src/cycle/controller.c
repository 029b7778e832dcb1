/*
 * controller.c — one decision cycle end to end (see bigfleet/cycle.h):
 * reconcile request/wait, mirror and demand refresh, the engine, rails and
 * enqueue, publish, stats.
 *
 * Timing: every phase is measured on CLOCK_MONOTONIC and recorded both in
 * the report and in the cycle's histograms (bigfleet_shard_cycle_duration_seconds
 * and ..._phase_duration_seconds, exp(0.001, 2, 14)) after the warm-up cycles.
 * Phase labels follow the Go original: reconcile, snapread (mirror + demand
 * refresh), phase1 (normalize + Phase 1), phase2, phase3, emit (verdicts,
 * shortfalls, AvailableCapacity, publish), execute (rails + enqueue).
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/log.h"
#include "bigfleet/ownership.h"
#include "bigfleet/process.h"
#include "bigfleet/util.h"
#include "cycle_internal.h"

void bf_cycle_opts_from_config(struct bf_cycle_opts *o, const struct bf_config *cfg)
{
    memset(o, 0, sizeof *o);
    o->wait_reconcile = true;
    o->reconcile_timeout_ns = cfg->reconcile_timeout_ns;
    o->actuation_paused = cfg->actuation_paused;
    o->dry_run = cfg->dry_run;
    o->reclaim_cap_fraction = cfg->reclaim_cap_fraction;
    o->max_actions = (uint32_t)cfg->max_actions_per_cycle;
    o->ac_min_interval_ns = cfg->available_capacity_interval_ns;
    o->metrics_warmup_cycles = (uint32_t)cfg->metrics_warmup_cycles;
    o->data_dir = cfg->data_dir;
    o->shard_id = cfg->id;
    o->ownership = bf_own_policy_parse(cfg->ownership);
    if (o->ownership < 0)
        o->ownership = BF_OWN_POLICY_AUTO; /* validated at parse: cannot happen */
    o->reservation_ttl_ns = cfg->transfer_reservation_ttl_ns;
}

/* written whole by every full rescan: one 4 KiB first touch per 341 slots */
_Static_assert(sizeof(struct slotinfo) == 12, "struct slotinfo grew past 12 bytes");

int bf_cycle_new(struct bf_shm *shm, const struct bf_cycle_opts *o, struct bf_cycle **out)
{
    struct bf_cycle *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    c->shm = shm;
    c->o = *o;
    c->capacity = shm->max_machines;
    c->max_clusters = shm->max_clusters;
    c->slots = calloc(c->capacity, sizeof *c->slots);
    c->clusters = calloc(c->max_clusters, sizeof *c->clusters);
    c->blobs = bf_blob_cache_new();
    struct bf_engine_config ec;
    bf_engine_config_defaults(&ec);
    ec.capacity = c->capacity;
    ec.ac_min_interval_ns = o->ac_min_interval_ns;
    ec.flags = o->engine_flags;
    struct bf_dims dims;
    bf_shm_dims(shm, &dims);
    ec.dims = &dims;
    int rc = -ENOMEM;
    if (c->slots && c->clusters && c->blobs)
        rc = bf_engine_new(&ec, &c->engine);
    if (rc == 0)
        rc = bf_cycle_own_init(c);
    if (rc) {
        bf_cycle_free(c);
        return rc;
    }
    c->need_rescan = true; /* the first cycle of a process reads everything */
    *out = c;
    return 0;
}

void bf_cycle_free(struct bf_cycle *c)
{
    if (!c)
        return;
    bf_cycle_own_free(c);
    bf_engine_free(c->engine);
    bf_blob_cache_free(c->blobs);
    const struct fpmap_slot *f;
    BF_HMAP_FOREACH (&c->fps, f)
        free((char *)f->key);
    fpmap_free(&c->fps);
    bf_cycle_caches_free(c);
    const struct labelcache_slot *l;
    BF_HMAP_FOREACH (&c->labels, l)
        free(l->val.labels);
    labelcache_free(&c->labels);
    free(c->slots);
    free(c->clusters);
    free(c->retry);
    free(c->rows);
    free(c->offline);
    free(c->eneeds);
    free(c->acts);
    free(c);
}

void bf_cycle_set_rails(struct bf_cycle *c, bool actuation_paused, bool dry_run,
                        double reclaim_cap_fraction, uint32_t max_actions)
{
    c->o.actuation_paused = actuation_paused;
    c->o.dry_run = dry_run;
    c->o.reclaim_cap_fraction = reclaim_cap_fraction;
    c->o.max_actions = max_actions;
}

struct bf_engine *bf_cycle_engine(struct bf_cycle *c)
{
    return c->engine;
}

const struct bf_engine_result *bf_cycle_last_result(const struct bf_cycle *c)
{
    return c->have_res ? &c->res : NULL;
}

bool bf_cycle_ownership_due(const struct bf_cycle *c, int64_t now_ns)
{
    return bf_cycle_own_due(c, now_ns);
}

bool bf_cycle_demand_changed(const struct bf_cycle *c)
{
    return BF_SHARED_LOAD(c->shm->needs->change_counter) != c->needs_counter_seen;
}

/* Ask the reconciler for a pass and wait for it (bounded). */
static bool reconcile(struct bf_cycle *c)
{
    struct bf_state_main *st = c->shm->st;
    uint64_t req = BF_SHARED_LOAD(st->reconcile_req_seq) + 1;
    BF_SHARED_STORE(st->reconcile_req_seq, req);
    bf_wake(c->shm, BF_ROLE_RECONCILER);
    int64_t deadline = bf_mono_ns() + c->o.reconcile_timeout_ns;
    int fd = (int)BF_SHARED_LOAD(st->proc[BF_ROLE_CYCLE].wake_fd);
    while (BF_SHARED_LOAD(st->reconcile_done_seq) < req) {
        int64_t left = deadline - bf_mono_ns();
        if (bf_child_stopping())
            return false;
        if (left <= 0) {
            BF_STAT_INC(st->cycle.reconcile_waits_timed_out);
            return false;
        }
        if (fd > 0) {
            struct pollfd p = {fd, POLLIN, 0};
            int ms = (int)(left / BF_NS_PER_MS) + 1;
            poll(&p, 1, ms > 100 ? 100 : ms);
            bf_wake_clear(c->shm, BF_ROLE_CYCLE);
        } else {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    }
    return true;
}

int bf_cycle_run_once(struct bf_cycle *c, int64_t now_ns, struct bf_cycle_report *rep)
{
    memset(rep, 0, sizeof *rep);
    struct bf_state_main *st = c->shm->st;
    int64_t t0 = bf_mono_ns(), t;
    if (c->o.wait_reconcile)
        rep->reconcile_timed_out = !reconcile(c);
    t = bf_mono_ns();
    rep->phase_ns[BF_PHASE_RECONCILE] = t - t0;
    int rc = bf_cycle_feed_mirror(c, rep);
    if (rc == 0)
        rc = bf_cycle_feed_needs(c, rep);
    if (rc)
        return rc;
    /* ADR-0055: instructions and reservations against the fresh mirror,
     * before the engine decides (held machines are never decided on) */
    bf_cycle_own_step(c, now_ns);
    int64_t t1 = bf_mono_ns();
    rep->phase_ns[BF_PHASE_SNAPREAD] = t1 - t;
    rc = bf_engine_cycle(c->engine, now_ns, &c->res);
    if (rc)
        return rc;
    c->have_res = true;
    const struct bf_engine_result *r = &c->res;
    /* published before anything this cycle decided can be executed and audited */
    BF_SHARED_STORE(st->cycle_count, r->cycle);
    rep->cycle = r->cycle;
    rep->needs = r->n_needs;
    rep->unsatisfied = r->n_unsatisfied;
    rep->phase_ns[BF_PHASE_PHASE1] = r->t.normalize_ns + r->t.phase1_ns;
    rep->phase_ns[BF_PHASE_PHASE2] = r->t.phase2_ns;
    rep->phase_ns[BF_PHASE_PHASE3] = r->t.phase3_ns;
    int64_t t2 = bf_mono_ns();
    bf_cycle_enqueue(c, r, rep, now_ns);
    int64_t t3 = bf_mono_ns();
    rep->phase_ns[BF_PHASE_EXECUTE] = t3 - t2;
    rep->phase_ns[BF_PHASE_EMIT] = r->t.verdict_ns; /* publish time added below */
    rep->total_ns = t3 - t0;
    bf_cycle_publish(c, r, now_ns, rep);
    int64_t t4 = bf_mono_ns();
    rep->phase_ns[BF_PHASE_EMIT] += t4 - t3;
    rep->total_ns = t4 - t0;
    c->cycles_run++;
    BF_SHARED_STORE(st->cycle_count, r->cycle);
    BF_STAT_INC(st->cycle.cycles);
    if (c->cycles_run > c->o.metrics_warmup_cycles) {
        bf_hist_observe(&st->cycle.cycle_duration, 0.001, 2, 14, rep->total_ns);
        for (int p = 0; p < BF_PHASE_COUNT; p++)
            bf_hist_observe(&st->cycle.phase_duration[p], 0.001, 2, 14, rep->phase_ns[p]);
    }
    return 0;
}
