/*
 * acks.c — answering the coordinator instructions (ADR-0055, seeds/002 §5;
 * docs/adr0055.md): the InstructAck on ring COORD_OUT, the instruction dedup
 * set in LMDB, and the write transaction that commits a handler's change
 * together with its dedup entry (bf_own_begin / bf_own_commit_accept /
 * bf_own_fail_txn).
 *
 * Layering: the handlers (instructions.c, moves.c, drain.c) call down to
 * this file; it calls none of them (scripts/lint-includes checks that the
 * cycle's files call each other in no circle).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/log.h"
#include "own_internal.h"

/* ------------------------------------------------------------ kinds and replies */

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

void bf_own_count(struct bf_cycle *c, int kind, int outcome)
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
void bf_own_answer(struct bf_cycle *c, const Instr *in, int kind, const struct reply *r)
{
    size_t n;
    uint8_t *b = pack_ack(in->instruction_id, r->outcome, r->reason, NULL, 0, &n);
    if (b)
        send_ack_bytes(c, b, n);
    free(b);
    bf_own_count(c, kind, r->outcome);
    if (r->outcome != OUT_ACCEPTED)
        BF_WARN("coordinator instruction not applied",
                "instruction_id=%.128s kind=%s outcome=%d "
                "reason=\"%s\"",
                in->instruction_id, kind_names[kind], r->outcome, r->reason);
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
bool bf_own_redelivered(struct bf_cycle *c, const Instr *in, int kind)
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
        bf_own_count(c, kind, OUT_ACCEPTED);
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
    bf_own_count(c, kind, OUT_ACCEPTED);
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
