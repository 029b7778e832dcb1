/*
 * etcd.c — the etcd v3 gRPC client of bigfleet-coordinator (etcd.h).
 *
 * Design notes
 *   - One bf_net_client (one HTTP/2 connection) to the current endpoint;
 *     unary calls for KV and LeaseGrant/Revoke; LeaseKeepAlive is a bidi
 *     stream that we open per round with one request and a half-close
 *     (etcd answers each request and ends the stream OK at EOF), so no
 *     long-lived stream state has to survive reconnects.
 *   - Responses are decoded with protobuf-c (etcd's field numbers); the
 *     decoders of what comes back are the generated ones, and what we do
 *     with the decoded values is bounded by the callers (store.c checks
 *     every key and value: fuzz_coordinator).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/log.h"
#include "bigfleet/net.h"
#include "bigfleet/util.h"
#include "etcd.h"

struct etcd {
    struct bf_net_loop *loop;
    struct bf_net_client *cl;
    char eps[ETCD_MAX_ENDPOINTS][256];
    unsigned n_eps, cur;
    int64_t timeout_ns;
    bool rotate;
};

struct pending {
    struct etcd *e;
    int kind; /* 1 range, 2 txn, 3 grant, 4 keepalive, 5 revoke */
    void *cb;
    void *arg;
    bool got;
    int64_t id, ttl;
};

static int connect_cur(struct etcd *e)
{
    if (e->cl)
        bf_net_client_free(e->cl);
    e->cl = NULL;
    struct bf_net_client_opts o = {.addr = e->eps[e->cur],
                                   .connect_timeout_ns = e->timeout_ns,
                                   .backoff_initial_ns = 200 * BF_NS_PER_MS,
                                   .backoff_max_ns = 2 * BF_NS_PER_SEC};
    return bf_net_client_new(e->loop, &o, &e->cl);
}

int co_etcd_new(struct bf_net_loop *loop, const char *endpoints, int64_t timeout_ns,
                struct etcd **out)
{
    struct etcd *e = calloc(1, sizeof *e);
    if (!e)
        return -ENOMEM;
    e->loop = loop;
    e->timeout_ns = timeout_ns > 0 ? timeout_ns : 5 * BF_NS_PER_SEC;
    const char *p = endpoints;
    while (p && *p) {
        while (*p == ',' || *p == ' ')
            p++;
        const char *q = p;
        while (*q && *q != ',')
            q++;
        size_t n = (size_t)(q - p);
        if (n) {
            /* accept http://host:port as etcdctl does */
            if (n > 7 && !strncmp(p, "http://", 7)) {
                p += 7;
                n -= 7;
            }
            if (e->n_eps == ETCD_MAX_ENDPOINTS || n >= sizeof e->eps[0]) {
                free(e);
                return -EINVAL;
            }
            memcpy(e->eps[e->n_eps], p, n);
            e->eps[e->n_eps][n] = 0;
            if (bf_net_addr_check(e->eps[e->n_eps])) {
                free(e);
                return -EINVAL;
            }
            e->n_eps++;
        }
        p = q;
    }
    if (!e->n_eps) {
        free(e);
        return -EINVAL;
    }
    int rc = connect_cur(e);
    if (rc) {
        free(e);
        return rc;
    }
    *out = e;
    return 0;
}

void co_etcd_free(struct etcd *e)
{
    if (!e)
        return;
    if (e->cl)
        bf_net_client_free(e->cl);
    free(e);
}

const char *co_etcd_endpoint(const struct etcd *e)
{
    return e->eps[e->cur];
}

static void maybe_rotate(struct etcd *e, int code)
{
    if (e->n_eps > 1 && (code == BF_NET_UNAVAILABLE || code == BF_NET_DEADLINE_EXCEEDED))
        e->rotate = true;
}

/* Rotation happens before the next call (never inside the client's callback). */
static struct bf_net_client *client(struct etcd *e)
{
    if (e->rotate) {
        e->rotate = false;
        e->cur = (e->cur + 1) % e->n_eps;
        BF_WARN("etcd: trying the next endpoint", "endpoint=%s", e->eps[e->cur]);
        if (connect_cur(e))
            return NULL;
    }
    return e->cl;
}

static void on_unary(void *arg, int code, const char *message, const uint8_t *resp, size_t len)
{
    struct pending *p = arg;
    maybe_rotate(p->e, code);
    if (code != BF_NET_OK) {
        if (p->kind == 1)
            ((etcd_range_fn)p->cb)(p->arg, code, message, NULL);
        else if (p->kind == 2)
            ((etcd_txn_fn)p->cb)(p->arg, code, message, NULL);
        else if (p->cb)
            ((etcd_lease_fn)p->cb)(p->arg, code, message, 0, 0);
        free(p);
        return;
    }
    if (p->kind == 1) {
        Etcdserverpb__RangeResponse *r = etcdserverpb__range_response__unpack(NULL, len, resp);
        ((etcd_range_fn)p->cb)(p->arg, r ? BF_NET_OK : BF_NET_INTERNAL,
                               r ? "" : "undecodable etcd response", r);
        if (r)
            etcdserverpb__range_response__free_unpacked(r, NULL);
    } else if (p->kind == 2) {
        Etcdserverpb__TxnResponse *r = etcdserverpb__txn_response__unpack(NULL, len, resp);
        ((etcd_txn_fn)p->cb)(p->arg, r ? BF_NET_OK : BF_NET_INTERNAL,
                             r ? "" : "undecodable etcd response", r);
        if (r)
            etcdserverpb__txn_response__free_unpacked(r, NULL);
    } else if (p->kind == 3) {
        Etcdserverpb__LeaseGrantResponse *r =
            etcdserverpb__lease_grant_response__unpack(NULL, len, resp);
        if (!r)
            ((etcd_lease_fn)p->cb)(p->arg, BF_NET_INTERNAL, "undecodable etcd response", 0, 0);
        else if (r->error && r->error[0])
            ((etcd_lease_fn)p->cb)(p->arg, BF_NET_UNAVAILABLE, r->error, 0, 0);
        else
            ((etcd_lease_fn)p->cb)(p->arg, BF_NET_OK, "", r->id, r->ttl);
        if (r)
            etcdserverpb__lease_grant_response__free_unpacked(r, NULL);
    } else if (p->cb) {
        ((etcd_lease_fn)p->cb)(p->arg, BF_NET_OK, "", 0, 0);
    }
    free(p);
}

static int start_unary(struct etcd *e, int kind, const char *path, const ProtobufCMessage *req,
                       void *cb, void *arg)
{
    struct bf_net_client *cl = client(e);
    if (!cl)
        return -ENOMEM;
    struct pending *p = calloc(1, sizeof *p);
    if (!p)
        return -ENOMEM;
    *p = (struct pending){.e = e, .kind = kind, .cb = cb, .arg = arg};
    if (!bf_net_client_unary_pb(cl, path, req, e->timeout_ns, on_unary, p)) {
        int rc = -errno;
        free(p);
        return rc ? rc : -EIO;
    }
    return 0;
}

size_t co_etcd_prefix_end(const uint8_t *prefix, size_t len, uint8_t *out)
{
    memcpy(out, prefix, len);
    for (size_t i = len; i > 0; i--) {
        if (out[i - 1] < 0xff) {
            out[i - 1]++;
            return i;
        }
    }
    out[0] = 0; /* all 0xff: to the end of the keyspace */
    return 1;
}

int co_etcd_range(struct etcd *e, const uint8_t *key, size_t klen, const uint8_t *end, size_t elen,
                  etcd_range_fn cb, void *arg)
{
    Etcdserverpb__RangeRequest q = ETCDSERVERPB__RANGE_REQUEST__INIT;
    q.key.data = (uint8_t *)key;
    q.key.len = klen;
    if (end) {
        q.range_end.data = (uint8_t *)end;
        q.range_end.len = elen;
    }
    return start_unary(e, 1, "/etcdserverpb.KV/Range", &q.base, (void *)cb, arg);
}

int co_etcd_txn(struct etcd *e, const Etcdserverpb__TxnRequest *req, etcd_txn_fn cb, void *arg)
{
    return start_unary(e, 2, "/etcdserverpb.KV/Txn", &req->base, (void *)cb, arg);
}

int co_etcd_lease_grant(struct etcd *e, int64_t ttl_s, etcd_lease_fn cb, void *arg)
{
    Etcdserverpb__LeaseGrantRequest q = ETCDSERVERPB__LEASE_GRANT_REQUEST__INIT;
    q.ttl = ttl_s;
    return start_unary(e, 3, "/etcdserverpb.Lease/LeaseGrant", &q.base, (void *)cb, arg);
}

int co_etcd_lease_revoke(struct etcd *e, int64_t id, etcd_lease_fn cb, void *arg)
{
    Etcdserverpb__LeaseRevokeRequest q = ETCDSERVERPB__LEASE_REVOKE_REQUEST__INIT;
    q.id = id;
    return start_unary(e, 5, "/etcdserverpb.Lease/LeaseRevoke", &q.base, (void *)cb, arg);
}

/* ------------------------------------------------------------ keepalive */

static void ka_message(struct bf_net_stream *s, const uint8_t *msg, size_t len, void *arg)
{
    (void)s;
    struct pending *p = arg;
    Etcdserverpb__LeaseKeepAliveResponse *r =
        etcdserverpb__lease_keep_alive_response__unpack(NULL, len, msg);
    if (r && !p->got) {
        p->got = true;
        p->id = r->id;
        p->ttl = r->ttl;
    }
    if (r)
        etcdserverpb__lease_keep_alive_response__free_unpacked(r, NULL);
}

static void ka_done(struct bf_net_stream *s, int code, const char *message, void *arg)
{
    (void)s;
    struct pending *p = arg;
    maybe_rotate(p->e, code);
    if (p->got)
        ((etcd_lease_fn)p->cb)(p->arg, BF_NET_OK, "", p->id, p->ttl);
    else
        ((etcd_lease_fn)p->cb)(p->arg, code == BF_NET_OK ? BF_NET_INTERNAL : code,
                               code == BF_NET_OK ? "no keepalive response" : message, 0, 0);
    free(p);
}

int co_etcd_lease_keepalive(struct etcd *e, int64_t id, etcd_lease_fn cb, void *arg)
{
    struct bf_net_client *cl = client(e);
    if (!cl)
        return -ENOMEM;
    struct pending *p = calloc(1, sizeof *p);
    if (!p)
        return -ENOMEM;
    *p = (struct pending){.e = e, .kind = 4, .cb = (void *)cb, .arg = arg};
    struct bf_net_stream_cbs cbs = {.on_message = ka_message, .on_done = ka_done};
    struct bf_net_stream *s =
        bf_net_client_call(cl, "/etcdserverpb.Lease/LeaseKeepAlive", e->timeout_ns, &cbs, p);
    if (!s) {
        int rc = -errno;
        free(p);
        return rc ? rc : -EIO;
    }
    Etcdserverpb__LeaseKeepAliveRequest q = ETCDSERVERPB__LEASE_KEEP_ALIVE_REQUEST__INIT;
    q.id = id;
    if (bf_net_stream_send_pb(s, &q.base) || bf_net_stream_close_send(s))
        bf_net_stream_cancel(s); /* ka_done reports it */
    return 0;
}
