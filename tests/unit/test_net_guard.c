/*
 * test_net_guard.c — the hostile-peer accounting of src/net/guard.h: token
 * buckets refill at their rate and cap at their burst; the HTTP/2 frame
 * guard lets a legitimate gRPC client's frames through and names the flood
 * at the first frame over each limit (rapid reset, stream churn,
 * CONTINUATION, PING, SETTINGS, PRIORITY, empty DATA, unknown frames); the
 * connection counts map counts per address / identity and forgets at zero.
 */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/util.h"
#include "net/guard.h"
#include "check_run.h"

#define MS (1000000LL)

START_TEST(bucket_spends_its_burst_then_refills_at_its_rate)
{
    struct bf_bucket b = {0};
    int64_t t = 5 * BF_NS_PER_SEC;
    for (int i = 0; i < 10; i++)
        ck_assert(bf_bucket_take(&b, 10, 100, t));
    ck_assert(!bf_bucket_take(&b, 10, 100, t));
    ck_assert(!bf_bucket_take(&b, 10, 100, t + 9 * MS)); /* 0.9 token */
    ck_assert(bf_bucket_take(&b, 10, 100, t + 10 * MS)); /* 100/s: one per 10 ms */
    ck_assert(!bf_bucket_take(&b, 10, 100, t + 10 * MS));
    /* a long pause refills to the burst, no further */
    t += 3600 * BF_NS_PER_SEC;
    for (int i = 0; i < 10; i++)
        ck_assert(bf_bucket_take(&b, 10, 100, t));
    ck_assert(!bf_bucket_take(&b, 10, 100, t));
    /* steady use at the rate never runs dry: 1000 events over 10 s */
    for (int i = 1; i <= 1000; i++)
        ck_assert(bf_bucket_take(&b, 10, 100, t + i * 10 * MS));
}
END_TEST

/* The bucket keeps milli-tokens in 32 bits (16 bytes a bucket, seven a
 * connection): a burst above 4,294,967 tokens holds that many, never a
 * wrapped-around smaller number; the largest stream burst the server
 * configures (2 x BF_H2G_STREAM_RATE_MAX) fits whole. */
START_TEST(a_burst_past_32_bit_milli_tokens_is_clamped_not_wrapped)
{
    ck_assert_uint_eq(sizeof(struct bf_bucket), 16);
    struct bf_bucket b = {0};
    int64_t t = 5 * BF_NS_PER_SEC;
    for (uint32_t i = 0; i < 4294967u; i++)
        if (!bf_bucket_take(&b, 5000000, 1000, t))
            ck_abort_msg("refused after %u tokens", i);
    ck_assert(!bf_bucket_take(&b, 5000000, 1000, t));
    /* a long pause refills to the clamped burst, no further */
    t += 3600 * BF_NS_PER_SEC;
    for (uint32_t i = 0; i < 4294967u; i++)
        if (!bf_bucket_take(&b, 5000000, 1000, t))
            ck_abort_msg("refused after %u tokens of the refill", i);
    ck_assert(!bf_bucket_take(&b, 5000000, 1000, t));
    struct bf_bucket s = {0};
    for (uint32_t i = 0; i < 2u * BF_H2G_STREAM_RATE_MAX; i++)
        if (!bf_bucket_take(&s, 2 * BF_H2G_STREAM_RATE_MAX, BF_H2G_STREAM_RATE_MAX, t))
            ck_abort_msg("stream burst refused after %u", i);
    ck_assert(!bf_bucket_take(&s, 2 * BF_H2G_STREAM_RATE_MAX, BF_H2G_STREAM_RATE_MAX, t));
}
END_TEST

/* frame types */
enum { DATA = 0, HEADERS = 1, PRIORITY = 2, RST = 3, SETTINGS = 4, PING = 6, WU = 8, CONT = 9 };

START_TEST(a_grpc_clients_frames_pass)
{
    struct bf_h2_guard g;
    bf_h2_guard_init(&g, 0);
    int64_t t = BF_NS_PER_SEC;
    ck_assert_int_eq(bf_h2_guard_frame(&g, SETTINGS, 0, 0, 18, t), 0);
    ck_assert_int_eq(bf_h2_guard_frame(&g, WU, 0, 0, 4, t), 0);
    ck_assert_int_eq(bf_h2_guard_frame(&g, SETTINGS, 1, 0, 0, t), 0); /* ACK */
    /* 1000 calls over 10 s, each HEADERS + DATA + empty DATA(END_STREAM),
     * window updates, a PING now and then, and 10 % cancelled */
    for (int i = 0; i < 1000; i++) {
        int64_t now = t + i * 10 * MS;
        int32_t sid = 1 + 2 * i;
        ck_assert_int_eq(bf_h2_guard_frame(&g, HEADERS, 4, sid, 200, now), 0);
        ck_assert_int_eq(bf_h2_guard_frame(&g, DATA, 0, sid, 1000, now), 0);
        ck_assert_int_eq(bf_h2_guard_frame(&g, DATA, 1, sid, 0, now), 0);
        ck_assert_int_eq(bf_h2_guard_frame(&g, WU, 0, sid, 4, now), 0);
        if (i % 10 == 0)
            ck_assert_int_eq(bf_h2_guard_frame(&g, RST, 0, sid, 4, now), 0);
        if (i % 50 == 0)
            ck_assert_int_eq(bf_h2_guard_frame(&g, PING, 0, 0, 8, now), 0);
    }
    /* trailers on an open stream do not count as a new stream */
    ck_assert_int_eq(bf_h2_guard_frame(&g, HEADERS, 5, 1999, 20, t + 11 * BF_NS_PER_SEC), 0);
    /* a header block in three frames */
    ck_assert_int_eq(bf_h2_guard_frame(&g, HEADERS, 0, 2001, 16384, t + 12 * BF_NS_PER_SEC), 0);
    ck_assert_int_eq(bf_h2_guard_frame(&g, CONT, 0, 2001, 16384, t + 12 * BF_NS_PER_SEC), 0);
    ck_assert_int_eq(bf_h2_guard_frame(&g, CONT, 4, 2001, 1000, t + 12 * BF_NS_PER_SEC), 0);
}
END_TEST

/* The first frame over the limit names the flood; counts are burst + 1. */
static int flood_at(uint8_t type, uint8_t flags, bool new_streams, size_t len, int *n)
{
    struct bf_h2_guard g;
    bf_h2_guard_init(&g, 0);
    int64_t t = BF_NS_PER_SEC;
    for (int i = 0; i < 100000; i++) {
        int32_t sid = new_streams ? 1 + 2 * i : 1;
        if (type == RST) /* rapid reset: HEADERS then RST_STREAM, new stream each time */
            ck_assert_int_eq(bf_h2_guard_frame(&g, HEADERS, 5, sid, 50, t), 0);
        int r = bf_h2_guard_frame(&g, type, flags, sid, len, t);
        if (r) {
            *n = i + 1;
            return r;
        }
    }
    *n = 0;
    return 0;
}

START_TEST(floods_are_named_at_the_first_frame_over_the_limit)
{
    int n;
    ck_assert_int_eq(flood_at(PING, 0, false, 8, &n), BF_NET_FLOOD_PING);
    ck_assert_int_eq(n, BF_H2G_PING_BURST + 1);
    ck_assert_int_eq(flood_at(SETTINGS, 0, false, 6, &n), BF_NET_FLOOD_SETTINGS);
    ck_assert_int_eq(n, BF_H2G_SETTINGS_BURST + 1);
    ck_assert_int_eq(flood_at(PRIORITY, 0, false, 5, &n), BF_NET_FLOOD_PRIORITY);
    ck_assert_int_eq(n, BF_H2G_PRIORITY_BURST + 1);
    ck_assert_int_eq(flood_at(DATA, 0, false, 0, &n), BF_NET_FLOOD_EMPTY_FRAMES);
    ck_assert_int_eq(n, BF_H2G_EMPTY_BURST + 1);
    ck_assert_int_eq(flood_at(0x42, 0, false, 3, &n), BF_NET_FLOOD_UNKNOWN_FRAMES);
    ck_assert_int_eq(n, BF_H2G_UNKNOWN_BURST + 1);
    ck_assert_int_eq(flood_at(RST, 0, true, 4, &n), BF_NET_FLOOD_RAPID_RESET);
    ck_assert_int_eq(n, BF_H2G_RESET_BURST + 1);
    ck_assert_int_eq(flood_at(HEADERS, 5, true, 50, &n), BF_NET_FLOOD_STREAMS);
    ck_assert_int_eq(n, BF_H2G_STREAM_BURST + 1);
    /* PING and SETTINGS acknowledgements are never limited */
    ck_assert_int_eq(flood_at(PING, 1, false, 8, &n), 0);
    ck_assert_int_eq(flood_at(SETTINGS, 1, false, 0, &n), 0);
    ck_assert_str_eq(bf_net_flood_name(BF_NET_FLOOD_RAPID_RESET), "rapid_reset");
    ck_assert_str_eq(bf_net_flood_name(BF_NET_FLOOD_CONTINUATION), "continuation");
    ck_assert_str_eq(bf_net_flood_name(99), "unknown");
}
END_TEST

/* Opens new streams at `per_sec` for 2 s, starting full; returns the
 * 1-based stream that tripped the guard, or 0. */
static int streams_until_flood(uint32_t configured, int per_sec)
{
    struct bf_h2_guard g;
    bf_h2_guard_init(&g, configured);
    int64_t t = BF_NS_PER_SEC;
    for (int i = 0; i < 2 * per_sec; i++) {
        int64_t now = t + (int64_t)i * BF_NS_PER_SEC / per_sec;
        if (bf_h2_guard_frame(&g, HEADERS, 5, 1 + 2 * i, 50, now))
            return i + 1;
    }
    return 0;
}

START_TEST(a_configured_stream_rate_replaces_the_default_and_is_clamped)
{
    /* 20,000 unary calls a second on one connection: the default (200/s,
     * burst 400) closes it within the first few hundred streams ... */
    /* (the bucket refills while the burst is spent: it empties at stream
     * burst / (1 - rate / 20,000)) */
    int n = streams_until_flood(0, 20000);
    ck_assert_int_gt(n, BF_H2G_STREAM_BURST);
    ck_assert_int_le(n, BF_H2G_STREAM_BURST * 100 / 99 + 2); /* 405 */
    /* ... a server configured for 50,000/s keeps it open for 2 s ... */
    ck_assert_int_eq(streams_until_flood(50000, 20000), 0);
    /* ... and one configured for 1,000/s closes it past its burst of 2,000 */
    n = streams_until_flood(1000, 20000);
    ck_assert_int_gt(n, 2000);
    ck_assert_int_le(n, 2000 * 20 / 19 + 2); /* 2,107 */
    struct bf_h2_guard g;
    bf_h2_guard_init(&g, UINT32_MAX);
    ck_assert_uint_eq(g.stream_rate, BF_H2G_STREAM_RATE_MAX);
    bf_h2_guard_init(&g, 0);
    ck_assert_uint_eq(g.stream_rate, BF_H2G_STREAM_RATE);
}
END_TEST

START_TEST(continuation_floods_are_cut_by_frame_count_and_block_size)
{
    struct bf_h2_guard g;
    bf_h2_guard_init(&g, 0);
    ck_assert_int_eq(bf_h2_guard_frame(&g, HEADERS, 0, 1, 10, 1), 0);
    for (int i = 0; i < BF_H2G_MAX_CONTINUATIONS; i++)
        ck_assert_int_eq(bf_h2_guard_frame(&g, CONT, 0, 1, 10, 1), 0);
    ck_assert_int_eq(bf_h2_guard_frame(&g, CONT, 0, 1, 10, 1), BF_NET_FLOOD_CONTINUATION);
    /* few frames, but a block over 64 KiB */
    bf_h2_guard_init(&g, 0);
    ck_assert_int_eq(bf_h2_guard_frame(&g, HEADERS, 0, 1, 16384, 1), 0);
    ck_assert_int_eq(bf_h2_guard_frame(&g, CONT, 0, 1, 16384, 1), 0);
    ck_assert_int_eq(bf_h2_guard_frame(&g, CONT, 0, 1, 16384, 1), 0);
    ck_assert_int_eq(bf_h2_guard_frame(&g, CONT, 0, 1, 16384, 1), 0);
    ck_assert_int_eq(bf_h2_guard_frame(&g, CONT, 0, 1, 1, 1), BF_NET_FLOOD_CONTINUATION);
    /* one HEADERS frame over 64 KiB (a peer that raised our frame size) */
    bf_h2_guard_init(&g, 0);
    ck_assert_int_eq(bf_h2_guard_frame(&g, HEADERS, 4, 1, 70000, 1), BF_NET_FLOOD_CONTINUATION);
    /* blocks that end reset the count */
    bf_h2_guard_init(&g, 0);
    for (int s = 0; s < 50; s++) {
        ck_assert_int_eq(bf_h2_guard_frame(&g, HEADERS, 0, 1 + 2 * s, 100, 1), 0);
        for (int i = 0; i < BF_H2G_MAX_CONTINUATIONS - 1; i++)
            ck_assert_int_eq(bf_h2_guard_frame(&g, CONT, 0, 1 + 2 * s, 100, 1), 0);
        ck_assert_int_eq(bf_h2_guard_frame(&g, CONT, 4, 1 + 2 * s, 100, 1), 0);
    }
}
END_TEST

START_TEST(connection_counts_per_address_and_identity)
{
    struct bf_conn_counts cc;
    bf_cc_init(&cc);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(1)};
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons(2)};
    inet_pton(AF_INET6, "::ffff:127.0.0.1", &a6.sin6_addr);
    struct bf_cc_key k[1000];
    for (int i = 0; i < 1000; i++) {
        a.sin_addr.s_addr = htonl(0x0a000000u + (uint32_t)i);
        bf_cc_key_addr(&k[i], (struct sockaddr *)&a);
        for (int j = 0; j <= i % 3; j++)
            ck_assert_int_eq(bf_cc_inc(&cc, &k[i]), j + 1);
    }
    for (int i = 0; i < 1000; i++)
        ck_assert_uint_eq(bf_cc_get(&cc, &k[i]), (uint32_t)(i % 3 + 1));
    /* the port does not matter; an IPv4-mapped v6 address is the v4 one */
    a.sin_addr.s_addr = htonl(0x7f000001);
    a.sin_port = htons(999);
    struct bf_cc_key v4, v6;
    bf_cc_key_addr(&v4, (struct sockaddr *)&a);
    bf_cc_key_addr(&v6, (struct sockaddr *)&a6);
    ck_assert_int_eq(memcmp(&v4, &v6, sizeof v4), 0);
    /* decrements to zero forget the key; the others survive the shifts */
    for (int i = 0; i < 1000; i += 2)
        for (int j = 0; j <= i % 3; j++)
            bf_cc_dec(&cc, &k[i]);
    for (int i = 0; i < 1000; i++)
        ck_assert_uint_eq(bf_cc_get(&cc, &k[i]), i % 2 ? (uint32_t)(i % 3 + 1) : 0);
    ck_assert_uint_eq(cc.n, 500);
    struct bf_cc_key ia, ib;
    bf_cc_key_str(&ia, "bigfleet://cluster/a");
    bf_cc_key_str(&ib, "bigfleet://cluster/b");
    ck_assert_int_eq(bf_cc_inc(&cc, &ia), 1);
    ck_assert_int_eq(bf_cc_inc(&cc, &ia), 2);
    ck_assert_uint_eq(bf_cc_get(&cc, &ib), 0);
    bf_cc_dec(&cc, &ib); /* absent: no-op */
    bf_cc_free(&cc);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("net-guard");
    TCase *tc = tcase_create("guard");
    tcase_add_test(tc, bucket_spends_its_burst_then_refills_at_its_rate);
    tcase_add_test(tc, a_burst_past_32_bit_milli_tokens_is_clamped_not_wrapped);
    tcase_add_test(tc, a_grpc_clients_frames_pass);
    tcase_add_test(tc, floods_are_named_at_the_first_frame_over_the_limit);
    tcase_add_test(tc, a_configured_stream_rate_replaces_the_default_and_is_clamped);
    tcase_add_test(tc, continuation_floods_are_cut_by_frame_count_and_block_size);
    tcase_add_test(tc, connection_counts_per_address_and_identity);
    suite_add_tcase(s, tc);
    return check_run(s);
}
