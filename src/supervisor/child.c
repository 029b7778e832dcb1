/*
 * child.c — start-up, heartbeat and orderly shutdown of an appliance child
 * process (see bigfleet/process.h).
 *
 * Confinement: with --seccomp the role's system-call allow-list is loaded
 * last, once the segments are attached (seccomp.c).
 *
 * Signal handling: handlers only set a sig_atomic_t flag and poke the
 * process's own wake eventfd (write(2) is async-signal-safe), so every loop
 * notices a stop request at its next wake-up.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "bigfleet/log.h"
#include "bigfleet/process.h"
#include "bigfleet/util.h"

static const char *const role_names[BF_ROLE_COUNT] = {"supervisor", "session",  "reconciler",
                                                      "cycle",      "executor", "simprovider"};

const char *bf_role_name(int role)
{
    if (role < 0 || role >= BF_ROLE_COUNT)
        return "unknown";
    return role_names[role];
}

int bf_role_from_name(const char *name)
{
    for (int i = 0; i < BF_ROLE_COUNT; i++)
        if (strcmp(name, role_names[i]) == 0)
            return i;
    return -1;
}

static volatile sig_atomic_t g_stop;
static int g_wake_fd = -1;

static void on_stop(int sig)
{
    (void)sig;
    int saved = errno;
    g_stop = 1;
    if (g_wake_fd >= 0) {
        uint64_t one = 1;
        ssize_t w = write(g_wake_fd, &one, sizeof one);
        (void)w;
    }
    errno = saved;
}

bool bf_child_stopping(void)
{
    return g_stop != 0;
}

int bf_child_start(struct bf_child *ch, const struct bf_config *cfg, int role)
{
    memset(ch, 0, sizeof *ch);
    ch->cfg = cfg;
    ch->role = role;
    ch->wake_fd = -1;
    bf_log_init(bf_role_name(role), bf_log_level_parse(cfg->log_level));
    char name[16];
    snprintf(name, sizeof name, "bf-%s", bf_role_name(role));
    prctl(PR_SET_NAME, name, 0, 0, 0);
    pid_t parent = getppid();
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (parent == 1 || getppid() != parent) {
        BF_ERROR("supervisor already gone at start", "role=%s", bf_role_name(role));
        return -ESRCH;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    char err[512];
    int rc = bf_shm_attach(&ch->shm, cfg->id, false, err, sizeof err);
    if (rc) {
        BF_ERROR("cannot attach shared segments", "error=\"%s\"", err);
        return rc;
    }
    bf_shm_set_role(&ch->shm, role);
    struct bf_proc_slot *slot = &ch->shm.st->proc[role];
    uint32_t fd = atomic_load(&slot->wake_fd);
    ch->wake_fd = fd ? (int)fd : -1;
    g_wake_fd = ch->wake_fd;
    if (cfg->seccomp) {
        rc = bf_seccomp_install(role, err, sizeof err);
        if (rc) {
            BF_ERROR("cannot confine the process", "error=\"%s\"", err);
            bf_shm_detach(&ch->shm);
            return rc;
        }
    }
    atomic_store(&slot->child_state, BF_CHILD_ACTIVE);
    bf_child_heartbeat(ch);
    return 0;
}

void bf_child_heartbeat(struct bf_child *ch)
{
    atomic_store_explicit(&ch->shm.st->proc[ch->role].heartbeat_ns, bf_now_ns(),
                          memory_order_relaxed);
}

bool bf_child_reloaded(struct bf_child *ch, struct bf_live_values *v)
{
    uint64_t g = bf_live_generation(&ch->shm);
    if (g == ch->live_seen)
        return false;
    if (bf_live_read(&ch->shm, v) != 0)
        return false; /* raced a publish 64 times: next tick */
    if (ch->live_seen && v->log_level != bf_log_level())
        BF_INFO("log level changed", "level=%d", v->log_level);
    bf_log_set_level(v->log_level);
    ch->live_seen = v->generation;
    return true;
}

void bf_child_finish(struct bf_child *ch)
{
    if (ch->shm.st)
        atomic_store(&ch->shm.st->proc[ch->role].child_state, BF_CHILD_ASSIGNED);
    bf_shm_detach(&ch->shm);
}
