/*
 * test_engine_fidelity.c — decisions pinned against the Go engine
 * (intUnderflow/bigfleet pkg/decision, pkg/shard), one test per item of
 * docs/fidelity.md. A test named after a behaviour fails if the engine made
 * the other choice (each was checked by making the other choice); where we
 * deliberately differ from Go the comment says what Go would do.
 * Engine tests run in fast and in reference mode.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/engine.h"
#include "bigfleet/shm.h" /* bf_idle_since_stamp_s (inline) */
#include "engine_fixtures.h"
#include "check_run.h"

static const uint32_t modes[2] = {0, BF_ENGINE_F_REFERENCE};

static uint32_t engine_configured(void *ctx, const char *cluster)
{
    return bf_engine_cluster_configured(ctx, cluster);
}

static struct ef_machine speculative(const char *id, const char *zone, double price, double prob)
{
    struct ef_machine m = ef_gpu_in_zone(id, zone, price);
    m.state = BF_STATE_SPECULATIVE;
    m.ct = prob > 0 ? BF_CT_SPOT : BF_CT_ON_DEMAND;
    m.prob = prob;
    m.idle_since = 0;
    return m;
}

/* item 1: Go's FindSpread compares the domain heads' PricePerHour */
START_TEST(spread_domains_compete_on_the_head_price_not_its_effective_cost)
{
    struct ef *f = ef_new(16, modes[_i]);
    /* $4 penalty bucket: zone-a costs 1 + 0.5 x 4 = 3 effective, zone-b 2 */
    struct ef_machine a = speculative("spec-a", "zone-a", 1.0, 0.5);
    struct ef_machine b = speculative("spec-b", "zone-b", 2.0, 0.0);
    ef_add(f, &a);
    ef_add(f, &b);
    struct ef_prof p;
    ef_prof_init(&p, 1000, 5, 5);
    ef_prof_in(&p, BF_LABEL_INSTANCE_TYPE, EF_A3);
    ef_prof_spread(&p, BF_LABEL_ZONE, 1, BF_WHEN_DO_NOT_SCHEDULE);
    struct bf_engine_need n = ef_gpu_need(&p, 1, NULL);
    ef_set(f, "c", &n, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_actions, 1);
    ck_assert(ef_acted(f, "spec-a", BF_ACTION_PROVISION));
    /* without the spread the pool's effective-cost order applies */
    struct ef_prof q;
    ef_prof_init(&q, 1000, 5, 5);
    ef_prof_in(&q, BF_LABEL_INSTANCE_TYPE, EF_A3);
    n = ef_gpu_need(&q, 1, NULL);
    ef_set(f, "c", &n, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert(ef_acted(f, "spec-b", BF_ACTION_PROVISION));
    ef_free(f);
}
END_TEST

/* item 2 (differ): Go computes 0 x Inf = NaN and its sort order is undefined */
START_TEST(pinned_penalty_orders_zero_probability_machines_by_price_and_risky_ones_last)
{
    struct ef *f = ef_new(16, modes[_i]);
    /* id order would pick a-dear; NaN-as-tie orders would too */
    struct ef_machine a = speculative("a-dear", "z", 3.0, 0.0);
    struct ef_machine b = speculative("b-cheap", "z", 2.0, 0.0);
    struct ef_machine c = speculative("c-spot", "z", 1.0, 0.1);
    ef_add(f, &a);
    ef_add(f, &b);
    ef_add(f, &c);
    struct ef_prof p;
    ef_prof_init(&p, 1000, BF_BUCKET_PINNED, 5);
    ef_prof_in(&p, BF_LABEL_INSTANCE_TYPE, EF_A3);
    struct bf_engine_need n = ef_gpu_need(&p, 2, NULL);
    ef_set(f, "c", &n, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_actions, 2);
    ck_assert_str_eq(f->r.actions[0].machine_id, "b-cheap");
    ck_assert_str_eq(f->r.actions[1].machine_id, "a-dear");
    ef_free(f);
}
END_TEST

/* item 3 (differ): Go's Phase 3 also emits a Reclaim for a Phase 2 victim;
 * under the cap that Reclaim takes the cluster's only slot and is then
 * dropped at enqueue, so nothing is reclaimed. We spend the slot on b-1. */
START_TEST(phase2_victim_gets_no_reclaim_so_the_cap_slot_reclaims_real_excess)
{
    struct ef *f = ef_new(16, modes[_i]);
    char id[16];
    for (int i = 0; i < 3; i++) {
        snprintf(id, sizeof id, "b-%d", i);
        struct ef_machine m = ef_configured(id, "batch", 100, 1, 1);
        ef_add(f, &m);
    }
    ef_first_rollup(f, "batch");
    ef_set(f, "batch", NULL, 0); /* all three are excess */
    ef_want_gpus(f, "train", 1000000, NULL, 1, NULL);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert(ef_acted(f, "b-0", BF_ACTION_PREEMPT));
    ck_assert_uint_eq(ef_count(f, BF_ACTION_RECLAIM), 2);
    for (size_t i = 0; i < f->r.n_actions; i++)
        if (f->r.actions[i].kind == BF_ACTION_RECLAIM)
            ck_assert_str_ne(f->r.actions[i].machine_id, "b-0");
    struct bf_engine_action a[8];
    memcpy(a, f->r.actions, f->r.n_actions * sizeof a[0]);
    struct bf_rails_config rc = {.reclaim_cap_fraction = 0.05};
    struct bf_rails_outcome out;
    bf_engine_rails_apply(&rc, a, f->r.n_actions, engine_configured, f->e, &out);
    ck_assert_uint_eq(out.n_execute, 2);
    ck_assert_uint_eq(out.capped, 1);
    ck_assert_int_eq(a[0].kind, BF_ACTION_PREEMPT);
    ck_assert_str_eq(a[0].machine_id, "b-0");
    ck_assert_int_eq(a[1].kind, BF_ACTION_RECLAIM);
    ck_assert_str_eq(a[1].machine_id, "b-1");
    ef_free(f);
}
END_TEST

/* item 4 (differ): Go scores the stamped dollars ($3 beats $4 in the
 * interruption term); we keep buckets, both are the $4 bucket, id decides.
 * (Every value a shard stamps is a bucket bound and round-trips exactly:
 * test_blobs.c shard_metadata_round_trips_every_penalty_bucket, kept there
 * so that this binary links only the engine and the model.) */
START_TEST(victims_in_one_penalty_bucket_rank_by_id_whatever_dollars_were_echoed)
{
    struct ef *f = ef_new(16, modes[_i]);
    struct ef_machine v4 = ef_configured("v-a", "batch", 100, 4.0, 1);
    struct ef_machine v3 = ef_configured("v-b", "batch", 100, 3.0, 1);
    ef_add(f, &v4);
    ef_add(f, &v3);
    ef_want_gpus(f, "train", 1000000, NULL, 1, NULL);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(ef_count(f, BF_ACTION_PREEMPT), 1);
    ck_assert(ef_acted(f, "v-a", BF_ACTION_PREEMPT));
    ef_free(f);
}
END_TEST

/* item 7 (differ): Go treats SameDomain "" as no domain and FindSame falls
 * back to the cheapest atomic group, splitting the gang from its credited
 * machine. An empty label value is a present value here: the gang grows in
 * the "" domain. */
START_TEST(empty_same_domain_value_is_a_domain_the_gang_grows_in)
{
    struct ef *f = ef_new(16, modes[_i]);
    struct ef_prof p;
    ef_gpu_profile_same(&p, 1000, "rack");
    struct ef_machine own = ef_configured("own", "c", 1000, 1, 1);
    ef_label(&own, "rack", "");
    ef_bind(&own, "c", &p, "gang");
    ef_add(f, &own);
    struct ef_machine e1 = ef_gpu_in_zone("i-empty", "z", 5.0);
    ef_label(&e1, "rack", "");
    ef_add(f, &e1);
    for (int i = 0; i < 2; i++) {
        char id[16];
        snprintf(id, sizeof id, "i-r2-%d", i);
        struct ef_machine m = ef_gpu_in_zone(id, "z", 1.0);
        ef_label(&m, "rack", "r2");
        ef_add(f, &m);
    }
    struct bf_engine_need n = ef_gpu_need(&p, 3, "gang");
    ef_set(f, "c", &n, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_actions, 1);
    ck_assert(ef_acted(f, "i-empty", BF_ACTION_BOOTSTRAP));
    ck_assert(!ef_acted(f, "i-r2-0", BF_ACTION_BOOTSTRAP));
    ef_free(f);
}
END_TEST

/* item 8 (differ): Go subtracts in int32; the gap wraps negative -> 10 min */
START_TEST(drain_grace_uses_the_exact_gap_at_extreme_priorities)
{
    ck_assert_int_eq(bf_engine_drain_grace_s(2000000000, -2000000000), 10);
    ck_assert_int_eq(bf_engine_drain_grace_s(INT32_MAX, INT32_MIN), 10);
    ck_assert_int_eq(bf_engine_drain_grace_s(INT32_MIN, INT32_MAX), 600);
}
END_TEST

/* item 9 (differ): Go's single worker runs D order and FindBasic takes
 * unclaimed machines first, so the earlier-queued lower-precedence Need keeps
 * the cheapest machine. We process in precedence order (ADR-0029's
 * priority-sorted single pass). */
START_TEST(higher_precedence_need_gets_the_cheapest_machine_whatever_its_queue_position)
{
    struct ef *f = ef_new(16, modes[_i]);
    struct ef_machine m1 = ef_gpu_in_zone("m-cheap", "z", 1.0);
    struct ef_machine m2 = ef_gpu_in_zone("m-dear", "z", 2.0);
    ef_add(f, &m1);
    ef_add(f, &m2);
    struct ef_prof lo, hi;
    ef_prof_init(&lo, 1000, 5, 5);
    ef_prof_in(&lo, BF_LABEL_INSTANCE_TYPE, EF_A3);
    ef_prof_init(&hi, 1000, 10, 5); /* same priority, higher interruption bucket */
    ef_prof_in(&hi, BF_LABEL_INSTANCE_TYPE, EF_A3);
    struct bf_engine_need nlo = ef_need(&lo, ef_gpu(8), ef_gpu(8), 1, NULL);
    struct bf_engine_need nhi = ef_need(&hi, ef_gpu(8), ef_gpu(8), 2, NULL);
    ef_set(f, "a-lo", &nlo, 1); /* arrives first: first in D order */
    ef_set(f, "b-hi", &nhi, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_actions, 2);
    ck_assert_str_eq(ef_action_for(f, "m-cheap")->cluster, "b-hi");
    ck_assert_str_eq(ef_action_for(f, "m-dear")->cluster, "a-lo");
    ef_free(f);
}
END_TEST

/* item 10 (match): the idle-since stamp rounds up, so a release never fires
 * before the hold has fully elapsed (Go keeps the exact time). */
START_TEST(idle_release_never_fires_before_the_hold_with_a_sub_second_stamp)
{
    struct ef *f = ef_new(8, modes[_i]);
    int64_t entered_ns = 1700000000LL * 1000000000LL + 500000000LL; /* x.5 s */
    struct ef_machine m = ef_gpu_machine("spot");
    m.ct = BF_CT_SPOT; /* 60 s hold */
    m.idle_since = bf_idle_since_stamp_s(entered_ns);
    ef_add(f, &m);
    f->now_ns = entered_ns + 59700000000LL; /* 59.7 s of the 60 s hold */
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_actions, 0);
    f->now_ns = entered_ns + 60500000000LL; /* late by at most 1 s */
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert(ef_acted(f, "spot", BF_ACTION_DELETE));
    ef_free(f);
    ck_assert_int_eq(bf_idle_since_stamp_s(10500000000LL), 11);
    ck_assert_int_eq(bf_idle_since_stamp_s(10000000000LL), 10);
    ck_assert_int_eq(bf_idle_since_stamp_s(10000000001LL), 11);
}
END_TEST

/* item 11 (match): Go's invariant admits +Inf prices; such a machine orders
 * last: bootstrapped last, kept last (so reclaimed first). */
START_TEST(machine_priced_infinity_is_eligible_and_ordered_last)
{
    struct ef *f = ef_new(16, modes[_i]);
    struct ef_machine inf = ef_gpu_in_zone("a-inf", "z", INFINITY);
    struct ef_machine one = ef_gpu_in_zone("b-one", "z", 1.0);
    ef_add(f, &inf);
    ef_add(f, &one);
    struct ef_machine ci = ef_configured("c-inf", "kept", 10, 1, 1);
    ci.price = INFINITY;
    struct ef_machine c1 = ef_configured("c-one", "kept", 10, 1, 1);
    ef_add(f, &ci);
    ef_add(f, &c1);
    struct ef_prof p;
    ef_gpu_profile(&p, 10);
    struct bf_engine_need one_unit = ef_gpu_need(&p, 1, NULL);
    ef_set(f, "kept", &one_unit, 1);
    ef_first_rollup(f, "kept");
    struct bf_engine_need n = ef_gpu_need(&p, 1, NULL);
    ef_set(f, "grow", &n, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert(ef_acted(f, "b-one", BF_ACTION_BOOTSTRAP));
    ck_assert(ef_acted(f, "c-inf", BF_ACTION_RECLAIM));
    ck_assert_uint_eq(f->r.n_actions, 2);
    struct bf_engine_mirror_stats st;
    bf_engine_mirror_stats(f->e, &st);
    ck_assert_uint_eq(st.ineligible, 0);
    /* demand for both Idle machines takes the +Inf one too */
    n = ef_gpu_need(&p, 2, NULL);
    ef_set(f, "grow", &n, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert(ef_acted(f, "a-inf", BF_ACTION_BOOTSTRAP));
    ef_free(f);
}
END_TEST

/* item 6 (differ): Go's recordUnsatSameAges (shard.go) increments
 * unsatSameAge[cluster+group+fingerprint] once per unsatisfied ROW, so two
 * identical gang rows age their class twice a cycle and park after 4
 * stalled cycles, not the documented 8 (and re-probe every 16, not 32).
 * The session merges such rows; should the engine still be handed two, it
 * ages the class once per cycle: parked from the 9th cycle, as one row. */
START_TEST(duplicate_gang_rows_age_their_parking_class_once_per_cycle)
{
    struct ef *f = ef_new(32, modes[_i]);
    struct ef_prof p;
    ef_gpu_profile_same(&p, 1000, BF_LABEL_ZONE);
    struct bf_engine_need n[2] = {ef_gpu_need(&p, 3, "gang"), ef_gpu_need(&p, 3, "gang")};
    ef_set(f, "c", n, 2);
    for (int cyc = 1; cyc <= 40; cyc++) {
        ck_assert_int_eq(ef_cycle(f), 0);
        uint32_t age = (uint32_t)cyc - 1;
        bool want = age >= 8 && age % 32 != 0;
        ck_assert_uint_eq(f->r.n_needs, 2);
        for (uint32_t k = 0; k < 2; k++) {
            const struct bf_engine_verdict *v = ef_verdict(f, "c", k);
            ck_assert(!v->satisfied);
            ck_assert_msg(v->acquisition_parked == want, "cycle %d row %u", cyc, k);
        }
    }
    ef_free(f);
}
END_TEST

/* item 12 (differ): Go concatenates the pinned bucket once per listed value,
 * so `In [a3, a3]` sees every machine twice (and Phase 2 can pick one victim
 * twice). One machine is one machine. */
START_TEST(duplicate_pinned_types_count_a_machine_once_and_preempt_it_once)
{
    struct ef *f = ef_new(16, modes[_i]);
    struct ef_machine idle = ef_gpu_machine("idle");
    ef_add(f, &idle);
    struct ef_machine v = ef_configured("victim", "batch", 10, 1, 1);
    ef_add(f, &v);
    struct ef_prof p;
    ef_prof_init(&p, 1000000, 16, 27);
    const char *vals[2] = {EF_A3, EF_A3};
    ef_prof_req(&p, BF_LABEL_INSTANCE_TYPE, BF_OP_IN, vals, 2);
    struct bf_engine_need n = ef_gpu_need(&p, 3, NULL);
    ef_set(f, "train", &n, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(ef_count(f, BF_ACTION_BOOTSTRAP), 1);
    ck_assert_uint_eq(ef_count(f, BF_ACTION_PREEMPT), 1);
    ck_assert_uint_eq(f->r.n_unresolved, 1);
    ck_assert_int_eq(f->r.unresolved[0].deficit.v[EF_GPU], 8000);
    ef_free(f);
}
END_TEST

/* ------------------------------------------------------------ verdicts (ADR-0061) */

/* V1 (match): Go's barrier sets MatchingSupplyExists when the Need claimed
 * anything; its own Configuring machine is matching supply */
START_TEST(a_need_that_claimed_machines_has_matching_supply_and_is_priority_starved)
{
    struct ef *f = ef_new(8, modes[_i]);
    struct ef_prof p;
    ef_gpu_profile(&p, 1000);
    struct ef_machine m = ef_configured("cfg-ing", "c", 1000, 1, 1);
    ef_bind(&m, "c", &p, NULL);
    m.state = BF_STATE_CONFIGURING;
    ef_add(f, &m);
    struct bf_engine_need n = ef_gpu_need(&p, 2, NULL);
    ef_set(f, "c", &n, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    const struct bf_engine_verdict *v = ef_verdict(f, "c", 0);
    ck_assert(!v->satisfied);
    ck_assert_uint_eq(v->claimed_count, 1);
    ck_assert_uint_eq(v->matching_supply.idle + v->matching_supply.configured +
                          v->matching_supply.speculative,
                      0);
    ck_assert_int_eq(v->unmet_reason, BF_UNMET_PRIORITY_STARVED);
    ef_free(f);
}
END_TEST

/* V3 (match): Go fills the preemption summary from Phase 2's Unresolved
 * list only; a Need whose deficit the victims covered shows none */
START_TEST(preemption_summary_is_shown_only_while_phase2_leaves_a_deficit)
{
    struct ef *f = ef_new(8, modes[_i]);
    struct ef_machine v1 = ef_configured("v-1", "batch", 10, 1, 1);
    ef_add(f, &v1);
    struct ef_prof p;
    ef_gpu_profile(&p, 1000000);
    struct bf_engine_need n = ef_gpu_need(&p, 1, NULL);
    ef_set(f, "train", &n, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(ef_count(f, BF_ACTION_PREEMPT), 1);
    const struct bf_engine_verdict *v = ef_verdict(f, "train", 0);
    ck_assert(!v->satisfied);
    ck_assert(!v->has_preemption);
    ck_assert_int_eq(v->unmet_reason, BF_UNMET_PRIORITY_STARVED);
    /* two units: one victim, still short -> summary and PREEMPTION_EXHAUSTED */
    n = ef_gpu_need(&p, 2, NULL);
    ef_set(f, "train", &n, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    v = ef_verdict(f, "train", 0);
    ck_assert(v->has_preemption);
    ck_assert_uint_eq(v->preemption.victims_found, 1);
    ck_assert_int_eq(v->unmet_reason, BF_UNMET_PREEMPTION_EXHAUSTED);
    ef_free(f);
}
END_TEST

/* V4 (differ): Go joins Phase 2's Unresolved to verdicts by (cluster,
 * fingerprint, group); a plain Need and a folded gang of the same stripped
 * profile share that key and the last one written wins for both */
START_TEST(phase2_outcome_is_joined_to_each_need_not_to_its_fingerprint)
{
    struct ef *f = ef_new(8, modes[_i]);
    struct ef_prof plain, gang;
    ef_gpu_profile(&plain, 1000000);
    ef_gpu_profile_same(&gang, 1000000, BF_LABEL_ZONE);
    struct ef_machine own = ef_configured("own", "c", 1000000, 1, 1);
    ef_bind(&own, "c", &plain, NULL);
    ef_add(f, &own);
    struct ef_machine victim = ef_configured("victim", "batch", 10, 1, 1);
    ef_add(f, &victim);
    struct bf_engine_need n[2] = {ef_gpu_need(&plain, 3, NULL), ef_gpu_need(&gang, 1, "g")};
    ef_set(f, "c", n, 2);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_needs, 2);
    const struct bf_engine_verdict *a = ef_verdict(f, "c", 0), *b = ef_verdict(f, "c", 1);
    ck_assert_str_eq(a->fingerprint, b->fingerprint); /* one key in Go's join */
    ck_assert_uint_eq(b->folded_members, 1);
    ck_assert_int_eq(a->unmet_reason, BF_UNMET_PREEMPTION_EXHAUSTED);
    ck_assert_int_eq(b->unmet_reason, BF_UNMET_PRIORITY_STARVED);
    ef_free(f);
}
END_TEST

/* V5 (match): Go's NormalizeDemand folds a zero-aggregate Same Need as soon
 * as one matching machine exists (a zero aggregate fits every machine;
 * normalize.go machineCoversPairs skips dimensions <= 0, and the fold
 * ignores MinUnit), so Go's pre-pass (occ/seed.go seedSameProfile) never
 * ranks domains for one: the view is the folded plain Need, MinUnit = the
 * member's (zero) aggregate, no domain. Without any matching machine the
 * Need stays a Same Need with no bucket anywhere: no domain either. */
START_TEST(zero_aggregate_same_need_folds_like_go_and_names_no_domain)
{
    struct ef *f = ef_new(8, modes[_i]);
    struct ef_machine m = ef_gpu_in_zone("i-a", "zone-a", 1);
    ef_add(f, &m);
    struct ef_prof p;
    ef_gpu_profile_same(&p, 1000, BF_LABEL_ZONE);
    struct bf_engine_need n = ef_need(&p, ef_gpu(0), ef_gpu(16), 1, "g");
    ef_set(f, "c", &n, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    const struct bf_engine_verdict *v = ef_verdict(f, "c", 0);
    ck_assert_uint_eq(v->folded_members, 1); /* the MinUnit the machine misses does not matter */
    ck_assert_uint_eq(v->group_len, 0);
    ck_assert(bf_vec_is_zero(&v->min_unit));
    ck_assert(v->satisfied);
    ck_assert_str_eq(v->same_domain, "");
    ck_assert_uint_eq(v->n_same_candidates, 0);
    ck_assert_uint_eq(f->r.n_actions, 0);
    ef_free(f);
    /* no machine carries the Same key: not foldable, still no domain */
    f = ef_new(8, modes[_i]);
    struct ef_machine bare = ef_gpu_machine("i-nolabel");
    ef_add(f, &bare);
    ef_gpu_profile_same(&p, 1000, "rack");
    n = ef_need(&p, ef_gpu(0), ef_gpu(8), 1, "g");
    ef_set(f, "c", &n, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    v = ef_verdict(f, "c", 0);
    ck_assert_uint_eq(v->folded_members, 0);
    ck_assert_uint_eq(v->group_len, 1);
    ck_assert(v->satisfied);
    ck_assert_str_eq(v->same_domain, "");
    ck_assert_uint_eq(f->r.n_actions, 0);
    ef_free(f);
}
END_TEST

/* V5 (match): the one place a zero-aggregate Same Need is not folded yet has
 * a bucket: its only matching machine is its own in-flight Creating machine
 * (NormalizeDemand does not look at Creating). Go's seedSameProfile ranks the
 * buckets against the zero deficit and records that domain, claiming
 * nothing; so do we (the pre-pass used to skip zero-aggregate Needs). */
START_TEST(zero_aggregate_same_need_names_its_creating_machines_domain_like_go)
{
    struct ef *f = ef_new(8, modes[_i]);
    struct ef_prof p;
    ef_gpu_profile_same(&p, 1000, "rack");
    struct ef_machine m = ef_machine("i-creating", BF_STATE_CREATING, EF_A3, "z");
    m.alloc = ef_gpu(8);
    ef_label(&m, "rack", "r1");
    snprintf(m.fp, sizeof m.fp, "%s", ef_fp(&p));
    snprintf(m.group, sizeof m.group, "g");
    ef_add(f, &m);
    struct bf_engine_need n = ef_need(&p, ef_gpu(0), ef_gpu(8), 1, "g");
    ef_set(f, "c", &n, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    const struct bf_engine_verdict *v = ef_verdict(f, "c", 0);
    ck_assert_uint_eq(v->folded_members, 0);
    ck_assert(v->satisfied);
    ck_assert_str_eq(v->same_domain, "r1");
    ck_assert(v->same_satisfiable);
    ck_assert_uint_eq(v->claimed_count, 0);
    ck_assert_uint_eq(f->r.n_actions, 0);
    ef_free(f);
}
END_TEST

/* V6 (differ): Go sorts the views with sort.Slice over a map walk, so rows
 * tying on (priority, arrival, cluster) come out in any order; ours keep the
 * normalized-demand order */
START_TEST(verdict_rows_tying_on_priority_arrival_and_cluster_keep_demand_order)
{
    struct ef *f = ef_new(8, modes[_i]);
    struct ef_prof p1, p2, p3;
    ef_prof_init(&p1, 5, 3, 3);
    ef_prof_in(&p1, BF_LABEL_INSTANCE_TYPE, "t-z");
    ef_prof_init(&p2, 5, 3, 3);
    ef_prof_in(&p2, BF_LABEL_INSTANCE_TYPE, "t-a");
    ef_prof_init(&p3, 5, 3, 3);
    ef_prof_in(&p3, BF_LABEL_INSTANCE_TYPE, "t-m");
    struct bf_engine_need n[3] = {ef_need(&p1, ef_gpu(8), ef_gpu(8), 7, NULL),
                                  ef_need(&p2, ef_gpu(8), ef_gpu(8), 7, NULL),
                                  ef_need(&p3, ef_gpu(8), ef_gpu(8), 7, NULL)};
    ef_set(f, "c", n, 3);
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(ef_cycle(f), 0);
        ck_assert_uint_eq(f->r.n_verdicts, 3);
        for (uint32_t j = 0; j < 3; j++)
            ck_assert_uint_eq(f->r.verdicts[j].index, j);
    }
    ef_free(f);
}
END_TEST

/* ------------------------------------------------------------ Go's rail tests */

static uint32_t fixed_configured(void *ctx, const char *cluster)
{
    (void)cluster;
    return *(const uint32_t *)ctx;
}

/* how many of n Reclaims of one cluster the cap keeps at `conf` Configured */
static size_t cap_keeps(double fraction, uint32_t conf, size_t n)
{
    struct bf_engine_action *b = calloc(n, sizeof *b);
    ck_assert_ptr_nonnull(b);
    for (size_t i = 0; i < n; i++) {
        b[i].kind = BF_ACTION_RECLAIM;
        b[i].cluster = "c";
    }
    size_t capped;
    size_t kept = bf_engine_rail_reclaim_cap(b, n, fraction, fixed_configured, &conf, &capped);
    ck_assert_uint_eq(kept + capped, n);
    free(b);
    return kept;
}

/* Go's TestReclaimCap_Arithmetic table, then a sweep against Go's
 * reclaimCap: c = int(fraction * float64(configured)); if c < 1 { c = 1 } */
START_TEST(reclaim_cap_arithmetic_matches_go_over_many_sizes)
{
    static const struct {
        double f;
        uint32_t conf;
        size_t want;
    } go[] = {{0.05, 0, 1},  {0.05, 1, 1},   {0.05, 19, 1},  {0.05, 21, 1},
              {0.05, 40, 2}, {0.05, 100, 5}, {0.25, 40, 10}, {0.5, 7, 3}};
    for (size_t k = 0; k < sizeof go / sizeof go[0]; k++)
        ck_assert_uint_eq(cap_keeps(go[k].f, go[k].conf, 64), go[k].want);
    static const double fr[] = {0.01, 0.05, 0.07, 0.1, 0.25, 0.29, 1.0 / 3, 0.5, 0.9, 1.0};
    for (size_t fi = 0; fi < sizeof fr / sizeof fr[0]; fi++) {
        for (uint32_t conf = 0; conf <= 5000; conf += (conf < 200 ? 1 : 97)) {
            int64_t want = (int64_t)(fr[fi] * (double)conf); /* Go's int() truncation */
            if (want < 1)
                want = 1;
            size_t n = (size_t)want + 3; /* more reclaims than the cap */
            ck_assert_uint_eq(cap_keeps(fr[fi], conf, n), (size_t)want);
            /* fewer reclaims than the cap: all kept */
            ck_assert_uint_eq(cap_keeps(fr[fi], conf, (size_t)want), (size_t)want);
        }
    }
}
END_TEST

/* executes the kept head of the cycle's actions like the executor would */
static void apply_kept(struct ef *f, const struct bf_engine_action *a, size_t n)
{
    struct bf_engine_result saved = f->r;
    f->r.actions = a;
    f->r.n_actions = n;
    ef_apply(f);
    f->r = saved;
}

static uint32_t count_reclaims(const struct bf_engine_action *a, size_t n)
{
    uint32_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += a[i].kind == BF_ACTION_RECLAIM;
    return k;
}

static uint32_t go_cap(double fraction, uint32_t conf)
{
    int64_t c = (int64_t)(fraction * (double)conf);
    return c < 1 ? 1 : (uint32_t)c;
}

/* TestReclaimCap_RollsOverAcrossCycles: an empty rollup over 40 Configured;
 * the cap meters the drain per cycle and every machine is still reclaimed */
START_TEST(reclaim_cap_rolls_over_across_cycles_until_the_cluster_is_drained)
{
    const double frac = 0.25;
    struct ef *f = ef_new(64, modes[_i]);
    char id[16];
    for (int i = 0; i < 40; i++) {
        snprintf(id, sizeof id, "m-%02d", i);
        struct ef_machine m = ef_configured(id, "drain-c", 1000, 1, 1);
        m.ct = BF_CT_BARE_METAL; /* never released: the drain is the only movement */
        ef_add(f, &m);
    }
    ef_set(f, "drain-c", NULL, 0);
    ef_first_rollup(f, "drain-c");
    struct bf_rails_config rc = {.reclaim_cap_fraction = frac};
    struct bf_engine_action a[64];
    uint32_t executed = 0, cycles = 0, capped_total = 0;
    for (; cycles < 60; cycles++) {
        uint32_t conf = bf_engine_cluster_configured(f->e, "drain-c");
        if (!conf)
            break;
        ck_assert_int_eq(ef_cycle(f), 0);
        memcpy(a, f->r.actions, f->r.n_actions * sizeof a[0]);
        struct bf_rails_outcome out;
        bf_engine_rails_apply(&rc, a, f->r.n_actions, engine_configured, f->e, &out);
        uint32_t reclaims = count_reclaims(a, out.n_execute);
        ck_assert_uint_le(reclaims, go_cap(frac, conf));
        capped_total += (uint32_t)out.capped;
        executed += reclaims;
        apply_kept(f, a, out.n_execute);
    }
    ck_assert_uint_eq(executed, 40);
    ck_assert_uint_ge(cycles, 2);
    ck_assert_uint_gt(capped_total, 0);
    struct bf_engine_mirror_stats st;
    bf_engine_mirror_stats(f->e, &st);
    ck_assert_uint_eq(st.by_state[BF_STATE_IDLE], 40);
    ef_free(f);
}
END_TEST

/* TestReclaimCap_Property_SumBoundedOverCycles: random full-replacement
 * demand swings over 60 Configured; per cycle reclaims <= that cycle's cap,
 * and the sum over k cycles <= k x cap(max configured) and <= sum of caps */
START_TEST(sum_of_reclaims_over_k_cycles_is_bounded_by_the_caps)
{
    const double frac = 0.05;
    struct ef *f = ef_new(128, modes[_i]);
    char id[16];
    for (int i = 0; i < 60; i++) {
        snprintf(id, sizeof id, "p-%02d", i);
        struct ef_machine m = ef_configured(id, "prop-c", 1000, 1, 1);
        m.ct = BF_CT_BARE_METAL;
        ef_add(f, &m);
    }
    ef_first_rollup(f, "prop-c");
    struct ef_prof p;
    ef_gpu_profile(&p, 1000);
    uint64_t seed = 0x46;
    struct bf_rails_config rc = {.reclaim_cap_fraction = frac};
    static struct bf_engine_action a[256];
    uint32_t sum = 0, sum_caps = 0, max_conf = 60;
    const uint32_t k = 50;
    for (uint32_t c = 0; c < k; c++) {
        uint64_t r = ef_rand(&seed) % 3;
        struct bf_engine_need n;
        if (r == 0) {
            ef_set(f, "prop-c", NULL, 0);
        } else {
            int units = r == 1 ? 60 : (int)(ef_rand(&seed) % 60) + 1;
            n = ef_gpu_need(&p, units, NULL);
            ef_set(f, "prop-c", &n, 1);
        }
        uint32_t conf = bf_engine_cluster_configured(f->e, "prop-c");
        if (conf > max_conf)
            max_conf = conf;
        ck_assert_int_eq(ef_cycle(f), 0);
        ck_assert_uint_le(f->r.n_actions, 256);
        memcpy(a, f->r.actions, f->r.n_actions * sizeof a[0]);
        struct bf_rails_outcome out;
        bf_engine_rails_apply(&rc, a, f->r.n_actions, engine_configured, f->e, &out);
        uint32_t reclaims = count_reclaims(a, out.n_execute);
        ck_assert_uint_le(reclaims, go_cap(frac, conf));
        sum += reclaims;
        sum_caps += go_cap(frac, conf);
        apply_kept(f, a, out.n_execute);
    }
    ck_assert_uint_le(sum, k * go_cap(frac, max_conf));
    ck_assert_uint_le(sum, sum_caps);
    ck_assert_uint_gt(sum, 0); /* the swings did drain something */
    ef_free(f);
}
END_TEST

/* TestCapReclaims_PerClusterOrderAndExemptions: 40 + 10 Configured (caps 2
 * and 1); 3 Bootstraps, 10 + 3 Reclaims, 2 Preempts -> 10 capped, every
 * Bootstrap and Preempt kept, the kept Reclaims the head of each cluster's */
START_TEST(reclaim_cap_is_per_cluster_keeps_each_head_and_exempts_other_kinds)
{
    struct ef *f = ef_new(64, 0);
    char id[16];
    for (int i = 0; i < 40; i++) {
        snprintf(id, sizeof id, "a-%d", i);
        struct ef_machine m = ef_configured(id, "cl-a", 1000, 1, 1);
        ef_add(f, &m);
    }
    for (int i = 0; i < 10; i++) {
        snprintf(id, sizeof id, "b-%d", i);
        struct ef_machine m = ef_configured(id, "cl-b", 1000, 1, 1);
        ef_add(f, &m);
    }
    struct bf_engine_action a[18];
    memset(a, 0, sizeof a);
    static char ids[18][16];
    size_t n = 0;
    for (int i = 0; i < 3; i++, n++) {
        snprintf(ids[n], sizeof ids[n], "boot-%d", i);
        a[n] = (struct bf_engine_action){.kind = BF_ACTION_BOOTSTRAP, .cluster = "cl-a"};
        a[n].machine_id = ids[n];
    }
    for (int i = 0; i < 10; i++, n++) {
        snprintf(ids[n], sizeof ids[n], "a-%d", i);
        a[n] = (struct bf_engine_action){.kind = BF_ACTION_RECLAIM, .cluster = "cl-a"};
        a[n].machine_id = ids[n];
    }
    for (int i = 0; i < 3; i++, n++) {
        snprintf(ids[n], sizeof ids[n], "b-%d", i);
        a[n] = (struct bf_engine_action){.kind = BF_ACTION_RECLAIM, .cluster = "cl-b"};
        a[n].machine_id = ids[n];
    }
    for (int i = 0; i < 2; i++, n++) {
        snprintf(ids[n], sizeof ids[n], "p-%d", i);
        a[n] = (struct bf_engine_action){.kind = BF_ACTION_PREEMPT, .cluster = "cl-b"};
        a[n].machine_id = ids[n];
    }
    struct bf_engine_action orig[18];
    memcpy(orig, a, sizeof a);
    size_t capped;
    size_t kept = bf_engine_rail_reclaim_cap(a, n, 0.05, engine_configured, f->e, &capped);
    ck_assert_uint_eq(capped, (10 - 2) + (3 - 1));
    ck_assert_uint_eq(kept, n - capped);
    uint32_t boots = 0, preempts = 0;
    const char *rec[8];
    uint32_t nrec = 0;
    for (size_t i = 0; i < kept; i++) {
        boots += a[i].kind == BF_ACTION_BOOTSTRAP;
        preempts += a[i].kind == BF_ACTION_PREEMPT;
        if (a[i].kind == BF_ACTION_RECLAIM)
            rec[nrec++] = a[i].machine_id;
    }
    ck_assert_uint_eq(boots, 3);
    ck_assert_uint_eq(preempts, 2);
    ck_assert_uint_eq(nrec, 3);
    ck_assert_str_eq(rec[0], "a-0");
    ck_assert_str_eq(rec[1], "a-1");
    ck_assert_str_eq(rec[2], "b-0");
    /* a disabled fraction passes everything through */
    memcpy(a, orig, sizeof a);
    ck_assert_uint_eq(bf_engine_rail_reclaim_cap(a, n, 0, engine_configured, f->e, &capped), n);
    ck_assert_uint_eq(capped, 0);
    ef_free(f);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("engine_fidelity");
    TCase *t = tcase_create("items");
    tcase_add_loop_test(t, spread_domains_compete_on_the_head_price_not_its_effective_cost, 0, 2);
    tcase_add_loop_test(
        t, pinned_penalty_orders_zero_probability_machines_by_price_and_risky_ones_last, 0, 2);
    tcase_add_loop_test(t, phase2_victim_gets_no_reclaim_so_the_cap_slot_reclaims_real_excess, 0,
                        2);
    tcase_add_loop_test(t, victims_in_one_penalty_bucket_rank_by_id_whatever_dollars_were_echoed, 0,
                        2);
    tcase_add_loop_test(t, empty_same_domain_value_is_a_domain_the_gang_grows_in, 0, 2);
    tcase_add_test(t, drain_grace_uses_the_exact_gap_at_extreme_priorities);
    tcase_add_loop_test(
        t, higher_precedence_need_gets_the_cheapest_machine_whatever_its_queue_position, 0, 2);
    tcase_add_loop_test(t, idle_release_never_fires_before_the_hold_with_a_sub_second_stamp, 0, 2);
    tcase_add_loop_test(t, machine_priced_infinity_is_eligible_and_ordered_last, 0, 2);
    tcase_add_loop_test(t, duplicate_pinned_types_count_a_machine_once_and_preempt_it_once, 0, 2);
    tcase_add_loop_test(t, duplicate_gang_rows_age_their_parking_class_once_per_cycle, 0, 2);
    suite_add_tcase(s, t);
    TCase *v = tcase_create("verdicts");
    tcase_add_loop_test(v, a_need_that_claimed_machines_has_matching_supply_and_is_priority_starved,
                        0, 2);
    tcase_add_loop_test(v, preemption_summary_is_shown_only_while_phase2_leaves_a_deficit, 0, 2);
    tcase_add_loop_test(v, phase2_outcome_is_joined_to_each_need_not_to_its_fingerprint, 0, 2);
    tcase_add_loop_test(v, zero_aggregate_same_need_folds_like_go_and_names_no_domain, 0, 2);
    tcase_add_loop_test(v, zero_aggregate_same_need_names_its_creating_machines_domain_like_go, 0,
                        2);
    tcase_add_loop_test(v, verdict_rows_tying_on_priority_arrival_and_cluster_keep_demand_order, 0,
                        2);
    suite_add_tcase(s, v);
    TCase *g = tcase_create("go_rail_tests");
    tcase_add_test(g, reclaim_cap_arithmetic_matches_go_over_many_sizes);
    tcase_add_loop_test(g, reclaim_cap_rolls_over_across_cycles_until_the_cluster_is_drained, 0, 2);
    tcase_add_loop_test(g, sum_of_reclaims_over_k_cycles_is_bounded_by_the_caps, 0, 2);
    tcase_add_test(g, reclaim_cap_is_per_cluster_keeps_each_head_and_exempts_other_kinds);
    suite_add_tcase(s, g);
    return s;
}

int main(void)
{
    return check_run(suite());
}
