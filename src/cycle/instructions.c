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
#include "bigfleet/v1alpha1/coordinator.pb-c.h"
#include "own_internal.h"

#define OUT_ACCEPTED BIGFLEET__V1ALPHA1__INSTRUCT_ACK__OUTCOME__OUTCOME_ACCEPTED
#define OUT_STALE    BIGFLEET__V1ALPHA1__INSTRUCT_ACK__OUTCOME__OUTCOME_REJECTED_STALE
#define OUT_INVALID  BIGFLEET__V1ALPHA1__INSTRUCT_ACK__OUTCOME__OUTCOME_REJECTED_INVALID
#define OUT_FAILED   BIGFLEET__V1ALPHA1__INSTRUCT_ACK__OUTCOME__OUTCOME_FAILED

typedef Bigfleet__V1alpha1__CoordinatorInstruction Instr;

enum { K_OTHER = 0, K_ASSIGN = 1, K_UNASSIGN = 2, K_REASSIGN = 3, K_DRAIN = 4, K_TRANSFER = 5 };

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

/* What an instruction answers. */
struct reply {
    int outcome;
    char reason[512];
};

static void set_reason(struct reply *r, int outcome, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_reason(struct reply *r, int outcome, const char *fmt, ...)
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
    atomic_fetch_add_explicit(&c->shm->st->own.instructions[kind][outcome], 1,
                              memory_order_relaxed);
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

void own_fail_instruction(struct bf_cycle *c, const uint8_t *rec, size_t len, const char *why)
{
    if (len < sizeof(struct bf_coord_in_hdr))
        return;
    Instr *in = bigfleet__v1alpha1__coordinator_instruction__unpack(
        NULL, len - sizeof(struct bf_coord_in_hdr), rec + sizeof(struct bf_coord_in_hdr));
    if (!in)
        return;
    struct reply r;
    set_reason(&r, OUT_FAILED, "%s", why);
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
    if (ms.ms_entries <= BF_OWN_DONE_MAX)
        return 0;
    MDB_cursor *cur;
    if ((rc = mdb_cursor_open(txn, st->dbi[BF_OWN_DB_DONESEQ], &cur)) != 0)
        return rc;
    for (size_t extra = ms.ms_entries - BF_OWN_DONE_MAX; extra > 0 && rc == 0; extra--) {
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
static bool commit_accept(struct bf_cycle *c, MDB_txn *txn, const Instr *in, int kind,
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
        atomic_fetch_add(&c->shm->st->own.store_errors, 1);
        set_reason(r, OUT_FAILED, "state store: %s", mdb_strerror(rc));
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

static bool begin(struct bf_cycle *c, MDB_txn **txn, struct reply *r)
{
    int rc = mdb_txn_begin(c->own->st->env, NULL, 0, txn);
    if (rc) {
        atomic_fetch_add(&c->shm->st->own.store_errors, 1);
        set_reason(r, OUT_FAILED, "state store: %s", mdb_strerror(rc));
        return false;
    }
    return true;
}

static bool fail_txn(struct bf_cycle *c, MDB_txn *txn, int rc, struct reply *r)
{
    mdb_txn_abort(txn);
    atomic_fetch_add(&c->shm->st->own.store_errors, 1);
    set_reason(r, OUT_FAILED, "state store: %s", mdb_strerror(rc));
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
        set_reason(r, OUT_INVALID, "empty topology_key");
        return false;
    }
    if (strlen(k) > BF_OWN_ID_MAX || strlen(v ? v : "") > BF_OWN_ID_MAX) {
        set_reason(r, OUT_INVALID, "topology key or value longer than %d bytes", BF_OWN_ID_MAX);
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
        set_reason(r, OUT_FAILED, "domain table full (%d domains)", BF_OWN_DOMAINS_MAX);
        return;
    }
    MDB_txn *txn;
    if (!begin(c, &txn, r))
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
            fail_txn(c, txn, rc, r);
            return;
        }
        if (!(gen = own_bump_generation(c, txn))) {
            fail_txn(c, txn, EIO, r);
            return;
        }
    }
    if (!commit_accept(c, txn, in, K_ASSIGN, "", NULL, 0, r))
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
        bf_own_view_load(o->st, c->o.coordinator, &o->view);
    } else {
        o->view.domains = nd;
        o->view.domains[o->view.n_domains++] = (struct bf_own_domain){kc, vc};
        o->view.all_mode = false;
        o->view.generation = gen;
    }
    o->changed = true;
    char d[2 * BF_OWN_ID_MAX + 2];
    snprintf(d, sizeof d, "%s=%s", k, v);
    own_audit(c, BF_OWN_EV_DOMAIN_ASSIGNED, "", in->instruction_id, "", "", d, 0, 0);
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
        if (begin(c, &txn, r) && commit_accept(c, txn, in, K_UNASSIGN, "", NULL, 0, r))
            r->outcome = OUT_ACCEPTED;
        return;
    }
    /* all or nothing: every machine the domain's removal would release must be
     * releasable now (unbound, nothing in flight, not reserved) */
    struct bf_own_view after = o->view;
    struct bf_own_domain *rest = malloc((o->view.n_domains ? o->view.n_domains : 1) * sizeof *rest);
    if (!rest) {
        set_reason(r, OUT_FAILED, "out of memory");
        return;
    }
    uint32_t nr = 0;
    for (uint32_t i = 0; i < o->view.n_domains; i++)
        if ((int)i != di)
            rest[nr++] = o->view.domains[i];
    after.domains = rest;
    after.n_domains = nr;
    after.all_mode = !c->o.coordinator && nr == 0;
    uint32_t blocked = 0, released = 0;
    char first[BF_OWN_ID_MAX + 64] = "";
    uint32_t hwm = bf_inv_hwm(c->shm);
    for (uint32_t slot = 0; slot < hwm && slot < c->capacity; slot++) {
        if (!c->slots[slot].present)
            continue;
        if (own_source_of_slot(c, slot, &o->view) != BF_OWN_SRC_DOMAIN ||
            own_source_of_slot(c, slot, &after) != BF_OWN_SRC_NONE)
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
        set_reason(r, OUT_FAILED,
                   "domain %s=%s still holds %u machines bound, in flight or reserved on this "
                   "shard (first: %s); drain or transfer them first",
                   k, v, blocked, first);
        return;
    }
    if (!begin(c, &txn, r))
        return;
    size_t kl;
    char *key = domain_key(k, v, &kl);
    MDB_val mk = {kl, key};
    int rc = key ? mdb_del(txn, o->st->dbi[BF_OWN_DB_DOMAINS], &mk, NULL) : ENOMEM;
    free(key);
    uint64_t gen = 0;
    if (rc && rc != MDB_NOTFOUND) {
        fail_txn(c, txn, rc, r);
        return;
    }
    if (!(gen = own_bump_generation(c, txn))) {
        fail_txn(c, txn, EIO, r);
        return;
    }
    char reason[96] = "";
    if (released)
        snprintf(reason, sizeof reason, "released %u unbound machines", released);
    if (!commit_accept(c, txn, in, K_UNASSIGN, reason, NULL, 0, r))
        return;
    r->outcome = OUT_ACCEPTED;
    free(o->view.domains[di].key);
    free(o->view.domains[di].value);
    o->view.domains[di] = o->view.domains[--o->view.n_domains];
    o->view.all_mode = !c->o.coordinator && o->view.n_domains == 0;
    o->view.generation = gen;
    o->changed = true;
    char d[2 * BF_OWN_ID_MAX + 2];
    snprintf(d, sizeof d, "%s=%s", k, v);
    own_audit(c, BF_OWN_EV_DOMAIN_UNASSIGNED, "", in->instruction_id, "", "", d, 0, 0);
    BF_INFO("domain unassigned", "domain=\"%s\" released=%u instruction_id=%.128s", d, released,
            in->instruction_id);
}

/* ------------------------------------------------------------ machine picks */

struct pick {
    uint32_t slot;
    const char *id; /* string table (stable while the segments live) */
    uint32_t len;
    bool reserved;
    uint8_t rpb;
    float price;
    double score; /* victim score (drains) */
};

static int cmp_give_up(const void *a, const void *b)
{
    const struct pick *x = a, *y = b;
    if (x->reserved != y->reserved)
        return x->reserved ? -1 : 1; /* drained for a transfer: first */
    if (x->rpb != y->rpb)
        return x->rpb < y->rpb ? -1 : 1; /* lowest reclamation penalty first */
    if (x->price != y->price)
        return x->price < y->price ? -1 : 1; /* then the engine's Idle order */
    uint32_t l = x->len < y->len ? x->len : y->len;
    int m = memcmp(x->id, y->id, l);
    return m ? m : (x->len > y->len) - (x->len < y->len);
}

static int cmp_victim(const void *a, const void *b)
{
    const struct pick *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1; /* Phase 2: best victim first */
    uint32_t l = x->len < y->len ? x->len : y->len;
    int m = memcmp(x->id, y->id, l);
    return m ? m : (x->len > y->len) - (x->len < y->len);
}

/* Registry index of a type or zone name; -1 = "" (any); -2 = unknown. */
static int type_idx(const struct bf_shm *s, const char *name)
{
    if (!name || !name[0])
        return -1;
    uint32_t n = atomic_load_explicit(&s->inv->n_types, memory_order_acquire);
    for (uint32_t i = 1; i < n && i < BF_MAX_TYPES; i++)
        if (!strcmp(bf_type_name(s, i), name))
            return (int)i;
    return -2;
}

static int zone_idx(const struct bf_shm *s, const char *name)
{
    if (!name || !name[0])
        return -1;
    uint32_t n = atomic_load_explicit(&s->inv->n_zones, memory_order_acquire);
    for (uint32_t i = 1; i < n && i < BF_MAX_ZONES; i++)
        if (!strcmp(bf_zone_name(s, i), name))
            return (int)i;
    return -2;
}

struct picks {
    struct pick *p;
    size_t n, cap;
};

static bool picks_add(struct picks *ps, const struct pick *p)
{
    if (ps->n == ps->cap) {
        size_t nc = ps->cap ? ps->cap * 2 : 64;
        struct pick *np = realloc(ps->p, nc * sizeof *np);
        if (!np)
            return false;
        ps->p = np;
        ps->cap = nc;
    }
    ps->p[ps->n++] = *p;
    return true;
}

static const char *shard_or_empty(const char *s)
{
    return s ? s : "";
}

/* The peer recorded for a machine in own.out ("" when absent). */
static void out_peer(struct bf_cycle *c, const char *id, char *peer, size_t n)
{
    peer[0] = 0;
    MDB_txn *txn;
    if (mdb_txn_begin(c->own->st->env, NULL, MDB_RDONLY, &txn) != 0)
        return;
    MDB_val k = {strlen(id), (void *)id}, v;
    if (mdb_get(txn, c->own->st->dbi[BF_OWN_DB_OUT], &k, &v) == 0 &&
        v.mv_size >= sizeof(struct bf_own_xfer_rec)) {
        size_t l = v.mv_size - sizeof(struct bf_own_xfer_rec);
        if (l >= n)
            l = n - 1;
        memcpy(peer, (const char *)v.mv_data + sizeof(struct bf_own_xfer_rec), l);
        peer[l] = 0;
    }
    mdb_txn_abort(txn);
}

/* The selector and id-list checks common to the three machine instructions. */
static bool check_shape(size_t n_ids, char **ids, int32_t count, struct reply *r)
{
    if (count < 0) {
        set_reason(r, OUT_INVALID, "negative count");
        return false;
    }
    if (count > 0 && n_ids > 0) {
        set_reason(r, OUT_INVALID, "name machine_ids or a selector (count), not both");
        return false;
    }
    if (count == 0 && n_ids == 0) {
        set_reason(r, OUT_INVALID, "no machine_ids and no selector (count)");
        return false;
    }
    if ((size_t)count > BF_OWN_MAX_IDS || n_ids > BF_OWN_MAX_IDS) {
        set_reason(r, OUT_INVALID, "at most %d machines per instruction", BF_OWN_MAX_IDS);
        return false;
    }
    for (size_t i = 0; i < n_ids; i++) {
        size_t l = ids[i] ? strlen(ids[i]) : 0;
        if (l == 0 || l > BF_OWN_ID_MAX) {
            set_reason(r, OUT_INVALID, "machine id %zu is empty or longer than %d bytes", i,
                       BF_OWN_ID_MAX);
            return false;
        }
    }
    return true;
}

/*
 * The donor's machines for a transfer (want = Idle) or a speculative
 * reassignment (want = Speculative): named ids (each must qualify: all or
 * nothing; one already transferred to `to` is skipped as done), or a
 * selector resolved in give-up order (reserved first, lowest reclamation
 * penalty, then price and id: the engine's Idle order).
 */
static bool donor_picks(struct bf_cycle *c, int want, char **ids, size_t n_ids, int32_t count,
                        const char *itype, const char *zone, const char *to, struct picks *out,
                        struct reply *r)
{
    struct bf_cycle_own *o = c->own;
    struct bf_shm *s = c->shm;
    if (count > 0) {
        int ti = type_idx(s, itype), zi = zone_idx(s, zone);
        uint32_t hwm = bf_inv_hwm(s);
        for (uint32_t slot = 0; ti != -2 && zi != -2 && slot < hwm && slot < c->capacity; slot++) {
            const struct slotinfo *si = &c->slots[slot];
            if (!si->present || si->state != want || (ti >= 0 && si->type_idx != ti) ||
                (zi >= 0 && si->zone_idx != zi) || bf_pending(s, slot))
                continue;
            struct bf_machine_rec rec;
            if (bf_inv_read(s, slot, &rec) != 0 || !(rec.flags & BF_REC_VALID) || rec.cluster ||
                rec.state != want)
                continue;
            uint32_t il = 0;
            const char *id = bf_str(s, rec.id, &il);
            if (!id)
                continue;
            bool reserved = bf_idmap_get(&o->resv, id, il, NULL);
            if (si->held && !reserved)
                continue; /* not owned: leaving this shard */
            struct pick p = {slot, id, il, reserved, rec.rpb, rec.price_per_hour, 0};
            if (!picks_add(out, &p)) {
                set_reason(r, OUT_FAILED, "out of memory");
                return false;
            }
        }
        if (!out->n) {
            set_reason(r, OUT_FAILED,
                       "no %s unbound machine owned by this shard matches "
                       "instance_type=\"%s\" zone=\"%s\" (none in flight)",
                       bf_state_name(want), shard_or_empty(itype), shard_or_empty(zone));
            return false;
        }
        qsort(out->p, out->n, sizeof *out->p, cmp_give_up);
        if (out->n > (size_t)count)
            out->n = (size_t)count;
        return true;
    }
    for (size_t i = 0; i < n_ids; i++) {
        const char *id = ids[i];
        size_t il = strlen(id);
        bool dup = false;
        for (size_t j = 0; j < out->n && !dup; j++)
            dup = out->p[j].len == il && !memcmp(out->p[j].id, id, il);
        if (dup)
            continue;
        if (bf_idmap_get(&o->view.out, id, il, NULL)) {
            char peer[BF_OWN_ID_MAX + 1];
            out_peer(c, id, peer, sizeof peer);
            if (!strcmp(peer, to))
                continue; /* already transferred there: idempotent */
            set_reason(r, OUT_FAILED, "machine %s was transferred to shard \"%s\"", id, peer);
            return false;
        }
        int64_t slot = own_slot_of(c, id, il);
        if (slot < 0) {
            set_reason(r, OUT_FAILED, "machine %s is not in this shard's inventory", id);
            return false;
        }
        struct bf_machine_rec rec;
        if (bf_inv_read(s, (uint32_t)slot, &rec) != 0 || !(rec.flags & BF_REC_VALID)) {
            set_reason(r, OUT_FAILED, "machine %s: record busy; retry", id);
            return false;
        }
        uint32_t sl = 0;
        const char *sid = bf_str(s, rec.id, &sl);
        bool reserved = sid && bf_idmap_get(&o->resv, sid, sl, NULL);
        if (c->slots[slot].held && !reserved) {
            set_reason(r, OUT_FAILED, "machine %s is not owned by this shard", id);
            return false;
        }
        if (rec.state != want || rec.cluster) {
            set_reason(r, OUT_FAILED,
                       "machine %s is %s%s; only %s, unbound machines move (a transfer never "
                       "drains)",
                       id, bf_state_name(rec.state), rec.cluster ? " and bound to a cluster" : "",
                       bf_state_name(want));
            return false;
        }
        if (bf_pending(s, (uint32_t)slot)) {
            set_reason(r, OUT_FAILED, "machine %s has an action in flight", id);
            return false;
        }
        struct pick p = {(uint32_t)slot, sid, sl, reserved, rec.rpb, rec.price_per_hour, 0};
        if (!sid || !picks_add(out, &p)) {
            set_reason(r, OUT_FAILED, "out of memory");
            return false;
        }
    }
    return true;
}

static char **pick_ids(const struct picks *ps, char **store)
{
    for (size_t i = 0; i < ps->n; i++)
        store[i] = (char *)ps->p[i].id; /* NUL-terminated in the string table */
    return store;
}

/* ------------------------------------------------------------ transfers */

struct xfer_args {
    int kind;          /* K_TRANSFER or K_REASSIGN */
    int want;          /* Idle or Speculative */
    int src;           /* BF_OWN_SRC_TRANSFER / _SPECULATIVE */
    int ev_out, ev_in; /* audit events */
    char **ids;
    size_t n_ids;
    int32_t count;
    const char *itype, *zone, *from, *to;
};

static void xfer_donor(struct bf_cycle *c, const Instr *in, const struct xfer_args *a,
                       struct reply *r)
{
    struct bf_cycle_own *o = c->own;
    struct picks ps = {0};
    if (!donor_picks(c, a->want, a->ids, a->n_ids, a->count, a->itype, a->zone, a->to, &ps, r))
        goto out;
    MDB_txn *txn;
    if (!begin(c, &txn, r))
        goto out;
    int64_t now = bf_now_ns();
    size_t tl = strlen(a->to);
    uint8_t *val = malloc(sizeof(struct bf_own_xfer_rec) + tl);
    if (!val) {
        fail_txn(c, txn, ENOMEM, r);
        goto out;
    }
    struct bf_own_xfer_rec xr = {.kind = (uint8_t)a->src, .at_ns = now};
    memcpy(val, &xr, sizeof xr);
    memcpy(val + sizeof xr, a->to, tl);
    int rc = 0;
    for (size_t i = 0; i < ps.n && !rc; i++) {
        MDB_val k = {ps.p[i].len, (void *)ps.p[i].id}, v = {sizeof xr + tl, val};
        rc = mdb_put(txn, o->st->dbi[BF_OWN_DB_OUT], &k, &v, 0);
        int d;
        if (!rc && (d = mdb_del(txn, o->st->dbi[BF_OWN_DB_IN], &k, NULL)) && d != MDB_NOTFOUND)
            rc = d;
        if (!rc && (d = mdb_del(txn, o->st->dbi[BF_OWN_DB_RESERVED], &k, NULL)) &&
            d != MDB_NOTFOUND)
            rc = d;
    }
    free(val);
    if (rc) {
        fail_txn(c, txn, rc, r);
        goto out;
    }
    uint64_t gen = ps.n ? own_bump_generation(c, txn) : o->view.generation;
    if (!gen && ps.n) {
        fail_txn(c, txn, EIO, r);
        goto out;
    }
    char reason[96] = "";
    if (a->count > 0 && ps.n < (size_t)a->count)
        snprintf(reason, sizeof reason, "resolved %zu of %d requested", ps.n, a->count);
    /* echo: the resolved ids; for named ids every one of them (some may
     * have been transferred by an earlier instruction: idempotent) */
    char **echo = calloc(ps.n + 1, sizeof *echo);
    if (!echo) {
        fail_txn(c, txn, ENOMEM, r);
        goto out;
    }
    bool ok = a->count > 0
                  ? commit_accept(c, txn, in, a->kind, reason, pick_ids(&ps, echo), ps.n, r)
                  : commit_accept(c, txn, in, a->kind, reason, a->ids, a->n_ids, r);
    free(echo);
    if (!ok)
        goto out;
    r->outcome = OUT_ACCEPTED;
    for (size_t i = 0; i < ps.n; i++) {
        const struct pick *p = &ps.p[i];
        bool was_reserved = bf_idmap_del(&o->resv, p->id, p->len);
        if (bf_idmap_put(&o->view.out, p->id, p->len, a->src) != 0)
            o->changed = true; /* cannot remember it here: re-evaluated from a reload */
        bf_idmap_del(&o->view.in, p->id, p->len);
        own_touch(c, p->slot);
        own_audit(c, a->ev_out, p->id, in->instruction_id, a->from, a->to,
                  was_reserved ? "was reserved for transfer" : "", 0, 0);
    }
    if (o->changed)
        bf_own_view_load(o->st, c->o.coordinator, &o->view);
    o->view.generation = gen;
    own_resv_recompute_expiry(o);
    atomic_fetch_add(a->kind == K_TRANSFER ? &c->shm->st->own.transferred_out
                                           : &c->shm->st->own.speculative_out,
                     ps.n);
    BF_INFO("machines released to another shard",
            "instruction=%s instruction_id=%.128s "
            "machines=%zu to=%s",
            kind_names[a->kind], in->instruction_id, ps.n, a->to);
out:
    free(ps.p);
}

static void xfer_recipient(struct bf_cycle *c, const Instr *in, const struct xfer_args *a,
                           struct reply *r)
{
    struct bf_cycle_own *o = c->own;
    if (a->count > 0) {
        set_reason(r, OUT_INVALID,
                   "a selector is resolved by the donor; name the machine_ids "
                   "for the recipient");
        return;
    }
    MDB_txn *txn;
    if (!begin(c, &txn, r))
        return;
    int64_t now = bf_now_ns();
    size_t fl = strlen(a->from);
    uint8_t *val = malloc(sizeof(struct bf_own_xfer_rec) + fl);
    if (!val) {
        fail_txn(c, txn, ENOMEM, r);
        return;
    }
    struct bf_own_xfer_rec xr = {.kind = (uint8_t)a->src, .at_ns = now};
    memcpy(val, &xr, sizeof xr);
    memcpy(val + sizeof xr, a->from, fl);
    int rc = 0;
    for (size_t i = 0; i < a->n_ids && !rc; i++) {
        MDB_val k = {strlen(a->ids[i]), a->ids[i]}, v = {sizeof xr + fl, val};
        rc = mdb_put(txn, o->st->dbi[BF_OWN_DB_IN], &k, &v, 0);
        int d;
        if (!rc && (d = mdb_del(txn, o->st->dbi[BF_OWN_DB_OUT], &k, NULL)) && d != MDB_NOTFOUND)
            rc = d;
    }
    free(val);
    if (rc) {
        fail_txn(c, txn, rc, r);
        return;
    }
    uint64_t gen = own_bump_generation(c, txn);
    if (!gen) {
        fail_txn(c, txn, EIO, r);
        return;
    }
    if (!commit_accept(c, txn, in, a->kind, "", a->ids, a->n_ids, r))
        return;
    r->outcome = OUT_ACCEPTED;
    bool reload = false;
    for (size_t i = 0; i < a->n_ids; i++) {
        size_t l = strlen(a->ids[i]);
        if (bf_idmap_put(&o->view.in, a->ids[i], l, a->src) != 0)
            reload = true;
        bf_idmap_del(&o->view.out, a->ids[i], l);
        int64_t slot = own_slot_of(c, a->ids[i], l);
        if (slot >= 0)
            own_touch(c, (uint32_t)slot);
        own_audit(c, a->ev_in, a->ids[i], in->instruction_id, a->from, a->to, "", 0, 0);
    }
    if (reload)
        bf_own_view_load(o->st, c->o.coordinator, &o->view);
    o->view.generation = gen;
    atomic_fetch_add(a->kind == K_TRANSFER ? &c->shm->st->own.transferred_in
                                           : &c->shm->st->own.speculative_in,
                     a->n_ids);
    BF_INFO("machines taken over from another shard",
            "instruction=%s instruction_id=%.128s "
            "machines=%zu from=%s",
            kind_names[a->kind], in->instruction_id, a->n_ids, a->from);
}

static void do_transfer(struct bf_cycle *c, const Instr *in, struct reply *r)
{
    const Bigfleet__V1alpha1__TransferOwnership *t = in->transfer_ownership;
    const char *me = c->o.shard_id ? c->o.shard_id : "";
    const char *from = shard_or_empty(t->from_shard_id), *to = shard_or_empty(t->to_shard_id);
    if (!check_shape(t->n_machine_ids, t->machine_ids, t->count, r))
        return;
    if (!from[0] || !to[0]) {
        set_reason(r, OUT_INVALID, "TransferOwnership needs from_shard_id and to_shard_id");
        return;
    }
    if (!strcmp(from, to)) {
        set_reason(r, OUT_INVALID, "from_shard_id equals to_shard_id (\"%s\")", from);
        return;
    }
    struct xfer_args a = {K_TRANSFER,
                          BF_STATE_IDLE,
                          BF_OWN_SRC_TRANSFER,
                          BF_OWN_EV_TRANSFER_OUT,
                          BF_OWN_EV_TRANSFER_IN,
                          t->machine_ids,
                          t->n_machine_ids,
                          t->count,
                          t->instance_type,
                          t->zone,
                          from,
                          to};
    if (!strcmp(me, from))
        xfer_donor(c, in, &a, r);
    else if (!strcmp(me, to))
        xfer_recipient(c, in, &a, r);
    else
        set_reason(r, OUT_INVALID, "addressed to shards \"%s\" -> \"%s\", this shard is \"%s\"",
                   from, to, me);
}

static void do_reassign(struct bf_cycle *c, const Instr *in, struct reply *r)
{
    const Bigfleet__V1alpha1__ReassignSpeculative *t = in->reassign_speculative;
    const char *me = c->o.shard_id ? c->o.shard_id : "";
    const char *from = shard_or_empty(t->from_shard_id), *to = shard_or_empty(t->to_shard_id);
    if (!check_shape(t->n_machine_ids, t->machine_ids, t->count, r))
        return;
    if (!from[0] != !to[0]) {
        set_reason(r, OUT_INVALID, "set both from_shard_id and to_shard_id, or neither");
        return;
    }
    struct xfer_args a = {K_REASSIGN,
                          BF_STATE_SPECULATIVE,
                          BF_OWN_SRC_SPECULATIVE,
                          BF_OWN_EV_SPECULATIVE_OUT,
                          BF_OWN_EV_SPECULATIVE_IN,
                          t->machine_ids,
                          t->n_machine_ids,
                          t->count,
                          t->instance_type,
                          t->zone,
                          from,
                          to};
    bool donor;
    if (from[0]) {
        if (!strcmp(from, to)) {
            set_reason(r, OUT_INVALID, "from_shard_id equals to_shard_id (\"%s\")", from);
            return;
        }
        if (strcmp(me, from) && strcmp(me, to)) {
            set_reason(r, OUT_INVALID, "addressed to shards \"%s\" -> \"%s\", this shard is \"%s\"",
                       from, to, me);
            return;
        }
        donor = !strcmp(me, from);
    } else {
        /* upstream form (no shard ids): the donor is the shard holding the
         * slots; a selector is always the donor's to resolve */
        donor = t->count > 0;
        for (size_t i = 0; i < t->n_machine_ids && !donor; i++)
            donor = own_slot_of(c, t->machine_ids[i], strlen(t->machine_ids[i])) >= 0;
        if (donor)
            a.to = "";
        else
            a.from = "";
    }
    if (donor)
        xfer_donor(c, in, &a, r);
    else
        xfer_recipient(c, in, &a, r);
}

/* ------------------------------------------------------------ cross-shard drain */

static void do_drain(struct bf_cycle *c, const Instr *in, struct reply *r)
{
    struct bf_cycle_own *o = c->own;
    struct bf_shm *s = c->shm;
    const Bigfleet__V1alpha1__CrossShardDrain *d = in->cross_shard_drain;
    if (!check_shape(d->n_machine_ids, d->machine_ids, d->count, r))
        return;
    if (c->o.actuation_paused || c->o.dry_run) {
        set_reason(r, OUT_FAILED, "%s: no drain is executed",
                   c->o.actuation_paused ? "actuation paused (--actuation-paused)"
                                         : "dry-run mode (--dry-run)");
        return;
    }
    int32_t P = d->preemptor_priority;
    struct bf_engine_config ec;
    bf_engine_config_defaults(&ec);
    struct picks ps = {0};
    if (d->count > 0) {
        int ti = type_idx(s, d->instance_type), zi = zone_idx(s, d->zone);
        uint32_t hwm = bf_inv_hwm(s);
        for (uint32_t slot = 0; ti != -2 && zi != -2 && slot < hwm && slot < c->capacity; slot++) {
            const struct slotinfo *si = &c->slots[slot];
            if (!si->present || si->held || si->state != BF_STATE_CONFIGURED ||
                (ti >= 0 && si->type_idx != ti) || (zi >= 0 && si->zone_idx != zi) ||
                bf_pending(s, slot))
                continue;
            struct bf_machine_rec rec;
            if (bf_inv_read(s, slot, &rec) != 0 || !(rec.flags & BF_REC_VALID) ||
                rec.state != BF_STATE_CONFIGURED || !rec.cluster || rec.assigned_priority >= P)
                continue;
            if (own_source_of_slot(c, slot, &o->view) == BF_OWN_SRC_NONE)
                continue; /* bound but no longer owned: not ours to give */
            uint32_t il = 0;
            const char *id = bf_str(s, rec.id, &il);
            if (!id)
                continue;
            struct pick p = {
                slot,
                id,
                il,
                false,
                rec.rpb,
                rec.price_per_hour,
                bf_engine_victim_score(&ec, P, rec.assigned_priority, rec.ipb, rec.rpb)};
            if (!picks_add(&ps, &p)) {
                set_reason(r, OUT_FAILED, "out of memory");
                goto out;
            }
        }
        if (!ps.n) {
            set_reason(r, OUT_FAILED,
                       "no Configured machine of priority below %d matches instance_type=\"%s\" "
                       "zone=\"%s\" (owned, not in flight, not reserved)",
                       P, shard_or_empty(d->instance_type), shard_or_empty(d->zone));
            goto out;
        }
        qsort(ps.p, ps.n, sizeof *ps.p, cmp_victim);
        if (ps.n > (size_t)d->count)
            ps.n = (size_t)d->count;
    } else {
        for (size_t i = 0; i < d->n_machine_ids; i++) {
            const char *id = d->machine_ids[i];
            size_t il = strlen(id);
            bool dup = false;
            for (size_t j = 0; j < ps.n && !dup; j++)
                dup = ps.p[j].len == il && !memcmp(ps.p[j].id, id, il);
            if (dup)
                continue;
            int64_t slot = own_slot_of(c, id, il);
            struct bf_machine_rec rec;
            if (slot < 0 || bf_inv_read(s, (uint32_t)slot, &rec) != 0 ||
                !(rec.flags & BF_REC_VALID)) {
                set_reason(r, OUT_FAILED, "machine %s is not in this shard's inventory", id);
                goto out;
            }
            uint32_t sl = 0;
            const char *sid = bf_str(s, rec.id, &sl);
            if (sid && bf_idmap_get(&o->resv, sid, sl, NULL)) {
                set_reason(r, OUT_FAILED, "machine %s is already reserved for a transfer", id);
                goto out;
            }
            if (rec.state != BF_STATE_CONFIGURED || !rec.cluster) {
                set_reason(r, OUT_FAILED,
                           "machine %s is %s; a cross-shard drain takes "
                           "Configured machines",
                           id, bf_state_name(rec.state));
                goto out;
            }
            if (rec.assigned_priority >= P) {
                set_reason(r, OUT_FAILED,
                           "machine %s serves priority %d, not below the preemptor's %d", id,
                           rec.assigned_priority, P);
                goto out;
            }
            if (bf_pending(s, (uint32_t)slot)) {
                set_reason(r, OUT_FAILED, "machine %s has an action in flight", id);
                goto out;
            }
            if (own_source_of_slot(c, (uint32_t)slot, &o->view) == BF_OWN_SRC_NONE) {
                set_reason(r, OUT_FAILED, "machine %s is not owned by this shard", id);
                goto out;
            }
            struct pick p = {(uint32_t)slot, sid, sl, false, rec.rpb, rec.price_per_hour, 0};
            if (!sid || !picks_add(&ps, &p)) {
                set_reason(r, OUT_FAILED, "out of memory");
                goto out;
            }
        }
    }
    if (o->resv.n + ps.n > BF_OWN_RESERVED_MAX) {
        set_reason(r, OUT_FAILED, "reservation table full (%u held, at most %d)", o->resv.n,
                   BF_OWN_RESERVED_MAX);
        goto out;
    }
    struct bf_ring_hdr *rh = s->ring[BF_RING_ACTIONS];
    if (bf_ring_depth(s, BF_RING_ACTIONS) + ps.n > rh->capacity) {
        set_reason(r, OUT_FAILED, "actions ring full; retry");
        goto out;
    }
    /* victims' graces, then the reservations and the dedup entry, committed */
    int64_t now = bf_now_ns();
    int64_t *grace = calloc(ps.n + 1, sizeof *grace);
    int32_t *vprio = calloc(ps.n + 1, sizeof *vprio);
    uint32_t *vcl = calloc(ps.n + 1, sizeof *vcl);
    char **echo = calloc(ps.n + 1, sizeof *echo);
    MDB_txn *txn = NULL;
    if (!grace || !vprio || !vcl || !echo) {
        set_reason(r, OUT_FAILED, "out of memory");
        goto out_free;
    }
    if (!begin(c, &txn, r))
        goto out_free;
    size_t il = strlen(in->instruction_id);
    uint8_t *val = malloc(sizeof(struct bf_own_resv_rec) + il);
    int rc = val ? 0 : ENOMEM;
    for (size_t i = 0; i < ps.n && !rc; i++) {
        struct bf_machine_rec rec;
        if (bf_inv_read(s, ps.p[i].slot, &rec) != 0) {
            rc = EBUSY;
            break;
        }
        vprio[i] = rec.assigned_priority;
        vcl[i] = rec.cluster;
        grace[i] = bf_engine_drain_grace_s(P, rec.assigned_priority);
        struct bf_own_resv_rec rr = {.since_ns = now,
                                     .until_ns =
                                         now + grace[i] * BF_NS_PER_SEC + c->o.reservation_ttl_ns,
                                     .preemptor_priority = P,
                                     .grace_s = (uint32_t)grace[i]};
        memcpy(val, &rr, sizeof rr);
        memcpy(val + sizeof rr, in->instruction_id, il);
        MDB_val k = {ps.p[i].len, (void *)ps.p[i].id}, v = {sizeof rr + il, val};
        rc = mdb_put(txn, o->st->dbi[BF_OWN_DB_RESERVED], &k, &v, 0);
    }
    free(val);
    if (rc) {
        fail_txn(c, txn, rc, r);
        goto out_free;
    }
    char reason[96] = "";
    if (d->count > 0 && ps.n < (size_t)d->count)
        snprintf(reason, sizeof reason, "resolved %zu of %d requested", ps.n, d->count);
    if (!commit_accept(c, txn, in, K_DRAIN, reason, pick_ids(&ps, echo), ps.n, r))
        goto out_free;
    r->outcome = OUT_ACCEPTED;
    /* the Preempts, as the engine's own would be enqueued (in flight first) */
    uint64_t serial = atomic_load(&s->st->action_serial);
    uint64_t cycle = atomic_load(&s->st->cycle_count) + 1;
    for (size_t i = 0; i < ps.n; i++) {
        const struct pick *p = &ps.p[i];
        int64_t until = now + grace[i] * BF_NS_PER_SEC + c->o.reservation_ttl_ns;
        bf_idmap_put(&o->resv, p->id, p->len, until);
        struct bf_action_msg m = {
            .serial = ++serial,
            .decided_cycle = cycle,
            .slot = p->slot,
            .machine_id_ref = c->slots[p->slot].id_ref,
            .cluster_ref = vcl[i],
            .grace_seconds = (uint32_t)grace[i],
            .preemptor_priority = P,
            .kind = BF_ACTION_PREEMPT,
            .reason = BF_REASON_CROSS_SHARD_DRAIN,
            .disposition = BF_DISP_EXECUTE,
        };
        m.pending_tag = bf_pending_mark(s, p->slot);
        if (bf_ring_push(s, BF_RING_ACTIONS, &m) != 0) {
            /* cannot happen (space checked, we are the only producer) */
            atomic_store_explicit(&s->pending_enq[p->slot], (uint8_t)(m.pending_tag - 1),
                                  memory_order_release);
            serial--;
            BF_ERROR("cross-shard drain not enqueued (ring full); the reservation expires",
                     "machine=%s", p->id);
        } else {
            atomic_fetch_add(&s->st->cycle.actions_total[BF_ACTION_PREEMPT], 1);
            atomic_fetch_add(&s->st->own.drained, 1);
        }
        own_touch(c, p->slot);
        char detail[64];
        snprintf(detail, sizeof detail, "victim priority %d, grace %llds", vprio[i],
                 (long long)grace[i]);
        own_audit(c, BF_OWN_EV_RESERVED, p->id, in->instruction_id, "", "", detail, until, P);
    }
    atomic_store(&s->st->action_serial, serial);
    if (ps.n)
        bf_wake(s, BF_ROLE_EXECUTOR);
    own_resv_recompute_expiry(o);
    BF_INFO("cross-shard drain: machines drained and reserved for transfer",
            "instruction_id=%.128s machines=%zu preemptor_priority=%d", in->instruction_id, ps.n,
            P);
out_free:
    free(grace);
    free(vprio);
    free(vcl);
    free(echo);
out:
    free(ps.p);
}

/* ------------------------------------------------------------ entry */

void own_handle_instruction(struct bf_cycle *c, const uint8_t *rec, size_t len, int64_t now_ns)
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
        set_reason(&r, OUT_STALE, "stale coordinator term %lld < %lld",
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
        do_transfer(c, in, &r);
        break;
    case K_REASSIGN:
        do_reassign(c, in, &r);
        break;
    case K_DRAIN:
        do_drain(c, in, &r);
        break;
    default:
        set_reason(&r, OUT_INVALID, "unknown payload");
        break;
    }
    if (r.outcome != OUT_ACCEPTED)
        answer(c, in, kind, &r); /* accepted ones were answered at their commit */
out:
    bigfleet__v1alpha1__coordinator_instruction__free_unpacked(in, NULL);
}
