/*
 * scan.c — a full rescan's reads of the inventory through pread(2) into
 * buffers the handle reuses, instead of first touches of the mapping
 * (contract: bigfleet/shm.h "Bulk reads for a full rescan").
 *
 * Why: a restarted cycle process reads all ~500K records (32 MiB) and most
 * of the string arena once. Through its own mapping of the segment every
 * 4 KiB page is touched for the first time by this process; on this
 * project's hypervisor that costs ~8 us a page even with the page table
 * already filled (MADV_POPULATE_READ/WRITE and MAP_POPULATE measured: no
 * gain), ~65-100 ms for the records alone. The kernel's copy reads the same
 * page-cache pages through its own mapping, touched long ago: the three
 * copies below cost ~20 ms, and the buffers stay in the cache.
 *
 * Records. Chunk k of BF_INV_SCAN_RECS records is copied three times:
 * Z into a[] (only its seqs are kept, seq0[]), P into a[] again (the
 * payloads), C into c[] (seqs after), with a sequentially consistent fence
 * between the copies (each copy's loads all happen after the previous
 * copy's: separate system calls, ordered by the fence). A record whose seq
 * is the same even value S in Z and C: the write that ended at S had made
 * its payload stores visible before its even store (W3), so before Z's
 * load of seq, so before every load of P; the next write stores its odd seq
 * (before its payload stores, W1) after C's load of seq, so after every
 * load of P. P holds exactly the state at S. Anything else (odd, moved, a
 * short copy) is read live under the seqlock (bf_inv_read_seq).
 *
 * Strings. Entries in [0, published end) never change (strtab.c), so a
 * copy of published bytes stays true. The window holds arena bytes
 * [win_off, win_off + win_len), loaded at the asked entry when the entry
 * is not wholly inside; a restarted process reads ids in slot order, which
 * is mostly the order they were interned in. When the window mostly misses
 * (ids out of order after much churn: fewer than WIN_MIN_HITS hits a load
 * after WIN_PROBE loads) every later string is read live.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shm_internal.h"

#define REC_BYTES    sizeof(struct bf_shm_machine)
#define WIN_PROBE    64u
#define WIN_MIN_HITS 8u

struct bf_inv_scan {
    const struct bf_shm *s;
    int fd;            /* the inventory segment's, or -1: every read live */
    uint64_t rec_off;  /* the records' offset in the segment */
    uint32_t first, n; /* records [first, first + n) are in a[]/seq0[]/c[] */
    bool recs_live;    /* a copy failed: records live from here on */
    bool strs_live;    /* no window (copy failed, or it mostly missed) */
    uint64_t win_off;  /* arena offset of win[0] */
    uint64_t win_len;  /* bytes in win[] */
    struct bf_inv_scan_stats st;
    uint32_t seq0[BF_INV_SCAN_RECS];
    unsigned char a[BF_INV_SCAN_RECS * REC_BYTES];
    unsigned char c[BF_INV_SCAN_RECS * REC_BYTES];
    char win[BF_INV_SCAN_WINDOW];
};

int bf_inv_scan_begin(const struct bf_shm *s, struct bf_inv_scan **out)
{
    struct bf_inv_scan *sc = malloc(sizeof *sc);
    if (!sc)
        return -ENOMEM;
    memset(sc, 0, offsetof(struct bf_inv_scan, seq0));
    sc->s = s;
    sc->fd = s->inv_fd > 0 ? s->inv_fd : -1;
    sc->rec_off = (uint64_t)((const char *)s->records - (const char *)s->base[BF_SEG_INVENTORY]);
    sc->recs_live = sc->strs_live = sc->fd < 0;
    *out = sc;
    return 0;
}

void bf_inv_scan_end(struct bf_inv_scan *sc, struct bf_inv_scan_stats *st)
{
    if (st)
        *st = sc ? sc->st : (struct bf_inv_scan_stats){0};
    free(sc);
}

/* All len bytes at off, or false. */
static bool copy_at(int fd, void *buf, size_t len, uint64_t off)
{
    size_t got = 0;
    while (got < len) {
        ssize_t k = pread(fd, (char *)buf + got, len - got, (off_t)(off + got));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return false;
        got += (size_t)k;
    }
    return true;
}

static uint32_t seq_of(const unsigned char *rec)
{
    uint32_t v;
    memcpy(&v, rec + offsetof(struct bf_shm_machine, seq), sizeof v);
    return v;
}

/* Copies the chunk holding slot (three times, above). */
static bool load_chunk(struct bf_inv_scan *sc, uint32_t slot)
{
    uint32_t first = slot - slot % BF_INV_SCAN_RECS;
    uint32_t n = sc->s->max_machines - first;
    if (n > BF_INV_SCAN_RECS)
        n = BF_INV_SCAN_RECS;
    size_t len = (size_t)n * REC_BYTES;
    uint64_t off = sc->rec_off + (uint64_t)first * REC_BYTES;
    sc->n = 0;
    if (!copy_at(sc->fd, sc->a, len, off)) /* Z */
        return false;
    for (uint32_t i = 0; i < n; i++)
        sc->seq0[i] = seq_of(sc->a + (size_t)i * REC_BYTES);
    atomic_thread_fence(memory_order_seq_cst); /* Z's loads before P's */
    if (!copy_at(sc->fd, sc->a, len, off))     /* P */
        return false;
    atomic_thread_fence(memory_order_seq_cst); /* P's loads before C's */
    if (!copy_at(sc->fd, sc->c, len, off))     /* C */
        return false;
    sc->first = first;
    sc->n = n;
    sc->st.chunks++;
    return true;
}

int bf_inv_scan_read(struct bf_inv_scan *sc, uint32_t slot, struct bf_machine_rec *out)
{
    const struct bf_shm *s = sc->s;
    if (slot >= s->max_machines)
        return -ERANGE;
    if (!sc->recs_live && (slot < sc->first || slot - sc->first >= sc->n) && !load_chunk(sc, slot))
        sc->recs_live = true;
    if (!sc->recs_live) {
        uint32_t i = slot - sc->first;
        const unsigned char *p = sc->a + (size_t)i * REC_BYTES;
        uint32_t s0 = sc->seq0[i];
        if ((s0 & 1u) == 0 && seq_of(p) == s0 && seq_of(sc->c + (size_t)i * REC_BYTES) == s0) {
            memcpy(out, p + offsetof(struct bf_shm_machine, w), sizeof *out);
            sc->st.copied++;
            return 0;
        }
    }
    sc->st.live++;
    return bf_inv_read_seq(s, slot, out, NULL);
}

/* Loads the window at arena offset off (up to the published end). */
static bool load_window(struct bf_inv_scan *sc, uint64_t off, uint64_t used)
{
    uint64_t len = used - off;
    if (len > BF_INV_SCAN_WINDOW)
        len = BF_INV_SCAN_WINDOW;
    sc->win_len = 0;
    if (!copy_at(sc->fd, sc->win, (size_t)len, sc->s->arena_off + off))
        return false;
    sc->win_off = off;
    sc->win_len = len;
    sc->st.win_loads++;
    return true;
}

/* The entry at arena offset off if it and its bytes lie inside the window. */
static const char *in_window(const struct bf_inv_scan *sc, uint64_t off, uint32_t *len)
{
    uint32_t hdr[2]; /* strtab.c's entry: len, hash */
    if (off < sc->win_off || off - sc->win_off + sizeof hdr > sc->win_len)
        return NULL;
    const char *e = sc->win + (off - sc->win_off);
    memcpy(hdr, e, sizeof hdr);
    if (off - sc->win_off + sizeof hdr + (uint64_t)hdr[0] + 1 > sc->win_len)
        return NULL;
    if (len)
        *len = hdr[0];
    return e + sizeof hdr;
}

const char *bf_inv_scan_str(struct bf_inv_scan *sc, uint32_t ref, uint32_t *len)
{
    const struct bf_shm *s = sc->s;
    if (!sc->strs_live && ref) {
        uint64_t off = (uint64_t)ref * 8, used = bf_arena_published_end(s);
        const char *p = in_window(sc, off, len);
        if (!p && off < used) {
            if (sc->st.win_loads >= WIN_PROBE &&
                sc->st.str_window < sc->st.win_loads * WIN_MIN_HITS) {
                sc->strs_live = true; /* out of order: the window does not pay */
            } else if (!load_window(sc, off, used)) {
                sc->strs_live = true;
            } else {
                p = in_window(sc, off, len); /* NULL: longer than the window */
            }
        }
        if (p) {
            sc->st.str_window++;
            return p;
        }
    }
    sc->st.str_live++;
    return bf_str(s, ref, len);
}
