/*
 * test_provider.h — fixtures shared by test_provider*.c, test_reconciler*.c
 * and test_executor*.c (static, header-only: every tests/unit/test_*.c is
 * its own binary).
 *
 * A fixture is everything the provider path needs, in one process and on one
 * event loop: a simulated provider core served over real gRPC on 127.0.0.1
 * (src/simprovider/sim_server.c), a provider client to it, and (optionally) a
 * private set of shared segments. check forks each test: everything is
 * created inside the test (io_uring rings and LMDB must not cross fork()).
 * Machines and lists for the decoder and the reconciler are packed with
 * protobuf-c from a small spec (struct tmach), so every test goes through
 * the wire encoding.
 */
#ifndef TEST_PROVIDER_H
#define TEST_PROVIDER_H

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bigfleet/blobs.h"
#include "bigfleet/net.h"
#include "bigfleet/provider.h"
#include "bigfleet/shm.h"
#include "bigfleet/simprovider.h"
#include "bigfleet/util.h"
#include "bigfleet/v1alpha1/provider.pb-c.h"
#include "reconciler/reconciler.h"
#include "simprovider/sim_server.h"

#define PT_UNUSED __attribute__((unused))
#define MS        BF_NS_PER_MS
#define SEC       BF_NS_PER_SEC

struct pfx {
    struct bf_net_loop *loop;
    struct bf_sim *sim;
    struct bf_simsrv *srv;
    struct bf_prov_client *cl;
    struct bf_shm shm;
    bool have_shm;
    char shard[64];
    char addr[64];
};

/* Opens loop + sim (cfg may be NULL: defaults) + server + client (shard id
 * "ut-shard", epoch 1) and, with shm, private segments. */
static PT_UNUSED void pfx_open(struct pfx *f, const struct bf_sim_config *cfg, bool shm)
{
    memset(f, 0, sizeof *f);
    ck_assert_int_eq(bf_net_loop_new(NULL, &f->loop), 0);
    struct bf_sim_config c;
    if (cfg) {
        c = *cfg;
    } else {
        bf_sim_config_init(&c);
    }
    char err[256] = "";
    int rc = bf_sim_open(&c, &f->sim, err, sizeof err);
    ck_assert_msg(rc == 0, "bf_sim_open: %s", err);
    struct bf_simsrv_opts so = {.addr = "127.0.0.1:0"};
    ck_assert_int_eq(bf_simsrv_new(f->loop, f->sim, &so, &f->srv), 0);
    snprintf(f->addr, sizeof f->addr, "127.0.0.1:%u", bf_simsrv_port(f->srv));
    struct bf_prov_opts po = {.addr = f->addr, .shard_id = "ut-shard", .epoch = 1};
    ck_assert_int_eq(bf_prov_client_new(f->loop, &po, &f->cl), 0);
    if (shm) {
        snprintf(f->shard, sizeof f->shard, "ut-prov-%d", (int)getpid());
        bf_shm_unlink(f->shard);
        struct bf_shm_caps caps = {.max_machines = 4096, .max_needs = 256, .max_clusters = 16};
        rc = bf_shm_create(&f->shm, f->shard, &caps, 1, 0, err, sizeof err);
        ck_assert_msg(rc == 0, "bf_shm_create: %s", err);
        f->have_shm = true;
    }
}

/* Runs the loop until *flag or timeout; returns whether *flag became true. */
static PT_UNUSED bool pfx_run_until(struct pfx *f, const bool *flag, int64_t timeout_ns)
{
    int64_t end = bf_mono_ns() + timeout_ns;
    while (!*flag && bf_mono_ns() < end)
        bf_net_loop_run_once(f->loop, 5 * MS);
    return *flag;
}

static PT_UNUSED void pfx_run_for(struct pfx *f, int64_t ns)
{
    int64_t end = bf_mono_ns() + ns;
    while (bf_mono_ns() < end)
        bf_net_loop_run_once(f->loop, 2 * MS);
}

static PT_UNUSED void pfx_close(struct pfx *f)
{
    bf_prov_client_free(f->cl);
    bf_simsrv_free(f->srv);
    for (int i = 0; i < 5; i++)
        bf_net_loop_run_once(f->loop, MS);
    bf_net_loop_free(f->loop);
    bf_sim_close(f->sim);
    if (f->have_shm) {
        bf_shm_detach(&f->shm);
        bf_shm_unlink(f->shard);
    }
}

/* ------------------------------------------------------------ machines on the wire */

struct tkv {
    const char *k, *v;
    size_t vlen; /* metadata values: 0 = strlen(v) */
};
struct tmach {
    const char *id;
    int state;
    const char *host_provider, *host_ref;
    const char *type, *zone;
    int ct;
    double price, prob;
    struct tkv labels[8], res[4], alloc[4], md[8];
    const char *cluster, *last_error;
};

static PT_UNUSED int tkv_count(const struct tkv *a, int max)
{
    int n = 0;
    while (n < max && a[n].k)
        n++;
    return n;
}

/* Fills a protobuf-c Machine from a spec; storage comes from the arrays in st. */
struct tmach_store {
    Bigfleet__V1alpha1__HostRef host;
    Bigfleet__V1alpha1__Resources res, alloc;
    Bigfleet__V1alpha1__Resources__ResourcesEntry re[4], ae[4], *rp[4], *ap[4];
    Bigfleet__V1alpha1__Machine__LabelsEntry le[8], *lp[8];
    Bigfleet__V1alpha1__Machine__ShardMetadataEntry me[8], *mp[8];
};

static PT_UNUSED void tmach_fill(const struct tmach *t, Bigfleet__V1alpha1__Machine *m,
                                 struct tmach_store *st)
{
    bigfleet__v1alpha1__machine__init(m);
    m->id = (char *)(t->id ? t->id : "");
    m->state = (Bigfleet__V1alpha1__MachineState)t->state;
    if (t->host_provider || t->host_ref) {
        bigfleet__v1alpha1__host_ref__init(&st->host);
        st->host.provider = (char *)(t->host_provider ? t->host_provider : "");
        st->host.ref = (char *)(t->host_ref ? t->host_ref : "");
        m->host = &st->host;
    }
    m->instance_type = (char *)(t->type ? t->type : "");
    m->zone = (char *)(t->zone ? t->zone : "");
    m->capacity_type = (Bigfleet__V1alpha1__CapacityType)t->ct;
    m->price_per_hour = t->price;
    m->interruption_probability = t->prob;
    int nr = tkv_count(t->res, 4), na = tkv_count(t->alloc, 4), nl = tkv_count(t->labels, 8),
        nm = tkv_count(t->md, 8);
    if (nr) {
        bigfleet__v1alpha1__resources__init(&st->res);
        for (int i = 0; i < nr; i++) {
            bigfleet__v1alpha1__resources__resources_entry__init(&st->re[i]);
            st->re[i].key = (char *)t->res[i].k;
            st->re[i].value = (char *)t->res[i].v;
            st->rp[i] = &st->re[i];
        }
        st->res.n_resources = (size_t)nr;
        st->res.resources = st->rp;
        m->resources = &st->res;
    }
    if (na) {
        bigfleet__v1alpha1__resources__init(&st->alloc);
        for (int i = 0; i < na; i++) {
            bigfleet__v1alpha1__resources__resources_entry__init(&st->ae[i]);
            st->ae[i].key = (char *)t->alloc[i].k;
            st->ae[i].value = (char *)t->alloc[i].v;
            st->ap[i] = &st->ae[i];
        }
        st->alloc.n_resources = (size_t)na;
        st->alloc.resources = st->ap;
        m->allocatable = &st->alloc;
    }
    for (int i = 0; i < nl; i++) {
        bigfleet__v1alpha1__machine__labels_entry__init(&st->le[i]);
        st->le[i].key = (char *)t->labels[i].k;
        st->le[i].value = (char *)t->labels[i].v;
        st->lp[i] = &st->le[i];
    }
    m->n_labels = (size_t)nl;
    m->labels = nl ? st->lp : NULL;
    for (int i = 0; i < nm; i++) {
        bigfleet__v1alpha1__machine__shard_metadata_entry__init(&st->me[i]);
        st->me[i].key = (char *)t->md[i].k;
        st->me[i].value.data = (uint8_t *)t->md[i].v;
        st->me[i].value.len = t->md[i].vlen ? t->md[i].vlen : strlen(t->md[i].v);
        st->mp[i] = &st->me[i];
    }
    m->n_shard_metadata = (size_t)nm;
    m->shard_metadata = nm ? st->mp : NULL;
    m->cluster = (char *)(t->cluster ? t->cluster : "");
    m->last_error = (char *)(t->last_error ? t->last_error : "");
}

static PT_UNUSED uint8_t *tmach_pack(const struct tmach *t, size_t *len)
{
    Bigfleet__V1alpha1__Machine m;
    struct tmach_store st;
    tmach_fill(t, &m, &st);
    *len = bigfleet__v1alpha1__machine__get_packed_size(&m);
    uint8_t *b = malloc(*len ? *len : 1);
    bigfleet__v1alpha1__machine__pack(&m, b);
    return b;
}

static PT_UNUSED uint8_t *tlist_pack(const struct tmach *ts, int n, const char *rev, size_t *len)
{
    Bigfleet__V1alpha1__Machine *ms = calloc((size_t)n + 1, sizeof *ms);
    Bigfleet__V1alpha1__Machine **mp = calloc((size_t)n + 1, sizeof *mp);
    struct tmach_store *st = calloc((size_t)n + 1, sizeof *st);
    for (int i = 0; i < n; i++) {
        tmach_fill(&ts[i], &ms[i], &st[i]);
        mp[i] = &ms[i];
    }
    Bigfleet__V1alpha1__MachineList l = BIGFLEET__V1ALPHA1__MACHINE_LIST__INIT;
    l.n_machines = (size_t)n;
    l.machines = mp;
    if (rev) {
        l.revision.data = (uint8_t *)rev;
        l.revision.len = strlen(rev);
    }
    *len = bigfleet__v1alpha1__machine_list__get_packed_size(&l);
    uint8_t *b = malloc(*len ? *len : 1);
    bigfleet__v1alpha1__machine_list__pack(&l, b);
    free(ms);
    free(mp);
    free(st);
    return b;
}

/* A well-formed Idle machine of one shape (labels, resources, allocatable). */
static PT_UNUSED struct tmach tmach_idle(const char *id)
{
    struct tmach t = {
        .id = id,
        .state = BF_STATE_IDLE,
        .host_provider = "prov",
        .host_ref = "i-1",
        .type = "m6i.large",
        .zone = "zone-a",
        .ct = BF_CT_ON_DEMAND,
        .price = 0.096,
        .prob = 0.05,
        .labels = {{"topology.bigfleet/rack", "zone-a-rack-0"}},
        .res = {{"cpu", "2"}, {"memory", "8Gi"}},
        .alloc = {{"cpu", "2"}, {"memory", "8Gi"}},
    };
    return t;
}

/* ------------------------------------------------------------ call capture */

struct capture {
    bool done;
    struct bf_prov_result r;
    char message[256];
    char op_id[64];
    int state; /* of the returned machine, -1 none */
    uint32_t n_machines;
    char revision[64];
};

static PT_UNUSED void cap_result(struct capture *c, const struct bf_prov_result *r)
{
    c->done = true;
    c->r = *r;
    snprintf(c->message, sizeof c->message, "%s", r->message);
    c->r.message = c->message;
}

static PT_UNUSED void cap_ack(void *arg, const struct bf_prov_result *r,
                              const struct bf_prov_ack *a)
{
    struct capture *c = arg;
    cap_result(c, r);
    c->state = a && a->has_machine ? a->machine.state : -1;
    if (a)
        snprintf(c->op_id, sizeof c->op_id, "%.*s", (int)a->operation_id.len,
                 (const char *)a->operation_id.p);
}

static PT_UNUSED void cap_machine(void *arg, const struct bf_prov_result *r,
                                  const struct bf_prov_machine *m)
{
    struct capture *c = arg;
    cap_result(c, r);
    c->state = m ? m->state : -1;
}

static PT_UNUSED void cap_list(void *arg, const struct bf_prov_result *r,
                               const struct bf_prov_list *l)
{
    struct capture *c = arg;
    cap_result(c, r);
    c->state = -1;
    if (l) {
        c->n_machines = l->n_machines;
        snprintf(c->revision, sizeof c->revision, "%.*s", (int)l->revision.len,
                 (const char *)l->revision.p);
    }
}

/* A reconciler pass's completion (bf_recon_step's callback): done, and its result. */
struct donecap {
    bool done;
    struct bf_recon_result r;
};

static PT_UNUSED void on_done(void *arg, const struct bf_recon_result *r)
{
    struct donecap *d = arg;
    d->done = true;
    d->r = *r;
}

/* The id of the first machine of the sim in a state (test setup). */
static PT_UNUSED const char *sim_first_in_state(struct bf_sim *sim, int state)
{
    size_t n = bf_sim_machine_count(sim);
    for (size_t i = 0; i < n; i++) {
        struct bf_sim_view v;
        const char *id = bf_sim_machine_id(sim, i);
        if (id && bf_sim_lookup(sim, id, &v) == 0 && v.state == state)
            return id;
    }
    return NULL;
}

#endif
