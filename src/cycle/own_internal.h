/*
 * own_internal.h — private state of the cycle's ownership controller
 * (src/cycle/ownership.c, src/cycle/instructions.c; ADR-0055,
 * docs/adr0055.md).
 *
 * The cycle is the single writer of the partition's rule inputs in LMDB
 * (domains, transfers in and out, reservations, the instruction dedup set,
 * the generation); it keeps a private copy of them (the view and the
 * reservation map) that it updates in step with every commit.
 */
#ifndef BF_CYCLE_OWN_INTERNAL_H
#define BF_CYCLE_OWN_INTERNAL_H

#include "bigfleet/ownership.h"
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
void own_touch(struct bf_cycle *c, uint32_t slot);
/* Slot of a machine id present in the mirror, or -1. */
int64_t own_slot_of(struct bf_cycle *c, const char *id, size_t len);
/* The rule for the machine in `slot` (reads its record and profile):
 * enum bf_own_source, BF_OWN_SRC_NONE when not owned or unreadable. */
int own_source_of_slot(struct bf_cycle *c, uint32_t slot, const struct bf_own_view *v);
/* One ownership audit record to the executor (ring OWN_AUDIT). */
void own_audit(struct bf_cycle *c, int event, const char *machine, const char *instruction,
               const char *from, const char *to, const char *detail, int64_t until_ns,
               int32_t preemptor_priority);
/* Bumps own.meta generation inside txn; returns the new value (0 on error). */
uint64_t own_bump_generation(struct bf_cycle *c, MDB_txn *txn);
void own_resv_recompute_expiry(struct bf_cycle_own *o);

/* instructions.c: applies one COORD_IN record and answers it on COORD_OUT. */
void own_handle_instruction(struct bf_cycle *c, const uint8_t *rec, size_t len, int64_t now_ns);
/* Answers a record with FAILED (no store). */
void own_fail_instruction(struct bf_cycle *c, const uint8_t *rec, size_t len, const char *why);

#endif
