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
    uint32_t leaf, serial; /* serial 0: empty */
};

struct bf_engine_bulk {
    struct bf_engine *e;
    struct bulk_ent *tab;
    uint32_t mask, n;
    struct bf_engine_bulk_stats st;
};

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

static int tab_alloc(struct bf_engine_bulk *b, uint32_t slots)
{
    b->tab = calloc(slots, sizeof *b->tab);
    if (!b->tab)
        return -ENOMEM;
    b->mask = slots - 1;
    b->n = 0;
    return 0;
}

static struct bulk_ent *tab_probe(struct bf_engine_bulk *b, const struct bulk_key *k)
{
    uint64_t h = XXH3_64bits(k, sizeof *k);
    for (uint32_t i = (uint32_t)h & b->mask;; i = (i + 1) & b->mask) {
        struct bulk_ent *t = &b->tab[i];
        if (!t->serial || memcmp(&t->k, k, sizeof *k) == 0)
            return t;
    }
}

/* Doubles the table (keeps every entry; a dead one is checked on use). */
static int tab_grow(struct bf_engine_bulk *b)
{
    struct bulk_ent *old = b->tab;
    uint32_t n = b->mask + 1;
    if (n > (UINT32_MAX >> 2) || tab_alloc(b, n * 2)) {
        b->tab = old;
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < n; i++) {
        if (!old[i].serial)
            continue;
        *tab_probe(b, &old[i].k) = old[i];
        b->n++;
    }
    free(old);
    return 0;
}

int bf_engine_bulk_begin(struct bf_engine *e, uint32_t n_hint, struct bf_engine_bulk **out)
{
    if (!e || !out)
        return -EINVAL;
    struct bf_engine_bulk *b = calloc(1, sizeof *b);
    if (!b)
        return -ENOMEM;
    b->e = e;
    /* the realistic catalogs give ~1 shape per 6-8 machines; start at 1/8 */
    uint32_t slots = 1024;
    while (slots < n_hint / 4 && slots < (1u << 24))
        slots <<= 1;
    if (tab_alloc(b, slots)) {
        free(b);
        return -ENOMEM;
    }
    *out = b;
    return 0;
}

int bf_engine_bulk_upsert(struct bf_engine_bulk *b, uint32_t slot, const struct bf_engine_machine *m)
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
    struct bulk_ent *t = tab_probe(b, &k);
    uint32_t li;
    if (t->serial && bfe_leaf_serial(e, t->leaf) == t->serial) {
        li = t->leaf;
        b->st.shared++;
    } else {
        int err = 0;
        li = bfe_leaf_resolve_slow(e, m, &err);
        if (err)
            return err;
        b->st.resolved++;
        if (t->serial || b->n + 1 < b->mask) { /* keep one slot empty: probes end */
            b->n += !t->serial;
            t->k = k;
            t->leaf = li;
            t->serial = bfe_leaf_serial(e, li);
        }
    }
    int rc = bfe_upsert_at(e, slot, m, li);
    if (rc)
        return rc;
    b->st.upserts++;
    if (b->n * 2 > b->mask)
        (void)tab_grow(b); /* out of memory: the table stays; it only gets slower */
    return 0;
}

void bf_engine_bulk_end(struct bf_engine_bulk *b, struct bf_engine_bulk_stats *st)
{
    if (st)
        *st = b ? b->st : (struct bf_engine_bulk_stats){0};
    if (!b)
        return;
    free(b->tab);
    free(b);
}
