/*
 * inspect.h — private header of bigfleet-inspect (tools/inspect/).
 *
 * Modules:
 *   out.c     growable output buffer, JSON writer (escaping every control
 *             byte, NUL included; invalid UTF-8 bytes as \u00XX), text
 *             helpers (byte-string escaping, quantities, ages), histogram
 *             quantiles;
 *   reader.c  the read-only side: the fault guard (SIGBUS/SIGSEGV inside a
 *             mapping becomes a clear error), bounded seqlock reads that
 *             never write (no retry counters), bounded string lookups, the
 *             inventory scan, cycle-result and verdict copies, clusters,
 *             need rows joined with verdict rows, the liveness check;
 *   render.c  every subcommand in text and JSON;
 *   remote.c  needs --addr: ShardRead/InspectNeeds over gRPC;
 *   main.c    flags, dispatch, --watch.
 *
 * Everything runs on one thread. Nothing here ever stores into a mapping:
 * the segments are attached with PROT_READ, and the only shm library calls
 * used are readers that do not write (bf_str, bf_str_find, bf_cluster_read,
 * bf_needs_copy, bf_ring_depth, bf_pending, bf_type_name, bf_zone_name,
 * bf_shm_dims, the blob decoders). bf_inv_read/bf_inv_lookup are NOT used:
 * they add seqlock retries to a counter in the inventory segment.
 */
#ifndef BF_INSPECT_H
#define BF_INSPECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bigfleet/blobs.h"
#include "bigfleet/json.h"
#include "bigfleet/model.h"
#include "bigfleet/shm.h"
#include "bigfleet/shm_layout.h"
#include "bigfleet/strbuf.h"

/* Exit codes. */
#define INSP_EXIT_OK      0
#define INSP_EXIT_RUNTIME 1
#define INSP_EXIT_USAGE   2

/* Seqlock read budget of the inspector (spin, then yield): a record still
 * locked after this many attempts is reported as busy. */

/* ------------------------------------------------------------------ out.c */

/* the output buffer is bigfleet/strbuf.h's, the JSON writer bigfleet/json.h's */

/* Text: bytes with non-printables escaped (\0, \n, \xNN); at most max
 * bytes of input (0 = all) with "..." appended when cut. */
void insp_ib_bytes_text(struct bf_strbuf *b, const char *s, size_t n, size_t max);

/* Standard base64 of n bytes appended to b. */
void insp_base64_put(struct bf_strbuf *b, const uint8_t *s, size_t n);

/* "1h02m", "3.2s", "850ms" for a non-negative nanosecond span. */
/* now - then, saturated (stamps read from a corrupted segment may be anything). */
int64_t insp_age_ns(int64_t now_ns, int64_t then_ns);
/* Seconds to nanoseconds, saturated. */
int64_t insp_sec_to_ns(int64_t s);
void insp_fmt_age(char *buf, size_t n, int64_t ns);
/* "2026-07-01T12:00:00.123Z" (UTC), or "-" for 0. */
void insp_fmt_time(char *buf, size_t n, int64_t unix_ns);

/* Histogram with exp(start, factor, nb) buckets as bf_hist_observe fills
 * them: bucket i < nb has upper bound start*factor^i, bucket nb is +Inf. */
struct insp_hist {
    uint64_t bucket[BF_HIST_MAX_BUCKETS];
    uint64_t count;
    uint64_t sum_ns;
    double start, factor;
    int nb;
};
/* Upper bound of bucket i in seconds (+Inf for i >= nb). */
double insp_hist_bound(const struct insp_hist *h, int i);
/* Prometheus-style histogram_quantile in seconds (linear within a bucket;
 * a rank in the +Inf bucket returns the highest finite bound); NaN when
 * empty. */
double insp_hist_quantile(const struct insp_hist *h, double q);

/* --------------------------------------------------------------- reader.c */

/* Fault guard: a SIGBUS/SIGSEGV whose address lies inside one of the
 * attached mappings sets the fault state and jumps back to the frame's
 * sigsetjmp (or exits 1 with a message when no frame is armed). Faults
 * elsewhere keep their default action (a real bug must still crash). */
void insp_fault_install(const struct bf_shm *s);
void insp_fault_arm(void *sigjmp_buf_ptr); /* NULL disarms */
/* After the jump: a message describing the fault. */
const char *insp_fault_message(void);

/* String of ref with its length checked against the published arena;
 * NULL for an out-of-range ref. ref 0 is "". */
const char *insp_str(const struct bf_shm *s, uint32_t ref, uint32_t *len);

/* Exact inventory counts from a scan of records [0, hwm). */
struct insp_scan {
    uint32_t hwm;
    uint32_t total;     /* valid records */
    uint32_t busy;      /* records that stayed write-locked (not counted) */
    uint32_t in_flight; /* valid records with a pending action */
    uint32_t bound;     /* records with a cluster */
    uint32_t needs_refresh, rejected;
    uint32_t by_state[BF_STATE_COUNT];
    uint32_t by_ct[BF_CT_COUNT];
    uint32_t by_stz[BF_STATE_COUNT][BF_MAX_TYPES][BF_MAX_ZONES];
    int64_t scan_ns;
};
void insp_scan(const struct bf_shm *s, struct insp_scan *out);

/* Last published cycle result (double buffer; never blocks the cycle). */
struct insp_cycle {
    bool consistent; /* false: the cycle published during every attempt */
    uint32_t buffer; /* which buffer was copied */
    uint64_t publish_seq;
    struct bf_cycle_result r;
    uint32_t nv;              /* verdict rows copied */
    struct bf_verdict_row *v; /* malloc'd, NULL when not requested */
};
/* Copies the published result (and its verdict rows when want_verdicts).
 * 0 or -ENOMEM. */
int insp_cycle_read(const struct bf_shm *s, struct insp_cycle *out, bool want_verdicts);
void insp_cycle_free(struct insp_cycle *c);

/* The ADR-0055 ownership partition as the cycle and the reconciler
 * published it (st->own, st->reconciler). */
struct insp_own {
    bool consistent; /* the bounded tables were copied between two cycle writes */
    uint32_t mode;   /* enum bf_own_mode */
    uint64_t generation;
    uint32_t n_domains, n_reserved, n_held;
    uint64_t n_in, n_out;
    uint64_t owned;           /* the reconciler's owned-set size (LMDB) */
    uint64_t release_blocked; /* not owned, kept while bound or in flight */
    uint64_t not_owned, released;
    uint64_t transferred_out, transferred_in, speculative_out, speculative_in, drained, expired,
        store_errors;
    uint64_t instructions[BF_OWN_KINDS][BF_OWN_OUTCOMES];
    uint32_t n_pub_reservations, n_pub_domains;
    struct bf_own_reservation reservations[BF_OWN_PUB_RESERVATIONS];
    char domains[BF_OWN_PUB_DOMAINS][BF_OWN_DOMAIN_TEXT];
};
void insp_own_read(const struct bf_shm *s, struct insp_own *out);

/* One cluster row. */
struct insp_cluster {
    uint32_t idx;
    bool busy;
    struct bf_cluster_rec r;
    const char *name;
    uint32_t name_len;
};
/* In-use cluster rows (malloc'd array in *out); count or -ENOMEM. */
int insp_clusters(const struct bf_shm *s, struct insp_cluster **out);

/* Bump allocator for one frame's decoded strings. */
struct insp_arena {
    struct insp_arena_blk *head;
};
void *insp_arena_alloc(struct insp_arena *a, size_t n);
char *insp_arena_strndup(struct insp_arena *a, const char *s, size_t n);
void insp_arena_free(struct insp_arena *a);

/* A resource map as (name, quantity) pairs. */
struct insp_res {
    uint32_t n;
    struct bf_kv *kv;
};
struct insp_cand {
    const char *domain;
    int32_t per_mille;
    bool satisfiable;
};
/* A NeedView (ADR-0061 + amendment), local or remote. */
struct insp_nv {
    bool has_verdict;    /* local: a verdict row of the last cycle exists */
    bool in_table;       /* local: the need row is in the current needs table */
    bool folded;         /* local: a Need NormalizeDemand made from Same gangs */
    uint32_t table_rows; /* local: needs-table rows behind this view (folded: > 1 possible) */
    const char *cluster_id;
    size_t cluster_len;
    int64_t arrival_ns;
    const char *fingerprint;
    int32_t priority;
    int ipb, rpb;
    uint32_t n_reqs;
    const struct bf_requirement *reqs;
    uint32_t n_spread;
    const struct bf_spread *spread;
    struct insp_res aggregate, min_unit, residual, freed;
    const char *group;
    size_t group_len;
    bool satisfied;
    int32_t claimed, bootstrap, provision;
    const char *same_domain;
    bool same_satisfiable, parked;
    int32_t parked_age, age_unmet;
    int unmet_reason;
    bool has_matching;
    int32_t m_idle, m_configured, m_speculative;
    bool m_capped;
    bool has_preemption;
    int32_t victims;
    uint32_t n_cand;
    struct insp_cand *cand;
};
struct insp_needs {
    bool remote;
    int64_t cycle, computed_at_ns;
    int64_t total; /* after the cluster filter, before the limit */
    uint32_t n;
    struct insp_nv *v;
    uint32_t rows_only;     /* local: rows without a verdict (arrived after the cycle) */
    uint32_t rows_folded;   /* local: Same-gang rows folded into a plain Need's verdict */
    uint32_t verdicts_only; /* local: verdicts whose row left the table since */
    uint32_t busy_clusters; /* local: clusters whose rows could not be copied */
    struct insp_arena arena;
};
/*
 * Local needs: the need rows of cluster (NULL/"" = every cluster) joined on
 * (cluster, profile, group) with the verdict rows of the published cycle
 * result; Same-gang rows that NormalizeDemand folded into a new plain Need
 * are counted under that Need's verdict (table_rows); rows without a verdict
 * and verdicts without a row are listed too. Ordered priority desc, arrival
 * asc, cluster asc; limit 0 = all.
 * 0, -ENOENT (no such cluster), -ENOMEM.
 */
int insp_needs_local(const struct bf_shm *s, struct bf_blob_cache *cache, const char *cluster,
                     uint32_t limit, struct insp_needs *out);
void insp_needs_free(struct insp_needs *n);
/* Vector over the shard's dimension registry -> pairs in the arena. */
void insp_vec_res(const struct bf_dims *d, const int64_t *v, struct insp_arena *a,
                  struct insp_res *out);

/* Liveness of the appliance whose segments s maps (for --watch). Returns 0
 * while it runs, else -1 with a message: supervisor gone, shutting down,
 * segments removed or re-created. */
struct insp_ident {
    uint64_t dev, ino; /* of the state segment at attach time */
};
int insp_ident_take(const char *shard_id, struct insp_ident *id);
int insp_alive(const struct bf_shm *s, const struct insp_ident *id, char *msg, size_t n);
/* True when the supervisor pid recorded in the headers is running. */
bool insp_supervisor_running(const struct bf_shm *s);
/* Shard ids with a state segment under /dev/shm, comma separated. */
void insp_list_shards(char *buf, size_t n);

/* --------------------------------------------------------------- render.c */

enum insp_cmd {
    CMD_SUMMARY = 0,
    CMD_MACHINES,
    CMD_MACHINE,
    CMD_CLUSTERS,
    CMD_NEEDS,
    CMD_SHORTFALLS,
    CMD_RINGS,
    CMD_PROCS,
    CMD_HISTOGRAM,
    CMD_OWNERSHIP,
    CMD_COUNT
};

struct insp_opts {
    enum insp_cmd cmd;
    const char *id;
    bool json;
    bool watch;
    int64_t interval_ns;
    int64_t frames; /* --frames N: stop after N frames (0 = until q/SIGINT) */
    const char *machine_id;
    int64_t slot; /* machine --slot N (-1 = by id) */
    int state;    /* --state (-1 = any) */
    const char *cluster, *type, *zone;
    int64_t limit; /* -1 = default */
    bool all;      /* histogram --all */
    const char *addr, *tls_cert, *tls_key, *tls_ca, *tls_server_name;
    int64_t timeout_ns;
};

/* Everything a frame needs (one attach). */
struct insp_ctx {
    struct bf_shm shm;
    struct bf_blob_cache *cache;
    struct bf_dims dims;
    const struct insp_opts *o;
    int64_t now_ns;
};

/* Renders one frame of o->cmd into b (text or JSON). Returns 0, or 1 with
 * an error message in err (runtime error: unknown machine or cluster). */
int insp_render(struct insp_ctx *c, struct bf_strbuf *b, char *err, size_t errlen);
/* needs output (shared by local and remote). */
void insp_render_needs(const struct insp_opts *o, const struct insp_needs *n, const char *source,
                       int64_t now_ns, struct bf_strbuf *b);

/* --------------------------------------------------------------- remote.c */

/* InspectNeeds over gRPC: fills out (remote = true). 0, or -1 with err. */
int insp_needs_remote(const struct insp_opts *o, struct insp_needs *out, char *err, size_t errlen);

#endif /* BF_INSPECT_H */
