/*
 * bulk.c — the mirror's bulk load (include/bigfleet/engine.h, "bulk load";
 * i18-restart, stop 27).
 *
 * A restarted cycle process upserts every record. bf_engine_upsert resolves
 * each machine's leaf through a small direct-mapped memo keyed by content
 * (an XXH3 over the scalars and addresses, then every string compared byte
 * by byte), and a memo miss costs a full resolve (label-set, class and leaf
 * look-ups with every string hashed and interned). Here the shape of a
 * machine is its leaf inputs with strings by address, so a repeated shape is
 * one short hash and one fixed-size compare; an open-addressed table sized
 * from the record count holds every shape of the load (no conflict misses).
 * The leaf found is taken only while it is live with the serial it had
 * (a leaf emptied by a later upsert of the load is freed and its index
 * reused). Placement (id store, sorted insert, counts) is bf_engine_upsert's
 * own code (bfe_upsert_at), so the state equals the per-record upserts'.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#include "cycle/engine/engine_internal.h"

/* Everything leaf_resolve reads, strings by address. */
struct bulk_key {
    uint8_t state, ct, ipb, rpb;
    int32_t prio;
    uint32_t n_labels;
    uint32_t pad;
    uint64_t glen;
    double price, prob;
    bf_vec alloc;
    const void *p[6];
};

struct bulk_ent {
    struct bulk_key k;
    uint32_t leaf, serial; /* the leaf while it is live with this serial */
};

/* A small direct-mapped front table (cache-resident: records of one shape
 * tend to come close together in slot order) over an open-addressed index
 * of every shape of the load: 8-byte slots (a hash tag and the shape's
 * index in a dense array), so a new shape's probe reads one small word and
 * only a shape seen before reads its (random) entry. */
#define BULK_L1 1024

/* The class part of a shape (what bfe_class_get reads), by address too:
 * a direct-mapped cache of the classes the load took (few: one per machine
 * profile), so a new leaf of a known profile skips the label set's
 * interning and the class look-up. */
#define BULK_CLS 2048

struct cls_key {
    const void *it, *zone, *labels;
    uint64_t n_labels;
    bf_vec alloc;
};

struct cls_ent {
    struct cls_key k;
    uint32_t cls, gen; /* gen 0: empty */
};

struct bidx {
    uint32_t tag; /* the hash's low 32 bits */
    uint32_t ent; /* index + 1 into ents; 0 = empty */
};

struct bf_engine_bulk {
    struct bf_engine *e;
    struct bidx *idx;
    uint32_t mask;
    struct bulk_ent *ents;
    uint32_t n_ents, cap_ents;
    struct bf_engine_bulk_stats st;
    struct bulk_ent l1[BULK_L1];
    struct cls_ent cls[BULK_CLS];
};

/* m's class with one reference taken (bfe_class_get's result). */
static uint32_t class_of(struct bf_engine_bulk *b, const struct bf_engine_machine *m, int *err)
{
    struct bf_engine *e = b->e;
    struct cls_key k;
    memset(&k, 0, sizeof k);
    k.it = m->instance_type;
    k.zone = m->zone;
    k.labels = m->labels;
    k.n_labels = m->n_labels;
    k.alloc = m->allocatable;
    struct cls_ent *c = &b->cls[XXH3_64bits(&k, sizeof k) & (BULK_CLS - 1)];
    *err = 0;
    if (c->gen && memcmp(&c->k, &k, sizeof k) == 0 && bfe_class_retain(e, c->cls, c->gen))
        return c->cls;
    uint32_t cls = bfe_class_get(e, m, err);
    if (*err)
        return NONE32;
    c->k = k;
    c->cls = cls;
    c->gen = e->cls[cls].gen;
    return cls;
}

static void key_of(const struct bf_engine_machine *m, struct bulk_key *k)
{
    memset(k, 0, sizeof *k); /* padding included: keys are compared as bytes */
    k->state = m->state;
    k->ct = m->capacity_type;
    k->ipb = m->assigned_ipb;
    k->rpb = m->assigned_rpb;
    k->prio = m->assigned_priority;
    k->n_labels = m->n_labels;
    k->glen = m->assigned_group_len;
    k->price = m->price_per_hour;
    k->prob = m->interruption_probability;
    k->alloc = m->allocatable;
    k->p[0] = m->instance_type;
    k->p[1] = m->zone;
    k->p[2] = m->labels;
    k->p[3] = m->cluster;
    k->p[4] = m->assigned_fingerprint;
    k->p[5] = m->assigned_group;
}

static uint64_t key_hash(const struct bulk_key *k)
{
    return XXH3_64bits(k, sizeof *k);
}

/* The index slot holding k's shape, or the empty slot where it goes. */
static struct bidx *idx_probe(struct bf_engine_bulk *b, const struct bulk_key *k, uint64_t h)
{
    uint32_t tag = (uint32_t)h;
    for (uint32_t i = (uint32_t)(h >> 32) & b->mask;; i = (i + 1) & b->mask) {
        struct bidx *x = &b->idx[i];
        if (!x->ent || (x->tag == tag && memcmp(&b->ents[x->ent - 1].k, k, sizeof *k) == 0))
            return x;
    }
}

static int idx_alloc(struct bf_engine_bulk *b, uint32_t slots)
{
    struct bidx *n = calloc(slots, sizeof *n);
    if (!n)
        return -ENOMEM;
    free(b->idx);
    b->idx = n;
    b->mask = slots - 1;
    for (uint32_t i = 0; i < b->n_ents; i++) {
        uint64_t h = key_hash(&b->ents[i].k);
        struct bidx *x = idx_probe(b, &b->ents[i].k, h);
        x->tag = (uint32_t)h;
        x->ent = i + 1;
    }
    return 0;
}

/* Records a new shape in index slot x; false when out of memory (then the
 * shape is simply not remembered). */
static bool remember(struct bf_engine_bulk *b, struct bidx *x, uint64_t h, const struct bulk_ent *v)
{
    if (b->n_ents == b->cap_ents) {
        uint32_t nc = b->cap_ents ? b->cap_ents * 2 : 1024;
        struct bulk_ent *ne = realloc(b->ents, (size_t)nc * sizeof *ne);
        if (!ne)
            return false;
        b->ents = ne;
        b->cap_ents = nc;
    }
    b->ents[b->n_ents++] = *v;
    x->tag = (uint32_t)h;
    x->ent = b->n_ents;
    /* at most half full; out of memory: stays as it is (probes still end
     * while a slot is empty, and a full index takes no more shapes) */
    if (b->n_ents * 2 > b->mask && b->mask < (1u << 30))
        (void)idx_alloc(b, (b->mask + 1) * 2);
    return true;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

/* Faults in the whole pages of [p, p + len) in one call (a load touches
 * every page of the per-slot columns; one trap per page costs more, most
 * of all in a virtual machine). A hint: failure (an older kernel) is fine,
 * and the contents do not change. */
static void prefault(void *p, size_t len)
{
    long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0 || !p || len < (size_t)pg)
        return;
    uintptr_t a = ((uintptr_t)p + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1);
    uintptr_t z = ((uintptr_t)p + len) & ~((uintptr_t)pg - 1);
    if (z > a)
        (void)madvise((void *)a, z - a, MADV_POPULATE_WRITE);
}

/* Sizes what a load of n machines grows, once: the per-slot columns' pages,
 * the id buffer (~24 bytes an id) and the leaf array (~1 leaf per 8
 * machines); growing them by doubling copies them. Hints only. */
static void presize(struct bf_engine *e, uint32_t n)
{
    if (n > e->cap)
        n = e->cap;
    prefault(e->present, n);
    prefault(e->in_release, n);
    prefault(e->id_off, (size_t)n * sizeof *e->id_off);
    prefault(e->id_len, (size_t)n * sizeof *e->id_len);
    prefault(e->idpfx, (size_t)n * sizeof *e->idpfx);
    prefault(e->idpfx2, (size_t)n * sizeof *e->idpfx2);
    prefault(e->idle_since, (size_t)n * sizeof *e->idle_since);
    size_t want = e->idbuf_len + (size_t)n * 24;
    if (want > e->idbuf_cap && want <= UINT32_MAX) {
        char *nb = realloc(e->idbuf, want);
        if (nb) {
            e->idbuf = nb;
            e->idbuf_cap = want;
        }
    }
    (void)GROW(e->leaves, e->cap_leaves, e->n_leaves + n / 8);
}

int bf_engine_bulk_begin(struct bf_engine *e, uint32_t n_hint, struct bf_engine_bulk **out)
{
    if (!e || !out)
        return -EINVAL;
    struct bf_engine_bulk *b = calloc(1, sizeof *b);
    if (!b)
        return -ENOMEM;
    b->e = e;
    /* the realistic catalogs give ~1 shape per 8 machines: n_hint/8 shapes
     * with the index at most half full */
    uint32_t slots = 1024;
    while (slots < n_hint / 4 && slots < (1u << 24))
        slots <<= 1;
    uint32_t cap = slots / 2;
    b->ents = malloc((size_t)cap * sizeof *b->ents);
    if (!b->ents || idx_alloc(b, slots)) {
        free(b->ents);
        free(b);
        return -ENOMEM;
    }
    b->cap_ents = cap;
    presize(e, n_hint);
    *out = b;
    return 0;
}

int bf_engine_bulk_upsert(struct bf_engine_bulk *b, uint32_t slot,
                          const struct bf_engine_machine *m)
{
    if (!b)
        return -EINVAL;
    struct bf_engine *e = b->e;
    if (!m || slot >= e->cap || !m->id)
        return -EINVAL;
    if (!bfe_machine_eligible(m)) {
        int rc = bfe_upsert_at(e, slot, m, NONE32);
        b->st.upserts += rc == 0;
        return rc;
    }
    struct bulk_key k;
    key_of(m, &k);
    uint64_t h = key_hash(&k);
    struct bulk_ent *f = &b->l1[(h >> 22) & (BULK_L1 - 1)];
    uint32_t li;
    if (f->serial && memcmp(&f->k, &k, sizeof k) == 0 && bfe_leaf_serial(e, f->leaf) == f->serial) {
        li = f->leaf;
        b->st.shared++;
    } else {
        struct bidx *x = idx_probe(b, &k, h);
        struct bulk_ent *t = x->ent ? &b->ents[x->ent - 1] : NULL;
        if (t && bfe_leaf_serial(e, t->leaf) == t->serial) {
            li = t->leaf;
            b->st.shared++;
        } else {
            int err = 0;
            uint32_t cls = class_of(b, m, &err);
            if (!err)
                li = bfe_leaf_resolve_cls(e, m, cls, &err);
            if (err)
                return err;
            b->st.resolved++;
            struct bulk_ent v = {.k = k, .leaf = li, .serial = bfe_leaf_serial(e, li)};
            if (t)
                *t = v; /* its leaf was freed: the new one */
            else if (b->n_ents + 1 < b->mask)
                (void)remember(b, x, h, &v);
        }
        f->k = k;
        f->leaf = li;
        f->serial = bfe_leaf_serial(e, li);
    }
    int rc = bfe_upsert_at(e, slot, m, li);
    if (rc)
        return rc;
    b->st.upserts++;
    return 0;
}

void bf_engine_bulk_end(struct bf_engine_bulk *b, struct bf_engine_bulk_stats *st)
{
    if (st)
        *st = b ? b->st : (struct bf_engine_bulk_stats){0};
    if (!b)
        return;
    free(b->idx);
    free(b->ents);
    free(b);
}
