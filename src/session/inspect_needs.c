/*
 * inspect_needs.c — bigfleet.v1alpha1.ShardRead/InspectNeeds on the
 * session's gRPC server, next to Shard/Session (seeds/003 ADR-0061 +
 * amendment, reference/shard.md §5, wire.md §5 and §7; docs/inspect-needs.md).
 *
 * Design notes
 *   - Identity gate at on_call: under mTLS the peer's single bigfleet://
 *     identity (the transport already refused zero or several) must be
 *     bigfleet://readonly or bigfleet://admin, else PERMISSION_DENIED with
 *     the Go shard's message, an error log line and
 *     st->session.inspect_denied. Plaintext: no check (ADR-0048).
 *   - The request (cluster_id, limit) arrives once the client half-closed.
 *     The rows are copied from the cycle's published verdict ledger in one
 *     pass on the loop (bf_ledger_snapshot: publish_seq rule, bounded
 *     retries; the cycle never waits for us), filtered by cluster and cut at
 *     `limit` during the copy. A ledger that kept moving under every copy
 *     answers UNAVAILABLE (retry); rows beyond the session-wide snapshot
 *     budget answer RESOURCE_EXHAUSTED (both counted and logged).
 *   - The header frame goes first, then one NeedView frame per row, encoded
 *     lazily: frames are queued only while the call's transport backlog is
 *     under INSPECT_HWM, and the rest resumes from on_drain. Memory per
 *     call is the raw row copy plus at most ~INSPECT_HWM of encoded frames,
 *     however slowly the client reads (a 50K-row dump never exists encoded
 *     in memory at once). The call's grpc-timeout, a client cancel or a
 *     dead connection end it through on_done, which frees everything.
 *   - Pagination: the request has only cluster_id and limit (no cursor; the
 *     wire is kept exactly). The stream itself is the pager (flow-
 *     controlled frames); `limit` takes the first N rows of the documented
 *     order (the most important needs first) and total_needs tells the
 *     client how many there are; cluster_id partitions a full dump.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/ledger.h"
#include "bigfleet/log.h"
#include "bigfleet/metrics.h"
#include "bigfleet/pbdecode.h"
#include "bigfleet/v1alpha1/shardread.pb-c.h"
#include "session_internal.h"

#define INSPECT_HWM          (256u << 10)   /* transport backlog before we wait for on_drain */
#define INSPECT_BUDGET_BYTES (256ull << 20) /* raw row copies held by all calls together */

/* Process-local counters (loop thread only), exported by bf_session_inspect_metrics. */
static struct {
    uint64_t rows_sent;
    uint64_t flow_waits; /* pump stopped at the high-water mark, resumed by on_drain */
    uint64_t ledger_retries;
    uint64_t busy;             /* UNAVAILABLE: the ledger moved under every copy */
    uint64_t over_budget;      /* RESOURCE_EXHAUSTED */
    uint64_t bad_requests;     /* INVALID_ARGUMENT */
    uint64_t missing_profiles; /* rows whose need profile did not decode */
    uint64_t completed;        /* streams finished OK */
    uint64_t cancelled;        /* streams that ended before the last row */
    uint64_t snapshot_bytes;   /* gauge: raw rows held */
    uint64_t open;             /* gauge: calls in progress */
} g_in;

struct icall {
    struct ss *ss;
    struct bf_net_call *call;
    struct bf_ledger_snapshot snap;
    uint32_t pos;       /* next row to send */
    bool started;       /* request taken, header sent */
    bool done;          /* finish() called by us */
    bool profile_noted; /* logged a missing profile once */
};

static struct bf_stats_session *stats(struct ss *ss)
{
    return &ss->shm->st->session;
}

static void icall_release(struct icall *c)
{
    g_in.snapshot_bytes -= (uint64_t)c->snap.cap * sizeof(struct bf_verdict_row);
    bf_ledger_snapshot_free(&c->snap);
}

static void finish(struct icall *c, int code, const char *msg)
{
    if (c->done)
        return;
    c->done = true;
    icall_release(c);
    bf_net_call_finish(c->call, code, msg);
}

static bool identity_ok(const char *ident)
{
    return strcmp(ident, "bigfleet://readonly") == 0 || strcmp(ident, "bigfleet://admin") == 0;
}

static void on_call(struct bf_net_call *call, void *arg)
{
    struct ss *ss = arg;
    BF_STAT_INC(stats(ss)->inspect_calls);
    struct icall *c = calloc(1, sizeof *c);
    if (!c) {
        bf_net_call_finish(call, BF_NET_RESOURCE_EXHAUSTED, "shard: out of memory");
        return;
    }
    c->ss = ss;
    c->call = call;
    bf_net_call_set_user(call, c);
    g_in.open++;
    const char *ident = bf_net_call_identity(call);
    if (ident || bf_config_tls(ss->cfg)) {
        if (!ident || !identity_ok(ident)) {
            BF_STAT_INC(stats(ss)->inspect_denied);
            BF_ERROR("InspectNeeds refused: the client certificate is neither readonly nor admin",
                     "peer=%s identity=%s", bf_net_call_peer(call), ident ? ident : "");
            char msg[512];
            snprintf(msg, sizeof msg,
                     "shard: InspectNeeds requires client certificate URI SAN "
                     "bigfleet://readonly or bigfleet://admin (got %s)",
                     ident ? ident : "none");
            finish(c, BF_NET_PERMISSION_DENIED, msg);
        }
    }
}

/* Queues frames while the transport backlog is under the high-water mark;
 * finishes the call after the last one. */
static void pump(struct icall *c)
{
    struct ss *ss = c->ss;
    static struct bf_ledger_buf buf; /* loop thread only; reused across calls */
    while (!c->done && c->pos < c->snap.n && bf_net_call_outbox_bytes(c->call) < INSPECT_HWM) {
        int rc = bf_ledger_encode_need(ss->shm, ss->cache, &c->snap.rows[c->pos], &buf);
        if (rc < 0) {
            finish(c, BF_NET_RESOURCE_EXHAUSTED, "shard: out of memory encoding a NeedView");
            return;
        }
        if (rc == 1) {
            g_in.missing_profiles++;
            if (!c->profile_noted) {
                c->profile_noted = true;
                BF_WARN("InspectNeeds: a verdict row's need profile does not decode; sent "
                        "without requirements",
                        "profile_ref=%u cycle=%llu", c->snap.rows[c->pos].need_profile_ref,
                        (unsigned long long)c->snap.cycle);
            }
        }
        if (bf_net_call_send(c->call, buf.data, buf.len) != 0) {
            finish(c, BF_NET_INTERNAL, "shard: cannot queue a NeedView");
            return;
        }
        c->pos++;
        g_in.rows_sent++;
    }
    if (!c->done && c->pos >= c->snap.n) {
        g_in.completed++;
        finish(c, BF_NET_OK, NULL);
    } else if (!c->done) {
        g_in.flow_waits++;
    }
}

static void on_message(struct bf_net_call *call, const uint8_t *msg, size_t len, void *arg)
{
    struct ss *ss = arg;
    struct icall *c = bf_net_call_user(call);
    if (!c || c->done || c->started)
        return;
    c->started = true;
    /* the method's 4 KiB receive limit already bounds len; unknown fields
     * are dropped and the decode is bounded (bigfleet/pbdecode.h) */
    Bigfleet__V1alpha1__InspectNeedsRequest *req = NULL;
    if (bf_pb_unpack(&bigfleet__v1alpha1__inspect_needs_request__descriptor, msg, len,
                     (ProtobufCMessage **)&req, NULL) != 0) {
        g_in.bad_requests++;
        finish(c, BF_NET_INVALID_ARGUMENT, "shard: malformed InspectNeedsRequest");
        return;
    }
    struct bf_ledger_filter f = {0};
    /* limit <= 0: no cap (wire.md §5: 0 = no cap; a negative limit is not a cap either) */
    f.limit = req->limit > 0 ? (uint32_t)req->limit : 0;
    size_t row = sizeof(struct bf_verdict_row);
    uint64_t left =
        INSPECT_BUDGET_BYTES > g_in.snapshot_bytes ? INSPECT_BUDGET_BYTES - g_in.snapshot_bytes : 0;
    f.max_rows = left / row ? (uint32_t)(left / row) : 1;
    bool none = false;
    if (req->cluster_id && req->cluster_id[0]) {
        f.by_cluster = true;
        if (bf_str_find(ss->shm, req->cluster_id, (uint32_t)strlen(req->cluster_id),
                        &f.cluster_ref) != 0)
            none = true; /* a cluster the shard never saw: no rows */
    }
    uint32_t retries = 0;
    int rc = 0;
    if (none) /* still a header from the current ledger: which cycle this answer reflects */
        f.cluster_ref = UINT32_MAX;
    rc = bf_ledger_snapshot(ss->shm, &f, &c->snap, &retries);
    g_in.ledger_retries += retries;
    if (rc == 0)
        g_in.snapshot_bytes += (uint64_t)c->snap.cap * row;
    char cid[160];
    snprintf(cid, sizeof cid, "%s", req->cluster_id ? req->cluster_id : "");
    int32_t limit = req->limit;
    bigfleet__v1alpha1__inspect_needs_request__free_unpacked(req, NULL);
    if (rc == -EAGAIN) {
        g_in.busy++;
        BF_WARN("InspectNeeds: the verdict ledger changed under every copy", "tries=%d",
                BF_RESULT_READ_TRIES);
        finish(c, BF_NET_UNAVAILABLE, "shard: the verdict ledger is being republished; retry");
        return;
    }
    if (rc == -ENOBUFS) {
        g_in.over_budget++;
        BF_WARN("InspectNeeds: over the snapshot memory budget",
                "budget_mib=%llu cluster=%s limit=%d", INSPECT_BUDGET_BYTES >> 20, cid, limit);
        finish(c, BF_NET_RESOURCE_EXHAUSTED,
               "shard: too many InspectNeeds streams in progress; narrow with cluster_id or limit, "
               "or retry");
        return;
    }
    if (rc) {
        finish(c, BF_NET_RESOURCE_EXHAUSTED, "shard: out of memory");
        return;
    }
    struct bf_ledger_buf hb = {0};
    if (bf_ledger_encode_header(c->snap.cycle, c->snap.computed_at_ns, c->snap.total, &hb) != 0 ||
        bf_net_call_send(call, hb.data, hb.len) != 0) {
        bf_ledger_buf_free(&hb);
        finish(c, BF_NET_INTERNAL, "shard: cannot queue the header");
        return;
    }
    bf_ledger_buf_free(&hb);
    BF_DEBUG("InspectNeeds", "peer=%s cluster=%s limit=%d cycle=%llu total=%u rows=%u retries=%u",
             bf_net_call_peer(call), cid, limit, (unsigned long long)c->snap.cycle, c->snap.total,
             c->snap.n, retries);
    pump(c);
}

static void on_drain(struct bf_net_call *call, void *arg)
{
    (void)arg;
    struct icall *c = bf_net_call_user(call);
    if (c && c->started && !c->done)
        pump(c);
}

static void on_done(struct bf_net_call *call, int code, void *arg)
{
    (void)arg;
    (void)code;
    struct icall *c = bf_net_call_user(call);
    if (!c)
        return;
    bf_net_call_set_user(call, NULL);
    if (!c->done)
        g_in.cancelled++;
    icall_release(c);
    g_in.open--;
    free(c);
}

const struct bf_net_method bf_inspect_needs_method = {
    .path = "/bigfleet.v1alpha1.ShardRead/InspectNeeds",
    .kind = BF_NET_SERVER_STREAMING,
    .on_call = on_call,
    .on_message = on_message,
    .on_drain = on_drain,
    .on_done = on_done,
    .max_recv_message = SS_SMALL_MESSAGE_MAX, /* cluster_id (<= 253 bytes) and a limit */
};

void bf_session_inspect_metrics(struct bf_strbuf *b)
{
    static const struct {
        const char *name, *type, *help;
        const uint64_t *v;
    } m[] = {
        {"bigfleet_shard_inspect_needs_rows_sent_total", "counter",
         "NeedView frames queued on InspectNeeds streams.", &g_in.rows_sent},
        {"bigfleet_shard_inspect_needs_flow_waits_total", "counter",
         "Times an InspectNeeds stream waited for the client to read (transport backlog at the "
         "high-water mark) before queueing more rows.",
         &g_in.flow_waits},
        {"bigfleet_shard_inspect_needs_ledger_retries_total", "counter",
         "Verdict-ledger copies repeated because the cycle republished during the copy.",
         &g_in.ledger_retries},
        {"bigfleet_shard_inspect_needs_unavailable_total", "counter",
         "InspectNeeds calls answered UNAVAILABLE: the ledger moved under every copy.", &g_in.busy},
        {"bigfleet_shard_inspect_needs_over_budget_total", "counter",
         "InspectNeeds calls answered RESOURCE_EXHAUSTED: over the snapshot memory budget.",
         &g_in.over_budget},
        {"bigfleet_shard_inspect_needs_bad_requests_total", "counter",
         "InspectNeeds calls with an undecodable request (INVALID_ARGUMENT).", &g_in.bad_requests},
        {"bigfleet_shard_inspect_needs_missing_profiles_total", "counter",
         "NeedView rows sent without requirements: the need profile blob did not decode.",
         &g_in.missing_profiles},
        {"bigfleet_shard_inspect_needs_completed_total", "counter",
         "InspectNeeds streams that sent every row and finished OK.", &g_in.completed},
        {"bigfleet_shard_inspect_needs_cancelled_total", "counter",
         "InspectNeeds streams that ended before their last row (client cancel, deadline, "
         "dead connection).",
         &g_in.cancelled},
        {"bigfleet_shard_inspect_needs_snapshot_bytes", "gauge",
         "Bytes of verdict rows held by InspectNeeds streams in progress.", &g_in.snapshot_bytes},
        {"bigfleet_shard_inspect_needs_streams_open", "gauge", "InspectNeeds calls in progress.",
         &g_in.open},
    };
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        bf_metrics_header(b, m[i].name, m[i].type, m[i].help);
        bf_metrics_printf(b, "%s %llu\n", m[i].name, (unsigned long long)*m[i].v);
    }
}
