/*
 * ownership.c — the cycle's side of the ADR-0055 ownership partition
 * (docs/adr0055.md; cycle_internal.h and own_internal.h declare it).
 *
 * Design notes
 *   - The cycle is the single writer of the partition's rule inputs
 *     (bigfleet/ownership.h lists the LMDB databases and their writers). It
 *     loads them once at start (bf_cycle_own_init) and afterwards keeps its
 *     private copy in step with each commit, so it never re-reads LMDB on
 *     the hot path.
 *   - Held machines: every record the mirror reads goes through
 *     bf_cycle_own_held(): a machine reserved for a transfer, or unbound
 *     (not Configuring/Configured/Draining) and not owned by the rule, is
 *     handed to the engine as held (never credited, claimed, preempted or
 *     released). A bound machine the rule no longer owns keeps serving its
 *     cluster until it drains; the reconciler drops it from the inventory
 *     once it is unbound. The domain part of the rule is cached per machine
 *     profile (equal shapes share a profile) and dropped when the view
 *     changes.
 *   - The per-cycle step (bf_cycle_own_step, own_step.c) runs after the
 *     mirror was refreshed and before the engine: expired reservations, then
 *     the instructions on ring COORD_IN (instructions.c), then, when a domain
 *     changed, one pass over the mirror re-deciding held-ness (O(machines),
 *     only on such a change), then the slots the step touched are re-read.
 *     This file is the bottom of the ownership files: it calls neither the
 *     step, the handlers nor the mirror feed (feed.c calls it).
 *   - Without a store (no --data-dir given to the controller: benchmarks
 *     and tests; or LMDB could not be opened) the shard owns every machine
 *     and each instruction is answered FAILED; the data plane is unchanged.
 *   - Published state: st->own (counts, atomics) and, under st->own.seq,
 *     bounded copies of the reservations and domains for bigfleet-inspect.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/log.h"
#include "bigfleet/util.h"
#include "own_internal.h"

/* ------------------------------------------------------------ helpers */

static bool bound_state(int st)
{
    return st == BF_STATE_CONFIGURING || st == BF_STATE_CONFIGURED || st == BF_STATE_DRAINING;
}

static const char *mprofile_attr(void *ctx, const char *key)
{
    return bf_mprofile_attr(ctx, key);
}

void bf_own_touch(struct bf_cycle *c, uint32_t slot)
{
    struct bf_cycle_own *o = c->own;
    if (o->n_touched == o->cap_touched) {
        uint32_t nc = o->cap_touched ? o->cap_touched * 2 : 64;
        uint32_t *n = realloc(o->touched, nc * sizeof *n);
        if (!n) {
            o->changed = true; /* re-evaluate everything instead */
            return;
        }
        o->touched = n;
        o->cap_touched = nc;
    }
    o->touched[o->n_touched++] = slot;
}

int64_t bf_own_slot_of(struct bf_cycle *c, const char *id, size_t len)
{
    uint32_t slot;
    if (!len || bf_inv_lookup_id(c->shm, id, len, &slot) != 0 || slot >= c->capacity ||
        !c->slots[slot].present)
        return -1;
    return slot;
}

static int32_t pdom_get(struct bf_cycle *c, const struct bf_mprofile *p)
{
    struct bf_cycle_own *o = c->own;
    if (!p->ref)
        return bf_own_domain_of(&o->view, mprofile_attr, (void *)p);
    if (o->pdom_cap) {
        for (uint32_t i = (p->ref * 2654435761u) & (o->pdom_cap - 1);;
             i = (i + 1) & (o->pdom_cap - 1)) {
            if (!o->pdom[i].ref)
                break;
            if (o->pdom[i].ref == p->ref)
                return o->pdom[i].dom;
        }
    }
    int32_t dom = bf_own_domain_of(&o->view, mprofile_attr, (void *)p);
    if ((o->pdom_n + 1) * 2 > o->pdom_cap) {
        uint32_t nc = o->pdom_cap ? o->pdom_cap * 2 : 256;
        struct pdom_entry *ne = calloc(nc, sizeof *ne);
        if (!ne)
            return dom;
        for (uint32_t i = 0; i < o->pdom_cap; i++) {
            if (!o->pdom[i].ref)
                continue;
            uint32_t j = (o->pdom[i].ref * 2654435761u) & (nc - 1);
            while (ne[j].ref)
                j = (j + 1) & (nc - 1);
            ne[j] = o->pdom[i];
        }
        free(o->pdom);
        o->pdom = ne;
        o->pdom_cap = nc;
    }
    uint32_t j = (p->ref * 2654435761u) & (o->pdom_cap - 1);
    while (o->pdom[j].ref)
        j = (j + 1) & (o->pdom_cap - 1);
    o->pdom[j] = (struct pdom_entry){p->ref, dom};
    o->pdom_n++;
    return dom;
}

void bf_own_pdom_clear(struct bf_cycle_own *o)
{
    if (o->pdom_cap)
        memset(o->pdom, 0, o->pdom_cap * sizeof *o->pdom);
    o->pdom_n = 0;
}

int bf_own_source_of_slot(struct bf_cycle *c, uint32_t slot, const struct bf_own_view *v)
{
    struct bf_machine_rec r;
    if (bf_inv_read(c->shm, slot, &r) != 0 || !(r.flags & BF_REC_VALID))
        return BF_OWN_SRC_NONE;
    uint32_t len = 0;
    const char *id = bf_str(c->shm, r.id, &len);
    const struct bf_mprofile *p = bf_mprofile_get(c->blobs, c->shm, r.profile);
    if (!id || !p)
        return BF_OWN_SRC_NONE;
    return bf_own_decide(v, id, len, -2, mprofile_attr, (void *)p);
}

bool bf_cycle_own_held(struct bf_cycle *c, const char *id, const struct bf_mprofile *p,
                       const struct bf_machine_rec *rec)
{
    struct bf_cycle_own *o = c->own;
    if (!o || !o->st)
        return false;
    size_t len = strlen(id);
    if (o->resv.n && bf_idmap_get(&o->resv, id, len, NULL))
        return true;
    if (bound_state(rec->state))
        return false;
    if (o->view.all_mode && o->view.out.n == 0)
        return false;
    int dom = o->view.n_domains ? pdom_get(c, p) : -1;
    return bf_own_decide(&o->view, id, len, dom, NULL, NULL) == BF_OWN_SRC_NONE;
}

void bf_own_resv_recompute_expiry(struct bf_cycle_own *o)
{
    o->next_expiry = INT64_MAX;
    for (uint32_t i = 0; i < o->resv.cap; i++)
        if (o->resv.e[i].hash && o->resv.e[i].val < o->next_expiry)
            o->next_expiry = o->resv.e[i].val;
}

uint64_t bf_own_bump_generation(struct bf_cycle *c, MDB_txn *txn)
{
    struct bf_own_store *st = c->own->st;
    MDB_val k = {10, (void *)"generation"}, v;
    uint64_t g = 0;
    if (mdb_get(txn, st->dbi[BF_OWN_DB_META], &k, &v) == 0 && v.mv_size == sizeof g)
        memcpy(&g, v.mv_data, sizeof g);
    g++;
    v.mv_size = sizeof g;
    v.mv_data = &g;
    return mdb_put(txn, st->dbi[BF_OWN_DB_META], &k, &v, 0) == 0 ? g : 0;
}

/* ------------------------------------------------------------ audit */

void bf_own_audit(struct bf_cycle *c, int event, const char *machine, const char *instruction,
                  const char *from, const char *to, const char *detail, int64_t until_ns,
                  int32_t preemptor_priority)
{
    const char *sv[BF_OWN_AS_COUNT] = {machine, instruction, from, to, detail};
    struct bf_own_audit_hdr h = {.at_ns = bf_now_ns(),
                                 .until_ns = until_ns,
                                 .cycle = BF_STAT_GET(c->shm->st->cycle_count) + 1,
                                 .event = (uint32_t)event,
                                 .preemptor_priority = preemptor_priority};
    char buf[BF_OWN_AS_COUNT * BF_OWN_ID_MAX];
    size_t n = 0;
    for (int i = 0; i < BF_OWN_AS_COUNT; i++) {
        size_t l = sv[i] ? strlen(sv[i]) : 0;
        if (l > BF_OWN_ID_MAX)
            l = BF_OWN_ID_MAX;
        memcpy(buf + n, sv[i] ? sv[i] : "", l);
        h.len[i] = (uint16_t)l;
        n += l;
    }
    if (bf_ring_push_bytes(c->shm, BF_RING_OWN_AUDIT, &h, sizeof h, buf, n) == 0)
        bf_wake(c->shm, BF_ROLE_EXECUTOR);
    /* a full ring is counted in its drops */
}

/* ------------------------------------------------------------ publish */

void bf_own_publish(struct bf_cycle *c)
{
    struct bf_cycle_own *o = c->own;
    struct bf_ownership_state *s = &c->shm->st->own;
    uint32_t mode =
        !o->st ? (c->o.data_dir && c->o.data_dir[0] ? BF_OWN_MODE_NO_STORE : BF_OWN_MODE_ALL)
               : (o->view.all_mode ? BF_OWN_MODE_ALL : BF_OWN_MODE_PARTITIONED);
    BF_STAT_SET(s->mode, mode);
    BF_STAT_SET(s->n_domains, o->view.n_domains);
    BF_STAT_SET(s->n_in, o->view.in.n);
    BF_STAT_SET(s->n_out, o->view.out.n);
    BF_STAT_SET(s->n_reserved, o->resv.n);
    BF_STAT_SET(s->n_held, c->n_held);
    BF_SHARED_STORE(s->generation, o->view.generation);
    if (!o->publish)
        return;
    o->publish = false;
    /* the bounded tables, built aside and stored word by word under seq */
    static struct {
        uint32_t n_res, n_dom;
        struct bf_own_reservation res[BF_OWN_PUB_RESERVATIONS];
        char dom[BF_OWN_PUB_DOMAINS][BF_OWN_DOMAIN_TEXT];
    } t;
    _Static_assert(sizeof t == sizeof(struct bf_ownership_state) -
                                   offsetof(struct bf_ownership_state, n_pub_reservations),
                   "published ownership tables changed");
    memset(&t, 0, sizeof t);
    if (o->st && o->resv.n) {
        MDB_txn *txn;
        MDB_cursor *cur;
        if (mdb_txn_begin(o->st->env, NULL, MDB_RDONLY, &txn) == 0) {
            if (mdb_cursor_open(txn, o->st->dbi[BF_OWN_DB_RESERVED], &cur) == 0) {
                MDB_val k, v;
                for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
                     rc == 0 && t.n_res < BF_OWN_PUB_RESERVATIONS;
                     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
                    struct bf_own_resv_rec r;
                    if (v.mv_size < sizeof r)
                        continue;
                    memcpy(&r, v.mv_data, sizeof r);
                    struct bf_own_reservation *e = &t.res[t.n_res++];
                    uint32_t ref = 0;
                    bf_str_find(c->shm, k.mv_data, (uint32_t)k.mv_size, &ref);
                    e->id_ref = ref;
                    e->preemptor_priority = r.preemptor_priority;
                    e->since_ns = r.since_ns;
                    e->until_ns = r.until_ns;
                }
                mdb_cursor_close(cur);
            }
            mdb_txn_abort(txn);
        }
    }
    for (uint32_t i = 0; i < o->view.n_domains && t.n_dom < BF_OWN_PUB_DOMAINS; i++)
        snprintf(t.dom[t.n_dom++], BF_OWN_DOMAIN_TEXT, "%s=%s", o->view.domains[i].key,
                 o->view.domains[i].value);
    bf_own_tables_publish(c->shm, &t);
}

/* ------------------------------------------------------------ lifecycle */

static int load_reservations(struct bf_cycle_own *o)
{
    MDB_txn *txn;
    MDB_cursor *cur;
    if (mdb_txn_begin(o->st->env, NULL, MDB_RDONLY, &txn) != 0)
        return -EIO;
    if (mdb_cursor_open(txn, o->st->dbi[BF_OWN_DB_RESERVED], &cur) != 0) {
        mdb_txn_abort(txn);
        return -EIO;
    }
    MDB_val k, v;
    int err = 0;
    for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0 && !err;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        struct bf_own_resv_rec r;
        if (v.mv_size < sizeof r)
            continue;
        memcpy(&r, v.mv_data, sizeof r);
        err = bf_idmap_put(&o->resv, k.mv_data, k.mv_size, r.until_ns);
    }
    mdb_cursor_close(cur);
    mdb_txn_abort(txn);
    bf_own_resv_recompute_expiry(o);
    return err;
}

int bf_cycle_own_init(struct bf_cycle *c)
{
    struct bf_cycle_own *o = calloc(1, sizeof *o);
    if (!o)
        return -ENOMEM;
    c->own = o;
    o->next_expiry = INT64_MAX;
    o->publish = true;
    if (c->o.data_dir && c->o.data_dir[0]) {
        char err[512];
        int rc = bf_own_store_open(c->o.data_dir, &o->st, err, sizeof err);
        if (rc) {
            BF_ERROR("ownership store unavailable: this shard owns every machine and answers "
                     "coordinator instructions FAILED",
                     "error=\"%s\"", err);
        } else if ((rc = bf_own_view_load(o->st, c->o.ownership, &o->view)) != 0 ||
                   (rc = load_reservations(o)) != 0) {
            BF_ERROR("cannot load the ownership partition from LMDB: this shard owns every "
                     "machine and answers coordinator instructions FAILED",
                     "data_dir=%s error=\"%s\"", c->o.data_dir, strerror(-rc));
            bf_own_view_free(&o->view);
            bf_idmap_free(&o->resv);
            bf_own_store_close(o->st);
            o->st = NULL;
        } else {
            BF_INFO("ownership partition loaded",
                    "mode=%s domains=%u transfers_in=%u transfers_out=%u reservations=%u "
                    "generation=%llu",
                    o->view.all_mode ? "own-all" : "partitioned", o->view.n_domains, o->view.in.n,
                    o->view.out.n, o->resv.n, (unsigned long long)o->view.generation);
        }
    }
    bf_own_publish(c);
    return 0;
}

void bf_cycle_own_free(struct bf_cycle *c)
{
    struct bf_cycle_own *o = c->own;
    if (!o)
        return;
    bf_own_view_free(&o->view);
    bf_idmap_free(&o->resv);
    bf_own_store_close(o->st);
    free(o->pdom);
    free(o->touched);
    free(o->buf);
    free(o);
    c->own = NULL;
}
