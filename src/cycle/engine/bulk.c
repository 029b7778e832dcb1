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
 * one hash and one fixed-size compare, and a new leaf of a known machine
 * profile takes the profile's class from a second cache (no label-set
 * interning, no class look-up).
 * The leaf found is taken only while it is live with the serial it had
 * (a leaf emptied by a later upsert of the load is freed and its index
 * reused). Placement (id store, counts) is bf_engine_upsert's own code,
 * except that a slot is appended to its leaf's (and release) slot list even
 * when it does not sort last (bfe_upsert_append; i18-restart3, stop 28): the
 * appliance's records are not in id order, and a sorted insert into a big
 * leaf costs two binary searches of random id reads and a memmove. The
 * lists left out of order are sorted once at bf_engine_bulk_end, so the
 * state then equals the per-record upserts'.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
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

/* A direct-mapped table of shapes (cache-resident, 160 KiB: records of one
 * shape tend to come close together in slot order). A table of every shape
 * of the load (open-addressed, ~60K shapes at 500K machines) was tried and
 * measured slower: its random reads and first-touch pages cost more than the
 * ~20K resolves it saves (docs/performance.md, "Restart bulk load"). */
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

struct bf_engine_bulk {
    struct bf_engine *e;
    struct bf_engine_bulk_stats st;
    /* the lists left out of order (bfe_upsert_append), sorted at the end:
     * leaves by index (one bit each; an index whose leaf was freed and
     * reused is sorted all the same), the release lists */
    uint64_t *unsorted;
    uint32_t n_unsorted_words;
    unsigned release_unsorted;
    uint32_t *marked; /* indices with their bit set, in marking order */
    uint32_t n_marked, cap_marked;
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

/* Remembers the lists an append left out of order. Without the memory to
 * remember a leaf, its list is sorted at once. */
static void mark_unsorted(struct bf_engine_bulk *b, uint32_t li, unsigned u)
{
    b->release_unsorted |= u & ~BFE_UNSORTED_LEAF;
    if (!(u & BFE_UNSORTED_LEAF))
        return;
    uint32_t w = li / 64;
    if (w >= b->n_unsorted_words) {
        uint32_t nw = b->n_unsorted_words ? b->n_unsorted_words : 64;
        while (nw <= w)
            nw *= 2;
        uint64_t *n = realloc(b->unsorted, (size_t)nw * sizeof *n);
        if (!n) {
            bfe_sl_sort_leaf(b->e, li);
            return;
        }
        memset(n + b->n_unsorted_words, 0, (size_t)(nw - b->n_unsorted_words) * sizeof *n);
        b->unsorted = n;
        b->n_unsorted_words = nw;
    }
    uint64_t bit = 1ULL << (li % 64);
    if (b->unsorted[w] & bit)
        return;
    if (b->n_marked == b->cap_marked) {
        uint32_t nc = b->cap_marked ? b->cap_marked * 2 : 256;
        uint32_t *n = realloc(b->marked, (size_t)nc * sizeof *n);
        if (!n) {
            bfe_sl_sort_leaf(b->e, li);
            return;
        }
        b->marked = n;
        b->cap_marked = nc;
    }
    b->unsorted[w] |= bit;
    b->marked[b->n_marked++] = li;
}

int bf_engine_bulk_begin(struct bf_engine *e, uint32_t n_hint, struct bf_engine_bulk **out)
{
    if (!e || !out)
        return -EINVAL;
    struct bf_engine_bulk *b = calloc(1, sizeof *b);
    if (!b)
        return -ENOMEM;
    b->e = e;
    /* the pages the load writes, faulted in bulk (the tables are fixed-size) */
    bfe_mirror_populate(e, n_hint);
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
    struct bulk_ent *f = &b->l1[XXH3_64bits(&k, sizeof k) & (BULK_L1 - 1)];
    uint32_t li;
    if (f->serial && memcmp(&f->k, &k, sizeof k) == 0 && bfe_leaf_serial(e, f->leaf) == f->serial) {
        li = f->leaf;
        b->st.shared++;
    } else {
        int err = 0;
        uint32_t cls = class_of(b, m, &err);
        li = err ? NONE32 : bfe_leaf_resolve_cls(e, m, cls, &err);
        if (err)
            return err;
        b->st.resolved++;
        f->k = k;
        f->leaf = li;
        f->serial = bfe_leaf_serial(e, li);
    }
    unsigned u = 0;
    int rc = bfe_upsert_append(e, slot, m, li, &u);
    if (u)
        mark_unsorted(b, li, u);
    if (rc)
        return rc;
    b->st.upserts++;
    return 0;
}

void bf_engine_bulk_end(struct bf_engine_bulk *b, struct bf_engine_bulk_stats *st)
{
    if (b) {
        bfe_mirror_populate_end(b->e);
        for (uint32_t i = 0; i < b->n_marked; i++)
            bfe_sl_sort_leaf(b->e, b->marked[i]);
        for (int ri = 0; ri < 2; ri++)
            if (b->release_unsorted & (BFE_UNSORTED_RELEASE << ri))
                bfe_sl_sort_release(b->e, ri);
        b->st.sorted = b->n_marked;
        free(b->unsorted);
        free(b->marked);
    }
    if (st)
        *st = b ? b->st : (struct bf_engine_bulk_stats){0};
    free(b);
}
