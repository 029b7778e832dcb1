/*
 * test_replay_trace.c — bigfleet-replay's pod list reader (tools/replay/
 * trace.c): the columns it needs, the values it accepts, and that every
 * malformed row is reported as "<file>:<line>: <column>: <what>" or, with
 * --skip-bad-rows, skipped and counted.
 */
#include <errno.h>
#include <stdio.h>
#include <unistd.h>

#include "test_replay.h"
#include "check_run.h"

/* Parses csv expecting failure; returns the message. */
static const char *parse_err(const char *csv, bool skip, int *rc_out)
{
    static char err[512];
    struct rp_trace t;
    err[0] = 0;
    struct rp_trace_opts o = {.skip_bad = skip, .default_qos = -1};
    int rc = rp_trace_parse("pods.csv", csv, strlen(csv), &o, &t, err, sizeof err);
    if (rc_out)
        *rc_out = rc;
    if (rc == 0)
        rp_trace_free(&t);
    return err;
}

/* A trace that must be rejected (-EINVAL) with exactly this message. */
struct bad_csv {
    const char *csv, *error;
};

static void expect_rejected(const struct bad_csv *t, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int rc;
        const char *e = parse_err(t[i].csv, false, &rc);
        ck_assert_msg(rc == -EINVAL, "row %zu: rc %d (%s)", i, rc, e);
        ck_assert_str_eq(e, t[i].error);
    }
}

START_TEST(columns_are_found_by_header_name_in_any_order)
{
    struct rp_trace t;
    load_trace(&t,
               "qos,deletion_time,creation_time,name,gpu_milli,num_gpu,memory_mib,cpu_milli,extra\n"
               "LS,200,100,p0,500,1,2048,4000,whatever\n");
    ck_assert_uint_eq(t.n_pods, 1);
    const struct rp_pod *p = &t.pods[0];
    ck_assert_str_eq(rp_pod_name(&t, p), "p0");
    ck_assert_int_eq(p->req.v[RP_CPU], 4000);
    ck_assert_int_eq(p->req.v[RP_MEM], 2048);
    ck_assert_int_eq(p->req.v[RP_GPU], 500);
    ck_assert_int_eq(p->create, 100);
    ck_assert_int_eq(p->delete_, 200);
    ck_assert_int_eq(p->qos, RP_QOS_LS);
    ck_assert_uint_eq(p->spec, 0); /* no gpu_spec column: any model */
    ck_assert_uint_eq(p->line, 2);
    rp_trace_free(&t);
}
END_TEST

START_TEST(gpu_request_is_num_gpu_times_gpu_milli)
{
    struct rp_trace t;
    load_trace(&t, POD_HEADER "a,1000,1,1,460,,BE,Running,0,10,0\n"
                              "b,1000,1,8,1000,,BE,Running,0,10,0\n"
                              "c,1000,1,0,0,,BE,Running,0,10,0\n");
    ck_assert_int_eq(t.pods[0].req.v[RP_GPU], 460);
    ck_assert_int_eq(t.pods[1].req.v[RP_GPU], 8000);
    ck_assert_int_eq(t.pods[2].req.v[RP_GPU], 0);
    rp_trace_free(&t);
}
END_TEST

START_TEST(empty_deletion_lives_forever_and_the_end_is_the_latest_time)
{
    struct rp_trace t;
    load_trace(&t, POD_HEADER "a,1,1,0,0,,BE,Running,50,900,50\n"
                              "b,1,1,0,0,,BE,Pending,10,,\n"
                              "c,1,1,0,0,,LS,Running,1000,1000,1000\n");
    ck_assert_int_eq(t.pods[1].delete_, RP_LIVES_FOREVER);
    ck_assert_int_eq(t.first_create, 10);
    ck_assert_int_eq(t.end, 1000);
    /* a deletion at (or beyond) the end means "alive at the end" */
    ck_assert(rp_pod_alive(&t, &t.pods[2], 1000));
    ck_assert(!rp_pod_alive(&t, &t.pods[0], 900));
    ck_assert(rp_pod_alive(&t, &t.pods[0], 899));
    ck_assert(!rp_pod_alive(&t, &t.pods[0], 49));
    ck_assert(rp_pod_alive(&t, &t.pods[1], 5000));
    /* by_create orders by creation time */
    ck_assert_uint_eq(t.by_create[0], 1);
    ck_assert_uint_eq(t.by_create[1], 0);
    ck_assert_uint_eq(t.by_create[2], 2);
    rp_trace_free(&t);
}
END_TEST

START_TEST(bad_integer_names_file_line_and_column)
{
    static const struct bad_csv t[] = {
        {POD_HEADER "a,1,1,0,0,,BE,Running,0,10,0\n"
                    "b,12x,1,0,0,,BE,Running,0,10,0\n",
         "pods.csv:3: cpu_milli: \"12x\" is not a non-negative integer"},
        {POD_HEADER "a,1,-5,0,0,,BE,Running,0,10,0\n",
         "pods.csv:2: memory_mib: \"-5\" is not a non-negative integer"},
        {POD_HEADER "a,1,1,0,1001,,BE,Running,0,10,0\n",
         "pods.csv:2: gpu_milli: 1001 is out of range 0..1000"},
        {POD_HEADER "a,1,1,0,0,,BE,Running,,10,0\n",
         "pods.csv:2: creation_time: \"\" is not a non-negative integer"},
    };
    expect_rejected(t, sizeof t / sizeof t[0]);
}
END_TEST

START_TEST(wrong_field_count_and_unterminated_quote_name_the_line)
{
    int rc;
    const char *e = parse_err(POD_HEADER "a,1,1,0,0,,BE,Running,0,10\n", false, &rc);
    ck_assert_int_eq(rc, -EINVAL);
    ck_assert_str_eq(e, "pods.csv:2: 10 fields, the header has 11");
    e = parse_err(POD_HEADER "\n\"a,1,1,0,0,,BE,Running,0,10,0\n", false, &rc);
    ck_assert_str_eq(e, "pods.csv:3: unterminated quote");
}
END_TEST

START_TEST(missing_column_is_reported_on_the_header_line)
{
    int rc;
    const char *e = parse_err("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                              "a,1,1,0,0\n",
                              false, &rc);
    ck_assert_int_eq(rc, -EINVAL);
    /* every missing column is named, and the way to replay a list without times */
    ck_assert_msg(strstr(e, "pods.csv:1: header: missing columns qos, creation_time, "
                            "deletion_time (a pod list needs "),
                  "%s", e);
    ck_assert_msg(strstr(e, "--snapshot auto"), "%s", e);
    e = parse_err("name,cpu_milli,memory_mib,num_gpu,gpu_milli,qos,creation_time\n", false, &rc);
    ck_assert_msg(strstr(e, "pods.csv:1: header: missing column deletion_time ("), "%s", e);
    e = parse_err("", false, &rc);
    ck_assert_str_eq(e, "pods.csv: empty file (no header line)");
    e = parse_err("name,name,cpu_milli\n", false, &rc);
    ck_assert_str_eq(e, "pods.csv:1: header: column name appears twice");
}
END_TEST

START_TEST(semantic_errors_are_named)
{
    static const struct bad_csv t[] = {
        {POD_HEADER "a,1,1,0,0,,Gold,Running,0,10,0\n",
         "pods.csv:2: qos: \"Gold\" is not LS, Burstable, BE or Guaranteed"},
        {POD_HEADER "a,1,1,0,0,,BE,Running,100,50,0\n",
         "pods.csv:2: deletion_time: 50 is before creation_time 100"},
        {POD_HEADER "a,1,1,0,300,,BE,Running,0,10,0\n",
         "pods.csv:2: gpu_milli: 300 without num_gpu"},
        {POD_HEADER "a,1,1,2,0,,BE,Running,0,10,0\n",
         "pods.csv:2: gpu_milli: 0 with num_gpu 2 (want 1..1000 per GPU)"},
        {POD_HEADER "a,1,1,1,1000,T4||P100,BE,Running,0,10,0\n",
         "pods.csv:2: gpu_spec: \"T4||P100\" has an empty GPU model"},
        {POD_HEADER "a,1,1,0,0,T4,BE,Running,0,10,0\n",
         "pods.csv:2: gpu_spec: \"T4\" on a pod without GPUs"},
        {POD_HEADER ",1,1,0,0,,BE,Running,0,10,0\n", "pods.csv:2: name: empty"},
    };
    expect_rejected(t, sizeof t / sizeof t[0]);
}
END_TEST

START_TEST(duplicate_pod_name_points_at_the_first_line)
{
    int rc;
    const char *e = parse_err(POD_HEADER "a,1,1,0,0,,BE,Running,0,10,0\n"
                                         "b,1,1,0,0,,BE,Running,0,10,0\n"
                                         "a,2,2,0,0,,LS,Running,0,10,0\n",
                              false, &rc);
    ck_assert_int_eq(rc, -EINVAL);
    ck_assert_str_eq(e, "pods.csv:4: name: duplicate pod a (first at line 2)");
}
END_TEST

START_TEST(skip_bad_rows_skips_counts_and_keeps_the_good_ones)
{
    struct rp_trace t;
    char err[512] = "";
    const char *csv = POD_HEADER "a,1,1,0,0,,BE,Running,0,10,0\n"
                                 "b,x,1,0,0,,BE,Running,0,10,0\n"
                                 "c,1,1,0,0,,BE\n"
                                 "a,1,1,0,0,,BE,Running,0,10,0\n"
                                 "d,1,1,0,0,,LS,Running,5,10,0\n";
    struct rp_trace_opts skip = {.skip_bad = true, .default_qos = -1};
    int rc = rp_trace_parse("pods.csv", csv, strlen(csv), &skip, &t, err, sizeof err);
    ck_assert_int_eq(rc, 0);
    ck_assert_uint_eq(t.rows, 5);
    ck_assert_uint_eq(t.skipped, 3);
    ck_assert_uint_eq(t.n_pods, 2);
    ck_assert_str_eq(rp_pod_name(&t, &t.pods[1]), "d");
    ck_assert_str_eq(t.skip_samples[0],
                     "pods.csv:3: cpu_milli: \"x\" is not a non-negative integer");
    ck_assert_str_eq(t.skip_samples[1], "pods.csv:4: 7 fields, the header has 11");
    ck_assert_str_eq(t.skip_samples[2], "pods.csv:5: name: duplicate pod a (first at line 2)");
    rp_trace_free(&t);
    /* every row bad: still an error, saying so */
    rc = rp_trace_parse("pods.csv", POD_HEADER "b,x,1,0,0,,BE,Running,0,10,0\n",
                        strlen(POD_HEADER "b,x,1,0,0,,BE,Running,0,10,0\n"), &skip, &t, err,
                        sizeof err);
    ck_assert_int_eq(rc, -EINVAL);
    ck_assert_str_eq(err, "pods.csv: no pods (every row was skipped as malformed)");
}
END_TEST

START_TEST(missing_file_names_the_path)
{
    struct rp_trace t;
    char err[512];
    int rc = rp_trace_load("/nonexistent/dir/pods.csv", NULL, &t, err, sizeof err);
    ck_assert_int_eq(rc, -ENOENT);
    ck_assert_str_eq(err, "/nonexistent/dir/pods.csv: No such file or directory");
}
END_TEST

START_TEST(crlf_bom_quotes_and_blank_lines_are_accepted)
{
    struct rp_trace t;
    load_trace(&t, "\xef\xbb\xbf"
                   "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,"
                   "creation_time,deletion_time\r\n"
                   "\r\n"
                   "\"pod,\"\"1\"\"\",1000,64,1,1000,\"V100M32|T4|V100M32\",burstable,3,9\r\n");
    ck_assert_uint_eq(t.n_pods, 1);
    ck_assert_str_eq(rp_pod_name(&t, &t.pods[0]), "pod,\"1\"");
    ck_assert_uint_eq(t.pods[0].line, 3);
    ck_assert_int_eq(t.pods[0].qos, RP_QOS_BURSTABLE);
    /* gpu_spec: deduplicated and sorted */
    const struct rp_spec *sp = &t.specs[t.pods[0].spec];
    ck_assert_uint_eq(sp->n, 2);
    ck_assert_str_eq(sp->models[0], "T4");
    ck_assert_str_eq(sp->models[1], "V100M32");
    rp_trace_free(&t);
}
END_TEST

START_TEST(equal_gpu_specs_share_one_entry)
{
    struct rp_trace t;
    load_trace(&t, POD_HEADER "a,1,1,1,1000,T4|P100,BE,Running,0,10,0\n"
                              "b,1,1,1,1000,P100|T4,BE,Running,0,10,0\n"
                              "c,1,1,1,1000,T4,BE,Running,0,10,0\n");
    ck_assert_uint_eq(t.pods[0].spec, t.pods[1].spec);
    ck_assert_uint_ne(t.pods[0].spec, t.pods[2].spec);
    ck_assert_uint_eq(t.n_specs, 3); /* "", "P100|T4", "T4" */
    rp_trace_free(&t);
}
END_TEST

START_TEST(a_list_without_times_replays_as_a_snapshot_ramp_only_when_asked)
{
    const char *csv = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                      "p0,1000,1024,0,0\n"
                      "p1,2000,1024,1,500\n"
                      "p2,3000,1024,2,1000\n"
                      "p3,4000,1024,0,0\n";
    struct rp_trace t;
    char err[512] = "";
    /* off (the default): an error naming every missing column */
    ck_assert_int_eq(rp_trace_parse("snap.csv", csv, strlen(csv), NULL, &t, err, sizeof err),
                     -EINVAL);
    ck_assert_msg(strstr(err, "snap.csv:1: header: missing columns qos, creation_time, "
                              "deletion_time"),
                  "%s", err);
    /* auto: pods arrive in file order over the ramp and stay to the end */
    struct rp_trace_opts o = {
        .snapshot = RP_SNAP_AUTO, .ramp = 400, .hold = 100, .default_qos = -1};
    ck_assert_int_eq(rp_trace_parse("snap.csv", csv, strlen(csv), &o, &t, err, sizeof err), 0);
    ck_assert(t.snapshot);
    ck_assert_uint_eq(t.n_pods, 4);
    for (size_t i = 0; i < 4; i++) {
        ck_assert_int_eq(t.pods[i].create, (int64_t)(100 * i));
        ck_assert_int_eq(t.pods[i].delete_, RP_LIVES_FOREVER);
        ck_assert_int_eq(t.pods[i].qos, RP_QOS_LS); /* no qos column: LS */
    }
    ck_assert_int_eq(t.first_create, 0);
    ck_assert_int_eq(t.end, 500);
    ck_assert_int_eq(t.qos_default, RP_QOS_LS);
    ck_assert(rp_pod_alive(&t, &t.pods[3], 500));
    ck_assert(!rp_pod_alive(&t, &t.pods[3], 299));
    ck_assert_msg(strstr(t.snap_why, "no creation_time/deletion_time"), "%s", t.snap_why);
    rp_trace_free(&t);
    /* --default-qos wins over LS */
    o.default_qos = RP_QOS_BE;
    ck_assert_int_eq(rp_trace_parse("snap.csv", csv, strlen(csv), &o, &t, err, sizeof err), 0);
    ck_assert_int_eq(t.pods[0].qos, RP_QOS_BE);
    rp_trace_free(&t);
    /* auto leaves a list with times alone; ramp makes a snapshot of it, keeping its qos */
    o.default_qos = -1;
    const char *timed = POD_HEADER "a,1,1,0,0,,BE,Running,50,900,50\n"
                                   "b,1,1,0,0,,LS,Running,10,20,10\n";
    ck_assert_int_eq(rp_trace_parse("t.csv", timed, strlen(timed), &o, &t, err, sizeof err), 0);
    ck_assert(!t.snapshot);
    ck_assert_int_eq(t.pods[0].create, 50);
    rp_trace_free(&t);
    o.snapshot = RP_SNAP_RAMP;
    ck_assert_int_eq(rp_trace_parse("t.csv", timed, strlen(timed), &o, &t, err, sizeof err), 0);
    ck_assert(t.snapshot);
    ck_assert_int_eq(t.pods[1].create, 200);
    ck_assert_int_eq(t.pods[1].delete_, RP_LIVES_FOREVER);
    ck_assert_int_eq(t.pods[0].qos, RP_QOS_BE);
    rp_trace_free(&t);
    /* only one time column: not a snapshot under auto, and the other one is named */
    o.snapshot = RP_SNAP_AUTO;
    const char *half = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,qos,creation_time\n"
                       "a,1,1,0,0,LS,5\n";
    ck_assert_int_eq(rp_trace_parse("h.csv", half, strlen(half), &o, &t, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "h.csv:1: header: missing column deletion_time ("), "%s", err);
}
END_TEST

START_TEST(a_timed_list_without_qos_needs_default_qos)
{
    const char *csv = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\n"
                      "a,1000,1024,0,0,0,10\n";
    struct rp_trace t;
    char err[512] = "";
    ck_assert_int_eq(rp_trace_parse("q.csv", csv, strlen(csv), NULL, &t, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "q.csv:1: header: missing column qos (") &&
                      strstr(err, "--default-qos"),
                  "%s", err);
    struct rp_trace_opts o = {.default_qos = RP_QOS_BURSTABLE};
    ck_assert_int_eq(rp_trace_parse("q.csv", csv, strlen(csv), &o, &t, err, sizeof err), 0);
    ck_assert_int_eq(t.pods[0].qos, RP_QOS_BURSTABLE);
    ck_assert(!t.snapshot);
    rp_trace_free(&t);
}
END_TEST

START_TEST(busiest_window_holds_the_most_pods_and_window_pods_count_them)
{
    struct rp_trace t;
    /* quiet until 1000, then five pods in [1000, 1100], one long pod */
    load_trace(&t, POD_HEADER "a,1,1,0,0,,BE,Running,0,10,0\n"
                              "b,1,1,0,0,,BE,Running,500,510,0\n"
                              "c,1,1,0,0,,BE,Running,1000,1010,0\n"
                              "d,1,1,0,0,,BE,Running,1020,1030,0\n"
                              "e,1,1,0,0,,BE,Running,1040,1050,0\n"
                              "f,1,1,0,0,,BE,Running,1090,1095,0\n"
                              "g,1,1,0,0,,BE,Running,1100,5000,0\n"
                              "h,1,1,0,0,,BE,Running,3000,3000,0\n");
    int64_t from = rp_trace_busiest(&t, 100);
    ck_assert_int_eq(from, 1000);
    ck_assert_uint_eq(rp_trace_window_pods(&t, from, from + 100), 5);
    /* a pod that dies at the window's start is not one of its pods; a pod
     * created and deleted at the same second never lives */
    ck_assert_uint_eq(rp_trace_window_pods(&t, 10, 500), 1);
    ck_assert_uint_eq(rp_trace_window_pods(&t, 2999, 3001), 1);
    /* a window as long as the trace starts at its start */
    ck_assert_int_eq(rp_trace_busiest(&t, 10000), 0);
    ck_assert_uint_eq(rp_trace_window_pods(&t, 0, t.end), 7);
    rp_trace_free(&t);
}
END_TEST

#define OPENB "../shared/data/openb/"

START_TEST(real_openb_lists_load_or_fail_with_a_named_line)
{
    if (access(OPENB "openb_pod_list_default.csv", R_OK) != 0)
        return; /* the shared data is not mounted here */
    struct rp_trace t;
    char err[512];
    ck_assert_int_eq(rp_trace_load(OPENB "openb_pod_list_default.csv", NULL, &t, err, sizeof err),
                     0);
    ck_assert_uint_eq(t.n_pods, 8152);
    ck_assert_uint_eq(t.skipped, 0);
    ck_assert_int_eq(t.first_create, 0);
    ck_assert_int_eq(t.end, 12902960);
    rp_trace_free(&t);
    /* the multigpu20 variant ships without its qos/time columns */
    int rc = rp_trace_load(OPENB "openb_pod_list_multigpu20.csv", NULL, &t, err, sizeof err);
    ck_assert_int_eq(rc, -EINVAL);
    ck_assert_msg(strstr(err, "openb_pod_list_multigpu20.csv:1: header: missing columns qos, "
                              "creation_time, deletion_time"),
                  "%s", err);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("replay_trace");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, columns_are_found_by_header_name_in_any_order);
    tcase_add_test(tc, gpu_request_is_num_gpu_times_gpu_milli);
    tcase_add_test(tc, empty_deletion_lives_forever_and_the_end_is_the_latest_time);
    tcase_add_test(tc, bad_integer_names_file_line_and_column);
    tcase_add_test(tc, wrong_field_count_and_unterminated_quote_name_the_line);
    tcase_add_test(tc, missing_column_is_reported_on_the_header_line);
    tcase_add_test(tc, semantic_errors_are_named);
    tcase_add_test(tc, duplicate_pod_name_points_at_the_first_line);
    tcase_add_test(tc, skip_bad_rows_skips_counts_and_keeps_the_good_ones);
    tcase_add_test(tc, missing_file_names_the_path);
    tcase_add_test(tc, crlf_bom_quotes_and_blank_lines_are_accepted);
    tcase_add_test(tc, equal_gpu_specs_share_one_entry);
    tcase_add_test(tc, real_openb_lists_load_or_fail_with_a_named_line);
    tcase_add_test(tc, a_list_without_times_replays_as_a_snapshot_ramp_only_when_asked);
    tcase_add_test(tc, a_timed_list_without_qos_needs_default_qos);
    tcase_add_test(tc, busiest_window_holds_the_most_pods_and_window_pods_count_them);
    suite_add_tcase(s, tc);
    return check_run(s);
}
