/*
 * test_executor.c — the executor (src/executor/executor.h) against the
 * simulated provider over real gRPC, with this test playing the cycle
 * (actions pushed exactly as the cycle does) and the session (BOOT_REQ /
 * BOOT_RESP, RECLAIM, NODE_EXEC rings). Covers the execute paths and their
 * outcome labels, the bootstrap blob through the session, fencing, transport
 * failures, redelivery after a restart, concurrency, ring release order,
 * dispositions and the audit line format.
 */
#include <fcntl.h>

#include "bigfleet/log.h"
#include "executor/executor.h"
#include "reconciler/reconciler.h"
#include "test_provider.h"
#include "check_run.h"

struct xfx {
    struct pfx f;
    struct bf_exec *e;
    struct bf_recon *r;
    int audit_fd;
    char audit_path[128];
    uint32_t need_ref, fp_ref, cluster_ref;
};

static void reconcile_now(struct xfx *x);

static void xfx_open(struct xfx *x, const struct bf_sim_config *cfg, const struct bf_exec_opts *eo)
{
    memset(x, 0, sizeof *x);
    pfx_open(&x->f, cfg, true);
    snprintf(x->audit_path, sizeof x->audit_path, "/tmp/ut-audit-%d.jsonl", (int)getpid());
    unlink(x->audit_path);
    x->audit_fd = open(x->audit_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    ck_assert_int_ge(x->audit_fd, 0);
    struct bf_exec_opts o = {.concurrency = 16, .local_bootstrap = true};
    if (eo)
        o = *eo;
    o.audit_fd = x->audit_fd;
    ck_assert_int_eq(bf_exec_new(x->f.loop, &x->f.shm, x->f.cl, &o, &x->e), 0);
    struct bf_recon_opts ro = {0};
    ck_assert_int_eq(bf_recon_new(&x->f.shm, x->f.cl, &ro, &x->r), 0);
    reconcile_now(x);
    /* a need profile: priority 5000, buckets 16/19, pinned to m6i.large */
    static const char *vals[] = {"m6i.large"};
    struct bf_requirement req = {
        .key = BF_LABEL_INSTANCE_TYPE, .op = BF_OP_IN, .n_values = 1, .values = vals};
    struct bf_need_profile p = {.priority = 5000, .ipb = 16, .rpb = 19, .n_reqs = 1, .reqs = &req};
    ck_assert_int_eq(bf_nprofile_intern(&x->f.shm, &p, &x->need_ref, &x->fp_ref), 0);
    ck_assert_int_eq(bf_str_intern_cstr(&x->f.shm, "cluster-a", &x->cluster_ref), 0);
}

static void xfx_close(struct xfx *x)
{
    bf_exec_close(x->e);
    bf_recon_free(x->r);
    bf_prov_client_free(x->f.cl);
    x->f.cl = NULL;
    bf_exec_free(x->e);
    close(x->audit_fd);
    unlink(x->audit_path);
    pfx_close(&x->f);
}

struct rdone {
    bool done;
};
static void rdone_cb(void *arg, const struct bf_recon_result *r)
{
    (void)r;
    ((struct rdone *)arg)->done = true;
}

static void reconcile_now(struct xfx *x)
{
    struct rdone d = {0};
    ck_assert_int_eq(bf_recon_step(x->r, true, bf_mono_ns(), rdone_cb, &d), 1);
    ck_assert(pfx_run_until(&x->f, &d.done, 10 * SEC));
}

static uint32_t slot_of(struct xfx *x, const char *id)
{
    uint32_t slot;
    ck_assert_int_eq(bf_inv_lookup_id(&x->f.shm, id, strlen(id), &slot), 0);
    return slot;
}

static struct bf_machine_rec rec_at(struct xfx *x, uint32_t slot)
{
    struct bf_machine_rec r;
    ck_assert_int_eq(bf_inv_read(&x->f.shm, slot, &r), 0);
    return r;
}

/* Pushes one action as the cycle would; returns its slot. */
static uint32_t push(struct xfx *x, int kind, const char *id, int disposition)
{
    uint32_t slot = slot_of(x, id);
    struct bf_machine_rec rec = rec_at(x, slot);
    ck_assert(!bf_pending(&x->f.shm, slot));
    uint8_t tag = bf_pending_mark(&x->f.shm, slot);
    struct bf_action_msg a = {
        .serial = atomic_fetch_add(&x->f.shm.st->action_serial, 1) + 1,
        .slot = slot,
        .machine_id_ref = rec.id,
        .cluster_ref =
            (kind == BF_ACT_BOOTSTRAP || kind == BF_ACT_PROVISION) ? x->cluster_ref : rec.cluster,
        .need_profile_ref = x->need_ref,
        .grace_seconds = kind == BF_ACT_RECLAIM ? 600 : 0,
        .kind = (uint8_t)kind,
        .reason = kind == BF_ACT_PROVISION ? BF_REASON_P1_SPECULATIVE : BF_REASON_P1_IDLE,
        .pending_tag = tag,
        .disposition = (uint8_t)disposition,
    };
    ck_assert_int_eq(bf_ring_push(&x->f.shm, BF_RING_ACTIONS, &a), 0);
    return slot;
}

static bool settled(struct xfx *x, uint32_t slot, int64_t timeout)
{
    int64_t end = bf_mono_ns() + timeout;
    while (bf_mono_ns() < end) {
        bf_exec_poll(x->e);
        if (!bf_pending(&x->f.shm, slot))
            return true;
        bf_net_loop_run_once(x->f.loop, 2 * MS);
    }
    return false;
}

static uint64_t outcome(struct xfx *x, int kind, int o)
{
    return atomic_load(&x->f.shm.st->executor.outcomes[kind][o]);
}

static char *id_in(struct xfx *x, int state)
{
    const char *id = sim_first_in_state(x->f.sim, state);
    ck_assert_ptr_nonnull(id);
    static char buf[4][128];
    static int k;
    char *b = buf[k++ & 3];
    snprintf(b, 128, "%s", id);
    (void)x;
    return b;
}

static struct bf_sim_config cfg2(const char *n1, const char *v1, const char *n2, const char *v2)
{
    struct bf_sim_config c;
    bf_sim_config_init(&c);
    if (n1)
        ck_assert_int_eq(bf_sim_config_set(&c, n1, v1, NULL, 0), 0);
    if (n2)
        ck_assert_int_eq(bf_sim_config_set(&c, n2, v2, NULL, 0), 0);
    return c;
}

/* Reads the audit log: returns the number of records; copies record k
 * (0-based; k < 0: the last one) into out. */
static int audit_line(struct xfx *x, int k, char *out, size_t n)
{
    FILE *fp = fopen(x->audit_path, "r");
    ck_assert_ptr_nonnull(fp);
    char line[8192];
    int c = 0;
    while (fgets(line, sizeof line, fp)) {
        if (out && (k < 0 || c == k))
            snprintf(out, n, "%s", line);
        c++;
    }
    fclose(fp);
    return c;
}

/* ------------------------------------------------------------ the paths */

START_TEST(provision_walks_speculative_to_configured_with_stamps_and_echo)
{
    struct xfx x;
    xfx_open(&x, NULL, NULL);
    char *id = id_in(&x, BF_STATE_SPECULATIVE);
    uint32_t slot = push(&x, BF_ACT_PROVISION, id, BF_DISP_EXECUTE);
    ck_assert(settled(&x, slot, 5 * SEC));
    ck_assert_uint_eq(outcome(&x, BF_ACT_PROVISION, BF_OUT_SUCCESS), 1);
    struct bf_machine_rec r = rec_at(&x, slot);
    ck_assert_int_eq(r.state, BF_STATE_CONFIGURED);
    ck_assert_uint_eq(r.cluster, x.cluster_ref);
    ck_assert_uint_eq(r.fingerprint, x.fp_ref);
    ck_assert_int_eq(r.assigned_priority, 5000);
    ck_assert_int_eq(r.ipb, 16);
    ck_assert_int_eq(r.rpb, 19);
    ck_assert_uint_ne(r.host, 0);
    /* the provider stores the assignment echo and the binding */
    struct bf_sim_view v;
    ck_assert_int_eq(bf_sim_lookup(x.f.sim, id, &v), 0);
    ck_assert_int_eq(v.state, BF_STATE_CONFIGURED);
    ck_assert_int_eq(v.n_metadata, 5);
    ck_assert(v.cluster_len == 9 && !memcmp(v.cluster, "cluster-a", 9));
    /* node events for the operator: Configuring then Configured, to cluster-a */
    struct bf_node_event_msg ev;
    int n = 0, last = -1;
    while (bf_ring_pop(&x.f.shm, BF_RING_NODE_EXEC, &ev) == 0) {
        ck_assert_uint_eq(ev.cluster_ref, x.cluster_ref);
        last = ev.state;
        n++;
    }
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(last, BF_STATE_CONFIGURED);
    ck_assert_uint_eq(atomic_load(&x.f.shm.st->executor.configure_phase.count), 1);
    /* audited once, as a success; the action is done for the cycle */
    char line[8192];
    ck_assert_int_eq(audit_line(&x, -1, line, sizeof line), 1);
    ck_assert_ptr_nonnull(strstr(line, "\"kind\":\"Provision\""));
    ck_assert_ptr_nonnull(strstr(line, "\"outcome\":\"success\""));
    ck_assert_uint_eq(bf_exec_unreleased(x.e), 0);
    ck_assert_uint_eq(bf_ring_depth(&x.f.shm, BF_RING_ACTIONS), 0);
    xfx_close(&x);
}
END_TEST

START_TEST(bootstrap_of_an_already_configured_machine_for_the_same_target_is_a_noop)
{
    struct xfx x;
    xfx_open(&x, NULL, NULL);
    char *id = id_in(&x, BF_STATE_SPECULATIVE);
    uint32_t slot = push(&x, BF_ACT_PROVISION, id, BF_DISP_EXECUTE);
    ck_assert(settled(&x, slot, 5 * SEC));
    struct bf_sim_stats before, after;
    bf_sim_get_stats(x.f.sim, &before);
    push(&x, BF_ACT_BOOTSTRAP, id, BF_DISP_EXECUTE);
    ck_assert(settled(&x, slot, 5 * SEC));
    bf_sim_get_stats(x.f.sim, &after);
    ck_assert_uint_eq(after.calls[BF_SIM_RPC_CONFIGURE], before.calls[BF_SIM_RPC_CONFIGURE]);
    ck_assert_uint_eq(outcome(&x, BF_ACT_BOOTSTRAP, BF_OUT_SUCCESS), 1);
    xfx_close(&x);
}
END_TEST

START_TEST(reclaim_tells_the_operator_first_then_drains_and_clears_the_assignment)
{
    struct xfx x;
    xfx_open(&x, NULL, NULL);
    char *id = id_in(&x, BF_STATE_SPECULATIVE);
    uint32_t slot = push(&x, BF_ACT_PROVISION, id, BF_DISP_EXECUTE);
    ck_assert(settled(&x, slot, 5 * SEC));
    struct bf_node_event_msg ev;
    while (bf_ring_pop(&x.f.shm, BF_RING_NODE_EXEC, &ev) == 0)
        ;
    push(&x, BF_ACT_RECLAIM, id, BF_DISP_EXECUTE);
    ck_assert(settled(&x, slot, 5 * SEC));
    ck_assert_uint_eq(outcome(&x, BF_ACT_RECLAIM, BF_OUT_SUCCESS), 1);
    struct bf_reclaim_msg rm;
    ck_assert_int_eq(bf_ring_pop(&x.f.shm, BF_RING_RECLAIM, &rm), 0);
    ck_assert_uint_eq(rm.cluster_ref, x.cluster_ref);
    ck_assert_int_eq(rm.grace_seconds, 600);
    ck_assert_int_eq(rm.preemptor_priority, 0);
    ck_assert_int_eq(rm.kind, BF_ACT_RECLAIM);
    struct bf_machine_rec r = rec_at(&x, slot);
    ck_assert_int_eq(r.state, BF_STATE_IDLE);
    ck_assert_uint_eq(r.cluster, 0);
    ck_assert_uint_eq(r.fingerprint, 0);
    ck_assert_int_eq(r.assigned_priority, 0);
    ck_assert_uint_ne(r.idle_since, 0);
    /* Draining then Idle, both routed to the cluster the machine left */
    int n = 0;
    while (bf_ring_pop(&x.f.shm, BF_RING_NODE_EXEC, &ev) == 0) {
        ck_assert_uint_eq(ev.cluster_ref, x.cluster_ref);
        n++;
    }
    ck_assert_int_eq(n, 2);
    struct bf_sim_view v;
    ck_assert_int_eq(bf_sim_lookup(x.f.sim, id, &v), 0);
    ck_assert_int_eq(v.n_metadata, 0); /* the provider cleared the echo with the binding */
    xfx_close(&x);
}
END_TEST

START_TEST(delete_releases_the_host_and_a_rejected_delete_fails_the_machine)
{
    static const struct bf_sim_type types[2] = {{.name = "m6i.large",
                                                 .cpu_milli = 2000,
                                                 .memory_mib = 8192,
                                                 .capacity_type = BF_CT_ON_DEMAND,
                                                 .price_per_hour = 0.096},
                                                {.name = "metal",
                                                 .cpu_milli = 64000,
                                                 .memory_mib = 262144,
                                                 .capacity_type = BF_CT_BARE_METAL,
                                                 .price_per_hour = 2}};
    struct bf_sim_config cfg = cfg2("seed-idle", "1", NULL, NULL);
    cfg.types = types;
    cfg.n_types = 2;
    struct xfx x;
    xfx_open(&x, &cfg, NULL);
    uint32_t od = slot_of(&x, "m6i.large-zone-a-0"), bm = slot_of(&x, "metal-zone-a-0");
    ck_assert_int_eq(rec_at(&x, od).state, BF_STATE_IDLE);
    push(&x, BF_ACT_DELETE, "m6i.large-zone-a-0", BF_DISP_EXECUTE);
    push(&x, BF_ACT_DELETE, "metal-zone-a-0", BF_DISP_EXECUTE);
    ck_assert(settled(&x, od, 5 * SEC) && settled(&x, bm, 5 * SEC));
    struct bf_machine_rec r = rec_at(&x, od);
    ck_assert_int_eq(r.state, BF_STATE_SPECULATIVE);
    ck_assert_uint_eq(r.host, 0);
    ck_assert_uint_eq(atomic_load(&x.f.shm.st->executor.idle_releases), 1);
    /* bare metal: Delete is UNIMPLEMENTED, a contract violation -> Failed */
    r = rec_at(&x, bm);
    ck_assert_int_eq(r.state, BF_STATE_FAILED);
    ck_assert_ptr_nonnull(strstr(bf_str(&x.f.shm, r.last_error, NULL), "delete:"));
    ck_assert_uint_eq(outcome(&x, BF_ACT_DELETE, BF_OUT_PROVIDER_ERROR), 1);
    xfx_close(&x);
}
END_TEST

/* ------------------------------------------------------------ bootstrap via the session */

static bool pop_boot_req(struct xfx *x, struct bf_boot_req_msg *q, int64_t timeout)
{
    int64_t end = bf_mono_ns() + timeout;
    while (bf_mono_ns() < end) {
        bf_exec_poll(x->e);
        if (bf_ring_pop(&x->f.shm, BF_RING_BOOT_REQ, q) == 0)
            return true;
        bf_net_loop_run_once(x->f.loop, 2 * MS);
    }
    return false;
}

static void answer(struct xfx *x, uint64_t req, int status, const char *err, const char *blob)
{
    struct bf_boot_resp_hdr h = {.request_id = req,
                                 .status = (uint32_t)status,
                                 .error_len = err ? (uint32_t)strlen(err) : 0,
                                 .blob_len = blob ? strlen(blob) : 0};
    size_t el = h.error_len, bl = h.blob_len;
    char *payload = malloc(el + bl + 1);
    memcpy(payload, err ? err : "", el);
    memcpy(payload + el, blob ? blob : "", bl);
    ck_assert_int_eq(
        bf_ring_push_bytes(&x->f.shm, BF_RING_BOOT_RESP, &h, sizeof h, payload, el + bl), 0);
    free(payload);
}

START_TEST(bootstrap_fetches_the_blob_through_the_session_rings)
{
    struct bf_exec_opts eo = {.concurrency = 8};
    struct bf_sim_config cfg = cfg2("seed-idle", "1", NULL, NULL);
    struct xfx x;
    xfx_open(&x, &cfg, &eo);
    char *id = id_in(&x, BF_STATE_IDLE);
    uint32_t slot = push(&x, BF_ACT_BOOTSTRAP, id, BF_DISP_EXECUTE);
    struct bf_boot_req_msg q;
    ck_assert(pop_boot_req(&x, &q, 2 * SEC));
    ck_assert_uint_eq(q.slot, slot);
    ck_assert_uint_eq(q.cluster_ref, x.cluster_ref);
    ck_assert_uint_eq(q.need_profile_ref, x.need_ref);
    ck_assert_int_gt(q.deadline_ns, bf_now_ns());
    /* Configuring while the blob is fetched, stamped with the destination */
    struct bf_machine_rec r = rec_at(&x, slot);
    ck_assert_int_eq(r.state, BF_STATE_CONFIGURING);
    ck_assert_uint_eq(r.cluster, x.cluster_ref);
    ck_assert_uint_eq(r.fingerprint, x.fp_ref);
    answer(&x, q.request_id ^ 1, BF_BOOT_OK, NULL, "wrong id: dropped");
    answer(&x, q.request_id, BF_BOOT_OK, NULL, "#cloud-config\n");
    ck_assert(settled(&x, slot, 5 * SEC));
    ck_assert_int_eq(rec_at(&x, slot).state, BF_STATE_CONFIGURED);
    ck_assert_uint_eq(atomic_load(&x.f.shm.st->executor.request_bootstrap.count), 1);
    xfx_close(&x);
}
END_TEST

START_TEST(bootstrap_timeout_rolls_back_to_idle_and_operator_error_fails)
{
    struct bf_exec_opts eo = {.concurrency = 8, .bootstrap_timeout_ns = 150 * MS};
    struct bf_sim_config cfg = cfg2("seed-idle", "3", NULL, NULL);
    struct xfx x;
    xfx_open(&x, &cfg, &eo);
    uint32_t a = push(&x, BF_ACT_BOOTSTRAP, "m6i.large-zone-a-0", BF_DISP_EXECUTE);
    struct bf_boot_req_msg q;
    ck_assert(pop_boot_req(&x, &q, 2 * SEC)); /* never answered */
    ck_assert(settled(&x, a, 3 * SEC));
    struct bf_machine_rec r = rec_at(&x, a);
    ck_assert_int_eq(r.state, BF_STATE_IDLE);
    ck_assert_uint_eq(r.cluster, 0);
    ck_assert_uint_eq(outcome(&x, BF_ACT_BOOTSTRAP, BF_OUT_CTX_CANCELED), 1);
    /* a late answer for it is dropped */
    answer(&x, q.request_id, BF_BOOT_OK, NULL, "late");
    uint32_t b = push(&x, BF_ACT_BOOTSTRAP, "m6i.large-zone-b-0", BF_DISP_EXECUTE);
    ck_assert(pop_boot_req(&x, &q, 2 * SEC));
    answer(&x, q.request_id, BF_BOOT_OPERATOR_ERROR, "no such node pool", NULL);
    ck_assert(settled(&x, b, 3 * SEC));
    r = rec_at(&x, b);
    ck_assert_int_eq(r.state, BF_STATE_FAILED);
    ck_assert_str_eq(bf_str(&x.f.shm, r.last_error, NULL),
                     "bootstrap: operator: no such node pool");
    ck_assert_uint_eq(outcome(&x, BF_ACT_BOOTSTRAP, BF_OUT_BLOB_ERROR), 1);
    uint32_t c = push(&x, BF_ACT_BOOTSTRAP, "m6i.large-zone-c-0", BF_DISP_EXECUTE);
    ck_assert(pop_boot_req(&x, &q, 2 * SEC));
    answer(&x, q.request_id, BF_BOOT_NO_SESSION, NULL, NULL);
    ck_assert(settled(&x, c, 3 * SEC));
    ck_assert_int_eq(rec_at(&x, c).state, BF_STATE_IDLE);
    ck_assert_uint_eq(outcome(&x, BF_ACT_BOOTSTRAP, BF_OUT_NO_SESSION), 1);
    xfx_close(&x);
}
END_TEST

/* ------------------------------------------------------------ provider trouble */

START_TEST(a_fenced_rejection_fails_the_machine_and_is_not_retried)
{
    struct xfx x;
    xfx_open(&x, NULL, NULL);
    char *id = id_in(&x, BF_STATE_SPECULATIVE);
    /* a newer incarnation of this shard touched the machine: our tokens are stale */
    struct bf_prov_client *newer;
    struct bf_prov_opts po = {.addr = x.f.addr, .shard_id = "ut-shard", .epoch = 2};
    ck_assert_int_eq(bf_prov_client_new(x.f.loop, &po, &newer), 0);
    struct capture c = {0};
    ck_assert_int_eq(bf_prov_get(newer, id, strlen(id), 0, cap_machine, &c, NULL), 0);
    ck_assert(pfx_run_until(&x.f, &c.done, 5 * SEC));
    memset(&c, 0, sizeof c); /* a Drain out of position still sets the mark */
    ck_assert_int_eq(bf_prov_drain(newer, id, strlen(id), 0, 0, cap_ack, &c, NULL), 0);
    ck_assert(pfx_run_until(&x.f, &c.done, 5 * SEC));
    ck_assert_int_eq(c.r.status, BF_PROV_ERROR);
    struct bf_sim_stats before, after;
    bf_sim_get_stats(x.f.sim, &before);
    uint32_t slot = push(&x, BF_ACT_PROVISION, id, BF_DISP_EXECUTE);
    ck_assert(settled(&x, slot, 5 * SEC));
    bf_sim_get_stats(x.f.sim, &after);
    ck_assert_uint_eq(after.fenced - before.fenced, 1); /* one attempt, no retry */
    ck_assert_uint_eq(outcome(&x, BF_ACT_PROVISION, BF_OUT_FENCED), 1);
    struct bf_machine_rec r = rec_at(&x, slot);
    ck_assert_int_eq(r.state, BF_STATE_FAILED);
    ck_assert_ptr_nonnull(strstr(bf_str(&x.f.shm, r.last_error, NULL), "fenced"));
    bf_prov_client_free(newer);
    xfx_close(&x);
}
END_TEST

START_TEST(a_transport_failure_leaves_the_machine_transitional_for_reconcile_to_resolve)
{
    /* Create replies after 2 s; the action's deadline is 200 ms */
    struct bf_sim_config cfg = cfg2("create-reply-latency", "2s", NULL, NULL);
    struct bf_exec_opts eo = {
        .concurrency = 8, .local_bootstrap = true, .execute_timeout_ns = 200 * MS};
    struct xfx x;
    xfx_open(&x, &cfg, &eo);
    char *id = id_in(&x, BF_STATE_SPECULATIVE);
    uint32_t slot = push(&x, BF_ACT_PROVISION, id, BF_DISP_EXECUTE);
    ck_assert(settled(&x, slot, 3 * SEC));
    ck_assert_uint_eq(outcome(&x, BF_ACT_PROVISION, BF_OUT_CTX_CANCELED), 1);
    struct bf_machine_rec r = rec_at(&x, slot);
    ck_assert_int_eq(r.state, BF_STATE_CREATING); /* not Failed: the provider may have it */
    ck_assert(r.flags & BF_REC_NEEDS_REFRESH);
    /* the provider did apply the Create: the next pass sets its truth */
    reconcile_now(&x);
    r = rec_at(&x, slot);
    ck_assert_int_eq(r.state, BF_STATE_IDLE);
    ck_assert(!(r.flags & BF_REC_NEEDS_REFRESH));
    xfx_close(&x);
}
END_TEST

START_TEST(create_capacity_exhaustion_ends_failed_through_reconcile)
{
    /* one host for the whole provider, Creates complete after 50 ms */
    struct bf_sim_config cfg = cfg2("max-hosts", "1", "create-latency", "50ms");
    struct xfx x;
    xfx_open(&x, &cfg, NULL);
    uint32_t a = push(&x, BF_ACT_PROVISION, "m6i.large-zone-a-0", BF_DISP_EXECUTE);
    uint32_t b = push(&x, BF_ACT_PROVISION, "m6i.large-zone-b-0", BF_DISP_EXECUTE);
    ck_assert(settled(&x, a, 3 * SEC) && settled(&x, b, 3 * SEC));
    /* both accepted as Creating (async): success for the executor */
    ck_assert_uint_eq(outcome(&x, BF_ACT_PROVISION, BF_OUT_SUCCESS), 2);
    pfx_run_for(&x.f, 150 * MS);
    reconcile_now(&x);
    /* one got the only host, the other ran into exhaustion at the provider */
    int idle = 0, failed = 0;
    uint32_t s[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        struct bf_machine_rec r = rec_at(&x, s[i]);
        idle += r.state == BF_STATE_IDLE;
        failed += r.state == BF_STATE_FAILED;
    }
    ck_assert_int_eq(idle, 1);
    ck_assert_int_eq(failed, 1);
    xfx_close(&x);
}
END_TEST

/* A provider that answers every Create with an Idle machine priced -1 $/h. */
static void garbage_create(struct bf_net_call *call, const uint8_t *msg, size_t len, void *arg)
{
    (void)arg;
    Bigfleet__V1alpha1__CreateRequest *q =
        bigfleet__v1alpha1__create_request__unpack(NULL, len, msg);
    struct tmach t = tmach_idle(q ? q->machine_id : "?");
    t.price = -1;
    Bigfleet__V1alpha1__Machine m;
    struct tmach_store st;
    tmach_fill(&t, &m, &st);
    Bigfleet__V1alpha1__TransitionAck ack = BIGFLEET__V1ALPHA1__TRANSITION_ACK__INIT;
    ack.operation_id = "op-1";
    ack.machine = &m;
    bf_net_call_reply_pb(call, &ack.base);
    bigfleet__v1alpha1__create_request__free_unpacked(q, NULL);
}

START_TEST(a_garbage_create_ack_fails_the_machine_and_ingests_nothing)
{
    struct xfx x;
    xfx_open(&x, NULL, NULL);
    static const struct bf_net_method m[] = {{"/bigfleet.v1alpha1.CapacityProvider/Create",
                                              BF_NET_UNARY, NULL, garbage_create, NULL, NULL, NULL,
                                              NULL}};
    struct bf_net_server_opts so = {.addr = "127.0.0.1:0", .methods = m, .n_methods = 1};
    struct bf_net_server *srv;
    ck_assert_int_eq(bf_net_server_new(x.f.loop, &so, &srv), 0);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", bf_net_server_port(srv));
    /* a second executor on the bad provider (the first stays idle) */
    struct bf_prov_client *bad;
    struct bf_prov_opts po = {.addr = addr, .shard_id = "ut-shard", .epoch = 1};
    ck_assert_int_eq(bf_prov_client_new(x.f.loop, &po, &bad), 0);
    bf_exec_close(x.e);
    struct bf_exec *e2;
    struct bf_exec_opts o = {.concurrency = 4, .local_bootstrap = true, .audit_fd = -1};
    ck_assert_int_eq(bf_exec_new(x.f.loop, &x.f.shm, bad, &o, &e2), 0);
    char *id = id_in(&x, BF_STATE_SPECULATIVE);
    uint32_t slot = push(&x, BF_ACT_PROVISION, id, BF_DISP_EXECUTE);
    float price = rec_at(&x, slot).price_per_hour;
    int64_t end = bf_mono_ns() + 3 * SEC;
    while (bf_pending(&x.f.shm, slot) && bf_mono_ns() < end) {
        bf_exec_poll(e2);
        bf_net_loop_run_once(x.f.loop, 2 * MS);
    }
    ck_assert(!bf_pending(&x.f.shm, slot));
    struct bf_machine_rec r = rec_at(&x, slot);
    ck_assert_int_eq(r.state, BF_STATE_FAILED);
    ck_assert_ptr_nonnull(strstr(bf_str(&x.f.shm, r.last_error, NULL), "create: ack rejected"));
    ck_assert(r.price_per_hour == price); /* the garbage price never entered the record */
    ck_assert_uint_eq(r.host, 0);
    ck_assert_uint_eq(outcome(&x, BF_ACT_PROVISION, BF_OUT_PROVIDER_ERROR), 1);
    bf_exec_close(e2);
    bf_prov_client_free(bad);
    bf_exec_free(e2);
    bf_net_server_free(srv);
    xfx_close(&x);
}
END_TEST

/* ------------------------------------------------------------ ring discipline */

START_TEST(redelivered_actions_are_skipped_when_done_and_refreshed_when_mid_flight)
{
    struct xfx x;
    xfx_open(&x, NULL, NULL);
    char *done_id = id_in(&x, BF_STATE_SPECULATIVE);
    uint32_t s1 = push(&x, BF_ACT_PROVISION, done_id, BF_DISP_EXECUTE);
    ck_assert(settled(&x, s1, 5 * SEC));
    /* simulate a successor: rewind the ring so the finished action is seen again */
    bf_exec_close(x.e);
    bf_exec_free(x.e);
    atomic_store(&x.f.shm.ring[BF_RING_ACTIONS]->cons, 0);
    /* and a live action whose machine a dead predecessor left in Creating */
    char *mid = NULL;
    size_t n = bf_sim_machine_count(x.f.sim);
    for (size_t i = 0; i < n && !mid; i++) {
        const char *cand = bf_sim_machine_id(x.f.sim, i);
        struct bf_sim_view v;
        if (strcmp(cand, done_id) && bf_sim_lookup(x.f.sim, cand, &v) == 0 &&
            v.state == BF_STATE_SPECULATIVE)
            mid = strdup(cand);
    }
    uint32_t s2 = push(&x, BF_ACT_PROVISION, mid, BF_DISP_EXECUTE);
    struct bf_inv_txn t;
    ck_assert_int_eq(bf_inv_begin(&x.f.shm, s2, &t), 0);
    struct bf_machine_rec nr = t.old;
    nr.state = BF_STATE_CREATING;
    bf_inv_commit(&x.f.shm, &t, &nr, BF_CL_EXECUTOR);
    struct bf_sim_stats before, after;
    bf_sim_get_stats(x.f.sim, &before);
    struct bf_exec_opts o = {.concurrency = 16, .local_bootstrap = true, .audit_fd = x.audit_fd};
    ck_assert_int_eq(bf_exec_new(x.f.loop, &x.f.shm, x.f.cl, &o, &x.e), 0);
    ck_assert(settled(&x, s2, 3 * SEC));
    bf_sim_get_stats(x.f.sim, &after);
    ck_assert_uint_eq(after.calls[BF_SIM_RPC_CREATE], before.calls[BF_SIM_RPC_CREATE]);
    ck_assert_uint_eq(outcome(&x, BF_ACT_PROVISION, BF_OUT_SUCCESS), 1); /* not re-run */
    ck_assert_uint_eq(outcome(&x, BF_ACT_PROVISION, BF_OUT_STALE_STATE), 1);
    ck_assert(rec_at(&x, s2).flags & BF_REC_NEEDS_REFRESH);
    reconcile_now(&x); /* the provider never saw it: Speculative again */
    ck_assert_int_eq(rec_at(&x, s2).state, BF_STATE_SPECULATIVE);
    ck_assert_uint_eq(bf_ring_depth(&x.f.shm, BF_RING_ACTIONS), 0);
    free(mid);
    xfx_close(&x);
}
END_TEST

START_TEST(a_slow_head_action_holds_the_ring_release_until_it_finishes)
{
    /* Delete replies after 400 ms, Create instantly */
    struct bf_sim_config cfg = cfg2("delete-reply-latency", "400ms", "seed-idle", "1");
    struct xfx x;
    xfx_open(&x, &cfg, NULL);
    uint32_t head = push(&x, BF_ACT_DELETE, "m6i.large-zone-a-0", BF_DISP_EXECUTE);
    uint32_t tail[4];
    const char *ids[4] = {"m6i.large-zone-b-1", "m6i.large-zone-c-1", "r6i.xlarge-zone-b-1",
                          "r6i.xlarge-zone-c-1"};
    for (int i = 0; i < 4; i++)
        tail[i] = push(&x, BF_ACT_PROVISION, ids[i], BF_DISP_EXECUTE);
    for (int i = 0; i < 4; i++)
        ck_assert(settled(&x, tail[i], 3 * SEC));
    ck_assert(bf_pending(&x.f.shm, head));
    ck_assert_uint_eq(bf_ring_cons(&x.f.shm, BF_RING_ACTIONS), 0); /* nothing released */
    ck_assert_uint_eq(bf_exec_unreleased(x.e), 5);
    ck_assert(settled(&x, head, 3 * SEC));
    ck_assert_uint_eq(bf_ring_cons(&x.f.shm, BF_RING_ACTIONS), 5);
    xfx_close(&x);
}
END_TEST

START_TEST(no_more_than_concurrency_actions_are_in_flight)
{
    struct bf_sim_config cfg = cfg2("create-reply-latency", "30ms", "seed-speculative", "40");
    struct bf_exec_opts eo = {.concurrency = 8, .local_bootstrap = true};
    struct xfx x;
    xfx_open(&x, &cfg, &eo);
    int pushed = 0;
    uint32_t hwm = bf_inv_hwm(&x.f.shm);
    for (uint32_t i = 0; i < hwm && pushed < 100; i++) {
        struct bf_machine_rec r = rec_at(&x, i);
        if (r.state != BF_STATE_SPECULATIVE)
            continue;
        uint32_t l;
        push(&x, BF_ACT_PROVISION, bf_str(&x.f.shm, r.id, &l), BF_DISP_EXECUTE);
        pushed++;
    }
    uint32_t peak = 0;
    int64_t end = bf_mono_ns() + 10 * SEC;
    while (bf_mono_ns() < end) {
        bf_exec_poll(x.e);
        uint32_t in = bf_exec_inflight(x.e);
        peak = in > peak ? in : peak;
        if (!in && bf_ring_depth(&x.f.shm, BF_RING_ACTIONS) == 0)
            break;
        bf_net_loop_run_once(x.f.loop, MS);
    }
    ck_assert_int_eq(pushed, 100);
    ck_assert_uint_eq(peak, 8);
    ck_assert_uint_eq(outcome(&x, BF_ACT_PROVISION, BF_OUT_SUCCESS), 100);
    xfx_close(&x);
}
END_TEST

START_TEST(suppressed_and_dry_run_actions_are_audited_only)
{
    struct xfx x;
    xfx_open(&x, NULL, NULL);
    char *a = id_in(&x, BF_STATE_SPECULATIVE);
    uint32_t sa = push(&x, BF_ACT_PROVISION, a, BF_DISP_SUPPRESSED);
    ck_assert(settled(&x, sa, 2 * SEC));
    uint32_t sb = push(&x, BF_ACT_PROVISION, a, BF_DISP_DRYRUN);
    ck_assert(settled(&x, sb, 2 * SEC));
    struct bf_sim_stats st;
    bf_sim_get_stats(x.f.sim, &st);
    ck_assert_uint_eq(st.calls[BF_SIM_RPC_CREATE], 0);
    ck_assert_int_eq(rec_at(&x, sa).state, BF_STATE_SPECULATIVE);
    char line[8192];
    ck_assert_int_eq(audit_line(&x, 0, line, sizeof line), 2);
    ck_assert_ptr_nonnull(strstr(line, "\"outcome\":\"suppressed\""));
    ck_assert_int_eq(audit_line(&x, 1, line, sizeof line), 2);
    ck_assert_ptr_nonnull(strstr(line, "\"outcome\":\"dryrun\""));
    xfx_close(&x);
}
END_TEST

/* What the cycle really sends for --actuation-paused / --dry-run: pending_tag
 * 0 and no in-flight mark on the slot (src/cycle/emit.c). */
START_TEST(untagged_audit_only_actions_from_the_cycle_are_audited)
{
    struct xfx x;
    xfx_open(&x, NULL, NULL);
    char *a = id_in(&x, BF_STATE_SPECULATIVE);
    uint32_t slot = slot_of(&x, a);
    struct bf_machine_rec rec = rec_at(&x, slot);
    for (int d = 0; d < 2; d++) {
        struct bf_action_msg m = {
            .serial = atomic_fetch_add(&x.f.shm.st->action_serial, 1) + 1,
            .decided_cycle = 5,
            .slot = slot,
            .machine_id_ref = rec.id,
            .cluster_ref = x.cluster_ref,
            .need_profile_ref = x.need_ref,
            .kind = BF_ACT_PROVISION,
            .reason = BF_REASON_P1_SPECULATIVE,
            .pending_tag = 0,
            .disposition = (uint8_t)(d ? BF_DISP_DRYRUN : BF_DISP_SUPPRESSED),
        };
        ck_assert_int_eq(bf_ring_push(&x.f.shm, BF_RING_ACTIONS, &m), 0);
    }
    int64_t end = bf_mono_ns() + 2 * SEC;
    while (bf_ring_depth(&x.f.shm, BF_RING_ACTIONS) && bf_mono_ns() < end) {
        bf_exec_poll(x.e);
        bf_net_loop_run_once(x.f.loop, MS);
    }
    ck_assert_uint_eq(bf_ring_depth(&x.f.shm, BF_RING_ACTIONS), 0);
    ck_assert(!bf_pending(&x.f.shm, slot));
    char line[8192];
    ck_assert_int_eq(audit_line(&x, 0, line, sizeof line), 2);
    ck_assert_ptr_nonnull(strstr(line, "\"outcome\":\"suppressed\""));
    ck_assert_int_eq(audit_line(&x, 1, line, sizeof line), 2);
    ck_assert_ptr_nonnull(strstr(line, "\"outcome\":\"dryrun\""));
    ck_assert_int_eq(rec_at(&x, slot).state, BF_STATE_SPECULATIVE);
    xfx_close(&x);
}
END_TEST

START_TEST(audit_lines_are_one_json_object_with_escaped_strings)
{
    struct bf_action_msg a = {.serial = 7,
                              .decided_cycle = 3,
                              .kind = BF_ACT_RECLAIM,
                              .reason = BF_REASON_P3_EXCESS,
                              .grace_seconds = 600};
    char buf[8192];
    const char machine[] = "m\"1\\\n\x01\xff";
    size_t n = bf_exec_audit_format(buf, sizeof buf, 1763788546123456789LL, 42, &a, machine,
                                    sizeof machine - 1, "c<&>", 4, "success", 1.5, "x\ty");
    ck_assert_int_eq(buf[n - 1], '\n');
    ck_assert_ptr_null(memchr(buf, '\n', n - 1)); /* one line */
    buf[n] = 0;
    ck_assert_ptr_nonnull(strstr(buf, "\"time\":\"2025-11-22T05:15:46.123456789Z\""));
    ck_assert_ptr_nonnull(strstr(buf, "\"level\":\"INFO\",\"msg\":\"action\",\"cycle\":42"));
    ck_assert_ptr_nonnull(strstr(buf, "\"machine\":\"m\\\"1\\\\\\n\\u0001\xef\xbf\xbd\""));
    ck_assert_ptr_nonnull(strstr(buf, "\"cluster\":\"c<&>\""));
    ck_assert_ptr_nonnull(strstr(buf, "\"reason\":\"phase3.excess\",\"grace_seconds\":600"));
    ck_assert_ptr_nonnull(strstr(buf, "\"serial\":7,\"decided_cycle\":3"));
    ck_assert_ptr_nonnull(strstr(buf, "\"error\":\"x\\ty\"}"));
    /* the counter lags the deciding cycle (stored after enqueue): never below it */
    n = bf_exec_audit_format(buf, sizeof buf, 0, 2, &a, "m", 1, "c", 1, "suppressed", 0, NULL);
    buf[n] = 0;
    ck_assert_ptr_nonnull(strstr(buf, "\"msg\":\"action\",\"cycle\":3,"));
    /* a tiny buffer still ends the object and the line */
    char small[64];
    n = bf_exec_audit_format(small, sizeof small, 0, 1, &a, machine, sizeof machine - 1, "c", 1,
                             "success", 0, NULL);
    ck_assert_uint_le(n, sizeof small);
    ck_assert(small[n - 2] == '}' && small[n - 1] == '\n');
}
END_TEST

START_TEST(ownership_audit_records_carry_the_event_the_instruction_and_both_shards)
{
    struct bf_own_audit_hdr h = {.at_ns = 1763788546123456789LL,
                                 .until_ns = 1763788606000000000LL,
                                 .cycle = 9,
                                 .event = BF_OWN_EV_RESERVED,
                                 .preemptor_priority = 1000000};
    const char *sv[] = {"m-1", "instr\"7", "", "", "victim priority 1000, grace 10s"};
    char strings[256];
    size_t at = 0;
    for (int i = 0; i < BF_OWN_AS_COUNT; i++) {
        h.len[i] = (uint16_t)strlen(sv[i]);
        memcpy(strings + at, sv[i], h.len[i]);
        at += h.len[i];
    }
    char buf[4096];
    size_t n = bf_exec_audit_format_ownership(buf, sizeof buf, &h, strings, at);
    buf[n] = 0;
    ck_assert_str_eq(buf,
                     "{\"time\":\"2025-11-22T05:15:46.123456789Z\",\"level\":\"INFO\","
                     "\"msg\":\"ownership\",\"cycle\":9,\"event\":\"reserved_for_transfer\","
                     "\"machine\":\"m-1\",\"instruction_id\":\"instr\\\"7\",\"from_shard\":\"\","
                     "\"to_shard\":\"\",\"detail\":\"victim priority 1000, grace 10s\","
                     "\"reserved_until\":\"2025-11-22T05:16:46.000000000Z\","
                     "\"preemptor_priority\":1000000}\n");
    /* lengths past the record are clamped, never read beyond it */
    h.len[BF_OWN_AS_DETAIL] = 60000;
    n = bf_exec_audit_format_ownership(buf, sizeof buf, &h, strings, at);
    ck_assert(buf[n - 2] == '}' && buf[n - 1] == '\n');
    ck_assert_str_eq(bf_exec_own_event_name(BF_OWN_EV_TRANSFER_IN), "transfer_in");
    ck_assert_str_eq(bf_exec_own_event_name(99), "unknown");
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("executor");
    TCase *t = tcase_create("paths");
    tcase_set_timeout(t, 30);
    tcase_add_test(t, provision_walks_speculative_to_configured_with_stamps_and_echo);
    tcase_add_test(t, bootstrap_of_an_already_configured_machine_for_the_same_target_is_a_noop);
    tcase_add_test(t, reclaim_tells_the_operator_first_then_drains_and_clears_the_assignment);
    tcase_add_test(t, delete_releases_the_host_and_a_rejected_delete_fails_the_machine);
    suite_add_tcase(s, t);
    t = tcase_create("bootstrap");
    tcase_set_timeout(t, 30);
    tcase_add_test(t, bootstrap_fetches_the_blob_through_the_session_rings);
    tcase_add_test(t, bootstrap_timeout_rolls_back_to_idle_and_operator_error_fails);
    suite_add_tcase(s, t);
    t = tcase_create("provider_trouble");
    tcase_set_timeout(t, 30);
    tcase_add_test(t, a_fenced_rejection_fails_the_machine_and_is_not_retried);
    tcase_add_test(t, a_transport_failure_leaves_the_machine_transitional_for_reconcile_to_resolve);
    tcase_add_test(t, create_capacity_exhaustion_ends_failed_through_reconcile);
    tcase_add_test(t, a_garbage_create_ack_fails_the_machine_and_ingests_nothing);
    suite_add_tcase(s, t);
    t = tcase_create("ring");
    tcase_set_timeout(t, 30);
    tcase_add_test(t, redelivered_actions_are_skipped_when_done_and_refreshed_when_mid_flight);
    tcase_add_test(t, a_slow_head_action_holds_the_ring_release_until_it_finishes);
    tcase_add_test(t, no_more_than_concurrency_actions_are_in_flight);
    tcase_add_test(t, suppressed_and_dry_run_actions_are_audited_only);
    tcase_add_test(t, untagged_audit_only_actions_from_the_cycle_are_audited);
    tcase_add_test(t, audit_lines_are_one_json_object_with_escaped_strings);
    tcase_add_test(t, ownership_audit_records_carry_the_event_the_instruction_and_both_shards);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    bf_log_init("test", BF_LOG_ERROR);
    return check_run(suite());
}
