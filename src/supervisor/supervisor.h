/*
 * supervisor.h — private interfaces of the supervisor (src/supervisor/).
 */
#ifndef BF_SUPERVISOR_H
#define BF_SUPERVISOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bigfleet/config.h"
#include "bigfleet/shm.h"

/* Reads the epoch under data_dir (LMDB), adds 1, writes it back.
 * 0 or -errno (message in err). Creates data_dir (0700) if needed. */
int bf_epoch_bump(const char *data_dir, int64_t *epoch, char *err, size_t errlen);
/* sd_notify(3) equivalent: 1 sent, 0 no NOTIFY_SOCKET, -1 error. */
int bf_sd_notify(const char *state);
/* The systemd watchdog period (WATCHDOG_USEC for this pid), 0 when off. */
int64_t bf_sd_watchdog_ns(void);

/* ------------------------------------------------------------ privdrop.c */

#define BF_DEFAULT_USER "bigfleet"

/* The children's account, resolved at start (no NSS after fork). */
struct bf_priv {
    bool drop; /* the supervisor is root and the children run as uid != 0 */
    uid_t uid;
    gid_t gid;
    gid_t groups[64];
    int ngroups;
    char name[64];
    gid_t seg_gid;     /* group of the segments (inspect group or the account's) */
    unsigned seg_mode; /* 0600, or 0640 with --inspect-group */
};
/*
 * --user / --allow-root / --inspect-group -> p. Errors (message in err):
 * -ENOENT no such account or group, -EPERM root children without
 * --allow-root, or a non-root supervisor asked for another account.
 */
int bf_priv_resolve(const struct bf_config *cfg, struct bf_priv *p, char *err, size_t errlen);
/* In a forked child, before exec: groups, gid, uid, empty bounding set,
 * no_new_privs, and a check that root is out of reach. 0 or -errno. */
int bf_priv_drop(const struct bf_priv *p);
/* Hands dir (0700) and the regular files directly in it to the account. */
int bf_priv_own_dir(const struct bf_priv *p, const char *dir, char *err, size_t errlen);

/* --------------------------------------------------------------- probe.c */

/*
 * Creates and frees an io_uring event loop (the children's exact set-up) in
 * a forked process with the children's credentials (and, with seccomp, the
 * session's allow-list). 0, or -errno of the
 * refusal (-EPERM, -ENOSYS, -ENOMEM, -ETIMEDOUT) with a message in err that
 * names the likely cause.
 */
int bf_probe_io_uring(const struct bf_priv *p, bool seccomp, char *err, size_t errlen);

/* --------------------------------------------------------------- usage.c */

/* Samples CPU time, RSS and open fds of pid into u. 0 or -errno. */
int bf_usage_sample(pid_t pid, struct bf_proc_usage *u);

#endif
