/*
 * result.c — the publish protocol of the cycle's results (bigfleet/shm.h,
 * "Cycle results"): one writer (the cycle), any number of readers (session,
 * bigfleet-inspect), two buffers, one sequence counter.
 *
 * Why a copy is good when publish_seq moved by less than 2: the writer
 * makes the counter odd (s+1), fills buffer published^1, flips `published`
 * and makes it even (s+2). A reader that saw s0 and copied buffer p:
 *   - s0 even (= s), p the published buffer: the next publish writes the
 *     other buffer; p is rewritten only by the publish after it, which
 *     first stores s+3;
 *   - s0 odd (= s+1), p not flipped yet: p is the published buffer of the
 *     publish in progress' predecessor, next rewritten by the publish after
 *     the one in progress, which first stores s+3;
 *   - s0 odd, p already flipped: p was completely written before the flip
 *     (release/acquire on `published`) and is rewritten from s+5 on.
 * In every case a re-read counter below s0 + 2 proves no rewrite of p began
 * before the copy ended (the acquire fence orders the copy's loads before
 * the re-read). The rule never makes the writer wait.
 */
#include <errno.h>
#include <string.h>
#include <xxhash.h>

#include "bigfleet/shm.h"

uint32_t bf_verdict_cells_backed(const struct bf_shm *s, uint32_t b)
{
    uint64_t cells = bf_shm_grown(s, BF_SEG_STATE) / sizeof(union bf_verdict_cell);
    b &= 1u;
    uint64_t n = cells > b ? (cells - b + 1) / 2 : 0; /* i with 2i + b < cells */
    uint64_t cap = BF_VERDICT_CELLS_PER_BUFFER(s->max_needs);
    return (uint32_t)(n < cap ? n : cap);
}

uint32_t bf_verdict_cells_reserve(struct bf_shm *s, uint32_t b, uint32_t n)
{
    uint64_t cap = BF_VERDICT_CELLS_PER_BUFFER(s->max_needs);
    if (n > cap)
        n = (uint32_t)cap;
    if (n && bf_shm_grow(s, BF_SEG_STATE,
                         (uint64_t)(bf_verdict_index(b, n - 1) + 1) *
                             sizeof(union bf_verdict_cell)) != 0) {
        uint32_t have = bf_verdict_cells_backed(s, b);
        n = n < have ? n : have;
    }
    return n;
}

uint32_t bf_verdict_write_begin(struct bf_verdict_writer *w, struct bf_shm *s, uint32_t b,
                                uint32_t n_rows)
{
    memset(w, 0, sizeof *w);
    w->s = s;
    w->b = b & 1u;
    if (n_rows > s->max_needs)
        n_rows = s->max_needs;
    uint32_t have = bf_verdict_cells_reserve(s, w->b, n_rows);
    w->n_rows = n_rows < have ? n_rows : have;
    w->backed = bf_verdict_cells_backed(s, w->b); /* the extras grow it only past this */
    return w->n_rows;
}

/*
 * The domain names' refs, memoised across publishes (the cycle's thread;
 * measured on (d): every row names one, ~4,000 of 7,720 per publish missed a
 * 4-entry memo, each a probe of the 500K-machine string hash): direct-mapped
 * by a hash of the name, checked by content, and tied to the segment it was
 * filled from (refs are never reused while a segment lives).
 */
#define DOMAIN_MEMO 1024
struct domain_memo {
    uint32_t ref, len;
    char name[BF_DOMAIN_MAX];
};
static _Thread_local struct domain_memo g_memo[DOMAIN_MEMO];
static _Thread_local const void *g_memo_seg;
static _Thread_local int64_t g_memo_created;

/* The string-table ref of a domain name (at most BF_DOMAIN_MAX - 1 bytes,
 * as the row holds it). */
uint32_t bf_verdict_domain_ref(struct bf_verdict_writer *w, const char *name)
{
    uint32_t len = (uint32_t)strnlen(name, BF_DOMAIN_MAX - 1);
    if (len == 0)
        return 0;
    if (g_memo_seg != w->s->inv_hdr || g_memo_created != w->s->inv_hdr->created_unix_ns) {
        memset(g_memo, 0, sizeof g_memo);
        g_memo_seg = w->s->inv_hdr;
        g_memo_created = w->s->inv_hdr->created_unix_ns;
    }
    /* the slot from a hash of the whole name (hostnames share their
     * prefix and suffix; checked by content below) */
    uint64_t h = XXH3_64bits(name, len);
    struct domain_memo *m = &g_memo[h & (DOMAIN_MEMO - 1)];
    if (m->ref && m->len == len && memcmp(m->name, name, len) == 0)
        return m->ref;
    /* a name the table already holds (a label value the reconciler
     * stored) costs nothing; a new one is peer-controlled (provider label
     * values under a Same key the operator picks) and the table never frees
     * it, so it is interned only while the table is under three-quarters
     * full (bf_str_intern_soft): past that the row keeps no name (counted
     * in w->lost, then in verdicts_dropped) and ids and profiles keep their
     * room */
    uint32_t ref = 0;
    if (bf_str_intern_soft(w->s, name, len, &ref) != 0) { /* (finds first, refuses lock-free) */
        w->lost++;
        return 0;
    }
    m->ref = ref;
    m->len = len;
    memcpy(m->name, name, len);
    return ref;
}

static bool any64(const int64_t *v, int n)
{
    for (int i = 0; i < n; i++)
        if (v[i])
            return true;
    return false;
}

static bool needs_extra(const struct bf_verdict_row *r)
{
    if (any64(r->residual_deficit, BF_MAX_DIMS) || any64(r->capacity_freed, BF_MAX_DIMS) ||
        r->victims_found || r->matching_idle || r->matching_configured || r->matching_speculative)
        return true;
    for (int j = 0; j < BF_SAME_CANDIDATES_MAX; j++)
        if (r->same_candidates[j].domain[0] || r->same_candidates[j].coverage_per_mille ||
            r->same_candidates[j].satisfiable)
            return true;
    return false;
}

void bf_verdict_write_cells(struct bf_verdict_writer *w, struct bf_verdict_slim *o,
                            const struct bf_verdict_extra *x)
{
    if (w->nv >= w->n_rows)
        return;
    o->extra = 0;
    if (x) {
        uint32_t k = w->n_rows + w->ne; /* the next extra cell */
        if (k >= w->backed && bf_verdict_cells_reserve(w->s, w->b, k + 1) == k + 1)
            w->backed = bf_verdict_cells_backed(w->s, w->b);
        if (k < w->backed) {
            /* plain stores, as the cycle always wrote its rows: readers
             * copy with relaxed loads and re-check the publish counter */
            memcpy(&w->s->verdicts[bf_verdict_index(w->b, k)], x, sizeof *x);
            o->extra = k + 1;
            w->ne++;
        } else {
            w->lost++; /* the row without its details: the file could not grow */
        }
    }
    memcpy(&w->s->verdicts[bf_verdict_index(w->b, w->nv++)], o, sizeof *o);
}

void bf_verdict_write(struct bf_verdict_writer *w, const struct bf_verdict_row *r)
{
    struct bf_verdict_slim o;
    memset(&o, 0, sizeof o);
    o.cluster_ref = r->cluster_ref;
    o.need_profile_ref = r->need_profile_ref;
    o.group_ref = r->group_ref;
    o.same_domain_ref = bf_verdict_domain_ref(w, r->same_domain);
    o.arrival_ns = r->arrival_ns;
    memcpy(o.aggregate, r->aggregate, sizeof o.aggregate);
    memcpy(o.min_unit, r->min_unit, sizeof o.min_unit);
    o.claimed_machine_count = r->claimed_machine_count;
    o.bootstrap_count = r->bootstrap_count;
    o.provision_count = r->provision_count;
    o.parked_age_cycles = r->parked_age_cycles;
    o.age_cycles_unmet = r->age_cycles_unmet;
    o.matching_capped = r->matching_capped;
    o.satisfied = r->satisfied;
    o.same_satisfiable = r->same_satisfiable;
    o.acquisition_parked = r->acquisition_parked;
    o.unmet_reason = r->unmet_reason;
    o.n_same_candidates = r->n_same_candidates;
    o.has_matching_supply = r->has_matching_supply;
    o.has_preemption = r->has_preemption;
    struct bf_verdict_extra x;
    bool extra = needs_extra(r);
    if (extra) {
        memset(&x, 0, sizeof x);
        memcpy(x.residual_deficit, r->residual_deficit, sizeof x.residual_deficit);
        memcpy(x.capacity_freed, r->capacity_freed, sizeof x.capacity_freed);
        x.victims_found = r->victims_found;
        x.matching_idle = r->matching_idle;
        x.matching_configured = r->matching_configured;
        x.matching_speculative = r->matching_speculative;
        for (int j = 0; j < BF_SAME_CANDIDATES_MAX; j++) {
            x.cand_domain_ref[j] = bf_verdict_domain_ref(w, r->same_candidates[j].domain);
            x.cand_coverage_per_mille[j] = r->same_candidates[j].coverage_per_mille;
            x.cand_satisfiable[j] = r->same_candidates[j].satisfiable;
        }
    }
    bf_verdict_write_cells(w, &o, extra ? &x : NULL);
}

void bf_verdict_write_end(struct bf_verdict_writer *w, struct bf_cycle_result *out)
{
    static const struct bf_verdict_row empty;
    while (w->nv < w->n_rows) /* the extras sit after n_rows cells: fill them all */
        bf_verdict_write(w, &empty);
    out->n_verdicts = w->n_rows;
    out->n_verdict_extras = w->ne;
}

void bf_verdict_bound(const struct bf_shm *s, uint32_t b, uint32_t *nv, uint32_t *ne)
{
    uint32_t backed = bf_verdict_cells_backed(s, b);
    if (*nv > s->max_needs)
        *nv = s->max_needs;
    if (*nv > backed)
        *nv = backed;
    if (*ne > backed - *nv)
        *ne = backed - *nv;
}

/* A domain name from the string table into dst[BF_DOMAIN_MAX]: "" for a
 * ref outside it; at most BF_DOMAIN_MAX - 1 bytes. */
static void domain_of(const struct bf_shm *s, uint32_t ref, char *dst)
{
    uint32_t len = 0;
    const char *p = ref ? bf_str(s, ref, &len) : NULL;
    if (!p)
        len = 0;
    if (len > BF_DOMAIN_MAX - 1)
        len = BF_DOMAIN_MAX - 1;
    if (len)
        memcpy(dst, p, len);
    dst[len] = 0;
}

void bf_verdict_read(const struct bf_shm *s, uint32_t b, uint32_t i, uint32_t nv, uint32_t ne,
                     struct bf_verdict_row *out)
{
    struct bf_verdict_slim o;
    memset(out, 0, sizeof *out);
    if (i >= nv)
        return;
    bf_shm_load_words(&o, &s->verdicts[bf_verdict_index(b, i)], sizeof o);
    out->cluster_ref = o.cluster_ref;
    out->need_profile_ref = o.need_profile_ref;
    out->group_ref = o.group_ref;
    out->arrival_ns = o.arrival_ns;
    memcpy(out->aggregate, o.aggregate, sizeof o.aggregate);
    memcpy(out->min_unit, o.min_unit, sizeof o.min_unit);
    out->claimed_machine_count = o.claimed_machine_count;
    out->bootstrap_count = o.bootstrap_count;
    out->provision_count = o.provision_count;
    out->parked_age_cycles = o.parked_age_cycles;
    out->age_cycles_unmet = o.age_cycles_unmet;
    out->matching_capped = o.matching_capped;
    out->satisfied = o.satisfied;
    out->same_satisfiable = o.same_satisfiable;
    out->acquisition_parked = o.acquisition_parked;
    out->unmet_reason = o.unmet_reason;
    out->n_same_candidates = o.n_same_candidates;
    out->has_matching_supply = o.has_matching_supply;
    out->has_preemption = o.has_preemption;
    domain_of(s, o.same_domain_ref, out->same_domain);
    uint64_t k = o.extra ? (uint64_t)o.extra - 1 : UINT64_MAX;
    if (k < nv || k >= (uint64_t)nv + ne)
        return; /* none, or an index outside this publish's extras */
    struct bf_verdict_extra x;
    bf_shm_load_words(&x, &s->verdicts[bf_verdict_index(b, (uint32_t)k)], sizeof x);
    memcpy(out->residual_deficit, x.residual_deficit, sizeof x.residual_deficit);
    memcpy(out->capacity_freed, x.capacity_freed, sizeof x.capacity_freed);
    out->victims_found = x.victims_found;
    out->matching_idle = x.matching_idle;
    out->matching_configured = x.matching_configured;
    out->matching_speculative = x.matching_speculative;
    for (int j = 0; j < BF_SAME_CANDIDATES_MAX; j++) {
        domain_of(s, x.cand_domain_ref[j], out->same_candidates[j].domain);
        out->same_candidates[j].coverage_per_mille = x.cand_coverage_per_mille[j];
        out->same_candidates[j].satisfiable = x.cand_satisfiable[j];
    }
}

uint32_t bf_result_publish_begin(struct bf_shm *s, uint64_t *seq)
{
    struct bf_state_main *st = s->st;
    *seq = atomic_load_explicit(&st->publish_seq, memory_order_relaxed);
    atomic_store_explicit(&st->publish_seq, *seq + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release); /* odd before any buffer store */
    return (atomic_load_explicit(&st->published, memory_order_relaxed) ^ 1u) & 1u;
}

void bf_result_publish_end(struct bf_shm *s, uint32_t buffer, uint64_t seq)
{
    struct bf_state_main *st = s->st;
    atomic_store_explicit(&st->published, buffer, memory_order_release);
    atomic_store_explicit(&st->publish_seq, seq + 2, memory_order_release);
}

void bf_result_read_begin(const struct bf_shm *s, struct bf_result_read *r)
{
    const struct bf_state_main *st = s->st;
    r->seq = atomic_load_explicit(&st->publish_seq, memory_order_acquire);
    r->buffer = atomic_load_explicit(&st->published, memory_order_acquire) & 1u;
}

bool bf_result_read_valid(const struct bf_shm *s, const struct bf_result_read *r)
{
    atomic_thread_fence(memory_order_acquire); /* the copy's loads before the re-read */
    uint64_t now = atomic_load_explicit(&s->st->publish_seq, memory_order_relaxed);
    return now - r->seq < 2;
}

int bf_result_read(const struct bf_shm *s, struct bf_cycle_result *out, uint32_t *retries)
{
    uint32_t again = 0;
    for (int t = 0; t < BF_RESULT_READ_TRIES; t++) {
        struct bf_result_read r;
        bf_result_read_begin(s, &r);
        bf_shm_load_words(out, &s->st->result[r.buffer], sizeof *out);
        if (bf_result_read_valid(s, &r)) {
            if (retries)
                *retries = again;
            return 0;
        }
        again++;
    }
    if (retries)
        *retries = again;
    memset(out, 0, sizeof *out);
    return -EAGAIN;
}
