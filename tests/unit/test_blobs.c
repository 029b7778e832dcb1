/*
 * test_blobs.c — interned machine and Need profiles, decode caches,
 * resource vectors over the shared registry, shard_metadata echo encoding.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bigfleet/blobs.h"
#include "bigfleet/v1alpha1/capacity.pb-c.h"

#include "shm_fixture.h"
#include "check_run.h"

static struct bf_blob_cache *g_c;

static void setup(void)
{
    shm_fixture_create("blobs", NULL, 1);
    g_c = bf_blob_cache_new();
}

static void teardown(void)
{
    bf_blob_cache_free(g_c);
    shm_fixture_remove();
}

START_TEST(equal_machine_shapes_share_one_ref_regardless_of_order)
{
    struct bf_kv res[] = {{"memory", "128Gi"}, {"cpu", "32"}};
    struct bf_kv res2[] = {{"cpu", "32"}, {"memory", "137438953472"}};
    struct bf_kv lab[] = {{"gpu-model", "G2"}, {"topology.bigfleet/rack", "a-rack-1"}};
    struct bf_kv lab2[] = {{"topology.bigfleet/rack", "a-rack-1"}, {"gpu-model", "G2"}};
    struct bf_mprofile_input a = {
        "n2-standard-32", "zone-a", BF_CT_ON_DEMAND, 2, res, 2, lab, 0, NULL};
    struct bf_mprofile_input b = {
        "n2-standard-32", "zone-a", BF_CT_ON_DEMAND, 2, res, 2, lab2, 0, NULL};
    uint32_t ra, rb, rc;
    char err[128];
    ck_assert_int_eq(bf_mprofile_intern(&g_s, &a, &ra, err, sizeof err), 0);
    ck_assert_int_eq(bf_mprofile_intern(&g_s, &b, &rb, err, sizeof err), 0);
    ck_assert_uint_eq(ra, rb);
    /* same quantity, different spelling: a different blob but the same vector */
    b.resources = res2;
    ck_assert_int_eq(bf_mprofile_intern(&g_s, &b, &rc, err, sizeof err), 0);
    const struct bf_mprofile *pa = bf_mprofile_get(g_c, &g_s, ra);
    const struct bf_mprofile *pc = bf_mprofile_get(g_c, &g_s, rc);
    ck_assert_ptr_nonnull(pa);
    ck_assert(bf_vec_eq(&pa->effective, &pc->effective));
    ck_assert_ptr_eq(bf_mprofile_get(g_c, &g_s, ra), pa); /* cached */
    int cpu = bf_dim_lookup(&g_s, "cpu");
    ck_assert_int_ge(cpu, 0);
    ck_assert_int_eq(pa->effective.v[cpu], 32000);
    ck_assert_str_eq(pa->instance_type, "n2-standard-32");
    ck_assert_int_eq(pa->capacity_type, BF_CT_ON_DEMAND);
}
END_TEST

START_TEST(attribute_lookup_prefers_type_and_zone_fields_then_labels)
{
    struct bf_kv lab[] = {{BF_LABEL_INSTANCE_TYPE, "label-type"}, {"empty", ""}, {"k", "v"}};
    struct bf_kv alloc[] = {{"nvidia.com/gpu", "8"}};
    struct bf_mprofile_input in = {
        "a3-highgpu-8g", "", BF_CT_BARE_METAL, 0, NULL, 3, lab, 1, alloc};
    uint32_t r;
    ck_assert_int_eq(bf_mprofile_intern(&g_s, &in, &r, NULL, 0), 0);
    const struct bf_mprofile *p = bf_mprofile_get(g_c, &g_s, r);
    ck_assert_str_eq(bf_mprofile_attr(p, BF_LABEL_INSTANCE_TYPE), "a3-highgpu-8g");
    ck_assert_ptr_null(bf_mprofile_attr(p, BF_LABEL_ZONE)); /* empty zone, no label */
    ck_assert_str_eq(bf_mprofile_attr(p, "empty"), "");     /* present with an empty value */
    ck_assert_str_eq(bf_mprofile_attr(p, "k"), "v");
    ck_assert_ptr_null(bf_mprofile_attr(p, "missing"));
    int gpu = bf_dim_lookup(&g_s, "nvidia.com/gpu");
    ck_assert_int_eq(p->effective.v[gpu], 8000); /* allocatable wins over (empty) resources */
}
END_TEST

START_TEST(bad_quantities_and_too_many_dimensions_are_rejected)
{
    struct bf_kv bad[] = {{"cpu", "lots"}};
    struct bf_mprofile_input in = {"t", "z", 0, 1, bad, 0, NULL, 0, NULL};
    uint32_t r;
    char err[128];
    ck_assert_int_eq(bf_mprofile_intern(&g_s, &in, &r, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "lots"));
    struct bf_kv many[BF_MAX_DIMS + 1];
    char names[BF_MAX_DIMS + 1][16];
    for (int i = 0; i <= BF_MAX_DIMS; i++) {
        snprintf(names[i], sizeof names[i], "res-%d", i);
        many[i] = (struct bf_kv){names[i], "1"};
    }
    bf_vec v;
    ck_assert_int_eq(bf_resources_to_vec(&g_s, BF_MAX_DIMS + 1, many, &v, err, sizeof err),
                     -ENOSPC);
}
END_TEST

static Bigfleet__V1alpha1__CapacityNeed *need_with(int op, int ipb)
{
    static Bigfleet__V1alpha1__CapacityNeed n;
    static Bigfleet__V1alpha1__NodeSelectorRequirement r1, r2;
    static Bigfleet__V1alpha1__NodeSelectorRequirement *rs[2];
    static char *v1[] = {"G2", "G1"};
    bigfleet__v1alpha1__capacity_need__init(&n);
    bigfleet__v1alpha1__node_selector_requirement__init(&r1);
    bigfleet__v1alpha1__node_selector_requirement__init(&r2);
    r1.key = "topology.bigfleet/rack";
    r1.operator_ = (Bigfleet__V1alpha1__NodeSelectorRequirement__Operator)op;
    r2.key = "gpu-model";
    r2.operator_ = BIGFLEET__V1ALPHA1__NODE_SELECTOR_REQUIREMENT__OPERATOR__OPERATOR_IN;
    r2.n_values = 2;
    r2.values = v1;
    rs[0] = &r1;
    rs[1] = &r2;
    n.n_requirements = 2;
    n.requirements = rs;
    n.priority = 1000;
    n.interruption_penalty_bucket = (Bigfleet__V1alpha1__PenaltyBucket)ipb;
    n.reclamation_penalty_bucket = BIGFLEET__V1ALPHA1__PENALTY_BUCKET__PENALTY_BUCKET_PINNED;
    return &n;
}

START_TEST(need_profile_is_canonical_with_its_fingerprint)
{
    uint32_t ref, fref;
    char err[128];
    ck_assert_int_eq(
        bf_nprofile_intern_need(&g_s, need_with(5, 16), 0, &ref, &fref, err, sizeof err), 0);
    const struct bf_nprofile *p = bf_nprofile_get(g_c, &g_s, ref);
    ck_assert_ptr_nonnull(p);
    ck_assert_str_eq(p->fingerprint,
                     "p=1000|ipb=16|rpb=27|reqs=gpu-model:1:G1,G2;topology.bigfleet/rack:5:;|spr=");
    ck_assert_uint_eq(p->fingerprint_ref, fref);
    ck_assert_int_eq(bf_profile_same_index(&p->p), 1);
    uint32_t ref2;
    ck_assert_int_eq(
        bf_nprofile_intern_need(&g_s, need_with(5, 16), 0, &ref2, NULL, err, sizeof err), 0);
    ck_assert_uint_eq(ref, ref2);
}
END_TEST

START_TEST(need_profile_rejects_unknown_operator_and_bucket)
{
    uint32_t ref;
    char err[128];
    ck_assert_int_eq(
        bf_nprofile_intern_need(&g_s, need_with(9, 16), 0, &ref, NULL, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "operator 9"));
    ck_assert_int_eq(
        bf_nprofile_intern_need(&g_s, need_with(1, 28), 0, &ref, NULL, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "interruption_penalty_bucket 28"));
}
END_TEST

START_TEST(shard_metadata_round_trips_with_go_spellings_and_nul_group)
{
    const char grp[] = "topology.bigfleet/rack\0gang-7";
    const char *fp = "p=900000|ipb=23|rpb=27|reqs=|spr=";
    struct bf_assignment a = {900000, 23, 27, fp, (uint32_t)strlen(fp), grp, sizeof grp - 1};
    struct bf_md_encoded enc;
    bf_shard_metadata_encode(&a, &enc);
    ck_assert_int_eq(memcmp(enc.e[0].value, "900000", enc.e[0].len), 0);
    ck_assert_int_eq(enc.e[1].len, strlen("1.048576e+06"));
    ck_assert_int_eq(memcmp(enc.e[1].value, "1.048576e+06", enc.e[1].len), 0);
    ck_assert_int_eq(memcmp(enc.e[2].value, "+Inf", enc.e[2].len), 0);
    struct bf_assignment b;
    memset(&b, 0, sizeof b);
    uint32_t found;
    ck_assert_int_eq(bf_shard_metadata_decode(enc.e, 5, &b, &found), 0);
    ck_assert_uint_eq(found, 0x1f);
    ck_assert_int_eq(b.priority, 900000);
    ck_assert_uint_eq(b.ipb, 23);
    ck_assert_uint_eq(b.rpb, 27);
    ck_assert_uint_eq(b.group_len, sizeof grp - 1);
    ck_assert_int_eq(memcmp(b.group, grp, b.group_len), 0);
}
END_TEST

/* docs/fidelity.md item 4: every value a shard stamps is a bucket bound and
 * round-trips exactly (unspecified is read back as the zero bucket). */
START_TEST(shard_metadata_round_trips_every_penalty_bucket)
{
    for (int b = 0; b <= BF_BUCKET_MAX; b++) {
        struct bf_assignment in = {.priority = 7, .ipb = (uint8_t)b, .rpb = (uint8_t)b};
        struct bf_md_encoded enc;
        bf_shard_metadata_encode(&in, &enc);
        struct bf_assignment out = {0};
        uint32_t found;
        ck_assert_int_eq(bf_shard_metadata_decode(enc.e, 3, &out, &found), 0);
        ck_assert_uint_eq(out.ipb, b == BF_BUCKET_UNSPECIFIED ? BF_BUCKET_ZERO : (uint8_t)b);
        ck_assert_uint_eq(out.rpb, b == BF_BUCKET_UNSPECIFIED ? BF_BUCKET_ZERO : (uint8_t)b);
    }
}
END_TEST

START_TEST(shard_metadata_decode_skips_malformed_values_and_unknown_keys)
{
    struct bf_md_entry e[] = {
        {BF_MD_PRIORITY, (const uint8_t *)"12x", 3},
        {BF_MD_INTERRUPTION, (const uint8_t *)"8192", 4},
        {BF_MD_RECLAMATION, (const uint8_t *)"not-a-number", 12},
        {"bigfleet.lucy.sh/future-key", (const uint8_t *)"whatever", 8},
    };
    struct bf_assignment b = {.priority = 77, .rpb = 5};
    uint32_t found;
    ck_assert_int_eq(bf_shard_metadata_decode(e, 4, &b, &found), 2);
    ck_assert_uint_eq(found, BF_MD_HAS_IPD);
    ck_assert_int_eq(b.priority, 77); /* malformed: left alone */
    ck_assert_uint_eq(b.ipb, 16);
    ck_assert_uint_eq(b.rpb, 5);
}
END_TEST

/* docs/fidelity.md item 4: the engine keeps buckets, so a dollar echo is
 * exact only for the 28 bucket bounds (what every shard writes); another
 * value (a provider breaking store-and-echo) is applied as the bucket that
 * covers it, and counted so the difference from Go (which orders victims by
 * the raw dollars) is visible */
START_TEST(shard_metadata_off_bucket_dollars_apply_the_covering_bucket_and_count)
{
    for (uint8_t b = 0; b <= 27; b++) {
        struct bf_assignment in = {.priority = 5, .ipb = b, .rpb = b}, out = {0};
        struct bf_md_encoded enc;
        bf_shard_metadata_encode(&in, &enc);
        uint32_t found;
        ck_assert_int_eq(bf_shard_metadata_decode(enc.e, 5, &out, &found), 0);
        ck_assert_uint_eq(out.ipb, b == 0 ? 1 : b); /* Unspecified and Zero both write "0" */
        ck_assert_uint_eq(out.rpb, b == 0 ? 1 : b);
    }
    struct bf_md_entry e[] = {
        {BF_MD_INTERRUPTION, (const uint8_t *)"3", 1},
        {BF_MD_RECLAMATION, (const uint8_t *)"-2", 2},
    };
    struct bf_assignment a = {0};
    uint32_t found;
    ck_assert_int_eq(bf_shard_metadata_decode(e, 2, &a, &found), 2);
    ck_assert_uint_eq(found, BF_MD_HAS_IPD | BF_MD_HAS_RPD);
    ck_assert_uint_eq(a.ipb, 5); /* $3 -> the $4 bucket */
    ck_assert_uint_eq(a.rpb, 1); /* <= 0 -> Zero */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("blobs");
    TCase *tc = tcase_create("blobs");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, equal_machine_shapes_share_one_ref_regardless_of_order);
    tcase_add_test(tc, attribute_lookup_prefers_type_and_zone_fields_then_labels);
    tcase_add_test(tc, bad_quantities_and_too_many_dimensions_are_rejected);
    tcase_add_test(tc, need_profile_is_canonical_with_its_fingerprint);
    tcase_add_test(tc, need_profile_rejects_unknown_operator_and_bucket);
    tcase_add_test(tc, shard_metadata_round_trips_with_go_spellings_and_nul_group);
    tcase_add_test(tc, shard_metadata_off_bucket_dollars_apply_the_covering_bucket_and_count);
    tcase_add_test(tc, shard_metadata_decode_skips_malformed_values_and_unknown_keys);
    tcase_add_test(tc, shard_metadata_round_trips_every_penalty_bucket);
    suite_add_tcase(s, tc);
    return check_run(s);
}
