/*
 * test_pbdecode.c — bounded protobuf-c decoding of untrusted bytes
 * (bigfleet/pbdecode.h): unknown fields are counted and dropped at every
 * depth without amplification, known data decodes exactly as protobuf-c
 * decodes it, repeated-field amplification is refused with -E2BIG, and
 * malformed wire data (groups, long varints, lengths past the end, wrong
 * wire types) is -EBADMSG.
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/pbdecode.h"
#include "bigfleet/v1alpha1/capacity.pb-c.h"
#include "bigfleet/v1alpha1/coordinator.pb-c.h"
#include "bigfleet/v1alpha1/shard.pb-c.h"
#include "check_run.h"

struct buf {
    uint8_t *p;
    size_t len, cap;
};

static void put(struct buf *b, const void *p, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

static void put_varint(struct buf *b, uint64_t v)
{
    uint8_t t[10];
    size_t n = 0;
    do {
        t[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v)
            t[n] |= 0x80;
        n++;
    } while (v);
    put(b, t, n);
}

static void put_len(struct buf *b, uint32_t field, const void *p, size_t n)
{
    put_varint(b, (uint64_t)field << 3 | 2);
    put_varint(b, n);
    put(b, p, n);
}

static ProtobufCMessage *decode(const ProtobufCMessageDescriptor *d, const struct buf *b,
                                struct bf_pb_decode_info *info, int *rc)
{
    ProtobufCMessage *m = NULL;
    *rc = bf_pb_unpack(d, b->p, b->len, &m, info);
    return m;
}

START_TEST(known_fields_decode_as_protobuf_c_does)
{
    Bigfleet__V1alpha1__NodeSelectorRequirement r =
        BIGFLEET__V1ALPHA1__NODE_SELECTOR_REQUIREMENT__INIT;
    char *vals[] = {"m6i.large", "c6i.4xlarge"};
    r.key = "node.kubernetes.io/instance-type";
    r.operator_ = 1;
    r.n_values = 2;
    r.values = vals;
    Bigfleet__V1alpha1__NodeSelectorRequirement *rp = &r;
    Bigfleet__V1alpha1__CapacityNeed n = BIGFLEET__V1ALPHA1__CAPACITY_NEED__INIT;
    n.n_requirements = 1;
    n.requirements = &rp;
    n.priority = 1000;
    struct buf b = {0};
    b.cap = bigfleet__v1alpha1__capacity_need__get_packed_size(&n);
    b.p = malloc(b.cap);
    b.len = bigfleet__v1alpha1__capacity_need__pack(&n, b.p);
    struct bf_pb_decode_info info;
    int rc;
    Bigfleet__V1alpha1__CapacityNeed *m = (Bigfleet__V1alpha1__CapacityNeed *)decode(
        &bigfleet__v1alpha1__capacity_need__descriptor, &b, &info, &rc);
    ck_assert_int_eq(rc, 0);
    ck_assert_uint_eq(info.unknown_fields, 0);
    ck_assert_int_eq(m->priority, 1000);
    ck_assert_uint_eq(m->n_requirements, 1);
    ck_assert_str_eq(m->requirements[0]->key, "node.kubernetes.io/instance-type");
    ck_assert_uint_eq(m->requirements[0]->n_values, 2);
    ck_assert_str_eq(m->requirements[0]->values[1], "c6i.4xlarge");
    ck_assert_uint_gt(info.charged, 0);
    bigfleet__v1alpha1__capacity_need__free_unpacked(m, NULL); /* plain malloc blocks */
    free(b.p);
}
END_TEST

/* The 48 MiB ReclaimAck, scaled: two-byte unknown varints (field 5,
 * "28 00") around a ReclaimAck cost nothing beyond the ReclaimAck itself. */
START_TEST(unknown_fields_are_counted_and_dropped_without_amplification)
{
    struct buf ack = {0};
    put_len(&ack, 1, "0123456789abcdef", 16);
    put_varint(&ack, 2 << 3);
    put_varint(&ack, 1);
    struct buf b = {0};
    const size_t n_unknown = 2u << 20; /* 4 MiB of unknown fields */
    for (size_t i = 0; i < n_unknown / 2; i++)
        put(&b, "\x28\x00", 2);
    put_len(&b, 4, ack.p, ack.len);
    for (size_t i = 0; i < n_unknown / 2; i++)
        put(&b, "\x28\x00", 2);
    struct bf_pb_decode_info info;
    int rc;
    Bigfleet__V1alpha1__OperatorMessage *m = (Bigfleet__V1alpha1__OperatorMessage *)decode(
        &bigfleet__v1alpha1__operator_message__descriptor, &b, &info, &rc);
    ck_assert_int_eq(rc, 0);
    ck_assert_uint_eq(info.unknown_fields, n_unknown);
    ck_assert_uint_lt(info.charged, 4096); /* protobuf-c alone keeps ~60 bytes per field */
    ck_assert_int_eq(m->payload_case, BIGFLEET__V1ALPHA1__OPERATOR_MESSAGE__PAYLOAD_RECLAIM_ACK);
    ck_assert_str_eq(m->reclaim_ack->instruction_id, "0123456789abcdef");
    ck_assert_int_eq(m->reclaim_ack->nodes_started, 1);
    ck_assert_uint_eq(m->base.n_unknown_fields, 0);
    bigfleet__v1alpha1__operator_message__free_unpacked(m, NULL);
    free(ack.p);
    free(b.p);
}
END_TEST

/* Unknown fields nested two levels down are dropped too, and the enclosing
 * length prefixes shrink (here from 3 bytes to 1) without corrupting the
 * fields that follow. */
START_TEST(nested_unknown_fields_are_dropped_and_prefixes_shrink)
{
    struct buf req = {0};
    put_len(&req, 1, "zone", 4);
    for (int i = 0; i < 40000; i++)
        put(&req, "\x78\x01", 2); /* field 15, varint: unknown */
    put_varint(&req, 2 << 3);
    put_varint(&req, 3); /* Exists */
    struct buf need = {0};
    put_len(&need, 1, req.p, req.len);
    put_varint(&need, 3 << 3);
    put_varint(&need, 77); /* priority, after the nested message */
    put_len(&need, 9, "g1", 2);
    struct bf_pb_decode_info info;
    int rc;
    Bigfleet__V1alpha1__CapacityNeed *m = (Bigfleet__V1alpha1__CapacityNeed *)decode(
        &bigfleet__v1alpha1__capacity_need__descriptor, &need, &info, &rc);
    ck_assert_int_eq(rc, 0);
    ck_assert_uint_eq(info.unknown_fields, 40000);
    ck_assert_uint_eq(m->n_requirements, 1);
    ck_assert_str_eq(m->requirements[0]->key, "zone");
    ck_assert_int_eq(m->requirements[0]->operator_, 3);
    ck_assert_uint_eq(m->requirements[0]->base.n_unknown_fields, 0);
    ck_assert_int_eq(m->priority, 77);

    ck_assert_uint_eq(m->group.len, 2);
    ck_assert_int_eq(memcmp(m->group.data, "g1", 2), 0);
    bigfleet__v1alpha1__capacity_need__free_unpacked(m, NULL);
    /* the same with the requirement's tag and length written non-minimally
     * (0x8a 0x00 = field 1 LEN; 0x8e 0x80 0x00 = 14): decoded the same */
    struct buf odd = {0};
    put(&odd, "\x8a\x00\x8e\x80\x00", 5);
    put_len(&odd, 1, "zone", 4);
    put(&odd, "\x78\x01\x78\x01\x78\x01", 6); /* unknown */
    put(&odd, "\x10\x03", 2);
    m = (Bigfleet__V1alpha1__CapacityNeed *)decode(&bigfleet__v1alpha1__capacity_need__descriptor,
                                                   &odd, &info, &rc);
    ck_assert_int_eq(rc, 0);
    ck_assert_uint_eq(info.unknown_fields, 3);
    ck_assert_uint_eq(m->n_requirements, 1);
    ck_assert_str_eq(m->requirements[0]->key, "zone");
    ck_assert_int_eq(m->requirements[0]->operator_, 3);
    free(odd.p);
    bigfleet__v1alpha1__capacity_need__free_unpacked(m, NULL);
    free(req.p);
    free(need.p);
}
END_TEST

/* Known fields that protobuf-c would blow up 10-30x (empty strings in a
 * repeated field, empty repeated messages) are refused, not decoded. */
/* Found by the fuzz_coord long run: with no unknown field to strip, the
 * decoder handed protobuf-c the caller's bytes but the stripped length,
 * which is shorter when a nested message's length prefix is wider than
 * needed (a valid encoding): the trailing fields were silently cut. */
START_TEST(a_wide_length_prefix_on_a_nested_message_loses_no_trailing_field)
{
    /* ReportAck{instructions: [{}, {}, {}]}, each length 0 written as 80 00,
     * then acknowledged = true */
    static const uint8_t in[] = {0x1a, 0x80, 0x00, 0x1a, 0x80, 0x00, 0x1a, 0x80, 0x00, 0x10, 0x01};
    ProtobufCMessage *m = NULL;
    struct bf_pb_decode_info info;
    ck_assert_int_eq(
        bf_pb_unpack(&bigfleet__v1alpha1__report_ack__descriptor, in, sizeof in, &m, &info), 0);
    const Bigfleet__V1alpha1__ReportAck *a = (const Bigfleet__V1alpha1__ReportAck *)m;
    ck_assert_uint_eq(info.unknown_fields, 0);
    ck_assert_uint_eq(a->n_instructions, 3);
    ck_assert(a->acknowledged);
    protobuf_c_message_free_unpacked(m, NULL);
    /* the same with an unknown field to strip: the rewritten copy is read */
    static const uint8_t in2[] = {0x1a, 0x80, 0x00, 0x1a, 0x80, 0x00, 0x78, 0x05, 0x10, 0x01};
    ck_assert_int_eq(
        bf_pb_unpack(&bigfleet__v1alpha1__report_ack__descriptor, in2, sizeof in2, &m, &info), 0);
    a = (const Bigfleet__V1alpha1__ReportAck *)m;
    ck_assert_uint_eq(info.unknown_fields, 1);
    ck_assert_uint_eq(a->n_instructions, 2);
    ck_assert(a->acknowledged);
    protobuf_c_message_free_unpacked(m, NULL);
}
END_TEST

START_TEST(repeated_field_amplification_is_refused)
{
    struct buf req = {0};
    put_len(&req, 1, "k", 1);
    for (int i = 0; i < 200000; i++)
        put(&req, "\x1a\x00", 2); /* values: "" */
    struct bf_pb_decode_info info;
    int rc;
    ProtobufCMessage *m =
        decode(&bigfleet__v1alpha1__node_selector_requirement__descriptor, &req, &info, &rc);
    ck_assert_ptr_null(m);
    ck_assert_int_eq(rc, -E2BIG);
    ck_assert_uint_le(info.charged, 3 * req.len + BF_PB_DECODE_SLACK);
    struct buf need = {0};
    for (int i = 0; i < 200000; i++)
        put(&need, "\x0a\x00", 2); /* requirements: empty messages */
    m = decode(&bigfleet__v1alpha1__capacity_need__descriptor, &need, &info, &rc);
    ck_assert_ptr_null(m);
    ck_assert_int_eq(rc, -E2BIG);
    /* a long In list of real values (5,000 instance types) decodes; protobuf-c
     * spends ~56 bytes per 11-byte value at its peak (scan table, pointer,
     * string), which the 256 KiB slack covers up to ~10,000 such values */
    struct buf ok = {0};
    put_len(&ok, 1, "k", 1);
    for (int i = 0; i < 5000; i++)
        put_len(&ok, 3, "m6i.large", 9);
    m = decode(&bigfleet__v1alpha1__node_selector_requirement__descriptor, &ok, &info, &rc);
    ck_assert_int_eq(rc, 0);
    ck_assert_uint_eq(((Bigfleet__V1alpha1__NodeSelectorRequirement *)m)->n_values, 5000);
    protobuf_c_message_free_unpacked(m, NULL);
    free(req.p);
    free(need.p);
    free(ok.p);
}
END_TEST

START_TEST(malformed_wire_data_is_rejected)
{
    const ProtobufCMessageDescriptor *d = &bigfleet__v1alpha1__reclaim_ack__descriptor;
    static const struct {
        const char *what;
        const char *bytes;
        size_t len;
    } bad[] = {
        {"group start", "\x0b\x0c", 2},
        {"reserved wire type", "\x0e", 1},
        {"field number 0", "\x00\x01", 2},
        {"11-byte varint", "\x10\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12},
        {"10th varint byte above 1", "\x10\xff\xff\xff\xff\xff\xff\xff\xff\xff\x02", 11},
        {"length past the end",
         "\x0a\x05"
         "abc",
         5},
        {"truncated fixed64 (unknown field)", "\x49\x01\x02", 3},
        {"string field as varint", "\x08\x01", 2},
        {"int32 field as length", "\x12\x01\x00", 3},
        {"unknown field with length past the end", "\x7a\x7f\x00", 3},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ProtobufCMessage *m = NULL;
        int rc = bf_pb_unpack(d, (const uint8_t *)bad[i].bytes, bad[i].len, &m, NULL);
        ck_assert_msg(rc == -EBADMSG && m == NULL, "%s: rc %d", bad[i].what, rc);
    }
    ProtobufCMessage *m = NULL;
    ck_assert_int_eq(bf_pb_unpack(d, NULL, 0, &m, NULL), 0); /* empty = all defaults */
    protobuf_c_message_free_unpacked(m, NULL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("pbdecode");
    TCase *tc = tcase_create("pbdecode");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, known_fields_decode_as_protobuf_c_does);
    tcase_add_test(tc, unknown_fields_are_counted_and_dropped_without_amplification);
    tcase_add_test(tc, nested_unknown_fields_are_dropped_and_prefixes_shrink);
    tcase_add_test(tc, a_wide_length_prefix_on_a_nested_message_loses_no_trailing_field);
    tcase_add_test(tc, repeated_field_amplification_is_refused);
    tcase_add_test(tc, malformed_wire_data_is_rejected);
    suite_add_tcase(s, tc);
    return check_run(s);
}
