/*
 * sim_internal.h — private to src/simprovider (and its unit tests): the
 * in-memory layout of struct bf_sim and the helpers its files share.
 *
 * Layout (memory-lean for ~1M machines):
 *   - machines: an array of 40-byte records; strings are interned indices
 *     (ids, clusters, last errors, zones, racks, shard ids), shard_metadata is
 *     a content-interned, reference-counted blob, operation ids live in a
 *     side table only for machines that were ever driven;
 *   - the machine id is entry i+1 of the `ids` string pool;
 *   - revisions: the pool built at open is a "base region" whose untouched
 *     machine i carries mod_rev = base_rev + i; every later mutation takes a
 *     fresh revision and appends (rev, idx) to a log, so the pool in revision
 *     order is the base region followed by the live log entries, a delta since
 *     r is a suffix of that sequence, and an entry is live iff it carries the
 *     machine's current mod_rev;
 *   - a binary min-heap of scheduled completions;
 *   - dirty lists of machines and fences for write-through persistence.
 */
#ifndef BF_SIM_INTERNAL_H
#define BF_SIM_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "bigfleet/hmap.h"
#include "bigfleet/model.h"
#include "bigfleet/pbwire.h"
#include "bigfleet/simprovider.h"

/* ------------------------------------------------------------ growable bytes */

struct sim_buf {
    uint8_t *p;
    size_t len, cap;
};
/* Ensures room for `extra` more bytes. 0 or -ENOMEM. */
int bf_sim_buf_reserve(struct sim_buf *b, size_t extra);
void bf_sim_buf_free(struct sim_buf *b);

/* ------------------------------------------------------------ hash indexes */

/* The pools' indexes are the context variant of bigfleet/hmap.h: they hold
 * record indexes and reach each record's key through the pool (below). */
uint64_t bf_sim_hash(const void *p, size_t len); /* XXH3-64 (bf_hash_bytes) */
struct sim_bytes {
    const void *p;
    size_t len;
};
struct sim_strpool;
struct sim_mdpool;
struct bf_sim;
struct sim_fence_key {
    uint32_t shard, mref;
};
static inline uint64_t sim_str_hashid(const struct sim_strpool *sp, uint32_t i);
static inline bool sim_str_eq(const struct sim_strpool *sp, uint32_t i, struct sim_bytes k);
static inline uint64_t sim_md_hashid(const struct sim_mdpool *mp, uint32_t i);
static inline bool sim_md_eq(const struct sim_mdpool *mp, uint32_t i, struct sim_bytes k);
static inline uint64_t sim_fence_hashid(const struct bf_sim *s, uint32_t f);
static inline bool sim_fence_eq(const struct bf_sim *s, uint32_t f, struct sim_fence_key k);
BF_HMAP_DEFINE_CTX(sim_strix, struct sim_bytes, struct sim_strpool, sim_str_hashid, sim_str_eq)
BF_HMAP_DEFINE_CTX(sim_mdix, struct sim_bytes, struct sim_mdpool, sim_md_hashid, sim_md_eq)
BF_HMAP_DEFINE_CTX(sim_fenceix, struct sim_fence_key, struct bf_sim, sim_fence_hashid, sim_fence_eq)

/* ------------------------------------------------------------ string pools */

/* Interned byte strings; index 0 is the empty string. Entries are stored
 * NUL-terminated (the NUL is not part of the length). */
struct sim_strpool {
    struct sim_buf arena;
    uint32_t *off;
    uint32_t *len;
    size_t n, cap; /* n counts index 0 */
    struct sim_strix ix;
};
int bf_sim_strpool_init(struct sim_strpool *sp);
void bf_sim_strpool_free(struct sim_strpool *sp);
/* Index of (p, len), adding it if absent; 0 for len 0; UINT32_MAX on ENOMEM. */
uint32_t bf_sim_str_intern(struct sim_strpool *sp, const void *p, size_t len);
/* Room in the index for n strings without growing it. 0 or -ENOMEM. */
int bf_sim_str_reserve(struct sim_strpool *sp, size_t n);
/* Appends without checking for duplicates (caller guarantees uniqueness). */
uint32_t bf_sim_str_append(struct sim_strpool *sp, const void *p, size_t len);
/* Index or 0 if absent (len 0 -> 0). */
uint32_t bf_sim_str_find(const struct sim_strpool *sp, const void *p, size_t len);
static inline const char *sim_str(const struct sim_strpool *sp, uint32_t i)
{
    return (const char *)sp->arena.p + sp->off[i];
}
static inline uint32_t sim_strlen(const struct sim_strpool *sp, uint32_t i)
{
    return sp->len[i];
}
static inline uint64_t sim_str_hashid(const struct sim_strpool *sp, uint32_t i)
{
    return bf_hash_bytes(sp->arena.p + sp->off[i], sp->len[i]);
}
static inline bool sim_str_eq(const struct sim_strpool *sp, uint32_t i, struct sim_bytes k)
{
    return sp->len[i] == k.len && memcmp(sp->arena.p + sp->off[i], k.p, k.len) == 0;
}

/* ------------------------------------------------------------ shard_metadata */

/*
 * A canonical metadata map: entries sorted bytewise by key, duplicates
 * resolved last-wins. raw = repeated (u32 klen, key, u32 vlen, value) (native
 * endian); enc = the Machine.shard_metadata field-15 entries on the wire.
 */
struct sim_md {
    uint32_t refs; /* 0 = free slot */
    uint32_t n;
    uint64_t hash;
    uint8_t *raw;
    size_t raw_len;
    uint8_t *enc;
    size_t enc_len;
};
struct sim_mdpool {
    struct sim_md *v; /* v[0] unused: md index 0 = no metadata */
    size_t n, cap;
    uint32_t *freel;
    size_t nfree, freecap;
    struct sim_mdix ix;
};
static inline uint64_t sim_md_hashid(const struct sim_mdpool *mp, uint32_t i)
{
    return mp->v[i].hash;
}
static inline bool sim_md_eq(const struct sim_mdpool *mp, uint32_t i, struct sim_bytes k)
{
    const struct sim_md *m = &mp->v[i];
    return m->refs && m->raw_len == k.len && memcmp(m->raw, k.p, k.len) == 0;
}
int bf_sim_mdpool_init(struct sim_mdpool *mp);
void bf_sim_mdpool_free(struct sim_mdpool *mp);
/*
 * Interns a map given as entries (any order, duplicates allowed) and takes a
 * reference. Returns the md index (>= 1), 0 for an empty map, or UINT32_MAX
 * on ENOMEM.
 */
uint32_t bf_sim_md_intern(struct sim_mdpool *mp, const struct bf_sim_md_entry *e, size_t n);
/* Interns from a raw canonical blob (persistence). Same returns. */
uint32_t bf_sim_md_intern_raw(struct sim_mdpool *mp, const uint8_t *raw, size_t len);
void bf_sim_md_ref(struct sim_mdpool *mp, uint32_t i);
void bf_sim_md_unref(struct sim_mdpool *mp, uint32_t i);

/* ------------------------------------------------------------ catalog */

/* A type plus what the encoder precomputes. */
struct sim_type {
    struct bf_sim_type t;
    char cpu_q[24], mem_q[24], gpu_q[24], gpu_n[16];
    uint8_t *res_body; /* Resources message body (cpu, memory[, nvidia.com/gpu]) */
    size_t res_len;
};
/* Fills the quantity strings and the Resources body. 0 or -ENOMEM. */
int bf_sim_type_prepare(struct sim_type *st);
/* Copies n types, adds spot variants if asked, validates all and checks
 * names are unique. *out is malloc'd. 0, -EINVAL or -ENOMEM. */
int bf_sim_catalog_build(const struct bf_sim_type *in, size_t n, bool spot_variants,
                         struct bf_sim_type **out, size_t *n_out, char *err, size_t err_len);
/* Validates one type (ecosystem.md §2.2). 0 or -EINVAL with a message. */
int bf_sim_type_validate(const struct bf_sim_type *t, char *err, size_t err_len);

/* ------------------------------------------------------------ machines */

enum {
    SIM_F_HELD = 1,  /* counted by the host caps */
    SIM_F_DIRTY = 2, /* on the persistence dirty list */
};

struct sim_machine {
    uint16_t type;
    uint8_t state; /* enum bf_state */
    uint8_t flags;
    uint32_t rack;    /* index into racks (zone via rack_zone) */
    uint32_t cluster; /* clusters pool index, 0 = unbound */
    uint32_t md;      /* mdpool index, 0 = none */
    uint32_t err;     /* errors pool index, 0 = none */
    uint32_t ops;     /* ops slot + 1, 0 = none */
    uint64_t host;    /* host serial, 0 = no host */
    int64_t mod_rev;
};

struct sim_fence {
    uint32_t shard; /* shards pool index */
    uint32_t mref;  /* machine index, or SIM_GHOST_BIT | ghosts pool index */
    int64_t epoch, seq;
    uint64_t no; /* persistent key */
    uint8_t dirty;
};
#define SIM_GHOST_BIT 0x80000000u

struct sim_logent {
    int64_t rev;
    uint32_t idx;
};

enum sim_outcome { SIM_OUT_OK = 0, SIM_OUT_FAIL = 1, SIM_OUT_EXHAUSTED = 2 };

struct sim_timer {
    int64_t due;
    uint64_t seq;
    uint64_t op;
    uint32_t idx;
    uint8_t kind;
    uint8_t outcome;
};

struct sim_chunk {
    uint8_t *p;
    uint32_t len;
};

struct sim_store; /* store.c */

/* Pre-interned last_error messages (errors pool indices). */
struct sim_msgs {
    uint32_t fail[BF_SIM_KIND_COUNT];
    uint32_t restart[BF_SIM_KIND_COUNT];
    uint32_t spot;
    uint32_t *exhausted; /* per type */
};

struct bf_sim {
    struct bf_sim_config cfg;
    char provider[BF_SIM_NAME_MAX * 2];
    size_t provider_len;

    struct sim_type *types;
    struct bf_sim_type *pub_types; /* copy exposed by bf_sim_types() */
    size_t n_types;

    struct sim_strpool zones;
    struct sim_strpool racks;
    uint32_t *rack_zone; /* rack index -> zone index */
    size_t rack_zone_cap;

    struct sim_strpool ids; /* machine i = ids entry i + 1 */
    struct sim_machine *m;
    size_t n, cap;

    struct sim_strpool clusters, errors, shards, ghosts;
    struct sim_mdpool md;

    uint64_t (*ops)[BF_SIM_KIND_COUNT];
    size_t n_ops, cap_ops;

    struct sim_fence *fences;
    size_t n_fences, cap_fences;
    struct sim_fenceix fence_ix;
    uint64_t next_fence_no;

    /* revisions */
    int64_t rev;
    int64_t base_rev; /* first revision of the base region */
    size_t n_base;    /* machines in the base region */
    int64_t call_rev; /* rev at the start of the current public call */
    struct sim_logent *log;
    size_t n_log, cap_log, log_dead;

    /* timers */
    struct sim_timer *heap;
    size_t n_heap, cap_heap;
    uint64_t timer_seq;

    /* counters */
    uint64_t next_op;   /* last minted */
    uint64_t next_host; /* last minted */
    size_t count[BF_STATE_COUNT];
    uint32_t held;
    uint32_t *held_type;

    /* spot */
    int32_t *spot_pos; /* per machine, -1 = not eligible; NULL without SPOT types */
    uint32_t *spot_set;
    size_t n_spot;

    /* time */
    bool have_now;
    int64_t now;
    int64_t last_spot;

    uint64_t rng[4];

    /* encoder caches */
    struct sim_chunk *chunks;       /* [type * n_racks + rack], built lazily */
    size_t chunks_racks;            /* n_racks the array was sized for */
    struct sim_chunk *alloc_chunks; /* [type]: field 13 */

    /* persistence */
    struct sim_store *store;
    uint32_t *dirty;
    size_t n_dirty, cap_dirty;
    uint32_t *dirty_f;
    size_t n_dirty_f, cap_dirty_f;
    bool meta_dirty;
    bool dirty_all; /* a dirty list could not grow: write everything */

    struct sim_msgs msgs;

    struct bf_sim_stats stats;
};

/* the machine id of index i */
static inline const char *sim_mid(const struct bf_sim *s, uint32_t i)
{
    return sim_str(&s->ids, i + 1);
}
static inline uint32_t sim_midlen(const struct bf_sim *s, uint32_t i)
{
    return sim_strlen(&s->ids, i + 1);
}
/* machine index by id, or UINT32_MAX */
uint32_t bf_sim_find_machine(const struct bf_sim *s, const void *id, size_t len);

/* ------------------------------------------------------------ pool.c (used by sim.c and store.c)
 */

#define SIM_MAX_MACHINES (1u << 26)

/* Appends a machine (id unique) with no mutation bookkeeping. Returns the
 * index or UINT32_MAX on ENOMEM. */
uint32_t bf_sim_add_machine(struct bf_sim *s, const char *id, size_t id_len, uint16_t type,
                            uint32_t rack, uint8_t state);
/* Interns zone / rack names (rack belongs to zone). UINT32_MAX on ENOMEM. */
uint32_t bf_sim_zone(struct bf_sim *s, const char *name, size_t len);
uint32_t bf_sim_rack(struct bf_sim *s, uint32_t zone, const char *name, size_t len);
/* Ensures machine i has an ops slot. 0 or -ENOMEM. */
int bf_sim_ops_slot(struct bf_sim *s, uint32_t i);
/* Adds/updates a fence entry (no dirty marking). Index or UINT32_MAX. */
uint32_t bf_sim_fence_put(struct bf_sim *s, uint32_t shard, uint32_t mref, int64_t epoch,
                          int64_t seq, uint64_t no);
/* Puts machine i on the dirty set store.c writes at the end of the batch
 * (no-op without a store; on ENOMEM the next flush writes every machine). */
void bf_sim_mark_dirty(struct bf_sim *s, uint32_t i);
/* The same for fence f (and the metadata record). */
void bf_sim_fence_mark_dirty(struct bf_sim *s, uint32_t f);
/* Fence index of (shard, mref), or UINT32_MAX. */
uint32_t bf_sim_fence_find(const struct bf_sim *s, uint32_t shard, uint32_t mref);
/* Catalog index of the machine type called name, or UINT32_MAX. */
uint32_t bf_sim_type_by_name(const struct bf_sim *s, const char *name, size_t len);
/* Machine arrays (and the spot set's) grown to hold want. 0 or -ENOMEM. */
int bf_sim_grow_machines(struct bf_sim *s, size_t want);
/* Keeps machine i's membership of the spot set (spot-interruption
 * candidates: spot capacity, Idle or Configured) in step with its state. */
void bf_sim_spot_update(struct bf_sim *s, uint32_t i);

/* SplitMix64 step (seeds the RNG; hashes fence keys). */
static inline uint64_t sim_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* the fence index's key: (shard, machine reference) */
static inline uint64_t sim_fence_hash(uint32_t shard, uint32_t mref)
{
    uint64_t x = ((uint64_t)shard << 32 | mref) + 0x9e3779b97f4a7c15ULL;
    return sim_splitmix64(&x);
}
static inline uint64_t sim_fence_hashid(const struct bf_sim *s, uint32_t f)
{
    return sim_fence_hash(s->fences[f].shard, s->fences[f].mref);
}
static inline bool sim_fence_eq(const struct bf_sim *s, uint32_t f, struct sim_fence_key k)
{
    return s->fences[f].shard == k.shard && s->fences[f].mref == k.mref;
}

/* ------------------------------------------------------------ wire.c */

/* Request decoders (byte-exact, borrow from the input) on the protobuf wire
 * reader (bigfleet/pbwire.h). 0, -EBADMSG (malformed), or -ENOMEM
 * (bf_sim_decode_lifecycle's metadata array). */
int bf_sim_decode_lifecycle(int kind, const uint8_t *p, size_t len, struct bf_sim_request *q,
                            struct bf_sim_md_entry **md_out);
int bf_sim_decode_ref(const uint8_t *p, size_t len, struct bf_sim_bytes *id);
int bf_sim_decode_list(const uint8_t *p, size_t len, struct bf_sim_list_args *a);

/* Encoders. Machine i's full encoded size and bytes (no outer tag). */
size_t bf_sim_machine_size(struct bf_sim *s, uint32_t i);
uint8_t *bf_sim_machine_write(struct bf_sim *s, uint32_t i, uint8_t *p);
/* Builds the metadata wire entries for an md record. 0 or -ENOMEM. */
int bf_sim_md_encode(struct sim_md *md);
/* Ensures the static chunks exist for (type, rack). 0 or -ENOMEM. */
int bf_sim_chunks_ensure(struct bf_sim *s, uint32_t type, uint32_t rack);
void bf_sim_chunks_free(struct bf_sim *s);

/*
 * A protobuf-c Machine for machine i (reference encoder, tests and tools):
 * every pointer is into *arena-owned memory allocated with malloc; free with
 * bf_sim_machine_pb_free().
 */
struct sim_pb_machine;
struct sim_pb_machine *bf_sim_machine_pb(struct bf_sim *s, uint32_t i);
Bigfleet__V1alpha1__Machine *bf_sim_machine_pb_msg(struct sim_pb_machine *pm);
void bf_sim_machine_pb_free(struct sim_pb_machine *pm);

/* ------------------------------------------------------------ store.c */

int bf_sim_store_open(struct bf_sim *s, char *err, size_t err_len);
/* Loads machines/fences/meta. Returns the number of machines loaded (>= 0)
 * or a negative errno. */
long bf_sim_store_load(struct bf_sim *s, char *err, size_t err_len);
/* Writes the dirty set in one transaction. 0 or -EIO. */
int bf_sim_store_flush(struct bf_sim *s);
void bf_sim_store_close(struct bf_sim *s);

/* ------------------------------------------------------------ small shared utilities */

/* Labels and names used by the catalog and the encoder. */
void bf_sim_zone_default_name(uint32_t z, char *buf, size_t n);
const char *bf_sim_kind_lower(int kind); /* "create", ... */

#endif /* BF_SIM_INTERNAL_H */
