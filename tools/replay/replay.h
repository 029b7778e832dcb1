/*
 * tools/replay/replay.h — private header of bigfleet-replay, the operator
 * emulator that replays a production pod trace (../shared/data/openb) through
 * a shard over Shard/Session (reference/wire.md §2, §3, §8, §9; seeds/001
 * hops 1–3, 5–6; reference/shard.md §4). The mapping decisions are written
 * down in docs/replay.md; this header carries the shapes and units.
 *
 * Modules (one .c each):
 *   trace.c    the pod list CSV -> struct rp_trace (file:line errors);
 *   model.c    pod -> CapacityRequest profile (qos, gpu_spec, fitting types),
 *              classes (= aggregation keys), aggregation into Needs, the
 *              ClusterCapacityNeeds encoding, trace-time arithmetic;
 *   supply.c   machines and shapes learnt from NodeStateUpdates, the
 *              attribution of bound supply to Needs (coverage), the
 *              "still demanded" test of a reclaimed machine;
 *   bound.c    the LP lower bound of the cost of a Need;
 *   report.c   timeline, latency statistics, report.json, SVG plots, text;
 *   scrape.c   GET /metrics and a small Prometheus text parser;
 *   run.c      the sessions over the io_uring gRPC client and the clock;
 *   main.c     flags.
 *
 * Units everywhere: CPU in milli-CPU, memory in MiB, GPUs in milli-GPU
 * (rp_res), trace times in whole seconds (int64), wall times in nanoseconds
 * on the monotonic clock (bf_mono_ns) unless a name says _unix_ns, prices in
 * dollars per hour.
 *
 * Threads: everything runs on the one event-loop thread except the /metrics
 * scraper (scrape.c), which owns its own struct and publishes under a mutex.
 */
#ifndef BIGFLEET_REPLAY_H
#define BIGFLEET_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "bigfleet/hmap.h"
#include "bigfleet/model.h"
#include "bigfleet/simprovider.h"

/* NUL-terminated string -> index (bigfleet/hmap.h); a key must stay valid and
 * unchanged while it is in the map (the owner's strdup'd copy) */
static inline uint64_t rp_id_hash(const char *s)
{
    return bf_hash_bytes(s, strlen(s));
}
static inline bool rp_id_eq(const char *a, const char *b)
{
    return strcmp(a, b) == 0;
}
BF_HMAP_DEFINE(rp_idmap, const char *, uint32_t, rp_id_hash, rp_id_eq)

/* ------------------------------------------------------------ resources */

enum { RP_CPU = 0, RP_MEM = 1, RP_GPU = 2, RP_DIMS = 3 };
/* One resource vector: [RP_CPU] milli-CPU, [RP_MEM] MiB, [RP_GPU] milli-GPU. */
typedef struct rp_res {
    int64_t v[RP_DIMS];
} rp_res;

/* Wire names of the three dimensions ("cpu", "memory", "nvidia.com/gpu"). */
extern const char *const rp_dim_wire_name[RP_DIMS];

/* ------------------------------------------------------------ qos policy */

enum rp_qos { RP_QOS_BE = 0, RP_QOS_BURSTABLE, RP_QOS_LS, RP_QOS_GUARANTEED, RP_QOS_COUNT };

/* The documented qos -> priority / penalty table (docs/replay.md). */
struct rp_qos_policy {
    const char *name;            /* as in the trace: "BE", "Burstable", "LS", "Guaranteed" */
    int32_t priority;            /* PriorityClass value */
    double interruption_dollars; /* raw CR penalty, bucketed with bf_bucket_for_dollars */
    double reclamation_dollars;
};
extern const struct rp_qos_policy rp_qos_table[RP_QOS_COUNT];
/* "LS" -> RP_QOS_LS ... (case-insensitive); -1 when unknown. */
int rp_qos_parse(const char *s, size_t len);

/* ------------------------------------------------------------ trace */

#define RP_LIVES_FOREVER INT64_MAX

struct rp_pod {
    uint32_t name;   /* offset of the NUL-terminated name in rp_trace.strings */
    uint32_t line;   /* 1-based line in the file */
    rp_res req;      /* one pod's request */
    int64_t create;  /* trace seconds */
    int64_t delete_; /* trace seconds; RP_LIVES_FOREVER when empty in the file */
    uint8_t qos;     /* enum rp_qos */
    uint32_t spec;   /* index in rp_trace.specs; 0 = any GPU model */
    uint32_t cls;    /* class (aggregation key), set by rp_model_build */
};

/* A distinct gpu_spec: the allowed GPU models, deduplicated, sorted. */
struct rp_spec {
    uint32_t n;
    char **models;
};

#define RP_SKIP_SAMPLES 8

/* How a pod list without creation/deletion times (a snapshot of what runs,
 * like openb_pod_list_multigpu20.csv) is replayed (docs/replay.md §2). */
enum rp_snapshot {
    RP_SNAP_OFF = 0,  /* times are required: a list without them is an error */
    RP_SNAP_AUTO = 1, /* a header with neither time column is a snapshot */
    RP_SNAP_RAMP = 2, /* always a snapshot, even when the list has times */
};

/* Options of rp_trace_load / rp_trace_parse (NULL = all defaults). */
struct rp_trace_opts {
    bool skip_bad;   /* skip and count malformed rows instead of failing */
    int snapshot;    /* enum rp_snapshot (default RP_SNAP_OFF) */
    int64_t ramp;    /* snapshot: pods arrive in file order over [0, ramp) s (default 1 d) */
    int64_t hold;    /* snapshot: then all stay until ramp + hold s (default 1 d) */
    int default_qos; /* enum rp_qos for a missing qos column; -1 = required, except in a
                      * snapshot, where it defaults to LS */
};
#define RP_SNAPSHOT_DEFAULT_S 86400

struct rp_trace {
    char *path;
    struct rp_pod *pods;
    size_t n_pods;
    char *strings;
    size_t str_len, str_cap;
    struct rp_spec *specs; /* specs[0] is the empty spec */
    size_t n_specs;
    size_t rows;    /* data rows read (excluding header and blank lines) */
    size_t skipped; /* rows skipped under skip_bad */
    char skip_samples[RP_SKIP_SAMPLES][256];
    int64_t first_create; /* smallest creation time */
    int64_t end;          /* trace end: the largest finite time in the file */
    uint32_t *by_create;  /* pod indices ordered by (create, index) */
    /* snapshot: times were made up (arrival i at ramp * i / n, never deleted,
     * end = ramp + hold); snap_why says which columns were missing, or that
     * --snapshot ramp was asked for */
    bool snapshot;
    int64_t snap_ramp, snap_hold;
    char snap_why[160];
    int qos_default; /* the qos every pod got (no qos column), or -1 */
};

/*
 * Loads a pod list (header-driven: name, cpu_milli, memory_mib, num_gpu,
 * gpu_milli, qos, creation_time, deletion_time required; gpu_spec,
 * pod_phase, scheduled_time and unknown columns optional). A header missing
 * required columns is an error "<path>:<line>: header: missing columns a,
 * b (...)" naming every one of them. In a snapshot (o->snapshot) the time
 * columns are not needed and qos defaults to o->default_qos or LS. A
 * malformed row is an error "<path>:<line>: <what>" unless o->skip_bad,
 * which skips and counts it. Returns 0, -ENOENT/-EACCES/-EIO (file),
 * -EINVAL (content; err says where), -ENOMEM.
 */
int rp_trace_load(const char *path, const struct rp_trace_opts *o, struct rp_trace *t, char *err,
                  size_t err_len);
/* The same from a memory buffer (tests); `name` is used in messages. */
int rp_trace_parse(const char *name, const char *buf, size_t len, const struct rp_trace_opts *o,
                   struct rp_trace *t, char *err, size_t err_len);
/*
 * The window of `len` trace seconds (clamped to [first_create, end]) in
 * which the most pods are alive at some point: the busiest stretch of the
 * trace. Returns its start; ties keep the earliest.
 */
int64_t rp_trace_busiest(const struct rp_trace *t, int64_t len);
/* Pods alive at some point of [from, until]: the pods of that window. */
size_t rp_trace_window_pods(const struct rp_trace *t, int64_t from, int64_t until);
void rp_trace_free(struct rp_trace *t);
static inline const char *rp_pod_name(const struct rp_trace *t, const struct rp_pod *p)
{
    return t->strings + p->name;
}
/* Pod p alive at trace time tau: create <= tau and (tau < delete or delete >= end). */
static inline bool rp_pod_alive(const struct rp_trace *t, const struct rp_pod *p, int64_t tau)
{
    return p->create <= tau && (tau < p->delete_ || p->delete_ >= t->end);
}

/* Pod p alive at some trace time in [from, until] (rp_pod_alive at some tau). */
static inline bool rp_pod_alive_in(const struct rp_trace *t, const struct rp_pod *p, int64_t from,
                                   int64_t until)
{
    int64_t lo = p->create > from ? p->create : from;
    return lo <= until && (lo < p->delete_ || p->delete_ >= t->end);
}

/* ------------------------------------------------------------ model */

/* One class: the aggregation key of the pods that share it (a Need profile). */
struct rp_class {
    uint8_t qos;
    uint32_t spec;
    bool gpu;                    /* the pods request GPUs */
    struct bf_need_profile prof; /* canonical; arrays owned */
    char *fp;                    /* bf_profile_fingerprint */
    uint32_t n_fit;              /* catalog types its pods fit (pin list), 0 without catalog */
    uint32_t *fit;               /* indices in rp_model.types */
    bool pinned;                 /* carries node.kubernetes.io/instance-type In fit */
    uint32_t pods;               /* pods of the trace in this class */
    void *wire_reqs;             /* prebuilt NodeSelectorRequirement pointers (model.c) */
};

struct rp_model {
    const struct rp_trace *trace;
    const struct bf_sim_type *types; /* catalog, may be NULL */
    size_t n_types;
    bool pin; /* add the instance-type pin */
    struct rp_class *classes;
    size_t n_classes;
    size_t unfittable_pods; /* pods that fit no catalog type (sent unpinned) */
};

/*
 * Classifies every pod of t (sets pod.cls): builds the requirements from
 * gpu_spec / CPU-only / the fitting catalog types, the priority and the
 * penalty buckets from qos, canonicalises and fingerprints. types may be
 * NULL (no catalog: no pin). Returns 0 or -ENOMEM.
 */
int rp_model_build(struct rp_model *m, struct rp_trace *t, const struct bf_sim_type *types,
                   size_t n_types, bool pin);
void rp_model_free(struct rp_model *m);
/* True when a catalog type can host request r of a pod with GPU spec `spec`. */
bool rp_type_fits(const struct rp_trace *t, const struct bf_sim_type *ty, const rp_res *r,
                  uint32_t spec);

/* One aggregated Need of one rollup. */
struct rp_need {
    uint32_t cls;
    uint32_t pods;
    rp_res agg;      /* vector sum of the pods' requests */
    rp_res min_unit; /* per-dimension max of the pods' requests */
};

/*
 * Aggregates the pods listed in pods[0..n) into Needs ordered by class
 * index (one Need per class present). out must hold m->n_classes entries;
 * returns the number of Needs.
 */
size_t rp_aggregate(const struct rp_model *m, const uint32_t *pods, size_t n, struct rp_need *out);

/*
 * Encodes one OperatorMessage{rollup: ClusterCapacityNeeds} into a malloc'd
 * buffer (*buf, *len). Returns 0 or -ENOMEM.
 */
int rp_rollup_encode(const struct rp_model *m, const char *cluster_id, int64_t ts_unix_ns,
                     const struct rp_need *needs, size_t n, uint8_t **buf, size_t *len);

/* Kubernetes quantity strings of one dimension ("12", "500m", "30517Mi", "16Gi"). */
void rp_format_dim(int dim, int64_t v, char *buf, size_t n);

/* ------------------------------------------------------------ time */

/*
 * The replay clock. Trace time is a linear function of wall time:
 *   base(w) = from + (w - t0) * speed          (trace seconds)
 * Cluster i replays the trace shifted by i * offset: its trace time is
 * base(w) - i * offset; before `from` it has no pods (not started yet).
 * Rollups of cluster i are sent at w = t0 + phase_i + k * interval
 * (phase_i = i * interval / clusters), k = 0, 1, ...; rollup k samples
 * tau(i, k) = min(until, base(that w) - i * offset); the last k of a
 * cluster is the first whose tau reaches until.
 */
struct rp_clock {
    int64_t from, until; /* trace window, seconds */
    double speed;        /* trace seconds per wall second */
    int64_t interval_ns; /* wall time between two rollups of one cluster */
    int64_t offset;      /* trace seconds between two clusters' copies */
    uint32_t clusters;
};
int64_t rp_clock_phase_ns(const struct rp_clock *c, uint32_t i);
/* tau(i, k); may be below `from` (cluster not started). */
int64_t rp_clock_tau(const struct rp_clock *c, uint32_t i, int64_t k);
/* The last rollup index of cluster i (tau(i, k_last) == until). */
int64_t rp_clock_last_k(const struct rp_clock *c, uint32_t i);
/* Wall offset from t0 (ns) at which cluster i reaches trace time tau. */
int64_t rp_clock_wall_of(const struct rp_clock *c, uint32_t i, int64_t tau);

/*
 * Parses a trace time or span: plain seconds ("9400000", "12.5"), or a
 * duration with units s, m, h, d ("36h", "1.5d", "2d12h"). 0 or -EINVAL.
 */
int rp_parse_trace_seconds(const char *s, int64_t *out);

/* ------------------------------------------------------------ supply */

/* A machine shape learnt from NodeStateUpdate labels + resources. */
struct rp_shape {
    char *type;   /* node.kubernetes.io/instance-type ("" when absent) */
    rp_res alloc; /* resources of the update */
    uint32_t n_labels;
    char **keys, **values; /* labels minus the per-machine topology ones */
    double price;          /* catalog price of `type`, dollars per hour (0 unknown) */
    int32_t catalog;       /* index in the catalog, -1 unknown */
};

struct rp_shapes {
    struct rp_shape *v;
    size_t n, cap;
    /* class x shape requirement match cache: int8 (-1 unknown, 0, 1) */
    int8_t *match;
    size_t match_classes, match_shapes;
};

/*
 * Interns the shape of an update (labels as parallel arrays, resources as
 * milli values already converted to rp_res). Zone, rack and hostname labels
 * are not part of a shape. Returns the index, or -ENOMEM.
 */
int rp_shape_intern(struct rp_shapes *s, const struct rp_model *m, size_t n_labels,
                    const char *const *keys, const char *const *values, const rp_res *alloc);
void rp_shapes_free(struct rp_shapes *s);
/* Requirement match of a class against a shape (engine.md §1.10 MatchProfile). */
bool rp_class_matches_shape(struct rp_shapes *s, const struct rp_model *m, uint32_t cls,
                            uint32_t shape);
/* Eligible = MatchProfile and Covers(alloc, MinUnit). */
bool rp_need_eligible(struct rp_shapes *s, const struct rp_model *m, const struct rp_need *n,
                      uint32_t shape);

/* Supply of one cluster: machine counts per (tier, shape); tier 0 =
 * Configured, 1 = Configuring (credited after every Configured machine). */
struct rp_supply_ent {
    uint32_t shape;
    int32_t n;
    uint8_t tier;
};

/* Claim orders of rp_attribute. */
enum rp_order {
    /* the engine's credit pre-pass (engine.md §4.2): Needs by priority
     * (descending; ties keep the rollup order), machines Configured then
     * Configuring, each in keep-priority order (price ascending, then shape) */
    RP_ORDER_ENGINE = 0,
    /* most constrained first: Needs with the fewest eligible shapes first,
     * machines of the least contested shapes first */
    RP_ORDER_CONSTRAINED = 1,
    /* both, keeping the one that covers more (normalised over the Needs'
     * dimensions): what the bound machines can host, as far as two greedy
     * claim orders can tell */
    RP_ORDER_BEST = 2,
};

/*
 * Attributes supply to needs: each Need, in the order's sequence, claims
 * unclaimed eligible machines (MatchProfile + covers MinUnit) in the order's
 * machine sequence until its aggregate is covered; a machine goes to at
 * most one Need (engine.md §1.10: no packing math). residual[i] receives
 * what Need i still lacks (zero = covered); covered[i] (may be NULL) what it
 * received, capped at its aggregate. Returns 0 or -ENOMEM.
 */
int rp_attribute(struct rp_shapes *s, const struct rp_model *m, const struct rp_need *needs,
                 size_t n_needs, const struct rp_supply_ent *sup, size_t n_sup, int order,
                 rp_res *residual, rp_res *covered);
/* The same, and take (may be NULL; n_needs x max(n_sup, 1) entries) receives
 * the claim itself: take[i * n_sup + j] machines of supply entry j went to
 * Need i. */
int rp_attribute_take(struct rp_shapes *s, const struct rp_model *m, const struct rp_need *needs,
                      size_t n_needs, const struct rp_supply_ent *sup, size_t n_sup, int order,
                      rp_res *residual, rp_res *covered, int64_t *take_out);
/*
 * The largest share of the demand the supply can cover when machines may be
 * split across Needs (the LP relaxation of the claim problem): the sum over
 * every (Need, dimension with demand) of the covered fraction, in
 * [0, number of such pairs]. Only the Needs and shapes connected to shape
 * `focus` through eligibility are considered (focus < 0: all). Returns the
 * value, or -1 on allocation failure.
 */
double rp_max_coverage(struct rp_shapes *s, const struct rp_model *m, const struct rp_need *needs,
                       size_t n_needs, const struct rp_supply_ent *sup, size_t n_sup,
                       int32_t focus);
/*
 * Is a machine of shape `shape` still needed? sup is the supply WITHOUT the
 * machine. Yes iff (a) after attribution without it some Need eligible for
 * the shape lacks a dimension the shape provides, and (b) taking it away
 * lowers the fractional max coverage (rp_max_coverage): (a) mirrors the
 * engine, (b) makes the verdict sound (no "needed" verdict that a better
 * claim set would refute). Returns 1, 0 or -ENOMEM.
 */
int rp_machine_needed(struct rp_shapes *s, const struct rp_model *m, const struct rp_need *needs,
                      size_t n_needs, const struct rp_supply_ent *sup, size_t n_sup,
                      uint32_t shape);

/* ------------------------------------------------------------ lower bound */

/*
 * Dense simplex: maximize c.x subject to A x <= b, x >= 0, with b >= 0 (the
 * origin is feasible). A is rows x cols, row-major. Returns 0 with *opt and,
 * when x is not NULL, an optimal point in x[0..cols); 1 when unbounded,
 * -ENOMEM.
 */
int rp_simplex_max(size_t rows, size_t cols, const double *A, const double *b, const double *c,
                   double *opt, double *x);

/*
 * LP lower bound (dollars per hour) of covering `agg` with machines of the
 * catalog types listed (indices into types), fractional machines allowed:
 * min sum p_t x_t s.t. sum x_t alloc_t >= agg, x >= 0. Solved exactly on
 * the dual (3 variables) with the simplex method. Returns the bound, or
 * -1 when no mix of the types covers agg (a dimension nobody provides).
 */
double rp_lp_bound(const struct bf_sim_type *types, const uint32_t *idx, size_t n,
                   const rp_res *agg);
/* The same, and y (may be NULL) receives the dual solution: the marginal
 * price of each dimension in dollars per hour per core, per GiB and per
 * GPU, with y.alloc_t <= price_t for every type listed and y.agg = the
 * bound (strong duality). y is zero when the bound is -1 or 0. */
double rp_lp_bound_dual(const struct bf_sim_type *types, const uint32_t *idx, size_t n,
                        const rp_res *agg, double *y);
/* Catalog types eligible for a Need: class requirements matched against the
 * type's labels and Covers(type shape, MinUnit). Writes up to cap indices. */
size_t rp_need_types(const struct rp_model *m, const struct rp_need *n, uint32_t *out, size_t cap);

/* ------------------------------------------------------------ where the cost goes */

/*
 * The gap between what the bound machines cost and the lower bound, split
 * into parts that add up to it exactly (cost.c; docs/replay.md §5). With
 * y_n the dual prices of Need n's bound (rp_lp_bound_dual: y_n.agg_n =
 * LB_n, y_n.alloc_t <= price_t for every type eligible for n), every
 * machine credited to n costs y_n.alloc + (price - y_n.alloc), so
 *
 *   cost = draining + configuring + unclaimed
 *        + sum_n [ LB_n + y_n.(cap_n - agg_n)+ - y_n.(agg_n - cap_n)+ + premium_n ]
 *
 * where cap_n is the allocatable credited to n.
 */
enum rp_cost_part {
    RP_COST_IDLE_INSIDE = 0, /* y.(cap - agg)+: capacity bound to a Need but idle inside its
                              * machines (whole machines: MinUnit, no packing across Needs) */
    RP_COST_TYPE_PREMIUM,    /* price - y.alloc of credited machines first bound here: a dearer
                              * type than the Need's cheapest mix */
    RP_COST_IDLE_REUSE,      /* the same premium on machines bound before, re-used from Idle
                              * (Phase 1 takes Idle before Speculative) */
    RP_COST_UNCLAIMED,       /* Configured machines no Need of their cluster claims */
    RP_COST_CONFIGURING,     /* machines still being configured */
    RP_COST_DRAINING,        /* machines reclaimed or preempted and still draining */
    RP_COST_UNCOVERED,       /* -y.(agg - cap)+: demand not yet covered (negative) */
    RP_COST_PARTS
};
extern const char *const rp_cost_part_key[RP_COST_PARTS];   /* JSON keys */
extern const char *const rp_cost_part_label[RP_COST_PARTS]; /* report text, plot legend */

struct rp_cost_split {
    double cost;                 /* $/h: configured + configuring + draining machines */
    double lower_bound;          /* $/h: sum of the Needs' LP bounds */
    double part[RP_COST_PARTS];  /* $/h; sums to cost - lower_bound */
    uint64_t needs_without_type; /* Needs no catalog type can host (bound 0) */
};

/*
 * Adds one cluster's split to *acc. sup: its Configured machines that are
 * not draining, per shape (tier ignored); reused[j] (may be NULL) how many
 * of sup[j] were bound before; configuring / draining: the $/h of its
 * machines in those phases. Needs a catalog (m->n_types > 0). 0 or -ENOMEM.
 */
int rp_cost_split_add(struct rp_shapes *s, const struct rp_model *m, const struct rp_need *needs,
                      size_t n_needs, const struct rp_supply_ent *sup, size_t n_sup,
                      const int32_t *reused, double configuring, double draining,
                      struct rp_cost_split *acc);
/* Sum of the parts (= cost - lower_bound up to rounding). */
double rp_cost_split_gap(const struct rp_cost_split *c);

/* ------------------------------------------------------------ statistics */

/* Percentile (0..100) of a sorted array by nearest rank; 0 for n == 0. */
int64_t rp_percentile(const int64_t *sorted, size_t n, double pct);

/* ------------------------------------------------------------ /metrics */

struct rp_prom_sample {
    char *name;
    char *labels; /* the text between { } or "" */
    double value;
};
struct rp_prom {
    struct rp_prom_sample *v;
    size_t n, cap;
};
/* Parses Prometheus text exposition (comments skipped). 0, -EINVAL (line), -ENOMEM. */
int rp_prom_parse(const char *text, size_t len, struct rp_prom *out);
void rp_prom_free(struct rp_prom *p);
/* Sum of the samples called `name` whose labels contain every "k=\"v\"" in
 * `match` (comma separated; NULL or "" = all); NaN when there is none (the
 * shard does not export it). */
double rp_prom_sum(const struct rp_prom *p, const char *name, const char *match);
/* Value of label `key` in a labels string, into buf; false when absent. */
bool rp_prom_label(const char *labels, const char *key, char *buf, size_t n);
/* A quantile estimated from the cumulative histogram `name`_bucket (le
 * labels), linear within a bucket; NaN when empty. */
double rp_prom_hist_quantile(const struct rp_prom *p, const char *name, double q);
/* GET http://addr/path (blocking, timeout); body malloc'd. 0 or -errno; *status HTTP code. */
int rp_http_get(const char *addr, const char *path, int64_t timeout_ns, int *status, char **body,
                size_t *len);

#endif /* BIGFLEET_REPLAY_H */
