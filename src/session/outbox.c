/*
 * outbox.c — a session's bounded outbox: FIFO of encoded frames plus a
 * coalescing map keyed by supersedes_key (bigfleet/outbox.h).
 *
 * Design notes
 *   - Frames: a singly linked FIFO of malloc'd frames (length + bytes).
 *   - Keyed: entries live in a pool array; an open-addressing index
 *     (linear probing, backward-shift deletion: no tombstones) maps key ->
 *     entry; entries are chained in first-queued order (a doubly linked
 *     list through the pool), so replacing a value keeps its place.
 *   - Nothing is allocated for a session that never queues (10,000 idle
 *     sessions cost only the struct).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/outbox.h"

struct bf_outbox_frame {
    struct bf_outbox_frame *next;
    size_t len;
    uint8_t data[];
};

#define NIL UINT32_MAX

struct kent {
    uint64_t key;
    uint32_t prev, next; /* FIFO links (pool indices) */
    uint32_t len;
    uint8_t val[BF_OUTBOX_VAL_MAX];
};

struct bf_outbox_keyed {
    struct kent *pool;
    uint32_t pool_cap, pool_used, free_head; /* free list through .next */
    uint32_t *idx;                           /* entry index + 1, 0 = empty */
    uint32_t mask;
    uint32_t n;
    uint32_t head, tail;
};

void bf_outbox_init(struct bf_outbox *o, const struct bf_outbox_limits *lim)
{
    memset(o, 0, sizeof *o);
    o->lim = *lim;
}

void bf_outbox_reset(struct bf_outbox *o)
{
    while (o->head) {
        struct bf_outbox_frame *f = o->head;
        o->head = f->next;
        free(f);
    }
    o->tail = NULL;
    o->frame_bytes = 0;
    o->n_frames = 0;
    if (o->kd) {
        free(o->kd->pool);
        free(o->kd->idx);
        free(o->kd);
        o->kd = NULL;
    }
}

int bf_outbox_push_frame(struct bf_outbox *o, const void *data, size_t len)
{
    if (o->n_frames + 1 > o->lim.max_frames || o->frame_bytes + len > o->lim.max_frame_bytes)
        return -ENOBUFS;
    struct bf_outbox_frame *f = malloc(sizeof *f + (len ? len : 1));
    if (!f)
        return -ENOMEM;
    f->next = NULL;
    f->len = len;
    if (len)
        memcpy(f->data, data, len);
    if (o->tail)
        o->tail->next = f;
    else
        o->head = f;
    o->tail = f;
    o->frame_bytes += len;
    o->n_frames++;
    return 0;
}

static uint32_t khash(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return (uint32_t)k;
}

static int kd_rehash(struct bf_outbox_keyed *kd, uint32_t ncap)
{
    uint32_t *ni = calloc(ncap, sizeof *ni);
    if (!ni)
        return -ENOMEM;
    for (uint32_t e = kd->head; e != NIL; e = kd->pool[e].next) {
        uint32_t i = khash(kd->pool[e].key) & (ncap - 1);
        while (ni[i])
            i = (i + 1) & (ncap - 1);
        ni[i] = e + 1;
    }
    free(kd->idx);
    kd->idx = ni;
    kd->mask = ncap - 1;
    return 0;
}

/* index slot holding key, or the empty slot where it would go */
static uint32_t kd_find(const struct bf_outbox_keyed *kd, uint64_t key, bool *found)
{
    uint32_t i = khash(key) & kd->mask;
    while (kd->idx[i]) {
        if (kd->pool[kd->idx[i] - 1].key == key) {
            *found = true;
            return i;
        }
        i = (i + 1) & kd->mask;
    }
    *found = false;
    return i;
}

int bf_outbox_put_keyed(struct bf_outbox *o, uint64_t key, const void *val, size_t len)
{
    if (len > BF_OUTBOX_VAL_MAX)
        return -EINVAL;
    if (!o->kd) {
        o->kd = calloc(1, sizeof *o->kd);
        if (!o->kd)
            return -ENOMEM;
        o->kd->head = o->kd->tail = o->kd->free_head = NIL;
        if (kd_rehash(o->kd, 16)) {
            free(o->kd);
            o->kd = NULL;
            return -ENOMEM;
        }
    }
    struct bf_outbox_keyed *kd = o->kd;
    bool found;
    uint32_t slot = kd_find(kd, key, &found);
    if (found) {
        struct kent *e = &kd->pool[kd->idx[slot] - 1];
        memcpy(e->val, val, len);
        e->len = (uint32_t)len;
        o->coalesced++;
        return 1;
    }
    if (kd->n >= o->lim.max_keys) {
        o->dropped++;
        return -ENOBUFS;
    }
    if ((kd->n + 1) * 2 > kd->mask + 1) {
        if (kd_rehash(kd, (kd->mask + 1) * 2))
            return -ENOMEM;
        slot = kd_find(kd, key, &found);
    }
    uint32_t e;
    if (kd->free_head != NIL) {
        e = kd->free_head;
        kd->free_head = kd->pool[e].next;
    } else {
        if (kd->pool_used == kd->pool_cap) {
            uint32_t ncap = kd->pool_cap ? kd->pool_cap * 2 : 16;
            struct kent *np = realloc(kd->pool, (size_t)ncap * sizeof *np);
            if (!np)
                return -ENOMEM;
            kd->pool = np;
            kd->pool_cap = ncap;
        }
        e = kd->pool_used++;
    }
    struct kent *en = &kd->pool[e];
    en->key = key;
    en->len = (uint32_t)len;
    memcpy(en->val, val, len);
    en->next = NIL;
    en->prev = kd->tail;
    if (kd->tail != NIL)
        kd->pool[kd->tail].next = e;
    else
        kd->head = e;
    kd->tail = e;
    kd->idx[slot] = e + 1;
    kd->n++;
    return 0;
}

void bf_outbox_peek(const struct bf_outbox *o, struct bf_outbox_item *it)
{
    memset(it, 0, sizeof *it);
    if (o->head) {
        it->kind = BF_OUTBOX_FRAME;
        it->data = o->head->data;
        it->len = o->head->len;
        return;
    }
    if (o->kd && o->kd->head != NIL) {
        const struct kent *e = &o->kd->pool[o->kd->head];
        it->kind = BF_OUTBOX_KEYED;
        it->data = e->val;
        it->len = e->len;
        it->key = e->key;
        return;
    }
    it->kind = BF_OUTBOX_EMPTY;
}

static void kd_remove_head(struct bf_outbox_keyed *kd)
{
    uint32_t e = kd->head;
    bool found;
    uint32_t i = kd_find(kd, kd->pool[e].key, &found);
    /* backward-shift deletion */
    uint32_t j = i;
    for (;;) {
        kd->idx[i] = 0;
        for (;;) {
            j = (j + 1) & kd->mask;
            if (!kd->idx[j])
                goto unlinked;
            uint32_t home = khash(kd->pool[kd->idx[j] - 1].key) & kd->mask;
            /* can the entry at j move to i? (i lies cyclically in [home, j)) */
            if (i <= j ? (home <= i || home > j) : (home <= i && home > j))
                break;
        }
        kd->idx[i] = kd->idx[j];
        i = j;
    }
unlinked:
    kd->head = kd->pool[e].next;
    if (kd->head != NIL)
        kd->pool[kd->head].prev = NIL;
    else
        kd->tail = NIL;
    kd->pool[e].next = kd->free_head;
    kd->free_head = e;
    kd->n--;
}

void bf_outbox_pop(struct bf_outbox *o)
{
    if (o->head) {
        struct bf_outbox_frame *f = o->head;
        o->head = f->next;
        if (!o->head)
            o->tail = NULL;
        o->frame_bytes -= f->len;
        o->n_frames--;
        free(f);
        return;
    }
    if (o->kd && o->kd->head != NIL) {
        kd_remove_head(o->kd);
        if (o->kd->n == 0 && o->kd->pool_cap > 64) {
            /* release the memory of a drained burst (resync of a large cluster) */
            free(o->kd->pool);
            free(o->kd->idx);
            free(o->kd);
            o->kd = NULL;
        }
    }
}

uint32_t bf_outbox_count(const struct bf_outbox *o)
{
    return o->n_frames + (o->kd ? o->kd->n : 0);
}

size_t bf_outbox_bytes(const struct bf_outbox *o)
{
    size_t b = o->frame_bytes + (size_t)o->n_frames * sizeof(struct bf_outbox_frame);
    if (o->kd)
        b += sizeof *o->kd + (size_t)o->kd->pool_cap * sizeof(struct kent) +
             (size_t)(o->kd->mask + 1) * sizeof(uint32_t);
    return b;
}
