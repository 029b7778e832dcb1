/*
 * test_simprovider_knobs.c — the simulation knobs: transition latency
 * distributions, zero-latency modes, per-kind failure probability with late
 * completions discarded, Create capacity exhaustion (global and per type),
 * spot interruptions (Poisson), reply latency and injected UNAVAILABLE, the
 * timer deadline, determinism from the seed, and configuration parsing.
 */
#include <math.h>

#include "simprovider/sim_internal.h"
#include "test_simprovider.h"

static struct bf_sim *pool(struct bf_sim_config *c)
{
    return simt_open(c);
}

START_TEST(fixed_latency_completes_exactly_at_the_deadline)
{
    struct bf_sim_config c;
    simt_cfg(&c);
    ck_assert_int_eq(bf_sim_dist_parse("2500ms", &c.transition_latency[BF_SIM_RPC_CREATE]), 0);
    struct bf_sim *s = pool(&c);
    const char *id = bf_sim_machine_id(s, 0);
    struct simt_ack a = simt_create(s, id, "", 0, 0, T0);
    ck_assert_int_eq(a.state, BF_STATE_CREATING);
    ck_assert_ptr_null(a.ack->machine->host);
    simt_ack_free(&a);
    ck_assert_int_eq(bf_sim_next_deadline(s), T0 + 2500 * MS);
    ck_assert_int_eq(bf_sim_advance(s, T0 + 2500 * MS - 1), 0);
    struct bf_sim_view v;
    bf_sim_lookup(s, id, &v);
    ck_assert_int_eq(v.state, BF_STATE_CREATING);
    ck_assert_int_eq(bf_sim_advance(s, T0 + 2500 * MS), 1);
    bf_sim_lookup(s, id, &v);
    ck_assert_int_eq(v.state, BF_STATE_IDLE);
    ck_assert(v.has_host);
    ck_assert_int_eq(bf_sim_next_deadline(s), INT64_MAX);
    bf_sim_close(s);
}
END_TEST

START_TEST(uniform_and_normal_latencies_stay_in_range_and_spread)
{
    struct bf_sim_config c;
    simt_cfg(&c);
    c.seed_speculative = 200;
    ck_assert_int_eq(bf_sim_dist_parse("uniform(1s,3s)", &c.transition_latency[0]), 0);
    ck_assert_int_eq(bf_sim_dist_parse("normal(2s, 500ms)", &c.transition_latency[1]), 0);
    c.seed_idle = 0;
    struct bf_sim *s = pool(&c);
    size_t n = bf_sim_machine_count(s);
    for (size_t i = 0; i < n; i++) {
        struct simt_ack a = simt_create(s, bf_sim_machine_id(s, i), "", 0, 0, T0);
        simt_ack_free(&a);
    }
    /* walk time forward 10 ms at a time and record completion times */
    double sum = 0, mn = 1e18, mx = 0;
    size_t done = 0;
    for (int64_t t = T0; t <= T0 + 4 * SEC; t += 10 * MS) {
        int k = bf_sim_advance(s, t);
        for (int j = 0; j < k; j++) {
            double d = (double)(t - T0) / 1e9;
            sum += d;
            mn = d < mn ? d : mn;
            mx = d > mx ? d : mx;
        }
        done += (size_t)k;
    }
    ck_assert_uint_eq(done, n);
    ck_assert(mn >= 1.0 && mx <= 3.01);
    ck_assert(mx - mn > 1.5);                      /* spread over the interval */
    ck_assert(fabs(sum / (double)n - 2.0) < 0.15); /* mean of U(1,3) */
    /* normal(2s, 0.5s) for Configure */
    double s1 = 0, s2 = 0;
    done = 0;
    int64_t t1 = T0 + 10 * SEC;
    for (size_t i = 0; i < n; i++) {
        struct simt_ack a = simt_configure(s, bf_sim_machine_id(s, i), "c", NULL, "", 0, 0, t1);
        simt_ack_free(&a);
    }
    for (int64_t t = t1; t <= t1 + 6 * SEC; t += 10 * MS) {
        int k = bf_sim_advance(s, t);
        for (int j = 0; j < k; j++) {
            double d = (double)(t - t1) / 1e9;
            s1 += d;
            s2 += d * d;
        }
        done += (size_t)k;
    }
    ck_assert_uint_eq(done, n);
    double mean = s1 / (double)n, sd = sqrt(s2 / (double)n - mean * mean);
    ck_assert_msg(fabs(mean - 2.0) < 0.15 && fabs(sd - 0.5) < 0.15, "mean %f sd %f", mean, sd);
    bf_sim_close(s);
}
END_TEST

START_TEST(normal_latency_is_clamped_at_zero)
{
    struct bf_sim_config c;
    simt_cfg(&c);
    c.seed_speculative = 100;
    c.transition_latency[0] = (struct bf_sim_dist){BF_SIM_DIST_NORMAL, 0, 5 * SEC};
    c.defer_instant = true;
    struct bf_sim *s = pool(&c);
    size_t n = bf_sim_machine_count(s);
    for (size_t i = 0; i < n; i++) {
        struct simt_ack a = simt_create(s, bf_sim_machine_id(s, i), "", 0, 0, T0);
        simt_ack_free(&a);
    }
    /* about half the draws are negative: clamped to 0, so due at T0 (each
     * call advances first, and this advance catches the last one) */
    bf_sim_advance(s, T0);
    size_t idle = bf_sim_count_in_state(s, BF_STATE_IDLE);
    ck_assert_uint_gt(idle, n / 4);
    ck_assert_uint_lt(idle, 3 * n / 4);
    ck_assert_uint_eq(idle + bf_sim_count_in_state(s, BF_STATE_CREATING), n);
    for (int64_t t = T0; bf_sim_next_deadline(s) != INT64_MAX; t += SEC)
        bf_sim_advance(s, t);
    ck_assert_uint_eq(bf_sim_count_in_state(s, BF_STATE_IDLE), n);
    bf_sim_close(s);
}
END_TEST

START_TEST(instant_by_default_and_deferred_zero_latency_completes_at_the_next_advance)
{
    struct bf_sim_config c;
    simt_cfg(&c);
    struct bf_sim *s = pool(&c);
    struct simt_ack a = simt_create(s, bf_sim_machine_id(s, 0), "", 0, 0, T0);
    ck_assert_int_eq(a.state, BF_STATE_IDLE);
    simt_ack_free(&a);
    bf_sim_close(s);
    c.defer_instant = true;
    s = pool(&c);
    const char *id = bf_sim_machine_id(s, 0);
    a = simt_create(s, id, "", 0, 0, T0);
    ck_assert_int_eq(a.state, BF_STATE_CREATING);
    simt_ack_free(&a);
    ck_assert_int_eq(bf_sim_next_deadline(s), T0);
    ck_assert_int_eq(simt_state(s, id, T0), BF_STATE_IDLE); /* the next call advances */
    bf_sim_close(s);
}
END_TEST

START_TEST(failure_probability_ends_transitions_failed_with_a_last_error)
{
    struct bf_sim_config c;
    simt_cfg(&c);
    c.seed_speculative = 400;
    c.transition_failure[BF_SIM_RPC_CREATE] = 0.3;
    c.transition_failure[BF_SIM_RPC_CONFIGURE] = 1.0;
    struct bf_sim *s = pool(&c);
    size_t n = bf_sim_machine_count(s), failed = 0;
    for (size_t i = 0; i < n; i++) {
        struct simt_ack a = simt_create(s, bf_sim_machine_id(s, i), "", 0, 0, T0);
        ck_assert_int_eq(a.code, 0);
        if (a.state == BF_STATE_FAILED) {
            failed++;
            ck_assert_str_eq(a.ack->machine->last_error, "create failed: simulated provider error");
            ck_assert_ptr_null(a.ack->machine->host);
        } else {
            ck_assert_int_eq(a.state, BF_STATE_IDLE);
        }
        simt_ack_free(&a);
    }
    double rate = (double)failed / (double)n;
    ck_assert_msg(rate > 0.25 && rate < 0.35, "failure rate %f", rate); /* n=2000: sd 0.01 */
    ck_assert_uint_eq(bf_sim_hosts_in_use(s), n - failed);
    char idle[128];
    simt_pick(s, BF_STATE_IDLE, 0, idle, sizeof idle, T0);
    struct simt_ack a = simt_configure(s, idle, "c", NULL, "", 0, 0, T0);
    ck_assert_int_eq(a.state, BF_STATE_FAILED);
    ck_assert_str_eq(a.ack->machine->last_error, "configure failed: simulated provider error");
    ck_assert_str_eq(a.ack->machine->cluster, "c"); /* evidence kept */
    simt_ack_free(&a);
    /* FAILED is terminal: every mutation is rejected, never FAILED_PRECONDITION */
    ck_assert_int_eq(simt_configure(s, idle, "c", NULL, "", 0, 0, T0).code, BF_SIM_INTERNAL);
    ck_assert_int_eq(simt_drain(s, idle, 0, "", 0, 0, T0).code, BF_SIM_INTERNAL);
    ck_assert_int_eq(simt_delete(s, idle, "", 0, 0, T0).code, BF_SIM_INTERNAL);
    ck_assert_int_eq(simt_create(s, idle, "", 0, 0, T0).code, BF_SIM_INTERNAL);
    bf_sim_close(s);
}
END_TEST

START_TEST(late_completion_after_failed_is_discarded)
{
    struct bf_sim_config c;
    simt_cfg(&c);
    c.seed_idle = 1;
    c.transition_latency[BF_SIM_RPC_CONFIGURE] = (struct bf_sim_dist){0, 5 * SEC, 0};
    struct bf_sim *s = pool(&c);
    char x[128];
    simt_pick(s, BF_STATE_IDLE, 0, x, sizeof x, T0);
    struct simt_ack a = simt_configure(s, x, "c", NULL, "", 0, 0, T0);
    ck_assert_int_eq(a.state, BF_STATE_CONFIGURING);
    simt_ack_free(&a);
    ck_assert_int_eq(bf_sim_fail_machine(s, x, "actuator error: boom", T0 + SEC), 0);
    ck_assert_int_eq(bf_sim_advance(s, T0 + 10 * SEC), 0);
    struct bf_sim_view v;
    bf_sim_lookup(s, x, &v);
    ck_assert_int_eq(v.state, BF_STATE_FAILED);
    ck_assert_str_eq(v.last_error, "actuator error: boom");
    struct bf_sim_stats st;
    bf_sim_get_stats(s, &st);
    ck_assert_uint_eq(st.discarded, 1);
    ck_assert_uint_eq(st.completed[BF_SIM_RPC_CONFIGURE], 0);
    /* fail_machine is idempotent and keeps the first reason */
    ck_assert_int_eq(bf_sim_fail_machine(s, x, "second", T0 + 11 * SEC), 0);
    bf_sim_lookup(s, x, &v);
    ck_assert_str_eq(v.last_error, "actuator error: boom");
    ck_assert_int_eq(bf_sim_fail_machine(s, "nope", "x", T0), -ENOENT);
    bf_sim_close(s);
}
END_TEST

START_TEST(global_host_cap_exhausts_create_and_delete_frees_capacity)
{
    struct bf_sim_config c;
    simt_cfg(&c);
    c.seed_idle = 1; /* 5 types x 1 Idle = 5 hosts held */
    c.max_hosts = 7;
    struct bf_sim *s = pool(&c);
    ck_assert_uint_eq(bf_sim_hosts_in_use(s), 5);
    char a1[128], a2[128], a3[128];
    simt_pick(s, BF_STATE_SPECULATIVE, 0, a1, sizeof a1, T0);
    simt_pick(s, BF_STATE_SPECULATIVE, 1, a2, sizeof a2, T0);
    simt_pick(s, BF_STATE_SPECULATIVE, 2, a3, sizeof a3, T0);
    struct simt_ack a = simt_create(s, a1, "", 0, 0, T0);
    ck_assert_int_eq(a.state, BF_STATE_IDLE);
    simt_ack_free(&a);
    a = simt_create(s, a2, "", 0, 0, T0);
    ck_assert_int_eq(a.state, BF_STATE_IDLE);
    simt_ack_free(&a);
    a = simt_create(s, a3, "", 0, 0, T0);
    ck_assert_int_eq(a.code, 0); /* accepted, then fails like a cloud out of stock */
    ck_assert_int_eq(a.state, BF_STATE_FAILED);
    ck_assert_ptr_nonnull(strstr(a.ack->machine->last_error, "insufficient capacity"));
    simt_ack_free(&a);
    ck_assert_uint_eq(bf_sim_hosts_in_use(s), 7);
    a = simt_delete(s, a1, "", 0, 0, T0);
    ck_assert_int_eq(a.state, BF_STATE_SPECULATIVE);
    simt_ack_free(&a);
    ck_assert_uint_eq(bf_sim_hosts_in_use(s), 6);
    char a4[128];
    simt_pick(s, BF_STATE_SPECULATIVE, 5, a4, sizeof a4, T0);
    a = simt_create(s, a4, "", 0, 0, T0);
    ck_assert_int_eq(a.state, BF_STATE_IDLE);
    simt_ack_free(&a);
    struct bf_sim_stats st;
    bf_sim_get_stats(s, &st);
    ck_assert_uint_eq(st.exhausted, 1);
    bf_sim_close(s);
}
END_TEST

START_TEST(per_type_host_cap_exhausts_only_that_type)
{
    struct bf_sim_type t[2] = {{"small", 2000, 8192, 0, "", BF_CT_ON_DEMAND, 0.1, 0, 0},
                               {"big", 32000, 131072, 0, "", BF_CT_ON_DEMAND, 1.5, 0, 0}};
    struct bf_sim_config c;
    simt_cfg(&c);
    c.types = t;
    c.n_types = 2;
    c.seed_speculative = 4;
    c.max_hosts_per_type = 2;
    c.transition_latency[BF_SIM_RPC_CREATE] = (struct bf_sim_dist){0, SEC, 0};
    struct bf_sim *s = pool(&c);
    int idle[2] = {0}, failed[2] = {0};
    for (size_t i = 0; i < bf_sim_machine_count(s); i++) {
        struct simt_ack a = simt_create(s, bf_sim_machine_id(s, i), "", 0, 0, T0);
        ck_assert_int_eq(a.state, BF_STATE_CREATING); /* in-flight Creates count against the cap */
        simt_ack_free(&a);
    }
    bf_sim_advance(s, T0 + SEC);
    for (size_t i = 0; i < bf_sim_machine_count(s); i++) {
        struct bf_sim_view v;
        bf_sim_lookup(s, bf_sim_machine_id(s, i), &v);
        int ti = !strcmp(v.type->name, "big");
        if (v.state == BF_STATE_IDLE)
            idle[ti]++;
        else if (v.state == BF_STATE_FAILED)
            failed[ti]++;
    }
    ck_assert_int_eq(idle[0], 2);
    ck_assert_int_eq(idle[1], 2);
    ck_assert_int_eq(failed[0], 2);
    ck_assert_int_eq(failed[1], 2);
    bf_sim_close(s);
}
END_TEST

static struct bf_sim *spot_pool(double rate, uint32_t idle, uint32_t conf)
{
    struct bf_sim_type t[2] = {{"od", 2000, 8192, 0, "", BF_CT_ON_DEMAND, 0.1, 0, 0},
                               {"od-spot", 2000, 8192, 0, "", BF_CT_SPOT, 0.035, 0.05, 0}};
    struct bf_sim_config c;
    simt_cfg(&c);
    c.types = t;
    c.n_types = 2;
    c.seed_speculative = 10;
    c.seed_idle = idle;
    c.seed_configured = conf;
    c.spot_interruption_rate = rate;
    return simt_open(&c);
}

START_TEST(spot_interruptions_hit_only_spot_idle_or_configured_machines)
{
    struct bf_sim *s = spot_pool(0.05, 500, 500);
    ck_assert_int_eq(bf_sim_advance(s, T0), 0); /* first sight of time: nothing elapsed */
    ck_assert_int_eq(bf_sim_next_deadline(s), T0 + SEC);
    int k = bf_sim_advance(s, T0 + 10 * SEC);
    /* one Poisson draw with lambda = 0.05 x 1000 eligible x 10 s = 500 (sd 22) */
    ck_assert_msg(k > 430 && k < 570, "interruptions %d", k);
    size_t n = bf_sim_machine_count(s);
    int spot_failed = 0;
    for (size_t i = 0; i < n; i++) {
        struct bf_sim_view v;
        bf_sim_lookup(s, bf_sim_machine_id(s, i), &v);
        if (v.state != BF_STATE_FAILED)
            continue;
        ck_assert_int_eq(v.type->capacity_type, BF_CT_SPOT);
        ck_assert_str_eq(v.last_error, "spot interruption: instance reclaimed by the provider");
        ck_assert(v.has_host);
        spot_failed++;
    }
    ck_assert_int_eq(spot_failed, k);
    ck_assert_uint_eq(bf_sim_count_in_state(s, BF_STATE_SPECULATIVE), 20); /* never touched */
    struct bf_sim_stats st;
    bf_sim_get_stats(s, &st);
    ck_assert_uint_eq(st.spot_interruptions, (uint64_t)k);
    bf_sim_close(s);
}
END_TEST

START_TEST(spot_interruption_counts_follow_poisson_mean_and_variance_for_large_lambda)
{
    /* 20000 eligible spot machines, rate 1e-3/s, 1 s steps: lambda 20 per step
     * (PTRS path), 40 steps; depletion is < 5% */
    struct bf_sim *s = spot_pool(1e-3, 10000, 10000);
    bf_sim_advance(s, T0);
    double sum = 0, sum2 = 0;
    int steps = 40;
    for (int i = 1; i <= steps; i++) {
        double k = bf_sim_advance(s, T0 + i * SEC);
        sum += k;
        sum2 += k * k;
    }
    double mean = sum / steps, var = sum2 / steps - mean * mean;
    ck_assert_msg(mean > 17 && mean < 22, "mean %f", mean);
    ck_assert_msg(var > 8 && var < 40, "variance %f", var);
    bf_sim_close(s);
}
END_TEST

START_TEST(zero_spot_rate_never_interrupts_and_sets_no_deadline)
{
    struct bf_sim *s = spot_pool(0, 100, 100);
    for (int i = 0; i < 100; i++)
        ck_assert_int_eq(bf_sim_advance(s, T0 + i * 60 * SEC), 0);
    ck_assert_int_eq(bf_sim_next_deadline(s), INT64_MAX);
    bf_sim_close(s);
}
END_TEST

START_TEST(reply_latency_and_injected_errors_have_no_side_effects)
{
    struct bf_sim_config c;
    simt_cfg(&c);
    ck_assert_int_eq(bf_sim_dist_parse("uniform(5ms,15ms)", &c.reply_latency[BF_SIM_RPC_GET]), 0);
    c.rpc_error[BF_SIM_RPC_CREATE] = 1.0;
    struct bf_sim *s = pool(&c);
    const char *id = bf_sim_machine_id(s, 0);
    int64_t rev = bf_sim_revision(s);
    struct simt_ack a = simt_create(s, id, "sh", 1, 1, T0);
    ck_assert_int_eq(a.code, BF_SIM_UNAVAILABLE);
    ck_assert_int_eq(bf_sim_revision(s), rev);
    /* the fence was not touched: the same token still passes once the knob is off */
    s->cfg.rpc_error[BF_SIM_RPC_CREATE] = 0;
    a = simt_create(s, id, "sh", 1, 1, T0);
    ck_assert_int_eq(a.code, 0);
    simt_ack_free(&a);
    for (int i = 0; i < 50; i++) {
        struct bf_sim_reply r = {0};
        bf_sim_get(s, (struct bf_sim_bytes){(const uint8_t *)id, strlen(id)}, T0, &r);
        ck_assert_int_eq(r.code, 0);
        ck_assert(r.delay_ns >= 5 * MS && r.delay_ns <= 15 * MS);
        bf_sim_reply_free(&r);
    }
    struct bf_sim_stats st;
    bf_sim_get_stats(s, &st);
    ck_assert_uint_eq(st.injected_errors, 1);
    bf_sim_close(s);
}
END_TEST

START_TEST(same_seed_and_calls_give_identical_wire_output)
{
    uint8_t *out[2];
    size_t len[2];
    for (int run = 0; run < 2; run++) {
        struct bf_sim_config c;
        simt_cfg(&c);
        c.seed_speculative = 50;
        c.rng_seed = 777;
        bf_sim_dist_parse("uniform(0s,2s)", &c.transition_latency[0]);
        c.transition_failure[0] = 0.2;
        struct bf_sim *s = pool(&c);
        for (size_t i = 0; i < bf_sim_machine_count(s); i++) {
            struct simt_ack a = simt_create(s, bf_sim_machine_id(s, i), "", 0, 0, T0 + (int64_t)i);
            simt_ack_free(&a);
        }
        bf_sim_advance(s, T0 + SEC);
        struct bf_sim_list_args all = {0};
        struct bf_sim_reply r = {0};
        bf_sim_list(s, &all, T0 + SEC, &r);
        out[run] = r.body;
        len[run] = r.len;
        bf_sim_close(s);
    }
    ck_assert_uint_eq(len[0], len[1]);
    ck_assert_mem_eq(out[0], out[1], len[0]);
    free(out[0]);
    free(out[1]);
}
END_TEST

START_TEST(config_options_parse_by_flag_name_and_reject_bad_values)
{
    struct bf_sim_config c;
    bf_sim_config_init(&c);
    char err[128];
    ck_assert_int_eq(bf_sim_config_set(&c, "catalog", "x.csv", err, sizeof err), 0);
    ck_assert_str_eq(c.catalog_path, "x.csv");
    ck_assert_int_eq(bf_sim_config_set(&c, "zones", "5", err, sizeof err), 0);
    ck_assert_uint_eq(c.zones, 5);
    ck_assert_int_eq(bf_sim_config_set(&c, "drain-latency", "normal(2s,1s)", err, sizeof err), 0);
    ck_assert_int_eq(c.transition_latency[BF_SIM_RPC_DRAIN].kind, BF_SIM_DIST_NORMAL);
    ck_assert_int_eq(c.transition_latency[BF_SIM_RPC_DRAIN].a_ns, 2 * SEC);
    ck_assert_int_eq(c.transition_latency[BF_SIM_RPC_DRAIN].b_ns, SEC);
    ck_assert_int_eq(bf_sim_config_set(&c, "list-reply-latency", "fixed(3ms)", err, sizeof err), 0);
    ck_assert_int_eq(c.reply_latency[BF_SIM_RPC_LIST].a_ns, 3 * MS);
    ck_assert_int_eq(bf_sim_config_set(&c, "get-error", "0.25", err, sizeof err), 0);
    ck_assert(c.rpc_error[BF_SIM_RPC_GET] == 0.25);
    ck_assert_int_eq(bf_sim_config_set(&c, "configure-failure", "1", err, sizeof err), 0);
    ck_assert(c.transition_failure[BF_SIM_RPC_CONFIGURE] == 1.0);
    ck_assert_int_eq(bf_sim_config_set(&c, "spot-variants", "yes", err, sizeof err), 0);
    ck_assert(c.spot_variants);
    ck_assert_int_eq(bf_sim_config_set(&c, "bare-metal-delete", "allowed", err, sizeof err), 0);
    ck_assert(!c.bare_metal_delete_unimplemented);
    ck_assert_int_eq(bf_sim_config_set(&c, "spot-tick", "250ms", err, sizeof err), 0);
    ck_assert_int_eq(c.spot_tick_ns, 250 * MS);
    ck_assert_int_eq(bf_sim_config_set(&c, "rng-seed", "18446744073709551615", err, sizeof err), 0);
    ck_assert_uint_eq(c.rng_seed, UINT64_MAX);
    /* bad values and names */
    ck_assert_int_eq(bf_sim_config_set(&c, "get-error", "1.5", err, sizeof err), -EINVAL);
    ck_assert_int_eq(bf_sim_config_set(&c, "zones", "-1", err, sizeof err), -EINVAL);
    ck_assert_int_eq(bf_sim_config_set(&c, "create-latency", "uniform(3s,1s)", err, sizeof err),
                     -EINVAL);
    ck_assert_int_eq(bf_sim_config_set(&c, "create-latency", "gamma(1s)", err, sizeof err),
                     -EINVAL);
    ck_assert_int_eq(bf_sim_config_set(&c, "create-latency", "-1s", err, sizeof err), -EINVAL);
    ck_assert_int_eq(bf_sim_config_set(&c, "list-failure", "0.5", err, sizeof err), -ENOENT);
    ck_assert_int_eq(bf_sim_config_set(&c, "bogus", "1", err, sizeof err), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err, "bogus"));
    /* every documented option name is accepted by bf_sim_config_set */
    const char *help = bf_sim_config_help();
    ck_assert_ptr_nonnull(strstr(help, "--max-hosts-per-type"));
    static const char *const names[][2] = {{"provider", "p"},
                                           {"zone-names", "a,b"},
                                           {"racks-per-zone", "2"},
                                           {"seed-speculative", "1"},
                                           {"seed-speculative-per-node", "1"},
                                           {"seed-idle", "1"},
                                           {"seed-configured", "1"},
                                           {"seed-clusters", "2"},
                                           {"cluster-prefix", "k-"},
                                           {"seed-priority", "5"},
                                           {"defer-instant", "true"},
                                           {"max-hosts", "3"},
                                           {"max-hosts-per-type", "2"},
                                           {"spot-interruption-rate", "0.1"},
                                           {"max-metadata-bytes", "4096"},
                                           {"state", "/tmp/x"},
                                           {"state-fsync", "false"},
                                           {"state-map-size", "1048576"},
                                           {"delete-reply-latency", "1ms"},
                                           {"create-error", "0"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        ck_assert_msg(bf_sim_config_set(&c, names[i][0], names[i][1], err, sizeof err) == 0,
                      "%s: %s", names[i][0], err);
    ck_assert_str_eq(c.zone_names, "a,b");
}
END_TEST

START_TEST(open_rejects_invalid_configurations)
{
    struct bf_sim_config c;
    struct bf_sim *s;
    char err[200];
    simt_cfg(&c);
    c.zones = 0;
    ck_assert_int_eq(bf_sim_open(&c, &s, err, sizeof err), -EINVAL);
    simt_cfg(&c);
    c.transition_failure[2] = NAN;
    ck_assert_int_eq(bf_sim_open(&c, &s, err, sizeof err), -EINVAL);
    simt_cfg(&c);
    c.zone_names = "a,,b";
    ck_assert_int_eq(bf_sim_open(&c, &s, err, sizeof err), -EINVAL);
    simt_cfg(&c);
    c.zone_names = "a,b,a";
    ck_assert_int_eq(bf_sim_open(&c, &s, err, sizeof err), -EINVAL);
    struct bf_sim_type bad = {"s", 1000, 1024, 0, "", BF_CT_SPOT, 0.1, 0, 0};
    simt_cfg(&c);
    c.types = &bad;
    c.n_types = 1;
    ck_assert_int_eq(bf_sim_open(&c, &s, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "SPOT"));
    simt_cfg(&c);
    c.catalog_path = "/nonexistent/catalog.csv";
    ck_assert_int_eq(bf_sim_open(&c, &s, err, sizeof err), -ENOENT);
}
END_TEST

START_TEST(zero_latency_core_sustains_well_over_5000_actions_per_second)
{
    /* A functional floor, not a benchmark: 20,000 actions in under 4 s is
     * 5,000/s even under sanitizers; bench/ reports the real figure. */
    struct bf_sim_config c;
    simt_cfg(&c);
    c.seed_speculative = 1000;
    struct bf_sim *s = pool(&c);
    size_t n = bf_sim_machine_count(s);
    struct bf_sim_request q = {.kind = BF_SIM_RPC_CREATE};
    struct bf_sim_reply r = {0};
    int64_t t0 = bf_mono_ns();
    int actions = 0;
    for (int round = 0; round < 2; round++) {
        for (size_t i = 0; i < n; i++) {
            const char *id = bf_sim_machine_id(s, i);
            q.machine_id = (struct bf_sim_bytes){(const uint8_t *)id, strlen(id)};
            for (int k = 0; k < 4; k++) {
                q.kind = k;
                q.cluster_id = (struct bf_sim_bytes){(const uint8_t *)"c", 1};
                bf_sim_transition(s, &q, T0, &r);
                ck_assert_int_eq(r.code, 0);
                actions++;
            }
        }
    }
    double secs = (double)(bf_mono_ns() - t0) / 1e9;
    bf_sim_reply_free(&r);
    ck_assert_int_eq(actions, (int)n * 8);
    ck_assert_msg(secs < 4.0, "%d actions took %.2f s", actions, secs);
    ck_assert_uint_eq(bf_sim_count_in_state(s, BF_STATE_SPECULATIVE), n);
    bf_sim_close(s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("simprovider-knobs");
    TCase *tc = tcase_create("knobs");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, fixed_latency_completes_exactly_at_the_deadline);
    tcase_add_test(tc, uniform_and_normal_latencies_stay_in_range_and_spread);
    tcase_add_test(tc, normal_latency_is_clamped_at_zero);
    tcase_add_test(tc, instant_by_default_and_deferred_zero_latency_completes_at_the_next_advance);
    tcase_add_test(tc, failure_probability_ends_transitions_failed_with_a_last_error);
    tcase_add_test(tc, late_completion_after_failed_is_discarded);
    tcase_add_test(tc, global_host_cap_exhausts_create_and_delete_frees_capacity);
    tcase_add_test(tc, per_type_host_cap_exhausts_only_that_type);
    tcase_add_test(tc, spot_interruptions_hit_only_spot_idle_or_configured_machines);
    tcase_add_test(tc, spot_interruption_counts_follow_poisson_mean_and_variance_for_large_lambda);
    tcase_add_test(tc, zero_spot_rate_never_interrupts_and_sets_no_deadline);
    tcase_add_test(tc, reply_latency_and_injected_errors_have_no_side_effects);
    tcase_add_test(tc, same_seed_and_calls_give_identical_wire_output);
    tcase_add_test(tc, config_options_parse_by_flag_name_and_reject_bad_values);
    tcase_add_test(tc, open_rejects_invalid_configurations);
    tcase_add_test(tc, zero_latency_core_sustains_well_over_5000_actions_per_second);
    suite_add_tcase(s, tc);
    return check_run(s);
}
