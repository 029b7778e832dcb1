/*
 * test_simprovider_durability.c — file-backed state across a restart
 * (reference/ecosystem.md §2.3 B1001–B1007): the simulator is closed and
 * reopened on the same LMDB directory, and a "kill" is simulated by a child
 * process that is SIGKILLed after its acknowledged mutations, so nothing is
 * flushed at close. Fences, operation ids, bindings, metadata, the inventory
 * and cursors must survive; in-flight transitions become FAILED.
 */
#include <signal.h>
#include <stdarg.h>
#include <sys/wait.h>

#include "simprovider/sim_internal.h"
#include "test_simprovider.h"

static struct bf_sim_config state_cfg(const char *dir)
{
    struct bf_sim_config c;
    simt_cfg(&c);
    c.state_path = dir;
    c.seed_speculative = 6;
    c.transition_latency[BF_SIM_RPC_CONFIGURE] = (struct bf_sim_dist){0, 30 * SEC, 0};
    return c;
}

/* Runs fn(dir) in a child that is killed with SIGKILL right after fn returns,
 * so the state on disk is only what the acknowledged calls committed. */
static void run_then_kill(const char *dir, void (*fn)(const char *dir, int fd), char *out,
                          size_t out_len)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(p[0]);
        fn(dir, p[1]);
        kill(getpid(), SIGKILL);
        _exit(99);
    }
    close(p[1]);
    size_t got = 0;
    ssize_t k;
    while (got + 1 < out_len && (k = read(p[0], out + got, out_len - 1 - got)) > 0)
        got += (size_t)k;
    out[got] = 0;
    close(p[0]);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "child did not die by SIGKILL");
}

static void say(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(int fd, const char *fmt, ...)
{
    char b[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    ck_assert_int_eq(write(fd, b, (size_t)n), n);
}

/* Pre-restart drive, as the conformance runner's drivePreRestart: a fenced
 * Create (durA 3/7), a Configure with metadata (NUL in a key), a Configure left
 * in flight, a ghost-id mark. Prints "<fence machine> <cfg machine> <op>
 * <inflight> <rev>". */
static void drive(const char *dir, int fd)
{
    struct bf_sim_config c = state_cfg(dir);
    c.transition_latency[BF_SIM_RPC_CONFIGURE].a_ns = 0;
    c.transition_latency[BF_SIM_RPC_DRAIN].a_ns = 30 * SEC; /* the in-flight one */
    struct bf_sim *s = simt_open(&c);
    const char *fm = bf_sim_machine_id(s, 0), *cm = bf_sim_machine_id(s, 1),
               *im = bf_sim_machine_id(s, 2);
    struct simt_ack a = simt_create(s, fm, "durA", 3, 7, T0);
    ck_assert_int_eq(a.state, BF_STATE_IDLE);
    simt_ack_free(&a);
    a = simt_create(s, cm, "", 0, 0, T0);
    simt_ack_free(&a);
    struct simt_kv md[3] = {{(const uint8_t *)"d/k", 3, (const uint8_t *)"v", 1},
                            {(const uint8_t *)"d/k2", 4,
                             (const uint8_t *)"v\0"
                                              "2",
                             3},
                            {(const uint8_t *)"d/nul\0key", 9, (const uint8_t *)"", 0}};
    struct bf_sim_reply r = simt_configure_md(s, cm, "durable-cluster", md, 3, 10, T0);
    ck_assert_int_eq(r.code, 0);
    PbAck *ack = bigfleet__v1alpha1__transition_ack__unpack(NULL, r.len, r.body);
    char op[64];
    snprintf(op, sizeof op, "%s", ack->operation_id);
    bigfleet__v1alpha1__transition_ack__free_unpacked(ack, NULL);
    bf_sim_reply_free(&r);
    a = simt_create(s, im, "", 0, 0, T0);
    simt_ack_free(&a);
    a = simt_configure(s, im, "c-inflight", NULL, "", 0, 0, T0);
    simt_ack_free(&a);
    a = simt_drain(s, im, 0, "", 0, 0, T0);
    ck_assert_int_eq(a.state, BF_STATE_DRAINING);
    simt_ack_free(&a);
    ck_assert_int_eq(simt_create(s, "ghost-dur", "durA", 5, 5, T0).code, BF_SIM_NOT_FOUND);
    say(fd, "%s %s %s %s %lld", fm, cm, op, im, (long long)bf_sim_revision(s));
    /* no close: the process is killed */
}

struct pre {
    char fm[128], cm[128], op[64], im[128];
    long long rev;
};

static struct pre killed_run(const char *dir)
{
    char out[1024];
    run_then_kill(dir, drive, out, sizeof out);
    struct pre p;
    ck_assert_int_eq(sscanf(out, "%127s %127s %63s %127s %lld", p.fm, p.cm, p.op, p.im, &p.rev), 5);
    return p;
}

START_TEST(b1001_b1007_fencing_marks_survive_and_new_shards_still_get_first_contact)
{
    char *dir = simt_tmpdir();
    struct pre p = killed_run(dir);
    struct bf_sim_config c = state_cfg(dir);
    struct bf_sim *s = simt_open(&c);
    ck_assert_int_eq(simt_create(s, p.fm, "durA", 3, 7, T0).code, BF_SIM_FAILED_PRECONDITION);
    ck_assert_int_eq(simt_create(s, p.fm, "durA", 2, 99, T0).code, BF_SIM_FAILED_PRECONDITION);
    ck_assert_int_eq(simt_create(s, "ghost-dur", "durA", 5, 5, T0).code,
                     BF_SIM_FAILED_PRECONDITION);               /* ghost marks too */
    struct simt_ack a = simt_create(s, p.fm, "durA", 3, 8, T0); /* newer: idempotent no-op */
    ck_assert_int_eq(a.code, 0);
    simt_ack_free(&a);
    a = simt_configure(s, p.fm, "c", NULL, "newshard", 1, 1, T0); /* B1007 */
    ck_assert_int_eq(a.code, 0);
    simt_ack_free(&a);
    bf_sim_close(s);
    simt_rmdir(dir);
}
END_TEST

START_TEST(b1002_b1003_binding_metadata_and_operation_ids_survive_a_kill)
{
    char *dir = simt_tmpdir();
    struct pre p = killed_run(dir);
    struct bf_sim_config c = state_cfg(dir);
    struct bf_sim *s = simt_open(&c);
    struct simt_ack a = simt_configure(s, p.cm, "durable-cluster", NULL, "", 0, 0, T0);
    ck_assert_int_eq(a.code, 0);
    ck_assert_str_eq(a.op, p.op); /* idempotent retry returns the pre-restart id */
    ck_assert_int_eq(a.state, BF_STATE_CONFIGURED);
    ck_assert_str_eq(a.ack->machine->cluster, "durable-cluster");
    simt_ack_free(&a);
    struct simt_kv md[3] = {{(const uint8_t *)"d/k", 3, (const uint8_t *)"v", 1},
                            {(const uint8_t *)"d/k2", 4,
                             (const uint8_t *)"v\0"
                                              "2",
                             3},
                            {(const uint8_t *)"d/nul\0key", 9, (const uint8_t *)"", 0}};
    struct bf_sim_reply r = simt_get_raw(s, p.cm, T0);
    ck_assert_int_eq(r.code, 0);
    ck_assert(simt_md_equal(r.body, r.len, md, 3));
    bf_sim_reply_free(&r);
    bf_sim_close(s);
    simt_rmdir(dir);
}
END_TEST

START_TEST(b1004_b1006_inventory_survives_and_inflight_transitions_become_failed)
{
    char *dir = simt_tmpdir();
    struct pre p = killed_run(dir);
    struct bf_sim_config c = state_cfg(dir);
    c.seed_speculative = 99; /* ignored: the state holds a pool */
    struct bf_sim *s = simt_open(&c);
    ck_assert_uint_eq(bf_sim_machine_count(s), 30);
    int code;
    PbMachine *m = simt_get(s, p.im, T0, &code);
    ck_assert_int_eq(m->state, BF_STATE_FAILED);
    ck_assert_str_eq(m->last_error,
                     "drain transition interrupted by a provider restart; needs re-drive");
    ck_assert_str_eq(m->cluster, "c-inflight"); /* evidence kept */
    simt_free_machine(m);
    ck_assert_int_eq(simt_state(s, p.fm, T0), BF_STATE_IDLE);
    ck_assert_int_eq(simt_state(s, p.cm, T0), BF_STATE_CONFIGURED);
    ck_assert_uint_eq(bf_sim_count_in_state(s, BF_STATE_SPECULATIVE), 27);
    ck_assert_uint_eq(bf_sim_hosts_in_use(s), 2);
    /* nothing is left scheduled: the lost timer does not resurrect */
    ck_assert_int_eq(bf_sim_next_deadline(s), INT64_MAX);
    ck_assert_int_eq(bf_sim_advance(s, T0 + 3600 * SEC), 0);
    ck_assert_int_eq(simt_state(s, p.im, T0 + 3600 * SEC), BF_STATE_FAILED);
    bf_sim_close(s);
    simt_rmdir(dir);
}
END_TEST

START_TEST(b1005_cursors_move_forward_and_operation_ids_are_never_reused)
{
    char *dir = simt_tmpdir();
    struct pre p = killed_run(dir);
    struct bf_sim_config c = state_cfg(dir);
    struct bf_sim *s = simt_open(&c);
    ck_assert_int_gt(bf_sim_revision(s), p.rev);
    /* the pre-restart cursor gets a full list */
    char old[32];
    snprintf(old, sizeof old, "%lld", p.rev);
    int code;
    PbList *l = simt_list(s, NULL, 0, old, strlen(old), T0, &code);
    ck_assert_uint_eq(l->n_machines, bf_sim_machine_count(s));
    char cur[32];
    simt_rev(l, cur, sizeof cur);
    simt_free_list(l);
    /* a post-restart cursor gives exact deltas */
    const char *x = bf_sim_machine_id(s, 5);
    struct simt_ack a = simt_create(s, x, "", 0, 0, T0);
    ck_assert_int_eq(a.code, 0);
    /* the first run minted op-1..op-6 (3 Creates, 2 Configures, 1 Drain) */
    ck_assert_str_eq(p.op, "op-3");
    ck_assert_int_gt(atoll(a.op + 3), 6);
    simt_ack_free(&a);
    l = simt_list(s, NULL, 0, cur, strlen(cur), T0, &code);
    ck_assert_uint_eq(l->n_machines, 1);
    ck_assert_str_eq(l->machines[0]->id, x);
    simt_free_list(l);
    bf_sim_close(s);
    /* a clean reopen: the revision still moves forward */
    int64_t r1;
    s = simt_open(&c);
    r1 = bf_sim_revision(s);
    bf_sim_close(s);
    s = simt_open(&c);
    ck_assert_int_gt(bf_sim_revision(s), r1);
    bf_sim_close(s);
    simt_rmdir(dir);
}
END_TEST

START_TEST(a_catalog_without_a_stored_type_refuses_to_load)
{
    char *dir = simt_tmpdir();
    struct bf_sim_config c = state_cfg(dir);
    struct bf_sim *s = simt_open(&c);
    bf_sim_close(s);
    struct bf_sim_type only = {"other", 1000, 1024, 0, "", BF_CT_ON_DEMAND, 0.1, 0, 0};
    c.types = &only;
    c.n_types = 1;
    char err[256];
    ck_assert_int_eq(bf_sim_open(&c, &s, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "catalog lacks"));
    simt_rmdir(dir);
}
END_TEST

START_TEST(spot_eligibility_and_host_counts_are_rebuilt_on_load)
{
    char *dir = simt_tmpdir();
    struct bf_sim_type t[1] = {{"sp", 2000, 8192, 0, "", BF_CT_SPOT, 0.03, 0.1, 0}};
    struct bf_sim_config c = state_cfg(dir);
    c.types = t;
    c.n_types = 1;
    c.seed_idle = 50;
    c.seed_configured = 50;
    c.spot_interruption_rate = 0.1;
    struct bf_sim *s = simt_open(&c);
    bf_sim_advance(s, T0);
    int k1 = bf_sim_advance(s, T0 + 2 * SEC);
    ck_assert_int_gt(k1, 0);
    size_t failed = bf_sim_count_in_state(s, BF_STATE_FAILED);
    uint32_t held = bf_sim_hosts_in_use(s);
    bf_sim_close(s);
    s = simt_open(&c);
    ck_assert_uint_eq(bf_sim_count_in_state(s, BF_STATE_FAILED), failed);
    ck_assert_uint_eq(bf_sim_hosts_in_use(s), held);
    ck_assert_uint_eq(s->n_spot, 100 - failed);
    bf_sim_advance(s, T0);
    ck_assert_int_gt(bf_sim_advance(s, T0 + 5 * SEC), 0);
    bf_sim_close(s);
    simt_rmdir(dir);
}
END_TEST

START_TEST(seeding_half_a_million_writes_through_and_reloads)
{
    char *dir = simt_tmpdir();
    struct bf_sim_config c;
    bf_sim_config_init(&c);
    c.catalog_path = simt_openb_csv();
    c.seed_speculative = 18519;
    c.state_path = dir;
    int64_t t0 = bf_mono_ns();
    struct bf_sim *s = simt_open(&c);
    double seed_s = (double)(bf_mono_ns() - t0) / 1e9;
    ck_assert_uint_eq(bf_sim_machine_count(s), 500013);
    struct simt_ack a = simt_create(s, bf_sim_machine_id(s, 12345), "", 0, 0, T0);
    simt_ack_free(&a);
    bf_sim_close(s);
    t0 = bf_mono_ns();
    s = simt_open(&c);
    double load_s = (double)(bf_mono_ns() - t0) / 1e9;
    ck_assert_uint_eq(bf_sim_machine_count(s), 500013);
    ck_assert_uint_eq(bf_sim_count_in_state(s, BF_STATE_IDLE), 1);
    fprintf(stderr, "500K with LMDB: seed+write %.2f s, reload %.2f s\n", seed_s, load_s);
    bf_sim_close(s);
    simt_rmdir(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("simprovider-durability");
    TCase *tc = tcase_create("durability");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, b1001_b1007_fencing_marks_survive_and_new_shards_still_get_first_contact);
    tcase_add_test(tc, b1002_b1003_binding_metadata_and_operation_ids_survive_a_kill);
    tcase_add_test(tc, b1004_b1006_inventory_survives_and_inflight_transitions_become_failed);
    tcase_add_test(tc, b1005_cursors_move_forward_and_operation_ids_are_never_reused);
    tcase_add_test(tc, a_catalog_without_a_stored_type_refuses_to_load);
    tcase_add_test(tc, spot_eligibility_and_host_counts_are_rebuilt_on_load);
    tcase_add_test(tc, seeding_half_a_million_writes_through_and_reloads);
    suite_add_tcase(s, tc);
    return check_run(s);
}
