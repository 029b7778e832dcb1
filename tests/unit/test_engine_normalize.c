/*
 * test_engine_normalize.c — NormalizeDemand (ADR-0041, reference/engine.md
 * §3; catalogue case 27), observed through the verdict rows of the
 * normalized demand. Machine 16 cpu / 128Gi; pod {2 cpu, 16Gi}.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/engine.h"
#include "engine_fixtures.h"
#include "check_run.h"

static const uint32_t modes[2] = {0, BF_ENGINE_F_REFERENCE};

static bf_vec pods(int n)
{
    return ef_vec(2000LL * n, 16 * EF_GI * n, 0);
}

static void gang_profile(struct ef_prof *p)
{
    ef_prof_init(p, 1000, 12, 14);
    ef_prof_in(p, BF_LABEL_INSTANCE_TYPE, "r6i.4xlarge");
    ef_prof_req(p, "rack", BF_OP_SAME, NULL, 0);
    ef_prof_spread(p, BF_LABEL_ZONE, 2, BF_WHEN_SCHEDULE_ANYWAY);
}

static struct ef_machine big_machine(const char *id, uint8_t state)
{
    struct ef_machine m = ef_machine(id, state, "r6i.4xlarge", "zone-a");
    ef_label(&m, "rack", "rack-1");
    m.alloc = ef_vec(16000, 128 * EF_GI, 0);
    return m;
}

/* An engine in `mode` holding one Idle big_machine "i-0"; *p := the gang
 * profile. */
static struct ef *one_idle_machine_and_gang_profile(uint32_t mode, struct ef_prof *p)
{
    struct ef *f = ef_new(16, mode);
    struct ef_machine m = big_machine("i-0", BF_STATE_IDLE);
    ef_add(f, &m);
    gang_profile(p);
    return f;
}

static const struct bf_engine_verdict *by_index(const struct ef *f, uint32_t idx)
{
    for (size_t i = 0; i < f->r.n_verdicts; i++)
        if (f->r.verdicts[i].index == idx)
            return &f->r.verdicts[i];
    return NULL;
}

START_TEST(three_sub_machine_gangs_fold_into_one_atomic_need)
{
    struct ef_prof p;
    struct ef *f = one_idle_machine_and_gang_profile(modes[_i], &p);
    struct bf_engine_need n[3] = {ef_need(&p, pods(4), pods(1), 300, "g1"),
                                  ef_need(&p, pods(4), pods(1), 100, "g2"),
                                  ef_need(&p, pods(4), pods(1), 200, "g3")};
    ef_set(f, "c1", n, 3);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_needs, 1);
    const struct bf_engine_verdict *v = &f->r.verdicts[0];
    ck_assert_uint_eq(v->folded_members, 3);
    ck_assert_int_eq(v->aggregate.v[EF_CPU], 24000);
    ck_assert_int_eq(v->aggregate.v[EF_MEM], 192 * EF_GI);
    ck_assert_int_eq(v->min_unit.v[EF_CPU], 8000);
    ck_assert_int_eq(v->min_unit.v[EF_MEM], 64 * EF_GI);
    ck_assert_int_eq(v->arrival_ns, 100);
    ck_assert_uint_eq(v->group_len, 0);
    ck_assert_int_eq(v->profile->priority, 1000);
    ck_assert_int_eq(v->profile->ipb, 12);
    ck_assert_int_eq(v->profile->rpb, 14);
    ck_assert_uint_eq(v->profile->n_spread, 1);
    ck_assert_uint_eq(v->profile->n_reqs, 1); /* Same stripped */
    ck_assert_int_eq(v->profile->reqs[0].op, BF_OP_IN);
    ck_assert(strstr(v->fingerprint, "rack") == NULL);
    ef_free(f);
}
END_TEST

START_TEST(gangs_of_different_sizes_fold_into_one_need_per_size)
{
    struct ef_prof p;
    struct ef *f = one_idle_machine_and_gang_profile(modes[_i], &p);
    struct bf_engine_need n[3] = {ef_need(&p, pods(4), pods(1), 1, "g1"),
                                  ef_need(&p, pods(2), pods(1), 2, "g2"),
                                  ef_need(&p, pods(4), pods(1), 3, "g3")};
    ef_set(f, "c1", n, 3);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_needs, 2);
    int seen8 = 0, seen4 = 0;
    for (size_t i = 0; i < f->r.n_verdicts; i++) {
        const struct bf_engine_verdict *v = &f->r.verdicts[i];
        if (v->min_unit.v[EF_CPU] == 8000) {
            seen8++;
            ck_assert_int_eq(v->aggregate.v[EF_CPU], 16000);
            ck_assert_uint_eq(v->folded_members, 2);
        } else if (v->min_unit.v[EF_CPU] == 4000) {
            seen4++;
            ck_assert_int_eq(v->aggregate.v[EF_CPU], 4000);
            ck_assert_uint_eq(v->folded_members, 1);
        }
    }
    ck_assert_int_eq(seen8, 1);
    ck_assert_int_eq(seen4, 1);
    ef_free(f);
}
END_TEST

START_TEST(a_gang_larger_than_any_machine_passes_through)
{
    struct ef_prof p;
    struct ef *f = one_idle_machine_and_gang_profile(modes[_i], &p);
    struct bf_engine_need n = ef_need(&p, pods(12), pods(1), 5, "g1");
    ef_set(f, "c1", &n, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_needs, 1);
    const struct bf_engine_verdict *v = &f->r.verdicts[0];
    ck_assert_uint_eq(v->folded_members, 0);
    ck_assert_uint_eq(v->profile->n_reqs, 2);
    ck_assert_int_eq(v->aggregate.v[EF_CPU], 24000);
    ck_assert_uint_eq(v->group_len, 2);
    ef_free(f);
}
END_TEST

START_TEST(foldable_through_idle_or_speculative_not_another_clusters_configured)
{
    const uint8_t states[3] = {BF_STATE_IDLE, BF_STATE_SPECULATIVE, BF_STATE_CONFIGURED};
    for (int k = 0; k < 3; k++) {
        struct ef *f = ef_new(16, modes[_i]);
        struct ef_machine m = big_machine("m-0", states[k]);
        if (states[k] == BF_STATE_CONFIGURED)
            snprintf(m.cluster, sizeof m.cluster, "other");
        ef_add(f, &m);
        struct ef_prof p;
        gang_profile(&p);
        struct bf_engine_need n = ef_need(&p, pods(4), pods(1), 1, "g1");
        ef_set(f, "c1", &n, 1);
        ck_assert_int_eq(ef_cycle(f), 0);
        ck_assert_uint_eq(f->r.n_needs, 1);
        ck_assert_uint_eq(f->r.verdicts[0].folded_members, k < 2 ? 1 : 0);
        ef_free(f);
    }
    /* ... but the gang's own cluster's Configured machine does fold it */
    struct ef *f = ef_new(16, modes[_i]);
    struct ef_machine m = big_machine("m-0", BF_STATE_CONFIGURED);
    snprintf(m.cluster, sizeof m.cluster, "c1");
    ef_add(f, &m);
    struct ef_prof p;
    gang_profile(&p);
    struct bf_engine_need n = ef_need(&p, pods(4), pods(1), 1, "g1");
    ef_set(f, "c1", &n, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.verdicts[0].folded_members, 1);
    ef_free(f);
}
END_TEST

START_TEST(plain_needs_come_first_in_input_order_then_folds_by_cluster)
{
    struct ef *f = ef_new(16, modes[_i]);
    struct ef_machine m = big_machine("i-0", BF_STATE_IDLE);
    ef_add(f, &m);
    struct ef_prof g, plain;
    gang_profile(&g);
    ef_prof_init(&plain, 1000, 1, 1);
    /* cluster "b" rolls up a gang and a plain need; cluster "a" a gang */
    struct bf_engine_need nb[2] = {ef_need(&g, pods(4), pods(1), 10, "gb"),
                                   ef_need(&plain, pods(1), pods(1), 20, NULL)};
    struct bf_engine_need na[2] = {ef_need(&g, pods(2), pods(1), 5, "ga"),
                                   ef_need(&plain, pods(1), pods(1), 30, NULL)};
    ef_set(f, "b", nb, 2);
    ef_set(f, "a", na, 2);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_needs, 4);
    /* D order: pass-through in snapshot order (arrival 20 b, 30 a), then folds a, b */
    const struct bf_engine_verdict *v0 = by_index(f, 0), *v1 = by_index(f, 1), *v2 = by_index(f, 2),
                                   *v3 = by_index(f, 3);
    ck_assert_str_eq(v0->cluster, "b");
    ck_assert_uint_eq(v0->folded_members, 0);
    ck_assert_str_eq(v1->cluster, "a");
    ck_assert_uint_eq(v1->folded_members, 0);
    ck_assert_str_eq(v2->cluster, "a");
    ck_assert_uint_eq(v2->folded_members, 1);
    ck_assert_str_eq(v3->cluster, "b");
    ck_assert_uint_eq(v3->folded_members, 1);
    ef_free(f);
}
END_TEST

START_TEST(a_gang_that_stops_fitting_reverts_next_cycle)
{
    struct ef *f = ef_new(16, modes[_i]);
    struct ef_machine m = big_machine("i-0", BF_STATE_IDLE);
    uint32_t s = ef_add(f, &m);
    struct ef_prof p;
    gang_profile(&p);
    struct bf_engine_need n = ef_need(&p, pods(4), pods(1), 1, "g1");
    ef_set(f, "c1", &n, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.verdicts[0].folded_members, 1);
    ef_del(f, s);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.verdicts[0].folded_members, 0);
    ck_assert_uint_eq(f->r.verdicts[0].profile->n_reqs, 2);
    ef_free(f);
}
END_TEST

START_TEST(own_cluster_supply_arriving_makes_a_gang_foldable_next_cycle)
{
    struct ef *f = ef_new(16, modes[_i]);
    struct ef_machine small = big_machine("small", BF_STATE_IDLE);
    small.alloc = ef_vec(2000, 16 * EF_GI, 0);
    ef_add(f, &small);
    struct ef_prof p;
    gang_profile(&p);
    struct bf_engine_need n = ef_need(&p, pods(4), pods(1), 1, "g1");
    ef_set(f, "c1", &n, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.verdicts[0].folded_members, 0);
    /* a big machine is configured into c1 (a new class in the cluster) */
    struct ef_machine m = big_machine("m-0", BF_STATE_CONFIGURED);
    snprintf(m.cluster, sizeof m.cluster, "c1");
    ef_add(f, &m);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.verdicts[0].folded_members, 1);
    /* and leaves again */
    ef_del(f, ef_slot(f, "m-0"));
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.verdicts[0].folded_members, 0);
    ef_free(f);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("engine_normalize");
    TCase *t = tcase_create("normalize");
    tcase_add_loop_test(t, three_sub_machine_gangs_fold_into_one_atomic_need, 0, 2);
    tcase_add_loop_test(t, gangs_of_different_sizes_fold_into_one_need_per_size, 0, 2);
    tcase_add_loop_test(t, a_gang_larger_than_any_machine_passes_through, 0, 2);
    tcase_add_loop_test(t, foldable_through_idle_or_speculative_not_another_clusters_configured, 0,
                        2);
    tcase_add_loop_test(t, plain_needs_come_first_in_input_order_then_folds_by_cluster, 0, 2);
    tcase_add_loop_test(t, a_gang_that_stops_fitting_reverts_next_cycle, 0, 2);
    tcase_add_loop_test(t, own_cluster_supply_arriving_makes_a_gang_foldable_next_cycle, 0, 2);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_run(suite());
}
