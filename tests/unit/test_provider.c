/*
 * test_provider.c — the provider client (include/bigfleet/provider.h): the
 * zero-copy decoder against protobuf-c's encoding, the screen of provider
 * records (Invariant + structural checks), Machine -> record conversion, the
 * shard_metadata restore, and the client over real gRPC against the
 * simulated provider: fencing token stamping, the status mapping of
 * shard.md §3.3, deadlines and a provider that is down.
 */
#include <xxhash.h>

#include "bigfleet/log.h"
#include "bigfleet/pbwire.h"
#include "test_provider.h"
#include "../fuzz/provider_reference.h"
#include "check_run.h"

/* ------------------------------------------------------------ decoder */

START_TEST(decoder_reads_every_field_protobuf_c_wrote)
{
    struct tmach t = tmach_idle("m-1");
    t.state = BF_STATE_CONFIGURED;
    t.cluster = "cluster-a";
    t.labels[1] = (struct tkv){"team", "infra"};
    t.md[0] = (struct tkv){BF_MD_GROUP, "rack\0gang-7", 11};
    t.md[1] = (struct tkv){BF_MD_PRIORITY, "900000", 0};
    size_t len;
    uint8_t *b = tmach_pack(&t, &len);
    struct bf_prov_machine m;
    ck_assert_int_eq(bf_prov_machine_decode(b, len, &m), 0);
    ck_assert_int_eq(m.id.len, 3);
    ck_assert(!memcmp(m.id.p, "m-1", 3));
    ck_assert_int_eq(m.state, BF_STATE_CONFIGURED);
    ck_assert(m.has_host);
    ck_assert(m.host_provider.len == 4 && !memcmp(m.host_provider.p, "prov", 4));
    ck_assert(m.host_ref.len == 3 && !memcmp(m.host_ref.p, "i-1", 3));
    ck_assert(m.instance_type.len == 9 && !memcmp(m.instance_type.p, "m6i.large", 9));
    ck_assert(m.zone.len == 6 && !memcmp(m.zone.p, "zone-a", 6));
    ck_assert_int_eq(m.capacity_type, BF_CT_ON_DEMAND);
    ck_assert(m.price_per_hour == 0.096 && m.interruption_probability == 0.05);
    ck_assert(m.cluster.len == 9 && !memcmp(m.cluster.p, "cluster-a", 9));
    ck_assert_int_eq(m.n_labels, 2);
    ck_assert_int_eq(m.n_resources, 2);
    ck_assert_int_eq(m.n_allocatable, 2);
    ck_assert_int_eq(m.n_metadata, 2);
    /* maps walk in wire order; metadata values keep embedded NULs */
    struct bf_prov_map_iter it;
    struct bf_prov_bytes k, v;
    bf_prov_map_iter_init(&it, &m, BF_PROV_MAP_METADATA);
    ck_assert_int_eq(bf_prov_map_next(&it, &k, &v), 1);
    ck_assert_int_eq(v.len, 11);
    ck_assert(!memcmp(v.p, "rack\0gang-7", 11));
    ck_assert_int_eq(bf_prov_map_next(&it, &k, &v), 1);
    ck_assert(v.len == 6 && !memcmp(v.p, "900000", 6));
    ck_assert_int_eq(bf_prov_map_next(&it, &k, &v), 0);
    bf_prov_map_iter_init(&it, &m, BF_PROV_MAP_ALLOCATABLE);
    int n = 0;
    while (bf_prov_map_next(&it, &k, &v) == 1)
        n++;
    ck_assert_int_eq(n, 2);
    free(b);
}
END_TEST

/* The shape hash is XXH3-128 of the shape fields' wire bytes in order,
 * whether they lie in one run or are split by other fields. */
START_TEST(shape_hash_is_the_hash_of_the_shape_fields_wherever_they_sit)
{
    uint8_t together[128], apart[128], shape[128];
    uint8_t *p = together, *q = apart, *h = shape;
    h = bf_pb_put_ld(h, 4, "m6i.large", 9);
    h = bf_pb_put_ld(h, 5, "zone-a", 6);
    h = bf_pb_put_varint_field(h, 6, BF_CT_SPOT);
    p = bf_pb_put_ld(p, 1, "m-1", 3);
    p = bf_pb_put_varint_field(p, 2, BF_STATE_IDLE);
    memcpy(p, shape, (size_t)(h - shape));
    p += h - shape;
    q = bf_pb_put_ld(q, 4, "m6i.large", 9);
    q = bf_pb_put_ld(q, 1, "m-1", 3);
    q = bf_pb_put_ld(q, 5, "zone-a", 6);
    q = bf_pb_put_double(q, 7, 0.5);
    q = bf_pb_put_varint_field(q, 2, BF_STATE_IDLE);
    q = bf_pb_put_varint_field(q, 6, BF_CT_SPOT);
    struct bf_prov_machine mt, ma;
    ck_assert_int_eq(bf_prov_machine_decode(together, (size_t)(p - together), &mt), 0);
    ck_assert_int_eq(bf_prov_machine_decode(apart, (size_t)(q - apart), &ma), 0);
    XXH128_hash_t want = XXH3_128bits(shape, (size_t)(h - shape));
    ck_assert(mt.shape_hash[0] == want.low64 && mt.shape_hash[1] == want.high64);
    ck_assert(ma.shape_hash[0] == want.low64 && ma.shape_hash[1] == want.high64);
    /* no shape field at all: the hash of nothing */
    uint8_t bare[16], *b = bf_pb_put_ld(bare, 1, "m-2", 3);
    struct bf_prov_machine mb;
    ck_assert_int_eq(bf_prov_machine_decode(bare, (size_t)(b - bare), &mb), 0);
    want = XXH3_128bits(shape, 0);
    ck_assert(mb.shape_hash[0] == want.low64 && mb.shape_hash[1] == want.high64);
}
END_TEST

/* Map entries in every encoding the schema allows give the same key and
 * value: canonical, key alone, value before key, a key repeated (the last
 * wins), multi-byte lengths. */
START_TEST(map_entries_decode_the_same_in_every_encoding)
{
    static char longk[200];
    memset(longk, 'k', sizeof longk - 1);
    uint8_t msg[1024], e[300], *p = msg;
    p = bf_pb_put_ld(p, 1, "m-1", 3);
    uint8_t *q = bf_pb_put_ld(e, 1, "a", 1); /* canonical */
    q = bf_pb_put_ld(q, 2, "1", 1);
    p = bf_pb_put_ld(p, 10, e, (size_t)(q - e));
    q = bf_pb_put_ld(e, 1, "b", 1); /* key alone */
    p = bf_pb_put_ld(p, 10, e, (size_t)(q - e));
    q = bf_pb_put_ld(e, 2, "3", 1); /* value first */
    q = bf_pb_put_ld(q, 1, "c", 1);
    p = bf_pb_put_ld(p, 10, e, (size_t)(q - e));
    q = bf_pb_put_ld(e, 1, "x", 1); /* repeated key: the last wins */
    q = bf_pb_put_ld(q, 1, "d", 1);
    q = bf_pb_put_ld(q, 2, "4", 1);
    p = bf_pb_put_ld(p, 10, e, (size_t)(q - e));
    q = bf_pb_put_ld(e, 1, longk, strlen(longk)); /* two-byte length */
    q = bf_pb_put_ld(q, 2, "5", 1);
    p = bf_pb_put_ld(p, 10, e, (size_t)(q - e));
    q = bf_pb_put_ld(e, 1, "f", 1); /* empty value written */
    q = bf_pb_put_ld(q, 2, "", 0);
    p = bf_pb_put_ld(p, 10, e, (size_t)(q - e));
    struct bf_prov_machine m;
    ck_assert_int_eq(bf_prov_machine_decode(msg, (size_t)(p - msg), &m), 0);
    ck_assert_int_eq(m.n_labels, 6);
    const char *want_k[6] = {"a", "b", "c", "d", longk, "f"},
               *want_v[6] = {"1", "", "3", "4", "5", ""};
    struct bf_prov_map_iter it;
    struct bf_prov_bytes k, v;
    bf_prov_map_iter_init(&it, &m, BF_PROV_MAP_LABELS);
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(bf_prov_map_next(&it, &k, &v), 1);
        ck_assert_uint_eq(k.len, strlen(want_k[i]));
        ck_assert(!memcmp(k.p, want_k[i], k.len));
        ck_assert_uint_eq(v.len, strlen(want_v[i]));
        ck_assert(!memcmp(v.p, want_v[i], v.len));
    }
    ck_assert_int_eq(bf_prov_map_next(&it, &k, &v), 0);
    /* a value of the wrong wire type is refused, canonical prefix or not */
    uint8_t bad[32], *b = bf_pb_put_ld(bad, 1, "m-2", 3);
    q = bf_pb_put_ld(e, 1, "a", 1);
    q = bf_pb_put_varint_field(q, 2, 7);
    b = bf_pb_put_ld(b, 10, e, (size_t)(q - e));
    ck_assert_int_eq(bf_prov_machine_decode(bad, (size_t)(b - bad), &m), -EBADMSG);
}
END_TEST

START_TEST(shape_hash_is_shared_by_equal_shapes_and_differs_otherwise)
{
    struct tmach a = tmach_idle("a"), b = tmach_idle("b-with-another-id"), c = tmach_idle("c");
    b.host_ref = "i-2"; /* host, id, state, price are not part of the shape */
    b.price = 7;
    c.labels[0].v = "zone-a-rack-1";
    size_t la, lb, lc;
    uint8_t *pa = tmach_pack(&a, &la), *pb = tmach_pack(&b, &lb), *pc = tmach_pack(&c, &lc);
    struct bf_prov_machine ma, mb, mc;
    ck_assert_int_eq(bf_prov_machine_decode(pa, la, &ma), 0);
    ck_assert_int_eq(bf_prov_machine_decode(pb, lb, &mb), 0);
    ck_assert_int_eq(bf_prov_machine_decode(pc, lc, &mc), 0);
    ck_assert(ma.shape_hash[0] == mb.shape_hash[0] && ma.shape_hash[1] == mb.shape_hash[1]);
    ck_assert(ma.shape_hash[0] != mc.shape_hash[0] || ma.shape_hash[1] != mc.shape_hash[1]);
    free(pa);
    free(pb);
    free(pc);
}
END_TEST

START_TEST(decoder_never_reads_past_a_truncated_or_corrupted_message)
{
    struct tmach t = tmach_idle("truncate-me");
    t.md[0] = (struct tkv){BF_MD_FINGERPRINT, "p=1|ipb=1|rpb=1|reqs=|spr=", 0};
    size_t len;
    uint8_t *b = tmach_pack(&t, &len);
    int ok = 0, bad = 0;
    for (size_t cut = 0; cut < len; cut++) {
        /* an exact-size heap copy: ASan catches any read past the end */
        uint8_t *c = malloc(cut ? cut : 1);
        memcpy(c, b, cut);
        struct bf_prov_machine m;
        int rc = bf_prov_machine_decode(c, cut, &m);
        if (rc == 0) {
            ok++;
            struct bf_prov_map_iter it;
            struct bf_prov_bytes k, v;
            bf_prov_map_iter_init(&it, &m, BF_PROV_MAP_LABELS);
            while (bf_prov_map_next(&it, &k, &v) == 1)
                ;
        } else {
            ck_assert_int_eq(rc, -EBADMSG);
            bad++;
        }
        free(c);
    }
    ck_assert_int_gt(bad, 0);
    /* flipping every byte of the message: decodes or reports -EBADMSG */
    for (size_t i = 0; i < len; i++) {
        uint8_t *c = malloc(len);
        memcpy(c, b, len);
        c[i] ^= 0xff;
        struct bf_prov_machine m;
        int rc = bf_prov_machine_decode(c, len, &m);
        ck_assert(rc == 0 || rc == -EBADMSG);
        free(c);
    }
    (void)ok;
    free(b);
}
END_TEST

START_TEST(peek_agrees_with_the_decoder_on_id_and_state_and_is_never_stricter)
{
    struct tmach t = tmach_idle("peek-me");
    t.state = BF_STATE_CONFIGURED;
    t.cluster = "c";
    t.md[0] = (struct tkv){BF_MD_FINGERPRINT, "p=1|ipb=1|rpb=1|reqs=|spr=", 0};
    size_t len;
    uint8_t *b = tmach_pack(&t, &len);
    struct bf_prov_bytes id;
    int32_t state;
    ck_assert_int_eq(bf_prov_machine_peek(b, len, &id, &state), 0);
    ck_assert_int_eq(state, BF_STATE_CONFIGURED);
    ck_assert_int_eq(id.len, 7);
    ck_assert_int_eq(memcmp(id.p, "peek-me", 7), 0);
    /* every truncation and every flipped byte: where the decoder accepts the
     * message, peek accepts it with the same id and state; peek never reads
     * past the end (exact-size copies under ASan) */
    int peek_only = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < len; i++) {
            size_t n = pass == 0 ? i : len;
            uint8_t *c = malloc(n ? n : 1);
            memcpy(c, b, n);
            if (pass == 1)
                c[i] ^= 0xff;
            struct bf_prov_machine m;
            int drc = bf_prov_machine_decode(c, n, &m);
            int prc = bf_prov_machine_peek(c, n, &id, &state);
            ck_assert(prc == 0 || prc == -EBADMSG);
            if (drc == 0) {
                ck_assert_int_eq(prc, 0);
                ck_assert_int_eq(state, m.state);
                ck_assert_uint_eq(id.len, m.id.len);
                ck_assert(id.len == 0 || memcmp(id.p, m.id.p, id.len) == 0);
            } else if (prc == 0) {
                peek_only++; /* a fault inside a nested message: decode's to find */
            }
            free(c);
        }
    }
    ck_assert_int_gt(peek_only, 0);
    /* a wrong wire type for a top-level field is a fault for both */
    uint8_t wrong[] = {0x10 | 2, 1, 'x'}; /* field 2 (state) as LEN */
    ck_assert_int_eq(bf_prov_machine_peek(wrong, sizeof wrong, &id, &state), -EBADMSG);
    free(b);
}
END_TEST

START_TEST(peek_refuses_exactly_the_top_level_faults_the_general_reader_finds)
{
    /* every kind of top-level field: one-byte and longer varints, fixed 8
     * bytes, short and long length-delimited payloads */
    struct tmach t = tmach_idle("peek-all-kinds");
    t.state = BF_STATE_CONFIGURED;
    t.cluster = "c";
    t.last_error =
        "a last error longer than one hundred and twenty-seven bytes, so that its length "
        "takes two bytes on the wire: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx";
    t.md[0] = (struct tkv){BF_MD_FINGERPRINT, "p=1|ipb=1|rpb=1|reqs=|spr=", 0};
    size_t len;
    uint8_t *b = tmach_pack(&t, &len);
    /* every truncation, and every value of every byte (exact-size copies:
     * ASan catches a read past the end) */
    long checked = 0, refused = 0;
    for (size_t i = 0; i < len; i++) {
        for (int v = -1; v < 256; v++) {
            size_t n = v < 0 ? i : len;
            uint8_t *c = malloc(n ? n : 1);
            memcpy(c, b, n);
            if (v >= 0)
                c[i] = (uint8_t)v;
            struct bf_prov_bytes id, rid;
            int32_t st, rst;
            int prc = bf_prov_machine_peek(c, n, &id, &st);
            int rrc = reference_peek(c, n, &rid, &rst);
            ck_assert_msg(prc == rrc, "byte %zu = %d (len %zu): peek %d, reader %d", i, v, n, prc,
                          rrc);
            if (prc == 0) {
                ck_assert_int_eq(st, rst);
                ck_assert_uint_eq(id.len, rid.len);
                ck_assert(id.len == 0 || id.p == rid.p);
            } else {
                refused++;
            }
            checked++;
            free(c);
        }
    }
    ck_assert_int_gt(refused, 0);
    ck_assert_int_gt(checked - refused, 0);
    free(b);
}
END_TEST

START_TEST(list_decode_counts_and_iterates_what_the_general_reader_finds)
{
    /* MachineList{machines: three (one over 127 bytes), revision}: every
     * truncation and a set of values of every byte; the decoder accepts exactly
     * what the reader reads with field 1 and 2 length-delimited, counts the
     * same machines and iterates the same slices */
    struct tmach a = tmach_idle("a"), c = tmach_idle("c");
    struct tmach big = tmach_idle("a-machine-whose-encoding-is-over-127-bytes");
    big.cluster = "cluster-with-a-long-name";
    size_t la, lb, lc;
    uint8_t *pa = tmach_pack(&a, &la), *pb = tmach_pack(&big, &lb), *pc = tmach_pack(&c, &lc);
    ck_assert_uint_gt(lb, 127);
    uint8_t *l = malloc(la + lb + lc + 64), *q = l;
    q = bf_pb_put_ld(q, 1, pa, la);
    q = bf_pb_put_ld(q, 1, pb, lb);
    q = bf_pb_put_ld(q, 1, pc, lc);
    q = bf_pb_put_ld(q, 2, "42", 2);
    size_t len = (size_t)(q - l);
    /* values: the tags and length bytes that matter, and the byte's
     * neighbours (all 256 values of every byte is too slow under ASan) */
    static const int vals[] = {-1,   0x00, 0x01, 0x02, 0x08, 0x0a, 0x10, 0x12,
                               0x7f, 0x80, 0x81, 0xff, 1000, 1001, 1002};
    long refused = 0;
    for (size_t i = 0; i < len; i++) {
        for (size_t vi = 0; vi < sizeof vals / sizeof vals[0]; vi++) {
            int v = vals[vi];
            size_t n = v < 0 ? i : len;
            uint8_t *m = malloc(n ? n : 1);
            memcpy(m, l, n);
            if (v >= 1000) /* the byte -1, +1, ^0x80 */
                m[i] = (uint8_t)(v == 1000 ? l[i] - 1 : v == 1001 ? l[i] + 1 : l[i] ^ 0x80);
            else if (v >= 0)
                m[i] = (uint8_t)v;
            /* the reference: the reader over the top level */
            struct bf_pb_reader r;
            struct bf_pb_field f;
            const uint8_t *slices[8];
            size_t slen[8];
            uint32_t rn = 0;
            int rrc;
            bf_pb_reader_init(&r, m, n);
            while ((rrc = bf_pb_next(&r, &f)) == 1) {
                if ((f.num == 1 || f.num == 2) && f.wt != BF_PB_LEN) {
                    rrc = -EBADMSG;
                    break;
                }
                if (f.num == 1 && rn < 8) {
                    slices[rn] = f.p;
                    slen[rn] = f.len;
                }
                rn += f.num == 1;
            }
            struct bf_prov_list pl;
            int drc = bf_prov_list_decode(m, n, &pl);
            ck_assert_msg(drc == (rrc ? -EBADMSG : 0), "byte %zu = %d (len %zu): decode %d", i, v,
                          n, drc);
            if (drc == 0) {
                ck_assert_uint_eq(pl.n_machines, rn);
                struct bf_prov_list_iter it;
                struct bf_prov_bytes mb;
                uint32_t k = 0;
                bf_prov_list_iter_init(&it, &pl);
                while (bf_prov_list_next(&it, &mb) == 1) {
                    if (k < 8)
                        ck_assert(mb.p == slices[k] && mb.len == slen[k]);
                    k++;
                }
                ck_assert_uint_eq(k, rn);
            } else {
                refused++;
            }
            free(m);
        }
    }
    ck_assert_int_gt(refused, 0);
    free(l);
    free(pa);
    free(pb);
    free(pc);
}
END_TEST

START_TEST(decoder_rejects_a_resources_entry_that_is_not_length_delimited)
{
    /* Machine{id: "m", resources (9): Resources{entry (1) as a varint}}: the
     * map entry must be a message; and the same with allocatable (13) */
    for (int fld = 9; fld <= 13; fld += 4) {
        uint8_t bad[] = {0x0a, 1, 'm', (uint8_t)(fld << 3 | 2), 2, 0x08, 1};
        struct bf_prov_machine m;
        ck_assert_int_eq(bf_prov_machine_decode(bad, sizeof bad, &m), -EBADMSG);
        /* a well-formed empty entry in the same place decodes */
        uint8_t good[] = {0x0a, 1, 'm', (uint8_t)(fld << 3 | 2), 2, 0x0a, 0};
        ck_assert_int_eq(bf_prov_machine_decode(good, sizeof good, &m), 0);
        ck_assert_uint_eq(fld == 9 ? m.n_resources : m.n_allocatable, 1);
    }
}
END_TEST

START_TEST(list_decoder_counts_machines_and_keeps_the_revision_bytes)
{
    struct tmach ts[3] = {tmach_idle("x"), tmach_idle("y"), tmach_idle("z")};
    size_t len;
    uint8_t *b = tlist_pack(ts, 3, "12345", &len);
    struct bf_prov_list l;
    ck_assert_int_eq(bf_prov_list_decode(b, len, &l), 0);
    ck_assert_int_eq(l.n_machines, 3);
    ck_assert(l.revision.len == 5 && !memcmp(l.revision.p, "12345", 5));
    struct bf_prov_list_iter it;
    struct bf_prov_bytes raw;
    bf_prov_list_iter_init(&it, &l);
    const char *ids[] = {"x", "y", "z"};
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(bf_prov_list_next(&it, &raw), 1);
        struct bf_prov_machine m;
        ck_assert_int_eq(bf_prov_machine_decode(raw.p, raw.len, &m), 0);
        ck_assert(m.id.len == 1 && m.id.p[0] == ids[i][0]);
    }
    ck_assert_int_eq(bf_prov_list_next(&it, &raw), 0);
    free(b);
}
END_TEST

/* ------------------------------------------------------------ screen */

static int screen(const struct tmach *t)
{
    size_t len;
    uint8_t *b = tmach_pack(t, &len);
    struct bf_prov_machine m;
    ck_assert_int_eq(bf_prov_machine_decode(b, len, &m), 0);
    char why[256];
    int r = bf_prov_machine_check(&m, why, sizeof why);
    free(b);
    return r;
}

START_TEST(screen_rejects_bad_cost_inputs_by_reason)
{
    struct tmach t = tmach_idle("ok");
    ck_assert_int_eq(screen(&t), BF_REJECT_NONE);
    t.price = -0.01;
    ck_assert_int_eq(screen(&t), BF_REJECT_PRICE);
    t.price = NAN;
    ck_assert_int_eq(screen(&t), BF_REJECT_PRICE);
    t.price = 1;
    t.prob = 1.5;
    ck_assert_int_eq(screen(&t), BF_REJECT_PROBABILITY);
    t.prob = -0.1;
    ck_assert_int_eq(screen(&t), BF_REJECT_PROBABILITY);
    t.prob = NAN;
    ck_assert_int_eq(screen(&t), BF_REJECT_PROBABILITY);
    t.prob = 1.0; /* the bounds are inclusive */
    ck_assert_int_eq(screen(&t), BF_REJECT_NONE);
}
END_TEST

START_TEST(screen_rejects_structural_faults)
{
    struct tmach t = tmach_idle("");
    ck_assert_int_eq(screen(&t), BF_REJECT_STRUCTURAL); /* no id */
    t = tmach_idle("s");
    t.state = 42;
    ck_assert_int_eq(screen(&t), BF_REJECT_STRUCTURAL); /* unknown state */
    t.state = 0;
    ck_assert_int_eq(screen(&t), BF_REJECT_STRUCTURAL); /* unspecified */
    t = tmach_idle("s");
    t.state = BF_STATE_CONFIGURED; /* no cluster */
    ck_assert_int_eq(screen(&t), BF_REJECT_STRUCTURAL);
    t = tmach_idle("s");
    t.host_provider = t.host_ref = NULL; /* Idle without a host */
    ck_assert_int_eq(screen(&t), BF_REJECT_STRUCTURAL);
    t = tmach_idle("s");
    t.state = BF_STATE_FAILED; /* Failed without last_error */
    ck_assert_int_eq(screen(&t), BF_REJECT_STRUCTURAL);
    t.last_error = "boom";
    ck_assert_int_eq(screen(&t), BF_REJECT_NONE);
}
END_TEST

/* ------------------------------------------------------------ record build */

/* docs/fidelity.md O1 (differ, representation): the machine record holds
 * price and interruption probability in single precision (one 64-byte cache
 * line per record), where Go keeps float64: prices closer than the float's
 * resolution tie in every order (then the id decides) */
START_TEST(record_keeps_price_and_probability_in_single_precision)
{
    struct pfx f;
    pfx_open(&f, NULL, true);
    struct tmach a = tmach_idle("m-a"), b = tmach_idle("m-b");
    a.price = 1.00000001;
    b.price = 1.00000003; /* distinct doubles, the same float */
    size_t la, lb;
    uint8_t *pa = tmach_pack(&a, &la), *pb = tmach_pack(&b, &lb);
    struct bf_prov_machine ma, mb;
    ck_assert_int_eq(bf_prov_machine_decode(pa, la, &ma), 0);
    ck_assert_int_eq(bf_prov_machine_decode(pb, lb, &mb), 0);
    ck_assert(ma.price_per_hour != mb.price_per_hour);
    struct bf_machine_rec ra, rb;
    char why[256];
    ck_assert_int_eq(bf_prov_machine_build(&f.shm, NULL, &ma, 0, &ra, NULL, why, sizeof why), 0);
    ck_assert_int_eq(bf_prov_machine_build(&f.shm, NULL, &mb, 0, &rb, NULL, why, sizeof why), 0);
    ck_assert(ra.price_per_hour == rb.price_per_hour);
    free(pa);
    free(pb);
    pfx_close(&f);
}
END_TEST

START_TEST(build_interns_profile_once_per_shape_and_host_as_provider_and_ref)
{
    struct pfx f;
    pfx_open(&f, NULL, true);
    struct bf_prov_shape_cache *sc = bf_prov_shape_cache_new();
    struct tmach a = tmach_idle("m-a"), b = tmach_idle("m-b");
    b.host_ref = "m-b"; /* ref == id: provider only + HOST_IS_ID */
    size_t la, lb;
    uint8_t *pa = tmach_pack(&a, &la), *pb = tmach_pack(&b, &lb);
    struct bf_prov_machine ma, mb;
    ck_assert_int_eq(bf_prov_machine_decode(pa, la, &ma), 0);
    ck_assert_int_eq(bf_prov_machine_decode(pb, lb, &mb), 0);
    struct bf_machine_rec ra, rb;
    char why[256];
    ck_assert_int_eq(bf_prov_machine_build(&f.shm, sc, &ma, 0, &ra, NULL, why, sizeof why), 0);
    uint64_t entries = atomic_load(&f.shm.inv->strtab.entries);
    ck_assert_int_eq(bf_prov_machine_build(&f.shm, sc, &mb, 0, &rb, NULL, why, sizeof why), 0);
    ck_assert_uint_eq(ra.profile, rb.profile);
    /* the second machine added its id and its provider name only */
    ck_assert_uint_le(atomic_load(&f.shm.inv->strtab.entries), entries + 2);
    ck_assert(!(ra.flags & BF_REC_HOST_IS_ID));
    ck_assert(rb.flags & BF_REC_HOST_IS_ID);
    uint32_t hl;
    const char *h = bf_str(&f.shm, ra.host, &hl);
    ck_assert_int_eq(hl, 8);
    ck_assert(!memcmp(h, "prov\0i-1", 8));
    ck_assert_str_eq(bf_str(&f.shm, rb.host, NULL), "prov");
    ck_assert_str_eq(bf_type_name(&f.shm, ra.type_idx), "m6i.large");
    ck_assert_str_eq(bf_zone_name(&f.shm, ra.zone_idx), "zone-a");
    ck_assert_int_eq(ra.state, BF_STATE_IDLE);
    ck_assert_int_eq(ra.capacity_type, BF_CT_ON_DEMAND);
    ck_assert(fabsf(ra.price_per_hour - 0.096f) < 1e-6f);
    struct bf_blob_cache *bc = bf_blob_cache_new();
    const struct bf_mprofile *mp = bf_mprofile_get(bc, &f.shm, ra.profile);
    ck_assert_ptr_nonnull(mp);
    ck_assert_str_eq(mp->instance_type, "m6i.large");
    ck_assert_str_eq(bf_mprofile_attr(mp, "topology.bigfleet/rack"), "zone-a-rack-0");
    ck_assert_int_eq(mp->effective.v[bf_dim_lookup(&f.shm, "cpu")], 2000);
    bf_blob_cache_free(bc);
    bf_prov_shape_cache_free(sc);
    free(pa);
    free(pb);
    pfx_close(&f);
}
END_TEST

START_TEST(build_rejects_unparseable_or_negative_quantities_as_structural)
{
    struct pfx f;
    pfx_open(&f, NULL, true);
    struct tmach t = tmach_idle("q");
    t.res[0].v = "two";
    size_t l;
    uint8_t *p = tmach_pack(&t, &l);
    struct bf_prov_machine m;
    ck_assert_int_eq(bf_prov_machine_decode(p, l, &m), 0);
    struct bf_machine_rec r;
    char why[256] = "";
    ck_assert_int_eq(bf_prov_machine_build(&f.shm, NULL, &m, 0, &r, NULL, why, sizeof why),
                     BF_REJECT_STRUCTURAL);
    ck_assert(why[0]);
    free(p);
    t.res[0].v = "-2";
    p = tmach_pack(&t, &l);
    ck_assert_int_eq(bf_prov_machine_decode(p, l, &m), 0);
    ck_assert_int_eq(bf_prov_machine_build(&f.shm, NULL, &m, 0, &r, NULL, why, sizeof why),
                     BF_REJECT_STRUCTURAL);
    free(p);
    pfx_close(&f);
}
END_TEST

START_TEST(assignment_restores_from_shard_metadata_and_skips_malformed_values)
{
    struct pfx f;
    pfx_open(&f, NULL, true);
    struct tmach t = tmach_idle("md");
    t.state = BF_STATE_CONFIGURED;
    t.cluster = "c";
    t.md[0] = (struct tkv){BF_MD_PRIORITY, "900000", 0};
    t.md[1] = (struct tkv){BF_MD_INTERRUPTION, "1.048576e+06", 0};
    t.md[2] = (struct tkv){BF_MD_RECLAMATION, "not-a-number", 0};
    t.md[3] = (struct tkv){BF_MD_FINGERPRINT, "p=900000|ipb=23|rpb=3|reqs=|spr=", 0};
    t.md[4] = (struct tkv){BF_MD_GROUP, "rack\0g7", 7};
    t.md[5] = (struct tkv){"unknown.example/key", "ignored", 0};
    size_t l;
    uint8_t *p = tmach_pack(&t, &l);
    struct bf_prov_machine m;
    ck_assert_int_eq(bf_prov_machine_decode(p, l, &m), 0);
    struct bf_machine_rec r = {0};
    r.rpb = 9; /* an absent/malformed key leaves the field alone */
    ck_assert_int_eq(bf_prov_machine_assignment(&f.shm, &m, &r), 1);
    ck_assert_int_eq(r.assigned_priority, 900000);
    ck_assert_int_eq(r.ipb, bf_bucket_for_dollars(1048576));
    ck_assert_int_eq(r.rpb, 9);
    ck_assert_str_eq(bf_str(&f.shm, r.fingerprint, NULL), "p=900000|ipb=23|rpb=3|reqs=|spr=");
    uint32_t gl;
    const char *g = bf_str(&f.shm, r.group, &gl);
    ck_assert(gl == 7 && !memcmp(g, "rack\0g7", 7));
    free(p);
    pfx_close(&f);
}
END_TEST

/* ------------------------------------------------------------ client over gRPC */

static struct bf_sim_config cfg_with(const char *name, const char *value)
{
    struct bf_sim_config c;
    bf_sim_config_init(&c);
    if (name)
        ck_assert_int_eq(bf_sim_config_set(&c, name, value, NULL, 0), 0);
    return c;
}

START_TEST(client_maps_provider_statuses_per_shard_md_3_3)
{
    struct pfx f;
    pfx_open(&f, NULL, false);
    struct capture c = {0};
    /* unknown machine -> NOT_FOUND */
    ck_assert_int_eq(bf_prov_get(f.cl, "nope", 4, 0, cap_machine, &c, NULL), 0);
    ck_assert(pfx_run_until(&f, &c.done, 5 * SEC));
    ck_assert_int_eq(c.r.status, BF_PROV_NOT_FOUND);
    ck_assert_int_eq(c.r.code, BF_NET_NOT_FOUND);
    /* out-of-position (Configure on a Speculative machine) -> INTERNAL -> ERROR */
    const char *spec = sim_first_in_state(f.sim, BF_STATE_SPECULATIVE);
    char id[128];
    snprintf(id, sizeof id, "%s", spec);
    memset(&c, 0, sizeof c);
    ck_assert_int_eq(bf_prov_configure(f.cl, id, strlen(id), "c", 1, (const uint8_t *)"b", 1, NULL,
                                       0, 0, cap_ack, &c, NULL),
                     0);
    ck_assert(pfx_run_until(&f, &c.done, 5 * SEC));
    ck_assert_int_eq(c.r.status, BF_PROV_ERROR);
    ck_assert_int_eq(c.r.code, BF_NET_INTERNAL);
    /* Create -> OK with a decoded ack (instant: already Idle) */
    memset(&c, 0, sizeof c);
    ck_assert_int_eq(bf_prov_create(f.cl, id, strlen(id), 0, cap_ack, &c, NULL), 0);
    ck_assert(pfx_run_until(&f, &c.done, 5 * SEC));
    ck_assert_int_eq(c.r.status, BF_PROV_OK);
    ck_assert_int_eq(c.state, BF_STATE_IDLE);
    ck_assert(c.op_id[0]);
    /* the same Create again: idempotent, the same operation id */
    char op[64];
    snprintf(op, sizeof op, "%s", c.op_id);
    memset(&c, 0, sizeof c);
    ck_assert_int_eq(bf_prov_create(f.cl, id, strlen(id), 0, cap_ack, &c, NULL), 0);
    ck_assert(pfx_run_until(&f, &c.done, 5 * SEC));
    ck_assert_str_eq(c.op_id, op);
    /* List: every machine, with a revision cursor */
    memset(&c, 0, sizeof c);
    ck_assert_int_eq(bf_prov_list(f.cl, NULL, 0, cap_list, &c, NULL), 0);
    ck_assert(pfx_run_until(&f, &c.done, 5 * SEC));
    ck_assert_int_eq(c.r.status, BF_PROV_OK);
    ck_assert_uint_eq(c.n_machines, bf_sim_machine_count(f.sim));
    ck_assert(c.revision[0]);
    /* ids the client refuses to send */
    ck_assert_int_eq(bf_prov_get(f.cl, "a\0b", 3, 0, cap_machine, &c, NULL), -EINVAL);
    pfx_close(&f);
}
END_TEST

/* The simulator's List replies of a MiB and more start in a body the net
 * layer gave back (bf_net_call_reply_lend), not in new memory: a freed
 * buffer of >= 8 MiB goes back to the kernel at once (jemalloc), and every
 * page of a fresh one was a page fault (issue 18, stop 32). Counted, not
 * timed: list_reuses. */
START_TEST(large_list_replies_reuse_the_simulators_reply_body)
{
    struct bf_sim_config cfg;
    bf_sim_config_init(&cfg);
    cfg.seed_speculative = 12000; /* a List of all: > 1 MiB */
    struct pfx f;
    pfx_open(&f, &cfg, false);
    for (int k = 0; k < 3; k++) {
        struct capture c = {0};
        ck_assert_int_eq(bf_prov_list(f.cl, NULL, 30 * SEC, cap_list, &c, NULL), 0);
        ck_assert(pfx_run_until(&f, &c.done, 30 * SEC));
        ck_assert_int_eq(c.r.status, BF_PROV_OK);
        ck_assert_uint_eq(c.n_machines, bf_sim_machine_count(f.sim));
    }
    struct bf_simsrv_stats st;
    bf_simsrv_stats(f.srv, &st);
    ck_assert_uint_eq(st.list_reuses, 2); /* the second and the third */
    pfx_close(&f);
}
END_TEST

START_TEST(client_reports_unimplemented_delete_as_unsupported)
{
    static const struct bf_sim_type bm[1] = {{.name = "metal-1",
                                              .cpu_milli = 64000,
                                              .memory_mib = 262144,
                                              .capacity_type = BF_CT_BARE_METAL,
                                              .price_per_hour = 3}};
    struct bf_sim_config cfg = cfg_with("seed-idle", "2");
    cfg.types = bm;
    cfg.n_types = 1;
    struct pfx f;
    pfx_open(&f, &cfg, false);
    char id[128];
    snprintf(id, sizeof id, "%s", sim_first_in_state(f.sim, BF_STATE_IDLE));
    struct capture c = {0};
    ck_assert_int_eq(bf_prov_delete(f.cl, id, strlen(id), 0, cap_ack, &c, NULL), 0);
    ck_assert(pfx_run_until(&f, &c.done, 5 * SEC));
    ck_assert_int_eq(c.r.status, BF_PROV_UNSUPPORTED);
    pfx_close(&f);
}
END_TEST

START_TEST(every_mutating_attempt_carries_a_fresh_increasing_sequence)
{
    struct pfx f;
    pfx_open(&f, NULL, false);
    int64_t last = 0;
    char id[128];
    snprintf(id, sizeof id, "%s", sim_first_in_state(f.sim, BF_STATE_SPECULATIVE));
    for (int i = 0; i < 4; i++) { /* retries of one Create: each a new token, all accepted */
        struct capture c = {0};
        ck_assert_int_eq(bf_prov_create(f.cl, id, strlen(id), 0, cap_ack, &c, NULL), 0);
        ck_assert(pfx_run_until(&f, &c.done, 5 * SEC));
        ck_assert_int_eq(c.r.status, BF_PROV_OK);
        ck_assert_int_gt(c.r.seq, last);
        last = c.r.seq;
    }
    /* Get and List carry no token */
    struct capture g = {0};
    ck_assert_int_eq(bf_prov_get(f.cl, id, strlen(id), 0, cap_machine, &g, NULL), 0);
    ck_assert(pfx_run_until(&f, &g.done, 5 * SEC));
    ck_assert_int_eq(g.r.seq, 0);
    pfx_close(&f);
}
END_TEST

START_TEST(a_restarted_client_of_the_same_epoch_is_not_fenced_but_an_older_one_is)
{
    struct pfx f;
    pfx_open(&f, NULL, false);
    char id[128];
    snprintf(id, sizeof id, "%s", sim_first_in_state(f.sim, BF_STATE_SPECULATIVE));
    struct capture c = {0};
    ck_assert_int_eq(bf_prov_create(f.cl, id, strlen(id), 0, cap_ack, &c, NULL), 0);
    ck_assert(pfx_run_until(&f, &c.done, 5 * SEC));
    ck_assert_int_eq(c.r.status, BF_PROV_OK);
    /* a successor process (same shard, same epoch) starts later: its first
     * sequence number is above everything the predecessor issued */
    usleep(1000);
    struct bf_prov_client *succ;
    struct bf_prov_opts po = {.addr = f.addr, .shard_id = "ut-shard", .epoch = 1};
    ck_assert_int_eq(bf_prov_client_new(f.loop, &po, &succ), 0);
    memset(&c, 0, sizeof c);
    ck_assert_int_eq(bf_prov_create(succ, id, strlen(id), 0, cap_ack, &c, NULL), 0);
    ck_assert(pfx_run_until(&f, &c.done, 5 * SEC));
    ck_assert_int_eq(c.r.status, BF_PROV_OK);
    /* the predecessor (a zombie now) is fenced: FAILED_PRECONDITION -> FENCED */
    memset(&c, 0, sizeof c);
    ck_assert_int_eq(bf_prov_create(f.cl, id, strlen(id), 0, cap_ack, &c, NULL), 0);
    ck_assert(pfx_run_until(&f, &c.done, 5 * SEC));
    ck_assert_int_eq(c.r.status, BF_PROV_FENCED);
    ck_assert_int_eq(c.r.code, BF_NET_FAILED_PRECONDITION);
    /* a client of an older epoch is fenced whatever its sequence */
    struct bf_prov_client *old;
    struct bf_prov_opts oo = {
        .addr = f.addr, .shard_id = "ut-shard", .epoch = 0, .seq_start = INT64_MAX / 2};
    ck_assert_int_eq(bf_prov_client_new(f.loop, &oo, &old), 0);
    memset(&c, 0, sizeof c);
    ck_assert_int_eq(bf_prov_create(old, id, strlen(id), 0, cap_ack, &c, NULL), 0);
    ck_assert(pfx_run_until(&f, &c.done, 5 * SEC));
    ck_assert_int_eq(c.r.status, BF_PROV_FENCED);
    bf_prov_client_free(old);
    bf_prov_client_free(succ);
    pfx_close(&f);
}
END_TEST

START_TEST(a_slow_provider_times_out_at_the_call_deadline)
{
    struct bf_sim_config cfg = cfg_with("get-reply-latency", "2s");
    struct pfx f;
    pfx_open(&f, &cfg, false);
    char id[128];
    snprintf(id, sizeof id, "%s", sim_first_in_state(f.sim, BF_STATE_SPECULATIVE));
    struct capture c = {0};
    int64_t t0 = bf_mono_ns();
    ck_assert_int_eq(bf_prov_get(f.cl, id, strlen(id), 200 * MS, cap_machine, &c, NULL), 0);
    ck_assert(pfx_run_until(&f, &c.done, 5 * SEC));
    int64_t el = bf_mono_ns() - t0;
    ck_assert_int_eq(c.r.status, BF_PROV_TIMEOUT);
    ck_assert(bf_prov_status_transport(c.r.status));
    ck_assert_int_ge(el, 190 * MS);
    ck_assert_int_lt(el, 1500 * MS);
    pfx_close(&f);
}
END_TEST

START_TEST(a_provider_that_is_down_fails_fast_as_unavailable)
{
    struct bf_net_loop *loop;
    ck_assert_int_eq(bf_net_loop_new(NULL, &loop), 0);
    struct bf_prov_client *cl;
    struct bf_prov_opts po = {.addr = "127.0.0.1:1", .shard_id = "s", .epoch = 1};
    ck_assert_int_eq(bf_prov_client_new(loop, &po, &cl), 0);
    struct capture c = {0};
    ck_assert_int_eq(bf_prov_list(cl, NULL, 30 * SEC, cap_list, &c, NULL), 0);
    int64_t end = bf_mono_ns() + 5 * SEC;
    while (!c.done && bf_mono_ns() < end)
        bf_net_loop_run_once(loop, 5 * MS);
    ck_assert(c.done);
    ck_assert_int_eq(c.r.status, BF_PROV_UNAVAILABLE);
    ck_assert_int_lt(c.r.elapsed_ns, 2 * SEC);
    bf_prov_client_free(cl);
    bf_net_loop_free(loop);
}
END_TEST

START_TEST(cancel_completes_the_call_once_with_cancelled)
{
    struct bf_sim_config cfg = cfg_with("list-reply-latency", "2s");
    struct pfx f;
    pfx_open(&f, &cfg, false);
    struct capture c = {0};
    struct bf_prov_call *call;
    ck_assert_int_eq(bf_prov_list(f.cl, NULL, 0, cap_list, &c, &call), 0);
    pfx_run_for(&f, 50 * MS);
    ck_assert(!c.done);
    bf_prov_call_cancel(call);
    ck_assert(pfx_run_until(&f, &c.done, 2 * SEC));
    ck_assert_int_eq(c.r.status, BF_PROV_CANCELLED);
    pfx_close(&f);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("provider");
    TCase *t = tcase_create("decoder");
    tcase_add_test(t, decoder_reads_every_field_protobuf_c_wrote);
    tcase_add_test(t, shape_hash_is_shared_by_equal_shapes_and_differs_otherwise);
    tcase_add_test(t, map_entries_decode_the_same_in_every_encoding);
    tcase_add_test(t, shape_hash_is_the_hash_of_the_shape_fields_wherever_they_sit);
    tcase_add_test(t, decoder_never_reads_past_a_truncated_or_corrupted_message);
    tcase_add_test(t, peek_agrees_with_the_decoder_on_id_and_state_and_is_never_stricter);
    tcase_add_test(t, peek_refuses_exactly_the_top_level_faults_the_general_reader_finds);
    tcase_add_test(t, list_decode_counts_and_iterates_what_the_general_reader_finds);
    tcase_add_test(t, decoder_rejects_a_resources_entry_that_is_not_length_delimited);
    tcase_add_test(t, list_decoder_counts_machines_and_keeps_the_revision_bytes);
    suite_add_tcase(s, t);
    t = tcase_create("screen");
    tcase_add_test(t, screen_rejects_bad_cost_inputs_by_reason);
    tcase_add_test(t, screen_rejects_structural_faults);
    tcase_add_test(t, record_keeps_price_and_probability_in_single_precision);
    tcase_add_test(t, build_interns_profile_once_per_shape_and_host_as_provider_and_ref);
    tcase_add_test(t, build_rejects_unparseable_or_negative_quantities_as_structural);
    tcase_add_test(t, assignment_restores_from_shard_metadata_and_skips_malformed_values);
    suite_add_tcase(s, t);
    t = tcase_create("client");
    tcase_set_timeout(t, 30);
    tcase_add_test(t, client_maps_provider_statuses_per_shard_md_3_3);
    tcase_add_test(t, client_reports_unimplemented_delete_as_unsupported);
    tcase_add_test(t, large_list_replies_reuse_the_simulators_reply_body);
    tcase_add_test(t, every_mutating_attempt_carries_a_fresh_increasing_sequence);
    tcase_add_test(t, a_restarted_client_of_the_same_epoch_is_not_fenced_but_an_older_one_is);
    tcase_add_test(t, a_slow_provider_times_out_at_the_call_deadline);
    tcase_add_test(t, a_provider_that_is_down_fails_fast_as_unavailable);
    tcase_add_test(t, cancel_completes_the_call_once_with_cancelled);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    bf_log_init("test", BF_LOG_ERROR);
    return check_run(suite());
}
