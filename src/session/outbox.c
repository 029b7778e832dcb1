/*
 * outbox.c — a session's bounded outbox: FIFO of encoded frames plus a
 * coalescing map keyed by supersedes_key (bigfleet/outbox.h).
 *
 * Design notes
 *   - Frames: a singly linked FIFO of malloc'd frames (length + bytes).
 *   - Keyed: entries live in a pool array; an index (bigfleet/hmap.h)
 *     maps key -> entry; entries are chained in first-queued order (a doubly linked
 *     list through the pool), so replacing a value keeps its place.
 *   - Nothing is allocated for a session that never queues (10,000 idle
 *     sessions cost only the struct).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/hmap.h"
#include "bigfleet/outbox.h"
#include "bigfleet/strbuf.h"

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

/* supersedes_key -> pool index */
BF_HMAP_DEFINE(kd_index, uint64_t, uint32_t, bf_hash_u64, BF_HMAP_EQ)

struct bf_outbox_keyed {
    struct kent *pool;
    uint32_t pool_used, free_head; /* free list through .next */
    size_t pool_cap;
    struct kd_index idx;
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
        kd_index_free(&o->kd->idx);
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

int bf_outbox_put_keyed(struct bf_outbox *o, uint64_t key, const void *val, size_t len)
{
    if (len > BF_OUTBOX_VAL_MAX)
        return -EINVAL;
    if (!o->kd) {
        o->kd = calloc(1, sizeof *o->kd);
        if (!o->kd)
            return -ENOMEM;
        o->kd->head = o->kd->tail = o->kd->free_head = NIL;
    }
    struct bf_outbox_keyed *kd = o->kd;
    const uint32_t *at = kd_index_ref(&kd->idx, key);
    if (at) {
        struct kent *e = &kd->pool[*at];
        memcpy(e->val, val, len);
        e->len = (uint32_t)len;
        o->coalesced++;
        return 1;
    }
    if (kd->n >= o->lim.max_keys) {
        o->dropped++;
        return -ENOBUFS;
    }
    if (kd_index_reserve(&kd->idx, kd->n + 1)) /* the put below cannot fail */
        return -ENOMEM;
    uint32_t e;
    if (kd->free_head != NIL) {
        e = kd->free_head;
        kd->free_head = kd->pool[e].next;
    } else {
        if (bf_grow((void **)&kd->pool, &kd->pool_cap, (size_t)kd->pool_used + 1, sizeof *kd->pool))
            return -ENOMEM;
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
    kd_index_put(&kd->idx, key, e);
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
    kd_index_del(&kd->idx, kd->pool[e].key, NULL);
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
            kd_index_free(&o->kd->idx);
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
             (o->kd->idx.slots ? (size_t)(o->kd->idx.mask + 1) * sizeof *o->kd->idx.slots : 0);
    return b;
}
