/*
 * test_simprovider_list.c — List and the since_revision cursor (B901–B909),
 * paging without gaps or duplicates, O(changes) deltas over a 500K pool, and
 * the wire layer: the hand-written Machine encoder is byte-identical to
 * protobuf-c, and the request decoders agree with protobuf-c's packing.
 */
#include <time.h>

#include "simprovider/sim_internal.h"
#include "test_simprovider.h"

static int count_id(const PbList *l, const char *id)
{
    int n = 0;
    for (size_t i = 0; i < l->n_machines; i++)
        n += !strcmp(l->machines[i]->id, id);
    return n;
}

static void assert_no_dups(const PbList *l)
{
    for (size_t i = 0; i < l->n_machines; i++)
        for (size_t j = 0; j < i; j++)
            ck_assert_str_ne(l->machines[i]->id, l->machines[j]->id);
}

static struct bf_sim *mixed_pool(void)
{
    struct bf_sim_config c;
    simt_cfg(&c);
    c.seed_speculative = 6;
    c.seed_idle = 3;
    c.seed_configured = 2;
    c.transition_latency[BF_SIM_RPC_CREATE] = (struct bf_sim_dist){0, 10 * SEC, 0};
    struct bf_sim *s = simt_open(&c);
    /* put two machines in Creating and one in FAILED */
    char x[128];
    simt_pick(s, BF_STATE_SPECULATIVE, 0, x, sizeof x, T0);
    struct simt_ack a = simt_create(s, x, "", 0, 0, T0);
    simt_ack_free(&a);
    simt_pick(s, BF_STATE_SPECULATIVE, 0, x, sizeof x, T0);
    a = simt_create(s, x, "", 0, 0, T0);
    simt_ack_free(&a);
    simt_pick(s, BF_STATE_IDLE, 0, x, sizeof x, T0);
    ck_assert_int_eq(bf_sim_fail_machine(s, x, "disk on fire", T0), 0);
    return s;
}

START_TEST(b901_state_filters_are_exact_and_a_multi_state_filter_is_their_union)
{
    struct bf_sim *s = mixed_pool();
    size_t total = 0;
    for (int st = 1; st <= 8; st++) {
        int f[2] = {st, 0}, code;
        PbList *l = simt_list(s, f, 0, NULL, 0, T0, &code);
        ck_assert_int_eq(code, 0);
        assert_no_dups(l);
        for (size_t i = 0; i < l->n_machines; i++)
            ck_assert_int_eq(l->machines[i]->state, st);
        ck_assert_uint_eq(l->n_machines, bf_sim_count_in_state(s, st));
        total += l->n_machines;
        simt_free_list(l);
    }
    ck_assert_uint_eq(total, bf_sim_machine_count(s));
    int u[4] = {BF_STATE_SPECULATIVE, BF_STATE_CREATING, BF_STATE_FAILED, 0}, code;
    PbList *l = simt_list(s, u, 0, NULL, 0, T0, &code);
    ck_assert_uint_eq(l->n_machines, bf_sim_count_in_state(s, BF_STATE_SPECULATIVE) +
                                         bf_sim_count_in_state(s, BF_STATE_CREATING) +
                                         bf_sim_count_in_state(s, BF_STATE_FAILED));
    for (size_t i = 0; i < l->n_machines; i++) {
        int st = l->machines[i]->state;
        ck_assert(st == BF_STATE_SPECULATIVE || st == BF_STATE_CREATING || st == BF_STATE_FAILED);
    }
    simt_free_list(l);
    /* repeated states in the filter are harmless; bad values are InvalidArgument */
    int rep[3] = {BF_STATE_FAILED, BF_STATE_FAILED, 0};
    l = simt_list(s, rep, 0, NULL, 0, T0, &code);
    ck_assert_uint_eq(l->n_machines, 1);
    simt_free_list(l);
    int bad[2] = {9, 0};
    ck_assert_ptr_null(simt_list(s, bad, 0, NULL, 0, T0, &code));
    ck_assert_int_eq(code, BF_SIM_INVALID_ARGUMENT);
    ck_assert_ptr_null(simt_list(s, NULL, -1, NULL, 0, T0, &code));
    ck_assert_int_eq(code, BF_SIM_INVALID_ARGUMENT);
    bf_sim_close(s);
}
END_TEST

START_TEST(b901_unpacked_state_encoding_is_accepted_like_packed)
{
    struct bf_sim *s = mixed_pool();
    struct simt_buf b = {0};
    simt_varint(&b, 1 << 3 | 0);
    simt_varint(&b, BF_STATE_IDLE);
    simt_varint(&b, 1 << 3 | 0);
    simt_varint(&b, BF_STATE_CONFIGURED);
    struct bf_sim_reply r = {0};
    bf_sim_handle(s, BF_SIM_RPC_LIST, b.p, b.len, T0, &r);
    ck_assert_int_eq(r.code, 0);
    PbList *l = bigfleet__v1alpha1__machine_list__unpack(NULL, r.len, r.body);
    ck_assert_uint_eq(l->n_machines, bf_sim_count_in_state(s, BF_STATE_IDLE) +
                                         bf_sim_count_in_state(s, BF_STATE_CONFIGURED));
    simt_free_list(l);
    bf_sim_reply_free(&r);
    free(b.p);
    bf_sim_close(s);
}
END_TEST

START_TEST(b902_max_results_is_a_ceiling_and_zero_means_no_cap)
{
    struct bf_sim *s = mixed_pool();
    size_t n = bf_sim_machine_count(s);
    for (int32_t m = 1; m <= 3; m++) {
        int code;
        PbList *l = simt_list(s, NULL, m, NULL, 0, T0, &code);
        ck_assert_uint_eq(l->n_machines, (size_t)m);
        simt_free_list(l);
    }
    PbList *l = simt_list_all(s, T0);
    ck_assert_uint_eq(l->n_machines, n);
    simt_free_list(l);
    bf_sim_close(s);
}
END_TEST

START_TEST(b903_b905_revision_advances_and_deltas_from_any_earlier_cursor_are_complete)
{
    struct bf_sim *s = mixed_pool();
    enum { R = 5 };
    char cur[R + 1][32], ids[R][128];
    PbList *l = simt_list_all(s, T0);
    simt_rev(l, cur[0], sizeof cur[0]);
    simt_free_list(l);
    for (int i = 0; i < R; i++) {
        simt_pick(s, BF_STATE_IDLE, 0, ids[i], sizeof ids[i], T0);
        const char *md[] = {"r", "1", NULL};
        struct simt_ack a = simt_configure(s, ids[i], "c", md, "", 0, 0, T0);
        ck_assert_int_eq(a.code, 0);
        simt_ack_free(&a);
        l = simt_list_all(s, T0);
        simt_rev(l, cur[i + 1], sizeof cur[i + 1]);
        ck_assert_str_ne(cur[i + 1], cur[i]);
        ck_assert_int_gt(atoll(cur[i + 1]), atoll(cur[i]));
        simt_free_list(l);
    }
    for (int k = 0; k < R; k++) {
        int code;
        l = simt_list(s, NULL, 0, cur[k], strlen(cur[k]), T0, &code);
        ck_assert_int_eq(code, 0);
        assert_no_dups(l);
        ck_assert_uint_eq(l->n_machines, (size_t)(R - k)); /* exactly the later ones */
        for (int j = k; j < R; j++) {
            ck_assert_int_eq(count_id(l, ids[j]), 1);
        }
        for (size_t i = 0; i < l->n_machines; i++)
            ck_assert_int_eq(l->machines[i]->state, BF_STATE_CONFIGURED); /* current state */
        simt_free_list(l);
    }
    bf_sim_close(s);
}
END_TEST

START_TEST(b904_b908_quiescent_deltas_are_empty_and_idle_ticks_never_bump)
{
    struct bf_sim *s = mixed_pool();
    bf_sim_advance(s, T0 + 20 * SEC); /* let the two Creates finish */
    PbList *l = simt_list_all(s, T0 + 20 * SEC);
    char rev[32];
    simt_rev(l, rev, sizeof rev);
    simt_free_list(l);
    for (int i = 0; i < 15; i++) {
        ck_assert_int_eq(bf_sim_advance(s, T0 + (21 + i) * SEC), 0);
        int code;
        l = simt_list(s, NULL, 0, rev, strlen(rev), T0 + (21 + i) * SEC, &code);
        ck_assert_uint_eq(l->n_machines, 0);
        char r2[32];
        simt_rev(l, r2, sizeof r2);
        ck_assert_str_eq(r2, rev);
        simt_free_list(l);
    }
    bf_sim_close(s);
}
END_TEST

START_TEST(b906_b909_garbage_or_foreign_cursors_degrade_to_the_full_list)
{
    struct bf_sim *s = mixed_pool();
    size_t n = bf_sim_machine_count(s);
    PbList *l = simt_list_all(s, T0);
    char rev[32];
    simt_rev(l, rev, sizeof rev);
    simt_free_list(l);
    uint8_t junk[4096];
    memset(junk, 0xde, sizeof junk);
    char bang[40], tilde[40], bin[40], future[40];
    snprintf(bang, sizeof bang, "%s!", rev);
    snprintf(tilde, sizeof tilde, "~%s", rev);
    size_t bl = (size_t)snprintf(bin, sizeof bin, "%sXY", rev);
    bin[bl - 2] = 0;
    bin[bl - 1] = (char)0xff;
    snprintf(future, sizeof future, "%lld", atoll(rev) + 1000);
    struct {
        const void *p;
        size_t len;
    } g[] = {{NULL, 0},
             {"", 0},
             {"not-a-real-cursor", 17},
             {"\x00\xff\x10\x42\x7f", 5},
             {junk, sizeof junk},
             {bang, strlen(bang)},
             {tilde, strlen(tilde)},
             {bin, bl},
             {future, strlen(future)},
             {"0", 1},
             {"-5", 2},
             {"+", 1},
             {"99999999999999999999", 20}};
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++) {
        int code;
        l = simt_list(s, NULL, 0, g[i].p, g[i].len, T0, &code);
        ck_assert_int_eq(code, 0);
        ck_assert_msg(l->n_machines == n, "cursor %zu gave %zu of %zu", i, l->n_machines, n);
        simt_free_list(l);
    }
    /* the exact bytes are accepted: empty delta */
    int code;
    l = simt_list(s, NULL, 0, rev, strlen(rev), T0, &code);
    ck_assert_uint_eq(l->n_machines, 0);
    simt_free_list(l);
    /* "+<rev>" parses like ParseInt does */
    char plus[40];
    snprintf(plus, sizeof plus, "+%s", rev);
    l = simt_list(s, NULL, 0, plus, strlen(plus), T0, &code);
    ck_assert_uint_eq(l->n_machines, 0);
    simt_free_list(l);
    bf_sim_close(s);
}
END_TEST

/* Threading the returned revision as the next cursor walks the set once. */
static void page_walk(struct bf_sim *s, const char *from, int32_t max, size_t expect,
                      const char *const *must, size_t n_must)
{
    char cur[32];
    snprintf(cur, sizeof cur, "%s", from);
    char **seen = calloc(expect + 1, sizeof *seen);
    size_t n_seen = 0;
    for (int page = 0; page < 100000; page++) {
        int code;
        PbList *l = simt_list(s, NULL, max, cur, strlen(cur), T0, &code);
        ck_assert_int_eq(code, 0);
        ck_assert_uint_le(l->n_machines, (size_t)max);
        for (size_t i = 0; i < l->n_machines; i++) {
            for (size_t j = 0; j < n_seen; j++)
                ck_assert_msg(strcmp(seen[j], l->machines[i]->id), "duplicate %s",
                              l->machines[i]->id);
            ck_assert_uint_lt(n_seen, expect);
            seen[n_seen++] = strdup(l->machines[i]->id);
        }
        char next[32];
        simt_rev(l, next, sizeof next);
        size_t got = l->n_machines;
        simt_free_list(l);
        if (got == 0)
            break;
        snprintf(cur, sizeof cur, "%s", next);
    }
    ck_assert_uint_eq(n_seen, expect);
    for (size_t k = 0; k < n_must; k++) {
        bool hit = false;
        for (size_t j = 0; j < n_seen && !hit; j++)
            hit = !strcmp(seen[j], must[k]);
        ck_assert_msg(hit, "paging skipped %s", must[k]);
    }
    for (size_t j = 0; j < n_seen; j++)
        free(seen[j]);
    free(seen);
}

START_TEST(b907_paging_deltas_and_full_lists_has_no_gap_and_no_duplicate)
{
    struct bf_sim *s = mixed_pool();
    PbList *l = simt_list_all(s, T0);
    char base[32];
    simt_rev(l, base, sizeof base);
    simt_free_list(l);
    char ids[7][128];
    const char *must[7];
    for (int i = 0; i < 7; i++) {
        simt_pick(s, BF_STATE_SPECULATIVE, i, ids[i], sizeof ids[i], T0);
        must[i] = ids[i];
    }
    int64_t now = T0;
    for (int round = 0; round < 3; round++) /* re-mutate: each must still appear once */
        for (int i = 0; i < 7; i++) {
            if (round == 0) {
                struct simt_ack a = simt_create(s, ids[i], "", 0, 0, now);
                simt_ack_free(&a);
            } else {
                bf_sim_advance(s, now += 3 * SEC);
            }
        }
    /* the 7 Creates plus the 2 Creates mixed_pool left in flight */
    int code;
    l = simt_list(s, NULL, 0, base, strlen(base), now, &code);
    ck_assert_uint_eq(l->n_machines, 9);
    simt_free_list(l);
    for (int32_t max = 1; max <= 4; max++)
        page_walk(s, base, max, 9, must, 7);
    /* full list paging: from the zero cursor, every machine exactly once */
    for (int32_t max = 1; max <= 9; max += 4)
        page_walk(s, "0", max, bf_sim_machine_count(s), NULL, 0);
    bf_sim_close(s);
}
END_TEST

START_TEST(delta_lists_each_machine_once_in_its_current_state_and_the_log_stays_bounded)
{
    char x[128];
    struct bf_sim *s = simt_open_one_idle(x, sizeof x, T0);
    PbList *l = simt_list_all(s, T0);
    char base[32];
    simt_rev(l, base, sizeof base);
    simt_free_list(l);
    for (int i = 0; i < 20000; i++) {
        struct simt_ack a = simt_configure(s, x, "c", NULL, "", 0, 0, T0);
        simt_ack_free(&a);
        a = simt_drain(s, x, 0, "", 0, 0, T0);
        simt_ack_free(&a);
    }
    int code;
    l = simt_list(s, NULL, 0, base, strlen(base), T0, &code);
    ck_assert_uint_eq(l->n_machines, 1);
    ck_assert_str_eq(l->machines[0]->id, x);
    ck_assert_int_eq(l->machines[0]->state, BF_STATE_IDLE);
    simt_free_list(l);
    /* 40000 mutations of one machine: the log is compacted, not 40000 long */
    ck_assert_uint_lt(s->n_log, 10000);
    ck_assert_int_ge(bf_sim_revision(s), atoll(base) + 40000);
    bf_sim_close(s);
}
END_TEST

static double secs_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

START_TEST(pool_of_500k_full_list_is_complete_and_an_incremental_list_holds_only_the_changes)
{
    struct bf_sim_config c;
    bf_sim_config_init(&c);
    c.catalog_path = simt_openb_csv();
    c.seed_speculative = 18519; /* x 27 openb shapes = 500,013 */
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct bf_sim *s = simt_open(&c);
    double seed_s = secs_since(&t0);
    ck_assert_uint_eq(bf_sim_machine_count(s), 500013);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct bf_sim_list_args all = {0};
    struct bf_sim_reply r = {0};
    bf_sim_list(s, &all, T0, &r);
    double full_s = secs_since(&t0);
    ck_assert_int_eq(r.code, 0);
    PbList *l = bigfleet__v1alpha1__machine_list__unpack(NULL, r.len, r.body);
    ck_assert_ptr_nonnull(l);
    ck_assert_uint_eq(l->n_machines, 500013);
    char rev[32];
    simt_rev(l, rev, sizeof rev);
    size_t full_bytes = r.len;
    simt_free_list(l);
    /* 100 changes */
    char ids[100][128];
    for (int i = 0; i < 100; i++) {
        snprintf(ids[i], sizeof ids[i], "%s", bf_sim_machine_id(s, (size_t)i * 4999));
        struct simt_ack a = simt_create(s, ids[i], "", 0, 0, T0);
        ck_assert_int_eq(a.code, 0);
        simt_ack_free(&a);
    }
    struct bf_sim_list_args d = {.since_revision = {(const uint8_t *)rev, strlen(rev)}};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    bf_sim_list(s, &d, T0, &r);
    double inc_s = secs_since(&t0);
    l = bigfleet__v1alpha1__machine_list__unpack(NULL, r.len, r.body);
    ck_assert_uint_eq(l->n_machines, 100);
    for (int i = 0; i < 100; i++)
        ck_assert_int_eq(count_id(l, ids[i]), 1);
    for (size_t i = 0; i < l->n_machines; i++)
        ck_assert_int_eq(l->machines[i]->state, BF_STATE_IDLE);
    fprintf(stderr,
            "500K: seed %.3f s, full List %.3f s (%zu bytes), incremental List of 100 %.6f s "
            "(%zu bytes)\n",
            seed_s, full_s, full_bytes, inc_s, r.len);
    simt_free_list(l);
    bf_sim_reply_free(&r);
    bf_sim_close(s);
}
END_TEST

/* ------------------------------------------------------------ wire identity */

START_TEST(machine_encoder_is_byte_identical_to_protobuf_c)
{
    struct bf_sim_config c;
    simt_cfg(&c);
    c.catalog_path = simt_openb_csv();
    c.spot_variants = true;
    c.seed_speculative = 2;
    c.seed_idle = 1;
    c.seed_configured = 1;
    c.provider_name = "";
    c.transition_latency[BF_SIM_RPC_CREATE] = (struct bf_sim_dist){0, 10 * SEC, 0};
    struct bf_sim *s = simt_open(&c);
    /* more variety: Creating, FAILED with and without host, custom metadata */
    for (size_t i = 0; i < bf_sim_machine_count(s); i += 7) {
        const char *id = bf_sim_machine_id(s, i);
        struct bf_sim_view v;
        bf_sim_lookup(s, id, &v);
        if (v.state == BF_STATE_SPECULATIVE) {
            struct simt_ack a = simt_create(s, id, "", 0, 0, T0);
            simt_ack_free(&a);
        } else if (v.state == BF_STATE_IDLE) {
            const char *md[] = {"k", "v\x01", "", "empty-key", "e", "", NULL};
            struct simt_ack a = simt_configure(s, id, "cluster-\xe4\xbd\xa0", md, "", 0, 0, T0);
            simt_ack_free(&a);
        } else if (v.state == BF_STATE_CONFIGURED) {
            bf_sim_fail_machine(s, id, "failed \xf0\x9f\x9a\x80", T0);
        }
    }
    bf_sim_fail_machine(s, bf_sim_machine_id(s, 1), "x", T0);
    size_t n = bf_sim_machine_count(s);
    int states[9] = {0};
    for (uint32_t i = 0; i < n; i++) {
        size_t sz = bf_sim_machine_size(s, i);
        uint8_t *mine = malloc(sz);
        ck_assert_ptr_eq(bf_sim_machine_write(s, i, mine), mine + sz);
        struct sim_pb_machine *pm = bf_sim_machine_pb(s, i);
        ck_assert_ptr_nonnull(pm);
        size_t ref = protobuf_c_message_get_packed_size(&bf_sim_machine_pb_msg(pm)->base);
        uint8_t *theirs = malloc(ref);
        protobuf_c_message_pack(&bf_sim_machine_pb_msg(pm)->base, theirs);
        ck_assert_msg(ref == sz && memcmp(mine, theirs, sz) == 0, "machine %s differs",
                      sim_mid(s, i));
        states[s->m[i].state]++;
        free(mine);
        free(theirs);
        bf_sim_machine_pb_free(pm);
    }
    /* the variety is real */
    ck_assert_int_gt(states[BF_STATE_SPECULATIVE], 0);
    ck_assert_int_gt(states[BF_STATE_CREATING], 0);
    ck_assert_int_gt(states[BF_STATE_IDLE], 0);
    ck_assert_int_gt(states[BF_STATE_CONFIGURED], 0);
    ck_assert_int_gt(states[BF_STATE_FAILED], 1);
    bf_sim_close(s);
}
END_TEST

START_TEST(request_decoders_agree_with_protobuf_c_packing)
{
    uint64_t x = 42;
    for (int it = 0; it < 2000; it++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        char id[40], shard[40], cluster[40];
        snprintf(id, sizeof id, "m-%llu", (unsigned long long)(x % 100000));
        snprintf(shard, sizeof shard, (x >> 7) % 3 ? "s-%llu" : "", (unsigned long long)(x >> 40));
        snprintf(cluster, sizeof cluster, "c-%llu", (unsigned long long)(x >> 50));
        int64_t ep = (int64_t)(x >> 3) * ((x & 1) ? -1 : 1);
        int64_t sq = (x >> 13) % 5 == 0 ? INT64_MAX : (int64_t)(x >> 17);
        Bigfleet__V1alpha1__ConfigureRequest q = BIGFLEET__V1ALPHA1__CONFIGURE_REQUEST__INIT;
        q.machine_id = id;
        q.cluster_id = cluster;
        q.shard_id = shard;
        q.shard_epoch = ep;
        q.sequence_number = sq;
        uint8_t blob[33];
        q.bootstrap_blob.data = blob;
        q.bootstrap_blob.len = x % 34;
        Bigfleet__V1alpha1__ConfigureRequest__ShardMetadataEntry e[3], *ep3[3];
        char keys[3][16];
        for (int k = 0; k < 3; k++) {
            Bigfleet__V1alpha1__ConfigureRequest__ShardMetadataEntry init =
                BIGFLEET__V1ALPHA1__CONFIGURE_REQUEST__SHARD_METADATA_ENTRY__INIT;
            e[k] = init;
            snprintf(keys[k], sizeof keys[k], "k%d", k);
            e[k].key = keys[k];
            e[k].value.data = (uint8_t *)"v\0w";
            e[k].value.len = (size_t)k;
            ep3[k] = &e[k];
        }
        q.n_shard_metadata = x % 4;
        q.shard_metadata = ep3;
        size_t n = protobuf_c_message_get_packed_size(&q.base);
        uint8_t *buf = malloc(n + 1);
        protobuf_c_message_pack(&q.base, buf);
        struct bf_sim_request d;
        struct bf_sim_md_entry *md;
        ck_assert_int_eq(bf_sim_decode_lifecycle(BF_SIM_RPC_CONFIGURE, buf, n, &d, &md), 0);
        ck_assert_uint_eq(d.machine_id.len, strlen(id));
        ck_assert_mem_eq(d.machine_id.p, id, strlen(id));
        ck_assert_uint_eq(d.shard_id.len, strlen(shard));
        ck_assert_uint_eq(d.cluster_id.len, strlen(cluster));
        ck_assert_int_eq(d.shard_epoch, ep);
        ck_assert_int_eq(d.sequence_number, sq);
        ck_assert_uint_eq(d.bootstrap_blob_len, x % 34);
        ck_assert_uint_eq(d.n_metadata, x % 4);
        for (size_t k = 0; k < d.n_metadata; k++) {
            ck_assert_uint_eq(d.metadata[k].key.len, 2);
            ck_assert_uint_eq(d.metadata[k].value.len, k);
        }
        free(md);
        free(buf);
        /* Drain with a negative grace (a 10-byte varint) */
        Bigfleet__V1alpha1__DrainRequest dq = BIGFLEET__V1ALPHA1__DRAIN_REQUEST__INIT;
        dq.machine_id = id;
        dq.grace_period_seconds = -(int64_t)(x % 1000);
        dq.shard_id = shard;
        dq.shard_epoch = ep;
        dq.sequence_number = sq;
        n = protobuf_c_message_get_packed_size(&dq.base);
        buf = malloc(n + 1);
        protobuf_c_message_pack(&dq.base, buf);
        ck_assert_int_eq(bf_sim_decode_lifecycle(BF_SIM_RPC_DRAIN, buf, n, &d, &md), 0);
        ck_assert_int_eq(d.grace_period_seconds, -(int64_t)(x % 1000));
        ck_assert_int_eq(d.shard_epoch, ep);
        ck_assert_uint_eq(d.shard_id.len, strlen(shard));
        free(md);
        free(buf);
        /* ListFilter with packed states and a negative max_results */
        Bigfleet__V1alpha1__ListFilter lf = BIGFLEET__V1ALPHA1__LIST_FILTER__INIT;
        Bigfleet__V1alpha1__MachineState st[3] = {(x % 8) + 1, ((x >> 4) % 8) + 1, 3};
        lf.n_states = x % 4;
        lf.states = st;
        lf.max_results = (int32_t)(x >> 33) * ((x & 2) ? -1 : 1);
        lf.since_revision.data = (uint8_t *)"123";
        lf.since_revision.len = x % 4;
        n = protobuf_c_message_get_packed_size(&lf.base);
        buf = malloc(n + 1);
        protobuf_c_message_pack(&lf.base, buf);
        struct bf_sim_list_args a;
        ck_assert_int_eq(bf_sim_decode_list(buf, n, &a), 0);
        uint32_t mask = 0;
        for (size_t k = 0; k < lf.n_states; k++)
            mask |= 1u << st[k];
        ck_assert_uint_eq(a.state_mask, mask);
        ck_assert_int_eq(a.max_results, lf.max_results);
        ck_assert_uint_eq(a.since_revision.len, x % 4);
        ck_assert(!a.bad_state);
        free(buf);
    }
}
END_TEST

static bool u32_eq(const void *ctx, uint32_t idx, const void *key, size_t klen)
{
    (void)ctx;
    (void)klen;
    return idx == *(const uint32_t *)key;
}

/* hash for entry i: mode 0 spreads over 97 values; mode 1 puts every home
 * slot in the last 4 or the first 4 slots of the table, so probe runs wrap
 * past the end and mix entries homed on both sides of the wrap */
static uint64_t ix_hash(int mode, uint32_t i)
{
    return mode == 0 ? (uint64_t)(i % 97) * 0x9e3779b97f4a7c15ULL
                     : (uint64_t)(uint32_t)(0xfffffffcu + (i % 8));
}

START_TEST(hash_index_removal_keeps_every_remaining_entry_reachable)
{
    for (int mode = 0; mode < 2; mode++) {
        struct sim_index ix = {0};
        enum { N = 6000 };
        static bool live[N];
        for (uint32_t i = 0; i < N; i++) {
            ck_assert_int_eq(bf_sim_index_insert(&ix, ix_hash(mode, i), i), 0);
            live[i] = true;
        }
        uint64_t x = 99;
        for (int round = 0; round < 3; round++) {
            for (uint32_t i = 0; i < N; i++) {
                x = x * 6364136223846793005ULL + 1;
                if (live[i] && (x >> 60) < 8) {
                    bf_sim_index_remove(&ix, ix_hash(mode, i), i);
                    live[i] = false;
                }
            }
            size_t n_live = 0;
            for (uint32_t i = 0; i < N; i++) {
                uint32_t got = bf_sim_index_find(&ix, ix_hash(mode, i), u32_eq, NULL, &i, sizeof i);
                ck_assert_msg(got == (live[i] ? i : UINT32_MAX), "mode %d entry %u", mode, i);
                n_live += live[i];
            }
            ck_assert_uint_eq(ix.n, n_live);
        }
        bf_sim_index_free(&ix);
    }
}
END_TEST

START_TEST(identical_metadata_maps_are_shared_and_released_per_binding)
{
    struct bf_sim *s = simt_open_idle(1);
    char a[128], b[128];
    simt_pick(s, BF_STATE_IDLE, 0, a, sizeof a, T0);
    simt_pick(s, BF_STATE_IDLE, 1, b, sizeof b, T0);
    const char *md[] = {"k1", "v1", "k2", "v\x01", NULL};
    struct simt_ack x = simt_configure(s, a, "c", md, "", 0, 0, T0);
    simt_ack_free(&x);
    x = simt_configure(s, b, "c", md, "", 0, 0, T0);
    simt_ack_free(&x);
    uint32_t ia = bf_sim_find_machine(s, a, strlen(a)), ib = bf_sim_find_machine(s, b, strlen(b));
    ck_assert_uint_ne(s->m[ia].md, 0);
    ck_assert_uint_eq(s->m[ia].md, s->m[ib].md);
    ck_assert_uint_eq(s->md.v[s->m[ia].md].refs, 2);
    x = simt_drain(s, a, 0, "", 0, 0, T0);
    simt_ack_free(&x);
    ck_assert_uint_eq(s->md.v[s->m[ib].md].refs, 1);
    int code;
    PbMachine *m = simt_get(s, b, T0, &code);
    ck_assert_uint_eq(m->n_shard_metadata, 2);
    simt_free_machine(m);
    /* a different map is a different record; re-interning after release works */
    x = simt_drain(s, b, 0, "", 0, 0, T0);
    simt_ack_free(&x);
    x = simt_configure(s, a, "c", md, "", 0, 0, T0);
    ck_assert_uint_eq(x.ack->machine->n_shard_metadata, 2);
    simt_ack_free(&x);
    ck_assert_uint_eq(s->md.v[s->m[ia].md].refs, 1);
    bf_sim_close(s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("simprovider-list");
    TCase *tc = tcase_create("list");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, b901_state_filters_are_exact_and_a_multi_state_filter_is_their_union);
    tcase_add_test(tc, b901_unpacked_state_encoding_is_accepted_like_packed);
    tcase_add_test(tc, b902_max_results_is_a_ceiling_and_zero_means_no_cap);
    tcase_add_test(tc, b903_b905_revision_advances_and_deltas_from_any_earlier_cursor_are_complete);
    tcase_add_test(tc, b904_b908_quiescent_deltas_are_empty_and_idle_ticks_never_bump);
    tcase_add_test(tc, b906_b909_garbage_or_foreign_cursors_degrade_to_the_full_list);
    tcase_add_test(tc, b907_paging_deltas_and_full_lists_has_no_gap_and_no_duplicate);
    tcase_add_test(tc,
                   delta_lists_each_machine_once_in_its_current_state_and_the_log_stays_bounded);
    tcase_add_test(
        tc, pool_of_500k_full_list_is_complete_and_an_incremental_list_holds_only_the_changes);
    suite_add_tcase(s, tc);
    tc = tcase_create("wire");
    tcase_add_test(tc, machine_encoder_is_byte_identical_to_protobuf_c);
    tcase_add_test(tc, request_decoders_agree_with_protobuf_c_packing);
    suite_add_tcase(s, tc);
    tc = tcase_create("tables");
    tcase_add_test(tc, hash_index_removal_keeps_every_remaining_entry_reachable);
    tcase_add_test(tc, identical_metadata_maps_are_shared_and_released_per_binding);
    suite_add_tcase(s, tc);
    return check_run(s);
}
