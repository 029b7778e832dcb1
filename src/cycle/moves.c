/*
 * moves.c — the coordinator's machine moves, applied by the cycle
 * (ADR-0055 seeds/002 §4-§5, docs/adr0055.md): TransferOwnership and
 * ReassignSpeculative, each shard taking its role from from/to_shard_id
 * (the donor releases, the recipient takes over), and the donor's
 * resolution of a selector (count + instance type + zone).
 *
 * Design notes
 *   - The donor decides first without writing: named machines must each be
 *     owned, unbound, in the instruction's state (Idle; Speculative for a
 *     reassignment) and without an action in flight, else the whole
 *     instruction fails naming the first that does not qualify (a transfer
 *     never drains). A selector takes such machines in give-up order:
 *     reserved for transfer first, then the lowest reclamation penalty,
 *     then the engine's Idle order (price, id).
 *   - The commit (own.out or own.in, the dedup entry, the generation) is one
 *     LMDB transaction (instructions.c); memory, held machines and audit
 *     records follow it. The recipient only records the transfer in: the
 *     reconciler adopts the machines on its next (full) pass.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/log.h"
#include "bigfleet/util.h"
#include "own_internal.h"

/* ------------------------------------------------------------ machine picks */

static int cmp_give_up(const void *a, const void *b)
{
    const struct pick *x = a, *y = b;
    if (x->reserved != y->reserved)
        return x->reserved ? -1 : 1; /* drained for a transfer: first */
    if (x->rpb != y->rpb)
        return x->rpb < y->rpb ? -1 : 1; /* lowest reclamation penalty first */
    if (x->price != y->price)
        return x->price < y->price ? -1 : 1; /* then the engine's Idle order */
    uint32_t l = x->len < y->len ? x->len : y->len;
    int m = memcmp(x->id, y->id, l);
    return m ? m : (x->len > y->len) - (x->len < y->len);
}

/* Registry index of a type or zone name; -1 = "" (any); -2 = unknown. */
int bf_own_type_idx(const struct bf_shm *s, const char *name)
{
    if (!name || !name[0])
        return -1;
    uint32_t n = BF_SHARED_LOAD(s->inv->n_types);
    for (uint32_t i = 1; i < n && i < BF_MAX_TYPES; i++)
        if (!strcmp(bf_type_name(s, i), name))
            return (int)i;
    return -2;
}

int bf_own_zone_idx(const struct bf_shm *s, const char *name)
{
    if (!name || !name[0])
        return -1;
    uint32_t n = BF_SHARED_LOAD(s->inv->n_zones);
    for (uint32_t i = 1; i < n && i < BF_MAX_ZONES; i++)
        if (!strcmp(bf_zone_name(s, i), name))
            return (int)i;
    return -2;
}

bool bf_own_picks_add(struct picks *ps, const struct pick *p)
{
    if (ps->n == ps->cap) {
        size_t nc = ps->cap ? ps->cap * 2 : 64;
        struct pick *np = realloc(ps->p, nc * sizeof *np);
        if (!np)
            return false;
        ps->p = np;
        ps->cap = nc;
    }
    ps->p[ps->n++] = *p;
    return true;
}

const char *bf_own_str(const char *s)
{
    return s ? s : "";
}

/* The peer recorded for a machine in own.out ("" when absent). */
static void out_peer(struct bf_cycle *c, const char *id, char *peer, size_t n)
{
    peer[0] = 0;
    MDB_txn *txn;
    if (mdb_txn_begin(c->own->st->env, NULL, MDB_RDONLY, &txn) != 0)
        return;
    MDB_val k = {strlen(id), (void *)id}, v;
    if (mdb_get(txn, c->own->st->dbi[BF_OWN_DB_OUT], &k, &v) == 0 &&
        v.mv_size >= sizeof(struct bf_own_xfer_rec)) {
        size_t l = v.mv_size - sizeof(struct bf_own_xfer_rec);
        if (l >= n)
            l = n - 1;
        memcpy(peer, (const char *)v.mv_data + sizeof(struct bf_own_xfer_rec), l);
        peer[l] = 0;
    }
    mdb_txn_abort(txn);
}

/* The selector and id-list checks common to the three machine instructions. */
bool bf_own_check_shape(size_t n_ids, char **ids, int32_t count, struct reply *r)
{
    if (count < 0) {
        bf_own_set_reason(r, OUT_INVALID, "negative count");
        return false;
    }
    if (count > 0 && n_ids > 0) {
        bf_own_set_reason(r, OUT_INVALID, "name machine_ids or a selector (count), not both");
        return false;
    }
    if (count == 0 && n_ids == 0) {
        bf_own_set_reason(r, OUT_INVALID, "no machine_ids and no selector (count)");
        return false;
    }
    if ((size_t)count > BF_OWN_MAX_IDS || n_ids > BF_OWN_MAX_IDS) {
        bf_own_set_reason(r, OUT_INVALID, "at most %d machines per instruction", BF_OWN_MAX_IDS);
        return false;
    }
    for (size_t i = 0; i < n_ids; i++) {
        size_t l = ids[i] ? strlen(ids[i]) : 0;
        if (l == 0 || l > BF_OWN_ID_MAX) {
            bf_own_set_reason(r, OUT_INVALID, "machine id %zu is empty or longer than %d bytes", i,
                              BF_OWN_ID_MAX);
            return false;
        }
    }
    return true;
}

/*
 * The donor's machines for a transfer (want = Idle) or a speculative
 * reassignment (want = Speculative): named ids (each must qualify: all or
 * nothing; one already transferred to `to` is skipped as done), or a
 * selector resolved in give-up order (reserved first, lowest reclamation
 * penalty, then price and id: the engine's Idle order).
 */
static bool donor_picks(struct bf_cycle *c, int want, char **ids, size_t n_ids, int32_t count,
                        const char *itype, const char *zone, const char *to, struct picks *out,
                        struct reply *r)
{
    struct bf_cycle_own *o = c->own;
    struct bf_shm *s = c->shm;
    if (count > 0) {
        int ti = bf_own_type_idx(s, itype), zi = bf_own_zone_idx(s, zone);
        uint32_t hwm = bf_inv_hwm(s);
        for (uint32_t slot = 0; ti != -2 && zi != -2 && slot < hwm && slot < c->capacity; slot++) {
            const struct slotinfo *si = &c->slots[slot];
            if (!si->present || si->state != want || (ti >= 0 && si->type_idx != ti) ||
                (zi >= 0 && si->zone_idx != zi) || bf_pending(s, slot))
                continue;
            struct bf_machine_rec rec;
            if (bf_inv_read(s, slot, &rec) != 0 || !(rec.flags & BF_REC_VALID) || rec.cluster ||
                rec.state != want)
                continue;
            uint32_t il = 0;
            const char *id = bf_str(s, rec.id, &il);
            if (!id)
                continue;
            bool reserved = bf_idmap_get(&o->resv, id, il, NULL);
            if (si->held && !reserved)
                continue; /* not owned: leaving this shard */
            struct pick p = {slot, id, il, reserved, rec.rpb, rec.price_per_hour, 0};
            if (!bf_own_picks_add(out, &p)) {
                bf_own_set_reason(r, OUT_FAILED, "out of memory");
                return false;
            }
        }
        if (!out->n) {
            bf_own_set_reason(r, OUT_FAILED,
                              "no %s unbound machine owned by this shard matches "
                              "instance_type=\"%s\" zone=\"%s\" (none in flight)",
                              bf_state_name(want), bf_own_str(itype), bf_own_str(zone));
            return false;
        }
        qsort(out->p, out->n, sizeof *out->p, cmp_give_up);
        if (out->n > (size_t)count)
            out->n = (size_t)count;
        return true;
    }
    for (size_t i = 0; i < n_ids; i++) {
        const char *id = ids[i];
        size_t il = strlen(id);
        bool dup = false;
        for (size_t j = 0; j < out->n && !dup; j++)
            dup = out->p[j].len == il && !memcmp(out->p[j].id, id, il);
        if (dup)
            continue;
        if (bf_idmap_get(&o->view.out, id, il, NULL)) {
            char peer[BF_OWN_ID_MAX + 1];
            out_peer(c, id, peer, sizeof peer);
            if (!strcmp(peer, to))
                continue; /* already transferred there: idempotent */
            bf_own_set_reason(r, OUT_FAILED, "machine %s was transferred to shard \"%s\"", id,
                              peer);
            return false;
        }
        int64_t slot = bf_own_slot_of(c, id, il);
        if (slot < 0) {
            bf_own_set_reason(r, OUT_FAILED, "machine %s is not in this shard's inventory", id);
            return false;
        }
        struct bf_machine_rec rec;
        if (bf_inv_read(s, (uint32_t)slot, &rec) != 0 || !(rec.flags & BF_REC_VALID)) {
            bf_own_set_reason(r, OUT_FAILED, "machine %s: record busy; retry", id);
            return false;
        }
        uint32_t sl = 0;
        const char *sid = bf_str(s, rec.id, &sl);
        bool reserved = sid && bf_idmap_get(&o->resv, sid, sl, NULL);
        if (c->slots[slot].held && !reserved) {
            bf_own_set_reason(r, OUT_FAILED, "machine %s is not owned by this shard", id);
            return false;
        }
        if (rec.state != want || rec.cluster) {
            bf_own_set_reason(
                r, OUT_FAILED,
                "machine %s is %s%s; only %s, unbound machines move (a transfer never "
                "drains)",
                id, bf_state_name(rec.state), rec.cluster ? " and bound to a cluster" : "",
                bf_state_name(want));
            return false;
        }
        if (bf_pending(s, (uint32_t)slot)) {
            bf_own_set_reason(r, OUT_FAILED, "machine %s has an action in flight", id);
            return false;
        }
        struct pick p = {(uint32_t)slot, sid, sl, reserved, rec.rpb, rec.price_per_hour, 0};
        if (!sid || !bf_own_picks_add(out, &p)) {
            bf_own_set_reason(r, OUT_FAILED, "out of memory");
            return false;
        }
    }
    return true;
}

char **bf_own_pick_ids(const struct picks *ps, char **store)
{
    for (size_t i = 0; i < ps->n; i++)
        store[i] = (char *)ps->p[i].id; /* NUL-terminated in the string table */
    return store;
}

/* ------------------------------------------------------------ transfers */

struct xfer_args {
    int kind;          /* K_TRANSFER or K_REASSIGN */
    int want;          /* Idle or Speculative */
    int src;           /* BF_OWN_SRC_TRANSFER / _SPECULATIVE */
    int ev_out, ev_in; /* audit events */
    char **ids;
    size_t n_ids;
    int32_t count;
    const char *itype, *zone, *from, *to;
};

static void xfer_donor(struct bf_cycle *c, const Instr *in, const struct xfer_args *a,
                       struct reply *r)
{
    struct bf_cycle_own *o = c->own;
    struct picks ps = {0};
    if (!donor_picks(c, a->want, a->ids, a->n_ids, a->count, a->itype, a->zone, a->to, &ps, r))
        goto out;
    if ((uint64_t)o->view.out.n + ps.n > BF_OWN_XFER_TABLE_FACTOR * (uint64_t)c->capacity) {
        bf_own_set_reason(r, OUT_FAILED, "transfer-out table full (%u machines)", o->view.out.n);
        goto out;
    }
    MDB_txn *txn;
    if (!bf_own_begin(c, &txn, r))
        goto out;
    int64_t now = bf_now_ns();
    size_t tl = strlen(a->to);
    uint8_t *val = malloc(sizeof(struct bf_own_xfer_rec) + tl);
    if (!val) {
        bf_own_fail_txn(c, txn, ENOMEM, r);
        goto out;
    }
    struct bf_own_xfer_rec xr = {.kind = (uint8_t)a->src, .at_ns = now};
    memcpy(val, &xr, sizeof xr);
    memcpy(val + sizeof xr, a->to, tl);
    int rc = 0;
    for (size_t i = 0; i < ps.n && !rc; i++) {
        MDB_val k = {ps.p[i].len, (void *)ps.p[i].id}, v = {sizeof xr + tl, val};
        rc = mdb_put(txn, o->st->dbi[BF_OWN_DB_OUT], &k, &v, 0);
        int d;
        if (!rc && (d = mdb_del(txn, o->st->dbi[BF_OWN_DB_IN], &k, NULL)) && d != MDB_NOTFOUND)
            rc = d;
        if (!rc && (d = mdb_del(txn, o->st->dbi[BF_OWN_DB_RESERVED], &k, NULL)) &&
            d != MDB_NOTFOUND)
            rc = d;
    }
    free(val);
    if (rc) {
        bf_own_fail_txn(c, txn, rc, r);
        goto out;
    }
    uint64_t gen = ps.n ? bf_own_bump_generation(c, txn) : o->view.generation;
    if (!gen && ps.n) {
        bf_own_fail_txn(c, txn, EIO, r);
        goto out;
    }
    char reason[96] = "";
    if (a->count > 0 && ps.n < (size_t)a->count)
        snprintf(reason, sizeof reason, "resolved %zu of %d requested", ps.n, a->count);
    /* echo: the resolved ids; for named ids every one of them (some may
     * have been transferred by an earlier instruction: idempotent) */
    char **echo = calloc(ps.n + 1, sizeof *echo);
    if (!echo) {
        bf_own_fail_txn(c, txn, ENOMEM, r);
        goto out;
    }
    bool ok = a->count > 0 ? bf_own_commit_accept(c, txn, in, a->kind, reason,
                                                  bf_own_pick_ids(&ps, echo), ps.n, r)
                           : bf_own_commit_accept(c, txn, in, a->kind, reason, a->ids, a->n_ids, r);
    free(echo);
    if (!ok)
        goto out;
    r->outcome = OUT_ACCEPTED;
    for (size_t i = 0; i < ps.n; i++) {
        const struct pick *p = &ps.p[i];
        bool was_reserved = bf_idmap_del(&o->resv, p->id, p->len);
        if (bf_idmap_put(&o->view.out, p->id, p->len, a->src) != 0)
            o->changed = true; /* cannot remember it here: re-evaluated from a reload */
        bf_idmap_del(&o->view.in, p->id, p->len);
        bf_own_touch(c, p->slot);
        bf_own_audit(c, a->ev_out, p->id, in->instruction_id, a->from, a->to,
                     was_reserved ? "was reserved for transfer" : "", 0, 0);
    }
    if (o->changed)
        bf_own_view_load(o->st, c->o.ownership, &o->view);
    o->view.generation = gen;
    bf_own_resv_recompute_expiry(o);
    BF_STAT_ADD(*(a->kind == K_TRANSFER ? &c->shm->st->own.transferred_out
                                        : &c->shm->st->own.speculative_out),
                ps.n);
    BF_INFO("machines released to another shard",
            "instruction=%s instruction_id=%.128s "
            "machines=%zu to=%s",
            bf_own_kind_name(a->kind), in->instruction_id, ps.n, a->to);
out:
    free(ps.p);
}

static void xfer_recipient(struct bf_cycle *c, const Instr *in, const struct xfer_args *a,
                           struct reply *r)
{
    struct bf_cycle_own *o = c->own;
    if (a->count > 0) {
        bf_own_set_reason(r, OUT_INVALID,
                          "a selector is resolved by the donor; name the machine_ids "
                          "for the recipient");
        return;
    }
    /* a recipient holds at most its inventory's capacity in transfers in */
    if ((uint64_t)o->view.in.n + a->n_ids > (uint64_t)c->capacity) {
        bf_own_set_reason(r, OUT_FAILED, "transfer-in table full (%u machines, capacity %u)",
                          o->view.in.n, c->capacity);
        return;
    }
    MDB_txn *txn;
    if (!bf_own_begin(c, &txn, r))
        return;
    int64_t now = bf_now_ns();
    size_t fl = strlen(a->from);
    uint8_t *val = malloc(sizeof(struct bf_own_xfer_rec) + fl);
    if (!val) {
        bf_own_fail_txn(c, txn, ENOMEM, r);
        return;
    }
    struct bf_own_xfer_rec xr = {.kind = (uint8_t)a->src, .at_ns = now};
    memcpy(val, &xr, sizeof xr);
    memcpy(val + sizeof xr, a->from, fl);
    int rc = 0;
    for (size_t i = 0; i < a->n_ids && !rc; i++) {
        MDB_val k = {strlen(a->ids[i]), a->ids[i]}, v = {sizeof xr + fl, val};
        rc = mdb_put(txn, o->st->dbi[BF_OWN_DB_IN], &k, &v, 0);
        int d;
        if (!rc && (d = mdb_del(txn, o->st->dbi[BF_OWN_DB_OUT], &k, NULL)) && d != MDB_NOTFOUND)
            rc = d;
    }
    free(val);
    if (rc) {
        bf_own_fail_txn(c, txn, rc, r);
        return;
    }
    uint64_t gen = bf_own_bump_generation(c, txn);
    if (!gen) {
        bf_own_fail_txn(c, txn, EIO, r);
        return;
    }
    if (!bf_own_commit_accept(c, txn, in, a->kind, "", a->ids, a->n_ids, r))
        return;
    r->outcome = OUT_ACCEPTED;
    bool reload = false;
    for (size_t i = 0; i < a->n_ids; i++) {
        size_t l = strlen(a->ids[i]);
        if (bf_idmap_put(&o->view.in, a->ids[i], l, a->src) != 0)
            reload = true;
        bf_idmap_del(&o->view.out, a->ids[i], l);
        int64_t slot = bf_own_slot_of(c, a->ids[i], l);
        if (slot >= 0)
            bf_own_touch(c, (uint32_t)slot);
        bf_own_audit(c, a->ev_in, a->ids[i], in->instruction_id, a->from, a->to, "", 0, 0);
    }
    if (reload)
        bf_own_view_load(o->st, c->o.ownership, &o->view);
    o->view.generation = gen;
    BF_STAT_ADD(*(a->kind == K_TRANSFER ? &c->shm->st->own.transferred_in
                                        : &c->shm->st->own.speculative_in),
                a->n_ids);
    BF_INFO("machines taken over from another shard",
            "instruction=%s instruction_id=%.128s "
            "machines=%zu from=%s",
            bf_own_kind_name(a->kind), in->instruction_id, a->n_ids, a->from);
}

void bf_own_do_transfer(struct bf_cycle *c, const Instr *in, struct reply *r)
{
    const Bigfleet__V1alpha1__TransferOwnership *t = in->transfer_ownership;
    const char *me = c->o.shard_id ? c->o.shard_id : "";
    const char *from = bf_own_str(t->from_shard_id), *to = bf_own_str(t->to_shard_id);
    if (!bf_own_check_shape(t->n_machine_ids, t->machine_ids, t->count, r))
        return;
    if (!from[0] || !to[0]) {
        bf_own_set_reason(r, OUT_INVALID, "TransferOwnership needs from_shard_id and to_shard_id");
        return;
    }
    if (!strcmp(from, to)) {
        bf_own_set_reason(r, OUT_INVALID, "from_shard_id equals to_shard_id (\"%s\")", from);
        return;
    }
    struct xfer_args a = {K_TRANSFER,
                          BF_STATE_IDLE,
                          BF_OWN_SRC_TRANSFER,
                          BF_OWN_EV_TRANSFER_OUT,
                          BF_OWN_EV_TRANSFER_IN,
                          t->machine_ids,
                          t->n_machine_ids,
                          t->count,
                          t->instance_type,
                          t->zone,
                          from,
                          to};
    if (!strcmp(me, from))
        xfer_donor(c, in, &a, r);
    else if (!strcmp(me, to))
        xfer_recipient(c, in, &a, r);
    else
        bf_own_set_reason(r, OUT_INVALID,
                          "addressed to shards \"%s\" -> \"%s\", this shard is \"%s\"", from, to,
                          me);
}

void bf_own_do_reassign(struct bf_cycle *c, const Instr *in, struct reply *r)
{
    const Bigfleet__V1alpha1__ReassignSpeculative *t = in->reassign_speculative;
    const char *me = c->o.shard_id ? c->o.shard_id : "";
    const char *from = bf_own_str(t->from_shard_id), *to = bf_own_str(t->to_shard_id);
    if (!bf_own_check_shape(t->n_machine_ids, t->machine_ids, t->count, r))
        return;
    if (!from[0] != !to[0]) {
        bf_own_set_reason(r, OUT_INVALID, "set both from_shard_id and to_shard_id, or neither");
        return;
    }
    struct xfer_args a = {K_REASSIGN,
                          BF_STATE_SPECULATIVE,
                          BF_OWN_SRC_SPECULATIVE,
                          BF_OWN_EV_SPECULATIVE_OUT,
                          BF_OWN_EV_SPECULATIVE_IN,
                          t->machine_ids,
                          t->n_machine_ids,
                          t->count,
                          t->instance_type,
                          t->zone,
                          from,
                          to};
    bool donor;
    if (from[0]) {
        if (!strcmp(from, to)) {
            bf_own_set_reason(r, OUT_INVALID, "from_shard_id equals to_shard_id (\"%s\")", from);
            return;
        }
        if (strcmp(me, from) && strcmp(me, to)) {
            bf_own_set_reason(r, OUT_INVALID,
                              "addressed to shards \"%s\" -> \"%s\", this shard is \"%s\"", from,
                              to, me);
            return;
        }
        donor = !strcmp(me, from);
    } else {
        /* upstream form (no shard ids): the donor is the shard holding the
         * slots; a selector is always the donor's to resolve */
        donor = t->count > 0;
        for (size_t i = 0; i < t->n_machine_ids && !donor; i++)
            donor = bf_own_slot_of(c, t->machine_ids[i], strlen(t->machine_ids[i])) >= 0;
        if (donor)
            a.to = "";
        else
            a.from = "";
    }
    if (donor)
        xfer_donor(c, in, &a, r);
    else
        xfer_recipient(c, in, &a, r);
}
