/*
 * cycle_internal.h — private state of the cycle controller (src/cycle/).
 */
#ifndef BF_CYCLE_INTERNAL_H
#define BF_CYCLE_INTERNAL_H

#include <stdint.h>

#include "bigfleet/blobs.h"
#include "bigfleet/cycle.h"
#include "bigfleet/engine.h"
#include "bigfleet/shm.h"

/* What the mirror holds for each slot (for incremental counts and ids). */
struct slotinfo {
    uint32_t id_ref;
    uint8_t present; /* 1 = in the engine mirror */
    uint8_t state;
    uint8_t ct;
    uint8_t ipb;
    uint16_t type_idx;
    uint16_t zone_idx;
};

/* Per cluster row: what the engine has. */
struct clusterinfo {
    uint64_t generation;
    uint32_t session_epoch;
    uint32_t rows;
    uint8_t known;
    uint8_t first_rollup;
    uint8_t connected;
    uint32_t bucket_rows[BF_BUCKET_COUNT];
};

/* string -> ref map for fingerprints (profile refs) */
struct fpmap_entry {
    uint64_t hash;
    const char *key; /* owned copy */
    uint32_t profile_ref;
};
struct fpmap {
    struct fpmap_entry *e;
    uint32_t cap, n;
};

/* profile ref -> engine label array */
struct labelcache_entry {
    uint32_t ref;
    uint32_t n;
    struct bf_engine_label *labels;
};
struct labelcache {
    struct labelcache_entry *e;
    uint32_t cap, n;
};

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
    struct labelcache labels;
    /* dirty slots whose record was busy: retried next cycle */
    uint32_t *retry;
    uint32_t n_retry, cap_retry;
    bool need_rescan;
    uint64_t needs_counter_seen;
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
};

/* feed.c */
int bf_cycle_feed_mirror(struct bf_cycle *c, struct bf_cycle_report *rep);
int bf_cycle_feed_needs(struct bf_cycle *c, struct bf_cycle_report *rep);
/* emit.c */
void bf_cycle_enqueue(struct bf_cycle *c, const struct bf_engine_result *r,
                      struct bf_cycle_report *rep, int64_t now_ns);
void bf_cycle_publish(struct bf_cycle *c, const struct bf_engine_result *r, int64_t now_ns,
                      const struct bf_cycle_report *rep);
uint32_t bf_cycle_profile_ref(struct bf_cycle *c, const char *fingerprint,
                              const struct bf_need_profile *p);
void bf_cycle_fpmap_put(struct bf_cycle *c, const char *fingerprint, uint32_t ref);

#endif
