/*
 * bigfleet/rollup.h — rollup conversion: ClusterCapacityNeeds -> Need rows
 * (profile and fingerprint interned, group interned, aggregate/min_unit
 * vectors, duplicates merged, bad input rejected with a message), the
 * unchanged-rollup path, and rail 2, the empty-rollup quarantine (ADR-0046,
 * shard.md §6.3). Implemented in src/session/rollup.c. The functions that
 * take a struct bf_shm only intern strings and register resource
 * dimensions (both safe from any thread of the session process: the string
 * lock is a CAS on the shared lock word).
 *
 * Part of the session module (src/session/, docs/internals.md "Layers");
 * single-threaded state owned by its caller. Errors are negative errno
 * values, listed per function.
 */
#ifndef BIGFLEET_ROLLUP_H
#define BIGFLEET_ROLLUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bigfleet/shm.h"

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
    /* an incremental conversion of at least this many Needs defers the
     * dedup of its converted rows (rollup.c: the result is the same);
     * 0 = 8192 (tests and fuzzing set it low) */
    uint32_t defer_min_needs;
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
    bool repeated;               /* filled by bf_rollup_repeat(_meta) (no conversion ran) */
    uint32_t n_new_dims;         /* resource names not in the registry (values ignored) */
    char new_dims[BF_MAX_DIMS][BF_DIM_NAME_MAX];
    /* private: dedup table (profile_ref, group_ref) -> row: hash tag << 32 | row + 1 */
    uint64_t *dkeys;
    uint32_t dmask;
    /* private: distinct groups of this rollup */
    uint32_t *gset;
    uint32_t gmask;
    /* private: decode cache of wire profile bytes -> (profile_ref, fp_ref) */
    void *pcache;
    /* bf_rollup_convert_incremental only (else left as they are):
     * needs_memo[needs_in] describes every Need of an accepted conversion
     * (what the next conversion of the cluster may reuse); reused counts the
     * Needs this one took from prev instead of converting them */
    struct bf_rollup_need_memo *needs_memo;
    size_t needs_memo_cap;
    uint32_t reused;
    /* bf_rollup_convert_incremental only: its fast pass checked converted
     * rows for duplicates after the pass (limits.defer_min_needs), and a
     * second, plain pass ran (a duplicate or a reused Need met, or an error) */
    bool dedup_deferred;
    bool plain_pass;
    /* private: per row, whether a second Need merged into it and whether a
     * converted (not reused) Need made it; the index of prev's Needs by
     * hash; per prev row, the row it was reused as + 1 */
    uint8_t *row_multi;
    uint32_t *pidx;
    uint32_t pmask;
    uint32_t *prev_used;
    uint32_t prev_used_cap;
    /* private: bf_rollup_digest_needs filled needs_memo[0..hashed_n) with the
     * Needs' hashes and lengths of the rollup at hashed_buf (hashed_len
     * bytes); the next conversion of those bytes takes them instead of
     * hashing every Need again, nor walking the top level for its count,
     * cluster_id and timestamp (hashed_cid*, hashed_ts: what
     * bf_rollup_scan_top finds); any conversion clears hashed_buf */
    const uint8_t *hashed_buf;
    size_t hashed_len;
    uint32_t hashed_n;
    const uint8_t *hashed_cid;
    size_t hashed_cid_len;
    int64_t hashed_ts;
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

/* ------------------------------------------------ incremental conversion
 * Operators resend full-replacement rollups in which usually few Needs
 * differ from the cluster's last accepted rollup (a count moves). A Need
 * whose encoded bytes equal a Need of that rollup converts to the same row
 * values (profile, fingerprint, group, vectors: interned strings and
 * registered resource names never change meaning), so its row is taken
 * from the published rows instead of being parsed, validated and interned
 * again; only the other Needs are converted. Duplicate merging, group
 * counting, the group quota and priority-clamp counting run over every
 * Need as in the full conversion, so the result (rows, fp_refs, n, merged,
 * groups, priorities_clamped, errors and messages) is the full
 * conversion's, byte for byte, with the profile cache warm (issue 18
 * target 3). */

struct bf_rollup_digest_key; /* below */

/* One Need of an accepted rollup. h: keyed XXH3-64 of the Need's bytes
 * (the key of bf_rollup_digest_key: a peer cannot craft two Needs with one
 * hash); len: their length; row: the row it became, or BF_ROLLUP_NO_ROW
 * when another Need merged into that row (its own values are then not
 * recoverable: such a Need is converted again), with
 * BF_ROLLUP_MEMO_CLAMPED set when its priority was clamped. */
struct bf_rollup_need_memo {
    uint64_t h;
    uint32_t len;
    uint32_t row;
};
#define BF_ROLLUP_NO_ROW       0x7fffffffu
#define BF_ROLLUP_MEMO_ROW(x)  ((x)&0x7fffffffu)
#define BF_ROLLUP_MEMO_CLAMPED 0x80000000u

/* The cluster's last accepted rollup: its Needs (needs_memo of that
 * conversion, n_needs entries) and the rows it produced (n_rows rows with
 * their fp_refs): in memory at rows, or, when rows is NULL, published in
 * s's rows segment at rows_off. Valid only while those rows are what that
 * conversion produced under the same max_priority and for the same
 * cluster_ref (the caller checks: src/session/ingest.c struct repeat_memo). */
struct bf_rollup_prev {
    const struct bf_rollup_need_memo *needs;
    uint32_t n_needs;
    const struct bf_need_row *rows;
    uint32_t rows_off;
    const uint32_t *fp_refs;
    uint32_t n_rows;
};

/*
 * bf_rollup_convert, reusing the rows of prev's Needs whose bytes this
 * rollup repeats (matched at the position after the last match first, then
 * by hash over all of prev; prev NULL or empty: a full conversion), and on
 * success filling r->needs_memo (needs_in entries, hashed with key) and
 * r->reused. Same results and errors as bf_rollup_convert (above); a Need
 * not in prev, including any malformed one, is converted and checked in
 * full. Costs one keyed hash per Need more than bf_rollup_convert when
 * nothing is reused. Reused rows skip the dedup table; when a converted
 * Need has the profile and group of a reused one, or the rollup is
 * rejected, the conversion runs again with every row in the table (two
 * passes: a rejected rollup costs up to twice its conversion).
 * Errors: those of bf_rollup_convert.
 */
int bf_rollup_convert_incremental(struct bf_shm *s, const uint8_t *buf, size_t len,
                                  const char *cluster_id, uint32_t cluster_ref,
                                  const struct bf_rollup_limits *lim,
                                  const struct bf_rollup_digest_key *key,
                                  const struct bf_rollup_prev *prev, struct bf_rollup *r, char *err,
                                  size_t errlen);

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
 * digest converts to the same rows, so the published rows are republished
 * as they are, with the new arrival in the cluster row
 * (bf_rollup_repeat_meta), instead of decoding and interning every Need
 * again. Only the arrival (the new timestamp) differs. */

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
 * except timestamp_unix_nanos (2), in wire order: a Need (3) enters as its
 * keyed XXH3-64 hash and length (the hash of bf_rollup_need_memo, which
 * the incremental conversion already trusts to reuse a Need's row), any
 * other field as its bytes; the whole is hashed with keyed XXH3-128. Equal
 * digests mean the same top-level fields in the same order apart from the
 * timestamp: each Need matched by its 64-bit keyed hash and its length, every
 * other field by its raw bytes, tag and length prefix included (up to a
 * keyed hash collision a peer cannot aim at: it does not know the key). A
 * Need's own tag and length prefix do not enter: one sent with a longer
 * (non-minimal) tag or length varint digests like the minimal one, which is
 * right, since the conversion reads the same payload either way; any other
 * difference in encoding is a different digest (it then takes the full
 * conversion, never a wrong result).
 * Errors: -EBADMSG (the top level does not parse), -EINVAL (bad key).
 * Pure.
 */
int bf_rollup_digest(const uint8_t *buf, size_t len, const struct bf_rollup_digest_key *key,
                     struct bf_rollup_digest *d);

/*
 * bf_rollup_digest, and the keyed hash and length of every Need kept in
 * r->needs_memo (row BF_ROLLUP_NO_ROW) for the conversion of these same
 * bytes that follows (bf_rollup_convert_incremental into r, with the same
 * key): it then does not hash the Needs again nor walk the top level to
 * count them (a 7 MB rollup's pass and walk less). Kept only for a top
 * level bf_rollup_scan_top accepts (else the conversion rejects it with its
 * own message, as before). Kept only for at most max_needs Needs (the memo
 * grows by doubling, bf_grow, to fewer than 2 x max_needs entries of 16
 * bytes, or 8; a rollup with more Needs is refused by the conversion
 * anyway) and when memory allows; otherwise the
 * conversion hashes as before. The digest is the same either way. Any
 * conversion into r, and a repeat (bf_rollup_repeat_meta, bf_rollup_repeat),
 * consumes the hashes (a later rollup in the same buffer is never taken for
 * this one).
 */
int bf_rollup_digest_needs(const uint8_t *buf, size_t len, const struct bf_rollup_digest_key *key,
                           uint32_t max_needs, struct bf_rollup *r, struct bf_rollup_digest *d);

/*
 * The figures of a repeat of the n rows the cluster published last, without
 * the rows: r is reset, then n, timestamp_ns and arrival_ns (of
 * timestamp_ns under lim->recv_ns, bf_rollup_arrival; timestamp_clamped set
 * as the conversion would) are filled and repeated is set; r->rows and
 * r->fp_refs are left as they are (not this rollup's). needs_in, merged,
 * priorities_clamped and unknown_fields are left 0: the caller restores the
 * figures of the conversion it repeats. The ingest thread then republishes
 * the same extent with arrival_ns in the cluster row
 * (bf_cluster_rec.rows_arrival_ns): no row is copied (issue 18 target 3).
 * Pure.
 */
void bf_rollup_repeat_meta(uint32_t n, int64_t timestamp_ns, const struct bf_rollup_limits *lim,
                           struct bf_rollup *r);

/*
 * bf_rollup_repeat_meta, plus the rows as readers see them after that
 * republish (bf_needs_copy applies rows_arrival_ns): the n rows published at
 * rows_off, every one carrying arrival_ns, and their fingerprint refs
 * (fp_refs, n entries, copied). The reference the unit tests and
 * fuzz_rollup compare with the full conversion of the repeated bytes.
 * Reads the rows segment only (s: a mapping of it). Errors: -ENOMEM.
 */
int bf_rollup_repeat(const struct bf_shm *s, uint32_t rows_off, uint32_t n, const uint32_t *fp_refs,
                     int64_t timestamp_ns, const struct bf_rollup_limits *lim, struct bf_rollup *r);

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

#endif /* BIGFLEET_ROLLUP_H */
