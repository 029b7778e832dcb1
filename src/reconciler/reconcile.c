/*
 * reconcile.c — applying provider Lists to the shared inventory
 * (reconciler.h describes the order and the rules; seed 000 §3,
 * reference/shard.md §3.4–§3.6): one machine, one List page, and the walk's
 * seen set and removals. The passes that fetch the Lists are in pass.c.
 *
 * Design notes
 *   - The fast path (known machine, same state) costs one id lookup and one
 *     seqlock read: no decode of the maps, no interning, no write.
 *   - "Seen" is a bitmap over slots, cleared when a walk begins; every
 *     applied List (walk pages and deltas alike) marks what it mentions, and
 *     the walk's end walks [0, hwm) once for the removals.
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
#include "bigfleet/strbuf.h"
#include "bigfleet/util.h"
#include "reconciler/recon_internal.h"

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
    BF_STAT_INC(st->machines_rejected[reason]);
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
static int mark_bit(void *bits, uint32_t slot)
{
    ((uint64_t *)bits)[slot / 64] |= 1ull << (slot % 64);
    return 0;
}

static void collect_touched(struct bf_recon *r)
{
    uint64_t h;
    memset(r->touched, 0, r->words * sizeof *r->touched);
    int n = bf_cl_peek(r->shm, BF_CL_EXECUTOR, r->list_exec_head, &h, mark_bit, r->touched);
    r->touched_all = n == -EOVERFLOW || n == -ESTALE;
}

static inline void mark_seen(struct bf_recon *r, uint32_t slot)
{
    if (slot < r->shm->max_machines)
        r->seen[slot / 64] |= 1ull << (slot % 64);
}

/* ------------------------------------------------------------ one machine */

/* a == b over l bytes; ids of 8..64 bytes (seeded ids are ~25) in 8-byte
 * loads, the last one overlapping, instead of a memcmp call per listed
 * machine */
static inline bool same_id(const char *a, const uint8_t *b, uint32_t l)
{
    if (l < 8 || l > 64)
        return memcmp(a, b, l) == 0;
    uint64_t x, y, d = 0;
    for (uint32_t i = 0; i + 8 < l; i += 8) {
        memcpy(&x, a + i, 8);
        memcpy(&y, b + i, 8);
        d |= x ^ y;
    }
    memcpy(&x, a + l - 8, 8);
    memcpy(&y, b + l - 8, 8);
    return (d | (x ^ y)) == 0;
}

/*
 * Providers list in a stable order and the reconciler inserted the records
 * in the order of its first List, so the machine after slot k is usually in
 * slot k + 1: try that slot first, checked by the id bytes (the string table
 * maps bytes to one ref, and one record holds each id), and fall back to the
 * hash lookups. Sequential records and arena bytes instead of two random
 * probes per machine.
 */
static bool predicted(struct bf_recon *r, const struct bf_prov_bytes *id, uint32_t *slot,
                      struct bf_machine_rec *cur)
{
    struct bf_shm *s = r->shm;
    uint32_t p = r->next_slot, l;
    if (!id->len || p >= bf_inv_hwm(s) || bf_inv_read(s, p, cur) != 0 ||
        !(cur->flags & BF_REC_VALID))
        return false;
    const char *b = bf_str(s, cur->id, &l);
    if (!b || l != id->len || !same_id(b, id->p, l))
        return false;
    *slot = p;
    return true;
}

void bf_recon_apply_one(struct bf_recon *r, const struct bf_prov_bytes *raw, int64_t now_unix_s,
                        struct bf_recon_result *res)
{
    struct bf_shm *s = r->shm;
    struct bf_stats_reconciler *st = &s->st->reconciler;
    struct bf_prov_machine m;
    char why[256];
    res->listed++;
    struct bf_prov_bytes pid;
    int32_t pstate;
    /* after an insert the next machine is probably new too (a cold start):
     * decode it at once; otherwise peek (the fast path needs id and state) */
    bool decoded = r->inserting && bf_prov_machine_decode(raw->p, raw->len, &m) == 0;
    if (decoded) {
        pid = m.id;
        pstate = m.state;
    } else if (bf_prov_machine_peek(raw->p, raw->len, &pid, &pstate)) {
        reject(r, NULL, BF_REJECT_STRUCTURAL, "Machine message does not decode", -1, res);
        return;
    }
    /* lookup (no insertion: a rejected id must not grow the string table) */
    uint32_t id_ref = 0, slot = 0;
    struct bf_machine_rec cur;
    bool have_cur = predicted(r, &pid, &slot, &cur);
    bool known = have_cur, id_absent = false;
    if (have_cur)
        id_ref = cur.id;
    else if (pid.len && bf_str_find(s, pid.p, (uint32_t)pid.len, &id_ref) != 0)
        id_absent = true; /* no string, so no record holds it (we are the sole inserter) */
    else if (pid.len && bf_inv_lookup(s, id_ref, &slot) == 0)
        known = true;
    r->inserting = !known;
    if (known) {
        mark_seen(r, slot);
        r->next_slot = slot + 1;
        /* 1. an action is in flight: the executor's view is authoritative */
        if (bf_pending(s, slot)) {
            res->skipped_pending++;
            BF_STAT_INC(st->machines_skipped_pending);
            return;
        }
        if (!have_cur &&
            (bf_inv_read(s, slot, &cur) != 0 || !(cur.flags & BF_REC_VALID) || cur.id != id_ref)) {
            res->errors++;
            return;
        }
        /* 2. the state-match fast path (nothing is ingested: no full decode) */
        if (cur.state == pstate && !(cur.flags & (BF_REC_NEEDS_REFRESH | BF_REC_REJECTED))) {
            res->fast++;
            return;
        }
        /* 1b. the executor wrote it after the List was issued: the List may be
         * older than that write (the next pass decides) */
        if (touched_since_list(r, slot) && !(cur.flags & BF_REC_NEEDS_REFRESH)) {
            res->skipped_pending++;
            BF_STAT_INC(st->machines_skipped_pending);
            return;
        }
    }
    if (!decoded && bf_prov_machine_decode(raw->p, raw->len, &m)) {
        /* a known machine keeps its last good record (and is not read as removed) */
        reject(r, NULL, BF_REJECT_STRUCTURAL, "Machine message does not decode",
               known ? (int32_t)slot : -1, res);
        return;
    }
    /* ADR-0055: another shard's machine is neither adopted nor screened */
    int source = 0;
    if (!known && r->own && m.id.len) {
        source = bf_recon_own_decide_listed(r->own, &m);
        if (source == 0) {
            res->not_owned++;
            BF_STAT_INC(st->machines_not_owned);
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
            BF_STAT_INC(st->machines_skipped_pending);
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
                    BF_STAT_ADD(st->metadata_decode_errors, (uint64_t)bad);
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
        BF_STAT_INC(st->machines_updated);
        if (old->state != nr.state || old->cluster != nr.cluster)
            push_event(r, slot, &nr, route, res);
        return;
    }
    /* 5. a machine the shard does not know */
    if (m.n_metadata) {
        int bad = bf_prov_machine_assignment(s, &m, &nr);
        if (bad > 0) {
            BF_STAT_ADD(st->metadata_decode_errors, (uint64_t)bad);
            BF_WARN("shard_metadata decode: values malformed (skipped) or not a penalty bucket's "
                    "bound (applied as its bucket); the other keys were restored",
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
    rc = id_absent ? bf_inv_insert_new(s, &nr, &nslot) : bf_inv_insert(s, &nr, &nslot);
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
    r->next_slot = nslot + 1;
    if (r->own)
        bf_recon_own_adopted(r->own, (const char *)m.id.p, m.id.len, source);
    res->inserted++;
    BF_STAT_INC(st->machines_inserted);
    push_event(r, nslot, &nr, nr.cluster, res);
}

/*
 * While inserting (a cold start), the next machine's id is probably new: its
 * string-table probe misses the cache. Start loading that bucket now, so the
 * load overlaps this machine's work. A hint only: the id is read from the
 * usual encoding (field 1 first, one-byte length) without validation, and a
 * wrong guess costs one useless load.
 */
static void prefetch_next_id(const struct bf_recon *r, const struct bf_prov_list_iter *it)
{
    struct bf_prov_list_iter nx = *it;
    struct bf_prov_bytes raw;
    if (bf_prov_list_next(&nx, &raw) != 1 || raw.len < 2 || raw.p[0] != 0x0a || raw.p[1] >= 0x80 ||
        (size_t)raw.p[1] + 2 > raw.len)
        return;
    bf_str_prefetch(r->shm, raw.p + 2, raw.p[1]);
}

void bf_recon_list_issued(struct bf_recon *r)
{
    r->list_exec_head = bf_cl_head(r->shm, BF_CL_EXECUTOR);
}

void bf_recon_apply_page(struct bf_recon *r, const struct bf_prov_list *l,
                         struct bf_recon_result *res)
{
    int64_t t0 = bf_mono_ns();
    int64_t now_unix_s = bf_idle_since_stamp_s(bf_now_ns()); /* only stamps idle_since */
    r->rejects_logged = 0;
    collect_touched(r);
    struct bf_prov_list_iter it;
    struct bf_prov_bytes raw;
    bf_prov_list_iter_init(&it, l);
    uint32_t before = res->rejected;
    int rc;
    while ((rc = bf_prov_list_next(&it, &raw)) == 1) {
        if (r->inserting)
            prefetch_next_id(r, &it);
        bf_recon_apply_one(r, &raw, now_unix_s, res);
    }
    if (rc < 0) /* structure was validated by the decoder: cannot happen */
        res->errors++;
    uint32_t rejected = res->rejected - before;
    if (rejected > (uint32_t)BF_RECON_LOG_REJECTS)
        BF_WARN("provider machines rejected in one List (last good records kept)",
                "rejected=%u structural=%u price=%u interruption_probability=%u", rejected,
                res->rejected_by[BF_REJECT_STRUCTURAL], res->rejected_by[BF_REJECT_PRICE],
                res->rejected_by[BF_REJECT_PROBABILITY]);
    if (r->events_pushed) {
        bf_wake(r->shm, BF_ROLE_SESSION);
        r->events_pushed = false;
    }
    res->apply_ns += bf_mono_ns() - t0;
}

/* ------------------------------------------------------------ walks */

void bf_recon_walk_begin(struct bf_recon *r, bool paged)
{
    struct recon_walk *w = &r->walk;
    w->active = true;
    w->paged = paged;
    free(w->cursor);
    w->cursor = NULL;
    w->cursor_len = 0;
    w->pages = 0;
    w->listed = 0;
    w->started_ns = bf_mono_ns();
    w->exec_head = bf_cl_head(r->shm, BF_CL_EXECUTOR);
    w->exec_lapped = false;
    memset(w->exec_written, 0, r->words * sizeof *w->exec_written);
    memset(r->seen, 0, r->words * sizeof *r->seen);
}

void bf_recon_walk_follow(struct bf_recon *r)
{
    struct recon_walk *w = &r->walk;
    if (!w->active || w->exec_lapped)
        return;
    uint64_t h;
    int n = bf_cl_peek(r->shm, BF_CL_EXECUTOR, w->exec_head, &h, mark_bit, w->exec_written);
    if (n == -EOVERFLOW || n == -ESTALE)
        w->exec_lapped = true; /* sticky until the next walk begins */
    w->exec_head = h;
}

void bf_recon_walk_abort(struct bf_recon *r)
{
    r->walk.active = false;
}

bool bf_recon_remove_slot(struct bf_recon *r, uint32_t slot, uint32_t id_ref,
                          struct bf_recon_result *res)
{
    struct bf_machine_rec rec;
    if (bf_pending(r->shm, slot) || bf_inv_read(r->shm, slot, &rec) != 0 ||
        !(rec.flags & BF_REC_VALID) || (id_ref && rec.id != id_ref))
        return false;
    uint32_t il = 0;
    const char *id = r->own ? bf_str(r->shm, rec.id, &il) : NULL;
    if (bf_inv_remove(r->shm, slot) != 0) {
        res->errors++;
        return false;
    }
    if (id)
        bf_recon_own_removed(r->own, id, il); /* the owned set follows the inventory */
    res->removed++;
    BF_STAT_INC(r->shm->st->reconciler.machines_removed);
    return true;
}

/* Adds a removal candidate of a paged walk to the Get list; false when full. */
static bool add_candidate(struct bf_recon *r, uint32_t slot)
{
    if (r->n_refresh == BF_RECON_MAX_GETS)
        return false;
    if (bf_grow((void **)&r->refresh, &r->refresh_cap, (size_t)r->n_refresh + 1,
                sizeof *r->refresh))
        return false;
    r->refresh[r->n_refresh++] = slot;
    return true;
}

void bf_recon_walk_finish(struct bf_recon *r, struct bf_recon_result *res)
{
    struct recon_walk *w = &r->walk;
    struct bf_shm *s = r->shm;
    bf_recon_walk_follow(r);
    w->active = false;
    r->n_refresh = 0;
    if (w->exec_lapped) {
        /* which records the executor wrote during the walk is unknown: a
         * removal could hit a machine the walk's older pages missed */
        BF_WARN("resync walk: the executor's change log lapped during the walk; no removals "
                "this time",
                "pages=%u listed=%u", w->pages, w->listed);
        res->walk_aborted = true;
        return;
    }
    res->full = true;
    uint32_t hwm = bf_inv_hwm(s), candidates = 0;
    bool overflow = false;
    for (uint32_t slot = 0; slot < hwm; slot++) {
        uint64_t bit = 1ull << (slot % 64);
        if ((r->seen[slot / 64] & bit) || (w->exec_written[slot / 64] & bit))
            continue; /* listed, or written during the walk: the next walk decides */
        if (touched_since_list(r, slot))
            continue;
        if (!w->paged) { /* one List: a complete view */
            bf_recon_remove_slot(r, slot, 0, res);
            continue;
        }
        /* a paged walk trusts the provider's paging: confirm with Get
         * (NOT_FOUND removes), or, for many, with an unpaged walk */
        struct bf_machine_rec rec;
        if (bf_pending(s, slot) || bf_inv_read(s, slot, &rec) || !(rec.flags & BF_REC_VALID))
            continue;
        candidates++;
        if (!overflow && !add_candidate(r, slot))
            overflow = true;
    }
    if (overflow) {
        r->n_refresh = 0;
        r->confirm_unpaged = true;
        r->confirm_expect = candidates;
        res->full = false;
        BF_WARN("resync walk: many machines missing from the paged walk; confirming with one "
                "unpaged List before removing them",
                "missing=%u pages=%u listed=%u", candidates, w->pages, w->listed);
    }
}

bool bf_recon_ownership_step(struct bf_recon *r, struct bf_recon_result *res)
{
    if (!r->own || !bf_recon_own_refresh(r->own))
        return false;
    bf_recon_own_sweep(r->own, res);
    return true;
}

void bf_recon_ownership_finish(struct bf_recon *r, struct bf_recon_result *res, bool full_ok)
{
    if (r->own)
        bf_recon_own_finish(r->own, res, full_ok);
}

bool bf_recon_ownership_idle(struct bf_recon *r)
{
    return r->own && !r->busy && bf_recon_own_idle(r->own);
}

bool bf_recon_ownership_sync_pending(const struct bf_recon *r)
{
    return r->own && bf_recon_own_sync_pending(r->own);
}

void bf_recon_apply(struct bf_recon *r, const struct bf_prov_list *l, bool full,
                    struct bf_recon_result *res)
{
    res->kind = full ? BF_RECON_WALK : BF_RECON_DELTA;
    if (full)
        bf_recon_walk_begin(r, false);
    bf_recon_apply_page(r, l, res);
    if (full) {
        r->walk.pages++;
        r->walk.listed += l->n_machines;
        bf_recon_walk_finish(r, res);
    }
}
