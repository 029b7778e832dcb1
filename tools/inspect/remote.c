/*
 * remote.c — `needs --addr host:port`: reads a shard's Needs through
 * bigfleet.v1alpha1.ShardRead/InspectNeeds (server streaming; reference/
 * shard.md §5, wire.md §5) instead of the shared segments.
 *
 * One short-lived io_uring loop and gRPC client per call: the request
 * {cluster_id, limit} is sent and half-closed; frames are decoded as they
 * arrive: the first must be the header {cycle, computed_at, total_needs},
 * then NeedView rows, which are copied into the frame's arena (inbound
 * message memory is only valid during the callback). The call ends with the
 * server's status; anything but OK is an error naming the gRPC code and
 * message. TLS follows wire.md §7: --tls-cert/--tls-key/--tls-ca, all three
 * (mTLS, the certificate should carry bigfleet://readonly) or none (h2c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/log.h"
#include "bigfleet/net.h"
#include "bigfleet/strbuf.h"
#include "bigfleet/util.h"
#include "bigfleet/v1alpha1/shardread.pb-c.h"
#include "inspect.h"

#define INSPECT_NEEDS_PATH "/bigfleet.v1alpha1.ShardRead/InspectNeeds"

struct rcall {
    struct insp_needs *out;
    size_t cap;
    bool done;
    bool got_header;
    int code;
    char msg[512];
    char proto_err[256];
};

static int kv_cmp(const void *a, const void *b)
{
    return strcmp(((const struct bf_kv *)a)->key, ((const struct bf_kv *)b)->key);
}

/* Every generated map-entry type is {base, char *key, char *value}. */
#define COPY_MAP(arena, dst, n_src, src)                                                           \
    do {                                                                                           \
        (dst).n = (uint32_t)(n_src);                                                               \
        (dst).kv = (dst).n ? insp_arena_alloc((arena), (dst).n * sizeof *(dst).kv) : NULL;         \
        for (uint32_t i_ = 0; i_ < (dst).n; i_++) {                                                \
            const char *k_ = (src)[i_]->key ? (src)[i_]->key : "";                                 \
            const char *v_ = (src)[i_]->value ? (src)[i_]->value : "";                             \
            (dst).kv[i_].key = insp_arena_strndup((arena), k_, strlen(k_));                        \
            (dst).kv[i_].value = insp_arena_strndup((arena), v_, strlen(v_));                      \
        }                                                                                          \
        if ((dst).n > 1)                                                                           \
            qsort((dst).kv, (dst).n, sizeof *(dst).kv, kv_cmp);                                    \
    } while (0)

static const char *dup0(struct insp_arena *a, const char *s)
{
    return insp_arena_strndup(a, s ? s : "", s ? strlen(s) : 0);
}

static void convert(struct insp_arena *a, const Bigfleet__V1alpha1__NeedView *m, struct insp_nv *v)
{
    memset(v, 0, sizeof *v);
    v->has_verdict = true;
    v->in_table = true;
    const Bigfleet__V1alpha1__CapacityNeed *n = m->need;
    if (n) {
        v->n_reqs = (uint32_t)n->n_requirements;
        struct bf_requirement *r = v->n_reqs ? insp_arena_alloc(a, v->n_reqs * sizeof *r) : NULL;
        for (uint32_t i = 0; i < v->n_reqs; i++) {
            const Bigfleet__V1alpha1__NodeSelectorRequirement *q = n->requirements[i];
            r[i].key = dup0(a, q->key);
            r[i].op = (uint8_t)q->operator_;
            r[i].n_values = (uint32_t)q->n_values;
            const char **vals =
                r[i].n_values ? insp_arena_alloc(a, r[i].n_values * sizeof *vals) : NULL;
            for (uint32_t k = 0; k < r[i].n_values; k++)
                vals[k] = dup0(a, q->values[k]);
            r[i].values = vals;
        }
        v->reqs = r;
        v->n_spread = (uint32_t)n->n_spread;
        struct bf_spread *sp = v->n_spread ? insp_arena_alloc(a, v->n_spread * sizeof *sp) : NULL;
        for (uint32_t i = 0; i < v->n_spread; i++) {
            sp[i].topology_key = dup0(a, n->spread[i]->topology_key);
            sp[i].max_skew = n->spread[i]->max_skew;
            sp[i].when = (uint8_t)n->spread[i]->when_unsatisfiable;
        }
        v->spread = sp;
        COPY_MAP(a, v->aggregate, n->n_aggregate_resources, n->aggregate_resources);
        COPY_MAP(a, v->min_unit, n->n_min_unit, n->min_unit);
        v->priority = n->priority;
        v->ipb = (int)n->interruption_penalty_bucket;
        v->rpb = (int)n->reclamation_penalty_bucket;
        v->group = insp_arena_strndup(a, (const char *)n->group.data, n->group.len);
        v->group_len = n->group.len;
    } else {
        v->group = "";
    }
    const char *cid = m->cluster_id ? m->cluster_id : "";
    v->cluster_id = dup0(a, cid);
    v->cluster_len = strlen(cid);
    v->arrival_ns = m->arrival_unix_nanos;
    v->fingerprint = dup0(a, m->profile_fingerprint);
    v->satisfied = m->satisfied;
    if (m->residual_deficit)
        COPY_MAP(a, v->residual, m->residual_deficit->n_resources, m->residual_deficit->resources);
    v->claimed = m->claimed_machine_count;
    v->bootstrap = m->bootstrap_count;
    v->provision = m->provision_count;
    v->same_domain = dup0(a, m->same_domain);
    v->same_satisfiable = m->same_satisfiable;
    v->parked = m->acquisition_parked;
    v->parked_age = m->parked_age_cycles;
    v->age_unmet = m->age_cycles_unmet;
    v->unmet_reason = (int)m->unmet_reason;
    if (m->matching_supply) {
        v->has_matching = true;
        v->m_idle = m->matching_supply->idle;
        v->m_configured = m->matching_supply->configured;
        v->m_speculative = m->matching_supply->speculative;
        v->m_capped = m->matching_supply->capped;
    }
    if (m->preemption) {
        v->has_preemption = true;
        v->victims = m->preemption->victims_found;
        if (m->preemption->capacity_freed)
            COPY_MAP(a, v->freed, m->preemption->capacity_freed->n_resources,
                     m->preemption->capacity_freed->resources);
    }
    v->n_cand = (uint32_t)m->n_same_candidates;
    v->cand = v->n_cand ? insp_arena_alloc(a, v->n_cand * sizeof *v->cand) : NULL;
    for (uint32_t i = 0; i < v->n_cand; i++) {
        v->cand[i].domain = dup0(a, m->same_candidates[i]->domain);
        v->cand[i].per_mille = m->same_candidates[i]->coverage_per_mille;
        v->cand[i].satisfiable = m->same_candidates[i]->satisfiable;
    }
}

static void on_message(struct bf_net_stream *s, const uint8_t *msg, size_t len, void *arg)
{
    struct rcall *rc = arg;
    Bigfleet__V1alpha1__InspectNeedsResponse *m =
        bigfleet__v1alpha1__inspect_needs_response__unpack(NULL, len, msg);
    if (!m) {
        snprintf(rc->proto_err, sizeof rc->proto_err,
                 "undecodable InspectNeedsResponse (%zu bytes)", len);
        bf_net_stream_cancel(s);
        return;
    }
    struct insp_needs *o = rc->out;
    if (m->frame_case == BIGFLEET__V1ALPHA1__INSPECT_NEEDS_RESPONSE__FRAME_HEADER && m->header) {
        if (rc->got_header) {
            snprintf(rc->proto_err, sizeof rc->proto_err, "a second header frame");
            bf_net_stream_cancel(s);
        } else {
            rc->got_header = true;
            o->cycle = m->header->cycle;
            o->computed_at_ns = m->header->computed_at_unix_nanos;
            o->total = m->header->total_needs;
        }
    } else if (m->frame_case == BIGFLEET__V1ALPHA1__INSPECT_NEEDS_RESPONSE__FRAME_NEED && m->need) {
        if (!rc->got_header) {
            snprintf(rc->proto_err, sizeof rc->proto_err,
                     "the first frame was a NeedView, not the header");
            bf_net_stream_cancel(s);
        } else {
            if (o->n == rc->cap && bf_grow((void **)&o->v, &rc->cap, o->n + 1, sizeof *o->v)) {
                snprintf(rc->proto_err, sizeof rc->proto_err, "out of memory");
                bf_net_stream_cancel(s);
                bigfleet__v1alpha1__inspect_needs_response__free_unpacked(m, NULL);
                return;
            }
            convert(&o->arena, m->need, &o->v[o->n++]);
        }
    }
    bigfleet__v1alpha1__inspect_needs_response__free_unpacked(m, NULL);
}

static void on_done(struct bf_net_stream *s, int code, const char *message, void *arg)
{
    (void)s;
    struct rcall *rc = arg;
    rc->done = true;
    rc->code = code;
    snprintf(rc->msg, sizeof rc->msg, "%s", message ? message : "");
}

int insp_needs_remote(const struct insp_opts *o, struct insp_needs *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    out->remote = true;
    struct bf_net_loop *loop = NULL;
    int rc = bf_net_loop_new(NULL, &loop);
    if (rc) {
        snprintf(err, errlen, "cannot create the network loop (io_uring): %s", strerror(-rc));
        return -1;
    }
    struct bf_net_client_opts co = {.addr = o->addr,
                                    .tls = {o->tls_cert, o->tls_key, o->tls_ca},
                                    .server_name = o->tls_server_name,
                                    .connect_timeout_ns = o->timeout_ns};
    struct bf_net_client *cl = NULL;
    rc = bf_net_client_new(loop, &co, &cl);
    if (rc) {
        snprintf(err, errlen, "cannot create a gRPC client for %s: %s", o->addr, strerror(-rc));
        bf_net_loop_free(loop);
        return -1;
    }
    struct rcall call = {.out = out};
    static const struct bf_net_stream_cbs cbs = {on_message, NULL, on_done};
    struct bf_net_stream *st =
        bf_net_client_call(cl, INSPECT_NEEDS_PATH, o->timeout_ns, &cbs, &call);
    int ret = 0;
    if (!st) {
        snprintf(err, errlen, "cannot start InspectNeeds: %s", strerror(errno));
        ret = -1;
        goto out;
    }
    Bigfleet__V1alpha1__InspectNeedsRequest req = BIGFLEET__V1ALPHA1__INSPECT_NEEDS_REQUEST__INIT;
    req.cluster_id = (char *)(o->cluster ? o->cluster : "");
    req.limit = o->limit > 0 ? (int32_t)(o->limit > INT32_MAX ? INT32_MAX : o->limit) : 0;
    bf_net_stream_send_pb(st, &req.base);
    bf_net_stream_close_send(st);
    int64_t deadline = bf_mono_ns() + o->timeout_ns + 5 * BF_NS_PER_SEC;
    while (!call.done) {
        if (bf_mono_ns() > deadline) {
            bf_net_stream_cancel(st);
            deadline = INT64_MAX;
        }
        if (bf_net_loop_run_once(loop, 50 * BF_NS_PER_MS) < 0)
            break;
    }
    if (call.proto_err[0]) {
        snprintf(err, errlen, "InspectNeeds on %s: protocol error: %s", o->addr, call.proto_err);
        ret = -1;
    } else if (!call.done) {
        snprintf(err, errlen, "InspectNeeds on %s: the network loop failed", o->addr);
        ret = -1;
    } else if (call.code != BF_NET_OK) {
        snprintf(err, errlen, "InspectNeeds on %s failed: %s%s%s", o->addr,
                 bf_net_code_name(call.code), call.msg[0] ? ": " : "", call.msg);
        ret = -1;
    } else if (!call.got_header) {
        snprintf(err, errlen, "InspectNeeds on %s: the stream ended without a header frame",
                 o->addr);
        ret = -1;
    }
out:
    bf_net_client_free(cl);
    /* let the client's cancellations settle before freeing the loop */
    for (int i = 0; i < 3; i++)
        bf_net_loop_run_once(loop, 0);
    bf_net_loop_free(loop);
    return ret;
}
