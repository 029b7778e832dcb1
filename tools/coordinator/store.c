/*
 * store.c — the coordinator's durable state in etcd (docs/coordinator.md
 * "State in etcd"): an in-memory copy of every key under --etcd-prefix,
 * loaded when this replica becomes leader, and fenced writes.
 *
 * Keys (values are protobuf messages of coordinator.proto, or text):
 *   <p>leader                     replica id (lease-bound; the election)
 *   <p>seq                        decimal: next free instruction sequence
 *   <p>shards/<id>                ShardRegistryEntry
 *   <p>domains/<len(k)>:<k>=<v>   DomainAssignment
 *   <p>clusters/<cluster>         ClusterAssignment
 *   <p>quotas/<len(p)>:<p>/<r>    QuotaAllocation
 *   <p>providers/<name>           ProviderEntry
 *
 * Design notes
 *   - Fencing: every write is one Txn whose compare is
 *     create_revision(<p>leader) == our term. A deposed leader's write
 *     fails the compare: it steps down and the write changes nothing.
 *   - The cache changes only after etcd accepted a write (the callback), so
 *     what this replica answers was committed.
 *   - Keys and values come from etcd, which anyone with etcd access can
 *     write: every one is checked (sizes, decode, the key matching the
 *     value) and a bad one is logged, counted and skipped
 *     (co_store_apply_kv; fuzz target fuzz_coordinator).
 *   - Sequence numbers: a block of CO_SEQ_BLOCK is reserved by one fenced
 *     write of <p>seq; a new leader reserves after the last block, so
 *     sequence numbers never go back.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/log.h"
#include "bigfleet/net.h"
#include "coordinator.h"

/* ------------------------------------------------------------ keys */

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    char *s = NULL;
    if (vasprintf(&s, f, ap) < 0)
        s = NULL;
    va_end(ap);
    return s;
}

char *co_key_shard(const char *p, const char *id)
{
    return fmt("%sshards/%s", p, id);
}
char *co_key_domain(const char *p, const char *k, const char *v)
{
    return fmt("%sdomains/%zu:%s=%s", p, strlen(k), k, v);
}
char *co_key_cluster(const char *p, const char *cluster)
{
    return fmt("%sclusters/%s", p, cluster);
}
char *co_key_quota(const char *p, const char *provider, const char *region)
{
    return fmt("%squotas/%zu:%s/%s", p, strlen(provider), provider, region);
}
char *co_key_seq(const char *p)
{
    return fmt("%sseq", p);
}
char *co_key_leader(const char *p)
{
    return fmt("%sleader", p);
}

/* ------------------------------------------------------------ the cache */

struct co_shard *co_store_shard(struct co_store *s, const char *id)
{
    for (uint32_t i = 0; i < s->n_shards; i++)
        if (!strcmp(s->shards[i].id, id))
            return &s->shards[i];
    return NULL;
}

struct co_domain *co_store_domain(struct co_store *s, const char *key, const char *value)
{
    for (uint32_t i = 0; i < s->n_domains; i++)
        if (!strcmp(s->domains[i].key, key) && !strcmp(s->domains[i].value, value))
            return &s->domains[i];
    return NULL;
}

static bool ok_str(const char *v)
{
    return v && v[0] && strlen(v) < CO_ID_MAX;
}

static void shard_free(struct co_shard *x)
{
    free(x->id);
    free(x->address);
}
static void domain_free(struct co_domain *x)
{
    free(x->key);
    free(x->value);
    free(x->shard);
}
static void cluster_free(struct co_cluster *x)
{
    free(x->cluster);
    free(x->shard);
}

void co_store_clear(struct co_store *s)
{
    for (uint32_t i = 0; i < s->n_shards; i++)
        shard_free(&s->shards[i]);
    for (uint32_t i = 0; i < s->n_domains; i++)
        domain_free(&s->domains[i]);
    for (uint32_t i = 0; i < s->n_clusters; i++)
        cluster_free(&s->clusters[i]);
    for (uint32_t i = 0; i < s->n_quotas; i++)
        bigfleet__v1alpha1__quota_allocation__free_unpacked(s->quotas[i], NULL);
    for (uint32_t i = 0; i < s->n_providers; i++)
        bigfleet__v1alpha1__provider_entry__free_unpacked(s->providers[i], NULL);
    free(s->shards);
    free(s->domains);
    free(s->clusters);
    free(s->quotas);
    free(s->providers);
    uint64_t rejected = s->rejected;
    memset(s, 0, sizeof *s);
    s->rejected = rejected;
}

static bool grow(void **arr, uint32_t n, uint32_t max, size_t el)
{
    if (n >= max)
        return false;
    if ((n & (n - 1)) == 0) { /* 0, 1, 2, 4, ...: double */
        void *p = realloc(*arr, (n ? n * 2 : 1) * el);
        if (!p)
            return false;
        *arr = p;
    }
    return true;
}

static int reject(struct co_store *s, const char *what, const uint8_t *key, size_t klen)
{
    s->rejected++;
    BF_WARN("etcd: key skipped (does not decode or does not match its value)",
            "what=%s key=\"%.*s\"", what, (int)(klen > 200 ? 200 : klen), (const char *)key);
    return -EINVAL;
}

static bool has_prefix(const uint8_t *key, size_t klen, const char *p, size_t *off)
{
    size_t n = strlen(p);
    if (klen < n || memcmp(key, p, n))
        return false;
    *off = n;
    return true;
}

/* key[off..] equals the string want */
static bool key_is(const uint8_t *key, size_t klen, size_t off, const char *want)
{
    size_t n = strlen(want);
    return klen - off == n && !memcmp(key + off, want, n);
}

int co_store_apply_kv(struct co_store *s, const char *prefix, const uint8_t *key, size_t klen,
                      const uint8_t *val, size_t vlen)
{
    size_t off;
    if (!key || !has_prefix(key, klen, prefix, &off))
        return reject(s, "outside the prefix", key ? key : (const uint8_t *)"", key ? klen : 0);
    char kp[CO_ID_MAX * 3];
    if (klen >= sizeof kp)
        return reject(s, "key too long", key, klen);
    memcpy(kp, key, klen);
    kp[klen] = 0;
    if (memchr(key, 0, klen))
        return reject(s, "NUL in key", key, klen);
    const char *rest = kp + off;
    if (!strcmp(rest, "leader"))
        return 0; /* the election key: leader.c reads it */
    if (!strcmp(rest, "seq")) {
        char buf[32];
        if (vlen == 0 || vlen >= sizeof buf)
            return reject(s, "seq", key, klen);
        memcpy(buf, val, vlen);
        buf[vlen] = 0;
        char *end;
        long long v = strtoll(buf, &end, 10);
        if (*end || v < 0)
            return reject(s, "seq", key, klen);
        s->seq_durable = v;
        return 0;
    }
    if (!strncmp(rest, "shards/", 7)) {
        Bigfleet__V1alpha1__ShardRegistryEntry *e =
            bigfleet__v1alpha1__shard_registry_entry__unpack(NULL, vlen, val);
        if (!e || !ok_str(e->shard_id) || strlen(e->address) >= 256 ||
            !key_is(key, klen, off + 7, e->shard_id)) {
            if (e)
                bigfleet__v1alpha1__shard_registry_entry__free_unpacked(e, NULL);
            return reject(s, "shard", key, klen);
        }
        struct co_shard *x = co_store_shard(s, e->shard_id);
        if (!x) {
            if (!grow((void **)&s->shards, s->n_shards, CO_MAX_SHARDS, sizeof *s->shards)) {
                bigfleet__v1alpha1__shard_registry_entry__free_unpacked(e, NULL);
                return reject(s, "too many shards", key, klen);
            }
            x = &s->shards[s->n_shards++];
            memset(x, 0, sizeof *x);
            x->id = strdup(e->shard_id);
        }
        free(x->address);
        x->address = strdup(e->address);
        x->registered_ns = e->registered_at_unix_ns;
        bigfleet__v1alpha1__shard_registry_entry__free_unpacked(e, NULL);
        return x->id && x->address ? 0 : -ENOMEM;
    }
    if (!strncmp(rest, "domains/", 8)) {
        Bigfleet__V1alpha1__DomainAssignment *d =
            bigfleet__v1alpha1__domain_assignment__unpack(NULL, vlen, val);
        char *want =
            d && ok_str(d->topology_key) && ok_str(d->topology_value) && ok_str(d->shard_id)
                ? co_key_domain(prefix, d->topology_key, d->topology_value)
                : NULL;
        if (!want || strcmp(want, kp)) {
            free(want);
            if (d)
                bigfleet__v1alpha1__domain_assignment__free_unpacked(d, NULL);
            return reject(s, "domain", key, klen);
        }
        free(want);
        struct co_domain *x = co_store_domain(s, d->topology_key, d->topology_value);
        if (!x) {
            if (!grow((void **)&s->domains, s->n_domains, CO_MAX_DOMAINS, sizeof *s->domains)) {
                bigfleet__v1alpha1__domain_assignment__free_unpacked(d, NULL);
                return reject(s, "too many domains", key, klen);
            }
            x = &s->domains[s->n_domains++];
            memset(x, 0, sizeof *x);
            x->key = strdup(d->topology_key);
            x->value = strdup(d->topology_value);
        }
        free(x->shard);
        x->shard = strdup(d->shard_id);
        bigfleet__v1alpha1__domain_assignment__free_unpacked(d, NULL);
        return x->key && x->value && x->shard ? 0 : -ENOMEM;
    }
    if (!strncmp(rest, "clusters/", 9)) {
        Bigfleet__V1alpha1__ClusterAssignment *a =
            bigfleet__v1alpha1__cluster_assignment__unpack(NULL, vlen, val);
        if (!a || !ok_str(a->cluster_id) || !ok_str(a->shard_id) ||
            !key_is(key, klen, off + 9, a->cluster_id)) {
            if (a)
                bigfleet__v1alpha1__cluster_assignment__free_unpacked(a, NULL);
            return reject(s, "cluster", key, klen);
        }
        uint32_t i;
        for (i = 0; i < s->n_clusters && strcmp(s->clusters[i].cluster, a->cluster_id); i++)
            ;
        if (i == s->n_clusters) {
            if (!grow((void **)&s->clusters, s->n_clusters, CO_MAX_CLUSTERS, sizeof *s->clusters)) {
                bigfleet__v1alpha1__cluster_assignment__free_unpacked(a, NULL);
                return reject(s, "too many clusters", key, klen);
            }
            s->n_clusters++;
            s->clusters[i].cluster = strdup(a->cluster_id);
            s->clusters[i].shard = NULL;
        }
        free(s->clusters[i].shard);
        s->clusters[i].shard = strdup(a->shard_id);
        bigfleet__v1alpha1__cluster_assignment__free_unpacked(a, NULL);
        return s->clusters[i].cluster && s->clusters[i].shard ? 0 : -ENOMEM;
    }
    if (!strncmp(rest, "quotas/", 7)) {
        Bigfleet__V1alpha1__QuotaAllocation *q =
            bigfleet__v1alpha1__quota_allocation__unpack(NULL, vlen, val);
        char *want = q && ok_str(q->provider) && strlen(q->region) < CO_ID_MAX &&
                             q->n_per_shard <= CO_MAX_SHARDS
                         ? co_key_quota(prefix, q->provider, q->region)
                         : NULL;
        if (!want || strcmp(want, kp)) {
            free(want);
            if (q)
                bigfleet__v1alpha1__quota_allocation__free_unpacked(q, NULL);
            return reject(s, "quota", key, klen);
        }
        free(want);
        uint32_t i;
        for (i = 0; i < s->n_quotas; i++)
            if (!strcmp(s->quotas[i]->provider, q->provider) &&
                !strcmp(s->quotas[i]->region, q->region))
                break;
        if (i == s->n_quotas) {
            if (!grow((void **)&s->quotas, s->n_quotas, 256, sizeof *s->quotas)) {
                bigfleet__v1alpha1__quota_allocation__free_unpacked(q, NULL);
                return reject(s, "too many quotas", key, klen);
            }
            s->n_quotas++;
        } else {
            bigfleet__v1alpha1__quota_allocation__free_unpacked(s->quotas[i], NULL);
        }
        s->quotas[i] = q;
        return 0;
    }
    if (!strncmp(rest, "providers/", 10)) {
        Bigfleet__V1alpha1__ProviderEntry *p =
            bigfleet__v1alpha1__provider_entry__unpack(NULL, vlen, val);
        if (!p || !ok_str(p->name) || !key_is(key, klen, off + 10, p->name)) {
            if (p)
                bigfleet__v1alpha1__provider_entry__free_unpacked(p, NULL);
            return reject(s, "provider", key, klen);
        }
        uint32_t i;
        for (i = 0; i < s->n_providers && strcmp(s->providers[i]->name, p->name); i++)
            ;
        if (i == s->n_providers) {
            if (!grow((void **)&s->providers, s->n_providers, 256, sizeof *s->providers)) {
                bigfleet__v1alpha1__provider_entry__free_unpacked(p, NULL);
                return reject(s, "too many providers", key, klen);
            }
            s->n_providers++;
        } else {
            bigfleet__v1alpha1__provider_entry__free_unpacked(s->providers[i], NULL);
        }
        s->providers[i] = p;
        return 0;
    }
    return reject(s, "unknown key", key, klen);
}

int co_store_delete_key(struct co_store *s, const char *prefix, const uint8_t *key, size_t klen)
{
    size_t off;
    if (!has_prefix(key, klen, prefix, &off))
        return -EINVAL;
    char kp[CO_ID_MAX * 3];
    if (klen >= sizeof kp)
        return -EINVAL;
    memcpy(kp, key, klen);
    kp[klen] = 0;
    for (uint32_t i = 0; i < s->n_shards; i++) {
        char *k = co_key_shard(prefix, s->shards[i].id);
        bool hit = k && !strcmp(k, kp);
        free(k);
        if (hit) {
            shard_free(&s->shards[i]);
            s->shards[i] = s->shards[--s->n_shards];
            return 0;
        }
    }
    for (uint32_t i = 0; i < s->n_domains; i++) {
        char *k = co_key_domain(prefix, s->domains[i].key, s->domains[i].value);
        bool hit = k && !strcmp(k, kp);
        free(k);
        if (hit) {
            domain_free(&s->domains[i]);
            s->domains[i] = s->domains[--s->n_domains];
            return 0;
        }
    }
    for (uint32_t i = 0; i < s->n_clusters; i++) {
        char *k = co_key_cluster(prefix, s->clusters[i].cluster);
        bool hit = k && !strcmp(k, kp);
        free(k);
        if (hit) {
            cluster_free(&s->clusters[i]);
            s->clusters[i] = s->clusters[--s->n_clusters];
            return 0;
        }
    }
    return 0;
}

/* ------------------------------------------------------------ fenced writes */

struct commit {
    struct coord *c;
    struct co_op *ops;
    size_t n;
    co_commit_fn cb;
    void *arg;
    int64_t term;
};

static void ops_free(struct co_op *ops, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(ops[i].key);
        free(ops[i].value);
    }
    free(ops);
}

static void on_commit(void *arg, int code, const char *message,
                      const Etcdserverpb__TxnResponse *resp)
{
    struct commit *k = arg;
    struct coord *c = k->c;
    int rc = 0;
    if (code != BF_NET_OK || !resp) {
        c->etcd_errors++;
        BF_WARN("etcd write failed", "code=%s message=\"%s\"", bf_net_code_name(code),
                message ? message : "");
        rc = -EIO;
    } else if (!resp->succeeded) {
        rc = -ESTALE; /* the leader key is not ours any more */
        if (c->term == k->term)
            co_step_down(c, "a fenced etcd write found another leader's key");
    } else if (c->role != CO_FOLLOWER && c->term == k->term) {
        for (size_t i = 0; i < k->n; i++) {
            const struct co_op *o = &k->ops[i];
            if (o->del)
                co_store_delete_key(&c->st, c->cfg.prefix, (const uint8_t *)o->key, strlen(o->key));
            else
                co_store_apply_kv(&c->st, c->cfg.prefix, (const uint8_t *)o->key, strlen(o->key),
                                  o->value, o->vlen);
        }
    }
    if (k->cb)
        k->cb(c, k->arg, rc);
    ops_free(k->ops, k->n);
    free(k);
}

int co_commit(struct coord *c, struct co_op *ops, size_t n, co_commit_fn cb, void *arg)
{
    if (!co_is_leader(c) && c->role != CO_LOADING) {
        ops_free(ops, n);
        return -ESTALE;
    }
    struct commit *k = calloc(1, sizeof *k);
    char *lk = co_key_leader(c->cfg.prefix);
    Etcdserverpb__RequestOp *req = calloc(n ? n : 1, sizeof *req);
    Etcdserverpb__RequestOp **reqp = calloc(n ? n : 1, sizeof *reqp);
    Etcdserverpb__PutRequest *puts = calloc(n ? n : 1, sizeof *puts);
    Etcdserverpb__DeleteRangeRequest *dels = calloc(n ? n : 1, sizeof *dels);
    int rc = -ENOMEM;
    if (!k || !lk || !req || !reqp || !puts || !dels) {
        ops_free(ops, n);
        free(k);
        goto out;
    }
    *k = (struct commit){c, ops, n, cb, arg, c->term};
    Etcdserverpb__Compare cmp;
    co_etcd_cmp_created_at(&cmp, lk, c->term); /* still the leader of this term */
    Etcdserverpb__Compare *cmpp = &cmp;
    for (size_t i = 0; i < n; i++) {
        etcdserverpb__request_op__init(&req[i]);
        if (ops[i].del) {
            etcdserverpb__delete_range_request__init(&dels[i]);
            dels[i].key.data = (uint8_t *)ops[i].key;
            dels[i].key.len = strlen(ops[i].key);
            req[i].request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE;
            req[i].request_delete_range = &dels[i];
        } else {
            etcdserverpb__put_request__init(&puts[i]);
            puts[i].key.data = (uint8_t *)ops[i].key;
            puts[i].key.len = strlen(ops[i].key);
            puts[i].value.data = ops[i].value;
            puts[i].value.len = ops[i].vlen;
            req[i].request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
            req[i].request_put = &puts[i];
        }
        reqp[i] = &req[i];
    }
    Etcdserverpb__TxnRequest t = ETCDSERVERPB__TXN_REQUEST__INIT;
    t.n_compare = 1;
    t.compare = &cmpp;
    t.n_success = n;
    t.success = reqp;
    rc = co_etcd_txn(c->etcd, &t, on_commit, k);
    if (rc) {
        ops_free(ops, n);
        free(k);
    }
out:
    free(lk);
    free(req);
    free(reqp);
    free(puts);
    free(dels);
    return rc;
}

/* ------------------------------------------------------------ load */

struct load {
    co_commit_fn cb;
    void *arg;
    int64_t term;
};

static void on_seq(struct coord *c, void *arg, int rc)
{
    struct load *l = arg;
    c->seq_busy = false;
    if (rc == 0 && c->term == l->term) {
        c->seq_next = c->st.seq_durable - CO_SEQ_BLOCK;
        c->seq_limit = c->st.seq_durable;
    }
    if (l->cb)
        l->cb(c, l->arg, rc);
    free(l);
}

static int reserve_seq(struct coord *c, struct load *l)
{
    char *key = co_key_seq(c->cfg.prefix);
    struct co_op *op = calloc(1, sizeof *op);
    char buf[32];
    int64_t from = c->st.seq_durable > c->seq_limit ? c->st.seq_durable : c->seq_limit;
    if (from < 1)
        from = 1;
    int n = snprintf(buf, sizeof buf, "%" PRId64, from + CO_SEQ_BLOCK);
    if (!key || !op || !(op->value = malloc((size_t)n))) {
        free(key);
        free(op);
        return -ENOMEM;
    }
    op->key = key;
    memcpy(op->value, buf, (size_t)n);
    op->vlen = (size_t)n;
    c->seq_busy = true;
    int rc = co_commit(c, op, 1, on_seq, l);
    if (rc)
        c->seq_busy = false;
    return rc;
}

int64_t co_next_seq(struct coord *c)
{
    if (c->seq_next <= 0 || c->seq_next >= c->seq_limit)
        return 0;
    int64_t s = c->seq_next++;
    if (c->seq_limit - c->seq_next < CO_SEQ_BLOCK / 2 && !c->seq_busy) {
        struct load *l = calloc(1, sizeof *l);
        if (l) {
            l->term = c->term;
            /* the next block starts where this one ends */
            c->st.seq_durable = c->seq_limit;
            if (reserve_seq(c, l)) /* keeps the current block until it lands */
                free(l);
        }
    }
    return s;
}

struct load_ctx {
    struct coord *c;
    struct load *l;
};

static void on_load(void *arg, int code, const char *message,
                    const Etcdserverpb__RangeResponse *resp)
{
    struct load_ctx *x = arg;
    struct coord *c = x->c;
    struct load *l = x->l;
    free(x);
    if (code != BF_NET_OK || !resp || c->term != l->term || c->role != CO_LOADING) {
        if (code != BF_NET_OK)
            c->etcd_errors++;
        BF_WARN("etcd: loading the coordinator state failed", "code=%s message=\"%s\"",
                bf_net_code_name(code), message ? message : "");
        if (l->cb)
            l->cb(c, l->arg, -EIO);
        free(l);
        return;
    }
    co_store_clear(&c->st);
    for (size_t i = 0; i < resp->n_kvs; i++) {
        const Mvccpb__KeyValue *kv = resp->kvs[i];
        co_store_apply_kv(&c->st, c->cfg.prefix, kv->key.data, kv->key.len, kv->value.data,
                          kv->value.len);
    }
    BF_INFO("coordinator state loaded from etcd",
            "shards=%u domains=%u clusters=%u quotas=%u seq=%" PRId64 " skipped=%" PRIu64,
            c->st.n_shards, c->st.n_domains, c->st.n_clusters, c->st.n_quotas, c->st.seq_durable,
            c->st.rejected);
    c->seq_next = c->seq_limit = 0;
    if (reserve_seq(c, l)) {
        if (l->cb)
            l->cb(c, l->arg, -EIO);
        free(l);
    }
}

int co_store_load(struct coord *c, co_commit_fn cb, void *arg)
{
    struct load *l = calloc(1, sizeof *l);
    struct load_ctx *x = calloc(1, sizeof *x);
    if (!l || !x) {
        free(l);
        free(x);
        return -ENOMEM;
    }
    *l = (struct load){cb, arg, c->term};
    *x = (struct load_ctx){c, l};
    size_t n = strlen(c->cfg.prefix);
    uint8_t end[sizeof c->cfg.prefix];
    size_t el = co_etcd_prefix_end((const uint8_t *)c->cfg.prefix, n, end);
    int rc = co_etcd_range(c->etcd, (const uint8_t *)c->cfg.prefix, n, end, el, on_load, x);
    if (rc) {
        free(l);
        free(x);
    }
    return rc;
}
