/*
 * bigfleet/simprovider.h — the core of bigfleet-simprovider: a simulated
 * CapacityProvider (the six RPCs of bigfleet.v1alpha1.CapacityProvider) as a
 * pure, network-free, deterministic library.
 *
 * The contract implemented is the providers' own (reference/ecosystem.md
 * §2.2, shard.md §3, wire.md §4, §10, §11):
 *
 *   - Create/Configure/Drain/Delete are asynchronous: a TransitionAck is
 *     returned at once (machine in the transitional state, or already in the
 *     stable target when the transition latency is zero, the default).
 *   - Check order of every mutating RPC, exactly:
 *       0. injected transport error (knob rpc_error, off by default) -> UNAVAILABLE;
 *       1. empty machine_id -> INVALID_ARGUMENT; other argument shape errors
 *          (empty cluster_id, over-long ids, metadata over the cap, malformed
 *          protobuf) -> INVALID_ARGUMENT; nothing is touched;
 *       2. fence: the all-zero token (shard_id "", epoch 0, seq 0) bypasses;
 *          otherwise the high-water mark of (shard_id, machine_id) — kept even
 *          for ids that do not exist — must be strictly older than (epoch, seq)
 *          compared lexicographically, else FAILED_PRECONDITION and the mark is
 *          untouched. A passing token advances the mark even if the operation
 *          then fails;
 *       3. unknown machine -> NOT_FOUND;
 *       4. Delete of a BARE_METAL machine -> UNIMPLEMENTED (knob
 *          bare_metal_delete_unimplemented, default on: shard.md §3.1);
 *       5. idempotency keyed (machine_id, kind): when an operation of that
 *          kind exists and the machine is in the kind's transitional or stable
 *          target state, the same operation_id and the current snapshot are
 *          returned and nothing else happens;
 *       6. position: Create@Speculative, Configure@Idle, Drain@Configured,
 *          Delete@Idle, else INTERNAL "invalid state transition ..." (never
 *          FAILED_PRECONDITION, which is reserved for fencing; FAILED accepts
 *          no transition);
 *       7. accept: mint "op-<n>", enter the transitional state; Configure sets
 *          cluster and a verbatim copy of shard_metadata at accept time; the
 *          revision advances; the completion is scheduled.
 *   - Completion (only if the machine is still in that transitional state
 *     under that operation; a late completion is discarded): Create -> Idle,
 *     host {provider, ref} and allocatable set; Configure -> Configured;
 *     Drain -> Idle, cluster AND shard_metadata cleared; Delete -> Speculative,
 *     host and allocatable cleared. A failed completion -> FAILED with
 *     last_error (host/cluster/metadata kept as evidence).
 *   - Get/List carry no token and are never fenced. List: state filter
 *     (union), max_results (0 = no cap), revision = decimal int64 as bytes,
 *     since_revision parsed as a Go ParseInt would (anything else, a cursor
 *     from the future, zero or negative -> full list); a delta holds every
 *     machine mutated after the cursor, once, in its current state, in
 *     revision order. When max_results truncates, the revision returned is
 *     that of the last machine returned, so threading it back as the next
 *     since_revision pages the set with no gap and no duplicate. A delta of k
 *     changes costs O(k), never O(pool).
 *   - shard_metadata is stored and echoed byte for byte (embedded NUL, also in
 *     keys, control bytes, unicode, empty values) on Get, List and
 *     TransitionAck, and cleared together with cluster when a Drain completes.
 *     Duplicate keys on the wire: the last one wins (proto map semantics);
 *     the echo lists keys in bytewise order.
 *
 * Time. The core never sleeps, reads no clock and starts no thread. Every
 * call takes now_ns (any monotonic nanosecond clock, the same one for every
 * call). Completions sit on an internal timer queue; each public call first
 * advances the simulation to its now_ns, and bf_sim_advance() does so
 * without an RPC. A server arms one timer at bf_sim_next_deadline() and calls
 * bf_sim_advance() when it fires. Latencies, failures and spot interruptions
 * are drawn from one seeded PRNG, so a run is reproducible from the config
 * and the sequence of calls.
 *
 * Wrapping it in a gRPC server (one event-loop thread owns the struct bf_sim):
 *
 *     int rpc = bf_sim_rpc_from_path(path, path_len);     // -1: UNIMPLEMENTED
 *     struct bf_sim_reply r = {0};
 *     bf_sim_handle(sim, rpc, msg, msg_len, now_ns, &r);  // msg: request bytes
 *     // after r.delay_ns (0 = at once): send r.body/r.len as the response
 *     // message when r.code == 0, else grpc-status r.code + r.message.
 *     bf_sim_reply_free(&r);
 *     // and: arm a timer at bf_sim_next_deadline(sim); on expiry call
 *     // bf_sim_advance(sim, now_ns).
 *
 * bf_sim_handle decodes the request bytes itself (byte-exact: a NUL inside a
 * shard_metadata key survives, which protobuf-c's char * cannot carry) and the
 * reply body is the serialized TransitionAck / Machine / MachineList,
 * byte-identical to what protobuf-c would pack for the same message.
 *
 * Thread rules: a struct bf_sim is not thread-safe; one thread uses it at a
 * time. Distinct instances are independent. With a state path the LMDB
 * environment must be opened in the process that uses it (check's fork mode:
 * open inside the test). Strings passed in are borrowed for the call.
 *
 * Units: prices in dollars per hour; CPU in milli-CPU; memory in MiB; times in
 * nanoseconds (fields named _ns) unless a name says otherwise; probabilities
 * in [0, 1]; rates per second.
 *
 * The catalog mapping of the openb node list and the price formula are
 * documented in docs/simprovider.md.
 */
#ifndef BIGFLEET_SIMPROVIDER_H
#define BIGFLEET_SIMPROVIDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bigfleet/v1alpha1/provider.pb-c.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ RPCs */

/* The six RPCs. The first four are the lifecycle "kinds". */
enum bf_sim_rpc {
    BF_SIM_RPC_CREATE = 0,
    BF_SIM_RPC_CONFIGURE = 1,
    BF_SIM_RPC_DRAIN = 2,
    BF_SIM_RPC_DELETE = 3,
    BF_SIM_RPC_GET = 4,
    BF_SIM_RPC_LIST = 5,
    BF_SIM_RPC_COUNT = 6
};
#define BF_SIM_KIND_COUNT 4

/* "Create", "Configure", "Drain", "Delete", "Get", "List"; "?" otherwise. */
const char *bf_sim_rpc_name(int rpc);
/*
 * Maps a gRPC :path ("/bigfleet.v1alpha1.CapacityProvider/Create", ...) to
 * enum bf_sim_rpc; -1 for any other path (answer UNIMPLEMENTED). `len` bytes
 * of path are read (need not be NUL-terminated).
 */
int bf_sim_rpc_from_path(const char *path, size_t len);

/* Status codes of a reply; the values are the gRPC status codes. */
enum bf_sim_code {
    BF_SIM_OK = 0,
    BF_SIM_INVALID_ARGUMENT = 3,
    BF_SIM_NOT_FOUND = 5,
    BF_SIM_FAILED_PRECONDITION = 9, /* fencing only */
    BF_SIM_UNIMPLEMENTED = 12,
    BF_SIM_INTERNAL = 13,
    BF_SIM_UNAVAILABLE = 14 /* injected transport-style failure (knob rpc_error) */
};

/* ------------------------------------------------------------ configuration */

/* A latency distribution. Samples are clamped to >= 0. */
enum bf_sim_dist_kind {
    BF_SIM_DIST_FIXED = 0,   /* always a_ns */
    BF_SIM_DIST_UNIFORM = 1, /* uniform in [a_ns, b_ns] */
    BF_SIM_DIST_NORMAL = 2   /* normal, mean a_ns, standard deviation b_ns */
};
struct bf_sim_dist {
    uint8_t kind; /* enum bf_sim_dist_kind */
    int64_t a_ns;
    int64_t b_ns;
};
/*
 * Parses "<duration>" (fixed), "fixed(<d>)", "uniform(<d>,<d>)" or
 * "normal(<mean>,<sd>)", durations in Go syntax ("0", "250ms", "1.5s").
 * Returns 0 or -EINVAL (syntax, negative value, uniform with a > b).
 */
int bf_sim_dist_parse(const char *s, struct bf_sim_dist *out);

#define BF_SIM_NAME_MAX  64 /* instance type names, zone names: < 64 bytes */
#define BF_SIM_MODEL_MAX 32 /* GPU model names: < 32 bytes */

/* Well-known label keys on every machine (besides topology.kubernetes.io/zone
 * and node.kubernetes.io/instance-type, model.h). */
#define BF_SIM_LABEL_RACK      "topology.bigfleet/rack"
#define BF_SIM_LABEL_GPU_MODEL "nvidia.com/gpu.product" /* GPU types only */
#define BF_SIM_LABEL_GPU_COUNT "nvidia.com/gpu.count"   /* GPU types only */
/* The GPU resource name in resources/allocatable. */
#define BF_SIM_RESOURCE_GPU "nvidia.com/gpu"

/* One instance type of the catalog. */
struct bf_sim_type {
    char name[BF_SIM_NAME_MAX];       /* e.g. "openb-96c-384g-8xg2" */
    int64_t cpu_milli;                /* > 0 */
    int64_t memory_mib;               /* > 0 */
    int32_t gpus;                     /* >= 0 */
    char gpu_model[BF_SIM_MODEL_MAX]; /* "" iff gpus == 0 */
    uint8_t capacity_type;            /* enum bf_capacity_type (model.h), not UNSPECIFIED */
    double price_per_hour;            /* dollars per hour, finite, >= 0 */
    double interruption_probability;  /* [0, 1]; > 0 for SPOT */
    uint32_t trace_nodes;             /* nodes of this shape in the source CSV (0 if none) */
};

/*
 * The documented list price (docs/simprovider.md), dollars per hour:
 *   0.033 x vCPU + 0.00375 x GiB + gpus x per-GPU price of the model
 * (T4 0.35, P100 1.46, V100M16 2.48, V100M32 2.98, A10 1.20, G1 1.00, G2 2.00,
 * G3 3.00, any other model 2.00), rounded to 1/10000 dollar.
 */
double bf_sim_list_price(int64_t cpu_milli, int64_t memory_mib, int32_t gpus,
                         const char *gpu_model);

/*
 * Loads a catalog file into a malloc'd array (*types, *n; caller frees with
 * free()). Two CSV forms, told apart by the header line:
 *   - the openb node list "sn,cpu_milli,memory_mib,gpu,model": one instance
 *     type per distinct (cpu_milli, memory_mib, gpu, model) shape, named
 *     "openb-<vcpu>c-<GiB>g[-<gpus>x<model>]" (lower case), priced by
 *     bf_sim_list_price(); shapes with 8 or more GPUs are BARE_METAL at 0.6 x
 *     list price, the rest ON_DEMAND at list price; interruption probability
 *     0; trace_nodes counts the nodes of each shape; sorted by (gpus, model,
 *     cpu, memory);
 *   - an explicit catalog "type,cpu_milli,memory_mib,gpu,model,capacity_type,
 *     price_per_hour,interruption_probability" (capacity_type: bare-metal,
 *     reserved, on-demand or spot, case-insensitive; '-'/'_' optional), kept
 *     in file order.
 * With spot_variants, every ON_DEMAND type gets a "<name>-spot" twin:
 * SPOT, price 0.35 x, interruption probability 0.10 with GPUs, 0.05 without.
 * Validation (ecosystem.md §2.2 seeding rules): positive CPU and memory,
 * unique names, price finite >= 0, probability in [0,1], SPOT > 0.
 * Returns 0, -ENOENT/-EIO (file), -EINVAL (format; err says which line),
 * -ENOMEM. err (may be NULL) receives a message.
 */
int bf_sim_catalog_load(const char *path, bool spot_variants, struct bf_sim_type **types, size_t *n,
                        char *err, size_t err_len);
/*
 * The built-in catalog used when neither types nor a catalog path is
 * configured: the five shapes of the Go fake's legacy seeding
 * (m6i.large, r6i.xlarge, c6i.4xlarge, n2-standard-32, a3-highgpu-8g), all
 * ON_DEMAND at their public list prices. Returns a static array.
 */
const struct bf_sim_type *bf_sim_catalog_builtin(size_t *n);

/*
 * Everything a main() fills from flags. Initialise with bf_sim_config_init()
 * (the defaults below), then set fields or call bf_sim_config_set(). Strings
 * are borrowed: they must outlive bf_sim_open().
 */
struct bf_sim_config {
    /* identity */
    const char *provider_name; /* HostRef.provider; default "bigfleet-sim" */

    /* catalog: types[] if n_types > 0, else catalog_path, else the built-in */
    const struct bf_sim_type *types;
    size_t n_types;
    const char *catalog_path; /* openb node list or explicit catalog CSV */
    bool spot_variants;       /* add "<name>-spot" twins of ON_DEMAND types */

    /* topology */
    uint32_t zones;          /* default 3; zone names "zone-a", "zone-b", ... */
    const char *zone_names;  /* optional comma-separated names (overrides zones) */
    uint32_t racks_per_zone; /* default 10; rack "<zone>-rack-<r>" */

    /*
     * Seeding, per instance type, used only when the state is empty (no
     * state path, or a state path holding no machines). Slot j of a type goes
     * to zone j mod Z, rack (j / Z) mod R, id "<type>-<zone>-<j / Z>"; the
     * first seed_configured slots are Configured, the next seed_idle Idle,
     * the rest Speculative.
     */
    uint32_t seed_speculative;          /* default 16 */
    uint32_t seed_speculative_per_node; /* + this many per trace node of the shape */
    uint32_t seed_idle;                 /* default 0 */
    uint32_t seed_configured;           /* default 0 */
    uint32_t seed_clusters;             /* Configured bound round-robin to N clusters; default 1 */
    const char *cluster_prefix;         /* cluster names "<prefix><c>"; default "cluster-" */
    int32_t seed_priority;              /* encoded shard_metadata: default 1000000 */
    double seed_interruption_penalty;   /* dollars; default 8192 */
    double seed_reclamation_penalty;    /* dollars; default 65536 */

    /* behaviour */
    struct bf_sim_dist transition_latency[BF_SIM_KIND_COUNT]; /* accept -> completion; default 0 */
    double transition_failure[BF_SIM_KIND_COUNT]; /* P(completion -> FAILED); default 0 */
    bool defer_instant; /* zero latency completes at the next advance, not inside the RPC */
    struct bf_sim_dist reply_latency[BF_SIM_RPC_COUNT]; /* reply hold (bf_sim_reply.delay_ns) */
    double rpc_error[BF_SIM_RPC_COUNT];                 /* P(UNAVAILABLE, no effect); default 0 */
    uint32_t max_hosts;            /* Create exhaustion: cap on host-holding machines, 0 = none */
    uint32_t max_hosts_per_type;   /* same, per instance type, 0 = none */
    double spot_interruption_rate; /* per SPOT Idle/Configured machine per second; default 0 */
    int64_t spot_tick_ns;          /* bf_sim_next_deadline() granularity for spot; default 1 s */
    bool bare_metal_delete_unimplemented; /* default true */
    size_t max_metadata_bytes;            /* Σ key+value bytes per Configure; default 16 MiB */

    /* persistence */
    const char *state_path; /* LMDB environment directory (created); NULL = memory only */
    bool state_fsync;       /* fsync every commit; default false (survives a process kill) */
    size_t state_map_size;  /* LMDB map size in bytes; default 64 GiB (sparse) */

    uint64_t rng_seed; /* default 1 */
};

/* Fills the defaults documented above. */
void bf_sim_config_init(struct bf_sim_config *cfg);
/*
 * Sets one option by its flag name (without "--") from a string, for a
 * getopt_long main: provider, catalog, spot-variants, zones, zone-names,
 * racks-per-zone, seed-speculative, seed-speculative-per-node, seed-idle,
 * seed-configured, seed-clusters, cluster-prefix, seed-priority,
 * {create,configure,drain,delete}-latency (distribution),
 * {create,configure,drain,delete}-failure (probability), defer-instant,
 * {create,configure,drain,delete,get,list}-reply-latency (distribution),
 * {create,configure,drain,delete,get,list}-error (probability), max-hosts,
 * max-hosts-per-type, spot-interruption-rate, spot-tick (duration),
 * bare-metal-delete (bool: "unimplemented" or "allowed"), max-metadata-bytes,
 * state, state-fsync, state-map-size, rng-seed. Booleans accept
 * true/false/1/0/yes/no. `value` is borrowed for string options. Returns 0,
 * -ENOENT (unknown name) or -EINVAL (bad value); err (may be NULL) says why.
 */
int bf_sim_config_set(struct bf_sim_config *cfg, const char *name, const char *value, char *err,
                      size_t err_len);
/* One line per option of bf_sim_config_set(), for --help. Static string. */
const char *bf_sim_config_help(void);

/* ------------------------------------------------------------ lifecycle */

struct bf_sim;

/*
 * Builds the catalog, then either loads the pool from cfg->state_path (when it
 * holds machines: every machine found in a transitional state becomes FAILED
 * with last_error "<kind> transition interrupted by a provider restart; needs
 * re-drive"; fences, operation ids and the op counter persist; the revision
 * moves past every pre-restart cursor, so old cursors get a full list) or
 * seeds it from the config (and writes it through when a state path is set).
 * Returns 0 and *out, or -EINVAL (config, catalog, or a stored state that
 * does not match the catalog; err says why), -ENOENT (catalog file), -ENOMEM,
 * -ENOSPC (LMDB map full), a negative system errno from LMDB (e.g. -EACCES),
 * or -EIO (other LMDB failures). err (may be NULL) receives a message.
 */
int bf_sim_open(const struct bf_sim_config *cfg, struct bf_sim **out, char *err, size_t err_len);
/* Flushes pending state and frees everything. NULL is a no-op. */
void bf_sim_close(struct bf_sim *sim);

/* ------------------------------------------------------------ replies */

/*
 * The result of one RPC. Zero-initialise before first use; the body buffer is
 * reused across calls with the same reply and released by bf_sim_reply_free().
 * The caller may take ownership of body (then set body = NULL, cap = 0).
 */
struct bf_sim_reply {
    int code;          /* enum bf_sim_code */
    char message[256]; /* status message when code != 0 ("" when OK) */
    uint8_t *body;     /* serialized response message when code == 0 */
    size_t len;        /* bytes in body (0 is a valid empty message) */
    size_t cap;
    int64_t delay_ns; /* hold the reply this long before sending (reply_latency) */
};
void bf_sim_reply_free(struct bf_sim_reply *r);

/* ------------------------------------------------------------ RPC entry points */

/*
 * The gRPC entry point: decodes `len` bytes of the request message of `rpc`
 * (enum bf_sim_rpc), runs it at now_ns and fills *r. Malformed protobuf ->
 * INVALID_ARGUMENT. An rpc outside the enum -> UNIMPLEMENTED.
 */
void bf_sim_handle(struct bf_sim *sim, int rpc, const uint8_t *req, size_t len, int64_t now_ns,
                   struct bf_sim_reply *r);

/* A byte string (need not be NUL-terminated; p may be NULL when len == 0). */
struct bf_sim_bytes {
    const uint8_t *p;
    size_t len;
};
struct bf_sim_md_entry {
    struct bf_sim_bytes key, value;
};

/* A decoded lifecycle request (plain arguments, byte-exact). */
struct bf_sim_request {
    int kind; /* BF_SIM_RPC_CREATE .. BF_SIM_RPC_DELETE */
    struct bf_sim_bytes machine_id;
    struct bf_sim_bytes shard_id;
    int64_t shard_epoch;
    int64_t sequence_number;
    struct bf_sim_bytes cluster_id; /* Configure only */
    size_t bootstrap_blob_len;      /* Configure only: accepted, not retained */
    size_t n_metadata;              /* Configure only */
    const struct bf_sim_md_entry *metadata;
    int64_t grace_period_seconds; /* Drain only: accepted (negative = 0), not simulated */
};
/* A lifecycle RPC; the reply body is a TransitionAck. */
void bf_sim_transition(struct bf_sim *sim, const struct bf_sim_request *req, int64_t now_ns,
                       struct bf_sim_reply *r);
/* Get; the reply body is a Machine. Empty id -> INVALID_ARGUMENT, unknown -> NOT_FOUND. */
void bf_sim_get(struct bf_sim *sim, struct bf_sim_bytes id, int64_t now_ns, struct bf_sim_reply *r);

struct bf_sim_list_args {
    uint32_t state_mask; /* bit s set = include state s (1..8); 0 = every state */
    int32_t max_results; /* 0 = no cap; < 0 -> INVALID_ARGUMENT */
    struct bf_sim_bytes since_revision;
    bool bad_state; /* a states[] value outside 1..8 -> INVALID_ARGUMENT */
};
/* List; the reply body is a MachineList. */
void bf_sim_list(struct bf_sim *sim, const struct bf_sim_list_args *a, int64_t now_ns,
                 struct bf_sim_reply *r);

/*
 * The same operations from protobuf-c request structs (e.g. unpacked by the
 * caller). protobuf-c strings are NUL-terminated, so a NUL inside a string
 * field (including a shard_metadata key) is cut there; bf_sim_handle() has no
 * such limit.
 */
void bf_sim_create_pb(struct bf_sim *sim, const Bigfleet__V1alpha1__CreateRequest *q,
                      int64_t now_ns, struct bf_sim_reply *r);
void bf_sim_configure_pb(struct bf_sim *sim, const Bigfleet__V1alpha1__ConfigureRequest *q,
                         int64_t now_ns, struct bf_sim_reply *r);
void bf_sim_drain_pb(struct bf_sim *sim, const Bigfleet__V1alpha1__DrainRequest *q, int64_t now_ns,
                     struct bf_sim_reply *r);
void bf_sim_delete_pb(struct bf_sim *sim, const Bigfleet__V1alpha1__DeleteRequest *q,
                      int64_t now_ns, struct bf_sim_reply *r);
void bf_sim_get_pb(struct bf_sim *sim, const Bigfleet__V1alpha1__MachineRef *q, int64_t now_ns,
                   struct bf_sim_reply *r);
void bf_sim_list_pb(struct bf_sim *sim, const Bigfleet__V1alpha1__ListFilter *q, int64_t now_ns,
                    struct bf_sim_reply *r);

/* ------------------------------------------------------------ time */

/*
 * Advances the simulation to now_ns: performs every scheduled completion due
 * at or before now_ns (in due order, ties in scheduling order), then spot
 * interruptions for the time elapsed since the previous advance (k ~
 * Poisson(rate x eligible x seconds), k machines drawn uniformly among the
 * SPOT machines in Idle or Configured -> FAILED, last_error "spot
 * interruption: instance reclaimed by the provider"), then persists. A now_ns
 * earlier than a previous one is treated as no time passing. Returns the
 * number of machines changed, or -EIO when persisting failed (the state in
 * memory is kept and written by the next successful flush).
 */
int bf_sim_advance(struct bf_sim *sim, int64_t now_ns);
/*
 * When bf_sim_advance() next has something to do: the earliest scheduled
 * completion, and with spot interruptions on and eligible machines present,
 * the previous advance + spot_tick_ns. INT64_MAX when nothing is pending.
 */
int64_t bf_sim_next_deadline(const struct bf_sim *sim);

/* ------------------------------------------------------------ fault injection */

/*
 * Forces a machine to FAILED with last_error = reason (the Go fake's
 * FailMachine): any state, idempotent on an already FAILED machine (the first
 * reason is kept). Returns 0, -ENOENT (unknown id), -EINVAL (empty reason),
 * or -EIO (persisting failed).
 */
int bf_sim_fail_machine(struct bf_sim *sim, const char *id, const char *reason, int64_t now_ns);

/* ------------------------------------------------------------ introspection */

/* A read-only view of one machine; pointers valid until the next call on sim. */
struct bf_sim_view {
    const char *id;
    int state; /* enum bf_state */
    const struct bf_sim_type *type;
    const char *zone;
    const char *rack;
    bool has_host;
    const uint8_t *cluster; /* NULL when unbound */
    size_t cluster_len;
    const char *last_error; /* NULL when none */
    size_t n_metadata;
    int64_t mod_revision;           /* revision of its last mutation */
    uint64_t op[BF_SIM_KIND_COUNT]; /* operation numbers per kind, 0 = none */
};
/* 0 and *v, or -ENOENT. */
int bf_sim_lookup(struct bf_sim *sim, const char *id, struct bf_sim_view *v);
/* Machines in the pool; they are indexed 0..count-1 (stable for the life of sim). */
size_t bf_sim_machine_count(const struct bf_sim *sim);
/* Id of machine i (NUL-terminated), NULL when out of range. */
const char *bf_sim_machine_id(const struct bf_sim *sim, size_t i);
/* Machines currently in a state (enum bf_state). */
size_t bf_sim_count_in_state(const struct bf_sim *sim, int state);
/* Current revision (the value a full List reports). */
int64_t bf_sim_revision(const struct bf_sim *sim);
/* The catalog in use (borrowed, valid until bf_sim_close). */
const struct bf_sim_type *bf_sim_types(const struct bf_sim *sim, size_t *n);
/* Host-holding machines (the exhaustion counter), overall. */
uint32_t bf_sim_hosts_in_use(const struct bf_sim *sim);

struct bf_sim_stats {
    uint64_t calls[BF_SIM_RPC_COUNT];       /* RPCs received */
    uint64_t accepted[BF_SIM_KIND_COUNT];   /* new operations minted */
    uint64_t idempotent[BF_SIM_KIND_COUNT]; /* replays answered with an existing op */
    uint64_t completed[BF_SIM_KIND_COUNT];  /* transitions that reached their target */
    uint64_t failed[BF_SIM_KIND_COUNT];     /* transitions that ended FAILED */
    uint64_t discarded;                     /* late completions dropped */
    uint64_t fenced;                        /* FAILED_PRECONDITION replies */
    uint64_t exhausted;                     /* Creates doomed by a host cap */
    uint64_t spot_interruptions;
    uint64_t injected_errors; /* UNAVAILABLE replies */
    uint64_t flushes;         /* LMDB commits */
    uint64_t flush_errors;
};
void bf_sim_get_stats(const struct bf_sim *sim, struct bf_sim_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* BIGFLEET_SIMPROVIDER_H */
