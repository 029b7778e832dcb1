/*
 * reconciler.h — the reconciler's engine (private to src/reconciler, tests
 * and benchmarks): one provider List applied to the shared inventory in the
 * order of seed 000 §3 / reference/shard.md §3.6.
 *
 * A pass: List (full, or incremental with the since_revision cursor), then
 * for each machine, in this order:
 *   1. an action is in flight on it (pending marker) -> skip;
 *   2. known, same state, not flagged NEEDS_REFRESH/REJECTED -> nothing
 *      (the fast path: no screen, no interning, no write);
 *   3. the screen (bf_prov_machine_check / _build) rejects it -> counted by
 *      reason, logged (first few per pass + a summary), the last good record
 *      kept (flagged BF_REC_REJECTED); in a full pass it still counts as seen,
 *      so a rejection is never read as a removal;
 *   4. known, new state -> the provider's view, with the shard's Assigned*
 *      kept for Configuring/Configured/Draining and cleared otherwise
 *      (shard memory is authoritative); one refinement: a machine that
 *      reaches Configured without the shard having stamped Configured
 *      (its executor died between Configure and the stamp) takes the
 *      assignment from the provider's shard_metadata echo, which is exactly
 *      what that Configure wrote;
 *   5. unknown -> adopted only when this shard owns it (ADR-0055 partition
 *      rule, checked before the screen; counted in not_owned otherwise),
 *      then inserted, Assigned* restored from shard_metadata (M72).
 * A node-state event goes to the session for every change of a
 * cluster-bound machine (routed to the previous cluster when the new record
 * has none). A full pass (no cursor sent) then removes every machine the
 * provider no longer lists, unless an action is in flight on it.
 *
 * Incremental mode keeps the cursor in memory (a restart starts full).
 * Records flagged NEEDS_REFRESH (the executor after a transport failure or a
 * redelivered mid-flight action, the supervisor after a repair) must be
 * re-read even when the provider did not change them, which a delta would
 * not show: the reconciler follows the executor's and supervisor's change
 * logs with private read-only cursors (O(writes)), and re-reads up to
 * BF_RECON_MAX_GETS flagged records with Get after the delta (NOT_FOUND
 * removes the record). A pass is made full instead when: there is no cursor;
 * the provider returned an empty revision last time (it does not do deltas);
 * a change log lapped our cursor, there are more flagged records than that,
 * or a previous pass or Get failed; or BF_RECON_FULL_EVERY_NS passed since
 * the last full pass (deltas carry no deletions).
 *
 * Process rules: runs on the reconciler's loop; writes machine records
 * (reconciler side of the seqlock), the id index, ring NODE_RECON and its
 * stats (st->reconciler); reads pending markers.
 */
#ifndef BF_RECONCILER_H
#define BF_RECONCILER_H

#include <stdbool.h>
#include <stdint.h>

#include "bigfleet/provider.h"
#include "bigfleet/shm.h"

#define BF_RECON_FULL_EVERY_NS (600LL * 1000000000LL)
#define BF_RECON_MAX_GETS      256 /* refresh candidates re-read by Get; more: a full pass */
#define BF_RECON_LOG_REJECTS   10  /* rejection log lines per pass (then a summary) */

struct bf_recon;

struct bf_recon_opts {
    bool incremental;
    int64_t list_timeout_ns; /* 0 = the client's default (2 min) */
    /* ADR-0055 ownership partition (docs/adr0055.md): the LMDB store under
     * data_dir decides which listed machines this shard adopts; NULL/"" =
     * every listed machine (tests, benchmarks) and no owned set written */
    const char *data_dir;
    int ownership; /* --ownership: enum bf_own_policy (0 = auto) */
};

struct bf_recon_result {
    int status; /* enum bf_prov_status of the List (OK, or why the pass failed) */
    bool full;  /* no cursor was sent: removals were applied */
    uint32_t listed, inserted, updated, removed, skipped_pending, fast, rejected;
    uint32_t rejected_by[4]; /* enum bf_reject_reason */
    uint32_t errors;         /* records we could not write (busy, table full) */
    uint32_t node_events;
    uint32_t refreshed; /* flagged records re-read by Get (incremental passes) */
    uint32_t not_owned; /* listed machines not adopted: another shard's (ADR-0055) */
    uint32_t released;  /* removed: no longer owned by this shard (ADR-0055) */
    int64_t list_ns;    /* List RPC (request to reply) */
    int64_t apply_ns;   /* applying the reply */
};

typedef void (*bf_recon_done_fn)(void *arg, const struct bf_recon_result *r);

int bf_recon_new(struct bf_shm *shm, struct bf_prov_client *client, const struct bf_recon_opts *o,
                 struct bf_recon **out);
void bf_recon_free(struct bf_recon *r);
/* Starts one pass; done runs once (on the loop). -EBUSY while a pass runs. */
int bf_recon_start(struct bf_recon *r, bf_recon_done_fn done, void *arg);
bool bf_recon_busy(const struct bf_recon *r);
/* Forgets the cursor: the next pass is full. */
void bf_recon_reset_cursor(struct bf_recon *r);

/*
 * Marks the moment a List is issued: records the executor writes after it
 * are newer than that List's view of them and are left alone by the apply
 * (the next pass decides). bf_recon_start calls it; tests and benchmarks
 * that call bf_recon_apply directly call it when their List was "taken".
 */
void bf_recon_list_issued(struct bf_recon *r);
/*
 * Applies a MachineList reply (what a pass does once the List returned):
 * exposed for tests and benchmarks. full: remove what the list lacks.
 */
void bf_recon_apply(struct bf_recon *r, const struct bf_prov_list *l, bool full,
                    struct bf_recon_result *res);

/*
 * ADR-0055 steps of a pass, exposed for tests (bf_recon_start and the end
 * of a pass call them): _step reloads the partition's rule inputs when the
 * cycle's published generation moved (or on the first call) and sweeps the
 * inventory, returning true when it did (the pass must then be full);
 * _finish re-checks machines kept bound or in flight and writes the owned
 * set (synchronised with the inventory after a full successful pass).
 * No-ops without a store.
 */
bool bf_recon_ownership_step(struct bf_recon *r, struct bf_recon_result *res);
void bf_recon_ownership_finish(struct bf_recon *r, struct bf_recon_result *res, bool full_ok);
/* Deferred ownership work for an idle moment (no pass in flight): the
 * owned set's synchronisation with the inventory after the first full pass.
 * True when it did some. reconciler_main calls it from its tick. */
bool bf_recon_ownership_idle(struct bf_recon *r);

/*
 * ownership.c — the ADR-0055 partition on the reconciler's side (the rule
 * and the store: bigfleet/ownership.h). bf_recon_new creates it from the
 * options; bf_recon_start reloads the rule inputs when the cycle's
 * generation moved (then the pass is full and the inventory is swept:
 * machines no longer owned are removed, or kept while bound or in flight);
 * apply_one adopts an unknown machine only when the rule owns it; a pass
 * ends with the release list re-checked and the owned set written.
 */
struct bf_recon_own;
int bf_recon_own_new(struct bf_shm *shm, const char *data_dir, int policy,
                     struct bf_recon_own **out);
void bf_recon_own_free(struct bf_recon_own *o);
bool bf_recon_own_refresh(struct bf_recon_own *o);
int bf_recon_own_decide_listed(struct bf_recon_own *o, const struct bf_prov_machine *m);
void bf_recon_own_adopted(struct bf_recon_own *o, const char *id, size_t len, int source);
void bf_recon_own_removed(struct bf_recon_own *o, const char *id, size_t len);
void bf_recon_own_sweep(struct bf_recon_own *o, struct bf_recon_result *res);
void bf_recon_own_finish(struct bf_recon_own *o, struct bf_recon_result *res, bool full_ok);
bool bf_recon_own_idle(struct bf_recon_own *o);

#endif
