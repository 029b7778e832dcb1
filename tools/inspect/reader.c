/*
 * reader.c — the read-only side of bigfleet-inspect.
 *
 * Never a store into a mapping: the segments are mapped PROT_READ and every
 * read here is a load. Machine records are read with bf_inv_read_seq (the
 * one seqlock reader, src/shm; on a read-only attachment it counts no
 * retries into the segment); a record that stays write-locked for its
 * BF_SEQLOCK_READ_TRIES attempts is reported busy.
 *
 * Torn-down segments: unlinking a segment leaves our mapping intact (tmpfs
 * keeps the object while mapped), so removal and re-creation are detected
 * by stat()ing the segment name (insp_alive). A segment truncated under us
 * raises SIGBUS on the next touch: the fault guard turns a fault whose
 * address lies inside one of our mappings into a clear error (siglongjmp
 * back to the frame, exit 1); a fault anywhere else keeps the default action.
 *
 * Cycle results are double-buffered with a publish sequence (the protocol of
 * bigfleet/shm.h, src/shm/result.c): copy the published buffer, accept the
 * copy when bf_result_read_valid says so, retry a few times; the cycle never
 * waits for us.
 */
#include <dirent.h>
#include <errno.h>
#include <stddef.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bigfleet/strbuf.h"
#include "bigfleet/util.h"
#include "inspect.h"

/* ------------------------------------------------------------ fault guard */

static const struct bf_shm *g_shm;
static sigjmp_buf *volatile g_jmp;
static volatile sig_atomic_t g_sig, g_kind, g_code;
static volatile uintptr_t g_off;

static const char *const seg_names[BF_SEG_KIND_COUNT] = {"", "inventory", "needs", "rings",
                                                         "state"};

static int mapping_of(uintptr_t a, uintptr_t *off)
{
    if (!g_shm)
        return 0;
    for (int k = 1; k < BF_SEG_KIND_COUNT; k++) {
        uintptr_t b = (uintptr_t)g_shm->base[k];
        if (b && a >= b && a < b + g_shm->len[k]) {
            *off = a - b;
            return k;
        }
    }
    return 0;
}

static void on_fault(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    uintptr_t off = 0;
    int k = mapping_of((uintptr_t)si->si_addr, &off);
    if (!k) {
        /* not ours to explain: default action on the re-executed access */
        struct sigaction d;
        memset(&d, 0, sizeof d);
        d.sa_handler = SIG_DFL;
        sigaction(sig, &d, NULL);
        return;
    }
    g_sig = sig;
    g_kind = k;
    g_code = si->si_code;
    g_off = off;
    if (g_jmp)
        siglongjmp(*g_jmp, 1);
    static const char m[] = "bigfleet-inspect: the appliance's segments were torn down while "
                            "being read\n";
    ssize_t w = write(2, m, sizeof m - 1);
    (void)w;
    _exit(INSP_EXIT_RUNTIME);
}

void insp_fault_install(const struct bf_shm *s)
{
    g_shm = s;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, NULL);
    sigaction(SIGSEGV, &sa, NULL);
}

void insp_fault_arm(void *jb)
{
    g_jmp = jb;
}

const char *insp_fault_message(void)
{
    static char msg[256];
    const char *seg = (g_kind > 0 && g_kind < BF_SEG_KIND_COUNT) ? seg_names[g_kind] : "?";
    if (g_sig == SIGSEGV && g_code == SEGV_ACCERR)
        snprintf(msg, sizeof msg,
                 "refused an access to the read-only %s segment at offset %#lx "
                 "(a bug in bigfleet-inspect; nothing was written)",
                 seg, (unsigned long)g_off);
    else
        snprintf(msg, sizeof msg,
                 "the appliance's segments were torn down while being read (%s in the %s "
                 "segment at offset %#lx): the appliance stopped or was re-initialised",
                 g_sig == SIGBUS ? "SIGBUS" : "SIGSEGV", seg, (unsigned long)g_off);
    return msg;
}

/* ------------------------------------------------------------ records */

const char *insp_str(const struct bf_shm *s, uint32_t ref, uint32_t *len)
{
    uint32_t l = 0;
    const char *p = bf_str(s, ref, &l);
    uint64_t used = bf_str_arena_used(s);
    if (!p || (uint64_t)ref * 8 + 8 + (uint64_t)l + 1 > used || used > s->arena_bytes) {
        if (len)
            *len = 0;
        return NULL;
    }
    if (len)
        *len = l;
    return p;
}

void insp_scan(const struct bf_shm *s, struct insp_scan *o)
{
    int64_t t0 = bf_mono_ns();
    memset(o, 0, sizeof *o);
    uint32_t hwm = bf_inv_hwm(s);
    if (hwm > s->max_machines)
        hwm = s->max_machines;
    o->hwm = hwm;
    for (uint32_t i = 0; i < hwm; i++) {
        struct bf_machine_rec r;
        if (bf_inv_read(s, i, &r) != 0) {
            o->busy++;
            continue;
        }
        if (!(r.flags & BF_REC_VALID))
            continue;
        o->total++;
        unsigned st = r.state < BF_STATE_COUNT ? r.state : 0;
        unsigned ty = r.type_idx < BF_MAX_TYPES ? r.type_idx : 0;
        unsigned zo = r.zone_idx < BF_MAX_ZONES ? r.zone_idx : 0;
        o->by_state[st]++;
        o->by_stz[st][ty][zo]++;
        o->by_ct[r.capacity_type < BF_CT_COUNT ? r.capacity_type : 0]++;
        if (r.cluster)
            o->bound++;
        if (r.flags & BF_REC_NEEDS_REFRESH)
            o->needs_refresh++;
        if (r.flags & BF_REC_REJECTED)
            o->rejected++;
        if (bf_pending(s, i))
            o->in_flight++;
    }
    o->scan_ns = bf_mono_ns() - t0;
}

/* ------------------------------------------------------------ cycle result */

void insp_own_read(const struct bf_shm *s, struct insp_own *out)
{
    const struct bf_ownership_state *o = &s->st->own;
    const struct bf_stats_reconciler *rs = &s->st->reconciler;
    memset(out, 0, sizeof *out);
#define L(x) BF_STAT_GET(x)
    out->mode = L(o->mode);
    out->generation = L(o->generation);
    out->n_domains = L(o->n_domains);
    out->n_reserved = L(o->n_reserved);
    out->n_held = L(o->n_held);
    out->n_in = L(o->n_in);
    out->n_out = L(o->n_out);
    out->owned = L(rs->owned_machines);
    out->release_blocked = L(rs->release_blocked);
    out->not_owned = L(rs->machines_not_owned);
    out->released = L(rs->machines_released);
    out->transferred_out = L(o->transferred_out);
    out->transferred_in = L(o->transferred_in);
    out->speculative_out = L(o->speculative_out);
    out->speculative_in = L(o->speculative_in);
    out->drained = L(o->drained);
    out->expired = L(o->reservations_expired);
    out->store_errors = L(o->store_errors);
    for (int k = 0; k < BF_OWN_KINDS; k++)
        for (int x = 0; x < BF_OWN_OUTCOMES; x++)
            out->instructions[k][x] = L(o->instructions[k][x]);
#undef L
    /* the tables: written by the cycle between seq odd and even */
    _Static_assert(sizeof(struct insp_own) - offsetof(struct insp_own, n_pub_reservations) ==
                       sizeof(struct bf_ownership_state) -
                           offsetof(struct bf_ownership_state, n_pub_reservations),
                   "insp_own tables must mirror bf_ownership_state");
    out->consistent = bf_own_tables_read(s, &out->n_pub_reservations) == 0;
    if (out->n_pub_reservations > BF_OWN_PUB_RESERVATIONS)
        out->n_pub_reservations = BF_OWN_PUB_RESERVATIONS;
    if (out->n_pub_domains > BF_OWN_PUB_DOMAINS)
        out->n_pub_domains = BF_OWN_PUB_DOMAINS;
    for (uint32_t i = 0; i < out->n_pub_domains; i++)
        out->domains[i][BF_OWN_DOMAIN_TEXT - 1] = 0;
}

int insp_cycle_read(const struct bf_shm *s, struct insp_cycle *c, bool want_verdicts)
{
    const struct bf_state_main *st = s->st;
    c->consistent = false;
    c->nv = 0;
    if (want_verdicts && !c->v) {
        c->v = malloc((size_t)(s->max_needs ? s->max_needs : 1) * sizeof *c->v);
        if (!c->v)
            return -ENOMEM;
    }
    /* the publish protocol of bigfleet/shm.h ("Cycle results"), with more
     * tries than bf_result_read: inspect also copies the verdict rows */
    for (unsigned t = 0; t < 64; t++) {
        struct bf_result_read rd;
        bf_result_read_begin(s, &rd);
        uint32_t p = rd.buffer;
        bf_shm_load_words(&c->r, &st->result[p], sizeof c->r);
        uint32_t nv = c->r.n_verdicts, ne = c->r.n_verdict_extras;
        bf_verdict_bound(s, p, &nv, &ne); /* never past the file's end */
        for (uint32_t i = 0; want_verdicts && i < nv; i++)
            bf_verdict_read(s, p, i, nv, ne, &c->v[i]);
        if (bf_result_read_valid(s, &rd)) {
            c->consistent = true;
            c->buffer = p;
            c->publish_seq = rd.seq;
            c->nv = want_verdicts ? nv : 0;
            break;
        }
        bf_shm_backoff(t);
    }
    /* if the cycle kept publishing faster than we copy, the last copy is
     * kept and flagged inconsistent */
    if (c->r.n_shortfalls > BF_SHORTFALL_MAX)
        c->r.n_shortfalls = BF_SHORTFALL_MAX;
    return 0;
}

void insp_cycle_free(struct insp_cycle *c)
{
    free(c->v);
    c->v = NULL;
}

/* ------------------------------------------------------------ clusters */

int insp_clusters(const struct bf_shm *s, struct insp_cluster **out)
{
    uint32_t n = BF_SHARED_LOAD(s->needs->n_clusters);
    if (n > s->max_clusters)
        n = s->max_clusters;
    struct insp_cluster *v = calloc(n ? n : 1, sizeof *v);
    if (!v)
        return -ENOMEM;
    int k = 0;
    for (uint32_t i = 0; i < n; i++) {
        struct bf_cluster_rec r;
        if (bf_cluster_read(s, i, &r, NULL) != 0) {
            v[k].idx = i;
            v[k].busy = true;
            v[k].name = "";
            k++;
            continue;
        }
        if (!r.in_use)
            continue;
        v[k].idx = i;
        v[k].r = r;
        v[k].name = insp_str(s, r.name_ref, &v[k].name_len);
        if (!v[k].name) {
            v[k].name = "?";
            v[k].name_len = 1;
        }
        k++;
    }
    *out = v;
    return k;
}

/* ------------------------------------------------------------ arena */

struct insp_arena_blk {
    struct insp_arena_blk *next;
    size_t used, cap;
    _Alignas(16) char data[];
};

void *insp_arena_alloc(struct insp_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    struct insp_arena_blk *b = a->head;
    if (!b || b->used + n > b->cap) {
        size_t cap = n > 65536 ? n : 65536;
        b = malloc(sizeof *b + cap);
        if (!b) {
            fputs("bigfleet-inspect: out of memory\n", stderr);
            exit(INSP_EXIT_RUNTIME);
        }
        b->next = a->head;
        b->used = 0;
        b->cap = cap;
        a->head = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

char *insp_arena_strndup(struct insp_arena *a, const char *s, size_t n)
{
    char *p = insp_arena_alloc(a, n + 1);
    if (n)
        memcpy(p, s, n);
    p[n] = 0;
    return p;
}

void insp_arena_free(struct insp_arena *a)
{
    while (a->head) {
        struct insp_arena_blk *n = a->head->next;
        free(a->head);
        a->head = n;
    }
}

/* ------------------------------------------------------------ needs */

void insp_vec_res(const struct bf_dims *d, const int64_t *v, struct insp_arena *a,
                  struct insp_res *out)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < d->n && i < BF_MAX_DIMS; i++)
        if (v[i])
            n++;
    out->n = n;
    out->kv = n ? insp_arena_alloc(a, n * sizeof *out->kv) : NULL;
    uint32_t k = 0;
    for (uint32_t i = 0; i < d->n && i < BF_MAX_DIMS; i++) {
        if (!v[i])
            continue;
        char q[48];
        bf_quantity_format(v[i], bf_dim_is_bytes(d->names[i]), q, sizeof q);
        out->kv[k].key = insp_arena_strndup(a, d->names[i], strnlen(d->names[i], BF_DIM_NAME_MAX));
        out->kv[k].value = insp_arena_strndup(a, q, strlen(q));
        k++;
    }
}

struct vkey {
    uint32_t cluster, profile, group, idx;
};

static int vkey_cmp(const void *a, const void *b)
{
    const struct vkey *x = a, *y = b;
    if (x->cluster != y->cluster)
        return x->cluster < y->cluster ? -1 : 1;
    if (x->profile != y->profile)
        return x->profile < y->profile ? -1 : 1;
    if (x->group != y->group)
        return x->group < y->group ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static int nv_cmp(const void *a, const void *b)
{
    const struct insp_nv *x = a, *y = b;
    if (x->priority != y->priority)
        return x->priority > y->priority ? -1 : 1;
    if (x->arrival_ns != y->arrival_ns)
        return x->arrival_ns < y->arrival_ns ? -1 : 1;
    size_t l = x->cluster_len < y->cluster_len ? x->cluster_len : y->cluster_len;
    int c = memcmp(x->cluster_id, y->cluster_id, l);
    if (c)
        return c;
    return x->cluster_len < y->cluster_len ? -1 : x->cluster_len > y->cluster_len;
}

static const char *str_or(const struct bf_shm *s, uint32_t ref, struct insp_arena *a, size_t *len)
{
    uint32_t l;
    const char *p = insp_str(s, ref, &l);
    if (!p) {
        char tmp[48];
        int n = snprintf(tmp, sizeof tmp, "<bad string ref %u>", ref);
        *len = (size_t)n;
        return insp_arena_strndup(a, tmp, (size_t)n);
    }
    *len = l;
    return p;
}

/* Fills the profile part of a NeedView from a NeedProfileBlob ref. */
static void nv_profile(const struct bf_shm *s, struct bf_blob_cache *cache, uint32_t ref,
                       struct insp_arena *a, struct insp_nv *nv)
{
    const struct bf_nprofile *np = insp_str(s, ref, NULL) ? bf_nprofile_get(cache, s, ref) : NULL;
    if (!np) {
        char tmp[64];
        int n = snprintf(tmp, sizeof tmp, "<undecodable need profile ref %u>", ref);
        nv->fingerprint = insp_arena_strndup(a, tmp, (size_t)n);
        return;
    }
    nv->fingerprint = np->fingerprint;
    nv->priority = np->p.priority;
    nv->ipb = np->p.ipb;
    nv->rpb = np->p.rpb;
    nv->n_reqs = np->p.n_reqs;
    nv->reqs = np->p.reqs;
    nv->n_spread = np->p.n_spread;
    nv->spread = np->p.spread;
}

static void nv_verdict(const struct bf_dims *d, const struct bf_verdict_row *v,
                       struct insp_arena *a, struct insp_nv *nv)
{
    nv->has_verdict = true;
    nv->satisfied = v->satisfied != 0;
    nv->claimed = v->claimed_machine_count;
    nv->bootstrap = v->bootstrap_count;
    nv->provision = v->provision_count;
    nv->same_domain = insp_arena_strndup(a, v->same_domain, strnlen(v->same_domain, BF_DOMAIN_MAX));
    nv->same_satisfiable = v->same_satisfiable != 0;
    nv->parked = v->acquisition_parked != 0;
    nv->parked_age = v->parked_age_cycles;
    nv->age_unmet = v->age_cycles_unmet;
    nv->unmet_reason = v->unmet_reason;
    if (!nv->satisfied)
        insp_vec_res(d, v->residual_deficit, a, &nv->residual);
    nv->has_matching = v->has_matching_supply != 0;
    nv->m_idle = v->matching_idle;
    nv->m_configured = v->matching_configured;
    nv->m_speculative = v->matching_speculative;
    nv->m_capped = v->matching_capped != 0;
    nv->has_preemption = v->has_preemption != 0;
    nv->victims = v->victims_found;
    if (nv->has_preemption)
        insp_vec_res(d, v->capacity_freed, a, &nv->freed);
    uint32_t nc = v->n_same_candidates;
    if (nc > BF_SAME_CANDIDATES_MAX)
        nc = BF_SAME_CANDIDATES_MAX;
    nv->n_cand = nc;
    nv->cand = nc ? insp_arena_alloc(a, nc * sizeof *nv->cand) : NULL;
    for (uint32_t i = 0; i < nc; i++) {
        const struct bf_domain_coverage *dc = &v->same_candidates[i];
        nv->cand[i].domain = insp_arena_strndup(a, dc->domain, strnlen(dc->domain, BF_DOMAIN_MAX));
        nv->cand[i].per_mille = dc->coverage_per_mille;
        nv->cand[i].satisfiable = dc->satisfiable != 0;
    }
}

static uint32_t vk_lower(const struct vkey *vk, uint32_t n, const struct vkey *key)
{
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (vkey_cmp(&vk[mid], key) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/*
 * NormalizeDemand (reference/engine.md §3) folds a Same gang whose whole
 * aggregate fits on one machine into a new plain Need of the same cluster:
 * the profile minus every Same requirement, group "", MinUnit = one member's
 * aggregate. Its verdict names that new profile, so a folded row has no
 * exact match: find the folded verdict by cluster, empty group, MinUnit ==
 * the row's aggregate and the stripped fingerprint. Returns the vk index
 * (marked 2 in vused: a folded target), or -1.
 */
static int64_t fold_target(const struct bf_shm *s, struct bf_blob_cache *cache,
                           const struct insp_cycle *cy, const struct vkey *vk, uint32_t nvk,
                           uint8_t *vused, uint32_t cluster_ref, const struct bf_need_row *row)
{
    if (!insp_str(s, row->profile_ref, NULL))
        return -1;
    const struct bf_nprofile *np = bf_nprofile_get(cache, s, row->profile_ref);
    if (!np || bf_profile_same_index(&np->p) < 0)
        return -1;
    struct bf_requirement reqs[64];
    struct bf_need_profile q = np->p;
    uint32_t k = 0;
    for (uint32_t i = 0; i < np->p.n_reqs && k < 64; i++)
        if (np->p.reqs[i].op != BF_OP_SAME)
            reqs[k++] = np->p.reqs[i];
    q.reqs = reqs;
    q.n_reqs = k;
    char fp[4096];
    if (bf_profile_fingerprint(&q, fp, sizeof fp) >= sizeof fp)
        return -1;
    struct vkey key = {cluster_ref, 0, 0, 0};
    for (uint32_t i = vk_lower(vk, nvk, &key); i < nvk && vk[i].cluster == cluster_ref; i++) {
        if (vused[i] == 1 || vk[i].group != 0)
            continue;
        const struct bf_verdict_row *v = &cy->v[vk[i].idx];
        if (memcmp(v->min_unit, row->aggregate, sizeof v->min_unit) != 0)
            continue;
        const struct bf_nprofile *vp = insp_str(s, v->need_profile_ref, NULL)
                                           ? bf_nprofile_get(cache, s, v->need_profile_ref)
                                           : NULL;
        if (vp && vp->fingerprint && strcmp(vp->fingerprint, fp) == 0) {
            vused[i] = 2;
            return i;
        }
    }
    return -1;
}

int insp_needs_local(const struct bf_shm *s, struct bf_blob_cache *cache, const char *cluster,
                     uint32_t limit, struct insp_needs *out)
{
    memset(out, 0, sizeof *out);
    struct insp_arena *a = &out->arena;
    struct bf_dims dims;
    bf_shm_dims(s, &dims);
    bool filter = cluster && *cluster;
    int rc = 0;

    struct insp_cluster *cl = NULL;
    int ncl = insp_clusters(s, &cl);
    if (ncl < 0)
        return ncl;
    uint32_t want_ref = 0;
    if (filter) {
        if (bf_str_find(s, cluster, (uint32_t)strlen(cluster), &want_ref) != 0)
            want_ref = 0;
        bool found = false;
        for (int i = 0; i < ncl; i++)
            if (!cl[i].busy && want_ref && cl[i].r.name_ref == want_ref)
                found = true;
        if (!found) {
            free(cl);
            return -ENOENT;
        }
    }

    struct insp_cycle cy;
    memset(&cy, 0, sizeof cy);
    rc = insp_cycle_read(s, &cy, true);
    if (rc) {
        free(cl);
        return rc;
    }
    out->cycle = (int64_t)cy.r.cycle;
    out->computed_at_ns = cy.r.computed_at_ns;

    /* verdict keys, sorted for the join */
    struct vkey *vk = malloc((cy.nv ? cy.nv : 1) * sizeof *vk);
    uint8_t *vused = calloc(cy.nv ? cy.nv : 1, 1);
    uint32_t *folded = calloc(cy.nv ? cy.nv : 1, sizeof *folded);
    if (!vk || !vused || !folded) {
        rc = -ENOMEM;
        goto out;
    }
    uint32_t nvk = 0;
    for (uint32_t i = 0; i < cy.nv; i++) {
        if (filter && cy.v[i].cluster_ref != want_ref)
            continue;
        vk[nvk++] =
            (struct vkey){cy.v[i].cluster_ref, cy.v[i].need_profile_ref, cy.v[i].group_ref, i};
    }
    qsort(vk, nvk, sizeof *vk, vkey_cmp);

    /* need rows of the selected clusters */
    uint32_t cap = 256, nrows = 0;
    struct bf_need_row *rows = malloc(cap * sizeof *rows);
    if (!rows) {
        rc = -ENOMEM;
        goto out;
    }
    size_t nv_cap = 64;
    out->v = malloc(nv_cap * sizeof *out->v);
    if (!out->v) {
        free(rows);
        rc = -ENOMEM;
        goto out;
    }
    for (int ci = 0; ci < ncl; ci++) {
        if (cl[ci].busy) {
            out->busy_clusters++;
            continue;
        }
        if (filter && cl[ci].r.name_ref != want_ref)
            continue;
        struct bf_cluster_rec rec;
        int n;
        for (;;) {
            n = bf_needs_copy(s, cl[ci].idx, &rec, rows, cap);
            if (n < 0 || (uint32_t)n <= cap)
                break;
            cap = (uint32_t)n;
            struct bf_need_row *nr = realloc(rows, cap * sizeof *rows);
            if (!nr) {
                free(rows);
                rc = -ENOMEM;
                goto out;
            }
            rows = nr;
        }
        if (n < 0) {
            out->busy_clusters++;
            continue;
        }
        nrows = (uint32_t)n;
        for (uint32_t r = 0; r < nrows; r++) {
            const struct bf_need_row *row = &rows[r];
            /* 1. the verdict of this very row: same (cluster, profile, group) */
            struct vkey key = {rec.name_ref, row->profile_ref, row->group_ref, 0};
            uint32_t lo = vk_lower(vk, nvk, &key);
            int64_t match = -1;
            for (; lo < nvk && vk[lo].cluster == key.cluster && vk[lo].profile == key.profile &&
                   vk[lo].group == key.group;
                 lo++)
                if (!vused[lo]) {
                    vused[lo] = 1;
                    match = lo;
                    break;
                }
            /* 2. a Same gang NormalizeDemand folded into a plain Need */
            if (match < 0) {
                int64_t f = fold_target(s, cache, &cy, vk, nvk, vused, rec.name_ref, row);
                if (f >= 0) {
                    folded[f]++;
                    out->rows_folded++;
                    continue;
                }
            }
            if ((size_t)out->n == nv_cap &&
                bf_grow((void **)&out->v, &nv_cap, (size_t)out->n + 1, sizeof *out->v)) {
                free(rows);
                rc = -ENOMEM;
                goto out;
            }
            struct insp_nv *nv = &out->v[out->n++];
            memset(nv, 0, sizeof *nv);
            nv->in_table = true;
            nv->table_rows = 1;
            nv->cluster_id = str_or(s, rec.name_ref, a, &nv->cluster_len);
            nv->arrival_ns = row->arrival_ns;
            nv_profile(s, cache, row->profile_ref, a, nv);
            insp_vec_res(&dims, row->aggregate, a, &nv->aggregate);
            insp_vec_res(&dims, row->min_unit, a, &nv->min_unit);
            nv->group = str_or(s, row->group_ref, a, &nv->group_len);
            if (match >= 0)
                nv_verdict(&dims, &cy.v[vk[match].idx], a, nv);
            else
                out->rows_only++;
        }
    }
    free(rows);
    /* verdicts of folded Needs, and verdicts whose row left the table since */
    for (uint32_t i = 0; i < nvk; i++) {
        if (vused[i] == 1)
            continue;
        if ((size_t)out->n == nv_cap &&
            bf_grow((void **)&out->v, &nv_cap, (size_t)out->n + 1, sizeof *out->v)) {
            rc = -ENOMEM;
            goto out;
        }
        const struct bf_verdict_row *v = &cy.v[vk[i].idx];
        struct insp_nv *nv = &out->v[out->n++];
        memset(nv, 0, sizeof *nv);
        nv->cluster_id = str_or(s, v->cluster_ref, a, &nv->cluster_len);
        nv->arrival_ns = v->arrival_ns;
        nv_profile(s, cache, v->need_profile_ref, a, nv);
        insp_vec_res(&dims, v->aggregate, a, &nv->aggregate);
        insp_vec_res(&dims, v->min_unit, a, &nv->min_unit);
        nv->group = str_or(s, v->group_ref, a, &nv->group_len);
        nv_verdict(&dims, v, a, nv);
        nv->table_rows = folded[i];
        nv->folded = folded[i] > 0;
        nv->in_table = folded[i] > 0;
        if (!folded[i])
            out->verdicts_only++;
    }
    qsort(out->v, out->n, sizeof *out->v, nv_cmp);
    out->total = out->n;
    if (limit && out->n > limit)
        out->n = limit;
out:
    free(vk);
    free(vused);
    free(folded);
    insp_cycle_free(&cy);
    free(cl);
    return rc;
}

void insp_needs_free(struct insp_needs *n)
{
    free(n->v);
    n->v = NULL;
    insp_arena_free(&n->arena);
}

/* ------------------------------------------------------------ liveness */

static void state_path(const char *shard_id, char *buf, size_t n)
{
    char name[128];
    bf_shm_name(shard_id, BF_SEG_STATE, name, sizeof name);
    snprintf(buf, n, "/dev/shm%s", name);
}

int insp_ident_take(const char *shard_id, struct insp_ident *id)
{
    char p[192];
    state_path(shard_id, p, sizeof p);
    struct stat st;
    if (stat(p, &st) != 0)
        return -errno;
    id->dev = st.st_dev;
    id->ino = st.st_ino;
    return 0;
}

bool insp_supervisor_running(const struct bf_shm *s)
{
    uint32_t pid = s->state_hdr->supervisor_pid;
    if (pid == 0)
        return false;
    return kill((pid_t)pid, 0) == 0 || errno != ESRCH;
}

int insp_alive(const struct bf_shm *s, const struct insp_ident *id, char *msg, size_t n)
{
    if (BF_SHARED_LOAD(s->st->shutting_down)) {
        snprintf(msg, n, "the appliance for shard id %s is shutting down", s->shard_id);
        return -1;
    }
    if (!insp_supervisor_running(s)) {
        snprintf(msg, n, "the appliance for shard id %s went away (supervisor pid %u is gone)",
                 s->shard_id, s->state_hdr->supervisor_pid);
        return -1;
    }
    struct insp_ident now;
    int rc = insp_ident_take(s->shard_id, &now);
    if (rc == -ENOENT) {
        snprintf(msg, n, "the segments of shard id %s were removed (appliance torn down)",
                 s->shard_id);
        return -1;
    }
    if (rc == 0 && (now.dev != id->dev || now.ino != id->ino)) {
        snprintf(msg, n,
                 "the segments of shard id %s were re-created (appliance restarted); run "
                 "bigfleet-inspect again",
                 s->shard_id);
        return -1;
    }
    return 0;
}

void insp_list_shards(char *buf, size_t n)
{
    buf[0] = 0;
    DIR *d = opendir("/dev/shm");
    if (!d)
        return;
    size_t used = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *nm = e->d_name;
        size_t l = strlen(nm);
        if (strncmp(nm, "bigfleet.", 9) != 0 || l < 9 + 6 || strcmp(nm + l - 6, ".state") != 0)
            continue;
        int w = snprintf(buf + used, n - used, "%s%.*s", used ? ", " : "", (int)(l - 15), nm + 9);
        if (w < 0 || (size_t)w >= n - used) {
            buf[used] = 0;
            break;
        }
        used += (size_t)w;
    }
    closedir(d);
}
