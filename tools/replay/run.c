/*
 * run.c — the operator emulator at work: K cluster sessions on
 * Shard/Session over N HTTP/2 connections, the replay clock, and the
 * bookkeeping behind the report.
 *
 * Design notes
 *  - One io_uring event loop (bigfleet/net.h), one thread. Every cluster
 *    owns one bidi stream (the Go operator's one long-lived session), a
 *    periodic rollup timer and a reconnect timer. Clusters are spread over
 *    the connections round-robin (a connection carries at most 100
 *    concurrent streams: SETTINGS_MAX_CONCURRENT_STREAMS of our server).
 *  - Session protocol (shard.md §4): Hello first; the shard's Ack{"hello"}
 *    makes the session ready. Once every cluster is ready the clock starts
 *    (t0); afterwards a (re)connected session gets its current rollup at
 *    once, like the operator's immediate fire on connect. A stream that
 *    ends is re-dialled with backoff (0.2 s doubling to 5 s).
 *  - Rollups (seeds/001 hop 2): every interval the cluster rebuilds its
 *    complete demand from the pods alive at its trace time and sends the
 *    full replacement. A rollup that cannot be handed to the stream
 *    (session down, or more than 1 MiB still queued) waits in a one-slot
 *    pending flag and is rebuilt when the stream can take it: an older one
 *    is never queued behind a newer one (the operator's coalesce-by-replace).
 *  - Shard frames: BootstrapRequest -> BootstrapBlobResponse at once;
 *    ReclaimInstruction -> cordon (UpcomingNode Draining) + ReclaimAck;
 *    NodeStateUpdate -> machine table, UpcomingNode phase, per-cluster
 *    supply by shape; Ack and AvailableCapacityUpdate are counted.
 *  - Measurements (docs/replay.md "Report"): coverage of each Need is
 *    recomputed (supply.c) after every rollup and, deferred to the end of
 *    the loop iteration, after NodeStateUpdates change a cluster's
 *    Configured supply. A pod is bound when its Need is covered; its
 *    binding latency runs from the first rollup sent with it.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "bigfleet/log.h"
#include "bigfleet/strbuf.h"
#include "bigfleet/util.h"
#include "bigfleet/v1alpha1/shard.pb-c.h"
#include "run.h"

#define SESSION_PATH   "/bigfleet.v1alpha1.Shard/Session"
#define OUTBOX_LIMIT   (1u << 20)
#define BACKOFF_MIN_NS (200 * BF_NS_PER_MS)
#define BACKOFF_MAX_NS (5 * BF_NS_PER_SEC)

const char *const rp_phase_name[RP_PH_COUNT] = {
    "Provisioning", "Launched", "Registered", "Ready", "Draining", "Drained", "Failed", "Deleting",
};

static void session_start(struct rp_cluster *c);
static void flush_rollup(struct rp_cluster *c);
static void begin_end(struct rp_run *r);
static void on_progress(struct bf_net_timer *t, void *arg);

/* ------------------------------------------------------------ machines */

static struct rp_machine *machine_find(struct rp_run *r, const char *id)
{
    const uint32_t *i = rp_idmap_ref(&r->mh, id);
    return i ? &r->m[*i] : NULL;
}

static struct rp_machine *machine_get(struct rp_run *r, const char *id)
{
    struct rp_machine *m = machine_find(r, id);
    if (m)
        return m;
    if (rp_idmap_reserve(&r->mh, (uint32_t)r->n_m + 1)) /* the put below cannot fail */
        return NULL;
    if (r->n_m == r->cap_m && bf_grow((void **)&r->m, &r->cap_m, r->n_m + 1, sizeof *r->m))
        return NULL;
    m = &r->m[r->n_m];
    memset(m, 0, sizeof *m);
    m->id = strdup(id);
    if (!m->id)
        return NULL;
    m->cluster = -1;
    m->shape = -1;
    m->state = BF_STATE_UNSPECIFIED;
    m->phase = RP_PH_PROVISIONING;
    rp_idmap_put(&r->mh, m->id, (uint32_t)r->n_m++);
    return m;
}

static int sup_add(struct rp_supply_ent **v, size_t *n, size_t *cap, uint32_t shape, int delta)
{
    for (size_t i = 0; i < *n; i++) {
        if ((*v)[i].shape == shape) {
            (*v)[i].n += delta;
            if ((*v)[i].n <= 0)
                (*v)[i] = (*v)[--*n];
            return 0;
        }
    }
    if (delta <= 0)
        return 0;
    if (*n == *cap && bf_grow((void **)v, cap, *n + 1, sizeof **v))
        return -ENOMEM;
    (*v)[(*n)++] = (struct rp_supply_ent){shape, delta};
    return 0;
}

static void mark_dirty(struct rp_run *r, struct rp_cluster *c);

/* Adds (sign +1) or removes (-1) a machine's contribution to its cluster. */
static void contrib(struct rp_run *r, struct rp_machine *m, int sign)
{
    if (m->cluster >= 0)
        r->phase_count[m->phase] += (uint64_t)(int64_t)sign;
    if (m->cluster < 0 || m->shape < 0)
        return;
    struct rp_cluster *c = &r->cl[m->cluster];
    uint32_t sh = (uint32_t)m->shape;
    double price = r->shapes.v[sh].price;
    if (m->state == BF_STATE_CONFIGURED) {
        if (sup_add(&c->conf, &c->n_conf, &c->cap_conf, sh, sign) ||
            (m->cordoned && sup_add(&c->cord, &c->n_cord, &c->cap_cord, sh, sign)) ||
            (!m->cordoned && m->reused && sup_add(&c->reuse, &c->n_reuse, &c->cap_reuse, sh, sign)))
            BF_ERROR("out of memory", "what=supply");
        mark_dirty(r, c);
        if (m->cordoned)
            c->cost_drain += sign * price;
    } else if (m->state == BF_STATE_CONFIGURING) {
        if (sup_add(&c->cing, &c->n_cing, &c->cap_cing, sh, sign))
            BF_ERROR("out of memory", "what=supply");
        c->cost_cing += sign * price;
    } else if (m->state == BF_STATE_DRAINING) {
        c->cost_drain += sign * price;
    }
    if (m->state == BF_STATE_CONFIGURING || m->state == BF_STATE_CONFIGURED ||
        m->state == BF_STATE_DRAINING)
        c->bound_cost += sign * price;
}

static uint8_t phase_of(int state, uint8_t prev_phase, bool cordoned)
{
    switch (state) {
    case BF_STATE_SPECULATIVE:
    case BF_STATE_CREATING:
        return RP_PH_PROVISIONING;
    case BF_STATE_IDLE:
        return prev_phase == RP_PH_DRAINING ? RP_PH_DRAINED : RP_PH_LAUNCHED;
    case BF_STATE_CONFIGURING:
        return RP_PH_REGISTERED;
    case BF_STATE_CONFIGURED:
        return cordoned ? RP_PH_DRAINING : RP_PH_READY;
    case BF_STATE_DRAINING:
        return RP_PH_DRAINING;
    case BF_STATE_DELETING:
        return RP_PH_DELETING;
    case BF_STATE_FAILED:
        return RP_PH_FAILED;
    default:
        return prev_phase;
    }
}

static void parse_resources(const Bigfleet__V1alpha1__Resources *res, rp_res *out, bool *any)
{
    memset(out, 0, sizeof *out);
    *any = false;
    if (!res)
        return;
    for (size_t i = 0; i < res->n_resources; i++) {
        const char *k = res->resources[i]->key, *v = res->resources[i]->value;
        int64_t milli;
        if (!k || !v || bf_quantity_parse(v, strlen(v), &milli) || milli < 0)
            continue;
        if (!strcmp(k, "cpu"))
            out->v[RP_CPU] = milli;
        else if (!strcmp(k, "memory"))
            out->v[RP_MEM] = milli / (1000LL * 1048576LL);
        else if (!strcmp(k, BF_SIM_RESOURCE_GPU))
            out->v[RP_GPU] = milli;
        else
            continue;
        *any = true;
    }
}

static void on_node_state(struct rp_run *r, struct rp_cluster *c,
                          const Bigfleet__V1alpha1__NodeStateUpdate *u)
{
    r->nsu++;
    if (!u->machine_id || !u->machine_id[0]) {
        r->bad_msgs++;
        return;
    }
    struct rp_machine *m = machine_get(r, u->machine_id);
    if (!m) {
        BF_ERROR("out of memory", "what=machines");
        return;
    }
    int32_t shape = m->shape;
    rp_res alloc;
    bool any;
    parse_resources(u->resources, &alloc, &any);
    if (any) {
        const char *keys[64], *vals[64];
        size_t nl = 0;
        for (size_t i = 0; i < u->n_labels && nl < 64; i++) {
            keys[nl] = u->labels[i]->key;
            vals[nl++] = u->labels[i]->value;
        }
        int s = rp_shape_intern(&r->shapes, r->model, nl, keys, vals, &alloc);
        if (s >= 0)
            shape = s;
    }
    int st = (int)u->state;
    if (st <= BF_STATE_UNSPECIFIED || st >= BF_STATE_COUNT) {
        r->bad_msgs++;
        return;
    }
    contrib(r, m, -1);
    int prev_state = m->state;
    int32_t prev_cluster = m->cluster;
    uint8_t prev_phase = m->phase;
    m->shape = shape;
    m->state = (uint8_t)st;
    if (st == BF_STATE_CONFIGURED &&
        !(prev_state == BF_STATE_CONFIGURED && prev_cluster == (int32_t)c->idx)) {
        m->cordoned = false; /* a new binding */
        m->reused = m->ever_bound;
        m->ever_bound = true;
        r->reused_bindings += m->reused;
    }
    switch (st) {
    case BF_STATE_IDLE:
    case BF_STATE_SPECULATIVE:
    case BF_STATE_DELETING:
        m->cluster = -1;
        break;
    default:
        m->cluster = (int32_t)c->idx;
    }
    m->phase = phase_of(st, prev_phase, m->cordoned);
    if (st == BF_STATE_IDLE && m->phase == RP_PH_DRAINED && prev_phase != RP_PH_DRAINED) {
        r->drained++;
        m->cordoned = false;
    }
    if (st == BF_STATE_CONFIGURED &&
        !(prev_state == BF_STATE_CONFIGURED && prev_cluster == (int32_t)c->idx))
        r->provisioned++;
    if (st == BF_STATE_FAILED && prev_state != BF_STATE_FAILED)
        r->failed++;
    if (st == BF_STATE_CONFIGURED && m->shape < 0)
        r->nsu_no_shape++;
    contrib(r, m, +1);
}

/* ------------------------------------------------------------ coverage */

static const struct rp_need *need_of(const struct rp_cluster *c, uint32_t cls, size_t *idx)
{
    size_t lo = 0, hi = c->n_needs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c->needs[mid].cls < cls)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < c->n_needs && c->needs[lo].cls == cls) {
        *idx = lo;
        return &c->needs[lo];
    }
    return NULL;
}

static int push_sample(int64_t **v, size_t *n, size_t *cap, int64_t x)
{
    if (*n == *cap && bf_grow((void **)v, cap, *n + 1, sizeof **v))
        return -ENOMEM;
    (*v)[(*n)++] = x;
    return 0;
}

/*
 * Recomputes which of c's Needs its Configured supply covers and binds the
 * pending pods of covered Needs. at_send: pods first seen right now whose
 * Need is already covered were served by spare capacity (no new machine).
 */
static void coverage(struct rp_run *r, struct rp_cluster *c, int64_t now, bool at_send,
                     rp_res *covered_out)
{
    if (c->n_needs == 0)
        return;
    rp_res stack_res[64];
    rp_res *res = c->n_needs <= 64 ? stack_res : malloc(c->n_needs * sizeof *res);
    if (!res)
        return;
    if (rp_attribute(&r->shapes, r->model, c->needs, c->n_needs, c->conf, c->n_conf, RP_ORDER_BEST,
                     res, covered_out)) {
        if (res != stack_res)
            free(res);
        return;
    }
    for (size_t i = 0; i < c->n_alive; i++) {
        struct rp_alive *a = &c->alive[i];
        if (a->st != RP_POD_PENDING || a->first_seen_ns == 0)
            continue;
        size_t ni;
        if (!need_of(c, a->cls, &ni))
            continue;
        bool ok = true;
        for (int d = 0; d < RP_DIMS; d++)
            ok &= res[ni].v[d] == 0;
        if (!ok)
            continue;
        if (at_send && a->first_seen_ns == now) {
            a->st = RP_POD_COVERED_AT_ONCE;
            r->pods_covered_at_once++;
            continue;
        }
        a->st = RP_POD_BOUND;
        push_sample(&r->lat, &r->n_lat, &r->cap_lat, now - a->first_seen_ns);
        const struct rp_pod *p = &r->trace->pods[a->pod];
        if (p->create >= r->clock.from) {
            int64_t created = r->t0 + rp_clock_wall_of(&r->clock, c->idx, p->create);
            if (now >= created)
                push_sample(&r->e2e, &r->n_e2e, &r->cap_e2e, now - created);
        }
    }
    if (res != stack_res)
        free(res);
}

static void run_dirty(void *arg)
{
    struct rp_run *r = arg;
    r->defer_armed = false;
    int64_t now = bf_mono_ns();
    for (size_t i = 0; i < r->n_dirty; i++) {
        struct rp_cluster *c = &r->cl[r->dirty[i]];
        c->dirty = false;
        coverage(r, c, now, false, NULL);
    }
    r->n_dirty = 0;
}

static void mark_dirty(struct rp_run *r, struct rp_cluster *c)
{
    if (c->dirty || !r->started)
        return;
    c->dirty = true;
    r->dirty[r->n_dirty++] = c->idx;
    if (!r->defer_armed && bf_net_loop_defer(r->loop, run_dirty, r) == 0)
        r->defer_armed = true;
}

/* ------------------------------------------------------------ reclaims */

static void check_reclaim(struct rp_run *r, struct rp_cluster *c, struct rp_machine *m,
                          int32_t prio, int64_t now)
{
    if (prio != 0 || m->shape < 0 || c->hist_n == 0)
        return;
    /* the supply the shard credits (ADR-0045: Configured, then Configuring),
     * without the machine being reclaimed nor those already cordoned for a
     * reclaim (they are leaving) */
    size_t n;
    struct rp_supply_ent *sup = rp_supply_without(c, m, &n);
    if (!sup)
        return;
    /* candidate demands: every rollup sent within the window, and the last
     * one before it (a cycle may have acted on any of them) */
    const struct rp_hist *cand[64];
    size_t nc = rp_candidate_demands(c, r->cfg, now, cand, 64);
    bool needed_all = nc > 0;
    for (size_t j = 0; j < nc && needed_all; j++)
        if (rp_machine_needed(&r->shapes, r->model, cand[j]->needs, cand[j]->n, sup, n,
                              (uint32_t)m->shape) <= 0)
            needed_all = false;
    free(sup);
    if (!needed_all)
        return;
    if (r->reclaim_still_demanded < RP_RECLAIM_SAMPLES) {
        struct rp_reclaim_event *ev = &r->still_demanded[r->reclaim_still_demanded];
        ev->at_ns = now - r->t0;
        snprintf(ev->machine, sizeof ev->machine, "%s", m->id);
        snprintf(ev->cluster, sizeof ev->cluster, "%s", c->id);
        snprintf(ev->type, sizeof ev->type, "%s", r->shapes.v[m->shape].type);
        ev->preemptor_priority = prio;
    }
    r->reclaim_still_demanded++;
    BF_WARN("reclaim of a still-demanded machine", "machine=\"%s\" cluster=%s type=%s", m->id,
            c->id, r->shapes.v[m->shape].type);
}

static void on_reclaim(struct rp_run *r, struct rp_cluster *c,
                       const Bigfleet__V1alpha1__ReclaimInstruction *ri)
{
    r->reclaim_msgs++;
    int64_t now = bf_mono_ns();
    for (size_t i = 0; i < ri->n_nodes; i++) {
        struct rp_machine *m = ri->nodes[i] ? machine_find(r, ri->nodes[i]) : NULL;
        if (!m) {
            r->reclaim_unknown++;
            continue;
        }
        if (ri->preemptor_priority > 0) {
            r->preempted++;
            rp_contend_preempt(r, c, m, ri->preemptor_priority, now);
        } else {
            r->reclaimed++;
            check_reclaim(r, c, m, ri->preemptor_priority, now);
        }
        contrib(r, m, -1);
        m->cordoned = true;
        if (m->state == BF_STATE_CONFIGURED)
            m->phase = RP_PH_DRAINING;
        contrib(r, m, +1);
    }
    Bigfleet__V1alpha1__ReclaimAck ack = BIGFLEET__V1ALPHA1__RECLAIM_ACK__INIT;
    ack.instruction_id = ri->instruction_id;
    ack.nodes_started = (int32_t)ri->n_nodes;
    Bigfleet__V1alpha1__OperatorMessage om = BIGFLEET__V1ALPHA1__OPERATOR_MESSAGE__INIT;
    om.payload_case = BIGFLEET__V1ALPHA1__OPERATOR_MESSAGE__PAYLOAD_RECLAIM_ACK;
    om.reclaim_ack = &ack;
    if (c->stream && bf_net_stream_send_pb(c->stream, &om.base))
        r->send_errors++;
}

static void on_bootstrap(struct rp_run *r, struct rp_cluster *c,
                         const Bigfleet__V1alpha1__BootstrapRequest *br)
{
    r->boot_req++;
    if (br->cluster_id && br->cluster_id[0] && strcmp(br->cluster_id, c->id))
        r->boot_cluster_mismatch++;
    /* a kubelet join blob in the shape the operator renders (cloud-init);
     * the shard forwards it verbatim to Configure */
    char blob[1024];
    int n = snprintf(blob, sizeof blob,
                     "#cloud-config\n# bigfleet-replay bootstrap\n"
                     "write_files:\n- path: /etc/bigfleet/join\n  content: |\n"
                     "    cluster=%s\n    request=%s\n    requirements=%zu\n",
                     c->id, br->request_id ? br->request_id : "", br->n_requirements);
    Bigfleet__V1alpha1__BootstrapBlobResponse resp =
        BIGFLEET__V1ALPHA1__BOOTSTRAP_BLOB_RESPONSE__INIT;
    resp.request_id = br->request_id;
    resp.user_data.data = (uint8_t *)blob;
    resp.user_data.len = (size_t)(n < (int)sizeof blob ? n : (int)sizeof blob - 1);
    resp.ttl_seconds = 3600;
    Bigfleet__V1alpha1__OperatorMessage om = BIGFLEET__V1ALPHA1__OPERATOR_MESSAGE__INIT;
    om.payload_case = BIGFLEET__V1ALPHA1__OPERATOR_MESSAGE__PAYLOAD_BOOTSTRAP_RESPONSE;
    om.bootstrap_response = &resp;
    if (c->stream && bf_net_stream_send_pb(c->stream, &om.base))
        r->send_errors++;
}

/* ------------------------------------------------------------ rollups */

static int alive_push(struct rp_cluster *c, uint32_t pod, uint32_t cls)
{
    if (c->n_alive == c->cap_alive &&
        bf_grow((void **)&c->alive, &c->cap_alive, c->n_alive + 1, sizeof *c->alive))
        return -ENOMEM;
    c->alive[c->n_alive++] = (struct rp_alive){pod, cls, 0, RP_POD_PENDING};
    return 0;
}

/* Brings c's alive set to trace time tau and rebuilds c->needs. */
static int advance_to(struct rp_run *r, struct rp_cluster *c, int64_t tau)
{
    const struct rp_trace *t = r->trace;
    if (tau >= r->clock.from) {
        size_t w = 0;
        for (size_t i = 0; i < c->n_alive; i++) {
            struct rp_alive *a = &c->alive[i];
            if (rp_pod_alive(t, &t->pods[a->pod], tau)) {
                c->alive[w++] = *a;
            } else if (a->st == RP_POD_PENDING && a->first_seen_ns) {
                r->pods_deleted_unbound++;
            }
        }
        c->n_alive = w;
        while (c->cursor < t->n_pods && t->pods[t->by_create[c->cursor]].create <= tau) {
            uint32_t p = t->by_create[c->cursor++];
            if (rp_pod_alive(t, &t->pods[p], tau)) {
                if (alive_push(c, p, t->pods[p].cls))
                    return -ENOMEM;
                r->pods_observed++;
            } else if (rp_pod_alive_in(t, &t->pods[p], r->clock.from, tau)) {
                r->pods_unobserved++; /* lived and died between two rollups */
            }                         /* else: gone before the window: not one of its pods */
        }
    }
    if (c->n_alive == 0) {
        c->n_needs = 0;
        return 0;
    }
    uint32_t stackp[256];
    uint32_t *pods = c->n_alive <= 256 ? stackp : malloc(c->n_alive * sizeof *pods);
    if (!pods)
        return -ENOMEM;
    for (size_t i = 0; i < c->n_alive; i++)
        pods[i] = c->alive[i].pod;
    c->n_needs = rp_aggregate(r->model, pods, c->n_alive, c->needs);
    if (pods != stackp)
        free(pods);
    return 0;
}

static void hist_push(struct rp_cluster *c, int64_t now, int64_t k)
{
    struct rp_hist *e = &c->hist[c->hist_head];
    if (e->cap < c->n_needs) {
        struct rp_need *nn = realloc(e->needs, c->n_needs * sizeof *nn);
        if (!nn)
            return;
        e->needs = nn;
        e->cap = c->n_needs;
    }
    if (c->n_needs)
        memcpy(e->needs, c->needs, c->n_needs * sizeof *c->needs);
    e->n = c->n_needs;
    e->sent_ns = now;
    e->k = k;
    c->hist_head = (c->hist_head + 1) % c->hist_cap;
    if (c->hist_n < c->hist_cap)
        c->hist_n++;
}

/* Encodes c->needs now and hands it to the stream, or leaves it pending. */
static void flush_rollup(struct rp_cluster *c)
{
    struct rp_run *r = c->run;
    if (c->cur_k < 0)
        return;
    if (c->sess != RP_SESS_READY || !c->stream) {
        if (c->pending_len)
            c->rollups_unsent++; /* replaced by a newer one before it could go */
        c->pending_len = 1;
        return;
    }
    if (bf_net_stream_outbox_bytes(c->stream) > OUTBOX_LIMIT) {
        if (c->pending_len)
            c->rollups_coalesced++;
        c->pending_len = 1;
        return;
    }
    uint8_t *buf;
    size_t len;
    if (rp_rollup_encode(r->model, c->id, bf_now_ns(), c->needs, c->n_needs, &buf, &len)) {
        BF_ERROR("out of memory", "what=rollup");
        return;
    }
    int rc = bf_net_stream_send(c->stream, buf, len);
    free(buf);
    c->pending_len = 0;
    if (rc) {
        r->send_errors++;
        c->pending_len = 1;
        return;
    }
    c->rollups_sent++;
    c->sent_since_rx++;
    int64_t now = bf_mono_ns();
    for (size_t i = 0; i < c->n_alive; i++)
        if (c->alive[i].first_seen_ns == 0)
            c->alive[i].first_seen_ns = now;
    hist_push(c, now, c->cur_k);
    coverage(r, c, now, true, NULL);
}

static struct rp_tick *tick_at(struct rp_run *r, int64_t k)
{
    if (k < 0 || (size_t)k >= r->n_ticks)
        return NULL;
    return &r->ticks[k];
}

/* Adds c's cost split (cost.c) to the point t and to c's running sum. */
static void split_sample(struct rp_run *r, struct rp_cluster *c, struct rp_tick *t)
{
    size_t n = 0;
    struct rp_supply_ent *sup = malloc((c->n_conf + 1) * sizeof *sup);
    int32_t *reused = malloc((c->n_conf + 1) * sizeof *reused);
    if (!sup || !reused)
        goto out;
    for (size_t i = 0; i < c->n_conf; i++) {
        int32_t cnt = c->conf[i].n, re = 0;
        for (size_t j = 0; j < c->n_cord; j++)
            if (c->cord[j].shape == c->conf[i].shape)
                cnt -= c->cord[j].n;
        for (size_t j = 0; j < c->n_reuse; j++)
            if (c->reuse[j].shape == c->conf[i].shape)
                re = c->reuse[j].n;
        if (cnt > 0) {
            reused[n] = re;
            sup[n++] = (struct rp_supply_ent){c->conf[i].shape, cnt, 0};
        }
    }
    struct rp_cost_split one = {0};
    if (rp_cost_split_add(&r->shapes, r->model, c->needs, c->n_needs, sup, n, reused, c->cost_cing,
                          c->cost_drain, &one) == 0) {
        t->split.cost += one.cost;
        t->split.lower_bound += one.lower_bound;
        t->split.needs_without_type += one.needs_without_type;
        c->split_sum.cost += one.cost;
        c->split_sum.lower_bound += one.lower_bound;
        for (int p = 0; p < RP_COST_PARTS; p++) {
            t->split.part[p] += one.part[p];
            c->split_sum.part[p] += one.part[p];
        }
        c->split_n++;
    }
out:
    free(sup);
    free(reused);
}

/* The sample of rollup k: its demand against the Configured supply now. */
static void sample(struct rp_run *r, struct rp_cluster *c, int64_t k)
{
    struct rp_tick *t = tick_at(r, k);
    int64_t now = bf_mono_ns();
    rp_res stack_cov[64];
    rp_res *cov = c->n_needs <= 64 ? stack_cov : calloc(c->n_needs, sizeof *cov);
    if (!cov)
        return;
    memset(cov, 0, (c->n_needs ? c->n_needs : 0) * sizeof *cov);
    coverage(r, c, now, false, cov);
    /* per qos class: the shard's own credit order (priority first), so a
     * class is credited what the shard would give it, not what a better
     * packing across classes could */
    rp_res *qcov = t && c->n_needs ? calloc(2 * c->n_needs, sizeof *qcov) : NULL;
    if (qcov && rp_attribute(&r->shapes, r->model, c->needs, c->n_needs, c->conf, c->n_conf,
                             RP_ORDER_ENGINE, qcov + c->n_needs, qcov)) {
        free(qcov);
        qcov = NULL;
    }
    if (t) {
        for (size_t i = 0; i < c->n_needs; i++) {
            int q = r->model->classes[c->needs[i].cls].qos;
            for (int d = 0; d < RP_DIMS; d++) {
                t->demand[d] += (double)c->needs[i].agg.v[d];
                t->covered[d] += (double)cov[i].v[d];
                t->demand_q[q][d] += (double)c->needs[i].agg.v[d];
                t->covered_q[q][d] += (double)(qcov ? qcov[i] : cov[i]).v[d];
            }
            t->weight += c->needs[i].agg.v[RP_CPU] / 1000.0 * 0.033 +
                         c->needs[i].agg.v[RP_MEM] / 1024.0 * 0.00375 +
                         c->needs[i].agg.v[RP_GPU] / 1000.0 * 2.0;
        }
        for (size_t i = 0; i < c->n_conf; i++)
            for (int d = 0; d < RP_DIMS; d++)
                t->bound[d] += (double)r->shapes.v[c->conf[i].shape].alloc.v[d] * c->conf[i].n;
        t->cost += c->bound_cost;
        if (r->model->n_types)
            split_sample(r, c, t);
        t->pods += (uint32_t)c->n_alive;
        t->needs += (uint32_t)c->n_needs;
        t->clusters++;
    }
    free(qcov);
    if (cov != stack_cov)
        free(cov);
}

static void cluster_finish(struct rp_cluster *c)
{
    struct rp_run *r = c->run;
    if (c->finished)
        return;
    c->finished = true;
    bf_net_timer_stop(c->tick);
    if (++r->finished == r->n_cl)
        begin_end(r);
}

static void on_tick(struct bf_net_timer *tm, void *arg)
{
    (void)tm;
    struct rp_cluster *c = arg;
    struct rp_run *r = c->run;
    if (r->ending || c->finished)
        return;
    int64_t now = bf_mono_ns();
    int64_t rel = now - r->t0 - rp_clock_phase_ns(&r->clock, c->idx);
    int64_t due = (rel + r->clock.interval_ns / 2) / r->clock.interval_ns;
    int64_t k = c->k_next;
    if (due > k)
        k = due;
    if (c->cur_k >= 0)
        sample(r, c, c->cur_k);
    if (k > c->k_last && c->cur_k < c->k_last)
        k = c->k_last; /* late: still send the final rollup (tau = until) */
    if (k > c->k_last) {
        cluster_finish(c);
        return;
    }
    if (k > c->k_next) { /* too late for rollups k_next..k-1: skipped */
        r->ticks_skipped += (uint64_t)(k - c->k_next);
        c->ticks_skipped += (uint64_t)(k - c->k_next);
    }
    if (advance_to(r, c, rp_clock_tau(&r->clock, c->idx, k))) {
        BF_ERROR("out of memory", "what=pods");
        return;
    }
    c->cur_k = k;
    c->k_next = k + 1;
    flush_rollup(c);
}

/* ------------------------------------------------------------ sessions */

static void clock_start(struct rp_run *r)
{
    r->started = true;
    int64_t now = bf_mono_ns();
    r->t0 = now + 20 * BF_NS_PER_MS;
    for (uint32_t i = 0; i < r->n_cl; i++) {
        struct rp_cluster *c = &r->cl[i];
        c->k_next = 0;
        bf_net_timer_start(c->tick, r->t0 + rp_clock_phase_ns(&r->clock, i) - now,
                           r->clock.interval_ns);
    }
    bf_net_timer_stop(r->connect_timer);
    BF_INFO("replay started", "clusters=%u speed=%.6g rollup_interval_ms=%lld", r->n_cl,
            r->clock.speed, (long long)(r->clock.interval_ns / BF_NS_PER_MS));
}

static void on_message(struct bf_net_stream *s, const uint8_t *msg, size_t len, void *arg)
{
    (void)s;
    struct rp_cluster *c = arg;
    struct rp_run *r = c->run;
    c->last_rx_ns = bf_mono_ns();
    c->sent_since_rx = 0;
    Bigfleet__V1alpha1__ShardMessage *sm =
        bigfleet__v1alpha1__shard_message__unpack(NULL, len, msg);
    if (!sm) {
        if (r->bad_msgs++ == 0)
            BF_WARN("undecodable ShardMessage", "cluster=%s bytes=%zu", c->id, len);
        return;
    }
    switch (sm->payload_case) {
    case BIGFLEET__V1ALPHA1__SHARD_MESSAGE__PAYLOAD_ACK:
        r->shard_epoch = sm->ack->shard_epoch;
        r->coordinator_term = sm->ack->coordinator_term;
        if (sm->ack->echo && !strcmp(sm->ack->echo, "hello")) {
            c->acks_hello++;
            if (c->sess == RP_SESS_HELLO) {
                c->sess = RP_SESS_READY;
                c->backoff_ns = BACKOFF_MIN_NS;
                if (!c->ever_ready) {
                    c->ever_ready = true;
                    if (++r->ready == r->n_cl && !r->started)
                        clock_start(r);
                }
                if (r->started && !r->ending)
                    flush_rollup(c); /* the operator's immediate rollup on connect */
            }
        } else if (sm->ack->echo && !strcmp(sm->ack->echo, "rollup")) {
            c->acks_rollup++;
        } else {
            r->acks_other++;
        }
        break;
    case BIGFLEET__V1ALPHA1__SHARD_MESSAGE__PAYLOAD_BOOTSTRAP_REQUEST:
        on_bootstrap(r, c, sm->bootstrap_request);
        break;
    case BIGFLEET__V1ALPHA1__SHARD_MESSAGE__PAYLOAD_RECLAIM_INSTRUCTION:
        on_reclaim(r, c, sm->reclaim_instruction);
        break;
    case BIGFLEET__V1ALPHA1__SHARD_MESSAGE__PAYLOAD_NODE_STATE_UPDATE:
        on_node_state(r, c, sm->node_state_update);
        break;
    case BIGFLEET__V1ALPHA1__SHARD_MESSAGE__PAYLOAD_AVAILABLE_CAPACITY:
        r->ac_updates++;
        break;
    default:
        r->unknown_msgs++;
        break;
    }
    bigfleet__v1alpha1__shard_message__free_unpacked(sm, NULL);
}

static void on_drain(struct bf_net_stream *s, void *arg)
{
    (void)s;
    struct rp_cluster *c = arg;
    if (c->pending_len && !c->run->ending)
        flush_rollup(c);
}

static void stop_if_all_closed(struct rp_run *r)
{
    if (!r->stopping)
        return;
    for (uint32_t i = 0; i < r->n_cl; i++)
        if (r->cl[i].stream)
            return;
    bf_net_loop_stop(r->loop);
}

static void on_done(struct bf_net_stream *s, int code, const char *message, void *arg)
{
    (void)s;
    struct rp_cluster *c = arg;
    struct rp_run *r = c->run;
    c->stream = NULL;
    c->sess = RP_SESS_DOWN;
    c->sessions_ended++;
    if (r->stopping) {
        stop_if_all_closed(r);
        return;
    }
    snprintf(r->last_session_error, sizeof r->last_session_error, "%s: %s%s%s", c->id,
             bf_net_code_name(code), message && *message ? ": " : "", message ? message : "");
    if (c->sessions_ended <= 3 || c->sessions_ended % 100 == 0)
        BF_WARN("session ended, reconnecting", "cluster=%s code=%s message=\"%s\" backoff_ms=%lld",
                c->id, bf_net_code_name(code), message ? message : "",
                (long long)(c->backoff_ns / BF_NS_PER_MS));
    bf_net_timer_start(c->retry, c->backoff_ns, 0);
    c->backoff_ns = c->backoff_ns * 2 > BACKOFF_MAX_NS ? BACKOFF_MAX_NS : c->backoff_ns * 2;
}

static void on_retry(struct bf_net_timer *t, void *arg)
{
    (void)t;
    struct rp_cluster *c = arg;
    if (!c->run->stopping && !c->stream)
        session_start(c);
}

static void session_start(struct rp_cluster *c)
{
    struct rp_run *r = c->run;
    static const struct bf_net_stream_cbs cbs = {on_message, on_drain, on_done};
    c->stream = bf_net_client_call(c->client, SESSION_PATH, 0, &cbs, c);
    c->sessions_started++;
    c->sess_start_ns = c->last_rx_ns = bf_mono_ns();
    c->sent_since_rx = 0;
    if (!c->stream) {
        snprintf(r->last_session_error, sizeof r->last_session_error, "%s: %s", c->id,
                 strerror(errno));
        bf_net_timer_start(c->retry, c->backoff_ns, 0);
        return;
    }
    Bigfleet__V1alpha1__Hello hello = BIGFLEET__V1ALPHA1__HELLO__INIT;
    hello.cluster_id = c->id;
    hello.protocol_version = "v1alpha1";
    Bigfleet__V1alpha1__OperatorMessage om = BIGFLEET__V1ALPHA1__OPERATOR_MESSAGE__INIT;
    om.payload_case = BIGFLEET__V1ALPHA1__OPERATOR_MESSAGE__PAYLOAD_HELLO;
    om.hello = &hello;
    if (bf_net_stream_send_pb(c->stream, &om.base)) {
        r->send_errors++;
        bf_net_stream_cancel(c->stream);
        return;
    }
    c->sess = RP_SESS_HELLO;
}

/*
 * Session watchdog. The operator holds its session for as long as the shard
 * answers: a Hello unanswered, or rollups unacknowledged and nothing else
 * heard, for --session-timeout means the session is gone even if the
 * stream was never closed (a peer that died behind a NAT, or a server whose
 * final status the client did not act on): cancel it and dial again.
 */
static void on_watchdog(struct bf_net_timer *t, void *arg)
{
    (void)t;
    struct rp_run *r = arg;
    if (r->stopping)
        return;
    int64_t now = bf_mono_ns(), to = r->cfg->session_timeout_ns;
    for (uint32_t i = 0; i < r->n_cl; i++) {
        struct rp_cluster *c = &r->cl[i];
        if (!c->stream)
            continue;
        bool silent =
            (c->sess == RP_SESS_HELLO && now - c->sess_start_ns > to) ||
            (c->sess == RP_SESS_READY && c->sent_since_rx >= 2 && now - c->last_rx_ns > to);
        if (!silent)
            continue;
        c->sessions_timed_out++;
        if (c->sessions_timed_out <= 3 || c->sessions_timed_out % 100 == 0)
            BF_WARN("session silent, re-dialling", "cluster=%s silent_ms=%lld unacked_rollups=%u",
                    c->id, (long long)((now - c->last_rx_ns) / BF_NS_PER_MS), c->sent_since_rx);
        bf_net_stream_cancel(c->stream); /* on_done follows: re-dial with backoff */
    }
}

/* ------------------------------------------------------------ ending */

static void on_stop_timer(struct bf_net_timer *t, void *arg)
{
    (void)t;
    struct rp_run *r = arg;
    bf_net_loop_stop(r->loop); /* streams still open are cancelled by client_free */
}

static void end_run(struct rp_run *r)
{
    if (r->stopping)
        return;
    r->stopping = true;
    int64_t now = bf_mono_ns();
    for (uint32_t i = 0; i < r->n_cl; i++) {
        struct rp_cluster *c = &r->cl[i];
        bf_net_timer_stop(c->tick);
        bf_net_timer_stop(c->retry);
        coverage(r, c, now, false, NULL);
        if (c->stream)
            bf_net_stream_close_send(c->stream);
    }
    bf_net_timer_stop(r->progress_timer);
    rp_contend_inspect_stop(r);
    /* the final state (a plain line only if the last one is not fresh) */
    if (r->started && (r->cfg->progress == 2 ||
                       (r->cfg->progress == 1 && now - r->last_progress_ns > BF_NS_PER_SEC)))
        on_progress(NULL, r);
    bf_net_timer_stop(r->watchdog);
    bf_net_timer_start(r->stop_timer, 3 * BF_NS_PER_SEC, 0);
    stop_if_all_closed(r);
}

static void on_settle(struct bf_net_timer *t, void *arg)
{
    (void)t;
    end_run(arg);
}

static void begin_end(struct rp_run *r)
{
    if (r->ending)
        return;
    r->ending = true;
    bf_net_timer_start(r->settle_timer, r->interrupted ? 0 : r->cfg->settle_ns, 0);
}

static void on_signal(struct bf_net_watch *w, int fd, unsigned revents, void *arg)
{
    (void)w;
    (void)revents;
    struct rp_run *r = arg;
    struct signalfd_siginfo si;
    while (read(fd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (r->interrupted) {
            bf_net_loop_stop(r->loop); /* second signal: stop at once */
            continue;
        }
        r->interrupted = true;
        BF_WARN("interrupted: writing the report for the part replayed", "signal=%u", si.ssi_signo);
        if (!r->started) {
            r->exit_code = 1;
            r->stopping = true;
            bf_net_loop_stop(r->loop);
            continue;
        }
        for (uint32_t i = 0; i < r->n_cl; i++) {
            struct rp_cluster *c = &r->cl[i];
            if (!c->finished) {
                if (c->cur_k >= 0)
                    sample(r, c, c->cur_k);
                c->finished = true;
                bf_net_timer_stop(c->tick);
                r->finished++;
            }
        }
        begin_end(r);
    }
}

static void on_connect_timeout(struct bf_net_timer *t, void *arg)
{
    (void)t;
    struct rp_run *r = arg;
    if (r->started)
        return;
    fprintf(stderr,
            "bigfleet-replay: only %u of %u sessions to %s were accepted within %lld s%s%s\n",
            r->ready, r->n_cl, r->cfg->shard_addr,
            (long long)(r->cfg->connect_timeout_ns / BF_NS_PER_SEC),
            r->last_session_error[0] ? "; last error: " : "", r->last_session_error);
    r->exit_code = 1;
    r->stopping = true;
    bf_net_loop_stop(r->loop);
}

/* ------------------------------------------------------------ progress */

static void fmt_trace(int64_t s, char *buf, size_t n)
{
    if (s < 0)
        s = 0;
    snprintf(buf, n, "d%lld %02d:%02d", (long long)(s / 86400), (int)(s % 86400 / 3600),
             (int)(s % 3600 / 60));
}

static void on_progress(struct bf_net_timer *t, void *arg)
{
    (void)t;
    struct rp_run *r = arg;
    const struct rp_config *cfg = r->cfg;
    int64_t now = bf_mono_ns();
    double el = (double)(now - r->t0) / 1e9;
    int64_t last_k = 0;
    for (uint32_t i = 0; i < r->n_cl; i++)
        if (r->cl[i].k_last > last_k)
            last_k = r->cl[i].k_last;
    double total = (double)(last_k + 1) * (double)r->clock.interval_ns / 1e9;
    double pct = total > 0 ? 100.0 * el / total : 100;
    if (pct > 100)
        pct = 100;
    if (pct < 0)
        pct = 0;
    int64_t base = r->clock.from + (int64_t)(el * r->clock.speed);
    if (base > r->clock.until)
        base = r->clock.until;
    char tt[32];
    fmt_trace(base, tt, sizeof tt);
    uint64_t pods = 0, needs = 0, sent = 0, acked = 0;
    for (uint32_t i = 0; i < r->n_cl; i++) {
        pods += r->cl[i].n_alive;
        needs += r->cl[i].n_needs;
        sent += r->cl[i].rollups_sent;
        acked += r->cl[i].acks_rollup;
    }
    double rate;
    const char *rate_what = "nsu/s";
    double dt = (double)(now - r->last_progress_ns) / 1e9;
    rate = dt > 0 ? (double)(r->nsu - r->nsu_at_last_progress) / dt : 0;
    r->nsu_at_last_progress = r->nsu;
    r->last_progress_ns = now;
    char inv[160] = "";
    if (r->scrape.running) {
        pthread_mutex_lock(&r->scrape.mu);
        if (r->scrape.ok && !isnan(r->scrape.actions_rate)) {
            rate = r->scrape.actions_rate;
            rate_what = "act/s";
        }
        if (r->scrape.ok && !isnan(r->scrape.inv[BF_STATE_SPECULATIVE]))
            snprintf(inv, sizeof inv, " | shard spec %.0f idle %.0f conf %.0f",
                     r->scrape.inv[BF_STATE_SPECULATIVE], r->scrape.inv[BF_STATE_IDLE],
                     r->scrape.inv[BF_STATE_CONFIGURED]);
        pthread_mutex_unlock(&r->scrape.mu);
    }
    /* satisfaction of the latest complete timeline point */
    char sat[32] = "sat -";
    for (int64_t k = (int64_t)r->n_ticks - 1; k >= 0; k--) {
        const struct rp_tick *tk = &r->ticks[k];
        if (tk->clusters == 0)
            continue;
        double m = 1;
        for (int d = 0; d < RP_DIMS; d++)
            if (tk->demand[d] > 0 && tk->covered[d] / tk->demand[d] < m)
                m = tk->covered[d] / tk->demand[d];
        snprintf(sat, sizeof sat, "sat %.1f%%", 100 * m);
        break;
    }
    char line[512];
    snprintf(line, sizeof line,
             "replay %5.1f%% | trace %s | pods %" PRIu64 " | needs %" PRIu64
             " | machines ready %" PRIu64 " reg %" PRIu64 " prov %" PRIu64 " drain %" PRIu64
             " fail %" PRIu64 " | rollups %" PRIu64 " (%" PRIu64 " acked) | %.1f %s | %s%s",
             pct, tt, pods, needs, r->phase_count[RP_PH_READY], r->phase_count[RP_PH_REGISTERED],
             r->phase_count[RP_PH_PROVISIONING], r->phase_count[RP_PH_DRAINING],
             r->phase_count[RP_PH_FAILED], sent, acked, rate, rate_what, sat, inv);
    if (cfg->progress == 2) {
        fprintf(stderr, "\r\033[K%s", line);
        r->progress_line_open = true;
    } else {
        fprintf(stderr, "%s\n", line);
    }
    fflush(stderr);
}

/* ------------------------------------------------------------ /metrics thread */

static void *scrape_main(void *arg)
{
    struct rp_run *r = arg;
    double prev_total = -1;
    int64_t prev_t = 0;
    for (;;) {
        pthread_mutex_lock(&r->scrape.mu);
        bool stop = r->scrape.stop;
        pthread_mutex_unlock(&r->scrape.mu);
        if (stop)
            break;
        int status;
        char *body;
        size_t len;
        int64_t t = bf_mono_ns();
        int rc = rp_http_get(r->cfg->metrics_addr, "/metrics", BF_NS_PER_SEC, &status, &body, &len);
        struct rp_prom p = {0};
        bool ok = rc == 0 && status == 200 && rp_prom_parse(body, len, &p) == 0;
        pthread_mutex_lock(&r->scrape.mu);
        r->scrape.ok = ok;
        if (ok) {
            double total = rp_prom_sum(&p, "bigfleet_shard_actions_total", NULL);
            r->scrape.actions_rate = NAN;
            if (!isnan(total) && prev_total >= 0 && t > prev_t)
                r->scrape.actions_rate = (total - prev_total) / ((double)(t - prev_t) / 1e9);
            prev_total = isnan(total) ? -1 : total;
            prev_t = t;
            r->scrape.actions_total = total;
            for (int s = 1; s < BF_STATE_COUNT; s++) {
                char m[64];
                snprintf(m, sizeof m, "state=\"%s\"", bf_state_name(s));
                double v = rp_prom_sum(&p, "bigfleet_shard_inventory_machines", m);
                /* a state with no machine has no series: 0 once the family exists */
                r->scrape.inv[s] =
                    isnan(v) && !isnan(rp_prom_sum(&p, "bigfleet_shard_inventory_machines", NULL))
                        ? 0
                        : v;
            }
        } else {
            snprintf(r->scrape.last_error, sizeof r->scrape.last_error, "%s",
                     rc ? strerror(-rc) : "bad response");
        }
        pthread_mutex_unlock(&r->scrape.mu);
        rp_prom_free(&p);
        if (rc == 0)
            free(body);
        for (int i = 0; i < 10; i++) {
            pthread_mutex_lock(&r->scrape.mu);
            stop = r->scrape.stop;
            pthread_mutex_unlock(&r->scrape.mu);
            if (stop)
                break;
            struct timespec ts = {0, 100 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}

/* ------------------------------------------------------------ execute */

size_t rp_run_needs_at(const struct rp_run *r, uint32_t i, int64_t k, struct rp_need *out)
{
    int64_t tau = rp_clock_tau(&r->clock, i, k);
    if (tau < r->clock.from)
        return 0;
    const struct rp_trace *t = r->trace;
    uint32_t *pods = malloc((t->n_pods ? t->n_pods : 1) * sizeof *pods);
    if (!pods)
        return 0;
    size_t n = 0;
    for (size_t p = 0; p < t->n_pods; p++)
        if (rp_pod_alive(t, &t->pods[p], tau))
            pods[n++] = (uint32_t)p;
    size_t nn = rp_aggregate(r->model, pods, n, out);
    free(pods);
    return nn;
}

int rp_run_execute(struct rp_run *r)
{
    const struct rp_config *cfg = r->cfg;
    int rc;
    r->exit_code = 0;
    r->start_ns = bf_mono_ns();
    sigset_t ss;
    sigemptyset(&ss);
    sigaddset(&ss, SIGINT);
    sigaddset(&ss, SIGTERM);
    sigprocmask(SIG_BLOCK, &ss, NULL);
    int sfd = signalfd(-1, &ss, SFD_NONBLOCK | SFD_CLOEXEC);
    if ((rc = bf_net_loop_new(NULL, &r->loop))) {
        fprintf(stderr, "bigfleet-replay: cannot create the io_uring loop: %s\n", strerror(-rc));
        return rc;
    }
    struct bf_net_watch *sw = NULL;
    if (sfd >= 0)
        bf_net_watch_fd(r->loop, sfd, POLLIN, on_signal, r, &sw);

    /* the shard serves at most 100 streams per connection (gRPC's default) */
    uint32_t conns = cfg->connections ? cfg->connections : (r->n_cl + 99) / 100;
    if (conns > r->n_cl)
        conns = r->n_cl;
    if (conns == 0)
        conns = 1;
    r->clients = calloc(conns, sizeof *r->clients);
    r->cl = calloc(r->n_cl, sizeof *r->cl);
    r->dirty = calloc(r->n_cl, sizeof *r->dirty);
    if (!r->clients || !r->cl || !r->dirty)
        return -ENOMEM;
    r->n_clients = conns;
    uint32_t per_conn = (r->n_cl + conns - 1) / conns;
    for (uint32_t i = 0; i < conns; i++) {
        struct bf_net_client_opts o = {
            .addr = cfg->shard_addr,
            .tls = cfg->tls,
            .connect_timeout_ns = 5 * BF_NS_PER_SEC,
            .backoff_initial_ns = 200 * BF_NS_PER_MS,
            .backoff_max_ns = 2 * BF_NS_PER_SEC,
            .max_pending = per_conn + 64,
        };
        if ((rc = bf_net_client_new(r->loop, &o, &r->clients[i]))) {
            fprintf(stderr, "bigfleet-replay: --shard-addr %s: %s\n", cfg->shard_addr,
                    strerror(-rc));
            return rc;
        }
    }
    /* the reclaim check looks back --reclaim-window: keep that many rollups */
    uint32_t hist_cap =
        (uint32_t)(cfg->reclaim_window_ns / (r->clock.interval_ns ? r->clock.interval_ns : 1)) + 3;
    if (hist_cap > 64)
        hist_cap = 64;
    int64_t max_k = 0;
    for (uint32_t i = 0; i < r->n_cl; i++) {
        struct rp_cluster *c = &r->cl[i];
        c->run = r;
        c->idx = i;
        snprintf(c->id, sizeof c->id, "%s%u", cfg->cluster_prefix, i);
        c->client = r->clients[i % conns];
        c->tick = bf_net_timer_new(r->loop, on_tick, c);
        c->retry = bf_net_timer_new(r->loop, on_retry, c);
        c->needs = calloc(r->model->n_classes ? r->model->n_classes : 1, sizeof *c->needs);
        c->hist = calloc(hist_cap, sizeof *c->hist);
        if (!c->tick || !c->retry || !c->needs || !c->hist)
            return -ENOMEM;
        c->hist_cap = hist_cap;
        c->cur_k = -1;
        c->backoff_ns = BACKOFF_MIN_NS;
        c->k_last = rp_clock_last_k(&r->clock, i);
        if (c->k_last > max_k)
            max_k = c->k_last;
    }
    if (max_k > 50 * 1000 * 1000) {
        fprintf(stderr,
                "bigfleet-replay: %lld rollups per cluster: raise --speed or "
                "--rollup-interval\n",
                (long long)max_k);
        return -EINVAL;
    }
    r->n_ticks = (size_t)max_k + 1;
    r->ticks = calloc(r->n_ticks, sizeof *r->ticks);
    r->progress_timer = bf_net_timer_new(r->loop, on_progress, r);
    r->settle_timer = bf_net_timer_new(r->loop, on_settle, r);
    r->connect_timer = bf_net_timer_new(r->loop, on_connect_timeout, r);
    r->stop_timer = bf_net_timer_new(r->loop, on_stop_timer, r);
    r->watchdog = bf_net_timer_new(r->loop, on_watchdog, r);
    if (!r->ticks || !r->progress_timer || !r->settle_timer || !r->connect_timer ||
        !r->stop_timer || !r->watchdog)
        return -ENOMEM;
    int64_t wd = cfg->session_timeout_ns / 4;
    if (wd < 50 * BF_NS_PER_MS)
        wd = 50 * BF_NS_PER_MS;
    bf_net_timer_start(r->watchdog, wd, wd);
    bf_net_timer_start(r->connect_timer, cfg->connect_timeout_ns, 0);
    if (cfg->progress)
        bf_net_timer_start(r->progress_timer,
                           cfg->progress == 2 ? 250 * BF_NS_PER_MS : 2 * BF_NS_PER_SEC,
                           cfg->progress == 2 ? 250 * BF_NS_PER_MS : 10 * BF_NS_PER_SEC);
    r->last_progress_ns = bf_mono_ns();
    for (uint32_t i = 0; i < r->n_cl; i++)
        session_start(&r->cl[i]);
    if (rp_contend_inspect_start(r))
        return -ENOMEM;
    if (cfg->metrics_addr) {
        pthread_mutex_init(&r->scrape.mu, NULL);
        if (pthread_create(&r->scrape.thread, NULL, scrape_main, r) == 0)
            r->scrape.running = true;
    }

    rc = bf_net_loop_run(r->loop);
    if (r->progress_line_open) {
        fputc('\n', stderr);
        r->progress_line_open = false;
    }
    if (r->scrape.running) {
        pthread_mutex_lock(&r->scrape.mu);
        r->scrape.stop = true;
        pthread_mutex_unlock(&r->scrape.mu);
        pthread_join(r->scrape.thread, NULL);
        r->scrape.running = false;
    }
    r->stopping = true;
    for (uint32_t i = 0; i < r->n_clients; i++) {
        bf_net_client_free(r->clients[i]);
        r->clients[i] = NULL;
    }
    if (sw)
        bf_net_watch_free(sw);
    if (sfd >= 0)
        close(sfd);
    r->end_ns = bf_mono_ns();
    if (rc) {
        fprintf(stderr, "bigfleet-replay: event loop failed: %s\n", strerror(-rc));
        return rc;
    }
    for (uint32_t i = 0; i < r->n_cl; i++)
        for (size_t j = 0; j < r->cl[i].n_alive; j++)
            if (r->cl[i].alive[j].st == RP_POD_PENDING && r->cl[i].alive[j].first_seen_ns)
                r->pods_never_bound++;
    if (cfg->metrics_addr && r->started) {
        int status;
        char *body;
        size_t len;
        int grc =
            rp_http_get(cfg->metrics_addr, "/metrics", 5 * BF_NS_PER_SEC, &status, &body, &len);
        if (grc == 0 && status == 200 && rp_prom_parse(body, len, &r->final_metrics) == 0) {
            r->have_final_metrics = true;
        } else {
            snprintf(r->metrics_error, sizeof r->metrics_error, "GET http://%s/metrics: %s",
                     cfg->metrics_addr,
                     grc             ? strerror(-grc)
                     : status != 200 ? "HTTP status not 200"
                                     : "unparsable");
        }
        if (grc == 0)
            free(body);
    }
    return r->exit_code ? -ECONNREFUSED : 0;
}

void rp_run_free(struct rp_run *r)
{
    if (!r)
        return;
    for (uint32_t i = 0; r->cl && i < r->n_cl; i++) {
        struct rp_cluster *c = &r->cl[i];
        bf_net_timer_free(c->tick);
        bf_net_timer_free(c->retry);
        free(c->alive);
        free(c->needs);
        for (uint32_t j = 0; c->hist && j < c->hist_cap; j++)
            free(c->hist[j].needs);
        free(c->hist);
        free(c->conf);
        free(c->cing);
        free(c->cord);
        free(c->reuse);
    }
    bf_net_timer_free(r->progress_timer);
    bf_net_timer_free(r->settle_timer);
    bf_net_timer_free(r->connect_timer);
    bf_net_timer_free(r->stop_timer);
    bf_net_timer_free(r->watchdog);
    bf_net_timer_free(r->inspect.timer);
    for (uint32_t i = 0; r->clients && i < r->n_clients; i++)
        bf_net_client_free(r->clients[i]);
    free(r->clients);
    free(r->cl);
    free(r->dirty);
    if (r->loop)
        bf_net_loop_free(r->loop);
    for (size_t i = 0; i < r->n_m; i++)
        free(r->m[i].id);
    free(r->m);
    rp_idmap_free(&r->mh);
    rp_shapes_free(&r->shapes);
    free(r->ticks);
    free(r->lat);
    free(r->e2e);
    rp_prom_free(&r->final_metrics);
}
