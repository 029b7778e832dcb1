/*
 * loop.c — the io_uring event loop (bigfleet/net.h): ring setup, the
 * provided-buffer ring for multishot recv (registered by hand: liburing 2.3
 * has no io_uring_setup_buf_ring), the timer heap, deferred calls, fd and
 * eventfd watches (multishot poll), listeners (multishot accept) and the
 * run loop.
 *
 * Design notes
 *   - Single threaded. The ring is created in bf_net_loop_new() — callers
 *     create loops after fork(). SINGLE_ISSUER|DEFER_TASKRUN are used when
 *     the kernel accepts them (completions are then only posted while we
 *     wait, which suits a loop that waits once per iteration).
 *   - user_data = object pointer | 3-bit op tag. Every object that can be
 *     named by an in-flight operation stays allocated until the kernel
 *     returns that operation's final CQE (no IORING_CQE_F_MORE): listeners
 *     and watches carry a `closing` flag and are freed from the CQE handler.
 *   - Timers live in a binary min-heap; the wait timeout is the nearest
 *     expiry, so no timeout SQEs are needed.
 *   - One iteration: deferred calls, flush dirty connections (this is where
 *     HTTP/2 output is produced and sends are submitted, coalescing every
 *     write a callback made), wait, dispatch CQEs in batches, expired timers,
 *     flush again.
 *   - Idle memory (issue 18, stop 29): the provided buffers (512 x 16 KiB by
 *     default) are taken in ring order, so after a few hundred receives every
 *     buffer has pages resident (the first page at least: ~2 KiB per
 *     connection at 2,000 idle connections). When no receive has used a
 *     buffer for BF_LOOP_BUFS_IDLE_NS, bufs_idle_cb gives all their pages back
 *     (MADV_DONTNEED: they read back as zeros; the next receive faults a page
 *     in). This is safe while the buffers sit in the kernel's ring because
 *     every buffer a completion handed us went back before its handler
 *     returned (no one keeps a pointer into one), and with DEFER_TASKRUN the
 *     kernel writes a provided buffer only inside io_uring_enter on this
 *     thread (deferred task work, or a receive issued inline while we
 *     submit), posting its completion before it returns: so the release
 *     runs only when the CQ ring and its overflow list are empty
 *     (bufs_all_free), with no system call between that check and the
 *     madvise. A ring without DEFER_TASKRUN (older kernels) runs task work on
 *     any return to user space, so its pages are never given back. (Review
 *     of stop 29: the first version checked only the time since the last
 *     receive.)
 *     Busy loops pay nothing but a flag per iteration; a quiet one pays one
 *     madvise per quiet spell and a page fault per page touched afterwards:
 *     ~40 us a page on the benchmark VM (its kernel has no shared zero
 *     page), so refilling a whole 8 MiB ring costs ~80 ms of CPU there
 *     (~2 ms on bare metal), spread over the first 8 MiB received after a
 *     quiet second. A minimum gap between releases was tried (stop 29) and
 *     dropped: bench_grpc's idle figure is taken after a 1.5 s quiet that
 *     follows another one a few seconds earlier.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bigfleet/log.h"
#include "bigfleet/strbuf.h"
#include "bigfleet/util.h"
#include "net/net_internal.h"

/* ---------------------------------------------------------------- watches */

struct bf_net_watch {
    struct bf_loop_handler h; /* first: BF_OP_POLL completions */
    struct bf_net_loop *loop;
    int fd;
    unsigned events;
    bool is_eventfd;
    bool armed;
    bool closing;
    bool in_cb;
    bf_net_eventfd_fn efn;
    bf_net_fd_fn ffn;
    void *arg;
    struct bf_list link;
};

/* the loop's completion callbacks of watches and listeners (bf_loop_handler) */
static void watch_complete(struct bf_loop_handler *h, unsigned op, int res, unsigned flags);
static void listener_complete(struct bf_loop_handler *h, unsigned op, int res, unsigned flags);
_Static_assert(offsetof(struct bf_net_watch, h) == 0 && offsetof(struct bf_listener, h) == 0,
               "BF_UD(object, op) must be the address of the object's handler");

/* ------------------------------------------------------------------ SQEs */

struct io_uring_sqe *bf_loop_sqe(struct bf_net_loop *loop)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&loop->ring);
    for (int i = 0; !sqe && i < 64; i++) {
        int r = io_uring_submit(&loop->ring);
        if (r < 0 && r != -EAGAIN && r != -EBUSY && r != -EINTR) {
            BF_ERROR("io_uring submit failed", "err=\"%s\"", strerror(-r));
            abort();
        }
        sqe = io_uring_get_sqe(&loop->ring);
    }
    if (!sqe) {
        BF_ERROR("io_uring: no SQE available", "sq_entries=%u", loop->ring.sq.ring_entries);
        abort();
    }
    return sqe;
}

void bf_loop_cancel(struct bf_net_loop *loop, uint64_t user_data)
{
    struct io_uring_sqe *sqe = bf_loop_sqe(loop);
    io_uring_prep_cancel64(sqe, user_data, 0);
    io_uring_sqe_set_data64(sqe, BF_OP_IGNORE);
}

/* ---------------------------------------------------------------- timers */

static bool timer_less(const struct bf_net_timer *a, const struct bf_net_timer *b)
{
    return a->expiry < b->expiry;
}

static void heap_set(struct bf_net_loop *l, uint32_t i, struct bf_net_timer *t)
{
    l->heap[i] = t;
    t->heap_idx = i;
}

static void heap_up(struct bf_net_loop *l, uint32_t i)
{
    struct bf_net_timer *t = l->heap[i];
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (!timer_less(t, l->heap[p]))
            break;
        heap_set(l, i, l->heap[p]);
        i = p;
    }
    heap_set(l, i, t);
}

static void heap_down(struct bf_net_loop *l, uint32_t i)
{
    struct bf_net_timer *t = l->heap[i];
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= l->nheap)
            break;
        if (c + 1 < l->nheap && timer_less(l->heap[c + 1], l->heap[c]))
            c++;
        if (!timer_less(l->heap[c], t))
            break;
        heap_set(l, i, l->heap[c]);
        i = c;
    }
    heap_set(l, i, t);
}

static void heap_remove(struct bf_net_loop *l, struct bf_net_timer *t)
{
    uint32_t i = t->heap_idx;
    t->heap_idx = BF_TIMER_IDLE;
    l->nheap--;
    if (i == l->nheap)
        return;
    heap_set(l, i, l->heap[l->nheap]);
    heap_down(l, i);
    heap_up(l, l->heap[i]->heap_idx);
}

void bf_timer_init(struct bf_net_timer *t, struct bf_net_loop *loop, bf_net_timer_fn fn, void *arg)
{
    memset(t, 0, sizeof *t);
    t->loop = loop;
    t->fn = fn;
    t->arg = arg;
    t->heap_idx = BF_TIMER_IDLE;
}

struct bf_net_timer *bf_net_timer_new(struct bf_net_loop *loop, bf_net_timer_fn fn, void *arg)
{
    struct bf_net_timer *t = malloc(sizeof *t);
    if (!t)
        return NULL;
    bf_timer_init(t, loop, fn, arg);
    t->heap_alloc = true;
    return t;
}

void bf_net_timer_start(struct bf_net_timer *t, int64_t delay_ns, int64_t period_ns)
{
    struct bf_net_loop *l = t->loop;
    if (delay_ns < 0)
        delay_ns = 0;
    t->expiry = bf_mono_ns() + delay_ns;
    t->period = period_ns > 0 ? period_ns : 0;
    if (t->heap_idx != BF_TIMER_IDLE) {
        heap_up(l, t->heap_idx);
        heap_down(l, t->heap_idx);
        return;
    }
    if (bf_grow((void **)&l->heap, &l->capheap, (size_t)l->nheap + 1, sizeof *l->heap)) {
        /* cannot happen in practice; a lost timer would hang a call */
        BF_ERROR("timer heap allocation failed", "n=%u", l->nheap);
        abort();
    }
    heap_set(l, l->nheap++, t);
    heap_up(l, t->heap_idx);
}

void bf_net_timer_stop(struct bf_net_timer *t)
{
    if (t && t->heap_idx != BF_TIMER_IDLE)
        heap_remove(t->loop, t);
}

bool bf_net_timer_active(const struct bf_net_timer *t)
{
    return t->heap_idx != BF_TIMER_IDLE;
}

void bf_net_timer_free(struct bf_net_timer *t)
{
    if (!t)
        return;
    bf_net_timer_stop(t);
    if (t == t->loop->running_timer) {
        t->free_pending = true;
        return;
    }
    if (t->heap_alloc)
        free(t);
}

static int run_timers(struct bf_net_loop *l)
{
    int n = 0;
    int64_t now = bf_mono_ns();
    /* bounded: timers re-armed for "now" run on the next iteration */
    uint32_t budget = l->nheap;
    while (l->nheap > 0 && budget-- > 0) {
        struct bf_net_timer *t = l->heap[0];
        if (t->expiry > now)
            break;
        heap_remove(l, t);
        if (t->period > 0) {
            int64_t next = t->expiry + t->period;
            if (next <= now) /* skip missed periods, keep the phase */
                next = now + t->period - ((now - t->expiry) % t->period);
            t->expiry = next;
            heap_set(l, l->nheap++, t);
            heap_up(l, t->heap_idx);
        }
        struct bf_net_timer *prev = l->running_timer;
        l->running_timer = t;
        t->fn(t, t->arg);
        l->running_timer = prev;
        if (t->free_pending && t->heap_alloc)
            free(t);
        n++;
    }
    return n;
}

void bf_loop_submit(struct bf_net_loop *loop)
{
    int r = io_uring_submit(&loop->ring);
    if (r < 0 && r != -EAGAIN && r != -EBUSY && r != -EINTR)
        BF_WARN("io_uring submit failed", "err=\"%s\"", strerror(-r)); /* the next wait retries */
}

/* ---------------------------------------------------------------- defer */

int bf_net_loop_defer(struct bf_net_loop *l, void (*fn)(void *), void *arg)
{
    if (l->ndefer == l->capdefer &&
        bf_grow((void **)&l->defer, &l->capdefer, l->ndefer + 1, sizeof *l->defer))
        return -ENOMEM;
    l->defer[l->ndefer++] = (struct bf_defer){fn, arg};
    return 0;
}

static int run_deferred(struct bf_net_loop *l)
{
    /* only what was queued before this point; new entries wait a round */
    size_t n = l->ndefer;
    if (n == 0)
        return 0;
    struct bf_defer stackbuf[64];
    struct bf_defer *items = n <= 64 ? stackbuf : malloc(n * sizeof *items);
    if (!items)
        return 0; /* retry next iteration */
    memcpy(items, l->defer, n * sizeof *items);
    memmove(l->defer, l->defer + n, (l->ndefer - n) * sizeof *items);
    l->ndefer -= n;
    for (size_t i = 0; i < n; i++)
        items[i].fn(items[i].arg);
    if (items != stackbuf)
        free(items);
    return (int)n;
}

/* ---------------------------------------------------------------- watches */

static void watch_arm(struct bf_net_watch *w)
{
    struct io_uring_sqe *sqe = bf_loop_sqe(w->loop);
    /* eventfds are drained by each callback: multishot (edge) is enough.
     * Other fds are level triggered: one-shot poll, re-armed after the
     * callback, so readiness left over is reported again. */
    if (w->is_eventfd)
        io_uring_prep_poll_multishot(sqe, w->fd, w->events);
    else
        io_uring_prep_poll_add(sqe, w->fd, w->events);
    io_uring_sqe_set_data64(sqe, BF_UD(w, BF_OP_POLL));
    w->armed = true;
}

static int watch_new(struct bf_net_loop *l, int fd, unsigned events, bool is_eventfd,
                     bf_net_eventfd_fn efn, bf_net_fd_fn ffn, void *arg, struct bf_net_watch **out)
{
    if (fd < 0 || fcntl(fd, F_GETFD) < 0)
        return -EBADF;
    struct bf_net_watch *w = calloc(1, sizeof *w);
    if (!w)
        return -ENOMEM;
    w->h.complete = watch_complete;
    w->loop = l;
    w->fd = fd;
    w->events = events;
    w->is_eventfd = is_eventfd;
    w->efn = efn;
    w->ffn = ffn;
    w->arg = arg;
    bf_list_add_tail(&l->watches, &w->link);
    watch_arm(w);
    *out = w;
    return 0;
}

int bf_net_watch_eventfd(struct bf_net_loop *l, int efd, bf_net_eventfd_fn fn, void *arg,
                         struct bf_net_watch **out)
{
    if (!fn || !out)
        return -EINVAL;
    int fl = fcntl(efd, F_GETFL);
    if (fl < 0)
        return -EBADF;
    if (!(fl & O_NONBLOCK) && fcntl(efd, F_SETFL, fl | O_NONBLOCK) < 0)
        return -errno;
    return watch_new(l, efd, POLLIN, true, fn, NULL, arg, out);
}

int bf_net_watch_fd(struct bf_net_loop *l, int fd, unsigned events, bf_net_fd_fn fn, void *arg,
                    struct bf_net_watch **out)
{
    if (!fn || !out || !events)
        return -EINVAL;
    return watch_new(l, fd, events, false, NULL, fn, arg, out);
}

static void watch_destroy(struct bf_net_watch *w)
{
    bf_list_del(&w->link);
    free(w);
}

void bf_net_watch_free(struct bf_net_watch *w)
{
    if (!w || w->closing)
        return;
    w->closing = true;
    if (w->armed) {
        struct io_uring_sqe *sqe = bf_loop_sqe(w->loop);
        io_uring_prep_poll_remove(sqe, BF_UD(w, BF_OP_POLL));
        io_uring_sqe_set_data64(sqe, BF_OP_IGNORE);
        return; /* freed when the poll's final CQE arrives */
    }
    if (!w->in_cb)
        watch_destroy(w);
}

static void watch_handle(struct bf_net_watch *w, int res, unsigned flags)
{
    if (!(flags & IORING_CQE_F_MORE))
        w->armed = false;
    if (!w->closing && res > 0) {
        w->in_cb = true;
        if (w->is_eventfd) {
            uint64_t v = 0;
            ssize_t r = read(w->fd, &v, sizeof v);
            if (r == (ssize_t)sizeof v && v > 0)
                w->efn(w, v, w->arg);
        } else {
            w->ffn(w, w->fd, (unsigned)res, w->arg);
        }
        w->in_cb = false;
    } else if (!w->closing && res < 0 && res != -ECANCELED) {
        BF_WARN("fd watch failed", "fd=%d err=\"%s\"", w->fd, strerror(-res));
    }
    if (w->armed)
        return;
    if (w->closing) {
        watch_destroy(w);
        return;
    }
    if (res >= 0 || res == -ECANCELED || res == -ENOMEM || res == -EAGAIN)
        watch_arm(w); /* multishot poll ended (overflow etc.): re-arm */
}

static void watch_complete(struct bf_loop_handler *h, unsigned op, int res, unsigned flags)
{
    (void)op; /* BF_OP_POLL */
    watch_handle(BF_CONTAINER_OF(h, struct bf_net_watch, h), res, flags);
}

/* ---------------------------------------------------------------- addresses */

int bf_addr_parse_literal(const char *addr, struct sockaddr_storage *ss, socklen_t *len,
                          char *host_out, size_t host_cap, uint16_t *port_out)
{
    if (!addr)
        return -EINVAL;
    char host[256];
    const char *portstr;
    if (addr[0] == '[') {
        const char *rb = strchr(addr, ']');
        if (!rb || rb[1] != ':' || (size_t)(rb - addr - 1) >= sizeof host)
            return -EINVAL;
        memcpy(host, addr + 1, (size_t)(rb - addr - 1));
        host[rb - addr - 1] = 0;
        portstr = rb + 2;
    } else {
        const char *colon = strrchr(addr, ':');
        if (!colon || (size_t)(colon - addr) >= sizeof host)
            return -EINVAL;
        memcpy(host, addr, (size_t)(colon - addr));
        host[colon - addr] = 0;
        if (strchr(host, ':'))
            return -EINVAL; /* bare IPv6 needs brackets */
        portstr = colon + 1;
    }
    char *end;
    errno = 0;
    unsigned long port = strtoul(portstr, &end, 10);
    if (!*portstr || *end || errno || port > 65535)
        return -EINVAL;
    memset(ss, 0, sizeof *ss);
    if (host_out) {
        if (strlen(host) >= host_cap)
            return -EINVAL;
        strcpy(host_out, host);
    }
    if (port_out)
        *port_out = (uint16_t)port;
    struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
    if (host[0] == 0 || strcmp(host, "0.0.0.0") == 0) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        v4->sin_addr.s_addr = htonl(INADDR_ANY);
        *len = sizeof *v4;
        return 0;
    }
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        *len = sizeof *v4;
        return 0;
    }
    if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        *len = sizeof *v6;
        return 0;
    }
    return 1; /* a name: the caller resolves it (bf_addr_resolve) */
}

_Atomic int64_t bf_resolve_test_delay_ns;

int bf_addr_resolve(const char *host, uint16_t port, struct sockaddr_storage *ss, socklen_t *len)
{
    int64_t delay = atomic_load(&bf_resolve_test_delay_ns);
    if (delay > 0) {
        struct timespec ts = {delay / 1000000000, delay % 1000000000};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
        }
    }
    struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int g = getaddrinfo(host, NULL, &hints, &res);
    if (g != 0 || !res) {
        if (res)
            freeaddrinfo(res);
        return g == EAI_AGAIN ? -EAGAIN : g == EAI_MEMORY ? -ENOMEM : -EHOSTUNREACH;
    }
    /* prefer IPv4 (":port" listeners are IPv4) */
    struct addrinfo *pick = res;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next)
        if (ai->ai_family == AF_INET) {
            pick = ai;
            break;
        }
    memcpy(ss, pick->ai_addr, pick->ai_addrlen);
    *len = pick->ai_addrlen;
    if (ss->ss_family == AF_INET)
        v4->sin_port = htons((uint16_t)port);
    else
        v6->sin6_port = htons((uint16_t)port);
    freeaddrinfo(res);
    return 0;
}

int bf_addr_parse(const char *addr, struct sockaddr_storage *ss, socklen_t *len, char *host_out,
                  size_t host_cap, uint16_t *port_out)
{
    char buf[256];
    char *host = host_out ? host_out : buf;
    uint16_t port;
    int r = bf_addr_parse_literal(addr, ss, len, host, host_out ? host_cap : sizeof buf, &port);
    if (r < 0)
        return r;
    if (port_out)
        *port_out = port;
    if (r == 0)
        return 0;
    return bf_addr_resolve(host, port, ss, len) < 0 ? -EINVAL : 0;
}

void bf_addr_format(const struct sockaddr *sa, char *out, size_t cap)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *v4 = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &v4->sin_addr, ip, sizeof ip);
        port = ntohs(v4->sin_port);
        snprintf(out, cap, "%s:%u", ip, port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &v6->sin6_addr, ip, sizeof ip);
        port = ntohs(v6->sin6_port);
        snprintf(out, cap, "[%s]:%u", ip, port);
    } else {
        snprintf(out, cap, "?");
    }
}

/* ---------------------------------------------------------------- listeners */

static void listener_arm(struct bf_listener *l)
{
    struct io_uring_sqe *sqe = bf_loop_sqe(l->loop);
    io_uring_prep_multishot_accept(sqe, l->fd, NULL, NULL, SOCK_CLOEXEC);
    io_uring_sqe_set_data64(sqe, BF_UD(l, BF_OP_ACCEPT));
    l->armed = true;
}

static void listener_retry(struct bf_net_timer *t, void *arg)
{
    (void)t;
    struct bf_listener *l = arg;
    if (!l->closing && !l->armed)
        listener_arm(l);
}

int bf_net_addr_check(const char *addr)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    char host[256];
    uint16_t port;
    int r = bf_addr_parse_literal(addr, &ss, &sl, host, sizeof host, &port);
    return r < 0 ? r : 0;
}

int bf_net_listen_socket(const char *addr, int *fd_out)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    int r = bf_addr_parse(addr, &ss, &sl, NULL, 0, NULL);
    if (r < 0)
        return r;
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&ss, sl) < 0 || listen(fd, 4096) < 0) {
        r = -errno;
        close(fd);
        return r;
    }
    *fd_out = fd;
    return 0;
}

int bf_net_socket_port(int fd)
{
    struct sockaddr_storage bound;
    socklen_t bl = sizeof bound;
    if (getsockname(fd, (struct sockaddr *)&bound, &bl) != 0)
        return -errno;
    if (bound.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&bound)->sin_port);
    if (bound.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&bound)->sin6_port);
    return -EAFNOSUPPORT;
}

int bf_listener_adopt(struct bf_net_loop *loop, int fd, bool shared, void (*on_accept)(void *, int),
                      void *owner, uint64_t *accept_errors, struct bf_listener **out)
{
    int type = 0, acc = 0;
    socklen_t tl = sizeof type, al = sizeof acc;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 || type != SOCK_STREAM ||
        getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &al) != 0 || !acc)
        return -ENOTSOCK;
    int port = bf_net_socket_port(fd);
    if (port < 0)
        return port;
    struct bf_listener *l = calloc(1, sizeof *l);
    if (!l)
        return -ENOMEM;
    l->h.complete = listener_complete;
    l->loop = loop;
    l->fd = fd;
    l->shared = shared;
    l->port = (uint16_t)port;
    l->on_accept = on_accept;
    l->owner = owner;
    l->accept_errors = accept_errors;
    bf_timer_init(&l->retry, loop, listener_retry, l);
    bf_list_add_tail(&loop->listeners, &l->link);
    listener_arm(l);
    *out = l;
    return 0;
}

int bf_listener_open(struct bf_net_loop *loop, const char *addr, void (*on_accept)(void *, int),
                     void *owner, uint64_t *accept_errors, struct bf_listener **out)
{
    int fd, r = bf_net_listen_socket(addr, &fd);
    if (r < 0)
        return r;
    r = bf_listener_adopt(loop, fd, false, on_accept, owner, accept_errors, out);
    if (r < 0)
        close(fd);
    return r;
}

static void listener_destroy(struct bf_listener *l)
{
    bf_net_timer_stop(&l->retry);
    bf_list_del(&l->link);
    if (l->fd >= 0)
        close(l->fd);
    free(l);
}

void bf_listener_close(struct bf_listener *l)
{
    if (!l || l->closing)
        return;
    l->closing = true;
    l->owner = NULL;
    bf_net_timer_stop(&l->retry);
    if (l->armed) {
        bf_loop_cancel(l->loop, BF_UD(l, BF_OP_ACCEPT));
        /* shutdown wakes the accept too, on kernels where cancel races; never
         * on a socket other processes hold: it would stop their listening */
        if (!l->shared)
            shutdown(l->fd, SHUT_RDWR);
        return;
    }
    listener_destroy(l);
}

static void listener_handle(struct bf_listener *l, int res, unsigned flags)
{
    if (!(flags & IORING_CQE_F_MORE))
        l->armed = false;
    if (res >= 0) {
        if (l->closing || !l->owner)
            close(res);
        else
            l->on_accept(l->owner, res);
    } else if (res != -ECANCELED && !l->closing) {
        if (l->accept_errors)
            (*l->accept_errors)++;
        BF_WARN("accept failed", "port=%u err=\"%s\"", l->port, strerror(-res));
    }
    if (l->armed)
        return;
    if (l->closing) {
        listener_destroy(l);
        return;
    }
    /* the multishot ended: re-arm (after a pause if we are out of fds) */
    if (res == -EMFILE || res == -ENFILE || res == -ENOBUFS || res == -ENOMEM)
        bf_net_timer_start(&l->retry, 100 * BF_NS_PER_MS, 0);
    else
        listener_arm(l);
}

static void listener_complete(struct bf_loop_handler *h, unsigned op, int res, unsigned flags)
{
    (void)op; /* BF_OP_ACCEPT */
    listener_handle(BF_CONTAINER_OF(h, struct bf_listener, h), res, flags);
}

/* ---------------------------------------------------------------- the loop */

static void wake_cb(struct bf_net_watch *w, uint64_t count, void *arg)
{
    (void)w;
    (void)count;
    struct bf_net_loop *l = arg;
    l->stop = true;
}

static int setup_ring(struct bf_net_loop *l, unsigned entries)
{
    struct io_uring_params p;
    const unsigned try_flags[] = {
        IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
        IORING_SETUP_COOP_TASKRUN,
        0,
    };
    int r = -EINVAL;
    for (size_t i = 0; i < sizeof try_flags / sizeof try_flags[0]; i++) {
        memset(&p, 0, sizeof p);
        p.flags = try_flags[i] | IORING_SETUP_CQSIZE;
        /* room for a completion from every connection of a busy shard at
         * once (10k+ multishot recvs) before the kernel has to spill */
        p.cq_entries = entries * 8 < 16384 ? 16384 : entries * 8;
        r = io_uring_queue_init_params(entries, &l->ring, &p);
        if (r == 0)
            return 0;
        if (r != -EINVAL)
            break;
    }
    return r;
}

/* Whether no provided buffer can hold data we have not consumed: the kernel
 * fills one only while it completes a receive, and with DEFER_TASKRUN that
 * happens only inside io_uring_enter on this thread: either deferred task work
 * (run only when we wait for completions) or a receive issued inline while we
 * submit, whose completion is then already in the CQ ring (or its overflow
 * list). So with DEFER_TASKRUN, an empty CQ ring and no overflow, every
 * buffer in the ring is free, and stays free until our next io_uring_enter:
 * no system call may come between this check and the release. Without
 * DEFER_TASKRUN, task work also runs on any return to user space (a signal, an
 * interrupt), so a receive could fill a buffer between the check and the
 * madvise: there the pages are never given back. */
static bool bufs_all_free(struct bf_net_loop *l)
{
    if (!(l->ring.flags & IORING_SETUP_DEFER_TASKRUN))
        return false;
    if (io_uring_cq_ready(&l->ring) != 0)
        return false;
    return !(IO_URING_READ_ONCE(*l->ring.sq.kflags) & IORING_SQ_CQ_OVERFLOW);
}

/* No receive for BF_LOOP_BUFS_IDLE_NS: give the buffers' pages back when
 * bufs_all_free says none holds unconsumed data; a completion waiting to be
 * handled puts the release off by another period. */
static void bufs_idle_cb(struct bf_net_timer *t, void *arg)
{
    struct bf_net_loop *l = arg;
    int64_t quiet = bf_mono_ns() - l->bufs_last_ns;
    if (l->bufs_used || quiet < BF_LOOP_BUFS_IDLE_NS) {
        bf_net_timer_start(t, BF_LOOP_BUFS_IDLE_NS - (l->bufs_used ? 0 : quiet), 0);
        return;
    }
    if (!bufs_all_free(l)) {
        bf_net_timer_start(t, BF_LOOP_BUFS_IDLE_NS, 0);
        return;
    }
    /* nothing between the check above and this call enters the kernel's
     * io_uring */
    if (madvise(l->bufs, l->bufs_size, MADV_DONTNEED) == 0)
        l->bufs_releases++;
    l->bufs_touched = false; /* released or not, the next receive re-arms */
}

uint64_t bf_loop_buffer_releases(const struct bf_net_loop *l)
{
    return l->bufs_releases;
}

static int setup_buf_ring(struct bf_net_loop *l)
{
    l->br_size = (size_t)l->nbufs * sizeof(struct io_uring_buf);
    l->br = mmap(NULL, l->br_size, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
    if (l->br == MAP_FAILED) {
        l->br = NULL;
        return -ENOMEM;
    }
    l->bufs_size = (size_t)l->nbufs * l->bufsz;
    l->bufs = mmap(NULL, l->bufs_size, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
    if (l->bufs == MAP_FAILED) {
        l->bufs = NULL;
        return -ENOMEM;
    }
    struct io_uring_buf_reg reg = {
        .ring_addr = (unsigned long)l->br,
        .ring_entries = l->nbufs,
        .bgid = BF_NET_BGID,
    };
    int r = io_uring_register_buf_ring(&l->ring, &reg, 0);
    if (r < 0)
        return r;
    io_uring_buf_ring_init(l->br);
    int mask = io_uring_buf_ring_mask(l->nbufs);
    for (unsigned i = 0; i < l->nbufs; i++)
        io_uring_buf_ring_add(l->br, l->bufs + (size_t)i * l->bufsz, l->bufsz, (unsigned short)i,
                              mask, (int)i);
    io_uring_buf_ring_advance(l->br, (int)l->nbufs);
    return 0;
}

int bf_net_loop_new(const struct bf_net_loop_opts *opts, struct bf_net_loop **out)
{
    struct bf_net_loop_opts o = opts ? *opts : (struct bf_net_loop_opts){0};
    if (!o.sq_entries)
        o.sq_entries = 1024;
    if (!o.recv_buffers)
        o.recv_buffers = 512;
    if (!o.recv_buffer_size)
        o.recv_buffer_size = 16384;
    if ((o.recv_buffers & (o.recv_buffers - 1)) || o.recv_buffers > 32768 ||
        o.recv_buffer_size < 1024)
        return -EINVAL;
    struct bf_net_loop *l = calloc(1, sizeof *l);
    if (!l)
        return -ENOMEM;
    l->nbufs = o.recv_buffers;
    l->bufsz = o.recv_buffer_size;
    bf_timer_init(&l->bufs_timer, l, bufs_idle_cb, l);
    l->wake_fd = -1;
    bf_list_init(&l->dirty);
    bf_list_init(&l->conns);
    bf_list_init(&l->listeners);
    bf_list_init(&l->watches);
    int r = setup_ring(l, o.sq_entries);
    if (r < 0) {
        BF_ERROR("io_uring setup failed", "err=\"%s\"", strerror(-r));
        free(l);
        return r;
    }
    l->ring_ok = true;
    r = setup_buf_ring(l);
    if (r < 0) {
        BF_ERROR("io_uring buffer ring setup failed", "err=\"%s\"", strerror(-r));
        goto out_fail;
    }
    l->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (l->wake_fd < 0) {
        r = -errno;
        goto out_fail;
    }
    r = bf_net_watch_eventfd(l, l->wake_fd, wake_cb, l, &l->wake_watch);
    if (r < 0)
        goto out_fail;
    *out = l;
    return 0;
out_fail:
    bf_net_loop_free(l);
    return r;
}

void bf_net_loop_free(struct bf_net_loop *l)
{
    if (!l)
        return;
    /* tearing the ring down cancels every in-flight operation */
    if (l->ring_ok) {
        io_uring_queue_exit(&l->ring);
        l->ring_ok = false;
    }
    while (!bf_list_empty(&l->conns)) {
        struct bf_loop_endpoint *ep = BF_CONTAINER_OF(l->conns.next, struct bf_loop_endpoint, link);
        ep->ops->free_leftover(ep);
    }
    while (!bf_list_empty(&l->listeners)) {
        struct bf_listener *li = BF_CONTAINER_OF(l->listeners.next, struct bf_listener, link);
        li->armed = false;
        listener_destroy(li);
    }
    while (!bf_list_empty(&l->watches)) {
        struct bf_net_watch *w = BF_CONTAINER_OF(l->watches.next, struct bf_net_watch, link);
        watch_destroy(w);
    }
    if (l->wake_fd >= 0)
        close(l->wake_fd);
    if (l->br)
        munmap(l->br, l->br_size);
    if (l->bufs)
        munmap(l->bufs, l->bufs_size);
    free(l->heap);
    free(l->defer);
    free(l);
}

void bf_net_loop_stop(struct bf_net_loop *l)
{
    l->stop = true;
}

void bf_net_loop_stop_async(struct bf_net_loop *l)
{
    uint64_t one = 1;
    ssize_t r = write(l->wake_fd, &one, sizeof one);
    (void)r;
}

uint64_t bf_net_loop_enobufs(const struct bf_net_loop *l)
{
    return l->enobufs;
}

/* Returns a provided buffer to the ring. */
static void recycle_buffer(struct bf_net_loop *l, unsigned bid)
{
    l->bufs_used = true; /* run_once stamps the time once per iteration */
    io_uring_buf_ring_add(l->br, l->bufs + (size_t)bid * l->bufsz, l->bufsz, (unsigned short)bid,
                          io_uring_buf_ring_mask(l->nbufs), 0);
    io_uring_buf_ring_advance(l->br, 1);
}

const uint8_t *bf_loop_buffer(struct bf_net_loop *l, unsigned bid)
{
    return l->bufs + (size_t)bid * l->bufsz;
}

static void dispatch(struct bf_net_loop *l, uint64_t ud, int res, unsigned flags)
{
    unsigned op = (unsigned)(ud & BF_OP_MASK);
    struct bf_loop_handler *h = (void *)(uintptr_t)(ud & ~(uint64_t)BF_OP_MASK);
    if (op != BF_OP_IGNORE) {
        h->complete(h, op, res, flags); /* the submitter's own callback */
        return;
    }
    /* a recv buffer picked by an op we no longer track still goes back */
    if (res > 0 && (flags & IORING_CQE_F_BUFFER))
        recycle_buffer(l, flags >> IORING_CQE_BUFFER_SHIFT);
}

void bf_loop_recycle(struct bf_net_loop *l, unsigned bid)
{
    recycle_buffer(l, bid);
}

static void flush_dirty(struct bf_net_loop *l)
{
    /* a flush can dirty other conns (a callback writing to another call) */
    for (int round = 0; round < 8 && !bf_list_empty(&l->dirty); round++) {
        struct bf_list batch;
        bf_list_init(&batch);
        /* move the whole list into batch */
        batch.next = l->dirty.next;
        batch.prev = l->dirty.prev;
        batch.next->prev = &batch;
        batch.prev->next = &batch;
        bf_list_init(&l->dirty);
        while (!bf_list_empty(&batch)) {
            struct bf_loop_endpoint *ep =
                BF_CONTAINER_OF(batch.next, struct bf_loop_endpoint, dirty_link);
            bf_list_del(&ep->dirty_link);
            ep->dirty = false;
            ep->ops->flush(ep);
        }
    }
}

int bf_net_loop_run_once(struct bf_net_loop *l, int64_t max_wait_ns)
{
    int handled = run_deferred(l);
    flush_dirty(l);
    int64_t wait = max_wait_ns;
    if (l->ndefer > 0 || l->stop)
        wait = 0;
    if (l->nheap > 0) {
        int64_t until = l->heap[0]->expiry - bf_mono_ns();
        if (until < 0)
            until = 0;
        if (wait < 0 || until < wait)
            wait = until;
    }
    struct io_uring_cqe *cqe = NULL;
    int r;
    if (wait == 0) {
        r = io_uring_submit_and_get_events(&l->ring);
    } else if (wait < 0) {
        r = io_uring_submit_and_wait(&l->ring, 1);
    } else {
        struct __kernel_timespec ts = {.tv_sec = wait / BF_NS_PER_SEC,
                                       .tv_nsec = wait % BF_NS_PER_SEC};
        r = io_uring_submit_and_wait_timeout(&l->ring, &cqe, 1, &ts, NULL);
    }
    if (r < 0 && r != -ETIME && r != -EINTR && r != -EAGAIN && r != -EBUSY) {
        BF_ERROR("io_uring wait failed", "err=\"%s\"", strerror(-r));
        return r;
    }
    /* dispatch in batches; copy each CQE out before handlers run */
    for (;;) {
        struct io_uring_cqe *cqes[128];
        unsigned n = io_uring_peek_batch_cqe(&l->ring, cqes, 128);
        if (n == 0)
            break;
        struct {
            uint64_t ud;
            int res;
            unsigned flags;
        } ev[128];
        for (unsigned i = 0; i < n; i++) {
            ev[i].ud = cqes[i]->user_data;
            ev[i].res = cqes[i]->res;
            ev[i].flags = cqes[i]->flags;
        }
        io_uring_cq_advance(&l->ring, n);
        for (unsigned i = 0; i < n; i++)
            dispatch(l, ev[i].ud, ev[i].res, ev[i].flags);
        handled += (int)n;
        if (n < 128)
            break;
    }
    if (l->bufs_used) {
        l->bufs_last_ns = bf_mono_ns();
        l->bufs_used = false;
        if (!l->bufs_touched && (l->ring.flags & IORING_SETUP_DEFER_TASKRUN)) {
            l->bufs_touched = true;
            bf_net_timer_start(&l->bufs_timer, BF_LOOP_BUFS_IDLE_NS, 0);
        }
    }
    handled += run_timers(l);
    flush_dirty(l);
    return handled;
}

int bf_net_loop_run(struct bf_net_loop *l)
{
    l->stop = false;
    while (!l->stop) {
        int r = bf_net_loop_run_once(l, -1);
        if (r < 0)
            return r;
    }
    l->stop = false;
    return 0;
}

const char *bf_net_code_name(int code)
{
    static const char *names[BF_NET_CODE_COUNT] = {
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    };
    if (code < 0 || code >= BF_NET_CODE_COUNT)
        return "UNKNOWN";
    return names[code];
}

int bf_net_tls_config_check(const struct bf_net_tls_config *tls)
{
    int n = (tls->cert_file && *tls->cert_file) + (tls->key_file && *tls->key_file) +
            (tls->ca_file && *tls->ca_file);
    if (n == 0)
        return 0;
    if (n == 3)
        return 1;
    return -EINVAL;
}
