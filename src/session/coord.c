/*
 * coord.c — the coordinator client (reference/shard.md §4.7, seed 000 §6,
 * wire.md §6), the coordinator-term high-water mark, and the transport of
 * coordinator instructions to the cycle (ADR-0055, docs/adr0055.md).
 *
 * Design notes
 *   - Static stability: nothing in the appliance waits on the coordinator.
 *     The client runs on the session's loop, off every hot path: one unary
 *     ReportShard at start and then every --coordinator-heartbeat-interval,
 *     never two in flight, each with a deadline. A failure is counted,
 *     logged (warn) and retried on the next tick; the acks it carried are
 *     put back in front of the pending list. Operators, rollups and the
 *     cycle never notice.
 *   - The term high-water mark lives in LMDB under --data-dir (key
 *     "coordinator_term", decimal text, next to the supervisor's "epoch").
 *     The session opens its own environment after fork (the supervisor
 *     closed its one before forking) and writes only when the mark rises.
 *     It is loaded at start, so Acknowledgement.coordinator_term is right
 *     even before the coordinator is reached, and after a restart.
 *   - The report: shard_id, cycle (the client's own counter from 1),
 *     timestamp, shard_epoch, shard_address (--advertise-addr, else
 *     --listen), the summary and shortfall ledger from the cycle's last
 *     published result (copied under its publish_seq protocol; all zero
 *     before the first cycle; each shortfall's topology_constrained says
 *     whether its profile has a Same requirement), and every pending ack.
 *     The summary carries this project's free_counts extension (issue 17):
 *     Idle, Speculative and bound machines per (instance type, zone), from
 *     the same counts.
 *   - Several coordinator replicas (issue 17): --coordinator-addr may list
 *     up to COORD_ADDRS_MAX comma-separated addresses. Only the leader
 *     answers ReportShard; a replica that answers FAILED_PRECONDITION ("not
 *     leader") or cannot be reached (UNAVAILABLE, DEADLINE_EXCEEDED) makes
 *     the next report go to the next address (a new client), so the shard
 *     finds a new leader within one heartbeat per replica.
 *   - Instructions: a reply whose term is below the mark is ignored whole
 *     (and a higher term raises the mark first), and counted
 *     (bigfleet_shard_coordinator_stale_replies_total and
 *     _stale_reply_instructions_total: a deposed leader's answers never reach
 *     the cycle, so they are not in _instructions_total). Every instruction with a
 *     non-empty id is forwarded, packed, to the cycle on ring COORD_IN
 *     with the mark; the cycle owns the partition's state and the dedup set
 *     (LMDB) and answers each one with a packed InstructAck on ring
 *     COORD_OUT, which waits here for the next report. An instruction
 *     already forwarded is not forwarded again for COORD_RETRY_NS (the
 *     coordinator redelivers it on every reply until it is acked); after
 *     that a redelivery is forwarded again, which the cycle answers from
 *     its dedup set when it had applied it. The in-flight table is bounded
 *     (COORD_INFLIGHT_MAX): past it, instructions wait for a redelivery.
 */
#include <errno.h>
#include <inttypes.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/log.h"
#include "bigfleet/ownership.h"
#include "bigfleet/pbdecode.h"
#include "bigfleet/util.h"
#include "bigfleet/v1alpha1/coordinator.pb-c.h"
#include "session_internal.h"

#define ACKS_MAX           4096u
#define COORD_INFLIGHT_MAX 4096u
#define COORD_RETRY_NS     (30LL * BF_NS_PER_SEC)  /* re-forward a redelivered instruction */
#define COORD_FORGET_NS    (600LL * BF_NS_PER_SEC) /* drop in-flight entries never answered */
#define COORD_ADDRS_MAX    8u

/* An ack waiting for the next report: a packed InstructAck. */
struct ack {
    uint8_t *buf;
    size_t len;
};

struct coord {
    struct ss *ss;
    struct bf_net_client *cl;
    /* the replicas of --coordinator-addr; cl talks to addrs[cur] */
    char addrs[COORD_ADDRS_MAX][BF_ADDR_MAX];
    uint32_t n_addrs, cur;
    bool rotate; /* the last report failed as a non-leader would: next address */
    struct bf_net_timer *timer;
    bool inflight;
    int64_t sent_ns; /* monotonic: when the ReportShard in flight was sent */
    int64_t cycle;
    MDB_env *env;
    MDB_dbi dbi;
    /* acks waiting for the next report; `sent` of them are in flight */
    struct ack *acks;
    uint32_t n_acks, sent;
    /* instructions forwarded to the cycle and not answered yet:
     * hash of the id -> mono ns of the forward */
    struct u64map fwd;
    uint64_t forwarded, refused;
    /* last good cycle result (summary and shortfalls) */
    struct bf_cycle_result *res;
    bool have_res;
};

int64_t bf_coord_term(const struct ss *ss)
{
    return BF_STAT_GET(ss->shm->st->session.coordinator_term);
}

/* ------------------------------------------------------------ LMDB term */

static const char TERM_KEY[] = "coordinator_term";

static int term_open(struct coord *c)
{
    const char *dir = c->ss->cfg->data_dir;
    char err[256];
    int rc = bf_lmdb_open(dir, &c->env, err, sizeof err);
    if (rc) {
        BF_ERROR("cannot open the LMDB state for the coordinator term (kept in memory only)",
                 "data_dir=%s error=\"%s\"", dir, err);
        return rc;
    }
    MDB_txn *txn;
    if ((rc = mdb_txn_begin(c->env, NULL, MDB_RDONLY, &txn)) != 0)
        goto fail;
    if ((rc = mdb_dbi_open(txn, NULL, 0, &c->dbi)) != 0) {
        mdb_txn_abort(txn);
        goto fail;
    }
    MDB_val k = {sizeof TERM_KEY - 1, (void *)TERM_KEY}, v;
    int64_t term = 0;
    if (mdb_get(txn, c->dbi, &k, &v) == 0 && v.mv_size > 0 && v.mv_size < 32) {
        char buf[32];
        memcpy(buf, v.mv_data, v.mv_size);
        buf[v.mv_size] = 0;
        char *end;
        long long t = strtoll(buf, &end, 10);
        if (*end || t < 0)
            BF_ERROR("corrupt coordinator term in LMDB; starting from 0", "value=\"%s\"", buf);
        else
            term = t;
    }
    mdb_txn_commit(txn);
    BF_STAT_SET(c->ss->shm->st->session.coordinator_term, term);
    return 0;
fail:
    BF_ERROR("cannot open the LMDB state for the coordinator term (kept in memory only)",
             "data_dir=%s error=\"%s\"", dir, mdb_strerror(rc));
    if (c->env) {
        mdb_env_close(c->env);
        c->env = NULL;
    }
    return -EIO;
}

static void term_raise(struct coord *c, int64_t term)
{
    BF_STAT_SET(c->ss->shm->st->session.coordinator_term, term);
    if (!c->env)
        return;
    MDB_txn *txn;
    char val[32];
    int n = snprintf(val, sizeof val, "%" PRId64, term);
    MDB_val k = {sizeof TERM_KEY - 1, (void *)TERM_KEY}, v = {(size_t)n, val};
    int rc = mdb_txn_begin(c->env, NULL, 0, &txn);
    if (rc == 0 && (rc = mdb_put(txn, c->dbi, &k, &v, 0)) == 0)
        rc = mdb_txn_commit(txn);
    else if (rc == 0)
        mdb_txn_abort(txn);
    if (rc)
        BF_ERROR("cannot persist the coordinator term", "term=%" PRId64 " error=\"%s\"", term,
                 mdb_strerror(rc));
}

/* ------------------------------------------------------------ acks */

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ULL;
    return h ? h : 1;
}

static void ack_free(struct ack *a)
{
    free(a->buf);
    a->buf = NULL;
}

/* Queues a packed InstructAck (copied) for the next report. */
static void ack_push_packed(struct coord *c, const uint8_t *p, size_t len)
{
    if (c->n_acks >= ACKS_MAX) {
        BF_WARN("coordinator instruction acks over their bound; dropping the oldest", "bound=%u",
                ACKS_MAX);
        ack_free(&c->acks[0]);
        memmove(c->acks, c->acks + 1, (c->n_acks - 1) * sizeof *c->acks);
        c->n_acks--;
        if (c->sent)
            c->sent--;
    }
    uint8_t *b = malloc(len ? len : 1);
    if (!b)
        return; /* the coordinator redelivers; the cycle re-acks from its dedup set */
    memcpy(b, p, len);
    c->acks[c->n_acks++] = (struct ack){b, len};
}

static void ack_push(struct coord *c, const char *id, int outcome, const char *reason)
{
    Bigfleet__V1alpha1__InstructAck a = BIGFLEET__V1ALPHA1__INSTRUCT_ACK__INIT;
    a.instruction_id = (char *)id;
    a.outcome = outcome;
    a.reason = (char *)(reason ? reason : "");
    size_t n = bigfleet__v1alpha1__instruct_ack__get_packed_size(&a);
    uint8_t *b = malloc(n ? n : 1);
    if (!b)
        return;
    bigfleet__v1alpha1__instruct_ack__pack(&a, b);
    ack_push_packed(c, b, n);
    free(b);
}

/* ------------------------------------------------------------ report */

static bool read_result(struct coord *c)
{
    return bf_result_read(c->ss->shm, c->res, NULL) == 0 && c->res->cycle > 0;
}

static int cmp_shortfall(const void *a, const void *b)
{
    const struct bf_shortfall_row *x = *(const struct bf_shortfall_row *const *)a;
    const struct bf_shortfall_row *y = *(const struct bf_shortfall_row *const *)b;
    if (x->priority != y->priority)
        return x->priority > y->priority ? -1 : 1;
    return x->age_cycles > y->age_cycles ? -1 : x->age_cycles < y->age_cycles;
}

static void on_reply(void *arg, int code, const char *message, const uint8_t *resp, size_t len);

static void send_report(struct coord *c)
{
    struct ss *ss = c->ss;
    if (c->inflight || !c->cl)
        return;
    struct bf_shm *shm = ss->shm;
    /* ----- summary */
    struct bf_cycle_result *r = c->res;
    bool have = read_result(c);
    if (have)
        c->have_res = true;
    else if (!c->have_res)
        memset(r, 0, sizeof *r);
    Bigfleet__V1alpha1__ShardSummary sum = BIGFLEET__V1ALPHA1__SHARD_SUMMARY__INIT;
    Bigfleet__V1alpha1__ShardSummary__PerInstanceTypeCountsEntry te[BF_MAX_TYPES],
        *tp[BF_MAX_TYPES];
    Bigfleet__V1alpha1__ShardSummary__PerZoneCountsEntry ze[BF_MAX_ZONES], *zp[BF_MAX_ZONES];
    const struct bf_inv_counts *k = &r->counts;
    sum.total_machines = (int32_t)k->total_machines;
    sum.free_machines = (int32_t)(k->by_state[BF_STATE_IDLE] + k->by_state[BF_STATE_SPECULATIVE]);
    size_t nt = 0, nz = 0;
    for (uint32_t t = 1; t < BF_MAX_TYPES; t++) {
        uint64_t n = 0;
        for (int s = 0; s < BF_STATE_COUNT; s++)
            for (int z = 0; z < BF_MAX_ZONES; z++)
                n += k->by_state_type_zone[s][t][z];
        const char *name = bf_type_name(shm, t);
        if (!n || !name[0])
            continue;
        bigfleet__v1alpha1__shard_summary__per_instance_type_counts_entry__init(&te[nt]);
        te[nt].key = (char *)name;
        te[nt].value = (int32_t)n;
        tp[nt] = &te[nt];
        nt++;
    }
    for (uint32_t z = 1; z < BF_MAX_ZONES; z++) {
        uint64_t n = 0;
        for (int s = 0; s < BF_STATE_COUNT; s++)
            for (int t = 0; t < BF_MAX_TYPES; t++)
                n += k->by_state_type_zone[s][t][z];
        const char *name = bf_zone_name(shm, z);
        if (!n || !name[0])
            continue;
        bigfleet__v1alpha1__shard_summary__per_zone_counts_entry__init(&ze[nz]);
        ze[nz].key = (char *)name;
        ze[nz].value = (int32_t)n;
        zp[nz] = &ze[nz];
        nz++;
    }
    sum.n_per_instance_type_counts = nt;
    sum.per_instance_type_counts = tp;
    sum.n_per_zone_counts = nz;
    sum.per_zone_counts = zp;
    /* extension field 7 (issue 17): per (type, zone) Idle / Speculative / bound */
    Bigfleet__V1alpha1__FreeCount *fc = calloc((size_t)BF_MAX_TYPES * BF_MAX_ZONES, sizeof *fc);
    Bigfleet__V1alpha1__FreeCount **fcp = calloc((size_t)BF_MAX_TYPES * BF_MAX_ZONES, sizeof *fcp);
    size_t nf = 0;
    for (uint32_t t = 1; fc && fcp && t < BF_MAX_TYPES; t++) {
        const char *tname = bf_type_name(shm, t);
        if (!tname[0])
            continue;
        for (uint32_t z = 0; z < BF_MAX_ZONES; z++) {
            uint32_t idle = k->by_state_type_zone[BF_STATE_IDLE][t][z];
            uint32_t spec = k->by_state_type_zone[BF_STATE_SPECULATIVE][t][z];
            uint32_t bound = k->by_state_type_zone[BF_STATE_CONFIGURING][t][z] +
                             k->by_state_type_zone[BF_STATE_CONFIGURED][t][z] +
                             k->by_state_type_zone[BF_STATE_DRAINING][t][z];
            if (!idle && !spec && !bound)
                continue;
            bigfleet__v1alpha1__free_count__init(&fc[nf]);
            fc[nf].instance_type = (char *)tname;
            fc[nf].zone = (char *)(z ? bf_zone_name(shm, z) : "");
            fc[nf].idle = (int32_t)idle;
            fc[nf].speculative = (int32_t)spec;
            fc[nf].bound = (int32_t)bound;
            fcp[nf] = &fc[nf];
            nf++;
        }
    }
    sum.n_free_counts = nf;
    sum.free_counts = fcp;
    /* ----- shortfalls (top 100, priority desc then age desc) */
    uint32_t ns = r->n_shortfalls > BF_SHORTFALL_MAX ? BF_SHORTFALL_MAX : r->n_shortfalls;
    const struct bf_shortfall_row *order[BF_SHORTFALL_MAX];
    for (uint32_t i = 0; i < ns; i++)
        order[i] = &r->shortfalls[i];
    qsort(order, ns, sizeof *order, cmp_shortfall);
    Bigfleet__V1alpha1__Shortfall sf[BF_SHORTFALL_MAX], *sfp[BF_SHORTFALL_MAX];
    Bigfleet__V1alpha1__Resources def[BF_SHORTFALL_MAX];
    Bigfleet__V1alpha1__Resources__ResourcesEntry de[BF_SHORTFALL_MAX][BF_MAX_DIMS],
        *dp[BF_SHORTFALL_MAX][BF_MAX_DIMS];
    char qbuf[BF_SHORTFALL_MAX][BF_MAX_DIMS][32];
    Bigfleet__V1alpha1__NodeSelectorRequirement *reqs[BF_SHORTFALL_MAX];
    Bigfleet__V1alpha1__NodeSelectorRequirement **reqp[BF_SHORTFALL_MAX];
    for (uint32_t i = 0; i < ns; i++) {
        const struct bf_shortfall_row *row = order[i];
        bigfleet__v1alpha1__shortfall__init(&sf[i]);
        reqs[i] = NULL;
        reqp[i] = NULL;
        const struct bf_nprofile *np = bf_nprofile_get(ss->cache, shm, row->need_profile_ref);
        if (np && np->p.n_reqs) {
            reqs[i] = calloc(np->p.n_reqs, sizeof *reqs[i]);
            reqp[i] = calloc(np->p.n_reqs, sizeof *reqp[i]);
            if (reqs[i] && reqp[i]) {
                for (uint32_t j = 0; j < np->p.n_reqs; j++) {
                    bigfleet__v1alpha1__node_selector_requirement__init(&reqs[i][j]);
                    reqs[i][j].key = (char *)np->p.reqs[j].key;
                    reqs[i][j].operator_ = np->p.reqs[j].op;
                    reqs[i][j].n_values = np->p.reqs[j].n_values;
                    reqs[i][j].values = (char **)np->p.reqs[j].values;
                    reqp[i][j] = &reqs[i][j];
                }
                sf[i].n_requirements = np->p.n_reqs;
                sf[i].requirements = reqp[i];
            }
            /* extension field 7 (ADR-0055 §2): served only within the shard */
            sf[i].topology_constrained = bf_profile_same_index(&np->p) >= 0;
        }
        struct bf_kv kv[BF_MAX_DIMS];
        bf_vec dv;
        memcpy(dv.v, row->deficit, sizeof dv.v);
        uint32_t nd = bf_vec_to_kv(shm, &dv, kv, qbuf[i]);
        bigfleet__v1alpha1__resources__init(&def[i]);
        for (uint32_t d = 0; d < nd; d++) {
            bigfleet__v1alpha1__resources__resources_entry__init(&de[i][d]);
            de[i][d].key = (char *)kv[d].key;
            de[i][d].value = (char *)kv[d].value;
            dp[i][d] = &de[i][d];
        }
        def[i].n_resources = nd;
        def[i].resources = dp[i];
        sf[i].deficit = &def[i];
        sf[i].priority = row->priority;
        sf[i].age_cycles = row->age_cycles;
        sf[i].interruption_penalty_bucket = row->ipb;
        sfp[i] = &sf[i];
    }
    /* ----- acks (stored packed; unpacked for this report only) */
    Bigfleet__V1alpha1__InstructAck **iap = calloc(c->n_acks + 1, sizeof *iap);
    uint32_t na = 0;
    for (uint32_t i = 0; iap && i < c->n_acks; i++) {
        iap[na] = bigfleet__v1alpha1__instruct_ack__unpack(NULL, c->acks[i].len, c->acks[i].buf);
        if (iap[na])
            na++;
    }
    Bigfleet__V1alpha1__ShardReport rep = BIGFLEET__V1ALPHA1__SHARD_REPORT__INIT;
    rep.shard_id = (char *)ss->cfg->id;
    rep.cycle = ++c->cycle;
    rep.timestamp_unix_nanos = bf_now_ns();
    rep.shard_epoch = shm->inv_hdr->epoch;
    rep.summary = &sum;
    rep.n_shortfalls = ns;
    rep.shortfalls = sfp;
    rep.n_instruction_acks = na;
    rep.instruction_acks = iap;
    rep.shard_address =
        (char *)(ss->cfg->advertise_addr[0] ? ss->cfg->advertise_addr : ss->cfg->listen);
    int64_t timeout = ss->cfg->coordinator_heartbeat_ns;
    if (timeout > 10 * BF_NS_PER_SEC)
        timeout = 10 * BF_NS_PER_SEC;
    c->sent_ns = bf_mono_ns();
    struct bf_net_stream *st = bf_net_client_unary_pb(
        c->cl, "/bigfleet.v1alpha1.Coordinator/ReportShard", &rep.base, timeout, on_reply, c);
    if (st) {
        c->inflight = true;
        c->sent = iap ? c->n_acks : 0;
    } else {
        BF_STAT_INC(shm->st->session.coordinator_errors);
        BF_WARN("ReportShard not sent", "error=\"%s\"", strerror(errno));
    }
    for (uint32_t i = 0; i < ns; i++) {
        free(reqs[i]);
        free(reqp[i]);
    }
    for (uint32_t i = 0; i < na; i++)
        bigfleet__v1alpha1__instruct_ack__free_unpacked(iap[i], NULL);
    free(iap);
    free(fc);
    free(fcp);
}

/* An answer of the cycle (ring COORD_OUT): queued for the next report. */
static void coord_take_ack(struct coord *c, const uint8_t *p, size_t len)
{
    if (!c->acks)
        return; /* no coordinator client: nobody to tell */
    Bigfleet__V1alpha1__InstructAck *a = bigfleet__v1alpha1__instruct_ack__unpack(NULL, len, p);
    if (!a) {
        BF_ERROR("undecodable instruction ack from the cycle dropped", "bytes=%zu", len);
        return;
    }
    if (a->instruction_id && a->instruction_id[0])
        u64map_del(&c->fwd, hash_str(a->instruction_id), NULL);
    bigfleet__v1alpha1__instruct_ack__free_unpacked(a, NULL);
    ack_push_packed(c, p, len);
}

/* Forwards one instruction to the cycle (ring COORD_IN). true when pushed. */
static bool forward(struct coord *c, const Bigfleet__V1alpha1__CoordinatorInstruction *in,
                    int64_t hwm, int64_t now_mono)
{
    const char *id = in->instruction_id;
    uint64_t h = hash_str(id);
    const uint64_t *at = u64map_ref(&c->fwd, h);
    if (at && now_mono - (int64_t)*at < COORD_RETRY_NS)
        return false; /* the cycle has it; its answer comes on COORD_OUT */
    if (c->fwd.n >= COORD_INFLIGHT_MAX && !at) {
        c->refused++;
        return false; /* redelivered on the next reply */
    }
    size_t n = bigfleet__v1alpha1__coordinator_instruction__get_packed_size(in);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf)
        return false;
    bigfleet__v1alpha1__coordinator_instruction__pack(in, buf);
    struct bf_coord_in_hdr hdr = {.hwm = hwm, .received_ns = bf_now_ns()};
    int rc = bf_ring_push_bytes(c->ss->shm, BF_RING_COORD_IN, &hdr, sizeof hdr, buf, n);
    free(buf);
    if (rc == -E2BIG) {
        char why[96];
        snprintf(why, sizeof why, "instruction too large (%zu bytes)", n);
        ack_push(c, id, BIGFLEET__V1ALPHA1__INSTRUCT_ACK__OUTCOME__OUTCOME_REJECTED_INVALID, why);
        BF_WARN("coordinator instruction rejected", "instruction_id=%.128s reason=\"%s\"", id, why);
        return false;
    }
    if (rc) {
        c->refused++;
        return false; /* ring full: redelivered on the next reply */
    }
    u64map_put(&c->fwd, h, (uint64_t)now_mono);
    c->forwarded++;
    return true;
}

void bf_coord_drain_acks(struct ss *ss)
{
    struct coord *c = ss->coord;
    uint8_t buf[64 << 10];
    for (unsigned n = 0; n < SS_RING_BUDGET; n++) {
        size_t len = 0;
        int rc = bf_ring_pop_bytes(ss->shm, BF_RING_COORD_OUT, buf, sizeof buf, &len);
        if (rc == -EAGAIN)
            return;
        if (rc == -EMSGSIZE) {
            uint8_t *big = malloc(len);
            if (!big)
                return; /* left on the ring: the next drain retries */
            rc = bf_ring_pop_bytes(ss->shm, BF_RING_COORD_OUT, big, len, &len);
            if (rc == 0 && c)
                coord_take_ack(c, big, len);
            free(big);
            continue;
        }
        if (rc == 0 && c)
            coord_take_ack(c, buf, len);
    }
}

static void on_reply(void *arg, int code, const char *message, const uint8_t *resp, size_t len)
{
    struct coord *c = arg;
    struct bf_stats_session *st = &c->ss->shm->st->session;
    c->inflight = false;
    bf_hist_observe(
        &c->ss->shm->st->host.coordinator_rpc[0][code >= 0 && code < BF_RPC_CODES ? code : 2],
        0.001, 2, 16, bf_mono_ns() - c->sent_ns);
    if (code != BF_NET_OK) {
        BF_STAT_INC(st->coordinator_errors);
        BF_WARN("ReportShard failed", "code=%s message=\"%s\" addr=%s", bf_net_code_name(code),
                message ? message : "", c->addrs[c->cur]);
        c->sent = 0; /* the acks stay queued, in front */
        c->rotate =
            c->n_addrs > 1 && (code == BF_NET_FAILED_PRECONDITION || code == BF_NET_UNAVAILABLE ||
                               code == BF_NET_DEADLINE_EXCEEDED);
        return;
    }
    /* the acks that went out are delivered */
    for (uint32_t i = 0; i < c->sent; i++)
        ack_free(&c->acks[i]);
    memmove(c->acks, c->acks + c->sent, (c->n_acks - c->sent) * sizeof *c->acks);
    c->n_acks -= c->sent;
    c->sent = 0;
    BF_STAT_INC(st->coordinator_reports);
    Bigfleet__V1alpha1__ReportAck *ack = NULL;
    if (bf_pb_unpack(&bigfleet__v1alpha1__report_ack__descriptor, resp, len,
                     (ProtobufCMessage **)&ack, NULL) != 0) {
        BF_STAT_INC(st->coordinator_errors);
        BF_WARN("undecodable ReportAck ignored", "bytes=%zu", len);
        return;
    }
    int64_t hwm = bf_coord_term(c->ss);
    if (ack->coordinator_term > 0) {
        if (ack->coordinator_term < hwm) {
            BF_STAT_INC(st->coordinator_stale_replies);
            BF_STAT_ADD(st->coordinator_stale_reply_instructions, ack->n_instructions);
            BF_WARN("ReportAck from a stale coordinator term; its instructions are skipped",
                    "term=%" PRId64 " high_water_mark=%" PRId64 " instructions=%zu",
                    ack->coordinator_term, hwm, ack->n_instructions);
            bigfleet__v1alpha1__report_ack__free_unpacked(ack, NULL);
            return;
        }
        if (ack->coordinator_term > hwm) {
            BF_INFO("coordinator term raised", "term=%" PRId64 " previous=%" PRId64,
                    ack->coordinator_term, hwm);
            hwm = ack->coordinator_term;
            term_raise(c, hwm);
        }
    }
    int64_t now = bf_mono_ns();
    bool pushed = false;
    for (size_t i = 0; i < ack->n_instructions; i++) {
        const Bigfleet__V1alpha1__CoordinatorInstruction *in = ack->instructions[i];
        if (in->instruction_id && in->instruction_id[0])
            pushed |= forward(c, in, hwm, now);
    }
    if (pushed)
        bf_wake(c->ss->shm, BF_ROLE_CYCLE);
    bigfleet__v1alpha1__report_ack__free_unpacked(ack, NULL);
}

/* Drops in-flight entries the cycle never answered (it restarted, or the
 * coordinator stopped redelivering): the next redelivery is forwarded. */
static void forget_stale(struct coord *c, int64_t now)
{
    for (uint32_t i = 0; c->fwd.n && i <= c->fwd.mask;) {
        if (c->fwd.slots[i].h && now - (int64_t)c->fwd.slots[i].val > COORD_FORGET_NS) {
            u64map_del(&c->fwd, c->fwd.slots[i].key, NULL);
            continue; /* backward shift may have moved a later entry here */
        }
        i++;
    }
}

/* A client for addrs[cur] (the previous one, if any, is freed). */
static int coord_connect(struct coord *c)
{
    struct ss *ss = c->ss;
    struct bf_net_client_opts o = {.addr = c->addrs[c->cur]};
    if (bf_config_tls(ss->cfg)) {
        o.tls.cert_file = ss->cfg->tls_cert;
        o.tls.key_file = ss->cfg->tls_key;
        o.tls.ca_file = ss->cfg->tls_ca;
    }
    if (c->cl)
        bf_net_client_free(c->cl);
    c->cl = NULL;
    return bf_net_client_new(ss->loop, &o, &c->cl);
}

static void on_timer(struct bf_net_timer *t, void *arg)
{
    (void)t;
    struct coord *c = arg;
    forget_stale(c, bf_mono_ns());
    if (c->rotate && !c->inflight) {
        c->rotate = false;
        c->cur = (c->cur + 1) % c->n_addrs;
        int rc = coord_connect(c);
        BF_INFO("trying the next coordinator replica", "addr=%s", c->addrs[c->cur]);
        if (rc) {
            BF_ERROR("cannot create the coordinator client", "addr=%s error=\"%s\"",
                     c->addrs[c->cur], strerror(-rc));
            c->rotate = true;
            return;
        }
    }
    send_report(c);
}

/* Splits --coordinator-addr at commas (spaces around them ignored). */
static int parse_addrs(struct coord *c, const char *list)
{
    const char *p = list;
    while (*p) {
        while (*p == ' ' || *p == ',')
            p++;
        if (!*p)
            break;
        const char *e = p;
        while (*e && *e != ',')
            e++;
        size_t n = (size_t)(e - p);
        while (n && p[n - 1] == ' ')
            n--;
        if (c->n_addrs == COORD_ADDRS_MAX || n >= BF_ADDR_MAX)
            return -EINVAL;
        memcpy(c->addrs[c->n_addrs], p, n);
        c->addrs[c->n_addrs][n] = 0;
        if (bf_net_addr_check(c->addrs[c->n_addrs]))
            return -EINVAL;
        c->n_addrs++;
        p = e;
    }
    return c->n_addrs ? 0 : -EINVAL;
}

/* ------------------------------------------------------------ lifecycle */

int bf_coord_start(struct ss *ss)
{
    struct coord *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    c->ss = ss;
    ss->coord = c;
    term_open(c);
    if (!ss->cfg->coordinator_addr[0])
        return 0; /* single-shard / dev: no coordinator client at all */
    c->acks = calloc(ACKS_MAX, sizeof *c->acks);
    c->res = malloc(sizeof *c->res);
    if (!c->acks || !c->res || u64map_reserve(&c->fwd, 1024))
        return -ENOMEM;
    int rc = parse_addrs(c, ss->cfg->coordinator_addr);
    if (rc) {
        BF_ERROR("bad --coordinator-addr (up to 8 comma-separated host:port); the shard runs "
                 "without a coordinator",
                 "addr=\"%s\"", ss->cfg->coordinator_addr);
        return rc;
    }
    rc = coord_connect(c);
    if (rc) {
        BF_ERROR("cannot create the coordinator client; the shard runs without it",
                 "addr=%s error=\"%s\"", ss->cfg->coordinator_addr, strerror(-rc));
        return rc;
    }
    c->timer = bf_net_timer_new(ss->loop, on_timer, c);
    if (!c->timer)
        return -ENOMEM;
    bf_net_timer_start(c->timer, 0, ss->cfg->coordinator_heartbeat_ns);
    BF_INFO("coordinator client started", "addr=%s interval_ms=%lld", ss->cfg->coordinator_addr,
            (long long)(ss->cfg->coordinator_heartbeat_ns / BF_NS_PER_MS));
    return 0;
}

void bf_coord_stop(struct ss *ss)
{
    struct coord *c = ss->coord;
    if (!c)
        return;
    ss->coord = NULL;
    bf_net_timer_free(c->timer);
    if (c->cl)
        bf_net_client_free(c->cl); /* an in-flight report completes CANCELLED here */
    for (uint32_t i = 0; c->acks && i < c->n_acks; i++)
        ack_free(&c->acks[i]);
    free(c->acks);
    u64map_free(&c->fwd);
    free(c->res);
    if (c->env)
        mdb_env_close(c->env);
    free(c);
}

uint32_t bf_coord_domains(const struct ss *ss)
{
    return BF_STAT_GET(ss->shm->st->own.n_domains);
}
