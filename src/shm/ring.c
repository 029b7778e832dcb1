/*
 * ring.c — single-producer/single-consumer rings between the appliance's
 * processes (reference/aesthetics.md §3.2), and eventfd wake-ups.
 *
 * Fixed rings carry fixed-size plain structs; the bytes ring carries
 * variable records (u32 length + u32 marker + payload, padded to 8; a record
 * that does not fit before the end of the area is preceded by a wrap marker).
 *
 * Synchronisation (indices are free-running uint64 counters):
 *   P1 producer: acquire load of cons (the consumer finished reading the slot
 *      we are about to overwrite), write the slot, P2 release store of prod.
 *   C1 consumer: acquire load of prod (pairs with P2), read the slot, C2
 *      release store of cons (pairs with P1: our slot loads happen-before
 *      the producer reuses it).
 * A restarted producer or consumer resumes from the indices in the segment;
 * consumers must tolerate a redelivered entry (crash after reading, before
 * C2).
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "shm_internal.h"

#define WRAP_MARK 0xFFFFFFFFu
#define REC_MARK  0xB1F0C0DEu

static inline uint8_t *ring_data(const struct bf_shm *s, const struct bf_ring_hdr *r)
{
    return (uint8_t *)s->rings_hdr + r->data_off;
}

int bf_ring_push(struct bf_shm *s, int ring, const void *msg)
{
    struct bf_ring_hdr *r = s->ring[ring];
    uint64_t prod = atomic_load_explicit(&r->prod, memory_order_relaxed);
    uint64_t cons = atomic_load_explicit(&r->cons, memory_order_acquire); /* P1 */
    if (prod - cons >= r->capacity) {
        atomic_fetch_add_explicit(&r->drops, 1, memory_order_relaxed);
        return -ENOSPC;
    }
    memcpy(ring_data(s, r) + (prod & (r->capacity - 1)) * r->slot_size, msg, r->slot_size);
    atomic_store_explicit(&r->prod, prod + 1, memory_order_release); /* P2 */
    atomic_fetch_add_explicit(&r->pushes, 1, memory_order_relaxed);
    return 0;
}

int bf_ring_pop(struct bf_shm *s, int ring, void *out)
{
    struct bf_ring_hdr *r = s->ring[ring];
    uint64_t cons = atomic_load_explicit(&r->cons, memory_order_relaxed);
    uint64_t prod = atomic_load_explicit(&r->prod, memory_order_acquire); /* C1 */
    if (cons == prod)
        return -EAGAIN;
    memcpy(out, ring_data(s, r) + (cons & (r->capacity - 1)) * r->slot_size, r->slot_size);
    atomic_store_explicit(&r->cons, cons + 1, memory_order_release); /* C2 */
    return 0;
}

int bf_ring_read_at(struct bf_shm *s, int ring, uint64_t pos, void *out)
{
    struct bf_ring_hdr *r = s->ring[ring];
    uint64_t cons = atomic_load_explicit(&r->cons, memory_order_relaxed);
    uint64_t prod = atomic_load_explicit(&r->prod, memory_order_acquire); /* C1 */
    if (pos < cons)
        return -ERANGE;
    if (pos >= prod)
        return -EAGAIN;
    memcpy(out, ring_data(s, r) + (pos & (r->capacity - 1)) * r->slot_size, r->slot_size);
    return 0;
}

uint64_t bf_ring_cons(const struct bf_shm *s, int ring)
{
    return atomic_load_explicit(&s->ring[ring]->cons, memory_order_acquire);
}

void bf_ring_release(struct bf_shm *s, int ring, uint64_t new_cons)
{
    struct bf_ring_hdr *r = s->ring[ring];
    uint64_t prod = atomic_load_explicit(&r->prod, memory_order_acquire);
    if (new_cons > prod)
        new_cons = prod;
    if (new_cons > atomic_load_explicit(&r->cons, memory_order_relaxed))
        atomic_store_explicit(&r->cons, new_cons, memory_order_release); /* C2 */
}

struct rec_hdr {
    uint32_t len;
    uint32_t mark;
};

/* The largest record: its padded size (header included) is at most half
 * the ring, so it fits once the ring has drained wherever prod stands (it
 * fits before the end, or the end is more than half the ring away and the
 * wrap leaves it room from 0). */
static inline uint64_t max_record(uint64_t cap)
{
    return cap / 2 - sizeof(struct rec_hdr);
}

int bf_ring_push_bytes(struct bf_shm *s, int ring, const void *a, size_t alen, const void *b,
                       size_t blen)
{
    struct bf_ring_hdr *r = s->ring[ring];
    uint64_t cap = r->capacity;
    size_t len = alen + blen;
    if (len > max_record(cap) || len > UINT32_MAX - 16)
        return -E2BIG;
    uint64_t need = (sizeof(struct rec_hdr) + len + 7) & ~7ull;
    uint64_t prod = atomic_load_explicit(&r->prod, memory_order_relaxed);
    uint64_t cons = atomic_load_explicit(&r->cons, memory_order_acquire); /* P1 */
    uint64_t off = prod & (cap - 1);
    uint64_t pad = (off + need > cap) ? cap - off : 0;
    if (prod - cons + pad + need > cap) {
        atomic_fetch_add_explicit(&r->drops, 1, memory_order_relaxed);
        return -ENOSPC;
    }
    uint8_t *d = ring_data(s, r);
    if (pad) {
        struct rec_hdr w = {WRAP_MARK, REC_MARK};
        memcpy(d + off, &w, sizeof w); /* pad >= 8: records are 8-aligned */
        prod += pad;
        off = 0;
    }
    struct rec_hdr h = {(uint32_t)len, REC_MARK};
    memcpy(d + off, &h, sizeof h);
    if (alen)
        memcpy(d + off + sizeof h, a, alen);
    if (blen)
        memcpy(d + off + sizeof h + alen, b, blen);
    atomic_store_explicit(&r->prod, prod + need, memory_order_release); /* P2 */
    atomic_fetch_add_explicit(&r->pushes, 1, memory_order_relaxed);
    return 0;
}

int bf_ring_pop_bytes(struct bf_shm *s, int ring, void *buf, size_t bufcap, size_t *len)
{
    struct bf_ring_hdr *r = s->ring[ring];
    uint64_t cap = r->capacity;
    uint64_t cons = atomic_load_explicit(&r->cons, memory_order_relaxed);
    uint64_t prod = atomic_load_explicit(&r->prod, memory_order_acquire); /* C1 */
    uint8_t *d = ring_data(s, r);
    for (;;) {
        if (cons == prod)
            return -EAGAIN;
        uint64_t off = cons & (cap - 1);
        struct rec_hdr h;
        if ((off & 7) || prod - cons < sizeof h || prod - cons > cap) {
            atomic_store_explicit(&r->cons, prod, memory_order_release); /* corrupt: drop all */
            return -EAGAIN;
        }
        memcpy(&h, d + off, sizeof h);
        if (h.len == WRAP_MARK) {
            cons += cap - off;
            atomic_store_explicit(&r->cons, cons, memory_order_release);
            continue;
        }
        /* a record lies inside the ring's data (it never wraps) and inside
         * what the producer published */
        if (h.mark != REC_MARK || h.len > max_record(cap) || off + sizeof h + h.len > cap ||
            sizeof h + h.len > prod - cons) {
            /* corrupt ring (cannot happen with a well-behaved producer): drop all */
            atomic_store_explicit(&r->cons, prod, memory_order_release);
            return -EAGAIN;
        }
        *len = h.len;
        if (h.len > bufcap)
            return -EMSGSIZE;
        memcpy(buf, d + off + sizeof h, h.len);
        uint64_t need = (sizeof h + h.len + 7) & ~7ull;
        atomic_store_explicit(&r->cons, cons + need, memory_order_release); /* C2 */
        return 0;
    }
}

uint64_t bf_ring_depth(const struct bf_shm *s, int ring)
{
    const struct bf_ring_hdr *r = s->ring[ring];
    uint64_t prod = atomic_load_explicit(&r->prod, memory_order_acquire);
    uint64_t cons = atomic_load_explicit(&r->cons, memory_order_acquire);
    return prod - cons;
}

void bf_wake(const struct bf_shm *s, int role)
{
    if (role < 0 || role >= BF_ROLE_COUNT)
        return;
    uint32_t fd = atomic_load_explicit(&s->st->proc[role].wake_fd, memory_order_relaxed);
    if (fd == 0)
        return;
    uint64_t one = 1;
    ssize_t w = write((int)fd, &one, sizeof one);
    (void)w;
}

void bf_wake_clear(const struct bf_shm *s, int role)
{
    if (role < 0 || role >= BF_ROLE_COUNT)
        return;
    uint32_t fd = atomic_load_explicit(&s->st->proc[role].wake_fd, memory_order_relaxed);
    if (fd == 0)
        return;
    uint64_t v;
    ssize_t r = read((int)fd, &v, sizeof v);
    (void)r;
}
