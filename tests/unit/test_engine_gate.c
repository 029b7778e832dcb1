/*
 * test_engine_gate.c — seeds/004 (ADR-0036): Phase 3 reclaim must not fire
 * before a cluster's first rollup has arrived. The ADR's four tests (pre-rollup
 * window, empty rollup, per-cluster isolation, restart) plus what the gate
 * must not touch (Phase 1/2 and idle release).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/engine.h"
#include "engine_fixtures.h"
#include "check_run.h"

static void seed_configured(struct ef *f, const char *cluster, int n)
{
    char id[48];
    for (int i = 0; i < n; i++) {
        snprintf(id, sizeof id, "%s-m%03d", cluster, i);
        struct ef_machine m = ef_configured(id, cluster, 1000, 8192, 65536);
        ef_add(f, &m);
    }
}

START_TEST(pre_rollup_window_reclaims_nothing)
{
    struct ef *f = ef_new(256, 0);
    seed_configured(f, "kwok-1", 40);
    seed_configured(f, "kwok-2", 40);
    for (int c = 0; c < 5; c++) {
        ck_assert_int_eq(ef_cycle(f), 0);
        ck_assert_uint_eq(ef_count(f, BF_ACTION_RECLAIM), 0);
    }
    /* demand arriving for one cluster without the flag still reclaims nothing */
    ef_want_gpus(f, "kwok-1", 1000, NULL, 1, NULL);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(ef_count(f, BF_ACTION_RECLAIM), 0);
    ef_free(f);
}
END_TEST

START_TEST(empty_first_rollup_opens_the_gate_and_reclaims_the_excess)
{
    struct ef *f = ef_new(256, 0);
    seed_configured(f, "kwok-1", 30);
    ef_set(f, "kwok-1", NULL, 0);
    ef_first_rollup(f, "kwok-1");
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(ef_count_cluster(f, BF_ACTION_RECLAIM, "kwok-1"), 30);
    ef_free(f);
}
END_TEST

START_TEST(the_gate_is_per_cluster)
{
    struct ef *f = ef_new(256, 0);
    seed_configured(f, "kwok-a", 20);
    seed_configured(f, "kwok-b", 20);
    struct ef_prof p;
    ef_gpu_profile(&p, 1000);
    struct bf_engine_need n = ef_gpu_need(&p, 5, NULL);
    ef_set(f, "kwok-a", &n, 1);
    ef_set(f, "kwok-b", &n, 1);
    ef_first_rollup(f, "kwok-a");
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(ef_count_cluster(f, BF_ACTION_RECLAIM, "kwok-a"), 15);
    ck_assert_uint_eq(ef_count_cluster(f, BF_ACTION_RECLAIM, "kwok-b"), 0);
    /* Phase 1 still credits kwok-b's supply: nothing unsatisfied, nothing bootstrapped */
    ck_assert_uint_eq(ef_unsatisfied(f), 0);
    ck_assert_uint_eq(ef_count(f, BF_ACTION_BOOTSTRAP), 0);
    ef_free(f);
}
END_TEST

START_TEST(a_restarted_engine_defers_reclaim_until_its_own_first_rollup)
{
    /* first process: reported, reclaims */
    struct ef *f = ef_new(256, 0);
    seed_configured(f, "kwok-1", 10);
    ef_set(f, "kwok-1", NULL, 0);
    ef_first_rollup(f, "kwok-1");
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(ef_count(f, BF_ACTION_RECLAIM), 10);
    /* second process: the same inventory rebuilt from the provider, the
     * rollup held by the session segment survives but the flag starts false */
    struct ef *g = ef_new(256, 0);
    for (uint32_t s = 0; s < f->next; s++)
        ef_add(g, &f->m[s]);
    ef_set(g, "kwok-1", NULL, 0);
    for (int c = 0; c < 3; c++) {
        ck_assert_int_eq(ef_cycle(g), 0);
        ck_assert_uint_eq(ef_count(g, BF_ACTION_RECLAIM), 0);
    }
    ef_first_rollup(g, "kwok-1");
    ck_assert_int_eq(ef_cycle(g), 0);
    ck_assert_uint_eq(ef_count(g, BF_ACTION_RECLAIM), 10);
    ef_free(f);
    ef_free(g);
}
END_TEST

START_TEST(the_gate_does_not_hold_idle_release)
{
    struct ef *f = ef_new(16, 0);
    struct ef_machine m = ef_gpu_machine("spot-0");
    m.ct = BF_CT_SPOT;
    m.idle_since = 1700000000 - 3600;
    ef_add(f, &m);
    seed_configured(f, "never-reported", 3);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_actions, 1);
    ck_assert(ef_acted(f, "spot-0", BF_ACTION_DELETE));
    ef_free(f);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("engine_gate");
    TCase *t = tcase_create("adr0036");
    tcase_add_test(t, pre_rollup_window_reclaims_nothing);
    tcase_add_test(t, empty_first_rollup_opens_the_gate_and_reclaims_the_excess);
    tcase_add_test(t, the_gate_is_per_cluster);
    tcase_add_test(t, a_restarted_engine_defers_reclaim_until_its_own_first_rollup);
    tcase_add_test(t, the_gate_does_not_hold_idle_release);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_run(suite());
}
