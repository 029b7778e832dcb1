/*
 * bigfleet/outbox.h — the per-session outbox: a bounded FIFO of frames plus a
 * coalescing map keyed by supersedes_key (reference/shard.md §4).
 * Implemented in src/session/outbox.c.
 *
 * Part of the session module (src/session/, docs/internals.md "Layers");
 * single-threaded state owned by its caller. Errors are negative errno
 * values, listed per function.
 */
#ifndef BIGFLEET_OUTBOX_H
#define BIGFLEET_OUTBOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

#endif /* BIGFLEET_OUTBOX_H */
