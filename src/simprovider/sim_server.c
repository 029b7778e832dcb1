/*
 * sim_server.c — bigfleet-simprovider's gRPC face (sim_server.h): six unary
 * methods on one bf_net server, each handing the request bytes to
 * bf_sim_handle() and answering with the serialized reply or a status.
 *
 * Design notes
 *   - Reply latency: when the core asks for a hold (r.delay_ns > 0) the reply
 *     body is stolen from the reply struct and sent from a one-shot timer;
 *     the pending reply is attached to the call, so a client that cancels or
 *     times out frees it in on_done (the timer never fires on a dead call).
 *   - Replies are handed to the net layer without a copy
 *     (bf_net_call_reply_lend): a List page is megabytes. The net layer
 *     gives each body back when it is sent, and a List's reply starts in a
 *     body given back before (at most SIMSRV_SPARES of 1-64 MiB kept): a
 *     freed buffer of 8 MiB or more goes back to the kernel at once
 *     (jemalloc's oversize arena), so every page of a fresh 14 MB List
 *     page was a page fault, ~4,000 a page at ~14-20 us each on a PVM
 *     guest (issue 18, stop 32: the simulator's half of the large-page
 *     cliff).
 *   - New streams: up to BF_SIMSRV_STREAM_RATE a second per connection (the
 *     net layer's flood guard defaults to 200): one shard's executor and
 *     reconciler open a stream per call (a resync walk at 500K is 123 Lists
 *     in ~0.2 s; the executor bench runs ~80,000 RPCs/s), and a provider
 *     that GOAWAYs its own shard for that only tests reconnects.
 *   - Time: one bf_net timer is armed at bf_sim_next_deadline(), re-armed
 *     after every RPC and every advance; the sim's clock is bf_mono_ns().
 */
#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/log.h"
#include "bigfleet/util.h"
#include "simprovider/sim_server.h"

/* Recycled reply bodies (design notes). Separate from the server: a body
 * the net layer still holds when the server is freed comes back after it. */
#define SIMSRV_SPARES    2
#define SIMSRV_SPARE_MIN (1u << 20)
#define SIMSRV_SPARE_MAX (64u << 20)
struct spares {
    unsigned lent; /* bodies out with the net layer */
    bool orphan;   /* the server is gone: freed when the last comes back */
    unsigned n;
    uint8_t *buf[SIMSRV_SPARES];
};

/* A kept body (and its usable size) for a reply to start in, or none. */
static void spare_take(struct spares *sp, struct bf_sim_reply *r)
{
    if (sp->n == 0)
        return;
    r->body = sp->buf[--sp->n];
    r->cap = malloc_usable_size(r->body);
}

/* Keeps body for a later reply when it is of the size worth keeping and
 * there is room; frees it otherwise. */
static void spare_keep(struct spares *sp, void *body)
{
    size_t cap = body ? malloc_usable_size(body) : 0;
    if (sp->orphan || sp->n == SIMSRV_SPARES || cap < SIMSRV_SPARE_MIN || cap > SIMSRV_SPARE_MAX) {
        free(body);
        return;
    }
    sp->buf[sp->n++] = body;
}

/* bf_net_release_fn: the net layer gives a reply body back. */
static void spare_back(void *body, void *arg)
{
    struct spares *sp = arg;
    sp->lent--;
    spare_keep(sp, body);
    if (sp->orphan && sp->lent == 0)
        free(sp);
}

struct bf_simsrv {
    struct spares *sp;
    struct bf_net_loop *loop;
    struct bf_sim *sim;
    struct bf_net_server *srv;
    struct bf_net_timer *adv;
    int64_t armed_at; /* INT64_MAX when stopped */
    struct bf_net_method methods[BF_SIM_RPC_COUNT];
    struct margs {
        struct bf_simsrv *s;
        int rpc;
    } margs[BF_SIM_RPC_COUNT]; /* method arg: the server and the rpc */
    struct bf_simsrv_stats stats;
};

struct held {
    struct bf_simsrv *s;
    struct bf_net_call *call;
    struct bf_net_timer *t;
    int code;
    char message[256];
    uint8_t *body;
    size_t len;
};

static const char *const paths[BF_SIM_RPC_COUNT] = {
    "/bigfleet.v1alpha1.CapacityProvider/Create", "/bigfleet.v1alpha1.CapacityProvider/Configure",
    "/bigfleet.v1alpha1.CapacityProvider/Drain",  "/bigfleet.v1alpha1.CapacityProvider/Delete",
    "/bigfleet.v1alpha1.CapacityProvider/Get",    "/bigfleet.v1alpha1.CapacityProvider/List"};

static void adv_cb(struct bf_net_timer *t, void *arg);

void bf_simsrv_rearm(struct bf_simsrv *s)
{
    int64_t next = bf_sim_next_deadline(s->sim);
    if (next == INT64_MAX) {
        if (s->armed_at != INT64_MAX)
            bf_net_timer_stop(s->adv);
        s->armed_at = INT64_MAX;
        return;
    }
    if (next == s->armed_at && bf_net_timer_active(s->adv))
        return;
    int64_t d = next - bf_mono_ns();
    bf_net_timer_start(s->adv, d > 0 ? d : 0, 0);
    s->armed_at = next;
}

static void adv_cb(struct bf_net_timer *t, void *arg)
{
    (void)t;
    struct bf_simsrv *s = arg;
    s->armed_at = INT64_MAX;
    s->stats.advances++;
    if (bf_sim_advance(s->sim, bf_mono_ns()) < 0) {
        s->stats.advance_errors++;
        BF_WARN("simulated provider: persisting state failed", "advances=%llu",
                (unsigned long long)s->stats.advances);
    }
    bf_simsrv_rearm(s);
}

/* Answers with the status, or with body (malloc'd; taken in every case: the
 * net layer sends it from where it is and gives it back to sp). */
static void send_reply(struct spares *sp, struct bf_net_call *call, int code, const char *message,
                       uint8_t *body, size_t len)
{
    if (bf_net_call_finished(call) || code != 0) {
        spare_keep(sp, body);
        if (!bf_net_call_finished(call))
            bf_net_call_finish(call, code, message);
        return;
    }
    sp->lent++;
    int rc = bf_net_call_reply_lend(call, body, len, spare_back, sp);
    if (rc == -EMSGSIZE) /* a List of a huge pool: say so (the client pages) */
        bf_net_call_finish(call, BF_NET_RESOURCE_EXHAUSTED,
                           "reply larger than the largest message this server sends");
    else if (rc < 0)
        bf_net_call_finish(call, BF_NET_INTERNAL, "cannot send the reply");
}

static void held_free(struct held *h)
{
    if (!h)
        return;
    bf_net_timer_free(h->t);
    free(h->body);
    free(h);
}

static void held_cb(struct bf_net_timer *t, void *arg)
{
    (void)t;
    struct held *h = arg;
    uint8_t *body = h->body;
    h->body = NULL;
    send_reply(h->s->sp, h->call, h->code, h->message, body, h->len);
    /* freed in on_done (the call is over once the reply is sent) */
}

static void on_message(struct bf_net_call *call, const uint8_t *msg, size_t len, void *arg)
{
    const struct margs *ma = arg;
    struct bf_simsrv *s = ma->s;
    int rpc = ma->rpc;
    struct bf_sim_reply r = {0};
    const uint8_t *spare = NULL;
    if (rpc == BF_SIM_RPC_LIST && s->sp->n > 0) {
        spare_take(s->sp, &r);
        spare = r.body;
    }
    bf_sim_handle(s->sim, rpc, msg, len, bf_mono_ns(), &r);
    /* counted when the reply stayed in the recycled body (not regrown and
     * moved, not an error) (review-s32b) */
    if (spare && r.body == spare && r.code == 0)
        s->stats.list_reuses++;
    if (r.delay_ns > 0) {
        struct held *h = calloc(1, sizeof *h);
        if (h)
            h->t = bf_net_timer_new(s->loop, held_cb, h);
        if (!h || !h->t) {
            free(h);
            send_reply(s->sp, call, r.code, r.message, r.body, r.len); /* no memory: answer now */
            r.body = NULL;
        } else {
            h->s = s;
            h->call = call;
            h->code = r.code;
            memcpy(h->message, r.message, sizeof h->message);
            h->body = r.body;
            h->len = r.len;
            r.body = NULL;
            r.cap = 0;
            bf_net_call_set_user(call, h);
            bf_net_timer_start(h->t, r.delay_ns, 0);
            s->stats.held++;
            s->stats.held_open++;
        }
    } else {
        send_reply(s->sp, call, r.code, r.message, r.body, r.len); /* sent, not copied */
        r.body = NULL;
    }
    spare_keep(s->sp, r.body); /* not handed over (NULL when it was) */
    bf_simsrv_rearm(s);
}

static void on_done(struct bf_net_call *call, int code, void *arg)
{
    (void)code;
    struct bf_simsrv *s = ((const struct margs *)arg)->s;
    struct held *h = bf_net_call_user(call);
    if (h) {
        bf_net_call_set_user(call, NULL);
        held_free(h);
        s->stats.held_open--;
    }
}

int bf_simsrv_new(struct bf_net_loop *loop, struct bf_sim *sim, const struct bf_simsrv_opts *o,
                  struct bf_simsrv **out)
{
    struct bf_simsrv *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->loop = loop;
    s->sim = sim;
    s->armed_at = INT64_MAX;
    s->sp = calloc(1, sizeof *s->sp);
    s->adv = s->sp ? bf_net_timer_new(loop, adv_cb, s) : NULL;
    if (!s->adv) {
        free(s->sp);
        free(s);
        return -ENOMEM;
    }
    for (int i = 0; i < BF_SIM_RPC_COUNT; i++) {
        s->margs[i] = (struct margs){s, i};
        s->methods[i] = (struct bf_net_method){
            .path = paths[i],
            .kind = BF_NET_UNARY,
            .on_message = on_message,
            .on_done = on_done,
            .arg = &s->margs[i],
        };
    }
    struct bf_net_server_opts so = {
        .addr = o->addr,
        .max_new_streams_per_second = BF_SIMSRV_STREAM_RATE,
        .tls = o->tls,
        .methods = s->methods,
        .n_methods = BF_SIM_RPC_COUNT,
    };
    int rc = bf_net_server_new(loop, &so, &s->srv);
    if (rc) {
        bf_net_timer_free(s->adv);
        free(s->sp);
        free(s);
        return rc;
    }
    bf_simsrv_rearm(s);
    *out = s;
    return 0;
}

uint16_t bf_simsrv_port(const struct bf_simsrv *s)
{
    return bf_net_server_port(s->srv);
}

struct bf_net_server *bf_simsrv_net(struct bf_simsrv *s)
{
    return s->srv;
}

void bf_simsrv_stats(const struct bf_simsrv *s, struct bf_simsrv_stats *out)
{
    *out = s->stats;
}

void bf_simsrv_shutdown(struct bf_simsrv *s, int64_t grace_ns, void (*done)(void *arg), void *arg)
{
    bf_net_server_shutdown(s->srv, grace_ns, done, arg);
}

void bf_simsrv_free(struct bf_simsrv *s)
{
    if (!s)
        return;
    bf_net_server_free(s->srv);
    bf_net_timer_free(s->adv);
    struct spares *sp = s->sp;
    while (sp->n > 0)
        free(sp->buf[--sp->n]);
    sp->orphan = true;
    if (sp->lent == 0)
        free(sp);
    free(s);
}
