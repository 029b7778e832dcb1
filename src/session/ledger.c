/*
 * ledger.c — reading the cycle's published results and encoding the
 * verdict ledger as ShardRead/InspectNeeds frames (bigfleet/ledger.h).
 *
 * Design notes
 *   - Read side of the publish protocol only, through the one
 *     implementation in src/shm/result.c (bf_result_read_begin/_valid);
 *     the rows are copied with relaxed word loads (bf_shm_load_words).
 *   - No sorting: the cycle publishes the rows in the engine's verdict
 *     order, which is the order InspectNeeds promises.
 *   - Encoding builds protobuf-c structs on the stack pointing at the
 *     cached profile (bigfleet/blobs.h) and at strings in the string table,
 *     and packs into a reusable buffer: no per-field allocation.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/ledger.h"
#include "bigfleet/strbuf.h"
#include "bigfleet/v1alpha1/shardread.pb-c.h"

_Static_assert(sizeof(struct bf_verdict_row) % 8 == 0, "verdict rows are copied in words");
_Static_assert(sizeof(struct bf_cycle_result) % 8 == 0, "results are copied in words");

void bf_ledger_snapshot_free(struct bf_ledger_snapshot *snap)
{
    free(snap->rows);
    memset(snap, 0, sizeof *snap);
}

static int grow_rows(struct bf_ledger_snapshot *snap, uint32_t want)
{
    if (want <= snap->cap)
        return 0;
    uint32_t c = snap->cap ? snap->cap : 64;
    while (c < want)
        c = c > UINT32_MAX / 2 ? want : c * 2;
    struct bf_verdict_row *r = realloc(snap->rows, (size_t)c * sizeof *r);
    if (!r)
        return -ENOMEM;
    snap->rows = r;
    snap->cap = c;
    return 0;
}

int bf_ledger_snapshot(const struct bf_shm *s, const struct bf_ledger_filter *f,
                       struct bf_ledger_snapshot *snap, uint32_t *retries)
{
    const struct bf_state_main *st = s->st;
    memset(snap, 0, sizeof *snap);
    uint32_t again = 0;
    int rc = -EAGAIN;
    for (int t = 0; t < BF_RESULT_READ_TRIES; t++) {
        struct bf_result_read rd;
        bf_result_read_begin(s, &rd);
        uint32_t b = rd.buffer;
        const struct bf_cycle_result *r = &st->result[b];
        uint64_t cycle = BF_SHM_PEEK(r->cycle);
        int64_t at = BF_SHM_PEEK(r->computed_at_ns);
        uint32_t nv = BF_SHM_PEEK(r->n_verdicts), ne = BF_SHM_PEEK(r->n_verdict_extras);
        bf_verdict_bound(s, b, &nv, &ne); /* a torn header; the re-check below discards it */
        if (cycle == 0)
            nv = 0;
        uint32_t total = 0, n = 0;
        bool overflow = false;
        if (!f->by_cluster) {
            total = nv;
            n = f->limit && f->limit < nv ? f->limit : nv;
            if (f->max_rows && n > f->max_rows) {
                overflow = true;
            } else if ((rc = grow_rows(snap, n)) != 0) {
                bf_ledger_snapshot_free(snap);
                return rc;
            } else {
                for (uint32_t i = 0; i < n; i++)
                    bf_verdict_read(s, b, i, nv, ne, &snap->rows[i]);
            }
        } else {
            for (uint32_t i = 0; i < nv; i++) {
                if (BF_SHM_PEEK(s->verdicts[bf_verdict_index(b, i)].row.cluster_ref) !=
                    f->cluster_ref)
                    continue;
                total++;
                if ((f->limit && n >= f->limit) || overflow)
                    continue;
                if (f->max_rows && n >= f->max_rows) {
                    overflow = true;
                    continue;
                }
                if ((rc = grow_rows(snap, n + 1)) != 0) {
                    bf_ledger_snapshot_free(snap);
                    return rc;
                }
                bf_verdict_read(s, b, i, nv, ne, &snap->rows[n++]);
            }
        }
        if (!bf_result_read_valid(s, &rd)) {
            again++;
            continue;
        }
        if (retries)
            *retries = again;
        if (overflow) {
            bf_ledger_snapshot_free(snap);
            return -ENOBUFS;
        }
        snap->cycle = cycle;
        snap->computed_at_ns = cycle ? at : 0;
        snap->total = total;
        snap->n = n;
        return 0;
    }
    if (retries)
        *retries = again;
    bf_ledger_snapshot_free(snap);
    return -EAGAIN;
}

/* ------------------------------------------------------------ encoding */

void bf_ledger_buf_free(struct bf_ledger_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

static int pack(const Bigfleet__V1alpha1__InspectNeedsResponse *m, struct bf_ledger_buf *b)
{
    size_t n = bigfleet__v1alpha1__inspect_needs_response__get_packed_size(m);
    if (bf_grow((void **)&b->data, &b->cap, n, 1))
        return -ENOMEM;
    b->len = bigfleet__v1alpha1__inspect_needs_response__pack(m, b->data);
    return 0;
}

int bf_ledger_encode_header(uint64_t cycle, int64_t computed_at_ns, uint32_t total_needs,
                            struct bf_ledger_buf *b)
{
    Bigfleet__V1alpha1__InspectNeedsHeader h = BIGFLEET__V1ALPHA1__INSPECT_NEEDS_HEADER__INIT;
    h.cycle = cycle > INT64_MAX ? INT64_MAX : (int64_t)cycle;
    h.computed_at_unix_nanos = computed_at_ns;
    h.total_needs = total_needs > INT32_MAX ? INT32_MAX : (int32_t)total_needs;
    Bigfleet__V1alpha1__InspectNeedsResponse m = BIGFLEET__V1ALPHA1__INSPECT_NEEDS_RESPONSE__INIT;
    m.frame_case = BIGFLEET__V1ALPHA1__INSPECT_NEEDS_RESPONSE__FRAME_HEADER;
    m.header = &h;
    return pack(&m, b);
}

/* Quantity maps: one set of entries per vector (CapacityNeed's two map
 * entry types and Resources' have the same shape: base, key, value). */
struct qmap {
    struct bf_kv kv[BF_MAX_DIMS];
    char buf[BF_MAX_DIMS][32];
    uint32_t n;
};

static void qmap_of(const struct bf_shm *s, const int64_t v[BF_MAX_DIMS], struct qmap *q)
{
    bf_vec vec;
    memcpy(vec.v, v, sizeof vec.v);
    q->n = bf_vec_to_kv(s, &vec, q->kv, q->buf);
}

struct resources {
    Bigfleet__V1alpha1__Resources r;
    Bigfleet__V1alpha1__Resources__ResourcesEntry e[BF_MAX_DIMS], *p[BF_MAX_DIMS];
};

static void resources_of(const struct qmap *q, struct resources *out)
{
    bigfleet__v1alpha1__resources__init(&out->r);
    for (uint32_t i = 0; i < q->n; i++) {
        bigfleet__v1alpha1__resources__resources_entry__init(&out->e[i]);
        out->e[i].key = (char *)q->kv[i].key;
        out->e[i].value = (char *)q->kv[i].value;
        out->p[i] = &out->e[i];
    }
    out->r.n_resources = q->n;
    out->r.resources = out->p;
}

int bf_ledger_encode_need(const struct bf_shm *s, struct bf_blob_cache *c,
                          const struct bf_verdict_row *row, struct bf_ledger_buf *b)
{
    int rc = 0;
    const struct bf_nprofile *np = bf_nprofile_get(c, s, row->need_profile_ref);
    if (!np || row->need_profile_ref == 0)
        rc = 1;
    /* ---- the CapacityNeed */
    Bigfleet__V1alpha1__CapacityNeed need = BIGFLEET__V1ALPHA1__CAPACITY_NEED__INIT;
    Bigfleet__V1alpha1__NodeSelectorRequirement *req = NULL, **reqp = NULL;
    Bigfleet__V1alpha1__TopologySpread *spr = NULL, **sprp = NULL;
    if (np && rc == 0) {
        const struct bf_need_profile *p = &np->p;
        need.priority = p->priority;
        need.interruption_penalty_bucket = p->ipb;
        need.reclamation_penalty_bucket = p->rpb;
        if (p->n_reqs) {
            req = calloc(p->n_reqs, sizeof *req);
            reqp = calloc(p->n_reqs, sizeof *reqp);
            if (!req || !reqp) {
                rc = -ENOMEM;
                goto out;
            }
            for (uint32_t i = 0; i < p->n_reqs; i++) {
                bigfleet__v1alpha1__node_selector_requirement__init(&req[i]);
                req[i].key = (char *)p->reqs[i].key;
                req[i].operator_ = p->reqs[i].op;
                req[i].n_values = p->reqs[i].n_values;
                req[i].values = (char **)p->reqs[i].values;
                reqp[i] = &req[i];
            }
            need.n_requirements = p->n_reqs;
            need.requirements = reqp;
        }
        if (p->n_spread) {
            spr = calloc(p->n_spread, sizeof *spr);
            sprp = calloc(p->n_spread, sizeof *sprp);
            if (!spr || !sprp) {
                rc = -ENOMEM;
                goto out;
            }
            for (uint32_t i = 0; i < p->n_spread; i++) {
                bigfleet__v1alpha1__topology_spread__init(&spr[i]);
                spr[i].topology_key = (char *)p->spread[i].topology_key;
                spr[i].max_skew = p->spread[i].max_skew;
                spr[i].when_unsatisfiable = p->spread[i].when;
                sprp[i] = &spr[i];
            }
            need.n_spread = p->n_spread;
            need.spread = sprp;
        }
    }
    struct qmap agg, minu, def, freed;
    qmap_of(s, row->aggregate, &agg);
    qmap_of(s, row->min_unit, &minu);
    Bigfleet__V1alpha1__CapacityNeed__AggregateResourcesEntry ae[BF_MAX_DIMS], *aep[BF_MAX_DIMS];
    Bigfleet__V1alpha1__CapacityNeed__MinUnitEntry me[BF_MAX_DIMS], *mep[BF_MAX_DIMS];
    for (uint32_t i = 0; i < agg.n; i++) {
        bigfleet__v1alpha1__capacity_need__aggregate_resources_entry__init(&ae[i]);
        ae[i].key = (char *)agg.kv[i].key;
        ae[i].value = (char *)agg.kv[i].value;
        aep[i] = &ae[i];
    }
    need.n_aggregate_resources = agg.n;
    need.aggregate_resources = aep;
    for (uint32_t i = 0; i < minu.n; i++) {
        bigfleet__v1alpha1__capacity_need__min_unit_entry__init(&me[i]);
        me[i].key = (char *)minu.kv[i].key;
        me[i].value = (char *)minu.kv[i].value;
        mep[i] = &me[i];
    }
    need.n_min_unit = minu.n;
    need.min_unit = mep;
    if (row->group_ref) {
        uint32_t gl = 0;
        const char *g = bf_str(s, row->group_ref, &gl);
        if (g && gl) {
            need.group.data = (uint8_t *)g;
            need.group.len = gl;
        }
    }
    /* ---- the view */
    Bigfleet__V1alpha1__NeedView v = BIGFLEET__V1ALPHA1__NEED_VIEW__INIT;
    v.need = &need;
    const char *cid = bf_str(s, row->cluster_ref, NULL);
    v.cluster_id = (char *)(cid ? cid : "");
    v.arrival_unix_nanos = row->arrival_ns;
    v.profile_fingerprint = (char *)(np && rc == 0 && np->fingerprint ? np->fingerprint : "");
    v.satisfied = row->satisfied != 0;
    struct resources rdef, rfreed;
    if (!row->satisfied) {
        qmap_of(s, row->residual_deficit, &def);
        if (def.n) {
            resources_of(&def, &rdef);
            v.residual_deficit = &rdef.r;
        }
    }
    v.claimed_machine_count = row->claimed_machine_count;
    v.bootstrap_count = row->bootstrap_count;
    v.provision_count = row->provision_count;
    char dom[BF_DOMAIN_MAX];
    memcpy(dom, row->same_domain, sizeof dom);
    dom[BF_DOMAIN_MAX - 1] = 0;
    v.same_domain = dom;
    v.same_satisfiable = row->same_satisfiable != 0;
    v.acquisition_parked = row->acquisition_parked != 0;
    v.parked_age_cycles = row->parked_age_cycles;
    v.age_cycles_unmet = row->age_cycles_unmet;
    v.unmet_reason = row->unmet_reason;
    Bigfleet__V1alpha1__MatchingSupply ms = BIGFLEET__V1ALPHA1__MATCHING_SUPPLY__INIT;
    if (!row->satisfied && row->has_matching_supply) {
        ms.idle = row->matching_idle;
        ms.configured = row->matching_configured;
        ms.speculative = row->matching_speculative;
        ms.capped = row->matching_capped != 0;
        v.matching_supply = &ms;
    }
    Bigfleet__V1alpha1__PreemptionSummary ps = BIGFLEET__V1ALPHA1__PREEMPTION_SUMMARY__INIT;
    if (row->has_preemption && row->victims_found > 0) {
        ps.victims_found = row->victims_found;
        qmap_of(s, row->capacity_freed, &freed);
        if (freed.n) {
            resources_of(&freed, &rfreed);
            ps.capacity_freed = &rfreed.r;
        }
        v.preemption = &ps;
    }
    Bigfleet__V1alpha1__DomainCoverage dc[BF_SAME_CANDIDATES_MAX], *dcp[BF_SAME_CANDIDATES_MAX];
    char dcn[BF_SAME_CANDIDATES_MAX][BF_DOMAIN_MAX];
    uint32_t nc = row->n_same_candidates < BF_SAME_CANDIDATES_MAX ? row->n_same_candidates
                                                                  : BF_SAME_CANDIDATES_MAX;
    for (uint32_t i = 0; i < nc; i++) {
        bigfleet__v1alpha1__domain_coverage__init(&dc[i]);
        memcpy(dcn[i], row->same_candidates[i].domain, BF_DOMAIN_MAX);
        dcn[i][BF_DOMAIN_MAX - 1] = 0;
        dc[i].domain = dcn[i];
        dc[i].coverage_per_mille = row->same_candidates[i].coverage_per_mille;
        dc[i].satisfiable = row->same_candidates[i].satisfiable != 0;
        dcp[i] = &dc[i];
    }
    v.n_same_candidates = nc;
    v.same_candidates = dcp;
    Bigfleet__V1alpha1__InspectNeedsResponse m = BIGFLEET__V1ALPHA1__INSPECT_NEEDS_RESPONSE__INIT;
    m.frame_case = BIGFLEET__V1ALPHA1__INSPECT_NEEDS_RESPONSE__FRAME_NEED;
    m.need = &v;
    int prc = pack(&m, b);
    if (prc)
        rc = prc;
out:
    free(req);
    free(reqp);
    free(spr);
    free(sprp);
    return rc;
}
