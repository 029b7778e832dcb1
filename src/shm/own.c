/*
 * own.c — the cycle's publish of its bounded ownership tables (the pending
 * reservations and assigned domains of ADR-0055, st->own from
 * n_pub_reservations on) for bigfleet-inspect: one writer (the cycle), a
 * seqlock over the tables, readers that retry a bounded number of times and
 * never make the writer wait. The counters before `seq` in st->own are
 * statistics (BF_STAT_*), not covered by it.
 *
 * Writer: seq odd (relaxed), release fence (W1: before any table store),
 * relaxed word stores, seq even (release, W3). Reader: acquire load of an
 * even seq (R1, pairs with W3), relaxed word loads, acquire fence (R2,
 * pairs with W1), relaxed re-load equal to the first: no write overlapped
 * the copy. The recipe of shm_internal.h on a 64-bit seq.
 */
#include <errno.h>

#include "shm_internal.h"

void bf_own_tables_publish(struct bf_shm *s, const void *tables)
{
    struct bf_ownership_state *o = &s->st->own;
    uint64_t seq = atomic_load_explicit(&o->seq, memory_order_relaxed);
    atomic_store_explicit(&o->seq, seq + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release); /* W1 */
    bf_shm_store_words((uint8_t *)o + BF_OWN_TABLES_OFF, tables, BF_OWN_TABLES_BYTES);
    atomic_store_explicit(&o->seq, seq + 2, memory_order_release); /* W3 */
}

int bf_own_tables_read(const struct bf_shm *s, void *out)
{
    const struct bf_ownership_state *o = &s->st->own;
    for (unsigned t = 0; t < BF_OWN_READ_TRIES; t++) {
        uint64_t q0 = atomic_load_explicit(&o->seq, memory_order_acquire); /* R1 */
        if (!(q0 & 1)) {
            bf_shm_load_words(out, (const uint8_t *)o + BF_OWN_TABLES_OFF, BF_OWN_TABLES_BYTES);
            atomic_thread_fence(memory_order_acquire); /* R2 */
            if (atomic_load_explicit(&o->seq, memory_order_relaxed) == q0)
                return 0;
        }
        bf_backoff(t);
    }
    return -EAGAIN;
}
