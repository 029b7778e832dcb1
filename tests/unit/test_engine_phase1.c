/*
 * test_engine_phase1.c — Phase 1 (reference/engine.md §4) re-expressed from
 * the §10 catalogue, cases 1-15, against the sequential equivalent (§4.6).
 * Every test runs the engine in its fast mode and in reference mode
 * (machine-by-machine walks) and both must give the asserted outcome.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/engine.h"
#include "engine_fixtures.h"
#include "check_run.h"

static const uint32_t modes[2] = {0, BF_ENGINE_F_REFERENCE};

static struct bf_engine_need gpu_need_p(int32_t prio, int units, const char *group,
                                        struct ef_prof *p)
{
    ef_gpu_profile(p, prio);
    return ef_gpu_need(p, units, group);
}

/* A Speculative GPU slot of capacity type ct at price dollars per hour. */
static struct ef_machine spec_gpu(const char *id, uint8_t ct, double price)
{
    struct ef_machine m = ef_gpu_machine(id);
    m.state = BF_STATE_SPECULATIVE;
    m.ct = ct;
    m.price = price;
    return m;
}

/* 1 */
START_TEST(idle_only_bootstraps_three_of_four_idle_machines)
{
    struct ef *f = ef_new(64, modes[_i]);
    char id[16];
    for (int i = 0; i < 4; i++) {
        snprintf(id, sizeof id, "i-%02d", i);
        struct ef_machine m = ef_gpu_machine(id);
        ef_add(f, &m);
    }
    struct ef_prof p;
    struct bf_engine_need n = gpu_need_p(1000000, 3, NULL, &p);
    ck_assert_int_eq(ef_set(f, "cluster-a", &n, 1), 0);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_actions, 3);
    ck_assert_uint_eq(ef_count_cluster(f, BF_ACTION_BOOTSTRAP, "cluster-a"), 3);
    ck_assert_uint_eq(ef_unsatisfied(f), 0);
    /* cheapest-then-id: the first three ids */
    ck_assert_str_eq(f->r.actions[0].machine_id, "i-00");
    ck_assert_str_eq(f->r.actions[2].machine_id, "i-02");
    ck_assert_str_eq(bf_action_reason_name(f->r.actions[0].reason), "phase1.idle");
    ck_assert_str_eq(f->r.actions[0].fingerprint, ef_fp(&p));
    ef_free(f);
}
END_TEST

/* 2 */
START_TEST(speculative_fallback_prefers_cheapest)
{
    struct ef *f = ef_new(16, modes[_i]);
    struct ef_machine a = spec_gpu("spec-expensive", BF_CT_ON_DEMAND, 6.0);
    struct ef_machine b = spec_gpu("spec-cheap", BF_CT_SPOT, 1.0);
    ef_add(f, &a);
    ef_add(f, &b);
    ef_want_gpus(f, "cluster-a", 1000000, NULL, 1, NULL);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_actions, 1);
    ck_assert(ef_acted(f, "spec-cheap", BF_ACTION_PROVISION));
    ck_assert_str_eq(bf_action_reason_name(f->r.actions[0].reason), "phase1.speculative");
    ef_free(f);
}
END_TEST

/* 3 */
START_TEST(high_interruption_penalty_prefers_on_demand)
{
    struct ef *f = ef_new(16, modes[_i]);
    struct ef_machine spot = spec_gpu("spec-spot", BF_CT_SPOT, 1.80);
    spot.prob = 0.1;
    struct ef_machine od = spec_gpu("spec-od", BF_CT_ON_DEMAND, 6.0);
    ef_add(f, &spot);
    ef_add(f, &od);
    struct ef_prof p;
    ef_prof_init(&p, 1000000, bf_bucket_for_dollars(8388608), 27);
    ef_prof_in(&p, BF_LABEL_INSTANCE_TYPE, EF_A3);
    struct bf_engine_need n = ef_gpu_need(&p, 1, NULL);
    ef_set(f, "cluster-a", &n, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_actions, 1);
    ck_assert(ef_acted(f, "spec-od", BF_ACTION_PROVISION));
    /* and at a $5 penalty the spot slot wins (2.30 < 6.00) */
    ef_prof_init(&p, 1000000, bf_bucket_for_dollars(5), 27);
    ef_prof_in(&p, BF_LABEL_INSTANCE_TYPE, EF_A3);
    n = ef_gpu_need(&p, 1, NULL);
    ef_set(f, "cluster-a", &n, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert(ef_acted(f, "spec-spot", BF_ACTION_PROVISION));
    ef_free(f);
}
END_TEST

/* 4 */
START_TEST(idle_beats_cheaper_speculative)
{
    struct ef *f = ef_new(16, modes[_i]);
    struct ef_machine i1 = ef_gpu_machine("i-1");
    i1.ct = BF_CT_ON_DEMAND;
    i1.price = 6.0;
    struct ef_machine s1 = spec_gpu("s-1", BF_CT_SPOT, 1.0);
    ef_add(f, &s1);
    ef_add(f, &i1);
    ef_want_gpus(f, "cluster-a", 1000000, NULL, 1, NULL);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_actions, 1);
    ck_assert(ef_acted(f, "i-1", BF_ACTION_BOOTSTRAP));
    ef_free(f);
}
END_TEST

/* 5 */
START_TEST(no_op_when_configured_supply_already_meets_the_need)
{
    struct ef *f = ef_new(16, modes[_i]);
    struct ef_prof p;
    struct bf_engine_need n = gpu_need_p(1000000, 2, NULL, &p);
    for (int i = 0; i < 2; i++) {
        char id[8];
        snprintf(id, sizeof id, "c-%d", i);
        struct ef_machine m = ef_gpu_machine(id);
        ef_bind(&m, "cluster-a", &p, NULL);
        ef_add(f, &m);
    }
    struct ef_machine idle = ef_gpu_machine("i-0");
    ef_add(f, &idle);
    ef_set(f, "cluster-a", &n, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_actions, 0);
    ck_assert_uint_eq(ef_unsatisfied(f), 0);
    ck_assert_uint_eq(f->r.claimed[BF_STATE_CONFIGURED], 2);
    ef_free(f);
}
END_TEST

/* 6 */
START_TEST(partial_stockout_leaves_a_24_gpu_deficit)
{
    struct ef *f = ef_new(16, modes[_i]);
    struct ef_machine a = ef_gpu_machine("i-00"), b = ef_gpu_machine("i-01");
    ef_add(f, &a);
    ef_add(f, &b);
    ef_want_gpus(f, "cluster-a", 1000000, NULL, 5, NULL);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(ef_count(f, BF_ACTION_BOOTSTRAP), 2);
    ck_assert_uint_eq(ef_unsatisfied(f), 1);
    const struct bf_engine_verdict *v = ef_first_unsatisfied(f);
    ck_assert_ptr_nonnull(v);
    ck_assert_int_eq(v->residual_deficit.v[EF_GPU], 24000);
    ck_assert_uint_eq(v->bootstrap_count, 2);
    ef_free(f);
}
END_TEST

/* 7 */
START_TEST(high_priority_wins_the_contested_pool)
{
    struct ef *f = ef_new(16, modes[_i]);
    struct ef_machine a = ef_gpu_machine("i-00"), b = ef_gpu_machine("i-01");
    ef_add(f, &a);
    ef_add(f, &b);
    struct ef_prof lo, hi;
    struct bf_engine_need nl = gpu_need_p(0, 2, NULL, &lo);
    struct bf_engine_need nh = gpu_need_p(1000000, 2, NULL, &hi);
    ef_set(f, "cluster-low", &nl, 1);
    ef_set(f, "cluster-high", &nh, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(ef_count_cluster(f, BF_ACTION_BOOTSTRAP, "cluster-high"), 2);
    ck_assert_uint_eq(ef_count_cluster(f, BF_ACTION_BOOTSTRAP, "cluster-low"), 0);
    ck_assert_uint_eq(ef_unsatisfied(f), 1);
    ck_assert_str_eq(ef_first_unsatisfied(f)->cluster, "cluster-low");
    ef_free(f);
}
END_TEST

/* 8 */
START_TEST(many_needs_sharing_a_fingerprint_use_configured_then_idle)
{
    struct ef *f = ef_new(64, modes[_i]);
    struct ef_prof p;
    ef_gpu_profile(&p, 1000000);
    char id[16];
    for (int i = 0; i < 5; i++) {
        snprintf(id, sizeof id, "c-%02d", i);
        struct ef_machine m = ef_gpu_machine(id);
        ef_bind(&m, "cluster-a", &p, NULL);
        ef_add(f, &m);
    }
    for (int i = 0; i < 25; i++) {
        snprintf(id, sizeof id, "i-%02d", i);
        struct ef_machine m = ef_gpu_machine(id);
        ef_add(f, &m);
    }
    struct bf_engine_need n[30];
    char groups[30][16];
    for (int i = 0; i < 30; i++) {
        snprintf(groups[i], sizeof groups[i], "g-%02d", i);
        n[i] = ef_gpu_need(&p, 1, groups[i]);
    }
    ef_set(f, "cluster-a", n, 30);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(ef_count(f, BF_ACTION_BOOTSTRAP), 25);
    ck_assert_uint_eq(f->r.n_actions, 25);
    ck_assert_uint_eq(ef_unsatisfied(f), 0);
    ef_free(f);
}
END_TEST

/* 9 */
START_TEST(dense_machine_credit_leaves_an_8gi_memory_deficit)
{
    struct ef *f = ef_new(16, modes[_i]);
    struct ef_prof p;
    ef_prof_init(&p, 1000, 1, 1);
    struct ef_machine m = ef_machine("c-0", BF_STATE_CONFIGURED, "m6i.4xlarge", "us-east-1a");
    m.alloc = ef_vec(16000, 32 * EF_GI, 0);
    ef_bind(&m, "cluster-a", &p, NULL);
    ef_add(f, &m);
    struct bf_engine_need n =
        ef_need(&p, ef_vec(10000, 40 * EF_GI, 0), ef_vec(1000, 4 * EF_GI, 0), 0, NULL);
    ef_set(f, "cluster-a", &n, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_actions, 0);
    const struct bf_engine_verdict *v = ef_first_unsatisfied(f);
    ck_assert_ptr_nonnull(v);
    ck_assert_int_eq(v->residual_deficit.v[EF_CPU], 0);
    ck_assert_int_eq(v->residual_deficit.v[EF_MEM], 8 * EF_GI);
    ck_assert_uint_eq(v->claimed_count, 1);
    ef_free(f);
}
END_TEST

/* 10 */
START_TEST(per_pod_needs_take_a_machine_each_aggregated_need_packs)
{
    for (int agg = 0; agg < 2; agg++) {
        struct ef *f = ef_new(128, modes[_i]);
        char id[16];
        for (int i = 0; i < 50; i++) {
            snprintf(id, sizeof id, "i-%02d", i);
            struct ef_machine m = ef_machine(id, BF_STATE_IDLE, "m6i.2xlarge", "z");
            m.alloc = ef_vec(10000, 40 * EF_GI, 0);
            ef_add(f, &m);
        }
        struct ef_prof p;
        ef_prof_init(&p, 1000, 1, 1);
        bf_vec pod = ef_vec(1000, 4 * EF_GI, 0);
        if (!agg) {
            struct bf_engine_need n[100];
            char g[100][8];
            for (int i = 0; i < 100; i++) {
                snprintf(g[i], sizeof g[i], "p%d", i);
                n[i] = ef_need(&p, pod, pod, i, g[i]);
            }
            ef_set(f, "c", n, 100);
            ck_assert_int_eq(ef_cycle(f), 0);
            ck_assert_uint_eq(ef_count(f, BF_ACTION_BOOTSTRAP), 50);
            ck_assert_uint_eq(ef_unsatisfied(f), 50);
        } else {
            bf_vec total = pod;
            bf_vec_scale(&total, 100);
            struct bf_engine_need n = ef_need(&p, total, pod, 0, NULL);
            ef_set(f, "c", &n, 1);
            ck_assert_int_eq(ef_cycle(f), 0);
            ck_assert_uint_eq(ef_count(f, BF_ACTION_BOOTSTRAP), 10);
            ck_assert_uint_eq(ef_unsatisfied(f), 0);
        }
        ef_free(f);
    }
}
END_TEST

static void zones(struct ef *f, const char *zone, const char *prefix, int n, double price)
{
    char id[32];
    for (int i = 0; i < n; i++) {
        snprintf(id, sizeof id, "%s-%d", prefix, i);
        struct ef_machine m = ef_gpu_in_zone(id, zone, price);
        ef_add(f, &m);
    }
}

static uint32_t boot_in_zone(const struct ef *f, const char *zone)
{
    uint32_t n = 0;
    for (size_t i = 0; i < f->r.n_actions; i++) {
        const struct ef_machine *m = &f->m[f->r.actions[i].slot];
        n += f->r.actions[i].kind == BF_ACTION_BOOTSTRAP && strcmp(m->zone, zone) == 0;
    }
    return n;
}

/* 11 */
START_TEST(same_falls_back_to_largest_bucket_with_shortfall)
{
    struct ef *f = ef_new(16, modes[_i]);
    zones(f, "zone-a", "a", 3, 0);
    zones(f, "zone-b", "b", 3, 0);
    ef_want_gpus(f, "cluster-a", 1000000, BF_LABEL_ZONE, 5, "gang");
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(ef_count(f, BF_ACTION_BOOTSTRAP), 3);
    uint32_t za = boot_in_zone(f, "zone-a"), zb = boot_in_zone(f, "zone-b");
    ck_assert(za == 3 || zb == 3);
    const struct bf_engine_verdict *v = ef_first_unsatisfied(f);
    ck_assert_int_eq(v->residual_deficit.v[EF_GPU], 16000);
    ck_assert_int_eq(v->unmet_reason, BF_UNMET_TOPOLOGY_UNSATISFIABLE);
    ef_free(f);
}
END_TEST

/* 12 */
START_TEST(same_picks_the_atomic_satisfiable_zone)
{
    struct ef *f = ef_new(16, modes[_i]);
    zones(f, "zone-b", "b", 2, 0);
    zones(f, "zone-a", "a", 4, 0);
    ef_want_gpus(f, "cluster-a", 1000000, BF_LABEL_ZONE, 4, "gang");
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(ef_count(f, BF_ACTION_BOOTSTRAP), 4);
    ck_assert_uint_eq(boot_in_zone(f, "zone-a"), 4);
    ck_assert_uint_eq(ef_unsatisfied(f), 0);
    ck_assert_str_eq(ef_verdict(f, "cluster-a", 0)->same_domain, "zone-a");
    ef_free(f);
}
END_TEST

START_TEST(same_density_aware_machine_count_needs_one_machine)
{
    struct ef *f = ef_new(16, modes[_i]);
    for (int i = 0; i < 8; i++) {
        char id[8];
        snprintf(id, sizeof id, "i-%d", i);
        struct ef_machine m = ef_gpu_in_zone(id, "zone-a", 0);
        m.alloc = ef_gpu(800);
        ef_add(f, &m);
    }
    ef_want_gpus(f, "cluster-a", 1000000, BF_LABEL_ZONE, 8, "gang");
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(ef_count(f, BF_ACTION_BOOTSTRAP), 1);
    ck_assert_uint_eq(ef_unsatisfied(f), 0);
    ef_free(f);
}
END_TEST

/* 13 */
START_TEST(same_two_needs_land_in_different_zones_and_stay)
{
    struct ef *f = ef_new(16, modes[_i]);
    zones(f, "zone-a", "a", 3, 0);
    zones(f, "zone-b", "b", 3, 0);
    struct ef_prof hi, lo;
    ef_gpu_profile_same(&hi, 2000000, BF_LABEL_ZONE);
    ef_gpu_profile_same(&lo, 1000000, BF_LABEL_ZONE);
    struct bf_engine_need n[2] = {ef_gpu_need(&hi, 3, "owner-A"), ef_gpu_need(&lo, 3, "owner-B")};
    ef_set(f, "cluster-a", n, 2);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(ef_count(f, BF_ACTION_BOOTSTRAP), 6);
    for (size_t i = 0; i < f->r.n_actions; i++) {
        const struct bf_engine_action *a = &f->r.actions[i];
        const char *zone = f->m[a->slot].zone;
        if (a->priority == 2000000)
            ck_assert_str_eq(zone, "zone-a");
        else
            ck_assert_str_eq(zone, "zone-b");
    }
    ef_apply(f);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_actions, 0);
    ck_assert_uint_eq(ef_unsatisfied(f), 0);
    ef_free(f);
}
END_TEST

/* 14 */
START_TEST(same_prefers_serving_the_creditable_domain)
{
    struct ef *f = ef_new(16, modes[_i]);
    struct ef_prof p;
    ef_gpu_profile_same(&p, 1000000, BF_LABEL_ZONE);
    for (int i = 0; i < 3; i++) {
        char id[8];
        snprintf(id, sizeof id, "c-%d", i);
        struct ef_machine m = ef_gpu_in_zone(id, "zone-a", 0);
        ef_bind(&m, "cluster-x", &p, "other");
        ef_add(f, &m);
    }
    zones(f, "zone-b", "b", 2, 0);
    struct bf_engine_need n = ef_gpu_need(&p, 2, "gang");
    ef_set(f, "cluster-x", &n, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_phase1, 0);
    ck_assert_uint_eq(ef_unsatisfied(f), 0);
    ck_assert_str_eq(ef_verdict(f, "cluster-x", 0)->same_domain, "zone-a");
    ef_free(f);
}
END_TEST

/* 15 */
static void spread_counts(const struct ef *f, uint32_t out[3])
{
    out[0] = boot_in_zone(f, "zone-a");
    out[1] = boot_in_zone(f, "zone-b");
    out[2] = boot_in_zone(f, "zone-c");
}

START_TEST(strict_spread_balances_within_max_skew)
{
    struct ef_prof p;
    ef_gpu_profile(&p, 1000000);
    ef_prof_spread(&p, BF_LABEL_ZONE, 1, BF_WHEN_DO_NOT_SCHEDULE);
    uint32_t c[3];
    /* 3 zones x 4, need 6 -> 2/2/2 */
    struct ef *f = ef_new(32, modes[_i]);
    zones(f, "zone-a", "a", 4, 0);
    zones(f, "zone-b", "b", 4, 0);
    zones(f, "zone-c", "c", 4, 0);
    struct bf_engine_need n = ef_gpu_need(&p, 6, NULL);
    ef_set(f, "cl", &n, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    spread_counts(f, c);
    ck_assert_uint_eq(c[0], 2);
    ck_assert_uint_eq(c[1], 2);
    ck_assert_uint_eq(c[2], 2);
    ef_free(f);
    /* zone-a 1, b and c 5: need 6 -> 1/2/2 and a 1-unit deficit */
    f = ef_new(32, modes[_i]);
    zones(f, "zone-a", "a", 1, 0);
    zones(f, "zone-b", "b", 5, 0);
    zones(f, "zone-c", "c", 5, 0);
    ef_set(f, "cl", &n, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    spread_counts(f, c);
    ck_assert_uint_eq(c[0], 1);
    ck_assert_uint_eq(c[1], 2);
    ck_assert_uint_eq(c[2], 2);
    ck_assert_int_eq(ef_first_unsatisfied(f)->residual_deficit.v[EF_GPU], 8000);
    ef_free(f);
    /* price does not beat skew: a at $1, b at $5, need 4 -> 2/2 */
    f = ef_new(32, modes[_i]);
    zones(f, "zone-a", "a", 3, 1);
    zones(f, "zone-b", "b", 3, 5);
    n = ef_gpu_need(&p, 4, NULL);
    ef_set(f, "cl", &n, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    spread_counts(f, c);
    ck_assert_uint_eq(c[0], 2);
    ck_assert_uint_eq(c[1], 2);
    ef_free(f);
}
END_TEST

START_TEST(schedule_anyway_spread_is_ignored_and_price_wins)
{
    struct ef_prof p;
    ef_gpu_profile(&p, 1000000);
    ef_prof_spread(&p, BF_LABEL_ZONE, 1, BF_WHEN_SCHEDULE_ANYWAY);
    struct ef *f = ef_new(32, modes[_i]);
    zones(f, "zone-a", "a", 6, 1);
    zones(f, "zone-b", "b", 2, 5);
    struct bf_engine_need n = ef_gpu_need(&p, 4, NULL);
    ef_set(f, "cl", &n, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(boot_in_zone(f, "zone-a"), 4);
    ef_free(f);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("engine_phase1");
    TCase *t = tcase_create("phase1");
    tcase_add_loop_test(t, idle_only_bootstraps_three_of_four_idle_machines, 0, 2);
    tcase_add_loop_test(t, speculative_fallback_prefers_cheapest, 0, 2);
    tcase_add_loop_test(t, high_interruption_penalty_prefers_on_demand, 0, 2);
    tcase_add_loop_test(t, idle_beats_cheaper_speculative, 0, 2);
    tcase_add_loop_test(t, no_op_when_configured_supply_already_meets_the_need, 0, 2);
    tcase_add_loop_test(t, partial_stockout_leaves_a_24_gpu_deficit, 0, 2);
    tcase_add_loop_test(t, high_priority_wins_the_contested_pool, 0, 2);
    tcase_add_loop_test(t, many_needs_sharing_a_fingerprint_use_configured_then_idle, 0, 2);
    tcase_add_loop_test(t, dense_machine_credit_leaves_an_8gi_memory_deficit, 0, 2);
    tcase_add_loop_test(t, per_pod_needs_take_a_machine_each_aggregated_need_packs, 0, 2);
    tcase_add_loop_test(t, same_falls_back_to_largest_bucket_with_shortfall, 0, 2);
    tcase_add_loop_test(t, same_picks_the_atomic_satisfiable_zone, 0, 2);
    tcase_add_loop_test(t, same_density_aware_machine_count_needs_one_machine, 0, 2);
    tcase_add_loop_test(t, same_two_needs_land_in_different_zones_and_stay, 0, 2);
    tcase_add_loop_test(t, same_prefers_serving_the_creditable_domain, 0, 2);
    tcase_add_loop_test(t, strict_spread_balances_within_max_skew, 0, 2);
    tcase_add_loop_test(t, schedule_anyway_spread_is_ignored_and_price_wins, 0, 2);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_run(suite());
}
