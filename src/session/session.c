/*
 * session.c — Shard/Session streams on the event loop (seed 000 §5,
 * reference/shard.md §4.1–§4.6, wire.md §2, §7), the ring consumers that
 * feed them (docs/internals.md: bootstrap, node state, reclaim, AC hints)
 * and the resync scan.
 *
 * Design notes
 *   - Hello first: any other first frame ends the stream with
 *     FAILED_PRECONDITION; an empty or unusable cluster_id with
 *     INVALID_ARGUMENT; under mTLS the peer's bigfleet:// identity must be
 *     bigfleet://cluster/<cluster_id> (PERMISSION_DENIED, counted).
 *   - One session per cluster: installing a new one detaches the old one
 *     (it is no longer the cluster's session, its pending bootstrap
 *     requests are cancelled) and closes it; the old one's cleanup only
 *     touches the cluster when it is still the installed session, so it
 *     cannot evict its successor.
 *   - Routing: frames are classified on the wire (wire.c). A rollup's bytes
 *     are copied to the ingest thread untouched (ingest.c): the loop never
 *     decodes a large rollup, so bootstrap responses are never delayed by
 *     one. Small frames (Hello, BootstrapBlobResponse, ReclaimAck) are
 *     handled inline: only their own sub-message is decoded, through
 *     bf_pb_unpack (unknown fields dropped, bounded allocation).
 *   - Hostile peers (docs/security.md): until its Hello is accepted a
 *     stream may send frames of at most SS_HELLO_MAX bytes (the transport
 *     refuses more at the 5-byte prefix) and must send the Hello within
 *     --session-hello-timeout; after it, a frame is bounded by the rollup limit
 *     (--max-rollup-mib), and a Hello or ReclaimAck over SS_SMALL_FRAME_MAX
 *     ends the stream (INVALID_ARGUMENT, counted).
 *   - Outbound: each session has a bounded outbox (bigfleet/outbox.h) in front of
 *     the transport. Frames go straight to the transport while its own
 *     queue (bf_net_call_outbox_bytes) is under SS_NET_HWM; beyond it they
 *     wait in the outbox and are flushed from on_drain. NodeStateUpdates
 *     and AvailableCapacityUpdates wait as small keyed records (coalesced
 *     by supersedes_key, encoded when sent), so a slow operator costs
 *     memory bounded by its distinct machines/fingerprints. Acks,
 *     BootstrapRequests and ReclaimInstructions are never coalesced or
 *     dropped: when a session's frame queue overflows (SS_OUTBOX_FRAMES /
 *     SS_OUTBOX_FRAME_BYTES, or the global SS_OUTBOX_GLOBAL_BYTES), or its
 *     transport made no progress for SS_STALL_NS, the operator is not
 *     reading: its stream is reset (counted, logged) and it reconnects and
 *     resyncs. Nothing here ever blocks the loop or another session.
 *   - Resync (ADR-0057): a session installed by Hello joins the next scan
 *     of the inventory; one scan (SS_RESYNC_CHUNK records per loop turn)
 *     serves every cluster that connected before it started, so a
 *     reconnect flood costs at most two passes over the records, not one
 *     per cluster.
 *   - Bootstrap relay: request id = 16 random hex chars mapped to the
 *     executor's id and the asking session; a response is accepted only on
 *     that session's stream; unknown/late ids are dropped and counted.
 *     Entries past the executor's deadline are swept every second.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/log.h"
#include "bigfleet/pbdecode.h"
#include "bigfleet/strbuf.h"
#include "bigfleet/util.h"
#include "bigfleet/v1alpha1/shard.pb-c.h"
#include "session_internal.h"

#define KEY_NODE (1ull << 32)
#define KEY_AC   (2ull << 32)

struct boot {
    uint64_t id;
    uint64_t exec_id;
    struct sess *s;
    int64_t deadline_ns; /* wall clock (executor's deadline) */
};

static struct bf_stats_session *stats(struct ss *ss)
{
    return &ss->shm->st->session;
}

/* ------------------------------------------------------------ encoding scratch */

static uint8_t *g_buf;
static size_t g_cap;

static int pack_msg(const Bigfleet__V1alpha1__ShardMessage *m, size_t *len)
{
    size_t n = bigfleet__v1alpha1__shard_message__get_packed_size(m);
    if (bf_grow((void **)&g_buf, &g_cap, n, 1))
        return -ENOMEM;
    bigfleet__v1alpha1__shard_message__pack(m, g_buf);
    *len = n;
    return 0;
}

/* Requirements of a Need profile as wire messages (arrays owned by the caller). */
struct reqs {
    Bigfleet__V1alpha1__NodeSelectorRequirement *r;
    Bigfleet__V1alpha1__NodeSelectorRequirement **p;
    size_t n;
};

static void reqs_build(struct reqs *out, const struct bf_nprofile *np)
{
    memset(out, 0, sizeof *out);
    if (!np || np->p.n_reqs == 0)
        return;
    out->r = calloc(np->p.n_reqs, sizeof *out->r);
    out->p = calloc(np->p.n_reqs, sizeof *out->p);
    if (!out->r || !out->p) {
        free(out->r);
        free(out->p);
        memset(out, 0, sizeof *out);
        return;
    }
    for (uint32_t i = 0; i < np->p.n_reqs; i++) {
        bigfleet__v1alpha1__node_selector_requirement__init(&out->r[i]);
        out->r[i].key = (char *)np->p.reqs[i].key;
        out->r[i].operator_ = np->p.reqs[i].op;
        out->r[i].n_values = np->p.reqs[i].n_values;
        out->r[i].values = (char **)np->p.reqs[i].values;
        out->p[i] = &out->r[i];
    }
    out->n = np->p.n_reqs;
}

static void reqs_free(struct reqs *r)
{
    free(r->r);
    free(r->p);
}

/* ------------------------------------------------------------ outbox plumbing */

static void account(struct sess *s)
{
    size_t b = bf_outbox_bytes(&s->ob);
    s->ss->outbox_total += b - s->ob_bytes;
    s->ob_bytes = b;
}

static void sess_close(struct sess *s, int code, const char *msg);

static void slow_close(struct sess *s, const char *why)
{
    struct ss *ss = s->ss;
    ss->lc.slow_closed++;
    BF_WARN("operator not reading its stream; closing it (it will reconnect and resync)",
            "cluster=%s peer=%s reason=\"%s\" queued=%u queued_bytes=%zu", s->cluster_id,
            bf_net_call_peer(s->call), why, bf_outbox_count(&s->ob), s->ob_bytes);
    sess_close(s, BF_NET_RESOURCE_EXHAUSTED, why);
}

static int encode_keyed(struct ss *ss, struct sess *s, uint64_t key, const void *val, size_t *len);

static void flush(struct sess *s)
{
    struct bf_outbox_item it;
    while (!s->closing) {
        bf_outbox_peek(&s->ob, &it);
        if (it.kind == BF_OUTBOX_EMPTY) {
            s->stalled_since = 0;
            break;
        }
        if (bf_net_call_outbox_bytes(s->call) >= SS_NET_HWM) {
            if (!s->stalled_since) {
                s->stalled_since = bf_mono_ns();
                s->stall_net_bytes = bf_net_call_outbox_bytes(s->call);
            }
            break;
        }
        int rc;
        if (it.kind == BF_OUTBOX_FRAME) {
            rc = bf_net_call_send(s->call, it.data, it.len);
        } else {
            size_t n;
            rc = encode_keyed(s->ss, s, it.key, it.data, &n);
            if (rc == 0)
                rc = bf_net_call_send(s->call, g_buf, n);
            else
                rc = 0; /* an entry we cannot encode is skipped */
        }
        bf_outbox_pop(&s->ob);
        if (rc == -EPIPE)
            break;
    }
    account(s);
}

/* Sends or queues one encoded, non-coalescable frame (in g_buf). */
static int send_frame(struct sess *s, size_t len)
{
    if (s->closing)
        return -EPIPE;
    if (bf_outbox_count(&s->ob) == 0 && bf_net_call_outbox_bytes(s->call) < SS_NET_HWM)
        return bf_net_call_send(s->call, g_buf, len);
    int rc = bf_outbox_push_frame(&s->ob, g_buf, len);
    account(s);
    if (rc == -ENOBUFS) {
        slow_close(s, "outbox full");
        return rc;
    }
    if (s->ss->outbox_total > SS_OUTBOX_GLOBAL_BYTES && s->ob_bytes > (64u << 10)) {
        slow_close(s, "session outboxes over their global memory bound");
        return -ENOBUFS;
    }
    flush(s);
    return rc;
}

static int send_msg(struct sess *s, const Bigfleet__V1alpha1__ShardMessage *m)
{
    size_t len;
    int rc = pack_msg(m, &len);
    if (rc)
        return rc;
    return send_frame(s, len);
}

/* Sends or queues a coalescable update. */
static void put_keyed(struct sess *s, uint64_t key, const void *val, size_t len)
{
    if (s->closing)
        return;
    if (bf_outbox_count(&s->ob) == 0 && bf_net_call_outbox_bytes(s->call) < SS_NET_HWM) {
        size_t n;
        if (encode_keyed(s->ss, s, key, val, &n) == 0)
            bf_net_call_send(s->call, g_buf, n);
        return;
    }
    int rc = bf_outbox_put_keyed(&s->ob, key, val, len);
    if (rc == 1)
        BF_STAT_INC(stats(s->ss)->outbox_coalesced);
    else if (rc == -ENOBUFS)
        BF_STAT_INC(stats(s->ss)->outbox_dropped);
    account(s);
    flush(s);
}

/* ------------------------------------------------------------ frames */

static void send_ack(struct sess *s, const char *echo)
{
    struct ss *ss = s->ss;
    Bigfleet__V1alpha1__Acknowledgement a = BIGFLEET__V1ALPHA1__ACKNOWLEDGEMENT__INIT;
    a.echo = (char *)echo;
    a.coordinator_term = bf_coord_term(ss);
    a.shard_epoch = ss->shm->inv_hdr->epoch;
    Bigfleet__V1alpha1__ShardMessage m = BIGFLEET__V1ALPHA1__SHARD_MESSAGE__INIT;
    m.payload_case = BIGFLEET__V1ALPHA1__SHARD_MESSAGE__PAYLOAD_ACK;
    m.ack = &a;
    send_msg(s, &m);
}

/* NodeStateUpdate from a node event (reference/shard.md §4.5, ADR-0016). */
static int encode_node(struct ss *ss, struct sess *s, const struct bf_node_event_msg *ev,
                       size_t *len)
{
    const char *mid = bf_str(ss->shm, ev->machine_id_ref, NULL);
    if (!mid)
        return -EINVAL;
    char key[600];
    snprintf(key, sizeof key, "node:%s", mid);
    Bigfleet__V1alpha1__NodeStateUpdate u = BIGFLEET__V1ALPHA1__NODE_STATE_UPDATE__INIT;
    u.supersedes_key = key;
    u.machine_id = (char *)mid;
    u.cluster_id = s->cluster_id;
    u.state = ev->state;
    uint32_t hl = 0;
    const char *host = ev->host_ref ? bf_str(ss->shm, ev->host_ref, &hl) : NULL;
    if (host && hl) {
        if (ev->flags & BF_REC_HOST_IS_ID) {
            u.provider_id = (char *)mid;
        } else {
            size_t pl = strnlen(host, hl);
            u.provider_id = (char *)(pl < hl ? host + pl + 1 : "");
        }
    }
    const char *le = ev->last_error_ref ? bf_str(ss->shm, ev->last_error_ref, NULL) : NULL;
    if (le)
        u.last_error = (char *)le;
    const struct bf_mprofile *mp = bf_mprofile_get(ss->cache, ss->shm, ev->profile_ref);
    Bigfleet__V1alpha1__NodeStateUpdate__LabelsEntry *le_arr = NULL, **le_p = NULL;
    Bigfleet__V1alpha1__Resources__ResourcesEntry *re_arr = NULL, **re_p = NULL;
    Bigfleet__V1alpha1__Resources res = BIGFLEET__V1ALPHA1__RESOURCES__INIT;
    if (mp) {
        size_t nl = mp->n_labels + 2;
        le_arr = calloc(nl, sizeof *le_arr);
        le_p = calloc(nl, sizeof *le_p);
        const struct bf_kv *rk = mp->n_allocatable ? mp->allocatable : mp->resources;
        size_t nr = mp->n_allocatable ? mp->n_allocatable : mp->n_resources;
        re_arr = calloc(nr + 1, sizeof *re_arr);
        re_p = calloc(nr + 1, sizeof *re_p);
        if (le_arr && le_p && re_arr && re_p) {
            size_t n = 0;
            bool has_type = mp->instance_type && mp->instance_type[0];
            bool has_zone = mp->zone && mp->zone[0];
            for (uint32_t i = 0; i < mp->n_labels; i++) {
                if ((has_type && strcmp(mp->labels[i].key, BF_LABEL_INSTANCE_TYPE) == 0) ||
                    (has_zone && strcmp(mp->labels[i].key, BF_LABEL_ZONE) == 0))
                    continue; /* the profile field wins (lookupAttribute) */
                bigfleet__v1alpha1__node_state_update__labels_entry__init(&le_arr[n]);
                le_arr[n].key = (char *)mp->labels[i].key;
                le_arr[n].value = (char *)mp->labels[i].value;
                le_p[n] = &le_arr[n];
                n++;
            }
            if (has_type) {
                bigfleet__v1alpha1__node_state_update__labels_entry__init(&le_arr[n]);
                le_arr[n].key = BF_LABEL_INSTANCE_TYPE;
                le_arr[n].value = (char *)mp->instance_type;
                le_p[n] = &le_arr[n];
                n++;
            }
            if (has_zone) {
                bigfleet__v1alpha1__node_state_update__labels_entry__init(&le_arr[n]);
                le_arr[n].key = BF_LABEL_ZONE;
                le_arr[n].value = (char *)mp->zone;
                le_p[n] = &le_arr[n];
                n++;
            }
            u.n_labels = n;
            u.labels = le_p;
            for (size_t i = 0; i < nr; i++) {
                bigfleet__v1alpha1__resources__resources_entry__init(&re_arr[i]);
                re_arr[i].key = (char *)rk[i].key;
                re_arr[i].value = (char *)rk[i].value;
                re_p[i] = &re_arr[i];
            }
            if (nr) {
                res.n_resources = nr;
                res.resources = re_p;
                u.resources = &res;
            }
        }
    }
    Bigfleet__V1alpha1__ShardMessage m = BIGFLEET__V1ALPHA1__SHARD_MESSAGE__INIT;
    m.payload_case = BIGFLEET__V1ALPHA1__SHARD_MESSAGE__PAYLOAD_NODE_STATE_UPDATE;
    m.node_state_update = &u;
    int rc = pack_msg(&m, len);
    free(le_arr);
    free(le_p);
    free(re_arr);
    free(re_p);
    if (rc == 0)
        BF_STAT_INC(stats(ss)->node_updates);
    return rc;
}

/* AvailableCapacityUpdate from a cycle hint (reference/shard.md §4.6). */
static int encode_ac(struct ss *ss, const struct bf_ac_hint_msg *h, size_t *len)
{
    const struct bf_nprofile *np = bf_nprofile_get(ss->cache, ss->shm, h->need_profile_ref);
    if (!np)
        return -EINVAL;
    char *key = malloc(strlen(np->fingerprint) + 16);
    if (!key)
        return -ENOMEM;
    sprintf(key, "available:%s", np->fingerprint);
    struct reqs rq;
    reqs_build(&rq, np);
    Bigfleet__V1alpha1__AvailableCapacityUpdate u =
        BIGFLEET__V1ALPHA1__AVAILABLE_CAPACITY_UPDATE__INIT;
    u.supersedes_key = key;
    u.n_requirements = rq.n;
    u.requirements = rq.p;
    u.available_count = h->available_count;
    u.confidence = h->confidence;
    u.cost_per_hour = h->cost_per_hour;
    Bigfleet__V1alpha1__ShardMessage m = BIGFLEET__V1ALPHA1__SHARD_MESSAGE__INIT;
    m.payload_case = BIGFLEET__V1ALPHA1__SHARD_MESSAGE__PAYLOAD_AVAILABLE_CAPACITY;
    m.available_capacity = &u;
    int rc = pack_msg(&m, len);
    reqs_free(&rq);
    free(key);
    if (rc == 0)
        BF_STAT_INC(stats(ss)->ac_updates);
    return rc;
}

static int encode_keyed(struct ss *ss, struct sess *s, uint64_t key, const void *val, size_t *len)
{
    if ((key & ~0xffffffffull) == KEY_NODE) {
        struct bf_node_event_msg ev;
        memcpy(&ev, val, sizeof ev);
        return encode_node(ss, s, &ev, len);
    }
    struct bf_ac_hint_msg h;
    memcpy(&h, val, sizeof h);
    return encode_ac(ss, &h, len);
}

/* ------------------------------------------------------------ bootstrap relay */

static void boot_respond(struct ss *ss, uint64_t exec_id, int status, const char *err,
                         const uint8_t *blob, size_t blob_len, int64_t ttl)
{
    struct {
        struct bf_boot_resp_hdr h;
        char e[4096];
    } b;
    memset(&b.h, 0, sizeof b.h);
    size_t el = err ? strnlen(err, sizeof b.e) : 0;
    b.h.request_id = exec_id;
    b.h.status = (uint32_t)status;
    b.h.error_len = (uint32_t)el;
    b.h.blob_len = blob_len;
    b.h.ttl_seconds = ttl;
    if (el)
        memcpy(b.e, err, el);
    int rc = bf_ring_push_bytes(ss->shm, BF_RING_BOOT_RESP, &b, sizeof b.h + el, blob, blob_len);
    if (rc == -E2BIG) {
        BF_WARN("bootstrap blob too large for the executor ring; answering TOO_LARGE",
                "request_id=%" PRIu64 " blob_bytes=%zu", exec_id, blob_len);
        b.h.status = BF_BOOT_TOO_LARGE;
        b.h.blob_len = 0;
        rc = bf_ring_push_bytes(ss->shm, BF_RING_BOOT_RESP, &b, sizeof b.h + el, NULL, 0);
    }
    if (rc) {
        ss->lc.boot_resp_ring_full++;
        BF_ERROR("bootstrap response ring full; the executor will time the request out",
                 "request_id=%" PRIu64 " error=%d", exec_id, rc);
        return;
    }
    bf_wake(ss->shm, BF_ROLE_EXECUTOR);
}

static void boots_cancel_of(struct ss *ss, struct sess *s)
{
    if (!s->n_boot)
        return;
    uint64_t *ids = malloc((size_t)s->n_boot * sizeof *ids);
    uint32_t n = 0;
    for (uint32_t i = 0; ids && i <= ss->boots.mask && n < s->n_boot; i++) {
        if (!ss->boots.slots[i].h)
            continue;
        struct boot *b = (struct boot *)(uintptr_t)ss->boots.slots[i].val;
        if (b->s == s)
            ids[n++] = ss->boots.slots[i].key;
    }
    for (uint32_t i = 0; i < n; i++) {
        uint64_t v;
        if (!u64map_del(&ss->boots, ids[i], &v))
            continue;
        struct boot *b = (struct boot *)(uintptr_t)v;
        boot_respond(ss, b->exec_id, BF_BOOT_CANCELLED, "operator session closed", NULL, 0, 0);
        free(b);
    }
    free(ids);
    s->n_boot = 0;
}

static struct sess *session_of(struct ss *ss, uint32_t cluster_ref)
{
    const uint64_t *v;
    if (!cluster_ref || !(v = u64map_ref(&ss->cref_idx, cluster_ref)))
        return NULL;
    struct sess *s = ss->live[*v];
    return (s && !s->closing) ? s : NULL;
}

static void on_boot_req(struct ss *ss, const struct bf_boot_req_msg *m)
{
    if (m->deadline_ns && m->deadline_ns < bf_now_ns())
        return; /* the executor already gave up on it */
    struct sess *s = session_of(ss, m->cluster_ref);
    if (!s) {
        ss->lc.boot_no_session++;
        boot_respond(ss, m->request_id, BF_BOOT_NO_SESSION, "no operator session for the cluster",
                     NULL, 0, 0);
        return;
    }
    if (ss->boots.n >= SS_BOOT_MAX) {
        BF_ERROR("too many bootstrap requests in flight; cancelling", "limit=%u", SS_BOOT_MAX);
        boot_respond(ss, m->request_id, BF_BOOT_CANCELLED, "too many requests in flight", NULL, 0,
                     0);
        return;
    }
    struct boot *b = calloc(1, sizeof *b);
    if (!b)
        return;
    do
        b->id = bf_random_u64();
    while (!b->id || u64map_ref(&ss->boots, b->id));
    b->exec_id = m->request_id;
    b->s = s;
    b->deadline_ns = m->deadline_ns;
    if (u64map_put(&ss->boots, b->id, (uint64_t)(uintptr_t)b) != 0) {
        free(b);
        return;
    }
    s->n_boot++;
    char rid[17];
    snprintf(rid, sizeof rid, "%016" PRIx64, b->id);
    const struct bf_nprofile *np = bf_nprofile_get(ss->cache, ss->shm, m->need_profile_ref);
    if (!np && m->need_profile_ref)
        BF_WARN("bootstrap request: need profile does not decode; sending no requirements",
                "profile_ref=%u", m->need_profile_ref);
    struct reqs rq;
    reqs_build(&rq, np);
    Bigfleet__V1alpha1__BootstrapRequest r = BIGFLEET__V1ALPHA1__BOOTSTRAP_REQUEST__INIT;
    r.request_id = rid;
    r.n_requirements = rq.n;
    r.requirements = rq.p;
    r.cluster_id = s->cluster_id;
    Bigfleet__V1alpha1__ShardMessage sm = BIGFLEET__V1ALPHA1__SHARD_MESSAGE__INIT;
    sm.payload_case = BIGFLEET__V1ALPHA1__SHARD_MESSAGE__PAYLOAD_BOOTSTRAP_REQUEST;
    sm.bootstrap_request = &r;
    BF_STAT_INC(stats(ss)->boot_requests);
    send_msg(s, &sm); /* a failure closes the session, which cancels the request */
    reqs_free(&rq);
}

static bool parse_hex16(const char *s, uint64_t *out)
{
    if (strlen(s) != 16)
        return false;
    uint64_t v = 0;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return false;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return v != 0;
}

static void on_boot_resp(struct sess *s, const Bigfleet__V1alpha1__BootstrapBlobResponse *r)
{
    struct ss *ss = s->ss;
    uint64_t id;
    const uint64_t *v;
    if (!parse_hex16(r->request_id, &id) || !(v = u64map_ref(&ss->boots, id)) ||
        ((struct boot *)(uintptr_t)*v)->s != s) {
        BF_STAT_INC(stats(ss)->boot_late_responses);
        BF_DEBUG("bootstrap response for an unknown or expired request dropped",
                 "cluster=%s request_id=%.32s", s->cluster_id, r->request_id);
        return;
    }
    uint64_t bv = 0;
    u64map_del(&ss->boots, id, &bv);
    struct boot *b = (struct boot *)(uintptr_t)bv;
    s->n_boot--;
    bool err = r->error && r->error[0];
    boot_respond(ss, b->exec_id, err ? BF_BOOT_OPERATOR_ERROR : BF_BOOT_OK, err ? r->error : NULL,
                 r->user_data.data, r->user_data.len, r->ttl_seconds);
    free(b);
}

/* ------------------------------------------------------------ reclaim */

static void on_reclaim(struct ss *ss, const struct bf_reclaim_msg *m)
{
    struct sess *s = session_of(ss, m->cluster_ref);
    if (!s) {
        ss->lc.reclaim_no_session++;
        BF_WARN("reclaim without an operator session: the drain proceeds without the operator's "
                "cordon and PDB-respecting eviction",
                "cluster=%s machine=%s", bf_str(ss->shm, m->cluster_ref, NULL) ?: "?",
                bf_str(ss->shm, m->machine_id_ref, NULL) ?: "?");
        return;
    }
    const char *mid = bf_str(ss->shm, m->machine_id_ref, NULL);
    if (!mid)
        return;
    uint64_t id;
    do
        id = bf_random_u64();
    while (!id);
    char iid[17];
    snprintf(iid, sizeof iid, "%016" PRIx64, id);
    char *nodes[1] = {(char *)mid};
    Bigfleet__V1alpha1__ReclaimInstruction ri = BIGFLEET__V1ALPHA1__RECLAIM_INSTRUCTION__INIT;
    ri.instruction_id = iid;
    ri.n_nodes = 1;
    ri.nodes = nodes;
    ri.grace_period_seconds = m->grace_seconds;
    ri.preemptor_priority = m->preemptor_priority;
    Bigfleet__V1alpha1__ShardMessage sm = BIGFLEET__V1ALPHA1__SHARD_MESSAGE__INIT;
    sm.payload_case = BIGFLEET__V1ALPHA1__SHARD_MESSAGE__PAYLOAD_RECLAIM_INSTRUCTION;
    sm.reclaim_instruction = &ri;
    if (ss->reclaims.n < SS_RECLAIM_TRACK_MAX)
        u64map_put(&ss->reclaims, id, (uint64_t)bf_mono_ns());
    BF_STAT_INC(stats(ss)->reclaim_instructions);
    send_msg(s, &sm);
}

static void on_reclaim_ack(struct sess *s, const Bigfleet__V1alpha1__ReclaimAck *a)
{
    struct ss *ss = s->ss;
    uint64_t id;
    if (parse_hex16(a->instruction_id, &id) && u64map_del(&ss->reclaims, id, NULL)) {
        BF_STAT_INC(stats(ss)->reclaim_acks);
        BF_DEBUG("reclaim acknowledged", "cluster=%s instruction_id=%s nodes_started=%d",
                 s->cluster_id, a->instruction_id, a->nodes_started);
    } else {
        ss->lc.reclaim_unknown_acks++;
    }
}

/* ------------------------------------------------------------ node state, AC */

static void on_node_event(struct ss *ss, const struct bf_node_event_msg *ev)
{
    struct sess *s = session_of(ss, ev->cluster_ref);
    if (!s) {
        ss->lc.node_no_session++; /* the operator resyncs when it connects */
        return;
    }
    put_keyed(s, KEY_NODE | ev->machine_id_ref, ev, sizeof *ev);
}

static void on_ac_hint(struct ss *ss, const struct bf_ac_hint_msg *h)
{
    struct sess *s = session_of(ss, h->cluster_ref);
    if (!s) {
        ss->lc.ac_no_session++;
        return;
    }
    put_keyed(s, KEY_AC | h->need_profile_ref, h, sizeof *h);
}

/* ------------------------------------------------------------ rings */

static void drain_again(void *arg)
{
    struct ss *ss = arg;
    ss->drain_deferred = false;
    bf_session_drain_rings(ss);
}

void bf_session_drain_rings(struct ss *ss)
{
    bool more = false;
    unsigned n;
    struct bf_boot_req_msg br;
    for (n = 0; n < SS_RING_BUDGET && bf_ring_pop(ss->shm, BF_RING_BOOT_REQ, &br) == 0; n++)
        on_boot_req(ss, &br);
    more |= n == SS_RING_BUDGET;
    struct bf_node_event_msg ev;
    for (n = 0; n < SS_RING_BUDGET && bf_ring_pop(ss->shm, BF_RING_NODE_EXEC, &ev) == 0; n++)
        on_node_event(ss, &ev);
    more |= n == SS_RING_BUDGET;
    for (n = 0; n < SS_RING_BUDGET && bf_ring_pop(ss->shm, BF_RING_NODE_RECON, &ev) == 0; n++)
        on_node_event(ss, &ev);
    more |= n == SS_RING_BUDGET;
    struct bf_reclaim_msg rm;
    for (n = 0; n < SS_RING_BUDGET && bf_ring_pop(ss->shm, BF_RING_RECLAIM, &rm) == 0; n++)
        on_reclaim(ss, &rm);
    more |= n == SS_RING_BUDGET;
    struct bf_ac_hint_msg h;
    for (n = 0; n < SS_RING_BUDGET && bf_ring_pop(ss->shm, BF_RING_AC_HINTS, &h) == 0; n++)
        on_ac_hint(ss, &h);
    more |= n == SS_RING_BUDGET;
    bf_coord_drain_acks(ss);
    if (more && !ss->drain_deferred && bf_net_loop_defer(ss->loop, drain_again, ss) == 0)
        ss->drain_deferred = true;
}

/* ------------------------------------------------------------ resync */

static void resync_queue(struct sess *s)
{
    struct ss *ss = s->ss;
    if (s->rs_waiting)
        return;
    s->rs_waiting = true;
    s->rs_prev = NULL;
    s->rs_next = ss->rs_pending;
    if (ss->rs_pending)
        ss->rs_pending->rs_prev = s;
    ss->rs_pending = s;
    if (!ss->rs_running)
        bf_net_timer_start(ss->resync_timer, 0, 0);
}

static void resync_unlink(struct sess *s)
{
    struct ss *ss = s->ss;
    if (!s->rs_waiting)
        return;
    if (s->rs_prev)
        s->rs_prev->rs_next = s->rs_next;
    else
        ss->rs_pending = s->rs_next;
    if (s->rs_next)
        s->rs_next->rs_prev = s->rs_prev;
    s->rs_waiting = false;
}

void bf_session_resync_step(struct ss *ss)
{
    if (!ss->rs_running) {
        if (!ss->rs_pending)
            return;
        ss->rs_pass++;
        if (ss->rs_pass == 0)
            ss->rs_pass = 1;
        uint32_t n = 0;
        while (ss->rs_pending) {
            struct sess *s = ss->rs_pending;
            resync_unlink(s);
            s->rs_pass = ss->rs_pass;
            n++;
        }
        ss->rs_running = true;
        ss->rs_pos = 0;
        ss->rs_hwm = bf_inv_hwm(ss->shm);
        ss->lc.resync_passes++;
        BF_DEBUG("resync scan started", "sessions=%u records=%u", n, ss->rs_hwm);
    }
    uint32_t end = ss->rs_pos + SS_RESYNC_CHUNK;
    if (end > ss->rs_hwm)
        end = ss->rs_hwm;
    for (uint32_t slot = ss->rs_pos; slot < end; slot++) {
        struct bf_machine_rec r;
        if (bf_inv_read(ss->shm, slot, &r) != 0 || !(r.flags & BF_REC_VALID) || !r.cluster)
            continue; /* a record mid-write: its writer's node event follows */
        struct sess *s = session_of(ss, r.cluster);
        if (!s || s->rs_pass != ss->rs_pass)
            continue;
        struct bf_node_event_msg ev = {.slot = slot,
                                       .machine_id_ref = r.id,
                                       .cluster_ref = r.cluster,
                                       .profile_ref = r.profile,
                                       .host_ref = r.host,
                                       .last_error_ref = r.last_error,
                                       .state = r.state,
                                       .flags = (uint8_t)(r.flags & BF_REC_HOST_IS_ID)};
        ss->lc.resync_updates++;
        put_keyed(s, KEY_NODE | r.id, &ev, sizeof ev);
    }
    ss->rs_pos = end;
    if (ss->rs_pos >= ss->rs_hwm) {
        ss->rs_running = false;
        if (!ss->rs_pending)
            return;
    }
    bf_net_timer_start(ss->resync_timer, 0, 0);
}

/* ------------------------------------------------------------ install / close */

static void set_connected(struct ss *ss, uint32_t cidx, bool on)
{
    struct cluster_tab *ct = &ss->ct;
    pthread_mutex_lock(&ct->mu);
    struct bf_cluster_rec *r = &ct->rec[cidx];
    r->connected = on;
    if (on) {
        r->connected_since_ns = bf_now_ns();
        r->session_epoch++;
    } else {
        r->connected_since_ns = 0;
    }
    bf_ctab_publish_locked(ct, cidx);
    pthread_mutex_unlock(&ct->mu);
}

/* Index of the cluster named by ref, allocating its row on first contact.
 * -ENOSPC when the cluster table is full. */
static int64_t cluster_index(struct ss *ss, uint32_t ref)
{
    const uint64_t *v = u64map_ref(&ss->cref_idx, ref);
    if (v)
        return (int64_t)*v;
    struct cluster_tab *ct = &ss->ct;
    pthread_mutex_lock(&ct->mu);
    uint32_t n = ct->n;
    if (n >= ss->shm->max_clusters) {
        pthread_mutex_unlock(&ct->mu);
        return -ENOSPC;
    }
    memset(&ct->rec[n], 0, sizeof ct->rec[n]);
    ct->rec[n].name_ref = ref;
    ct->rec[n].in_use = 1;
    bf_ctab_publish_locked(ct, n);
    ct->n = n + 1;
    BF_SHARED_STORE(ss->shm->needs->n_clusters, n + 1);
    pthread_mutex_unlock(&ct->mu);
    if (u64map_put(&ss->cref_idx, ref, n) != 0)
        return -ENOMEM;
    return n;
}

static void detach(struct sess *s)
{
    struct ss *ss = s->ss;
    if (!s->live)
        return;
    s->live = false;
    ss->live[s->cidx] = NULL;
    BF_STAT_SUB(stats(ss)->active_sessions, 1);
}

static void sess_close(struct sess *s, int code, const char *msg)
{
    if (s->closing)
        return;
    struct ss *ss = s->ss;
    s->closing = true;
    bf_outbox_reset(&s->ob);
    account(s);
    boots_cancel_of(ss, s);
    resync_unlink(s);
    /* a peer that is not reading would never receive trailers: reset it */
    if (code == BF_NET_RESOURCE_EXHAUSTED || bf_net_call_outbox_bytes(s->call) > 0)
        bf_net_call_cancel(s->call);
    else
        bf_net_call_finish(s->call, code, msg);
}

static void install(struct sess *s, const uint8_t *id, size_t idlen)
{
    struct ss *ss = s->ss;
    uint32_t ref;
    int rc = bf_str_intern(ss->shm, id, (uint32_t)idlen, &ref);
    int64_t cidx = rc ? rc : cluster_index(ss, ref);
    if (cidx < 0) {
        BF_ERROR("cannot register the cluster; refusing the session", "cluster=%s error=\"%s\"",
                 s->cluster_id, strerror((int)-cidx));
        BF_STAT_INC(stats(ss)->hello_rejected);
        sess_close(s, BF_NET_RESOURCE_EXHAUSTED, "session: the shard cannot register the cluster");
        return;
    }
    s->cidx = cidx;
    s->cluster_ref = ref;
    struct sess *old = ss->live[cidx];
    if (old) {
        detach(old);
        BF_STAT_INC(stats(ss)->lifecycle[2]); /* replaced */
        BF_INFO("session replaced by a newer stream for the same cluster",
                "cluster=%s old_peer=%s new_peer=%s", s->cluster_id, bf_net_call_peer(old->call),
                bf_net_call_peer(s->call));
        sess_close(old, BF_NET_ABORTED, "session: replaced by a newer session for this cluster");
    } else {
        BF_STAT_INC(stats(ss)->lifecycle[0]); /* installed */
    }
    ss->live[cidx] = s;
    s->live = true;
    bf_net_call_set_max_recv(s->call, 0); /* the method's limit: the rollup limit */
    BF_STAT_INC(stats(ss)->active_sessions);
    set_connected(ss, (uint32_t)cidx, true);
    BF_INFO("session installed", "cluster=%s peer=%s", s->cluster_id, bf_net_call_peer(s->call));
    send_ack(s, "hello");
    resync_queue(s);
}

/* ------------------------------------------------------------ inbound */

static void reject_first(struct sess *s, int code, const char *msg)
{
    BF_STAT_INC(stats(s->ss)->hello_rejected);
    BF_WARN("session refused", "peer=%s code=%s reason=\"%s\"", bf_net_call_peer(s->call),
            bf_net_code_name(code), msg);
    sess_close(s, code, msg);
}

static void on_hello(struct sess *s, const uint8_t *sub, size_t sublen)
{
    struct ss *ss = s->ss;
    const uint8_t *id;
    size_t idlen;
    if (bf_hello_cluster_id(sub, sublen, &id, &idlen) != 0) {
        reject_first(s, BF_NET_INVALID_ARGUMENT, "session: malformed Hello");
        return;
    }
    if (idlen == 0) {
        reject_first(s, BF_NET_INVALID_ARGUMENT,
                     "session: first frame must be Hello with cluster_id");
        return;
    }
    if (!bf_cluster_id_valid(id, idlen)) {
        reject_first(s, BF_NET_INVALID_ARGUMENT,
                     "session: Hello.cluster_id must be 1-253 printable ASCII characters");
        return;
    }
    memcpy(s->cluster_id, id, idlen);
    s->cluster_id[idlen] = 0;
    const char *ident = bf_net_call_identity(s->call);
    if (ident) {
        char want[BF_CLUSTER_ID_MAX + 32];
        snprintf(want, sizeof want, "bigfleet://cluster/%s", s->cluster_id);
        if (strcmp(ident, want) != 0) {
            BF_STAT_INC(stats(ss)->identity_rejected);
            BF_ERROR("session identity mismatch: the client certificate does not authorize the "
                     "claimed cluster",
                     "peer=%s identity=%s cluster=%s", bf_net_call_peer(s->call), ident,
                     s->cluster_id);
            char msg[BF_CLUSTER_ID_MAX * 2 + 128];
            snprintf(msg, sizeof msg,
                     "session: client certificate identity %s does not authorize cluster_id %s",
                     ident, s->cluster_id);
            sess_close(s, BF_NET_PERMISSION_DENIED, msg);
            return;
        }
    }
    install(s, id, idlen);
}

/*
 * A Rollup goes to the ingest thread without being copied when it can: the
 * net layer hands over the assembled message buffer (bf_net_call_take_message;
 * a 50K-Need rollup is ~7 MB, and copying it into fresh pages cost more than
 * ingesting an unchanged one). The buffer then holds the whole
 * OperatorMessage; the Rollup is the slice sub/sublen of it. The ingest
 * budget charges the whole buffer from here on (struct ingest_buf).
 */
static void on_rollup(struct sess *s, const uint8_t *msg, size_t len, const uint8_t *sub,
                      size_t sublen, uint32_t parts)
{
    struct ss *ss = s->ss;
    BF_STAT_INC(stats(ss)->rollups_received);
    struct ingest_buf rb = {0};
    if (parts > 1) { /* the field seen twice merges: decode the concatenation */
        if (bf_opmsg_member_bytes(msg, len, 2, 1, 4, &rb.heap, &rb.len) != 0 || !rb.heap)
            return;
        rb.data = rb.heap;
    } else if (bf_net_call_take_message(s->call, msg, &rb.net) == 0) {
        rb.data = sub ? sub : msg; /* an empty Rollup: no bytes, but a non-NULL slice */
        rb.len = sublen;
    } else { /* delivered in place (small): the bytes are the layer's, copy them */
        rb.heap = malloc(sublen ? sublen : 1);
        if (!rb.heap)
            return;
        if (sublen)
            memcpy(rb.heap, sub, sublen);
        rb.data = rb.heap;
        rb.len = sublen;
    }
    size_t blen = rb.len;
    int rc = bf_ingest_submit(ss->ig, (uint32_t)s->cidx, s->serial, &rb, bf_now_ns());
    if (rc > 0) { /* ingested here: acknowledge it (and anything else done) now */
        bf_session_on_ingest_done(ss);
    } else if (rc < 0) {
        ss->lc.rollups_shed++;
        BF_WARN("rollup shed: queued rollups are over their memory budget (no ack; the next "
                "rollup retries)",
                "cluster=%s bytes=%zu budget=%llu", s->cluster_id, blen,
                (unsigned long long)SS_INGEST_BUDGET);
    }
}

/* A frame kind that is small by nature arrived large: the peer is hostile
 * or broken; its stream ends (it may reconnect). */
static void oversize(struct sess *s, const char *kind, size_t len)
{
    s->ss->lc.frames_oversize++;
    BF_WARN("oversize OperatorMessage; closing the stream", "cluster=%s kind=%s bytes=%zu max=%u",
            s->cluster_id, kind, len, SS_SMALL_FRAME_MAX);
    char m[128];
    snprintf(m, sizeof m, "session: a %s of %zu bytes exceeds its %u-byte limit", kind, len,
             SS_SMALL_FRAME_MAX);
    sess_close(s, BF_NET_INVALID_ARGUMENT, m);
}

/* BootstrapBlobResponse / ReclaimAck: only the sub-message is decoded, with
 * unknown fields dropped and the allocation bounded (bigfleet/pbdecode.h). */
static void on_small_frame(struct sess *s, int payload, const uint8_t *msg, size_t len,
                           const uint8_t *sub, size_t sublen, uint32_t parts)
{
    struct ss *ss = s->ss;
    bool ack = payload == BIGFLEET__V1ALPHA1__OPERATOR_MESSAGE__PAYLOAD_RECLAIM_ACK;
    const char *kind = ack ? "ReclaimAck" : "BootstrapBlobResponse";
    if (ack && len > SS_SMALL_FRAME_MAX) {
        oversize(s, kind, len);
        return;
    }
    uint8_t *joined = NULL;
    if (parts > 1) { /* a message field seen twice merges: decode the concatenation */
        size_t jl = 0;
        if (bf_opmsg_member_bytes(msg, len, (uint32_t)payload, 1, 4, &joined, &jl) != 0 ||
            !joined) {
            free(joined);
            joined = NULL;
            sub = NULL;
        } else {
            sub = joined;
            sublen = jl;
        }
    }
    ProtobufCMessage *m = NULL;
    struct bf_pb_decode_info info;
    int rc = sub || !sublen
                 ? bf_pb_unpack(ack ? &bigfleet__v1alpha1__reclaim_ack__descriptor
                                    : &bigfleet__v1alpha1__bootstrap_blob_response__descriptor,
                                sub, sublen, &m, &info)
                 : -EBADMSG;
    free(joined);
    if (rc == 0)
        ss->lc.unknown_fields += info.unknown_fields;
    if (rc) {
        ss->lc.frames_bad++;
        BF_WARN("undecodable OperatorMessage; closing the stream",
                "cluster=%s kind=%s bytes=%zu reason=\"%s\"", s->cluster_id, kind, len,
                rc == -E2BIG ? "decodes to more than its allocation bound" : "malformed");
        sess_close(s, BF_NET_INVALID_ARGUMENT, "session: malformed OperatorMessage");
        return;
    }
    if (ack)
        on_reclaim_ack(s, (Bigfleet__V1alpha1__ReclaimAck *)m);
    else
        on_boot_resp(s, (Bigfleet__V1alpha1__BootstrapBlobResponse *)m);
    protobuf_c_message_free_unpacked(m, NULL);
}

static void on_message(struct bf_net_call *call, const uint8_t *msg, size_t len, void *arg)
{
    (void)arg;
    struct sess *s = bf_net_call_user(call);
    if (!s || s->closing)
        return;
    int payload;
    const uint8_t *sub;
    size_t sublen;
    uint32_t parts;
    int crc = bf_opmsg_classify(msg, len, &payload, &sub, &sublen, &parts);
    if (crc == -E2BIG) {
        s->ss->lc.frames_oversize++;
        BF_WARN("OperatorMessage with more than 1024 top-level fields (unknown-field padding); "
                "closing the stream",
                "cluster=%s peer=%s bytes=%zu", s->cluster_id, bf_net_call_peer(call), len);
        if (s->cidx < 0)
            BF_STAT_INC(stats(s->ss)->hello_rejected);
        sess_close(s, BF_NET_INVALID_ARGUMENT,
                   "session: an OperatorMessage has more than 1024 top-level fields");
        return;
    }
    if (crc != 0) {
        if (s->cidx < 0) {
            reject_first(s, BF_NET_INVALID_ARGUMENT, "session: malformed OperatorMessage");
        } else {
            s->ss->lc.frames_bad++;
            BF_WARN("malformed OperatorMessage; closing the stream", "cluster=%s bytes=%zu",
                    s->cluster_id, len);
            sess_close(s, BF_NET_INVALID_ARGUMENT, "session: malformed OperatorMessage");
        }
        return;
    }
    if (s->cidx < 0) {
        if (payload != BIGFLEET__V1ALPHA1__OPERATOR_MESSAGE__PAYLOAD_HELLO) {
            reject_first(s, BF_NET_FAILED_PRECONDITION,
                         "session: first frame must be Hello with cluster_id");
            return;
        }
        on_hello(s, sub, sublen);
        return;
    }
    switch (payload) {
    case BIGFLEET__V1ALPHA1__OPERATOR_MESSAGE__PAYLOAD_HELLO:
        if (len > SS_SMALL_FRAME_MAX) {
            oversize(s, "Hello", len);
            return;
        }
        send_ack(s, "hello");
        break;
    case BIGFLEET__V1ALPHA1__OPERATOR_MESSAGE__PAYLOAD_ROLLUP:
        on_rollup(s, msg, len, sub, sublen, parts);
        break;
    case BIGFLEET__V1ALPHA1__OPERATOR_MESSAGE__PAYLOAD_BOOTSTRAP_RESPONSE:
    case BIGFLEET__V1ALPHA1__OPERATOR_MESSAGE__PAYLOAD_RECLAIM_ACK:
        on_small_frame(s, payload, msg, len, sub, sublen, parts);
        break;
    default:
        s->ss->lc.frames_bad++;
        if (!s->warned_unknown) { /* once per stream: a flood must not flood the log */
            s->warned_unknown = true;
            BF_WARN("OperatorMessage without a known payload ignored (further ones counted only)",
                    "cluster=%s", s->cluster_id);
        }
        break;
    }
}

static void on_call(struct bf_net_call *call, void *arg)
{
    struct ss *ss = arg;
    struct sess *s = calloc(1, sizeof *s);
    if (!s) {
        bf_net_call_finish(call, BF_NET_RESOURCE_EXHAUSTED, "session: out of memory");
        return;
    }
    s->ss = ss;
    s->call = call;
    s->serial = ++ss->next_serial;
    s->cidx = -1;
    bf_net_call_set_max_recv(call, SS_HELLO_MAX); /* raised to the rollup limit by the Hello */
    static const struct bf_outbox_limits lim = {
        .max_frame_bytes = SS_OUTBOX_FRAME_BYTES, .max_frames = SS_OUTBOX_FRAMES, .max_keys = 0};
    struct bf_outbox_limits l = lim;
    /* node keys are bounded by the machines routed to this cluster */
    l.max_keys = ss->shm->max_machines + SS_OUTBOX_MAX_AC_KEYS;
    bf_outbox_init(&s->ob, &l);
    s->all_next = ss->all;
    if (ss->all)
        ss->all->all_prev = s;
    ss->all = s;
    bf_net_call_set_user(call, s);
}

/* The operator closed its side (EOF): the session ends cleanly (Go: Recv
 * returns io.EOF, the handler returns nil). */
static void on_half_close(struct bf_net_call *call, void *arg)
{
    (void)arg;
    struct sess *s = bf_net_call_user(call);
    if (s && !s->closing)
        sess_close(s, BF_NET_OK, NULL);
}

static void on_drain(struct bf_net_call *call, void *arg)
{
    (void)arg;
    struct sess *s = bf_net_call_user(call);
    if (s && !s->closing)
        flush(s);
}

static void on_done(struct bf_net_call *call, int code, void *arg)
{
    struct ss *ss = arg;
    struct sess *s = bf_net_call_user(call);
    if (!s)
        return;
    bf_net_call_set_user(call, NULL);
    if (s->live) {
        uint32_t cidx = (uint32_t)s->cidx;
        detach(s);
        set_connected(ss, cidx, false);
        BF_STAT_INC(stats(ss)->lifecycle[1]); /* removed */
        BF_INFO("session ended", "cluster=%s peer=%s code=%s", s->cluster_id,
                bf_net_call_peer(call), bf_net_code_name(code));
    }
    boots_cancel_of(ss, s);
    resync_unlink(s);
    bf_outbox_reset(&s->ob);
    account(s);
    if (s->all_prev)
        s->all_prev->all_next = s->all_next;
    else
        ss->all = s->all_next;
    if (s->all_next)
        s->all_next->all_prev = s->all_prev;
    free(s);
}

const struct bf_net_method bf_session_method = {
    .path = "/bigfleet.v1alpha1.Shard/Session",
    .kind = BF_NET_BIDI_STREAMING,
    .on_call = on_call,
    .on_message = on_message,
    .on_half_close = on_half_close,
    .on_drain = on_drain,
    .on_done = on_done,
};

/* ------------------------------------------------------------ loop hooks */

void bf_session_on_ingest_done(struct ss *ss)
{
    struct ingest_done d[64];
    int n;
    while ((n = bf_ingest_take_done(ss->ig, d, 64)) > 0) {
        for (int i = 0; i < n; i++) {
            if (d[i].outcome != INGEST_ACCEPTED && d[i].outcome != INGEST_HELD)
                continue; /* a rejected rollup is not acknowledged */
            struct sess *s = ss->live[d[i].cidx];
            if (s && !s->closing && s->serial == d[i].serial)
                send_ack(s, "rollup");
        }
    }
}

void bf_session_sweep(struct ss *ss)
{
    int64_t now = bf_now_ns(), mono = bf_mono_ns();
    /* bootstrap requests past the executor's deadline (it has rolled back) */
    uint64_t ids[256];
    for (;;) {
        uint32_t n = 0;
        for (uint32_t i = 0; i <= ss->boots.mask && n < 256; i++) {
            if (!ss->boots.slots[i].h)
                continue;
            struct boot *b = (struct boot *)(uintptr_t)ss->boots.slots[i].val;
            if (b->deadline_ns && b->deadline_ns < now - BF_NS_PER_SEC)
                ids[n++] = ss->boots.slots[i].key;
        }
        for (uint32_t i = 0; i < n; i++) {
            uint64_t v;
            if (u64map_del(&ss->boots, ids[i], &v)) {
                struct boot *b = (struct boot *)(uintptr_t)v;
                b->s->n_boot--;
                free(b);
            }
        }
        if (n < 256)
            break;
    }
    for (;;) {
        uint32_t n = 0;
        for (uint32_t i = 0; i <= ss->reclaims.mask && n < 256; i++)
            if (ss->reclaims.slots[i].h &&
                (int64_t)ss->reclaims.slots[i].val + SS_RECLAIM_TTL_NS < mono)
                ids[n++] = ss->reclaims.slots[i].key;
        for (uint32_t i = 0; i < n; i++)
            u64map_del(&ss->reclaims, ids[i], NULL);
        if (n < 256)
            break;
    }
    /* operators whose transport made no progress: a backlog that shrank
     * since the last sweep is progress (a slow but reading operator) */
    for (struct sess *s = ss->all, *next; s; s = next) {
        next = s->all_next;
        if (s->closing || !s->stalled_since)
            continue;
        size_t cur = bf_net_call_outbox_bytes(s->call);
        if (cur < s->stall_net_bytes)
            s->stalled_since = mono;
        s->stall_net_bytes = cur;
        flush(s);
        if (s->stalled_since && mono - s->stalled_since > SS_STALL_NS)
            slow_close(s, "no progress on the stream");
    }
}

void bf_session_close_all(struct ss *ss)
{
    for (struct sess *s = ss->all; s; s = s->all_next)
        if (!s->closing)
            sess_close(s, BF_NET_UNAVAILABLE, "shard stopping");
}
