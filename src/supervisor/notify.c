/*
 * notify.c — systemd readiness notification without libsystemd: one AF_UNIX
 * datagram to $NOTIFY_SOCKET (a path, or an abstract name starting '@').
 * The watchdog period comes from $WATCHDOG_USEC when $WATCHDOG_PID is unset
 * or names this process (sd_watchdog_enabled(3)).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "supervisor.h"

int bf_sd_notify(const char *state)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || !*path)
        return 0;
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    size_t l = strlen(path);
    if (l >= sizeof sa.sun_path)
        return -1;
    memcpy(sa.sun_path, path, l);
    if (sa.sun_path[0] == '@')
        sa.sun_path[0] = 0;
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    ssize_t n = sendto(fd, state, strlen(state), 0, (struct sockaddr *)&sa,
                       (socklen_t)(offsetof(struct sockaddr_un, sun_path) + l));
    close(fd);
    return n < 0 ? -1 : 1;
}

int64_t bf_sd_watchdog_ns(void)
{
    const char *us = getenv("WATCHDOG_USEC");
    if (!us || !*us)
        return 0;
    const char *wp = getenv("WATCHDOG_PID");
    if (wp && *wp && strtol(wp, NULL, 10) != (long)getpid())
        return 0;
    char *end;
    long long v = strtoll(us, &end, 10);
    if (*end || v <= 0)
        return 0;
    return (int64_t)v * 1000;
}
