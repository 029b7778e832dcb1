/*
 * engine_internal.h — private structures of the decision engine (src/cycle/engine).
 *
 * The mirror in one paragraph. Machines that are interchangeable for every
 * decision share a *class* (instance type, zone, label set, allocatable) and,
 * within a class, a *leaf*: the full tuple of fields any phase reads (state,
 * class, capacity type, price, probability, and for bound states the cluster,
 * assigned priority, both buckets, fingerprint and group; fields a state never
 * uses are normalised to 0 so they do not split leaves). A leaf holds its
 * machines as a slot list sorted by machine id. Every ordering the engine
 * needs (price then id, effective cost then id, keep-priority then id, victim
 * score then id, id) is therefore a k-way merge of leaves by (leaf key, id),
 * and every per-machine predicate (MatchProfile, MinUnit, Same/spread domain,
 * gang ownership) is a per-leaf predicate. Because every walk visits a leaf's
 * machines in id order and claims each eligible unclaimed machine it meets,
 * the claimed part of a leaf is always a prefix: a cycle's claims, Phase 2
 * picks and virtual consumption are three per-leaf counters, and credit is
 * arithmetic on (available x allocatable) per leaf. See docs/engine.md.
 */
#ifndef BF_ENGINE_INTERNAL_H
#define BF_ENGINE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bigfleet/engine.h"
#include "bigfleet/hmap.h"

#define NONE32 UINT32_MAX

/* returns the error of a call that failed (a non-zero int) */
#define TRY(x)                                                                                     \
    do {                                                                                           \
        int rc_ = (x);                                                                             \
        if (rc_)                                                                                   \
            return rc_;                                                                            \
    } while (0)

/* ------------------------------------------------------------------ memory */

/* Grows *p (elements of elsz bytes) to hold at least `need`; 0 or -ENOMEM. */
/* The size, and alignment, from which an array is "big": its own 2 MiB-aligned
 * block, advised per bf_engine_set_huge_pages (bfe_grow here, big_alloc in
 * mirror.c, bf_engine_advise_pages). bfe_huge_round: n rounded up to it. */
#define BFE_HUGE_PAGE ((size_t)2 << 20)
static inline size_t bfe_huge_round(size_t n)
{
    return (n + BFE_HUGE_PAGE - 1) & ~(BFE_HUGE_PAGE - 1);
}

int bfe_grow(void **p, uint32_t *cap, uint32_t need, size_t elsz);
#define GROW(ptr, cap, need) bfe_grow((void **)&(ptr), &(cap), (need), sizeof(*(ptr)))

/* Per-cycle bump arena: blocks are kept across resets, so a steady-state
 * cycle allocates nothing from the heap. */
struct arena_block {
    struct arena_block *next;
    size_t size, used;
    _Alignas(16) unsigned char mem[];
};
struct arena {
    struct arena_block *head, *cur;
    size_t bytes;
};
void *bfe_arena_alloc(struct arena *a, size_t n); /* 16-byte aligned, NULL on ENOMEM */
void bfe_arena_reset(struct arena *a);
void bfe_arena_free(struct arena *a);
/* Stack discipline inside a cycle: release frees everything allocated since mark. */
struct arena_mark {
    struct arena_block *b;
    size_t used;
};
static inline struct arena_mark bfe_arena_mark(const struct arena *a)
{
    struct arena_mark m = {a->cur, a->cur ? a->cur->used : 0};
    return m;
}
static inline void bfe_arena_release(struct arena *a, struct arena_mark m)
{
    if (m.b) {
        a->cur = m.b;
        m.b->used = m.used;
    } else {
        bfe_arena_reset(a);
    }
}
#define ANEW(a, T, n) ((T *)bfe_arena_alloc((a), sizeof(T) * (size_t)(n)))

#include <time.h>
static inline int64_t bfe_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* qsort that accepts n < 2 with any pointer (qsort(NULL, 0, ...) is UB) */
#include <stdlib.h>
static inline void bfe_qsort(void *base, size_t n, size_t sz,
                             int (*cmp)(const void *, const void *))
{
    if (n > 1)
        qsort(base, n, sz, cmp);
}

/* Sorts base[0..n) by cmp (a total order: the result is the sorted array)
 * in O(n + m log m) when all but the last m elements are already in order,
 * as the normalized demand is (snapshot rows, then NormalizeDemand's folds).
 * scratch holds n elements. */
void bfe_sort_tail(void *base, size_t n, size_t sz, int (*cmp)(const void *, const void *),
                   void *scratch);

/* ------------------------------------------------------------------ hashing */

uint64_t bfe_hash_bytes(const void *p, size_t n, uint64_t seed);
static inline uint64_t bfe_mix64(uint64_t x)
{
    return bf_hash_u64(x); /* fmix64, bigfleet/hmap.h */
}

/* u64 -> u32 map (bigfleet/hmap.h): string ids, fingerprints and packed keys
 * to indexes; bfe_u64map_get(m, key, NONE32) for "absent". */
BF_HMAP_DEFINE(bfe_u64map, uint64_t, uint32_t, bf_hash_u64, BF_HMAP_EQ)

/* Id table: the context variant of bigfleet/hmap.h over object ids whose hash
 * and equality are provided by callbacks (class, leaf, label-set and string
 * tables); the callbacks and their argument travel in a struct idtab_ctx. */
typedef uint64_t (*idtab_hash_fn)(const void *ctx, uint32_t id);
typedef bool (*idtab_eq_fn)(const void *ctx, uint32_t id, const void *key);
struct idtab_ctx {
    idtab_hash_fn hf; /* NULL for lookups (not needed) */
    const void *arg;
};
struct idtab_key {
    idtab_eq_fn eq;
    const void *key;
};
#define IDTAB_HASHID(c, id) ((c)->hf((c)->arg, (id)))
#define IDTAB_EQ(c, id, k)  ((k).eq((c)->arg, (id), (k).key))
BF_HMAP_DEFINE_CTX(idtab, struct idtab_key, struct idtab_ctx, IDTAB_HASHID, IDTAB_EQ)

/* NONE32 when absent */
static inline uint32_t bfe_idtab_find(const struct idtab *t, uint64_t h, idtab_eq_fn eq,
                                      const void *ctx, const void *key)
{
    struct idtab_ctx c = {NULL, ctx};
    return idtab_find(t, h, &c, (struct idtab_key){eq, key});
}
/* 0 or -ENOMEM (the table unchanged) */
static inline int bfe_idtab_insert(struct idtab *t, uint64_t h, uint32_t id, idtab_hash_fn hf,
                                   const void *ctx)
{
    struct idtab_ctx c = {hf, ctx};
    return idtab_add(t, h, id, &c);
}
static inline void bfe_idtab_remove(struct idtab *t, uint64_t h, uint32_t id, idtab_hash_fn hf,
                                    const void *ctx)
{
    struct idtab_ctx c = {hf, ctx};
    idtab_remove(t, h, id, &c);
}
static inline void bfe_idtab_free(struct idtab *t)
{
    idtab_free(t);
}

/* ------------------------------------------------------------------ strings */

/* Interned byte strings, refcounted. Id 0 is the empty string (never freed).
 * A string whose count drops to 0 is freed only by bfe_intern_gc() (run at
 * the start of each cycle), so pointers handed out stay valid until then. */
struct istr {
    uint64_t hash;
    uint32_t len, refs;
    char s[]; /* NUL-terminated copy */
};
struct interner {
    struct istr **v;
    uint32_t n, cap;
    uint32_t *freeids;
    uint32_t nfree, capfree;
    uint32_t *zero; /* ids whose refs reached 0 (maybe re-referenced since) */
    uint32_t nzero, capzero;
    struct idtab tab;
    size_t bytes;
};
int bfe_intern_init(struct interner *in);
void bfe_intern_free(struct interner *in);
/* Returns the id with one more reference, or NONE32 on ENOMEM. */
uint32_t bfe_intern(struct interner *in, const void *s, size_t len);
/* Returns the id of an existing string (no reference taken) or NONE32. */
uint32_t bfe_intern_find(const struct interner *in, const void *s, size_t len);
void bfe_intern_retain(struct interner *in, uint32_t id);
void bfe_intern_release(struct interner *in, uint32_t id);
void bfe_intern_gc(struct interner *in);
static inline const char *bfe_str(const struct interner *in, uint32_t id)
{
    return in->v[id]->s;
}
static inline uint32_t bfe_strlen(const struct interner *in, uint32_t id)
{
    return in->v[id]->len;
}
int bfe_strcmp_id(const struct interner *in, uint32_t a, uint32_t b);

/* ------------------------------------------------------------------ slot lists */

/* A sorted list of slots (chunked; at most SL_CHUNK slots per chunk). */
#define SL_CHUNK 256
struct slchunk {
    uint32_t n, cap;
    uint32_t s[];
};
struct slotlist {
    uint32_t n, nch, capch;
    struct slchunk **ch;
};
typedef int (*sl_cmp_fn)(const void *ctx, uint32_t a, uint32_t b);
int bfe_sl_insert(struct slotlist *l, uint32_t slot, sl_cmp_fn cmp, const void *ctx);
int bfe_sl_remove(struct slotlist *l, uint32_t slot, sl_cmp_fn cmp, const void *ctx);
/* removes the entry at offset p of chunk ci (frees an emptied chunk) */
void bfe_sl_remove_at(struct slotlist *l, uint32_t ci, uint32_t p);
uint32_t bfe_sl_rank(const struct slotlist *l, uint32_t slot, sl_cmp_fn cmp, const void *ctx);
void bfe_sl_seek(const struct slotlist *l, uint32_t pos, uint32_t *ci, uint32_t *off);
void bfe_sl_free(struct slotlist *l);
static inline uint32_t bfe_sl_at(const struct slotlist *l, uint32_t ci, uint32_t off)
{
    return l->ch[ci]->s[off];
}
static inline void bfe_sl_step(const struct slotlist *l, uint32_t *ci, uint32_t *off)
{
    if (++*off >= l->ch[*ci]->n) {
        ++*ci;
        *off = 0;
    }
}

/* ------------------------------------------------------------------ mirror */

struct labelset {
    uint64_t hash;
    uint32_t n, refs; /* refs = classes using it; 0 => slot free */
    uint32_t *kv;     /* key id, value id pairs sorted by key id */
};

struct mclass {
    uint64_t hash;
    uint32_t itype, zone, lset; /* string ids (0 = none); lset NONE32 = no labels */
    uint32_t refs;              /* leaves referencing it; 0 => free */
    uint32_t gen;               /* bumped when the id is recycled */
    uint32_t type_pos, all_pos; /* positions in e->type_classes / e->all_classes */
    bf_vec alloc;
    uint32_t count[BF_STATE_COUNT]; /* eligible machines per state */
    /* per cycle (stamp) */
    uint32_t cstamp;
    uint32_t consumed[2]; /* virtual consumption (Same pre-pass): Idle, Speculative */
};

/* leaf list kinds a leaf may belong to */
enum { LL_STATE = 0, LL_TYPE = 1, LL_CLUSTER = 2, LL_EXTRA = 3, LL_N = 4 };

struct leafkey {
    uint8_t state, ct, ipb, rpb;
    uint32_t cls;
    int32_t prio;
    uint32_t cluster, fp, group; /* string ids (0 = none) */
    double price, prob;
};

/* Field order matters: the scans read the per-cycle counters, the slot count,
 * the reclamation dollars and the key's head (state, class) first, so a leaf
 * rejected by a scan costs one cache line. */
struct leaf {
    /* per cycle (stamp) */
    uint32_t stamp;
    uint32_t taken;    /* Phase 1 claimed prefix (leaves outside cluster lists) */
    uint32_t consumed; /* virtual consumption prefix (Same pre-pass rider) */
    uint32_t p2taken;  /* Phase 2 victims prefix */
    /* Phase 1 credit claimed prefix of a leaf in a cluster list (Configured or
     * Configuring with a cluster): kept across cycles by the incremental
     * pre-pass (credit.c), valid while cepoch equals the cluster's epoch */
    uint32_t ctaken;
    uint32_t cluster_idx; /* index in e->clusters, NONE32 */
    uint64_t cepoch;
    struct slotlist sl;
    double rp_dollars;
    struct leafkey k;
    double ip_dollars;
    uint64_t hash;
    uint32_t runs;       /* first claim run (index into e->runs) or NONE32 */
    uint32_t list[LL_N]; /* list ids or NONE32 */
    uint32_t pos[LL_N];  /* position in each list */
    bool live;
    uint32_t serial; /* distinct for every leaf created (the resolve memo's check) */
};

struct leaflist {
    uint32_t *v;
    uint32_t n, cap;
    /* bumped when a leaf joins or leaves, and (cluster lists) when a leaf's
     * machines change: the incremental pre-pass compares it */
    uint64_t ver;
    /* incremental pre-pass, per cycle (fstamp): the list's credit claims were
     * rolled back to be re-derived, or differ from the previous cycle's */
    uint32_t fstamp;
    bool rolled, diverged;
};

/* leaf list keys (e->list_map) */
#define LK_STATE(s)   ((1ULL << 56) | (uint64_t)(s))
#define LK_TYPE(s, t) ((2ULL << 56) | ((uint64_t)(s) << 32) | (t))
/* (state, cluster index < 2^20, instance type string id) */
#define LK_CLUSTER(s, c, t) ((3ULL << 56) | ((uint64_t)(s) << 52) | ((uint64_t)(c) << 32) | (t))
#define BF_MAX_CLUSTERS     (1u << 20)
#define LK_CFP(fp)          ((4ULL << 56) | (fp))
#define LK_PRIO(p)          ((5ULL << 56) | (uint32_t)(p))

/* A leaf considered by a walk: its unclaimed count and sort keys. */
struct cand {
    uint32_t leaf;
    uint32_t avail;
    uint32_t dom; /* domain value (string id) or NONE32 */
    uint8_t part; /* build-order segment */
    bool own;
    double k1, k2;
};

/* ------------------------------------------------------------------ demand */

enum { RK_LABEL = 0, RK_ITYPE = 1, RK_ZONE = 2 };

struct creq {
    uint8_t op, kind;
    uint32_t key; /* string id */
    uint32_t nv;
    uint32_t *vals; /* string ids, sorted by id */
};

/* A compiled profile, shared by every Need with the same fingerprint. */
struct cprof {
    uint64_t serial; /* unique per compiled profile ever made (never reused, unlike the address) */
    uint32_t fp;     /* string id (retained) */
    uint32_t refs;   /* needs + stripped-from + ledgers */
    uint32_t idx;    /* index in e->cprofs */
    int32_t prio;
    uint8_t ipb, rpb;
    double ip_dollars;
    uint32_t nreq;
    struct creq *req;
    bool has_same;
    uint8_t same_kind;
    uint32_t same_key; /* key string id of the first Same requirement */
    bool strict_spread;
    uint8_t spread_kind;
    uint32_t spread_key;
    int32_t skew; /* max(1, MaxSkew) */
    bool pinned;
    uint32_t npin;
    uint32_t *pin;               /* instance-type string ids, sorted by string, deduplicated */
    struct bf_need_profile prof; /* canonical copy (owned) */
    void *prof_mem;
    bool fp_computed; /* fp is bf_profile_fingerprint(&prof), computed here (not a caller's) */
    struct cprof *stripped; /* NormalizeDemand: Same removed (lazily, retained) */
    /* per class: (gen << 2) | 1 (no match) | 3 (match); 0 unknown */
    uint32_t *mcache;
    uint32_t mcap;
    /* per cycle */
    uint32_t stamp;
    uint32_t *pool_v[2]; /* matching Idle / Speculative leaves (cycle arena) */
    uint32_t pool_n[2];
    bool pool_built[2];
    /* AvailableCapacity figures of this cycle */
    uint32_t ac_stamp;
    uint32_t ac_idle, ac_spec;
    double ac_cost;
    /* its entry's index in e->shortl when last seen (a hint: checked
     * against the entry's fingerprint before use; any value is safe) */
    uint32_t short_i;
    /* ac_profiles' mark (the pass that listed it last) and its e->ac entry
     * when last seen (a hint: checked against the entry's pair) */
    uint64_t acl_mark;
    uint32_t ac_i;
};

struct snapkey {
    int32_t prio;
    uint32_t rank;
    int64_t arrival;
    uint64_t ref; /* (cluster << 32) | need */
};

/* a NormalizeDemand fold class of one cluster (cached per cluster) */
struct fold_group {
    struct cprof *stripped; /* owned through the members' cp->stripped */
    const char *fps;        /* its fingerprint (the ordering key) */
    bf_vec agg;             /* one member's aggregate */
    uint32_t members;
    int64_t arrival; /* earliest non-zero member arrival */
    char *aggkey;    /* "name=milli;" ordering key (malloc'd) */
};

/* A held Need row. Inputs: cp, agg, minu, arrival, group (bf_engine_set_needs_arrival
 * rebuilds a row from exactly these, every other field zeroed: a new input
 * field must be carried there too). */
struct need_in {
    struct cprof *cp;
    bf_vec agg, minu;
    int64_t arrival;
    uint32_t group; /* string id (retained) */
    /* NormalizeDemand memo across cycles: valid while both versions hold */
    bool fold_known, fold;
    uint64_t fold_vs, fold_vc;
};

struct ac_entry {
    uint32_t cluster, fp; /* string ids (retained) */
    int32_t count;
    uint8_t conf;
    double cost;
    int64_t last_ns;
    uint32_t seen;
    bool used;
};

/* ------------------------------------------------------------------ incremental credit */

/*
 * The credit pre-pass memo (credit.c). One per cluster: the outcome of each of
 * the cluster's normalized Needs in the pre-pass (in the cluster's pre-pass
 * order) and everything that outcome was derived from outside the cluster's
 * own Configured/Configuring leaves, so that a later cycle can prove the
 * outcome unchanged and keep it instead of deriving it again.
 */
struct crun { /* a credit claim on a cluster leaf: positions [start, start + count) */
    uint32_t leaf, start, count;
};
struct cons_ent { /* virtual consumption of an Idle/Speculative leaf */
    uint32_t leaf, n;
};
struct cdep { /* acquirable supply version of an instance type (NONE32: all types) */
    uint32_t itype;
    uint64_t ver;
};
struct lver { /* a cluster list and its version */
    uint32_t list;
    uint64_t ver;
};
struct cbk { /* a Same Need's creditable supply in one domain */
    uint32_t value, count;
    bf_vec total;
    /* bfe_rank_key_of's cred and own of the creditable bucket against the
     * Need's aggregate: neither reads the acquirable supply, so a re-rank
     * (same cluster demand, so the same aggregate) takes them as recorded */
    double cred, own;
};

struct prow {
    bf_vec rem;          /* the deficit after the pre-pass */
    uint32_t claimed;    /* credit claims */
    uint32_t ccount[2];  /* of which on Configured / Configuring cluster leaves */
    uint32_t domain;     /* Same: the chosen domain (string id, retained) */
    uint32_t run0, nrun; /* claims (pmemo.runs), in claim order */
    uint32_t ev0, nev;   /* virtual consumption (pmemo.ev) */
    uint32_t dep0, ndep; /* Same: acquirable supply versions read (pmemo.dep) */
    uint32_t cv0, ncv;   /* Same: the consumption this Need saw (pmemo.cv) */
    uint32_t l0, nl;     /* the cluster lists it read (pmemo.lists) */
    uint32_t cand0, ncand;
    uint32_t cb0, ncb; /* Same: creditable buckets (pmemo.cb), for re-ranking */
    uint32_t dindex;   /* normalized-demand index in the current cycle */
    bool has_domain, same_sat, parked;
    bool reach_creat; /* read the Creating list of its fingerprint */
    bool creat_busy;  /* ... and it was not empty: Creating leaves are credited to any
                         cluster demanding the fingerprint, so the row is derived
                         again every cycle while they exist */
};

/* the inputs a row's derivation reads from its own normalized Need
 * (phase1.c's prepass_need: the compiled profile, aggregate, MinUnit and
 * group; the parking flag is in the row) */
struct rkey {
    uint64_t serial; /* cprof.serial */
    uint32_t group;  /* string id (retained by the memo) */
    bf_vec agg, minu;
};

struct pmemo {
    bool valid;
    uint64_t dver, cver; /* the cluster's versions it was derived at */
    struct lver *lv;     /* the cluster lists' versions it was derived at */
    uint32_t nlv, caplv;
    uint32_t tot[2]; /* credit claims on Configured / Configuring leaves */
    struct prow *rows;
    uint32_t nrows, caprows;
    struct crun *runs;
    uint32_t nruns, capruns;
    struct cons_ent *ev;
    uint32_t nev, capev;
    struct cdep *dep;
    uint32_t ndep, capdep;
    struct cons_ent *cv;
    uint32_t ncv, capcv;
    uint32_t *lists;
    uint32_t nlists, caplists;
    struct bf_engine_domain_coverage *cands; /* same_candidates, domains retained */
    uint32_t *cand_ids;
    uint32_t ncands, capcands, capcand_ids;
    struct cbk *cb;
    uint32_t ncb, capcb;
    struct rkey *keys; /* per row (parallel to rows) */
    uint32_t capkeys;
    uint32_t waste; /* entries no row refers to any more (rows re-ranked in place) */
};

enum { PM_FRESH = 0, PM_REPLAY = 1, PM_PARTIAL = 2 };

struct cluster {
    uint32_t name; /* string id (retained) */
    bool first_rollup, session_live;
    bool has_gen;
    uint64_t generation;
    struct need_in *needs;
    uint32_t n_needs;
    uint8_t *fold;       /* needs[i].fold, contiguous: NormalizeDemand's pass-through
                            loop reads this instead of every Need's row */
    uint32_t conf_count; /* eligible Configured machines bound here */
    /* leaf lists of the cluster's Configured (0) and Configuring (1) machines,
     * one per instance type (type 0: no InstanceType, label only) */
    uint32_t *tl[2];
    uint32_t ntl[2], captl[2];
    bool snap_changed;       /* demand or a fold decision changed since the last snapshot order */
    uint32_t n_pass_through; /* its pass-through Needs (fold[i] == 0) in the snapshot order */
    uint64_t supply_ver;     /* bumped when a leaf joins or leaves tl[] lists */
    /* NormalizeDemand fold groups, valid while demand and both versions hold */
    struct fold_group *fg;
    uint32_t nfg, capfg;
    bool fg_valid;
    uint64_t fg_vs, fg_vc;
    uint32_t n_same; /* Needs carrying Same */
    /* its distinct compiled profiles, first-named first (AvailableCapacity) */
    struct cprof **acl;
    uint32_t *acl_ac; /* per acl entry: its index in e->ac when last seen (checked) */
    uint32_t nacl, capacl, capacl_ac;
    bool acl_valid;
    uint32_t rank; /* position in name order */
    /* incremental pre-pass (credit.c) */
    uint64_t dver; /* bumped when the cluster's normalized demand may have changed */
    uint64_t cver; /* bumped when a list joins the cluster lists (leaflist.ver: a list's leaves) */
    uint64_t cepoch;    /* leaves' ctaken is valid while their cepoch equals this */
    struct pmemo pm[2]; /* pm[pcur]: the memo; the other: built during a cycle */
    uint8_t pcur;
    uint8_t pmode;      /* PM_* this cycle */
    bool lists_reset;   /* some of its lists changed since the memo (this cycle) */
    bool dkeys;         /* its demand moved since the memo, its row count did not: each
                           row is replayed only while its Need's key (rkey) is the one
                           it was derived for (this cycle) */
    uint32_t pstamp;    /* cycle stamp of pmode/prow_next/nrows_now */
    uint32_t prow_next; /* next pre-pass row this cycle */
    uint32_t nrows_now; /* normalized Needs this cycle */
    uint32_t rstamp;    /* cycle stamp: its credit claims are on its leaves' runs */
    uint32_t dvstamp;   /* cycle stamp: one of its lists is diverged this cycle (a
                           kept row checks its lists only then) */
    /* allocated lengths of needs and fold (demand.c keeps them across rollups) */
    uint32_t cap_needs, cap_fold;
};

/* One row of normalized demand (D) with its per-cycle working state. Field
 * order matters: every per-cycle pass over D (parking, the pre-pass order,
 * the worker and barrier filters, the verdicts) reads the scalars at the
 * head, and most read the deficit next to them, so a row costs a line or
 * two per pass; the vectors only some phases read come last. */
struct dneed {
    struct cprof *cp;
    uint32_t cluster; /* cluster index */
    uint32_t group;   /* string id */
    uint32_t folded;  /* members when folded (0 = pass-through) */
    uint32_t park_age;
    bool parked;
    /* Phase 1 */
    bool has_domain, same_sat;
    uint32_t claimed, nboot, nprov;
    uint32_t picks; /* head of the pick list (index into e->picks) */
    uint32_t picks_tail;
    uint32_t domain; /* string id */
    uint32_t ncand;
    /* Phase 2 */
    uint32_t unresolved; /* index into unresolved list or NONE32 */
    uint32_t victims;
    bf_vec rem;
    bf_vec agg, minu;
    int64_t arrival;
    struct bf_engine_domain_coverage *cands; /* same_candidates (cycle arena) */
    uint32_t *cand_vals;                     /* their domains' string ids (cycle arena) */
    bf_vec freed;
    bf_vec p2rem; /* Phase 2 working deficit (rem stays Phase 1's) */
};

struct pick {
    uint32_t slot, next;
    uint8_t state;
};

struct run {
    uint32_t start, count, need, next;
};

struct park_entry {
    uint32_t cluster, group, fp; /* retained string ids */
    uint32_t age;
    uint32_t seen;
    bool used;
};

struct short_entry {
    uint32_t fp;      /* retained */
    struct cprof *cp; /* retained */
    bf_vec deficit;
    uint32_t age;
    uint32_t seen;
    bool used;
};

/* Recent upserts' leaf-determining inputs, serialized, and the leaf they
 * resolved to (mirror.c "resolve memo"): direct-mapped by key hash. */
#define RMEMO_SLOTS 512
#define RMEMO_BYTES 488
struct rmemo_entry {
    uint64_t hash;
    uint32_t leaf;   /* valid while leaves[leaf] is live with this serial */
    uint32_t serial; /* 0 = empty */
    uint32_t len;
    uint8_t key[RMEMO_BYTES];
};

/* the engine */
struct bf_engine {
    struct bf_engine_config cfg;
    struct bf_dims dims;
    bool have_dims;
    struct interner in;

    /* well-known string ids (retained forever) */
    uint32_t s_itype_key, s_zone_key;

    /* per slot */
    uint32_t cap;
    uint32_t *leaf_of; /* NONE32: absent or ineligible */
    uint8_t *present;  /* 0 absent, 1 eligible, 2 ineligible */
    uint32_t *id_off;
    uint16_t *id_len;         /* ids are at most BF_ENGINE_ID_MAX bytes */
    uint64_t *idpfx, *idpfx2; /* id bytes 0-7 and 8-15, big-endian, zero-padded */
    int64_t *idle_since;
    char *idbuf;
    size_t idbuf_len, idbuf_cap, idbuf_waste;
    size_t idbuf_pop; /* during a bulk load (pop_ahead): idbuf pre-faulted below it */
    bool pop_ahead;   /* bfe_mirror_populate */
    uint32_t n_present, n_ineligible;
    uint32_t by_state[BF_STATE_COUNT];

    /* label sets */
    struct labelset *lsets;
    uint32_t n_lsets, cap_lsets;
    uint32_t *lset_free;
    uint32_t n_lset_free, cap_lset_free;
    struct idtab lset_tab;

    /* classes */
    struct mclass *cls;
    uint32_t n_cls, cap_cls;
    uint32_t *cls_free;
    uint32_t n_cls_free, cap_cls_free;
    struct idtab cls_tab;
    uint32_t live_classes;
    struct leaflist all_classes;        /* class ids (reusing leaflist) */
    struct bfe_u64map type_classes_map; /* itype string id -> index in type_classes */
    struct leaflist *type_classes;
    uint32_t n_type_classes, cap_type_classes;

    /* leaves */
    struct rmemo_entry memo[RMEMO_SLOTS];
    uint32_t leaf_serial; /* last serial given to a new leaf */
    struct leaf *leaves;
    uint32_t n_leaves, cap_leaves;
    uint32_t *leaf_free;
    uint32_t n_leaf_free, cap_leaf_free;
    struct idtab leaf_tab;
    uint32_t live_leaves;
    struct leaflist *lists;
    uint32_t n_lists, cap_lists;
    struct bfe_u64map list_map;
    /* Configured leaves by assigned priority: sorted (prio, list id) */
    int32_t *prio_keys;
    uint32_t *prio_lists;
    uint32_t n_prio, cap_prio;

    /* idle release sets per capacity type (OnDemand, Spot): (idle_since, id) order */
    struct slotlist release[2];
    uint8_t *in_release; /* per slot: 0, 1 + index */

    /* clusters */
    struct cluster *clusters;
    uint32_t n_clusters, cap_clusters;
    struct bfe_u64map cluster_map; /* name string id -> index */
    uint32_t *cluster_order;       /* indices sorted by name */
    uint32_t cap_corder;
    bool cluster_order_dirty;

    /* compiled profiles */
    struct cprof **cprofs;
    uint32_t n_cprofs, cap_cprofs;
    uint64_t acl_marks;          /* ac_profiles' passes */
    struct bfe_u64map cprof_map; /* fp string id -> index */
    uint32_t *cprof_free;
    uint32_t n_cprof_free, cap_cprof_free;

    /* demand snapshot order of the pass-through Needs (cluster idx, need
     * idx): NormalizeDemand's folded Needs are left out (they are read as
     * fold groups); merged again where a cluster's demand or a fold decision
     * changed */
    uint64_t *snap; /* (cluster << 32) | need */
    uint32_t n_snap, cap_snap;
    bool snap_dirty;
    bool snap_full;                 /* cluster ranks moved: rebuild the order from scratch */
    struct snapkey *snapk, *snapk2; /* sorted keys (and a merge buffer) */
    uint32_t cap_snapk, cap_snapk2;
    uint32_t n_same_total;
    bool any_same; /* some Need carries Same */
    /* bumped when a class's Idle + Speculative count moves between 0 and > 0 */
    uint64_t shard_supply_ver;
    /* acquirable supply versions, kept by the mirror (mirror.c) for the
     * incremental pre-pass (credit.c, bfe_acq_ver): a clock; every change of
     * an Idle/Speculative count takes the next value, for all types and for
     * the machine's instance type */
    uint64_t acq_clock, acq_ver_all;
    struct bfe_u64map tver_map; /* itype string id -> index into tver */
    uint64_t *tver;
    uint32_t n_tver, cap_tver;
    uint64_t epoch_ctr;      /* cluster credit epochs */
    uint64_t cprof_serial;   /* the last cprof.serial given */
    uint64_t held_reused[2]; /* rollup Needs given a held Need's profile without a lookup:
                              * [0] by the caller's fingerprint, [1] by comparing profiles */
    uint32_t pp_dkept;       /* this cycle's pre-pass rows kept in clusters whose demand moved */
    bool memo_broken;        /* a cycle failed part-way: every memo is dropped */
    struct cons_ent *cons;   /* this cycle's virtual consumption, by leaf id */
    uint32_t n_cons, cap_cons;
    struct pmemo *rec_pm; /* the pre-pass row being derived or re-ranked (NULL: none) */
    uint32_t rec_ci, rec_row;
    bool rec_creat_read;                       /* it read its fingerprint's Creating list */
    bool rec_creat_busy;                       /* ... a non-empty one */
    uint32_t pp_kept, pp_reranked, pp_derived; /* this cycle's pre-pass rows */
    /* same.c: this cycle's acquirable pools and rankings (cycle arena) */
    struct apool *apools;
    struct bfe_u64map amap;
    void **aobj;
    uint32_t n_aobj, cap_aobj;
    struct bfe_u64map norm_map[3]; /* NormalizeDemand's per-cycle maps (kept allocated) */
    struct bfe_u64map victim_map;  /* Phase 2's per-cycle candidate cache index */

    /* a replaced demand's array, kept for the next bf_engine_set_needs (a
     * republished 50K-Need rollup would otherwise fault in ~8 MiB of fresh
     * pages every time); at most one, the largest (demand.c) */
    struct need_in *needs_spare;
    uint32_t cap_needs_spare;

    /* cycle */
    uint64_t cycle;
    uint32_t stamp;
    struct arena ar; /* cycle-long allocations, reset per cycle */
    struct arena sc; /* scratch with mark/release inside a cycle */
    uint32_t claimed_state[BF_STATE_COUNT];
    int64_t t_credit_ns;
    struct dneed *d;
    uint32_t n_d, cap_d;
    struct pick *picks;
    uint32_t n_picks, cap_picks;
    struct run *runs;
    uint32_t n_runs, cap_runs;
    uint32_t *scratch_dom; /* per string id: bucket index + 1 (stamped by dom_stamp) */
    uint32_t *scratch_dom_stamp;
    uint32_t cap_scratch, dom_stamp;

    /* outputs */
    struct bf_engine_action *acts;
    uint32_t n_acts, cap_acts;
    struct bf_engine_verdict *verdicts;
    uint32_t n_verdicts, cap_verdicts;
    uint32_t n_unsat; /* normalized Needs left with a deficit (counted by the verdicts) */
    struct bf_engine_unresolved *unres;
    uint32_t n_unres, cap_unres;
    struct bf_engine_shortfall *shorts;
    uint32_t n_shorts, cap_shorts;
    struct bf_engine_ac_hint *hints;
    uint32_t n_hints, cap_hints;
    bool last_ok;

    /* cross-cycle ledgers */
    struct park_entry *park;
    uint32_t n_park, cap_park;
    struct bfe_u64map
        park_map; /* hash(cluster, group, fp) -> index (collisions chained by probe) */
    struct short_entry *shortl;
    uint32_t n_shortl, cap_shortl;
    struct bfe_u64map short_map; /* fp string id -> index */
    struct ac_entry *ac;
    uint32_t n_ac, cap_ac;
    struct bfe_u64map ac_map; /* (cluster id << 32 | fp id) -> index */
};

/* mirror.c */
int bfe_mirror_init(struct bf_engine *e);
void bfe_mirror_free(struct bf_engine *e);
int bfe_id_cmp(const struct bf_engine *e, uint32_t a, uint32_t b);
/* bulk.c (i18-restart): bf_engine_upsert split at its leaf resolve.
 * bfe_upsert_at is bf_engine_upsert with the leaf already resolved (li =
 * what leaf_resolve returned for m, NONE32 when m is ineligible);
 * bfe_leaf_serial: the serial of a live leaf, 0 when li is not live. */
bool bfe_machine_eligible(const struct bf_engine_machine *m);
uint32_t bfe_leaf_resolve_slow(struct bf_engine *e, const struct bf_engine_machine *m, int *err);
/* leaf_resolve_slow = bfe_class_get (m's class, one reference taken; NONE32
 * and *err -ENOMEM) then bfe_leaf_resolve_cls (takes that reference over);
 * bfe_class_retain takes one more reference of class cls if it is live with
 * generation gen, else returns false. */
uint32_t bfe_class_get(struct bf_engine *e, const struct bf_engine_machine *m, int *err);
uint32_t bfe_leaf_resolve_cls(struct bf_engine *e, const struct bf_engine_machine *m, uint32_t cls,
                              int *err);
bool bfe_class_retain(struct bf_engine *e, uint32_t cls, uint32_t gen);
uint32_t bfe_leaf_serial(const struct bf_engine *e, uint32_t li);
int bfe_upsert_at(struct bf_engine *e, uint32_t slot, const struct bf_engine_machine *m,
                  uint32_t li);
/* bulk.c (i18-restart3): bfe_upsert_at that appends the slot to its lists
 * even out of order, flagging in *unsorted the lists left out of order
 * (BFE_UNSORTED_LEAF: leaf li's, BFE_UNSORTED_RELEASE << ri: release list
 * ri); bfe_sl_sort_leaf / bfe_sl_sort_release put them back in order. */
#define BFE_UNSORTED_LEAF    1u
#define BFE_UNSORTED_RELEASE 2u
int bfe_upsert_append(struct bf_engine *e, uint32_t slot, const struct bf_engine_machine *m,
                      uint32_t li, unsigned *unsorted);
void bfe_sl_sort_leaf(struct bf_engine *e, uint32_t li);
/* bulk.c (i18-restart6): a bulk load of n slots pre-faults (bf_engine_populate)
 * the per-slot columns' [0, n) and, until bfe_mirror_populate_end, the id
 * buffer ahead of its end (BFE_POP_STEP at a time); _end gives back what the
 * id buffer did not fill. */
#define BFE_POP_STEP ((size_t)256 << 10)
void bfe_mirror_populate(struct bf_engine *e, uint32_t n);
void bfe_mirror_populate_end(struct bf_engine *e);
/* base.c: gives back the whole pages inside [p, p + n) (MADV_DONTNEED:
 * they read as zeros again); nothing with huge pages on. */
void bfe_unpopulate(void *p, size_t n);
void bfe_sl_sort_release(struct bf_engine *e, int ri);
int bfe_sl_cmp_id(const void *ctx, uint32_t a, uint32_t b);
uint32_t bfe_class_attr(const struct bf_engine *e, const struct mclass *c, uint8_t kind,
                        uint32_t key);
uint32_t bfe_cluster_get(struct bf_engine *e, uint32_t name_id, bool create);
static inline const char *bfe_machine_id(const struct bf_engine *e, uint32_t slot)
{
    return e->idbuf + e->id_off[slot];
}
/* per-cycle leaf counters (lazily reset by stamp) */
static inline struct leaf *bfe_leaf_cyc(struct bf_engine *e, uint32_t li)
{
    struct leaf *l = &e->leaves[li];
    if (l->stamp != e->stamp) {
        l->stamp = e->stamp;
        l->taken = l->consumed = l->p2taken = 0;
        l->runs = NONE32;
    }
    return l;
}
/* read-only views of the per-cycle counters (no write to untouched leaves);
 * a cluster leaf's claims are the credit claims kept by credit.c */
static inline uint32_t bfe_leaf_taken(const struct bf_engine *e, const struct leaf *l)
{
    if (l->cluster_idx != NONE32)
        return l->cepoch == e->clusters[l->cluster_idx].cepoch ? l->ctaken : 0;
    return l->stamp == e->stamp ? l->taken : 0;
}
/* The classes of a profile's t-th pinned instance type (NULL when no class
 * has that type), or every class when the profile is not pinned (t == 0). */
static inline const struct leaflist *bfe_cprof_classes(const struct bf_engine *e,
                                                       const struct cprof *cp, uint32_t t)
{
    if (!cp->pinned)
        return &e->all_classes;
    uint32_t idx = bfe_u64map_get(&e->type_classes_map, cp->pin[t], NONE32);
    return idx == NONE32 ? NULL : &e->type_classes[idx];
}
/* The rank of slot in its leaf when this cycle's claims on the leaf cover it
 * (its rank is below the leaf's taken count), else NONE32. */
static inline uint32_t bfe_claimed_rank(const struct bf_engine *e, uint32_t slot)
{
    uint32_t li = e->leaf_of[slot];
    if (li == NONE32)
        return NONE32;
    const struct leaf *l = &e->leaves[li];
    uint32_t taken = bfe_leaf_taken(e, l);
    if (!taken)
        return NONE32;
    uint32_t r = bfe_sl_rank(&l->sl, slot, bfe_sl_cmp_id, e);
    return r != NONE32 && r < taken ? r : NONE32;
}

static inline struct mclass *bfe_class_cyc(struct bf_engine *e, uint32_t ci)
{
    struct mclass *c = &e->cls[ci];
    if (c->cstamp != e->stamp) {
        c->cstamp = e->stamp;
        c->consumed[0] = c->consumed[1] = 0;
    }
    return c;
}

/* the acquirable supply version of instance type itype (string id; NONE32:
 * of all types): the clock value of the last change of an Idle/Speculative
 * count of its classes, 0 if none since the engine started (mirror.c) */
static inline uint64_t bfe_acq_ver(const struct bf_engine *e, uint32_t itype)
{
    if (itype == NONE32)
        return e->acq_ver_all;
    uint32_t idx = bfe_u64map_get(&e->tver_map, itype, NONE32);
    return idx == NONE32 ? 0 : e->tver[idx];
}

/* the cluster leaf lists (state index si: 0 Configured, 1 Configuring) that a
 * profile can match: its pinned types plus type 0, or all of them */
uint32_t bfe_cluster_lists(const struct bf_engine *e, uint32_t ci, int si, const struct cprof *cp,
                           uint32_t *out, uint32_t cap);

struct same_bucket;

/* credit.c: the incremental credit pre-pass. It sits below Phase 1: it
 * keeps and replays the outcomes, and derives a Need's outcome by calling
 * back into the derivation Phase 1 hands it (phase1.c owns the pre-pass
 * rules; credit.c never names a phase1.c function). */
struct bfe_prepass_ops {
    /* the pre-pass of normalized Need di: its claims through
     * bfe_credit_claim, its consumption through bfe_credit_consume, ... */
    int (*need)(struct bf_engine *e, uint32_t di);
    /* a Same Need's consumption rider alone: virtually consumes the chosen
     * domain's acquirable supply for its remaining deficit (a re-ranked row
     * whose domain and claims stand) */
    int (*same_consume)(struct bf_engine *e, uint32_t di);
};
/* Runs the pre-pass over the normalized Needs ord[0..n) (low 32 bits: index
 * into e->d), in that order; 0 or -ENOMEM/-EINVAL. */
int bfe_credit_prepass(struct bf_engine *e, const uint64_t *ord, uint32_t n,
                       const struct bfe_prepass_ops *ops);
/* hooks for the pre-pass code (phase1.c) */
int bfe_credit_claim(struct bf_engine *e, uint32_t di, uint32_t li, uint32_t count);
int bfe_credit_consume(struct bf_engine *e, uint32_t li, uint32_t count);
void bfe_credit_creating_read(struct bf_engine *e, uint32_t list);
/* claims of the last cycle on a cluster leaf: the owner of rank r (NONE32) */
uint32_t bfe_credit_owner(const struct bf_engine *e, uint32_t li, uint32_t r);
uint32_t bfe_credit_cluster_claimed(const struct bf_engine *e, uint32_t ci);
/* this cycle's credit claims on cluster ci's leaves as per-cycle runs
 * (leaf.runs, e->runs), once per cycle, for Phase 2 (-ENOMEM) */
int bfe_credit_load_runs(struct bf_engine *e, uint32_t ci);
void bfe_credit_free(struct bf_engine *e);
/* records a Same Need's creditable buckets with their rank scores against
 * agg (credit.c); *out: the recorded buckets, valid until the next record */
int bfe_credit_cbk(struct bf_engine *e, const struct same_bucket *bk, uint32_t nb,
                   const bf_vec *agg, const struct cbk **out);

/* same.c: Same domain ranking over the shared acquirable supply */
struct apool;
/* Chooses d's domain from its recorded creditable buckets cb[0..nb)
 * (distinct domains; their acquirable supply is added to a copy) and, unless d is
 * parked, the acquirable-only domains: sets has_domain, domain, same_sat and
 * the candidates (cycle arena), exactly as ranking every bucket. */
int bfe_same_rank(struct bf_engine *e, struct dneed *d, const struct cbk *cb, uint32_t nb);
void bfe_acq_reset(struct bf_engine *e);
/* class ci's virtual consumption moved: pools and rankings follow */
void bfe_acq_consumed(struct bf_engine *e, uint32_t ci);

/* demand.c */
/* the snapshot order of the pass-through Needs (e->snap): called by
 * NormalizeDemand once the fold decisions (cluster.fold) are made */
int bfe_demand_snapshot(struct bf_engine *e);
void bfe_demand_free(struct bf_engine *e);
bool bfe_match_class(struct bf_engine *e, struct cprof *cp, uint32_t cls);
struct cprof *bfe_cprof_get(struct bf_engine *e, const struct bf_need_profile *p);
void bfe_cprof_release(struct bf_engine *e, struct cprof *cp);
struct cprof *bfe_cprof_stripped(struct bf_engine *e, struct cprof *cp);
void bfe_cluster_sort(struct bf_engine *e);
void bfe_fold_groups_clear(struct cluster *cl);

/* vector helpers */
static inline int64_t bfe_sat_add(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r))
        return a > 0 ? INT64_MAX : INT64_MIN;
    return r;
}
static inline int64_t bfe_sat_mul(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r))
        return ((a < 0) != (b < 0)) ? INT64_MIN : INT64_MAX;
    return r;
}
static inline void bfe_vec_add_scaled(bf_vec *acc, const bf_vec *v, int64_t k)
{
    for (int i = 0; i < BF_MAX_DIMS; i++)
        acc->v[i] = bfe_sat_add(acc->v[i], bfe_sat_mul(v->v[i], k));
}
/* remaining = max(remaining - k * v, 0) per dimension (k >= 0, v >= 0). */
static inline void bfe_vec_sub_scaled(bf_vec *r, const bf_vec *v, int64_t k)
{
    for (int i = 0; i < BF_MAX_DIMS; i++) {
        if (r->v[i] <= 0) {
            r->v[i] = 0;
            continue;
        }
        int64_t t = bfe_sat_mul(v->v[i], k);
        r->v[i] = t >= r->v[i] ? 0 : r->v[i] - t;
    }
}

/* merge.c: k-way merge of leaves by (k1, k2, machine id) */
struct mcur {
    uint32_t leaf;
    uint32_t ci, off; /* position in the leaf's slot list */
    uint32_t left;    /* slots left in this cursor */
    uint32_t slot;    /* current head slot */
    double k1, k2;
};
struct merge {
    struct bf_engine *e;
    struct mcur *h;
    uint32_t n;
};
/* Sets up a cursor on leaf li starting at position pos (all remaining slots). */
void bfe_mcur_init(struct bf_engine *e, struct mcur *c, uint32_t li, uint32_t pos, double k1,
                   double k2);
void bfe_merge_init(struct merge *m, struct bf_engine *e, struct mcur *curs, uint32_t n);
/* Pops the next slot; false when exhausted. *leaf receives its leaf id. */
bool bfe_merge_next(struct merge *m, uint32_t *slot, uint32_t *leaf);
/* Peeks the head without popping. */
bool bfe_merge_peek(const struct merge *m, uint32_t *slot, uint32_t *leaf, double *k1);
int bfe_mcur_cmp(const struct bf_engine *e, const struct mcur *a, const struct mcur *b);

/* phases */
int bfe_normalize(struct bf_engine *e);
int bfe_phase1(struct bf_engine *e);
int bfe_phase2(struct bf_engine *e);
int bfe_phase3(struct bf_engine *e, int64_t now_ns);
int bfe_observe(struct bf_engine *e, int64_t now_ns);
void bfe_park_stamp(struct bf_engine *e);
int bfe_park_record(struct bf_engine *e);
void bfe_ledgers_free(struct bf_engine *e);
int bfe_emit(struct bf_engine *e, const struct bf_engine_action *a);

/* same.c: Same-bucket ranking keys (engine.md §4.3), used by phase1.c's full
 * derivation and same.c's shared rankings, exposed for tests. */
struct same_bucket {
    uint32_t value; /* domain string id */
    uint32_t count, cred_count;
    bf_vec total, cred_total, own_total;
};
/* The per-bucket quantities ChooseSameBucket compares. */
struct rank_key {
    bool sat;
    double cred, own, score;
    uint32_t count, value;
};
void bfe_rank_key_of(const struct same_bucket *b, const bf_vec *d, struct rank_key *k);
/* ChooseSameBucket's replacement rules 2-8 (engine.md §4.3): does c beat b?
 * A strict total order over buckets of distinct domains. */
bool bfe_key_better(const struct bf_engine *e, const struct rank_key *c, const struct rank_key *b);
/* floor(1000 x min over positive deficit dimensions of min(1, total/d)) */
int32_t bfe_coverage_per_mille(const bf_vec *total, const bf_vec *d);

/* Returns true when candidate `c` should replace current best `b` for deficit d. */
bool bfe_same_better(const struct bf_engine *e, const struct same_bucket *c,
                     const struct same_bucket *b, const bf_vec *d);
int bfe_same_choose(const struct bf_engine *e, const struct same_bucket *bk, uint32_t n,
                    const bf_vec *d);
double bfe_same_score(const bf_vec *total, const bf_vec *deficit, bool capped);

#endif /* BF_ENGINE_INTERNAL_H */
