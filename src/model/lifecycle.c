/*
 * lifecycle.c — machine states, legal transitions, capacity types, idle holds,
 * penalty buckets, effective cost and Invariant.
 *
 * Implements reference/engine.md §1.2, §1.3, §1.8 and §8 and the shard's
 * ingest screen (shard.md §3.5). Pure functions; no state.
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "bigfleet/model.h"

static const char *const state_names[BF_STATE_COUNT] = {"Unspecified", "Speculative", "Creating",
                                                        "Idle",        "Configuring", "Configured",
                                                        "Draining",    "Deleting",    "Failed"};

const char *bf_state_name(int state)
{
    if (state < 0 || state >= BF_STATE_COUNT)
        return "Unknown";
    return state_names[state];
}

int bf_state_from_name(const char *name)
{
    for (int i = 0; i < BF_STATE_COUNT; i++)
        if (strcasecmp(name, state_names[i]) == 0)
            return i;
    return -1;
}

bool bf_state_is_stable(int s)
{
    return s == BF_STATE_SPECULATIVE || s == BF_STATE_IDLE || s == BF_STATE_CONFIGURED;
}

bool bf_state_is_transitional(int s)
{
    return s == BF_STATE_CREATING || s == BF_STATE_CONFIGURING || s == BF_STATE_DRAINING ||
           s == BF_STATE_DELETING;
}

/* The validTransitions table as a bitmask per source state (bit = target). */
#define B(s) (1u << (s))
static const unsigned transitions[BF_STATE_COUNT] = {
    [BF_STATE_SPECULATIVE] = B(BF_STATE_CREATING),
    [BF_STATE_CREATING] = B(BF_STATE_IDLE),
    [BF_STATE_IDLE] = B(BF_STATE_CONFIGURING) | B(BF_STATE_DELETING),
    [BF_STATE_CONFIGURING] = B(BF_STATE_CONFIGURED) | B(BF_STATE_IDLE),
    [BF_STATE_CONFIGURED] = B(BF_STATE_DRAINING),
    [BF_STATE_DRAINING] = B(BF_STATE_IDLE),
    [BF_STATE_DELETING] = B(BF_STATE_SPECULATIVE),
};
#undef B

bool bf_can_transition(int from, int to)
{
    if (from <= 0 || from >= BF_STATE_COUNT || to <= 0 || to >= BF_STATE_COUNT)
        return false;
    if (to == BF_STATE_FAILED)
        return bf_state_is_transitional(from);
    return (transitions[from] >> to) & 1u;
}

const char *bf_capacity_type_name(int ct)
{
    switch (ct) {
    case BF_CT_BARE_METAL:
        return "BareMetal";
    case BF_CT_RESERVED:
        return "Reserved";
    case BF_CT_ON_DEMAND:
        return "OnDemand";
    case BF_CT_SPOT:
        return "Spot";
    default:
        return "unspecified";
    }
}

int64_t bf_idle_hold_seconds(int ct)
{
    switch (ct) {
    case BF_CT_ON_DEMAND:
        return BF_ONDEMAND_IDLE_HOLD_S;
    case BF_CT_SPOT:
        return BF_SPOT_IDLE_HOLD_S;
    default:
        return -1;
    }
}

uint8_t bf_bucket_for_dollars(double d)
{
    if (isnan(d))
        return BF_BUCKET_PINNED;
    if (d <= 0)
        return BF_BUCKET_ZERO;
    if (d <= 0.5)
        return BF_BUCKET_HALF_DOLLAR;
    double bound = 1.0;
    for (int b = BF_BUCKET_FIRST_POW2; b <= BF_BUCKET_LAST_POW2; b++, bound *= 2.0)
        if (d <= bound)
            return (uint8_t)b;
    return BF_BUCKET_PINNED;
}

double bf_bucket_upper_bound(int b)
{
    if (b == BF_BUCKET_HALF_DOLLAR)
        return 0.5;
    if (b >= BF_BUCKET_FIRST_POW2 && b <= BF_BUCKET_LAST_POW2)
        return ldexp(1.0, b - BF_BUCKET_FIRST_POW2);
    if (b == BF_BUCKET_PINNED)
        return INFINITY;
    return 0.0;
}

static const char *const bucket_labels[BF_BUCKET_COUNT] = {
    "0",      "0",      "0.5",     "1",       "2",       "4",       "8",
    "16",     "32",     "64",      "128",     "256",     "512",     "1024",
    "2048",   "4096",   "8192",    "16384",   "32768",   "65536",   "131072",
    "262144", "524288", "1048576", "2097152", "4194304", "8388608", "pinned"};

const char *bf_bucket_label(int b)
{
    if (b < 0 || b > BF_BUCKET_MAX)
        return "0";
    return bucket_labels[b];
}

double bf_effective_cost(double price, double p, double penalty)
{
    if (penalty < 0 || isnan(penalty))
        penalty = 0;
    if (isinf(penalty))
        return p > 0 ? INFINITY : price;
    return price + p * penalty;
}

const char *bf_reject_reason_label(int reason)
{
    switch (reason) {
    case BF_REJECT_PRICE:
        return "price";
    case BF_REJECT_PROBABILITY:
        return "interruption_probability";
    case BF_REJECT_STRUCTURAL:
        return "structural";
    default:
        return "";
    }
}

static int reject(int reason, char *msg, size_t n, const char *text)
{
    if (msg && n)
        snprintf(msg, n, "%s", text);
    return reason;
}

int bf_machine_invariant(const struct bf_invariant_input *m, char *msg, size_t n)
{
    char buf[160];
    if (!m->has_id)
        return reject(BF_REJECT_STRUCTURAL, msg, n, "machine has no id");
    switch (m->state) {
    case BF_STATE_SPECULATIVE:
    case BF_STATE_CREATING:
        if (m->host_set)
            return reject(BF_REJECT_STRUCTURAL, msg, n,
                          "speculative/creating machine must have an empty host");
        if (m->cluster_set)
            return reject(BF_REJECT_STRUCTURAL, msg, n,
                          "speculative/creating machine must not be bound to a cluster");
        break;
    case BF_STATE_IDLE:
    case BF_STATE_CONFIGURING:
    case BF_STATE_DELETING:
        if (!m->host_set)
            return reject(BF_REJECT_STRUCTURAL, msg, n,
                          "idle/configuring/deleting machine must have a host");
        break;
    case BF_STATE_CONFIGURED:
    case BF_STATE_DRAINING:
        if (!m->host_set || !m->cluster_set)
            return reject(BF_REJECT_STRUCTURAL, msg, n,
                          "configured/draining machine must have a host and a cluster");
        break;
    case BF_STATE_FAILED:
        if (!m->has_last_error)
            return reject(BF_REJECT_STRUCTURAL, msg, n, "failed machine must carry last_error");
        break;
    default:
        snprintf(buf, sizeof buf, "invalid machine state %d", m->state);
        return reject(BF_REJECT_STRUCTURAL, msg, n, buf);
    }
    if (isnan(m->price_per_hour) || m->price_per_hour < 0) {
        snprintf(buf, sizeof buf, "price_per_hour %g must be >= 0 and not NaN", m->price_per_hour);
        return reject(BF_REJECT_PRICE, msg, n, buf);
    }
    if (isnan(m->interruption_probability) || m->interruption_probability < 0 ||
        m->interruption_probability > 1) {
        snprintf(buf, sizeof buf, "interruption_probability %g must be in [0,1]",
                 m->interruption_probability);
        return reject(BF_REJECT_PROBABILITY, msg, n, buf);
    }
    if (msg && n)
        msg[0] = 0;
    return BF_REJECT_NONE;
}

const char *bf_action_kind_name(int kind)
{
    static const char *const n[BF_ACTION_KIND_COUNT] = {"",        "Bootstrap", "Provision",
                                                        "Reclaim", "Preempt",   "Delete"};
    return (kind > 0 && kind < BF_ACTION_KIND_COUNT) ? n[kind] : "";
}

const char *bf_action_reason_name(int reason)
{
    static const char *const n[] = {"",
                                    "phase1.idle",
                                    "phase1.speculative",
                                    "phase2.inversion",
                                    "phase3.excess",
                                    "phase3.release",
                                    "cross_shard.drain"};
    return (reason > 0 && reason <= BF_REASON_CROSS_SHARD_DRAIN) ? n[reason] : "";
}

const char *bf_unmet_reason_name(int reason)
{
    static const char *const n[] = {"SATISFIED", "PRIORITY_STARVED", "NO_MATCHING_SUPPLY",
                                    "TOPOLOGY_UNSATISFIABLE", "PREEMPTION_EXHAUSTED"};
    return (reason >= 0 && reason <= BF_UNMET_PREEMPTION_EXHAUSTED) ? n[reason] : "";
}
