/*
 * engine_fixtures.h — test helpers for the decision-engine suites: a small
 * machine table mirrored into an engine, profile and Need builders, the
 * reference/engine.md §10 helpers (gpuNeed, gpuProfile, gpuMachine, ...),
 * an action applier that plays the executor, and result queries.
 * Every name is prefixed ef_ (this file is linked into every unit test).
 */
#ifndef ENGINE_FIXTURES_H
#define ENGINE_FIXTURES_H

#include <stdbool.h>
#include <stdint.h>

#include "bigfleet/engine.h"

/* dimension indices used by the fixtures */
#define EF_CPU 0
#define EF_MEM 1
#define EF_GPU 2
#define EF_GI  (1024LL * 1024 * 1024 * 1000) /* 1Gi in milli-units */

#define EF_A3   "a3-highgpu-8g"
#define EF_MAXL 6

struct ef_machine {
    bool used;
    char id[64];
    uint8_t state, ct;
    char itype[48], zone[48];
    char lk[EF_MAXL][64], lv[EF_MAXL][64];
    uint32_t nl;
    bf_vec alloc;
    char cluster[48];
    double price, prob;
    int32_t prio;
    uint8_t ipb, rpb;
    char fp[512];
    char group[64];
    int64_t idle_since;
};

struct ef {
    struct bf_engine *e;
    struct bf_engine_config cfg;
    uint32_t cap;
    struct ef_machine *m;
    uint32_t next;
    int64_t now_ns;
    uint64_t gen;
    struct bf_engine_result r;
    int rc;
};

struct ef_prof {
    struct bf_need_profile p;
    struct bf_requirement reqs[8];
    const char *vals[8][16];
    struct bf_spread spr[4];
};

/* harness */
struct ef *ef_new(uint32_t cap, uint32_t flags);
struct ef *ef_new_cfg(const struct bf_engine_config *c);
void ef_free(struct ef *f);
uint32_t ef_add(struct ef *f, const struct ef_machine *m); /* returns the slot */
void ef_sync(struct ef *f, uint32_t slot);                 /* re-upsert f->m[slot] */
/* upserts (or removes, when !m->used) one table row into any engine */
int ef_sync_to(struct bf_engine *e, uint32_t slot, const struct ef_machine *m);
void ef_del(struct ef *f, uint32_t slot);
uint32_t ef_slot(const struct ef *f, const char *id); /* UINT32_MAX if absent */
int ef_cycle(struct ef *f);                           /* runs a cycle into f->r */
void ef_apply(struct ef *f);                          /* executes f->r's actions */
/* what executing a Bootstrap/Provision stamps on the machine: a's priority,
 * buckets, fingerprint and group (cut to 63 bytes); no longer idle */
void ef_stamp_assignment(struct ef_machine *m, const struct bf_engine_action *a);
void ef_first_rollup(struct ef *f, const char *cluster);

/* machines */
struct ef_machine ef_machine(const char *id, uint8_t state, const char *itype, const char *zone);
void ef_label(struct ef_machine *m, const char *k, const char *v);
struct ef_machine ef_gpu_machine(const char *id); /* Idle bare metal */
struct ef_machine ef_gpu_in_zone(const char *id, const char *zone, double price);
struct ef_machine ef_configured(const char *id, const char *cluster, int32_t prio, double ip,
                                double rp); /* on-demand $6, gpu 8 */
void ef_bind(struct ef_machine *m, const char *cluster, const struct ef_prof *p,
             const char *group); /* Configured stamps from a profile */

/* profiles and needs */
void ef_prof_init(struct ef_prof *p, int32_t prio, uint8_t ipb, uint8_t rpb);
void ef_prof_req(struct ef_prof *p, const char *key, uint8_t op, const char *const *vals,
                 uint32_t nv);
void ef_prof_in(struct ef_prof *p, const char *key, const char *v1);
void ef_prof_spread(struct ef_prof *p, const char *key, int32_t skew, uint8_t when);
void ef_gpu_profile(struct ef_prof *p, int32_t prio);
void ef_gpu_profile_same(struct ef_prof *p, int32_t prio, const char *key);
const char *ef_fp(const struct ef_prof *p); /* static buffer */
struct bf_engine_need ef_need(const struct ef_prof *p, bf_vec agg, bf_vec minu, int64_t arrival,
                              const char *group);
struct bf_engine_need ef_gpu_need(const struct ef_prof *p, int units, const char *group);
bf_vec ef_vec(int64_t cpu, int64_t mem, int64_t gpu); /* milli-units */
bf_vec ef_gpu(int64_t gpus);                          /* whole GPUs */
int ef_set(struct ef *f, const char *cluster, const struct bf_engine_need *n, size_t k);
/* cluster's whole demand := one Need of `units` 8-GPU units (group NULL: no
 * gang) in ef_gpu_profile(prio), plus Same(same_key) when same_key is given;
 * returns ef_set's result */
int ef_want_gpus(struct ef *f, const char *cluster, int32_t prio, const char *same_key, int units,
                 const char *group);

/* result queries */
uint32_t ef_count(const struct ef *f, int kind);
uint32_t ef_count_cluster(const struct ef *f, int kind, const char *cluster);
const struct bf_engine_action *ef_action_for(const struct ef *f, const char *machine_id);
bool ef_acted(const struct ef *f, const char *machine_id, int kind);
const struct bf_engine_verdict *ef_verdict(const struct ef *f, const char *cluster, uint32_t nth);
uint32_t ef_unsatisfied(const struct ef *f);
const struct bf_engine_verdict *ef_first_unsatisfied(const struct ef *f);

/* deterministic PRNG for randomized tests */
uint64_t ef_rand(uint64_t *s);

#endif /* ENGINE_FIXTURES_H */
