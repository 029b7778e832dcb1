/*
 * bigfleet/session.h — the pure, separately testable parts of the session
 * process (the operator protocol, reference/shard.md §4, seed 000 §5):
 *
 *   - OperatorMessage routing and a rollup pre-count on the protobuf wire
 *     reader (bigfleet/pbwire.h, no allocation), so a large rollup is not
 *     unpacked on the event loop;
 *   - rollup conversion: ClusterCapacityNeeds -> Need rows (profile and
 *     fingerprint interned, group interned, aggregate/min_unit vectors,
 *     duplicates merged, bad input rejected with a message);
 *   - rail 2, the empty-rollup quarantine (ADR-0046, shard.md §6.3);
 *   - the need-row arena allocator (extents of the shared row arena);
 *   - the per-session outbox (bounded FIFO of frames plus a coalescing map
 *     keyed by supersedes_key).
 *
 * Everything here is single-threaded state owned by its caller; the
 * functions that take a struct bf_shm only intern strings and register
 * resource dimensions (both are safe from any thread of the session
 * process: the string lock is a CAS on the shared lock word).
 *
 * Errors are negative errno values, listed per function.
 */
#ifndef BIGFLEET_SESSION_H
#define BIGFLEET_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bigfleet/pbwire.h"
#include "bigfleet/shm.h"

/* ================================================================ wire scan */

/*
 * Classifies an OperatorMessage (shard.proto) without unpacking it: the
 * oneof member in effect is the last one on the wire (protobuf semantics);
 * repeated occurrences of that member after the last switch are merged by
 * the decoder, so *parts counts them. *payload gets 0 (none), 1 hello,
 * 2 rollup, 3 bootstrap_response, 4 reclaim_ack; *sub and *sublen the LAST
 * occurrence's payload. Returns 0, -EBADMSG, or -E2BIG for more than
 * BF_OPMSG_MAX_FIELDS top-level fields: padding with millions of unknown
 * fields would otherwise make this scan hold the event loop (an operator
 * sends one field; a newer schema a few more).
 */
#define BF_OPMSG_MAX_FIELDS 1024
int bf_opmsg_classify(const uint8_t *msg, size_t len, int *payload, const uint8_t **sub,
                      size_t *sublen, uint32_t *parts);
/*
 * Copies the payloads of the occurrences of field `num` that are in effect
 * (after the last switch to another member of `oneof_lo..oneof_hi`) into a
 * malloc'd buffer (protobuf merge = concatenation). Returns 0 with
 * *out and *outlen, -EBADMSG, -ENOMEM.
 */
int bf_opmsg_member_bytes(const uint8_t *msg, size_t len, uint32_t num, uint32_t oneof_lo,
                          uint32_t oneof_hi, uint8_t **out, size_t *outlen);

/*
 * Pre-scan of a serialized ClusterCapacityNeeds: counts field 3 (needs)
 * and checks the top level is well-formed. Returns 0 and *n_needs, or
 * -EBADMSG.
 */
int bf_rollup_count_needs(const uint8_t *buf, size_t len, uint32_t *n_needs);

/*
 * Hello.cluster_id straight from the wire (protobuf-c would cut a string at
 * an embedded NUL). Returns 0 with *id and *idlen pointing into sub (idlen may
 * be 0 when absent), or -EBADMSG.
 */
int bf_hello_cluster_id(const uint8_t *sub, size_t len, const uint8_t **id, size_t *idlen);

/* A cluster id the shard accepts: 1..BF_CLUSTER_ID_MAX bytes, printable
 * ASCII 0x21..0x7e (URL-safe characters survive the SAN comparison). */
#define BF_CLUSTER_ID_MAX 253
bool bf_cluster_id_valid(const uint8_t *id, size_t len);

/* ================================================================ rollups */

/*
 * Conversion of one rollup (reference/shard.md §4.2 item 6, wire.md §3).
 *
 * Every CapacityNeed becomes a Need row:
 *   profile_ref   bf_nprofile_intern_need (requirements incl. Same and
 *                 spread canonicalised; priority; both penalty buckets,
 *                 whose dollar value is the bucket's upper bound; unknown
 *                 operators, when_unsatisfiable values or buckets reject);
 *   group_ref     the group bytes interned (0 = a plain Need);
 *   aggregate     aggregate_resources as a vector (quantities parsed);
 *   min_unit      min_unit as a vector;
 *   arrival_ns    ClusterCapacityNeeds.timestamp_unix_nanos when it lies in
 *                 [recv - BF_ROLLUP_MAX_AGE_NS, recv], else the receive time
 *                 (a peer cannot buy seniority with a timestamp in the past
 *                 or the future: docs/security.md);
 *   cluster_ref   the session's cluster.
 * Negative or unparseable quantities reject the whole rollup.
 *
 * Duplicate Needs (the same profile and group twice in one rollup) are
 * MERGED the way the operator's own aggregation would have built them:
 * aggregates summed (overflow rejects), min_unit the per-dimension maximum,
 * the earliest arrival (all rows of one rollup share it). Rows keep the
 * order of each key's first appearance. `merged` counts folded Needs.
 *
 * Shared tables are charged to the cluster (reference: docs/security.md
 * "Per-cluster quotas"): the rollup's Needs (max_rows), its distinct
 * groups, the bytes it adds to the shared string table, and resource
 * names: a name missing from the shard-wide dimension registry is NOT
 * registered here; it is listed in new_dims (its values ignored) and the
 * caller decides (quota), registers and converts again, so a rejected
 * rollup never registers a dimension.
 */
#define BF_ROLLUP_MAX_AGE_NS (60LL * 1000000000LL) /* oldest timestamp taken as arrival */
#define BF_ROLLUP_NEED_MAX   (1u << 20)            /* bytes of one CapacityNeed */
#define BF_ROLLUP_GROUP_MAX  (16u << 10)           /* bytes of one group id */

/* The Kubernetes resource names every shard registers at start (the
 * supervisor) and that never count against a cluster's dimension quota. */
#define BF_RESERVED_DIMS_N 4
extern const char *const bf_reserved_dims[BF_RESERVED_DIMS_N];
bool bf_dim_is_reserved(const char *name);

struct bf_rollup_limits {
    uint32_t max_rows;       /* Needs on the wire above this reject before decoding (-E2BIG) */
    uint32_t max_groups;     /* distinct non-empty groups; 0 = unlimited (-E2BIG) */
    uint64_t strtab_reserve; /* abandon when the string arena would keep less free (-ENOSPC) */
    uint64_t strtab_quota;   /* string-table bytes this rollup may add (-EDQUOT) */
    int32_t max_priority;    /* priorities above are clamped to it (counted) */
    int64_t recv_ns;         /* wall-clock receive time (arrival clamp); 0 = no clamp */
};

struct bf_rollup {
    struct bf_need_row *rows;
    uint32_t *fp_refs; /* fingerprint string ref per row (provisioning-latency stamps) */
    uint32_t n, cap;
    uint32_t needs_in;    /* CapacityNeeds on the wire */
    uint32_t merged;      /* duplicates folded into an earlier row */
    int64_t timestamp_ns; /* as sent */
    int64_t arrival_ns;   /* what the rows carry (see above) */
    bool timestamp_clamped;
    uint32_t priorities_clamped; /* Needs whose priority was above max_priority */
    uint32_t groups;             /* distinct non-empty groups */
    uint64_t strtab_added;       /* bytes this conversion added to the string table */
    uint64_t unknown_fields;     /* dropped while decoding Needs (bf_pb_unpack) */
    const char *over_quota;      /* on a quota rejection: "needs", "groups" or "strings" */
    bool repeated;               /* filled by bf_rollup_repeat (no conversion ran) */
    uint32_t n_new_dims;         /* resource names not in the registry (values ignored) */
    char new_dims[BF_MAX_DIMS][BF_DIM_NAME_MAX];
    /* private: dedup table (profile_ref, group_ref) -> row */
    uint64_t *dkeys;
    uint32_t *dvals;
    uint32_t dmask;
    /* private: distinct groups of this rollup */
    uint32_t *gset;
    uint32_t gmask;
    /* private: decode cache of wire profile bytes -> (profile_ref, fp_ref) */
    void *pcache;
};

void bf_rollup_init(struct bf_rollup *r);
void bf_rollup_free(struct bf_rollup *r);

/*
 * Decodes and converts a serialized ClusterCapacityNeeds into r (reset
 * first; its buffers are reused between calls). cluster_id: the session's
 * cluster; a rollup whose own cluster_id is set and differs is rejected.
 * lim: the cluster's quotas and the clamps (above). err names the
 * offending Need (index) and field, or the quota.
 * Errors: -EBADMSG (not a ClusterCapacityNeeds, or a Need that does not
 * decode), -EINVAL (validation: unknown enum value, bad or negative
 * quantity, empty or too long key, cluster id mismatch), -E2BIG (more
 * Needs than max_rows, more groups than max_groups, more than
 * BF_MAX_DIMS new resource names, a Need over BF_ROLLUP_NEED_MAX or a group
 * over BF_ROLLUP_GROUP_MAX, a Need that decodes past its allocation bound),
 * -EDQUOT (the string-table quota), -ERANGE (an aggregate overflows int64
 * milli-units), -ENOSPC (string table or reserve exhausted), -ETIMEDOUT
 * (string lock), -ENOMEM. On success with n_new_dims > 0 the rows lack
 * those dimensions: register them (or reject) and convert again.
 */
int bf_rollup_convert(struct bf_shm *s, const uint8_t *buf, size_t len, const char *cluster_id,
                      uint32_t cluster_ref, const struct bf_rollup_limits *lim, struct bf_rollup *r,
                      char *err, size_t errlen);

/*
 * Arrival of a rollup's Needs: timestamp_ns, or recv_ns when the timestamp
 * is in the future or older than BF_ROLLUP_MAX_AGE_NS before recv_ns
 * (*clamped set). recv_ns 0 = no clamp. Pure.
 */
int64_t bf_rollup_arrival(int64_t timestamp_ns, int64_t recv_ns, bool *clamped);

/* ------------------------------------------------ the unchanged-rollup path
 * Operators resend their whole demand every interval, and most rollups
 * repeat the previous one (nothing changed in the cluster; issue 18 target
 * 3: such a rollup costs <= 50 us to ingest). The ingest thread keeps, per
 * cluster, the digest of the last accepted rollup; a rollup with the same
 * digest converts to the same rows, so bf_rollup_repeat copies the published
 * rows instead of decoding and interning every Need again. Only the arrival
 * (the new timestamp) differs. */

/* A per-process random key: digests cannot be predicted by a peer, so a
 * peer cannot craft a rollup that collides with another of its own and
 * (the only effect) keep its previous rows. */
struct bf_rollup_digest_key {
    uint8_t secret[192]; /* XXH3 secret (>= XXH3_SECRET_SIZE_MIN bytes of entropy) */
};

struct bf_rollup_digest {
    uint64_t lo, hi;      /* 128-bit keyed XXH3; hi is never 0 for a computed digest */
    int64_t timestamp_ns; /* the rollup's timestamp_unix_nanos (last occurrence) */
};

/*
 * Digest of a serialized ClusterCapacityNeeds over every top-level field
 * except timestamp_unix_nanos (2), byte for byte in wire order: equal
 * digests mean equal bytes apart from the timestamp (up to a keyed 128-bit
 * hash collision). A different encoding of the same content is a different
 * digest (it then takes the full conversion, never a wrong result).
 * Errors: -EBADMSG (the top level does not parse), -EINVAL (bad key).
 * Pure; ~1 GB/s of scanning plus the hash.
 */
int bf_rollup_digest(const uint8_t *buf, size_t len, const struct bf_rollup_digest_key *key,
                     struct bf_rollup_digest *d);

/*
 * Fills r (reset first) with the n rows published at rows_off (the rows of
 * the cluster's last accepted rollup, which the caller proved this one
 * repeats) and their fingerprint refs (fp_refs, n entries, copied), every
 * row carrying the arrival of timestamp_ns under lim->recv_ns (see
 * bf_rollup_arrival; timestamp_clamped set as the conversion would).
 * needs_in, merged, priorities_clamped and unknown_fields are left 0: the
 * caller restores the figures of the conversion it repeats. Sets repeated.
 * Reads the rows segment only (s: the session's mapping). Errors: -ENOMEM.
 */
int bf_rollup_repeat(const struct bf_shm *s, uint32_t rows_off, uint32_t n, const uint32_t *fp_refs,
                     int64_t timestamp_ns, const struct bf_rollup_limits *lim, struct bf_rollup *r);

/* ================================================================ rail 2 */

#define BF_RAIL2_MIN_ROWS       10  /* baseline floor (accepted rows) */
#define BF_RAIL2_KEEP_PER_MILLE 100 /* suspicious when new < 10 % of the baseline */
#define BF_RAIL2_CONFIRMATIONS  3   /* consecutive suspicious rollups that confirm */

enum bf_rail2_verdict {
    BF_RAIL2_ACCEPT = 0,          /* not suspicious (or the guard is off) */
    BF_RAIL2_HOLD = 1,            /* suspicious: held, demand unchanged */
    BF_RAIL2_ACCEPT_CONFIRMED = 2 /* the 3rd consecutive suspicious rollup: accepted */
};

/*
 * ADR-0046 rail 2 (reference/shard.md §6.3). Rows are the CapacityNeeds of
 * the rollup as received (struct bf_rollup.needs_in), before duplicates
 * merge, as Go's ApplyRollup admits len(ns) (docs/fidelity.md item 6).
 * State per cluster: the
 * accepted baseline (rows of the last accepted rollup) and the count of
 * consecutive held rollups. A rollup is suspicious iff the guard is on,
 * baseline >= 10 and new_rows * 1000 < baseline * 100. Accept: baseline =
 * new_rows, held = 0. Suspicious: held + 1; at 3 accept (baseline reset,
 * held = 0), else hold. Returns the verdict and updates the state.
 */
int bf_rail2_admit(bool guard_on, uint32_t *baseline, uint8_t *held, uint32_t new_rows);

/* ================================================================ arena */

/* One extent of the shared row arena: rows [off, off + len). */
struct bf_extent {
    uint32_t off;
    uint32_t len;
};

/*
 * First-fit allocator over `capacity` rows with a sorted, coalesced free
 * list. Private to the single writer of the arena (the ingest thread);
 * rebuilt from the published cluster rows after a session restart.
 */
struct bf_arena {
    uint32_t capacity;
    uint32_t n_free, cap_free;
    struct bf_extent *free; /* sorted by off, no two adjacent */
    uint32_t free_rows;
};

/* Errors: -EINVAL (capacity 0), -ENOMEM. */
int bf_arena_init(struct bf_arena *a, uint32_t capacity);
void bf_arena_destroy(struct bf_arena *a);
/* Everything free except the given live extents (any order; len 0 ignored).
 * Errors: -EINVAL (an extent outside the arena or two overlapping),
 * -ENOMEM. On error the arena is left all-free. */
int bf_arena_rebuild(struct bf_arena *a, const struct bf_extent *live, uint32_t n_live);
/* Lowest-addressed free extent of len rows (len 0: *off = 0, no-op).
 * Errors: -ENOSPC (no free run that long), -ENOMEM. */
int bf_arena_alloc(struct bf_arena *a, uint32_t len, uint32_t *off);
/* Highest-addressed fit: the top end of the highest free run of len rows.
 * Alternating ends per replacement keeps large extents against the ends of
 * the arena, so a cluster replacing a large rollup always finds room on the
 * other side. -ENOSPC, -ENOMEM. */
int bf_arena_alloc_high(struct bf_arena *a, uint32_t len, uint32_t *off);
/* Same as bf_arena_alloc, only if it starts below `below`; -ENOSPC otherwise. */
int bf_arena_alloc_below(struct bf_arena *a, uint32_t len, uint32_t below, uint32_t *off);
/* Returns an extent (len 0: no-op). Errors: -EINVAL (outside the arena or
 * overlapping free space: a double free), -ENOMEM. */
int bf_arena_release(struct bf_arena *a, uint32_t off, uint32_t len);
/* Longest free run. */
uint32_t bf_arena_largest(const struct bf_arena *a);

/* One relocation planned by bf_arena_compact: the live extent `idx` moves
 * from rows [from, from + len) to [to, to + len). */
struct bf_arena_move {
    uint32_t idx;
    uint32_t from, to, len;
};
/*
 * Makes room for `want` rows when the free space is fragmented: visits the
 * live extents (live[i].idx names the owner) by increasing offset and moves
 * each one to the lowest free run below it that can hold it, until a run of
 * `want` rows is free; then allocates it (*off). The allocator is updated
 * as if every move were done (the destination allocated, the source
 * released); moves[] (capacity n_live) lists them in order. The caller must
 * execute them in that order — copy the rows, republish the owner with the
 * new offset — before writing into *off: a later move may land in an
 * earlier move's source, which is safe once that owner was republished.
 * Returns the number of moves (>= 0) with *off set, or -ENOSPC when even
 * after compaction no run is long enough (the moves already planned are
 * valid and must still be executed; *moved gets their count), -ENOMEM.
 */
struct bf_arena_live {
    uint32_t idx;
    uint32_t off, len;
};
int bf_arena_compact(struct bf_arena *a, struct bf_arena_live *live, uint32_t n_live, uint32_t want,
                     struct bf_arena_move *moves, uint32_t *moved, uint32_t *off);

/* ================================================================ outbox */

/*
 * A session's outbox in front of the transport (seed 000 §5, wire.md §2):
 *
 *   frames  a FIFO of encoded, non-coalescable ShardMessages (Acks,
 *           BootstrapRequests, ReclaimInstructions), bounded by bytes and
 *           count. Over the bound the push fails (-ENOBUFS): such frames
 *           are never dropped silently, the caller closes the stream of an
 *           operator that does not read.
 *   keyed   a coalescing map supersedes_key -> latest value, in the order
 *           keys were first queued (NodeStateUpdate "node:<id>",
 *           AvailableCapacityUpdate "available:<fp>"). A newer value for a
 *           queued key replaces it in place (counted as coalesced). Values
 *           are small fixed records (<= BF_OUTBOX_VAL_MAX bytes) encoded into
 *           frames only when the transport takes them, so memory is bounded
 *           by the number of distinct keys, never by the event rate. Over
 *           max_keys a new key is dropped (counted).
 *
 * bf_outbox_next() yields frames first (latency-critical), then keyed
 * values. Single-threaded. All memory is released by bf_outbox_reset().
 */
#define BF_OUTBOX_VAL_MAX 64

struct bf_outbox_frame;
struct bf_outbox_keyed;

struct bf_outbox_limits {
    size_t max_frame_bytes; /* sum of queued frame bytes */
    uint32_t max_frames;
    uint32_t max_keys;
};

struct bf_outbox {
    struct bf_outbox_limits lim;
    struct bf_outbox_frame *head, *tail;
    size_t frame_bytes;
    uint32_t n_frames;
    struct bf_outbox_keyed *kd; /* NULL until the first keyed value */
    uint64_t coalesced;         /* keyed values replaced in place */
    uint64_t dropped;           /* keyed values refused (max_keys) */
};

enum bf_outbox_kind { BF_OUTBOX_EMPTY = 0, BF_OUTBOX_FRAME = 1, BF_OUTBOX_KEYED = 2 };

struct bf_outbox_item {
    int kind;            /* enum bf_outbox_kind */
    const uint8_t *data; /* frame bytes, or the keyed value */
    size_t len;
    uint64_t key; /* keyed only */
};

void bf_outbox_init(struct bf_outbox *o, const struct bf_outbox_limits *lim);
/* Frees everything queued. */
void bf_outbox_reset(struct bf_outbox *o);
/* Queues a copy of an encoded frame. 0, -ENOBUFS (over max_frames or
 * max_frame_bytes: nothing queued), -ENOMEM. */
int bf_outbox_push_frame(struct bf_outbox *o, const void *data, size_t len);
/* Queues or replaces the value of key (len <= BF_OUTBOX_VAL_MAX). Returns 0
 * (new key), 1 (replaced a queued value), -ENOBUFS (max_keys reached: the
 * value is dropped and counted), -EINVAL (len too big), -ENOMEM. */
int bf_outbox_put_keyed(struct bf_outbox *o, uint64_t key, const void *val, size_t len);
/* The next item without removing it (kind EMPTY when nothing is queued).
 * Pointers stay valid until the next call that modifies o. */
void bf_outbox_peek(const struct bf_outbox *o, struct bf_outbox_item *it);
/* Removes the item bf_outbox_peek returned. */
void bf_outbox_pop(struct bf_outbox *o);
/* Items queued (frames + keys) and the memory they hold, in bytes. */
uint32_t bf_outbox_count(const struct bf_outbox *o);
size_t bf_outbox_bytes(const struct bf_outbox *o);

#endif /* BIGFLEET_SESSION_H */
