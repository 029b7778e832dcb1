/*
 * segment.c — create, attach, validate and unlink the four shared segments.
 *
 * Initialisation: the supervisor computes every table's size with
 * overflow-checked arithmetic (bf_layout_compute), creates each segment with
 * shm_open(O_EXCL) + ftruncate (zero-filled by tmpfs), maps it, fills the
 * header and the few non-zero initial values, and finally stores ready = 1
 * with release. Attachers validate the header before touching anything else:
 * magic, kind, version, the file's size, then (check_layout) every
 * capacity, table offset and length and every offset stored inside a table
 * against the layout recomputed from the header's capacities, so a
 * corrupted or truncated file is refused with the field named instead of
 * being read out of bounds; the views are bound from the computed layout.
 *
 * Permissions: created 0600 (the demand, inventory and operators' bootstrap
 * blobs are private); the supervisor then hands them to the children's
 * account and, with an inspect group, makes them 0640 (bf_shm_set_owner).
 * An attacher checks ownership before it trusts a segment: a read-write
 * attach needs a segment owned by its own effective uid (or runs as root),
 * a read-only attach a segment nobody but its owner can write, and all four
 * segments must have one owner.
 *
 * Error reporting: negative errno plus a message naming the segment and, for
 * a layout mismatch, both versions.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bigfleet/util.h"
#include "shm_internal.h"

static const char *const kind_names[BF_SEG_KIND_COUNT] = {"", "inventory", "needs", "rings",
                                                          "state"};

const uint8_t bf_ring_kind[BF_RING_COUNT] = {
    [BF_RING_ACTIONS] = BF_RING_FIXED,    [BF_RING_BOOT_REQ] = BF_RING_FIXED,
    [BF_RING_BOOT_RESP] = BF_RING_BYTES,  [BF_RING_NODE_EXEC] = BF_RING_FIXED,
    [BF_RING_NODE_RECON] = BF_RING_FIXED, [BF_RING_RECLAIM] = BF_RING_FIXED,
    [BF_RING_AC_HINTS] = BF_RING_FIXED,   [BF_RING_COORD_IN] = BF_RING_BYTES,
    [BF_RING_COORD_OUT] = BF_RING_BYTES,  [BF_RING_OWN_AUDIT] = BF_RING_BYTES};
const uint8_t bf_ring_producer[BF_RING_COUNT] = {
    [BF_RING_ACTIONS] = BF_ROLE_CYCLE,         [BF_RING_BOOT_REQ] = BF_ROLE_EXECUTOR,
    [BF_RING_BOOT_RESP] = BF_ROLE_SESSION,     [BF_RING_NODE_EXEC] = BF_ROLE_EXECUTOR,
    [BF_RING_NODE_RECON] = BF_ROLE_RECONCILER, [BF_RING_RECLAIM] = BF_ROLE_EXECUTOR,
    [BF_RING_AC_HINTS] = BF_ROLE_CYCLE,        [BF_RING_COORD_IN] = BF_ROLE_SESSION,
    [BF_RING_COORD_OUT] = BF_ROLE_CYCLE,       [BF_RING_OWN_AUDIT] = BF_ROLE_CYCLE};
const uint8_t bf_ring_consumer[BF_RING_COUNT] = {
    [BF_RING_ACTIONS] = BF_ROLE_EXECUTOR,   [BF_RING_BOOT_REQ] = BF_ROLE_SESSION,
    [BF_RING_BOOT_RESP] = BF_ROLE_EXECUTOR, [BF_RING_NODE_EXEC] = BF_ROLE_SESSION,
    [BF_RING_NODE_RECON] = BF_ROLE_SESSION, [BF_RING_RECLAIM] = BF_ROLE_SESSION,
    [BF_RING_AC_HINTS] = BF_ROLE_SESSION,   [BF_RING_COORD_IN] = BF_ROLE_CYCLE,
    [BF_RING_COORD_OUT] = BF_ROLE_SESSION,  [BF_RING_OWN_AUDIT] = BF_ROLE_EXECUTOR};
static const uint32_t ring_slot_size[BF_RING_COUNT] = {
    [BF_RING_ACTIONS] = sizeof(struct bf_action_msg),
    [BF_RING_BOOT_REQ] = sizeof(struct bf_boot_req_msg),
    [BF_RING_BOOT_RESP] = 1,
    [BF_RING_NODE_EXEC] = sizeof(struct bf_node_event_msg),
    [BF_RING_NODE_RECON] = sizeof(struct bf_node_event_msg),
    [BF_RING_RECLAIM] = sizeof(struct bf_reclaim_msg),
    [BF_RING_AC_HINTS] = sizeof(struct bf_ac_hint_msg),
    [BF_RING_COORD_IN] = 1,
    [BF_RING_COORD_OUT] = 1,
    [BF_RING_OWN_AUDIT] = 1};

static uint64_t pow2_at_least(uint64_t v)
{
    uint64_t p = 1;
    while (p < v)
        p <<= 1;
    return p;
}

struct acc {
    uint64_t at;
    bool overflow;
};

static uint64_t take(struct acc *a, uint64_t len, uint64_t align)
{
    size_t at;
    if (!bf_add_size(a->at, align - 1, &at)) {
        a->overflow = true;
        return 0;
    }
    at &= ~(align - 1);
    size_t end;
    if (!bf_add_size(at, len, &end))
        a->overflow = true;
    a->at = end;
    return at;
}

static uint64_t mul(struct acc *a, uint64_t x, uint64_t y)
{
    size_t r;
    if (!bf_mul_size(x, y, &r)) {
        a->overflow = true;
        return 0;
    }
    return r;
}

/*
 * Places table t, `len` bytes of reserve, last in the segment and
 * page-aligned, growing with use (bf_shm_grow): the file at creation holds
 * every earlier table and the first `first` bytes of t (a page multiple, at
 * most the reserve); every process maps t's whole reserve.
 */
static void grow_last(struct bf_layout *L, struct acc *a, int t, uint64_t len, uint64_t first)
{
    L->grow_table = t;
    L->len[t] = bf_align_up(len, 4096);
    L->off[t] = take(a, L->len[t], 4096);
    first = bf_align_up(first, 4096);
    L->grow_commit = first < L->len[t] ? first : L->len[t];
    L->total = L->off[t] + L->grow_commit;
    L->map = L->off[t] + L->len[t];
}

int bf_layout_compute(int kind, const struct bf_shm_caps *caps, struct bf_layout *L)
{
    memset(L, 0, sizeof *L);
    L->grow_table = -1;
    if (caps->max_machines == 0 || caps->max_needs == 0 || caps->max_clusters == 0 ||
        caps->max_machines > (1u << 28) || caps->max_needs > (1u << 26) ||
        caps->max_clusters > (1u << 20))
        return -EINVAL;
    uint64_t m = caps->max_machines;
    L->index_capacity = (uint32_t)pow2_at_least(m + m / 2 > 65536 ? m + m / 2 : 65536);
    L->changelog_capacity = (uint32_t)pow2_at_least(m / 8 > 65536 ? m / 8 : 65536);
    L->stamp_capacity =
        (uint32_t)pow2_at_least(2ull * caps->max_needs > 1024 ? 2ull * caps->max_needs : 1024);
    /* The string arena grows with use (strtab.c): its file backing is what
     * the strings take (measured: 24-28 B per machine with 12-character ids,
     * ~46 B with the openb simulator's 25-character ids, + ~32 B per
     * distinct host ref), and this is only its reserve, address space that
     * costs nothing until written: room for 200-byte ids plus host refs. */
    L->arena_bytes = bf_align_up((size_t)(m * 512 + (64u << 20)), 4096);
    L->arena_commit = BF_ARENA_STEP;
    struct acc a = {sizeof(struct bf_seg_header), false};
    switch (kind) {
    case BF_SEG_INVENTORY:
        L->len[BF_INV_T_META] = sizeof(struct bf_inv_meta);
        L->len[BF_INV_T_STRHASH] = mul(&a, L->index_capacity, 4);
        L->len[BF_INV_T_ARENA] = L->arena_bytes;
        L->len[BF_INV_T_RECORDS] = mul(&a, m, sizeof(struct bf_shm_machine));
        L->len[BF_INV_T_IDINDEX] = mul(&a, L->index_capacity, 4);
        L->len[BF_INV_T_CHANGELOG] =
            BF_CHANGELOG_WRITERS * sizeof(struct bf_changelog) +
            mul(&a, BF_CHANGELOG_WRITERS, mul(&a, L->changelog_capacity, 4));
        L->len[BF_INV_T_PENDING] = sizeof(struct bf_pending_hdr) + 2 * m;
        for (int t = 0; t <= BF_INV_T_PENDING; t++)
            if (t != BF_INV_T_ARENA)
                L->off[t] = take(&a, L->len[t], t == BF_INV_T_RECORDS ? 4096 : 64);
        /* the arena last, page-aligned: the file ends inside it and grows */
        L->off[BF_INV_T_ARENA] = take(&a, 0, 4096);
        L->total = L->off[BF_INV_T_ARENA] + L->arena_commit;
        L->map = L->off[BF_INV_T_ARENA] + L->arena_bytes;
        return a.overflow ? -EOVERFLOW : 0;
    case BF_SEG_NEEDS:
        L->len[BF_NEEDS_T_META] = sizeof(struct bf_needs_meta);
        L->len[BF_NEEDS_T_CLUSTERS] = mul(&a, caps->max_clusters, sizeof(struct bf_shm_cluster));
        L->len[BF_NEEDS_T_STAMPS] = mul(&a, L->stamp_capacity, sizeof(struct bf_stamp));
        L->len[BF_NEEDS_T_OBSERVED] = mul(&a, L->stamp_capacity, 4);
        for (int t = 0; t <= BF_NEEDS_T_OBSERVED; t++)
            if (t != BF_NEEDS_T_ROWS)
                L->off[t] = take(&a, L->len[t], 64);
        /* the need-row arena last: the file follows the highest extent the
         * session allocated (lowest-first), not 2 x max_needs rows
         * (i18-needseg, stop 33; bf_needs_rows_reserve) */
        grow_last(
            L, &a, BF_NEEDS_T_ROWS,
            mul(&a, (uint64_t)BF_NEED_ROWS_PER_NEED * caps->max_needs, sizeof(struct bf_need_row)),
            BF_ARENA_STEP);
        break;
    case BF_SEG_RINGS:
        L->ring_cap[BF_RING_ACTIONS] = 65536;
        L->ring_cap[BF_RING_BOOT_REQ] = 8192;
        /* Bytes rings: a record may take half the ring (ring.c: a record
         * of at most half always fits once the ring has drained, wherever
         * its producer index stands). Each is sized by its largest record,
         * a documented contract, x 2 (i18-needseg, stop 33; docs/cycle.md
         * §4): BOOT_RESP bootstrap blobs up to 4 MiB (cloud user data is
         * capped at 16-256 KiB; the provider conformance suite sends 3 MiB)
         * -- a full ring is answered by the executor's timeout, counted in
         * boot_resp_ring_full; COORD_IN / COORD_OUT an instruction or its
         * ack, at most 1,024 machine ids of 1,024 bytes (~1 MiB) -- full:
         * refused and redelivered by the coordinator, counted. */
        L->ring_cap[BF_RING_BOOT_RESP] = 8u << 20;
        L->ring_cap[BF_RING_NODE_EXEC] = 65536;
        L->ring_cap[BF_RING_NODE_RECON] = pow2_at_least(m / 2 > 65536 ? m / 2 : 65536);
        L->ring_cap[BF_RING_RECLAIM] = 8192;
        L->ring_cap[BF_RING_AC_HINTS] = 16384;
        /* bytes: a record may take half, and the largest instruction or
         * ack (1,024 ids of 1,024 bytes, ADR-0055 §7) is ~1.05 MB: the next
         * power of two that holds it */
        L->ring_cap[BF_RING_COORD_IN] = 4u << 20;
        L->ring_cap[BF_RING_COORD_OUT] = 4u << 20;
        L->ring_cap[BF_RING_OWN_AUDIT] = 1u << 20; /* bytes */
        for (int r = 0; r < BF_RING_COUNT; r++) {
            L->ring_slot[r] = ring_slot_size[r];
            L->len[r] = sizeof(struct bf_ring_hdr) + mul(&a, L->ring_cap[r], ring_slot_size[r]);
            L->off[r] = take(&a, L->len[r], 128);
        }
        break;
    case BF_SEG_STATE:
        L->len[BF_STATE_T_MAIN] = sizeof(struct bf_state_main);
        L->off[BF_STATE_T_MAIN] = take(&a, L->len[BF_STATE_T_MAIN], 64);
        /* the verdict ledger grows with the cells the cycle publishes: its
         * two buffers interleave (bf_verdict_index), so the file backs
         * about 2 x the cells of the larger buffer; each buffer's reserve
         * is a row and an extra cell per Need */
        grow_last(L, &a, BF_STATE_T_VERDICTS,
                  mul(&a, 2 * BF_VERDICT_CELLS_PER_BUFFER(caps->max_needs),
                      sizeof(union bf_verdict_cell)),
                  64u << 10);
        break;
    default:
        return -EINVAL;
    }
    if (L->grow_table < 0)
        L->total = L->map = bf_align_up(a.at, 4096);
    return a.overflow ? -EOVERFLOW : 0;
}

void bf_shm_name(const char *shard_id, int kind, char *buf, size_t n)
{
    snprintf(buf, n, "/bigfleet.%s.%s", shard_id,
             (kind > 0 && kind < BF_SEG_KIND_COUNT) ? kind_names[kind] : "unknown");
}

size_t bf_shm_segment_size(int kind, const struct bf_shm_caps *caps)
{
    struct bf_layout L;
    if (bf_layout_compute(kind, caps, &L) != 0)
        return 0;
    return L.total; /* the inventory: with its arena's first step */
}

static bool valid_id(const char *id)
{
    size_t l = strlen(id);
    if (l == 0 || l >= BF_SHARD_ID_MAX)
        return false;
    for (size_t i = 0; i < l; i++) {
        char c = id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.'))
            return false;
    }
    return true;
}

static void set_err(char *err, size_t n, const char *fmt, const char *a, const char *b)
{
    if (err && n)
        snprintf(err, n, fmt, a, b);
}

int bf_pid_alive(uint32_t pid)
{
    if (pid == 0)
        return 0;
    if (kill((pid_t)pid, 0) == 0)
        return 1;
    return errno != ESRCH;
}

/*
 * Typed views from the layouts the capacities give (L[kind]); bf_shm_attach
 * binds only after check_layout() found every header field equal to them,
 * so nothing here is read from a header or an inner offset of the file.
 */
static void bind_views(struct bf_shm *s, const struct bf_layout L[BF_SEG_KIND_COUNT],
                       const struct bf_shm_caps *caps)
{
    const struct bf_layout *l = &L[BF_SEG_INVENTORY];
    s->inv_hdr = s->base[BF_SEG_INVENTORY];
    uint8_t *b = (uint8_t *)s->inv_hdr;
    s->inv = (struct bf_inv_meta *)(b + l->off[BF_INV_T_META]);
    s->strhash = (_Atomic uint32_t *)(b + l->off[BF_INV_T_STRHASH]);
    s->arena = b + l->off[BF_INV_T_ARENA];
    s->records = (struct bf_shm_machine *)(b + l->off[BF_INV_T_RECORDS]);
    s->idindex = (_Atomic uint32_t *)(b + l->off[BF_INV_T_IDINDEX]);
    s->changelog = (struct bf_changelog *)(b + l->off[BF_INV_T_CHANGELOG]);
    uint64_t enq = l->off[BF_INV_T_PENDING] + sizeof(struct bf_pending_hdr);
    s->pending_enq = (_Atomic uint8_t *)(b + enq);
    s->pending_done = (_Atomic uint8_t *)(b + enq + caps->max_machines);
    s->max_machines = caps->max_machines;
    s->max_needs = caps->max_needs;
    s->max_clusters = caps->max_clusters;
    s->index_mask = l->index_capacity - 1;
    s->changelog_mask = l->changelog_capacity - 1;
    s->stamp_mask = l->stamp_capacity - 1;
    s->arena_bytes = l->arena_bytes;
    s->arena_off = l->off[BF_INV_T_ARENA];

    l = &L[BF_SEG_NEEDS];
    s->needs_hdr = s->base[BF_SEG_NEEDS];
    b = (uint8_t *)s->needs_hdr;
    s->needs = (struct bf_needs_meta *)(b + l->off[BF_NEEDS_T_META]);
    s->clusters = (struct bf_shm_cluster *)(b + l->off[BF_NEEDS_T_CLUSTERS]);
    s->rows = (struct bf_need_row *)(b + l->off[BF_NEEDS_T_ROWS]);
    s->stamps = (struct bf_stamp *)(b + l->off[BF_NEEDS_T_STAMPS]);
    s->stamp_observed = (_Atomic uint32_t *)(b + l->off[BF_NEEDS_T_OBSERVED]);

    l = &L[BF_SEG_RINGS];
    s->rings_hdr = s->base[BF_SEG_RINGS];
    b = (uint8_t *)s->rings_hdr;
    for (int r = 0; r < BF_RING_COUNT; r++)
        s->ring[r] = (struct bf_ring_hdr *)(b + l->off[r]);

    l = &L[BF_SEG_STATE];
    s->state_hdr = s->base[BF_SEG_STATE];
    b = (uint8_t *)s->state_hdr;
    s->st = (struct bf_state_main *)(b + l->off[BF_STATE_T_MAIN]);
    s->verdicts = (union bf_verdict_cell *)(b + l->off[BF_STATE_T_VERDICTS]);

    for (int k = 1; k < BF_SEG_KIND_COUNT; k++) {
        int t = L[k].grow_table;
        s->grow_off[k] = t >= 0 ? L[k].off[t] : 0;
        s->grow_reserve[k] = t >= 0 ? L[k].len[t] : 0;
    }
}

static void init_segment(struct bf_shm *s, int kind, const struct bf_layout *L)
{
    uint8_t *b = s->base[kind];
    if (kind == BF_SEG_INVENTORY) {
        /* ref 0: the empty string entry (len 0, NUL) */
        struct bf_inv_meta *meta = (struct bf_inv_meta *)(b + L->off[BF_INV_T_META]);
        atomic_store_explicit(&meta->strtab.arena_used, 16, memory_order_relaxed);
        /* index 0 of the type and zone registries is "" (unset) */
        atomic_store_explicit(&meta->n_types, 1, memory_order_relaxed);
        atomic_store_explicit(&meta->n_zones, 1, memory_order_relaxed);
        atomic_store_explicit(&meta->strtab.arena_committed, L->arena_commit, memory_order_relaxed);
        uint8_t *cl = b + L->off[BF_INV_T_CHANGELOG];
        uint64_t entries =
            L->off[BF_INV_T_CHANGELOG] + BF_CHANGELOG_WRITERS * sizeof(struct bf_changelog);
        for (int w = 0; w < BF_CHANGELOG_WRITERS; w++) {
            struct bf_changelog *c = (struct bf_changelog *)(cl + w * sizeof(struct bf_changelog));
            c->entries_off = entries + (uint64_t)w * L->changelog_capacity * 4;
        }
        struct bf_pending_hdr *ph = (struct bf_pending_hdr *)(b + L->off[BF_INV_T_PENDING]);
        ph->enq_off = L->off[BF_INV_T_PENDING] + sizeof(struct bf_pending_hdr);
        ph->done_off = ph->enq_off + s->max_machines;
    }
    if (L->grow_table >= 0)
        atomic_store_explicit(&((struct bf_seg_header *)b)->grown, L->grow_commit,
                              memory_order_relaxed);
    if (kind == BF_SEG_RINGS) {
        for (int r = 0; r < BF_RING_COUNT; r++) {
            struct bf_ring_hdr *h = (struct bf_ring_hdr *)(b + L->off[r]);
            h->kind = bf_ring_kind[r];
            h->slot_size = L->ring_slot[r];
            h->capacity = L->ring_cap[r];
            h->producer = bf_ring_producer[r];
            h->consumer = bf_ring_consumer[r];
            h->data_off = L->off[r] + sizeof(struct bf_ring_hdr);
        }
    }
}

int bf_shm_create(struct bf_shm *s, const char *shard_id, const struct bf_shm_caps *caps,
                  int64_t epoch, uint32_t generation, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->inv_fd = -1;
    for (int k = 0; k < BF_SEG_KIND_COUNT; k++)
        s->grow_fd[k] = -1;
    if (!valid_id(shard_id)) {
        set_err(err, errlen, "invalid shard id %s%s (use [A-Za-z0-9._-], < 64 bytes)", shard_id,
                "");
        return -EINVAL;
    }
    snprintf(s->shard_id, sizeof s->shard_id, "%s", shard_id);
    s->pid = (uint32_t)getpid();
    s->max_machines = caps->max_machines;
    int64_t now = bf_now_ns();
    struct bf_layout layouts[BF_SEG_KIND_COUNT];
    for (int k = 1; k < BF_SEG_KIND_COUNT; k++) {
        struct bf_layout L;
        int rc = bf_layout_compute(k, caps, &L);
        layouts[k] = L;
        if (rc) {
            set_err(err, errlen, "invalid capacities for segment %s%s", kind_names[k], "");
            bf_shm_detach(s);
            return rc;
        }
        char name[128];
        bf_shm_name(shard_id, k, name, sizeof name);
        int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
        if (fd < 0) {
            rc = -errno;
            set_err(err, errlen, "shm_open %s: %s", name, strerror(-rc));
            bf_shm_detach(s);
            return rc;
        }
        if (ftruncate(fd, (off_t)L.total) != 0) {
            rc = -errno;
            close(fd);
            shm_unlink(name);
            set_err(err, errlen, "ftruncate %s: %s", name, strerror(-rc));
            bf_shm_detach(s);
            return rc;
        }
        void *p = mmap(NULL, L.map, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            rc = -errno;
            close(fd);
            shm_unlink(name);
            set_err(err, errlen, "mmap %s: %s", name, strerror(-rc));
            bf_shm_detach(s);
            return rc;
        }
        if (k == BF_SEG_INVENTORY)
            s->inv_fd = fd; /* kept: the arena grows the file */
        else if (L.grow_table >= 0)
            s->grow_fd[k] = fd; /* kept: its last table grows the file */
        else
            close(fd);
        s->base[k] = p;
        s->len[k] = L.map;
        struct bf_seg_header *h = p;
        h->magic = BF_SHM_MAGIC;
        h->layout_version = BF_SHM_LAYOUT_VERSION;
        h->kind = (uint32_t)k;
        h->size = L.map;
        h->created_unix_ns = now;
        h->epoch = epoch;
        h->supervisor_pid = s->pid;
        h->generation = generation;
        snprintf(h->shard_id, sizeof h->shard_id, "%s", shard_id);
        h->max_machines = caps->max_machines;
        h->max_needs = caps->max_needs;
        h->max_clusters = caps->max_clusters;
        h->index_capacity = L.index_capacity;
        h->strings_arena_bytes = L.arena_bytes;
        h->changelog_capacity = L.changelog_capacity;
        h->stamp_capacity = L.stamp_capacity;
        for (int t = 0; t < BF_SEG_MAX_TABLES; t++) {
            h->table_off[t] = L.off[t];
            h->table_len[t] = L.len[t];
        }
        init_segment(s, k, &L);
    }
    bind_views(s, layouts, caps);
    for (int k = 1; k < BF_SEG_KIND_COUNT; k++)
        atomic_store_explicit(&((struct bf_seg_header *)s->base[k])->ready, 1,
                              memory_order_release);
    return 0;
}

int bf_shm_set_owner(struct bf_shm *s, const struct bf_shm_owner *o, char *err, size_t errlen)
{
    for (int k = 1; k < BF_SEG_KIND_COUNT; k++) {
        char name[128];
        bf_shm_name(s->shard_id, k, name, sizeof name);
        int fd = shm_open(name, O_RDWR | O_NOFOLLOW, 0);
        if (fd < 0) {
            int rc = -errno;
            set_err(err, errlen, "shm_open %s: %s", name, strerror(-rc));
            return rc;
        }
        int rc = 0;
        bool chown_needed = o->uid != (uint32_t)-1 || o->gid != (uint32_t)-1;
        if (chown_needed && fchown(fd, (uid_t)o->uid, (gid_t)o->gid) != 0) {
            rc = -errno;
            set_err(err, errlen, "fchown %s: %s", name, strerror(-rc));
        } else if (fchmod(fd, (mode_t)o->mode) != 0) {
            rc = -errno;
            set_err(err, errlen, "fchmod %s: %s", name, strerror(-rc));
        }
        close(fd);
        if (rc)
            return rc;
    }
    return 0;
}

/* The ownership rules of the header comment; 0 or -EPERM with err set. */
static int check_owner(const struct stat *st, bool readonly, uint32_t *first_uid, const char *name,
                       char *err, size_t errlen)
{
    if (*first_uid == (uint32_t)-1)
        *first_uid = st->st_uid;
    if (st->st_uid != *first_uid) {
        if (err && errlen)
            snprintf(err, errlen, "segment %s is owned by uid %u, the others by uid %u", name,
                     (unsigned)st->st_uid, (unsigned)*first_uid);
        return -EPERM;
    }
    if (readonly) {
        if (st->st_mode & 022) {
            if (err && errlen)
                snprintf(err, errlen,
                         "segment %s is writable by users other than its owner (mode %04o)", name,
                         (unsigned)(st->st_mode & 07777));
            return -EPERM;
        }
        return 0;
    }
    uid_t me = geteuid();
    if (me != 0 && st->st_uid != me) {
        if (err && errlen)
            snprintf(err, errlen, "segment %s is owned by uid %u, not by this process (uid %u)",
                     name, (unsigned)st->st_uid, (unsigned)me);
        return -EPERM;
    }
    return 0;
}

/* One value of a segment against the layout: 0, or -EPROTO naming it. */
static int expect(const char *seg, const char *what, uint64_t got, uint64_t want, char *err,
                  size_t errlen)
{
    if (got == want)
        return 0;
    bf_errf(err, errlen, "segment %s: %s is %llu but its capacities give %llu (corrupted file)",
            seg, what, (unsigned long long)got, (unsigned long long)want);
    return -EPROTO;
}

/*
 * Every header field, table and inner offset of segment k (mapped, `size`
 * bytes, magic/kind/version/size/ready already checked) against the layout
 * its capacities give, before anything else reads it: the capacities agree
 * with the inventory segment's and are in range, the header's size is the
 * layout's total, the derived capacities (index, string arena, change log,
 * stamps) are the computed ones, every table lies inside the file
 * (offset + length, overflow-checked) at its computed place, and the
 * offsets and ring geometry stored inside the tables (pending arrays,
 * change-log entries, ring kind/slot/capacity/data) are the ones
 * init_segment wrote. Fills *L. 0, or -EPROTO with err naming the field.
 */
static int check_layout(const struct bf_shm *s, int k, const char *name, struct bf_layout *L,
                        char *err, size_t errlen)
{
    const struct bf_seg_header *h = s->base[k];
    const struct bf_seg_header *inv = s->base[BF_SEG_INVENTORY];
    const uint8_t *b = s->base[k];
    uint64_t size = s->len[k];
    int rc;
    if (h->max_machines != inv->max_machines || h->max_needs != inv->max_needs ||
        h->max_clusters != inv->max_clusters) {
        bf_errf(err, errlen,
                "segment %s: capacities (machines %u, needs %u, clusters %u) differ from the "
                "inventory segment's (%u, %u, %u)",
                name, h->max_machines, h->max_needs, h->max_clusters, inv->max_machines,
                inv->max_needs, inv->max_clusters);
        return -EPROTO;
    }
    struct bf_shm_caps caps = {.max_machines = h->max_machines,
                               .max_needs = h->max_needs,
                               .max_clusters = h->max_clusters};
    if (bf_layout_compute(k, &caps, L) != 0) {
        bf_errf(err, errlen,
                "segment %s: capacities out of range (machines %u, needs %u, clusters %u)", name,
                h->max_machines, h->max_needs, h->max_clusters);
        return -EPROTO;
    }
    if ((rc = expect(name, "the header's size", h->size, L->map, err, errlen)) ||
        (rc = expect(name, "index_capacity", h->index_capacity, L->index_capacity, err, errlen)) ||
        (rc = expect(name, "strings_arena_bytes", h->strings_arena_bytes, L->arena_bytes, err,
                     errlen)) ||
        (rc = expect(name, "changelog_capacity", h->changelog_capacity, L->changelog_capacity, err,
                     errlen)) ||
        (rc = expect(name, "stamp_capacity", h->stamp_capacity, L->stamp_capacity, err, errlen)))
        return rc;
    for (int t = 0; t < BF_SEG_MAX_TABLES; t++) {
        size_t end;
        if (!bf_add_size(h->table_off[t], h->table_len[t], &end) || end > size) {
            bf_errf(err, errlen,
                    "segment %s: table %d (offset %llu, %llu bytes) lies outside the %llu-byte "
                    "segment",
                    name, t, (unsigned long long)h->table_off[t],
                    (unsigned long long)h->table_len[t], (unsigned long long)size);
            return -EPROTO;
        }
        if (h->table_off[t] != L->off[t] || h->table_len[t] != L->len[t]) {
            bf_errf(err, errlen,
                    "segment %s: table %d is at offset %llu, %llu bytes, but its capacities place "
                    "it at %llu, %llu bytes (corrupted file)",
                    name, t, (unsigned long long)h->table_off[t],
                    (unsigned long long)h->table_len[t], (unsigned long long)L->off[t],
                    (unsigned long long)L->len[t]);
            return -EPROTO;
        }
    }
    char what[64];
    if (k == BF_SEG_INVENTORY) {
        /* the file holds every table but the arena, and the arena as far as
         * it is committed (strtab.c grows the file first, then publishes) */
        struct stat st;
        if (fstat(s->inv_fd, &st) != 0 || (uint64_t)st.st_size < L->total) {
            bf_errf(err, errlen,
                    "segment %s is %lld bytes, shorter than its tables and first arena step (%llu)",
                    name, (long long)st.st_size, (unsigned long long)L->total);
            return -EPROTO;
        }
        const struct bf_inv_meta *meta = (const struct bf_inv_meta *)(b + L->off[BF_INV_T_META]);
        uint64_t committed =
            atomic_load_explicit(&meta->strtab.arena_committed, memory_order_acquire);
        if (committed > L->arena_bytes || committed < L->arena_commit ||
            L->off[BF_INV_T_ARENA] + committed > (uint64_t)st.st_size) {
            /* the file may have grown since: look again */
            if (fstat(s->inv_fd, &st) != 0 || committed > L->arena_bytes ||
                committed < L->arena_commit ||
                L->off[BF_INV_T_ARENA] + committed > (uint64_t)st.st_size) {
                bf_errf(
                    err, errlen,
                    "segment %s: the string arena's committed %llu bytes do not fit its reserve "
                    "(%llu) or its %lld-byte file (truncated or corrupted)",
                    name, (unsigned long long)committed, (unsigned long long)L->arena_bytes,
                    (long long)st.st_size);
                return -EPROTO;
            }
        }
        const struct bf_pending_hdr *ph =
            (const struct bf_pending_hdr *)(b + L->off[BF_INV_T_PENDING]);
        uint64_t enq = L->off[BF_INV_T_PENDING] + sizeof(struct bf_pending_hdr);
        if ((rc = expect(name, "the pending enq offset", ph->enq_off, enq, err, errlen)) ||
            (rc = expect(name, "the pending done offset", ph->done_off, enq + h->max_machines, err,
                         errlen)))
            return rc;
        uint64_t entries =
            L->off[BF_INV_T_CHANGELOG] + BF_CHANGELOG_WRITERS * sizeof(struct bf_changelog);
        for (int w = 0; w < BF_CHANGELOG_WRITERS; w++) {
            const struct bf_changelog *c =
                (const struct bf_changelog *)(b + L->off[BF_INV_T_CHANGELOG] +
                                              (size_t)w * sizeof(struct bf_changelog));
            snprintf(what, sizeof what, "change log %d's entries offset", w);
            if ((rc = expect(name, what, c->entries_off,
                             entries + (uint64_t)w * L->changelog_capacity * 4, err, errlen)))
                return rc;
        }
    } else if (L->grow_table >= 0) {
        /* the file holds every table before the growing one, and that one
         * as far as it is committed (bf_shm_grow grows the file first) */
        struct stat st;
        uint64_t grown = atomic_load_explicit(&h->grown, memory_order_acquire);
        uint64_t off = L->off[L->grow_table], reserve = L->len[L->grow_table];
        bool ok = fstat(s->grow_fd[k], &st) == 0 && (uint64_t)st.st_size >= L->total &&
                  grown >= L->grow_commit && grown <= reserve &&
                  off + grown <= (uint64_t)st.st_size;
        if (!ok) /* the file may have grown since: look again */
            ok = fstat(s->grow_fd[k], &st) == 0 && (uint64_t)st.st_size >= L->total &&
                 grown >= L->grow_commit && grown <= reserve && off + grown <= (uint64_t)st.st_size;
        if (!ok) {
            bf_errf(err, errlen,
                    "segment %s: its last table's grown %llu bytes do not fit its first step "
                    "(%llu), its reserve (%llu) or its %lld-byte file (truncated or corrupted)",
                    name, (unsigned long long)grown, (unsigned long long)L->grow_commit,
                    (unsigned long long)reserve, (long long)st.st_size);
            return -EPROTO;
        }
    }
    if (k == BF_SEG_RINGS) {
        for (int r = 0; r < BF_RING_COUNT; r++) {
            const struct bf_ring_hdr *rh = (const struct bf_ring_hdr *)(b + L->off[r]);
            const struct {
                const char *what;
                uint64_t got, want;
            } f[] = {{"kind", rh->kind, bf_ring_kind[r]},
                     {"slot size", rh->slot_size, L->ring_slot[r]},
                     {"capacity", rh->capacity, L->ring_cap[r]},
                     {"producer", rh->producer, bf_ring_producer[r]},
                     {"consumer", rh->consumer, bf_ring_consumer[r]},
                     {"data offset", rh->data_off, L->off[r] + sizeof(struct bf_ring_hdr)}};
            for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
                snprintf(what, sizeof what, "ring %d's %s", r, f[i].what);
                if ((rc = expect(name, what, f[i].got, f[i].want, err, errlen)))
                    return rc;
            }
        }
    }
    return 0;
}

int bf_shm_attach(struct bf_shm *s, const char *shard_id, bool readonly, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->inv_fd = -1;
    for (int k = 0; k < BF_SEG_KIND_COUNT; k++)
        s->grow_fd[k] = -1;
    s->readonly = readonly;
    s->pid = (uint32_t)getpid();
    if (!valid_id(shard_id)) {
        set_err(err, errlen, "invalid shard id %s%s", shard_id, "");
        return -EINVAL;
    }
    snprintf(s->shard_id, sizeof s->shard_id, "%s", shard_id);
    uint32_t owner = (uint32_t)-1;
    for (int k = 1; k < BF_SEG_KIND_COUNT; k++) {
        char name[128];
        bf_shm_name(shard_id, k, name, sizeof name);
        int fd = shm_open(name, (readonly ? O_RDONLY : O_RDWR) | O_NOFOLLOW, 0);
        if (fd < 0) {
            int rc = -errno;
            if (rc == -ENOENT)
                set_err(err, errlen, "no appliance segments for shard id %s (%s missing)", shard_id,
                        name);
            else
                set_err(err, errlen, "shm_open %s: %s", name, strerror(-rc));
            bf_shm_detach(s);
            return rc;
        }
        struct stat st;
        struct bf_seg_header hd;
        if (fstat(fd, &st) != 0 || (size_t)st.st_size < sizeof hd ||
            pread(fd, &hd, sizeof hd, 0) != (ssize_t)sizeof hd) {
            close(fd);
            bf_errf(err, errlen,
                    "segment %s is truncated (%lld bytes, shorter than its %zu-byte header)", name,
                    (long long)st.st_size, sizeof(struct bf_seg_header));
            bf_shm_detach(s);
            return -EPROTO;
        }
        if (hd.magic != BF_SHM_MAGIC || hd.kind != (uint32_t)k) {
            close(fd);
            set_err(err, errlen, "segment %s: bad magic or kind%s (not a bigfleet segment)", name,
                    "");
            bf_shm_detach(s);
            return -EPROTO;
        }
        /* never map a size the header's capacities do not give */
        struct bf_shm_caps hc = {.max_machines = hd.max_machines,
                                 .max_needs = hd.max_needs,
                                 .max_clusters = hd.max_clusters};
        struct bf_layout hl;
        if (bf_layout_compute(k, &hc, &hl) != 0) {
            close(fd);
            bf_errf(err, errlen,
                    "segment %s: capacities out of range (machines %u, needs %u, clusters %u)",
                    name, hd.max_machines, hd.max_needs, hd.max_clusters);
            bf_shm_detach(s);
            return -EPROTO;
        }
        /* the mapping is the header's size: the file may be shorter when
         * its last table grows (the inventory's arena, or bf_shm_grow's;
         * check_layout holds the file to what that table committed); other
         * files are exactly that size */
        bool grows = k == BF_SEG_INVENTORY || hl.grow_table >= 0;
        if (hd.size < (uint64_t)st.st_size || (!grows && hd.size != (uint64_t)st.st_size)) {
            close(fd);
            bf_errf(err, errlen,
                    "segment %s is %llu bytes but its header says %llu (truncated or corrupted)",
                    name, (unsigned long long)st.st_size, (unsigned long long)hd.size);
            bf_shm_detach(s);
            return -EPROTO;
        }
        int src = expect(name, "the header's size", hd.size, hl.map, err, errlen);
        if (src) {
            close(fd);
            bf_shm_detach(s);
            return src;
        }
        int orc = check_owner(&st, readonly, &owner, name, err, errlen);
        if (orc) {
            close(fd);
            bf_shm_detach(s);
            return orc;
        }
        void *p = mmap(NULL, (size_t)hd.size, readonly ? PROT_READ : PROT_READ | PROT_WRITE,
                       MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            int rc = -errno;
            close(fd);
            set_err(err, errlen, "mmap %s: %s", name, strerror(-rc));
            bf_shm_detach(s);
            return rc;
        }
        if (k == BF_SEG_INVENTORY)
            s->inv_fd = fd; /* read-only: closed once the layout is checked */
        else if (hl.grow_table >= 0)
            s->grow_fd[k] = fd; /* likewise */
        else
            close(fd);
        s->base[k] = p;
        s->len[k] = (size_t)hd.size;
        const struct bf_seg_header *h = p;
        if (h->magic != BF_SHM_MAGIC || h->kind != (uint32_t)k) {
            set_err(err, errlen, "segment %s: bad magic or kind%s (not a bigfleet segment)", name,
                    "");
            bf_shm_detach(s);
            return -EPROTO;
        }
        if (h->layout_version != BF_SHM_LAYOUT_VERSION) {
            if (err && errlen)
                snprintf(err, errlen,
                         "segment %s has layout version %u but this binary expects version %u",
                         name, h->layout_version, BF_SHM_LAYOUT_VERSION);
            bf_shm_detach(s);
            return -EPROTONOSUPPORT;
        }
        if (atomic_load_explicit(&((struct bf_seg_header *)p)->ready, memory_order_acquire) != 1) {
            set_err(err, errlen, "segment %s is not initialised yet%s", name, "");
            bf_shm_detach(s);
            return -EAGAIN;
        }
    }
    struct bf_layout layouts[BF_SEG_KIND_COUNT];
    for (int k = 1; k < BF_SEG_KIND_COUNT; k++) {
        char name[128];
        bf_shm_name(shard_id, k, name, sizeof name);
        int rc = check_layout(s, k, name, &layouts[k], err, errlen);
        if (rc) {
            bf_shm_detach(s);
            return rc;
        }
    }
    const struct bf_seg_header *inv = s->base[BF_SEG_INVENTORY];
    struct bf_shm_caps caps = {.max_machines = inv->max_machines,
                               .max_needs = inv->max_needs,
                               .max_clusters = inv->max_clusters};
    bind_views(s, layouts, &caps);
    if (readonly) {
        close(s->inv_fd);
        s->inv_fd = -1;
        for (int k = 1; k < BF_SEG_KIND_COUNT; k++) {
            if (s->grow_fd[k] > 0)
                close(s->grow_fd[k]);
            s->grow_fd[k] = -1;
        }
    }
    return 0;
}

void bf_shm_detach(struct bf_shm *s)
{
    for (int k = 1; k < BF_SEG_KIND_COUNT; k++) {
        if (s->base[k])
            munmap(s->base[k], s->len[k]);
        s->base[k] = NULL;
        s->len[k] = 0;
    }
    if (s->inv_fd > 0)
        close(s->inv_fd);
    s->inv_fd = -1;
    for (int k = 1; k < BF_SEG_KIND_COUNT; k++) {
        if (s->grow_fd[k] > 0)
            close(s->grow_fd[k]);
        s->grow_fd[k] = -1;
    }
}

int bf_shm_unlink(const char *shard_id)
{
    int found = 0;
    for (int k = 1; k < BF_SEG_KIND_COUNT; k++) {
        char name[128];
        bf_shm_name(shard_id, k, name, sizeof name);
        if (shm_unlink(name) == 0)
            found++;
    }
    return found ? 0 : -ENOENT;
}

void bf_shm_set_role(struct bf_shm *s, int role)
{
    s->role = (role >= 0 && role < BF_ROLE_COUNT) ? role : 0;
}

size_t bf_shm_segment_bytes(const struct bf_shm *s, int kind)
{
    if (kind <= 0 || kind >= BF_SEG_KIND_COUNT || !s->base[kind])
        return 0;
    if (s->grow_off[kind])
        return (size_t)(s->grow_off[kind] + bf_shm_grown(s, kind));
    if (kind != BF_SEG_INVENTORY || !s->inv)
        return s->len[kind];
    return (size_t)(s->arena_off +
                    atomic_load_explicit(&s->inv->strtab.arena_committed, memory_order_acquire));
}

size_t bf_shm_total_bytes(const struct bf_shm *s)
{
    size_t t = 0;
    for (int k = 1; k < BF_SEG_KIND_COUNT; k++)
        t += bf_shm_segment_bytes(s, k);
    return t;
}

int bf_shm_file_back(int fd, uint64_t from, uint64_t to)
{
    if (to <= from)
        return 0;
    if (fallocate(fd, 0, (off_t)from, (off_t)(to - from)) == 0)
        return 0;
    int e = errno;
    if (e != EOPNOTSUPP && e != ENOSYS)
        return e == EFBIG ? -ENOSPC : -e;
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -errno;
    if ((uint64_t)st.st_size >= to)
        return 0;
    return ftruncate(fd, (off_t)to) == 0 ? 0 : -errno;
}

int bf_shm_grow(struct bf_shm *s, int kind, uint64_t upto)
{
    if (kind <= 0 || kind >= BF_SEG_KIND_COUNT || !s->grow_off[kind])
        return -EINVAL;
    if (upto > s->grow_reserve[kind])
        return -ENOSPC;
    struct bf_seg_header *h = s->base[kind];
    uint64_t have = atomic_load_explicit(&h->grown, memory_order_relaxed);
    if (upto <= have)
        return 0;
    if (s->readonly || s->grow_fd[kind] <= 0)
        return -EROFS;
    uint64_t step = have / 8 > BF_ARENA_STEP ? have / 8 : BF_ARENA_STEP;
    uint64_t want = bf_align_up(upto + step, 4096);
    if (want > s->grow_reserve[kind])
        want = s->grow_reserve[kind];
    if (bf_shm_file_back(s->grow_fd[kind], s->grow_off[kind] + have, s->grow_off[kind] + want) != 0)
        return -ENOSPC;
    /* the file first, then the count readers bound themselves by */
    atomic_store_explicit(&h->grown, want, memory_order_release);
    return 0;
}

uint64_t bf_shm_grown(const struct bf_shm *s, int kind)
{
    if (kind <= 0 || kind >= BF_SEG_KIND_COUNT || !s->grow_off[kind] || !s->base[kind])
        return 0;
    const struct bf_seg_header *h = s->base[kind];
    uint64_t g = atomic_load_explicit(&h->grown, memory_order_acquire);
    return g < s->grow_reserve[kind] ? g : s->grow_reserve[kind];
}

void bf_shm_load_words(void *dst, const void *src, size_t n)
{
    const _Atomic uint64_t *a = src;
    uint64_t *d = dst;
    for (size_t i = 0; i < n / 8; i++)
        d[i] = atomic_load_explicit(&a[i], memory_order_relaxed);
}

void bf_shm_store_words(void *dst, const void *src, size_t n)
{
    _Atomic uint64_t *a = dst;
    const uint64_t *d = src;
    for (size_t i = 0; i < n / 8; i++)
        atomic_store_explicit(&a[i], d[i], memory_order_relaxed);
}

void bf_hist_observe(struct bf_hist *h, double start, double factor, int n, int64_t value_ns)
{
    double v = (double)value_ns / 1e9;
    double bound = start;
    int b = 0;
    if (n > BF_HIST_MAX_BUCKETS - 1)
        n = BF_HIST_MAX_BUCKETS - 1;
    while (b < n && v > bound) {
        bound *= factor;
        b++;
    }
    /* bucket b in [0, n]: b == n means above the last bound (+Inf) */
    atomic_fetch_add_explicit(&h->bucket[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_ns, (uint64_t)(value_ns > 0 ? value_ns : 0),
                              memory_order_relaxed);
}

void bf_shm_backoff(unsigned attempt)
{
    bf_backoff(attempt);
}
