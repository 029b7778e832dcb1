/*
 * test_simprovider_contract.c — the provider contract of reference/ecosystem.md
 * §2.2–§2.3 re-expressed against the simulated provider's core, through the
 * wire path (protobuf-c requests -> bf_sim_handle -> protobuf-c replies):
 * lifecycle (B101–B109), error-code discipline (B201–B215), fencing
 * (B301–B312), idempotency under interleaving (B401–B409), shard_metadata echo
 * (B501–B505) and field shape (B801–B807).
 */
#include <math.h>

#include "test_simprovider.h"

/* ------------------------------------------------------------ lifecycle */

static void assert_idle_clean(const PbMachine *m)
{
    ck_assert_int_eq(m->state, BF_STATE_IDLE);
    ck_assert_str_eq(m->cluster, "");
    ck_assert_uint_eq(m->n_shard_metadata, 0);
    ck_assert_str_eq(m->last_error, "");
    ck_assert_ptr_nonnull(m->host);
    ck_assert(m->host->ref[0] != 0);
}

START_TEST(b101_instant_round_trips_return_to_clean_idle_and_speculative)
{
    struct bf_sim_config c;
    simt_cfg(&c);
    struct bf_sim *s = simt_open(&c);
    char id[128];
    ck_assert_int_eq(simt_pick(s, BF_STATE_SPECULATIVE, 0, id, sizeof id, T0), 0);
    const char *md[] = {"k", "v", NULL};
    for (int round = 0; round < 4; round++) {
        struct simt_ack a = simt_create(s, id, "", 0, 0, T0);
        ck_assert_int_eq(a.code, 0);
        ck_assert_int_eq(a.state, BF_STATE_IDLE); /* instant by default */
        assert_idle_clean(a.ack->machine);
        simt_ack_free(&a);
        a = simt_configure(s, id, "cluster-x", md, "", 0, 0, T0);
        ck_assert_int_eq(a.code, 0);
        ck_assert_int_eq(a.state, BF_STATE_CONFIGURED);
        ck_assert_str_eq(a.ack->machine->cluster, "cluster-x");
        ck_assert_uint_eq(a.ack->machine->n_shard_metadata, 1);
        simt_ack_free(&a);
        a = simt_drain(s, id, 30, "", 0, 0, T0);
        ck_assert_int_eq(a.code, 0);
        assert_idle_clean(a.ack->machine);
        simt_ack_free(&a);
        int code;
        PbMachine *m = simt_get(s, id, T0, &code);
        assert_idle_clean(m);
        simt_free_machine(m);
        a = simt_delete(s, id, "", 0, 0, T0);
        ck_assert_int_eq(a.code, 0);
        ck_assert_int_eq(a.state, BF_STATE_SPECULATIVE);
        ck_assert_ptr_null(a.ack->machine->host);
        ck_assert_ptr_null(a.ack->machine->allocatable);
        ck_assert_str_eq(a.ack->machine->cluster, "");
        simt_ack_free(&a);
    }
    bf_sim_close(s);
}
END_TEST

/* With latencies every transitional state is observable, lasts exactly the
 * latency, and the observed trace walks legal edges only. */
START_TEST(b102_staged_transitions_hold_their_transitional_state_until_due)
{
    struct bf_sim_config c;
    simt_cfg(&c);
    for (int k = 0; k < BF_SIM_KIND_COUNT; k++)
        c.transition_latency[k] = (struct bf_sim_dist){BF_SIM_DIST_FIXED, (k + 1) * SEC, 0};
    struct bf_sim *s = simt_open(&c);
    char id[128];
    simt_pick(s, BF_STATE_SPECULATIVE, 0, id, sizeof id, T0);
    int64_t now = T0;
    int trace[16], nt = 0;
    trace[nt++] = BF_STATE_SPECULATIVE;
    struct {
        int kind, trans, target;
    } steps[] = {{BF_SIM_RPC_CREATE, BF_STATE_CREATING, BF_STATE_IDLE},
                 {BF_SIM_RPC_CONFIGURE, BF_STATE_CONFIGURING, BF_STATE_CONFIGURED},
                 {BF_SIM_RPC_DRAIN, BF_STATE_DRAINING, BF_STATE_IDLE},
                 {BF_SIM_RPC_DELETE, BF_STATE_DELETING, BF_STATE_SPECULATIVE}};
    const char *md[] = {"a", "1", NULL};
    for (size_t i = 0; i < 4; i++) {
        struct simt_ack a;
        if (steps[i].kind == BF_SIM_RPC_CREATE)
            a = simt_create(s, id, "", 0, 0, now);
        else if (steps[i].kind == BF_SIM_RPC_CONFIGURE)
            a = simt_configure(s, id, "c1", md, "", 0, 0, now);
        else if (steps[i].kind == BF_SIM_RPC_DRAIN)
            a = simt_drain(s, id, 10, "", 0, 0, now);
        else
            a = simt_delete(s, id, "", 0, 0, now);
        ck_assert_int_eq(a.code, 0);
        ck_assert_int_eq(a.state, steps[i].trans);
        simt_ack_free(&a);
        int64_t due = now + (int64_t)(i + 1) * SEC;
        ck_assert_int_eq(bf_sim_next_deadline(s), due);
        ck_assert_int_eq(simt_state(s, id, due - 1), steps[i].trans);
        trace[nt++] = steps[i].trans;
        ck_assert_int_eq(simt_state(s, id, due), steps[i].target);
        trace[nt++] = steps[i].target;
        now = due;
    }
    for (int i = 1; i < nt; i++)
        ck_assert_msg(bf_can_transition(trace[i - 1], trace[i]), "illegal edge %s -> %s",
                      bf_state_name(trace[i - 1]), bf_state_name(trace[i]));
    ck_assert_int_eq(bf_sim_next_deadline(s), INT64_MAX);
    bf_sim_close(s);
}
END_TEST

START_TEST(b103_cluster_is_bound_from_configuring_and_cleared_after_drain)
{
    struct bf_sim_config c;
    simt_cfg(&c);
    c.transition_latency[BF_SIM_RPC_CONFIGURE] = (struct bf_sim_dist){0, 5 * SEC, 0};
    c.transition_latency[BF_SIM_RPC_DRAIN] = (struct bf_sim_dist){0, 5 * SEC, 0};
    struct bf_sim *s = simt_open(&c);
    char id[128];
    simt_pick(s, BF_STATE_SPECULATIVE, 0, id, sizeof id, T0);
    struct simt_ack a = simt_create(s, id, "", 0, 0, T0);
    simt_ack_free(&a);
    const char *md[] = {"x", "y", NULL};
    a = simt_configure(s, id, "cl-9", md, "", 0, 0, T0);
    ck_assert_int_eq(a.state, BF_STATE_CONFIGURING);
    ck_assert_str_eq(a.ack->machine->cluster, "cl-9");
    simt_ack_free(&a);
    a = simt_drain(s, id, 1, "", 0, 0, T0 + 5 * SEC);
    ck_assert_int_eq(a.state, BF_STATE_DRAINING);
    ck_assert_str_eq(a.ack->machine->cluster, "cl-9"); /* still bound while draining */
    ck_assert_uint_eq(a.ack->machine->n_shard_metadata, 1);
    simt_ack_free(&a);
    int code;
    PbMachine *m = simt_get(s, id, T0 + 10 * SEC, &code);
    assert_idle_clean(m);
    simt_free_machine(m);
    bf_sim_close(s);
}
END_TEST

START_TEST(b104_settled_machines_never_reenter_a_transitional_state)
{
    struct bf_sim_config c;
    simt_cfg(&c);
    c.seed_idle = 2;
    c.seed_configured = 2;
    struct bf_sim *s = simt_open(&c);
    PbList *before = simt_list_all(s, T0);
    for (int64_t t = T0; t < T0 + 3600 * SEC; t += 60 * SEC)
        ck_assert_int_eq(bf_sim_advance(s, t), 0);
    PbList *after = simt_list_all(s, T0 + 3600 * SEC);
    ck_assert_uint_eq(before->n_machines, after->n_machines);
    for (size_t i = 0; i < after->n_machines; i++) {
        ck_assert(bf_state_is_stable(after->machines[i]->state));
        ck_assert_int_eq(after->machines[i]->state, before->machines[i]->state);
    }
    ck_assert_mem_eq(before->revision.data, after->revision.data, before->revision.len);
    simt_free_list(before);
    simt_free_list(after);
    bf_sim_close(s);
}
END_TEST

/* ------------------------------------------------------------ error codes */

static struct bf_sim *walked(char *idle, char *conf, char *spec)
{
    struct bf_sim_config c;
    simt_cfg(&c);
    struct bf_sim *s = simt_open(&c);
    simt_pick(s, BF_STATE_SPECULATIVE, 0, idle, 128, T0);
    simt_pick(s, BF_STATE_SPECULATIVE, 1, conf, 128, T0);
    simt_pick(s, BF_STATE_SPECULATIVE, 2, spec, 128, T0);
    struct simt_ack a = simt_create(s, idle, "", 0, 0, T0);
    simt_ack_free(&a);
    a = simt_create(s, conf, "", 0, 0, T0);
    simt_ack_free(&a);
    const char *md[] = {"k", "v", NULL};
    a = simt_configure(s, conf, "conf-b2", md, "", 0, 0, T0);
    ck_assert_int_eq(a.state, BF_STATE_CONFIGURED);
    simt_ack_free(&a);
    return s;
}

START_TEST(b201_b204_out_of_position_calls_are_internal_and_change_nothing)
{
    char idle[128], conf[128], spec[128];
    struct bf_sim *s = walked(idle, conf, spec);
    int64_t rev = bf_sim_revision(s);
    struct simt_ack a = simt_create(s, conf, "", 0, 0, T0); /* B201 */
    ck_assert_int_eq(a.code, BF_SIM_INTERNAL);
    ck_assert_ptr_nonnull(strstr(a.msg, "invalid state transition"));
    a = simt_configure(s, spec, "x", NULL, "", 0, 0, T0); /* B202 */
    ck_assert_int_eq(a.code, BF_SIM_INTERNAL);
    a = simt_drain(s, idle, 5, "", 0, 0, T0); /* B203, no drain history */
    ck_assert_int_eq(a.code, BF_SIM_INTERNAL);
    a = simt_delete(s, spec, "", 0, 0, T0); /* B204 */
    ck_assert_int_eq(a.code, BF_SIM_INTERNAL);
    a = simt_delete(s, conf, "", 0, 0, T0);
    ck_assert_int_eq(a.code, BF_SIM_INTERNAL);
    ck_assert_int_eq(bf_sim_revision(s), rev); /* no partial transition anywhere */
    ck_assert_int_eq(simt_state(s, conf, T0 + SEC), BF_STATE_CONFIGURED);
    ck_assert_int_eq(simt_state(s, spec, T0 + SEC), BF_STATE_SPECULATIVE);
    ck_assert_int_eq(simt_state(s, idle, T0 + SEC), BF_STATE_IDLE);
    int code;
    PbMachine *m = simt_get(s, conf, T0, &code);
    ck_assert_str_eq(m->cluster, "conf-b2");
    simt_free_machine(m);
    m = simt_get(s, spec, T0, &code);
    ck_assert_str_eq(m->cluster, "");
    ck_assert_uint_eq(m->n_shard_metadata, 0);
    simt_free_machine(m);
    bf_sim_close(s);
}
END_TEST

START_TEST(b203_b204_at_target_after_a_prior_cycle_is_an_idempotent_no_op)
{
    char idle[128], conf[128], spec[128];
    struct bf_sim *s = walked(idle, conf, spec);
    struct simt_ack d1 = simt_drain(s, conf, 5, "", 0, 0, T0);
    ck_assert_int_eq(d1.code, 0);
    struct simt_ack d2 = simt_drain(s, conf, 5, "", 0, 0, T0); /* Drain@Idle with history */
    ck_assert_int_eq(d2.code, 0);
    ck_assert_str_eq(d1.op, d2.op);
    ck_assert_int_eq(d2.state, BF_STATE_IDLE);
    struct simt_ack x1 = simt_delete(s, conf, "", 0, 0, T0);
    struct simt_ack x2 = simt_delete(s, conf, "", 0, 0, T0); /* Delete@Speculative with history */
    ck_assert_int_eq(x2.code, 0);
    ck_assert_str_eq(x1.op, x2.op);
    ck_assert_int_eq(x2.state, BF_STATE_SPECULATIVE);
    simt_ack_free(&d1);
    simt_ack_free(&d2);
    simt_ack_free(&x1);
    simt_ack_free(&x2);
    bf_sim_close(s);
}
END_TEST

START_TEST(b205_b206_replays_at_target_reuse_the_original_operation_id)
{
    struct bf_sim_config c;
    simt_cfg(&c);
    c.transition_latency[BF_SIM_RPC_CREATE] = (struct bf_sim_dist){0, SEC, 0};
    struct bf_sim *s = simt_open(&c);
    char id[128];
    simt_pick(s, BF_STATE_SPECULATIVE, 0, id, sizeof id, T0);
    struct simt_ack a1 = simt_create(s, id, "", 0, 0, T0);
    ck_assert_int_eq(a1.state, BF_STATE_CREATING);
    ck_assert(a1.op[0]);
    struct simt_ack a2 = simt_create(s, id, "", 0, 0, T0 + 1); /* while Creating */
    ck_assert_str_eq(a1.op, a2.op);
    ck_assert_int_eq(a2.state, BF_STATE_CREATING);
    struct simt_ack a3 = simt_create(s, id, "", 0, 0, T0 + 2 * SEC); /* at Idle */
    ck_assert_str_eq(a1.op, a3.op);
    ck_assert_int_eq(a3.state, BF_STATE_IDLE);
    const char *md[] = {"a", "1", "b", "2", NULL};
    struct simt_ack c1 = simt_configure(s, id, "conf-b205", md, "", 0, 0, T0 + 3 * SEC);
    ck_assert_str_ne(c1.op, a1.op);
    int64_t rev = bf_sim_revision(s);
    struct simt_ack c2 = simt_configure(s, id, "conf-b205", md, "", 0, 0, T0 + 4 * SEC);
    ck_assert_str_eq(c1.op, c2.op);
    ck_assert_int_eq(c2.state, BF_STATE_CONFIGURED);
    ck_assert_int_eq(bf_sim_revision(s), rev); /* no transitional detour */
    struct bf_sim_stats st;
    bf_sim_get_stats(s, &st);
    ck_assert_uint_eq(st.accepted[BF_SIM_RPC_CREATE], 1);
    ck_assert_uint_eq(st.idempotent[BF_SIM_RPC_CREATE], 2);
    ck_assert_uint_eq(st.accepted[BF_SIM_RPC_CONFIGURE], 1);
    simt_ack_free(&a1);
    simt_ack_free(&a2);
    simt_ack_free(&a3);
    simt_ack_free(&c1);
    simt_ack_free(&c2);
    bf_sim_close(s);
}
END_TEST

START_TEST(b207_b215_unknown_ids_are_not_found_and_never_created)
{
    struct bf_sim_config c;
    simt_cfg(&c);
    struct bf_sim *s = simt_open(&c);
    size_t n = bf_sim_machine_count(s);
    const char *ghost = "conformance-ghost-1";
    ck_assert_int_eq(simt_create(s, ghost, "", 0, 0, T0).code, BF_SIM_NOT_FOUND);
    ck_assert_int_eq(simt_configure(s, ghost, "x", NULL, "", 0, 0, T0).code, BF_SIM_NOT_FOUND);
    ck_assert_int_eq(simt_drain(s, ghost, 5, "", 0, 0, T0).code, BF_SIM_NOT_FOUND);
    ck_assert_int_eq(simt_delete(s, ghost, "", 0, 0, T0).code, BF_SIM_NOT_FOUND);
    int code;
    ck_assert_ptr_null(simt_get(s, ghost, T0, &code));
    ck_assert_int_eq(code, BF_SIM_NOT_FOUND);
    ck_assert_uint_eq(bf_sim_machine_count(s), n);
    PbList *l = simt_list_all(s, T0);
    ck_assert_uint_eq(l->n_machines, n);
    simt_free_list(l);
    bf_sim_close(s);
}
END_TEST

START_TEST(b208_empty_ids_are_invalid_argument_before_anything)
{
    struct bf_sim_config c;
    simt_cfg(&c);
    struct bf_sim *s = simt_open(&c);
    /* even with a token that would be stale, empty id wins */
    ck_assert_int_eq(simt_create(s, "", "sh", 5, 5, T0).code, BF_SIM_INVALID_ARGUMENT);
    ck_assert_int_eq(simt_create(s, "", "sh", 1, 1, T0).code, BF_SIM_INVALID_ARGUMENT);
    ck_assert_int_eq(simt_configure(s, "", "x", NULL, "", 0, 0, T0).code, BF_SIM_INVALID_ARGUMENT);
    ck_assert_int_eq(simt_drain(s, "", 5, "", 0, 0, T0).code, BF_SIM_INVALID_ARGUMENT);
    ck_assert_int_eq(simt_delete(s, "", "", 0, 0, T0).code, BF_SIM_INVALID_ARGUMENT);
    int code;
    ck_assert_ptr_null(simt_get(s, "", T0, &code));
    ck_assert_int_eq(code, BF_SIM_INVALID_ARGUMENT);
    bf_sim_close(s);
}
END_TEST

START_TEST(configure_without_cluster_is_invalid_argument_and_leaves_idle)
{
    char idle[128], conf[128], spec[128];
    struct bf_sim *s = walked(idle, conf, spec);
    ck_assert_int_eq(simt_configure(s, idle, "", NULL, "", 0, 0, T0).code, BF_SIM_INVALID_ARGUMENT);
    ck_assert_int_eq(simt_state(s, idle, T0), BF_STATE_IDLE);
    bf_sim_close(s);
}
END_TEST

START_TEST(b209_b503_large_metadata_is_echoed_verbatim_or_rejected_over_the_cap)
{
    char idle[128], conf[128], spec[128];
    struct bf_sim *s = walked(idle, conf, spec);
    /* 512 x 1 KiB (B209) and 256 x 8 KiB (B503): both under the 16 MiB cap */
    size_t sizes[2][2] = {{512, 1024}, {256, 8192}};
    for (int t = 0; t < 2; t++) {
        size_t n = sizes[t][0], vl = sizes[t][1];
        struct simt_kv *md = calloc(n, sizeof *md);
        char(*keys)[48] = calloc(n, 48);
        uint8_t *val = malloc(vl);
        for (size_t i = 0; i < vl; i++)
            val[i] = (uint8_t)('a' + i % 26);
        for (size_t i = 0; i < n; i++) {
            snprintf(keys[i], 48, "x-oversize/key-%04zu", i);
            md[i] = (struct simt_kv){(const uint8_t *)keys[i], strlen(keys[i]), val, vl};
        }
        struct simt_buf b = simt_configure_raw(idle, "conf-big", md, n, 0);
        struct bf_sim_reply r = {0};
        bf_sim_handle(s, BF_SIM_RPC_CONFIGURE, b.p, b.len, T0, &r);
        ck_assert_int_eq(r.code, 0);
        bf_sim_reply_free(&r);
        r = simt_get_raw(s, idle, T0);
        ck_assert_int_eq(r.code, 0);
        ck_assert(simt_md_equal(r.body, r.len, md, n));
        bf_sim_reply_free(&r);
        struct simt_ack d = simt_drain(s, idle, 0, "", 0, 0, T0);
        ck_assert_int_eq(d.code, 0);
        simt_ack_free(&d);
        free(b.p);
        free(md);
        free(keys);
        free(val);
    }
    bf_sim_close(s);
    /* over a configured cap: InvalidArgument, machine stays Idle, nothing leaks */
    struct bf_sim_config c;
    simt_cfg(&c);
    c.max_metadata_bytes = 1000;
    c.seed_idle = 1;
    s = simt_open(&c);
    simt_pick(s, BF_STATE_IDLE, 0, idle, sizeof idle, T0);
    uint8_t v[600] = {0};
    struct simt_kv md2[2] = {{(const uint8_t *)"a", 1, v, sizeof v},
                             {(const uint8_t *)"b", 1, v, sizeof v}};
    struct simt_buf b = simt_configure_raw(idle, "conf-cap", md2, 2, 0);
    int64_t rev = bf_sim_revision(s);
    struct bf_sim_reply r = {0};
    bf_sim_handle(s, BF_SIM_RPC_CONFIGURE, b.p, b.len, T0, &r);
    ck_assert_int_eq(r.code, BF_SIM_INVALID_ARGUMENT);
    ck_assert_int_eq(bf_sim_revision(s), rev);
    int code;
    PbMachine *m = simt_get(s, idle, T0, &code);
    ck_assert_int_eq(m->state, BF_STATE_IDLE);
    ck_assert_str_eq(m->cluster, "");
    ck_assert_uint_eq(m->n_shard_metadata, 0);
    simt_free_machine(m);
    bf_sim_reply_free(&r);
    free(b.p);
    bf_sim_close(s);
}
END_TEST

START_TEST(b210_negative_grace_is_accepted_and_settles_idle)
{
    char idle[128], conf[128], spec[128];
    struct bf_sim *s = walked(idle, conf, spec);
    struct simt_ack a = simt_drain(s, conf, -5, "", 0, 0, T0);
    ck_assert_int_eq(a.code, 0);
    ck_assert_int_eq(a.state, BF_STATE_IDLE);
    ck_assert_str_eq(a.ack->machine->cluster, "");
    simt_ack_free(&a);
    bf_sim_close(s);
}
END_TEST

START_TEST(b211_b212_negative_and_int64_max_tokens_follow_plain_ordering)
{
    char idle[128], conf[128], spec[128];
    struct bf_sim *s = walked(idle, conf, spec);
    char sp2[128], sp3[128];
    simt_pick(s, BF_STATE_SPECULATIVE, 1, sp2, sizeof sp2, T0);
    simt_pick(s, BF_STATE_SPECULATIVE, 2, sp3, sizeof sp3, T0);
    /* B211: first contact with negative values is accepted */
    struct simt_ack a = simt_create(s, spec, "b211-a", -1, 1, T0);
    ck_assert_int_eq(a.code, 0);
    simt_ack_free(&a);
    a = simt_create(s, sp2, "b211-b", -7, -3, T0);
    ck_assert_int_eq(a.code, 0);
    simt_ack_free(&a);
    /* B212: int64 max establishes the mark without overflow */
    a = simt_configure(s, idle, "c-max", NULL, "b212", INT64_MAX, INT64_MAX, T0);
    ck_assert_int_eq(a.code, 0);
    ck_assert_str_eq(a.ack->machine->cluster, "c-max");
    simt_ack_free(&a);
    ck_assert_int_eq(simt_drain(s, idle, 0, "b212", INT64_MAX, INT64_MAX, T0).code,
                     BF_SIM_FAILED_PRECONDITION);
    ck_assert_int_eq(simt_drain(s, idle, 0, "b212", INT64_MAX - 1, INT64_MAX, T0).code,
                     BF_SIM_FAILED_PRECONDITION);
    ck_assert_int_eq(simt_state(s, idle, T0), BF_STATE_CONFIGURED);
    bf_sim_close(s);
}
END_TEST

START_TEST(b213_three_mib_bootstrap_blob_is_accepted)
{
    char idle[128], conf[128], spec[128];
    struct bf_sim *s = walked(idle, conf, spec);
    struct simt_kv md[1] = {{(const uint8_t *)"k", 1, (const uint8_t *)"v", 1}};
    struct bf_sim_reply r = simt_configure_md(s, idle, "conf-b213", md, 1, 3u << 20, T0);
    ck_assert_int_eq(r.code, 0);
    PbAck *ack = bigfleet__v1alpha1__transition_ack__unpack(NULL, r.len, r.body);
    ck_assert_str_eq(ack->machine->cluster, "conf-b213");
    bigfleet__v1alpha1__transition_ack__free_unpacked(ack, NULL);
    bf_sim_reply_free(&r);
    bf_sim_close(s);
}
END_TEST

START_TEST(b214_each_new_cycle_mints_a_fresh_operation_id)
{
    struct bf_sim_config c;
    simt_cfg(&c);
    struct bf_sim *s = simt_open(&c);
    char id[128];
    simt_pick(s, BF_STATE_SPECULATIVE, 0, id, sizeof id, T0);
    const char *m1[] = {"k", "1", NULL}, *m2[] = {"k", "2", NULL};
    struct simt_ack a[6];
    a[0] = simt_create(s, id, "", 0, 0, T0);
    a[1] = simt_configure(s, id, "conf-b214", m1, "", 0, 0, T0);
    a[2] = simt_drain(s, id, 5, "", 0, 0, T0);
    a[3] = simt_configure(s, id, "conf-b214-b", m2, "", 0, 0, T0);
    a[4] = simt_drain(s, id, 5, "", 0, 0, T0);
    a[5] = simt_drain(s, id, 5, "", 0, 0, T0); /* replay at target */
    for (int i = 0; i < 6; i++)
        ck_assert_int_eq(a[i].code, 0);
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < i; j++)
            ck_assert_str_ne(a[i].op, a[j].op);
    ck_assert_str_eq(a[5].op, a[4].op);
    for (int i = 0; i < 6; i++)
        simt_ack_free(&a[i]);
    bf_sim_close(s);
}
END_TEST

START_TEST(delete_of_bare_metal_is_unimplemented_unless_allowed)
{
    struct bf_sim_type t[2] = {
        {"bm-big", 64000, 262144, 8, "H100", BF_CT_BARE_METAL, 10.0, 0, 0},
        {"od-small", 2000, 8192, 0, "", BF_CT_ON_DEMAND, 0.1, 0, 0},
    };
    for (int allowed = 0; allowed < 2; allowed++) {
        struct bf_sim_config c;
        simt_cfg(&c);
        c.types = t;
        c.n_types = 2;
        c.seed_speculative = 0;
        c.seed_idle = 1;
        c.bare_metal_delete_unimplemented = !allowed;
        struct bf_sim *s = simt_open(&c);
        const char *bm = bf_sim_machine_id(s, 0);
        ck_assert_ptr_nonnull(strstr(bm, "bm-big"));
        struct simt_ack a = simt_delete(s, bm, "sh", 1, 1, T0);
        ck_assert_int_eq(a.code, allowed ? BF_SIM_OK : BF_SIM_UNIMPLEMENTED);
        simt_ack_free(&a);
        ck_assert_int_eq(simt_state(s, bm, T0), allowed ? BF_STATE_SPECULATIVE : BF_STATE_IDLE);
        const char *od = bf_sim_machine_id(s, 1);
        a = simt_delete(s, od, "", 0, 0, T0);
        ck_assert_int_eq(a.code, 0);
        simt_ack_free(&a);
        bf_sim_close(s);
    }
}
END_TEST

START_TEST(malformed_requests_and_unknown_methods_map_to_invalid_argument_or_unimplemented)
{
    struct bf_sim_config c;
    simt_cfg(&c);
    struct bf_sim *s = simt_open(&c);
    struct bf_sim_reply r = {0};
    const uint8_t trunc[] = {0x0a, 0x10, 'a', 'b'}; /* length past the end */
    for (int rpc = 0; rpc < BF_SIM_RPC_COUNT; rpc++) {
        bf_sim_handle(s, rpc, trunc, sizeof trunc, T0, &r);
        ck_assert_int_eq(r.code, BF_SIM_INVALID_ARGUMENT);
    }
    const uint8_t group[] = {0x0b}; /* field 1, start group */
    bf_sim_handle(s, BF_SIM_RPC_CREATE, group, 1, T0, &r);
    ck_assert_int_eq(r.code, BF_SIM_INVALID_ARGUMENT);
    const uint8_t wrongwt[] = {0x08, 0x01}; /* machine_id as a varint */
    bf_sim_handle(s, BF_SIM_RPC_DRAIN, wrongwt, 2, T0, &r);
    ck_assert_int_eq(r.code, BF_SIM_INVALID_ARGUMENT);
    bf_sim_handle(s, 17, NULL, 0, T0, &r);
    ck_assert_int_eq(r.code, BF_SIM_UNIMPLEMENTED);
    ck_assert_int_eq(bf_sim_rpc_from_path("/bigfleet.v1alpha1.CapacityProvider/Drain", 41),
                     BF_SIM_RPC_DRAIN);
    const char *p = "/bigfleet.v1alpha1.CapacityProvider/List";
    ck_assert_int_eq(bf_sim_rpc_from_path(p, strlen(p)), BF_SIM_RPC_LIST);
    p = "/bigfleet.v1alpha1.CapacityProvider/Watch";
    ck_assert_int_eq(bf_sim_rpc_from_path(p, strlen(p)), -1);
    p = "/bigfleet.v1alpha1.Shard/Create";
    ck_assert_int_eq(bf_sim_rpc_from_path(p, strlen(p)), -1);
    /* unknown fields, including reserved numbers, are skipped */
    const uint8_t withres[] = {0x12, 0x01, 'z', 0x0a, 0x01, 'q'}; /* field 2 (reserved) + id "q" */
    bf_sim_handle(s, BF_SIM_RPC_CREATE, withres, sizeof withres, T0, &r);
    ck_assert_int_eq(r.code, BF_SIM_NOT_FOUND);
    bf_sim_reply_free(&r);
    bf_sim_close(s);
}
END_TEST

/* ------------------------------------------------------------ fencing */

START_TEST(b301_fence_runs_before_not_found_and_marks_unknown_ids)
{
    struct bf_sim_config c;
    simt_cfg(&c);
    struct bf_sim *s = simt_open(&c);
    const char *ghost = "ghost-b301";
    ck_assert_int_eq(simt_create(s, ghost, "shard-a", 3, 10, T0).code, BF_SIM_NOT_FOUND);
    ck_assert_int_eq(simt_create(s, ghost, "shard-a", 3, 10, T0).code, BF_SIM_FAILED_PRECONDITION);
    ck_assert_int_eq(simt_create(s, ghost, "shard-a", 3, 9, T0).code, BF_SIM_FAILED_PRECONDITION);
    ck_assert_int_eq(simt_create(s, ghost, "shard-a", 3, 11, T0).code, BF_SIM_NOT_FOUND);
    bf_sim_close(s);
}
END_TEST

START_TEST(b302_marks_are_isolated_per_shard_and_per_machine)
{
    struct bf_sim *s = simt_open_idle(2);
    char x[128], y[128];
    simt_pick(s, BF_STATE_IDLE, 0, x, sizeof x, T0);
    simt_pick(s, BF_STATE_IDLE, 1, y, sizeof y, T0);
    struct simt_ack a = simt_configure(s, x, "c", NULL, "shard-a", 9, 900, T0);
    ck_assert_int_eq(a.code, 0);
    simt_ack_free(&a);
    /* another shard on the same machine: first contact, low token ok */
    a = simt_drain(s, x, 1, "shard-b", 1, 1, T0);
    ck_assert_int_eq(a.code, 0);
    simt_ack_free(&a);
    /* the same shard on another machine: its own mark */
    a = simt_configure(s, y, "c", NULL, "shard-a", 1, 1, T0);
    ck_assert_int_eq(a.code, 0);
    simt_ack_free(&a);
    /* and shard-a's mark on x is still (9, 900) */
    ck_assert_int_eq(simt_create(s, x, "shard-a", 9, 900, T0).code, BF_SIM_FAILED_PRECONDITION);
    bf_sim_close(s);
}
END_TEST

START_TEST(b303_only_strictly_newer_tokens_pass_and_a_new_epoch_resets_seq)
{
    char x[128];
    struct bf_sim *s = simt_open_one_idle(x, sizeof x, T0);
    /* use Create at Idle: idempotent no-op when it passes, so only the fence decides */
    struct simt_ack a = simt_create(s, x, "sh", 1, 1, T0);
    ck_assert_int_eq(a.code, BF_SIM_INTERNAL); /* passes the fence, no Create history */
    struct {
        int64_t e, q;
        int want;
    } seqv[] = {{1, 1, BF_SIM_FAILED_PRECONDITION},
                {1, 0, BF_SIM_FAILED_PRECONDITION},
                {0, 99, BF_SIM_FAILED_PRECONDITION},
                {1, 2, BF_SIM_INTERNAL},
                {2, 1, BF_SIM_INTERNAL},
                {1, 1000, BF_SIM_FAILED_PRECONDITION},
                {2, 1, BF_SIM_FAILED_PRECONDITION},
                {2, 2, BF_SIM_INTERNAL}};
    for (size_t i = 0; i < sizeof seqv / sizeof seqv[0]; i++) {
        a = simt_create(s, x, "sh", seqv[i].e, seqv[i].q, T0);
        ck_assert_msg(a.code == seqv[i].want, "token (%lld,%lld): code %d want %d",
                      (long long)seqv[i].e, (long long)seqv[i].q, a.code, seqv[i].want);
    }
    bf_sim_close(s);
}
END_TEST

START_TEST(b304_fenced_mutations_leave_get_and_list_untouched)
{
    struct bf_sim_config c;
    simt_cfg(&c);
    c.seed_configured = 1;
    struct bf_sim *s = simt_open(&c);
    char x[128];
    simt_pick(s, BF_STATE_CONFIGURED, 0, x, sizeof x, T0);
    struct simt_ack a = simt_drain(s, x, 1, "live", 5, 5, T0);
    ck_assert_int_eq(a.code, 0);
    simt_ack_free(&a);
    a = simt_configure(s, x, "c2", NULL, "live", 5, 6, T0);
    ck_assert_int_eq(a.code, 0);
    simt_ack_free(&a);
    PbList *before = simt_list_all(s, T0);
    ck_assert_int_eq(simt_drain(s, x, 1, "live", 5, 6, T0).code, BF_SIM_FAILED_PRECONDITION);
    ck_assert_int_eq(simt_drain(s, x, 1, "live", 4, 100, T0).code, BF_SIM_FAILED_PRECONDITION);
    PbList *after = simt_list_all(s, T0);
    ck_assert_uint_eq(before->revision.len, after->revision.len);
    ck_assert_mem_eq(before->revision.data, after->revision.data, before->revision.len);
    ck_assert_int_eq(simt_state(s, x, T0), BF_STATE_CONFIGURED);
    simt_free_list(before);
    simt_free_list(after);
    struct bf_sim_stats st;
    bf_sim_get_stats(s, &st);
    ck_assert_uint_eq(st.fenced, 2);
    bf_sim_close(s);
}
END_TEST

START_TEST(b305_fence_runs_before_the_idempotency_short_circuit)
{
    char x[128];
    struct bf_sim *s = simt_open_one_idle(x, sizeof x, T0);
    struct simt_ack a = simt_configure(s, x, "c", NULL, "sh", 1, 10, T0);
    ck_assert_int_eq(a.code, 0);
    simt_ack_free(&a);
    /* an otherwise idempotent replay with the same (stale) token is fenced */
    ck_assert_int_eq(simt_configure(s, x, "c", NULL, "sh", 1, 10, T0).code,
                     BF_SIM_FAILED_PRECONDITION);
    a = simt_drain(s, x, 1, "sh", 1, 11, T0);
    ck_assert_int_eq(a.code, 0);
    simt_ack_free(&a);
    ck_assert_int_eq(simt_drain(s, x, 1, "sh", 1, 11, T0).code, BF_SIM_FAILED_PRECONDITION);
    /* with a fresh token the same replay is the idempotent no-op */
    a = simt_drain(s, x, 1, "sh", 1, 12, T0);
    ck_assert_int_eq(a.code, 0);
    simt_ack_free(&a);
    bf_sim_close(s);
}
END_TEST

START_TEST(b306_all_zero_token_bypasses_and_leaves_marks_alone)
{
    char x[128];
    struct bf_sim *s = simt_open_one_idle(x, sizeof x, T0);
    struct simt_ack a = simt_configure(s, x, "c", NULL, "sh", 7, 7, T0);
    simt_ack_free(&a);
    for (int i = 0; i < 3; i++) {
        a = simt_configure(s, x, "c", NULL, "", 0, 0, T0);
        ck_assert_int_eq(a.code, 0);
        simt_ack_free(&a);
    }
    ck_assert_int_eq(simt_configure(s, x, "c", NULL, "sh", 7, 7, T0).code,
                     BF_SIM_FAILED_PRECONDITION);
    /* an empty shard_id with a non-zero token is fenced under "" */
    a = simt_configure(s, x, "c", NULL, "", 1, 1, T0);
    ck_assert_int_eq(a.code, 0);
    simt_ack_free(&a);
    ck_assert_int_eq(simt_configure(s, x, "c", NULL, "", 1, 1, T0).code,
                     BF_SIM_FAILED_PRECONDITION);
    bf_sim_close(s);
}
END_TEST

START_TEST(b307_b308_session_tokens_advance_and_a_new_epoch_fences_the_old_one)
{
    struct bf_sim_config c;
    simt_cfg(&c);
    struct bf_sim *s = simt_open(&c);
    char x[128];
    simt_pick(s, BF_STATE_SPECULATIVE, 0, x, sizeof x, T0);
    int64_t seq = 0;
    struct simt_ack a = simt_create(s, x, "shard-0", 1, ++seq, T0);
    ck_assert_int_eq(a.code, 0);
    simt_ack_free(&a);
    a = simt_configure(s, x, "c", NULL, "shard-0", 1, ++seq, T0);
    ck_assert_int_eq(a.code, 0);
    simt_ack_free(&a);
    a = simt_drain(s, x, 1, "shard-0", 2, 1, T0); /* restarted shard: epoch 2, seq from 1 */
    ck_assert_int_eq(a.code, 0);
    simt_ack_free(&a);
    /* the zombie (epoch 1) is fenced even with a higher sequence number */
    ck_assert_int_eq(simt_configure(s, x, "z", NULL, "shard-0", 1, 1000, T0).code,
                     BF_SIM_FAILED_PRECONDITION);
    ck_assert_int_eq(simt_state(s, x, T0), BF_STATE_IDLE);
    bf_sim_close(s);
}
END_TEST

START_TEST(b309_a_passing_token_advances_the_mark_even_when_the_op_fails)
{
    struct bf_sim_config c;
    simt_cfg(&c);
    struct bf_sim *s = simt_open(&c);
    char x[128];
    simt_pick(s, BF_STATE_SPECULATIVE, 0, x, sizeof x, T0);
    ck_assert_int_eq(simt_drain(s, x, 1, "sh", 4, 4, T0).code, BF_SIM_INTERNAL);
    ck_assert_int_eq(simt_create(s, x, "sh", 4, 4, T0).code, BF_SIM_FAILED_PRECONDITION);
    struct simt_ack a = simt_create(s, x, "sh", 4, 5, T0);
    ck_assert_int_eq(a.code, 0);
    simt_ack_free(&a);
    bf_sim_close(s);
}
END_TEST

/* B310/B1201: a random token stream over several shards and machines matches
 * the oracle "accept iff strictly greater than the running max of
 * (shard, machine)"; FAILED_PRECONDITION never appears otherwise. */
START_TEST(b310_randomized_tokens_match_the_lexicographic_oracle)
{
    struct bf_sim *s = simt_open_idle(1);
    enum { NS = 3, NM = 4 };
    char ids[NM][128];
    for (int m = 0; m < NM - 1; m++)
        simt_pick(s, BF_STATE_IDLE, m, ids[m], 128, T0);
    snprintf(ids[NM - 1], 128, "ghost-oracle");
    const char *shards[NS] = {"s-a", "s-b", "s-c"};
    int64_t me[NS][NM], mq[NS][NM];
    bool seen[NS][NM] = {{false}};
    uint64_t x = 0x1234567;
    for (int i = 0; i < 4000; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        int sh = (int)((x >> 33) % NS), m = (int)((x >> 40) % NM);
        int64_t e = (int64_t)((x >> 20) % 4), q = (int64_t)((x >> 10) % 50);
        int kind = (int)((x >> 50) % 4);
        struct simt_ack a;
        if (kind == 0)
            a = simt_create(s, ids[m], shards[sh], e, q, T0);
        else if (kind == 1)
            a = simt_configure(s, ids[m], "c", NULL, shards[sh], e, q, T0);
        else if (kind == 2)
            a = simt_drain(s, ids[m], 0, shards[sh], e, q, T0);
        else
            a = simt_delete(s, ids[m], shards[sh], e, q, T0);
        bool pass = !seen[sh][m] || e > me[sh][m] || (e == me[sh][m] && q > mq[sh][m]);
        if (pass) {
            ck_assert_msg(a.code != BF_SIM_FAILED_PRECONDITION, "step %d fenced a newer token", i);
            seen[sh][m] = true;
            me[sh][m] = e;
            mq[sh][m] = q;
        } else {
            ck_assert_msg(a.code == BF_SIM_FAILED_PRECONDITION, "step %d: stale token got %d", i,
                          a.code);
        }
        simt_ack_free(&a);
    }
    bf_sim_close(s);
}
END_TEST

/* ------------------------------------------------------------ idempotency (B40x) */

START_TEST(b401_b406_repeated_identical_calls_collapse_to_one_operation)
{
    struct bf_sim_config c;
    simt_cfg(&c);
    for (int k = 0; k < BF_SIM_KIND_COUNT; k++)
        c.transition_latency[k] = (struct bf_sim_dist){BF_SIM_DIST_UNIFORM, 1 * SEC, 3 * SEC};
    struct bf_sim *s = simt_open(&c);
    enum { K = 6, N = 8 };
    char ids[K][128];
    for (int m = 0; m < K; m++)
        simt_pick(s, BF_STATE_SPECULATIVE, m, ids[m], 128, T0);
    int64_t seq = 0, now = T0;
    char ops[K][64];
    /* N retries per machine, interleaved across machines, each re-stamped */
    for (int r = 0; r < N; r++) {
        for (int m = 0; m < K; m++) {
            struct simt_ack a = simt_create(s, ids[m], "shard", 1, ++seq, now);
            ck_assert_int_eq(a.code, 0);
            if (r == 0)
                snprintf(ops[m], 64, "%s", a.op);
            ck_assert_str_eq(a.op, ops[m]);
            ck_assert(a.state == BF_STATE_CREATING || a.state == BF_STATE_IDLE);
            simt_ack_free(&a);
        }
        now += 500 * MS;
    }
    for (int m = 0; m < K; m++)
        for (int j = 0; j < m; j++)
            ck_assert_str_ne(ops[m], ops[j]); /* B405: no cross-talk */
    struct bf_sim_stats st;
    bf_sim_get_stats(s, &st);
    ck_assert_uint_eq(st.accepted[BF_SIM_RPC_CREATE], K);
    bf_sim_advance(s, now + 10 * SEC);
    bf_sim_get_stats(s, &st);
    ck_assert_uint_eq(st.completed[BF_SIM_RPC_CREATE], K); /* target reached once each */
    bf_sim_close(s);
}
END_TEST

START_TEST(b402_configure_and_drain_race_serializes_to_a_stable_state)
{
    struct bf_sim_config c;
    simt_cfg(&c);
    c.seed_idle = 1;
    c.transition_latency[BF_SIM_RPC_CONFIGURE] = (struct bf_sim_dist){0, 2 * SEC, 0};
    c.transition_latency[BF_SIM_RPC_DRAIN] = (struct bf_sim_dist){0, 2 * SEC, 0};
    struct bf_sim *s = simt_open(&c);
    char x[128];
    simt_pick(s, BF_STATE_IDLE, 0, x, sizeof x, T0);
    int64_t now = T0;
    int outcomes[2] = {0};
    for (int i = 0; i < 20; i++) {
        struct simt_ack a = simt_configure(s, x, "c", NULL, "", 0, 0, now);
        struct simt_ack d = simt_drain(s, x, 0, "", 0, 0, now + 1);
        ck_assert(a.code == 0 || a.code == BF_SIM_INTERNAL);
        ck_assert(d.code == 0 || d.code == BF_SIM_INTERNAL);
        ck_assert(a.code != BF_SIM_FAILED_PRECONDITION && d.code != BF_SIM_FAILED_PRECONDITION);
        outcomes[d.code == 0]++;
        simt_ack_free(&a);
        simt_ack_free(&d);
        now += 3 * SEC;
        int st = simt_state(s, x, now);
        ck_assert(st == BF_STATE_CONFIGURED || st == BF_STATE_IDLE);
        now += 3 * SEC;
    }
    ck_assert_int_gt(outcomes[0] + outcomes[1], 0);
    bf_sim_close(s);
}
END_TEST

START_TEST(b403_zombie_and_live_interleavings_live_always_wins)
{
    struct bf_sim_config c;
    simt_cfg(&c);
    c.seed_configured = 1;
    struct bf_sim *s = simt_open(&c);
    char x[128];
    simt_pick(s, BF_STATE_CONFIGURED, 0, x, sizeof x, T0);
    int64_t zseq = 100, lseq = 0;
    struct simt_ack a = simt_drain(s, x, 0, "shard-1", 1, zseq++, T0); /* zombie's last good op */
    ck_assert_int_eq(a.code, 0);
    simt_ack_free(&a);
    for (int i = 0; i < 30; i++) {
        int kind = i % 2;
        struct simt_ack live = kind ? simt_drain(s, x, 0, "shard-1", 2, ++lseq, T0)
                                    : simt_configure(s, x, "live", NULL, "shard-1", 2, ++lseq, T0);
        ck_assert_int_ne(live.code, BF_SIM_FAILED_PRECONDITION);
        simt_ack_free(&live);
        struct simt_ack z = simt_configure(s, x, "zombie", NULL, "shard-1", 1, zseq++, T0);
        ck_assert_int_eq(z.code, BF_SIM_FAILED_PRECONDITION);
    }
    int code;
    PbMachine *m = simt_get(s, x, T0, &code);
    ck_assert(strcmp(m->cluster, "zombie") != 0);
    simt_free_machine(m);
    bf_sim_close(s);
}
END_TEST

START_TEST(b409_acks_during_a_burst_are_never_torn)
{
    struct bf_sim_config c;
    simt_cfg(&c);
    c.seed_speculative = 40;
    c.transition_latency[BF_SIM_RPC_CREATE] = (struct bf_sim_dist){BF_SIM_DIST_UNIFORM, 0, 2 * SEC};
    c.transition_latency[BF_SIM_RPC_CONFIGURE] =
        (struct bf_sim_dist){BF_SIM_DIST_UNIFORM, 0, 2 * SEC};
    struct bf_sim *s = simt_open(&c);
    size_t n = bf_sim_machine_count(s);
    int64_t now = T0;
    const char *md[] = {"k", "v", NULL};
    for (int round = 0; round < 6; round++) {
        for (size_t i = 0; i < n; i++) {
            const char *id = bf_sim_machine_id(s, i);
            struct simt_ack a = round % 2 ? simt_configure(s, id, "c", md, "", 0, 0, now)
                                          : simt_create(s, id, "", 0, 0, now);
            if (a.code == 0) {
                const PbMachine *m = a.ack->machine;
                struct bf_invariant_input in = {
                    .state = m->state,
                    .host_set = m->host && (m->host->ref[0] || m->host->provider[0]),
                    .cluster_set = m->cluster[0] != 0,
                    .has_id = m->id[0] != 0,
                    .has_last_error = m->last_error[0] != 0,
                    .price_per_hour = m->price_per_hour,
                    .interruption_probability = m->interruption_probability};
                char why[128];
                ck_assert_msg(bf_machine_invariant(&in, why, sizeof why) == BF_REJECT_NONE,
                              "torn ack for %s: %s", id, why);
                ck_assert_str_eq(m->id, id);
            }
            simt_ack_free(&a);
            now += 37 * MS;
        }
    }
    bf_sim_close(s);
}
END_TEST

/* ------------------------------------------------------------ metadata (B50x) */

static size_t hostile(struct simt_kv *md, char bufs[][2][64])
{
#define KV(k, v)                                                                                   \
    {                                                                                              \
        k, sizeof(k) - 1, v, sizeof(v) - 1                                                         \
    }
    static const struct {
        const char *k;
        size_t kl;
        const char *v;
        size_t vl;
    } fixed[] = {
        KV("bigfleet.lucy.sh/assigned-priority", "1000000"),
        KV("bigfleet.lucy.sh/assigned-group", "topology.bigfleet/rack\0gang-7"),
        KV("x-unicode/value",
           "\xcf\x80\xce\xb1\xce\xbd \xe2\x80\x94 \xe4\xbd\xa0 \xf0\x9f\x9a\x80\t\n"),
        KV("x-empty/value", ""),
        KV("x-control/value", "\0\x01\x02\x1f\x7f"),
        KV("x-c1-control/value", "\xc2\x80\xc2\x9f"),
        KV("x-nul-only/value", "\0"),
        KV("x-trailing-space/value", "padded   "),
        KV("x-key-with-nul\0suffix", "key itself carries a NUL byte"),
        KV("x-mixed/value", "a\0b\x01"
                            "c\t\xcf\x80\n"),
    };
#undef KV
    size_t n = 0;
    for (; n < sizeof fixed / sizeof fixed[0]; n++)
        md[n] = (struct simt_kv){(const uint8_t *)fixed[n].k, fixed[n].kl,
                                 (const uint8_t *)fixed[n].v, fixed[n].vl};
    for (; n < 55; n++) {
        int kl = snprintf(bufs[n][0], 64, "x-bulk/key-%03zu-\xcf\x80", n);
        int vl = snprintf(bufs[n][1], 64, "v-%zu-X-\xe4\xbd\xa0", n);
        bufs[n][1][vl - 5] = 0; /* embedded NUL in place of X */
        md[n] = (struct simt_kv){(const uint8_t *)bufs[n][0], (size_t)kl,
                                 (const uint8_t *)bufs[n][1], (size_t)vl};
    }
    return n;
}

START_TEST(b501_hostile_55_key_map_is_echoed_byte_for_byte_on_get_list_and_ack)
{
    char x[128];
    struct bf_sim *s = simt_open_one_idle(x, sizeof x, T0);
    struct simt_kv md[55];
    char bufs[55][2][64];
    size_t n = hostile(md, bufs);
    ck_assert_uint_eq(n, 55);
    struct bf_sim_reply r = simt_configure_md(s, x, "conf-b501", md, n, 8, T0);
    ck_assert_int_eq(r.code, 0);
    /* the ack's Machine is field 2 of the TransitionAck: read it raw */
    struct simt_span ack[2];
    ck_assert_uint_eq(simt_ld_fields(r.body, r.len, 2, ack, 2), 1);
    ck_assert(simt_md_equal(ack[0].p, ack[0].len, md, n));
    for (int i = 0; i < 4; i++) {
        bf_sim_reply_free(&r);
        r = simt_get_raw(s, x, T0 + i);
        ck_assert_int_eq(r.code, 0);
        ck_assert(simt_md_equal(r.body, r.len, md, n));
    }
    /* List(CONFIGURED): find the machine and check its bytes */
    struct simt_buf lf = {0};
    simt_varint(&lf, 1 << 3 | 0);
    simt_varint(&lf, BF_STATE_CONFIGURED);
    struct bf_sim_reply lr = {0};
    bf_sim_handle(s, BF_SIM_RPC_LIST, lf.p, lf.len, T0, &lr);
    ck_assert_int_eq(lr.code, 0);
    struct simt_span ms[8]; /* the List's machines: field 1 */
    size_t nm = simt_ld_fields(lr.body, lr.len, 1, ms, 8);
    int found = 0;
    for (size_t i = 0; i < nm; i++) {
        PbMachine *m = bigfleet__v1alpha1__machine__unpack(NULL, ms[i].len, ms[i].p);
        if (!strcmp(m->id, x)) {
            found++;
            ck_assert(simt_md_equal(ms[i].p, ms[i].len, md, n));
        }
        simt_free_machine(m);
    }
    ck_assert_int_eq(found, 1);
    free(lf.p);
    bf_sim_reply_free(&r);
    bf_sim_reply_free(&lr);
    bf_sim_close(s);
}
END_TEST

START_TEST(b502_metadata_and_cluster_clear_at_drain_and_a_rebind_shows_no_old_key)
{
    char x[128];
    struct bf_sim *s = simt_open_one_idle(x, sizeof x, T0);
    struct simt_kv old[3] = {{(const uint8_t *)"old.key/a", 9, (const uint8_t *)"1", 1},
                             {(const uint8_t *)"old.key/b", 9, (const uint8_t *)"2", 1},
                             {(const uint8_t *)"old.key/nul", 11, (const uint8_t *)"x\0y", 3}};
    struct simt_buf b = simt_configure_raw(x, "conf-b502-old", old, 3, 0);
    struct bf_sim_reply r = {0};
    bf_sim_handle(s, BF_SIM_RPC_CONFIGURE, b.p, b.len, T0, &r);
    ck_assert_int_eq(r.code, 0);
    free(b.p);
    struct simt_ack d = simt_drain(s, x, 5, "", 0, 0, T0);
    ck_assert_int_eq(d.state, BF_STATE_IDLE);
    ck_assert_uint_eq(d.ack->machine->n_shard_metadata, 0);
    ck_assert_str_eq(d.ack->machine->cluster, "");
    simt_ack_free(&d);
    struct simt_kv fresh[2] = {{(const uint8_t *)"new.key/x", 9, (const uint8_t *)"10", 2},
                               {(const uint8_t *)"new.key/y", 9, (const uint8_t *)"20", 2}};
    b = simt_configure_raw(x, "conf-b502-new", fresh, 2, 0);
    bf_sim_handle(s, BF_SIM_RPC_CONFIGURE, b.p, b.len, T0, &r);
    ck_assert_int_eq(r.code, 0);
    free(b.p);
    bf_sim_reply_free(&r);
    r = simt_get_raw(s, x, T0);
    ck_assert(simt_md_equal(r.body, r.len, fresh, 2));
    bf_sim_reply_free(&r);
    bf_sim_close(s);
}
END_TEST

START_TEST(b504_metadata_is_visible_during_configuring)
{
    struct bf_sim_config c;
    simt_cfg(&c);
    c.seed_idle = 1;
    c.transition_latency[BF_SIM_RPC_CONFIGURE] = (struct bf_sim_dist){0, 10 * SEC, 0};
    struct bf_sim *s = simt_open(&c);
    char x[128];
    simt_pick(s, BF_STATE_IDLE, 0, x, sizeof x, T0);
    struct simt_kv md[3] = {
        {(const uint8_t *)"b504/early", 10, (const uint8_t *)"must-be-visible-mid-flight", 26},
        {(const uint8_t *)"b504/nul", 8, (const uint8_t *)"x\0y", 3},
        {(const uint8_t *)"b504/unicode", 12, (const uint8_t *)"\xe4\xbd\xa0\xf0\x9f\x9a\x80", 7}};
    struct bf_sim_reply r = simt_configure_md(s, x, "conf-b504", md, 3, 0, T0);
    ck_assert_int_eq(r.code, 0);
    bf_sim_reply_free(&r);
    r = simt_get_raw(s, x, T0 + 5 * SEC);
    PbMachine *m = bigfleet__v1alpha1__machine__unpack(NULL, r.len, r.body);
    ck_assert_int_eq(m->state, BF_STATE_CONFIGURING);
    simt_free_machine(m);
    ck_assert(simt_md_equal(r.body, r.len, md, 3));
    bf_sim_reply_free(&r);
    r = simt_get_raw(s, x, T0 + 10 * SEC);
    m = bigfleet__v1alpha1__machine__unpack(NULL, r.len, r.body);
    ck_assert_int_eq(m->state, BF_STATE_CONFIGURED);
    simt_free_machine(m);
    ck_assert(simt_md_equal(r.body, r.len, md, 3));
    bf_sim_reply_free(&r);
    bf_sim_close(s);
}
END_TEST

START_TEST(b505_the_stored_copy_does_not_alias_the_callers_buffers)
{
    char x[128];
    struct bf_sim *s = simt_open_one_idle(x, sizeof x, T0);
    char k1[] = "b505/keep", v1[] = "original-value", k2[] = "b505/mutate",
         v2[] = "before-mutation";
    struct simt_kv md[2] = {{(const uint8_t *)k1, 9, (const uint8_t *)v1, 14},
                            {(const uint8_t *)k2, 11, (const uint8_t *)v2, 15}};
    struct simt_kv orig[2] = {
        {(const uint8_t *)"b505/keep", 9, (const uint8_t *)"original-value", 14},
        {(const uint8_t *)"b505/mutate", 11, (const uint8_t *)"before-mutation", 15}};
    struct simt_buf b = simt_configure_raw(x, "conf-b505", md, 2, 0);
    struct bf_sim_reply r = {0};
    bf_sim_handle(s, BF_SIM_RPC_CONFIGURE, b.p, b.len, T0, &r);
    ck_assert_int_eq(r.code, 0);
    memset(b.p, 'Z', b.len); /* scribble over the request bytes */
    free(b.p);
    memcpy(v2, "AFTER-MUTATION!", 15);
    bf_sim_reply_free(&r);
    r = simt_get_raw(s, x, T0);
    ck_assert(simt_md_equal(r.body, r.len, orig, 2));
    bf_sim_reply_free(&r);
    bf_sim_close(s);
}
END_TEST

START_TEST(duplicate_metadata_keys_resolve_last_wins)
{
    char x[128];
    struct bf_sim *s = simt_open_one_idle(x, sizeof x, T0);
    struct simt_kv md[3] = {{(const uint8_t *)"k", 1, (const uint8_t *)"first", 5},
                            {(const uint8_t *)"j", 1, (const uint8_t *)"", 0},
                            {(const uint8_t *)"k", 1, (const uint8_t *)"second", 6}};
    struct bf_sim_reply r = simt_configure_md(s, x, "c", md, 3, 0, T0);
    bf_sim_reply_free(&r);
    r = simt_get_raw(s, x, T0);
    struct simt_kv want[2] = {md[1], md[2]};
    ck_assert(simt_md_equal(r.body, r.len, want, 2));
    bf_sim_reply_free(&r);
    bf_sim_close(s);
}
END_TEST

/* ------------------------------------------------------------ field shape (B80x) */

static const char *const leak_keys[] = {"instance-type", "instance_type",     "instanceType",
                                        "zone",          "availability-zone", "availability_zone",
                                        "capacity-type", "capacity_type",     "capacityType"};

static void check_shape(const PbMachine *m)
{
    ck_assert(m->id[0]);
    ck_assert_int_ne(m->state, 0);
    ck_assert(m->instance_type[0]);
    for (size_t i = 0; i < m->n_labels; i++)
        for (size_t k = 0; k < sizeof leak_keys / sizeof leak_keys[0]; k++)
            ck_assert_str_ne(m->labels[i]->key, leak_keys[k]);
    ck_assert(isfinite(m->price_per_hour) && m->price_per_hour >= 0);
    ck_assert(m->interruption_probability >= 0 && m->interruption_probability <= 1);
    if (m->capacity_type == BIGFLEET__V1ALPHA1__CAPACITY_TYPE__CAPACITY_TYPE_SPOT)
        ck_assert(m->interruption_probability > 0);
    bool host = m->host && (m->host->ref[0] || m->host->provider[0]);
    switch (m->state) {
    case BF_STATE_SPECULATIVE:
        ck_assert(!host);
        ck_assert_str_eq(m->cluster, "");
        ck_assert_uint_eq(m->n_shard_metadata, 0);
        break;
    case BF_STATE_IDLE:
        ck_assert(host);
        ck_assert_str_eq(m->cluster, "");
        break;
    case BF_STATE_CONFIGURED:
        ck_assert(host);
        ck_assert(m->cluster[0]);
        break;
    default:
        break;
    }
    if (host && bf_state_is_stable(m->state)) {
        ck_assert_int_ne(m->capacity_type, 0);
        ck_assert(m->zone[0]);
    }
    /* resources always, allocatable with a host; both parse, resources > 0 */
    ck_assert_ptr_nonnull(m->resources);
    ck_assert_uint_gt(m->resources->n_resources, 0);
    if (host) {
        ck_assert_ptr_nonnull(m->allocatable);
        ck_assert_uint_eq(m->allocatable->n_resources, m->resources->n_resources);
    }
    for (size_t i = 0; i < m->resources->n_resources; i++) {
        int64_t v;
        const char *q = m->resources->resources[i]->value;
        ck_assert_int_eq(bf_quantity_parse(q, strlen(q), &v), 0);
        ck_assert_int_gt(v, 0);
        if (host) {
            int64_t a;
            const char *aq = m->allocatable->resources[i]->value;
            ck_assert_int_eq(bf_quantity_parse(aq, strlen(aq), &a), 0);
            ck_assert_int_ge(a, v); /* density floor >= 1 */
        }
    }
    struct bf_invariant_input in = {.state = m->state,
                                    .host_set = host,
                                    .cluster_set = m->cluster[0] != 0,
                                    .has_id = true,
                                    .has_last_error = m->last_error[0] != 0,
                                    .price_per_hour = m->price_per_hour,
                                    .interruption_probability = m->interruption_probability};
    ck_assert_int_eq(bf_machine_invariant(&in, NULL, 0), BF_REJECT_NONE);
}

START_TEST(b801_b806_every_machine_of_an_openb_pool_is_in_shape)
{
    struct bf_sim_config c;
    simt_cfg(&c);
    c.catalog_path = simt_openb_csv();
    c.spot_variants = true;
    c.seed_speculative = 3;
    c.seed_idle = 2;
    c.seed_configured = 2;
    c.seed_clusters = 3;
    struct bf_sim *s = simt_open(&c);
    PbList *l = simt_list_all(s, T0);
    ck_assert_uint_eq(l->n_machines, bf_sim_machine_count(s));
    bool saw_spot = false;
    for (size_t i = 0; i < l->n_machines; i++) {
        check_shape(l->machines[i]);
        saw_spot |=
            l->machines[i]->capacity_type == BIGFLEET__V1ALPHA1__CAPACITY_TYPE__CAPACITY_TYPE_SPOT;
    }
    ck_assert(saw_spot);
    simt_free_list(l);
    bf_sim_close(s);
}
END_TEST

START_TEST(b803_b805_b807_a_walked_machine_keeps_shape_and_host_provider_and_delete_clears)
{
    struct bf_sim_config c;
    simt_cfg(&c);
    c.provider_name = "sim-eu-1";
    struct bf_sim *s = simt_open(&c);
    char x[128];
    simt_pick(s, BF_STATE_SPECULATIVE, 0, x, sizeof x, T0);
    int code;
    PbMachine *m = simt_get(s, x, T0, &code);
    check_shape(m);
    simt_free_machine(m);
    struct simt_ack a = simt_create(s, x, "", 0, 0, T0);
    check_shape(a.ack->machine);
    ck_assert_str_eq(a.ack->machine->host->provider, "sim-eu-1");
    char ref[64];
    snprintf(ref, sizeof ref, "%s", a.ack->machine->host->ref);
    simt_ack_free(&a);
    const char *md[] = {"a", "1", "b", "2", NULL};
    a = simt_configure(s, x, "conf-b807", md, "", 0, 0, T0);
    check_shape(a.ack->machine);
    ck_assert_str_eq(a.ack->machine->host->provider, "sim-eu-1");
    ck_assert_str_eq(a.ack->machine->host->ref, ref);
    simt_ack_free(&a);
    PbList *l = simt_list_all(s, T0);
    for (size_t i = 0; i < l->n_machines; i++)
        if (!strcmp(l->machines[i]->id, x))
            ck_assert_str_eq(l->machines[i]->host->provider, "sim-eu-1");
    simt_free_list(l);
    a = simt_drain(s, x, 0, "", 0, 0, T0);
    check_shape(a.ack->machine);
    ck_assert_str_eq(a.ack->machine->host->ref, ref);
    simt_ack_free(&a);
    a = simt_delete(s, x, "", 0, 0, T0);
    check_shape(a.ack->machine);
    ck_assert_int_eq(a.state, BF_STATE_SPECULATIVE);
    ck_assert_ptr_null(a.ack->machine->host);
    ck_assert_str_eq(a.ack->machine->cluster, "");
    ck_assert_uint_eq(a.ack->machine->n_shard_metadata, 0);
    simt_ack_free(&a);
    /* a second Create gets a fresh host */
    a = simt_create(s, x, "", 0, 0, T0);
    ck_assert_str_ne(a.ack->machine->host->ref, ref);
    simt_ack_free(&a);
    bf_sim_close(s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("simprovider-contract");
    TCase *tc = tcase_create("lifecycle");
    tcase_add_test(tc, b101_instant_round_trips_return_to_clean_idle_and_speculative);
    tcase_add_test(tc, b102_staged_transitions_hold_their_transitional_state_until_due);
    tcase_add_test(tc, b103_cluster_is_bound_from_configuring_and_cleared_after_drain);
    tcase_add_test(tc, b104_settled_machines_never_reenter_a_transitional_state);
    suite_add_tcase(s, tc);
    tc = tcase_create("errors");
    tcase_add_test(tc, b201_b204_out_of_position_calls_are_internal_and_change_nothing);
    tcase_add_test(tc, b203_b204_at_target_after_a_prior_cycle_is_an_idempotent_no_op);
    tcase_add_test(tc, b205_b206_replays_at_target_reuse_the_original_operation_id);
    tcase_add_test(tc, b207_b215_unknown_ids_are_not_found_and_never_created);
    tcase_add_test(tc, b208_empty_ids_are_invalid_argument_before_anything);
    tcase_add_test(tc, configure_without_cluster_is_invalid_argument_and_leaves_idle);
    tcase_add_test(tc, b209_b503_large_metadata_is_echoed_verbatim_or_rejected_over_the_cap);
    tcase_add_test(tc, b210_negative_grace_is_accepted_and_settles_idle);
    tcase_add_test(tc, b211_b212_negative_and_int64_max_tokens_follow_plain_ordering);
    tcase_add_test(tc, b213_three_mib_bootstrap_blob_is_accepted);
    tcase_add_test(tc, b214_each_new_cycle_mints_a_fresh_operation_id);
    tcase_add_test(tc, delete_of_bare_metal_is_unimplemented_unless_allowed);
    tcase_add_test(tc,
                   malformed_requests_and_unknown_methods_map_to_invalid_argument_or_unimplemented);
    suite_add_tcase(s, tc);
    tc = tcase_create("fencing");
    tcase_add_test(tc, b301_fence_runs_before_not_found_and_marks_unknown_ids);
    tcase_add_test(tc, b302_marks_are_isolated_per_shard_and_per_machine);
    tcase_add_test(tc, b303_only_strictly_newer_tokens_pass_and_a_new_epoch_resets_seq);
    tcase_add_test(tc, b304_fenced_mutations_leave_get_and_list_untouched);
    tcase_add_test(tc, b305_fence_runs_before_the_idempotency_short_circuit);
    tcase_add_test(tc, b306_all_zero_token_bypasses_and_leaves_marks_alone);
    tcase_add_test(tc, b307_b308_session_tokens_advance_and_a_new_epoch_fences_the_old_one);
    tcase_add_test(tc, b309_a_passing_token_advances_the_mark_even_when_the_op_fails);
    tcase_add_test(tc, b310_randomized_tokens_match_the_lexicographic_oracle);
    suite_add_tcase(s, tc);
    tc = tcase_create("idempotency");
    tcase_add_test(tc, b401_b406_repeated_identical_calls_collapse_to_one_operation);
    tcase_add_test(tc, b402_configure_and_drain_race_serializes_to_a_stable_state);
    tcase_add_test(tc, b403_zombie_and_live_interleavings_live_always_wins);
    tcase_add_test(tc, b409_acks_during_a_burst_are_never_torn);
    suite_add_tcase(s, tc);
    tc = tcase_create("metadata");
    tcase_add_test(tc, b501_hostile_55_key_map_is_echoed_byte_for_byte_on_get_list_and_ack);
    tcase_add_test(tc, b502_metadata_and_cluster_clear_at_drain_and_a_rebind_shows_no_old_key);
    tcase_add_test(tc, b504_metadata_is_visible_during_configuring);
    tcase_add_test(tc, b505_the_stored_copy_does_not_alias_the_callers_buffers);
    tcase_add_test(tc, duplicate_metadata_keys_resolve_last_wins);
    suite_add_tcase(s, tc);
    tc = tcase_create("fieldshape");
    tcase_add_test(tc, b801_b806_every_machine_of_an_openb_pool_is_in_shape);
    tcase_add_test(tc,
                   b803_b805_b807_a_walked_machine_keeps_shape_and_host_provider_and_delete_clears);
    suite_add_tcase(s, tc);
    return check_run(s);
}
