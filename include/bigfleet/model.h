/*
 * bigfleet/model.h — the BigFleet data model shared by every process and tool.
 *
 * What lives here (reference/engine.md §1, reference/wire.md §8–§10):
 *   - the machine lifecycle: 8 states plus the zero guard, the 13 legal
 *     transitions, Invariant (the structural and cost-input screen);
 *   - CapacityType and its idle holds (ADR-0049 / M73 release policy);
 *   - penalty buckets: the ladder 0..27, dollars <-> bucket;
 *   - requirement operators (In/NotIn/Exists/DoesNotExist/Same), topology
 *     spread, the Need profile and its canonical fingerprint string;
 *   - resource vectors as int64 milli-units over a small set of named
 *     dimensions, and Kubernetes quantity parsing/formatting;
 *   - effective cost (the locked formula) and the shard_metadata echo keys.
 *
 * Everything here is pure: no I/O, no shared memory, no global state. All
 * functions are safe to call from any thread or process. Strings passed in
 * are borrowed for the duration of the call unless stated otherwise.
 *
 * Units: prices in dollars per hour (double); penalties in dollars; resource
 * quantities in milli-units (1 cpu = 1000, 1 byte of memory = 1000); times in
 * seconds unless a name says _ns (nanoseconds since the Unix epoch).
 */
#ifndef BIGFLEET_MODEL_H
#define BIGFLEET_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ states */

/* Machine states; numeric values equal bigfleet.v1alpha1.MachineState. */
enum bf_state {
    BF_STATE_UNSPECIFIED = 0, /* never legal for a stored machine */
    BF_STATE_SPECULATIVE = 1, /* quota slot: no host, no cluster */
    BF_STATE_CREATING = 2,    /* Speculative -> Idle (provider Create) */
    BF_STATE_IDLE = 3,        /* host, no cluster */
    BF_STATE_CONFIGURING = 4, /* Idle -> Configured (provider Configure) */
    BF_STATE_CONFIGURED = 5,  /* host and cluster */
    BF_STATE_DRAINING = 6,    /* Configured -> Idle (provider Drain) */
    BF_STATE_DELETING = 7,    /* Idle -> Speculative (provider Delete, cloud only) */
    BF_STATE_FAILED = 8,      /* terminal until cleaned up; last_error set */
    BF_STATE_COUNT = 9
};

/* "Speculative", "Creating", ... ("Unspecified" for 0, "Unknown" otherwise). */
const char *bf_state_name(int state);
/* Parses the names above (case-insensitive). Returns the state or -1. */
int bf_state_from_name(const char *name);
/* Speculative, Idle, Configured. */
bool bf_state_is_stable(int state);
/* Creating, Configuring, Draining, Deleting. */
bool bf_state_is_transitional(int state);
/*
 * True iff from -> to is one of the 13 legal edges (engine.md §1.2): the
 * 9-entry table plus transitional -> Failed. A same-state "transition" is not
 * an edge (returns false); callers that apply same-state updates skip the
 * check, as the inventory does.
 */
bool bf_can_transition(int from, int to);

/* ------------------------------------------------------------ capacity types */

/* Values equal bigfleet.v1alpha1.CapacityType. */
enum bf_capacity_type {
    BF_CT_UNSPECIFIED = 0,
    BF_CT_BARE_METAL = 1,
    BF_CT_RESERVED = 2,
    BF_CT_ON_DEMAND = 3,
    BF_CT_SPOT = 4,
    BF_CT_COUNT = 5
};

#define BF_ONDEMAND_IDLE_HOLD_S 600 /* DefaultOnDemandIdleHold: 10 minutes */
#define BF_SPOT_IDLE_HOLD_S     60  /* DefaultSpotIdleHold: 1 minute */

/* "BareMetal", "Reserved", "OnDemand", "Spot", "unspecified". */
const char *bf_capacity_type_name(int ct);
/*
 * Idle hold before Phase 3 may release (Delete) an unclaimed Idle machine, in
 * seconds: OnDemand 600, Spot 60; -1 = held forever (BareMetal, Reserved,
 * Unspecified and unknown values). engine.md §1.3.
 */
int64_t bf_idle_hold_seconds(int ct);

/* ------------------------------------------------------------ penalty buckets */

#define BF_BUCKET_UNSPECIFIED 0
#define BF_BUCKET_ZERO        1
#define BF_BUCKET_HALF_DOLLAR 2
#define BF_BUCKET_FIRST_POW2  3  /* $1 */
#define BF_BUCKET_LAST_POW2   26 /* $8,388,608 */
#define BF_BUCKET_PINNED      27 /* > $8,388,608: +Inf */
#define BF_BUCKET_MAX         27
#define BF_BUCKET_COUNT       28

/*
 * BucketForDollars (wire.md §9): d <= 0 -> ZERO; d <= 0.5 -> HALF_DOLLAR;
 * the smallest bucket b in 3..26 with 2^(b-3) >= d; above $8,388,608 or NaN
 * -> PINNED.
 */
uint8_t bf_bucket_for_dollars(double dollars);
/*
 * UpperBoundDollars: UNSPECIFIED/ZERO -> 0; HALF -> 0.5; 3..26 -> 2^(b-3);
 * PINNED -> +Inf; anything else -> 0.
 */
double bf_bucket_upper_bound(int bucket);
/*
 * Metric label for a bucket (shard.md §7): "0", "0.5", "1", "2", ...,
 * "8388608", "pinned". Returns a static string; "0" for out-of-range values.
 */
const char *bf_bucket_label(int bucket);

/* ------------------------------------------------------------ requirements */

/* Values equal NodeSelectorRequirement.Operator. */
enum bf_op {
    BF_OP_UNSPECIFIED = 0,
    BF_OP_IN = 1,
    BF_OP_NOT_IN = 2,
    BF_OP_EXISTS = 3,
    BF_OP_DOES_NOT_EXIST = 4,
    BF_OP_SAME = 5,
    BF_OP_MAX = 5
};

/* Values equal TopologySpread.WhenUnsatisfiable. */
enum bf_when_unsat {
    BF_WHEN_UNSPECIFIED = 0,
    BF_WHEN_DO_NOT_SCHEDULE = 1,
    BF_WHEN_SCHEDULE_ANYWAY = 2
};

/* Well-known attribute keys consulted before labels (engine.md §1.5). */
#define BF_LABEL_INSTANCE_TYPE "node.kubernetes.io/instance-type"
#define BF_LABEL_ZONE          "topology.kubernetes.io/zone"

struct bf_requirement {
    const char *key;
    uint8_t op; /* enum bf_op */
    uint32_t n_values;
    const char **values;
};

struct bf_spread {
    const char *topology_key;
    int32_t max_skew;
    uint8_t when; /* enum bf_when_unsat */
};

/*
 * A Need profile: the aggregation key (ADR-0027). Carries no resource shape.
 * The struct borrows its strings and arrays; bf_profile_canonicalize() sorts
 * them in place (so the arrays must be writable).
 */
struct bf_need_profile {
    int32_t priority;
    uint8_t ipb; /* interruption penalty bucket, 0..27 */
    uint8_t rpb; /* reclamation penalty bucket, 0..27 */
    uint32_t n_reqs;
    struct bf_requirement *reqs;
    uint32_t n_spread;
    struct bf_spread *spread;
};

/*
 * Canonical order (engine.md §1.6): each requirement's values sorted
 * bytewise; requirements sorted by (key, operator); spreads by topology key.
 * Sorting is stable. The values arrays are permuted in place.
 */
void bf_profile_canonicalize(struct bf_need_profile *p);

/*
 * The fingerprint string, exactly (engine.md §1.6, wire.md §8):
 *   "p=<prio>|ipb=<ipb>|rpb=<rpb>|reqs=" {key ":" op ":" v1,v2 ";"}
 *   "|spr=" {key ":" maxSkew ":" when ";"}
 * The profile must already be canonical. Writes at most n bytes including
 * the NUL into buf and returns the full length (excluding NUL), like
 * snprintf: a return >= n means truncation.
 */
size_t bf_profile_fingerprint(const struct bf_need_profile *p, char *buf, size_t n);
/* Same, into a malloc'd string the caller frees. NULL only on ENOMEM. */
char *bf_profile_fingerprint_dup(const struct bf_need_profile *p);

/* Index of the first Same requirement in canonical order, or -1. */
int bf_profile_same_index(const struct bf_need_profile *p);
/* Index of the first DoNotSchedule spread in canonical order, or -1. */
int bf_profile_strict_spread_index(const struct bf_need_profile *p);
/*
 * Pinned instance types (engine.md §1.6): the first requirement whose key is
 * node.kubernetes.io/instance-type; if its operator is In with >= 1 value,
 * returns it; otherwise (or when absent) returns -1 ("unpinned").
 */
int bf_profile_pinned_types_index(const struct bf_need_profile *p);

/* ------------------------------------------------------------ resources */

/*
 * Resource vectors: int64 milli-units over at most BF_MAX_DIMS named
 * dimensions. Dimension indices come from a registry (struct bf_dims here;
 * the appliance keeps one shared registry in the inventory segment so every
 * process agrees on the indices). A dimension absent from a vector is 0.
 */
#define BF_MAX_DIMS     8
#define BF_DIM_NAME_MAX 48

typedef struct bf_vec {
    int64_t v[BF_MAX_DIMS];
} bf_vec;

struct bf_dims {
    uint32_t n;
    char names[BF_MAX_DIMS][BF_DIM_NAME_MAX];
};

/* Index of name, or -1. */
int bf_dims_lookup(const struct bf_dims *d, const char *name);
/* Index of name, adding it if absent. -ENOSPC when full, -EINVAL for an
 * empty or too-long name (>= BF_DIM_NAME_MAX bytes). */
int bf_dims_intern(struct bf_dims *d, const char *name);

static inline void bf_vec_zero(bf_vec *a)
{
    for (int i = 0; i < BF_MAX_DIMS; i++)
        a->v[i] = 0;
}
/* a += b */
static inline void bf_vec_add(bf_vec *a, const bf_vec *b)
{
    for (int i = 0; i < BF_MAX_DIMS; i++)
        a->v[i] += b->v[i];
}
/* a = max(a - b, 0) per dimension (engine.md §1.9 Sub). */
static inline void bf_vec_sub_clamp(bf_vec *a, const bf_vec *b)
{
    for (int i = 0; i < BF_MAX_DIMS; i++) {
        int64_t d = a->v[i] - b->v[i];
        a->v[i] = d > 0 ? d : 0;
    }
}
/* a = max(a, b) per dimension. */
static inline void bf_vec_max(bf_vec *a, const bf_vec *b)
{
    for (int i = 0; i < BF_MAX_DIMS; i++)
        if (b->v[i] > a->v[i])
            a->v[i] = b->v[i];
}
/* Covers(have, want): every positive dimension of want is <= have. */
static inline bool bf_vec_covers(const bf_vec *have, const bf_vec *want)
{
    for (int i = 0; i < BF_MAX_DIMS; i++)
        if (want->v[i] > 0 && have->v[i] < want->v[i])
            return false;
    return true;
}
/* IsZero: no dimension > 0. */
static inline bool bf_vec_is_zero(const bf_vec *a)
{
    for (int i = 0; i < BF_MAX_DIMS; i++)
        if (a->v[i] > 0)
            return false;
    return true;
}
static inline bool bf_vec_eq(const bf_vec *a, const bf_vec *b)
{
    for (int i = 0; i < BF_MAX_DIMS; i++)
        if (a->v[i] != b->v[i])
            return false;
    return true;
}
/* Scale(v, n): n <= 0 gives the zero vector. Saturates at INT64_MAX. */
void bf_vec_scale(bf_vec *a, int64_t n);

/*
 * Kubernetes resource.Quantity -> milli-units (MilliValue: ceil(q * 1000)).
 * Grammar: [+-]digits[.digits][suffix] with suffix one of the binary SI
 * Ki Mi Gi Ti Pi Ei, the decimal SI n u m "" k M G T P E, or a decimal
 * exponent e<int>/E<int>. Returns 0, -EINVAL (syntax), or -ERANGE (the
 * milli value does not fit int64). `len` bytes of s are parsed (s need not
 * be NUL-terminated).
 */
int bf_quantity_parse(const char *s, size_t len, int64_t *milli);
/*
 * Formats a milli value in a canonical Kubernetes-like form: "500m" when not
 * whole; "16Gi" (largest exact binary suffix, value >= 1024) when
 * binary_hint; else decimal ("24", "2k" is NOT used: plain integers).
 * Returns the length written (excluding NUL), snprintf-style.
 */
size_t bf_quantity_format(int64_t milli, bool binary_hint, char *buf, size_t n);
/* True for dimension names conventionally expressed in bytes (memory,
 * ephemeral-storage, hugepages-*), which format with binary suffixes. */
bool bf_dim_is_bytes(const char *name);

/* ------------------------------------------------------------ cost */

/*
 * effective_cost = price + p x max(0, penalty) (the locked formula).
 * Decision for the NaN case (engine.md §11 item 3): with an infinite penalty
 * (the PINNED bucket) a machine with p == 0 costs exactly its price, and one
 * with p > 0 costs +Inf; the result is never NaN for non-NaN inputs.
 */
double bf_effective_cost(double price_per_hour, double interruption_probability,
                         double penalty_dollars);

/* ------------------------------------------------------------ actions, verdicts */

/* Action kinds (engine.md §1.12). Shared by the engine, the shared-memory
 * action messages, the executor, the audit log and the metrics. */
enum bf_action_kind {
    BF_ACTION_UNSPECIFIED = 0,
    BF_ACTION_BOOTSTRAP = 1, /* Idle -> Configured for a Need (phase1.idle) */
    BF_ACTION_PROVISION = 2, /* Speculative -> Configured (phase1.speculative) */
    BF_ACTION_RECLAIM = 3,   /* Configured -> Idle, voluntary (phase3.excess) */
    BF_ACTION_PREEMPT = 4,   /* Configured -> Idle for a preemptor (phase2.inversion) */
    BF_ACTION_DELETE = 5,    /* Idle -> Speculative, release (phase3.release) */
    BF_ACTION_KIND_COUNT = 6
};

/* Action reason tags. */
enum bf_action_reason {
    BF_REASON_NONE = 0,
    BF_REASON_PHASE1_IDLE = 1,        /* "phase1.idle" */
    BF_REASON_PHASE1_SPECULATIVE = 2, /* "phase1.speculative" */
    BF_REASON_PHASE2_INVERSION = 3,   /* "phase2.inversion" */
    BF_REASON_PHASE3_EXCESS = 4,      /* "phase3.excess" */
    BF_REASON_PHASE3_RELEASE = 5,     /* "phase3.release" */
    /* a Preempt the coordinator asked for (ADR-0055 CrossShardDrain) */
    BF_REASON_CROSS_SHARD_DRAIN = 6 /* "cross_shard.drain" */
};

/* ADR-0061 reason taxonomy; values equal shardread.proto UnmetReason. */
enum bf_unmet_reason {
    BF_UNMET_UNSPECIFIED = 0, /* satisfied */
    BF_UNMET_PRIORITY_STARVED = 1,
    BF_UNMET_NO_MATCHING_SUPPLY = 2,
    BF_UNMET_TOPOLOGY_UNSATISFIABLE = 3,
    BF_UNMET_PREEMPTION_EXHAUSTED = 4
};

/* "Bootstrap", "Provision", "Reclaim", "Preempt", "Delete" ("" otherwise). */
const char *bf_action_kind_name(int kind);
/* "phase1.idle", ... ("" otherwise). */
const char *bf_action_reason_name(int reason);
/* "SATISFIED", "PRIORITY_STARVED", "NO_MATCHING_SUPPLY", "TOPOLOGY_UNSATISFIABLE",
 * "PREEMPTION_EXHAUSTED" ("" otherwise). */
const char *bf_unmet_reason_name(int reason);

/* ------------------------------------------------------------ invariant */

/* Why a record failed Invariant; the label is the metric label of
 * bigfleet_shard_machines_rejected_total{reason}. */
enum bf_reject_reason {
    BF_REJECT_NONE = 0,
    BF_REJECT_STRUCTURAL = 1,
    BF_REJECT_PRICE = 2,
    BF_REJECT_PROBABILITY = 3
};
const char *
bf_reject_reason_label(int reason); /* "structural", "price", "interruption_probability" */

struct bf_invariant_input {
    int state;
    bool host_set;    /* HostRef provider or ref non-empty */
    bool cluster_set; /* cluster non-empty */
    bool has_id;      /* machine id non-empty */
    bool has_last_error;
    double price_per_hour;
    double interruption_probability;
};

/*
 * machine.Invariant (engine.md §1.2, shard.md §3.5): returns BF_REJECT_NONE
 * or the reason, with a human message in msg (may be NULL). Checks: id set;
 * state 1..8; Speculative/Creating: no host, no cluster; Idle/Configuring/
 * Deleting: host; Configured/Draining: host and cluster; Failed: last_error;
 * then price >= 0 and not NaN; probability in [0,1] and not NaN.
 */
int bf_machine_invariant(const struct bf_invariant_input *m, char *msg, size_t msg_len);

/* ------------------------------------------------------------ shard_metadata */

/* The store-and-echo keys written at Configure (wire.md §10). */
#define BF_MD_PRIORITY     "bigfleet.lucy.sh/assigned-priority"
#define BF_MD_INTERRUPTION "bigfleet.lucy.sh/assigned-interruption-penalty-dollars"
#define BF_MD_RECLAMATION  "bigfleet.lucy.sh/assigned-reclamation-penalty-dollars"
#define BF_MD_FINGERPRINT  "bigfleet.lucy.sh/assigned-need-fingerprint"
#define BF_MD_GROUP        "bigfleet.lucy.sh/assigned-group"

/*
 * Formats a double the way Go's strconv.FormatFloat(f, 'g', -1, 64) does:
 * the shortest digits that round-trip, in exponent form when the decimal
 * exponent is < -4 or >= 6 (Go uses precision 6 for that decision in
 * shortest mode), with a signed two-digit-minimum exponent. Examples: "0",
 * "0.5", "524288", "1.048576e+06", "+Inf", "-Inf", "NaN". Returns the
 * length, snprintf-style.
 */
size_t bf_format_float_go(double f, char *buf, size_t n);
/* Parses what Go's ParseFloat accepts for these values (decimal, exponent,
 * "+Inf"/"Inf"/"inf"/"-Inf", "NaN"). 0 or -EINVAL. */
int bf_parse_float(const char *s, size_t len, double *out);

#ifdef __cplusplus
}
#endif
#endif /* BIGFLEET_MODEL_H */
