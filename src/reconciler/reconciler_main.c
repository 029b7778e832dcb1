/*
 * reconciler_main.c — entry point of the reconciler process (bigfleet-shardd --role=reconciler).
 *
 * Current scope: attach the segments, mark the process slot ACTIVE, and run
 * the wake/heartbeat loop the supervisor watches; the role's work is wired
 * in as its module lands.
 */
#include <poll.h>

#include "bigfleet/log.h"
#include "bigfleet/process.h"

int bf_reconciler_main(const struct bf_config *cfg)
{
    struct bf_child ch;
    if (bf_child_start(&ch, cfg, BF_ROLE_RECONCILER) != 0)
        return BF_EXIT_ERROR;
    BF_INFO("started", "id=%s", cfg->id);
    while (!bf_child_stopping()) {
        struct pollfd p = {ch.wake_fd, POLLIN, 0};
        poll(&p, ch.wake_fd >= 0 ? 1 : 0, 1000);
        bf_wake_clear(&ch.shm, ch.role);
        bf_child_heartbeat(&ch);
    }
    BF_INFO("stopping", "id=%s", cfg->id);
    bf_child_finish(&ch);
    return BF_EXIT_OK;
}
