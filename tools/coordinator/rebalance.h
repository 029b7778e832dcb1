/*
 * rebalance.h — seed 002 (ADR-0055) §1-§3 and §6: the coordinator's
 * leader-only rebalance loop, as a pure module (no I/O, no clock, no etcd):
 * the caller hands it every shard's latest soft state once per
 * --rebalance-interval and it emits instructions through callbacks.
 * Tests drive it with synthetic reports (tests/unit/test_coordinator.c).
 *
 * One pass (co_rb_pass):
 *   1. eligibility: a shortfall is cross-shard eligible iff its age_cycles >
 *      min_age (5), it is not topology-constrained (Same), its shard
 *      reported since its last move completed, and no move for it is in
 *      flight (escalation-churn guard);
 *   2. order: priority desc, age desc (then shard id, key: deterministic);
 *   3. per shortfall, strictly ascending cost, stopping at the first tier
 *      that covers it:
 *        Tier 1 TransferOwnership of Idle from donors with a surplus;
 *        Tier 2 ReassignSpeculative of Speculative slots (the quota ledger
 *          is updated through ops->quota once the donor let go);
 *        Tier 3 CrossShardDrain, only at age > preempt_min_age (12), only
 *          when Tiers 1-2 found nothing anywhere this pass, with the cost
 *          gate preemptor priority > victim priority (the donor checks) and
 *          victim bucket < requester bucket (max_victim_penalty_bucket),
 *          followed by TransferOwnership of the drained machines once the
 *          donor accepts it (they are Idle).
 *   Sizing: the machines a shortfall needs of type t are
 *   max over dimensions of ceil(deficit / allocatable(t)) from the catalog
 *   (--catalog); a type the catalog does not know counts 1 machine.
 *   Candidate types: the shortfall's node.kubernetes.io/instance-type In
 *   values (every type of the donor when there is none, catalog-feasible
 *   only); zones: its topology.kubernetes.io/zone In values (any when none).
 *
 * Anti-oscillation (seed 002 §6):
 *   - age gate (above);
 *   - post-move cooldown: a completed move of flow (type, zone) between two
 *     shards blocks that flow between that pair in the other direction for
 *     cooldown_passes passes (B->A->B, quota ping-pong); the same
 *     direction is demand-pull and waits for the recipient's next report;
 *   - donor margin and minimum benefit: a donor keeps donor_margin machines
 *     of the flow after donating, donates nothing of a type it has an
 *     unserved shortfall for itself, and the moves one tier starts for a
 *     shortfall in one pass (every donor row, e.g. one per zone) must
 *     together cover at least min_benefit of what it needs (or all of it);
 *   - demand-pull: instructions only ever go to cover a reported eligible
 *     shortfall, sized to at most its deficit minus what is already in
 *     flight for it; Idle is never pushed; a drain's follow-up transfer is
 *     dropped when the requester's shortfall is gone (the donor's
 *     reservation expires: a wasted drain, never a push).
 *
 * Moves (two-phase, ADR-0055 contract, docs/adr0055.md §8): the donor gets
 * the selector; when it acks ACCEPTED with machine_ids, the recipient gets
 * the same instruction naming those ids. Any other outcome ends the move
 * (FAILED changes nothing). State is leader-local and soft: a new leader
 * starts empty and re-derives from fresh reports (the shard's term fence
 * rejects the old leader's instructions).
 *
 * Threads: single-threaded; the caller owns the struct rb. Strings passed
 * in are copied; every bound is fixed (RB_MAX_*), and what does not fit is
 * counted in stats.dropped, never grown.
 */
#ifndef BF_COORD_REBALANCE_H
#define BF_COORD_REBALANCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RB_DIMS        3    /* cpu (milli), memory (MiB), nvidia.com/gpu (milli) */
#define RB_MAX_MOVES   4096 /* moves in flight (all tiers) */
#define RB_MAX_COOL    8192 /* cooldown entries */
#define RB_MAX_IDS     1024 /* machines per instruction (the shard's bound) */
#define RB_NAME_MAX    128  /* type, zone (longer ones are skipped) */
#define RB_SHARD_MAX   256  /* shard id bytes */
#define RB_INSTR_ID    17   /* 16 hex + NUL */
#define RB_MAX_SAMPLES 4096 /* shortfall-to-satisfied latencies kept for the report */

enum rb_tier { RB_TIER1 = 1, RB_TIER2 = 2, RB_TIER3 = 3 };
enum rb_kind { RB_TRANSFER = 1, RB_REASSIGN = 2, RB_DRAIN = 3 };
/* InstructAck.Outcome values */
enum rb_outcome { RB_ACCEPTED = 1, RB_REJECTED_STALE = 2, RB_REJECTED_INVALID = 3, RB_FAILED = 4 };

/* Machines of one (instance type, zone) on a shard (ShardSummary.free_counts). */
struct co_rb_free {
    const char *type, *zone;
    int32_t idle, spec, bound;
};

/* One reported shortfall (the wire Shortfall, digested). */
struct rb_shortfall {
    uint64_t key; /* identity across reports: hash of requirements, priority, bucket */
    int32_t priority, age, ipb;
    bool topo;                /* topology_constrained */
    int64_t deficit[RB_DIMS]; /* cpu milli, memory MiB, gpu milli; <= 0 = none */
    const char *const *types; /* instance-type In values (NULL/0 = any) */
    uint32_t n_types;
    const char *const *zones; /* zone In values (NULL/0 = any) */
    uint32_t n_zones;
    int64_t first_seen_ns; /* wall: when the coordinator first saw it (latency figure) */
};

/* A shard's latest soft state. */
struct rb_shard {
    const char *id;
    uint64_t report_seq; /* bumps on every report the coordinator took */
    const struct co_rb_free *free;
    uint32_t n_free;
    const struct rb_shortfall *sf;
    uint32_t n_sf;
};

/* Catalog entry (--catalog). */
struct rb_type {
    const char *name;
    int64_t alloc[RB_DIMS];
};

/* What the loop asks to be sent. ids are borrowed for the call. */
struct rb_instr {
    enum rb_kind kind;
    const char *from, *to; /* donor, recipient */
    int32_t count;         /* selector (donor) or 0 */
    const char *type, *zone;
    const char *const *ids; /* named machines or NULL */
    uint32_t n_ids;
    int32_t preemptor_priority;        /* drain */
    int32_t max_victim_penalty_bucket; /* drain */
};

struct rb_ops {
    /* Queue `in` for `shard`; write its instruction_id. 0, or -errno (the
     * move is then not started / retried next pass). */
    int (*send)(void *arg, const char *shard, const struct rb_instr *in, char id[RB_INSTR_ID]);
    /* Tier 2: the donor let `n` Speculative slots go to `to`: commit the
     * quota move (durable). Errors are the caller's to log. */
    void (*quota)(void *arg, const char *from, const char *to, int32_t n);
    void *arg;
};

struct rb_config {
    int32_t min_age;              /* cheap tiers need age > this (5) */
    int32_t preempt_min_age;      /* Tier 3 needs age > this (12) */
    uint32_t cooldown_passes;     /* reverse-flow block after a move (8) */
    int32_t donor_margin;         /* machines of a flow a donor keeps (1) */
    double min_benefit;           /* fraction of the need a move must cover (0.25) */
    uint32_t drain_follow_passes; /* Tier 3: give up the follow-up after (120) */
    uint32_t move_timeout_passes; /* a phase not acked within this ends the move (60) */
    bool tier3;                   /* Tier 3 allowed (true) */
};
void co_rb_config_defaults(struct rb_config *c);

struct co_rb_stats {
    uint64_t passes;
    uint64_t eligible;         /* eligible shortfalls seen over all passes */
    uint64_t started[4];       /* moves started by tier */
    uint64_t completed[4];     /* moves whose recipient accepted */
    uint64_t machines[4];      /* machines moved (recipient accepted) by tier */
    uint64_t failed[4];        /* moves ended by a non-ACCEPTED outcome or timeout */
    uint64_t blocked_cooldown; /* candidate flows skipped by the cooldown */
    uint64_t blocked_margin;   /* donor rows with no surplus above the margin */
    uint64_t blocked_demand;   /* donor rows of a type the donor is short of itself */
    uint64_t blocked_benefit;  /* rows below min_benefit, the tier's rows together too */
    /* shortfalls not eligible, summed over passes, by reason: age <= min_age,
     * topology-constrained, a move for it in flight, its last move not yet
     * visible in the recipient's reports */
    uint64_t young, topo, in_flight, settling;
    uint64_t tier3_young;    /* uncovered by Tiers 1-2, age <= preempt_min_age */
    uint64_t uncovered;      /* eligible shortfalls no tier could start a move for */
    uint64_t abandoned_pull; /* drain follow-ups dropped: the demand was gone */
    uint64_t satisfied;      /* shortfalls gone after a completed move */
    uint64_t dropped;        /* bounds hit (moves, cooldowns, ids, names) */
};

/* Per shard pair and tier: machines moved (for the report). */
struct rb_flow_count {
    char from[RB_SHARD_MAX], to[RB_SHARD_MAX];
    int tier;
    uint64_t machines, moves;
};

struct rb;

/* 0 or -ENOMEM. types (may be NULL) is copied. */
int co_rb_new(const struct rb_config *cfg, const struct rb_type *types, size_t n_types,
              const struct rb_ops *ops, struct rb **out);
void co_rb_free(struct rb *r);
/* Forgets every move and cooldown (leadership lost: soft state). */
void co_rb_reset(struct rb *r);

/* One pass over every shard's latest soft state. now_ns: wall clock. */
void co_rb_pass(struct rb *r, const struct rb_shard *shards, size_t n, int64_t now_ns);
/*
 * An InstructAck from `shard`. Returns true when the id belonged to a move
 * of this loop. ids: InstructAck.machine_ids.
 */
bool co_rb_ack(struct rb *r, const char *shard, const char *instruction_id, int outcome,
               const char *const *ids, size_t n_ids);
/* A shard was removed: its moves end. */
void co_rb_forget_shard(struct rb *r, const char *shard);

const struct co_rb_stats *co_rb_stats(const struct rb *r);
uint32_t co_rb_moves_in_flight(const struct rb *r);
/* Flow counters (machines moved per from/to/tier); *n entries. */
const struct rb_flow_count *co_rb_flows(const struct rb *r, size_t *n);
/* Latencies (ms) from a shortfall's first report to its disappearance after
 * a completed move; *n of them (the first RB_MAX_SAMPLES). */
const double *co_rb_latencies_ms(const struct rb *r, size_t *n);

/* Helpers used by the report ingestion (and tests). */
/* cpu / memory / nvidia.com/gpu quantity -> the loop's units; -1 = not a dimension. */
int co_rb_dim_of(const char *resource);
int64_t co_rb_dim_value(int dim, int64_t milli);

#endif
