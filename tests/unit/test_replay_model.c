/*
 * test_replay_model.c — how bigfleet-replay turns pods into CapacityRequests
 * and rollups (tools/replay/model.c): requirements from gpu_spec / CPU-only
 * / fitting catalog types, priority and penalty buckets from qos,
 * aggregation by class (sum and per-dimension max), the wire encoding of a
 * full-replacement rollup, and the time compression of the replay clock.
 */
#include <errno.h>
#include <unistd.h>

#include "bigfleet/v1alpha1/shard.pb-c.h"
#include "test_replay.h"
#include "check_run.h"

static struct bf_sim_type cat[5];
static size_t n_cat;

static void setup_catalog(void)
{
    n_cat = 0;
    cat[n_cat++] = mk_type("cpu-8", 8000, 32768, 0, "", 0.4);
    cat[n_cat++] = mk_type("cpu-64", 64000, 262144, 0, "", 3.0);
    cat[n_cat++] = mk_type("t4-2", 16000, 65536, 2, "T4", 1.5);
    cat[n_cat++] = mk_type("v100-8", 96000, 786432, 8, "V100M32", 20.0);
}

START_TEST(qos_maps_to_priority_and_bucketed_penalties)
{
    /* the documented table (docs/replay.md), bucketed exactly like the operator */
    ck_assert_int_eq(rp_qos_table[RP_QOS_LS].priority, 10000);
    ck_assert_int_eq(bf_bucket_for_dollars(rp_qos_table[RP_QOS_LS].interruption_dollars), 15);
    ck_assert_int_eq(bf_bucket_for_dollars(rp_qos_table[RP_QOS_LS].reclamation_dollars), 16);
    ck_assert_int_eq(bf_bucket_for_dollars(rp_qos_table[RP_QOS_BE].interruption_dollars), 4);
    ck_assert_int_eq(rp_qos_parse("be", 2), RP_QOS_BE);
    ck_assert_int_eq(rp_qos_parse("Guaranteed", 10), RP_QOS_GUARANTEED);
    ck_assert_int_eq(rp_qos_parse("LSX", 3), -1);
    /* strictly ordered: BE < Burstable < LS < Guaranteed */
    for (int q = 1; q < RP_QOS_COUNT; q++) {
        ck_assert_int_gt(rp_qos_table[q].priority, rp_qos_table[q - 1].priority);
        ck_assert_double_gt(rp_qos_table[q].interruption_dollars,
                            rp_qos_table[q - 1].interruption_dollars);
    }
    struct rp_trace t;
    struct rp_model m;
    load_trace(&t, POD_HEADER "a,1000,64,0,0,,LS,Running,0,10,0\n");
    ck_assert_int_eq(rp_model_build(&m, &t, NULL, 0, true), 0);
    ck_assert_str_eq(m.classes[0].fp, "p=10000|ipb=15|rpb=16|reqs=nvidia.com/gpu.product:4:;|spr=");
    rp_model_free(&m);
    rp_trace_free(&t);
}
END_TEST

START_TEST(cpu_only_gets_does_not_exist_and_gpu_spec_gets_in)
{
    struct rp_trace t;
    struct rp_model m;
    load_trace(&t, POD_HEADER "cpu,1000,64,0,0,,BE,Running,0,10,0\n"
                              "any,1000,64,1,500,,BE,Running,0,10,0\n"
                              "spec,1000,64,1,1000,V100M32|T4,BE,Running,0,10,0\n");
    ck_assert_int_eq(rp_model_build(&m, &t, NULL, 0, true), 0); /* no catalog: no pin */
    ck_assert_uint_eq(m.n_classes, 3);
    ck_assert(!m.pin);
    ck_assert_str_eq(m.classes[t.pods[0].cls].fp,
                     "p=100|ipb=4|rpb=5|reqs=nvidia.com/gpu.product:4:;|spr=");
    ck_assert_str_eq(m.classes[t.pods[1].cls].fp, "p=100|ipb=4|rpb=5|reqs=|spr=");
    ck_assert_str_eq(m.classes[t.pods[2].cls].fp,
                     "p=100|ipb=4|rpb=5|reqs=nvidia.com/gpu.product:1:T4,V100M32;|spr=");
    ck_assert_str_eq(BF_SIM_LABEL_GPU_MODEL, "nvidia.com/gpu.product");
    rp_model_free(&m);
    rp_trace_free(&t);
}
END_TEST

START_TEST(pin_lists_exactly_the_catalog_types_that_fit)
{
    setup_catalog();
    struct rp_trace t;
    struct rp_model m;
    load_trace(&t, POD_HEADER "small,4000,4096,0,0,,BE,Running,0,10,0\n"
                              "big,32000,4096,0,0,,BE,Running,0,10,0\n"
                              "share,4000,4096,1,300,,BE,Running,0,10,0\n"
                              "eight,4000,4096,8,1000,,BE,Running,0,10,0\n"
                              "t4,4000,4096,1,1000,T4,BE,Running,0,10,0\n"
                              "huge,128000,4096,0,0,,BE,Running,0,10,0\n");
    ck_assert_int_eq(rp_model_build(&m, &t, cat, n_cat, true), 0);
    ck_assert_str_eq(m.classes[t.pods[0].cls].fp,
                     "p=100|ipb=4|rpb=5|reqs=node.kubernetes.io/instance-type:1:cpu-64,cpu-8;"
                     "nvidia.com/gpu.product:4:;|spr=");
    ck_assert_str_eq(m.classes[t.pods[1].cls].fp,
                     "p=100|ipb=4|rpb=5|reqs=node.kubernetes.io/instance-type:1:cpu-64;"
                     "nvidia.com/gpu.product:4:;|spr=");
    ck_assert_str_eq(m.classes[t.pods[2].cls].fp,
                     "p=100|ipb=4|rpb=5|reqs=node.kubernetes.io/instance-type:1:t4-2,v100-8;|spr=");
    ck_assert_str_eq(m.classes[t.pods[3].cls].fp,
                     "p=100|ipb=4|rpb=5|reqs=node.kubernetes.io/instance-type:1:v100-8;|spr=");
    ck_assert_str_eq(m.classes[t.pods[4].cls].fp,
                     "p=100|ipb=4|rpb=5|reqs=node.kubernetes.io/instance-type:1:t4-2;"
                     "nvidia.com/gpu.product:1:T4;|spr=");
    /* a pod no type can host is sent unpinned and counted */
    ck_assert_uint_eq(m.unfittable_pods, 1);
    ck_assert(!m.classes[t.pods[5].cls].pinned);
    ck_assert_str_eq(m.classes[t.pods[5].cls].fp,
                     "p=100|ipb=4|rpb=5|reqs=nvidia.com/gpu.product:4:;|spr=");
    ck_assert_uint_eq(m.classes[t.pods[0].cls].n_fit, 2);
    rp_model_free(&m);
    rp_trace_free(&t);
    /* --no-pin: the same pods aggregate by qos and GPU model only */
    load_trace(&t, POD_HEADER "small,4000,4096,0,0,,BE,Running,0,10,0\n"
                              "big,32000,4096,0,0,,BE,Running,0,10,0\n");
    ck_assert_int_eq(rp_model_build(&m, &t, cat, n_cat, false), 0);
    ck_assert_uint_eq(m.n_classes, 1);
    rp_model_free(&m);
    rp_trace_free(&t);
}
END_TEST

START_TEST(a_class_aggregates_by_sum_and_min_unit_is_the_per_dimension_max)
{
    struct rp_trace t;
    struct rp_model m;
    load_trace(&t, POD_HEADER "a,4000,1000,1,500,,LS,Running,0,10,0\n"
                              "b,1000,9000,1,250,,LS,Running,0,10,0\n"
                              "c,2000,100,0,0,,LS,Running,0,10,0\n"
                              "d,2000,100,1,1000,,BE,Running,0,10,0\n");
    ck_assert_int_eq(rp_model_build(&m, &t, NULL, 0, true), 0);
    uint32_t all[4] = {0, 1, 2, 3};
    struct rp_need out[8];
    size_t n = rp_aggregate(&m, all, 4, out);
    ck_assert_uint_eq(n, 3); /* LS GPU, LS CPU-only, BE GPU: qos never aggregates across */
    const struct rp_need *ls = NULL;
    for (size_t i = 0; i < n; i++)
        if (out[i].cls == t.pods[0].cls)
            ls = &out[i];
    ck_assert_ptr_nonnull(ls);
    ck_assert_uint_eq(ls->pods, 2);
    ck_assert_int_eq(ls->agg.v[RP_CPU], 5000);
    ck_assert_int_eq(ls->agg.v[RP_MEM], 10000);
    ck_assert_int_eq(ls->agg.v[RP_GPU], 750);
    ck_assert_int_eq(ls->min_unit.v[RP_CPU], 4000);
    ck_assert_int_eq(ls->min_unit.v[RP_MEM], 9000);
    ck_assert_int_eq(ls->min_unit.v[RP_GPU], 500);
    /* ordered by class: the rollup order is stable */
    for (size_t i = 1; i < n; i++)
        ck_assert_uint_lt(out[i - 1].cls, out[i].cls);
    ck_assert_uint_eq(rp_aggregate(&m, all, 0, out), 0);
    rp_model_free(&m);
    rp_trace_free(&t);
}
END_TEST

START_TEST(quantities_are_kubernetes_strings)
{
    char b[32];
    rp_format_dim(RP_CPU, 12000, b, sizeof b);
    ck_assert_str_eq(b, "12");
    rp_format_dim(RP_CPU, 11908, b, sizeof b);
    ck_assert_str_eq(b, "11908m");
    rp_format_dim(RP_GPU, 460, b, sizeof b);
    ck_assert_str_eq(b, "460m");
    rp_format_dim(RP_GPU, 8000, b, sizeof b);
    ck_assert_str_eq(b, "8");
    rp_format_dim(RP_MEM, 30517, b, sizeof b);
    ck_assert_str_eq(b, "30517Mi");
    rp_format_dim(RP_MEM, 16384, b, sizeof b);
    ck_assert_str_eq(b, "16Gi");
    rp_format_dim(RP_MEM, 2 * 1048576, b, sizeof b);
    ck_assert_str_eq(b, "2Ti");
    rp_format_dim(RP_MEM, 0, b, sizeof b);
    ck_assert_str_eq(b, "0");
    /* and they parse back to the same amounts on the shard side */
    int64_t milli;
    ck_assert_int_eq(bf_quantity_parse("30517Mi", 7, &milli), 0);
    ck_assert_int_eq(milli, 30517LL * 1048576 * 1000);
    ck_assert_int_eq(bf_quantity_parse("460m", 4, &milli), 0);
    ck_assert_int_eq(milli, 460);
}
END_TEST

START_TEST(rollup_encodes_a_full_replacement_that_protobuf_c_decodes)
{
    setup_catalog();
    struct rp_trace t;
    struct rp_model m;
    load_trace(&t, POD_HEADER "a,4000,1024,1,500,T4,LS,Running,0,10,0\n"
                              "b,2000,3000,1,250,T4,LS,Running,0,10,0\n"
                              "c,8000,30517,0,0,,BE,Running,0,10,0\n");
    ck_assert_int_eq(rp_model_build(&m, &t, cat, n_cat, true), 0);
    uint32_t all[3] = {0, 1, 2};
    struct rp_need needs[4];
    size_t n = rp_aggregate(&m, all, 3, needs);
    uint8_t *buf;
    size_t len;
    ck_assert_int_eq(rp_rollup_encode(&m, "openb-7", 1234567890123LL, needs, n, &buf, &len), 0);
    Bigfleet__V1alpha1__OperatorMessage *om =
        bigfleet__v1alpha1__operator_message__unpack(NULL, len, buf);
    ck_assert_ptr_nonnull(om);
    ck_assert_int_eq(om->payload_case, BIGFLEET__V1ALPHA1__OPERATOR_MESSAGE__PAYLOAD_ROLLUP);
    Bigfleet__V1alpha1__ClusterCapacityNeeds *r = om->rollup;
    ck_assert_str_eq(r->cluster_id, "openb-7");
    ck_assert_int_eq(r->timestamp_unix_nanos, 1234567890123LL);
    ck_assert_uint_eq(r->n_needs, 2);
    for (size_t i = 0; i < r->n_needs; i++) {
        Bigfleet__V1alpha1__CapacityNeed *cn = r->needs[i];
        ck_assert_uint_eq(cn->group.len, 0); /* openb has no co-location */
        if (cn->priority == 10000) {
            ck_assert_int_eq(cn->interruption_penalty_bucket, 15);
            ck_assert_int_eq(cn->reclamation_penalty_bucket, 16);
            ck_assert_uint_eq(cn->n_requirements, 2);
            ck_assert_str_eq(cn->requirements[0]->key, "node.kubernetes.io/instance-type");
            ck_assert_int_eq(cn->requirements[0]->operator_, 1);
            ck_assert_uint_eq(cn->requirements[0]->n_values, 1);
            ck_assert_str_eq(cn->requirements[0]->values[0], "t4-2");
            ck_assert_str_eq(cn->requirements[1]->key, "nvidia.com/gpu.product");
            ck_assert_str_eq(cn->requirements[1]->values[0], "T4");
            ck_assert_uint_eq(cn->n_aggregate_resources, 3);
            ck_assert_str_eq(cn->aggregate_resources[0]->key, "cpu");
            ck_assert_str_eq(cn->aggregate_resources[0]->value, "6");
            ck_assert_str_eq(cn->aggregate_resources[1]->key, "memory");
            ck_assert_str_eq(cn->aggregate_resources[1]->value, "4024Mi");
            ck_assert_str_eq(cn->aggregate_resources[2]->key, "nvidia.com/gpu");
            ck_assert_str_eq(cn->aggregate_resources[2]->value, "750m");
            ck_assert_str_eq(cn->min_unit[0]->value, "4");
            ck_assert_str_eq(cn->min_unit[1]->value, "3000Mi");
            ck_assert_str_eq(cn->min_unit[2]->value, "500m");
        } else {
            ck_assert_int_eq(cn->priority, 100);
            /* a CPU-only Need names no GPU dimension */
            ck_assert_uint_eq(cn->n_aggregate_resources, 2);
            ck_assert_str_eq(cn->aggregate_resources[1]->value, "30517Mi");
            ck_assert_uint_eq(cn->n_min_unit, 2);
        }
    }
    bigfleet__v1alpha1__operator_message__free_unpacked(om, NULL);
    free(buf);
    /* no pods: an empty full replacement withdraws everything */
    ck_assert_int_eq(rp_rollup_encode(&m, "openb-7", 1, needs, 0, &buf, &len), 0);
    om = bigfleet__v1alpha1__operator_message__unpack(NULL, len, buf);
    ck_assert_ptr_nonnull(om);
    ck_assert_int_eq(om->payload_case, BIGFLEET__V1ALPHA1__OPERATOR_MESSAGE__PAYLOAD_ROLLUP);
    ck_assert_uint_eq(om->rollup->n_needs, 0);
    bigfleet__v1alpha1__operator_message__free_unpacked(om, NULL);
    free(buf);
    rp_model_free(&m);
    rp_trace_free(&t);
}
END_TEST

START_TEST(clock_compresses_trace_time_and_staggers_clusters)
{
    struct rp_clock c = {.from = 1000,
                         .until = 101000,
                         .speed = 10000,
                         .interval_ns = BF_NS_PER_SEC / 2,
                         .offset = 0,
                         .clusters = 1};
    /* one rollup every 0.5 s wall = 5000 s of trace */
    ck_assert_int_eq(rp_clock_tau(&c, 0, 0), 1000);
    ck_assert_int_eq(rp_clock_tau(&c, 0, 1), 6000);
    ck_assert_int_eq(rp_clock_tau(&c, 0, 19), 96000);
    ck_assert_int_eq(rp_clock_tau(&c, 0, 20), 101000);
    ck_assert_int_eq(rp_clock_tau(&c, 0, 21), 101000); /* clamped at until */
    ck_assert_int_eq(rp_clock_last_k(&c, 0), 20);
    ck_assert_int_eq(rp_clock_wall_of(&c, 0, 6000), BF_NS_PER_SEC / 2);
    /* 4 clusters: phases spread over the interval, copies 100 s apart */
    c.clusters = 4;
    c.offset = 100;
    ck_assert_int_eq(rp_clock_phase_ns(&c, 0), 0);
    ck_assert_int_eq(rp_clock_phase_ns(&c, 2), BF_NS_PER_SEC / 4);
    /* cluster 2 at k=0: 0.25 s in -> base 1000 + 2500, shifted back 200 */
    ck_assert_int_eq(rp_clock_tau(&c, 2, 0), 3300);
    /* cluster 3 starts below `from`: it has not started yet */
    ck_assert_int_lt(rp_clock_tau(&c, 3, 0) - 3 * 0, 1000 + 3750);
    ck_assert_int_eq(rp_clock_tau(&c, 3, 0), 1000 + 3750 - 300);
    /* later clusters finish later: until + i*offset in base time */
    ck_assert_int_ge(rp_clock_last_k(&c, 3), rp_clock_last_k(&c, 0));
    ck_assert_int_eq(rp_clock_tau(&c, 3, rp_clock_last_k(&c, 3)), 101000);
    ck_assert_int_lt(rp_clock_tau(&c, 3, rp_clock_last_k(&c, 3) - 1), 101000);
}
END_TEST

START_TEST(trace_seconds_accept_plain_numbers_and_units)
{
    int64_t v;
    ck_assert_int_eq(rp_parse_trace_seconds("9400000", &v), 0);
    ck_assert_int_eq(v, 9400000);
    ck_assert_int_eq(rp_parse_trace_seconds("12.6", &v), 0);
    ck_assert_int_eq(v, 13);
    ck_assert_int_eq(rp_parse_trace_seconds("2d12h", &v), 0);
    ck_assert_int_eq(v, 2 * 86400 + 12 * 3600);
    ck_assert_int_eq(rp_parse_trace_seconds("1.5h", &v), 0);
    ck_assert_int_eq(v, 5400);
    ck_assert_int_eq(rp_parse_trace_seconds("90m30s", &v), 0);
    ck_assert_int_eq(v, 5430);
    ck_assert_int_eq(rp_parse_trace_seconds("", &v), -EINVAL);
    ck_assert_int_eq(rp_parse_trace_seconds("-5", &v), -EINVAL);
    ck_assert_int_eq(rp_parse_trace_seconds("2h30", &v), -EINVAL);
    ck_assert_int_eq(rp_parse_trace_seconds("3w", &v), -EINVAL);
    ck_assert_int_eq(rp_parse_trace_seconds("1h-1m", &v), -EINVAL);
}
END_TEST

#define OPENB "../shared/data/openb/"

START_TEST(every_pinned_openb_class_fits_each_of_its_types_with_all_pods_at_once)
{
    /* the reason for the pin: the per-dimension max of a class's pods must
     * fit every type it is pinned to, or a Need could never be satisfied */
    if (access(OPENB "openb_pod_list_default.csv", R_OK) ||
        access(OPENB "openb_node_list_all_node.csv", R_OK))
        return;
    struct bf_sim_type *types;
    size_t nt;
    char err[256];
    ck_assert_int_eq(bf_sim_catalog_load(OPENB "openb_node_list_all_node.csv", false, &types, &nt,
                                         err, sizeof err),
                     0);
    static const char *files[] = {"openb_pod_list_default.csv", "openb_pod_list_cpu050.csv",
                                  "openb_pod_list_gpushare40.csv", "openb_pod_list_gpuspec20.csv"};
    for (size_t f = 0; f < 4; f++) {
        char path[256];
        snprintf(path, sizeof path, OPENB "%s", files[f]);
        struct rp_trace t;
        struct rp_model m;
        ck_assert_int_eq(rp_trace_load(path, NULL, &t, err, sizeof err), 0);
        ck_assert_int_eq(rp_model_build(&m, &t, types, nt, true), 0);
        ck_assert_uint_eq(m.unfittable_pods, 0);
        uint32_t *all = malloc(t.n_pods * sizeof *all);
        for (size_t i = 0; i < t.n_pods; i++)
            all[i] = (uint32_t)i;
        struct rp_need *needs = calloc(m.n_classes, sizeof *needs);
        size_t n = rp_aggregate(&m, all, t.n_pods, needs);
        ck_assert_uint_eq(n, m.n_classes);
        for (size_t i = 0; i < n; i++) {
            const struct rp_class *c = &m.classes[needs[i].cls];
            ck_assert(c->pinned);
            for (uint32_t k = 0; k < c->n_fit; k++) {
                const struct bf_sim_type *ty = &types[c->fit[k]];
                ck_assert_msg(ty->cpu_milli >= needs[i].min_unit.v[RP_CPU] &&
                                  ty->memory_mib >= needs[i].min_unit.v[RP_MEM] &&
                                  ty->gpus * 1000 >= needs[i].min_unit.v[RP_GPU],
                              "%s: class %s does not fit %s", files[f], c->fp, ty->name);
            }
            /* and the catalog agrees: rp_need_types finds the same set */
            uint32_t idx[128];
            ck_assert_uint_eq(rp_need_types(&m, &needs[i], idx, 128), c->n_fit);
        }
        free(all);
        free(needs);
        rp_model_free(&m);
        rp_trace_free(&t);
    }
    free(types);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("replay_model");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, qos_maps_to_priority_and_bucketed_penalties);
    tcase_add_test(tc, cpu_only_gets_does_not_exist_and_gpu_spec_gets_in);
    tcase_add_test(tc, pin_lists_exactly_the_catalog_types_that_fit);
    tcase_add_test(tc, a_class_aggregates_by_sum_and_min_unit_is_the_per_dimension_max);
    tcase_add_test(tc, quantities_are_kubernetes_strings);
    tcase_add_test(tc, rollup_encodes_a_full_replacement_that_protobuf_c_decodes);
    tcase_add_test(tc, clock_compresses_trace_time_and_staggers_clusters);
    tcase_add_test(tc, trace_seconds_accept_plain_numbers_and_units);
    tcase_add_test(tc, every_pinned_openb_class_fits_each_of_its_types_with_all_pods_at_once);
    tcase_set_timeout(tc, 30);
    suite_add_tcase(s, tc);
    return check_run(s);
}
