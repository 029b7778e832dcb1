/*
 * test_engine_integration.c — multi-cycle behaviour (reference/engine.md
 * §10 cases 28-30 re-expressed against the sequential equivalent of §4.6):
 * Same-domain stability, end-to-end priority inversion, ChooseSameBucket's
 * ranking rules, precedence order (what the OCC broker decided by conflict is
 * decided here by processing order), and parking bookkeeping (seeds/000 §2.2).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/engine.h"
#include "cycle/engine/engine_internal.h"
#include "engine_fixtures.h"
#include "check_run.h"

static const uint32_t modes[2] = {0, BF_ENGINE_F_REFERENCE};

static void idle_zone(struct ef *f, const char *prefix, int n, const char *zone)
{
    char id[32];
    for (int i = 0; i < n; i++) {
        snprintf(id, sizeof id, "%s-%d", prefix, i);
        struct ef_machine m = ef_gpu_in_zone(id, zone, 0);
        ef_add(f, &m);
    }
}

/* 28 */
START_TEST(same_domain_choice_does_not_oscillate)
{
    struct ef *f = ef_new(32, modes[_i]);
    struct ef_prof p, other;
    ef_gpu_profile_same(&p, 1000000, BF_LABEL_ZONE);
    ef_gpu_profile(&other, 5);
    for (int i = 0; i < 2; i++) {
        char id[8];
        snprintf(id, sizeof id, "a-%d", i);
        struct ef_machine m = ef_gpu_in_zone(id, "zone-a", 0);
        ef_bind(&m, "cluster-x", &other, NULL);
        ef_add(f, &m);
    }
    idle_zone(f, "b", 3, "zone-b");
    ef_first_rollup(f, "cluster-x");
    struct bf_engine_need n = ef_gpu_need(&p, 5, "gang");
    ef_set(f, "cluster-x", &n, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(ef_count(f, BF_ACTION_BOOTSTRAP), 3);
    ck_assert_uint_eq(ef_count(f, BF_ACTION_RECLAIM), 2);
    ck_assert(ef_acted(f, "a-0", BF_ACTION_RECLAIM));
    ck_assert(ef_acted(f, "a-1", BF_ACTION_RECLAIM));
    ef_apply(f);
    for (int c = 2; c <= 4; c++) {
        ck_assert_int_eq(ef_cycle(f), 0);
        ck_assert_uint_eq(f->r.n_actions, 0);
        const struct bf_engine_verdict *v = ef_verdict(f, "cluster-x", 0);
        ck_assert_str_eq(v->same_domain, "zone-b");
        ck_assert_int_eq(v->residual_deficit.v[EF_GPU], 16000);
    }
    ef_free(f);
}
END_TEST

START_TEST(priority_inversion_end_to_end_preempts_then_bootstraps)
{
    struct ef *f = ef_new(32, modes[_i]);
    struct ef_prof batch, train;
    ef_gpu_profile(&batch, 100000);
    ef_gpu_profile(&train, 1000000);
    for (int i = 0; i < 4; i++) {
        char id[8];
        snprintf(id, sizeof id, "b-%d", i);
        struct ef_machine m = ef_gpu_machine(id);
        ef_bind(&m, "batch", &batch, NULL);
        ef_add(f, &m);
    }
    struct bf_engine_need nb = ef_gpu_need(&batch, 4, NULL), nt = ef_gpu_need(&train, 4, NULL);
    ef_set(f, "batch", &nb, 1);
    ef_set(f, "train", &nt, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(ef_unsatisfied(f), 1);
    ck_assert_uint_eq(ef_count(f, BF_ACTION_PREEMPT), 4);
    ef_apply(f);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(ef_count_cluster(f, BF_ACTION_BOOTSTRAP, "train"), 4);
    ck_assert_uint_eq(ef_count_cluster(f, BF_ACTION_BOOTSTRAP, "batch"), 0);
    ef_free(f);
}
END_TEST

/* 29: ChooseSameBucket rules on synthetic buckets */
static struct same_bucket bucket(struct bf_engine *e, const char *v, uint32_t count, int64_t total,
                                 int64_t cred, int64_t own)
{
    struct same_bucket b;
    memset(&b, 0, sizeof b);
    b.value = bfe_intern(&e->in, v, strlen(v));
    b.count = count;
    b.total.v[0] = total;
    b.cred_total.v[0] = cred;
    b.own_total.v[0] = own;
    return b;
}

START_TEST(gang_own_coverage_breaks_a_creditable_tie_in_either_order)
{
    struct ef *f = ef_new(4, 0);
    bf_vec d;
    bf_vec_zero(&d);
    d.v[0] = 3;
    struct same_bucket x = bucket(f->e, "x", 6, 6, 6, 3), y = bucket(f->e, "y", 3, 3, 3, 0);
    struct same_bucket xy[2] = {x, y}, yx[2] = {y, x};
    ck_assert_int_eq(bfe_same_choose(f->e, xy, 2, &d), 0);
    ck_assert_int_eq(bfe_same_choose(f->e, yx, 2, &d), 1);
    ef_free(f);
}
END_TEST

START_TEST(gang_own_does_not_override_more_creditable_coverage)
{
    struct ef *f = ef_new(4, 0);
    bf_vec d;
    bf_vec_zero(&d);
    d.v[0] = 4;
    struct same_bucket p = bucket(f->e, "p", 4, 4, 4, 0), q = bucket(f->e, "q", 4, 4, 2, 2);
    struct same_bucket qp[2] = {q, p};
    ck_assert_int_eq(bfe_same_choose(f->e, qp, 2, &d), 1);
    ef_free(f);
}
END_TEST

START_TEST(without_gang_own_the_least_overcommitted_satisfiable_bucket_wins)
{
    struct ef *f = ef_new(4, 0);
    bf_vec d;
    bf_vec_zero(&d);
    d.v[0] = 3;
    struct same_bucket big = bucket(f->e, "a-big", 5, 5, 0, 0),
                       small = bucket(f->e, "z-small", 3, 3, 0, 0);
    struct same_bucket v[2] = {big, small};
    ck_assert_int_eq(bfe_same_choose(f->e, v, 2, &d), 1);
    /* unsatisfiable pairs: the larger coverage wins; equal coverage: creditable,
     * then count, then the smaller value */
    d.v[0] = 10;
    struct same_bucket u1 = bucket(f->e, "u1", 4, 4, 0, 0), u2 = bucket(f->e, "u2", 4, 6, 0, 0);
    struct same_bucket w[2] = {u1, u2};
    ck_assert_int_eq(bfe_same_choose(f->e, w, 2, &d), 1);
    struct same_bucket c1 = bucket(f->e, "c1", 4, 4, 0, 0), c2 = bucket(f->e, "c2", 4, 4, 2, 0);
    struct same_bucket w2[2] = {c1, c2};
    ck_assert_int_eq(bfe_same_choose(f->e, w2, 2, &d), 1);
    struct same_bucket n1 = bucket(f->e, "n1", 2, 4, 0, 0), n2 = bucket(f->e, "n2", 3, 4, 0, 0);
    struct same_bucket w3[2] = {n1, n2};
    ck_assert_int_eq(bfe_same_choose(f->e, w3, 2, &d), 1);
    struct same_bucket z1 = bucket(f->e, "zb", 2, 4, 0, 0), z2 = bucket(f->e, "za", 2, 4, 0, 0);
    struct same_bucket w4[2] = {z1, z2};
    ck_assert_int_eq(bfe_same_choose(f->e, w4, 2, &d), 1);
    /* empty buckets are skipped */
    struct same_bucket e0 = bucket(f->e, "e0", 0, 100, 100, 100);
    struct same_bucket w5[2] = {e0, z1};
    ck_assert_int_eq(bfe_same_choose(f->e, w5, 2, &d), 1);
    ef_free(f);
}
END_TEST

START_TEST(incumbent_gang_members_are_kept_over_an_equivalent_earlier_id)
{
    struct ef *f = ef_new(32, modes[_i]);
    struct ef_prof p, other;
    ef_gpu_profile_same(&p, 1000, BF_LABEL_ZONE);
    ef_gpu_profile(&other, 1);
    const char *ids[3] = {"g-aaa", "g-mmm", "g-nnn"};
    for (int i = 0; i < 3; i++) {
        struct ef_machine m = ef_gpu_in_zone(ids[i], "zone-a", 0);
        if (i == 0)
            ef_bind(&m, "cluster-a", &other, NULL);
        else
            ef_bind(&m, "cluster-a", &p, "gang");
        ef_add(f, &m);
    }
    ef_first_rollup(f, "cluster-a");
    struct bf_engine_need n = ef_gpu_need(&p, 2, "gang");
    ef_set(f, "cluster-a", &n, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert(bf_engine_claimed(f->e, ef_slot(f, "g-mmm"), NULL));
    ck_assert(bf_engine_claimed(f->e, ef_slot(f, "g-nnn"), NULL));
    ck_assert(!bf_engine_claimed(f->e, ef_slot(f, "g-aaa"), NULL));
    ck_assert_uint_eq(f->r.n_actions, 1);
    ck_assert(ef_acted(f, "g-aaa", BF_ACTION_RECLAIM));
    ef_free(f);
}
END_TEST

/* 30: precedence replaces the broker's conflict resolution */
START_TEST(equal_precedence_never_displaces_the_earlier_need)
{
    struct ef *f = ef_new(8, modes[_i]);
    struct ef_machine m = ef_gpu_machine("i-0");
    ef_add(f, &m);
    struct ef_prof p;
    ef_gpu_profile(&p, 1000);
    struct bf_engine_need late = ef_need(&p, ef_gpu(8), ef_gpu(8), 20, NULL);
    struct bf_engine_need early = ef_need(&p, ef_gpu(8), ef_gpu(8), 10, NULL);
    ef_set(f, "a-late", &late, 1);
    ef_set(f, "z-early", &early, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_actions, 1);
    ck_assert_str_eq(f->r.actions[0].cluster, "z-early");
    ef_free(f);
}
END_TEST

START_TEST(penalty_buckets_break_priority_ties)
{
    for (int which = 0; which < 2; which++) {
        struct ef *f = ef_new(8, modes[_i]);
        struct ef_machine m = ef_gpu_machine("i-0");
        ef_add(f, &m);
        struct ef_prof lo, hi;
        ef_prof_init(&lo, 1000, 5, 5);
        ef_prof_in(&lo, BF_LABEL_INSTANCE_TYPE, EF_A3);
        ef_prof_init(&hi, 1000, which == 0 ? 6 : 5, which == 0 ? 5 : 6);
        ef_prof_in(&hi, BF_LABEL_INSTANCE_TYPE, EF_A3);
        struct bf_engine_need nl = ef_need(&lo, ef_gpu(8), ef_gpu(8), 1, NULL);
        struct bf_engine_need nh = ef_need(&hi, ef_gpu(8), ef_gpu(8), 2, NULL);
        ef_set(f, "lo", &nl, 1);
        ef_set(f, "hi", &nh, 1);
        ck_assert_int_eq(ef_cycle(f), 0);
        ck_assert_uint_eq(f->r.n_actions, 1);
        ck_assert_str_eq(f->r.actions[0].cluster, "hi");
        ef_free(f);
    }
}
END_TEST

/* parking bookkeeping (engine.md §7, TestParkingBookkeeping) */
static struct ef *stalled_gang(uint32_t mode, struct ef_prof *p)
{
    struct ef *f = ef_new(32, mode);
    ef_gpu_profile_same(p, 1000, BF_LABEL_ZONE);
    struct ef_machine own = ef_gpu_in_zone("own", "zone-a", 0);
    ef_bind(&own, "c", p, "gang");
    ef_add(f, &own);
    struct bf_engine_need n = ef_gpu_need(p, 3, "gang");
    ef_set(f, "c", &n, 1);
    return f;
}

START_TEST(parking_starts_at_age_eight_and_reprobes_every_32)
{
    struct ef_prof p;
    struct ef *f = stalled_gang(modes[_i], &p);
    for (int cyc = 1; cyc <= 100; cyc++) {
        ck_assert_int_eq(ef_cycle(f), 0);
        uint32_t age = (uint32_t)cyc - 1; /* recorded by the previous cycle */
        bool want = age >= 8 && age % 32 != 0;
        const struct bf_engine_verdict *v = ef_verdict(f, "c", 0);
        ck_assert_msg(v->acquisition_parked == want, "cycle %d age %u", cyc, age);
        /* reported after this cycle's update, as Go's recordNeedViews reads
         * unsatSameAge (docs/fidelity.md V2): one more than the age parked on */
        ck_assert_uint_eq(v->parked_age_cycles, want ? age + 1 : 0);
    }
    ef_free(f);
}
END_TEST

START_TEST(progress_resets_the_parking_age)
{
    struct ef_prof p;
    struct ef *f = stalled_gang(modes[_i], &p);
    for (int cyc = 1; cyc <= 40; cyc++)
        ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert(ef_verdict(f, "c", 0)->acquisition_parked);
    /* supply appears; the parked gang ignores it until the re-probe at age 64 */
    idle_zone(f, "new", 1, "zone-a");
    int acquired_at = 0;
    for (int cyc = 41; cyc <= 70; cyc++) {
        ck_assert_int_eq(ef_cycle(f), 0);
        if (f->r.n_actions) {
            ck_assert_uint_eq(ef_count(f, BF_ACTION_BOOTSTRAP), 1);
            acquired_at = cyc;
            ef_apply(f);
        }
        if (acquired_at && cyc == acquired_at + 1)
            ck_assert(!ef_verdict(f, "c", 0)->acquisition_parked);
    }
    ck_assert_int_eq(acquired_at, 65);
    ef_free(f);
}
END_TEST

START_TEST(a_resolved_class_is_forgotten_and_a_plain_need_never_parks)
{
    struct ef_prof p;
    struct ef *f = stalled_gang(modes[_i], &p);
    for (int cyc = 1; cyc <= 12; cyc++)
        ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert(ef_verdict(f, "c", 0)->acquisition_parked);
    /* the demand shrinks to what the gang holds: satisfied, forgotten */
    struct bf_engine_need small = ef_gpu_need(&p, 1, "gang");
    ef_set(f, "c", &small, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert(ef_verdict(f, "c", 0)->satisfied);
    struct bf_engine_need big = ef_gpu_need(&p, 3, "gang");
    ef_set(f, "c", &big, 1);
    for (int cyc = 1; cyc <= 8; cyc++) {
        ck_assert_int_eq(ef_cycle(f), 0);
        ck_assert(!ef_verdict(f, "c", 0)->acquisition_parked);
    }
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert(ef_verdict(f, "c", 0)->acquisition_parked);
    /* a plain need never parks */
    ef_want_gpus(f, "c", 1000, NULL, 50, NULL);
    for (int cyc = 1; cyc <= 40; cyc++) {
        ck_assert_int_eq(ef_cycle(f), 0);
        ck_assert(!ef_verdict(f, "c", 0)->acquisition_parked);
        ck_assert(!ef_verdict(f, "c", 0)->satisfied);
    }
    ef_free(f);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("engine_integration");
    TCase *t = tcase_create("integration");
    tcase_add_loop_test(t, same_domain_choice_does_not_oscillate, 0, 2);
    tcase_add_loop_test(t, priority_inversion_end_to_end_preempts_then_bootstraps, 0, 2);
    tcase_add_test(t, gang_own_coverage_breaks_a_creditable_tie_in_either_order);
    tcase_add_test(t, gang_own_does_not_override_more_creditable_coverage);
    tcase_add_test(t, without_gang_own_the_least_overcommitted_satisfiable_bucket_wins);
    tcase_add_loop_test(t, incumbent_gang_members_are_kept_over_an_equivalent_earlier_id, 0, 2);
    tcase_add_loop_test(t, equal_precedence_never_displaces_the_earlier_need, 0, 2);
    tcase_add_loop_test(t, penalty_buckets_break_priority_ties, 0, 2);
    tcase_add_loop_test(t, parking_starts_at_age_eight_and_reprobes_every_32, 0, 2);
    tcase_add_loop_test(t, progress_resets_the_parking_age, 0, 2);
    tcase_add_loop_test(t, a_resolved_class_is_forgotten_and_a_plain_need_never_parks, 0, 2);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_run(suite());
}
