/*
 * test_simprovider_catalog.c — the instance-type catalog and the seeded pool:
 * the real openb node list maps to one type per distinct node shape with the
 * documented names, prices (docs/simprovider.md) and capacity types; the
 * explicit catalog CSV; spot variants; validation; and the seeding layout
 * (ids, zones, racks, labels, resources, Configured bindings with encoded
 * shard_metadata).
 */
#include <ctype.h>
#include <math.h>

#include "test_simprovider.h"

/* The documented formula, restated independently of the implementation. */
static double doc_gpu_price(const char *m)
{
    static const struct {
        const char *m;
        double p;
    } t[] = {{"T4", 0.35},  {"P100", 1.46}, {"V100M16", 2.48}, {"V100M32", 2.98},
             {"A10", 1.20}, {"G1", 1.00},   {"G2", 2.00},      {"G3", 3.00}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(t[i].m, m))
            return t[i].p;
    return 2.00;
}

static double doc_list_price(long long cpu_milli, long long mib, int gpus, const char *model)
{
    return 0.033 * cpu_milli / 1000.0 + 0.00375 * mib / 1024.0 + gpus * doc_gpu_price(model);
}

struct shape {
    long long cpu, mem;
    int gpu;
    char model[32];
    unsigned count;
};

/* Reads the openb CSV with a deliberately naive parser of its own. */
static size_t read_shapes(const char *path, struct shape *out, size_t max, unsigned *rows)
{
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    char line[256];
    size_t n = 0;
    *rows = 0;
    ck_assert_ptr_nonnull(fgets(line, sizeof line, f)); /* header */
    while (fgets(line, sizeof line, f)) {
        struct shape s = {0};
        char sn[64];
        line[strcspn(line, "\r\n")] = 0;
        int k = sscanf(line, "%63[^,],%lld,%lld,%d,%31s", sn, &s.cpu, &s.mem, &s.gpu, s.model);
        ck_assert(k == 4 || k == 5);
        (*rows)++;
        size_t i = 0;
        for (; i < n; i++)
            if (out[i].cpu == s.cpu && out[i].mem == s.mem && out[i].gpu == s.gpu &&
                !strcmp(out[i].model, s.model))
                break;
        if (i == n) {
            ck_assert_uint_lt(n, max);
            out[n++] = s;
        }
        out[i].count++;
    }
    fclose(f);
    return n;
}

START_TEST(openb_node_list_maps_each_distinct_shape_to_one_documented_type)
{
    const char *path = simt_openb_csv();
    struct shape sh[256];
    unsigned rows;
    size_t ns = read_shapes(path, sh, 256, &rows);
    struct bf_sim_type *t;
    size_t n;
    char err[256];
    ck_assert_int_eq(bf_sim_catalog_load(path, false, &t, &n, err, sizeof err), 0);
    ck_assert_uint_eq(n, ns);
    unsigned total = 0;
    for (size_t i = 0; i < ns; i++) {
        char want[96], lm[32];
        size_t k = 0;
        for (; sh[i].model[k]; k++)
            lm[k] = (char)tolower((unsigned char)sh[i].model[k]);
        lm[k] = 0;
        if (sh[i].gpu)
            snprintf(want, sizeof want, "openb-%lldc-%lldg-%dx%s", sh[i].cpu / 1000,
                     sh[i].mem / 1024, sh[i].gpu, lm);
        else
            snprintf(want, sizeof want, "openb-%lldc-%lldg", sh[i].cpu / 1000, sh[i].mem / 1024);
        size_t j = 0;
        while (j < n && strcmp(t[j].name, want))
            j++;
        ck_assert_msg(j < n, "no type %s", want);
        ck_assert_int_eq(t[j].cpu_milli, sh[i].cpu);
        ck_assert_int_eq(t[j].memory_mib, sh[i].mem);
        ck_assert_int_eq(t[j].gpus, sh[i].gpu);
        ck_assert_str_eq(t[j].gpu_model, sh[i].model);
        ck_assert_uint_eq(t[j].trace_nodes, sh[i].count);
        double list = doc_list_price(sh[i].cpu, sh[i].mem, sh[i].gpu, sh[i].model);
        if (sh[i].gpu >= 8) {
            ck_assert_int_eq(t[j].capacity_type, BF_CT_BARE_METAL);
            ck_assert_double_eq_tol(t[j].price_per_hour, 0.6 * list, 1e-4);
        } else {
            ck_assert_int_eq(t[j].capacity_type, BF_CT_ON_DEMAND);
            ck_assert_double_eq_tol(t[j].price_per_hour, list, 1e-4);
        }
        ck_assert(t[j].interruption_probability == 0);
        total += t[j].trace_nodes;
    }
    ck_assert_uint_eq(total, rows);
    /* sorted by (gpus, model, cpu, memory): CPU-only shapes first */
    for (size_t i = 1; i < n; i++)
        ck_assert_int_le(t[i - 1].gpus, t[i].gpus);
    ck_assert_int_eq(t[0].gpus, 0);
    free(t);
}
END_TEST

START_TEST(spot_variants_twin_every_on_demand_type_at_a_discount)
{
    struct bf_sim_type *t, *ts;
    size_t n, ns;
    char err[256];
    ck_assert_int_eq(bf_sim_catalog_load(simt_openb_csv(), false, &t, &n, err, sizeof err), 0);
    ck_assert_int_eq(bf_sim_catalog_load(simt_openb_csv(), true, &ts, &ns, err, sizeof err), 0);
    size_t od = 0;
    for (size_t i = 0; i < n; i++) {
        if (t[i].capacity_type != BF_CT_ON_DEMAND)
            continue;
        od++;
        char want[80];
        snprintf(want, sizeof want, "%s-spot", t[i].name);
        size_t j = 0;
        while (j < ns && strcmp(ts[j].name, want))
            j++;
        ck_assert_msg(j < ns, "missing %s", want);
        ck_assert_int_eq(ts[j].capacity_type, BF_CT_SPOT);
        ck_assert_double_eq_tol(ts[j].price_per_hour, 0.35 * t[i].price_per_hour, 1e-4);
        ck_assert(ts[j].interruption_probability == (t[i].gpus ? 0.10 : 0.05));
    }
    ck_assert_uint_gt(od, 0);
    ck_assert_uint_eq(ns, n + od);
    free(t);
    free(ts);
}
END_TEST

START_TEST(list_price_uses_the_default_gpu_price_for_unknown_models)
{
    ck_assert_double_eq_tol(bf_sim_list_price(1000, 1024, 1, "X9"), 0.033 + 0.00375 + 2.00, 1e-4);
    ck_assert_double_eq_tol(bf_sim_list_price(96000, 393216, 8, "G2"), 20.608, 1e-9);
    ck_assert_double_eq_tol(bf_sim_list_price(2000, 8192, 0, ""), 0.096, 1e-9);
}
END_TEST

static char *write_file(const char *dir, const char *name, const char *text)
{
    char *p = malloc(512);
    snprintf(p, 512, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    return p;
}

START_TEST(explicit_catalog_csv_is_parsed_in_file_order_and_validated)
{
    char *dir = simt_tmpdir();
    char *ok = write_file(dir, "ok.csv",
                          "\xef\xbb\xbftype,cpu_milli,memory_mib,gpu,model,capacity_type,"
                          "price_per_hour,interruption_probability\r\n"
                          "# comment\r\n"
                          "\r\n"
                          "z-gpu,8000,65536,1,A10,on-demand,1.25,0\r\n"
                          "a-metal,64000,262144,0,,BareMetal,0,0\r\n"
                          "m-spot,4000,16384,0,,spot,0.04,0.2\n"
                          "r-res,2000,4096,0,,RESERVED,0.05,0.001\n");
    struct bf_sim_type *t;
    size_t n;
    char err[256];
    ck_assert_int_eq(bf_sim_catalog_load(ok, false, &t, &n, err, sizeof err), 0);
    ck_assert_uint_eq(n, 4);
    ck_assert_str_eq(t[0].name, "z-gpu");
    ck_assert_str_eq(t[0].gpu_model, "A10");
    ck_assert_int_eq(t[1].capacity_type, BF_CT_BARE_METAL);
    ck_assert_int_eq(t[2].capacity_type, BF_CT_SPOT);
    ck_assert(t[2].interruption_probability == 0.2);
    ck_assert_int_eq(t[3].capacity_type, BF_CT_RESERVED);
    ck_assert(t[0].price_per_hour == 1.25);
    free(t);
    const char *hdr = "type,cpu_milli,memory_mib,gpu,model,capacity_type,price_per_hour,"
                      "interruption_probability\n";
    const char *bad[] = {
        "name,cpu\nx,1\n",                       /* unknown header */
        "",                                      /* empty */
        "X\nx,1000,1024,0,,on-demand,0.1,0\n",   /* header */
        "HDRx,1000,1024,0,,on-demand,0.1\n",     /* 7 fields */
        "HDRx,1000,1024,0,,spot,0.1,0\n",        /* SPOT needs p > 0 */
        "HDRx,1000,1024,0,,on-demand,-1,0\n",    /* negative price */
        "HDRx,1000,1024,0,,on-demand,0.1,1.5\n", /* p > 1 */
        "HDRx,1000,1024,0,,cheap,0.1,0\n",       /* capacity type */
        "HDRx,0,1024,0,,on-demand,0.1,0\n",      /* no CPU */
        "HDRx,1000,1024,0,,on-demand,0.1,0\nx,1000,1024,0,,on-demand,0.1,0\n", /* duplicate */
        "HDRx y,1000,1024,0,,on-demand,0.1,0\n",                               /* bad name */
        "HDRx,1000,1024,0,T4,on-demand,0.1,0\n", /* model without GPUs */
        "HDRx,1k,1024,0,,on-demand,0.1,0\n",     /* not an integer */
        "HDRx,1000,1024,0,,on-demand,nan,0\n",   /* NaN price */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[512];
        if (!strncmp(bad[i], "HDR", 3))
            snprintf(text, sizeof text, "%s%s", hdr, bad[i] + 3);
        else
            snprintf(text, sizeof text, "%s", bad[i]);
        char *p = write_file(dir, "bad.csv", text);
        ck_assert_msg(bf_sim_catalog_load(p, false, &t, &n, err, sizeof err) == -EINVAL,
                      "bad catalog %zu accepted", i);
        ck_assert(err[0]);
        free(p);
    }
    char *nodes = write_file(dir, "nodes.csv",
                             "sn,cpu_milli,memory_mib,gpu,model\n"
                             "n1,8000,61440,2,P100\n"
                             "n2,8000,61440,2,P100\n"
                             "n3,1500,3000,0,\n");
    ck_assert_int_eq(bf_sim_catalog_load(nodes, false, &t, &n, err, sizeof err), 0);
    ck_assert_uint_eq(n, 2);
    ck_assert_str_eq(t[0].name, "openb-1500mc-3000m"); /* non-integral vCPU / GiB */
    ck_assert_str_eq(t[1].name, "openb-8c-60g-2xp100");
    ck_assert_uint_eq(t[1].trace_nodes, 2);
    free(t);
    ck_assert_int_eq(bf_sim_catalog_load("/nonexistent.csv", false, &t, &n, err, sizeof err),
                     -ENOENT);
    free(ok);
    free(nodes);
    simt_rmdir(dir);
}
END_TEST

static const char *label(const PbMachine *m, const char *k)
{
    for (size_t i = 0; i < m->n_labels; i++)
        if (!strcmp(m->labels[i]->key, k))
            return m->labels[i]->value;
    return NULL;
}

static const char *res(const Bigfleet__V1alpha1__Resources *r, const char *k)
{
    for (size_t i = 0; r && i < r->n_resources; i++)
        if (!strcmp(r->resources[i]->key, k))
            return r->resources[i]->value;
    return NULL;
}

START_TEST(seeded_pool_spreads_slots_over_zones_and_racks_with_deterministic_ids)
{
    struct bf_sim_config c;
    simt_cfg(&c); /* built-in catalog, 3 zones, 4 racks, 8 Speculative per type */
    struct bf_sim *s = simt_open(&c);
    size_t nt;
    const struct bf_sim_type *t = bf_sim_types(s, &nt);
    ck_assert_uint_eq(nt, 5);
    ck_assert_uint_eq(bf_sim_machine_count(s), 40);
    static const char *const zones[3] = {"zone-a", "zone-b", "zone-c"};
    for (size_t k = 0; k < nt; k++) {
        for (unsigned j = 0; j < 8; j++) {
            char id[128], rack[64];
            snprintf(id, sizeof id, "%s-%s-%u", t[k].name, zones[j % 3], j / 3);
            snprintf(rack, sizeof rack, "%s-rack-%u", zones[j % 3], (j / 3) % 4);
            int code;
            PbMachine *m = simt_get(s, id, T0, &code);
            ck_assert_msg(code == 0, "missing %s", id);
            ck_assert_int_eq(m->state, BF_STATE_SPECULATIVE);
            ck_assert_str_eq(m->zone, zones[j % 3]);
            ck_assert_str_eq(m->instance_type, t[k].name);
            ck_assert_str_eq(label(m, BF_LABEL_ZONE), zones[j % 3]);
            ck_assert_str_eq(label(m, BF_SIM_LABEL_RACK), rack);
            ck_assert_str_eq(label(m, BF_LABEL_INSTANCE_TYPE), t[k].name);
            ck_assert_ptr_nonnull(res(m->resources, "cpu"));
            ck_assert_ptr_null(m->allocatable); /* no host yet */
            simt_free_machine(m);
        }
    }
    int code;
    PbMachine *m = simt_get(s, "a3-highgpu-8g-zone-b-0", T0, &code);
    ck_assert_str_eq(res(m->resources, "cpu"), "208");
    ck_assert_str_eq(res(m->resources, "memory"), "1872Gi");
    ck_assert_str_eq(res(m->resources, BF_SIM_RESOURCE_GPU), "8");
    ck_assert_str_eq(label(m, BF_SIM_LABEL_GPU_MODEL), "H100");
    ck_assert_str_eq(label(m, BF_SIM_LABEL_GPU_COUNT), "8");
    ck_assert_double_eq_tol(m->price_per_hour, 88.2539, 1e-9);
    simt_free_machine(m);
    m = simt_get(s, "m6i.large-zone-a-0", T0, &code);
    ck_assert_str_eq(res(m->resources, "memory"), "8Gi");
    ck_assert_ptr_null(label(m, BF_SIM_LABEL_GPU_MODEL));
    ck_assert_ptr_null(res(m->resources, BF_SIM_RESOURCE_GPU));
    simt_free_machine(m);
    bf_sim_close(s);
}
END_TEST

START_TEST(configured_seed_binds_clusters_round_robin_with_decodable_shard_metadata)
{
    struct bf_sim_config c;
    simt_cfg(&c);
    c.seed_speculative = 1;
    c.seed_idle = 1;
    c.seed_configured = 3;
    c.seed_clusters = 2;
    c.cluster_prefix = "kwok-cluster-";
    c.zone_names = "eu-1a,eu-1b";
    struct bf_sim *s = simt_open(&c);
    ck_assert_uint_eq(bf_sim_count_in_state(s, BF_STATE_CONFIGURED), 15);
    ck_assert_uint_eq(bf_sim_count_in_state(s, BF_STATE_IDLE), 5);
    ck_assert_uint_eq(bf_sim_hosts_in_use(s), 20);
    int code, per_cluster[2] = {0};
    int st[2] = {BF_STATE_CONFIGURED, 0};
    PbList *l = simt_list(s, st, 0, NULL, 0, T0, &code);
    for (size_t i = 0; i < l->n_machines; i++) {
        const PbMachine *m = l->machines[i];
        ck_assert(!strcmp(m->zone, "eu-1a") || !strcmp(m->zone, "eu-1b"));
        ck_assert_ptr_nonnull(m->host);
        ck_assert_ptr_nonnull(res(m->allocatable, "cpu"));
        if (!strcmp(m->cluster, "kwok-cluster-0"))
            per_cluster[0]++;
        else if (!strcmp(m->cluster, "kwok-cluster-1"))
            per_cluster[1]++;
        else
            ck_abort_msg("unexpected cluster %s", m->cluster);
        ck_assert_uint_eq(m->n_shard_metadata, 5);
        char fp[256];
        snprintf(fp, sizeof fp,
                 "p=1000000|ipb=16|rpb=19|reqs=node.kubernetes.io/instance-type:1:%s;|spr=",
                 m->instance_type);
        int seen = 0;
        for (size_t k = 0; k < m->n_shard_metadata; k++) {
            const char *key = m->shard_metadata[k]->key;
            ProtobufCBinaryData v = m->shard_metadata[k]->value;
            const char *want = !strcmp(key, BF_MD_PRIORITY)       ? "1000000"
                               : !strcmp(key, BF_MD_INTERRUPTION) ? "8192"
                               : !strcmp(key, BF_MD_RECLAMATION)  ? "65536"
                               : !strcmp(key, BF_MD_FINGERPRINT)  ? fp
                               : !strcmp(key, BF_MD_GROUP)        ? ""
                                                                  : NULL;
            ck_assert_msg(want != NULL, "unexpected key %s", key);
            ck_assert_uint_eq(v.len, strlen(want));
            ck_assert(v.len == 0 || !memcmp(v.data, want, v.len));
            seen++;
        }
        ck_assert_int_eq(seen, 5);
    }
    ck_assert_int_eq(per_cluster[0], 8);
    ck_assert_int_eq(per_cluster[1], 7);
    simt_free_list(l);
    bf_sim_close(s);
}
END_TEST

START_TEST(speculative_slots_per_trace_node_scale_with_the_openb_node_counts)
{
    struct bf_sim_config c;
    bf_sim_config_init(&c);
    c.catalog_path = simt_openb_csv();
    c.seed_speculative = 1;
    c.seed_speculative_per_node = 2;
    struct bf_sim *s = simt_open(&c);
    size_t nt;
    const struct bf_sim_type *t = bf_sim_types(s, &nt);
    size_t want = 0;
    for (size_t k = 0; k < nt; k++)
        want += 1 + 2 * (size_t)t[k].trace_nodes;
    ck_assert_uint_eq(bf_sim_machine_count(s), want);
    ck_assert_uint_eq(want, nt + 2 * 1523);
    bf_sim_close(s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("simprovider-catalog");
    TCase *tc = tcase_create("catalog");
    tcase_add_test(tc, openb_node_list_maps_each_distinct_shape_to_one_documented_type);
    tcase_add_test(tc, spot_variants_twin_every_on_demand_type_at_a_discount);
    tcase_add_test(tc, list_price_uses_the_default_gpu_price_for_unknown_models);
    tcase_add_test(tc, explicit_catalog_csv_is_parsed_in_file_order_and_validated);
    tcase_add_test(tc, seeded_pool_spreads_slots_over_zones_and_racks_with_deterministic_ids);
    tcase_add_test(tc, configured_seed_binds_clusters_round_robin_with_decodable_shard_metadata);
    tcase_add_test(tc, speculative_slots_per_trace_node_scale_with_the_openb_node_counts);
    suite_add_tcase(s, tc);
    return check_run(s);
}
