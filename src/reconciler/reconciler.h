/*
 * reconciler.h — the reconciler's engine (private to src/reconciler, tests
 * and benchmarks): the provider's view of every machine, kept in the shared
 * inventory in the order of seed 000 §3 / reference/shard.md §3.4–§3.6,
 * without ever making a decision cycle wait for a List of the whole pool.
 *
 * Applying one machine of a List (or a Get reply), in this order:
 *   1. an action is in flight on it (pending marker) -> skip;
 *   2. known, same state, not flagged NEEDS_REFRESH/REJECTED -> nothing
 *      (the fast path: no screen, no interning, no write);
 *   3. the screen (bf_prov_machine_check / _build) rejects it -> counted by
 *      reason, logged (first few per List + a summary), the last good record
 *      kept (flagged BF_REC_REJECTED); it still counts as seen, so a
 *      rejection is never read as a removal;
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
 * A record the executor wrote after the List was issued is left alone when
 * the List disagrees with it (the List may predate the write; the next pass
 * decides). A node-state event goes to the session for every change of a
 * cluster-bound machine (routed to the previous cluster when the new record
 * has none).
 *
 * Passes (one List in flight at a time, so every List's view is newer than
 * every List applied before it):
 *   - DELTA: List(since_revision = the cursor, max_results = page size);
 *     the reply's revision is the next cursor. Deltas carry no deletions.
 *     A truncated delta (exactly page-size machines) is followed at once by
 *     the next page (catch-up); a request is answered by the first delta
 *     page that started after it, never by a whole chain.
 *   - WALK: a full walk over every machine, after which every machine no
 *     List mentioned since the walk began (deltas count) is removed, unless
 *     an action is in flight on it or the executor wrote it during the walk.
 *     Paged: List(max_results = page size), each next page asked with the
 *     previous page's revision (the wire contract: threading a truncated
 *     reply's revision back pages the set with no gap and no duplicate; a
 *     machine that changes during the walk is listed again after its
 *     change). Pages are pipelined: when a page arrives truncated, the next
 *     one is asked for before this one is applied (at most one ahead; page
 *     k's List has answered when k+1's is issued, and pages are applied in
 *     issue order), so the provider and the reconciler hold at most two
 *     pages at a time, and a cycle's request waits for at most the page in
 *     flight and the page asked ahead, then gets its delta in the same
 *     pass (issued after those pages were applied). The last
 *     (short) page's revision starts the delta cursor. Unpaged: one List
 *     without a cursor. A paged walk does not take its own word for a
 *     removal: up to BF_RECON_MAX_GETS missing machines are confirmed with
 *     Get (NOT_FOUND removes; a machine that is found means the provider
 *     pages wrongly: walks go unpaged), more by one unpaged walk at once
 *     (which removes them; if it finds most of them, walks go unpaged).
 * Scheduling (bf_recon_step):
 *   - until a walk completed: the start-up walk, in pages of
 *     startup_page_size (a pool that fits one page is one List, so paging --
 *     and trust in the provider's paging -- starts above it; a whole
 *     1M-machine pool does not fit one 256 MiB gRPC message). 8,192: at
 *     ~503K machines /readyz came 1.3-1.7 s after start against 3.0-3.6 s
 *     with pages of 65,536 (4,096: 1.5 s; 16,384: 2.3-2.4 s; stop 31): a
 *     List reply of more than a few MB costs several times more per machine
 *     on our gRPC path than a small one;
 *   - a request (a cycle waits) -> a DELTA page;
 *   - else a pending catch-up -> a DELTA page;
 *   - else a resync walk page, when a walk is under way or
 *     resync_interval_ns passed since the last one ended, or at once when
 *     refresh candidates were lost (a change log lapped, more flagged
 *     records than BF_RECON_MAX_GETS, a Get failed).
 *   Records flagged NEEDS_REFRESH (the executor after a transport failure
 *   or a redelivered mid-flight action, the supervisor after a repair) must
 *   be re-read even when the provider did not change them, which a delta
 *   would not show: the reconciler follows the executor's and supervisor's
 *   change logs with private read-only cursors (O(writes)) and re-reads up
 *   to BF_RECON_MAX_GETS flagged records with Get after each delta
 *   (NOT_FOUND removes the record).
 * Fallbacks (each logged once as a warning):
 *   - the provider returns an empty revision (no since_revision support):
 *     every pass is an unpaged full List serving the request, with
 *     removals (the cycle waits for it: the Go shard's default behaviour);
 *   - a truncated page whose revision does not advance: walks go unpaged;
 *   - incremental = false (--incremental-reconcile=false): every request is
 *     an unpaged full List with removals, as above.
 * Failures: a failed List leaves the inventory untouched (a failed pass is
 * never an empty list) and ends the walk it belonged to without removals;
 * background work is retried after BF_RECON_RETRY_NS, or as soon as the
 * provider connection comes up.
 *
 * Process rules: runs on the reconciler's loop; writes machine records
 * (reconciler side of the seqlock), the id index, ring NODE_RECON and its
 * stats (st->reconciler); reads pending markers and the change logs.
 */
#ifndef BF_RECONCILER_H
#define BF_RECONCILER_H

#include <stdbool.h>
#include <stdint.h>

#include "bigfleet/provider.h"
#include "bigfleet/shm.h"

#define BF_RECON_MAX_GETS       256 /* refresh candidates re-read by Get; more: a resync */
#define BF_RECON_LOG_REJECTS    10  /* rejection log lines per List (then a summary) */
#define BF_RECON_RETRY_NS       (1000LL * 1000000LL)  /* background retry after a failure */
#define BF_RECON_RESYNC_NS      (60LL * 1000000000LL) /* default resync period */
#define BF_RECON_PAGE           4096                  /* default machines per page */
#define BF_RECON_STARTUP_PAGE   8192                  /* default page of the start-up walk */
#define BF_RECON_OWN_SYNC_SLICE 4096 /* default records (then keys) per owned-set sync slice */

struct bf_recon;

struct bf_recon_opts {
    bool incremental;           /* deltas + background resync walks; false: full List per request */
    int64_t list_timeout_ns;    /* 0 = the client's default (2 min) */
    int64_t resync_interval_ns; /* from the end of one walk to the start of the next; 0 = default */
    uint32_t page_size;         /* max_results of deltas and resync pages; 0 = default */
    uint32_t startup_page_size; /* max_results of the start-up walk's pages; 0 = default */
    /* ADR-0055 ownership partition (docs/adr0055.md): the LMDB store under
     * data_dir decides which listed machines this shard adopts; NULL/"" =
     * every listed machine (tests, benchmarks) and no owned set written */
    const char *data_dir;
    int ownership; /* --ownership: enum bf_own_policy (0 = auto) */
    /* inventory records (then owned-set keys) per slice of the owned set's
     * synchronisation, one LMDB transaction each; 0 = BF_RECON_OWN_SYNC_SLICE */
    uint32_t owned_sync_slice;
};

enum bf_recon_kind {
    BF_RECON_DELTA = 1, /* since_revision page */
    BF_RECON_WALK = 2   /* a page of a full walk (the only page when unpaged) */
};

struct bf_recon_result {
    int status;        /* enum bf_prov_status of the List (OK, or why the pass failed) */
    int kind;          /* enum bf_recon_kind */
    bool full;         /* a walk completed with this pass: removals were applied */
    bool walk_aborted; /* the walk this page belonged to ended without removals */
    uint32_t listed, inserted, updated, removed, skipped_pending, fast, rejected;
    uint32_t rejected_by[4]; /* enum bf_reject_reason */
    uint32_t errors;         /* records we could not write (busy, table full) */
    uint32_t node_events;
    uint32_t refreshed;   /* flagged records re-read by Get (delta passes) */
    uint32_t walk_pages;  /* full: pages of the walk */
    uint32_t walk_listed; /* full: machines listed over the walk */
    int64_t walk_ns;      /* full: first page issued to the removals done */
    int64_t list_ns;      /* List RPC (request to reply) */
    int64_t apply_ns;     /* applying the reply */
    uint32_t not_owned;   /* listed machines not adopted: another shard's (ADR-0055) */
    uint32_t released;    /* removed: no longer owned by this shard (ADR-0055) */
};

typedef void (*bf_recon_done_fn)(void *arg, const struct bf_recon_result *r);

/* 0, -ENOMEM. The client is borrowed. */
int bf_recon_new(struct bf_shm *shm, struct bf_prov_client *client, const struct bf_recon_opts *o,
                 struct bf_recon **out);
void bf_recon_free(struct bf_recon *r);
/*
 * Starts the next pass by the rules above, now_ns = bf_mono_ns(). requested:
 * a cycle waits for a view at least as new as this call. Returns 1 (a pass
 * started; done runs once, on the loop, never inside this call), 0 (nothing
 * to do now), -EBUSY (a pass runs), or the -errno of bf_prov_list.
 */
int bf_recon_step(struct bf_recon *r, bool requested, int64_t now_ns, bf_recon_done_fn done,
                  void *arg);
bool bf_recon_busy(const struct bf_recon *r);
/* True once a walk completed (the first full view; /readyz). */
bool bf_recon_synced(const struct bf_recon *r);
/* True while deltas are in use (false: every pass is a full List). */
bool bf_recon_incremental(const struct bf_recon *r);
/* Forgets the delta cursor: the next pass starts a walk (tests). */
void bf_recon_reset_cursor(struct bf_recon *r);

/*
 * Marks the moment a List is issued: records the executor writes after it
 * are newer than that List's view of them and are left alone by the apply
 * (the next pass decides). The passes call it; tests and benchmarks that
 * call bf_recon_apply directly call it when their List was "taken".
 */
void bf_recon_list_issued(struct bf_recon *r);
/*
 * Applies a MachineList reply directly (tests and benchmarks): full = the
 * list is a complete view (an unpaged walk: remove what it lacks); else a
 * delta.
 */
void bf_recon_apply(struct bf_recon *r, const struct bf_prov_list *l, bool full,
                    struct bf_recon_result *res);

/*
 * ADR-0055 (src/reconciler/ownership.c), exposed for tests (bf_recon_step,
 * the end of a pass and the reconciler's tick call them): _step reloads the
 * partition's rule inputs when the cycle's published generation moved (or
 * on the first call) and sweeps the inventory (machines no longer owned are
 * removed, or kept while bound or in flight), returning true when it did —
 * a resync walk then starts at once (a delta would not list machines that
 * just became ours); _finish re-checks the kept machines and writes the
 * owned set; _idle synchronises the owned set with the inventory after the
 * first complete walk (O(machines), off the readiness path) one slice per
 * call (opts.owned_sync_slice records or keys, one transaction), only
 * between passes, and returns true when it ran a slice (also one whose
 * write failed: the sync then waits for the next full pass); a new
 * ownership view (_step) starts a running sync over;
 * _sync_pending is true while slices remain (the caller calls _idle again
 * soon, letting requests in between). Passes between slices write their
 * adoptions and removals as usual, so the owned set converges to the
 * inventory's owned machines. No-ops (false) without a store.
 */
bool bf_recon_ownership_step(struct bf_recon *r, struct bf_recon_result *res);
void bf_recon_ownership_finish(struct bf_recon *r, struct bf_recon_result *res, bool full_ok);
bool bf_recon_ownership_idle(struct bf_recon *r);
bool bf_recon_ownership_sync_pending(const struct bf_recon *r);

#endif
