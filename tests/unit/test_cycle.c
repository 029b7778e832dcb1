/*
 * test_cycle.c — the cycle controller through the real shared-memory path:
 * records and need rows written into segments are decided on, actions land
 * on the actions ring with in-flight marks, the ledger is published, the
 * mirror follows the change logs (and rescans on overflow), rails apply.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bigfleet/blobs.h"
#include "bigfleet/cycle.h"
#include "bigfleet/ledger.h"
#include "cycle/cycle_internal.h"

#include "shm_fixture.h"
#include "check_run.h"

static uint32_t g_prof_gpu, g_need_prof, g_cluster;

static uint32_t intern(const char *s)
{
    uint32_t r;
    ck_assert_int_eq(bf_str_intern_cstr(&g_s, s, &r), 0);
    return r;
}

static void setup(void)
{
    struct bf_shm_caps caps = {.max_machines = 4096, .max_needs = 256, .max_clusters = 16};
    shm_fixture_create("cycle", &caps, 1);
    struct bf_kv alloc[] = {{"nvidia.com/gpu", "8"}};
    struct bf_mprofile_input in = {
        "a3-highgpu-8g", "zone-a", BF_CT_BARE_METAL, 0, NULL, 0, NULL, 1, alloc};
    ck_assert_int_eq(bf_mprofile_intern(&g_s, &in, &g_prof_gpu, NULL, 0), 0);
    const char *v[] = {"a3-highgpu-8g"};
    struct bf_requirement r = {BF_LABEL_INSTANCE_TYPE, BF_OP_IN, 1, v};
    struct bf_need_profile p = {.priority = 1000000, .ipb = 16, .rpb = 27, .n_reqs = 1, .reqs = &r};
    ck_assert_int_eq(bf_nprofile_intern(&g_s, &p, &g_need_prof, NULL), 0);
    g_cluster = intern("cluster-a");
}

static void teardown(void)
{
    shm_fixture_remove();
}

static uint32_t add_machine(const char *id, int state, uint32_t cluster)
{
    struct bf_machine_rec r;
    memset(&r, 0, sizeof r);
    r.id = intern(id);
    r.profile = g_prof_gpu;
    r.state = (uint8_t)state;
    r.capacity_type = BF_CT_BARE_METAL;
    r.type_idx = (uint16_t)bf_type_intern(&g_s, "a3-highgpu-8g");
    r.zone_idx = (uint16_t)bf_zone_intern(&g_s, "zone-a");
    if (state != BF_STATE_SPECULATIVE)
        r.host = intern("sim");
    r.flags = BF_REC_HOST_IS_ID;
    r.cluster = cluster;
    if (state == BF_STATE_CONFIGURED) {
        r.assigned_priority = 1000000;
        r.ipb = 16;
        r.rpb = 27;
    }
    uint32_t slot;
    ck_assert_int_eq(bf_inv_insert(&g_s, &r, &slot), 0);
    return slot;
}

/* n Idle machines with no cluster, named i-00, i-01, ...; their slots in
 * slots[0..n) unless slots is NULL */
static void add_idle_machines(int n, uint32_t *slots)
{
    for (int i = 0; i < n; i++) {
        char id[16];
        snprintf(id, sizeof id, "i-%02d", i);
        uint32_t slot = add_machine(id, BF_STATE_IDLE, 0);
        if (slots)
            slots[i] = slot;
    }
}

/* the test cluster's row: in use, connected, first rollup received, at generation gen */
static struct bf_cluster_rec live_cluster(uint64_t gen)
{
    struct bf_cluster_rec c;
    memset(&c, 0, sizeof c);
    c.name_ref = g_cluster;
    c.in_use = 1;
    c.first_rollup = 1;
    c.connected = 1;
    c.generation = gen;
    return c;
}

/* publish a rollup of `units` GPU units (0 = an empty rollup) */
static void publish_rollup(int units, uint64_t gen)
{
    struct bf_cluster_rec c = live_cluster(gen);
    if (units > 0) {
        struct bf_need_row row;
        memset(&row, 0, sizeof row);
        row.profile_ref = g_need_prof;
        row.cluster_ref = g_cluster;
        int gpu = bf_dim_lookup(&g_s, "nvidia.com/gpu");
        row.aggregate[gpu] = 8000LL * units;
        row.min_unit[gpu] = 8000;
        row.arrival_ns = 1;
        memcpy(&g_s.rows[0], &row, sizeof row);
        c.rows_off = 0;
        c.rows_count = 1;
    }
    bf_cluster_write(&g_s, 0, &c);
    atomic_store(&g_s.needs->n_clusters, 1);
    atomic_fetch_add(&g_s.needs->change_counter, 1);
}

static struct bf_cycle *new_cycle(bool paused)
{
    struct bf_cycle_opts o = {.reclaim_cap_fraction = 0.05, .actuation_paused = paused};
    struct bf_cycle *c;
    ck_assert_int_eq(bf_cycle_new(&g_s, &o, &c), 0);
    return c;
}

static int drain_actions(struct bf_action_msg *out, int max)
{
    int n = 0;
    while (n < max && bf_ring_pop(&g_s, BF_RING_ACTIONS, &out[n]) == 0)
        n++;
    return n;
}

START_TEST(idle_supply_is_bootstrapped_once_with_in_flight_marks)
{
    uint32_t slots[4];
    add_idle_machines(4, slots);
    publish_rollup(3, 1);
    struct bf_cycle *c = new_cycle(false);
    struct bf_cycle_report rep;
    ck_assert_int_eq(bf_cycle_run_once(c, 1000000000LL, &rep), 0);
    ck_assert(rep.rescanned);
    ck_assert_uint_eq(rep.enqueued, 3);
    struct bf_action_msg m[16];
    ck_assert_int_eq(drain_actions(m, 16), 3);
    for (int i = 0; i < 3; i++) {
        ck_assert_uint_eq(m[i].kind, BF_ACTION_BOOTSTRAP);
        ck_assert_uint_eq(m[i].cluster_ref, g_cluster);
        ck_assert_uint_eq(m[i].need_profile_ref, g_need_prof);
        ck_assert_uint_eq(m[i].disposition, BF_DISP_EXECUTE);
        ck_assert(bf_pending(&g_s, m[i].slot));
        ck_assert_uint_eq(m[i].pending_tag, atomic_load(&g_s.pending_enq[m[i].slot]));
    }
    ck_assert_uint_gt(m[1].serial, m[0].serial);
    /* the verdict ledger is published */
    uint32_t pub = atomic_load(&g_s.st->published);
    const struct bf_cycle_result *res = &g_s.st->result[pub];
    ck_assert_uint_eq(res->cycle, rep.cycle);
    ck_assert_uint_eq(res->n_verdicts, 1);
    struct bf_verdict_row vr, *v = &vr;
    bf_verdict_read(&g_s, pub, 0, res->n_verdicts, res->n_verdict_extras, v);
    ck_assert_uint_eq(v->cluster_ref, g_cluster);
    ck_assert_int_eq(v->bootstrap_count, 3);
    ck_assert_uint_eq(res->counts.by_state[BF_STATE_IDLE], 4);
    /* next cycle: same decisions, but the machines are in flight: nothing new */
    ck_assert_int_eq(bf_cycle_run_once(c, 2000000000LL, &rep), 0);
    ck_assert(!rep.rescanned);
    ck_assert_uint_eq(rep.enqueued, 0);
    ck_assert_uint_eq(rep.deduped, 3);
    ck_assert_int_eq(drain_actions(m, 16), 0);
    (void)slots;
    bf_cycle_free(c);
}
END_TEST

static void set_connected(bool on)
{
    struct bf_cluster_rec c;
    ck_assert_int_eq(bf_cluster_read(&g_s, 0, &c, NULL), 0);
    c.connected = on;
    bf_cluster_write(&g_s, 0, &c);
}

/* A Bootstrap needs the operator's Session stream for its blob: for a
 * cluster that left demand and has no session it would fail at once and
 * roll back, every cycle; it is held back until the session is back. */
START_TEST(bootstraps_of_a_cluster_without_a_session_are_held_back_until_it_returns)
{
    add_idle_machines(4, NULL);
    publish_rollup(3, 1);
    set_connected(false);
    struct bf_cycle *c = new_cycle(false);
    struct bf_cycle_report rep;
    ck_assert_int_eq(bf_cycle_run_once(c, 1000000000LL, &rep), 0);
    ck_assert_uint_eq(rep.decided, 3); /* decided (the verdicts say so) */
    ck_assert_uint_eq(rep.no_session, 3);
    ck_assert_uint_eq(rep.enqueued, 0);
    struct bf_action_msg m[16];
    ck_assert_int_eq(drain_actions(m, 16), 0);
    for (uint32_t s = 0; s < 4; s++)
        ck_assert(!bf_pending(&g_s, s));
    /* the session is back: the same decisions go out */
    set_connected(true);
    ck_assert_int_eq(bf_cycle_run_once(c, 2000000000LL, &rep), 0);
    ck_assert_uint_eq(rep.no_session, 0);
    ck_assert_uint_eq(rep.enqueued, 3);
    ck_assert_int_eq(drain_actions(m, 16), 3);
    for (int i = 0; i < 3; i++)
        ck_assert_uint_eq(m[i].kind, BF_ACTION_BOOTSTRAP);
    bf_cycle_free(c);
}
END_TEST

START_TEST(mirror_follows_executor_changes_without_rescanning)
{
    uint32_t s0 = add_machine("i-00", BF_STATE_IDLE, 0);
    add_machine("i-01", BF_STATE_IDLE, 0);
    publish_rollup(1, 1);
    struct bf_cycle *c = new_cycle(false);
    struct bf_cycle_report rep;
    ck_assert_int_eq(bf_cycle_run_once(c, 1000000000LL, &rep), 0);
    struct bf_action_msg m[4];
    ck_assert_int_eq(drain_actions(m, 4), 1);
    /* act as the executor: Idle -> Configured for cluster-a, then mark done */
    struct bf_inv_txn t;
    ck_assert_int_eq(bf_inv_begin(&g_s, m[0].slot, &t), 0);
    struct bf_machine_rec r = t.old;
    r.state = BF_STATE_CONFIGURED;
    r.cluster = g_cluster;
    r.assigned_priority = 1000000;
    r.ipb = 16;
    r.rpb = 27;
    bf_inv_commit(&g_s, &t, &r, BF_CL_EXECUTOR);
    bf_pending_done(&g_s, m[0].slot, m[0].pending_tag);
    ck_assert_int_eq(bf_cycle_run_once(c, 2000000000LL, &rep), 0);
    ck_assert(!rep.rescanned);
    ck_assert_uint_eq(rep.changed_slots, 1);
    ck_assert_uint_eq(rep.decided, 0); /* satisfied by the Configured machine */
    uint32_t pub = atomic_load(&g_s.st->published);
    ck_assert_uint_eq(g_s.st->result[pub].counts.by_state[BF_STATE_CONFIGURED], 1);
    ck_assert_uint_eq(g_s.st->result[pub].counts.by_state[BF_STATE_IDLE], 1);
    (void)s0;
    bf_cycle_free(c);
}
END_TEST

/* The first cycle's full rescan reads the records and their ids through a
 * scan (shm.h "bulk reads": copies, not first touches of the mapping), and
 * the mirror it builds is the one the records give: every Idle machine is
 * bootstrapped once for the rollup that asks for all of them. */
START_TEST(a_rescan_reads_the_records_and_ids_by_copy)
{
    add_idle_machines(40, NULL);
    publish_rollup(40, 1);
    struct bf_cycle *c = new_cycle(false);
    struct bf_cycle_report rep;
    ck_assert_int_eq(bf_cycle_run_once(c, 1000000000LL, &rep), 0);
    ck_assert(rep.rescanned);
    uint32_t hwm = bf_inv_hwm(&g_s);
    ck_assert_uint_eq(c->scan_stats.copied, hwm);
    ck_assert_uint_eq(c->scan_stats.live, 0);
    ck_assert_uint_eq(c->scan_stats.str_window, 40);
    ck_assert_uint_eq(c->scan_stats.str_live, 0);
    struct bf_action_msg acts[64];
    ck_assert_int_eq(drain_actions(acts, 64), 40);
    bf_cycle_free(c);
}
END_TEST

START_TEST(change_log_overflow_forces_one_counted_rescan)
{
    add_machine("i-00", BF_STATE_IDLE, 0);
    struct bf_cycle *c = new_cycle(false);
    struct bf_cycle_report rep;
    ck_assert_int_eq(bf_cycle_run_once(c, 1000000000LL, &rep), 0);
    uint64_t cap = (uint64_t)g_s.changelog_mask + 1;
    for (uint64_t i = 0; i < cap + 10; i++)
        bf_cl_append(&g_s, BF_CL_EXECUTOR, 0);
    uint64_t before = atomic_load(&g_s.st->cycle.mirror_rescans);
    ck_assert_int_eq(bf_cycle_run_once(c, 2000000000LL, &rep), 0);
    ck_assert(rep.rescanned);
    ck_assert_uint_eq(atomic_load(&g_s.st->cycle.mirror_rescans), before + 1);
    ck_assert_uint_eq(atomic_load(&g_s.st->cycle.changelog_overflows), 1);
    ck_assert_int_eq(bf_cycle_run_once(c, 3000000000LL, &rep), 0);
    ck_assert(!rep.rescanned);
    bf_cycle_free(c);
}
END_TEST

START_TEST(no_reclaim_before_first_rollup_then_capped_after_an_empty_one)
{
    for (int i = 0; i < 40; i++) {
        char id[16];
        snprintf(id, sizeof id, "c-%02d", i);
        add_machine(id, BF_STATE_CONFIGURED, g_cluster);
    }
    /* the cluster exists but has sent nothing yet */
    struct bf_cluster_rec cr;
    memset(&cr, 0, sizeof cr);
    cr.name_ref = g_cluster;
    cr.in_use = 1;
    bf_cluster_write(&g_s, 0, &cr);
    atomic_store(&g_s.needs->n_clusters, 1);
    struct bf_cycle *c = new_cycle(false);
    struct bf_cycle_report rep;
    ck_assert_int_eq(bf_cycle_run_once(c, 1000000000LL, &rep), 0);
    ck_assert_uint_eq(rep.decided, 0);
    /* an empty rollup clears the gate: 40 excess, rail 1 keeps max(1, 0.05 x 40) = 2 */
    publish_rollup(0, 1);
    ck_assert_int_eq(bf_cycle_run_once(c, 2000000000LL, &rep), 0);
    ck_assert_uint_eq(rep.decided, 40);
    ck_assert_uint_eq(rep.capped, 38);
    ck_assert_uint_eq(rep.enqueued, 2);
    struct bf_action_msg m[64];
    ck_assert_int_eq(drain_actions(m, 64), 2);
    ck_assert_uint_eq(m[0].kind, BF_ACTION_RECLAIM);
    ck_assert_uint_eq(m[0].grace_seconds, 600);
    ck_assert_uint_eq(atomic_load(&g_s.st->cycle.reclaims_capped), 38);
    bf_cycle_free(c);
}
END_TEST

START_TEST(kill_switch_suppresses_every_action_without_in_flight_marks)
{
    add_idle_machines(3, NULL);
    publish_rollup(2, 1);
    struct bf_cycle *c = new_cycle(true);
    struct bf_cycle_report rep;
    ck_assert_int_eq(bf_cycle_run_once(c, 1000000000LL, &rep), 0);
    ck_assert_uint_eq(rep.suppressed, 2);
    ck_assert_uint_eq(rep.enqueued, 0);
    ck_assert_uint_eq(atomic_load(&g_s.st->cycle.actions_suppressed[BF_ACTION_BOOTSTRAP]), 2);
    ck_assert_uint_eq(atomic_load(&g_s.st->cycle.actions_total[BF_ACTION_BOOTSTRAP]), 0);
    struct bf_action_msg m[8];
    ck_assert_int_eq(drain_actions(m, 8), 2); /* for the audit log only */
    for (int i = 0; i < 2; i++) {
        ck_assert_uint_eq(m[i].disposition, BF_DISP_SUPPRESSED);
        ck_assert_uint_eq(m[i].pending_tag, 0);
        ck_assert(!bf_pending(&g_s, m[i].slot));
    }
    bf_cycle_free(c);
}
END_TEST

/* publish `n` plain GPU rows, row k with group "gang-<gen/2>-<k>" and priority
 * 1000 + k + 10 * (gen/2) (each group and profile lives for two generations) */
static void publish_groups(uint64_t gen, int n, uint32_t *prof)
{
    int gpu = bf_dim_lookup(&g_s, "nvidia.com/gpu");
    uint32_t off = (uint32_t)(gen & 1) * 64; /* alternate arena extents */
    for (int k = 0; k < n; k++) {
        const char *v[] = {"a3-highgpu-8g"};
        struct bf_requirement r = {BF_LABEL_INSTANCE_TYPE, BF_OP_IN, 1, v};
        struct bf_need_profile p = {.priority = 1000 + k + 10 * (int32_t)(gen / 2),
                                    .ipb = 16,
                                    .rpb = 27,
                                    .n_reqs = 1,
                                    .reqs = &r};
        ck_assert_int_eq(bf_nprofile_intern(&g_s, &p, &prof[k], NULL), 0);
        char g[32];
        snprintf(g, sizeof g, "gang-%llu-%d", (unsigned long long)(gen / 2), k);
        struct bf_need_row row;
        memset(&row, 0, sizeof row);
        row.profile_ref = prof[k];
        row.group_ref = intern(g);
        row.cluster_ref = g_cluster;
        row.aggregate[gpu] = 8000LL * (1 + (int64_t)(gen % 3));
        row.min_unit[gpu] = 8000;
        row.arrival_ns = k;
        memcpy(&g_s.rows[off + (uint32_t)k], &row, sizeof row);
    }
    struct bf_cluster_rec c = live_cluster(gen);
    c.rows_off = off;
    c.rows_count = (uint32_t)n;
    bf_cluster_write(&g_s, 0, &c);
    atomic_store(&g_s.needs->n_clusters, 1);
    atomic_fetch_add(&g_s.needs->change_counter, 1);
}

/* The ledger's refs are resolved through a cache keyed by the engine's string
 * addresses and a memo per row position (and, within one publish, by address
 * alone); groups and profiles replaced every other cycle free engine strings
 * whose addresses get reused, and every published ref must still name the
 * current bytes. */
START_TEST(ledger_refs_stay_exact_while_groups_are_replaced)
{
    add_idle_machines(8, NULL);
    struct bf_cycle *c = new_cycle(false);
    struct bf_cycle_report rep;
    const int n = 5;
    for (uint64_t gen = 1; gen <= 60; gen++) {
        uint32_t prof[8];
        publish_groups(gen, n, prof);
        ck_assert_int_eq(bf_cycle_run_once(c, (int64_t)gen * 1000000000LL, &rep), 0);
        struct bf_action_msg m[64];
        drain_actions(m, 64); /* nothing executes: the machines stay Idle */
        for (int i = 0; i < 8; i++)
            bf_pending_done(&g_s, (uint32_t)i, atomic_load(&g_s.pending_enq[i]));
        uint32_t pub = atomic_load(&g_s.st->published);
        const struct bf_cycle_result *res = &g_s.st->result[pub];
        ck_assert_uint_eq(res->n_verdicts, (uint32_t)n);
        bool seen[8] = {false};
        for (uint32_t i = 0; i < res->n_verdicts; i++) {
            struct bf_verdict_row vr, *v = &vr;
            bf_verdict_read(&g_s, pub, i, res->n_verdicts, res->n_verdict_extras, v);
            ck_assert_uint_eq(v->cluster_ref, g_cluster);
            uint32_t len = 0;
            const char *g = bf_str(&g_s, v->group_ref, &len);
            ck_assert_ptr_nonnull(g);
            unsigned long long ggen;
            int k;
            ck_assert_int_eq(sscanf(g, "gang-%llu-%d", &ggen, &k), 2);
            ck_assert_uint_eq(ggen, gen / 2);
            ck_assert(k >= 0 && k < n && !seen[k]);
            seen[k] = true;
            ck_assert_uint_eq(v->need_profile_ref, prof[k]);
        }
    }
    bf_cycle_free(c);
}
END_TEST

/* When the state segment's file cannot grow (here RLIMIT_FSIZE with the
 * verdict table backing nothing; tmpfs full in the field) the publish leaves
 * rows out: every one is counted in verdicts_dropped, the result says how many
 * it holds, and once the file can grow the next publish is whole again and
 * counts nothing. */
START_TEST(verdict_rows_the_state_file_cannot_hold_are_counted_not_hidden)
{
    add_idle_machines(8, NULL);
    struct bf_cycle *c = new_cycle(false);
    struct bf_cycle_report rep;
    const int n = 5;
    uint32_t prof[8];
    publish_groups(2, n, prof);
    signal(SIGXFSZ, SIG_IGN);
    struct bf_seg_header *h = g_s.base[BF_SEG_STATE];
    atomic_store(&h->grown, 0); /* the verdict table backs nothing yet */
    struct rlimit rl, none;
    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &rl), 0);
    none = (struct rlimit){.rlim_cur = 0, .rlim_max = rl.rlim_max};
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &none), 0);
    uint64_t d0 = atomic_load(&g_s.st->cycle.verdicts_dropped);
    ck_assert_int_eq(bf_cycle_run_once(c, 1000000000LL, &rep), 0);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
    uint32_t pub = atomic_load(&g_s.st->published);
    ck_assert_uint_eq(g_s.st->result[pub].n_verdicts, 0);
    ck_assert_uint_eq(atomic_load(&g_s.st->cycle.verdicts_dropped), d0 + (uint64_t)n);
    /* the file can grow again: the next publish holds every row */
    publish_groups(4, n, prof);
    ck_assert_int_eq(bf_cycle_run_once(c, 2000000000LL, &rep), 0);
    pub = atomic_load(&g_s.st->published);
    ck_assert_uint_eq(g_s.st->result[pub].n_verdicts, (uint32_t)n);
    ck_assert_uint_eq(atomic_load(&g_s.st->cycle.verdicts_dropped), d0 + (uint64_t)n);
    bf_cycle_free(c);
}
END_TEST

/* What the cycle publishes (emit.c writes the cells straight from the
 * engine's verdicts) reads back, through bf_verdict_read, as the engine's
 * verdict field by field, the extra cell's details included: here a Need
 * for 5 GPU units with 2 Idle machines, unsatisfied with a residual deficit
 * and matching supply. */
START_TEST(published_verdicts_read_back_as_the_engines_details_included)
{
    add_idle_machines(2, NULL);
    publish_rollup(5, 1);
    struct bf_cycle *c = new_cycle(false);
    struct bf_cycle_report rep;
    ck_assert_int_eq(bf_cycle_run_once(c, 1000000000LL, &rep), 0);
    ck_assert(c->have_res);
    const struct bf_engine_result *r = &c->res;
    uint32_t pub = atomic_load(&g_s.st->published);
    const struct bf_cycle_result *res = &g_s.st->result[pub];
    ck_assert_uint_eq(res->n_verdicts, r->n_verdicts);
    ck_assert_uint_ge(res->n_verdicts, 1);
    bool any_detail = false;
    for (uint32_t i = 0; i < res->n_verdicts; i++) {
        const struct bf_engine_verdict *e = &r->verdicts[i];
        struct bf_verdict_row v;
        bf_verdict_read(&g_s, pub, i, res->n_verdicts, res->n_verdict_extras, &v);
        ck_assert_uint_eq(v.cluster_ref, g_cluster);
        ck_assert_int_eq(v.arrival_ns, e->arrival_ns);
        for (int d = 0; d < BF_MAX_DIMS; d++) {
            ck_assert_int_eq(v.aggregate[d], e->aggregate.v[d]);
            ck_assert_int_eq(v.min_unit[d], e->min_unit.v[d]);
            ck_assert_int_eq(v.residual_deficit[d], e->residual_deficit.v[d]);
            ck_assert_int_eq(v.capacity_freed[d], e->preemption.capacity_freed.v[d]);
            any_detail |= e->residual_deficit.v[d] != 0;
        }
        ck_assert_int_eq(v.claimed_machine_count, (int32_t)e->claimed_count);
        ck_assert_int_eq(v.bootstrap_count, (int32_t)e->bootstrap_count);
        ck_assert_int_eq(v.provision_count, (int32_t)e->provision_count);
        ck_assert_int_eq(v.satisfied, e->satisfied);
        ck_assert_int_eq(v.unmet_reason, e->unmet_reason);
        ck_assert_int_eq(v.has_matching_supply, e->has_matching_supply);
        ck_assert_int_eq(v.matching_idle, (int32_t)e->matching_supply.idle);
        ck_assert_int_eq(v.matching_configured, (int32_t)e->matching_supply.configured);
        ck_assert_int_eq(v.matching_speculative, (int32_t)e->matching_supply.speculative);
        ck_assert_int_eq(v.has_preemption, e->has_preemption);
        ck_assert_int_eq(v.victims_found, (int32_t)e->preemption.victims_found);
        ck_assert_str_eq(v.same_domain, e->same_domain ? e->same_domain : "");
        ck_assert_uint_eq(v.n_same_candidates, e->n_same_candidates);
    }
    ck_assert_msg(any_detail, "the scenario must give a verdict an extra cell");
    ck_assert_uint_ge(res->n_verdict_extras, 1);
    bf_cycle_free(c);
}
END_TEST

START_TEST(max_actions_defers_the_tail_and_asks_for_another_cycle)
{
    add_idle_machines(4, NULL);
    publish_rollup(4, 1);
    struct bf_cycle_opts o = {.reclaim_cap_fraction = 0.05, .max_actions = 2};
    struct bf_cycle *c;
    ck_assert_int_eq(bf_cycle_new(&g_s, &o, &c), 0);
    struct bf_cycle_report rep;
    ck_assert_int_eq(bf_cycle_run_once(c, 1000000000LL, &rep), 0);
    ck_assert_uint_eq(rep.decided, 4);
    ck_assert_uint_eq(rep.deferred, 2);
    ck_assert_uint_eq(rep.enqueued, 2);
    ck_assert(rep.wake_again);
    ck_assert_uint_eq(atomic_load(&g_s.st->cycle.actions_deferred), 2);
    ck_assert_uint_eq(atomic_load(&g_s.st->cycle.actions_total[BF_ACTION_BOOTSTRAP]), 2);
    struct bf_action_msg m[8];
    ck_assert_int_eq(drain_actions(m, 8), 2);
    bf_cycle_free(c);
}
END_TEST

START_TEST(a_full_actions_ring_drops_the_rest_and_undoes_their_marks)
{
    uint32_t slots[4];
    add_idle_machines(4, slots);
    publish_rollup(3, 1);
    /* fill the ring but one slot */
    struct bf_action_msg filler;
    memset(&filler, 0, sizeof filler);
    filler.slot = UINT32_MAX;
    uint64_t cap = g_s.ring[BF_RING_ACTIONS]->capacity;
    for (uint64_t i = 0; i + 1 < cap; i++)
        ck_assert_int_eq(bf_ring_push(&g_s, BF_RING_ACTIONS, &filler), 0);
    struct bf_cycle *c = new_cycle(false);
    struct bf_cycle_report rep;
    ck_assert_int_eq(bf_cycle_run_once(c, 1000000000LL, &rep), 0);
    ck_assert_uint_eq(rep.decided, 3);
    ck_assert_uint_eq(rep.enqueued, 1);
    ck_assert_uint_eq(rep.dropped, 2);
    ck_assert_uint_eq(atomic_load(&g_s.st->cycle.actions_dropped), 2);
    ck_assert_uint_eq(atomic_load(&g_s.st->cycle.actions_total[BF_ACTION_BOOTSTRAP]), 3);
    int in_flight = 0;
    for (int i = 0; i < 4; i++)
        in_flight += bf_pending(&g_s, slots[i]);
    ck_assert_int_eq(in_flight, 1); /* only the pushed action marks its slot */
    /* the executor drains the ring: the next cycle enqueues the two dropped */
    struct bf_action_msg m;
    uint64_t last_slot = UINT32_MAX;
    while (bf_ring_pop(&g_s, BF_RING_ACTIONS, &m) == 0)
        last_slot = m.slot;
    ck_assert_uint_ne(last_slot, UINT32_MAX);
    ck_assert_int_eq(bf_cycle_run_once(c, 2000000000LL, &rep), 0);
    ck_assert_uint_eq(rep.enqueued, 2);
    ck_assert_uint_eq(rep.deduped, 1);
    bf_cycle_free(c);
}
END_TEST

/* Go's TestActuationPaused_ReportingContinues (and the rest of rail 3's
 * contract): with the kill switch on, every cycle still decides, publishes
 * its verdicts and shortfall ledger (the shortfall ages), counts the
 * suppressed actions, and nothing executes (no action for the executor, no
 * in-flight mark, the Idle machine stays Idle). */
START_TEST(paused_cycles_keep_deciding_and_reporting_and_execute_nothing)
{
    uint32_t slot = add_machine("i-00", BF_STATE_IDLE, 0);
    publish_rollup(3, 1); /* 3 GPU machines wanted, 1 exists */
    struct bf_cycle *c = new_cycle(true);
    for (int k = 1; k <= 3; k++) {
        struct bf_cycle_report rep;
        ck_assert_int_eq(bf_cycle_run_once(c, k * 1000000000LL, &rep), 0);
        ck_assert_uint_eq(rep.decided, 1); /* Bootstrap i-00, every cycle */
        ck_assert_uint_eq(rep.suppressed, 1);
        ck_assert_uint_eq(rep.enqueued, 0);
        ck_assert_uint_eq(rep.unsatisfied, 1);
        struct bf_cycle_result *res = malloc(sizeof *res);
        ck_assert_ptr_nonnull(res);
        ck_assert_int_eq(bf_result_read(&g_s, res, NULL), 0);
        ck_assert_uint_eq(res->cycle, rep.cycle);
        ck_assert_uint_eq(res->unsatisfied, 1);
        ck_assert_uint_eq(res->n_verdicts, 1);
        ck_assert_uint_eq(res->n_shortfalls, 1);
        ck_assert_int_eq(res->shortfalls[0].age_cycles, k); /* the shortfall keeps aging */
        ck_assert_int_eq(res->shortfalls[0].deficit[bf_dim_lookup(&g_s, "nvidia.com/gpu")], 16000);
        free(res);
        struct bf_ledger_snapshot v = {0};
        struct bf_ledger_filter f = {0};
        ck_assert_int_eq(bf_ledger_snapshot(&g_s, &f, &v, NULL), 0);
        ck_assert_uint_eq(v.n, 1);
        ck_assert(!v.rows[0].satisfied);
        ck_assert_int_eq(v.rows[0].bootstrap_count, 1);
        bf_ledger_snapshot_free(&v);
        struct bf_machine_rec r;
        ck_assert_int_eq(bf_inv_read(&g_s, slot, &r), 0);
        ck_assert_uint_eq(r.state, BF_STATE_IDLE);
        ck_assert(!bf_pending(&g_s, slot));
        struct bf_action_msg m[4];
        int n = drain_actions(m, 4);
        ck_assert_int_eq(n, 1); /* for the audit log only */
        ck_assert_uint_eq(m[0].disposition, BF_DISP_SUPPRESSED);
    }
    ck_assert_uint_eq(atomic_load(&g_s.st->cycle.actions_suppressed[BF_ACTION_BOOTSTRAP]), 3);
    ck_assert_uint_eq(atomic_load(&g_s.st->cycle.actions_total[BF_ACTION_BOOTSTRAP]), 0);
    ck_assert_uint_eq(atomic_load(&g_s.st->cycle.cycles), 3);
    bf_cycle_free(c);
}
END_TEST

/* Go's TestMetricsWarmup_SkipsCyclesUntilCount: with --metrics-warmup-cycles
 * N the first N cycles are not observed in the cycle and phase duration
 * histograms; the cycle counter and everything else count every cycle. */
START_TEST(warm_up_cycles_are_not_observed_in_the_duration_histograms)
{
    add_machine("i-00", BF_STATE_IDLE, 0);
    publish_rollup(1, 1);
    struct bf_cycle_opts o = {.reclaim_cap_fraction = 0.05, .metrics_warmup_cycles = 3};
    struct bf_cycle *c;
    ck_assert_int_eq(bf_cycle_new(&g_s, &o, &c), 0);
    struct bf_stats_cycle *st = &g_s.st->cycle;
    for (int k = 1; k <= 5; k++) {
        struct bf_cycle_report rep;
        ck_assert_int_eq(bf_cycle_run_once(c, k * 1000000000LL, &rep), 0);
        uint64_t want = k > 3 ? (uint64_t)(k - 3) : 0;
        ck_assert_uint_eq(atomic_load(&st->cycle_duration.count), want);
        for (int p = 0; p < BF_PHASE_COUNT; p++)
            ck_assert_uint_eq(atomic_load(&st->phase_duration[p].count), want);
        ck_assert_uint_eq(atomic_load(&st->cycles), (uint64_t)k);
    }
    bf_cycle_free(c);
    /* without a warm-up every cycle is observed */
    o.metrics_warmup_cycles = 0;
    ck_assert_int_eq(bf_cycle_new(&g_s, &o, &c), 0);
    struct bf_cycle_report rep;
    ck_assert_int_eq(bf_cycle_run_once(c, 6000000000LL, &rep), 0);
    ck_assert_uint_eq(atomic_load(&st->cycle_duration.count), 3);
    bf_cycle_free(c);
}
END_TEST

/* ---- a republished unchanged rollup (only its arrival moved) ---- */

struct act {
    uint32_t kind, slot, cluster_ref, need_profile_ref;
};

/* one paused cycle at time t: its decided actions (suppressed, audit only) */
static int decide(struct bf_cycle *c, int64_t t, struct bf_cycle_report *rep, struct act *out,
                  int max)
{
    ck_assert_int_eq(bf_cycle_run_once(c, t, rep), 0);
    struct bf_action_msg m[16];
    int n = drain_actions(m, 16);
    ck_assert_int_le(n, max);
    for (int i = 0; i < n; i++)
        out[i] = (struct act){m[i].kind, m[i].slot, m[i].cluster_ref, m[i].need_profile_ref};
    return n;
}

/* cluster idx's one-row rollup of `units` GPU units at arrival `arrival`,
 * written fresh into row `row` with generation + 1, as the session does (a
 * changed rollup: the rows carry the arrival, rows_generation = the new
 * generation); record_rows_gen false: a writer that leaves rows_generation 0 */
static void publish_fresh(uint32_t idx, uint32_t name, uint32_t row, int units, int64_t arrival,
                          bool record_rows_gen)
{
    struct bf_cluster_rec old;
    ck_assert_int_eq(bf_cluster_read(&g_s, idx, &old, NULL), 0);
    struct bf_cluster_rec c = live_cluster(old.generation + 1);
    c.name_ref = name;
    c.rows_generation = record_rows_gen ? c.generation : 0;
    struct bf_need_row r;
    memset(&r, 0, sizeof r);
    r.profile_ref = g_need_prof;
    r.cluster_ref = name;
    int gpu = bf_dim_lookup(&g_s, "nvidia.com/gpu");
    r.aggregate[gpu] = 8000LL * units;
    r.min_unit[gpu] = 8000;
    r.arrival_ns = arrival;
    memcpy(&g_s.rows[row], &r, sizeof r);
    c.rows_off = row;
    c.rows_count = 1;
    bf_cluster_write(&g_s, idx, &c);
    if (atomic_load(&g_s.needs->n_clusters) < idx + 1)
        atomic_store(&g_s.needs->n_clusters, idx + 1);
    atomic_fetch_add(&g_s.needs->change_counter, 1);
}

/* the session's repeat path (src/session/ingest.c): same extent, rows
 * untouched, generation + 1, the new arrival in the cluster row,
 * rows_generation kept */
static void republish(uint32_t idx, int64_t arrival)
{
    struct bf_cluster_rec c;
    ck_assert_int_eq(bf_cluster_read(&g_s, idx, &c, NULL), 0);
    c.rows_arrival_ns = arrival;
    c.generation++;
    bf_cluster_write(&g_s, idx, &c);
    atomic_fetch_add(&g_s.needs->change_counter, 1);
}

/* a new controller reads every row (the full reload) and must decide
 * exactly what the continuing one decided */
static void assert_full_reload_decides(const struct act *want, int n_want, int64_t t)
{
    struct bf_cycle *c = new_cycle(true);
    struct bf_cycle_report rep;
    struct act got[16];
    int n = decide(c, t, &rep, got, 16);
    ck_assert_uint_eq(rep.clusters_republished, 0);
    ck_assert_uint_eq(rep.clusters_reread, 2);
    ck_assert_int_eq(n, n_want);
    for (int i = 0; i < n; i++) {
        ck_assert_uint_eq(got[i].kind, want[i].kind);
        ck_assert_uint_eq(got[i].slot, want[i].slot);
        ck_assert_uint_eq(got[i].cluster_ref, want[i].cluster_ref);
        ck_assert_uint_eq(got[i].need_profile_ref, want[i].need_profile_ref);
    }
    bf_cycle_free(c);
}

/* Two clusters of one priority compete for two machines: the earlier
 * arrival wins (demand order: priority desc, arrival asc, cluster asc). A
 * republished repeat moves only the arrival; the cycle takes it without
 * reading the rows and decides exactly what a full reload decides. */
START_TEST(a_republished_repeat_moves_only_the_arrival_and_decides_as_a_full_reload)
{
    add_idle_machines(2, NULL);
    uint32_t b = intern("cluster-b");
    publish_fresh(0, g_cluster, 0, 2, 10, true); /* cluster-a first */
    publish_fresh(1, b, 1, 2, 20, true);
    struct bf_cycle *c = new_cycle(true);
    struct bf_cycle_report rep;
    struct act x[16];
    int n = decide(c, 1000000000LL, &rep, x, 16);
    ck_assert_int_eq(n, 2);
    ck_assert_uint_eq(x[0].cluster_ref, g_cluster);
    ck_assert_uint_eq(x[1].cluster_ref, g_cluster);

    /* cluster-a repeats later than cluster-b: cluster-b is served first */
    republish(0, 30);
    n = decide(c, 2000000000LL, &rep, x, 16);
    ck_assert_uint_eq(rep.clusters_reread, 1);
    ck_assert_uint_eq(rep.clusters_republished, 1);
    ck_assert_int_eq(n, 2);
    ck_assert_uint_eq(x[0].kind, BF_ACTION_BOOTSTRAP);
    ck_assert_uint_eq(x[0].cluster_ref, b);
    ck_assert_uint_eq(x[1].cluster_ref, b);
    struct bf_ledger_snapshot v = {0};
    struct bf_ledger_filter f = {0};
    ck_assert_int_eq(bf_ledger_snapshot(&g_s, &f, &v, NULL), 0);
    ck_assert_uint_eq(v.n, 2);
    for (uint32_t i = 0; i < v.n; i++)
        ck_assert_int_eq(v.rows[i].arrival_ns, v.rows[i].cluster_ref == b ? 20 : 30);
    bf_ledger_snapshot_free(&v);
    bf_cycle_free(c);
    assert_full_reload_decides(x, n, 3000000000LL);

    /* several repeats between two cycles (generations skipped): the rows
     * are still the ones written at rows_generation; an earlier arrival
     * puts cluster-a back in front */
    c = new_cycle(true);
    decide(c, 4000000000LL, &rep, x, 16);
    republish(0, 40);
    republish(0, 5);
    n = decide(c, 5000000000LL, &rep, x, 16);
    ck_assert_uint_eq(rep.clusters_republished, 1);
    ck_assert_int_eq(n, 2);
    ck_assert_uint_eq(x[0].cluster_ref, g_cluster);
    bf_cycle_free(c);
    assert_full_reload_decides(x, n, 6000000000LL);

    /* changed rollups between two cycles, the last one back on the extent
     * the cycle read and then repeated: new rows_generation, read in full
     * (cluster-b now wants 1 machine, so each cluster gets one) */
    c = new_cycle(true);
    decide(c, 7000000000LL, &rep, x, 16);
    publish_fresh(1, b, 2, 2, 3, true);
    publish_fresh(1, b, 1, 1, 3, true);
    republish(1, 4);
    n = decide(c, 8000000000LL, &rep, x, 16);
    ck_assert_uint_eq(rep.clusters_reread, 1);
    ck_assert_uint_eq(rep.clusters_republished, 0);
    ck_assert_int_eq(n, 2);
    ck_assert_uint_eq(x[0].cluster_ref, b);
    ck_assert_uint_eq(x[1].cluster_ref, g_cluster);
    bf_cycle_free(c);
    assert_full_reload_decides(x, n, 9000000000LL);
}
END_TEST

/* A writer that does not record rows_generation: a repeat is taken without
 * reading rows only when the generation moved by exactly one on the same
 * extent; two publishes between cycles read the rows. */
START_TEST(without_rows_generation_only_a_single_repeat_skips_the_rows)
{
    add_idle_machines(2, NULL);
    uint32_t b = intern("cluster-b");
    publish_fresh(0, g_cluster, 0, 2, 10, false);
    publish_fresh(1, b, 1, 2, 20, false);
    struct bf_cycle *c = new_cycle(true);
    struct bf_cycle_report rep;
    struct act x[16];
    decide(c, 1000000000LL, &rep, x, 16);
    republish(0, 30);
    int n = decide(c, 2000000000LL, &rep, x, 16);
    ck_assert_uint_eq(rep.clusters_republished, 1);
    ck_assert_uint_eq(x[0].cluster_ref, b);
    republish(0, 40);
    republish(0, 5);
    n = decide(c, 3000000000LL, &rep, x, 16);
    ck_assert_uint_eq(rep.clusters_reread, 1);
    ck_assert_uint_eq(rep.clusters_republished, 0);
    ck_assert_uint_eq(x[0].cluster_ref, g_cluster);
    /* a changed rollup elsewhere and back to the same extent, then a
     * repeat, all between two cycles: read in full */
    publish_fresh(1, b, 2, 2, 3, false);
    publish_fresh(1, b, 1, 1, 3, false);
    republish(1, 4);
    n = decide(c, 4000000000LL, &rep, x, 16);
    ck_assert_uint_eq(rep.clusters_republished, 0);
    ck_assert_int_eq(n, 2);
    ck_assert_uint_eq(x[0].cluster_ref, b);
    bf_cycle_free(c);
    assert_full_reload_decides(x, n, 5000000000LL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cycle");
    TCase *tc = tcase_create("controller");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, idle_supply_is_bootstrapped_once_with_in_flight_marks);
    tcase_add_test(tc, mirror_follows_executor_changes_without_rescanning);
    tcase_add_test(tc, a_rescan_reads_the_records_and_ids_by_copy);
    tcase_add_test(tc, change_log_overflow_forces_one_counted_rescan);
    tcase_add_test(tc, no_reclaim_before_first_rollup_then_capped_after_an_empty_one);
    tcase_add_test(tc, bootstraps_of_a_cluster_without_a_session_are_held_back_until_it_returns);
    tcase_add_test(tc, kill_switch_suppresses_every_action_without_in_flight_marks);
    tcase_add_test(tc, ledger_refs_stay_exact_while_groups_are_replaced);
    tcase_add_test(tc, max_actions_defers_the_tail_and_asks_for_another_cycle);
    tcase_add_test(tc, a_full_actions_ring_drops_the_rest_and_undoes_their_marks);
    tcase_add_test(tc, paused_cycles_keep_deciding_and_reporting_and_execute_nothing);
    tcase_add_test(tc, warm_up_cycles_are_not_observed_in_the_duration_histograms);
    tcase_add_test(tc, a_republished_repeat_moves_only_the_arrival_and_decides_as_a_full_reload);
    tcase_add_test(tc, without_rows_generation_only_a_single_repeat_skips_the_rows);
    tcase_add_test(tc, verdict_rows_the_state_file_cannot_hold_are_counted_not_hidden);
    tcase_add_test(tc, published_verdicts_read_back_as_the_engines_details_included);
    suite_add_tcase(s, tc);
    return check_run(s);
}
