/*
 * feed.c — bringing the engine's private mirror and demand up to date from
 * the shared segments (ARCHITECTURE.md §4).
 *
 * Mirror: the change logs of every record writer (reconciler, executor,
 * supervisor repair) are drained each cycle; each logged slot is re-read
 * under its seqlock and upserted into (or removed from) the engine. Cost is
 * O(changes). A change-log overflow, or the first cycle of this process,
 * forces one full rescan of slots [0, hwm), counted in mirror_rescans,
 * through the engine's bulk load (each record shape resolved once). A
 * record whose writer holds it past the bounded read is retried next cycle.
 *
 * Demand: every cluster row is read (O(clusters)); only rows whose
 * generation moved have their need rows copied and handed to the engine
 * (with each profile's fingerprint from the blob cache), except a rollup
 * republished unchanged, whose new arrival alone is handed over.
 * First-rollup and session-live flags are refreshed each cycle.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <xxhash.h>

#include "bigfleet/log.h"
#include "cycle_internal.h"

/* ------------------------------------------------------------ label cache */

static const struct bf_engine_label *labels_for(struct bf_cycle *c, const struct bf_mprofile *p,
                                                uint32_t *n)
{
    struct labelcache *lc = &c->labels;
    if (p->n_labels == 0 || p->ref == 0) {
        *n = 0;
        return NULL;
    }
    const struct labelcache_val *hit = labelcache_ref(lc, p->ref);
    if (hit) {
        *n = hit->n;
        return hit->labels;
    }
    struct bf_engine_label *arr = calloc(p->n_labels + 1, sizeof *arr);
    if (!arr)
        return NULL;
    for (uint32_t i = 0; i < p->n_labels; i++) {
        arr[i].key = p->labels[i].key;
        arr[i].value = p->labels[i].value;
    }
    if (labelcache_put(lc, p->ref, (struct labelcache_val){p->n_labels, arr})) {
        free(arr);
        return NULL;
    }
    *n = p->n_labels;
    return arr;
}

/* ------------------------------------------------------------ counts */

static void count(struct bf_cycle *c, const struct slotinfo *s, int delta)
{
    if (!s->present)
        return;
    struct bf_inv_counts *k = &c->counts;
    uint8_t st = s->state < BF_STATE_COUNT ? s->state : 0;
    uint16_t t = s->type_idx < BF_MAX_TYPES ? s->type_idx : 0;
    uint16_t z = s->zone_idx < BF_MAX_ZONES ? s->zone_idx : 0;
    uint8_t ct = s->ct < BF_CT_COUNT ? s->ct : 0;
    uint8_t b = s->ipb <= BF_BUCKET_MAX ? s->ipb : 0;
    k->by_state_type_zone[st][t][z] += (uint32_t)delta;
    k->by_state_ct_bucket[st][ct][b] += (uint32_t)delta;
    k->by_state[st] += (uint32_t)delta;
    k->total_machines += (uint32_t)delta;
}

/* ------------------------------------------------------------ mirror */

static void retry_later(struct bf_cycle *c, uint32_t slot)
{
    if (c->n_retry == c->cap_retry) {
        uint32_t nc = c->cap_retry ? c->cap_retry * 2 : 64;
        uint32_t *n = realloc(c->retry, nc * sizeof *n);
        if (!n) {
            c->need_rescan = true; /* cannot remember it: rescan next cycle */
            return;
        }
        c->retry = n;
        c->cap_retry = nc;
    }
    c->retry[c->n_retry++] = slot;
}

/* The slot holds no machine the engine can decide on: out of the mirror and
 * the counts. */
static void keep_out(struct bf_cycle *c, struct slotinfo *si, uint32_t slot)
{
    if (si->present) {
        count(c, si, -1);
        c->n_held -= si->held;
        bf_engine_remove(c->engine, slot);
        memset(si, 0, sizeof *si);
    }
}

void bf_cycle_refresh_slot(struct bf_cycle *c, uint32_t slot)
{
    struct bf_machine_rec r;
    struct slotinfo *si = &c->slots[slot];
    int rc = c->scan ? bf_inv_scan_read(c->scan, slot, &r) : bf_inv_read(c->shm, slot, &r);
    if (rc == -EAGAIN) {
        retry_later(c, slot);
        return;
    }
    if (rc != 0 || !(r.flags & BF_REC_VALID)) {
        keep_out(c, si, slot);
        return;
    }
    const struct bf_mprofile *p;
    const struct bf_engine_label *labels;
    uint32_t nl = 0;
    if (r.profile && r.profile == c->last_mprof_ref) {
        p = c->last_mprof;
        labels = c->last_labels;
        nl = c->last_nl;
    } else if ((p = bf_mprofile_get(c->blobs, c->shm, r.profile)) != NULL) {
        labels = labels_for(c, p, &nl);
        if (labels || !p->n_labels) { /* not a failed (out of memory) label copy */
            c->last_mprof_ref = r.profile;
            c->last_mprof = p;
            c->last_labels = labels;
            c->last_nl = nl;
        }
    }
    if (!p) {
        /* a profile that does not decode cannot be matched: keep it out */
        keep_out(c, si, slot);
        return;
    }
    uint32_t glen = 0;
    const char *group = r.group ? bf_str(c->shm, r.group, &glen) : NULL;
    /* the id is read during the calls below only (engine.h "bulk load"):
     * during a rescan it may be the scan's window (shm.h "bulk reads") */
    const char *id = c->scan ? bf_inv_scan_str(c->scan, r.id, NULL) : bf_str(c->shm, r.id, NULL);
    struct bf_engine_machine m = {
        .id = id ? id : "",
        .state = r.state,
        .capacity_type = r.capacity_type,
        .instance_type = p->instance_type,
        .zone = p->zone,
        .n_labels = labels ? nl : 0,
        .labels = labels,
        .allocatable = p->effective,
        .cluster = r.cluster ? bf_str(c->shm, r.cluster, NULL) : "",
        .price_per_hour = r.price_per_hour,
        .interruption_probability = r.interruption_probability,
        .assigned_priority = r.assigned_priority,
        .assigned_ipb = r.ipb,
        .assigned_rpb = r.rpb,
        .assigned_fingerprint = r.fingerprint ? bf_str(c->shm, r.fingerprint, NULL) : "",
        .assigned_group = group,
        .assigned_group_len = group ? glen : 0,
        .idle_since_s = bf_rec_idle_since_unix(c->shm, &r),
    };
    if (!m.cluster)
        m.cluster = "";
    if (!m.assigned_fingerprint)
        m.assigned_fingerprint = "";
    m.held = id && bf_cycle_own_held(c, id, p, &r);
    int urc =
        c->bulk ? bf_engine_bulk_upsert(c->bulk, slot, &m) : bf_engine_upsert(c->engine, slot, &m);
    if (urc == -EINVAL) {
        /* an id the engine refuses (longer than BF_ENGINE_ID_MAX): it cannot
         * be matched, and retrying cannot help; keep it out, as a profile
         * that does not decode (the engine has removed it) */
        keep_out(c, si, slot);
        return;
    }
    if (urc != 0) {
        retry_later(c, slot);
        return;
    }
    count(c, si, -1);
    c->n_held -= si->held;
    si->held = m.held;
    c->n_held += si->held;
    si->id_ref = r.id;
    si->present = 1;
    si->state = r.state;
    si->ct = r.capacity_type;
    si->ipb = r.ipb;
    si->type_idx = r.type_idx;
    si->zone_idx = r.zone_idx;
    count(c, si, +1);
}

double bf_cycle_cpu_ms(long *minflt)
{
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    *minflt = r.ru_minflt;
    return (double)(r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1e3 +
           (double)(r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e3;
}

static void on_logged(void *arg, uint32_t slot)
{
    bf_cycle_refresh_slot(arg, slot);
}

int bf_cycle_feed_mirror(struct bf_cycle *c, struct bf_cycle_report *rep)
{
    uint32_t changed = 0;
    /* retries first (records that were busy last cycle) */
    uint32_t nr = c->n_retry;
    uint32_t *old = c->retry;
    c->retry = NULL;
    c->n_retry = c->cap_retry = 0;
    for (uint32_t i = 0; i < nr; i++)
        bf_cycle_refresh_slot(c, old[i]);
    free(old);
    changed += nr;
    for (int w = 0; w < BF_CHANGELOG_WRITERS && !c->need_rescan; w++) {
        int n = bf_cl_drain(c->shm, w, on_logged, c);
        if (n == -EOVERFLOW) {
            BF_STAT_INC(c->shm->st->cycle.changelog_overflows);
            c->need_rescan = true;
        } else if (n > 0) {
            changed += (uint32_t)n;
        }
    }
    if (c->need_rescan) {
        /* empty the logs first so entries appended during the scan are seen next cycle */
        for (int w = 0; w < BF_CHANGELOG_WRITERS; w++)
            bf_cl_skip(c->shm, w);
        uint32_t hwm = bf_inv_hwm(c->shm);
        long flt0, flt1;
        double cpu0 = bf_cycle_cpu_ms(&flt0);
        /* first written by the first full rescan, a 4 KiB fault every 256
         * slots: its 2 MiB-aligned part follows the engine's page advice,
         * like the mirror's columns (bf_engine_set_huge_pages) */
        bf_engine_advise_pages(c->slots, (size_t)c->capacity * sizeof *c->slots);
        /* and its [0, hwm), which the scan writes, faulted in one call */
        bf_engine_populate(c->slots,
                           (size_t)(hwm < c->capacity ? hwm : c->capacity) * sizeof *c->slots);
        /* every record: resolve each (profile, assignment) shape once (the
         * strings the feed hands in are the string arena's and the caches',
         * in place for the whole scan; engine.h "bulk load"); without the
         * handle (out of memory) the per-record upserts do the same */
        if (bf_engine_bulk_begin(c->engine, hwm, &c->bulk) != 0)
            c->bulk = NULL;
        /* the records and ids by copy, not by first touches of the mapping
         * (shm.h "bulk reads"); without the handle, through the mapping */
        if (bf_inv_scan_begin(c->shm, &c->scan) != 0)
            c->scan = NULL;
        for (uint32_t s = 0; s < hwm && s < c->capacity; s++)
            bf_cycle_refresh_slot(c, s);
        bf_inv_scan_end(c->scan, &c->scan_stats);
        c->scan = NULL;
        bf_engine_bulk_end(c->bulk, NULL);
        c->bulk = NULL;
        double cpu1 = bf_cycle_cpu_ms(&flt1);
        BF_DEBUG("mirror rescan",
                 "slots=%u cpu_ms=%.1f minflt=%ld records_copied=%llu records_live=%llu "
                 "strings_window=%llu strings_live=%llu window_loads=%llu",
                 hwm, cpu1 - cpu0, flt1 - flt0, (unsigned long long)c->scan_stats.copied,
                 (unsigned long long)c->scan_stats.live,
                 (unsigned long long)c->scan_stats.str_window,
                 (unsigned long long)c->scan_stats.str_live,
                 (unsigned long long)c->scan_stats.win_loads);
        /* slots beyond the high-water mark cannot hold machines */
        changed += hwm;
        c->need_rescan = false;
        rep->rescanned = true;
        BF_STAT_INC(c->shm->st->cycle.mirror_rescans);
    }
    rep->changed_slots = changed;
    return 0;
}

/* ------------------------------------------------------------ demand */

/*
 * A rollup that repeated the previous one is republished on the same extent
 * with generation + 1 and its arrival in rows_arrival_ns, rows untouched
 * (src/session/ingest.c). The rows the engine holds are still the published
 * ones, so only their arrival moved, when the cluster row says "repeat" and
 * either
 *  - its rows_generation (the generation that wrote the rows; kept by
 *    repeats and relocations) is the one the rows were read at, or
 *  - (a writer that does not record it) the generation moved by exactly
 *    one, on the same extent: a changed rollup always goes to another
 *    extent with rows_arrival_ns 0, and a relocation keeps the generation.
 * Anything else reads the rows, and so does a cluster one of whose
 * fingerprints could not be registered when its rows were last read (out of
 * memory): reading them again retries it.
 */
static bool republished(const struct clusterinfo *ci, const struct bf_cluster_rec *rec)
{
    if (!ci->known || ci->fp_unregistered || rec->rows_arrival_ns == 0 ||
        rec->rows_count != ci->rows_count)
        return false;
    if (rec->rows_generation)
        return rec->rows_generation == ci->rows_generation;
    return rec->generation == ci->generation + 1 && rec->rows_off == ci->rows_off;
}

int bf_cycle_feed_needs(struct bf_cycle *c, struct bf_cycle_report *rep)
{
    struct bf_shm *s = c->shm;
    c->needs_counter_seen = BF_SHARED_LOAD(s->needs->change_counter);
    uint32_t n = BF_SHARED_LOAD(s->needs->n_clusters);
    if (n > c->max_clusters)
        n = c->max_clusters;
    c->n_offline = 0;
    for (uint32_t i = 0; i < n; i++) {
        struct bf_cluster_rec rec;
        if (bf_cluster_read(s, i, &rec, NULL) != 0 || !rec.in_use)
            continue;
        const char *name = bf_str(s, rec.name_ref, NULL);
        if (!name || !name[0])
            continue;
        if (!rec.connected && rec.rows_count) {
            if (c->n_offline == c->offline_cap) {
                uint32_t nc = c->offline_cap ? c->offline_cap * 2 : 16;
                uint32_t *no = realloc(c->offline, (size_t)nc * sizeof *no);
                if (no) {
                    c->offline = no;
                    c->offline_cap = nc;
                }
            }
            if (c->n_offline < c->offline_cap) /* out of memory: its Bootstraps go out */
                c->offline[c->n_offline++] = rec.name_ref;
        }
        struct clusterinfo *ci = &c->clusters[i];
        if (!ci->known || ci->first_rollup != rec.first_rollup || ci->connected != rec.connected) {
            bf_engine_set_cluster_flags(c->engine, name, rec.first_rollup, rec.connected);
            ci->first_rollup = rec.first_rollup;
            ci->connected = rec.connected;
        }
        if (ci->known && ci->session_epoch != rec.session_epoch)
            bf_engine_ac_forget(c->engine, name);
        ci->session_epoch = rec.session_epoch;
        if (ci->known && ci->generation == rec.generation)
            continue;
        if (republished(ci, &rec)) {
            int rc =
                bf_engine_set_needs_arrival(c->engine, name, rec.generation, rec.rows_arrival_ns);
            if (rc == -ENOMEM)
                return rc;
            if (rc == 0) {
                ci->generation = rec.generation;
                rep->clusters_reread++;
                rep->clusters_republished++;
                continue;
            }
            /* the engine holds no demand for it: read the rows */
        }
        /* copy the published rows (retry with a bigger buffer if needed) */
        int got;
        for (;;) {
            got = bf_needs_copy(s, i, &rec, c->rows, c->rows_cap);
            if (got < 0 || (uint32_t)got <= c->rows_cap)
                break;
            uint32_t nc = (uint32_t)got + 64;
            struct bf_need_row *nr = realloc(c->rows, nc * sizeof *nr);
            if (!nr)
                return -ENOMEM;
            c->rows = nr;
            c->rows_cap = nc;
        }
        if (got < 0)
            continue; /* busy: next cycle */
        if ((uint32_t)got > c->eneeds_cap) {
            struct bf_engine_need *ne = realloc(c->eneeds, (size_t)got * sizeof *ne);
            if (!ne)
                return -ENOMEM;
            c->eneeds = ne;
            c->eneeds_cap = (uint32_t)got;
        }
        uint32_t k = 0;
        uint32_t buckets[BF_BUCKET_COUNT] = {0};
        bool unregistered = false;
        for (int j = 0; j < got; j++) {
            const struct bf_need_row *row = &c->rows[j];
            const struct bf_nprofile *np = bf_nprofile_get(c->blobs, s, row->profile_ref);
            if (!np) {
                BF_WARN("need row with an undecodable profile skipped", "cluster=%s ref=%u", name,
                        row->profile_ref);
                continue;
            }
            /* register the fingerprint once per profile ref (not per row) */
            if (bf_cycle_u32set_add(&c->fp_seen, row->profile_ref) &&
                bf_cycle_fpmap_put(c, np->fingerprint, row->profile_ref) != 0) {
                u32set_clear(&c->fp_seen); /* could not register it: try again next time */
                unregistered = true;
            }
            struct bf_engine_need *en = &c->eneeds[k++];
            memset(en, 0, sizeof *en);
            en->profile = np->p;
            memcpy(en->aggregate.v, row->aggregate, sizeof en->aggregate.v);
            memcpy(en->min_unit.v, row->min_unit, sizeof en->min_unit.v);
            en->arrival_ns = row->arrival_ns;
            en->fingerprint = np->fingerprint; /* the engine need not compute it again */
            uint32_t glen = 0;
            en->group = row->group_ref ? bf_str(s, row->group_ref, &glen) : NULL;
            en->group_len = en->group ? glen : 0;
            if (np->p.ipb <= BF_BUCKET_MAX)
                buckets[np->p.ipb]++;
        }
        int rc = bf_engine_set_needs(c->engine, name, rec.generation, c->eneeds, k);
        if (rc == -ENOMEM)
            return rc;
        if (rc == 0) {
            for (int b = 0; b < BF_BUCKET_COUNT; b++) {
                c->counts.demand_rows_by_bucket[b] -= ci->bucket_rows[b];
                c->counts.demand_rows_by_bucket[b] += buckets[b];
                ci->bucket_rows[b] = buckets[b];
            }
            c->counts.total_needs -= ci->rows;
            c->counts.total_needs += k;
            ci->rows = k;
            ci->rows_off = rec.rows_off;
            ci->rows_count = rec.rows_count;
            ci->rows_generation = rec.rows_generation;
            ci->generation = rec.generation;
            ci->known = 1;
            ci->fp_unregistered = unregistered;
            rep->clusters_reread++;
        }
    }
    return 0;
}

/* ------------------------------------------------------------ fingerprint map */

int bf_cycle_fpmap_put(struct bf_cycle *c, const char *fp, uint32_t ref)
{
    if (fpmap_ref(&c->fps, fp))
        return 0;
    if (fpmap_reserve(&c->fps, c->fps.n + 1))
        return -ENOMEM;
    char *key = strdup(fp);
    if (!key)
        return -ENOMEM;
    fpmap_put(&c->fps, key, ref); /* cannot fail: reserved */
    return 0;
}

/* ------------------------------------------------------------ u32 set */

bool bf_cycle_u32set_add(struct u32set *s, uint32_t key)
{
    if (key == 0 || u32set_ref(s, key))
        return false;
    return u32set_put(s, key, 1) == 0;
}

uint32_t bf_cycle_profile_ref(struct bf_cycle *c, const char *fp, const struct bf_need_profile *p)
{
    if (!fp || !fp[0])
        return 0;
    uint32_t ref = fpmap_get(&c->fps, fp, 0);
    if (ref || !p)
        return ref;
    /* a profile the engine made (NormalizeDemand folded a Same gang): intern it */
    struct bf_requirement *reqs = calloc(p->n_reqs + 1, sizeof *reqs);
    struct bf_spread *spr = calloc(p->n_spread + 1, sizeof *spr);
    size_t nv = 0;
    for (uint32_t i = 0; i < p->n_reqs; i++)
        nv += p->reqs[i].n_values;
    const char **vals = calloc(nv + 1, sizeof *vals);
    if (reqs && spr && vals) {
        size_t vi = 0;
        for (uint32_t i = 0; i < p->n_reqs; i++) {
            reqs[i] = p->reqs[i];
            reqs[i].values = vals + vi;
            for (uint32_t j = 0; j < p->reqs[i].n_values; j++)
                vals[vi++] = p->reqs[i].values[j];
        }
        memcpy(spr, p->spread, p->n_spread * sizeof *spr);
        struct bf_need_profile q = *p;
        q.reqs = reqs;
        q.spread = spr;
        uint32_t fref;
        if (bf_nprofile_intern(c->shm, &q, &ref, &fref) != 0)
            ref = 0;
        else
            bf_cycle_fpmap_put(c, fp, ref);
    }
    free(reqs);
    free(spr);
    free(vals);
    return ref;
}
