/*
 * sim_server.h — the simulated provider core (bigfleet/simprovider.h) served
 * over gRPC on a bf_net loop: the six unary CapacityProvider methods handed
 * to bf_sim_handle(), replies held for the core's reply latency, one timer
 * driving bf_sim_advance() at bf_sim_next_deadline(). Used by
 * bigfleet-simprovider (tools/simprovider/main.c) and by in-process tests and
 * benchmarks that want a real provider on their own loop.
 *
 * Ownership: the server borrows the struct bf_sim (the caller opens and
 * closes it) and owns its bf_net server, timer and held replies. Everything
 * runs on the loop thread. The sim clock is bf_mono_ns().
 */
#ifndef BF_SIMPROVIDER_SIM_SERVER_H
#define BF_SIMPROVIDER_SIM_SERVER_H

#include <stdint.h>

#include "bigfleet/net.h"
#include "bigfleet/simprovider.h"

struct bf_simsrv;

/* new streams a second one connection may open (bf_net_server_opts.
 * max_new_streams_per_second; the net default of 200 is for peers on the
 * operator side, not for the shard this provider serves) */
#define BF_SIMSRV_STREAM_RATE 100000

struct bf_simsrv_opts {
    const char *addr;             /* "host:port" (port 0 = ephemeral) */
    struct bf_net_tls_config tls; /* all three, or none (h2c) */
};

struct bf_simsrv_stats {
    uint64_t held;      /* replies delayed by reply latency */
    uint64_t held_open; /* gauge: replies waiting now */
    uint64_t advances;  /* bf_sim_advance calls from the timer */
    uint64_t advance_errors;
    uint64_t list_reuses; /* List replies that started in a body given back before
                             (sim_server.c: recycled reply bodies) */
};

/* Starts serving. 0 and *out, or the -errno of bf_net_server_new. */
int bf_simsrv_new(struct bf_net_loop *loop, struct bf_sim *sim, const struct bf_simsrv_opts *o,
                  struct bf_simsrv **out);
uint16_t bf_simsrv_port(const struct bf_simsrv *s);
struct bf_net_server *bf_simsrv_net(struct bf_simsrv *s);
void bf_simsrv_stats(const struct bf_simsrv *s, struct bf_simsrv_stats *out);
/* Re-arms the advance timer (call after changing the sim from outside an
 * RPC, e.g. bf_sim_fail_machine). */
void bf_simsrv_rearm(struct bf_simsrv *s);
/* Graceful: GOAWAY, then the rest after grace_ns; done(arg) once closed. */
void bf_simsrv_shutdown(struct bf_simsrv *s, int64_t grace_ns, void (*done)(void *arg), void *arg);
/* Closes everything (unfinished calls are cancelled). NULL ok. */
void bf_simsrv_free(struct bf_simsrv *s);

#endif
