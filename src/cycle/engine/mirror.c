/*
 * mirror.c — the engine's private columnar mirror of the inventory: per-slot
 * columns, interned label sets, machine classes, index leaves and the leaf
 * lists every phase walks (by state, by (state, instance type), by (cluster,
 * state), Creating by fingerprint, Configured by assigned priority), plus the
 * idle-release sets.
 *
 * Design notes. bf_engine_upsert()/bf_engine_remove() are the only writers;
 * each costs O(log n) (a hash lookup for the class and the leaf, one sorted
 * insert/remove in the leaf's slot list). Empty leaves and unused classes are
 * freed at once and their ids recycled (a class's `gen` changes so compiled
 * profiles' match caches notice). Strings are refcounted by the leaves,
 * classes and label sets that use them. See engine_internal.h for the model.
 *
 * The mirror also versions what the phases' memos read: the leaf lists'
 * versions and the acquirable supply versions (a clock per instance type,
 * bfe_acq_ver) that the incremental pre-pass (credit.c) compares. It calls
 * no phase: every file of the engine calls down to it.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <xxhash.h>

#include "cycle/engine/engine_internal.h"

/* ------------------------------------------------------------------ big arrays */

/*
 * The mirror's big arrays -- the per-slot columns, the id buffer and the
 * leaves -- are first written by a restarted cycle's full rescan, one page
 * at a time: at 500K machines ~40 MB, ~10K first-touch faults of 4 KiB, and
 * a fault costs ~15 us on the appliance's VM (docs/performance.md,
 * "i18-restart3 (stop 28)"). An array of 2 MiB or more is therefore its own
 * anonymous mapping, 2 MiB aligned and advised per bf_engine_set_huge_pages
 * (on: MADV_HUGEPAGE, one fault per 2 MiB; off, the default: MADV_NOHUGEPAGE,
 * because huge pages stall periodically on the appliance's VM, engine.h).
 * Smaller arrays stay on the heap. Which of the two holds an array follows
 * from its size in bytes alone (big_is), so the callers pass the size they
 * allocated with. The advice is a hint: without THP the mapping takes 4 KiB
 * pages, as the heap would.
 */

static bool big_is(size_t n)
{
    return n >= BFE_HUGE_PAGE;
}

static size_t big_len(size_t n)
{
    return bfe_huge_round(n);
}

/* n zeroed bytes (at least one); NULL when out of memory. */
static void *big_alloc(size_t n)
{
    if (!big_is(n))
        return calloc(1, n ? n : 1);
    size_t len = big_len(n);
    uint8_t *p =
        mmap(NULL, len + BFE_HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    uint8_t *a = (uint8_t *)bfe_huge_round((uintptr_t)p);
    if (a > p)
        munmap(p, (size_t)(a - p));
    if (a + len < p + len + BFE_HUGE_PAGE)
        munmap(a + len, (size_t)(p + len + BFE_HUGE_PAGE - (a + len)));
    bf_engine_advise_pages(a, len); /* a hint (EINVAL without THP) */
    return a;
}

/* Frees what big_alloc/big_realloc gave for n bytes. */
static void big_free(void *p, size_t n)
{
    if (!p)
        return;
    if (big_is(n))
        munmap(p, big_len(n));
    else
        free(p);
}

/* p (n bytes) resized to nn >= n bytes, the first n kept; NULL when out of
 * memory (p untouched). A mapping's pages move to the new one (mremap: no
 * copy, no page faulted again). */
static void *big_realloc(void *p, size_t n, size_t nn)
{
    if (!big_is(nn))
        return realloc(p, nn ? nn : 1);
    if (p && big_is(n) && big_len(n) == big_len(nn))
        return p;
    void *q = big_alloc(nn);
    if (!q)
        return NULL;
    if (p && big_is(n)) {
        if (mremap(p, big_len(n), big_len(n), MREMAP_MAYMOVE | MREMAP_FIXED, q) == MAP_FAILED) {
            big_free(q, nn);
            return NULL;
        }
        return q;
    }
    if (p)
        memcpy(q, p, n);
    big_free(p, n);
    return q;
}

static size_t cols_layout(size_t n, size_t off[8]);

/* The first size in bytes of a growing array of the mirror (the id buffer,
 * the leaves): `small`, or 2 MiB in an engine whose per-slot columns are big
 * (>= 2 MiB, their own mapping: a mirror of ~50K machines or more fills it in its first
 * load, and growing through the heap sizes first would fault every page of
 * each copy). */
static size_t big_first(const struct bf_engine *e, size_t small)
{
    size_t off[8];
    return big_is(cols_layout(e->cap, off)) && small < BFE_HUGE_PAGE ? BFE_HUGE_PAGE : small;
}

/* GROW's doubling (bfe_grow), from `first` elements, for an array of
 * big_alloc. */
static int big_grow(void **p, uint32_t *cap, uint32_t need, size_t elsz, size_t first)
{
    if (need <= *cap)
        return 0;
    size_t nc = *cap ? *cap : first;
    while (nc < need)
        nc *= 2;
    if (nc > UINT32_MAX || nc > SIZE_MAX / elsz)
        return -ENOMEM;
    void *q = big_realloc(*p, (size_t)*cap * elsz, nc * elsz);
    if (!q)
        return -ENOMEM;
    *p = q;
    *cap = (uint32_t)nc;
    return 0;
}

/* ------------------------------------------------------------------ ids */

int bfe_id_cmp(const struct bf_engine *e, uint32_t a, uint32_t b)
{
    if (a == b)
        return 0;
    uint64_t pa = e->idpfx[a], pb = e->idpfx[b];
    if (pa != pb)
        return pa < pb ? -1 : 1;
    pa = e->idpfx2[a];
    pb = e->idpfx2[b];
    if (pa != pb)
        return pa < pb ? -1 : 1;
    uint32_t la = e->id_len[a], lb = e->id_len[b];
    if (la > 16 && lb > 16) {
        uint32_t m = la < lb ? la : lb;
        int c = memcmp(e->idbuf + e->id_off[a] + 16, e->idbuf + e->id_off[b] + 16, m - 16);
        if (c)
            return c;
    }
    if (la != lb)
        return la < lb ? -1 : 1;
    return a < b ? -1 : 1; /* duplicate ids in two slots: slot order keeps it total */
}

int bfe_sl_cmp_id(const void *ctx, uint32_t a, uint32_t b)
{
    return bfe_id_cmp(ctx, a, b);
}

static int sl_cmp_release(const void *ctx, uint32_t a, uint32_t b)
{
    const struct bf_engine *e = ctx;
    if (e->idle_since[a] != e->idle_since[b])
        return e->idle_since[a] < e->idle_since[b] ? -1 : 1;
    return bfe_id_cmp(e, a, b);
}

static uint64_t id_prefix(const char *s, size_t len, size_t from)
{
    uint64_t p = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (from + 8 <= len) { /* eight whole bytes: one big-endian load */
        memcpy(&p, s + from, sizeof p);
        return __builtin_bswap64(p);
    }
#endif
    for (size_t i = from; i < from + 8; i++)
        p = (p << 8) | (i < len ? (unsigned char)s[i] : 0);
    return p;
}

static int id_store(struct bf_engine *e, uint32_t slot, const char *id, size_t len)
{
    if (e->present[slot] && e->id_len[slot] == len &&
        memcmp(e->idbuf + e->id_off[slot], id, len) == 0)
        return 0;
    if (e->present[slot])
        e->idbuf_waste += e->id_len[slot] + 1;
    if (e->idbuf_len + len + 1 > e->idbuf_cap) {
        /* compact when more than half is dead, else grow */
        if (e->idbuf_waste > e->idbuf_len / 2) {
            size_t need = e->idbuf_len - e->idbuf_waste + len + 1;
            size_t nc = e->idbuf_cap;
            while (nc < need * 2)
                nc *= 2;
            if (nc > UINT32_MAX)
                return -ENOMEM;
            char *nb = big_alloc(nc);
            if (!nb)
                return -ENOMEM;
            size_t o = 0;
            for (uint32_t s = 0; s < e->cap; s++) {
                if (!e->present[s] || s == slot)
                    continue;
                memcpy(nb + o, e->idbuf + e->id_off[s], e->id_len[s] + 1);
                e->id_off[s] = (uint32_t)o;
                o += e->id_len[s] + 1;
            }
            big_free(e->idbuf, e->idbuf_cap);
            e->idbuf = nb;
            e->idbuf_cap = nc;
            e->idbuf_len = o;
            e->idbuf_waste = 0;
            e->idbuf_pop = 0; /* a new buffer */
        } else {
            size_t nc = e->idbuf_cap ? e->idbuf_cap : big_first(e, 1 << 16);
            while (nc < e->idbuf_len + len + 1)
                nc *= 2;
            if (nc > UINT32_MAX)
                return -ENOMEM;
            char *nb = big_realloc(e->idbuf, e->idbuf_cap, nc);
            if (!nb)
                return -ENOMEM;
            e->idbuf = nb;
            e->idbuf_cap = nc;
        }
    }
    if (e->pop_ahead && e->idbuf_len + len + 1 > e->idbuf_pop) {
        /* a bulk load: the next BFE_POP_STEP bytes (at most) in one call */
        size_t from = e->idbuf_pop > e->idbuf_len ? e->idbuf_pop : e->idbuf_len;
        size_t to = from + BFE_POP_STEP < e->idbuf_cap ? from + BFE_POP_STEP : e->idbuf_cap;
        if (to < e->idbuf_len + len + 1)
            to = e->idbuf_len + len + 1;
        bf_engine_populate(e->idbuf + from, to - from);
        e->idbuf_pop = to;
    }
    memcpy(e->idbuf + e->idbuf_len, id, len);
    e->idbuf[e->idbuf_len + len] = 0;
    e->id_off[slot] = (uint32_t)e->idbuf_len;
    e->id_len[slot] = (uint16_t)len;
    e->idpfx[slot] = id_prefix(id, len, 0);
    e->idpfx2[slot] = id_prefix(id, len, 8);
    e->idbuf_len += len + 1;
    return 0;
}

/* ------------------------------------------------------------------ label sets */

struct lskey {
    const uint32_t *kv;
    uint32_t n;
};

static uint64_t lset_hash_of(const void *ctx, uint32_t id)
{
    const struct bf_engine *e = ctx;
    return e->lsets[id].hash;
}

static bool lset_eq(const void *ctx, uint32_t id, const void *key)
{
    const struct bf_engine *e = ctx;
    const struct lskey *k = key;
    const struct labelset *ls = &e->lsets[id];
    return ls->n == k->n && memcmp(ls->kv, k->kv, (size_t)k->n * 2 * sizeof(uint32_t)) == 0;
}

static void lset_release(struct bf_engine *e, uint32_t id)
{
    if (id == NONE32)
        return;
    struct labelset *ls = &e->lsets[id];
    if (--ls->refs)
        return;
    bfe_idtab_remove(&e->lset_tab, ls->hash, id, lset_hash_of, e);
    for (uint32_t i = 0; i < 2 * ls->n; i++)
        bfe_intern_release(&e->in, ls->kv[i]);
    free(ls->kv);
    ls->kv = NULL;
    ls->n = 0;
    if (!GROW(e->lset_free, e->cap_lset_free, e->n_lset_free + 1))
        e->lset_free[e->n_lset_free++] = id;
}

static void kv_sort(uint32_t *kv, uint32_t n)
{
    /* insertion sort by key id, keeping the last value of a repeated key */
    for (uint32_t i = 1; i < n; i++) {
        uint32_t k = kv[2 * i], v = kv[2 * i + 1];
        uint32_t j = i;
        while (j > 0 && kv[2 * (j - 1)] > k) {
            kv[2 * j] = kv[2 * (j - 1)];
            kv[2 * j + 1] = kv[2 * (j - 1) + 1];
            j--;
        }
        kv[2 * j] = k;
        kv[2 * j + 1] = v;
    }
}

/* Resolves the machine's labels to a label-set id with one new reference
 * (NONE32 when there are no labels). *err set on ENOMEM. */
static uint32_t lset_get(struct bf_engine *e, const struct bf_engine_machine *m, int *err)
{
    *err = 0;
    if (m->n_labels == 0)
        return NONE32;
    uint32_t n = m->n_labels;
    uint32_t stackbuf[64];
    uint32_t *kv = 2 * n <= 64 ? stackbuf : malloc((size_t)n * 2 * sizeof(uint32_t));
    if (!kv) {
        *err = -ENOMEM;
        return NONE32;
    }
    /* first try without creating strings */
    bool all = true;
    for (uint32_t i = 0; i < n && all; i++) {
        const char *k = m->labels[i].key ? m->labels[i].key : "";
        const char *v = m->labels[i].value ? m->labels[i].value : "";
        kv[2 * i] = bfe_intern_find(&e->in, k, strlen(k));
        kv[2 * i + 1] = bfe_intern_find(&e->in, v, strlen(v));
        if (kv[2 * i] == NONE32 || kv[2 * i + 1] == NONE32)
            all = false;
    }
    uint32_t id = NONE32, nn = n;
    if (all) {
        /* stable order by key; a repeated key keeps its last value */
        kv_sort(kv, n);
        nn = 0;
        for (uint32_t i = 0; i < n; i++) {
            if (nn && kv[2 * (nn - 1)] == kv[2 * i]) {
                kv[2 * (nn - 1) + 1] = kv[2 * i + 1];
                continue;
            }
            kv[2 * nn] = kv[2 * i];
            kv[2 * nn + 1] = kv[2 * i + 1];
            nn++;
        }
        struct lskey key = {kv, nn};
        uint64_t h = bfe_hash_bytes(kv, (size_t)nn * 2 * sizeof(uint32_t), 7);
        id = bfe_idtab_find(&e->lset_tab, h, lset_eq, e, &key);
        if (id != NONE32) {
            e->lsets[id].refs++;
            goto out;
        }
    }
    /* create: intern every string (one ref each, owned by the set) */
    for (uint32_t i = 0; i < n; i++) {
        const char *k = m->labels[i].key ? m->labels[i].key : "";
        const char *v = m->labels[i].value ? m->labels[i].value : "";
        kv[2 * i] = bfe_intern(&e->in, k, strlen(k));
        kv[2 * i + 1] = bfe_intern(&e->in, v, strlen(v));
        if (kv[2 * i] == NONE32 || kv[2 * i + 1] == NONE32) {
            for (uint32_t j = 0; j <= i; j++) {
                bfe_intern_release(&e->in, kv[2 * j]);
                bfe_intern_release(&e->in, kv[2 * j + 1]);
            }
            *err = -ENOMEM;
            goto out;
        }
    }
    kv_sort(kv, n);
    nn = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (nn && kv[2 * (nn - 1)] == kv[2 * i]) {
            /* drop the earlier value's reference and the duplicate key's */
            bfe_intern_release(&e->in, kv[2 * (nn - 1) + 1]);
            bfe_intern_release(&e->in, kv[2 * i]);
            kv[2 * (nn - 1) + 1] = kv[2 * i + 1];
            continue;
        }
        kv[2 * nn] = kv[2 * i];
        kv[2 * nn + 1] = kv[2 * i + 1];
        nn++;
    }
    {
        struct lskey key = {kv, nn};
        uint64_t h = bfe_hash_bytes(kv, (size_t)nn * 2 * sizeof(uint32_t), 7);
        id = bfe_idtab_find(&e->lset_tab, h, lset_eq, e, &key);
        if (id != NONE32) {
            /* existed after all (strings were new only to this call) */
            for (uint32_t i = 0; i < 2 * nn; i++)
                bfe_intern_release(&e->in, kv[i]);
            e->lsets[id].refs++;
            goto out;
        }
        uint32_t *copy = malloc((size_t)nn * 2 * sizeof(uint32_t));
        if (!copy)
            goto fail;
        memcpy(copy, kv, (size_t)nn * 2 * sizeof(uint32_t));
        if (e->n_lset_free) {
            id = e->lset_free[--e->n_lset_free];
        } else {
            if (GROW(e->lsets, e->cap_lsets, e->n_lsets + 1)) {
                free(copy);
                goto fail;
            }
            id = e->n_lsets++;
        }
        e->lsets[id] = (struct labelset){.hash = h, .n = nn, .refs = 1, .kv = copy};
        if (bfe_idtab_insert(&e->lset_tab, h, id, lset_hash_of, e)) {
            free(copy);
            e->lsets[id] = (struct labelset){0};
            e->lset_free[e->n_lset_free++] = id;
            id = NONE32;
            goto fail;
        }
    }
    goto out;
fail:
    for (uint32_t i = 0; i < 2 * nn; i++)
        bfe_intern_release(&e->in, kv[i]);
    *err = -ENOMEM;
    id = NONE32;
out:
    if (kv != stackbuf)
        free(kv);
    return id;
}

/* ------------------------------------------------------------------ classes */

struct clskey {
    uint32_t itype, zone, lset;
    bf_vec alloc;
};

static uint64_t cls_hash_key(const struct clskey *k)
{
    uint64_t h = bfe_hash_bytes(&k->alloc, sizeof k->alloc, 3);
    h ^= bfe_mix64(((uint64_t)k->itype << 32) ^ k->zone ^ ((uint64_t)k->lset << 17));
    return bfe_mix64(h);
}

static uint64_t cls_hash_of(const void *ctx, uint32_t id)
{
    const struct bf_engine *e = ctx;
    return e->cls[id].hash;
}

static bool cls_eq(const void *ctx, uint32_t id, const void *key)
{
    const struct bf_engine *e = ctx;
    const struct clskey *k = key;
    const struct mclass *c = &e->cls[id];
    return c->itype == k->itype && c->zone == k->zone && c->lset == k->lset &&
           bf_vec_eq(&c->alloc, &k->alloc);
}

static struct leaflist *type_class_list(struct bf_engine *e, uint32_t itype, bool create)
{
    uint32_t idx = bfe_u64map_get(&e->type_classes_map, itype, NONE32);
    if (idx != NONE32)
        return &e->type_classes[idx];
    if (!create)
        return NULL;
    if (GROW(e->type_classes, e->cap_type_classes, e->n_type_classes + 1))
        return NULL;
    idx = e->n_type_classes;
    if (bfe_u64map_put(&e->type_classes_map, itype, idx))
        return NULL;
    e->n_type_classes++;
    e->type_classes[idx] = (struct leaflist){0};
    return &e->type_classes[idx];
}

static int ll_push(struct leaflist *l, uint32_t v, uint32_t *pos)
{
    if (GROW(l->v, l->cap, l->n + 1))
        return -ENOMEM;
    *pos = l->n;
    l->v[l->n++] = v;
    l->ver++;
    return 0;
}

/* Finds or creates the class; the returned class gains one reference (the
 * caller's leaf). Consumes nothing on failure. lset carries one reference
 * that this function takes over (released on failure or when found). */
static uint32_t cls_get(struct bf_engine *e, uint32_t itype, uint32_t zone, uint32_t lset,
                        const bf_vec *alloc)
{
    struct clskey k = {itype, zone, lset, *alloc};
    uint64_t h = cls_hash_key(&k);
    uint32_t id = bfe_idtab_find(&e->cls_tab, h, cls_eq, e, &k);
    if (id != NONE32) {
        e->cls[id].refs++;
        lset_release(e, lset);
        return id;
    }
    uint32_t gen = 1;
    if (e->n_cls_free) {
        id = e->cls_free[--e->n_cls_free];
        gen = e->cls[id].gen + 1;
        if (gen >= (1u << 30))
            gen = 1;
    } else {
        if (GROW(e->cls, e->cap_cls, e->n_cls + 1)) {
            lset_release(e, lset);
            return NONE32;
        }
        id = e->n_cls++;
    }
    struct mclass *c = &e->cls[id];
    memset(c, 0, sizeof *c);
    c->hash = h;
    c->itype = itype;
    c->zone = zone;
    c->lset = lset;
    c->alloc = *alloc;
    c->gen = gen;
    c->refs = 1;
    c->type_pos = NONE32;
    if (bfe_idtab_insert(&e->cls_tab, h, id, cls_hash_of, e))
        goto fail;
    if (ll_push(&e->all_classes, id, &c->all_pos))
        goto fail_tab;
    if (itype) {
        struct leaflist *tl = type_class_list(e, itype, true);
        if (!tl || ll_push(tl, id, &c->type_pos)) {
            e->all_classes.n--;
            goto fail_tab;
        }
    }
    bfe_intern_retain(&e->in, itype);
    bfe_intern_retain(&e->in, zone);
    e->live_classes++;
    return id;
fail_tab:
    bfe_idtab_remove(&e->cls_tab, h, id, cls_hash_of, e);
fail:
    c->refs = 0;
    lset_release(e, lset);
    if (!GROW(e->cls_free, e->cap_cls_free, e->n_cls_free + 1))
        e->cls_free[e->n_cls_free++] = id;
    return NONE32;
}

static void ll_swap_remove(struct leaflist *l, uint32_t pos, uint32_t *moved_id)
{
    uint32_t last = l->v[--l->n];
    l->ver++;
    if (pos < l->n) {
        l->v[pos] = last;
        *moved_id = last;
    } else {
        *moved_id = NONE32;
    }
}

static void cls_release(struct bf_engine *e, uint32_t id)
{
    struct mclass *c = &e->cls[id];
    if (--c->refs)
        return;
    bfe_idtab_remove(&e->cls_tab, c->hash, id, cls_hash_of, e);
    uint32_t moved;
    ll_swap_remove(&e->all_classes, c->all_pos, &moved);
    if (moved != NONE32)
        e->cls[moved].all_pos = c->all_pos;
    if (c->itype && c->type_pos != NONE32) {
        struct leaflist *tl = type_class_list(e, c->itype, false);
        ll_swap_remove(tl, c->type_pos, &moved);
        if (moved != NONE32)
            e->cls[moved].type_pos = c->type_pos;
    }
    bfe_intern_release(&e->in, c->itype);
    bfe_intern_release(&e->in, c->zone);
    lset_release(e, c->lset);
    e->live_classes--;
    if (!GROW(e->cls_free, e->cap_cls_free, e->n_cls_free + 1))
        e->cls_free[e->n_cls_free++] = id;
    /* on ENOMEM the id is simply not recycled */
}

uint32_t bfe_class_attr(const struct bf_engine *e, const struct mclass *c, uint8_t kind,
                        uint32_t key)
{
    if (kind == RK_ITYPE && c->itype)
        return c->itype;
    if (kind == RK_ZONE && c->zone)
        return c->zone;
    if (c->lset == NONE32)
        return NONE32;
    const struct labelset *ls = &e->lsets[c->lset];
    uint32_t lo = 0, hi = ls->n;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (ls->kv[2 * mid] < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < ls->n && ls->kv[2 * lo] == key)
        return ls->kv[2 * lo + 1];
    return NONE32;
}

/* ------------------------------------------------------------------ clusters */

uint32_t bfe_cluster_get(struct bf_engine *e, uint32_t name_id, bool create)
{
    uint32_t idx = bfe_u64map_get(&e->cluster_map, name_id, NONE32);
    if (idx != NONE32 || !create)
        return idx;
    if (e->n_clusters >= BF_MAX_CLUSTERS)
        return NONE32;
    if (GROW(e->clusters, e->cap_clusters, e->n_clusters + 1) ||
        GROW(e->cluster_order, e->cap_corder, e->n_clusters + 1))
        return NONE32;
    idx = e->n_clusters;
    if (bfe_u64map_put(&e->cluster_map, name_id, idx))
        return NONE32;
    struct cluster *c = &e->clusters[idx];
    memset(c, 0, sizeof *c);
    c->name = name_id;
    bfe_intern_retain(&e->in, name_id);
    e->cluster_order[idx] = idx;
    e->n_clusters++;
    e->cluster_order_dirty = true;
    return idx;
}

uint32_t bfe_cluster_lists(const struct bf_engine *e, uint32_t ci, int si, const struct cprof *cp,
                           uint32_t *out, uint32_t cap)
{
    const struct cluster *cl = &e->clusters[ci];
    uint32_t n = 0;
    if (!cp || !cp->pinned) {
        for (uint32_t i = 0; i < cl->ntl[si] && n < cap; i++)
            out[n++] = cl->tl[si][i];
        return n;
    }
    uint8_t state = si == 0 ? BF_STATE_CONFIGURED : BF_STATE_CONFIGURING;
    for (uint32_t t = 0; t <= cp->npin && n < cap; t++) {
        uint32_t itype = t < cp->npin ? cp->pin[t] : 0;
        uint32_t lid = bfe_u64map_get(&e->list_map, LK_CLUSTER(state, ci, itype), NONE32);
        if (lid != NONE32)
            out[n++] = lid;
    }
    return n;
}

/* ------------------------------------------------------------------ leaf lists */

static uint32_t list_get(struct bf_engine *e, uint64_t key)
{
    uint32_t id = bfe_u64map_get(&e->list_map, key, NONE32);
    if (id != NONE32)
        return id;
    if (GROW(e->lists, e->cap_lists, e->n_lists + 1))
        return NONE32;
    id = e->n_lists;
    if (bfe_u64map_put(&e->list_map, key, id))
        return NONE32;
    e->lists[id] = (struct leaflist){0};
    e->n_lists++;
    return id;
}

static int prio_list(struct bf_engine *e, int32_t prio, uint32_t *out)
{
    uint32_t lo = 0, hi = e->n_prio;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (e->prio_keys[mid] < prio)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < e->n_prio && e->prio_keys[lo] == prio) {
        *out = e->prio_lists[lo];
        return 0;
    }
    uint32_t id = list_get(e, LK_PRIO(prio));
    if (id == NONE32)
        return -ENOMEM;
    uint32_t c1 = e->cap_prio, c2 = e->cap_prio;
    if (GROW(e->prio_keys, c1, e->n_prio + 1) || GROW(e->prio_lists, c2, e->n_prio + 1))
        return -ENOMEM;
    e->cap_prio = c1 < c2 ? c1 : c2;
    memmove(e->prio_keys + lo + 1, e->prio_keys + lo, (e->n_prio - lo) * sizeof(int32_t));
    memmove(e->prio_lists + lo + 1, e->prio_lists + lo, (e->n_prio - lo) * sizeof(uint32_t));
    e->prio_keys[lo] = prio;
    e->prio_lists[lo] = id;
    e->n_prio++;
    *out = id;
    return 0;
}

/* ------------------------------------------------------------------ leaves */

static uint64_t leaf_hash_key(const struct leafkey *k)
{
    return bfe_hash_bytes(k, sizeof *k, 11);
}

static uint64_t leaf_hash_of(const void *ctx, uint32_t id)
{
    const struct bf_engine *e = ctx;
    return e->leaves[id].hash;
}

static bool leaf_eq(const void *ctx, uint32_t id, const void *key)
{
    const struct bf_engine *e = ctx;
    return memcmp(&e->leaves[id].k, key, sizeof(struct leafkey)) == 0;
}

static void leaf_unlist(struct bf_engine *e, uint32_t li)
{
    struct leaf *l = &e->leaves[li];
    for (int k = 0; k < LL_N; k++) {
        if (l->list[k] == NONE32)
            continue;
        uint32_t moved;
        ll_swap_remove(&e->lists[l->list[k]], l->pos[k], &moved);
        if (moved != NONE32) {
            struct leaf *m = &e->leaves[moved];
            for (int q = 0; q < LL_N; q++)
                if (m->list[q] == l->list[k]) {
                    m->pos[q] = l->pos[k];
                    break;
                }
        }
        l->list[k] = NONE32;
    }
}

static int leaf_list_in(struct bf_engine *e, uint32_t li, int kind, uint32_t list)
{
    struct leaf *l = &e->leaves[li];
    if (list == NONE32)
        return -ENOMEM;
    if (ll_push(&e->lists[list], li, &l->pos[kind]))
        return -ENOMEM;
    l->list[kind] = list;
    return 0;
}

static void leaf_destroy(struct bf_engine *e, uint32_t li)
{
    struct leaf *l = &e->leaves[li];
    if (l->list[LL_CLUSTER] != NONE32 && l->cluster_idx != NONE32)
        e->clusters[l->cluster_idx].supply_ver++;
    leaf_unlist(e, li);
    bfe_idtab_remove(&e->leaf_tab, l->hash, li, leaf_hash_of, e);
    bfe_intern_release(&e->in, l->k.cluster);
    bfe_intern_release(&e->in, l->k.fp);
    bfe_intern_release(&e->in, l->k.group);
    cls_release(e, l->k.cls);
    bfe_sl_free(&l->sl);
    l->live = false;
    e->live_leaves--;
    if (!GROW(e->leaf_free, e->cap_leaf_free, e->n_leaf_free + 1))
        e->leaf_free[e->n_leaf_free++] = li;
}

/* Creates a leaf for key k. The class reference and the string references of
 * k are taken over on success and released on failure. */
static uint32_t leaf_create(struct bf_engine *e, const struct leafkey *k, uint64_t h)
{
    uint32_t li;
    if (e->n_leaf_free) {
        li = e->leaf_free[--e->n_leaf_free];
    } else {
        if (big_grow((void **)&e->leaves, &e->cap_leaves, e->n_leaves + 1, sizeof *e->leaves,
                     (big_first(e, 8 * sizeof *e->leaves) + sizeof *e->leaves - 1) /
                         sizeof *e->leaves))
            goto fail_refs;
        li = e->n_leaves++;
    }
    struct leaf *l = &e->leaves[li];
    memset(l, 0, sizeof *l);
    l->k = *k;
    l->hash = h;
    l->rp_dollars = bf_bucket_upper_bound(k->rpb);
    l->ip_dollars = bf_bucket_upper_bound(k->ipb);
    l->cluster_idx = NONE32;
    l->runs = NONE32;
    l->live = true;
    l->serial = ++e->leaf_serial ? e->leaf_serial : ++e->leaf_serial; /* never 0 */
    for (int i = 0; i < LL_N; i++)
        l->list[i] = NONE32;
    if (bfe_idtab_insert(&e->leaf_tab, h, li, leaf_hash_of, e))
        goto fail_slot;
    e->live_leaves++;
    const struct mclass *c = &e->cls[k->cls];
    if (leaf_list_in(e, li, LL_STATE, list_get(e, LK_STATE(k->state))))
        goto fail;
    if (c->itype && leaf_list_in(e, li, LL_TYPE, list_get(e, LK_TYPE(k->state, c->itype))))
        goto fail;
    if (k->cluster && (k->state == BF_STATE_CONFIGURED || k->state == BF_STATE_CONFIGURING)) {
        uint32_t ci = bfe_cluster_get(e, k->cluster, true);
        if (ci == NONE32)
            goto fail;
        l = &e->leaves[li];
        l->cluster_idx = ci;
        int si = k->state == BF_STATE_CONFIGURED ? 0 : 1;
        uint64_t key = LK_CLUSTER(k->state, ci, c->itype);
        uint32_t lid = bfe_u64map_get(&e->list_map, key, NONE32);
        if (lid == NONE32) {
            lid = list_get(e, key);
            struct cluster *cl = &e->clusters[ci];
            if (lid == NONE32 || GROW(cl->tl[si], cl->captl[si], cl->ntl[si] + 1))
                goto fail;
            cl->tl[si][cl->ntl[si]++] = lid;
            cl->cver++; /* the lists its Needs read */
        }
        if (leaf_list_in(e, li, LL_CLUSTER, lid))
            goto fail;
        e->clusters[ci].supply_ver++;
    }
    if (k->state == BF_STATE_CREATING && k->fp) {
        if (leaf_list_in(e, li, LL_EXTRA, list_get(e, LK_CFP(k->fp))))
            goto fail;
    } else if (k->state == BF_STATE_CONFIGURED) {
        uint32_t pl;
        if (prio_list(e, k->prio, &pl) || leaf_list_in(e, li, LL_EXTRA, pl))
            goto fail;
    }
    return li;
fail:
    leaf_destroy(e, li); /* releases the refs */
    return NONE32;
fail_slot:
    if (!GROW(e->leaf_free, e->cap_leaf_free, e->n_leaf_free + 1))
        e->leaf_free[e->n_leaf_free++] = li;
fail_refs:
    bfe_intern_release(&e->in, k->cluster);
    bfe_intern_release(&e->in, k->fp);
    bfe_intern_release(&e->in, k->group);
    cls_release(e, k->cls);
    return NONE32;
}

/* ------------------------------------------------------------------ screen */

static bool machine_eligible(const struct bf_engine_machine *m)
{
    if (!m->id || !m->id[0] || m->held)
        return false;
    if (m->state < BF_STATE_SPECULATIVE || m->state > BF_STATE_FAILED)
        return false;
    /* Go's machine.Invariant: price >= 0 and not NaN. +Inf passes (it sorts
     * last everywhere a price orders machines; docs/fidelity.md item 11). */
    if (isnan(m->price_per_hour) || m->price_per_hour < 0)
        return false;
    if (isnan(m->interruption_probability) || m->interruption_probability < 0 ||
        m->interruption_probability > 1)
        return false;
    bool bound = m->cluster && m->cluster[0];
    if ((m->state == BF_STATE_CONFIGURED || m->state == BF_STATE_DRAINING) && !bound)
        return false;
    return true;
}

static const char *nz(const char *s)
{
    return s ? s : "";
}

/* Builds the leaf key for m, interning its string fields (one reference
 * each, which the caller keeps or releases); -ENOMEM in *err when a string
 * cannot be interned (then no reference is held). */
static void make_key(struct bf_engine *e, const struct bf_engine_machine *m, uint32_t cls,
                     struct leafkey *k, int *err)
{
    memset(k, 0, sizeof *k);
    k->state = m->state;
    k->ct = m->capacity_type;
    k->cls = cls;
    *err = 0;
    bool bound = m->state == BF_STATE_CONFIGURED || m->state == BF_STATE_CONFIGURING;
    bool stamped = bound || m->state == BF_STATE_CREATING;
    /* Speculative/Idle pools order by price (Idle) or effective cost (Speculative) */
    if (m->state == BF_STATE_IDLE || m->state == BF_STATE_SPECULATIVE ||
        m->state == BF_STATE_CONFIGURED || m->state == BF_STATE_CONFIGURING) {
        k->price = m->price_per_hour == 0 ? 0.0 : m->price_per_hour; /* no -0 */
        k->prob = m->interruption_probability == 0 ? 0.0 : m->interruption_probability;
    }
    if (m->state == BF_STATE_CONFIGURED || m->state == BF_STATE_CONFIGURING)
        k->rpb = m->assigned_rpb;
    if (m->state == BF_STATE_CONFIGURED) {
        k->prio = m->assigned_priority;
        k->ipb = m->assigned_ipb;
    }
    if (m->state != BF_STATE_IDLE)
        k->ct = 0; /* only the capacity type of Idle machines is read (release) */
    const char *cl = bound ? nz(m->cluster) : "";
    const char *fp = stamped ? nz(m->assigned_fingerprint) : "";
    size_t glen = stamped && m->assigned_group ? m->assigned_group_len : 0;
    k->cluster = bfe_intern(&e->in, cl, strlen(cl));
    k->fp = bfe_intern(&e->in, fp, strlen(fp));
    k->group = bfe_intern(&e->in, m->assigned_group, glen);
    if (k->cluster == NONE32 || k->fp == NONE32 || k->group == NONE32) {
        bfe_intern_release(&e->in, k->cluster);
        bfe_intern_release(&e->in, k->fp);
        bfe_intern_release(&e->in, k->group);
        *err = -ENOMEM;
    }
}

/* ------------------------------------------------------------------ resolve memo */

/*
 * A mirror rebuild (a restarted cycle process upserts every record) feeds
 * 500K machines that fall into a few hundred (profile, assignment) shapes.
 * Everything leaf_resolve reads is kept as a byte key (scalars by bit
 * pattern, strings by length and bytes, labels in the order given: a
 * conservative key, equal only when the inputs are) in a direct-mapped
 * table, with the leaf it resolved to; a machine whose inputs equal an
 * entry's key takes that leaf without interning anything -- what
 * leaf_resolve would find, with the same (zero) net references. The slot is
 * chosen by the scalars and the input addresses (one probe for a caller
 * that keeps its strings in place, as the cycle does), but a hit is decided
 * by the bytes alone, compared in place: callers may reuse their buffers.
 * An entry is good while its leaf is live with the serial it had (leaf
 * indices are reused).
 */
static bool memo_put(uint8_t *buf, uint32_t *at, const void *p, size_t n)
{
    if (*at + n > RMEMO_BYTES)
        return false;
    memcpy(buf + *at, p, n);
    *at += (uint32_t)n;
    return true;
}

static bool memo_str(uint8_t *buf, uint32_t *at, const void *s, size_t n)
{
    uint32_t l = (uint32_t)n;
    return n <= RMEMO_BYTES && memo_put(buf, at, &l, sizeof l) && memo_put(buf, at, s, n);
}

struct memo_fixed {
    uint8_t state, ct, ipb, rpb;
    int32_t prio;
    uint32_t n_labels;
    double price, prob;
    bf_vec alloc;
};

static void memo_fixed_of(const struct bf_engine_machine *m, struct memo_fixed *f)
{
    memset(f, 0, sizeof *f);
    f->state = m->state;
    f->ct = m->capacity_type;
    f->ipb = m->assigned_ipb;
    f->rpb = m->assigned_rpb;
    f->prio = m->assigned_priority;
    f->n_labels = m->n_labels;
    f->price = m->price_per_hour;
    f->prob = m->interruption_probability;
    f->alloc = m->allocatable;
}

/* The content key of m into buf; false when it does not fit (no memo for m). */
static bool memo_key(const struct bf_engine_machine *m, uint8_t *buf, uint32_t *len)
{
    uint32_t at = 0;
    struct memo_fixed fixed;
    memo_fixed_of(m, &fixed);
    const char *it = nz(m->instance_type), *zn = nz(m->zone), *cl = nz(m->cluster),
               *fp = nz(m->assigned_fingerprint);
    bool ok = memo_put(buf, &at, &fixed, sizeof fixed) && memo_str(buf, &at, it, strlen(it)) &&
              memo_str(buf, &at, zn, strlen(zn)) && memo_str(buf, &at, cl, strlen(cl)) &&
              memo_str(buf, &at, fp, strlen(fp)) &&
              memo_str(buf, &at, m->assigned_group ? m->assigned_group : "",
                       m->assigned_group ? m->assigned_group_len : 0);
    for (uint32_t i = 0; ok && i < m->n_labels; i++) {
        const char *k = nz(m->labels[i].key), *v = nz(m->labels[i].value);
        ok = memo_str(buf, &at, k, strlen(k)) && memo_str(buf, &at, v, strlen(v));
    }
    *len = at;
    return ok;
}

/* One stored string equals s (NUL-terminated when term, else exactly n bytes). */
static bool memo_same(const uint8_t *key, uint32_t len, uint32_t *at, const char *s, size_t n,
                      bool term)
{
    uint32_t l;
    if (*at + sizeof l > len)
        return false;
    memcpy(&l, key + *at, sizeof l);
    *at += sizeof l;
    if (*at + l > len || (!term && n != l) || memcmp(key + *at, s, l) != 0 || (term && s[l]))
        return false;
    *at += l;
    return true;
}

/* The stored content key equals m's (what memo_key would write), read in place. */
static bool memo_verify(const uint8_t *key, uint32_t len, const struct bf_engine_machine *m)
{
    struct memo_fixed fixed;
    memo_fixed_of(m, &fixed);
    uint32_t at = sizeof fixed;
    if (len < at || memcmp(key, &fixed, sizeof fixed) != 0)
        return false;
    bool ok = memo_same(key, len, &at, nz(m->instance_type), 0, true) &&
              memo_same(key, len, &at, nz(m->zone), 0, true) &&
              memo_same(key, len, &at, nz(m->cluster), 0, true) &&
              memo_same(key, len, &at, nz(m->assigned_fingerprint), 0, true) &&
              memo_same(key, len, &at, m->assigned_group ? m->assigned_group : "",
                        m->assigned_group ? m->assigned_group_len : 0, false);
    for (uint32_t i = 0; ok && i < m->n_labels; i++)
        ok = memo_same(key, len, &at, nz(m->labels[i].key), 0, true) &&
             memo_same(key, len, &at, nz(m->labels[i].value), 0, true);
    return ok && at == len;
}

/* Where m's entry is looked for: the scalars and the input addresses (a
 * caller that keeps its strings where they are finds its entries in one
 * probe; the content check decides either way). */
static uint64_t memo_slot_hash(const struct bf_engine_machine *m)
{
    struct {
        struct memo_fixed f;
        const void *p[6];
        size_t glen;
    } k;
    memset(&k, 0, sizeof k);
    memo_fixed_of(m, &k.f);
    k.p[0] = m->instance_type;
    k.p[1] = m->zone;
    k.p[2] = m->cluster;
    k.p[3] = m->assigned_fingerprint;
    k.p[4] = m->assigned_group;
    k.p[5] = m->labels;
    k.glen = m->assigned_group_len;
    return XXH3_64bits(&k, sizeof k);
}

/* Resolves the machine's leaf, creating class and leaf as needed. */
static uint32_t leaf_resolve_slow(struct bf_engine *e, const struct bf_engine_machine *m, int *err);

static uint32_t leaf_resolve(struct bf_engine *e, const struct bf_engine_machine *m, int *err)
{
    uint64_t h = memo_slot_hash(m);
    struct rmemo_entry *me = &e->memo[h & (RMEMO_SLOTS - 1)];
    if (me->serial && me->hash == h && me->leaf < e->n_leaves && e->leaves[me->leaf].live &&
        e->leaves[me->leaf].serial == me->serial && memo_verify(me->key, me->len, m)) {
        *err = 0;
        return me->leaf;
    }
    uint32_t li = leaf_resolve_slow(e, m, err);
    uint32_t len;
    if (!*err && li != NONE32 && memo_key(m, me->key, &len)) {
        me->hash = h;
        me->leaf = li;
        me->serial = e->leaves[li].serial;
        me->len = len;
    } else if (!*err && li != NONE32) {
        me->serial = 0; /* the key did not fit: the slot holds nothing */
    }
    return li;
}

static uint32_t leaf_resolve_slow(struct bf_engine *e, const struct bf_engine_machine *m, int *err)
{
    uint32_t cls = bfe_class_get(e, m, err);
    return *err ? NONE32 : bfe_leaf_resolve_cls(e, m, cls, err);
}

/* leaf_resolve_slow's first half: m's class, with one reference taken. */
uint32_t bfe_class_get(struct bf_engine *e, const struct bf_engine_machine *m, int *err)
{
    *err = 0;
    bf_vec alloc = m->allocatable;
    for (int i = 0; i < BF_MAX_DIMS; i++)
        if (alloc.v[i] < 0)
            alloc.v[i] = 0;
    const char *it = nz(m->instance_type), *zn = nz(m->zone);
    uint32_t lset = lset_get(e, m, err);
    if (*err)
        return NONE32;
    uint32_t itype = bfe_intern(&e->in, it, strlen(it));
    uint32_t zone = bfe_intern(&e->in, zn, strlen(zn));
    if (itype == NONE32 || zone == NONE32) {
        bfe_intern_release(&e->in, itype);
        bfe_intern_release(&e->in, zone);
        lset_release(e, lset);
        *err = -ENOMEM;
        return NONE32;
    }
    uint32_t cls = cls_get(e, itype, zone, lset, &alloc); /* takes lset's ref */
    bfe_intern_release(&e->in, itype);
    bfe_intern_release(&e->in, zone);
    if (cls == NONE32)
        *err = -ENOMEM;
    return cls;
}

/* leaf_resolve_slow's second half: m's leaf in class cls, whose reference
 * it takes over (kept by a new leaf, released otherwise). */
uint32_t bfe_leaf_resolve_cls(struct bf_engine *e, const struct bf_engine_machine *m, uint32_t cls,
                              int *err)
{
    *err = 0;
    /* one pass that interns the key's strings (a string a live leaf uses is
     * interned already, so this only retains it): a look-up pass that does
     * not create strings, then an interning pass, would hash every string
     * twice for each new leaf, and a mirror rebuild creates every leaf */
    struct leafkey k;
    make_key(e, m, cls, &k, err);
    if (*err) {
        cls_release(e, cls);
        return NONE32;
    }
    uint64_t h = leaf_hash_key(&k);
    uint32_t li = bfe_idtab_find(&e->leaf_tab, h, leaf_eq, e, &k);
    if (li != NONE32) {
        bfe_intern_release(&e->in, k.cluster);
        bfe_intern_release(&e->in, k.fp);
        bfe_intern_release(&e->in, k.group);
        cls_release(e, cls);
        return li;
    }
    li = leaf_create(e, &k, h);
    if (li == NONE32)
        *err = -ENOMEM;
    return li;
}

/* ------------------------------------------------------------------ membership */

/* The acquirable supply versions (engine_internal.h, bfe_acq_ver): an
 * Idle/Speculative count of a class of instance type itype changed, so every
 * pre-pass outcome that read the acquirable supply of all types or of itype
 * may be stale (credit.c compares them). Each change takes the next value of
 * a clock. */
static void acq_changed(struct bf_engine *e, uint32_t itype)
{
    e->acq_ver_all = ++e->acq_clock;
    if (!itype)
        return;
    uint32_t idx = bfe_u64map_get(&e->tver_map, itype, NONE32);
    if (idx == NONE32) {
        if (GROW(e->tver, e->cap_tver, e->n_tver + 1) ||
            bfe_u64map_put(&e->tver_map, itype, e->n_tver)) {
            e->memo_broken = true; /* no version to compare: derive everything */
            return;
        }
        idx = e->n_tver++;
    }
    e->tver[idx] = e->acq_clock;
}

static void account(struct bf_engine *e, uint32_t li, int delta)
{
    struct leaf *l = &e->leaves[li];
    struct mclass *c = &e->cls[l->k.cls];
    bool acq = l->k.state == BF_STATE_IDLE || l->k.state == BF_STATE_SPECULATIVE;
    bool had = c->count[BF_STATE_IDLE] + c->count[BF_STATE_SPECULATIVE] > 0;
    c->count[l->k.state] += (uint32_t)delta;
    if (acq && had != (c->count[BF_STATE_IDLE] + c->count[BF_STATE_SPECULATIVE] > 0))
        e->shard_supply_ver++;
    if (acq)
        acq_changed(e, c->itype); /* Same Needs' acquirable fold reads it */
    e->by_state[l->k.state] += (uint32_t)delta;
    if (l->list[LL_CLUSTER] != NONE32)
        e->lists[l->list[LL_CLUSTER]].ver++; /* its cluster's credit reads it */
    if (l->k.state == BF_STATE_CONFIGURED && l->cluster_idx != NONE32)
        e->clusters[l->cluster_idx].conf_count += (uint32_t)delta;
}

static int release_index(uint8_t ct)
{
    if (ct == BF_CT_ON_DEMAND)
        return 0;
    if (ct == BF_CT_SPOT)
        return 1;
    return -1;
}

/* A bulk load appends out of order (bfe_upsert_append) until
 * bf_engine_bulk_end sorts the list: a slot the binary search does not find
 * there is looked for one by one. */
static void sl_remove_any(struct slotlist *l, uint32_t slot, sl_cmp_fn cmp, const void *ctx)
{
    if (bfe_sl_remove(l, slot, cmp, ctx) == 0)
        return;
    for (uint32_t ci = 0; ci < l->nch; ci++) {
        const struct slchunk *c = l->ch[ci];
        for (uint32_t p = 0; p < c->n; p++)
            if (c->s[p] == slot) {
                bfe_sl_remove_at(l, ci, p);
                return;
            }
    }
}

static void unplace(struct bf_engine *e, uint32_t slot)
{
    uint32_t li = e->leaf_of[slot];
    if (li == NONE32)
        return;
    sl_remove_any(&e->leaves[li].sl, slot, bfe_sl_cmp_id, e);
    account(e, li, -1);
    if (e->in_release[slot]) {
        sl_remove_any(&e->release[e->in_release[slot] - 1], slot, sl_cmp_release, e);
        e->in_release[slot] = 0;
    }
    e->leaf_of[slot] = NONE32;
}

static int sl_cmp_last(const void *ctx, uint32_t a, uint32_t b)
{
    (void)ctx, (void)a, (void)b;
    return -1; /* bfe_sl_insert appends */
}

/* Adds slot to l: in order, or (unsorted != NULL: a bulk load) after the
 * last slot, setting bit in *unsorted when that is out of order. */
static int sl_add(struct bf_engine *e, struct slotlist *l, uint32_t slot, sl_cmp_fn cmp,
                  unsigned *unsorted, unsigned bit)
{
    if (!unsorted || l->n == 0)
        return bfe_sl_insert(l, slot, cmp, e);
    const struct slchunk *last = l->ch[l->nch - 1];
    if (cmp(e, last->s[last->n - 1], slot) > 0)
        *unsorted |= bit;
    return bfe_sl_insert(l, slot, sl_cmp_last, NULL);
}

static int place(struct bf_engine *e, uint32_t slot, uint32_t li, unsigned *unsorted)
{
    int rc = sl_add(e, &e->leaves[li].sl, slot, bfe_sl_cmp_id, unsorted, BFE_UNSORTED_LEAF);
    if (rc)
        return rc;
    e->leaf_of[slot] = li;
    account(e, li, +1);
    const struct leaf *l = &e->leaves[li];
    int ri = release_index(l->k.ct);
    if (l->k.state == BF_STATE_IDLE && ri >= 0 && e->idle_since[slot] > 0) {
        if (sl_add(e, &e->release[ri], slot, sl_cmp_release, unsorted,
                   BFE_UNSORTED_RELEASE << ri) == 0)
            e->in_release[slot] = (uint8_t)(ri + 1);
        /* on ENOMEM the machine is simply not releasable this time */
    }
    return 0;
}

/* qsort_r's view of a slot list comparison */
struct sort_ctx {
    const struct bf_engine *e;
    sl_cmp_fn cmp;
};

static int sort_cmp(const void *a, const void *b, void *arg)
{
    const struct sort_ctx *c = arg;
    return c->cmp(c->e, *(const uint32_t *)a, *(const uint32_t *)b);
}

/* Sorts a slot list in place, without memory: insertion sort over the
 * chunks (the fallback when the copy cannot be allocated). */
static void sl_sort_in_place(struct slotlist *l, sl_cmp_fn cmp, const struct bf_engine *e)
{
    uint32_t ci = 0, off = 0;
    for (uint32_t i = 0; i < l->n; i++, bfe_sl_step(l, &ci, &off)) {
        uint32_t v = l->ch[ci]->s[off];
        uint32_t hc = ci, ho = off; /* the hole */
        while (hc || ho) {
            uint32_t pc = ho ? hc : hc - 1, po = ho ? ho - 1 : l->ch[hc - 1]->n - 1;
            uint32_t pv = l->ch[pc]->s[po];
            if (cmp(e, pv, v) <= 0)
                break;
            l->ch[hc]->s[ho] = pv;
            hc = pc;
            ho = po;
        }
        l->ch[hc]->s[ho] = v;
    }
}

/* A leaf's slots sorted by id: the ids of one leaf share a long prefix
 * (the simulated provider's "<type>-<zone>-<n>"), past the 16 bytes
 * bfe_id_cmp keeps in columns, so each comparison would read both ids from
 * the id buffer. The sort keys are the 16 bytes after the prefix all ids of
 * the list share (big-endian, zero-padded like idpfx; ids hold no NUL, so
 * this is the byte order bfe_id_cmp has), bfe_id_cmp only on a tie. */
struct idkey {
    uint64_t k1, k2;
    uint32_t slot;
};

static int idkey_cmp(const void *a, const void *b, void *arg)
{
    const struct idkey *x = a, *y = b;
    if (x->k1 != y->k1)
        return x->k1 < y->k1 ? -1 : 1;
    if (x->k2 != y->k2)
        return x->k2 < y->k2 ? -1 : 1;
    return bfe_id_cmp(arg, x->slot, y->slot);
}

/* The length of the prefix ids a and b share. */
static size_t id_lcp(const struct bf_engine *e, uint32_t a, uint32_t b)
{
    const char *x = bfe_machine_id(e, a), *y = bfe_machine_id(e, b);
    size_t i = 0, m = e->id_len[a] < e->id_len[b] ? e->id_len[a] : e->id_len[b];
    while (i < m && x[i] == y[i])
        i++;
    return i;
}

/* The keys of l's slots past their first pfx bytes into v; false when a slot's
 * id does not start with the first slot's pfx bytes. */
static bool idkeys(const struct bf_engine *e, const struct slotlist *l, size_t pfx, struct idkey *v)
{
    uint32_t first = l->ch[0]->s[0], k = 0;
    const char *ref = bfe_machine_id(e, first);
    for (uint32_t ci = 0; ci < l->nch; ci++)
        for (uint32_t p = 0; p < l->ch[ci]->n; p++) {
            uint32_t s = l->ch[ci]->s[p];
            const char *id = bfe_machine_id(e, s);
            if (e->id_len[s] < pfx || memcmp(id, ref, pfx) != 0)
                return false;
            v[k++] = (struct idkey){id_prefix(id, e->id_len[s], pfx),
                                    id_prefix(id, e->id_len[s], pfx + 8), s};
        }
    return true;
}

static bool sl_sort_ids(struct bf_engine *e, struct slotlist *l)
{
    struct idkey *v = malloc((size_t)l->n * sizeof *v);
    if (!v)
        return false;
    /* the shared prefix: guessed from 8 slots spread over the list, and
     * checked while the keys are taken (one read of each id); when a slot
     * does not share it, the prefix every slot shares */
    uint32_t first = l->ch[0]->s[0];
    size_t pfx = e->id_len[first];
    for (uint32_t j = 1; j <= 8; j++) {
        uint32_t ci, off;
        bfe_sl_seek(l, (uint32_t)((uint64_t)l->n * j / 9), &ci, &off);
        size_t c = ci < l->nch ? id_lcp(e, first, l->ch[ci]->s[off]) : pfx;
        pfx = c < pfx ? c : pfx;
    }
    if (!idkeys(e, l, pfx, v)) {
        for (uint32_t ci = 0; ci < l->nch; ci++)
            for (uint32_t p = 0; p < l->ch[ci]->n; p++) {
                size_t c = id_lcp(e, first, l->ch[ci]->s[p]);
                pfx = c < pfx ? c : pfx;
            }
        idkeys(e, l, pfx, v); /* every slot shares pfx bytes now */
    }
    qsort_r(v, l->n, sizeof *v, idkey_cmp, e);
    uint32_t k = 0;
    for (uint32_t ci = 0; ci < l->nch; ci++)
        for (uint32_t p = 0; p < l->ch[ci]->n; p++)
            l->ch[ci]->s[p] = v[k++].slot;
    free(v);
    return true;
}

static void sl_sort(struct bf_engine *e, struct slotlist *l, sl_cmp_fn cmp)
{
    if (l->n < 2)
        return;
    if (cmp == bfe_sl_cmp_id && sl_sort_ids(e, l))
        return;
    uint32_t *v = cmp == bfe_sl_cmp_id ? NULL : malloc((size_t)l->n * sizeof *v);
    if (!v) {
        sl_sort_in_place(l, cmp, e);
        return;
    }
    uint32_t k = 0;
    for (uint32_t ci = 0; ci < l->nch; ci++)
        for (uint32_t p = 0; p < l->ch[ci]->n; p++)
            v[k++] = l->ch[ci]->s[p];
    struct sort_ctx c = {e, cmp};
    qsort_r(v, k, sizeof *v, sort_cmp, &c);
    k = 0;
    for (uint32_t ci = 0; ci < l->nch; ci++)
        for (uint32_t p = 0; p < l->ch[ci]->n; p++)
            l->ch[ci]->s[p] = v[k++];
    free(v);
}

void bfe_sl_sort_leaf(struct bf_engine *e, uint32_t li)
{
    if (li < e->n_leaves && e->leaves[li].live)
        sl_sort(e, &e->leaves[li].sl, bfe_sl_cmp_id);
}

void bfe_sl_sort_release(struct bf_engine *e, int ri)
{
    sl_sort(e, &e->release[ri], sl_cmp_release);
}

int bf_engine_upsert(struct bf_engine *e, uint32_t slot, const struct bf_engine_machine *m)
{
    if (!e || !m || slot >= e->cap || !m->id)
        return -EINVAL;
    uint32_t li = NONE32;
    int err = 0;
    if (machine_eligible(m)) {
        li = leaf_resolve(e, m, &err);
        if (err)
            return err;
    }
    return bfe_upsert_at(e, slot, m, li);
}

/* For bulk.c (engine_internal.h). */
bool bfe_machine_eligible(const struct bf_engine_machine *m)
{
    return machine_eligible(m);
}

uint32_t bfe_leaf_resolve_slow(struct bf_engine *e, const struct bf_engine_machine *m, int *err)
{
    return leaf_resolve_slow(e, m, err);
}

bool bfe_class_retain(struct bf_engine *e, uint32_t cls, uint32_t gen)
{
    if (cls >= e->n_cls || !e->cls[cls].refs || e->cls[cls].gen != gen)
        return false;
    e->cls[cls].refs++;
    return true;
}

uint32_t bfe_leaf_serial(const struct bf_engine *e, uint32_t li)
{
    return li < e->n_leaves && e->leaves[li].live ? e->leaves[li].serial : 0;
}

static int upsert_at(struct bf_engine *e, uint32_t slot, const struct bf_engine_machine *m,
                     uint32_t li, unsigned *unsorted);

int bfe_upsert_at(struct bf_engine *e, uint32_t slot, const struct bf_engine_machine *m,
                  uint32_t li)
{
    return upsert_at(e, slot, m, li, NULL);
}

int bfe_upsert_append(struct bf_engine *e, uint32_t slot, const struct bf_engine_machine *m,
                      uint32_t li, unsigned *unsorted)
{
    return upsert_at(e, slot, m, li, unsorted);
}

static int upsert_at(struct bf_engine *e, uint32_t slot, const struct bf_engine_machine *m,
                     uint32_t li, unsigned *unsorted)
{
    size_t idlen = strlen(m->id);
    uint32_t old = e->leaf_of[slot];
    if (idlen > BF_ENGINE_ID_MAX) { /* refused before anything changes */
        if (li != NONE32 && li != old && e->leaves[li].sl.n == 0)
            leaf_destroy(e, li); /* resolved for this machine alone */
        return -EINVAL;
    }
    bool was = e->present[slot] != 0;
    int64_t since = m->state == BF_STATE_IDLE ? m->idle_since_s : 0;
    bool same_id =
        was && e->id_len[slot] == idlen && memcmp(e->idbuf + e->id_off[slot], m->id, idlen) == 0;
    if (was && old == li && li != NONE32 && same_id && e->idle_since[slot] == since)
        return 0; /* nothing the engine reads changed */
    unplace(e, slot);
    if (old != NONE32 && old != li && e->leaves[old].sl.n == 0)
        leaf_destroy(e, old);
    if (!same_id) {
        int rc = id_store(e, slot, m->id, idlen);
        if (rc) {
            /* the slot is now absent: ids cannot be stored */
            if (li != NONE32 && e->leaves[li].sl.n == 0)
                leaf_destroy(e, li);
            if (was) {
                e->n_present--;
                if (e->present[slot] == 2)
                    e->n_ineligible--;
                /* (id_store counted the old id's bytes as waste already) */
                e->idle_since[slot] = 0; /* an absent slot's (below) */
            }
            e->present[slot] = 0;
            return rc;
        }
    }
    /* an absent slot's is 0 (bf_engine_remove, the failure above): a load
     * of machines that are not idle never touches this column's pages */
    if (was || since)
        e->idle_since[slot] = since;
    if (!was)
        e->n_present++;
    else if (e->present[slot] == 2)
        e->n_ineligible--;
    if (li == NONE32) {
        e->present[slot] = 2;
        e->n_ineligible++;
        return 0;
    }
    e->present[slot] = 1;
    int rc = place(e, slot, li, unsorted);
    if (rc) {
        if (e->leaves[li].sl.n == 0)
            leaf_destroy(e, li);
        e->present[slot] = 2;
        e->n_ineligible++;
        return rc;
    }
    return 0;
}

int bf_engine_remove(struct bf_engine *e, uint32_t slot)
{
    if (!e || slot >= e->cap)
        return -EINVAL;
    if (!e->present[slot])
        return 0;
    uint32_t old = e->leaf_of[slot];
    unplace(e, slot);
    if (old != NONE32 && e->leaves[old].sl.n == 0)
        leaf_destroy(e, old);
    if (e->present[slot] == 2)
        e->n_ineligible--;
    e->n_present--;
    e->idbuf_waste += e->id_len[slot] + 1;
    e->present[slot] = 0;
    e->idle_since[slot] = 0;
    return 0;
}

/* ------------------------------------------------------------------ lifecycle */

/* The per-slot columns in one block (big_alloc): their offsets and size. */
static const size_t col_width[8] = {8, 8, 8, 4, 4, 2, 1, 1};

static size_t cols_layout(size_t n, size_t off[8])
{
    size_t at = 0;
    for (int i = 0; i < 8; i++) {
        off[i] = at;
        at += (n * col_width[i] + 63) & ~(size_t)63;
    }
    return at;
}

int bfe_mirror_init(struct bf_engine *e)
{
    size_t n = e->cap, off[8];
    uint8_t *b = big_alloc(cols_layout(n, off));
    if (!b)
        return -ENOMEM;
    e->idpfx = (uint64_t *)(void *)(b + off[0]); /* the block's start (bfe_mirror_free) */
    e->idpfx2 = (uint64_t *)(void *)(b + off[1]);
    e->idle_since = (int64_t *)(void *)(b + off[2]);
    e->leaf_of = (uint32_t *)(void *)(b + off[3]);
    e->id_off = (uint32_t *)(void *)(b + off[4]);
    e->id_len = (uint16_t *)(void *)(b + off[5]);
    e->present = b + off[6];
    e->in_release = b + off[7];
    for (size_t i = 0; i < n; i++)
        e->leaf_of[i] = NONE32;
    return 0;
}

void bfe_mirror_populate_end(struct bf_engine *e)
{
    /* what the id buffer did not fill: resident no more */
    if (e->pop_ahead && e->idbuf_pop > e->idbuf_len)
        bfe_unpopulate(e->idbuf + e->idbuf_len, e->idbuf_pop - e->idbuf_len);
    e->pop_ahead = false;
    e->idbuf_pop = 0;
}

void bfe_mirror_populate(struct bf_engine *e, uint32_t n)
{
    e->pop_ahead = true;
    e->idbuf_pop = 0;
    if (n > e->cap)
        n = e->cap;
    size_t off[8];
    cols_layout(e->cap, off);
    /* not idle_since (2) and in_release (7): a load writes them for idle
     * machines only (upsert_at, place), and reads them for no slot it fills
     * (unplace of an absent slot returns first) */
    for (int i = 0; i < 8; i++)
        if (i != 2 && i != 7)
            bf_engine_populate((uint8_t *)e->idpfx + off[i], (size_t)n * col_width[i]);
}

void bfe_mirror_free(struct bf_engine *e)
{
    for (uint32_t i = 0; i < e->n_leaves; i++)
        if (e->leaves[i].live)
            bfe_sl_free(&e->leaves[i].sl);
    big_free(e->leaves, (size_t)e->cap_leaves * sizeof *e->leaves);
    free(e->leaf_free);
    bfe_idtab_free(&e->leaf_tab);
    for (uint32_t i = 0; i < e->n_lists; i++)
        free(e->lists[i].v);
    free(e->lists);
    bfe_u64map_free(&e->list_map);
    free(e->prio_keys);
    free(e->prio_lists);
    for (uint32_t i = 0; i < e->n_lsets; i++)
        free(e->lsets[i].kv);
    free(e->lsets);
    free(e->lset_free);
    bfe_idtab_free(&e->lset_tab);
    free(e->cls);
    free(e->cls_free);
    bfe_idtab_free(&e->cls_tab);
    free(e->all_classes.v);
    for (uint32_t i = 0; i < e->n_type_classes; i++)
        free(e->type_classes[i].v);
    free(e->type_classes);
    bfe_u64map_free(&e->type_classes_map);
    bfe_sl_free(&e->release[0]);
    bfe_sl_free(&e->release[1]);
    bfe_u64map_free(&e->tver_map);
    free(e->tver);
    size_t off[8];
    big_free(e->idpfx, cols_layout(e->cap, off));
    big_free(e->idbuf, e->idbuf_cap);
}

uint32_t bf_engine_cluster_configured(const struct bf_engine *e, const char *cluster)
{
    if (!e || !cluster)
        return 0;
    uint32_t id = bfe_intern_find(&e->in, cluster, strlen(cluster));
    if (id == NONE32)
        return 0;
    uint32_t ci = bfe_u64map_get(&e->cluster_map, id, NONE32);
    return ci == NONE32 ? 0 : e->clusters[ci].conf_count;
}

void bf_engine_mirror_stats(const struct bf_engine *e, struct bf_engine_mirror_stats *st)
{
    memset(st, 0, sizeof *st);
    st->machines = e->n_present;
    st->ineligible = e->n_ineligible;
    for (int s = 0; s < BF_STATE_COUNT; s++)
        st->by_state[s] = e->by_state[s];
    st->classes = e->live_classes;
    st->leaves = e->live_leaves;
    st->strings = e->in.n - e->in.nfree;
    size_t b = 0;
    b += (size_t)e->cap * (sizeof(uint32_t) * 2 + sizeof(uint16_t) + 2 + sizeof(uint64_t) * 3);
    b += e->idbuf_cap;
    b += (size_t)e->cap_leaves * sizeof(struct leaf);
    for (uint32_t i = 0; i < e->n_leaves; i++) {
        const struct leaf *l = &e->leaves[i];
        if (!l->live)
            continue;
        b += (size_t)l->sl.capch * sizeof(void *);
        for (uint32_t c = 0; c < l->sl.nch; c++)
            b += sizeof(struct slchunk) + (size_t)l->sl.ch[c]->cap * 4;
    }
    for (int r = 0; r < 2; r++) {
        b += (size_t)e->release[r].capch * sizeof(void *);
        for (uint32_t c = 0; c < e->release[r].nch; c++)
            b += sizeof(struct slchunk) + (size_t)e->release[r].ch[c]->cap * 4;
    }
    b += (size_t)e->cap_cls * sizeof(struct mclass);
    b += (size_t)(e->leaf_tab.mask + 1) * 4 + (size_t)(e->cls_tab.mask + 1) * 4;
    for (uint32_t i = 0; i < e->n_lists; i++)
        b += (size_t)e->lists[i].cap * 4;
    b += e->in.bytes + (size_t)e->in.cap * sizeof(void *) + (size_t)(e->in.tab.mask + 1) * 4;
    b += e->ar.bytes;
    st->bytes = b;
}
