/*
 * own_internal.h — private state of the cycle's ownership controller
 * (ADR-0055, docs/adr0055.md). Its files, each calling only the ones
 * listed before it (no circle; scripts/lint-includes): ownership.c (the
 * partition state, held decisions, audit, publish), acks.c (answers, the
 * dedup set, the commit), moves.c and drain.c (the machine instructions),
 * instructions.c (decode and dispatch, the domain instructions), own_step.c
 * (the per-cycle step).
 *
 * The cycle is the single writer of the partition's rule inputs in LMDB
 * (domains, transfers in and out, reservations, the instruction dedup set,
 * the generation); it keeps a private copy of them (the view and the
 * reservation map) that it updates in step with every commit.
 */
#ifndef BF_CYCLE_OWN_INTERNAL_H
#define BF_CYCLE_OWN_INTERNAL_H

#include "bigfleet/ownership.h"
#include "bigfleet/v1alpha1/coordinator.pb-c.h"
#include "cycle_internal.h"

/* profile ref -> index of the assigned domain it is in (-1 none) */
struct pdom_entry {
    uint32_t ref; /* 0 = empty */
    int32_t dom;
};

struct bf_cycle_own {
    struct bf_own_store *st; /* NULL: no store (own-all, instructions fail) */
    struct bf_own_view view;
    struct bf_idmap resv; /* reserved machine id -> until_ns */
    int64_t next_expiry;  /* earliest until_ns (INT64_MAX when none) */
    struct pdom_entry *pdom;
    uint32_t pdom_cap, pdom_n;
    bool changed;      /* view changed this step: re-evaluate every slot */
    bool publish;      /* st->own tables need a rewrite */
    uint32_t *touched; /* slots to re-read after this step */
    uint32_t n_touched, cap_touched;
    uint8_t *buf; /* ring record buffer */
    size_t buf_cap;
};

/* ownership.c */
void bf_own_touch(struct bf_cycle *c, uint32_t slot);
/* Slot of a machine id present in the mirror, or -1. */
int64_t bf_own_slot_of(struct bf_cycle *c, const char *id, size_t len);
/* The rule for the machine in `slot` (reads its record and profile):
 * enum bf_own_source, BF_OWN_SRC_NONE when not owned or unreadable. */
int bf_own_source_of_slot(struct bf_cycle *c, uint32_t slot, const struct bf_own_view *v);
/* One ownership audit record to the executor (ring OWN_AUDIT). */
void bf_own_audit(struct bf_cycle *c, int event, const char *machine, const char *instruction,
                  const char *from, const char *to, const char *detail, int64_t until_ns,
                  int32_t preemptor_priority);
/* Bumps own.meta generation inside txn; returns the new value (0 on error). */
uint64_t bf_own_bump_generation(struct bf_cycle *c, MDB_txn *txn);
void bf_own_resv_recompute_expiry(struct bf_cycle_own *o);
/* Drops the per-profile domain cache (after a domain change). */
void bf_own_pdom_clear(struct bf_cycle_own *o);
/* Publishes st->own: the counts, and when o->publish is set the bounded
 * copies of the reservations and domains for bigfleet-inspect. */
void bf_own_publish(struct bf_cycle *c);

/* ------------------------------------------------------------ handlers */

#define OUT_ACCEPTED BIGFLEET__V1ALPHA1__INSTRUCT_ACK__OUTCOME__OUTCOME_ACCEPTED
#define OUT_STALE    BIGFLEET__V1ALPHA1__INSTRUCT_ACK__OUTCOME__OUTCOME_REJECTED_STALE
#define OUT_INVALID  BIGFLEET__V1ALPHA1__INSTRUCT_ACK__OUTCOME__OUTCOME_REJECTED_INVALID
#define OUT_FAILED   BIGFLEET__V1ALPHA1__INSTRUCT_ACK__OUTCOME__OUTCOME_FAILED

typedef Bigfleet__V1alpha1__CoordinatorInstruction Instr;

/* Instruction kinds (index of st->own.instructions). */
enum { K_OTHER = 0, K_ASSIGN = 1, K_UNASSIGN = 2, K_REASSIGN = 3, K_DRAIN = 4, K_TRANSFER = 5 };
/* "AssignDomain", ..., "TransferOwnership" ("unknown" for K_OTHER). */
const char *bf_own_kind_name(int kind);

/* What an instruction answers (an accepted one is answered at its commit). */
struct reply {
    int outcome;
    char reason[512];
};
void bf_own_set_reason(struct reply *r, int outcome, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* acks.c: answers (an InstructAck on ring COORD_OUT, counted per kind and
 * outcome in st->own.instructions; bf_own_answer changes no state). */
void bf_own_count(struct bf_cycle *c, int kind, int outcome);
void bf_own_answer(struct bf_cycle *c, const Instr *in, int kind, const struct reply *r);
/* Re-acks an instruction found in the dedup set: true when it was there. */
bool bf_own_redelivered(struct bf_cycle *c, const Instr *in, int kind);
/* acks.c: LMDB write transactions of the handlers. bf_own_begin and
 * bf_own_fail_txn set a FAILED reply on error. bf_own_commit_accept commits txn
 * together with the instruction's dedup entry (an ACCEPTED ack echoing
 * ids), then sends that ack; on failure nothing was applied, the reply is
 * FAILED and false is returned. */
bool bf_own_begin(struct bf_cycle *c, MDB_txn **txn, struct reply *r);
bool bf_own_fail_txn(struct bf_cycle *c, MDB_txn *txn, int rc, struct reply *r);
bool bf_own_commit_accept(struct bf_cycle *c, MDB_txn *txn, const Instr *in, int kind,
                          const char *reason, char **ids, size_t n_ids, struct reply *r);

/* moves.c: machine picks shared with drain.c. */
struct pick {
    uint32_t slot;
    const char *id; /* string table (stable while the segments live), NUL-terminated */
    uint32_t len;
    bool reserved;
    uint8_t rpb;
    float price;
    double score; /* victim score (drains) */
};
struct picks {
    struct pick *p;
    size_t n, cap;
};
bool bf_own_picks_add(struct picks *ps, const struct pick *p); /* false: out of memory */
char **bf_own_pick_ids(const struct picks *ps, char **store);  /* store[i] = p[i].id */
/* Registry index of an instance type / zone name: -1 for "" (any), -2 unknown. */
int bf_own_type_idx(const struct bf_shm *s, const char *name);
int bf_own_zone_idx(const struct bf_shm *s, const char *name);
/* The selector / id-list shape shared by the three machine instructions. */
bool bf_own_check_shape(size_t n_ids, char **ids, int32_t count, struct reply *r);
const char *bf_own_str(const char *s); /* NULL -> "" */

void bf_own_do_transfer(struct bf_cycle *c, const Instr *in, struct reply *r);
void bf_own_do_reassign(struct bf_cycle *c, const Instr *in, struct reply *r);
/* drain.c */
void bf_own_do_drain(struct bf_cycle *c, const Instr *in, struct reply *r);

/* instructions.c: applies one COORD_IN record and answers it on COORD_OUT. */
void bf_own_handle_instruction(struct bf_cycle *c, const uint8_t *rec, size_t len, int64_t now_ns);
/* Answers a record with FAILED (no store). */
void bf_own_fail_instruction(struct bf_cycle *c, const uint8_t *rec, size_t len, const char *why);

#endif
