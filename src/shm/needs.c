/*
 * needs.c — the cluster table (seqlock latches) and the need-row arena.
 *
 * Synchronisation:
 *  - A cluster row is a latch (two payload copies selected by seq & 1). The
 *    session (sole writer) makes seq odd, writes copy 0, makes seq even,
 *    writes copy 1. Readers copy `seq & 1`, then re-check seq (the
 *    acquire/fence recipe of shm_internal.h); they never wait for a writer.
 *  - Rows are written by the session only into arena extents no published
 *    cluster points at, and become visible through the cluster publish.
 *    bf_needs_copy re-checks the cluster's seq after copying rows: an extent
 *    can only be reused after the cluster that owned it was re-published, so
 *    a reader racing a reuse always sees its cluster's seq move and retries.
 *  - A repeated rollup is republished on the same extent (the rows do not
 *    change) with generation + 1 and its arrival in the cluster row
 *    (rows_arrival_ns), which bf_needs_copy applies to the copied rows.
 *  - The row arena grows with use (bf_needs_rows_reserve, bf_shm_grow): the
 *    session backs an extent before it writes it, readers never copy a
 *    published extent past the backed rows.
 *  - needs->stamps_observed moves after every recorded observation, so the
 *    session can tell that no stamp changed state since its last touch.
 */
#include <errno.h>
#include <string.h>

#include "shm_internal.h"

static int latch_read(const struct bf_shm_cluster *c, struct bf_cluster_rec *out, uint32_t *seq)
{
    uint64_t words[BF_CLUSTER_WORDS];
    for (unsigned t = 0; t < BF_SEQLOCK_READ_TRIES; t++) {
        uint32_t s0 = atomic_load_explicit(&c->seq, memory_order_acquire);
        const _Atomic uint64_t *w = c->w[s0 & 1u];
        for (int i = 0; i < BF_CLUSTER_WORDS; i++)
            words[i] = atomic_load_explicit(&w[i], memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&c->seq, memory_order_relaxed) == s0) {
            memcpy(out, words, sizeof *out);
            if (seq)
                *seq = s0;
            return 0;
        }
        bf_backoff(t);
    }
    return -EAGAIN;
}

int bf_cluster_read(const struct bf_shm *s, uint32_t idx, struct bf_cluster_rec *out, uint32_t *seq)
{
    if (idx >= s->max_clusters)
        return -ERANGE;
    return latch_read(&s->clusters[idx], out, seq);
}

int bf_cluster_find(const struct bf_shm *s, uint32_t name_ref)
{
    uint32_t n = atomic_load_explicit(&s->needs->n_clusters, memory_order_acquire);
    if (n > s->max_clusters)
        n = s->max_clusters;
    for (uint32_t i = 0; i < n; i++) {
        struct bf_cluster_rec r;
        if (bf_cluster_read(s, i, &r, NULL) == 0 && r.in_use && r.name_ref == name_ref)
            return (int)i;
    }
    return -1;
}

void bf_cluster_write(struct bf_shm *s, uint32_t idx, const struct bf_cluster_rec *rec)
{
    struct bf_shm_cluster *c = &s->clusters[idx];
    uint64_t words[BF_CLUSTER_WORDS];
    memcpy(words, rec, sizeof words);
    atomic_store_explicit(&c->writer, s->pid, memory_order_relaxed);
    uint32_t seq = atomic_load_explicit(&c->seq, memory_order_relaxed);
    if (seq & 1u)
        seq++; /* a previous writer died mid-write and was not repaired */
    /* readers move to copy 1 while copy 0 is written */
    atomic_store_explicit(&c->seq, seq + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    for (int i = 0; i < BF_CLUSTER_WORDS; i++)
        atomic_store_explicit(&c->w[0][i], words[i], memory_order_relaxed);
    /* readers move back to copy 0 while copy 1 is written */
    atomic_store_explicit(&c->seq, seq + 2, memory_order_release);
    atomic_thread_fence(memory_order_release);
    for (int i = 0; i < BF_CLUSTER_WORDS; i++)
        atomic_store_explicit(&c->w[1][i], words[i], memory_order_relaxed);
    atomic_store_explicit(&c->seq, seq + 4, memory_order_release);
    atomic_store_explicit(&c->writer, 0, memory_order_release);
}

uint32_t bf_needs_rows_backed(const struct bf_shm *s)
{
    uint64_t rows = bf_shm_grown(s, BF_SEG_NEEDS) / sizeof(struct bf_need_row);
    uint64_t reserve = (uint64_t)BF_NEED_ROWS_PER_NEED * s->max_needs;
    return (uint32_t)(rows < reserve ? rows : reserve);
}

int bf_needs_rows_reserve(struct bf_shm *s, uint64_t end)
{
    if (end > (uint64_t)BF_NEED_ROWS_PER_NEED * s->max_needs)
        return -ENOSPC;
    if (end <= bf_needs_rows_backed(s))
        return 0;
    return bf_shm_grow(s, BF_SEG_NEEDS, end * sizeof(struct bf_need_row));
}

void bf_needs_copy_rows(const struct bf_shm *s, uint32_t off, uint32_t n, struct bf_need_row *out)
{
    bf_shm_load_words(out, &s->rows[off], (size_t)n * sizeof(struct bf_need_row));
}

int bf_needs_copy(const struct bf_shm *s, uint32_t idx, struct bf_cluster_rec *rec,
                  struct bf_need_row *out, uint32_t max)
{
    if (idx >= s->max_clusters)
        return -ERANGE;
    const struct bf_shm_cluster *c = &s->clusters[idx];
    for (unsigned t = 0; t < 64; t++) {
        uint32_t seq;
        int rc = latch_read(c, rec, &seq);
        if (rc)
            return rc;
        uint32_t n = rec->rows_count;
        /* the writer backs an extent before it publishes it: past the
         * backed rows only a corrupted row (or a torn read) points */
        if ((uint64_t)rec->rows_off + n > bf_needs_rows_backed(s))
            return -EAGAIN;
        if (n > max)
            return (int)n;
        bf_needs_copy_rows(s, rec->rows_off, n, out);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&c->seq, memory_order_relaxed) == seq) {
            if (rec->rows_arrival_ns) /* a republished repeat: one arrival for all */
                for (uint32_t i = 0; i < n; i++)
                    out[i].arrival_ns = rec->rows_arrival_ns;
            return (int)n;
        }
        bf_backoff(t);
    }
    return -EAGAIN;
}

/* ---- provisioning-latency stamps ----
 * A stamp is written by the session under its own small seqlock (odd while
 * writing); the executor reads it consistently and writes only
 * observed_epoch[i]. */

static int stamp_read(const struct bf_stamp *st, uint32_t *epoch, uint32_t *cref, uint32_t *fref,
                      int64_t *first)
{
    for (unsigned t = 0; t < BF_SEQLOCK_READ_TRIES; t++) {
        uint32_t s0 = atomic_load_explicit(&st->seq, memory_order_acquire);
        if (s0 & 1u) {
            bf_backoff(t);
            continue;
        }
        *epoch = atomic_load_explicit(&st->epoch, memory_order_relaxed);
        *cref = atomic_load_explicit(&st->cluster_ref, memory_order_relaxed);
        *fref = atomic_load_explicit(&st->fingerprint_ref, memory_order_relaxed);
        *first = atomic_load_explicit(&st->first_seen_ns, memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&st->seq, memory_order_relaxed) == s0)
            return 0;
    }
    return -EAGAIN;
}

int bf_stamp_find(const struct bf_shm *s, uint32_t cluster_ref, uint32_t fp_ref)
{
    uint32_t mask = s->stamp_mask;
    for (uint32_t i = bf_stamp_hash(cluster_ref, fp_ref) & mask, n = 0; n <= mask;
         i = (i + 1) & mask, n++) {
        uint32_t e, c, f;
        int64_t first;
        if (stamp_read(&s->stamps[i], &e, &c, &f, &first) != 0)
            continue;
        if (e == 0)
            return -1;
        if (c == cluster_ref && f == fp_ref)
            return (int)i;
    }
    return -1;
}

static void stamp_write(struct bf_stamp *st, uint32_t epoch, uint32_t cref, uint32_t fref,
                        int64_t first)
{
    uint32_t odd = bf_seq_write_begin(&st->seq);
    atomic_store_explicit(&st->cluster_ref, cref, memory_order_relaxed);
    atomic_store_explicit(&st->fingerprint_ref, fref, memory_order_relaxed);
    atomic_store_explicit(&st->first_seen_ns, first, memory_order_relaxed);
    atomic_store_explicit(&st->epoch, epoch, memory_order_relaxed);
    bf_seq_write_end(&st->seq, odd);
}

int bf_stamp_touch(struct bf_shm *s, uint32_t cluster_ref, uint32_t fp_ref, int64_t now_ns)
{
    uint32_t mask = s->stamp_mask;
    for (uint32_t i = bf_stamp_hash(cluster_ref, fp_ref) & mask, n = 0; n <= mask;
         i = (i + 1) & mask, n++) {
        struct bf_stamp *st = &s->stamps[i];
        uint32_t e = atomic_load_explicit(&st->epoch, memory_order_relaxed);
        if (e == 0) {
            stamp_write(st, 1, cluster_ref, fp_ref, now_ns);
            return 0;
        }
        if (atomic_load_explicit(&st->cluster_ref, memory_order_relaxed) != cluster_ref ||
            atomic_load_explicit(&st->fingerprint_ref, memory_order_relaxed) != fp_ref)
            continue;
        if (atomic_load_explicit(&s->stamp_observed[i], memory_order_acquire) == e ||
            atomic_load_explicit(&st->first_seen_ns, memory_order_relaxed) == 0)
            stamp_write(st, e + 1, cluster_ref, fp_ref, now_ns);
        return 0;
    }
    return -ENOSPC;
}

int bf_stamp_prune(struct bf_shm *s, uint32_t cluster_ref, uint32_t fp_ref)
{
    int i = bf_stamp_find(s, cluster_ref, fp_ref);
    if (i < 0)
        return 0;
    /* the session is the only writer: its own fields read back stably */
    struct bf_stamp *st = &s->stamps[i];
    uint32_t e = atomic_load_explicit(&st->epoch, memory_order_relaxed);
    if (atomic_load_explicit(&st->first_seen_ns, memory_order_relaxed) == 0)
        return 0;
    stamp_write(st, e + 1, cluster_ref, fp_ref, 0);
    return 1;
}

int bf_stamp_observe(struct bf_shm *s, uint32_t cluster_ref, uint32_t fp_ref, int64_t now_ns,
                     int64_t *latency_ns)
{
    int i = bf_stamp_find(s, cluster_ref, fp_ref);
    if (i < 0)
        return 0;
    uint32_t e, c, f;
    int64_t first;
    if (stamp_read(&s->stamps[i], &e, &c, &f, &first) != 0 || e == 0 || first == 0)
        return 0;
    uint32_t cur = atomic_load_explicit(&s->stamp_observed[i], memory_order_relaxed);
    if (cur == e)
        return 0;
    /* executor and reconciler may both see the completion: one sample only */
    if (!atomic_compare_exchange_strong_explicit(&s->stamp_observed[i], &cur, e,
                                                 memory_order_acq_rel, memory_order_relaxed))
        return 0;
    atomic_fetch_add_explicit(&s->needs->stamps_observed, 1, memory_order_release);
    *latency_ns = now_ns - first;
    return 1;
}
