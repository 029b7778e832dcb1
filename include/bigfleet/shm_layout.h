/*
 * bigfleet/shm_layout.h — the shared-memory ABI of the BigFleet shard
 * appliance. Inspection tools compile against this header: it is the
 * contract between the appliance's processes and anything that attaches to
 * its segments.
 *
 * Four POSIX shared-memory segments per shard, under /dev/shm, created by the
 * supervisor before it forks the children (ARCHITECTURE.md §3):
 *
 *   bigfleet.<shard-id>.inventory  machine records, string table, id index,
 *                                  change logs, in-flight (pending) markers
 *   bigfleet.<shard-id>.needs      cluster table, need-row arena,
 *                                  provisioning-latency stamps
 *   bigfleet.<shard-id>.rings      SPSC rings between the processes
 *   bigfleet.<shard-id>.state      process table, per-process stats, cycle
 *                                  results (verdict and shortfall ledgers,
 *                                  inventory counts), appliance flags
 *
 * Every segment starts with struct bf_seg_header (magic, layout version,
 * kind, size, capacities, creation time, supervisor pid, shard epoch). An
 * attacher validates magic, version, kind and size before reading anything
 * (bf_shm_attach does this and names both versions on a mismatch).
 *
 * RULES (ARCHITECTURE.md §3):
 *  1. Every shared field has exactly one writer process, named in its
 *     comment as [W: role]. Machine records are the one exception: reconciler
 *     and executor (and the supervisor while repairing) write them, guarded
 *     by a per-record seqlock whose writer side is taken by compare-and-swap
 *     (even -> odd) and which stores the writer's pid.
 *  2. No pointers: offsets and indices only. Strings live in the string table
 *     and are referenced by a uint32 "ref" (0 = the empty string).
 *  3. Only 4- and 8-byte lock-free atomics are used in shared memory.
 *  4. Readers never block writers; every cross-process wait is bounded.
 *
 * Memory-ordering recipes live in src/shm/ (shm_internal.h, ring.c, result.c); this header
 * only fixes the layout. All offsets are from the start of the segment.
 */
#ifndef BIGFLEET_SHM_LAYOUT_H
#define BIGFLEET_SHM_LAYOUT_H

#include <stdatomic.h>
#include <stdint.h>

#include "bigfleet/model.h"

#define BF_SHM_MAGIC          0x3148534c46474942ULL /* "BIGFLSH1" little-endian */
#define BF_SHM_LAYOUT_VERSION 6u
#define BF_CACHELINE          64

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "need lock-free 64-bit atomics in shared memory");
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "need lock-free 32-bit atomics in shared memory");

enum bf_seg_kind {
    BF_SEG_INVENTORY = 1,
    BF_SEG_NEEDS = 2,
    BF_SEG_RINGS = 3,
    BF_SEG_STATE = 4,
    BF_SEG_KIND_COUNT = 5
};

/* Process roles. Role ids index the process table and the wake-up fds. */
enum bf_role {
    BF_ROLE_SUPERVISOR = 0,
    BF_ROLE_SESSION = 1,
    BF_ROLE_RECONCILER = 2,
    BF_ROLE_CYCLE = 3,
    BF_ROLE_EXECUTOR = 4,
    BF_ROLE_SIMPROVIDER = 5,
    BF_ROLE_COUNT = 6
};

/* ------------------------------------------------------------------ header */

#define BF_SHARD_ID_MAX   64 /* including NUL */
#define BF_SEG_MAX_TABLES 16

/* Common header of every segment (512 bytes). [W: supervisor, at creation;
 * immutable afterwards except `ready`]. */
struct bf_seg_header {
    uint64_t magic;          /* BF_SHM_MAGIC */
    uint32_t layout_version; /* BF_SHM_LAYOUT_VERSION */
    uint32_t kind;           /* enum bf_seg_kind */
    uint64_t size;           /* bytes every process maps; the inventory's includes its
                                string arena's reserve, of which the file backs only
                                strtab.arena_committed (the file grows with the arena) */
    int64_t created_unix_ns; /* creation wall time */
    int64_t epoch;           /* shard epoch (LMDB, +1 per supervisor start) */
    uint32_t supervisor_pid;
    uint32_t generation; /* full re-initialisations since first start */
    char shard_id[BF_SHARD_ID_MAX];
    uint32_t max_machines; /* capacities (flags --max-machines etc.) */
    uint32_t max_needs;
    uint32_t max_clusters;
    uint32_t index_capacity;               /* id-index and string-hash slots (power of two) */
    uint64_t strings_arena_bytes;          /* the arena's reserve: the most it may grow to */
    uint32_t changelog_capacity;           /* entries per change log (power of two) */
    uint32_t stamp_capacity;               /* provisioning-latency stamp slots (power of two) */
    uint64_t table_off[BF_SEG_MAX_TABLES]; /* offsets of the segment's tables */
    uint64_t table_len[BF_SEG_MAX_TABLES]; /* their sizes in bytes */
    _Atomic uint32_t ready;                /* 1 once initialised (release) */
    uint32_t pad0;
    /* A segment whose last table grows with use (bf_shm_grow; not the
     * inventory, whose string arena keeps its own count): the bytes of that
     * table the file backs, stored (release) only after the file has grown
     * that far. `size` maps the table's whole reserve. [W: the table's one
     * writer] */
    _Atomic uint64_t grown;
    uint8_t pad[96];
};
_Static_assert(sizeof(struct bf_seg_header) == 512, "segment header layout changed");

/* ================================================================ inventory */

/* Table slots in the inventory header's table_off[]. */
enum bf_inv_table {
    BF_INV_T_META = 0,      /* struct bf_inv_meta */
    BF_INV_T_STRHASH = 1,   /* _Atomic uint32_t[index_capacity]: string refs */
    BF_INV_T_ARENA = 2,     /* string arena: the last table, grown in place (strtab) */
    BF_INV_T_RECORDS = 3,   /* struct bf_shm_machine[max_machines] */
    BF_INV_T_IDINDEX = 4,   /* _Atomic uint32_t[index_capacity]: slot+1, 0 empty */
    BF_INV_T_CHANGELOG = 5, /* struct bf_changelog[BF_CHANGELOG_WRITERS] (+ entries) */
    BF_INV_T_PENDING = 6    /* struct bf_pending arrays */
};

/* The string table (arena + hash). Entries are appended, deduplicated, never
 * freed while the segments live; a ref is the entry's byte offset / 8.
 * The arena is the inventory segment's last table: every process maps its
 * whole reserve (strings_arena_bytes, address space only), and the writer
 * that needs room extends the segment file under the lock (ftruncate) before
 * it writes, so the file -- what tmpfs can hold -- is the arena in use plus
 * one growth step (arena_committed), not a reservation. A ref is published
 * only after its bytes are written, so no reader touches unbacked pages.
 * Entry layout at offset 8*ref: uint32 len, uint32 hash, len bytes, NUL,
 * padding to 8. Ref 0 is the empty string. Bytes may contain NUL (groups).
 * Writers serialise on `lock` (owner pid, CAS 0 -> pid; a dead owner is
 * stolen after kill(pid, 0) reports ESRCH); the entry is written before its
 * ref is published in the hash (release), so readers never see a partial
 * entry. [W: any process holding the lock] */
struct bf_strtab_meta {
    _Atomic uint32_t lock_owner; /* pid holding the intern lock, 0 = free */
    uint32_t pad0;
    _Atomic uint64_t arena_used;      /* bytes used (multiple of 8) */
    _Atomic uint64_t entries;         /* published entries */
    _Atomic uint64_t lock_steals;     /* dead owners recovered */
    _Atomic uint64_t intern_failures; /* arena/hash full */
    _Atomic uint64_t arena_committed; /* arena bytes the file backs (>= arena_used) */
};

/* Registries of small shared vocabularies, appended under the string lock:
 * resource dimensions (bf_vec indices), instance types and zones (indices
 * used in machine records and counts). Names are immutable once `n` covers
 * them (n is published with release). */
#define BF_MAX_TYPES 256
#define BF_MAX_ZONES 16
#define BF_NAME_MAX  64
struct bf_inv_meta {
    struct bf_strtab_meta strtab;
    /* [W: any process, under the string lock] */
    _Atomic uint32_t n_dims;
    char dim_names[BF_MAX_DIMS][BF_DIM_NAME_MAX];
    _Atomic uint32_t n_types;
    char type_names[BF_MAX_TYPES][BF_NAME_MAX];
    _Atomic uint32_t n_zones;
    char zone_names[BF_MAX_ZONES][BF_NAME_MAX];
    /* slot allocation and the id index [W: reconciler] */
    _Atomic uint32_t slot_hwm;  /* slots [0, hwm) have been used at least once */
    _Atomic uint32_t free_head; /* free-slot stack: slot+1 of the top, 0 = empty */
    _Atomic uint32_t n_machines;
    _Atomic uint32_t index_used;       /* occupied id-index slots incl. tombstones */
    _Atomic uint64_t records_inserted; /* lifetime counters */
    _Atomic uint64_t records_removed;
    /* seqlock health [W: each reader process into its own slot] */
    _Atomic uint64_t seqlock_retries[BF_ROLE_COUNT];
    _Atomic uint64_t seqlock_giveups[BF_ROLE_COUNT];
};

/* Machine record flags (bf_machine_rec.flags). */
#define BF_REC_VALID      0x1u /* slot holds a machine */
#define BF_REC_HOST_IS_ID 0x2u /* host ref = provider only; HostRef.ref = the id */
/* repaired or in-flight at a crash: the reconciler applies the provider's
 * view unconditionally */
#define BF_REC_NEEDS_REFRESH 0x4u
/* the provider's latest record failed Invariant; this is the last good record */
#define BF_REC_REJECTED 0x8u

/*
 * One machine, decoded (the seqlock payload: 56 bytes = 7 words). Strings are
 * refs into the string table. The profile ref names a MachineProfileBlob
 * (proto/bigfleet/internal/blobs.proto): instance type, zone, capacity type,
 * resources, labels, allocatable — shared by every machine of one shape.
 * Prices are stored as float (dollars per hour), probabilities as float; both
 * are screened (Invariant) as doubles before narrowing. Penalties are stored
 * as buckets (their dollar value is bf_bucket_upper_bound(bucket), which is
 * what the shard stamps).
 */
struct bf_machine_rec {
    uint32_t id;          /* machine id (string ref) */
    uint32_t profile;     /* MachineProfileBlob (string ref) */
    uint32_t cluster;     /* bound cluster id (string ref), 0 = unbound */
    uint32_t host;        /* "provider\0ref", or just provider with BF_REC_HOST_IS_ID */
    uint32_t fingerprint; /* AssignedNeedFingerprint (string ref) */
    uint32_t group;       /* AssignedGroup (string ref, bytes) */
    uint32_t last_error;  /* string ref; set in Failed */
    int32_t assigned_priority;
    uint8_t state;         /* enum bf_state */
    uint8_t capacity_type; /* enum bf_capacity_type */
    uint8_t ipb;           /* assigned interruption penalty bucket */
    uint8_t rpb;           /* assigned reclamation penalty bucket */
    uint16_t type_idx;     /* index into type_names */
    uint16_t zone_idx;     /* index into zone_names */
    uint32_t idle_since;   /* seconds since the segment's created_unix_ns/1e9, rounded
                              down, + 1 (0 = not Idle / unknown) */
    uint32_t flags;        /* BF_REC_* */
    float price_per_hour;
    float interruption_probability;
};
_Static_assert(sizeof(struct bf_machine_rec) == 56, "machine record payload changed");

#define BF_REC_WORDS 7
/* The record as stored: seqlock word, writer pid, payload words. 64 bytes,
 * one cache line. [W: reconciler | executor | supervisor(repair), via CAS] */
struct bf_shm_machine {
    _Atomic uint32_t seq;    /* even = stable, odd = write in progress */
    _Atomic uint32_t writer; /* pid of the writer while odd, else 0 */
    _Atomic uint64_t w[BF_REC_WORDS];
} __attribute__((aligned(64)));
_Static_assert(sizeof(struct bf_shm_machine) == 64, "machine record layout changed");

/* Change logs: lossy single-producer rings of slot numbers appended by every
 * writer of a record (one log per writer). The producer never waits: it
 * overwrites; a consumer that falls more than `capacity` behind sees
 * head - tail > capacity and must rescan everything (counted). */
enum bf_changelog_writer {
    BF_CL_RECONCILER = 0,
    BF_CL_EXECUTOR = 1,
    BF_CL_SUPERVISOR = 2,
    BF_CHANGELOG_WRITERS = 3
};
struct bf_changelog {
    _Atomic uint64_t head; /* [W: the log's writer] entries appended (release) */
    uint8_t pad0[BF_CACHELINE - 8];
    _Atomic uint64_t tail; /* [W: cycle] entries consumed */
    uint8_t pad1[BF_CACHELINE - 8];
    _Atomic uint64_t overflows; /* [W: cycle] rescans forced by overflow */
    uint64_t entries_off;       /* offset of _Atomic uint32_t entries[capacity] */
    uint8_t pad2[BF_CACHELINE - 16];
};

/* In-flight markers, one byte each per slot: the machine has an action in
 * flight iff enq[slot] != done[slot]. The cycle bumps enq when it enqueues an
 * action (carrying the new value in the action); the executor sets done to
 * that value when the action finishes (success, failure or skip). The
 * reconciler skips in-flight machines (seed §3 item 1). */
struct bf_pending_hdr {
    uint64_t enq_off;  /* _Atomic uint8_t enq[max_machines]  [W: cycle] */
    uint64_t done_off; /* _Atomic uint8_t done[max_machines] [W: executor] */
};

/* ==================================================================== needs */

enum bf_needs_table {
    BF_NEEDS_T_META = 0,     /* struct bf_needs_meta */
    BF_NEEDS_T_CLUSTERS = 1, /* struct bf_shm_cluster[max_clusters] */
    BF_NEEDS_T_ROWS = 2,     /* struct bf_need_row[BF_NEED_ROWS_PER_NEED * max_needs]
                              * (the arena): the segment's last table, its file
                              * grows with use (bf_needs_rows_reserve) */
    BF_NEEDS_T_STAMPS = 3,   /* struct bf_stamp[stamp_capacity] */
    BF_NEEDS_T_OBSERVED = 4  /* _Atomic uint32_t observed_epoch[stamp_capacity] */
};

/* The need-row arena's reserve, in rows per Need of max_needs (address
 * space: the file backs what is used). Live rows are at most max_needs and a
 * cluster's replacement at most max_needs more, written beside its old
 * extent. Extents are allocated lowest-first (so the file stays near the
 * rows in use), which leaves a replaced extent anywhere, not at an end of
 * the arena; with 3 x max_needs rows, once the session's compaction has
 * packed the other extents downwards, one of the two free runs around the
 * replaced extent holds the replacement (>= 2 x max_needs free rows in two
 * runs). i18-needseg, stop 33 (2 x max_needs before, with each replacement
 * at the far end from the old extent). */
#define BF_NEED_ROWS_PER_NEED 3u

struct bf_needs_meta {
    _Atomic uint64_t change_counter; /* [W: session] bumped after every publish */
    _Atomic uint32_t n_clusters;     /* [W: session] rows [0, n) ever used */
    _Atomic uint32_t rows_used;      /* [W: session] live rows across clusters */
    uint32_t pad;
    /* [W: executor, reconciler] +1 after every recorded provisioning-latency
     * observation (bf_stamp_observe): while it has not moved, no stamp was
     * observed, so touching the stamps of an unchanged set of fingerprints
     * again would change nothing (the session skips it) */
    _Atomic uint64_t stamps_observed;
};

/*
 * One cluster (payload of struct bf_shm_cluster; 15 words).
 * [W: session]. A rollup is written into a free extent of the row arena and
 * published by one write of this payload (rows_off, rows_count, generation):
 * full replacement, never a partial diff. The old extent is reused only
 * after the publish, so a reader that copied rows under the old seq sees the
 * seq move and retries.
 */
struct bf_cluster_rec {
    uint32_t name_ref; /* cluster id (string ref) */
    uint8_t in_use;
    uint8_t connected;       /* a live Session stream holds this cluster */
    uint8_t first_rollup;    /* ADR-0036: a rollup (any, even empty or held) arrived */
    uint8_t quarantine_held; /* rail 2: consecutive suspicious rollups held */
    uint32_t rows_off;       /* first row in the arena */
    uint32_t rows_count;
    uint32_t accepted_rows; /* rail 2 baseline: rows of the last accepted rollup */
    uint32_t session_epoch; /* +1 per installed session (cycle forgets AC cache) */
    uint64_t generation;    /* +1 per accepted (published) rollup */
    int64_t last_rollup_ns; /* arrival of the last rollup (any outcome) */
    uint64_t rollups_accepted;
    uint64_t rollups_rejected;    /* malformed: rejected at decode, demand kept */
    uint64_t rollups_quarantined; /* held by rail 2 */
    int64_t connected_since_ns;
    int64_t last_rollup_timestamp_ns; /* ClusterCapacityNeeds.timestamp_unix_nanos */
    /* Arrival of every row of the extent when nonzero, in place of the rows'
     * own arrival_ns: a rollup that repeated the previous one is republished
     * on the same extent (rows untouched, generation + 1) with its new
     * arrival here. 0: each row carries its own arrival_ns. bf_needs_copy
     * applies it, so readers that copy rows through it see the arrival. */
    int64_t rows_arrival_ns;
    /* The generation whose rollup wrote the extent's rows: set to the new
     * generation by every publish that writes rows, kept by a republished
     * repeat and by a relocation (same rows). A reader that read the rows at
     * rows_generation R holds them while it still reads R, whatever the
     * generation did meanwhile. 0: not recorded (a writer that leaves it). */
    uint64_t rows_generation;
    uint64_t reserved[3];
};
_Static_assert(sizeof(struct bf_cluster_rec) == 120, "cluster payload changed");
#define BF_CLUSTER_WORDS 15
/*
 * A cluster row is a seqlock LATCH (aesthetics.md §2.5): two payload copies;
 * readers read copy (seq & 1) and retry if seq moved. The single writer
 * (session) bumps seq to odd, writes copy 0, bumps to even, writes copy 1.
 * A writer killed mid-write leaves readers on the intact copy: they never
 * stall, and the supervisor's repair copies the intact copy over the other.
 */
struct bf_shm_cluster {
    _Atomic uint32_t seq;
    _Atomic uint32_t writer; /* session pid while writing, else 0 */
    _Atomic uint64_t w[2][BF_CLUSTER_WORDS];
    uint8_t pad[8];
};
_Static_assert(sizeof(struct bf_shm_cluster) == 256, "cluster row layout changed");

/* One Need row (ADR-0027 aggregate). Written only into free arena extents;
 * readers copy rows with relaxed atomic word loads between the cluster
 * seqlock reads. The profile ref names a NeedProfileBlob (requirements incl.
 * Same, spread, priority, both buckets, fingerprint); vectors are milli-units
 * over the inventory segment's dimension registry. */
struct bf_need_row {
    uint32_t profile_ref;
    uint32_t group_ref; /* co-location group (bytes; 0 = plain need) */
    uint32_t cluster_ref;
    uint32_t flags;
    int64_t arrival_ns; /* ClusterCapacityNeeds.timestamp_unix_nanos */
    int64_t aggregate[BF_MAX_DIMS];
    int64_t min_unit[BF_MAX_DIMS];
    uint64_t reserved;
};
_Static_assert(sizeof(struct bf_need_row) == 160, "need row layout changed");

/* Provisioning-latency stamps (seed 000 §8): first-seen time of each
 * (cluster, fingerprint) in a rollup. [W: session] A stamp is observed once,
 * when a machine for it reaches Configured, by moving observed_epoch[i] to
 * the stamp's epoch with compare-and-swap [W: executor (synchronous
 * Configure) or reconciler (asynchronous completion seen by a reconcile);
 * the CAS makes exactly one of them record the sample]; the session
 * re-stamps (epoch+1, now) on a later rollup. */
struct bf_stamp {
    _Atomic uint32_t seq;
    _Atomic uint32_t epoch; /* 0 = empty slot */
    _Atomic uint32_t cluster_ref;
    _Atomic uint32_t fingerprint_ref;
    _Atomic int64_t first_seen_ns;
};

/* ==================================================================== rings */

enum bf_ring_id {
    BF_RING_ACTIONS = 0,    /* cycle -> executor: struct bf_action_msg */
    BF_RING_BOOT_REQ = 1,   /* executor -> session: struct bf_boot_req_msg */
    BF_RING_BOOT_RESP = 2,  /* session -> executor: bytes ring, bf_boot_resp_hdr + blob */
    BF_RING_NODE_EXEC = 3,  /* executor -> session: struct bf_node_event_msg */
    BF_RING_NODE_RECON = 4, /* reconciler -> session: struct bf_node_event_msg */
    BF_RING_RECLAIM = 5,    /* executor -> session: struct bf_reclaim_msg */
    BF_RING_AC_HINTS = 6,   /* cycle -> session: struct bf_ac_hint_msg */
    /* ADR-0055 (docs/adr0055.md): coordinator instructions are applied by
     * the cycle, which owns the ownership partition's rule inputs */
    BF_RING_COORD_IN = 7,  /* session -> cycle: bytes, bf_coord_in_hdr + instruction */
    BF_RING_COORD_OUT = 8, /* cycle -> session: bytes, one packed InstructAck */
    BF_RING_OWN_AUDIT = 9, /* cycle -> executor: bytes, bf_own_audit_hdr + strings */
    BF_RING_COUNT = 10
};

#define BF_RING_FIXED 1
#define BF_RING_BYTES 2

/*
 * SPSC ring header. Indices are free-running uint64 counters (slots for a
 * fixed ring, bytes for a bytes ring), masked only when indexing. Producer
 * and consumer indices sit on separate 128-byte groups (no false sharing).
 */
struct bf_ring_hdr {
    uint32_t kind;      /* BF_RING_FIXED / BF_RING_BYTES */
    uint32_t slot_size; /* bytes per slot (fixed rings) */
    uint64_t capacity;  /* slots or bytes, power of two */
    uint32_t producer;  /* enum bf_role */
    uint32_t consumer;  /* enum bf_role */
    uint64_t data_off;  /* offset of the slot array / byte area */
    uint8_t pad0[128 - 32];
    _Atomic uint64_t prod;  /* [W: producer] published (release) */
    _Atomic uint64_t drops; /* [W: producer] pushes refused because full */
    _Atomic uint64_t pushes;
    uint8_t pad1[128 - 24];
    _Atomic uint64_t cons; /* [W: consumer] consumed (release) */
    uint8_t pad2[128 - 8];
};
_Static_assert(sizeof(struct bf_ring_hdr) == 384, "ring header layout changed");

/* Action kinds and reasons are the model's (enum bf_action_kind and enum
 * bf_action_reason in bigfleet/model.h). Short aliases used by the shared
 * messages and their producers/consumers: */
#define BF_ACT_UNSPECIFIED       BF_ACTION_UNSPECIFIED
#define BF_ACT_BOOTSTRAP         BF_ACTION_BOOTSTRAP
#define BF_ACT_PROVISION         BF_ACTION_PROVISION
#define BF_ACT_RECLAIM           BF_ACTION_RECLAIM
#define BF_ACT_PREEMPT           BF_ACTION_PREEMPT
#define BF_ACT_DELETE            BF_ACTION_DELETE
#define BF_ACT_KIND_COUNT        BF_ACTION_KIND_COUNT
#define BF_REASON_P1_IDLE        BF_REASON_PHASE1_IDLE
#define BF_REASON_P1_SPECULATIVE BF_REASON_PHASE1_SPECULATIVE
#define BF_REASON_P2_INVERSION   BF_REASON_PHASE2_INVERSION
#define BF_REASON_P3_EXCESS      BF_REASON_PHASE3_EXCESS
#define BF_REASON_P3_RELEASE     BF_REASON_PHASE3_RELEASE
enum bf_disposition {
    BF_DISP_EXECUTE = 0,    /* run it */
    BF_DISP_SUPPRESSED = 1, /* --actuation-paused: audit only */
    BF_DISP_DRYRUN = 2      /* --dry-run: audit only */
};

/* cycle -> executor, 64 bytes. */
struct bf_action_msg {
    uint64_t serial;           /* global action serial (cycle), strictly increasing */
    uint64_t decided_cycle;    /* the cycle that decided it */
    uint32_t slot;             /* machine slot */
    uint32_t machine_id_ref;   /* id at decision time (slot reuse check) */
    uint32_t cluster_ref;      /* destination (Bootstrap/Provision) or source */
    uint32_t need_profile_ref; /* SourceProfile (NeedProfileBlob) for Bootstrap/Provision */
    uint32_t group_ref;        /* SourceGroup */
    uint32_t grace_seconds;    /* Reclaim/Preempt */
    int32_t preemptor_priority;
    uint8_t kind;        /* enum bf_action_kind */
    uint8_t reason;      /* enum bf_action_reason */
    uint8_t pending_tag; /* enq[slot] value to write into done[slot] when finished */
    uint8_t disposition; /* enum bf_disposition */
    uint8_t pad[16];
};
_Static_assert(sizeof(struct bf_action_msg) == 64, "action message changed");

/* executor -> session: fetch a bootstrap blob for a machine. */
struct bf_boot_req_msg {
    uint64_t request_id; /* executor-chosen; echoed in the response */
    int64_t deadline_ns; /* wall clock */
    uint32_t slot;
    uint32_t machine_id_ref;
    uint32_t cluster_ref;
    uint32_t need_profile_ref; /* requirements go into BootstrapRequest */
    uint8_t pad[32];
};
_Static_assert(sizeof(struct bf_boot_req_msg) == 64, "boot request message changed");

/* session -> executor (bytes ring): header followed by error text then blob. */
enum bf_boot_status {
    BF_BOOT_OK = 0,
    BF_BOOT_OPERATOR_ERROR = 1, /* BootstrapBlobResponse.error non-empty */
    BF_BOOT_NO_SESSION = 2,     /* no live session for the cluster */
    BF_BOOT_TOO_LARGE = 3,      /* blob larger than the ring allows */
    BF_BOOT_CANCELLED = 4       /* session closed before the answer */
};
struct bf_boot_resp_hdr {
    uint64_t request_id;
    uint32_t status; /* enum bf_boot_status */
    uint32_t error_len;
    uint64_t blob_len;
    int64_t ttl_seconds;
};

/* A machine transition for the operator (NodeStateUpdate). */
struct bf_node_event_msg {
    uint32_t slot;
    uint32_t machine_id_ref;
    uint32_t cluster_ref; /* route: the cluster bound BEFORE the mutation */
    uint32_t profile_ref; /* labels and resources of the node */
    uint32_t host_ref;
    uint32_t last_error_ref;
    uint8_t state;
    uint8_t flags; /* BF_REC_HOST_IS_ID copied from the record */
    uint8_t pad[6];
};
_Static_assert(sizeof(struct bf_node_event_msg) == 32, "node event changed");

/* executor -> session: tell the operator to drain a machine (ADR-0009). */
struct bf_reclaim_msg {
    uint64_t instruction_serial;
    uint32_t machine_id_ref;
    uint32_t cluster_ref;
    int64_t grace_seconds;
    int32_t preemptor_priority;
    uint8_t kind; /* BF_ACT_RECLAIM or BF_ACT_PREEMPT */
    uint8_t pad[35];
};
_Static_assert(sizeof(struct bf_reclaim_msg) == 64, "reclaim message changed");

/* cycle -> session: one AvailableCapacityUpdate (already coalesced and
 * rate-limited by the cycle). */
struct bf_ac_hint_msg {
    uint32_t cluster_ref;
    uint32_t need_profile_ref; /* requirements + fingerprint */
    int32_t available_count;
    uint8_t confidence; /* AvailableCapacityUpdate.Confidence */
    uint8_t pad[3];
    double cost_per_hour;
    uint8_t pad2[40];
};
_Static_assert(sizeof(struct bf_ac_hint_msg) == 64, "AC hint changed");

/* session -> cycle (ring COORD_IN): one coordinator instruction, as the
 * packed bigfleet.v1alpha1.CoordinatorInstruction that follows the header,
 * with the session's term high-water mark when it arrived. */
struct bf_coord_in_hdr {
    int64_t hwm;         /* coordinator-term high-water mark (LMDB, session) */
    int64_t received_ns; /* wall clock of the ReportAck that carried it */
};

/* cycle -> executor (ring OWN_AUDIT): one ownership audit-log record
 * (docs/audit-log.md "ownership records"): the header, then the strings
 * named by len[] in enum bf_own_audit_str order, not NUL-terminated. */
enum bf_own_event {
    BF_OWN_EV_TRANSFER_OUT = 1,        /* TransferOwnership, this shard the donor */
    BF_OWN_EV_TRANSFER_IN = 2,         /* TransferOwnership, this shard the recipient */
    BF_OWN_EV_SPECULATIVE_OUT = 3,     /* ReassignSpeculative, donor */
    BF_OWN_EV_SPECULATIVE_IN = 4,      /* ReassignSpeculative, recipient */
    BF_OWN_EV_RESERVED = 5,            /* CrossShardDrain: reserved for transfer */
    BF_OWN_EV_RESERVATION_EXPIRED = 6, /* the reservation's TTL passed */
    BF_OWN_EV_DOMAIN_ASSIGNED = 7,
    BF_OWN_EV_DOMAIN_UNASSIGNED = 8,
    BF_OWN_EV_COUNT = 9
};
enum bf_own_audit_str {
    BF_OWN_AS_MACHINE = 0,
    BF_OWN_AS_INSTRUCTION = 1,
    BF_OWN_AS_FROM = 2,
    BF_OWN_AS_TO = 3,
    BF_OWN_AS_DETAIL = 4, /* domain "key=value", or a note */
    BF_OWN_AS_COUNT = 5
};
struct bf_own_audit_hdr {
    int64_t at_ns;    /* when the cycle applied it */
    int64_t until_ns; /* RESERVED: the reservation's expiry; else 0 */
    uint64_t cycle;   /* the cycle that applied it */
    uint32_t event;   /* enum bf_own_event */
    int32_t preemptor_priority;
    uint16_t len[BF_OWN_AS_COUNT];
    uint8_t pad[6];
};
_Static_assert(sizeof(struct bf_own_audit_hdr) == 48, "ownership audit header changed");

/* ==================================================================== state */

enum bf_state_table {
    BF_STATE_T_MAIN = 0,    /* struct bf_state_main */
    BF_STATE_T_VERDICTS = 1 /* union bf_verdict_cell[4 * max_needs], the two buffers
                               interleaved (bf_verdict_index); the last table, grown
                               with use (bf_shm_grow) */
};

/* Histogram with fixed exponential buckets; sum in nanoseconds (or the
 * metric's base unit x 1e9). [W: the owning process] */
#define BF_HIST_MAX_BUCKETS 24
struct bf_hist {
    _Atomic uint64_t bucket[BF_HIST_MAX_BUCKETS]; /* non-cumulative counts */
    _Atomic uint64_t count;
    _Atomic uint64_t sum_ns;
};

enum bf_phase {
    BF_PHASE_RECONCILE = 0,
    BF_PHASE_SNAPREAD = 1,
    BF_PHASE_PHASE1 = 2,
    BF_PHASE_PHASE2 = 3,
    BF_PHASE_PHASE3 = 4,
    BF_PHASE_EMIT = 5,
    BF_PHASE_EXECUTE = 6,
    BF_PHASE_COUNT = 7
};

/* Execute outcome labels (shard.md §3.7). */
enum bf_outcome {
    BF_OUT_SUCCESS = 0,
    BF_OUT_CTX_CANCELED,
    BF_OUT_FENCED,
    BF_OUT_NO_SESSION,
    BF_OUT_RACED_TO_IDLE,
    BF_OUT_TRANSITION_ERROR,
    BF_OUT_BLOB_ERROR,
    BF_OUT_PROVIDER_ERROR,
    BF_OUT_STALE_STATE,
    BF_OUT_INVENTORY_MISS,
    BF_OUT_MISSING_PROFILE,
    BF_OUT_OTHER,
    BF_OUT_COUNT
};

/* Process slot. [W: supervisor] fields pid..last_exit; [W: the child]
 * child_state, heartbeat_ns. */
enum bf_child_state { BF_CHILD_UNUSED = 0, BF_CHILD_ASSIGNED = 1, BF_CHILD_ACTIVE = 2 };
struct bf_proc_slot {
    _Atomic uint32_t pid;
    _Atomic uint32_t restarts;
    _Atomic int64_t started_ns;
    _Atomic int32_t last_exit_status; /* wait status of the previous instance */
    _Atomic uint32_t wake_fd;         /* eventfd number (inherited) that wakes this role */
    _Atomic uint32_t child_state;     /* enum bf_child_state [W: child] */
    _Atomic uint32_t pad;
    _Atomic int64_t heartbeat_ns; /* [W: child] wall clock of its last loop turn */
    uint8_t pad2[64 - 40];
};

struct bf_stats_cycle { /* [W: cycle] */
    struct bf_hist cycle_duration;
    struct bf_hist phase_duration[BF_PHASE_COUNT];
    _Atomic uint64_t cycles;
    _Atomic uint64_t actions_total[BF_ACT_KIND_COUNT];
    _Atomic uint64_t actions_suppressed[BF_ACT_KIND_COUNT];
    _Atomic uint64_t actions_dryrun[BF_ACT_KIND_COUNT];
    _Atomic uint64_t actions_deferred;
    _Atomic uint64_t actions_dropped;
    _Atomic uint64_t actions_deduped;
    _Atomic uint64_t reclaims_capped;
    _Atomic uint64_t mirror_rescans;
    _Atomic uint64_t changelog_overflows;
    _Atomic uint64_t reconcile_waits_timed_out;
    _Atomic uint64_t ac_hints_sent;
    _Atomic uint64_t ac_hints_dropped;
    /* verdict rows a publish left out, or published without a detail (a
     * domain name or the extra cell), because the state segment's file
     * could not grow or the string table was full */
    _Atomic uint64_t verdicts_dropped;
};

struct bf_stats_executor { /* [W: executor] */
    _Atomic uint64_t outcomes[BF_ACT_KIND_COUNT][BF_OUT_COUNT];
    _Atomic int64_t inflight;
    _Atomic uint64_t idle_releases;
    _Atomic uint64_t audit_records;
    _Atomic uint64_t audit_errors;
    _Atomic uint64_t ring_drops;         /* node/reclaim/boot pushes refused */
    struct bf_hist provisioning_latency; /* exp(0.01, 2, 20) seconds */
    struct bf_hist configure_phase;      /* exp(0.01, 2, 16) */
    struct bf_hist request_bootstrap;    /* exp(0.01, 2, 16) */
    struct bf_hist drain_phase;          /* exp(0.01, 2, 16) */
};

struct bf_stats_reconciler { /* [W: reconciler] */
    _Atomic uint64_t reconciles;
    _Atomic uint64_t reconcile_errors;
    _Atomic uint64_t machines_rejected[4]; /* by enum bf_reject_reason */
    _Atomic uint64_t machines_inserted;
    _Atomic uint64_t machines_updated;
    _Atomic uint64_t machines_removed;
    _Atomic uint64_t machines_skipped_pending;
    _Atomic uint64_t metadata_decode_errors;
    _Atomic uint64_t last_list_machines;
    /* ADR-0055 ownership partition (docs/adr0055.md) */
    _Atomic uint64_t owned_machines;     /* gauge: entries of the LMDB owned set */
    _Atomic uint64_t machines_not_owned; /* listed machines not adopted (not ours) */
    _Atomic uint64_t machines_released;  /* removed because no longer owned */
    _Atomic uint64_t release_blocked;    /* gauge: not owned, kept while bound/in flight */
    _Atomic uint64_t owned_store_errors; /* LMDB writes of the owned set that failed */
    _Atomic int64_t last_reconcile_ns;
    struct bf_hist reconcile_duration; /* exp(0.001, 2, 14) */
    /* provisioning latency observed when a reconcile sees an asynchronous
     * Configure complete (Configuring -> Configured); /metrics sums it with
     * the executor's (which observes synchronous completions) */
    struct bf_hist provisioning_latency; /* exp(0.01, 2, 20) */
    /* resync walks (full Lists ending in removals; reconciler.h) */
    _Atomic uint64_t resyncs;       /* completed */
    _Atomic uint64_t resync_aborts; /* ended without removals (List failed, log lapped) */
    _Atomic int64_t last_resync_ns; /* wall time of the last completed walk */
    _Atomic uint64_t incremental;   /* 1: since_revision deltas in use; 0: full Lists */
    struct bf_hist resync_duration; /* exp(0.001, 2, 16): first page to removals */
};

struct bf_stats_session {          /* [W: session] */
    _Atomic uint64_t lifecycle[3]; /* installed, removed, replaced */
    _Atomic int64_t active_sessions;
    _Atomic uint64_t identity_rejected;
    _Atomic uint64_t hello_rejected;
    _Atomic uint64_t rollups_received;
    _Atomic uint64_t rollups_accepted;
    _Atomic uint64_t rollups_rejected;
    _Atomic uint64_t rollups_quarantined;
    _Atomic uint64_t rollups_superseded;
    _Atomic uint64_t outbox_dropped; /* coalesced or dropped frames */
    _Atomic uint64_t outbox_coalesced;
    _Atomic uint64_t boot_requests;
    _Atomic uint64_t boot_late_responses;
    _Atomic uint64_t reclaim_instructions;
    _Atomic uint64_t reclaim_acks;
    _Atomic uint64_t node_updates;
    _Atomic uint64_t ac_updates;
    _Atomic uint64_t inspect_calls;
    _Atomic uint64_t inspect_denied;
    _Atomic uint64_t coordinator_reports;
    _Atomic uint64_t coordinator_errors;
    /* ReportAcks whose coordinator_term was below the high-water mark (a
     * deposed leader's), skipped whole, and the instructions they carried */
    _Atomic uint64_t coordinator_stale_replies;
    _Atomic uint64_t coordinator_stale_reply_instructions;
    _Atomic int64_t coordinator_term;
    struct bf_hist rollup_ingest; /* exp(0.0001, 2, 20) seconds */
};

/*
 * The ownership partition as the cycle holds it (ADR-0055, docs/adr0055.md):
 * its rule inputs live in LMDB under --data-dir; these are counts and
 * bounded copies for /metrics and bigfleet-inspect. [W: cycle]
 * The tables after `seq` are written between seq odd and even (readers copy
 * them with word loads and retry when seq moved); the counters are atomics.
 */
#define BF_OWN_KINDS            6 /* 0 other, 1 assign, 2 unassign, 3 reassign, 4 drain, 5 transfer */
#define BF_OWN_OUTCOMES         5 /* InstructAck.Outcome 0..4 */
#define BF_OWN_PUB_RESERVATIONS 256
#define BF_OWN_PUB_DOMAINS      32
#define BF_OWN_DOMAIN_TEXT      128
enum bf_own_mode {
    BF_OWN_MODE_UNKNOWN = 0,     /* not loaded yet */
    BF_OWN_MODE_ALL = 1,         /* no coordinator, no domain: owns every listed machine */
    BF_OWN_MODE_PARTITIONED = 2, /* domains + transfers decide */
    BF_OWN_MODE_NO_STORE = 3     /* LMDB unavailable: owns all, instructions fail */
};
struct bf_own_reservation {
    uint32_t id_ref; /* machine id (string ref; 0 when not interned) */
    int32_t preemptor_priority;
    int64_t since_ns; /* accepted */
    int64_t until_ns; /* expiry (wall clock) */
};
struct bf_ownership_state {
    _Atomic uint64_t generation; /* +1 per committed change of the rule inputs */
    _Atomic uint32_t mode;       /* enum bf_own_mode */
    _Atomic uint32_t n_domains;
    _Atomic uint64_t n_in;  /* transfers in (machines) */
    _Atomic uint64_t n_out; /* transfers out (machines) */
    _Atomic uint32_t n_reserved;
    _Atomic uint32_t n_held; /* machines held out of every decision */
    _Atomic uint64_t instructions[BF_OWN_KINDS][BF_OWN_OUTCOMES];
    _Atomic uint64_t transferred_out, transferred_in; /* machines, lifetime */
    _Atomic uint64_t speculative_out, speculative_in;
    _Atomic uint64_t drained;              /* Preempts issued for CrossShardDrain */
    _Atomic uint64_t reservations_expired; /* TTL passed without a transfer */
    _Atomic uint64_t store_errors;         /* LMDB failures (instruction FAILED) */
    _Atomic uint64_t seq;                  /* odd while the tables below are written */
    uint32_t n_pub_reservations;
    uint32_t n_pub_domains;
    struct bf_own_reservation reservations[BF_OWN_PUB_RESERVATIONS];
    char domains[BF_OWN_PUB_DOMAINS][BF_OWN_DOMAIN_TEXT]; /* "key=value", cut */
};

struct bf_stats_supervisor { /* [W: supervisor] */
    _Atomic uint64_t child_exits;
    _Atomic uint64_t records_repaired;
    _Atomic uint64_t clusters_repaired;
    _Atomic uint64_t locks_recovered;
    _Atomic uint64_t full_reinits;
};

/* Shortfall ledger entry (seed 000 §6): fingerprint-keyed, aged per cycle. */
#define BF_SHORTFALL_MAX 100
struct bf_shortfall_row {
    uint32_t need_profile_ref;
    int32_t priority;
    int32_t age_cycles;
    uint8_t ipb;
    uint8_t pad[3];
    int64_t deficit[BF_MAX_DIMS];
};

/* Per-cycle inventory counts published by the cycle from its mirror (exact
 * as of that cycle). Kept here rather than maintained by record writers so a
 * writer killed mid-write can never leave them wrong. */
struct bf_inv_counts {
    uint32_t by_state_type_zone[BF_STATE_COUNT][BF_MAX_TYPES][BF_MAX_ZONES];
    uint32_t by_state_ct_bucket[BF_STATE_COUNT][BF_CT_COUNT][BF_BUCKET_COUNT];
    uint32_t by_state[BF_STATE_COUNT];
    uint32_t demand_rows_by_bucket[BF_BUCKET_COUNT];
    uint32_t total_machines;
    uint32_t total_needs;
};

/* Cycle results, double-buffered: the cycle fills buffer (published ^ 1) and
 * then stores published with release; readers read `published`, copy, and
 * re-check `publish_seq` did not move (a reader never blocks the cycle). */
struct bf_cycle_result {
    uint64_t cycle;
    int64_t computed_at_ns;
    uint32_t n_verdicts; /* rows in the matching verdict buffer: its cells [0, n) */
    uint32_t n_shortfalls;
    uint32_t shortfalls_total; /* full ledger size before the top-100 cut */
    uint32_t actions;
    uint32_t unsatisfied;
    uint32_t n_verdict_extras; /* extra cells after the rows: [n_verdicts, + this) */
    int64_t phase_ns[BF_PHASE_COUNT];
    int64_t cycle_ns;
    struct bf_shortfall_row shortfalls[BF_SHORTFALL_MAX];
    struct bf_inv_counts counts;
};

/*
 * Live configuration: what a SIGHUP may change without a restart
 * (docs/operating.md "Reload"). [W: supervisor] at start and on SIGHUP.
 * The kill switch and dry-run stay in bf_state_main (same writer).
 * Readers (bf_live_read): load seq (acquire), copy, re-load seq; retry
 * while it is odd or moved. `generation` moves once per publish: children
 * compare it on their periodic tick to act once per reload (log level,
 * audit log reopen, TLS files).
 */
#define BF_LIVE_PATH_WORDS 128 /* a 1024-byte path as 8-byte words */
struct bf_live_config {
    _Atomic uint64_t seq;
    _Atomic uint64_t generation;
    _Atomic uint64_t reclaim_cap_bits; /* IEEE-754 double (--reclaim-cap-fraction) */
    _Atomic uint32_t max_actions_per_cycle;
    _Atomic int32_t log_level; /* enum bf_log_level */
    _Atomic uint64_t tls_cert[BF_LIVE_PATH_WORDS];
    _Atomic uint64_t tls_key[BF_LIVE_PATH_WORDS];
    _Atomic uint64_t tls_ca[BF_LIVE_PATH_WORDS];
    _Atomic uint64_t audit_log[BF_LIVE_PATH_WORDS];
};

/* Resource use of one process, sampled from /proc about once a second.
 * [W: supervisor] */
struct bf_proc_usage {
    _Atomic uint64_t cpu_ns;    /* user + system time of the current instance */
    _Atomic uint64_t rss_bytes; /* resident set */
    _Atomic uint32_t open_fds;
    _Atomic uint32_t pad;
    _Atomic uint64_t cpu_ns_dead; /* CPU time of the role's previous instances (reaped) */
};

/* Latency histograms of outbound RPCs by method and final gRPC status,
 * exp(0.001, 2, 16) seconds. [W: the process that makes the calls] */
#define BF_RPC_PROVIDER_METHODS    6 /* enum bf_prov_rpc */
#define BF_RPC_COORDINATOR_METHODS 1 /* ReportShard */
#define BF_RPC_CODES               17
struct bf_rpc_provider_latency {
    struct bf_hist h[BF_RPC_PROVIDER_METHODS][BF_RPC_CODES];
};

/* The host side of the appliance (issue 15). */
struct bf_host_state {
    /* [W: supervisor] */
    _Atomic int32_t grpc_listen_fd; /* listening socket for --listen, inherited by the session */
    _Atomic int32_t http_listen_fd; /* for --metrics-addr; -1 = disabled */
    _Atomic uint32_t embedded_provider; /* 1: the embedded simulated provider is in use */
    _Atomic uint32_t children_uid;      /* uid the children run as */
    _Atomic uint64_t reloads;           /* SIGHUPs whose configuration was valid */
    _Atomic uint64_t reload_failures;   /* SIGHUPs refused (file/environment invalid) */
    _Atomic uint64_t reload_changes_applied;
    _Atomic uint64_t reload_changes_rejected; /* changed settings that need a restart */
    _Atomic int64_t last_reload_ns;           /* wall clock of the last SIGHUP */
    _Atomic uint32_t last_reload_ok;
    _Atomic uint32_t watchdog_enabled;
    _Atomic uint64_t watchdog_pings;
    _Atomic uint64_t reinits_refused; /* crash loops beyond --crash-loop-max-reinits */
    struct bf_proc_usage usage[BF_ROLE_COUNT];
    /* [W: session] */
    _Atomic uint32_t session_listening; /* 1 while the session accepts on every listener */
    _Atomic uint32_t pad0;
    _Atomic uint64_t health_checks;  /* grpc.health.v1 Check calls */
    _Atomic uint64_t health_watches; /* Watch calls started */
    _Atomic uint64_t reflection_calls;
    struct bf_hist coordinator_rpc[BF_RPC_COORDINATOR_METHODS][BF_RPC_CODES];
    /* [W: executor] actions the cycle queued for execution but found the kill
     * switch on when it took them (audited "suppressed", not executed) */
    _Atomic uint64_t actions_held_at_dispatch;
    /* [W: reconciler] index 0, [W: executor] index 1 */
    struct bf_rpc_provider_latency provider_rpc[2];
    struct bf_live_config live;
};

struct bf_state_main {
    /* appliance flags [W: supervisor, at start and on SIGHUP] */
    _Atomic uint32_t actuation_paused;
    _Atomic uint32_t dry_run;
    _Atomic uint32_t shutting_down;
    _Atomic uint32_t pad0;
    /* [W: reconciler] */
    _Atomic uint32_t first_reconcile_done; /* latched: /readyz */
    _Atomic uint32_t pad1;
    _Atomic uint64_t reconcile_done_seq; /* last request served */
    _Atomic uint64_t reconcile_ok_seq;   /* last request served successfully */
    /* [W: cycle] */
    _Atomic uint64_t reconcile_req_seq; /* cycle asks for a pass */
    _Atomic uint64_t cycle_count;
    _Atomic uint64_t action_serial;
    _Atomic uint32_t published; /* which result buffer is current (0/1) */
    _Atomic uint32_t pad2;
    _Atomic uint64_t publish_seq; /* odd while a buffer is being published */
    struct bf_cycle_result result[2];
    /* processes [W: see bf_proc_slot] */
    struct bf_proc_slot proc[BF_ROLE_COUNT];
    /* stats, one writer each */
    struct bf_stats_cycle cycle;
    struct bf_stats_executor executor;
    struct bf_stats_reconciler reconciler;
    struct bf_stats_session session;
    struct bf_stats_supervisor supervisor;
    struct bf_host_state host;
    struct bf_ownership_state own; /* [W: cycle] */
};

/* One row of the verdict ledger (NeedView, ADR-0061 + amendment), as
 * readers get it (bf_verdict_read) in their own memory. In the segment a
 * row is a union bf_verdict_cell (below): the common fields, domain names as
 * string-table refs, and what only some rows fill in an extra cell. */
#define BF_SAME_CANDIDATES_MAX 3
#define BF_DOMAIN_MAX          64
/* unmet_reason values: enum bf_unmet_reason (bigfleet/model.h). */
struct bf_domain_coverage {
    char domain[BF_DOMAIN_MAX];
    int32_t coverage_per_mille;
    uint8_t satisfiable;
    uint8_t pad[3];
};
struct bf_verdict_row {
    uint32_t cluster_ref;
    uint32_t need_profile_ref;
    uint32_t group_ref;
    uint32_t pad0;
    int64_t arrival_ns;
    int64_t aggregate[BF_MAX_DIMS];
    int64_t min_unit[BF_MAX_DIMS];
    int64_t residual_deficit[BF_MAX_DIMS];
    int64_t capacity_freed[BF_MAX_DIMS];
    int32_t claimed_machine_count;
    int32_t bootstrap_count;
    int32_t provision_count;
    int32_t parked_age_cycles;
    int32_t age_cycles_unmet;
    int32_t victims_found;
    int32_t matching_idle;
    int32_t matching_configured;
    int32_t matching_speculative;
    uint8_t matching_capped;
    uint8_t satisfied;
    uint8_t same_satisfiable;
    uint8_t acquisition_parked;
    uint8_t unmet_reason; /* enum bf_unmet_reason */
    uint8_t n_same_candidates;
    uint8_t has_matching_supply; /* matching_* filled (unsatisfied needs) */
    uint8_t has_preemption;
    char same_domain[BF_DOMAIN_MAX];
    struct bf_domain_coverage same_candidates[BF_SAME_CANDIDATES_MAX];
};

/*
 * The verdict table's cells (the state segment's last table, grown with
 * use). A publish with n rows and e extras fills cells [0, n + e) of its
 * buffer: cell i < n is row i; a row whose matching supply, residual
 * deficit, preemption summary or Same candidates are not all zero points
 * (extra = 1 + k, n <= k < n + e) at cell k, which holds them. Domain names
 * are string-table refs, at most BF_DOMAIN_MAX - 1 bytes. [W: cycle]
 * Readers check every ref and index they read here (bf_verdict_read).
 */
struct bf_verdict_slim {
    uint32_t cluster_ref;
    uint32_t need_profile_ref;
    uint32_t group_ref;
    uint32_t same_domain_ref;
    int64_t arrival_ns;
    int64_t aggregate[BF_MAX_DIMS];
    int64_t min_unit[BF_MAX_DIMS];
    int32_t claimed_machine_count;
    int32_t bootstrap_count;
    int32_t provision_count;
    int32_t parked_age_cycles;
    int32_t age_cycles_unmet;
    uint32_t extra; /* 0: none; else 1 + the extra cell's index in this buffer */
    uint8_t matching_capped;
    uint8_t satisfied;
    uint8_t same_satisfiable;
    uint8_t acquisition_parked;
    uint8_t unmet_reason; /* enum bf_unmet_reason */
    uint8_t n_same_candidates;
    uint8_t has_matching_supply;
    uint8_t has_preemption;
};
struct bf_verdict_extra {
    int64_t residual_deficit[BF_MAX_DIMS];
    int64_t capacity_freed[BF_MAX_DIMS];
    int32_t victims_found;
    int32_t matching_idle;
    int32_t matching_configured;
    int32_t matching_speculative;
    uint32_t cand_domain_ref[BF_SAME_CANDIDATES_MAX];
    int32_t cand_coverage_per_mille[BF_SAME_CANDIDATES_MAX];
    uint8_t cand_satisfiable[BF_SAME_CANDIDATES_MAX];
    uint8_t pad[5];
};
union bf_verdict_cell {
    struct bf_verdict_slim row;
    struct bf_verdict_extra extra;
};
_Static_assert(sizeof(union bf_verdict_cell) == 184, "verdict cell layout changed");

#endif /* BIGFLEET_SHM_LAYOUT_H */
