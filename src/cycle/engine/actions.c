/*
 * actions.c — the cycle's action list (struct bf_engine_result.actions):
 * where every phase appends what it decided (seeds/000 §2 steps 7-9).
 *
 * Design notes. Below the phases and the driver: Phase 1, 2 and 3 call
 * bfe_emit(), engine.c hands the list out, and neither depends on the other
 * for it (scripts/lint-includes checks that the engine's files call each
 * other without a circle through here). The list keeps its capacity across
 * cycles; the machine id is resolved at emit time, so a result's pointers
 * are valid until the next cycle (include/bigfleet/engine.h).
 */
#include <errno.h>

#include "cycle/engine/engine_internal.h"

int bfe_emit(struct bf_engine *e, const struct bf_engine_action *a)
{
    if (GROW(e->acts, e->cap_acts, e->n_acts + 1))
        return -ENOMEM;
    struct bf_engine_action *x = &e->acts[e->n_acts++];
    *x = *a;
    x->machine_id = bfe_machine_id(e, a->slot);
    return 0;
}
