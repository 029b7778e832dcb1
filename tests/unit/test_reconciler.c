/*
 * test_reconciler.c — the reconcile pass (src/reconciler/reconciler.h): the
 * seed 000 §3 order (in-flight skip, state-match fast path, screen, Assigned*
 * kept on divergence, shard_metadata restore for new records), removals in
 * full mode only, rejections that keep the last good record and are never
 * read as removals, node events routed to the previous cluster, and passes
 * over real gRPC against the simulated provider (full and incremental).
 */
#include "bigfleet/log.h"
#include "reconciler/reconciler.h"
#include "test_provider.h"
#include "check_run.h"

static void apply_list(struct bf_recon *r, const struct tmach *ts, int n, bool full,
                       struct bf_recon_result *res)
{
    size_t len;
    uint8_t *b = tlist_pack(ts, n, "1", &len);
    struct bf_prov_list l;
    ck_assert_int_eq(bf_prov_list_decode(b, len, &l), 0);
    memset(res, 0, sizeof *res);
    bf_recon_list_issued(r); /* the List is "taken" now, after the test's writes */
    bf_recon_apply(r, &l, full, res);
    free(b);
}

static bool rec_of(struct bf_shm *s, const char *id, struct bf_machine_rec *rec, uint32_t *slot)
{
    uint32_t sl;
    if (bf_inv_lookup_id(s, id, strlen(id), &sl))
        return false;
    if (slot)
        *slot = sl;
    return bf_inv_read(s, sl, rec) == 0 && (rec->flags & BF_REC_VALID);
}

static struct bf_recon *recon_new(struct pfx *f, bool incremental)
{
    struct bf_recon *r;
    struct bf_recon_opts o = {.incremental = incremental};
    ck_assert_int_eq(bf_recon_new(&f->shm, f->cl, &o, &r), 0);
    return r;
}

/* A provider fixture with segments (*f) and a full-walk reconciler over it. */
static struct bf_recon *recon_open(struct pfx *f)
{
    pfx_open(f, NULL, true);
    return recon_new(f, false);
}

static void recon_close(struct bf_recon *r, struct pfx *f)
{
    bf_recon_free(r);
    pfx_close(f);
}

/* Another process's write to the record at slot begins: the copy to edit
 * and commit with bf_inv_commit(s, tx, &copy, writer). */
static struct bf_machine_rec inv_begin(struct bf_shm *s, uint32_t slot, struct bf_inv_txn *tx)
{
    ck_assert_int_eq(bf_inv_begin(s, slot, tx), 0);
    return tx->old;
}

/* A full List of the one machine t, applied; asserts its record is there and
 * valid, reads it into *rec and returns its slot. */
static uint32_t ingest_one(struct bf_recon *r, struct bf_shm *s, const struct tmach *t,
                           struct bf_recon_result *res, struct bf_machine_rec *rec)
{
    apply_list(r, t, 1, true, res);
    uint32_t slot;
    ck_assert(rec_of(s, t->id, rec, &slot));
    return slot;
}

static struct tmach configured(const char *id, const char *cluster)
{
    struct tmach t = tmach_idle(id);
    t.state = BF_STATE_CONFIGURED;
    t.cluster = cluster;
    return t;
}

static void drain_node_events(struct bf_shm *s, struct bf_node_event_msg *out, int *n, int max)
{
    *n = 0;
    struct bf_node_event_msg ev;
    while (bf_ring_pop(s, BF_RING_NODE_RECON, &ev) == 0)
        if (*n < max)
            out[(*n)++] = ev;
}

/* ------------------------------------------------------------ ingest order */

START_TEST(new_machines_are_inserted_and_bound_ones_restore_assignment_from_metadata)
{
    struct pfx f;
    struct bf_recon *r = recon_open(&f);
    struct tmach ts[2] = {tmach_idle("idle-1"), configured("conf-1", "cluster-a")};
    ts[1].md[0] = (struct tkv){BF_MD_PRIORITY, "1000000", 0};
    ts[1].md[1] = (struct tkv){BF_MD_INTERRUPTION, "8192", 0};
    ts[1].md[2] = (struct tkv){BF_MD_RECLAMATION, "65536", 0};
    ts[1].md[3] = (struct tkv){BF_MD_FINGERPRINT, "p=1000000|ipb=16|rpb=19|reqs=|spr=", 0};
    ts[1].md[4] = (struct tkv){BF_MD_GROUP, "", 0};
    struct bf_recon_result res;
    apply_list(r, ts, 2, true, &res);
    ck_assert_int_eq(res.inserted, 2);
    struct bf_machine_rec rec;
    ck_assert(rec_of(&f.shm, "idle-1", &rec, NULL));
    ck_assert_int_eq(rec.state, BF_STATE_IDLE);
    ck_assert_uint_ne(rec.idle_since, 0); /* the hold clock starts at discovery */
    ck_assert(rec_of(&f.shm, "conf-1", &rec, NULL));
    ck_assert_int_eq(rec.state, BF_STATE_CONFIGURED);
    ck_assert_str_eq(bf_str(&f.shm, rec.cluster, NULL), "cluster-a");
    ck_assert_int_eq(rec.assigned_priority, 1000000);
    ck_assert_int_eq(rec.ipb, bf_bucket_for_dollars(8192));
    ck_assert_int_eq(rec.rpb, bf_bucket_for_dollars(65536));
    ck_assert_str_eq(bf_str(&f.shm, rec.fingerprint, NULL), "p=1000000|ipb=16|rpb=19|reqs=|spr=");
    /* the bound machine was announced to its cluster's operator */
    struct bf_node_event_msg ev[4];
    int n;
    drain_node_events(&f.shm, ev, &n, 4);
    ck_assert_int_eq(n, 1);
    ck_assert_uint_eq(ev[0].cluster_ref, rec.cluster);
    ck_assert_int_eq(ev[0].state, BF_STATE_CONFIGURED);
    recon_close(r, &f);
}
END_TEST

START_TEST(same_state_takes_the_fast_path_and_writes_nothing)
{
    struct pfx f;
    struct bf_recon *r = recon_open(&f);
    struct tmach ts[3] = {tmach_idle("a"), tmach_idle("b"), configured("c", "cl")};
    struct bf_recon_result res;
    apply_list(r, ts, 3, true, &res);
    ck_assert_int_eq(res.inserted, 3);
    uint64_t head = atomic_load(&f.shm.changelog[BF_CL_RECONCILER].head);
    ts[0].price = 5;  /* same state: a price change is not ingested (no screen, no write) */
    ts[1].prob = 2.0; /* not even screened on the fast path */
    apply_list(r, ts, 3, true, &res);
    ck_assert_int_eq(res.fast, 3);
    ck_assert_int_eq(res.updated + res.inserted + res.removed + res.rejected, 0);
    ck_assert_uint_eq(atomic_load(&f.shm.changelog[BF_CL_RECONCILER].head), head);
    recon_close(r, &f);
}
END_TEST

START_TEST(machines_with_an_action_in_flight_are_skipped)
{
    struct pfx f;
    struct bf_recon *r = recon_open(&f);
    struct tmach t = tmach_idle("busy");
    struct bf_recon_result res;
    struct bf_machine_rec rec;
    uint32_t slot = ingest_one(r, &f.shm, &t, &res, &rec);
    /* the executor moved it to Configuring; the provider still says Idle */
    struct bf_inv_txn tx;
    struct bf_machine_rec nr = inv_begin(&f.shm, slot, &tx);
    nr.state = BF_STATE_CONFIGURING;
    bf_inv_commit(&f.shm, &tx, &nr, BF_CL_EXECUTOR);
    uint8_t tag = bf_pending_mark(&f.shm, slot);
    apply_list(r, &t, 1, true, &res);
    ck_assert_int_eq(res.skipped_pending, 1);
    ck_assert(rec_of(&f.shm, "busy", &rec, NULL));
    ck_assert_int_eq(rec.state, BF_STATE_CONFIGURING);
    /* a full pass never removes a machine in flight either */
    apply_list(r, NULL, 0, true, &res);
    ck_assert_int_eq(res.removed, 0);
    ck_assert(rec_of(&f.shm, "busy", &rec, NULL));
    /* done: the provider's view applies again */
    bf_pending_done(&f.shm, slot, tag);
    apply_list(r, &t, 1, true, &res);
    ck_assert_int_eq(res.updated, 1);
    ck_assert(rec_of(&f.shm, "busy", &rec, NULL));
    ck_assert_int_eq(rec.state, BF_STATE_IDLE);
    recon_close(r, &f);
}
END_TEST

START_TEST(a_list_older_than_an_executor_write_does_not_overwrite_it)
{
    struct pfx f;
    struct bf_recon *r = recon_open(&f);
    struct tmach t = tmach_idle("raced");
    struct bf_recon_result res;
    struct bf_machine_rec rec;
    uint32_t slot = ingest_one(r, &f.shm, &t, &res, &rec);
    /* the List is issued; then the executor finishes an action on the machine
     * (Idle -> Configured, no longer in flight) before the List's reply lands */
    size_t len;
    uint8_t *b = tlist_pack(&t, 1, "2", &len);
    struct bf_prov_list l;
    ck_assert_int_eq(bf_prov_list_decode(b, len, &l), 0);
    bf_recon_list_issued(r);
    struct bf_inv_txn tx;
    struct bf_machine_rec nr = inv_begin(&f.shm, slot, &tx);
    nr.state = BF_STATE_CONFIGURED;
    ck_assert_int_eq(bf_str_intern_cstr(&f.shm, "cl-1", &nr.cluster), 0);
    bf_inv_commit(&f.shm, &tx, &nr, BF_CL_EXECUTOR);
    memset(&res, 0, sizeof res);
    bf_recon_apply(r, &l, true, &res);
    free(b);
    ck_assert_int_eq(res.updated, 0);
    ck_assert_int_eq(res.removed, 0);
    ck_assert(rec_of(&f.shm, "raced", &rec, NULL));
    ck_assert_int_eq(rec.state, BF_STATE_CONFIGURED); /* not reverted to the stale Idle */
    /* a List issued after the write is applied as usual */
    apply_list(r, &t, 1, true, &res);
    ck_assert_int_eq(res.updated, 1);
    ck_assert(rec_of(&f.shm, "raced", &rec, NULL));
    ck_assert_int_eq(rec.state, BF_STATE_IDLE);
    recon_close(r, &f);
}
END_TEST

START_TEST(an_asynchronous_configure_completion_records_provisioning_latency_once)
{
    struct pfx f;
    struct bf_recon *r = recon_open(&f);
    struct tmach t = tmach_idle("async");
    struct bf_recon_result res;
    apply_list(r, &t, 1, true, &res);
    uint32_t slot, cl, fp;
    struct bf_machine_rec rec;
    ck_assert(rec_of(&f.shm, "async", &rec, &slot));
    ck_assert_int_eq(bf_str_intern_cstr(&f.shm, "cl-1", &cl), 0);
    ck_assert_int_eq(bf_str_intern_cstr(&f.shm, "p=1|ipb=0|rpb=0|reqs=|spr=", &fp), 0);
    /* the demand was first seen 2 s ago; the executor's Configure left it Configuring */
    ck_assert_int_eq(bf_stamp_touch(&f.shm, cl, fp, bf_now_ns() - 2 * BF_NS_PER_SEC), 0);
    struct bf_inv_txn tx;
    struct bf_machine_rec nr = inv_begin(&f.shm, slot, &tx);
    nr.state = BF_STATE_CONFIGURING;
    nr.cluster = cl;
    nr.fingerprint = fp;
    bf_inv_commit(&f.shm, &tx, &nr, BF_CL_EXECUTOR);
    /* the provider finished it: the reconcile sees Configured */
    t.state = BF_STATE_CONFIGURED;
    t.cluster = "cl-1";
    apply_list(r, &t, 1, true, &res);
    ck_assert_int_eq(res.updated, 1);
    const struct bf_hist *h = &f.shm.st->reconciler.provisioning_latency;
    ck_assert_uint_eq(atomic_load(&h->count), 1);
    ck_assert_uint_ge(atomic_load(&h->sum_ns), 2 * BF_NS_PER_SEC);
    /* observed once: the executor (or a later pass) cannot record it again */
    int64_t lat;
    ck_assert_int_eq(bf_stamp_observe(&f.shm, cl, fp, bf_now_ns(), &lat), 0);
    recon_close(r, &f);
}
END_TEST

START_TEST(a_divergent_bound_state_keeps_shard_assignment_and_unbound_clears_it)
{
    struct pfx f;
    struct bf_recon *r = recon_open(&f);
    struct tmach t = configured("m", "cl-1");
    struct bf_recon_result res;
    apply_list(r, &t, 1, true, &res);
    uint32_t slot, fp;
    struct bf_machine_rec rec;
    ck_assert(rec_of(&f.shm, "m", &rec, &slot));
    ck_assert_int_eq(bf_str_intern_cstr(&f.shm, "p=7|ipb=3|rpb=4|reqs=|spr=", &fp), 0);
    struct bf_inv_txn tx; /* the executor stamped the assignment at Configure */
    struct bf_machine_rec nr = inv_begin(&f.shm, slot, &tx);
    nr.assigned_priority = 7;
    nr.ipb = 3;
    nr.rpb = 4;
    nr.fingerprint = fp;
    bf_inv_commit(&f.shm, &tx, &nr, BF_CL_EXECUTOR);
    /* the provider reports Draining and echoes a DIFFERENT assignment: shard memory wins */
    t.state = BF_STATE_DRAINING;
    t.md[0] = (struct tkv){BF_MD_PRIORITY, "999", 0};
    apply_list(r, &t, 1, true, &res);
    ck_assert_int_eq(res.updated, 1);
    ck_assert(rec_of(&f.shm, "m", &rec, NULL));
    ck_assert_int_eq(rec.state, BF_STATE_DRAINING);
    ck_assert_int_eq(rec.assigned_priority, 7);
    ck_assert_uint_eq(rec.fingerprint, fp);
    /* the drain completed at the provider: Idle, cluster and assignment cleared,
     * the node event still routed to the cluster it left */
    struct bf_node_event_msg ev[4];
    int n;
    drain_node_events(&f.shm, ev, &n, 4);
    uint32_t cl = rec.cluster;
    t = tmach_idle("m");
    apply_list(r, &t, 1, true, &res);
    ck_assert(rec_of(&f.shm, "m", &rec, NULL));
    ck_assert_int_eq(rec.state, BF_STATE_IDLE);
    ck_assert_uint_eq(rec.cluster, 0);
    ck_assert_int_eq(rec.assigned_priority, 0);
    ck_assert_uint_eq(rec.fingerprint, 0);
    drain_node_events(&f.shm, ev, &n, 4);
    ck_assert_int_eq(n, 1);
    ck_assert_uint_eq(ev[0].cluster_ref, cl);
    ck_assert_int_eq(ev[0].state, BF_STATE_IDLE);
    recon_close(r, &f);
}
END_TEST

START_TEST(configured_without_the_shard_stamp_takes_the_assignment_from_the_echo)
{
    struct pfx f;
    struct bf_recon *r = recon_open(&f);
    struct tmach t = tmach_idle("m");
    struct bf_recon_result res;
    struct bf_machine_rec rec;
    uint32_t slot = ingest_one(r, &f.shm, &t, &res, &rec);
    /* the executor entered Configuring (cluster stamped) and died before the
     * Configured stamp; the record was repaired for refresh */
    uint32_t cl;
    ck_assert_int_eq(bf_str_intern_cstr(&f.shm, "cl", &cl), 0);
    struct bf_inv_txn tx;
    struct bf_machine_rec nr = inv_begin(&f.shm, slot, &tx);
    nr.state = BF_STATE_CONFIGURING;
    nr.cluster = cl;
    nr.flags |= BF_REC_NEEDS_REFRESH;
    bf_inv_commit(&f.shm, &tx, &nr, BF_CL_EXECUTOR);
    t = configured("m", "cl");
    t.md[0] = (struct tkv){BF_MD_PRIORITY, "4242", 0};
    t.md[1] = (struct tkv){BF_MD_FINGERPRINT, "p=4242|ipb=1|rpb=1|reqs=|spr=", 0};
    apply_list(r, &t, 1, true, &res);
    ck_assert(rec_of(&f.shm, "m", &rec, NULL));
    ck_assert_int_eq(rec.state, BF_STATE_CONFIGURED);
    ck_assert_int_eq(rec.assigned_priority, 4242);
    ck_assert_str_eq(bf_str(&f.shm, rec.fingerprint, NULL), "p=4242|ipb=1|rpb=1|reqs=|spr=");
    ck_assert(!(rec.flags & BF_REC_NEEDS_REFRESH));
    recon_close(r, &f);
}
END_TEST

START_TEST(a_record_flagged_for_refresh_is_applied_even_in_the_same_state)
{
    struct pfx f;
    struct bf_recon *r = recon_open(&f);
    struct tmach t = tmach_idle("m");
    struct bf_recon_result res;
    struct bf_machine_rec rec;
    uint32_t slot = ingest_one(r, &f.shm, &t, &res, &rec);
    struct bf_inv_txn tx;
    struct bf_machine_rec nr = inv_begin(&f.shm, slot, &tx);
    nr.flags |= BF_REC_NEEDS_REFRESH;
    nr.price_per_hour = 123; /* a half-written record the supervisor repaired */
    bf_inv_commit(&f.shm, &tx, &nr, BF_CL_SUPERVISOR);
    apply_list(r, &t, 1, true, &res);
    ck_assert_int_eq(res.updated, 1);
    ck_assert(rec_of(&f.shm, "m", &rec, NULL));
    ck_assert(!(rec.flags & BF_REC_NEEDS_REFRESH));
    ck_assert(fabsf(rec.price_per_hour - 0.096f) < 1e-6f);
    recon_close(r, &f);
}
END_TEST

/* ------------------------------------------------------------ bad input */

START_TEST(bad_records_are_rejected_by_reason_and_the_last_good_one_is_kept)
{
    struct pfx f;
    struct bf_recon *r = recon_open(&f);
    struct tmach good[4] = {tmach_idle("p"), tmach_idle("q"), tmach_idle("s"), tmach_idle("t")};
    struct bf_recon_result res;
    apply_list(r, good, 4, true, &res);
    ck_assert_int_eq(res.inserted, 4);
    /* the provider now reports garbage for all four (in new states, so the
     * fast path does not hide it), plus a record without id and an unknown one */
    struct tmach bad[6] = {configured("p", "c"), configured("q", "c"), configured("s", "c"),
                           configured("t", "c"), tmach_idle(""),       tmach_idle("new-bad")};
    bad[0].price = -1;
    bad[1].prob = 1.5;
    bad[2].price = NAN;
    bad[3].state = 77;
    bad[5].prob = NAN;
    apply_list(r, bad, 6, true, &res);
    ck_assert_int_eq(res.rejected, 6);
    ck_assert_int_eq(res.rejected_by[BF_REJECT_PRICE], 2);
    ck_assert_int_eq(res.rejected_by[BF_REJECT_PROBABILITY], 2);
    ck_assert_int_eq(res.rejected_by[BF_REJECT_STRUCTURAL], 2);
    ck_assert_int_eq(res.removed, 0); /* a rejection is never read as a removal */
    ck_assert_int_eq(res.inserted, 0);
    struct bf_stats_reconciler *st = &f.shm.st->reconciler;
    ck_assert_uint_eq(atomic_load(&st->machines_rejected[BF_REJECT_PRICE]), 2);
    ck_assert_uint_eq(atomic_load(&st->machines_rejected[BF_REJECT_PROBABILITY]), 2);
    ck_assert_uint_eq(atomic_load(&st->machines_rejected[BF_REJECT_STRUCTURAL]), 2);
    const char *ids[] = {"p", "q", "s", "t"};
    for (int i = 0; i < 4; i++) {
        struct bf_machine_rec rec;
        ck_assert(rec_of(&f.shm, ids[i], &rec, NULL));
        ck_assert_int_eq(rec.state, BF_STATE_IDLE);
        ck_assert(rec.flags & BF_REC_REJECTED);
        ck_assert(fabsf(rec.price_per_hour - 0.096f) < 1e-6f);
    }
    uint32_t none;
    ck_assert_int_ne(bf_str_find(&f.shm, "new-bad", 7, &none), 0); /* nothing interned */
    /* good again: applied, flag cleared */
    apply_list(r, good, 4, true, &res);
    ck_assert_int_eq(res.updated, 4);
    struct bf_machine_rec rec;
    ck_assert(rec_of(&f.shm, "p", &rec, NULL));
    ck_assert(!(rec.flags & BF_REC_REJECTED));
    recon_close(r, &f);
}
END_TEST

static uint8_t *put_varint(uint8_t *p, size_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

START_TEST(a_known_machine_whose_record_stops_decoding_is_kept_and_not_removed)
{
    struct pfx f;
    struct bf_recon *r = recon_open(&f);
    struct tmach ts[2] = {tmach_idle("a"), tmach_idle("b")};
    struct bf_recon_result res;
    apply_list(r, ts, 2, true, &res);
    /* "b" now carries a label map entry whose key is a varint (malformed
     * inside a nested message), in a new state so the fast path does not
     * hide it: spliced into a real List by hand */
    ts[1].state = BF_STATE_CONFIGURING;
    ts[1].cluster = "c";
    size_t la, lb;
    uint8_t *ma = tmach_pack(&ts[0], &la), *mb = tmach_pack(&ts[1], &lb);
    static const uint8_t bad_label[] = {0x52, 0x02, 0x08, 0x01}; /* field 10 {1: varint 1} */
    size_t len = 6 + la + 6 + lb + sizeof bad_label;
    uint8_t *buf = malloc(len), *p = buf;
    *p++ = 0x0a;
    p = put_varint(p, la);
    memcpy(p, ma, la);
    p += la;
    *p++ = 0x0a;
    p = put_varint(p, lb + sizeof bad_label);
    memcpy(p, mb, lb);
    p += lb;
    memcpy(p, bad_label, sizeof bad_label);
    p += sizeof bad_label;
    len = (size_t)(p - buf);
    struct bf_prov_list l;
    ck_assert_int_eq(bf_prov_list_decode(buf, len, &l), 0);
    memset(&res, 0, sizeof res);
    bf_recon_list_issued(r);
    bf_recon_apply(r, &l, true, &res);
    ck_assert_int_eq(res.rejected_by[BF_REJECT_STRUCTURAL], 1);
    ck_assert_int_eq(res.removed, 0); /* a rejection is never read as a removal */
    struct bf_machine_rec rec;
    ck_assert(rec_of(&f.shm, "b", &rec, NULL));
    ck_assert_int_eq(rec.state, BF_STATE_IDLE); /* the last good record */
    ck_assert(rec.flags & BF_REC_REJECTED);
    free(buf);
    free(ma);
    free(mb);
    recon_close(r, &f);
}
END_TEST

START_TEST(machines_listed_out_of_slot_order_are_all_found)
{
    struct pfx f;
    struct bf_recon *r = recon_open(&f);
    char names[40][8];
    struct tmach ts[40], rev[40];
    for (int i = 0; i < 40; i++) {
        snprintf(names[i], sizeof names[i], "m-%02d", i);
        ts[i] = tmach_idle(names[i]);
    }
    struct bf_recon_result res;
    apply_list(r, ts, 40, true, &res);
    ck_assert_int_eq(res.inserted, 40);
    /* reversed, then shuffled by a stride: every machine is found (the slot
     * guess misses and the hash lookup answers), none inserted twice */
    for (int i = 0; i < 40; i++)
        rev[i] = ts[39 - i];
    apply_list(r, rev, 40, true, &res);
    ck_assert_int_eq(res.fast, 40);
    ck_assert_int_eq(res.inserted + res.removed + res.updated, 0);
    for (int i = 0; i < 40; i++)
        rev[i] = ts[(i * 7) % 40];
    rev[5].state = BF_STATE_DELETING;
    apply_list(r, rev, 40, true, &res);
    ck_assert_int_eq(res.fast, 39);
    ck_assert_int_eq(res.updated, 1);
    ck_assert_int_eq(res.inserted + res.removed, 0);
    ck_assert_uint_eq(atomic_load(&f.shm.inv->n_machines), 40);
    struct bf_machine_rec rec;
    ck_assert(rec_of(&f.shm, rev[5].id, &rec, NULL));
    ck_assert_int_eq(rec.state, BF_STATE_DELETING);
    recon_close(r, &f);
}
END_TEST

START_TEST(full_passes_remove_what_the_provider_dropped_and_deltas_never_do)
{
    struct pfx f;
    struct bf_recon *r = recon_open(&f);
    struct tmach ts[3] = {tmach_idle("a"), tmach_idle("b"), tmach_idle("c")};
    struct bf_recon_result res;
    apply_list(r, ts, 3, true, &res);
    apply_list(r, ts, 1, false, &res); /* a delta holding only "a" */
    ck_assert_int_eq(res.removed, 0);
    struct bf_machine_rec rec;
    ck_assert(rec_of(&f.shm, "c", &rec, NULL));
    apply_list(r, ts, 1, true, &res); /* a full list holding only "a" */
    ck_assert_int_eq(res.removed, 2);
    ck_assert(rec_of(&f.shm, "a", &rec, NULL));
    ck_assert(!rec_of(&f.shm, "b", &rec, NULL));
    ck_assert_uint_eq(atomic_load(&f.shm.inv->n_machines), 1);
    recon_close(r, &f);
}
END_TEST

/* ------------------------------------------------------------ over gRPC */

static struct bf_recon_result pass(struct pfx *f, struct bf_recon *r)
{
    struct donecap d = {0};
    ck_assert_int_eq(bf_recon_step(r, true, bf_mono_ns(), on_done, &d), 1);
    ck_assert_int_eq(bf_recon_step(r, true, bf_mono_ns(), on_done, &d), -EBUSY);
    ck_assert(pfx_run_until(f, &d.done, 10 * SEC));
    return d.r;
}

START_TEST(passes_over_grpc_full_then_incremental_deltas)
{
    struct bf_sim_config cfg;
    bf_sim_config_init(&cfg);
    ck_assert_int_eq(bf_sim_config_set(&cfg, "seed-configured", "2", NULL, 0), 0);
    ck_assert_int_eq(bf_sim_config_set(&cfg, "seed-idle", "2", NULL, 0), 0);
    struct pfx f;
    pfx_open(&f, &cfg, true);
    size_t pool = bf_sim_machine_count(f.sim);
    struct bf_recon *r = recon_new(&f, true);
    struct bf_recon_result res = pass(&f, r);
    ck_assert_int_eq(res.status, BF_PROV_OK);
    ck_assert(res.full);
    ck_assert_uint_eq(res.listed, pool);
    ck_assert_uint_eq(res.inserted, pool);
    /* seeded Configured machines restored their assignment from the echo */
    const char *conf = sim_first_in_state(f.sim, BF_STATE_CONFIGURED);
    struct bf_machine_rec rec;
    ck_assert(rec_of(&f.shm, conf, &rec, NULL));
    ck_assert_int_eq(rec.assigned_priority, 1000000);
    ck_assert_uint_ne(rec.fingerprint, 0);
    /* nothing changed: the delta is empty */
    res = pass(&f, r);
    ck_assert(!res.full);
    ck_assert_int_eq(res.listed, 0);
    /* one Create at the provider: the delta holds exactly that machine */
    char id[128];
    snprintf(id, sizeof id, "%s", sim_first_in_state(f.sim, BF_STATE_SPECULATIVE));
    struct capture c = {0};
    ck_assert_int_eq(bf_prov_create(f.cl, id, strlen(id), 0, cap_ack, &c, NULL), 0);
    ck_assert(pfx_run_until(&f, &c.done, 5 * SEC));
    res = pass(&f, r);
    ck_assert(!res.full);
    ck_assert_int_eq(res.listed, 1);
    ck_assert_int_eq(res.updated, 1);
    ck_assert(rec_of(&f.shm, id, &rec, NULL));
    ck_assert_int_eq(rec.state, BF_STATE_IDLE);
    ck_assert_uint_ne(rec.host, 0);
    bf_recon_free(r);
    pfx_close(&f);
}
END_TEST

START_TEST(incremental_passes_reread_records_flagged_for_refresh_with_get)
{
    struct pfx f;
    pfx_open(&f, NULL, true);
    struct bf_recon *r = recon_new(&f, true);
    struct bf_recon_result res = pass(&f, r);
    ck_assert(res.full);
    res = pass(&f, r);
    ck_assert(!res.full);
    ck_assert_int_eq(res.listed, 0);
    /* the executor left a machine Creating + NEEDS_REFRESH after a transport
     * failure; the provider never saw the Create: no delta will carry it */
    char id[128];
    snprintf(id, sizeof id, "%s", sim_first_in_state(f.sim, BF_STATE_SPECULATIVE));
    struct bf_machine_rec rec;
    uint32_t slot;
    ck_assert(rec_of(&f.shm, id, &rec, &slot));
    struct bf_inv_txn t;
    ck_assert_int_eq(bf_inv_begin(&f.shm, slot, &t), 0);
    struct bf_machine_rec nr = t.old;
    nr.state = BF_STATE_CREATING;
    nr.flags |= BF_REC_NEEDS_REFRESH;
    bf_inv_commit(&f.shm, &t, &nr, BF_CL_EXECUTOR);
    /* and a record of a machine the provider does not know at all */
    struct bf_machine_rec ghost = {.state = BF_STATE_IDLE, .flags = BF_REC_NEEDS_REFRESH};
    ck_assert_int_eq(bf_str_intern_cstr(&f.shm, "ghost-machine", &ghost.id), 0);
    uint32_t gslot;
    ck_assert_int_eq(bf_inv_insert(&f.shm, &ghost, &gslot), 0);
    bf_cl_append(&f.shm, BF_CL_SUPERVISOR, gslot);
    res = pass(&f, r);
    ck_assert(!res.full); /* still a delta pass */
    ck_assert_int_eq(res.refreshed, 2);
    ck_assert(rec_of(&f.shm, id, &rec, NULL));
    ck_assert_int_eq(rec.state, BF_STATE_SPECULATIVE);
    ck_assert(!(rec.flags & BF_REC_NEEDS_REFRESH));
    ck_assert(!rec_of(&f.shm, "ghost-machine", &rec, NULL)); /* NOT_FOUND: removed */
    ck_assert_int_eq(res.removed, 1);
    /* nothing flagged any more: the next pass is an empty delta again */
    res = pass(&f, r);
    ck_assert_int_eq(res.refreshed, 0);
    ck_assert_int_eq(res.listed, 0);
    bf_recon_free(r);
    pfx_close(&f);
}
END_TEST

START_TEST(a_failed_list_leaves_the_inventory_untouched)
{
    struct pfx f;
    struct bf_recon *r = recon_open(&f);
    struct bf_recon_result res = pass(&f, r);
    ck_assert_int_eq(res.status, BF_PROV_OK);
    uint32_t before = atomic_load(&f.shm.inv->n_machines);
    ck_assert_uint_gt(before, 0);
    bf_recon_free(r);
    /* point a reconciler at a dead provider */
    struct bf_prov_client *dead;
    struct bf_prov_opts po = {.addr = "127.0.0.1:1", .shard_id = "s", .epoch = 1};
    ck_assert_int_eq(bf_prov_client_new(f.loop, &po, &dead), 0);
    struct bf_recon_opts o = {0};
    ck_assert_int_eq(bf_recon_new(&f.shm, dead, &o, &r), 0);
    res = pass(&f, r);
    ck_assert_int_eq(res.status, BF_PROV_UNAVAILABLE);
    ck_assert_int_eq(res.removed, 0);
    ck_assert_uint_eq(atomic_load(&f.shm.inv->n_machines), before);
    bf_recon_free(r);
    bf_prov_client_free(dead);
    pfx_close(&f);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("reconciler");
    TCase *t = tcase_create("ingest");
    tcase_add_test(t, new_machines_are_inserted_and_bound_ones_restore_assignment_from_metadata);
    tcase_add_test(t, same_state_takes_the_fast_path_and_writes_nothing);
    tcase_add_test(t, machines_with_an_action_in_flight_are_skipped);
    tcase_add_test(t, a_list_older_than_an_executor_write_does_not_overwrite_it);
    tcase_add_test(t, an_asynchronous_configure_completion_records_provisioning_latency_once);
    tcase_add_test(t, a_divergent_bound_state_keeps_shard_assignment_and_unbound_clears_it);
    tcase_add_test(t, configured_without_the_shard_stamp_takes_the_assignment_from_the_echo);
    tcase_add_test(t, a_record_flagged_for_refresh_is_applied_even_in_the_same_state);
    suite_add_tcase(s, t);
    t = tcase_create("bad_input");
    tcase_add_test(t, bad_records_are_rejected_by_reason_and_the_last_good_one_is_kept);
    tcase_add_test(t, full_passes_remove_what_the_provider_dropped_and_deltas_never_do);
    tcase_add_test(t, a_known_machine_whose_record_stops_decoding_is_kept_and_not_removed);
    tcase_add_test(t, machines_listed_out_of_slot_order_are_all_found);
    suite_add_tcase(s, t);
    t = tcase_create("grpc");
    tcase_set_timeout(t, 30);
    tcase_add_test(t, passes_over_grpc_full_then_incremental_deltas);
    tcase_add_test(t, incremental_passes_reread_records_flagged_for_refresh_with_get);
    tcase_add_test(t, a_failed_list_leaves_the_inventory_untouched);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    bf_log_init("test", BF_LOG_ERROR);
    return check_run(suite());
}
