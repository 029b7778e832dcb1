/*
 * tables.c — the session's small process-local tables: a u64 -> u64 hash
 * map, and the cluster-row mirror shared by the loop and the ingest
 * thread (session_internal.h).
 *
 * Cluster rows: the session is their only writer. Both threads change
 * fields of the mirror and publish the whole row under ct->mu, so a
 * connect/disconnect on the loop and a rollup publish on the ingest thread
 * never overwrite each other's fields. At start the mirror is loaded from
 * the published rows (a restarted session keeps demand, the first-rollup
 * gate and rail-2 state: they live in shared memory) and `connected` is
 * cleared.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/log.h"
#include "session_internal.h"

/* ------------------------------------------------------------ u64map */

static uint32_t h64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return (uint32_t)k;
}

int u64map_init(struct u64map *m, uint32_t cap)
{
    uint32_t c = 16;
    while (c < cap)
        c *= 2;
    m->k = calloc(c, sizeof *m->k);
    m->v = calloc(c, sizeof *m->v);
    if (!m->k || !m->v) {
        free(m->k);
        free(m->v);
        m->k = NULL;
        m->v = NULL;
        return -ENOMEM;
    }
    m->mask = c - 1;
    m->n = 0;
    return 0;
}

void u64map_free(struct u64map *m)
{
    free(m->k);
    free(m->v);
    memset(m, 0, sizeof *m);
}

static uint32_t slot_of(const struct u64map *m, uint64_t key, bool *found)
{
    uint32_t i = h64(key) & m->mask;
    while (m->k[i]) {
        if (m->k[i] == key) {
            *found = true;
            return i;
        }
        i = (i + 1) & m->mask;
    }
    *found = false;
    return i;
}

bool u64map_get(const struct u64map *m, uint64_t key, uint64_t *val)
{
    if (!key || !m->k)
        return false;
    bool f;
    uint32_t i = slot_of(m, key, &f);
    if (f && val)
        *val = m->v[i];
    return f;
}

static int grow(struct u64map *m)
{
    struct u64map n;
    if (u64map_init(&n, (m->mask + 1) * 2))
        return -ENOMEM;
    for (uint32_t i = 0; i <= m->mask; i++) {
        if (!m->k[i])
            continue;
        bool f;
        uint32_t j = slot_of(&n, m->k[i], &f);
        n.k[j] = m->k[i];
        n.v[j] = m->v[i];
        n.n++;
    }
    u64map_free(m);
    *m = n;
    return 0;
}

int u64map_put(struct u64map *m, uint64_t key, uint64_t val)
{
    if (!key)
        return -EINVAL;
    bool f;
    uint32_t i = slot_of(m, key, &f);
    if (f) {
        m->v[i] = val;
        return 0;
    }
    if ((m->n + 1) * 2 > m->mask + 1) {
        if (grow(m))
            return -ENOMEM;
        i = slot_of(m, key, &f);
    }
    m->k[i] = key;
    m->v[i] = val;
    m->n++;
    return 0;
}

bool u64map_del(struct u64map *m, uint64_t key, uint64_t *val)
{
    if (!key || !m->k)
        return false;
    bool f;
    uint32_t i = slot_of(m, key, &f);
    if (!f)
        return false;
    if (val)
        *val = m->v[i];
    uint32_t j = i;
    for (;;) {
        m->k[i] = 0;
        for (;;) {
            j = (j + 1) & m->mask;
            if (!m->k[j])
                goto done;
            uint32_t home = h64(m->k[j]) & m->mask;
            if (i <= j ? (home <= i || home > j) : (home <= i && home > j))
                break;
        }
        m->k[i] = m->k[j];
        m->v[i] = m->v[j];
        i = j;
    }
done:
    m->n--;
    return true;
}

/* ------------------------------------------------------------ clusters */

int ct_init(struct cluster_tab *ct, struct bf_shm *shm)
{
    memset(ct, 0, sizeof *ct);
    ct->shm = shm;
    ct->rec = calloc(shm->max_clusters, sizeof *ct->rec);
    if (!ct->rec)
        return -ENOMEM;
    pthread_mutex_init(&ct->mu, NULL);
    uint32_t n = BF_SHARED_LOAD(shm->needs->n_clusters);
    if (n > shm->max_clusters)
        n = shm->max_clusters;
    ct->n = n;
    for (uint32_t i = 0; i < n; i++) {
        int rc = bf_cluster_read(shm, i, &ct->rec[i], NULL);
        if (rc) {
            /* the supervisor repairs a row its dead writer left mid-write
             * before restarting us; a row still unreadable is reported */
            BF_ERROR("cannot read a published cluster row", "cluster_row=%u error=%d", i, rc);
            continue;
        }
        if (ct->rec[i].connected) {
            ct->rec[i].connected = 0;
            ct->rec[i].connected_since_ns = 0;
            pthread_mutex_lock(&ct->mu);
            ct_publish_locked(ct, i);
            pthread_mutex_unlock(&ct->mu);
        }
    }
    return 0;
}

void ct_destroy(struct cluster_tab *ct)
{
    if (!ct->rec)
        return;
    pthread_mutex_destroy(&ct->mu);
    free(ct->rec);
    ct->rec = NULL;
}

void ct_publish_locked(struct cluster_tab *ct, uint32_t idx)
{
    bf_cluster_write(ct->shm, idx, &ct->rec[idx]);
}
