/*
 * pass.c — the reconciler's passes and their scheduling (reconciler.h):
 * delta pages (since_revision), resync walks (paged full Lists ending in
 * removals), targeted Gets of records flagged for refresh, and the
 * fallbacks for providers without cursors or paging.
 *
 * Design notes
 *   - One List in flight at a time: every List's view is newer than every
 *     List applied before it, so a delta never races a walk page. A cycle's
 *     request waits for at most the page in flight plus its own delta.
 *   - The walk follows the executor's change log after every page
 *     (bf_recon_walk_follow), so a log that wraps over the whole walk still
 *     leaves an exact set of records written during it.
 *   - Pipelined walk pages: when a walk page arrives truncated, the next
 *     page is asked for (with its revision) and put on the wire
 *     (bf_prov_client_flush: the reply callback runs after nghttp2's
 *     receive, so the request is produced and handed to the kernel there)
 *     before this one is applied, so the provider encodes and sends page
 *     k+1 while page k is applied (stop 27 asked ahead without the flush:
 *     the request then left only when the loop next waited, after the
 *     apply, and nothing overlapped). At
 *     most one page ahead, and still one List in flight: page k's List has
 *     answered when k+1's is issued, and k+1 is applied after k, in issue
 *     order. The next pass (bf_recon_step) consumes that page first; a
 *     request (a cycle waits) then gets the List it needs (a delta) within
 *     the same pass, issued after the page was applied, so its view is newer
 *     than every List applied before it: a request waits for at most the
 *     page in flight, the page asked ahead, and its own delta. A reply that
 *     arrives before a pass asks for it is kept (one page, copied) and
 *     applied by that pass on the loop (a zero timer).
 *   - Failures: a failed List ends the walk it belonged to (no removals),
 *     keeps the delta cursor, and marks refresh candidates lost (the next
 *     walk re-reads everything); background work waits BF_RECON_RETRY_NS or
 *     until the provider connection comes up.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/log.h"
#include "bigfleet/strbuf.h"
#include "bigfleet/util.h"
#include "reconciler/recon_internal.h"

static void pf_start(struct bf_recon *r, uint32_t page);

bool bf_recon_busy(const struct bf_recon *r)
{
    return r->busy;
}

bool bf_recon_synced(const struct bf_recon *r)
{
    return r->synced;
}

bool bf_recon_incremental(const struct bf_recon *r)
{
    return r->o.incremental && !r->no_cursor;
}

void bf_recon_reset_cursor(struct bf_recon *r)
{
    r->have_cursor = false;
    r->synced = false;
    r->delta_more = false;
}

/* ------------------------------------------------------------ the engine */

static void pf_timer(struct bf_net_timer *t, void *arg);
static void pf_release(struct bf_recon *r);

int bf_recon_new(struct bf_shm *shm, struct bf_prov_client *client, const struct bf_recon_opts *o,
                 struct bf_recon **out)
{
    struct bf_recon *r = calloc(1, sizeof *r);
    if (!r)
        return -ENOMEM;
    r->shm = shm;
    r->client = client;
    r->o = *o;
    if (r->o.resync_interval_ns <= 0)
        r->o.resync_interval_ns = BF_RECON_RESYNC_NS;
    if (!r->o.page_size)
        r->o.page_size = BF_RECON_PAGE;
    if (!r->o.startup_page_size)
        r->o.startup_page_size = BF_RECON_STARTUP_PAGE;
    r->shapes = bf_prov_shape_cache_new();
    if (bf_recon_own_new(shm, o->data_dir, o->ownership, o->owned_sync_slice, &r->own) != 0) {
        bf_recon_free(r);
        return -ENOMEM;
    }
    r->words = (shm->max_machines + 63) / 64;
    r->seen = calloc(r->words, sizeof *r->seen);
    r->touched = calloc(r->words, sizeof *r->touched);
    r->walk.exec_written = calloc(r->words, sizeof *r->walk.exec_written);
    struct bf_net_loop *loop = client ? bf_prov_client_loop(client) : NULL;
    if (client) /* pipelined walk pages flush from the reply callback */
        bf_prov_client_replies_after_recv(client);
    r->pf.timer = loop ? bf_net_timer_new(loop, pf_timer, r) : NULL;
    if (!r->shapes || !r->seen || !r->touched || !r->walk.exec_written || (loop && !r->pf.timer)) {
        bf_recon_free(r);
        return -ENOMEM;
    }
    /* the first pass is a walk: flags set before it are covered */
    for (int w = 0; w < BF_CHANGELOG_WRITERS; w++)
        r->cl_cursor[w] = bf_cl_head(shm, w);
    r->list_exec_head = r->cl_cursor[BF_CL_EXECUTOR];
    r->client_state_seen = -1;
    *out = r;
    return 0;
}

void bf_recon_free(struct bf_recon *r)
{
    if (!r)
        return;
    pf_release(r);
    bf_prov_shape_cache_free(r->shapes);
    bf_recon_own_free(r->own);
    free(r->seen);
    free(r->touched);
    free(r->walk.exec_written);
    free(r->walk.cursor);
    free(r->cursor);
    free(r->refresh);
    free(r);
}

/* ------------------------------------------------------------ refresh candidates */

/*
 * Records flagged BF_REC_NEEDS_REFRESH since the last delta (an executor's
 * transport failure or redelivered mid-flight action; a supervisor repair):
 * the slots the executor and supervisor change logs name after our cursors,
 * re-read for the flag. O(writes since the last delta). Returns false when a
 * log lapped a cursor or there are more than BF_RECON_MAX_GETS (a walk
 * re-reads them all).
 */
struct refresh_ctx {
    struct bf_recon *r;
    bool full; /* too many, or out of memory: a walk re-reads them all */
};

static int refresh_candidate(void *arg, uint32_t slot)
{
    struct refresh_ctx *x = arg;
    struct bf_recon *r = x->r;
    struct bf_machine_rec rec;
    if (bf_inv_read(r->shm, slot, &rec) || !(rec.flags & BF_REC_VALID) ||
        !(rec.flags & BF_REC_NEEDS_REFRESH))
        return 0;
    uint32_t k;
    for (k = 0; k < r->n_refresh && r->refresh[k] != slot; k++)
        ;
    if (k < r->n_refresh)
        return 0; /* already listed */
    if (r->n_refresh == BF_RECON_MAX_GETS) {
        x->full = true; /* too many for targeted Gets: a walk is cheaper */
        return 1;
    }
    if (bf_grow((void **)&r->refresh, &r->refresh_cap, (size_t)r->n_refresh + 1,
                sizeof *r->refresh)) {
        x->full = true;
        return 1;
    }
    r->refresh[r->n_refresh++] = slot;
    return 0;
}

static bool collect_refresh(struct bf_recon *r)
{
    static const int logs[2] = {BF_CL_EXECUTOR, BF_CL_SUPERVISOR};
    bool ok = true;
    r->n_refresh = 0;
    for (int i = 0; i < 2; i++) {
        struct refresh_ctx x = {r, false};
        uint64_t from = r->cl_cursor[logs[i]];
        int n = bf_cl_peek(r->shm, logs[i], from, &r->cl_cursor[logs[i]], refresh_candidate, &x);
        if (x.full)
            return false;
        if (n == -EOVERFLOW)
            ok = false; /* -ESTALE: the entries read were still slots to re-check */
    }
    return ok;
}

/* ------------------------------------------------------------ finishing a pass */

/* r->res += the prefetched page's result a request's List followed */
static void merge_carry(struct bf_recon *r)
{
    struct bf_recon_result *d = &r->res;
    const struct bf_recon_result *c = &r->carry;
    r->have_carry = false;
    d->listed += c->listed;
    d->inserted += c->inserted;
    d->updated += c->updated;
    d->removed += c->removed;
    d->skipped_pending += c->skipped_pending;
    d->fast += c->fast;
    d->rejected += c->rejected;
    for (int i = 0; i < 4; i++)
        d->rejected_by[i] += c->rejected_by[i];
    d->errors += c->errors;
    d->node_events += c->node_events;
    d->refreshed += c->refreshed;
    d->not_owned += c->not_owned;
    d->released += c->released;
    d->list_ns += c->list_ns;
    d->apply_ns += c->apply_ns;
    d->walk_aborted |= c->walk_aborted;
    if (c->full) {
        d->full = true;
        d->walk_pages = c->walk_pages;
        d->walk_listed = c->walk_listed;
        d->walk_ns = c->walk_ns;
    }
}

static void pass_finish(struct bf_recon *r)
{
    if (r->have_carry)
        merge_carry(r);
    if (r->kind == BF_RECON_WALK && r->confirm_found) {
        BF_WARN("the provider still has machines its paged List left out: resync walks go "
                "unpaged",
                "found=%u", r->confirm_found);
        r->no_paging = true;
        r->confirm_found = 0;
    }
    if (r->res.status != BF_PROV_OK) {
        r->refresh_lost = true; /* flagged records may not have been re-read */
        r->retry_at_ns = bf_mono_ns() + BF_RECON_RETRY_NS;
    }
    /* ADR-0055: machines released by the sweep before this pass; the kept
     * ones re-checked and the owned set written */
    r->res.released += r->sweep.released;
    memset(&r->sweep, 0, sizeof r->sweep);
    bf_recon_ownership_finish(r, &r->res, r->res.status == BF_PROV_OK && r->res.full);
    r->busy = false;
    bf_recon_done_fn done = r->done;
    r->done = NULL;
    struct bf_recon_result res = r->res;
    if (done)
        done(r->done_arg, &res);
}

static void pass_end(struct bf_recon *r);

struct get_ctx {
    struct bf_recon *r;
    uint32_t slot, id_ref;
};

static void on_get(void *arg, const struct bf_prov_result *pr, const struct bf_prov_machine *m)
{
    struct get_ctx *g = arg;
    struct bf_recon *r = g->r;
    int64_t t0 = bf_mono_ns();
    if (pr->status == BF_PROV_OK && m) {
        if (r->kind == BF_RECON_WALK)
            r->confirm_found++; /* a paged walk missed a machine that exists */
        struct bf_prov_bytes raw = {m->buf, m->len};
        bf_recon_apply_one(r, &raw, bf_now_ns() / BF_NS_PER_SEC, &r->res);
        if (r->events_pushed) {
            bf_wake(r->shm, BF_ROLE_SESSION);
            r->events_pushed = false;
        }
    } else if (pr->status == BF_PROV_NOT_FOUND) {
        /* explicit evidence the machine is gone: remove it (unless in flight) */
        bf_recon_remove_slot(r, g->slot, g->id_ref, &r->res);
    } else {
        r->refresh_lost = true; /* re-read by the next walk */
    }
    r->res.apply_ns += bf_mono_ns() - t0;
    free(g);
    if (--r->gets_outstanding == 0)
        pass_end(r);
}

/* Targeted re-reads of the flagged records (after a delta). */
static void start_gets(struct bf_recon *r)
{
    for (uint32_t i = 0; i < r->n_refresh; i++) {
        struct bf_machine_rec rec;
        uint32_t slot = r->refresh[i], l;
        if (bf_inv_read(r->shm, slot, &rec) || !(rec.flags & BF_REC_VALID))
            continue;
        const char *id = bf_str(r->shm, rec.id, &l);
        struct get_ctx *g = malloc(sizeof *g);
        if (!g || !id) {
            free(g);
            r->refresh_lost = true;
            continue;
        }
        *g = (struct get_ctx){r, slot, rec.id};
        r->gets_outstanding++;
        if (bf_prov_get(r->client, id, l, r->o.list_timeout_ns, on_get, g, NULL)) {
            r->gets_outstanding--;
            free(g);
            r->refresh_lost = true;
        }
    }
    r->res.refreshed = r->gets_outstanding;
}

static bool set_bytes(uint8_t **dst, size_t *dst_len, const struct bf_prov_bytes *b)
{
    uint8_t *c = realloc(*dst, b->len ? b->len : 1);
    if (!c)
        return false;
    memcpy(c, b->p, b->len);
    *dst = c;
    *dst_len = b->len;
    return true;
}

static void no_cursor_support(struct bf_recon *r, const char *why)
{
    if (!r->no_cursor)
        BF_WARN("provider does not support since_revision: falling back to a full List of every "
                "machine for each reconcile (each cycle waits for it)",
                "reason=\"%s\"", why);
    r->no_cursor = true;
    r->have_cursor = false;
    r->delta_more = false;
}

/* ------------------------------------------------------------ List replies */

static void on_delta(struct bf_recon *r, const struct bf_prov_result *pr,
                     const struct bf_prov_list *l)
{
    if (pr->status != BF_PROV_OK || !l) {
        if (pr->status == BF_PROV_UNSUPPORTED || pr->status == BF_PROV_INVALID)
            no_cursor_support(r, "a List with since_revision was refused");
        return;
    }
    bf_recon_apply_page(r, l, &r->res);
    if (!l->revision.len) {
        no_cursor_support(r, "a delta List returned no revision");
        return;
    }
    if (!set_bytes(&r->cursor, &r->cursor_len, &l->revision)) {
        r->have_cursor = r->synced = false; /* out of memory: start over with a walk */
        return;
    }
    r->delta_more = l->n_machines == r->o.page_size;
    if (r->n_refresh)
        start_gets(r);
}

static void on_walk_page(struct bf_recon *r, const struct bf_prov_result *pr,
                         const struct bf_prov_list *l, uint32_t page)
{
    struct recon_walk *w = &r->walk;
    if (pr->status != BF_PROV_OK || !l) {
        if (w->paged && (pr->status == BF_PROV_UNSUPPORTED || pr->status == BF_PROV_INVALID)) {
            BF_WARN("provider refused a paged List: resync walks go unpaged", "status=%s",
                    bf_prov_status_name(pr->status));
            r->no_paging = true;
        }
        bf_recon_walk_abort(r);
        r->res.walk_aborted = true;
        return;
    }
    /* what follows this page, decided before it is applied (the next page
     * is asked for first: pipelined walk pages) */
    bool truncated = w->paged && l->n_machines == page;
    bool more = false, abort_after = false;
    if (!l->revision.len) {
        if (r->o.incremental)
            no_cursor_support(r, "a full List returned no revision");
        abort_after = truncated; /* the rest cannot be asked for: walk again, unpaged */
    } else if (truncated) {
        if (w->cursor && w->cursor_len == l->revision.len &&
            memcmp(w->cursor, l->revision.p, l->revision.len) == 0) {
            BF_WARN("provider's List pages do not advance (the same revision twice): resync "
                    "walks go unpaged",
                    "pages=%u", w->pages + 1);
            r->no_paging = true;
            abort_after = true;
        } else if (!set_bytes(&w->cursor, &w->cursor_len, &l->revision)) {
            abort_after = true;
        } else {
            more = true;
        }
    }
    if (more && !r->pf.follow && r->pf.state == PF_NONE) {
        pf_start(r, page);
        /* on the wire before this page is applied: the provider encodes
         * and sends the next page meanwhile (the overlap; without the
         * flush the List would leave when the loop next waits, after the
         * apply) */
        bf_prov_client_flush(r->client);
    }
    bf_recon_apply_page(r, l, &r->res);
    w->pages++;
    w->listed += l->n_machines;
    bf_recon_walk_follow(r);
    if (abort_after) {
        bf_recon_walk_abort(r);
        r->res.walk_aborted = true;
        return;
    }
    if (more)
        return; /* more pages */
    /* the walk is complete */
    bool confirming = !w->paged && r->confirming;
    bf_recon_walk_finish(r, &r->res);
    if (confirming) {
        r->confirming = false;
        if (r->res.removed * 2 < r->confirm_expect) {
            BF_WARN("the unpaged List holds most machines the paged walk missed: resync walks "
                    "go unpaged",
                    "missed=%u removed=%u", r->confirm_expect, r->res.removed);
            r->no_paging = true;
        }
    }
    int64_t now = bf_mono_ns();
    r->res.walk_pages = w->pages;
    r->res.walk_listed = w->listed;
    r->res.walk_ns = now - w->started_ns;
    r->last_walk_ns = now;
    if (r->o.incremental && !r->no_cursor && !r->have_cursor && l->revision.len) {
        /* the last page's view is the newest: deltas continue from it */
        if (set_bytes(&r->cursor, &r->cursor_len, &l->revision))
            r->have_cursor = true;
    }
    r->synced = true;
    if (r->n_refresh) /* removal candidates of a paged walk: confirmed by Get */
        start_gets(r);
}

static void on_list(void *arg, const struct bf_prov_result *pr, const struct bf_prov_list *l)
{
    struct bf_recon *r = arg;
    r->res.status = pr->status;
    r->res.list_ns = pr->elapsed_ns;
    if (pr->status != BF_PROV_OK)
        BF_WARN("reconcile: provider List failed; the inventory is kept as it is",
                "kind=%s status=%s code=%s message=\"%s\" elapsed_ms=%.1f",
                r->kind == BF_RECON_DELTA ? "delta" : "walk", bf_prov_status_name(pr->status),
                bf_net_code_name(pr->code), pr->message, pr->elapsed_ns / 1e6);
    if (r->kind == BF_RECON_DELTA)
        on_delta(r, pr, l);
    else
        on_walk_page(r, pr, l, r->pass_page);
    if (r->gets_outstanding)
        return; /* the pass ends when the last Get answered */
    pass_end(r);
}

/* ------------------------------------------------------------ scheduling */

static bool full_only(const struct bf_recon *r)
{
    return !r->o.incremental || r->no_cursor;
}

static bool walk_due(const struct bf_recon *r, int64_t now)
{
    return !r->synced || r->walk.active || r->resync_now || r->refresh_lost || r->confirm_unpaged ||
           now - r->last_walk_ns >= r->o.resync_interval_ns;
}

static int start_list(struct bf_recon *r, int kind, int64_t now)
{
    struct bf_prov_list_req q = {0};
    uint32_t page = 0;
    if (kind == BF_RECON_DELTA) {
        q.since = r->cursor;
        q.since_len = r->cursor_len;
        page = r->o.page_size;
        if (!collect_refresh(r))
            r->refresh_lost = true; /* too many, or a log lapped: a walk re-reads all */
    } else {
        struct recon_walk *w = &r->walk;
        bool paged = !full_only(r) && !r->no_paging && !r->confirm_unpaged;
        if (!w->active) {
            r->confirming = r->confirm_unpaged;
            r->confirm_unpaged = false;
            bf_recon_walk_begin(r, paged);
            /* losses from here on are covered by this walk only if they
             * happen before their page: ask for another walk after it */
            r->resync_now = r->refresh_lost = false;
            /* the walk re-reads every flagged record: skip them in deltas */
            for (int i = 0; i < BF_CHANGELOG_WRITERS; i++)
                r->cl_cursor[i] = bf_cl_head(r->shm, i);
        }
        if (w->paged) {
            page = r->synced ? r->o.page_size : r->o.startup_page_size;
            q.since = w->cursor;
            q.since_len = w->cursor_len;
        }
    }
    q.max_results = (int32_t)(page > INT32_MAX ? INT32_MAX : page);
    memset(&r->res, 0, sizeof r->res);
    r->res.kind = kind;
    r->kind = kind;
    r->pass_page = page;
    r->t0 = now;
    r->gets_outstanding = 0;
    if (kind != BF_RECON_DELTA)
        r->n_refresh = 0;
    bf_recon_list_issued(r);
    int rc = bf_prov_list(r->client, &q, r->o.list_timeout_ns, on_list, r, NULL);
    if (rc) {
        r->refresh_lost = true;
        r->retry_at_ns = now + BF_RECON_RETRY_NS;
        if (kind == BF_RECON_WALK)
            bf_recon_walk_abort(r);
        return rc;
    }
    r->busy = true;
    return 1;
}

/* The pass the rules (reconciler.h "Scheduling") ask for now; 0 = none. */
static int next_kind(struct bf_recon *r, bool requested, int64_t now_ns, bool may_background)
{
    if (full_only(r))
        return requested || (!r->synced && may_background) ? BF_RECON_WALK : 0;
    if (!r->synced || !r->have_cursor)
        return requested || may_background ? BF_RECON_WALK : 0;
    if (requested)
        return BF_RECON_DELTA;
    if (may_background && r->delta_more)
        return BF_RECON_DELTA;
    if (may_background && walk_due(r, now_ns))
        return BF_RECON_WALK;
    return 0;
}

/* ------------------------------------------------------------ pipelined walk pages */

struct pf_ticket {
    struct bf_recon *r; /* NULL once the reconciler is freed */
};

/* The prefetched page, for the pass that waits for it (r->busy). */
static void pf_deliver(struct bf_recon *r, const struct bf_prov_result *pr,
                       const struct bf_prov_list *l)
{
    r->pf.consumer = false;
    r->list_exec_head = r->pf.exec_head; /* executor writes after its issue are newer */
    r->pass_page = r->pf.page;
    on_list(r, pr, l);
}

static void on_prefetch(void *arg, const struct bf_prov_result *pr, const struct bf_prov_list *l)
{
    struct pf_ticket *t = arg;
    struct bf_recon *r = t->r;
    free(t);
    if (!r)
        return; /* the reconciler is gone */
    r->pf.ticket = NULL;
    r->pf.call = NULL;
    if (r->pf.consumer) {
        r->pf.state = PF_NONE;
        pf_deliver(r, pr, l);
        return;
    }
    /* no pass asked for it yet: keep it (one page) for the next one */
    r->pf.state = PF_PARKED;
    r->pf.pr = *pr;
    snprintf(r->pf.message, sizeof r->pf.message, "%s", pr->message ? pr->message : "");
    r->pf.pr.message = r->pf.message;
    r->pf.has_list = false;
    if (l) {
        r->pf.buf = malloc(l->len ? l->len : 1);
        if (r->pf.buf) {
            memcpy(r->pf.buf, l->buf, l->len);
            r->pf.len = l->len;
            r->pf.has_list = true;
        } else { /* out of memory: the page failed (the walk ends without removals) */
            r->pf.pr.status = BF_PROV_ERROR;
            r->pf.pr.message = "out of memory keeping a List page";
        }
    }
}

static void pf_timer(struct bf_net_timer *t, void *arg)
{
    (void)t;
    struct bf_recon *r = arg;
    if (r->pf.state != PF_PARKED || !r->pf.consumer)
        return;
    struct bf_prov_result pr = r->pf.pr;
    uint8_t *buf = r->pf.buf;
    struct bf_prov_list l;
    bool ok = r->pf.has_list && bf_prov_list_decode(buf, r->pf.len, &l) == 0;
    if (r->pf.has_list && !ok) { /* decoded once already: cannot happen */
        pr.status = BF_PROV_BAD_REPLY;
        pr.message = "reply does not decode";
    }
    r->pf.buf = NULL;
    r->pf.len = 0;
    r->pf.has_list = false;
    r->pf.state = PF_NONE;
    pf_deliver(r, &pr, ok ? &l : NULL);
    free(buf);
}

static void pf_release(struct bf_recon *r)
{
    if (r->pf.ticket) {
        r->pf.ticket->r = NULL; /* its callback frees it */
        bf_prov_call_cancel(r->pf.call);
    }
    free(r->pf.buf);
    bf_net_timer_free(r->pf.timer);
    memset(&r->pf, 0, sizeof r->pf);
}

/* Asks for the walk's next page (the cursor just set) ahead of applying this one. */
static void pf_start(struct bf_recon *r, uint32_t page)
{
    if (!r->pf.timer)
        return;
    struct pf_ticket *t = malloc(sizeof *t);
    if (!t)
        return; /* the next pass asks for it itself */
    t->r = r;
    struct bf_prov_list_req q = {.since = r->walk.cursor,
                                 .since_len = r->walk.cursor_len,
                                 .max_results = (int32_t)(page > INT32_MAX ? INT32_MAX : page)};
    uint64_t head = bf_cl_head(r->shm, BF_CL_EXECUTOR);
    struct bf_prov_call *call = NULL;
    if (bf_prov_list(r->client, &q, r->o.list_timeout_ns, on_prefetch, t, &call)) {
        free(t);
        return;
    }
    r->pf.ticket = t;
    r->pf.call = call;
    r->pf.state = PF_INFLIGHT;
    r->pf.exec_head = head;
    r->pf.page = page;
}

/*
 * The end of a pass's Lists and Gets. A pass that consumed a prefetched page
 * for a request goes on with the List the request needs (issued now, after
 * that page was applied); its result carries the page's.
 */
static void pass_end(struct bf_recon *r)
{
    if (r->pf.follow) {
        r->pf.follow = false;
        int64_t now = bf_mono_ns();
        int kind = next_kind(r, true, now, true);
        if (kind) {
            struct bf_recon_result carry = r->res;
            int rc = start_list(r, kind, now); /* resets r->res */
            if (rc == 1) {
                r->carry = carry;
                r->have_carry = true;
                return;
            }
            r->res = carry; /* could not start: the request is answered by the page */
        }
    }
    pass_finish(r);
}

int bf_recon_step(struct bf_recon *r, bool requested, int64_t now_ns, bf_recon_done_fn done,
                  void *arg)
{
    if (r->busy)
        return -EBUSY;
    /* background work after a failure waits, unless the connection just came up */
    int cs = bf_prov_client_state(r->client);
    bool came_up = cs == BF_NET_CLIENT_READY && r->client_state_seen != BF_NET_CLIENT_READY;
    r->client_state_seen = cs;
    bool may_background = now_ns >= r->retry_at_ns || came_up;
    /* ADR-0055: the partition's rule inputs changed: release what is no
     * longer ours now, and walk at once (a delta would not list machines
     * that just became ours) */
    if (bf_recon_ownership_step(r, &r->sweep))
        r->resync_now = true;
    if (r->pf.state != PF_NONE) {
        /* the walk's next page was asked for ahead: this pass applies it
         * first; a request then gets its own List (pass_end) */
        r->done = done;
        r->done_arg = arg;
        memset(&r->res, 0, sizeof r->res);
        r->res.kind = BF_RECON_WALK;
        r->kind = BF_RECON_WALK;
        r->t0 = now_ns;
        r->gets_outstanding = 0;
        r->n_refresh = 0;
        r->busy = true;
        r->pf.consumer = true;
        r->pf.follow = requested;
        if (r->pf.state == PF_PARKED)
            bf_net_timer_start(r->pf.timer, 0, 0);
        return 1;
    }
    int kind = next_kind(r, requested, now_ns, may_background);
    if (!kind)
        return 0;
    r->done = done;
    r->done_arg = arg;
    int rc = start_list(r, kind, now_ns);
    if (rc < 0)
        r->done = NULL;
    return rc;
}
