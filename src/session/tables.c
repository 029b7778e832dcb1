/*
 * tables.c — the session's cluster-row mirror shared by the loop and the
 * ingest thread (session_internal.h; its u64 -> u64 map is bigfleet/hmap.h).
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

/* ------------------------------------------------------------ clusters */

int bf_ctab_init(struct cluster_tab *ct, struct bf_shm *shm)
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
            bf_ctab_publish_locked(ct, i);
            pthread_mutex_unlock(&ct->mu);
        }
    }
    return 0;
}

void bf_ctab_destroy(struct cluster_tab *ct)
{
    if (!ct->rec)
        return;
    pthread_mutex_destroy(&ct->mu);
    free(ct->rec);
    ct->rec = NULL;
}

void bf_ctab_publish_locked(struct cluster_tab *ct, uint32_t idx)
{
    bf_cluster_write(ct->shm, idx, &ct->rec[idx]);
}
