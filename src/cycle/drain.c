/*
 * drain.c — CrossShardDrain applied by the cycle (ADR-0055 seeds/002 §3
 * tier 3 and §5, docs/adr0055.md): the donor drains its own victims as
 * Preempt actions and reserves them for the transfer that should follow.
 *
 * Design notes
 *   - Victims: Configured, bound, owned machines serving a priority strictly
 *     below preemptor_priority, not held and without an action in flight;
 *     named ones must each qualify (all or nothing), a selector takes the
 *     best Phase 2 victims first (VictimScore with the engine's default
 *     weights, then id). The drain grace is DrainGrace(preemptor, victim).
 *     With max_victim_penalty_bucket > 0 (issue 17's extension: seed 002's
 *     Tier 3 cost gate) a victim must also serve an interruption penalty
 *     bucket below it.
 *   - Under --actuation-paused or --dry-run nothing is drained: the
 *     instruction fails with that reason.
 *   - The reservations (until = now + grace + --transfer-reservation-ttl)
 *     and the dedup entry are committed first; then the Preempts go on the
 *     actions ring exactly as the cycle enqueues its own (in flight first;
 *     the space was checked, and the cycle is the ring's only producer),
 *     reason "cross_shard.drain". A reserved machine is held out of the
 *     engine (never claimed by the donor's Phase 1 nor released by its
 *     Phase 3) until TransferOwnership moves it or the TTL passes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/log.h"
#include "bigfleet/util.h"
#include "own_internal.h"

static int cmp_victim(const void *a, const void *b)
{
    const struct pick *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1; /* Phase 2: best victim first */
    uint32_t l = x->len < y->len ? x->len : y->len;
    int m = memcmp(x->id, y->id, l);
    return m ? m : (x->len > y->len) - (x->len < y->len);
}

/* ------------------------------------------------------------ cross-shard drain */

void bf_own_do_drain(struct bf_cycle *c, const Instr *in, struct reply *r)
{
    struct bf_cycle_own *o = c->own;
    struct bf_shm *s = c->shm;
    const Bigfleet__V1alpha1__CrossShardDrain *d = in->cross_shard_drain;
    if (!bf_own_check_shape(d->n_machine_ids, d->machine_ids, d->count, r))
        return;
    if (c->o.actuation_paused || c->o.dry_run) {
        bf_own_set_reason(r, OUT_FAILED, "%s: no drain is executed",
                          c->o.actuation_paused ? "actuation paused (--actuation-paused)"
                                                : "dry-run mode (--dry-run)");
        return;
    }
    int32_t P = d->preemptor_priority;
    int32_t MB = d->max_victim_penalty_bucket; /* issue 17: cheaper work only */
    struct bf_engine_config ec;
    bf_engine_config_defaults(&ec);
    struct picks ps = {0};
    if (d->count > 0) {
        int ti = bf_own_type_idx(s, d->instance_type), zi = bf_own_zone_idx(s, d->zone);
        uint32_t hwm = bf_inv_hwm(s);
        for (uint32_t slot = 0; ti != -2 && zi != -2 && slot < hwm && slot < c->capacity; slot++) {
            const struct slotinfo *si = &c->slots[slot];
            if (!si->present || si->held || si->state != BF_STATE_CONFIGURED ||
                (ti >= 0 && si->type_idx != ti) || (zi >= 0 && si->zone_idx != zi) ||
                bf_pending(s, slot))
                continue;
            struct bf_machine_rec rec;
            if (bf_inv_read(s, slot, &rec) != 0 || !(rec.flags & BF_REC_VALID) ||
                rec.state != BF_STATE_CONFIGURED || !rec.cluster || rec.assigned_priority >= P ||
                (MB > 0 && rec.ipb >= MB))
                continue;
            if (bf_own_source_of_slot(c, slot, &o->view) == BF_OWN_SRC_NONE)
                continue; /* bound but no longer owned: not ours to give */
            uint32_t il = 0;
            const char *id = bf_str(s, rec.id, &il);
            if (!id)
                continue;
            struct pick p = {
                slot,
                id,
                il,
                false,
                rec.rpb,
                rec.price_per_hour,
                bf_engine_victim_score(&ec, P, rec.assigned_priority, rec.ipb, rec.rpb)};
            if (!bf_own_picks_add(&ps, &p)) {
                bf_own_set_reason(r, OUT_FAILED, "out of memory");
                goto out;
            }
        }
        if (!ps.n) {
            bf_own_set_reason(
                r, OUT_FAILED,
                "no Configured machine of priority below %d%s matches instance_type=\"%s\" "
                "zone=\"%s\" (owned, not in flight, not reserved)",
                P, MB > 0 ? " and interruption penalty bucket below the requester's" : "",
                bf_own_str(d->instance_type), bf_own_str(d->zone));
            goto out;
        }
        qsort(ps.p, ps.n, sizeof *ps.p, cmp_victim);
        if (ps.n > (size_t)d->count)
            ps.n = (size_t)d->count;
    } else {
        for (size_t i = 0; i < d->n_machine_ids; i++) {
            const char *id = d->machine_ids[i];
            size_t il = strlen(id);
            bool dup = false;
            for (size_t j = 0; j < ps.n && !dup; j++)
                dup = ps.p[j].len == il && !memcmp(ps.p[j].id, id, il);
            if (dup)
                continue;
            int64_t slot = bf_own_slot_of(c, id, il);
            struct bf_machine_rec rec;
            if (slot < 0 || bf_inv_read(s, (uint32_t)slot, &rec) != 0 ||
                !(rec.flags & BF_REC_VALID)) {
                bf_own_set_reason(r, OUT_FAILED, "machine %s is not in this shard's inventory", id);
                goto out;
            }
            uint32_t sl = 0;
            const char *sid = bf_str(s, rec.id, &sl);
            if (sid && bf_idmap_get(&o->resv, sid, sl, NULL)) {
                bf_own_set_reason(r, OUT_FAILED, "machine %s is already reserved for a transfer",
                                  id);
                goto out;
            }
            if (rec.state != BF_STATE_CONFIGURED || !rec.cluster) {
                bf_own_set_reason(r, OUT_FAILED,
                                  "machine %s is %s; a cross-shard drain takes "
                                  "Configured machines",
                                  id, bf_state_name(rec.state));
                goto out;
            }
            if (rec.assigned_priority >= P) {
                bf_own_set_reason(r, OUT_FAILED,
                                  "machine %s serves priority %d, not below the preemptor's %d", id,
                                  rec.assigned_priority, P);
                goto out;
            }
            if (MB > 0 && rec.ipb >= MB) {
                bf_own_set_reason(r, OUT_FAILED,
                                  "machine %s serves interruption penalty bucket %d, not below "
                                  "the requester's %d",
                                  id, rec.ipb, MB);
                goto out;
            }
            if (bf_pending(s, (uint32_t)slot)) {
                bf_own_set_reason(r, OUT_FAILED, "machine %s has an action in flight", id);
                goto out;
            }
            if (bf_own_source_of_slot(c, (uint32_t)slot, &o->view) == BF_OWN_SRC_NONE) {
                bf_own_set_reason(r, OUT_FAILED, "machine %s is not owned by this shard", id);
                goto out;
            }
            struct pick p = {(uint32_t)slot, sid, sl, false, rec.rpb, rec.price_per_hour, 0};
            if (!sid || !bf_own_picks_add(&ps, &p)) {
                bf_own_set_reason(r, OUT_FAILED, "out of memory");
                goto out;
            }
        }
    }
    if (o->resv.n + ps.n > BF_OWN_RESERVED_MAX) {
        bf_own_set_reason(r, OUT_FAILED, "reservation table full (%u held, at most %d)", o->resv.n,
                          BF_OWN_RESERVED_MAX);
        goto out;
    }
    struct bf_ring_hdr *rh = s->ring[BF_RING_ACTIONS];
    if (bf_ring_depth(s, BF_RING_ACTIONS) + ps.n > rh->capacity) {
        bf_own_set_reason(r, OUT_FAILED, "actions ring full; retry");
        goto out;
    }
    /* victims' graces, then the reservations and the dedup entry, committed */
    int64_t now = bf_now_ns();
    int64_t *grace = calloc(ps.n + 1, sizeof *grace);
    int32_t *vprio = calloc(ps.n + 1, sizeof *vprio);
    uint32_t *vcl = calloc(ps.n + 1, sizeof *vcl);
    char **echo = calloc(ps.n + 1, sizeof *echo);
    MDB_txn *txn = NULL;
    if (!grace || !vprio || !vcl || !echo) {
        bf_own_set_reason(r, OUT_FAILED, "out of memory");
        goto out_free;
    }
    if (!bf_own_begin(c, &txn, r))
        goto out_free;
    size_t il = strlen(in->instruction_id);
    uint8_t *val = malloc(sizeof(struct bf_own_resv_rec) + il);
    int rc = val ? 0 : ENOMEM;
    for (size_t i = 0; i < ps.n && !rc; i++) {
        struct bf_machine_rec rec;
        if (bf_inv_read(s, ps.p[i].slot, &rec) != 0) {
            rc = EBUSY;
            break;
        }
        vprio[i] = rec.assigned_priority;
        vcl[i] = rec.cluster;
        grace[i] = bf_engine_drain_grace_s(P, rec.assigned_priority);
        struct bf_own_resv_rec rr = {.since_ns = now,
                                     .until_ns =
                                         now + grace[i] * BF_NS_PER_SEC + c->o.reservation_ttl_ns,
                                     .preemptor_priority = P,
                                     .grace_s = (uint32_t)grace[i]};
        memcpy(val, &rr, sizeof rr);
        memcpy(val + sizeof rr, in->instruction_id, il);
        MDB_val k = {ps.p[i].len, (void *)ps.p[i].id}, v = {sizeof rr + il, val};
        rc = mdb_put(txn, o->st->dbi[BF_OWN_DB_RESERVED], &k, &v, 0);
    }
    free(val);
    if (rc) {
        bf_own_fail_txn(c, txn, rc, r);
        goto out_free;
    }
    char reason[96] = "";
    if (d->count > 0 && ps.n < (size_t)d->count)
        snprintf(reason, sizeof reason, "resolved %zu of %d requested", ps.n, d->count);
    if (!bf_own_commit_accept(c, txn, in, K_DRAIN, reason, bf_own_pick_ids(&ps, echo), ps.n, r))
        goto out_free;
    r->outcome = OUT_ACCEPTED;
    /* the Preempts, as the engine's own would be enqueued (in flight first) */
    uint64_t serial = BF_STAT_GET(s->st->action_serial);
    uint64_t cycle = BF_STAT_GET(s->st->cycle_count) + 1;
    for (size_t i = 0; i < ps.n; i++) {
        const struct pick *p = &ps.p[i];
        int64_t until = now + grace[i] * BF_NS_PER_SEC + c->o.reservation_ttl_ns;
        bf_idmap_put(&o->resv, p->id, p->len, until);
        struct bf_action_msg m = {
            .serial = ++serial,
            .decided_cycle = cycle,
            .slot = p->slot,
            .machine_id_ref = c->slots[p->slot].id_ref,
            .cluster_ref = vcl[i],
            .grace_seconds = (uint32_t)grace[i],
            .preemptor_priority = P,
            .kind = BF_ACTION_PREEMPT,
            .reason = BF_REASON_CROSS_SHARD_DRAIN,
            .disposition = BF_DISP_EXECUTE,
        };
        m.pending_tag = bf_pending_mark(s, p->slot);
        if (bf_ring_push(s, BF_RING_ACTIONS, &m) != 0) {
            /* cannot happen (space checked, we are the only producer) */
            bf_pending_unmark(s, p->slot, m.pending_tag);
            serial--;
            BF_ERROR("cross-shard drain not enqueued (ring full); the reservation expires",
                     "machine=%s", p->id);
        } else {
            BF_STAT_INC(s->st->cycle.actions_total[BF_ACTION_PREEMPT]);
            BF_STAT_INC(s->st->own.drained);
        }
        bf_own_touch(c, p->slot);
        char detail[64];
        snprintf(detail, sizeof detail, "victim priority %d, grace %llds", vprio[i],
                 (long long)grace[i]);
        bf_own_audit(c, BF_OWN_EV_RESERVED, p->id, in->instruction_id, "", "", detail, until, P);
    }
    BF_STAT_SET(s->st->action_serial, serial);
    if (ps.n)
        bf_wake(s, BF_ROLE_EXECUTOR);
    bf_own_resv_recompute_expiry(o);
    BF_INFO("cross-shard drain: machines drained and reserved for transfer",
            "instruction_id=%.128s machines=%zu preemptor_priority=%d", in->instruction_id, ps.n,
            P);
out_free:
    free(grace);
    free(vprio);
    free(vcl);
    free(echo);
out:
    free(ps.p);
}
