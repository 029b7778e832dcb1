/*
 * test_engine_badinput.c — defined results for bad input (the "Bad
 * input" list) and the mirror's bookkeeping: a MinUnit no machine can hold,
 * NaN or negative prices and probabilities, an unknown requirement operator,
 * a profile without requirements, no needs, no machines, invalid states,
 * duplicate ids, saturating arithmetic, argument errors; plus the Creating
 * credit predicates (engine.md §4.2) and upsert/remove accounting.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/engine.h"
#include "engine_fixtures.h"
#include "check_run.h"

/* Runs a cycle and asserts it decided nothing and cluster's first Need's
 * verdict is NoMatchingSupply. */
static void assert_cycle_finds_no_matching_supply(struct ef *f, const char *cluster)
{
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_actions, 0);
    ck_assert_int_eq(ef_verdict(f, cluster, 0)->unmet_reason, BF_UNMET_NO_MATCHING_SUPPLY);
}

START_TEST(min_unit_no_machine_can_hold_is_no_matching_supply)
{
    struct ef *f = ef_new(16, 0);
    struct ef_machine m = ef_gpu_machine("i-0");
    ef_add(f, &m);
    struct ef_prof p;
    ef_gpu_profile(&p, 1000);
    struct bf_engine_need n = ef_need(&p, ef_gpu(64), ef_gpu(16), 0, NULL);
    ef_set(f, "c", &n, 1);
    assert_cycle_finds_no_matching_supply(f, "c");
    ef_free(f);
}
END_TEST

START_TEST(invalid_cost_inputs_make_a_machine_ineligible)
{
    struct ef *f = ef_new(16, 0);
    const double prices[4] = {NAN, -1, 1, 1}, probs[4] = {0, 0, NAN, 1.5};
    char id[8];
    for (int i = 0; i < 4; i++) {
        snprintf(id, sizeof id, "bad-%d", i);
        struct ef_machine m = ef_gpu_machine(id);
        m.price = prices[i];
        m.prob = probs[i];
        ef_add(f, &m);
        /* and a Configured one that would otherwise be excess */
        snprintf(id, sizeof id, "cbad-%d", i);
        struct ef_machine c = ef_configured(id, "c", 10, 1, 1);
        c.price = prices[i];
        c.prob = probs[i];
        ef_add(f, &c);
    }
    ef_want_gpus(f, "d", 1000, NULL, 2, NULL);
    ef_set(f, "c", NULL, 0);
    ef_first_rollup(f, "c");
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_actions, 0);
    struct bf_engine_mirror_stats st;
    bf_engine_mirror_stats(f->e, &st);
    ck_assert_uint_eq(st.machines, 8);
    ck_assert_uint_eq(st.ineligible, 8);
    ck_assert_uint_eq(st.by_state[BF_STATE_IDLE], 0);
    /* fixing the record makes it eligible again */
    f->m[0].price = 2;
    ef_sync(f, 0);
    bf_engine_mirror_stats(f->e, &st);
    ck_assert_uint_eq(st.ineligible, 7);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert(ef_acted(f, "bad-0", BF_ACTION_BOOTSTRAP));
    ef_free(f);
}
END_TEST

START_TEST(upserts_through_a_reused_buffer_resolve_by_content)
{
    struct ef *f = ef_new(16, 0);
    char type[16], id[8];
    struct bf_engine_label lab = {"topology.bigfleet/rack", "r-0"};
    struct bf_engine_machine m = {.id = id,
                                  .state = BF_STATE_IDLE,
                                  .instance_type = type,
                                  .zone = "z",
                                  .n_labels = 1,
                                  .labels = &lab,
                                  .allocatable = {{4000, 1024}},
                                  .cluster = "",
                                  .price_per_hour = 1,
                                  .assigned_fingerprint = ""};
    struct bf_engine_mirror_stats st;
    /* the same buffers, new bytes: a new class each time the bytes differ */
    const char *types[4] = {"t-a", "t-b", "t-a", "t-b"};
    for (uint32_t i = 0; i < 4; i++) {
        snprintf(type, sizeof type, "%s", types[i]);
        snprintf(id, sizeof id, "m-%u", i);
        ck_assert_int_eq(bf_engine_upsert(f->e, i, &m), 0);
    }
    bf_engine_mirror_stats(f->e, &st);
    ck_assert_uint_eq(st.classes, 2);
    ck_assert_uint_eq(st.leaves, 2);
    /* the last leaf empties and goes; an identical machine then gets a new one */
    ck_assert_int_eq(bf_engine_remove(f->e, 1), 0);
    ck_assert_int_eq(bf_engine_remove(f->e, 3), 0);
    bf_engine_mirror_stats(f->e, &st);
    ck_assert_uint_eq(st.leaves, 1);
    snprintf(id, sizeof id, "m-5");
    ck_assert_int_eq(bf_engine_upsert(f->e, 5, &m), 0);
    bf_engine_mirror_stats(f->e, &st);
    ck_assert_uint_eq(st.classes, 2);
    ck_assert_uint_eq(st.leaves, 2);
    ck_assert_uint_eq(st.by_state[BF_STATE_IDLE], 3);
    /* a label value changed in place is a different class too */
    lab.value = "r-1";
    snprintf(id, sizeof id, "m-6");
    ck_assert_int_eq(bf_engine_upsert(f->e, 6, &m), 0);
    bf_engine_mirror_stats(f->e, &st);
    ck_assert_uint_eq(st.classes, 3);
    ef_free(f);
}
END_TEST

START_TEST(invalid_states_empty_ids_and_unbound_configured_are_screened)
{
    struct ef *f = ef_new(16, 0);
    const uint8_t states[3] = {0, 9, 200};
    char id[8];
    for (int i = 0; i < 3; i++) {
        snprintf(id, sizeof id, "s-%d", i);
        struct ef_machine m = ef_gpu_machine(id);
        m.state = states[i];
        ef_add(f, &m);
    }
    struct ef_machine empty = ef_gpu_machine("");
    ef_add(f, &empty);
    struct ef_machine unbound = ef_configured("u", "", 1, 1, 1);
    ef_add(f, &unbound);
    struct bf_engine_mirror_stats st;
    bf_engine_mirror_stats(f->e, &st);
    ck_assert_uint_eq(st.ineligible, 5);
    ef_set(f, "c", NULL, 0);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_actions, 0);
    ef_free(f);
}
END_TEST

START_TEST(unknown_operator_matches_nothing)
{
    struct ef *f = ef_new(16, 0);
    struct ef_machine m = ef_gpu_machine("i-0");
    ef_label(&m, "k", "v");
    ef_add(f, &m);
    const uint8_t ops[2] = {BF_OP_UNSPECIFIED, 42};
    for (int i = 0; i < 2; i++) {
        struct ef_prof p;
        ef_prof_init(&p, 1000, 1, 1);
        const char *v = "v";
        ef_prof_req(&p, "k", ops[i], &v, 1);
        struct bf_engine_need n = ef_gpu_need(&p, 1, NULL);
        ef_set(f, "c", &n, 1);
        assert_cycle_finds_no_matching_supply(f, "c");
    }
    ef_free(f);
}
END_TEST

START_TEST(profile_without_requirements_matches_any_machine)
{
    struct ef *f = ef_new(16, 0);
    struct ef_machine m = ef_machine("bare", BF_STATE_IDLE, "", "");
    m.alloc = ef_gpu(8);
    ef_add(f, &m);
    struct ef_prof p;
    ef_prof_init(&p, 0, 0, 0);
    struct bf_engine_need n = ef_gpu_need(&p, 1, NULL);
    ef_set(f, "c", &n, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert(ef_acted(f, "bare", BF_ACTION_BOOTSTRAP));
    ck_assert_str_eq(ef_verdict(f, "c", 0)->fingerprint, "p=0|ipb=0|rpb=0|reqs=|spr=");
    ef_free(f);
}
END_TEST

START_TEST(no_needs_and_no_machines_give_an_empty_result)
{
    struct ef *f = ef_new(16, 0);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_actions, 0);
    ck_assert_uint_eq(f->r.n_needs, 0);
    ck_assert_uint_eq(f->r.n_verdicts, 0);
    ef_want_gpus(f, "c", 1000, NULL, 3, NULL);
    assert_cycle_finds_no_matching_supply(f, "c");
    ef_set(f, "c", NULL, 0);
    struct ef_machine m = ef_gpu_machine("i-0");
    ef_add(f, &m);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_actions, 0);
    ef_free(f);
}
END_TEST

START_TEST(zero_and_negative_aggregates_are_already_satisfied)
{
    struct ef *f = ef_new(16, 0);
    struct ef_machine m = ef_gpu_machine("i-0");
    ef_add(f, &m);
    struct ef_prof p;
    ef_gpu_profile(&p, 1000);
    struct bf_engine_need n[2] = {ef_need(&p, ef_gpu(0), ef_gpu(0), 0, "a"),
                                  ef_need(&p, ef_vec(-5, -5, -5), ef_vec(-1, 0, 0), 0, "b")};
    ef_set(f, "c", n, 2);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_actions, 0);
    ck_assert_uint_eq(ef_unsatisfied(f), 0);
    ef_free(f);
}
END_TEST

START_TEST(huge_quantities_saturate_without_overflow)
{
    struct ef *f = ef_new(16, 0);
    for (int i = 0; i < 3; i++) {
        char id[8];
        snprintf(id, sizeof id, "i-%d", i);
        struct ef_machine m = ef_gpu_machine(id);
        m.alloc = ef_vec(INT64_MAX, INT64_MAX, INT64_MAX);
        ef_add(f, &m);
        snprintf(id, sizeof id, "c-%d", i);
        struct ef_machine c = ef_configured(id, "c", 0, 1, 1);
        c.alloc = ef_vec(INT64_MAX, INT64_MAX - 1, 1);
        ef_add(f, &c);
    }
    struct ef_prof p;
    ef_prof_init(&p, INT32_MAX, 27, 27);
    struct bf_engine_need n =
        ef_need(&p, ef_vec(INT64_MAX, INT64_MAX, INT64_MAX), ef_vec(1, 1, 1), INT64_MIN, NULL);
    ef_set(f, "c", &n, 1);
    struct ef_prof q;
    ef_prof_init(&q, INT32_MIN, 0, 0);
    struct bf_engine_need m2 =
        ef_need(&q, ef_vec(INT64_MAX, 0, 0), ef_vec(INT64_MAX, 0, 0), INT64_MAX, NULL);
    ef_set(f, "d", &m2, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_int_eq(ef_cycle(f), 0);
    ef_free(f);
}
END_TEST

START_TEST(duplicate_ids_in_two_slots_are_ordered_deterministically)
{
    struct ef *f = ef_new(16, 0);
    struct ef_machine m = ef_gpu_machine("same");
    ef_add(f, &m);
    ef_add(f, &m);
    ef_want_gpus(f, "c", 1000, NULL, 1, NULL);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_actions, 1);
    ck_assert_uint_eq(f->r.actions[0].slot, 0);
    ef_free(f);
}
END_TEST

START_TEST(argument_errors_are_reported_not_crashed_on)
{
    struct bf_engine_config c;
    bf_engine_config_defaults(&c);
    struct bf_engine *e = NULL;
    ck_assert_int_eq(bf_engine_new(&c, &e), -EINVAL); /* capacity 0 */
    c.capacity = 8;
    c.w_priority = -1;
    ck_assert_int_eq(bf_engine_new(&c, &e), -EINVAL);
    c.w_priority = 1;
    c.spot_hold_s = -5;
    ck_assert_int_eq(bf_engine_new(&c, &e), -EINVAL);
    c.spot_hold_s = 60;
    ck_assert_int_eq(bf_engine_new(&c, &e), 0);
    struct bf_engine_machine m = {.id = "x", .state = BF_STATE_IDLE};
    ck_assert_int_eq(bf_engine_upsert(e, 8, &m), -EINVAL);
    ck_assert_int_eq(bf_engine_upsert(e, 0, NULL), -EINVAL);
    m.id = NULL;
    ck_assert_int_eq(bf_engine_upsert(e, 0, &m), -EINVAL);
    ck_assert_int_eq(bf_engine_remove(e, 99), -EINVAL);
    ck_assert_int_eq(bf_engine_remove(e, 3), 0); /* empty slot */
    ck_assert_int_eq(bf_engine_set_needs(e, "", 1, NULL, 0), -EINVAL);
    ck_assert_int_eq(bf_engine_set_needs(e, NULL, 1, NULL, 0), -EINVAL);
    ck_assert_int_eq(bf_engine_set_needs(e, "c", 1, NULL, 2), -EINVAL);
    struct bf_requirement r = {.key = NULL, .op = BF_OP_EXISTS};
    struct bf_engine_need n = {.profile = {.n_reqs = 1, .reqs = &r}};
    ck_assert_int_eq(bf_engine_set_needs(e, "c", 1, &n, 1), -EINVAL);
    r.key = "k";
    r.op = BF_OP_IN;
    r.n_values = 1;
    const char *vals[1] = {NULL};
    r.values = vals;
    ck_assert_int_eq(bf_engine_set_needs(e, "c", 1, &n, 1), -EINVAL);
    ck_assert_int_eq(bf_engine_set_cluster_flags(e, "", true, true), -EINVAL);
    ck_assert_int_eq(bf_engine_cycle(e, 0, NULL), -EINVAL);
    ck_assert_uint_eq(bf_engine_cluster_configured(e, "nope"), 0);
    ck_assert(!bf_engine_claimed(e, 0, NULL));
    bf_engine_free(e);
    bf_engine_free(NULL);
}
END_TEST

START_TEST(the_same_generation_is_ignored_and_identical_content_is_detected)
{
    struct ef *f = ef_new(16, 0);
    struct ef_prof p;
    ef_gpu_profile(&p, 1000);
    struct bf_engine_need n = ef_gpu_need(&p, 1, NULL);
    ck_assert_int_eq(bf_engine_set_needs(f->e, "c", 7, &n, 1), 0);
    struct bf_engine_need m = ef_gpu_need(&p, 5, NULL);
    ck_assert_int_eq(bf_engine_set_needs(f->e, "c", 7, &m, 1), 0); /* same generation: no-op */
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_int_eq(ef_verdict(f, "c", 0)->aggregate.v[EF_GPU], 8000);
    ck_assert_int_eq(bf_engine_set_needs(f->e, "c", 8, &m, 1), 0);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_int_eq(ef_verdict(f, "c", 0)->aggregate.v[EF_GPU], 40000);
    ef_free(f);
}
END_TEST

START_TEST(creating_credit_is_fingerprint_own_and_gang_own_for_same_needs)
{
    struct ef *f = ef_new(16, 0);
    struct ef_prof plain, same;
    ef_gpu_profile(&plain, 1000);
    ef_gpu_profile_same(&same, 1000, BF_LABEL_ZONE);
    /* a Creating machine provisioned for the plain fingerprint (no cluster) */
    struct ef_machine c1 = ef_gpu_machine("creating-plain");
    c1.state = BF_STATE_CREATING;
    snprintf(c1.fp, sizeof c1.fp, "%s", ef_fp(&plain));
    ef_add(f, &c1);
    /* one provisioned for the Same fingerprint but another gang */
    struct ef_machine c2 = ef_gpu_machine("creating-other-gang");
    c2.state = BF_STATE_CREATING;
    snprintf(c2.fp, sizeof c2.fp, "%s", ef_fp(&same));
    snprintf(c2.group, sizeof c2.group, "gang-x");
    ef_add(f, &c2);
    struct bf_engine_need n1 = ef_gpu_need(&plain, 1, NULL);
    struct bf_engine_need n2 = ef_gpu_need(&same, 1, "gang-y");
    ef_set(f, "c1", &n1, 1);
    ef_set(f, "c2", &n2, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert(ef_verdict(f, "c1", 0)->satisfied);
    ck_assert(bf_engine_claimed(f->e, ef_slot(f, "creating-plain"), NULL));
    ck_assert(!ef_verdict(f, "c2", 0)->satisfied);
    ck_assert(!bf_engine_claimed(f->e, ef_slot(f, "creating-other-gang"), NULL));
    /* the gang's own in-flight machine is credited */
    snprintf(f->m[ef_slot(f, "creating-other-gang")].group, 64, "gang-y");
    ef_sync(f, ef_slot(f, "creating-other-gang"));
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert(ef_verdict(f, "c2", 0)->satisfied);
    ef_free(f);
}
END_TEST

START_TEST(upsert_and_remove_keep_the_mirror_counts)
{
    struct ef *f = ef_new(64, 0);
    for (int i = 0; i < 40; i++) {
        char id[16];
        snprintf(id, sizeof id, "m-%02d", i);
        struct ef_machine m = ef_gpu_machine(id);
        if (i % 2)
            m = ef_configured(id, i % 4 == 1 ? "a" : "b", 10, 1, 1);
        ef_add(f, &m);
    }
    struct bf_engine_mirror_stats st;
    bf_engine_mirror_stats(f->e, &st);
    ck_assert_uint_eq(st.machines, 40);
    ck_assert_uint_eq(st.by_state[BF_STATE_IDLE], 20);
    ck_assert_uint_eq(st.by_state[BF_STATE_CONFIGURED], 20);
    ck_assert_uint_eq(bf_engine_cluster_configured(f->e, "a"), 10);
    /* move, rename, remove */
    f->m[1].state = BF_STATE_IDLE;
    f->m[1].cluster[0] = 0;
    ef_sync(f, 1);
    snprintf(f->m[2].id, sizeof f->m[2].id, "renamed");
    ef_sync(f, 2);
    ef_del(f, 3);
    bf_engine_mirror_stats(f->e, &st);
    ck_assert_uint_eq(st.machines, 39);
    ck_assert_uint_eq(st.by_state[BF_STATE_IDLE], 21);
    ck_assert_uint_eq(st.by_state[BF_STATE_CONFIGURED], 18);
    ck_assert_uint_eq(bf_engine_cluster_configured(f->e, "a"), 9);
    ck_assert_uint_eq(bf_engine_cluster_configured(f->e, "b"), 9);
    for (uint32_t s = 0; s < 40; s++)
        if (f->m[s].used)
            ef_del(f, s);
    bf_engine_mirror_stats(f->e, &st);
    ck_assert_uint_eq(st.machines, 0);
    ck_assert_uint_eq(st.leaves, 0);
    ck_assert_uint_eq(st.classes, 0);
    ck_assert_int_eq(ef_cycle(f), 0);
    ef_free(f);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("engine_badinput");
    TCase *t = tcase_create("badinput");
    tcase_add_test(t, min_unit_no_machine_can_hold_is_no_matching_supply);
    tcase_add_test(t, invalid_cost_inputs_make_a_machine_ineligible);
    tcase_add_test(t, upserts_through_a_reused_buffer_resolve_by_content);
    tcase_add_test(t, invalid_states_empty_ids_and_unbound_configured_are_screened);
    tcase_add_test(t, unknown_operator_matches_nothing);
    tcase_add_test(t, profile_without_requirements_matches_any_machine);
    tcase_add_test(t, no_needs_and_no_machines_give_an_empty_result);
    tcase_add_test(t, zero_and_negative_aggregates_are_already_satisfied);
    tcase_add_test(t, huge_quantities_saturate_without_overflow);
    tcase_add_test(t, duplicate_ids_in_two_slots_are_ordered_deterministically);
    tcase_add_test(t, argument_errors_are_reported_not_crashed_on);
    tcase_add_test(t, the_same_generation_is_ignored_and_identical_content_is_detected);
    tcase_add_test(t, creating_credit_is_fingerprint_own_and_gang_own_for_same_needs);
    tcase_add_test(t, upsert_and_remove_keep_the_mirror_counts);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_run(suite());
}
