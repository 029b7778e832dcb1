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
 *   - Files: this one decodes and dispatches a record and holds the domain
 *     handlers; the machine moves are in moves.c and drain.c; answering,
 *     the dedup set and the commit are in acks.c, below all of them; the
 *     per-cycle step that pops ring COORD_IN is own_step.c, above.
 */
#include <errno.h>
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
    bf_own_answer(c, in, kind_of(in), &r);
    bigfleet__v1alpha1__coordinator_instruction__free_unpacked(in, NULL);
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
        bf_own_count(c, K_OTHER, OUT_INVALID);
        return;
    }
    int kind = kind_of(in);
    struct reply r = {OUT_FAILED, ""};
    if (!in->instruction_id || !in->instruction_id[0] || bf_own_redelivered(c, in, kind))
        goto out;
    if (in->coordinator_term < h.hwm) {
        bf_own_set_reason(&r, OUT_STALE, "stale coordinator term %lld < %lld",
                          (long long)in->coordinator_term, (long long)h.hwm);
        bf_own_answer(c, in, kind, &r);
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
        bf_own_answer(c, in, kind, &r); /* accepted ones were answered at their commit */
out:
    bigfleet__v1alpha1__coordinator_instruction__free_unpacked(in, NULL);
}
