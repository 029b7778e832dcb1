/*
 * test_config.c — flag parsing: defaults as documented, Go-style durations,
 * booleans, usage errors that name the flag, TLS all-or-none.
 */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/config.h"
#include "bigfleet/util.h"

static int parse(struct bf_config *c, char *err, size_t n, int argc, ...)
{
    char *argv[32];
    va_list ap;
    va_start(ap, argc);
    argv[0] = "bigfleet-shardd";
    for (int i = 1; i < argc; i++)
        argv[i] = va_arg(ap, char *);
    va_end(ap);
    argv[argc] = NULL;
    FILE *devnull = fopen("/dev/null", "w");
    int rc = bf_config_parse(c, argc, argv, devnull, err, n);
    fclose(devnull);
    return rc;
}

START_TEST(defaults_match_the_documented_values)
{
    struct bf_config c;
    char err[256];
    ck_assert_int_eq(parse(&c, err, sizeof err, 1), BF_CONFIG_OK);
    ck_assert_str_eq(c.id, "shard-0");
    ck_assert_str_eq(c.listen, "127.0.0.1:7780"); /* loopback: plaintext is safe there */
    ck_assert_str_eq(c.metrics_addr, ":8780");
    ck_assert_str_eq(c.data_dir, "./data");
    ck_assert_int_eq(c.cycle_interval_ns, 10 * BF_NS_PER_SEC);
    ck_assert_int_eq(c.execute_concurrency, 128);
    ck_assert(c.reclaim_cap_fraction == 0.05);
    ck_assert(c.empty_rollup_guard);
    ck_assert(!c.actuation_paused && !c.dry_run);
    ck_assert_uint_eq(c.max_machines, 600000);
    ck_assert_uint_eq(c.grpc_inbound_budget_mib, 1024);
    ck_assert_int_eq(c.available_capacity_interval_ns, 5 * BF_NS_PER_SEC);
    ck_assert_str_eq(c.advertise_addr, "127.0.0.1:7780"); /* defaults to --listen */
    ck_assert(!c.insecure_plaintext);
    ck_assert_uint_eq(c.max_conns_per_peer, 256);
    ck_assert_uint_eq(c.max_conns_per_identity, 16);
    ck_assert_int_eq(c.max_priority, 1000000000);
    ck_assert_uint_eq(c.cluster_max_new_dims, 2);
    /* derived defaults: 2 KiB per Need row within [4, 256] MiB; a quarter of the rows */
    ck_assert_uint_eq(bf_config_max_rollup_bytes(&c), 65536u * 2048);
    ck_assert_uint_eq(bf_config_cluster_max_needs(&c), 65536 / 4);
    c.max_needs = 16;
    ck_assert_uint_eq(bf_config_max_rollup_bytes(&c), 4u << 20);
    ck_assert_uint_eq(bf_config_cluster_max_needs(&c), 16);
    c.max_needs = 16777216;
    ck_assert_uint_eq(bf_config_max_rollup_bytes(&c), 256u << 20);
    c.max_rollup_mib = 8;
    ck_assert_uint_eq(bf_config_max_rollup_bytes(&c), 8u << 20);
    ck_assert_str_eq(c.role, "supervisor");
}
END_TEST

START_TEST(flags_parse_durations_booleans_and_aliases)
{
    struct bf_config c;
    char err[256];
    ck_assert_int_eq(parse(&c, err, sizeof err, 8, "--cycle-interval=1m30s", "--dry-run",
                           "--empty-rollup-guard=false", "--state-dir", "/tmp/x", "--id",
                           "shard-7"),
                     BF_CONFIG_OK);
    ck_assert_int_eq(c.cycle_interval_ns, 90 * BF_NS_PER_SEC);
    ck_assert(c.dry_run);
    ck_assert(!c.empty_rollup_guard);
    ck_assert_str_eq(c.data_dir, "/tmp/x");
    ck_assert_str_eq(c.id, "shard-7");
}
END_TEST

START_TEST(usage_errors_name_the_flag)
{
    struct bf_config c;
    char err[256];
    ck_assert_int_eq(parse(&c, err, sizeof err, 2, "--no-such-flag"), BF_CONFIG_USAGE);
    ck_assert_ptr_nonnull(strstr(err, "--no-such-flag"));
    ck_assert_int_eq(parse(&c, err, sizeof err, 2, "--cycle-interval=ten"), BF_CONFIG_USAGE);
    ck_assert_ptr_nonnull(strstr(err, "--cycle-interval"));
    ck_assert_int_eq(parse(&c, err, sizeof err, 2, "--execute-concurrency=0"), BF_CONFIG_USAGE);
    ck_assert_ptr_nonnull(strstr(err, "--execute-concurrency"));
    ck_assert_int_eq(parse(&c, err, sizeof err, 2, "--reclaim-cap-fraction=1.5"), BF_CONFIG_USAGE);
    ck_assert_ptr_nonnull(strstr(err, "--reclaim-cap-fraction"));
    ck_assert_int_eq(parse(&c, err, sizeof err, 2, "--dry-run=maybe"), BF_CONFIG_USAGE);
    ck_assert_ptr_nonnull(strstr(err, "--dry-run"));
    ck_assert_int_eq(parse(&c, err, sizeof err, 2, "--id=bad/id"), BF_CONFIG_USAGE);
    ck_assert_ptr_nonnull(strstr(err, "--id"));
    ck_assert_int_eq(parse(&c, err, sizeof err, 2, "--listen="), BF_CONFIG_USAGE);
    ck_assert_ptr_nonnull(strstr(err, "--listen"));
    ck_assert_int_eq(parse(&c, err, sizeof err, 2, "stray"), BF_CONFIG_USAGE);
    ck_assert_int_eq(parse(&c, err, sizeof err, 2, "--max-machines"), BF_CONFIG_USAGE);
    ck_assert_ptr_nonnull(strstr(err, "--max-machines"));
    ck_assert_int_eq(parse(&c, err, sizeof err, 2, "--log-level=loud"), BF_CONFIG_USAGE);
    /* the budget must hold one largest (256 MiB) message */
    ck_assert_int_eq(parse(&c, err, sizeof err, 2, "--grpc-inbound-budget-mib=255"),
                     BF_CONFIG_USAGE);
    ck_assert_ptr_nonnull(strstr(err, "--grpc-inbound-budget-mib"));
    ck_assert_int_eq(parse(&c, err, sizeof err, 2, "--grpc-inbound-budget-mib=4096"), BF_CONFIG_OK);
    ck_assert_uint_eq(c.grpc_inbound_budget_mib, 4096);
}
END_TEST

START_TEST(partial_tls_flags_are_rejected)
{
    struct bf_config c;
    char err[256];
    ck_assert_int_eq(parse(&c, err, sizeof err, 3, "--tls-cert=a.pem", "--tls-key=a.key"),
                     BF_CONFIG_USAGE);
    ck_assert_ptr_nonnull(strstr(err, "--tls-ca"));
    ck_assert_int_eq(
        parse(&c, err, sizeof err, 4, "--tls-cert=a.pem", "--tls-key=a.key", "--tls-ca=ca.pem"),
        BF_CONFIG_OK);
    ck_assert(bf_config_tls(&c));
}
END_TEST

START_TEST(plaintext_off_loopback_is_refused_naming_both_ways_out)
{
    struct bf_config c;
    char err[512];
    const char *off[] = {"--listen=0.0.0.0:7780", "--listen=:7780", "--listen=[::]:7780",
                         "--listen=192.0.2.1:7780"};
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) {
        ck_assert_int_eq(parse(&c, err, sizeof err, 2, off[i]), BF_CONFIG_USAGE);
        ck_assert_ptr_nonnull(strstr(err, "--insecure-plaintext"));
        ck_assert_ptr_nonnull(strstr(err, "--tls-cert"));
    }
    const char *lo[] = {"--listen=127.0.0.1:7780", "--listen=127.9.9.9:1", "--listen=[::1]:7780",
                        "--listen=localhost:7780"};
    for (size_t i = 0; i < sizeof lo / sizeof lo[0]; i++)
        ck_assert_msg(parse(&c, err, sizeof err, 2, lo[i]) == BF_CONFIG_OK, "%s: %s", lo[i], err);
    ck_assert_int_eq(parse(&c, err, sizeof err, 3, "--listen=0.0.0.0:7780", "--insecure-plaintext"),
                     BF_CONFIG_OK);
    ck_assert(c.insecure_plaintext);
    ck_assert_int_eq(parse(&c, err, sizeof err, 5, "--listen=:7780", "--tls-cert=a.pem",
                           "--tls-key=a.key", "--tls-ca=ca.pem"),
                     BF_CONFIG_OK);
    ck_assert_int_eq(bf_addr_is_loopback("0.0.0.0:1"), 0);
    ck_assert_int_eq(bf_addr_is_loopback("[::ffff:127.0.0.1]:1"), 1);
    ck_assert_int_lt(bf_addr_is_loopback("no-port"), 0);
}
END_TEST

START_TEST(help_lists_every_flag_with_its_default)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    bf_config_usage(f, "bigfleet-shardd");
    fclose(f);
    const char *must[] = {"--id",
                          "--listen",
                          "--metrics-addr",
                          "--data-dir",
                          "--state-dir",
                          "--provider-addr",
                          "--coordinator-addr",
                          "--tls-cert",
                          "--tls-key",
                          "--tls-ca",
                          "--max-actions-per-cycle",
                          "--actuation-paused",
                          "--reclaim-cap-fraction",
                          "--empty-rollup-guard",
                          "--dry-run",
                          "--audit-log",
                          "--execute-concurrency",
                          "--incremental-reconcile",
                          "--cycle-interval",
                          "--max-machines",
                          "--max-needs",
                          "--max-clusters",
                          "--grpc-inbound-budget-mib",
                          "--insecure-plaintext",
                          "--max-rollup-mib",
                          "--max-conns-per-peer",
                          "--max-conns-per-identity",
                          "--cluster-max-needs",
                          "--cluster-max-groups",
                          "--cluster-max-string-kib",
                          "--cluster-max-new-dims",
                          "--max-priority",
                          "(default \"10s\")",
                          "(default \"128\")"};
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++)
        ck_assert_msg(strstr(buf, must[i]) != NULL, "help lacks %s", must[i]);
    ck_assert_ptr_null(strstr(buf, "--role")); /* internal flag stays hidden */
    free(buf);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("flags");
    tcase_add_test(tc, defaults_match_the_documented_values);
    tcase_add_test(tc, flags_parse_durations_booleans_and_aliases);
    tcase_add_test(tc, usage_errors_name_the_flag);
    tcase_add_test(tc, partial_tls_flags_are_rejected);
    tcase_add_test(tc, plaintext_off_loopback_is_refused_naming_both_ways_out);
    tcase_add_test(tc, help_lists_every_flag_with_its_default);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
