/*
 * base.c — the engine's containers: growable arrays, the per-cycle arena,
 * hashing (the u64 -> u32 map and the callback-keyed id tables are bigfleet/hmap.h's), the
 * refcounted string interner and chunked sorted slot lists.
 *
 * Design notes: no global state; every structure belongs to one engine and is
 * touched by one thread. Allocation failures surface as -ENOMEM / NONE32 and
 * leave the structure unchanged. Open addressing uses linear probing with
 * backward-shift deletion (no tombstones), so tables never degrade under churn.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bigfleet/strbuf.h"
#include "cycle/engine/engine_internal.h"

/* ------------------------------------------------------------- page advice */

static bool huge_pages; /* bf_engine_set_huge_pages; engine.h has the contract */

void bf_engine_set_huge_pages(bool on)
{
    huge_pages = on;
}

bool bf_engine_huge_pages(void)
{
    return huge_pages;
}

void bf_engine_advise_pages(void *p, size_t n)
{
    uintptr_t a = (uintptr_t)bfe_huge_round((uintptr_t)p),
              b = ((uintptr_t)p + n) & ~(uintptr_t)(BFE_HUGE_PAGE - 1);
    if (b > a)
        (void)madvise((void *)a, b - a, huge_pages ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older headers lack it */
#endif

static bool populate_unsupported; /* the kernel answered EINVAL once */

void bf_engine_populate(void *p, size_t n)
{
    if (huge_pages || n == 0 || populate_unsupported)
        return;
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)4095, b = ((uintptr_t)p + n + 4095) & ~(uintptr_t)4095;
    if (madvise((void *)a, b - a, MADV_POPULATE_WRITE) != 0 && errno == EINVAL)
        populate_unsupported = true;
}

void bfe_unpopulate(void *p, size_t n)
{
    uintptr_t a = ((uintptr_t)p + 4095) & ~(uintptr_t)4095,
              b = ((uintptr_t)p + n) & ~(uintptr_t)4095;
    if (!huge_pages && b > a)
        (void)madvise((void *)a, b - a, MADV_DONTNEED);
}

/* bf_grow (bigfleet/strbuf.h) for the engine's uint32_t capacities. An
 * array that reaches 2 MiB is allocated 2 MiB-aligned and advised per
 * bf_engine_set_huge_pages, like the mirror's big arrays (mirror.c): with
 * huge pages on, a restarted cycle process's first cycle fills the credit
 * pre-pass's arrays with one fault per 2 MiB (on this project's hypervisor
 * every first touch of a 4 KiB page costs ~15 us; i18-restart4, stop 29).
 * Still one malloc'd block (aligned_alloc), freed with free(); growth copies
 * what the array held. */

int bfe_grow(void **p, uint32_t *cap, uint32_t need, size_t elsz)
{
    if (need <= *cap)
        return 0;
    size_t nc = *cap ? *cap : 8, bytes;
    while (nc < need)
        nc *= 2;
    if (__builtin_mul_overflow(nc, elsz, &bytes))
        return -ENOMEM;
    if (bytes < BFE_HUGE_PAGE) {
        void *q = realloc(*p, bytes);
        if (!q)
            return -ENOMEM;
        *p = q;
    } else {
        size_t len = bfe_huge_round(bytes);
        void *q = aligned_alloc(BFE_HUGE_PAGE, len);
        if (!q)
            return -ENOMEM;
        bf_engine_advise_pages(q, len);
        if (*p) {
            memcpy(q, *p, (size_t)*cap * elsz);
            free(*p);
        }
        *p = q;
        nc = len / elsz;
    }
    *cap = nc > UINT32_MAX ? UINT32_MAX : (uint32_t)nc;
    return 0;
}

/* ------------------------------------------------------------------ sorting */

void bfe_sort_tail(void *base, size_t n, size_t sz, int (*cmp)(const void *, const void *),
                   void *scratch)
{
    char *v = base, *out = scratch;
    size_t p = 1;
    while (p < n && cmp(v + (p - 1) * sz, v + p * sz) <= 0)
        p++;
    if (p >= n)
        return;
    qsort(v + p * sz, n - p, sz, cmp);
    size_t i = 0, j = p, k = 0;
    while (i < p && j < n) {
        const char *x = v + i * sz, *y = v + j * sz;
        if (cmp(y, x) < 0) {
            memcpy(out + k * sz, y, sz);
            j++;
        } else {
            memcpy(out + k * sz, x, sz);
            i++;
        }
        k++;
    }
    if (i < p)
        memcpy(out + k * sz, v + i * sz, (p - i) * sz);
    else if (j < n)
        memcpy(out + k * sz, v + j * sz, (n - j) * sz);
    memcpy(v, out, n * sz);
}

/* ------------------------------------------------------------------ arena */

void *bfe_arena_alloc(struct arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n == 0)
        n = 16;
    for (;;) {
        struct arena_block *b = a->cur;
        if (b && b->size - b->used >= n) {
            void *p = b->mem + b->used;
            b->used += n;
            return p;
        }
        if (b && b->next) {
            a->cur = b->next;
            a->cur->used = 0;
            continue;
        }
        size_t sz = (size_t)1 << 20;
        while (sz < n)
            sz *= 2;
        struct arena_block *nb = malloc(sizeof *nb + sz);
        if (!nb)
            return NULL;
        nb->next = NULL;
        nb->size = sz;
        nb->used = 0;
        a->bytes += sz;
        if (b)
            b->next = nb;
        else
            a->head = nb;
        a->cur = nb;
    }
}

void bfe_arena_reset(struct arena *a)
{
    a->cur = a->head;
    if (a->cur)
        a->cur->used = 0;
}

void bfe_arena_free(struct arena *a)
{
    struct arena_block *b = a->head;
    while (b) {
        struct arena_block *n = b->next;
        free(b);
        b = n;
    }
    a->head = a->cur = NULL;
    a->bytes = 0;
}

/* ------------------------------------------------------------------ hashing */

uint64_t bfe_hash_bytes(const void *p, size_t n, uint64_t seed)
{
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ULL ^ seed;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0x100000001b3ULL;
        h ^= h >> 29;
        s += 8;
        n -= 8;
    }
    while (n--) {
        h ^= *s++;
        h *= 0x100000001b3ULL;
    }
    return bfe_mix64(h);
}

/* ------------------------------------------------------------------ interner */

struct skey {
    const void *s;
    size_t len;
};

static uint64_t istr_hash(const void *ctx, uint32_t id)
{
    const struct interner *in = ctx;
    return in->v[id]->hash;
}

static bool istr_eq(const void *ctx, uint32_t id, const void *key)
{
    const struct interner *in = ctx;
    const struct skey *k = key;
    const struct istr *s = in->v[id];
    return s->len == k->len && memcmp(s->s, k->s, k->len) == 0;
}

int bfe_intern_init(struct interner *in)
{
    memset(in, 0, sizeof *in);
    if (GROW(in->v, in->cap, 1))
        return -ENOMEM;
    struct istr *z = calloc(1, sizeof *z + 1);
    if (!z)
        return -ENOMEM;
    z->refs = 1;
    in->v[0] = z;
    in->n = 1;
    return 0;
}

void bfe_intern_free(struct interner *in)
{
    for (uint32_t i = 0; i < in->n; i++)
        free(in->v[i]);
    free(in->v);
    free(in->freeids);
    free(in->zero);
    bfe_idtab_free(&in->tab);
    memset(in, 0, sizeof *in);
}

uint32_t bfe_intern_find(const struct interner *in, const void *s, size_t len)
{
    if (len == 0)
        return 0;
    struct skey k = {s, len};
    return bfe_idtab_find(&in->tab, bfe_hash_bytes(s, len, 0), istr_eq, in, &k);
}

uint32_t bfe_intern(struct interner *in, const void *s, size_t len)
{
    if (len == 0)
        return 0;
    if (len > UINT32_MAX - 1)
        return NONE32;
    uint64_t h = bfe_hash_bytes(s, len, 0);
    struct skey k = {s, len};
    uint32_t id = bfe_idtab_find(&in->tab, h, istr_eq, in, &k);
    if (id != NONE32) {
        in->v[id]->refs++;
        return id;
    }
    struct istr *x = malloc(sizeof *x + len + 1);
    if (!x)
        return NONE32;
    x->hash = h;
    x->len = (uint32_t)len;
    x->refs = 1;
    memcpy(x->s, s, len);
    x->s[len] = 0;
    if (in->nfree) {
        id = in->freeids[--in->nfree];
    } else {
        if (GROW(in->v, in->cap, in->n + 1)) {
            free(x);
            return NONE32;
        }
        id = in->n++;
    }
    in->v[id] = x;
    if (bfe_idtab_insert(&in->tab, h, id, istr_hash, in)) {
        in->v[id] = NULL;
        if (id == in->n - 1)
            in->n--;
        else
            in->freeids[in->nfree++] = id;
        free(x);
        return NONE32;
    }
    in->bytes += sizeof *x + len + 1;
    return id;
}

void bfe_intern_retain(struct interner *in, uint32_t id)
{
    if (id && id != NONE32)
        in->v[id]->refs++;
}

void bfe_intern_release(struct interner *in, uint32_t id)
{
    if (!id || id == NONE32)
        return;
    struct istr *s = in->v[id];
    if (--s->refs == 0) {
        /* defer the free to the next gc; on ENOMEM the string just leaks */
        if (!GROW(in->zero, in->capzero, in->nzero + 1))
            in->zero[in->nzero++] = id;
    }
}

void bfe_intern_gc(struct interner *in)
{
    for (uint32_t i = 0; i < in->nzero; i++) {
        uint32_t id = in->zero[i];
        struct istr *s = in->v[id];
        if (!s || s->refs)
            continue;
        if (GROW(in->freeids, in->capfree, in->nfree + 1))
            continue; /* keep it; harmless */
        bfe_idtab_remove(&in->tab, s->hash, id, istr_hash, in);
        in->bytes -= sizeof *s + s->len + 1;
        free(s);
        in->v[id] = NULL;
        in->freeids[in->nfree++] = id;
    }
    in->nzero = 0;
}

int bfe_strcmp_id(const struct interner *in, uint32_t a, uint32_t b)
{
    if (a == b)
        return 0;
    const struct istr *x = in->v[a], *y = in->v[b];
    uint32_t m = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->s, y->s, m);
    if (c)
        return c;
    return x->len < y->len ? -1 : x->len > y->len;
}

/* ------------------------------------------------------------------ slot lists */

static struct slchunk *chunk_new(uint32_t cap)
{
    struct slchunk *c = malloc(sizeof *c + (size_t)cap * sizeof(uint32_t));
    if (!c)
        return NULL;
    c->n = 0;
    c->cap = cap;
    return c;
}

/* first chunk whose last element is >= slot (by cmp), or the last chunk */
static uint32_t find_chunk(const struct slotlist *l, uint32_t slot, sl_cmp_fn cmp, const void *ctx)
{
    uint32_t lo = 0, hi = l->nch;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        const struct slchunk *c = l->ch[mid];
        if (cmp(ctx, c->s[c->n - 1], slot) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < l->nch ? lo : l->nch - 1;
}

static uint32_t lower_bound(const struct slchunk *c, uint32_t slot, sl_cmp_fn cmp, const void *ctx)
{
    uint32_t lo = 0, hi = c->n;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (cmp(ctx, c->s[mid], slot) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Doubles chunk ci's capacity (up to SL_CHUNK); NULL when out of memory. */
static struct slchunk *chunk_grow(struct slotlist *l, uint32_t ci)
{
    struct slchunk *c = l->ch[ci];
    uint32_t nc = c->cap * 2 > SL_CHUNK ? SL_CHUNK : c->cap * 2;
    struct slchunk *g = realloc(c, sizeof *g + (size_t)nc * sizeof(uint32_t));
    if (!g)
        return NULL;
    g->cap = nc;
    l->ch[ci] = g;
    return g;
}

/* Appends slot after the last element: the last chunk grows, or a new chunk
 * starts when it is full (a list filled in order keeps full chunks). */
static int sl_append(struct slotlist *l, uint32_t slot)
{
    struct slchunk *c = l->ch[l->nch - 1];
    if (c->n == c->cap && c->cap < SL_CHUNK) {
        if (!(c = chunk_grow(l, l->nch - 1)))
            return -ENOMEM;
    } else if (c->n == c->cap) {
        if (GROW(l->ch, l->capch, l->nch + 1))
            return -ENOMEM;
        c = chunk_new(SL_CHUNK);
        if (!c)
            return -ENOMEM;
        l->ch[l->nch++] = c;
    }
    c->s[c->n++] = slot;
    l->n++;
    return 0;
}

int bfe_sl_insert(struct slotlist *l, uint32_t slot, sl_cmp_fn cmp, const void *ctx)
{
    if (l->nch == 0) {
        if (GROW(l->ch, l->capch, 1))
            return -ENOMEM;
        struct slchunk *c = chunk_new(4);
        if (!c)
            return -ENOMEM;
        c->s[0] = slot;
        c->n = 1;
        l->ch[0] = c;
        l->nch = 1;
        l->n = 1;
        return 0;
    }
    /* slots often arrive in order (a mirror rebuild reads records in slot
     * order, which is mostly id order): one comparison with the last element
     * instead of two binary searches */
    const struct slchunk *last = l->ch[l->nch - 1];
    if (cmp(ctx, last->s[last->n - 1], slot) < 0)
        return sl_append(l, slot);
    uint32_t ci = find_chunk(l, slot, cmp, ctx);
    struct slchunk *c = l->ch[ci];
    uint32_t p = lower_bound(c, slot, cmp, ctx);
    if (c->n == c->cap) {
        if (c->cap < SL_CHUNK) {
            if (!(c = chunk_grow(l, ci)))
                return -ENOMEM;
        } else {
            /* split in halves */
            if (GROW(l->ch, l->capch, l->nch + 1))
                return -ENOMEM;
            struct slchunk *r = chunk_new(SL_CHUNK);
            if (!r)
                return -ENOMEM;
            uint32_t half = c->n / 2;
            r->n = c->n - half;
            memcpy(r->s, c->s + half, r->n * sizeof(uint32_t));
            c->n = half;
            memmove(l->ch + ci + 2, l->ch + ci + 1, (l->nch - ci - 1) * sizeof *l->ch);
            l->ch[ci + 1] = r;
            l->nch++;
            if (p > half) {
                c = r;
                p -= half;
            }
        }
    }
    memmove(c->s + p + 1, c->s + p, (c->n - p) * sizeof(uint32_t));
    c->s[p] = slot;
    c->n++;
    l->n++;
    return 0;
}

void bfe_sl_remove_at(struct slotlist *l, uint32_t ci, uint32_t p)
{
    struct slchunk *c = l->ch[ci];
    memmove(c->s + p, c->s + p + 1, (c->n - p - 1) * sizeof(uint32_t));
    c->n--;
    l->n--;
    if (c->n == 0) {
        free(c);
        memmove(l->ch + ci, l->ch + ci + 1, (l->nch - ci - 1) * sizeof *l->ch);
        l->nch--;
        if (l->nch == 0) {
            free(l->ch);
            l->ch = NULL;
            l->capch = 0;
        }
    }
}

int bfe_sl_remove(struct slotlist *l, uint32_t slot, sl_cmp_fn cmp, const void *ctx)
{
    if (l->nch == 0)
        return -ENOENT;
    uint32_t ci = find_chunk(l, slot, cmp, ctx);
    struct slchunk *c = l->ch[ci];
    uint32_t p = lower_bound(c, slot, cmp, ctx);
    if (p >= c->n || c->s[p] != slot)
        return -ENOENT;
    bfe_sl_remove_at(l, ci, p);
    return 0;
}

uint32_t bfe_sl_rank(const struct slotlist *l, uint32_t slot, sl_cmp_fn cmp, const void *ctx)
{
    if (l->nch == 0)
        return NONE32;
    uint32_t ci = find_chunk(l, slot, cmp, ctx);
    const struct slchunk *c = l->ch[ci];
    uint32_t p = lower_bound(c, slot, cmp, ctx);
    if (p >= c->n || c->s[p] != slot)
        return NONE32;
    uint32_t r = p;
    for (uint32_t i = 0; i < ci; i++)
        r += l->ch[i]->n;
    return r;
}

void bfe_sl_seek(const struct slotlist *l, uint32_t pos, uint32_t *ci, uint32_t *off)
{
    uint32_t i = 0;
    while (i < l->nch && pos >= l->ch[i]->n) {
        pos -= l->ch[i]->n;
        i++;
    }
    *ci = i;
    *off = pos;
}

void bfe_sl_free(struct slotlist *l)
{
    for (uint32_t i = 0; i < l->nch; i++)
        free(l->ch[i]);
    free(l->ch);
    memset(l, 0, sizeof *l);
}
