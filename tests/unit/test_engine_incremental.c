/*
 * test_engine_incremental.c — the incremental credit pre-pass (docs/engine.md
 * §4, src/cycle/engine/credit.c and same.c), case by case: for each input a
 * kept outcome depends on, a cycle that changes only that input, run on the
 * default engine and on one with BF_ENGINE_F_NO_INCREMENTAL fed the same
 * inputs. The two must decide identically (actions, verdicts with their
 * candidates, owner of every claimed machine), and the pre-pass counters show
 * which outcomes were kept, re-ranked or derived — so each test also proves
 * that the input was noticed (and that what did not change was kept).
 * test_engine_random.c runs the same comparison under randomized churn.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/engine.h"
#include "engine_fixtures.h"
#include "check_run.h"

struct pair {
    struct ef *inc, *full;
};

static struct pair pair_new(void)
{
    struct pair p = {ef_new(256, 0), ef_new(256, BF_ENGINE_F_NO_INCREMENTAL)};
    return p;
}

static void pair_free(struct pair *p)
{
    ef_free(p->inc);
    ef_free(p->full);
}

static uint32_t pair_add(struct pair *p, const struct ef_machine *m)
{
    uint32_t s = ef_add(p->inc, m);
    ck_assert_uint_eq(ef_add(p->full, m), s);
    return s;
}

/* replaces slot s in both (the caller edited p->inc->m[s]) */
static void pair_sync(struct pair *p, uint32_t s)
{
    p->full->m[s] = p->inc->m[s];
    ef_sync(p->inc, s);
    ef_sync(p->full, s);
}

static void pair_set(struct pair *p, const char *cluster, const struct bf_engine_need *n, size_t k)
{
    ck_assert_int_eq(ef_set(p->inc, cluster, n, k), 0);
    ck_assert_int_eq(ef_set(p->full, cluster, n, k), 0);
}

/* one cycle of both; they must agree */
static const struct bf_engine_result *pair_cycle(struct pair *p)
{
    ck_assert_int_eq(ef_cycle(p->inc), 0);
    ck_assert_int_eq(ef_cycle(p->full), 0);
    const struct bf_engine_result *a = &p->inc->r, *b = &p->full->r;
    ck_assert_uint_eq(a->n_actions, b->n_actions);
    for (size_t i = 0; i < a->n_actions; i++) {
        ck_assert_int_eq(a->actions[i].kind, b->actions[i].kind);
        ck_assert_uint_eq(a->actions[i].slot, b->actions[i].slot);
        ck_assert_uint_eq(a->actions[i].need, b->actions[i].need);
    }
    ck_assert_uint_eq(a->n_verdicts, b->n_verdicts);
    for (size_t i = 0; i < a->n_verdicts; i++) {
        const struct bf_engine_verdict *x = &a->verdicts[i], *y = &b->verdicts[i];
        ck_assert_uint_eq(x->index, y->index);
        ck_assert_uint_eq(x->claimed_count, y->claimed_count);
        ck_assert(bf_vec_eq(&x->residual_deficit, &y->residual_deficit));
        ck_assert_str_eq(x->same_domain, y->same_domain);
        ck_assert_int_eq(x->same_satisfiable, y->same_satisfiable);
        ck_assert_uint_eq(x->n_same_candidates, y->n_same_candidates);
        for (uint32_t k = 0; k < x->n_same_candidates; k++) {
            ck_assert_str_eq(x->same_candidates[k].domain, y->same_candidates[k].domain);
            ck_assert_int_eq(x->same_candidates[k].coverage_per_mille,
                             y->same_candidates[k].coverage_per_mille);
        }
    }
    for (uint32_t s = 0; s < p->inc->next; s++) {
        uint32_t oa = UINT32_MAX, ob = UINT32_MAX;
        ck_assert_int_eq(bf_engine_claimed(p->inc->e, s, &oa),
                         bf_engine_claimed(p->full->e, s, &ob));
        ck_assert_uint_eq(oa, ob);
    }
    ck_assert_uint_eq(a->prepass.kept + a->prepass.reranked + a->prepass.derived, a->n_needs);
    ck_assert_uint_eq(b->prepass.derived, b->n_needs);
    return a;
}

static struct ef_machine gpu_in_rack(const char *id, const char *rack)
{
    struct ef_machine m = ef_gpu_machine(id);
    ef_label(&m, "rack", rack);
    return m;
}

static const struct bf_engine_verdict *verdict_of(const struct ef *f, const char *cluster)
{
    return ef_verdict(f, cluster, 0);
}

/* ------------------------------------------------------------------ */

/* nothing changed: every outcome is kept, and the decisions stay */
START_TEST(a_cycle_without_changes_keeps_every_outcome)
{
    struct pair p = pair_new();
    struct ef_prof plain, same;
    ef_gpu_profile(&plain, 1000);
    ef_gpu_profile_same(&same, 500, "rack");
    for (int i = 0; i < 3; i++) {
        char id[16];
        snprintf(id, sizeof id, "cfg-%d", i);
        struct ef_machine m = gpu_in_rack(id, "r1");
        ef_bind(&m, "a", &plain, NULL);
        pair_add(&p, &m);
    }
    for (int i = 0; i < 4; i++) {
        char id[16];
        snprintf(id, sizeof id, "idle-%d", i);
        struct ef_machine m = gpu_in_rack(id, i < 2 ? "r1" : "r2");
        pair_add(&p, &m);
    }
    struct bf_engine_need na[1] = {ef_gpu_need(&plain, 3, NULL)};
    struct bf_engine_need nb[1] = {ef_gpu_need(&same, 2, "gang-b")};
    pair_set(&p, "a", na, 1);
    pair_set(&p, "b", nb, 1);
    const struct bf_engine_result *r = pair_cycle(&p);
    ck_assert_uint_eq(r->prepass.derived, 2);
    for (int c = 0; c < 3; c++) {
        r = pair_cycle(&p);
        ck_assert_uint_eq(r->prepass.kept, 2);
        ck_assert_uint_eq(r->prepass.derived, 0);
    }
    ck_assert_uint_eq(verdict_of(p.inc, "a")->claimed_count, 3);
    pair_free(&p);
}
END_TEST

/* a Configured machine leaving cluster a: a's outcome is derived again, b's
 * is kept */
START_TEST(a_change_to_one_clusters_machines_derives_only_that_cluster)
{
    struct pair p = pair_new();
    struct ef_prof prof;
    ef_gpu_profile(&prof, 1000);
    uint32_t first = UINT32_MAX;
    for (int i = 0; i < 4; i++) {
        char id[16];
        snprintf(id, sizeof id, "cfg-%d", i);
        struct ef_machine m = ef_gpu_machine(id);
        ef_bind(&m, i < 2 ? "a" : "b", &prof, NULL);
        uint32_t s = pair_add(&p, &m);
        if (i == 0)
            first = s;
    }
    struct bf_engine_need n[1] = {ef_gpu_need(&prof, 2, NULL)};
    pair_set(&p, "a", n, 1);
    pair_set(&p, "b", n, 1);
    pair_cycle(&p);
    pair_cycle(&p);
    p.inc->m[first].state = BF_STATE_IDLE;
    p.inc->m[first].cluster[0] = 0;
    pair_sync(&p, first);
    const struct bf_engine_result *r = pair_cycle(&p);
    ck_assert_uint_eq(r->prepass.derived, 1);
    ck_assert_uint_eq(r->prepass.kept, 1);
    /* one credited, and the machine that left is bootstrapped back */
    ck_assert_uint_eq(verdict_of(p.inc, "a")->claimed_count, 2);
    ck_assert_uint_eq(verdict_of(p.inc, "a")->bootstrap_count, 1);
    pair_free(&p);
}
END_TEST

/*
 * Cluster a's gang (higher priority) has no machines of its own and
 * virtually consumes rack r1's Idle machines; cluster b's gang ranks the
 * racks after it. When a's gang grows from 2 to 3 machines it consumes one
 * more of the same machines (same leaf, larger count): b's gang must see r1
 * with one machine fewer (its candidate coverage drops from 500 to 250) —
 * re-ranked, although nothing about b and no machine changed.
 */
START_TEST(a_same_need_is_re_ranked_when_an_earlier_one_consumes_more_of_the_same_machines)
{
    struct pair p = pair_new();
    struct ef_prof hi, lo;
    ef_gpu_profile_same(&hi, 2000, "rack");
    ef_gpu_profile_same(&lo, 1000, "rack");
    for (int i = 0; i < 12; i++) {
        char id[16];
        snprintf(id, sizeof id, "idle-%02d", i);
        struct ef_machine m = gpu_in_rack(id, i < 4 ? "r1" : "r2");
        pair_add(&p, &m);
    }
    struct bf_engine_need na[1] = {ef_gpu_need(&hi, 2, "gang-a")};
    struct bf_engine_need nb[1] = {ef_gpu_need(&lo, 4, "gang-b")};
    pair_set(&p, "a", na, 1);
    pair_set(&p, "b", nb, 1);
    pair_cycle(&p);
    const struct bf_engine_result *r = pair_cycle(&p);
    ck_assert_uint_eq(r->prepass.kept, 2);
    const struct bf_engine_verdict *v = verdict_of(p.inc, "b");
    ck_assert_uint_eq(v->n_same_candidates, 2);
    ck_assert_str_eq(v->same_candidates[1].domain, "r1");
    ck_assert_int_eq(v->same_candidates[1].coverage_per_mille, 500);
    na[0] = ef_gpu_need(&hi, 3, "gang-a");
    pair_set(&p, "a", na, 1);
    r = pair_cycle(&p);
    ck_assert_uint_eq(r->prepass.derived, 1);  /* a: its rollup changed */
    ck_assert_uint_eq(r->prepass.reranked, 1); /* b: the consumption it saw */
    v = verdict_of(p.inc, "b");
    ck_assert_str_eq(v->same_candidates[1].domain, "r1");
    ck_assert_int_eq(v->same_candidates[1].coverage_per_mille, 250);
    pair_free(&p);
}
END_TEST

/* an Idle machine arriving in rack r3 moves b's candidates (acquirable
 * supply) without moving its domain: re-ranked, its claims kept */
START_TEST(an_acquirable_supply_change_re_ranks_a_same_need_and_keeps_its_claims)
{
    struct pair p = pair_new();
    struct ef_prof same;
    ef_gpu_profile_same(&same, 1000, "rack");
    for (int i = 0; i < 2; i++) {
        char id[16];
        snprintf(id, sizeof id, "own-%d", i);
        struct ef_machine m = gpu_in_rack(id, "r1");
        ef_bind(&m, "b", &same, "gang-b");
        pair_add(&p, &m);
    }
    struct ef_machine m = gpu_in_rack("idle-r2", "r2");
    pair_add(&p, &m);
    struct bf_engine_need nb[1] = {ef_gpu_need(&same, 2, "gang-b")};
    pair_set(&p, "b", nb, 1);
    pair_cycle(&p);
    const struct bf_engine_result *r = pair_cycle(&p);
    ck_assert_uint_eq(r->prepass.kept, 1);
    ck_assert_uint_eq(verdict_of(p.inc, "b")->n_same_candidates, 2);
    m = gpu_in_rack("idle-r3", "r3");
    pair_add(&p, &m);
    r = pair_cycle(&p);
    ck_assert_uint_eq(r->prepass.reranked, 1);
    const struct bf_engine_verdict *v = verdict_of(p.inc, "b");
    ck_assert_str_eq(v->same_domain, "r1");
    ck_assert_uint_eq(v->claimed_count, 2);
    ck_assert_uint_eq(v->n_same_candidates, 3);
    pair_free(&p);
}
END_TEST

/* Same Needs re-ranked cycle after cycle while acquirable racks come and go:
 * their candidate lists grow and shrink and their riders consume again, and
 * the re-ranked outcomes (recorded over the old ones where they fit) decide
 * as the full derivation every cycle */
START_TEST(same_needs_re_ranked_every_cycle_as_racks_come_and_go_decide_as_the_full_derivation)
{
    struct pair p = pair_new();
    struct ef_prof same;
    ef_gpu_profile_same(&same, 1000, "rack");
    for (int i = 0; i < 2; i++) {
        char id[16];
        snprintf(id, sizeof id, "own-%d", i);
        struct ef_machine m = gpu_in_rack(id, "r1");
        ef_bind(&m, "b", &same, "gang-b");
        pair_add(&p, &m);
    }
    for (int i = 0; i < 2; i++) {
        char id[16];
        snprintf(id, sizeof id, "idle-r1-%d", i);
        struct ef_machine m = gpu_in_rack(id, "r1");
        pair_add(&p, &m);
    }
    /* gang-b: 3 GPUs, 2 credited on r1, the rest consumed from r1's Idle;
     * gang-c (another cluster) ranks over what gang-b left */
    struct bf_engine_need nb[1] = {ef_gpu_need(&same, 3, "gang-b")};
    struct bf_engine_need nc[1] = {ef_gpu_need(&same, 2, "gang-c")};
    pair_set(&p, "b", nb, 1);
    pair_set(&p, "c", nc, 1);
    pair_cycle(&p);
    uint32_t slots[8], n = 0, reranked = 0, grew = 0, shrank = 0;
    uint32_t last = verdict_of(p.inc, "b")->n_same_candidates;
    for (int cyc = 0; cyc < 16; cyc++) {
        if (n < 4 && (cyc % 3 != 2 || n == 0)) {
            char id[16], rack[8];
            snprintf(id, sizeof id, "idle-x%d", cyc);
            snprintf(rack, sizeof rack, "r%d", 2 + cyc % 5);
            struct ef_machine m = gpu_in_rack(id, rack);
            slots[n++] = pair_add(&p, &m);
        } else {
            uint32_t s = slots[--n];
            ef_del(p.inc, s);
            ef_del(p.full, s);
        }
        const struct bf_engine_result *r = pair_cycle(&p);
        reranked += r->prepass.reranked;
        uint32_t k = verdict_of(p.inc, "b")->n_same_candidates;
        grew += k > last;
        shrank += k < last;
        last = k;
        ck_assert_str_eq(verdict_of(p.inc, "b")->same_domain, "r1");
    }
    ck_assert_uint_gt(reranked, 16);
    ck_assert_uint_gt(grew, 0);
    ck_assert_uint_gt(shrank, 0);
    pair_free(&p);
}
END_TEST

/* a plain Need short after its own cluster's machines read its fingerprint's
 * (empty) Creating list; a Creating machine of that fingerprint appearing
 * makes it derived again, and it is credited that machine */
START_TEST(a_kept_need_is_derived_when_creating_machines_of_its_fingerprint_appear)
{
    struct pair p = pair_new();
    struct ef_prof prof;
    ef_gpu_profile(&prof, 1000);
    struct ef_machine m = ef_gpu_machine("cfg-0");
    ef_bind(&m, "a", &prof, NULL);
    pair_add(&p, &m);
    struct bf_engine_need n[1] = {ef_gpu_need(&prof, 3, NULL)};
    pair_set(&p, "a", n, 1);
    pair_cycle(&p);
    const struct bf_engine_result *r = pair_cycle(&p);
    ck_assert_uint_eq(r->prepass.kept, 1);
    ck_assert_uint_eq(verdict_of(p.inc, "a")->claimed_count, 1);
    m = ef_gpu_machine("creating-0");
    m.state = BF_STATE_CREATING;
    snprintf(m.fp, sizeof m.fp, "%s", ef_fp(&prof));
    uint32_t s = pair_add(&p, &m);
    r = pair_cycle(&p);
    ck_assert_uint_eq(r->prepass.derived, 1);
    ck_assert_uint_eq(verdict_of(p.inc, "a")->claimed_count, 2);
    /* while Creating machines of the fingerprint exist, every cycle derives it
     * (they are credited to any cluster demanding the fingerprint) */
    r = pair_cycle(&p);
    ck_assert_uint_eq(r->prepass.derived, 1);
    p.inc->m[s].state = BF_STATE_IDLE;
    p.inc->m[s].fp[0] = 0;
    pair_sync(&p, s);
    pair_cycle(&p);
    r = pair_cycle(&p);
    ck_assert_uint_eq(r->prepass.kept, 1);
    pair_free(&p);
}
END_TEST

/* cluster a's gang and its plain Need read the same list: when the gang's
 * outcome changes (its rack r1 stops being satisfiable, so it moves to r2 and
 * no longer takes a's r1 machine), the plain Need, whose own inputs are
 * unchanged, must be derived too (the claims before it diverged) and is
 * credited the machine the gang left */
START_TEST(a_need_after_a_changed_outcome_in_its_cluster_is_derived)
{
    struct pair p = pair_new();
    struct ef_prof gang, plain;
    ef_gpu_profile_same(&gang, 2000, "rack");
    ef_gpu_profile(&plain, 500);
    struct ef_machine m = gpu_in_rack("cfg-r1", "r1");
    ef_bind(&m, "a", &plain, NULL);
    pair_add(&p, &m);
    m = gpu_in_rack("idle-r1", "r1");
    uint32_t idle = pair_add(&p, &m);
    struct bf_engine_need n[2] = {ef_gpu_need(&gang, 2, "gang-a"), ef_gpu_need(&plain, 1, NULL)};
    pair_set(&p, "a", n, 2);
    pair_cycle(&p);
    const struct bf_engine_result *r = pair_cycle(&p);
    ck_assert_uint_eq(r->prepass.kept, 2);
    /* the gang: cfg-r1 credited, idle-r1 bootstrapped; the plain Need: none */
    ck_assert_str_eq(ef_verdict(p.inc, "a", 0)->same_domain, "r1");
    ck_assert_uint_eq(ef_verdict(p.inc, "a", 0)->claimed_count, 2);
    ck_assert_uint_eq(ef_verdict(p.inc, "a", 0)->bootstrap_count, 1);
    ck_assert_uint_eq(ef_verdict(p.inc, "a", 1)->claimed_count, 0);
    /* r1 loses its Idle machine, r2 gets three */
    p.inc->m[idle].used = false;
    pair_sync(&p, idle);
    for (int i = 0; i < 3; i++) {
        char id[16];
        snprintf(id, sizeof id, "idle-r2-%d", i);
        m = gpu_in_rack(id, "r2");
        pair_add(&p, &m);
    }
    r = pair_cycle(&p);
    ck_assert_uint_eq(r->prepass.derived, 2);
    ck_assert_str_eq(ef_verdict(p.inc, "a", 0)->same_domain, "r2");
    ck_assert_uint_eq(ef_verdict(p.inc, "a", 0)->bootstrap_count, 2);
    ck_assert_uint_eq(ef_verdict(p.inc, "a", 0)->claimed_count, 2);
    ck_assert_uint_eq(ef_verdict(p.inc, "a", 1)->claimed_count, 1); /* cfg-r1, left by the gang */
    pair_free(&p);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("engine_incremental");
    TCase *t = tcase_create("incremental");
    tcase_add_test(t, a_cycle_without_changes_keeps_every_outcome);
    tcase_add_test(t, a_change_to_one_clusters_machines_derives_only_that_cluster);
    tcase_add_test(t,
                   a_same_need_is_re_ranked_when_an_earlier_one_consumes_more_of_the_same_machines);
    tcase_add_test(t, an_acquirable_supply_change_re_ranks_a_same_need_and_keeps_its_claims);
    tcase_add_test(
        t, same_needs_re_ranked_every_cycle_as_racks_come_and_go_decide_as_the_full_derivation);
    tcase_add_test(t, a_kept_need_is_derived_when_creating_machines_of_its_fingerprint_appear);
    tcase_add_test(t, a_need_after_a_changed_outcome_in_its_cluster_is_derived);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_run(suite());
}
