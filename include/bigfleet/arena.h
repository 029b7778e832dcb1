/*
 * bigfleet/arena.h — the need-row arena allocator: extents of the shared row
 * arena (reference/shard.md §4). Implemented in src/session/arena.c.
 *
 * Part of the session module (src/session/, docs/internals.md "Layers");
 * single-threaded state owned by its caller. Errors are negative errno
 * values, listed per function.
 */
#ifndef BIGFLEET_ARENA_H
#define BIGFLEET_ARENA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One extent of the shared row arena: rows [off, off + len). */
struct bf_extent {
    uint32_t off;
    uint32_t len;
};

/*
 * First-fit allocator over `capacity` rows with a sorted, coalesced free
 * list. Private to the single writer of the arena (the ingest thread);
 * rebuilt from the published cluster rows after a session restart.
 */
struct bf_arena {
    uint32_t capacity;
    uint32_t n_free, cap_free;
    struct bf_extent *free; /* sorted by off, no two adjacent */
    uint32_t free_rows;
};

/* Errors: -EINVAL (capacity 0), -ENOMEM. */
int bf_arena_init(struct bf_arena *a, uint32_t capacity);
void bf_arena_destroy(struct bf_arena *a);
/* Everything free except the given live extents (any order; len 0 ignored).
 * Errors: -EINVAL (an extent outside the arena or two overlapping),
 * -ENOMEM. On error the arena is left all-free. */
int bf_arena_rebuild(struct bf_arena *a, const struct bf_extent *live, uint32_t n_live);
/* Lowest-addressed free extent of len rows (len 0: *off = 0, no-op).
 * Errors: -ENOSPC (no free run that long), -ENOMEM. */
int bf_arena_alloc(struct bf_arena *a, uint32_t len, uint32_t *off);
/* Highest-addressed fit: the top end of the highest free run of len rows.
 * Alternating ends per replacement keeps large extents against the ends of
 * the arena, so a cluster replacing a large rollup always finds room on the
 * other side. -ENOSPC, -ENOMEM. */
int bf_arena_alloc_high(struct bf_arena *a, uint32_t len, uint32_t *off);
/* Same as bf_arena_alloc, only if it starts below `below`; -ENOSPC otherwise. */
int bf_arena_alloc_below(struct bf_arena *a, uint32_t len, uint32_t below, uint32_t *off);
/* Returns an extent (len 0: no-op). Errors: -EINVAL (outside the arena or
 * overlapping free space: a double free), -ENOMEM. */
int bf_arena_release(struct bf_arena *a, uint32_t off, uint32_t len);
/* Longest free run. */
uint32_t bf_arena_largest(const struct bf_arena *a);

/* One relocation planned by bf_arena_compact: the live extent `idx` moves
 * from rows [from, from + len) to [to, to + len). */
struct bf_arena_move {
    uint32_t idx;
    uint32_t from, to, len;
};
/*
 * Makes room for `want` rows when the free space is fragmented: visits the
 * live extents (live[i].idx names the owner) by increasing offset and moves
 * each one to the lowest free run below it that can hold it, until a run of
 * `want` rows is free; then allocates it (*off). The allocator is updated
 * as if every move were done (the destination allocated, the source
 * released); moves[] (capacity n_live) lists them in order. The caller must
 * execute them in that order — copy the rows, republish the owner with the
 * new offset — before writing into *off: a later move may land in an
 * earlier move's source, which is safe once that owner was republished.
 * Returns the number of moves (>= 0) with *off set, or -ENOSPC when even
 * after compaction no run is long enough (the moves already planned are
 * valid and must still be executed; *moved gets their count), -ENOMEM.
 */
struct bf_arena_live {
    uint32_t idx;
    uint32_t off, len;
};
int bf_arena_compact(struct bf_arena *a, struct bf_arena_live *live, uint32_t n_live, uint32_t want,
                     struct bf_arena_move *moves, uint32_t *moved, uint32_t *off);

#endif /* BIGFLEET_ARENA_H */
