/*
 * test_reconciler_resync.c — the reconciler's scheduling (reconciler.h
 * "Passes", "Scheduling", "Fallbacks") against a scriptable provider served
 * over real gRPC: deltas serve the requests, a paged resync walk removes a
 * machine the provider dropped within one resync period and never makes a
 * request wait for more than one page, paged removals are confirmed, and
 * providers without cursors or with broken paging fall back to full Lists
 * with a warning.
 *
 * The fake provider keeps a few machines with a revision each (bumped on
 * every change), lists them in revision order and, depending on its mode,
 * honours since_revision and max_results the way the wire contract says
 * (a truncated page's revision is its last machine's, so threading it back
 * pages the set without gap or duplicate) or not.
 */
#include "bigfleet/log.h"
#include "bigfleet/v1alpha1/provider.pb-c.h"
#include "reconciler/reconciler.h"
#include "test_provider.h"
#include "check_run.h"

#define FP_MAX 64

enum fp_paging {
    FP_PAGES_OK = 0,  /* the wire contract */
    FP_NO_MAX = 1,    /* max_results ignored: every List is whole */
    FP_PAGES_HEAD = 2 /* a truncated page returns the head revision (wrong) */
};

struct fakeprov {
    struct bf_net_server *srv;
    struct bf_net_method methods[2];
    char names[FP_MAX][32];
    struct tmach m[FP_MAX];
    int64_t rev[FP_MAX];
    bool gone[FP_MAX];
    int n;
    int64_t head;
    bool cursors; /* false: no revision, since_revision ignored */
    int paging;   /* enum fp_paging */
    uint32_t lists, lists_with_cursor, lists_paged, gets;
};

static void fp_change(struct fakeprov *p, int i, int state)
{
    p->m[i].state = state;
    p->rev[i] = ++p->head;
}

static int by_rev(const void *a, const void *b, void *arg)
{
    const struct fakeprov *p = arg;
    int64_t x = p->rev[*(const int *)a], y = p->rev[*(const int *)b];
    return x < y ? -1 : x > y;
}

static void fp_list(struct bf_net_call *call, const uint8_t *msg, size_t len, void *arg)
{
    struct fakeprov *p = arg;
    Bigfleet__V1alpha1__ListFilter *q = bigfleet__v1alpha1__list_filter__unpack(NULL, len, msg);
    ck_assert_ptr_nonnull(q);
    p->lists++;
    int64_t from = 0;
    if (q->since_revision.len) {
        p->lists_with_cursor++;
        char b[32] = "";
        snprintf(b, sizeof b, "%.*s", (int)q->since_revision.len,
                 (const char *)q->since_revision.data);
        if (p->cursors)
            from = atoll(b);
    }
    if (q->max_results)
        p->lists_paged++;
    int idx[FP_MAX], k = 0;
    for (int i = 0; i < p->n; i++)
        if (!p->gone[i] && p->rev[i] > from)
            idx[k++] = i;
    qsort_r(idx, (size_t)k, sizeof *idx, by_rev, p);
    bool truncated = false;
    if (p->paging != FP_NO_MAX && q->max_results > 0 && k > q->max_results) {
        k = q->max_results;
        truncated = true;
    }
    struct tmach out[FP_MAX];
    for (int i = 0; i < k; i++)
        out[i] = p->m[idx[i]];
    char rev[32];
    snprintf(rev, sizeof rev, "%lld",
             (long long)(truncated && p->paging == FP_PAGES_OK ? p->rev[idx[k - 1]] : p->head));
    size_t bl;
    uint8_t *b = tlist_pack(out, k, p->cursors ? rev : NULL, &bl);
    bf_net_call_reply(call, b, bl);
    free(b);
    bigfleet__v1alpha1__list_filter__free_unpacked(q, NULL);
}

static void fp_get(struct bf_net_call *call, const uint8_t *msg, size_t len, void *arg)
{
    struct fakeprov *p = arg;
    Bigfleet__V1alpha1__MachineRef *q = bigfleet__v1alpha1__machine_ref__unpack(NULL, len, msg);
    ck_assert_ptr_nonnull(q);
    p->gets++;
    for (int i = 0; i < p->n; i++) {
        if (!p->gone[i] && strcmp(p->m[i].id, q->id) == 0) {
            size_t bl;
            uint8_t *b = tmach_pack(&p->m[i], &bl);
            bf_net_call_reply(call, b, bl);
            free(b);
            bigfleet__v1alpha1__machine_ref__free_unpacked(q, NULL);
            return;
        }
    }
    bf_net_call_finish(call, BF_NET_NOT_FOUND, "no such machine");
    bigfleet__v1alpha1__machine_ref__free_unpacked(q, NULL);
}

/* The fixture: loop, fake provider, client, private segments. */
struct rfx {
    struct pfx f; /* loop, client, shm (its sim is unused) */
    struct fakeprov p;
    struct bf_prov_client *cl;
    struct bf_recon *r;
};

static void rfx_open(struct rfx *x, int n, bool cursors, int paging, const struct bf_recon_opts *o)
{
    memset(x, 0, sizeof *x);
    pfx_open(&x->f, NULL, true);
    struct fakeprov *p = &x->p;
    p->n = n;
    p->cursors = cursors;
    p->paging = paging;
    for (int i = 0; i < n; i++) {
        snprintf(p->names[i], sizeof p->names[i], "fake-%02d", i);
        p->m[i] = tmach_idle(p->names[i]);
        p->rev[i] = ++p->head;
    }
    static const char *const paths[2] = {"/bigfleet.v1alpha1.CapacityProvider/List",
                                         "/bigfleet.v1alpha1.CapacityProvider/Get"};
    p->methods[0] = (struct bf_net_method){
        .path = paths[0], .kind = BF_NET_UNARY, .on_message = fp_list, .arg = p};
    p->methods[1] = (struct bf_net_method){
        .path = paths[1], .kind = BF_NET_UNARY, .on_message = fp_get, .arg = p};
    struct bf_net_server_opts so = {.addr = "127.0.0.1:0", .methods = p->methods, .n_methods = 2};
    ck_assert_int_eq(bf_net_server_new(x->f.loop, &so, &p->srv), 0);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", bf_net_server_port(p->srv));
    struct bf_prov_opts po = {.addr = addr, .shard_id = "ut-shard", .epoch = 1};
    ck_assert_int_eq(bf_prov_client_new(x->f.loop, &po, &x->cl), 0);
    ck_assert_int_eq(bf_recon_new(&x->f.shm, x->cl, o, &x->r), 0);
}

static void rfx_close(struct rfx *x)
{
    bf_recon_free(x->r);
    bf_prov_client_free(x->cl);
    bf_net_server_free(x->p.srv);
    pfx_close(&x->f);
}

/* Starts the next pass (requested or not) and runs it to its end; 0 when
 * there was nothing to start (res untouched). */
static int one_pass(struct rfx *x, bool requested, struct bf_recon_result *res)
{
    struct donecap d = {0};
    int rc = bf_recon_step(x->r, requested, bf_mono_ns(), on_done, &d);
    ck_assert_int_ge(rc, 0);
    if (rc == 0)
        return 0;
    ck_assert(pfx_run_until(&x->f, &d.done, 10 * SEC));
    *res = d.r;
    return 1;
}

/* Runs background passes until the first walk completes (bounded). */
static struct bf_recon_result until_walk_done(struct rfx *x, int64_t timeout_ns)
{
    int64_t end = bf_mono_ns() + timeout_ns;
    struct bf_recon_result res;
    while (bf_mono_ns() < end) {
        if (one_pass(x, false, &res) && res.kind == BF_RECON_WALK && (res.full || res.walk_aborted))
            return res;
        pfx_run_for(&x->f, 5 * MS);
    }
    ck_abort_msg("no walk completed");
    return res;
}

static bool known(struct rfx *x, const char *id)
{
    uint32_t slot;
    struct bf_machine_rec rec;
    return bf_inv_lookup_id(&x->f.shm, id, strlen(id), &slot) == 0 &&
           bf_inv_read(&x->f.shm, slot, &rec) == 0 && (rec.flags & BF_REC_VALID);
}

/* ------------------------------------------------------------ tests */

START_TEST(a_machine_removed_at_the_provider_leaves_within_one_resync_period)
{
    struct rfx x;
    struct bf_recon_opts o = {.incremental = true,
                              .resync_interval_ns = 300 * MS,
                              .page_size = 3,
                              .startup_page_size = 4};
    rfx_open(&x, 10, true, FP_PAGES_OK, &o);
    /* the start-up walk: pages of 4 threaded by their revisions, every machine in */
    struct bf_recon_result res = until_walk_done(&x, 5 * SEC);
    ck_assert(res.full);
    ck_assert_uint_eq(res.walk_pages, 3);
    ck_assert_uint_eq(res.walk_listed, 10);
    ck_assert_uint_eq(x.p.lists_paged, 3);
    ck_assert(bf_recon_synced(x.r));
    ck_assert(bf_recon_incremental(x.r));
    ck_assert_uint_eq(atomic_load(&x.f.shm.inv->n_machines), 10);
    /* a request is served by a delta: only what changed */
    fp_change(&x.p, 2, BF_STATE_CONFIGURING);
    ck_assert_int_eq(one_pass(&x, true, &res), 1);
    ck_assert_int_eq(res.kind, BF_RECON_DELTA);
    ck_assert_uint_eq(res.listed, 1);
    ck_assert_uint_eq(res.updated, 1);
    /* the provider drops a machine: deltas never remove it ... */
    x.p.gone[5] = true;
    ck_assert_int_eq(one_pass(&x, true, &res), 1);
    ck_assert_int_eq(res.kind, BF_RECON_DELTA);
    ck_assert_uint_eq(res.removed, 0);
    ck_assert(known(&x, "fake-05"));
    /* ... the next resync walk does: the first walk to end after the removal,
     * started one period after the previous walk */
    res = until_walk_done(&x, 5 * SEC);
    ck_assert(res.full);
    ck_assert_uint_eq(res.walk_pages, 4); /* 9 machines in pages of 3, then an empty page */
    ck_assert_uint_eq(res.walk_listed, 9);
    ck_assert_uint_eq(res.removed, 1); /* confirmed by a Get: NOT_FOUND */
    ck_assert_uint_eq(x.p.gets, 1);
    ck_assert(!known(&x, "fake-05"));
    ck_assert_uint_eq(atomic_load(&x.f.shm.inv->n_machines), 9);
    /* a restarted reconciler (the inventory already whole) pages its start-up walk */
    atomic_store(&x.f.shm.st->first_reconcile_done, 1);
    bf_recon_free(x.r);
    ck_assert_int_eq(bf_recon_new(&x.f.shm, x.cl, &o, &x.r), 0);
    res = until_walk_done(&x, 5 * SEC);
    ck_assert(res.full);
    ck_assert_uint_eq(res.walk_pages, 3); /* pages of 4: 4, 4, 1 */
    ck_assert_uint_eq(res.removed, 0);
    rfx_close(&x);
}
END_TEST

START_TEST(a_request_during_a_resync_walk_waits_for_the_pages_in_flight_then_gets_a_delta)
{
    struct rfx x;
    struct bf_recon_opts o = {.incremental = true,
                              .resync_interval_ns = 10 * MS,
                              .page_size = 2,
                              .startup_page_size = 64};
    rfx_open(&x, 12, true, FP_PAGES_OK, &o);
    struct bf_recon_result res = until_walk_done(&x, 5 * SEC);
    ck_assert_uint_eq(res.walk_pages, 1);
    pfx_run_for(&x.f, 20 * MS); /* the resync is due */
    /* a background page of the resync walk starts ... */
    struct donecap page = {0}, delta = {0};
    ck_assert_int_eq(bf_recon_step(x.r, false, bf_mono_ns(), on_done, &page), 1);
    /* ... a request arriving meanwhile cannot start a second List ... */
    ck_assert_int_eq(bf_recon_step(x.r, true, bf_mono_ns(), on_done, &delta), -EBUSY);
    ck_assert(pfx_run_until(&x.f, &page.done, 5 * SEC));
    ck_assert_int_eq(page.r.kind, BF_RECON_WALK);
    ck_assert_uint_eq(page.r.listed, 2); /* one page of the walk, not the pool */
    ck_assert(!page.r.full);
    /* ... and is served next: the page asked ahead of it (pipelined walk
     * pages: at most one), then a delta issued after that page was applied,
     * ahead of the rest of the walk */
    fp_change(&x.p, 7, BF_STATE_CONFIGURING);
    ck_assert_int_eq(bf_recon_step(x.r, true, bf_mono_ns(), on_done, &delta), 1);
    ck_assert(pfx_run_until(&x.f, &delta.done, 5 * SEC));
    ck_assert_int_eq(delta.r.kind, BF_RECON_DELTA);
    ck_assert_uint_eq(delta.r.listed, 3); /* the page asked ahead (2) and the delta (1) */
    ck_assert_uint_eq(delta.r.updated, 1);
    ck_assert_uint_eq(x.p.lists_with_cursor, 2); /* the page asked ahead, then the delta */
    /* the walk then resumes where it was and completes */
    res = until_walk_done(&x, 5 * SEC);
    ck_assert(res.full);
    ck_assert_uint_eq(res.removed, 0);
    ck_assert_uint_eq(atomic_load(&x.f.shm.inv->n_machines), 12);
    rfx_close(&x);
}
END_TEST

START_TEST(walk_pages_are_asked_for_one_page_ahead_never_two)
{
    struct rfx x;
    struct bf_recon_opts o = {.incremental = true,
                              .resync_interval_ns = 10 * MS,
                              .page_size = 2,
                              .startup_page_size = 64};
    rfx_open(&x, 12, true, FP_PAGES_OK, &o);
    struct bf_recon_result res = until_walk_done(&x, 5 * SEC);
    ck_assert_uint_eq(res.walk_pages, 1); /* 12 machines, one page: nothing to ask ahead */
    pfx_run_for(&x.f, 20 * MS);
    uint32_t lists = x.p.lists;
    ck_assert_int_eq(one_pass(&x, false, &res), 1);
    ck_assert_int_eq(res.kind, BF_RECON_WALK);
    ck_assert_uint_eq(res.listed, 2);
    /* the second page was asked for while the first was applied: it
     * arrives with no pass waiting (kept), and nothing asks for a third */
    pfx_run_for(&x.f, 50 * MS);
    ck_assert_uint_eq(x.p.lists, lists + 2);
    ck_assert(!bf_recon_busy(x.r));
    pfx_run_for(&x.f, 50 * MS);
    ck_assert_uint_eq(x.p.lists, lists + 2);
    /* the next pass applies the kept page (no List of its own) and asks
     * for the third ahead */
    ck_assert_int_eq(one_pass(&x, false, &res), 1);
    ck_assert_int_eq(res.kind, BF_RECON_WALK);
    ck_assert_uint_eq(res.listed, 2);
    pfx_run_for(&x.f, 20 * MS);
    ck_assert_uint_eq(x.p.lists, lists + 3);
    /* 12 machines in pages of 2, then an empty page: 7 Lists in all */
    res = until_walk_done(&x, 5 * SEC);
    ck_assert(res.full);
    ck_assert_uint_eq(res.walk_pages, 7);
    ck_assert_uint_eq(res.walk_listed, 12);
    ck_assert_uint_eq(res.removed, 0);
    ck_assert_uint_eq(x.p.lists, lists + 7);
    /* a reconciler freed with a page asked ahead in flight or kept */
    pfx_run_for(&x.f, 20 * MS);
    ck_assert_int_eq(one_pass(&x, false, &res), 1);
    ck_assert(!res.full);
    rfx_close(&x);
}
END_TEST

/* stderr captured into a file for the duration of a test */
struct errcap {
    int saved;
    char path[64];
};
static void errcap_begin(struct errcap *e)
{
    snprintf(e->path, sizeof e->path, "/tmp/ut-recon-log-%d", (int)getpid());
    fflush(stderr);
    e->saved = dup(2);
    FILE *f = fopen(e->path, "w");
    ck_assert_ptr_nonnull(f);
    dup2(fileno(f), 2);
    fclose(f);
}
static bool errcap_end_has(struct errcap *e, const char *needle)
{
    fflush(stderr);
    dup2(e->saved, 2);
    close(e->saved);
    FILE *f = fopen(e->path, "r");
    char line[2048];
    bool found = false;
    while (f && fgets(line, sizeof line, f))
        found |= strstr(line, needle) != NULL;
    if (f)
        fclose(f);
    unlink(e->path);
    return found;
}

static void no_cursor_provider_gets_full_lists(int paging)
{
    bf_log_init("test", BF_LOG_WARN);
    struct errcap e;
    errcap_begin(&e);
    struct rfx x;
    struct bf_recon_opts o = {.incremental = true, .page_size = 3, .startup_page_size = 4};
    rfx_open(&x, 10, false, paging, &o);
    struct bf_recon_result res = until_walk_done(&x, 5 * SEC);
    if (!res.full) /* max_results honoured but no cursor: the walk restarts unpaged */
        res = until_walk_done(&x, 5 * SEC);
    ck_assert(res.full);
    ck_assert_uint_eq(atomic_load(&x.f.shm.inv->n_machines), 10);
    ck_assert(!bf_recon_incremental(x.r));
    /* every request: one whole List, removals included */
    x.p.gone[3] = true;
    uint32_t lists = x.p.lists;
    ck_assert_int_eq(one_pass(&x, true, &res), 1);
    ck_assert_int_eq(res.kind, BF_RECON_WALK);
    ck_assert(res.full);
    ck_assert_uint_eq(res.listed, 9);
    ck_assert_uint_eq(res.removed, 1);
    ck_assert_uint_eq(x.p.lists, lists + 1);
    ck_assert(!known(&x, "fake-03"));
    /* no background work between requests */
    ck_assert_int_eq(one_pass(&x, false, &res), 0);
    rfx_close(&x);
    ck_assert(errcap_end_has(&e, "does not support since_revision"));
    bf_log_init("test", BF_LOG_ERROR);
}

START_TEST(a_provider_without_cursors_gets_full_lists_with_a_warning)
{
    no_cursor_provider_gets_full_lists(FP_NO_MAX);
}
END_TEST

START_TEST(a_provider_without_cursors_that_honours_max_results_still_gets_whole_lists)
{
    no_cursor_provider_gets_full_lists(FP_PAGES_OK);
}
END_TEST

START_TEST(pages_that_return_the_head_revision_never_remove_a_listed_machine)
{
    bf_log_init("test", BF_LOG_WARN);
    struct errcap e;
    errcap_begin(&e);
    struct rfx x;
    struct bf_recon_opts o = {.incremental = true,
                              .resync_interval_ns = 10 * MS,
                              .page_size = 3,
                              .startup_page_size = 64};
    rfx_open(&x, 10, true, FP_PAGES_HEAD, &o);
    struct bf_recon_result res = until_walk_done(&x, 5 * SEC); /* one page: the whole pool */
    ck_assert_uint_eq(atomic_load(&x.f.shm.inv->n_machines), 10);
    /* a resync: page 1 says "head", page 2 (since head) is empty, so the
     * walk looks complete after 3 machines; the 7 it missed are confirmed
     * by Get, found, and kept */
    pfx_run_for(&x.f, 20 * MS);
    res = until_walk_done(&x, 5 * SEC);
    ck_assert_uint_eq(res.walk_pages, 2);
    ck_assert_uint_eq(res.walk_listed, 3);
    ck_assert_uint_eq(res.removed, 0);
    ck_assert_uint_eq(x.p.gets, 7);
    for (int i = 0; i < 10; i++)
        ck_assert(known(&x, x.p.names[i]));
    /* the provider pages wrongly: walks go unpaged */
    pfx_run_for(&x.f, 20 * MS);
    res = until_walk_done(&x, 5 * SEC);
    ck_assert(res.full);
    ck_assert_uint_eq(res.walk_pages, 1);
    ck_assert_uint_eq(res.walk_listed, 10);
    ck_assert_uint_eq(res.removed, 0);
    /* a machine really gone is still removed (by the unpaged walk) */
    x.p.gone[4] = true;
    pfx_run_for(&x.f, 20 * MS);
    res = until_walk_done(&x, 5 * SEC);
    ck_assert_uint_eq(res.removed, 1);
    ck_assert(!known(&x, "fake-04"));
    rfx_close(&x);
    ck_assert(errcap_end_has(&e, "resync walks go unpaged"));
    bf_log_init("test", BF_LOG_ERROR);
}
END_TEST

START_TEST(the_old_behaviour_lists_everything_for_every_request)
{
    struct rfx x;
    struct bf_recon_opts o = {.incremental = false};
    rfx_open(&x, 6, true, FP_PAGES_OK, &o);
    struct bf_recon_result res;
    ck_assert_int_eq(one_pass(&x, true, &res), 1);
    ck_assert(res.full);
    ck_assert_uint_eq(res.listed, 6);
    x.p.gone[0] = true;
    ck_assert_int_eq(one_pass(&x, true, &res), 1);
    ck_assert(res.full);
    ck_assert_uint_eq(res.listed, 5);
    ck_assert_uint_eq(res.removed, 1);
    ck_assert_uint_eq(x.p.lists_with_cursor, 0);
    ck_assert_uint_eq(x.p.lists_paged, 0);
    ck_assert(!bf_recon_incremental(x.r));
    rfx_close(&x);
}
END_TEST

START_TEST(a_truncated_delta_is_caught_up_in_the_background)
{
    struct rfx x;
    struct bf_recon_opts o = {.incremental = true,
                              .resync_interval_ns = 3600 * SEC,
                              .page_size = 2,
                              .startup_page_size = 64};
    rfx_open(&x, 8, true, FP_PAGES_OK, &o);
    until_walk_done(&x, 5 * SEC);
    for (int i = 0; i < 5; i++)
        fp_change(&x.p, i, BF_STATE_CONFIGURING);
    struct bf_recon_result res;
    ck_assert_int_eq(one_pass(&x, true, &res), 1); /* the request: one page */
    ck_assert_int_eq(res.kind, BF_RECON_DELTA);
    ck_assert_uint_eq(res.listed, 2);
    uint32_t caught = 0;
    while (one_pass(&x, false, &res) == 1) { /* the rest, unasked */
        ck_assert_int_eq(res.kind, BF_RECON_DELTA);
        caught += res.listed;
    }
    ck_assert_uint_eq(caught, 3);
    ck_assert_uint_eq(atomic_load(&x.f.shm.st->reconciler.machines_updated), 5);
    rfx_close(&x);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("reconciler_resync");
    TCase *t = tcase_create("resync");
    tcase_set_timeout(t, 30);
    tcase_add_test(t, a_machine_removed_at_the_provider_leaves_within_one_resync_period);
    tcase_add_test(t,
                   a_request_during_a_resync_walk_waits_for_the_pages_in_flight_then_gets_a_delta);
    tcase_add_test(t, walk_pages_are_asked_for_one_page_ahead_never_two);
    tcase_add_test(t, a_truncated_delta_is_caught_up_in_the_background);
    tcase_add_test(t, the_old_behaviour_lists_everything_for_every_request);
    suite_add_tcase(s, t);
    t = tcase_create("fallback");
    tcase_set_timeout(t, 30);
    tcase_add_test(t, a_provider_without_cursors_gets_full_lists_with_a_warning);
    tcase_add_test(t, a_provider_without_cursors_that_honours_max_results_still_gets_whole_lists);
    tcase_add_test(t, pages_that_return_the_head_revision_never_remove_a_listed_machine);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    bf_log_init("test", BF_LOG_ERROR);
    return check_run(suite());
}
