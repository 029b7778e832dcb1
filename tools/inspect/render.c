/*
 * render.c — every subcommand of bigfleet-inspect, as text (for people; a
 * --watch frame) and as one JSON document (for scripts).
 *
 * Each renderer reads what it shows from the segments at call time through
 * reader.c (never writing) and builds the whole frame in a buffer; main.c
 * writes it. JSON keys are stable snake_case; NeedView rows use the proto
 * field names of shardread.proto so local and --addr output are the same
 * document shape.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "bigfleet/process.h"
#include "bigfleet/util.h"
#include "inspect.h"

static const char *const child_state_names[] = {"unused", "assigned", "active"};

static const char *yesno(bool b)
{
    return b ? "yes" : "no";
}

static const char *type_name(const struct bf_shm *s, unsigned idx)
{
    const char *n = bf_type_name(s, idx);
    return n;
}

/* "3 ($1)", "27 (pinned)" */
static const char *bucket_str(char *buf, size_t n, int b)
{
    const char *l = bf_bucket_label(b);
    if (b == BF_BUCKET_PINNED)
        snprintf(buf, n, "%d (%s)", b, l);
    else
        snprintf(buf, n, "%d ($%s)", b, l);
    return buf;
}

static const char *dash(const char *s)
{
    return (s && *s) ? s : "-";
}

static void ms_str(char *buf, size_t n, double ns)
{
    if (isnan(ns))
        snprintf(buf, n, "-");
    else if (ns < 1e6)
        snprintf(buf, n, "%.0fus", ns / 1e3);
    else if (ns < 1e9)
        snprintf(buf, n, "%.1fms", ns / 1e6);
    else
        snprintf(buf, n, "%.2fs", ns / 1e9);
}

/* ------------------------------------------------------------ shard header */

static void shard_json(struct insp_ctx *c, struct bf_jw *w)
{
    const struct bf_shm *s = &c->shm;
    const struct bf_seg_header *h = s->state_hdr;
    const struct bf_state_main *st = s->st;
    bf_jw_obj(w, "shard");
    bf_jw_str(w, "id", s->shard_id);
    bf_jw_uint(w, "layout_version", h->layout_version);
    bf_jw_int(w, "epoch", h->epoch);
    bf_jw_uint(w, "generation", h->generation);
    bf_jw_uint(w, "supervisor_pid", h->supervisor_pid);
    bf_jw_bool(w, "supervisor_running", insp_supervisor_running(s));
    bf_jw_int(w, "created_unix_nanos", h->created_unix_ns);
    bf_jw_uint(w, "segment_bytes", bf_shm_total_bytes(s));
    bf_jw_uint(w, "max_machines", s->max_machines);
    bf_jw_uint(w, "max_needs", s->max_needs);
    bf_jw_uint(w, "max_clusters", s->max_clusters);
    bf_jw_obj(w, "flags");
    bf_jw_bool(w, "actuation_paused", BF_STAT_GET(st->actuation_paused) != 0);
    bf_jw_bool(w, "dry_run", BF_STAT_GET(st->dry_run) != 0);
    bf_jw_bool(w, "shutting_down", BF_STAT_GET(st->shutting_down) != 0);
    bf_jw_bool(w, "first_reconcile_done", BF_STAT_GET(st->first_reconcile_done) != 0);
    bf_jw_obj_end(w);
    bf_jw_int(w, "now_unix_nanos", c->now_ns);
    bf_jw_obj_end(w);
}

static void shard_text(struct insp_ctx *c, struct bf_strbuf *b)
{
    const struct bf_shm *s = &c->shm;
    const struct bf_seg_header *h = s->state_hdr;
    const struct bf_state_main *st = s->st;
    char t[48], age[32];
    insp_fmt_time(t, sizeof t, h->created_unix_ns);
    insp_fmt_age(age, sizeof age, insp_age_ns(c->now_ns, h->created_unix_ns));
    bool run = insp_supervisor_running(s);
    bf_sb_printf(b,
                 "shard %s  layout v%u  epoch %lld  generation %u  supervisor pid %u (%s)  "
                 "created %s (%s ago)  %.1f MiB mapped\n",
                 s->shard_id, h->layout_version, (long long)h->epoch, h->generation,
                 h->supervisor_pid, run ? "running" : "NOT RUNNING: stale segments", t, age,
                 (double)bf_shm_total_bytes(s) / (1 << 20));
    bf_sb_printf(
        b, "flags: actuation_paused=%s dry_run=%s shutting_down=%s first_reconcile_done=%s\n",
        yesno(BF_STAT_GET(st->actuation_paused)), yesno(BF_STAT_GET(st->dry_run)),
        yesno(BF_STAT_GET(st->shutting_down)), yesno(BF_STAT_GET(st->first_reconcile_done)));
}

/* ------------------------------------------------------------ procs, rings */

static void exit_str(char *buf, size_t n, int32_t status, uint32_t restarts)
{
    if (restarts == 0 && status == 0) {
        snprintf(buf, n, "-");
        return;
    }
    if (WIFEXITED(status))
        snprintf(buf, n, "exit %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, n, "signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(buf, n, "status %#x", (unsigned)status);
}

static bool pid_alive(uint32_t pid)
{
    return pid && (kill((pid_t)pid, 0) == 0 || errno != ESRCH);
}

static void procs_json(struct insp_ctx *c, struct bf_jw *w)
{
    const struct bf_shm *s = &c->shm;
    bf_jw_arr(w, "processes");
    for (int r = 0; r < BF_ROLE_COUNT; r++) {
        const struct bf_proc_slot *p = &s->st->proc[r];
        uint32_t pid = BF_STAT_GET(p->pid);
        if (r == BF_ROLE_SUPERVISOR && !pid)
            pid = s->state_hdr->supervisor_pid;
        uint32_t cs = BF_STAT_GET(p->child_state);
        int64_t hb = BF_STAT_GET(p->heartbeat_ns);
        if (r == BF_ROLE_SIMPROVIDER && !pid && !hb)
            continue;
        bf_jw_obj(w, NULL);
        bf_jw_str(w, "role", bf_role_name(r));
        bf_jw_uint(w, "pid", pid);
        bf_jw_bool(w, "alive", pid_alive(pid));
        bf_jw_str(w, "state",
                  r == BF_ROLE_SUPERVISOR ? "supervisor"
                                          : (cs < 3 ? child_state_names[cs] : "unknown"));
        bf_jw_uint(w, "restarts", BF_STAT_GET(p->restarts));
        bf_jw_int(w, "started_unix_nanos", BF_STAT_GET(p->started_ns));
        bf_jw_int(w, "heartbeat_unix_nanos", hb);
        if (hb)
            bf_jw_double(w, "heartbeat_age_seconds", (double)insp_age_ns(c->now_ns, hb) / 1e9);
        else
            bf_jw_null(w, "heartbeat_age_seconds");
        bf_jw_int(w, "last_exit_status", BF_STAT_GET(p->last_exit_status));
        bf_jw_obj_end(w);
    }
    bf_jw_arr_end(w);
}

static void procs_text(struct insp_ctx *c, struct bf_strbuf *b)
{
    const struct bf_shm *s = &c->shm;
    bf_sb_printf(b, "  %-11s %8s  %-8s %-5s %8s  %-10s %-10s %s\n", "ROLE", "PID", "STATE", "ALIVE",
                 "RESTARTS", "UP", "HEARTBEAT", "LAST EXIT");
    for (int r = 0; r < BF_ROLE_COUNT; r++) {
        const struct bf_proc_slot *p = &s->st->proc[r];
        uint32_t pid = BF_STAT_GET(p->pid);
        if (r == BF_ROLE_SUPERVISOR && !pid)
            pid = s->state_hdr->supervisor_pid;
        uint32_t cs = BF_STAT_GET(p->child_state);
        int64_t hb = BF_STAT_GET(p->heartbeat_ns), started = BF_STAT_GET(p->started_ns);
        if (r == BF_ROLE_SIMPROVIDER && !pid && !hb)
            continue;
        char up[32] = "-", hbs[32] = "-", ex[64];
        if (started)
            insp_fmt_age(up, sizeof up, insp_age_ns(c->now_ns, started));
        if (hb) {
            insp_fmt_age(hbs, sizeof hbs, insp_age_ns(c->now_ns, hb));
            strncat(hbs, " ago", sizeof hbs - strlen(hbs) - 1);
        }
        uint32_t rs = BF_STAT_GET(p->restarts);
        exit_str(ex, sizeof ex, BF_STAT_GET(p->last_exit_status), rs);
        bf_sb_printf(b, "  %-11s %8u  %-8s %-5s %8u  %-10s %-10s %s\n", bf_role_name(r), pid,
                     r == BF_ROLE_SUPERVISOR ? "-" : (cs < 3 ? child_state_names[cs] : "?"),
                     yesno(pid_alive(pid)), rs, up, hbs, ex);
    }
}

static void rings_json(struct insp_ctx *c, struct bf_jw *w)
{
    const struct bf_shm *s = &c->shm;
    bf_jw_arr(w, "rings");
    for (int r = 0; r < BF_RING_COUNT; r++) {
        const struct bf_ring_hdr *h = s->ring[r];
        bf_jw_obj(w, NULL);
        bf_jw_str(w, "name", bf_ring_label(r));
        bf_jw_str(w, "producer", bf_role_name((int)h->producer));
        bf_jw_str(w, "consumer", bf_role_name((int)h->consumer));
        bf_jw_str(w, "kind", h->kind == BF_RING_BYTES ? "bytes" : "fixed");
        bf_jw_uint(w, "capacity", h->capacity);
        bf_jw_uint(w, "depth", bf_ring_depth(s, r));
        bf_jw_uint(w, "pushes", BF_STAT_GET(h->pushes));
        bf_jw_uint(w, "drops", BF_STAT_GET(h->drops));
        bf_jw_uint(w, "produced", BF_STAT_GET(h->prod));
        bf_jw_uint(w, "consumed", BF_STAT_GET(h->cons));
        bf_jw_obj_end(w);
    }
    bf_jw_arr_end(w);
}

static void rings_text(struct insp_ctx *c, struct bf_strbuf *b)
{
    const struct bf_shm *s = &c->shm;
    bf_sb_printf(b, "  %-11s %-24s %-6s %10s %10s %6s %12s %10s\n", "RING", "PRODUCER -> CONSUMER",
                 "KIND", "DEPTH", "CAPACITY", "FILL", "PUSHES", "DROPS");
    for (int r = 0; r < BF_RING_COUNT; r++) {
        const struct bf_ring_hdr *h = s->ring[r];
        char pc[48];
        snprintf(pc, sizeof pc, "%s -> %s", bf_role_name((int)h->producer),
                 bf_role_name((int)h->consumer));
        uint64_t d = bf_ring_depth(s, r);
        bf_sb_printf(b, "  %-11s %-24s %-6s %10llu %10llu %5.1f%% %12llu %10llu\n",
                     bf_ring_label(r), pc, h->kind == BF_RING_BYTES ? "bytes" : "fixed",
                     (unsigned long long)d, (unsigned long long)h->capacity,
                     h->capacity ? 100.0 * (double)d / (double)h->capacity : 0.0,
                     (unsigned long long)BF_STAT_GET(h->pushes),
                     (unsigned long long)BF_STAT_GET(h->drops));
    }
}

/* ------------------------------------------------------------ clusters */

static void cluster_json(struct insp_ctx *c, struct bf_jw *w, const struct insp_cluster *k)
{
    bf_jw_obj(w, NULL);
    bf_jw_uint(w, "index", k->idx);
    if (k->busy) {
        bf_jw_bool(w, "busy", true);
        bf_jw_obj_end(w);
        return;
    }
    const struct bf_cluster_rec *r = &k->r;
    bf_jw_strn(w, "cluster_id", k->name, k->name_len);
    bf_jw_bool(w, "connected", r->connected);
    bf_jw_bool(w, "first_rollup", r->first_rollup);
    bf_jw_uint(w, "rows", r->rows_count);
    bf_jw_uint(w, "accepted_rows", r->accepted_rows);
    bf_jw_uint(w, "generation", r->generation);
    bf_jw_uint(w, "quarantine_held", r->quarantine_held);
    bf_jw_uint(w, "session_epoch", r->session_epoch);
    bf_jw_int(w, "last_rollup_unix_nanos", r->last_rollup_ns);
    if (r->last_rollup_ns)
        bf_jw_double(w, "last_rollup_age_seconds",
                     (double)insp_age_ns(c->now_ns, r->last_rollup_ns) / 1e9);
    else
        bf_jw_null(w, "last_rollup_age_seconds");
    bf_jw_int(w, "last_rollup_timestamp_unix_nanos", r->last_rollup_timestamp_ns);
    bf_jw_int(w, "connected_since_unix_nanos", r->connected_since_ns);
    bf_jw_uint(w, "rollups_accepted", r->rollups_accepted);
    bf_jw_uint(w, "rollups_rejected", r->rollups_rejected);
    bf_jw_uint(w, "rollups_quarantined", r->rollups_quarantined);
    bf_jw_obj_end(w);
}

static void clusters_text(struct insp_ctx *c, struct bf_strbuf *b, const struct insp_cluster *k,
                          int n, int max)
{
    bf_sb_printf(b, "  %-24s %-4s %-5s %6s %10s %4s %-12s %9s %8s %8s\n", "CLUSTER", "CONN",
                 "FIRST", "ROWS", "GENERATION", "QUAR", "LAST ROLLUP", "ACCEPTED", "REJECTED",
                 "HELD");
    int shown = 0;
    for (int i = 0; i < n; i++) {
        if (max && shown >= max) {
            bf_sb_printf(b, "  ... %d more clusters (bigfleet-inspect clusters)\n", n - shown);
            break;
        }
        shown++;
        if (k[i].busy) {
            bf_sb_printf(b, "  %-24s (row %u busy)\n", "?", k[i].idx);
            continue;
        }
        const struct bf_cluster_rec *r = &k[i].r;
        struct bf_strbuf nm = {0};
        insp_ib_bytes_text(&nm, k[i].name, k[i].name_len, 24);
        char age[32] = "never";
        if (r->last_rollup_ns) {
            insp_fmt_age(age, sizeof age, insp_age_ns(c->now_ns, r->last_rollup_ns));
            strncat(age, " ago", sizeof age - strlen(age) - 1);
        }
        bf_sb_printf(b, "  %-24s %-4s %-5s %6u %10llu %4u %-12s %9llu %8llu %8llu\n", nm.p,
                     yesno(r->connected), yesno(r->first_rollup), r->rows_count,
                     (unsigned long long)r->generation, r->quarantine_held, age,
                     (unsigned long long)r->rollups_accepted,
                     (unsigned long long)r->rollups_rejected,
                     (unsigned long long)r->rollups_quarantined);
        bf_sb_free(&nm);
    }
}

/* ------------------------------------------------------------ ownership */

static const char *own_mode_name(uint32_t m)
{
    static const char *const n[] = {"unknown", "own-all", "partitioned", "no-store"};
    return m < 4 ? n[m] : "unknown";
}

static const char *const own_kind_names[BF_OWN_KINDS] = {"unknown",         "AssignDomain",
                                                         "UnassignDomain",  "ReassignSpeculative",
                                                         "CrossShardDrain", "TransferOwnership"};
static const char *const own_outcome_names[BF_OWN_OUTCOMES] = {
    "unspecified", "accepted", "rejected_stale", "rejected_invalid", "failed"};

static void own_json(struct insp_ctx *c, struct bf_jw *w, const struct insp_own *o)
{
    bf_jw_obj(w, "ownership");
    bf_jw_str(w, "mode", own_mode_name(o->mode));
    bf_jw_uint(w, "generation", o->generation);
    bf_jw_uint(w, "owned_machines", o->owned);
    bf_jw_uint(w, "domains", o->n_domains);
    bf_jw_uint(w, "transfers_in", o->n_in);
    bf_jw_uint(w, "transfers_out", o->n_out);
    bf_jw_uint(w, "reserved", o->n_reserved);
    bf_jw_uint(w, "held", o->n_held);
    bf_jw_uint(w, "release_blocked", o->release_blocked);
    bf_jw_uint(w, "not_owned_listed_total", o->not_owned);
    bf_jw_uint(w, "released_total", o->released);
    bf_jw_uint(w, "transferred_out_total", o->transferred_out);
    bf_jw_uint(w, "transferred_in_total", o->transferred_in);
    bf_jw_uint(w, "speculative_out_total", o->speculative_out);
    bf_jw_uint(w, "speculative_in_total", o->speculative_in);
    bf_jw_uint(w, "cross_shard_drains_total", o->drained);
    bf_jw_uint(w, "reservations_expired_total", o->expired);
    bf_jw_uint(w, "store_errors_total", o->store_errors);
    bf_jw_bool(w, "consistent", o->consistent);
    bf_jw_arr(w, "assigned_domains");
    for (uint32_t i = 0; i < o->n_pub_domains; i++)
        bf_jw_str(w, NULL, o->domains[i]);
    bf_jw_arr_end(w);
    bf_jw_arr(w, "reservations");
    for (uint32_t i = 0; i < o->n_pub_reservations; i++) {
        const struct bf_own_reservation *r = &o->reservations[i];
        uint32_t l = 0;
        const char *id = r->id_ref ? insp_str(&c->shm, r->id_ref, &l) : NULL;
        bf_jw_obj(w, NULL);
        if (id)
            bf_jw_strn(w, "machine", id, l);
        else
            bf_jw_null(w, "machine");
        bf_jw_int(w, "preemptor_priority", r->preemptor_priority);
        bf_jw_int(w, "since_unix_nanos", r->since_ns);
        bf_jw_int(w, "until_unix_nanos", r->until_ns);
        bf_jw_obj_end(w);
    }
    bf_jw_arr_end(w);
    bf_jw_obj(w, "instructions");
    for (int k = 1; k < BF_OWN_KINDS; k++) {
        bf_jw_obj(w, own_kind_names[k]);
        for (int x = 1; x < BF_OWN_OUTCOMES; x++)
            bf_jw_uint(w, own_outcome_names[x], o->instructions[k][x]);
        bf_jw_obj_end(w);
    }
    bf_jw_obj_end(w);
    bf_jw_obj_end(w);
}

static void own_text(struct insp_ctx *c, struct bf_strbuf *b, const struct insp_own *o,
                     uint32_t max_rows)
{
    bf_sb_printf(b,
                 "\nOWNERSHIP  mode %s  owned %llu  domains %u  transfers in %llu / out %llu  "
                 "reserved %u  held %u  release-blocked %llu  generation %llu\n",
                 own_mode_name(o->mode), (unsigned long long)o->owned, o->n_domains,
                 (unsigned long long)o->n_in, (unsigned long long)o->n_out, o->n_reserved,
                 o->n_held, (unsigned long long)o->release_blocked,
                 (unsigned long long)o->generation);
    if (o->n_pub_domains) {
        bf_sb_puts(b, "  domains:");
        for (uint32_t i = 0; i < o->n_pub_domains && i < max_rows; i++)
            bf_sb_printf(b, " %s", o->domains[i]);
        if (o->n_domains > o->n_pub_domains || o->n_pub_domains > max_rows)
            bf_sb_puts(b, " ...");
        bf_sb_puts(b, "\n");
    }
    if (o->n_pub_reservations) {
        bf_sb_printf(b, "  %-36s %10s %-26s %s\n", "RESERVED FOR TRANSFER", "PREEMPTOR", "UNTIL",
                     "LEFT");
        for (uint32_t i = 0; i < o->n_pub_reservations && i < max_rows; i++) {
            const struct bf_own_reservation *r = &o->reservations[i];
            uint32_t l = 0;
            const char *id = r->id_ref ? insp_str(&c->shm, r->id_ref, &l) : NULL;
            char t[48], left[32];
            insp_fmt_time(t, sizeof t, r->until_ns);
            if (r->until_ns > c->now_ns)
                insp_fmt_age(left, sizeof left, r->until_ns - c->now_ns);
            else
                snprintf(left, sizeof left, "expired");
            bf_sb_printf(b, "  %-36.*s %10d %-26s %s\n", id ? (int)(l < 36 ? l : 36) : 1,
                         id ? id : "?", r->preemptor_priority, t, left);
        }
        if (o->n_reserved > o->n_pub_reservations || o->n_pub_reservations > max_rows)
            bf_sb_printf(b, "  ... %u reserved in all\n", o->n_reserved);
    }
    uint64_t any = 0;
    for (int k = 1; k < BF_OWN_KINDS; k++)
        for (int x = 1; x < BF_OWN_OUTCOMES; x++)
            any += o->instructions[k][x];
    if (any) {
        bf_sb_puts(b, "  instructions (accepted/stale/invalid/failed):");
        for (int k = 1; k < BF_OWN_KINDS; k++)
            bf_sb_printf(b, "  %s %llu/%llu/%llu/%llu", own_kind_names[k],
                         (unsigned long long)o->instructions[k][1],
                         (unsigned long long)o->instructions[k][2],
                         (unsigned long long)o->instructions[k][3],
                         (unsigned long long)o->instructions[k][4]);
        bf_sb_puts(b, "\n");
    }
    bf_sb_printf(b,
                 "  machines: transferred out %llu, in %llu; speculative out %llu, in %llu; "
                 "cross-shard drains %llu; reservations expired %llu; not adopted (another "
                 "shard's) %llu; released %llu\n",
                 (unsigned long long)o->transferred_out, (unsigned long long)o->transferred_in,
                 (unsigned long long)o->speculative_out, (unsigned long long)o->speculative_in,
                 (unsigned long long)o->drained, (unsigned long long)o->expired,
                 (unsigned long long)o->not_owned, (unsigned long long)o->released);
}

static int render_ownership(struct insp_ctx *c, struct bf_strbuf *b)
{
    struct insp_own *o = malloc(sizeof *o);
    if (!o)
        return -ENOMEM;
    insp_own_read(&c->shm, o);
    if (c->o->json) {
        struct bf_jw w;
        bf_jw_init(&w, b);
        bf_jw_obj(&w, NULL);
        bf_jw_str(&w, "shard_id", c->shm.shard_id);
        own_json(c, &w, o);
        bf_jw_obj_end(&w);
        bf_sb_puts(b, "\n");
    } else {
        own_text(c, b, o, c->o->watch ? 16 : BF_OWN_PUB_RESERVATIONS);
    }
    free(o);
    return 0;
}

/* ------------------------------------------------------------ summary */

struct stz_row {
    uint8_t st;
    uint16_t ty, zo;
    uint32_t n;
};

static int stz_cmp(const void *a, const void *b)
{
    const struct stz_row *x = a, *y = b;
    if (x->st != y->st)
        return x->st - y->st;
    if (x->n != y->n)
        return x->n > y->n ? -1 : 1;
    if (x->ty != y->ty)
        return x->ty - y->ty;
    return x->zo - y->zo;
}

static struct stz_row *stz_rows(const struct insp_scan *sc, size_t *n)
{
    size_t k = 0;
    for (int st = 0; st < BF_STATE_COUNT; st++)
        for (int ty = 0; ty < BF_MAX_TYPES; ty++)
            for (int zo = 0; zo < BF_MAX_ZONES; zo++)
                if (sc->by_stz[st][ty][zo])
                    k++;
    struct stz_row *v = calloc(k ? k : 1, sizeof *v);
    if (!v) {
        *n = 0;
        return NULL;
    }
    k = 0;
    for (int st = 0; st < BF_STATE_COUNT; st++)
        for (int ty = 0; ty < BF_MAX_TYPES; ty++)
            for (int zo = 0; zo < BF_MAX_ZONES; zo++)
                if (sc->by_stz[st][ty][zo])
                    v[k++] = (struct stz_row){(uint8_t)st, (uint16_t)ty, (uint16_t)zo,
                                              sc->by_stz[st][ty][zo]};
    qsort(v, k, sizeof *v, stz_cmp);
    *n = k;
    return v;
}

static int render_summary(struct insp_ctx *c, struct bf_strbuf *b)
{
    const struct bf_shm *s = &c->shm;
    struct insp_scan *sc = malloc(sizeof *sc);
    struct insp_cycle *cy = calloc(1, sizeof *cy);
    if (!sc || !cy) {
        free(sc);
        free(cy);
        return -ENOMEM;
    }
    insp_scan(s, sc);
    insp_cycle_read(s, cy, false);
    struct insp_own *own = malloc(sizeof *own);
    if (!own) {
        free(sc);
        free(cy);
        return -ENOMEM;
    }
    insp_own_read(s, own);
    struct insp_cluster *cl = NULL;
    int ncl = insp_clusters(s, &cl);
    if (ncl < 0)
        ncl = 0;
    uint32_t connected = 0, first = 0, quarantined = 0, busy_cl = 0;
    uint64_t need_rows = 0;
    for (int i = 0; i < ncl; i++) {
        if (cl[i].busy) {
            busy_cl++;
            continue;
        }
        connected += cl[i].r.connected != 0;
        first += cl[i].r.first_rollup != 0;
        quarantined += cl[i].r.quarantine_held != 0;
        need_rows += cl[i].r.rows_count;
    }
    size_t nrows = 0;
    struct stz_row *rows = stz_rows(sc, &nrows);
    const struct bf_state_main *st = s->st;
    const struct bf_cycle_result *r = &cy->r;
    uint64_t actions_depth = bf_ring_depth(s, BF_RING_ACTIONS);
    int64_t exec_inflight = BF_STAT_GET(st->executor.inflight);

    if (c->o->json) {
        struct bf_jw w;
        bf_jw_init(&w, b);
        bf_jw_obj(&w, NULL);
        shard_json(c, &w);
        bf_jw_obj(&w, "machines");
        bf_jw_uint(&w, "total", sc->total);
        bf_jw_uint(&w, "slots_used", sc->hwm);
        bf_jw_uint(&w, "capacity", s->max_machines);
        bf_jw_uint(&w, "busy", sc->busy);
        bf_jw_uint(&w, "bound", sc->bound);
        bf_jw_uint(&w, "needs_refresh", sc->needs_refresh);
        bf_jw_uint(&w, "rejected", sc->rejected);
        bf_jw_double(&w, "scan_ms", (double)sc->scan_ns / 1e6);
        bf_jw_obj(&w, "by_state");
        for (int i = 1; i < BF_STATE_COUNT; i++)
            bf_jw_uint(&w, bf_state_name(i), sc->by_state[i]);
        if (sc->by_state[0])
            bf_jw_uint(&w, "Unspecified", sc->by_state[0]);
        bf_jw_obj_end(&w);
        bf_jw_obj(&w, "by_capacity_type");
        for (int i = 0; i < BF_CT_COUNT; i++)
            if (sc->by_ct[i] || i)
                bf_jw_uint(&w, bf_capacity_type_name(i), sc->by_ct[i]);
        bf_jw_obj_end(&w);
        bf_jw_arr(&w, "by_state_type_zone");
        for (size_t i = 0; i < nrows; i++) {
            bf_jw_obj(&w, NULL);
            bf_jw_str(&w, "state", bf_state_name(rows[i].st));
            bf_jw_str(&w, "type", type_name(s, rows[i].ty));
            bf_jw_str(&w, "zone", bf_zone_name(s, rows[i].zo));
            bf_jw_uint(&w, "count", rows[i].n);
            bf_jw_obj_end(&w);
        }
        bf_jw_arr_end(&w);
        bf_jw_obj_end(&w);
        bf_jw_obj(&w, "in_flight");
        bf_jw_uint(&w, "pending", sc->in_flight);
        bf_jw_uint(&w, "actions_ring_depth", actions_depth);
        bf_jw_int(&w, "executor_inflight", exec_inflight);
        bf_jw_uint(&w, "action_serial", BF_STAT_GET(st->action_serial));
        bf_jw_obj_end(&w);
        bf_jw_obj(&w, "clusters");
        bf_jw_uint(&w, "total", (uint64_t)ncl);
        bf_jw_uint(&w, "connected", connected);
        bf_jw_uint(&w, "first_rollup", first);
        bf_jw_uint(&w, "quarantined", quarantined);
        bf_jw_uint(&w, "busy", busy_cl);
        bf_jw_arr(&w, "rows");
        for (int i = 0; i < ncl; i++)
            cluster_json(c, &w, &cl[i]);
        bf_jw_arr_end(&w);
        bf_jw_obj_end(&w);
        bf_jw_obj(&w, "needs");
        bf_jw_uint(&w, "total", need_rows);
        bf_jw_uint(&w, "arena_rows_used", BF_STAT_GET(s->needs->rows_used));
        bf_jw_uint(&w, "change_counter", BF_STAT_GET(s->needs->change_counter));
        bf_jw_obj_end(&w);
        bf_jw_obj(&w, "last_cycle");
        bf_jw_uint(&w, "cycle", r->cycle);
        bf_jw_bool(&w, "consistent", cy->consistent);
        bf_jw_uint(&w, "cycles_run", BF_STAT_GET(st->cycle.cycles));
        bf_jw_int(&w, "computed_at_unix_nanos", r->computed_at_ns);
        bf_jw_int(&w, "cycle_ns", r->cycle_ns);
        bf_jw_uint(&w, "verdicts", r->n_verdicts);
        bf_jw_uint(&w, "unsatisfied", r->unsatisfied);
        bf_jw_uint(&w, "shortfalls", r->n_shortfalls);
        bf_jw_uint(&w, "shortfalls_total", r->shortfalls_total);
        bf_jw_uint(&w, "actions", r->actions);
        bf_jw_obj(&w, "phase_ns");
        for (int i = 0; i < BF_PHASE_COUNT; i++)
            bf_jw_int(&w, bf_phase_label(i), r->phase_ns[i]);
        bf_jw_obj_end(&w);
        bf_jw_obj(&w, "counts");
        bf_jw_uint(&w, "total_machines", r->counts.total_machines);
        bf_jw_uint(&w, "total_needs", r->counts.total_needs);
        bf_jw_obj(&w, "by_state");
        for (int i = 1; i < BF_STATE_COUNT; i++)
            bf_jw_uint(&w, bf_state_name(i), r->counts.by_state[i]);
        bf_jw_obj_end(&w);
        bf_jw_obj_end(&w);
        bf_jw_obj_end(&w);
        own_json(c, &w, own);
        rings_json(c, &w);
        procs_json(c, &w);
        bf_jw_obj_end(&w);
        bf_sb_puts(b, "\n");
    } else {
        shard_text(c, b);
        bf_sb_printf(b,
                     "\nMACHINES  %u  (slots used %u of %u; bound %u; busy %u; needs refresh %u; "
                     "rejected %u)  scan %.1f ms\n",
                     sc->total, sc->hwm, s->max_machines, sc->bound, sc->busy, sc->needs_refresh,
                     sc->rejected, (double)sc->scan_ns / 1e6);
        bf_sb_puts(b, "  by state:");
        for (int i = 1; i < BF_STATE_COUNT; i++)
            bf_sb_printf(b, "  %s %u", bf_state_name(i), sc->by_state[i]);
        if (sc->by_state[0])
            bf_sb_printf(b, "  Unspecified %u", sc->by_state[0]);
        bf_sb_puts(b, "\n  by capacity type:");
        for (int i = 0; i < BF_CT_COUNT; i++)
            if (sc->by_ct[i])
                bf_sb_printf(b, "  %s %u", bf_capacity_type_name(i), sc->by_ct[i]);
        bf_sb_printf(b, "\n  %-12s %-28s %-20s %8s\n", "STATE", "TYPE", "ZONE", "COUNT");
        size_t max_rows = c->o->watch ? 16 : 64;
        for (size_t i = 0; i < nrows && i < max_rows; i++)
            bf_sb_printf(b, "  %-12s %-28s %-20s %8u\n", bf_state_name(rows[i].st),
                         dash(type_name(s, rows[i].ty)), dash(bf_zone_name(s, rows[i].zo)),
                         rows[i].n);
        if (nrows > max_rows)
            bf_sb_printf(b, "  ... %zu more rows (--json has all)\n", nrows - max_rows);
        if (r->cycle) {
            bool same = r->counts.total_machines == sc->total;
            for (int i = 0; i < BF_STATE_COUNT && same; i++)
                same = r->counts.by_state[i] == sc->by_state[i];
            bf_sb_printf(b, "  published by cycle %llu: %u machines%s\n",
                         (unsigned long long)r->cycle, r->counts.total_machines,
                         same ? " (same as the scan)" : " (the inventory changed since)");
        }
        bf_sb_printf(b,
                     "\nIN FLIGHT  %u machines with a pending action; actions ring depth %llu; "
                     "executor in flight %lld\n",
                     sc->in_flight, (unsigned long long)actions_depth, (long long)exec_inflight);
        bf_sb_printf(b, "\nCLUSTERS  %d  (connected %u, first rollup %u, quarantined %u%s)\n", ncl,
                     connected, first, quarantined, busy_cl ? ", some rows busy" : "");
        if (ncl)
            clusters_text(c, b, cl, ncl, c->o->watch ? 8 : 32);
        bf_sb_printf(b, "\nNEEDS  %llu rows across %d clusters (arena rows in use %u)\n",
                     (unsigned long long)need_rows, ncl, BF_STAT_GET(s->needs->rows_used));
        if (r->cycle) {
            char t[48], age[32], dur[32];
            insp_fmt_time(t, sizeof t, r->computed_at_ns);
            insp_fmt_age(age, sizeof age, insp_age_ns(c->now_ns, r->computed_at_ns));
            ms_str(dur, sizeof dur, (double)r->cycle_ns);
            bf_sb_printf(b,
                         "\nLAST CYCLE  #%llu at %s (%s ago) took %s: %u verdicts, %u unsatisfied, "
                         "%u shortfalls (ledger %u), %u actions; %llu cycles run\n",
                         (unsigned long long)r->cycle, t, age, dur, r->n_verdicts, r->unsatisfied,
                         r->n_shortfalls, r->shortfalls_total, r->actions,
                         (unsigned long long)BF_STAT_GET(st->cycle.cycles));
        } else {
            bf_sb_puts(b, "\nLAST CYCLE  none yet (no cycle has published results)\n");
        }
        own_text(c, b, own, c->o->watch ? 4 : 8);
        bf_sb_puts(b, "\nRINGS\n");
        rings_text(c, b);
        bf_sb_puts(b, "\nPROCESSES\n");
        procs_text(c, b);
    }
    free(own);
    free(rows);
    free(cl);
    free(sc);
    free(cy);
    return 0;
}

/* ------------------------------------------------------------ machines */

static void flags_text(struct bf_strbuf *b, uint32_t f)
{
    bool any = false;
    static const struct {
        uint32_t bit;
        const char *name;
    } names[] = {{BF_REC_HOST_IS_ID, "host-is-id"},
                 {BF_REC_NEEDS_REFRESH, "needs-refresh"},
                 {BF_REC_REJECTED, "rejected"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (f & names[i].bit) {
            bf_sb_printf(b, "%s%s", any ? "," : "", names[i].name);
            any = true;
        }
    if (!any)
        bf_sb_puts(b, "-");
}

static void flags_json(struct bf_jw *w, uint32_t f)
{
    bf_jw_arr(w, "flags");
    if (f & BF_REC_VALID)
        bf_jw_str(w, NULL, "valid");
    if (f & BF_REC_HOST_IS_ID)
        bf_jw_str(w, NULL, "host-is-id");
    if (f & BF_REC_NEEDS_REFRESH)
        bf_jw_str(w, NULL, "needs-refresh");
    if (f & BF_REC_REJECTED)
        bf_jw_str(w, NULL, "rejected");
    bf_jw_arr_end(w);
}

struct host {
    const char *provider, *ref;
    size_t plen, rlen;
};

static struct host host_of(const struct bf_shm *s, const struct bf_machine_rec *r)
{
    struct host h = {"", "", 0, 0};
    uint32_t l = 0;
    const char *p = insp_str(s, r->host, &l);
    if (p) {
        const char *z = memchr(p, 0, l);
        h.provider = p;
        h.plen = z ? (size_t)(z - p) : l;
        if (z) {
            h.ref = z + 1;
            h.rlen = l - h.plen - 1;
        }
    }
    if (r->flags & BF_REC_HOST_IS_ID) {
        uint32_t il = 0;
        const char *id = insp_str(s, r->id, &il);
        h.ref = id ? id : "";
        h.rlen = id ? il : 0;
    }
    return h;
}

static void str_json(struct bf_jw *w, const struct bf_shm *s, const char *key, uint32_t ref)
{
    uint32_t l;
    const char *p = insp_str(s, ref, &l);
    if (p)
        bf_jw_strn(w, key, p, l);
    else
        bf_jw_null(w, key);
}

static void machine_json(struct insp_ctx *c, struct bf_jw *w, uint32_t slot,
                         const struct bf_machine_rec *r, uint32_t seq, bool full)
{
    const struct bf_shm *s = &c->shm;
    bf_jw_obj(w, full ? "machine" : NULL);
    bf_jw_uint(w, "slot", slot);
    str_json(w, s, "id", r->id);
    bf_jw_str(w, "state", bf_state_name(r->state));
    bf_jw_str(w, "capacity_type", bf_capacity_type_name(r->capacity_type));
    bf_jw_str(w, "instance_type", type_name(s, r->type_idx));
    bf_jw_str(w, "zone", bf_zone_name(s, r->zone_idx));
    str_json(w, s, "cluster", r->cluster);
    struct host h = host_of(s, r);
    bf_jw_obj(w, "host");
    bf_jw_strn(w, "provider", h.provider, h.plen);
    bf_jw_strn(w, "ref", h.ref, h.rlen);
    bf_jw_obj_end(w);
    bf_jw_float(w, "price_per_hour", r->price_per_hour);
    bf_jw_float(w, "interruption_probability", r->interruption_probability);
    bf_jw_int(w, "assigned_priority", r->assigned_priority);
    flags_json(w, r->flags);
    bf_jw_bool(w, "pending", bf_pending(s, slot));
    if (full) {
        bf_jw_uint(w, "seq", seq);
        str_json(w, s, "assigned_fingerprint", r->fingerprint);
        uint32_t gl = 0;
        const char *g = insp_str(s, r->group, &gl);
        bf_jw_strn(w, "assigned_group", g ? g : "", g ? gl : 0);
        struct bf_strbuf tmp = {0};
        insp_base64_put(&tmp, (const uint8_t *)(g ? g : ""), g ? gl : 0);
        bf_jw_strn(w, "assigned_group_base64", tmp.p ? tmp.p : "", tmp.len);
        bf_sb_free(&tmp);
        bf_jw_uint(w, "interruption_penalty_bucket", r->ipb);
        bf_jw_double(w, "interruption_penalty_dollars", bf_bucket_upper_bound(r->ipb));
        bf_jw_uint(w, "reclamation_penalty_bucket", r->rpb);
        bf_jw_double(w, "reclamation_penalty_dollars", bf_bucket_upper_bound(r->rpb));
        str_json(w, s, "last_error", r->last_error);
        int64_t idle = bf_rec_idle_since_unix(s, r);
        bf_jw_int(w, "idle_since_unix", idle);
        bf_jw_uint(w, "flags_raw", r->flags);
        bf_jw_uint(w, "pending_enq", bf_pending_enq_tag(s, slot));
        bf_jw_uint(w, "pending_done", bf_pending_done_tag(s, slot));
        bf_jw_uint(w, "profile_ref", r->profile);
        const struct bf_mprofile *p =
            insp_str(s, r->profile, NULL) ? bf_mprofile_get(c->cache, s, r->profile) : NULL;
        if (!p) {
            bf_jw_null(w, "profile");
        } else {
            bf_jw_obj(w, "profile");
            bf_jw_str(w, "instance_type", p->instance_type);
            bf_jw_str(w, "zone", p->zone);
            bf_jw_str(w, "capacity_type", bf_capacity_type_name(p->capacity_type));
            const struct {
                const char *key;
                uint32_t n;
                const struct bf_kv *kv;
            } maps[] = {{"labels", p->n_labels, p->labels},
                        {"resources", p->n_resources, p->resources},
                        {"allocatable", p->n_allocatable, p->allocatable}};
            for (size_t m = 0; m < 3; m++) {
                bf_jw_obj(w, maps[m].key);
                for (uint32_t i = 0; i < maps[m].n; i++)
                    bf_jw_str(w, maps[m].kv[i].key, maps[m].kv[i].value);
                bf_jw_obj_end(w);
            }
            bf_jw_obj_end(w);
        }
    }
    bf_jw_obj_end(w);
}

static void machine_text_full(struct insp_ctx *c, struct bf_strbuf *b, uint32_t slot,
                              const struct bf_machine_rec *r, uint32_t seq)
{
    const struct bf_shm *s = &c->shm;
#define FIELD(name) bf_sb_printf(b, "  %-28s ", name)
#define STRF(name, ref)                                                                            \
    do {                                                                                           \
        uint32_t l_;                                                                               \
        const char *p_ = insp_str(s, (ref), &l_);                                                  \
        FIELD(name);                                                                               \
        if (p_ && l_)                                                                              \
            insp_ib_bytes_text(b, p_, l_, 0);                                                      \
        else                                                                                       \
            bf_sb_puts(b, p_ ? "-" : "<bad string ref>");                                          \
        bf_sb_puts(b, "\n");                                                                       \
    } while (0)
    STRF("id", r->id);
    FIELD("slot");
    bf_sb_printf(b, "%u (seq %u)\n", slot, seq);
    FIELD("state");
    bf_sb_printf(b, "%s\n", bf_state_name(r->state));
    FIELD("capacity type");
    bf_sb_printf(b, "%s\n", bf_capacity_type_name(r->capacity_type));
    FIELD("instance type / zone");
    bf_sb_printf(b, "%s / %s\n", dash(type_name(s, r->type_idx)),
                 dash(bf_zone_name(s, r->zone_idx)));
    struct host h = host_of(s, r);
    FIELD("host");
    insp_ib_bytes_text(b, h.provider, h.plen, 0);
    bf_sb_puts(b, " / ");
    insp_ib_bytes_text(b, h.ref, h.rlen, 0);
    bf_sb_puts(b, (r->flags & BF_REC_HOST_IS_ID) ? " (ref = machine id)\n" : "\n");
    STRF("cluster", r->cluster);
    STRF("assigned fingerprint", r->fingerprint);
    STRF("assigned group", r->group);
    FIELD("assigned priority");
    bf_sb_printf(b, "%d\n", r->assigned_priority);
    FIELD("penalties (ipb / rpb)");
    char ib[32], rb[32];
    bf_sb_printf(b, "bucket %s / bucket %s\n", bucket_str(ib, sizeof ib, r->ipb),
                 bucket_str(rb, sizeof rb, r->rpb));
    FIELD("price / interruption prob.");
    bf_sb_printf(b, "$%.4f/h / %.4f\n", r->price_per_hour, r->interruption_probability);
    int64_t idle = bf_rec_idle_since_unix(s, r);
    FIELD("idle since");
    if (idle) {
        char t[48], age[32];
        insp_fmt_time(t, sizeof t, insp_sec_to_ns(idle));
        insp_fmt_age(age, sizeof age, insp_age_ns(c->now_ns, insp_sec_to_ns(idle)));
        bf_sb_printf(b, "%s (%s ago)\n", t, age);
    } else {
        bf_sb_puts(b, "-\n");
    }
    STRF("last error", r->last_error);
    FIELD("flags");
    flags_text(b, r->flags);
    bf_sb_printf(b, " (%#x)\n", r->flags);
    FIELD("pending action");
    bf_sb_printf(b, "%s (enq %u, done %u)\n", bf_pending(s, slot) ? "yes" : "no",
                 bf_pending_enq_tag(s, slot), bf_pending_done_tag(s, slot));
    const struct bf_mprofile *p =
        insp_str(s, r->profile, NULL) ? bf_mprofile_get(c->cache, s, r->profile) : NULL;
    FIELD("profile");
    if (!p) {
        bf_sb_printf(b, "<undecodable profile ref %u>\n", r->profile);
        return;
    }
    bf_sb_printf(b, "ref %u: %s / %s / %s\n", r->profile, dash(p->instance_type), dash(p->zone),
                 bf_capacity_type_name(p->capacity_type));
    const struct {
        const char *name;
        uint32_t n;
        const struct bf_kv *kv;
    } maps[] = {{"resources", p->n_resources, p->resources},
                {"allocatable", p->n_allocatable, p->allocatable},
                {"labels", p->n_labels, p->labels}};
    for (size_t m = 0; m < 3; m++) {
        bf_sb_printf(b, "  %s:%s\n", maps[m].name, maps[m].n ? "" : " -");
        for (uint32_t i = 0; i < maps[m].n; i++)
            bf_sb_printf(b, "    %s=%s\n", maps[m].kv[i].key, maps[m].kv[i].value);
    }
#undef STRF
#undef FIELD
}

static int find_type(const struct bf_shm *s, const char *name)
{
    uint32_t n = BF_STAT_GET(s->inv->n_types);
    for (uint32_t i = 0; i < n && i < BF_MAX_TYPES; i++)
        if (strcmp(bf_type_name(s, i), name) == 0)
            return (int)i;
    return -1;
}

static int find_zone(const struct bf_shm *s, const char *name)
{
    uint32_t n = BF_STAT_GET(s->inv->n_zones);
    for (uint32_t i = 0; i < n && i < BF_MAX_ZONES; i++)
        if (strcmp(bf_zone_name(s, i), name) == 0)
            return (int)i;
    return -1;
}

static int render_machines(struct insp_ctx *c, struct bf_strbuf *b)
{
    const struct bf_shm *s = &c->shm;
    const struct insp_opts *o = c->o;
    int64_t limit = o->limit < 0 ? 100 : o->limit;
    uint32_t cref = 0;
    bool nomatch = false;
    if (o->cluster && *o->cluster &&
        bf_str_find(s, o->cluster, (uint32_t)strlen(o->cluster), &cref) != 0)
        nomatch = true;
    int ty = -1, zo = -1;
    if (o->type && (ty = find_type(s, o->type)) < 0)
        nomatch = true;
    if (o->zone && (zo = find_zone(s, o->zone)) < 0)
        nomatch = true;
    uint32_t hwm = bf_inv_hwm(s);
    if (hwm > s->max_machines)
        hwm = s->max_machines;
    uint64_t matched = 0, busy = 0;
    struct bf_jw w;
    if (o->json) {
        bf_jw_init(&w, b);
        bf_jw_obj(&w, NULL);
        bf_jw_str(&w, "shard_id", s->shard_id);
        bf_jw_obj(&w, "filter");
        if (o->state >= 0)
            bf_jw_str(&w, "state", bf_state_name(o->state));
        if (o->cluster)
            bf_jw_str(&w, "cluster", o->cluster);
        if (o->type)
            bf_jw_str(&w, "type", o->type);
        if (o->zone)
            bf_jw_str(&w, "zone", o->zone);
        bf_jw_obj_end(&w);
        bf_jw_arr(&w, "machines");
    } else {
        bf_sb_printf(b, "%8s  %-28s %-12s %-9s %-20s %-12s %-20s %5s %9s %-4s %s\n", "SLOT", "ID",
                     "STATE", "CT", "TYPE", "ZONE", "CLUSTER", "PRIO", "$/H", "PEND", "FLAGS");
    }
    for (uint32_t i = 0; i < hwm && !nomatch; i++) {
        struct bf_machine_rec r;
        if (bf_inv_read_seq(s, i, &r, NULL) != 0) {
            busy++;
            continue;
        }
        if (!(r.flags & BF_REC_VALID))
            continue;
        if (o->state >= 0 && r.state != o->state)
            continue;
        if (o->cluster && *o->cluster && r.cluster != cref)
            continue;
        if (ty >= 0 && r.type_idx != ty)
            continue;
        if (zo >= 0 && r.zone_idx != zo)
            continue;
        matched++;
        if (limit && matched > (uint64_t)limit)
            continue;
        if (o->json) {
            machine_json(c, &w, i, &r, 0, false);
            continue;
        }
        uint32_t l, cl;
        const char *id = insp_str(s, r.id, &l);
        const char *cn = insp_str(s, r.cluster, &cl);
        struct bf_strbuf idb = {0}, cb = {0};
        insp_ib_bytes_text(&idb, id ? id : "?", id ? l : 1, 28);
        if (cn && cl)
            insp_ib_bytes_text(&cb, cn, cl, 20);
        else
            bf_sb_puts(&cb, "-");
        bf_sb_printf(b, "%8u  %-28s %-12s %-9s %-20.20s %-12.12s %-20s %5d %9.4f %-4s ", i, idb.p,
                     bf_state_name(r.state), bf_capacity_type_name(r.capacity_type),
                     dash(type_name(s, r.type_idx)), dash(bf_zone_name(s, r.zone_idx)), cb.p,
                     r.assigned_priority, r.price_per_hour, bf_pending(s, i) ? "yes" : "-");
        flags_text(b, r.flags);
        bf_sb_puts(b, "\n");
        bf_sb_free(&idb);
        bf_sb_free(&cb);
    }
    bool truncated = limit && matched > (uint64_t)limit;
    if (o->json) {
        bf_jw_arr_end(&w);
        bf_jw_uint(&w, "matched", matched);
        bf_jw_int(&w, "limit", limit);
        bf_jw_bool(&w, "truncated", truncated);
        bf_jw_uint(&w, "busy", busy);
        bf_jw_obj_end(&w);
        bf_sb_puts(b, "\n");
    } else {
        bf_sb_printf(b, "%llu machines matched", (unsigned long long)matched);
        if (truncated)
            bf_sb_printf(b, ", %lld shown (--limit N, 0 = all)", (long long)limit);
        if (busy)
            bf_sb_printf(b, "; %llu records busy (a writer held them)", (unsigned long long)busy);
        if (nomatch)
            bf_sb_puts(b, " (a filter names a cluster, type or zone the shard does not know)");
        bf_sb_puts(b, "\n");
    }
    return 0;
}

static int render_machine(struct insp_ctx *c, struct bf_strbuf *b, char *err, size_t errlen)
{
    const struct bf_shm *s = &c->shm;
    const struct insp_opts *o = c->o;
    uint32_t hwm = bf_inv_hwm(s);
    if (hwm > s->max_machines)
        hwm = s->max_machines;
    int64_t slot = -1;
    struct bf_machine_rec r;
    uint32_t seq = 0;
    if (o->slot >= 0) {
        if (o->slot >= hwm) {
            snprintf(err, errlen, "slot %lld is not in use (slots used: %u)", (long long)o->slot,
                     hwm);
            return 1;
        }
        slot = o->slot;
        if (bf_inv_read_seq(s, (uint32_t)slot, &r, &seq) != 0) {
            snprintf(err, errlen, "machine record in slot %lld is busy (a writer holds it)",
                     (long long)slot);
            return 1;
        }
        if (!(r.flags & BF_REC_VALID)) {
            snprintf(err, errlen, "slot %lld is free", (long long)slot);
            return 1;
        }
    } else {
        uint32_t ref;
        size_t idl = strlen(o->machine_id);
        if (bf_str_find(s, o->machine_id, (uint32_t)idl, &ref) != 0) {
            snprintf(err, errlen, "no machine %s in shard %s", o->machine_id, s->shard_id);
            return 1;
        }
        /* a scan (the id index hash is private to src/shm; 500K records
         * take a few ms) */
        bool busy = false;
        for (uint32_t i = 0; i < hwm; i++) {
            struct bf_machine_rec t;
            uint32_t sq;
            if (bf_inv_read_seq(s, i, &t, &sq) != 0) {
                if (bf_inv_peek_id(s, i) == ref)
                    busy = true;
                continue;
            }
            if ((t.flags & BF_REC_VALID) && t.id == ref) {
                slot = i;
                r = t;
                seq = sq;
                break;
            }
        }
        if (slot < 0) {
            snprintf(err, errlen,
                     busy ? "machine %s is busy (a writer holds its record)"
                          : "no machine %s in shard %s",
                     o->machine_id, s->shard_id);
            return 1;
        }
    }
    if (o->json) {
        struct bf_jw w;
        bf_jw_init(&w, b);
        bf_jw_obj(&w, NULL);
        bf_jw_str(&w, "shard_id", s->shard_id);
        machine_json(c, &w, (uint32_t)slot, &r, seq, true);
        bf_jw_obj_end(&w);
        bf_sb_puts(b, "\n");
    } else {
        machine_text_full(c, b, (uint32_t)slot, &r, seq);
    }
    return 0;
}

/* ------------------------------------------------------------ clusters cmd */

static int render_clusters(struct insp_ctx *c, struct bf_strbuf *b)
{
    struct insp_cluster *cl = NULL;
    int n = insp_clusters(&c->shm, &cl);
    if (n < 0)
        return n;
    if (c->o->json) {
        struct bf_jw w;
        bf_jw_init(&w, b);
        bf_jw_obj(&w, NULL);
        bf_jw_str(&w, "shard_id", c->shm.shard_id);
        bf_jw_arr(&w, "clusters");
        for (int i = 0; i < n; i++)
            cluster_json(c, &w, &cl[i]);
        bf_jw_arr_end(&w);
        bf_jw_obj_end(&w);
        bf_sb_puts(b, "\n");
    } else {
        bf_sb_printf(b, "%d clusters\n", n);
        clusters_text(c, b, cl, n, 0);
    }
    free(cl);
    return 0;
}

/* ------------------------------------------------------------ needs */

static const char *op_name(int op)
{
    static const char *const n[] = {"?", "In", "NotIn", "Exists", "DoesNotExist", "Same"};
    return (op >= 0 && op <= BF_OP_MAX) ? n[op] : "?";
}

static const char *when_name(int w)
{
    static const char *const n[] = {"Unspecified", "DoNotSchedule", "ScheduleAnyway"};
    return (w >= 0 && w <= 2) ? n[w] : "?";
}

static void res_json(struct bf_jw *w, const char *key, const struct insp_res *r)
{
    bf_jw_obj(w, key);
    for (uint32_t i = 0; i < r->n; i++)
        bf_jw_str(w, r->kv[i].key, r->kv[i].value);
    bf_jw_obj_end(w);
}

static void res_text(struct bf_strbuf *b, const struct insp_res *r)
{
    if (!r->n) {
        bf_sb_puts(b, "-");
        return;
    }
    for (uint32_t i = 0; i < r->n; i++)
        bf_sb_printf(b, "%s%s=%s", i ? " " : "", r->kv[i].key, r->kv[i].value);
}

static const char *reason_json(int r)
{
    static const char *const n[] = {"UNMET_REASON_UNSPECIFIED", "UNMET_REASON_PRIORITY_STARVED",
                                    "UNMET_REASON_NO_MATCHING_SUPPLY",
                                    "UNMET_REASON_TOPOLOGY_UNSATISFIABLE",
                                    "UNMET_REASON_PREEMPTION_EXHAUSTED"};
    return (r >= 0 && r <= 4) ? n[r] : "UNMET_REASON_UNKNOWN";
}

static void nv_json(struct bf_jw *w, const struct insp_nv *v, bool remote)
{
    bf_jw_obj(w, NULL);
    bf_jw_obj(w, "need");
    bf_jw_arr(w, "requirements");
    for (uint32_t i = 0; i < v->n_reqs; i++) {
        bf_jw_obj(w, NULL);
        bf_jw_str(w, "key", v->reqs[i].key);
        bf_jw_str(w, "operator", op_name(v->reqs[i].op));
        bf_jw_arr(w, "values");
        for (uint32_t k = 0; k < v->reqs[i].n_values; k++)
            bf_jw_str(w, NULL, v->reqs[i].values[k]);
        bf_jw_arr_end(w);
        bf_jw_obj_end(w);
    }
    bf_jw_arr_end(w);
    res_json(w, "aggregate_resources", &v->aggregate);
    bf_jw_int(w, "priority", v->priority);
    bf_jw_arr(w, "spread");
    for (uint32_t i = 0; i < v->n_spread; i++) {
        bf_jw_obj(w, NULL);
        bf_jw_str(w, "topology_key", v->spread[i].topology_key);
        bf_jw_int(w, "max_skew", v->spread[i].max_skew);
        bf_jw_str(w, "when_unsatisfiable", when_name(v->spread[i].when));
        bf_jw_obj_end(w);
    }
    bf_jw_arr_end(w);
    bf_jw_int(w, "interruption_penalty_bucket", v->ipb);
    bf_jw_int(w, "reclamation_penalty_bucket", v->rpb);
    res_json(w, "min_unit", &v->min_unit);
    bf_jw_strn(w, "group", v->group, v->group_len);
    {
        struct bf_strbuf t = {0};
        insp_base64_put(&t, (const uint8_t *)v->group, v->group_len);
        bf_jw_strn(w, "group_base64", t.p ? t.p : "", t.len);
        bf_sb_free(&t);
    }
    bf_jw_obj_end(w);
    bf_jw_strn(w, "cluster_id", v->cluster_id, v->cluster_len);
    bf_jw_int(w, "arrival_unix_nanos", v->arrival_ns);
    bf_jw_str(w, "profile_fingerprint", v->fingerprint);
    if (!remote) {
        bf_jw_bool(w, "has_verdict", v->has_verdict);
        bf_jw_bool(w, "in_needs_table", v->in_table);
        bf_jw_bool(w, "folded", v->folded);
        bf_jw_uint(w, "table_rows", v->table_rows);
    }
    if (v->has_verdict) {
        bf_jw_bool(w, "satisfied", v->satisfied);
        res_json(w, "residual_deficit", &v->residual);
        bf_jw_int(w, "claimed_machine_count", v->claimed);
        bf_jw_int(w, "bootstrap_count", v->bootstrap);
        bf_jw_int(w, "provision_count", v->provision);
        bf_jw_str(w, "same_domain", v->same_domain);
        bf_jw_bool(w, "same_satisfiable", v->same_satisfiable);
        bf_jw_bool(w, "acquisition_parked", v->parked);
        bf_jw_int(w, "parked_age_cycles", v->parked_age);
        bf_jw_int(w, "age_cycles_unmet", v->age_unmet);
        bf_jw_str(w, "unmet_reason", reason_json(v->unmet_reason));
        if (v->has_matching) {
            bf_jw_obj(w, "matching_supply");
            bf_jw_int(w, "idle", v->m_idle);
            bf_jw_int(w, "configured", v->m_configured);
            bf_jw_int(w, "speculative", v->m_speculative);
            bf_jw_bool(w, "capped", v->m_capped);
            bf_jw_obj_end(w);
        } else {
            bf_jw_null(w, "matching_supply");
        }
        if (v->has_preemption) {
            bf_jw_obj(w, "preemption");
            bf_jw_int(w, "victims_found", v->victims);
            res_json(w, "capacity_freed", &v->freed);
            bf_jw_obj_end(w);
        } else {
            bf_jw_null(w, "preemption");
        }
        bf_jw_arr(w, "same_candidates");
        for (uint32_t i = 0; i < v->n_cand; i++) {
            bf_jw_obj(w, NULL);
            bf_jw_str(w, "domain", v->cand[i].domain);
            bf_jw_int(w, "coverage_per_mille", v->cand[i].per_mille);
            bf_jw_bool(w, "satisfiable", v->cand[i].satisfiable);
            bf_jw_obj_end(w);
        }
        bf_jw_arr_end(w);
    }
    bf_jw_obj_end(w);
}

static void nv_text(struct bf_strbuf *b, const struct insp_nv *v, uint32_t i, int64_t now_ns)
{
    char t[48], age[32];
    insp_fmt_time(t, sizeof t, v->arrival_ns);
    insp_fmt_age(age, sizeof age, insp_age_ns(now_ns, v->arrival_ns));
    bf_sb_printf(b, "[%u] cluster ", i + 1);
    insp_ib_bytes_text(b, v->cluster_id, v->cluster_len, 0);
    char ib[32], rb[32];
    bf_sb_printf(b, "  priority %d  ipb %s  rpb %s  arrived %s", v->priority,
                 bucket_str(ib, sizeof ib, v->ipb), bucket_str(rb, sizeof rb, v->rpb), t);
    if (v->arrival_ns > 0)
        bf_sb_printf(b, " (%s ago)", age);
    if (v->group_len) {
        bf_sb_puts(b, "  group ");
        insp_ib_bytes_text(b, v->group, v->group_len, 48);
    }
    bf_sb_printf(b, "\n    fingerprint %s\n", v->fingerprint ? v->fingerprint : "-");
    if (v->n_reqs) {
        bf_sb_puts(b, "    requirements");
        for (uint32_t k = 0; k < v->n_reqs; k++) {
            bf_sb_printf(b, " %s %s", v->reqs[k].key, op_name(v->reqs[k].op));
            for (uint32_t j = 0; j < v->reqs[k].n_values; j++)
                bf_sb_printf(b, "%s%s", j ? "," : " ", v->reqs[k].values[j]);
            bf_sb_puts(b, k + 1 < v->n_reqs ? ";" : "\n");
        }
    }
    for (uint32_t k = 0; k < v->n_spread; k++)
        bf_sb_printf(b, "    spread %s maxSkew %d %s\n", v->spread[k].topology_key,
                     v->spread[k].max_skew, when_name(v->spread[k].when));
    bf_sb_puts(b, "    aggregate ");
    res_text(b, &v->aggregate);
    bf_sb_puts(b, "  min unit ");
    res_text(b, &v->min_unit);
    bf_sb_puts(b, "\n");
    if (!v->has_verdict) {
        bf_sb_puts(b, "    verdict: none yet (the row arrived after the last cycle)\n");
        return;
    }
    bf_sb_printf(b, "    verdict: %s  claimed %d (bootstrap %d, provision %d)",
                 v->satisfied ? "SATISFIED" : bf_unmet_reason_name(v->unmet_reason), v->claimed,
                 v->bootstrap, v->provision);
    if (v->folded)
        bf_sb_printf(b, "  [NormalizeDemand folded %u Same-gang row%s into this Need]",
                     v->table_rows, v->table_rows == 1 ? "" : "s");
    else if (!v->in_table && v->cluster_id)
        bf_sb_puts(b, "  [row no longer in the needs table]");
    bf_sb_puts(b, "\n");
    if (!v->satisfied) {
        bf_sb_printf(b, "    residual deficit ");
        res_text(b, &v->residual);
        bf_sb_printf(b, "  unmet for %d cycles", v->age_unmet);
        bf_sb_puts(b, "\n");
    }
    if (v->has_matching)
        bf_sb_printf(b, "    matching supply: idle %d, configured %d, speculative %d%s\n",
                     v->m_idle, v->m_configured, v->m_speculative, v->m_capped ? " (capped)" : "");
    if (v->has_preemption) {
        bf_sb_printf(b, "    preemption: %d victims found, capacity freed ", v->victims);
        res_text(b, &v->freed);
        bf_sb_puts(b, "\n");
    }
    if ((v->same_domain && *v->same_domain) || v->n_cand || v->parked) {
        bf_sb_printf(b, "    same domain %s (%s)", dash(v->same_domain),
                     v->same_satisfiable ? "satisfiable" : "not satisfiable");
        if (v->parked)
            bf_sb_printf(b, "  PARKED for %d cycles", v->parked_age);
        if (v->n_cand) {
            bf_sb_puts(b, "  candidates:");
            for (uint32_t k = 0; k < v->n_cand; k++)
                bf_sb_printf(b, " %s %d.%d%%%s", v->cand[k].domain, v->cand[k].per_mille / 10,
                             v->cand[k].per_mille % 10, v->cand[k].satisfiable ? " ok" : "");
        }
        bf_sb_puts(b, "\n");
    }
}

void insp_render_needs(const struct insp_opts *o, const struct insp_needs *n, const char *source,
                       int64_t now_ns, struct bf_strbuf *b)
{
    if (o->json) {
        struct bf_jw w;
        bf_jw_init(&w, b);
        bf_jw_obj(&w, NULL);
        bf_jw_str(&w, "source", source);
        if (o->cluster)
            bf_jw_str(&w, "cluster_filter", o->cluster);
        bf_jw_obj(&w, "header");
        bf_jw_int(&w, "cycle", n->cycle);
        bf_jw_int(&w, "computed_at_unix_nanos", n->computed_at_ns);
        bf_jw_int(&w, "total_needs", n->total);
        bf_jw_obj_end(&w);
        if (!n->remote) {
            bf_jw_uint(&w, "rows_without_verdict", n->rows_only);
            bf_jw_uint(&w, "rows_folded", n->rows_folded);
            bf_jw_uint(&w, "verdicts_without_row", n->verdicts_only);
            bf_jw_uint(&w, "busy_clusters", n->busy_clusters);
        }
        bf_jw_arr(&w, "needs");
        for (uint32_t i = 0; i < n->n; i++)
            nv_json(&w, &n->v[i], n->remote);
        bf_jw_arr_end(&w);
        bf_jw_obj_end(&w);
        bf_sb_puts(b, "\n");
        return;
    }
    char t[48];
    insp_fmt_time(t, sizeof t, n->computed_at_ns);
    if (n->cycle == 0)
        bf_sb_printf(b, "needs from %s: no cycle result yet (not yet computed, not \"no demand\")",
                     source);
    else
        bf_sb_printf(b, "needs from %s: cycle %lld computed %s", source, (long long)n->cycle, t);
    bf_sb_printf(b, "; %lld needs%s%s", (long long)n->total, o->cluster ? " in cluster " : "",
                 o->cluster ? o->cluster : "");
    if (n->n < n->total)
        bf_sb_printf(b, ", %u shown (--limit)", n->n);
    bf_sb_puts(b, "\n");
    if (!n->remote && (n->rows_only || n->verdicts_only || n->busy_clusters || n->rows_folded))
        bf_sb_printf(b,
                     "  (rows without a verdict yet: %u; verdicts whose row has left the table: "
                     "%u; Same-gang rows folded into plain Needs: %u; busy clusters: %u)\n",
                     n->rows_only, n->verdicts_only, n->rows_folded, n->busy_clusters);
    uint32_t unsat = 0;
    for (uint32_t i = 0; i < n->n; i++)
        unsat += n->v[i].has_verdict && !n->v[i].satisfied;
    if (n->n)
        bf_sb_printf(b, "  %u shown: %u unsatisfied\n", n->n, unsat);
    for (uint32_t i = 0; i < n->n; i++)
        nv_text(b, &n->v[i], i, now_ns);
}

static int render_needs_local(struct insp_ctx *c, struct bf_strbuf *b, char *err, size_t errlen)
{
    struct insp_needs n;
    int64_t limit = c->o->limit < 0 ? 0 : c->o->limit;
    int rc = insp_needs_local(&c->shm, c->cache, c->o->cluster, (uint32_t)limit, &n);
    if (rc == -ENOENT) {
        snprintf(err, errlen, "no cluster %s in shard %s", c->o->cluster, c->shm.shard_id);
        insp_needs_free(&n);
        return 1;
    }
    if (rc) {
        snprintf(err, errlen, "reading needs: %s", strerror(-rc));
        insp_needs_free(&n);
        return 1;
    }
    char src[96];
    snprintf(src, sizeof src, "shm:%s", c->shm.shard_id);
    insp_render_needs(c->o, &n, src, c->now_ns, b);
    insp_needs_free(&n);
    return 0;
}

/* ------------------------------------------------------------ shortfalls */

static int render_shortfalls(struct insp_ctx *c, struct bf_strbuf *b)
{
    const struct bf_shm *s = &c->shm;
    struct insp_cycle *cy = calloc(1, sizeof *cy);
    if (!cy)
        return -ENOMEM;
    insp_cycle_read(s, cy, false);
    const struct bf_cycle_result *r = &cy->r;
    struct insp_arena a = {0};
    struct bf_jw w;
    if (c->o->json) {
        bf_jw_init(&w, b);
        bf_jw_obj(&w, NULL);
        bf_jw_str(&w, "shard_id", s->shard_id);
        bf_jw_uint(&w, "cycle", r->cycle);
        bf_jw_int(&w, "computed_at_unix_nanos", r->computed_at_ns);
        bf_jw_uint(&w, "shortfalls_total", r->shortfalls_total);
        bf_jw_arr(&w, "shortfalls");
    } else {
        if (!r->cycle)
            bf_sb_puts(b, "no cycle result yet\n");
        else
            bf_sb_printf(b, "shortfall ledger of cycle %llu: %u shown of %u (top %d)\n",
                         (unsigned long long)r->cycle, r->n_shortfalls, r->shortfalls_total,
                         BF_SHORTFALL_MAX);
        if (r->n_shortfalls)
            bf_sb_printf(b, "  %6s %8s %-12s %-32s %s\n", "AGE", "PRIORITY", "IPB", "DEFICIT",
                         "FINGERPRINT");
    }
    for (uint32_t i = 0; i < r->n_shortfalls; i++) {
        const struct bf_shortfall_row *sf = &r->shortfalls[i];
        const struct bf_nprofile *np = insp_str(s, sf->need_profile_ref, NULL)
                                           ? bf_nprofile_get(c->cache, s, sf->need_profile_ref)
                                           : NULL;
        struct insp_res d;
        insp_vec_res(&c->dims, sf->deficit, &a, &d);
        if (c->o->json) {
            bf_jw_obj(&w, NULL);
            bf_jw_str(&w, "profile_fingerprint", np ? np->fingerprint : "");
            bf_jw_int(&w, "priority", sf->priority);
            bf_jw_int(&w, "age_cycles", sf->age_cycles);
            bf_jw_int(&w, "interruption_penalty_bucket", sf->ipb);
            res_json(&w, "deficit", &d);
            bf_jw_obj_end(&w);
        } else {
            struct bf_strbuf db = {0};
            res_text(&db, &d);
            char ipb[32];
            bucket_str(ipb, sizeof ipb, sf->ipb);
            bf_sb_printf(b, "  %6d %8d %-12s %-32s %s\n", sf->age_cycles, sf->priority, ipb, db.p,
                         np ? np->fingerprint : "<undecodable>");
            bf_sb_free(&db);
        }
    }
    if (c->o->json) {
        bf_jw_arr_end(&w);
        bf_jw_obj_end(&w);
        bf_sb_puts(b, "\n");
    }
    insp_arena_free(&a);
    free(cy);
    return 0;
}

/* ------------------------------------------------------------ histograms */

static void hist_load(struct insp_hist *h, const struct bf_hist *src, double start, double factor,
                      int nb)
{
    for (int i = 0; i < BF_HIST_MAX_BUCKETS; i++)
        h->bucket[i] = BF_STAT_GET(src->bucket[i]);
    h->count = BF_STAT_GET(src->count);
    h->sum_ns = BF_STAT_GET(src->sum_ns);
    h->start = start;
    h->factor = factor;
    h->nb = nb > BF_HIST_MAX_BUCKETS - 1 ? BF_HIST_MAX_BUCKETS - 1 : nb;
}

static void hist_json(struct bf_jw *w, const char *name, const struct insp_hist *h)
{
    bf_jw_obj(w, NULL);
    bf_jw_str(w, "name", name);
    bf_jw_uint(w, "count", h->count);
    bf_jw_double(w, "sum_seconds", (double)h->sum_ns / 1e9);
    bf_jw_double(w, "mean_seconds", h->count ? (double)h->sum_ns / 1e9 / (double)h->count : NAN);
    bf_jw_double(w, "p50_seconds", insp_hist_quantile(h, 0.5));
    bf_jw_double(w, "p90_seconds", insp_hist_quantile(h, 0.9));
    bf_jw_double(w, "p99_seconds", insp_hist_quantile(h, 0.99));
    bf_jw_arr(w, "buckets");
    for (int i = 0; i <= h->nb; i++) {
        bf_jw_obj(w, NULL);
        double le = insp_hist_bound(h, i);
        if (isinf(le))
            bf_jw_str(w, "le", "+Inf");
        else
            bf_jw_double(w, "le", le);
        bf_jw_uint(w, "count", h->bucket[i]);
        bf_jw_obj_end(w);
    }
    bf_jw_arr_end(w);
    bf_jw_obj_end(w);
}

static void hist_line(struct bf_strbuf *b, const char *name, const struct insp_hist *h,
                      int64_t last_ns)
{
    char mean[32], p50[32], p90[32], p99[32], last[32];
    ms_str(mean, sizeof mean, h->count ? (double)h->sum_ns / (double)h->count : NAN);
    ms_str(p50, sizeof p50, insp_hist_quantile(h, 0.5) * 1e9);
    ms_str(p90, sizeof p90, insp_hist_quantile(h, 0.9) * 1e9);
    ms_str(p99, sizeof p99, insp_hist_quantile(h, 0.99) * 1e9);
    ms_str(last, sizeof last, last_ns >= 0 ? (double)last_ns : NAN);
    bf_sb_printf(b, "  %-22s %10llu %9s %9s %9s %9s %9s\n", name, (unsigned long long)h->count,
                 mean, p50, p90, p99, last);
}

static void hist_bars(struct bf_strbuf *b, const struct insp_hist *h)
{
    uint64_t max = 0;
    for (int i = 0; i <= h->nb; i++)
        if (h->bucket[i] > max)
            max = h->bucket[i];
    for (int i = 0; i <= h->nb; i++) {
        double le = insp_hist_bound(h, i);
        char ls[32];
        if (isinf(le))
            snprintf(ls, sizeof ls, "+Inf");
        else
            ms_str(ls, sizeof ls, le * 1e9);
        int bar = max ? (int)(40.0 * (double)h->bucket[i] / (double)max + 0.5) : 0;
        bf_sb_printf(b, "    le %-8s %10llu  ", ls, (unsigned long long)h->bucket[i]);
        for (int k = 0; k < bar; k++)
            bf_sb_put(b, "#", 1);
        bf_sb_puts(b, "\n");
    }
}

static int render_histogram(struct insp_ctx *c, struct bf_strbuf *b)
{
    const struct bf_state_main *st = c->shm.st;
    struct insp_hist cyc, ph[BF_PHASE_COUNT];
    hist_load(&cyc, &st->cycle.cycle_duration, 0.001, 2, 14);
    for (int i = 0; i < BF_PHASE_COUNT; i++)
        hist_load(&ph[i], &st->cycle.phase_duration[i], 0.001, 2, 14);
    struct {
        const char *name;
        struct insp_hist h;
    } other[6];
    int no = 0;
    if (c->o->all) {
        hist_load(&other[no].h, &st->executor.provisioning_latency, 0.01, 2, 20);
        other[no++].name = "provisioning_latency";
        hist_load(&other[no].h, &st->executor.configure_phase, 0.01, 2, 16);
        other[no++].name = "configure_phase";
        hist_load(&other[no].h, &st->executor.request_bootstrap, 0.01, 2, 16);
        other[no++].name = "request_bootstrap";
        hist_load(&other[no].h, &st->executor.drain_phase, 0.01, 2, 16);
        other[no++].name = "drain_phase";
        hist_load(&other[no].h, &st->reconciler.reconcile_duration, 0.001, 2, 14);
        other[no++].name = "reconcile_duration";
        hist_load(&other[no].h, &st->session.rollup_ingest, 0.0001, 2, 20);
        other[no++].name = "rollup_ingest";
    }
    struct insp_cycle *cy = calloc(1, sizeof *cy);
    if (!cy)
        return -ENOMEM;
    insp_cycle_read(&c->shm, cy, false);
    if (c->o->json) {
        struct bf_jw w;
        bf_jw_init(&w, b);
        bf_jw_obj(&w, NULL);
        bf_jw_str(&w, "shard_id", c->shm.shard_id);
        bf_jw_uint(&w, "cycles", BF_STAT_GET(st->cycle.cycles));
        bf_jw_uint(&w, "last_cycle", cy->r.cycle);
        bf_jw_int(&w, "last_cycle_ns", cy->r.cycle_ns);
        bf_jw_arr(&w, "histograms");
        hist_json(&w, "cycle_duration", &cyc);
        for (int i = 0; i < BF_PHASE_COUNT; i++) {
            char nm[48];
            snprintf(nm, sizeof nm, "phase_duration.%s", bf_phase_label(i));
            hist_json(&w, nm, &ph[i]);
        }
        for (int i = 0; i < no; i++)
            hist_json(&w, other[i].name, &other[i].h);
        bf_jw_arr_end(&w);
        bf_jw_obj_end(&w);
        bf_sb_puts(b, "\n");
    } else {
        bf_sb_printf(b, "cycle latency: %llu cycles run; last cycle #%llu\n",
                     (unsigned long long)BF_STAT_GET(st->cycle.cycles),
                     (unsigned long long)cy->r.cycle);
        bf_sb_printf(b, "  %-22s %10s %9s %9s %9s %9s %9s\n", "HISTOGRAM", "COUNT", "MEAN", "P50",
                     "P90", "P99", "LAST");
        hist_line(b, "cycle", &cyc, cy->r.cycle ? cy->r.cycle_ns : -1);
        for (int i = 0; i < BF_PHASE_COUNT; i++) {
            char nm[48];
            snprintf(nm, sizeof nm, "  %s", bf_phase_label(i));
            hist_line(b, nm, &ph[i], cy->r.cycle ? cy->r.phase_ns[i] : -1);
        }
        for (int i = 0; i < no; i++)
            hist_line(b, other[i].name, &other[i].h, -1);
        bf_sb_puts(b, "\n  cycle duration buckets (exp(1ms, x2, 14)):\n");
        hist_bars(b, &cyc);
    }
    free(cy);
    return 0;
}

/* ------------------------------------------------------------ dispatch */

int insp_render(struct insp_ctx *c, struct bf_strbuf *b, char *err, size_t errlen)
{
    bf_shm_dims(&c->shm, &c->dims);
    int rc = 0;
    switch (c->o->cmd) {
    case CMD_SUMMARY:
        rc = render_summary(c, b);
        break;
    case CMD_MACHINES:
        rc = render_machines(c, b);
        break;
    case CMD_MACHINE:
        return render_machine(c, b, err, errlen);
    case CMD_CLUSTERS:
        rc = render_clusters(c, b);
        break;
    case CMD_NEEDS:
        return render_needs_local(c, b, err, errlen);
    case CMD_SHORTFALLS:
        rc = render_shortfalls(c, b);
        break;
    case CMD_RINGS:
    case CMD_PROCS:
        if (c->o->json) {
            struct bf_jw w;
            bf_jw_init(&w, b);
            bf_jw_obj(&w, NULL);
            bf_jw_str(&w, "shard_id", c->shm.shard_id);
            if (c->o->cmd == CMD_RINGS)
                rings_json(c, &w);
            else
                procs_json(c, &w);
            bf_jw_obj_end(&w);
            bf_sb_puts(b, "\n");
        } else if (c->o->cmd == CMD_RINGS) {
            rings_text(c, b);
        } else {
            procs_text(c, b);
        }
        break;
    case CMD_HISTOGRAM:
        rc = render_histogram(c, b);
        break;
    case CMD_OWNERSHIP:
        rc = render_ownership(c, b);
        break;
    default:
        rc = -EINVAL;
    }
    if (rc) {
        snprintf(err, errlen, "%s", strerror(-rc));
        return 1;
    }
    return 0;
}
