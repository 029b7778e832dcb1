/*
 * test_net_wire.c — the pure gRPC wire helpers (src/net/grpc_wire.c): the
 * length-prefixed message parser across arbitrary splits, truncation and
 * oversize, grpc-timeout parse/format, grpc-message percent-encoding,
 * content-type and status mappings.
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/net.h"
#include "net/grpc_wire.h"
#include "check_run.h"

struct got {
    int n;
    size_t lens[64];
    uint8_t first[64];
    bool compressed[64];
    int stop_after; /* return -1 after this many (0 = never) */
};

static int collect(void *arg, const uint8_t *msg, size_t len, bool compressed)
{
    struct got *g = arg;
    g->lens[g->n] = len;
    g->first[g->n] = len ? msg[0] : 0;
    g->compressed[g->n] = compressed;
    g->n++;
    if (g->stop_after && g->n >= g->stop_after)
        return -1;
    return 0;
}

/* three messages of 0, 3 and 70000 bytes, framed back to back */
static uint8_t *three_messages(size_t *total)
{
    size_t lens[3] = {0, 3, 70000};
    size_t t = 0;
    for (int i = 0; i < 3; i++)
        t += 5 + lens[i];
    uint8_t *b = malloc(t), *p = b;
    for (int i = 0; i < 3; i++) {
        bf_grpc_prefix(p, (uint32_t)lens[i]);
        p += 5;
        for (size_t j = 0; j < lens[i]; j++)
            p[j] = (uint8_t)(i * 10 + 1 + (j % 7));
        p += lens[i];
    }
    *total = t;
    return b;
}

START_TEST(parser_delivers_messages_across_every_split_point)
{
    size_t total;
    uint8_t *b = three_messages(&total);
    /* split into two pieces at every boundary in the first 20 bytes and a few
     * inside the big body; each split must give the same three messages */
    size_t splits[] = {0,  1,  2,  4,  5,  6,   7,     9,         10,
                       11, 12, 13, 14, 15, 100, 40000, total - 1, total};
    for (size_t s = 0; s < sizeof splits / sizeof splits[0]; s++) {
        struct bf_grpc_parser p;
        bf_grpc_parser_init(&p, 1u << 20, NULL);
        struct got g = {0};
        ck_assert_int_eq(bf_grpc_parser_feed(&p, b, splits[s], collect, &g), 0);
        ck_assert_int_eq(bf_grpc_parser_feed(&p, b + splits[s], total - splits[s], collect, &g), 0);
        ck_assert_int_eq(g.n, 3);
        ck_assert_uint_eq(g.lens[0], 0);
        ck_assert_uint_eq(g.lens[1], 3);
        ck_assert_uint_eq(g.first[1], 11);
        ck_assert_uint_eq(g.lens[2], 70000);
        ck_assert_uint_eq(g.first[2], 21);
        ck_assert(bf_grpc_parser_idle(&p));
        bf_grpc_parser_reset(&p);
    }
    free(b);
}
END_TEST

START_TEST(parser_handles_one_byte_at_a_time)
{
    size_t total;
    uint8_t *b = three_messages(&total);
    struct bf_grpc_parser p;
    bf_grpc_parser_init(&p, 1u << 20, NULL);
    struct got g = {0};
    for (size_t i = 0; i < total; i++) {
        ck_assert_int_eq(bf_grpc_parser_feed(&p, b + i, 1, collect, &g), 0);
        if (i + 1 < total)
            ck_assert(g.n < 3);
    }
    ck_assert_int_eq(g.n, 3);
    ck_assert_uint_eq(g.lens[2], 70000);
    bf_grpc_parser_reset(&p);
    free(b);
}
END_TEST

START_TEST(truncated_message_leaves_parser_not_idle)
{
    uint8_t b[5 + 10];
    bf_grpc_prefix(b, 10);
    memset(b + 5, 7, 10);
    struct bf_grpc_parser p;
    bf_grpc_parser_init(&p, 1024, NULL);
    struct got g = {0};
    /* header only: stream ending here is a truncated message */
    ck_assert_int_eq(bf_grpc_parser_feed(&p, b, 3, collect, &g), 0);
    ck_assert(!bf_grpc_parser_idle(&p));
    ck_assert_int_eq(bf_grpc_parser_feed(&p, b + 3, 6, collect, &g), 0);
    ck_assert(!bf_grpc_parser_idle(&p));
    ck_assert_int_eq(g.n, 0);
    ck_assert_int_eq(bf_grpc_parser_feed(&p, b + 9, 6, collect, &g), 0);
    ck_assert(bf_grpc_parser_idle(&p));
    ck_assert_int_eq(g.n, 1);
    bf_grpc_parser_reset(&p);
}
END_TEST

/* Two parsers share a 100,000-byte budget. A's partial 80,000-byte message
 * holds 80,000; B's partial 40,000-byte message needs more than is left and
 * is refused (over_budget, counted) while A carries on; once A completes
 * (and B is reset) everything is refunded and B's message fits. */
START_TEST(shared_budget_refuses_a_message_that_would_exceed_it_and_refunds_on_completion)
{
    struct bf_grpc_budget bud = {.max = 100000};
    struct bf_grpc_parser a, b;
    bf_grpc_parser_init(&a, 1u << 20, &bud);
    bf_grpc_parser_init(&b, 1u << 20, &bud);
    size_t la = 5 + 80000, lb = 5 + 40000;
    uint8_t *ma = malloc(la), *mb = malloc(lb);
    bf_grpc_prefix(ma, 80000);
    memset(ma + 5, 1, 80000);
    bf_grpc_prefix(mb, 40000);
    memset(mb + 5, 2, 40000);
    struct got ga = {0}, gb = {0};
    /* A: header + 70,000 bytes, in two pieces (assembled, charged) */
    ck_assert_int_eq(bf_grpc_parser_feed(&a, ma, 5 + 100, collect, &ga), 0);
    ck_assert_int_eq(bf_grpc_parser_feed(&a, ma + 105, 69900, collect, &ga), 0);
    ck_assert_uint_eq(bud.used, a.cap);
    ck_assert_uint_eq(a.cap, 80000); /* doubling capped at the declared length */
    /* B: the header and a first piece, then growth past the budget */
    int r = bf_grpc_parser_feed(&b, mb, 5 + 100, collect, &gb);
    ck_assert_int_eq(r, 0);
    r = bf_grpc_parser_feed(&b, mb + 105, 39900, collect, &gb);
    ck_assert_int_eq(r, BF_NET_RESOURCE_EXHAUSTED);
    ck_assert(b.over_budget);
    ck_assert_uint_eq(bud.refused, 1);
    ck_assert_uint_le(bud.used, bud.max);
    bf_grpc_parser_reset(&b);
    ck_assert_uint_eq(bud.used, 80000);
    /* A completes: delivered, refunded */
    ck_assert_int_eq(bf_grpc_parser_feed(&a, ma + 5 + 70000, 10000, collect, &ga), 0);
    ck_assert_int_eq(ga.n, 1);
    ck_assert_uint_eq(ga.lens[0], 80000);
    ck_assert_uint_eq(bud.used, 0);
    /* B again, now within the budget */
    ck_assert_int_eq(bf_grpc_parser_feed(&b, mb, 5 + 100, collect, &gb), 0);
    ck_assert_int_eq(bf_grpc_parser_feed(&b, mb + 105, 39900, collect, &gb), 0);
    ck_assert_int_eq(gb.n, 1);
    ck_assert(!b.over_budget);
    ck_assert_uint_eq(bud.used, 0);
    /* a reset in the middle of a message refunds too */
    ck_assert_int_eq(bf_grpc_parser_feed(&a, ma, 5 + 50000, collect, &ga), 0);
    ck_assert_uint_gt(bud.used, 0);
    bf_grpc_parser_reset(&a);
    ck_assert_uint_eq(bud.used, 0);
    ck_assert_ptr_eq(a.budget, &bud); /* kept across resets */
    free(ma);
    free(mb);
}
END_TEST

/* Feeds one framed message of len bytes (byte i = i * 7 + seed) in 16 KiB
 * pieces, as HTTP/2 DATA frames bring it; checks the bytes delivered. */
struct spare_got {
    int n;
    bool ok;
    uint8_t seed;
    const uint8_t *at; /* where the message was assembled */
};
static int check_bytes(void *arg, const uint8_t *msg, size_t len, bool compressed)
{
    (void)compressed;
    struct spare_got *g = arg;
    g->n++;
    g->at = msg;
    g->ok = true;
    for (size_t i = 0; i < len; i += 4093)
        if (msg[i] != (uint8_t)(i * 7 + g->seed))
            g->ok = false;
    return 0;
}
static void feed_framed(struct bf_grpc_parser *p, size_t len, struct spare_got *g)
{
    uint8_t *m = malloc(5 + len);
    bf_grpc_prefix(m, (uint32_t)len);
    for (size_t i = 0; i < len; i++)
        m[5 + i] = (uint8_t)(i * 7 + g->seed);
    for (size_t off = 0; off < 5 + len; off += 16384) {
        size_t n = 5 + len - off < 16384 ? 5 + len - off : 16384;
        ck_assert_int_eq(bf_grpc_parser_feed(p, m + off, n, check_bytes, g), 0);
    }
    free(m);
}

/* A large message's assembly buffer is kept as the connection's spare and
 * the next large message is assembled in it (same memory, counted, charged
 * to the budget while in use and refunded after); a small message never
 * takes it; a buffer larger than the spare's max is freed, not kept; a
 * reset in the middle of a message gives the buffer back too. */
START_TEST(a_large_message_reuses_the_spare_assembly_buffer_and_stays_charged_while_in_use)
{
    struct bf_grpc_budget bud = {.max = 64u << 20};
    struct bf_grpc_spare spare = {.max = 8u << 20};
    struct bf_grpc_parser p;
    bf_grpc_parser_init(&p, 32u << 20, &bud);
    p.spare = &spare;
    struct spare_got g = {.seed = 1};
    feed_framed(&p, 3u << 20, &g); /* 3 MiB: assembled in new memory */
    ck_assert_int_eq(g.n, 1);
    ck_assert(g.ok);
    ck_assert_ptr_eq(spare.buf, g.at);
    ck_assert_uint_eq(spare.cap, 3u << 20);
    ck_assert_uint_eq(spare.reuses, 0);
    ck_assert_uint_eq(bud.used, 0); /* the idle spare is not an assembly in progress */
    const uint8_t *first = g.at;
    /* the next one (smaller, still >= 1 MiB) lands in the same buffer */
    g = (struct spare_got){.seed = 9};
    bf_grpc_parser_feed(&p, (const uint8_t[]){0, 0, 0x18, 0, 0}, 5, check_bytes, &g);
    uint8_t piece[16384];
    for (size_t i = 0; i < sizeof piece; i++)
        piece[i] = (uint8_t)(i * 7 + 9);
    ck_assert_int_eq(bf_grpc_parser_feed(&p, piece, sizeof piece, check_bytes, &g), 0);
    ck_assert_ptr_eq(p.buf, first);
    ck_assert_ptr_null(spare.buf);
    ck_assert_uint_eq(bud.used, 3u << 20); /* charged while in use */
    ck_assert_uint_eq(spare.reuses, 1);
    bf_grpc_parser_reset(&p); /* abandoned midway: back to the spare, refunded */
    ck_assert_ptr_eq(spare.buf, first);
    ck_assert_uint_eq(bud.used, 0);
    g = (struct spare_got){.seed = 5};
    feed_framed(&p, (1u << 20) + 100, &g);
    ck_assert(g.ok);
    ck_assert_ptr_eq(g.at, first);
    ck_assert_uint_eq(spare.reuses, 2);
    /* a small message does not take it */
    g = (struct spare_got){.seed = 3};
    feed_framed(&p, 100000, &g);
    ck_assert(g.ok);
    ck_assert_ptr_ne(g.at, first);
    ck_assert_ptr_eq(spare.buf, first);
    /* larger than the message needs by growth: grown in place with mremap */
    g = (struct spare_got){.seed = 4};
    feed_framed(&p, 6u << 20, &g);
    ck_assert(g.ok);
    ck_assert_uint_eq(spare.cap, 6u << 20);
    ck_assert_uint_eq(spare.reuses, 3);
    /* over the spare's max: freed after the message, the spare stays */
    g = (struct spare_got){.seed = 2};
    feed_framed(&p, 12u << 20, &g);
    ck_assert(g.ok);
    ck_assert_uint_eq(spare.cap, 6u << 20);
    ck_assert_uint_eq(bud.used, 0);
    bf_grpc_parser_reset(&p);
    bf_grpc_spare_release(&spare);
    ck_assert_ptr_null(spare.buf);
    ck_assert_uint_eq(spare.cap, 0);
}
END_TEST

/* A spare with a charge (the gRPC server's): the idle buffer is charged to
 * that budget, the charge moves to the parser's chain while a message is
 * assembled in it and comes back when it is put back; a message the budget
 * would refuse because of the idle spare releases the spare instead; a put
 * the budget cannot take frees the buffer; a tick releases a spare nobody
 * put or took since the previous tick. */
START_TEST(a_charged_spare_counts_against_its_budget_yields_to_messages_and_ages_out)
{
    struct bf_grpc_budget top = {.max = 7u << 19}; /* 3.5 MiB */
    struct bf_grpc_budget conn = {.max = 4u << 20, .parent = &top};
    struct bf_grpc_spare spare = {.max = 8u << 20, .charge = &top};
    top.yield = &spare;
    struct bf_grpc_parser p;
    bf_grpc_parser_init(&p, 8u << 20, &conn);
    p.spare = &spare;
    struct spare_got g = {.seed = 1};
    feed_framed(&p, 3u << 20, &g);
    ck_assert(g.ok);
    ck_assert_ptr_eq(spare.buf, g.at);
    ck_assert_uint_eq(top.used, 3u << 20); /* idle, and charged */
    ck_assert_uint_eq(conn.used, 0);
    /* a large message starts in it: the charge is the parser's now */
    bf_grpc_parser_feed(&p, (const uint8_t[]){0, 0, 0x20, 0, 0}, 5, check_bytes, &g);
    uint8_t piece[16384] = {0};
    ck_assert_int_eq(bf_grpc_parser_feed(&p, piece, sizeof piece, check_bytes, &g), 0);
    ck_assert_ptr_null(spare.buf);
    ck_assert_uint_eq(conn.used, 3u << 20);
    ck_assert_uint_eq(top.used, 3u << 20);
    bf_grpc_parser_reset(&p); /* back to the spare: charged there again */
    ck_assert_ptr_nonnull(spare.buf);
    ck_assert_uint_eq(conn.used, 0);
    ck_assert_uint_eq(top.used, 3u << 20);
    ck_assert(bf_grpc_spare_tick(&spare)); /* used since the last tick: kept */
    /* a 900,000-byte message (too small for the spare) needs the room: the
     * budget releases the idle spare rather than refuse the message */
    g = (struct spare_got){.seed = 7};
    feed_framed(&p, 900000, &g);
    ck_assert_int_eq(g.n, 1);
    ck_assert(g.ok);
    ck_assert_ptr_null(spare.buf);
    ck_assert_uint_eq(spare.idle_releases, 1);
    ck_assert_uint_eq(top.refused, 0);
    ck_assert_uint_eq(top.used, 0);
    /* a put the budget cannot take (messages hold it) frees the buffer */
    top.used = 3u << 20;
    g = (struct spare_got){.seed = 2};
    struct bf_grpc_parser q;
    bf_grpc_parser_init(&q, 8u << 20, NULL);
    q.spare = &spare;
    feed_framed(&q, 2u << 20, &g);
    ck_assert(g.ok);
    ck_assert_ptr_null(spare.buf);
    ck_assert_uint_eq(spare.idle_releases, 2);
    ck_assert_uint_eq(top.used, 3u << 20);
    top.used = 0;
    /* kept after a put, released by the first tick that finds it unused */
    feed_framed(&q, 2u << 20, &g);
    ck_assert_ptr_nonnull(spare.buf);
    ck_assert_uint_eq(top.used, 2u << 20);
    ck_assert(bf_grpc_spare_tick(&spare));
    ck_assert(!bf_grpc_spare_tick(&spare));
    ck_assert_ptr_null(spare.buf);
    ck_assert_uint_eq(top.used, 0);
    ck_assert_uint_eq(spare.idle_releases, 3);
    bf_grpc_parser_reset(&p);
    bf_grpc_parser_reset(&q);
}
END_TEST

START_TEST(oversize_declared_length_is_resource_exhausted_before_any_allocation)
{
    struct bf_grpc_parser p;
    bf_grpc_parser_init(&p, 1000, NULL);
    uint8_t hdr[5];
    bf_grpc_prefix(hdr, 1001);
    struct got g = {0};
    ck_assert_int_eq(bf_grpc_parser_feed(&p, hdr, 5, collect, &g), BF_NET_RESOURCE_EXHAUSTED);
    ck_assert_ptr_null(p.buf);
    ck_assert_int_eq(g.n, 0);
    bf_grpc_parser_reset(&p);
    /* exactly at the limit is fine */
    bf_grpc_parser_init(&p, 1000, NULL);
    uint8_t *b = calloc(1, 1005);
    bf_grpc_prefix(b, 1000);
    ck_assert_int_eq(bf_grpc_parser_feed(&p, b, 1005, collect, &g), 0);
    ck_assert_int_eq(g.n, 1);
    free(b);
    bf_grpc_parser_reset(&p);
    /* a 256 MiB declaration within the limit allocates only what arrives */
    bf_grpc_parser_init(&p, BF_NET_MAX_MESSAGE, NULL);
    uint8_t big[5 + 100];
    bf_grpc_prefix(big, BF_NET_MAX_MESSAGE);
    memset(big + 5, 1, 100);
    ck_assert_int_eq(bf_grpc_parser_feed(&p, big, sizeof big, collect, &g), 0);
    ck_assert(p.cap <= 4096);
    bf_grpc_parser_reset(&p);
}
END_TEST

START_TEST(compressed_flag_is_reported_and_bad_flag_is_internal)
{
    struct bf_grpc_parser p;
    bf_grpc_parser_init(&p, 1000, NULL);
    uint8_t b[6] = {1, 0, 0, 0, 1, 9};
    struct got g = {0};
    ck_assert_int_eq(bf_grpc_parser_feed(&p, b, 6, collect, &g), 0);
    ck_assert_int_eq(g.n, 1);
    ck_assert(g.compressed[0]);
    uint8_t bad[6] = {2, 0, 0, 0, 1, 9};
    ck_assert_int_eq(bf_grpc_parser_feed(&p, bad, 6, collect, &g), BF_NET_INTERNAL);
    bf_grpc_parser_reset(&p);
}
END_TEST

START_TEST(callback_stop_halts_feeding)
{
    size_t total;
    uint8_t *b = three_messages(&total);
    struct bf_grpc_parser p;
    bf_grpc_parser_init(&p, 1u << 20, NULL);
    struct got g = {.stop_after = 1};
    ck_assert_int_eq(bf_grpc_parser_feed(&p, b, total, collect, &g), -1);
    ck_assert_int_eq(g.n, 1);
    bf_grpc_parser_reset(&p);
    free(b);
}
END_TEST

START_TEST(grpc_timeout_parses_every_unit)
{
    int64_t ns;
    ck_assert_int_eq(bf_grpc_timeout_parse("1H", 2, &ns), 0);
    ck_assert_int_eq(ns, 3600LL * 1000000000LL);
    ck_assert_int_eq(bf_grpc_timeout_parse("2M", 2, &ns), 0);
    ck_assert_int_eq(ns, 120LL * 1000000000LL);
    ck_assert_int_eq(bf_grpc_timeout_parse("30S", 3, &ns), 0);
    ck_assert_int_eq(ns, 30LL * 1000000000LL);
    ck_assert_int_eq(bf_grpc_timeout_parse("250m", 4, &ns), 0);
    ck_assert_int_eq(ns, 250000000LL);
    ck_assert_int_eq(bf_grpc_timeout_parse("7u", 2, &ns), 0);
    ck_assert_int_eq(ns, 7000);
    ck_assert_int_eq(bf_grpc_timeout_parse("99999999n", 9, &ns), 0);
    ck_assert_int_eq(ns, 99999999);
    /* saturates instead of overflowing */
    ck_assert_int_eq(bf_grpc_timeout_parse("99999999H", 9, &ns), 0);
    ck_assert_int_eq(ns, INT64_MAX);
}
END_TEST

START_TEST(grpc_timeout_rejects_malformed_values)
{
    int64_t ns;
    const char *bad[] = {"", "S", "10", "123456789S", "1x", "-1S", "1.5S", "1 S", "1s"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(bf_grpc_timeout_parse(bad[i], strlen(bad[i]), &ns) == -EINVAL, "%s", bad[i]);
}
END_TEST

START_TEST(grpc_timeout_format_round_trips_without_shortening)
{
    int64_t cases[] = {1,
                       999,
                       1000,
                       123456789,
                       1500000000LL,
                       30LL * 1000000000LL,
                       3600LL * 1000000000LL * 24 * 365,
                       INT64_MAX / 2};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char buf[16];
        size_t n = bf_grpc_timeout_format(cases[i], buf);
        ck_assert_uint_eq(n, strlen(buf));
        ck_assert(n <= 9);
        int64_t back;
        ck_assert_int_eq(bf_grpc_timeout_parse(buf, n, &back), 0);
        ck_assert_msg(back >= cases[i], "%s < %lld", buf, (long long)cases[i]);
    }
    char buf[16];
    bf_grpc_timeout_format(250000000LL, buf);
    ck_assert_str_eq(buf, "250000u"); /* finest unit that fits 8 digits */
}
END_TEST

START_TEST(grpc_message_percent_encoding_round_trips)
{
    const char *msg = "bad \xe2\x9c\x93 100%\nline2";
    char *enc = bf_grpc_percent_encode(msg);
    ck_assert_str_eq(enc, "bad %E2%9C%93 100%25%0Aline2");
    char *dec = bf_grpc_percent_decode((const uint8_t *)enc, strlen(enc));
    ck_assert_str_eq(dec, msg);
    free(enc);
    free(dec);
    /* plain ASCII passes through; invalid escapes stay literal */
    enc = bf_grpc_percent_encode("plain text: ok");
    ck_assert_str_eq(enc, "plain text: ok");
    free(enc);
    dec = bf_grpc_percent_decode((const uint8_t *)"50%zz %4", 8);
    ck_assert_str_eq(dec, "50%zz %4");
    free(dec);
}
END_TEST

START_TEST(content_type_accepts_grpc_variants_only)
{
#define CT(s) bf_grpc_content_type_ok((const uint8_t *)(s), strlen(s))
    ck_assert(CT("application/grpc"));
    ck_assert(CT("application/grpc+proto"));
    ck_assert(CT("application/grpc;charset=utf-8"));
    ck_assert(!CT("application/grpcx"));
    ck_assert(!CT("application/json"));
    ck_assert(!CT("application/grp"));
#undef CT
}
END_TEST

START_TEST(status_mappings_follow_the_grpc_spec)
{
    ck_assert_int_eq(bf_grpc_code_from_http(404), BF_NET_UNIMPLEMENTED);
    ck_assert_int_eq(bf_grpc_code_from_http(503), BF_NET_UNAVAILABLE);
    ck_assert_int_eq(bf_grpc_code_from_http(401), BF_NET_UNAUTHENTICATED);
    ck_assert_int_eq(bf_grpc_code_from_http(500), BF_NET_UNKNOWN);
    ck_assert_int_eq(bf_grpc_code_from_h2(0x8), BF_NET_CANCELLED);
    ck_assert_int_eq(bf_grpc_code_from_h2(0x7), BF_NET_UNAVAILABLE);
    ck_assert_int_eq(bf_grpc_code_from_h2(0xb), BF_NET_RESOURCE_EXHAUSTED);
    ck_assert_int_eq(bf_grpc_code_from_h2(0x1), BF_NET_INTERNAL);
    ck_assert_int_eq(bf_grpc_status_parse((const uint8_t *)"16", 2), 16);
    ck_assert_int_eq(bf_grpc_status_parse((const uint8_t *)"17", 2), BF_NET_UNKNOWN);
    ck_assert_int_eq(bf_grpc_status_parse((const uint8_t *)"x", 1), BF_NET_UNKNOWN);
    ck_assert_str_eq(bf_net_code_name(BF_NET_DEADLINE_EXCEEDED), "DEADLINE_EXCEEDED");
    ck_assert_str_eq(bf_net_code_name(99), "UNKNOWN");
}
END_TEST

START_TEST(tls_config_check_is_all_or_nothing)
{
    struct bf_net_tls_config none = {0}, all = {"c", "k", "a"}, partial = {"c", "k", NULL},
                             empty = {"", "", ""};
    ck_assert_int_eq(bf_net_tls_config_check(&none), 0);
    ck_assert_int_eq(bf_net_tls_config_check(&empty), 0);
    ck_assert_int_eq(bf_net_tls_config_check(&all), 1);
    ck_assert_int_eq(bf_net_tls_config_check(&partial), -EINVAL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("net_wire");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, parser_delivers_messages_across_every_split_point);
    tcase_add_test(tc, parser_handles_one_byte_at_a_time);
    tcase_add_test(tc, truncated_message_leaves_parser_not_idle);
    tcase_add_test(tc,
                   shared_budget_refuses_a_message_that_would_exceed_it_and_refunds_on_completion);
    tcase_add_test(tc,
                   a_large_message_reuses_the_spare_assembly_buffer_and_stays_charged_while_in_use);
    tcase_add_test(tc, a_charged_spare_counts_against_its_budget_yields_to_messages_and_ages_out);
    tcase_add_test(tc, oversize_declared_length_is_resource_exhausted_before_any_allocation);
    tcase_add_test(tc, compressed_flag_is_reported_and_bad_flag_is_internal);
    tcase_add_test(tc, callback_stop_halts_feeding);
    tcase_add_test(tc, grpc_timeout_parses_every_unit);
    tcase_add_test(tc, grpc_timeout_rejects_malformed_values);
    tcase_add_test(tc, grpc_timeout_format_round_trips_without_shortening);
    tcase_add_test(tc, grpc_message_percent_encoding_round_trips);
    tcase_add_test(tc, content_type_accepts_grpc_variants_only);
    tcase_add_test(tc, status_mappings_follow_the_grpc_spec);
    tcase_add_test(tc, tls_config_check_is_all_or_nothing);
    suite_add_tcase(s, tc);
    return check_run(s);
}
