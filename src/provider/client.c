/*
 * client.c — the CapacityProvider gRPC client (bigfleet/provider.h): request
 * building with protobuf-c, the fencing token, default deadlines, the status
 * mapping of shard.md §3.3, reply decoding into zero-copy views.
 *
 * Design notes
 *   - One bf_net client (one HTTP/2 connection, many concurrent streams) per
 *     process; each call is a unary stream with its own deadline. While the
 *     provider is unreachable the net layer fails calls fast (UNAVAILABLE)
 *     and reconnects with a short capped backoff, so a returning provider is
 *     used again within seconds.
 *   - The fencing sequence is taken per attempt, just before the request is
 *     packed (provider.h explains the starting value).
 *   - A call context is malloc'd per call and freed after its callback; the
 *     handle returned to the caller is that context (cancel = cancel the
 *     underlying stream; the callback still runs once, with CANCELLED).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <protobuf-c/protobuf-c.h>

#include "bigfleet/config.h"
#include "bigfleet/log.h"
#include "bigfleet/provider.h"
#include "bigfleet/shm.h"
#include "bigfleet/util.h"
#include "bigfleet/v1alpha1/provider.pb-c.h"

#define PATH_PREFIX "/bigfleet.v1alpha1.CapacityProvider/"

static const char *const rpc_names[BF_PROV_RPC_COUNT] = {"Create", "Configure", "Drain",
                                                         "Delete", "Get",       "List"};
static const char *const rpc_paths[BF_PROV_RPC_COUNT] = {
    PATH_PREFIX "Create", PATH_PREFIX "Configure", PATH_PREFIX "Drain",
    PATH_PREFIX "Delete", PATH_PREFIX "Get",       PATH_PREFIX "List"};
static const char *const status_names[BF_PROV_STATUS_COUNT] = {
    "ok",      "not_found", "unsupported", "fenced", "invalid_argument",
    "timeout", "cancelled", "unavailable", "error",  "bad_reply"};

const char *bf_prov_rpc_name(int rpc)
{
    return rpc >= 0 && rpc < BF_PROV_RPC_COUNT ? rpc_names[rpc] : "?";
}

const char *bf_prov_status_name(int st)
{
    return st >= 0 && st < BF_PROV_STATUS_COUNT ? status_names[st] : "?";
}

int bf_prov_status_from_code(int code)
{
    switch (code) {
    case BF_NET_OK:
        return BF_PROV_OK;
    case BF_NET_NOT_FOUND:
        return BF_PROV_NOT_FOUND;
    case BF_NET_UNIMPLEMENTED:
        return BF_PROV_UNSUPPORTED;
    case BF_NET_FAILED_PRECONDITION:
        return BF_PROV_FENCED;
    case BF_NET_INVALID_ARGUMENT:
        return BF_PROV_INVALID;
    case BF_NET_DEADLINE_EXCEEDED:
        return BF_PROV_TIMEOUT;
    case BF_NET_CANCELLED:
        return BF_PROV_CANCELLED;
    case BF_NET_UNAVAILABLE:
        return BF_PROV_UNAVAILABLE;
    default:
        return BF_PROV_ERROR;
    }
}

struct bf_prov_client {
    struct bf_net_loop *loop;
    struct bf_net_client *net;
    char *shard_id;
    int64_t epoch;
    int64_t seq; /* last issued */
    struct bf_prov_stats stats;
    struct bf_rpc_provider_latency *latency; /* shared memory, or NULL */
};

struct bf_prov_call {
    struct bf_prov_client *c;
    struct bf_net_stream *stream;
    int rpc;
    int64_t seq;
    int64_t t0;
    union {
        bf_prov_ack_fn ack;
        bf_prov_machine_fn machine;
        bf_prov_list_fn list;
    } cb;
    void *arg;
};

void bf_prov_opts_from_config(struct bf_prov_opts *o, const struct bf_config *cfg, int64_t epoch)
{
    memset(o, 0, sizeof *o);
    o->addr = cfg->provider_addr;
    o->shard_id = cfg->id;
    o->epoch = epoch;
    bool embedded = cfg->sim_listen[0] && strcmp(cfg->provider_addr, cfg->sim_listen) == 0;
    if (bf_config_tls(cfg) && !embedded)
        o->tls = (struct bf_net_tls_config){cfg->tls_cert, cfg->tls_key, cfg->tls_ca};
}

int bf_prov_client_new(struct bf_net_loop *loop, const struct bf_prov_opts *o,
                       struct bf_prov_client **out)
{
    if (!loop || !o || !o->addr || !o->addr[0])
        return -EINVAL;
    struct bf_prov_client *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    c->loop = loop;
    c->shard_id = strdup(o->shard_id ? o->shard_id : "");
    if (!c->shard_id) {
        free(c);
        return -ENOMEM;
    }
    c->epoch = o->epoch;
    c->latency = o->latency;
    int64_t start = o->seq_start > 0 ? o->seq_start : bf_mono_ns();
    c->seq = (start > 1 ? start : 1) - 1;
    struct bf_net_client_opts no = {
        .addr = o->addr,
        .tls = o->tls,
        .connect_timeout_ns = o->connect_timeout_ns ? o->connect_timeout_ns : 5 * BF_NS_PER_SEC,
        /* short first retry: at appliance start the embedded provider is a
         * sibling child that listens a few hundred ms later (readiness) */
        .backoff_initial_ns = 50 * BF_NS_PER_MS,
        .backoff_max_ns = o->backoff_max_ns ? o->backoff_max_ns : 5 * BF_NS_PER_SEC,
        .keepalive_ns = o->keepalive_ns == 0  ? 10 * BF_NS_PER_SEC
                        : o->keepalive_ns < 0 ? 0
                                              : o->keepalive_ns,
        .keepalive_timeout_ns = 5 * BF_NS_PER_SEC,
        .max_pending = 65536,
        /* a List page is megabytes: a stream window above a page lets the
         * provider send it without waiting for a WINDOW_UPDATE round trip
         * (the connection's window, 16 MiB, still bounds all calls) */
        .stream_window = 8u << 20,
    };
    int rc = bf_net_client_new(loop, &no, &c->net);
    if (rc) {
        free(c->shard_id);
        free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void bf_prov_client_free(struct bf_prov_client *c)
{
    if (!c)
        return;
    bf_net_client_free(c->net);
    free(c->shard_id);
    free(c);
}

void bf_prov_client_stats(const struct bf_prov_client *c, struct bf_prov_stats *out)
{
    *out = c->stats;
    out->last_seq = c->seq;
}

int bf_prov_client_state(const struct bf_prov_client *c)
{
    return (int)bf_net_client_state(c->net);
}

struct bf_net_loop *bf_prov_client_loop(const struct bf_prov_client *c)
{
    return c->loop;
}

void bf_prov_client_replies_after_recv(struct bf_prov_client *c)
{
    bf_net_client_set_unary_after_recv(c->net, true);
}

void bf_prov_client_flush(struct bf_prov_client *c)
{
    bf_net_client_flush(c->net);
}

int64_t bf_prov_next_seq(struct bf_prov_client *c)
{
    return ++c->seq;
}

static void on_reply(void *arg, int code, const char *message, const uint8_t *resp, size_t len)
{
    struct bf_prov_call *k = arg;
    struct bf_prov_client *c = k->c;
    struct bf_prov_result r = {
        .status = bf_prov_status_from_code(code),
        .code = code,
        .message = message ? message : "",
        .seq = k->seq,
        .elapsed_ns = bf_mono_ns() - k->t0,
    };
    union {
        struct bf_prov_ack ack;
        struct bf_prov_machine m;
        struct bf_prov_list l;
    } v;
    bool ok = false;
    if (r.status == BF_PROV_OK) {
        int d = k->rpc == BF_PROV_GET    ? bf_prov_machine_decode(resp, len, &v.m)
                : k->rpc == BF_PROV_LIST ? bf_prov_list_decode(resp, len, &v.l)
                                         : bf_prov_ack_decode(resp, len, &v.ack);
        if (d) {
            r.status = BF_PROV_BAD_REPLY;
            r.message = "reply does not decode";
        } else {
            ok = true;
        }
    }
    if (c->latency)
        bf_hist_observe(&c->latency->h[k->rpc][code >= 0 && code < BF_RPC_CODES ? code : 2], 0.001,
                        2, 16, r.elapsed_ns);
    c->stats.by_status[k->rpc][r.status]++;
    c->stats.inflight--;
    if (k->rpc == BF_PROV_GET)
        k->cb.machine(k->arg, &r, ok ? &v.m : NULL);
    else if (k->rpc == BF_PROV_LIST)
        k->cb.list(k->arg, &r, ok ? &v.l : NULL);
    else
        k->cb.ack(k->arg, &r, ok ? &v.ack : NULL);
    free(k);
}

/* Starts the call described by k (rpc, callback, arg set by the caller). */
static int start(struct bf_prov_client *c, struct bf_prov_call k0, const ProtobufCMessage *req,
                 int64_t seq, int64_t timeout_ns, struct bf_prov_call **out)
{
    struct bf_prov_call *k = malloc(sizeof *k);
    if (!k)
        return -ENOMEM;
    *k = k0;
    int rpc = k->rpc;
    k->c = c;
    k->seq = seq;
    k->t0 = bf_mono_ns();
    if (timeout_ns <= 0)
        timeout_ns =
            rpc == BF_PROV_LIST ? BF_PROV_DEFAULT_LIST_TIMEOUT_NS : BF_PROV_DEFAULT_TIMEOUT_NS;
    k->stream = bf_net_client_unary_pb(c->net, rpc_paths[rpc], req, timeout_ns, on_reply, k);
    if (!k->stream) {
        int e = errno ? errno : ENOMEM;
        free(k);
        return -e;
    }
    c->stats.calls[rpc]++;
    c->stats.inflight++;
    if (out)
        *out = k;
    return 0;
}

void bf_prov_call_cancel(struct bf_prov_call *call)
{
    if (call && call->stream)
        bf_net_stream_cancel(call->stream);
}

/* NUL-terminated copy of an id (the generated structs hold char *). */
static int id_copy(char *dst, const char *src, size_t len)
{
    if (len > BF_PROV_ID_MAX || (len && memchr(src, 0, len)))
        return -EINVAL;
    memcpy(dst, src, len);
    dst[len] = 0;
    return 0;
}

int bf_prov_create(struct bf_prov_client *c, const char *id, size_t id_len, int64_t timeout_ns,
                   bf_prov_ack_fn cb, void *arg, struct bf_prov_call **out)
{
    char idb[BF_PROV_ID_MAX + 1];
    if (!cb || id_copy(idb, id, id_len))
        return -EINVAL;
    Bigfleet__V1alpha1__CreateRequest q = BIGFLEET__V1ALPHA1__CREATE_REQUEST__INIT;
    q.machine_id = idb;
    q.shard_id = c->shard_id;
    q.shard_epoch = c->epoch;
    q.sequence_number = bf_prov_next_seq(c);
    return start(c, (struct bf_prov_call){.rpc = BF_PROV_CREATE, .cb.ack = cb, .arg = arg}, &q.base,
                 q.sequence_number, timeout_ns, out);
}

int bf_prov_configure(struct bf_prov_client *c, const char *id, size_t id_len, const char *cluster,
                      size_t cluster_len, const uint8_t *blob, size_t blob_len,
                      const struct bf_prov_md *md, size_t n_md, int64_t timeout_ns,
                      bf_prov_ack_fn cb, void *arg, struct bf_prov_call **out)
{
    char idb[BF_PROV_ID_MAX + 1], clb[BF_PROV_ID_MAX + 1];
    if (!cb || id_copy(idb, id, id_len) || id_copy(clb, cluster, cluster_len) || n_md > 64)
        return -EINVAL;
    Bigfleet__V1alpha1__ConfigureRequest__ShardMetadataEntry ents[64], *ptrs[64];
    for (size_t i = 0; i < n_md; i++) {
        bigfleet__v1alpha1__configure_request__shard_metadata_entry__init(&ents[i]);
        ents[i].key = (char *)md[i].key;
        ents[i].value.data = (uint8_t *)md[i].value;
        ents[i].value.len = md[i].len;
        ptrs[i] = &ents[i];
    }
    Bigfleet__V1alpha1__ConfigureRequest q = BIGFLEET__V1ALPHA1__CONFIGURE_REQUEST__INIT;
    q.machine_id = idb;
    q.cluster_id = clb;
    q.bootstrap_blob.data = (uint8_t *)blob;
    q.bootstrap_blob.len = blob_len;
    q.n_shard_metadata = n_md;
    q.shard_metadata = n_md ? ptrs : NULL;
    q.shard_id = c->shard_id;
    q.shard_epoch = c->epoch;
    q.sequence_number = bf_prov_next_seq(c);
    return start(c, (struct bf_prov_call){.rpc = BF_PROV_CONFIGURE, .cb.ack = cb, .arg = arg},
                 &q.base, q.sequence_number, timeout_ns, out);
}

int bf_prov_drain(struct bf_prov_client *c, const char *id, size_t id_len, int64_t grace_seconds,
                  int64_t timeout_ns, bf_prov_ack_fn cb, void *arg, struct bf_prov_call **out)
{
    char idb[BF_PROV_ID_MAX + 1];
    if (!cb || id_copy(idb, id, id_len))
        return -EINVAL;
    Bigfleet__V1alpha1__DrainRequest q = BIGFLEET__V1ALPHA1__DRAIN_REQUEST__INIT;
    q.machine_id = idb;
    q.grace_period_seconds = grace_seconds < 0 ? 0 : grace_seconds;
    q.shard_id = c->shard_id;
    q.shard_epoch = c->epoch;
    q.sequence_number = bf_prov_next_seq(c);
    return start(c, (struct bf_prov_call){.rpc = BF_PROV_DRAIN, .cb.ack = cb, .arg = arg}, &q.base,
                 q.sequence_number, timeout_ns, out);
}

int bf_prov_delete(struct bf_prov_client *c, const char *id, size_t id_len, int64_t timeout_ns,
                   bf_prov_ack_fn cb, void *arg, struct bf_prov_call **out)
{
    char idb[BF_PROV_ID_MAX + 1];
    if (!cb || id_copy(idb, id, id_len))
        return -EINVAL;
    Bigfleet__V1alpha1__DeleteRequest q = BIGFLEET__V1ALPHA1__DELETE_REQUEST__INIT;
    q.machine_id = idb;
    q.shard_id = c->shard_id;
    q.shard_epoch = c->epoch;
    q.sequence_number = bf_prov_next_seq(c);
    return start(c, (struct bf_prov_call){.rpc = BF_PROV_DELETE, .cb.ack = cb, .arg = arg}, &q.base,
                 q.sequence_number, timeout_ns, out);
}

int bf_prov_get(struct bf_prov_client *c, const char *id, size_t id_len, int64_t timeout_ns,
                bf_prov_machine_fn cb, void *arg, struct bf_prov_call **out)
{
    char idb[BF_PROV_ID_MAX + 1];
    if (!cb || id_copy(idb, id, id_len))
        return -EINVAL;
    Bigfleet__V1alpha1__MachineRef q = BIGFLEET__V1ALPHA1__MACHINE_REF__INIT;
    q.id = idb;
    return start(c, (struct bf_prov_call){.rpc = BF_PROV_GET, .cb.machine = cb, .arg = arg},
                 &q.base, 0, timeout_ns, out);
}

int bf_prov_list(struct bf_prov_client *c, const struct bf_prov_list_req *rq, int64_t timeout_ns,
                 bf_prov_list_fn cb, void *arg, struct bf_prov_call **out)
{
    if (!cb)
        return -EINVAL;
    Bigfleet__V1alpha1__MachineState states[8];
    Bigfleet__V1alpha1__ListFilter q = BIGFLEET__V1ALPHA1__LIST_FILTER__INIT;
    if (rq) {
        for (int s = 1; s <= 8; s++)
            if (rq->state_mask & (1u << s))
                states[q.n_states++] = (Bigfleet__V1alpha1__MachineState)s;
        q.states = q.n_states ? states : NULL;
        q.max_results = rq->max_results;
        q.since_revision.data = (uint8_t *)rq->since;
        q.since_revision.len = rq->since ? rq->since_len : 0;
    }
    return start(c, (struct bf_prov_call){.rpc = BF_PROV_LIST, .cb.list = cb, .arg = arg}, &q.base,
                 0, timeout_ns, out);
}
