/*
 * fuzz_blobs.c — the blob codecs of src/shm/blobs.c over a scratch shared
 * segment (fresh whenever an input interned something). Input: a selector
 * byte (low two bits), then:
 *   0  Machine bytes (protobuf-c): its instance type, zone, capacity type,
 *      resources, labels and allocatable through bf_mprofile_intern;
 *   1  CapacityNeed bytes (protobuf-c) through bf_nprofile_intern_need;
 *   2  Machine bytes: its shard_metadata through bf_shard_metadata_decode,
 *      and the same bytes through the provider's own path
 *      (bf_prov_machine_decode + bf_prov_machine_assignment);
 *   3  raw bytes interned as a blob and decoded as both profile kinds (a
 *      corrupted segment, as bigfleet-inspect may read one).
 *
 * Properties:
 *   - results are 0 or the documented errors;
 *   - round trip: an interned profile decodes (bf_*profile_get) to what went
 *     in (strings, capacity type, priority, buckets; labels and resources
 *     sorted by key, the last of duplicate keys kept, vectors equal to
 *     bf_resources_to_vec of the input); re-interning the decoded profile
 *     gives the same ref (the canonical form is a fixed point) and, for Need
 *     profiles, the same fingerprint ref, whose string is the profile's
 *     fingerprint recomputed;
 *   - shard_metadata: what decodes re-encodes (bf_shard_metadata_encode)
 *     and decodes to the same assignment with all five keys (buckets by
 *     their dollars: UNSPECIFIED comes back as ZERO, both $0); a decoded
 *     bucket's upper bound maps back to the bucket;
 *   - a decodable raw blob re-interns to a canonical ref that is a fixed
 *     point.
 */
#include "bigfleet/blobs.h"
#include "bigfleet/provider.h"
#include "bigfleet/v1alpha1/capacity.pb-c.h"
#include "bigfleet/v1alpha1/provider.pb-c.h"
#include "fuzz_shm.h"

static struct bf_shm g_s;
static uint64_t g_base_used;
static bool g_have;

static void fresh(void)
{
    if (g_have) {
        if (atomic_load(&g_s.inv->strtab.arena_used) == g_base_used &&
            atomic_load(&g_s.inv->n_dims) == 0)
            return;
        fuzz_shm_destroy(&g_s);
    }
    struct bf_shm_caps caps = {.max_machines = 16, .max_needs = 16, .max_clusters = 4};
    fuzz_shm_create(&g_s, "fuzz-blobs", &caps);
    g_base_used = atomic_load(&g_s.inv->strtab.arena_used);
    g_have = true;
}

static bool documented(int rc)
{
    return rc == 0 || rc == -EINVAL || rc == -ENOSPC || rc == -ERANGE || rc == -ENOMEM;
}

/* ------------------------------------------------------------ machine profiles */

struct kvs {
    struct bf_kv *kv;
    uint32_t n;
};

static struct kvs kvs_of_resources(const Bigfleet__V1alpha1__Resources *r)
{
    struct kvs o = {calloc(r ? r->n_resources + 1 : 1, sizeof(struct bf_kv)), 0};
    FUZZ_CHECK(o.kv);
    for (size_t i = 0; r && i < r->n_resources; i++)
        o.kv[o.n++] = (struct bf_kv){r->resources[i]->key, r->resources[i]->value};
    return o;
}

/* The value the canonical form keeps for key (the last one), or NULL. */
static const char *last_value(const struct bf_kv *kv, uint32_t n, const char *key)
{
    const char *v = NULL;
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(kv[i].key ? kv[i].key : "", key) == 0)
            v = kv[i].value ? kv[i].value : "";
    return v;
}

/* decoded = canonical(input): sorted, unique keys, each with the input's last value */
static void same_map(const struct bf_kv *in, uint32_t nin, const struct bf_kv *out, uint32_t nout)
{
    for (uint32_t i = 0; i < nout; i++) {
        if (i)
            FUZZ_CHECK(strcmp(out[i - 1].key, out[i].key) < 0);
        const char *v = last_value(in, nin, out[i].key);
        FUZZ_CHECK(v && strcmp(v, out[i].value) == 0);
    }
    for (uint32_t i = 0; i < nin; i++) {
        const char *k = in[i].key ? in[i].key : "";
        bool found = false;
        for (uint32_t j = 0; j < nout && !found; j++)
            found = strcmp(out[j].key, k) == 0;
        FUZZ_CHECK(found);
    }
}

static void check_mprofile_fixed_point(struct bf_blob_cache *c, const struct bf_mprofile *p)
{
    struct bf_mprofile_input in = {.instance_type = p->instance_type,
                                   .zone = p->zone,
                                   .capacity_type = p->capacity_type,
                                   .n_resources = p->n_resources,
                                   .resources = p->resources,
                                   .n_labels = p->n_labels,
                                   .labels = p->labels,
                                   .n_allocatable = p->n_allocatable,
                                   .allocatable = p->allocatable};
    uint32_t ref2;
    char err[256];
    int rc = bf_mprofile_intern(&g_s, &in, &ref2, err, sizeof err);
    FUZZ_CHECK(documented(rc));
    if (rc)
        return; /* a raw blob may carry what intern refuses (bad quantities) */
    const struct bf_mprofile *q = bf_mprofile_get(c, &g_s, ref2);
    FUZZ_CHECK(q);
    in = (struct bf_mprofile_input){.instance_type = q->instance_type,
                                    .zone = q->zone,
                                    .capacity_type = q->capacity_type,
                                    .n_resources = q->n_resources,
                                    .resources = q->resources,
                                    .n_labels = q->n_labels,
                                    .labels = q->labels,
                                    .n_allocatable = q->n_allocatable,
                                    .allocatable = q->allocatable};
    uint32_t ref3;
    FUZZ_CHECK(bf_mprofile_intern(&g_s, &in, &ref3, err, sizeof err) == 0);
    FUZZ_CHECK(ref3 == ref2);
}

static void machine_profile(const uint8_t *data, size_t size)
{
    Bigfleet__V1alpha1__Machine *m = bigfleet__v1alpha1__machine__unpack(NULL, size, data);
    if (!m)
        return;
    struct kvs res = kvs_of_resources(m->resources), alloc = kvs_of_resources(m->allocatable);
    struct kvs lab = {calloc(m->n_labels + 1, sizeof(struct bf_kv)), 0};
    FUZZ_CHECK(lab.kv);
    for (size_t i = 0; i < m->n_labels; i++)
        lab.kv[lab.n++] = (struct bf_kv){m->labels[i]->key, m->labels[i]->value};
    struct bf_mprofile_input in = {.instance_type = m->instance_type,
                                   .zone = m->zone,
                                   .capacity_type = m->capacity_type,
                                   .n_resources = res.n,
                                   .resources = res.kv,
                                   .n_labels = lab.n,
                                   .labels = lab.kv,
                                   .n_allocatable = alloc.n,
                                   .allocatable = alloc.kv};
    uint32_t ref;
    char err[256] = "";
    int rc = bf_mprofile_intern(&g_s, &in, &ref, err, sizeof err);
    FUZZ_CHECK(documented(rc));
    if (rc) {
        FUZZ_CHECK(err[0] != 0 || rc == -ENOMEM);
    } else {
        struct bf_blob_cache *c = bf_blob_cache_new();
        FUZZ_CHECK(c);
        const struct bf_mprofile *p = bf_mprofile_get(c, &g_s, ref);
        FUZZ_CHECK(p && p->ref == ref);
        FUZZ_CHECK(strcmp(p->instance_type, m->instance_type) == 0 &&
                   strcmp(p->zone, m->zone) == 0 && p->capacity_type == (int)m->capacity_type);
        same_map(res.kv, res.n, p->resources, p->n_resources);
        same_map(lab.kv, lab.n, p->labels, p->n_labels);
        same_map(alloc.kv, alloc.n, p->allocatable, p->n_allocatable);
        bf_vec rv, av;
        FUZZ_CHECK(bf_resources_to_vec(&g_s, res.n, res.kv, &rv, err, sizeof err) == 0);
        FUZZ_CHECK(bf_resources_to_vec(&g_s, alloc.n, alloc.kv, &av, err, sizeof err) == 0);
        FUZZ_CHECK(memcmp(&rv, &p->resources_vec, sizeof rv) == 0);
        FUZZ_CHECK(memcmp(&av, &p->allocatable_vec, sizeof av) == 0);
        FUZZ_CHECK(memcmp(p->n_allocatable ? &av : &rv, &p->effective, sizeof rv) == 0);
        /* the attribute lookup agrees with the labels */
        for (uint32_t i = 0; i < p->n_labels; i++) {
            const char *v = bf_mprofile_attr(p, p->labels[i].key);
            FUZZ_CHECK(v != NULL);
        }
        uint32_t ref2;
        FUZZ_CHECK(bf_mprofile_intern(&g_s, &in, &ref2, err, sizeof err) == 0 && ref2 == ref);
        check_mprofile_fixed_point(c, p);
        bf_blob_cache_free(c);
    }
    free(res.kv);
    free(alloc.kv);
    free(lab.kv);
    bigfleet__v1alpha1__machine__free_unpacked(m, NULL);
}

/* ------------------------------------------------------------ need profiles */

/* Re-interns a decoded Need profile from writable copies: the same ref. */
static void check_nprofile_fixed_point(struct bf_blob_cache *c, const struct bf_nprofile *p,
                                       bool must)
{
    struct bf_need_profile q = p->p;
    struct bf_requirement *reqs = calloc(q.n_reqs + 1, sizeof *reqs);
    struct bf_spread *spr = calloc(q.n_spread + 1, sizeof *spr);
    size_t nv = 0;
    for (uint32_t i = 0; i < q.n_reqs; i++)
        nv += q.reqs[i].n_values;
    const char **vals = calloc(nv + 1, sizeof *vals);
    FUZZ_CHECK(reqs && spr && vals);
    nv = 0;
    for (uint32_t i = 0; i < q.n_reqs; i++) {
        reqs[i] = q.reqs[i];
        reqs[i].values = vals + nv;
        for (uint32_t j = 0; j < q.reqs[i].n_values; j++)
            vals[nv++] = q.reqs[i].values[j];
    }
    memcpy(spr, q.spread, q.n_spread * sizeof *spr);
    q.reqs = reqs;
    q.spread = spr;
    uint32_t ref2, fref2;
    int rc = bf_nprofile_intern(&g_s, &q, &ref2, &fref2);
    FUZZ_CHECK(rc == 0 || rc == -ENOSPC || rc == -ENOMEM);
    if (rc == 0) {
        const struct bf_nprofile *r = bf_nprofile_get(c, &g_s, ref2);
        FUZZ_CHECK(r && r->fingerprint_ref == fref2);
        char *fp = bf_profile_fingerprint_dup(&r->p);
        FUZZ_CHECK(fp && strcmp(fp, r->fingerprint) == 0);
        free(fp);
        if (must)
            FUZZ_CHECK(ref2 == p->ref && fref2 == p->fingerprint_ref);
        else if (ref2 != p->ref) /* from a raw blob: canonical now, a fixed point from here */
            check_nprofile_fixed_point(c, r, true);
    }
    free(reqs);
    free(spr);
    free(vals);
}

static void need_profile(const uint8_t *data, size_t size)
{
    Bigfleet__V1alpha1__CapacityNeed *n =
        bigfleet__v1alpha1__capacity_need__unpack(NULL, size, data);
    if (!n)
        return;
    uint32_t ref, fref;
    char err[256] = "";
    int rc = bf_nprofile_intern_need(&g_s, n, 0, &ref, &fref, err, sizeof err);
    FUZZ_CHECK(documented(rc));
    if (rc == 0) {
        struct bf_blob_cache *c = bf_blob_cache_new();
        FUZZ_CHECK(c);
        const struct bf_nprofile *p = bf_nprofile_get(c, &g_s, ref);
        FUZZ_CHECK(p && p->ref == ref && p->fingerprint_ref == fref);
        FUZZ_CHECK(p->p.priority == n->priority &&
                   p->p.ipb == (int)n->interruption_penalty_bucket &&
                   p->p.rpb == (int)n->reclamation_penalty_bucket);
        uint32_t fl;
        const char *fs = bf_str(&g_s, fref, &fl);
        FUZZ_CHECK(fs && fl == strlen(p->fingerprint) && memcmp(fs, p->fingerprint, fl) == 0);
        check_nprofile_fixed_point(c, p, true);
        bf_blob_cache_free(c);
    } else {
        FUZZ_CHECK(err[0] != 0);
    }
    bigfleet__v1alpha1__capacity_need__free_unpacked(n, NULL);
}

/* ------------------------------------------------------------ shard_metadata */

static void shard_metadata(const uint8_t *data, size_t size)
{
    Bigfleet__V1alpha1__Machine *m = bigfleet__v1alpha1__machine__unpack(NULL, size, data);
    if (m) {
        struct bf_md_entry *e = calloc(m->n_shard_metadata + 1, sizeof *e);
        FUZZ_CHECK(e);
        for (size_t i = 0; i < m->n_shard_metadata; i++)
            e[i] = (struct bf_md_entry){m->shard_metadata[i]->key, m->shard_metadata[i]->value.data,
                                        m->shard_metadata[i]->value.len};
        struct bf_assignment a = {0}, b = {0};
        uint32_t found, found2;
        int bad = bf_shard_metadata_decode(e, m->n_shard_metadata, &a, &found);
        FUZZ_CHECK(bad >= 0 && (size_t)bad <= m->n_shard_metadata);
        FUZZ_CHECK(a.ipb <= BF_BUCKET_MAX && a.rpb <= BF_BUCKET_MAX);
        if (found & BF_MD_HAS_IPD)
            FUZZ_CHECK(bf_bucket_for_dollars(bf_bucket_upper_bound(a.ipb)) == a.ipb);
        struct bf_md_encoded enc;
        bf_shard_metadata_encode(&a, &enc);
        FUZZ_CHECK(bf_shard_metadata_decode(enc.e, 5, &b, &found2) == 0);
        FUZZ_CHECK(found2 == (BF_MD_HAS_PRIORITY | BF_MD_HAS_IPD | BF_MD_HAS_RPD |
                              BF_MD_HAS_FINGERPRINT | BF_MD_HAS_GROUP));
        /* buckets compare by their dollars: UNSPECIFIED (0) and ZERO (1) are both
         * $0, and $0 decodes to ZERO (BucketForDollars) */
        FUZZ_CHECK(b.priority == a.priority);
        FUZZ_CHECK(bf_bucket_upper_bound(b.ipb) == bf_bucket_upper_bound(a.ipb) &&
                   bf_bucket_upper_bound(b.rpb) == bf_bucket_upper_bound(a.rpb));
        FUZZ_CHECK((b.ipb == a.ipb || a.ipb == 0) && (b.rpb == a.rpb || a.rpb == 0));
        FUZZ_CHECK(b.fingerprint_len == a.fingerprint_len && b.group_len == a.group_len);
        if (a.fingerprint_len)
            FUZZ_CHECK(memcmp(b.fingerprint, a.fingerprint, a.fingerprint_len) == 0);
        if (a.group_len)
            FUZZ_CHECK(memcmp(b.group, a.group, a.group_len) == 0);
        free(e);
        bigfleet__v1alpha1__machine__free_unpacked(m, NULL);
    }
    /* the provider's path: wire view, then the assignment into a record */
    struct bf_prov_machine pm;
    if (bf_prov_machine_decode(data, size, &pm) == 0) {
        struct bf_machine_rec rec;
        memset(&rec, 0, sizeof rec);
        int rc = bf_prov_machine_assignment(&g_s, &pm, &rec);
        FUZZ_CHECK(rc >= 0 || rc == -ENOSPC || rc == -E2BIG || rc == -ETIMEDOUT);
        FUZZ_CHECK(rec.ipb <= BF_BUCKET_MAX && rec.rpb <= BF_BUCKET_MAX);
        if (rc >= 0 && rec.fingerprint)
            FUZZ_CHECK(bf_str(&g_s, rec.fingerprint, NULL) != NULL);
        if (rc >= 0 && rec.group)
            FUZZ_CHECK(bf_str(&g_s, rec.group, NULL) != NULL);
    }
}

/* ------------------------------------------------------------ raw blobs */

static void raw_blob(const uint8_t *data, size_t size)
{
    uint32_t ref;
    if (size == 0 || bf_str_intern(&g_s, data, (uint32_t)size, &ref) != 0)
        return;
    struct bf_blob_cache *c = bf_blob_cache_new();
    FUZZ_CHECK(c);
    const struct bf_mprofile *mp = bf_mprofile_get(c, &g_s, ref);
    if (mp) {
        FUZZ_CHECK(mp->ref == ref && mp->instance_type && mp->zone);
        check_mprofile_fixed_point(c, mp);
    }
    const struct bf_nprofile *np = bf_nprofile_get(c, &g_s, ref);
    if (np) {
        FUZZ_CHECK(np->ref == ref && np->fingerprint);
        check_nprofile_fixed_point(c, np, false);
    }
    bf_blob_cache_free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    fresh();
    switch (data[0] & 3) {
    case 0:
        machine_profile(data + 1, size - 1);
        break;
    case 1:
        need_profile(data + 1, size - 1);
        break;
    case 2:
        shard_metadata(data + 1, size - 1);
        break;
    default:
        raw_blob(data + 1, size - 1);
        break;
    }
    return 0;
}
