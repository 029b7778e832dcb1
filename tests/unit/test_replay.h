/*
 * test_replay.h — shared by the tests/unit/test_replay_*.c suites.
 *
 * The GNUmakefile links unit tests against the libraries only, and
 * bigfleet-replay is a tool (the sources in tools/replay, no library), so each suite
 * compiles the tool's sources into itself through this header (everything
 * but main.c). Also: small builders for traces and catalogs.
 */
#ifndef TEST_REPLAY_H
#define TEST_REPLAY_H

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "../../tools/replay/bound.c"
#include "../../tools/replay/contend.c"
#include "../../tools/replay/cost.c"
#include "../../tools/replay/model.c"
#include "../../tools/replay/report.c"
#include "../../tools/replay/run.c"
#include "../../tools/replay/scrape.c"
#include "../../tools/replay/supply.c"
#include "../../tools/replay/trace.c"

#define POD_HEADER                                                                                 \
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"            \
    "deletion_time,scheduled_time\n"

/* Parses a trace held in a string; fails the test on error. */
static inline void load_trace(struct rp_trace *t, const char *csv)
{
    char err[512] = "";
    int rc = rp_trace_parse("t.csv", csv, strlen(csv), NULL, t, err, sizeof err);
    ck_assert_msg(rc == 0, "parse failed: %s", err);
}

/* A catalog type. */
static inline struct bf_sim_type mk_type(const char *name, int64_t cpu_milli, int64_t mem_mib,
                                         int gpus, const char *model, double price)
{
    struct bf_sim_type t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "%s", name);
    t.cpu_milli = cpu_milli;
    t.memory_mib = mem_mib;
    t.gpus = gpus;
    snprintf(t.gpu_model, sizeof t.gpu_model, "%s", model ? model : "");
    t.capacity_type = BF_CT_ON_DEMAND;
    t.price_per_hour = price;
    return t;
}

/* The index of the class whose fingerprint contains every fragment (NULL-terminated). */
static inline int class_with(const struct rp_model *m, const char *frag)
{
    for (size_t i = 0; i < m->n_classes; i++)
        if (strstr(m->classes[i].fp, frag))
            return (int)i;
    return -1;
}

/* Interns the shape of a catalog type as a NodeStateUpdate would carry it. */
static inline uint32_t shape_of(struct rp_shapes *s, const struct rp_model *m,
                                const struct bf_sim_type *t, const char *zone)
{
    const char *k[5], *v[5];
    char gpus[16];
    size_t n = 0;
    k[n] = BF_LABEL_INSTANCE_TYPE;
    v[n++] = t->name;
    k[n] = BF_LABEL_ZONE;
    v[n++] = zone;
    k[n] = BF_SIM_LABEL_RACK;
    v[n++] = "rack-x";
    if (t->gpus) {
        snprintf(gpus, sizeof gpus, "%d", t->gpus);
        k[n] = BF_SIM_LABEL_GPU_MODEL;
        v[n++] = t->gpu_model;
        k[n] = BF_SIM_LABEL_GPU_COUNT;
        v[n++] = gpus;
    }
    rp_res a = {{t->cpu_milli, t->memory_mib, (int64_t)t->gpus * 1000}};
    int sh = rp_shape_intern(s, m, n, k, v, &a);
    ck_assert_int_ge(sh, 0);
    return (uint32_t)sh;
}

static inline struct rp_need mk_need(uint32_t cls, int64_t cpu, int64_t mem, int64_t gpu,
                                     int64_t mcpu, int64_t mmem, int64_t mgpu)
{
    struct rp_need n;
    memset(&n, 0, sizeof n);
    n.cls = cls;
    n.pods = 1;
    n.agg = (rp_res){{cpu, mem, gpu}};
    n.min_unit = (rp_res){{mcpu, mmem, mgpu}};
    return n;
}

#endif
