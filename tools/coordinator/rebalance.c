/*
 * rebalance.c — the coordinator's rebalance loop (rebalance.h; seed 002
 * §1-§3, §6): eligibility, ordering, the three tiers, the two-phase moves
 * and the anti-oscillation state.
 *
 * Design notes
 *   - Pure: no I/O and no clock (the pass counter is the time unit; wall
 *     time only labels latencies). Everything leaves through rb_ops.
 *   - Moves, cooldowns and "done" entries are small arrays scanned
 *     linearly: a pass is O(shortfalls x donors x free rows + moves), a few
 *     hundred thousand comparisons at 200 shards, every few seconds.
 *   - A pass plans against the donors' reported counts minus what this
 *     pass already planned from them (planned[] parallel to each shard's
 *     free rows), so two shortfalls never count the same Idle machine.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/log.h"
#include "rebalance.h"

enum phase {
    PH_DONOR = 1,   /* selector sent to the donor, waiting for its ids */
    PH_RECIP,       /* ids sent to the recipient */
    PH_RECIP_RETRY, /* the recipient failed: resend next pass */
    PH_FOLLOW,      /* Tier 3: drained; the transfer to the donor goes next pass */
    PH_FOLLOW_SENT  /* Tier 3: transfer of the drained ids sent to the donor */
};

struct move {
    int tier;
    enum phase phase;
    char donor[RB_SHARD_MAX], recip[RB_SHARD_MAX];
    char type[RB_NAME_MAX], zone[RB_NAME_MAX];
    int32_t count, priority, ipb;
    uint64_t key;
    int64_t first_seen_ns;
    char instr[RB_INSTR_ID];
    char **ids;
    uint32_t n_ids;
    uint64_t started_pass, phase_pass;
};

struct cool {
    char from[RB_SHARD_MAX], to[RB_SHARD_MAX];
    char type[RB_NAME_MAX], zone[RB_NAME_MAX];
    uint64_t until_pass;
};

struct done {
    char recip[RB_SHARD_MAX];
    uint64_t key;
    int64_t first_seen_ns;
    uint64_t report_seq, pass;
};

struct rb {
    struct rb_config cfg;
    struct rb_ops ops;
    struct rb_type *types;
    size_t n_types;
    uint64_t pass;
    struct move *moves;
    uint32_t n_moves;
    struct cool *cools;
    uint32_t n_cools;
    struct done *dones;
    uint32_t n_dones;
    struct rb_flow_count *flows;
    size_t n_flows;
    double *lat;
    size_t n_lat;
    struct co_rb_stats st;
};

#define RB_MAX_FLOWS   1024
#define RB_DONE_EXPIRE 100 /* passes a completed move waits for its shortfall to go */
#define RB_SETTLE      3   /* passes after a completed move before its shortfall counts again */

void co_rb_config_defaults(struct rb_config *c)
{
    *c = (struct rb_config){.min_age = 5,
                            .preempt_min_age = 12,
                            .cooldown_passes = 8,
                            .donor_margin = 1,
                            .min_benefit = 0.25,
                            .drain_follow_passes = 120,
                            .move_timeout_passes = 60,
                            .tier3 = true};
}

int co_rb_new(const struct rb_config *cfg, const struct rb_type *types, size_t n_types,
              const struct rb_ops *ops, struct rb **out)
{
    struct rb *r = calloc(1, sizeof *r);
    if (!r)
        return -ENOMEM;
    r->cfg = *cfg;
    r->ops = *ops;
    r->moves = calloc(RB_MAX_MOVES, sizeof *r->moves);
    r->cools = calloc(RB_MAX_COOL, sizeof *r->cools);
    r->dones = calloc(RB_MAX_MOVES, sizeof *r->dones);
    r->flows = calloc(RB_MAX_FLOWS, sizeof *r->flows);
    r->lat = calloc(RB_MAX_SAMPLES, sizeof *r->lat);
    if (n_types) {
        r->types = calloc(n_types, sizeof *r->types);
        if (r->types) {
            for (size_t i = 0; i < n_types; i++) {
                r->types[i] = types[i];
                r->types[i].name = strdup(types[i].name);
                if (!r->types[i].name)
                    goto fail;
            }
            r->n_types = n_types;
        }
    }
    if (!r->moves || !r->cools || !r->dones || !r->flows || !r->lat || (n_types && !r->types))
        goto fail;
    *out = r;
    return 0;
fail:
    co_rb_free(r);
    return -ENOMEM;
}

static void move_clear(struct move *m)
{
    for (uint32_t i = 0; i < m->n_ids; i++)
        free(m->ids[i]);
    free(m->ids);
    memset(m, 0, sizeof *m);
}

void co_rb_reset(struct rb *r)
{
    for (uint32_t i = 0; i < r->n_moves; i++)
        move_clear(&r->moves[i]);
    r->n_moves = 0;
    r->n_cools = 0;
    r->n_dones = 0;
}

void co_rb_free(struct rb *r)
{
    if (!r)
        return;
    if (r->moves)
        co_rb_reset(r);
    for (size_t i = 0; i < r->n_types; i++)
        free((char *)r->types[i].name);
    free(r->types);
    free(r->moves);
    free(r->cools);
    free(r->dones);
    free(r->flows);
    free(r->lat);
    free(r);
}

const struct co_rb_stats *co_rb_stats(const struct rb *r)
{
    return &r->st;
}

uint32_t co_rb_moves_in_flight(const struct rb *r)
{
    return r->n_moves;
}

const struct rb_flow_count *co_rb_flows(const struct rb *r, size_t *n)
{
    *n = r->n_flows;
    return r->flows;
}

const double *co_rb_latencies_ms(const struct rb *r, size_t *n)
{
    *n = r->n_lat;
    return r->lat;
}

int co_rb_dim_of(const char *resource)
{
    if (!strcmp(resource, "cpu"))
        return 0;
    if (!strcmp(resource, "memory"))
        return 1;
    if (!strcmp(resource, "nvidia.com/gpu"))
        return 2;
    return -1;
}

int64_t co_rb_dim_value(int dim, int64_t milli)
{
    if (dim == 1) /* bytes (milli-bytes on the parser's scale) -> MiB, rounded up */
        return (milli / 1000 + (1 << 20) - 1) >> 20;
    return milli; /* cpu and gpu stay in milli-units */
}

/* ------------------------------------------------------------ helpers */

static void copy_name(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src ? src : "");
}

static const struct rb_type *type_of(const struct rb *r, const char *name)
{
    for (size_t i = 0; i < r->n_types; i++)
        if (!strcmp(r->types[i].name, name))
            return &r->types[i];
    return NULL;
}

/* Machines of type t that cover the deficit (0 = t cannot serve it). */
static int32_t need_of(const struct rb *r, const struct rb_shortfall *s, const char *type)
{
    const struct rb_type *t = type_of(r, type);
    if (!t)
        return 1; /* unknown shape: one machine at a time */
    int64_t n = 0;
    bool any = false;
    for (int d = 0; d < RB_DIMS; d++) {
        if (s->deficit[d] <= 0)
            continue;
        any = true;
        if (t->alloc[d] <= 0)
            return 0;
        int64_t k = (s->deficit[d] + t->alloc[d] - 1) / t->alloc[d];
        if (k > n)
            n = k;
    }
    if (!any)
        return 0;
    return n > RB_MAX_IDS ? RB_MAX_IDS : (int32_t)n;
}

static bool in_list(const char *v, const char *const *l, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (l[i] && !strcmp(l[i], v))
            return true;
    return false;
}

/* Whether shortfall s may use machines of (type, zone). */
static bool serves(const struct rb *r, const struct rb_shortfall *s, const char *type,
                   const char *zone)
{
    if (s->n_types ? !in_list(type, s->types, s->n_types)
                   : (!type_of(r, type) || need_of(r, s, type) == 0))
        return false;
    if (s->n_zones && !in_list(zone, s->zones, s->n_zones))
        return false;
    return need_of(r, s, type) > 0;
}

static bool cooled(struct rb *r, const char *from, const char *to, const char *type,
                   const char *zone)
{
    for (uint32_t i = 0; i < r->n_cools; i++) {
        struct cool *c = &r->cools[i];
        if (c->until_pass > r->pass && !strcmp(c->from, from) && !strcmp(c->to, to) &&
            !strcmp(c->type, type) && !strcmp(c->zone, zone))
            return true;
    }
    return false;
}

static void add_cool(struct rb *r, const char *from, const char *to, const char *type,
                     const char *zone)
{
    uint32_t i;
    for (i = 0; i < r->n_cools; i++) /* reuse an expired slot or the same flow */
        if (r->cools[i].until_pass <= r->pass ||
            (!strcmp(r->cools[i].from, from) && !strcmp(r->cools[i].to, to) &&
             !strcmp(r->cools[i].type, type) && !strcmp(r->cools[i].zone, zone)))
            break;
    if (i == r->n_cools) {
        if (r->n_cools == RB_MAX_COOL) {
            r->st.dropped++;
            return;
        }
        r->n_cools++;
    }
    struct cool *c = &r->cools[i];
    copy_name(c->from, sizeof c->from, from);
    copy_name(c->to, sizeof c->to, to);
    copy_name(c->type, sizeof c->type, type);
    copy_name(c->zone, sizeof c->zone, zone);
    c->until_pass = r->pass + r->cfg.cooldown_passes + 1;
}

static void count_flow(struct rb *r, const struct move *m)
{
    size_t i;
    for (i = 0; i < r->n_flows; i++)
        if (r->flows[i].tier == m->tier && !strcmp(r->flows[i].from, m->donor) &&
            !strcmp(r->flows[i].to, m->recip))
            break;
    if (i == r->n_flows) {
        if (r->n_flows == RB_MAX_FLOWS) {
            r->st.dropped++;
            return;
        }
        r->n_flows++;
        copy_name(r->flows[i].from, sizeof r->flows[i].from, m->donor);
        copy_name(r->flows[i].to, sizeof r->flows[i].to, m->recip);
        r->flows[i].tier = m->tier;
    }
    r->flows[i].machines += m->n_ids;
    r->flows[i].moves++;
}

static bool move_for(const struct rb *r, const char *recip, uint64_t key)
{
    for (uint32_t i = 0; i < r->n_moves; i++)
        if (r->moves[i].key == key && !strcmp(r->moves[i].recip, recip))
            return true;
    return false;
}

static struct done *done_for(struct rb *r, const char *recip, uint64_t key)
{
    for (uint32_t i = 0; i < r->n_dones; i++)
        if (r->dones[i].key == key && !strcmp(r->dones[i].recip, recip))
            return &r->dones[i];
    return NULL;
}

static void end_move(struct rb *r, uint32_t i)
{
    move_clear(&r->moves[i]);
    if (i != r->n_moves - 1) {
        r->moves[i] = r->moves[r->n_moves - 1];
        memset(&r->moves[r->n_moves - 1], 0, sizeof r->moves[0]);
    }
    r->n_moves--;
}

static void fail_move(struct rb *r, uint32_t i, const char *why)
{
    struct move *m = &r->moves[i];
    BF_INFO("rebalance: move ended",
            "tier=%d donor=%s recipient=%s type=%s zone=%s count=%d why=\"%s\"", m->tier, m->donor,
            m->recip, m->type, m->zone, m->count, why);
    r->st.failed[m->tier]++;
    end_move(r, i);
}

static bool set_ids(struct rb *r, struct move *m, const char *const *ids, size_t n)
{
    for (uint32_t i = 0; i < m->n_ids; i++)
        free(m->ids[i]);
    free(m->ids);
    m->ids = NULL;
    m->n_ids = 0;
    if (n > RB_MAX_IDS) {
        r->st.dropped++;
        n = RB_MAX_IDS;
    }
    m->ids = calloc(n ? n : 1, sizeof *m->ids);
    if (!m->ids)
        return false;
    for (size_t i = 0; i < n; i++) {
        m->ids[i] = strdup(ids[i] ? ids[i] : "");
        if (!m->ids[i])
            return false;
        m->n_ids++;
    }
    return true;
}

static int send_to(struct rb *r, struct move *m, const char *shard, enum rb_kind kind,
                   bool selector)
{
    struct rb_instr in = {.kind = kind, .from = m->donor, .to = m->recip};
    if (selector) {
        in.count = m->count;
        in.type = m->type;
        in.zone = m->zone;
    } else {
        in.ids = (const char *const *)m->ids;
        in.n_ids = m->n_ids;
    }
    if (kind == RB_DRAIN) {
        in.preemptor_priority = m->priority;
        in.max_victim_penalty_bucket = m->ipb;
    }
    int rc = r->ops.send(r->ops.arg, shard, &in, m->instr);
    if (rc == 0)
        m->phase_pass = r->pass;
    return rc;
}

/* ------------------------------------------------------------ acks */

static void complete(struct rb *r, uint32_t i, const struct rb_shard *recip_now)
{
    struct move *m = &r->moves[i];
    (void)recip_now;
    r->st.completed[m->tier]++;
    r->st.machines[m->tier] += m->n_ids;
    count_flow(r, m);
    add_cool(r, m->recip, m->donor, m->type, m->zone); /* the reverse flow waits */
    BF_INFO("rebalance: move complete", "tier=%d donor=%s recipient=%s type=%s zone=%s machines=%u",
            m->tier, m->donor, m->recip, m->type, m->zone, m->n_ids);
    struct done *d = done_for(r, m->recip, m->key);
    if (!d && r->n_dones < RB_MAX_MOVES) {
        d = &r->dones[r->n_dones++];
        copy_name(d->recip, sizeof d->recip, m->recip);
        d->key = m->key;
        d->first_seen_ns = m->first_seen_ns;
    } else if (!d) {
        r->st.dropped++;
    }
    if (d) {
        d->report_seq = UINT64_MAX; /* set at the next pass from the recipient's report_seq */
        d->pass = r->pass;
    }
    end_move(r, i);
}

bool co_rb_ack(struct rb *r, const char *shard, const char *instruction_id, int outcome,
               const char *const *ids, size_t n_ids)
{
    uint32_t i;
    for (i = 0; i < r->n_moves; i++)
        if (!strcmp(r->moves[i].instr, instruction_id))
            break;
    if (i == r->n_moves || !instruction_id[0])
        return false;
    struct move *m = &r->moves[i];
    bool from_donor = !strcmp(shard, m->donor), from_recip = !strcmp(shard, m->recip);
    switch (m->phase) {
    case PH_DONOR:
        if (!from_donor)
            return false;
        if (outcome != RB_ACCEPTED || !n_ids) {
            fail_move(r, i, outcome == RB_ACCEPTED ? "donor resolved no machine" : "donor refused");
            return true;
        }
        if (!set_ids(r, m, ids, n_ids)) {
            r->st.dropped++;
            fail_move(r, i, "out of memory");
            return true;
        }
        if (m->tier == RB_TIER3) {
            m->phase = PH_FOLLOW; /* the transfer follows once the victims are Idle */
            m->phase_pass = r->pass;
            m->instr[0] = 0;
            return true;
        }
        if (m->tier == RB_TIER2 && r->ops.quota)
            r->ops.quota(r->ops.arg, m->donor, m->recip, (int32_t)m->n_ids);
        m->phase = PH_RECIP;
        if (send_to(r, m, m->recip, m->tier == RB_TIER2 ? RB_REASSIGN : RB_TRANSFER, false))
            m->phase = PH_RECIP_RETRY;
        return true;
    case PH_FOLLOW_SENT:
        if (!from_donor)
            return false;
        if (outcome != RB_ACCEPTED) {
            m->phase = PH_FOLLOW; /* not Idle yet (still draining): again next pass */
            m->instr[0] = 0;
            return true;
        }
        m->phase = PH_RECIP;
        if (send_to(r, m, m->recip, RB_TRANSFER, false))
            m->phase = PH_RECIP_RETRY;
        return true;
    case PH_RECIP:
        if (!from_recip)
            return false;
        if (outcome == RB_ACCEPTED) {
            complete(r, i, NULL);
        } else {
            /* the donor already let go: the recipient must take them */
            BF_WARN("rebalance: recipient refused machines the donor gave up; retrying",
                    "recipient=%s donor=%s machines=%u outcome=%d", m->recip, m->donor, m->n_ids,
                    outcome);
            m->phase = PH_RECIP_RETRY;
            m->instr[0] = 0;
        }
        return true;
    default:
        return false;
    }
}

void co_rb_forget_shard(struct rb *r, const char *shard)
{
    for (uint32_t i = 0; i < r->n_moves;) {
        if (!strcmp(r->moves[i].donor, shard) || !strcmp(r->moves[i].recip, shard))
            fail_move(r, i, "shard removed");
        else
            i++;
    }
}

/* ------------------------------------------------------------ the pass */

struct cand {
    const struct rb_shard *sh;
    const struct rb_shortfall *sf;
};

static int cmp_cand(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (x->sf->priority != y->sf->priority)
        return x->sf->priority > y->sf->priority ? -1 : 1;
    if (x->sf->age != y->sf->age)
        return x->sf->age > y->sf->age ? -1 : 1;
    int c = strcmp(x->sh->id, y->sh->id);
    if (c)
        return c;
    return x->sf->key < y->sf->key ? -1 : x->sf->key > y->sf->key;
}

static const struct rb_shard *shard_named(const struct rb_shard *s, size_t n, const char *id)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(s[i].id, id))
            return &s[i];
    return NULL;
}

static bool has_key(const struct rb_shard *s, uint64_t key)
{
    for (uint32_t i = 0; s && i < s->n_sf; i++)
        if (s->sf[i].key == key)
            return true;
    return false;
}

/* The donor has an unserved shortfall that type t could serve. */
static bool donor_needs(const struct rb *r, const struct rb_shard *d, const char *type,
                        const char *zone)
{
    for (uint32_t i = 0; i < d->n_sf; i++)
        if (serves(r, &d->sf[i], type, zone))
            return true;
    return false;
}

/* Per-pass planning: how much of each donor row this pass already used. */
struct plan {
    int32_t **used; /* [shard][free row] per tier kind: 0 idle, 1 spec, 2 bound */
};

static int32_t avail(const struct co_rb_free *f, int tier)
{
    return tier == RB_TIER1 ? f->idle : tier == RB_TIER2 ? f->spec : f->bound;
}

static const char *tier_name(int tier)
{
    return tier == RB_TIER1 ? "idle" : tier == RB_TIER2 ? "speculative" : "drain";
}

static double tier_pass(struct rb *r, const struct cand *c, const struct rb_shard *shards, size_t n,
                        int32_t **used, int tier, double covered, bool dry, bool pooled);

/* Tries one tier for candidate c; returns the share of its need covered.
 * Minimum benefit is judged on what the tier's donor rows cover together
 * this pass (a dry run first): Idle spread over three zones, a few machines
 * a row, serves a shortfall no single row could cover a quarter of. */
static double try_tier(struct rb *r, const struct cand *c, const struct rb_shard *shards, size_t n,
                       int32_t **used, int tier, double covered)
{
    double reach = tier_pass(r, c, shards, n, used, tier, covered, true, false);
    bool pooled = reach >= 1.0 - 1e-9 || reach - covered >= r->cfg.min_benefit - 1e-9;
    return tier_pass(r, c, shards, n, used, tier, covered, false, pooled);
}

/* One walk over the donor rows of a tier. dry: only sums the share the rows
 * would cover (no instruction, no statistic, no log, nothing used). pooled:
 * the rows together pass the minimum benefit, so a small row may move.
 * Every donor row that serves the shortfall and is passed over says why at
 * debug level (the loop's decisions are reconstructible from the log). */
static double tier_pass(struct rb *r, const struct cand *c, const struct rb_shard *shards, size_t n,
                        int32_t **used, int tier, double covered, bool dry, bool pooled)
{
    const struct rb_shortfall *s = c->sf;
    for (size_t di = 0; di < n && covered < 1.0; di++) {
        const struct rb_shard *d = &shards[di];
        if (d == c->sh)
            continue;
        for (uint32_t fi = 0; fi < d->n_free && covered < 1.0; fi++) {
            const struct co_rb_free *f = &d->free[fi];
            if (!f->type || !f->zone || strlen(f->type) >= RB_NAME_MAX ||
                strlen(f->zone) >= RB_NAME_MAX || !serves(r, s, f->type, f->zone))
                continue;
            int32_t *u = &used[di][fi * 3 + (tier - 1)];
            int32_t have = avail(f, tier) - *u;
            const char *why = NULL;
            if (have <= 0)
                continue; /* nothing of this tier there (not a gate) */
            int32_t margin = tier == RB_TIER3 ? 0 : r->cfg.donor_margin;
            int32_t need = need_of(r, s, f->type);
            int32_t want = (int32_t)ceil((1.0 - covered) * need - 1e-9);
            int32_t k = 0;
            if (cooled(r, d->id, c->sh->id, f->type, f->zone)) {
                r->st.blocked_cooldown += !dry;
                why = "cooldown";
            } else if (tier != RB_TIER3 && donor_needs(r, d, f->type, f->zone)) {
                r->st.blocked_demand += !dry;
                why = "donor_short_itself";
            } else if (have - margin <= 0) {
                r->st.blocked_margin += !dry;
                why = "donor_margin";
            } else if (want <= 0) {
                break;
            } else {
                k = want < have - margin ? want : have - margin;
                if (k > RB_MAX_IDS)
                    k = RB_MAX_IDS;
                if (!dry && !pooled && k < want && (double)k < r->cfg.min_benefit * need) {
                    r->st.blocked_benefit++;
                    why = "min_benefit";
                }
            }
            if (why && dry)
                continue;
            if (dry) {
                covered += (double)k / need;
                continue;
            }
            if (why) {
                BF_DEBUG("rebalance: donor row passed over",
                         "tier=%s recipient=%s key=%016llx donor=%s type=%s zone=%s have=%d "
                         "margin=%d need=%d why=%s",
                         tier_name(tier), c->sh->id, (unsigned long long)s->key, d->id, f->type,
                         f->zone, have, margin, need, why);
                continue;
            }
            if (r->n_moves == RB_MAX_MOVES) {
                r->st.dropped++;
                return covered;
            }
            struct move *m = &r->moves[r->n_moves];
            memset(m, 0, sizeof *m);
            m->tier = tier;
            m->phase = PH_DONOR;
            copy_name(m->donor, sizeof m->donor, d->id);
            copy_name(m->recip, sizeof m->recip, c->sh->id);
            copy_name(m->type, sizeof m->type, f->type);
            copy_name(m->zone, sizeof m->zone, f->zone);
            m->count = k;
            m->priority = s->priority;
            m->ipb = s->ipb;
            m->key = s->key;
            m->first_seen_ns = s->first_seen_ns;
            m->started_pass = r->pass;
            enum rb_kind kind = tier == RB_TIER1   ? RB_TRANSFER
                                : tier == RB_TIER2 ? RB_REASSIGN
                                                   : RB_DRAIN;
            if (send_to(r, m, d->id, kind, true) != 0) {
                memset(m, 0, sizeof *m);
                return covered;
            }
            r->n_moves++;
            r->st.started[tier]++;
            *u += k;
            covered += (double)k / need;
            BF_INFO("rebalance: move started",
                    "tier=%d donor=%s recipient=%s type=%s zone=%s count=%d need=%d priority=%d "
                    "age=%d key=%016llx",
                    tier, d->id, c->sh->id, f->type, f->zone, k, need, s->priority, s->age,
                    (unsigned long long)s->key);
        }
    }
    return covered;
}

static void follow_ups(struct rb *r, const struct rb_shard *shards, size_t n)
{
    for (uint32_t i = 0; i < r->n_moves;) {
        struct move *m = &r->moves[i];
        uint64_t waited = r->pass - m->phase_pass;
        if (m->phase == PH_FOLLOW || m->phase == PH_FOLLOW_SENT) {
            if (r->pass - m->started_pass > r->cfg.drain_follow_passes) {
                fail_move(r, i, "drained machines did not become Idle in time");
                continue;
            }
            if (m->phase == PH_FOLLOW) {
                const struct rb_shard *rs = shard_named(shards, n, m->recip);
                if (!has_key(rs, m->key)) {
                    /* demand-pull: the requester's need is gone; the donor's
                     * reservation expires and the machines stay its own */
                    r->st.abandoned_pull++;
                    fail_move(r, i, "the requester's shortfall is gone: not pushing");
                    continue;
                }
                if (send_to(r, m, m->donor, RB_TRANSFER, false) == 0)
                    m->phase = PH_FOLLOW_SENT;
            }
        } else if (m->phase == PH_RECIP_RETRY) {
            if (send_to(r, m, m->recip, m->tier == RB_TIER2 ? RB_REASSIGN : RB_TRANSFER, false) ==
                0)
                m->phase = PH_RECIP;
        } else if (waited > r->cfg.move_timeout_passes && m->phase == PH_DONOR) {
            fail_move(r, i, "no answer from the donor");
            continue;
        } else if (waited > r->cfg.move_timeout_passes && m->phase == PH_RECIP) {
            m->phase = PH_RECIP_RETRY; /* redelivery of the queued one continues too */
        }
        i++;
    }
}

static void track_dones(struct rb *r, const struct rb_shard *shards, size_t n, int64_t now_ns)
{
    for (uint32_t i = 0; i < r->n_dones;) {
        struct done *d = &r->dones[i];
        const struct rb_shard *rs = shard_named(shards, n, d->recip);
        bool drop = !rs || r->pass - d->pass > RB_DONE_EXPIRE;
        if (rs && d->report_seq == UINT64_MAX)
            d->report_seq = rs->report_seq; /* the report the move completed under */
        else if (rs && rs->report_seq > d->report_seq && !has_key(rs, d->key)) {
            r->st.satisfied++;
            if (r->n_lat < RB_MAX_SAMPLES && d->first_seen_ns > 0)
                r->lat[r->n_lat++] = (double)(now_ns - d->first_seen_ns) / 1e6;
            drop = true;
        }
        if (drop) {
            r->dones[i] = r->dones[--r->n_dones];
            continue;
        }
        i++;
    }
}

void co_rb_pass(struct rb *r, const struct rb_shard *shards, size_t n, int64_t now_ns)
{
    r->pass++;
    r->st.passes++;
    follow_ups(r, shards, n);
    track_dones(r, shards, n, now_ns);
    /* 1. eligibility */
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += shards[i].n_sf;
    struct cand *cs = calloc(total ? total : 1, sizeof *cs);
    int32_t **used = calloc(n ? n : 1, sizeof *used);
    if (!cs || !used)
        goto out;
    for (size_t i = 0; i < n; i++) {
        used[i] = calloc((size_t)shards[i].n_free * 3 + 1, sizeof **used);
        if (!used[i])
            goto out;
    }
    size_t nc = 0;
    for (size_t i = 0; i < n; i++) {
        for (uint32_t j = 0; j < shards[i].n_sf; j++) {
            const struct rb_shortfall *s = &shards[i].sf[j];
            const char *why = NULL;
            struct done *d = done_for(r, shards[i].id, s->key);
            if (s->age <= r->cfg.min_age) {
                r->st.young++;
                why = "young";
            } else if (s->topo) {
                r->st.topo++;
                why = "topology_constrained";
            } else if (move_for(r, shards[i].id, s->key)) {
                r->st.in_flight++;
                why = "move_in_flight";
            } else if (d &&
                       (d->report_seq == UINT64_MAX || shards[i].report_seq <= d->report_seq + 1 ||
                        r->pass - d->pass < RB_SETTLE)) {
                r->st.settling++; /* its last move has not shown in the reports yet */
                why = "settling";
            }
            BF_DEBUG("rebalance: shortfall",
                     "pass=%llu shard=%s key=%016llx priority=%d age=%d "
                     "ipb=%d cpu_m=%lld mem_mib=%lld gpu_m=%lld types=%u verdict=%s",
                     (unsigned long long)r->pass, shards[i].id, (unsigned long long)s->key,
                     s->priority, s->age, s->ipb, (long long)s->deficit[0],
                     (long long)s->deficit[1], (long long)s->deficit[2], s->n_types,
                     why ? why : "eligible");
            if (!why)
                cs[nc++] = (struct cand){&shards[i], s};
        }
    }
    r->st.eligible += nc;
    /* 2. order */
    qsort(cs, nc, sizeof *cs, cmp_cand);
    /* 3. tiers, cheapest first, stop at the first that covers */
    for (size_t i = 0; i < nc; i++) {
        double covered = try_tier(r, &cs[i], shards, n, used, RB_TIER1, 0.0);
        if (covered < 1.0)
            covered = try_tier(r, &cs[i], shards, n, used, RB_TIER2, covered);
        if (covered <= 0.0 && r->cfg.tier3 && cs[i].sf->ipb > 0) {
            if (cs[i].sf->age > r->cfg.preempt_min_age)
                covered = try_tier(r, &cs[i], shards, n, used, RB_TIER3, 0.0);
            else
                r->st.tier3_young++;
        }
        if (covered <= 0.0) {
            r->st.uncovered++;
            BF_DEBUG("rebalance: no move for an eligible shortfall",
                     "pass=%llu shard=%s key=%016llx age=%d", (unsigned long long)r->pass,
                     cs[i].sh->id, (unsigned long long)cs[i].sf->key, cs[i].sf->age);
        }
    }
out:
    for (size_t i = 0; used && i < n; i++)
        free(used[i]);
    free(used);
    free(cs);
}
