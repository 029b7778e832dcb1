/*
 * test_replay_supply.c — what bigfleet-replay concludes from the machines
 * bound to a cluster (tools/replay/supply.c, bound.c): shapes learnt from
 * NodeStateUpdates, the attribution of machines to Needs (coverage), the
 * "still demanded" verdict on a reclaimed machine, and the LP lower bound.
 */
#include <math.h>

#include "test_replay.h"
#include "check_run.h"

/* Two GPU classes (LS and Burstable, no pin) and one CPU-only class. */
struct fixture {
    struct rp_trace t;
    struct rp_model m;
    struct rp_shapes s;
    uint32_t ls_gpu, burst_gpu, ls_cpu;
    struct bf_sim_type small, big, cpu;
    uint32_t sh_small, sh_big, sh_cpu;
};

static void fx_init(struct fixture *f)
{
    memset(f, 0, sizeof *f);
    load_trace(&f->t, POD_HEADER "a,1000,1024,1,1000,,LS,Running,0,10,0\n"
                                 "b,1000,1024,1,1000,,Burstable,Running,0,10,0\n"
                                 "c,1000,1024,0,0,,LS,Running,0,10,0\n");
    f->small = mk_type("p100x2", 16000, 122880, 2, "P100", 3.898);
    f->big = mk_type("g2x8", 96000, 393216, 8, "G2", 12.3648);
    f->cpu = mk_type("cpu32", 32000, 65536, 0, "", 1.296);
    static struct bf_sim_type cat[3];
    cat[0] = f->small;
    cat[1] = f->big;
    cat[2] = f->cpu;
    ck_assert_int_eq(rp_model_build(&f->m, &f->t, cat, 3, false), 0);
    f->ls_gpu = f->t.pods[0].cls;
    f->burst_gpu = f->t.pods[1].cls;
    f->ls_cpu = f->t.pods[2].cls;
    f->sh_small = shape_of(&f->s, &f->m, &f->small, "zone-a");
    f->sh_big = shape_of(&f->s, &f->m, &f->big, "zone-a");
    f->sh_cpu = shape_of(&f->s, &f->m, &f->cpu, "zone-a");
}

static void fx_free(struct fixture *f)
{
    rp_shapes_free(&f->s);
    rp_model_free(&f->m);
    rp_trace_free(&f->t);
}

static bool covered(const rp_res *r)
{
    return r->v[0] == 0 && r->v[1] == 0 && r->v[2] == 0;
}

START_TEST(shapes_ignore_zone_and_rack_and_carry_the_catalog_price)
{
    struct fixture f;
    fx_init(&f);
    ck_assert_uint_eq(shape_of(&f.s, &f.m, &f.small, "zone-b"), f.sh_small);
    ck_assert_uint_eq(f.s.n, 3);
    ck_assert_str_eq(f.s.v[f.sh_small].type, "p100x2");
    ck_assert_double_eq_tol(f.s.v[f.sh_small].price, 3.898, 1e-12);
    ck_assert_int_eq(f.s.v[f.sh_small].alloc.v[RP_GPU], 2000);
    /* no instance-type label: inferred from the catalog by its exact shape */
    const char *k[1] = {BF_SIM_LABEL_GPU_MODEL}, *v[1] = {"G2"};
    rp_res a = {{96000, 393216, 8000}};
    int sh = rp_shape_intern(&f.s, &f.m, 1, k, v, &a);
    ck_assert_int_ge(sh, 0);
    ck_assert_str_eq(f.s.v[sh].type, "g2x8");
    ck_assert_double_eq_tol(f.s.v[sh].price, 12.3648, 1e-12);
    /* an unknown shape has no type and no price */
    rp_res odd = {{1000, 1, 0}};
    sh = rp_shape_intern(&f.s, &f.m, 0, NULL, NULL, &odd);
    ck_assert_str_eq(f.s.v[sh].type, "");
    ck_assert_int_eq(f.s.v[sh].catalog, -1);
    fx_free(&f);
}
END_TEST

START_TEST(eligibility_is_requirements_and_min_unit_fit)
{
    struct fixture f;
    fx_init(&f);
    struct rp_need gpu1 = mk_need(f.ls_gpu, 16000, 1024, 1000, 12000, 1024, 1000);
    struct rp_need gpu8 = mk_need(f.ls_gpu, 96000, 1024, 8000, 12000, 1024, 8000);
    struct rp_need cpu = mk_need(f.ls_cpu, 16000, 1024, 0, 16000, 1024, 0);
    ck_assert(rp_need_eligible(&f.s, &f.m, &gpu1, f.sh_small));
    ck_assert(rp_need_eligible(&f.s, &f.m, &gpu1, f.sh_big));
    ck_assert(!rp_need_eligible(&f.s, &f.m, &gpu1, f.sh_cpu)); /* no GPU to cover MinUnit */
    ck_assert(!rp_need_eligible(&f.s, &f.m, &gpu8, f.sh_small));
    ck_assert(rp_need_eligible(&f.s, &f.m, &gpu8, f.sh_big));
    /* CPU-only: nvidia.com/gpu.product DoesNotExist keeps it off GPU machines */
    ck_assert(rp_need_eligible(&f.s, &f.m, &cpu, f.sh_cpu));
    ck_assert(!rp_need_eligible(&f.s, &f.m, &cpu, f.sh_big));
    fx_free(&f);
}
END_TEST

START_TEST(engine_order_serves_priority_first_then_the_cheapest_machines)
{
    struct fixture f;
    fx_init(&f);
    /* the Burstable Need comes first in the rollup, the LS one wins the machine */
    struct rp_need needs[2] = {
        mk_need(f.burst_gpu, 16000, 1024, 2000, 1000, 1024, 1000),
        mk_need(f.ls_gpu, 16000, 1024, 2000, 1000, 1024, 1000),
    };
    struct rp_supply_ent sup[1] = {{f.sh_small, 1, 0}};
    rp_res res[2], cov[2];
    ck_assert_int_eq(rp_attribute(&f.s, &f.m, needs, 2, sup, 1, RP_ORDER_ENGINE, res, cov), 0);
    ck_assert(covered(&res[1]));
    ck_assert(!covered(&res[0]));
    ck_assert_int_eq(res[0].v[RP_CPU], 16000);
    ck_assert_int_eq(cov[1].v[RP_GPU], 2000);
    /* cheapest first: one small machine covers it, the big one stays free */
    struct rp_need one = mk_need(f.ls_gpu, 16000, 1024, 2000, 1000, 1024, 1000);
    struct rp_need two[2] = {one, mk_need(f.burst_gpu, 90000, 1024, 8000, 1000, 1024, 1000)};
    struct rp_supply_ent sup2[2] = {{f.sh_big, 1, 0}, {f.sh_small, 1, 0}};
    ck_assert_int_eq(rp_attribute(&f.s, &f.m, two, 2, sup2, 2, RP_ORDER_ENGINE, res, NULL), 0);
    ck_assert(covered(&res[0]));
    ck_assert(covered(&res[1]));
    /* Configured machines are credited before Configuring ones, whatever the price */
    struct rp_supply_ent sup3[2] = {{f.sh_small, 1, 1}, {f.sh_big, 1, 0}};
    ck_assert_int_eq(rp_attribute(&f.s, &f.m, two, 2, sup3, 2, RP_ORDER_ENGINE, res, NULL), 0);
    ck_assert(covered(&res[0]));  /* LS took the Configured big machine */
    ck_assert(!covered(&res[1])); /* and the Burstable Need is left with the small one */
    fx_free(&f);
}
END_TEST

/* The pair seen replaying openb: a large LS GPU Need (176 CPU, 13 GPUs) that
 * in engine order eats every cheap machine, and a small Burstable GPU Need
 * that fits them. */
static void greedy_trap_needs(const struct fixture *f, struct rp_need out[2])
{
    out[0] = mk_need(f->ls_gpu, 176000, 409600, 13000, 16000, 65536, 1000);
    out[1] = mk_need(f->burst_gpu, 24000, 49152, 2000, 12000, 24576, 1000);
}

START_TEST(best_order_finds_the_cover_the_engine_order_misses)
{
    /* seen replaying openb: the LS Need eats every cheap machine, a small
     * Burstable Need that fits them is left short although a cover exists */
    struct fixture f;
    fx_init(&f);
    struct rp_need needs[2];
    greedy_trap_needs(&f, needs);
    struct rp_supply_ent sup[2] = {{f.sh_small, 10, 0}, {f.sh_big, 1, 0}};
    rp_res res[2];
    ck_assert_int_eq(rp_attribute(&f.s, &f.m, needs, 2, sup, 2, RP_ORDER_ENGINE, res, NULL), 0);
    ck_assert(covered(&res[0]));
    ck_assert(!covered(&res[1]));
    ck_assert_int_eq(rp_attribute(&f.s, &f.m, needs, 2, sup, 2, RP_ORDER_BEST, res, NULL), 0);
    ck_assert(covered(&res[0]));
    ck_assert(covered(&res[1]));
    /* the LP agrees that both are coverable (2 Needs x 3 dimensions) */
    ck_assert_double_eq_tol(rp_max_coverage(&f.s, &f.m, needs, 2, sup, 2, -1), 6.0, 1e-9);
    /* 6 small + 1 big = 192 CPU for 200 wanted: no order covers it, and the
     * LP says so too */
    sup[0].n = 6;
    ck_assert_int_eq(rp_attribute(&f.s, &f.m, needs, 2, sup, 2, RP_ORDER_BEST, res, NULL), 0);
    ck_assert(!covered(&res[0]) || !covered(&res[1]));
    ck_assert_double_lt(rp_max_coverage(&f.s, &f.m, needs, 2, sup, 2, -1), 6.0 - 1e-6);
    fx_free(&f);
}
END_TEST

START_TEST(max_coverage_is_the_fractional_share_per_need_and_dimension)
{
    struct fixture f;
    fx_init(&f);
    /* 32 CPU, 64 GiB, no GPU wanted from one 16-CPU / 120 GiB machine:
     * cpu 1/2 + memory 1 = 1.5 */
    struct rp_need n = mk_need(f.ls_cpu, 32000, 65536, 0, 1000, 1024, 0);
    struct rp_supply_ent sup[1] = {{f.sh_cpu, 0, 0}};
    ck_assert_double_eq_tol(rp_max_coverage(&f.s, &f.m, &n, 1, sup, 1, -1), 0.0, 1e-9);
    sup[0].n = 1;
    struct rp_need half = mk_need(f.ls_cpu, 64000, 32768, 0, 1000, 1024, 0);
    ck_assert_double_eq_tol(rp_max_coverage(&f.s, &f.m, &half, 1, sup, 1, -1), 1.5, 1e-9);
    fx_free(&f);
}
END_TEST

START_TEST(a_reclaimed_machine_is_needed_only_when_its_need_falls_short)
{
    struct fixture f;
    fx_init(&f);
    struct rp_need n = mk_need(f.ls_gpu, 32000, 4096, 4000, 1000, 1024, 1000);
    /* the rest of the supply (without the reclaimed machine) */
    struct rp_supply_ent enough[1] = {{f.sh_small, 2, 0}};
    struct rp_supply_ent short_[1] = {{f.sh_small, 1, 0}};
    ck_assert_int_eq(rp_machine_needed(&f.s, &f.m, &n, 1, enough, 1, f.sh_small), 0);
    ck_assert_int_eq(rp_machine_needed(&f.s, &f.m, &n, 1, short_, 1, f.sh_small), 1);
    /* a machine no Need can use is never "needed", even during a shortage */
    ck_assert_int_eq(rp_machine_needed(&f.s, &f.m, &n, 1, short_, 1, f.sh_cpu), 0);
    /* no demand at all */
    ck_assert_int_eq(rp_machine_needed(&f.s, &f.m, &n, 0, short_, 1, f.sh_small), 0);
    fx_free(&f);
}
END_TEST

START_TEST(claim_order_artifacts_never_make_a_reclaim_look_wrong)
{
    /* engine order without the machine leaves the Burstable Need short, but a
     * cover without it exists: the LP confirmation clears the shard */
    struct fixture f;
    fx_init(&f);
    struct rp_need needs[2];
    greedy_trap_needs(&f, needs);
    struct rp_supply_ent rest[2] = {{f.sh_small, 10, 0}, {f.sh_big, 1, 0}};
    rp_res res[2];
    ck_assert_int_eq(rp_attribute(&f.s, &f.m, needs, 2, rest, 2, RP_ORDER_ENGINE, res, NULL), 0);
    ck_assert(!covered(&res[1]));
    ck_assert_int_eq(rp_machine_needed(&f.s, &f.m, needs, 2, rest, 2, f.sh_small), 0);
    /* but when the rest cannot cover even fractionally, it was needed */
    struct rp_supply_ent less[2] = {{f.sh_small, 6, 0}, {f.sh_big, 1, 0}};
    ck_assert_int_eq(rp_machine_needed(&f.s, &f.m, needs, 2, less, 2, f.sh_small), 1);
    fx_free(&f);
}
END_TEST

START_TEST(simplex_finds_known_optima_and_detects_unbounded)
{
    /* max 3x + 2y  s.t. x + y <= 4, x + 3y <= 6, x <= 3  ->  x=3, y=1, 11 */
    double A[6] = {1, 1, 1, 3, 1, 0}, b[3] = {4, 6, 3}, c[2] = {3, 2}, opt = 0;
    ck_assert_int_eq(rp_simplex_max(3, 2, A, b, c, &opt, NULL), 0);
    ck_assert_double_eq_tol(opt, 11.0, 1e-9);
    /* max x  s.t. -x + y <= 1  ->  unbounded */
    double A2[2] = {-1, 1}, b2[1] = {1}, c2[2] = {1, 0};
    ck_assert_int_eq(rp_simplex_max(1, 2, A2, b2, c2, &opt, NULL), 1);
}
END_TEST

START_TEST(lp_bound_prices_demand_at_the_cheapest_fractional_mix)
{
    struct bf_sim_type t[3] = {
        mk_type("x", 10000, 10240, 0, "", 1.0), /* 10 CPU, 10 GiB */
        mk_type("y", 1000, 102400, 0, "", 1.0), /* 1 CPU, 100 GiB */
        mk_type("g", 8000, 8192, 2, "T4", 4.0),
    };
    uint32_t only_x[1] = {0}, xy[2] = {0, 1}, g[1] = {2};
    rp_res cpu32 = {{32000, 0, 0}};
    ck_assert_double_eq_tol(rp_lp_bound(t, only_x, 1, &cpu32), 3.2, 1e-9);
    /* 10 CPU + 100 GiB: x = y = 10/11 -> 20/11 */
    rp_res mix = {{10000, 102400, 0}};
    ck_assert_double_eq_tol(rp_lp_bound(t, xy, 2, &mix), 20.0 / 11.0, 1e-9);
    /* 3 GPUs from 2-GPU machines at $4: 1.5 machines */
    rp_res gpus = {{0, 0, 3000}};
    ck_assert_double_eq_tol(rp_lp_bound(t, g, 1, &gpus), 6.0, 1e-9);
    /* GPUs from CPU-only types: infeasible */
    ck_assert_double_eq_tol(rp_lp_bound(t, xy, 2, &gpus), -1.0, 1e-12);
    rp_res zero = {{0, 0, 0}};
    ck_assert_double_eq_tol(rp_lp_bound(t, xy, 2, &zero), 0.0, 1e-12);
}
END_TEST

START_TEST(need_types_follow_the_requirements_and_min_unit)
{
    struct bf_sim_type cat[3] = {
        mk_type("cpu-8", 8000, 32768, 0, "", 0.4),
        mk_type("t4-2", 16000, 65536, 2, "T4", 1.5),
        mk_type("v100-8", 96000, 786432, 8, "V100M32", 20.0),
    };
    struct rp_trace t;
    struct rp_model m;
    load_trace(&t, POD_HEADER "a,1000,64,1,1000,T4|V100M32,LS,Running,0,10,0\n"
                              "b,1000,64,0,0,,LS,Running,0,10,0\n");
    ck_assert_int_eq(rp_model_build(&m, &t, cat, 3, false), 0);
    uint32_t idx[3];
    struct rp_need gpu = mk_need(t.pods[0].cls, 1000, 64, 1000, 1000, 64, 1000);
    ck_assert_uint_eq(rp_need_types(&m, &gpu, idx, 3), 2);
    gpu.min_unit.v[RP_GPU] = 4000;
    ck_assert_uint_eq(rp_need_types(&m, &gpu, idx, 3), 1);
    ck_assert_uint_eq(idx[0], 2);
    struct rp_need cpu = mk_need(t.pods[1].cls, 1000, 64, 0, 1000, 64, 0);
    ck_assert_uint_eq(rp_need_types(&m, &cpu, idx, 3), 1);
    ck_assert_uint_eq(idx[0], 0);
    rp_model_free(&m);
    rp_trace_free(&t);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("replay_supply");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, shapes_ignore_zone_and_rack_and_carry_the_catalog_price);
    tcase_add_test(tc, eligibility_is_requirements_and_min_unit_fit);
    tcase_add_test(tc, engine_order_serves_priority_first_then_the_cheapest_machines);
    tcase_add_test(tc, best_order_finds_the_cover_the_engine_order_misses);
    tcase_add_test(tc, max_coverage_is_the_fractional_share_per_need_and_dimension);
    tcase_add_test(tc, a_reclaimed_machine_is_needed_only_when_its_need_falls_short);
    tcase_add_test(tc, claim_order_artifacts_never_make_a_reclaim_look_wrong);
    tcase_add_test(tc, simplex_finds_known_optima_and_detects_unbounded);
    tcase_add_test(tc, lp_bound_prices_demand_at_the_cheapest_fractional_mix);
    tcase_add_test(tc, need_types_follow_the_requirements_and_min_unit);
    suite_add_tcase(s, tc);
    return check_run(s);
}
