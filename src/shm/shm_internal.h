/*
 * shm_internal.h — private helpers of src/shm: memory-ordering primitives and
 * the seqlock recipes (reference/aesthetics.md §2.2). This is the only place
 * in the shm module where orderings are spelled out; each barrier names its
 * partner.
 */
#ifndef BF_SHM_INTERNAL_H
#define BF_SHM_INTERNAL_H

#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>

#include "bigfleet/shm.h"

static inline void bf_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    atomic_signal_fence(memory_order_seq_cst);
#endif
}

/* Backoff for bounded waits: spin first, then yield the CPU. */
static inline void bf_backoff(unsigned attempt)
{
    if (attempt < 32)
        bf_cpu_relax();
    else
        sched_yield();
}

/*
 * Seqlock read of n payload words.
 *   R1: acquire load of seq pairs with the writer's release store of the even
 *       seq (W3): seeing it makes every payload store before W3 visible.
 *   R2: acquire fence after the relaxed payload loads pairs with the writer's
 *       release fence after its odd store (W1): if any load saw a store of an
 *       in-progress write, the re-load of seq sees the odd value (or later).
 * Returns 0, or -EAGAIN after `tries` attempts; *retries counts failed tries.
 */
static inline int bf_seq_read(const _Atomic uint32_t *seq, const _Atomic uint64_t *w, int n,
                              uint64_t *out, unsigned tries, uint32_t *seq_out, uint64_t *retries)
{
    for (unsigned t = 0; t < tries; t++) {
        uint32_t s0 = atomic_load_explicit(seq, memory_order_acquire); /* R1 */
        if (s0 & 1u) {
            (*retries)++;
            bf_backoff(t);
            continue;
        }
        for (int i = 0; i < n; i++)
            out[i] = atomic_load_explicit(&w[i], memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire); /* R2 */
        if (atomic_load_explicit(seq, memory_order_relaxed) == s0) {
            if (seq_out)
                *seq_out = s0;
            return 0;
        }
        (*retries)++;
    }
    return -EAGAIN;
}

/* Writer side after acquiring ownership: seq -> odd, then
 *   W1: release fence (pairs with R2) before any payload store. */
static inline uint32_t bf_seq_write_begin(_Atomic uint32_t *seq)
{
    uint32_t s = atomic_load_explicit(seq, memory_order_relaxed);
    atomic_store_explicit(seq, s + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release); /* W1 */
    return s + 1;
}

/* W3: release store of the even seq (pairs with R1). */
static inline void bf_seq_write_end(_Atomic uint32_t *seq, uint32_t odd)
{
    atomic_store_explicit(seq, odd + 1, memory_order_release); /* W3 */
}

static inline void bf_store_payload(_Atomic uint64_t *w, const uint64_t *in, int n)
{
    for (int i = 0; i < n; i++)
        atomic_store_explicit(&w[i], in[i], memory_order_relaxed);
}

/* The arena's published end, never past what the file backs (committed,
 * published before any entry it holds) nor the reserve: readers of a
 * corrupted segment (bigfleet-inspect on a damaged file) must not be led
 * outside it. */
static inline uint64_t bf_arena_published_end(const struct bf_shm *s)
{
    uint64_t used = atomic_load_explicit(&s->inv->strtab.arena_used, memory_order_acquire);
    uint64_t committed =
        atomic_load_explicit(&s->inv->strtab.arena_committed, memory_order_acquire);
    if (used > committed)
        used = committed;
    return used < s->arena_bytes ? used : s->arena_bytes;
}

/* Arena growth: at least this much, or an eighth of what is backed. */
#define BF_ARENA_STEP (1u << 20)

/* Is the process alive? (kill(pid, 0) != ESRCH) */
int bf_pid_alive(uint32_t pid);

/*
 * Backs bytes [from, to) of a segment file with memory: fallocate(2), so a
 * full tmpfs answers ENOSPC here instead of SIGBUS at the first store into
 * a page ftruncate(2) only promised; ftruncate only where the file system
 * does not support fallocate. Never shrinks the file. 0 or -ENOSPC (full,
 * or RLIMIT_FSIZE) / -errno. [the table's one writer]
 */
int bf_shm_file_back(int fd, uint64_t from, uint64_t to);

/* Layout of one segment: offsets/lengths of its tables and total size. */
struct bf_layout {
    uint64_t off[BF_SEG_MAX_TABLES];
    uint64_t len[BF_SEG_MAX_TABLES];
    uint64_t total; /* the file at creation */
    uint64_t map;   /* the mapping (the inventory's: with the arena's reserve) */
    uint32_t index_capacity, changelog_capacity, stamp_capacity;
    int grow_table;        /* the last table, grown with use (bf_shm_grow), or -1 (the
                              inventory's arena is not: strtab.c keeps its own count) */
    uint64_t grow_commit;  /* that table's first backed bytes */
    uint64_t arena_bytes;  /* the arena's reserve */
    uint64_t arena_commit; /* the arena's first backed bytes */
    uint64_t ring_cap[BF_RING_COUNT];
    uint32_t ring_slot[BF_RING_COUNT];
};
int bf_layout_compute(int kind, const struct bf_shm_caps *caps, struct bf_layout *L);
extern const uint8_t bf_ring_kind[BF_RING_COUNT];
extern const uint8_t bf_ring_producer[BF_RING_COUNT];
extern const uint8_t bf_ring_consumer[BF_RING_COUNT];

#endif
