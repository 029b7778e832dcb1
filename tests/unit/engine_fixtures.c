/*
 * engine_fixtures.c — helpers for the engine suites (see engine_fixtures.h).
 * Aborts on setup errors: a fixture that cannot be built is a broken test.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_fixtures.h"

static void ef_die(const char *what)
{
    fprintf(stderr, "engine fixture: %s\n", what);
    abort();
}

struct ef *ef_new_cfg(const struct bf_engine_config *c)
{
    struct ef *f = calloc(1, sizeof *f);
    if (!f)
        ef_die("oom");
    f->cfg = *c;
    f->cap = c->capacity;
    f->m = calloc(f->cap, sizeof *f->m);
    if (!f->m || bf_engine_new(c, &f->e))
        ef_die("engine_new");
    f->now_ns = 1700000000LL * 1000000000LL;
    return f;
}

struct ef *ef_new(uint32_t cap, uint32_t flags)
{
    struct bf_engine_config c;
    bf_engine_config_defaults(&c);
    c.capacity = cap;
    c.flags = flags;
    return ef_new_cfg(&c);
}

void ef_free(struct ef *f)
{
    if (!f)
        return;
    bf_engine_free(f->e);
    free(f->m);
    free(f);
}

void ef_sync(struct ef *f, uint32_t slot)
{
    if (ef_sync_to(f->e, slot, &f->m[slot]))
        ef_die("upsert");
}

int ef_sync_to(struct bf_engine *e, uint32_t slot, const struct ef_machine *m)
{
    if (!m->used)
        return bf_engine_remove(e, slot);
    struct bf_engine_label labels[EF_MAXL];
    for (uint32_t i = 0; i < m->nl; i++) {
        labels[i].key = m->lk[i];
        labels[i].value = m->lv[i];
    }
    struct bf_engine_machine em = {
        .id = m->id,
        .state = m->state,
        .capacity_type = m->ct,
        .instance_type = m->itype,
        .zone = m->zone,
        .n_labels = m->nl,
        .labels = labels,
        .allocatable = m->alloc,
        .cluster = m->cluster,
        .price_per_hour = m->price,
        .interruption_probability = m->prob,
        .assigned_priority = m->prio,
        .assigned_ipb = m->ipb,
        .assigned_rpb = m->rpb,
        .assigned_fingerprint = m->fp,
        .assigned_group = m->group,
        .assigned_group_len = strlen(m->group),
        .idle_since_s = m->idle_since,
    };
    return bf_engine_upsert(e, slot, &em);
}

uint32_t ef_add(struct ef *f, const struct ef_machine *m)
{
    if (f->next >= f->cap)
        ef_die("capacity");
    uint32_t s = f->next++;
    f->m[s] = *m;
    f->m[s].used = true;
    ef_sync(f, s);
    return s;
}

void ef_del(struct ef *f, uint32_t slot)
{
    f->m[slot].used = false;
    ef_sync(f, slot);
}

uint32_t ef_slot(const struct ef *f, const char *id)
{
    for (uint32_t s = 0; s < f->next; s++)
        if (f->m[s].used && strcmp(f->m[s].id, id) == 0)
            return s;
    return UINT32_MAX;
}

int ef_cycle(struct ef *f)
{
    f->rc = bf_engine_cycle(f->e, f->now_ns, &f->r);
    return f->rc;
}

void ef_first_rollup(struct ef *f, const char *cluster)
{
    if (bf_engine_set_cluster_flags(f->e, cluster, true, false))
        ef_die("flags");
}

/* plays the executor: every action reaches its end state at once */
void ef_stamp_assignment(struct ef_machine *m, const struct bf_engine_action *a)
{
    m->prio = a->priority;
    m->ipb = a->ipb;
    m->rpb = a->rpb;
    snprintf(m->fp, sizeof m->fp, "%s", a->fingerprint);
    memset(m->group, 0, sizeof m->group);
    memcpy(m->group, a->group,
           a->group_len < sizeof m->group - 1 ? a->group_len : sizeof m->group - 1);
    m->idle_since = 0;
}

void ef_apply(struct ef *f)
{
    int64_t now_s = f->now_ns / 1000000000LL;
    for (size_t i = 0; i < f->r.n_actions; i++) {
        const struct bf_engine_action *a = &f->r.actions[i];
        struct ef_machine *m = &f->m[a->slot];
        switch (a->kind) {
        case BF_ACTION_BOOTSTRAP:
        case BF_ACTION_PROVISION:
            m->state = BF_STATE_CONFIGURED;
            snprintf(m->cluster, sizeof m->cluster, "%s", a->cluster);
            ef_stamp_assignment(m, a);
            break;
        case BF_ACTION_RECLAIM:
        case BF_ACTION_PREEMPT:
            m->state = BF_STATE_IDLE;
            m->cluster[0] = 0;
            m->prio = 0;
            m->ipb = m->rpb = 0;
            m->fp[0] = 0;
            m->group[0] = 0;
            m->idle_since = now_s;
            break;
        case BF_ACTION_DELETE:
            m->state = BF_STATE_SPECULATIVE;
            m->idle_since = 0;
            break;
        default:
            break;
        }
    }
    for (size_t i = 0; i < f->r.n_actions; i++)
        ef_sync(f, f->r.actions[i].slot);
}

struct ef_machine ef_machine(const char *id, uint8_t state, const char *itype, const char *zone)
{
    struct ef_machine m;
    memset(&m, 0, sizeof m);
    snprintf(m.id, sizeof m.id, "%s", id);
    m.state = state;
    m.ct = BF_CT_BARE_METAL;
    snprintf(m.itype, sizeof m.itype, "%s", itype ? itype : "");
    snprintf(m.zone, sizeof m.zone, "%s", zone ? zone : "");
    if (state == BF_STATE_IDLE)
        m.idle_since = 1700000000LL - 10;
    return m;
}

void ef_label(struct ef_machine *m, const char *k, const char *v)
{
    if (m->nl >= EF_MAXL)
        ef_die("labels");
    snprintf(m->lk[m->nl], sizeof m->lk[0], "%s", k);
    snprintf(m->lv[m->nl], sizeof m->lv[0], "%s", v);
    m->nl++;
}

struct ef_machine ef_gpu_machine(const char *id)
{
    struct ef_machine m = ef_machine(id, BF_STATE_IDLE, EF_A3, "us-east-1a");
    m.alloc = ef_gpu(8);
    return m;
}

struct ef_machine ef_gpu_in_zone(const char *id, const char *zone, double price)
{
    struct ef_machine m = ef_machine(id, BF_STATE_IDLE, EF_A3, zone);
    m.alloc = ef_gpu(8);
    m.price = price;
    return m;
}

struct ef_machine ef_configured(const char *id, const char *cluster, int32_t prio, double ip,
                                double rp)
{
    struct ef_machine m = ef_machine(id, BF_STATE_CONFIGURED, EF_A3, "us-east-1a");
    m.alloc = ef_gpu(8);
    m.ct = BF_CT_ON_DEMAND;
    m.price = 6.0;
    snprintf(m.cluster, sizeof m.cluster, "%s", cluster);
    m.prio = prio;
    m.ipb = bf_bucket_for_dollars(ip);
    m.rpb = bf_bucket_for_dollars(rp);
    return m;
}

void ef_bind(struct ef_machine *m, const char *cluster, const struct ef_prof *p, const char *group)
{
    m->state = BF_STATE_CONFIGURED;
    snprintf(m->cluster, sizeof m->cluster, "%s", cluster);
    m->prio = p->p.priority;
    m->ipb = p->p.ipb;
    m->rpb = p->p.rpb;
    snprintf(m->fp, sizeof m->fp, "%s", ef_fp(p));
    snprintf(m->group, sizeof m->group, "%s", group ? group : "");
    m->idle_since = 0;
}

void ef_prof_init(struct ef_prof *p, int32_t prio, uint8_t ipb, uint8_t rpb)
{
    memset(p, 0, sizeof *p);
    p->p.priority = prio;
    p->p.ipb = ipb;
    p->p.rpb = rpb;
    p->p.reqs = p->reqs;
    p->p.spread = p->spr;
}

void ef_prof_req(struct ef_prof *p, const char *key, uint8_t op, const char *const *vals,
                 uint32_t nv)
{
    uint32_t i = p->p.n_reqs++;
    if (i >= 8 || nv > 16)
        ef_die("reqs");
    for (uint32_t j = 0; j < nv; j++)
        p->vals[i][j] = vals[j];
    p->reqs[i].key = key;
    p->reqs[i].op = op;
    p->reqs[i].n_values = nv;
    p->reqs[i].values = p->vals[i];
}

void ef_prof_in(struct ef_prof *p, const char *key, const char *v1)
{
    ef_prof_req(p, key, BF_OP_IN, &v1, 1);
}

void ef_prof_spread(struct ef_prof *p, const char *key, int32_t skew, uint8_t when)
{
    uint32_t i = p->p.n_spread++;
    if (i >= 4)
        ef_die("spread");
    p->spr[i].topology_key = key;
    p->spr[i].max_skew = skew;
    p->spr[i].when = when;
}

void ef_gpu_profile(struct ef_prof *p, int32_t prio)
{
    ef_prof_init(p, prio, 16, 27);
    ef_prof_in(p, BF_LABEL_INSTANCE_TYPE, EF_A3);
}

void ef_gpu_profile_same(struct ef_prof *p, int32_t prio, const char *key)
{
    ef_gpu_profile(p, prio);
    ef_prof_req(p, key, BF_OP_SAME, NULL, 0);
}

const char *ef_fp(const struct ef_prof *p)
{
    static char buf[4][512];
    static int k;
    /* canonicalise a copy (the builder's arrays may be shared) */
    struct ef_prof c = *p;
    c.p.reqs = c.reqs;
    c.p.spread = c.spr;
    for (uint32_t i = 0; i < c.p.n_reqs; i++)
        c.reqs[i].values = c.vals[i];
    bf_profile_canonicalize(&c.p);
    char *b = buf[k++ & 3];
    bf_profile_fingerprint(&c.p, b, 512);
    return b;
}

struct bf_engine_need ef_need(const struct ef_prof *p, bf_vec agg, bf_vec minu, int64_t arrival,
                              const char *group)
{
    struct bf_engine_need n;
    memset(&n, 0, sizeof n);
    n.profile = p->p;
    n.aggregate = agg;
    n.min_unit = minu;
    n.arrival_ns = arrival;
    n.group = group;
    n.group_len = group ? strlen(group) : 0;
    return n;
}

struct bf_engine_need ef_gpu_need(const struct ef_prof *p, int units, const char *group)
{
    return ef_need(p, ef_gpu(8LL * units), ef_gpu(8), 0, group);
}

bf_vec ef_vec(int64_t cpu, int64_t mem, int64_t gpu)
{
    bf_vec v;
    bf_vec_zero(&v);
    v.v[EF_CPU] = cpu;
    v.v[EF_MEM] = mem;
    v.v[EF_GPU] = gpu;
    return v;
}

bf_vec ef_gpu(int64_t gpus)
{
    return ef_vec(0, 0, gpus * 1000);
}

int ef_set(struct ef *f, const char *cluster, const struct bf_engine_need *n, size_t k)
{
    return bf_engine_set_needs(f->e, cluster, ++f->gen, n, k);
}

int ef_want_gpus(struct ef *f, const char *cluster, int32_t prio, const char *same_key, int units,
                 const char *group)
{
    struct ef_prof p; /* borrowed by the engine for the call only */
    if (same_key)
        ef_gpu_profile_same(&p, prio, same_key);
    else
        ef_gpu_profile(&p, prio);
    struct bf_engine_need n = ef_gpu_need(&p, units, group);
    return ef_set(f, cluster, &n, 1);
}

uint32_t ef_count(const struct ef *f, int kind)
{
    uint32_t n = 0;
    for (size_t i = 0; i < f->r.n_actions; i++)
        n += f->r.actions[i].kind == kind;
    return n;
}

uint32_t ef_count_cluster(const struct ef *f, int kind, const char *cluster)
{
    uint32_t n = 0;
    for (size_t i = 0; i < f->r.n_actions; i++)
        n += f->r.actions[i].kind == kind && strcmp(f->r.actions[i].cluster, cluster) == 0;
    return n;
}

const struct bf_engine_action *ef_action_for(const struct ef *f, const char *machine_id)
{
    for (size_t i = 0; i < f->r.n_actions; i++)
        if (strcmp(f->r.actions[i].machine_id, machine_id) == 0)
            return &f->r.actions[i];
    return NULL;
}

bool ef_acted(const struct ef *f, const char *machine_id, int kind)
{
    const struct bf_engine_action *a = ef_action_for(f, machine_id);
    return a && a->kind == kind;
}

const struct bf_engine_verdict *ef_verdict(const struct ef *f, const char *cluster, uint32_t nth)
{
    for (size_t i = 0; i < f->r.n_verdicts; i++)
        if (strcmp(f->r.verdicts[i].cluster, cluster) == 0 && nth-- == 0)
            return &f->r.verdicts[i];
    return NULL;
}

uint32_t ef_unsatisfied(const struct ef *f)
{
    return f->r.n_unsatisfied;
}

const struct bf_engine_verdict *ef_first_unsatisfied(const struct ef *f)
{
    for (size_t i = 0; i < f->r.n_verdicts; i++)
        if (!f->r.verdicts[i].satisfied)
            return &f->r.verdicts[i];
    return NULL;
}

uint64_t ef_rand(uint64_t *s)
{
    uint64_t x = *s += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}
