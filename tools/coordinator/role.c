/*
 * role.c — whether this replica leads, and stepping down (docs/coordinator.md
 * "Leadership and terms"). The bottom of the coordinator: the election
 * (leader.c), the store's fenced writes (store.c) and the RPC server
 * (server.c) all ask co_is_leader and call co_step_down; this file calls
 * none of them. What the server must do when leadership is won or lost it
 * registers as c->on_elected / c->on_lost (co_server_start), so the election
 * calls up through those and never names the server (make lint-includes).
 *
 * Single-threaded: runs on the coordinator's event loop.
 */
#include <inttypes.h>
#include <time.h>

#include "bigfleet/log.h"
#include "bigfleet/util.h"
#include "coordinator.h"

int64_t co_tick_ns(const struct coord *c)
{
    int64_t t = c->cfg.lease_ttl_s * BF_NS_PER_SEC / 3;
    return t < 200 * BF_NS_PER_MS ? 200 * BF_NS_PER_MS : t;
}

/* The lease clock: CLOCK_BOOTTIME, which keeps counting while the host is
 * suspended (CLOCK_MONOTONIC does not), as etcd's lease expiry does: a
 * replica whose host slept past its lease must not think it still leads. */
int64_t co_lease_clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * BF_NS_PER_SEC + ts.tv_nsec;
}

/* Whether etcd may have expired our lease by `now` (lease_clock_ns): no
 * keepalive sent in the last TTL minus one tick succeeded. */
bool co_lease_maybe_expired(const struct coord *c, int64_t now)
{
    return now - c->lease_ok_ns > c->cfg.lease_ttl_s * BF_NS_PER_SEC - co_tick_ns(c);
}

/* Checked at every RPC and rebalance pass, not only on the tick: a leader
 * that was stopped (SIGSTOP, a VM or GC stall) past its lease answers "not
 * leader" from the moment it runs again, even when a request is handled
 * before its overdue tick steps it down. */
bool co_is_leader(const struct coord *c)
{
    return c->role == CO_LEADER && !co_lease_maybe_expired(c, co_lease_clock_ns());
}

void co_step_down(struct coord *c, const char *why)
{
    if (c->role == CO_FOLLOWER)
        return;
    BF_WARN("coordinator leadership lost", "term=%" PRId64 " why=\"%s\"", c->term, why);
    c->role = CO_FOLLOWER;
    c->stepdowns++;
    if (c->on_lost)
        c->on_lost(c);
    c->term = 0;
}
