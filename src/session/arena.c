/*
 * arena.c — first-fit allocator of need-row extents (bigfleet/arena.h).
 *
 * Design notes: the free list is a sorted array of disjoint, non-adjacent
 * extents (coalesced on release). The number of free runs is bounded by
 * the number of live extents + 1 (one per cluster), so linear scans are
 * cheap. State is process-private and rebuilt from the published cluster
 * rows (bf_arena_rebuild) when a session process starts.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/arena.h"

static int grow(struct bf_arena *a, uint32_t need)
{
    if (need <= a->cap_free)
        return 0;
    uint32_t ncap = a->cap_free ? a->cap_free * 2 : 16;
    while (ncap < need)
        ncap *= 2;
    struct bf_extent *n = realloc(a->free, (size_t)ncap * sizeof *n);
    if (!n)
        return -ENOMEM;
    a->free = n;
    a->cap_free = ncap;
    return 0;
}

int bf_arena_init(struct bf_arena *a, uint32_t capacity)
{
    memset(a, 0, sizeof *a);
    if (capacity == 0)
        return -EINVAL;
    a->capacity = capacity;
    if (grow(a, 1))
        return -ENOMEM;
    a->free[0] = (struct bf_extent){0, capacity};
    a->n_free = 1;
    a->free_rows = capacity;
    return 0;
}

void bf_arena_destroy(struct bf_arena *a)
{
    free(a->free);
    memset(a, 0, sizeof *a);
}

static int ext_cmp(const void *x, const void *y)
{
    const struct bf_extent *a = x, *b = y;
    return a->off < b->off ? -1 : a->off > b->off;
}

int bf_arena_rebuild(struct bf_arena *a, const struct bf_extent *live, uint32_t n_live)
{
    struct bf_extent *s = malloc(((size_t)n_live + 1) * sizeof *s);
    if (!s)
        return -ENOMEM;
    uint32_t n = 0;
    for (uint32_t i = 0; i < n_live; i++)
        if (live[i].len)
            s[n++] = live[i];
    qsort(s, n, sizeof *s, ext_cmp);
    int rc = 0;
    a->n_free = 0;
    a->free_rows = 0;
    uint64_t at = 0;
    for (uint32_t i = 0; i <= n; i++) {
        uint64_t start = i < n ? s[i].off : a->capacity;
        if (i < n && ((uint64_t)s[i].off + s[i].len > a->capacity || start < at)) {
            rc = -EINVAL;
            break;
        }
        if (start > at) {
            if ((rc = grow(a, a->n_free + 1)))
                break;
            a->free[a->n_free++] = (struct bf_extent){(uint32_t)at, (uint32_t)(start - at)};
            a->free_rows += (uint32_t)(start - at);
        }
        if (i < n)
            at = (uint64_t)s[i].off + s[i].len;
    }
    free(s);
    if (rc) {
        a->free[0] = (struct bf_extent){0, a->capacity};
        a->n_free = 1;
        a->free_rows = a->capacity;
    }
    return rc;
}

static void take(struct bf_arena *a, uint32_t i, uint32_t len, uint32_t *off)
{
    *off = a->free[i].off;
    a->free[i].off += len;
    a->free[i].len -= len;
    a->free_rows -= len;
    if (a->free[i].len == 0) {
        memmove(&a->free[i], &a->free[i + 1], (a->n_free - i - 1) * sizeof *a->free);
        a->n_free--;
    }
}

int bf_arena_alloc(struct bf_arena *a, uint32_t len, uint32_t *off)
{
    return bf_arena_alloc_below(a, len, UINT32_MAX, off);
}

int bf_arena_alloc_below(struct bf_arena *a, uint32_t len, uint32_t below, uint32_t *off)
{
    if (len == 0) {
        *off = 0;
        return 0;
    }
    for (uint32_t i = 0; i < a->n_free && a->free[i].off < below; i++) {
        if (a->free[i].len >= len) {
            take(a, i, len, off);
            return 0;
        }
    }
    return -ENOSPC;
}

int bf_arena_alloc_high(struct bf_arena *a, uint32_t len, uint32_t *off)
{
    if (len == 0) {
        *off = 0;
        return 0;
    }
    for (uint32_t i = a->n_free; i-- > 0;) {
        if (a->free[i].len >= len) {
            *off = a->free[i].off + a->free[i].len - len;
            a->free[i].len -= len;
            a->free_rows -= len;
            if (a->free[i].len == 0) {
                memmove(&a->free[i], &a->free[i + 1], (a->n_free - i - 1) * sizeof *a->free);
                a->n_free--;
            }
            return 0;
        }
    }
    return -ENOSPC;
}

int bf_arena_release(struct bf_arena *a, uint32_t off, uint32_t len)
{
    if (len == 0)
        return 0;
    uint64_t end = (uint64_t)off + len;
    if (end > a->capacity)
        return -EINVAL;
    /* first free run at or after off */
    uint32_t i = 0;
    while (i < a->n_free && a->free[i].off < off)
        i++;
    if (i > 0 && (uint64_t)a->free[i - 1].off + a->free[i - 1].len > off)
        return -EINVAL; /* overlaps the previous free run */
    if (i < a->n_free && a->free[i].off < end)
        return -EINVAL; /* overlaps the next free run */
    bool join_prev = i > 0 && a->free[i - 1].off + a->free[i - 1].len == off;
    bool join_next = i < a->n_free && a->free[i].off == end;
    if (join_prev && join_next) {
        a->free[i - 1].len += len + a->free[i].len;
        memmove(&a->free[i], &a->free[i + 1], (a->n_free - i - 1) * sizeof *a->free);
        a->n_free--;
    } else if (join_prev) {
        a->free[i - 1].len += len;
    } else if (join_next) {
        a->free[i].off = off;
        a->free[i].len += len;
    } else {
        if (grow(a, a->n_free + 1))
            return -ENOMEM;
        memmove(&a->free[i + 1], &a->free[i], (a->n_free - i) * sizeof *a->free);
        a->free[i] = (struct bf_extent){off, len};
        a->n_free++;
    }
    a->free_rows += len;
    return 0;
}

uint32_t bf_arena_largest(const struct bf_arena *a)
{
    uint32_t m = 0;
    for (uint32_t i = 0; i < a->n_free; i++)
        if (a->free[i].len > m)
            m = a->free[i].len;
    return m;
}

static int live_by_off(const void *x, const void *y)
{
    const struct bf_arena_live *a = x, *b = y;
    return a->off < b->off ? -1 : a->off > b->off;
}

int bf_arena_compact(struct bf_arena *a, struct bf_arena_live *live, uint32_t n_live, uint32_t want,
                     struct bf_arena_move *moves, uint32_t *moved, uint32_t *off)
{
    *moved = 0;
    if (bf_arena_alloc(a, want, off) == 0)
        return 0;
    qsort(live, n_live, sizeof *live, live_by_off);
    for (uint32_t k = 0; k < n_live; k++) {
        if (!live[k].len)
            continue;
        uint32_t to;
        if (bf_arena_alloc_below(a, live[k].len, live[k].off, &to) != 0)
            continue;
        int rc = bf_arena_release(a, live[k].off, live[k].len);
        if (rc)
            return rc;
        moves[(*moved)++] = (struct bf_arena_move){live[k].idx, live[k].off, to, live[k].len};
        live[k].off = to;
        if (bf_arena_alloc(a, want, off) == 0)
            return (int)*moved;
    }
    return -ENOSPC;
}
