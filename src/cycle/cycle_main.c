/*
 * cycle_main.c — the cycle process (bigfleet-shardd --role=cycle).
 *
 * A cycle runs every --cycle-interval and, coalesced, as soon as demand
 * changed (an accepted rollup bumps the needs change counter and wakes this
 * process) or a --max-actions-per-cycle deferral left work behind. Between
 * cycles the process sleeps on its wake eventfd.
 *
 * --cycle-min-gap G paces demand cycles (bf_cycle_pace_wait): a demand change
 * seen within G of the start of the last cycle that ran with a demand change
 * pending waits until G has passed, then one cycle takes every change made
 * meanwhile. The change stays pending in the needs change counter (it moves
 * only when a cycle reads the needs), so nothing is lost while waiting; the
 * loop sleeps to the gap's end without the wake fd (no wake-up per rollup),
 * never spins. Periodic cycles and a deferral's follow-up cycle run at once,
 * gap or not, and so does ownership work when no demand change waits;
 * ownership instructions that arrive while one waits are taken at the gap's
 * end, by the same cycle (at most G later).
 *
 * A restarted cycle process rebuilds its mirror with one full rescan; the
 * in-flight markers, the action serial and every published result live in
 * shared memory and carry over.
 *
 * The rails (kill switch, dry-run, reclaim cap, actions cap) come from the
 * live configuration in the state segment, re-read before every cycle: a
 * SIGHUP that flips --actuation-paused takes effect at the next cycle, with
 * no restart (bf_child_reloaded).
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>

#include "bigfleet/cycle.h"
#include "bigfleet/engine.h"
#include "bigfleet/log.h"
#include "bigfleet/process.h"
#include "bigfleet/util.h"
#include "cycle_internal.h"

int64_t bf_cycle_pace_wait(const struct bf_cycle_pace *p, int64_t now, int64_t next_periodic,
                           bool urgent, bool demand)
{
    if (urgent || now >= next_periodic)
        return 0;
    int64_t wait = next_periodic - now;
    if (demand) {
        if (p->gap_ns <= 0 || !p->have_last)
            return 0;
        int64_t open = p->last_demand_ns + p->gap_ns;
        if (now >= open)
            return 0;
        if (open - now < wait)
            wait = open - now;
    }
    return wait;
}

void bf_cycle_pace_ran(struct bf_cycle_pace *p, int64_t start, bool demand)
{
    if (demand) {
        p->last_demand_ns = start;
        p->have_last = true;
    }
}

int bf_cycle_main(const struct bf_config *cfg)
{
    struct bf_child ch;
    if (bf_child_start(&ch, cfg, BF_ROLE_CYCLE) != 0)
        return BF_EXIT_ERROR;
    struct bf_cycle_opts o;
    bf_cycle_opts_from_config(&o, cfg);
    /* before the engine allocates anything (engine.h: process-wide) */
    bf_engine_set_huge_pages(cfg->transparent_huge_pages);
    struct bf_cycle *c;
    int rc = bf_cycle_new(&ch.shm, &o, &c);
    if (rc) {
        BF_ERROR("cannot create the cycle controller", "error=%d", rc);
        bf_child_finish(&ch);
        return BF_EXIT_ERROR;
    }
    struct bf_live_values live;
    if (bf_child_reloaded(&ch, &live))
        bf_cycle_set_rails(c, live.actuation_paused, live.dry_run, live.reclaim_cap_fraction,
                           live.max_actions_per_cycle);
    else
        bf_live_from_config(&live, cfg); /* bf_cycle_opts_from_config already applied it */
    BF_INFO("started", "interval_ms=%lld paused=%d dry_run=%d reclaim_cap=%g max_actions=%u",
            (long long)(cfg->cycle_interval_ns / BF_NS_PER_MS), live.actuation_paused, live.dry_run,
            live.reclaim_cap_fraction, live.max_actions_per_cycle);
    BF_INFO("pacing", "cycle_min_gap_us=%lld", (long long)(cfg->cycle_min_gap_ns / 1000));
    struct bf_cycle_pace pace = {.gap_ns = cfg->cycle_min_gap_ns};
    int64_t next = bf_mono_ns(); /* first cycle at once */
    bool again = false, first_done = false;
    while (!bf_child_stopping()) {
        bool demand = bf_cycle_demand_changed(c);
        int64_t wait = bf_cycle_pace_wait(&pace, bf_mono_ns(), next,
                                          again || bf_cycle_ownership_due(c, bf_now_ns()), demand);
        if (wait > 0) {
            /* rounded up: a sleep that ends before the gap would only loop */
            int64_t ms = (wait + BF_NS_PER_MS - 1) / BF_NS_PER_MS;
            if (ms > 1000)
                ms = 1000;
            /* a demand change waiting out the gap: sleep to the gap's end
             * without the wake fd (every accepted rollup writes it; waking
             * for each only to sleep again cost ~15 us per rollup). A wake
             * meanwhile (a rollup, ownership instructions) is seen at the
             * gap's end: the cycle that runs then reads the counters. */
            struct pollfd p = {ch.wake_fd, POLLIN, 0};
            poll(&p, ch.wake_fd >= 0 && !demand ? 1 : 0, (int)ms);
            bf_wake_clear(&ch.shm, BF_ROLE_CYCLE);
            bf_child_heartbeat(&ch);
            continue;
        }
        bf_cycle_pace_ran(&pace, bf_mono_ns(), demand);
        if (bf_child_reloaded(&ch, &live)) {
            bf_cycle_set_rails(c, live.actuation_paused, live.dry_run, live.reclaim_cap_fraction,
                               live.max_actions_per_cycle);
            BF_INFO("rails reloaded", "paused=%d dry_run=%d reclaim_cap=%g max_actions=%u",
                    live.actuation_paused, live.dry_run, live.reclaim_cap_fraction,
                    live.max_actions_per_cycle);
        }
        struct bf_cycle_report rep;
        rc = bf_cycle_run_once(c, bf_now_ns(), &rep);
        bf_child_heartbeat(&ch);
        if (rc) {
            BF_ERROR("cycle failed", "error=%d", rc);
            next = bf_mono_ns() + cfg->cycle_interval_ns;
            again = false;
            continue;
        }
        again = rep.wake_again;
        next = bf_mono_ns() + cfg->cycle_interval_ns;
        if (!first_done) {
            /* the time from this process's spawn to its first decision (a
             * restarted cycle process rebuilds its mirror here) */
            first_done = true;
            int64_t spawned = BF_SHARED_LOAD(ch.shm.st->proc[BF_ROLE_CYCLE].started_ns);
            long minflt;
            double cpu_ms = bf_cycle_cpu_ms(&minflt);
            BF_INFO("first cycle",
                    "since_spawn_ms=%.1f cpu_ms=%.1f minflt=%ld ms=%.1f reconcile_ms=%.1f "
                    "snapread_ms=%.1f rescan=%d changed=%u needs=%u",
                    spawned ? (double)(bf_now_ns() - spawned) / 1e6 : -1.0, cpu_ms, minflt,
                    (double)rep.total_ns / 1e6, (double)rep.phase_ns[BF_PHASE_RECONCILE] / 1e6,
                    (double)rep.phase_ns[BF_PHASE_SNAPREAD] / 1e6, rep.rescanned, rep.changed_slots,
                    rep.needs);
        }
        int lvl = (rep.enqueued || rep.capped || rep.deferred || rep.reconcile_timed_out)
                      ? BF_LOG_INFO
                      : BF_LOG_DEBUG;
        bf_log(lvl, "cycle",
               "cycle=%llu ms=%.3f needs=%u unsatisfied=%u decided=%u enqueued=%u deduped=%u "
               "dropped=%u deferred=%u capped=%u changed=%u rescan=%d reconcile_timeout=%d "
               "no_session=%u",
               (unsigned long long)rep.cycle, (double)rep.total_ns / 1e6, rep.needs,
               rep.unsatisfied, rep.decided, rep.enqueued, rep.deduped, rep.dropped, rep.deferred,
               rep.capped, rep.changed_slots, rep.rescanned, rep.reconcile_timed_out,
               rep.no_session);
    }
    BF_INFO("stopping", "%s", "");
    bf_cycle_free(c);
    bf_child_finish(&ch);
    return BF_EXIT_OK;
}
