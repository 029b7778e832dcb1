/*
 * test_model.c — the model: lifecycle table, Invariant, penalty buckets,
 * fingerprints, quantities, Go float formatting, effective cost, durations.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/model.h"
#include "bigfleet/util.h"
#include "check_run.h"

START_TEST(transition_table_has_exactly_13_legal_edges)
{
    int n = 0;
    for (int f = 0; f < BF_STATE_COUNT; f++)
        for (int t = 0; t < BF_STATE_COUNT; t++)
            n += bf_can_transition(f, t);
    ck_assert_int_eq(n, 13);
    ck_assert(bf_can_transition(BF_STATE_SPECULATIVE, BF_STATE_CREATING));
    ck_assert(bf_can_transition(BF_STATE_CONFIGURING, BF_STATE_IDLE)); /* rollback edge */
    ck_assert(bf_can_transition(BF_STATE_DELETING, BF_STATE_FAILED));
    ck_assert(!bf_can_transition(BF_STATE_IDLE, BF_STATE_FAILED)); /* stable -> Failed: no */
    ck_assert(!bf_can_transition(BF_STATE_FAILED, BF_STATE_IDLE)); /* Failed is terminal */
    ck_assert(!bf_can_transition(BF_STATE_CONFIGURED, BF_STATE_IDLE));
    ck_assert(!bf_can_transition(BF_STATE_UNSPECIFIED, BF_STATE_SPECULATIVE));
    ck_assert(!bf_can_transition(BF_STATE_IDLE, BF_STATE_IDLE));
}
END_TEST

START_TEST(stable_and_transitional_states_partition_the_real_states)
{
    for (int s = 1; s < BF_STATE_COUNT; s++) {
        int k = bf_state_is_stable(s) + bf_state_is_transitional(s) + (s == BF_STATE_FAILED);
        ck_assert_int_eq(k, 1);
    }
    ck_assert_str_eq(bf_state_name(BF_STATE_CONFIGURING), "Configuring");
    ck_assert_int_eq(bf_state_from_name("configured"), BF_STATE_CONFIGURED);
    ck_assert_int_eq(bf_state_from_name("bogus"), -1);
}
END_TEST

static struct bf_invariant_input inv(int state, bool host, bool cluster)
{
    struct bf_invariant_input m = {.state = state,
                                   .host_set = host,
                                   .cluster_set = cluster,
                                   .has_id = true,
                                   .price_per_hour = 1.0,
                                   .interruption_probability = 0.1};
    return m;
}

START_TEST(invariant_enforces_host_and_cluster_by_state_and_cost_bounds)
{
    struct bf_invariant_input m;
    m = inv(BF_STATE_SPECULATIVE, false, false);
    ck_assert_int_eq(bf_machine_invariant(&m, NULL, 0), BF_REJECT_NONE);
    m = inv(BF_STATE_SPECULATIVE, true, false);
    ck_assert_int_eq(bf_machine_invariant(&m, NULL, 0), BF_REJECT_STRUCTURAL);
    m = inv(BF_STATE_CREATING, false, true);
    ck_assert_int_eq(bf_machine_invariant(&m, NULL, 0), BF_REJECT_STRUCTURAL);
    m = inv(BF_STATE_IDLE, false, false);
    ck_assert_int_eq(bf_machine_invariant(&m, NULL, 0), BF_REJECT_STRUCTURAL);
    m = inv(BF_STATE_CONFIGURING, true, true); /* cluster allowed while configuring */
    ck_assert_int_eq(bf_machine_invariant(&m, NULL, 0), BF_REJECT_NONE);
    m = inv(BF_STATE_CONFIGURED, true, false);
    ck_assert_int_eq(bf_machine_invariant(&m, NULL, 0), BF_REJECT_STRUCTURAL);
    m = inv(BF_STATE_DRAINING, true, true);
    ck_assert_int_eq(bf_machine_invariant(&m, NULL, 0), BF_REJECT_NONE);
    m = inv(BF_STATE_FAILED, false, false);
    ck_assert_int_eq(bf_machine_invariant(&m, NULL, 0), BF_REJECT_STRUCTURAL);
    m.has_last_error = true;
    ck_assert_int_eq(bf_machine_invariant(&m, NULL, 0), BF_REJECT_NONE);
    m = inv(BF_STATE_UNSPECIFIED, false, false);
    ck_assert_int_eq(bf_machine_invariant(&m, NULL, 0), BF_REJECT_STRUCTURAL);
    m = inv(BF_STATE_IDLE, true, false);
    m.price_per_hour = -0.01;
    char msg[128];
    ck_assert_int_eq(bf_machine_invariant(&m, msg, sizeof msg), BF_REJECT_PRICE);
    ck_assert_ptr_nonnull(strstr(msg, "price_per_hour"));
    m.price_per_hour = NAN;
    ck_assert_int_eq(bf_machine_invariant(&m, NULL, 0), BF_REJECT_PRICE);
    m.price_per_hour = 0;
    m.interruption_probability = 1.5;
    ck_assert_int_eq(bf_machine_invariant(&m, NULL, 0), BF_REJECT_PROBABILITY);
    m.interruption_probability = NAN;
    ck_assert_int_eq(bf_machine_invariant(&m, NULL, 0), BF_REJECT_PROBABILITY);
    ck_assert_str_eq(bf_reject_reason_label(BF_REJECT_PROBABILITY), "interruption_probability");
    m = inv(BF_STATE_IDLE, true, false);
    m.has_id = false;
    ck_assert_int_eq(bf_machine_invariant(&m, NULL, 0), BF_REJECT_STRUCTURAL);
}
END_TEST

START_TEST(bucket_for_dollars_matches_the_wire_test_vectors)
{
    ck_assert_int_eq(bf_bucket_for_dollars(0), BF_BUCKET_ZERO);
    ck_assert_int_eq(bf_bucket_for_dollars(-3), BF_BUCKET_ZERO);
    ck_assert_int_eq(bf_bucket_for_dollars(0.25), BF_BUCKET_HALF_DOLLAR);
    ck_assert_int_eq(bf_bucket_for_dollars(0.50), BF_BUCKET_HALF_DOLLAR);
    ck_assert_int_eq(bf_bucket_for_dollars(0.51), 3);
    ck_assert_int_eq(bf_bucket_for_dollars(1.00), 3);
    ck_assert_int_eq(bf_bucket_for_dollars(1.01), 4);
    ck_assert_int_eq(bf_bucket_for_dollars(8000), 16);
    ck_assert_int_eq(bf_bucket_for_dollars(1048576), 23);
    ck_assert_int_eq(bf_bucket_for_dollars(8388608), 26);
    ck_assert_int_eq(bf_bucket_for_dollars(20000000), BF_BUCKET_PINNED);
    ck_assert_int_eq(bf_bucket_for_dollars(NAN), BF_BUCKET_PINNED);
}
END_TEST

START_TEST(bucket_upper_bounds_are_powers_of_two_with_pinned_infinite)
{
    ck_assert(bf_bucket_upper_bound(BF_BUCKET_UNSPECIFIED) == 0);
    ck_assert(bf_bucket_upper_bound(BF_BUCKET_ZERO) == 0);
    ck_assert(bf_bucket_upper_bound(BF_BUCKET_HALF_DOLLAR) == 0.5);
    ck_assert(bf_bucket_upper_bound(3) == 1);
    ck_assert(bf_bucket_upper_bound(16) == 8192);
    ck_assert(bf_bucket_upper_bound(26) == 8388608);
    ck_assert(isinf(bf_bucket_upper_bound(BF_BUCKET_PINNED)));
    ck_assert(bf_bucket_upper_bound(99) == 0);
    /* round trip: every pow2 bucket's bound maps back to the bucket */
    for (int b = 3; b <= 26; b++)
        ck_assert_int_eq(bf_bucket_for_dollars(bf_bucket_upper_bound(b)), b);
    ck_assert_str_eq(bf_bucket_label(16), "8192");
    ck_assert_str_eq(bf_bucket_label(27), "pinned");
    ck_assert_str_eq(bf_bucket_label(2), "0.5");
}
END_TEST

START_TEST(fingerprint_matches_the_reference_example_exactly)
{
    const char *v[] = {"a3-highgpu-8g"};
    struct bf_requirement r = {BF_LABEL_INSTANCE_TYPE, BF_OP_IN, 1, v};
    struct bf_need_profile p = {.priority = 1000000, .ipb = 16, .rpb = 27, .n_reqs = 1, .reqs = &r};
    char buf[256];
    bf_profile_fingerprint(&p, buf, sizeof buf);
    ck_assert_str_eq(buf, "p=1000000|ipb=16|rpb=27|reqs=node.kubernetes.io/instance-type:1:a3-"
                          "highgpu-8g;|spr=");
}
END_TEST

START_TEST(fingerprint_is_canonical_under_reordering)
{
    const char *v1[] = {"z", "b", "a"};
    const char *v2[] = {"G2"};
    struct bf_requirement reqs[3] = {
        {"topology.kubernetes.io/zone", BF_OP_SAME, 0, NULL},
        {"gpu-model", BF_OP_IN, 3, v1},
        {"gpu-model", BF_OP_NOT_IN, 1, v2},
    };
    struct bf_spread spr[2] = {{"zone", 1, 1}, {"rack", 2, 2}};
    struct bf_need_profile p = {.priority = -5,
                                .ipb = 0,
                                .rpb = 3,
                                .n_reqs = 3,
                                .reqs = reqs,
                                .n_spread = 2,
                                .spread = spr};
    bf_profile_canonicalize(&p);
    char *fp = bf_profile_fingerprint_dup(&p);
    ck_assert_str_eq(fp, "p=-5|ipb=0|rpb=3|reqs=gpu-model:1:a,b,z;gpu-model:2:G2;"
                         "topology.kubernetes.io/zone:5:;|spr=rack:2:2;zone:1:1;");
    ck_assert_int_eq(bf_profile_same_index(&p), 2);
    ck_assert_int_eq(bf_profile_strict_spread_index(&p), 1);
    ck_assert_int_eq(bf_profile_pinned_types_index(&p), -1);
    /* snprintf-style truncation reports the full length */
    char small[8];
    size_t full = bf_profile_fingerprint(&p, small, sizeof small);
    ck_assert_uint_eq(full, strlen(fp));
    ck_assert_uint_eq(strlen(small), 7);
    free(fp);
}
END_TEST

START_TEST(pinned_types_only_for_first_instance_type_requirement_with_in)
{
    const char *v[] = {"m6i.large", "c6i.4xlarge"};
    struct bf_requirement r[2] = {{BF_LABEL_INSTANCE_TYPE, BF_OP_NOT_IN, 2, v},
                                  {BF_LABEL_INSTANCE_TYPE, BF_OP_IN, 2, v}};
    struct bf_need_profile p = {.n_reqs = 2, .reqs = r};
    bf_profile_canonicalize(&p);
    ck_assert_int_eq(bf_profile_pinned_types_index(&p), 0); /* In sorts before NotIn */
    r[0].op = BF_OP_NOT_IN;
    r[1].op = BF_OP_NOT_IN;
    ck_assert_int_eq(bf_profile_pinned_types_index(&p), -1);
}
END_TEST

static int64_t q(const char *s)
{
    int64_t m = -1;
    ck_assert_msg(bf_quantity_parse(s, strlen(s), &m) == 0, "parse %s", s);
    return m;
}

START_TEST(quantity_parses_kubernetes_forms_to_ceil_milli)
{
    ck_assert_int_eq(q("8"), 8000);
    ck_assert_int_eq(q("500m"), 500);
    ck_assert_int_eq(q("1.5"), 1500);
    ck_assert_int_eq(q("16Gi"), 17179869184000LL);
    ck_assert_int_eq(q("17179869184"), 17179869184000LL);
    ck_assert_int_eq(q("512Mi"), 536870912000LL);
    ck_assert_int_eq(q("2k"), 2000000);
    ck_assert_int_eq(q("1e3"), 1000000);
    ck_assert_int_eq(q("1E-3"), 1);
    ck_assert_int_eq(q("1n"), 1); /* ceil */
    ck_assert_int_eq(q("0.0001"), 1);
    ck_assert_int_eq(q(".5"), 500);
    ck_assert_int_eq(q("+3"), 3000);
    ck_assert_int_eq(q("-3"), -3000);
    ck_assert_int_eq(q("0"), 0);
    int64_t m;
    ck_assert_int_eq(bf_quantity_parse("", 0, &m), -EINVAL);
    ck_assert_int_eq(bf_quantity_parse("abc", 3, &m), -EINVAL);
    ck_assert_int_eq(bf_quantity_parse("5Xi", 3, &m), -EINVAL);
    ck_assert_int_eq(bf_quantity_parse("5 ", 2, &m), -EINVAL);
    ck_assert_int_eq(bf_quantity_parse("1.2.3", 5, &m), -EINVAL);
    ck_assert_int_eq(bf_quantity_parse("100Ei", 5, &m), -ERANGE);
    ck_assert_int_eq(bf_quantity_parse("9e30", 4, &m), -ERANGE);
}
END_TEST

START_TEST(quantity_formats_canonically)
{
    char b[32];
    bf_quantity_format(17179869184000LL, true, b, sizeof b);
    ck_assert_str_eq(b, "16Gi");
    bf_quantity_format(24000, false, b, sizeof b);
    ck_assert_str_eq(b, "24");
    bf_quantity_format(500, false, b, sizeof b);
    ck_assert_str_eq(b, "500m");
    bf_quantity_format(1000000, true, b, sizeof b); /* 1000 bytes: not a 1024 multiple */
    ck_assert_str_eq(b, "1000");
    ck_assert(bf_dim_is_bytes("memory"));
    ck_assert(!bf_dim_is_bytes("cpu"));
}
END_TEST

START_TEST(vector_arithmetic_follows_engine_semantics)
{
    bf_vec a = {{10, 5, 0}}, b = {{3, 8, 1}};
    bf_vec c = a;
    bf_vec_sub_clamp(&c, &b);
    ck_assert_int_eq(c.v[0], 7);
    ck_assert_int_eq(c.v[1], 0);
    ck_assert_int_eq(c.v[2], 0);
    ck_assert(!bf_vec_covers(&a, &b)); /* a[1]=5 < 8 */
    bf_vec w = {{-5, 0, 0}};
    ck_assert(bf_vec_covers(&a, &w)); /* non-positive wants are trivially covered */
    ck_assert(bf_vec_is_zero(&w));
    bf_vec m = a;
    bf_vec_max(&m, &b);
    ck_assert_int_eq(m.v[1], 8);
    bf_vec s = {{2, 3}};
    bf_vec_scale(&s, 4);
    ck_assert_int_eq(s.v[1], 12);
    bf_vec_scale(&s, 0);
    ck_assert(bf_vec_is_zero(&s));
    struct bf_dims d = {0};
    ck_assert_int_eq(bf_dims_intern(&d, "cpu"), 0);
    ck_assert_int_eq(bf_dims_intern(&d, "memory"), 1);
    ck_assert_int_eq(bf_dims_intern(&d, "cpu"), 0);
    ck_assert_int_eq(bf_dims_lookup(&d, "nvidia.com/gpu"), -1);
    for (int i = 0; i < BF_MAX_DIMS - 2; i++) {
        char n[8] = {'d', (char)('a' + i), 0};
        ck_assert_int_ge(bf_dims_intern(&d, n), 0);
    }
    ck_assert_int_eq(bf_dims_intern(&d, "overflow"), -ENOSPC);
}
END_TEST

START_TEST(effective_cost_follows_locked_formula_and_never_nan)
{
    ck_assert(fabs(bf_effective_cost(1.8, 0.1, 5) - 2.3) < 1e-12);
    ck_assert(bf_effective_cost(6.0, 0, 5) == 6.0);
    ck_assert(bf_effective_cost(1.8, 0.1, 50) > 6.0);
    ck_assert(bf_effective_cost(2.0, 0.5, -10) == 2.0); /* negative penalty counts as 0 */
    /* the documented Pinned decision */
    ck_assert(bf_effective_cost(6.0, 0, INFINITY) == 6.0);
    ck_assert(isinf(bf_effective_cost(1.8, 0.1, INFINITY)));
    ck_assert(!isnan(bf_effective_cost(0, 0, INFINITY)));
}
END_TEST

START_TEST(go_float_format_matches_strconv_g_shortest)
{
    char b[32];
    struct {
        double v;
        const char *s;
    } cases[] = {{0, "0"},
                 {0.5, "0.5"},
                 {1, "1"},
                 {524288, "524288"},
                 {1048576, "1.048576e+06"},
                 {8388608, "8.388608e+06"},
                 {1e6, "1e+06"},
                 {INFINITY, "+Inf"},
                 {-INFINITY, "-Inf"},
                 {0.0001, "0.0001"},
                 {0.00001, "1e-05"},
                 {123.456, "123.456"},
                 {100000, "100000"},
                 {-2.5, "-2.5"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bf_format_float_go(cases[i].v, b, sizeof b);
        ck_assert_str_eq(b, cases[i].s);
    }
    double d;
    ck_assert_int_eq(bf_parse_float("+Inf", 4, &d), 0);
    ck_assert(isinf(d) && d > 0);
    ck_assert_int_eq(bf_parse_float("1.048576e+06", 12, &d), 0);
    ck_assert(d == 1048576);
    ck_assert_int_eq(bf_parse_float("0x10", 4, &d), -EINVAL);
    ck_assert_int_eq(bf_parse_float("12abc", 5, &d), -EINVAL);
}
END_TEST

START_TEST(durations_parse_go_syntax)
{
    int64_t ns;
    ck_assert_int_eq(bf_parse_duration("10s", &ns), 0);
    ck_assert_int_eq(ns, 10 * BF_NS_PER_SEC);
    ck_assert_int_eq(bf_parse_duration("1m30s", &ns), 0);
    ck_assert_int_eq(ns, 90 * BF_NS_PER_SEC);
    ck_assert_int_eq(bf_parse_duration("250ms", &ns), 0);
    ck_assert_int_eq(ns, 250 * BF_NS_PER_MS);
    ck_assert_int_eq(bf_parse_duration("0", &ns), 0);
    ck_assert_int_eq(ns, 0);
    ck_assert_int_eq(bf_parse_duration("10", &ns), -EINVAL);
    ck_assert_int_eq(bf_parse_duration("abc", &ns), -EINVAL);
    ck_assert_int_eq(bf_parse_duration("", &ns), -EINVAL);
    char b[32];
    bf_format_duration(90 * BF_NS_PER_SEC, b, sizeof b);
    ck_assert_str_eq(b, "1m30s");
    ck_assert_int_eq(bf_idle_hold_seconds(BF_CT_SPOT), 60);
    ck_assert_int_eq(bf_idle_hold_seconds(BF_CT_ON_DEMAND), 600);
    ck_assert_int_eq(bf_idle_hold_seconds(BF_CT_BARE_METAL), -1);
    ck_assert_int_eq(bf_idle_hold_seconds(BF_CT_RESERVED), -1);
    ck_assert_int_eq(bf_idle_hold_seconds(BF_CT_UNSPECIFIED), -1);
}
END_TEST

START_TEST(csv_split_handles_quotes_and_reports_bad_lines)
{
    char a[] = "sn,cpu_milli,,model";
    char *f[8];
    ck_assert_int_eq(bf_csv_split(a, f, 8), 4);
    ck_assert_str_eq(f[0], "sn");
    ck_assert_str_eq(f[2], "");
    ck_assert_str_eq(f[3], "model");
    char b[] = "\"a,b\",\"say \"\"hi\"\"\",c";
    ck_assert_int_eq(bf_csv_split(b, f, 8), 3);
    ck_assert_str_eq(f[0], "a,b");
    ck_assert_str_eq(f[1], "say \"hi\"");
    ck_assert_str_eq(f[2], "c");
    char c[] = "\"open,x";
    ck_assert_int_eq(bf_csv_split(c, f, 8), -1); /* unterminated quote */
    char d[] = "\"q\"x,y";
    ck_assert_int_eq(bf_csv_split(d, f, 8), -1); /* text after a closing quote */
    char e[] = "1,2,3";
    ck_assert_int_eq(bf_csv_split(e, f, 2), 3); /* more fields than max: max + 1 */
}
END_TEST

START_TEST(parse_digits_takes_only_plain_decimal_within_its_maximum)
{
    uint64_t v = 7;
    ck_assert_int_eq(bf_parse_digits("0", 10, &v), 0);
    ck_assert_uint_eq(v, 0);
    ck_assert_int_eq(bf_parse_digits("4294967295", UINT32_MAX, &v), 0);
    ck_assert_uint_eq(v, UINT32_MAX);
    ck_assert_int_eq(bf_parse_digits("18446744073709551615", UINT64_MAX, &v), 0);
    ck_assert_uint_eq(v, UINT64_MAX);
    v = 7;
    /* over the maximum, or over 64 bits: -ERANGE, *out untouched */
    ck_assert_int_eq(bf_parse_digits("4294967296", UINT32_MAX, &v), -ERANGE);
    ck_assert_int_eq(bf_parse_digits("18446744073709551616", UINT64_MAX, &v), -ERANGE);
    ck_assert_int_eq(bf_parse_digits("99999999999999999999999", UINT64_MAX, &v), -ERANGE);
    /* not a plain number: -EINVAL */
    const char *bad[] = {"", "-1", "+1", " 1", "1 ", "0x10", "1e3", "1.0", "١"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ck_assert_msg(bf_parse_digits(bad[i], UINT64_MAX, &v) == -EINVAL, "\"%s\"", bad[i]);
    ck_assert_int_eq(bf_parse_digits(NULL, 1, &v), -EINVAL);
    ck_assert_uint_eq(v, 7);
}
END_TEST

START_TEST(errf_truncates_into_the_callers_buffer_and_accepts_none)
{
    char b[8];
    bf_errf(b, sizeof b, "value %d is bad", 12345);
    ck_assert_str_eq(b, "value 1");
    bf_errf(NULL, 0, "ignored %s", "x");
    b[0] = 'q';
    bf_errf(b, 0, "ignored");
    ck_assert_int_eq(b[0], 'q');
}
END_TEST

START_TEST(utf8_len_accepts_only_valid_shortest_sequences)
{
    ck_assert_uint_eq(bf_utf8_len((const unsigned char *)"a", 1), 1);
    ck_assert_uint_eq(bf_utf8_len((const unsigned char *)"\xc3\xa9", 2), 2);         /* é */
    ck_assert_uint_eq(bf_utf8_len((const unsigned char *)"\xe2\x82\xac", 3), 3);     /* € */
    ck_assert_uint_eq(bf_utf8_len((const unsigned char *)"\xf0\x9f\x98\x80", 4), 4); /* 😀 */
    ck_assert_uint_eq(bf_utf8_len((const unsigned char *)"\xc0\xaf", 2), 0);         /* overlong */
    ck_assert_uint_eq(bf_utf8_len((const unsigned char *)"\xe0\x80\xaf", 3), 0);     /* overlong */
    ck_assert_uint_eq(bf_utf8_len((const unsigned char *)"\xed\xa0\x80", 3), 0);     /* surrogate */
    ck_assert_uint_eq(bf_utf8_len((const unsigned char *)"\xf4\x90\x80\x80", 4),
                      0);                                                    /* > U+10FFFF */
    ck_assert_uint_eq(bf_utf8_len((const unsigned char *)"\xe2\x82", 2), 0); /* cut */
    ck_assert_uint_eq(bf_utf8_len((const unsigned char *)"\xc3\x28", 2), 0); /* bad continuation */
    ck_assert_uint_eq(bf_utf8_len((const unsigned char *)"\x80", 1), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, transition_table_has_exactly_13_legal_edges);
    tcase_add_test(tc, stable_and_transitional_states_partition_the_real_states);
    tcase_add_test(tc, invariant_enforces_host_and_cluster_by_state_and_cost_bounds);
    tcase_add_test(tc, bucket_for_dollars_matches_the_wire_test_vectors);
    tcase_add_test(tc, bucket_upper_bounds_are_powers_of_two_with_pinned_infinite);
    tcase_add_test(tc, fingerprint_matches_the_reference_example_exactly);
    tcase_add_test(tc, fingerprint_is_canonical_under_reordering);
    tcase_add_test(tc, pinned_types_only_for_first_instance_type_requirement_with_in);
    tcase_add_test(tc, quantity_parses_kubernetes_forms_to_ceil_milli);
    tcase_add_test(tc, quantity_formats_canonically);
    tcase_add_test(tc, vector_arithmetic_follows_engine_semantics);
    tcase_add_test(tc, effective_cost_follows_locked_formula_and_never_nan);
    tcase_add_test(tc, go_float_format_matches_strconv_g_shortest);
    tcase_add_test(tc, durations_parse_go_syntax);
    tcase_add_test(tc, csv_split_handles_quotes_and_reports_bad_lines);
    tcase_add_test(tc, utf8_len_accepts_only_valid_shortest_sequences);
    tcase_add_test(tc, parse_digits_takes_only_plain_decimal_within_its_maximum);
    tcase_add_test(tc, errf_truncates_into_the_callers_buffer_and_accepts_none);
    suite_add_tcase(s, tc);
    return check_run(s);
}
