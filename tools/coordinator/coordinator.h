/*
 * coordinator.h — bigfleet-coordinator's private state and the contracts
 * between its files (docs/coordinator.md). A separate program: nothing of
 * it is linked into bigfleet-shardd (seed 000 §1, static stability).
 *
 *   main.c    flags, the loop, timers, signals, the `ctl` client
 *   leader.c  election on etcd (a lease + a create-if-absent key), the term
 *   store.c   durable state: an in-memory copy of the etcd keys, fenced writes
 *   server.c  the bigfleet.v1alpha1.Coordinator service, soft state,
 *             pending instruction queues, the rebalance pass's glue
 *   http.c    /metrics, /healthz, /readyz
 *   etcd.c    the etcd v3 gRPC client;  rebalance.c  the loop (pure)
 *
 * Threads: one loop thread; no locks. Every bound is a #define below.
 */
#ifndef BF_COORD_COORDINATOR_H
#define BF_COORD_COORDINATOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bigfleet/v1alpha1/coordinator.pb-c.h"
#include "etcd.h"
#include "rebalance.h"

#define CO_MAX_SHARDS    1024
#define CO_MAX_DOMAINS   4096
#define CO_MAX_CLUSTERS  65536
#define CO_MAX_PENDING   4096       /* instructions waiting for one shard's ack */
#define CO_MAX_SHORTFALL 100        /* per report (wire.md: at most 100) */
#define CO_MAX_FREE      4096       /* free_counts rows per report */
#define CO_ID_MAX        256        /* shard, cluster ids; domain key/value parts */
#define CO_REPORT_MAX    (4u << 20) /* bytes of one ShardReport */
#define CO_SEQ_BLOCK     100000     /* sequence numbers reserved per etcd write */

struct bf_net_loop;
struct bf_net_server;
struct bf_net_http_server;
struct bf_net_timer;

struct co_config {
    char id[CO_ID_MAX];       /* --id: this replica's name (the leader key's value) */
    char listen[256];         /* --listen */
    char metrics[256];        /* --metrics-addr ("0" = none) */
    char advertise[256];      /* --advertise-addr (else --listen) */
    char etcd[1024];          /* --etcd-endpoints */
    char prefix[128];         /* --etcd-prefix */
    char catalog[1024];       /* --catalog */
    char quota_provider[128]; /* --quota-provider */
    char quota_region[128];   /* --quota-region */
    int64_t lease_ttl_s;      /* --lease-ttl */
    int64_t rebalance_ns;     /* --rebalance-interval */
    int64_t etcd_timeout_ns;  /* --etcd-timeout */
    struct rb_config rb;      /* --min-age, --preempt-min-age, --cooldown-passes, ... */
    bool rebalance;           /* --rebalance */
};

/* ----- store.c: durable state (etcd) */
struct co_shard {
    char *id, *address;
    int64_t registered_ns; /* durable */
    int64_t heartbeat_ns;  /* leader-local: last report (wall) */
};
struct co_domain {
    char *key, *value, *shard;
};
struct co_cluster {
    char *cluster, *shard;
};

struct co_store {
    struct co_shard *shards;
    uint32_t n_shards;
    struct co_domain *domains;
    uint32_t n_domains;
    struct co_cluster *clusters;
    uint32_t n_clusters;
    Bigfleet__V1alpha1__QuotaAllocation **quotas;
    uint32_t n_quotas;
    Bigfleet__V1alpha1__ProviderEntry **providers;
    uint32_t n_providers;
    int64_t seq_durable; /* the value of <prefix>seq */
    uint64_t rejected;   /* keys or values that did not decode (counted, skipped) */
};

/* One write of a fenced commit. value NULL = delete. */
struct co_op {
    char *key;
    uint8_t *value;
    size_t vlen;
    bool del;
};

/* Parses one etcd key/value under the prefix into the store (the decoder
 * of untrusted bytes: fuzz_coordinator). 0, or -EINVAL (rejected, counted). */
int co_store_apply_kv(struct co_store *s, const char *prefix, const uint8_t *key, size_t klen,
                      const uint8_t *val, size_t vlen);
int co_store_delete_key(struct co_store *s, const char *prefix, const uint8_t *key, size_t klen);
void co_store_clear(struct co_store *s);
struct co_shard *co_store_shard(struct co_store *s, const char *id);
struct co_domain *co_store_domain(struct co_store *s, const char *key, const char *value);
/* Key builders (malloc'd). */
char *co_key_shard(const char *prefix, const char *id);
char *co_key_domain(const char *prefix, const char *k, const char *v);
char *co_key_cluster(const char *prefix, const char *cluster);
char *co_key_quota(const char *prefix, const char *provider, const char *region);
char *co_key_seq(const char *prefix);
char *co_key_leader(const char *prefix);

/* ----- soft state (leader-local) */
struct co_instr {
    char id[RB_INSTR_ID];
    int64_t seq;
    Bigfleet__V1alpha1__CoordinatorInstruction *in; /* unpacked copy we own */
};

struct co_soft {
    char *id;
    Bigfleet__V1alpha1__ShardReport *last; /* latest report taken */
    int64_t received_ns;                   /* wall */
    uint64_t report_seq;
    /* digest of `last` for the loop (pointers into `last`) */
    struct co_rb_free *free;
    uint32_t n_free;
    struct rb_shortfall *sf;
    uint32_t n_sf;
    const char **strs; /* type/zone In values of every shortfall */
    struct co_instr *pend;
    uint32_t n_pend;
};

struct co_domain_op {
    char id[RB_INSTR_ID]; /* the instruction in flight ("" = resend) */
    char *shard, *key, *value;
    bool assign;
    uint64_t retry_pass;
};

/* A quota ledger change waiting for the one before it to commit. */
struct co_quota_adj {
    char *a, *b; /* shards (b may be NULL) */
    int32_t da, db;
    bool set; /* per_shard[a] = da instead of += */
};

enum co_role { CO_FOLLOWER = 0, CO_LOADING = 1, CO_LEADER = 2 };

struct coord {
    struct co_config cfg;
    struct bf_net_loop *loop;
    struct bf_net_server *srv;
    struct bf_net_http_server *http;
    struct etcd *etcd;
    struct bf_net_timer *tick, *rebal;
    /* leader.c */
    enum co_role role;
    int64_t term;        /* create revision of the leader key (when leader) */
    int64_t lease;       /* our lease id (0 = none) */
    int64_t lease_ok_ns; /* CLOCK_BOOTTIME ns: send time of the last keepalive that succeeded */
    bool lease_busy, campaign_busy;
    char leader_seen[CO_ID_MAX]; /* the current leader's value, as last read */
    /* set by co_server_start: the state loaded after an election (re-assert
     * domains), and leadership lost (drop the soft state); NULL = nothing */
    void (*on_elected)(struct coord *c);
    void (*on_lost)(struct coord *c);
    uint64_t elections, stepdowns, etcd_errors;
    /* store.c */
    struct co_store st;
    int64_t seq_next, seq_limit;
    bool seq_busy;
    /* server.c */
    struct co_soft *soft;
    uint32_t n_soft;
    struct co_domain_op *dops;
    uint32_t n_dops;
    struct rb *rb;
    uint64_t reports, reports_rejected, stale_reports, instr_sent, acks;
    /* instructions still queued (unacked) and rebalance moves still in
     * flight when leadership was lost: dropped with the soft state, never
     * delivered by this replica again (seed 002: the new leader re-derives) */
    uint64_t instr_dropped_stepdown, moves_dropped_stepdown;
    int64_t last_report_ns; /* wall: when a ReportShard was last answered (0 = never) */
    /* the quota ledger is one etcd value rewritten whole: one write in
     * flight at a time, each computed from the value the previous one
     * committed (two at once would lose one's change); leader-local */
    struct co_quota_adj *qadj;
    uint32_t n_qadj;
    bool quota_busy;
    uint64_t quota_gen; /* bumped on step-down: a late answer is ignored */
    uint64_t quota_dropped;
    struct rb_type *types;
    size_t n_types;
};

/* role.c (below leader.c, store.c and server.c) */
/* Leader and its lease renewed within TTL minus one tick (checked at every
 * call: a replica resumed after a stall refuses before its tick steps it down). */
bool co_is_leader(const struct coord *c);
/* Leader (or loading) -> follower: logged, counted, c->on_lost called, term
 * cleared. A follower's call does nothing. */
void co_step_down(struct coord *c, const char *why);
/* The election tick: a third of --lease-ttl, at least 200 ms (ns). */
int64_t co_tick_ns(const struct coord *c);
/* The lease clock, CLOCK_BOOTTIME in ns: it counts a host suspend, as etcd's
 * lease expiry does. */
int64_t co_lease_clock_ns(void);
/* Whether etcd may have expired our lease by `now` (co_lease_clock_ns): no
 * keepalive sent in the last TTL minus one tick succeeded. */
bool co_lease_maybe_expired(const struct coord *c, int64_t now);

/* leader.c */
void co_leader_tick(struct coord *c);
void co_leader_stop(struct coord *c); /* orderly exit: revoke the lease */

/* store.c: fenced writes (leader only). cb(arg, 0 | -ESTALE (fence lost:
 * stepped down) | -EIO). ops are consumed (freed) by the call. */
typedef void (*co_commit_fn)(struct coord *c, void *arg, int rc);
int co_commit(struct coord *c, struct co_op *ops, size_t n, co_commit_fn cb, void *arg);
/* Loads every key under the prefix into the store, then reserves a
 * sequence block; cb(0) once leader-ready. */
int co_store_load(struct coord *c, co_commit_fn cb, void *arg);
/* The next instruction sequence number (0 = none reserved right now). */
int64_t co_next_seq(struct coord *c);

/* server.c */
int co_server_start(struct coord *c);
void co_server_stop(struct coord *c);
void co_rebalance_pass(struct coord *c);
/* Digests a decoded report into soft state (also the fuzz entry). */
int co_soft_ingest(struct coord *c, struct co_soft *s, Bigfleet__V1alpha1__ShardReport *rep);
struct co_soft *co_soft_get(struct coord *c, const char *id, bool create);
void co_soft_free(struct co_soft *s);

/* http.c */
int co_http_start(struct coord *c);

#endif
