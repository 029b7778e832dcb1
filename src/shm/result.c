/*
 * result.c — the publish protocol of the cycle's results (bigfleet/shm.h,
 * "Cycle results"): one writer (the cycle), any number of readers (session,
 * bigfleet-inspect), two buffers, one sequence counter.
 *
 * Why a copy is good when publish_seq moved by less than 2: the writer
 * makes the counter odd (s+1), fills buffer published^1, flips `published`
 * and makes it even (s+2). A reader that saw s0 and copied buffer p:
 *   - s0 even (= s), p the published buffer: the next publish writes the
 *     other buffer; p is rewritten only by the publish after it, which
 *     first stores s+3;
 *   - s0 odd (= s+1), p not flipped yet: p is the published buffer of the
 *     publish in progress' predecessor, next rewritten by the publish after
 *     the one in progress, which first stores s+3;
 *   - s0 odd, p already flipped: p was completely written before the flip
 *     (release/acquire on `published`) and is rewritten from s+5 on.
 * In every case a re-read counter below s0 + 2 proves no rewrite of p began
 * before the copy ended (the acquire fence orders the copy's loads before
 * the re-read). The rule never makes the writer wait.
 */
#include <errno.h>
#include <string.h>

#include "bigfleet/shm.h"

uint32_t bf_verdict_rows_backed(const struct bf_shm *s, uint32_t b)
{
    uint64_t rows = bf_shm_grown(s, BF_SEG_STATE) / sizeof(struct bf_verdict_row);
    b &= 1u;
    uint64_t n = rows > b ? (rows - b + 1) / 2 : 0; /* i with 2i + b < rows */
    return n < s->max_needs ? (uint32_t)n : s->max_needs;
}

uint32_t bf_verdict_rows_reserve(struct bf_shm *s, uint32_t b, uint32_t n)
{
    if (n > s->max_needs)
        n = s->max_needs;
    if (n && bf_shm_grow(s, BF_SEG_STATE,
                         (uint64_t)(bf_verdict_index(b, n - 1) + 1) *
                             sizeof(struct bf_verdict_row)) != 0) {
        uint32_t have = bf_verdict_rows_backed(s, b);
        n = n < have ? n : have;
    }
    return n;
}

uint32_t bf_result_publish_begin(struct bf_shm *s, uint64_t *seq)
{
    struct bf_state_main *st = s->st;
    *seq = atomic_load_explicit(&st->publish_seq, memory_order_relaxed);
    atomic_store_explicit(&st->publish_seq, *seq + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release); /* odd before any buffer store */
    return (atomic_load_explicit(&st->published, memory_order_relaxed) ^ 1u) & 1u;
}

void bf_result_publish_end(struct bf_shm *s, uint32_t buffer, uint64_t seq)
{
    struct bf_state_main *st = s->st;
    atomic_store_explicit(&st->published, buffer, memory_order_release);
    atomic_store_explicit(&st->publish_seq, seq + 2, memory_order_release);
}

void bf_result_read_begin(const struct bf_shm *s, struct bf_result_read *r)
{
    const struct bf_state_main *st = s->st;
    r->seq = atomic_load_explicit(&st->publish_seq, memory_order_acquire);
    r->buffer = atomic_load_explicit(&st->published, memory_order_acquire) & 1u;
}

bool bf_result_read_valid(const struct bf_shm *s, const struct bf_result_read *r)
{
    atomic_thread_fence(memory_order_acquire); /* the copy's loads before the re-read */
    uint64_t now = atomic_load_explicit(&s->st->publish_seq, memory_order_relaxed);
    return now - r->seq < 2;
}

int bf_result_read(const struct bf_shm *s, struct bf_cycle_result *out, uint32_t *retries)
{
    uint32_t again = 0;
    for (int t = 0; t < BF_RESULT_READ_TRIES; t++) {
        struct bf_result_read r;
        bf_result_read_begin(s, &r);
        bf_shm_load_words(out, &s->st->result[r.buffer], sizeof *out);
        if (bf_result_read_valid(s, &r)) {
            if (retries)
                *retries = again;
            return 0;
        }
        again++;
    }
    if (retries)
        *retries = again;
    memset(out, 0, sizeof *out);
    return -EAGAIN;
}
