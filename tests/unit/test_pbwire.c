/*
 * test_pbwire.c — the protobuf wire module (bigfleet/pbwire.h): varint
 * limits, every wire type read and skipped, groups refused, bounds, the
 * unknown-field scan and strip, the writer against protobuf-c's bytes, and
 * the decoders built on it agreeing on the inputs they used to disagree on.
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/pbwire.h"
#include "bigfleet/provider.h"
#include "bigfleet/opmsg.h"
#include "bigfleet/v1alpha1/capacity.pb-c.h"
#include "bigfleet/v1alpha1/provider.pb-c.h"
#include "check_run.h"

static int read_one_varint(const uint8_t *b, size_t n, uint64_t *v, size_t *used)
{
    const uint8_t *p = b;
    int rc = bf_pb_read_varint(&p, b + n, v);
    *used = (size_t)(p - b);
    return rc;
}

START_TEST(varint_of_ten_bytes_carries_bit_63_and_no_more)
{
    uint64_t v;
    size_t used;
    const uint8_t max[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    ck_assert_int_eq(read_one_varint(max, sizeof max, &v, &used), 0);
    ck_assert_uint_eq(v, UINT64_MAX);
    ck_assert_uint_eq(used, 10);
    const uint8_t over[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02};
    ck_assert_int_eq(read_one_varint(over, sizeof over, &v, &used), -EBADMSG);
    ck_assert_uint_eq(used, 0); /* cursor not advanced */
    const uint8_t eleven[] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x81, 0x00};
    ck_assert_int_eq(read_one_varint(eleven, sizeof eleven, &v, &used), -EBADMSG);
    const uint8_t trunc[] = {0x80, 0x80};
    ck_assert_int_eq(read_one_varint(trunc, sizeof trunc, &v, &used), -EBADMSG);
    ck_assert_int_eq(read_one_varint(trunc, 0, &v, &used), -EBADMSG);
    /* every length class round-trips through the writer */
    for (int bits = 0; bits <= 64; bits++) {
        uint64_t x = bits == 64 ? UINT64_MAX : ((uint64_t)1 << bits) - 1;
        uint8_t buf[16];
        uint8_t *e = bf_pb_put_varint(buf, x);
        ck_assert_uint_eq((size_t)(e - buf), bf_pb_varint_len(x));
        ck_assert_int_eq(read_one_varint(buf, (size_t)(e - buf), &v, &used), 0);
        ck_assert_uint_eq(v, x);
        ck_assert_uint_eq(used, (size_t)(e - buf));
        /* one byte short is truncated */
        ck_assert_int_eq(read_one_varint(buf, (size_t)(e - buf) - 1, &v, &used), -EBADMSG);
    }
}
END_TEST

START_TEST(every_wire_type_reads_and_skips_and_groups_are_refused)
{
    uint8_t buf[64], *p = buf;
    p = bf_pb_put_varint_field(p, 1, 300);
    p = bf_pb_put_fixed64(p, 2, 0x0102030405060708ull);
    p = bf_pb_put_ld(p, 3, "abc", 3);
    p = bf_pb_put_fixed32(p, 4, 0xdeadbeef);
    size_t n = (size_t)(p - buf);
    struct bf_pb_reader r;
    struct bf_pb_field f;
    bf_pb_reader_init(&r, buf, n);
    ck_assert_int_eq(bf_pb_next(&r, &f), 1);
    ck_assert(f.num == 1 && f.wt == BF_PB_VARINT && f.varint == 300);
    ck_assert_int_eq(bf_pb_next(&r, &f), 1);
    ck_assert(f.num == 2 && f.wt == BF_PB_I64 && f.varint == 0x0102030405060708ull);
    ck_assert_int_eq(bf_pb_next(&r, &f), 1);
    ck_assert(f.num == 3 && f.wt == BF_PB_LEN && f.len == 3 && memcmp(f.p, "abc", 3) == 0);
    ck_assert_ptr_eq(f.start, buf + 1 + 2 + 1 + 8);
    ck_assert_ptr_eq(f.end, f.p + 3);
    ck_assert_int_eq(bf_pb_next(&r, &f), 1);
    ck_assert(f.num == 4 && f.wt == BF_PB_I32 && f.varint == 0xdeadbeef);
    ck_assert_int_eq(bf_pb_next(&r, &f), 0);
    /* skip: tag by tag */
    const uint8_t *q = buf, *end = buf + n;
    for (int i = 0; i < 4; i++) {
        uint64_t tag;
        ck_assert_int_eq(bf_pb_read_varint(&q, end, &tag), 0);
        ck_assert_int_eq(bf_pb_skip(&q, end, (int)(tag & 7)), 0);
    }
    ck_assert_ptr_eq(q, end);
    /* groups, wire types 6/7, field 0, a field number over 2^29-1 */
    static const uint8_t bad[][6] = {
        {0x0b, 0x0c},                         /* start group 1, end group 1 */
        {0x0c},                               /* end group */
        {0x0e, 0x00},                         /* wire type 6 */
        {0x0f, 0x00},                         /* wire type 7 */
        {0x00, 0x00},                         /* field 0 */
        {0xf8, 0xff, 0xff, 0xff, 0x7f, 0x00}, /* field 2^32 - 1 */
    };
    static const size_t badlen[] = {2, 1, 2, 2, 2, 6};
    for (size_t i = 0; i < sizeof badlen / sizeof badlen[0]; i++) {
        bf_pb_reader_init(&r, bad[i], badlen[i]);
        ck_assert_int_eq(bf_pb_next(&r, &f), -EBADMSG);
        ck_assert_ptr_eq(r.p, bad[i]); /* not advanced */
    }
    q = bad[0] + 1;
    ck_assert_int_eq(bf_pb_skip(&q, bad[0] + 2, BF_PB_SGROUP), -EBADMSG);
    ck_assert_int_eq(bf_pb_skip(&q, bad[0] + 2, BF_PB_EGROUP), -EBADMSG);
}
END_TEST

START_TEST(lengths_are_bounded_by_the_enclosing_buffer)
{
    /* field 1, LEN, declared 5 bytes, 4 present */
    const uint8_t shortlen[] = {0x0a, 0x05, 'a', 'b', 'c', 'd'};
    struct bf_pb_reader r;
    struct bf_pb_field f;
    bf_pb_reader_init(&r, shortlen, sizeof shortlen);
    ck_assert_int_eq(bf_pb_next(&r, &f), -EBADMSG);
    /* a length near 2^64 must not wrap the pointer */
    const uint8_t huge[] = {0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x00};
    bf_pb_reader_init(&r, huge, sizeof huge);
    ck_assert_int_eq(bf_pb_next(&r, &f), -EBADMSG);
    /* truncated fixed64 / fixed32 */
    const uint8_t f64[] = {0x09, 1, 2, 3, 4, 5, 6, 7};
    const uint8_t f32[] = {0x0d, 1, 2, 3};
    bf_pb_reader_init(&r, f64, sizeof f64);
    ck_assert_int_eq(bf_pb_next(&r, &f), -EBADMSG);
    bf_pb_reader_init(&r, f32, sizeof f32);
    ck_assert_int_eq(bf_pb_next(&r, &f), -EBADMSG);
    /* an empty buffer is an empty message (NULL allowed) */
    bf_pb_reader_init(&r, NULL, 0);
    ck_assert_int_eq(bf_pb_next(&r, &f), 0);
}
END_TEST

START_TEST(scan_counts_unknown_fields_and_strip_removes_them_in_place)
{
    uint8_t buf[128], *p = buf;
    p = bf_pb_put_ld(p, 1, "id", 2);
    p = bf_pb_put_ld(p, 77, "xxxxxxxx", 8); /* unknown, 11 bytes with its 2-byte tag */
    p = bf_pb_put_varint_field(p, 2, 5);
    p = bf_pb_put_fixed32(p, 9, 7); /* unknown, 5 bytes */
    p = bf_pb_put_ld(p, 3, "z", 1);
    size_t n = (size_t)(p - buf);
    uint64_t known = BF_PB_KNOWN(1) | BF_PB_KNOWN(2) | BF_PB_KNOWN(3);
    struct bf_pb_scan st;
    ck_assert_int_eq(bf_pb_scan(buf, n, known, &st), 0);
    ck_assert_uint_eq(st.fields, 5);
    ck_assert_uint_eq(st.unknown, 2);
    ck_assert_uint_eq(st.first_unknown, 77);
    ck_assert_uint_eq(st.unknown_bytes, 2 + 1 + 8 + 1 + 4);
    size_t nl;
    ck_assert_int_eq(bf_pb_strip_unknown(buf, n, known, &nl, NULL), 0);
    ck_assert_uint_eq(nl, n - st.unknown_bytes);
    uint8_t want[64], *w = want;
    w = bf_pb_put_ld(w, 1, "id", 2);
    w = bf_pb_put_varint_field(w, 2, 5);
    w = bf_pb_put_ld(w, 3, "z", 1);
    ck_assert_uint_eq(nl, (size_t)(w - want));
    ck_assert_int_eq(memcmp(buf, want, nl), 0);
    /* a malformed message is refused and left alone */
    uint8_t bad[] = {0x0a, 0x01, 'a', 0x9b, 0x05}; /* field 83 opens a group */
    uint8_t copy[sizeof bad];
    memcpy(copy, bad, sizeof bad);
    ck_assert_int_eq(bf_pb_strip_unknown(bad, sizeof bad, known, &nl, &st), -EBADMSG);
    ck_assert_int_eq(memcmp(bad, copy, sizeof bad), 0);
}
END_TEST

START_TEST(writer_matches_protobuf_c_packing_of_a_machine)
{
    Bigfleet__V1alpha1__Machine m = BIGFLEET__V1ALPHA1__MACHINE__INIT;
    m.id = "m-1";
    m.state = BIGFLEET__V1ALPHA1__MACHINE_STATE__MACHINE_STATE_CONFIGURED;
    m.instance_type = "m6i.large";
    m.price_per_hour = 0.096;
    m.cluster = "c-1";
    uint8_t ref[256];
    size_t rl = bigfleet__v1alpha1__machine__pack(&m, ref);
    uint8_t buf[256], *p = buf;
    p = bf_pb_put_ld(p, 1, "m-1", 3);
    p = bf_pb_put_varint_field(p, 2, (uint64_t)m.state);
    p = bf_pb_put_ld(p, 4, "m6i.large", 9);
    p = bf_pb_put_double(p, 7, 0.096);
    p = bf_pb_put_ld(p, 14, "c-1", 3);
    ck_assert_uint_eq((size_t)(p - buf), rl);
    ck_assert_int_eq(memcmp(buf, ref, rl), 0);
    /* and the provider decoder reads back what was written */
    struct bf_prov_machine d;
    ck_assert_int_eq(bf_prov_machine_decode(buf, rl, &d), 0);
    ck_assert_int_eq(d.state, (int)m.state);
    ck_assert(d.price_per_hour == 0.096);
    ck_assert_uint_eq(d.cluster.len, 3);
}
END_TEST

/* The provider decoder used to accept a 10th varint byte over 64 bits that the
 * session scanner refused: one reader now, one verdict. */
START_TEST(provider_and_session_decoders_agree_on_a_varint_over_64_bits)
{
    const uint8_t msg[] = {0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};
    struct bf_prov_machine m;
    ck_assert_int_eq(bf_prov_machine_decode(msg, sizeof msg, &m), -EBADMSG);
    int payload;
    const uint8_t *sub;
    size_t sublen;
    uint32_t parts, n;
    ck_assert_int_eq(bf_opmsg_classify(msg, sizeof msg, &payload, &sub, &sublen, &parts), -EBADMSG);
    ck_assert_int_eq(bf_rollup_count_needs(msg, sizeof msg, &n), -EBADMSG);
    struct bf_prov_list l;
    ck_assert_int_eq(bf_prov_list_decode(msg, sizeof msg, &l), -EBADMSG);
}
END_TEST

/* Found by fuzz_provider: an empty message with a NULL buffer computed
 * NULL + 0 (undefined behaviour, UBSan pointer-overflow). */
START_TEST(reader_over_a_null_empty_buffer_is_defined)
{
    struct bf_pb_reader r;
    struct bf_pb_field f;
    bf_pb_reader_init(&r, NULL, 0);
    ck_assert_ptr_null(r.end);
    ck_assert_int_eq(bf_pb_next(&r, &f), 0);
    struct bf_pb_scan st;
    ck_assert_int_eq(bf_pb_scan(NULL, 0, 0, &st), 0);
    ck_assert_uint_eq(st.fields, 0);
    struct bf_prov_list l;
    ck_assert_int_eq(bf_prov_list_decode(NULL, 0, &l), 0);
}
END_TEST

/* Found by fuzz_rollup: the reader took a tag or a length written in six
 * or more (zero-padded) bytes, which protobuf-c and C++ protobuf (protoc
 * --decode) both refuse: the session accepted rollups every other
 * implementation rejects. */
START_TEST(tags_and_lengths_over_five_bytes_are_refused_like_protobuf_c_and_cpp)
{
    struct bf_pb_reader r;
    struct bf_pb_field f;
    /* field 10, fixed64: the tag in 5 bytes is read, in 6 refused */
    const uint8_t t5[] = {0xd1, 0x80, 0x80, 0x80, 0x00, 1, 2, 3, 4, 5, 6, 7, 8};
    const uint8_t t6[] = {0xd1, 0x80, 0x80, 0x80, 0x80, 0x00, 1, 2, 3, 4, 5, 6, 7, 8};
    bf_pb_reader_init(&r, t5, sizeof t5);
    ck_assert_int_eq(bf_pb_next(&r, &f), 1);
    ck_assert_uint_eq(f.num, 10);
    bf_pb_reader_init(&r, t6, sizeof t6);
    ck_assert_int_eq(bf_pb_next(&r, &f), -EBADMSG);
    ck_assert_ptr_eq(r.p, t6); /* not advanced */
    /* field 1, LEN 1: the length in 5 bytes is read, in 6 refused */
    const uint8_t l5[] = {0x0a, 0x81, 0x80, 0x80, 0x80, 0x00, 'A'};
    const uint8_t l6[] = {0x0a, 0x81, 0x80, 0x80, 0x80, 0x80, 0x00, 'A'};
    bf_pb_reader_init(&r, l5, sizeof l5);
    ck_assert_int_eq(bf_pb_next(&r, &f), 1);
    ck_assert_uint_eq(f.len, 1);
    bf_pb_reader_init(&r, l6, sizeof l6);
    ck_assert_int_eq(bf_pb_next(&r, &f), -EBADMSG);
    const uint8_t *q = l6 + 1;
    ck_assert_int_eq(bf_pb_skip(&q, l6 + sizeof l6, BF_PB_LEN), -EBADMSG);
    q = l5 + 1;
    ck_assert_int_eq(bf_pb_skip(&q, l5 + sizeof l5, BF_PB_LEN), 0);
    /* protobuf-c agrees on all four */
    ProtobufCMessage *ok = protobuf_c_message_unpack(
        &bigfleet__v1alpha1__cluster_capacity_needs__descriptor, NULL, sizeof t5, t5);
    ck_assert_ptr_nonnull(ok);
    protobuf_c_message_free_unpacked(ok, NULL);
    ck_assert_ptr_null(protobuf_c_message_unpack(
        &bigfleet__v1alpha1__cluster_capacity_needs__descriptor, NULL, sizeof t6, t6));
    ck_assert_ptr_null(protobuf_c_message_unpack(
        &bigfleet__v1alpha1__cluster_capacity_needs__descriptor, NULL, sizeof l6, l6));
    /* the decoders on top refuse them */
    uint32_t n;
    ck_assert_int_eq(bf_rollup_count_needs(t6, sizeof t6, &n), -EBADMSG);
    struct bf_prov_machine m;
    ck_assert_int_eq(bf_prov_machine_decode(l6, sizeof l6, &m), -EBADMSG);
}
END_TEST

/* The specification's reading of one field, written plainly for this test:
 * tag and length varints of at most 5 bytes, values of at most 10 bytes and
 * 64 bits, field numbers 1..2^29-1, no groups or wire types 6/7, nothing
 * past the end. Returns what bf_pb_next must return. */
static int spec_varint(const uint8_t **pp, const uint8_t *end, int max_bytes, uint64_t *v)
{
    uint64_t x = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (*pp >= end)
            return -1;
        uint8_t b = *(*pp)++;
        if (i == 9 && b > 1)
            return -1; /* over 64 bits */
        x |= (uint64_t)(b & 0x7f) << (7 * i);
        if (b < 0x80) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

static int spec_next(const uint8_t **pp, const uint8_t *end, struct bf_pb_field *f)
{
    const uint8_t *p = *pp;
    uint64_t tag, l;
    if (p >= end)
        return 0;
    memset(f, 0, sizeof *f);
    f->start = p;
    if (spec_varint(&p, end, 5, &tag) || (tag >> 3) == 0 || (tag >> 3) > BF_PB_FIELD_MAX)
        return -EBADMSG;
    f->num = (uint32_t)(tag >> 3);
    f->wt = (uint8_t)(tag & 7);
    switch (f->wt) {
    case BF_PB_VARINT:
        if (spec_varint(&p, end, 10, &f->varint))
            return -EBADMSG;
        break;
    case BF_PB_I64:
    case BF_PB_I32: {
        size_t w = f->wt == BF_PB_I64 ? 8 : 4;
        if ((size_t)(end - p) < w)
            return -EBADMSG;
        for (size_t i = 0; i < w; i++)
            f->varint |= (uint64_t)p[i] << (8 * i);
        p += w;
        break;
    }
    case BF_PB_LEN:
        if (spec_varint(&p, end, 5, &l) || l > (uint64_t)(end - p))
            return -EBADMSG;
        f->p = p;
        f->len = (size_t)l;
        p += l;
        break;
    default:
        return -EBADMSG;
    }
    f->end = p;
    *pp = p;
    return 1;
}

/* bf_pb_next reads the common shapes (one-byte tag; varint <= 5 bytes; a
 * length of 1-2 bytes) on a path of their own: on random buffers built from
 * those shapes, their near misses and plain noise, every field it returns
 * (and every refusal, and where the reader stops) is the specification's. */
START_TEST(the_fast_shapes_read_like_the_specification)
{
    uint8_t buf[600];
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    unsigned fields = 0, refused = 0, two_byte_lengths = 0;
    for (int it = 0; it < 20000; it++) {
        size_t n = 0;
        while (n < sizeof buf) {
            seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
            unsigned k = (unsigned)(seed >> 59); /* 0..31: the shape of the next bytes */
            uint8_t r = (uint8_t)(seed >> 8), r2 = (uint8_t)(seed >> 16);
            if (k < 8) { /* one-byte tag, varint or LEN */
                buf[n++] = (uint8_t)((((r % 15) + 1) << 3) | (k & 1 ? BF_PB_LEN : BF_PB_VARINT));
            } else if (k < 14) { /* a varint or length byte, continued or not */
                buf[n++] = k < 11 ? (uint8_t)(r | 0x80) : (uint8_t)(r & 0x7f);
            } else if (k < 17) { /* a small length, so LEN payloads fit */
                buf[n++] = (uint8_t)(r2 % 8);
            } else if (k < 18 && n + 1 < sizeof buf) { /* a two-byte length of 128..511 */
                buf[n++] = (uint8_t)(r | 0x80);
                buf[n++] = (uint8_t)(r2 % 4);
            } else if (k < 20) { /* field 0, wire types 1/3-7, long tags */
                buf[n++] = (uint8_t)(r & 0x87);
            } else {
                buf[n++] = r;
            }
        }
        size_t len = (size_t)(seed >> 24) % (sizeof buf + 1);
        struct bf_pb_reader rd;
        bf_pb_reader_init(&rd, buf, len);
        const uint8_t *sp = buf, *end = buf + len;
        for (;;) {
            struct bf_pb_field got, want;
            const uint8_t *before = rd.p;
            int rg = bf_pb_next(&rd, &got), rw = spec_next(&sp, end, &want);
            ck_assert_msg(rg == rw, "iteration %d offset %td: %d, the specification %d", it,
                          before - buf, rg, rw);
            if (rg != 1) {
                ck_assert_ptr_eq(rd.p, before); /* a refusal does not advance */
                refused += rg < 0;
                break;
            }
            fields++;
            ck_assert_uint_eq(got.num, want.num);
            ck_assert_uint_eq(got.wt, want.wt);
            ck_assert_ptr_eq(got.start, want.start);
            ck_assert_ptr_eq(got.end, want.end);
            ck_assert_ptr_eq(rd.p, sp);
            two_byte_lengths +=
                got.wt == BF_PB_LEN && got.p - got.start == 3 && got.start[0] < 0x80;
            ck_assert_ptr_eq(got.p, want.p);
            ck_assert_uint_eq(got.len, want.len);
            ck_assert_uint_eq(got.varint, want.varint);
        }
    }
    /* the mix exercises both outcomes many times */
    ck_assert_msg(fields > 10000 && refused > 10000 && two_byte_lengths > 100,
                  "fields %u, refused %u, two-byte lengths %u", fields, refused, two_byte_lengths);
}
END_TEST

/* The shapes next to the fast ones go to the general path and read as the
 * specification says (review-s32a found two mutants the random buffers miss):
 * a length in 3 bytes (16,384, the first that needs them), fitting and one
 * byte short; varints of 6 to 10 bytes after a one-byte tag, the 10th byte
 * carrying bit 63 (0 or 1) or more (refused). */
START_TEST(the_fast_shapes_hand_the_rest_to_the_general_path)
{
    struct bf_pb_reader rd;
    struct bf_pb_field f;
    size_t n = 4 + 16384;
    uint8_t *b = calloc(1, n + 1);
    ck_assert_ptr_nonnull(b);
    b[0] = 0x0a, b[1] = 0x80, b[2] = 0x80, b[3] = 0x01; /* field 1, length 16384 in 3 bytes */
    bf_pb_reader_init(&rd, b, n);
    ck_assert_int_eq(bf_pb_next(&rd, &f), 1);
    ck_assert_ptr_eq(f.p, b + 4);
    ck_assert_uint_eq(f.len, 16384);
    ck_assert_ptr_eq(rd.p, b + n);
    bf_pb_reader_init(&rd, b, n - 1);
    ck_assert_int_eq(bf_pb_next(&rd, &f), -EBADMSG);
    ck_assert_ptr_eq(rd.p, b);
    free(b);
    for (int nb = 6; nb <= 10; nb++)
        for (int last = 0; last < 4; last++) {
            uint8_t v[12] = {0x08};
            for (int i = 1; i < nb; i++)
                v[i] = 0xff;
            v[nb] = (uint8_t)last;
            bf_pb_reader_init(&rd, v, (size_t)nb + 1);
            int want = nb == 10 && last > 1 ? -EBADMSG : 1;
            ck_assert_int_eq(bf_pb_next(&rd, &f), want);
            ck_assert_ptr_eq(rd.p, want == 1 ? v + nb + 1 : v);
        }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("pbwire");
    TCase *tc = tcase_create("pbwire");
    tcase_add_test(tc, varint_of_ten_bytes_carries_bit_63_and_no_more);
    tcase_add_test(tc, every_wire_type_reads_and_skips_and_groups_are_refused);
    tcase_add_test(tc, lengths_are_bounded_by_the_enclosing_buffer);
    tcase_add_test(tc, scan_counts_unknown_fields_and_strip_removes_them_in_place);
    tcase_add_test(tc, writer_matches_protobuf_c_packing_of_a_machine);
    tcase_add_test(tc, provider_and_session_decoders_agree_on_a_varint_over_64_bits);
    tcase_add_test(tc, reader_over_a_null_empty_buffer_is_defined);
    tcase_add_test(tc, tags_and_lengths_over_five_bytes_are_refused_like_protobuf_c_and_cpp);
    tcase_add_test(tc, the_fast_shapes_read_like_the_specification);
    tcase_add_test(tc, the_fast_shapes_hand_the_rest_to_the_general_path);
    suite_add_tcase(s, tc);
    return check_run(s);
}
