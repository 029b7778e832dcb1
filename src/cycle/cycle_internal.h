/*
 * cycle_internal.h — private state of the cycle controller (src/cycle/).
 */
#ifndef BF_CYCLE_INTERNAL_H
#define BF_CYCLE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "bigfleet/blobs.h"
#include "bigfleet/cycle.h"
#include "bigfleet/engine.h"
#include "bigfleet/hmap.h"
#include "bigfleet/shm.h"

/* What the mirror holds for each slot (for incremental counts and ids).
 * 12 bytes: a restarted cycle's first rescan writes it for every slot, and
 * each 4 KiB of it first touched costs ~12-25 us on the appliance's VM
 * (controller.c; docs/performance.md "Restart without huge pages (target 7; i18-restart5,
 * stop 30)"). */
struct slotinfo {
    uint32_t id_ref;
    uint16_t type_idx;
    uint16_t zone_idx;
    uint8_t state;
    uint8_t ct;
    uint8_t ipb;
    uint8_t present : 1; /* 1 = in the engine mirror */
    uint8_t held : 1;    /* ADR-0055: handed to the engine as held (ownership.c) */
};

/* Per cluster row: what the engine has. */
struct clusterinfo {
    uint64_t generation;
    uint32_t session_epoch;
    uint32_t rows;
    uint32_t rows_off, rows_count; /* the extent the engine's demand was read from */
    uint64_t rows_generation;      /* and its rows' bf_cluster_rec.rows_generation */
    uint8_t known;
    uint8_t first_rollup;
    uint8_t connected;
    uint8_t fp_unregistered; /* a fingerprint of its rows could not be registered
                                (no memory): its next republish reads the rows */
    uint32_t bucket_rows[BF_BUCKET_COUNT];
};

/* fingerprint (an owned copy) -> profile ref (bigfleet/hmap.h) */
static inline uint64_t bf_cycle_str_hash(const char *s)
{
    return bf_hash_bytes(s, strlen(s));
}
static inline bool bf_cycle_str_eq(const char *a, const char *b)
{
    return strcmp(a, b) == 0;
}
BF_HMAP_DEFINE(fpmap, const char *, uint32_t, bf_cycle_str_hash, bf_cycle_str_eq)

/* MachineProfileBlob ref -> its engine label array (owned) */
struct labelcache_val {
    uint32_t n;
    struct bf_engine_label *labels;
};
BF_HMAP_DEFINE(labelcache, uint32_t, struct labelcache_val, bf_hash_u64, BF_HMAP_EQ)

/*
 * Engine-owned string (by address) -> string-table ref, so publishing a
 * ledger row or an action does not hash and probe the shared string table
 * for every cluster, group and fingerprint. The engine's strings are stable
 * while they live, but an address can be reused by another string after a
 * free, so every hit is validated by content (length + bytes, against an
 * inline copy for short strings, else against the string table's bytes).
 * Fingerprint entries also carry the NeedProfileBlob ref. Entries not used
 * for two cycles are dropped when the table grows.
 */
#define STRREF_INLINE 36
struct strref_entry {
    const void *p; /* engine bytes; NULL = empty slot */
    uint32_t len;
    uint32_t ref;              /* string-table ref of the same bytes */
    uint32_t prof;             /* fingerprints: NeedProfileBlob ref, 0 = not resolved yet */
    uint32_t used;             /* low 32 bits of the cycle that last used it */
    char bytes[STRREF_INLINE]; /* copy when len <= STRREF_INLINE */
};
struct strref_cache {
    struct strref_entry *e;
    uint32_t cap, n;
};

/*
 * Per verdict-row position: the group bytes and ref published there last
 * time. The ledger keeps its order from cycle to cycle (priority, arrival,
 * cluster), and a replaced gang keeps its position, so this is read
 * sequentially; a hit is decided by content alone (equal bytes have one ref).
 */
#define ROWMEMO_INLINE 48
struct rowmemo {
    uint32_t len; /* 0 = empty */
    uint32_t ref;
    char bytes[ROWMEMO_INLINE];
};

/* set of u32 keys (NeedProfileBlob refs whose fingerprint is registered);
 * the value is unused */
BF_HMAP_DEFINE(u32set, uint32_t, uint8_t, bf_hash_u64, BF_HMAP_EQ)

struct bf_cycle_own; /* ownership.c */

struct bf_cycle {
    struct bf_shm *shm;
    struct bf_cycle_opts o;
    struct bf_engine *engine;
    struct bf_blob_cache *blobs;
    struct slotinfo *slots;
    uint32_t capacity;
    struct clusterinfo *clusters;
    uint32_t max_clusters;
    struct fpmap fps;
    struct u32set fp_seen; /* profile refs already put into fps */
    struct strref_cache strrefs;
    struct rowmemo *rowmemo; /* [rowmemo_cap] */
    uint32_t rowmemo_cap;
    bool verdicts_dropping; /* the last publish left verdict rows out (logged once) */
    struct labelcache labels;
    /* the machine profile refresh_slot resolved last (blob and label cache
     * entries live as long as the caches; neighbouring slots often share
     * one, so a rescan skips both look-ups for them) */
    struct bf_engine_bulk *bulk;         /* during a full rescan (feed.c): the bulk load */
    struct bf_inv_scan *scan;            /* during a full rescan (feed.c): records by copy */
    struct bf_inv_scan_stats scan_stats; /* the last full rescan's */
    uint32_t last_mprof_ref;
    const struct bf_mprofile *last_mprof;
    const struct bf_engine_label *last_labels;
    uint32_t last_nl;
    /* dirty slots whose record was busy: retried next cycle */
    uint32_t *retry;
    uint32_t n_retry, cap_retry;
    bool need_rescan;
    uint64_t needs_counter_seen;
    /* name refs of the clusters with demand and no operator session, sorted
     * (rebuilt by bf_cycle_feed_needs every cycle): their Bootstraps are
     * held back (emit.c) */
    uint32_t *offline;
    uint32_t n_offline, offline_cap;
    /* published counts (maintained incrementally) */
    struct bf_inv_counts counts;
    /* scratch */
    struct bf_need_row *rows;
    uint32_t rows_cap;
    struct bf_engine_need *eneeds;
    uint32_t eneeds_cap;
    struct bf_engine_action *acts;
    size_t acts_cap;
    struct bf_engine_result res;
    bool have_res;
    uint64_t cycles_run;
    /* ADR-0055: the ownership partition and the coordinator instructions */
    struct bf_cycle_own *own;
    uint32_t n_held;
};

/* feed.c */
int bf_cycle_feed_mirror(struct bf_cycle *c, struct bf_cycle_report *rep);
/* This process's user + system CPU so far, in ms, and its minor faults in
 * *minflt (getrusage RUSAGE_SELF; the first-cycle and rescan log lines). */
double bf_cycle_cpu_ms(long *minflt);
/* Re-reads one slot's record and upserts it (or removes it) in the engine. */
void bf_cycle_refresh_slot(struct bf_cycle *c, uint32_t slot);

/* ownership.c (ADR-0055, docs/adr0055.md): the partition rule inputs and
 * reservations (LMDB, loaded at start), the held decision for a record;
 * own_step.c: the per-cycle step: reservation expiry, the coordinator
 * instructions from ring COORD_IN (instructions.c), re-evaluation after a
 * change, publishing to st->own. */
int bf_cycle_own_init(struct bf_cycle *c);
void bf_cycle_own_free(struct bf_cycle *c);
/* Whether the machine in `rec` (id string, decoded profile) is held out of
 * every engine decision: reserved for transfer, or unbound and not owned. */
bool bf_cycle_own_held(struct bf_cycle *c, const char *id, const struct bf_mprofile *p,
                       const struct bf_machine_rec *rec);
void bf_cycle_own_step(struct bf_cycle *c, int64_t now_ns);
/* True when instructions wait on ring COORD_IN or a reservation expired. */
bool bf_cycle_own_due(const struct bf_cycle *c, int64_t now_ns);
int bf_cycle_feed_needs(struct bf_cycle *c, struct bf_cycle_report *rep);
/* emit.c */
void bf_cycle_enqueue(struct bf_cycle *c, const struct bf_engine_result *r,
                      struct bf_cycle_report *rep, int64_t now_ns);
void bf_cycle_publish(struct bf_cycle *c, const struct bf_engine_result *r, int64_t now_ns,
                      const struct bf_cycle_report *rep);
uint32_t bf_cycle_profile_ref(struct bf_cycle *c, const char *fingerprint,
                              const struct bf_need_profile *p);
int bf_cycle_fpmap_put(struct bf_cycle *c, const char *fingerprint, uint32_t ref); /* 0, -ENOMEM */
/* u32 set: true if key was absent (and is now present); false if present or
 * out of memory (the caller then just repeats its work next time) */
bool bf_cycle_u32set_add(struct u32set *s, uint32_t key);
void bf_cycle_caches_free(struct bf_cycle *c);

#endif
