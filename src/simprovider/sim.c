/*
 * sim.c — the simulated CapacityProvider's state machine: the pool, the six
 * RPCs in the contract's exact check order (include/bigfleet/simprovider.h,
 * reference/ecosystem.md §2.2), fencing, operation ids, revisions and the
 * mutation log, the timer queue, and the latency / failure / exhaustion /
 * spot-interruption knobs.
 *
 * Design notes:
 *   - Initialisation: bf_sim_open() builds the catalog and zone/rack tables,
 *     then loads the pool from LMDB (store.c) or seeds it, then lays out the
 *     base region of revisions (sim_internal.h).
 *   - Every public call is one "batch": it first advances simulated time to
 *     its now_ns, does its work, and ends by writing the dirty set through to
 *     LMDB (one transaction), so an acknowledged mutation is persisted.
 *   - Resources a mutation needs (ops slot, timer slot, interned strings,
 *     metadata) are reserved before the machine is touched, so an allocation
 *     failure answers INTERNAL with no partial transition. A failure to grow
 *     the mutation log is absorbed by re-basing the revisions (every earlier
 *     cursor then gets a full list, which is always correct).
 *   - Errors are replies (gRPC codes); nothing here exits or logs per call.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/log.h"
#include "bigfleet/strbuf.h"
#include "bigfleet/util.h"
#include "simprovider/sim_internal.h"

#define SIM_ID_MAX 1024 /* bytes: machine_id, shard_id, cluster_id */

static const uint8_t k_source[BF_SIM_KIND_COUNT] = {BF_STATE_SPECULATIVE, BF_STATE_IDLE,
                                                    BF_STATE_CONFIGURED, BF_STATE_IDLE};
static const uint8_t k_trans[BF_SIM_KIND_COUNT] = {BF_STATE_CREATING, BF_STATE_CONFIGURING,
                                                   BF_STATE_DRAINING, BF_STATE_DELETING};
static const uint8_t k_target[BF_SIM_KIND_COUNT] = {BF_STATE_IDLE, BF_STATE_CONFIGURED,
                                                    BF_STATE_IDLE, BF_STATE_SPECULATIVE};

/* ------------------------------------------------------------ names */

const char *bf_sim_rpc_name(int rpc)
{
    static const char *const n[] = {"Create", "Configure", "Drain", "Delete", "Get", "List"};
    return rpc >= 0 && rpc < BF_SIM_RPC_COUNT ? n[rpc] : "?";
}

int bf_sim_rpc_from_path(const char *path, size_t len)
{
    static const char prefix[] = "/bigfleet.v1alpha1.CapacityProvider/";
    size_t pl = sizeof prefix - 1;
    if (len <= pl || memcmp(path, prefix, pl) != 0)
        return -1;
    for (int i = 0; i < BF_SIM_RPC_COUNT; i++) {
        const char *n = bf_sim_rpc_name(i);
        if (strlen(n) == len - pl && memcmp(path + pl, n, len - pl) == 0)
            return i;
    }
    return -1;
}

/* ------------------------------------------------------------ rng (xoshiro256**) */

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(struct bf_sim *s)
{
    uint64_t *r = s->rng;
    uint64_t out = rotl(r[1] * 5, 7) * 9, t = r[1] << 17;
    r[2] ^= r[0];
    r[3] ^= r[1];
    r[1] ^= r[2];
    r[0] ^= r[3];
    r[2] ^= t;
    r[3] = rotl(r[3], 45);
    return out;
}

static double rng_unit(struct bf_sim *s) /* [0, 1) */
{
    return (double)(rng_next(s) >> 11) * 0x1.0p-53;
}

static uint64_t rng_below(struct bf_sim *s, uint64_t n) /* [0, n), unbiased */
{
    uint64_t lim = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do
        x = rng_next(s);
    while (x >= lim);
    return x % n;
}

static double rng_normal(struct bf_sim *s)
{
    double u1 = rng_unit(s), u2 = rng_unit(s);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

static bool dist_is_zero(const struct bf_sim_dist *d)
{
    return d->a_ns == 0 && (d->kind == BF_SIM_DIST_FIXED || d->b_ns == 0);
}

static int64_t dist_sample(struct bf_sim *s, const struct bf_sim_dist *d)
{
    double v;
    switch (d->kind) {
    case BF_SIM_DIST_UNIFORM:
        if (d->b_ns <= d->a_ns)
            return d->a_ns;
        return d->a_ns + (int64_t)rng_below(s, (uint64_t)(d->b_ns - d->a_ns) + 1);
    case BF_SIM_DIST_NORMAL:
        v = (double)d->a_ns + (double)d->b_ns * rng_normal(s);
        if (!(v > 0))
            return 0;
        return v >= 9.2e18 ? INT64_MAX / 2 : (int64_t)v;
    default:
        return d->a_ns > 0 ? d->a_ns : 0;
    }
}

/* Poisson(lambda): Knuth for small lambda, Hormann's PTRS otherwise. */
static uint64_t rng_poisson(struct bf_sim *s, double lambda)
{
    if (!(lambda > 0))
        return 0;
    if (lambda < 10) {
        double l = exp(-lambda), p = 1.0;
        uint64_t k = 0;
        for (;;) {
            p *= rng_unit(s);
            if (p <= l)
                return k;
            k++;
        }
    }
    double slam = sqrt(lambda), loglam = log(lambda);
    double b = 0.931 + 2.53 * slam, a = -0.059 + 0.02483 * b;
    double invalpha = 1.1239 + 1.1328 / (b - 3.4), vr = 0.9277 - 3.6224 / (b - 2);
    for (;;) {
        double u = rng_unit(s) - 0.5, v = rng_unit(s);
        double us = 0.5 - fabs(u);
        double k = floor((2 * a / us + b) * u + lambda + 0.43);
        if (us >= 0.07 && v <= vr)
            return (uint64_t)k;
        if (k < 0 || (us < 0.013 && v > us))
            continue;
        if (log(v) + log(invalpha) - log(a / (us * us) + b) <= -lambda + k * loglam - lgamma(k + 1))
            return (uint64_t)k;
    }
}

/* ------------------------------------------------------------ replies */

static void reply_reset(struct bf_sim_reply *r)
{
    r->code = BF_SIM_OK;
    r->message[0] = 0;
    r->len = 0;
    r->delay_ns = 0;
}

static void __attribute__((format(printf, 3, 4)))
reply_err(struct bf_sim_reply *r, int code, const char *fmt, ...)
{
    r->code = code;
    r->len = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->message, sizeof r->message, fmt, ap);
    va_end(ap);
}

static int reply_reserve(struct bf_sim_reply *r, size_t extra)
{
    if (r->cap - r->len >= extra)
        return 0;
    size_t need;
    if (!bf_add_size(r->len, extra, &need))
        return -ENOMEM;
    return bf_grow((void **)&r->body, &r->cap, need, 1);
}

void bf_sim_reply_free(struct bf_sim_reply *r)
{
    free(r->body);
    r->body = NULL;
    r->len = r->cap = 0;
}

/* printable prefix of an id for messages */
static int pr_len(size_t len)
{
    return len > 128 ? 128 : (int)len;
}

/* ------------------------------------------------------------ revisions */

static int64_t base_floor(const struct bf_sim *s)
{
    return s->base_rev + (int64_t)s->n_base - 1;
}

/* Every machine becomes part of a fresh base region after the current rev. */
static void rebase(struct bf_sim *s)
{
    s->base_rev = s->rev + 1;
    s->n_base = s->n;
    for (size_t i = 0; i < s->n; i++)
        s->m[i].mod_rev = s->base_rev + (int64_t)i;
    s->rev = base_floor(s);
    s->n_log = 0;
    s->log_dead = 0;
    s->meta_dirty = true;
}

static void log_compact(struct bf_sim *s)
{
    size_t w = 0;
    for (size_t k = 0; k < s->n_log; k++)
        if (s->m[s->log[k].idx].mod_rev == s->log[k].rev)
            s->log[w++] = s->log[k];
    s->n_log = w;
    s->log_dead = 0;
}

/* Records a visible change of machine i: a fresh revision, unless i already
 * holds the newest revision and it was minted during this call. */
static void touch(struct bf_sim *s, uint32_t i)
{
    struct sim_machine *m = &s->m[i];
    bf_sim_mark_dirty(s, i);
    s->meta_dirty = true;
    if (m->mod_rev == s->rev && s->rev > s->call_rev)
        return;
    if (s->n_log == s->cap_log &&
        bf_grow((void **)&s->log, &s->cap_log, s->n_log + 1, sizeof *s->log)) {
        s->rev++;
        rebase(s);
        return;
    }
    if (m->mod_rev > base_floor(s))
        s->log_dead++;
    m->mod_rev = ++s->rev;
    s->log[s->n_log].rev = m->mod_rev;
    s->log[s->n_log].idx = i;
    s->n_log++;
    if (s->log_dead > 4096 && s->log_dead * 2 > s->n_log)
        log_compact(s);
}

static void set_state(struct bf_sim *s, uint32_t i, uint8_t st)
{
    struct sim_machine *m = &s->m[i];
    s->count[m->state]--;
    s->count[st]++;
    m->state = st;
    bf_sim_spot_update(s, i);
}

static void hold(struct bf_sim *s, uint32_t i)
{
    struct sim_machine *m = &s->m[i];
    if (m->flags & SIM_F_HELD)
        return;
    m->flags |= SIM_F_HELD;
    s->held++;
    s->held_type[m->type]++;
}

static void release(struct bf_sim *s, uint32_t i)
{
    struct sim_machine *m = &s->m[i];
    if (!(m->flags & SIM_F_HELD))
        return;
    m->flags &= (uint8_t)~SIM_F_HELD;
    s->held--;
    s->held_type[m->type]--;
}

static void fail_with(struct bf_sim *s, uint32_t i, uint32_t err)
{
    s->m[i].err = err;
    release(s, i);
    set_state(s, i, BF_STATE_FAILED);
    touch(s, i);
}

/* ------------------------------------------------------------ timers */

static bool timer_less(const struct sim_timer *a, const struct sim_timer *b)
{
    return a->due < b->due || (a->due == b->due && a->seq < b->seq);
}

static int heap_reserve(struct bf_sim *s)
{
    if (s->n_heap < s->cap_heap)
        return 0;
    return bf_grow((void **)&s->heap, &s->cap_heap, s->n_heap + 1, sizeof *s->heap);
}

static void heap_push(struct bf_sim *s, const struct sim_timer *t) /* capacity reserved */
{
    size_t i = s->n_heap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!timer_less(t, &s->heap[p]))
            break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = *t;
}

static void heap_pop(struct bf_sim *s, struct sim_timer *out)
{
    *out = s->heap[0];
    struct sim_timer last = s->heap[--s->n_heap];
    size_t i = 0, n = s->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && timer_less(&s->heap[c + 1], &s->heap[c]))
            c++;
        if (!timer_less(&s->heap[c], &last))
            break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n)
        s->heap[i] = last;
}

/* ------------------------------------------------------------ completion */

static bool complete(struct bf_sim *s, uint32_t i, int kind, uint64_t op, int outcome)
{
    struct sim_machine *m = &s->m[i];
    if (m->state != k_trans[kind] || !m->ops || s->ops[m->ops - 1][kind] != op) {
        s->stats.discarded++;
        return false;
    }
    if (outcome != SIM_OUT_OK) {
        uint32_t err =
            outcome == SIM_OUT_EXHAUSTED ? s->msgs.exhausted[m->type] : s->msgs.fail[kind];
        fail_with(s, i, err);
        s->stats.failed[kind]++;
        return true;
    }
    switch (kind) {
    case BF_SIM_RPC_CREATE:
        m->host = ++s->next_host;
        break;
    case BF_SIM_RPC_DRAIN:
        m->cluster = 0;
        bf_sim_md_unref(&s->md, m->md);
        m->md = 0;
        break;
    case BF_SIM_RPC_DELETE:
        m->host = 0;
        release(s, i);
        break;
    default:
        break;
    }
    set_state(s, i, k_target[kind]);
    touch(s, i);
    s->stats.completed[kind]++;
    return true;
}

/* Advances simulated time (no persistence). Returns machines changed. */
static int advance_to(struct bf_sim *s, int64_t now)
{
    if (!s->have_now) {
        s->have_now = true;
        s->now = now;
        s->last_spot = now;
    }
    if (now < s->now)
        now = s->now;
    s->now = now;
    int changed = 0;
    while (s->n_heap && s->heap[0].due <= now) {
        struct sim_timer t;
        heap_pop(s, &t);
        changed += complete(s, t.idx, t.kind, t.op, t.outcome);
    }
    if (s->cfg.spot_interruption_rate > 0 && s->n_spot && now > s->last_spot) {
        double secs = (double)(now - s->last_spot) / 1e9;
        uint64_t k = rng_poisson(s, s->cfg.spot_interruption_rate * (double)s->n_spot * secs);
        for (; k && s->n_spot; k--) {
            uint32_t i = s->spot_set[rng_below(s, s->n_spot)];
            fail_with(s, i, s->msgs.spot);
            s->stats.spot_interruptions++;
            changed++;
        }
    }
    s->last_spot = now;
    return changed;
}

static void call_begin(struct bf_sim *s, int64_t now)
{
    s->call_rev = s->rev;
    advance_to(s, now);
}

static int flush(struct bf_sim *s)
{
    if (!s->store)
        return 0;
    if (!s->n_dirty && !s->n_dirty_f && !s->meta_dirty && !s->dirty_all)
        return 0;
    int rc = bf_sim_store_flush(s);
    if (rc) {
        s->stats.flush_errors++;
        return rc;
    }
    s->stats.flushes++;
    return 0;
}

static void call_end(struct bf_sim *s, struct bf_sim_reply *r)
{
    if (flush(s)) {
        BF_ERROR("simprovider state persistence failed", "path=\"%s\"",
                 s->cfg.state_path ? s->cfg.state_path : "");
        if (r)
            reply_err(r, BF_SIM_INTERNAL, "simulated provider: state persistence failed");
    }
}

/* ------------------------------------------------------------ reply builders */

static void reply_machine(struct bf_sim *s, uint32_t i, struct bf_sim_reply *r)
{
    size_t n = bf_sim_machine_size(s, i);
    if (!n || reply_reserve(r, n)) {
        reply_err(r, BF_SIM_INTERNAL, "simulated provider: out of memory");
        return;
    }
    r->len = (size_t)(bf_sim_machine_write(s, i, r->body) - r->body);
}

static void reply_ack(struct bf_sim *s, uint64_t op, uint32_t i, struct bf_sim_reply *r)
{
    char ops[32];
    size_t ol = (size_t)snprintf(ops, sizeof ops, "op-%llu", (unsigned long long)op);
    size_t n = bf_sim_machine_size(s, i);
    size_t total = bf_pb_ld_len(1, ol) + bf_pb_ld_len(2, n);
    if (!n || reply_reserve(r, total)) {
        reply_err(r, BF_SIM_INTERNAL, "simulated provider: out of memory");
        return;
    }
    uint8_t *p = bf_pb_put_ld(r->body, 1, ops, ol);
    p = bf_pb_put_ld_header(p, 2, n);
    p = bf_sim_machine_write(s, i, p);
    r->len = (size_t)(p - r->body);
}

static bool inject(struct bf_sim *s, int rpc, struct bf_sim_reply *r)
{
    double p = s->cfg.rpc_error[rpc];
    if (!(p > 0) || rng_unit(s) >= p)
        return false;
    s->stats.injected_errors++;
    reply_err(r, BF_SIM_UNAVAILABLE, "simulated transient failure of %s (injected)",
              bf_sim_rpc_name(rpc));
    return true;
}

static void reply_delay(struct bf_sim *s, int rpc, struct bf_sim_reply *r)
{
    const struct bf_sim_dist *d = &s->cfg.reply_latency[rpc];
    r->delay_ns = dist_is_zero(d) ? 0 : dist_sample(s, d);
}

/* ------------------------------------------------------------ fencing */

/* Returns true when the request may proceed; otherwise *r holds the error. */
static bool fence_check(struct bf_sim *s, const struct bf_sim_request *q, uint32_t mi,
                        struct bf_sim_reply *r)
{
    if (q->shard_id.len == 0 && q->shard_epoch == 0 && q->sequence_number == 0)
        return true; /* the all-zero token bypasses fencing */
    uint32_t shard = bf_sim_str_intern(&s->shards, q->shard_id.p, q->shard_id.len);
    if (shard == UINT32_MAX)
        goto oom;
    uint32_t mref, f = UINT32_MAX;
    if (mi != UINT32_MAX) {
        mref = mi;
        f = bf_sim_fence_find(s, shard, mref);
    } else {
        uint32_t g = bf_sim_str_find(&s->ghosts, q->machine_id.p, q->machine_id.len);
        if (g) {
            mref = g | SIM_GHOST_BIT;
            f = bf_sim_fence_find(s, shard, mref);
        } else {
            g = bf_sim_str_append(&s->ghosts, q->machine_id.p, q->machine_id.len);
            if (g == UINT32_MAX || g >= SIM_GHOST_BIT)
                goto oom;
            mref = g | SIM_GHOST_BIT;
        }
    }
    if (f != UINT32_MAX) {
        const struct sim_fence *fe = &s->fences[f];
        bool newer = q->shard_epoch > fe->epoch ||
                     (q->shard_epoch == fe->epoch && q->sequence_number > fe->seq);
        if (!newer) {
            s->stats.fenced++;
            reply_err(r, BF_SIM_FAILED_PRECONDITION,
                      "stale fencing token (epoch %lld, seq %lld) for shard %.*s, machine %.*s: "
                      "not newer than the high-water mark (epoch %lld, seq %lld)",
                      (long long)q->shard_epoch, (long long)q->sequence_number,
                      pr_len(q->shard_id.len), (const char *)q->shard_id.p,
                      pr_len(q->machine_id.len), (const char *)q->machine_id.p,
                      (long long)fe->epoch, (long long)fe->seq);
            return false;
        }
    }
    f = bf_sim_fence_put(s, shard, mref, q->shard_epoch, q->sequence_number,
                         f == UINT32_MAX ? s->next_fence_no + 1 : s->fences[f].no);
    if (f == UINT32_MAX)
        goto oom;
    bf_sim_fence_mark_dirty(s, f);
    return true;
oom:
    reply_err(r, BF_SIM_INTERNAL, "simulated provider: out of memory");
    return false;
}

/* ------------------------------------------------------------ lifecycle RPCs */

static size_t md_bytes(const struct bf_sim_request *q)
{
    size_t n = 0;
    for (size_t k = 0; k < q->n_metadata; k++)
        n += q->metadata[k].key.len + q->metadata[k].value.len;
    return n;
}

static bool exhausted(const struct bf_sim *s, uint16_t type)
{
    if (s->cfg.max_hosts && s->held >= s->cfg.max_hosts)
        return true;
    if (s->cfg.max_hosts_per_type && s->held_type[type] >= s->cfg.max_hosts_per_type)
        return true;
    return false;
}

static void do_transition(struct bf_sim *s, const struct bf_sim_request *q, struct bf_sim_reply *r)
{
    int kind = q->kind;
    const struct bf_sim_bytes *id = &q->machine_id;
    /* 1. argument shape */
    if (id->len == 0) {
        reply_err(r, BF_SIM_INVALID_ARGUMENT, "machine_id is required");
        return;
    }
    if (id->len > SIM_ID_MAX || q->shard_id.len > SIM_ID_MAX) {
        reply_err(r, BF_SIM_INVALID_ARGUMENT, "machine_id and shard_id are limited to %d bytes",
                  SIM_ID_MAX);
        return;
    }
    if (kind == BF_SIM_RPC_CONFIGURE) {
        if (q->cluster_id.len == 0) {
            reply_err(r, BF_SIM_INVALID_ARGUMENT, "cluster_id is required");
            return;
        }
        if (q->cluster_id.len > SIM_ID_MAX) {
            reply_err(r, BF_SIM_INVALID_ARGUMENT, "cluster_id is limited to %d bytes", SIM_ID_MAX);
            return;
        }
        size_t mb = md_bytes(q);
        if (mb > s->cfg.max_metadata_bytes) {
            reply_err(r, BF_SIM_INVALID_ARGUMENT,
                      "shard_metadata holds %zu bytes of keys and values, over the cap of %zu", mb,
                      s->cfg.max_metadata_bytes);
            return;
        }
    }
    /* 2. fence (before not-found and before idempotency) */
    uint32_t i = bf_sim_find_machine(s, id->p, id->len);
    if (!fence_check(s, q, i, r))
        return;
    /* 3. not found */
    if (i == UINT32_MAX) {
        reply_err(r, BF_SIM_NOT_FOUND, "machine %.*s not found", pr_len(id->len),
                  (const char *)id->p);
        return;
    }
    struct sim_machine *m = &s->m[i];
    /* 4. Delete is not supported on bare metal */
    if (kind == BF_SIM_RPC_DELETE && s->cfg.bare_metal_delete_unimplemented &&
        s->types[m->type].t.capacity_type == BF_CT_BARE_METAL) {
        reply_err(r, BF_SIM_UNIMPLEMENTED,
                  "Delete is not supported for bare-metal machine %s (held, never released)",
                  sim_mid(s, i));
        return;
    }
    /* 5. idempotency on (machine_id, kind) */
    uint64_t op = m->ops ? s->ops[m->ops - 1][kind] : 0;
    if (op && (m->state == k_trans[kind] || m->state == k_target[kind])) {
        s->stats.idempotent[kind]++;
        reply_ack(s, op, i, r);
        return;
    }
    /* 6. position */
    if (m->state != k_source[kind]) {
        reply_err(r, BF_SIM_INTERNAL, "invalid state transition: %s requires %s, machine %s is %s",
                  bf_sim_rpc_name(kind), bf_state_name(k_source[kind]), sim_mid(s, i),
                  bf_state_name(m->state));
        return;
    }
    /* 7. accept: reserve everything first */
    uint32_t cluster = 0, md = 0;
    if (bf_sim_ops_slot(s, i) || heap_reserve(s))
        goto oom;
    m = &s->m[i];
    if (kind == BF_SIM_RPC_CONFIGURE) {
        cluster = bf_sim_str_intern(&s->clusters, q->cluster_id.p, q->cluster_id.len);
        if (cluster == UINT32_MAX)
            goto oom;
        md = bf_sim_md_intern(&s->md, q->metadata, q->n_metadata);
        if (md == UINT32_MAX)
            goto oom;
    }
    int outcome = SIM_OUT_OK;
    if (kind == BF_SIM_RPC_CREATE && exhausted(s, m->type)) {
        outcome = SIM_OUT_EXHAUSTED;
        s->stats.exhausted++;
    } else if (s->cfg.transition_failure[kind] > 0 &&
               rng_unit(s) < s->cfg.transition_failure[kind]) {
        outcome = SIM_OUT_FAIL;
    }
    op = ++s->next_op;
    s->ops[m->ops - 1][kind] = op;
    s->meta_dirty = true;
    if (kind == BF_SIM_RPC_CREATE && outcome != SIM_OUT_EXHAUSTED)
        hold(s, i);
    if (kind == BF_SIM_RPC_CONFIGURE) {
        m->cluster = cluster;
        bf_sim_md_unref(&s->md, m->md);
        m->md = md;
    }
    set_state(s, i, k_trans[kind]);
    touch(s, i);
    s->stats.accepted[kind]++;
    const struct bf_sim_dist *d = &s->cfg.transition_latency[kind];
    int64_t lat = dist_is_zero(d) ? 0 : dist_sample(s, d);
    if (lat == 0 && !s->cfg.defer_instant) {
        complete(s, i, kind, op, outcome);
    } else {
        struct sim_timer t = {.due = lat > INT64_MAX - s->now ? INT64_MAX : s->now + lat,
                              .seq = ++s->timer_seq,
                              .op = op,
                              .idx = i,
                              .kind = (uint8_t)kind,
                              .outcome = (uint8_t)outcome};
        heap_push(s, &t);
    }
    reply_ack(s, op, i, r);
    return;
oom:
    bf_sim_md_unref(&s->md, md);
    reply_err(r, BF_SIM_INTERNAL, "simulated provider: out of memory");
}

void bf_sim_transition(struct bf_sim *s, const struct bf_sim_request *q, int64_t now_ns,
                       struct bf_sim_reply *r)
{
    reply_reset(r);
    if (q->kind < 0 || q->kind >= BF_SIM_KIND_COUNT) {
        reply_err(r, BF_SIM_UNIMPLEMENTED, "unknown lifecycle kind %d", q->kind);
        return;
    }
    call_begin(s, now_ns);
    s->stats.calls[q->kind]++;
    if (!inject(s, q->kind, r))
        do_transition(s, q, r);
    reply_delay(s, q->kind, r);
    call_end(s, r);
}

/* ------------------------------------------------------------ Get / List */

void bf_sim_get(struct bf_sim *s, struct bf_sim_bytes id, int64_t now_ns, struct bf_sim_reply *r)
{
    reply_reset(r);
    call_begin(s, now_ns);
    s->stats.calls[BF_SIM_RPC_GET]++;
    if (inject(s, BF_SIM_RPC_GET, r))
        goto out;
    if (id.len == 0) {
        reply_err(r, BF_SIM_INVALID_ARGUMENT, "id is required");
        goto out;
    }
    uint32_t i = bf_sim_find_machine(s, id.p, id.len);
    if (i == UINT32_MAX) {
        reply_err(r, BF_SIM_NOT_FOUND, "machine %.*s not found", pr_len(id.len),
                  (const char *)id.p);
        goto out;
    }
    reply_machine(s, i, r);
out:
    reply_delay(s, BF_SIM_RPC_GET, r);
    call_end(s, r);
}

/* Go strconv.ParseInt(s, 10, 64). */
static bool parse_cursor(struct bf_sim_bytes b, int64_t *out)
{
    size_t k = 0;
    bool neg = false;
    if (b.len == 0)
        return false;
    if (b.p[0] == '+' || b.p[0] == '-') {
        neg = b.p[0] == '-';
        k = 1;
    }
    if (k == b.len)
        return false;
    uint64_t v = 0;
    for (; k < b.len; k++) {
        uint8_t c = b.p[k];
        if (c < '0' || c > '9')
            return false;
        if (v > (UINT64_MAX - 9) / 10)
            return false;
        v = v * 10 + (c - '0');
        if (v > (uint64_t)INT64_MAX + (neg ? 1 : 0))
            return false;
    }
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

struct list_run {
    uint32_t mask;
    size_t max, count;
    int64_t last;
    bool truncated, oom;
};

/* Appends machine i if its state matches; returns false to stop. */
static bool list_emit(struct bf_sim *s, struct list_run *lr, uint32_t i, struct bf_sim_reply *r)
{
    if (!(lr->mask & (1u << s->m[i].state)))
        return true;
    size_t n = bf_sim_machine_size(s, i);
    if (!n || reply_reserve(r, bf_pb_ld_len(1, n))) {
        lr->oom = true;
        return false;
    }
    uint8_t *p = r->body + r->len;
    p = bf_pb_put_ld_header(p, 1, n);
    p = bf_sim_machine_write(s, i, p);
    r->len = (size_t)(p - r->body);
    lr->count++;
    lr->last = s->m[i].mod_rev;
    if (lr->max && lr->count == lr->max) {
        lr->truncated = true;
        return false;
    }
    return true;
}

/*
 * A page (max_results set) reserves its reply once: up to `candidates`
 * machines (at most max) of about the size of machine `one_of` (+1/8 and
 * the entry header), instead of doubling from a few bytes to ~1 MB per page
 * (~17 reallocations, each of which may copy what was written). A page of
 * smaller machines only leaves virtual room unused; larger ones grow as
 * before. Only for a List of every state: a state filter can drop most
 * candidates (a List of FAILED machines would hold 64 MiB for a few bytes
 * until its reply is sent), so a filtered page grows as before. Bounded by
 * 64 MiB; a hint: failure is left to list_emit.
 */
#define LIST_RESERVE_MAX (64u << 20)
#define LIST_ALL_STATES  0x1feu /* states 1..8: list_run's mask without a filter */
static void list_reserve(struct bf_sim *s, const struct list_run *lr, size_t one_of,
                         size_t candidates, struct bf_sim_reply *r)
{
    if (!lr->max || !candidates || one_of >= s->n || lr->mask != LIST_ALL_STATES)
        return;
    size_t n = candidates < lr->max ? candidates : lr->max;
    size_t one = bf_sim_machine_size(s, (uint32_t)one_of);
    if (!one)
        return;
    one += one / 8 + 4;
    if (n > LIST_RESERVE_MAX / one)
        n = LIST_RESERVE_MAX / one;
    (void)reply_reserve(r, n * one + 32);
}

static void list_run(struct bf_sim *s, const struct bf_sim_list_args *a, struct bf_sim_reply *r)
{
    struct list_run lr = {.mask = a->state_mask ? a->state_mask : LIST_ALL_STATES,
                          .max = (size_t)a->max_results};
    int64_t all = s->base_rev - 1, from = all, c;
    if (parse_cursor(a->since_revision, &c) && c > all && c <= s->rev)
        from = c;
    uint32_t *sz = from == all && lr.max == 0 ? malloc(s->n * sizeof *sz + 1) : NULL;
    if (sz) {
        /* full list: size every matching machine once, reserve once, write */
        size_t total = 0;
        for (uint32_t i = 0; i < s->n && !lr.oom; i++) {
            sz[i] = 0;
            if (!(lr.mask & (1u << s->m[i].state)))
                continue;
            size_t n = bf_sim_machine_size(s, i);
            if (!n || n > UINT32_MAX)
                lr.oom = true;
            sz[i] = (uint32_t)n;
            total += bf_pb_ld_len(1, n);
        }
        if (!lr.oom && reply_reserve(r, total + 32))
            lr.oom = true;
        for (uint32_t i = 0; i < s->n && !lr.oom; i++) {
            if (!sz[i])
                continue;
            uint8_t *p = r->body + r->len;
            p = bf_pb_put_ld_header(p, 1, sz[i]);
            p = bf_sim_machine_write(s, i, p);
            r->len = (size_t)(p - r->body);
        }
        free(sz);
    } else if (from == all && lr.max == 0) {
        for (uint32_t i = 0; i < s->n; i++)
            if (!list_emit(s, &lr, i, r))
                break;
    } else {
        bool go = true;
        int64_t floor = base_floor(s);
        /* first log entry with rev > from */
        size_t lo = 0, hi = s->n_log;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (s->log[mid].rev > from)
                hi = mid;
            else
                lo = mid + 1;
        }
        size_t first = from < floor ? (size_t)(from - s->base_rev + 1) : s->n_base;
        size_t est = first < s->n_base ? first : lo < s->n_log ? s->log[lo].idx : s->n;
        list_reserve(s, &lr, est, (s->n_base - first) + (s->n_log - lo), r);
        if (from < floor) {
            for (size_t i = first; go && i < s->n_base; i++)
                if (s->m[i].mod_rev == s->base_rev + (int64_t)i)
                    go = list_emit(s, &lr, (uint32_t)i, r);
        }
        for (size_t k = lo; go && k < s->n_log; k++) {
            const struct sim_logent *e = &s->log[k];
            if (s->m[e->idx].mod_rev == e->rev)
                go = list_emit(s, &lr, e->idx, r);
        }
    }
    if (lr.oom) {
        reply_err(r, BF_SIM_INTERNAL, "simulated provider: out of memory");
        return;
    }
    char rev[24];
    size_t rl =
        (size_t)snprintf(rev, sizeof rev, "%lld", (long long)(lr.truncated ? lr.last : s->rev));
    if (reply_reserve(r, bf_pb_ld_len(2, rl))) {
        reply_err(r, BF_SIM_INTERNAL, "simulated provider: out of memory");
        return;
    }
    r->len = (size_t)(bf_pb_put_ld(r->body + r->len, 2, rev, rl) - r->body);
}

void bf_sim_list(struct bf_sim *s, const struct bf_sim_list_args *a, int64_t now_ns,
                 struct bf_sim_reply *r)
{
    reply_reset(r);
    call_begin(s, now_ns);
    s->stats.calls[BF_SIM_RPC_LIST]++;
    if (inject(s, BF_SIM_RPC_LIST, r))
        goto out;
    if (a->bad_state) {
        reply_err(r, BF_SIM_INVALID_ARGUMENT,
                  "states: every value must be a MachineState from SPECULATIVE to FAILED");
        goto out;
    }
    if (a->max_results < 0) {
        reply_err(r, BF_SIM_INVALID_ARGUMENT, "max_results must be >= 0");
        goto out;
    }
    list_run(s, a, r);
out:
    reply_delay(s, BF_SIM_RPC_LIST, r);
    call_end(s, r);
}

/* ------------------------------------------------------------ raw-bytes entry point */

void bf_sim_handle(struct bf_sim *s, int rpc, const uint8_t *req, size_t len, int64_t now_ns,
                   struct bf_sim_reply *r)
{
    static const char *const msg[] = {"CreateRequest", "ConfigureRequest", "DrainRequest",
                                      "DeleteRequest", "MachineRef",       "ListFilter"};
    reply_reset(r);
    if (rpc < 0 || rpc >= BF_SIM_RPC_COUNT) {
        reply_err(r, BF_SIM_UNIMPLEMENTED, "unknown method");
        return;
    }
    int rc = 0;
    if (rpc < BF_SIM_KIND_COUNT) {
        struct bf_sim_request q;
        struct bf_sim_md_entry *md = NULL;
        rc = bf_sim_decode_lifecycle(rpc, req, len, &q, &md);
        if (!rc)
            bf_sim_transition(s, &q, now_ns, r);
        free(md);
    } else if (rpc == BF_SIM_RPC_GET) {
        struct bf_sim_bytes id;
        rc = bf_sim_decode_ref(req, len, &id);
        if (!rc)
            bf_sim_get(s, id, now_ns, r);
    } else {
        struct bf_sim_list_args a;
        rc = bf_sim_decode_list(req, len, &a);
        if (!rc)
            bf_sim_list(s, &a, now_ns, r);
    }
    if (rc) {
        call_begin(s, now_ns);
        s->stats.calls[rpc]++;
        if (rc == -ENOMEM)
            reply_err(r, BF_SIM_INTERNAL, "simulated provider: out of memory");
        else
            reply_err(r, BF_SIM_INVALID_ARGUMENT, "malformed %s", msg[rpc]);
        call_end(s, r);
    }
}

/* ------------------------------------------------------------ protobuf-c entry points */

static struct bf_sim_bytes cstr(const char *p)
{
    struct bf_sim_bytes b = {(const uint8_t *)p, p ? strlen(p) : 0};
    return b;
}

void bf_sim_create_pb(struct bf_sim *s, const Bigfleet__V1alpha1__CreateRequest *q, int64_t now,
                      struct bf_sim_reply *r)
{
    struct bf_sim_request a = {.kind = BF_SIM_RPC_CREATE,
                               .machine_id = cstr(q->machine_id),
                               .shard_id = cstr(q->shard_id),
                               .shard_epoch = q->shard_epoch,
                               .sequence_number = q->sequence_number};
    bf_sim_transition(s, &a, now, r);
}

void bf_sim_configure_pb(struct bf_sim *s, const Bigfleet__V1alpha1__ConfigureRequest *q,
                         int64_t now, struct bf_sim_reply *r)
{
    struct bf_sim_md_entry *md = NULL;
    if (q->n_shard_metadata) {
        md = calloc(q->n_shard_metadata, sizeof *md);
        if (!md) {
            reply_reset(r);
            reply_err(r, BF_SIM_INTERNAL, "simulated provider: out of memory");
            return;
        }
        for (size_t k = 0; k < q->n_shard_metadata; k++) {
            md[k].key = cstr(q->shard_metadata[k]->key);
            md[k].value.p = q->shard_metadata[k]->value.data;
            md[k].value.len = q->shard_metadata[k]->value.len;
        }
    }
    struct bf_sim_request a = {.kind = BF_SIM_RPC_CONFIGURE,
                               .machine_id = cstr(q->machine_id),
                               .shard_id = cstr(q->shard_id),
                               .shard_epoch = q->shard_epoch,
                               .sequence_number = q->sequence_number,
                               .cluster_id = cstr(q->cluster_id),
                               .bootstrap_blob_len = q->bootstrap_blob.len,
                               .n_metadata = q->n_shard_metadata,
                               .metadata = md};
    bf_sim_transition(s, &a, now, r);
    free(md);
}

void bf_sim_drain_pb(struct bf_sim *s, const Bigfleet__V1alpha1__DrainRequest *q, int64_t now,
                     struct bf_sim_reply *r)
{
    struct bf_sim_request a = {.kind = BF_SIM_RPC_DRAIN,
                               .machine_id = cstr(q->machine_id),
                               .shard_id = cstr(q->shard_id),
                               .shard_epoch = q->shard_epoch,
                               .sequence_number = q->sequence_number,
                               .grace_period_seconds = q->grace_period_seconds};
    bf_sim_transition(s, &a, now, r);
}

void bf_sim_delete_pb(struct bf_sim *s, const Bigfleet__V1alpha1__DeleteRequest *q, int64_t now,
                      struct bf_sim_reply *r)
{
    struct bf_sim_request a = {.kind = BF_SIM_RPC_DELETE,
                               .machine_id = cstr(q->machine_id),
                               .shard_id = cstr(q->shard_id),
                               .shard_epoch = q->shard_epoch,
                               .sequence_number = q->sequence_number};
    bf_sim_transition(s, &a, now, r);
}

void bf_sim_get_pb(struct bf_sim *s, const Bigfleet__V1alpha1__MachineRef *q, int64_t now,
                   struct bf_sim_reply *r)
{
    bf_sim_get(s, cstr(q->id), now, r);
}

void bf_sim_list_pb(struct bf_sim *s, const Bigfleet__V1alpha1__ListFilter *q, int64_t now,
                    struct bf_sim_reply *r)
{
    struct bf_sim_list_args a = {.max_results = q->max_results,
                                 .since_revision = {q->since_revision.data, q->since_revision.len}};
    for (size_t k = 0; k < q->n_states; k++) {
        int v = (int)q->states[k];
        if (v >= BF_STATE_SPECULATIVE && v <= BF_STATE_FAILED)
            a.state_mask |= 1u << v;
        else
            a.bad_state = true;
    }
    bf_sim_list(s, &a, now, r);
}

/* ------------------------------------------------------------ time */

int bf_sim_advance(struct bf_sim *s, int64_t now_ns)
{
    s->call_rev = s->rev;
    int n = advance_to(s, now_ns);
    if (flush(s)) {
        BF_ERROR("simprovider state persistence failed", "path=\"%s\"",
                 s->cfg.state_path ? s->cfg.state_path : "");
        return -EIO;
    }
    return n;
}

int64_t bf_sim_next_deadline(const struct bf_sim *s)
{
    int64_t d = INT64_MAX;
    if (s->n_heap)
        d = s->heap[0].due;
    if (s->cfg.spot_interruption_rate > 0 && s->n_spot) {
        int64_t t = s->last_spot > INT64_MAX - s->cfg.spot_tick_ns
                        ? INT64_MAX
                        : s->last_spot + s->cfg.spot_tick_ns;
        if (t < d)
            d = t;
    }
    return d;
}

int bf_sim_fail_machine(struct bf_sim *s, const char *id, const char *reason, int64_t now_ns)
{
    if (!reason || !*reason)
        return -EINVAL;
    call_begin(s, now_ns);
    int rc = 0;
    uint32_t i = bf_sim_find_machine(s, id, strlen(id));
    if (i == UINT32_MAX) {
        rc = -ENOENT;
    } else if (s->m[i].state != BF_STATE_FAILED) {
        uint32_t e = bf_sim_str_intern(&s->errors, reason, strlen(reason));
        if (e == UINT32_MAX)
            rc = -ENOMEM;
        else
            fail_with(s, i, e);
    }
    if (flush(s))
        rc = rc ? rc : -EIO;
    return rc;
}

/* ------------------------------------------------------------ introspection */

int bf_sim_lookup(struct bf_sim *s, const char *id, struct bf_sim_view *v)
{
    uint32_t i = bf_sim_find_machine(s, id, strlen(id));
    if (i == UINT32_MAX)
        return -ENOENT;
    const struct sim_machine *m = &s->m[i];
    memset(v, 0, sizeof *v);
    v->id = sim_mid(s, i);
    v->state = m->state;
    v->type = &s->pub_types[m->type];
    v->zone = sim_str(&s->zones, s->rack_zone[m->rack]);
    v->rack = sim_str(&s->racks, m->rack);
    v->has_host = m->host != 0;
    if (m->cluster) {
        v->cluster = (const uint8_t *)sim_str(&s->clusters, m->cluster);
        v->cluster_len = sim_strlen(&s->clusters, m->cluster);
    }
    v->last_error = m->err ? sim_str(&s->errors, m->err) : NULL;
    v->n_metadata = m->md ? s->md.v[m->md].n : 0;
    v->mod_revision = m->mod_rev;
    if (m->ops)
        memcpy(v->op, s->ops[m->ops - 1], sizeof v->op);
    return 0;
}

size_t bf_sim_machine_count(const struct bf_sim *s)
{
    return s->n;
}

const char *bf_sim_machine_id(const struct bf_sim *s, size_t i)
{
    return i < s->n ? sim_mid(s, (uint32_t)i) : NULL;
}

size_t bf_sim_count_in_state(const struct bf_sim *s, int state)
{
    return state >= 0 && state < BF_STATE_COUNT ? s->count[state] : 0;
}

int64_t bf_sim_revision(const struct bf_sim *s)
{
    return s->rev;
}

const struct bf_sim_type *bf_sim_types(const struct bf_sim *s, size_t *n)
{
    *n = s->n_types;
    return s->pub_types;
}

uint32_t bf_sim_hosts_in_use(const struct bf_sim *s)
{
    return s->held;
}

void bf_sim_get_stats(const struct bf_sim *s, struct bf_sim_stats *out)
{
    *out = s->stats;
}

/* ------------------------------------------------------------ open / seed / close */

static int intern_msg(struct bf_sim *s, uint32_t *out, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int intern_msg(struct bf_sim *s, uint32_t *out, const char *fmt, ...)
{
    char b[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -EINVAL;
    *out = bf_sim_str_intern(&s->errors, b, strlen(b));
    return *out == UINT32_MAX ? -ENOMEM : 0;
}

static int check_prob(double p, const char *what, char *err, size_t err_len)
{
    if (isnan(p) || p < 0 || p > 1) {
        bf_errf(err, err_len, "%s must be a probability in [0,1]", what);
        return -EINVAL;
    }
    return 0;
}

static int check_dist(const struct bf_sim_dist *d, const char *what, char *err, size_t err_len)
{
    if (d->kind > BF_SIM_DIST_NORMAL || d->a_ns < 0 || d->b_ns < 0 ||
        (d->kind == BF_SIM_DIST_UNIFORM && d->b_ns < d->a_ns)) {
        bf_errf(err, err_len, "%s: bad latency distribution", what);
        return -EINVAL;
    }
    return 0;
}

static int validate_config(const struct bf_sim_config *c, char *err, size_t err_len)
{
    int rc;
    if (c->provider_name && strlen(c->provider_name) >= BF_SIM_NAME_MAX * 2) {
        bf_errf(err, err_len, "provider name too long");
        return -EINVAL;
    }
    if (!c->zone_names && (c->zones < 1 || c->zones > 1024)) {
        bf_errf(err, err_len, "zones must be in 1..1024");
        return -EINVAL;
    }
    if (c->racks_per_zone < 1 || c->racks_per_zone > 4096) {
        bf_errf(err, err_len, "racks_per_zone must be in 1..4096");
        return -EINVAL;
    }
    for (int k = 0; k < BF_SIM_KIND_COUNT; k++) {
        if ((rc = check_prob(c->transition_failure[k], "transition failure", err, err_len)) ||
            (rc = check_dist(&c->transition_latency[k], "transition latency", err, err_len)))
            return rc;
    }
    for (int k = 0; k < BF_SIM_RPC_COUNT; k++) {
        if ((rc = check_prob(c->rpc_error[k], "rpc error", err, err_len)) ||
            (rc = check_dist(&c->reply_latency[k], "reply latency", err, err_len)))
            return rc;
    }
    if (!isfinite(c->spot_interruption_rate) || c->spot_interruption_rate < 0) {
        bf_errf(err, err_len, "spot interruption rate must be finite and >= 0");
        return -EINVAL;
    }
    if (c->spot_tick_ns <= 0) {
        bf_errf(err, err_len, "spot tick must be > 0");
        return -EINVAL;
    }
    if (c->max_metadata_bytes == 0) {
        bf_errf(err, err_len, "max metadata bytes must be > 0");
        return -EINVAL;
    }
    if (c->seed_configured && c->seed_clusters == 0) {
        bf_errf(err, err_len, "seeding Configured machines needs seed_clusters >= 1");
        return -EINVAL;
    }
    if (!isfinite(c->seed_interruption_penalty) || !isfinite(c->seed_reclamation_penalty) ||
        c->seed_interruption_penalty < 0 || c->seed_reclamation_penalty < 0) {
        bf_errf(err, err_len, "seed penalties must be finite and >= 0");
        return -EINVAL;
    }
    return 0;
}

static int setup_topology(struct bf_sim *s, uint32_t **zone_idx, uint32_t *n_zones,
                          uint32_t **rack_idx, char *err, size_t err_len)
{
    const struct bf_sim_config *c = &s->cfg;
    size_t cap = 16;
    uint32_t n = 0;
    uint32_t *z = malloc(cap * sizeof *z);
    if (!z)
        return -ENOMEM;
    if (c->zone_names) {
        const char *p = c->zone_names;
        for (;;) {
            const char *e = strchr(p, ',');
            size_t l = e ? (size_t)(e - p) : strlen(p);
            if (l == 0 || l >= BF_SIM_NAME_MAX) {
                bf_errf(err, err_len, "zone names: empty or too long name");
                free(z);
                return -EINVAL;
            }
            if (n == cap && bf_grow((void **)&z, &cap, (size_t)n + 1, sizeof *z)) {
                free(z);
                return -ENOMEM;
            }
            uint32_t zi = bf_sim_zone(s, p, l);
            if (zi == UINT32_MAX) {
                free(z);
                return -ENOMEM;
            }
            for (uint32_t k = 0; k < n; k++) {
                if (z[k] == zi) {
                    bf_errf(err, err_len, "zone names: duplicate %.*s", (int)l, p);
                    free(z);
                    return -EINVAL;
                }
            }
            z[n++] = zi;
            if (!e)
                break;
            p = e + 1;
        }
    } else {
        for (uint32_t k = 0; k < c->zones; k++) {
            char name[BF_SIM_NAME_MAX];
            bf_sim_zone_default_name(k, name, sizeof name);
            if (n == cap && bf_grow((void **)&z, &cap, (size_t)n + 1, sizeof *z)) {
                free(z);
                return -ENOMEM;
            }
            z[n] = bf_sim_zone(s, name, strlen(name));
            if (z[n] == UINT32_MAX) {
                free(z);
                return -ENOMEM;
            }
            n++;
        }
    }
    uint32_t *r = malloc((size_t)n * c->racks_per_zone * sizeof *r);
    if (!r) {
        free(z);
        return -ENOMEM;
    }
    for (uint32_t k = 0; k < n; k++) {
        for (uint32_t j = 0; j < c->racks_per_zone; j++) {
            char name[BF_SIM_NAME_MAX * 2];
            snprintf(name, sizeof name, "%s-rack-%u", sim_str(&s->zones, z[k]), j);
            r[k * c->racks_per_zone + j] = bf_sim_rack(s, z[k], name, strlen(name));
            if (r[k * c->racks_per_zone + j] == UINT32_MAX) {
                free(z);
                free(r);
                return -ENOMEM;
            }
        }
    }
    *zone_idx = z;
    *n_zones = n;
    *rack_idx = r;
    return 0;
}

/* The shard_metadata a seeded Configured machine of type t carries
 * (wire.md §10): priority, both penalties (bucket upper bounds), the
 * fingerprint of a profile pinned to the type, an empty group. */
static uint32_t seed_md(struct bf_sim *s, uint32_t t)
{
    const struct bf_sim_config *c = &s->cfg;
    char prio[16], ip[32], rp[32];
    uint8_t ipb = bf_bucket_for_dollars(c->seed_interruption_penalty);
    uint8_t rpb = bf_bucket_for_dollars(c->seed_reclamation_penalty);
    snprintf(prio, sizeof prio, "%d", c->seed_priority);
    bf_format_float_go(bf_bucket_upper_bound(ipb), ip, sizeof ip);
    bf_format_float_go(bf_bucket_upper_bound(rpb), rp, sizeof rp);
    const char *vals[1] = {s->types[t].t.name};
    struct bf_requirement req = {
        .key = BF_LABEL_INSTANCE_TYPE, .op = BF_OP_IN, .n_values = 1, .values = vals};
    struct bf_need_profile prof = {
        .priority = c->seed_priority, .ipb = ipb, .rpb = rpb, .n_reqs = 1, .reqs = &req};
    bf_profile_canonicalize(&prof);
    char *fp = bf_profile_fingerprint_dup(&prof);
    if (!fp)
        return UINT32_MAX;
    struct bf_sim_md_entry e[5] = {
        {{(const uint8_t *)BF_MD_PRIORITY, strlen(BF_MD_PRIORITY)},
         {(const uint8_t *)prio, strlen(prio)}},
        {{(const uint8_t *)BF_MD_INTERRUPTION, strlen(BF_MD_INTERRUPTION)},
         {(const uint8_t *)ip, strlen(ip)}},
        {{(const uint8_t *)BF_MD_RECLAMATION, strlen(BF_MD_RECLAMATION)},
         {(const uint8_t *)rp, strlen(rp)}},
        {{(const uint8_t *)BF_MD_FINGERPRINT, strlen(BF_MD_FINGERPRINT)},
         {(const uint8_t *)fp, strlen(fp)}},
        {{(const uint8_t *)BF_MD_GROUP, strlen(BF_MD_GROUP)}, {NULL, 0}},
    };
    uint32_t md = bf_sim_md_intern(&s->md, e, 5);
    free(fp);
    return md;
}

/* "<type>-<zone>-<n>" into out (what snprintf "%s-%s-%llu" writes, cut at
 * cap - 1 the same way): 503K of them at start-up, before the simulator
 * listens, so without the format interpreter. Returns the untruncated
 * length. */
static int seed_id(char *out, size_t cap, const char *type, const char *zone, uint64_t n)
{
    char digits[24];
    size_t nd = 0;
    do {
        digits[sizeof digits - 1 - nd++] = (char)('0' + n % 10);
        n /= 10;
    } while (n);
    size_t tl = strlen(type), zl = strlen(zone), len = tl + 1 + zl + 1 + nd;
    char tmp[BF_SIM_NAME_MAX * 4 + 48], *p = tmp;
    if (len >= sizeof tmp)
        return snprintf(out, cap, "%s-%s-%.*s", type, zone, (int)nd, digits + sizeof digits - nd);
    memcpy(p, type, tl);
    p += tl;
    *p++ = '-';
    memcpy(p, zone, zl);
    p += zl;
    *p++ = '-';
    memcpy(p, digits + sizeof digits - nd, nd);
    size_t keep = len < cap ? len : cap - 1;
    memcpy(out, tmp, keep);
    out[keep] = 0;
    return (int)len;
}

static int seed(struct bf_sim *s, const uint32_t *zone_idx, uint32_t nz, const uint32_t *rack_idx,
                char *err, size_t err_len)
{
    const struct bf_sim_config *c = &s->cfg;
    uint64_t total = 0;
    for (size_t t = 0; t < s->n_types; t++)
        total += (uint64_t)c->seed_speculative + c->seed_idle + c->seed_configured +
                 (uint64_t)c->seed_speculative_per_node * s->types[t].t.trace_nodes;
    if (total > SIM_MAX_MACHINES) {
        bf_errf(err, err_len, "seeding %llu machines exceeds the limit of %u",
                (unsigned long long)total, SIM_MAX_MACHINES);
        return -EINVAL;
    }
    if (bf_sim_grow_machines(s, (size_t)total) || bf_sim_str_reserve(&s->ids, (size_t)total) ||
        bf_sim_buf_reserve(&s->ids.arena, (size_t)total * 40))
        return -ENOMEM;
    uint32_t *clusters = NULL;
    if (c->seed_configured) {
        clusters = malloc((size_t)c->seed_clusters * sizeof *clusters);
        if (!clusters)
            return -ENOMEM;
        for (uint32_t k = 0; k < c->seed_clusters; k++) {
            char name[BF_SIM_NAME_MAX * 2];
            snprintf(name, sizeof name, "%s%u", c->cluster_prefix ? c->cluster_prefix : "", k);
            clusters[k] = bf_sim_str_intern(&s->clusters, name, strlen(name));
            if (clusters[k] == UINT32_MAX) {
                free(clusters);
                return -ENOMEM;
            }
        }
    }
    uint64_t next_cluster = 0;
    int rc = 0;
    for (size_t t = 0; t < s->n_types && !rc; t++) {
        const struct sim_type *st = &s->types[t];
        uint64_t n = (uint64_t)c->seed_speculative + c->seed_idle + c->seed_configured +
                     (uint64_t)c->seed_speculative_per_node * st->t.trace_nodes;
        uint32_t md = 0;
        if (c->seed_configured) {
            md = seed_md(s, (uint32_t)t);
            if (md == UINT32_MAX) {
                rc = -ENOMEM;
                break;
            }
        }
        for (uint64_t j = 0; j < n; j++) {
            uint32_t z = (uint32_t)(j % nz);
            uint32_t rk = (uint32_t)((j / nz) % c->racks_per_zone);
            char id[BF_SIM_NAME_MAX * 3];
            int il = seed_id(id, sizeof id, st->t.name, sim_str(&s->zones, zone_idx[z]), j / nz);
            uint8_t state = j < c->seed_configured ? BF_STATE_CONFIGURED
                            : j < (uint64_t)c->seed_configured + c->seed_idle
                                ? BF_STATE_IDLE
                                : BF_STATE_SPECULATIVE;
            uint32_t i = bf_sim_add_machine(s, id, (size_t)il, (uint16_t)t,
                                            rack_idx[z * c->racks_per_zone + rk], state);
            if (i == UINT32_MAX) {
                rc = -ENOMEM;
                break;
            }
            if (state != BF_STATE_SPECULATIVE) {
                s->m[i].host = ++s->next_host;
                hold(s, i);
            }
            if (state == BF_STATE_CONFIGURED) {
                s->m[i].cluster = clusters[next_cluster++ % c->seed_clusters];
                bf_sim_md_ref(&s->md, md);
                s->m[i].md = md;
            }
            bf_sim_spot_update(s, i);
            bf_sim_mark_dirty(s, i);
        }
        bf_sim_md_unref(&s->md, md); /* drop the reference seed_md() took */
    }
    free(clusters);
    return rc;
}

void bf_sim_close(struct bf_sim *s)
{
    if (!s)
        return;
    if (s->store) {
        flush(s);
        bf_sim_store_close(s);
    }
    bf_sim_chunks_free(s);
    for (size_t t = 0; t < s->n_types; t++)
        free(s->types[t].res_body);
    free(s->types);
    free(s->pub_types);
    bf_sim_strpool_free(&s->zones);
    bf_sim_strpool_free(&s->racks);
    free(s->rack_zone);
    bf_sim_strpool_free(&s->ids);
    free(s->m);
    bf_sim_strpool_free(&s->clusters);
    bf_sim_strpool_free(&s->errors);
    bf_sim_strpool_free(&s->shards);
    bf_sim_strpool_free(&s->ghosts);
    bf_sim_mdpool_free(&s->md);
    free(s->ops);
    free(s->fences);
    sim_fenceix_free(&s->fence_ix);
    free(s->log);
    free(s->heap);
    free(s->held_type);
    free(s->spot_pos);
    free(s->spot_set);
    free(s->dirty);
    free(s->dirty_f);
    free(s->msgs.exhausted);
    free(s);
}

int bf_sim_open(const struct bf_sim_config *cfg, struct bf_sim **out, char *err, size_t err_len)
{
    int rc;
    struct bf_sim_type *cat = NULL;
    size_t n_cat = 0;
    uint32_t *zone_idx = NULL, *rack_idx = NULL, nz = 0;
    *out = NULL;
    if ((rc = validate_config(cfg, err, err_len)))
        return rc;
    struct bf_sim *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->cfg = *cfg;
    snprintf(s->provider, sizeof s->provider, "%s", cfg->provider_name ? cfg->provider_name : "");
    s->provider_len = strlen(s->provider);
    /* pools */
    if (bf_sim_strpool_init(&s->zones) || bf_sim_strpool_init(&s->racks) ||
        bf_sim_strpool_init(&s->ids) || bf_sim_strpool_init(&s->clusters) ||
        bf_sim_strpool_init(&s->errors) || bf_sim_strpool_init(&s->shards) ||
        bf_sim_strpool_init(&s->ghosts) || bf_sim_mdpool_init(&s->md)) {
        rc = -ENOMEM;
        goto fail;
    }
    /* catalog */
    if (cfg->n_types > 0) {
        rc = bf_sim_catalog_build(cfg->types, cfg->n_types, cfg->spot_variants, &cat, &n_cat, err,
                                  err_len);
    } else if (cfg->catalog_path) {
        struct bf_sim_type *file = NULL;
        size_t nf = 0;
        rc = bf_sim_catalog_load(cfg->catalog_path, false, &file, &nf, err, err_len);
        if (!rc)
            rc = bf_sim_catalog_build(file, nf, cfg->spot_variants, &cat, &n_cat, err, err_len);
        free(file);
    } else {
        size_t nb;
        const struct bf_sim_type *b = bf_sim_catalog_builtin(&nb);
        rc = bf_sim_catalog_build(b, nb, cfg->spot_variants, &cat, &n_cat, err, err_len);
    }
    if (rc)
        goto fail;
    s->types = calloc(n_cat, sizeof *s->types);
    s->pub_types = calloc(n_cat, sizeof *s->pub_types);
    s->held_type = calloc(n_cat, sizeof *s->held_type);
    if (!s->types || !s->pub_types || !s->held_type) {
        rc = -ENOMEM;
        goto fail;
    }
    s->n_types = n_cat;
    bool any_spot = false;
    for (size_t t = 0; t < n_cat; t++) {
        s->types[t].t = cat[t];
        s->pub_types[t] = cat[t];
        any_spot |= cat[t].capacity_type == BF_CT_SPOT;
        if (bf_sim_type_prepare(&s->types[t])) {
            rc = -ENOMEM;
            goto fail;
        }
    }
    /* messages */
    struct sim_msgs *msgs = &s->msgs;
    if (!(msgs->exhausted = calloc(n_cat, sizeof *msgs->exhausted))) {
        rc = -ENOMEM;
        goto fail;
    }
    for (int k = 0; k < BF_SIM_KIND_COUNT; k++) {
        if ((rc = intern_msg(s, &msgs->fail[k], "%s failed: simulated provider error",
                             bf_sim_kind_lower(k))) ||
            (rc = intern_msg(s, &msgs->restart[k],
                             "%s transition interrupted by a provider restart; needs re-drive",
                             bf_sim_kind_lower(k))))
            goto fail;
    }
    if ((rc = intern_msg(s, &msgs->spot, "spot interruption: instance reclaimed by the provider")))
        goto fail;
    for (size_t t = 0; t < n_cat; t++)
        if ((rc = intern_msg(s, &msgs->exhausted[t],
                             "create failed: insufficient capacity for instance type %s "
                             "(simulated capacity exhaustion)",
                             cat[t].name)))
            goto fail;
    if (any_spot) {
        s->spot_pos = malloc(sizeof *s->spot_pos);
        s->spot_set = malloc(sizeof *s->spot_set);
        if (!s->spot_pos || !s->spot_set) {
            rc = -ENOMEM;
            goto fail;
        }
    }
    uint64_t seedv = cfg->rng_seed;
    for (int k = 0; k < 4; k++)
        s->rng[k] = sim_splitmix64(&seedv);
    if ((rc = setup_topology(s, &zone_idx, &nz, &rack_idx, err, err_len)))
        goto fail;
    /* pool: load or seed */
    long loaded = 0;
    if (cfg->state_path) {
        if ((rc = bf_sim_store_open(s, err, err_len)))
            goto fail;
        loaded = bf_sim_store_load(s, err, err_len);
        if (loaded < 0) {
            rc = (int)loaded;
            goto fail;
        }
    }
    if (loaded > 0) {
        /* restart recovery: orphaned transitions -> FAILED */
        for (uint32_t i = 0; i < s->n; i++) {
            uint8_t st = s->m[i].state;
            if (!bf_state_is_transitional(st))
                continue;
            int kind = st == BF_STATE_CREATING      ? BF_SIM_RPC_CREATE
                       : st == BF_STATE_CONFIGURING ? BF_SIM_RPC_CONFIGURE
                       : st == BF_STATE_DRAINING    ? BF_SIM_RPC_DRAIN
                                                    : BF_SIM_RPC_DELETE;
            s->m[i].err = msgs->restart[kind];
            release(s, i);
            set_state(s, i, BF_STATE_FAILED);
            bf_sim_mark_dirty(s, i);
        }
    } else if ((rc = seed(s, zone_idx, nz, rack_idx, err, err_len))) {
        goto fail;
    }
    /* fresh: rev 0, base from 1; reloaded: past every pre-restart cursor */
    s->base_rev = s->rev + 1;
    s->n_base = s->n;
    for (size_t i = 0; i < s->n; i++)
        s->m[i].mod_rev = s->base_rev + (int64_t)i;
    s->rev = base_floor(s);
    s->meta_dirty = true;
    s->call_rev = s->rev;
    if (flush(s)) {
        bf_errf(err, err_len, "writing the state to %s failed", cfg->state_path);
        rc = -EIO;
        goto fail;
    }
    free(cat);
    free(zone_idx);
    free(rack_idx);
    *out = s;
    return 0;
fail:
    if (rc == -ENOMEM)
        bf_errf(err, err_len, "out of memory");
    free(cat);
    free(zone_idx);
    free(rack_idx);
    if (s->store) {
        bf_sim_store_close(s);
        s->store = NULL;
    }
    bf_sim_close(s);
    return rc;
}
