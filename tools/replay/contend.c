/*
 * contend.c — what the operator emulator can tell about a contended shard
 * (docs/replay.md §5 "Contended runs"):
 *
 *  - every preemption (a ReclaimInstruction with preemptor_priority > 0)
 *    is classified by the qos class of the preemptor and by the class of
 *    the demand the machine was still serving in its cluster: the highest
 *    class q such that the cluster's Needs of priority >= priority(q)
 *    still need the machine (rp_machine_needed: the engine's claim order,
 *    confirmed by the LP relaxation) under every rollup a cycle may have
 *    acted on; none = the machine was spare. A preemption of demand of a
 *    HIGHER priority than the preemptor's is what must never happen.
 *    (The shard picks victims by the priority the machine was configured
 *    for, seeds/000 §Phase 2; a machine later credited to a Need of the
 *    preemptor's own priority shows here as "same class".)
 *  - the shard's own per-Need verdicts, read through
 *    ShardRead/InspectNeeds every --inspect-interval on the first
 *    connection (a server-streaming call: header, then one NeedView per
 *    Need): unsatisfied Needs by unmet reason and qos class, parked Needs
 *    (AcquisitionParked), Needs whose Phase 2 found victims. The poll that
 *    saw the most unsatisfied Needs and the last one are kept. A refused
 *    call (e.g. PERMISSION_DENIED under mTLS with a cluster certificate)
 *    is counted and named in the report; the replay goes on.
 *
 *  - the two per-cluster views the reclaim check (run.c) shares with the
 *    preemption classification: the supply the shard credits without a
 *    machine (rp_supply_without) and the rollups a cycle may have acted on
 *    (rp_candidate_demands). They live here so that run.c calls this file
 *    and never the other way round (make lint-includes).
 *
 * Single-threaded: runs on the replay's event loop.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/log.h"
#include "bigfleet/util.h"
#include "bigfleet/v1alpha1/shardread.pb-c.h"
#include "run.h"

#define INSPECT_PATH "/bigfleet.v1alpha1.ShardRead/InspectNeeds"

int rp_qos_of_priority(int32_t priority)
{
    for (int q = 0; q < RP_QOS_COUNT; q++)
        if (rp_qos_table[q].priority == priority)
            return q;
    return RP_QOS_COUNT;
}

/*
 * A sufficient condition for rp_machine_needed that needs no LP: let E be
 * the Needs eligible for the machine's shape; if, in a dimension the shape
 * provides, E demands more than every supplied machine eligible for some
 * Need of E could give, then in any fractional claim some Need of E is
 * short there, so the machine (which only Needs of E can use) is fully used
 * and taking it away lowers the coverage. 1 = needed, 0 = not decided.
 * Under heavy contention this settles almost every preemption at the cost
 * of one pass over the Needs and shapes; the LP of rp_machine_needed
 * (hundreds of columns) is left for the close calls.
 */
static int short_in_aggregate(struct rp_run *r, const struct rp_need *needs, size_t n,
                              const struct rp_supply_ent *sup, size_t n_sup, uint32_t shape)
{
    const rp_res *a = &r->shapes.v[shape].alloc;
    double want[RP_DIMS] = {0}, have[RP_DIMS] = {0};
    bool any = false;
    for (size_t i = 0; i < n; i++) {
        if (!rp_need_eligible(&r->shapes, r->model, &needs[i], shape))
            continue;
        any = true;
        for (int d = 0; d < RP_DIMS; d++)
            want[d] += (double)needs[i].agg.v[d];
    }
    if (!any)
        return 0;
    for (size_t j = 0; j < n_sup; j++) {
        bool usable = false;
        for (size_t i = 0; i < n && !usable; i++)
            usable = rp_need_eligible(&r->shapes, r->model, &needs[i], shape) &&
                     rp_need_eligible(&r->shapes, r->model, &needs[i], sup[j].shape);
        if (!usable)
            continue;
        for (int d = 0; d < RP_DIMS; d++)
            have[d] += (double)sup[j].n * (double)r->shapes.v[sup[j].shape].alloc.v[d];
    }
    for (int d = 0; d < RP_DIMS; d++)
        if (a->v[d] > 0 && want[d] > have[d])
            return 1;
    return 0;
}

/* Is m still needed by c's Needs of priority >= floor, in every candidate? */
static int needed_at_or_above(struct rp_run *r, const struct rp_hist *const *cand, size_t nc,
                              const struct rp_supply_ent *sup, size_t n_sup, uint32_t shape,
                              int32_t floor, struct rp_need *buf)
{
    for (size_t j = 0; j < nc; j++) {
        size_t n = 0;
        for (size_t i = 0; i < cand[j]->n; i++)
            if (r->model->classes[cand[j]->needs[i].cls].prof.priority >= floor)
                buf[n++] = cand[j]->needs[i];
        if (short_in_aggregate(r, buf, n, sup, n_sup, shape))
            continue;
        int rc = rp_machine_needed(&r->shapes, r->model, buf, n, sup, n_sup, shape);
        if (rc <= 0)
            return rc;
    }
    return nc > 0;
}

/* ------------------------------------------------------------ views the reclaim check shares */

struct rp_supply_ent *rp_supply_without(const struct rp_cluster *c, const struct rp_machine *m,
                                        size_t *n_out)
{
    size_t n = 0;
    struct rp_supply_ent *sup = malloc((c->n_conf + c->n_cing + 1) * sizeof *sup);
    if (!sup)
        return NULL;
    for (size_t i = 0; i < c->n_conf; i++) {
        int32_t cnt = c->conf[i].n;
        for (size_t j = 0; j < c->n_cord; j++)
            if (c->cord[j].shape == c->conf[i].shape)
                cnt -= c->cord[j].n;
        if (cnt > 0)
            sup[n++] = (struct rp_supply_ent){c->conf[i].shape, cnt, 0};
    }
    for (size_t i = 0; i < c->n_cing; i++)
        sup[n++] = (struct rp_supply_ent){c->cing[i].shape, c->cing[i].n, 1};
    if (m && m->shape >= 0 && m->cluster == (int32_t)c->idx && !m->cordoned &&
        (m->state == BF_STATE_CONFIGURED || m->state == BF_STATE_CONFIGURING)) {
        uint8_t tier = m->state == BF_STATE_CONFIGURED ? 0 : 1;
        for (size_t i = 0; i < n; i++) {
            if (sup[i].shape == (uint32_t)m->shape && sup[i].tier == tier) {
                sup[i].n--;
                break;
            }
        }
    }
    *n_out = n;
    return sup;
}

size_t rp_candidate_demands(const struct rp_cluster *c, const struct rp_config *cfg, int64_t now,
                            const struct rp_hist **out, size_t cap)
{
    int64_t cutoff = now - cfg->reclaim_window_ns;
    bool older_taken = false;
    size_t n = 0;
    for (uint32_t j = 0; j < c->hist_n && n < cap; j++) {
        /* newest first */
        uint32_t h = (c->hist_head + c->hist_cap - 1 - j) % c->hist_cap;
        const struct rp_hist *e = &c->hist[h];
        if (e->sent_ns < cutoff) {
            if (older_taken)
                break;
            older_taken = true;
        }
        out[n++] = e;
    }
    return n;
}

/* ------------------------------------------------------------ preemptions */

void rp_contend_preempt(struct rp_run *r, struct rp_cluster *c, struct rp_machine *m,
                        int32_t preemptor_priority, int64_t now)
{
    int64_t t_start = bf_mono_ns();
    int pq = rp_qos_of_priority(preemptor_priority);
    int victim = RP_VICTIM_UNKNOWN;
    const struct rp_hist *cand[64];
    size_t nc = m->shape >= 0 ? rp_candidate_demands(c, r->cfg, now, cand, 64) : 0;
    size_t n_sup = 0;
    struct rp_supply_ent *sup = nc ? rp_supply_without(c, m, &n_sup) : NULL;
    struct rp_need *buf = sup ? malloc((r->model->n_classes + 1) * sizeof *buf) : NULL;
    if (buf) {
        victim = RP_VICTIM_SPARE;
        for (int q = RP_QOS_COUNT - 1; q >= 0; q--) {
            int rc = needed_at_or_above(r, cand, nc, sup, n_sup, (uint32_t)m->shape,
                                        rp_qos_table[q].priority, buf);
            if (rc < 0) {
                victim = RP_VICTIM_UNKNOWN;
                break;
            }
            if (rc > 0) {
                victim = q;
                break;
            }
        }
    }
    free(buf);
    free(sup);
    r->preempt_judge_ns += bf_mono_ns() - t_start;
    r->preempt_by[pq][victim]++;
    if (victim >= RP_QOS_COUNT || rp_qos_table[victim].priority <= preemptor_priority)
        return;
    if (r->preempt_of_higher < RP_RECLAIM_SAMPLES) {
        struct rp_reclaim_event *ev = &r->preempt_of_higher_ev[r->preempt_of_higher];
        ev->at_ns = now - r->t0;
        snprintf(ev->machine, sizeof ev->machine, "%s", m->id);
        snprintf(ev->cluster, sizeof ev->cluster, "%s", c->id);
        snprintf(ev->type, sizeof ev->type, "%s", r->shapes.v[m->shape].type);
        ev->preemptor_priority = preemptor_priority;
    }
    r->preempt_of_higher++;
    BF_WARN("preemption of higher-priority demand",
            "machine=\"%s\" cluster=%s victim_qos=%s "
            "preemptor_priority=%d",
            m->id, c->id, rp_qos_table[victim].name, (int)preemptor_priority);
}

/* ------------------------------------------------------------ InspectNeeds */

static void inspect_on_message(struct bf_net_stream *s, const uint8_t *msg, size_t len, void *arg)
{
    (void)s;
    struct rp_run *r = arg;
    struct rp_inspect *in = &r->inspect;
    Bigfleet__V1alpha1__InspectNeedsResponse *m =
        bigfleet__v1alpha1__inspect_needs_response__unpack(NULL, len, msg);
    if (!m) {
        snprintf(in->last_error, sizeof in->last_error, "undecodable InspectNeedsResponse");
        return;
    }
    if (m->frame_case == BIGFLEET__V1ALPHA1__INSPECT_NEEDS_RESPONSE__FRAME_HEADER) {
        in->got_header = true;
    } else if (m->frame_case == BIGFLEET__V1ALPHA1__INSPECT_NEEDS_RESPONSE__FRAME_NEED && m->need) {
        const Bigfleet__V1alpha1__NeedView *v = m->need;
        struct rp_inspect_poll *p = &in->cur;
        p->needs++;
        if (!v->satisfied) {
            p->unsatisfied++;
            p->unsatisfied_q[rp_qos_of_priority(v->need ? v->need->priority : -1)]++;
            int why = (int)v->unmet_reason;
            p->unmet_reason[why >= 0 && why < 5 ? why : 0]++;
        }
        p->parked += v->acquisition_parked;
        p->preempting += v->preemption && v->preemption->victims_found > 0;
    }
    bigfleet__v1alpha1__inspect_needs_response__free_unpacked(m, NULL);
}

static void inspect_on_done(struct bf_net_stream *s, int code, const char *message, void *arg)
{
    (void)s;
    struct rp_run *r = arg;
    struct rp_inspect *in = &r->inspect;
    in->stream = NULL;
    if (r->stopping)
        return; /* cancelled at the end of the run */
    if (code != 0 || !in->got_header) {
        in->errors++;
        snprintf(in->last_error, sizeof in->last_error, "%s%s%s", bf_net_code_name(code),
                 message && *message ? ": " : "", message ? message : "");
        return;
    }
    in->last = in->cur;
    in->have_last = true;
    if (in->cur.unsatisfied >= in->worst.unsatisfied)
        in->worst = in->cur;
}

static void inspect_tick(struct bf_net_timer *t, void *arg)
{
    (void)t;
    struct rp_run *r = arg;
    struct rp_inspect *in = &r->inspect;
    if (in->stream || r->stopping || !r->started || !r->n_clients)
        return; /* the previous call is still streaming */
    static const struct bf_net_stream_cbs cbs = {inspect_on_message, NULL, inspect_on_done};
    in->stream = bf_net_client_call(r->clients[0], INSPECT_PATH, 30 * BF_NS_PER_SEC, &cbs, r);
    if (!in->stream) {
        in->errors++;
        snprintf(in->last_error, sizeof in->last_error, "%s", strerror(errno));
        return;
    }
    memset(&in->cur, 0, sizeof in->cur);
    in->cur.at_ns = bf_mono_ns() - r->t0;
    in->got_header = false;
    in->calls++;
    Bigfleet__V1alpha1__InspectNeedsRequest q = BIGFLEET__V1ALPHA1__INSPECT_NEEDS_REQUEST__INIT;
    if (bf_net_stream_send_pb(in->stream, &q.base) || bf_net_stream_close_send(in->stream))
        bf_net_stream_cancel(in->stream); /* inspect_on_done counts it */
}

int rp_contend_inspect_start(struct rp_run *r)
{
    int64_t every = r->cfg->inspect_interval_ns;
    if (every <= 0)
        return 0;
    r->inspect.timer = bf_net_timer_new(r->loop, inspect_tick, r);
    if (!r->inspect.timer)
        return -ENOMEM;
    bf_net_timer_start(r->inspect.timer, every, every);
    return 0;
}

void rp_contend_inspect_stop(struct rp_run *r)
{
    if (r->inspect.timer)
        bf_net_timer_stop(r->inspect.timer);
    if (r->inspect.stream)
        bf_net_stream_cancel(r->inspect.stream);
}
