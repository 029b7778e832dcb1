/*
 * test_replay_cost.c — where the cost goes (tools/replay/cost.c): the gap
 * between the cost of the bound machines and the lower bound, split into
 * idle capacity inside machines, type premium (fresh / re-used from Idle),
 * unclaimed machines, machines configuring or draining and uncovered
 * demand. Hand-computed cases for each part, and random scenarios in which
 * the parts, each computed on its own, add up to cost - lower bound.
 */
#include <math.h>

#include "test_replay.h"
#include "check_run.h"

/* One CPU-only LS class and one GPU LS class, three catalog types. */
struct fixture {
    struct rp_trace t;
    struct rp_model m;
    struct rp_shapes s;
    struct bf_sim_type cat[4];
    uint32_t cpu_cls, gpu_cls;
    uint32_t sh_cpu, sh_cpu_dear, sh_gpu, sh_big;
};

static void fx_init(struct fixture *f)
{
    memset(f, 0, sizeof *f);
    load_trace(&f->t, POD_HEADER "a,1000,1024,0,0,,LS,Running,0,10,0\n"
                                 "b,1000,1024,1,1000,,LS,Running,0,10,0\n");
    /* 32 cores / 64 GiB at $1.296: $0.0405 per core when CPU binds */
    f->cat[0] = mk_type("cpu32", 32000, 65536, 0, "", 1.296);
    /* the same shape, dearer */
    f->cat[1] = mk_type("cpu32-dear", 32000, 65536, 0, "", 2.0);
    f->cat[2] = mk_type("p100x2", 16000, 122880, 2, "P100", 3.898);
    f->cat[3] = mk_type("g2x8", 96000, 393216, 8, "G2", 12.3648);
    ck_assert_int_eq(rp_model_build(&f->m, &f->t, f->cat, 4, false), 0);
    f->cpu_cls = f->t.pods[0].cls;
    f->gpu_cls = f->t.pods[1].cls;
    f->sh_cpu = shape_of(&f->s, &f->m, &f->cat[0], "zone-a");
    f->sh_cpu_dear = shape_of(&f->s, &f->m, &f->cat[1], "zone-a");
    f->sh_gpu = shape_of(&f->s, &f->m, &f->cat[2], "zone-a");
    f->sh_big = shape_of(&f->s, &f->m, &f->cat[3], "zone-a");
}

static void fx_free(struct fixture *f)
{
    rp_shapes_free(&f->s);
    rp_model_free(&f->m);
    rp_trace_free(&f->t);
}

#define EPS 1e-9

START_TEST(idle_capacity_inside_a_machine_is_priced_at_the_bound_s_dual)
{
    struct fixture f;
    fx_init(&f);
    /* 16 cores, 16 GiB on one 32-core machine: the bound pays half of it */
    struct rp_need n = mk_need(f.cpu_cls, 16000, 16384, 0, 1000, 1024, 0);
    struct rp_supply_ent sup[1] = {{f.sh_cpu, 1, 0}};
    struct rp_cost_split c = {0};
    ck_assert_int_eq(rp_cost_split_add(&f.s, &f.m, &n, 1, sup, 1, NULL, 2.0, 3.0, &c), 0);
    ck_assert_double_eq_tol(c.lower_bound, 0.648, EPS);
    ck_assert_double_eq_tol(c.cost, 1.296 + 2.0 + 3.0, EPS);
    ck_assert_double_eq_tol(c.part[RP_COST_IDLE_INSIDE], 0.648, EPS); /* 16 idle cores */
    ck_assert_double_eq_tol(c.part[RP_COST_TYPE_PREMIUM], 0, EPS);
    ck_assert_double_eq_tol(c.part[RP_COST_IDLE_REUSE], 0, EPS);
    ck_assert_double_eq_tol(c.part[RP_COST_UNCLAIMED], 0, EPS);
    ck_assert_double_eq_tol(c.part[RP_COST_CONFIGURING], 2.0, EPS);
    ck_assert_double_eq_tol(c.part[RP_COST_DRAINING], 3.0, EPS);
    ck_assert_double_eq_tol(c.part[RP_COST_UNCOVERED], 0, EPS);
    ck_assert_double_eq_tol(rp_cost_split_gap(&c), c.cost - c.lower_bound, EPS);
    fx_free(&f);
}
END_TEST

START_TEST(a_dearer_type_is_premium_shared_pro_rata_with_idle_reuse)
{
    struct fixture f;
    fx_init(&f);
    /* 64 cores exactly: two dear machines, one of them bound before */
    struct rp_need n = mk_need(f.cpu_cls, 64000, 65536, 0, 1000, 1024, 0);
    struct rp_supply_ent sup[1] = {{f.sh_cpu_dear, 2, 0}};
    int32_t reused[1] = {1};
    struct rp_cost_split c = {0};
    ck_assert_int_eq(rp_cost_split_add(&f.s, &f.m, &n, 1, sup, 1, reused, 0, 0, &c), 0);
    ck_assert_double_eq_tol(c.lower_bound, 2.592, EPS);
    ck_assert_double_eq_tol(c.cost, 4.0, EPS);
    ck_assert_double_eq_tol(c.part[RP_COST_IDLE_INSIDE], 0, EPS);
    /* each machine costs 2.0 - 1.296 more than the cheapest mix */
    ck_assert_double_eq_tol(c.part[RP_COST_TYPE_PREMIUM], 0.704, EPS);
    ck_assert_double_eq_tol(c.part[RP_COST_IDLE_REUSE], 0.704, EPS);
    ck_assert_double_eq_tol(rp_cost_split_gap(&c), c.cost - c.lower_bound, EPS);
    fx_free(&f);
}
END_TEST

START_TEST(uncovered_demand_and_unclaimed_machines_are_parts_of_their_own)
{
    struct fixture f;
    fx_init(&f);
    /* 64 cores wanted, one 32-core machine bound; a GPU machine nobody claims */
    struct rp_need n = mk_need(f.cpu_cls, 64000, 65536, 0, 1000, 1024, 0);
    struct rp_supply_ent sup[2] = {{f.sh_cpu, 1, 0}, {f.sh_gpu, 1, 0}};
    struct rp_cost_split c = {0};
    ck_assert_int_eq(rp_cost_split_add(&f.s, &f.m, &n, 1, sup, 2, NULL, 0, 0, &c), 0);
    ck_assert_double_eq_tol(c.lower_bound, 2.592, EPS);
    ck_assert_double_eq_tol(c.cost, 1.296 + 3.898, EPS);
    ck_assert_double_eq_tol(c.part[RP_COST_UNCOVERED], -1.296, EPS);
    ck_assert_double_eq_tol(c.part[RP_COST_UNCLAIMED], 3.898, EPS);
    ck_assert_double_eq_tol(rp_cost_split_gap(&c), c.cost - c.lower_bound, EPS);
    /* no Need at all: every Configured machine is unclaimed */
    struct rp_cost_split e = {0};
    ck_assert_int_eq(rp_cost_split_add(&f.s, &f.m, NULL, 0, sup, 2, NULL, 1.0, 0, &e), 0);
    ck_assert_double_eq_tol(e.part[RP_COST_UNCLAIMED], 1.296 + 3.898, EPS);
    ck_assert_double_eq_tol(e.lower_bound, 0, EPS);
    ck_assert_double_eq_tol(rp_cost_split_gap(&e), e.cost, EPS);
    fx_free(&f);
}
END_TEST

static uint64_t rng = 88172645463325252ULL;
static uint64_t rnd(uint64_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng % n;
}

START_TEST(parts_add_up_to_the_gap_in_random_scenarios)
{
    struct fixture f;
    fx_init(&f);
    uint32_t shapes[4] = {f.sh_cpu, f.sh_cpu_dear, f.sh_gpu, f.sh_big};
    for (int it = 0; it < 500; it++) {
        struct rp_need needs[2];
        size_t nn = 0;
        if (rnd(4)) /* CPU-only demand */
            needs[nn++] =
                mk_need(f.cpu_cls, 1000 + (int64_t)rnd(200000), 1024 + (int64_t)rnd(400000), 0,
                        1000 + (int64_t)rnd(8000), 1024 + (int64_t)rnd(8192), 0);
        if (rnd(4)) /* GPU demand, fractional GPUs included */
            needs[nn++] =
                mk_need(f.gpu_cls, 1000 + (int64_t)rnd(100000), 1024 + (int64_t)rnd(300000),
                        100 + (int64_t)rnd(20000), 1000 + (int64_t)rnd(8000),
                        1024 + (int64_t)rnd(30000), 100 + (int64_t)rnd(1900));
        struct rp_supply_ent sup[4];
        int32_t reused[4];
        size_t ns = 0;
        for (int j = 0; j < 4; j++) {
            int32_t cnt = (int32_t)rnd(6);
            if (!cnt)
                continue;
            reused[ns] = (int32_t)rnd((uint64_t)cnt + 1);
            sup[ns++] = (struct rp_supply_ent){shapes[j], cnt, 0};
        }
        double cing = (double)rnd(1000) / 100, drain = (double)rnd(1000) / 100;
        struct rp_cost_split c = {0};
        ck_assert_int_eq(rp_cost_split_add(&f.s, &f.m, needs, nn, sup, ns, reused, cing, drain, &c),
                         0);
        double gap = c.cost - c.lower_bound;
        ck_assert_msg(fabs(rp_cost_split_gap(&c) - gap) <= 1e-7 * fmax(1, c.cost),
                      "scenario %d: parts %.9f, gap %.9f", it, rp_cost_split_gap(&c), gap);
        /* the signs the definitions promise */
        ck_assert(c.part[RP_COST_IDLE_INSIDE] >= -1e-9);
        ck_assert(c.part[RP_COST_TYPE_PREMIUM] >= -1e-9);
        ck_assert(c.part[RP_COST_IDLE_REUSE] >= -1e-9);
        ck_assert(c.part[RP_COST_UNCLAIMED] >= -1e-9);
        ck_assert(c.part[RP_COST_UNCOVERED] <= 1e-9);
        /* the bound is the LP bound of each Need */
        double lb = 0;
        uint32_t idx[4];
        for (size_t i = 0; i < nn; i++) {
            size_t nt = rp_need_types(&f.m, &needs[i], idx, 4);
            double b = rp_lp_bound(f.m.types, idx, nt, &needs[i].agg);
            lb += b > 0 ? b : 0;
        }
        ck_assert_double_eq_tol(c.lower_bound, lb, 1e-7 * fmax(1, lb));
    }
    fx_free(&f);
}
END_TEST

START_TEST(lp_dual_prices_the_aggregate_at_the_bound)
{
    struct fixture f;
    fx_init(&f);
    uint32_t idx[4];
    struct rp_need n = mk_need(f.gpu_cls, 40000, 300000, 9000, 1000, 1024, 1000);
    size_t nt = rp_need_types(&f.m, &n, idx, 4);
    double y[RP_DIMS];
    double b = rp_lp_bound_dual(f.m.types, idx, nt, &n.agg, y);
    ck_assert(b > 0);
    ck_assert_double_eq_tol(y[RP_CPU] * 40 + y[RP_MEM] * 300000.0 / 1024 + y[RP_GPU] * 9, b, 1e-9);
    /* dual feasibility: no eligible type is cheaper than its value at y */
    for (size_t k = 0; k < nt; k++) {
        const struct bf_sim_type *t = &f.m.types[idx[k]];
        ck_assert(y[RP_CPU] * t->cpu_milli / 1000.0 + y[RP_MEM] * t->memory_mib / 1024.0 +
                      y[RP_GPU] * t->gpus <=
                  t->price_per_hour + 1e-9);
    }
    fx_free(&f);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("replay_cost");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, idle_capacity_inside_a_machine_is_priced_at_the_bound_s_dual);
    tcase_add_test(tc, a_dearer_type_is_premium_shared_pro_rata_with_idle_reuse);
    tcase_add_test(tc, uncovered_demand_and_unclaimed_machines_are_parts_of_their_own);
    tcase_add_test(tc, parts_add_up_to_the_gap_in_random_scenarios);
    tcase_add_test(tc, lp_dual_prices_the_aggregate_at_the_bound);
    suite_add_tcase(s, tc);
    return check_run(s);
}
