/*
 * fuzz_inspect_segment.c — bigfleet-inspect's local path on corrupted or
 * truncated segment files: bf_shm_attach (read-only, the tool's attach),
 * then every reader of tools/inspect/reader.c and every subcommand of
 * render.c, text and JSON.
 *
 * The segments: a real appliance state built once per process (strings,
 * registries, machine and Need profiles, machines in every state, clusters
 * with need rows, a result published by the real cycle controller) in
 * scratch segments (fuzz_shm.h). An input is a render byte (bits 0-3 the
 * subcommand, bit 4 JSON, bit 5 machine --slot 1), then a list of
 * operations on the segments, undone after the run:
 *   op byte: bits 0-1 the segment (inventory, needs, rings, state);
 *            bit 7 set: truncate the file to (4 bytes LE) mod (its size + 1);
 *            else a patch: a region byte (0 = the 512-byte header, t = the
 *            header's table t - 1), an offset (4 bytes LE, mod the region's
 *            length), a length byte (mod 65) and that many bytes to write.
 * Truncations apply after every patch (a patch past a new end would fault
 * in the harness, not in the product).
 *
 * Patches stay inside the file (the inventory's ends inside its arena).
 *
 * Properties:
 *   - attach succeeds, or fails with a documented error and a message,
 *     leaving nothing mapped;
 *   - an input that changes no header byte, no offset stored inside a table
 *     (pending arrays, change logs, ring geometry), not the arena's committed
 *     size and no file's size never makes attach fail: the validation
 *     refuses corrupted layouts, not corrupted data;
 *   - after a successful attach every view lies inside its mapping;
 *   - every reader, and the subcommand asked for, run to completion within
 *     the mapping (no
 *     fault, no sanitizer report: ASan sees reads past a mapping as SEGV),
 *     with bounded counts (scan within the high-water mark and
 *     max_machines, clusters within max_clusters, verdicts within
 *     max_needs and the cells the state file backs, a verdict's extra
 *     index and domain refs checked), and every JSON document it prints
 *     parses (jansson);
 *   - nothing is written to the segments (the read-only mapping faults on a
 *     store).
 */
#include <fcntl.h>
#include <jansson.h>
#include <sys/mman.h>

#include "bigfleet/blobs.h"
#include "bigfleet/cycle.h"
#include "bigfleet/util.h"
#include "fuzz_shm.h"
#include "../../tools/inspect/inspect.h"

#define MAX_OPS 16

static struct bf_shm g_s;                  /* read-write, the harness's own handle */
static uint8_t *g_snap[BF_SEG_KIND_COUNT]; /* the pristine segment files */
static size_t g_len[BF_SEG_KIND_COUNT];    /* their sizes (the inventory's file is
                                              shorter than its mapping: the arena grows) */

static uint32_t str_ref(const char *s)
{
    uint32_t r;
    FUZZ_CHECK(bf_str_intern(&g_s, s, (uint32_t)strlen(s), &r) == 0);
    return r;
}

/* An appliance state with something in every table the tool reads. */
static void populate(void)
{
    static const char *const types[] = {"m5.large", "c6i.4xlarge"};
    static const char *const zones[] = {"us-east-1a", "us-east-1b"};
    int ti[2], zi[2];
    uint32_t mprof[2][2];
    for (int i = 0; i < 2; i++) {
        ti[i] = bf_type_intern(&g_s, types[i]);
        zi[i] = bf_zone_intern(&g_s, zones[i]);
        FUZZ_CHECK(ti[i] > 0 && zi[i] > 0);
    }
    for (int t = 0; t < 2; t++)
        for (int z = 0; z < 2; z++) {
            struct bf_kv res[] = {{"cpu", t ? "16" : "2"}, {"memory", "8Gi"}};
            struct bf_kv alloc[] = {{"cpu", t ? "15500m" : "1900m"}, {"memory", "7Gi"}};
            struct bf_kv lab[] = {{"bigfleet.test/rack", z ? "rack-b" : "rack-a"}};
            struct bf_mprofile_input in = {types[t], zones[z], t ? BF_CT_SPOT : 1, 2, res, 1, lab,
                                           2,        alloc};
            char err[128];
            FUZZ_CHECK(bf_mprofile_intern(&g_s, &in, &mprof[t][z], err, sizeof err) == 0);
        }
    const char *v1[] = {"m5.large"};
    const char *v2[] = {"us-east-1a", "us-east-1b"};
    struct bf_requirement r1[] = {{BF_LABEL_INSTANCE_TYPE, BF_OP_IN, 1, v1}};
    struct bf_requirement r2[] = {{BF_LABEL_ZONE, BF_OP_SAME, 0, NULL},
                                  {BF_LABEL_ZONE, BF_OP_IN, 2, v2}};
    struct bf_spread sp[] = {{BF_LABEL_ZONE, 1, BF_WHEN_DO_NOT_SCHEDULE}};
    struct bf_need_profile np[3] = {
        {100, 3, 4, 1, r1, 0, NULL}, {50, 5, 5, 2, r2, 1, sp}, {200, 27, 1, 0, NULL, 0, NULL}};
    uint32_t need[3], fp[3];
    for (int i = 0; i < 3; i++)
        FUZZ_CHECK(bf_nprofile_intern(&g_s, &np[i], &need[i], &fp[i]) == 0);
    int cpu = bf_dim_lookup(&g_s, "cpu"), mem = bf_dim_lookup(&g_s, "memory");
    uint32_t cl[2] = {str_ref("cluster-alpha"), str_ref("cluster-beta")};
    uint32_t grp = str_ref("topology.bigfleet/rack\0app=x");
    static const uint8_t states[] = {
        BF_STATE_IDLE,   BF_STATE_CONFIGURED, BF_STATE_SPECULATIVE, BF_STATE_CREATING,
        BF_STATE_FAILED, BF_STATE_DRAINING,   BF_STATE_CONFIGURING, BF_STATE_DELETING};
    int64_t now_s = bf_now_ns() / BF_NS_PER_SEC;
    for (uint32_t i = 0; i < 24; i++) {
        struct bf_machine_rec r;
        memset(&r, 0, sizeof r);
        char id[32];
        snprintf(id, sizeof id, "m-%04u", i);
        r.id = str_ref(id);
        int t = (int)(i % 2), z = (int)((i / 2) % 2);
        uint8_t st = states[i % 8];
        r.state = st;
        r.capacity_type = t ? BF_CT_SPOT : 1;
        r.type_idx = (uint16_t)ti[t];
        r.zone_idx = (uint16_t)zi[z];
        r.profile = mprof[t][z];
        r.price_per_hour = 0.1f + (float)t;
        if (st != BF_STATE_SPECULATIVE && st != BF_STATE_CREATING) {
            r.host = str_ref("sim");
            r.flags |= BF_REC_HOST_IS_ID;
        }
        if (st == BF_STATE_CONFIGURED || st == BF_STATE_DRAINING) {
            r.cluster = cl[i % 2];
            r.fingerprint = fp[0];
            r.assigned_priority = 100;
            r.ipb = 3;
            r.rpb = 4;
            r.group = i % 3 ? 0 : grp;
        }
        if (st == BF_STATE_FAILED)
            r.last_error = str_ref("provider: boom");
        if (st == BF_STATE_IDLE)
            r.idle_since = bf_rec_idle_since_encode(&g_s, now_s - 120);
        uint32_t slot;
        FUZZ_CHECK(bf_inv_insert(&g_s, &r, &slot) == 0);
        if (i % 5 == 4)
            bf_pending_mark(&g_s, slot);
    }
    /* need rows: alpha {P1, P2, P3 + group}, beta {P1} */
    struct {
        int cluster, prof;
        bool group;
    } rows[4] = {{0, 0, false}, {0, 1, false}, {0, 2, true}, {1, 0, false}};
    for (int i = 0; i < 4; i++) {
        struct bf_need_row r;
        memset(&r, 0, sizeof r);
        r.profile_ref = need[rows[i].prof];
        r.group_ref = rows[i].group ? grp : 0;
        r.cluster_ref = cl[rows[i].cluster];
        r.arrival_ns = bf_now_ns() - (10 - i) * BF_NS_PER_SEC;
        r.aggregate[cpu] = 4000 * (i + 1);
        r.aggregate[mem] = 4LL << 40;
        r.min_unit[cpu] = 1000;
        bf_shm_store_words(&g_s.rows[i], &r, sizeof r);
    }
    struct bf_cluster_rec c[2];
    memset(c, 0, sizeof c);
    for (int i = 0; i < 2; i++) {
        c[i].name_ref = cl[i];
        c[i].in_use = 1;
        c[i].connected = 1;
        c[i].first_rollup = 1;
        c[i].generation = 1;
        c[i].last_rollup_ns = bf_now_ns();
    }
    c[0].rows_off = 0, c[0].rows_count = 3, c[0].accepted_rows = 3;
    c[1].rows_off = 3, c[1].rows_count = 1, c[1].accepted_rows = 1;
    for (int i = 0; i < 2; i++)
        bf_cluster_write(&g_s, (uint32_t)i, &c[i]);
    atomic_store(&g_s.needs->n_clusters, 2);
    atomic_store(&g_s.needs->rows_used, 4);
    atomic_fetch_add(&g_s.needs->change_counter, 1);
    /* a result published by the real cycle controller (verdicts, shortfalls,
     * actions in the ring) */
    struct bf_cycle_opts o = {.reclaim_cap_fraction = 0.05};
    struct bf_cycle *cy;
    FUZZ_CHECK(bf_cycle_new(&g_s, &o, &cy) == 0);
    struct bf_cycle_report rep;
    for (int i = 0; i < 2; i++)
        FUZZ_CHECK(bf_cycle_run_once(cy, bf_now_ns(), &rep) == 0);
    bf_cycle_free(cy);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    struct bf_shm_caps caps = {.max_machines = 64, .max_needs = 64, .max_clusters = 8};
    fuzz_shm_create(&g_s, "fuzz-inspect", &caps);
    populate();
    for (int k = 1; k < BF_SEG_KIND_COUNT; k++) {
        g_len[k] = bf_shm_segment_bytes(&g_s, k);
        g_snap[k] = malloc(g_len[k]);
        FUZZ_CHECK(g_snap[k]);
        memcpy(g_snap[k], g_s.base[k], g_len[k]);
    }
    return 0;
}

/* ------------------------------------------------------------ operations */

struct op {
    int kind;
    bool trunc;
    size_t off, len; /* patch: where; trunc: the new size in off */
    uint8_t *old;
};

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Byte ranges whose change may (rightly) make attach refuse: the headers
 * and the offsets stored inside tables. */
static bool structural(int kind, size_t off, size_t len)
{
    size_t end = off + len;
    if (off < sizeof(struct bf_seg_header))
        return true;
    const struct bf_seg_header *h = (const struct bf_seg_header *)g_snap[kind];
    if (kind == BF_SEG_INVENTORY) {
        size_t m =
            h->table_off[BF_INV_T_META] + offsetof(struct bf_inv_meta, strtab.arena_committed);
        if (end > m && off < m + 8)
            return true;
        size_t p = h->table_off[BF_INV_T_PENDING];
        if (end > p && off < p + sizeof(struct bf_pending_hdr))
            return true;
        size_t c = h->table_off[BF_INV_T_CHANGELOG];
        for (int w = 0; w < BF_CHANGELOG_WRITERS; w++) {
            size_t e = c + (size_t)w * sizeof(struct bf_changelog) +
                       offsetof(struct bf_changelog, entries_off);
            if (end > e && off < e + 8)
                return true;
        }
    }
    if (kind == BF_SEG_RINGS)
        for (int r = 0; r < BF_RING_COUNT; r++) {
            size_t b = h->table_off[r];
            if (end > b && off < b + offsetof(struct bf_ring_hdr, pad0))
                return true;
        }
    return false;
}

static void resize(int kind, size_t size)
{
    char name[128];
    bf_shm_name(fuzz_shm_id, kind, name, sizeof name);
    int fd = shm_open(name, O_RDWR, 0);
    FUZZ_CHECK(fd >= 0);
    FUZZ_CHECK(ftruncate(fd, (off_t)size) == 0);
    close(fd);
}

/* Applies the input's operations; returns how many (undo with restore). */
static int apply(const uint8_t *d, size_t n, struct op *ops, bool *structural_change)
{
    int nops = 0;
    size_t i = 0;
    *structural_change = false;
    struct op tr[MAX_OPS];
    int ntr = 0;
    while (i < n && nops + ntr < MAX_OPS) {
        uint8_t b = d[i++];
        int kind = (b & 3) + 1;
        if (b & 0x80) {
            if (n - i < 4)
                break;
            size_t size = le32(d + i) % (g_len[kind] + 1);
            i += 4;
            tr[ntr++] = (struct op){kind, true, size, 0, NULL};
            if (size != g_len[kind])
                *structural_change = true;
            continue;
        }
        if (n - i < 6)
            break;
        const struct bf_seg_header *h = (const struct bf_seg_header *)g_snap[kind];
        uint8_t region = d[i++];
        size_t base, rlen;
        int ntab = 0;
        while (ntab < BF_SEG_MAX_TABLES && h->table_len[ntab])
            ntab++;
        int r = region % (ntab + 1);
        if (r == 0) {
            base = 0;
            rlen = sizeof(struct bf_seg_header);
        } else {
            base = h->table_off[r - 1];
            rlen = h->table_len[r - 1];
        }
        if (base + rlen > g_len[kind]) /* the arena: the file ends inside it */
            rlen = base < g_len[kind] ? g_len[kind] - base : 0;
        if (rlen == 0)
            rlen = 1, base = 0;
        size_t off = base + le32(d + i) % rlen;
        i += 4;
        size_t len = d[i++] % 65;
        if (len > n - i)
            len = n - i;
        if (off + len > g_len[kind])
            len = g_len[kind] - off;
        struct op *o = &ops[nops++];
        *o = (struct op){kind, false, off, len, malloc(len + 1)};
        FUZZ_CHECK(o->old);
        memcpy(o->old, (uint8_t *)g_s.base[kind] + off, len);
        if (memcmp(o->old, d + i, len) != 0 && structural(kind, off, len))
            *structural_change = true;
        memcpy((uint8_t *)g_s.base[kind] + off, d + i, len);
        i += len;
    }
    for (int t = 0; t < ntr; t++) {
        resize(tr[t].kind, tr[t].off);
        ops[nops++] = tr[t];
    }
    return nops;
}

static void restore(struct op *ops, int nops)
{
    for (int k = nops - 1; k >= 0; k--) {
        struct op *o = &ops[k];
        if (o->trunc) {
            resize(o->kind, g_len[o->kind]);
            /* the pristine bytes past the cut (pages that were not zero) */
            for (size_t p = o->off & ~(size_t)4095; p < g_len[o->kind]; p += 4096) {
                const uint8_t *src = g_snap[o->kind] + p;
                size_t l = g_len[o->kind] - p < 4096 ? g_len[o->kind] - p : 4096;
                static const uint8_t zero[4096];
                if (memcmp(src, zero, l) != 0)
                    memcpy((uint8_t *)g_s.base[o->kind] + p, src, l);
            }
        } else {
            memcpy((uint8_t *)g_s.base[o->kind] + o->off, o->old, o->len);
            free(o->old);
        }
    }
}

/* ------------------------------------------------------------ the tool */

static bool inside(const struct bf_shm *s, int kind, const void *p, size_t len)
{
    uintptr_t b = (uintptr_t)s->base[kind], a = (uintptr_t)p;
    return a >= b && a + len <= b + s->len[kind];
}

static void views_inside(const struct bf_shm *s)
{
    FUZZ_CHECK(inside(s, BF_SEG_INVENTORY, s->inv, sizeof *s->inv));
    FUZZ_CHECK(inside(s, BF_SEG_INVENTORY, s->arena, s->arena_bytes));
    FUZZ_CHECK(
        inside(s, BF_SEG_INVENTORY, s->records, (size_t)s->max_machines * sizeof *s->records));
    FUZZ_CHECK(inside(s, BF_SEG_INVENTORY, s->strhash, (size_t)(s->index_mask + 1) * 4));
    FUZZ_CHECK(inside(s, BF_SEG_INVENTORY, s->idindex, (size_t)(s->index_mask + 1) * 4));
    FUZZ_CHECK(inside(s, BF_SEG_INVENTORY, s->pending_enq, s->max_machines));
    FUZZ_CHECK(inside(s, BF_SEG_INVENTORY, s->pending_done, s->max_machines));
    for (int w = 0; w < BF_CHANGELOG_WRITERS; w++)
        FUZZ_CHECK(inside(s, BF_SEG_INVENTORY,
                          (const uint8_t *)s->inv_hdr + s->changelog[w].entries_off,
                          (size_t)(s->changelog_mask + 1) * 4));
    FUZZ_CHECK(inside(s, BF_SEG_NEEDS, s->clusters, (size_t)s->max_clusters * sizeof *s->clusters));
    FUZZ_CHECK(inside(s, BF_SEG_NEEDS, s->rows,
                      (size_t)BF_NEED_ROWS_PER_NEED * s->max_needs * sizeof *s->rows));
    FUZZ_CHECK(inside(s, BF_SEG_NEEDS, s->stamps, (size_t)(s->stamp_mask + 1) * sizeof *s->stamps));
    for (int r = 0; r < BF_RING_COUNT; r++) {
        const struct bf_ring_hdr *h = s->ring[r];
        FUZZ_CHECK(inside(s, BF_SEG_RINGS, h, sizeof *h));
        FUZZ_CHECK(inside(s, BF_SEG_RINGS, (const uint8_t *)s->rings_hdr + h->data_off,
                          h->capacity * h->slot_size));
    }
    FUZZ_CHECK(inside(s, BF_SEG_STATE, s->st, sizeof *s->st));
    FUZZ_CHECK(inside(s, BF_SEG_STATE, s->verdicts,
                      2 * BF_VERDICT_CELLS_PER_BUFFER(s->max_needs) * sizeof *s->verdicts));
}

static void json_ok(const struct bf_strbuf *b)
{
    json_error_t e;
    /* \u0000 and integers past int64 (uint64 counters) are valid JSON */
    json_t *j = json_loadb(b->p, b->len, JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &e);
    if (!j)
        fprintf(stderr, "inspect JSON does not parse: %s (line %d col %d)\n%.*s\n", e.text, e.line,
                e.column, (int)(b->len > 4000 ? 4000 : b->len), b->p);
    FUZZ_CHECK(j != NULL);
    json_decref(j);
}

static void run_tool(struct insp_ctx *c, uint8_t render)
{
    const struct bf_shm *s = &c->shm;
    struct insp_scan sc;
    insp_scan(s, &sc);
    FUZZ_CHECK(sc.hwm <= s->max_machines && sc.total + sc.busy <= sc.hwm);
    uint32_t sum = 0;
    for (int i = 0; i < BF_STATE_COUNT; i++)
        sum += sc.by_state[i];
    FUZZ_CHECK(sum == sc.total);
    struct insp_cluster *cl;
    int ncl = insp_clusters(s, &cl);
    FUZZ_CHECK(ncl >= 0 && (uint32_t)ncl <= s->max_clusters);
    struct insp_cycle cy;
    memset(&cy, 0, sizeof cy);
    FUZZ_CHECK(insp_cycle_read(s, &cy, true) == 0);
    FUZZ_CHECK(cy.nv <= s->max_needs && cy.r.n_shortfalls <= BF_SHORTFALL_MAX);
    insp_cycle_free(&cy);
    struct insp_needs nd;
    int rc = insp_needs_local(s, c->cache, NULL, 0, &nd);
    FUZZ_CHECK(rc == 0 || rc == -ENOMEM);
    insp_needs_free(&nd);
    if (ncl > 0 && cl[0].name && cl[0].name_len < 256) {
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)cl[0].name_len, cl[0].name);
        rc = insp_needs_local(s, c->cache, name, 2, &nd);
        FUZZ_CHECK(rc == 0 || rc == -ENOENT || rc == -ENOMEM);
        FUZZ_CHECK(rc != 0 || nd.n <= 2);
        insp_needs_free(&nd);
    }
    free(cl);
    /* one subcommand, text or JSON, as the input's first byte asks */
    struct insp_opts o = {
        .id = fuzz_shm_id, .interval_ns = BF_NS_PER_SEC, .state = -1, .limit = -1};
    o.cmd = (enum insp_cmd)(render % CMD_COUNT);
    o.json = render & 0x10;
    o.slot = (render >> 5) & 1; /* machine --slot 0 or 1 */
    c->o = &o;
    struct bf_strbuf b = {0};
    char err[256] = "";
    rc = insp_render(c, &b, err, sizeof err);
    if (rc == 0 && o.json)
        json_ok(&b);
    if (rc)
        FUZZ_CHECK(err[0] != 0);
    bf_sb_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    struct op ops[MAX_OPS];
    bool structural_change;
    uint8_t render = data[0];
    int nops = apply(data + 1, size - 1, ops, &structural_change);
    static struct insp_ctx c;
    memset(&c, 0, sizeof c);
    char err[512] = "";
    int rc = bf_shm_attach(&c.shm, fuzz_shm_id, true, err, sizeof err);
    if (rc) {
        FUZZ_CHECK(rc == -EPROTO || rc == -EAGAIN || rc == -EPROTONOSUPPORT);
        FUZZ_CHECK(err[0] != 0);
        for (int k = 1; k < BF_SEG_KIND_COUNT; k++)
            FUZZ_CHECK(c.shm.base[k] == NULL);
        if (!structural_change)
            fprintf(stderr, "attach refused a data-only change: %s\n", err);
        FUZZ_CHECK(structural_change);
    } else {
        views_inside(&c.shm);
        c.cache = bf_blob_cache_new();
        FUZZ_CHECK(c.cache);
        c.now_ns = bf_now_ns();
        run_tool(&c, render);
        bf_blob_cache_free(c.cache);
        bf_shm_detach(&c.shm);
    }
    restore(ops, nops);
    return 0;
}
