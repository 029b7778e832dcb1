/*
 * health.c — grpc.health.v1.Health (grpc/doc/health-checking.md) on --listen,
 * for Kubernetes gRPC probes, load balancers and grpc-health-probe.
 *
 * Statuses (checked against the shared state at every call and every 1 s
 * tick; NOT_SERVING for all once the session is stopping):
 *   ""                             SERVING once the first provider reconcile
 *   "bigfleet.v1alpha1.Shard"      succeeded (st->first_reconcile_done, the
 *                                  same latch as /readyz), NOT_SERVING before
 *   "bigfleet.v1alpha1.ShardRead"  SERVING once a cycle published a result
 *                                  (InspectNeeds has something to serve)
 *   "grpc.health.v1.Health",       SERVING
 *   the reflection services
 *   anything else                  Check: NOT_FOUND; Watch: SERVICE_UNKNOWN
 * Watch sends the current status at once and then every change; List
 * returns every service above with its status. Bounds: at
 * most MAX_WATCHES watches at once (RESOURCE_EXHAUSTED beyond), a service
 * name of at most 256 bytes (INVALID_ARGUMENT), and a watcher whose unread
 * updates exceed 64 KiB is ended (it cannot read 4-byte messages).
 */
#include <stdlib.h>
#include <string.h>

#include "bigfleet/log.h"
#include "grpc/health/v1/health.pb-c.h"
#include "session_internal.h"

#define MAX_WATCHES      1024
#define MAX_SERVICE_NAME SS_HEALTH_SERVICE_MAX
#define MAX_UNREAD_BYTES (64u << 10)

enum { ST_UNKNOWN = 0, ST_SERVING = 1, ST_NOT_SERVING = 2, ST_SERVICE_UNKNOWN = 3 };

struct hwatch {
    struct bf_net_call *call;
    struct hwatch *prev, *next;
    int last; /* status last sent */
    char service[MAX_SERVICE_NAME + 1];
};

static struct {
    struct hwatch *head;
    uint32_t n;
} W;

/* The status of service, or ST_SERVICE_UNKNOWN. */
static int status_of(const struct ss *ss, const char *service)
{
    const struct bf_state_main *st = ss->shm->st;
    bool stopping = ss->stopping;
    if (!service[0] || strcmp(service, "bigfleet.v1alpha1.Shard") == 0) {
        if (stopping)
            return ST_NOT_SERVING;
        return BF_SHARED_LOAD(st->first_reconcile_done) ? ST_SERVING : ST_NOT_SERVING;
    }
    if (strcmp(service, "bigfleet.v1alpha1.ShardRead") == 0) {
        if (stopping)
            return ST_NOT_SERVING;
        return BF_SHARED_LOAD(st->publish_seq) > 0 ? ST_SERVING : ST_NOT_SERVING;
    }
    if (strcmp(service, "grpc.health.v1.Health") == 0 ||
        strcmp(service, "grpc.reflection.v1.ServerReflection") == 0 ||
        strcmp(service, "grpc.reflection.v1alpha.ServerReflection") == 0)
        return stopping ? ST_NOT_SERVING : ST_SERVING;
    return ST_SERVICE_UNKNOWN;
}

static int send_status(struct bf_net_call *call, int status)
{
    Grpc__Health__V1__HealthCheckResponse r = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    r.status = (Grpc__Health__V1__HealthCheckResponse__ServingStatus)status;
    return bf_net_call_send_pb(call, &r.base);
}

int bf_session_health_service(const uint8_t *msg, size_t len, char out[SS_HEALTH_SERVICE_MAX + 1])
{
    Grpc__Health__V1__HealthCheckRequest *req =
        grpc__health__v1__health_check_request__unpack(NULL, len, msg);
    if (!req)
        return -EBADMSG;
    bool ok = strlen(req->service) <= SS_HEALTH_SERVICE_MAX;
    if (ok)
        snprintf(out, SS_HEALTH_SERVICE_MAX + 1, "%s", req->service);
    grpc__health__v1__health_check_request__free_unpacked(req, NULL);
    return ok ? 0 : -ENAMETOOLONG;
}

/* Decodes the request's service name into out; false (call finished) if bad. */
static bool read_service(struct bf_net_call *call, const uint8_t *msg, size_t len, char *out)
{
    int rc = bf_session_health_service(msg, len, out);
    if (rc == -EBADMSG)
        bf_net_call_finish(call, BF_NET_INVALID_ARGUMENT, "HealthCheckRequest does not decode");
    else if (rc)
        bf_net_call_finish(call, BF_NET_INVALID_ARGUMENT, "service name over 256 bytes");
    return rc == 0;
}

static void check_on_message(struct bf_net_call *call, const uint8_t *msg, size_t len, void *arg)
{
    struct ss *ss = arg;
    char service[MAX_SERVICE_NAME + 1];
    BF_STAT_INC(ss->shm->st->host.health_checks);
    if (!read_service(call, msg, len, service))
        return;
    int st = status_of(ss, service);
    if (st == ST_SERVICE_UNKNOWN) {
        bf_net_call_finish(call, BF_NET_NOT_FOUND, "unknown service");
        return;
    }
    Grpc__Health__V1__HealthCheckResponse r = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    r.status = (Grpc__Health__V1__HealthCheckResponse__ServingStatus)st;
    bf_net_call_reply_pb(call, &r.base);
}

static const char *const known[] = {"",
                                    "bigfleet.v1alpha1.Shard",
                                    "bigfleet.v1alpha1.ShardRead",
                                    "grpc.health.v1.Health",
                                    "grpc.reflection.v1.ServerReflection",
                                    "grpc.reflection.v1alpha.ServerReflection"};
#define N_KNOWN (sizeof known / sizeof known[0])

static void list_on_message(struct bf_net_call *call, const uint8_t *msg, size_t len, void *arg)
{
    struct ss *ss = arg;
    BF_STAT_INC(ss->shm->st->host.health_checks);
    Grpc__Health__V1__HealthListRequest *req =
        grpc__health__v1__health_list_request__unpack(NULL, len, msg);
    if (!req) {
        bf_net_call_finish(call, BF_NET_INVALID_ARGUMENT, "HealthListRequest does not decode");
        return;
    }
    grpc__health__v1__health_list_request__free_unpacked(req, NULL);
    Grpc__Health__V1__HealthCheckResponse st[N_KNOWN];
    Grpc__Health__V1__HealthListResponse__StatusesEntry e[N_KNOWN], *ep[N_KNOWN];
    for (size_t i = 0; i < N_KNOWN; i++) {
        grpc__health__v1__health_check_response__init(&st[i]);
        st[i].status =
            (Grpc__Health__V1__HealthCheckResponse__ServingStatus)status_of(ss, known[i]);
        grpc__health__v1__health_list_response__statuses_entry__init(&e[i]);
        e[i].key = (char *)known[i];
        e[i].value = &st[i];
        ep[i] = &e[i];
    }
    Grpc__Health__V1__HealthListResponse r = GRPC__HEALTH__V1__HEALTH_LIST_RESPONSE__INIT;
    r.n_statuses = N_KNOWN;
    r.statuses = ep;
    bf_net_call_reply_pb(call, &r.base);
}

static void unlink_watch(struct hwatch *w)
{
    if (w->prev)
        w->prev->next = w->next;
    else
        W.head = w->next;
    if (w->next)
        w->next->prev = w->prev;
    W.n--;
}

static void watch_on_message(struct bf_net_call *call, const uint8_t *msg, size_t len, void *arg)
{
    struct ss *ss = arg;
    BF_STAT_INC(ss->shm->st->host.health_watches);
    if (W.n >= MAX_WATCHES) {
        bf_net_call_finish(call, BF_NET_RESOURCE_EXHAUSTED, "too many health watches");
        return;
    }
    struct hwatch *w = calloc(1, sizeof *w);
    if (!w) {
        bf_net_call_finish(call, BF_NET_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    if (!read_service(call, msg, len, w->service)) {
        free(w);
        return;
    }
    w->call = call;
    w->last = status_of(ss, w->service);
    if (send_status(call, w->last) != 0) {
        free(w);
        bf_net_call_finish(call, BF_NET_RESOURCE_EXHAUSTED, "cannot queue the status");
        return;
    }
    w->next = W.head;
    if (W.head)
        W.head->prev = w;
    W.head = w;
    W.n++;
    bf_net_call_set_user(call, w);
}

static void watch_on_done(struct bf_net_call *call, int code, void *arg)
{
    (void)code, (void)arg;
    struct hwatch *w = bf_net_call_user(call);
    if (!w)
        return;
    bf_net_call_set_user(call, NULL);
    unlink_watch(w);
    free(w);
}

void bf_session_health_tick(struct ss *ss)
{
    for (struct hwatch *w = W.head, *next; w; w = next) {
        next = w->next;
        if (bf_net_call_finished(w->call))
            continue;
        int st = status_of(ss, w->service);
        if (st == w->last)
            continue;
        if (bf_net_call_outbox_bytes(w->call) > MAX_UNREAD_BYTES) {
            bf_net_call_finish(w->call, BF_NET_RESOURCE_EXHAUSTED, "health updates not read");
            continue;
        }
        w->last = st;
        if (send_status(w->call, st) != 0)
            bf_net_call_finish(w->call, BF_NET_INTERNAL, "cannot queue the status");
    }
}

void bf_session_health_stop(struct ss *ss)
{
    bf_session_health_tick(ss); /* NOT_SERVING to every watcher while the streams still work */
    for (struct hwatch *w = W.head; w; w = w->next)
        if (!bf_net_call_finished(w->call))
            bf_net_call_finish(w->call, BF_NET_UNAVAILABLE, "shard stopping");
}

uint32_t bf_session_health_watches_open(void)
{
    return W.n;
}

const struct bf_net_method bf_health_check_method = {
    .path = "/grpc.health.v1.Health/Check",
    .kind = BF_NET_UNARY,
    .on_message = check_on_message,
};

const struct bf_net_method bf_health_list_method = {
    .path = "/grpc.health.v1.Health/List",
    .kind = BF_NET_UNARY,
    .on_message = list_on_message,
};

const struct bf_net_method bf_health_watch_method = {
    .path = "/grpc.health.v1.Health/Watch",
    .kind = BF_NET_SERVER_STREAMING,
    .on_message = watch_on_message,
    .on_done = watch_on_done,
};
