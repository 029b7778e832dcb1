/*
 * resolve.c — host-name resolution off the event loop (see net_internal.h):
 * one detached thread per job runs getaddrinfo and signals an eventfd.
 *
 * Ownership is decided by one atomic exchange on `state`: the thread sets
 * DONE, the loop sets ABANDONED; whichever comes second frees the job. The
 * thread owns its own dup of the eventfd and touches nothing of the job
 * after publishing DONE, so a job freed by the loop the moment it sees DONE
 * is never read again.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "net/net_internal.h"

enum { R_RUNNING = 0, R_DONE = 1, R_ABANDONED = 2 };

struct bf_resolve {
    _Atomic int state;
    int efd; /* the thread's own dup */
    uint16_t port;
    int err;
    socklen_t len;
    struct sockaddr_storage ss;
    char host[256];
};

static void *resolve_thread(void *arg)
{
    struct bf_resolve *r = arg;
    r->err = bf_addr_resolve(r->host, r->port, &r->ss, &r->len);
    int efd = r->efd;
    if (atomic_exchange_explicit(&r->state, R_DONE, memory_order_acq_rel) == R_ABANDONED) {
        close(efd);
        free(r);
        return NULL;
    }
    /* from here on r belongs to the loop */
    uint64_t one = 1;
    ssize_t w;
    do
        w = write(efd, &one, sizeof one);
    while (w < 0 && errno == EINTR);
    close(efd);
    return NULL;
}

int bf_resolve_start(const char *host, uint16_t port, int efd, struct bf_resolve **out)
{
    if (!host || strlen(host) >= sizeof(((struct bf_resolve *)0)->host))
        return -EINVAL;
    struct bf_resolve *r = calloc(1, sizeof *r);
    if (!r)
        return -ENOMEM;
    strcpy(r->host, host);
    r->port = port;
    r->efd = fcntl(efd, F_DUPFD_CLOEXEC, 0);
    if (r->efd < 0) {
        int e = -errno;
        free(r);
        return e;
    }
    pthread_attr_t at;
    pthread_t t;
    int rc = pthread_attr_init(&at);
    if (!rc) {
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        rc = pthread_create(&t, &at, resolve_thread, r);
        pthread_attr_destroy(&at);
    }
    if (rc) {
        close(r->efd);
        free(r);
        return -EAGAIN;
    }
    *out = r;
    return 0;
}

int bf_resolve_take(struct bf_resolve *r, struct sockaddr_storage *ss, socklen_t *len)
{
    if (atomic_load_explicit(&r->state, memory_order_acquire) != R_DONE)
        return -EINPROGRESS;
    int err = r->err;
    if (!err) {
        *ss = r->ss;
        *len = r->len;
    }
    free(r);
    return err;
}

void bf_resolve_abandon(struct bf_resolve *r)
{
    if (!r)
        return;
    if (atomic_exchange_explicit(&r->state, R_ABANDONED, memory_order_acq_rel) == R_DONE)
        free(r); /* the thread is past every use of r */
}
