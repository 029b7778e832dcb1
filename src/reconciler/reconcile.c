/*
 * reconcile.c — one reconcile pass: provider List -> shared inventory
 * (reconciler.h describes the order and the rules; seed 000 §3,
 * reference/shard.md §3.4–§3.6).
 *
 * Design notes
 *   - The fast path (known machine, same state) costs one id lookup and one
 *     seqlock read: no decode of the maps, no interning, no write.
 *   - "Seen" is a bitmap over slots, cleared at the start of each full pass;
 *     removal walks [0, hwm) once at the end.
 *   - Writes go through bf_inv_begin/commit (the reconciler side of the
 *     record seqlock, bounded); a record another writer holds past the
 *     timeout is skipped this pass and counted in errors.
 *   - Errors: a List that fails leaves the inventory untouched (a failed pass
 *     is never an empty list).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/log.h"
#include "bigfleet/util.h"
#include "reconciler/reconciler.h"

struct bf_recon {
    struct bf_shm *shm;
    struct bf_prov_client *client;
    struct bf_recon_opts o;
    struct bf_prov_shape_cache *shapes;
    uint64_t *seen; /* bitmap over slots */
    size_t seen_words;
    /* slots the executor wrote after this pass's List was issued: the List
     * may predate those writes, so its view of them is not applied */
    uint64_t *touched;       /* bitmap over slots */
    uint64_t list_exec_head; /* executor change-log head when the List was issued */
    bool touched_all;        /* the log lapped in between: trust no divergence */
    uint8_t *cursor;
    size_t cursor_len;
    bool have_cursor;
    int64_t last_full_ns;
    /* refresh candidates: private read cursors over the executor's and the
     * supervisor's change logs (read only: the cycle owns the logs' tails) */
    uint64_t cl_cursor[BF_CHANGELOG_WRITERS];
    bool refresh_lost; /* a log lapped our cursor, or a pass failed: go full */
    uint32_t *refresh; /* slots flagged NEEDS_REFRESH, for targeted Gets */
    uint32_t n_refresh, refresh_cap;
    /* the pass in flight */
    bool busy;
    bool pass_full;
    int64_t t0;
    uint32_t gets_outstanding;
    struct bf_recon_result res; /* accumulated over the List and the Gets */
    bf_recon_done_fn done;
    void *done_arg;
    /* per-pass */
    int rejects_logged;
    bool events_pushed;
};

int bf_recon_new(struct bf_shm *shm, struct bf_prov_client *client, const struct bf_recon_opts *o,
                 struct bf_recon **out)
{
    struct bf_recon *r = calloc(1, sizeof *r);
    if (!r)
        return -ENOMEM;
    r->shm = shm;
    r->client = client;
    r->o = *o;
    r->shapes = bf_prov_shape_cache_new();
    r->seen_words = (shm->max_machines + 63) / 64;
    r->seen = calloc(r->seen_words, sizeof *r->seen);
    r->touched = calloc(r->seen_words, sizeof *r->touched);
    if (!r->shapes || !r->seen || !r->touched) {
        bf_recon_free(r);
        return -ENOMEM;
    }
    /* the first pass is full: flags set before it are covered */
    for (int w = 0; w < BF_CHANGELOG_WRITERS; w++)
        r->cl_cursor[w] = atomic_load_explicit(&shm->changelog[w].head, memory_order_acquire);
    r->list_exec_head = r->cl_cursor[BF_CL_EXECUTOR];
    *out = r;
    return 0;
}

void bf_recon_free(struct bf_recon *r)
{
    if (!r)
        return;
    bf_prov_shape_cache_free(r->shapes);
    free(r->seen);
    free(r->touched);
    free(r->cursor);
    free(r->refresh);
    free(r);
}

bool bf_recon_busy(const struct bf_recon *r)
{
    return r->busy;
}

void bf_recon_reset_cursor(struct bf_recon *r)
{
    r->have_cursor = false;
}

/* ------------------------------------------------------------ helpers */

static bool bound_state(int st)
{
    return st == BF_STATE_CONFIGURING || st == BF_STATE_CONFIGURED || st == BF_STATE_DRAINING;
}

static void push_event(struct bf_recon *r, uint32_t slot, const struct bf_machine_rec *rec,
                       uint32_t route, struct bf_recon_result *res)
{
    if (!route)
        return;
    struct bf_node_event_msg ev = {
        .slot = slot,
        .machine_id_ref = rec->id,
        .cluster_ref = route,
        .profile_ref = rec->profile,
        .host_ref = rec->host,
        .last_error_ref = rec->last_error,
        .state = rec->state,
        .flags = (uint8_t)(rec->flags & BF_REC_HOST_IS_ID),
    };
    if (bf_ring_push(r->shm, BF_RING_NODE_RECON, &ev) == 0) {
        res->node_events++;
        r->events_pushed = true;
    }
    /* a full ring is counted in the ring's drops; the operator resyncs on reconnect */
}

static void reject(struct bf_recon *r, const struct bf_prov_machine *m, int reason, const char *why,
                   int32_t known_slot, struct bf_recon_result *res)
{
    struct bf_stats_reconciler *st = &r->shm->st->reconciler;
    if (reason < 1 || reason > 3)
        reason = BF_REJECT_STRUCTURAL;
    atomic_fetch_add_explicit(&st->machines_rejected[reason], 1, memory_order_relaxed);
    res->rejected++;
    res->rejected_by[reason]++;
    if (r->rejects_logged++ < BF_RECON_LOG_REJECTS) {
        int idl = m && m->id.len < 200 ? (int)m->id.len : 200;
        BF_WARN("provider machine rejected; last good record kept",
                "machine=\"%.*s\" reason=%s detail=\"%s\" known=%s", idl,
                m ? (const char *)m->id.p : "", bf_reject_reason_label(reason), why,
                known_slot >= 0 ? "true" : "false");
    }
    if (known_slot < 0)
        return;
    struct bf_inv_txn t;
    if (bf_inv_begin(r->shm, (uint32_t)known_slot, &t) == 0) {
        if ((t.old.flags & BF_REC_VALID) && !(t.old.flags & BF_REC_REJECTED) &&
            !bf_pending(r->shm, (uint32_t)known_slot)) {
            struct bf_machine_rec nr = t.old;
            nr.flags |= BF_REC_REJECTED;
            bf_inv_commit(r->shm, &t, &nr, BF_CL_RECONCILER);
        } else {
            bf_inv_abort(r->shm, &t);
        }
    }
}

static inline bool touched_since_list(const struct bf_recon *r, uint32_t slot)
{
    return r->touched_all ||
           (slot < r->shm->max_machines && (r->touched[slot / 64] & (1ull << (slot % 64))));
}

/*
 * The executor changes records as its RPCs are acknowledged, concurrently
 * with a List that may have been answered before those changes: a record
 * it wrote after the List was issued is newer than the List's view of it.
 * Collect those slots from the executor's change log (read-only cursor; the
 * cycle owns the tail). O(executor writes during the List).
 */
static void collect_touched(struct bf_recon *r)
{
    struct bf_shm *s = r->shm;
    struct bf_changelog *c = &s->changelog[BF_CL_EXECUTOR];
    _Atomic uint32_t *e = (_Atomic uint32_t *)((uint8_t *)s->inv_hdr + c->entries_off);
    uint64_t h = atomic_load_explicit(&c->head, memory_order_acquire);
    uint64_t cap = (uint64_t)s->changelog_mask + 1;
    r->touched_all = h - r->list_exec_head > cap;
    memset(r->touched, 0, r->seen_words * sizeof *r->touched);
    if (r->touched_all)
        return;
    for (uint64_t p = r->list_exec_head; p < h; p++) {
        uint32_t slot = atomic_load_explicit(&e[p & s->changelog_mask], memory_order_relaxed);
        if (slot < s->max_machines)
            r->touched[slot / 64] |= 1ull << (slot % 64);
    }
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&c->head, memory_order_relaxed) - r->list_exec_head > cap)
        r->touched_all = true;
}

static inline void mark_seen(struct bf_recon *r, uint32_t slot)
{
    if (slot < r->shm->max_machines)
        r->seen[slot / 64] |= 1ull << (slot % 64);
}

/* ------------------------------------------------------------ one machine */

static void apply_one(struct bf_recon *r, const struct bf_prov_bytes *raw, int64_t now_unix_s,
                      struct bf_recon_result *res)
{
    struct bf_shm *s = r->shm;
    struct bf_stats_reconciler *st = &s->st->reconciler;
    struct bf_prov_machine m;
    char why[256];
    res->listed++;
    if (bf_prov_machine_decode(raw->p, raw->len, &m)) {
        reject(r, NULL, BF_REJECT_STRUCTURAL, "Machine message does not decode", -1, res);
        return;
    }
    /* lookup (no insertion: a rejected id must not grow the string table) */
    uint32_t id_ref = 0, slot = 0;
    bool known = false;
    if (m.id.len && bf_str_find(s, m.id.p, (uint32_t)m.id.len, &id_ref) == 0 &&
        bf_inv_lookup(s, id_ref, &slot) == 0)
        known = true;
    struct bf_machine_rec cur;
    if (known) {
        mark_seen(r, slot);
        /* 1. an action is in flight: the executor's view is authoritative */
        if (bf_pending(s, slot)) {
            res->skipped_pending++;
            atomic_fetch_add_explicit(&st->machines_skipped_pending, 1, memory_order_relaxed);
            return;
        }
        if (bf_inv_read(s, slot, &cur) != 0 || !(cur.flags & BF_REC_VALID) || cur.id != id_ref) {
            res->errors++;
            return;
        }
        /* 2. the state-match fast path */
        if (cur.state == m.state && !(cur.flags & (BF_REC_NEEDS_REFRESH | BF_REC_REJECTED))) {
            res->fast++;
            return;
        }
        /* 1b. the executor wrote it after the List was issued: the List may be
         * older than that write (the next pass decides) */
        if (touched_since_list(r, slot) && !(cur.flags & BF_REC_NEEDS_REFRESH)) {
            res->skipped_pending++;
            atomic_fetch_add_explicit(&st->machines_skipped_pending, 1, memory_order_relaxed);
            return;
        }
    }
    /* 3. the screen */
    int reason = bf_prov_machine_check(&m, why, sizeof why);
    if (reason != BF_REJECT_NONE) {
        reject(r, &m, reason, why, known ? (int32_t)slot : -1, res);
        return;
    }
    struct bf_machine_rec nr;
    bool degraded = false;
    int rc = bf_prov_machine_build(s, r->shapes, &m, known ? id_ref : 0, &nr, &degraded, why,
                                   sizeof why);
    if (rc > 0) {
        reject(r, &m, rc, why, known ? (int32_t)slot : -1, res);
        return;
    }
    if (rc < 0) {
        res->errors++;
        if (r->rejects_logged++ < BF_RECON_LOG_REJECTS)
            BF_ERROR("cannot record provider machine", "machine=\"%.*s\" error=\"%s\"",
                     (int)(m.id.len < 200 ? m.id.len : 200), (const char *)m.id.p, strerror(-rc));
        return;
    }
    if (degraded && r->rejects_logged++ < BF_RECON_LOG_REJECTS)
        BF_WARN("string table full: host ref not recorded (provider only)", "machine=\"%.*s\"",
                (int)(m.id.len < 200 ? m.id.len : 200), (const char *)m.id.p);
    nr.flags |= BF_REC_VALID;
    if (known) {
        /* 4. a known machine in a new state */
        struct bf_inv_txn t;
        if (bf_inv_begin(s, slot, &t) != 0) {
            res->errors++;
            return;
        }
        const struct bf_machine_rec *old = &t.old;
        if (!(old->flags & BF_REC_VALID) || old->id != id_ref) {
            bf_inv_abort(s, &t);
            res->errors++;
            return;
        }
        /* re-checked under the record lock: an executor that started on this
         * machine after our first look has already written it (the cycle marks
         * in flight before the executor can take the action), and its
         * transitional state must not be overwritten by a lagging List */
        if (bf_pending(s, slot)) {
            bf_inv_abort(s, &t);
            res->skipped_pending++;
            atomic_fetch_add_explicit(&st->machines_skipped_pending, 1, memory_order_relaxed);
            return;
        }
        if (bound_state(nr.state)) {
            nr.assigned_priority = old->assigned_priority;
            nr.ipb = old->ipb;
            nr.rpb = old->rpb;
            nr.fingerprint = old->fingerprint;
            nr.group = old->group;
            if (nr.state == BF_STATE_CONFIGURED && old->state != BF_STATE_CONFIGURED &&
                old->state != BF_STATE_DRAINING && m.n_metadata) {
                int bad = bf_prov_machine_assignment(s, &m, &nr);
                if (bad > 0)
                    atomic_fetch_add_explicit(&st->metadata_decode_errors, (uint64_t)bad,
                                              memory_order_relaxed);
            }
        }
        if (nr.state == BF_STATE_IDLE)
            nr.idle_since = old->state == BF_STATE_IDLE && old->idle_since
                                ? old->idle_since
                                : bf_rec_idle_since_encode(s, now_unix_s);
        uint32_t route = nr.cluster ? nr.cluster : old->cluster;
        bool changed = memcmp(old, &nr, sizeof nr) != 0;
        if (!changed) {
            bf_inv_abort(s, &t);
            res->fast++;
            return;
        }
        bf_inv_commit(s, &t, &nr, BF_CL_RECONCILER);
        /* an asynchronous Configure completed: the provisioning-latency sample
         * (seed 000 §8) for its (cluster, fingerprint), once */
        if (old->state == BF_STATE_CONFIGURING && nr.state == BF_STATE_CONFIGURED && nr.cluster &&
            nr.fingerprint) {
            int64_t lat;
            if (bf_stamp_observe(s, nr.cluster, nr.fingerprint, bf_now_ns(), &lat) == 1)
                bf_hist_observe(&st->provisioning_latency, 0.01, 2, 20, lat);
        }
        res->updated++;
        atomic_fetch_add_explicit(&st->machines_updated, 1, memory_order_relaxed);
        if (old->state != nr.state || old->cluster != nr.cluster)
            push_event(r, slot, &nr, route, res);
        return;
    }
    /* 5. a machine the shard does not know */
    if (m.n_metadata) {
        int bad = bf_prov_machine_assignment(s, &m, &nr);
        if (bad > 0) {
            atomic_fetch_add_explicit(&st->metadata_decode_errors, (uint64_t)bad,
                                      memory_order_relaxed);
            BF_WARN("shard_metadata decode failed; the other keys were restored",
                    "machine=\"%.*s\" malformed=%d", (int)(m.id.len < 200 ? m.id.len : 200),
                    (const char *)m.id.p, bad);
        } else if (bad < 0) {
            res->errors++;
            return;
        }
        if (!bound_state(nr.state)) { /* the provider clears the echo with the binding */
            nr.assigned_priority = 0;
            nr.ipb = nr.rpb = 0;
            nr.fingerprint = nr.group = 0;
        }
    }
    if (nr.state == BF_STATE_IDLE)
        nr.idle_since = bf_rec_idle_since_encode(s, now_unix_s);
    uint32_t nslot;
    rc = bf_inv_insert(s, &nr, &nslot);
    if (rc == -EEXIST) { /* cannot happen with one inserter; treat as seen */
        mark_seen(r, nslot);
        return;
    }
    if (rc) {
        res->errors++;
        if (r->rejects_logged++ < BF_RECON_LOG_REJECTS)
            BF_ERROR("cannot insert provider machine", "machine=\"%.*s\" error=\"%s\"",
                     (int)(m.id.len < 200 ? m.id.len : 200), (const char *)m.id.p, strerror(-rc));
        return;
    }
    mark_seen(r, nslot);
    res->inserted++;
    atomic_fetch_add_explicit(&st->machines_inserted, 1, memory_order_relaxed);
    push_event(r, nslot, &nr, nr.cluster, res);
}

void bf_recon_list_issued(struct bf_recon *r)
{
    r->list_exec_head =
        atomic_load_explicit(&r->shm->changelog[BF_CL_EXECUTOR].head, memory_order_acquire);
}

void bf_recon_apply(struct bf_recon *r, const struct bf_prov_list *l, bool full,
                    struct bf_recon_result *res)
{
    struct bf_shm *s = r->shm;
    int64_t t0 = bf_mono_ns();
    int64_t now_unix_s = bf_idle_since_stamp_s(bf_now_ns()); /* only stamps idle_since */
    r->rejects_logged = 0;
    r->events_pushed = false;
    res->full = full;
    uint32_t hwm = bf_inv_hwm(s);
    if (full)
        memset(r->seen, 0, ((hwm + 63) / 64) * sizeof *r->seen);
    collect_touched(r);
    struct bf_prov_list_iter it;
    struct bf_prov_bytes raw;
    bf_prov_list_iter_init(&it, l);
    int rc;
    while ((rc = bf_prov_list_next(&it, &raw)) == 1)
        apply_one(r, &raw, now_unix_s, res);
    if (rc < 0) { /* structure was validated by the decoder: cannot happen */
        res->errors++;
        full = res->full = false;
    }
    if (full) {
        struct bf_stats_reconciler *st = &s->st->reconciler;
        hwm = bf_inv_hwm(s);
        for (uint32_t slot = 0; slot < hwm; slot++) {
            if (r->seen[slot / 64] & (1ull << (slot % 64)))
                continue;
            struct bf_machine_rec rec;
            if (bf_inv_read(s, slot, &rec) != 0 || !(rec.flags & BF_REC_VALID))
                continue;
            if (bf_pending(s, slot) || touched_since_list(r, slot))
                continue; /* in flight or just written: the next pass decides */
            if (bf_inv_remove(s, slot) == 0) {
                res->removed++;
                atomic_fetch_add_explicit(&st->machines_removed, 1, memory_order_relaxed);
            } else {
                res->errors++;
            }
        }
    }
    if (res->rejected > (uint32_t)BF_RECON_LOG_REJECTS)
        BF_WARN("provider machines rejected this pass (last good records kept)",
                "rejected=%u structural=%u price=%u interruption_probability=%u", res->rejected,
                res->rejected_by[BF_REJECT_STRUCTURAL], res->rejected_by[BF_REJECT_PRICE],
                res->rejected_by[BF_REJECT_PROBABILITY]);
    if (r->events_pushed)
        bf_wake(s, BF_ROLE_SESSION);
    res->apply_ns = bf_mono_ns() - t0;
}

/* ------------------------------------------------------------ the pass */

/*
 * Records flagged BF_REC_NEEDS_REFRESH since the last pass (an executor's
 * transport failure or redelivered mid-flight action; a supervisor repair):
 * the slots the executor and supervisor change logs name after our cursors,
 * re-read for the flag. O(writes since the last pass). Returns false when a
 * log lapped a cursor (entries lost: the caller goes full).
 */
static bool collect_refresh(struct bf_recon *r)
{
    struct bf_shm *s = r->shm;
    static const int logs[2] = {BF_CL_EXECUTOR, BF_CL_SUPERVISOR};
    uint64_t cap = (uint64_t)s->changelog_mask + 1;
    bool ok = true;
    r->n_refresh = 0;
    for (int i = 0; i < 2; i++) {
        struct bf_changelog *c = &s->changelog[logs[i]];
        _Atomic uint32_t *e = (_Atomic uint32_t *)((uint8_t *)s->inv_hdr + c->entries_off);
        uint64_t h = atomic_load_explicit(&c->head, memory_order_acquire);
        uint64_t from = r->cl_cursor[logs[i]];
        r->cl_cursor[logs[i]] = h;
        if (h - from > cap) {
            ok = false;
            continue;
        }
        for (uint64_t p = from; p < h; p++) {
            uint32_t slot = atomic_load_explicit(&e[p & s->changelog_mask], memory_order_relaxed);
            struct bf_machine_rec rec;
            if (slot >= s->max_machines || bf_inv_read(s, slot, &rec) ||
                !(rec.flags & BF_REC_VALID) || !(rec.flags & BF_REC_NEEDS_REFRESH))
                continue;
            uint32_t k;
            for (k = 0; k < r->n_refresh && r->refresh[k] != slot; k++)
                ;
            if (k < r->n_refresh)
                continue; /* already listed */
            if (r->n_refresh == BF_RECON_MAX_GETS)
                return false; /* too many for targeted Gets: a full pass is cheaper */
            if (r->n_refresh == r->refresh_cap) {
                uint32_t nc = r->refresh_cap ? r->refresh_cap * 2 : 64;
                uint32_t *nr = realloc(r->refresh, nc * sizeof *nr);
                if (!nr)
                    return false;
                r->refresh = nr;
                r->refresh_cap = nc;
            }
            r->refresh[r->n_refresh++] = slot;
        }
    }
    return ok;
}

static void pass_finish(struct bf_recon *r)
{
    if (r->res.status != BF_PROV_OK)
        r->refresh_lost = true; /* the flagged records were not re-read */
    if (r->events_pushed)
        bf_wake(r->shm, BF_ROLE_SESSION);
    r->busy = false;
    bf_recon_done_fn done = r->done;
    r->done = NULL;
    struct bf_recon_result res = r->res;
    if (done)
        done(r->done_arg, &res);
}

struct get_ctx {
    struct bf_recon *r;
    uint32_t slot, id_ref;
};

static void on_get(void *arg, const struct bf_prov_result *pr, const struct bf_prov_machine *m)
{
    struct get_ctx *g = arg;
    struct bf_recon *r = g->r;
    int64_t t0 = bf_mono_ns();
    if (pr->status == BF_PROV_OK && m) {
        struct bf_prov_bytes raw = {m->buf, m->len};
        apply_one(r, &raw, bf_now_ns() / BF_NS_PER_SEC, &r->res);
    } else if (pr->status == BF_PROV_NOT_FOUND) {
        /* explicit evidence the machine is gone: remove it (unless in flight) */
        struct bf_machine_rec rec;
        if (!bf_pending(r->shm, g->slot) && bf_inv_read(r->shm, g->slot, &rec) == 0 &&
            (rec.flags & BF_REC_VALID) && rec.id == g->id_ref &&
            bf_inv_remove(r->shm, g->slot) == 0) {
            r->res.removed++;
            atomic_fetch_add_explicit(&r->shm->st->reconciler.machines_removed, 1,
                                      memory_order_relaxed);
        }
    } else {
        r->refresh_lost = true; /* retried by a full pass next time */
    }
    r->res.apply_ns += bf_mono_ns() - t0;
    free(g);
    if (--r->gets_outstanding == 0)
        pass_finish(r);
}

/* Targeted re-reads of the flagged records (incremental passes). */
static void start_gets(struct bf_recon *r)
{
    for (uint32_t i = 0; i < r->n_refresh; i++) {
        struct bf_machine_rec rec;
        uint32_t slot = r->refresh[i], l;
        if (bf_inv_read(r->shm, slot, &rec) || !(rec.flags & BF_REC_VALID))
            continue;
        const char *id = bf_str(r->shm, rec.id, &l);
        struct get_ctx *g = malloc(sizeof *g);
        if (!g || !id) {
            free(g);
            r->refresh_lost = true;
            continue;
        }
        *g = (struct get_ctx){r, slot, rec.id};
        r->gets_outstanding++;
        if (bf_prov_get(r->client, id, l, r->o.list_timeout_ns, on_get, g, NULL)) {
            r->gets_outstanding--;
            free(g);
            r->refresh_lost = true;
        }
    }
    r->res.refreshed = r->gets_outstanding;
}

static void on_list(void *arg, const struct bf_prov_result *pr, const struct bf_prov_list *l)
{
    struct bf_recon *r = arg;
    memset(&r->res, 0, sizeof r->res);
    r->res.status = pr->status;
    r->res.list_ns = pr->elapsed_ns;
    r->res.full = r->pass_full;
    if (pr->status == BF_PROV_OK && l) {
        bf_recon_apply(r, l, r->pass_full, &r->res);
        if (r->o.incremental) {
            if (l->revision.len) {
                uint8_t *c = realloc(r->cursor, l->revision.len);
                if (c) {
                    memcpy(c, l->revision.p, l->revision.len);
                    r->cursor = c;
                    r->cursor_len = l->revision.len;
                    r->have_cursor = true;
                } else {
                    r->have_cursor = false;
                }
            } else {
                r->have_cursor = false; /* no deltas from this provider: every pass full */
            }
        }
        if (r->res.full) {
            r->last_full_ns = bf_mono_ns();
            r->refresh_lost = false;
        } else if (r->n_refresh) {
            start_gets(r);
            if (r->gets_outstanding)
                return; /* the pass ends when the last Get answered */
        }
    } else {
        BF_WARN("reconcile: provider List failed; the inventory is kept as it is",
                "status=%s code=%s message=\"%s\" elapsed_ms=%.1f", bf_prov_status_name(pr->status),
                bf_net_code_name(pr->code), pr->message, pr->elapsed_ns / 1e6);
    }
    pass_finish(r);
}

int bf_recon_start(struct bf_recon *r, bf_recon_done_fn done, void *arg)
{
    if (r->busy)
        return -EBUSY;
    int64_t now = bf_mono_ns();
    bool complete = collect_refresh(r);
    bool full = !r->o.incremental || !r->have_cursor || !complete || r->refresh_lost ||
                now - r->last_full_ns >= BF_RECON_FULL_EVERY_NS;
    struct bf_prov_list_req q = {0};
    if (!full) {
        q.since = r->cursor;
        q.since_len = r->cursor_len;
    }
    r->pass_full = full;
    r->done = done;
    r->done_arg = arg;
    r->busy = true;
    r->t0 = now;
    r->gets_outstanding = 0;
    bf_recon_list_issued(r);
    int rc = bf_prov_list(r->client, &q, r->o.list_timeout_ns, on_list, r, NULL);
    if (rc) {
        r->busy = false;
        r->done = NULL;
        r->refresh_lost = true;
        return rc;
    }
    return 0;
}
