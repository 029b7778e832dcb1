/*
 * rollup.c — ClusterCapacityNeeds -> Need rows (bigfleet/rollup.h), and
 * rail 2 (the empty-rollup quarantine).
 *
 * Design notes
 *   - Incremental conversion (bf_rollup_convert_incremental): every Need's
 *     bytes are hashed (keyed XXH3-64) into needs_memo with the row it
 *     became; the next rollup of the cluster looks each Need up there (the
 *     one after the last match first, then a hash index built on the first
 *     miss and given up when it finds under 1 in 8) and takes the row of a
 *     Need with the same hash and length instead of converting it. Only
 *     rows made by one Need are reusable (a merged row's values are a sum).
 *     The reused row then goes through place_row like a converted one
 *     (group quota, merging, clamp count), so the result is the full
 *     conversion's; a Need not found (changed, new, malformed) is converted
 *     and checked in full. Reused rows skip the dedup table (at 50K rows
 *     its probe was a cache miss per Need): the previous rollup's rows have
 *     distinct keys, so a reused row can only meet its own previous row
 *     again (prev_used) or a converted row (cross_collision, after the
 *     pass); in that case, or on any error, the plain pass runs again.
 *     A fast pass of >= DEFER_MIN_NEEDS Needs (unless the previous rollup
 *     merged some) defers the converted rows' dedup too: each row's slot is
 *     prefetched when it is placed and probed DEFER_RING rows later
 *     (defer_push), so the 1 MiB table's misses overlap the conversion
 *     instead of stalling it once per Need; a duplicate among them ends
 *     the fast pass and the plain pass merges it.
 *   - The rollup is walked with the wire scanner (wire.c), not unpacked as a
 *     whole: a 50K-Need rollup would otherwise cost 50K protobuf-c
 *     allocations trees. Per Need, the profile-defining fields
 *     (requirements 1, priority 3, spread 5, buckets 6/7) are concatenated
 *     byte-exact as a cache key; equal bytes decode to equal values and so
 *     to the same interned profile. A miss unpacks that one CapacityNeed
 *     with protobuf-c and interns it through bf_nprofile_intern_need (which
 *     validates operators, buckets and spreads); a hit reuses the refs.
 *     Operators resend the same shapes every rollup, so steady-state ingest
 *     interns nothing. The cache is bounded (cleared when it grows past
 *     PCACHE_MAX_*), private to the one thread that converts rollups.
 *   - Resource maps are read from the wire (map entries: key 1, value 2;
 *     a missing key or value is ""), kept as pointers into the rollup,
 *     parsed as Kubernetes quantities (negative ones reject) and placed at
 *     their registered dimension. Operators repeat the same names and
 *     quantities on every Need: per conversion, whole entries, names and
 *     quantities already resolved are looked up in small memos (struct
 *     scratch) instead of being validated, looked up and parsed again
 *     (issue 18 target 3).
 *   - Duplicate (profile, group) rows are merged (header contract).
 *   - Nothing is written to shared memory except interned strings; the
 *     caller publishes rows. Dimension names the registry lacks are only
 *     listed (new_dims): the caller applies the cluster's quota, registers
 *     them and converts again, so a rejected rollup never registers one.
 *   - Per-cluster quotas (docs/security.md): Needs, distinct groups and
 *     the string-table bytes this conversion adds (the arena's growth
 *     across our own interning calls) are limited by the caller's
 *     bf_rollup_limits; priorities above max_priority are clamped (the
 *     clamped profile is what gets interned and cached).
 *   - A cache miss decodes its one CapacityNeed with bf_pb_unpack
 *     (unknown fields dropped, bounded allocation); a Need is at most
 *     BF_ROLLUP_NEED_MAX bytes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "bigfleet/blobs.h"
#include "bigfleet/hmap.h"
#include "bigfleet/pbdecode.h"
#include "bigfleet/opmsg.h"
#include "bigfleet/rollup.h"
#include "bigfleet/strbuf.h"
#include "bigfleet/v1alpha1/capacity.pb-c.h"

#define ERR(...)                                                                                   \
    do {                                                                                           \
        if (err && errlen)                                                                         \
            snprintf(err, errlen, __VA_ARGS__);                                                    \
    } while (0)

/* ------------------------------------------------------------ profile cache */

#define PCACHE_MAX_ENTRIES (1u << 20)
#define PCACHE_MAX_BYTES   (64u << 20)

/* XXH3-64 of the key bytes -> where the bytes are and what they interned
 * to; the bytes are compared on a hit, so two keys with one hash are two
 * entries and a lookup never takes the wrong one. Entries sit in insertion
 * order in one array (operators send their Needs in the same order every
 * rollup, so consecutive lookups read neighbouring entries and neighbouring
 * key bytes); the index over them is bigfleet/hmap.h's context variant,
 * which holds only entry numbers (4 bytes a slot), so a 50K-profile cache
 * probes a table that stays in cache instead of one 40-byte slot per probe. */
struct pc_ent {
    uint64_t h;
    uint64_t off; /* key bytes in store */
    uint32_t len;
    uint32_t profile_ref;
    uint32_t fp_ref;
    uint32_t pad;
};

/* the entries and their key bytes: the index's context */
struct pc_store {
    struct pc_ent *ents;
    uint32_t n;
    size_t cap;
    uint8_t *store;
    size_t used, scap;
};
struct pc_key {
    uint64_t h;
    const uint8_t *k;
    size_t len;
};
static inline bool pc_eq(const struct pc_store *c, uint32_t e, struct pc_key key)
{
    const struct pc_ent *x = &c->ents[e];
    return x->h == key.h && x->len == key.len &&
           (!key.len || !memcmp(c->store + x->off, key.k, key.len));
}
#define PC_HASHID(c, e) ((c)->ents[(e)].h)
BF_HMAP_DEFINE_CTX(pc_index, struct pc_key, struct pc_store, PC_HASHID, pc_eq)

struct pcache {
    struct pc_store s;
    struct pc_index idx;
};

static void pcache_clear(struct pcache *c)
{
    pc_index_free(&c->idx);
    free(c->s.ents);
    free(c->s.store);
    memset(c, 0, sizeof *c);
}

/* *hint: the entry to try before the index (the one after the previous
 * Need's: operators send their Needs in the same order every rollup, and
 * entries sit in insertion order, so the lookup of a steady rollup reads
 * the entries in sequence instead of probing the index at random); set to
 * the entry after the one found. The hinted entry is compared by its bytes
 * alone (equal bytes have the equal hash): the key is hashed (*h, for
 * pcache_put after a miss) only when that entry is not it. */
static bool pcache_get(const struct pcache *c, uint64_t *h, const uint8_t *k, size_t len,
                       uint32_t *hint, uint32_t *pref, uint32_t *fref)
{
    uint32_t e = *hint;
    const struct pc_ent *x = e < c->s.n ? &c->s.ents[e] : NULL;
    if (!x || x->len != len || (len && memcmp(c->s.store + x->off, k, len) != 0)) {
        *h = XXH3_64bits(k, len);
        struct pc_key key = {*h, k, len};
        e = pc_index_find(&c->idx, *h, &c->s, key);
        if (e == BF_HMAP_NONE)
            return false;
    }
    *hint = e + 1;
    *pref = c->s.ents[e].profile_ref;
    *fref = c->s.ents[e].fp_ref;
    return true;
}

/* Called after a miss (pcache_get false): the key is not in the cache. */
static void pcache_put(struct pcache *c, uint64_t h, const uint8_t *k, size_t len, uint32_t pref,
                       uint32_t fref)
{
    struct pc_store *st = &c->s;
    if (st->n + 1 > PCACHE_MAX_ENTRIES || st->used + len > PCACHE_MAX_BYTES)
        pcache_clear(c);
    if (bf_grow((void **)&st->ents, &st->cap, st->n + 1, sizeof *st->ents))
        return; /* a cache: losing an entry is harmless */
    if (st->used + len > st->scap || !st->store) {
        size_t ncap = st->scap ? st->scap : 65536;
        while (ncap < st->used + len)
            ncap *= 2;
        uint8_t *ns = realloc(st->store, ncap);
        if (!ns)
            return;
        st->store = ns;
        st->scap = ncap;
    }
    st->ents[st->n] = (struct pc_ent){h, st->used, (uint32_t)len, pref, fref, 0};
    if (pc_index_add(&c->idx, h, st->n, st))
        return; /* not indexed: the entry slot is reused by the next put */
    if (len)
        memcpy(st->store + st->used, k, len);
    st->used += len;
    st->n++;
}

/* ------------------------------------------------------------ state */

void bf_rollup_init(struct bf_rollup *r)
{
    memset(r, 0, sizeof *r);
}

void bf_rollup_free(struct bf_rollup *r)
{
    free(r->rows);
    free(r->fp_refs);
    free(r->dkeys);
    free(r->gset);
    free(r->needs_memo);
    free(r->row_multi);
    free(r->pidx);
    free(r->prev_used);
    if (r->pcache) {
        pcache_clear(r->pcache);
        free(r->pcache);
    }
    memset(r, 0, sizeof *r);
}

static int reserve_rows(struct bf_rollup *r, uint32_t n)
{
    if (n <= r->cap)
        return 0;
    uint32_t ncap = r->cap ? r->cap : 64;
    while (ncap < n)
        ncap = ncap > UINT32_MAX / 2 ? n : ncap * 2;
    struct bf_need_row *rows = realloc(r->rows, (size_t)ncap * sizeof *rows);
    if (!rows)
        return -ENOMEM;
    r->rows = rows;
    uint32_t *fp = realloc(r->fp_refs, (size_t)ncap * sizeof *fp);
    if (!fp)
        return -ENOMEM;
    r->fp_refs = fp;
    uint8_t *multi = realloc(r->row_multi, ncap);
    if (!multi)
        return -ENOMEM;
    r->row_multi = multi;
    r->cap = ncap;
    return 0;
}

static int reset_dedup(struct bf_rollup *r, uint32_t n)
{
    uint32_t want = 16;
    while (want < 2u * n + 2 && want < (1u << 30))
        want *= 2;
    if (r->dmask + 1 != want || !r->dkeys) {
        free(r->dkeys);
        r->dkeys = calloc(want, sizeof *r->dkeys);
        if (!r->dkeys)
            return -ENOMEM;
        r->dmask = want - 1;
    } else {
        memset(r->dkeys, 0, (size_t)want * sizeof *r->dkeys);
    }
    if (r->gmask + 1 != want || !r->gset) {
        free(r->gset);
        r->gset = calloc(want, sizeof *r->gset);
        if (!r->gset)
            return -ENOMEM;
        r->gmask = want - 1;
    } else {
        memset(r->gset, 0, (size_t)want * sizeof *r->gset);
    }
    return 0;
}

/* Adds a group ref to this rollup's set; true when it was new. */
static bool group_add(struct bf_rollup *r, uint32_t gref)
{
    uint32_t i = (uint32_t)(gref * 0x9e3779b1u) & r->gmask;
    while (r->gset[i]) {
        if (r->gset[i] == gref)
            return false;
        i = (i + 1) & r->gmask;
    }
    r->gset[i] = gref;
    return true;
}

const char *const bf_reserved_dims[BF_RESERVED_DIMS_N] = {"cpu", "memory", "nvidia.com/gpu",
                                                          "ephemeral-storage"};

bool bf_dim_is_reserved(const char *name)
{
    for (int i = 0; i < BF_RESERVED_DIMS_N; i++)
        if (strcmp(name, bf_reserved_dims[i]) == 0)
            return true;
    return false;
}

/* ------------------------------------------------------------ helpers */

/* One resource map of a Need: up to MAP_MAX entries, pointing into the
 * rollup's bytes (nothing copied). */
#define MAP_MAX 64
struct kv {
    const uint8_t *k, *v;
    uint32_t kl, vl;
    const uint8_t *raw; /* the entry's bytes (entry memo key) */
    uint32_t rawl, h;
    int dim; /* >= 0: resolved by the entry memo (milli set); -1: k and v */
    int64_t milli;
};
struct kvbuf {
    uint32_t n;
    uint32_t unresolved; /* entries with dim -1 (kv_vec's slow path) */
    struct kv e[MAP_MAX];
};

/* Per conversion, what operators repeat on every Need: resource names
 * already validated and found in the registry (a registered name keeps its
 * index), and quantities already parsed (valid, non-negative). Keys point
 * into the rollup's bytes, alive for the conversion; a lookup compares the
 * bytes, so a miss only costs the full path. */
#define NAME_MEMO      16
#define QTY_MEMO       64  /* direct-mapped */
#define ENTRY_MEMO     256 /* direct-mapped */
#define ENTRY_MEMO_LEN 64  /* longest entry remembered */
#define POS_MEMO       4   /* map positions with an entry memo slot to try first */
_Static_assert(ENTRY_MEMO <= 256, "struct scratch's pos holds a slot in a byte");
struct name_memo {
    const uint8_t *p;
    uint32_t len;
    int dim;
};
struct qty_memo {
    const uint8_t *p;
    uint32_t len;
    int64_t milli;
};
/* a whole map entry's bytes (name and quantity) -> its registered
 * dimension and milli value: one lookup for an entry seen before */
struct entry_memo {
    const uint8_t *p;
    uint32_t len;
    int dim;
    int64_t milli;
};

#define DEFER_RING 16
struct scratch {
    uint8_t *key;
    size_t klen, kcap;
    struct kvbuf agg, mu;
    uint32_t n_names;
    struct name_memo names[NAME_MEMO];
    struct qty_memo qty[QTY_MEMO];
    struct entry_memo ent[ENTRY_MEMO];
    /* per map (aggregate_resources, min_unit) and entry position: the entry
     * memo slot the previous Need's entry there resolved to, tried before
     * the entry is hashed (Needs tend to list the same entries in the same
     * order); a hit compares the bytes, so a stale slot only costs the hash */
    uint8_t pos[2][POS_MEMO];
    uint32_t pc_hint;  /* the profile-cache entry to try first (pcache_get) */
    uint32_t last_row; /* the row the last Need became or merged into */
    bool last_clamped; /* its priority was clamped */
    /* defer: converted rows are not looked up when placed (place_row); their
     * keys enter the dedup table DEFER_RING rows later, their slots
     * prefetched meanwhile (defer_push), and a key met twice sets dup_seen
     * (the caller then runs the plain pass) */
    bool defer, dup_seen;
    uint32_t ring_n;
    uint64_t ring_h[DEFER_RING];
    uint32_t ring_row[DEFER_RING];
};

static bool has_nul(const uint8_t *p, uint32_t len)
{
    if (len > 16)
        return memchr(p, 0, len) != NULL;
    for (uint32_t i = 0; i < len; i++)
        if (!p[i])
            return true;
    return false;
}

static inline uint64_t ld64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline uint32_t ld32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Equal bytes? Short runs (map entries, names, quantities: mostly 1-16
 * bytes) are compared a word at a time, the last word overlapping the one
 * before it, rather than byte by byte. */
static inline __attribute__((always_inline)) bool bytes_eq(const uint8_t *a, const uint8_t *b,
                                                           uint32_t len)
{
    if (len > 16)
        return memcmp(a, b, len) == 0;
    if (len >= 8)
        return ld64(a) == ld64(b) && ld64(a + len - 8) == ld64(b + len - 8);
    if (len >= 4)
        return ld32(a) == ld32(b) && ld32(a + len - 4) == ld32(b + len - 4);
    for (uint32_t i = 0; i < len; i++)
        if (a[i] != b[i])
            return false;
    return true;
}

/* The entry memo's slot of a map entry's bytes (len <= ENTRY_MEMO_LEN):
 * XXH3-64, as for the profile key (the byte-wise FNV it replaced was a
 * quarter of the conversion of a Need whose values changed: issue 18 target
 * 3, stop 28). Only the memo's hit rate depends on it: a hit compares the
 * bytes. */
static uint32_t entry_hash(const uint8_t *p, uint32_t len)
{
    uint64_t h = XXH3_64bits(p, len);
    return (uint32_t)(h ^ h >> 32);
}

/* Parses one map entry (key 1, value 2) into b: an entry whose bytes the
 * memo holds (it passed every check before) is taken resolved. */
static __attribute__((noinline)) int kv_entry_slow(struct scratch *sc, struct kvbuf *b,
                                                   const uint8_t *p, size_t len, const char *map,
                                                   uint32_t need, char *err, size_t errlen)
{
    uint32_t h = 0;
    if (len <= ENTRY_MEMO_LEN && b->n < MAP_MAX) {
        h = entry_hash(p, (uint32_t)len);
        const struct entry_memo *m = &sc->ent[h & (ENTRY_MEMO - 1)];
        if (m->p && m->len == len && bytes_eq(m->p, p, (uint32_t)len)) {
            if (b->n < POS_MEMO)
                sc->pos[b == &sc->mu][b->n] = (uint8_t)(h & (ENTRY_MEMO - 1));
            struct kv *o = &b->e[b->n++]; /* only dim and milli are read (kv_vec) */
            o->dim = m->dim;
            o->milli = m->milli;
            return 0;
        }
    }
    const uint8_t *k = (const uint8_t *)"", *v = (const uint8_t *)"";
    size_t kl = 0, vl = 0;
    int rc = 0;
    /* the encoding every protobuf library writes: key then value, one-byte
     * lengths; anything else takes the general reader (the same result) */
    if (len >= 4 && p[0] == 0x0a && p[1] < 0x80 && (size_t)p[1] + 4 <= len && p[2 + p[1]] == 0x12 &&
        p[3 + p[1]] < 0x80 && (size_t)p[1] + p[3 + p[1]] + 4 == len) {
        k = p + 2;
        kl = p[1];
        v = p + 4 + kl;
        vl = p[3 + kl];
        goto parsed;
    }
    struct bf_pb_reader r;
    struct bf_pb_field f;
    bf_pb_reader_init(&r, p, len);
    while ((rc = bf_pb_next(&r, &f)) == 1) {
        if (f.num == 1 || f.num == 2) {
            if (f.wt != BF_PB_LEN) {
                ERR("need %u: %s: malformed map entry", need, map);
                return -EBADMSG;
            }
            if (f.num == 1) {
                k = f.p;
                kl = f.len;
            } else {
                v = f.p;
                vl = f.len;
            }
        }
    }
    if (rc != 0) {
        ERR("need %u: %s: malformed map entry", need, map);
        return -EBADMSG;
    }
parsed:
    if (has_nul(k, (uint32_t)kl) || has_nul(v, (uint32_t)vl)) {
        ERR("need %u: %s: NUL byte in a resource name or quantity", need, map);
        return -EINVAL;
    }
    if (b->n >= MAP_MAX) {
        ERR("need %u: %s: more than %d entries", need, map, MAP_MAX);
        return -EINVAL;
    }
    b->e[b->n++] = (struct kv){k, v, (uint32_t)kl, (uint32_t)vl, p, (uint32_t)len, h, -1, 0};
    b->unresolved++;
    return 0;
}

/* kv_entry_slow, after the fast path: the entry at the previous Need's
 * memo slot for this position (inline: most entries of a steady rollup) */
static inline __attribute__((always_inline)) int kv_entry(struct scratch *sc, struct kvbuf *b,
                                                          const uint8_t *p, size_t len,
                                                          const char *map, uint32_t need, char *err,
                                                          size_t errlen)
{
    if (len <= ENTRY_MEMO_LEN && b->n < POS_MEMO) {
        const struct entry_memo *m = &sc->ent[sc->pos[b == &sc->mu][b->n]];
        if (m->p && m->len == len && bytes_eq(m->p, p, (uint32_t)len)) {
            struct kv *o = &b->e[b->n++]; /* only dim and milli are read (kv_vec) */
            o->dim = m->dim;
            o->milli = m->milli;
            return 0;
        }
    }
    return kv_entry_slow(sc, b, p, len, map, need, err, errlen);
}

static const struct name_memo *name_find(const struct scratch *sc, const uint8_t *p, uint32_t len)
{
    for (uint32_t i = 0; i < sc->n_names; i++)
        if (sc->names[i].len == len && bytes_eq(sc->names[i].p, p, len))
            return &sc->names[i];
    return NULL;
}

static struct qty_memo *qty_slot(struct scratch *sc, const uint8_t *p, uint32_t len)
{
    uint32_t h = len * 0x9e3779b1u ^ (uint32_t)p[0] * 0x85ebca6bu ^ (uint32_t)p[len - 1] * 31u ^
                 (uint32_t)p[len / 2] * 7u;
    return &sc->qty[(h ^ h >> 11) & (QTY_MEMO - 1)];
}

/* The map as a vector over the registered dimensions; names the registry
 * lacks go to r->new_dims (their values are still validated). */
static __attribute__((noinline)) int kv_vec_slow(struct bf_shm *s, struct bf_rollup *r,
                                                 struct scratch *sc, const struct kvbuf *b,
                                                 bf_vec *out, const char *map, uint32_t need,
                                                 char *err, size_t errlen)
{
    bf_vec_zero(out);
    for (uint32_t i = 0; i < b->n; i++) {
        const struct kv *e = &b->e[i];
        if (e->dim >= 0) {
            out->v[e->dim] = e->milli; /* a duplicate key: last wins */
            continue;
        }
        const struct name_memo *nm = name_find(sc, e->k, e->kl);
        char key[BF_DIM_NAME_MAX];
        int kl = (int)e->kl, vl = (int)e->vl;
        if (!nm) {
            if (kl == 0) {
                ERR("need %u: %s: empty resource name", need, map);
                return -EINVAL;
            }
            if (kl >= BF_DIM_NAME_MAX) {
                ERR("need %u: %s: resource name of %d bytes (at most %d)", need, map, kl,
                    BF_DIM_NAME_MAX - 1);
                return -EINVAL;
            }
            memcpy(key, e->k, (size_t)kl);
            key[kl] = 0;
        }
        int64_t milli;
        struct qty_memo *qm = vl ? qty_slot(sc, e->v, e->vl) : NULL;
        if (qm && qm->p && qm->len == e->vl && bytes_eq(qm->p, e->v, e->vl)) {
            milli = qm->milli;
        } else {
            int rc = bf_quantity_parse((const char *)e->v, e->vl, &milli);
            if (rc) {
                ERR("need %u: %s: resource %.*s: invalid quantity \"%.*s\"", need, map, kl,
                    (const char *)e->k, vl, (const char *)e->v);
                return rc == -ERANGE ? -ERANGE : -EINVAL;
            }
            if (milli < 0) {
                ERR("need %u: %s: negative quantity %.*s=%.*s", need, map, kl, (const char *)e->k,
                    vl, (const char *)e->v);
                return -EINVAL;
            }
            if (qm)
                *qm = (struct qty_memo){e->v, e->vl, milli};
        }
        int d = nm ? nm->dim : bf_dim_lookup(s, key);
        if (d >= 0) {
            if (!nm && sc->n_names < NAME_MEMO)
                sc->names[sc->n_names++] = (struct name_memo){e->k, e->kl, d};
            if (e->rawl <= ENTRY_MEMO_LEN) {
                sc->ent[e->h & (ENTRY_MEMO - 1)] = (struct entry_memo){e->raw, e->rawl, d, milli};
                if (i < POS_MEMO)
                    sc->pos[b == &sc->mu][i] = (uint8_t)(e->h & (ENTRY_MEMO - 1));
            }
            out->v[d] = milli; /* a duplicate key: last wins */
            continue;
        }
        bool listed = false;
        for (uint32_t k = 0; k < r->n_new_dims && !listed; k++)
            listed = strcmp(r->new_dims[k], key) == 0;
        if (listed)
            continue;
        if (r->n_new_dims >= BF_MAX_DIMS) {
            ERR("need %u: %s: more than %d resource names the shard does not know yet", need, map,
                BF_MAX_DIMS);
            return -E2BIG;
        }
        memcpy(r->new_dims[r->n_new_dims++], key, (size_t)kl + 1);
    }
    return 0;
}

/* kv_vec_slow, or, when every entry was resolved by the memo, inline */
static inline __attribute__((always_inline)) int kv_vec(struct bf_shm *s, struct bf_rollup *r,
                                                        struct scratch *sc, const struct kvbuf *b,
                                                        bf_vec *out, const char *map, uint32_t need,
                                                        char *err, size_t errlen)
{
    if (b->unresolved)
        return kv_vec_slow(s, r, sc, b, out, map, need, err, errlen);
    bf_vec_zero(out);
    for (uint32_t i = 0; i < b->n; i++)
        out->v[b->e[i].dim] = b->e[i].milli; /* a duplicate key: last wins */
    return 0;
}

static uint64_t dedup_hash(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return k;
}

/* A dedup slot's tag for key hash h (never 0: 0 is an empty slot). */
static inline uint32_t dedup_tag(uint64_t h)
{
    return (uint32_t)(h >> 32) | 1u;
}

/* The one probe of a dedup table t (mask + 1 slots of tag << 32 | row + 1,
 * linear probing; rows hold the keys): the row with key (pref, gref) whose
 * key hash is h, or UINT32_MAX with *slot the empty slot where it would go.
 * A row is read only on a tag match. */
static inline uint32_t dedup_probe(const uint64_t *t, uint32_t mask, const struct bf_need_row *rows,
                                   uint64_t h, uint32_t pref, uint32_t gref, uint32_t *slot)
{
    uint32_t tag = dedup_tag(h), at = (uint32_t)h & mask;
    for (uint64_t v; (v = t[at]) != 0; at = (at + 1) & mask) {
        const struct bf_need_row *x = &rows[(uint32_t)v - 1];
        if ((uint32_t)(v >> 32) == tag && x->profile_ref == pref && x->group_ref == gref)
            return (uint32_t)v - 1;
    }
    *slot = at;
    return UINT32_MAX;
}

/* ------------------------------------------------------------ conversion */

static inline __attribute__((always_inline)) int key_append(struct scratch *sc, const uint8_t *p,
                                                            size_t len)
{
    if (__builtin_expect(sc->klen + len > sc->kcap, 0)) {
        size_t ncap = sc->kcap ? sc->kcap : 4096;
        while (ncap < sc->klen + len)
            ncap *= 2;
        uint8_t *nk = realloc(sc->key, ncap);
        if (!nk)
            return -ENOMEM;
        sc->key = nk;
        sc->kcap = ncap;
    }
    memcpy(sc->key + sc->klen, p, len);
    sc->klen += len;
    return 0;
}

static int strtab_check(const struct bf_shm *s, uint64_t reserve, uint32_t need, char *err,
                        size_t errlen)
{
    uint64_t used = bf_str_arena_used(s);
    if (used + reserve > s->arena_bytes) {
        ERR("need %u: the shared string table is nearly full (%llu of %llu bytes used, "
            "%llu kept in reserve)",
            need, (unsigned long long)used, (unsigned long long)s->arena_bytes,
            (unsigned long long)reserve);
        return -ENOSPC;
    }
    return 0;
}

static int quota_check(struct bf_rollup *r, const struct bf_rollup_limits *lim, uint32_t need,
                       char *err, size_t errlen)
{
    if (r->strtab_added <= lim->strtab_quota)
        return 0;
    r->over_quota = "strings";
    ERR("need %u: the cluster's string-table quota is used up (%llu bytes would be added, "
        "%llu allowed; --cluster-max-string-kib)",
        need, (unsigned long long)r->strtab_added, (unsigned long long)lim->strtab_quota);
    return -EDQUOT;
}

/* Whether a string of the Need's profile (a requirement's key or values, a
 * spread's topology key) holds a NUL byte: protobuf-c cuts a string there,
 * so "a\0b" would silently become "a" (Kubernetes label keys and values
 * hold none). Malformed nested bytes are left to the decoder. */
static bool profile_has_nul(const uint8_t *p, size_t len)
{
    struct bf_pb_reader rd, in;
    struct bf_pb_field f, g;
    bf_pb_reader_init(&rd, p, len);
    while (bf_pb_next(&rd, &f) == 1) {
        if ((f.num != 1 && f.num != 5) || f.wt != BF_PB_LEN)
            continue;
        bf_pb_reader_init(&in, f.p, f.len);
        while (bf_pb_next(&in, &g) == 1)
            if (g.wt == BF_PB_LEN && (g.num == 1 || (f.num == 1 && g.num == 3)) &&
                memchr(g.p, 0, g.len))
                return true;
    }
    return false;
}

/* row_multi bits */
#define ROW_MERGED    1u /* a second Need merged into the row */
#define ROW_CONVERTED 2u /* a converted (not reused) Need made the row */

static int place_row(struct bf_rollup *r, struct scratch *sc, uint32_t pref, uint32_t fref,
                     uint32_t gref, const int64_t *agg, const int64_t *mu, uint32_t prow,
                     uint32_t idx, uint32_t cluster_ref, const struct bf_rollup_limits *lim,
                     char *err, size_t errlen);

static int convert_need(struct bf_shm *s, struct bf_rollup *r, struct scratch *sc, const uint8_t *p,
                        size_t len, uint32_t idx, uint32_t cluster_ref,
                        const struct bf_rollup_limits *lim, char *err, size_t errlen)
{
    struct bf_pb_reader rd;
    struct bf_pb_field f;
    sc->klen = 0;
    sc->agg.n = sc->agg.unresolved = 0;
    sc->mu.n = sc->mu.unresolved = 0;
    const uint8_t *group = NULL;
    size_t group_len = 0;
    bool prio_over = false;
    int rc;
    if (len > BF_ROLLUP_NEED_MAX) {
        ERR("need %u: a CapacityNeed of %zu bytes (at most %u)", idx, len, BF_ROLLUP_NEED_MAX);
        return -E2BIG;
    }
    bf_pb_reader_init(&rd, p, len);
    /* the profile-defining fields' bytes, in wire order: a run of adjacent
     * ones (two requirements; priority and both buckets) is appended to the
     * key in one copy */
    const uint8_t *run = NULL, *run_end = NULL;
#define KEY_FIELD()                                                                                \
    do {                                                                                           \
        if (f.start != run_end) {                                                                  \
            if (run && key_append(sc, run, (size_t)(run_end - run)))                               \
                return -ENOMEM;                                                                    \
            run = f.start;                                                                         \
        }                                                                                          \
        run_end = f.end;                                                                           \
    } while (0)
    while ((rc = bf_pb_next(&rd, &f)) == 1) {
        switch (f.num) {
        case 1: /* requirements */
        case 5: /* spread */
            if (f.wt != BF_PB_LEN)
                goto bad;
            KEY_FIELD();
            break;
        case 3: /* priority */
            if (f.wt != BF_PB_VARINT)
                goto bad;
            prio_over = (int32_t)(uint32_t)f.varint > lim->max_priority; /* last one wins */
            KEY_FIELD();
            break;
        case 6: /* interruption bucket */
        case 7: /* reclamation bucket */
            if (f.wt != BF_PB_VARINT)
                goto bad;
            KEY_FIELD();
            break;
        case 2:
            if (f.wt != BF_PB_LEN)
                goto bad;
            if ((rc = kv_entry(sc, &sc->agg, f.p, f.len, "aggregate_resources", idx, err, errlen)))
                return rc;
            break;
        case 8:
            if (f.wt != BF_PB_LEN)
                goto bad;
            if ((rc = kv_entry(sc, &sc->mu, f.p, f.len, "min_unit", idx, err, errlen)))
                return rc;
            break;
        case 9:
            if (f.wt != BF_PB_LEN)
                goto bad;
            group = f.p; /* last one wins */
            group_len = f.len;
            break;
        default:
            break; /* unknown and reserved fields are skipped */
        }
    }
#undef KEY_FIELD
    if (rc != 0)
        goto bad;
    if (run && key_append(sc, run, (size_t)(run_end - run)))
        return -ENOMEM;
    if (group_len > BF_ROLLUP_GROUP_MAX) {
        ERR("need %u: a group id of %zu bytes (at most %u)", idx, group_len, BF_ROLLUP_GROUP_MAX);
        return -E2BIG;
    }
    /* the vectors first: a bad quantity rejects before anything is interned */
    bf_vec agg, mu;
    if ((rc = kv_vec(s, r, sc, &sc->agg, &agg, "aggregate_resources", idx, err, errlen)))
        return rc;
    if ((rc = kv_vec(s, r, sc, &sc->mu, &mu, "min_unit", idx, err, errlen)))
        return rc;
    if (prio_over)
        r->priorities_clamped++;
    sc->last_clamped = prio_over;

    /* profile: cache hit, or unpack this Need and intern it */
    uint32_t pref = 0, fref = 0;
    uint64_t h = 0; /* set by a pcache_get that misses */
    struct pcache *pc = r->pcache;
    if (!pcache_get(pc, &h, sc->key, sc->klen, &sc->pc_hint, &pref, &fref)) {
        if (profile_has_nul(p, len)) {
            ERR("need %u: NUL byte in a requirement key or value or a spread's topology_key", idx);
            return -EINVAL;
        }
        if ((rc = strtab_check(s, lim->strtab_reserve, idx, err, errlen)))
            return rc;
        Bigfleet__V1alpha1__CapacityNeed *n = NULL;
        struct bf_pb_decode_info info;
        rc = bf_pb_unpack(&bigfleet__v1alpha1__capacity_need__descriptor, p, len,
                          (ProtobufCMessage **)&n, &info);
        r->unknown_fields += info.unknown_fields;
        if (rc == -E2BIG) {
            ERR("need %u: decodes to more than %zu bytes (%zu on the wire)", idx,
                (size_t)3 * len + BF_PB_DECODE_SLACK, len);
            return rc;
        }
        if (rc)
            goto bad;
        if (n->priority > lim->max_priority)
            n->priority = lim->max_priority; /* the clamped profile is the one interned */
        char e2[200];
        /* the arena's growth across our interning (another process interning
         * at the same instant is charged to us: an over-count only, and rare) */
        uint64_t before = bf_str_arena_used(s);
        rc = bf_nprofile_intern_need(s, n, lim->strtab_reserve, &pref, &fref, e2, sizeof e2);
        r->strtab_added += bf_str_arena_used(s) - before;
        bigfleet__v1alpha1__capacity_need__free_unpacked(n, NULL);
        if (rc) {
            ERR("need %u: %s", idx, e2);
            return rc;
        }
        if ((rc = quota_check(r, lim, idx, err, errlen)))
            return rc;
        pcache_put(pc, h, sc->key, sc->klen, pref, fref);
        sc->pc_hint = pc->s.n; /* the next Need's profile is likely the next one put */
    }
    uint32_t gref = 0;
    if (group_len) {
        if (bf_str_find(s, group, (uint32_t)group_len, &gref) != 0) {
            /* new to the table, so new to this rollup: refuse before interning */
            if (lim->max_groups && r->groups + 1 > lim->max_groups)
                goto too_many_groups;
            if ((rc = strtab_check(s, lim->strtab_reserve + bf_str_cost((uint32_t)group_len), idx,
                                   err, errlen)))
                return rc;
            uint64_t before = bf_str_arena_used(s);
            rc = bf_str_intern(s, group, (uint32_t)group_len, &gref);
            r->strtab_added += bf_str_arena_used(s) - before;
            if (rc) {
                ERR("need %u: cannot intern the group (%zu bytes): %s", idx, group_len,
                    strerror(-rc));
                return rc;
            }
            if ((rc = quota_check(r, lim, idx, err, errlen)))
                return rc;
        }
    }
    return place_row(r, sc, pref, fref, gref, agg.v, mu.v, UINT32_MAX, idx, cluster_ref, lim, err,
                     errlen);
too_many_groups:
    ERR("need %u: more than %u distinct groups in one rollup (--cluster-max-groups)", idx,
        lim->max_groups);
    r->over_quota = "groups";
    return -E2BIG;
bad:
    ERR("need %u: malformed CapacityNeed", idx);
    return -EBADMSG;
}

/* Enters row `row` (key hash h) into the dedup table; a row with the same
 * (profile, group) already there sets dup_seen. */
static void defer_insert(struct bf_rollup *r, struct scratch *sc, uint64_t h, uint32_t row)
{
    const struct bf_need_row *x = &r->rows[row];
    uint32_t at = 0;
    if (dedup_probe(r->dkeys, r->dmask, r->rows, h, x->profile_ref, x->group_ref, &at) !=
        UINT32_MAX) {
        sc->dup_seen = true;
        return;
    }
    r->dkeys[at] = (uint64_t)dedup_tag(h) << 32 | (row + 1);
}

/* Queues row `row` for the dedup table (its slot prefetched now, probed
 * DEFER_RING rows later: the probe of a table larger than the cache no
 * longer stalls once per row). The row is filled before it is probed. */
static void defer_push(struct bf_rollup *r, struct scratch *sc, uint64_t h, uint32_t row)
{
    __builtin_prefetch(&r->dkeys[(uint32_t)h & r->dmask], 1);
    uint32_t at = sc->ring_n % DEFER_RING;
    if (sc->ring_n >= DEFER_RING && !sc->dup_seen)
        defer_insert(r, sc, sc->ring_h[at], sc->ring_row[at]);
    sc->ring_h[at] = h;
    sc->ring_row[at] = row;
    sc->ring_n++;
}

static void defer_drain(struct bf_rollup *r, struct scratch *sc)
{
    uint32_t n = sc->ring_n < DEFER_RING ? sc->ring_n : DEFER_RING;
    for (uint32_t k = sc->ring_n - n; k < sc->ring_n && !sc->dup_seen; k++)
        defer_insert(r, sc, sc->ring_h[k % DEFER_RING], sc->ring_row[k % DEFER_RING]);
    sc->ring_n = 0;
}

/* The part of a Need's conversion after its values are known (converted,
 * or reused from the previous rollup): the group counted against the
 * quota (gref 0: no group), then merged into an earlier row with the same
 * (profile, group) or appended. sc->last_row names the row.
 * prow: UINT32_MAX, or the previous rollup's row this Need repeats when
 * reused rows skip the dedup table (convert_rollup's fast pass): prev's
 * rows have distinct keys, so a reused row can only meet the same prev
 * row again (prev_used) or a converted row (checked after the pass).
 * sc->defer: a converted row is appended unlooked-up and queued for the
 * table (defer_push); 1 when a duplicate was seen (the caller runs the
 * plain pass). */
static int place_row(struct bf_rollup *r, struct scratch *sc, uint32_t pref, uint32_t fref,
                     uint32_t gref, const int64_t *agg, const int64_t *mu, uint32_t prow,
                     uint32_t idx, uint32_t cluster_ref, const struct bf_rollup_limits *lim,
                     char *err, size_t errlen)
{
    if (gref && group_add(r, gref) && ++r->groups > lim->max_groups && lim->max_groups) {
        ERR("need %u: more than %u distinct groups in one rollup (--cluster-max-groups)", idx,
            lim->max_groups);
        r->over_quota = "groups";
        return -E2BIG;
    }
    /* merge or append: a dedup slot holds a hash tag and the row number + 1
     * (the row holds the key), so a probe reads one 8-byte slot */
    uint32_t tag = 0, slot = 0, dup = UINT32_MAX;
    if (prow != UINT32_MAX) {
        if (r->prev_used[prow])
            dup = r->prev_used[prow] - 1;
    } else if (!sc->defer) {
        uint64_t dh = dedup_hash((uint64_t)pref << 32 | gref);
        tag = dedup_tag(dh);
        dup = dedup_probe(r->dkeys, r->dmask, r->rows, dh, pref, gref, &slot);
    }
    if (dup != UINT32_MAX) {
        struct bf_need_row *row = &r->rows[dup];
        for (int d = 0; d < BF_MAX_DIMS; d++) {
            if (__builtin_add_overflow(row->aggregate[d], agg[d], &row->aggregate[d])) {
                ERR("need %u: aggregate overflows when merged with an identical earlier need", idx);
                return -ERANGE;
            }
            if (mu[d] > row->min_unit[d])
                row->min_unit[d] = mu[d];
        }
        r->merged++;
        r->row_multi[dup] |= ROW_MERGED;
        sc->last_row = dup;
        return 0;
    }
    if (prow != UINT32_MAX)
        r->prev_used[prow] = r->n + 1;
    else if (!sc->defer)
        r->dkeys[slot] = (uint64_t)tag << 32 | (r->n + 1);
    else {
        defer_push(r, sc, dedup_hash((uint64_t)pref << 32 | gref), r->n);
        if (sc->dup_seen)
            return 1; /* a duplicate: the caller runs the plain pass */
    }
    struct bf_need_row *row = &r->rows[r->n];
    /* every field written (no memset of the row first) */
    _Static_assert(sizeof *row == 4 * sizeof(uint32_t) + sizeof(int64_t) + sizeof row->aggregate +
                                      sizeof row->min_unit + sizeof(uint64_t),
                   "a need row field this fill does not write");
    row->profile_ref = pref;
    row->group_ref = gref;
    row->cluster_ref = cluster_ref;
    row->flags = 0;
    row->arrival_ns = r->arrival_ns;
    memcpy(row->aggregate, agg, sizeof row->aggregate);
    memcpy(row->min_unit, mu, sizeof row->min_unit);
    row->reserved = 0;
    r->fp_refs[r->n] = fref;
    r->row_multi[r->n] = prow != UINT32_MAX ? 0 : ROW_CONVERTED;
    sc->last_row = r->n;
    r->n++;
    return 0;
}

static void reset_result(struct bf_rollup *r)
{
    r->n = 0;
    r->needs_in = 0;
    r->merged = 0;
    r->timestamp_ns = 0;
    r->arrival_ns = 0;
    r->timestamp_clamped = false;
    r->priorities_clamped = 0;
    r->groups = 0;
    r->strtab_added = 0;
    r->unknown_fields = 0;
    r->n_new_dims = 0;
    r->over_quota = NULL;
    r->repeated = false;
}

int64_t bf_rollup_arrival(int64_t timestamp_ns, int64_t recv_ns, bool *clamped)
{
    *clamped = recv_ns && (timestamp_ns > recv_ns || timestamp_ns < recv_ns - BF_ROLLUP_MAX_AGE_NS);
    return *clamped ? recv_ns : timestamp_ns; /* in the future or stale: receive time orders it */
}

/* The digest's input, in records: 'N' + a Need's keyed hash (8 bytes) and
 * length (4), or 'R' + another field's length (4) and bytes (the bytes
 * streamed apart). Injective: a record's kind and length are in its head. */
#define DG_REC 13u
#define DG_BUF (DG_REC * 315u)

static int digest_walk(const uint8_t *buf, size_t len, const struct bf_rollup_digest_key *key,
                       uint32_t max_needs, struct bf_rollup *r, struct bf_rollup_digest *d)
{
    XXH3_state_t st;
    if (r)
        r->hashed_buf = NULL;
    if (XXH3_128bits_reset_withSecret(&st, key->secret, sizeof key->secret) != XXH_OK)
        return -EINVAL;
    struct bf_pb_reader rd;
    struct bf_pb_field f;
    int rc;
    uint8_t out[DG_BUF];
    uint32_t at = 0, n = 0;
    bool keep = r != NULL;
    /* what bf_rollup_scan_top finds (kept only when it would accept) */
    const uint8_t *cid = (const uint8_t *)"";
    size_t cid_len = 0;
    int64_t ts = 0;
    d->timestamp_ns = 0;
    bf_pb_reader_init(&rd, buf, len);
    while ((rc = bf_pb_next(&rd, &f)) == 1) {
        if (f.num == 2) {
            d->timestamp_ns = (int64_t)f.varint; /* the last one wins, as in the converter */
            keep = keep && f.wt == BF_PB_VARINT;
            ts = (int64_t)f.varint;
            continue;
        }
        if (f.num == 1) {
            keep = keep && f.wt == BF_PB_LEN;
            cid = f.p;
            cid_len = f.len;
        }
        if (at + DG_REC > DG_BUF) {
            XXH3_128bits_update(&st, out, at);
            at = 0;
        }
        if (f.num == 3 && f.wt == BF_PB_LEN) {
            uint64_t h = XXH3_64bits_withSecret(f.p, f.len, key->secret, sizeof key->secret);
            uint32_t l = (uint32_t)f.len;
            out[at] = 'N';
            memcpy(out + at + 1, &h, 8);
            memcpy(out + at + 9, &l, 4);
            at += DG_REC;
            /* over max_needs, or no memory: the conversion hashes (bf_grow
             * doubles: the memo stays under 2 x max_needs entries, or 8) */
            if (keep && (n >= max_needs || (n >= r->needs_memo_cap &&
                                            bf_grow((void **)&r->needs_memo, &r->needs_memo_cap,
                                                    (size_t)n + 1, sizeof *r->needs_memo) != 0)))
                keep = false;
            if (keep)
                r->needs_memo[n] = (struct bf_rollup_need_memo){h, l, BF_ROLLUP_NO_ROW};
            n++;
            continue;
        }
        keep = keep && f.num != 3; /* a Need that is not LEN: scan_top's error */
        uint32_t l = (uint32_t)(f.end - f.start);
        out[at] = 'R';
        memcpy(out + at + 1, &l, 4);
        XXH3_128bits_update(&st, out, at + 5);
        XXH3_128bits_update(&st, f.start, l);
        at = 0;
    }
    if (rc < 0)
        return -EBADMSG;
    XXH3_128bits_update(&st, out, at);
    XXH128_hash_t h = XXH3_128bits_digest(&st);
    d->lo = h.low64;
    d->hi = h.high64 | 1; /* never the all-zero "no digest" */
    if (keep) {
        r->hashed_buf = buf;
        r->hashed_len = len;
        r->hashed_n = n;
        r->hashed_cid = cid;
        r->hashed_cid_len = cid_len;
        r->hashed_ts = ts;
    }
    return 0;
}

int bf_rollup_digest(const uint8_t *buf, size_t len, const struct bf_rollup_digest_key *key,
                     struct bf_rollup_digest *d)
{
    return digest_walk(buf, len, key, 0, NULL, d);
}

int bf_rollup_digest_needs(const uint8_t *buf, size_t len, const struct bf_rollup_digest_key *key,
                           uint32_t max_needs, struct bf_rollup *r, struct bf_rollup_digest *d)
{
    return digest_walk(buf, len, key, max_needs, r, d);
}

void bf_rollup_repeat_meta(uint32_t n, int64_t timestamp_ns, const struct bf_rollup_limits *lim,
                           struct bf_rollup *r)
{
    reset_result(r);
    r->hashed_buf = NULL; /* a repeat consumes the digest's hashes as a conversion would */
    r->timestamp_ns = timestamp_ns;
    r->arrival_ns = bf_rollup_arrival(timestamp_ns, lim->recv_ns, &r->timestamp_clamped);
    r->n = n;
    r->repeated = true;
}

int bf_rollup_repeat(const struct bf_shm *s, uint32_t rows_off, uint32_t n, const uint32_t *fp_refs,
                     int64_t timestamp_ns, const struct bf_rollup_limits *lim, struct bf_rollup *r)
{
    bf_rollup_repeat_meta(0, timestamp_ns, lim, r);
    int rc = reserve_rows(r, n ? n : 1);
    if (rc)
        return rc;
    if (n) {
        bf_needs_copy_rows(s, rows_off, n, r->rows);
        memcpy(r->fp_refs, fp_refs, (size_t)n * sizeof *fp_refs);
    }
    for (uint32_t i = 0; i < n; i++)
        r->rows[i].arrival_ns = r->arrival_ns;
    r->n = n;
    r->repeated = true;
    return 0;
}

/* ------------------------------------------------------------ reuse */

/* hash-index lookups before one hit in 8 is required to go on */
#define PREV_LOOKUPS_MIN 64
/* the fewest Needs for which a fast pass defers the dedup of converted rows
 * (below it the dedup table stays in cache) */
#define DEFER_MIN_NEEDS 8192

/* Whether prev's Need k has these bytes' hash and length and a row of its
 * own to reuse. */
static inline bool prev_match(const struct bf_rollup_prev *prev, uint32_t k, uint64_t h,
                              uint32_t len)
{
    const struct bf_rollup_need_memo *m = &prev->needs[k];
    uint32_t row = BF_ROLLUP_MEMO_ROW(m->row);
    return m->h == h && m->len == len && row != BF_ROLLUP_NO_ROW && row < prev->n_rows;
}

/* The index of prev's reusable Needs by hash (slot: Need + 1), built on the
 * first Need not found at its expected position. */
static int prev_index(struct bf_rollup *r, const struct bf_rollup_prev *prev)
{
    uint32_t want = 16;
    while (want < 2u * prev->n_needs + 2 && want < (1u << 30))
        want *= 2;
    if (r->pmask + 1 != want || !r->pidx) {
        free(r->pidx);
        r->pmask = 0;
        if (!(r->pidx = calloc(want, sizeof *r->pidx)))
            return -ENOMEM;
        r->pmask = want - 1;
    } else {
        memset(r->pidx, 0, (size_t)want * sizeof *r->pidx);
    }
    for (uint32_t k = 0; k < prev->n_needs; k++) {
        const struct bf_rollup_need_memo *m = &prev->needs[k];
        if (BF_ROLLUP_MEMO_ROW(m->row) == BF_ROLLUP_NO_ROW)
            continue;
        uint32_t i = (uint32_t)m->h & r->pmask;
        while (r->pidx[i])
            i = (i + 1) & r->pmask;
        r->pidx[i] = k + 1;
    }
    return 0;
}

static uint32_t prev_find(const struct bf_rollup *r, const struct bf_rollup_prev *prev, uint64_t h,
                          uint32_t len)
{
    for (uint32_t i = (uint32_t)h & r->pmask, v; (v = r->pidx[i]) != 0; i = (i + 1) & r->pmask)
        if (prev_match(prev, v - 1, h, len))
            return v - 1;
    return UINT32_MAX;
}

/* Need idx repeats prev's Need k byte for byte: its row values are that
 * Need's row's (it was the row's only Need), counted and merged as the
 * conversion would. */
static int reuse_need(struct bf_shm *s, struct bf_rollup *r, struct scratch *sc,
                      const struct bf_rollup_prev *prev, uint32_t k, bool fast, uint32_t idx,
                      uint32_t cluster_ref, const struct bf_rollup_limits *lim, char *err,
                      size_t errlen)
{
    uint32_t x = prev->needs[k].row, row = BF_ROLLUP_MEMO_ROW(x);
    struct bf_need_row tmp;
    const struct bf_need_row *o = &tmp;
    if (prev->rows)
        o = &prev->rows[row];
    else
        bf_needs_copy_rows(s, prev->rows_off + row, 1, &tmp);
    sc->last_clamped = (x & BF_ROLLUP_MEMO_CLAMPED) != 0;
    if (sc->last_clamped)
        r->priorities_clamped++;
    r->reused++;
    return place_row(r, sc, o->profile_ref, prev->fp_refs[row], o->group_ref, o->aggregate,
                     o->min_unit, fast ? row : UINT32_MAX, idx, cluster_ref, lim, err, errlen);
}

/* After a fast pass: whether a converted row has the key of a reused row
 * (the full conversion would have merged them). The converted rows' keys go
 * into a table sized for them (few, in cache; a deferring pass's own table
 * holds them too, but is sized for every row: the reused rows' lookups
 * would miss it), a slot: hash tag << 32 | row + 1, the row read only on a
 * tag match. The reused rows are read in order, in batches whose slots are
 * prefetched first. 1 = such a pair, 0 = none, -ENOMEM. */
#define CC_BATCH 16
static uint64_t row_key_hash(const struct bf_need_row *x)
{
    return dedup_hash((uint64_t)x->profile_ref << 32 | x->group_ref);
}

static int cross_collision(const struct bf_rollup *r)
{
    uint32_t nconv = 0;
    for (uint32_t i = 0; i < r->n; i++)
        nconv += (r->row_multi[i] & ROW_CONVERTED) != 0;
    if (!nconv || nconv == r->n)
        return 0;
    uint32_t want = 16;
    while (want < 2u * nconv)
        want *= 2;
    uint64_t *t = calloc(want, sizeof *t);
    if (!t)
        return -ENOMEM;
    uint32_t mask = want - 1;
    for (uint32_t i = 0; i < r->n; i++) {
        if (!(r->row_multi[i] & ROW_CONVERTED))
            continue;
        uint64_t h = row_key_hash(&r->rows[i]);
        uint32_t at = (uint32_t)h & mask;
        while (t[at])
            at = (at + 1) & mask;
        t[at] = (uint64_t)dedup_tag(h) << 32 | (i + 1);
    }
    int hit = 0;
    uint32_t rows[CC_BATCH];
    uint64_t hs[CC_BATCH];
    for (uint32_t i = 0; i < r->n && !hit;) {
        uint32_t nb = 0;
        for (; i < r->n && nb < CC_BATCH; i++) {
            if (r->row_multi[i] & ROW_CONVERTED)
                continue;
            rows[nb] = i;
            hs[nb] = row_key_hash(&r->rows[i]);
            __builtin_prefetch(&t[(uint32_t)hs[nb] & mask], 0);
            nb++;
        }
        for (uint32_t b = 0; b < nb && !hit; b++) {
            const struct bf_need_row *x = &r->rows[rows[b]];
            uint32_t at;
            hit = dedup_probe(t, mask, r->rows, hs[b], x->profile_ref, x->group_ref, &at) !=
                  UINT32_MAX;
        }
    }
    free(t);
    return hit;
}

/* One pass over the rollup. fast: reused rows skip the dedup table (see
 * place_row); the caller runs a second, plain pass when the fast one fails
 * or returns 1 (a converted row meets a reused one), so every result and
 * error is the plain pass's. */
static int convert_pass(struct bf_shm *s, const uint8_t *buf, size_t len, const char *cluster_id,
                        uint32_t cluster_ref, const struct bf_rollup_limits *lim,
                        const struct bf_rollup_digest_key *key, const struct bf_rollup_prev *prev,
                        bool fast, uint64_t strtab_base, struct bf_rollup *r, char *err,
                        size_t errlen)
{
    reset_result(r);
    r->strtab_added = strtab_base;
    r->reused = 0;
    uint32_t max_rows = lim->max_rows;
    if (!r->pcache && !(r->pcache = calloc(1, sizeof(struct pcache))))
        return -ENOMEM;
    /* one walk of the top level: the Needs counted, cluster_id, timestamp
     * (done by bf_rollup_digest_needs when it kept the Needs' hashes) */
    struct bf_rollup_top top;
    bool hashed = key && r->hashed_buf == buf && r->hashed_len == len;
    int rc = 0;
    if (hashed)
        top = (struct bf_rollup_top){.n_needs = r->hashed_n,
                                     .cluster_id = r->hashed_cid,
                                     .cluster_id_len = r->hashed_cid_len,
                                     .timestamp = r->hashed_ts};
    else
        rc = bf_rollup_scan_top(buf, len, &top);
    if (rc != 0) {
        ERR("not a ClusterCapacityNeeds message (malformed wire data)");
        return -EBADMSG;
    }
    const uint8_t *cid = top.cluster_id;
    size_t cid_len = top.cluster_id_len;
    int64_t ts = top.timestamp;
    uint32_t n_needs = top.n_needs;
    r->needs_in = n_needs;
    if (n_needs > max_rows) {
        ERR("%u needs in one rollup; the cluster may hold at most %u rows (--cluster-max-needs)",
            n_needs, max_rows);
        r->over_quota = "needs";
        return -E2BIG;
    }
    if ((rc = reserve_rows(r, n_needs ? n_needs : 1)))
        return rc;
    if (key && n_needs > r->needs_memo_cap) {
        struct bf_rollup_need_memo *nm = realloc(r->needs_memo, (size_t)n_needs * sizeof *nm);
        if (!nm)
            return -ENOMEM;
        r->needs_memo = nm;
        r->needs_memo_cap = n_needs;
    }
    if (!key || !prev || !prev->n_needs || !prev->n_rows)
        prev = NULL;
    fast = fast && prev;
    if (fast && prev->n_rows > r->prev_used_cap) {
        uint32_t *pu = realloc(r->prev_used, (size_t)prev->n_rows * sizeof *pu);
        if (!pu)
            return -ENOMEM;
        r->prev_used = pu;
        r->prev_used_cap = prev->n_rows;
    }
    if (fast)
        memset(r->prev_used, 0, (size_t)prev->n_rows * sizeof *r->prev_used);
    /* a large fast pass defers the dedup of converted rows (defer_push): a
     * probe of a table larger than the cache per row was a fifth of a 50K
     * conversion. Not when the previous rollup merged Needs (it likely will
     * again, and a hit costs the plain pass) */
    bool defer = fast &&
                 n_needs >= (lim->defer_min_needs ? lim->defer_min_needs : DEFER_MIN_NEEDS) &&
                 prev->n_rows == prev->n_needs;
    if (fast)
        r->dedup_deferred = defer;
    if ((rc = reset_dedup(r, n_needs)))
        return rc;
    r->timestamp_ns = ts;
    r->arrival_ns = bf_rollup_arrival(r->timestamp_ns, lim->recv_ns, &r->timestamp_clamped);
    if (cid_len && (cid_len != strlen(cluster_id) || memcmp(cid, cluster_id, cid_len) != 0)) {
        ERR("rollup cluster_id \"%.*s\" does not match the session's cluster \"%s\"",
            (int)(cid_len > 64 ? 64 : cid_len), (const char *)cid, cluster_id);
        return -EINVAL;
    }
    struct scratch sc;
    memset(&sc, 0, sizeof sc);
    sc.defer = defer;
    /* expect: the prev Need this one repeats when operators keep their order
     * (one past the last one reused, or past the last one tried); the hash
     * index finds moved Needs, and is given up when it finds almost nothing
     * (every Need changed: its lookups would only cost) */
    uint32_t idx = 0, expect = 0, lookups = 0, found = 0;
    bool indexed = false, unindexed = false;
    rc = 0;
    struct bf_pb_reader rd;
    struct bf_pb_field f;
    bf_pb_reader_init(&rd, buf, len);
    while (bf_pb_next(&rd, &f) == 1) {
        if (f.num != 3)
            continue;
        if (!key || idx >= n_needs) {
            rc = convert_need(s, r, &sc, f.p, f.len, idx, cluster_ref, lim, err, errlen);
        } else {
            uint64_t h = hashed && r->needs_memo[idx].len == f.len
                             ? r->needs_memo[idx].h
                             : XXH3_64bits_withSecret(f.p, f.len, key->secret, sizeof key->secret);
            uint32_t k = UINT32_MAX;
            if (prev) {
                /* operators keep their order: the Need after the last one
                 * reused first, then anywhere */
                if (expect < prev->n_needs && prev_match(prev, expect, h, (uint32_t)f.len)) {
                    k = expect;
                } else if (!unindexed && (lookups < PREV_LOOKUPS_MIN || found * 8 >= lookups)) {
                    /* no memory for the index: the Need is converted, as
                     * the full conversion would (which needs no index) */
                    if (!indexed && prev_index(r, prev) != 0)
                        unindexed = true;
                    else {
                        indexed = true;
                        k = prev_find(r, prev, h, (uint32_t)f.len);
                        lookups++;
                        found += k != UINT32_MAX;
                    }
                }
            }
            expect = (k != UINT32_MAX ? k : expect) + 1;
            if (k != UINT32_MAX) {
                rc = reuse_need(s, r, &sc, prev, k, fast, idx, cluster_ref, lim, err, errlen);
            } else {
                rc = convert_need(s, r, &sc, f.p, f.len, idx, cluster_ref, lim, err, errlen);
            }
            r->needs_memo[idx] = (struct bf_rollup_need_memo){
                h, (uint32_t)f.len, sc.last_row | (sc.last_clamped ? BF_ROLLUP_MEMO_CLAMPED : 0)};
        }
        if (rc)
            break;
        idx++;
    }
    free(sc.key);
    if (rc) {
        r->n = 0;
        return rc;
    }
    if (sc.defer) {
        defer_drain(r, &sc);
        if (sc.dup_seen)
            return 1;
    }
    if (fast && (rc = cross_collision(r)) != 0)
        return rc;
    /* a row two Needs merged into holds neither one's own values */
    for (uint32_t i = 0; key && i < idx && i < n_needs; i++) {
        struct bf_rollup_need_memo *m = &r->needs_memo[i];
        if (r->row_multi[BF_ROLLUP_MEMO_ROW(m->row)] & ROW_MERGED)
            m->row = (m->row & BF_ROLLUP_MEMO_CLAMPED) | BF_ROLLUP_NO_ROW;
    }
    return 0;
}

static int convert_rollup(struct bf_shm *s, const uint8_t *buf, size_t len, const char *cluster_id,
                          uint32_t cluster_ref, const struct bf_rollup_limits *lim,
                          const struct bf_rollup_digest_key *key, const struct bf_rollup_prev *prev,
                          struct bf_rollup *r, char *err, size_t errlen)
{
    r->dedup_deferred = r->plain_pass = false;
    int rc =
        convert_pass(s, buf, len, cluster_id, cluster_ref, lim, key, prev, true, 0, r, err, errlen);
    if (rc == 0 || !key || !prev) {
        r->hashed_buf = NULL; /* used (or not): never for other bytes later in this buffer */
        return rc;
    }
    r->plain_pass = true;
    /* the plain pass, starting from what the fast one added to the string
     * table (its interned strings stay; the quota counts them once) and
     * keeping the unknown fields it dropped (its profiles are cached now) */
    uint64_t unknown = r->unknown_fields;
    rc = convert_pass(s, buf, len, cluster_id, cluster_ref, lim, key, prev, false, r->strtab_added,
                      r, err, errlen);
    r->unknown_fields += unknown;
    r->hashed_buf = NULL;
    return rc;
}

int bf_rollup_convert(struct bf_shm *s, const uint8_t *buf, size_t len, const char *cluster_id,
                      uint32_t cluster_ref, const struct bf_rollup_limits *lim, struct bf_rollup *r,
                      char *err, size_t errlen)
{
    return convert_rollup(s, buf, len, cluster_id, cluster_ref, lim, NULL, NULL, r, err, errlen);
}

int bf_rollup_convert_incremental(struct bf_shm *s, const uint8_t *buf, size_t len,
                                  const char *cluster_id, uint32_t cluster_ref,
                                  const struct bf_rollup_limits *lim,
                                  const struct bf_rollup_digest_key *key,
                                  const struct bf_rollup_prev *prev, struct bf_rollup *r, char *err,
                                  size_t errlen)
{
    return convert_rollup(s, buf, len, cluster_id, cluster_ref, lim, key, prev, r, err, errlen);
}

/* ------------------------------------------------------------ rail 2 */

int bf_rail2_admit(bool guard_on, uint32_t *baseline, uint8_t *held, uint32_t new_rows)
{
    bool suspicious = guard_on && *baseline >= BF_RAIL2_MIN_ROWS &&
                      (uint64_t)new_rows * 1000 < (uint64_t)*baseline * BF_RAIL2_KEEP_PER_MILLE;
    if (!suspicious) {
        *baseline = new_rows;
        *held = 0;
        return BF_RAIL2_ACCEPT;
    }
    if (*held + 1 >= BF_RAIL2_CONFIRMATIONS) {
        *baseline = new_rows;
        *held = 0;
        return BF_RAIL2_ACCEPT_CONFIRMED;
    }
    (*held)++;
    return BF_RAIL2_HOLD;
}
