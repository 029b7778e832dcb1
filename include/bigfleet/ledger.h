/*
 * bigfleet/ledger.h — reading the cycle's published results (verdict
 * ledger, shortfall ledger, inventory counts) from the state segment, and
 * encoding the verdict ledger as ShardRead/InspectNeeds frames
 * (seeds/003 ADR-0061 + amendment, reference/shard.md §5, wire.md §5).
 *
 * The publish protocol is bigfleet/shm.h's "Cycle results" (one
 * implementation, src/shm/result.c): copies are retried at most
 * BF_RESULT_READ_TRIES times. The reader never writes anything and never
 * makes the cycle wait ("build then swap; a reader never blocks the
 * cycle").
 *
 * Everything here only reads shared memory: safe on a read-only
 * attachment and from any process. The encoders use a struct
 * bf_blob_cache, which is not thread-safe (one per thread).
 *
 * Errors are negative errno values, listed per function.
 */
#ifndef BIGFLEET_LEDGER_H
#define BIGFLEET_LEDGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bigfleet/blobs.h"
#include "bigfleet/shm.h"

/* The published cycle result itself: bf_result_read (bigfleet/shm.h). */

/* A private copy of (part of) one published verdict ledger. */
struct bf_ledger_snapshot {
    uint64_t cycle;              /* 0: nothing published yet ("not yet computed") */
    int64_t computed_at_ns;      /* wall clock of the publish; 0 when cycle is 0 */
    uint32_t total;              /* rows matching the filter, before the limit */
    uint32_t n;                  /* rows copied: min(total, limit) */
    struct bf_verdict_row *rows; /* malloc'd [n], in ledger order */
    uint32_t cap;
};

/* Which rows to copy. */
struct bf_ledger_filter {
    bool by_cluster;      /* only rows whose cluster_ref == cluster_ref */
    uint32_t cluster_ref; /* with by_cluster; a ref that is in no row selects nothing */
    uint32_t limit;       /* 0 = no cap: copy every matching row */
    uint32_t max_rows;    /* memory bound: 0 = none; more rows to copy -> -ENOBUFS */
};

/*
 * Copies the rows of the published verdict ledger that pass f, in ledger
 * order, plus the cycle number and timestamp they belong to. The ledger is
 * published in the engine's verdict order, which is the NeedsTable
 * snapshot order (priority desc, arrival asc, cluster id asc, rollup
 * order; engine.h struct bf_engine_verdict), so the first `limit` matching
 * rows are the ones a client asked for and the copy never sorts.
 * The rows are copied whole (struct bf_verdict_row); string refs in them
 * stay valid for the life of the segments.
 * Work: one pass over the published rows (a 4-byte load per row when
 * filtering), copying only the rows kept.
 * Returns 0, -EAGAIN (BF_RESULT_READ_TRIES copies all overlapped two
 * publishes), -ENOBUFS (more than f->max_rows rows to copy), -ENOMEM.
 * snap is reset first; free it with bf_ledger_snapshot_free (also after
 * an error). *retries (may be NULL) gets the repeated copies.
 */
int bf_ledger_snapshot(const struct bf_shm *s, const struct bf_ledger_filter *f,
                       struct bf_ledger_snapshot *snap, uint32_t *retries);
void bf_ledger_snapshot_free(struct bf_ledger_snapshot *snap);

/* A growable byte buffer for encoded frames (reused across frames). */
struct bf_ledger_buf {
    uint8_t *data;
    size_t len, cap;
};
void bf_ledger_buf_free(struct bf_ledger_buf *b);

/*
 * InspectNeedsResponse{header: {cycle, computed_at_unix_nanos, total_needs}}
 * into b (replacing its contents). total_needs saturates at INT32_MAX.
 * 0 or -ENOMEM.
 */
int bf_ledger_encode_header(uint64_t cycle, int64_t computed_at_ns, uint32_t total_needs,
                            struct bf_ledger_buf *b);

/*
 * InspectNeedsResponse{need: NeedView} for one verdict row into b
 * (replacing its contents). NeedView, field by field (wire.md §5):
 *   need                 CapacityNeed rebuilt from the need profile blob
 *                        (canonical requirements, spread, priority, both
 *                        buckets), aggregate_resources and min_unit as
 *                        quantity maps over the shared dimension registry
 *                        (zero dimensions omitted), group bytes;
 *   cluster_id, arrival_unix_nanos, profile_fingerprint (the blob's),
 *   satisfied, claimed/bootstrap/provision counts, same_domain,
 *   same_satisfiable, acquisition_parked, parked_age_cycles,
 *   age_cycles_unmet, unmet_reason       copied from the row;
 *   residual_deficit     only when unsatisfied and non-empty;
 *   matching_supply      only for unsatisfied rows the engine counted;
 *   preemption           only when victims_found > 0 (capacity_freed only
 *                        when non-empty);
 *   same_candidates      the row's candidates, best first (as published).
 * Returns 0; 1 when the need profile blob does not decode (the frame is
 * still encoded, without requirements, spread, priority, buckets or
 * fingerprint: the caller counts it); -ENOMEM.
 */
int bf_ledger_encode_need(const struct bf_shm *s, struct bf_blob_cache *c,
                          const struct bf_verdict_row *row, struct bf_ledger_buf *b);

#endif /* BIGFLEET_LEDGER_H */
