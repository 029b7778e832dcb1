/*
 * test_session.c — the session's pure parts: wire routing of
 * OperatorMessages, rollup conversion (profiles incl. Same/MinUnit/Group,
 * duplicates merged, bad input rejected), rail 2, the need-row arena
 * allocator, the coalescing outbox.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bigfleet/blobs.h"
#include "bigfleet/arena.h"
#include "bigfleet/opmsg.h"
#include "bigfleet/outbox.h"
#include "bigfleet/rollup.h"
#include "bigfleet/util.h"
#include "bigfleet/v1alpha1/capacity.pb-c.h"
#include "bigfleet/v1alpha1/shard.pb-c.h"

#include "shm_fixture.h"
#include "grpc/reflection/v1/reflection.pb-c.h"
#include "session/session_internal.h"
#include "check_run.h"

/* ------------------------------------------------------------ fixtures */

static struct bf_blob_cache *g_c;

static void setup(void)
{
    shm_fixture_create("session", NULL, 1);
    g_c = bf_blob_cache_new();
}

static void teardown(void)
{
    bf_blob_cache_free(g_c);
    shm_fixture_remove();
}

/* A builder for CapacityNeeds. */
struct nb {
    Bigfleet__V1alpha1__CapacityNeed n;
    Bigfleet__V1alpha1__NodeSelectorRequirement req[4], *reqp[4];
    char *vals[4][4];
    Bigfleet__V1alpha1__CapacityNeed__AggregateResourcesEntry agg[4], *aggp[4];
    Bigfleet__V1alpha1__CapacityNeed__MinUnitEntry mu[4], *mup[4];
    Bigfleet__V1alpha1__TopologySpread spr[2], *sprp[2];
};

static void nb_init(struct nb *b, int prio)
{
    memset(b, 0, sizeof *b);
    bigfleet__v1alpha1__capacity_need__init(&b->n);
    b->n.priority = prio;
    b->n.requirements = b->reqp;
    b->n.aggregate_resources = b->aggp;
    b->n.min_unit = b->mup;
    b->n.spread = b->sprp;
}

static void nb_req(struct nb *b, const char *key, int op, const char *v1, const char *v2)
{
    size_t i = b->n.n_requirements++;
    bigfleet__v1alpha1__node_selector_requirement__init(&b->req[i]);
    b->req[i].key = (char *)key;
    b->req[i].operator_ = op;
    b->req[i].values = b->vals[i];
    if (v1)
        b->vals[i][b->req[i].n_values++] = (char *)v1;
    if (v2)
        b->vals[i][b->req[i].n_values++] = (char *)v2;
    b->reqp[i] = &b->req[i];
}

static void nb_agg(struct nb *b, const char *k, const char *v)
{
    size_t i = b->n.n_aggregate_resources++;
    bigfleet__v1alpha1__capacity_need__aggregate_resources_entry__init(&b->agg[i]);
    b->agg[i].key = (char *)k;
    b->agg[i].value = (char *)v;
    b->aggp[i] = &b->agg[i];
}

static void nb_mu(struct nb *b, const char *k, const char *v)
{
    size_t i = b->n.n_min_unit++;
    bigfleet__v1alpha1__capacity_need__min_unit_entry__init(&b->mu[i]);
    b->mu[i].key = (char *)k;
    b->mu[i].value = (char *)v;
    b->mup[i] = &b->mu[i];
}

/* Packs a rollup of the given needs into a malloc'd buffer. */
static uint8_t *pack_rollup(const char *cluster, int64_t ts, struct nb *needs, size_t n,
                            size_t *len)
{
    Bigfleet__V1alpha1__ClusterCapacityNeeds m = BIGFLEET__V1ALPHA1__CLUSTER_CAPACITY_NEEDS__INIT;
    Bigfleet__V1alpha1__CapacityNeed **np = calloc(n + 1, sizeof *np);
    for (size_t i = 0; i < n; i++)
        np[i] = &needs[i].n;
    m.cluster_id = (char *)cluster;
    m.timestamp_unix_nanos = ts;
    m.n_needs = n;
    m.needs = np;
    *len = bigfleet__v1alpha1__cluster_capacity_needs__get_packed_size(&m);
    uint8_t *buf = malloc(*len + 1);
    bigfleet__v1alpha1__cluster_capacity_needs__pack(&m, buf);
    free(np);
    return buf;
}

static int dim(const char *name)
{
    int d = bf_dim_lookup(&g_s, name);
    ck_assert_int_ge(d, 0);
    return d;
}

/* The ingest thread's use of bf_rollup_convert without quotas: names the
 * registry lacks are registered after a clean pass, then converted again. */
static int conv(struct bf_shm *s, const uint8_t *buf, size_t len, const char *cid, uint32_t cref,
                uint32_t max_rows, uint64_t reserve, struct bf_rollup *r, char *err, size_t errlen)
{
    struct bf_rollup_limits lim = {.max_rows = max_rows,
                                   .strtab_reserve = reserve,
                                   .strtab_quota = UINT64_MAX,
                                   .max_priority = INT32_MAX};
    int rc = bf_rollup_convert(s, buf, len, cid, cref, &lim, r, err, errlen);
    if (rc == 0 && r->n_new_dims) {
        for (uint32_t i = 0; i < r->n_new_dims; i++)
            ck_assert_int_ge(bf_dim_intern(s, r->new_dims[i]), 0);
        rc = bf_rollup_convert(s, buf, len, cid, cref, &lim, r, err, errlen);
        ck_assert_uint_eq(r->n_new_dims, 0);
    }
    return rc;
}

/* ------------------------------------------------------------ wire */

START_TEST(classify_routes_on_the_last_oneof_member_like_protobuf)
{
    /* hello, then rollup twice, then an unknown field 9 */
    uint8_t msg[] = {0x0a, 0x03, 0x0a, 0x01, 'a', /* 1: hello{cluster_id "a"} */
                     0x12, 0x02, 0x10, 0x05,      /* 2: rollup{timestamp 5} */
                     0x12, 0x02, 0x10, 0x07,      /* 2: rollup{timestamp 7} */
                     0x48, 0x01};                 /* 9: varint, unknown */
    int payload;
    const uint8_t *sub;
    size_t sublen;
    uint32_t parts;
    ck_assert_int_eq(bf_opmsg_classify(msg, sizeof msg, &payload, &sub, &sublen, &parts), 0);
    ck_assert_int_eq(payload, 2);
    ck_assert_uint_eq(parts, 2);
    ck_assert_uint_eq(sublen, 2);
    ck_assert_int_eq(sub[1], 7);
    uint8_t *cat;
    size_t catlen;
    ck_assert_int_eq(bf_opmsg_member_bytes(msg, sizeof msg, 2, 1, 4, &cat, &catlen), 0);
    ck_assert_uint_eq(catlen, 4); /* both occurrences merged (concatenated) */
    ck_assert_int_eq(cat[1], 5);
    ck_assert_int_eq(cat[3], 7);
    free(cat);
    /* the same bytes decode the same way with protobuf-c */
    Bigfleet__V1alpha1__OperatorMessage *om =
        bigfleet__v1alpha1__operator_message__unpack(NULL, sizeof msg, msg);
    ck_assert_ptr_nonnull(om);
    ck_assert_int_eq(om->payload_case, BIGFLEET__V1ALPHA1__OPERATOR_MESSAGE__PAYLOAD_ROLLUP);
    ck_assert_int_eq(om->rollup->timestamp_unix_nanos, 7);
    bigfleet__v1alpha1__operator_message__free_unpacked(om, NULL);
}
END_TEST

START_TEST(classify_rejects_truncated_and_wrong_wire_types)
{
    int payload;
    const uint8_t *sub;
    size_t sublen;
    uint32_t parts;
    uint8_t trunc[] = {0x12, 0x05, 0x10};
    ck_assert_int_eq(bf_opmsg_classify(trunc, sizeof trunc, &payload, &sub, &sublen, &parts),
                     -EBADMSG);
    uint8_t wt[] = {0x10, 0x01}; /* field 2 as a varint */
    ck_assert_int_eq(bf_opmsg_classify(wt, sizeof wt, &payload, &sub, &sublen, &parts), -EBADMSG);
    uint8_t group[] = {0x0b, 0x0c}; /* start/end group */
    ck_assert_int_eq(bf_opmsg_classify(group, sizeof group, &payload, &sub, &sublen, &parts),
                     -EBADMSG);
    uint8_t longvar[] = {0x48, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    ck_assert_int_eq(bf_opmsg_classify(longvar, sizeof longvar, &payload, &sub, &sublen, &parts),
                     -EBADMSG);
    uint8_t empty[1];
    ck_assert_int_eq(bf_opmsg_classify(empty, 0, &payload, &sub, &sublen, &parts), 0);
    ck_assert_int_eq(payload, 0);
}
END_TEST

START_TEST(hello_cluster_id_is_read_byte_exact_and_validated)
{
    uint8_t h[] = {0x0a, 0x03, 'a', 0x00, 'b'};
    const uint8_t *id;
    size_t l;
    ck_assert_int_eq(bf_hello_cluster_id(h, sizeof h, &id, &l), 0);
    ck_assert_uint_eq(l, 3);
    ck_assert(!bf_cluster_id_valid(id, l)); /* embedded NUL */
    ck_assert(bf_cluster_id_valid((const uint8_t *)"kwok-cluster-7", 14));
    ck_assert(!bf_cluster_id_valid((const uint8_t *)"a b", 3));
    ck_assert(!bf_cluster_id_valid((const uint8_t *)"", 0));
    char big[300];
    memset(big, 'x', sizeof big);
    ck_assert(!bf_cluster_id_valid((const uint8_t *)big, sizeof big));
    ck_assert(bf_cluster_id_valid((const uint8_t *)big, BF_CLUSTER_ID_MAX));
}
END_TEST

/* ------------------------------------------------------------ rollups */

START_TEST(rollup_converts_profile_same_min_unit_group_and_arrival)
{
    struct nb b[2];
    nb_init(&b[0], 1000);
    nb_req(&b[0], BF_LABEL_INSTANCE_TYPE, 1, "m6i.large", "c6i.4xlarge");
    nb_req(&b[0], "topology.bigfleet/rack", 5, NULL, NULL); /* Same */
    nb_agg(&b[0], "cpu", "16");
    nb_agg(&b[0], "memory", "64Gi");
    nb_mu(&b[0], "cpu", "2");
    b[0].n.interruption_penalty_bucket = 16; /* $8192 */
    b[0].n.reclamation_penalty_bucket = 27;  /* pinned */
    b[0].n.group.data = (uint8_t *)"topology.bigfleet/rack\0app=x";
    b[0].n.group.len = 28;
    nb_init(&b[1], 10);
    nb_agg(&b[1], "cpu", "500m");
    size_t len;
    uint8_t *buf = pack_rollup("c1", 1234567, b, 2, &len);
    uint32_t cref;
    ck_assert_int_eq(bf_str_intern_cstr(&g_s, "c1", &cref), 0);
    struct bf_rollup r;
    bf_rollup_init(&r);
    char err[256] = "";
    ck_assert_int_eq(conv(&g_s, buf, len, "c1", cref, 100, 0, &r, err, sizeof err), 0);
    ck_assert_uint_eq(r.n, 2);
    ck_assert_uint_eq(r.needs_in, 2);
    ck_assert_int_eq(r.rows[0].arrival_ns, 1234567);
    ck_assert_uint_eq(r.rows[0].cluster_ref, cref);
    ck_assert_int_eq(r.rows[0].aggregate[dim("cpu")], 16000);
    ck_assert_int_eq(r.rows[0].aggregate[dim("memory")], 64LL * 1024 * 1024 * 1024 * 1000);
    ck_assert_int_eq(r.rows[0].min_unit[dim("cpu")], 2000);
    ck_assert_int_eq(r.rows[1].aggregate[dim("cpu")], 500);
    ck_assert_uint_eq(r.rows[1].group_ref, 0);
    uint32_t glen;
    const char *g = bf_str(&g_s, r.rows[0].group_ref, &glen);
    ck_assert_uint_eq(glen, 28);
    ck_assert_int_eq(memcmp(g, "topology.bigfleet/rack\0app=x", 28), 0);
    const struct bf_nprofile *p = bf_nprofile_get(g_c, &g_s, r.rows[0].profile_ref);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(p->p.priority, 1000);
    ck_assert_int_eq(p->p.ipb, 16);
    ck_assert_int_eq(p->p.rpb, 27);
    ck_assert_uint_eq(p->fingerprint_ref, r.fp_refs[0]);
    ck_assert_str_eq(p->fingerprint, "p=1000|ipb=16|rpb=27|reqs=node.kubernetes.io/instance-type:1:"
                                     "c6i.4xlarge,m6i.large;topology.bigfleet/rack:5:;|spr=");
    ck_assert_int_eq(bf_profile_same_index(&p->p), 1);
    ck_assert(bf_bucket_upper_bound(p->p.ipb) == 8192.0);
    bf_rollup_free(&r);
    free(buf);
}
END_TEST

/* Needs that differ in one field of the profile key each (priority, either
 * penalty bucket, the second of two adjacent requirements' value or
 * operator, one requirement more) convert to distinct profiles, and an
 * exact copy merges: the key is built from every field, whichever of them
 * the conversion copies together. Then the same again after a rollup in
 * which the reclamation bucket came back to the base's (the reuse path),
 * and a Need whose key was K (one requirement, nothing else) became K plus
 * one requirement: the profile remembered for its position is not taken
 * for a longer key it is a prefix of. */
START_TEST(needs_differing_in_one_profile_key_field_never_share_a_profile)
{
    enum { NV = 11 };
    struct nb b[NV];
    for (int i = 0; i < 9; i++) {
        nb_init(&b[i], 7);
        nb_req(&b[i], "zone", 1, "a", NULL);
        nb_req(&b[i], BF_LABEL_INSTANCE_TYPE, 1, i == 4 ? "m6i.xlarge" : "m6i.large", NULL);
        nb_agg(&b[i], "cpu", "1");
        b[i].n.interruption_penalty_bucket = 5;
        b[i].n.reclamation_penalty_bucket = 6;
    }
    b[1].n.priority = 8;
    b[2].n.interruption_penalty_bucket = 4;
    b[3].n.reclamation_penalty_bucket = 7;
    b[5].req[1].operator_ = 2; /* NotIn */
    nb_req(&b[6], "topology.bigfleet/rack", 1, "r1", NULL);
    b[7].n.reclamation_penalty_bucket = 5; /* both buckets swapped */
    b[7].n.interruption_penalty_bucket = 6;
    /* b[8]: an exact copy of b[0]; b[9] K, b[10] another key (priority and
     * buckets 0: not on the wire) */
    for (int i = 9; i < NV; i++) {
        nb_init(&b[i], 0);
        nb_req(&b[i], "zone", 1, i == 9 ? "a" : "b", NULL);
        nb_agg(&b[i], "cpu", "1");
    }
    struct bf_rollup r;
    bf_rollup_init(&r);
    char err[256] = "";
    for (int round = 0; round < 2; round++) {
        if (round == 1) {
            b[3].n.reclamation_penalty_bucket = 6;                       /* now b[0]'s profile */
            nb_req(&b[9], BF_LABEL_INSTANCE_TYPE, 1, "m6i.large", NULL); /* K + one */
            b[10].vals[0][0] = "a";                                      /* now K */
        }
        size_t len;
        uint8_t *buf = pack_rollup("c1", 10 + round, b, NV, &len);
        ck_assert_int_eq(conv(&g_s, buf, len, "c1", 1, 100, 0, &r, err, sizeof err), 0);
        uint32_t want = round == 0 ? NV - 1 : NV - 2;
        ck_assert_msg(r.n == want, "round %d: %u rows, want %u (a key field ignored?)", round, r.n,
                      want);
        ck_assert_uint_eq(r.merged, NV - want);
        for (uint32_t i = 0; i < r.n; i++)
            for (uint32_t j = i + 1; j < r.n; j++)
                ck_assert_msg(r.rows[i].profile_ref != r.rows[j].profile_ref,
                              "round %d: rows %u and %u share a profile", round, i, j);
        ck_assert_int_eq(r.rows[0].aggregate[dim("cpu")], round == 0 ? 2000 : 3000);
        int prio8 = 0, ipb4 = 0, rpb7 = 0, swapped = 0;
        for (uint32_t i = 0; i < r.n; i++) {
            const struct bf_nprofile *p = bf_nprofile_get(g_c, &g_s, r.rows[i].profile_ref);
            ck_assert_ptr_nonnull(p);
            prio8 += p->p.priority == 8;
            ipb4 += p->p.ipb == 4;
            rpb7 += p->p.rpb == 7;
            swapped += p->p.ipb == 6 && p->p.rpb == 5;
        }
        ck_assert_int_eq(prio8, 1);
        ck_assert_int_eq(ipb4, 1);
        ck_assert_int_eq(rpb7, round == 0 ? 1 : 0);
        ck_assert_int_eq(swapped, 1);
        free(buf);
    }
    bf_rollup_free(&r);
}
END_TEST

START_TEST(duplicate_needs_merge_sum_aggregate_and_max_min_unit)
{
    struct nb b[4];
    for (int i = 0; i < 3; i++) {
        nb_init(&b[i], 7);
        nb_req(&b[i], "zone", 1, i == 2 ? "b" : "a", i == 2 ? "a" : "b"); /* same set, any order */
    }
    nb_agg(&b[0], "cpu", "1");
    nb_mu(&b[0], "cpu", "1");
    nb_agg(&b[1], "cpu", "2");
    nb_mu(&b[1], "cpu", "3");
    nb_mu(&b[1], "memory", "1Gi");
    nb_agg(&b[2], "cpu", "4");
    nb_mu(&b[2], "cpu", "2");
    /* same profile, another group: a separate gang */
    nb_init(&b[3], 7);
    nb_req(&b[3], "zone", 1, "a", "b");
    nb_agg(&b[3], "cpu", "8");
    b[3].n.group.data = (uint8_t *)"g";
    b[3].n.group.len = 1;
    size_t len;
    uint8_t *buf = pack_rollup("", 5, b, 4, &len);
    struct bf_rollup r;
    bf_rollup_init(&r);
    char err[256];
    ck_assert_int_eq(conv(&g_s, buf, len, "c1", 1, 100, 0, &r, err, sizeof err), 0);
    ck_assert_uint_eq(r.n, 2);
    ck_assert_uint_eq(r.merged, 2);
    ck_assert_int_eq(r.rows[0].aggregate[dim("cpu")], 7000);
    ck_assert_int_eq(r.rows[0].min_unit[dim("cpu")], 3000);
    ck_assert_int_eq(r.rows[0].min_unit[dim("memory")], 1024LL * 1024 * 1024 * 1000);
    ck_assert_uint_eq(r.rows[0].profile_ref, r.rows[1].profile_ref);
    ck_assert_uint_ne(r.rows[1].group_ref, 0);
    ck_assert_int_eq(r.rows[1].aggregate[dim("cpu")], 8000);
    bf_rollup_free(&r);
    free(buf);
}
END_TEST

static int convert_one(struct nb *b, char *err, size_t errlen)
{
    size_t len;
    uint8_t *buf = pack_rollup("c1", 1, b, 1, &len);
    struct bf_rollup r;
    bf_rollup_init(&r);
    int rc = conv(&g_s, buf, len, "c1", 1, 100, 0, &r, err, errlen);
    if (rc)
        ck_assert_uint_eq(r.n, 0);
    bf_rollup_free(&r);
    free(buf);
    return rc;
}

START_TEST(rollup_rejects_negative_and_unparseable_quantities_naming_them)
{
    struct nb b;
    char err[256];
    nb_init(&b, 1);
    nb_agg(&b, "cpu", "-2");
    ck_assert_int_eq(convert_one(&b, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "negative"));
    ck_assert_ptr_nonnull(strstr(err, "cpu=-2"));
    nb_init(&b, 1);
    nb_mu(&b, "memory", "lots");
    ck_assert_int_eq(convert_one(&b, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "min_unit"));
    ck_assert_ptr_nonnull(strstr(err, "lots"));
    nb_init(&b, 1);
    nb_agg(&b, "", "1");
    ck_assert_int_eq(convert_one(&b, err, sizeof err), -EINVAL);
}
END_TEST

START_TEST(rollup_rejects_unknown_enum_values)
{
    struct nb b;
    char err[256];
    nb_init(&b, 1);
    nb_req(&b, "k", 6, "v", NULL); /* operator 6 does not exist */
    ck_assert_int_eq(convert_one(&b, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "operator"));
    nb_init(&b, 1);
    b.n.interruption_penalty_bucket = 28;
    ck_assert_int_eq(convert_one(&b, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "interruption_penalty_bucket"));
    nb_init(&b, 1);
    b.n.reclamation_penalty_bucket = -1;
    ck_assert_int_eq(convert_one(&b, err, sizeof err), -EINVAL);
    nb_init(&b, 1);
    bigfleet__v1alpha1__topology_spread__init(&b.spr[0]);
    b.spr[0].topology_key = "zone";
    b.spr[0].when_unsatisfiable = 3;
    b.sprp[0] = &b.spr[0];
    b.n.n_spread = 1;
    ck_assert_int_eq(convert_one(&b, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "when_unsatisfiable"));
}
END_TEST

/* Found reading the converter against fuzz_rollup's oracle (protobuf-c, which
 * cuts a string at a NUL): a requirement key or value with a NUL byte was
 * silently cut there, so "zone=a\0x" and "zone=a\0y" became one profile. */
START_TEST(rollup_rejects_a_nul_byte_in_a_requirement_instead_of_cutting_it)
{
    /* ClusterCapacityNeeds{needs: [{requirements: [{key: "zone", operator: In,
     * values: ["a\0x"]}], aggregate_resources: {cpu: "1"}}]} */
    const uint8_t req[] = {0x0a, 0x04, 'z', 'o', 'n', 'e', 0x10, 0x01, 0x1a, 0x03, 'a', 0, 'x'};
    uint8_t need[64], msg[80], *q = need;
    q = bf_pb_put_ld(q, 1, req, sizeof req);
    uint8_t ent[16], *e = ent;
    e = bf_pb_put_ld(e, 1, "cpu", 3);
    e = bf_pb_put_ld(e, 2, "1", 1);
    q = bf_pb_put_ld(q, 2, ent, (size_t)(e - ent));
    uint8_t *m = bf_pb_put_ld(msg, 3, need, (size_t)(q - need));
    struct bf_rollup r;
    bf_rollup_init(&r);
    char err[256] = "";
    ck_assert_int_eq(conv(&g_s, msg, (size_t)(m - msg), "c1", 1, 10, 0, &r, err, sizeof err),
                     -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "need 0: NUL byte in a requirement"));
    ck_assert_uint_eq(r.n, 0);
    /* the same value without the NUL converts */
    const uint8_t ok[] = {0x0a, 0x04, 'z', 'o', 'n', 'e', 0x10, 0x01, 0x1a, 0x03, 'a', '.', 'x'};
    q = bf_pb_put_ld(need, 1, ok, sizeof ok);
    q = bf_pb_put_ld(q, 2, ent, (size_t)(e - ent));
    m = bf_pb_put_ld(msg, 3, need, (size_t)(q - need));
    ck_assert_int_eq(conv(&g_s, msg, (size_t)(m - msg), "c1", 1, 10, 0, &r, err, sizeof err), 0);
    ck_assert_uint_eq(r.n, 1);
    bf_rollup_free(&r);
}
END_TEST

START_TEST(rollup_rejects_too_many_needs_malformed_bytes_and_foreign_cluster)
{
    struct nb b[3];
    for (int i = 0; i < 3; i++)
        nb_init(&b[i], i);
    size_t len;
    uint8_t *buf = pack_rollup("c1", 1, b, 3, &len);
    struct bf_rollup r;
    bf_rollup_init(&r);
    char err[256];
    ck_assert_int_eq(conv(&g_s, buf, len, "c1", 1, 2, 0, &r, err, sizeof err), -E2BIG);
    ck_assert_ptr_nonnull(strstr(err, "3 needs"));
    ck_assert_int_eq(conv(&g_s, buf, len, "c2", 1, 10, 0, &r, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "does not match"));
    ck_assert_int_eq(conv(&g_s, buf, len - 1, "c1", 1, 10, 0, &r, err, sizeof err), -EBADMSG);
    uint8_t junk[] = {0x1a, 0x02, 0x08, 0x80}; /* need whose requirement varint is truncated */
    ck_assert_int_eq(conv(&g_s, junk, sizeof junk, "c1", 1, 10, 0, &r, err, sizeof err), -EBADMSG);
    ck_assert_int_eq(conv(&g_s, buf, len, "c1", 1, 10, 0, &r, err, sizeof err), 0);
    ck_assert_uint_eq(r.n, 3);
    bf_rollup_free(&r);
    free(buf);
}
END_TEST

START_TEST(repeated_rollup_interns_nothing_new_and_reserve_guards_the_string_table)
{
    struct nb b;
    nb_init(&b, 42);
    nb_req(&b, "k", 1, "v", NULL);
    nb_agg(&b, "cpu", "1");
    size_t len;
    uint8_t *buf = pack_rollup("c1", 1, &b, 1, &len);
    struct bf_rollup r;
    bf_rollup_init(&r);
    char err[256];
    ck_assert_int_eq(conv(&g_s, buf, len, "c1", 1, 10, 0, &r, err, sizeof err), 0);
    uint32_t ref = r.rows[0].profile_ref;
    uint64_t used = atomic_load(&g_s.inv->strtab.arena_used);
    ck_assert_int_eq(conv(&g_s, buf, len, "c1", 1, 10, 0, &r, err, sizeof err), 0);
    ck_assert_uint_eq(r.rows[0].profile_ref, ref);
    ck_assert_uint_eq(atomic_load(&g_s.inv->strtab.arena_used), used);
    /* a new profile while the reserve says the table is full: refused */
    nb_req(&b, "k2", 3, NULL, NULL);
    free(buf);
    buf = pack_rollup("c1", 1, &b, 1, &len);
    ck_assert_int_eq(conv(&g_s, buf, len, "c1", 1, 10, g_s.arena_bytes, &r, err, sizeof err),
                     -ENOSPC);
    ck_assert_ptr_nonnull(strstr(err, "string table"));
    ck_assert_uint_eq(atomic_load(&g_s.inv->strtab.arena_used), used);
    bf_rollup_free(&r);
    free(buf);
}
END_TEST

/* Found writing fuzz_rollup's "no rollup takes the string arena below its
 * reserve" property: the reserve was checked before a profile was interned
 * but without the profile's own size, so one large new profile took the
 * string table below its reserve (by up to the size of the Need). */
START_TEST(a_large_new_profile_cannot_eat_into_the_string_table_reserve)
{
    static char big[4][1001];
    struct nb b;
    nb_init(&b, 7);
    for (int i = 0; i < 4; i++) {
        memset(big[i], 'a' + i, 1000);
        big[i][1000] = 0;
    }
    nb_req(&b, "k", 1, big[0], big[1]);
    nb_req(&b, "k2", 1, big[2], big[3]);
    nb_agg(&b, "cpu", "1");
    size_t len;
    uint8_t *buf = pack_rollup("c1", 1, &b, 1, &len);
    struct bf_rollup r;
    bf_rollup_init(&r);
    char err[256] = "";
    uint64_t used = atomic_load(&g_s.inv->strtab.arena_used);
    /* 256 bytes above the reserve: the ~8 KB of blob and fingerprint do not fit */
    uint64_t reserve = g_s.arena_bytes - used - 256;
    ck_assert_int_eq(conv(&g_s, buf, len, "c1", 1, 10, reserve, &r, err, sizeof err), -ENOSPC);
    ck_assert_ptr_nonnull(strstr(err, "string table is nearly full"));
    ck_assert_uint_eq(atomic_load(&g_s.inv->strtab.arena_used), used);
    /* with room for it, the same rollup converts and the reserve still holds */
    reserve = g_s.arena_bytes - used - 65536;
    ck_assert_int_eq(conv(&g_s, buf, len, "c1", 1, 10, reserve, &r, err, sizeof err), 0);
    ck_assert_uint_le(atomic_load(&g_s.inv->strtab.arena_used) + reserve, g_s.arena_bytes);
    ck_assert_uint_gt(atomic_load(&g_s.inv->strtab.arena_used), used + 4000);
    bf_rollup_free(&r);
    free(buf);
}
END_TEST

START_TEST(empty_rollup_converts_to_zero_rows)
{
    size_t len;
    uint8_t *buf = pack_rollup("c1", 9, NULL, 0, &len);
    struct bf_rollup r;
    bf_rollup_init(&r);
    char err[64];
    ck_assert_int_eq(conv(&g_s, buf, len, "c1", 1, 10, 0, &r, err, sizeof err), 0);
    ck_assert_uint_eq(r.n, 0);
    ck_assert_int_eq(r.timestamp_ns, 9);
    bf_rollup_free(&r);
    free(buf);
}
END_TEST

/* ------------------------------------------------------------ hostile input */

static struct bf_rollup_limits open_limits(void)
{
    return (struct bf_rollup_limits){
        .max_rows = 100, .strtab_quota = UINT64_MAX, .max_priority = INT32_MAX};
}

START_TEST(unknown_resource_names_are_listed_never_registered_by_convert)
{
    struct nb b[2];
    nb_init(&b[0], 1);
    nb_agg(&b[0], "cpu", "1");
    nb_agg(&b[0], "example.com/fpga", "2");
    nb_init(&b[1], 2);
    nb_mu(&b[1], "example.com/fpga", "1");
    nb_mu(&b[1], "example.com/asic", "1");
    size_t len;
    uint8_t *buf = pack_rollup("c1", 1, b, 2, &len);
    struct bf_rollup r;
    bf_rollup_init(&r);
    char err[256];
    ck_assert_int_ge(bf_dim_intern(&g_s, "cpu"), 0);
    struct bf_dims d0, d1;
    bf_shm_dims(&g_s, &d0);
    struct bf_rollup_limits lim = open_limits();
    ck_assert_int_eq(bf_rollup_convert(&g_s, buf, len, "c1", 1, &lim, &r, err, sizeof err), 0);
    ck_assert_uint_eq(r.n_new_dims, 2);
    ck_assert_str_eq(r.new_dims[0], "example.com/fpga");
    ck_assert_str_eq(r.new_dims[1], "example.com/asic");
    bf_shm_dims(&g_s, &d1);
    ck_assert_uint_eq(d1.n, d0.n); /* nothing registered */
    /* a rejected rollup naming a new resource registers nothing either */
    nb_agg(&b[1], "cpu", "lots");
    free(buf);
    buf = pack_rollup("c1", 1, b, 2, &len);
    ck_assert_int_eq(bf_rollup_convert(&g_s, buf, len, "c1", 1, &lim, &r, err, sizeof err),
                     -EINVAL);
    bf_shm_dims(&g_s, &d1);
    ck_assert_uint_eq(d1.n, d0.n);
    ck_assert(bf_dim_is_reserved("nvidia.com/gpu") && !bf_dim_is_reserved("example.com/fpga"));
    bf_rollup_free(&r);
    free(buf);
}
END_TEST

START_TEST(group_and_string_table_quotas_reject_with_the_quota_named)
{
    struct nb b[3];
    char gid[3][8];
    for (int i = 0; i < 3; i++) {
        nb_init(&b[i], 1);
        snprintf(gid[i], sizeof gid[i], "gang-%d", i);
        b[i].n.group.data = (uint8_t *)gid[i];
        b[i].n.group.len = strlen(gid[i]);
    }
    size_t len;
    uint8_t *buf = pack_rollup("c1", 1, b, 3, &len);
    struct bf_rollup r;
    bf_rollup_init(&r);
    char err[256];
    struct bf_rollup_limits lim = open_limits();
    lim.max_groups = 2;
    ck_assert_int_eq(bf_rollup_convert(&g_s, buf, len, "c1", 1, &lim, &r, err, sizeof err), -E2BIG);
    ck_assert_str_eq(r.over_quota, "groups");
    ck_assert_ptr_nonnull(strstr(err, "--cluster-max-groups"));
    lim.max_groups = 3;
    ck_assert_int_eq(bf_rollup_convert(&g_s, buf, len, "c1", 1, &lim, &r, err, sizeof err), 0);
    ck_assert_uint_eq(r.groups, 3);
    ck_assert_uint_gt(r.strtab_added, 0); /* the groups and the profile were new */
    /* everything known now: a repeat adds nothing and fits a zero quota */
    lim.strtab_quota = 0;
    ck_assert_int_eq(bf_rollup_convert(&g_s, buf, len, "c1", 1, &lim, &r, err, sizeof err), 0);
    ck_assert_uint_eq(r.strtab_added, 0);
    /* a new group does not */
    b[2].n.group.data = (uint8_t *)"another-gang";
    b[2].n.group.len = 12;
    free(buf);
    buf = pack_rollup("c1", 1, b, 3, &len);
    ck_assert_int_eq(bf_rollup_convert(&g_s, buf, len, "c1", 1, &lim, &r, err, sizeof err),
                     -EDQUOT);
    ck_assert_str_eq(r.over_quota, "strings");
    ck_assert_ptr_nonnull(strstr(err, "--cluster-max-string-kib"));
    /* too many Needs for the cluster: refused before decoding */
    lim = open_limits();
    lim.max_rows = 2;
    ck_assert_int_eq(bf_rollup_convert(&g_s, buf, len, "c1", 1, &lim, &r, err, sizeof err), -E2BIG);
    ck_assert_str_eq(r.over_quota, "needs");
    bf_rollup_free(&r);
    free(buf);
}
END_TEST

START_TEST(priorities_above_the_cap_are_clamped_and_counted)
{
    struct nb b[2];
    nb_init(&b[0], 2000001000); /* system-node-critical */
    nb_init(&b[1], 500);
    size_t len;
    uint8_t *buf = pack_rollup("c1", 1, b, 2, &len);
    struct bf_rollup r;
    bf_rollup_init(&r);
    char err[256];
    struct bf_rollup_limits lim = open_limits();
    lim.max_priority = 1000000000;
    ck_assert_int_eq(bf_rollup_convert(&g_s, buf, len, "c1", 1, &lim, &r, err, sizeof err), 0);
    ck_assert_uint_eq(r.priorities_clamped, 1);
    const struct bf_nprofile *p0 = bf_nprofile_get(g_c, &g_s, r.rows[0].profile_ref);
    const struct bf_nprofile *p1 = bf_nprofile_get(g_c, &g_s, r.rows[1].profile_ref);
    ck_assert_ptr_nonnull(p0);
    ck_assert_ptr_nonnull(p1);
    ck_assert_int_eq(p0->p.priority, 1000000000);
    ck_assert_int_eq(p1->p.priority, 500);
    /* the cached profile keeps the clamp on the next rollup */
    ck_assert_int_eq(bf_rollup_convert(&g_s, buf, len, "c1", 1, &lim, &r, err, sizeof err), 0);
    ck_assert_uint_eq(r.priorities_clamped, 1);
    ck_assert_int_eq(bf_nprofile_get(g_c, &g_s, r.rows[0].profile_ref)->p.priority, 1000000000);
    bf_rollup_free(&r);
    free(buf);
}
END_TEST

START_TEST(timestamps_in_the_future_or_stale_give_way_to_the_receive_time)
{
    int64_t recv = 1800000000000000000LL;
    const struct {
        int64_t ts, arrival;
        bool clamped;
    } cases[] = {
        {recv - 5 * BF_NS_PER_SEC, recv - 5 * BF_NS_PER_SEC, false},
        {recv, recv, false},
        {recv - BF_ROLLUP_MAX_AGE_NS, recv - BF_ROLLUP_MAX_AGE_NS, false},
        {recv - BF_ROLLUP_MAX_AGE_NS - 1, recv, true},
        {recv + 1, recv, true},
        {INT64_MAX, recv, true},
        {0, recv, true},
        {-5, recv, true},
    };
    struct nb b;
    nb_init(&b, 1);
    struct bf_rollup r;
    bf_rollup_init(&r);
    char err[256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len;
        uint8_t *buf = pack_rollup("c1", cases[i].ts, &b, 1, &len);
        struct bf_rollup_limits lim = open_limits();
        lim.recv_ns = recv;
        ck_assert_int_eq(bf_rollup_convert(&g_s, buf, len, "c1", 1, &lim, &r, err, sizeof err), 0);
        ck_assert_int_eq(r.timestamp_ns, cases[i].ts);
        ck_assert_int_eq(r.rows[0].arrival_ns, cases[i].arrival);
        ck_assert_int_eq(r.timestamp_clamped, cases[i].clamped);
        free(buf);
    }
    bf_rollup_free(&r);
}
END_TEST

static void random_key(struct bf_rollup_digest_key *k, uint8_t seed)
{
    for (size_t i = 0; i < sizeof k->secret; i++)
        k->secret[i] = (uint8_t)(seed * 131 + i * 7 + (i * i) % 251);
}

START_TEST(unchanged_rollup_digest_ignores_only_the_timestamp)
{
    struct nb b[2];
    nb_init(&b[0], 100);
    nb_req(&b[0], BF_LABEL_INSTANCE_TYPE, 1, "m6i.large", NULL);
    nb_agg(&b[0], "cpu", "4");
    nb_init(&b[1], 10);
    nb_agg(&b[1], "cpu", "500m");
    struct bf_rollup_digest_key k1, k2;
    random_key(&k1, 1);
    random_key(&k2, 2);
    size_t la, lb, lc, ld;
    uint8_t *a = pack_rollup("c1", 100, b, 2, &la);
    uint8_t *a2 = pack_rollup("c1", 987654321, b, 2, &lb);
    struct bf_rollup_digest da, da2, dx;
    ck_assert_int_eq(bf_rollup_digest(a, la, &k1, &da), 0);
    ck_assert_int_eq(bf_rollup_digest(a2, lb, &k1, &da2), 0);
    ck_assert_int_eq(da.timestamp_ns, 100);
    ck_assert_int_eq(da2.timestamp_ns, 987654321);
    ck_assert(da.lo == da2.lo && da.hi == da2.hi && da.hi != 0); /* same but for the timestamp */
    /* one quantity changed: a different digest */
    b[1].agg[0].value = "600m";
    uint8_t *c = pack_rollup("c1", 100, b, 2, &lc);
    ck_assert_int_eq(bf_rollup_digest(c, lc, &k1, &dx), 0);
    ck_assert(dx.lo != da.lo || dx.hi != da.hi);
    /* another cluster id: a different digest */
    b[1].agg[0].value = "500m";
    uint8_t *d = pack_rollup("c2", 100, b, 2, &ld);
    ck_assert_int_eq(bf_rollup_digest(d, ld, &k1, &dx), 0);
    ck_assert(dx.lo != da.lo || dx.hi != da.hi);
    /* the Needs in another order: a different digest (it converts in full) */
    struct nb swapped[2] = {b[1], b[0]}; /* copies point into b: still alive */
    uint8_t *e = pack_rollup("c1", 100, swapped, 2, &ld);
    ck_assert_int_eq(bf_rollup_digest(e, ld, &k1, &dx), 0);
    ck_assert(dx.lo != da.lo || dx.hi != da.hi);
    /* another key: another digest of the same bytes */
    ck_assert_int_eq(bf_rollup_digest(a, la, &k2, &dx), 0);
    ck_assert(dx.lo != da.lo || dx.hi != da.hi);
    /* a top level that does not parse */
    ck_assert_int_eq(bf_rollup_digest(a, la - 1, &k1, &dx), -EBADMSG);
    free(a);
    free(a2);
    free(c);
    free(d);
    free(e);
}
END_TEST

START_TEST(repeat_rebuilds_the_published_rows_with_the_new_arrival)
{
    struct nb b[3];
    nb_init(&b[0], 100);
    nb_req(&b[0], BF_LABEL_INSTANCE_TYPE, 1, "m6i.large", NULL);
    nb_agg(&b[0], "cpu", "4");
    nb_mu(&b[0], "cpu", "2");
    nb_init(&b[1], 10);
    nb_agg(&b[1], "cpu", "500m");
    nb_init(&b[2], 100); /* merges into the first */
    nb_req(&b[2], BF_LABEL_INSTANCE_TYPE, 1, "m6i.large", NULL);
    nb_agg(&b[2], "cpu", "2");
    size_t la, lb;
    int64_t t1 = 1800000000000000000LL, t2 = t1 + 5 * BF_NS_PER_SEC;
    uint8_t *a = pack_rollup("c1", t1, b, 3, &la);
    uint8_t *a2 = pack_rollup("c1", t2, b, 3, &lb);
    struct bf_rollup full, rep, again;
    bf_rollup_init(&full);
    bf_rollup_init(&rep);
    bf_rollup_init(&again);
    char err[256] = "";
    struct bf_rollup_limits lim = open_limits();
    lim.recv_ns = t2;
    ck_assert_int_eq(conv(&g_s, a, la, "c1", 1, 100, 0, &full, err, sizeof err), 0);
    ck_assert_uint_eq(full.n, 2);
    ck_assert_uint_eq(full.merged, 1);
    /* published at row 7, as the ingest thread would */
    bf_shm_store_words(&g_s.rows[7], full.rows, (size_t)full.n * sizeof(struct bf_need_row));
    ck_assert_int_eq(bf_rollup_repeat(&g_s, 7, full.n, full.fp_refs, t2, &lim, &rep), 0);
    ck_assert(rep.repeated);
    ck_assert(!full.repeated);
    ck_assert_uint_eq(rep.n, full.n);
    ck_assert_int_eq(rep.timestamp_ns, t2);
    ck_assert_int_eq(rep.arrival_ns, t2);
    ck_assert(!rep.timestamp_clamped);
    /* the full conversion of the repeated bytes gives exactly these rows */
    ck_assert_int_eq(bf_rollup_convert(&g_s, a2, lb, "c1", 1, &lim, &again, err, sizeof err), 0);
    ck_assert_uint_eq(again.n, rep.n);
    ck_assert_int_eq(memcmp(again.rows, rep.rows, rep.n * sizeof *rep.rows), 0);
    ck_assert_int_eq(memcmp(again.fp_refs, rep.fp_refs, rep.n * sizeof *rep.fp_refs), 0);
    for (uint32_t i = 0; i < rep.n; i++) {
        ck_assert_int_eq(rep.rows[i].arrival_ns, t2);
        struct bf_need_row x = rep.rows[i];
        x.arrival_ns = full.rows[i].arrival_ns; /* nothing else differs */
        ck_assert_int_eq(memcmp(&x, &full.rows[i], sizeof x), 0);
    }
    /* a stale timestamp gives way to the receive time, as in the conversion */
    lim.recv_ns = t2 + BF_ROLLUP_MAX_AGE_NS + 1;
    ck_assert_int_eq(bf_rollup_repeat(&g_s, 7, full.n, full.fp_refs, t2, &lim, &rep), 0);
    ck_assert(rep.timestamp_clamped);
    ck_assert_int_eq(rep.rows[1].arrival_ns, lim.recv_ns);
    /* an empty rollup repeats to no rows */
    ck_assert_int_eq(bf_rollup_repeat(&g_s, 0, 0, NULL, t2, &lim, &rep), 0);
    ck_assert_uint_eq(rep.n, 0);
    bf_rollup_free(&full);
    bf_rollup_free(&rep);
    bf_rollup_free(&again);
    free(a);
    free(a2);
}
END_TEST

/* Issue 18: the ingest thread republishes a repeat on the same extent with
 * its arrival in the cluster row; a reader copying through bf_needs_copy
 * gets exactly the rows the full conversion of the repeated bytes gives. */
START_TEST(republished_repeat_reads_back_through_needs_copy_as_the_full_conversion)
{
    struct nb b[2];
    nb_init(&b[0], 7);
    nb_req(&b[0], BF_LABEL_INSTANCE_TYPE, 1, "m6i.large", NULL);
    nb_agg(&b[0], "cpu", "4");
    nb_init(&b[1], 3);
    nb_agg(&b[1], "memory", "1Gi");
    size_t la, lb;
    int64_t t1 = 1800000000000000000LL, t2 = t1 + 7 * BF_NS_PER_SEC;
    uint8_t *a = pack_rollup("c1", t1, b, 2, &la);
    uint8_t *a2 = pack_rollup("c1", t2, b, 2, &lb);
    struct bf_rollup full, again, rep;
    bf_rollup_init(&full);
    bf_rollup_init(&again);
    bf_rollup_init(&rep);
    char err[256] = "";
    struct bf_rollup_limits lim = open_limits();
    lim.recv_ns = t2;
    ck_assert_int_eq(conv(&g_s, a, la, "c1", 1, 100, 0, &full, err, sizeof err), 0);
    ck_assert_uint_eq(full.n, 2);
    /* published at row 5 for cluster 0 */
    bf_shm_store_words(&g_s.rows[5], full.rows, (size_t)full.n * sizeof(struct bf_need_row));
    struct bf_cluster_rec rec = {
        .name_ref = 1, .in_use = 1, .rows_off = 5, .rows_count = full.n, .generation = 1};
    bf_cluster_write(&g_s, 0, &rec);
    struct bf_need_row out[4];
    struct bf_cluster_rec got;
    ck_assert_int_eq(bf_needs_copy(&g_s, 0, &got, out, 4), 2);
    ck_assert_int_eq(memcmp(out, full.rows, 2 * sizeof *out), 0); /* rows carry t1 */
    /* the repeat: same extent, generation + 1, the new arrival in the row */
    bf_rollup_repeat_meta(full.n, t2, &lim, &rep);
    ck_assert(rep.repeated);
    ck_assert_uint_eq(rep.n, 2);
    ck_assert_int_eq(rep.arrival_ns, t2);
    rec.generation++;
    rec.rows_arrival_ns = rep.arrival_ns;
    bf_cluster_write(&g_s, 0, &rec);
    ck_assert_int_eq(bf_needs_copy(&g_s, 0, &got, out, 4), 2);
    ck_assert_uint_eq(got.rows_off, 5);
    ck_assert_int_eq(bf_rollup_convert(&g_s, a2, lb, "c1", 1, &lim, &again, err, sizeof err), 0);
    ck_assert_uint_eq(again.n, 2);
    ck_assert_int_eq(memcmp(out, again.rows, 2 * sizeof *out), 0);
    /* ... which is what bf_rollup_repeat materializes */
    ck_assert_int_eq(bf_rollup_repeat(&g_s, 5, full.n, full.fp_refs, t2, &lim, &rep), 0);
    ck_assert_int_eq(memcmp(out, rep.rows, 2 * sizeof *out), 0);
    /* the shared rows themselves were not written */
    bf_needs_copy_rows(&g_s, 5, 2, out);
    ck_assert_int_eq(memcmp(out, full.rows, 2 * sizeof *out), 0);
    /* a full republish (rows_arrival_ns 0) hands out the rows' own arrival */
    rec.generation++;
    rec.rows_arrival_ns = 0;
    bf_cluster_write(&g_s, 0, &rec);
    ck_assert_int_eq(bf_needs_copy(&g_s, 0, &got, out, 4), 2);
    ck_assert_int_eq(out[0].arrival_ns, t1);
    ck_assert_int_eq(out[1].arrival_ns, t1);
    bf_rollup_free(&full);
    bf_rollup_free(&again);
    bf_rollup_free(&rep);
    free(a);
    free(a2);
}
END_TEST

/* Wire bytes of a ClusterCapacityNeeds "c1" at ts whose only Need is
 * `prefix` (a packed CapacityNeed) followed by raw extra fields. */
static uint8_t *wrap_need(const uint8_t *prefix, size_t pl, const uint8_t *extra, size_t el,
                          int64_t ts, size_t *len)
{
    uint8_t *buf = malloc(64 + pl + el);
    size_t n = 0, nl = pl + el;
    buf[n++] = 0x0a, buf[n++] = 2, buf[n++] = 'c', buf[n++] = '1';
    buf[n++] = 0x10;
    uint64_t v = (uint64_t)ts;
    for (; v >= 0x80; v >>= 7)
        buf[n++] = (uint8_t)(v | 0x80);
    buf[n++] = (uint8_t)v;
    buf[n++] = 0x1a;
    ck_assert_uint_lt(nl, 1u << 14);
    if (nl >= 0x80) {
        buf[n++] = (uint8_t)(nl | 0x80);
        buf[n++] = (uint8_t)(nl >> 7);
    } else {
        buf[n++] = (uint8_t)nl;
    }
    memcpy(buf + n, prefix, pl);
    memcpy(buf + n + pl, extra, el);
    *len = n + nl;
    return buf;
}

/* The usual map-entry encoding takes a fast path; every other valid
 * encoding of the same entry (value first, an over-long length, an unknown
 * field inside) must convert to the same row, and a resource name or
 * quantity seen before in the rollup to the same figures. */
START_TEST(map_entries_in_any_valid_encoding_convert_to_the_same_row)
{
    struct nb b;
    nb_init(&b, 4);
    nb_req(&b, BF_LABEL_INSTANCE_TYPE, 1, "m6i.large", NULL);
    size_t pl = bigfleet__v1alpha1__capacity_need__get_packed_size(&b.n);
    uint8_t *prefix = malloc(pl);
    bigfleet__v1alpha1__capacity_need__pack(&b.n, prefix);
    /* field 2 (aggregate_resources) entries: cpu=4, memory=64Gi; field 8
     * (min_unit): cpu=250m */
    static const uint8_t canonical[] = {
        0x12, 8,    0x0a, 3,    'c', 'p', 'u', 0x12, 1,    '4', /* cpu=4 */
        0x12, 14,   0x0a, 6,    'm', 'e', 'm', 'o',  'r',  'y', 0x12, 4,   '6', '4', 'G',
        'i',  0x42, 11,   0x0a, 3,   'c', 'p', 'u',  0x12, 4,   '2',  '5', '0', 'm'};
    static const uint8_t value_first[] = {0x12, 8,   0x12, 1,   '4',  0x0a, 3,    'c', 'p',  'u',
                                          0x12, 14,  0x12, 4,   '6',  '4',  'G',  'i', 0x0a, 6,
                                          'm',  'e', 'm',  'o', 'r',  'y',  0x42, 11,  0x12, 4,
                                          '2',  '5', '0',  'm', 0x0a, 3,    'c',  'p', 'u'};
    static const uint8_t odd[] = {/* an over-long key length; unknown fields 3 and 4 */
                                  0x12, 11,   0x0a, 0x83, 0x00, 'c', 'p', 'u',  0x12, 1,    '4',
                                  0x18, 0x01, 0x12, 14,   0x0a, 6,   'm', 'e',  'm',  'o',  'r',
                                  'y',  0x12, 4,    '6',  '4',  'G', 'i', 0x42, 13,   0x0a, 3,
                                  'c',  'p',  'u',  0x12, 4,    '2', '5', '0',  'm',  0x20, 0x07};
    const uint8_t *enc[3] = {canonical, value_first, odd};
    size_t encl[3] = {sizeof canonical, sizeof value_first, sizeof odd};
    struct bf_rollup r[3];
    char err[256] = "";
    int64_t t = 1800000000000000000LL;
    for (int i = 0; i < 3; i++) {
        size_t len;
        uint8_t *buf = wrap_need(prefix, pl, enc[i], encl[i], t, &len);
        bf_rollup_init(&r[i]);
        ck_assert_msg(conv(&g_s, buf, len, "c1", 1, 100, 0, &r[i], err, sizeof err) == 0, "%d: %s",
                      i, err);
        ck_assert_uint_eq(r[i].n, 1);
        free(buf);
    }
    ck_assert_int_eq(r[0].rows[0].aggregate[dim("cpu")], 4000);
    ck_assert_int_eq(r[0].rows[0].aggregate[dim("memory")], 64LL * 1024 * 1024 * 1024 * 1000);
    ck_assert_int_eq(r[0].rows[0].min_unit[dim("cpu")], 250);
    for (int i = 1; i < 3; i++) {
        ck_assert_int_eq(memcmp(&r[i].rows[0], &r[0].rows[0], sizeof r[0].rows[0]), 0);
        ck_assert_uint_eq(r[i].fp_refs[0], r[0].fp_refs[0]);
    }
    for (int i = 0; i < 3; i++)
        bf_rollup_free(&r[i]);
    free(prefix);
}
END_TEST

/* Thousands of distinct profiles (the profile cache grows and re-indexes
 * mid-rollup) with quantities and names repeating across Needs: every row
 * carries what the quantity parser gives for its own strings, duplicates
 * still merge, and converting the same bytes again (every profile a cache
 * hit) gives the same rows. */
START_TEST(many_profiles_and_repeating_quantities_convert_exactly)
{
    shm_fixture_remove();
    struct bf_shm_caps caps = {.max_machines = 1024, .max_needs = 8192, .max_clusters = 16};
    shm_fixture_create("session", &caps, 1);
    enum { N = 3000 };
    static const char *qs[] = {"1",   "1m",   "1k", "10",  "100m", "1Gi", "1G", "2",
                               "0.5", "500m", "01", "1.0", "1e3",  "1Ki", "1M", "3"};
    enum { NQ = sizeof qs / sizeof qs[0] };
    struct nb *b = calloc(N + 1, sizeof *b);
    for (int i = 0; i < N; i++) {
        nb_init(&b[i], i); /* every priority a distinct profile */
        nb_agg(&b[i], "cpu", qs[i % NQ]);
        nb_agg(&b[i], "memory", qs[(i * 7 + 3) % NQ]);
        nb_mu(&b[i], "cpu", qs[(i * 5 + 1) % NQ]);
    }
    nb_init(&b[N], 17); /* the same profile as Need 17: merges into it */
    nb_agg(&b[N], "cpu", "2");
    nb_mu(&b[N], "cpu", "1k");
    size_t len;
    uint8_t *buf = pack_rollup("c1", 1800000000000000000LL, b, N + 1, &len);
    struct bf_rollup r, again;
    bf_rollup_init(&r);
    bf_rollup_init(&again);
    char err[256] = "";
    ck_assert_msg(conv(&g_s, buf, len, "c1", 1, N + 1, 0, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(r.n, N);
    ck_assert_uint_eq(r.merged, 1);
    int dc = dim("cpu"), dm = dim("memory");
    for (int i = 0; i < N; i++) {
        int64_t c, m, u;
        ck_assert_int_eq(bf_quantity_parse(qs[i % NQ], strlen(qs[i % NQ]), &c), 0);
        ck_assert_int_eq(bf_quantity_parse(qs[(i * 7 + 3) % NQ], strlen(qs[(i * 7 + 3) % NQ]), &m),
                         0);
        ck_assert_int_eq(bf_quantity_parse(qs[(i * 5 + 1) % NQ], strlen(qs[(i * 5 + 1) % NQ]), &u),
                         0);
        if (i == 17) {
            c += 2000;
            u = u > 1000000 ? u : 1000000;
        }
        ck_assert_int_eq(r.rows[i].aggregate[dc], c);
        ck_assert_int_eq(r.rows[i].aggregate[dm], m);
        ck_assert_int_eq(r.rows[i].min_unit[dc], u);
        for (int j = 0; j < i && j < 4; j++)
            ck_assert_uint_ne(r.rows[i].profile_ref, r.rows[j].profile_ref);
    }
    ck_assert_int_eq(conv(&g_s, buf, len, "c1", 1, N + 1, 0, &again, err, sizeof err), 0);
    ck_assert_uint_eq(again.n, r.n);
    ck_assert_int_eq(memcmp(again.rows, r.rows, (size_t)r.n * sizeof *r.rows), 0);
    ck_assert_int_eq(memcmp(again.fp_refs, r.fp_refs, (size_t)r.n * sizeof *r.fp_refs), 0);
    bf_rollup_free(&r);
    bf_rollup_free(&again);
    free(buf);
    free(b);
}
END_TEST

/* ------------------------------------------------------------ incremental */

/* Need v of a pool of shapes: priorities (the ones above the clamp of 100
 * are clamped, and then share a profile: they merge), instance types,
 * quantities and groups repeat across the pool, so random rollups hold
 * duplicates, merges and moved Needs. */
static void pool_need(struct nb *b, int v)
{
    static const char *types[] = {"m6i.large", "c6i.xlarge", "r6i.2xlarge"};
    static const char *qs[] = {"1", "2", "500m", "4", "3"};
    static const char *groups[] = {"rack-a", "rack-b"};
    nb_init(b, v * 3 % 130);
    nb_req(b, BF_LABEL_INSTANCE_TYPE, 1, types[(v / 5) % 3], NULL);
    nb_agg(b, "cpu", qs[(v / 3) % 5]);
    if (v % 4 == 1)
        nb_agg(b, "memory", "8Gi");
    if (v % 6 == 2)
        nb_mu(b, "cpu", qs[v % 5]);
    if (v % 7 == 3) {
        b->n.group.data = (uint8_t *)groups[v % 2];
        b->n.group.len = strlen(groups[v % 2]);
    }
}

static uint64_t lcg(uint64_t *x)
{
    *x = *x * 6364136223846793005ULL + 1442695040888963407ULL;
    return *x >> 33;
}

/* What a cluster's last accepted conversion leaves for the next one: its
 * Needs and its rows (kept in memory, or published at rows_off). */
struct kept {
    struct bf_rollup_need_memo *needs;
    struct bf_need_row *rows;
    uint32_t *fps;
    uint32_t n_needs, n_rows;
};

static void keep(struct kept *k, const struct bf_rollup *r)
{
    k->needs = realloc(k->needs, (r->needs_in + 1) * sizeof *k->needs);
    k->rows = realloc(k->rows, (r->n + 1) * sizeof *k->rows);
    k->fps = realloc(k->fps, (r->n + 1) * sizeof *k->fps);
    if (r->needs_in)
        memcpy(k->needs, r->needs_memo, r->needs_in * sizeof *k->needs);
    memcpy(k->rows, r->rows, r->n * sizeof *k->rows);
    memcpy(k->fps, r->fp_refs, r->n * sizeof *k->fps);
    k->n_needs = r->needs_in;
    k->n_rows = r->n;
}

static struct bf_rollup_prev prev_of(const struct kept *k, bool published)
{
    if (published) /* as the ingest thread passes it: the rows in the segment */
        bf_shm_store_words(&g_s.rows[11], k->rows, (size_t)k->n_rows * sizeof *k->rows);
    return (struct bf_rollup_prev){.needs = k->needs,
                                   .n_needs = k->n_needs,
                                   .rows = published ? NULL : k->rows,
                                   .rows_off = 11,
                                   .fp_refs = k->fps,
                                   .n_rows = k->n_rows};
}

/* The incremental conversion and the full one of the same bytes agree on
 * everything the caller reads. */
static void assert_same_conversion(const struct bf_rollup *a, const struct bf_rollup *b)
{
    ck_assert_uint_eq(a->n, b->n);
    ck_assert_uint_eq(a->needs_in, b->needs_in);
    ck_assert_uint_eq(a->merged, b->merged);
    ck_assert_uint_eq(a->groups, b->groups);
    ck_assert_uint_eq(a->priorities_clamped, b->priorities_clamped);
    ck_assert_int_eq(a->arrival_ns, b->arrival_ns);
    ck_assert_int_eq(memcmp(a->rows, b->rows, (size_t)a->n * sizeof *a->rows), 0);
    ck_assert_int_eq(memcmp(a->fp_refs, b->fp_refs, (size_t)a->n * sizeof *a->fp_refs), 0);
}

START_TEST(incremental_conversion_equals_the_full_one_under_random_edits)
{
    shm_fixture_remove();
    struct bf_shm_caps caps = {.max_machines = 1024, .max_needs = 4096, .max_clusters = 16};
    shm_fixture_create("session", &caps, 1);
    enum { POOL = 400, MAXN = 200, ROUNDS = 400 };
    struct nb *pool = calloc(POOL, sizeof *pool);
    for (int v = 0; v < POOL; v++)
        pool_need(&pool[v], v);
    struct bf_rollup_digest_key key;
    random_key(&key, 9);
    struct bf_rollup_limits lim = {
        .max_rows = MAXN, .strtab_quota = UINT64_MAX, .max_priority = 100};
    uint64_t x = 42;
    int cur[MAXN], n = 40;
    for (int i = 0; i < n; i++)
        cur[i] = (int)(lcg(&x) % POOL);
    struct bf_rollup inc, full;
    bf_rollup_init(&inc);
    bf_rollup_init(&full);
    struct kept k = {0};
    struct nb *b = calloc(MAXN, sizeof *b);
    char e1[256] = "", e2[256] = "";
    uint64_t reused = 0, needs = 0, merged = 0, clamped = 0, grouped = 0;
    for (int round = 0; round < ROUNDS; round++) {
        /* a random edit of the last accepted rollup (none in round 0) */
        int edits = round ? 1 + (int)(lcg(&x) % 3) : 0;
        for (int e = 0; e < edits; e++) {
            int op = (int)(lcg(&x) % 5), at = n ? (int)(lcg(&x) % (uint64_t)n) : 0;
            if ((op == 0 || !n) && n < MAXN) { /* insert */
                memmove(&cur[at + 1], &cur[at], (size_t)(n - at) * sizeof *cur);
                cur[at] = (int)(lcg(&x) % POOL);
                n++;
            } else if (op == 1 && n) { /* delete */
                memmove(&cur[at], &cur[at + 1], (size_t)(n - at - 1) * sizeof *cur);
                n--;
            } else if (op == 2 && n) { /* move: swap two */
                int o = (int)(lcg(&x) % (uint64_t)n), t = cur[at];
                cur[at] = cur[o];
                cur[o] = t;
            } else if (op == 3 && n) { /* reverse a stretch */
                int o = at + (int)(lcg(&x) % (uint64_t)(n - at));
                for (int i = at, j = o; i < j; i++, j--) {
                    int t = cur[i];
                    cur[i] = cur[j];
                    cur[j] = t;
                }
            } else if (n) { /* modify: another shape in its place */
                cur[at] = (int)(lcg(&x) % POOL);
            }
        }
        for (int i = 0; i < n; i++)
            b[i] = pool[cur[i]];
        for (int i = 0; i < n; i++) { /* the copies point into themselves */
            pool_need(&b[i], cur[i]);
        }
        size_t len;
        uint8_t *buf = pack_rollup("c1", 1800000000000000000LL + round, b, (size_t)n, &len);
        struct bf_rollup_prev prev = prev_of(&k, round % 2 == 1);
        lim.defer_min_needs = round % 3 == 0 ? 1 : 0; /* the deferred dedup at any size */
        if (round % 4 < 2) { /* as the ingest thread does: the Needs' hashes from the digest */
            struct bf_rollup_digest dg;
            ck_assert_int_eq(bf_rollup_digest_needs(buf, len, &key, lim.max_rows, &inc, &dg), 0);
            ck_assert(inc.hashed_buf == buf);
        }
        int rc1 = bf_rollup_convert_incremental(&g_s, buf, len, "c1", 1, &lim, &key,
                                                round ? &prev : NULL, &inc, e1, sizeof e1);
        if (rc1 == 0 && inc.n_new_dims) { /* the ingest thread registers, converts again */
            for (uint32_t i = 0; i < inc.n_new_dims; i++)
                ck_assert_int_ge(bf_dim_intern(&g_s, inc.new_dims[i]), 0);
            rc1 = bf_rollup_convert_incremental(&g_s, buf, len, "c1", 1, &lim, &key,
                                                round ? &prev : NULL, &inc, e1, sizeof e1);
        }
        int rc2 = bf_rollup_convert(&g_s, buf, len, "c1", 1, &lim, &full, e2, sizeof e2);
        ck_assert_msg(rc1 == 0 && rc2 == 0, "round %d: %s / %s", round, e1, e2);
        ck_assert_uint_eq(inc.n_new_dims, 0);
        assert_same_conversion(&inc, &full);
        ck_assert_uint_eq(inc.needs_in, (uint32_t)n);
        for (uint32_t i = 0; i < inc.needs_in; i++) {
            uint32_t row = BF_ROLLUP_MEMO_ROW(inc.needs_memo[i].row);
            ck_assert(row == BF_ROLLUP_NO_ROW || row < inc.n);
        }
        if (round) {
            reused += inc.reused;
            needs += (uint64_t)n;
        }
        merged += inc.merged;
        clamped += inc.priorities_clamped;
        grouped += inc.groups;
        keep(&k, &inc);
        free(buf);
    }
    /* the edits exercised merges, clamps and groups, and most Needs survive
     * an edit or three: most were reused */
    ck_assert(merged > 0 && clamped > 0 && grouped > 0);
    ck_assert_msg(reused * 10 > needs * 6, "reused %llu of %llu", (unsigned long long)reused,
                  (unsigned long long)needs);
    free(k.needs);
    free(k.rows);
    free(k.fps);
    free(b);
    free(pool);
    bf_rollup_free(&inc);
    bf_rollup_free(&full);
}
END_TEST

START_TEST(a_malformed_need_in_an_otherwise_reusable_rollup_is_still_rejected)
{
    enum { N = 30 };
    struct nb b[N];
    for (int i = 0; i < N; i++)
        pool_need(&b[i], i);
    struct bf_rollup_digest_key key;
    random_key(&key, 3);
    struct bf_rollup_limits lim = {
        .max_rows = 100, .strtab_quota = UINT64_MAX, .max_priority = 100};
    size_t len;
    uint8_t *good = pack_rollup("c1", 1800000000000000000LL, b, N, &len);
    struct bf_rollup r, full;
    bf_rollup_init(&r);
    bf_rollup_init(&full);
    char err[256] = "";
    ck_assert_msg(conv(&g_s, good, len, "c1", 1, 100, 0, &full, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(bf_rollup_convert_incremental(&g_s, good, len, "c1", 1, &lim, &key, NULL, &r,
                                                   err, sizeof err),
                     0);
    struct kept k = {0};
    keep(&k, &r);
    struct bf_rollup_prev prev = prev_of(&k, false);

    /* the same Needs but one negative quantity (Need 17): every other Need
     * would be reused, the bad one is converted and rejects the rollup */
    nb_init(&b[17], 5);
    nb_agg(&b[17], "cpu", "-1");
    size_t blen;
    uint8_t *bad = pack_rollup("c1", 1800000000000000001LL, b, N, &blen);
    int rc = bf_rollup_convert_incremental(&g_s, bad, blen, "c1", 1, &lim, &key, &prev, &r, err,
                                           sizeof err);
    ck_assert_int_eq(rc, -EINVAL);
    ck_assert_msg(strstr(err, "need 17") && strstr(err, "negative"), "%s", err);
    ck_assert_uint_eq(r.n, 0);

    /* a Need that does not decode (aggregate_resources as a varint),
     * appended after thirty reusable ones */
    uint8_t *mal = malloc(len + 4);
    memcpy(mal, good, len);
    memcpy(mal + len, (const uint8_t[]){0x1a, 0x02, 0x10, 0x01}, 4);
    rc = bf_rollup_convert_incremental(&g_s, mal, len + 4, "c1", 1, &lim, &key, &prev, &r, err,
                                       sizeof err);
    ck_assert_int_eq(rc, -EBADMSG);
    ck_assert_msg(strstr(err, "need 30") && strstr(err, "malformed"), "%s", err);
    ck_assert_uint_eq(r.n, 0);

    /* reused Needs still count against the group quota */
    struct bf_rollup_limits tight = lim;
    tight.max_groups = 1;
    rc = bf_rollup_convert_incremental(&g_s, good, len, "c1", 1, &tight, &key, &prev, &r, err,
                                       sizeof err);
    ck_assert_int_eq(rc, -E2BIG);
    ck_assert_str_eq(r.over_quota, "groups");

    /* the last good state (the caller's, untouched by the rejections) still
     * converts the good rollup, all of it reused, to the full conversion */
    ck_assert_int_eq(bf_rollup_convert_incremental(&g_s, good, len, "c1", 1, &lim, &key, &prev, &r,
                                                   err, sizeof err),
                     0);
    uint32_t own = 0; /* Needs with a row of their own (a merged row's are converted again) */
    for (uint32_t i = 0; i < k.n_needs; i++)
        own += BF_ROLLUP_MEMO_ROW(k.needs[i].row) != BF_ROLLUP_NO_ROW;
    ck_assert_uint_eq(r.reused, own);
    ck_assert_uint_gt(own, N / 2);
    assert_same_conversion(&r, &full);
    free(k.needs);
    free(k.rows);
    free(k.fps);
    free(good);
    free(bad);
    free(mal);
    bf_rollup_free(&r);
    bf_rollup_free(&full);
}
END_TEST

/* A changed Need whose profile and group equal those of a reused Need must
 * merge with it, in the full conversion's order: reused rows skip the dedup
 * table, so this takes the plain pass. */
START_TEST(a_changed_need_that_merges_with_a_reused_one_merges_as_in_the_full_conversion)
{
    struct nb b[3];
    nb_init(&b[0], 5);
    nb_req(&b[0], BF_LABEL_INSTANCE_TYPE, 1, "m6i.large", NULL);
    nb_agg(&b[0], "cpu", "1");
    nb_init(&b[1], 7);
    nb_req(&b[1], BF_LABEL_INSTANCE_TYPE, 1, "c6i.large", NULL);
    nb_agg(&b[1], "cpu", "2");
    nb_init(&b[2], 9);
    nb_agg(&b[2], "cpu", "4");
    struct bf_rollup_digest_key key;
    random_key(&key, 5);
    struct bf_rollup_limits lim = {.max_rows = 10, .strtab_quota = UINT64_MAX, .max_priority = 100};
    size_t len;
    uint8_t *a = pack_rollup("c1", 1800000000000000000LL, b, 3, &len);
    struct bf_rollup r, full;
    bf_rollup_init(&r);
    bf_rollup_init(&full);
    char err[256] = "";
    ck_assert_msg(conv(&g_s, a, len, "c1", 1, 10, 0, &full, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(
        bf_rollup_convert_incremental(&g_s, a, len, "c1", 1, &lim, &key, NULL, &r, err, sizeof err),
        0);
    struct kept k = {0};
    keep(&k, &r);
    /* Need 0 now asks for Need 1's profile (other bytes: 3 CPUs) */
    nb_init(&b[0], 7);
    nb_req(&b[0], BF_LABEL_INSTANCE_TYPE, 1, "c6i.large", NULL);
    nb_agg(&b[0], "cpu", "3");
    size_t blen;
    uint8_t *c = pack_rollup("c1", 1800000000000000001LL, b, 3, &blen);
    for (int published = 0; published < 2; published++) {
        struct bf_rollup_prev prev = prev_of(&k, published);
        ck_assert_int_eq(bf_rollup_convert_incremental(&g_s, c, blen, "c1", 1, &lim, &key, &prev,
                                                       &r, err, sizeof err),
                         0);
        ck_assert_int_eq(bf_rollup_convert(&g_s, c, blen, "c1", 1, &lim, &full, err, sizeof err),
                         0);
        assert_same_conversion(&r, &full);
        ck_assert_uint_eq(r.n, 2);
        ck_assert_uint_eq(r.merged, 1);
        ck_assert_int_eq(r.rows[0].aggregate[dim("cpu")], 5000); /* 3 + 2 CPUs, at Need 0's place */
        ck_assert_uint_eq(r.reused, 2);                          /* Needs 1 and 2 */
        /* Need 0 and 1 share a row now: neither is reusable next time */
        ck_assert_uint_eq(BF_ROLLUP_MEMO_ROW(r.needs_memo[0].row), BF_ROLLUP_NO_ROW);
        ck_assert_uint_eq(BF_ROLLUP_MEMO_ROW(r.needs_memo[1].row), BF_ROLLUP_NO_ROW);
        ck_assert_uint_eq(BF_ROLLUP_MEMO_ROW(r.needs_memo[2].row), 1);
    }
    free(k.needs);
    free(k.rows);
    free(k.fps);
    free(a);
    free(c);
    bf_rollup_free(&r);
    bf_rollup_free(&full);
}
END_TEST

/* A large rollup (>= 8192 Needs: the fast pass defers the dedup of its
 * converted rows to one batched check after the pass) with every Need
 * changed: two changed Needs with one profile, or a changed Need with the
 * profile of a reused one, merge exactly as in the full conversion (the
 * check sends the rollup to the plain pass); without duplicates the result
 * is the full conversion's too. */
START_TEST(a_large_rollup_with_every_need_changed_merges_duplicates_as_the_full_conversion)
{
    shm_fixture_remove();
    struct bf_shm_caps caps = {.max_machines = 1024, .max_needs = 16384, .max_clusters = 16};
    shm_fixture_create("session", &caps, 1);
    enum { N = 9000 };
    struct nb *b = calloc(N, sizeof *b);
    struct bf_rollup_digest_key key;
    random_key(&key, 11);
    struct bf_rollup_limits lim = {
        .max_rows = N, .strtab_quota = UINT64_MAX, .max_priority = 1000000};
    struct bf_rollup r, full;
    bf_rollup_init(&r);
    bf_rollup_init(&full);
    struct kept k = {0};
    char err[256] = "", e2[256] = "";
    /* round 0: the first rollup; 1 and 3: every Need changed, no duplicate;
     * 2: every Need changed, Need 8000 takes Need 10's profile; 4: Need 5
     * unchanged (reused), the others changed, Need 6000 to Need 5's profile
     * (round 3 follows a merge: it does not defer; round 4 does) */
    for (int round = 0; round < 5; round++) {
        for (int i = 0; i < N; i++) {
            int prio = i;
            if (round == 2 && i == 8000)
                prio = 10;
            if (round == 4 && i == 6000)
                prio = 5;
            nb_init(&b[i], prio); /* every priority a distinct profile */
            static const char *qs[] = {"1", "2", "3", "4", "5", "6", "7", "8", "9"};
            nb_agg(&b[i], "cpu",
                   qs[(round == 4 && i == 5 ? 3 : round) + i % 3]); /* the pointer is kept */
        }
        size_t len;
        uint8_t *buf = pack_rollup("c1", 1800000000000000000LL + round, b, N, &len);
        struct bf_rollup_prev prev = prev_of(&k, false);
        ck_assert_msg(bf_rollup_convert_incremental(&g_s, buf, len, "c1", 1, &lim, &key,
                                                    round ? &prev : NULL, &r, err, sizeof err) == 0,
                      "round %d: %s", round, err);
        ck_assert_msg(bf_rollup_convert(&g_s, buf, len, "c1", 1, &lim, &full, e2, sizeof e2) == 0,
                      "round %d: %s", round, e2);
        assert_same_conversion(&r, &full);
        bool dup = round == 2 || round == 4;
        ck_assert_uint_eq(r.merged, dup ? 1 : 0);
        ck_assert_uint_eq(r.n, dup ? N - 1 : N);
        ck_assert_uint_eq(r.reused, round == 4 ? 1 : 0); /* Need 5 */
        /* rounds 1, 2, 4 defer the duplicate check (9,000 Needs, the
         * previous rollup merged nothing); 2 and 4 meet their duplicate
         * there and end in the plain pass */
        if (round > 0) {
            ck_assert_msg(r.dedup_deferred == (round != 3), "round %d deferred %d", round,
                          r.dedup_deferred);
            ck_assert_msg(r.plain_pass == dup, "round %d plain %d", round, r.plain_pass);
        }
        keep(&k, &r);
        free(buf);
    }
    free(k.needs);
    free(k.rows);
    free(k.fps);
    free(b);
    bf_rollup_free(&r);
    bf_rollup_free(&full);
}
END_TEST

/* bf_rollup_digest_needs keeps every Need's hash for the conversion of the
 * same bytes that follows, and only for it: the conversion consumes them,
 * so a later rollup assembled in the same buffer (the recycled 7 MB one has
 * the same address, and often the same length) is hashed afresh, never
 * taken for the one before. The digest is bf_rollup_digest's, and the
 * hashes are kept for at most max_needs Needs. */
START_TEST(the_needs_hashes_kept_by_the_digest_serve_only_the_next_conversion_of_those_bytes)
{
    shm_fixture_remove();
    struct bf_shm_caps caps = {.max_machines = 1024, .max_needs = 4096, .max_clusters = 16};
    shm_fixture_create("session", &caps, 1);
    enum { N = 300 };
    struct nb *b = calloc(N, sizeof *b);
    struct bf_rollup_digest_key key;
    random_key(&key, 12);
    struct bf_rollup_limits lim = {
        .max_rows = N, .strtab_quota = UINT64_MAX, .max_priority = 1000000};
    struct bf_rollup r, full;
    bf_rollup_init(&r);
    bf_rollup_init(&full);
    struct kept k = {0};
    char err[256] = "", e2[256] = "";
    size_t la, lb;
    for (int i = 0; i < N; i++) {
        nb_init(&b[i], i);
        nb_agg(&b[i], "cpu", "4");
    }
    uint8_t *a = pack_rollup("c1", 1800000000000000000LL, b, N, &la);
    for (int i = 0; i < N; i += 2)
        b[i].agg[0].value = "5"; /* same length: every other Need changed */
    uint8_t *bb = pack_rollup("c1", 1800000000000000000LL, b, N, &lb);
    ck_assert_uint_eq(la, lb);
    uint8_t *buf = malloc(la);
    memcpy(buf, a, la);
    /* A, hashed by the digest, then converted: the full conversion's result */
    struct bf_rollup_digest d1, d2;
    ck_assert_int_eq(bf_rollup_digest_needs(buf, la, &key, N, &r, &d1), 0);
    ck_assert_int_eq(bf_rollup_digest(buf, la, &key, &d2), 0);
    ck_assert(d1.lo == d2.lo && d1.hi == d2.hi && d1.timestamp_ns == d2.timestamp_ns);
    ck_assert(r.hashed_buf == buf && r.hashed_n == N);
    ck_assert_int_eq(bf_rollup_convert_incremental(&g_s, buf, la, "c1", 1, &lim, &key, NULL, &r,
                                                   err, sizeof err),
                     0);
    ck_assert(r.hashed_buf == NULL);
    ck_assert_int_eq(bf_rollup_convert(&g_s, buf, la, "c1", 1, &lim, &full, e2, sizeof e2), 0);
    assert_same_conversion(&r, &full);
    keep(&k, &r);
    /* B assembled in the same buffer, converted without a digest: A's hashes
     * are gone, so the changed Needs are converted, not reused as A's */
    memcpy(buf, bb, lb);
    struct bf_rollup_prev prev = prev_of(&k, false);
    ck_assert_int_eq(bf_rollup_convert_incremental(&g_s, buf, lb, "c1", 1, &lim, &key, &prev, &r,
                                                   err, sizeof err),
                     0);
    ck_assert_int_eq(bf_rollup_convert(&g_s, buf, lb, "c1", 1, &lim, &full, e2, sizeof e2), 0);
    assert_same_conversion(&r, &full);
    ck_assert_uint_eq(r.reused, N / 2);
    /* the digest of B, then a conversion of B: the same, its hashes used */
    ck_assert_int_eq(bf_rollup_digest_needs(buf, lb, &key, N, &r, &d1), 0);
    ck_assert(d1.lo != d2.lo || d1.hi != d2.hi);
    ck_assert_int_eq(bf_rollup_convert_incremental(&g_s, buf, lb, "c1", 1, &lim, &key, &prev, &r,
                                                   err, sizeof err),
                     0);
    assert_same_conversion(&r, &full);
    ck_assert_uint_eq(r.reused, N / 2);
    /* a top level bf_rollup_scan_top refuses (a Need field as a varint, a
     * cluster_id as a varint): no hashes kept, and the conversion rejects
     * it as it always did */
    static const uint8_t bad_tail[2][2] = {{0x18, 0x01}, {0x08, 0x01}};
    uint8_t *bad = malloc(lb + 2);
    for (int t = 0; t < 2; t++) {
        memcpy(bad, bb, lb);
        memcpy(bad + lb, bad_tail[t], 2);
        ck_assert_int_eq(bf_rollup_digest_needs(bad, lb + 2, &key, N, &r, &d2), 0);
        ck_assert(r.hashed_buf == NULL);
        ck_assert_int_eq(bf_rollup_convert_incremental(&g_s, bad, lb + 2, "c1", 1, &lim, &key,
                                                       &prev, &r, err, sizeof err),
                         -EBADMSG);
        ck_assert_str_eq(err, "not a ClusterCapacityNeeds message (malformed wire data)");
    }
    free(bad);
    /* more Needs than max_needs: the digest is the same, no hashes kept,
     * and the memo stopped growing at max_needs (doubling: under twice it) */
    for (uint32_t mx = N - 1; mx >= N / 3; mx -= N / 3 - 1) {
        bf_rollup_free(&r);
        bf_rollup_init(&r);
        ck_assert_int_eq(bf_rollup_digest_needs(buf, lb, &key, mx, &r, &d2), 0);
        ck_assert(d1.lo == d2.lo && d1.hi == d2.hi);
        ck_assert(r.hashed_buf == NULL);
        ck_assert_uint_lt(r.needs_memo_cap, 2 * mx);
    }
    free(buf);
    free(a);
    free(bb);
    free(b);
    free(k.needs);
    free(k.rows);
    free(k.fps);
    bf_rollup_free(&r);
    bf_rollup_free(&full);
}
END_TEST

/* needs->stamps_observed moves exactly when an observation is recorded:
 * the session skips re-touching an unchanged fingerprint list only while
 * it has not moved. */
START_TEST(stamps_observed_moves_only_when_an_observation_is_recorded)
{
    uint64_t o0 = atomic_load(&g_s.needs->stamps_observed);
    int64_t lat = 0;
    ck_assert_int_eq(bf_stamp_touch(&g_s, 3, 9, 1000), 0);
    ck_assert_int_eq(bf_stamp_touch(&g_s, 3, 9, 2000), 0); /* first seen kept */
    ck_assert_uint_eq(atomic_load(&g_s.needs->stamps_observed), o0);
    ck_assert_int_eq(bf_stamp_observe(&g_s, 3, 9, 5000, &lat), 1);
    ck_assert_int_eq(lat, 4000);
    ck_assert_uint_eq(atomic_load(&g_s.needs->stamps_observed), o0 + 1);
    ck_assert_int_eq(bf_stamp_observe(&g_s, 3, 9, 6000, &lat), 0); /* once */
    ck_assert_int_eq(bf_stamp_observe(&g_s, 3, 8, 6000, &lat), 0); /* no stamp */
    ck_assert_uint_eq(atomic_load(&g_s.needs->stamps_observed), o0 + 1);
    /* after an observation, a touch re-stamps (what a skipped touch would miss) */
    ck_assert_int_eq(bf_stamp_touch(&g_s, 3, 9, 7000), 0);
    ck_assert_int_eq(bf_stamp_observe(&g_s, 3, 9, 9000, &lat), 1);
    ck_assert_int_eq(lat, 2000);
    ck_assert_uint_eq(atomic_load(&g_s.needs->stamps_observed), o0 + 2);
}
END_TEST

START_TEST(oversized_needs_and_groups_are_rejected_before_interning)
{
    struct nb b;
    nb_init(&b, 1);
    char *big = malloc(BF_ROLLUP_GROUP_MAX + 2);
    memset(big, 'g', BF_ROLLUP_GROUP_MAX + 1);
    big[BF_ROLLUP_GROUP_MAX + 1] = 0;
    b.n.group.data = (uint8_t *)big;
    b.n.group.len = BF_ROLLUP_GROUP_MAX + 1;
    size_t len;
    uint8_t *buf = pack_rollup("c1", 1, &b, 1, &len);
    struct bf_rollup r;
    bf_rollup_init(&r);
    char err[256];
    uint64_t used = atomic_load(&g_s.inv->strtab.arena_used);
    struct bf_rollup_limits lim = open_limits();
    ck_assert_int_eq(bf_rollup_convert(&g_s, buf, len, "c1", 1, &lim, &r, err, sizeof err), -E2BIG);
    ck_assert_ptr_nonnull(strstr(err, "group id"));
    ck_assert_uint_eq(atomic_load(&g_s.inv->strtab.arena_used), used);
    free(buf);
    /* a CapacityNeed over 1 MiB (a huge requirement value) */
    char *huge = malloc(BF_ROLLUP_NEED_MAX + 1);
    memset(huge, 'v', BF_ROLLUP_NEED_MAX);
    huge[BF_ROLLUP_NEED_MAX] = 0;
    nb_init(&b, 1);
    nb_req(&b, "k", 1, huge, NULL);
    buf = pack_rollup("c1", 1, &b, 1, &len);
    ck_assert_int_eq(bf_rollup_convert(&g_s, buf, len, "c1", 1, &lim, &r, err, sizeof err), -E2BIG);
    ck_assert_ptr_nonnull(strstr(err, "CapacityNeed of"));
    ck_assert_uint_eq(atomic_load(&g_s.inv->strtab.arena_used), used);
    bf_rollup_free(&r);
    free(buf);
    free(big);
    free(huge);
}
END_TEST

/* ------------------------------------------------------------ rail 2 */

/* docs/fidelity.md item 5 (differ): Go's NormalizeDemand keys fold classes
 * on "name=milli;" including zero entries, so {cpu 8, memory 0} and {cpu 8}
 * fold apart. Equal vectors are equal demand: the explicit zero converts to
 * exactly the vector of the absent dimension, so the engine folds them. */
START_TEST(explicit_zero_dimension_converts_like_an_absent_one)
{
    struct nb b[2];
    for (int i = 0; i < 2; i++) {
        nb_init(&b[i], 7);
        nb_req(&b[i], "zone", 5, NULL, NULL); /* a Same gang */
        nb_agg(&b[i], "cpu", "8");
        b[i].n.group.data = (uint8_t *)(i ? "g1" : "g0");
        b[i].n.group.len = 2;
    }
    nb_agg(&b[1], "memory", "0");
    size_t len;
    uint8_t *buf = pack_rollup("c1", 5, b, 2, &len);
    struct bf_rollup r;
    bf_rollup_init(&r);
    char err[256];
    ck_assert_int_eq(conv(&g_s, buf, len, "c1", 1, 100, 0, &r, err, sizeof err), 0);
    ck_assert_uint_eq(r.n, 2);
    ck_assert_uint_eq(r.rows[0].profile_ref, r.rows[1].profile_ref);
    ck_assert(memcmp(r.rows[0].aggregate, r.rows[1].aggregate, sizeof r.rows[0].aggregate) == 0);
    bf_rollup_free(&r);
    free(buf);
}
END_TEST

/* docs/fidelity.md item 6: duplicate (profile, group) rows merge into one
 * row (differ: Go's Table.Replace keeps them apart), but rail 2 counts the
 * Needs received, as Go's ApplyRollup admits len(ns) (match): 20 copies of
 * a Need (20x its demand) followed by one copy is a 95 % collapse and is
 * held. The session feeds needs_in to rail 2 (ingest.c; the interop test
 * session_rollup.test.js proves it through the real session). */
START_TEST(duplicate_rows_merge_but_rail2_counts_the_needs_received)
{
    struct nb b[20];
    for (int i = 0; i < 20; i++) {
        nb_init(&b[i], 7);
        nb_req(&b[i], "zone", 1, "a", NULL);
        nb_agg(&b[i], "cpu", "1");
    }
    size_t len;
    uint8_t *buf = pack_rollup("c1", 5, b, 20, &len);
    struct bf_rollup r;
    bf_rollup_init(&r);
    char err[256];
    ck_assert_int_eq(conv(&g_s, buf, len, "c1", 1, 100, 0, &r, err, sizeof err), 0);
    ck_assert_uint_eq(r.needs_in, 20);
    ck_assert_uint_eq(r.n, 1);
    ck_assert_uint_eq(r.merged, 19);
    ck_assert_int_eq(r.rows[0].aggregate[dim("cpu")], 20000);
    uint32_t base = 0;
    uint8_t held = 0;
    ck_assert_int_eq(bf_rail2_admit(true, &base, &held, r.needs_in), BF_RAIL2_ACCEPT);
    ck_assert_uint_eq(base, 20);
    free(buf);
    buf = pack_rollup("c1", 6, b, 1, &len);
    ck_assert_int_eq(conv(&g_s, buf, len, "c1", 1, 100, 0, &r, err, sizeof err), 0);
    ck_assert_uint_eq(r.needs_in, 1);
    ck_assert_int_eq(r.rows[0].aggregate[dim("cpu")], 1000);
    ck_assert_int_eq(bf_rail2_admit(true, &base, &held, r.needs_in), BF_RAIL2_HOLD);
    ck_assert_uint_eq(held, 1);
    ck_assert_uint_eq(base, 20);
    bf_rollup_free(&r);
    free(buf);
}
END_TEST

START_TEST(rail2_holds_a_collapse_until_three_consecutive_rollups_confirm_it)
{
    uint32_t base = 0;
    uint8_t held = 0;
    ck_assert_int_eq(bf_rail2_admit(true, &base, &held, 100), BF_RAIL2_ACCEPT);
    ck_assert_uint_eq(base, 100);
    ck_assert_int_eq(bf_rail2_admit(true, &base, &held, 5), BF_RAIL2_HOLD);
    ck_assert_uint_eq(held, 1);
    ck_assert_uint_eq(base, 100);
    ck_assert_int_eq(bf_rail2_admit(true, &base, &held, 0), BF_RAIL2_HOLD);
    ck_assert_uint_eq(held, 2);
    ck_assert_int_eq(bf_rail2_admit(true, &base, &held, 3), BF_RAIL2_ACCEPT_CONFIRMED);
    ck_assert_uint_eq(held, 0);
    ck_assert_uint_eq(base, 3);
    /* below the 10-row floor nothing is suspicious */
    ck_assert_int_eq(bf_rail2_admit(true, &base, &held, 0), BF_RAIL2_ACCEPT);
}
END_TEST

START_TEST(rail2_a_normal_rollup_resets_the_hold_and_ten_percent_is_kept)
{
    uint32_t base = 100;
    uint8_t held = 0;
    ck_assert_int_eq(bf_rail2_admit(true, &base, &held, 9), BF_RAIL2_HOLD);
    ck_assert_int_eq(bf_rail2_admit(true, &base, &held, 10), BF_RAIL2_ACCEPT); /* exactly 10 % */
    ck_assert_uint_eq(held, 0);
    ck_assert_uint_eq(base, 10);
    ck_assert_int_eq(bf_rail2_admit(true, &base, &held, 0), BF_RAIL2_HOLD); /* base 10: floor */
    base = 9;
    held = 0;
    ck_assert_int_eq(bf_rail2_admit(true, &base, &held, 0), BF_RAIL2_ACCEPT);
    base = 1000;
    ck_assert_int_eq(bf_rail2_admit(false, &base, &held, 0), BF_RAIL2_ACCEPT); /* guard off */
    ck_assert_uint_eq(base, 0);
}
END_TEST

/* ------------------------------------------------------------ arena */

START_TEST(arena_first_fit_coalesces_and_refuses_double_free)
{
    struct bf_arena a;
    ck_assert_int_eq(bf_arena_init(&a, 100), 0);
    uint32_t x, y, z;
    ck_assert_int_eq(bf_arena_alloc(&a, 30, &x), 0);
    ck_assert_int_eq(bf_arena_alloc(&a, 30, &y), 0);
    ck_assert_int_eq(bf_arena_alloc(&a, 30, &z), 0);
    ck_assert_uint_eq(x, 0);
    ck_assert_uint_eq(y, 30);
    ck_assert_uint_eq(z, 60);
    ck_assert_int_eq(bf_arena_alloc(&a, 11, &x), -ENOSPC);
    ck_assert_int_eq(bf_arena_release(&a, 30, 30), 0);
    ck_assert_int_eq(bf_arena_release(&a, 30, 30), -EINVAL); /* double free */
    ck_assert_int_eq(bf_arena_release(&a, 25, 10), -EINVAL); /* overlaps free space */
    ck_assert_int_eq(bf_arena_alloc(&a, 40, &x), -ENOSPC);   /* 30 + 10 free, not contiguous */
    ck_assert_int_eq(bf_arena_release(&a, 60, 30), 0);       /* joins 30..60 and 90..100 */
    ck_assert_uint_eq(a.n_free, 1);
    ck_assert_uint_eq(bf_arena_largest(&a), 70);
    ck_assert_int_eq(bf_arena_alloc(&a, 70, &x), 0);
    ck_assert_uint_eq(x, 30);
    ck_assert_uint_eq(a.free_rows, 0);
    ck_assert_int_eq(bf_arena_release(&a, 95, 10), -EINVAL); /* past the end */
    bf_arena_destroy(&a);
}
END_TEST

START_TEST(arena_rebuild_from_published_extents_and_alloc_below)
{
    struct bf_arena a;
    ck_assert_int_eq(bf_arena_init(&a, 100), 0);
    struct bf_extent live[] = {{50, 10}, {0, 5}, {7, 0}, {80, 20}};
    ck_assert_int_eq(bf_arena_rebuild(&a, live, 4), 0);
    ck_assert_uint_eq(a.free_rows, 65);
    ck_assert_uint_eq(a.n_free, 2); /* 5..50, 60..80 */
    uint32_t off;
    ck_assert_int_eq(bf_arena_alloc_below(&a, 20, 10, &off), 0);
    ck_assert_uint_eq(off, 5);
    ck_assert_int_eq(bf_arena_alloc_below(&a, 30, 40, &off), -ENOSPC); /* 25..50 is too short */
    ck_assert_int_eq(bf_arena_alloc_high(&a, 5, &off), 0);
    ck_assert_uint_eq(off, 75); /* top of 60..80 */
    ck_assert_int_eq(bf_arena_alloc_high(&a, 20, &off), 0);
    ck_assert_uint_eq(off, 30); /* 60..75 too short now: top of 25..50 */
    ck_assert_int_eq(bf_arena_alloc_high(&a, 16, &off), -ENOSPC);
    struct bf_extent bad[] = {{0, 10}, {5, 10}};
    ck_assert_int_eq(bf_arena_rebuild(&a, bad, 2), -EINVAL);
    ck_assert_uint_eq(a.free_rows, 100);
    struct bf_extent out[] = {{95, 10}};
    ck_assert_int_eq(bf_arena_rebuild(&a, out, 1), -EINVAL);
    bf_arena_destroy(&a);
}
END_TEST

START_TEST(arena_random_operations_match_a_bitmap_model)
{
    enum { CAP = 512 };
    struct bf_arena a;
    ck_assert_int_eq(bf_arena_init(&a, CAP), 0);
    uint8_t used[CAP] = {0};
    struct bf_extent live[64];
    int nlive = 0;
    srand(7);
    for (int it = 0; it < 20000; it++) {
        if (nlive < 64 && (rand() & 1)) {
            uint32_t len = 1 + (uint32_t)(rand() % 40), off;
            /* model: first run of len free rows */
            int want = -1;
            for (int s = 0, run = 0; s < CAP; s++) {
                run = used[s] ? 0 : run + 1;
                if (run == (int)len) {
                    want = s - (int)len + 1;
                    break;
                }
            }
            int rc = bf_arena_alloc(&a, len, &off);
            if (want < 0) {
                ck_assert_int_eq(rc, -ENOSPC);
            } else {
                ck_assert_int_eq(rc, 0);
                ck_assert_uint_eq(off, (uint32_t)want);
                memset(used + off, 1, len);
                live[nlive++] = (struct bf_extent){off, len};
            }
        } else if (nlive) {
            int k = rand() % nlive;
            ck_assert_int_eq(bf_arena_release(&a, live[k].off, live[k].len), 0);
            memset(used + live[k].off, 0, live[k].len);
            live[k] = live[--nlive];
        }
        uint32_t f = 0;
        for (int s = 0; s < CAP; s++)
            f += !used[s];
        ck_assert_uint_eq(a.free_rows, f);
    }
    bf_arena_destroy(&a);
}
END_TEST

START_TEST(arena_compaction_moves_extents_down_into_free_space_until_the_run_fits)
{
    enum { CAP = 32 };
    struct bf_arena a;
    ck_assert_int_eq(bf_arena_init(&a, CAP), 0);
    /* eight 1-row extents at 0, 4, ..., 28: 24 rows free, no run longer than 3 */
    struct bf_arena_live live[8];
    struct bf_extent ext[8];
    for (uint32_t i = 0; i < 8; i++) {
        live[i] = (struct bf_arena_live){100 + i, i * 4, 1};
        ext[i] = (struct bf_extent){i * 4, 1};
    }
    ck_assert_int_eq(bf_arena_rebuild(&a, ext, 8), 0);
    ck_assert_uint_eq(bf_arena_largest(&a), 3);
    struct bf_arena_move mv[8];
    uint32_t moved, off;
    int rc = bf_arena_compact(&a, live, 8, 8, mv, &moved, &off);
    ck_assert_int_ge(rc, 1);
    ck_assert_uint_eq((uint32_t)rc, moved);
    /* execute the plan on an ownership map: every destination must be free
     * when its move runs, and the final run must be free of every owner */
    int owner[CAP];
    for (int i = 0; i < CAP; i++)
        owner[i] = -1;
    for (int i = 0; i < 8; i++)
        owner[i * 4] = 100 + i;
    for (uint32_t k = 0; k < moved; k++) {
        ck_assert_uint_lt(mv[k].to, mv[k].from);
        for (uint32_t r = 0; r < mv[k].len; r++) {
            ck_assert_int_eq(owner[mv[k].from + r], (int)mv[k].idx);
            ck_assert_int_eq(owner[mv[k].to + r], -1);
        }
        for (uint32_t r = 0; r < mv[k].len; r++) {
            owner[mv[k].from + r] = -1;
            owner[mv[k].to + r] = (int)mv[k].idx;
        }
    }
    for (uint32_t r = 0; r < 8; r++)
        ck_assert_int_eq(owner[off + r], -1);
    ck_assert_uint_eq(a.free_rows, CAP - 8 - 8);
    /* nothing left to gain: asking for more than the free space fails cleanly */
    ck_assert_int_eq(bf_arena_compact(&a, live, 8, 17, mv, &moved, &off), -ENOSPC);
    bf_arena_destroy(&a);
}
END_TEST

/* ------------------------------------------------------------ outbox */

static const struct bf_outbox_limits LIM = {.max_frame_bytes = 100, .max_frames = 4, .max_keys = 3};

START_TEST(outbox_frames_are_fifo_bounded_and_never_dropped_silently)
{
    struct bf_outbox o;
    bf_outbox_init(&o, &LIM);
    ck_assert_int_eq(bf_outbox_push_frame(&o, "a", 1), 0);
    ck_assert_int_eq(bf_outbox_push_frame(&o, "bb", 2), 0);
    ck_assert_int_eq(bf_outbox_push_frame(&o, "ccc", 3), 0);
    char big[95];
    memset(big, 'x', sizeof big);
    ck_assert_int_eq(bf_outbox_push_frame(&o, big, sizeof big), -ENOBUFS); /* bytes */
    ck_assert_int_eq(bf_outbox_push_frame(&o, "d", 1), 0);
    ck_assert_int_eq(bf_outbox_push_frame(&o, "e", 1), -ENOBUFS); /* count */
    ck_assert_uint_eq(bf_outbox_count(&o), 4);
    struct bf_outbox_item it;
    const char *want[] = {"a", "bb", "ccc", "d"};
    for (int i = 0; i < 4; i++) {
        bf_outbox_peek(&o, &it);
        ck_assert_int_eq(it.kind, BF_OUTBOX_FRAME);
        ck_assert_uint_eq(it.len, strlen(want[i]));
        ck_assert_int_eq(memcmp(it.data, want[i], it.len), 0);
        bf_outbox_pop(&o);
    }
    bf_outbox_peek(&o, &it);
    ck_assert_int_eq(it.kind, BF_OUTBOX_EMPTY);
    ck_assert_uint_eq(o.frame_bytes, 0);
    bf_outbox_reset(&o);
}
END_TEST

START_TEST(outbox_coalesces_by_key_in_place_after_frames)
{
    struct bf_outbox o;
    bf_outbox_init(&o, &LIM);
    ck_assert_int_eq(bf_outbox_put_keyed(&o, 10, "v1", 2), 0);
    ck_assert_int_eq(bf_outbox_put_keyed(&o, 20, "w1", 2), 0);
    ck_assert_int_eq(bf_outbox_push_frame(&o, "ack", 3), 0);
    ck_assert_int_eq(bf_outbox_put_keyed(&o, 10, "v2", 2), 1); /* replaced in place */
    ck_assert_int_eq(bf_outbox_put_keyed(&o, 30, "x1", 2), 0);
    ck_assert_int_eq(bf_outbox_put_keyed(&o, 40, "y1", 2), -ENOBUFS); /* max_keys */
    ck_assert_uint_eq(o.coalesced, 1);
    ck_assert_uint_eq(o.dropped, 1);
    struct bf_outbox_item it;
    bf_outbox_peek(&o, &it);
    ck_assert_int_eq(it.kind, BF_OUTBOX_FRAME);
    bf_outbox_pop(&o);
    uint64_t keys[] = {10, 20, 30};
    const char *vals[] = {"v2", "w1", "x1"};
    for (int i = 0; i < 3; i++) {
        bf_outbox_peek(&o, &it);
        ck_assert_int_eq(it.kind, BF_OUTBOX_KEYED);
        ck_assert_uint_eq(it.key, keys[i]);
        ck_assert_int_eq(memcmp(it.data, vals[i], 2), 0);
        bf_outbox_pop(&o);
    }
    ck_assert_uint_eq(bf_outbox_count(&o), 0);
    ck_assert_int_eq(bf_outbox_put_keyed(&o, 10, "v3", 2), 0); /* a new key again */
    bf_outbox_reset(&o);
}
END_TEST

START_TEST(outbox_keyed_random_operations_match_a_model)
{
    struct bf_outbox_limits lim = {.max_frame_bytes = 1, .max_frames = 1, .max_keys = 5000};
    struct bf_outbox o;
    bf_outbox_init(&o, &lim);
    enum { NK = 700 };
    static int seq_of[NK]; /* model: queued order stamp per key, 0 = absent */
    static uint32_t val_of[NK];
    memset(seq_of, 0, sizeof seq_of);
    int stamp = 0;
    srand(11);
    for (int it = 0; it < 100000; it++) {
        if (rand() % 3) {
            int k = rand() % NK;
            uint32_t v = (uint32_t)rand();
            int rc = bf_outbox_put_keyed(&o, (uint64_t)k * 0x9E3779B97F4A7C15ULL, &v, 4);
            ck_assert_int_eq(rc, seq_of[k] ? 1 : 0);
            if (!seq_of[k])
                seq_of[k] = ++stamp;
            val_of[k] = v;
        } else {
            struct bf_outbox_item x;
            bf_outbox_peek(&o, &x);
            int best = -1;
            for (int k = 0; k < NK; k++)
                if (seq_of[k] && (best < 0 || seq_of[k] < seq_of[best]))
                    best = k;
            if (best < 0) {
                ck_assert_int_eq(x.kind, BF_OUTBOX_EMPTY);
                continue;
            }
            ck_assert_int_eq(x.kind, BF_OUTBOX_KEYED);
            ck_assert_uint_eq(x.key, (uint64_t)best * 0x9E3779B97F4A7C15ULL);
            uint32_t v;
            memcpy(&v, x.data, 4);
            ck_assert_uint_eq(v, val_of[best]);
            bf_outbox_pop(&o);
            seq_of[best] = 0;
        }
    }
    bf_outbox_reset(&o);
}
END_TEST

/* ------------------------------------------------------------ reflection */

/* Found by fuzz_health_reflection: a request carrying an unknown field
 * numbered 0 (protobuf-c accepts one written in two bytes) was echoed as
 * original_request with that field, which protobuf-c packs as a one-byte
 * tag 0: the response decoded nowhere (grpcurl, grpc-js, protobuf-c). */
START_TEST(reflection_echo_of_a_request_with_an_unknown_field_zero_decodes)
{
    /* host "h", list_services "", then field 0 (wire type 1) in two bytes */
    const uint8_t req[] = {0x0a, 0x01, 'h', 0x3a, 0x00, 0x81, 0x00, 1, 2, 3, 4, 5, 6, 7, 8};
    uint8_t *out;
    size_t outlen;
    struct ss_reflection_info info;
    ck_assert_int_eq(bf_session_reflection_answer(req, sizeof req, &out, &outlen, &info), 0);
    Grpc__Reflection__V1__ServerReflectionResponse *r =
        grpc__reflection__v1__server_reflection_response__unpack(NULL, outlen, out);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(
        r->message_response_case,
        GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_LIST_SERVICES_RESPONSE);
    ck_assert_str_eq(r->valid_host, "h");
    ck_assert_ptr_nonnull(r->original_request);
    ck_assert_str_eq(r->original_request->host, "h");
    ck_assert_int_eq(
        r->original_request->message_request_case,
        GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_LIST_SERVICES);
    ck_assert_uint_eq(r->original_request->base.n_unknown_fields, 0);
    grpc__reflection__v1__server_reflection_response__free_unpacked(r, NULL);
    free(out);
    /* a request that does not decode is refused, nothing allocated */
    const uint8_t bad[] = {0x0a, 0x05, 'h'};
    ck_assert_int_eq(bf_session_reflection_answer(bad, sizeof bad, &out, &outlen, &info), -EBADMSG);
    ck_assert_ptr_null(out);
}
END_TEST

/* ------------------------------------------------------------ the growing arena */

/* The ingest lane against segments whose need-row arena starts at its first
 * step (1 MiB: 6,553 rows of a 16,384-Need reserve). */
struct lane {
    struct bf_config cfg;
    struct cluster_tab ct;
    struct ingest *ig;
    int efd;
};

static void lane_start(struct lane *l)
{
    struct bf_shm_caps caps = {.max_machines = 1024, .max_needs = 16384, .max_clusters = 16};
    shm_fixture_remove();
    shm_fixture_create("session", &caps, 1);
    bf_config_defaults(&l->cfg);
    l->cfg.max_needs = caps.max_needs;
    l->cfg.cluster_max_needs = caps.max_needs;
    l->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    ck_assert_int_ge(l->efd, 0);
    ck_assert_int_eq(bf_ctab_init(&l->ct, &g_s), 0);
    ck_assert_int_eq(bf_ingest_start(&l->ig, &g_s, &l->cfg, &l->ct, l->efd), 0);
}

static void lane_stop(struct lane *l)
{
    bf_ingest_stop(l->ig);
    bf_ctab_destroy(&l->ct);
    close(l->efd);
}

/* Registers a cluster row as the session does for a new stream. */
static uint32_t lane_cluster(struct lane *l, const char *name)
{
    uint32_t ref;
    ck_assert_int_eq(bf_str_intern_cstr(&g_s, name, &ref), 0);
    pthread_mutex_lock(&l->ct.mu);
    uint32_t n = l->ct.n;
    memset(&l->ct.rec[n], 0, sizeof l->ct.rec[n]);
    l->ct.rec[n].name_ref = ref;
    l->ct.rec[n].in_use = 1;
    bf_ctab_publish_locked(&l->ct, n);
    l->ct.n = n + 1;
    BF_SHARED_STORE(g_s.needs->n_clusters, n + 1);
    pthread_mutex_unlock(&l->ct.mu);
    return n;
}

/* Submits a rollup of n distinct Needs (priorities base .. base + n - 1)
 * and waits (bounded) for its outcome. */
static int lane_rollup(struct lane *l, uint32_t cidx, const char *name, int base, size_t n)
{
    struct nb *b = calloc(n, sizeof *b);
    ck_assert_ptr_nonnull(b);
    for (size_t i = 0; i < n; i++) {
        nb_init(&b[i], base + (int)i);
        nb_agg(&b[i], "cpu", "1");
    }
    static uint64_t serial;
    struct ingest_buf rb = {0};
    rb.heap = pack_rollup(name, 1000 + (int64_t)serial, b, n, &rb.len);
    rb.data = rb.heap;
    free(b);
    ck_assert_int_ge(bf_ingest_submit(l->ig, cidx, ++serial, &rb, bf_now_ns()), 0);
    for (int t = 0; t < 20000; t++) {
        struct ingest_done d;
        if (bf_ingest_take_done(l->ig, &d, 1) == 1) {
            ck_assert_uint_eq(d.serial, serial);
            return d.outcome;
        }
        usleep(1000);
    }
    ck_abort_msg("no ingest outcome within 20 s");
    return -1;
}

/* A reader attached on its own (as the cycle and bigfleet-inspect are)
 * copies the cluster's published rows: n rows of priorities base.. */
static void reader_sees_rows(uint32_t cidx, int base, uint32_t n)
{
    struct bf_shm r;
    char err[256];
    ck_assert_msg(bf_shm_attach(&r, g_id, true, err, sizeof err) == 0, "%s", err);
    struct bf_need_row *rows = calloc(n + 1, sizeof *rows);
    struct bf_cluster_rec rec;
    ck_assert_int_eq(bf_needs_copy(&r, cidx, &rec, rows, n + 1), (int)n);
    ck_assert_uint_le((uint64_t)rec.rows_off + n, bf_needs_rows_backed(&r));
    struct bf_blob_cache *c = bf_blob_cache_new();
    bool seen_last = false;
    for (uint32_t i = 0; i < n; i++) {
        const struct bf_nprofile *p = bf_nprofile_get(c, &r, rows[i].profile_ref);
        ck_assert_ptr_nonnull(p);
        ck_assert_int_ge(p->p.priority, base);
        ck_assert_int_lt(p->p.priority, base + (int)n);
        seen_last |= p->p.priority == base + (int)n - 1;
    }
    ck_assert(seen_last);
    bf_blob_cache_free(c);
    free(rows);
    bf_shm_detach(&r);
}

/* i18-needseg (stop 33): the need-row arena is the needs segment's last
 * table and grows with use. A rollup whose rows lie past the first step
 * grows the file before they are written; a reader attached on its own
 * copies them; the segment's bytes follow. */
START_TEST(a_rollup_past_the_backed_rows_grows_the_needs_file_and_readers_see_it)
{
    struct lane l;
    lane_start(&l);
    uint64_t file0 = shm_fixture_file_bytes(BF_SEG_NEEDS);
    uint32_t backed0 = bf_needs_rows_backed(&g_s);
    ck_assert_uint_eq(backed0, (1u << 20) / sizeof(struct bf_need_row)); /* the first step */
    ck_assert_uint_lt(backed0, BF_NEED_ROWS_PER_NEED * g_s.max_needs);
    uint32_t a = lane_cluster(&l, "cluster-a");
    ck_assert_int_eq(lane_rollup(&l, a, "cluster-a", 10, 100), INGEST_ACCEPTED);
    ck_assert_uint_eq(shm_fixture_file_bytes(BF_SEG_NEEDS), file0); /* 100 rows: no growth */
    uint32_t b = lane_cluster(&l, "cluster-b");
    ck_assert_int_eq(lane_rollup(&l, b, "cluster-b", 100000, 7000), INGEST_ACCEPTED);
    struct bf_cluster_rec rb;
    ck_assert_int_eq(bf_cluster_read(&g_s, b, &rb, NULL), 0);
    ck_assert_uint_eq(rb.rows_count, 7000);
    ck_assert_uint_eq(rb.rows_off, 100); /* lowest-first: right after cluster-a */
    ck_assert_uint_ge(bf_needs_rows_backed(&g_s), 7100);
    ck_assert_uint_gt(shm_fixture_file_bytes(BF_SEG_NEEDS), file0);
    ck_assert_uint_eq(bf_shm_segment_bytes(&g_s, BF_SEG_NEEDS),
                      shm_fixture_file_bytes(BF_SEG_NEEDS));
    reader_sees_rows(a, 10, 100);
    reader_sees_rows(b, 100000, 7000);
    /* a replacement goes lowest-first too (not to the arena's far end): the
     * file follows the rows in use + one replacement, not the reserve */
    uint64_t file1 = shm_fixture_file_bytes(BF_SEG_NEEDS);
    ck_assert_int_eq(lane_rollup(&l, a, "cluster-a", 20, 150), INGEST_ACCEPTED);
    struct bf_cluster_rec ra;
    ck_assert_int_eq(bf_cluster_read(&g_s, a, &ra, NULL), 0);
    ck_assert_uint_eq(ra.rows_off, 7100);
    ck_assert_uint_eq(shm_fixture_file_bytes(BF_SEG_NEEDS), file1);
    ck_assert_uint_lt(bf_needs_rows_backed(&g_s), g_s.max_needs);
    reader_sees_rows(a, 20, 150);
    lane_stop(&l);
}
END_TEST

/* A reader of the segments is an untrusted-input reader (bigfleet-inspect on
 * a damaged file): a cluster row whose extent lies past the backed rows is
 * refused (-EAGAIN), never read (it would be SIGBUS past the file's end). */
START_TEST(a_cluster_row_pointing_past_the_backed_rows_is_refused_not_read)
{
    struct lane l;
    lane_start(&l);
    uint32_t a = lane_cluster(&l, "cluster-a");
    ck_assert_int_eq(lane_rollup(&l, a, "cluster-a", 10, 100), INGEST_ACCEPTED);
    lane_stop(&l);
    struct bf_cluster_rec rec;
    ck_assert_int_eq(bf_cluster_read(&g_s, a, &rec, NULL), 0);
    uint32_t backed = bf_needs_rows_backed(&g_s);
    ck_assert_uint_lt(backed, BF_NEED_ROWS_PER_NEED * g_s.max_needs);
    struct bf_shm r;
    char err[256];
    ck_assert_msg(bf_shm_attach(&r, g_id, true, err, sizeof err) == 0, "%s", err);
    static struct bf_need_row rows[64];
    struct bf_cluster_rec got;
    const uint32_t offs[] = {backed, backed - 10, BF_NEED_ROWS_PER_NEED * g_s.max_needs - 8,
                             UINT32_MAX - 4};
    for (size_t i = 0; i < sizeof offs / sizeof offs[0]; i++) {
        rec.rows_off = offs[i];
        rec.rows_count = 20;
        bf_cluster_write(&g_s, a, &rec);
        ck_assert_int_eq(bf_needs_copy(&r, a, &got, rows, 64), -EAGAIN);
    }
    bf_shm_detach(&r);
}
END_TEST

/* When the file cannot grow (here RLIMIT_FSIZE; tmpfs full in the field),
 * the rollup that needed the rows is rejected and counted, the cluster keeps
 * its published rows, the others are untouched; once the file can grow
 * again the next rollup is accepted. */
START_TEST(a_rollup_the_needs_file_cannot_grow_for_is_rejected_and_the_rows_stay)
{
    struct lane l;
    lane_start(&l);
    signal(SIGXFSZ, SIG_IGN);
    uint32_t a = lane_cluster(&l, "cluster-a");
    ck_assert_int_eq(lane_rollup(&l, a, "cluster-a", 10, 3000), INGEST_ACCEPTED);
    uint32_t b = lane_cluster(&l, "cluster-b");
    ck_assert_int_eq(lane_rollup(&l, b, "cluster-b", 50000, 2000), INGEST_ACCEPTED);
    struct bf_cluster_rec before;
    ck_assert_int_eq(bf_cluster_read(&g_s, b, &before, NULL), 0);
    uint64_t file0 = shm_fixture_file_bytes(BF_SEG_NEEDS);
    uint32_t backed0 = bf_needs_rows_backed(&g_s);
    uint64_t rejected0 = BF_STAT_GET(g_s.st->session.rollups_rejected);
    struct rlimit rl;
    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &rl), 0);
    struct rlimit lim = {.rlim_cur = file0, .rlim_max = rl.rlim_max};
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    /* cluster-b's replacement: 5000 rows past the 5000 in use, past the first step */
    ck_assert_int_eq(lane_rollup(&l, b, "cluster-b", 70000, 5000), INGEST_REJECTED);
    ck_assert_uint_eq(BF_STAT_GET(g_s.st->session.rollups_rejected), rejected0 + 1);
    ck_assert_uint_eq(shm_fixture_file_bytes(BF_SEG_NEEDS), file0);
    ck_assert_uint_eq(bf_needs_rows_backed(&g_s), backed0);
    struct bf_cluster_rec after;
    ck_assert_int_eq(bf_cluster_read(&g_s, b, &after, NULL), 0);
    ck_assert_uint_eq(after.rows_off, before.rows_off);
    ck_assert_uint_eq(after.rows_count, 2000);
    ck_assert_uint_eq(after.generation, before.generation);
    reader_sees_rows(a, 10, 3000);
    reader_sees_rows(b, 50000, 2000);
    /* the file can grow again: the same replacement is accepted */
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
    ck_assert_int_eq(lane_rollup(&l, b, "cluster-b", 70000, 5000), INGEST_ACCEPTED);
    ck_assert_uint_gt(shm_fixture_file_bytes(BF_SEG_NEEDS), file0);
    reader_sees_rows(b, 70000, 5000);
    reader_sees_rows(a, 10, 3000);
    lane_stop(&l);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("session");
    TCase *w = tcase_create("wire");
    tcase_add_test(w, classify_routes_on_the_last_oneof_member_like_protobuf);
    tcase_add_test(w, classify_rejects_truncated_and_wrong_wire_types);
    tcase_add_test(w, hello_cluster_id_is_read_byte_exact_and_validated);
    suite_add_tcase(s, w);
    TCase *r = tcase_create("rollup");
    tcase_add_checked_fixture(r, setup, teardown);
    tcase_add_test(r, rollup_converts_profile_same_min_unit_group_and_arrival);
    tcase_add_test(r, duplicate_needs_merge_sum_aggregate_and_max_min_unit);
    tcase_add_test(r, needs_differing_in_one_profile_key_field_never_share_a_profile);
    tcase_add_test(r, rollup_rejects_negative_and_unparseable_quantities_naming_them);
    tcase_add_test(r, rollup_rejects_unknown_enum_values);
    tcase_add_test(r, rollup_rejects_a_nul_byte_in_a_requirement_instead_of_cutting_it);
    tcase_add_test(r, rollup_rejects_too_many_needs_malformed_bytes_and_foreign_cluster);
    tcase_add_test(r, repeated_rollup_interns_nothing_new_and_reserve_guards_the_string_table);
    tcase_add_test(r, a_large_new_profile_cannot_eat_into_the_string_table_reserve);
    tcase_add_test(r, empty_rollup_converts_to_zero_rows);
    tcase_add_test(r, unknown_resource_names_are_listed_never_registered_by_convert);
    tcase_add_test(r, group_and_string_table_quotas_reject_with_the_quota_named);
    tcase_add_test(r, priorities_above_the_cap_are_clamped_and_counted);
    tcase_add_test(r, timestamps_in_the_future_or_stale_give_way_to_the_receive_time);
    tcase_add_test(r, unchanged_rollup_digest_ignores_only_the_timestamp);
    tcase_add_test(r, repeat_rebuilds_the_published_rows_with_the_new_arrival);
    tcase_add_test(r, republished_repeat_reads_back_through_needs_copy_as_the_full_conversion);
    tcase_add_test(r, map_entries_in_any_valid_encoding_convert_to_the_same_row);
    tcase_add_test(r, many_profiles_and_repeating_quantities_convert_exactly);
    tcase_add_test(r, stamps_observed_moves_only_when_an_observation_is_recorded);
    tcase_add_test(r, oversized_needs_and_groups_are_rejected_before_interning);
    tcase_add_test(r, explicit_zero_dimension_converts_like_an_absent_one);
    tcase_add_test(r, duplicate_rows_merge_but_rail2_counts_the_needs_received);
    tcase_add_test(r, incremental_conversion_equals_the_full_one_under_random_edits);
    tcase_add_test(r, a_malformed_need_in_an_otherwise_reusable_rollup_is_still_rejected);
    tcase_add_test(r,
                   a_changed_need_that_merges_with_a_reused_one_merges_as_in_the_full_conversion);
    tcase_add_test(r,
                   a_large_rollup_with_every_need_changed_merges_duplicates_as_the_full_conversion);
    tcase_add_test(
        r, the_needs_hashes_kept_by_the_digest_serve_only_the_next_conversion_of_those_bytes);
    suite_add_tcase(s, r);
    TCase *q = tcase_create("rail2");
    tcase_add_test(q, rail2_holds_a_collapse_until_three_consecutive_rollups_confirm_it);
    tcase_add_test(q, rail2_a_normal_rollup_resets_the_hold_and_ten_percent_is_kept);

    suite_add_tcase(s, q);
    TCase *a = tcase_create("arena");
    tcase_add_test(a, arena_first_fit_coalesces_and_refuses_double_free);
    tcase_add_test(a, arena_rebuild_from_published_extents_and_alloc_below);
    tcase_add_test(a, arena_random_operations_match_a_bitmap_model);
    tcase_add_test(a, arena_compaction_moves_extents_down_into_free_space_until_the_run_fits);
    suite_add_tcase(s, a);
    TCase *g = tcase_create("arena_file");
    tcase_add_checked_fixture(g, setup, teardown);
    tcase_set_timeout(g, 60);
    tcase_add_test(g, a_rollup_past_the_backed_rows_grows_the_needs_file_and_readers_see_it);
    tcase_add_test(g, a_rollup_the_needs_file_cannot_grow_for_is_rejected_and_the_rows_stay);
    tcase_add_test(g, a_cluster_row_pointing_past_the_backed_rows_is_refused_not_read);
    suite_add_tcase(s, g);
    TCase *o = tcase_create("outbox");
    tcase_add_test(o, outbox_frames_are_fifo_bounded_and_never_dropped_silently);
    tcase_add_test(o, outbox_coalesces_by_key_in_place_after_frames);
    tcase_add_test(o, outbox_keyed_random_operations_match_a_model);
    suite_add_tcase(s, o);
    TCase *rf = tcase_create("reflection");
    tcase_add_test(rf, reflection_echo_of_a_request_with_an_unknown_field_zero_decodes);
    suite_add_tcase(s, rf);
    return s;
}

int main(void)
{
    return check_run(suite());
}
