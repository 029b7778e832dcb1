/*
 * labels.c — the names of the shared-memory enums as metrics, inspect and
 * the audit log print them (bigfleet/shm.h, "Labels"). Designated
 * initializers: reordering an enum cannot mislabel a series, and a value
 * added without a name is caught by the static assertions.
 */
#include "bigfleet/shm.h"

static const char *const outcome_labels[BF_OUT_COUNT] = {
    [BF_OUT_SUCCESS] = "success",
    [BF_OUT_CTX_CANCELED] = "ctx_canceled",
    [BF_OUT_FENCED] = "fenced",
    [BF_OUT_NO_SESSION] = "no_session",
    [BF_OUT_RACED_TO_IDLE] = "transition_raced_to_idle",
    [BF_OUT_TRANSITION_ERROR] = "transition_error",
    [BF_OUT_BLOB_ERROR] = "blob_error",
    [BF_OUT_PROVIDER_ERROR] = "provider_error",
    [BF_OUT_STALE_STATE] = "stale_state",
    [BF_OUT_INVENTORY_MISS] = "inventory_miss",
    [BF_OUT_MISSING_PROFILE] = "missing_profile",
    [BF_OUT_OTHER] = "other",
};

static const char *const ring_labels[BF_RING_COUNT] = {
    [BF_RING_ACTIONS] = "actions",       [BF_RING_BOOT_REQ] = "boot_req",
    [BF_RING_BOOT_RESP] = "boot_resp",   [BF_RING_NODE_EXEC] = "node_exec",
    [BF_RING_NODE_RECON] = "node_recon", [BF_RING_RECLAIM] = "reclaim",
    [BF_RING_AC_HINTS] = "ac_hints",     [BF_RING_COORD_IN] = "coord_in",
    [BF_RING_COORD_OUT] = "coord_out",   [BF_RING_OWN_AUDIT] = "own_audit",
};

static const char *const phase_labels[BF_PHASE_COUNT] = {
    [BF_PHASE_RECONCILE] = "reconcile", [BF_PHASE_SNAPREAD] = "snapread",
    [BF_PHASE_PHASE1] = "phase1",       [BF_PHASE_PHASE2] = "phase2",
    [BF_PHASE_PHASE3] = "phase3",       [BF_PHASE_EMIT] = "emit",
    [BF_PHASE_EXECUTE] = "execute",
};

_Static_assert(sizeof outcome_labels / sizeof *outcome_labels == BF_OUT_COUNT, "outcome labels");
_Static_assert(sizeof ring_labels / sizeof *ring_labels == BF_RING_COUNT, "ring labels");
_Static_assert(sizeof phase_labels / sizeof *phase_labels == BF_PHASE_COUNT, "phase labels");

const char *bf_outcome_label(int outcome)
{
    return outcome >= 0 && outcome < BF_OUT_COUNT && outcome_labels[outcome]
               ? outcome_labels[outcome]
               : "other";
}

const char *bf_ring_label(int ring)
{
    return ring >= 0 && ring < BF_RING_COUNT && ring_labels[ring] ? ring_labels[ring] : "unknown";
}

const char *bf_phase_label(int phase)
{
    return phase >= 0 && phase < BF_PHASE_COUNT && phase_labels[phase] ? phase_labels[phase]
                                                                       : "unknown";
}
