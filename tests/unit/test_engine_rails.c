/*
 * test_engine_rails.c — the actuation rails as pure functions (seeds/000
 * §2.1, ADR-0046; shard.md §6): the reclaim cap keeps the head of the release
 * order per cluster, max-actions defers the tail, the kill switch counts per
 * kind, dry-run records without executing, pause wins over dry-run.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/engine.h"
#include "engine_fixtures.h"
#include "check_run.h"

static uint32_t engine_configured(void *ctx, const char *cluster)
{
    return bf_engine_cluster_configured(ctx, cluster);
}

static void seed(struct ef *f, const char *cluster, int n, int price_step)
{
    char id[48];
    for (int i = 0; i < n; i++) {
        snprintf(id, sizeof id, "%s-%03d", cluster, i);
        struct ef_machine m = ef_configured(id, cluster, 1000, 1, 1);
        m.price = 1.0 + (double)((n - i) * price_step); /* ids run from dear to cheap */
        ef_add(f, &m);
    }
    ef_first_rollup(f, cluster);
    ef_set(f, cluster, NULL, 0);
}

START_TEST(reclaim_cap_keeps_the_head_of_the_release_order)
{
    struct ef *f = ef_new(128, 0);
    seed(f, "c1", 40, 1);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_actions, 40);
    /* the release order is keep-priority order: cheapest first */
    ck_assert_str_eq(f->r.actions[0].machine_id, "c1-039");
    ck_assert_str_eq(f->r.actions[1].machine_id, "c1-038");
    struct bf_engine_action a[64];
    memcpy(a, f->r.actions, f->r.n_actions * sizeof a[0]);
    size_t capped;
    size_t n = bf_engine_rail_reclaim_cap(a, 40, 0.05, engine_configured, f->e, &capped);
    ck_assert_uint_eq(n, 2); /* floor(0.05 * 40) */
    ck_assert_uint_eq(capped, 38);
    ck_assert_str_eq(a[0].machine_id, f->r.actions[0].machine_id);
    ck_assert_str_eq(a[1].machine_id, f->r.actions[1].machine_id);
    ef_free(f);
}
END_TEST

START_TEST(reclaim_cap_is_at_least_one_per_cluster_and_caps_only_reclaims)
{
    struct ef *f = ef_new(128, 0);
    seed(f, "small", 3, 1);
    seed(f, "large", 60, 1);
    struct ef_machine spot = ef_gpu_machine("spot");
    spot.ct = BF_CT_SPOT;
    spot.idle_since = 1;
    ef_add(f, &spot);
    ck_assert_int_eq(ef_cycle(f), 0);
    ck_assert_uint_eq(f->r.n_actions, 64);
    struct bf_engine_action a[80];
    memcpy(a, f->r.actions, f->r.n_actions * sizeof a[0]);
    size_t capped;
    size_t n = bf_engine_rail_reclaim_cap(a, 64, 0.05, engine_configured, f->e, &capped);
    /* large: floor(0.05 * 60) = 3; small: max(1, floor(0.15)) = 1; plus the Delete */
    ck_assert_uint_eq(n, 3 + 1 + 1);
    ck_assert_uint_eq(capped, 59);
    ck_assert_str_eq(a[0].cluster, "large"); /* clusters in id order: large, small */
    ck_assert_str_eq(a[2].cluster, "large");
    ck_assert_str_eq(a[3].cluster, "small");
    ck_assert_str_eq(a[3].machine_id, "small-002"); /* the cheapest of small */
    ck_assert_int_eq(a[4].kind, BF_ACTION_DELETE);
    /* fraction 0 caps nothing */
    memcpy(a, f->r.actions, f->r.n_actions * sizeof a[0]);
    ck_assert_uint_eq(bf_engine_rail_reclaim_cap(a, 64, 0, engine_configured, f->e, &capped), 64);
    ck_assert_uint_eq(capped, 0);
    ef_free(f);
}
END_TEST

static struct bf_engine_action act(uint8_t kind, const char *cluster, const char *id)
{
    struct bf_engine_action a;
    memset(&a, 0, sizeof a);
    a.kind = kind;
    a.cluster = cluster;
    a.machine_id = id;
    return a;
}

static uint32_t ten(void *ctx, const char *cluster)
{
    (void)ctx;
    (void)cluster;
    return 10;
}

START_TEST(max_actions_defers_the_tail)
{
    size_t deferred;
    ck_assert_uint_eq(bf_engine_rail_max_actions(10, 4, &deferred), 4);
    ck_assert_uint_eq(deferred, 6);
    ck_assert_uint_eq(bf_engine_rail_max_actions(3, 4, &deferred), 3);
    ck_assert_uint_eq(deferred, 0);
    ck_assert_uint_eq(bf_engine_rail_max_actions(10, 0, &deferred), 10);
    ck_assert_uint_eq(deferred, 0);
    struct bf_engine_action a[6] = {
        act(BF_ACTION_BOOTSTRAP, "x", "b0"), act(BF_ACTION_PREEMPT, "y", "p0"),
        act(BF_ACTION_RECLAIM, "x", "r0"),   act(BF_ACTION_RECLAIM, "x", "r1"),
        act(BF_ACTION_DELETE, "", "d0"),     act(BF_ACTION_BOOTSTRAP, "x", "b1")};
    struct bf_rails_config rc = {.reclaim_cap_fraction = 0.05, .max_actions = 3};
    struct bf_rails_outcome o;
    bf_engine_rails_apply(&rc, a, 6, ten, NULL, &o);
    /* the cap first (r1 dropped), then the head of the rest */
    ck_assert_uint_eq(o.capped, 1);
    ck_assert_uint_eq(o.n_execute, 3);
    ck_assert_uint_eq(o.deferred, 2);
    ck_assert(o.wake);
    ck_assert_str_eq(a[0].machine_id, "b0");
    ck_assert_str_eq(a[1].machine_id, "p0");
    ck_assert_str_eq(a[2].machine_id, "r0");
    ck_assert_str_eq(a[3].machine_id, "d0");
}
END_TEST

START_TEST(kill_switch_counts_per_kind_and_executes_nothing)
{
    struct bf_engine_action a[5] = {
        act(BF_ACTION_BOOTSTRAP, "x", "b0"), act(BF_ACTION_BOOTSTRAP, "x", "b1"),
        act(BF_ACTION_RECLAIM, "x", "r0"), act(BF_ACTION_RECLAIM, "x", "r1"),
        act(BF_ACTION_DELETE, "", "d0")};
    struct bf_rails_config rc = {
        .actuation_paused = true, .dry_run = true, .reclaim_cap_fraction = 0.05, .max_actions = 1};
    struct bf_rails_outcome o;
    bf_engine_rails_apply(&rc, a, 5, ten, NULL, &o);
    ck_assert_uint_eq(o.n_execute, 0);
    ck_assert_uint_eq(o.suppressed[BF_ACTION_BOOTSTRAP], 2);
    ck_assert_uint_eq(o.suppressed[BF_ACTION_RECLAIM], 2);
    ck_assert_uint_eq(o.suppressed[BF_ACTION_DELETE], 1);
    /* pause wins: nothing counted as dry-run; no cap, no deferral, no wake-up */
    ck_assert_uint_eq(o.dryrun[BF_ACTION_BOOTSTRAP], 0);
    ck_assert_uint_eq(o.capped, 0);
    ck_assert_uint_eq(o.deferred, 0);
    ck_assert(!o.wake);
    ck_assert_str_eq(a[3].machine_id, "r1"); /* the list is left intact */
}
END_TEST

START_TEST(dry_run_records_every_action_without_executing)
{
    struct bf_engine_action a[4] = {
        act(BF_ACTION_PROVISION, "x", "s0"), act(BF_ACTION_PREEMPT, "y", "p0"),
        act(BF_ACTION_RECLAIM, "x", "r0"), act(BF_ACTION_RECLAIM, "x", "r1")};
    struct bf_rails_config rc = {.dry_run = true, .reclaim_cap_fraction = 0.05, .max_actions = 1};
    struct bf_rails_outcome o;
    bf_engine_rails_apply(&rc, a, 4, ten, NULL, &o);
    ck_assert_uint_eq(o.n_execute, 0);
    ck_assert_uint_eq(o.dryrun[BF_ACTION_PROVISION], 1);
    ck_assert_uint_eq(o.dryrun[BF_ACTION_PREEMPT], 1);
    ck_assert_uint_eq(o.dryrun[BF_ACTION_RECLAIM], 2);
    ck_assert_uint_eq(o.suppressed[BF_ACTION_RECLAIM], 0);
    ck_assert_uint_eq(o.capped, 0);
    ck_assert_uint_eq(o.deferred, 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("engine_rails");
    TCase *t = tcase_create("rails");
    tcase_add_test(t, reclaim_cap_keeps_the_head_of_the_release_order);
    tcase_add_test(t, reclaim_cap_is_at_least_one_per_cluster_and_caps_only_reclaims);
    tcase_add_test(t, max_actions_defers_the_tail);
    tcase_add_test(t, kill_switch_counts_per_kind_and_executes_nothing);
    tcase_add_test(t, dry_run_records_every_action_without_executing);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_run(suite());
}
