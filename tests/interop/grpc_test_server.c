/*
 * grpc_test_server.c — a gRPC server on the real bigfleet paths, with test
 * behaviour, for the interop tests (tests/interop/grpc_*.test.js):
 *
 *   CapacityProvider/Get        unary: echo Machine{id}; "missing" -> NOT_FOUND;
 *                               "unicode" -> INVALID_ARGUMENT with a non-ASCII
 *                               message; "slow:<ms>" -> reply after <ms> (timer);
 *                               "whoami" -> Machine{id: the peer identity};
 *                               "big:<n>" -> instance_type of n bytes
 *   CapacityProvider/Configure  unary: TransitionAck{operation_id: blob length}
 *   CapacityProvider/List       unary: MachineList of max_results machines
 *   CapacityProvider/Drain      unary that never answers (deadline/cancel tests)
 *   ShardRead/InspectNeeds      server streaming: header + limit NeedViews;
 *                               limit < 0: one NeedView every 20 ms until
 *                               cancelled; mTLS: readonly/admin only
 *   Shard/Session               bidi: first frame Hello (else INVALID_ARGUMENT),
 *                               mTLS: identity must be bigfleet://cluster/<id>
 *                               (else PERMISSION_DENIED); one Ack per frame;
 *                               a rollup for cluster "cancel-me" makes the
 *                               server reset the stream; half-close -> OK
 *
 * HTTP/1.1 on --http-addr: /healthz, /stats (JSON: how calls ended per
 * method, and the server's bad-input counters), /metrics.
 * Prints "READY grpc=<port> http=<port>" once listening. SIGTERM/SIGINT:
 * graceful shutdown (GOAWAY), then everything is freed (ASan leak check)
 * and the exit status is 0.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/log.h"
#include "bigfleet/net.h"
#include "bigfleet/util.h"
#include "bigfleet/v1alpha1/provider.pb-c.h"
#include "bigfleet/v1alpha1/shard.pb-c.h"
#include "bigfleet/v1alpha1/shardread.pb-c.h"

enum { M_GET, M_CONFIGURE, M_LIST, M_DRAIN, M_INSPECT, M_SESSION, M_COUNT };
static const char *method_names[M_COUNT] = {"Get",   "Configure",    "List",
                                            "Drain", "InspectNeeds", "Session"};
static uint64_t done_by[M_COUNT][BF_NET_CODE_COUNT];
static uint64_t started[M_COUNT];

static struct bf_net_loop *g_loop;
static struct bf_net_server *g_srv;
static volatile sig_atomic_t g_signalled;

/* per-call state for calls that outlive their first callback */
struct pending {
    struct bf_net_call *call;
    struct bf_net_timer *timer;
    int kind;
    int sent;
    char id[64];
    bool hello_ok;
};

static void pending_free(struct pending *p)
{
    if (!p)
        return;
    bf_net_timer_free(p->timer);
    free(p);
}

static void count_call(struct bf_net_call *call, void *arg)
{
    started[(intptr_t)arg]++;
    (void)call;
}

static void count_done(struct bf_net_call *call, int code, void *arg)
{
    done_by[(intptr_t)arg][code]++;
    pending_free(bf_net_call_user(call));
    bf_net_call_set_user(call, NULL);
}

/* ------------------------------------------------------------ Get */

static void reply_machine(struct bf_net_call *call, const char *id, const char *itype)
{
    Bigfleet__V1alpha1__Machine m = BIGFLEET__V1ALPHA1__MACHINE__INIT;
    m.id = (char *)id;
    m.state = BIGFLEET__V1ALPHA1__MACHINE_STATE__MACHINE_STATE_IDLE;
    m.instance_type = (char *)(itype ? itype : "echo");
    int r = bf_net_call_reply_pb(call, &m.base);
    if (r < 0)
        bf_net_call_finish(call, BF_NET_INTERNAL, strerror(-r));
}

static void slow_cb(struct bf_net_timer *t, void *arg)
{
    (void)t;
    struct pending *p = arg;
    reply_machine(p->call, p->id, "slow");
}

static void get_msg(struct bf_net_call *call, const uint8_t *msg, size_t len, void *arg)
{
    (void)arg;
    Bigfleet__V1alpha1__MachineRef *ref = bigfleet__v1alpha1__machine_ref__unpack(NULL, len, msg);
    if (!ref) {
        bf_net_call_finish(call, BF_NET_INVALID_ARGUMENT, "cannot decode MachineRef");
        return;
    }
    const char *id = ref->id;
    if (strcmp(id, "missing") == 0) {
        bf_net_call_finish(call, BF_NET_NOT_FOUND, "machine missing not found");
    } else if (strcmp(id, "unicode") == 0) {
        bf_net_call_finish(call, BF_NET_INVALID_ARGUMENT, "bad \xe2\x9c\x93 100%\nline2");
    } else if (strcmp(id, "whoami") == 0) {
        const char *who = bf_net_call_identity(call);
        reply_machine(call, who ? who : "", "whoami");
    } else if (strncmp(id, "slow:", 5) == 0) {
        struct pending *p = calloc(1, sizeof *p);
        p->call = call;
        snprintf(p->id, sizeof p->id, "%s", id);
        p->timer = bf_net_timer_new(g_loop, slow_cb, p);
        bf_net_timer_start(p->timer, atoll(id + 5) * BF_NS_PER_MS, 0);
        bf_net_call_set_user(call, p);
    } else if (strncmp(id, "big:", 4) == 0) {
        size_t n = (size_t)atoll(id + 4);
        char *s = malloc(n + 1);
        memset(s, 'x', n);
        s[n] = 0;
        reply_machine(call, id, s);
        free(s);
    } else {
        reply_machine(call, id, NULL);
    }
    bigfleet__v1alpha1__machine_ref__free_unpacked(ref, NULL);
}

/* ------------------------------------------------------------ Configure / List / Drain */

static void configure_msg(struct bf_net_call *call, const uint8_t *msg, size_t len, void *arg)
{
    (void)arg;
    Bigfleet__V1alpha1__ConfigureRequest *rq =
        bigfleet__v1alpha1__configure_request__unpack(NULL, len, msg);
    if (!rq) {
        bf_net_call_finish(call, BF_NET_INVALID_ARGUMENT, "cannot decode ConfigureRequest");
        return;
    }
    char op[32];
    snprintf(op, sizeof op, "%zu", rq->bootstrap_blob.len);
    Bigfleet__V1alpha1__Machine m = BIGFLEET__V1ALPHA1__MACHINE__INIT;
    m.id = rq->machine_id;
    Bigfleet__V1alpha1__TransitionAck ack = BIGFLEET__V1ALPHA1__TRANSITION_ACK__INIT;
    ack.operation_id = op;
    ack.machine = &m;
    bf_net_call_reply_pb(call, &ack.base);
    bigfleet__v1alpha1__configure_request__free_unpacked(rq, NULL);
}

static void list_msg(struct bf_net_call *call, const uint8_t *msg, size_t len, void *arg)
{
    (void)arg;
    Bigfleet__V1alpha1__ListFilter *f = bigfleet__v1alpha1__list_filter__unpack(NULL, len, msg);
    if (!f) {
        bf_net_call_finish(call, BF_NET_INVALID_ARGUMENT, "cannot decode ListFilter");
        return;
    }
    size_t n = f->max_results > 0 ? (size_t)f->max_results : 0;
    Bigfleet__V1alpha1__Machine *ms = calloc(n ? n : 1, sizeof *ms);
    Bigfleet__V1alpha1__Machine **mp = calloc(n ? n : 1, sizeof *mp);
    char(*ids)[16] = calloc(n ? n : 1, sizeof *ids);
    for (size_t i = 0; i < n; i++) {
        bigfleet__v1alpha1__machine__init(&ms[i]);
        snprintf(ids[i], sizeof ids[i], "m%zu", i);
        ms[i].id = ids[i];
        ms[i].state = BIGFLEET__V1ALPHA1__MACHINE_STATE__MACHINE_STATE_IDLE;
        ms[i].instance_type = "gpu.8x";
        ms[i].zone = "zone-a";
        ms[i].price_per_hour = 1.5;
        mp[i] = &ms[i];
    }
    Bigfleet__V1alpha1__MachineList ml = BIGFLEET__V1ALPHA1__MACHINE_LIST__INIT;
    ml.n_machines = n;
    ml.machines = mp;
    int r = bf_net_call_reply_pb(call, &ml.base);
    if (r < 0)
        bf_net_call_finish(call, BF_NET_RESOURCE_EXHAUSTED, strerror(-r));
    free(ms);
    free(mp);
    free(ids);
    bigfleet__v1alpha1__list_filter__free_unpacked(f, NULL);
}

static void drain_msg(struct bf_net_call *call, const uint8_t *msg, size_t len, void *arg)
{
    (void)call, (void)msg, (void)len, (void)arg; /* never answers */
}

/* ------------------------------------------------------------ InspectNeeds */

static int send_need(struct bf_net_call *call, const char *cluster, int i)
{
    char fp[32];
    snprintf(fp, sizeof fp, "fp-%d", i);
    Bigfleet__V1alpha1__NeedView nv = BIGFLEET__V1ALPHA1__NEED_VIEW__INIT;
    nv.cluster_id = (char *)cluster;
    nv.profile_fingerprint = fp;
    nv.age_cycles_unmet = i;
    Bigfleet__V1alpha1__InspectNeedsResponse r = BIGFLEET__V1ALPHA1__INSPECT_NEEDS_RESPONSE__INIT;
    r.frame_case = BIGFLEET__V1ALPHA1__INSPECT_NEEDS_RESPONSE__FRAME_NEED;
    r.need = &nv;
    return bf_net_call_send_pb(call, &r.base);
}

static void tick_cb(struct bf_net_timer *t, void *arg)
{
    (void)t;
    struct pending *p = arg;
    send_need(p->call, p->id, p->sent++);
}

static bool readonly_ok(struct bf_net_call *call)
{
    const char *who = bf_net_call_identity(call);
    return !who || strcmp(who, "bigfleet://readonly") == 0 || strcmp(who, "bigfleet://admin") == 0;
}

static void inspect_msg(struct bf_net_call *call, const uint8_t *msg, size_t len, void *arg)
{
    (void)arg;
    if (!readonly_ok(call)) {
        bf_net_call_finish(call, BF_NET_PERMISSION_DENIED,
                           "InspectNeeds requires bigfleet://readonly or bigfleet://admin");
        return;
    }
    Bigfleet__V1alpha1__InspectNeedsRequest *rq =
        bigfleet__v1alpha1__inspect_needs_request__unpack(NULL, len, msg);
    if (!rq) {
        bf_net_call_finish(call, BF_NET_INVALID_ARGUMENT, "cannot decode InspectNeedsRequest");
        return;
    }
    Bigfleet__V1alpha1__InspectNeedsHeader h = BIGFLEET__V1ALPHA1__INSPECT_NEEDS_HEADER__INIT;
    h.cycle = 7;
    h.total_needs = rq->limit;
    Bigfleet__V1alpha1__InspectNeedsResponse r = BIGFLEET__V1ALPHA1__INSPECT_NEEDS_RESPONSE__INIT;
    r.frame_case = BIGFLEET__V1ALPHA1__INSPECT_NEEDS_RESPONSE__FRAME_HEADER;
    r.header = &h;
    bf_net_call_send_pb(call, &r.base);
    if (rq->limit >= 0) {
        for (int i = 0; i < rq->limit; i++)
            send_need(call, rq->cluster_id, i);
        bf_net_call_finish(call, BF_NET_OK, NULL);
    } else {
        struct pending *p = calloc(1, sizeof *p);
        p->call = call;
        snprintf(p->id, sizeof p->id, "%s", rq->cluster_id);
        p->timer = bf_net_timer_new(g_loop, tick_cb, p);
        bf_net_timer_start(p->timer, 20 * BF_NS_PER_MS, 20 * BF_NS_PER_MS);
        bf_net_call_set_user(call, p);
    }
    bigfleet__v1alpha1__inspect_needs_request__free_unpacked(rq, NULL);
}

/* ------------------------------------------------------------ Session */

static void send_ack(struct bf_net_call *call, const char *echo)
{
    Bigfleet__V1alpha1__Acknowledgement a = BIGFLEET__V1ALPHA1__ACKNOWLEDGEMENT__INIT;
    a.echo = (char *)echo;
    a.shard_epoch = 3;
    Bigfleet__V1alpha1__ShardMessage sm = BIGFLEET__V1ALPHA1__SHARD_MESSAGE__INIT;
    sm.payload_case = BIGFLEET__V1ALPHA1__SHARD_MESSAGE__PAYLOAD_ACK;
    sm.ack = &a;
    bf_net_call_send_pb(call, &sm.base);
}

static void session_call(struct bf_net_call *call, void *arg)
{
    count_call(call, arg);
    struct pending *p = calloc(1, sizeof *p);
    p->call = call;
    bf_net_call_set_user(call, p);
}

static void session_msg(struct bf_net_call *call, const uint8_t *msg, size_t len, void *arg)
{
    (void)arg;
    struct pending *p = bf_net_call_user(call);
    Bigfleet__V1alpha1__OperatorMessage *om =
        bigfleet__v1alpha1__operator_message__unpack(NULL, len, msg);
    if (!om) {
        bf_net_call_finish(call, BF_NET_INVALID_ARGUMENT, "cannot decode OperatorMessage");
        return;
    }
    if (!p->hello_ok) {
        if (om->payload_case != BIGFLEET__V1ALPHA1__OPERATOR_MESSAGE__PAYLOAD_HELLO ||
            !om->hello->cluster_id[0]) {
            bf_net_call_finish(call, BF_NET_INVALID_ARGUMENT,
                               "session: first frame must be Hello with cluster_id");
            goto out;
        }
        const char *who = bf_net_call_identity(call);
        char want[256];
        snprintf(want, sizeof want, "bigfleet://cluster/%s", om->hello->cluster_id);
        if (who && strcmp(who, want) != 0) {
            char m[512];
            snprintf(m, sizeof m, "client certificate identity %s does not authorize cluster_id %s",
                     who, om->hello->cluster_id);
            bf_net_call_finish(call, BF_NET_PERMISSION_DENIED, m);
            goto out;
        }
        p->hello_ok = true;
        send_ack(call, "hello");
        goto out;
    }
    switch (om->payload_case) {
    case BIGFLEET__V1ALPHA1__OPERATOR_MESSAGE__PAYLOAD_HELLO:
        send_ack(call, "hello");
        break;
    case BIGFLEET__V1ALPHA1__OPERATOR_MESSAGE__PAYLOAD_ROLLUP:
        if (strcmp(om->rollup->cluster_id, "cancel-me") == 0)
            bf_net_call_cancel(call); /* server-side cancellation: RST_STREAM(CANCEL) */
        else
            send_ack(call, "rollup");
        break;
    case BIGFLEET__V1ALPHA1__OPERATOR_MESSAGE__PAYLOAD_RECLAIM_ACK:
        send_ack(call, om->reclaim_ack->instruction_id);
        break;
    case BIGFLEET__V1ALPHA1__OPERATOR_MESSAGE__PAYLOAD_BOOTSTRAP_RESPONSE:
        send_ack(call, om->bootstrap_response->request_id);
        break;
    default:
        send_ack(call, "unknown");
        break;
    }
out:
    bigfleet__v1alpha1__operator_message__free_unpacked(om, NULL);
}

static void session_half_close(struct bf_net_call *call, void *arg)
{
    (void)arg;
    if (!bf_net_call_finished(call))
        bf_net_call_finish(call, BF_NET_OK, NULL);
}

/* ------------------------------------------------------------ HTTP */

static void http_handler(const struct bf_net_http_request *req, struct bf_net_http_response *resp,
                         void *arg)
{
    (void)arg;
    if (strcmp(req->path, "/healthz") == 0 || strcmp(req->path, "/readyz") == 0) {
        bf_net_http_printf(resp, "ok\n");
        return;
    }
    struct bf_net_stats st;
    bf_net_server_stats(g_srv, &st);
    if (strcmp(req->path, "/stats") == 0) {
        bf_net_http_set_status(resp, 200, "application/json");
        bf_net_http_printf(resp, "{\"done\":{");
        for (int m = 0; m < M_COUNT; m++) {
            bf_net_http_printf(resp, "%s\"%s\":{", m ? "," : "", method_names[m]);
            bool first = true;
            for (int c = 0; c < BF_NET_CODE_COUNT; c++)
                if (done_by[m][c]) {
                    bf_net_http_printf(resp, "%s\"%s\":%llu", first ? "" : ",", bf_net_code_name(c),
                                       (unsigned long long)done_by[m][c]);
                    first = false;
                }
            bf_net_http_printf(resp, "}");
        }
        bf_net_http_printf(resp, "},\"started\":{");
        for (int m = 0; m < M_COUNT; m++)
            bf_net_http_printf(resp, "%s\"%s\":%llu", m ? "," : "", method_names[m],
                               (unsigned long long)started[m]);
        bf_net_http_printf(
            resp,
            "},\"server\":{\"conns_accepted\":%llu,\"conns_open\":%llu,\"handshake_failures\":%llu,"
            "\"protocol_errors\":%llu,\"oversize_messages\":%llu,\"bad_messages\":%llu,"
            "\"identity_rejected\":%llu,\"streams_open\":%llu,\"conns_rejected\":%llu,"
            "\"keepalive_timeouts\":%llu,\"inbound_budget_refusals\":%llu,"
            "\"inbound_buffered_bytes\":%llu,\"inbound_conn_refusals\":%llu,"
            "\"stalled_messages\":%llu}}\n",
            (unsigned long long)st.conns_accepted, (unsigned long long)st.conns_open,
            (unsigned long long)st.handshake_failures, (unsigned long long)st.protocol_errors,
            (unsigned long long)st.oversize_messages, (unsigned long long)st.bad_messages,
            (unsigned long long)st.identity_rejected, (unsigned long long)st.streams_open,
            (unsigned long long)st.conns_rejected, (unsigned long long)st.keepalive_timeouts,
            (unsigned long long)st.inbound_budget_refusals,
            (unsigned long long)st.inbound_buffered_bytes,
            (unsigned long long)st.inbound_conn_refusals, (unsigned long long)st.stalled_messages);
        return;
    }
    if (strcmp(req->path, "/metrics") == 0) {
        bf_net_http_set_status(resp, 200, "text/plain; version=0.0.4");
        bf_net_http_printf(resp,
                           "# HELP bigfleet_test_grpc_conns_accepted_total Accepted connections.\n"
                           "# TYPE bigfleet_test_grpc_conns_accepted_total counter\n"
                           "bigfleet_test_grpc_conns_accepted_total %llu\n",
                           (unsigned long long)st.conns_accepted);
        return;
    }
    bf_net_http_set_status(resp, 404, NULL);
    bf_net_http_printf(resp, "not found\n");
}

/* ------------------------------------------------------------ main */

static void on_signal(int sig)
{
    (void)sig;
    g_signalled = 1;
    if (g_loop)
        bf_net_loop_stop_async(g_loop);
}

static bool g_shutdown_done;
static void shutdown_done(void *arg)
{
    (void)arg;
    g_shutdown_done = true;
}

int main(int argc, char **argv)
{
    const char *addr = "127.0.0.1:0", *http_addr = "127.0.0.1:0";
    struct bf_net_server_opts so = {0};
    static const struct option lo[] = {
        {"addr", required_argument, 0, 'a'},
        {"http-addr", required_argument, 0, 'h'},
        {"tls-cert", required_argument, 0, 'c'},
        {"tls-key", required_argument, 0, 'k'},
        {"tls-ca", required_argument, 0, 'r'},
        {"max-recv", required_argument, 0, 'm'},
        {"max-streams", required_argument, 0, 's'},
        {"max-inbound", required_argument, 0, 'B'},
        {"max-inbound-per-conn", required_argument, 0, 'C'},
        {"stall-timeout-ms", required_argument, 0, 'S'},
        {"keepalive-ms", required_argument, 0, 'p'},
        {"handshake-timeout-ms", required_argument, 0, 't'},
        {"keepalive-timeout-ms", required_argument, 0, 'T'},
        {0, 0, 0, 0},
    };
    int o;
    while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (o) {
        case 'a':
            addr = optarg;
            break;
        case 'h':
            http_addr = optarg;
            break;
        case 'c':
            so.tls.cert_file = optarg;
            break;
        case 'k':
            so.tls.key_file = optarg;
            break;
        case 'r':
            so.tls.ca_file = optarg;
            break;
        case 'm':
            so.max_recv_message = (uint32_t)atoll(optarg);
            break;
        case 's':
            so.max_concurrent_streams = (uint32_t)atoll(optarg);
            break;
        case 'B':
            so.max_inbound_buffered = (size_t)atoll(optarg);
            break;
        case 'C':
            so.max_inbound_per_conn = (size_t)atoll(optarg);
            break;
        case 'S':
            so.msg_stall_timeout_ns = atoll(optarg) * BF_NS_PER_MS;
            break;
        case 'p':
            so.keepalive_ns = atoll(optarg) * BF_NS_PER_MS;
            break;
        case 't':
            so.handshake_timeout_ns = atoll(optarg) * BF_NS_PER_MS;
            break;
        case 'T':
            so.keepalive_timeout_ns = atoll(optarg) * BF_NS_PER_MS;
            break;
        default:
            fprintf(stderr,
                    "usage: %s [--addr A] [--http-addr A] [--tls-cert F --tls-key F "
                    "[--tls-ca F]] [--max-recv N] [--max-streams N] [--max-inbound BYTES] "
                    "[--max-inbound-per-conn BYTES] [--stall-timeout-ms N]\n",
                    argv[0]);
            return 2;
        }
    }
    bf_log_init("grpc-test-server", BF_LOG_INFO);
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (bf_net_loop_new(NULL, &g_loop) < 0)
        return 1;
    static const struct bf_net_method methods[] = {
        {"/bigfleet.v1alpha1.CapacityProvider/Get", BF_NET_UNARY, count_call, get_msg, NULL, NULL,
         count_done, (void *)(intptr_t)M_GET},
        {"/bigfleet.v1alpha1.CapacityProvider/Configure", BF_NET_UNARY, count_call, configure_msg,
         NULL, NULL, count_done, (void *)(intptr_t)M_CONFIGURE},
        {"/bigfleet.v1alpha1.CapacityProvider/List", BF_NET_UNARY, count_call, list_msg, NULL, NULL,
         count_done, (void *)(intptr_t)M_LIST},
        {"/bigfleet.v1alpha1.CapacityProvider/Drain", BF_NET_UNARY, count_call, drain_msg, NULL,
         NULL, count_done, (void *)(intptr_t)M_DRAIN},
        {"/bigfleet.v1alpha1.ShardRead/InspectNeeds", BF_NET_SERVER_STREAMING, count_call,
         inspect_msg, NULL, NULL, count_done, (void *)(intptr_t)M_INSPECT},
        {"/bigfleet.v1alpha1.Shard/Session", BF_NET_BIDI_STREAMING, session_call, session_msg,
         session_half_close, NULL, count_done, (void *)(intptr_t)M_SESSION},
    };
    so.addr = addr;
    so.methods = methods;
    so.n_methods = sizeof methods / sizeof methods[0];
    if (bf_net_server_new(g_loop, &so, &g_srv) < 0) {
        bf_net_loop_free(g_loop);
        return 1;
    }
    struct bf_net_http_server *hs = NULL;
    struct bf_net_http_server_opts ho = {.addr = http_addr, .handler = http_handler};
    if (bf_net_http_server_new(g_loop, &ho, &hs) < 0) {
        bf_net_server_free(g_srv);
        bf_net_loop_free(g_loop);
        return 1;
    }
    printf("READY grpc=%u http=%u\n", bf_net_server_port(g_srv), bf_net_http_server_port(hs));
    fflush(stdout);

    int rc = bf_net_loop_run(g_loop);
    /* graceful: GOAWAY, let calls finish for up to 2 s */
    bf_net_server_shutdown(g_srv, 2 * BF_NS_PER_SEC, shutdown_done, NULL);
    int64_t until = bf_mono_ns() + 5 * BF_NS_PER_SEC;
    while (!g_shutdown_done && bf_mono_ns() < until)
        bf_net_loop_run_once(g_loop, 100 * BF_NS_PER_MS);
    bf_net_server_free(g_srv);
    bf_net_http_server_free(hs);
    /* let the kernel hand back the cancelled operations */
    for (int i = 0; i < 5; i++)
        bf_net_loop_run_once(g_loop, 10 * BF_NS_PER_MS);
    bf_net_loop_free(g_loop);
    BF_INFO("grpc-test-server exiting", "rc=%d", rc);
    return rc < 0 ? 1 : 0;
}
