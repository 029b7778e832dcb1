/*
 * emit.c — what leaves a cycle: actions onto the actions ring (after the
 * rails, the in-flight dedup and the live-record re-check), AvailableCapacity
 * hints to the session, and the published results (verdict ledger, shortfall
 * ledger, inventory counts) in the state segment.
 *
 * Enqueue protocol (docs/internals.md): an executable action marks its slot
 * in flight (bf_pending_mark) and carries the tag; a full ring undoes the
 * mark and drops the action (re-derived next cycle, counted). Once the ring
 * has refused a push, the cycle's remaining actions are counted as dropped
 * (in-flight ones still as deduplicated) without building their messages:
 * a 500K-action drain cycle would otherwise re-check and format ~400K
 * actions only to have the ring refuse them.
 *
 * Strings: actions and ledger rows carry string-table refs of engine
 * strings, resolved through an address-keyed cache validated by content
 * (struct strref_cache in cycle_internal.h). Audit-only
 * dispositions (kill switch, dry run) carry pending_tag 0, do not mark the
 * slot, and are only audited by the executor.
 *
 * Publishing: the state segment holds two result buffers. publish_seq goes
 * odd, the unpublished buffer is filled, `published` flips to it (release),
 * publish_seq goes even; a reader that copied a buffer re-checks publish_seq
 * moved by less than 2, so a reader never blocks the cycle.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/log.h"
#include "cycle_internal.h"

/* ------------------------------------------------------------ string refs */

static inline uint32_t ptr_hash(const void *p)
{
    uint64_t x = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ULL;
    return (uint32_t)(x >> 32);
}

/* rebuilds the table keeping the entries used in the last two cycles, at a
 * load of at most 1/4 */
static bool strref_rehash(struct bf_cycle *c)
{
    struct strref_cache *m = &c->strrefs;
    uint32_t tag = (uint32_t)c->cycles_run, live = 0;
    for (uint32_t i = 0; i < m->cap; i++)
        if (m->e[i].p && tag - m->e[i].used <= 2)
            live++;
    uint32_t nc = 256;
    while ((uint64_t)(live + 1) * 4 > nc)
        nc *= 2;
    struct strref_entry *ne = calloc(nc, sizeof *ne);
    if (!ne)
        return false;
    for (uint32_t i = 0; i < m->cap; i++) {
        const struct strref_entry *e = &m->e[i];
        if (!e->p || tag - e->used > 2)
            continue;
        uint32_t j = ptr_hash(e->p) & (nc - 1);
        while (ne[j].p)
            j = (j + 1) & (nc - 1);
        ne[j] = *e;
    }
    free(m->e);
    m->e = ne;
    m->cap = nc;
    m->n = live;
    return true;
}

/* the cache entry of engine bytes b (validated), or NULL when b is empty, not
 * in the string table, or memory ran out (callers then resolve uncached) */
static struct strref_entry *strref_get(struct bf_cycle *c, const void *b, uint32_t len)
{
    struct strref_cache *m = &c->strrefs;
    if (!b || !len)
        return NULL;
    if ((m->n + 1) * 2 > m->cap && !strref_rehash(c))
        return NULL;
    uint32_t mask = m->cap - 1, tag = (uint32_t)c->cycles_run;
    uint32_t i = ptr_hash(b) & mask;
    while (m->e[i].p && m->e[i].p != b)
        i = (i + 1) & mask;
    struct strref_entry *e = &m->e[i];
    if (e->p == b && e->len == len) {
        bool same;
        if (len <= STRREF_INLINE) {
            same = memcmp(e->bytes, b, len) == 0;
        } else {
            uint32_t tl = 0;
            const char *t = bf_str(c->shm, e->ref, &tl);
            same = t && tl == len && memcmp(t, b, len) == 0;
        }
        if (same) {
            e->used = tag;
            return e;
        }
    }
    /* new, or the address now holds other bytes: resolve */
    uint32_t ref = 0;
    if (bf_str_find(c->shm, b, len, &ref) != 0 || ref == 0) {
        if (e->p == b)
            e->len = UINT32_MAX; /* stale: never matches, dropped at the next rehash */
        return NULL;
    }
    if (e->p != b)
        m->n++;
    e->p = b;
    e->len = len;
    e->ref = ref;
    e->prof = 0;
    e->used = tag;
    if (len <= STRREF_INLINE)
        memcpy(e->bytes, b, len);
    return e;
}

static uint32_t bytes_ref(struct bf_cycle *c, const void *b, uint32_t len)
{
    if (!b || !len)
        return 0;
    const struct strref_entry *e = strref_get(c, b, len);
    if (e)
        return e->ref;
    uint32_t ref = 0;
    bf_str_find(c->shm, b, len, &ref);
    return ref;
}

static uint32_t cluster_ref(struct bf_cycle *c, const char *name)
{
    return name ? bytes_ref(c, name, (uint32_t)strlen(name)) : 0;
}

static int cmp_ref(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* A Bootstrap asks the cluster's operator for the blob over its Session
 * stream; with no stream it fails at once ("no active operator session",
 * reference/shard.md §3) and rolls the machine back to Idle. Go retries it
 * every cycle; here cycles also run on every accepted rollup, so a cluster
 * that left demand and disconnected would make the executor churn through
 * the same failing Bootstraps many times a second (seen: 273 per 11 ms
 * cycle in the hostile suite), resetting the machines' Idle age and
 * crowding out connected clusters. Its Bootstraps are held back until its
 * session is back (docs/fidelity.md). */
static bool offline_cluster(struct bf_cycle *c, const char *name)
{
    if (!c->n_offline)
        return false;
    uint32_t ref = cluster_ref(c, name);
    return ref && bsearch(&ref, c->offline, c->n_offline, sizeof ref, cmp_ref) != NULL;
}

/* NeedProfileBlob ref of a fingerprint (bf_cycle_profile_ref, cached) */
static uint32_t fp_profile_ref(struct bf_cycle *c, const char *fp, const struct bf_need_profile *p)
{
    if (!fp || !fp[0])
        return 0;
    uint32_t len = (uint32_t)strlen(fp);
    struct strref_entry *e = strref_get(c, fp, len);
    if (e && e->prof)
        return e->prof;
    uint32_t ref = bf_cycle_profile_ref(c, fp, p);
    if (ref) {
        if (!e)
            e = strref_get(c, fp, len); /* interned just now (a folded profile) */
        if (e)
            e->prof = ref;
    }
    return ref;
}

/* group ref of verdict row i (the row-position memo, then the cache) */
static uint32_t row_group_ref(struct bf_cycle *c, uint32_t i, const void *b, uint32_t len)
{
    if (!b || !len)
        return 0;
    struct rowmemo *m = i < c->rowmemo_cap ? &c->rowmemo[i] : NULL;
    if (m && m->len == len && memcmp(m->bytes, b, len) == 0)
        return m->ref;
    uint32_t ref = bytes_ref(c, b, len);
    if (m && ref && len <= ROWMEMO_INLINE) {
        m->len = len;
        m->ref = ref;
        memcpy(m->bytes, b, len);
    }
    return ref;
}

void bf_cycle_caches_free(struct bf_cycle *c)
{
    free(c->rowmemo);
    c->rowmemo = NULL;
    c->rowmemo_cap = 0;
    free(c->strrefs.e);
    memset(&c->strrefs, 0, sizeof c->strrefs);
    u32set_free(&c->fp_seen);
}

/* ------------------------------------------------------------ actions */

static int start_state(int kind)
{
    switch (kind) {
    case BF_ACTION_BOOTSTRAP:
    case BF_ACTION_DELETE:
        return BF_STATE_IDLE;
    case BF_ACTION_PROVISION:
        return BF_STATE_SPECULATIVE;
    case BF_ACTION_RECLAIM:
    case BF_ACTION_PREEMPT:
        return BF_STATE_CONFIGURED;
    default:
        return -1;
    }
}

static uint32_t configured_of(void *ctx, const char *cluster)
{
    return bf_engine_cluster_configured(ctx, cluster);
}

static void fill_msg(struct bf_cycle *c, const struct bf_engine_result *r,
                     const struct bf_engine_action *a, struct bf_action_msg *m, uint64_t serial)
{
    memset(m, 0, sizeof *m);
    m->serial = serial;
    m->decided_cycle = r->cycle;
    m->slot = a->slot;
    m->machine_id_ref = c->slots[a->slot].id_ref;
    m->cluster_ref = cluster_ref(c, a->cluster);
    if (a->kind == BF_ACTION_BOOTSTRAP || a->kind == BF_ACTION_PROVISION) {
        uint32_t ref = fp_profile_ref(c, a->fingerprint, NULL);
        if (!ref && r->verdicts) {
            /* a profile the engine made (folded gang): find it once and intern it */
            for (size_t i = 0; i < r->n_verdicts; i++)
                if (r->verdicts[i].index == a->need) {
                    ref = fp_profile_ref(c, a->fingerprint, r->verdicts[i].profile);
                    break;
                }
        }
        m->need_profile_ref = ref;
        m->group_ref = bytes_ref(c, a->group, a->group_len);
    }
    m->grace_seconds = a->grace_s > 0 ? (uint32_t)a->grace_s : 0;
    m->preemptor_priority = a->preemptor_priority;
    m->kind = a->kind;
    m->reason = a->reason;
}

void bf_cycle_enqueue(struct bf_cycle *c, const struct bf_engine_result *r,
                      struct bf_cycle_report *rep, int64_t now_ns)
{
    (void)now_ns;
    struct bf_shm *s = c->shm;
    struct bf_stats_cycle *st = &s->st->cycle;
    struct bf_rails_config rc = {.actuation_paused = c->o.actuation_paused,
                                 .dry_run = c->o.dry_run,
                                 .reclaim_cap_fraction = c->o.reclaim_cap_fraction,
                                 .max_actions = c->o.max_actions};
    struct bf_rails_outcome out;
    const struct bf_engine_action *acts = r->actions;
    /* Only the reclaim cap rewrites the list, and Reclaims come from Phase 3
     * (the list is P1 ++ P2 ++ P3): without one the rails reduce to the
     * max-actions cut, and the list is used in place instead of copied. */
    bool reclaims = false;
    for (size_t i = r->n_phase1 + r->n_phase2; i < r->n_actions && !reclaims; i++)
        reclaims = r->actions[i].kind == BF_ACTION_RECLAIM;
    if (!rc.actuation_paused && !rc.dry_run && !(reclaims && rc.reclaim_cap_fraction > 0)) {
        memset(&out, 0, sizeof out);
        out.n_execute = bf_engine_rail_max_actions(r->n_actions, rc.max_actions, &out.deferred);
        out.wake = out.deferred > 0;
    } else {
        if (r->n_actions > c->acts_cap) {
            size_t nc = r->n_actions + 256;
            struct bf_engine_action *na = realloc(c->acts, nc * sizeof *na);
            if (!na)
                return;
            c->acts = na;
            c->acts_cap = nc;
        }
        if (r->n_actions) /* acts and actions may both be NULL when empty */
            memcpy(c->acts, r->actions, r->n_actions * sizeof *c->acts);
        bf_engine_rails_apply(&rc, c->acts, r->n_actions, configured_of, c->engine, &out);
        acts = c->acts;
    }
    rep->decided = (uint32_t)r->n_actions;
    rep->capped = (uint32_t)out.capped;
    rep->deferred = (uint32_t)out.deferred;
    rep->wake_again = out.wake;
    if (out.capped)
        BF_STAT_ADD(st->reclaims_capped, out.capped);
    if (out.deferred)
        BF_STAT_ADD(st->actions_deferred, out.deferred);
    uint64_t serial = BF_STAT_GET(s->st->action_serial);
    bool audit_only = c->o.actuation_paused || c->o.dry_run;
    size_t n = audit_only ? r->n_actions : out.n_execute;
    int pushed = 0;
    if (audit_only) {
        uint8_t disp = c->o.actuation_paused ? BF_DISP_SUPPRESSED : BF_DISP_DRYRUN;
        for (int k = 0; k < BF_ACTION_KIND_COUNT; k++) {
            if (out.suppressed[k])
                BF_STAT_ADD(st->actions_suppressed[k], out.suppressed[k]);
            if (out.dryrun[k])
                BF_STAT_ADD(st->actions_dryrun[k], out.dryrun[k]);
            rep->suppressed += out.suppressed[k];
            rep->dryrun += out.dryrun[k];
        }
        if (n)
            BF_WARN(c->o.actuation_paused ? "actuation paused: actions suppressed"
                                          : "dry-run: actions recorded, not executed",
                    "cycle=%llu actions=%zu", (unsigned long long)r->cycle, n);
        for (size_t i = 0; i < n; i++) {
            struct bf_action_msg m;
            fill_msg(c, r, &r->actions[i], &m, ++serial);
            m.disposition = disp;
            if (bf_ring_push(s, BF_RING_ACTIONS, &m) == 0)
                pushed++;
        }
    } else {
        uint64_t per_kind[BF_ACTION_KIND_COUNT] = {0};
        bool full = false;
        if (c->n_offline > 1)
            qsort(c->offline, c->n_offline, sizeof *c->offline, cmp_ref);
        for (size_t i = 0; i < n; i++) {
            const struct bf_engine_action *a = &acts[i];
            if (a->kind < BF_ACTION_KIND_COUNT)
                per_kind[a->kind]++;
            if (a->kind == BF_ACTION_BOOTSTRAP && offline_cluster(c, a->cluster)) {
                rep->no_session++;
                continue;
            }
            /* in-flight dedup */
            if (a->slot >= c->capacity || bf_pending(s, a->slot)) {
                rep->deduped++;
                continue;
            }
            if (full) {
                /* the ring refused a push: the rest of this cycle's actions are
                 * dropped without the re-check and message work (re-derived) */
                rep->dropped++;
                continue;
            }
            /* actionStillApplicable: the live record must still be in the start state */
            struct bf_machine_rec live;
            if (bf_inv_read(s, a->slot, &live) == 0) {
                if (!(live.flags & BF_REC_VALID) || live.id != c->slots[a->slot].id_ref ||
                    live.state != start_state(a->kind)) {
                    rep->deduped++;
                    continue;
                }
            } /* a busy record fails open: the executor's own state check decides */
            struct bf_action_msg m;
            fill_msg(c, r, a, &m, serial + 1);
            uint8_t tag = bf_pending_mark(s, a->slot);
            m.pending_tag = tag;
            m.disposition = BF_DISP_EXECUTE;
            if (bf_ring_push(s, BF_RING_ACTIONS, &m) != 0) {
                /* undo the mark: we are the only writer of pending_enq */
                bf_pending_unmark(s, a->slot, tag);
                rep->dropped++;
                full = true;
                continue;
            }
            serial++;
            pushed++;
        }
        for (int k = 0; k < BF_ACTION_KIND_COUNT; k++)
            if (per_kind[k])
                BF_STAT_ADD(st->actions_total[k], per_kind[k]);
        if (rep->deduped)
            BF_STAT_ADD(st->actions_deduped, rep->deduped);
        if (rep->dropped)
            BF_STAT_ADD(st->actions_dropped, rep->dropped);
    }
    BF_STAT_SET(s->st->action_serial, serial);
    rep->enqueued = audit_only ? 0 : (uint32_t)pushed;
    if (pushed)
        bf_wake(s, BF_ROLE_EXECUTOR);
    /* AvailableCapacity hints */
    int hints = 0;
    for (size_t i = 0; i < r->n_ac_hints; i++) {
        const struct bf_engine_ac_hint *h = &r->ac_hints[i];
        struct bf_ac_hint_msg m;
        memset(&m, 0, sizeof m);
        m.cluster_ref = cluster_ref(c, h->cluster);
        m.need_profile_ref = fp_profile_ref(c, h->fingerprint, h->profile);
        m.available_count = h->available_count;
        m.confidence = h->confidence;
        m.cost_per_hour = h->cost_per_hour;
        if (bf_ring_push(s, BF_RING_AC_HINTS, &m) == 0) {
            hints++;
        } else {
            BF_STAT_INC(st->ac_hints_dropped);
        }
    }
    if (hints) {
        BF_STAT_ADD(st->ac_hints_sent, (uint64_t)hints);
        bf_wake(s, BF_ROLE_SESSION);
    }
    rep->ac_hints = (uint32_t)hints;
}

/* Refs resolved once per publish call. Within one call the engine's result
 * does not change, so a string address seen earlier in the call names the
 * same bytes (across calls it may not: the engine frees strings and reuses
 * addresses, which is why the cache above compares the bytes); a verdict
 * ledger repeats a few hundred cluster names and fingerprints over thousands
 * of rows. Direct-mapped by address; a ref of 0 (unresolved) is not kept. */
#define CALLREF_SLOTS 1024
struct callref {
    const void *p;
    uint32_t ref;
};

static uint32_t call_cluster_ref(struct bf_cycle *c, struct callref *t, const char *name)
{
    if (!name)
        return 0;
    struct callref *x = &t[ptr_hash(name) & (CALLREF_SLOTS - 1)];
    if (x->p == name)
        return x->ref;
    uint32_t ref = cluster_ref(c, name);
    if (ref)
        *x = (struct callref){name, ref};
    return ref;
}

static uint32_t call_profile_ref(struct bf_cycle *c, struct callref *t, const char *fp,
                                 const struct bf_need_profile *p)
{
    if (!fp || !fp[0])
        return 0;
    struct callref *x = &t[ptr_hash(fp) & (CALLREF_SLOTS - 1)];
    if (x->p == fp)
        return x->ref;
    uint32_t ref = fp_profile_ref(c, fp, p);
    if (ref)
        *x = (struct callref){fp, ref};
    return ref;
}

static void vec_out(int64_t dst[BF_MAX_DIMS], const bf_vec *v)
{
    memcpy(dst, v->v, sizeof v->v);
}

static bool vec_any(const bf_vec *v)
{
    for (int d = 0; d < BF_MAX_DIMS; d++)
        if (v->v[d])
            return true;
    return false;
}

/* A domain name's ref through the per-call address cache (see callref),
 * then the writer's memo (bf_verdict_domain_ref). */
static uint32_t call_domain_ref(struct bf_verdict_writer *w, struct callref *t, const char *name)
{
    if (!name || !name[0])
        return 0;
    struct callref *x = &t[ptr_hash(name) & (CALLREF_SLOTS - 1)];
    if (x->p == name)
        return x->ref;
    uint32_t ref = bf_verdict_domain_ref(w, name);
    if (ref)
        *x = (struct callref){name, ref};
    return ref;
}

void bf_cycle_publish(struct bf_cycle *c, const struct bf_engine_result *r, int64_t now_ns,
                      const struct bf_cycle_report *rep)
{
    struct bf_shm *s = c->shm;
    struct bf_state_main *st = s->st;
    uint64_t seq;
    uint32_t b = bf_result_publish_begin(s, &seq);
    struct bf_cycle_result *out = &st->result[b];
    out->cycle = r->cycle;
    out->computed_at_ns = now_ns;
    out->actions = rep->decided;
    out->unsatisfied = r->n_unsatisfied;
    for (int p = 0; p < BF_PHASE_COUNT; p++)
        out->phase_ns[p] = rep->phase_ns[p];
    out->cycle_ns = rep->total_ns;
    /* verdict ledger */
    /* the table's file grows before the rows are written (and published) */
    struct bf_verdict_writer vw;
    uint32_t nv = 0,
             nv_max = bf_verdict_write_begin(&vw, s, b, r->verdicts ? (uint32_t)r->n_verdicts : 0);
    if (!c->rowmemo && s->max_needs) /* without it, rows resolve through the cache */
        if ((c->rowmemo = calloc(s->max_needs, sizeof *c->rowmemo)))
            c->rowmemo_cap = s->max_needs;
    static _Thread_local struct callref cl_refs[CALLREF_SLOTS], fp_refs[CALLREF_SLOTS];
    memset(cl_refs, 0, sizeof cl_refs);
    memset(fp_refs, 0, sizeof fp_refs);
    static _Thread_local struct callref dom_refs[CALLREF_SLOTS];
    memset(dom_refs, 0, sizeof dom_refs);
    for (size_t i = 0; r->verdicts && i < r->n_verdicts && nv < nv_max; i++) {
        const struct bf_engine_verdict *v = &r->verdicts[i];
        /* the row's cells, filled straight from the verdict (what
         * bf_verdict_read gives back is the struct bf_verdict_row this
         * loop used to fill) */
        struct bf_verdict_slim o;
        struct bf_verdict_extra x;
        nv++;
        memset(&o, 0, sizeof o);
        o.cluster_ref = call_cluster_ref(c, cl_refs, v->cluster);
        o.need_profile_ref = call_profile_ref(c, fp_refs, v->fingerprint, v->profile);
        o.group_ref = row_group_ref(c, nv - 1, v->group, v->group_len);
        o.same_domain_ref = call_domain_ref(&vw, dom_refs, v->same_domain);
        o.arrival_ns = v->arrival_ns;
        vec_out(o.aggregate, &v->aggregate);
        vec_out(o.min_unit, &v->min_unit);
        o.claimed_machine_count = (int32_t)v->claimed_count;
        o.bootstrap_count = (int32_t)v->bootstrap_count;
        o.provision_count = (int32_t)v->provision_count;
        o.parked_age_cycles = (int32_t)v->parked_age_cycles;
        o.age_cycles_unmet = (int32_t)v->age_cycles_unmet;
        o.satisfied = v->satisfied;
        o.same_satisfiable = v->same_satisfiable;
        o.acquisition_parked = v->acquisition_parked;
        o.unmet_reason = v->unmet_reason;
        o.has_matching_supply = v->has_matching_supply;
        o.matching_capped = v->matching_supply.capped;
        o.has_preemption = v->has_preemption;
        uint32_t k = v->n_same_candidates < BF_SAME_CANDIDATES_MAX ? v->n_same_candidates
                                                                   : BF_SAME_CANDIDATES_MAX;
        o.n_same_candidates = (uint8_t)k;
        /* the extra cell only when one of its fields is not zero */
        bool extra = k > 0 || v->matching_supply.idle || v->matching_supply.configured ||
                     v->matching_supply.speculative || v->preemption.victims_found ||
                     vec_any(&v->residual_deficit) || vec_any(&v->preemption.capacity_freed);
        if (extra) {
            memset(&x, 0, sizeof x);
            vec_out(x.residual_deficit, &v->residual_deficit);
            vec_out(x.capacity_freed, &v->preemption.capacity_freed);
            x.victims_found = (int32_t)v->preemption.victims_found;
            x.matching_idle = (int32_t)v->matching_supply.idle;
            x.matching_configured = (int32_t)v->matching_supply.configured;
            x.matching_speculative = (int32_t)v->matching_supply.speculative;
            for (uint32_t j = 0; j < k; j++) {
                x.cand_domain_ref[j] = call_domain_ref(&vw, dom_refs, v->same_candidates[j].domain);
                x.cand_coverage_per_mille[j] = v->same_candidates[j].coverage_per_mille;
                x.cand_satisfiable[j] = v->same_candidates[j].satisfiable;
            }
        }
        bf_verdict_write_cells(&vw, &o, extra ? &x : NULL);
    }
    bf_verdict_write_end(&vw, out);
    /* rows the file could not take, or took without a detail: counted, and
     * logged when it starts and when it stops (readers see a shorter list) */
    uint64_t want = r->verdicts ? r->n_verdicts : 0;
    uint64_t dropped = (want > nv ? want - nv : 0) + vw.lost;
    if (dropped) {
        BF_STAT_ADD(st->cycle.verdicts_dropped, dropped);
        if (!c->verdicts_dropping)
            BF_WARN("verdict ledger incomplete: the state segment could not grow (tmpfs full?) "
                    "or the string table is full; NeedView shows fewer rows",
                    "cycle=%llu verdicts=%llu published=%u incomplete=%u",
                    (unsigned long long)r->cycle, (unsigned long long)want, nv, vw.lost);
        c->verdicts_dropping = true;
    } else if (c->verdicts_dropping) {
        BF_INFO("verdict ledger complete again", "cycle=%llu verdicts=%llu",
                (unsigned long long)r->cycle, (unsigned long long)want);
        c->verdicts_dropping = false;
    }
    /* shortfall ledger (top 100, already sorted by priority desc then age desc) */
    uint32_t ns = 0;
    for (size_t i = 0; i < r->n_shortfalls && ns < BF_SHORTFALL_MAX; i++) {
        const struct bf_engine_shortfall *f = &r->shortfalls[i];
        struct bf_shortfall_row *o = &out->shortfalls[ns++];
        memset(o, 0, sizeof *o);
        o->need_profile_ref = fp_profile_ref(c, f->fingerprint, f->profile);
        o->priority = f->priority;
        o->age_cycles = (int32_t)f->age_cycles;
        o->ipb = f->ipb;
        vec_out(o->deficit, &f->deficit);
    }
    out->n_shortfalls = ns;
    out->shortfalls_total = (uint32_t)r->n_shortfalls;
    out->counts = c->counts;
    bf_result_publish_end(s, b, seq);
}
