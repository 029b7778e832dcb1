/*
 * fuzz_rollup.c — the rollup converter (bf_rollup_convert,
 * src/session/rollup.c): ClusterCapacityNeeds bytes -> Need rows over a
 * scratch shared segment (fresh for every input that changed it).
 * Input: one knob byte, then the message bytes.
 *   bits 0-1  max_rows {1000, 0, 1, 3}
 *   bit 2     the session's cluster is "c1" (else the rollup's own
 *             cluster_id as protobuf-c reads it, so real seeds convert)
 *   bits 3-4  string-arena reserve {0, 1 MiB, all but 256 of the free
 *             bytes, the whole arena}
 *   bit 5     priorities clamped at 10^9 (else not)
 *   bit 6     a receive time (2001-09-09): timestamps outside the minute
 *             before it arrive at it
 * New resource names are handled as the ingest thread does: the converter
 * lists them, the harness registers them and converts again.
 *
 * Properties:
 *   - the result is 0 or a documented error, with a message when not 0;
 *   - a rejected rollup leaves no state behind: no rows in r, the Need
 *     tables untouched; the converter never registers a resource name,
 *     accepted or not (it lists new ones);
 *   - no rollup, accepted or not, takes the string arena below its reserve;
 *   - accepted: protobuf-c unpacks the same bytes (and cuts no requirement
 *     or spread string at a NUL: such a rollup is refused); needs_in is its n_needs
 *     and n + merged = needs_in; an oracle built from protobuf-c's decode
 *     (each Need's profile interned by bf_nprofile_intern_need, its group
 *     looked up, its maps parsed by bf_quantity_parse, last key wins; equal
 *     (profile, group) merged in order of first appearance: aggregates
 *     summed, min_unit the per-dimension maximum) gives exactly the rows;
 *     every quantity is non-negative; priorities above the cap are clamped
 *     (and counted); rows carry the cluster ref and the arrival (the
 *     timestamp unless the receive time clamps it); fp_refs name the
 *     profile's own fingerprint;
 *   - converting the same bytes again (profile cache warm) gives the same
 *     result, byte for byte, or the same error and message;
 *   - incremental conversion (bf_rollup_convert_incremental): with nothing
 *     to reuse it gives the full conversion's rows; then an edit of the
 *     accepted rollup derived from the input (a Need dropped, duplicated,
 *     swapped with another, moved to the front, replaced by another, or a
 *     byte of it changed, which may make it malformed), converted reusing
 *     the accepted one's Needs (its rows in memory or published, by an
 *     input bit), gives exactly what the full conversion of the edit gives:
 *     the same error and message, or the same rows, fp_refs and figures
 *     (for half the inputs with the dedup of converted rows deferred, as
 *     at >= 8192 Needs: defer_min_needs 1; for half, independently, with
 *     the Needs' hashes kept by bf_rollup_digest_needs, whose digest is
 *     bf_rollup_digest's, and consumed by the conversion).
 */
#include "bigfleet/blobs.h"
#include "bigfleet/rollup.h"
#include "bigfleet/v1alpha1/capacity.pb-c.h"
#include "fuzz_shm.h"

static struct bf_shm g_s;
static uint64_t g_base_used; /* arena_used of fresh segments with "c1" interned */
static bool g_have;

static void fresh(void)
{
    if (g_have) {
        uint64_t used = atomic_load(&g_s.inv->strtab.arena_used);
        if (used == g_base_used && atomic_load(&g_s.inv->n_dims) == 0)
            return;
        fuzz_shm_destroy(&g_s);
    }
    struct bf_shm_caps caps = {.max_machines = 16, .max_needs = 1024, .max_clusters = 4};
    fuzz_shm_create(&g_s, "fuzz-rollup", &caps);
    uint32_t ref;
    FUZZ_CHECK(bf_str_intern_cstr(&g_s, "c1", &ref) == 0);
    g_base_used = atomic_load(&g_s.inv->strtab.arena_used);
    g_have = true;
}

struct orow {
    uint32_t pref, gref;
    __int128 agg[BF_MAX_DIMS];
    int64_t mu[BF_MAX_DIMS];
};

/* One protobuf-c map into a vector over the (now registered) dimensions. */
static void oracle_vec(size_t n, char *const *keys, char *const *vals, int64_t v[BF_MAX_DIMS])
{
    memset(v, 0, sizeof(int64_t) * BF_MAX_DIMS);
    for (size_t i = 0; i < n; i++) {
        FUZZ_CHECK(keys[i] && keys[i][0]);
        int64_t milli;
        const char *q = vals[i] ? vals[i] : "";
        FUZZ_CHECK(bf_quantity_parse(q, strlen(q), &milli) == 0);
        int d = bf_dim_lookup(&g_s, keys[i]);
        FUZZ_CHECK(d >= 0 && d < BF_MAX_DIMS);
        v[d] = milli; /* a duplicate key: the last wins */
    }
    for (int d = 0; d < BF_MAX_DIMS; d++)
        FUZZ_CHECK(v[d] >= 0);
}

static void check_accepted(const struct bf_rollup *r,
                           const Bigfleet__V1alpha1__ClusterCapacityNeeds *m, uint32_t cref,
                           int32_t max_priority)
{
    FUZZ_CHECK(r->needs_in == m->n_needs);
    FUZZ_CHECK(r->n + r->merged == r->needs_in);
    FUZZ_CHECK(r->timestamp_ns == m->timestamp_unix_nanos);
    uint32_t clamped = 0;
    struct orow *o = calloc(m->n_needs + 1, sizeof *o);
    FUZZ_CHECK(o);
    uint32_t no = 0;
    char **keys = NULL, **vals = NULL;
    for (size_t i = 0; i < m->n_needs; i++) {
        Bigfleet__V1alpha1__CapacityNeed *n = m->needs[i];
        uint32_t pref, fref, gref = 0;
        char e[256];
        int32_t prio = n->priority;
        if (n->priority > max_priority) { /* the clamped profile is the one interned */
            n->priority = max_priority;
            clamped++;
        }
        FUZZ_CHECK(bf_nprofile_intern_need(&g_s, n, 0, &pref, &fref, e, sizeof e) == 0);
        n->priority = prio;
        if (n->group.len)
            FUZZ_CHECK(bf_str_find(&g_s, n->group.data, (uint32_t)n->group.len, &gref) == 0);
        size_t nk =
            n->n_aggregate_resources > n->n_min_unit ? n->n_aggregate_resources : n->n_min_unit;
        keys = realloc(keys, (nk + 1) * sizeof *keys);
        vals = realloc(vals, (nk + 1) * sizeof *vals);
        FUZZ_CHECK(keys && vals);
        int64_t a[BF_MAX_DIMS], mu[BF_MAX_DIMS];
        for (size_t k = 0; k < n->n_aggregate_resources; k++) {
            keys[k] = n->aggregate_resources[k]->key;
            vals[k] = n->aggregate_resources[k]->value;
        }
        oracle_vec(n->n_aggregate_resources, keys, vals, a);
        for (size_t k = 0; k < n->n_min_unit; k++) {
            keys[k] = n->min_unit[k]->key;
            vals[k] = n->min_unit[k]->value;
        }
        oracle_vec(n->n_min_unit, keys, vals, mu);
        uint32_t j = 0;
        while (j < no && !(o[j].pref == pref && o[j].gref == gref))
            j++;
        if (j == no) {
            o[no].pref = pref;
            o[no].gref = gref;
            no++;
        }
        for (int d = 0; d < BF_MAX_DIMS; d++) {
            o[j].agg[d] += a[d];
            if (mu[d] > o[j].mu[d])
                o[j].mu[d] = mu[d];
        }
    }
    FUZZ_CHECK(no == r->n && clamped == r->priorities_clamped);
    struct bf_blob_cache *cache = bf_blob_cache_new();
    FUZZ_CHECK(cache);
    for (uint32_t j = 0; j < r->n; j++) {
        const struct bf_need_row *row = &r->rows[j];
        FUZZ_CHECK(row->profile_ref == o[j].pref && row->group_ref == o[j].gref);
        FUZZ_CHECK(row->cluster_ref == cref && row->arrival_ns == r->arrival_ns);
        for (int d = 0; d < BF_MAX_DIMS; d++) {
            FUZZ_CHECK(o[j].agg[d] <= INT64_MAX); /* else the merge must have refused */
            FUZZ_CHECK(row->aggregate[d] == (int64_t)o[j].agg[d]);
            FUZZ_CHECK(row->min_unit[d] == o[j].mu[d]);
        }
        const struct bf_nprofile *p = bf_nprofile_get(cache, &g_s, row->profile_ref);
        FUZZ_CHECK(p && p->fingerprint_ref == r->fp_refs[j]);
        uint32_t fl;
        const char *fp = bf_str(&g_s, r->fp_refs[j], &fl);
        FUZZ_CHECK(fp && fl == strlen(p->fingerprint) && memcmp(fp, p->fingerprint, fl) == 0);
    }
    bf_blob_cache_free(cache);
    free(keys);
    free(vals);
    free(o);
}

/* A requirement's key or values, or a spread's topology key, with a NUL byte
 * (protobuf-c would cut it there: the converter must refuse it instead). */
static bool nul_in_profile(const uint8_t *msg, size_t len)
{
    struct bf_pb_reader a, b, c;
    struct bf_pb_field f, g, h;
    bf_pb_reader_init(&a, msg, len);
    while (bf_pb_next(&a, &f) == 1) {
        if (f.num != 3 || f.wt != BF_PB_LEN)
            continue;
        bf_pb_reader_init(&b, f.p, f.len);
        while (bf_pb_next(&b, &g) == 1) {
            if ((g.num != 1 && g.num != 5) || g.wt != BF_PB_LEN)
                continue;
            bf_pb_reader_init(&c, g.p, g.len);
            while (bf_pb_next(&c, &h) == 1)
                if (h.wt == BF_PB_LEN && (h.num == 1 || (g.num == 1 && h.num == 3)) &&
                    memchr(h.p, 0, h.len))
                    return true;
        }
    }
    return false;
}

/* Top-level fields of msg: where each starts and ends, and which are Needs. */
struct tl {
    const uint8_t *p[4096];
    size_t len[4096];
    bool need[4096];
    uint32_t n, needs;
};

static bool split_top(const uint8_t *msg, size_t len, struct tl *t)
{
    struct bf_pb_reader rd;
    struct bf_pb_field f;
    int rc;
    t->n = t->needs = 0;
    bf_pb_reader_init(&rd, msg, len);
    while ((rc = bf_pb_next(&rd, &f)) == 1) {
        if (t->n == 4096)
            return false;
        t->p[t->n] = f.start;
        t->len[t->n] = (size_t)(f.end - f.start);
        t->need[t->n] = f.num == 3;
        t->needs += f.num == 3;
        t->n++;
    }
    return rc == 0;
}

/* The edit of msg that sel picks (see the header), into out (the caller's,
 * len + one field's bytes long); returns its length, 0 when msg has no Need. */
static size_t edit_rollup(const uint8_t *msg, size_t len, uint64_t sel, uint8_t *out)
{
    static struct tl t;
    if (!split_top(msg, len, &t) || !t.needs)
        return 0;
    uint32_t ni[4096], k = 0;
    for (uint32_t i = 0; i < t.n; i++)
        if (t.need[i])
            ni[k++] = i;
    uint32_t a = ni[(sel >> 8) % t.needs], b = ni[(sel >> 24) % t.needs];
    uint32_t order[4097], n = 0;
    int op = (int)(sel % 6);
    size_t flip = (size_t)-1;
    for (uint32_t i = 0; i < t.n; i++) {
        if (op == 4 && i == 0)
            order[n++] = ni[t.needs - 1]; /* the last Need first */
        if ((op == 0 && i == a) || (op == 4 && i == ni[t.needs - 1]))
            continue;
        order[n++] = op == 2 && i == a ? b : op == 2 && i == b ? a : op == 5 && i == a ? b : i;
        if (op == 1 && i == a)
            order[n++] = a;
    }
    size_t o = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (op == 3 && order[i] == a && flip == (size_t)-1 && t.len[a] > 2)
            flip = o + 2 + (size_t)(sel >> 40) % (t.len[a] - 2);
        memcpy(out + o, t.p[order[i]], t.len[order[i]]);
        o += t.len[order[i]];
    }
    if (flip != (size_t)-1)
        out[flip] ^= (uint8_t)((sel >> 32) | 1);
    return o;
}

/* Converts the edit twice with r (warm): reusing the accepted rollup's
 * Needs, then in full; both must agree on everything. */
static void check_incremental(const uint8_t *msg, size_t len, const char *cluster, uint32_t cref,
                              const struct bf_rollup_limits *lim, const struct bf_rollup *acc,
                              const struct bf_need_row *rows, const uint32_t *fps, uint64_t sel,
                              bool published, struct bf_rollup *r)
{
    /* a secret that looks random, as getrandom's does in the ingest thread
     * (XXH3 wants one: a mostly-zero secret makes 64-bit collisions of short
     * inputs easy, and then two different Needs look alike) */
    static struct bf_rollup_digest_key key;
    if (!key.secret[0]) {
        uint64_t x = 0x9e3779b97f4a7c15ULL;
        for (size_t i = 0; i < sizeof key.secret; i++) {
            x += 0x9e3779b97f4a7c15ULL;
            uint64_t z = (x ^ x >> 30) * 0xbf58476d1ce4e5b9ULL;
            z = (z ^ z >> 27) * 0x94d049bb133111ebULL;
            key.secret[i] = (uint8_t)((z ^ z >> 31) | 1);
        }
    }
    /* with nothing to reuse: the full conversion, and a memo of every Need */
    char e1[512] = "", e2[512] = "";
    FUZZ_CHECK(bf_rollup_convert_incremental(&g_s, msg, len, cluster, cref, lim, &key, NULL, r, e1,
                                             sizeof e1) == 0);
    FUZZ_CHECK(r->n == acc->n && r->reused == 0 && r->needs_in == acc->needs_in);
    FUZZ_CHECK(memcmp(r->rows, rows, r->n * sizeof *rows) == 0);
    FUZZ_CHECK(memcmp(r->fp_refs, fps, r->n * sizeof *fps) == 0);
    struct bf_rollup_need_memo *memo = malloc((r->needs_in + 1) * sizeof *memo);
    FUZZ_CHECK(memo);
    if (r->needs_in)
        memcpy(memo, r->needs_memo, r->needs_in * sizeof *memo);
    for (uint32_t i = 0; i < r->needs_in; i++) {
        uint32_t row = BF_ROLLUP_MEMO_ROW(memo[i].row);
        FUZZ_CHECK(row == BF_ROLLUP_NO_ROW || row < r->n);
    }
    struct bf_rollup_prev prev = {.needs = memo,
                                  .n_needs = r->needs_in,
                                  .rows = published ? NULL : rows,
                                  .rows_off = 0, /* stored there by the caller */
                                  .fp_refs = fps,
                                  .n_rows = r->n};
    uint8_t *ed = malloc(2 * len + 1);
    FUZZ_CHECK(ed);
    size_t elen = edit_rollup(msg, len, sel, ed);
    if (!elen) {
        free(ed);
        free(memo);
        return;
    }
    /* half the inputs: the converted rows' dedup deferred at any size (as
     * at >= 8192 Needs) */
    struct bf_rollup_limits dlim = *lim;
    if ((sel >> 56) & 1)
        dlim.defer_min_needs = 1;
    /* half the inputs: the digest first, keeping the Needs' hashes for the
     * conversion (as the ingest thread does); the digest is the plain one */
    if ((sel >> 57) & 1) {
        struct bf_rollup_digest d1, d2;
        int dr1 = bf_rollup_digest_needs(ed, elen, &key, dlim.max_rows, r, &d1);
        int dr2 = bf_rollup_digest(ed, elen, &key, &d2);
        FUZZ_CHECK(dr1 == dr2);
        FUZZ_CHECK(dr1 != 0 || (d1.lo == d2.lo && d1.hi == d2.hi));
        FUZZ_CHECK(r->needs_memo_cap <= (dlim.max_rows > 512 ? 2 * (size_t)dlim.max_rows : 1024) ||
                   r->hashed_buf == NULL);
    }
    int rc1 = bf_rollup_convert_incremental(&g_s, ed, elen, cluster, cref, &dlim, &key, &prev, r,
                                            e1, sizeof e1);
    FUZZ_CHECK(r->hashed_buf == NULL); /* consumed */
    struct bf_rollup x = *r;           /* the figures; rows copied below */
    struct bf_need_row *xr = malloc((r->n + 1) * sizeof *xr);
    uint32_t *xf = malloc((r->n + 1) * sizeof *xf);
    FUZZ_CHECK(xr && xf);
    memcpy(xr, r->rows, r->n * sizeof *xr);
    memcpy(xf, r->fp_refs, r->n * sizeof *xf);
    int rc2 = bf_rollup_convert(&g_s, ed, elen, cluster, cref, lim, r, e2, sizeof e2);
    FUZZ_CHECK(rc1 == rc2);
    if (rc1) {
        FUZZ_CHECK(strcmp(e1, e2) == 0 && x.n == 0);
    } else {
        FUZZ_CHECK(x.n == r->n && x.merged == r->merged && x.needs_in == r->needs_in &&
                   x.groups == r->groups && x.priorities_clamped == r->priorities_clamped &&
                   x.timestamp_ns == r->timestamp_ns && x.arrival_ns == r->arrival_ns &&
                   x.n_new_dims == r->n_new_dims);
        FUZZ_CHECK(memcmp(x.new_dims, r->new_dims, sizeof x.new_dims) == 0);
        FUZZ_CHECK(memcmp(xr, r->rows, r->n * sizeof *xr) == 0);
        FUZZ_CHECK(memcmp(xf, r->fp_refs, r->n * sizeof *xf) == 0);
    }
    free(xr);
    free(xf);
    free(ed);
    free(memo);
}

static bool documented(int rc)
{
    return rc == 0 || rc == -EBADMSG || rc == -EINVAL || rc == -E2BIG || rc == -ERANGE ||
           rc == -ENOSPC || rc == -EDQUOT || rc == -ENOMEM;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t knob = data[0];
    const uint8_t *msg = data + 1;
    size_t len = size - 1;
    fresh();
    Bigfleet__V1alpha1__ClusterCapacityNeeds *m =
        bigfleet__v1alpha1__cluster_capacity_needs__unpack(NULL, len, msg);
    static const uint32_t max_rows[4] = {1000, 0, 1, 3};
    const char *cluster = "c1";
    if (!(knob & 4) && m && m->cluster_id && m->cluster_id[0] && strlen(m->cluster_id) < 256)
        cluster = m->cluster_id;
    uint32_t cref;
    FUZZ_CHECK(bf_str_intern_cstr(&g_s, cluster, &cref) == 0);
    uint64_t used0 = atomic_load(&g_s.inv->strtab.arena_used);
    uint64_t reserve = 0;
    switch ((knob >> 3) & 3) {
    case 1:
        reserve = 1u << 20;
        break;
    case 2:
        reserve = g_s.arena_bytes - used0 - 256;
        break;
    case 3:
        reserve = g_s.arena_bytes;
        break;
    }
    struct bf_rollup_limits lim = {.max_rows = max_rows[knob & 3],
                                   .strtab_reserve = reserve,
                                   .strtab_quota = UINT64_MAX,
                                   .max_priority = (knob & 0x20) ? 1000000000 : INT32_MAX,
                                   .recv_ns = (knob & 0x40) ? 1000000000000000000LL : 0};
    uint32_t dims0 = atomic_load(&g_s.inv->n_dims);
    char names0[BF_MAX_DIMS][BF_DIM_NAME_MAX];
    memcpy(names0, g_s.inv->dim_names, sizeof names0);
    uint64_t cc0 = atomic_load(&g_s.needs->change_counter);
    uint32_t ncl0 = atomic_load(&g_s.needs->n_clusters);

    struct bf_rollup r;
    bf_rollup_init(&r);
    char e1[512] = "", e2[512] = "";
    int rc = bf_rollup_convert(&g_s, msg, len, cluster, cref, &lim, &r, e1, sizeof e1);
    FUZZ_CHECK(documented(rc));
    /* the converter itself never registers a resource name, accepted or not */
    FUZZ_CHECK(atomic_load(&g_s.inv->n_dims) == dims0 &&
               memcmp(names0, g_s.inv->dim_names, sizeof names0) == 0);
    /* the caller's part (src/session/ingest.c): register the names it lists,
     * then convert again */
    bool registered = true;
    if (rc == 0 && r.n_new_dims) {
        FUZZ_CHECK(r.n_new_dims <= BF_MAX_DIMS);
        for (uint32_t i = 0; i < r.n_new_dims && registered; i++)
            registered = bf_dim_intern(&g_s, r.new_dims[i]) >= 0;
        if (registered) {
            rc = bf_rollup_convert(&g_s, msg, len, cluster, cref, &lim, &r, e1, sizeof e1);
            FUZZ_CHECK(rc != 0 || r.n_new_dims == 0);
        }
    }
    uint64_t used1 = atomic_load(&g_s.inv->strtab.arena_used);
    if (used1 > used0)
        FUZZ_CHECK(used1 + reserve <= g_s.arena_bytes); /* the reserve is kept */
    FUZZ_CHECK(atomic_load(&g_s.needs->change_counter) == cc0 &&
               atomic_load(&g_s.needs->n_clusters) == ncl0);
    struct bf_need_row *rows = NULL;
    uint32_t *fps = NULL;
    struct bf_rollup first = r;
    if (rc) {
        FUZZ_CHECK(e1[0] != 0 && r.n == 0);
        if (rc == -EBADMSG && m) /* protobuf-c took it: one of our stricter encodings */
            FUZZ_CHECK(fuzz_pb_stricter_anywhere(msg, len, 6));
    } else if (registered) {
        FUZZ_CHECK(m != NULL);                 /* what we accept, protobuf-c accepts */
        FUZZ_CHECK(!nul_in_profile(msg, len)); /* ... and does not cut */
        /* arrival: the timestamp, unless the receive time clamps it */
        int64_t ts = m->timestamp_unix_nanos, recv = lim.recv_ns;
        FUZZ_CHECK(r.arrival_ns ==
                   ((recv && (ts > recv || ts < recv - BF_ROLLUP_MAX_AGE_NS)) ? recv : ts));
        check_accepted(&r, m, cref, lim.max_priority);
        rows = malloc((r.n + 1) * sizeof *rows);
        fps = malloc((r.n + 1) * sizeof *fps);
        FUZZ_CHECK(rows && fps);
        memcpy(rows, r.rows, r.n * sizeof *rows);
        memcpy(fps, r.fp_refs, r.n * sizeof *fps);
    }
    /* again, the profile cache warm: the same result */
    int rc2 = bf_rollup_convert(&g_s, msg, len, cluster, cref, &lim, &r, e2, sizeof e2);
    if (rc == 0 && !registered) {
        FUZZ_CHECK(rc2 == 0 && r.n_new_dims == first.n_new_dims);
    } else {
        FUZZ_CHECK(rc2 == rc);
        if (rc) {
            FUZZ_CHECK(strcmp(e1, e2) == 0);
        } else {
            FUZZ_CHECK(r.n == first.n && r.merged == first.merged && r.needs_in == first.needs_in &&
                       r.timestamp_ns == first.timestamp_ns && r.n_new_dims == 0);
            FUZZ_CHECK(memcmp(rows, r.rows, r.n * sizeof *rows) == 0);
            FUZZ_CHECK(memcmp(fps, r.fp_refs, r.n * sizeof *fps) == 0);
        }
    }
    /* the unchanged-rollup path (src/session/ingest.c): the digest scans
     * what the converter scans, and repeating the published rows gives the
     * conversion's rows */
    static struct bf_rollup_digest_key key = {.secret = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}};
    struct bf_rollup_digest dg;
    int drc = bf_rollup_digest(msg, len, &key, &dg);
    FUZZ_CHECK(drc == 0 || drc == -EBADMSG);
    if (drc)
        FUZZ_CHECK(rc == -EBADMSG); /* a top level that does not parse never converts */
    if (rc == 0 && registered && rc2 == 0) {
        FUZZ_CHECK(drc == 0 && dg.hi != 0 && dg.timestamp_ns == r.timestamp_ns);
        FUZZ_CHECK(r.n <= g_s.max_needs);
        bf_shm_store_words(&g_s.rows[0], rows, (size_t)r.n * sizeof *rows);
        struct bf_rollup rep;
        bf_rollup_init(&rep);
        FUZZ_CHECK(bf_rollup_repeat(&g_s, 0, r.n, fps, dg.timestamp_ns, &lim, &rep) == 0);
        FUZZ_CHECK(rep.repeated && rep.n == r.n && rep.arrival_ns == r.arrival_ns &&
                   rep.timestamp_clamped == r.timestamp_clamped);
        FUZZ_CHECK(memcmp(rep.rows, rows, r.n * sizeof *rows) == 0);
        FUZZ_CHECK(memcmp(rep.fp_refs, fps, r.n * sizeof *fps) == 0);
        bf_rollup_free(&rep);
        /* rows stay published at 0 for the incremental property */
        uint64_t sel = 1469598103934665603ULL;
        for (size_t i = 0; i < size; i++)
            sel = (sel ^ data[i]) * 1099511628211ULL;
        check_incremental(msg, len, cluster, cref, &lim, &first, rows, fps, sel, knob & 0x80, &r);
    }
    free(rows);
    free(fps);
    bf_rollup_free(&r);
    if (m)
        bigfleet__v1alpha1__cluster_capacity_needs__free_unpacked(m, NULL);
    return 0;
}
