/*
 * etcd.h — a small etcd v3 client for bigfleet-coordinator over the
 * project's own gRPC client (src/net: HTTP/2 on io_uring) and etcd's
 * gRPC API (proto/etcd: the messages we use, with etcd's field numbers).
 * docs/coordinator.md "Talking to etcd" says why gRPC and not the JSON
 * gateway.
 *
 * Calls are asynchronous on the caller's loop; every callback runs once,
 * on the loop, never inside the call that started it. A callback's
 * response pointers are valid only during the callback. Errors: code is
 * the gRPC status (BF_NET_*), message the grpc-message; an undecodable
 * response is BF_NET_INTERNAL "undecodable etcd response".
 *
 * Endpoints: --etcd-endpoints lists up to ETCD_MAX_ENDPOINTS "host:port";
 * a call that fails UNAVAILABLE / DEADLINE_EXCEEDED moves the client to
 * the next endpoint for the following calls (the failed call is not
 * retried: the caller's next tick retries).
 */
#ifndef BF_COORD_ETCD_H
#define BF_COORD_ETCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "etcd/etcdserverpb/rpc.pb-c.h"

#define ETCD_MAX_ENDPOINTS 8

struct bf_net_loop;
struct etcd;

typedef void (*etcd_range_fn)(void *arg, int code, const char *message,
                              const Etcdserverpb__RangeResponse *resp);
typedef void (*etcd_txn_fn)(void *arg, int code, const char *message,
                            const Etcdserverpb__TxnResponse *resp);
/* Lease grant / keepalive: id and ttl (seconds; <= 0 = the lease is gone). */
typedef void (*etcd_lease_fn)(void *arg, int code, const char *message, int64_t id, int64_t ttl);

/* endpoints: comma-separated. 0, -EINVAL (syntax), -ENOMEM. */
int co_etcd_new(struct bf_net_loop *loop, const char *endpoints, int64_t timeout_ns,
                struct etcd **out);
void co_etcd_free(struct etcd *e);
const char *co_etcd_endpoint(const struct etcd *e);

/* Range [key, range_end) (range_end NULL: the key only; "" prefix form:
 * use co_etcd_prefix_end). */
int co_etcd_range(struct etcd *e, const uint8_t *key, size_t klen, const uint8_t *end, size_t elen,
                  etcd_range_fn cb, void *arg);
int co_etcd_txn(struct etcd *e, const Etcdserverpb__TxnRequest *req, etcd_txn_fn cb, void *arg);
int co_etcd_lease_grant(struct etcd *e, int64_t ttl_s, etcd_lease_fn cb, void *arg);
/* One keepalive round (a LeaseKeepAlive stream with one request). */
int co_etcd_lease_keepalive(struct etcd *e, int64_t id, etcd_lease_fn cb, void *arg);
/* Fire and forget (used at an orderly exit; cb may be NULL). */
int co_etcd_lease_revoke(struct etcd *e, int64_t id, etcd_lease_fn cb, void *arg);

/* Fills *cmp (initialised here) with "create_revision(key) == rev": rev 0
 * means the key does not exist; key (NUL-terminated) must outlive *cmp. */
static inline void co_etcd_cmp_created_at(Etcdserverpb__Compare *cmp, const char *key, int64_t rev)
{
    etcdserverpb__compare__init(cmp);
    cmp->result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__EQUAL;
    cmp->target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__CREATE;
    cmp->key.data = (uint8_t *)key;
    cmp->key.len = strlen(key);
    cmp->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_CREATE_REVISION;
    cmp->create_revision = rev;
}
/* The range end of "every key with this prefix" (etcd's prefix rule):
 * writes into out (cap >= len), returns its length (0 = to the end). */
size_t co_etcd_prefix_end(const uint8_t *prefix, size_t len, uint8_t *out);

#endif
