/*
 * repair.c — every repair of shared state a dead writer left mid-write, run
 * by the supervisor after waitpid() reaped the writer (ARCHITECTURE.md §3,
 * docs/internals.md "who writes what"). A reaped pid can no longer store
 * anything, so the repair never races the writer it repairs; it may race
 * readers and the other (live) writers, which it treats as the writer
 * protocol of each table does.
 *
 *  - Machine records: a record left odd names its writer (inventory.c takes
 *    the writer word before seq goes odd). Its payload is kept with
 *    BF_REC_NEEDS_REFRESH set (the reconciler reads it afresh from the
 *    provider), published even (W3), logged to the supervisor's change log
 *    so the cycle sees it, and the writer word cleared.
 *  - The string lock: released by CAS only if the dead pid still holds it
 *    (counted in bigfleet_appliance_locks_recovered_total).
 *  - Cluster rows (needs.c latches): readers were reading copy `seq & 1`,
 *    which is intact; it is copied over the torn one, and an odd seq made
 *    even, so both copies and the seq are as after a complete write.
 *  - Provisioning-latency stamps: written by the session only and carrying
 *    no writer word, so repaired when the dead child was the session: an
 *    odd seq is made even (the stamp keeps what it holds; stamp_read
 *    refuses nothing it would not have refused before the crash).
 */
#include <errno.h>
#include <string.h>

#include "shm_internal.h"

int bf_inv_repair_dead_writer(struct bf_shm *s, uint32_t dead_pid)
{
    int repaired = 0;
    uint32_t hwm = bf_inv_hwm(s);
    for (uint32_t i = 0; i < hwm; i++) {
        struct bf_shm_machine *m = &s->records[i];
        if (atomic_load_explicit(&m->writer, memory_order_acquire) != dead_pid)
            continue;
        uint32_t seq = atomic_load_explicit(&m->seq, memory_order_relaxed);
        if (seq & 1u) {
            /* half-written: keep what is there but force a fresh provider read */
            struct bf_machine_rec r;
            uint64_t words[BF_REC_WORDS];
            for (int k = 0; k < BF_REC_WORDS; k++)
                words[k] = atomic_load_explicit(&m->w[k], memory_order_relaxed);
            memcpy(&r, words, sizeof r);
            if (r.flags & BF_REC_VALID)
                r.flags |= BF_REC_NEEDS_REFRESH;
            memcpy(words, &r, sizeof r);
            bf_store_payload(m->w, words, BF_REC_WORDS);
            bf_seq_write_end(&m->seq, seq);
            bf_cl_append(s, BF_CL_SUPERVISOR, i);
            repaired++;
        }
        atomic_store_explicit(&m->writer, 0, memory_order_release);
    }
    return repaired;
}

int bf_strtab_repair_dead_writer(struct bf_shm *s, uint32_t dead_pid)
{
    uint32_t owner = dead_pid;
    return atomic_compare_exchange_strong_explicit(&s->inv->strtab.lock_owner, &owner, 0,
                                                   memory_order_release, memory_order_relaxed)
               ? 1
               : 0;
}

int bf_cluster_repair_dead_writer(struct bf_shm *s, uint32_t dead_pid)
{
    int repaired = 0;
    uint32_t nc = atomic_load_explicit(&s->needs->n_clusters, memory_order_acquire);
    for (uint32_t i = 0; i < nc && i < s->max_clusters; i++) {
        struct bf_shm_cluster *c = &s->clusters[i];
        if (atomic_load_explicit(&c->writer, memory_order_acquire) != dead_pid)
            continue;
        uint32_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
        int good = (int)(seq & 1u); /* readers were reading this copy */
        for (int w = 0; w < BF_CLUSTER_WORDS; w++)
            atomic_store_explicit(&c->w[!good][w],
                                  atomic_load_explicit(&c->w[good][w], memory_order_relaxed),
                                  memory_order_relaxed);
        if (seq & 1u) {
            /* copy 1 is intact and now also in copy 0: publish even, after
             * the copy (pairs with latch_read's acquire of seq) */
            atomic_store_explicit(&c->seq, seq + 1, memory_order_release);
        }
        atomic_store_explicit(&c->writer, 0, memory_order_release);
        repaired++;
    }
    return repaired;
}

int bf_stamp_repair_dead_writer(struct bf_shm *s)
{
    int repaired = 0;
    for (uint32_t i = 0; i <= s->stamp_mask; i++) {
        uint32_t seq = atomic_load_explicit(&s->stamps[i].seq, memory_order_acquire);
        if (seq & 1u) {
            bf_seq_write_end(&s->stamps[i].seq, seq);
            repaired++;
        }
    }
    return repaired;
}

void bf_shm_repair_dead_writer(struct bf_shm *s, uint32_t dead_pid, int dead_role,
                               struct bf_repair_report *out)
{
    memset(out, 0, sizeof *out);
    out->records = bf_inv_repair_dead_writer(s, dead_pid);
    out->locks = bf_strtab_repair_dead_writer(s, dead_pid);
    out->cluster_rows = bf_cluster_repair_dead_writer(s, dead_pid);
    if (dead_role == BF_ROLE_SESSION)
        out->stamps = bf_stamp_repair_dead_writer(s);
}
