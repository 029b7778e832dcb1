/*
 * ownership.c — the ADR-0055 ownership store (LMDB under --data-dir), the
 * id maps, and the partition rule (bigfleet/ownership.h has the contract;
 * docs/adr0055.md the design).
 *
 * Design notes
 *   - Initialisation: bf_own_store_open opens the environment with the
 *     shared map size and creates the named databases in one write
 *     transaction; every later use is a plain read or write transaction by
 *     the caller (the cycle and the reconciler own their databases).
 *   - The view is a private copy loaded in one read transaction, so a
 *     process never sees half of a change the cycle committed.
 *   - Errors: LMDB codes are logged by the caller; here they map to -EIO
 *     (or -errno where LMDB returned one) with the LMDB text in err.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "bigfleet/ownership.h"

static const char *const db_names[BF_OWN_DB_COUNT] = {
    [BF_OWN_DB_DOMAINS] = "own.domains", [BF_OWN_DB_IN] = "own.in",
    [BF_OWN_DB_OUT] = "own.out",         [BF_OWN_DB_RESERVED] = "own.reserved",
    [BF_OWN_DB_DONE] = "own.done",       [BF_OWN_DB_DONESEQ] = "own.doneseq",
    [BF_OWN_DB_META] = "own.meta",       [BF_OWN_DB_OWNED] = "owned",
};

static int lmdb_err(int rc)
{
    return rc > 0 && rc < 4096 ? -rc : -EIO; /* LMDB's own codes are negative */
}

int bf_lmdb_open(const char *data_dir, MDB_env **env, char *err, size_t errlen)
{
    MDB_env *e = NULL;
    int rc = mdb_env_create(&e);
    if (rc)
        goto fail;
    if ((rc = mdb_env_set_mapsize(e, BF_LMDB_MAPSIZE)) ||
        (rc = mdb_env_set_maxdbs(e, BF_LMDB_MAXDBS)) || (rc = mdb_env_open(e, data_dir, 0, 0600)))
        goto fail;
    int dead = 0;
    mdb_reader_check(e, &dead);
    *env = e;
    return 0;
fail:
    if (err && errlen)
        snprintf(err, errlen, "LMDB in %s: %s", data_dir, mdb_strerror(rc));
    if (e)
        mdb_env_close(e);
    *env = NULL;
    return lmdb_err(rc);
}

int bf_own_store_open(const char *data_dir, struct bf_own_store **out, char *err, size_t errlen)
{
    *out = NULL;
    struct bf_own_store *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    int rc = bf_lmdb_open(data_dir, &s->env, err, errlen);
    if (rc) {
        free(s);
        return rc;
    }
    MDB_txn *txn;
    if ((rc = mdb_txn_begin(s->env, NULL, 0, &txn)) != 0)
        goto fail;
    for (int d = 0; d < BF_OWN_DB_COUNT; d++) {
        if ((rc = mdb_dbi_open(txn, db_names[d], MDB_CREATE, &s->dbi[d])) != 0) {
            mdb_txn_abort(txn);
            goto fail;
        }
    }
    if ((rc = mdb_txn_commit(txn)) != 0)
        goto fail;
    *out = s;
    return 0;
fail:
    if (err && errlen)
        snprintf(err, errlen, "LMDB ownership store in %s: %s", data_dir, mdb_strerror(rc));
    mdb_env_close(s->env);
    free(s);
    return lmdb_err(rc);
}

void bf_own_store_close(struct bf_own_store *s)
{
    if (!s)
        return;
    mdb_env_close(s->env);
    free(s);
}

uint64_t bf_own_store_generation(struct bf_own_store *s)
{
    MDB_txn *txn;
    uint64_t g = 0;
    if (mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn) != 0)
        return 0;
    MDB_val k = {10, (void *)"generation"}, v;
    if (mdb_get(txn, s->dbi[BF_OWN_DB_META], &k, &v) == 0 && v.mv_size == sizeof g)
        memcpy(&g, v.mv_data, sizeof g);
    mdb_txn_abort(txn);
    return g;
}

uint64_t bf_own_store_count(struct bf_own_store *s, int db)
{
    MDB_txn *txn;
    MDB_stat st;
    uint64_t n = 0;
    if (db < 0 || db >= BF_OWN_DB_COUNT || mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn) != 0)
        return 0;
    if (mdb_stat(txn, s->dbi[db], &st) == 0)
        n = st.ms_entries;
    mdb_txn_abort(txn);
    return n;
}

bool bf_own_all_mode(int policy, bool latched, uint32_t n_domains)
{
    if (policy == BF_OWN_POLICY_ALL)
        return true;
    if (policy == BF_OWN_POLICY_PARTITIONED)
        return false;
    return !latched && n_domains == 0;
}

const char *bf_own_source_name(int source)
{
    static const char *const n[BF_OWN_SRC_COUNT] = {"none", "all", "domain", "transfer",
                                                    "speculative"};
    return source >= 0 && source < BF_OWN_SRC_COUNT ? n[source] : "none";
}

/* ------------------------------------------------------------ id maps */

static uint64_t id_hash(const char *id, size_t len)
{
    uint64_t h = XXH3_64bits(id, len);
    return h ? h : 1;
}

static struct bf_idmap_entry *slot_of(const struct bf_idmap *m, uint64_t h, const char *id,
                                      size_t len, bool *found)
{
    uint32_t mask = m->cap - 1;
    for (uint32_t i = (uint32_t)h & mask;; i = (i + 1) & mask) {
        struct bf_idmap_entry *e = &m->e[i];
        if (!e->hash) {
            *found = false;
            return e;
        }
        if (e->hash == h && e->len == len && memcmp(e->id, id, len) == 0) {
            *found = true;
            return e;
        }
    }
}

static int grow(struct bf_idmap *m)
{
    uint32_t nc = m->cap ? m->cap * 2 : 64;
    struct bf_idmap_entry *ne = calloc(nc, sizeof *ne);
    if (!ne)
        return -ENOMEM;
    for (uint32_t i = 0; i < m->cap; i++) {
        struct bf_idmap_entry *e = &m->e[i];
        if (!e->hash)
            continue;
        uint32_t j = (uint32_t)e->hash & (nc - 1);
        while (ne[j].hash)
            j = (j + 1) & (nc - 1);
        ne[j] = *e;
    }
    free(m->e);
    m->e = ne;
    m->cap = nc;
    return 0;
}

int bf_idmap_put(struct bf_idmap *m, const char *id, size_t len, int64_t val)
{
    if (len > UINT32_MAX)
        return -EINVAL;
    if ((m->n + 1) * 2 > m->cap && grow(m))
        return -ENOMEM;
    uint64_t h = id_hash(id, len);
    bool found;
    struct bf_idmap_entry *e = slot_of(m, h, id, len, &found);
    if (found) {
        e->val = val;
        return 0;
    }
    char *copy = malloc(len + 1);
    if (!copy)
        return -ENOMEM;
    memcpy(copy, id, len);
    copy[len] = 0;
    *e = (struct bf_idmap_entry){h, copy, (uint32_t)len, val};
    m->n++;
    return 0;
}

bool bf_idmap_get(const struct bf_idmap *m, const char *id, size_t len, int64_t *val)
{
    if (!m->n)
        return false;
    bool found;
    struct bf_idmap_entry *e = slot_of(m, id_hash(id, len), id, len, &found);
    if (found && val)
        *val = e->val;
    return found;
}

bool bf_idmap_del(struct bf_idmap *m, const char *id, size_t len)
{
    if (!m->n)
        return false;
    bool found;
    struct bf_idmap_entry *e = slot_of(m, id_hash(id, len), id, len, &found);
    if (!found)
        return false;
    free(e->id);
    /* backward-shift deletion keeps every probe chain intact */
    uint32_t mask = m->cap - 1, i = (uint32_t)(e - m->e), j = i;
    m->e[i].hash = 0;
    for (;;) {
        j = (j + 1) & mask;
        if (!m->e[j].hash)
            break;
        uint32_t home = (uint32_t)m->e[j].hash & mask;
        /* move j into the hole at i unless its home lies cyclically in (i, j] */
        bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (stays)
            continue;
        m->e[i] = m->e[j];
        m->e[j].hash = 0;
        i = j;
    }
    m->n--;
    return true;
}

void bf_idmap_clear(struct bf_idmap *m)
{
    for (uint32_t i = 0; i < m->cap; i++)
        if (m->e[i].hash) {
            free(m->e[i].id);
            m->e[i].hash = 0;
        }
    m->n = 0;
}

void bf_idmap_free(struct bf_idmap *m)
{
    bf_idmap_clear(m);
    free(m->e);
    m->e = NULL;
    m->cap = 0;
}

/* ------------------------------------------------------------ the view */

void bf_own_view_free(struct bf_own_view *v)
{
    for (uint32_t i = 0; i < v->n_domains; i++) {
        free(v->domains[i].key);
        free(v->domains[i].value);
    }
    free(v->domains);
    v->domains = NULL;
    v->n_domains = 0;
    bf_idmap_free(&v->in);
    bf_idmap_free(&v->out);
}

static int load_xfers(MDB_txn *txn, MDB_dbi dbi, struct bf_idmap *m)
{
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, dbi, &cur);
    if (rc)
        return -EIO;
    MDB_val k, v;
    int err = 0;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0 && !err;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        uint8_t kind = BF_OWN_SRC_TRANSFER;
        if (v.mv_size >= sizeof(struct bf_own_xfer_rec)) {
            struct bf_own_xfer_rec r; /* LMDB values are not aligned */
            memcpy(&r, v.mv_data, sizeof r);
            kind = r.kind;
        }
        err = bf_idmap_put(m, k.mv_data, k.mv_size, kind);
    }
    mdb_cursor_close(cur);
    if (err)
        return err;
    return rc == MDB_NOTFOUND ? 0 : -EIO;
}

int bf_own_view_load(struct bf_own_store *s, int policy, struct bf_own_view *v)
{
    struct bf_own_view n = {.policy = policy};
    MDB_txn *txn;
    if (mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn) != 0)
        return -EIO;
    int err = 0;
    MDB_val k = {10, (void *)"generation"}, val;
    if (mdb_get(txn, s->dbi[BF_OWN_DB_META], &k, &val) == 0 && val.mv_size == sizeof n.generation)
        memcpy(&n.generation, val.mv_data, sizeof n.generation);
    MDB_val lk = {11, (void *)"partitioned"};
    n.latched = mdb_get(txn, s->dbi[BF_OWN_DB_META], &lk, &val) == 0;
    MDB_stat st;
    if (mdb_stat(txn, s->dbi[BF_OWN_DB_DOMAINS], &st) != 0) {
        err = -EIO;
        goto out;
    }
    if (st.ms_entries) {
        n.domains = calloc(st.ms_entries, sizeof *n.domains);
        if (!n.domains) {
            err = -ENOMEM;
            goto out;
        }
        MDB_cursor *cur;
        if (mdb_cursor_open(txn, s->dbi[BF_OWN_DB_DOMAINS], &cur) != 0) {
            err = -EIO;
            goto out;
        }
        int rc;
        for (rc = mdb_cursor_get(cur, &k, &val, MDB_FIRST); rc == 0 && n.n_domains < st.ms_entries;
             rc = mdb_cursor_get(cur, &k, &val, MDB_NEXT)) {
            const char *p = k.mv_data;
            const char *nul = memchr(p, 0, k.mv_size);
            if (!nul)
                continue; /* not a "key\0value" record: skipped */
            size_t kl = (size_t)(nul - p), vl = k.mv_size - kl - 1;
            struct bf_own_domain *d = &n.domains[n.n_domains];
            d->key = strndup(p, kl);
            d->value = strndup(nul + 1, vl);
            if (!d->key || !d->value) {
                free(d->key);
                free(d->value);
                err = -ENOMEM;
                break;
            }
            n.n_domains++;
        }
        mdb_cursor_close(cur);
        if (err)
            goto out;
    }
    if ((err = load_xfers(txn, s->dbi[BF_OWN_DB_IN], &n.in)) ||
        (err = load_xfers(txn, s->dbi[BF_OWN_DB_OUT], &n.out)))
        goto out;
out:
    mdb_txn_abort(txn);
    if (err) {
        bf_own_view_free(&n);
        return err;
    }
    n.all_mode = bf_own_all_mode(policy, n.latched, n.n_domains);
    bf_own_view_free(v);
    *v = n;
    return 0;
}

int bf_own_domain_of(const struct bf_own_view *v, bf_own_attr_fn attr, void *ctx)
{
    for (uint32_t i = 0; i < v->n_domains; i++) {
        const char *a = attr(ctx, v->domains[i].key);
        if (a && strcmp(a, v->domains[i].value) == 0)
            return (int)i;
    }
    return -1;
}

int bf_own_decide(const struct bf_own_view *v, const char *id, size_t len, int dom,
                  bf_own_attr_fn attr, void *ctx)
{
    int64_t kind;
    if (bf_idmap_get(&v->out, id, len, NULL))
        return BF_OWN_SRC_NONE;
    if (bf_idmap_get(&v->in, id, len, &kind))
        return kind == BF_OWN_SRC_SPECULATIVE ? BF_OWN_SRC_SPECULATIVE : BF_OWN_SRC_TRANSFER;
    if (v->all_mode)
        return BF_OWN_SRC_ALL;
    if (dom == -2)
        dom = attr ? bf_own_domain_of(v, attr, ctx) : -1;
    return dom >= 0 ? BF_OWN_SRC_DOMAIN : BF_OWN_SRC_NONE;
}
