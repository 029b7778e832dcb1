/*
 * bigfleet/process.h — what every appliance process shares: role names, exit
 * codes, and the child start-up/heartbeat/shutdown protocol with the
 * supervisor (ARCHITECTURE.md §2–§3, reference/aesthetics.md §4.3).
 *
 * A child is bigfleet-shardd re-executed with the supervisor's arguments
 * plus --role=<role>. bf_child_start() names the process (prctl PR_SET_NAME
 * "bf-<role>"), arranges to die with the supervisor (PR_SET_PDEATHSIG),
 * attaches the shared segments, and marks its process slot ACTIVE (the
 * dead-man switch); bf_child_finish() marks it ASSIGNED again on an orderly
 * exit. SIGTERM/SIGINT set a flag the child's loop polls (bf_child_stopping)
 * and write to its wake eventfd so a blocked loop notices at once.
 */
#ifndef BIGFLEET_PROCESS_H
#define BIGFLEET_PROCESS_H

#include <signal.h>
#include <stdbool.h>

#include "bigfleet/config.h"
#include "bigfleet/shm.h"

/* Exit codes (aesthetics.md §4.3 item 4). */
#define BF_EXIT_OK         0 /* orderly */
#define BF_EXIT_ERROR      1 /* orderly error; shared memory untouched */
#define BF_EXIT_CRASH      2 /* quick death */
#define BF_EXIT_NO_RESPAWN 3 /* fatal configuration problem: do not restart me */
/* Exit codes of the supervisor (the service's status; deploy/bigfleet-shardd.service
 * lists them in RestartPreventExitStatus=). 2 is a usage error (flags, environment,
 * configuration file). */
#define BF_EXIT_UNAVAILABLE 69 /* EX_UNAVAILABLE: io_uring refused (docs/operating.md) */
#define BF_EXIT_CONFIG      78 /* EX_CONFIG: fatal configuration found at start or a child's exit 3 */

/* "supervisor", "session", "reconciler", "cycle", "executor", "simprovider". */
const char *bf_role_name(int role);
int bf_role_from_name(const char *name);

struct bf_child {
    struct bf_shm shm;
    const struct bf_config *cfg;
    int role;
    int wake_fd;        /* this role's eventfd (readable when woken), -1 if none */
    uint64_t live_seen; /* live configuration generation last applied (bf_child_reloaded) */
};

/*
 * Child start-up: logging (role), process name, parent-death signal, signal
 * handlers, attach (read-write), slot ACTIVE. Returns 0, or -errno with a
 * logged message (the caller exits BF_EXIT_ERROR).
 */
int bf_child_start(struct bf_child *ch, const struct bf_config *cfg, int role);
/* Records a heartbeat (wall clock) in the process slot. */
void bf_child_heartbeat(struct bf_child *ch);
/* True once SIGTERM/SIGINT arrived. Async-signal-safe flag read. */
bool bf_child_stopping(void);
/* Orderly exit: slot back to ASSIGNED, detach. */
void bf_child_finish(struct bf_child *ch);
/*
 * Call on every periodic tick: when the supervisor published a new live
 * configuration (SIGHUP) since the last call, applies the log level, copies
 * the live settings into *v and returns true (the role then does its part:
 * audit log reopen, TLS files, rails). False otherwise (v untouched). The
 * first call after bf_child_start() returns true.
 */
bool bf_child_reloaded(struct bf_child *ch, struct bf_live_values *v);

/*
 * Installs the seccomp allow-list of role (BF_ROLE_SESSION, _RECONCILER,
 * _CYCLE, _EXECUTOR; src/supervisor/seccomp.c lists what each may call): any
 * other system call kills the process. Needs no_new_privs (the supervisor
 * sets it before exec) or CAP_SYS_ADMIN. Irreversible; threads created
 * afterwards inherit it. 0, or -errno with a message in err (-EINVAL for a
 * role without a list).
 */
int bf_seccomp_install(int role, char *err, size_t errlen);

/* Entry points of the roles (each returns the process exit code). */
int bf_supervisor_main(const struct bf_config *cfg, int argc, char **argv);
int bf_session_main(const struct bf_config *cfg);
int bf_reconciler_main(const struct bf_config *cfg);
int bf_cycle_main(const struct bf_config *cfg);
int bf_executor_main(const struct bf_config *cfg);

#endif /* BIGFLEET_PROCESS_H */
