/*
 * ownership.c — the reconciler's side of the ADR-0055 ownership partition
 * (docs/adr0055.md; reconciler.h declares it): adopt only owned machines,
 * release the ones the shard no longer owns, persist the owned set.
 *
 * Design notes
 *   - The rule inputs are the cycle's (LMDB, bigfleet/ownership.h); this
 *     process loads a private copy at start and again whenever the cycle's
 *     published generation (st->own.generation) moves. A reload makes the
 *     next pass full (a delta would not list machines that newly became
 *     ours) and sweeps the inventory once: a machine no longer owned is
 *     removed when it is unbound and nothing is in flight on it, else kept
 *     (it still serves its cluster; the cycle holds it once unbound) on a
 *     release list re-checked after every pass.
 *   - An unknown listed machine is decided before the screen: one that is
 *     not ours costs a few label comparisons, never a string-table entry.
 *   - The owned set (LMDB database "owned", written only here) is the
 *     inventory's owned machines, persisted: after the first full pass of
 *     this process it is synchronised with the inventory (put what is
 *     missing, delete what is gone; O(machines) once, ~1 s at 500K), then
 *     every adoption and removal is queued and written in one transaction
 *     at the end of the pass. A failed write is counted and retried by the
 *     next synchronisation.
 *   - The synchronisation runs in slices of `sync_slice` records (then of
 *     owned-set keys), one transaction each, 1 ms apart and only between
 *     passes, so neither readiness nor a cycle's reconcile request waits
 *     for more than one slice (before: one O(machines) transaction held
 *     the first requests after /readyz for 1-4 s at 500K). Passes between
 *     slices queue their adoptions and removals as after the sync, so the
 *     set converges: a machine adopted behind the slice cursor is written
 *     by its queued op, one removed after its slice by its queued delete
 *     or the delete sweep. A new ownership view mid-sync starts it over
 *     (what was visited was decided by the old view).
 *   - Ids longer than an LMDB key (511 bytes) are left out of the owned set
 *     and counted (unstorable_ids in the synchronisation's log line).
 *   - Without a store (no data_dir: tests, benchmarks) every listed machine
 *     is adopted and nothing is persisted.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/blobs.h"
#include "bigfleet/log.h"
#include "bigfleet/ownership.h"
#include "bigfleet/strbuf.h"
#include "bigfleet/util.h"
#include "reconciler/recon_internal.h"

struct owned_op {
    char *id;
    uint32_t len;
    uint8_t source; /* 0 = delete */
};

struct kept {
    uint32_t slot;
    uint32_t id_ref;
};

/* A synchronisation in slices (see the design notes). */
struct own_sync {
    bool active;
    bool deleting;  /* second half: the owned set's keys, in key order */
    bool failed;    /* a write failed meanwhile: not synchronised at the end */
    uint32_t slot;  /* next inventory slot to put */
    char *key;      /* deleting: resume at the first key >= this one */
    size_t key_len; /* 0 = from the first key */
    size_t key_cap;
    uint32_t put, gone, slices;
    int64_t t0_ns, busy_ns;
};

struct bf_recon_own {
    struct bf_shm *shm;
    struct bf_own_store *st;
    struct bf_own_view view;
    int policy; /* enum bf_own_policy */
    bool loaded;
    bool synced;   /* owned set synchronised with the inventory */
    bool sync_due; /* a full pass succeeded: synchronise when idle */
    uint32_t sync_slice;
    struct own_sync sync;
    struct bf_blob_cache *blobs;
    struct owned_op *ops;
    uint32_t n_ops;
    size_t cap_ops;
    struct kept *kept;
    uint32_t n_kept;
    size_t cap_kept;
    char attr_buf[BF_OWN_ID_MAX + 1];
    int64_t released_total;
    uint64_t unstorable_ids; /* ids too long for an LMDB key, left out (since start) */
};

static bool bound_state(int st)
{
    return st == BF_STATE_CONFIGURING || st == BF_STATE_CONFIGURED || st == BF_STATE_DRAINING;
}

int bf_recon_own_new(struct bf_shm *shm, const char *data_dir, int policy, uint32_t sync_slice,
                     struct bf_recon_own **out)
{
    *out = NULL;
    if (!data_dir || !data_dir[0])
        return 0;
    struct bf_recon_own *o = calloc(1, sizeof *o);
    if (!o)
        return -ENOMEM;
    o->shm = shm;
    o->policy = policy;
    o->sync_slice = sync_slice ? sync_slice : BF_RECON_OWN_SYNC_SLICE;
    o->blobs = bf_blob_cache_new();
    if (!o->blobs) {
        free(o);
        return -ENOMEM;
    }
    char err[512];
    int rc = bf_own_store_open(data_dir, &o->st, err, sizeof err);
    if (rc) {
        BF_ERROR("ownership store unavailable: every listed machine is adopted", "error=\"%s\"",
                 err);
        bf_blob_cache_free(o->blobs);
        free(o);
        return 0;
    }
    *out = o;
    return 0;
}

void bf_recon_own_free(struct bf_recon_own *o)
{
    if (!o)
        return;
    for (uint32_t i = 0; i < o->n_ops; i++)
        free(o->ops[i].id);
    free(o->ops);
    free(o->kept);
    free(o->sync.key);
    bf_own_view_free(&o->view);
    bf_own_store_close(o->st);
    bf_blob_cache_free(o->blobs);
    free(o);
}

bool bf_recon_own_refresh(struct bf_recon_own *o)
{
    uint64_t g = BF_SHARED_LOAD(o->shm->st->own.generation);
    if (o->loaded && (g == 0 || g == o->view.generation))
        return false;
    int rc = bf_own_view_load(o->st, o->policy, &o->view);
    if (rc) {
        BF_ERROR("cannot load the ownership partition; the previous view is kept", "error=\"%s\"",
                 strerror(-rc));
        return false;
    }
    if (!o->loaded || g)
        BF_INFO("ownership partition loaded",
                "mode=%s domains=%u transfers_in=%u "
                "transfers_out=%u generation=%llu",
                o->view.all_mode ? "own-all" : "partitioned", o->view.n_domains, o->view.in.n,
                o->view.out.n, (unsigned long long)o->view.generation);
    o->loaded = true;
    if (o->sync.active) {
        /* Slots and keys already visited were decided by the old view: a
         * machine it did not own but this one does (still in the inventory,
         * so never adopted again) would stay out of the set. Start over. */
        o->sync.active = false;
        o->sync_due = true;
    }
    return true;
}

/* ------------------------------------------------------------ the rule */

struct wire_attr {
    struct bf_recon_own *o;
    const struct bf_prov_machine *m;
};

static const char *copy_attr(struct bf_recon_own *o, const uint8_t *p, size_t n)
{
    if (n > BF_OWN_ID_MAX)
        return NULL; /* longer than any domain value: cannot match */
    memcpy(o->attr_buf, p, n);
    o->attr_buf[n] = 0;
    return o->attr_buf;
}

/* lookupAttribute over a decoded provider Machine (engine.md §1.5) */
static const char *wire_attr_fn(void *ctx, const char *key)
{
    struct wire_attr *w = ctx;
    if (!strcmp(key, BF_LABEL_INSTANCE_TYPE) && w->m->instance_type.len)
        return copy_attr(w->o, w->m->instance_type.p, w->m->instance_type.len);
    if (!strcmp(key, BF_LABEL_ZONE) && w->m->zone.len)
        return copy_attr(w->o, w->m->zone.p, w->m->zone.len);
    struct bf_prov_map_iter it;
    struct bf_prov_bytes k, v;
    const char *found = NULL;
    size_t kl = strlen(key);
    bf_prov_map_iter_init(&it, w->m, BF_PROV_MAP_LABELS);
    while (bf_prov_map_next(&it, &k, &v) == 1)
        if (k.len == kl && !memcmp(k.p, key, kl))
            found = copy_attr(w->o, v.p, v.len); /* a repeated key: the last wins */
    return found;
}

int bf_recon_own_decide_listed(struct bf_recon_own *o, const struct bf_prov_machine *m)
{
    struct wire_attr w = {o, m};
    return bf_own_decide(&o->view, (const char *)m->id.p, m->id.len, -2, wire_attr_fn, &w);
}

static const char *mprofile_attr(void *ctx, const char *key)
{
    return bf_mprofile_attr(ctx, key);
}

/* The rule for a record in the inventory (-1 when it cannot be read). */
static int decide_record(struct bf_recon_own *o, const struct bf_machine_rec *rec)
{
    uint32_t len = 0;
    const char *id = bf_str(o->shm, rec->id, &len);
    const struct bf_mprofile *p = bf_mprofile_get(o->blobs, o->shm, rec->profile);
    if (!id || !p)
        return -1;
    return bf_own_decide(&o->view, id, len, -2, mprofile_attr, (void *)p);
}

/* ------------------------------------------------------------ owned set writes */

/* The owned set may now differ from the inventory: synchronise again after
 * the next full pass (and do not call a running synchronisation complete). */
static void lost_write(struct bf_recon_own *o)
{
    o->synced = false;
    if (o->sync.active)
        o->sync.failed = true;
}

static void queue(struct bf_recon_own *o, const char *id, size_t len, int source)
{
    if (!o->synced && !o->sync.active)
        return; /* the synchronisation after the first full pass writes everything */
    if (bf_grow((void **)&o->ops, &o->cap_ops, (size_t)o->n_ops + 1, sizeof *o->ops)) {
        lost_write(o);
        return;
    }
    char *c = malloc(len + 1);
    if (!c) {
        lost_write(o);
        return;
    }
    memcpy(c, id, len);
    c[len] = 0;
    o->ops[o->n_ops++] = (struct owned_op){c, (uint32_t)len, (uint8_t)source};
}

void bf_recon_own_adopted(struct bf_recon_own *o, const char *id, size_t len, int source)
{
    queue(o, id, len, source ? source : BF_OWN_SRC_ALL);
}

void bf_recon_own_removed(struct bf_recon_own *o, const char *id, size_t len)
{
    queue(o, id, len, BF_OWN_SRC_NONE);
}

/* An id LMDB cannot hold as a key (over its 511-byte bound; the provider
 * client admits ids up to 1,024 bytes): left out of the owned set, counted
 * in the synchronisation's log line, instead of failing a whole write. */
static bool unstorable(struct bf_recon_own *o, size_t len)
{
    if (len && len <= (size_t)mdb_env_get_maxkeysize(o->st->env))
        return false;
    o->unstorable_ids++;
    return true;
}

static int put_owned(struct bf_recon_own *o, MDB_txn *txn, const char *id, size_t len, int source)
{
    if (unstorable(o, len))
        return 0;
    struct bf_own_owned_rec v = {.source = (uint8_t)source, .at_ns = bf_now_ns()};
    MDB_val k = {len, (void *)id}, val = {sizeof v, &v};
    int rc = mdb_put(txn, o->st->dbi[BF_OWN_DB_OWNED], &k, &val, MDB_NOOVERWRITE);
    return rc == MDB_KEYEXIST ? 0 : rc;
}

static void flush(struct bf_recon_own *o)
{
    if (!o->n_ops)
        return;
    MDB_txn *txn;
    int rc = mdb_txn_begin(o->st->env, NULL, 0, &txn);
    for (uint32_t i = 0; rc == 0 && i < o->n_ops; i++) {
        struct owned_op *op = &o->ops[i];
        if (op->source) {
            rc = put_owned(o, txn, op->id, op->len, op->source);
        } else if (!unstorable(o, op->len)) {
            MDB_val k = {op->len, op->id};
            rc = mdb_del(txn, o->st->dbi[BF_OWN_DB_OWNED], &k, NULL);
            if (rc == MDB_NOTFOUND)
                rc = 0;
        }
    }
    if (rc == 0)
        rc = mdb_txn_commit(txn);
    else
        mdb_txn_abort(txn);
    if (rc) {
        BF_STAT_INC(o->shm->st->reconciler.owned_store_errors);
        BF_ERROR("cannot write the owned set; re-synchronised after the next full pass",
                 "error=\"%s\"", mdb_strerror(rc));
        lost_write(o);
    }
    for (uint32_t i = 0; i < o->n_ops; i++)
        free(o->ops[i].id);
    o->n_ops = 0;
}

/* Is the owned-set key k one of the inventory's owned machines? */
static bool still_owned(struct bf_recon_own *o, const MDB_val *k)
{
    uint32_t ref, slot;
    struct bf_machine_rec rec;
    return k->mv_size < UINT32_MAX &&
           bf_str_find(o->shm, k->mv_data, (uint32_t)k->mv_size, &ref) == 0 &&
           bf_inv_lookup(o->shm, ref, &slot) == 0 && bf_inv_read(o->shm, slot, &rec) == 0 &&
           decide_record(o, &rec) > 0;
}

/* Put the owned machines of up to sync_slice inventory slots. */
static int put_slice(struct bf_recon_own *o, MDB_txn *txn)
{
    struct bf_shm *s = o->shm;
    uint32_t hwm = bf_inv_hwm(s), end = o->sync.slot + o->sync_slice;
    if (end > hwm || end < o->sync.slot)
        end = hwm;
    int rc = 0;
    for (uint32_t slot = o->sync.slot; rc == 0 && slot < end; slot++) {
        struct bf_machine_rec rec;
        if (bf_inv_read(s, slot, &rec) != 0 || !(rec.flags & BF_REC_VALID))
            continue;
        uint32_t len = 0;
        const char *id = bf_str(s, rec.id, &len);
        int src = id ? decide_record(o, &rec) : -1;
        if (src <= 0)
            continue; /* kept while bound, not owned */
        if ((rc = put_owned(o, txn, id, len, src)) == 0)
            o->sync.put++;
    }
    o->sync.slot = end;
    if (rc == 0 && end >= hwm) {
        o->sync.deleting = true; /* machines adopted past hwm from now on are queued ops */
        o->sync.key_len = 0;
    }
    return rc;
}

/* Delete up to sync_slice owned-set keys that are no longer the inventory's
 * owned machines, resuming at the key the previous slice stopped at. */
static int delete_slice(struct bf_recon_own *o, MDB_txn *txn, bool *done)
{
    MDB_cursor *cur = NULL;
    int rc = mdb_cursor_open(txn, o->st->dbi[BF_OWN_DB_OWNED], &cur);
    if (rc)
        return rc;
    MDB_val k = {o->sync.key_len, o->sync.key}, v;
    int g = o->sync.key_len ? mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE)
                            : mdb_cursor_get(cur, &k, &v, MDB_FIRST);
    uint32_t seen = 0;
    for (; g == 0 && seen < o->sync_slice; g = mdb_cursor_get(cur, &k, &v, MDB_NEXT), seen++) {
        if (still_owned(o, &k))
            continue;
        if ((rc = mdb_cursor_del(cur, 0)) != 0)
            break;
        o->sync.gone++;
    }
    if (rc == 0 && g == 0) { /* the slice is full: resume at this (unvisited) key */
        if (bf_grow((void **)&o->sync.key, &o->sync.key_cap, k.mv_size, 1) == 0) {
            memcpy(o->sync.key, k.mv_data, k.mv_size);
            o->sync.key_len = k.mv_size;
        } else {
            rc = ENOMEM;
        }
    } else if (rc == 0 && g != MDB_NOTFOUND) {
        rc = g;
    }
    *done = rc == 0 && g == MDB_NOTFOUND;
    mdb_cursor_close(cur);
    return rc;
}

/* One slice of the synchronisation: the owned set := the inventory's owned
 * machines, once every slice has run. */
static void sync_slice(struct bf_recon_own *o)
{
    struct bf_shm *s = o->shm;
    struct own_sync *y = &o->sync;
    int64_t t0 = bf_mono_ns();
    bool done = false;
    MDB_txn *txn;
    int rc = mdb_txn_begin(o->st->env, NULL, 0, &txn);
    if (rc == 0 && !y->deleting)
        rc = put_slice(o, txn);
    if (rc == 0 && y->deleting) /* also right after the last put slice */
        rc = delete_slice(o, txn, &done);
    if (rc == 0)
        rc = mdb_txn_commit(txn);
    else
        mdb_txn_abort(txn);
    y->slices++;
    y->busy_ns += bf_mono_ns() - t0;
    if (rc) {
        BF_STAT_INC(s->st->reconciler.owned_store_errors);
        BF_ERROR("cannot synchronise the owned set with the inventory; again after the next "
                 "full pass",
                 "phase=%s slot=%u error=\"%s\"", y->deleting ? "delete" : "put", y->slot,
                 rc == ENOMEM ? strerror(rc) : mdb_strerror(rc));
        y->active = false;
        o->synced = false;
        return;
    }
    if (!done)
        return;
    y->active = false;
    o->synced = !y->failed;
    bf_log(o->synced ? BF_LOG_INFO : BF_LOG_WARN,
           o->synced ? "owned set synchronised with the inventory"
                     : "owned set synchronisation ended after a failed write; again after the "
                       "next full pass",
           "put=%u dropped=%u slices=%u busy_ms=%.1f ms=%.1f unstorable_ids=%llu", y->put, y->gone,
           y->slices, y->busy_ns / 1e6, (bf_mono_ns() - y->t0_ns) / 1e6,
           (unsigned long long)o->unstorable_ids);
}

/* ------------------------------------------------------------ release */

/* (the sweep visits each slot once: no duplicates) */
static void keep(struct bf_recon_own *o, uint32_t slot, uint32_t id_ref)
{
    if (bf_grow((void **)&o->kept, &o->cap_kept, (size_t)o->n_kept + 1, sizeof *o->kept))
        return; /* the next sweep finds it again */
    o->kept[o->n_kept++] = (struct kept){slot, id_ref};
}

/* 1 released, 0 kept (bound / in flight), -1 owned or gone (forget it) */
static int try_release(struct bf_recon_own *o, uint32_t slot, uint32_t id_ref,
                       struct bf_recon_result *res)
{
    struct bf_machine_rec rec;
    if (bf_inv_read(o->shm, slot, &rec) != 0)
        return 0;
    if (!(rec.flags & BF_REC_VALID) || (id_ref && rec.id != id_ref) ||
        decide_record(o, &rec) != BF_OWN_SRC_NONE)
        return -1;
    if (bound_state(rec.state) || bf_pending(o->shm, slot))
        return 0;
    uint32_t len = 0;
    const char *id = bf_str(o->shm, rec.id, &len);
    if (bf_inv_remove(o->shm, slot) != 0)
        return 0;
    res->released++;
    BF_STAT_INC(o->shm->st->reconciler.machines_released);
    if (id)
        bf_recon_own_removed(o, id, len);
    return 1;
}

void bf_recon_own_sweep(struct bf_recon_own *o, struct bf_recon_result *res)
{
    o->n_kept = 0;
    uint32_t hwm = bf_inv_hwm(o->shm);
    for (uint32_t slot = 0; slot < hwm; slot++) {
        struct bf_machine_rec rec;
        if (bf_inv_read(o->shm, slot, &rec) != 0 || !(rec.flags & BF_REC_VALID))
            continue;
        if (decide_record(o, &rec) != BF_OWN_SRC_NONE)
            continue;
        if (try_release(o, slot, rec.id, res) == 0)
            keep(o, slot, rec.id);
    }
    BF_STAT_SET(o->shm->st->reconciler.release_blocked, o->n_kept);
    if (res->released || o->n_kept)
        BF_INFO("machines no longer owned by this shard", "released=%u kept_bound_or_in_flight=%u",
                res->released, o->n_kept);
}

void bf_recon_own_finish(struct bf_recon_own *o, struct bf_recon_result *res, bool full_ok)
{
    for (uint32_t i = 0; i < o->n_kept;) {
        if (try_release(o, o->kept[i].slot, o->kept[i].id_ref, res) != 0)
            o->kept[i] = o->kept[--o->n_kept];
        else
            i++;
    }
    BF_STAT_SET(o->shm->st->reconciler.release_blocked, o->n_kept);
    if (full_ok && !o->synced && !o->sync.active)
        o->sync_due = true; /* O(machines): in slices when idle, off the readiness path */
    else
        flush(o); /* also during a synchronisation: it converges with these ops */
    BF_STAT_SET(o->shm->st->reconciler.owned_machines, bf_own_store_count(o->st, BF_OWN_DB_OWNED));
}

bool bf_recon_own_idle(struct bf_recon_own *o)
{
    if (!o->sync.active) {
        if (!o->sync_due)
            return false;
        o->sync_due = false;
        if (o->synced)
            return false;
        for (uint32_t i = 0; i < o->n_ops; i++) /* the synchronisation covers them */
            free(o->ops[i].id);
        o->n_ops = 0;
        o->sync = (struct own_sync){
            .active = true, .t0_ns = bf_mono_ns(), .key = o->sync.key, .key_cap = o->sync.key_cap};
    }
    sync_slice(o);
    if (!o->sync.active)
        BF_STAT_SET(o->shm->st->reconciler.owned_machines,
                    bf_own_store_count(o->st, BF_OWN_DB_OWNED));
    return true;
}

bool bf_recon_own_sync_pending(const struct bf_recon_own *o)
{
    return o->sync.active || o->sync_due;
}
