/*
 * inventory.c — machine records (seqlock per record), the id -> slot index,
 * slot allocation and change logs (the supervisor's repair of records a
 * dead writer left half-written is in repair.c).
 *
 * Synchronisation:
 *  - Writer ownership of a record is taken by CAS on its `writer` word
 *    (0 -> pid, acquire: I1, which also makes the previous writer's payload
 *    visible via its W3 release); only then seq goes odd (bf_seq_write_begin,
 *    W1), payload words are stored relaxed, seq goes even (W3), and the writer
 *    word is released (I2). Because `writer` is set before seq goes odd, a
 *    record that is odd always names its writer: the supervisor's repair can
 *    tell which records a dead pid held.
 *  - The id index holds slot+1 (0 empty, UINT32_MAX tombstone); entries are
 *    published with release after the record is committed (I3) and read with
 *    acquire; a lookup confirms the record's id, so a stale index entry or a
 *    reused slot can never be mistaken for another machine.
 *  - Change logs: the producer stores the slot relaxed, then publishes head
 *    with release (C1); the consumer loads head with acquire (C2), reads
 *    entries, and re-loads head to detect being lapped during the read.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>

#include "bigfleet/util.h"
#include "shm_internal.h"

#define TOMB UINT32_MAX

static inline uint32_t ref_hash(uint32_t ref)
{
    uint64_t x = (uint64_t)ref * 0x9E3779B97F4A7C15ULL;
    return (uint32_t)(x >> 32);
}

static void count_retry(const struct bf_shm *s, uint64_t retries, int failed)
{
    if (s->readonly)
        return; /* a read-only attachment (inspection) never writes */
    if (retries)
        atomic_fetch_add_explicit(&s->inv->seqlock_retries[s->role], retries, memory_order_relaxed);
    if (failed)
        atomic_fetch_add_explicit(&s->inv->seqlock_giveups[s->role], 1, memory_order_relaxed);
}

int bf_inv_read_seq(const struct bf_shm *s, uint32_t slot, struct bf_machine_rec *out,
                    uint32_t *seq)
{
    if (slot >= s->max_machines)
        return -ERANGE;
    const struct bf_shm_machine *m = &s->records[slot];
    uint64_t words[BF_REC_WORDS], retries = 0;
    int rc = bf_seq_read(&m->seq, m->w, BF_REC_WORDS, words, BF_SEQLOCK_READ_TRIES, seq, &retries);
    count_retry(s, retries, rc != 0);
    if (rc)
        return rc;
    memcpy(out, words, sizeof *out);
    return 0;
}

int bf_inv_read(const struct bf_shm *s, uint32_t slot, struct bf_machine_rec *out)
{
    return bf_inv_read_seq(s, slot, out, NULL);
}

int bf_inv_lookup(const struct bf_shm *s, uint32_t id_ref, uint32_t *slot)
{
    if (id_ref == 0)
        return -ENOENT;
    uint32_t mask = s->index_mask;
    for (uint32_t i = ref_hash(id_ref) & mask, n = 0; n <= mask; i = (i + 1) & mask, n++) {
        uint32_t e = atomic_load_explicit(&s->idindex[i], memory_order_acquire); /* pairs I3 */
        if (e == 0)
            return -ENOENT;
        if (e == TOMB || e - 1 >= s->max_machines)
            continue;
        struct bf_machine_rec r;
        if (bf_inv_read(s, e - 1, &r) != 0) {
            /* writer busy: compare the id word alone (it never changes for a live record) */
            uint64_t w0 = atomic_load_explicit(&s->records[e - 1].w[0], memory_order_relaxed);
            if ((uint32_t)w0 == id_ref) {
                *slot = e - 1;
                return 0;
            }
            continue;
        }
        if (r.id == id_ref && (r.flags & BF_REC_VALID)) {
            *slot = e - 1;
            return 0;
        }
    }
    return -ENOENT;
}

void bf_inv_index_prefetch(const struct bf_shm *s, uint32_t id_ref)
{
    __builtin_prefetch(&s->idindex[ref_hash(id_ref) & s->index_mask]);
}

int bf_inv_lookup_id(const struct bf_shm *s, const char *id, size_t len, uint32_t *slot)
{
    uint32_t ref;
    if (bf_str_find(s, id, (uint32_t)len, &ref) != 0)
        return -ENOENT;
    return bf_inv_lookup(s, ref, slot);
}

int bf_inv_begin(struct bf_shm *s, uint32_t slot, struct bf_inv_txn *t)
{
    if (s->readonly)
        return -EROFS;
    if (slot >= s->max_machines)
        return -ERANGE;
    struct bf_shm_machine *m = &s->records[slot];
    int64_t deadline = 0;
    for (unsigned attempt = 0;; attempt++) {
        uint32_t cur = 0;
        if (atomic_compare_exchange_weak_explicit(&m->writer, &cur, s->pid, memory_order_acquire,
                                                  memory_order_relaxed)) /* I1 */
            break;
        if (attempt == 64)
            deadline = bf_mono_ns() + BF_SEQLOCK_WRITE_TIMEOUT_NS;
        if (attempt > 64 && (attempt & 15) == 0 && bf_mono_ns() > deadline)
            return -EBUSY;
        bf_backoff(attempt);
    }
    uint64_t words[BF_REC_WORDS];
    for (int i = 0; i < BF_REC_WORDS; i++)
        words[i] = atomic_load_explicit(&m->w[i], memory_order_relaxed);
    memcpy(&t->old, words, sizeof t->old);
    t->slot = slot;
    t->seq = bf_seq_write_begin(&m->seq);
    return 0;
}

void bf_inv_commit(struct bf_shm *s, struct bf_inv_txn *t, const struct bf_machine_rec *rec,
                   int cl_writer)
{
    struct bf_shm_machine *m = &s->records[t->slot];
    uint64_t words[BF_REC_WORDS];
    memcpy(words, rec, sizeof words);
    bf_store_payload(m->w, words, BF_REC_WORDS);
    bf_seq_write_end(&m->seq, t->seq);
    atomic_store_explicit(&m->writer, 0, memory_order_release); /* I2 */
    if (cl_writer >= 0 && cl_writer < BF_CHANGELOG_WRITERS)
        bf_cl_append(s, cl_writer, t->slot);
}

void bf_inv_abort(struct bf_shm *s, struct bf_inv_txn *t)
{
    struct bf_shm_machine *m = &s->records[t->slot];
    bf_seq_write_end(&m->seq, t->seq);
    atomic_store_explicit(&m->writer, 0, memory_order_release);
}

static int index_find_entry(const struct bf_shm *s, uint32_t id_ref, uint32_t slot, uint32_t *pos)
{
    uint32_t mask = s->index_mask;
    for (uint32_t i = ref_hash(id_ref) & mask, n = 0; n <= mask; i = (i + 1) & mask, n++) {
        uint32_t e = atomic_load_explicit(&s->idindex[i], memory_order_acquire);
        if (e == 0)
            return -ENOENT;
        if (e == slot + 1) {
            *pos = i;
            return 0;
        }
    }
    return -ENOENT;
}

/* The insert after the caller's "no record holds rec->id" is settled. */
static int insert_absent(struct bf_shm *s, const struct bf_machine_rec *rec, uint32_t *slot)
{
    struct bf_inv_meta *meta = s->inv;
    uint32_t used = atomic_load_explicit(&meta->index_used, memory_order_relaxed);
    /* find the index position first (fail before touching slots) */
    uint32_t mask = s->index_mask, pos = UINT32_MAX;
    bool fresh = false;
    for (uint32_t i = ref_hash(rec->id) & mask, n = 0; n <= mask; i = (i + 1) & mask, n++) {
        uint32_t e = atomic_load_explicit(&s->idindex[i], memory_order_relaxed);
        if (e == TOMB && pos == UINT32_MAX)
            pos = i;
        if (e == 0) {
            if (pos == UINT32_MAX) {
                pos = i;
                fresh = true;
            }
            break;
        }
    }
    if (pos == UINT32_MAX || (fresh && (uint64_t)used + 1 > (uint64_t)(mask + 1) * 3 / 4))
        return -ENOSPC;
    /* allocate a slot: free stack, else the high-water mark */
    uint32_t sl;
    uint32_t head = atomic_load_explicit(&meta->free_head, memory_order_relaxed);
    if (head) {
        sl = head - 1;
        uint64_t w0 = atomic_load_explicit(&s->records[sl].w[0], memory_order_relaxed);
        atomic_store_explicit(&meta->free_head, (uint32_t)w0, memory_order_relaxed);
    } else {
        uint32_t hwm = atomic_load_explicit(&meta->slot_hwm, memory_order_relaxed);
        if (hwm >= s->max_machines)
            return -ENOSPC;
        sl = hwm;
        atomic_store_explicit(&meta->slot_hwm, hwm + 1, memory_order_release);
    }
    struct bf_inv_txn t;
    int rc = bf_inv_begin(s, sl, &t);
    if (rc)
        return rc; /* cannot happen for a free slot unless a writer is stuck */
    struct bf_machine_rec r = *rec;
    r.flags |= BF_REC_VALID;
    bf_inv_commit(s, &t, &r, BF_CL_RECONCILER);
    atomic_store_explicit(&s->idindex[pos], sl + 1, memory_order_release); /* I3 */
    if (fresh)
        atomic_store_explicit(&meta->index_used, used + 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&meta->n_machines, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&meta->records_inserted, 1, memory_order_relaxed);
    *slot = sl;
    return 0;
}

int bf_inv_insert(struct bf_shm *s, const struct bf_machine_rec *rec, uint32_t *slot)
{
    if (s->readonly)
        return -EROFS;
    if (rec->id == 0)
        return -EINVAL;
    uint32_t existing;
    if (bf_inv_lookup(s, rec->id, &existing) == 0) {
        *slot = existing;
        return -EEXIST;
    }
    return insert_absent(s, rec, slot);
}

int bf_inv_insert_new(struct bf_shm *s, const struct bf_machine_rec *rec, uint32_t *slot)
{
    if (s->readonly)
        return -EROFS;
    if (rec->id == 0)
        return -EINVAL;
    return insert_absent(s, rec, slot);
}

int bf_inv_remove(struct bf_shm *s, uint32_t slot)
{
    if (s->readonly)
        return -EROFS;
    struct bf_inv_txn t;
    int rc = bf_inv_begin(s, slot, &t);
    if (rc)
        return rc;
    if (!(t.old.flags & BF_REC_VALID)) {
        bf_inv_abort(s, &t);
        return -ENOENT;
    }
    uint32_t pos;
    if (index_find_entry(s, t.old.id, slot, &pos) == 0)
        atomic_store_explicit(&s->idindex[pos], TOMB, memory_order_release);
    struct bf_inv_meta *meta = s->inv;
    struct bf_machine_rec r;
    memset(&r, 0, sizeof r);
    /* a free record's first word links the free stack (next slot + 1) */
    r.id = atomic_load_explicit(&meta->free_head, memory_order_relaxed);
    bf_inv_commit(s, &t, &r, BF_CL_RECONCILER);
    atomic_store_explicit(&meta->free_head, slot + 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&meta->n_machines, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&meta->records_removed, 1, memory_order_relaxed);
    return 0;
}

void bf_cl_append(struct bf_shm *s, int w, uint32_t slot)
{
    struct bf_changelog *c = &s->changelog[w];
    _Atomic uint32_t *e = (_Atomic uint32_t *)((uint8_t *)s->inv_hdr + c->entries_off);
    uint64_t h = atomic_load_explicit(&c->head, memory_order_relaxed);
    atomic_store_explicit(&e[h & s->changelog_mask], slot, memory_order_relaxed);
    atomic_store_explicit(&c->head, h + 1, memory_order_release); /* C1 */
}

int bf_cl_drain(struct bf_shm *s, int w, bf_cl_fn fn, void *arg)
{
    struct bf_changelog *c = &s->changelog[w];
    _Atomic uint32_t *e = (_Atomic uint32_t *)((uint8_t *)s->inv_hdr + c->entries_off);
    uint64_t cap = (uint64_t)s->changelog_mask + 1;
    uint64_t t = atomic_load_explicit(&c->tail, memory_order_relaxed);
    uint64_t h = atomic_load_explicit(&c->head, memory_order_acquire); /* C2 */
    if (h - t > cap) {
        atomic_store_explicit(&c->tail, h, memory_order_release);
        atomic_fetch_add_explicit(&c->overflows, 1, memory_order_relaxed);
        return -EOVERFLOW;
    }
    for (uint64_t i = t; i < h; i++) {
        uint32_t slot = atomic_load_explicit(&e[i & s->changelog_mask], memory_order_relaxed);
        if (slot < s->max_machines)
            fn(arg, slot);
    }
    atomic_thread_fence(memory_order_acquire);
    uint64_t h2 = atomic_load_explicit(&c->head, memory_order_relaxed);
    if (h2 - t > cap) {
        /* lapped while reading: some entries we read were overwritten */
        atomic_store_explicit(&c->tail, h2, memory_order_release);
        atomic_fetch_add_explicit(&c->overflows, 1, memory_order_relaxed);
        return -EOVERFLOW;
    }
    atomic_store_explicit(&c->tail, h, memory_order_release);
    return (int)(h - t);
}

uint64_t bf_cl_head(const struct bf_shm *s, int w)
{
    return atomic_load_explicit(&s->changelog[w].head, memory_order_acquire); /* C2 */
}

int bf_cl_peek(const struct bf_shm *s, int w, uint64_t from, uint64_t *head, bf_cl_peek_fn fn,
               void *arg)
{
    const struct bf_changelog *c = &s->changelog[w];
    const _Atomic uint32_t *e =
        (const _Atomic uint32_t *)((const uint8_t *)s->inv_hdr + c->entries_off);
    uint64_t cap = (uint64_t)s->changelog_mask + 1;
    uint64_t h = atomic_load_explicit(&c->head, memory_order_acquire); /* C2 */
    *head = h;
    if (h - from > cap)
        return -EOVERFLOW;
    int n = 0;
    for (uint64_t i = from; i < h; i++) {
        uint32_t slot = atomic_load_explicit(&e[i & s->changelog_mask], memory_order_relaxed);
        if (slot >= s->max_machines)
            continue;
        n++;
        if (fn(arg, slot))
            return n;
    }
    /* lapped while reading: some entries read were overwritten */
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&c->head, memory_order_relaxed) - from > cap)
        return -ESTALE;
    return n;
}

void bf_cl_skip(struct bf_shm *s, int w)
{
    struct bf_changelog *c = &s->changelog[w];
    atomic_store_explicit(&c->tail, atomic_load_explicit(&c->head, memory_order_acquire),
                          memory_order_release);
}

uint32_t bf_inv_peek_id(const struct bf_shm *s, uint32_t slot)
{
    return (uint32_t)atomic_load_explicit(&s->records[slot].w[0], memory_order_relaxed);
}
