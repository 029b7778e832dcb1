/*
 * epoch.c — the shard epoch in LMDB under --data-dir: read, +1, write back at
 * every supervisor start (reference/wire.md §11: the epoch feeds the provider
 * fencing token; a higher epoch fences any older process still running).
 *
 * The environment is opened and closed here, before any fork (LMDB forbids
 * using an MDB_env across fork()).
 */
#include <errno.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bigfleet/log.h"
#include "bigfleet/ownership.h"
#include "supervisor.h"

static int mkdir_p(const char *path)
{
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = 0;
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
                return -errno;
            *p = '/';
        }
    }
    if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
        return -errno;
    return 0;
}

int bf_epoch_bump(const char *data_dir, int64_t *epoch, char *err, size_t errlen)
{
    int rc = mkdir_p(data_dir);
    if (rc) {
        snprintf(err, errlen, "cannot create --data-dir %s: %s", data_dir, strerror(-rc));
        return rc;
    }
    MDB_env *env;
    MDB_txn *txn = NULL;
    MDB_dbi dbi;
    /* the environment every process opens (shared map size; stale readers cleared) */
    if ((rc = bf_lmdb_open(data_dir, &env, err, errlen)) != 0)
        return rc;
    if ((rc = mdb_txn_begin(env, NULL, 0, &txn)) != 0)
        goto fail_env;
    if ((rc = mdb_dbi_open(txn, NULL, 0, &dbi)) != 0)
        goto fail_txn;
    MDB_val k = {5, (void *)"epoch"}, v;
    int64_t cur = 0;
    rc = mdb_get(txn, dbi, &k, &v);
    if (rc == 0) {
        char buf[32];
        if (v.mv_size == 0 || v.mv_size >= sizeof buf) {
            rc = EINVAL;
            goto fail_txn;
        }
        memcpy(buf, v.mv_data, v.mv_size);
        buf[v.mv_size] = 0;
        char *end;
        cur = strtoll(buf, &end, 10);
        if (*end || cur < 0) {
            snprintf(err, errlen, "corrupt epoch record \"%s\" in %s", buf, data_dir);
            mdb_txn_abort(txn);
            mdb_env_close(env);
            return -EINVAL;
        }
    } else if (rc != MDB_NOTFOUND) {
        goto fail_txn;
    }
    char out[32];
    int n = snprintf(out, sizeof out, "%lld", (long long)(cur + 1));
    v.mv_size = (size_t)n;
    v.mv_data = out;
    if ((rc = mdb_put(txn, dbi, &k, &v, 0)) != 0)
        goto fail_txn;
    if ((rc = mdb_txn_commit(txn)) != 0)
        goto fail_env;
    mdb_env_close(env);
    *epoch = cur + 1;
    return 0;
fail_txn:
    mdb_txn_abort(txn);
fail_env:
    mdb_env_close(env);
    snprintf(err, errlen, "LMDB epoch in %s: %s", data_dir, mdb_strerror(rc));
    return rc > 0 ? -rc : -EIO;
}
