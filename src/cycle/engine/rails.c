/*
 * rails.c — the actuation rails as pure functions (seeds/000 §2.1, ADR-0046;
 * reference/shard.md §2 steps 7-9 and §6): the per-cluster reclaim
 * blast-radius cap that keeps the head of the release order, the
 * max-actions-per-cycle truncation that keeps the head of the list, and the
 * disposition order (pause wins over dry-run; neither applies the cap or the
 * truncation). They change what executes, never what the engine decided.
 *
 * Design notes: no engine state is read; the Configured count per cluster
 * comes from a caller callback (bf_engine_cluster_configured fits). A small
 * open-addressing table keyed by the cluster string counts Reclaims.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cycle/engine/engine_internal.h"

struct capslot {
    const char *cluster;
    uint64_t kept, limit;
};

static uint64_t str_hash(const char *s)
{
    return bfe_hash_bytes(s, strlen(s), 13);
}

size_t bf_engine_rail_reclaim_cap(struct bf_engine_action *a, size_t n, double fraction,
                                  uint32_t (*configured)(void *ctx, const char *cluster), void *ctx,
                                  size_t *capped)
{
    if (capped)
        *capped = 0;
    if (!a || !n || !(fraction > 0))
        return n;
    size_t nrec = 0;
    for (size_t i = 0; i < n; i++)
        nrec += a[i].kind == BF_ACTION_RECLAIM;
    if (!nrec)
        return n;
    size_t cap = 16;
    while (cap < nrec * 2)
        cap *= 2;
    struct capslot stackt[64];
    struct capslot *t = cap <= 64 ? stackt : calloc(cap, sizeof *t);
    if (!t)
        return n; /* cannot count: cap nothing rather than everything */
    memset(t, 0, cap * sizeof *t);
    size_t k = 0, dropped = 0;
    for (size_t i = 0; i < n; i++) {
        if (a[i].kind != BF_ACTION_RECLAIM) {
            a[k++] = a[i];
            continue;
        }
        const char *c = a[i].cluster ? a[i].cluster : "";
        size_t j = (size_t)str_hash(c) & (cap - 1);
        while (t[j].cluster && strcmp(t[j].cluster, c) != 0)
            j = (j + 1) & (cap - 1);
        if (!t[j].cluster) {
            t[j].cluster = c;
            uint32_t conf = configured ? configured(ctx, c) : 0;
            double lim = floor(fraction * (double)conf);
            t[j].limit = lim < 1 ? 1 : (lim > 1e18 ? (uint64_t)1e18 : (uint64_t)lim);
        }
        if (t[j].kept < t[j].limit) {
            t[j].kept++;
            a[k++] = a[i];
        } else {
            dropped++;
        }
    }
    if (t != stackt)
        free(t);
    if (capped)
        *capped = dropped;
    return k;
}

size_t bf_engine_rail_max_actions(size_t n, uint32_t max, size_t *deferred)
{
    size_t keep = (max && n > max) ? max : n;
    if (deferred)
        *deferred = n - keep;
    return keep;
}

void bf_engine_rails_apply(const struct bf_rails_config *rc, struct bf_engine_action *a, size_t n,
                           uint32_t (*configured)(void *ctx, const char *cluster), void *ctx,
                           struct bf_rails_outcome *out)
{
    memset(out, 0, sizeof *out);
    if (rc->actuation_paused || rc->dry_run) {
        uint32_t *cnt = rc->actuation_paused ? out->suppressed : out->dryrun;
        for (size_t i = 0; i < n; i++)
            if (a[i].kind < BF_ACTION_KIND_COUNT)
                cnt[a[i].kind]++;
        out->n_execute = 0;
        return;
    }
    size_t m =
        bf_engine_rail_reclaim_cap(a, n, rc->reclaim_cap_fraction, configured, ctx, &out->capped);
    out->n_execute = bf_engine_rail_max_actions(m, rc->max_actions, &out->deferred);
    out->wake = out->deferred > 0;
}
