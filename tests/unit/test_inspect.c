/*
 * test_inspect.c — bigfleet-inspect against segments this test creates and
 * fills (bf_shm_create, bf_inv_insert, bf_cluster_write, need rows in the
 * arena, a published cycle result with verdict and shortfall rows, stats,
 * process slots, ring entries), running the REAL binary
 * (build/bin/bigfleet-inspect, or $BF_INSPECT):
 *
 *   - the summary (text and --json) carries exactly what was put in: counts
 *     by state, by state x type x zone, clusters, Needs, in-flight;
 *   - --json always parses (jansson, strict), and strings with NUL
 *     and control bytes round-trip;
 *   - one machine's record is complete (profile labels/allocatable,
 *     assignment, flags, seq, pending);
 *   - needs joins rows with verdicts, in priority/arrival/cluster order,
 *     with --cluster and --limit;
 *   - a missing shard id exits 1 with the message; a layout-version mismatch
 *     exits 1 naming both versions; usage errors exit 2;
 *   - inspect never writes (segment checksums before/after every command;
 *     its mappings are r--s in /proc/PID/maps);
 *   - a record held by a writer is reported busy (bounded, no hang);
 *   - --watch exits 1 with a message when the segments are removed, the
 *     appliance shuts down, or a segment is truncated under it (SIGBUS).
 *
 * The same binary doubles as the helper of tests/integration/inspect_*.sh
 * and of the measurements in docs/inspect.md (nothing here is asserted on
 * time):
 *   test_inspect fixture populate ID [MACHINES]  fill a running appliance's
 *                                                segments; prints the
 *                                                expected figures as JSON
 *   test_inspect fixture create ID [MACHINES]    create + fill, then wait
 *                                                for SIGTERM (unlinks)
 *   test_inspect cycle-proxy ID [MACHINES] [CYCLES] [PERIOD_MS] [TRACE]
 *                                                synthetic cycle + writer;
 *                                                prints cycle latency (and
 *                                                one line per cycle to TRACE)
 *   test_inspect cycle-real ID [MACHINES] [CYCLES] [PERIOD_MS] [TRACE]
 *                                                the real cycle controller
 *                                                over real segments + writer
 *   test_inspect scan-bench ID                   times insp_scan in-process
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "bigfleet/blobs.h"
#include "bigfleet/cycle.h"
#include "bigfleet/log.h"
#include "bigfleet/shm.h"
#include "bigfleet/util.h"

/* the tool's pure helpers and read side, tested directly */
#include "../../tools/inspect/out.c"
#include "../../tools/inspect/reader.c"

/* ================================================================ fixture */

#define FX_TYPES 3
#define FX_ZONES 2
static const char *const fx_type_names[FX_TYPES] = {"m5.large", "c5.xlarge", "gpu.h100"};
static const int fx_type_ct[FX_TYPES] = {BF_CT_ON_DEMAND, BF_CT_SPOT, BF_CT_RESERVED};
static const char *const fx_zone_names[FX_ZONES] = {"us-east-1a", "us-east-1b"};
static const char *const fx_clusters[3] = {"alpha", "beta", "gamma"};
static const uint8_t fx_states[12] = {
    BF_STATE_IDLE,     BF_STATE_CONFIGURED, BF_STATE_SPECULATIVE, BF_STATE_CONFIGURED,
    BF_STATE_IDLE,     BF_STATE_FAILED,     BF_STATE_CREATING,    BF_STATE_CONFIGURING,
    BF_STATE_DRAINING, BF_STATE_DELETING,   BF_STATE_CONFIGURED,  BF_STATE_IDLE};
/* a group id with NUL, a control byte and a quote */
static const char FX_GROUP[] = "grp\0x\x01\"y";
#define FX_GROUP_LEN (sizeof FX_GROUP - 1)
#define FX_CYCLE     42

/* What the fixture put in, tallied independently of the tool. */
struct fx_expect {
    uint32_t total, in_flight, bound, needs_refresh;
    uint32_t by_state[BF_STATE_COUNT];
    uint32_t by_stz[BF_STATE_COUNT][FX_TYPES][FX_ZONES];
    int type_idx[FX_TYPES], zone_idx[FX_ZONES];
    uint32_t clusters, connected, first_rollup, quarantined, need_rows;
    uint32_t verdicts, unsatisfied, shortfalls;
    uint32_t hist_count;
    char group_machine[32]; /* a Configured machine carrying FX_GROUP */
    uint32_t group_slot;
};

static void fx_die(const char *what, int rc)
{
    fprintf(stderr, "fixture: %s failed: %d (%s)\n", what, rc, strerror(rc < 0 ? -rc : rc));
    exit(99);
}

static uint32_t fx_str(struct bf_shm *s, const void *b, size_t n)
{
    uint32_t r;
    int rc = bf_str_intern(s, b, (uint32_t)n, &r);
    if (rc)
        fx_die("intern", rc);
    return r;
}

struct fx_profiles {
    uint32_t need[3], fp[3]; /* need profiles P1 (prio 100), P2 (Same, 50), P3 (200) */
    uint32_t mprof[FX_TYPES][FX_ZONES];
    int cpu, mem;
};

static void fx_profiles(struct bf_shm *s, struct fx_profiles *p, struct fx_expect *e)
{
    for (int t = 0; t < FX_TYPES; t++) {
        e->type_idx[t] = bf_type_intern(s, fx_type_names[t]);
        if (e->type_idx[t] < 0)
            fx_die("type intern", e->type_idx[t]);
    }
    for (int z = 0; z < FX_ZONES; z++) {
        e->zone_idx[z] = bf_zone_intern(s, fx_zone_names[z]);
        if (e->zone_idx[z] < 0)
            fx_die("zone intern", e->zone_idx[z]);
    }
    static const char *const cpus[FX_TYPES] = {"2", "4", "96"};
    static const char *const mems[FX_TYPES] = {"8Gi", "8Gi", "1Ti"};
    for (int t = 0; t < FX_TYPES; t++)
        for (int z = 0; z < FX_ZONES; z++) {
            struct bf_kv res[] = {{"cpu", cpus[t]}, {"memory", mems[t]}};
            struct bf_kv alloc[] = {{"cpu", t == 2 ? "95500m" : "1900m"}, {"memory", "7Gi"}};
            struct bf_kv lab[] = {{"bigfleet.test/rack", z ? "rack-b" : "rack-a"},
                                  {"kubernetes.io/arch", "amd64"}};
            struct bf_mprofile_input in = {
                fx_type_names[t], fx_zone_names[z], fx_type_ct[t], 2, res, 2, lab, 2, alloc};
            char err[128];
            int rc = bf_mprofile_intern(s, &in, &p->mprof[t][z], err, sizeof err);
            if (rc)
                fx_die(err, rc);
        }
    p->cpu = bf_dim_lookup(s, "cpu");
    p->mem = bf_dim_lookup(s, "memory");
    const char *v1[] = {"m5.large"};
    const char *v2[] = {"us-east-1a", "us-east-1b"};
    struct bf_requirement r1[] = {{BF_LABEL_INSTANCE_TYPE, BF_OP_IN, 1, v1}};
    struct bf_requirement r2[] = {{BF_LABEL_ZONE, BF_OP_SAME, 0, NULL},
                                  {BF_LABEL_ZONE, BF_OP_IN, 2, v2}};
    struct bf_spread sp[] = {{BF_LABEL_ZONE, 1, BF_WHEN_DO_NOT_SCHEDULE}};
    struct bf_need_profile np[3] = {
        {100, 3, 4, 1, r1, 0, NULL}, {50, 5, 5, 2, r2, 1, sp}, {200, 27, 1, 0, NULL, 0, NULL}};
    for (int i = 0; i < 3; i++) {
        int rc = bf_nprofile_intern(s, &np[i], &p->need[i], &p->fp[i]);
        if (rc)
            fx_die("need profile", rc);
    }
}

/* Inserts n machines; tallies them into e. */
static void fx_machines(struct bf_shm *s, const struct fx_profiles *p, uint32_t n,
                        struct fx_expect *e)
{
    uint32_t cl[3], err_ref = fx_str(s, "provider: boom", 14),
                    grp = fx_str(s, FX_GROUP, FX_GROUP_LEN);
    for (int i = 0; i < 3; i++)
        cl[i] = fx_str(s, fx_clusters[i], strlen(fx_clusters[i]));
    int64_t now_s = bf_now_ns() / BF_NS_PER_SEC;
    e->group_slot = UINT32_MAX;
    for (uint32_t i = 0; i < n; i++) {
        struct bf_machine_rec r;
        memset(&r, 0, sizeof r);
        char id[32], host[48];
        int l = snprintf(id, sizeof id, "m-%06u", i);
        r.id = fx_str(s, id, (size_t)l);
        int t = (int)(i % FX_TYPES), z = (int)((i / FX_TYPES) % FX_ZONES);
        uint8_t st = fx_states[i % 12];
        r.state = st;
        r.capacity_type = (uint8_t)fx_type_ct[t];
        r.type_idx = (uint16_t)e->type_idx[t];
        r.zone_idx = (uint16_t)e->zone_idx[z];
        r.profile = p->mprof[t][z];
        r.price_per_hour = 0.1f + 0.5f * (float)t;
        r.interruption_probability = t == 1 ? 0.05f : 0.0f;
        bool has_host = st != BF_STATE_SPECULATIVE && st != BF_STATE_CREATING;
        if (has_host) {
            if (i % 7 != 1) { /* most providers: the host ref is the machine id */
                r.host = fx_str(s, "sim", 3);
                r.flags |= BF_REC_HOST_IS_ID;
            } else {
                int hl = snprintf(host, sizeof host, "sim%cref-%u", 0, i);
                r.host = fx_str(s, host, (size_t)hl);
            }
        }
        if (st == BF_STATE_CONFIGURED || st == BF_STATE_DRAINING) {
            r.cluster = cl[i % 3];
            r.fingerprint = p->fp[0];
            r.assigned_priority = 100;
            r.ipb = 3;
            r.rpb = 4;
            if (i % 24 == 1) {
                r.group = grp;
                if (e->group_slot == UINT32_MAX)
                    snprintf(e->group_machine, sizeof e->group_machine, "%s", id);
            }
        }
        if (st == BF_STATE_FAILED)
            r.last_error = err_ref;
        if (st == BF_STATE_IDLE)
            r.idle_since = bf_rec_idle_since_encode(s, now_s - 120);
        if (i % 50 == 7)
            r.flags |= BF_REC_NEEDS_REFRESH;
        uint32_t slot;
        int rc = bf_inv_insert(s, &r, &slot);
        if (rc)
            fx_die("insert", rc);
        if (r.group == grp && e->group_slot == UINT32_MAX)
            e->group_slot = slot;
        if (i % 10 == 4)
            bf_pending_mark(s, slot);
        e->total++;
        e->by_state[st]++;
        e->by_stz[st][t][z]++;
        e->in_flight += i % 10 == 4;
        e->bound += r.cluster != 0;
        e->needs_refresh += i % 50 == 7;
    }
}

static void fx_vec(int64_t *v, int cpu, int64_t c, int mem, int64_t m)
{
    memset(v, 0, sizeof(int64_t) * BF_MAX_DIMS);
    if (cpu >= 0)
        v[cpu] = c;
    if (mem >= 0)
        v[mem] = m;
}

/* Clusters, need rows, a published cycle result, stats, procs, rings. */
#define FX_F_FAKE_CYCLE 0x1u /* a published cycle result, cycle stats, ring entries */
#define FX_F_PROCS      0x2u /* process slots (never on a live appliance) */

/* Clusters and need rows (the session's part). */
static void fx_needs(struct bf_shm *s, const struct fx_profiles *p, struct fx_expect *e)
{
    const int64_t GiB = 1024LL * 1024 * 1024 * 1000; /* milli-bytes */
    uint32_t cl[3], grp = fx_str(s, FX_GROUP, FX_GROUP_LEN);
    for (int i = 0; i < 3; i++)
        cl[i] = fx_str(s, fx_clusters[i], strlen(fx_clusters[i]));
    int64_t now = bf_now_ns(), t0 = now - 30 * BF_NS_PER_SEC;
    /* need rows: alpha {P1, P2, P3+group}, beta {P1, P2} */
    struct {
        int cluster, prof;
        bool group;
        int64_t cpu;
    } rows[5] = {{0, 0, false, 8000},
                 {0, 1, false, 4000},
                 {0, 2, true, 16000},
                 {1, 0, false, 2000},
                 {1, 1, false, 1000}};
    for (int i = 0; i < 5; i++) {
        struct bf_need_row r;
        memset(&r, 0, sizeof r);
        r.profile_ref = p->need[rows[i].prof];
        r.group_ref = rows[i].group ? grp : 0;
        r.cluster_ref = cl[rows[i].cluster];
        r.arrival_ns = t0 + i * BF_NS_PER_SEC;
        fx_vec(r.aggregate, p->cpu, rows[i].cpu, p->mem, 4 * GiB);
        fx_vec(r.min_unit, p->cpu, 1000, p->mem, GiB);
        bf_shm_store_words(&s->rows[i], &r, sizeof r);
    }
    struct bf_cluster_rec c[3];
    memset(c, 0, sizeof c);
    for (int i = 0; i < 3; i++) {
        c[i].name_ref = cl[i];
        c[i].in_use = 1;
        c[i].last_rollup_ns = now - (i + 1) * BF_NS_PER_SEC;
    }
    c[0].connected = 1, c[0].first_rollup = 1, c[0].rows_off = 0, c[0].rows_count = 3;
    c[0].generation = 5, c[0].rollups_accepted = 5, c[0].accepted_rows = 3;
    c[1].first_rollup = 1, c[1].quarantine_held = 2, c[1].rows_off = 3, c[1].rows_count = 2;
    c[1].generation = 1, c[1].rollups_accepted = 1, c[1].rollups_quarantined = 2;
    c[2].connected = 1;
    for (int i = 0; i < 3; i++)
        bf_cluster_write(s, (uint32_t)i, &c[i]);
    atomic_store(&s->needs->n_clusters, 3);
    atomic_store(&s->needs->rows_used, 5);
    atomic_fetch_add(&s->needs->change_counter, 1);
    e->clusters = 3, e->connected = 2, e->first_rollup = 2, e->quarantined = 1;
    e->need_rows = 5;
}

/* What the cycle, executor and supervisor would have written: a result
 * published through the double buffer, stats, process slots, ring entries. */
static void fx_fake_cycle(struct bf_shm *s, const struct fx_profiles *p, struct fx_expect *e,
                          bool procs)
{
    uint32_t cl[3], grp = fx_str(s, FX_GROUP, FX_GROUP_LEN);
    for (int i = 0; i < 3; i++)
        cl[i] = fx_str(s, fx_clusters[i], strlen(fx_clusters[i]));
    int64_t now = bf_now_ns(), t0 = now - 30 * BF_NS_PER_SEC;
    struct bf_state_main *st = s->st;
    uint32_t pub = atomic_load(&st->published), nb = pub ^ 1u;
    struct bf_cycle_result *r = calloc(1, sizeof *r);
    if (!r)
        fx_die("calloc", -ENOMEM);
    r->cycle = FX_CYCLE;
    r->computed_at_ns = now - 500 * BF_NS_PER_MS;
    r->cycle_ns = 12 * BF_NS_PER_MS;
    for (int i = 0; i < BF_PHASE_COUNT; i++)
        r->phase_ns[i] = (i + 1) * BF_NS_PER_MS;
    struct bf_verdict_writer vw;
    if (bf_verdict_write_begin(&vw, s, nb, 5) != 5)
        fx_die("bf_verdict_write_begin", -ENOSPC);
    struct bf_verdict_row w[5];
    memset(w, 0, sizeof w);
    /* alpha P1: satisfied */
    w[0].cluster_ref = cl[0], w[0].need_profile_ref = p->need[0], w[0].arrival_ns = t0;
    w[0].satisfied = 1, w[0].claimed_machine_count = 3, w[0].bootstrap_count = 1;
    w[0].provision_count = 2;
    /* alpha P2: Same, structurally unsatisfiable, parked */
    w[1].cluster_ref = cl[0], w[1].need_profile_ref = p->need[1];
    w[1].arrival_ns = t0 + BF_NS_PER_SEC;
    w[1].unmet_reason = BF_UNMET_TOPOLOGY_UNSATISFIABLE;
    fx_vec(w[1].residual_deficit, p->cpu, 2000, -1, 0);
    w[1].age_cycles_unmet = 7, w[1].acquisition_parked = 1, w[1].parked_age_cycles = 4;
    snprintf(w[1].same_domain, sizeof w[1].same_domain, "us-east-1a");
    w[1].n_same_candidates = 2;
    snprintf(w[1].same_candidates[0].domain, BF_DOMAIN_MAX, "us-east-1a");
    w[1].same_candidates[0].coverage_per_mille = 750;
    snprintf(w[1].same_candidates[1].domain, BF_DOMAIN_MAX, "us-east-1b");
    w[1].same_candidates[1].coverage_per_mille = 500;
    w[1].has_matching_supply = 1, w[1].matching_idle = 1, w[1].matching_configured = 2;
    /* alpha P3 (group): preemption exhausted */
    w[2].cluster_ref = cl[0], w[2].need_profile_ref = p->need[2], w[2].group_ref = grp;
    w[2].arrival_ns = t0 + 2 * BF_NS_PER_SEC;
    w[2].unmet_reason = BF_UNMET_PREEMPTION_EXHAUSTED;
    fx_vec(w[2].residual_deficit, p->cpu, 4000, -1, 0);
    w[2].has_preemption = 1, w[2].victims_found = 2;
    fx_vec(w[2].capacity_freed, p->cpu, 12000, -1, 0);
    w[2].has_matching_supply = 1, w[2].matching_configured = 9, w[2].matching_capped = 1;
    w[2].age_cycles_unmet = 3;
    /* beta P1: satisfied; beta P2 has no verdict (arrived after the cycle) */
    w[3].cluster_ref = cl[1], w[3].need_profile_ref = p->need[0];
    w[3].arrival_ns = t0 + 3 * BF_NS_PER_SEC, w[3].satisfied = 1, w[3].claimed_machine_count = 1;
    /* gamma P1: a verdict whose row has left the table since */
    w[4].cluster_ref = cl[2], w[4].need_profile_ref = p->need[0];
    w[4].arrival_ns = t0 - BF_NS_PER_SEC, w[4].satisfied = 1;
    for (int i = 0; i < 5; i++) {
        fx_vec(w[i].aggregate, p->cpu, 1000 * (i + 1), -1, 0);
        fx_vec(w[i].min_unit, p->cpu, 1000, -1, 0);
        bf_verdict_write(&vw, &w[i]);
    }
    bf_verdict_write_end(&vw, r);
    r->unsatisfied = 2;
    r->actions = 3;
    r->n_shortfalls = 2;
    r->shortfalls_total = 2;
    r->shortfalls[0] = (struct bf_shortfall_row){p->need[1], 50, 7, 5, {0}, {0}};
    r->shortfalls[0].deficit[p->cpu] = 2000;
    r->shortfalls[1] = (struct bf_shortfall_row){p->need[2], 200, 3, 27, {0}, {0}};
    r->shortfalls[1].deficit[p->cpu] = 4000;
    for (int i = 0; i < BF_STATE_COUNT; i++)
        r->counts.by_state[i] = e->by_state[i];
    r->counts.total_machines = e->total;
    r->counts.total_needs = 5;
    bf_shm_store_words(&st->result[nb], r, sizeof *r);
    free(r);
    uint64_t q = atomic_load(&st->publish_seq);
    atomic_store(&st->publish_seq, q + 1);
    atomic_store(&st->published, nb);
    atomic_store(&st->publish_seq, q + 2);
    e->verdicts = 5, e->unsatisfied = 2, e->shortfalls = 2;

    /* stats: 100 cycle durations 1..100 ms, phases */
    atomic_store(&st->cycle.cycles, FX_CYCLE);
    for (int i = 1; i <= 100; i++) {
        bf_hist_observe(&st->cycle.cycle_duration, 0.001, 2, 14, i * BF_NS_PER_MS);
        bf_hist_observe(&st->cycle.phase_duration[BF_PHASE_PHASE1], 0.001, 2, 14,
                        i * BF_NS_PER_MS / 4);
    }
    e->hist_count = 100;
    /* processes (not on a live appliance: the supervisor owns them) */
    for (int role = BF_ROLE_SESSION; procs && role <= BF_ROLE_EXECUTOR; role++) {
        atomic_store(&st->proc[role].pid, (uint32_t)getpid());
        atomic_store(&st->proc[role].child_state, BF_CHILD_ACTIVE);
        atomic_store(&st->proc[role].started_ns, now - 60 * BF_NS_PER_SEC);
        atomic_store(&st->proc[role].heartbeat_ns, now);
    }
    if (procs) {
        atomic_store(&st->proc[BF_ROLE_CYCLE].restarts, 2);
        atomic_store(&st->proc[BF_ROLE_CYCLE].last_exit_status, 9); /* killed by SIGKILL */
    }
    /* rings: two actions waiting for the executor */
    for (int i = 0; i < 2; i++) {
        struct bf_action_msg m;
        memset(&m, 0, sizeof m);
        m.serial = (uint64_t)i + 1;
        m.kind = BF_ACT_BOOTSTRAP;
        int rc = bf_ring_push(s, BF_RING_ACTIONS, &m);
        if (rc)
            fx_die("ring push", rc);
    }
}

static void fx_fill(struct bf_shm *s, uint32_t machines, struct fx_expect *e, unsigned flags)
{
    memset(e, 0, sizeof *e);
    struct fx_profiles p;
    fx_profiles(s, &p, e);
    fx_machines(s, &p, machines, e);
    fx_needs(s, &p, e);
    if (flags & FX_F_FAKE_CYCLE)
        fx_fake_cycle(s, &p, e, (flags & FX_F_PROCS) != 0);
}

/* ================================================================ JSON (jansson) */

/* Parses exactly one document (trailing whitespace allowed) with jansson:
 * strict RFC 8259 and UTF-8, \u0000 allowed (a NUL in the string), every
 * number a double. NULL on error; the caller json_decref()s the result. */
static json_t *jparse(const char *s, size_t n)
{
    json_error_t e;
    return json_loadb(s, n, JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &e);
}

/* Path lookup: "machines.by_state.Idle", "rows.1.cluster_id" (a borrowed
 * reference into root; NULL when a step is missing). */
static json_t *jget(json_t *v, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ".", &save); tok && v; tok = strtok_r(NULL, ".", &save)) {
        if (json_is_array(v)) {
            char *e;
            unsigned long k = strtoul(tok, &e, 10);
            v = *e ? NULL : json_array_get(v, k);
        } else {
            v = json_object_get(v, tok); /* NULL for a non-object */
        }
    }
    return v;
}

static double jnum(json_t *root, const char *path)
{
    json_t *v = jget(root, path);
    ck_assert_msg(json_is_number(v), "JSON %s: missing or not a number", path);
    return json_number_value(v);
}

static const char *jstrv(json_t *root, const char *path)
{
    json_t *v = jget(root, path);
    ck_assert_msg(json_is_string(v), "JSON %s: missing or not a string", path);
    return json_string_value(v);
}

static bool jbool(json_t *root, const char *path)
{
    json_t *v = jget(root, path);
    ck_assert_msg(json_is_boolean(v), "JSON %s: missing or not a boolean", path);
    return json_is_true(v);
}

static json_t *jarr(json_t *root, const char *path)
{
    json_t *v = jget(root, path);
    ck_assert_msg(json_is_array(v), "JSON %s: missing or not an array", path);
    return v;
}

/* ================================================================ running the binary */

static char g_bin[1024];

static void find_bin(void)
{
    const char *env = getenv("BF_INSPECT");
    if (env && *env) {
        snprintf(g_bin, sizeof g_bin, "%s", env);
        return;
    }
    char self[900];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = 0;
    snprintf(g_bin, sizeof g_bin, "%s/../bin/bigfleet-inspect", dirname(self));
}

struct run {
    int status; /* exit code, or 128 + signal */
    char *out, *err;
    size_t out_len, err_len;
    pid_t pid;
};

static void slurp(int fd, char **buf, size_t *len)
{
    size_t cap = 4096;
    *buf = malloc(cap);
    *len = 0;
    for (;;) {
        if (*len + 4096 > cap)
            *buf = realloc(*buf, cap *= 2);
        ssize_t r = read(fd, *buf + *len, cap - *len - 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        *len += (size_t)r;
    }
    (*buf)[*len] = 0;
}

/* Starts the binary with args (NULL-terminated), stdout/stderr to temp files. */
static pid_t spawn(const char *const *args, FILE **out, FILE **err)
{
    *out = tmpfile();
    *err = tmpfile();
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(fileno(*out), 1);
        dup2(fileno(*err), 2);
        int devnull = open("/dev/null", O_RDONLY);
        dup2(devnull, 0);
        const char *argv[64];
        int k = 0;
        argv[k++] = g_bin;
        for (int i = 0; args[i] && k < 63; i++)
            argv[k++] = args[i];
        argv[k] = NULL;
        execv(g_bin, (char *const *)argv);
        fprintf(stderr, "exec %s: %s\n", g_bin, strerror(errno));
        _exit(127);
    }
    return pid;
}

static void reap(pid_t pid, FILE *out, FILE *err, struct run *r, int timeout_s)
{
    int st = 0;
    int64_t end = bf_mono_ns() + timeout_s * BF_NS_PER_SEC;
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid)
            break;
        if (bf_mono_ns() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            ck_abort_msg("bigfleet-inspect did not finish within %d s", timeout_s);
        }
        usleep(2000);
    }
    r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    rewind(out);
    rewind(err);
    slurp(fileno(out), &r->out, &r->out_len);
    slurp(fileno(err), &r->err, &r->err_len);
    fclose(out);
    fclose(err);
}

static struct run run_inspect(const char *const *args)
{
    struct run r;
    memset(&r, 0, sizeof r);
    FILE *o, *e;
    pid_t pid = spawn(args, &o, &e);
    reap(pid, o, e, &r, 30);
    return r;
}

static void run_free(struct run *r)
{
    free(r->out);
    free(r->err);
}

/* Runs with --json and parses stdout (asserting exit 0 and a valid document). */
static json_t *run_json(const char *const *args)
{
    struct run r = run_inspect(args);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    json_t *v = jparse(r.out, r.out_len);
    ck_assert_msg(v != NULL, "output is not one JSON document:\n%s", r.out);
    run_free(&r);
    return v;
}

/* ================================================================ suite state */

static char g_id[64];
static struct bf_shm g_s;
static struct fx_expect g_e;

static void setup(void)
{
    find_bin();
    ck_assert_msg(access(g_bin, X_OK) == 0, "%s not built (make build/bin/bigfleet-inspect)",
                  g_bin);
    /* test-inspect-<runner pid>-<test pid>: main() removes what a failed test
     * (whose teardown does not run) left behind */
    snprintf(g_id, sizeof g_id, "test-inspect-%d-%d", (int)getppid(), (int)getpid());
    bf_shm_unlink(g_id);
    struct bf_shm_caps caps = {.max_machines = 4096, .max_needs = 1024, .max_clusters = 64};
    char err[256];
    ck_assert_msg(bf_shm_create(&g_s, g_id, &caps, 3, 0, err, sizeof err) == 0, "create: %s", err);
    fx_fill(&g_s, 240, &g_e, FX_F_FAKE_CYCLE | FX_F_PROCS);
}

static void teardown(void)
{
    bf_shm_detach(&g_s);
    bf_shm_unlink(g_id);
}

static uint64_t seg_hash(void)
{
    uint64_t h = 0;
    for (int k = 1; k < BF_SEG_KIND_COUNT; k++)
        h ^= XXH3_64bits(g_s.base[k], bf_shm_segment_bytes(&g_s, k)) * (uint64_t)(2 * k + 1);
    return h;
}

/* ================================================================ tests: pure helpers */

/* Found by fuzz_inspect_segment: `machine` on a record whose idle stamp
 * (or a header's creation time) was corrupted computed now - stamp * 1e9 in
 * int64 (signed overflow, undefined behaviour); every age and stamp the
 * renderers print now saturates. */
START_TEST(ages_and_stamps_from_a_corrupted_segment_saturate_instead_of_overflowing)
{
    ck_assert_int_eq(insp_age_ns(INT64_MAX, INT64_MIN), INT64_MAX);
    ck_assert_int_eq(insp_age_ns(INT64_MIN, 1), INT64_MIN);
    ck_assert_int_eq(insp_age_ns(5000, 2000), 3000);
    ck_assert_int_eq(insp_sec_to_ns(9223372037LL), INT64_MAX); /* 2^63 / 1e9 rounded up */
    ck_assert_int_eq(insp_sec_to_ns(-9223372037LL), INT64_MIN);
    ck_assert_int_eq(insp_sec_to_ns(2), 2000000000LL);
    char t[48], a[32];
    insp_fmt_time(t, sizeof t, INT64_MAX);
    ck_assert_str_eq(t, "2262-04-11T23:47:16.854Z");
    insp_fmt_age(a, sizeof a, insp_age_ns(0, INT64_MIN));
    ck_assert_ptr_nonnull(strstr(a, "d"));
}
END_TEST

START_TEST(json_escape_keeps_nul_control_and_invalid_utf8_parseable)
{
    struct bf_strbuf b = {0};
    static const char in[] = "a\0b\x01\x1f\"\\\n\x7f\xc3\xa9\xff\xe2\x82";
    bf_json_escape(&b, in, sizeof in - 1);
    ck_assert_ptr_null(memchr(b.p, 0, b.len));
    ck_assert_ptr_nonnull(strstr(b.p, "a\\u0000b\\u0001\\u001f\\\"\\\\\\n\\u007f"));
    ck_assert_ptr_nonnull(strstr(b.p, "\xc3\xa9")); /* valid UTF-8 kept */
    ck_assert_ptr_nonnull(strstr(b.p, "\\u00ff\\u00e2\\u0082"));
    json_t *v = jparse(b.p, b.len);
    ck_assert_ptr_nonnull(v);
    ck_assert(json_is_string(v));
    ck_assert_uint_eq(json_string_length(v), 17);
    ck_assert(memcmp(json_string_value(v), "a\0b\x01\x1f\"\\\n\x7f\xc3\xa9", 11) == 0);
    json_decref(v);
    bf_sb_free(&b);
}
END_TEST

START_TEST(histogram_quantile_interpolates_within_exponential_buckets)
{
    struct insp_hist h;
    memset(&h, 0, sizeof h);
    h.start = 0.001, h.factor = 2, h.nb = 14;
    ck_assert(isnan(insp_hist_quantile(&h, 0.99)));
    /* 100 observations 1..100 ms, bucketed exactly as bf_hist_observe does */
    struct bf_hist src;
    memset(&src, 0, sizeof src);
    for (int i = 1; i <= 100; i++)
        bf_hist_observe(&src, 0.001, 2, 14, i * BF_NS_PER_MS);
    for (int i = 0; i < BF_HIST_MAX_BUCKETS; i++)
        h.bucket[i] = atomic_load(&src.bucket[i]);
    /* bucket (64ms, 128ms] holds 65..100: the 99th value is at 64 + 64*(35/36) */
    double p99 = insp_hist_quantile(&h, 0.99);
    ck_assert_double_eq_tol(p99, 0.064 + 0.064 * (99.0 - 64.0) / 36.0, 1e-9);
    double p50 = insp_hist_quantile(&h, 0.5); /* (32, 64]: 33..64, rank 50 */
    ck_assert_double_eq_tol(p50, 0.032 + 0.032 * (50.0 - 32.0) / 32.0, 1e-9);
    /* everything above the last bound: the highest finite bound */
    memset(h.bucket, 0, sizeof h.bucket);
    h.bucket[14] = 5;
    ck_assert_double_eq_tol(insp_hist_quantile(&h, 0.5), 0.001 * 8192, 1e-9);
}
END_TEST

START_TEST(reader_reports_a_record_held_by_a_writer_as_busy_without_writing)
{
    struct bf_shm ro;
    char err[256];
    ck_assert_int_eq(bf_shm_attach(&ro, g_id, true, err, sizeof err), 0);
    struct bf_inv_txn t;
    ck_assert_int_eq(bf_inv_begin(&g_s, 3, &t), 0); /* hold slot 3 odd */
    uint64_t before[BF_ROLE_COUNT];
    for (int r = 0; r < BF_ROLE_COUNT; r++)
        before[r] = atomic_load(&g_s.inv->seqlock_retries[r]);
    struct bf_machine_rec rec;
    /* returns at all (a bounded number of tries, BF_SEQLOCK_READ_TRIES) with
     * -EAGAIN while the writer holds slot 3; no wall-clock bound: it failed
     * under load average 18 although the read was bounded */
    ck_assert_int_eq(bf_inv_read_seq(&ro, 3, &rec, NULL), -EAGAIN);
    ck_assert_int_eq(bf_inv_read_seq(&ro, 4, &rec, NULL), 0);
    struct insp_scan *sc = malloc(sizeof *sc);
    insp_scan(&ro, sc);
    ck_assert_uint_eq(sc->busy, 1);
    ck_assert_uint_eq(sc->total, g_e.total - 1);
    free(sc);
    for (int r = 0; r < BF_ROLE_COUNT; r++)
        ck_assert_uint_eq(atomic_load(&g_s.inv->seqlock_retries[r]), before[r]);
    bf_inv_abort(&g_s, &t);
    bf_shm_detach(&ro);
}
END_TEST

/* ================================================================ tests: the binary */

START_TEST(summary_json_matches_what_the_test_put_in)
{
    const char *args[] = {"--id", g_id, "--json", NULL};
    json_t *v = run_json(args);
    ck_assert_str_eq(jstrv(v, "shard.id"), g_id);
    ck_assert_uint_eq((uint32_t)jnum(v, "shard.layout_version"), BF_SHM_LAYOUT_VERSION);
    ck_assert_uint_eq((uint32_t)jnum(v, "shard.epoch"), 3);
    ck_assert_uint_eq((uint32_t)jnum(v, "machines.total"), g_e.total);
    ck_assert_uint_eq((uint32_t)jnum(v, "machines.busy"), 0);
    ck_assert_uint_eq((uint32_t)jnum(v, "machines.bound"), g_e.bound);
    ck_assert_uint_eq((uint32_t)jnum(v, "machines.needs_refresh"), g_e.needs_refresh);
    for (int st = 1; st < BF_STATE_COUNT; st++) {
        char p[64];
        snprintf(p, sizeof p, "machines.by_state.%s", bf_state_name(st));
        ck_assert_msg((uint32_t)jnum(v, p) == g_e.by_state[st], "%s", p);
    }
    /* state x type x zone: every fixture cell, and nothing else */
    json_t *stz = jarr(v, "machines.by_state_type_zone");
    uint32_t cells = 0, sum = 0;
    for (int st = 0; st < BF_STATE_COUNT; st++)
        for (int t = 0; t < FX_TYPES; t++)
            for (int z = 0; z < FX_ZONES; z++)
                cells += g_e.by_stz[st][t][z] != 0;
    ck_assert_uint_eq(json_array_size(stz), cells);
    for (size_t i = 0; i < json_array_size(stz); i++) {
        json_t *row = json_array_get(stz, i);
        int st = bf_state_from_name(jstrv(row, "state")), t = -1, z = -1;
        for (int k = 0; k < FX_TYPES; k++)
            if (strcmp(jstrv(row, "type"), fx_type_names[k]) == 0)
                t = k;
        for (int k = 0; k < FX_ZONES; k++)
            if (strcmp(jstrv(row, "zone"), fx_zone_names[k]) == 0)
                z = k;
        ck_assert(st > 0 && t >= 0 && z >= 0);
        ck_assert_uint_eq((uint32_t)jnum(row, "count"), g_e.by_stz[st][t][z]);
        sum += (uint32_t)jnum(row, "count");
    }
    ck_assert_uint_eq(sum, g_e.total);
    ck_assert_uint_eq((uint32_t)jnum(v, "in_flight.pending"), g_e.in_flight);
    ck_assert_uint_eq((uint32_t)jnum(v, "in_flight.actions_ring_depth"), 2);
    ck_assert_uint_eq((uint32_t)jnum(v, "clusters.total"), g_e.clusters);
    ck_assert_uint_eq((uint32_t)jnum(v, "clusters.connected"), g_e.connected);
    ck_assert_uint_eq((uint32_t)jnum(v, "clusters.first_rollup"), g_e.first_rollup);
    ck_assert_uint_eq((uint32_t)jnum(v, "clusters.quarantined"), g_e.quarantined);
    ck_assert_str_eq(jstrv(v, "clusters.rows.1.cluster_id"), "beta");
    ck_assert_uint_eq((uint32_t)jnum(v, "clusters.rows.0.generation"), 5);
    ck_assert_uint_eq((uint32_t)jnum(v, "needs.total"), g_e.need_rows);
    ck_assert_uint_eq((uint32_t)jnum(v, "last_cycle.cycle"), FX_CYCLE);
    ck_assert_uint_eq((uint32_t)jnum(v, "last_cycle.verdicts"), g_e.verdicts);
    ck_assert_uint_eq((uint32_t)jnum(v, "last_cycle.unsatisfied"), g_e.unsatisfied);
    ck_assert_uint_eq((uint32_t)jnum(v, "last_cycle.counts.total_machines"), g_e.total);
    ck_assert_str_eq(jstrv(v, "rings.0.name"), "actions");
    ck_assert_uint_eq((uint32_t)jnum(v, "rings.0.depth"), 2);
    ck_assert_str_eq(jstrv(v, "processes.3.role"), "cycle");
    ck_assert_uint_eq((uint32_t)jnum(v, "processes.3.restarts"), 2);
    json_decref(v);
}
END_TEST

START_TEST(summary_text_shows_the_same_numbers)
{
    const char *args[] = {"summary", "--id", g_id, NULL};
    struct run r = run_inspect(args);
    ck_assert_msg(r.status == 0, "%s", r.err);
    char want[128];
    snprintf(want, sizeof want, "MACHINES  %u ", g_e.total);
    ck_assert_msg(strstr(r.out, want), "no '%s' in:\n%s", want, r.out);
    snprintf(want, sizeof want, "Idle %u ", g_e.by_state[BF_STATE_IDLE]);
    ck_assert_ptr_nonnull(strstr(r.out, want));
    snprintf(want, sizeof want, "IN FLIGHT  %u machines", g_e.in_flight);
    ck_assert_ptr_nonnull(strstr(r.out, want));
    ck_assert_ptr_nonnull(strstr(r.out, "CLUSTERS  3  (connected 2, first rollup 2"));
    ck_assert_ptr_nonnull(strstr(r.out, "NEEDS  5 rows"));
    ck_assert_ptr_nonnull(strstr(r.out, "LAST CYCLE  #42"));
    ck_assert_ptr_nonnull(strstr(r.out, "(same as the scan)"));
    ck_assert_ptr_nonnull(strstr(r.out, "gpu.h100"));
    run_free(&r);
}
END_TEST

START_TEST(one_machine_record_is_complete)
{
    const char *args[] = {"machine", g_e.group_machine, "--id", g_id, "--json", NULL};
    json_t *v = run_json(args);
    ck_assert_str_eq(jstrv(v, "machine.id"), g_e.group_machine);
    ck_assert_uint_eq((uint32_t)jnum(v, "machine.slot"), g_e.group_slot);
    ck_assert_str_eq(jstrv(v, "machine.state"), "Configured");
    ck_assert_str_eq(jstrv(v, "machine.cluster"), "beta"); /* i = 1: cluster 1 */
    ck_assert_str_eq(jstrv(v, "machine.instance_type"), "c5.xlarge");
    ck_assert_str_eq(jstrv(v, "machine.capacity_type"), "Spot");
    ck_assert_str_eq(jstrv(v, "machine.host.provider"), "sim");
    ck_assert_str_eq(jstrv(v, "machine.host.ref"), "ref-1");
    json_t *g = jget(v, "machine.assigned_group");
    ck_assert(json_is_string(g) && json_string_length(g) == FX_GROUP_LEN);
    ck_assert(memcmp(json_string_value(g), FX_GROUP, FX_GROUP_LEN) ==
              0); /* NUL and control bytes survive */
    ck_assert_ptr_nonnull(strstr(jstrv(v, "machine.assigned_fingerprint"), "p=100|ipb=3|rpb=4"));
    ck_assert_uint_eq((uint32_t)jnum(v, "machine.assigned_priority"), 100);
    ck_assert_uint_eq((uint32_t)jnum(v, "machine.interruption_penalty_bucket"), 3);
    ck_assert_double_eq_tol(jnum(v, "machine.interruption_penalty_dollars"), 1.0, 1e-9);
    ck_assert_uint_eq((uint32_t)jnum(v, "machine.seq") % 2, 0);
    ck_assert_str_eq(jstrv(v, "machine.flags.0"), "valid");
    json_t *labels = jget(v, "machine.profile.labels");
    ck_assert(json_is_object(labels) && json_object_size(labels) == 2);
    void *first = json_object_iter(labels); /* jansson keeps the document's key order */
    ck_assert_str_eq(json_object_iter_key(first), "bigfleet.test/rack"); /* sorted by key */
    ck_assert_str_eq(json_string_value(json_object_iter_value(first)), "rack-a");
    ck_assert_str_eq(jstrv(v, "machine.profile.allocatable.cpu"), "1900m");
    ck_assert_str_eq(jstrv(v, "machine.profile.resources.memory"), "8Gi");
    ck_assert(json_is_boolean(jget(v, "machine.pending")));
    json_decref(v);
    /* text: every field, the group escaped */
    const char *targs[] = {"machine", g_e.group_machine, "--id", g_id, NULL};
    struct run r = run_inspect(targs);
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "grp\\0x\\x01\"y"));
    ck_assert_ptr_nonnull(strstr(r.out, "kubernetes.io/arch=amd64"));
    ck_assert_ptr_nonnull(strstr(r.out, "allocatable:"));
    ck_assert_ptr_nonnull(strstr(r.out, "pending action"));
    run_free(&r);
    /* by slot; unknown id exits 1 */
    char slot[16];
    snprintf(slot, sizeof slot, "%u", g_e.group_slot);
    const char *sargs[] = {"machine", "--slot", slot, "--id", g_id, "--json", NULL};
    v = run_json(sargs);
    ck_assert_str_eq(jstrv(v, "machine.id"), g_e.group_machine);
    json_decref(v);
    const char *nargs[] = {"machine", "no-such-machine", "--id", g_id, NULL};
    r = run_inspect(nargs);
    ck_assert_int_eq(r.status, 1);
    ck_assert_ptr_nonnull(strstr(r.err, "no machine no-such-machine"));
    run_free(&r);
}
END_TEST

START_TEST(machines_filters_by_state_cluster_and_type)
{
    const char *args[] = {"machines",  "--id",   g_id,     "--state",  "configured",
                          "--cluster", "alpha",  "--type", "m5.large", "--limit",
                          "0",         "--json", NULL};
    json_t *v = run_json(args);
    /* independent count: Configured (i%12 in {1,3,10}), cluster i%3 == 0, type i%3 == 0 */
    uint32_t want = 0;
    for (uint32_t i = 0; i < 240; i++)
        want += fx_states[i % 12] == BF_STATE_CONFIGURED && i % 3 == 0;
    ck_assert_uint_gt(want, 0);
    ck_assert_uint_eq((uint32_t)jnum(v, "matched"), want);
    json_t *m = jarr(v, "machines");
    ck_assert_uint_eq(json_array_size(m), want);
    for (size_t i = 0; i < json_array_size(m); i++) {
        ck_assert_str_eq(jstrv(json_array_get(m, i), "state"), "Configured");
        ck_assert_str_eq(jstrv(json_array_get(m, i), "cluster"), "alpha");
        ck_assert_str_eq(jstrv(json_array_get(m, i), "instance_type"), "m5.large");
    }
    json_decref(v);
    const char *largs[] = {"machines", "--id", g_id, "--limit", "7", "--json", NULL};
    v = run_json(largs);
    ck_assert_uint_eq((uint32_t)jnum(v, "matched"), g_e.total);
    ck_assert_uint_eq(json_array_size(jarr(v, "machines")), 7);
    ck_assert(jbool(v, "truncated"));
    json_decref(v);
}
END_TEST

START_TEST(needs_joins_rows_with_last_cycle_verdicts_in_order)
{
    const char *args[] = {"needs", "--id", g_id, "--json", NULL};
    json_t *v = run_json(args);
    ck_assert_uint_eq((uint32_t)jnum(v, "header.cycle"), FX_CYCLE);
    /* 5 rows + the gamma verdict whose row left the table */
    ck_assert_uint_eq((uint32_t)jnum(v, "header.total_needs"), 6);
    ck_assert_uint_eq((uint32_t)jnum(v, "rows_without_verdict"), 1);
    ck_assert_uint_eq((uint32_t)jnum(v, "verdicts_without_row"), 1);
    json_t *n = jarr(v, "needs");
    ck_assert_uint_eq(json_array_size(n), 6);
    /* priority desc, then arrival asc */
    for (size_t i = 1; i < json_array_size(n); i++) {
        double p0 = jnum(json_array_get(n, i - 1), "need.priority"),
               p1 = jnum(json_array_get(n, i), "need.priority");
        ck_assert(p0 >= p1);
        if (p0 == p1)
            ck_assert(jnum(json_array_get(n, i - 1), "arrival_unix_nanos") <=
                      jnum(json_array_get(n, i), "arrival_unix_nanos"));
    }
    json_t *top = json_array_get(n, 0); /* P3: the group need, preemption exhausted */
    ck_assert_uint_eq((uint32_t)jnum(top, "need.priority"), 200);
    ck_assert_str_eq(jstrv(top, "cluster_id"), "alpha");
    json_t *g = jget(top, "need.group");
    ck_assert(json_string_length(g) == FX_GROUP_LEN &&
              memcmp(json_string_value(g), FX_GROUP, FX_GROUP_LEN) == 0);
    ck_assert_str_eq(jstrv(top, "unmet_reason"), "UNMET_REASON_PREEMPTION_EXHAUSTED");
    ck_assert_uint_eq((uint32_t)jnum(top, "preemption.victims_found"), 2);
    ck_assert_str_eq(jstrv(top, "preemption.capacity_freed.cpu"), "12");
    ck_assert_str_eq(jstrv(top, "residual_deficit.cpu"), "4");
    ck_assert(jbool(top, "matching_supply.capped"));
    ck_assert_str_eq(jstrv(top, "need.aggregate_resources.cpu"), "16"); /* from the row */
    ck_assert_str_eq(jstrv(top, "need.min_unit.memory"), "1Gi");
    /* the Same need (priority 50, alpha first by arrival) */
    json_t *same = json_array_get(n, 4);
    ck_assert_uint_eq((uint32_t)jnum(same, "need.priority"), 50);
    ck_assert_str_eq(jstrv(same, "cluster_id"), "alpha");
    ck_assert_str_eq(jstrv(same, "unmet_reason"), "UNMET_REASON_TOPOLOGY_UNSATISFIABLE");
    ck_assert_str_eq(jstrv(same, "same_domain"), "us-east-1a");
    ck_assert(jbool(same, "acquisition_parked"));
    ck_assert_uint_eq((uint32_t)jnum(same, "parked_age_cycles"), 4);
    ck_assert_uint_eq((uint32_t)jnum(same, "age_cycles_unmet"), 7);
    ck_assert_uint_eq((uint32_t)jnum(same, "same_candidates.1.coverage_per_mille"), 500);
    ck_assert_str_eq(jstrv(same, "need.requirements.1.operator"),
                     "Same"); /* canonical: (key, op) */
    ;
    ck_assert_str_eq(jstrv(same, "need.spread.0.when_unsatisfiable"), "DoNotSchedule");
    /* beta's Same need arrived after the cycle: no verdict yet */
    json_t *late = json_array_get(n, 5);
    ck_assert_str_eq(jstrv(late, "cluster_id"), "beta");
    ck_assert(!jbool(late, "has_verdict"));
    json_decref(v);

    /* --cluster and --limit */
    const char *cargs[] = {"needs", "--cluster", "alpha",  "--limit", "2",
                           "--id",  g_id,        "--json", NULL};
    v = run_json(cargs);
    ck_assert_uint_eq((uint32_t)jnum(v, "header.total_needs"), 3);
    n = jarr(v, "needs");
    ck_assert_uint_eq(json_array_size(n), 2);
    ck_assert_str_eq(jstrv(json_array_get(n, 1), "cluster_id"), "alpha");
    ck_assert(jbool(json_array_get(n, 1), "satisfied"));
    ck_assert_uint_eq((uint32_t)jnum(json_array_get(n, 1), "claimed_machine_count"), 3);
    json_decref(v);
    /* text */
    const char *targs[] = {"needs", "--cluster", "alpha", "--id", g_id, NULL};
    struct run r = run_inspect(targs);
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "verdict: TOPOLOGY_UNSATISFIABLE"));
    ck_assert_ptr_nonnull(strstr(r.out, "PARKED for 4 cycles"));
    ck_assert_ptr_nonnull(
        strstr(r.out, "verdict: SATISFIED  claimed 3 (bootstrap 1, provision 2)"));
    run_free(&r);
    const char *uargs[] = {"needs", "--cluster", "nope", "--id", g_id, NULL};
    r = run_inspect(uargs);
    ck_assert_int_eq(r.status, 1);
    ck_assert_ptr_nonnull(strstr(r.err, "no cluster nope"));
    run_free(&r);
}
END_TEST

START_TEST(shortfalls_rings_procs_histogram_clusters_parse_and_carry_the_figures)
{
    const char *sargs[] = {"shortfalls", "--id", g_id, "--json", NULL};
    json_t *v = run_json(sargs);
    ck_assert_uint_eq(json_array_size(jarr(v, "shortfalls")), g_e.shortfalls);
    ck_assert_uint_eq((uint32_t)jnum(v, "shortfalls.0.age_cycles"), 7);
    ck_assert_str_eq(jstrv(v, "shortfalls.1.deficit.cpu"), "4");
    ck_assert_ptr_nonnull(strstr(jstrv(v, "shortfalls.1.profile_fingerprint"), "p=200|"));
    json_decref(v);
    const char *rargs[] = {"rings", "--id", g_id, "--json", NULL};
    v = run_json(rargs);
    ck_assert_uint_eq(json_array_size(jarr(v, "rings")), BF_RING_COUNT);
    ck_assert_uint_eq((uint32_t)jnum(v, "rings.0.pushes"), 2);
    ck_assert_str_eq(jstrv(v, "rings.0.consumer"), "executor");
    json_decref(v);
    const char *pargs[] = {"procs", "--id", g_id, "--json", NULL};
    v = run_json(pargs);
    ck_assert_str_eq(jstrv(v, "processes.0.role"), "supervisor");
    ck_assert_uint_eq((uint32_t)jnum(v, "processes.0.pid"), (uint32_t)getpid());
    ck_assert(jbool(v, "processes.1.alive"));
    ck_assert_str_eq(jstrv(v, "processes.3.state"), "active");
    json_decref(v);
    const char *hargs[] = {"histogram", "--all", "--id", g_id, "--json", NULL};
    v = run_json(hargs);
    ck_assert_str_eq(jstrv(v, "histograms.0.name"), "cycle_duration");
    ck_assert_uint_eq((uint32_t)jnum(v, "histograms.0.count"), g_e.hist_count);
    ck_assert_double_eq_tol(jnum(v, "histograms.0.p99_seconds"), 0.064 + 0.064 * 35.0 / 36.0, 1e-9);
    ck_assert_double_eq_tol(jnum(v, "histograms.0.mean_seconds"), 0.0505, 1e-9);
    ck_assert_str_eq(jstrv(v, "histograms.0.buckets.14.le"), "+Inf");
    ck_assert_uint_eq((uint32_t)jnum(v, "last_cycle_ns"), 12 * BF_NS_PER_MS);
    ck_assert_uint_eq(json_array_size(jarr(v, "histograms")), 1 + BF_PHASE_COUNT + 6);
    json_decref(v);
    const char *cargs[] = {"clusters", "--id", g_id, "--json", NULL};
    v = run_json(cargs);
    ck_assert_uint_eq(json_array_size(jarr(v, "clusters")), 3);
    ck_assert_uint_eq((uint32_t)jnum(v, "clusters.1.quarantine_held"), 2);
    ck_assert(!jbool(v, "clusters.2.first_rollup"));
    json_decref(v);
    /* every text form runs */
    const char *cmds[] = {"shortfalls", "rings", "procs", "histogram", "clusters", "machines"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        const char *a[] = {cmds[i], "--id", g_id, NULL};
        struct run r = run_inspect(a);
        ck_assert_msg(r.status == 0 && r.out_len > 0, "%s: %d %s", cmds[i], r.status, r.err);
        run_free(&r);
    }
}
END_TEST

START_TEST(missing_shard_id_exits_1_with_the_message)
{
    const char *args[] = {"--id", "no-such-shard-xyz", NULL};
    struct run r = run_inspect(args);
    ck_assert_int_eq(r.status, 1);
    ck_assert_msg(strstr(r.err, "no appliance segments for shard id no-such-shard-xyz"), "%s",
                  r.err);
    ck_assert_uint_eq(r.out_len, 0);
    run_free(&r);
}
END_TEST

START_TEST(layout_version_mismatch_exits_1_naming_both_versions)
{
    g_s.state_hdr->layout_version = BF_SHM_LAYOUT_VERSION + 6;
    const char *args[] = {"--id", g_id, "--json", NULL};
    struct run r = run_inspect(args);
    g_s.state_hdr->layout_version = BF_SHM_LAYOUT_VERSION;
    ck_assert_int_eq(r.status, 1);
    char a[64], b[64];
    snprintf(a, sizeof a, "layout version %u", BF_SHM_LAYOUT_VERSION + 6);
    snprintf(b, sizeof b, "expects version %u", BF_SHM_LAYOUT_VERSION);
    ck_assert_msg(strstr(r.err, a) && strstr(r.err, b), "%s", r.err);
    run_free(&r);
    g_s.inv_hdr->magic = 0x1234;
    r = run_inspect(args);
    g_s.inv_hdr->magic = BF_SHM_MAGIC;
    ck_assert_int_eq(r.status, 1);
    ck_assert_ptr_nonnull(strstr(r.err, "bad magic"));
    run_free(&r);
}
END_TEST

START_TEST(usage_errors_exit_2)
{
    const char *bad[][6] = {{"--no-such-flag", NULL},
                            {"frobnicate", NULL},
                            {"machines", "--state", "Sleeping", NULL},
                            {"machine", NULL},
                            {"--interval", "1ms", "--watch", NULL},
                            {"summary", "--addr", "127.0.0.1:1", NULL},
                            {"needs", "--addr", "x:1", "--tls-ca", "ca.pem", NULL},
                            {"machines", "--limit", "-3", NULL},
                            {"rings", "--cluster", "a", NULL}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct run r = run_inspect(bad[i]);
        ck_assert_msg(r.status == 2, "%s: exit %d", bad[i][0], r.status);
        ck_assert_ptr_nonnull(strstr(r.err, "--help"));
        run_free(&r);
    }
    const char *help[] = {"--help", NULL};
    struct run r = run_inspect(help);
    ck_assert_int_eq(r.status, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "histogram"));
    ck_assert_ptr_nonnull(strstr(r.out, "--addr"));
    run_free(&r);
}
END_TEST

START_TEST(inspect_never_writes_into_the_segments)
{
    uint64_t h0 = seg_hash();
    const char *cmds[][8] = {{"--json", NULL},
                             {"summary", NULL},
                             {"machines", "--limit", "0", NULL},
                             {"machine", g_e.group_machine, "--json", NULL},
                             {"clusters", NULL},
                             {"needs", "--json", NULL},
                             {"shortfalls", NULL},
                             {"rings", NULL},
                             {"procs", NULL},
                             {"histogram", "--all", "--json", NULL},
                             {"--watch", "--interval", "50ms", "--frames", "3", NULL}};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        const char *a[12] = {"--id", g_id};
        int k = 2;
        for (int j = 0; cmds[i][j]; j++)
            a[k++] = cmds[i][j];
        a[k] = NULL;
        struct run r = run_inspect(a);
        ck_assert_msg(r.status == 0, "%s: %d %s", cmds[i][0], r.status, r.err);
        run_free(&r);
        ck_assert_msg(seg_hash() == h0, "segments changed after `%s`", cmds[i][0]);
    }
    /* and its mappings are read-only shared: r--s in /proc/PID/maps */
    const char *w[] = {"--id", g_id, "--watch", "--interval", "100ms", NULL};
    FILE *o, *e;
    pid_t pid = spawn(w, &o, &e);
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
    int seen = 0;
    for (int tries = 0; tries < 200 && seen < 4; tries++) {
        usleep(10000);
        FILE *m = fopen(path, "r");
        if (!m)
            continue;
        seen = 0;
        while (fgets(line, sizeof line, m)) {
            if (!strstr(line, "/dev/shm/bigfleet.") || !strstr(line, g_id))
                continue;
            char perms[8] = "";
            sscanf(line, "%*s %7s", perms);
            ck_assert_msg(strcmp(perms, "r--s") == 0, "writable mapping: %s", line);
            seen++;
        }
        fclose(m);
    }
    ck_assert_int_eq(seen, 4);
    kill(pid, SIGINT);
    struct run r;
    reap(pid, o, e, &r, 10);
    ck_assert_int_eq(r.status, 0); /* SIGINT quits cleanly */
    ck_assert_uint_eq(seg_hash(), h0);
    run_free(&r);
}
END_TEST

START_TEST(watch_without_a_tty_prints_frames_and_json_lines)
{
    const char *args[] = {"--id",     g_id, "--watch", "--interval", "50ms",
                          "--frames", "3",  "--json",  NULL};
    struct run r = run_inspect(args);
    ck_assert_msg(r.status == 0, "%s", r.err);
    int lines = 0;
    for (char *p = r.out, *nl; (nl = strchr(p, '\n')); p = nl + 1) {
        json_t *v = jparse(p, (size_t)(nl - p));
        ck_assert_msg(v != NULL, "frame %d is not a JSON document", lines);
        ck_assert_uint_eq((uint32_t)jnum(v, "machines.total"), g_e.total);
        json_decref(v);
        lines++;
    }
    ck_assert_int_eq(lines, 3);
    run_free(&r);
    const char *targs[] = {"procs", "--id",     g_id, "--watch", "--interval",
                           "50ms",  "--frames", "2",  NULL};
    r = run_inspect(targs);
    ck_assert_int_eq(r.status, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "frame 1 at"));
    ck_assert_ptr_nonnull(strstr(r.out, "frame 2 at"));
    run_free(&r);
}
END_TEST

/* Starts --watch, waits for its first frame, applies `what`, expects exit 1
 * with `msg` on stderr. */
static void watch_until_gone(void (*what)(void), const char *msg)
{
    const char *args[] = {"--id", g_id, "--watch", "--interval", "50ms", NULL};
    FILE *o, *e;
    pid_t pid = spawn(args, &o, &e);
    for (int i = 0; i < 400; i++) {
        struct stat st;
        if (fstat(fileno(o), &st) == 0 && st.st_size > 0)
            break;
        usleep(5000);
    }
    what();
    struct run r;
    reap(pid, o, e, &r, 10);
    ck_assert_msg(r.status == 1, "exit %d (want 1): %s", r.status, r.err);
    ck_assert_msg(strstr(r.err, msg), "stderr lacks '%s': %s", msg, r.err);
    run_free(&r);
}

static void do_unlink(void)
{
    bf_shm_unlink(g_id);
}

static void do_shutdown(void)
{
    atomic_store(&g_s.st->shutting_down, 1);
}

static void do_recreate(void)
{
    bf_shm_detach(&g_s);
    bf_shm_unlink(g_id);
    struct bf_shm_caps caps = {.max_machines = 64, .max_needs = 64, .max_clusters = 4};
    ck_assert_int_eq(bf_shm_create(&g_s, g_id, &caps, 4, 0, NULL, 0), 0);
}

static void do_truncate(void)
{
    /* what a torn-down mapping looks like: the inventory shrinks under the reader */
    char name[128];
    bf_shm_name(g_id, BF_SEG_INVENTORY, name, sizeof name);
    int fd = shm_open(name, O_RDWR, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, 4096), 0);
    close(fd);
    /* our own mapping is now short too: forget it */
    munmap(g_s.base[BF_SEG_INVENTORY], g_s.len[BF_SEG_INVENTORY]);
    g_s.base[BF_SEG_INVENTORY] = NULL;
}

START_TEST(watch_exits_1_when_the_segments_are_removed)
{
    watch_until_gone(do_unlink, "were removed (appliance torn down)");
}
END_TEST

START_TEST(watch_exits_1_when_the_appliance_shuts_down)
{
    watch_until_gone(do_shutdown, "is shutting down");
}
END_TEST

START_TEST(watch_exits_1_when_the_segments_are_recreated)
{
    watch_until_gone(do_recreate, "were re-created");
}
END_TEST

START_TEST(watch_exits_1_with_a_message_when_a_segment_is_truncated_under_it)
{
    watch_until_gone(do_truncate, "torn down while being read (SIGBUS in the inventory");
}
END_TEST

START_TEST(stale_segments_warn_in_one_shot_and_fail_watch)
{
    /* a supervisor pid that is gone: a child that already exited */
    pid_t c = fork();
    if (c == 0)
        _exit(0);
    waitpid(c, NULL, 0);
    uint32_t saved = g_s.state_hdr->supervisor_pid;
    g_s.state_hdr->supervisor_pid = (uint32_t)c;
    const char *args[] = {"--id", g_id, NULL};
    struct run r = run_inspect(args);
    ck_assert_int_eq(r.status, 0);
    ck_assert_ptr_nonnull(strstr(r.err, "stale"));
    ck_assert_ptr_nonnull(strstr(r.out, "NOT RUNNING"));
    run_free(&r);
    const char *wargs[] = {"--id", g_id, "--watch", "--frames", "2", NULL};
    r = run_inspect(wargs);
    ck_assert_int_eq(r.status, 1);
    ck_assert_ptr_nonnull(strstr(r.err, "went away (supervisor pid"));
    run_free(&r);
    g_s.state_hdr->supervisor_pid = saved;
}
END_TEST

START_TEST(a_busy_record_is_reported_not_waited_on)
{
    struct bf_inv_txn t;
    ck_assert_int_eq(bf_inv_begin(&g_s, 0, &t), 0);
    const char *args[] = {"--id", g_id, "--json", NULL};
    int64_t t0 = bf_mono_ns();
    json_t *v = run_json(args);
    ck_assert_int_lt(bf_mono_ns() - t0, 10 * BF_NS_PER_SEC);
    ck_assert_uint_eq((uint32_t)jnum(v, "machines.busy"), 1);
    ck_assert_uint_eq((uint32_t)jnum(v, "machines.total"), g_e.total - 1);
    json_decref(v);
    const char *margs[] = {"machine", "--slot", "0", "--id", g_id, NULL};
    struct run r = run_inspect(margs);
    ck_assert_int_eq(r.status, 1);
    ck_assert_ptr_nonnull(strstr(r.err, "busy"));
    run_free(&r);
    bf_inv_abort(&g_s, &t);
}
END_TEST

START_TEST(a_publish_in_progress_does_not_hide_the_last_result)
{
    /* the cycle holds publish_seq odd while it fills the OTHER buffer */
    uint64_t q = atomic_load(&g_s.st->publish_seq);
    atomic_store(&g_s.st->publish_seq, q + 1);
    const char *args[] = {"--id", g_id, "--json", NULL};
    json_t *v = run_json(args);
    atomic_store(&g_s.st->publish_seq, q + 2);
    ck_assert_uint_eq((uint32_t)jnum(v, "last_cycle.cycle"), FX_CYCLE);
    ck_assert(jbool(v, "last_cycle.consistent"));
    json_decref(v);
}
END_TEST

START_TEST(results_published_by_the_real_cycle_controller_read_back)
{
    /* the real cycle (src/cycle) over the fixture: what it publishes must be
     * what inspect shows, and its verdict rows must join the need rows */
    struct bf_cycle_opts o = {.reclaim_cap_fraction = 0.05, .actuation_paused = true};
    struct bf_cycle *c;
    ck_assert_int_eq(bf_cycle_new(&g_s, &o, &c), 0);
    struct bf_cycle_report rep;
    ck_assert_int_eq(bf_cycle_run_once(c, bf_now_ns(), &rep), 0);
    const char *args[] = {"--id", g_id, "--json", NULL};
    json_t *v = run_json(args);
    ck_assert_uint_eq((uint64_t)jnum(v, "last_cycle.cycle"), rep.cycle);
    ck_assert_uint_eq((uint32_t)jnum(v, "last_cycle.counts.total_machines"), g_e.total);
    ck_assert_uint_eq((uint32_t)jnum(v, "last_cycle.unsatisfied"), rep.unsatisfied);
    for (int st = 1; st < BF_STATE_COUNT; st++) {
        char a[64];
        snprintf(a, sizeof a, "last_cycle.counts.by_state.%s", bf_state_name(st));
        ck_assert_msg((uint32_t)jnum(v, a) == g_e.by_state[st], "%s", a);
    }
    json_decref(v);
    const char *nargs[] = {"needs", "--id", g_id, "--json", NULL};
    v = run_json(nargs);
    ck_assert_uint_eq((uint64_t)jnum(v, "header.cycle"), rep.cycle);
    ck_assert_uint_eq((uint32_t)jnum(v, "header.total_needs"), g_e.need_rows);
    ck_assert_uint_eq((uint32_t)jnum(v, "rows_without_verdict"), 0);
    ck_assert_uint_eq((uint32_t)jnum(v, "verdicts_without_row"), 0);
    json_t *n = jarr(v, "needs");
    uint32_t unsat = 0, rows = 0;
    for (size_t i = 0; i < json_array_size(n); i++) {
        ck_assert(jbool(json_array_get(n, i), "has_verdict"));
        unsat += !jbool(json_array_get(n, i), "satisfied");
        rows += (uint32_t)jnum(json_array_get(n, i), "table_rows"); /* folded Same gangs included */
    }
    ck_assert_uint_eq(unsat, rep.unsatisfied);
    ck_assert_uint_eq(rows, g_e.need_rows);
    json_decref(v);
    bf_cycle_free(c);
}
END_TEST

/* ================================================================ helper modes */

static volatile sig_atomic_t g_term;
static void on_term(int sig)
{
    (void)sig;
    g_term = 1;
}

static void print_expect(const char *id, const struct fx_expect *e)
{
    printf("{\"shard_id\":\"%s\",\"total\":%u,\"in_flight\":%u,\"bound\":%u,\"by_state\":{", id,
           e->total, e->in_flight, e->bound);
    for (int st = 1; st < BF_STATE_COUNT; st++)
        printf("%s\"%s\":%u", st > 1 ? "," : "", bf_state_name(st), e->by_state[st]);
    printf("},\"by_state_type_zone\":[");
    bool first = true;
    for (int st = 0; st < BF_STATE_COUNT; st++)
        for (int t = 0; t < FX_TYPES; t++)
            for (int z = 0; z < FX_ZONES; z++)
                if (e->by_stz[st][t][z]) {
                    printf("%s{\"state\":\"%s\",\"type\":\"%s\",\"zone\":\"%s\",\"count\":%u}",
                           first ? "" : ",", bf_state_name(st), fx_type_names[t], fx_zone_names[z],
                           e->by_stz[st][t][z]);
                    first = false;
                }
    printf("],\"clusters\":%u,\"connected\":%u,\"first_rollup\":%u,\"quarantined\":%u,"
           "\"need_rows\":%u,\"cycle\":%d,\"verdicts\":%u,\"unsatisfied\":%u,"
           "\"group_machine\":\"%s\",\"group_slot\":%u}\n",
           e->clusters, e->connected, e->first_rollup, e->quarantined, e->need_rows, FX_CYCLE,
           e->verdicts, e->unsatisfied, e->group_machine, e->group_slot);
    fflush(stdout);
}

static int mode_fixture(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: test_inspect fixture populate|create ID [MACHINES]\n");
        return 2;
    }
    const char *id = argv[3];
    uint32_t n = argc > 4 ? (uint32_t)strtoul(argv[4], NULL, 10) : 240;
    struct bf_shm s;
    char err[256];
    bool create = strcmp(argv[2], "create") == 0;
    if (create) {
        bf_shm_unlink(id);
        struct bf_shm_caps caps = {.max_machines = n + 1024 > 4096 ? n + 1024 : 4096,
                                   .max_needs = 4096,
                                   .max_clusters = 64};
        if (bf_shm_create(&s, id, &caps, 1, 0, err, sizeof err) != 0) {
            fprintf(stderr, "create: %s\n", err);
            return 1;
        }
    } else if (bf_shm_attach(&s, id, false, err, sizeof err) != 0) {
        fprintf(stderr, "attach: %s\n", err);
        return 1;
    }
    bf_shm_set_role(&s, BF_ROLE_SESSION);
    struct fx_expect *e = calloc(1, sizeof *e);
    /* on a live appliance only what its stub-free writers leave alone:
     * records, clusters, need rows, in-flight marks */
    fx_fill(&s, n, e, create ? FX_F_FAKE_CYCLE | FX_F_PROCS : 0);
    print_expect(id, e);
    free(e);
    if (create) {
        signal(SIGTERM, on_term);
        signal(SIGINT, on_term);
        while (!g_term)
            pause();
        bf_shm_detach(&s);
        bf_shm_unlink(id);
    } else {
        bf_shm_detach(&s);
    }
    return 0;
}

static int mode_scan_bench(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    struct bf_shm s;
    char err[256];
    if (bf_shm_attach(&s, argv[2], true, err, sizeof err) != 0) {
        fprintf(stderr, "attach: %s\n", err);
        return 1;
    }
    struct insp_scan *sc = malloc(sizeof *sc);
    double best = 1e18, sum = 0;
    int runs = 20;
    for (int i = 0; i < runs; i++) {
        insp_scan(&s, sc);
        double ms = (double)sc->scan_ns / 1e6;
        sum += ms;
        if (ms < best)
            best = ms;
    }
    printf("{\"records\":%u,\"hwm\":%u,\"scan_ms_best\":%.3f,\"scan_ms_mean\":%.3f,\"runs\":%d}\n",
           sc->total, sc->hwm, best, sum / runs, runs);
    free(sc);
    bf_shm_detach(&s);
    return 0;
}

/*
 * cycle-proxy: a synthetic stand-in for the cycle process (the real one is
 * not in this base). Each "cycle" does the cycle's shared-memory work at
 * its heaviest: a full seqlock snapshot of every record (the snapread of a
 * mirror rescan), a tally by state x type x zone and a cheapest-Idle pick
 * per (type, zone) (a cost scan standing in for Phase 1), then publishes a
 * result through the double buffer with verdict rows, and observes its
 * duration in st->cycle.cycle_duration. A forked writer meanwhile moves
 * records between Idle and Configured through the seqlock (executor-like)
 * at ~20K transitions/s. Prints p50/p99/max of the cycle durations.
 */
static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Sleeps what is left of a period_ms period that started at start_ns. */
static void sleep_rest_of_period(int64_t start_ns, int period_ms)
{
    int64_t left = period_ms * BF_NS_PER_MS - (bf_mono_ns() - start_ns);
    if (left > 0) {
        struct timespec ts = {left / BF_NS_PER_SEC, left % BF_NS_PER_SEC};
        nanosleep(&ts, NULL);
    }
}

/* Ends the forked writer and closes the trace file (if any). */
static void stop_writer(pid_t writer, FILE *trace)
{
    kill(writer, SIGKILL);
    waitpid(writer, NULL, 0);
    if (trace)
        fclose(trace);
}

/* mean, median, p99 and max of cycles durations (ns) in milliseconds; sorts dur */
struct dur_ms {
    double mean, p50, p99, max;
};

static struct dur_ms dur_summary(int64_t *dur, int cycles)
{
    qsort(dur, (size_t)cycles, sizeof *dur, cmp_i64);
    double sum = 0;
    for (int c = 0; c < cycles; c++)
        sum += (double)dur[c];
    int i99 = (int)ceil(0.99 * cycles) - 1;
    return (struct dur_ms){sum / cycles / 1e6, (double)dur[cycles / 2] / 1e6,
                           (double)dur[i99 < 0 ? 0 : i99] / 1e6, (double)dur[cycles - 1] / 1e6};
}

/* The load modes' arguments: ID [MACHINES] [CYCLES] [PERIOD_MS] [TRACE]. */
struct load_args {
    const char *id;
    uint32_t n;
    int cycles, period_ms;
};

/* Reads the arguments and creates fresh segments `id` sized for n machines.
 * 0, or the exit code: 2 (usage), 1 (the segments could not be created). */
static int load_mode_open(const char *mode, int argc, char **argv, struct load_args *a,
                          struct bf_shm *s)
{
    if (argc < 3) {
        fprintf(stderr, "usage: test_inspect %s ID [MACHINES] [CYCLES] [PERIOD_MS] [TRACE]\n",
                mode);
        return 2;
    }
    a->id = argv[2];
    a->n = argc > 3 ? (uint32_t)strtoul(argv[3], NULL, 10) : 500000;
    a->cycles = argc > 4 ? atoi(argv[4]) : 300;
    a->period_ms = argc > 5 ? atoi(argv[5]) : 100;
    char err[256];
    bf_shm_unlink(a->id);
    struct bf_shm_caps caps = {
        .max_machines = a->n + 1024, .max_needs = 65536, .max_clusters = 4096};
    if (bf_shm_create(s, a->id, &caps, 1, 0, err, sizeof err) != 0) {
        fprintf(stderr, "create: %s\n", err);
        return 1;
    }
    return 0;
}

static int mode_cycle_proxy(int argc, char **argv)
{
    struct load_args la;
    struct bf_shm s;
    int rc = load_mode_open("cycle-proxy", argc, argv, &la, &s);
    if (rc)
        return rc;
    const char *id = la.id;
    uint32_t n = la.n;
    int cycles = la.cycles, period_ms = la.period_ms;
    char err[256];
    struct fx_expect *e = calloc(1, sizeof *e);
    int64_t t0 = bf_mono_ns();
    fx_fill(&s, n, e, FX_F_FAKE_CYCLE | FX_F_PROCS);
    fprintf(stderr, "cycle-proxy: %u machines inserted in %.1f s; READY\n", n,
            (double)(bf_mono_ns() - t0) / 1e9);
    /* optional trace: one line per cycle, "start_unix_ns duration_ns" */
    FILE *trace = argc > 6 ? fopen(argv[6], "w") : NULL;
    pid_t writer = fork();
    if (writer == 0) {
        struct bf_shm ws;
        if (bf_shm_attach(&ws, id, false, err, sizeof err) != 0)
            _exit(1);
        bf_shm_set_role(&ws, BF_ROLE_EXECUTOR);
        uint32_t i = 0;
        for (;;) {
            for (int k = 0; k < 200; k++, i = (i * 2654435761u + 1) % n) {
                struct bf_inv_txn t;
                if (bf_inv_begin(&ws, i, &t) != 0)
                    continue;
                struct bf_machine_rec r = t.old;
                if (r.state == BF_STATE_IDLE)
                    r.state = BF_STATE_CONFIGURED;
                else if (r.state == BF_STATE_CONFIGURED)
                    r.state = BF_STATE_IDLE;
                bf_inv_commit(&ws, &t, &r, BF_CL_EXECUTOR);
            }
            usleep(10000); /* ~20K transitions/s */
        }
    }
    int64_t *dur = calloc((size_t)cycles, sizeof *dur);
    struct bf_state_main *st = s.st;
    static uint32_t tally[BF_STATE_COUNT][BF_MAX_TYPES][BF_MAX_ZONES];
    for (int c = 0; c < cycles; c++) {
        int64_t a = bf_mono_ns(), wall0 = bf_now_ns();
        memset(tally, 0, sizeof tally);
        float best[FX_TYPES + 1][FX_ZONES + 1];
        for (int t = 0; t <= FX_TYPES; t++)
            for (int z = 0; z <= FX_ZONES; z++)
                best[t][z] = INFINITY;
        uint32_t hwm = bf_inv_hwm(&s), valid = 0;
        for (uint32_t i = 0; i < hwm; i++) {
            struct bf_machine_rec r;
            if (bf_inv_read_seq(&s, i, &r, NULL) != 0 || !(r.flags & BF_REC_VALID))
                continue;
            valid++;
            tally[r.state % BF_STATE_COUNT][r.type_idx % BF_MAX_TYPES][r.zone_idx % BF_MAX_ZONES]++;
            if (r.state == BF_STATE_IDLE) {
                float cost = (float)bf_effective_cost(r.price_per_hour, r.interruption_probability,
                                                      bf_bucket_upper_bound(r.ipb));
                unsigned t = r.type_idx % (FX_TYPES + 1), z = r.zone_idx % (FX_ZONES + 1);
                if (cost < best[t][z])
                    best[t][z] = cost;
            }
        }
        /* publish */
        uint32_t pub = atomic_load(&st->published), nb = pub ^ 1u;
        struct bf_cycle_result *res = &st->result[nb];
        res->cycle = (uint64_t)c + 1;
        res->computed_at_ns = bf_now_ns();
        res->n_verdicts = 5;
        res->counts.total_machines = valid;
        for (int k = 0; k < BF_STATE_COUNT; k++) {
            uint32_t sum = 0;
            for (int t = 0; t < BF_MAX_TYPES; t++)
                for (int z = 0; z < BF_MAX_ZONES; z++)
                    sum += tally[k][t][z];
            res->counts.by_state[k] = sum;
        }
        res->n_verdict_extras = st->result[pub].n_verdict_extras;
        for (uint32_t i = 0; i < 5 + res->n_verdict_extras; i++)
            memcpy(&s.verdicts[bf_verdict_index(nb, i)], &s.verdicts[bf_verdict_index(pub, i)],
                   sizeof(union bf_verdict_cell));
        int64_t d = bf_mono_ns() - a;
        res->cycle_ns = d;
        uint64_t q = atomic_load(&st->publish_seq);
        atomic_store(&st->publish_seq, q + 1);
        atomic_store(&st->published, nb);
        atomic_store(&st->publish_seq, q + 2);
        atomic_fetch_add(&st->cycle.cycles, 1);
        bf_hist_observe(&st->cycle.cycle_duration, 0.001, 2, 14, d);
        dur[c] = d;
        if (trace)
            fprintf(trace, "%lld %lld\n", (long long)wall0, (long long)d);
        sleep_rest_of_period(a, period_ms);
    }
    stop_writer(writer, trace);
    struct dur_ms m = dur_summary(dur, cycles);
    printf("{\"machines\":%u,\"cycles\":%d,\"period_ms\":%d,\"mean_ms\":%.3f,\"p50_ms\":%.3f,"
           "\"p99_ms\":%.3f,\"max_ms\":%.3f}\n",
           n, cycles, period_ms, m.mean, m.p50, m.p99, m.max);
    free(dur);
    free(e);
    bf_shm_detach(&s);
    bf_shm_unlink(id);
    return 0;
}

/*
 * cycle-real: the REAL cycle controller (src/cycle, bf_cycle_run_once: snapread
 * from the change logs, the engine's phases, rails, enqueue, publish) over
 * real segments: the fixture's machines, its clusters plus 100 clusters x 20
 * need rows. A forked writer plays the executor (applies each action at once
 * and marks it done) and the reconciler (same-state price updates to ~20K
 * records/s through the seqlock and the change log). After the fleet has
 * converged with the demand (few actions per cycle), one cycle every
 * PERIOD_MS; per-cycle bf_cycle_report.total_ns goes to TRACE.
 */
static void fx_bulk_needs(struct bf_shm *s, int nclusters, int rows_per)
{
    const char *v1[] = {"m5.large"}, *v2[] = {"c5.xlarge"}, *v3[] = {"gpu.h100"};
    struct bf_requirement r1[] = {{BF_LABEL_INSTANCE_TYPE, BF_OP_IN, 1, v1}};
    struct bf_requirement r2[] = {{BF_LABEL_INSTANCE_TYPE, BF_OP_IN, 1, v2}};
    struct bf_requirement r3[] = {{BF_LABEL_INSTANCE_TYPE, BF_OP_IN, 1, v3}};
    struct bf_need_profile np[4] = {{1000, 3, 3, 1, r1, 0, NULL},
                                    {500, 3, 3, 1, r2, 0, NULL},
                                    {2000, 16, 27, 1, r3, 0, NULL},
                                    {100, 1, 1, 0, NULL, 0, NULL}};
    uint32_t pref[4];
    for (int i = 0; i < 4; i++)
        if (bf_nprofile_intern(s, &np[i], &pref[i], NULL) != 0)
            fx_die("bulk profile", -EINVAL);
    int cpu = bf_dim_lookup(s, "cpu"), mem = bf_dim_lookup(s, "memory");
    uint32_t off = 8, base = atomic_load(&s->needs->n_clusters);
    int64_t now = bf_now_ns();
    for (int c = 0; c < nclusters; c++) {
        char name[32];
        int l = snprintf(name, sizeof name, "c-%03d", c);
        struct bf_cluster_rec rec;
        memset(&rec, 0, sizeof rec);
        rec.name_ref = fx_str(s, name, (size_t)l);
        rec.in_use = rec.connected = rec.first_rollup = 1;
        rec.generation = 1;
        rec.rows_off = off;
        rec.rows_count = (uint32_t)rows_per;
        rec.last_rollup_ns = now;
        for (int r = 0; r < rows_per; r++) {
            struct bf_need_row row;
            memset(&row, 0, sizeof row);
            row.profile_ref = pref[(c + r) % 4];
            row.cluster_ref = rec.name_ref;
            row.arrival_ns = now - (int64_t)(c * rows_per + r) * BF_NS_PER_MS;
            row.group_ref = fx_str(s, &"abcdefghijklmnopqrst"[r % 20], 1);
            fx_vec(row.aggregate, cpu, 1000LL * (2 + (c * 7 + r * 3) % 30), mem,
                   1024LL * 1024 * 1024 * 1000 * (1 + r % 4));
            fx_vec(row.min_unit, cpu, 1000, mem, 1024LL * 1024 * 1024 * 1000);
            bf_shm_store_words(&s->rows[off + (uint32_t)r], &row, sizeof row);
        }
        off += (uint32_t)rows_per;
        bf_cluster_write(s, base + (uint32_t)c, &rec);
    }
    atomic_store(&s->needs->n_clusters, base + (uint32_t)nclusters);
    atomic_store(&s->needs->rows_used, off - 3);
    atomic_fetch_add(&s->needs->change_counter, 1);
}

/* The writer of cycle-real: plays the executor (applies every action on the
 * actions ring at once and marks it done) and the reconciler (same-state
 * price updates, ~20K records/s). Runs until killed. */
static int real_writer(const char *id, uint32_t n)
{
    struct bf_shm ws;
    char err[256];
    if (bf_shm_attach(&ws, id, false, err, sizeof err) != 0)
        return 1;
    bf_shm_set_role(&ws, BF_ROLE_EXECUTOR);
    struct bf_blob_cache *cache = bf_blob_cache_new();
    uint32_t sim = 0;
    bf_str_intern(&ws, "sim", 3, &sim);
    uint32_t i = 1;
    for (;;) {
        struct bf_action_msg m;
        while (bf_ring_pop(&ws, BF_RING_ACTIONS, &m) == 0) {
            struct bf_inv_txn t;
            if (m.disposition != BF_DISP_EXECUTE || bf_inv_begin(&ws, m.slot, &t) != 0)
                continue;
            struct bf_machine_rec r = t.old;
            const struct bf_nprofile *np =
                m.need_profile_ref ? bf_nprofile_get(cache, &ws, m.need_profile_ref) : NULL;
            switch (m.kind) {
            case BF_ACT_PROVISION:
                r.host = sim;
                r.flags |= BF_REC_HOST_IS_ID;
                /* fall through */
            case BF_ACT_BOOTSTRAP:
                r.state = BF_STATE_CONFIGURED;
                r.cluster = m.cluster_ref;
                r.group = m.group_ref;
                r.idle_since = 0;
                if (np) {
                    r.fingerprint = np->fingerprint_ref;
                    r.assigned_priority = np->p.priority;
                    r.ipb = np->p.ipb;
                    r.rpb = np->p.rpb;
                }
                break;
            case BF_ACT_RECLAIM:
            case BF_ACT_PREEMPT:
                r.state = BF_STATE_IDLE;
                r.cluster = r.fingerprint = r.group = 0;
                r.assigned_priority = 0;
                r.idle_since = bf_rec_idle_since_encode(&ws, bf_now_ns() / BF_NS_PER_SEC);
                break;
            case BF_ACT_DELETE:
                r.state = BF_STATE_SPECULATIVE;
                r.host = 0;
                r.flags &= ~BF_REC_HOST_IS_ID;
                r.idle_since = 0;
                break;
            default:
                break;
            }
            bf_inv_commit(&ws, &t, &r, BF_CL_EXECUTOR);
            if (m.pending_tag)
                bf_pending_done(&ws, m.slot, m.pending_tag);
        }
        for (int k = 0; k < 200; k++) {
            i = (i * 2654435761u + 12345u) % n;
            struct bf_inv_txn t;
            if (bf_inv_begin(&ws, i, &t) != 0)
                continue;
            struct bf_machine_rec r = t.old;
            r.price_per_hour = r.price_per_hour * (k & 1 ? 1.001f : 0.999f);
            bf_inv_commit(&ws, &t, &r, BF_CL_RECONCILER);
        }
        usleep(10000);
    }
}

static int mode_cycle_real(int argc, char **argv)
{
    struct load_args la;
    struct bf_shm s;
    int rc = load_mode_open("cycle-real", argc, argv, &la, &s);
    if (rc)
        return rc;
    const char *id = la.id;
    uint32_t n = la.n;
    int cycles = la.cycles, period_ms = la.period_ms;
    FILE *trace = argc > 6 ? fopen(argv[6], "w") : NULL;
    bf_shm_set_role(&s, BF_ROLE_CYCLE);
    struct fx_expect *e = calloc(1, sizeof *e);
    int64_t t0 = bf_mono_ns();
    fx_fill(&s, n, e, 0);
    fx_bulk_needs(&s, 100, 20);
    struct bf_cycle_opts o = {.reclaim_cap_fraction = 0.05};
    struct bf_cycle *c;
    if (bf_cycle_new(&s, &o, &c) != 0) {
        fprintf(stderr, "bf_cycle_new failed\n");
        return 1;
    }
    struct bf_cycle_report rep;
    bf_cycle_run_once(c, bf_now_ns(), &rep); /* the first cycle rescans everything */
    fprintf(stderr,
            "cycle-real: %u machines, %u needs, first cycle (full rescan) %.1f ms, "
            "setup %.1f s\n",
            n, rep.needs, (double)rep.total_ns / 1e6, (double)(bf_mono_ns() - t0) / 1e9);
    pid_t writer = fork();
    if (writer == 0)
        _exit(real_writer(id, n));
    /* warm up: let the executor-like writer converge the fleet with demand */
    int warm = 0;
    for (int quiet = 0; warm < 300 && quiet < 5; warm++) {
        bf_cycle_run_once(c, bf_now_ns(), &rep);
        quiet = rep.enqueued < 50 ? quiet + 1 : 0;
        if (getenv("CYCLE_REAL_DEBUG") && warm % 20 == 0)
            fprintf(stderr,
                    "warm %d: decided %u enqueued %u deduped %u dropped %u capped %u "
                    "unsatisfied %u changed %u\n",
                    warm, rep.decided, rep.enqueued, rep.deduped, rep.dropped, rep.capped,
                    rep.unsatisfied, rep.changed_slots);
        usleep(20000);
    }
    fprintf(stderr,
            "cycle-real: converged after %d cycles (last: %u decided, %u enqueued, %u capped); "
            "READY\n",
            warm, rep.decided, rep.enqueued, rep.capped);
    bf_log_init("cycle-real", BF_LOG_ERROR);
    int64_t *dur = calloc((size_t)cycles, sizeof *dur);
    uint64_t changed = 0;
    for (int k = 0; k < cycles; k++) {
        int64_t a = bf_mono_ns(), wall0 = bf_now_ns();
        bf_cycle_run_once(c, wall0, &rep);
        dur[k] = rep.total_ns;
        changed += rep.changed_slots;
        if (trace)
            fprintf(trace, "%lld %lld\n", (long long)wall0, (long long)rep.total_ns);
        sleep_rest_of_period(a, period_ms);
    }
    stop_writer(writer, trace);
    struct dur_ms m = dur_summary(dur, cycles);
    printf("{\"machines\":%u,\"needs\":%u,\"changed_per_cycle\":%.0f,\"cycles\":%d,"
           "\"period_ms\":%d,\"mean_ms\":%.3f,\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"max_ms\":%.3f}\n",
           n, rep.needs, (double)changed / cycles, cycles, period_ms, m.mean, m.p50, m.p99, m.max);
    free(dur);
    free(e);
    bf_cycle_free(c);
    bf_shm_detach(&s);
    bf_shm_unlink(id);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "fixture") == 0)
        return mode_fixture(argc, argv);
    if (argc > 1 && strcmp(argv[1], "scan-bench") == 0)
        return mode_scan_bench(argc, argv);
    if (argc > 1 && strcmp(argv[1], "cycle-proxy") == 0)
        return mode_cycle_proxy(argc, argv);
    if (argc > 1 && strcmp(argv[1], "cycle-real") == 0)
        return mode_cycle_real(argc, argv);
    bf_log_init("test_inspect", BF_LOG_ERROR); /* the real cycle's warnings are expected */
    Suite *s = suite_create("inspect");
    TCase *pure = tcase_create("helpers");
    tcase_add_test(pure, json_escape_keeps_nul_control_and_invalid_utf8_parseable);
    tcase_add_test(pure, ages_and_stamps_from_a_corrupted_segment_saturate_instead_of_overflowing);
    tcase_add_test(pure, histogram_quantile_interpolates_within_exponential_buckets);
    suite_add_tcase(s, pure);
    TCase *tc = tcase_create("binary");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, reader_reports_a_record_held_by_a_writer_as_busy_without_writing);
    tcase_add_test(tc, summary_json_matches_what_the_test_put_in);
    tcase_add_test(tc, summary_text_shows_the_same_numbers);
    tcase_add_test(tc, one_machine_record_is_complete);
    tcase_add_test(tc, machines_filters_by_state_cluster_and_type);
    tcase_add_test(tc, needs_joins_rows_with_last_cycle_verdicts_in_order);
    tcase_add_test(tc, shortfalls_rings_procs_histogram_clusters_parse_and_carry_the_figures);
    tcase_add_test(tc, missing_shard_id_exits_1_with_the_message);
    tcase_add_test(tc, layout_version_mismatch_exits_1_naming_both_versions);
    tcase_add_test(tc, usage_errors_exit_2);
    tcase_add_test(tc, inspect_never_writes_into_the_segments);
    tcase_add_test(tc, watch_without_a_tty_prints_frames_and_json_lines);
    tcase_add_test(tc, watch_exits_1_when_the_segments_are_removed);
    tcase_add_test(tc, watch_exits_1_when_the_appliance_shuts_down);
    tcase_add_test(tc, watch_exits_1_when_the_segments_are_recreated);
    tcase_add_test(tc, watch_exits_1_with_a_message_when_a_segment_is_truncated_under_it);
    tcase_add_test(tc, stale_segments_warn_in_one_shot_and_fail_watch);
    tcase_add_test(tc, a_busy_record_is_reported_not_waited_on);
    tcase_add_test(tc, a_publish_in_progress_does_not_hide_the_last_result);
    tcase_add_test(tc, results_published_by_the_real_cycle_controller_read_back);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    char prefix[64];
    int pl = snprintf(prefix, sizeof prefix, "bigfleet.test-inspect-%d-", (int)getpid());
    DIR *d = opendir("/dev/shm");
    for (struct dirent *de; d && (de = readdir(d));) {
        if (strncmp(de->d_name, prefix, (size_t)pl) == 0) {
            char name[300];
            snprintf(name, sizeof name, "/%s", de->d_name);
            shm_unlink(name);
        }
    }
    if (d)
        closedir(d);
    return failed ? 1 : 0;
}
