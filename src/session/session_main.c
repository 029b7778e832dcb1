/*
 * session_main.c — entry point of the session process
 * (bigfleet-shardd --role=session): the operator protocol (Shard/Session
 * on --listen), the HTTP probes (--metrics-addr) and the coordinator
 * client (--coordinator-addr), on one io_uring event loop, plus the rollup
 * ingest thread.
 *
 * Start-up: attach (bf_child_start), raise RLIMIT_NOFILE to its hard limit
 * (one fd per operator connection), load the cluster rows (demand, the
 * first-rollup gate and rail-2 state survive a session restart: they live
 * in shared memory), start the ingest thread (which rebuilds the row
 * allocator from the published rows), then the loop: the role's wake
 * eventfd (rings from the executor, reconciler and cycle; SIGTERM), the
 * ingest completion eventfd, a 1 s tick (heartbeat, sweeps, a ring drain
 * that bounds any lost wake-up), the gRPC and HTTP servers.
 *
 * Listeners: the supervisor binds --listen and --metrics-addr before it
 * forks and this process accepts on the inherited sockets (their numbers in
 * st->host), so a restarted session never races its predecessor for the
 * port and connections that arrive meanwhile wait in the backlog. The gRPC
 * server answers Shard/Session, ShardRead/InspectNeeds, grpc.health.v1
 * (health.c) and server reflection v1/v1alpha (reflection.c).
 * st->host.session_listening tells the supervisor (READY=1) once both accept.
 *
 * SIGHUP (live configuration, bigfleet/shm.h): the 1 s tick applies the log
 * level and re-reads the TLS files of the gRPC server.
 *
 * Exit: SIGTERM -> every stream finished (UNAVAILABLE), server shutdown with
 * a short grace, loop stop, ingest thread joined, rows marked disconnected.
 * A --listen/--metrics-addr that cannot be used is a configuration error:
 * exit 3 (do not respawn); so is an io_uring that refuses to start.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bigfleet/log.h"
#include "bigfleet/util.h"
#include "session_internal.h"

#define BIND_RETRY_NS (5LL * BF_NS_PER_SEC)

static void raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rlim_t want = rl.rlim_max;
        rl.rlim_cur = want;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            BF_WARN("cannot raise RLIMIT_NOFILE", "want=%llu", (unsigned long long)want);
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 16384)
        BF_WARN("RLIMIT_NOFILE is low: it bounds concurrent operator sessions",
                "nofile=%llu hint=\"ulimit -n 65536 before starting bigfleet-shardd\"",
                (unsigned long long)rl.rlim_cur);
}

static void stop_now(struct ss *ss)
{
    bf_net_loop_stop(ss->loop);
}

static void shutdown_done(void *arg)
{
    stop_now(arg);
}

static void stop_timer_cb(struct bf_net_timer *t, void *arg)
{
    (void)t;
    stop_now(arg);
}

static void begin_stop(struct ss *ss)
{
    if (ss->stopping)
        return;
    ss->stopping = true;
    BF_SHARED_STORE(ss->shm->st->host.session_listening, 0);
    BF_INFO("stopping", "id=%s", ss->cfg->id);
    bf_session_health_stop(ss);
    bf_coord_stop(ss);
    bf_session_close_all(ss);
    bf_net_timer_start(ss->stop_timer, 2 * BF_NS_PER_SEC, 0);
    if (ss->srv)
        bf_net_server_shutdown(ss->srv, 500 * BF_NS_PER_MS, shutdown_done, ss);
    else
        stop_now(ss);
}

static void on_wake(struct bf_net_watch *w, uint64_t count, void *arg)
{
    (void)w;
    (void)count;
    struct ss *ss = arg;
    if (bf_child_stopping()) {
        begin_stop(ss);
        return;
    }
    bf_session_drain_rings(ss);
}

static void on_ingest(struct bf_net_watch *w, uint64_t count, void *arg)
{
    (void)w;
    (void)count;
    bf_session_on_ingest_done(arg);
}

/* A SIGHUP reload: the log level (bf_child_reloaded) and the TLS files. */
static void apply_live(struct ss *ss)
{
    struct bf_live_values v;
    bool first = ss->live_cfg.generation == 0;
    if (!bf_child_reloaded(&ss->ch, &v))
        return;
    ss->live_cfg = v;
    if (first || !ss->srv || !bf_config_tls(ss->cfg))
        return;
    struct bf_net_tls_config tls = {v.tls_cert, v.tls_key, v.tls_ca};
    int rc = bf_net_server_reload_tls(ss->srv, &tls);
    if (rc)
        BF_ERROR("TLS files not reloaded; the server keeps the previous ones",
                 "cert=\"%s\" key=\"%s\" ca=\"%s\" error=\"%s\"", v.tls_cert, v.tls_key, v.tls_ca,
                 strerror(-rc));
}

static void on_tick(struct bf_net_timer *t, void *arg)
{
    (void)t;
    struct ss *ss = arg;
    bf_child_heartbeat(&ss->ch);
    if (bf_child_stopping()) {
        begin_stop(ss);
        return;
    }
    bf_session_drain_rings(ss);
    bf_session_sweep(ss);
    apply_live(ss);
    bf_session_health_tick(ss);
}

static void on_resync(struct bf_net_timer *t, void *arg)
{
    (void)t;
    bf_session_resync_step(arg);
}

static int start_grpc(struct ss *ss)
{
    /* Shard/Session; ShardRead on the same server (ADR-0061); the standard
     * health and reflection services */
    const struct bf_net_method *all[] = {&bf_session_method,           &bf_inspect_needs_method,
                                         &bf_health_check_method,      &bf_health_watch_method,
                                         &bf_health_list_method,       &bf_reflection_v1_method,
                                         &bf_reflection_v1alpha_method};
#define N_METHODS (sizeof all / sizeof all[0])
    static struct bf_net_method methods[N_METHODS];
    for (size_t i = 0; i < N_METHODS; i++) {
        methods[i] = *all[i];
        methods[i].arg = ss;
        /* every request but a rollup is small (docs/security.md) */
        if (i > 0 && !methods[i].max_recv_message)
            methods[i].max_recv_message = SS_SMALL_MESSAGE_MAX;
    }
    methods[0].max_recv_message = bf_config_max_rollup_bytes(ss->cfg);
    /* the live TLS files: a restarted session uses what the last SIGHUP set */
    bf_child_reloaded(&ss->ch, &ss->live_cfg);
    struct bf_net_server_opts o = {
        .addr = ss->cfg->listen,
        .methods = methods,
        .n_methods = N_METHODS,
        .max_connections = 65536,
        .max_concurrent_streams = SS_MAX_STREAMS_PER_CONN,
        .max_inbound_buffered = (size_t)ss->cfg->grpc_inbound_budget_mib << 20,
        .max_conns_per_peer = ss->cfg->max_conns_per_peer,
        .max_conns_per_identity = ss->cfg->max_conns_per_identity,
        .first_message_timeout_ns = ss->cfg->session_hello_timeout_ns,
        .handshake_timeout_ns = ss->cfg->grpc_handshake_timeout_ns,
        .msg_stall_timeout_ns = ss->cfg->grpc_stall_timeout_ns,
        .stream_idle_timeout_ns = SS_STREAM_IDLE_NS,
        .conn_idle_timeout_ns = SS_CONN_IDLE_NS,
        .listen_fd = BF_SHARED_LOAD(ss->shm->st->host.grpc_listen_fd),
    };
    if (bf_config_tls(ss->cfg)) {
        bool live = ss->live_cfg.generation != 0;
        o.tls.cert_file = live ? ss->live_cfg.tls_cert : ss->cfg->tls_cert;
        o.tls.key_file = live ? ss->live_cfg.tls_key : ss->cfg->tls_key;
        o.tls.ca_file = live ? ss->live_cfg.tls_ca : ss->cfg->tls_ca;
    } else {
        BF_WARN("gRPC is PLAINTEXT: no TLS, no client identities; any peer that reaches --listen "
                "can claim any cluster_id and read every cluster's Needs (use --tls-cert, "
                "--tls-key and --tls-ca)",
                "listen=%s insecure_plaintext=%s", ss->cfg->listen,
                ss->cfg->insecure_plaintext ? "true" : "false");
    }
    int rc;
    /* Without an inherited socket (tests that run the session alone): after a
     * crash the previous instance's io_uring teardown can hold the port for a
     * moment: retry EADDRINUSE for a bounded time. */
    int64_t until = bf_mono_ns() + BIND_RETRY_NS;
    while ((rc = bf_net_server_new(ss->loop, &o, &ss->srv)) == -EADDRINUSE &&
           bf_mono_ns() < until && !bf_child_stopping())
        usleep(50 * 1000);
    if (rc)
        BF_ERROR("cannot serve Shard/Session", "listen=%s error=\"%s\"", ss->cfg->listen,
                 strerror(-rc));
    return rc;
}

int bf_session_main(const struct bf_config *cfg)
{
    static struct ss S;
    struct ss *ss = &S;
    memset(ss, 0, sizeof *ss);
    ss->ingest_efd = -1;
    if (bf_child_start(&ss->ch, cfg, BF_ROLE_SESSION) != 0)
        return BF_EXIT_ERROR;
    ss->shm = &ss->ch.shm;
    ss->cfg = cfg;
    int code = BF_EXIT_ERROR;
    raise_nofile();
    if (bf_ctab_init(&ss->ct, ss->shm) != 0)
        goto out;
    ss->live = calloc(ss->shm->max_clusters, sizeof *ss->live);
    ss->cache = bf_blob_cache_new();
    if (!ss->live || !ss->cache || u64map_reserve(&ss->cref_idx, ss->ct.n * 2 + 64) ||
        u64map_reserve(&ss->boots, 256) || u64map_reserve(&ss->reclaims, 256))
        goto out;
    for (uint32_t i = 0; i < ss->ct.n; i++)
        if (ss->ct.rec[i].in_use && ss->ct.rec[i].name_ref)
            u64map_put(&ss->cref_idx, ss->ct.rec[i].name_ref, i);
    int rc = bf_net_loop_new(NULL, &ss->loop);
    if (rc) {
        BF_ERROR("cannot create the event loop", "error=\"%s\"", strerror(-rc));
        if (rc == -EPERM || rc == -ENOSYS || rc == -EACCES)
            code = BF_EXIT_NO_RESPAWN; /* io_uring refused: restarting cannot help */
        goto out;
    }
    ss->ingest_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (ss->ingest_efd < 0 ||
        bf_ingest_start(&ss->ig, ss->shm, cfg, &ss->ct, ss->ingest_efd) != 0) {
        BF_ERROR("cannot start the rollup ingest thread", "%s", "");
        goto out;
    }
    ss->tick = bf_net_timer_new(ss->loop, on_tick, ss);
    ss->resync_timer = bf_net_timer_new(ss->loop, on_resync, ss);
    ss->stop_timer = bf_net_timer_new(ss->loop, stop_timer_cb, ss);
    if (!ss->tick || !ss->resync_timer || !ss->stop_timer)
        goto out;
    if (bf_net_watch_eventfd(ss->loop, ss->ingest_efd, on_ingest, ss, &ss->ingest_watch) != 0)
        goto out;
    if (ss->ch.wake_fd >= 0 &&
        bf_net_watch_eventfd(ss->loop, ss->ch.wake_fd, on_wake, ss, &ss->wake_watch) != 0)
        goto out;
    bf_net_timer_start(ss->tick, BF_NS_PER_SEC, BF_NS_PER_SEC);
    if (start_grpc(ss) != 0 || bf_session_http_start(ss) != 0) {
        code = BF_EXIT_NO_RESPAWN;
        goto out;
    }
    BF_SHARED_STORE(ss->shm->st->host.session_listening, 1);
    bf_coord_start(ss);
    bf_session_drain_rings(ss);
    BF_INFO("started", "id=%s listen=%s grpc_port=%u metrics_addr=%s clusters=%u epoch=%lld",
            cfg->id, cfg->listen, bf_net_server_port(ss->srv), cfg->metrics_addr, ss->ct.n,
            (long long)ss->shm->inv_hdr->epoch);
    if (!bf_child_stopping())
        bf_net_loop_run(ss->loop);
    code = BF_EXIT_OK;
out:
    bf_coord_stop(ss);
    if (ss->srv)
        bf_net_server_free(ss->srv); /* remaining calls end: rows marked disconnected */
    if (ss->http)
        bf_net_http_server_free(ss->http);
    bf_ingest_stop(ss->ig);
    bf_net_watch_free(ss->wake_watch);
    bf_net_watch_free(ss->ingest_watch);
    bf_net_timer_free(ss->tick);
    bf_net_timer_free(ss->resync_timer);
    bf_net_timer_free(ss->stop_timer);
    if (ss->loop)
        bf_net_loop_free(ss->loop);
    if (ss->ingest_efd >= 0)
        close(ss->ingest_efd);
    for (uint32_t i = 0; ss->boots.slots && i <= ss->boots.mask; i++)
        if (ss->boots.slots[i].h)
            free((void *)(uintptr_t)ss->boots.slots[i].val);
    u64map_free(&ss->boots);
    u64map_free(&ss->reclaims);
    u64map_free(&ss->cref_idx);
    bf_blob_cache_free(ss->cache);
    free(ss->live);
    bf_ctab_destroy(&ss->ct);
    bf_child_finish(&ss->ch);
    return code;
}
