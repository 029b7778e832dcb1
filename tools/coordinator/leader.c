/*
 * leader.c — leader election on etcd (docs/coordinator.md "Leadership and
 * terms"). We do not write consensus: etcd's Raft does it.
 *
 * Design notes
 *   - Every replica holds a lease (--lease-ttl) kept alive every tick (a
 *     third of the TTL). Each tick it campaigns with one Txn: if
 *     create_revision(<p>leader) == 0 (no leader) put <p>leader = its id
 *     with its lease; in both branches read the key back. The replica whose
 *     lease the key carries is the leader.
 *   - Term = the key's create revision. etcd revisions only grow, so the
 *     next leader's key (created after the old one was deleted) has a
 *     strictly higher revision: a new leader's term is strictly higher, and
 *     the shards' term fence rejects the old leader's instructions.
 *   - A leader steps down (soft state dropped, every RPC answers "not
 *     leader") when the key is no longer its own, when a fenced write
 *     fails its compare, or when no keepalive succeeded within the lease
 *     TTL minus one tick, measured from when the last successful
 *     keepalive was sent: after that etcd may have expired the lease and
 *     another replica may lead. The same test runs at every RPC
 *     (co_is_leader), so a leader resumed after a stall longer than that
 *     (a deposed "zombie") refuses at once, before its overdue tick. The
 *     lease is timed on CLOCK_BOOTTIME, which counts a host suspend too.
 *   - A new leader loads the state (store.c) before it answers anything.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/log.h"
#include "bigfleet/net.h"
#include "bigfleet/util.h"
#include "coordinator.h"

/* ------------------------------------------------------------ lease */

struct lease_op {
    struct coord *c;
    int64_t sent_ns;
};

static void on_grant(void *arg, int code, const char *message, int64_t id, int64_t ttl)
{
    struct lease_op *o = arg;
    struct coord *c = o->c;
    c->lease_busy = false;
    if (code != BF_NET_OK || id == 0 || ttl <= 0) {
        c->etcd_errors++;
        BF_WARN("etcd: lease grant failed", "code=%s message=\"%s\" endpoint=%s",
                bf_net_code_name(code), message ? message : "", co_etcd_endpoint(c->etcd));
    } else {
        c->lease = id;
        c->lease_ok_ns = o->sent_ns;
        BF_INFO("etcd lease granted", "lease=%" PRIx64 " ttl_s=%" PRId64, (uint64_t)id, ttl);
    }
    free(o);
}

static void on_keepalive(void *arg, int code, const char *message, int64_t id, int64_t ttl)
{
    struct lease_op *o = arg;
    struct coord *c = o->c;
    c->lease_busy = false;
    (void)id;
    if (code != BF_NET_OK) {
        c->etcd_errors++;
        BF_WARN("etcd: lease keepalive failed", "code=%s message=\"%s\" endpoint=%s",
                bf_net_code_name(code), message ? message : "", co_etcd_endpoint(c->etcd));
    } else if (ttl <= 0) {
        BF_WARN("etcd lease expired", "lease=%" PRIx64, (uint64_t)c->lease);
        c->lease = 0;
        co_step_down(c, "our etcd lease expired");
    } else {
        c->lease_ok_ns = o->sent_ns;
    }
    free(o);
}

/* ------------------------------------------------------------ campaign */

static void on_loaded(struct coord *c, void *arg, int rc)
{
    int64_t term = (int64_t)(intptr_t)arg;
    if (c->role != CO_LOADING || c->term != term)
        return;
    if (rc) {
        co_step_down(c, "could not load the state from etcd");
        return;
    }
    c->role = CO_LEADER;
    BF_INFO("coordinator is the leader", "id=%s term=%" PRId64, c->cfg.id, c->term);
    if (c->on_elected)
        c->on_elected(c);
}

struct camp {
    struct coord *c;
    int64_t lease;
};

static void on_campaign(void *arg, int code, const char *message,
                        const Etcdserverpb__TxnResponse *resp)
{
    struct camp *k = arg;
    struct coord *c = k->c;
    int64_t lease = k->lease;
    free(k);
    c->campaign_busy = false;
    if (code != BF_NET_OK || !resp || !resp->n_responses) {
        c->etcd_errors++;
        BF_WARN("etcd: campaign failed", "code=%s message=\"%s\"", bf_net_code_name(code),
                message ? message : "");
        return;
    }
    const Etcdserverpb__ResponseOp *last = resp->responses[resp->n_responses - 1];
    const Mvccpb__KeyValue *kv = NULL;
    if (last->response_case == ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_RANGE &&
        last->response_range && last->response_range->n_kvs)
        kv = last->response_range->kvs[0];
    if (!kv) { /* the key vanished between put and read: next tick */
        if (c->role != CO_FOLLOWER)
            co_step_down(c, "the leader key is gone");
        c->leader_seen[0] = 0;
        return;
    }
    size_t n =
        kv->value.len < sizeof c->leader_seen - 1 ? kv->value.len : sizeof c->leader_seen - 1;
    memcpy(c->leader_seen, kv->value.data, n);
    c->leader_seen[n] = 0;
    bool mine = lease && kv->lease == lease && lease == c->lease;
    if (!mine) {
        if (c->role != CO_FOLLOWER)
            co_step_down(c, "another replica holds the leader key");
        return;
    }
    if (c->role != CO_FOLLOWER) {
        if (kv->create_revision != c->term)
            co_step_down(c, "the leader key was re-created");
        return;
    }
    /* elected */
    c->role = CO_LOADING;
    c->term = kv->create_revision;
    c->elections++;
    BF_INFO("coordinator elected; loading state", "id=%s term=%" PRId64, c->cfg.id, c->term);
    if (co_store_load(c, on_loaded, (void *)(intptr_t)c->term))
        co_step_down(c, "cannot start loading the state");
}

static void campaign(struct coord *c)
{
    char *lk = co_key_leader(c->cfg.prefix);
    struct camp *k = calloc(1, sizeof *k);
    if (!lk || !k) {
        free(lk);
        free(k);
        return;
    }
    *k = (struct camp){c, c->lease};
    Etcdserverpb__Compare cmp = ETCDSERVERPB__COMPARE__INIT;
    cmp.result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__EQUAL;
    cmp.target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__CREATE;
    cmp.key.data = (uint8_t *)lk;
    cmp.key.len = strlen(lk);
    cmp.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_CREATE_REVISION;
    cmp.create_revision = 0;
    Etcdserverpb__Compare *cmpp = &cmp;
    Etcdserverpb__PutRequest put = ETCDSERVERPB__PUT_REQUEST__INIT;
    put.key = cmp.key;
    put.value.data = (uint8_t *)c->cfg.id;
    put.value.len = strlen(c->cfg.id);
    put.lease = c->lease;
    Etcdserverpb__RangeRequest rg = ETCDSERVERPB__RANGE_REQUEST__INIT;
    rg.key = cmp.key;
    Etcdserverpb__RequestOp ops[3];
    etcdserverpb__request_op__init(&ops[0]);
    ops[0].request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
    ops[0].request_put = &put;
    etcdserverpb__request_op__init(&ops[1]);
    ops[1].request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE;
    ops[1].request_range = &rg;
    ops[2] = ops[1];
    Etcdserverpb__RequestOp *succ[2] = {&ops[0], &ops[1]}, *fail[1] = {&ops[2]};
    Etcdserverpb__TxnRequest t = ETCDSERVERPB__TXN_REQUEST__INIT;
    t.n_compare = 1;
    t.compare = &cmpp;
    t.n_success = 2;
    t.success = succ;
    t.n_failure = 1;
    t.failure = fail;
    c->campaign_busy = true;
    if (co_etcd_txn(c->etcd, &t, on_campaign, k)) {
        c->campaign_busy = false;
        free(k);
    }
    free(lk);
}

void co_leader_tick(struct coord *c)
{
    int64_t now = co_lease_clock_ns();
    /* a leader whose lease may have expired is no longer the leader */
    if (c->role != CO_FOLLOWER && co_lease_maybe_expired(c, now))
        co_step_down(c, "the etcd lease was not renewed in time");
    if (c->lease_busy)
        return;
    struct lease_op *o = calloc(1, sizeof *o);
    if (!o)
        return;
    *o = (struct lease_op){c, now};
    c->lease_busy = true;
    int rc = c->lease ? co_etcd_lease_keepalive(c->etcd, c->lease, on_keepalive, o)
                      : co_etcd_lease_grant(c->etcd, c->cfg.lease_ttl_s, on_grant, o);
    if (rc) {
        c->lease_busy = false;
        free(o);
    }
    if (c->lease && !c->campaign_busy)
        campaign(c);
}

void co_leader_stop(struct coord *c)
{
    if (c->lease) /* the leader key goes with it: a follower takes over at once */
        co_etcd_lease_revoke(c->etcd, c->lease, NULL, NULL);
    co_step_down(c, "shutting down");
}
