/*
 * session_internal.h — private structures of the session process
 * (bigfleet-shardd --role=session), shared by the src/session sources.
 *
 * Threads: the event loop thread (gRPC Shard/Session, HTTP probes, ring
 * consumers, coordinator client) and one ingest thread (ingest.c). They
 * share only: the cluster table mirror (struct cluster_tab, under its
 * mutex), the ingest job slots and completion queue (under the ingest
 * mutex), the string table (its own CAS lock) and atomic stats.
 */
#ifndef BF_SESSION_INTERNAL_H
#define BF_SESSION_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "bigfleet/blobs.h"
#include "bigfleet/config.h"
#include "bigfleet/hmap.h"
#include "bigfleet/net.h"
#include "bigfleet/process.h"
#include "bigfleet/arena.h"
#include "bigfleet/opmsg.h"
#include "bigfleet/outbox.h"
#include "bigfleet/rollup.h"
#include "bigfleet/shm.h"

/* ------------------------------------------------------------ tunables */

#define SS_NET_HWM             (256u << 10) /* transport outbox bytes before we queue */
#define SS_OUTBOX_FRAME_BYTES  (4u << 20)   /* per-session non-coalescable frames */
#define SS_OUTBOX_FRAMES       8192u
#define SS_OUTBOX_MAX_AC_KEYS  65536u                /* distinct fingerprints per session */
#define SS_OUTBOX_GLOBAL_BYTES (512ull << 20)        /* across sessions */
#define SS_STALL_NS            (60LL * 1000000000LL) /* an operator not reading for this long is closed */
#define SS_RESYNC_CHUNK        8192u           /* records read per loop turn during a resync scan */
#define SS_RING_BUDGET         4096u           /* ring messages per ring per loop turn */
#define SS_INGEST_BUDGET       (1536ull << 20) /* queued + in-process rollup bytes */
/* a rollup of at most this many held bytes is ingested on the event loop
 * when the ingest lane is idle (bf_ingest_submit): ~1,800 Needs, well
 * under a millisecond of conversion */
#define SS_INGEST_INLINE_MAX (256u << 10)
#define SS_RECLAIM_TRACK_MAX 65536u /* instructions awaiting an ack */
#define SS_RECLAIM_TTL_NS    (600LL * 1000000000LL)
#define SS_BOOT_MAX          65536u /* bootstrap requests in flight */
/* hostile peers (docs/security.md) */
#define SS_SMALL_MESSAGE_MAX 4096u       /* InspectNeedsRequest */
#define SS_HELLO_MAX         (64u << 10) /* a stream's frames until its Hello is in */
#define SS_SMALL_FRAME_MAX   (64u << 10) /* Hello, ReclaimAck after the Hello */
#define SS_STREAM_IDLE_NS                                                                          \
    (600LL * 1000000000LL)                             /* a Session without any frame (rollups     \
                                                         come every cycle, ~10 s) */
#define SS_CONN_IDLE_NS         (300LL * 1000000000LL) /* a connection without calls */
#define SS_MAX_STREAMS_PER_CONN 100u                   /* gRPC's default; an operator uses 1 */

/* ------------------------------------------------------------ u64 map */

/* u64 -> u64 (bigfleet/hmap.h): request and instruction ids, cluster refs
 * to an index or a pointer. Iterate over m.slots[0 .. m.mask] where .h != 0;
 * deleting during a scan may move a later entry into an earlier slot:
 * restart or tolerate. */
BF_HMAP_DEFINE(u64map, uint64_t, uint64_t, bf_hash_u64, BF_HMAP_EQ)

/* ------------------------------------------------------------ clusters */

/* The cluster rows as this process last wrote them (the mirror is the
 * source of truth for every field; each write publishes a whole row). */
struct cluster_tab {
    pthread_mutex_t mu;
    struct bf_shm *shm;
    struct bf_cluster_rec *rec; /* [max_clusters] */
    uint32_t n;                 /* rows in use */
};
/* Loads the published rows, clears `connected` (no stream survives a
 * restart). 0 or -ENOMEM. */
int bf_ctab_init(struct cluster_tab *ct, struct bf_shm *shm);
void bf_ctab_destroy(struct cluster_tab *ct);
/* Publishes row idx from the mirror. Caller holds ct->mu. */
void bf_ctab_publish_locked(struct cluster_tab *ct, uint32_t idx);

/* ------------------------------------------------------------ ingest */

enum ingest_outcome {
    INGEST_ACCEPTED = 0,
    INGEST_HELD = 1,     /* rail 2 */
    INGEST_REJECTED = 2, /* malformed or invalid: no ack, last good demand kept */
    INGEST_SHED = 3      /* not queued (memory budget): no ack */
};

struct ingest_done {
    uint32_t cidx;
    uint64_t serial;
    int outcome;
};

/* Hostile-input counters of the ingest thread (atomics; read with
 * bf_ingest_read_counters). over_quota: needs, groups, strings, dims. */
struct ingest_counters {
    _Atomic uint64_t timestamps_clamped; /* rollups whose timestamp was not taken as arrival */
    _Atomic uint64_t priorities_clamped; /* Needs above --max-priority */
    _Atomic uint64_t unknown_fields;     /* dropped while decoding Needs */
    _Atomic uint64_t dims_registered;    /* resource names added for rollups */
    _Atomic uint64_t over_quota[4];      /* rollups rejected by a per-cluster quota */
    _Atomic uint64_t rollups_unchanged; /* took the unchanged-rollup path (bf_rollup_repeat_meta) */
    _Atomic uint64_t
        needs_reused; /* Needs of changed rollups reused (bf_rollup_convert_incremental) */
    _Atomic uint64_t rollups_inline; /* ingested on the caller's thread (bf_ingest_submit) */
};

struct ingest;
/* A snapshot of the counters (any thread). */
void bf_ingest_read_counters(struct ingest *ig, struct ingest_counters *out);
/* Starts the ingest thread. done_efd is written after each completion. */
int bf_ingest_start(struct ingest **out, struct bf_shm *shm, const struct bf_config *cfg,
                    struct cluster_tab *ct, int done_efd);
/*
 * A rollup's bytes on their way to the ingest thread, with their owner.
 * Exactly one of net.base / heap is set:
 *   net.base  the gRPC message buffer taken from the net layer without a
 *             copy (bf_net_call_take_message): the whole OperatorMessage,
 *             data/len the Rollup inside it; freed with bf_net_msg_free;
 *   heap      a malloc'd copy (a message the layer delivered in place, or a
 *             Rollup field seen twice and merged); data == heap; free().
 * The net layer stopped charging a taken buffer to the connection's inbound
 * budget; from submission on, bf_ingest_buf_held bytes are charged to the
 * ingest budget (SS_INGEST_BUDGET) until the buffer is freed.
 */
struct ingest_buf {
    const uint8_t *data; /* the serialized Rollup */
    size_t len;
    struct bf_net_msg_buf net;
    uint8_t *heap;
};
/* Bytes b holds in memory (what the ingest budget charges). */
size_t bf_ingest_buf_held(const struct ingest_buf *b);
/* Frees whichever owner b has (any thread) and clears b. */
void bf_ingest_buf_free(struct ingest_buf *b);
/* Hands a rollup to the thread: *b is taken over (and cleared) whatever the
 * result. A queued, unprocessed rollup of the same cluster is superseded
 * (freed). Returns 0 or -ENOBUFS (over the memory budget: the bytes are
 * freed, nothing queued). The buffer is freed by the ingest thread once the
 * rollup is processed.
 * When the lane is idle (nothing queued, the thread not processing) and the
 * rollup holds at most SS_INGEST_INLINE_MAX bytes, it is processed right
 * here on the caller's thread instead — the same process(), under the same
 * budget, with the thread kept out meanwhile — and 1 is returned: its
 * completion is queued but done_efd is NOT written; the caller drains the
 * completions (bf_ingest_take_done). This saves the two thread hand-offs
 * (a condvar wake-up and an eventfd wake-up) that cost more CPU than
 * ingesting a small rollup on this machine (docs/performance.md, "Ingest
 * (target 3; i18-ingest, stop 27)"). */
int bf_ingest_submit(struct ingest *ig, uint32_t cidx, uint64_t serial, struct ingest_buf *b,
                     int64_t recv_ns);
/* Takes up to max completions. */
int bf_ingest_take_done(struct ingest *ig, struct ingest_done *out, int max);
/* Stops and joins the thread (a rollup in progress finishes first). */
void bf_ingest_stop(struct ingest *ig);

/* ------------------------------------------------------------ the loop */

struct ss;

struct sess {
    struct ss *ss;
    struct bf_net_call *call;
    uint64_t serial;
    int64_t cidx; /* -1 before Hello */
    uint32_t cluster_ref;
    bool live;    /* installed as its cluster's session */
    bool closing; /* finish()ed by us */
    bool warned_unknown;
    struct bf_outbox ob;
    size_t ob_bytes;        /* last bf_outbox_bytes accounted globally */
    int64_t stalled_since;  /* mono ns since the transport stopped taking our queue */
    size_t stall_net_bytes; /* transport backlog at the last sweep (progress check) */
    uint32_t rs_pass;       /* resync pass serving this session (0 none) */
    bool rs_waiting;        /* on the pending-resync list */
    struct sess *rs_prev, *rs_next;
    struct sess *all_prev, *all_next;
    uint32_t n_boot;
    char cluster_id[BF_CLUSTER_ID_MAX + 1];
};

struct local_counters {
    uint64_t frames_bad;
    uint64_t frames_oversize; /* Hello / ReclaimAck over SS_SMALL_FRAME_MAX */
    uint64_t unknown_fields;  /* dropped by bf_pb_unpack in small frames */
    uint64_t slow_closed;
    uint64_t rollups_shed;
    uint64_t boot_no_session;
    uint64_t boot_resp_ring_full;
    uint64_t reclaim_no_session;
    uint64_t reclaim_unknown_acks;
    uint64_t node_no_session;
    uint64_t ac_no_session;
    uint64_t resync_passes;
    uint64_t resync_updates;
};

struct ss {
    struct bf_child ch;
    struct bf_shm *shm;
    const struct bf_config *cfg;
    struct bf_net_loop *loop;
    struct bf_net_server *srv;
    struct bf_net_http_server *http;
    struct bf_net_watch *wake_watch, *ingest_watch;
    struct bf_net_timer *tick, *resync_timer, *stop_timer;
    int ingest_efd;
    struct cluster_tab ct;
    struct ingest *ig;
    struct sess **live;     /* [max_clusters]: the cluster's installed session */
    struct u64map cref_idx; /* cluster name ref -> cluster index */
    struct bf_blob_cache *cache;
    struct u64map boots;    /* request id -> struct boot * */
    struct u64map reclaims; /* instruction id -> sent time (mono ns) */
    struct sess *all;       /* every open stream */
    uint64_t next_serial;
    size_t outbox_total;
    /* resync */
    struct sess *rs_pending;
    uint32_t rs_pass;
    bool rs_running;
    uint32_t rs_pos, rs_hwm;
    bool drain_deferred;
    bool stopping;
    struct coord *coord;
    struct local_counters lc;
    struct bf_live_values live_cfg; /* the live configuration last applied (SIGHUP) */
};

/* session.c */
extern const struct bf_net_method bf_session_method;
void bf_session_drain_rings(struct ss *ss);
void bf_session_on_ingest_done(struct ss *ss);
void bf_session_sweep(struct ss *ss);
void bf_session_resync_step(struct ss *ss);
void bf_session_close_all(struct ss *ss);

/* http.c */
int bf_session_http_start(struct ss *ss);

/* inspect_needs.c: ShardRead/InspectNeeds (arg: struct ss *) and its
 * process-local counters for /metrics. */
struct bf_strbuf;
extern const struct bf_net_method bf_inspect_needs_method;
void bf_session_inspect_metrics(struct bf_strbuf *b);

/* health.c: grpc.health.v1.Health (arg: struct ss *) */
extern const struct bf_net_method bf_health_check_method;
extern const struct bf_net_method bf_health_watch_method;
extern const struct bf_net_method bf_health_list_method;
/* Sends status changes to every Watch (the 1 s tick and at stop). */
void bf_session_health_tick(struct ss *ss);
/* At stop: NOT_SERVING to every watcher, then the streams end UNAVAILABLE. */
void bf_session_health_stop(struct ss *ss);
uint32_t bf_session_health_watches_open(void);
/* The service name of a HealthCheckRequest (msg, len) into out (NUL-ended).
 * 0, -EBADMSG (does not decode), -ENAMETOOLONG (over SS_HEALTH_SERVICE_MAX
 * bytes). Pure: the fuzz target's entry point. */
#define SS_HEALTH_SERVICE_MAX 256
int bf_session_health_service(const uint8_t *msg, size_t len, char out[SS_HEALTH_SERVICE_MAX + 1]);

/* reflection.c: grpc.reflection.v1 and v1alpha ServerReflectionInfo (arg: struct ss *) */
extern const struct bf_net_method bf_reflection_v1_method;
extern const struct bf_net_method bf_reflection_v1alpha_method;
/* What one reflection request asked (for the log line). */
struct ss_reflection_info {
    int request_case; /* the request's oneof case */
    size_t files;     /* file descriptors in the answer */
    char subject[128];
};
/*
 * The ServerReflectionResponse to one ServerReflectionRequest (msg, len),
 * packed into a malloc'd buffer (*out, *outlen; the caller frees): list of
 * services, a file and its dependencies, or an ErrorResponse (NOT_FOUND,
 * INVALID_ARGUMENT). 0, -EBADMSG (the request does not decode), -EIO (the
 * compiled-in descriptor set does not decode), -ENOMEM. No size limit here
 * (the call handler refuses requests over 64 KiB). Pure but for the index
 * it builds once; the fuzz target's entry point.
 */
int bf_session_reflection_answer(const uint8_t *msg, size_t len, uint8_t **out, size_t *outlen,
                                 struct ss_reflection_info *info);

/* coord.c */
int bf_coord_start(struct ss *ss);
void bf_coord_stop(struct ss *ss);
/* The coordinator term high-water mark (LMDB; 0 when none). */
int64_t bf_coord_term(const struct ss *ss);
/* Topology domains assigned to this shard (the cycle's count, LMDB-backed). */
uint32_t bf_coord_domains(const struct ss *ss);
/* Takes the cycle's instruction acks off ring COORD_OUT (queued for the
 * next report). Called from bf_session_drain_rings. */
void bf_coord_drain_acks(struct ss *ss);

#endif /* BF_SESSION_INTERNAL_H */
