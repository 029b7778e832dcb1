/*
 * emit.c — what leaves a cycle: actions onto the actions ring (after the
 * rails, the in-flight dedup and the live-record re-check), AvailableCapacity
 * hints to the session, and the published results (verdict ledger, shortfall
 * ledger, inventory counts) in the state segment.
 *
 * Enqueue protocol (docs/internals.md): an executable action marks its slot
 * in flight (bf_pending_mark) and carries the tag; a full ring undoes the
 * mark and drops the action (re-derived next cycle, counted). Audit-only
 * dispositions (kill switch, dry run) carry pending_tag 0, do not mark the
 * slot, and are only audited by the executor.
 *
 * Publishing: the state segment holds two result buffers. publish_seq goes
 * odd, the unpublished buffer is filled, `published` flips to it (release),
 * publish_seq goes even; a reader that copied a buffer re-checks publish_seq
 * moved by less than 2, so a reader never blocks the cycle.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/log.h"
#include "cycle_internal.h"

static uint32_t cluster_ref(struct bf_cycle *c, const char *name)
{
    uint32_t ref = 0;
    if (name && name[0])
        bf_str_find(c->shm, name, (uint32_t)strlen(name), &ref);
    return ref;
}

static uint32_t bytes_ref(struct bf_cycle *c, const void *b, uint32_t len)
{
    uint32_t ref = 0;
    if (b && len)
        bf_str_find(c->shm, b, len, &ref);
    return ref;
}

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
        uint32_t ref = bf_cycle_profile_ref(c, a->fingerprint, NULL);
        if (!ref && r->verdicts) {
            /* a profile the engine made (folded gang): find it once and intern it */
            for (size_t i = 0; i < r->n_verdicts; i++)
                if (r->verdicts[i].index == a->need) {
                    ref = bf_cycle_profile_ref(c, a->fingerprint, r->verdicts[i].profile);
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
    if (r->n_actions > c->acts_cap) {
        size_t nc = r->n_actions + 256;
        struct bf_engine_action *na = realloc(c->acts, nc * sizeof *na);
        if (!na)
            return;
        c->acts = na;
        c->acts_cap = nc;
    }
    if (r->n_actions)
        memcpy(c->acts, r->actions, r->n_actions * sizeof *c->acts);
    struct bf_rails_config rc = {.actuation_paused = c->o.actuation_paused,
                                 .dry_run = c->o.dry_run,
                                 .reclaim_cap_fraction = c->o.reclaim_cap_fraction,
                                 .max_actions = c->o.max_actions};
    struct bf_rails_outcome out;
    bf_engine_rails_apply(&rc, c->acts, r->n_actions, configured_of, c->engine, &out);
    rep->decided = (uint32_t)r->n_actions;
    rep->capped = (uint32_t)out.capped;
    rep->deferred = (uint32_t)out.deferred;
    rep->wake_again = out.wake;
    if (out.capped)
        atomic_fetch_add(&st->reclaims_capped, out.capped);
    if (out.deferred)
        atomic_fetch_add(&st->actions_deferred, out.deferred);
    uint64_t serial = atomic_load(&s->st->action_serial);
    bool audit_only = c->o.actuation_paused || c->o.dry_run;
    size_t n = audit_only ? r->n_actions : out.n_execute;
    int pushed = 0;
    if (audit_only) {
        uint8_t disp = c->o.actuation_paused ? BF_DISP_SUPPRESSED : BF_DISP_DRYRUN;
        for (int k = 0; k < BF_ACTION_KIND_COUNT; k++) {
            if (out.suppressed[k])
                atomic_fetch_add(&st->actions_suppressed[k], out.suppressed[k]);
            if (out.dryrun[k])
                atomic_fetch_add(&st->actions_dryrun[k], out.dryrun[k]);
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
        for (size_t i = 0; i < n; i++) {
            const struct bf_engine_action *a = &c->acts[i];
            if (a->kind < BF_ACTION_KIND_COUNT)
                atomic_fetch_add(&st->actions_total[a->kind], 1);
            /* in-flight dedup */
            if (a->slot >= c->capacity || bf_pending(s, a->slot)) {
                rep->deduped++;
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
                atomic_store_explicit(&s->pending_enq[a->slot], (uint8_t)(tag - 1),
                                      memory_order_release);
                rep->dropped++;
                continue;
            }
            serial++;
            pushed++;
        }
        if (rep->deduped)
            atomic_fetch_add(&st->actions_deduped, rep->deduped);
        if (rep->dropped)
            atomic_fetch_add(&st->actions_dropped, rep->dropped);
    }
    atomic_store(&s->st->action_serial, serial);
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
        m.need_profile_ref = bf_cycle_profile_ref(c, h->fingerprint, h->profile);
        m.available_count = h->available_count;
        m.confidence = h->confidence;
        m.cost_per_hour = h->cost_per_hour;
        if (bf_ring_push(s, BF_RING_AC_HINTS, &m) == 0) {
            hints++;
        } else {
            atomic_fetch_add(&st->ac_hints_dropped, 1);
        }
    }
    if (hints) {
        atomic_fetch_add(&st->ac_hints_sent, (uint64_t)hints);
        bf_wake(s, BF_ROLE_SESSION);
    }
    rep->ac_hints = (uint32_t)hints;
}

static void vec_out(int64_t dst[BF_MAX_DIMS], const bf_vec *v)
{
    memcpy(dst, v->v, sizeof v->v);
}

static void copy_str(char *dst, size_t n, const char *src)
{
    size_t l = src ? strlen(src) : 0;
    if (l >= n)
        l = n - 1;
    if (l)
        memcpy(dst, src, l);
    dst[l] = 0;
}

void bf_cycle_publish(struct bf_cycle *c, const struct bf_engine_result *r, int64_t now_ns,
                      const struct bf_cycle_report *rep)
{
    struct bf_shm *s = c->shm;
    struct bf_state_main *st = s->st;
    uint64_t seq = atomic_load_explicit(&st->publish_seq, memory_order_relaxed);
    atomic_store_explicit(&st->publish_seq, seq + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    uint32_t b = atomic_load_explicit(&st->published, memory_order_relaxed) ^ 1u;
    struct bf_cycle_result *out = &st->result[b];
    out->cycle = r->cycle;
    out->computed_at_ns = now_ns;
    out->actions = rep->decided;
    out->unsatisfied = r->n_unsatisfied;
    for (int p = 0; p < BF_PHASE_COUNT; p++)
        out->phase_ns[p] = rep->phase_ns[p];
    out->cycle_ns = rep->total_ns;
    /* verdict ledger */
    struct bf_verdict_row *vrows = s->verdicts + (size_t)b * s->max_needs;
    uint32_t nv = 0;
    for (size_t i = 0; r->verdicts && i < r->n_verdicts && nv < s->max_needs; i++) {
        const struct bf_engine_verdict *v = &r->verdicts[i];
        struct bf_verdict_row *o = &vrows[nv++];
        memset(o, 0, sizeof *o);
        o->cluster_ref = cluster_ref(c, v->cluster);
        o->need_profile_ref = bf_cycle_profile_ref(c, v->fingerprint, v->profile);
        o->group_ref = bytes_ref(c, v->group, v->group_len);
        o->arrival_ns = v->arrival_ns;
        vec_out(o->aggregate, &v->aggregate);
        vec_out(o->min_unit, &v->min_unit);
        vec_out(o->residual_deficit, &v->residual_deficit);
        o->claimed_machine_count = (int32_t)v->claimed_count;
        o->bootstrap_count = (int32_t)v->bootstrap_count;
        o->provision_count = (int32_t)v->provision_count;
        o->parked_age_cycles = (int32_t)v->parked_age_cycles;
        o->age_cycles_unmet = (int32_t)v->age_cycles_unmet;
        o->satisfied = v->satisfied;
        o->same_satisfiable = v->same_satisfiable;
        o->acquisition_parked = v->acquisition_parked;
        o->unmet_reason = v->unmet_reason;
        o->has_matching_supply = v->has_matching_supply;
        o->matching_idle = (int32_t)v->matching_supply.idle;
        o->matching_configured = (int32_t)v->matching_supply.configured;
        o->matching_speculative = (int32_t)v->matching_supply.speculative;
        o->matching_capped = v->matching_supply.capped;
        o->has_preemption = v->has_preemption;
        o->victims_found = (int32_t)v->preemption.victims_found;
        vec_out(o->capacity_freed, &v->preemption.capacity_freed);
        copy_str(o->same_domain, sizeof o->same_domain, v->same_domain);
        uint32_t k = v->n_same_candidates < BF_SAME_CANDIDATES_MAX ? v->n_same_candidates
                                                                   : BF_SAME_CANDIDATES_MAX;
        o->n_same_candidates = (uint8_t)k;
        for (uint32_t j = 0; j < k; j++) {
            copy_str(o->same_candidates[j].domain, sizeof o->same_candidates[j].domain,
                     v->same_candidates[j].domain);
            o->same_candidates[j].coverage_per_mille = v->same_candidates[j].coverage_per_mille;
            o->same_candidates[j].satisfiable = v->same_candidates[j].satisfiable;
        }
    }
    out->n_verdicts = nv;
    /* shortfall ledger (top 100, already sorted by priority desc then age desc) */
    uint32_t ns = 0;
    for (size_t i = 0; i < r->n_shortfalls && ns < BF_SHORTFALL_MAX; i++) {
        const struct bf_engine_shortfall *f = &r->shortfalls[i];
        struct bf_shortfall_row *o = &out->shortfalls[ns++];
        memset(o, 0, sizeof *o);
        o->need_profile_ref = bf_cycle_profile_ref(c, f->fingerprint, f->profile);
        o->priority = f->priority;
        o->age_cycles = (int32_t)f->age_cycles;
        o->ipb = f->ipb;
        vec_out(o->deficit, &f->deficit);
    }
    out->n_shortfalls = ns;
    out->shortfalls_total = (uint32_t)r->n_shortfalls;
    out->counts = c->counts;
    atomic_store_explicit(&st->published, b, memory_order_release);
    atomic_store_explicit(&st->publish_seq, seq + 2, memory_order_release);
}
