/*
 * test_replay_engine.c — bigfleet-replay's judgement of the shard held
 * against the shard's own decision engine (libbfengine), on random
 * scenarios built from random pods, the replay's mapping and a small
 * catalog: one cluster, its rollup, and Configured machines bound to it.
 *
 * Proves the two claims docs/replay.md makes about the emulator's view:
 *   - the engine-order attribution (RP_ORDER_ENGINE) mirrors the engine's
 *     credit pre-pass: a Need it covers is one the engine calls satisfied
 *     and vice versa;
 *   - the reclaim verdict has no false positives: no machine the engine's
 *     Phase 3 reclaims (in the order the shard would send them) is judged
 *     "still demanded", and the best-of coverage (RP_ORDER_BEST) is never
 *     below the engine's.
 */
#include "bigfleet/engine.h"
#include "test_replay.h"
#include "check_run.h"

#define N_TYPES 5
static struct bf_sim_type cat[N_TYPES];
static struct bf_dims dims;

static uint64_t rng;
static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

static void setup(void)
{
    cat[0] = mk_type("cpu-8", 8000, 32768, 0, "", 0.4);
    cat[1] = mk_type("cpu-64", 64000, 262144, 0, "", 3.0);
    cat[2] = mk_type("t4-2", 16000, 65536, 2, "T4", 1.5);
    cat[3] = mk_type("p100-4", 32000, 131072, 4, "P100", 6.0);
    cat[4] = mk_type("v100-8", 96000, 786432, 8, "V100M32", 20.0);
    memset(&dims, 0, sizeof dims);
    bf_dims_intern(&dims, "cpu");
    bf_dims_intern(&dims, "memory");
    bf_dims_intern(&dims, "nvidia.com/gpu");
}

/* A random pod list: CPU-only, sharing, whole-GPU pods; some with gpu_spec. */
static char *random_trace(void)
{
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap);
    len += (size_t)snprintf(b + len, cap - len, "%s", POD_HEADER);
    static const char *qos[] = {"BE", "Burstable", "LS", "Guaranteed"};
    static const char *specs[] = {"", "", "T4", "P100|V100M32", "T4|P100"};
    for (int i = 0; i < 40; i++) {
        int kind = (int)rnd(10), ngpu = 0, gm = 0;
        const char *spec = "";
        long cpu, mem;
        if (kind < 4) {
            cpu = 500 + rnd(40000);
            mem = 512 + rnd(200000);
        } else {
            cpu = 500 + rnd(12000);
            mem = 512 + rnd(60000);
            ngpu = kind < 8 ? 1 : (int[]){2, 4, 8}[rnd(3)];
            gm = ngpu == 1 ? 100 + (int)rnd(901) : 1000;
            spec = specs[rnd(5)];
            if (ngpu == 8)
                spec = ""; /* only v100-8 has 8 GPUs */
        }
        long c0 = rnd(100), d0 = c0 + 1 + rnd(100);
        len += (size_t)snprintf(b + len, cap - len, "p%d,%ld,%ld,%d,%d,%s,%s,Running,%ld,%ld,%ld\n",
                                i, cpu, mem, ngpu, gm, spec, qos[rnd(4)], c0, d0, c0);
    }
    return b;
}

static bf_vec to_vec(const rp_res *r)
{
    bf_vec v;
    bf_vec_zero(&v);
    v.v[0] = r->v[RP_CPU];
    v.v[1] = r->v[RP_MEM] * 1048576LL * 1000LL;
    v.v[2] = r->v[RP_GPU];
    return v;
}

static bool res_zero(const rp_res *r)
{
    return r->v[0] == 0 && r->v[1] == 0 && r->v[2] == 0;
}

START_TEST(replay_view_agrees_with_the_engine_and_never_blames_its_reclaims)
{
    setup();
    rng = 0x9e3779b97f4a7c15ULL ^ (uint64_t)_i;
    unsigned agreed = 0, reclaims_checked = 0;
    for (int scenario = 0; scenario < 40; scenario++) {
        char *csv = random_trace();
        struct rp_trace t;
        struct rp_model m;
        load_trace(&t, csv);
        free(csv);
        bool pin = rnd(2);
        ck_assert_int_eq(rp_model_build(&m, &t, cat, N_TYPES, pin), 0);
        /* the rollup at a random trace time */
        int64_t tau = rnd(150);
        uint32_t alive[64];
        size_t na = 0;
        for (size_t p = 0; p < t.n_pods; p++)
            if (rp_pod_alive(&t, &t.pods[p], tau))
                alive[na++] = (uint32_t)p;
        struct rp_need needs[64];
        size_t nn = rp_aggregate(&m, alive, na, needs);
        /* Configured machines: for each Need, a random share of what it
         * wants of random eligible types, plus a few strays */
        struct rp_shapes sh = {0};
        uint32_t type_shape[N_TYPES];
        for (int k = 0; k < N_TYPES; k++)
            type_shape[k] = shape_of(&sh, &m, &cat[k], "zone-a");
        int counts[N_TYPES] = {0};
        for (size_t i = 0; i < nn; i++) {
            uint32_t idx[N_TYPES];
            size_t ne = rp_need_types(&m, &needs[i], idx, N_TYPES);
            if (!ne)
                continue;
            int want = 1 + (int)rnd(4);
            for (int j = 0; j < want; j++)
                counts[idx[rnd((uint32_t)ne)]]++;
        }
        for (int j = 0; j < 2; j++)
            counts[rnd(N_TYPES)]++;
        /* the engine: the same machines and the same demand */
        struct bf_engine_config ec;
        bf_engine_config_defaults(&ec);
        ec.capacity = 4096;
        ec.dims = &dims;
        struct bf_engine *e;
        ck_assert_int_eq(bf_engine_new(&ec, &e), 0);
        uint32_t slot = 0;
        uint32_t slot_type[4096];
        char ids[256][32];
        for (int k = 0; k < N_TYPES; k++) {
            for (int c = 0; c < counts[k]; c++) {
                ck_assert_uint_lt(slot, 256);
                struct bf_engine_label lab[1] = {{BF_SIM_LABEL_GPU_MODEL, cat[k].gpu_model}};
                snprintf(ids[slot], sizeof ids[slot], "m-%03u", slot);
                rp_res a = {{cat[k].cpu_milli, cat[k].memory_mib, (int64_t)cat[k].gpus * 1000}};
                struct bf_engine_machine mm = {
                    .id = ids[slot],
                    .state = BF_STATE_CONFIGURED,
                    .capacity_type = BF_CT_ON_DEMAND,
                    .instance_type = cat[k].name,
                    .zone = "zone-a",
                    .n_labels = cat[k].gpus ? 1 : 0,
                    .labels = lab,
                    .allocatable = to_vec(&a),
                    .cluster = "c",
                    .price_per_hour = cat[k].price_per_hour,
                    .assigned_priority = 100,
                    .assigned_ipb = 4,
                    .assigned_rpb = 5,
                };
                ck_assert_int_eq(bf_engine_upsert(e, slot, &mm), 0);
                slot_type[slot++] = (uint32_t)k;
            }
        }
        struct bf_engine_need en[64];
        for (size_t i = 0; i < nn; i++) {
            memset(&en[i], 0, sizeof en[i]);
            en[i].profile = m.classes[needs[i].cls].prof;
            en[i].aggregate = to_vec(&needs[i].agg);
            en[i].min_unit = to_vec(&needs[i].min_unit);
            en[i].arrival_ns = 1;
        }
        ck_assert_int_eq(bf_engine_set_needs(e, "c", 1, en, nn), 0);
        ck_assert_int_eq(bf_engine_set_cluster_flags(e, "c", true, true), 0);
        struct bf_engine_result res;
        ck_assert_int_eq(bf_engine_cycle(e, 1700000000LL * 1000000000LL, &res), 0);

        /* 1. coverage per Need: the replay's engine order == the engine's verdict */
        struct rp_supply_ent sup[N_TYPES];
        size_t ns = 0;
        for (int k = 0; k < N_TYPES; k++)
            if (counts[k])
                sup[ns++] = (struct rp_supply_ent){type_shape[k], counts[k], 0};
        rp_res resid[64], best[64];
        ck_assert_int_eq(rp_attribute(&sh, &m, needs, nn, sup, ns, RP_ORDER_ENGINE, resid, NULL),
                         0);
        ck_assert_int_eq(rp_attribute(&sh, &m, needs, nn, sup, ns, RP_ORDER_BEST, best, NULL), 0);
        ck_assert_uint_eq(res.n_verdicts, nn);
        for (size_t v = 0; v < res.n_verdicts; v++) {
            size_t i = 0;
            while (i < nn && strcmp(m.classes[needs[i].cls].fp, res.verdicts[v].fingerprint))
                i++;
            ck_assert_uint_lt(i, nn);
            ck_assert_msg(res.verdicts[v].satisfied == res_zero(&resid[i]),
                          "scenario %d need %s: engine satisfied=%d, replay covered=%d", scenario,
                          m.classes[needs[i].cls].fp, res.verdicts[v].satisfied,
                          res_zero(&resid[i]));
            if (res.verdicts[v].satisfied)
                ck_assert(res_zero(&best[i]));
            agreed++;
        }
        /* 2. the engine's reclaims, judged one by one as the replay would */
        for (size_t a = 0; a < res.n_actions; a++) {
            if (res.actions[a].kind != BF_ACTION_RECLAIM)
                continue;
            uint32_t k = slot_type[res.actions[a].slot];
            for (size_t j = 0; j < ns; j++)
                if (sup[j].shape == type_shape[k])
                    sup[j].n--; /* the machine, then it stays cordoned */
            int needed = rp_machine_needed(&sh, &m, needs, nn, sup, ns, type_shape[k]);
            ck_assert_msg(needed == 0,
                          "scenario %d: the engine reclaimed %s (%s) and the replay "
                          "calls it still demanded",
                          scenario, res.actions[a].machine_id, cat[k].name);
            reclaims_checked++;
        }
        bf_engine_free(e);
        rp_shapes_free(&sh);
        rp_model_free(&m);
        rp_trace_free(&t);
    }
    /* the scenarios did exercise both sides */
    ck_assert_uint_gt(agreed, 40);
    ck_assert_uint_gt(reclaims_checked, 10);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("replay_engine");
    TCase *tc = tcase_create("core");
    tcase_add_loop_test(tc, replay_view_agrees_with_the_engine_and_never_blames_its_reclaims, 0, 5);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return check_run(s);
}
