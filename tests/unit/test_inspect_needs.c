/*
 * test_inspect_needs.c — the read side of the verdict ledger and the
 * InspectNeeds frames (bigfleet/ledger.h): snapshots under the publish_seq
 * rule (nothing published, cluster filter, limit, order kept, memory
 * bound, never a torn copy while a writer publishes as fast as it can),
 * the header frame and the NeedView builder field by field (when
 * residual_deficit, matching_supply and preemption are omitted; the need
 * rebuilt from the profile blob; group bytes with NUL; same_candidates).
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bigfleet/ledger.h"
#include "bigfleet/v1alpha1/shardread.pb-c.h"

#include "shm_fixture.h"
#include "check_run.h"

static struct bf_blob_cache *g_c;

static void setup(void)
{
    shm_fixture_create("inspect-needs", NULL, 1);
    g_c = bf_blob_cache_new();
}

static void teardown(void)
{
    bf_blob_cache_free(g_c);
    shm_fixture_remove();
}

static uint32_t ref_of(const void *b, uint32_t len)
{
    uint32_t r = 0;
    ck_assert_int_eq(bf_str_intern(&g_s, b, len, &r), 0);
    return r;
}

static uint32_t cref(const char *s)
{
    return ref_of(s, (uint32_t)strlen(s));
}

/* Publishes rows as the cycle does (src/cycle/emit.c): publish_seq odd,
 * fill the other buffer, flip, publish_seq even. */
static void publish(uint64_t cycle, int64_t at, const struct bf_verdict_row *rows, uint32_t n)
{
    struct bf_state_main *st = g_s.st;
    uint64_t seq = atomic_load_explicit(&st->publish_seq, memory_order_relaxed);
    atomic_store_explicit(&st->publish_seq, seq + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    uint32_t b = atomic_load_explicit(&st->published, memory_order_relaxed) ^ 1u;
    struct bf_cycle_result *r = &st->result[b];
    r->cycle = cycle;
    r->computed_at_ns = at;
    struct bf_verdict_writer vw;
    ck_assert_uint_eq(bf_verdict_write_begin(&vw, &g_s, b, n), n);
    for (uint32_t i = 0; i < n; i++)
        bf_verdict_write(&vw, &rows[i]);
    bf_verdict_write_end(&vw, r);
    atomic_store_explicit(&st->published, b, memory_order_release);
    atomic_store_explicit(&st->publish_seq, seq + 2, memory_order_release);
}

static struct bf_verdict_row row_in(uint32_t cluster_ref, int64_t arrival)
{
    struct bf_verdict_row r;
    memset(&r, 0, sizeof r);
    r.cluster_ref = cluster_ref;
    r.arrival_ns = arrival;
    r.satisfied = 1;
    return r;
}

START_TEST(nothing_published_is_cycle_zero_with_no_rows)
{
    struct bf_ledger_snapshot s;
    struct bf_ledger_filter f = {0};
    ck_assert_int_eq(bf_ledger_snapshot(&g_s, &f, &s, NULL), 0);
    ck_assert_uint_eq(s.cycle, 0);
    ck_assert_int_eq(s.computed_at_ns, 0);
    ck_assert_uint_eq(s.total, 0);
    ck_assert_uint_eq(s.n, 0);
    bf_ledger_snapshot_free(&s);
    /* the header says "not yet computed": cycle 0, timestamp 0, no total */
    struct bf_ledger_buf b = {0};
    ck_assert_int_eq(bf_ledger_encode_header(0, 0, 0, &b), 0);
    Bigfleet__V1alpha1__InspectNeedsResponse *m =
        bigfleet__v1alpha1__inspect_needs_response__unpack(NULL, b.len, b.data);
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(m->frame_case, BIGFLEET__V1ALPHA1__INSPECT_NEEDS_RESPONSE__FRAME_HEADER);
    ck_assert_int_eq(m->header->cycle, 0);
    ck_assert_int_eq(m->header->computed_at_unix_nanos, 0);
    ck_assert_int_eq(m->header->total_needs, 0);
    bigfleet__v1alpha1__inspect_needs_response__free_unpacked(m, NULL);
    bf_ledger_buf_free(&b);
}
END_TEST

START_TEST(filter_keeps_ledger_order_and_limit_cuts_after_counting)
{
    uint32_t a = cref("alpha"), bb = cref("beta");
    struct bf_verdict_row rows[7];
    uint32_t who[7] = {a, bb, bb, a, bb, a, bb};
    for (int i = 0; i < 7; i++)
        rows[i] = row_in(who[i], 100 + i);
    publish(41, 1234567, rows, 7);
    struct bf_ledger_snapshot s;
    struct bf_ledger_filter f = {.by_cluster = true, .cluster_ref = bb};
    ck_assert_int_eq(bf_ledger_snapshot(&g_s, &f, &s, NULL), 0);
    ck_assert_uint_eq(s.cycle, 41);
    ck_assert_int_eq(s.computed_at_ns, 1234567);
    ck_assert_uint_eq(s.total, 4);
    ck_assert_uint_eq(s.n, 4);
    int64_t want[4] = {101, 102, 104, 106};
    for (int i = 0; i < 4; i++) {
        ck_assert_uint_eq(s.rows[i].cluster_ref, bb);
        ck_assert_int_eq(s.rows[i].arrival_ns, want[i]);
    }
    bf_ledger_snapshot_free(&s);
    /* limit: the first two in order, total still counts all four */
    f.limit = 2;
    ck_assert_int_eq(bf_ledger_snapshot(&g_s, &f, &s, NULL), 0);
    ck_assert_uint_eq(s.total, 4);
    ck_assert_uint_eq(s.n, 2);
    ck_assert_int_eq(s.rows[0].arrival_ns, 101);
    ck_assert_int_eq(s.rows[1].arrival_ns, 102);
    bf_ledger_snapshot_free(&s);
    /* no filter, limit 3 of 7 */
    struct bf_ledger_filter all = {.limit = 3};
    ck_assert_int_eq(bf_ledger_snapshot(&g_s, &all, &s, NULL), 0);
    ck_assert_uint_eq(s.total, 7);
    ck_assert_uint_eq(s.n, 3);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(s.rows[i].arrival_ns, 100 + i);
    bf_ledger_snapshot_free(&s);
    /* a cluster in no row: nothing */
    struct bf_ledger_filter none = {.by_cluster = true, .cluster_ref = cref("gamma")};
    ck_assert_int_eq(bf_ledger_snapshot(&g_s, &none, &s, NULL), 0);
    ck_assert_uint_eq(s.cycle, 41);
    ck_assert_uint_eq(s.total, 0);
    ck_assert_uint_eq(s.n, 0);
    bf_ledger_snapshot_free(&s);
}
END_TEST

START_TEST(memory_bound_refuses_instead_of_copying)
{
    struct bf_verdict_row rows[10];
    for (int i = 0; i < 10; i++)
        rows[i] = row_in(cref("alpha"), i);
    publish(3, 1, rows, 10);
    struct bf_ledger_snapshot s;
    struct bf_ledger_filter f = {.max_rows = 9};
    ck_assert_int_eq(bf_ledger_snapshot(&g_s, &f, &s, NULL), -ENOBUFS);
    ck_assert_ptr_null(s.rows);
    f.limit = 9; /* the limit brings it under the bound */
    ck_assert_int_eq(bf_ledger_snapshot(&g_s, &f, &s, NULL), 0);
    ck_assert_uint_eq(s.n, 9);
    ck_assert_uint_eq(s.total, 10);
    bf_ledger_snapshot_free(&s);
    struct bf_ledger_filter fc = {.by_cluster = true, .cluster_ref = cref("alpha"), .max_rows = 4};
    ck_assert_int_eq(bf_ledger_snapshot(&g_s, &fc, &s, NULL), -ENOBUFS);
    bf_ledger_snapshot_free(&s);
}
END_TEST

/* ------------------------------------------------------------ torn copies */

struct racer {
    volatile int stop;
    uint64_t published;
};

/* Every row of cycle k carries k in arrival, claimed count and a residual
 * dimension; the counts table is filled with k too. */
static void *writer(void *arg)
{
    struct racer *w = arg;
    static struct bf_verdict_row rows[256];
    for (uint64_t k = 1; !w->stop; k++) {
        uint32_t n = 1 + (uint32_t)(k % 200);
        for (uint32_t i = 0; i < n; i++) {
            memset(&rows[i], 0, sizeof rows[i]);
            rows[i].cluster_ref = i % 2 ? 8 : 16;
            rows[i].arrival_ns = (int64_t)k;
            rows[i].claimed_machine_count = (int32_t)k;
            rows[i].residual_deficit[3] = (int64_t)k;
        }
        struct bf_state_main *st = g_s.st;
        uint64_t seq = atomic_load_explicit(&st->publish_seq, memory_order_relaxed);
        atomic_store_explicit(&st->publish_seq, seq + 1, memory_order_relaxed);
        atomic_thread_fence(memory_order_release);
        uint32_t b = atomic_load_explicit(&st->published, memory_order_relaxed) ^ 1u;
        struct bf_cycle_result tmp;
        memset(&tmp, 0, sizeof tmp);
        tmp.cycle = k;
        tmp.computed_at_ns = (int64_t)k;
        tmp.shortfalls_total = (uint32_t)k;
        tmp.counts.total_machines = (uint32_t)k;
        tmp.counts.by_state[4] = (uint32_t)k;
        struct bf_verdict_writer vw;
        bf_verdict_write_begin(&vw, &g_s, b, n);
        for (uint32_t i = 0; i < n; i++)
            bf_verdict_write(&vw, &rows[i]);
        bf_verdict_write_end(&vw, &tmp);
        bf_shm_store_words(&st->result[b], &tmp, sizeof tmp);
        atomic_store_explicit(&st->published, b, memory_order_release);
        atomic_store_explicit(&st->publish_seq, seq + 2, memory_order_release);
        w->published = k;
    }
    return NULL;
}

START_TEST(a_copy_is_never_torn_while_the_cycle_publishes_continuously)
{
    struct racer w = {0};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, writer, &w), 0);
    int ok = 0, busy = 0;
    struct bf_cycle_result *r = malloc(sizeof *r);
    ck_assert_ptr_nonnull(r);
    for (int i = 0; i < 4000; i++) {
        struct bf_ledger_snapshot s;
        struct bf_ledger_filter f = {.by_cluster = (i & 1) != 0, .cluster_ref = 8};
        int rc = bf_ledger_snapshot(&g_s, &f, &s, NULL);
        if (rc == -EAGAIN) {
            busy++;
            continue;
        }
        ck_assert_int_eq(rc, 0);
        for (uint32_t j = 0; j < s.n; j++) {
            ck_assert_int_eq(s.rows[j].arrival_ns, (int64_t)s.cycle);
            ck_assert_int_eq(s.rows[j].claimed_machine_count, (int32_t)s.cycle);
            ck_assert_int_eq(s.rows[j].residual_deficit[3], (int64_t)s.cycle);
        }
        if (s.cycle) {
            uint32_t n = 1 + (uint32_t)(s.cycle % 200);
            ck_assert_uint_eq(s.total, f.by_cluster ? n / 2 : n);
            ok++;
        }
        bf_ledger_snapshot_free(&s);
        rc = bf_result_read(&g_s, r, NULL);
        if (rc == 0 && r->cycle) {
            ck_assert_uint_eq(r->counts.total_machines, (uint32_t)r->cycle);
            ck_assert_uint_eq(r->counts.by_state[4], (uint32_t)r->cycle);
            ck_assert_uint_eq(r->shortfalls_total, (uint32_t)r->cycle);
        } else if (rc) {
            ck_assert_int_eq(rc, -EAGAIN);
        }
    }
    w.stop = 1;
    pthread_join(t, NULL);
    free(r);
    ck_assert_msg(ok > 0, "no consistent copy at all (%d busy)", busy);
    ck_assert_uint_gt(w.published, 10);
}
END_TEST

/* ------------------------------------------------------------ NeedView */

static Bigfleet__V1alpha1__NeedView *decode(struct bf_ledger_buf *b,
                                            Bigfleet__V1alpha1__InspectNeedsResponse **keep)
{
    Bigfleet__V1alpha1__InspectNeedsResponse *m =
        bigfleet__v1alpha1__inspect_needs_response__unpack(NULL, b->len, b->data);
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(m->frame_case, BIGFLEET__V1ALPHA1__INSPECT_NEEDS_RESPONSE__FRAME_NEED);
    *keep = m;
    return m->need;
}

static const char *map_get_agg(const Bigfleet__V1alpha1__CapacityNeed *n, const char *k)
{
    for (size_t i = 0; i < n->n_aggregate_resources; i++)
        if (strcmp(n->aggregate_resources[i]->key, k) == 0)
            return n->aggregate_resources[i]->value;
    return NULL;
}

static const char *res_get(const Bigfleet__V1alpha1__Resources *r, const char *k)
{
    for (size_t i = 0; r && i < r->n_resources; i++)
        if (strcmp(r->resources[i]->key, k) == 0)
            return r->resources[i]->value;
    return NULL;
}

/* A Same + In need with a spread, priority 1000, buckets 16/19. */
static uint32_t profile(void)
{
    const char *v1[] = {"m6i.large", "c6i.4xlarge"};
    struct bf_requirement reqs[2] = {
        {.key = "topology.bigfleet/rack", .op = BF_OP_SAME, .n_values = 0, .values = NULL},
        {.key = "node.kubernetes.io/instance-type", .op = BF_OP_IN, .n_values = 2, .values = v1},
    };
    struct bf_spread spr = {.topology_key = "topology.kubernetes.io/zone",
                            .max_skew = 2,
                            .when = BF_WHEN_DO_NOT_SCHEDULE};
    struct bf_need_profile p = {.priority = 1000,
                                .ipb = 16,
                                .rpb = 19,
                                .n_reqs = 2,
                                .reqs = reqs,
                                .n_spread = 1,
                                .spread = &spr};
    uint32_t ref = 0, fp = 0;
    ck_assert_int_eq(bf_nprofile_intern(&g_s, &p, &ref, &fp), 0);
    return ref;
}

START_TEST(needview_of_an_unsatisfied_same_need_carries_every_field)
{
    int cpu = bf_dim_intern(&g_s, "cpu"), mem = bf_dim_intern(&g_s, "memory");
    ck_assert_int_ge(cpu, 0);
    ck_assert_int_ge(mem, 0);
    static const char group[] = "topology.bigfleet/rack\0app=trainer";
    struct bf_verdict_row r;
    memset(&r, 0, sizeof r);
    r.cluster_ref = cref("cl-a");
    r.need_profile_ref = profile();
    r.group_ref = ref_of(group, sizeof group - 1);
    r.arrival_ns = 1700000000123456789LL;
    r.aggregate[cpu] = 16000;
    r.aggregate[mem] = 64LL * 1024 * 1024 * 1024 * 1000;
    r.min_unit[cpu] = 2000;
    r.residual_deficit[cpu] = 6000;
    r.capacity_freed[cpu] = 4000;
    r.claimed_machine_count = 5;
    r.bootstrap_count = 2;
    r.provision_count = 1;
    r.parked_age_cycles = 9;
    r.age_cycles_unmet = 12;
    r.victims_found = 2;
    r.has_preemption = 1;
    r.matching_idle = 3;
    r.matching_configured = 4;
    r.matching_speculative = 64;
    r.matching_capped = 1;
    r.has_matching_supply = 1;
    r.satisfied = 0;
    r.same_satisfiable = 0;
    r.acquisition_parked = 1;
    r.unmet_reason = BF_UNMET_TOPOLOGY_UNSATISFIABLE;
    strcpy(r.same_domain, "rack-7");
    r.n_same_candidates = 2;
    strcpy(r.same_candidates[0].domain, "rack-7");
    r.same_candidates[0].coverage_per_mille = 750;
    strcpy(r.same_candidates[1].domain, "rack-2");
    r.same_candidates[1].coverage_per_mille = 333;
    struct bf_ledger_buf b = {0};
    ck_assert_int_eq(bf_ledger_encode_need(&g_s, g_c, &r, &b), 0);
    Bigfleet__V1alpha1__InspectNeedsResponse *m;
    Bigfleet__V1alpha1__NeedView *v = decode(&b, &m);
    /* the need, rebuilt from the profile blob (canonical order: key asc) */
    const Bigfleet__V1alpha1__CapacityNeed *n = v->need;
    ck_assert_ptr_nonnull(n);
    ck_assert_int_eq(n->priority, 1000);
    ck_assert_int_eq(n->interruption_penalty_bucket, 16);
    ck_assert_int_eq(n->reclamation_penalty_bucket, 19);
    ck_assert_uint_eq(n->n_requirements, 2);
    ck_assert_str_eq(n->requirements[0]->key, "node.kubernetes.io/instance-type");
    ck_assert_int_eq(n->requirements[0]->operator_, BF_OP_IN);
    ck_assert_uint_eq(n->requirements[0]->n_values, 2);
    ck_assert_str_eq(n->requirements[0]->values[0], "c6i.4xlarge");
    ck_assert_str_eq(n->requirements[0]->values[1], "m6i.large");
    ck_assert_str_eq(n->requirements[1]->key, "topology.bigfleet/rack");
    ck_assert_int_eq(n->requirements[1]->operator_, BF_OP_SAME);
    ck_assert_uint_eq(n->n_spread, 1);
    ck_assert_str_eq(n->spread[0]->topology_key, "topology.kubernetes.io/zone");
    ck_assert_int_eq(n->spread[0]->max_skew, 2);
    ck_assert_int_eq(n->spread[0]->when_unsatisfiable, BF_WHEN_DO_NOT_SCHEDULE);
    ck_assert_str_eq(map_get_agg(n, "cpu"), "16");
    ck_assert_str_eq(map_get_agg(n, "memory"), "64Gi");
    ck_assert_uint_eq(n->n_min_unit, 1);
    ck_assert_str_eq(n->min_unit[0]->key, "cpu");
    ck_assert_str_eq(n->min_unit[0]->value, "2");
    ck_assert_uint_eq(n->group.len, sizeof group - 1);
    ck_assert_int_eq(memcmp(n->group.data, group, sizeof group - 1), 0);
    /* the view */
    ck_assert_str_eq(v->cluster_id, "cl-a");
    ck_assert_int_eq(v->arrival_unix_nanos, 1700000000123456789LL);
    ck_assert_str_eq(v->profile_fingerprint,
                     "p=1000|ipb=16|rpb=19|reqs=node.kubernetes.io/instance-type:1:c6i.4xlarge,"
                     "m6i.large;topology.bigfleet/rack:5:;|spr=topology.kubernetes.io/zone:2:1;");
    ck_assert(!v->satisfied);
    ck_assert_ptr_nonnull(v->residual_deficit);
    ck_assert_uint_eq(v->residual_deficit->n_resources, 1);
    ck_assert_str_eq(res_get(v->residual_deficit, "cpu"), "6");
    ck_assert_int_eq(v->claimed_machine_count, 5);
    ck_assert_int_eq(v->bootstrap_count, 2);
    ck_assert_int_eq(v->provision_count, 1);
    ck_assert_str_eq(v->same_domain, "rack-7");
    ck_assert(!v->same_satisfiable);
    ck_assert(v->acquisition_parked);
    ck_assert_int_eq(v->parked_age_cycles, 9);
    ck_assert_int_eq(v->age_cycles_unmet, 12);
    ck_assert_int_eq(v->unmet_reason,
                     BIGFLEET__V1ALPHA1__UNMET_REASON__UNMET_REASON_TOPOLOGY_UNSATISFIABLE);
    ck_assert_ptr_nonnull(v->matching_supply);
    ck_assert_int_eq(v->matching_supply->idle, 3);
    ck_assert_int_eq(v->matching_supply->configured, 4);
    ck_assert_int_eq(v->matching_supply->speculative, 64);
    ck_assert(v->matching_supply->capped);
    ck_assert_ptr_nonnull(v->preemption);
    ck_assert_int_eq(v->preemption->victims_found, 2);
    ck_assert_str_eq(res_get(v->preemption->capacity_freed, "cpu"), "4");
    ck_assert_uint_eq(v->n_same_candidates, 2);
    ck_assert_str_eq(v->same_candidates[0]->domain, "rack-7");
    ck_assert_int_eq(v->same_candidates[0]->coverage_per_mille, 750);
    ck_assert(!v->same_candidates[0]->satisfiable);
    ck_assert_str_eq(v->same_candidates[1]->domain, "rack-2");
    ck_assert_int_eq(v->same_candidates[1]->coverage_per_mille, 333);
    bigfleet__v1alpha1__inspect_needs_response__free_unpacked(m, NULL);
    bf_ledger_buf_free(&b);
}
END_TEST

START_TEST(needview_omits_what_the_adr_says_to_omit)
{
    int cpu = bf_dim_intern(&g_s, "cpu");
    struct bf_verdict_row r;
    memset(&r, 0, sizeof r);
    r.cluster_ref = cref("cl-b");
    r.need_profile_ref = profile();
    r.aggregate[cpu] = 1000;
    /* satisfied: no residual (even a stray one), no matching supply */
    r.satisfied = 1;
    r.residual_deficit[cpu] = 5;
    r.has_matching_supply = 1;
    r.matching_idle = 7;
    /* preemption flagged but no victim: absent */
    r.has_preemption = 1;
    r.victims_found = 0;
    struct bf_ledger_buf b = {0};
    ck_assert_int_eq(bf_ledger_encode_need(&g_s, g_c, &r, &b), 0);
    Bigfleet__V1alpha1__InspectNeedsResponse *m;
    Bigfleet__V1alpha1__NeedView *v = decode(&b, &m);
    ck_assert(v->satisfied);
    ck_assert_ptr_null(v->residual_deficit);
    ck_assert_ptr_null(v->matching_supply);
    ck_assert_ptr_null(v->preemption);
    ck_assert_uint_eq(v->n_same_candidates, 0);
    ck_assert_str_eq(v->same_domain, "");
    ck_assert_int_eq(v->unmet_reason, 0);
    ck_assert_uint_eq(v->need->group.len, 0);
    bigfleet__v1alpha1__inspect_needs_response__free_unpacked(m, NULL);
    /* unsatisfied with an empty deficit vector: still no residual_deficit;
     * matching supply (all zero) present for an unsatisfied row */
    memset(r.residual_deficit, 0, sizeof r.residual_deficit);
    r.satisfied = 0;
    r.matching_idle = 0;
    r.unmet_reason = BF_UNMET_NO_MATCHING_SUPPLY;
    ck_assert_int_eq(bf_ledger_encode_need(&g_s, g_c, &r, &b), 0);
    v = decode(&b, &m);
    ck_assert(!v->satisfied);
    ck_assert_ptr_null(v->residual_deficit);
    ck_assert_ptr_nonnull(v->matching_supply);
    ck_assert_int_eq(v->matching_supply->idle, 0);
    ck_assert_int_eq(v->unmet_reason,
                     BIGFLEET__V1ALPHA1__UNMET_REASON__UNMET_REASON_NO_MATCHING_SUPPLY);
    bigfleet__v1alpha1__inspect_needs_response__free_unpacked(m, NULL);
    /* unsatisfied but the engine did not count supply: absent */
    r.has_matching_supply = 0;
    ck_assert_int_eq(bf_ledger_encode_need(&g_s, g_c, &r, &b), 0);
    v = decode(&b, &m);
    ck_assert_ptr_null(v->matching_supply);
    bigfleet__v1alpha1__inspect_needs_response__free_unpacked(m, NULL);
    bf_ledger_buf_free(&b);
}
END_TEST

START_TEST(needview_with_an_undecodable_profile_is_still_sent_and_flagged)
{
    struct bf_verdict_row r;
    memset(&r, 0, sizeof r);
    r.cluster_ref = cref("cl-c");
    r.need_profile_ref = cref("not a profile blob \x01\x02\xff");
    r.satisfied = 1;
    struct bf_ledger_buf b = {0};
    ck_assert_int_eq(bf_ledger_encode_need(&g_s, g_c, &r, &b), 1);
    Bigfleet__V1alpha1__InspectNeedsResponse *m;
    Bigfleet__V1alpha1__NeedView *v = decode(&b, &m);
    ck_assert_str_eq(v->cluster_id, "cl-c");
    ck_assert_str_eq(v->profile_fingerprint, "");
    ck_assert_uint_eq(v->need->n_requirements, 0);
    bigfleet__v1alpha1__inspect_needs_response__free_unpacked(m, NULL);
    bf_ledger_buf_free(&b);
}
END_TEST

START_TEST(header_counts_saturate_and_carry_the_cycle)
{
    struct bf_ledger_buf b = {0};
    ck_assert_int_eq(bf_ledger_encode_header(77, 1795000000000000001LL, 42, &b), 0);
    Bigfleet__V1alpha1__InspectNeedsResponse *m =
        bigfleet__v1alpha1__inspect_needs_response__unpack(NULL, b.len, b.data);
    ck_assert_int_eq(m->header->cycle, 77);
    ck_assert_int_eq(m->header->computed_at_unix_nanos, 1795000000000000001LL);
    ck_assert_int_eq(m->header->total_needs, 42);
    bigfleet__v1alpha1__inspect_needs_response__free_unpacked(m, NULL);
    ck_assert_int_eq(bf_ledger_encode_header(1, 1, UINT32_MAX, &b), 0);
    m = bigfleet__v1alpha1__inspect_needs_response__unpack(NULL, b.len, b.data);
    ck_assert_int_eq(m->header->total_needs, INT32_MAX);
    bigfleet__v1alpha1__inspect_needs_response__free_unpacked(m, NULL);
    bf_ledger_buf_free(&b);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("inspect_needs");
    TCase *tc = tcase_create("ledger");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, nothing_published_is_cycle_zero_with_no_rows);
    tcase_add_test(tc, filter_keeps_ledger_order_and_limit_cuts_after_counting);
    tcase_add_test(tc, memory_bound_refuses_instead_of_copying);
    tcase_add_test(tc, a_copy_is_never_torn_while_the_cycle_publishes_continuously);
    tcase_add_test(tc, needview_of_an_unsatisfied_same_need_carries_every_field);
    tcase_add_test(tc, needview_omits_what_the_adr_says_to_omit);
    tcase_add_test(tc, needview_with_an_undecodable_profile_is_still_sent_and_flagged);
    tcase_add_test(tc, header_counts_saturate_and_carry_the_cycle);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(suite());
}
