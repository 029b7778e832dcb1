/*
 * instructions.c — the coordinator instructions, applied by the cycle
 * (ADR-0055, seeds/002 §5; docs/adr0055.md has every handler's state
 * machine and the wire extension).
 *
 * Design notes
 *   - One record of ring COORD_IN = the session's term high-water mark + a
 *     packed CoordinatorInstruction. Order (the Go shard's): an id already
 *     in the dedup set is re-acked ACCEPTED "duplicate-redelivery" with the
 *     machine ids it echoed the first time; a term below the mark is
 *     REJECTED_STALE; a malformed instruction is REJECTED_INVALID with a
 *     reason; otherwise the handler runs.
 *   - Every handler first decides without writing (all or nothing: any
 *     machine that does not qualify fails the whole instruction with a
 *     reason naming it), then commits its change AND the instruction's
 *     dedup entry (the packed ack) in ONE LMDB write transaction, and only
 *     then changes memory, pushes actions and audit records and answers.
 *     A crash before the commit leaves nothing applied (the coordinator
 *     redelivers); after it, a redelivery is re-acked, never re-applied.
 *   - Races: the cycle is the only process that puts actions in flight,
 *     and it runs these handlers between two cycles, so "not in flight"
 *     checked here stays true until the machine is held (which the engine
 *     honours from this very cycle on).
 *   - Failures are OUTCOME_FAILED with a reason; the state is unchanged and
 *     the coordinator resends (nothing is put in the dedup set).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/log.h"
#include "bigfleet/util.h"
#include "own_internal.h"

static int kind_of(const Instr *in)
{
    switch (in->payload_case) {
    case BIGFLEET__V1ALPHA1__COORDINATOR_INSTRUCTION__PAYLOAD_ASSIGN_DOMAIN:
        return K_ASSIGN;
    case BIGFLEET__V1ALPHA1__COORDINATOR_INSTRUCTION__PAYLOAD_UNASSIGN_DOMAIN:
        return K_UNASSIGN;
    case BIGFLEET__V1ALPHA1__COORDINATOR_INSTRUCTION__PAYLOAD_REASSIGN_SPECULATIVE:
        return K_REASSIGN;
    case BIGFLEET__V1ALPHA1__COORDINATOR_INSTRUCTION__PAYLOAD_CROSS_SHARD_DRAIN:
        return K_DRAIN;
    case BIGFLEET__V1ALPHA1__COORDINATOR_INSTRUCTION__PAYLOAD_TRANSFER_OWNERSHIP:
        return K_TRANSFER;
    default:
        return K_OTHER;
    }
}

static const char *const kind_names[] = {"unknown",         "AssignDomain",
                                         "UnassignDomain",  "ReassignSpeculative",
                                         "CrossShardDrain", "TransferOwnership"};

const char *bf_own_kind_name(int kind)
{
    return kind >= 0 && kind <= K_TRANSFER ? kind_names[kind] : "unknown";
}

void bf_own_set_reason(struct reply *r, int outcome, const char *fmt, ...)
{
    r->outcome = outcome;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->reason, sizeof r->reason, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------ acks */

static uint8_t *pack_ack(const char *id, int outcome, const char *reason, char **ids, size_t n,
                         size_t *len)
{
    Bigfleet__V1alpha1__InstructAck a = BIGFLEET__V1ALPHA1__INSTRUCT_ACK__INIT;
    a.instruction_id = (char *)id;
    a.outcome = outcome;
    a.reason = (char *)(reason ? reason : "");
    a.n_machine_ids = n;
    a.machine_ids = ids;
    *len = bigfleet__v1alpha1__instruct_ack__get_packed_size(&a);
    uint8_t *b = malloc(*len ? *len : 1);
    if (b)
        bigfleet__v1alpha1__instruct_ack__pack(&a, b);
    return b;
}

static void count(struct bf_cycle *c, int kind, int outcome)
{
    if (outcome < 0 || outcome >= BF_OWN_OUTCOMES)
        outcome = 0;
    BF_STAT_INC(c->shm->st->own.instructions[kind][outcome]);
}

static void send_ack_bytes(struct bf_cycle *c, const uint8_t *b, size_t n)
{
    if (bf_ring_push_bytes(c->shm, BF_RING_COORD_OUT, b, n, NULL, 0) == 0)
        bf_wake(c->shm, BF_ROLE_SESSION);
    else
        BF_WARN("instruction ack not delivered to the session (ring full); the coordinator "
                "redelivers and the dedup set answers",
                "bytes=%zu", n);
}

/* Answers (no state change). */
static void answer(struct bf_cycle *c, const Instr *in, int kind, const struct reply *r)
{
    size_t n;
    uint8_t *b = pack_ack(in->instruction_id, r->outcome, r->reason, NULL, 0, &n);
    if (b)
        send_ack_bytes(c, b, n);
    free(b);
    count(c, kind, r->outcome);
    if (r->outcome != OUT_ACCEPTED)
        BF_WARN("coordinator instruction not applied",
                "instruction_id=%.128s kind=%s outcome=%d "
                "reason=\"%s\"",
                in->instruction_id, kind_names[kind], r->outcome, r->reason);
}

void bf_own_fail_instruction(struct bf_cycle *c, const uint8_t *rec, size_t len, const char *why)
{
    if (len < sizeof(struct bf_coord_in_hdr))
        return;
    Instr *in = bigfleet__v1alpha1__coordinator_instruction__unpack(
        NULL, len - sizeof(struct bf_coord_in_hdr), rec + sizeof(struct bf_coord_in_hdr));
    if (!in)
        return;
    struct reply r;
    bf_own_set_reason(&r, OUT_FAILED, "%s", why);
    answer(c, in, kind_of(in), &r);
    bigfleet__v1alpha1__coordinator_instruction__free_unpacked(in, NULL);
}

/* ------------------------------------------------------------ the dedup set */

/* Puts the accepted instruction's ack into the dedup set (FIFO-bounded),
 * inside the caller's transaction. 0 or an LMDB code. */
static int done_put(struct bf_cycle *c, MDB_txn *txn, const char *id, const uint8_t *ack, size_t n)
{
    struct bf_own_store *st = c->own->st;
    MDB_val mk = {8, (void *)"done_seq"}, mv;
    uint64_t seq = 1;
    if (mdb_get(txn, st->dbi[BF_OWN_DB_META], &mk, &mv) == 0 && mv.mv_size == sizeof seq)
        memcpy(&seq, mv.mv_data, sizeof seq);
    uint64_t next = seq + 1;
    mv.mv_size = sizeof next;
    mv.mv_data = &next;
    int rc = mdb_put(txn, st->dbi[BF_OWN_DB_META], &mk, &mv, 0);
    if (rc)
        return rc;
    uint8_t *val = malloc(8 + n);
    if (!val)
        return ENOMEM;
    memcpy(val, &seq, 8);
    memcpy(val + 8, ack, n);
    MDB_val k = {strlen(id), (void *)id}, v = {8 + n, val};
    rc = mdb_put(txn, st->dbi[BF_OWN_DB_DONE], &k, &v, 0);
    free(val);
    if (rc)
        return rc;
    uint8_t be[8];
    for (int i = 0; i < 8; i++)
        be[i] = (uint8_t)(seq >> (56 - 8 * i));
    MDB_val sk = {8, be};
    if ((rc = mdb_put(txn, st->dbi[BF_OWN_DB_DONESEQ], &sk, &k, 0)) != 0)
        return rc;
    /* evict the oldest beyond the bound */
    MDB_stat ms;
    if ((rc = mdb_stat(txn, st->dbi[BF_OWN_DB_DONESEQ], &ms)) != 0)
        return rc;
    size_t bound = c->o.own_done_max ? c->o.own_done_max : BF_OWN_DONE_MAX;
    if (ms.ms_entries <= bound)
        return 0;
    MDB_cursor *cur;
    if ((rc = mdb_cursor_open(txn, st->dbi[BF_OWN_DB_DONESEQ], &cur)) != 0)
        return rc;
    for (size_t extra = ms.ms_entries - bound; extra > 0 && rc == 0; extra--) {
        MDB_val ok, ov;
        if ((rc = mdb_cursor_get(cur, &ok, &ov, MDB_FIRST)) != 0)
            break;
        MDB_val dk = ov;
        int d = mdb_del(txn, st->dbi[BF_OWN_DB_DONE], &dk, NULL);
        if (d && d != MDB_NOTFOUND)
            rc = d;
        else
            rc = mdb_cursor_del(cur, 0);
    }
    mdb_cursor_close(cur);
    return rc;
}

/* Re-acks an instruction found in the dedup set: true when it was there. */
static bool redelivered(struct bf_cycle *c, const Instr *in, int kind)
{
    struct bf_own_store *st = c->own->st;
    MDB_txn *txn;
    if (mdb_txn_begin(st->env, NULL, MDB_RDONLY, &txn) != 0)
        return false;
    MDB_val k = {strlen(in->instruction_id), in->instruction_id}, v;
    bool found = false;
    if (mdb_get(txn, st->dbi[BF_OWN_DB_DONE], &k, &v) == 0 && v.mv_size >= 8) {
        Bigfleet__V1alpha1__InstructAck *a = bigfleet__v1alpha1__instruct_ack__unpack(
            NULL, v.mv_size - 8, (const uint8_t *)v.mv_data + 8);
        if (a) {
            size_t n;
            uint8_t *b = pack_ack(in->instruction_id, OUT_ACCEPTED, "duplicate-redelivery",
                                  a->machine_ids, a->n_machine_ids, &n);
            if (b)
                send_ack_bytes(c, b, n);
            free(b);
            bigfleet__v1alpha1__instruct_ack__free_unpacked(a, NULL);
            found = true;
        }
    }
    mdb_txn_abort(txn);
    if (found)
        count(c, kind, OUT_ACCEPTED);
    return found;
}

/*
 * Commits txn with the dedup entry of an ACCEPTED answer echoing ids, then
 * sends the ack. On failure the transaction is aborted, the reply becomes
 * FAILED and false is returned (nothing was applied).
 */
bool bf_own_commit_accept(struct bf_cycle *c, MDB_txn *txn, const Instr *in, int kind,
                          const char *reason, char **ids, size_t n_ids, struct reply *r)
{
    size_t n;
    uint8_t *ack = pack_ack(in->instruction_id, OUT_ACCEPTED, reason, ids, n_ids, &n);
    int rc = ack ? done_put(c, txn, in->instruction_id, ack, n) : ENOMEM;
    if (rc == 0)
        rc = mdb_txn_commit(txn);
    else
        mdb_txn_abort(txn);
    if (rc) {
        free(ack);
        BF_STAT_INC(c->shm->st->own.store_errors);
        bf_own_set_reason(r, OUT_FAILED, "state store: %s", mdb_strerror(rc));
        BF_ERROR("cannot commit a coordinator instruction", "instruction_id=%.128s error=\"%s\"",
                 in->instruction_id, mdb_strerror(rc));
        return false;
    }
    send_ack_bytes(c, ack, n);
    free(ack);
    count(c, kind, OUT_ACCEPTED);
    c->own->publish = true;
    return true;
}

bool bf_own_begin(struct bf_cycle *c, MDB_txn **txn, struct reply *r)
{
    int rc = mdb_txn_begin(c->own->st->env, NULL, 0, txn);
    if (rc) {
        BF_STAT_INC(c->shm->st->own.store_errors);
        bf_own_set_reason(r, OUT_FAILED, "state store: %s", mdb_strerror(rc));
        return false;
    }
    return true;
}

bool bf_own_fail_txn(struct bf_cycle *c, MDB_txn *txn, int rc, struct reply *r)
{
    mdb_txn_abort(txn);
    BF_STAT_INC(c->shm->st->own.store_errors);
    bf_own_set_reason(r, OUT_FAILED, "state store: %s", mdb_strerror(rc));
    return false;
}

/* ------------------------------------------------------------ domains */

static char *domain_key(const char *k, const char *v, size_t *len)
{
    size_t kl = strlen(k), vl = strlen(v);
    char *b = malloc(kl + vl + 1);
    if (!b)
        return NULL;
    memcpy(b, k, kl);
    b[kl] = 0;
    memcpy(b + kl + 1, v, vl);
    *len = kl + 1 + vl;
    return b;
}

static int domain_index(const struct bf_own_view *v, const char *k, const char *val)
{
    for (uint32_t i = 0; i < v->n_domains; i++)
        if (!strcmp(v->domains[i].key, k) && !strcmp(v->domains[i].value, val))
            return (int)i;
    return -1;
}

static bool valid_domain(const char *k, const char *v, struct reply *r)
{
    if (!k || !k[0]) {
        bf_own_set_reason(r, OUT_INVALID, "empty topology_key");
        return false;
    }
    if (strlen(k) > BF_OWN_ID_MAX || strlen(v ? v : "") > BF_OWN_ID_MAX) {
        bf_own_set_reason(r, OUT_INVALID, "topology key or value longer than %d bytes",
                          BF_OWN_ID_MAX);
        return false;
    }
    return true;
}

static void do_assign(struct bf_cycle *c, const Instr *in, struct reply *r)
{
    struct bf_cycle_own *o = c->own;
    const char *k = in->assign_domain->topology_key, *v = in->assign_domain->topology_value;
    if (!v)
        v = "";
    if (!valid_domain(k, v, r))
        return;
    bool have = domain_index(&o->view, k, v) >= 0;
    if (!have && o->view.n_domains >= BF_OWN_DOMAINS_MAX) {
        bf_own_set_reason(r, OUT_FAILED, "domain table full (%d domains)", BF_OWN_DOMAINS_MAX);
        return;
    }
    MDB_txn *txn;
    if (!bf_own_begin(c, &txn, r))
        return;
    uint64_t gen = o->view.generation;
    if (!have) {
        size_t kl;
        char *key = domain_key(k, v, &kl);
        int64_t now = bf_now_ns();
        MDB_val mk = {kl, key}, mv = {sizeof now, &now};
        int rc = key ? mdb_put(txn, o->st->dbi[BF_OWN_DB_DOMAINS], &mk, &mv, 0) : ENOMEM;
        free(key);
        if (rc) {
            bf_own_fail_txn(c, txn, rc, r);
            return;
        }
        /* --ownership=auto: the first domain partitions this shard for good */
        MDB_val lk = {11, (void *)"partitioned"}, lv = {1, (void *)"1"};
        if ((rc = mdb_put(txn, o->st->dbi[BF_OWN_DB_META], &lk, &lv, 0)) != 0) {
            bf_own_fail_txn(c, txn, rc, r);
            return;
        }
        if (!(gen = bf_own_bump_generation(c, txn))) {
            bf_own_fail_txn(c, txn, EIO, r);
            return;
        }
    }
    if (!bf_own_commit_accept(c, txn, in, K_ASSIGN, "", NULL, 0, r))
        return;
    r->outcome = OUT_ACCEPTED;
    if (have)
        return; /* already assigned: nothing changed */
    struct bf_own_domain *nd =
        realloc(o->view.domains, (o->view.n_domains + 1) * sizeof *o->view.domains);
    char *kc = strdup(k), *vc = strdup(v);
    if (!nd || !kc || !vc) {
        free(kc);
        free(vc);
        if (nd)
            o->view.domains = nd;
        /* memory ran out after the commit: reload from the store */
        bf_own_view_load(o->st, c->o.ownership, &o->view);
    } else {
        o->view.domains = nd;
        o->view.domains[o->view.n_domains++] = (struct bf_own_domain){kc, vc};
        o->view.latched = true;
        o->view.all_mode = bf_own_all_mode(o->view.policy, true, o->view.n_domains);
        o->view.generation = gen;
    }
    o->changed = true;
    char d[2 * BF_OWN_ID_MAX + 2];
    snprintf(d, sizeof d, "%s=%s", k, v);
    bf_own_audit(c, BF_OWN_EV_DOMAIN_ASSIGNED, "", in->instruction_id, "", "", d, 0, 0);
    BF_INFO("domain assigned", "domain=\"%s\" instruction_id=%.128s", d, in->instruction_id);
}

static bool bound_state(int st)
{
    return st == BF_STATE_CONFIGURING || st == BF_STATE_CONFIGURED || st == BF_STATE_DRAINING;
}

static void do_unassign(struct bf_cycle *c, const Instr *in, struct reply *r)
{
    struct bf_cycle_own *o = c->own;
    const char *k = in->unassign_domain->topology_key, *v = in->unassign_domain->topology_value;
    if (!v)
        v = "";
    if (!valid_domain(k, v, r))
        return;
    int di = domain_index(&o->view, k, v);
    MDB_txn *txn;
    if (di < 0) { /* not assigned: nothing to release */
        if (bf_own_begin(c, &txn, r) &&
            bf_own_commit_accept(c, txn, in, K_UNASSIGN, "", NULL, 0, r))
            r->outcome = OUT_ACCEPTED;
        return;
    }
    /* all or nothing: every machine the domain's removal would release must be
     * releasable now (unbound, nothing in flight, not reserved) */
    struct bf_own_view after = o->view;
    struct bf_own_domain *rest = malloc((o->view.n_domains ? o->view.n_domains : 1) * sizeof *rest);
    if (!rest) {
        bf_own_set_reason(r, OUT_FAILED, "out of memory");
        return;
    }
    uint32_t nr = 0;
    for (uint32_t i = 0; i < o->view.n_domains; i++)
        if ((int)i != di)
            rest[nr++] = o->view.domains[i];
    after.domains = rest;
    after.n_domains = nr;
    after.all_mode = bf_own_all_mode(o->view.policy, o->view.latched, nr);
    uint32_t blocked = 0, released = 0;
    char first[BF_OWN_ID_MAX + 64] = "";
    uint32_t hwm = bf_inv_hwm(c->shm);
    for (uint32_t slot = 0; slot < hwm && slot < c->capacity; slot++) {
        if (!c->slots[slot].present)
            continue;
        if (bf_own_source_of_slot(c, slot, &o->view) != BF_OWN_SRC_DOMAIN ||
            bf_own_source_of_slot(c, slot, &after) != BF_OWN_SRC_NONE)
            continue;
        struct bf_machine_rec rec;
        if (bf_inv_read(c->shm, slot, &rec) != 0)
            continue;
        uint32_t il = 0;
        const char *id = bf_str(c->shm, rec.id, &il);
        bool reserved = id && bf_idmap_get(&o->resv, id, il, NULL);
        if (bound_state(rec.state) || bf_pending(c->shm, slot) || reserved) {
            if (!blocked++ && id)
                snprintf(first, sizeof first, "%.*s (%s%s)", (int)(il < 256 ? il : 256), id,
                         bf_state_name(rec.state),
                         bf_pending(c->shm, slot) ? ", action in flight"
                         : reserved               ? ", reserved for transfer"
                                                  : "");
        } else {
            released++;
        }
    }
    free(rest);
    if (blocked) {
        bf_own_set_reason(
            r, OUT_FAILED,
            "domain %s=%s still holds %u machines bound, in flight or reserved on this "
            "shard (first: %s); drain or transfer them first",
            k, v, blocked, first);
        return;
    }
    if (!bf_own_begin(c, &txn, r))
        return;
    size_t kl;
    char *key = domain_key(k, v, &kl);
    MDB_val mk = {kl, key};
    int rc = key ? mdb_del(txn, o->st->dbi[BF_OWN_DB_DOMAINS], &mk, NULL) : ENOMEM;
    free(key);
    uint64_t gen = 0;
    if (rc && rc != MDB_NOTFOUND) {
        bf_own_fail_txn(c, txn, rc, r);
        return;
    }
    if (!(gen = bf_own_bump_generation(c, txn))) {
        bf_own_fail_txn(c, txn, EIO, r);
        return;
    }
    char reason[96] = "";
    if (released)
        snprintf(reason, sizeof reason, "released %u unbound machines", released);
    if (!bf_own_commit_accept(c, txn, in, K_UNASSIGN, reason, NULL, 0, r))
        return;
    r->outcome = OUT_ACCEPTED;
    free(o->view.domains[di].key);
    free(o->view.domains[di].value);
    o->view.domains[di] = o->view.domains[--o->view.n_domains];
    o->view.all_mode = bf_own_all_mode(o->view.policy, o->view.latched, o->view.n_domains);
    o->view.generation = gen;
    o->changed = true;
    char d[2 * BF_OWN_ID_MAX + 2];
    snprintf(d, sizeof d, "%s=%s", k, v);
    bf_own_audit(c, BF_OWN_EV_DOMAIN_UNASSIGNED, "", in->instruction_id, "", "", d, 0, 0);
    BF_INFO("domain unassigned", "domain=\"%s\" released=%u instruction_id=%.128s", d, released,
            in->instruction_id);
}

/* ------------------------------------------------------------ entry */

void bf_own_handle_instruction(struct bf_cycle *c, const uint8_t *rec, size_t len, int64_t now_ns)
{
    (void)now_ns;
    struct bf_coord_in_hdr h;
    if (len < sizeof h) {
        BF_ERROR("short coordinator instruction record dropped", "bytes=%zu", len);
        return;
    }
    memcpy(&h, rec, sizeof h);
    Instr *in =
        bigfleet__v1alpha1__coordinator_instruction__unpack(NULL, len - sizeof h, rec + sizeof h);
    if (!in) {
        BF_ERROR("undecodable coordinator instruction dropped", "bytes=%zu", len - sizeof h);
        count(c, K_OTHER, OUT_INVALID);
        return;
    }
    int kind = kind_of(in);
    struct reply r = {OUT_FAILED, ""};
    if (!in->instruction_id || !in->instruction_id[0] || redelivered(c, in, kind))
        goto out;
    if (in->coordinator_term < h.hwm) {
        bf_own_set_reason(&r, OUT_STALE, "stale coordinator term %lld < %lld",
                          (long long)in->coordinator_term, (long long)h.hwm);
        answer(c, in, kind, &r);
        goto out;
    }
    switch (kind) {
    case K_ASSIGN:
        do_assign(c, in, &r);
        break;
    case K_UNASSIGN:
        do_unassign(c, in, &r);
        break;
    case K_TRANSFER:
        bf_own_do_transfer(c, in, &r);
        break;
    case K_REASSIGN:
        bf_own_do_reassign(c, in, &r);
        break;
    case K_DRAIN:
        bf_own_do_drain(c, in, &r);
        break;
    default:
        bf_own_set_reason(&r, OUT_INVALID, "unknown payload");
        break;
    }
    if (r.outcome != OUT_ACCEPTED)
        answer(c, in, kind, &r); /* accepted ones were answered at their commit */
out:
    bigfleet__v1alpha1__coordinator_instruction__free_unpacked(in, NULL);
}
