/*
 * bench_pbwire.c — the hand-written protobuf paths that sit on the wire
 * module (bigfleet/pbwire.h), measured without a network:
 *
 *   - List encode: the simulated provider's full List of a 500K-machine pool
 *     (openb catalog), request decode + MachineList encode through
 *     bf_sim_handle (the figure docs/simprovider.md quotes);
 *   - provider decode: that MachineList walked the way the reconciler reads a
 *     List (bf_prov_list_decode, every Machine through bf_prov_machine_decode,
 *     its labels through the map iterator);
 *   - rollup scan: an OperatorMessage carrying a 50,000-Need rollup routed by
 *     bf_opmsg_classify and pre-counted by bf_rollup_count_needs, plus a walk
 *     of every field of every Need with bf_pb_next (what the converter's scan
 *     costs before it interns anything).
 *
 * Usage: bench_pbwire [openb_node_list.csv] (default $BF_OPENB_CSV or
 * ../shared/data/openb/openb_node_list_all_node.csv). Prints medians of
 * repeated runs (thread CPU time) and writes results/bench_pbwire.json.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "bigfleet/provider.h"
#include "bigfleet/opmsg.h"
#include "bigfleet/simprovider.h"
#include "bigfleet/util.h"
#include "bigfleet/v1alpha1/shard.pb-c.h"

#include "bench_common.h"

#define T0   (1000 * BF_NS_PER_SEC)
#define REPS 15

/* CPU time of this thread: the machine is shared, and a wall clock counts
 * the time other processes held the core */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what)
{
    fprintf(stderr, "bench_pbwire: %s\n", what);
    exit(1);
}

/* every Machine of a MachineList decoded, labels walked; returns a checksum */
static uint64_t walk_list(const uint8_t *p, size_t len, size_t *machines)
{
    struct bf_prov_list l;
    if (bf_prov_list_decode(p, len, &l))
        die("MachineList does not decode");
    struct bf_prov_list_iter it;
    bf_prov_list_iter_init(&it, &l);
    struct bf_prov_bytes mb;
    uint64_t sum = 0;
    size_t n = 0;
    while (bf_prov_list_next(&it, &mb) == 1) {
        struct bf_prov_machine m;
        if (bf_prov_machine_decode(mb.p, mb.len, &m))
            die("Machine does not decode");
        struct bf_prov_map_iter mi;
        struct bf_prov_bytes k, v;
        bf_prov_map_iter_init(&mi, &m, BF_PROV_MAP_LABELS);
        while (bf_prov_map_next(&mi, &k, &v) == 1)
            sum += k.len + v.len;
        sum += m.shape_hash[0] ^ (uint64_t)m.state;
        n++;
    }
    *machines = n;
    return sum;
}

/* OperatorMessage{rollup: n Needs, each with 2 requirements, 2 resources,
 * a priority, a spread, buckets and a group} packed with protobuf-c */
static uint8_t *build_rollup(size_t n, size_t *len)
{
    Bigfleet__V1alpha1__NodeSelectorRequirement req[2];
    Bigfleet__V1alpha1__NodeSelectorRequirement *reqp[2] = {&req[0], &req[1]};
    char *vals0[] = {"m6i.large", "m6i.xlarge"};
    char *vals1[] = {"us-east-1a"};
    bigfleet__v1alpha1__node_selector_requirement__init(&req[0]);
    req[0].key = "node.kubernetes.io/instance-type";
    req[0].operator_ = BIGFLEET__V1ALPHA1__NODE_SELECTOR_REQUIREMENT__OPERATOR__OPERATOR_IN;
    req[0].n_values = 2;
    req[0].values = vals0;
    bigfleet__v1alpha1__node_selector_requirement__init(&req[1]);
    req[1].key = "topology.kubernetes.io/zone";
    req[1].operator_ = BIGFLEET__V1ALPHA1__NODE_SELECTOR_REQUIREMENT__OPERATOR__OPERATOR_IN;
    req[1].n_values = 1;
    req[1].values = vals1;
    Bigfleet__V1alpha1__TopologySpread spr;
    Bigfleet__V1alpha1__TopologySpread *sprp = &spr;
    bigfleet__v1alpha1__topology_spread__init(&spr);
    spr.topology_key = "topology.kubernetes.io/zone";
    spr.max_skew = 1;
    Bigfleet__V1alpha1__CapacityNeed *needs = calloc(n, sizeof *needs);
    Bigfleet__V1alpha1__CapacityNeed **np = calloc(n, sizeof *np);
    Bigfleet__V1alpha1__CapacityNeed__AggregateResourcesEntry *ag = calloc(2 * n, sizeof *ag);
    Bigfleet__V1alpha1__CapacityNeed__AggregateResourcesEntry **agp = calloc(2 * n, sizeof *agp);
    char(*qty)[16] = calloc(n, sizeof *qty);
    char(*grp)[24] = calloc(n, sizeof *grp);
    if (!needs || !np || !ag || !agp || !qty || !grp)
        die("out of memory");
    for (size_t i = 0; i < n; i++) {
        bigfleet__v1alpha1__capacity_need__init(&needs[i]);
        snprintf(qty[i], sizeof qty[i], "%zu", 1 + i % 64);
        snprintf(grp[i], sizeof grp[i], "group-%zu", i);
        for (int k = 0; k < 2; k++) {
            bigfleet__v1alpha1__capacity_need__aggregate_resources_entry__init(&ag[2 * i + k]);
            ag[2 * i + k].key = k ? "memory" : "cpu";
            ag[2 * i + k].value = k ? "4Gi" : qty[i];
            agp[2 * i + k] = &ag[2 * i + k];
        }
        needs[i].n_requirements = 2;
        needs[i].requirements = reqp;
        needs[i].n_aggregate_resources = 2;
        needs[i].aggregate_resources = &agp[2 * i];
        needs[i].priority = (int32_t)(i % 1000);
        needs[i].n_spread = 1;
        needs[i].spread = &sprp;
        needs[i].interruption_penalty_bucket = BIGFLEET__V1ALPHA1__PENALTY_BUCKET__PENALTY_BUCKET_4;
        needs[i].group.data = (uint8_t *)grp[i];
        needs[i].group.len = strlen(grp[i]);
        np[i] = &needs[i];
    }
    Bigfleet__V1alpha1__ClusterCapacityNeeds r = BIGFLEET__V1ALPHA1__CLUSTER_CAPACITY_NEEDS__INIT;
    r.cluster_id = "bench-cluster";
    r.timestamp_unix_nanos = 1700000000000000000;
    r.n_needs = n;
    r.needs = np;
    Bigfleet__V1alpha1__OperatorMessage m = BIGFLEET__V1ALPHA1__OPERATOR_MESSAGE__INIT;
    m.payload_case = BIGFLEET__V1ALPHA1__OPERATOR_MESSAGE__PAYLOAD_ROLLUP;
    m.rollup = &r;
    *len = bigfleet__v1alpha1__operator_message__get_packed_size(&m);
    uint8_t *buf = malloc(*len);
    if (!buf)
        die("out of memory");
    bigfleet__v1alpha1__operator_message__pack(&m, buf);
    free(needs);
    free(np);
    free(ag);
    free(agp);
    free(qty);
    free(grp);
    return buf;
}

/* every field of every Need, nested messages and map entries included:
 * depth 0 OperatorMessage (2 rollup), 1 ClusterCapacityNeeds (3 needs),
 * 2 CapacityNeed (1 requirements, 2/8 map entries, 5 spread), 3 leaves */
static uint64_t walk_fields(const uint8_t *p, size_t len, int depth)
{
    struct bf_pb_reader r;
    struct bf_pb_field f;
    uint64_t n = 0;
    bf_pb_reader_init(&r, p, len);
    while (bf_pb_next(&r, &f) == 1) {
        n += f.num;
        if (f.wt != BF_PB_LEN)
            continue;
        if ((depth == 0 && f.num == 2) || (depth == 1 && f.num == 3) ||
            (depth == 2 && (f.num == 1 || f.num == 2 || f.num == 5 || f.num == 8)))
            n += walk_fields(f.p, f.len, depth + 1);
    }
    return n;
}

int main(int argc, char **argv)
{
    struct bf_sim_config c;
    bf_sim_config_init(&c);
    c.catalog_path = bench_openb_csv(argc, argv);
    c.seed_speculative = 18519; /* x 27 openb shapes = 500,013 machines */
    struct bf_sim *s;
    char err[256];
    if (bf_sim_open(&c, &s, err, sizeof err)) {
        fprintf(stderr, "bench_pbwire: bf_sim_open: %s\n", err);
        return 1;
    }
    /* --- List encode (empty ListFilter = every machine) */
    double t[REPS];
    struct bf_sim_reply r = {0};
    for (int i = 0; i < REPS; i++) {
        double a = now_s();
        bf_sim_handle(s, BF_SIM_RPC_LIST, (const uint8_t *)"", 0, T0, &r);
        t[i] = now_s() - a;
        if (r.code != BF_SIM_OK)
            die("List failed");
    }
    double list_s = bench_median(t, REPS);
    size_t list_bytes = r.len;
    /* --- provider decode of the same bytes */
    size_t machines = 0;
    uint64_t sum = 0;
    for (int i = 0; i < REPS; i++) {
        double a = now_s();
        sum += walk_list(r.body, r.len, &machines);
        t[i] = now_s() - a;
    }
    double decode_s = bench_median(t, REPS);
    /* --- rollup scan */
    size_t rl;
    uint8_t *roll = build_rollup(50000, &rl);
    double tc[REPS], tw[REPS];
    for (int i = 0; i < REPS; i++) {
        double a = now_s();
        for (int k = 0; k < 10; k++) {
            int payload;
            const uint8_t *sub;
            size_t sublen;
            uint32_t parts, n_needs;
            if (bf_opmsg_classify(roll, rl, &payload, &sub, &sublen, &parts) || payload != 2 ||
                bf_rollup_count_needs(sub, sublen, &n_needs) || n_needs != 50000)
                die("rollup scan failed");
        }
        tc[i] = (now_s() - a) / 10;
        a = now_s();
        sum += walk_fields(roll, rl, 0);
        tw[i] = now_s() - a;
    }
    double scan_s = bench_median(tc, REPS), walk_s = bench_median(tw, REPS);
    printf("bench_pbwire (%zu machines, medians of %d)\n", machines, REPS);
    printf("  List full encode (bf_sim_handle)      %9.2f ms  %10zu bytes\n", list_s * 1e3,
           list_bytes);
    printf("  List full provider decode + labels    %9.2f ms\n", decode_s * 1e3);
    printf("  rollup classify + count, 50K Needs    %9.3f ms  %10zu bytes\n", scan_s * 1e3, rl);
    printf("  rollup walk of every field            %9.3f ms\n", walk_s * 1e3);
    printf("  (checksum %llu)\n", (unsigned long long)sum);
    mkdir("results", 0755);
    FILE *f = fopen("results/bench_pbwire.json", "w");
    if (f) {
        fprintf(f,
                "{\n  \"bench\": \"bench_pbwire\",\n  \"machines\": %zu,\n"
                "  \"list_encode_ms\": %.3f,\n  \"list_bytes\": %zu,\n"
                "  \"list_decode_ms\": %.3f,\n  \"rollup_scan_ms\": %.4f,\n"
                "  \"rollup_bytes\": %zu,\n  \"rollup_walk_ms\": %.4f\n}\n",
                machines, list_s * 1e3, list_bytes, decode_s * 1e3, scan_s * 1e3, rl, walk_s * 1e3);
        fclose(f);
    }
    free(roll);
    bf_sim_reply_free(&r);
    bf_sim_close(s);
    return 0;
}
