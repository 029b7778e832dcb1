/*
 * own_step.c — the cycle's per-cycle ownership step (ADR-0055,
 * docs/adr0055.md), run by the controller after the mirror was refreshed
 * and before the engine: the instructions waiting on ring COORD_IN
 * (instructions.c), the transfer reservations whose TTL passed, after a
 * domain change one pass over the mirror re-deciding held-ness, then the
 * slots the step touched are re-read (feed.c) and st->own is published.
 *
 * Layering: the top of the cycle's ownership files. It calls down to the
 * instruction handlers, the mirror feed and the ownership state
 * (ownership.c); none of them calls it (scripts/lint-includes).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/log.h"
#include "bigfleet/util.h"
#include "own_internal.h"

#define OWN_STEP_BUDGET 32 /* instructions applied per cycle */

bool bf_cycle_own_due(const struct bf_cycle *c, int64_t now_ns)
{
    const struct bf_cycle_own *o = c->own;
    if (!o)
        return false;
    return bf_ring_depth(c->shm, BF_RING_COORD_IN) > 0 || now_ns >= o->next_expiry;
}

/* Reservations whose TTL passed: dropped in one transaction. */
static void expire(struct bf_cycle *c, int64_t now_ns)
{
    struct bf_cycle_own *o = c->own;
    if (now_ns < o->next_expiry)
        return;
    MDB_txn *txn;
    if (mdb_txn_begin(o->st->env, NULL, 0, &txn) != 0) {
        BF_STAT_INC(c->shm->st->own.store_errors);
        o->next_expiry = now_ns + BF_NS_PER_SEC; /* retried in a second, not every loop turn */
        return;
    }
    uint32_t n = 0;
    for (uint32_t i = 0; i < o->resv.cap; i++) {
        struct bf_idmap_entry *e = &o->resv.e[i];
        if (!e->hash || e->val > now_ns)
            continue;
        MDB_val k = {e->len, e->id};
        int rc = mdb_del(txn, o->st->dbi[BF_OWN_DB_RESERVED], &k, NULL);
        if (rc && rc != MDB_NOTFOUND) {
            mdb_txn_abort(txn);
            BF_STAT_INC(c->shm->st->own.store_errors);
            BF_ERROR("cannot drop expired transfer reservations", "error=\"%s\"", mdb_strerror(rc));
            return;
        }
        n++;
    }
    int rc = mdb_txn_commit(txn);
    if (rc) {
        BF_STAT_INC(c->shm->st->own.store_errors);
        o->next_expiry = now_ns + BF_NS_PER_SEC;
        BF_ERROR("cannot drop expired transfer reservations", "error=\"%s\"", mdb_strerror(rc));
        return;
    }
    /* committed: forget them (deleting while scanning may shift entries, so restart) */
    for (bool again = true; again;) {
        again = false;
        for (uint32_t i = 0; i < o->resv.cap; i++) {
            struct bf_idmap_entry *e = &o->resv.e[i];
            if (!e->hash || e->val > now_ns)
                continue;
            char id[BF_OWN_ID_MAX + 1];
            size_t l = e->len < BF_OWN_ID_MAX ? e->len : BF_OWN_ID_MAX;
            memcpy(id, e->id, l);
            id[l] = 0;
            int64_t until = e->val;
            bf_idmap_del(&o->resv, id, l);
            int64_t slot = bf_own_slot_of(c, id, l);
            if (slot >= 0)
                bf_own_touch(c, (uint32_t)slot);
            bf_own_audit(c, BF_OWN_EV_RESERVATION_EXPIRED, id, "", "", "", "no transfer followed",
                         until, 0);
            BF_INFO("transfer reservation expired; the machine returns to this shard's pool",
                    "machine=%s", id);
            again = true;
            break;
        }
    }
    BF_STAT_ADD(c->shm->st->own.reservations_expired, n);
    bf_own_resv_recompute_expiry(o);
    o->publish = true;
}

/* After a domain change: re-decide held-ness of every machine, re-reading
 * only the slots whose answer moved. */
static void reevaluate(struct bf_cycle *c)
{
    bf_own_pdom_clear(c->own);
    uint32_t hwm = bf_inv_hwm(c->shm);
    for (uint32_t slot = 0; slot < hwm && slot < c->capacity; slot++) {
        struct slotinfo *si = &c->slots[slot];
        if (!si->present)
            continue;
        struct bf_machine_rec r;
        if (bf_inv_read(c->shm, slot, &r) != 0 || !(r.flags & BF_REC_VALID)) {
            bf_own_touch(c, slot);
            continue;
        }
        const char *id = bf_str(c->shm, r.id, NULL);
        const struct bf_mprofile *p = bf_mprofile_get(c->blobs, c->shm, r.profile);
        if (!id || !p)
            continue;
        if (bf_cycle_own_held(c, id, p, &r) != (si->held != 0))
            bf_own_touch(c, slot);
    }
}

void bf_cycle_own_step(struct bf_cycle *c, int64_t now_ns)
{
    struct bf_cycle_own *o = c->own;
    if (!o)
        return;
    /* instructions waiting: each accepted one is a synchronous LMDB commit,
     * so a burst is taken OWN_STEP_BUDGET at a time (bf_cycle_own_due makes
     * the next cycle start at once while some wait) */
    for (unsigned n = 0; n < OWN_STEP_BUDGET; n++) {
        size_t len = 0;
        int rc = bf_ring_pop_bytes(c->shm, BF_RING_COORD_IN, o->buf, o->buf_cap, &len);
        if (rc == -EMSGSIZE) {
            uint8_t *nb = realloc(o->buf, len);
            if (!nb)
                break;
            o->buf = nb;
            o->buf_cap = len;
            rc = bf_ring_pop_bytes(c->shm, BF_RING_COORD_IN, o->buf, o->buf_cap, &len);
        }
        if (rc)
            break;
        if (!o->st)
            bf_own_fail_instruction(c, o->buf, len,
                                    "ownership store unavailable (LMDB under --data-dir)");
        else
            bf_own_handle_instruction(c, o->buf, len, now_ns);
    }
    if (o->st)
        expire(c, now_ns);
    if (o->changed) {
        o->changed = false;
        reevaluate(c);
    }
    for (uint32_t i = 0; i < o->n_touched; i++)
        bf_cycle_refresh_slot(c, o->touched[i]);
    o->n_touched = 0;
    bf_own_publish(c);
}
