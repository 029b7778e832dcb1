/*
 * bigfleet/cycle.h — the cycle controller around the decision engine
 * (seeds/000 §2; reference/shard.md §2; ARCHITECTURE.md §4).
 *
 * One cycle:
 *   1. reconcile: ask the reconciler for a pass (reconcile_req_seq) and wait
 *      for it, bounded by --reconcile-timeout (skipped when wait_reconcile
 *      is false, as in benchmarks);
 *   2. snapread: bring the engine's private mirror up to date from the
 *      change logs, O(changes) (an overflow forces one counted full
 *      rescan; the first cycle of a process always rescans), re-reading each
 *      changed record under its seqlock; re-read only the clusters whose
 *      needs generation moved;
 *   3. phases: bf_engine_cycle (NormalizeDemand, parking, Phase 1/2/3,
 *      verdicts, shortfalls, AvailableCapacity hints);
 *   4. rails in the seed's order: kill switch, dry-run, reclaim cap,
 *      max-actions deferral;
 *   5. execute (enqueue): the in-flight dedup and the live-record re-check
 *      (actionStillApplicable) before each action goes on the actions ring;
 *      a full ring drops the action (re-derived next cycle, counted);
 *   2b. ownership (ADR-0055, docs/adr0055.md): expired transfer
 *      reservations are dropped and the coordinator instructions waiting on
 *      ring COORD_IN are applied (against the fresh mirror) and answered
 *      on ring COORD_OUT; machines reserved for a transfer, or unbound and
 *      no longer owned, are handed to the engine as held;
 *   6. emit: AvailableCapacity hints to the session; the verdict ledger,
 *      shortfall ledger and inventory counts published double-buffered in
 *      the state segment; stats and histograms.
 *
 * The controller is a library so the benchmark can drive the real shm path
 * without the other processes. Single-threaded; one controller per process;
 * the controller is the only writer of the fields docs/internals.md assigns
 * to the cycle.
 */
#ifndef BIGFLEET_CYCLE_H
#define BIGFLEET_CYCLE_H

#include <stdbool.h>
#include <stdint.h>

#include "bigfleet/config.h"
#include "bigfleet/engine.h"
#include "bigfleet/shm.h"

struct bf_cycle_opts {
    bool wait_reconcile;          /* request a reconcile pass and wait for it */
    int64_t reconcile_timeout_ns; /* bound of that wait */
    bool actuation_paused;        /* rail 3 */
    bool dry_run;                 /* shadow mode */
    double reclaim_cap_fraction;  /* rail 1 (<= 0 disables) */
    uint32_t max_actions;         /* 0 = unlimited */
    int64_t ac_min_interval_ns;   /* AvailableCapacity rate limit */
    uint32_t metrics_warmup_cycles;
    uint32_t engine_flags; /* BF_ENGINE_F_* */
    /* ADR-0055 (docs/adr0055.md): the ownership store under data_dir (LMDB).
     * NULL or "": no store (benchmarks, tests): the shard owns every machine
     * and coordinator instructions are answered FAILED. */
    const char *data_dir;
    const char *shard_id;       /* --id: a TransferOwnership's role */
    int ownership;              /* --ownership: enum bf_own_policy (0 = auto) */
    int64_t reservation_ttl_ns; /* --transfer-reservation-ttl */
    uint32_t own_done_max;      /* dedup set bound; 0 = BF_OWN_DONE_MAX (tests set it low) */
};

/* Options from the appliance configuration. */
void bf_cycle_opts_from_config(struct bf_cycle_opts *o, const struct bf_config *cfg);

/* What one cycle did (for logs, tests and benchmarks). */
struct bf_cycle_report {
    uint64_t cycle;
    int64_t phase_ns[BF_PHASE_COUNT];
    int64_t total_ns;
    uint32_t changed_slots;   /* records re-read this cycle */
    bool rescanned;           /* full rescan (first cycle or change-log overflow) */
    uint32_t clusters_reread; /* clusters whose generation moved */
    /* of those, unchanged rollups republished (only their arrival moved):
     * no row read or interned */
    uint32_t clusters_republished;
    uint32_t needs; /* normalized demand rows */
    uint32_t unsatisfied;
    uint32_t decided;  /* actions the engine decided */
    uint32_t enqueued; /* actions pushed for execution */
    uint32_t deduped, dropped, deferred, capped;
    uint32_t suppressed, dryrun;
    uint32_t ac_hints;
    uint32_t no_session; /* Bootstraps held back: the cluster has no operator session */
    bool reconcile_timed_out;
    bool wake_again; /* deferred actions: run another cycle soon */
};

struct bf_cycle;

/*
 * Creates a controller over an attached shm handle (read-write; the caller
 * keeps it attached for the controller's life). Creates the engine with the
 * inventory capacity. 0, -EINVAL, -ENOMEM.
 */
int bf_cycle_new(struct bf_shm *shm, const struct bf_cycle_opts *o, struct bf_cycle **out);
void bf_cycle_free(struct bf_cycle *c);
/* Changes the rails of the next cycles (a SIGHUP reload through the live
 * configuration): kill switch, dry-run, rail 1 fraction, actions cap. */
void bf_cycle_set_rails(struct bf_cycle *c, bool actuation_paused, bool dry_run,
                        double reclaim_cap_fraction, uint32_t max_actions);
/* True when the cycle has ownership work waiting (instructions on ring
 * COORD_IN, an expired reservation): run a cycle now. */
bool bf_cycle_ownership_due(const struct bf_cycle *c, int64_t now_ns);
/* Runs one cycle now. 0, or -ENOMEM (the engine could not run; nothing emitted). */
int bf_cycle_run_once(struct bf_cycle *c, int64_t now_ns, struct bf_cycle_report *rep);
/* True when demand changed since the last cycle (needs change counter moved). */
bool bf_cycle_demand_changed(const struct bf_cycle *c);
/*
 * Pacing of demand-triggered cycles (--cycle-min-gap; the loop of
 * bf_cycle_main). gap_ns 0 = off (every demand change runs a cycle at once).
 * last_demand_ns: monotonic start of the last cycle that ran with a demand
 * change pending (valid when have_last).
 */
struct bf_cycle_pace {
    int64_t gap_ns;
    int64_t last_demand_ns;
    bool have_last;
};
/* 0 = run a cycle now: urgent (ownership work, a deferral's follow-up), the
 * periodic cycle is due (now >= next_periodic), or demand changed and the gap
 * since the last demand cycle's start has passed. Else the ns (> 0) the loop
 * may sleep before looking again: to the end of the gap or to the periodic
 * cycle, whichever is first (a wake may end the sleep sooner). */
int64_t bf_cycle_pace_wait(const struct bf_cycle_pace *p, int64_t now, int64_t next_periodic,
                           bool urgent, bool demand);
/* Records a cycle starting at `start`; demand: a demand change was pending
 * when it started (then the next one waits out the gap from `start`). */
void bf_cycle_pace_ran(struct bf_cycle_pace *p, int64_t start, bool demand);
/* The engine (tests and benchmarks read results and stats through it). */
struct bf_engine *bf_cycle_engine(struct bf_cycle *c);
/* The last engine result (valid until the next run). */
const struct bf_engine_result *bf_cycle_last_result(const struct bf_cycle *c);

#endif /* BIGFLEET_CYCLE_H */
