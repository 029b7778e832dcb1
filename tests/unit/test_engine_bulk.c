/*
 * test_engine_bulk.c — the mirror's bulk load (engine.h "bulk load",
 * src/cycle/engine/bulk.c): a randomized inventory loaded through
 * bf_engine_bulk_upsert gives the engine state the per-record
 * bf_engine_upsert calls give, compared by the mirror's statistics and by
 * the first cycles' decisions and verdicts.
 *
 * The inventory is built the way the cycle's feed hands records in: strings
 * from shared pools (one address per distinct string), so records of one
 * (profile, assignment) shape share their leaf in the bulk load; a few
 * records use private copies of pool strings (same bytes, other addresses).
 * Shapes differ in one field at a time (state, price, priority, cluster,
 * fingerprint, group, labels, allocatable), so a bulk load that took a leaf
 * for a shape that is not equal decides differently. Part of the load
 * re-upserts slots with other content (leaves emptied and freed during the
 * load, their indices reused). Each seed runs with the records in id order
 * and in a random id order (the load then appends out of order and sorts
 * the lists at its end: every list is checked to be in order).
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bigfleet/engine.h"
#include "check_run.h"
#include "cycle/engine/engine_internal.h"
#include "engine_fixtures.h"

#define N_SLOTS 6000
#define N_CL    4

static const char *const g_types[] = {"m5.large", "c5.xlarge", EF_A3, "r5.2xlarge"};
static const char *const g_zones[] = {"us-a", "us-b", "us-c"};
static const char *const g_clusters[N_CL] = {"c0", "c1", "c2", "c3"};
static const char *const g_groups[] = {"g0", "g1", "g2"};
static char g_fps[3][32];

/* label arrays: one per profile (the feed's label cache gives one array per
 * machine profile) */
static struct bf_engine_label g_labels[6][2];

struct rng {
    uint64_t s;
};
static uint32_t rnd(struct rng *r, uint32_t n)
{
    r->s = r->s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(r->s >> 33) % n;
}

struct rec {
    struct bf_engine_machine m;
    char id[48];
    char priv_cluster[8]; /* a private copy of the cluster name */
};

static void init_pools(void)
{
    static const char *const lk[] = {"tier", "pool"};
    static const char *const lv[6][2] = {{"gold", "a"},   {"gold", "b"},   {"silver", "a"},
                                         {"silver", "b"}, {"bronze", "a"}, {"bronze", "b"}};
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 2; j++) {
            g_labels[i][j].key = lk[j];
            g_labels[i][j].value = lv[i][j];
        }
    for (int i = 0; i < 3; i++) {
        struct ef_prof p;
        ef_prof_init(&p, 100 * (i + 1), (uint8_t)i, (uint8_t)i);
        snprintf(g_fps[i], sizeof g_fps[i], "%s", ef_fp(&p));
    }
}

/* the id number of each slot: the slot itself (records in id order, as
 * the bench's inventory) or a random permutation (the appliance's: the
 * bulk load appends out of order and sorts at the end) */
static uint32_t g_idno[N_SLOTS];
static const char *g_idpfx = "m-";

static void rand_rec(struct rng *r, struct rec *x, uint32_t slot, uint32_t gen)
{
    struct bf_engine_machine *m = &x->m;
    memset(x, 0, sizeof *x);
    /* a long shared prefix (as the simulated provider's "<type>-<zone>-<n>"):
     * the load's sort compares past bfe_id_cmp's 16 column bytes */
    /* one id in 13 breaks the prefix (the sort's guess of it from a few
     * ids then fails and it looks at every id) */
    snprintf(x->id, sizeof x->id, "%s%05u-%u",
             g_idno[slot] % 13 || g_idpfx[1] == '-' ? g_idpfx : "machine-of-the-flee-",
             g_idno[slot], gen);
    m->id = x->id;
    static const uint8_t states[] = {BF_STATE_IDLE,       BF_STATE_IDLE,       BF_STATE_SPECULATIVE,
                                     BF_STATE_CONFIGURED, BF_STATE_CONFIGURED, BF_STATE_CONFIGURING,
                                     BF_STATE_CREATING,   BF_STATE_DRAINING,   BF_STATE_FAILED};
    m->state = states[rnd(r, sizeof states)];
    m->capacity_type = rnd(r, 2) ? BF_CT_ON_DEMAND : BF_CT_SPOT;
    uint32_t prof = rnd(r, 6);
    m->instance_type = g_types[prof % 4];
    m->zone = g_zones[prof % 3];
    m->n_labels = rnd(r, 5) ? 2 : 0;
    m->labels = m->n_labels ? g_labels[prof] : NULL;
    /* one machine in 8 has one of 200 odd sizes: many classes, so the
     * direct-mapped caches of the load see colliding shapes */
    int64_t odd = rnd(r, 8) == 0 ? 1 + rnd(r, 200) : 0;
    m->allocatable = ef_vec(4000 * (1 + prof % 2) + odd, 16 * EF_GI, prof % 4 == 2 ? 8000 : 0);
    m->price_per_hour = 0.5 * (1 + rnd(r, 3));
    m->interruption_probability = m->capacity_type == BF_CT_SPOT ? 0.1 : 0.0;
    bool bound = m->state == BF_STATE_CONFIGURED || m->state == BF_STATE_CONFIGURING ||
                 m->state == BF_STATE_DRAINING;
    bool stamped = bound || m->state == BF_STATE_CREATING;
    m->cluster = bound ? g_clusters[rnd(r, N_CL)] : "";
    if (bound && rnd(r, 20) == 0) { /* same bytes, another address */
        snprintf(x->priv_cluster, sizeof x->priv_cluster, "%s", m->cluster);
        m->cluster = x->priv_cluster;
    }
    if (stamped) {
        uint32_t f = rnd(r, 3);
        m->assigned_priority = 100 * (int32_t)(f + 1);
        m->assigned_ipb = (uint8_t)f;
        m->assigned_rpb = (uint8_t)f;
        m->assigned_fingerprint = g_fps[f];
        if (rnd(r, 3) == 0) {
            m->assigned_group = g_groups[rnd(r, 3)];
            m->assigned_group_len = 2;
        }
    } else {
        m->assigned_fingerprint = "";
    }
    m->idle_since_s = m->state == BF_STATE_IDLE ? 1000 + rnd(r, 50) : 0;
    m->held = rnd(r, 200) == 0;
}

static void set_demand(struct bf_engine *e)
{
    for (int c = 0; c < N_CL; c++) {
        struct ef_prof p[3];
        struct bf_engine_need n[3];
        for (int i = 0; i < 3; i++) {
            ef_prof_init(&p[i], 100 * (i + 1) + (c == 0 ? 500 : 0), (uint8_t)i, (uint8_t)i);
            if (i == 1)
                ef_prof_in(&p[i], "tier", c % 2 ? "gold" : "silver");
            n[i] = ef_need(&p[i], ef_vec(4000 * 40 * (i + 1), 16 * EF_GI * 40, 0),
                           ef_vec(2000, EF_GI, 0), 1000 + c * 10 + i, i == 2 ? "g1" : NULL);
        }
        ck_assert_int_eq(bf_engine_set_needs(e, g_clusters[c], 1, n, 3), 0);
        ck_assert_int_eq(bf_engine_set_cluster_flags(e, g_clusters[c], true, true), 0);
    }
}

static void same_results(const struct bf_engine_result *a, const struct bf_engine_result *b,
                         int cyc)
{
    ck_assert_msg(a->n_actions == b->n_actions, "cycle %d: %zu vs %zu actions", cyc, a->n_actions,
                  b->n_actions);
    for (size_t i = 0; i < a->n_actions; i++) {
        const struct bf_engine_action *x = &a->actions[i], *y = &b->actions[i];
        ck_assert_msg(
            x->kind == y->kind && x->slot == y->slot && x->need == y->need &&
                x->reason == y->reason && x->grace_s == y->grace_s && x->priority == y->priority &&
                x->preemptor_priority == y->preemptor_priority &&
                strcmp(x->machine_id, y->machine_id) == 0 && strcmp(x->cluster, y->cluster) == 0 &&
                strcmp(x->fingerprint, y->fingerprint) == 0 && x->group_len == y->group_len,
            "cycle %d action %zu differs: %s %s vs %s %s", cyc, i, bf_action_kind_name(x->kind),
            x->machine_id, bf_action_kind_name(y->kind), y->machine_id);
    }
    ck_assert_uint_eq(a->n_verdicts, b->n_verdicts);
    for (size_t i = 0; i < a->n_verdicts; i++) {
        const struct bf_engine_verdict *x = &a->verdicts[i], *y = &b->verdicts[i];
        ck_assert_msg(
            x->index == y->index && x->satisfied == y->satisfied &&
                bf_vec_eq(&x->residual_deficit, &y->residual_deficit) &&
                x->claimed_count == y->claimed_count && x->bootstrap_count == y->bootstrap_count &&
                x->provision_count == y->provision_count && x->unmet_reason == y->unmet_reason &&
                x->matching_supply.idle == y->matching_supply.idle &&
                x->matching_supply.configured == y->matching_supply.configured,
            "cycle %d verdict %zu differs", cyc, i);
    }
    for (int s = 0; s < BF_STATE_COUNT; s++)
        ck_assert_uint_eq(a->claimed[s], b->claimed[s]);
}

static void same_mirror(const struct bf_engine *a, const struct bf_engine *b)
{
    struct bf_engine_mirror_stats x, y;
    bf_engine_mirror_stats(a, &x);
    bf_engine_mirror_stats(b, &y);
    ck_assert_uint_eq(x.machines, y.machines);
    ck_assert_uint_eq(x.ineligible, y.ineligible);
    for (int s = 0; s < BF_STATE_COUNT; s++)
        ck_assert_uint_eq(x.by_state[s], y.by_state[s]);
    ck_assert_uint_eq(x.classes, y.classes);
    ck_assert_uint_eq(x.leaves, y.leaves);
    ck_assert_uint_eq(x.strings, y.strings);
}

/* Every live leaf's slot list, and both release lists, in the engine's
 * order (ids; idle since, then ids). */
static void lists_in_order(const struct bf_engine *e)
{
    for (uint32_t li = 0; li < e->n_leaves; li++) {
        const struct leaf *l = &e->leaves[li];
        if (!l->live)
            continue;
        uint32_t ci = 0, off = 0, prev = NONE32;
        for (uint32_t i = 0; i < l->sl.n; i++, bfe_sl_step(&l->sl, &ci, &off)) {
            uint32_t s = bfe_sl_at(&l->sl, ci, off);
            if (prev != NONE32)
                ck_assert_msg(bfe_id_cmp(e, prev, s) < 0, "leaf %u: %s before %s", li,
                              bfe_machine_id(e, prev), bfe_machine_id(e, s));
            prev = s;
        }
    }
    for (int ri = 0; ri < 2; ri++) {
        const struct slotlist *l = &e->release[ri];
        uint32_t ci = 0, off = 0, prev = NONE32;
        for (uint32_t i = 0; i < l->n; i++, bfe_sl_step(l, &ci, &off)) {
            uint32_t s = bfe_sl_at(l, ci, off);
            if (prev != NONE32)
                ck_assert_msg(
                    e->idle_since[prev] < e->idle_since[s] ||
                        (e->idle_since[prev] == e->idle_since[s] && bfe_id_cmp(e, prev, s) < 0),
                    "release list %d out of order", ri);
            prev = s;
        }
    }
}

static void run_seed(uint64_t seed, bool shuffled)
{
    init_pools();
    struct rng pr = {seed ^ 0x5eed};
    for (uint32_t i = 0; i < N_SLOTS; i++)
        g_idno[i] = i;
    g_idpfx = shuffled ? "machine-of-the-fleet-" : "m-";
    for (uint32_t i = N_SLOTS - 1; shuffled && i > 0; i--) {
        uint32_t j = rnd(&pr, i + 1), t = g_idno[i];
        g_idno[i] = g_idno[j];
        g_idno[j] = t;
    }
    struct bf_engine_config cfg;
    bf_engine_config_defaults(&cfg);
    cfg.capacity = N_SLOTS;
    struct bf_engine *per = NULL, *bulk = NULL;
    ck_assert_int_eq(bf_engine_new(&cfg, &per), 0);
    ck_assert_int_eq(bf_engine_new(&cfg, &bulk), 0);
    /* the records, then ~10% of the slots again with other content (the
     * first content's leaves may empty and be freed half-way) */
    uint32_t n_ops = N_SLOTS + N_SLOTS / 10;
    struct rec *recs = calloc(n_ops, sizeof *recs);
    uint32_t *slots = calloc(n_ops, sizeof *slots);
    ck_assert(recs && slots);
    struct rng r = {seed};
    for (uint32_t i = 0; i < n_ops; i++) {
        slots[i] = i < N_SLOTS ? i : rnd(&r, N_SLOTS);
        rand_rec(&r, &recs[i], slots[i], i < N_SLOTS ? 0 : 1);
    }
    /* every 37th operation also removes an earlier slot (the feed removes
     * records that are no longer valid in the same scan) */
    for (uint32_t i = 0; i < n_ops; i++) {
        ck_assert_int_eq(bf_engine_upsert(per, slots[i], &recs[i].m), 0);
        if (i % 37 == 36)
            ck_assert_int_eq(bf_engine_remove(per, slots[i - 20]), 0);
    }
    struct bf_engine_bulk *b = NULL;
    ck_assert_int_eq(bf_engine_bulk_begin(bulk, N_SLOTS, &b), 0);
    for (uint32_t i = 0; i < n_ops; i++) {
        ck_assert_int_eq(bf_engine_bulk_upsert(b, slots[i], &recs[i].m), 0);
        if (i % 37 == 36)
            ck_assert_int_eq(bf_engine_remove(bulk, slots[i - 20]), 0);
    }
    struct bf_engine_bulk_stats st;
    bf_engine_bulk_end(b, &st);
    ck_assert_uint_eq(st.upserts, n_ops);
    ck_assert_msg(st.shared > n_ops / 4, "the load shared %llu leaves only",
                  (unsigned long long)st.shared);
    if (shuffled)
        ck_assert_msg(st.sorted > 100, "only %llu lists were sorted",
                      (unsigned long long)st.sorted);
    lists_in_order(bulk);
    same_mirror(per, bulk);
    set_demand(per);
    set_demand(bulk);
    /* the first cycles (the first decides from the loaded mirror; later
     * ones after per-record changes on top of it) */
    for (int cyc = 0; cyc < 3; cyc++) {
        struct bf_engine_result ra, rb;
        int64_t now = (int64_t)(2000 + cyc) * 1000000000LL;
        ck_assert_int_eq(bf_engine_cycle(per, now, &ra), 0);
        ck_assert_int_eq(bf_engine_cycle(bulk, now, &rb), 0);
        if (cyc == 0)
            ck_assert_msg(ra.n_actions > 10, "the demand decides little: %zu", ra.n_actions);
        same_results(&ra, &rb, cyc);
        for (uint32_t k = 0; k < 50; k++) {
            uint32_t s = rnd(&r, N_SLOTS);
            struct rec x;
            rand_rec(&r, &x, s, 2 + (uint32_t)cyc);
            ck_assert_int_eq(bf_engine_upsert(per, s, &x.m), 0);
            ck_assert_int_eq(bf_engine_upsert(bulk, s, &x.m), 0);
        }
    }
    same_mirror(per, bulk);
    bf_engine_free(per);
    bf_engine_free(bulk);
    free(recs);
    free(slots);
}

START_TEST(a_bulk_load_decides_as_the_per_record_upserts)
{
    for (uint64_t seed = 1; seed <= 6; seed++) {
        run_seed(seed * 7919, false);
        run_seed(seed * 7919, true);
    }
}
END_TEST

START_TEST(a_bulk_handle_rejects_bad_arguments)
{
    struct bf_engine_config cfg;
    bf_engine_config_defaults(&cfg);
    cfg.capacity = 8;
    struct bf_engine *e = NULL;
    ck_assert_int_eq(bf_engine_new(&cfg, &e), 0);
    struct bf_engine_bulk *b = NULL;
    ck_assert_int_eq(bf_engine_bulk_begin(NULL, 0, &b), -EINVAL);
    ck_assert_int_eq(bf_engine_bulk_begin(e, 0, &b), 0);
    struct bf_engine_machine m = {
        .id = "x", .state = BF_STATE_IDLE, .instance_type = "m5.large", .zone = "us-a"};
    ck_assert_int_eq(bf_engine_bulk_upsert(b, 8, &m), -EINVAL);
    ck_assert_int_eq(bf_engine_bulk_upsert(b, 0, NULL), -EINVAL);
    ck_assert_int_eq(bf_engine_bulk_upsert(NULL, 0, &m), -EINVAL);
    ck_assert_int_eq(bf_engine_bulk_upsert(b, 0, &m), 0);
    bf_engine_bulk_end(b, NULL);
    bf_engine_bulk_end(NULL, NULL);
    struct bf_engine_mirror_stats st;
    bf_engine_mirror_stats(e, &st);
    ck_assert_uint_eq(st.machines, 1);
    bf_engine_free(e);
}
END_TEST

/* The mirror's big arrays (engine/mirror.c "big arrays": huge-page mappings
 * at 2 MiB and more): a mirror of 120K slots has its per-slot columns in one
 * mapping, and its id buffer (~3.4 MB of ids) and leaves (16,000) grow past
 * their first 2 MiB mapping (a copy into a new one); renaming every machine
 * three times then compacts the id buffer into a new mapping (the fourth
 * load finds more than half of it dead). Every slot keeps its id,
 * every leaf its sorted slot list, and the counts add up. */
#define BIG_SLOTS  120000u
#define BIG_SHAPES 16000u

static void big_check(const struct bf_engine *e, uint32_t gen)
{
    char want[64];
    for (uint32_t s = 0; s < BIG_SLOTS; s++) {
        snprintf(want, sizeof want, "machine-%u-%08u-of-the-big-mirror", gen, s);
        ck_assert_msg(strcmp(bfe_machine_id(e, s), want) == 0, "slot %u: %s", s,
                      bfe_machine_id(e, s));
    }
    struct bf_engine_mirror_stats st;
    bf_engine_mirror_stats(e, &st);
    ck_assert_uint_eq(st.machines, BIG_SLOTS);
    ck_assert_uint_eq(st.by_state[BF_STATE_IDLE], BIG_SLOTS);
    ck_assert_uint_eq(st.leaves, BIG_SHAPES);
    uint64_t total = 0;
    for (uint32_t li = 0; li < e->n_leaves; li++) {
        const struct leaf *l = &e->leaves[li];
        if (!l->live)
            continue;
        ck_assert_uint_eq(l->k.state, BF_STATE_IDLE);
        uint32_t prev = NONE32, ci = 0, off = 0;
        for (uint32_t i = 0; i < l->sl.n; i++, bfe_sl_step(&l->sl, &ci, &off)) {
            uint32_t s = bfe_sl_at(&l->sl, ci, off);
            ck_assert_uint_eq(e->leaf_of[s], li);
            ck_assert_uint_eq(s % BIG_SHAPES, (prev == NONE32 ? s : prev) % BIG_SHAPES);
            if (prev != NONE32)
                ck_assert_int_lt(strcmp(bfe_machine_id(e, prev), bfe_machine_id(e, s)), 0);
            prev = s;
        }
        total += l->sl.n;
    }
    ck_assert_uint_eq(total, BIG_SLOTS);
}

START_TEST(the_mirror_keeps_its_big_arrays_across_growth)
{
    struct bf_engine_config cfg;
    bf_engine_config_defaults(&cfg);
    cfg.capacity = BIG_SLOTS;
    struct bf_engine *e = NULL;
    ck_assert_int_eq(bf_engine_new(&cfg, &e), 0);
    static char ids[4][BIG_SLOTS][40];
    for (uint32_t gen = 0; gen < 4; gen++) {
        struct bf_engine_bulk *b = NULL;
        ck_assert_int_eq(bf_engine_bulk_begin(e, BIG_SLOTS, &b), 0);
        for (uint32_t s = 0; s < BIG_SLOTS; s++) {
            snprintf(ids[gen][s], sizeof ids[gen][s], "machine-%u-%08u-of-the-big-mirror", gen, s);
            struct bf_engine_machine m = {
                .id = ids[gen][s],
                .state = BF_STATE_IDLE,
                .capacity_type = BF_CT_ON_DEMAND,
                .instance_type = "m5.large",
                .zone = "us-a",
                .allocatable = ef_vec(2000, 8 * EF_GI, 0),
                .price_per_hour = 0.5 + 0.001 * (double)(s % BIG_SHAPES),
                .idle_since_s = 1000 + s % 7,
            };
            /* half through the load, half one by one (both write the arrays) */
            ck_assert_int_eq(s % 2 ? bf_engine_bulk_upsert(b, s, &m) : bf_engine_upsert(e, s, &m),
                             0);
        }
        bf_engine_bulk_end(b, NULL);
        big_check(e, gen);
    }
    ck_assert_msg(e->idbuf_cap > ((size_t)2 << 20), "the id buffer stayed at %zu bytes",
                  e->idbuf_cap);
    ck_assert_msg((size_t)e->cap_leaves * sizeof *e->leaves > ((size_t)2 << 20),
                  "the leaves stayed at %u", e->cap_leaves);
    bf_engine_free(e);
}
END_TEST

/* bfe_grow (base.c): an array grown element by element keeps every value
 * across the growth through the heap sizes and past 2 MiB, where it is
 * 2 MiB-aligned (huge-page candidates, i18-restart4). */
START_TEST(a_grown_array_keeps_its_values_and_is_aligned_past_2_mib)
{
    uint64_t *a = NULL;
    uint32_t cap = 0;
    const uint32_t n = 1u << 20; /* 8 MiB */
    for (uint32_t i = 0; i < n; i++) {
        ck_assert_int_eq(GROW(a, cap, i + 1), 0);
        ck_assert_uint_ge(cap, i + 1);
        a[i] = (uint64_t)i * 2654435761u;
        if ((size_t)cap * sizeof *a >= ((size_t)2 << 20))
            ck_assert_msg(((uintptr_t)a & (((uintptr_t)2 << 20) - 1)) == 0,
                          "a %zu-byte array at %p", (size_t)cap * sizeof *a, (void *)a);
    }
    for (uint32_t i = 0; i < n; i++)
        ck_assert_msg(a[i] == (uint64_t)i * 2654435761u, "element %u lost", i);
    free(a);
}
END_TEST

/* The VmFlags of the mapping holding p (/proc/self/smaps): 1 when "hg"
 * (MADV_HUGEPAGE) is among them, 0 when "nh" (MADV_NOHUGEPAGE) is, -1 when
 * neither or when p is in no mapping. */
static int huge_advice_of(const void *p)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    ck_assert_ptr_nonnull(f);
    char line[512];
    bool inside = false;
    int r = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
            continue;
        }
        if (inside && strncmp(line, "VmFlags:", 8) == 0) {
            r = strstr(line, " hg") ? 1 : strstr(line, " nh") ? 0 : -1;
            break;
        }
    }
    fclose(f);
    return r;
}

/* bf_engine_set_huge_pages (engine.h): by default the mirror's columns and a
 * working array grown past 2 MiB are advised MADV_NOHUGEPAGE (huge pages
 * stall every 512 ms on the appliance's VM, docs/performance.md stop 30);
 * after bf_engine_set_huge_pages(true), arrays allocated from then on are
 * advised MADV_HUGEPAGE. Needs a kernel with transparent huge pages. */
START_TEST(the_big_arrays_take_huge_pages_only_when_asked)
{
    ck_assert_msg(access("/sys/kernel/mm/transparent_hugepage/enabled", R_OK) == 0,
                  "this kernel has no transparent huge pages: the advice cannot be seen");
    struct bf_engine_config cfg;
    bf_engine_config_defaults(&cfg);
    cfg.capacity = BIG_SLOTS;
    for (int on = 0; on <= 1; on++) {
        if (on)
            bf_engine_set_huge_pages(true);
        ck_assert(bf_engine_huge_pages() == (bool)on);
        uint64_t *a = NULL;
        uint32_t cap = 0;
        ck_assert_int_eq(bfe_grow((void **)&a, &cap, 1u << 20, sizeof *a), 0); /* 8 MiB */
        a[0] = 1;
        struct bf_engine *e = NULL;
        ck_assert_int_eq(bf_engine_new(&cfg, &e), 0);
        ck_assert_msg(huge_advice_of(a) == on, "a grown array: advice %d with huge pages %s",
                      huge_advice_of(a), on ? "on" : "off");
        ck_assert_msg(huge_advice_of(e->idpfx) == on,
                      "the mirror's columns: advice %d with "
                      "huge pages %s",
                      huge_advice_of(e->idpfx), on ? "on" : "off");
        bf_engine_free(e);
        free(a);
    }
    bf_engine_set_huge_pages(false);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("engine_bulk");
    TCase *t = tcase_create("bulk");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, a_bulk_load_decides_as_the_per_record_upserts);
    tcase_add_test(t, a_bulk_handle_rejects_bad_arguments);
    tcase_add_test(t, the_mirror_keeps_its_big_arrays_across_growth);
    tcase_add_test(t, a_grown_array_keeps_its_values_and_is_aligned_past_2_mib);
    tcase_add_test(t, the_big_arrays_take_huge_pages_only_when_asked);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_run(suite());
}
