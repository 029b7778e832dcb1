/*
 * execute.c — the executor's engine (executor.h has the contract): ring
 * consumption with deferred release, the four execute paths as chains of
 * provider callbacks on one loop, the bootstrap blob through the session
 * rings, record transitions under the record seqlock, node events, reclaim
 * instructions, outcome classification, audit lines and stats.
 *
 * Design notes
 *   - A job is one live action. Its steps are callbacks (provider acks, the
 *     bootstrap response, the bootstrap timer); each step ends by starting
 *     the next RPC or by finish(), which is the only place that counts,
 *     audits, marks the action done and releases ring positions.
 *   - Record writes: tx_begin() takes the executor side of the record's
 *     seqlock and checks the machine is still the action's machine in the
 *     expected state; otherwise the write is abandoned and the step decides
 *     (stale_state, transition_raced_to_idle, transition_error).
 *   - Re-entrancy: finish() may run inside poll() (an action that needs no
 *     RPC); poll() loops until nothing more can start instead of recursing.
 *   - Stats are the executor's own fields of the state segment; the
 *     in-flight gauge follows every start and finish.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bigfleet/blobs.h"
#include "bigfleet/log.h"
#include "bigfleet/util.h"
#include "executor/executor.h"

const char *bf_exec_outcome_name(int o)
{
    return bf_outcome_label(o);
}

#define BOOT_IDX_BITS      24
#define MIN_RPC_TIMEOUT_NS (1 * BF_NS_PER_MS)

struct job {
    struct bf_exec *e;
    uint32_t idx;
    uint64_t pos;
    struct bf_action_msg a;
    const char *id;
    uint32_t id_len;
    const char *cluster; /* destination (Bootstrap/Provision) or the record's (drain) */
    uint32_t cluster_len;
    uint32_t cluster_ref;
    const struct bf_nprofile *np;
    int64_t t0, deadline, phase_t0, boot_t0;
    uint64_t boot_id;
    struct bf_net_timer *timer;
    struct bf_prov_call *call;
    uint8_t *blob;
    size_t blob_len;
    int outcome;
    bool parked; /* read while the provider was unreachable: not started yet */
    char err[512];
};

struct bf_exec {
    struct bf_net_loop *loop;
    struct bf_shm *shm;
    struct bf_prov_client *client;
    struct bf_exec_opts o;
    struct bf_blob_cache *blobs;
    struct bf_prov_shape_cache *shapes;
    struct job **jobs;
    uint32_t *free_idx;
    uint32_t n_free;
    uint32_t inflight;
    uint64_t next, released;
    uint64_t *donebits;
    uint64_t ring_mask;
    uint64_t boot_prefix;
    uint32_t boot_ctr;
    uint8_t *rbuf;
    size_t rbuf_cap;
    uint32_t n_parked;
    bool closing, in_poll, repoll;
    uint64_t warn_budget_reset_ns;
    uint32_t warns;
};

static struct bf_stats_executor *XS(struct bf_exec *e)
{
    return &e->shm->st->executor;
}

/* ------------------------------------------------------------ ring window */

static void pos_done(struct bf_exec *e, uint64_t pos)
{
    uint64_t b = pos & e->ring_mask;
    e->donebits[b / 64] |= 1ull << (b % 64);
    uint64_t r = e->released;
    while (r < e->next) {
        uint64_t rb = r & e->ring_mask;
        if (!(e->donebits[rb / 64] & (1ull << (rb % 64))))
            break;
        e->donebits[rb / 64] &= ~(1ull << (rb % 64));
        r++;
    }
    if (r != e->released) {
        e->released = r;
        bf_ring_release(e->shm, BF_RING_ACTIONS, r);
    }
}

/* ------------------------------------------------------------ helpers */

static int64_t remaining(const struct job *j)
{
    int64_t r = j->deadline - bf_mono_ns();
    return r > MIN_RPC_TIMEOUT_NS ? r : MIN_RPC_TIMEOUT_NS;
}

static bool warn_ok(struct bf_exec *e)
{
    int64_t now = bf_mono_ns();
    if (now - (int64_t)e->warn_budget_reset_ns > BF_NS_PER_SEC) {
        e->warn_budget_reset_ns = (uint64_t)now;
        e->warns = 0;
    }
    return e->warns++ < 50; /* at most 50 warnings per second */
}

static void push_node_event(struct bf_exec *e, uint32_t slot, const struct bf_machine_rec *nr,
                            uint32_t route)
{
    struct bf_node_event_msg ev = {
        .slot = slot,
        .machine_id_ref = nr->id,
        .cluster_ref = route,
        .profile_ref = nr->profile,
        .host_ref = nr->host,
        .last_error_ref = nr->last_error,
        .state = nr->state,
        .flags = (uint8_t)(nr->flags & BF_REC_HOST_IS_ID),
    };
    if (bf_ring_push(e->shm, BF_RING_NODE_EXEC, &ev) == 0)
        bf_wake(e->shm, BF_ROLE_SESSION);
    else
        BF_STAT_INC(XS(e)->ring_drops);
}

/* Takes the record if it is still the action's machine in state `from`.
 * 0; -ESTALE (*found = its state); -ENOENT (slot no longer this machine);
 * -EBUSY (another writer held it past the seqlock timeout). */
static int tx_begin(struct job *j, int from, struct bf_inv_txn *t, int *found)
{
    int rc = bf_inv_begin(j->e->shm, j->a.slot, t);
    if (rc)
        return rc;
    if (!(t->old.flags & BF_REC_VALID) || t->old.id != j->a.machine_id_ref) {
        bf_inv_abort(j->e->shm, t);
        return -ENOENT;
    }
    if (from >= 0 && t->old.state != from) {
        if (found)
            *found = t->old.state;
        bf_inv_abort(j->e->shm, t);
        return -ESTALE;
    }
    return 0;
}

static void tx_commit(struct job *j, struct bf_inv_txn *t, const struct bf_machine_rec *nr)
{
    bf_inv_commit(j->e->shm, t, nr, BF_CL_EXECUTOR);
    uint32_t route = nr->cluster ? nr->cluster : t->old.cluster;
    if (route && (nr->state != t->old.state || nr->cluster != t->old.cluster))
        push_node_event(j->e, j->a.slot, nr, route);
}

static uint32_t intern_msg(struct bf_exec *e, const char *msg)
{
    uint32_t ref = 0;
    if (bf_str_intern_soft(e->shm, msg, (uint32_t)strlen(msg), &ref) &&
        bf_str_intern_cstr(e->shm, "error (message dropped: string table reserve)", &ref))
        ref = 0;
    return ref;
}

/* Flags the record for an unconditional re-read by the reconciler. */
static void flag_refresh(struct job *j)
{
    struct bf_inv_txn t;
    if (tx_begin(j, -1, &t, NULL))
        return;
    struct bf_machine_rec nr = t.old;
    nr.flags |= BF_REC_NEEDS_REFRESH;
    bf_inv_commit(j->e->shm, &t, &nr, BF_CL_EXECUTOR);
}

/* Transitional state -> Failed with last_error. */
static void fail_machine(struct job *j, int from, const char *msg)
{
    struct bf_inv_txn t;
    if (tx_begin(j, from, &t, NULL))
        return;
    struct bf_machine_rec nr = t.old;
    nr.state = BF_STATE_FAILED;
    nr.last_error = intern_msg(j->e, msg[0] ? msg : "failed");
    if (!nr.last_error)
        nr.last_error = intern_msg(j->e, "failed");
    nr.idle_since = 0;
    nr.flags &= ~BF_REC_NEEDS_REFRESH;
    tx_commit(j, &t, &nr);
}

static void set_outcome(struct job *j, int outcome, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_outcome(struct job *j, int outcome, const char *fmt, ...)
{
    j->outcome = outcome;
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(j->err, sizeof j->err, fmt, ap);
        va_end(ap);
    } else {
        j->err[0] = 0;
    }
}

/* ------------------------------------------------------------ audit + finish */

static void audit(struct bf_exec *e, const struct bf_action_msg *a, const char *outcome,
                  double duration_ms, const char *error)
{
    if (e->o.audit_fd < 0)
        return;
    char buf[8192];
    uint32_t ml = 0, cl = 0;
    const char *m = bf_str(e->shm, a->machine_id_ref, &ml);
    const char *c = a->cluster_ref ? bf_str(e->shm, a->cluster_ref, &cl) : NULL;
    size_t n =
        bf_exec_audit_format(buf, sizeof buf, bf_now_ns(), BF_STAT_GET(e->shm->st->cycle_count), a,
                             m, m ? ml : 0, c, c ? cl : 0, outcome, duration_ms, error);
    ssize_t w = write(e->o.audit_fd, buf, n);
    if (w == (ssize_t)n) {
        BF_STAT_INC(XS(e)->audit_records);
    } else {
        BF_STAT_INC(XS(e)->audit_errors);
        if (warn_ok(e))
            BF_ERROR("audit log write failed", "error=\"%s\" written=%zd of=%zu",
                     w < 0 ? strerror(errno) : "short write", w, n);
    }
}

/* Marks the action done for the cycle: only while it is still the live one. */
static void action_done(struct bf_exec *e, const struct bf_action_msg *a)
{
    if (a->slot >= e->shm->max_machines)
        return;
    if (bf_pending_enq_tag(e->shm, a->slot) == a->pending_tag)
        bf_pending_done(e->shm, a->slot, a->pending_tag);
}

static void poll_actions(struct bf_exec *e);

static void finish(struct job *j)
{
    struct bf_exec *e = j->e;
    if (j->timer) {
        bf_net_timer_free(j->timer);
        j->timer = NULL;
    }
    double ms = (bf_mono_ns() - j->t0) / 1e6;
    int kind = j->a.kind < BF_ACT_KIND_COUNT ? j->a.kind : 0;
    /* release: a reader that sees the outcome counted sees what the action wrote */
    BF_SHARED_BUMP(XS(e)->outcomes[kind][j->outcome]);
    audit(e, &j->a, bf_exec_outcome_name(j->outcome), ms, j->err);
    if (j->outcome != BF_OUT_SUCCESS && warn_ok(e)) {
        if (j->outcome == BF_OUT_FENCED)
            ; /* already logged at Error */
        else
            BF_WARN("action failed", "kind=%s machine=\"%.*s\" outcome=%s error=\"%s\" ms=%.1f",
                    bf_action_kind_name(j->a.kind), (int)(j->id_len < 200 ? j->id_len : 200),
                    j->id ? j->id : "", bf_exec_outcome_name(j->outcome), j->err, ms);
    }
    action_done(e, &j->a);
    pos_done(e, j->pos);
    e->jobs[j->idx] = NULL;
    e->free_idx[e->n_free++] = j->idx;
    e->inflight--;
    BF_STAT_SET(XS(e)->inflight, e->inflight);
    free(j->blob);
    free(j);
    poll_actions(e);
}

/* ------------------------------------------------------------ provider errors */

/* A provider call failed: fenced -> Failed (never retried); transport ->
 * left transitional, flagged for refresh; anything else -> Failed. */
static void rpc_failed(struct job *j, const char *rpc, int trans_state,
                       const struct bf_prov_result *r)
{
    char msg[400];
    if (r->status == BF_PROV_FENCED) {
        BF_ERROR("zombie-shard incident: the provider rejected our fencing token; not retried",
                 "rpc=%s machine=\"%.*s\" epoch=%lld seq=%lld message=\"%s\"", rpc,
                 (int)(j->id_len < 200 ? j->id_len : 200), j->id,
                 (long long)j->e->shm->inv_hdr->epoch, (long long)r->seq, r->message);
        snprintf(msg, sizeof msg, "%s: fenced: %s", rpc, r->message);
        fail_machine(j, trans_state, msg);
        set_outcome(j, BF_OUT_FENCED, "%s", msg);
    } else if (bf_prov_status_transport(r->status)) {
        flag_refresh(j);
        set_outcome(j,
                    r->status == BF_PROV_UNAVAILABLE ? BF_OUT_PROVIDER_ERROR : BF_OUT_CTX_CANCELED,
                    "provider.%c%s: %s: %s (left %s for reconcile)", rpc[0] - 32, rpc + 1,
                    bf_prov_status_name(r->status), r->message, bf_state_name(trans_state));
    } else {
        snprintf(msg, sizeof msg, "%s: %s: %s", rpc, bf_prov_status_name(r->status), r->message);
        fail_machine(j, trans_state, msg);
        set_outcome(j, BF_OUT_PROVIDER_ERROR, "provider.%c%s: %s", rpc[0] - 32, rpc + 1, msg);
    }
    finish(j);
}

/* Screens and converts an ack's machine; false (with why) when garbage. */
static bool ack_machine(struct job *j, const struct bf_prov_ack *ack, struct bf_machine_rec *b,
                        char *why, size_t why_len)
{
    if (!ack->has_machine) {
        snprintf(why, why_len, "ack carries no machine");
        return false;
    }
    const struct bf_prov_machine *m = &ack->machine;
    if (m->id.len != j->id_len || memcmp(m->id.p, j->id, j->id_len)) {
        snprintf(why, why_len, "ack is for another machine");
        return false;
    }
    int reason = bf_prov_machine_check(m, why, why_len);
    if (reason != BF_REJECT_NONE)
        return false;
    int rc = bf_prov_machine_build(j->e->shm, j->e->shapes, m, j->a.machine_id_ref, b, NULL, why,
                                   why_len);
    if (rc < 0)
        snprintf(why, why_len, "cannot record the ack: %s", strerror(-rc));
    return rc == 0;
}

/* Copies the provider-owned fields of b into nr (host, profile, price...). */
static void take_provider_fields(struct bf_machine_rec *nr, const struct bf_machine_rec *b)
{
    nr->profile = b->profile;
    nr->host = b->host;
    nr->type_idx = b->type_idx;
    nr->zone_idx = b->zone_idx;
    nr->capacity_type = b->capacity_type;
    nr->price_per_hour = b->price_per_hour;
    nr->interruption_probability = b->interruption_probability;
    nr->flags = (nr->flags & ~BF_REC_HOST_IS_ID) | (b->flags & BF_REC_HOST_IS_ID);
}

/* ------------------------------------------------------------ Bootstrap */

static void do_configure(struct job *j);

static void rollback_idle(struct job *j, int outcome, const char *msg)
{
    struct bf_inv_txn t;
    if (tx_begin(j, BF_STATE_CONFIGURING, &t, NULL) == 0) {
        struct bf_machine_rec nr = t.old;
        nr.state = BF_STATE_IDLE;
        nr.cluster = nr.fingerprint = nr.group = nr.last_error = 0;
        nr.assigned_priority = 0;
        nr.ipb = nr.rpb = 0;
        nr.idle_since = bf_rec_idle_since_encode(j->e->shm, bf_idle_since_stamp_s(bf_now_ns()));
        tx_commit(j, &t, &nr);
    }
    set_outcome(j, outcome, "%s", msg);
    finish(j);
}

static void boot_observe(struct job *j)
{
    bf_hist_observe(&XS(j->e)->request_bootstrap, 0.01, 2, 16, bf_mono_ns() - j->boot_t0);
}

static void on_boot_timeout(struct bf_net_timer *t, void *arg)
{
    (void)t;
    struct job *j = arg;
    j->boot_id = 0; /* a late response is dropped */
    boot_observe(j);
    char msg[160];
    snprintf(msg, sizeof msg,
             "requestBootstrap: no bootstrap blob within the deadline; back to Idle for retry");
    rollback_idle(j, BF_OUT_CTX_CANCELED, msg);
}

static void do_bootstrap(struct job *j)
{
    struct bf_exec *e = j->e;
    struct bf_inv_txn t;
    int found = 0, rc = tx_begin(j, BF_STATE_IDLE, &t, &found);
    if (rc) {
        if (rc == -ESTALE)
            set_outcome(j, BF_OUT_STALE_STATE, "bootstrap: expected Idle, found %s",
                        bf_state_name(found));
        else
            set_outcome(j, BF_OUT_TRANSITION_ERROR, "Idle → Configuring: %s", strerror(-rc));
        finish(j);
        return;
    }
    struct bf_machine_rec nr = t.old;
    nr.state = BF_STATE_CONFIGURING;
    nr.cluster = j->a.cluster_ref;
    nr.fingerprint = j->np->fingerprint_ref;
    nr.group = j->a.group_ref;
    nr.idle_since = 0;
    nr.last_error = 0;
    tx_commit(j, &t, &nr);
    j->phase_t0 = bf_mono_ns();
    if (e->o.local_bootstrap) {
        char stub[BF_PROV_ID_MAX * 2 + 96];
        int n = snprintf(stub, sizeof stub, "#bigfleet local-bootstrap cluster=%.*s machine=%.*s\n",
                         (int)j->cluster_len, j->cluster, (int)j->id_len, j->id);
        j->blob = malloc((size_t)n);
        if (j->blob) {
            memcpy(j->blob, stub, (size_t)n);
            j->blob_len = (size_t)n;
        }
        do_configure(j);
        return;
    }
    int64_t wait = e->o.bootstrap_timeout_ns;
    int64_t rem = j->deadline - bf_mono_ns();
    if (rem < wait)
        wait = rem;
    if (wait < MIN_RPC_TIMEOUT_NS)
        wait = MIN_RPC_TIMEOUT_NS;
    j->boot_id = e->boot_prefix | ((uint64_t)(++e->boot_ctr & 0xffff) << BOOT_IDX_BITS) | j->idx;
    struct bf_boot_req_msg q = {
        .request_id = j->boot_id,
        .deadline_ns = bf_now_ns() + wait,
        .slot = j->a.slot,
        .machine_id_ref = j->a.machine_id_ref,
        .cluster_ref = j->a.cluster_ref,
        .need_profile_ref = j->a.need_profile_ref,
    };
    j->boot_t0 = bf_mono_ns();
    if (bf_ring_push(e->shm, BF_RING_BOOT_REQ, &q) != 0) {
        BF_STAT_INC(XS(e)->ring_drops);
        j->boot_id = 0;
        rollback_idle(j, BF_OUT_NO_SESSION,
                      "requestBootstrap: the bootstrap request ring is full; back to Idle");
        return;
    }
    bf_wake(e->shm, BF_ROLE_SESSION);
    j->timer = bf_net_timer_new(e->loop, on_boot_timeout, j);
    if (!j->timer) {
        j->boot_id = 0;
        rollback_idle(j, BF_OUT_OTHER, "bootstrap: out of memory");
        return;
    }
    bf_net_timer_start(j->timer, wait, 0);
}

static void deliver_boot(struct bf_exec *e, const struct bf_boot_resp_hdr *h, const char *errp,
                         const uint8_t *blob)
{
    uint32_t idx = (uint32_t)(h->request_id & ((1u << BOOT_IDX_BITS) - 1));
    struct job *j = idx < e->o.concurrency ? e->jobs[idx] : NULL;
    if (!j || !h->request_id || j->boot_id != h->request_id) {
        BF_DEBUG("late or unknown bootstrap response dropped", "request_id=%016llx",
                 (unsigned long long)h->request_id);
        return;
    }
    j->boot_id = 0;
    bf_net_timer_free(j->timer);
    j->timer = NULL;
    boot_observe(j);
    char msg[400];
    switch (h->status) {
    case BF_BOOT_OK:
        j->blob = malloc(h->blob_len ? h->blob_len : 1);
        if (!j->blob) {
            rollback_idle(j, BF_OUT_OTHER, "bootstrap: out of memory");
            return;
        }
        memcpy(j->blob, blob, h->blob_len);
        j->blob_len = h->blob_len;
        do_configure(j);
        return;
    case BF_BOOT_NO_SESSION:
        rollback_idle(j, BF_OUT_NO_SESSION, "no active operator session");
        return;
    case BF_BOOT_CANCELLED:
        rollback_idle(j, BF_OUT_NO_SESSION,
                      "requestBootstrap: the operator session closed before the blob arrived");
        return;
    case BF_BOOT_OPERATOR_ERROR:
        snprintf(msg, sizeof msg, "bootstrap: operator: %.*s",
                 (int)(h->error_len < 300 ? h->error_len : 300), errp);
        break;
    case BF_BOOT_TOO_LARGE:
        snprintf(msg, sizeof msg, "bootstrap: requestBootstrap: blob larger than the ring allows");
        break;
    default:
        snprintf(msg, sizeof msg, "bootstrap: requestBootstrap: unknown status %u", h->status);
        break;
    }
    fail_machine(j, BF_STATE_CONFIGURING, msg);
    set_outcome(j, BF_OUT_BLOB_ERROR, "%s", msg);
    finish(j);
}

static void on_configure_ack(void *arg, const struct bf_prov_result *r,
                             const struct bf_prov_ack *ack)
{
    struct job *j = arg;
    struct bf_exec *e = j->e;
    j->call = NULL;
    free(j->blob);
    j->blob = NULL;
    if (r->status != BF_PROV_OK) {
        rpc_failed(j, "configure", BF_STATE_CONFIGURING, r);
        return;
    }
    struct bf_machine_rec b;
    char why[256];
    bool ok = ack_machine(j, ack, &b, why, sizeof why);
    int st = ack->has_machine ? ack->machine.state : -1;
    if (!ok && st != BF_STATE_CONFIGURED && st != BF_STATE_CONFIGURING) {
        flag_refresh(j);
        set_outcome(j, BF_OUT_PROVIDER_ERROR, "configure: ack rejected: %s", why);
        finish(j);
        return;
    }
    if (!ok && warn_ok(e))
        BF_WARN("configure ack fails the screen; provider fields not taken",
                "machine=\"%.*s\" detail=\"%s\"", (int)j->id_len, j->id, why);
    struct bf_inv_txn t;
    int found = 0, rc;
    switch (st) {
    case BF_STATE_CONFIGURED:
    case BF_STATE_CONFIGURING: {
        rc = tx_begin(j, BF_STATE_CONFIGURING, &t, &found);
        if (rc == -ESTALE && found == BF_STATE_IDLE) {
            set_outcome(j, BF_OUT_RACED_TO_IDLE,
                        "post-Configure transition: the machine raced to Idle; next cycle retries");
            break;
        }
        if (rc) {
            flag_refresh(j);
            set_outcome(j, BF_OUT_TRANSITION_ERROR,
                        "post-Configure transition Configuring → %s refused: %s", bf_state_name(st),
                        rc == -ESTALE ? bf_state_name(found) : strerror(-rc));
            break;
        }
        struct bf_machine_rec nr = t.old;
        if (ok)
            take_provider_fields(&nr, &b);
        nr.state = (uint8_t)st;
        nr.cluster = j->a.cluster_ref;
        nr.fingerprint = j->np->fingerprint_ref;
        nr.group = j->a.group_ref;
        nr.assigned_priority = j->np->p.priority;
        nr.ipb = j->np->p.ipb;
        nr.rpb = j->np->p.rpb;
        nr.flags &= ~BF_REC_NEEDS_REFRESH;
        tx_commit(j, &t, &nr);
        if (st == BF_STATE_CONFIGURED) {
            int64_t now = bf_mono_ns();
            bf_hist_observe(&XS(e)->configure_phase, 0.01, 2, 16, now - j->phase_t0);
            int64_t lat;
            if (bf_stamp_observe(e->shm, j->a.cluster_ref, j->np->fingerprint_ref, bf_now_ns(),
                                 &lat) == 1)
                bf_hist_observe(&XS(e)->provisioning_latency, 0.01, 2, 20, lat);
        }
        set_outcome(j, BF_OUT_SUCCESS, NULL);
        break;
    }
    case BF_STATE_IDLE:
        if (tx_begin(j, BF_STATE_CONFIGURING, &t, NULL) == 0) {
            struct bf_machine_rec nr = t.old;
            nr.state = BF_STATE_IDLE;
            nr.cluster = nr.fingerprint = nr.group = 0;
            nr.idle_since = bf_rec_idle_since_encode(e->shm, bf_idle_since_stamp_s(bf_now_ns()));
            tx_commit(j, &t, &nr);
        }
        set_outcome(j, BF_OUT_RACED_TO_IDLE,
                    "post-Configure transition: the provider reports Idle; next cycle retries");
        break;
    case BF_STATE_FAILED: {
        char msg[400];
        snprintf(msg, sizeof msg, "configure: machine failed: %.*s",
                 (int)(ack->machine.last_error.len < 300 ? ack->machine.last_error.len : 300),
                 (const char *)ack->machine.last_error.p);
        fail_machine(j, BF_STATE_CONFIGURING, msg);
        set_outcome(j, BF_OUT_PROVIDER_ERROR, "provider.Configure: %s", msg);
        break;
    }
    default:
        flag_refresh(j);
        set_outcome(j, BF_OUT_TRANSITION_ERROR,
                    "post-Configure transition Configuring → %s refused", bf_state_name(st));
        break;
    }
    finish(j);
}

static void do_configure(struct job *j)
{
    struct bf_exec *e = j->e;
    if (!j->blob) {
        rollback_idle(j, BF_OUT_OTHER, "bootstrap: out of memory");
        return;
    }
    uint32_t fl = 0, gl = 0;
    const char *fp = bf_str(e->shm, j->np->fingerprint_ref, &fl);
    const char *grp = j->a.group_ref ? bf_str(e->shm, j->a.group_ref, &gl) : "";
    struct bf_assignment as = {
        .priority = j->np->p.priority,
        .ipb = j->np->p.ipb,
        .rpb = j->np->p.rpb,
        .fingerprint = fp ? fp : "",
        .fingerprint_len = fp ? fl : 0,
        .group = grp ? grp : "",
        .group_len = grp ? gl : 0,
    };
    struct bf_md_encoded enc;
    bf_shard_metadata_encode(&as, &enc);
    struct bf_prov_md md[5];
    for (int i = 0; i < 5; i++)
        md[i] = (struct bf_prov_md){enc.e[i].key, enc.e[i].value, enc.e[i].len};
    int rc = bf_prov_configure(e->client, j->id, j->id_len, j->cluster, j->cluster_len, j->blob,
                               j->blob_len, md, 5, remaining(j), on_configure_ack, j, &j->call);
    if (rc) {
        free(j->blob);
        j->blob = NULL;
        char msg[200];
        snprintf(msg, sizeof msg, "provider.Configure: cannot send: %s", strerror(-rc));
        rollback_idle(j, BF_OUT_PROVIDER_ERROR, msg);
    }
}

/* ------------------------------------------------------------ Provision */

static void on_create_ack(void *arg, const struct bf_prov_result *r, const struct bf_prov_ack *ack)
{
    struct job *j = arg;
    struct bf_exec *e = j->e;
    j->call = NULL;
    if (r->status != BF_PROV_OK) {
        rpc_failed(j, "create", BF_STATE_CREATING, r);
        return;
    }
    struct bf_machine_rec b;
    char why[256];
    if (!ack_machine(j, ack, &b, why, sizeof why)) {
        char msg[400];
        snprintf(msg, sizeof msg, "create: ack rejected: %s", why);
        if (warn_ok(e))
            BF_WARN("garbage Create ack: machine failed, nothing ingested",
                    "machine=\"%.*s\" detail=\"%s\"", (int)j->id_len, j->id, why);
        fail_machine(j, BF_STATE_CREATING, msg);
        set_outcome(j, BF_OUT_PROVIDER_ERROR, "%s", msg);
        finish(j);
        return;
    }
    struct bf_inv_txn t;
    int found = 0, st = ack->machine.state;
    if (st == BF_STATE_IDLE || st == BF_STATE_CREATING) {
        int rc = tx_begin(j, BF_STATE_CREATING, &t, &found);
        if (rc) {
            flag_refresh(j);
            set_outcome(j, BF_OUT_TRANSITION_ERROR, "post-Create transition Creating → %s: %s",
                        bf_state_name(st), rc == -ESTALE ? bf_state_name(found) : strerror(-rc));
            finish(j);
            return;
        }
        struct bf_machine_rec nr = t.old;
        take_provider_fields(&nr, &b);
        nr.state = (uint8_t)st;
        nr.cluster = 0;
        nr.last_error = 0;
        nr.flags &= ~BF_REC_NEEDS_REFRESH;
        if (st == BF_STATE_IDLE)
            nr.idle_since = bf_rec_idle_since_encode(e->shm, bf_idle_since_stamp_s(bf_now_ns()));
        tx_commit(j, &t, &nr);
        if (st == BF_STATE_IDLE) {
            do_bootstrap(j); /* Provision continues into Bootstrap */
            return;
        }
        set_outcome(j, BF_OUT_SUCCESS, NULL); /* async Create: reconcile sees it reach Idle */
        finish(j);
        return;
    }
    if (st == BF_STATE_FAILED) {
        char msg[400];
        snprintf(msg, sizeof msg, "create: machine failed: %.*s",
                 (int)(ack->machine.last_error.len < 300 ? ack->machine.last_error.len : 300),
                 (const char *)ack->machine.last_error.p);
        fail_machine(j, BF_STATE_CREATING, msg);
        set_outcome(j, BF_OUT_PROVIDER_ERROR, "provider.Create: %s", msg);
        finish(j);
        return;
    }
    flag_refresh(j);
    set_outcome(j, BF_OUT_TRANSITION_ERROR, "post-Create transition Creating → %s refused",
                bf_state_name(st));
    finish(j);
}

static void do_create(struct job *j)
{
    struct bf_inv_txn t;
    int found = 0, rc = tx_begin(j, BF_STATE_SPECULATIVE, &t, &found);
    if (rc) {
        if (rc == -ESTALE)
            set_outcome(j, BF_OUT_STALE_STATE, "provision: expected Speculative, found %s",
                        bf_state_name(found));
        else
            set_outcome(j, BF_OUT_TRANSITION_ERROR, "Speculative → Creating: %s", strerror(-rc));
        finish(j);
        return;
    }
    struct bf_machine_rec nr = t.old;
    nr.state = BF_STATE_CREATING;
    nr.fingerprint = j->np->fingerprint_ref;
    nr.group = j->a.group_ref;
    tx_commit(j, &t, &nr);
    rc = bf_prov_create(j->e->client, j->id, j->id_len, remaining(j), on_create_ack, j, &j->call);
    if (rc) {
        flag_refresh(j);
        set_outcome(j, BF_OUT_PROVIDER_ERROR, "provider.Create: cannot send: %s", strerror(-rc));
        finish(j);
    }
}

/* ------------------------------------------------------------ Reclaim / Preempt */

static void on_drain_ack(void *arg, const struct bf_prov_result *r, const struct bf_prov_ack *ack)
{
    struct job *j = arg;
    struct bf_exec *e = j->e;
    j->call = NULL;
    if (r->status != BF_PROV_OK) {
        rpc_failed(j, "drain", BF_STATE_DRAINING, r);
        return;
    }
    struct bf_machine_rec b;
    char why[256];
    bool ok = ack_machine(j, ack, &b, why, sizeof why);
    int st = ack->has_machine ? ack->machine.state : -1;
    struct bf_inv_txn t;
    if (ok && st == BF_STATE_IDLE) {
        int found = 0, rc = tx_begin(j, BF_STATE_DRAINING, &t, &found);
        if (rc) {
            flag_refresh(j);
            set_outcome(j, BF_OUT_TRANSITION_ERROR, "post-Drain transition Draining → Idle: %s",
                        rc == -ESTALE ? bf_state_name(found) : strerror(-rc));
        } else {
            struct bf_machine_rec nr = t.old;
            if (b.host) {
                nr.host = b.host;
                nr.flags = (nr.flags & ~BF_REC_HOST_IS_ID) | (b.flags & BF_REC_HOST_IS_ID);
            }
            nr.state = BF_STATE_IDLE;
            nr.cluster = nr.fingerprint = nr.group = 0;
            nr.assigned_priority = 0;
            nr.ipb = nr.rpb = 0;
            nr.last_error = 0;
            nr.flags &= ~BF_REC_NEEDS_REFRESH;
            nr.idle_since = bf_rec_idle_since_encode(e->shm, bf_idle_since_stamp_s(bf_now_ns()));
            tx_commit(j, &t, &nr);
            bf_hist_observe(&XS(e)->drain_phase, 0.01, 2, 16, bf_mono_ns() - j->phase_t0);
            set_outcome(j, BF_OUT_SUCCESS, NULL);
        }
    } else if (st == BF_STATE_DRAINING) {
        /* async drain (ADR-0059): left Draining with its cluster; reconcile finishes it */
        bf_hist_observe(&XS(e)->drain_phase, 0.01, 2, 16, bf_mono_ns() - j->phase_t0);
        set_outcome(j, BF_OUT_SUCCESS, NULL);
    } else if (st == BF_STATE_FAILED) {
        char msg[400];
        snprintf(msg, sizeof msg, "drain: machine failed: %.*s",
                 (int)(ack->machine.last_error.len < 300 ? ack->machine.last_error.len : 300),
                 (const char *)ack->machine.last_error.p);
        fail_machine(j, BF_STATE_DRAINING, msg);
        set_outcome(j, BF_OUT_PROVIDER_ERROR, "provider.Drain: %s", msg);
    } else {
        flag_refresh(j);
        set_outcome(j, ok ? BF_OUT_TRANSITION_ERROR : BF_OUT_PROVIDER_ERROR,
                    ok ? "post-Drain transition Draining → %s refused" : "drain: ack rejected: %s",
                    ok ? bf_state_name(st) : why);
    }
    finish(j);
}

static bool cluster_connected(struct bf_exec *e, uint32_t cluster_ref)
{
    int idx = bf_cluster_find(e->shm, cluster_ref);
    struct bf_cluster_rec c;
    uint32_t seq;
    return idx >= 0 && bf_cluster_read(e->shm, (uint32_t)idx, &c, &seq) == 0 && c.connected;
}

static void do_drain(struct job *j, const struct bf_machine_rec *rec)
{
    struct bf_exec *e = j->e;
    j->cluster_ref = rec->cluster;
    j->cluster = rec->cluster ? bf_str(e->shm, rec->cluster, &j->cluster_len) : "";
    /* the operator first: cordon + PDB-respecting eviction ahead of the provider drain */
    struct bf_reclaim_msg rm = {
        .instruction_serial = j->a.serial,
        .machine_id_ref = j->a.machine_id_ref,
        .cluster_ref = rec->cluster,
        .grace_seconds = j->a.grace_seconds,
        .preemptor_priority = j->a.kind == BF_ACT_PREEMPT ? j->a.preemptor_priority : 0,
        .kind = j->a.kind,
    };
    if (!cluster_connected(e, rec->cluster) && j->a.kind == BF_ACT_RECLAIM && warn_ok(e))
        BF_WARN("reclaim fallback: no operator session; PDB-respecting drain skipped",
                "machine=\"%.*s\" cluster=\"%.*s\" grace_seconds=%u", (int)j->id_len, j->id,
                (int)j->cluster_len, j->cluster, j->a.grace_seconds);
    if (bf_ring_push(e->shm, BF_RING_RECLAIM, &rm) == 0)
        bf_wake(e->shm, BF_ROLE_SESSION);
    else
        BF_STAT_INC(XS(e)->ring_drops);
    struct bf_inv_txn t;
    int found = 0, rc = tx_begin(j, BF_STATE_CONFIGURED, &t, &found);
    if (rc) {
        if (rc == -ESTALE)
            set_outcome(j, BF_OUT_SUCCESS, NULL); /* no longer Configured: nothing to drain */
        else
            set_outcome(j, BF_OUT_TRANSITION_ERROR, "Configured → Draining: %s", strerror(-rc));
        finish(j);
        return;
    }
    struct bf_machine_rec nr = t.old;
    nr.state = BF_STATE_DRAINING;
    tx_commit(j, &t, &nr);
    j->phase_t0 = bf_mono_ns();
    rc = bf_prov_drain(e->client, j->id, j->id_len, j->a.grace_seconds, remaining(j), on_drain_ack,
                       j, &j->call);
    if (rc) {
        flag_refresh(j);
        set_outcome(j, BF_OUT_PROVIDER_ERROR, "provider.Drain: cannot send: %s", strerror(-rc));
        finish(j);
    }
}

/* ------------------------------------------------------------ Delete */

static void on_delete_ack(void *arg, const struct bf_prov_result *r, const struct bf_prov_ack *ack)
{
    struct job *j = arg;
    struct bf_exec *e = j->e;
    j->call = NULL;
    if (r->status != BF_PROV_OK) {
        rpc_failed(j, "delete", BF_STATE_DELETING, r);
        return;
    }
    int st = ack->has_machine ? ack->machine.state : -1;
    struct bf_inv_txn t;
    if (st == BF_STATE_SPECULATIVE) {
        int found = 0, rc = tx_begin(j, BF_STATE_DELETING, &t, &found);
        if (rc) {
            flag_refresh(j);
            set_outcome(j, BF_OUT_TRANSITION_ERROR,
                        "post-Delete transition Deleting → Speculative: %s",
                        rc == -ESTALE ? bf_state_name(found) : strerror(-rc));
        } else {
            struct bf_machine_rec nr = t.old;
            nr.state = BF_STATE_SPECULATIVE;
            nr.host = nr.cluster = 0;
            nr.flags &= ~(BF_REC_HOST_IS_ID | BF_REC_NEEDS_REFRESH);
            nr.last_error = 0;
            nr.idle_since = 0;
            tx_commit(j, &t, &nr);
            BF_STAT_INC(XS(e)->idle_releases);
            set_outcome(j, BF_OUT_SUCCESS, NULL);
        }
    } else if (st == BF_STATE_DELETING) {
        set_outcome(j, BF_OUT_SUCCESS, NULL); /* async: reconcile sees Speculative */
    } else if (st == BF_STATE_FAILED) {
        char msg[400];
        snprintf(msg, sizeof msg, "delete: machine failed: %.*s",
                 (int)(ack->machine.last_error.len < 300 ? ack->machine.last_error.len : 300),
                 (const char *)ack->machine.last_error.p);
        fail_machine(j, BF_STATE_DELETING, msg);
        set_outcome(j, BF_OUT_PROVIDER_ERROR, "provider.Delete: %s", msg);
    } else {
        flag_refresh(j);
        set_outcome(j, BF_OUT_TRANSITION_ERROR, "post-Delete transition Deleting → %s refused",
                    st < 0 ? "(no machine in the ack)" : bf_state_name(st));
    }
    finish(j);
}

static void do_delete(struct job *j)
{
    struct bf_inv_txn t;
    int found = 0, rc = tx_begin(j, BF_STATE_IDLE, &t, &found);
    if (rc) {
        if (rc == -ESTALE)
            set_outcome(j, BF_OUT_SUCCESS, NULL); /* no longer Idle: nothing to release */
        else
            set_outcome(j, BF_OUT_TRANSITION_ERROR, "Idle → Deleting: %s", strerror(-rc));
        finish(j);
        return;
    }
    struct bf_machine_rec nr = t.old;
    nr.state = BF_STATE_DELETING;
    nr.idle_since = 0;
    tx_commit(j, &t, &nr);
    rc = bf_prov_delete(j->e->client, j->id, j->id_len, remaining(j), on_delete_ack, j, &j->call);
    if (rc) {
        flag_refresh(j);
        set_outcome(j, BF_OUT_PROVIDER_ERROR, "provider.Delete: cannot send: %s", strerror(-rc));
        finish(j);
    }
}

/* ------------------------------------------------------------ dispatch */

/* The machine sits in the action's own transitional state: a predecessor was
 * mid-flight when it died. Flag for refresh, never re-drive blind. */
static void redelivered_mid_flight(struct job *j, int state)
{
    flag_refresh(j);
    set_outcome(j, BF_OUT_STALE_STATE,
                "machine already %s: action was in flight when the executor restarted; "
                "left for reconcile",
                bf_state_name(state));
    finish(j);
}

static void start_job(struct job *j)
{
    struct bf_exec *e = j->e;
    struct bf_machine_rec rec;
    j->id = bf_str(e->shm, j->a.machine_id_ref, &j->id_len);
    if (!j->id)
        j->id_len = 0;
    if (bf_inv_read(e->shm, j->a.slot, &rec) != 0 || !(rec.flags & BF_REC_VALID) ||
        rec.id != j->a.machine_id_ref || !j->id) {
        set_outcome(j, BF_OUT_INVENTORY_MISS, "inventory get: the machine is no longer in slot %u",
                    j->a.slot);
        finish(j);
        return;
    }
    int kind = j->a.kind;
    if (kind == BF_ACT_BOOTSTRAP || kind == BF_ACT_PROVISION) {
        j->np =
            j->a.need_profile_ref ? bf_nprofile_get(e->blobs, e->shm, j->a.need_profile_ref) : NULL;
        if (!j->np || !j->np->fingerprint_ref) {
            set_outcome(j, BF_OUT_MISSING_PROFILE, "missing source profile");
            finish(j);
            return;
        }
        j->cluster_ref = j->a.cluster_ref;
        j->cluster = j->a.cluster_ref ? bf_str(e->shm, j->a.cluster_ref, &j->cluster_len) : NULL;
        if (!j->cluster || !j->cluster_len) {
            set_outcome(j, BF_OUT_OTHER, "no destination cluster");
            finish(j);
            return;
        }
        if (rec.state == BF_STATE_CONFIGURED && rec.cluster == j->a.cluster_ref &&
            rec.fingerprint == j->np->fingerprint_ref) {
            set_outcome(j, BF_OUT_SUCCESS, NULL); /* Drop J: already there */
            finish(j);
            return;
        }
    }
    switch (kind) {
    case BF_ACT_PROVISION:
        if (rec.state == BF_STATE_SPECULATIVE)
            do_create(j);
        else if (rec.state == BF_STATE_IDLE)
            do_bootstrap(j); /* Create finished under a predecessor: continue */
        else if (rec.state == BF_STATE_CREATING || rec.state == BF_STATE_CONFIGURING)
            redelivered_mid_flight(j, rec.state);
        else {
            set_outcome(j, BF_OUT_STALE_STATE, "provision: expected Speculative, found %s",
                        bf_state_name(rec.state));
            finish(j);
        }
        return;
    case BF_ACT_BOOTSTRAP:
        if (rec.state == BF_STATE_IDLE)
            do_bootstrap(j);
        else if (rec.state == BF_STATE_CONFIGURING)
            redelivered_mid_flight(j, rec.state);
        else {
            set_outcome(j, BF_OUT_STALE_STATE, "bootstrap: expected Idle, found %s",
                        bf_state_name(rec.state));
            finish(j);
        }
        return;
    case BF_ACT_RECLAIM:
    case BF_ACT_PREEMPT:
        if (rec.state == BF_STATE_CONFIGURED)
            do_drain(j, &rec);
        else if (rec.state == BF_STATE_DRAINING)
            redelivered_mid_flight(j, rec.state);
        else {
            set_outcome(j, BF_OUT_SUCCESS, NULL); /* not Configured: nothing to drain */
            finish(j);
        }
        return;
    case BF_ACT_DELETE:
        if (rec.state == BF_STATE_IDLE)
            do_delete(j);
        else if (rec.state == BF_STATE_DELETING)
            redelivered_mid_flight(j, rec.state);
        else {
            set_outcome(j, BF_OUT_SUCCESS, NULL); /* not Idle: nothing to release */
            finish(j);
        }
        return;
    default:
        set_outcome(j, BF_OUT_OTHER, "unknown action kind %u", kind);
        finish(j);
        return;
    }
}

/* ------------------------------------------------------------ the ring */

static void drain_boot_responses(struct bf_exec *e)
{
    for (;;) {
        size_t len = 0;
        int rc = bf_ring_pop_bytes(e->shm, BF_RING_BOOT_RESP, e->rbuf, e->rbuf_cap, &len);
        if (rc == -EAGAIN)
            return;
        if (rc == -EMSGSIZE) {
            uint8_t *nb = realloc(e->rbuf, len);
            if (!nb) {
                BF_ERROR("cannot grow the bootstrap response buffer", "bytes=%zu", len);
                return; /* retried on the next wake */
            }
            e->rbuf = nb;
            e->rbuf_cap = len;
            continue;
        }
        if (rc)
            return;
        struct bf_boot_resp_hdr h;
        if (len < sizeof h)
            continue;
        memcpy(&h, e->rbuf, sizeof h);
        if (sizeof h + (uint64_t)h.error_len + h.blob_len > len)
            continue; /* malformed record: dropped */
        deliver_boot(e, &h, (const char *)e->rbuf + sizeof h, e->rbuf + sizeof h + h.error_len);
    }
}

/*
 * Jobs read while the provider is not connected (connecting, or in backoff
 * after a failure) wait
 * without touching their machine: started when the connection is back, or,
 * once their deadline passes, finished as ctx_canceled with the machine left
 * in its start state — the cycle re-derives the action, nothing is stranded
 * in a transitional state by an outage.
 */
static void unpark(struct bf_exec *e)
{
    if (!e->n_parked)
        return;
    bool up = bf_prov_client_state(e->client) == BF_NET_CLIENT_READY;
    int64_t now = bf_mono_ns();
    for (uint32_t i = 0; i < e->o.concurrency && e->n_parked && !e->closing; i++) {
        struct job *j = e->jobs[i];
        if (!j || !j->parked)
            continue;
        if (!up && now < j->deadline)
            continue;
        j->parked = false;
        e->n_parked--;
        if (up) {
            start_job(j);
        } else {
            j->id = bf_str(e->shm, j->a.machine_id_ref, &j->id_len);
            set_outcome(j, BF_OUT_CTX_CANCELED,
                        "provider unreachable until the action's deadline; machine untouched");
            finish(j);
        }
    }
}

static void poll_actions(struct bf_exec *e)
{
    if (e->closing)
        return;
    if (e->in_poll) {
        e->repoll = true;
        return;
    }
    e->in_poll = true;
    do {
        e->repoll = false;
        while (!e->closing && e->inflight < e->o.concurrency) {
            struct bf_action_msg a;
            int rc = bf_ring_read_at(e->shm, BF_RING_ACTIONS, e->next, &a);
            if (rc == -ERANGE) { /* cannot happen: we are the only consumer */
                e->next = e->released = bf_ring_cons(e->shm, BF_RING_ACTIONS);
                continue;
            }
            if (rc)
                break;
            uint64_t pos = e->next++;
            if (a.slot >= e->shm->max_machines) {
                BF_ERROR("malformed action dropped", "slot=%u kind=%u serial=%llu", a.slot, a.kind,
                         (unsigned long long)a.serial);
                BF_STAT_INC(XS(e)->outcomes[0][BF_OUT_OTHER]);
                pos_done(e, pos);
                continue;
            }
            /* Audit-only dispositions first: the cycle sends them with pending_tag 0
             * and no in-flight mark (src/cycle/emit.c), so the in-flight check below
             * (enq == done == 0) would drop them unaudited. */
            if (a.disposition == BF_DISP_SUPPRESSED || a.disposition == BF_DISP_DRYRUN) {
                const char *o = a.disposition == BF_DISP_SUPPRESSED ? "suppressed" : "dryrun";
                audit(e, &a, o, 0, NULL);
                BF_DEBUG("action not executed", "disposition=%s kind=%s serial=%llu", o,
                         bf_action_kind_name(a.kind), (unsigned long long)a.serial);
                if (a.pending_tag)
                    action_done(e, &a);
                pos_done(e, pos);
                continue;
            }
            uint8_t enq = bf_pending_enq_tag(e->shm, a.slot);
            uint8_t done = bf_pending_done_tag(e->shm, a.slot);
            if (enq != a.pending_tag || done == a.pending_tag) {
                pos_done(e, pos); /* finished already, or superseded by a newer action */
                continue;
            }
            /* The kill switch also holds what the cycle queued before it was
             * flipped (SIGHUP): nothing starts while it is on. */
            if (BF_SHARED_LOAD(e->shm->st->actuation_paused)) {
                audit(e, &a, "suppressed", 0, NULL);
                BF_STAT_INC(e->shm->st->host.actions_held_at_dispatch);
                action_done(e, &a);
                pos_done(e, pos);
                continue;
            }
            struct job *j = calloc(1, sizeof *j);
            if (!j) {
                e->next--; /* retried on the next poll */
                break;
            }
            j->e = e;
            j->a = a;
            j->pos = pos;
            j->idx = e->free_idx[--e->n_free];
            e->jobs[j->idx] = j;
            j->t0 = bf_mono_ns();
            j->deadline = j->t0 + e->o.execute_timeout_ns;
            e->inflight++;
            BF_STAT_SET(XS(e)->inflight, e->inflight);
            if (bf_prov_client_state(e->client) != BF_NET_CLIENT_READY) {
                j->parked = true; /* started once the provider answers again */
                e->n_parked++;
                continue;
            }
            start_job(j);
        }
        unpark(e);
    } while (e->repoll && !e->closing);
    e->in_poll = false;
}

/* Ownership records from the cycle (ADR-0055): written to the audit log,
 * or dropped when there is none. */
static void drain_own_audit(struct bf_exec *e)
{
    char rec[sizeof(struct bf_own_audit_hdr) + BF_OWN_AS_COUNT * 1024 + 64];
    char line[16384];
    for (int n = 0; n < 4096; n++) {
        size_t len = 0;
        int rc = bf_ring_pop_bytes(e->shm, BF_RING_OWN_AUDIT, rec, sizeof rec, &len);
        if (rc == -EMSGSIZE) {
            /* larger than the cycle ever writes: skip it (read into a heap copy) */
            char *big = malloc(len);
            if (!big || bf_ring_pop_bytes(e->shm, BF_RING_OWN_AUDIT, big, len, &len) != 0) {
                free(big);
                return;
            }
            free(big);
            continue;
        }
        if (rc)
            return;
        if (e->o.audit_fd < 0 || len < sizeof(struct bf_own_audit_hdr))
            continue;
        struct bf_own_audit_hdr h;
        memcpy(&h, rec, sizeof h);
        size_t n_out =
            bf_exec_audit_format_ownership(line, sizeof line, &h, rec + sizeof h, len - sizeof h);
        ssize_t w = write(e->o.audit_fd, line, n_out);
        if (w == (ssize_t)n_out) {
            BF_STAT_INC(XS(e)->audit_records);
        } else {
            BF_STAT_INC(XS(e)->audit_errors);
            if (warn_ok(e))
                BF_ERROR("audit log write failed", "error=\"%s\" written=%zd of=%zu",
                         w < 0 ? strerror(errno) : "short write", w, n_out);
        }
    }
}

void bf_exec_poll(struct bf_exec *e)
{
    if (e->closing)
        return;
    drain_boot_responses(e);
    drain_own_audit(e);
    poll_actions(e);
}

/* ------------------------------------------------------------ lifecycle */

int bf_exec_new(struct bf_net_loop *loop, struct bf_shm *shm, struct bf_prov_client *client,
                const struct bf_exec_opts *o, struct bf_exec **out)
{
    struct bf_exec *e = calloc(1, sizeof *e);
    if (!e)
        return -ENOMEM;
    e->loop = loop;
    e->shm = shm;
    e->client = client;
    e->o = *o;
    if (!e->o.concurrency)
        e->o.concurrency = 128;
    if (e->o.concurrency > (1u << BOOT_IDX_BITS) - 1)
        e->o.concurrency = (1u << BOOT_IDX_BITS) - 1;
    if (e->o.execute_timeout_ns <= 0)
        e->o.execute_timeout_ns = 30 * BF_NS_PER_SEC;
    if (e->o.bootstrap_timeout_ns <= 0)
        e->o.bootstrap_timeout_ns = 30 * BF_NS_PER_SEC;
    uint64_t cap = shm->ring[BF_RING_ACTIONS]->capacity;
    e->ring_mask = cap - 1;
    e->donebits = calloc((cap + 63) / 64, sizeof *e->donebits);
    e->jobs = calloc(e->o.concurrency, sizeof *e->jobs);
    e->free_idx = calloc(e->o.concurrency, sizeof *e->free_idx);
    e->blobs = bf_blob_cache_new();
    e->shapes = bf_prov_shape_cache_new();
    e->rbuf_cap = 64 * 1024;
    e->rbuf = malloc(e->rbuf_cap);
    if (!e->donebits || !e->jobs || !e->free_idx || !e->blobs || !e->shapes || !e->rbuf) {
        bf_exec_free(e);
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < e->o.concurrency; i++)
        e->free_idx[i] = e->o.concurrency - 1 - i;
    e->n_free = e->o.concurrency;
    e->next = e->released = bf_ring_cons(shm, BF_RING_ACTIONS);
    /* request ids: a per-process random prefix, so a predecessor's late
     * responses never match one of ours */
    e->boot_prefix = (bf_random_u64() | 1ull << 63) & ~((1ull << (BOOT_IDX_BITS + 16)) - 1);
    BF_STAT_SET(XS(e)->inflight, 0);
    *out = e;
    return 0;
}

int bf_exec_set_audit_fd(struct bf_exec *e, int fd)
{
    int old = e->o.audit_fd;
    e->o.audit_fd = fd;
    return old;
}

uint32_t bf_exec_inflight(const struct bf_exec *e)
{
    return e->inflight;
}

uint64_t bf_exec_unreleased(const struct bf_exec *e)
{
    return e->next - e->released;
}

void bf_exec_close(struct bf_exec *e)
{
    if (e)
        e->closing = true;
}

void bf_exec_free(struct bf_exec *e)
{
    if (!e)
        return;
    e->closing = true;
    /* Jobs still here wait for a bootstrap blob (or had a call on a client the
     * caller failed to free first): dropped without finishing, so their ring
     * positions stay unreleased and a successor is redelivered them. */
    for (uint32_t i = 0; e->jobs && i < e->o.concurrency; i++) {
        struct job *j = e->jobs[i];
        if (!j)
            continue;
        bf_net_timer_free(j->timer);
        free(j->blob);
        free(j);
        e->jobs[i] = NULL;
    }
    free(e->donebits);
    free(e->jobs);
    free(e->free_idx);
    bf_blob_cache_free(e->blobs);
    bf_prov_shape_cache_free(e->shapes);
    free(e->rbuf);
    free(e);
}
