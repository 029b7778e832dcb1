/*
 * bench_simprovider.c — figures for the simulated provider core (no network):
 *
 *   - seeding a 500K-machine pool from the openb catalog;
 *   - List of 500K machines, full vs incremental (since_revision after k
 *     changes), each as the bytes a gRPC server would send: the production
 *     encoder (bf_sim_handle -> serialized MachineList) and, for reference,
 *     the same list built as protobuf-c structs and packed with
 *     protobuf_c_message_pack (so encode cost is always included);
 *   - accepts/s of lifecycle RPCs through bf_sim_handle (request decode,
 *     checks, transition, TransitionAck encode), instant transitions, in
 *     memory and with LMDB write-through;
 *   - staged transitions: accepts/s plus completions/s through bf_sim_advance.
 *
 * Usage: bench_simprovider [openb_node_list.csv] (default $BF_OPENB_CSV or
 * ../shared/data/openb/openb_node_list_all_node.csv). Prints a table and
 * writes results/bench_simprovider.json. Figures are medians of repeated runs.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "bigfleet/simprovider.h"
#include "bigfleet/util.h"
#include "simprovider/sim_internal.h"

#include "bench_common.h"

#define T0   (1000 * BF_NS_PER_SEC)
#define REPS 5

static double now_s(void)
{
    return (double)bf_mono_ns() / 1e9;
}

static struct bf_sim *open_or_die(const struct bf_sim_config *c)
{
    struct bf_sim *s;
    char err[256];
    int rc = bf_sim_open(c, &s, err, sizeof err);
    if (rc) {
        fprintf(stderr, "bench_simprovider: bf_sim_open: %s (%d)\n", err, rc);
        exit(1);
    }
    return s;
}

/* The List in r again, through protobuf-c: the ids in the reply's order are
 * looked up, one struct per machine is built from the simulator's records and
 * MachineList is packed. Returns the bytes (the caller frees them) and their
 * length; *seconds = the build and pack alone (not the preparatory unpack). */
static uint8_t *pbc_repack(struct bf_sim *s, const struct bf_sim_reply *r, size_t *len,
                           double *seconds)
{
    Bigfleet__V1alpha1__MachineList *parsed =
        bigfleet__v1alpha1__machine_list__unpack(NULL, r->len, r->body);
    size_t n = parsed->n_machines;
    uint32_t *idx = calloc(n + 1, sizeof *idx);
    for (size_t i = 0; i < n; i++)
        idx[i] = bf_sim_find_machine(s, parsed->machines[i]->id, strlen(parsed->machines[i]->id));
    Bigfleet__V1alpha1__MachineList ml = BIGFLEET__V1ALPHA1__MACHINE_LIST__INIT;
    ml.revision = parsed->revision;
    struct sim_pb_machine **pm = calloc(n + 1, sizeof *pm);
    Bigfleet__V1alpha1__Machine **msgs = calloc(n + 1, sizeof *msgs);
    double t = now_s();
    for (size_t i = 0; i < n; i++) {
        pm[i] = bf_sim_machine_pb(s, idx[i]);
        msgs[i] = bf_sim_machine_pb_msg(pm[i]);
    }
    ml.n_machines = n;
    ml.machines = msgs;
    size_t want = protobuf_c_message_get_packed_size(&ml.base);
    uint8_t *buf = malloc(want + 1);
    *len = protobuf_c_message_pack(&ml.base, buf);
    *seconds = now_s() - t;
    for (size_t i = 0; i < n; i++)
        bf_sim_machine_pb_free(pm[i]);
    free(pm);
    free(msgs);
    free(idx);
    bigfleet__v1alpha1__machine_list__free_unpacked(parsed, NULL);
    return buf;
}

/* the same List through protobuf-c must be the production bytes, exactly */
static size_t pack_with_protobuf_c(struct bf_sim *s, const struct bf_sim_reply *r)
{
    size_t packed;
    double t;
    uint8_t *buf = pbc_repack(s, r, &packed, &t);
    if (packed != r->len || memcmp(buf, r->body, packed) != 0) {
        fprintf(stderr, "bench_simprovider: protobuf-c bytes differ from the production List\n");
        exit(1);
    }
    free(buf);
    return packed;
}

/* time of pack_with_protobuf_c minus its preparatory unpack, measured apart */
static double time_protobuf_c(struct bf_sim *s, const struct bf_sim_reply *r)
{
    size_t len;
    double t;
    free(pbc_repack(s, r, &len, &t));
    return t;
}

static void list_req(const char *since, uint8_t *buf, size_t *len)
{
    Bigfleet__V1alpha1__ListFilter f = BIGFLEET__V1ALPHA1__LIST_FILTER__INIT;
    f.since_revision.data = (uint8_t *)since;
    f.since_revision.len = since ? strlen(since) : 0;
    *len = protobuf_c_message_pack(&f.base, buf);
}

struct list_fig {
    double prod_s, pbc_s;
    size_t bytes, machines;
};

static struct list_fig bench_list(struct bf_sim *s, const char *since)
{
    uint8_t req[64];
    size_t rl;
    list_req(since, req, &rl);
    double t[REPS], tp[REPS];
    struct bf_sim_reply r = {0};
    for (int i = 0; i < REPS; i++) {
        struct bf_sim_reply fresh = {0}; /* a fresh buffer each time, as a server would */
        double a = now_s();
        bf_sim_handle(s, BF_SIM_RPC_LIST, req, rl, T0, &fresh);
        t[i] = now_s() - a;
        if (fresh.code) {
            fprintf(stderr, "bench_simprovider: List failed: %s\n", fresh.message);
            exit(1);
        }
        bf_sim_reply_free(&r);
        r = fresh;
    }
    struct list_fig f = {.prod_s = bench_median(t, REPS), .bytes = r.len};
    pack_with_protobuf_c(s, &r); /* verifies byte identity once */
    for (int i = 0; i < REPS; i++)
        tp[i] = time_protobuf_c(s, &r);
    f.pbc_s = bench_median(tp, REPS);
    Bigfleet__V1alpha1__MachineList *l =
        bigfleet__v1alpha1__machine_list__unpack(NULL, r.len, r.body);
    f.machines = l->n_machines;
    bigfleet__v1alpha1__machine_list__free_unpacked(l, NULL);
    bf_sim_reply_free(&r);
    return f;
}

static void pack_create(const char *id, const char *shard, int64_t seq, uint8_t *buf, size_t *len)
{
    Bigfleet__V1alpha1__CreateRequest q = BIGFLEET__V1ALPHA1__CREATE_REQUEST__INIT;
    q.machine_id = (char *)id;
    q.shard_id = (char *)shard;
    q.shard_epoch = 1;
    q.sequence_number = seq;
    *len = protobuf_c_message_pack(&q.base, buf);
}

/* Create, Configure (5 metadata keys), Drain, Delete on every machine, each a
 * fenced request through bf_sim_handle. Returns RPCs per second. */
static double cycle_rate(struct bf_sim *s, size_t machines, int64_t now)
{
    static const char *const keys[5] = {BF_MD_PRIORITY, BF_MD_INTERRUPTION, BF_MD_RECLAMATION,
                                        BF_MD_FINGERPRINT, BF_MD_GROUP};
    static const char *const vals[5] = {"1000", "8192", "65536",
                                        "p=1000|ipb=16|rpb=19|reqs=|spr=", ""};
    uint8_t buf[1024];
    size_t len;
    struct bf_sim_reply r = {0};
    int64_t seq = bf_mono_ns(); /* strictly increasing across calls */
    size_t rpcs = 0;
    double t = now_s();
    for (size_t i = 0; i < machines; i++) {
        const char *id = bf_sim_machine_id(s, i);
        pack_create(id, "bench-shard", ++seq, buf, &len);
        bf_sim_handle(s, BF_SIM_RPC_CREATE, buf, len, now, &r);
        Bigfleet__V1alpha1__ConfigureRequest c = BIGFLEET__V1ALPHA1__CONFIGURE_REQUEST__INIT;
        Bigfleet__V1alpha1__ConfigureRequest__ShardMetadataEntry e[5], *ep[5];
        for (int k = 0; k < 5; k++) {
            Bigfleet__V1alpha1__ConfigureRequest__ShardMetadataEntry init =
                BIGFLEET__V1ALPHA1__CONFIGURE_REQUEST__SHARD_METADATA_ENTRY__INIT;
            e[k] = init;
            e[k].key = (char *)keys[k];
            e[k].value.data = (uint8_t *)vals[k];
            e[k].value.len = strlen(vals[k]);
            ep[k] = &e[k];
        }
        c.machine_id = (char *)id;
        c.cluster_id = "cluster-7";
        c.bootstrap_blob.data = (uint8_t *)"#cloud-config\n";
        c.bootstrap_blob.len = 14;
        c.shard_id = "bench-shard";
        c.shard_epoch = 1;
        c.sequence_number = ++seq;
        c.n_shard_metadata = 5;
        c.shard_metadata = ep;
        len = protobuf_c_message_pack(&c.base, buf);
        bf_sim_handle(s, BF_SIM_RPC_CONFIGURE, buf, len, now, &r);
        Bigfleet__V1alpha1__DrainRequest d = BIGFLEET__V1ALPHA1__DRAIN_REQUEST__INIT;
        d.machine_id = (char *)id;
        d.grace_period_seconds = 30;
        d.shard_id = "bench-shard";
        d.shard_epoch = 1;
        d.sequence_number = ++seq;
        len = protobuf_c_message_pack(&d.base, buf);
        bf_sim_handle(s, BF_SIM_RPC_DRAIN, buf, len, now, &r);
        Bigfleet__V1alpha1__DeleteRequest x = BIGFLEET__V1ALPHA1__DELETE_REQUEST__INIT;
        x.machine_id = (char *)id;
        x.shard_id = "bench-shard";
        x.shard_epoch = 1;
        x.sequence_number = ++seq;
        len = protobuf_c_message_pack(&x.base, buf);
        bf_sim_handle(s, BF_SIM_RPC_DELETE, buf, len, now, &r);
        if (r.code) {
            fprintf(stderr, "bench_simprovider: cycle failed on %s: %s\n", id, r.message);
            exit(1);
        }
        rpcs += 4;
    }
    t = now_s() - t;
    bf_sim_reply_free(&r);
    return (double)rpcs / t;
}

int main(int argc, char **argv)
{
    const char *csv = bench_openb_csv(argc, argv);
    struct bf_sim_config c;
    bf_sim_config_init(&c);
    c.catalog_path = csv;
    c.seed_speculative = 18519; /* x 27 openb shapes = 500,013 machines */
    /* --- seed */
    double ts[REPS];
    struct bf_sim *s = NULL;
    for (int i = 0; i < REPS; i++) {
        if (s)
            bf_sim_close(s);
        double a = now_s();
        s = open_or_die(&c);
        ts[i] = now_s() - a;
    }
    double seed_s = bench_median(ts, REPS);
    size_t pool = bf_sim_machine_count(s);
    /* --- full List */
    struct list_fig full = bench_list(s, NULL);
    /* --- incremental List after k changes (Create on k spread-out Speculative slots) */
    static const size_t ks[] = {100, 1000, 10000};
    struct list_fig inc[3];
    for (int j = 0; j < 3; j++) {
        char rev[32];
        snprintf(rev, sizeof rev, "%lld", (long long)bf_sim_revision(s));
        size_t step = pool / ks[j];
        struct bf_sim_reply r = {0};
        uint8_t buf[256];
        size_t len;
        for (size_t k = 0; k < ks[j]; k++) {
            const char *id = bf_sim_machine_id(s, k * step + (size_t)j);
            pack_create(id, "", 0, buf, &len);
            bf_sim_handle(s, BF_SIM_RPC_CREATE, buf, len, T0, &r);
        }
        bf_sim_reply_free(&r);
        inc[j] = bench_list(s, rev);
        if (inc[j].machines != ks[j]) {
            fprintf(stderr, "bench_simprovider: delta of %zu changes listed %zu machines\n", ks[j],
                    inc[j].machines);
            return 1;
        }
    }
    /* --- Get */
    double tg;
    {
        uint8_t buf[256];
        struct bf_sim_reply r = {0};
        size_t n = 200000;
        Bigfleet__V1alpha1__MachineRef q = BIGFLEET__V1ALPHA1__MACHINE_REF__INIT;
        double a = now_s();
        for (size_t i = 0; i < n; i++) {
            q.id = (char *)bf_sim_machine_id(s, (i * 7919) % pool);
            size_t len = protobuf_c_message_pack(&q.base, buf);
            bf_sim_handle(s, BF_SIM_RPC_GET, buf, len, T0, &r);
        }
        tg = (now_s() - a) / (double)n;
        bf_sim_reply_free(&r);
    }
    bf_sim_close(s);
    /* --- accepts/s: instant transitions, in memory */
    struct bf_sim_config cc;
    bf_sim_config_init(&cc);
    cc.catalog_path = csv;
    cc.seed_speculative = 2000;                 /* 54,000 machines */
    cc.bare_metal_delete_unimplemented = false; /* full cycles on every type */
    double acc_mem[REPS];
    s = open_or_die(&cc);
    size_t nm = bf_sim_machine_count(s);
    for (int i = 0; i < REPS; i++)
        acc_mem[i] = cycle_rate(s, nm, T0);
    bf_sim_close(s);
    /* --- accepts/s with LMDB write-through (one commit per RPC) */
    char dir[] = "/tmp/bf-simbench-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    cc.state_path = dir;
    cc.seed_speculative = 200; /* 5,400 machines */
    double acc_lmdb[REPS];
    s = open_or_die(&cc);
    nm = bf_sim_machine_count(s);
    for (int i = 0; i < REPS; i++)
        acc_lmdb[i] = cycle_rate(s, nm, T0);
    bf_sim_close(s);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_simprovider: could not remove %s\n", dir);
    cc.state_path = NULL;
    /* --- staged: Create with uniform(1s,3s), then complete through advance */
    cc.seed_speculative = 10000; /* 270,000 machines */
    bf_sim_dist_parse("uniform(1s,3s)", &cc.transition_latency[BF_SIM_RPC_CREATE]);
    s = open_or_die(&cc);
    nm = bf_sim_machine_count(s);
    double a = now_s();
    {
        uint8_t buf[256];
        size_t len;
        struct bf_sim_reply r = {0};
        for (size_t i = 0; i < nm; i++) {
            pack_create(bf_sim_machine_id(s, i), "", 0, buf, &len);
            bf_sim_handle(s, BF_SIM_RPC_CREATE, buf, len, T0, &r);
        }
        bf_sim_reply_free(&r);
    }
    double staged_acc = (double)nm / (now_s() - a);
    a = now_s();
    size_t done = 0;
    for (int64_t t = T0; done < nm; t += 10 * BF_NS_PER_MS)
        done += (size_t)bf_sim_advance(s, t);
    double completions = (double)nm / (now_s() - a);
    bf_sim_close(s);

    double am = bench_median(acc_mem, REPS), al = bench_median(acc_lmdb, REPS);
    printf("bench_simprovider (%zu machines, openb catalog, %s)\n", pool, csv);
    printf("  seed 500K pool                      %10.3f s\n", seed_s);
    printf("  List full       production encoder  %10.3f s  %9zu bytes  %zu machines\n",
           full.prod_s, full.bytes, full.machines);
    printf("                  protobuf-c pack     %10.3f s\n", full.pbc_s);
    for (int j = 0; j < 3; j++) {
        printf("  List since (k=%5zu) production      %10.6f s  %9zu bytes\n", ks[j], inc[j].prod_s,
               inc[j].bytes);
        printf("                  protobuf-c pack     %10.6f s\n", inc[j].pbc_s);
    }
    printf("  Get                                 %10.3f us\n", tg * 1e6);
    printf("  lifecycle RPCs/s, instant, memory   %10.0f\n", am);
    printf("  lifecycle RPCs/s, instant, LMDB     %10.0f\n", al);
    printf("  Create accepts/s, staged            %10.0f\n", staged_acc);
    printf("  completions/s via bf_sim_advance    %10.0f\n", completions);

    mkdir("results", 0755);
    FILE *f = fopen("results/bench_simprovider.json", "w");
    if (!f) {
        perror("results/bench_simprovider.json");
        return 1;
    }
    struct utsname u;
    uname(&u);
    time_t now = time(NULL);
    char date[32];
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    fprintf(f, "{\n  \"bench\": \"bench_simprovider\",\n  \"date\": \"%s\",\n", date);
    fprintf(f, "  \"host\": \"%s %s\", \"cpus\": %ld,\n", u.sysname, u.release,
            sysconf(_SC_NPROCESSORS_ONLN));
    fprintf(f, "  \"pool_machines\": %zu,\n  \"seed_s\": %.6f,\n", pool, seed_s);
    fprintf(f,
            "  \"list_full\": {\"seconds\": %.6f, \"protobuf_c_seconds\": %.6f, \"bytes\": %zu},\n",
            full.prod_s, full.pbc_s, full.bytes);
    fprintf(f, "  \"list_incremental\": [\n");
    for (int j = 0; j < 3; j++)
        fprintf(f,
                "    {\"changes\": %zu, \"seconds\": %.9f, \"protobuf_c_seconds\": %.9f, "
                "\"bytes\": %zu}%s\n",
                ks[j], inc[j].prod_s, inc[j].pbc_s, inc[j].bytes, j < 2 ? "," : "");
    fprintf(f, "  ],\n  \"get_us\": %.3f,\n", tg * 1e6);
    fprintf(f, "  \"lifecycle_rpcs_per_s_memory\": %.0f,\n", am);
    fprintf(f, "  \"lifecycle_rpcs_per_s_lmdb\": %.0f,\n", al);
    fprintf(f, "  \"staged_create_accepts_per_s\": %.0f,\n", staged_acc);
    fprintf(f, "  \"advance_completions_per_s\": %.0f\n}\n", completions);
    fclose(f);
    return 0;
}
