/*
 * test_engine_verdicts.c — observation outputs: the ADR-0061 reason
 * taxonomy and amendment fields (seeds/003), the shortfall ledger (seeds/000
 * §6) and the AvailableCapacity hints with coalescing and rate limiting
 * (seeds/000 §7, shard.md §4.6).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/engine.h"
#include "engine_fixtures.h"
#include "check_run.h"

static void add_n(struct ef *f, const char *prefix, int n, uint8_t state, const char *cluster,
                  int32_t prio, const char *zone)
{
    char id[48];
    for (int i = 0; i < n; i++) {
        snprintf(id, sizeof id, "%s-%03d", prefix, i);
        struct ef_machine m = ef_gpu_in_zone(id, zone ? zone : "us-east-1a", 0);
        m.state = state;
        if (cluster) {
            snprintf(m.cluster, sizeof m.cluster, "%s", cluster);
            m.prio = prio;
        }
        ef_add(f, &m);
    }
}

START_TEST(satisfied_need_has_no_reason_and_no_supply_summary)
{
    struct ef *f = ef_new(16, 0);
    add_n(f, "i", 2, BF_STATE_IDLE, NULL, 0, NULL);
    struct ef_prof p;
    ef_gpu_profile(&p, 1000);
    struct bf_engine_need n = ef_gpu_need(&p, 2, NULL);
    ef_set(f, "c", &n, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    const struct bf_engine_verdict *v = ef_verdict(f, "c", 0);
    ck_assert(v->satisfied);
    ck_assert_int_eq(v->unmet_reason, BF_UNMET_UNSPECIFIED);
    ck_assert_str_eq(bf_unmet_reason_name(v->unmet_reason), "SATISFIED");
    ck_assert(!v->has_matching_supply);
    ck_assert(bf_vec_is_zero(&v->residual_deficit));
    ck_assert_uint_eq(v->claimed_count, 2);
    ck_assert_uint_eq(v->bootstrap_count, 2);
    ck_assert_uint_eq(v->age_cycles_unmet, 0);
    ck_assert_str_eq(v->fingerprint, ef_fp(&p));
    ef_free(f);
}
END_TEST

START_TEST(no_matching_supply_when_no_machine_of_the_shape_exists)
{
    struct ef *f = ef_new(16, 0);
    add_n(f, "i", 2, BF_STATE_IDLE, NULL, 0, NULL);
    struct ef_prof p;
    ef_prof_init(&p, 1000, 1, 1);
    ef_prof_in(&p, BF_LABEL_INSTANCE_TYPE, "x9-nonexistent");
    struct bf_engine_need n = ef_gpu_need(&p, 1, NULL);
    ef_set(f, "c", &n, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    const struct bf_engine_verdict *v = ef_verdict(f, "c", 0);
    ck_assert(!v->satisfied);
    ck_assert_int_eq(v->unmet_reason, BF_UNMET_NO_MATCHING_SUPPLY);
    ck_assert(v->has_matching_supply);
    ck_assert_uint_eq(v->matching_supply.idle + v->matching_supply.configured +
                          v->matching_supply.speculative,
                      0);
    ef_free(f);
}
END_TEST

START_TEST(priority_starved_when_matching_supply_is_held_above_us)
{
    struct ef *f = ef_new(32, 0);
    add_n(f, "held", 3, BF_STATE_CONFIGURED, "other", 5000, NULL);
    add_n(f, "spec", 2, BF_STATE_SPECULATIVE, NULL, 0, NULL);
    struct ef_prof hi, lo;
    ef_gpu_profile(&hi, 6000);
    ef_gpu_profile(&lo, 1000);
    struct bf_engine_need nh = ef_gpu_need(&hi, 2, NULL), nl = ef_gpu_need(&lo, 1, NULL);
    ef_set(f, "c-hi", &nh, 1);
    ef_set(f, "c-lo", &nl, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    const struct bf_engine_verdict *v = ef_verdict(f, "c-lo", 0);
    ck_assert(!v->satisfied);
    ck_assert_int_eq(v->unmet_reason, BF_UNMET_PRIORITY_STARVED);
    ck_assert_uint_eq(v->matching_supply.configured, 3);
    ck_assert_uint_eq(v->matching_supply.speculative, 2);
    ck_assert(!v->matching_supply.capped);
    ck_assert(!v->has_preemption);
    ef_free(f);
}
END_TEST

START_TEST(preemption_exhausted_when_victims_fall_short)
{
    struct ef *f = ef_new(16, 0);
    add_n(f, "victim", 1, BF_STATE_CONFIGURED, "batch", 10, NULL);
    ef_want_gpus(f, "train", 1000000, NULL, 3, NULL);
    ck_assert_int_eq(ef_cycle(f), 0);
    const struct bf_engine_verdict *v = ef_verdict(f, "train", 0);
    ck_assert_int_eq(v->unmet_reason, BF_UNMET_PREEMPTION_EXHAUSTED);
    ck_assert(v->has_preemption);
    ck_assert_uint_eq(v->preemption.victims_found, 1);
    ck_assert_int_eq(v->preemption.capacity_freed.v[EF_GPU], 8000);
    ck_assert_int_eq(v->residual_deficit.v[EF_GPU], 24000); /* Phase 1's deficit */
    ck_assert_uint_eq(f->r.n_unresolved, 1);
    ck_assert_int_eq(f->r.unresolved[0].deficit.v[EF_GPU], 16000);
    ef_free(f);
}
END_TEST

START_TEST(topology_unsatisfiable_for_a_same_need_without_a_satisfiable_domain)
{
    struct ef *f = ef_new(16, 0);
    add_n(f, "a", 2, BF_STATE_IDLE, NULL, 0, "zone-a");
    add_n(f, "b", 2, BF_STATE_IDLE, NULL, 0, "zone-b");
    ef_want_gpus(f, "c", 1000, BF_LABEL_ZONE, 3, "gang");
    ck_assert_int_eq(ef_cycle(f), 0);
    const struct bf_engine_verdict *v = ef_verdict(f, "c", 0);
    ck_assert_int_eq(v->unmet_reason, BF_UNMET_TOPOLOGY_UNSATISFIABLE);
    ck_assert(!v->same_satisfiable);
    ck_assert_uint_eq(v->bootstrap_count, 2);
    ef_free(f);
}
END_TEST

START_TEST(matching_supply_is_capped_per_state)
{
    struct ef *f = ef_new(512, 0);
    add_n(f, "held", 300, BF_STATE_CONFIGURED, "other", 5000, NULL);
    ef_want_gpus(f, "c", 1000, NULL, 1, NULL);
    ck_assert_int_eq(ef_cycle(f), 0);
    const struct bf_engine_verdict *v = ef_verdict(f, "c", 0);
    ck_assert_uint_eq(v->matching_supply.configured, 256);
    ck_assert(v->matching_supply.capped);
    ck_assert_uint_eq(v->matching_supply.idle, 0);
    ef_free(f);
}
END_TEST

START_TEST(same_candidates_are_the_top_k_domains_best_first)
{
    struct ef *f = ef_new(128, 0);
    char zone[16], pre[16];
    for (int z = 1; z <= 10; z++) {
        snprintf(zone, sizeof zone, "zone-%02d", z);
        snprintf(pre, sizeof pre, "m%02d", z);
        add_n(f, pre, z, BF_STATE_IDLE, NULL, 0, zone);
    }
    ef_want_gpus(f, "c", 1000, BF_LABEL_ZONE, 5, "gang");
    ck_assert_int_eq(ef_cycle(f), 0);
    const struct bf_engine_verdict *v = ef_verdict(f, "c", 0);
    ck_assert(v->satisfied);
    ck_assert_str_eq(v->same_domain, "zone-05");
    ck_assert_uint_eq(v->n_same_candidates, 8);
    const char *want[8] = {"zone-05", "zone-06", "zone-07", "zone-08",
                           "zone-09", "zone-10", "zone-04", "zone-03"};
    const int per_mille[8] = {1000, 1000, 1000, 1000, 1000, 1000, 800, 600};
    for (int i = 0; i < 8; i++) {
        ck_assert_str_eq(v->same_candidates[i].domain, want[i]);
        ck_assert_int_eq(v->same_candidates[i].coverage_per_mille, per_mille[i]);
        ck_assert(v->same_candidates[i].satisfiable == (i < 6));
    }
    ef_free(f);
}
END_TEST

START_TEST(age_cycles_unmet_follows_the_shortfall_ledger)
{
    struct ef *f = ef_new(16, 0);
    ef_want_gpus(f, "c", 1000, NULL, 1, NULL);
    for (uint32_t c = 1; c <= 3; c++) {
        ck_assert_int_eq(ef_cycle(f), 0);
        ck_assert_uint_eq(ef_verdict(f, "c", 0)->age_cycles_unmet, c);
        ck_assert_uint_eq(f->r.n_shortfalls, 1);
        ck_assert_uint_eq(f->r.shortfalls[0].age_cycles, c);
    }
    add_n(f, "i", 1, BF_STATE_IDLE, NULL, 0, NULL);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(ef_verdict(f, "c", 0)->age_cycles_unmet, 0);
    ck_assert_uint_eq(f->r.n_shortfalls, 0);
    ef_free(f);
}
END_TEST

START_TEST(shortfalls_sum_per_fingerprint_and_sort_by_priority_then_age)
{
    struct ef *f = ef_new(16, 0);
    struct ef_prof a, b;
    ef_gpu_profile(&a, 1000);
    ef_gpu_profile(&b, 5000);
    struct bf_engine_need na = ef_gpu_need(&a, 2, NULL), na2 = ef_gpu_need(&a, 3, NULL);
    ef_set(f, "c1", &na, 1);
    ef_set(f, "c2", &na2, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_shortfalls, 1);
    ck_assert_int_eq(f->r.shortfalls[0].deficit.v[EF_GPU], 40000);
    ck_assert_uint_eq(f->r.shortfalls[0].age_cycles, 1);
    ck_assert_int_eq(f->r.shortfalls[0].priority, 1000);
    ck_assert_str_eq(f->r.shortfalls[0].fingerprint, ef_fp(&a));
    ck_assert_ptr_nonnull(f->r.shortfalls[0].profile);
    struct bf_engine_need nb = ef_gpu_need(&b, 1, NULL);
    ef_set(f, "c3", &nb, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_shortfalls, 2);
    ck_assert_int_eq(f->r.shortfalls[0].priority, 5000); /* priority first ... */
    ck_assert_uint_eq(f->r.shortfalls[0].age_cycles, 1);
    ck_assert_uint_eq(f->r.shortfalls[1].age_cycles, 2);
    /* a vanished fingerprint leaves the ledger */
    ef_set(f, "c1", NULL, 0);
    ef_set(f, "c2", NULL, 0);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_shortfalls, 1);
    ck_assert_int_eq(f->r.shortfalls[0].priority, 5000);
    ef_free(f);
}
END_TEST

START_TEST(shortfall_report_is_cut_to_the_top_100)
{
    struct ef *f = ef_new(16, 0);
    struct bf_engine_need n[120];
    struct ef_prof p[120];
    for (int i = 0; i < 120; i++) {
        ef_gpu_profile(&p[i], 1000 + i);
        n[i] = ef_gpu_need(&p[i], 1, NULL);
    }
    ef_set(f, "c", n, 120);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_shortfalls, 100);
    ck_assert_int_eq(f->r.shortfalls[0].priority, 1119);
    ck_assert_int_eq(f->r.shortfalls[99].priority, 1020);
    ef_free(f);
}
END_TEST

/* AvailableCapacity */
static const struct bf_engine_ac_hint *hint(const struct ef *f, const char *cluster)
{
    for (size_t i = 0; i < f->r.n_ac_hints; i++)
        if (strcmp(f->r.ac_hints[i].cluster, cluster) == 0)
            return &f->r.ac_hints[i];
    return NULL;
}

START_TEST(available_capacity_confidence_ladder_and_cheapest_idle_cost)
{
    struct ef *f = ef_new(32, 0);
    struct ef_prof p;
    ef_gpu_profile(&p, 1000);
    struct bf_engine_need n = ef_gpu_need(&p, 100, NULL);
    ef_set(f, "c", &n, 1);
    ck_assert_int_eq(bf_engine_set_cluster_flags(f->e, "c", true, true), 0);
    ck_assert_int_eq(ef_cycle(f), 0);
    const struct bf_engine_ac_hint *h = hint(f, "c");
    ck_assert_ptr_nonnull(h);
    ck_assert_int_eq(h->confidence, BF_AC_CONFIDENCE_NONE);
    ck_assert_int_eq(h->available_count, 0);
    ck_assert_str_eq(h->fingerprint, ef_fp(&p));
    /* Speculative only: MEDIUM */
    add_n(f, "s", 2, BF_STATE_SPECULATIVE, NULL, 0, NULL);
    f->now_ns += 10LL * 1000000000LL;
    ck_assert_int_eq(ef_cycle(f), 0);
    h = hint(f, "c");
    ck_assert_int_eq(h->confidence, BF_AC_CONFIDENCE_MEDIUM);
    ck_assert_int_eq(h->available_count, 2);
    ck_assert(h->cost_per_hour == 0);
    /* Idle: HIGH, cost = cheapest Idle price of the pinned type */
    struct ef_machine a = ef_gpu_in_zone("i-dear", "z", 7.5),
                      b = ef_gpu_in_zone("i-cheap", "z", 2.5);
    ef_add(f, &a);
    ef_add(f, &b);
    f->now_ns += 10LL * 1000000000LL;
    ck_assert_int_eq(ef_cycle(f), 0);
    h = hint(f, "c");
    ck_assert_int_eq(h->confidence, BF_AC_CONFIDENCE_HIGH);
    ck_assert_int_eq(h->available_count, 4);
    ck_assert(h->cost_per_hour == 2.5);
    ef_free(f);
}
END_TEST

START_TEST(available_capacity_is_coalesced_rate_limited_and_forgotten_on_reconnect)
{
    struct ef *f = ef_new(32, 0);
    struct ef_prof p;
    ef_gpu_profile(&p, 1000);
    struct bf_engine_need n = ef_gpu_need(&p, 100, NULL);
    ef_set(f, "c", &n, 1);
    ef_set(f, "quiet", &n, 1);
    bf_engine_set_cluster_flags(f->e, "c", true, true);
    bf_engine_set_cluster_flags(f->e, "quiet", true, false); /* no session: no hints */
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_ac_hints, 1);
    ck_assert_ptr_nonnull(hint(f, "c"));
    /* unchanged: coalesced */
    f->now_ns += 60LL * 1000000000LL;
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_ac_hints, 0);
    /* changed 60 s after the last emit: emitted */
    add_n(f, "s", 1, BF_STATE_SPECULATIVE, NULL, 0, NULL);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_ac_hints, 1);
    /* changed again 4 s later: held back by the 5 s rate limit */
    add_n(f, "t", 1, BF_STATE_SPECULATIVE, NULL, 0, NULL);
    f->now_ns += 4LL * 1000000000LL;
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_ac_hints, 0);
    f->now_ns += 1LL * 1000000000LL; /* 5 s: allowed */
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_ac_hints, 1);
    ck_assert_int_eq(f->r.ac_hints[0].available_count, 2);
    /* reconnect: forget re-emits the unchanged tuple */
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_ac_hints, 0);
    bf_engine_ac_forget(f->e, "c");
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_ac_hints, 1);
    ef_free(f);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("engine_verdicts");
    TCase *t = tcase_create("taxonomy");
    tcase_add_test(t, satisfied_need_has_no_reason_and_no_supply_summary);
    tcase_add_test(t, no_matching_supply_when_no_machine_of_the_shape_exists);
    tcase_add_test(t, priority_starved_when_matching_supply_is_held_above_us);
    tcase_add_test(t, preemption_exhausted_when_victims_fall_short);
    tcase_add_test(t, topology_unsatisfiable_for_a_same_need_without_a_satisfiable_domain);
    tcase_add_test(t, matching_supply_is_capped_per_state);
    tcase_add_test(t, same_candidates_are_the_top_k_domains_best_first);
    suite_add_tcase(s, t);
    t = tcase_create("ledgers");
    tcase_add_test(t, age_cycles_unmet_follows_the_shortfall_ledger);
    tcase_add_test(t, shortfalls_sum_per_fingerprint_and_sort_by_priority_then_age);
    tcase_add_test(t, shortfall_report_is_cut_to_the_top_100);
    tcase_add_test(t, available_capacity_confidence_ladder_and_cheapest_idle_cost);
    tcase_add_test(t, available_capacity_is_coalesced_rate_limited_and_forgotten_on_reconnect);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_run(suite());
}
