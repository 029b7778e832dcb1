/*
 * strtab.c — the shared string table and the small registries (resource
 * dimensions, instance types, zones) in the inventory segment.
 *
 * Synchronisation: writers serialise on a pid lock word (CAS 0 -> pid). An
 * entry is fully written in the arena, arena_used advanced, and only then
 * its ref published into the hash with a release store (S1); readers probe
 * with acquire loads (S2, pairs with S1) and therefore only ever see complete
 * entries. Entries are never modified or freed while the segment lives, so
 * lock-free readers need no retry. A lock whose owner died is stolen (the
 * dead writer may have left unpublished bytes past arena_used: harmless).
 *
 * Registries are append-only arrays published by a release store of their
 * count (S3) and read after an acquire load of it.
 */
#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "bigfleet/util.h"
#include "shm_internal.h"

#define STR_MAX_LEN (16u << 20)

struct str_entry {
    uint32_t len;
    uint32_t hash;
};

uint64_t bf_str_cost(uint32_t len)
{
    return bf_align_up(sizeof(struct str_entry) + (size_t)len + 1, 8);
}

static inline const struct str_entry *entry_at(const struct bf_shm *s, uint32_t ref)
{
    return (const struct str_entry *)(s->arena + (uint64_t)ref * 8);
}

static int lock_acquire(struct bf_shm *s)
{
    _Atomic uint32_t *w = &s->inv->strtab.lock_owner;
    int64_t deadline = bf_mono_ns() + BF_STRLOCK_TIMEOUT_NS;
    for (unsigned attempt = 0;; attempt++) {
        uint32_t cur = 0;
        if (atomic_compare_exchange_weak_explicit(w, &cur, s->pid, memory_order_acquire,
                                                  memory_order_relaxed))
            return 0;
        if (cur != 0 && cur != s->pid && !bf_pid_alive(cur)) {
            /* the owner died holding the lock: steal it */
            if (atomic_compare_exchange_strong_explicit(w, &cur, s->pid, memory_order_acquire,
                                                        memory_order_relaxed)) {
                atomic_fetch_add_explicit(&s->inv->strtab.lock_steals, 1, memory_order_relaxed);
                return 0;
            }
        }
        if ((attempt & 63) == 63 && bf_mono_ns() > deadline)
            return -ETIMEDOUT;
        bf_backoff(attempt);
    }
}

static void lock_release(struct bf_shm *s)
{
    atomic_store_explicit(&s->inv->strtab.lock_owner, 0, memory_order_release);
}

static inline uint64_t published_end(const struct bf_shm *s)
{
    return bf_arena_published_end(s);
}

/* The entry of ref when it and its bytes lie inside [0, used), else NULL. */
static inline const struct str_entry *entry_in(const struct bf_shm *s, uint32_t ref, uint64_t used)
{
    if ((uint64_t)ref * 8 + sizeof(struct str_entry) > used)
        return NULL;
    const struct str_entry *e = entry_at(s, ref);
    if ((uint64_t)ref * 8 + sizeof(struct str_entry) + e->len + 1 > used)
        return NULL;
    return e;
}

static int find(const struct bf_shm *s, const void *bytes, uint32_t len, uint32_t h, uint32_t *ref,
                uint32_t *free_slot)
{
    uint32_t mask = s->index_mask;
    uint64_t used = published_end(s);
    for (uint32_t i = h & mask, n = 0; n <= mask; i = (i + 1) & mask, n++) {
        uint32_t r = atomic_load_explicit(&s->strhash[i], memory_order_acquire); /* S2 */
        if (r == 0) {
            if (free_slot)
                *free_slot = i;
            return -ENOENT;
        }
        const struct str_entry *e = entry_in(s, r, used);
        if (!e)
            continue; /* cannot happen for published refs; be defensive */
        if (e->hash == h && e->len == len && memcmp(e + 1, bytes, len) == 0) {
            *ref = r;
            return 0;
        }
    }
    if (free_slot)
        *free_slot = UINT32_MAX;
    return -ENOENT;
}

/*
 * Makes the arena's first `upto` bytes backed by the segment file, growing
 * the file (under the string lock) by at least BF_ARENA_STEP or an eighth of
 * what it backs, capped at the reserve (fallocate: a full tmpfs answers
 * -ENOSPC here, not SIGBUS later). Every process maps the whole
 * reserve, so the new pages are visible to all at once. 0 or -ENOSPC (no
 * file descriptor to grow with, or tmpfs refused).
 */
static int arena_reserve(struct bf_shm *s, uint64_t upto)
{
    struct bf_strtab_meta *m = &s->inv->strtab;
    uint64_t have = atomic_load_explicit(&m->arena_committed, memory_order_relaxed);
    if (upto <= have)
        return 0;
    uint64_t step = have / 8 > BF_ARENA_STEP ? have / 8 : BF_ARENA_STEP;
    uint64_t want = bf_align_up(upto + step, 4096);
    if (want > s->arena_bytes)
        want = s->arena_bytes;
    if (s->inv_fd <= 0 ||
        bf_shm_file_back(s->inv_fd, s->arena_off + have, s->arena_off + want) != 0)
        return -ENOSPC;
    atomic_store_explicit(&m->arena_committed, want, memory_order_release);
    return 0;
}

int bf_str_find(const struct bf_shm *s, const void *bytes, uint32_t len, uint32_t *ref)
{
    if (len == 0) {
        *ref = 0;
        return 0;
    }
    uint32_t h = (uint32_t)XXH3_64bits(bytes, len);
    return find(s, bytes, len, h, ref, NULL);
}

static int intern_missed(struct bf_shm *s, const void *bytes, uint32_t len, uint32_t h,
                         uint32_t *ref);

void bf_str_prefetch(const struct bf_shm *s, const void *bytes, uint32_t len)
{
    if (len == 0)
        return;
    uint32_t h = (uint32_t)XXH3_64bits(bytes, len);
    __builtin_prefetch(&s->strhash[h & s->index_mask]);
}

int bf_str_intern(struct bf_shm *s, const void *bytes, uint32_t len, uint32_t *ref)
{
    if (len == 0) {
        *ref = 0;
        return 0;
    }
    if (len > STR_MAX_LEN)
        return -E2BIG;
    uint32_t h = (uint32_t)XXH3_64bits(bytes, len);
    if (find(s, bytes, len, h, ref, NULL) == 0)
        return 0;
    return intern_missed(s, bytes, len, h, ref);
}

/* bf_str_intern after its lock-free probe missed: the probe again under the
 * string lock, then the new entry. */
static int intern_missed(struct bf_shm *s, const void *bytes, uint32_t len, uint32_t h,
                         uint32_t *ref)
{
    if (s->readonly)
        return -EROFS;
    int rc = lock_acquire(s);
    if (rc)
        return rc;
    uint32_t slot;
    if (find(s, bytes, len, h, ref, &slot) == 0) {
        lock_release(s);
        return 0;
    }
    struct bf_strtab_meta *m = &s->inv->strtab;
    uint64_t entries = atomic_load_explicit(&m->entries, memory_order_relaxed);
    uint64_t used = atomic_load_explicit(&m->arena_used, memory_order_relaxed);
    uint64_t need = bf_str_cost(len);
    if (slot == UINT32_MAX || entries + 1 > (uint64_t)(s->index_mask + 1) * 3 / 4 ||
        used + need > s->arena_bytes || (used / 8) > UINT32_MAX - 1 ||
        arena_reserve(s, used + need) != 0) {
        atomic_fetch_add_explicit(&m->intern_failures, 1, memory_order_relaxed);
        lock_release(s);
        return -ENOSPC;
    }
    struct str_entry *e = (struct str_entry *)(s->arena + used);
    e->len = len;
    e->hash = h;
    memcpy(e + 1, bytes, len);
    ((uint8_t *)(e + 1))[len] = 0;
    uint32_t r = (uint32_t)(used / 8);
    atomic_store_explicit(&m->arena_used, used + need, memory_order_release);
    atomic_store_explicit(&s->strhash[slot], r, memory_order_release); /* S1 */
    atomic_store_explicit(&m->entries, entries + 1, memory_order_relaxed);
    lock_release(s);
    *ref = r;
    return 0;
}

const char *bf_str(const struct bf_shm *s, uint32_t ref, uint32_t *len)
{
    const struct str_entry *e = entry_in(s, ref, published_end(s));
    if (!e) {
        if (len)
            *len = 0;
        return NULL;
    }
    if (len)
        *len = e->len;
    return (const char *)(e + 1);
}

/* ---- registries ---- */

static int reg_lookup(const _Atomic uint32_t *n, const char *names, size_t stride, uint32_t max,
                      const char *name)
{
    uint32_t c = atomic_load_explicit(n, memory_order_acquire); /* pairs with S3 */
    if (c > max)
        c = max;
    for (uint32_t i = 0; i < c; i++)
        if (strcmp(names + i * stride, name) == 0)
            return (int)i;
    return -1;
}

static int reg_intern(struct bf_shm *s, _Atomic uint32_t *n, char *names, size_t stride,
                      uint32_t max, const char *name)
{
    size_t l = strlen(name);
    if (l == 0 || l >= stride)
        return -EINVAL;
    int i = reg_lookup(n, names, stride, max, name);
    if (i >= 0)
        return i;
    if (s->readonly)
        return -EROFS;
    int rc = lock_acquire(s);
    if (rc)
        return rc;
    i = reg_lookup(n, names, stride, max, name);
    if (i < 0) {
        uint32_t c = atomic_load_explicit(n, memory_order_relaxed);
        if (c >= max) {
            i = -ENOSPC;
        } else {
            memcpy(names + c * stride, name, l + 1);
            atomic_store_explicit(n, c + 1, memory_order_release); /* S3 */
            i = (int)c;
        }
    }
    lock_release(s);
    return i;
}

int bf_dim_intern(struct bf_shm *s, const char *name)
{
    return reg_intern(s, &s->inv->n_dims, &s->inv->dim_names[0][0], BF_DIM_NAME_MAX, BF_MAX_DIMS,
                      name);
}

int bf_dim_lookup(const struct bf_shm *s, const char *name)
{
    return reg_lookup(&s->inv->n_dims, &s->inv->dim_names[0][0], BF_DIM_NAME_MAX, BF_MAX_DIMS,
                      name);
}

void bf_shm_dims(const struct bf_shm *s, struct bf_dims *out)
{
    uint32_t c = atomic_load_explicit(&s->inv->n_dims, memory_order_acquire);
    if (c > BF_MAX_DIMS)
        c = BF_MAX_DIMS;
    out->n = c;
    memcpy(out->names, s->inv->dim_names, sizeof out->names[0] * c);
}

int bf_type_intern(struct bf_shm *s, const char *name)
{
    if (!name[0])
        return 0; /* index 0 is reserved for "no instance type" */
    return reg_intern(s, &s->inv->n_types, &s->inv->type_names[0][0], BF_NAME_MAX, BF_MAX_TYPES,
                      name);
}

int bf_zone_intern(struct bf_shm *s, const char *name)
{
    if (!name[0])
        return 0; /* index 0 is reserved for "no zone" */
    return reg_intern(s, &s->inv->n_zones, &s->inv->zone_names[0][0], BF_NAME_MAX, BF_MAX_ZONES,
                      name);
}

const char *bf_type_name(const struct bf_shm *s, uint32_t idx)
{
    if (idx >= atomic_load_explicit(&s->inv->n_types, memory_order_acquire))
        return "";
    return s->inv->type_names[idx];
}

const char *bf_zone_name(const struct bf_shm *s, uint32_t idx)
{
    if (idx >= atomic_load_explicit(&s->inv->n_zones, memory_order_acquire))
        return "";
    return s->inv->zone_names[idx];
}

int bf_str_intern_soft(struct bf_shm *s, const void *bytes, uint32_t len, uint32_t *ref)
{
    if (len == 0) {
        *ref = 0;
        return 0;
    }
    uint32_t h = (uint32_t)XXH3_64bits(bytes, len);
    if (find(s, bytes, len, h, ref, NULL) == 0)
        return 0;
    struct bf_strtab_meta *m = &s->inv->strtab;
    uint64_t used = atomic_load_explicit(&m->arena_used, memory_order_relaxed);
    uint64_t entries = atomic_load_explicit(&m->entries, memory_order_relaxed);
    if (used + len + 16 > s->arena_bytes / 4 * 3 || entries + 1 > (uint64_t)(s->index_mask + 1) / 2)
        return -ENOSPC;
    if (len > STR_MAX_LEN)
        return -E2BIG;
    return intern_missed(s, bytes, len, h, ref); /* the probe above missed */
}

uint64_t bf_str_arena_used(const struct bf_shm *s)
{
    return atomic_load_explicit(&s->inv->strtab.arena_used, memory_order_acquire);
}
