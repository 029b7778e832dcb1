/*
 * bigfleet/provider.h — the CapacityProvider client used by the reconciler
 * and the executor: the six RPCs of bigfleet.v1alpha1.CapacityProvider over
 * the bf_net gRPC client, with the shard's fencing token, default deadlines
 * and the error mapping of reference/shard.md §3.3; a zero-copy decoder of
 * the provider's Machine / MachineList / TransitionAck messages; and the
 * screen + conversion of a provider Machine into a shared-memory machine
 * record (shard.md §3.5, §3.6; wire.md §4, §10, §11).
 *
 * Fencing (wire.md §11, ecosystem.md §2.5). Every Create/Configure/Drain/
 * Delete ATTEMPT is stamped with (shard_id, shard_epoch, sequence_number):
 * shard_id = --id, epoch = the shard epoch the supervisor bumped in LMDB
 * (inv_hdr->epoch), sequence = a fresh, strictly increasing value per attempt
 * (a re-sent request is re-stamped; idempotency comes from the provider's
 * operation_id, never from the token). Get and List carry no token.
 *   The sequence space: the Go shard starts a process-wide counter at 1, which
 *   is safe there because every Go process start bumps the epoch. Here the
 *   supervisor bumps the epoch, and a child that dies is restarted under the
 *   SAME epoch: a restarted executor counting from 1 again would be fenced out
 *   by the per-(shard, machine) marks its predecessor left at the provider. So
 *   a client's first sequence number is max(1, CLOCK_MONOTONIC nanoseconds at
 *   bf_prov_client_new) and each attempt adds 1: strictly greater than every
 *   number an earlier client of the same boot issued (one attempt per
 *   nanosecond is out of reach), and a reboot restarts the supervisor, which
 *   bumps the epoch (a new epoch resets the provider's sequence space).
 *
 * Error mapping (shard.md §3.3). gRPC status -> enum bf_prov_status:
 *   OK -> OK; NOT_FOUND -> NOT_FOUND; UNIMPLEMENTED -> UNSUPPORTED;
 *   FAILED_PRECONDITION -> FENCED (reserved for fencing on this service: a
 *   zombie-shard incident, never retried); INVALID_ARGUMENT -> INVALID;
 *   DEADLINE_EXCEEDED -> TIMEOUT; CANCELLED -> CANCELLED; UNAVAILABLE ->
 *   UNAVAILABLE (transport: the provider may not have seen the request);
 *   anything else (INTERNAL "invalid state transition", ...) -> ERROR. A reply
 *   that does not decode -> BAD_REPLY. The gRPC code and message are kept.
 *
 * Deadlines. Each call takes timeout_ns; <= 0 uses the defaults of the Go
 * client: 30 s for the lifecycle RPCs and Get, 2 min for List.
 *
 * Threads: a client belongs to the bf_net loop that created it (bigfleet/
 * net.h); callbacks run on that loop, never from inside the call that
 * started them. Decoded views point into the reply buffer and are valid only
 * during the callback.
 */
#ifndef BIGFLEET_PROVIDER_H
#define BIGFLEET_PROVIDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bigfleet/net.h"
#include "bigfleet/shm.h"

#define BF_PROV_DEFAULT_TIMEOUT_NS      (30LL * 1000000000LL)  /* lifecycle RPCs and Get */
#define BF_PROV_DEFAULT_LIST_TIMEOUT_NS (120LL * 1000000000LL) /* List */
#define BF_PROV_ID_MAX                  1024 /* longest machine / cluster id the client sends */

/* The six RPCs (values equal enum bf_sim_rpc). */
enum bf_prov_rpc {
    BF_PROV_CREATE = 0,
    BF_PROV_CONFIGURE = 1,
    BF_PROV_DRAIN = 2,
    BF_PROV_DELETE = 3,
    BF_PROV_GET = 4,
    BF_PROV_LIST = 5,
    BF_PROV_RPC_COUNT = 6
};
/* "Create", ..., "List". */
const char *bf_prov_rpc_name(int rpc);

/* Outcome of one call (see the mapping above). */
enum bf_prov_status {
    BF_PROV_OK = 0,
    BF_PROV_NOT_FOUND = 1,
    BF_PROV_UNSUPPORTED = 2,
    BF_PROV_FENCED = 3,
    BF_PROV_INVALID = 4,
    BF_PROV_TIMEOUT = 5,
    BF_PROV_CANCELLED = 6,
    BF_PROV_UNAVAILABLE = 7,
    BF_PROV_ERROR = 8,
    BF_PROV_BAD_REPLY = 9,
    BF_PROV_STATUS_COUNT = 10
};
/* "ok", "not_found", "unsupported", "fenced", "invalid_argument", "timeout",
 * "cancelled", "unavailable", "error", "bad_reply". */
const char *bf_prov_status_name(int status);
/* gRPC status code -> enum bf_prov_status. */
int bf_prov_status_from_code(int grpc_code);
/* True for the statuses after which the provider may or may not have applied
 * the request (TIMEOUT, CANCELLED, UNAVAILABLE): the caller must not infer the
 * provider's state and should let reconcile tell it. */
static inline bool bf_prov_status_transport(int status)
{
    return status == BF_PROV_TIMEOUT || status == BF_PROV_CANCELLED ||
           status == BF_PROV_UNAVAILABLE;
}

/* ------------------------------------------------------------ decoded views */

/* A byte string inside a reply buffer (not NUL-terminated). */
struct bf_prov_bytes {
    const uint8_t *p;
    size_t len;
};

/*
 * One provider Machine, decoded in place (wire.md §4 field numbers). Scalar
 * fields hold the last occurrence on the wire (proto3 semantics); state and
 * capacity_type are the raw enum numbers (unknown values are kept so the
 * screen can reject them). The maps are walked on demand with
 * bf_prov_map_iter over the message bytes; n_* count their entries.
 * shape_hash is a 128-bit hash of the raw bytes of instance_type, zone,
 * capacity_type, resources, labels and allocatable (fields 4, 5, 6, 9, 10,
 * 13) in wire order: machines of one shape, encoded alike, share it.
 */
struct bf_prov_machine {
    const uint8_t *buf; /* the Machine message */
    size_t len;
    struct bf_prov_bytes id, host_provider, host_ref, instance_type, zone, last_error, cluster;
    int32_t state;
    int32_t capacity_type;
    double price_per_hour;
    double interruption_probability;
    bool has_host;
    uint32_t n_resources, n_labels, n_allocatable, n_metadata;
    uint64_t shape_hash[2];
};

/*
 * Decodes a Machine message. Unknown fields are skipped; reserved field 11
 * too. Returns 0, or -EBADMSG (truncated varint/length, wrong wire type for a
 * known field, group wire types, a malformed map entry).
 */
int bf_prov_machine_decode(const uint8_t *p, size_t len, struct bf_prov_machine *m);
/*
 * The reconciler's fast path: the id (field 1, the last one wins) and the
 * state (field 2) of a Machine message, after checking its top-level
 * structure and the wire types of the known fields; nested messages (host,
 * maps) are not looked into -- bf_prov_machine_decode does that before
 * anything is ingested. Returns 0 or -EBADMSG; *id points into p (empty when
 * absent), *state is 0 when absent.
 */
int bf_prov_machine_peek(const uint8_t *p, size_t len, struct bf_prov_bytes *id, int32_t *state);

enum bf_prov_map_which {
    BF_PROV_MAP_RESOURCES = 9,    /* Machine.resources.resources */
    BF_PROV_MAP_LABELS = 10,      /* Machine.labels */
    BF_PROV_MAP_ALLOCATABLE = 13, /* Machine.allocatable.resources */
    BF_PROV_MAP_METADATA = 15     /* Machine.shard_metadata (values are bytes) */
};
struct bf_prov_map_iter {
    const uint8_t *p, *end;   /* position in the Machine message */
    const uint8_t *ip, *iend; /* position inside the current Resources message */
    uint32_t field;
    bool nested;
};
void bf_prov_map_iter_init(struct bf_prov_map_iter *it, const struct bf_prov_machine *m,
                           enum bf_prov_map_which which);
/* Next entry in wire order (a duplicate key appears twice: the last wins).
 * 1 with key/value set, 0 at the end, -EBADMSG. */
int bf_prov_map_next(struct bf_prov_map_iter *it, struct bf_prov_bytes *key,
                     struct bf_prov_bytes *value);

/* A MachineList: the revision cursor and the machines (walk with _next). */
struct bf_prov_list {
    const uint8_t *buf;
    size_t len;
    struct bf_prov_bytes revision;
    uint32_t n_machines;
};
/* 0 or -EBADMSG (structure only; machines are decoded by the caller). */
int bf_prov_list_decode(const uint8_t *p, size_t len, struct bf_prov_list *l);
struct bf_prov_list_iter {
    const uint8_t *p, *end;
};
void bf_prov_list_iter_init(struct bf_prov_list_iter *it, const struct bf_prov_list *l);
/* Next machine's bytes: 1, 0 at the end, -EBADMSG. */
int bf_prov_list_next(struct bf_prov_list_iter *it, struct bf_prov_bytes *machine);

/* A TransitionAck. has_machine is false when the ack carries no machine. */
struct bf_prov_ack {
    struct bf_prov_bytes operation_id;
    bool has_machine;
    struct bf_prov_machine machine;
};
int bf_prov_ack_decode(const uint8_t *p, size_t len, struct bf_prov_ack *a);

/* ------------------------------------------------------------ the client */

struct bf_prov_client;
struct bf_prov_call;

struct bf_prov_opts {
    const char *addr;             /* host:port of the provider; copied */
    struct bf_net_tls_config tls; /* all three (mTLS) or none (h2c) */
    const char *shard_id;         /* fencing: --id; copied; "" disables fencing (tests) */
    int64_t epoch;                /* fencing: the shard epoch */
    int64_t connect_timeout_ns;   /* 0 = 5 s */
    int64_t backoff_max_ns;       /* reconnect backoff cap; 0 = 5 s (recovery after an outage) */
    int64_t keepalive_ns;         /* 0 = 10 s (a hung provider is detected); < 0 = off */
    int64_t seq_start;            /* first sequence number; 0 = the monotonic clock rule above */
    /* Latency histograms by RPC and final gRPC status in the state segment
     * (st->host.provider_rpc[i], written only by this process), or NULL. */
    struct bf_rpc_provider_latency *latency;
};

struct bf_config;
/*
 * Client options from the appliance configuration: --provider-addr, the
 * fencing identity (--id, the given epoch), and the mTLS files when all three
 * TLS flags are set -- except for the embedded simulated provider (the
 * supervisor starts it plaintext on --sim-listen, loopback, and hands the
 * children --provider-addr=<sim-listen>), which is dialled plaintext. The
 * strings point into cfg.
 */
void bf_prov_opts_from_config(struct bf_prov_opts *o, const struct bf_config *cfg, int64_t epoch);

/* The result of one call. message is the grpc-message (valid during the
 * callback; "" when none). seq is the sequence number the attempt carried
 * (0 for Get/List). */
struct bf_prov_result {
    int status; /* enum bf_prov_status */
    int code;   /* gRPC status code */
    const char *message;
    int64_t seq;
    int64_t elapsed_ns;
};

/* Per-client counters (process-local). */
struct bf_prov_stats {
    uint64_t calls[BF_PROV_RPC_COUNT];
    uint64_t by_status[BF_PROV_RPC_COUNT][BF_PROV_STATUS_COUNT];
    uint64_t inflight;
    int64_t last_seq;
};

/*
 * Creates a client on loop and starts connecting. Returns 0 and *out,
 * -EINVAL (no addr, partial TLS), -EIO (TLS files), -ENOMEM.
 */
int bf_prov_client_new(struct bf_net_loop *loop, const struct bf_prov_opts *o,
                       struct bf_prov_client **out);
/* Every unfinished call completes with CANCELLED inside this call. NULL ok. */
void bf_prov_client_free(struct bf_prov_client *c);
void bf_prov_client_stats(const struct bf_prov_client *c, struct bf_prov_stats *out);
/* The connection state (enum bf_net_client_state). */
int bf_prov_client_state(const struct bf_prov_client *c);
/* The loop the client (and its callbacks) run on: borrowed (owned by the
 * caller of bf_prov_client_new; valid while the client lives). */
struct bf_net_loop *bf_prov_client_loop(const struct bf_prov_client *c);
/* Reply callbacks run after nghttp2 parsed the reply
 * (bf_net_client_set_unary_after_recv), where bf_prov_client_flush works.
 * Call it right after bf_prov_client_new, before any call starts (a call
 * already in flight would complete with either timing). The reconciler sets
 * it; the executor keeps the default. Loop thread. */
void bf_prov_client_replies_after_recv(struct bf_prov_client *c);
/* Puts the calls started so far on the wire now (bf_net_client_flush): from
 * a reply callback, before working on the reply, so that the provider
 * answers the next call meanwhile. Loop thread. */
void bf_prov_client_flush(struct bf_prov_client *c);
/* Takes the next sequence number (what the next mutating attempt carries). */
int64_t bf_prov_next_seq(struct bf_prov_client *c);

typedef void (*bf_prov_ack_fn)(void *arg, const struct bf_prov_result *r,
                               const struct bf_prov_ack *ack /* NULL unless OK */);
typedef void (*bf_prov_machine_fn)(void *arg, const struct bf_prov_result *r,
                                   const struct bf_prov_machine *m /* NULL unless OK */);
typedef void (*bf_prov_list_fn)(void *arg, const struct bf_prov_result *r,
                                const struct bf_prov_list *l /* NULL unless OK */);

/* One shard_metadata entry for Configure (value is bytes, may hold NUL). */
struct bf_prov_md {
    const char *key;
    const uint8_t *value;
    size_t len;
};

/*
 * The calls. Ids are byte strings (id_len bytes; they must not contain NUL
 * and be at most BF_PROV_ID_MAX bytes: -EINVAL). The callback runs exactly
 * once (never from inside the call) unless the call returns an error.
 * Returns 0 and, when out is not NULL, a handle for bf_prov_call_cancel()
 * valid until the callback runs; -EINVAL, -ENOMEM, -EMSGSIZE.
 */
int bf_prov_create(struct bf_prov_client *c, const char *id, size_t id_len, int64_t timeout_ns,
                   bf_prov_ack_fn cb, void *arg, struct bf_prov_call **out);
int bf_prov_configure(struct bf_prov_client *c, const char *id, size_t id_len, const char *cluster,
                      size_t cluster_len, const uint8_t *blob, size_t blob_len,
                      const struct bf_prov_md *md, size_t n_md, int64_t timeout_ns,
                      bf_prov_ack_fn cb, void *arg, struct bf_prov_call **out);
int bf_prov_drain(struct bf_prov_client *c, const char *id, size_t id_len, int64_t grace_seconds,
                  int64_t timeout_ns, bf_prov_ack_fn cb, void *arg, struct bf_prov_call **out);
int bf_prov_delete(struct bf_prov_client *c, const char *id, size_t id_len, int64_t timeout_ns,
                   bf_prov_ack_fn cb, void *arg, struct bf_prov_call **out);
int bf_prov_get(struct bf_prov_client *c, const char *id, size_t id_len, int64_t timeout_ns,
                bf_prov_machine_fn cb, void *arg, struct bf_prov_call **out);

struct bf_prov_list_req {
    uint32_t state_mask;  /* bit s = include state s (1..8); 0 = any state */
    int32_t max_results;  /* 0 = no cap */
    const uint8_t *since; /* since_revision cursor (opaque); NULL/0 = full */
    size_t since_len;
};
int bf_prov_list(struct bf_prov_client *c, const struct bf_prov_list_req *q, int64_t timeout_ns,
                 bf_prov_list_fn cb, void *arg, struct bf_prov_call **out);
/* Cancels a call: its callback follows with CANCELLED (next iteration). */
void bf_prov_call_cancel(struct bf_prov_call *call);

/* ------------------------------------------------------------ machine -> record */

/*
 * The shard's screen of a provider record (machine.Invariant, shard.md §3.5
 * and the structural checks of §3.6), before anything is interned: no id, an
 * id holding NUL or longer than BF_PROV_ID_MAX, an unknown state (not 1..8),
 * host/cluster/last_error inconsistent with the state -> STRUCTURAL; price
 * NaN or < 0 -> PRICE; probability NaN or outside [0,1] -> PROBABILITY.
 * Returns enum bf_reject_reason; why (may be NULL) gets a message.
 */
int bf_prov_machine_check(const struct bf_prov_machine *m, char *why, size_t why_len);

/* Process-local cache: shape hash -> interned profile (see shape_hash). */
struct bf_prov_shape_cache;
struct bf_prov_shape_cache *bf_prov_shape_cache_new(void);
void bf_prov_shape_cache_free(struct bf_prov_shape_cache *c);

/*
 * Builds the provider's part of a record from a screened machine: id (the
 * given id_ref, or interned when 0), state, profile (MachineProfileBlob:
 * instance type, zone, capacity type, resources, labels, allocatable;
 * cached by shape), type/zone registry indices, capacity type (unknown values
 * -> UNSPECIFIED), host ("provider\0ref", or the provider alone with
 * BF_REC_HOST_IS_ID when ref == id), cluster, last_error, price, probability.
 * Assigned* fields, idle_since and the other flags are left zero.
 * Returns 0; BF_REJECT_STRUCTURAL (> 0) for a shape the shard cannot hold (an
 * unparseable or negative quantity, NUL in a label, more than BF_MAX_DIMS
 * resource names, the type or zone registry full; why says which); or a
 * negative errno when the string table is full or locked (-ENOSPC,
 * -ETIMEDOUT): a transient condition of ours, not the provider's fault.
 * A host ref the string table cannot hold degrades to the provider alone
 * (the record stays valid; the node's provider_id is then empty): *host_degraded.
 */
int bf_prov_machine_build(struct bf_shm *s, struct bf_prov_shape_cache *c,
                          const struct bf_prov_machine *m, uint32_t id_ref,
                          struct bf_machine_rec *out, bool *host_degraded, char *why,
                          size_t why_len);

/*
 * Restores the assignment from the provider's shard_metadata echo (wire.md
 * §10, M72): priority, both buckets, fingerprint and group (interned) into
 * rec; keys absent leave the fields alone. Returns the number of malformed
 * values skipped (0 = clean), or -errno when interning failed.
 */
int bf_prov_machine_assignment(struct bf_shm *s, const struct bf_prov_machine *m,
                               struct bf_machine_rec *rec);

#endif /* BIGFLEET_PROVIDER_H */
