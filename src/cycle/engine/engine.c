/*
 * engine.c — the engine object: configuration, lifecycle, the cycle driver
 * (seeds/000 §2 steps 2-6 and 10; reference/engine.md §2) and the result
 * accessors.
 *
 * Design notes. A cycle: free strings whose last reference went away (so
 * pointers from the previous result die here, as documented), advance the
 * per-cycle stamp that lazily resets every per-leaf and per-class counter,
 * reset the arenas, NormalizeDemand (its fold decisions, then the demand
 * order of the Needs it passes through, merged again where a rollup or a
 * fold decision changed it), stamp parking, Phase 1, record parking ages, Phase 2,
 * Phase 3, then observation (shortfalls, verdicts, AvailableCapacity). No
 * phase allocates from the heap in steady state: per-cycle data lives in two
 * arenas whose blocks are kept, output arrays keep their capacity.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cycle/engine/engine_internal.h"

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void bf_engine_config_defaults(struct bf_engine_config *c)
{
    memset(c, 0, sizeof *c);
    c->w_priority = 1.0;
    c->w_drain = 0.1;
    c->w_interruption = 0.1;
    c->w_reclamation = 0.1;
    c->drain_estimate_s = 30;
    c->reclaim_grace_s = 600;
    c->ondemand_hold_s = BF_ONDEMAND_IDLE_HOLD_S;
    c->spot_hold_s = BF_SPOT_IDLE_HOLD_S;
    c->park_after_cycles = 8;
    c->reprobe_every_cycles = 32;
    c->shortfall_cap = 100;
    c->matching_supply_cap = 256;
    c->same_candidate_cap = 8;
    c->ac_min_interval_ns = 5LL * 1000000000LL;
}

int bf_engine_new(const struct bf_engine_config *c, struct bf_engine **out)
{
    if (!c || !out || c->capacity == 0 || c->capacity > (1u << 28))
        return -EINVAL;
    if (!(c->w_priority >= 0) || !(c->w_drain >= 0) || !(c->w_interruption >= 0) ||
        !(c->w_reclamation >= 0) || isnan(c->drain_estimate_s) || c->reclaim_grace_s < 0 ||
        c->ondemand_hold_s < 0 || c->spot_hold_s < 0 || c->ac_min_interval_ns < 0)
        return -EINVAL;
    struct bf_engine *e = calloc(1, sizeof *e);
    if (!e)
        return -ENOMEM;
    e->cfg = *c;
    e->cfg.dims = NULL;
    if (c->dims) {
        e->dims = *c->dims;
        e->have_dims = true;
    }
    e->cap = c->capacity;
    if (bfe_intern_init(&e->in) || bfe_mirror_init(e)) {
        bf_engine_free(e);
        return -ENOMEM;
    }
    *out = e;
    return 0;
}

void bf_engine_free(struct bf_engine *e)
{
    if (!e)
        return;
    bfe_credit_free(e);
    bfe_demand_free(e);
    for (int k = 0; k < 3; k++)
        bfe_u64map_free(&e->norm_map[k]);
    bfe_u64map_free(&e->victim_map);
    for (uint32_t c = 0; c < e->n_clusters; c++) {
        free(e->clusters[c].needs);
        free(e->clusters[c].fold);
        free(e->clusters[c].tl[0]);
        free(e->clusters[c].tl[1]);
        bfe_fold_groups_clear(&e->clusters[c]);
        free(e->clusters[c].fg);
        free(e->clusters[c].acl);
        free(e->clusters[c].acl_ac);
    }
    free(e->clusters);
    free(e->cluster_order);
    bfe_u64map_free(&e->cluster_map);
    bfe_mirror_free(e);
    bfe_ledgers_free(e);
    bfe_arena_free(&e->ar);
    bfe_arena_free(&e->sc);
    free(e->d);
    free(e->picks);
    free(e->runs);
    free(e->scratch_dom);
    free(e->scratch_dom_stamp);
    free(e->acts);
    free(e->verdicts);
    free(e->unres);
    free(e->shorts);
    free(e->hints);
    bfe_intern_free(&e->in);
    free(e);
}

static int run_cycle(struct bf_engine *e, int64_t now_ns, struct bf_engine_result *out)
{
    int64_t t0 = mono_ns(), t;
    int rc;
    if ((rc = bfe_normalize(e))) /* (the snapshot order included) */
        return rc;
    t = mono_ns();
    out->t.normalize_ns = t - t0;
    bfe_park_stamp(e);
    int64_t t1 = t;
    if ((rc = bfe_phase1(e)))
        return rc;
    t = mono_ns();
    out->t.phase1_ns = t - t1;
    out->t.phase1_credit_ns = e->t_credit_ns;
    out->n_phase1 = e->n_acts;
    if ((rc = bfe_park_record(e)))
        return rc;
    int64_t t2 = mono_ns();
    if ((rc = bfe_phase2(e)))
        return rc;
    t = mono_ns();
    out->t.phase2_ns = t - t2;
    out->n_phase2 = e->n_acts - out->n_phase1;
    int64_t t3 = t;
    if ((rc = bfe_phase3(e, now_ns)))
        return rc;
    t = mono_ns();
    out->t.phase3_ns = t - t3;
    out->n_phase3 = e->n_acts - out->n_phase1 - out->n_phase2;
    int64_t t4 = t;
    if ((rc = bfe_observe(e, now_ns)))
        return rc;
    t = mono_ns();
    out->t.verdict_ns = t - t4;
    out->t.total_ns = t - t0;
    return 0;
}

int bf_engine_cycle(struct bf_engine *e, int64_t now_ns, struct bf_engine_result *out)
{
    if (!e || !out)
        return -EINVAL;
    memset(out, 0, sizeof *out);
    bfe_intern_gc(&e->in);
    if (++e->stamp == 0)
        e->stamp = 1;
    e->cycle++;
    bfe_arena_reset(&e->ar);
    bfe_arena_reset(&e->sc);
    e->n_acts = 0;
    e->n_unres = 0;
    e->n_verdicts = 0;
    e->n_shorts = 0;
    e->n_hints = 0;
    int rc = run_cycle(e, now_ns, out);
    out->cycle = e->cycle;
    if (rc) {
        struct bf_engine_timings t = out->t;
        memset(out, 0, sizeof *out);
        out->cycle = e->cycle;
        out->t = t;
        e->n_acts = 0;
        e->last_ok = false;
        return rc;
    }
    e->last_ok = true;
    out->actions = e->acts;
    out->n_actions = e->n_acts;
    out->verdicts = (e->cfg.flags & BF_ENGINE_F_NO_VERDICTS) ? NULL : e->verdicts;
    out->n_verdicts = e->n_verdicts;
    out->unresolved = e->unres;
    out->n_unresolved = e->n_unres;
    out->shortfalls = e->shorts;
    out->n_shortfalls = e->n_shorts;
    out->ac_hints = e->hints;
    out->n_ac_hints = e->n_hints;
    out->n_needs = e->n_d;
    uint32_t uns = e->n_unsat; /* counted by the verdicts when there are any */
    if (e->cfg.flags & BF_ENGINE_F_NO_VERDICTS)
        for (uint32_t i = uns = 0; i < e->n_d; i++)
            uns += !bf_vec_is_zero(&e->d[i].rem);
    out->n_unsatisfied = uns;
    memcpy(out->claimed, e->claimed_state, sizeof out->claimed);
    out->prepass.kept = e->pp_kept;
    out->prepass.demand_kept = e->pp_dkept;
    out->prepass.reranked = e->pp_reranked;
    out->prepass.derived = e->pp_derived;
    return 0;
}

bool bf_engine_claimed(const struct bf_engine *e, uint32_t slot, uint32_t *need)
{
    if (!e || slot >= e->cap || !e->last_ok)
        return false;
    uint32_t r = bfe_claimed_rank(e, slot);
    if (r == NONE32)
        return false;
    uint32_t li = e->leaf_of[slot];
    const struct leaf *l = &e->leaves[li];
    if (need && l->cluster_idx != NONE32) {
        *need = bfe_credit_owner(e, li, r);
    } else if (need) {
        *need = NONE32;
        for (uint32_t x = l->runs; x != NONE32; x = e->runs[x].next)
            if (r >= e->runs[x].start && r < e->runs[x].start + e->runs[x].count) {
                *need = e->runs[x].need;
                break;
            }
    }
    return true;
}
