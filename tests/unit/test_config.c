/*
 * test_config.c — flag parsing: defaults as documented, Go-style durations,
 * booleans, usage errors that name the flag, TLS all-or-none; the
 * configuration file and environment layers and their precedence, errors
 * that name the file and line or the variable, the child argv that carries
 * the effective configuration, and the live/restart split of a reload.
 */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>

#include "bigfleet/config.h"
#include "bigfleet/util.h"
#include "check_run.h"

/* bf_config_load of "bigfleet-shardd" and the argc - 1 arguments in ap. */
static int vload(struct bf_config *c, char *err, size_t n, char **env, FILE *out, int argc,
                 va_list ap)
{
    char *argv[32];
    argv[0] = "bigfleet-shardd";
    for (int i = 1; i < argc; i++)
        argv[i] = va_arg(ap, char *);
    argv[argc] = NULL;
    return bf_config_load(c, argc, argv, env, out, err, n);
}

/* Flags only: an empty environment (the test runner's BIGFLEET_SHARDD_* must
 * not leak in), --help output discarded. */
static int parse(struct bf_config *c, char *err, size_t n, int argc, ...)
{
    va_list ap;
    va_start(ap, argc);
    FILE *devnull = fopen("/dev/null", "w");
    char *env[] = {NULL};
    int rc = vload(c, err, n, env, devnull, argc, ap);
    fclose(devnull);
    va_end(ap);
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
    ck_assert_int_eq(c.cycle_min_gap_ns, 5 * BF_NS_PER_MS);
    ck_assert_int_eq(c.execute_concurrency, 128);
    ck_assert(c.reclaim_cap_fraction == 0.05);
    ck_assert(c.empty_rollup_guard);
    ck_assert(!c.actuation_paused && !c.dry_run);
    ck_assert_uint_eq(c.max_machines, 600000);
    ck_assert_uint_eq(c.grpc_inbound_budget_mib, 1024);
    ck_assert_int_eq(c.available_capacity_interval_ns, 5 * BF_NS_PER_SEC);
    /* incremental reconcile by default, a full resync walk every minute */
    ck_assert(c.incremental_reconcile);
    ck_assert_int_eq(c.reconcile_resync_interval_ns, 60 * BF_NS_PER_SEC);
    ck_assert_uint_eq(c.reconcile_page_size, 4096);
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
    /* the old behaviour (a full List per cycle) stays one flag away */
    ck_assert_int_eq(parse(&c, err, sizeof err, 4, "--incremental-reconcile=false",
                           "--reconcile-resync-interval=250ms", "--reconcile-page-size=100"),
                     BF_CONFIG_OK);
    ck_assert(!c.incremental_reconcile);
    ck_assert_int_eq(c.reconcile_resync_interval_ns, 250 * BF_NS_PER_MS);
    ck_assert_uint_eq(c.reconcile_page_size, 100);
    ck_assert_int_eq(parse(&c, err, sizeof err, 2, "--reconcile-page-size=0"), BF_CONFIG_USAGE);
    ck_assert_ptr_nonnull(strstr(err, "--reconcile-page-size"));
}
END_TEST

START_TEST(usage_errors_name_the_flag)
{
    struct bf_config c;
    char err[256];
    /* each argument is a usage error whose message names `flag` (NULL: no
     * flag to name) */
    static const struct {
        const char *arg, *flag;
    } bad[] = {
        {"--no-such-flag", "--no-such-flag"},
        {"--cycle-interval=ten", "--cycle-interval"},
        {"--cycle-min-gap=-1ms", "--cycle-min-gap"},
        {"--cycle-min-gap=soon", "--cycle-min-gap"},
        {"--cycle-min-gap=2m", "--cycle-min-gap"},
        {"--cycle-min-gap=1500ms", "--cycle-min-gap"}, /* a unit slip: at most 1s */
        {"--transparent-huge-pages=maybe", "--transparent-huge-pages"},
        {"--execute-concurrency=0", "--execute-concurrency"},
        {"--reclaim-cap-fraction=1.5", "--reclaim-cap-fraction"},
        {"--dry-run=maybe", "--dry-run"},
        {"--id=bad/id", "--id"},
        {"--listen=", "--listen"},
        {"stray", NULL},
        {"--max-machines", "--max-machines"},
        {"--log-level=loud", NULL},
        /* the budget must hold one largest (256 MiB) message */
        {"--grpc-inbound-budget-mib=255", "--grpc-inbound-budget-mib"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(parse(&c, err, sizeof err, 2, bad[i].arg) == BF_CONFIG_USAGE, "%s",
                      bad[i].arg);
        if (bad[i].flag)
            ck_assert_msg(strstr(err, bad[i].flag), "%s: \"%s\" does not name %s", bad[i].arg, err,
                          bad[i].flag);
    }
    ck_assert_int_eq(parse(&c, err, sizeof err, 2, "--grpc-inbound-budget-mib=4096"), BF_CONFIG_OK);
    ck_assert_uint_eq(c.grpc_inbound_budget_mib, 4096);
    /* 0 turns the demand-cycle pacing off */
    ck_assert_int_eq(parse(&c, err, sizeof err, 2, "--cycle-min-gap=0"), BF_CONFIG_OK);
    ck_assert_int_eq(c.cycle_min_gap_ns, 0);
    ck_assert_int_eq(parse(&c, err, sizeof err, 2, "--cycle-min-gap=250us"), BF_CONFIG_OK);
    ck_assert_int_eq(c.cycle_min_gap_ns, 250 * 1000);
    /* the engine's big arrays take 4 KiB pages unless asked (engine.h) */
    ck_assert_int_eq(parse(&c, err, sizeof err, 1), BF_CONFIG_OK);
    ck_assert(!c.transparent_huge_pages);
    ck_assert_int_eq(parse(&c, err, sizeof err, 2, "--transparent-huge-pages=true"), BF_CONFIG_OK);
    ck_assert(c.transparent_huge_pages);
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
                          "--reconcile-resync-interval",
                          "--reconcile-page-size",
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

static char *write_file(const char *text)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/bf-test-config-%d.conf", (int)getpid());
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    return path;
}

static int load(struct bf_config *c, char *err, size_t n, char **env, int argc, ...)
{
    va_list ap;
    va_start(ap, argc);
    int rc = vload(c, err, n, env, NULL, argc, ap);
    va_end(ap);
    return rc;
}

START_TEST(file_then_env_then_flags_in_increasing_precedence)
{
    char *path = write_file("# shard settings\n"
                            "[shardd]\n"
                            "id = from-file\n"
                            "listen = 127.0.0.1:9000\n"
                            "cycle_interval = 2s  ; underscores work like dashes\n"
                            "max-actions-per-cycle = 7\n"
                            "dry-run = true\n");
    char cfgflag[96];
    snprintf(cfgflag, sizeof cfgflag, "--config=%s", path);
    struct bf_config c;
    char err[512] = "";
    char *env[] = {"BIGFLEET_SHARDD_LISTEN=127.0.0.1:9100",
                   "BIGFLEET_SHARDD_MAX_ACTIONS_PER_CYCLE=8", "UNRELATED=1", NULL};
    ck_assert_msg(load(&c, err, sizeof err, env, 3, cfgflag, "--max-actions-per-cycle=9") ==
                      BF_CONFIG_OK,
                  "%s", err);
    ck_assert_str_eq(c.id, "from-file"); /* file only */
    ck_assert_int_eq(c.cycle_interval_ns, 2 * BF_NS_PER_SEC);
    ck_assert(c.dry_run);
    ck_assert_str_eq(c.listen, "127.0.0.1:9100"); /* env over file */
    ck_assert_int_eq(c.max_actions_per_cycle, 9); /* flag over env over file */
    ck_assert_str_eq(c.config_file, path);
    ck_assert_str_eq(c.advertise_addr, "127.0.0.1:9100");
    /* the file named by the environment */
    char cfgenv[96];
    snprintf(cfgenv, sizeof cfgenv, "BIGFLEET_SHARDD_CONFIG=%s", path);
    char *env2[] = {cfgenv, NULL};
    ck_assert_int_eq(load(&c, err, sizeof err, env2, 1), BF_CONFIG_OK);
    ck_assert_str_eq(c.id, "from-file");
    unlink(path);
}
END_TEST

START_TEST(file_errors_name_the_file_and_line)
{
    struct bf_config c;
    char err[512];
    char cfgflag[96];
    const struct {
        const char *text, *want;
    } bad[] = {
        {"id = a\nlisten = :1\nlisen = :2\n", ":3: unknown setting \"lisen\""},
        {"id = a\nid = b\n", ":2: \"id\" is set twice"},
        {"cycle-interval = soon\n", ":1: cycle-interval: invalid duration"},
        {"[other]\nid = a\n", "unknown section [other]"},
        {"id = a\n  continued\n", ":2:"},
        {"just words\n", ":1: syntax error"},
        {"role = cycle\n", "unknown setting \"role\""},
        {"config = /etc/x\n", "unknown setting \"config\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *path = write_file(bad[i].text);
        snprintf(cfgflag, sizeof cfgflag, "--config=%s", path);
        err[0] = 0;
        ck_assert_int_eq(load(&c, err, sizeof err, NULL, 2, cfgflag), BF_CONFIG_USAGE);
        ck_assert_msg(strstr(err, path) && strstr(err, bad[i].want), "case %zu: \"%s\"", i, err);
        unlink(path);
    }
    ck_assert_int_eq(load(&c, err, sizeof err, NULL, 2, "--config=/nonexistent/bf.conf"),
                     BF_CONFIG_USAGE);
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent/bf.conf"));
    /* a line longer than the limit is refused, not split into two */
    char *longline = malloc(BF_CONFIG_LINE_MAX + 64);
    memset(longline, 'x', BF_CONFIG_LINE_MAX + 32);
    memcpy(longline, "sim-args = ", 11);
    strcpy(longline + BF_CONFIG_LINE_MAX + 32, "\n");
    ck_assert_int_eq(bf_config_apply_text(&c, longline, strlen(longline), "t", err, sizeof err),
                     -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "longer than"));
    free(longline);
    ck_assert_int_eq(bf_config_apply_text(&c, "id = a\0b\n", 9, "t", err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "NUL"));
}
END_TEST

START_TEST(environment_errors_name_the_variable)
{
    struct bf_config c;
    char err[512];
    char *env[] = {"BIGFLEET_SHARDD_CYCLE_INTERVAL=ten", NULL};
    ck_assert_int_eq(load(&c, err, sizeof err, env, 1), BF_CONFIG_USAGE);
    ck_assert_ptr_nonnull(strstr(err, "BIGFLEET_SHARDD_CYCLE_INTERVAL"));
    char *env2[] = {"BIGFLEET_SHARDD_LISTN=:1", NULL};
    ck_assert_int_eq(load(&c, err, sizeof err, env2, 1), BF_CONFIG_USAGE);
    ck_assert_ptr_nonnull(strstr(err, "BIGFLEET_SHARDD_LISTN"));
    char *env3[] = {"BIGFLEET_SHARDD_ROLE=cycle", NULL};
    ck_assert_int_eq(load(&c, err, sizeof err, env3, 1), BF_CONFIG_USAGE);
}
END_TEST

START_TEST(children_get_the_effective_configuration_as_flags_and_ignore_file_and_env)
{
    char *path = write_file("id = filed\nreclaim-cap-fraction = 0.125\n");
    char cfgflag[96];
    snprintf(cfgflag, sizeof cfgflag, "--config=%s", path);
    struct bf_config sup, child;
    char err[512];
    char *env[] = {"BIGFLEET_SHARDD_AUDIT_LOG=/var/log/x y.jsonl", NULL};
    ck_assert_int_eq(load(&sup, err, sizeof err, env, 4, cfgflag, "--execute-timeout=1m30s",
                          "--sim-args=--seed-idle 3 --seed-configured 0"),
                     BF_CONFIG_OK);
    static char buf[65536];
    char *argv[256];
    int argc =
        bf_config_child_argv(&sup, "bigfleet-shardd: cycle", "cycle", buf, sizeof buf, argv, 256);
    ck_assert_int_gt(argc, 10);
    for (int i = 0; i < argc; i++)
        ck_assert_msg(strncmp(argv[i], "--config", 8) != 0, "--config passed to a child");
    /* a child sees a different file and environment: neither may matter */
    char *other = write_file("id = other\n");
    (void)other;
    char *env2[] = {"BIGFLEET_SHARDD_ID=envid", NULL};
    ck_assert_msg(bf_config_load(&child, argc, argv, env2, NULL, err, sizeof err) == BF_CONFIG_OK,
                  "%s", err);
    ck_assert_str_eq(child.role, "cycle");
    ck_assert_int_eq(bf_config_diff(&sup, &child, NULL, NULL), 0);
    ck_assert_str_eq(child.id, "filed");
    ck_assert(child.reclaim_cap_fraction == 0.125);
    ck_assert_str_eq(child.audit_log, "/var/log/x y.jsonl");
    ck_assert_int_eq(child.execute_timeout_ns, 90 * BF_NS_PER_SEC);
    ck_assert_str_eq(child.sim_args, "--seed-idle 3 --seed-configured 0");
    unlink(path);
}
END_TEST

struct seen {
    int live, restart;
    char names[512];
};

static void note_diff(const char *name, const char *running, const char *next, bool live, void *arg)
{
    (void)running, (void)next;
    struct seen *s = arg;
    if (live)
        s->live++;
    else
        s->restart++;
    strncat(s->names, name, sizeof s->names - strlen(s->names) - 2);
    strcat(s->names, " ");
}

START_TEST(reload_diff_splits_live_settings_from_restart_ones)
{
    struct bf_config a, b;
    char err[256];
    ck_assert_int_eq(load(&a, err, sizeof err, NULL, 1), BF_CONFIG_OK);
    ck_assert_int_eq(load(&b, err, sizeof err, NULL, 7, "--actuation-paused", "--dry-run",
                          "--reclaim-cap-fraction=0.2", "--max-actions-per-cycle=5",
                          "--log-level=debug", "--cycle-interval=3s"),
                     BF_CONFIG_OK);
    struct seen s = {0};
    ck_assert_int_eq(bf_config_diff(&a, &b, note_diff, &s), 6);
    ck_assert_int_eq(s.live, 5);
    ck_assert_int_eq(s.restart, 1);
    ck_assert_ptr_nonnull(strstr(s.names, "cycle-interval"));
    bf_config_copy_live(&a, &b);
    ck_assert(a.actuation_paused && a.dry_run && a.reclaim_cap_fraction == 0.2);
    ck_assert_int_eq(a.max_actions_per_cycle, 5);
    ck_assert_str_eq(a.log_level, "debug");
    ck_assert_int_eq(a.cycle_interval_ns, 10 * BF_NS_PER_SEC); /* not live: unchanged */
    ck_assert(bf_config_is_live("audit-log") && bf_config_is_live("tls-cert"));
    ck_assert(!bf_config_is_live("listen") && !bf_config_is_live("max-machines"));
}
END_TEST

/* Found by fuzz_config: a rejected cluster of short options ("-\nr") left
 * glibc's getopt inside the cluster (optind = 1 does not reset it), so the
 * next parse started from there and disagreed with the first. */
START_TEST(reparse_after_an_unfinished_short_option_cluster_starts_clean)
{
    struct bf_config c;
    char e1[256], e2[256];
    ck_assert_int_eq(parse(&c, e1, sizeof e1, 2, "-xr"), BF_CONFIG_USAGE);
    ck_assert_str_eq(e1, "unknown flag -x");
    ck_assert_int_eq(parse(&c, e2, sizeof e2, 2, "-xr"), BF_CONFIG_USAGE);
    ck_assert_str_eq(e2, e1);
    ck_assert_int_eq(parse(&c, e2, sizeof e2, 3, "--id=a", "--listen=127.0.0.1:1"), BF_CONFIG_OK);
    ck_assert_str_eq(c.id, "a");
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
    tcase_add_test(tc, file_then_env_then_flags_in_increasing_precedence);
    tcase_add_test(tc, file_errors_name_the_file_and_line);
    tcase_add_test(tc, environment_errors_name_the_variable);
    tcase_add_test(tc, children_get_the_effective_configuration_as_flags_and_ignore_file_and_env);
    tcase_add_test(tc, reload_diff_splits_live_settings_from_restart_ones);
    tcase_add_test(tc, reparse_after_an_unfinished_short_option_cluster_starts_clean);
    suite_add_tcase(s, tc);
    return check_run(s);
}
