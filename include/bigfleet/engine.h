/*
 * bigfleet/engine.h — the shard decision engine: a private columnar mirror of
 * the inventory, the per-cluster demand, and one decision cycle (NormalizeDemand,
 * Phase 1 assign, Phase 2 preempt, Phase 3 reclaim and release), with per-Need
 * verdicts, shortfalls, acquisition parking and AvailableCapacity hints.
 *
 * Pure: no I/O, no shared memory, no threads, and one piece of process-wide
 * state: the page-size advice for big arrays (bf_engine_set_huge_pages). One engine
 * object is owned by one thread (the cycle process); nothing here is
 * thread-safe. Every function may be called in any order except that the
 * pointers a cycle result hands out stay valid only until the next mutating
 * call on the same engine (bf_engine_upsert/remove/set_needs/set_cluster_flags/
 * ac_forget/cycle/free).
 *
 * What it implements (seeds win over reference notes):
 *   - seeds/000 §2 (the cycle), §2.1 (rails, as pure functions here), §2.2
 *     (acquisition parking), §6 (shortfall ledger), §7 (AvailableCapacity);
 *   - seeds/004 ADR-0036 (Phase 3 reclaim gated per cluster until its first
 *     rollup; releases are not gated);
 *   - seeds/003 ADR-0061 + amendment (per-Need verdicts, full reason taxonomy,
 *     matching_supply, preemption summary, same_candidates, parked_age_cycles);
 *   - reference/engine.md §1-§9 with the deterministic sequential equivalent of
 *     §4.6 (Needs processed one at a time in precedence order; no displacement);
 *   - reference/shard.md §2, §4.6 and §6.
 *
 * Units: prices in dollars per hour; penalties as buckets (dollars are
 * bf_bucket_upper_bound(bucket)); resources as bf_vec milli-units; times in
 * seconds unless a name says _ns (nanoseconds since the Unix epoch). Every
 * machine is named by a stable slot number (< config.capacity) plus its string
 * id; "ID order" is bytewise comparison of the ids (memcmp, shorter prefix
 * first).
 *
 * Decisions the reference leaves open (docs/engine.md has the full list):
 *   - NaN effective cost (engine.md §11 item 3): bf_effective_cost() gives
 *     `price` when the interruption probability is 0 and +Inf when it is > 0
 *     under a Pinned (+Inf) penalty, so the Speculative order is total.
 *   - Invalid machine records (NaN or negative price, probability NaN or
 *     outside [0,1], state outside 1..8, empty id, Configured/Draining without
 *     a cluster) are stored but ineligible: no index, no credit, no action.
 *     A +Inf price is valid (Go's invariant) and orders last.
 *     Negative allocatable entries are clamped to 0.
 *   - docs/fidelity.md lists every decision checked against the Go engine.
 *   - Duplicate values in a pinned instance-type list are de-duplicated.
 *   - DrainGrace uses the exact 64-bit gap (no int32 wrap).
 *   - Caps: matching_supply 256 per state, same_candidates 8 (configurable).
 */
#ifndef BIGFLEET_ENGINE_H
#define BIGFLEET_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bigfleet/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ config */

/* Engine option flags (bf_engine_config.flags). */
enum {
    /* Skip the ADR-0061 verdict instrumentation (verdict rows, matching
     * supply, same_candidates). Actions are identical either way (tested). */
    BF_ENGINE_F_NO_VERDICTS = 1u << 0,
    /* Reference mode: every credit, consumption and claim is done one machine
     * at a time through the ordered walks, with no bulk leaf arithmetic, and
     * the demand order is re-sorted from scratch instead of merged
     * incrementally. Slow; used by tests to prove the fast path makes
     * identical decisions. */
    BF_ENGINE_F_REFERENCE = 1u << 1,
    /* Derive the whole Phase 1 credit pre-pass every cycle instead of keeping
     * the outcomes whose inputs provably did not change since the last cycle
     * (docs/engine.md §4). Identical decisions; the reference the randomized
     * suite and `bench_engine --check` hold the incremental pre-pass to.
     * BF_ENGINE_F_REFERENCE implies it. */
    BF_ENGINE_F_NO_INCREMENTAL = 1u << 2,
};

struct bf_engine_config {
    uint32_t capacity; /* slots are 0..capacity-1 (required, <= 1<<28) */
    /* Phase 2 (engine.md §5): VictimScore weights and the drain estimate. */
    double w_priority;       /* 1.0 */
    double w_drain;          /* 0.1 */
    double w_interruption;   /* 0.1 */
    double w_reclamation;    /* 0.1 */
    double drain_estimate_s; /* 30 */
    /* Phase 3 (engine.md §6). */
    int64_t reclaim_grace_s; /* ReclaimGrace: 600 */
    int64_t ondemand_hold_s; /* idle hold before Delete; 600; 0 = never release */
    int64_t spot_hold_s;     /* 60; 0 = never release */
    /* Parking (seeds/000 §2.2). */
    uint32_t park_after_cycles;    /* 8 */
    uint32_t reprobe_every_cycles; /* 32 */
    /* Shortfalls (seeds/000 §6): ledger rows reported. */
    uint32_t shortfall_cap; /* 100 */
    /* ADR-0061 amendment caps. */
    uint32_t matching_supply_cap; /* 256 per state */
    uint32_t same_candidate_cap;  /* 8 (top-K domains, best first) */
    /* AvailableCapacity (seeds/000 §7): per (cluster, fingerprint). */
    int64_t ac_min_interval_ns; /* 5 s; 0 = no rate limit (coalescing stays) */
    uint32_t flags;             /* BF_ENGINE_F_* */
    /*
     * Optional dimension names (copied). Used only to build NormalizeDemand's
     * aggregate key ("name=milli;" sorted by name, engine.md §3), which orders
     * folded Needs. Without names the key uses "d<index>".
     */
    const struct bf_dims *dims;
};

/* Fills the defaults above (capacity 0: the caller must set it). */
void bf_engine_config_defaults(struct bf_engine_config *c);

struct bf_engine;

/*
 * Transparent huge pages for the engine's big arrays (docs/performance.md,
 * "Huge pages and the 512 ms stall (target 1; lead, stop 30)"). Process-wide,
 * default off.
 *
 * On: every array of 2 MiB or more (the mirror's per-slot columns, id buffer
 * and leaves; any working array grown past 2 MiB) is advised MADV_HUGEPAGE:
 * one fault per 2 MiB instead of 512, which shortens a restarted cycle
 * process's first rescan on a host where first touches are dear.
 * Off: the same arrays are advised MADV_NOHUGEPAGE, so they take 4 KiB pages
 * even under a system-wide THP "always" (the rest of the process's heap is
 * not advised: under "always" it may still take huge pages; under Debian's
 * default "madvise" it does not). On this project's VM (Firecracker under
 * PVM, shadow page tables), memory in transparent huge pages runs 10-15x slower for a few ms every
 * 512 ms (user time, no fault, no system call; measured with a plain loop outside the project too),
 * which made 1-2 of every 100 cycles at 500K machines cost 15-60 ms instead of ~3 ms; steady-state
 * p99 is what the appliance is for.
 *
 * Set it once, before the first bf_engine_new: the advice marks the memory,
 * not the array, so memory the allocator reuses after a free keeps the
 * advice it had (the cycle's feed re-advises its slot info at every full
 * rescan). Not thread-safe with concurrent allocations. The advice is a hint: a kernel
 * without THP ignores it (errors are ignored).
 */
void bf_engine_set_huge_pages(bool on);
/* The current setting (false until bf_engine_set_huge_pages(true)). */
bool bf_engine_huge_pages(void);
/*
 * Advises the 2 MiB-aligned part of [p, p + n) per the setting above
 * (MADV_HUGEPAGE or MADV_NOHUGEPAGE); a range holding no aligned 2 MiB does
 * nothing. For the cycle's own big arrays (src/cycle/feed.c), so the engine
 * and its caller follow one setting. p need not be aligned.
 */
void bf_engine_advise_pages(void *p, size_t n);
/*
 * Pre-faults the 4 KiB pages holding [p, p + n), which the caller is about to
 * write, in one system call (madvise MADV_POPULATE_WRITE, Linux 5.14) instead
 * of one page fault per page (~14-20 us each on the appliance's VM; the
 * populate costs ~1 us a page and the first touch afterwards ~7 us: the
 * hypervisor's shadow page table is still filled per page; i18-restart6,
 * stop 31). Only the pages of the range: the caller's resident set grows by
 * exactly what its writes would have faulted. Nothing with the huge-page
 * setting on (one fault per 2 MiB already), on n == 0, or where the kernel
 * lacks the advice (EINVAL: remembered, not retried). Errors are ignored
 * (ENOMEM: the pages fault when written, as without the call).
 */
void bf_engine_populate(void *p, size_t n);

/*
 * Creates an engine. The config is copied. Returns 0, -EINVAL (capacity 0 or
 * above 1<<28, a negative weight, hold or interval) or -ENOMEM.
 */
int bf_engine_new(const struct bf_engine_config *c, struct bf_engine **out);
/* Frees everything. NULL is allowed. */
void bf_engine_free(struct bf_engine *e);

/* ------------------------------------------------------------------ mirror */

struct bf_engine_label {
    const char *key;   /* NUL-terminated */
    const char *value; /* NUL-terminated; "" is a present, empty value */
};

/*
 * One machine as the cycle process read it from its inventory record
 * (reference/engine.md §1.1, §1.5). Every pointer is borrowed for the call.
 * Strings are NUL-terminated; NULL reads as "" (except id, which is required).
 * The engine never retains a caller pointer and takes no caller-provided
 * string keys: every string is hashed and interned (refcounted), which keeps
 * the engine independent of the shm string table's recycling rules.
 */
struct bf_engine_machine {
    const char *id;            /* required, non-empty */
    uint8_t state;             /* enum bf_state */
    uint8_t capacity_type;     /* enum bf_capacity_type */
    const char *instance_type; /* Profile.InstanceType ("" = none) */
    const char *zone;          /* Profile.Zone ("" = none) */
    uint32_t n_labels;
    const struct bf_engine_label *labels; /* a repeated key keeps its last value */
    bf_vec allocatable;                   /* EffectiveAllocatable, already resolved */
    const char *cluster;                  /* "" = unbound */
    double price_per_hour;
    double interruption_probability;
    int32_t assigned_priority;
    uint8_t assigned_ipb; /* interruption penalty bucket 0..27 */
    uint8_t assigned_rpb; /* reclamation penalty bucket 0..27 */
    const char *assigned_fingerprint;
    const void *assigned_group; /* bytes (may contain NUL) */
    size_t assigned_group_len;
    int64_t idle_since_s; /* time the machine entered Idle; 0 = unknown */
    /* Held out of every decision (ADR-0055, docs/adr0055.md): reserved for a
     * cross-shard transfer, or no longer owned by this shard and waiting to
     * leave the inventory. Stored like an ineligible record: counted, never
     * credited, claimed, preempted or released. */
    bool held;
};

/*
 * Inserts or replaces the machine in `slot` (one call per changed slot of the
 * change log; O(log n) index maintenance, no cycle-time cost). The record is
 * copied and its strings interned. A record that fails the engine's screen
 * (see the file comment) is kept as ineligible: counted, never acted on.
 * Returns 0, -EINVAL (slot >= capacity, NULL machine or id, an id longer
 * than BF_ENGINE_ID_MAX bytes) or -ENOMEM (the
 * slot keeps its previous content, or if memory ran out half-way it is absent
 * or ineligible; a later upsert of the slot repairs it). More than 2^20
 * distinct clusters also reports -ENOMEM.
 */
int bf_engine_upsert(struct bf_engine *e, uint32_t slot, const struct bf_engine_machine *m);
/* The longest machine id the mirror keeps (its length is a 16-bit column;
 * the provider client bounds ids far below: BF_PROV_ID_MAX). */
#define BF_ENGINE_ID_MAX 65535
/* Removes the machine in `slot`; an empty slot is a no-op. 0 or -EINVAL. */
int bf_engine_remove(struct bf_engine *e, uint32_t slot);

/* Mirror statistics (all O(1)). */
struct bf_engine_mirror_stats {
    uint32_t machines;                 /* occupied slots */
    uint32_t ineligible;               /* occupied but screened out */
    uint32_t by_state[BF_STATE_COUNT]; /* eligible machines per state */
    uint32_t classes;                  /* distinct (type, zone, labels, allocatable) */
    uint32_t leaves;                   /* distinct index leaves (see docs/engine.md) */
    uint32_t strings;                  /* interned strings */
    size_t bytes;                      /* heap bytes held by the mirror and demand */
};
void bf_engine_mirror_stats(const struct bf_engine *e, struct bf_engine_mirror_stats *st);

/* ------------------------------------------------------------------ demand */

/*
 * One Need row of a cluster's full-replacement rollup (engine.md §1.7).
 * The profile's arrays and strings are borrowed for the call; the engine
 * copies them and canonicalises its copy, then computes the fingerprint
 * itself (bf_profile_fingerprint of the canonical copy) unless the caller
 * hands it in.
 */
struct bf_engine_need {
    struct bf_need_profile profile;
    bf_vec aggregate; /* total capacity wanted */
    bf_vec min_unit;  /* every machine counted must cover it */
    int64_t arrival_ns;
    const void *group; /* co-location identity, bytes */
    size_t group_len;
    /* Optional, borrowed for the call: the profile's fingerprint, i.e.
     * exactly what bf_profile_fingerprint gives for the canonicalised
     * profile (a NeedProfileBlob's fingerprint field: struct bf_nprofile).
     * A profile the engine already holds is then found by it without being
     * copied, canonicalised or fingerprinted again. NULL or "": computed. Ignored
     * with BF_ENGINE_F_REFERENCE (the reference computes it). A wrong value
     * makes Needs with different profiles share one: the caller's contract. */
    const char *fingerprint;
};

/*
 * Replaces `cluster`'s Needs wholesale (an empty list is legal and means "no
 * demand"). `generation` is the caller's rollup generation: a call with the
 * generation already held is a no-op returning 0, so the cycle process may
 * call it for every cluster every cycle. A new generation whose content is
 * identical to the held one is detected and keeps every memo. Does not set
 * the first-rollup flag (bf_engine_set_cluster_flags does; the caller owns
 * that gate). Returns 0, -EINVAL (cluster NULL or "", a NULL array with n > 0,
 * a requirement with a NULL key or value) or -ENOMEM (the old demand is kept).
 */
int bf_engine_set_needs(struct bf_engine *e, const char *cluster, uint64_t generation,
                        const struct bf_engine_need *needs, size_t n);

/*
 * A republished rollup whose rows did not change (the session's repeat path,
 * docs/performance.md "Rollup ingest": same extent, generation + 1, one new
 * arrival for every row): gives `cluster`'s held Needs arrival `arrival_ns`
 * and takes `generation`, without the rows being read or interned again.
 * The result — demand, its order and every memo it invalidates — is exactly
 * that of bf_engine_set_needs(cluster, generation, <the Needs of the last
 * bf_engine_set_needs call for cluster, each with arrival_ns>); the caller
 * guarantees the rows are those (the cycle's feed checks the generation
 * moved by exactly one and the cluster row says "repeat"). A generation
 * already held is a no-op. Returns 0, -EINVAL (cluster NULL or "") or
 * -ENOENT (the engine holds no demand for cluster: call bf_engine_set_needs).
 */
int bf_engine_set_needs_arrival(struct bf_engine *e, const char *cluster, uint64_t generation,
                                int64_t arrival_ns);

/*
 * Per-cluster flags from the caller: first_rollup = ADR-0036's
 * FirstRollupReceived (Phase 3 reclaims nothing in the cluster until it is
 * true); session_live = an operator session is connected (AvailableCapacity
 * hints are emitted only for live clusters). 0, -EINVAL or -ENOMEM.
 */
int bf_engine_set_cluster_flags(struct bf_engine *e, const char *cluster, bool first_rollup,
                                bool session_live);

/* Drops the AvailableCapacity coalesce/rate-limit state of one cluster (its
 * operator reconnected and lost its CRs: the next cycle re-emits). */
void bf_engine_ac_forget(struct bf_engine *e, const char *cluster);

/* Configured machines bound to `cluster` in the mirror (0 if unknown). */
uint32_t bf_engine_cluster_configured(const struct bf_engine *e, const char *cluster);

/* ------------------------------------------------------------------ outputs */

/* Action kinds and reasons: enum bf_action_kind / enum bf_action_reason and
 * bf_action_kind_name() / bf_action_reason_name() in bigfleet/model.h. */

/*
 * One decided action. Emission order (engine.md §2 step 8): Phase 1 (per Need
 * in normalized-demand order: its Bootstraps in pick order, then its
 * Provisions in pick order), then Phase 2 (per unsatisfied Need by priority,
 * victims in VictimScore order), then Phase 3 (Reclaims by cluster id asc,
 * keep-priority order within; then Deletes in machine-id order).
 */
struct bf_engine_action {
    uint8_t kind;     /* enum bf_action_kind */
    uint8_t reason;   /* enum bf_action_reason */
    uint8_t ipb, rpb; /* Bootstrap/Provision: the source profile's buckets */
    uint32_t slot;
    uint32_t need;              /* Bootstrap/Provision/Preempt: index into the cycle's
                                   verdict rows (normalized demand); else UINT32_MAX */
    int32_t priority;           /* Bootstrap/Provision: the source profile's priority */
    int32_t preemptor_priority; /* Preempt only; 0 otherwise */
    int64_t grace_s;            /* Reclaim: ReclaimGrace; Preempt: DrainGrace; else 0 */
    const char *machine_id;
    const char *cluster;     /* destination (Bootstrap/Provision), source
                                (Reclaim/Preempt), "" for Delete */
    const char *fingerprint; /* Bootstrap/Provision: source profile fingerprint; else "" */
    const void *group;       /* Bootstrap/Provision: the Need's group; else empty */
    uint32_t group_len;
};

/* The reason taxonomy: enum bf_unmet_reason and bf_unmet_reason_name() in
 * bigfleet/model.h ("SATISFIED", "PRIORITY_STARVED", ...). */

struct bf_engine_domain_coverage {
    const char *domain;
    int32_t coverage_per_mille; /* 0..1000, worst-covered deficit dimension */
    bool satisfiable;           /* the domain's joint total covers the deficit */
};

/*
 * Per-Need verdict (ADR-0061 NeedView + amendment), one row per Need of the
 * normalized demand. Observation only: nothing here feeds a decision.
 * Rows are in the NeedsTable snapshot order (priority desc, arrival asc,
 * cluster asc); `index` is the row's position in normalized-demand order
 * (what bf_engine_action.need refers to).
 */
struct bf_engine_verdict {
    uint32_t index;
    const char *cluster;
    const char *fingerprint;
    const struct bf_need_profile *profile; /* canonical; Same stripped when folded */
    bf_vec aggregate, min_unit;
    int64_t arrival_ns;
    const void *group;
    uint32_t group_len;
    uint32_t folded_members; /* > 0: a NormalizeDemand fold of this many gangs */
    bool satisfied;
    bf_vec residual_deficit; /* zero when satisfied */
    uint32_t claimed_count, bootstrap_count, provision_count;
    const char *same_domain; /* "" when none chosen / plain Need */
    bool same_satisfiable;
    bool acquisition_parked;
    uint32_t parked_age_cycles; /* parking age when parked and unsatisfied */
    uint32_t age_cycles_unmet;  /* shortfall-ledger age of the fingerprint; 0 if satisfied */
    uint8_t unmet_reason;       /* enum bf_unmet_reason */
    bool has_matching_supply;   /* set only for unsatisfied Needs */
    struct {
        uint32_t idle, configured, speculative; /* capped at matching_supply_cap */
        bool capped;
    } matching_supply;
    bool has_preemption; /* set only when Phase 2 found victims */
    struct {
        uint32_t victims_found;
        bf_vec capacity_freed;
    } preemption;
    uint32_t n_same_candidates;
    const struct bf_engine_domain_coverage *same_candidates; /* best first */
};

/* Phase 2's unresolved list (engine.md §5 step 4), priority order. */
struct bf_engine_unresolved {
    uint32_t need; /* normalized-demand index */
    bf_vec deficit;
    bool preempted; /* at least one victim picked */
    uint32_t victims_found;
    bf_vec capacity_freed;
};

/* Shortfall ledger row (seeds/000 §6): keyed by fingerprint, deficits summed
 * per cycle, aged per cycle; sorted by priority desc then age desc. */
struct bf_engine_shortfall {
    const char *fingerprint;
    const struct bf_need_profile *profile;
    int32_t priority;
    uint8_t ipb;
    bf_vec deficit;
    uint32_t age_cycles;
};

/* AvailableCapacity confidence; values equal AvailableCapacityUpdate.Confidence. */
enum bf_ac_confidence {
    BF_AC_CONFIDENCE_NONE = 1,
    BF_AC_CONFIDENCE_MEDIUM = 3,
    BF_AC_CONFIDENCE_HIGH = 4,
};

/* One AvailableCapacity hint to send this cycle (coalesced and rate-limited;
 * seeds/000 §7, shard.md §4.6). supersedes_key is "available:" + fingerprint. */
struct bf_engine_ac_hint {
    const char *cluster;
    const char *fingerprint;
    const struct bf_need_profile *profile; /* requirements to echo */
    int32_t available_count; /* Idle + Speculative of the pinned types (all if unpinned) */
    uint8_t confidence;      /* enum bf_ac_confidence */
    double cost_per_hour;    /* cheapest Idle price among pinned types; 0 otherwise */
};

struct bf_engine_timings { /* nanoseconds, CLOCK_MONOTONIC */
    int64_t normalize_ns;
    int64_t phase1_ns; /* credit + worker + barrier */
    int64_t phase1_credit_ns;
    int64_t phase2_ns;
    int64_t phase3_ns;
    int64_t verdict_ns; /* verdicts, shortfalls, parking, AC hints */
    int64_t total_ns;
};

struct bf_engine_result {
    uint64_t cycle; /* 1 for the first cycle */
    const struct bf_engine_action *actions;
    size_t n_actions;
    size_t n_phase1, n_phase2, n_phase3;      /* the list is P1 ++ P2 ++ P3 */
    const struct bf_engine_verdict *verdicts; /* NULL with BF_ENGINE_F_NO_VERDICTS */
    size_t n_verdicts;
    const struct bf_engine_unresolved *unresolved;
    size_t n_unresolved;
    const struct bf_engine_shortfall *shortfalls;
    size_t n_shortfalls;
    const struct bf_engine_ac_hint *ac_hints;
    size_t n_ac_hints;
    uint32_t n_needs;                 /* normalized demand rows */
    uint32_t n_unsatisfied;           /* Phase 1 unsatisfied */
    uint32_t claimed[BF_STATE_COUNT]; /* Phase 1's claimed set, per machine state */
    /* Phase 1 credit pre-pass this cycle (docs/engine.md §4): normalized Needs
     * whose outcome was kept (inputs unchanged), re-ranked (only the shard's
     * acquirable supply moved: a Same Need's domains ranked again, its claims
     * kept) and derived; they add up to n_needs. demand_kept: of the kept and
     * re-ranked, those in clusters whose demand moved since the last cycle
     * (rows whose own Need did not change, replayed) */
    struct {
        uint32_t kept, reranked, derived;
        uint32_t demand_kept;
    } prepass;
    struct bf_engine_timings t;
};

/*
 * Runs one decision cycle against the mirror and demand as they stand.
 * now_ns is the wall clock used for idle holds (release) and the
 * AvailableCapacity rate limit. Cross-cycle state (parking ages, the
 * shortfall ledger, the AC cache, the cycle counter) advances.
 * Returns 0, -EINVAL (NULL argument) or -ENOMEM: the result is then empty
 * and bf_engine_claimed() answers false; cross-cycle ledgers may have advanced
 * part-way (a parking or shortfall age can be off by one), everything else is
 * recomputed by the next cycle.
 */
int bf_engine_cycle(struct bf_engine *e, int64_t now_ns, struct bf_engine_result *out);

/*
 * Phase 1's claimed set of the last cycle: true iff `slot` was credited or
 * acquired (engine.md §4.5 CycleResult.Claimed). O(log n). With `need` non-NULL
 * it receives the normalized-demand index of the claiming Need.
 */
bool bf_engine_claimed(const struct bf_engine *e, uint32_t slot, uint32_t *need);

/* ------------------------------------------------------------------ rails */

/*
 * The reclaim blast-radius cap (ADR-0046 rail 1): per cluster keep at most
 * max(1, floor(fraction * configured(cluster))) Reclaims, the head of the
 * emission order; drop the rest. Only Reclaim is capped. Compacts `a` in
 * place preserving order and returns the new length; *capped (may be NULL)
 * receives the number dropped. fraction <= 0 (or NaN) caps nothing.
 * `configured` returns the cluster's Configured count (bf_engine_cluster_configured
 * fits through a small wrapper).
 */
size_t bf_engine_rail_reclaim_cap(struct bf_engine_action *a, size_t n, double fraction,
                                  uint32_t (*configured)(void *ctx, const char *cluster), void *ctx,
                                  size_t *capped);

/* --max-actions-per-cycle: keeps the head; returns the kept length and the
 * deferred count in *deferred (may be NULL). max == 0 keeps everything. */
size_t bf_engine_rail_max_actions(size_t n, uint32_t max, size_t *deferred);

struct bf_rails_config {
    bool actuation_paused;       /* kill switch: nothing executes, counted per kind */
    bool dry_run;                /* shadow: nothing executes, recorded per kind */
    double reclaim_cap_fraction; /* 0.05 default; <= 0 disables */
    uint32_t max_actions;        /* 0 = unlimited */
};

struct bf_rails_outcome {
    size_t n_execute; /* the head of `a` to execute (0 when paused/dry-run) */
    size_t capped;    /* Reclaims dropped by the cap */
    size_t deferred;  /* dropped by max_actions */
    uint32_t suppressed[BF_ACTION_KIND_COUNT]; /* paused: per kind */
    uint32_t dryrun[BF_ACTION_KIND_COUNT];     /* dry-run: per kind */
    bool wake;                                 /* something deferred: trigger another cycle */
};

/*
 * The seed's disposition order (seeds/000 §2.1, shard.md §2 steps 7-9):
 * paused -> every action suppressed (counted per kind; no cap, no truncation);
 * else dry-run -> every action recorded (counted per kind; no cap, no
 * truncation); else the reclaim cap, then max-actions truncation. `a` is
 * compacted in place for the executing case. Pause wins over dry-run.
 */
void bf_engine_rails_apply(const struct bf_rails_config *rc, struct bf_engine_action *a, size_t n,
                           uint32_t (*configured)(void *ctx, const char *cluster), void *ctx,
                           struct bf_rails_outcome *out);

/* ------------------------------------------------------------------ pure helpers */

/* VictimScore (engine.md §5) with the weights and drain estimate of c. */
double bf_engine_victim_score(const struct bf_engine_config *c, int32_t preemptor_priority,
                              int32_t victim_priority, uint8_t victim_ipb, uint8_t victim_rpb);
/* DrainGrace(P, V) in seconds: gap > 900000 -> 10; > 500000 -> 30; > 100000 -> 120;
 * else 600. */
int64_t bf_engine_drain_grace_s(int32_t preemptor_priority, int32_t victim_priority);

/* ------------------------------------------------------------------ bulk load
 * (i18-restart, stop 27; src/cycle/engine/bulk.c)
 *
 * A mirror rebuild (a restarted cycle process upserts every record of the
 * inventory) feeds ~500K machines that fall into far fewer distinct
 * (profile, assignment) shapes. A bulk load remembers recent shapes (a
 * fixed-size cache): a machine whose leaf inputs (every scalar
 * bf_engine_upsert's leaf resolve reads, and the ADDRESSES of
 * instance_type, zone, labels, cluster, assigned_fingerprint and
 * assigned_group, with assigned_group_len) equal a remembered machine's of
 * the same load takes that machine's leaf, if it is still live, without
 * hashing or comparing any string; a new leaf of a remembered (instance
 * type, zone, labels, allocatable) takes its class the same way. The result
 * is the state bf_engine_upsert of the same machines in the same order
 * gives (test_engine_bulk).
 *
 * Contract: between bf_engine_bulk_begin and bf_engine_bulk_end the bytes
 * at every address a machine handed in for those six fields stay unchanged
 * (the cycle's feed hands in shm string-arena bytes, append-only, and its
 * blob and label caches, which it never frees while running). The id and
 * everything else are read as by bf_engine_upsert, during the call only.
 * Between begin and end the engine may be changed only through
 * bf_engine_bulk_upsert, bf_engine_upsert and bf_engine_remove (a
 * remembered leaf or class is taken only while it is live with the serial or
 * generation it had), and it is not read: a bulk load appends each machine
 * to its leaf's slot list (and a release list) even out of id order, and
 * bf_engine_bulk_end sorts the lists it left out of order (i18-restart3,
 * stop 28; without memory for the sort, in place), which makes the state
 * the per-record upserts' again. So end every load that began, before a
 * cycle or a query.
 */
struct bf_engine_bulk;
struct bf_engine_bulk_stats {
    uint64_t upserts;  /* bf_engine_bulk_upsert calls that returned 0 */
    uint64_t shared;   /* of them: took an earlier machine's leaf */
    uint64_t resolved; /* leaves resolved (eligible machines of a new shape) */
    uint64_t sorted;   /* leaves' slot lists left out of order and sorted at the end */
};
/* n_hint: the slots the load will write, [0, n_hint): their per-slot
 * columns are pre-faulted in bulk, and the id buffer ahead of its end until
 * bf_engine_bulk_end (bf_engine_populate; the caches are fixed-size; 0 is
 * fine). 0, -EINVAL (NULL) or -ENOMEM. */
int bf_engine_bulk_begin(struct bf_engine *e, uint32_t n_hint, struct bf_engine_bulk **out);
/* bf_engine_upsert(e, slot, m) with the shape memo above; same returns. */
int bf_engine_bulk_upsert(struct bf_engine_bulk *b, uint32_t slot,
                          const struct bf_engine_machine *m);
/* Sorts the lists the load left out of order and frees the handle (NULL is
 * a no-op); st (may be NULL) gets its counts. */
void bf_engine_bulk_end(struct bf_engine_bulk *b, struct bf_engine_bulk_stats *st);

#ifdef __cplusplus
}
#endif
#endif /* BIGFLEET_ENGINE_H */
