/*
 * store.c — optional write-through persistence of the simulated provider in
 * an LMDB environment (cfg.state_path), so the pool, the fencing marks and the
 * operation ids survive a restart (reference/ecosystem.md §2.2 "Restart",
 * §2.3 B1001–B1007).
 *
 * Layout: three named databases.
 *   "meta"     key "state" -> version, revision, last op number, last host
 *              serial, last fence number (fixed 40 bytes, native endian);
 *   "machines" key machine id -> state, host serial, op numbers per kind,
 *              instance type, zone and rack by name, cluster, last_error and
 *              the canonical shard_metadata blob;
 *   "fences"   key fence number (8 bytes, big endian) -> epoch, seq,
 *              shard_id, machine id (marks of unknown ids are kept too).
 *
 * Design notes: every public call of the simulator ends with one write
 * transaction holding its dirty machines, dirty fences and the meta record
 * (sim.c call_end), so whatever an RPC acknowledged is in the file before the
 * reply leaves. By default the environment is opened MDB_NOSYNC: a committed
 * transaction survives the process being killed (the page cache has it), not
 * a power cut; cfg.state_fsync makes every commit durable on disk. Types,
 * zones and racks are stored by name, so a catalog that no longer has a
 * stored type is a load error rather than a silent re-mapping. A failed
 * commit leaves the dirty set in place for the next flush.
 */
#include <errno.h>
#include <lmdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bigfleet/util.h"
#include "simprovider/sim_internal.h"

#define META_VERSION 1u
#define REC_VERSION  1u

struct sim_store {
    MDB_env *env;
    MDB_dbi meta, machines, fences;
    struct sim_buf buf;
};

struct meta_rec {
    uint32_t version, pad;
    int64_t rev;
    uint64_t next_op;
    uint64_t next_host;
    uint64_t next_fence;
};

static int map_err(int rc)
{
    if (rc > 0)
        return -rc;
    if (rc == MDB_MAP_FULL)
        return -ENOSPC;
    return -EIO;
}

int bf_sim_store_open(struct bf_sim *s, char *err, size_t err_len)
{
    const char *path = s->cfg.state_path;
    struct sim_store *st = calloc(1, sizeof *st);
    if (!st)
        return -ENOMEM;
    int rc;
    if (mkdir(path, 0755) && errno != EEXIST) {
        rc = -errno;
        bf_errf(err, err_len, "state %s: %s", path, strerror(errno));
        free(st);
        return rc;
    }
    if ((rc = mdb_env_create(&st->env)))
        goto fail;
    if ((rc = mdb_env_set_maxdbs(st->env, 4)) ||
        (rc = mdb_env_set_mapsize(st->env, s->cfg.state_map_size)))
        goto fail_env;
    unsigned flags = MDB_NOTLS;
    if (!s->cfg.state_fsync)
        flags |= MDB_NOSYNC | MDB_NOMETASYNC;
    if ((rc = mdb_env_open(st->env, path, flags, 0644)))
        goto fail_env;
    MDB_txn *txn;
    if ((rc = mdb_txn_begin(st->env, NULL, 0, &txn)))
        goto fail_env;
    if ((rc = mdb_dbi_open(txn, "meta", MDB_CREATE, &st->meta)) ||
        (rc = mdb_dbi_open(txn, "machines", MDB_CREATE, &st->machines)) ||
        (rc = mdb_dbi_open(txn, "fences", MDB_CREATE, &st->fences))) {
        mdb_txn_abort(txn);
        goto fail_env;
    }
    if ((rc = mdb_txn_commit(txn)))
        goto fail_env;
    s->store = st;
    return 0;
fail_env:
    mdb_env_close(st->env);
fail:
    bf_errf(err, err_len, "state %s: %s", path, mdb_strerror(rc));
    free(st);
    return map_err(rc);
}

void bf_sim_store_close(struct bf_sim *s)
{
    struct sim_store *st = s->store;
    if (!st)
        return;
    mdb_env_close(st->env);
    bf_sim_buf_free(&st->buf);
    free(st);
    s->store = NULL;
}

/* ------------------------------------------------------------ records */

static uint8_t *put_u16s(uint8_t *p, const void *d, size_t n)
{
    uint16_t l = (uint16_t)n;
    memcpy(p, &l, 2);
    if (n)
        memcpy(p + 2, d, n);
    return p + 2 + n;
}

static uint8_t *put_u32s(uint8_t *p, const void *d, size_t n)
{
    uint32_t l = (uint32_t)n;
    memcpy(p, &l, 4);
    if (n)
        memcpy(p + 4, d, n);
    return p + 4 + n;
}

static int put_machine(struct bf_sim *s, MDB_txn *txn, uint32_t i)
{
    struct sim_store *st = s->store;
    const struct sim_machine *m = &s->m[i];
    const char *type = s->types[m->type].t.name;
    const char *zone = sim_str(&s->zones, s->rack_zone[m->rack]);
    const char *rack = sim_str(&s->racks, m->rack);
    size_t cl = m->cluster ? sim_strlen(&s->clusters, m->cluster) : 0;
    size_t el = m->err ? sim_strlen(&s->errors, m->err) : 0;
    size_t ml = m->md ? s->md.v[m->md].raw_len : 0;
    size_t n = 4 + 8 + 8 * BF_SIM_KIND_COUNT + 6 + strlen(type) + strlen(zone) + strlen(rack) + 12 +
               cl + el + ml;
    st->buf.len = 0;
    if (bf_sim_buf_reserve(&st->buf, n))
        return -ENOMEM;
    uint8_t *p = st->buf.p;
    p[0] = REC_VERSION;
    p[1] = m->state;
    p[2] = p[3] = 0;
    p += 4;
    memcpy(p, &m->host, 8);
    p += 8;
    uint64_t ops[BF_SIM_KIND_COUNT] = {0};
    if (m->ops)
        memcpy(ops, s->ops[m->ops - 1], sizeof ops);
    memcpy(p, ops, sizeof ops);
    p += sizeof ops;
    p = put_u16s(p, type, strlen(type));
    p = put_u16s(p, zone, strlen(zone));
    p = put_u16s(p, rack, strlen(rack));
    p = put_u32s(p, m->cluster ? sim_str(&s->clusters, m->cluster) : NULL, cl);
    p = put_u32s(p, m->err ? sim_str(&s->errors, m->err) : NULL, el);
    p = put_u32s(p, m->md ? s->md.v[m->md].raw : NULL, ml);
    MDB_val k = {sim_midlen(s, i), (void *)sim_mid(s, i)};
    MDB_val v = {(size_t)(p - st->buf.p), st->buf.p};
    return mdb_put(txn, st->machines, &k, &v, 0);
}

static void fence_key(uint64_t no, uint8_t out[8])
{
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)(no >> (56 - 8 * i));
}

static int put_fence(struct bf_sim *s, MDB_txn *txn, uint32_t f)
{
    struct sim_store *st = s->store;
    const struct sim_fence *fe = &s->fences[f];
    const char *shard = sim_str(&s->shards, fe->shard);
    size_t sl = sim_strlen(&s->shards, fe->shard);
    const char *mid;
    size_t ml;
    if (fe->mref & SIM_GHOST_BIT) {
        uint32_t g = fe->mref & ~SIM_GHOST_BIT;
        mid = sim_str(&s->ghosts, g);
        ml = sim_strlen(&s->ghosts, g);
    } else {
        mid = sim_mid(s, fe->mref);
        ml = sim_midlen(s, fe->mref);
    }
    st->buf.len = 0;
    if (bf_sim_buf_reserve(&st->buf, 24 + sl + ml))
        return -ENOMEM;
    uint8_t *p = st->buf.p;
    memcpy(p, &fe->epoch, 8);
    memcpy(p + 8, &fe->seq, 8);
    p = put_u32s(p + 16, shard, sl);
    p = put_u32s(p, mid, ml);
    uint8_t key[8];
    fence_key(fe->no, key);
    MDB_val k = {8, key};
    MDB_val v = {(size_t)(p - st->buf.p), st->buf.p};
    return mdb_put(txn, st->fences, &k, &v, 0);
}

int bf_sim_store_flush(struct bf_sim *s)
{
    struct sim_store *st = s->store;
    MDB_txn *txn;
    int rc = mdb_txn_begin(st->env, NULL, 0, &txn);
    if (rc)
        goto fail;
    if (s->dirty_all) {
        for (uint32_t i = 0; i < s->n && !rc; i++)
            rc = put_machine(s, txn, i);
        for (uint32_t f = 0; f < s->n_fences && !rc; f++)
            rc = put_fence(s, txn, f);
    } else {
        for (size_t k = 0; k < s->n_dirty && !rc; k++)
            rc = put_machine(s, txn, s->dirty[k]);
        for (size_t k = 0; k < s->n_dirty_f && !rc; k++)
            rc = put_fence(s, txn, s->dirty_f[k]);
    }
    if (!rc) {
        struct meta_rec mr = {.version = META_VERSION,
                              .rev = s->rev,
                              .next_op = s->next_op,
                              .next_host = s->next_host,
                              .next_fence = s->next_fence_no};
        MDB_val k = {5, "state"}, v = {sizeof mr, &mr};
        rc = mdb_put(txn, st->meta, &k, &v, 0);
    }
    if (rc) {
        mdb_txn_abort(txn);
        goto fail;
    }
    if ((rc = mdb_txn_commit(txn)))
        goto fail;
    for (size_t k = 0; k < s->n_dirty; k++)
        s->m[s->dirty[k]].flags &= (uint8_t)~SIM_F_DIRTY;
    for (size_t k = 0; k < s->n_dirty_f; k++)
        s->fences[s->dirty_f[k]].dirty = 0;
    s->n_dirty = s->n_dirty_f = 0;
    s->dirty_all = false;
    s->meta_dirty = false;
    return 0;
fail:
    return -EIO;
}

/* ------------------------------------------------------------ load */

struct rdr {
    const uint8_t *p, *e;
    bool bad;
};

static const uint8_t *take(struct rdr *r, size_t n)
{
    if (r->bad || (size_t)(r->e - r->p) < n) {
        r->bad = true;
        return NULL;
    }
    const uint8_t *p = r->p;
    r->p += n;
    return p;
}

static const uint8_t *take_s(struct rdr *r, size_t width, size_t *len)
{
    const uint8_t *p = take(r, width);
    if (!p)
        return NULL;
    uint32_t l = 0;
    if (width == 2) {
        uint16_t l16;
        memcpy(&l16, p, 2);
        l = l16;
    } else {
        memcpy(&l, p, 4);
    }
    *len = l;
    const uint8_t *d = take(r, l);
    return d ? d : (l == 0 ? p : NULL);
}

static long load_machines(struct bf_sim *s, MDB_txn *txn, char *err, size_t err_len)
{
    struct sim_store *st = s->store;
    MDB_stat stat;
    int rc = mdb_stat(txn, st->machines, &stat);
    if (rc)
        return map_err(rc);
    if (stat.ms_entries > (1u << 26))
        return -EINVAL;
    if (bf_sim_str_reserve(&s->ids, stat.ms_entries))
        return -ENOMEM;
    MDB_cursor *cur;
    if ((rc = mdb_cursor_open(txn, st->machines, &cur)))
        return map_err(rc);
    MDB_val k, v;
    long n = 0;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        struct rdr r = {v.mv_data, (const uint8_t *)v.mv_data + v.mv_size, false};
        const uint8_t *h = take(&r, 4);
        const uint8_t *host = take(&r, 8);
        const uint8_t *ops = take(&r, 8 * BF_SIM_KIND_COUNT);
        size_t tl = 0, zl = 0, rl = 0, cl = 0, el = 0, ml = 0;
        const uint8_t *type = take_s(&r, 2, &tl), *zone = take_s(&r, 2, &zl),
                      *rack = take_s(&r, 2, &rl), *cluster = take_s(&r, 4, &cl),
                      *errs = take_s(&r, 4, &el), *md = take_s(&r, 4, &ml);
        if (r.bad || h[0] != REC_VERSION || h[1] < BF_STATE_SPECULATIVE || h[1] > BF_STATE_FAILED ||
            k.mv_size == 0 || zl == 0 || rl == 0) {
            bf_errf(err, err_len, "state: malformed machine record %.*s", (int)k.mv_size,
                    (const char *)k.mv_data);
            rc = -EINVAL;
            goto out;
        }
        uint32_t t = bf_sim_type_by_name(s, (const char *)type, tl);
        if (t == UINT32_MAX) {
            bf_errf(err, err_len,
                    "state: machine %.*s has instance type %.*s, which the catalog lacks",
                    (int)k.mv_size, (const char *)k.mv_data, (int)tl, (const char *)type);
            rc = -EINVAL;
            goto out;
        }
        uint32_t z = bf_sim_zone(s, (const char *)zone, zl);
        uint32_t rk = z == UINT32_MAX ? UINT32_MAX : bf_sim_rack(s, z, (const char *)rack, rl);
        uint32_t i = rk == UINT32_MAX
                         ? UINT32_MAX
                         : bf_sim_add_machine(s, k.mv_data, k.mv_size, (uint16_t)t, rk, h[1]);
        if (i == UINT32_MAX) {
            rc = -ENOMEM;
            goto out;
        }
        struct sim_machine *m = &s->m[i];
        memcpy(&m->host, host, 8);
        uint64_t o[BF_SIM_KIND_COUNT];
        memcpy(o, ops, sizeof o);
        if (o[0] | o[1] | o[2] | o[3]) {
            if (bf_sim_ops_slot(s, i)) {
                rc = -ENOMEM;
                goto out;
            }
            m = &s->m[i];
            memcpy(s->ops[m->ops - 1], o, sizeof o);
        }
        if (cl && (m->cluster = bf_sim_str_intern(&s->clusters, cluster, cl)) == UINT32_MAX) {
            rc = -ENOMEM;
            goto out;
        }
        if (el && (m->err = bf_sim_str_intern(&s->errors, errs, el)) == UINT32_MAX) {
            rc = -ENOMEM;
            goto out;
        }
        if (ml && (m->md = bf_sim_md_intern_raw(&s->md, md, ml)) == UINT32_MAX) {
            bf_errf(err, err_len, "state: bad shard_metadata in %.*s", (int)k.mv_size,
                    (const char *)k.mv_data);
            rc = -EINVAL;
            goto out;
        }
        if (m->state != BF_STATE_SPECULATIVE && m->state != BF_STATE_FAILED) {
            m->flags |= SIM_F_HELD;
            s->held++;
            s->held_type[t]++;
        }
        if (s->spot_pos && s->types[t].t.capacity_type == BF_CT_SPOT &&
            (m->state == BF_STATE_IDLE || m->state == BF_STATE_CONFIGURED)) {
            s->spot_pos[i] = (int32_t)s->n_spot;
            s->spot_set[s->n_spot++] = i;
        }
        n++;
    }
    if (rc != MDB_NOTFOUND) {
        rc = map_err(rc);
        goto out;
    }
    rc = 0;
out:
    mdb_cursor_close(cur);
    return rc ? rc : n;
}

static int load_fences(struct bf_sim *s, MDB_txn *txn, char *err, size_t err_len)
{
    struct sim_store *st = s->store;
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, st->fences, &cur);
    if (rc)
        return map_err(rc);
    MDB_val k, v;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        struct rdr r = {v.mv_data, (const uint8_t *)v.mv_data + v.mv_size, false};
        const uint8_t *es = take(&r, 16);
        size_t sl = 0, ml = 0;
        const uint8_t *shard = take_s(&r, 4, &sl), *mid = take_s(&r, 4, &ml);
        if (r.bad || k.mv_size != 8 || ml == 0) {
            bf_errf(err, err_len, "state: malformed fence record");
            rc = -EINVAL;
            goto out;
        }
        uint64_t no = 0;
        for (int i = 0; i < 8; i++)
            no = no << 8 | ((const uint8_t *)k.mv_data)[i];
        int64_t epoch, seq;
        memcpy(&epoch, es, 8);
        memcpy(&seq, es + 8, 8);
        uint32_t sh = bf_sim_str_intern(&s->shards, shard, sl);
        uint32_t mi = bf_sim_find_machine(s, mid, ml), mref;
        if (mi != UINT32_MAX) {
            mref = mi;
        } else {
            uint32_t g = bf_sim_str_intern(&s->ghosts, mid, ml);
            if (g == UINT32_MAX || g >= SIM_GHOST_BIT) {
                rc = -ENOMEM;
                goto out;
            }
            mref = g | SIM_GHOST_BIT;
        }
        if (sh == UINT32_MAX || bf_sim_fence_put(s, sh, mref, epoch, seq, no) == UINT32_MAX) {
            rc = -ENOMEM;
            goto out;
        }
    }
    rc = rc == MDB_NOTFOUND ? 0 : map_err(rc);
out:
    mdb_cursor_close(cur);
    return rc;
}

long bf_sim_store_load(struct bf_sim *s, char *err, size_t err_len)
{
    struct sim_store *st = s->store;
    MDB_txn *txn;
    int rc = mdb_txn_begin(st->env, NULL, MDB_RDONLY, &txn);
    if (rc) {
        bf_errf(err, err_len, "state: %s", mdb_strerror(rc));
        return map_err(rc);
    }
    MDB_val k = {5, "state"}, v;
    rc = mdb_get(txn, st->meta, &k, &v);
    long n = 0;
    if (rc == MDB_NOTFOUND) {
        mdb_txn_abort(txn);
        return 0; /* fresh state */
    }
    if (rc) {
        bf_errf(err, err_len, "state: %s", mdb_strerror(rc));
        mdb_txn_abort(txn);
        return map_err(rc);
    }
    struct meta_rec mr;
    if (v.mv_size != sizeof mr) {
        bf_errf(err, err_len, "state: malformed meta record");
        mdb_txn_abort(txn);
        return -EINVAL;
    }
    memcpy(&mr, v.mv_data, sizeof mr);
    if (mr.version != META_VERSION || mr.rev < 0) {
        bf_errf(err, err_len, "state: unsupported meta version %u", mr.version);
        mdb_txn_abort(txn);
        return -EINVAL;
    }
    n = load_machines(s, txn, err, err_len);
    if (n >= 0) {
        int frc = load_fences(s, txn, err, err_len);
        if (frc)
            n = frc;
    }
    mdb_txn_abort(txn);
    if (n < 0)
        return n;
    s->rev = mr.rev;
    s->next_op = mr.next_op;
    s->next_host = mr.next_host;
    if (mr.next_fence > s->next_fence_no)
        s->next_fence_no = mr.next_fence;
    return n;
}
