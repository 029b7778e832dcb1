/*
 * rails.c — the actuation rails as pure functions (seeds/000 §2.1, ADR-0046;
 * reference/shard.md §2 steps 7-9 and §6): the per-cluster reclaim
 * blast-radius cap that keeps the head of the release order, the
 * max-actions-per-cycle truncation that keeps the head of the list, and the
 * disposition order (pause wins over dry-run; neither applies the cap or the
 * truncation). They change what executes, never what the engine decided.
 *
 * Design notes: no engine state is read; the Configured count per cluster
 * comes from a caller callback (bf_engine_cluster_configured fits). A map
 * keyed by the cluster string (bigfleet/hmap.h) counts Reclaims.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cycle/engine/engine_internal.h"

struct capcount {
    uint64_t kept, limit;
};
static inline uint64_t str_hash(const char *s)
{
    return bf_hash_bytes(s, strlen(s));
}
static inline bool str_eq(const char *a, const char *b)
{
    return strcmp(a, b) == 0;
}
BF_HMAP_DEFINE(capmap, const char *, struct capcount, str_hash, str_eq)

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
    struct capmap t = {0};
    if (nrec > UINT32_MAX || capmap_reserve(&t, (uint32_t)nrec)) /* no put below grows */
        return n; /* cannot count: cap nothing rather than everything */
    size_t k = 0, dropped = 0;
    for (size_t i = 0; i < n; i++) {
        if (a[i].kind != BF_ACTION_RECLAIM) {
            a[k++] = a[i];
            continue;
        }
        const char *c = a[i].cluster ? a[i].cluster : "";
        struct capcount *cc = capmap_ref(&t, c);
        if (!cc) {
            uint32_t conf = configured ? configured(ctx, c) : 0;
            double lim = floor(fraction * (double)conf);
            struct capcount nc = {.limit =
                                      lim < 1 ? 1 : (lim > 1e18 ? (uint64_t)1e18 : (uint64_t)lim)};
            capmap_put(&t, c, nc); /* cannot fail: reserved for nrec clusters */
            cc = capmap_ref(&t, c);
        }
        if (cc->kept < cc->limit) {
            cc->kept++;
            a[k++] = a[i];
        } else {
            dropped++;
        }
    }
    capmap_free(&t);
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
