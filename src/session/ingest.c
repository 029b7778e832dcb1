/*
 * ingest.c — the rollup lane: one thread that decodes, converts, guards
 * (rail 2) and publishes rollups, so a 50K-Need rollup never delays the
 * event loop (bootstrap responses, acks, node updates). Seed 000 §5
 * "rollup ingest", reference/shard.md §4.2 item 6, §6.3, docs/internals.md
 * "Needs (session -> cycle)".
 *
 * Design notes
 *   - Hand-over: one pending slot per cluster plus a FIFO of clusters with
 *     a pending rollup (round-robin fairness: a cluster that floods large
 *     rollups gets one turn per round like everyone else). A newer rollup
 *     replaces a queued one (full replacement: only the latest matters);
 *     the superseded one is counted and never acked.
 *   - Memory: the buffers of queued + in-process rollups are bounded
 *     (SS_INGEST_BUDGET; a rollup usually arrives as the whole gRPC message
 *     buffer, taken from the net layer without a copy, and is charged at
 *     that buffer's size until this thread frees it: struct ingest_buf in
 *     session_internal.h); a submission beyond it is shed (counted, logged,
 *     no ack — the operator's next rollup, ~10 s later, is the retry). One
 *     cluster holds at most two rollups (one queued, one in process), i.e.
 *     at most 512 MiB with 256 MiB messages: one misbehaving cluster cannot
 *     exhaust the budget alone.
 *   - Publishing (the only writer of need rows and stamps): rows go into a
 *     free arena extent, then the cluster row is published with the new
 *     extent and generation + 1 (bf_cluster_write), then the old extent is
 *     freed, needs->rows_used and change_counter move, stamps are touched
 *     for the accepted fingerprints (first-seen kept) and pruned for the
 *     replaced rows' fingerprints the rollup no longer carries (Go's
 *     observeRolledUpDemand), and the cycle is woken. A held (rail 2)
 *     rollup publishes only its counters and the first-rollup gate.
 *   - A rollup that repeats the cluster's last accepted one (same digest,
 *     same published rows and limits: struct repeat_memo) is republished on
 *     the same extent with generation + 1 and its arrival in the cluster
 *     row (rows_arrival_ns): no row is decoded or copied. Stamps are not
 *     touched again while the fingerprint list is unchanged and no stamp
 *     was observed since the last touch (needs->stamps_observed).
 *     Rejected rollups publish rollups_rejected and leave demand untouched.
 *   - A changed rollup reuses the published rows of the Needs it repeats
 *     byte for byte (bf_rollup_convert_incremental): the memo keeps the
 *     accepted rollup's needs_memo (16 bytes a Need, bounded by the
 *     cluster's Need quota like fp_refs) and is only replaced by the next
 *     accepted rollup, so a rejected one leaves it describing the published
 *     rows.
 *   - The allocator is private to this thread and rebuilt from the
 *     published rows when the thread starts. When no contiguous run is
 *     free but enough rows are, live extents are relocated downwards (copy,
 *     republish the row with the same generation, free the old extent)
 *     until the run fits.
 *   - Completions go to the loop through a queue and an eventfd; the loop
 *     sends the "rollup" Acknowledgement if the sending session still holds
 *     the stream.
 *   - Per-cluster quotas (docs/security.md): Need rows, distinct groups,
 *     string-table bytes (cumulative per cluster while this process runs:
 *     interned strings are never freed) and resource names the cluster
 *     adds to the shard-wide dimension table. A new name is registered only
 *     once the whole rollup converted cleanly and the cluster's quota has
 *     room; then the rollup is converted again with it. The quota counters
 *     live in this thread; the loop reads the totals (atomics) for /metrics.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "bigfleet/blobs.h"
#include "bigfleet/log.h"
#include "bigfleet/util.h"
#include "session_internal.h"

/* A queued or in-process rollup. rb owns the bytes (rb.data/rb.len);
 * `held` of them are charged to ig->bytes until rb is freed. A slot is
 * empty when rb.data is NULL. */
struct job {
    struct ingest_buf rb;
    size_t held;
    uint64_t serial;
    int64_t recv_ns;
};

/* Per cluster: the last accepted rollup, for the unchanged-rollup path
 * (bf_rollup_repeat_meta). Valid while the cluster's published rows are the ones
 * that rollup produced (same name, same generation, same row count) and the
 * limits that shaped them are unchanged. */
#define NEED_MEMO_SLACK 64u /* Needs a memo may hold beyond 2 per row */

struct repeat_memo {
    uint64_t lo, hi;                  /* bf_rollup_digest; hi 0 = none */
    uint32_t name_ref, generation, n; /* fp_refs describe these published rows */
    uint32_t needs_in, merged, priorities_clamped;
    uint64_t unknown_fields;
    uint32_t max_rows, max_groups;
    int32_t max_priority;
    uint32_t *fp_refs; /* n fingerprint refs (malloc'd; capacity fp_cap) */
    uint32_t fp_cap;
    /* the rollup's Needs (needs_in entries; 0 = none kept): what a changed
     * rollup reuses (bf_rollup_convert_incremental). Kept only when
     * needs_in <= 2 x its rows + NEED_MEMO_SLACK, so at most that many
     * entries of 16 bytes: bounded, like fp_refs, by the rows the cluster
     * holds (its Need quota, and --max-needs shard-wide) and freed with the
     * memo */
    struct bf_rollup_need_memo *needs;
    uint32_t n_needs, needs_cap;
    /* every stamp of fp_refs was touched successfully while
     * needs->stamps_observed read stamps_observed: while it has not moved,
     * touching the same fingerprints again changes nothing */
    bool stamps_current;
    uint64_t stamps_observed;
};

struct ingest {
    pthread_t th;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    bool busy;        /* a rollup is in process (the thread's or an inline one) */
    struct job *slot; /* [max_clusters] */
    uint32_t *fifo;   /* ring of cluster indices */
    uint32_t fifo_head, fifo_n, fifo_cap;
    size_t bytes; /* queued + in process */
    struct ingest_done *done;
    int done_n, done_cap;
    int efd;
    /* thread-private */
    struct bf_shm *shm;
    const struct bf_config *cfg;
    struct cluster_tab *ct;
    struct bf_arena arena;
    struct bf_rollup conv;
    uint64_t total_rows;
    int64_t *last_log; /* per cluster: rejection-log token bucket refill time */
    uint8_t *tokens;   /* per cluster: rejection logs allowed now (burst 10, 1/s) */
    uint32_t *suppressed;
    struct bf_need_row *tmp;
    uint32_t tmp_cap;
    bool stamps_full_logged;
    int64_t grow_fail_logged_ns; /* back_rows' error, at most one line per 10 s */
    uint32_t grow_fail_quiet;    /* failures since that line */
    /* per-cluster quotas (thread-private) */
    uint64_t *str_charged; /* string-table bytes added by the cluster's rollups */
    uint8_t *dims_added;   /* resource names the cluster added */
    uint32_t cluster_max_needs;
    uint64_t str_quota;
    struct ingest_counters cnt; /* atomics: read by the loop */
    bool prune_failed_logged;
    struct bf_blob_cache *cache; /* need profiles of replaced rows (stamp pruning) */
    uint32_t *fps;               /* sorted fingerprint refs of the accepted rollup */
    uint32_t fps_cap;
    struct repeat_memo **memo; /* [max_clusters], allocated at a cluster's first accept */
    struct bf_rollup_digest_key key;
};

/* logfmt-safe copy of a message (quotes would break the key=value line) */
static void sanitize(char *s)
{
    for (; *s; s++)
        if (*s == '"' || *s == '\\' || (unsigned char)*s < 0x20)
            *s = '\'';
}

static struct bf_stats_session *stats(struct ingest *ig)
{
    return &ig->shm->st->session;
}

static const char *cluster_name(struct ingest *ig, uint32_t name_ref)
{
    const char *n = bf_str(ig->shm, name_ref, NULL);
    return n ? n : "?";
}

/* ------------------------------------------------------------ outcomes */

static void reject(struct ingest *ig, uint32_t cidx, const struct job *j, int rc, char *err)
{
    struct cluster_tab *ct = ig->ct;
    pthread_mutex_lock(&ct->mu);
    struct bf_cluster_rec *r = &ct->rec[cidx];
    r->rollups_rejected++;
    r->last_rollup_ns = j->recv_ns;
    bf_ctab_publish_locked(ct, cidx);
    uint32_t name_ref = r->name_ref;
    pthread_mutex_unlock(&ct->mu);
    BF_STAT_INC(stats(ig)->rollups_rejected);
    int64_t now = bf_mono_ns();
    int64_t refill = (now - ig->last_log[cidx]) / BF_NS_PER_SEC;
    if (refill > 0) {
        ig->tokens[cidx] =
            (uint8_t)(ig->tokens[cidx] + refill > 10 ? 10 : ig->tokens[cidx] + refill);
        ig->last_log[cidx] = now;
    }
    if (ig->tokens[cidx] > 0) {
        ig->tokens[cidx]--;
        sanitize(err);
        BF_ERROR("rollup rejected; the cluster's last good demand is kept",
                 "cluster=%s bytes=%zu reason=%s error=\"%s\" suppressed_since_last=%u",
                 cluster_name(ig, name_ref), j->rb.len, strerror(-rc), err, ig->suppressed[cidx]);
        ig->suppressed[cidx] = 0;
    } else {
        ig->suppressed[cidx]++;
    }
}

static int rebuild_arena(struct ingest *ig);

static int ensure_tmp(struct ingest *ig, uint32_t n)
{
    if (n <= ig->tmp_cap)
        return 0;
    struct bf_need_row *t = realloc(ig->tmp, (size_t)n * sizeof *t);
    if (!t)
        return -ENOMEM;
    ig->tmp = t;
    ig->tmp_cap = n;
    return 0;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Go's observeRolledUpDemand prunes the first-seen stamps of fingerprints a
 * cluster no longer demands: the fingerprints of the rows being replaced
 * (old_fps when the memo has them, else read from the rows at old_off,
 * old_n, still intact until the extent is released) that the accepted
 * rollup (ig->conv) does not carry lose their stamp. */
static void prune_absent_stamps(struct ingest *ig, uint32_t cluster_ref, uint32_t old_off,
                                uint32_t old_n, const uint32_t *old_fps)
{
    const struct bf_rollup *cv = &ig->conv;
    if (!old_n)
        return;
    if (cv->n > ig->fps_cap) {
        uint32_t *f = realloc(ig->fps, (size_t)cv->n * sizeof *f);
        if (f) {
            ig->fps = f;
            ig->fps_cap = cv->n;
        }
    }
    if (!ig->cache)
        ig->cache = bf_blob_cache_new();
    if (cv->n > ig->fps_cap || !ig->cache || (!old_fps && ensure_tmp(ig, old_n) != 0)) {
        if (!ig->prune_failed_logged)
            BF_ERROR("provisioning-latency stamps of withdrawn demand not pruned (out of memory)",
                     "rows=%u", old_n);
        ig->prune_failed_logged = true;
        return;
    }
    if (cv->n)
        memcpy(ig->fps, cv->fp_refs, (size_t)cv->n * sizeof *ig->fps);
    qsort(ig->fps, cv->n, sizeof *ig->fps, cmp_u32);
    if (!old_fps)
        bf_needs_copy_rows(ig->shm, old_off, old_n, ig->tmp);
    for (uint32_t i = 0; i < old_n; i++) {
        uint32_t fp = 0;
        if (old_fps) {
            fp = old_fps[i];
        } else {
            const struct bf_nprofile *np =
                bf_nprofile_get(ig->cache, ig->shm, ig->tmp[i].profile_ref);
            fp = np ? np->fingerprint_ref : 0;
        }
        if (!fp)
            continue;
        if (!cv->n || !bsearch(&fp, ig->fps, cv->n, sizeof fp, cmp_u32))
            bf_stamp_prune(ig->shm, cluster_ref, fp);
    }
}

/* Backs the rows [off, off + n) in the segment's file before they are
 * written (the arena grows with use); on failure the extent goes back to
 * the allocator and the rollup is rejected (-EFBIG). */
static int back_rows(struct ingest *ig, uint32_t off, uint32_t n)
{
    int rc = bf_needs_rows_reserve(ig->shm, (uint64_t)off + n);
    if (rc == 0)
        return 0;
    bf_arena_release(&ig->arena, off, n);
    int64_t now = bf_mono_ns();
    if (!ig->grow_fail_logged_ns || now - ig->grow_fail_logged_ns >= 10 * BF_NS_PER_SEC) {
        BF_ERROR("the need-row arena could not grow its file (tmpfs full?); rollup rejected, the "
                 "published rows kept",
                 "rows_wanted=%u end=%llu backed=%u error=%d failures_not_logged=%u", n,
                 (unsigned long long)off + n, bf_needs_rows_backed(ig->shm), rc,
                 ig->grow_fail_quiet);
        ig->grow_fail_logged_ns = now;
        ig->grow_fail_quiet = 0;
    } else {
        ig->grow_fail_quiet++;
    }
    return -EFBIG;
}

/* Allocates n rows for cluster `self`, lowest-first (the file backs the
 * arena up to its highest extent in use: about the live rows + one
 * cluster's replacement, i18-needseg stop 33), or, when no free run is long
 * enough, by relocating live extents (self's included) downwards
 * (bf_arena_compact plans, this executes: copy the rows, republish the owner
 * with the same generation). The extent is backed before it is returned:
 * -EFBIG when the file could not grow, -ENOSPC when the arena is full. */
static int alloc_rows(struct ingest *ig, uint32_t self, uint32_t old_off, uint32_t old_n,
                      uint32_t n, uint32_t *off)
{
    (void)old_off;
    (void)old_n;
    if (bf_arena_alloc(&ig->arena, n, off) == 0)
        return back_rows(ig, *off, n);
    if (ig->arena.free_rows < n)
        return -ENOSPC;
    struct cluster_tab *ct = ig->ct;
    pthread_mutex_lock(&ct->mu);
    uint32_t nc = ct->n;
    struct bf_arena_live *l = malloc(((size_t)nc + 1) * sizeof *l);
    struct bf_arena_move *mv = malloc(((size_t)nc + 1) * sizeof *mv);
    uint32_t nl = 0;
    (void)self; /* its extent may move too: process() frees whatever the row says */
    for (uint32_t i = 0; l && i < nc; i++)
        if (ct->rec[i].rows_count)
            l[nl++] = (struct bf_arena_live){i, ct->rec[i].rows_off, ct->rec[i].rows_count};
    pthread_mutex_unlock(&ct->mu);
    uint32_t moved = 0;
    int rc = l && mv ? bf_arena_compact(&ig->arena, l, nl, n, mv, &moved, off) : -ENOMEM;
    uint32_t maxlen = 0;
    for (uint32_t k = 0; k < moved; k++)
        if (mv[k].len > maxlen)
            maxlen = mv[k].len;
    if (moved && ensure_tmp(ig, maxlen)) {
        /* nothing moved yet, but the allocator already reflects the plan:
         * rebuild it from the published rows */
        BF_ERROR("need-row arena compaction abandoned (out of memory)", "moves=%u", moved);
        free(l);
        free(mv);
        bf_arena_destroy(&ig->arena);
        rebuild_arena(ig);
        return -ENOMEM;
    }
    for (uint32_t k = 0; k < moved; k++) {
        bf_needs_copy_rows(ig->shm, mv[k].from, mv[k].len, ig->tmp);
        bf_shm_store_words(&ig->shm->rows[mv[k].to], ig->tmp,
                           (size_t)mv[k].len * sizeof(struct bf_need_row));
        pthread_mutex_lock(&ct->mu);
        ct->rec[mv[k].idx].rows_off = mv[k].to; /* same rows, same generation */
        bf_ctab_publish_locked(ct, mv[k].idx);
        pthread_mutex_unlock(&ct->mu);
    }
    free(l);
    free(mv);
    if (moved)
        BF_INFO("need-row arena compacted", "extents_moved=%u rows_wanted=%u result=%s", moved, n,
                rc >= 0 ? "ok" : "still fragmented");
    /* moves go downwards, inside what is backed; the new extent may not be */
    return rc >= 0 ? back_rows(ig, *off, n) : rc;
}

static struct bf_rollup_limits limits_of(struct ingest *ig, uint32_t cidx, const struct job *j)
{
    uint64_t used = ig->str_charged[cidx];
    return (struct bf_rollup_limits){
        .max_rows = ig->cluster_max_needs,
        .max_groups = ig->cfg->cluster_max_groups,
        .strtab_reserve = ig->shm->arena_bytes / 4,
        .strtab_quota = ig->str_quota > used ? ig->str_quota - used : 0,
        .max_priority = ig->cfg->max_priority,
        .recv_ns = j->recv_ns,
    };
}

/* Converts the rollup under the cluster's quotas; registers the resource
 * names it adds only when everything else passed and the quota has room,
 * then converts again with them. */
static int convert(struct ingest *ig, uint32_t cidx, const struct job *j, const char *cid,
                   const struct bf_cluster_rec *rec, char *err, size_t errlen)
{
    struct bf_shm *s = ig->shm;
    struct bf_rollup *cv = &ig->conv;
    struct bf_rollup_limits lim = limits_of(ig, cidx, j);
    uint32_t name_ref = rec->name_ref;
    /* the cluster's last accepted rollup, while its rows are the published
     * ones and were shaped by the same priority clamp: its Needs are reused */
    const struct repeat_memo *m = ig->memo[cidx];
    struct bf_rollup_prev prev = {0}, *pp = NULL;
    if (m && m->n_needs && m->name_ref == name_ref && m->generation == rec->generation &&
        m->n == rec->rows_count && m->max_priority == lim.max_priority) {
        prev = (struct bf_rollup_prev){.needs = m->needs,
                                       .n_needs = m->n_needs,
                                       .rows_off = rec->rows_off,
                                       .fp_refs = m->fp_refs,
                                       .n_rows = m->n};
        pp = &prev;
    }
    int rc = bf_rollup_convert_incremental(s, j->rb.data, j->rb.len, cid, name_ref, &lim, &ig->key,
                                           pp, cv, err, errlen);
    ig->str_charged[cidx] += cv->strtab_added; /* interned even when rejected */
    if (rc == 0 && cv->n_new_dims) {
        uint32_t extra = 0;
        char names[200] = "";
        size_t at = 0;
        for (uint32_t i = 0; i < cv->n_new_dims; i++) {
            if (!bf_dim_is_reserved(cv->new_dims[i]))
                extra++;
            int w = snprintf(names + at, sizeof names - at, "%s%s", i ? "," : "", cv->new_dims[i]);
            if (w > 0 && (size_t)w < sizeof names - at)
                at += (size_t)w;
        }
        struct bf_dims d;
        bf_shm_dims(s, &d);
        if (ig->dims_added[cidx] + extra > ig->cfg->cluster_max_new_dims) {
            snprintf(err, errlen,
                     "the rollup names %u resource(s) the shard does not know (%s); the cluster "
                     "has added %u and may add at most %u (--cluster-max-new-dims)",
                     cv->n_new_dims, names, ig->dims_added[cidx], ig->cfg->cluster_max_new_dims);
            cv->over_quota = "dims";
            rc = -EDQUOT;
            goto count;
        }
        if (d.n + cv->n_new_dims > BF_MAX_DIMS) {
            snprintf(err, errlen,
                     "the shard-wide resource table is full (%u of %d names); cannot add %s", d.n,
                     BF_MAX_DIMS, names);
            rc = -ENOSPC;
            goto count;
        }
        for (uint32_t i = 0; i < cv->n_new_dims; i++) {
            int di = bf_dim_intern(s, cv->new_dims[i]);
            if (di < 0) {
                snprintf(err, errlen, "cannot register resource %s: %s", cv->new_dims[i],
                         strerror(-di));
                return di;
            }
            BF_STAT_INC(ig->cnt.dims_registered);
            BF_INFO("resource name registered for a cluster's rollup",
                    "cluster=%s resource=%s "
                    "index=%d",
                    cid, cv->new_dims[i], di);
        }
        ig->dims_added[cidx] = (uint8_t)(ig->dims_added[cidx] + extra);
        lim = limits_of(ig, cidx, j);
        rc = bf_rollup_convert_incremental(s, j->rb.data, j->rb.len, cid, name_ref, &lim, &ig->key,
                                           pp, cv, err, errlen);
        ig->str_charged[cidx] += cv->strtab_added;
        if (rc == 0 && cv->n_new_dims) {
            snprintf(err, errlen, "resource names still unknown after registering them");
            return -EINVAL;
        }
    }
count:
    if (cv->timestamp_clamped) {
        BF_STAT_INC(ig->cnt.timestamps_clamped);
        BF_DEBUG("rollup timestamp outside [receive - 60 s, receive]: receive time used",
                 "cluster=%s timestamp_ns=%lld recv_ns=%lld", cid, (long long)cv->timestamp_ns,
                 (long long)j->recv_ns);
    }
    if (cv->priorities_clamped)
        BF_STAT_ADD(ig->cnt.priorities_clamped, cv->priorities_clamped);
    if (cv->unknown_fields)
        BF_STAT_ADD(ig->cnt.unknown_fields, cv->unknown_fields);
    if (rc && cv->over_quota) {
        int q = strcmp(cv->over_quota, "needs") == 0     ? 0
                : strcmp(cv->over_quota, "groups") == 0  ? 1
                : strcmp(cv->over_quota, "strings") == 0 ? 2
                                                         : 3;
        BF_STAT_INC(ig->cnt.over_quota[q]);
    }
    return rc;
}

/* The unchanged-rollup path: when this rollup's digest equals the last
 * accepted one's and the cluster's published rows are still the rows that
 * rollup produced under the same limits, fill ig->conv's figures (n, the new
 * arrival; no rows) instead of converting: process() republishes the same
 * extent. The figures of the repeated conversion are counted again, as a
 * conversion would. */
static bool repeat(struct ingest *ig, uint32_t cidx, const struct job *j,
                   const struct bf_cluster_rec *rec, const struct bf_rollup_digest *dg)
{
    const struct repeat_memo *m = ig->memo[cidx];
    struct bf_rollup_limits lim = limits_of(ig, cidx, j);
    if (!m || !dg->hi || m->hi != dg->hi || m->lo != dg->lo || m->name_ref != rec->name_ref ||
        m->generation != rec->generation || m->n != rec->rows_count ||
        lim.max_rows != m->max_rows || lim.max_groups != m->max_groups ||
        lim.max_priority != m->max_priority)
        return false;
    struct bf_rollup *cv = &ig->conv;
    bf_rollup_repeat_meta(m->n, dg->timestamp_ns, &lim, cv);
    if (!cv->arrival_ns) {
        cv->repeated = false; /* rows_arrival_ns 0 means "the rows' own": convert */
        return false;
    }
    cv->needs_in = m->needs_in;
    cv->merged = m->merged;
    cv->priorities_clamped = m->priorities_clamped;
    cv->unknown_fields = m->unknown_fields;
    BF_STAT_INC(ig->cnt.rollups_unchanged);
    if (cv->timestamp_clamped)
        BF_STAT_INC(ig->cnt.timestamps_clamped);
    if (cv->priorities_clamped)
        BF_STAT_ADD(ig->cnt.priorities_clamped, cv->priorities_clamped);
    if (cv->unknown_fields)
        BF_STAT_ADD(ig->cnt.unknown_fields, cv->unknown_fields);
    return true;
}

/* After an accepted rollup: what the next one must repeat to take the
 * unchanged-rollup path. */
static void remember(struct ingest *ig, uint32_t cidx, const struct job *j,
                     const struct bf_cluster_rec *rec, const struct bf_rollup_digest *dg,
                     uint32_t generation)
{
    struct repeat_memo *m = ig->memo[cidx];
    const struct bf_rollup *cv = &ig->conv;
    if (!m && !(m = ig->memo[cidx] = calloc(1, sizeof *m)))
        return; /* no memo: the next rollup converts */
    m->hi = 0;
    if (!dg->hi)
        return;
    if (!cv->repeated) {
        if (cv->n > m->fp_cap) {
            uint32_t *f = realloc(m->fp_refs, (size_t)cv->n * sizeof *f);
            if (!f)
                return; /* no memo: the next rollup converts */
            m->fp_refs = f;
            m->fp_cap = cv->n;
        }
        if (cv->n)
            memcpy(m->fp_refs, cv->fp_refs, (size_t)cv->n * sizeof *m->fp_refs);
        m->n = cv->n;
        m->n_needs = 0;
        /* The Need memo is kept only while it is about the size of the rows
         * (bounded shard-wide by --max-needs): a rollup of many duplicate
         * Needs merges into few rows, and a memo of every Need would let a
         * peer hold 16 B per Need sent for nothing (a merged Need is never
         * reused). Without it the next rollup converts in full. */
        if (cv->needs_in > 2 * (uint64_t)cv->n + NEED_MEMO_SLACK) {
            free(m->needs);
            m->needs = NULL;
            m->needs_cap = 0;
        } else if (cv->needs_in > m->needs_cap) {
            struct bf_rollup_need_memo *nm = realloc(m->needs, (size_t)cv->needs_in * sizeof *nm);
            if (nm) {
                m->needs = nm;
                m->needs_cap = cv->needs_in;
            }
        }
        if (m->needs && cv->needs_in <= m->needs_cap && cv->needs_memo) {
            if (cv->needs_in)
                memcpy(m->needs, cv->needs_memo, (size_t)cv->needs_in * sizeof *m->needs);
            m->n_needs = cv->needs_in;
        }
        m->needs_in = cv->needs_in;
        m->merged = cv->merged;
        m->priorities_clamped = cv->priorities_clamped;
        m->unknown_fields = cv->unknown_fields;
        struct bf_rollup_limits lim = limits_of(ig, cidx, j);
        m->max_rows = lim.max_rows;
        m->max_groups = lim.max_groups;
        m->max_priority = lim.max_priority;
    }
    m->name_ref = rec->name_ref;
    m->generation = generation;
    m->lo = dg->lo;
    m->hi = dg->hi;
}

/* notify: write the eventfd after queueing the completion (the thread);
 * an inline rollup's caller drains the completions itself */
static void process(struct ingest *ig, uint32_t cidx, struct job *j, bool notify)
{
    struct bf_shm *s = ig->shm;
    struct cluster_tab *ct = ig->ct;
    int64_t t0 = bf_mono_ns();
    pthread_mutex_lock(&ct->mu);
    struct bf_cluster_rec rec = ct->rec[cidx];
    pthread_mutex_unlock(&ct->mu);
    const char *cid = cluster_name(ig, rec.name_ref);
    char err[512] = "";
    struct bf_rollup *cv = &ig->conv;
    struct bf_rollup_digest dg = {0};
    /* the Needs' hashes kept for the conversion below (one pass less) */
    if (bf_rollup_digest_needs(j->rb.data, j->rb.len, &ig->key, ig->cluster_max_needs, cv, &dg) !=
        0)
        dg.hi = 0; /* the conversion rejects it with its own message */
    int rc = repeat(ig, cidx, j, &rec, &dg) ? 0 : convert(ig, cidx, j, cid, &rec, err, sizeof err);
    if (rc) {
        reject(ig, cidx, j, rc, err);
        goto out;
    }
    uint32_t baseline = rec.accepted_rows;
    uint8_t held = rec.quarantine_held;
    /* rail 2 counts the Needs the operator sent, before duplicates merge
     * (Go's ApplyRollup admits len(ns); docs/fidelity.md item 6) */
    int v = bf_rail2_admit(ig->cfg->empty_rollup_guard, &baseline, &held, cv->needs_in);
    if (v == BF_RAIL2_HOLD) {
        pthread_mutex_lock(&ct->mu);
        struct bf_cluster_rec *r = &ct->rec[cidx];
        r->quarantine_held = held;
        r->first_rollup = 1;
        r->last_rollup_ns = j->recv_ns;
        r->last_rollup_timestamp_ns = cv->timestamp_ns;
        r->rollups_quarantined++;
        bf_ctab_publish_locked(ct, cidx);
        pthread_mutex_unlock(&ct->mu);
        BF_STAT_INC(stats(ig)->rollups_quarantined);
        BF_WARN("rollup quarantined (rail 2): it would drop most of the cluster's demand",
                "cluster=%s rows=%u accepted_rows=%u held=%u confirm_at=%d", cid, cv->needs_in,
                rec.accepted_rows, held, BF_RAIL2_CONFIRMATIONS);
        rc = 1;
        goto out;
    }
    uint64_t after = ig->total_rows - rec.rows_count + cv->n;
    if (after > s->max_needs) {
        snprintf(err, sizeof err,
                 "the needs table is full: %u rows would bring the shard to %llu live rows "
                 "(--max-needs %u)",
                 cv->n, (unsigned long long)after, s->max_needs);
        reject(ig, cidx, j, -ENOSPC, err);
        rc = -ENOSPC;
        goto out;
    }
    /* the fingerprints of the published rows, when the memo describes them:
     * the same list again (a repeat, or a change of quantities only) prunes
     * nothing, and touches nothing while no stamp was observed */
    struct repeat_memo *m = ig->memo[cidx];
    bool memo_current = m && m->name_ref == rec.name_ref && m->generation == rec.generation &&
                        m->n == rec.rows_count;
    const uint32_t *fps = cv->repeated ? m->fp_refs : cv->fp_refs;
    bool same_fps =
        cv->repeated ||
        (memo_current && m->n == cv->n &&
         (!cv->n || !memcmp(m->fp_refs, cv->fp_refs, (size_t)cv->n * sizeof *cv->fp_refs)));
    uint64_t observed = BF_SHARED_LOAD(s->needs->stamps_observed);
    bool touch = !(same_fps && m->stamps_current && m->stamps_observed == observed);
    uint32_t off = 0;
    if (!cv->repeated) { /* a repeat keeps its extent: the rows are the same */
        if ((rc = alloc_rows(ig, cidx, rec.rows_off, rec.rows_count, cv->n, &off)) != 0) {
            if (rc == -EFBIG)
                snprintf(err, sizeof err,
                         "the need-row arena could not grow its shared-memory file for %u rows",
                         cv->n);
            else
                snprintf(err, sizeof err,
                         "no contiguous run of %u rows in the need-row arena (%u free of %u)",
                         cv->n, ig->arena.free_rows, ig->arena.capacity);
            reject(ig, cidx, j, rc, err);
            goto out;
        }
        if (cv->n)
            bf_shm_store_words(&s->rows[off], cv->rows, (size_t)cv->n * sizeof(struct bf_need_row));
    }
    pthread_mutex_lock(&ct->mu);
    struct bf_cluster_rec *r = &ct->rec[cidx];
    uint32_t old_off = r->rows_off, old_n = r->rows_count;
    if (cv->repeated) {
        r->rows_arrival_ns = cv->arrival_ns; /* rows_off, rows_count unchanged */
    } else {
        r->rows_off = cv->n ? off : 0;
        r->rows_count = cv->n;
        r->rows_arrival_ns = 0; /* the rows carry it */
    }
    r->generation++;
    if (!cv->repeated)
        r->rows_generation = r->generation; /* these rows were written by it */
    r->accepted_rows = baseline;
    r->quarantine_held = 0;
    r->first_rollup = 1;
    r->last_rollup_ns = j->recv_ns;
    r->last_rollup_timestamp_ns = cv->timestamp_ns;
    r->rollups_accepted++;
    uint32_t generation = r->generation;
    bf_ctab_publish_locked(ct, cidx);
    pthread_mutex_unlock(&ct->mu);
    if (!same_fps)
        prune_absent_stamps(ig, rec.name_ref, old_off, old_n, memo_current ? m->fp_refs : NULL);
    remember(ig, cidx, j, &rec, &dg, generation);
    m = ig->memo[cidx];
    if (!cv->repeated && bf_arena_release(&ig->arena, old_off, old_n) != 0)
        BF_ERROR("need-row arena: releasing a published extent failed (allocator state "
                 "inconsistent)",
                 "cluster=%s off=%u rows=%u", cid, old_off, old_n);
    ig->total_rows = after;
    BF_SHARED_STORE(s->needs->rows_used, (uint32_t)after);
    BF_SHARED_BUMP(s->needs->change_counter);
    int64_t now = bf_now_ns();
    bool stamped = true;
    for (uint32_t i = 0; touch && i < cv->n; i++) {
        if (bf_stamp_touch(s, rec.name_ref, fps[i], now) != 0) {
            stamped = false;
            if (!ig->stamps_full_logged)
                BF_ERROR("provisioning-latency stamp table is full; new (cluster, fingerprint) "
                         "pairs are not timed",
                         "capacity=%u", s->stamp_mask + 1);
            ig->stamps_full_logged = true;
        }
    }
    if (m && m->generation == generation) { /* the memo describes what was just published */
        m->stamps_current = touch ? stamped : m->stamps_current;
        m->stamps_observed = observed;
    }
    bf_wake(s, BF_ROLE_CYCLE);
    BF_STAT_INC(stats(ig)->rollups_accepted);
    if (!cv->repeated && cv->reused) /* counted once the rows are published */
        BF_STAT_ADD(ig->cnt.needs_reused, cv->reused);
    if (v == BF_RAIL2_ACCEPT_CONFIRMED)
        BF_WARN("quarantined rollup accepted: confirmed by consecutive rollups (rail 2)",
                "cluster=%s rows=%u previous_rows=%u", cid, cv->needs_in, rec.accepted_rows);
    if (cv->merged)
        BF_DEBUG("rollup had duplicate needs; merged", "cluster=%s merged=%u", cid, cv->merged);
    rc = 0;
out:
    bf_hist_observe(&stats(ig)->rollup_ingest, 0.0001, 2, 20, bf_mono_ns() - t0);
    int outcome = rc == 0 ? INGEST_ACCEPTED : rc == 1 ? INGEST_HELD : INGEST_REJECTED;
    bf_ingest_buf_free(&j->rb); /* before the refund: the bytes are charged until freed */
    pthread_mutex_lock(&ig->mu);
    ig->bytes -= j->held;
    if (ig->done_n == ig->done_cap) {
        int ncap = ig->done_cap ? ig->done_cap * 2 : 64;
        struct ingest_done *nd = realloc(ig->done, (size_t)ncap * sizeof *nd);
        if (nd) {
            ig->done = nd;
            ig->done_cap = ncap;
        }
    }
    if (ig->done_n < ig->done_cap)
        ig->done[ig->done_n++] = (struct ingest_done){cidx, j->serial, outcome};
    ig->busy = false;
    if (!notify && ig->fifo_n)
        pthread_cond_signal(&ig->cv); /* (the caller is the only submitter: not expected) */
    pthread_mutex_unlock(&ig->mu);
    if (!notify)
        return;
    uint64_t one = 1;
    ssize_t w = write(ig->efd, &one, sizeof one);
    (void)w;
}

static int rebuild_arena(struct ingest *ig)
{
    struct cluster_tab *ct = ig->ct;
    uint32_t cap = BF_NEED_ROWS_PER_NEED * ig->shm->max_needs; /* the reserve */
    int rc = bf_arena_init(&ig->arena, cap);
    if (rc)
        return rc;
    pthread_mutex_lock(&ct->mu);
    struct bf_extent *e = malloc(((size_t)ct->n + 1) * sizeof *e);
    uint64_t total = 0;
    for (uint32_t i = 0; e && i < ct->n; i++) {
        e[i] = (struct bf_extent){ct->rec[i].rows_off, ct->rec[i].rows_count};
        total += ct->rec[i].rows_count;
    }
    uint32_t n = ct->n;
    pthread_mutex_unlock(&ct->mu);
    if (!e)
        return -ENOMEM;
    rc = bf_arena_rebuild(&ig->arena, e, n);
    free(e);
    if (rc) {
        BF_ERROR("published cluster rows overlap in the need-row arena", "clusters=%u", n);
        return rc;
    }
    ig->total_rows = total;
    BF_SHARED_STORE(ig->shm->needs->rows_used, (uint32_t)total);
    if (total)
        BF_INFO("need-row arena rebuilt from published clusters", "clusters=%u live_rows=%llu", n,
                (unsigned long long)total);
    return 0;
}

static void *thread_main(void *arg)
{
    struct ingest *ig = arg;
    for (;;) {
        pthread_mutex_lock(&ig->mu);
        while (!ig->stop && (ig->fifo_n == 0 || ig->busy))
            pthread_cond_wait(&ig->cv, &ig->mu);
        if (ig->stop) {
            pthread_mutex_unlock(&ig->mu);
            break;
        }
        uint32_t cidx = ig->fifo[ig->fifo_head];
        ig->fifo_head = (ig->fifo_head + 1) % ig->fifo_cap;
        ig->fifo_n--;
        struct job j = ig->slot[cidx];
        ig->slot[cidx] = (struct job){0};
        ig->busy = true;
        pthread_mutex_unlock(&ig->mu);
        process(ig, cidx, &j, true); /* frees j.rb, clears busy */
    }
    return NULL;
}

int bf_ingest_start(struct ingest **out, struct bf_shm *shm, const struct bf_config *cfg,
                    struct cluster_tab *ct, int done_efd)
{
    struct ingest *ig = calloc(1, sizeof *ig);
    if (!ig)
        return -ENOMEM;
    ig->shm = shm;
    ig->cfg = cfg;
    ig->ct = ct;
    ig->efd = done_efd;
    ig->fifo_cap = shm->max_clusters;
    ig->slot = calloc(shm->max_clusters, sizeof *ig->slot);
    ig->fifo = calloc(shm->max_clusters, sizeof *ig->fifo);
    ig->last_log = calloc(shm->max_clusters, sizeof *ig->last_log);
    ig->suppressed = calloc(shm->max_clusters, sizeof *ig->suppressed);
    ig->tokens = calloc(shm->max_clusters, sizeof *ig->tokens);
    ig->str_charged = calloc(shm->max_clusters, sizeof *ig->str_charged);
    ig->dims_added = calloc(shm->max_clusters, sizeof *ig->dims_added);
    ig->memo = calloc(shm->max_clusters, sizeof *ig->memo);
    ig->cluster_max_needs = bf_config_cluster_max_needs(cfg);
    ig->str_quota = cfg->cluster_max_string_kib ? (uint64_t)cfg->cluster_max_string_kib << 10
                                                : shm->arena_bytes / 16;
    bf_rollup_init(&ig->conv);
    pthread_mutex_init(&ig->mu, NULL);
    pthread_cond_init(&ig->cv, NULL);
    int rc = -ENOMEM;
    if (!ig->slot || !ig->fifo || !ig->last_log || !ig->suppressed || !ig->tokens ||
        !ig->str_charged || !ig->dims_added || !ig->memo)
        goto fail;
    if (getrandom(ig->key.secret, sizeof ig->key.secret, 0) != (ssize_t)sizeof ig->key.secret) {
        rc = -errno;
        BF_ERROR("no random key for rollup digests", "err=%s", strerror(errno));
        goto fail;
    }
    if ((rc = rebuild_arena(ig)) != 0)
        goto fail;
    if ((rc = -pthread_create(&ig->th, NULL, thread_main, ig)) != 0)
        goto fail;
    ig->started = true;
    *out = ig;
    return 0;
fail:
    bf_ingest_stop(ig);
    return rc;
}

size_t bf_ingest_buf_held(const struct ingest_buf *b)
{
    return b->net.base ? b->net.cap : b->len;
}

void bf_ingest_buf_free(struct ingest_buf *b)
{
    if (b->net.base)
        bf_net_msg_free(&b->net);
    free(b->heap);
    *b = (struct ingest_buf){0};
}

int bf_ingest_submit(struct ingest *ig, uint32_t cidx, uint64_t serial, struct ingest_buf *b,
                     int64_t recv_ns)
{
    struct job nj = {*b, bf_ingest_buf_held(b), serial, recv_ns};
    *b = (struct ingest_buf){0};
    struct job old = {0};
    int rc = 0;
    pthread_mutex_lock(&ig->mu);
    struct job *sl = &ig->slot[cidx];
    size_t replaced = sl->rb.data ? sl->held : 0;
    if (!ig->busy && ig->fifo_n == 0 && !ig->stop && nj.held <= SS_INGEST_INLINE_MAX &&
        ig->bytes + nj.held <= SS_INGEST_BUDGET) {
        /* the lane is idle: process it here (the thread stays out while busy) */
        ig->busy = true;
        ig->bytes += nj.held;
        pthread_mutex_unlock(&ig->mu);
        BF_STAT_INC(ig->cnt.rollups_inline);
        process(ig, cidx, &nj, false); /* frees nj.rb, refunds, clears busy */
        return 1;
    }
    if (ig->bytes - replaced + nj.held > SS_INGEST_BUDGET) {
        old = nj; /* shed: freed below */
        rc = -ENOBUFS;
    } else {
        if (sl->rb.data) {
            old = *sl;
            BF_STAT_INC(ig->shm->st->session.rollups_superseded);
        } else {
            ig->fifo[(ig->fifo_head + ig->fifo_n) % ig->fifo_cap] = cidx;
            ig->fifo_n++;
        }
        *sl = nj;
        ig->bytes += nj.held;
        pthread_cond_signal(&ig->cv);
    }
    pthread_mutex_unlock(&ig->mu);
    /* outside the lock (a large munmap is not free); charged until freed */
    bf_ingest_buf_free(&old.rb);
    if (old.held && rc == 0) {
        pthread_mutex_lock(&ig->mu);
        ig->bytes -= old.held;
        pthread_mutex_unlock(&ig->mu);
    }
    return rc;
}

void bf_ingest_read_counters(struct ingest *ig, struct ingest_counters *out)
{
    out->timestamps_clamped = BF_STAT_GET(ig->cnt.timestamps_clamped);
    out->priorities_clamped = BF_STAT_GET(ig->cnt.priorities_clamped);
    out->unknown_fields = BF_STAT_GET(ig->cnt.unknown_fields);
    out->dims_registered = BF_STAT_GET(ig->cnt.dims_registered);
    out->rollups_unchanged = BF_STAT_GET(ig->cnt.rollups_unchanged);
    out->needs_reused = BF_STAT_GET(ig->cnt.needs_reused);
    out->rollups_inline = BF_STAT_GET(ig->cnt.rollups_inline);
    for (int i = 0; i < 4; i++)
        out->over_quota[i] = BF_STAT_GET(ig->cnt.over_quota[i]);
}

int bf_ingest_take_done(struct ingest *ig, struct ingest_done *out, int max)
{
    pthread_mutex_lock(&ig->mu);
    int n = ig->done_n < max ? ig->done_n : max;
    memcpy(out, ig->done, (size_t)n * sizeof *out);
    memmove(ig->done, ig->done + n, (size_t)(ig->done_n - n) * sizeof *out);
    ig->done_n -= n;
    pthread_mutex_unlock(&ig->mu);
    return n;
}

void bf_ingest_stop(struct ingest *ig)
{
    if (!ig)
        return;
    if (ig->started) {
        pthread_mutex_lock(&ig->mu);
        ig->stop = true;
        pthread_cond_signal(&ig->cv);
        pthread_mutex_unlock(&ig->mu);
        pthread_join(ig->th, NULL);
    }
    for (uint32_t i = 0; ig->slot && i < ig->shm->max_clusters; i++)
        bf_ingest_buf_free(&ig->slot[i].rb);
    free(ig->slot);
    free(ig->fifo);
    free(ig->last_log);
    free(ig->suppressed);
    free(ig->tokens);
    free(ig->str_charged);
    free(ig->dims_added);
    for (uint32_t i = 0; ig->memo && i < ig->shm->max_clusters; i++)
        if (ig->memo[i]) {
            free(ig->memo[i]->fp_refs);
            free(ig->memo[i]->needs);
            free(ig->memo[i]);
        }
    free(ig->memo);
    free(ig->done);
    free(ig->tmp);
    free(ig->fps);
    if (ig->cache)
        bf_blob_cache_free(ig->cache);
    bf_rollup_free(&ig->conv);
    bf_arena_destroy(&ig->arena);
    pthread_mutex_destroy(&ig->mu);
    pthread_cond_destroy(&ig->cv);
    free(ig);
}
