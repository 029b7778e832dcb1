/*
 * supervisor_internal.h — the supervisor's state, shared by supervisor.c
 * (children, restarts, the main loop) and reload.c (SIGHUP). One process,
 * one thread: no locking.
 */
#ifndef BF_SUPERVISOR_INTERNAL_H
#define BF_SUPERVISOR_INTERNAL_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "bigfleet/config.h"
#include "bigfleet/shm.h"
#include "supervisor.h"

#define NCHILD_ROLES        4
#define MAX_RESTART_HISTORY 64

struct child {
    int role;
    pid_t pid;
    int64_t started_ns;
    int64_t restart_at[MAX_RESTART_HISTORY];
    int n_restarts;
    bool no_respawn;
};

struct sup {
    const struct bf_config *cfg; /* as started (flags, environment, file) */
    struct bf_config run;        /* running: cfg plus applied reloads; what children get */
    int argc;
    char **argv;
    struct bf_priv priv;
    struct bf_shm shm;
    struct bf_shm_caps caps;
    int64_t epoch;
    uint32_t generation;
    int lock_fd;
    char lock_path[256];
    int grpc_fd; /* listening sockets, inherited by the session; -1 = none */
    int http_fd;
    int wake_fd[BF_ROLE_COUNT];
    struct child kids[BF_ROLE_COUNT];
    int64_t reinit_at[MAX_RESTART_HISTORY];
    int n_reinits;
    bool with_sim;
    char sim_path[PATH_MAX];
    char self_path[PATH_MAX];
    bool stopping;
    int exit_code;
    bool ready_sent;
    int64_t watchdog_ns; /* 0 = no systemd watchdog */
    int64_t last_watchdog_ns;
    int64_t last_usage_ns;
};

/* SIGHUP: re-read the configuration, apply what is live, refuse the rest
 * (reload.c). Logs every change; counts in st->host. */
void bf_sup_reload(struct sup *s);

#endif
