/*
 * test_simprovider_property.c — seeded random properties (B1201–B1205):
 * random metadata maps round-trip byte for byte; random lifecycle sequences
 * with random latencies match an independent model of the four-edge state
 * machine (codes, operation ids, states); multi-shard fenced interleavings
 * produce FAILED_PRECONDITION exactly when the fencing oracle says so; random
 * malformed request bytes never yield FAILED_PRECONDITION and never crash.
 */
#include "simprovider/sim_internal.h"
#include "test_simprovider.h"

static uint64_t rnd(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

START_TEST(b1202_random_metadata_maps_round_trip_byte_for_byte)
{
    struct bf_sim_config c;
    simt_cfg(&c);
    c.seed_speculative = 0;
    c.seed_idle = 4;
    struct bf_sim *s = simt_open(&c);
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    for (int it = 0; it < 300; it++) {
        const char *id = bf_sim_machine_id(s, (size_t)it % bf_sim_machine_count(s));
        size_t n = rnd(&x) % 40;
        struct simt_kv *md = calloc(n + 1, sizeof *md);
        uint8_t(*kb)[24] = calloc(n + 1, 24);
        uint8_t(*vb)[64] = calloc(n + 1, 64);
        for (size_t i = 0; i < n; i++) {
            /* unique keys: an index prefix, then random bytes (NUL included) */
            size_t kl = 2 + rnd(&x) % 20, vl = rnd(&x) % 64;
            kb[i][0] = (uint8_t)(i / 256);
            kb[i][1] = (uint8_t)(i % 256);
            for (size_t k = 2; k < kl; k++)
                kb[i][k] = (uint8_t)rnd(&x);
            for (size_t k = 0; k < vl; k++)
                vb[i][k] = (uint8_t)rnd(&x);
            md[i] = (struct simt_kv){kb[i], kl, vb[i], vl};
        }
        struct simt_buf b = simt_configure_raw(id, "c-prop", md, n, 0);
        struct bf_sim_reply r = {0};
        bf_sim_handle(s, BF_SIM_RPC_CONFIGURE, b.p, b.len, T0, &r);
        ck_assert_int_eq(r.code, 0);
        bf_sim_reply_free(&r);
        r = simt_get_raw(s, id, T0);
        ck_assert_msg(simt_md_equal(r.body, r.len, md, n), "iteration %d: %zu entries differ", it,
                      n);
        bf_sim_reply_free(&r);
        struct simt_ack d = simt_drain(s, id, 0, "", 0, 0, T0);
        ck_assert_int_eq(d.code, 0);
        ck_assert_uint_eq(d.ack->machine->n_shard_metadata, 0);
        simt_ack_free(&d);
        free(b.p);
        free(md);
        free(kb);
        free(vb);
    }
    /* every map was released: nothing left in the metadata pool */
    for (size_t i = 1; i < s->md.n; i++)
        ck_assert_uint_eq(s->md.v[i].refs, 0);
    bf_sim_close(s);
}
END_TEST

/* ------------------------------------------------------------ model of B1203 */

static const int m_source[4] = {BF_STATE_SPECULATIVE, BF_STATE_IDLE, BF_STATE_CONFIGURED,
                                BF_STATE_IDLE};
static const int m_trans[4] = {BF_STATE_CREATING, BF_STATE_CONFIGURING, BF_STATE_DRAINING,
                               BF_STATE_DELETING};
static const int m_target[4] = {BF_STATE_IDLE, BF_STATE_CONFIGURED, BF_STATE_IDLE,
                                BF_STATE_SPECULATIVE};

struct model {
    int state;
    char op[4][64];
    int pending; /* kind or -1 */
    int64_t due;
    char cluster[32];
};

static void model_settle(struct model *m, int64_t now)
{
    if (m->pending >= 0 && m->due <= now) {
        m->state = m_target[m->pending];
        if (m->pending == BF_SIM_RPC_DRAIN || m->pending == BF_SIM_RPC_DELETE)
            m->cluster[0] = 0;
        m->pending = -1;
    }
}

START_TEST(b1203_random_lifecycle_sequences_match_the_four_edge_model)
{
    struct bf_sim_config c;
    simt_cfg(&c);
    c.seed_speculative = 2;
    c.seed_idle = 1;
    c.seed_configured = 1;
    const int64_t lat[4] = {0, 700 * MS, 1500 * MS, 300 * MS};
    for (int k = 0; k < 4; k++)
        c.transition_latency[k] = (struct bf_sim_dist){BF_SIM_DIST_FIXED, lat[k], 0};
    struct bf_sim *s = simt_open(&c);
    size_t n = bf_sim_machine_count(s);
    struct model *mm = calloc(n, sizeof *mm);
    for (size_t i = 0; i < n; i++) {
        struct bf_sim_view v;
        bf_sim_lookup(s, bf_sim_machine_id(s, i), &v);
        mm[i].state = v.state;
        mm[i].pending = -1;
        if (v.cluster)
            snprintf(mm[i].cluster, sizeof mm[i].cluster, "%.*s", (int)v.cluster_len,
                     (const char *)v.cluster);
    }
    char seen_ops[4096][64];
    size_t n_seen = 0;
    uint64_t x = 0xabcdef12345ULL;
    int64_t now = T0;
    int accepted = 0, rejected = 0;
    for (int step = 0; step < 3000; step++) {
        now += (int64_t)(rnd(&x) % 400) * MS;
        size_t i = rnd(&x) % n;
        int kind = (int)(rnd(&x) % 4);
        const char *id = bf_sim_machine_id(s, i);
        struct model *m = &mm[i];
        for (size_t j = 0; j < n; j++)
            model_settle(&mm[j], now);
        char cl[32];
        snprintf(cl, sizeof cl, "cl-%d", step % 5);
        struct simt_ack a = kind == 0   ? simt_create(s, id, "", 0, 0, now)
                            : kind == 1 ? simt_configure(s, id, cl, NULL, "", 0, 0, now)
                            : kind == 2 ? simt_drain(s, id, 0, "", 0, 0, now)
                                        : simt_delete(s, id, "", 0, 0, now);
        ck_assert_int_ne(a.code, BF_SIM_FAILED_PRECONDITION);
        if (m->op[kind][0] && (m->state == m_trans[kind] || m->state == m_target[kind])) {
            ck_assert_int_eq(a.code, 0);
            ck_assert_str_eq(a.op, m->op[kind]);
            ck_assert_int_eq(a.state, m->state);
        } else if (m->state != m_source[kind]) {
            ck_assert_msg(a.code == BF_SIM_INTERNAL, "step %d: %s on %s gave %d", step,
                          bf_sim_rpc_name(kind), bf_state_name(m->state), a.code);
            rejected++;
        } else {
            ck_assert_int_eq(a.code, 0);
            for (size_t k = 0; k < n_seen; k++)
                ck_assert_str_ne(a.op, seen_ops[k]); /* a fresh id */
            ck_assert_uint_lt(n_seen, 4096);
            snprintf(seen_ops[n_seen++], 64, "%s", a.op);
            snprintf(m->op[kind], sizeof m->op[kind], "%s", a.op);
            if (kind == BF_SIM_RPC_CONFIGURE)
                snprintf(m->cluster, sizeof m->cluster, "%s", cl);
            m->state = m_trans[kind];
            m->pending = kind;
            m->due = now + lat[kind];
            model_settle(m, now);
            ck_assert_int_eq(a.state, m->state);
            accepted++;
        }
        if (a.code == 0)
            ck_assert_str_eq(a.ack->machine->cluster, m->cluster);
        simt_ack_free(&a);
        if (step % 50 == 0) { /* full comparison through List */
            PbList *l = simt_list_all(s, now);
            for (size_t k = 0; k < l->n_machines; k++) {
                struct bf_sim_view v;
                bf_sim_lookup(s, l->machines[k]->id, &v);
                size_t idx = (size_t)(bf_sim_find_machine(s, v.id, strlen(v.id)));
                ck_assert_int_eq(l->machines[k]->state, mm[idx].state);
            }
            simt_free_list(l);
        }
    }
    ck_assert_int_gt(accepted, 300);
    ck_assert_int_gt(rejected, 300);
    free(mm);
    bf_sim_close(s);
}
END_TEST

START_TEST(b1204_multi_shard_fenced_interleavings_fail_precondition_only_for_fencing)
{
    struct bf_sim_config c;
    simt_cfg(&c);
    c.seed_speculative = 3;
    c.transition_latency[BF_SIM_RPC_CONFIGURE] = (struct bf_sim_dist){BF_SIM_DIST_UNIFORM, 0, SEC};
    struct bf_sim *s = simt_open(&c);
    size_t n = bf_sim_machine_count(s);
    enum { NS = 4 };
    const char *shards[NS] = {"shard-0", "shard-1", "shard-2", ""};
    /* each shard keeps its own session (epoch, seq); sometimes restarts; a
     * zombie copy keeps using the old epoch */
    int64_t epoch[NS] = {1, 1, 1, 0}, seq[NS] = {0}, zep[NS] = {0}, zseq[NS] = {0};
    struct mark {
        bool set;
        int64_t e, q;
    } *mk = calloc(n * NS, sizeof *mk);
    uint64_t x = 77;
    int64_t now = T0;
    int fenced = 0;
    for (int step = 0; step < 5000; step++) {
        now += 50 * MS;
        int sh = (int)(rnd(&x) % NS);
        size_t i = rnd(&x) % n;
        int kind = (int)(rnd(&x) % 4);
        if (sh < 3 && rnd(&x) % 200 == 0) { /* restart: a zombie remains */
            zep[sh] = epoch[sh];
            zseq[sh] = seq[sh];
            epoch[sh]++;
            seq[sh] = 0;
        }
        int64_t e, q;
        bool zombie = sh < 3 && zep[sh] && rnd(&x) % 4 == 0;
        if (sh == 3) {
            e = 0;
            q = 0; /* the all-zero token */
        } else if (zombie) {
            e = zep[sh];
            q = ++zseq[sh];
        } else {
            e = epoch[sh];
            q = ++seq[sh];
        }
        const char *id = bf_sim_machine_id(s, i);
        struct simt_ack a = kind == 0   ? simt_create(s, id, shards[sh], e, q, now)
                            : kind == 1 ? simt_configure(s, id, "c", NULL, shards[sh], e, q, now)
                            : kind == 2 ? simt_drain(s, id, 0, shards[sh], e, q, now)
                                        : simt_delete(s, id, shards[sh], e, q, now);
        struct mark *m = &mk[i * NS + (size_t)sh];
        bool pass = sh == 3 || !m->set || e > m->e || (e == m->e && q > m->q);
        ck_assert_msg((a.code == BF_SIM_FAILED_PRECONDITION) == !pass,
                      "step %d shard %d (%lld,%lld) code %d", step, sh, (long long)e, (long long)q,
                      a.code);
        if (pass && sh != 3) {
            m->set = true;
            m->e = e;
            m->q = q;
        }
        fenced += !pass;
        simt_ack_free(&a);
    }
    ck_assert_int_gt(fenced, 10);
    free(mk);
    bf_sim_close(s);
}
END_TEST

START_TEST(b1205_random_malformed_requests_never_fail_precondition_or_crash)
{
    uint64_t x = 0x5eed;
    int codes[16] = {0};
    for (int it = 0; it < 3000; it++) {
        struct bf_sim_config c;
        simt_cfg(&c);
        c.seed_speculative = 1;
        struct bf_sim *s = simt_open(&c); /* fresh: no marks, so no token is stale */
        int rpc = (int)(rnd(&x) % BF_SIM_RPC_COUNT);
        uint8_t buf[96];
        size_t len = rnd(&x) % sizeof buf;
        if (rnd(&x) % 2) {
            for (size_t k = 0; k < len; k++)
                buf[k] = (uint8_t)rnd(&x);
        } else {
            /* a valid request with a few bytes flipped or truncated */
            Bigfleet__V1alpha1__ConfigureRequest q = BIGFLEET__V1ALPHA1__CONFIGURE_REQUEST__INIT;
            q.machine_id = (char *)bf_sim_machine_id(s, 0);
            q.cluster_id = "c";
            q.shard_id = "s";
            q.shard_epoch = 3;
            q.sequence_number = 4;
            size_t pl = protobuf_c_message_get_packed_size(&q.base);
            ck_assert_uint_le(pl, sizeof buf);
            protobuf_c_message_pack(&q.base, buf);
            len = rnd(&x) % (pl + 1);
            for (int f = 0; f < 3 && len; f++)
                buf[rnd(&x) % len] ^= (uint8_t)(1u << (rnd(&x) % 8));
        }
        struct bf_sim_reply r = {0};
        bf_sim_handle(s, rpc, buf, len, T0, &r);
        ck_assert_int_ne(r.code, BF_SIM_FAILED_PRECONDITION);
        ck_assert(r.code == 0 || r.code == BF_SIM_INVALID_ARGUMENT || r.code == BF_SIM_NOT_FOUND ||
                  r.code == BF_SIM_UNIMPLEMENTED || r.code == BF_SIM_INTERNAL);
        codes[r.code]++;
        bf_sim_reply_free(&r);
        bf_sim_close(s);
    }
    ck_assert_int_gt(codes[BF_SIM_INVALID_ARGUMENT], 100);
    ck_assert_int_gt(codes[BF_SIM_NOT_FOUND] + codes[BF_SIM_INTERNAL] + codes[0],
                     50); /* decoded ones */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("simprovider-property");
    TCase *tc = tcase_create("property");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, b1202_random_metadata_maps_round_trip_byte_for_byte);
    tcase_add_test(tc, b1203_random_lifecycle_sequences_match_the_four_edge_model);
    tcase_add_test(tc, b1204_multi_shard_fenced_interleavings_fail_precondition_only_for_fencing);
    tcase_add_test(tc, b1205_random_malformed_requests_never_fail_precondition_or_crash);
    suite_add_tcase(s, tc);
    return check_run(s);
}
