/*
 * tables.c — the simulated provider's containers: growable byte buffers,
 * interned string pools and the content-interned, reference-counted
 * shard_metadata pool (their indexes are bigfleet/hmap.h's context variant).
 *
 * Design notes: nothing here knows about machines. Every allocation failure
 * is reported (-ENOMEM or UINT32_MAX) and leaves the container unchanged.
 * Single-threaded, like struct bf_sim.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "bigfleet/strbuf.h"
#include "bigfleet/util.h"
#include "simprovider/sim_internal.h"

/* ------------------------------------------------------------ sim_buf */

int bf_sim_buf_reserve(struct sim_buf *b, size_t extra)
{
    if (b->cap - b->len >= extra)
        return 0;
    size_t need;
    if (!bf_add_size(b->len, extra, &need))
        return -ENOMEM;
    return bf_grow((void **)&b->p, &b->cap, need, 1);
}

void bf_sim_buf_free(struct sim_buf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* ------------------------------------------------------------ hash index */

uint64_t bf_sim_hash(const void *p, size_t len)
{
    return XXH3_64bits(p, len);
}

/* ------------------------------------------------------------ string pools */

int bf_sim_strpool_init(struct sim_strpool *sp)
{
    memset(sp, 0, sizeof *sp);
    sp->cap = 16;
    sp->off = malloc(sp->cap * sizeof *sp->off);
    sp->len = malloc(sp->cap * sizeof *sp->len);
    if (!sp->off || !sp->len || bf_sim_buf_reserve(&sp->arena, 1)) {
        bf_sim_strpool_free(sp);
        return -ENOMEM;
    }
    sp->arena.p[0] = 0;
    sp->arena.len = 1;
    sp->off[0] = 0;
    sp->len[0] = 0;
    sp->n = 1;
    return 0;
}

void bf_sim_strpool_free(struct sim_strpool *sp)
{
    bf_sim_buf_free(&sp->arena);
    free(sp->off);
    free(sp->len);
    sim_strix_free(&sp->ix);
    memset(sp, 0, sizeof *sp);
}

int bf_sim_str_reserve(struct sim_strpool *sp, size_t n)
{
    return n > UINT32_MAX ? -ENOMEM : sim_strix_reserve(&sp->ix, (uint32_t)n, sp);
}

uint32_t bf_sim_str_find(const struct sim_strpool *sp, const void *p, size_t len)
{
    if (len == 0)
        return 0;
    uint32_t i = sim_strix_find(&sp->ix, bf_sim_hash(p, len), sp, (struct sim_bytes){p, len});
    return i == BF_HMAP_NONE ? 0 : i;
}

uint32_t bf_sim_str_append(struct sim_strpool *sp, const void *p, size_t len)
{
    if (len == 0)
        return 0;
    if (len > UINT32_MAX - 1 || sp->n >= UINT32_MAX - 1 || sp->arena.len + len + 1 > UINT32_MAX)
        return UINT32_MAX;
    if (sp->n == sp->cap) {
        size_t cap = sp->cap * 2;
        uint32_t *off = realloc(sp->off, cap * sizeof *off);
        if (!off)
            return UINT32_MAX;
        sp->off = off;
        uint32_t *ln = realloc(sp->len, cap * sizeof *ln);
        if (!ln)
            return UINT32_MAX;
        sp->len = ln;
        sp->cap = cap;
    }
    if (bf_sim_buf_reserve(&sp->arena, len + 1))
        return UINT32_MAX;
    uint32_t idx = (uint32_t)sp->n;
    if (sim_strix_add(&sp->ix, bf_sim_hash(p, len), idx, sp))
        return UINT32_MAX;
    sp->off[idx] = (uint32_t)sp->arena.len;
    sp->len[idx] = (uint32_t)len;
    memcpy(sp->arena.p + sp->arena.len, p, len);
    sp->arena.p[sp->arena.len + len] = 0;
    sp->arena.len += len + 1;
    sp->n++;
    return idx;
}

uint32_t bf_sim_str_intern(struct sim_strpool *sp, const void *p, size_t len)
{
    if (len == 0)
        return 0;
    uint32_t i = bf_sim_str_find(sp, p, len);
    if (i)
        return i;
    return bf_sim_str_append(sp, p, len);
}

/* ------------------------------------------------------------ metadata pool */

int bf_sim_mdpool_init(struct sim_mdpool *mp)
{
    memset(mp, 0, sizeof *mp);
    mp->cap = 16;
    mp->v = calloc(mp->cap, sizeof *mp->v);
    if (!mp->v)
        return -ENOMEM;
    mp->n = 1; /* index 0 = none */
    return 0;
}

void bf_sim_mdpool_free(struct sim_mdpool *mp)
{
    if (mp->v) {
        for (size_t i = 1; i < mp->n; i++) {
            free(mp->v[i].raw);
            free(mp->v[i].enc);
        }
    }
    free(mp->v);
    free(mp->freel);
    sim_mdix_free(&mp->ix);
    memset(mp, 0, sizeof *mp);
}

struct md_sort {
    const struct bf_sim_md_entry *e;
    size_t pos;
};

static int md_sort_cmp(const void *a, const void *b)
{
    const struct md_sort *x = a, *y = b;
    size_t l = x->e->key.len < y->e->key.len ? x->e->key.len : y->e->key.len;
    int c = l ? memcmp(x->e->key.p, y->e->key.p, l) : 0;
    if (c)
        return c;
    if (x->e->key.len != y->e->key.len)
        return x->e->key.len < y->e->key.len ? -1 : 1;
    return x->pos < y->pos ? -1 : (x->pos > y->pos ? 1 : 0);
}

static uint32_t md_insert_raw(struct sim_mdpool *mp, uint8_t *raw, size_t raw_len, uint32_t n)
{
    /* takes ownership of raw */
    uint64_t h = bf_sim_hash(raw, raw_len);
    uint32_t found = sim_mdix_find(&mp->ix, h, mp, (struct sim_bytes){raw, raw_len});
    if (found != BF_HMAP_NONE) {
        free(raw);
        mp->v[found].refs++;
        return found;
    }
    struct sim_md tmp = {.refs = 1, .n = n, .hash = h, .raw = raw, .raw_len = raw_len};
    if (bf_sim_md_encode(&tmp))
        goto fail;
    uint32_t idx;
    bool fresh = false;
    if (mp->nfree) {
        idx = mp->freel[--mp->nfree];
    } else {
        if (mp->n == mp->cap) {
            size_t cap = mp->cap * 2;
            struct sim_md *v = realloc(mp->v, cap * sizeof *v);
            if (!v)
                goto fail;
            memset(v + mp->cap, 0, (cap - mp->cap) * sizeof *v);
            mp->v = v;
            mp->cap = cap;
        }
        if (mp->n >= UINT32_MAX - 1)
            goto fail;
        idx = (uint32_t)mp->n++;
        fresh = true;
    }
    if (sim_mdix_add(&mp->ix, h, idx, mp)) {
        if (fresh)
            mp->n--;
        else
            mp->freel[mp->nfree++] = idx; /* the slot we just popped */
        goto fail;
    }
    mp->v[idx] = tmp;
    return idx;
fail:
    free(tmp.enc);
    free(raw);
    return UINT32_MAX;
}

uint32_t bf_sim_md_intern(struct sim_mdpool *mp, const struct bf_sim_md_entry *e, size_t n)
{
    if (n == 0)
        return 0;
    struct md_sort *v = malloc(n * sizeof *v);
    if (!v)
        return UINT32_MAX;
    for (size_t i = 0; i < n; i++) {
        v[i].e = &e[i];
        v[i].pos = i;
    }
    qsort(v, n, sizeof *v, md_sort_cmp);
    /* last-wins: keep the highest position among equal keys (the last one of
     * each run, since equal keys sort by position) */
    size_t raw_len = 0, kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (i + 1 < n && v[i].e->key.len == v[i + 1].e->key.len &&
            (v[i].e->key.len == 0 ||
             memcmp(v[i].e->key.p, v[i + 1].e->key.p, v[i].e->key.len) == 0))
            continue;
        raw_len += 8 + v[i].e->key.len + v[i].e->value.len;
        kept++;
    }
    uint8_t *raw = malloc(raw_len ? raw_len : 1);
    if (!raw) {
        free(v);
        return UINT32_MAX;
    }
    uint8_t *p = raw;
    for (size_t i = 0; i < n; i++) {
        if (i + 1 < n && v[i].e->key.len == v[i + 1].e->key.len &&
            (v[i].e->key.len == 0 ||
             memcmp(v[i].e->key.p, v[i + 1].e->key.p, v[i].e->key.len) == 0))
            continue;
        uint32_t kl = (uint32_t)v[i].e->key.len, vl = (uint32_t)v[i].e->value.len;
        memcpy(p, &kl, 4);
        p += 4;
        if (kl)
            memcpy(p, v[i].e->key.p, kl);
        p += kl;
        memcpy(p, &vl, 4);
        p += 4;
        if (vl)
            memcpy(p, v[i].e->value.p, vl);
        p += vl;
    }
    free(v);
    return md_insert_raw(mp, raw, raw_len, (uint32_t)kept);
}

uint32_t bf_sim_md_intern_raw(struct sim_mdpool *mp, const uint8_t *raw, size_t len)
{
    if (len == 0)
        return 0;
    /* validate and count */
    size_t off = 0;
    uint32_t n = 0;
    while (off < len) {
        uint32_t kl, vl;
        if (len - off < 4)
            return UINT32_MAX;
        memcpy(&kl, raw + off, 4);
        off += 4;
        if (len - off < (size_t)kl + 4)
            return UINT32_MAX;
        off += kl;
        memcpy(&vl, raw + off, 4);
        off += 4;
        if (len - off < vl)
            return UINT32_MAX;
        off += vl;
        n++;
    }
    uint8_t *copy = malloc(len);
    if (!copy)
        return UINT32_MAX;
    memcpy(copy, raw, len);
    return md_insert_raw(mp, copy, len, n);
}

void bf_sim_md_ref(struct sim_mdpool *mp, uint32_t i)
{
    if (i)
        mp->v[i].refs++;
}

void bf_sim_md_unref(struct sim_mdpool *mp, uint32_t i)
{
    if (!i)
        return;
    struct sim_md *m = &mp->v[i];
    if (--m->refs)
        return;
    sim_mdix_remove(&mp->ix, m->hash, i, mp);
    free(m->raw);
    free(m->enc);
    memset(m, 0, sizeof *m);
    if (mp->nfree == mp->freecap &&
        bf_grow((void **)&mp->freel, &mp->freecap, mp->nfree + 1, sizeof *mp->freel))
        return; /* the slot is simply not reused */
    mp->freel[mp->nfree++] = i;
}

/* ------------------------------------------------------------ misc */

const char *bf_sim_kind_lower(int kind)
{
    static const char *const k[] = {"create", "configure", "drain", "delete"};
    return kind >= 0 && kind < BF_SIM_KIND_COUNT ? k[kind] : "unknown";
}

void bf_sim_zone_default_name(uint32_t z, char *buf, size_t n)
{
    if (z < 26)
        snprintf(buf, n, "zone-%c", 'a' + (int)z);
    else
        snprintf(buf, n, "zone-%u", z);
}
