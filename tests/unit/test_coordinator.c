/*
 * test_coordinator.c — bigfleet-coordinator's rebalance loop
 * (tools/coordinator/rebalance.c, seed 002 §2-§3, §6) on synthetic shard
 * reports: eligibility and order, every tier, the two-phase moves, and each
 * oscillation mode the seed names (B->A->B, quota ping-pong,
 * drain-then-reclaim, escalation churn); plus the etcd key decoder of
 * tools/coordinator/store.c on bad input.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../tools/coordinator/rebalance.c"
#include "../../tools/coordinator/store.c"
#include "check_run.h"

/* store.c's writes need the election and the etcd client: not used here */
bool co_is_leader(const struct coord *c)
{
    (void)c;
    return false;
}
void co_step_down(struct coord *c, const char *why)
{
    (void)c;
    (void)why;
}
int co_etcd_txn(struct etcd *e, const Etcdserverpb__TxnRequest *req, etcd_txn_fn cb, void *arg)
{
    (void)e, (void)req, (void)cb, (void)arg;
    return -ENOSYS;
}
int co_etcd_range(struct etcd *e, const uint8_t *key, size_t klen, const uint8_t *end, size_t elen,
                  etcd_range_fn cb, void *arg)
{
    (void)e, (void)key, (void)klen, (void)end, (void)elen, (void)cb, (void)arg;
    return -ENOSYS;
}
size_t co_etcd_prefix_end(const uint8_t *prefix, size_t len, uint8_t *out)
{
    (void)prefix, (void)len, (void)out;
    return 0;
}

/* ------------------------------------------------------------ a fake sender */

struct sent {
    char shard[64];
    struct rb_instr in;
    char type[64], zone[64], from[64], to[64];
    char id[RB_INSTR_ID];
    uint32_t n_ids;
};

static struct sent log_[256];
static int n_log;
static int quota_moves, quota_n;

static int fake_send(void *arg, const char *shard, const struct rb_instr *in, char id[RB_INSTR_ID])
{
    (void)arg;
    ck_assert_int_lt(n_log, 256);
    struct sent *s = &log_[n_log];
    snprintf(s->shard, sizeof s->shard, "%s", shard);
    s->in = *in;
    snprintf(s->type, sizeof s->type, "%s", in->type ? in->type : "");
    snprintf(s->zone, sizeof s->zone, "%s", in->zone ? in->zone : "");
    snprintf(s->from, sizeof s->from, "%s", in->from);
    snprintf(s->to, sizeof s->to, "%s", in->to);
    s->n_ids = in->n_ids;
    snprintf(id, RB_INSTR_ID, "i%015d", n_log);
    memcpy(s->id, id, RB_INSTR_ID);
    n_log++;
    return 0;
}

static void fake_quota(void *arg, const char *from, const char *to, int32_t n)
{
    (void)arg;
    (void)from;
    (void)to;
    quota_moves++;
    quota_n += n;
}

static const struct rb_type catalog[] = {
    {"gpu8", {96000, 786432, 8000}},
    {"cpu64", {64000, 262144, 0}},
};

static struct rb *mk(struct rb_config *cfg)
{
    struct rb_config d;
    if (!cfg) {
        co_rb_config_defaults(&d);
        cfg = &d;
    }
    struct rb_ops ops = {fake_send, fake_quota, NULL};
    struct rb *r;
    ck_assert_int_eq(co_rb_new(cfg, catalog, 2, &ops, &r), 0);
    n_log = 0;
    quota_moves = quota_n = 0;
    return r;
}

static const char *gpu_pin[] = {"gpu8"};

/* A shortfall of `gpus` GPUs pinned to gpu8. */
static struct rb_shortfall sf_gpu(uint64_t key, int32_t prio, int32_t age, int32_t gpus)
{
    struct rb_shortfall s = {.key = key, .priority = prio, .age = age, .ipb = 12};
    s.deficit[2] = (int64_t)gpus * 1000;
    s.types = gpu_pin;
    s.n_types = 1;
    return s;
}

static struct rb_shard shard(const char *id, uint64_t seq, const struct co_rb_free *f, uint32_t nf,
                             const struct rb_shortfall *sf, uint32_t ns)
{
    return (struct rb_shard){id, seq, f, nf, sf, ns};
}

static int acks_ok(struct rb *r, int idx, const char *const *ids, size_t n)
{
    return co_rb_ack(r, log_[idx].shard, log_[idx].id, RB_ACCEPTED, ids, n);
}

/* ------------------------------------------------------------ tests */

START_TEST(young_and_topology_constrained_shortfalls_are_not_eligible)
{
    struct rb *r = mk(NULL);
    struct co_rb_free fb[] = {{"gpu8", "z1", 10, 0, 0}};
    struct rb_shortfall sa[2] = {sf_gpu(1, 1000, 5, 16), sf_gpu(2, 1000, 9, 16)};
    sa[1].topo = true;
    struct rb_shard s[2] = {shard("A", 1, NULL, 0, sa, 2), shard("B", 1, fb, 1, NULL, 0)};
    co_rb_pass(r, s, 2, 0);
    ck_assert_int_eq(n_log, 0);                  /* age 5 is not > 5; the Same one never moves */
    ck_assert_uint_eq(co_rb_stats(r)->young, 1); /* each passed over, and why */
    ck_assert_uint_eq(co_rb_stats(r)->topo, 1);
    ck_assert_uint_eq(co_rb_stats(r)->eligible, 0);
    sa[0].age = 6;
    co_rb_pass(r, s, 2, 0);
    ck_assert_int_eq(n_log, 1);
    ck_assert_uint_eq(co_rb_stats(r)->young, 1);
    ck_assert_uint_eq(co_rb_stats(r)->topo, 2);
    ck_assert_uint_eq(co_rb_stats(r)->eligible, 1);
    co_rb_free(r);
}
END_TEST

START_TEST(tier1_transfers_idle_sized_to_the_deficit_then_names_the_ids_to_the_recipient)
{
    struct rb *r = mk(NULL);
    struct co_rb_free fb[] = {{"gpu8", "z1", 10, 5, 3}};
    struct rb_shortfall sa[] = {sf_gpu(1, 1000, 6, 20)}; /* 20 GPUs = 3 gpu8 machines */
    struct rb_shard s[2] = {shard("A", 1, NULL, 0, sa, 1), shard("B", 1, fb, 1, NULL, 0)};
    co_rb_pass(r, s, 2, 0);
    ck_assert_int_eq(n_log, 1);
    ck_assert_str_eq(log_[0].shard, "B"); /* the donor first */
    ck_assert_int_eq(log_[0].in.kind, RB_TRANSFER);
    ck_assert_int_eq(log_[0].in.count, 3);
    ck_assert_str_eq(log_[0].type, "gpu8");
    ck_assert_str_eq(log_[0].from, "B");
    ck_assert_str_eq(log_[0].to, "A");
    const char *ids[] = {"m1", "m2", "m3"};
    ck_assert(acks_ok(r, 0, ids, 3));
    ck_assert_int_eq(n_log, 2);
    ck_assert_str_eq(log_[1].shard, "A"); /* then the recipient, with the ids */
    ck_assert_int_eq(log_[1].n_ids, 3);
    ck_assert_int_eq(log_[1].in.count, 0);
    ck_assert(acks_ok(r, 1, NULL, 0));
    ck_assert_uint_eq(co_rb_stats(r)->completed[1], 1);
    ck_assert_uint_eq(co_rb_stats(r)->machines[1], 3);
    ck_assert_int_eq(quota_moves, 0);
    co_rb_free(r);
}
END_TEST

START_TEST(donor_keeps_its_margin_and_its_own_demand)
{
    struct rb *r = mk(NULL);
    /* B has 1 Idle gpu8 (the margin): nothing to give */
    struct co_rb_free fb[] = {{"gpu8", "z1", 1, 0, 0}};
    struct rb_shortfall sa[] = {sf_gpu(1, 1000, 6, 8)};
    struct rb_shard s[2] = {shard("A", 1, NULL, 0, sa, 1), shard("B", 1, fb, 1, NULL, 0)};
    co_rb_pass(r, s, 2, 0);
    ck_assert_int_eq(n_log, 0);
    ck_assert_uint_eq(co_rb_stats(r)->blocked_margin, 1);
    /* B has 10 but needs gpu8 itself: still nothing */
    struct co_rb_free fb2[] = {{"gpu8", "z1", 10, 0, 0}};
    struct rb_shortfall sb[] = {sf_gpu(9, 500, 2, 8)};
    s[1] = shard("B", 2, fb2, 1, sb, 1);
    co_rb_pass(r, s, 2, 0);
    ck_assert_int_eq(n_log, 0);
    ck_assert_uint_eq(co_rb_stats(r)->blocked_margin, 1);
    ck_assert_uint_eq(co_rb_stats(r)->blocked_demand, 1);
    co_rb_free(r);
}
END_TEST

START_TEST(min_benefit_refuses_a_move_that_covers_too_little)
{
    struct rb_config cfg;
    co_rb_config_defaults(&cfg);
    cfg.min_benefit = 0.5;
    struct rb *r = mk(&cfg);
    struct co_rb_free fb[] = {{"gpu8", "z1", 3, 0, 0}}; /* surplus 2 of a need of 10 */
    struct rb_shortfall sa[] = {sf_gpu(1, 1000, 6, 80)};
    struct rb_shard s[2] = {shard("A", 1, NULL, 0, sa, 1), shard("B", 1, fb, 1, NULL, 0)};
    co_rb_pass(r, s, 2, 0);
    ck_assert_int_eq(n_log, 0);
    ck_assert_uint_eq(co_rb_stats(r)->blocked_benefit, 1);
    co_rb_free(r);
}
END_TEST

START_TEST(min_benefit_counts_the_rows_of_a_tier_together)
{
    struct rb *r = mk(NULL); /* min_benefit 0.25, margin 1 */
    /* Idle over three zones, 3 to give in each: 3 of 20 machines a row (15 %),
     * 9 of 20 together (45 %) */
    struct co_rb_free fb[] = {
        {"gpu8", "z1", 4, 0, 0}, {"gpu8", "z2", 4, 0, 0}, {"gpu8", "z3", 4, 0, 0}};
    struct rb_shortfall sa[] = {sf_gpu(1, 1000, 6, 160)};
    struct rb_shard s[2] = {shard("A", 1, NULL, 0, sa, 1), shard("B", 1, fb, 3, NULL, 0)};
    co_rb_pass(r, s, 2, 0);
    ck_assert_int_eq(n_log, 3);
    int total = 0;
    for (int i = 0; i < n_log; i++) {
        ck_assert_int_eq(log_[i].in.kind, RB_TRANSFER);
        total += log_[i].in.count;
    }
    ck_assert_int_eq(total, 9);
    ck_assert_uint_eq(co_rb_stats(r)->blocked_benefit, 0);
    co_rb_free(r);
    /* one such row alone is still refused */
    r = mk(NULL);
    s[1] = shard("B", 1, fb, 1, NULL, 0);
    co_rb_pass(r, s, 2, 0);
    ck_assert_int_eq(n_log, 0);
    ck_assert_uint_eq(co_rb_stats(r)->blocked_benefit, 1);
    co_rb_free(r);
}
END_TEST

START_TEST(priority_then_age_orders_the_shortfalls_and_a_donor_is_not_counted_twice)
{
    struct rb *r = mk(NULL);
    struct co_rb_free fc[] = {{"gpu8", "z1", 3, 0, 0}}; /* surplus 2 */
    struct rb_shortfall sa[] = {sf_gpu(1, 100, 30, 16)};
    struct rb_shortfall sb[] = {sf_gpu(2, 900, 7, 16)};
    struct rb_shard s[3] = {shard("A", 1, NULL, 0, sa, 1), shard("B", 1, NULL, 0, sb, 1),
                            shard("C", 1, fc, 1, NULL, 0)};
    co_rb_pass(r, s, 3, 0);
    ck_assert_int_eq(n_log, 1); /* B (priority 900) took both; A got nothing */
    ck_assert_str_eq(log_[0].to, "B");
    ck_assert_int_eq(log_[0].in.count, 2);
    co_rb_free(r);
}
END_TEST

START_TEST(tier2_reassigns_speculative_when_no_idle_and_commits_the_quota)
{
    struct rb *r = mk(NULL);
    struct co_rb_free fb[] = {{"gpu8", "z1", 0, 10, 0}};
    struct rb_shortfall sa[] = {sf_gpu(1, 1000, 6, 16)};
    struct rb_shard s[2] = {shard("A", 1, NULL, 0, sa, 1), shard("B", 1, fb, 1, NULL, 0)};
    co_rb_pass(r, s, 2, 0);
    ck_assert_int_eq(n_log, 1);
    ck_assert_int_eq(log_[0].in.kind, RB_REASSIGN);
    ck_assert_int_eq(log_[0].in.count, 2);
    const char *ids[] = {"s1", "s2"};
    ck_assert(acks_ok(r, 0, ids, 2));
    ck_assert_int_eq(quota_moves, 1); /* committed when the donor let go */
    ck_assert_int_eq(quota_n, 2);
    ck_assert_int_eq(log_[1].in.kind, RB_REASSIGN);
    ck_assert_str_eq(log_[1].shard, "A");
    ck_assert(acks_ok(r, 1, NULL, 0));
    ck_assert_uint_eq(co_rb_stats(r)->machines[2], 2);
    co_rb_free(r);
}
END_TEST

START_TEST(tier3_drains_only_past_age_12_with_the_bucket_gate_then_transfers_when_idle)
{
    struct rb *r = mk(NULL);
    struct co_rb_free fb[] = {{"gpu8", "z1", 0, 0, 5}}; /* only bound machines */
    struct rb_shortfall sa[] = {sf_gpu(1, 5000, 12, 8)};
    struct rb_shard s[2] = {shard("A", 1, NULL, 0, sa, 1), shard("B", 1, fb, 1, NULL, 0)};
    co_rb_pass(r, s, 2, 0);
    ck_assert_int_eq(n_log, 0); /* age 12 is not > 12 */
    ck_assert_uint_eq(co_rb_stats(r)->tier3_young, 1);
    ck_assert_uint_eq(co_rb_stats(r)->uncovered, 1);
    sa[0].age = 13;
    co_rb_pass(r, s, 2, 0);
    ck_assert_int_eq(n_log, 1);
    ck_assert_int_eq(log_[0].in.kind, RB_DRAIN);
    ck_assert_int_eq(log_[0].in.preemptor_priority, 5000);
    ck_assert_int_eq(log_[0].in.max_victim_penalty_bucket, 12);
    const char *ids[] = {"v1"};
    ck_assert(acks_ok(r, 0, ids, 1));
    ck_assert_int_eq(n_log, 1); /* nothing moves until the victim is Idle */
    co_rb_pass(r, s, 2, 0);
    ck_assert_int_eq(n_log, 2); /* the follow-up transfer, to the donor, naming the victim */
    ck_assert_int_eq(log_[1].in.kind, RB_TRANSFER);
    ck_assert_str_eq(log_[1].shard, "B");
    ck_assert_int_eq(log_[1].n_ids, 1);
    /* still draining: the donor refuses; retried next pass */
    ck_assert(co_rb_ack(r, "B", log_[1].id, RB_FAILED, NULL, 0));
    co_rb_pass(r, s, 2, 0);
    ck_assert_int_eq(n_log, 3);
    ck_assert(acks_ok(r, 2, ids, 1));
    ck_assert_str_eq(log_[3].shard, "A");
    ck_assert(acks_ok(r, 3, NULL, 0));
    ck_assert_uint_eq(co_rb_stats(r)->completed[3], 1);
    co_rb_free(r);
}
END_TEST

START_TEST(tier3_never_runs_while_a_cheaper_tier_can_serve)
{
    struct rb *r = mk(NULL);
    struct co_rb_free fb[] = {{"gpu8", "z1", 0, 0, 5}, {"gpu8", "z2", 0, 4, 0}};
    struct rb_shortfall sa[] = {sf_gpu(1, 5000, 20, 8)};
    struct rb_shard s[2] = {shard("A", 1, NULL, 0, sa, 1), shard("B", 1, fb, 2, NULL, 0)};
    co_rb_pass(r, s, 2, 0);
    ck_assert_int_eq(n_log, 1);
    ck_assert_int_eq(log_[0].in.kind, RB_REASSIGN);
    ck_assert_uint_eq(co_rb_stats(r)->started[3], 0);
    co_rb_free(r);
}
END_TEST

/* B->A->B: after B gave A gpu8 machines, A's surplus never flows back to B
 * within the cooldown, and does after it. */
START_TEST(oscillation_b_to_a_to_b_is_blocked_by_the_cooldown)
{
    struct rb_config cfg;
    co_rb_config_defaults(&cfg);
    cfg.cooldown_passes = 8;
    struct rb *r = mk(&cfg);
    struct co_rb_free fb[] = {{"gpu8", "z1", 10, 0, 0}};
    struct rb_shortfall sa[] = {sf_gpu(1, 1000, 6, 8)};
    struct rb_shard s[2] = {shard("A", 1, NULL, 0, sa, 1), shard("B", 1, fb, 1, NULL, 0)};
    co_rb_pass(r, s, 2, 0);
    const char *ids[] = {"m1"};
    ck_assert(acks_ok(r, 0, ids, 1));
    ck_assert(acks_ok(r, 1, NULL, 0));
    /* now A has idle gpu8 and B reports a gpu8 shortfall */
    struct co_rb_free fa[] = {{"gpu8", "z1", 5, 0, 0}};
    struct rb_shortfall sb[] = {sf_gpu(2, 1000, 6, 8)};
    uint64_t seq = 2;
    int before = n_log;
    for (int p = 0; p < 7; p++, seq++) {
        s[0] = shard("A", seq, fa, 1, NULL, 0);
        s[1] = shard("B", seq, NULL, 0, sb, 1);
        co_rb_pass(r, s, 2, 0);
    }
    ck_assert_int_eq(n_log, before); /* A->B of gpu8/z1 blocked */
    ck_assert_uint_ge(co_rb_stats(r)->blocked_cooldown, 1);
    for (int p = 0; p < 3; p++, seq++) {
        s[0] = shard("A", seq, fa, 1, NULL, 0);
        s[1] = shard("B", seq, NULL, 0, sb, 1);
        co_rb_pass(r, s, 2, 0);
    }
    ck_assert_int_eq(n_log, before + 1); /* after the cooldown the flow may reverse */
    ck_assert_str_eq(log_[before].from, "A");
    co_rb_free(r);
}
END_TEST

START_TEST(oscillation_quota_ping_pong_is_blocked_by_the_cooldown)
{
    struct rb *r = mk(NULL);
    struct co_rb_free fb[] = {{"gpu8", "z1", 0, 10, 0}};
    struct rb_shortfall sa[] = {sf_gpu(1, 1000, 6, 8)};
    struct rb_shard s[2] = {shard("A", 1, NULL, 0, sa, 1), shard("B", 1, fb, 1, NULL, 0)};
    co_rb_pass(r, s, 2, 0);
    const char *ids[] = {"s1"};
    ck_assert(acks_ok(r, 0, ids, 1));
    ck_assert(acks_ok(r, 1, NULL, 0));
    struct co_rb_free fa[] = {{"gpu8", "z1", 0, 10, 0}};
    struct rb_shortfall sb[] = {sf_gpu(2, 1000, 6, 8)};
    int before = n_log;
    for (uint64_t seq = 2; seq < 8; seq++) {
        s[0] = shard("A", seq, fa, 1, NULL, 0);
        s[1] = shard("B", seq, NULL, 0, sb, 1);
        co_rb_pass(r, s, 2, 0);
    }
    ck_assert_int_eq(n_log, before);
    ck_assert_int_eq(quota_moves, 1);
    co_rb_free(r);
}
END_TEST

/* drain-then-reclaim: drained machines are never pushed to a shard whose
 * demand went away (they stay the donor's, its reservation expires). */
START_TEST(oscillation_drain_then_reclaim_never_pushes_a_drained_machine)
{
    struct rb *r = mk(NULL);
    struct co_rb_free fb[] = {{"gpu8", "z1", 0, 0, 5}};
    struct rb_shortfall sa[] = {sf_gpu(1, 5000, 13, 8)};
    struct rb_shard s[2] = {shard("A", 1, NULL, 0, sa, 1), shard("B", 1, fb, 1, NULL, 0)};
    co_rb_pass(r, s, 2, 0);
    ck_assert_int_eq(log_[0].in.kind, RB_DRAIN);
    const char *ids[] = {"v1"};
    ck_assert(acks_ok(r, 0, ids, 1));
    s[0] = shard("A", 2, NULL, 0, NULL, 0); /* A's demand is gone */
    co_rb_pass(r, s, 2, 0);
    ck_assert_int_eq(n_log, 1); /* no transfer to A */
    ck_assert_uint_eq(co_rb_stats(r)->abandoned_pull, 1);
    ck_assert_uint_eq(co_rb_moves_in_flight(r), 0);
    co_rb_free(r);
}
END_TEST

/* escalation churn: a shortfall with a move in flight, or whose move just
 * completed and has not shown in its shard's reports, is not escalated. */
START_TEST(oscillation_escalation_churn_waits_for_moves_in_flight_and_their_effect)
{
    struct rb *r = mk(NULL);
    struct co_rb_free fb[] = {{"gpu8", "z1", 3, 0, 5}};
    struct rb_shortfall sa[] = {sf_gpu(1, 5000, 20, 40)}; /* 5 machines, 2 Idle to give */
    struct rb_shard s[2] = {shard("A", 1, NULL, 0, sa, 1), shard("B", 1, fb, 1, NULL, 0)};
    co_rb_pass(r, s, 2, 0);
    ck_assert_int_eq(n_log, 1);
    ck_assert_int_eq(log_[0].in.kind, RB_TRANSFER); /* the cheap tier, not a drain */
    co_rb_pass(r, s, 2, 0);
    co_rb_pass(r, s, 2, 0);
    ck_assert_int_eq(n_log, 1); /* in flight: nothing more for it */
    ck_assert_uint_eq(co_rb_stats(r)->in_flight, 2);
    const char *ids[] = {"m1", "m2"};
    ck_assert(acks_ok(r, 0, ids, 2));
    ck_assert(acks_ok(r, 1, NULL, 0));
    int before = n_log;
    co_rb_pass(r, s, 2, 0); /* same report: the move has not shown yet */
    s[0] = shard("A", 2, NULL, 0, sa, 1);
    co_rb_pass(r, s, 2, 0);
    ck_assert_int_eq(n_log, before);
    ck_assert_uint_eq(co_rb_stats(r)->settling, 2);
    s[0] = shard("A", 3, NULL, 0, sa, 1);
    s[1] = shard("B", 3, (struct co_rb_free[]){{"gpu8", "z1", 0, 0, 5}}, 1, NULL, 0);
    co_rb_pass(r, s, 2, 0);
    co_rb_pass(r, s, 2, 0);
    ck_assert_int_eq(n_log, before + 1); /* settled, still short, nothing cheap left: Tier 3 */
    ck_assert_int_eq(log_[before].in.kind, RB_DRAIN);
    co_rb_free(r);
}
END_TEST

START_TEST(a_shortfall_gone_after_a_move_records_its_latency)
{
    struct rb *r = mk(NULL);
    struct co_rb_free fb[] = {{"gpu8", "z1", 10, 0, 0}};
    struct rb_shortfall sa[] = {sf_gpu(1, 1000, 6, 8)};
    sa[0].first_seen_ns = 1000000000;
    struct rb_shard s[2] = {shard("A", 1, NULL, 0, sa, 1), shard("B", 1, fb, 1, NULL, 0)};
    co_rb_pass(r, s, 2, 1500000000);
    const char *ids[] = {"m1"};
    ck_assert(acks_ok(r, 0, ids, 1));
    ck_assert(acks_ok(r, 1, NULL, 0));
    co_rb_pass(r, s, 2, 2000000000);
    s[0] = shard("A", 2, NULL, 0, NULL, 0);
    co_rb_pass(r, s, 2, 3000000000);
    size_t n;
    const double *l = co_rb_latencies_ms(r, &n);
    ck_assert_uint_eq(n, 1);
    ck_assert_double_eq_tol(l[0], 2000.0, 0.001);
    ck_assert_uint_eq(co_rb_stats(r)->satisfied, 1);
    co_rb_free(r);
}
END_TEST

START_TEST(a_refused_selector_ends_the_move_and_changes_nothing)
{
    struct rb *r = mk(NULL);
    struct co_rb_free fb[] = {{"gpu8", "z1", 10, 0, 0}};
    struct rb_shortfall sa[] = {sf_gpu(1, 1000, 6, 8)};
    struct rb_shard s[2] = {shard("A", 1, NULL, 0, sa, 1), shard("B", 1, fb, 1, NULL, 0)};
    co_rb_pass(r, s, 2, 0);
    ck_assert(co_rb_ack(r, "B", log_[0].id, RB_FAILED, NULL, 0));
    ck_assert_uint_eq(co_rb_moves_in_flight(r), 0);
    ck_assert_uint_eq(co_rb_stats(r)->failed[1], 1);
    ck_assert_int_eq(n_log, 1);
    /* an ack from the wrong shard or an unknown id is not ours */
    ck_assert(!co_rb_ack(r, "A", "nope", RB_ACCEPTED, NULL, 0));
    co_rb_free(r);
}
END_TEST

START_TEST(etcd_keys_that_do_not_decode_or_match_their_value_are_skipped)
{
    struct co_store st = {0};
    const char *p = "/bf/";
    ck_assert_int_eq(
        co_store_apply_kv(&st, p, (const uint8_t *)"/other/x", 8, (const uint8_t *)"", 0), -EINVAL);
    ck_assert_int_eq(co_store_apply_kv(&st, p, (const uint8_t *)"/bf/shards/a", 12,
                                       (const uint8_t *)"\xff\xff", 2),
                     -EINVAL);
    /* a value naming another shard than its key */
    Bigfleet__V1alpha1__ShardRegistryEntry e = BIGFLEET__V1ALPHA1__SHARD_REGISTRY_ENTRY__INIT;
    e.shard_id = "b";
    e.address = "h:1";
    uint8_t buf[64];
    size_t n = bigfleet__v1alpha1__shard_registry_entry__pack(&e, buf);
    ck_assert_int_eq(co_store_apply_kv(&st, p, (const uint8_t *)"/bf/shards/a", 12, buf, n),
                     -EINVAL);
    ck_assert_int_eq(co_store_apply_kv(&st, p, (const uint8_t *)"/bf/shards/b", 12, buf, n), 0);
    ck_assert_uint_eq(st.n_shards, 1);
    ck_assert_int_eq(
        co_store_apply_kv(&st, p, (const uint8_t *)"/bf/seq", 7, (const uint8_t *)"-5", 2),
        -EINVAL);
    ck_assert_int_eq(
        co_store_apply_kv(&st, p, (const uint8_t *)"/bf/seq", 7, (const uint8_t *)"200000", 6), 0);
    ck_assert_int_eq(st.seq_durable, 200000);
    ck_assert_uint_eq(st.rejected, 4);
    co_store_clear(&st);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("coordinator");
    TCase *t = tcase_create("rebalance");
    tcase_add_test(t, young_and_topology_constrained_shortfalls_are_not_eligible);
    tcase_add_test(t,
                   tier1_transfers_idle_sized_to_the_deficit_then_names_the_ids_to_the_recipient);
    tcase_add_test(t, donor_keeps_its_margin_and_its_own_demand);
    tcase_add_test(t, min_benefit_refuses_a_move_that_covers_too_little);
    tcase_add_test(t, min_benefit_counts_the_rows_of_a_tier_together);
    tcase_add_test(t, priority_then_age_orders_the_shortfalls_and_a_donor_is_not_counted_twice);
    tcase_add_test(t, tier2_reassigns_speculative_when_no_idle_and_commits_the_quota);
    tcase_add_test(t, tier3_drains_only_past_age_12_with_the_bucket_gate_then_transfers_when_idle);
    tcase_add_test(t, tier3_never_runs_while_a_cheaper_tier_can_serve);
    tcase_add_test(t, oscillation_b_to_a_to_b_is_blocked_by_the_cooldown);
    tcase_add_test(t, oscillation_quota_ping_pong_is_blocked_by_the_cooldown);
    tcase_add_test(t, oscillation_drain_then_reclaim_never_pushes_a_drained_machine);
    tcase_add_test(t, oscillation_escalation_churn_waits_for_moves_in_flight_and_their_effect);
    tcase_add_test(t, a_shortfall_gone_after_a_move_records_its_latency);
    tcase_add_test(t, a_refused_selector_ends_the_move_and_changes_nothing);
    tcase_add_test(t, etcd_keys_that_do_not_decode_or_match_their_value_are_skipped);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_run(suite());
}
