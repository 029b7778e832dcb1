/*
 * server.c — the bigfleet.v1alpha1.Coordinator service (wire.md §6), the
 * leader-local soft state (latest report per shard, pending instruction
 * queues) and the glue between reports, the rebalance loop and etcd.
 *
 * Design notes
 *   - Every RPC is leader-only: a follower (or a leader still loading its
 *     state) answers FAILED_PRECONDITION "coordinator: not leader", as the
 *     Go coordinator does. JoinRaftCluster and SnapshotSave answer
 *     UNIMPLEMENTED on every replica: membership and backups are etcd's.
 *   - Writes (registration, domains, clusters, shard removal, quota moves)
 *     are fenced etcd transactions (store.c); the RPC is answered when
 *     etcd answered, so a reply never claims what was not committed. A
 *     call that ends first (deadline, cancel) is simply not answered.
 *   - ReportShard: an unknown shard is registered (committed) first; then
 *     the report replaces the shard's soft state unless it is older than
 *     the one held (same shard_epoch, cycle not higher: discarded, its acks
 *     still processed); the acks clear the pending queue and feed the
 *     rebalance moves; the reply carries the term and every pending
 *     instruction, sorted by sequence number, until acked.
 *   - Soft state is bounded: CO_MAX_SHORTFALL shortfalls and CO_MAX_FREE
 *     free rows per report (the rest dropped and counted), CO_REPORT_MAX
 *     bytes per report (the server's receive limit), CO_MAX_PENDING
 *     instructions per shard (a move that does not fit is not started).
 *   - Domains: AssignDomain / UnassignDomain commit the map, then queue the
 *     instruction to the shard and keep it until ACCEPTED (a FAILED
 *     unassign — machines still bound there — is resent every rebalance
 *     interval). A new leader re-asserts every assignment (idempotent on
 *     the shard).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "bigfleet/log.h"
#include "bigfleet/model.h"
#include "bigfleet/net.h"
#include "bigfleet/util.h"
#include "coordinator.h"

#define NOT_LEADER "coordinator: not leader"

/* ------------------------------------------------------------ soft state */

void co_soft_free(struct co_soft *s)
{
    if (!s)
        return;
    if (s->last)
        bigfleet__v1alpha1__shard_report__free_unpacked(s->last, NULL);
    free(s->free);
    free(s->sf);
    free(s->strs);
    for (uint32_t i = 0; i < s->n_pend; i++)
        bigfleet__v1alpha1__coordinator_instruction__free_unpacked(s->pend[i].in, NULL);
    free(s->pend);
    free(s->id);
    memset(s, 0, sizeof *s);
}

struct co_soft *co_soft_get(struct coord *c, const char *id, bool create)
{
    for (uint32_t i = 0; i < c->n_soft; i++)
        if (!strcmp(c->soft[i].id, id))
            return &c->soft[i];
    if (!create || c->n_soft == CO_MAX_SHARDS)
        return NULL;
    if (!c->soft) {
        c->soft = calloc(CO_MAX_SHARDS, sizeof *c->soft);
        if (!c->soft)
            return NULL;
    }
    struct co_soft *s = &c->soft[c->n_soft];
    memset(s, 0, sizeof *s);
    s->id = strdup(id);
    s->pend = calloc(CO_MAX_PENDING, sizeof *s->pend);
    if (!s->id || !s->pend) {
        co_soft_free(s);
        return NULL;
    }
    c->n_soft++;
    return s;
}

static void soft_drop(struct coord *c, const char *id)
{
    for (uint32_t i = 0; i < c->n_soft; i++)
        if (!strcmp(c->soft[i].id, id)) {
            co_soft_free(&c->soft[i]);
            c->soft[i] = c->soft[--c->n_soft];
            memset(&c->soft[c->n_soft], 0, sizeof c->soft[0]);
            return;
        }
}

static uint64_t shortfall_key(const Bigfleet__V1alpha1__Shortfall *f)
{
    XXH3_state_t *h = XXH3_createState();
    if (!h)
        return 0;
    XXH3_64bits_reset(h);
    for (size_t i = 0; i < f->n_requirements; i++) {
        const Bigfleet__V1alpha1__NodeSelectorRequirement *q = f->requirements[i];
        if (!q)
            continue;
        XXH3_64bits_update(h, q->key, strlen(q->key) + 1);
        XXH3_64bits_update(h, &q->operator_, sizeof q->operator_);
        for (size_t j = 0; j < q->n_values; j++)
            XXH3_64bits_update(h, q->values[j], strlen(q->values[j]) + 1);
    }
    XXH3_64bits_update(h, &f->priority, sizeof f->priority);
    XXH3_64bits_update(h, &f->interruption_penalty_bucket, sizeof f->interruption_penalty_bucket);
    uint64_t k = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    return k ? k : 1;
}

int co_soft_ingest(struct coord *c, struct co_soft *s, Bigfleet__V1alpha1__ShardReport *rep)
{
    (void)c;
    const Bigfleet__V1alpha1__ShardSummary *sum = rep->summary;
    size_t nf = sum ? sum->n_free_counts : 0, ns = rep->n_shortfalls;
    if (nf > CO_MAX_FREE)
        nf = CO_MAX_FREE;
    if (ns > CO_MAX_SHORTFALL)
        ns = CO_MAX_SHORTFALL;
    size_t nstr = 0;
    for (size_t i = 0; i < ns; i++)
        for (size_t j = 0; rep->shortfalls[i] && j < rep->shortfalls[i]->n_requirements; j++)
            if (rep->shortfalls[i]->requirements[j])
                nstr += rep->shortfalls[i]->requirements[j]->n_values;
    struct co_rb_free *fr = calloc(nf ? nf : 1, sizeof *fr);
    struct rb_shortfall *sf = calloc(ns ? ns : 1, sizeof *sf);
    const char **strs = calloc(nstr ? nstr : 1, sizeof *strs);
    if (!fr || !sf || !strs) {
        free(fr);
        free(sf);
        free(strs);
        return -ENOMEM;
    }
    uint32_t kf = 0;
    for (size_t i = 0; i < nf; i++) {
        const Bigfleet__V1alpha1__FreeCount *f = sum->free_counts[i];
        if (!f || !f->instance_type || !f->zone || !f->instance_type[0])
            continue;
        fr[kf++] = (struct co_rb_free){f->instance_type, f->zone, f->idle > 0 ? f->idle : 0,
                                       f->speculative > 0 ? f->speculative : 0,
                                       f->bound > 0 ? f->bound : 0};
    }
    uint32_t ks = 0;
    size_t used = 0;
    int64_t now = bf_now_ns();
    for (size_t i = 0; i < ns; i++) {
        const Bigfleet__V1alpha1__Shortfall *f = rep->shortfalls[i];
        if (!f)
            continue;
        struct rb_shortfall *o = &sf[ks];
        memset(o, 0, sizeof *o);
        o->key = shortfall_key(f);
        o->priority = f->priority;
        o->age = f->age_cycles;
        o->ipb = f->interruption_penalty_bucket;
        o->topo = f->topology_constrained;
        for (size_t j = 0; f->deficit && j < f->deficit->n_resources; j++) {
            const Bigfleet__V1alpha1__Resources__ResourcesEntry *e = f->deficit->resources[j];
            int d = e && e->key && e->value ? co_rb_dim_of(e->key) : -1;
            int64_t milli;
            if (d < 0 || bf_quantity_parse(e->value, strlen(e->value), &milli) || milli <= 0)
                continue;
            o->deficit[d] = co_rb_dim_value(d, milli);
        }
        for (size_t j = 0; j < f->n_requirements; j++) {
            const Bigfleet__V1alpha1__NodeSelectorRequirement *q = f->requirements[j];
            if (!q || q->operator_ !=
                          BIGFLEET__V1ALPHA1__NODE_SELECTOR_REQUIREMENT__OPERATOR__OPERATOR_IN)
                continue;
            bool is_type = !strcmp(q->key, "node.kubernetes.io/instance-type");
            bool is_zone = !strcmp(q->key, "topology.kubernetes.io/zone");
            if (!is_type && !is_zone)
                continue;
            if (is_type && o->n_types) /* one list of each: the first */
                continue;
            if (is_zone && o->n_zones)
                continue;
            const char **base = &strs[used];
            for (size_t v = 0; v < q->n_values; v++)
                strs[used++] = q->values[v];
            if (is_type) {
                o->types = base;
                o->n_types = (uint32_t)q->n_values;
            } else {
                o->zones = base;
                o->n_zones = (uint32_t)q->n_values;
            }
        }
        /* first seen: carried over from the previous report */
        o->first_seen_ns = now;
        for (uint32_t p = 0; p < s->n_sf; p++)
            if (s->sf[p].key == o->key) {
                o->first_seen_ns = s->sf[p].first_seen_ns;
                break;
            }
        ks++;
    }
    if (s->last)
        bigfleet__v1alpha1__shard_report__free_unpacked(s->last, NULL);
    free(s->free);
    free(s->sf);
    free(s->strs);
    s->last = rep;
    s->free = fr;
    s->n_free = kf;
    s->sf = sf;
    s->n_sf = ks;
    s->strs = strs;
    s->received_ns = now;
    s->report_seq++;
    return 0;
}

/* ------------------------------------------------------------ instructions */

static void pend_remove(struct co_soft *s, const char *id)
{
    for (uint32_t i = 0; i < s->n_pend; i++)
        if (!strcmp(s->pend[i].id, id)) {
            bigfleet__v1alpha1__coordinator_instruction__free_unpacked(s->pend[i].in, NULL);
            memmove(&s->pend[i], &s->pend[i + 1], (s->n_pend - i - 1) * sizeof *s->pend);
            s->n_pend--;
            return;
        }
}

/* Queues `in` (term, sequence and id filled here) for `shard`. */
static int enqueue(struct coord *c, const char *shard,
                   Bigfleet__V1alpha1__CoordinatorInstruction *in, char id[RB_INSTR_ID])
{
    if (!co_is_leader(c))
        return -ESTALE;
    struct co_soft *s = co_soft_get(c, shard, true);
    if (!s)
        return -ENOSPC;
    if (s->n_pend == CO_MAX_PENDING)
        return -ENOSPC;
    int64_t seq = co_next_seq(c);
    if (!seq)
        return -EAGAIN;
    bf_random_hex16(id);
    in->coordinator_term = c->term;
    in->sequence_number = seq;
    in->instruction_id = id;
    size_t len = bigfleet__v1alpha1__coordinator_instruction__get_packed_size(in);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        return -ENOMEM;
    bigfleet__v1alpha1__coordinator_instruction__pack(in, buf);
    Bigfleet__V1alpha1__CoordinatorInstruction *copy =
        bigfleet__v1alpha1__coordinator_instruction__unpack(NULL, len, buf);
    free(buf);
    in->instruction_id = NULL;
    if (!copy)
        return -ENOMEM;
    struct co_instr *p = &s->pend[s->n_pend++];
    memcpy(p->id, id, RB_INSTR_ID);
    p->seq = seq;
    p->in = copy;
    c->instr_sent++;
    return 0;
}

static int rb_send(void *arg, const char *shard, const struct rb_instr *ri, char id[RB_INSTR_ID])
{
    struct coord *c = arg;
    Bigfleet__V1alpha1__CoordinatorInstruction in =
        BIGFLEET__V1ALPHA1__COORDINATOR_INSTRUCTION__INIT;
    Bigfleet__V1alpha1__TransferOwnership t = BIGFLEET__V1ALPHA1__TRANSFER_OWNERSHIP__INIT;
    Bigfleet__V1alpha1__ReassignSpeculative r = BIGFLEET__V1ALPHA1__REASSIGN_SPECULATIVE__INIT;
    Bigfleet__V1alpha1__CrossShardDrain d = BIGFLEET__V1ALPHA1__CROSS_SHARD_DRAIN__INIT;
    char *empty = "";
    switch (ri->kind) {
    case RB_TRANSFER:
        t.from_shard_id = (char *)ri->from;
        t.to_shard_id = (char *)ri->to;
        t.count = ri->count;
        t.instance_type = ri->type ? (char *)ri->type : empty;
        t.zone = ri->zone ? (char *)ri->zone : empty;
        t.n_machine_ids = ri->n_ids;
        t.machine_ids = (char **)ri->ids;
        in.payload_case = BIGFLEET__V1ALPHA1__COORDINATOR_INSTRUCTION__PAYLOAD_TRANSFER_OWNERSHIP;
        in.transfer_ownership = &t;
        break;
    case RB_REASSIGN:
        r.from_shard_id = (char *)ri->from;
        r.to_shard_id = (char *)ri->to;
        r.count = ri->count;
        r.instance_type = ri->type ? (char *)ri->type : empty;
        r.zone = ri->zone ? (char *)ri->zone : empty;
        r.n_machine_ids = ri->n_ids;
        r.machine_ids = (char **)ri->ids;
        in.payload_case = BIGFLEET__V1ALPHA1__COORDINATOR_INSTRUCTION__PAYLOAD_REASSIGN_SPECULATIVE;
        in.reassign_speculative = &r;
        break;
    case RB_DRAIN:
        d.count = ri->count;
        d.instance_type = ri->type ? (char *)ri->type : empty;
        d.zone = ri->zone ? (char *)ri->zone : empty;
        d.n_machine_ids = ri->n_ids;
        d.machine_ids = (char **)ri->ids;
        d.preemptor_priority = ri->preemptor_priority;
        d.max_victim_penalty_bucket = ri->max_victim_penalty_bucket;
        in.payload_case = BIGFLEET__V1ALPHA1__COORDINATOR_INSTRUCTION__PAYLOAD_CROSS_SHARD_DRAIN;
        in.cross_shard_drain = &d;
        break;
    }
    return enqueue(c, shard, &in, id);
}

/* ------------------------------------------------------------ quota (Tier 2) */

static Bigfleet__V1alpha1__QuotaAllocation *quota_of(struct coord *c)
{
    for (uint32_t i = 0; i < c->st.n_quotas; i++)
        if (!strcmp(c->st.quotas[i]->provider, c->cfg.quota_provider) &&
            !strcmp(c->st.quotas[i]->region, c->cfg.quota_region))
            return c->st.quotas[i];
    return NULL;
}

static int32_t quota_get(const Bigfleet__V1alpha1__QuotaAllocation *q, const char *shard, bool *has)
{
    for (size_t i = 0; q && i < q->n_per_shard; i++)
        if (!strcmp(q->per_shard[i]->key, shard)) {
            if (has)
                *has = true;
            return q->per_shard[i]->value;
        }
    if (has)
        *has = false;
    return 0;
}

#define CO_MAX_QUOTA_QUEUE 4096

static void quota_next(struct coord *c);

static void quota_done(struct coord *c, void *arg, int rc)
{
    if ((uint64_t)(uintptr_t)arg != c->quota_gen)
        return; /* written under an earlier leadership */
    c->quota_busy = false;
    if (rc)
        BF_WARN("quota update not committed", "error=\"%s\"", strerror(-rc));
    quota_next(c);
}

/* Starts the Txn of per_shard[a] += da (or = da) and per_shard[b] += db,
 * from the value committed so far. true when a write is in flight. */
static bool quota_write(struct coord *c, const char *a, int32_t da, const char *b, int32_t db,
                        bool set)
{
    bool started = false;
    Bigfleet__V1alpha1__QuotaAllocation *cur = quota_of(c);
    size_t n = cur ? cur->n_per_shard : 0;
    Bigfleet__V1alpha1__QuotaAllocation__PerShardEntry *e = calloc(n + 2, sizeof *e);
    Bigfleet__V1alpha1__QuotaAllocation__PerShardEntry **ep = calloc(n + 2, sizeof *ep);
    if (!e || !ep)
        goto out;
    size_t k = 0;
    bool ha = false, hb = false;
    for (size_t i = 0; i < n; i++) {
        bigfleet__v1alpha1__quota_allocation__per_shard_entry__init(&e[k]);
        e[k].key = cur->per_shard[i]->key;
        e[k].value = cur->per_shard[i]->value;
        if (a && !strcmp(e[k].key, a)) {
            e[k].value = set ? da : e[k].value + da;
            ha = true;
        }
        if (b && !strcmp(e[k].key, b)) {
            e[k].value += db;
            hb = true;
        }
        ep[k] = &e[k];
        k++;
    }
    if (a && !ha) {
        bigfleet__v1alpha1__quota_allocation__per_shard_entry__init(&e[k]);
        e[k].key = (char *)a;
        e[k].value = da;
        ep[k] = &e[k];
        k++;
    }
    if (b && !hb) {
        bigfleet__v1alpha1__quota_allocation__per_shard_entry__init(&e[k]);
        e[k].key = (char *)b;
        e[k].value = db;
        ep[k] = &e[k];
        k++;
    }
    Bigfleet__V1alpha1__QuotaAllocation q = BIGFLEET__V1ALPHA1__QUOTA_ALLOCATION__INIT;
    q.provider = c->cfg.quota_provider;
    q.region = c->cfg.quota_region;
    q.n_per_shard = k;
    q.per_shard = ep;
    struct co_op *op = calloc(1, sizeof *op);
    if (!op)
        goto out;
    op->key = co_key_quota(c->cfg.prefix, q.provider, q.region);
    op->vlen = bigfleet__v1alpha1__quota_allocation__get_packed_size(&q);
    op->value = malloc(op->vlen ? op->vlen : 1);
    if (!op->key || !op->value) {
        free(op->key);
        free(op->value);
        free(op);
        goto out;
    }
    bigfleet__v1alpha1__quota_allocation__pack(&q, op->value);
    started = co_commit(c, op, 1, quota_done, (void *)(uintptr_t)c->quota_gen) == 0;
out:
    free(e);
    free(ep);
    return started;
}

static void quota_next(struct coord *c)
{
    while (!c->quota_busy && c->n_qadj) {
        struct co_quota_adj j = c->qadj[0];
        memmove(c->qadj, c->qadj + 1, (c->n_qadj - 1) * sizeof *c->qadj);
        c->n_qadj--;
        c->quota_busy = quota_write(c, j.a, j.da, j.b, j.db, j.set);
        free(j.a);
        free(j.b);
    }
}

static void quota_forget(struct coord *c)
{
    for (uint32_t i = 0; i < c->n_qadj; i++) {
        free(c->qadj[i].a);
        free(c->qadj[i].b);
    }
    free(c->qadj);
    c->qadj = NULL;
    c->n_qadj = 0;
    c->quota_busy = false;
    c->quota_gen++;
}

/* Queues the quota change per_shard[a] += da (or = da when set) and
 * per_shard[b] += db; written in order, one Txn at a time. */
static void quota_adjust(struct coord *c, const char *a, int32_t da, const char *b, int32_t db,
                         bool set)
{
    struct co_quota_adj *n =
        c->n_qadj < CO_MAX_QUOTA_QUEUE ? realloc(c->qadj, (c->n_qadj + 1) * sizeof *n) : NULL;
    if (n)
        c->qadj = n;
    char *ac = a ? strdup(a) : NULL, *bc = b ? strdup(b) : NULL;
    if (!n || (a && !ac) || (b && !bc)) {
        free(ac);
        free(bc);
        c->quota_dropped++;
        BF_WARN("quota update dropped (queue full or out of memory)", "queued=%u", c->n_qadj);
        return;
    }
    c->qadj[c->n_qadj++] = (struct co_quota_adj){ac, bc, da, db, set};
    quota_next(c);
}

static void rb_quota(void *arg, const char *from, const char *to, int32_t n)
{
    quota_adjust(arg, from, -n, to, n, false);
}

/* ------------------------------------------------------------ domain ops */

static void dop_send(struct coord *c, struct co_domain_op *d)
{
    Bigfleet__V1alpha1__CoordinatorInstruction in =
        BIGFLEET__V1ALPHA1__COORDINATOR_INSTRUCTION__INIT;
    Bigfleet__V1alpha1__AssignDomain a = BIGFLEET__V1ALPHA1__ASSIGN_DOMAIN__INIT;
    Bigfleet__V1alpha1__UnassignDomain u = BIGFLEET__V1ALPHA1__UNASSIGN_DOMAIN__INIT;
    if (d->assign) {
        a.topology_key = d->key;
        a.topology_value = d->value;
        in.payload_case = BIGFLEET__V1ALPHA1__COORDINATOR_INSTRUCTION__PAYLOAD_ASSIGN_DOMAIN;
        in.assign_domain = &a;
    } else {
        u.topology_key = d->key;
        u.topology_value = d->value;
        in.payload_case = BIGFLEET__V1ALPHA1__COORDINATOR_INSTRUCTION__PAYLOAD_UNASSIGN_DOMAIN;
        in.unassign_domain = &u;
    }
    if (enqueue(c, d->shard, &in, d->id))
        d->id[0] = 0; /* resent at the next pass */
}

static void dop_add(struct coord *c, const char *shard, const char *key, const char *value,
                    bool assign)
{
    if (!c->dops) {
        c->dops = calloc(CO_MAX_DOMAINS * 2, sizeof *c->dops);
        if (!c->dops)
            return;
    }
    if (c->n_dops == CO_MAX_DOMAINS * 2)
        return;
    struct co_domain_op *d = &c->dops[c->n_dops];
    memset(d, 0, sizeof *d);
    d->shard = strdup(shard);
    d->key = strdup(key);
    d->value = strdup(value);
    d->assign = assign;
    if (!d->shard || !d->key || !d->value) {
        free(d->shard);
        free(d->key);
        free(d->value);
        return;
    }
    c->n_dops++;
    dop_send(c, d);
}

static void dop_end(struct coord *c, uint32_t i)
{
    free(c->dops[i].shard);
    free(c->dops[i].key);
    free(c->dops[i].value);
    c->dops[i] = c->dops[--c->n_dops];
}

static bool dop_ack(struct coord *c, const char *shard, const char *id, int outcome,
                    const char *reason)
{
    for (uint32_t i = 0; i < c->n_dops; i++) {
        struct co_domain_op *d = &c->dops[i];
        if (strcmp(d->id, id) || strcmp(d->shard, shard))
            continue;
        if (outcome == RB_ACCEPTED) {
            dop_end(c, i);
        } else {
            BF_WARN("domain instruction not applied; resent at the next pass",
                    "shard=%s op=%s domain=%s=%s reason=\"%s\"", shard,
                    d->assign ? "assign" : "unassign", d->key, d->value, reason ? reason : "");
            d->id[0] = 0;
        }
        return true;
    }
    return false;
}

/* ------------------------------------------------------------ RPC plumbing */

/* An RPC answered after an etcd write: the call may end first. */
struct rpc {
    struct bf_net_call *call; /* NULL once the call ended */
    int refs;
    Bigfleet__V1alpha1__ShardReport *rep; /* ReportShard waiting for its registration */
    char *s1, *s2, *s3;
};

static void rpc_unref(struct rpc *r)
{
    if (--r->refs)
        return;
    if (r->rep)
        bigfleet__v1alpha1__shard_report__free_unpacked(r->rep, NULL);
    free(r->s1);
    free(r->s2);
    free(r->s3);
    free(r);
}

static struct rpc *rpc_new(struct bf_net_call *call)
{
    struct rpc *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->call = call;
    r->refs = 2; /* the call (on_done) and the pending write */
    bf_net_call_set_user(call, r);
    return r;
}

static void on_done(struct bf_net_call *call, int code, void *arg)
{
    (void)code;
    (void)arg;
    struct rpc *r = bf_net_call_user(call);
    if (r) {
        r->call = NULL;
        rpc_unref(r);
    }
}

static bool leader_or_refuse(struct coord *c, struct bf_net_call *call)
{
    if (co_is_leader(c))
        return true;
    bf_net_call_finish(call, BF_NET_FAILED_PRECONDITION, NOT_LEADER);
    return false;
}

static int commit_code(int rc)
{
    return rc == -ESTALE ? BF_NET_FAILED_PRECONDITION : BF_NET_UNAVAILABLE;
}

static struct co_op *op_put(const char *key, const ProtobufCMessage *m)
{
    struct co_op *op = calloc(1, sizeof *op);
    if (!op)
        return NULL;
    op->key = (char *)key;
    op->vlen = protobuf_c_message_get_packed_size(m);
    op->value = malloc(op->vlen ? op->vlen : 1);
    if (!op->key || !op->value) {
        free(op->key);
        free(op->value);
        free(op);
        return NULL;
    }
    protobuf_c_message_pack(m, op->value);
    return op;
}

/* ------------------------------------------------------------ ReportShard */

static void report_finish(struct coord *c, struct bf_net_call *call,
                          Bigfleet__V1alpha1__ShardReport *rep)
{
    struct co_shard *sh = co_store_shard(&c->st, rep->shard_id);
    if (sh)
        sh->heartbeat_ns = bf_now_ns();
    struct co_soft *s = co_soft_get(c, rep->shard_id, true);
    if (!s) {
        bigfleet__v1alpha1__shard_report__free_unpacked(rep, NULL);
        bf_net_call_finish(call, BF_NET_RESOURCE_EXHAUSTED, "coordinator: too many shards");
        return;
    }
    /* acks first (they clear the queue whatever the report's age) */
    for (size_t i = 0; i < rep->n_instruction_acks; i++) {
        const Bigfleet__V1alpha1__InstructAck *a = rep->instruction_acks[i];
        if (!a || !a->instruction_id || !a->instruction_id[0])
            continue;
        c->acks++;
        pend_remove(s, a->instruction_id);
        if (!co_rb_ack(c->rb, s->id, a->instruction_id, a->outcome,
                       (const char *const *)a->machine_ids, a->n_machine_ids))
            dop_ack(c, s->id, a->instruction_id, a->outcome, a->reason);
    }
    bool stale =
        s->last && s->last->shard_epoch == rep->shard_epoch && rep->cycle <= s->last->cycle;
    int64_t spec_total = 0;
    if (rep->summary)
        for (size_t i = 0; i < rep->summary->n_free_counts && i < CO_MAX_FREE; i++)
            if (rep->summary->free_counts[i] && rep->summary->free_counts[i]->speculative > 0)
                spec_total += rep->summary->free_counts[i]->speculative;
    bool first = !s->last;
    if (stale) {
        c->stale_reports++;
        bigfleet__v1alpha1__shard_report__free_unpacked(rep, NULL);
    } else if (co_soft_ingest(c, s, rep) != 0) {
        bigfleet__v1alpha1__shard_report__free_unpacked(rep, NULL);
    }
    /* the quota ledger starts from what a shard holds when it is first seen */
    if (first && !stale) {
        bool has = false;
        quota_get(quota_of(c), s->id, &has);
        if (!has)
            quota_adjust(c, s->id, (int32_t)(spec_total > INT32_MAX ? INT32_MAX : spec_total), NULL,
                         0, true);
    }
    c->reports++;
    Bigfleet__V1alpha1__ReportAck ack = BIGFLEET__V1ALPHA1__REPORT_ACK__INIT;
    ack.coordinator_term = c->term;
    ack.acknowledged = true;
    Bigfleet__V1alpha1__CoordinatorInstruction **ins =
        calloc(s->n_pend ? s->n_pend : 1, sizeof *ins);
    if (!ins) {
        bf_net_call_finish(call, BF_NET_RESOURCE_EXHAUSTED, "coordinator: out of memory");
        return;
    }
    for (uint32_t i = 0; i < s->n_pend; i++)
        ins[i] = s->pend[i].in; /* queued in sequence order */
    ack.n_instructions = s->n_pend;
    ack.instructions = ins;
    bf_net_call_reply_pb(call, &ack.base);
    c->last_report_ns = bf_now_ns();
    free(ins);
}

static void on_registered(struct coord *c, void *arg, int rc)
{
    struct rpc *r = arg;
    if (r->call) {
        if (rc) {
            bf_net_call_finish(r->call, commit_code(rc),
                               rc == -ESTALE ? NOT_LEADER : "coordinator: register shard: etcd");
        } else if (!co_is_leader(c)) {
            bf_net_call_finish(r->call, BF_NET_FAILED_PRECONDITION, NOT_LEADER);
        } else {
            Bigfleet__V1alpha1__ShardReport *rep = r->rep;
            r->rep = NULL;
            report_finish(c, r->call, rep);
        }
    }
    rpc_unref(r);
}

static void on_report(struct bf_net_call *call, const uint8_t *msg, size_t len, void *arg)
{
    struct coord *c = arg;
    if (!leader_or_refuse(c, call))
        return;
    Bigfleet__V1alpha1__ShardReport *rep = bigfleet__v1alpha1__shard_report__unpack(NULL, len, msg);
    if (!rep) {
        c->reports_rejected++;
        bf_net_call_finish(call, BF_NET_INVALID_ARGUMENT, "coordinator: undecodable ShardReport");
        return;
    }
    if (!rep->shard_id || !rep->shard_id[0] || strlen(rep->shard_id) >= CO_ID_MAX ||
        strlen(rep->shard_address) >= 256) {
        c->reports_rejected++;
        bigfleet__v1alpha1__shard_report__free_unpacked(rep, NULL);
        bf_net_call_finish(call, BF_NET_INVALID_ARGUMENT, "shard_id required");
        return;
    }
    const char *ident = bf_net_call_identity(call);
    if (ident) { /* mTLS: the shard's SAN must assert its shard_id */
        char want[CO_ID_MAX + 32];
        snprintf(want, sizeof want, "bigfleet://shard/%s", rep->shard_id);
        if (strcmp(ident, want)) {
            c->reports_rejected++;
            char m[CO_ID_MAX * 2 + 96];
            snprintf(m, sizeof m,
                     "coordinator: client certificate identity \"%s\" does not authorize "
                     "shard_id \"%s\"",
                     ident, rep->shard_id);
            bigfleet__v1alpha1__shard_report__free_unpacked(rep, NULL);
            bf_net_call_finish(call, BF_NET_PERMISSION_DENIED, m);
            return;
        }
    }
    if (co_store_shard(&c->st, rep->shard_id)) {
        report_finish(c, call, rep);
        return;
    }
    if (c->st.n_shards >= CO_MAX_SHARDS) {
        bigfleet__v1alpha1__shard_report__free_unpacked(rep, NULL);
        bf_net_call_finish(call, BF_NET_RESOURCE_EXHAUSTED, "coordinator: too many shards");
        return;
    }
    /* first sight: register (durable) before taking the report */
    Bigfleet__V1alpha1__ShardRegistryEntry e = BIGFLEET__V1ALPHA1__SHARD_REGISTRY_ENTRY__INIT;
    e.shard_id = rep->shard_id;
    e.address = rep->shard_address;
    e.registered_at_unix_ns = bf_now_ns();
    struct rpc *r = rpc_new(call);
    struct co_op *op = r ? op_put(co_key_shard(c->cfg.prefix, rep->shard_id), &e.base) : NULL;
    if (!op) {
        bigfleet__v1alpha1__shard_report__free_unpacked(rep, NULL);
        if (r) {
            r->refs = 1; /* only the call holds it now */
        }
        bf_net_call_finish(call, BF_NET_RESOURCE_EXHAUSTED, "coordinator: out of memory");
        return;
    }
    r->rep = rep;
    BF_INFO("shard registered", "shard=%s address=%s", rep->shard_id, rep->shard_address);
    if (co_commit(c, op, 1, on_registered, r)) {
        r->refs = 1;
        bf_net_call_finish(call, BF_NET_UNAVAILABLE, "coordinator: register shard: etcd");
    }
}

/* ------------------------------------------------------------ admin writes */

static void on_written(struct coord *c, void *arg, int rc)
{
    (void)c;
    struct rpc *r = arg;
    if (r->call) {
        if (rc) {
            bf_net_call_finish(r->call, commit_code(rc),
                               rc == -ESTALE ? NOT_LEADER : "etcd write failed");
        } else {
            /* the empty response message of every write RPC */
            bf_net_call_reply(r->call, "", 0);
        }
    }
    rpc_unref(r);
}

static void on_domain_written(struct coord *c, void *arg, int rc)
{
    struct rpc *r = arg;
    if (rc == 0 && co_is_leader(c)) { /* s1 shard, s2 key, s3 value; "" shard = unassign */
        if (r->s1[0])
            dop_add(c, r->s1, r->s2, r->s3, true);
    }
    on_written(c, arg, rc);
}

static void on_assign_domain(struct bf_net_call *call, const uint8_t *msg, size_t len, void *arg)
{
    struct coord *c = arg;
    if (!leader_or_refuse(c, call))
        return;
    Bigfleet__V1alpha1__AssignDomainRequest *q =
        bigfleet__v1alpha1__assign_domain_request__unpack(NULL, len, msg);
    if (!q || !q->topology_key[0] || !q->topology_value[0] || !q->shard_id[0] ||
        strlen(q->topology_key) >= CO_ID_MAX || strlen(q->topology_value) >= CO_ID_MAX) {
        bf_net_call_finish(call, BF_NET_INVALID_ARGUMENT,
                           "topology_key, topology_value, shard_id all required");
        goto out;
    }
    struct co_domain *d = co_store_domain(&c->st, q->topology_key, q->topology_value);
    if (d && !strcmp(d->shard, q->shard_id)) {
        bf_net_call_reply(call, "", 0); /* idempotent */
        goto out;
    }
    if (d) {
        char m[CO_ID_MAX * 4];
        snprintf(m, sizeof m, "coordinator: domain %s=%s already assigned to shard %s",
                 q->topology_key, q->topology_value, d->shard);
        bf_net_call_finish(call, BF_NET_ALREADY_EXISTS, m);
        goto out;
    }
    if (!co_store_shard(&c->st, q->shard_id)) {
        char m[CO_ID_MAX + 64];
        snprintf(m, sizeof m, "coordinator: shard %s not found", q->shard_id);
        bf_net_call_finish(call, BF_NET_NOT_FOUND, m);
        goto out;
    }
    if (c->st.n_domains >= CO_MAX_DOMAINS) {
        bf_net_call_finish(call, BF_NET_RESOURCE_EXHAUSTED, "coordinator: too many domains");
        goto out;
    }
    Bigfleet__V1alpha1__DomainAssignment da = BIGFLEET__V1ALPHA1__DOMAIN_ASSIGNMENT__INIT;
    da.topology_key = q->topology_key;
    da.topology_value = q->topology_value;
    da.shard_id = q->shard_id;
    struct rpc *r = rpc_new(call);
    struct co_op *op =
        r ? op_put(co_key_domain(c->cfg.prefix, q->topology_key, q->topology_value), &da.base)
          : NULL;
    if (r) {
        r->s1 = strdup(q->shard_id);
        r->s2 = strdup(q->topology_key);
        r->s3 = strdup(q->topology_value);
    }
    if (!op || !r->s1 || !r->s2 || !r->s3 || co_commit(c, op, 1, on_domain_written, r)) {
        if (r)
            r->refs = 1;
        bf_net_call_finish(call, BF_NET_UNAVAILABLE, "AssignDomain: etcd");
    }
out:
    if (q)
        bigfleet__v1alpha1__assign_domain_request__free_unpacked(q, NULL);
}

static void on_unassign_written(struct coord *c, void *arg, int rc)
{
    struct rpc *r = arg; /* s1 = the shard that had it */
    if (rc == 0 && co_is_leader(c))
        dop_add(c, r->s1, r->s2, r->s3, false);
    on_written(c, arg, rc);
}

static void on_unassign_domain(struct bf_net_call *call, const uint8_t *msg, size_t len, void *arg)
{
    struct coord *c = arg;
    if (!leader_or_refuse(c, call))
        return;
    Bigfleet__V1alpha1__UnassignDomainRequest *q =
        bigfleet__v1alpha1__unassign_domain_request__unpack(NULL, len, msg);
    if (!q || !q->topology_key[0] || !q->topology_value[0]) {
        bf_net_call_finish(call, BF_NET_INVALID_ARGUMENT,
                           "topology_key and topology_value required");
        goto out;
    }
    struct co_domain *d = co_store_domain(&c->st, q->topology_key, q->topology_value);
    if (!d) {
        bf_net_call_reply(call, "", 0); /* idempotent */
        goto out;
    }
    struct rpc *r = rpc_new(call);
    struct co_op *op = r ? calloc(1, sizeof *op) : NULL;
    if (op) {
        op->del = true;
        op->key = co_key_domain(c->cfg.prefix, q->topology_key, q->topology_value);
        r->s1 = strdup(d->shard);
        r->s2 = strdup(q->topology_key);
        r->s3 = strdup(q->topology_value);
    }
    if (!op || !op->key || !r->s1 || !r->s2 || !r->s3 ||
        co_commit(c, op, 1, on_unassign_written, r)) {
        if (r)
            r->refs = 1;
        bf_net_call_finish(call, BF_NET_UNAVAILABLE, "UnassignDomain: etcd");
    }
out:
    if (q)
        bigfleet__v1alpha1__unassign_domain_request__free_unpacked(q, NULL);
}

static void on_removed(struct coord *c, void *arg, int rc)
{
    struct rpc *r = arg;
    if (rc == 0) {
        co_rb_forget_shard(c->rb, r->s1);
        soft_drop(c, r->s1);
    }
    on_written(c, arg, rc);
}

static void on_remove_shard(struct bf_net_call *call, const uint8_t *msg, size_t len, void *arg)
{
    struct coord *c = arg;
    if (!leader_or_refuse(c, call))
        return;
    Bigfleet__V1alpha1__RemoveShardRequest *q =
        bigfleet__v1alpha1__remove_shard_request__unpack(NULL, len, msg);
    if (!q || !q->shard_id[0]) {
        bf_net_call_finish(call, BF_NET_INVALID_ARGUMENT, "shard_id required");
        goto out;
    }
    if (!co_store_shard(&c->st, q->shard_id)) {
        char m[CO_ID_MAX + 64];
        snprintf(m, sizeof m, "coordinator: shard %s not found", q->shard_id);
        bf_net_call_finish(call, BF_NET_NOT_FOUND, m);
        goto out;
    }
    /* the shard, its domains and its clusters go in one transaction */
    size_t n = 1;
    for (uint32_t i = 0; i < c->st.n_domains; i++)
        n += !strcmp(c->st.domains[i].shard, q->shard_id);
    for (uint32_t i = 0; i < c->st.n_clusters; i++)
        n += !strcmp(c->st.clusters[i].shard, q->shard_id);
    struct co_op *ops = calloc(n, sizeof *ops);
    struct rpc *r = ops ? rpc_new(call) : NULL;
    if (!r) {
        free(ops);
        bf_net_call_finish(call, BF_NET_RESOURCE_EXHAUSTED, "coordinator: out of memory");
        goto out;
    }
    size_t k = 0;
    ops[k].del = true;
    ops[k++].key = co_key_shard(c->cfg.prefix, q->shard_id);
    for (uint32_t i = 0; i < c->st.n_domains; i++)
        if (!strcmp(c->st.domains[i].shard, q->shard_id)) {
            ops[k].del = true;
            ops[k++].key =
                co_key_domain(c->cfg.prefix, c->st.domains[i].key, c->st.domains[i].value);
        }
    for (uint32_t i = 0; i < c->st.n_clusters; i++)
        if (!strcmp(c->st.clusters[i].shard, q->shard_id)) {
            ops[k].del = true;
            ops[k++].key = co_key_cluster(c->cfg.prefix, c->st.clusters[i].cluster);
        }
    r->s1 = strdup(q->shard_id);
    if (!r->s1 || co_commit(c, ops, k, on_removed, r)) {
        r->refs = 1;
        bf_net_call_finish(call, BF_NET_UNAVAILABLE, "RemoveShard: etcd");
    }
out:
    if (q)
        bigfleet__v1alpha1__remove_shard_request__free_unpacked(q, NULL);
}

static void on_assign_cluster(struct bf_net_call *call, const uint8_t *msg, size_t len, void *arg)
{
    struct coord *c = arg;
    if (!leader_or_refuse(c, call))
        return;
    Bigfleet__V1alpha1__AssignClusterRequest *q =
        bigfleet__v1alpha1__assign_cluster_request__unpack(NULL, len, msg);
    if (!q || !q->cluster_id[0] || !q->shard_id[0] || strlen(q->cluster_id) >= CO_ID_MAX) {
        bf_net_call_finish(call, BF_NET_INVALID_ARGUMENT, "cluster_id and shard_id required");
        goto out;
    }
    if (!co_store_shard(&c->st, q->shard_id)) {
        char m[CO_ID_MAX + 64];
        snprintf(m, sizeof m, "coordinator: shard %s not found", q->shard_id);
        bf_net_call_finish(call, BF_NET_NOT_FOUND, m);
        goto out;
    }
    if (c->st.n_clusters >= CO_MAX_CLUSTERS) {
        bf_net_call_finish(call, BF_NET_RESOURCE_EXHAUSTED, "coordinator: too many clusters");
        goto out;
    }
    Bigfleet__V1alpha1__ClusterAssignment ca = BIGFLEET__V1ALPHA1__CLUSTER_ASSIGNMENT__INIT;
    ca.cluster_id = q->cluster_id;
    ca.shard_id = q->shard_id;
    struct rpc *r = rpc_new(call);
    struct co_op *op = r ? op_put(co_key_cluster(c->cfg.prefix, q->cluster_id), &ca.base) : NULL;
    if (!op || co_commit(c, op, 1, on_written, r)) {
        if (r)
            r->refs = 1;
        bf_net_call_finish(call, BF_NET_UNAVAILABLE, "AssignCluster: etcd");
    }
out:
    if (q)
        bigfleet__v1alpha1__assign_cluster_request__free_unpacked(q, NULL);
}

/* ------------------------------------------------------------ reads */

static void on_list_shards(struct bf_net_call *call, const uint8_t *msg, size_t len, void *arg)
{
    (void)msg;
    (void)len;
    struct coord *c = arg;
    if (!leader_or_refuse(c, call))
        return;
    uint32_t n = c->st.n_shards;
    Bigfleet__V1alpha1__ShardRegistryEntry *e = calloc(n + 1, sizeof *e);
    Bigfleet__V1alpha1__ShardRegistryEntry **ep = calloc(n + 1, sizeof *ep);
    if (!e || !ep) {
        bf_net_call_finish(call, BF_NET_RESOURCE_EXHAUSTED, "out of memory");
    } else {
        for (uint32_t i = 0; i < n; i++) {
            bigfleet__v1alpha1__shard_registry_entry__init(&e[i]);
            e[i].shard_id = c->st.shards[i].id;
            e[i].address = c->st.shards[i].address;
            e[i].registered_at_unix_ns = c->st.shards[i].registered_ns;
            e[i].last_heartbeat_unix_ns = c->st.shards[i].heartbeat_ns;
            ep[i] = &e[i];
        }
        Bigfleet__V1alpha1__ListShardsResponse r = BIGFLEET__V1ALPHA1__LIST_SHARDS_RESPONSE__INIT;
        r.n_shards = n;
        r.shards = ep;
        bf_net_call_reply_pb(call, &r.base);
    }
    free(e);
    free(ep);
}

static void on_list_domains(struct bf_net_call *call, const uint8_t *msg, size_t len, void *arg)
{
    (void)msg;
    (void)len;
    struct coord *c = arg;
    if (!leader_or_refuse(c, call))
        return;
    uint32_t n = c->st.n_domains;
    Bigfleet__V1alpha1__DomainAssignment *e = calloc(n + 1, sizeof *e);
    Bigfleet__V1alpha1__DomainAssignment **ep = calloc(n + 1, sizeof *ep);
    if (!e || !ep) {
        bf_net_call_finish(call, BF_NET_RESOURCE_EXHAUSTED, "out of memory");
    } else {
        for (uint32_t i = 0; i < n; i++) {
            bigfleet__v1alpha1__domain_assignment__init(&e[i]);
            e[i].topology_key = c->st.domains[i].key;
            e[i].topology_value = c->st.domains[i].value;
            e[i].shard_id = c->st.domains[i].shard;
            ep[i] = &e[i];
        }
        Bigfleet__V1alpha1__ListDomainAssignmentsResponse r =
            BIGFLEET__V1ALPHA1__LIST_DOMAIN_ASSIGNMENTS_RESPONSE__INIT;
        r.n_assignments = n;
        r.assignments = ep;
        bf_net_call_reply_pb(call, &r.base);
    }
    free(e);
    free(ep);
}

static void on_list_clusters(struct bf_net_call *call, const uint8_t *msg, size_t len, void *arg)
{
    (void)msg;
    (void)len;
    struct coord *c = arg;
    if (!leader_or_refuse(c, call))
        return;
    uint32_t n = c->st.n_clusters;
    Bigfleet__V1alpha1__ClusterAssignment *e = calloc(n + 1, sizeof *e);
    Bigfleet__V1alpha1__ClusterAssignment **ep = calloc(n + 1, sizeof *ep);
    if (!e || !ep) {
        bf_net_call_finish(call, BF_NET_RESOURCE_EXHAUSTED, "out of memory");
    } else {
        for (uint32_t i = 0; i < n; i++) {
            bigfleet__v1alpha1__cluster_assignment__init(&e[i]);
            e[i].cluster_id = c->st.clusters[i].cluster;
            e[i].shard_id = c->st.clusters[i].shard;
            ep[i] = &e[i];
        }
        Bigfleet__V1alpha1__ListClusterAssignmentsResponse r =
            BIGFLEET__V1ALPHA1__LIST_CLUSTER_ASSIGNMENTS_RESPONSE__INIT;
        r.n_assignments = n;
        r.assignments = ep;
        bf_net_call_reply_pb(call, &r.base);
    }
    free(e);
    free(ep);
}

static void on_list_quotas(struct bf_net_call *call, const uint8_t *msg, size_t len, void *arg)
{
    (void)msg;
    (void)len;
    struct coord *c = arg;
    if (!leader_or_refuse(c, call))
        return;
    Bigfleet__V1alpha1__ListQuotasResponse r = BIGFLEET__V1ALPHA1__LIST_QUOTAS_RESPONSE__INIT;
    r.n_allocations = c->st.n_quotas;
    r.allocations = c->st.quotas;
    bf_net_call_reply_pb(call, &r.base);
}

static void on_list_providers(struct bf_net_call *call, const uint8_t *msg, size_t len, void *arg)
{
    (void)msg;
    (void)len;
    struct coord *c = arg;
    if (!leader_or_refuse(c, call))
        return;
    Bigfleet__V1alpha1__ListProvidersResponse r = BIGFLEET__V1ALPHA1__LIST_PROVIDERS_RESPONSE__INIT;
    r.n_providers = c->st.n_providers;
    r.providers = c->st.providers;
    bf_net_call_reply_pb(call, &r.base);
}

static void on_list_reports(struct bf_net_call *call, const uint8_t *msg, size_t len, void *arg)
{
    struct coord *c = arg;
    if (!leader_or_refuse(c, call))
        return;
    Bigfleet__V1alpha1__ListShardReportsRequest *q =
        bigfleet__v1alpha1__list_shard_reports_request__unpack(NULL, len, msg);
    if (!q) {
        bf_net_call_finish(call, BF_NET_INVALID_ARGUMENT, "undecodable request");
        return;
    }
    Bigfleet__V1alpha1__ShardReportSnapshot *e = calloc(c->n_soft + 1, sizeof *e);
    Bigfleet__V1alpha1__ShardReportSnapshot **ep = calloc(c->n_soft + 1, sizeof *ep);
    uint32_t k = 0;
    if (!e || !ep) {
        bf_net_call_finish(call, BF_NET_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    for (uint32_t i = 0; i < c->n_soft; i++) {
        struct co_soft *s = &c->soft[i];
        if (!s->last || (q->shard_id[0] && strcmp(q->shard_id, s->id)))
            continue;
        bigfleet__v1alpha1__shard_report_snapshot__init(&e[k]);
        e[k].shard_id = s->id;
        e[k].cycle = s->last->cycle;
        e[k].received_at_unix_ns = s->received_ns;
        e[k].summary = s->last->summary;
        e[k].n_shortfalls = s->last->n_shortfalls;
        e[k].shortfalls = s->last->shortfalls;
        ep[k] = &e[k];
        k++;
    }
    /* sorted by shard id (the Go order) */
    for (uint32_t i = 1; i < k; i++)
        for (uint32_t j = i; j > 0 && strcmp(ep[j - 1]->shard_id, ep[j]->shard_id) > 0; j--) {
            Bigfleet__V1alpha1__ShardReportSnapshot *t = ep[j];
            ep[j] = ep[j - 1];
            ep[j - 1] = t;
        }
    Bigfleet__V1alpha1__ListShardReportsResponse r =
        BIGFLEET__V1ALPHA1__LIST_SHARD_REPORTS_RESPONSE__INIT;
    r.n_reports = k;
    r.reports = ep;
    bf_net_call_reply_pb(call, &r.base);
out:
    free(e);
    free(ep);
    bigfleet__v1alpha1__list_shard_reports_request__free_unpacked(q, NULL);
}

static void on_etcd_only(struct bf_net_call *call, const uint8_t *msg, size_t len, void *arg)
{
    (void)msg;
    (void)len;
    (void)arg;
    const char *p = bf_net_call_path(call);
    bf_net_call_finish(call, BF_NET_UNIMPLEMENTED,
                       strstr(p, "Snapshot")
                           ? "coordinator: state lives in etcd; back it up with `etcdctl "
                             "snapshot save` (docs/coordinator.md)"
                           : "coordinator: replicas do not run Raft; membership is etcd's "
                             "(`etcdctl member add`), a replica joins by pointing "
                             "--etcd-endpoints at the cluster (docs/coordinator.md)");
}

/* ------------------------------------------------------------ lifecycle */

#define M(name, fn, kind)                                                                          \
    {                                                                                              \
        "/bigfleet.v1alpha1.Coordinator/" name, kind, NULL, fn, NULL, NULL, on_done, NULL          \
    }

/* c->on_elected: the store is loaded; re-assert every domain assignment */
static void became_leader(struct coord *c)
{
    /* re-assert every durable domain assignment (idempotent on the shards) */
    for (uint32_t i = 0; i < c->st.n_domains; i++)
        dop_add(c, c->st.domains[i].shard, c->st.domains[i].key, c->st.domains[i].value, true);
}

/* c->on_lost: drop the soft state (seed 002: the new leader re-derives it) */
static void lost_leadership(struct coord *c)
{
    uint64_t dropped = 0;
    for (uint32_t i = 0; i < c->n_soft; i++) {
        dropped += c->soft[i].n_pend;
        co_soft_free(&c->soft[i]);
    }
    quota_forget(c);
    uint32_t moves = c->rb ? co_rb_moves_in_flight(c->rb) : 0;
    c->instr_dropped_stepdown += dropped;
    c->moves_dropped_stepdown += moves;
    if (dropped || moves)
        BF_WARN("coordinator: soft state dropped on step-down",
                "instructions_pending=%llu moves_in_flight=%u", (unsigned long long)dropped, moves);
    c->n_soft = 0;
    while (c->n_dops)
        dop_end(c, 0);
    if (c->rb)
        co_rb_reset(c->rb);
    c->seq_next = c->seq_limit = 0;
}

int co_server_start(struct coord *c)
{
    c->on_elected = became_leader;
    c->on_lost = lost_leadership;
    struct rb_ops ops = {.send = rb_send, .quota = rb_quota, .arg = c};
    int rc = co_rb_new(&c->cfg.rb, c->types, c->n_types, &ops, &c->rb);
    if (rc)
        return rc;
    static struct bf_net_method methods[] = {
        M("ReportShard", on_report, BF_NET_UNARY),
        M("AssignDomain", on_assign_domain, BF_NET_UNARY),
        M("UnassignDomain", on_unassign_domain, BF_NET_UNARY),
        M("RemoveShard", on_remove_shard, BF_NET_UNARY),
        M("ListShards", on_list_shards, BF_NET_UNARY),
        M("ListDomainAssignments", on_list_domains, BF_NET_UNARY),
        M("ListQuotas", on_list_quotas, BF_NET_UNARY),
        M("ListProviders", on_list_providers, BF_NET_UNARY),
        M("ListShardReports", on_list_reports, BF_NET_UNARY),
        M("JoinRaftCluster", on_etcd_only, BF_NET_UNARY),
        M("SnapshotSave", on_etcd_only, BF_NET_SERVER_STREAMING),
        M("AssignCluster", on_assign_cluster, BF_NET_UNARY),
        M("ListClusterAssignments", on_list_clusters, BF_NET_UNARY),
    };
    size_t n = sizeof methods / sizeof methods[0];
    for (size_t i = 0; i < n; i++)
        methods[i].arg = c;
    struct bf_net_server_opts o = {.addr = c->cfg.listen,
                                   .methods = methods,
                                   .n_methods = n,
                                   .max_recv_message = CO_REPORT_MAX,
                                   .max_inbound_buffered = 64u << 20};
    rc = bf_net_server_new(c->loop, &o, &c->srv);
    if (rc)
        BF_ERROR("cannot listen", "addr=%s error=\"%s\"", c->cfg.listen, strerror(-rc));
    return rc;
}

void co_server_stop(struct coord *c)
{
    if (c->srv)
        bf_net_server_free(c->srv);
    c->srv = NULL;
    for (uint32_t i = 0; i < c->n_soft; i++)
        co_soft_free(&c->soft[i]);
    free(c->soft);
    c->soft = NULL;
    c->n_soft = 0;
    while (c->n_dops)
        dop_end(c, 0);
    free(c->dops);
    c->dops = NULL;
    co_rb_free(c->rb);
    c->rb = NULL;
}

void co_rebalance_pass(struct coord *c)
{
    if (!co_is_leader(c))
        return;
    for (uint32_t i = 0; i < c->n_dops; i++)
        if (!c->dops[i].id[0])
            dop_send(c, &c->dops[i]);
    if (!c->cfg.rebalance)
        return;
    struct rb_shard *sh = calloc(c->n_soft + 1, sizeof *sh);
    if (!sh)
        return;
    size_t n = 0;
    for (uint32_t i = 0; i < c->n_soft; i++) {
        struct co_soft *s = &c->soft[i];
        if (!s->last)
            continue;
        sh[n++] = (struct rb_shard){s->id, s->report_seq, s->free, s->n_free, s->sf, s->n_sf};
    }
    co_rb_pass(c->rb, sh, n, bf_now_ns());
    free(sh);
}
