/*
 * grpc_test_client.c — our gRPC client (bigfleet/net.h) against a real
 * @grpc/grpc-js server, driven by tests/interop/grpc_client.test.js.
 *
 *   grpc_test_client --addr HOST:PORT [--tls-ca F [--tls-cert F --tls-key F]]
 *                    [--server-name N] --scenario a,b,c
 *
 * Scenarios (the JS server implements the same behaviour as
 * grpc_test_server.c on the same bigfleet paths):
 *   unary       Get echo, NOT_FOUND, non-ASCII grpc-message
 *   concurrent  200 unary calls in flight on one connection, own deadlines
 *   stream      InspectNeeds: header + 50 needs, OK
 *   bidi        Session: hello + 3 rollups -> 4 acks, half-close -> OK
 *   deadline    Drain never answers: DEADLINE_EXCEEDED on time
 *   cancel      endless InspectNeeds, cancelled after 3 messages
 *   servercancel  Session rollup "cancel-me": the server cancels the call
 *   big         List of 200000 machines; Configure with a 64 MiB blob
 *   whoami      Get "whoami": the server saw our certificate's URI SAN
 *   goaway      Session open while the server shuts down gracefully
 *   reconnect   no server yet: calls fail fast with UNAVAILABLE; once the
 *               server appears the client reconnects and calls succeed
 * Prints "ok <scenario>" or "FAIL <scenario>: why"; exit 0 iff all passed.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/log.h"
#include "bigfleet/net.h"
#include "bigfleet/util.h"
#include "bigfleet/v1alpha1/provider.pb-c.h"
#include "bigfleet/v1alpha1/shard.pb-c.h"
#include "bigfleet/v1alpha1/shardread.pb-c.h"

#define P_GET       "/bigfleet.v1alpha1.CapacityProvider/Get"
#define P_CONFIGURE "/bigfleet.v1alpha1.CapacityProvider/Configure"
#define P_LIST      "/bigfleet.v1alpha1.CapacityProvider/List"
#define P_DRAIN     "/bigfleet.v1alpha1.CapacityProvider/Drain"
#define P_INSPECT   "/bigfleet.v1alpha1.ShardRead/InspectNeeds"
#define P_SESSION   "/bigfleet.v1alpha1.Shard/Session"

static struct bf_net_loop *L;
static struct bf_net_client *C;
static char g_why[512];

static bool fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static bool fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_why, sizeof g_why, fmt, ap);
    va_end(ap);
    return false;
}

/* ------------------------------------------------------------ helpers */

struct ures {
    int done, code;
    char msg[256];
    uint8_t *resp;
    size_t len;
    int64_t t0, at;
};

static void ucb(void *arg, int code, const char *message, const uint8_t *resp, size_t len)
{
    struct ures *r = arg;
    r->done = 1;
    r->code = code;
    r->at = bf_mono_ns();
    snprintf(r->msg, sizeof r->msg, "%s", message);
    if (resp) {
        r->resp = malloc(len ? len : 1);
        memcpy(r->resp, resp, len);
        r->len = len;
    }
}

static void run_until(bool (*pred)(void *), void *arg, int64_t max_ns)
{
    int64_t until = bf_mono_ns() + max_ns;
    while (!pred(arg) && bf_mono_ns() < until)
        bf_net_loop_run_once(L, 10 * BF_NS_PER_MS);
}

static bool ures_done(void *a)
{
    return ((struct ures *)a)->done;
}

static void get(const char *id, int64_t tmo, struct ures *r)
{
    Bigfleet__V1alpha1__MachineRef ref = BIGFLEET__V1ALPHA1__MACHINE_REF__INIT;
    ref.id = (char *)id;
    memset(r, 0, sizeof *r);
    r->t0 = bf_mono_ns();
    if (!bf_net_client_unary_pb(C, P_GET, &ref.base, tmo, ucb, r)) {
        r->done = 1;
        r->code = -errno;
    }
}

static bool get_sync(const char *id, struct ures *r)
{
    get(id, 10 * BF_NS_PER_SEC, r);
    run_until(ures_done, r, 15 * BF_NS_PER_SEC);
    return r->done;
}

struct sres {
    int msgs, done, code;
    char msg[256];
    char acks[512];
    int cancel_after;
    int64_t t0;
};

static void s_msg(struct bf_net_stream *s, const uint8_t *m, size_t n, void *arg)
{
    struct sres *r = arg;
    r->msgs++;
    Bigfleet__V1alpha1__ShardMessage *sm = NULL;
    if (bf_net_stream_user(s) == (void *)1 &&
        (sm = bigfleet__v1alpha1__shard_message__unpack(NULL, n, m)) && sm->ack) {
        size_t l = strlen(r->acks);
        snprintf(r->acks + l, sizeof r->acks - l, "%s%s", l ? "," : "", sm->ack->echo);
    }
    if (sm)
        bigfleet__v1alpha1__shard_message__free_unpacked(sm, NULL);
    if (r->cancel_after && r->msgs == r->cancel_after)
        bf_net_stream_cancel(s);
}

static void s_done(struct bf_net_stream *s, int code, const char *message, void *arg)
{
    (void)s;
    struct sres *r = arg;
    r->done = 1;
    r->code = code;
    snprintf(r->msg, sizeof r->msg, "%s", message);
}

static bool sres_done(void *a)
{
    return ((struct sres *)a)->done;
}

static const struct bf_net_stream_cbs CBS = {s_msg, NULL, s_done};

static int send_op(struct bf_net_stream *s, int kind, const char *arg)
{
    Bigfleet__V1alpha1__OperatorMessage om = BIGFLEET__V1ALPHA1__OPERATOR_MESSAGE__INIT;
    Bigfleet__V1alpha1__Hello h = BIGFLEET__V1ALPHA1__HELLO__INIT;
    Bigfleet__V1alpha1__ClusterCapacityNeeds cn = BIGFLEET__V1ALPHA1__CLUSTER_CAPACITY_NEEDS__INIT;
    if (kind == 0) {
        h.cluster_id = (char *)arg;
        om.payload_case = BIGFLEET__V1ALPHA1__OPERATOR_MESSAGE__PAYLOAD_HELLO;
        om.hello = &h;
    } else {
        cn.cluster_id = (char *)arg;
        om.payload_case = BIGFLEET__V1ALPHA1__OPERATOR_MESSAGE__PAYLOAD_ROLLUP;
        om.rollup = &cn;
    }
    return bf_net_stream_send_pb(s, &om.base);
}

static struct bf_net_stream *inspect(int32_t limit, struct sres *r)
{
    memset(r, 0, sizeof *r);
    Bigfleet__V1alpha1__InspectNeedsRequest rq = BIGFLEET__V1ALPHA1__INSPECT_NEEDS_REQUEST__INIT;
    rq.cluster_id = "c1";
    rq.limit = limit;
    struct bf_net_stream *s = bf_net_client_call(C, P_INSPECT, 0, &CBS, r);
    bf_net_stream_send_pb(s, &rq.base);
    bf_net_stream_close_send(s);
    return s;
}

/* ------------------------------------------------------------ scenarios */

static bool sc_unary(void)
{
    struct ures r;
    get_sync("m1", &r);
    if (r.code != BF_NET_OK)
        return fail("Get m1: %s %s", bf_net_code_name(r.code), r.msg);
    Bigfleet__V1alpha1__Machine *m = bigfleet__v1alpha1__machine__unpack(NULL, r.len, r.resp);
    bool ok = m && strcmp(m->id, "m1") == 0 && strcmp(m->instance_type, "echo") == 0;
    if (m)
        bigfleet__v1alpha1__machine__free_unpacked(m, NULL);
    free(r.resp);
    if (!ok)
        return fail("Get m1: wrong machine");
    get_sync("missing", &r);
    if (r.code != BF_NET_NOT_FOUND || strcmp(r.msg, "machine missing not found") != 0)
        return fail("Get missing: %s \"%s\"", bf_net_code_name(r.code), r.msg);
    get_sync("unicode", &r);
    if (r.code != BF_NET_INVALID_ARGUMENT || strcmp(r.msg, "bad \xe2\x9c\x93 100%\nline2") != 0)
        return fail("Get unicode: %s \"%s\"", bf_net_code_name(r.code), r.msg);
    return true;
}

#define NCONC 200
static struct ures conc[NCONC];
static bool conc_done(void *a)
{
    (void)a;
    for (int i = 0; i < NCONC; i++)
        if (!conc[i].done)
            return false;
    return true;
}

static bool sc_concurrent(void)
{
    struct bf_net_stats before;
    bf_net_client_stats(C, &before);
    char ids[NCONC][16];
    for (int i = 0; i < NCONC; i++) {
        snprintf(ids[i], sizeof ids[i], i % 4 ? "c%d" : "slow:%d", i % 4 ? i : 20 + i % 60);
        get(ids[i], (5 + i % 5) * BF_NS_PER_SEC, &conc[i]);
    }
    run_until(conc_done, NULL, 15 * BF_NS_PER_SEC);
    for (int i = 0; i < NCONC; i++) {
        if (conc[i].code != BF_NET_OK)
            return fail("call %d: %s %s", i, bf_net_code_name(conc[i].code), conc[i].msg);
        Bigfleet__V1alpha1__Machine *m =
            bigfleet__v1alpha1__machine__unpack(NULL, conc[i].len, conc[i].resp);
        bool ok = m && strcmp(m->id, ids[i]) == 0;
        if (m)
            bigfleet__v1alpha1__machine__free_unpacked(m, NULL);
        free(conc[i].resp);
        if (!ok)
            return fail("call %d: wrong answer", i);
    }
    struct bf_net_stats after;
    bf_net_client_stats(C, &after);
    if (after.connect_attempts != before.connect_attempts)
        return fail("reconnected during the burst");
    return true;
}

static bool sc_stream(void)
{
    struct sres r;
    inspect(50, &r);
    run_until(sres_done, &r, 10 * BF_NS_PER_SEC);
    if (r.code != BF_NET_OK || r.msgs != 51)
        return fail("InspectNeeds: %s msgs=%d %s", bf_net_code_name(r.code), r.msgs, r.msg);
    return true;
}

static bool sc_bidi(void)
{
    struct sres r = {0};
    struct bf_net_stream *s = bf_net_client_call(C, P_SESSION, 0, &CBS, &r);
    bf_net_stream_set_user(s, (void *)1);
    send_op(s, 0, "c1");
    for (int i = 0; i < 3; i++)
        send_op(s, 1, "c1");
    int64_t until = bf_mono_ns() + 5 * BF_NS_PER_SEC;
    while (r.msgs < 4 && bf_mono_ns() < until)
        bf_net_loop_run_once(L, 10 * BF_NS_PER_MS);
    if (r.done)
        return fail("session ended early: %s %s", bf_net_code_name(r.code), r.msg);
    bf_net_stream_close_send(s);
    run_until(sres_done, &r, 5 * BF_NS_PER_SEC);
    if (r.code != BF_NET_OK || strcmp(r.acks, "hello,rollup,rollup,rollup") != 0)
        return fail("Session: %s acks=%s %s", bf_net_code_name(r.code), r.acks, r.msg);
    return true;
}

static bool sc_deadline(void)
{
    struct ures r = {0};
    Bigfleet__V1alpha1__DrainRequest d = BIGFLEET__V1ALPHA1__DRAIN_REQUEST__INIT;
    d.machine_id = "m1";
    r.t0 = bf_mono_ns();
    bf_net_client_unary_pb(C, P_DRAIN, &d.base, 300 * BF_NS_PER_MS, ucb, &r);
    run_until(ures_done, &r, 5 * BF_NS_PER_SEC);
    int64_t ms = (r.at - r.t0) / BF_NS_PER_MS;
    if (r.code != BF_NET_DEADLINE_EXCEEDED)
        return fail("Drain: %s %s", bf_net_code_name(r.code), r.msg);
    if (ms < 300 || ms > 1500)
        return fail("deadline after %lld ms", (long long)ms);
    return true;
}

static bool sc_cancel(void)
{
    struct sres r;
    inspect(-1, &r);
    r.cancel_after = 3;
    run_until(sres_done, &r, 10 * BF_NS_PER_SEC);
    if (r.code != BF_NET_CANCELLED || r.msgs < 3)
        return fail("cancel: %s msgs=%d", bf_net_code_name(r.code), r.msgs);
    /* give the RST_STREAM time to leave before the next scenario */
    struct ures w = {0};
    run_until(ures_done, &w, 200 * BF_NS_PER_MS);
    return true;
}

static bool sc_servercancel(void)
{
    struct sres r = {0};
    struct bf_net_stream *s = bf_net_client_call(C, P_SESSION, 0, &CBS, &r);
    bf_net_stream_set_user(s, (void *)1);
    send_op(s, 0, "c1");
    send_op(s, 1, "cancel-me");
    run_until(sres_done, &r, 5 * BF_NS_PER_SEC);
    if (r.code != BF_NET_CANCELLED)
        return fail("server cancel: %s %s", bf_net_code_name(r.code), r.msg);
    return true;
}

static bool sc_big(void)
{
    struct ures r = {0};
    Bigfleet__V1alpha1__ListFilter f = BIGFLEET__V1ALPHA1__LIST_FILTER__INIT;
    f.max_results = 200000;
    bf_net_client_unary_pb(C, P_LIST, &f.base, 60 * BF_NS_PER_SEC, ucb, &r);
    run_until(ures_done, &r, 60 * BF_NS_PER_SEC);
    if (r.code != BF_NET_OK)
        return fail("List: %s %s", bf_net_code_name(r.code), r.msg);
    Bigfleet__V1alpha1__MachineList *ml =
        bigfleet__v1alpha1__machine_list__unpack(NULL, r.len, r.resp);
    size_t n = ml ? ml->n_machines : 0;
    bool last_ok = ml && n == 200000 && strcmp(ml->machines[n - 1]->id, "m199999") == 0;
    if (ml)
        bigfleet__v1alpha1__machine_list__free_unpacked(ml, NULL);
    free(r.resp);
    if (!last_ok)
        return fail("List: %zu machines (%zu bytes)", n, r.len);
    struct ures c = {0};
    Bigfleet__V1alpha1__ConfigureRequest cr = BIGFLEET__V1ALPHA1__CONFIGURE_REQUEST__INIT;
    cr.machine_id = "big";
    cr.bootstrap_blob.len = 64u << 20;
    cr.bootstrap_blob.data = calloc(1, cr.bootstrap_blob.len);
    bf_net_client_unary_pb(C, P_CONFIGURE, &cr.base, 60 * BF_NS_PER_SEC, ucb, &c);
    free(cr.bootstrap_blob.data);
    run_until(ures_done, &c, 60 * BF_NS_PER_SEC);
    if (c.code != BF_NET_OK)
        return fail("Configure: %s %s", bf_net_code_name(c.code), c.msg);
    Bigfleet__V1alpha1__TransitionAck *ack =
        bigfleet__v1alpha1__transition_ack__unpack(NULL, c.len, c.resp);
    bool ok = ack && strcmp(ack->operation_id, "67108864") == 0;
    if (ack)
        bigfleet__v1alpha1__transition_ack__free_unpacked(ack, NULL);
    free(c.resp);
    return ok ? true : fail("Configure: server saw a different blob size");
}

static bool sc_whoami(void)
{
    struct ures r;
    get_sync("whoami", &r);
    if (r.code != BF_NET_OK)
        return fail("whoami: %s %s", bf_net_code_name(r.code), r.msg);
    Bigfleet__V1alpha1__Machine *m = bigfleet__v1alpha1__machine__unpack(NULL, r.len, r.resp);
    printf("identity %s\n", m ? m->id : "?");
    if (m)
        bigfleet__v1alpha1__machine__free_unpacked(m, NULL);
    free(r.resp);
    return true;
}

static bool sc_goaway(void)
{
    /* open a session, ask the server to shut down gracefully, keep using the
     * open stream (GOAWAY leaves it alone), then finish it */
    struct sres r = {0};
    struct bf_net_stream *s = bf_net_client_call(C, P_SESSION, 0, &CBS, &r);
    bf_net_stream_set_user(s, (void *)1);
    send_op(s, 0, "c1");
    send_op(s, 1, "shutdown"); /* the JS server starts tryShutdown() */
    int64_t until = bf_mono_ns() + 5 * BF_NS_PER_SEC;
    while (r.msgs < 2 && !r.done && bf_mono_ns() < until)
        bf_net_loop_run_once(L, 10 * BF_NS_PER_MS);
    struct ures w = {0};
    run_until(ures_done, &w, 300 * BF_NS_PER_MS);
    send_op(s, 1, "c1");
    until = bf_mono_ns() + 5 * BF_NS_PER_SEC;
    while (r.msgs < 3 && !r.done && bf_mono_ns() < until)
        bf_net_loop_run_once(L, 10 * BF_NS_PER_MS);
    bf_net_stream_close_send(s);
    run_until(sres_done, &r, 5 * BF_NS_PER_SEC);
    if (r.code != BF_NET_OK || strcmp(r.acks, "hello,rollup,rollup") != 0)
        return fail("session across GOAWAY: %s acks=%s %s", bf_net_code_name(r.code), r.acks,
                    r.msg);
    /* the server is gone now: new calls fail with UNAVAILABLE */
    struct ures n;
    get_sync("after", &n);
    if (n.code != BF_NET_UNAVAILABLE)
        return fail("call after shutdown: %s %s", bf_net_code_name(n.code), n.msg);
    return true;
}

static bool sc_reconnect(void)
{
    int fast_fail = 0;
    int64_t until = bf_mono_ns() + 15 * BF_NS_PER_SEC;
    while (bf_mono_ns() < until) {
        struct ures r;
        get("hello-again", 2 * BF_NS_PER_SEC, &r);
        run_until(ures_done, &r, 3 * BF_NS_PER_SEC);
        int64_t ms = (r.at - r.t0) / BF_NS_PER_MS;
        if (r.code == BF_NET_OK) {
            free(r.resp);
            printf("reconnect: %d fast UNAVAILABLE before success\n", fast_fail);
            return fast_fail > 0 ? true : fail("the server was up from the start");
        }
        if (r.code != BF_NET_UNAVAILABLE)
            return fail("while down: %s %s", bf_net_code_name(r.code), r.msg);
        if (bf_net_client_state(C) == BF_NET_CLIENT_BACKOFF && ms > 100)
            return fail("UNAVAILABLE took %lld ms (not fast)", (long long)ms);
        fast_fail++;
        struct ures w = {0};
        run_until(ures_done, &w, 50 * BF_NS_PER_MS);
    }
    return fail("never reconnected");
}

static const struct {
    const char *name;
    bool (*fn)(void);
} SCEN[] = {
    {"unary", sc_unary},
    {"concurrent", sc_concurrent},
    {"stream", sc_stream},
    {"bidi", sc_bidi},
    {"deadline", sc_deadline},
    {"cancel", sc_cancel},
    {"servercancel", sc_servercancel},
    {"big", sc_big},
    {"whoami", sc_whoami},
    {"goaway", sc_goaway},
    {"reconnect", sc_reconnect},
};

int main(int argc, char **argv)
{
    struct bf_net_client_opts o = {.backoff_initial_ns = 100 * BF_NS_PER_MS,
                                   .backoff_max_ns = 500 * BF_NS_PER_MS};
    const char *scen = "unary";
    static const struct option lo[] = {
        {"addr", required_argument, 0, 'a'},
        {"tls-ca", required_argument, 0, 'r'},
        {"tls-cert", required_argument, 0, 'c'},
        {"tls-key", required_argument, 0, 'k'},
        {"server-name", required_argument, 0, 'n'},
        {"scenario", required_argument, 0, 's'},
        {0, 0, 0, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 'a':
            o.addr = optarg;
            break;
        case 'r':
            o.tls.ca_file = optarg;
            break;
        case 'c':
            o.tls.cert_file = optarg;
            break;
        case 'k':
            o.tls.key_file = optarg;
            break;
        case 'n':
            o.server_name = optarg;
            break;
        case 's':
            scen = optarg;
            break;
        default:
            fprintf(stderr,
                    "usage: %s --addr A [--tls-ca F [--tls-cert F --tls-key F]] "
                    "[--server-name N] --scenario a,b\n",
                    argv[0]);
            return 2;
        }
    }
    if (!o.addr) {
        fprintf(stderr, "--addr is required\n");
        return 2;
    }
    bf_log_init("grpc-test-client", BF_LOG_WARN);
    signal(SIGPIPE, SIG_IGN);
    if (bf_net_loop_new(NULL, &L) < 0 || bf_net_client_new(L, &o, &C) < 0) {
        fprintf(stderr, "setup failed\n");
        return 1;
    }
    int failed = 0;
    char *list = strdup(scen), *save = NULL;
    for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        bool found = false;
        for (size_t i = 0; i < sizeof SCEN / sizeof SCEN[0]; i++) {
            if (strcmp(SCEN[i].name, t) != 0)
                continue;
            found = true;
            g_why[0] = 0;
            if (SCEN[i].fn()) {
                printf("ok %s\n", t);
            } else {
                printf("FAIL %s: %s\n", t, g_why);
                failed++;
            }
            fflush(stdout);
        }
        if (!found) {
            printf("FAIL %s: unknown scenario\n", t);
            failed++;
        }
    }
    free(list);
    bf_net_client_free(C);
    for (int i = 0; i < 5; i++)
        bf_net_loop_run_once(L, 10 * BF_NS_PER_MS);
    bf_net_loop_free(L);
    return failed ? 1 : 0;
}
