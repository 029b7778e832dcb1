/*
 * test_net_loop.c — the io_uring loop (src/net/loop.c): timer order,
 * periodic timers, stop/free (also from inside callbacks), eventfd watches
 * (counter read and reset), fd watches, deferred calls, stop_async, and the
 * wait being bounded by the next timer.
 * Rings are created inside each test (check forks per test).
 *
 * Timing: a test waits for the event it expects with run_until, a bounded
 * wait (WAIT_MAX_NS), never for a fixed time after which the event must have
 * happened: on a loaded machine the process can be descheduled for tens of
 * milliseconds at any point. Lower bounds ("never early") hold on any
 * machine and are asserted exactly; "nothing else happens" is checked over a
 * quiet period after the expected event.
 */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "bigfleet/net.h"
#include "bigfleet/util.h"
#include "check_run.h"

/* the bound of every wait for an expected event (far above any real delay) */
#define WAIT_MAX_NS (5 * BF_NS_PER_SEC)

/* Runs the loop for ns (at least one iteration, even if the process was
 * descheduled past the deadline). */
static void run_for(struct bf_net_loop *l, int64_t ns)
{
    int64_t until = bf_mono_ns() + ns;
    do
        bf_net_loop_run_once(l, until - bf_mono_ns() > 0 ? until - bf_mono_ns() : 0);
    while (bf_mono_ns() < until);
}

/* Runs the loop until *v >= want or WAIT_MAX_NS passed; returns *v. */
static int run_until(struct bf_net_loop *l, const int *v, int want)
{
    int64_t until = bf_mono_ns() + WAIT_MAX_NS;
    while (*v < want && bf_mono_ns() < until)
        bf_net_loop_run_once(l, 10 * BF_NS_PER_MS);
    return *v;
}

struct order {
    int seq[16];
    int n;
    int64_t at[16];
};
struct tag {
    struct order *o;
    int id;
};

static void record(struct bf_net_timer *t, void *arg)
{
    (void)t;
    struct tag *tg = arg;
    tg->o->at[tg->o->n] = bf_mono_ns();
    tg->o->seq[tg->o->n++] = tg->id;
}

START_TEST(timers_fire_in_expiry_order_not_start_order)
{
    struct bf_net_loop *l;
    ck_assert_int_eq(bf_net_loop_new(NULL, &l), 0);
    struct order o = {0};
    struct tag tags[5];
    struct bf_net_timer *t[5];
    int64_t delays_ms[5] = {50, 10, 30, 20, 40};
    int64_t t0 = bf_mono_ns();
    for (int i = 0; i < 5; i++) {
        tags[i] = (struct tag){&o, i};
        t[i] = bf_net_timer_new(l, record, &tags[i]);
        bf_net_timer_start(t[i], delays_ms[i] * BF_NS_PER_MS, 0);
    }
    ck_assert_int_eq(run_until(l, &o.n, 5), 5);
    int want[5] = {1, 3, 2, 4, 0};
    for (int i = 0; i < 5; i++) {
        ck_assert_int_eq(o.seq[i], want[i]);
        /* never early */
        ck_assert(o.at[i] - t0 >= delays_ms[want[i]] * BF_NS_PER_MS);
    }
    for (int i = 0; i < 5; i++) {
        ck_assert(!bf_net_timer_active(t[i]));
        bf_net_timer_free(t[i]);
    }
    bf_net_loop_free(l);
}
END_TEST

START_TEST(stopped_and_restarted_timers_obey_the_last_start)
{
    struct bf_net_loop *l;
    ck_assert_int_eq(bf_net_loop_new(NULL, &l), 0);
    struct order o = {0};
    struct tag a = {&o, 1}, b = {&o, 2};
    struct bf_net_timer *ta = bf_net_timer_new(l, record, &a);
    struct bf_net_timer *tb = bf_net_timer_new(l, record, &b);
    bf_net_timer_start(ta, 10 * BF_NS_PER_MS, 0);
    bf_net_timer_start(tb, 20 * BF_NS_PER_MS, 0);
    bf_net_timer_stop(ta); /* a never fires */
    int64_t t0 = bf_mono_ns();
    bf_net_timer_start(tb, 40 * BF_NS_PER_MS, 0); /* b moves later */
    ck_assert_int_eq(run_until(l, &o.n, 1), 1);
    /* b first, and only b: a (due before b) would have run before it */
    ck_assert_int_eq(o.seq[0], 2);
    /* by its last start: not at the 20 ms of the first one */
    ck_assert(o.at[0] - t0 >= 40 * BF_NS_PER_MS);
    run_for(l, 30 * BF_NS_PER_MS);
    ck_assert_int_eq(o.n, 1); /* one-shot: b does not fire again, a never */
    bf_net_timer_free(ta);
    bf_net_timer_free(tb);
    bf_net_loop_free(l);
}
END_TEST

struct periodic {
    int fired;
    int stop_at;
    struct bf_net_timer *t;
};

static void periodic_cb(struct bf_net_timer *t, void *arg)
{
    struct periodic *p = arg;
    if (++p->fired == p->stop_at) {
        bf_net_timer_free(t); /* free from inside its own callback */
        p->t = NULL;
    }
}

START_TEST(periodic_timer_repeats_and_can_free_itself_in_its_callback)
{
    struct bf_net_loop *l;
    ck_assert_int_eq(bf_net_loop_new(NULL, &l), 0);
    struct periodic p = {.stop_at = 4};
    p.t = bf_net_timer_new(l, periodic_cb, &p);
    bf_net_timer_start(p.t, 5 * BF_NS_PER_MS, 10 * BF_NS_PER_MS);
    ck_assert_int_eq(run_until(l, &p.fired, 4), 4);
    ck_assert_ptr_null(p.t);
    run_for(l, 50 * BF_NS_PER_MS); /* five more periods: freed, it stays quiet */
    ck_assert_int_eq(p.fired, 4);
    bf_net_loop_free(l);
}
END_TEST

struct efd_state {
    uint64_t total;
    int calls;
};

static void on_eventfd(struct bf_net_watch *w, uint64_t count, void *arg)
{
    (void)w;
    struct efd_state *s = arg;
    s->total += count;
    s->calls++;
}

START_TEST(eventfd_watch_reads_and_resets_the_counter)
{
    struct bf_net_loop *l;
    ck_assert_int_eq(bf_net_loop_new(NULL, &l), 0);
    int efd = eventfd(0, EFD_CLOEXEC); /* blocking on purpose: the watch makes it non-blocking */
    struct efd_state s = {0};
    struct bf_net_watch *w;
    ck_assert_int_eq(bf_net_watch_eventfd(l, efd, on_eventfd, &s, &w), 0);
    run_for(l, 5 * BF_NS_PER_MS);
    ck_assert_int_eq(s.calls, 0);
    uint64_t v = 3;
    ck_assert_int_eq(write(efd, &v, 8), 8);
    v = 4;
    ck_assert_int_eq(write(efd, &v, 8), 8);
    ck_assert_int_eq(run_until(l, &s.calls, 1), 1);
    ck_assert_uint_eq(s.total, 7);
    run_for(l, 10 * BF_NS_PER_MS);
    ck_assert_int_eq(s.calls, 1); /* both writes coalesced into one read */
    v = 1;
    ck_assert_int_eq(write(efd, &v, 8), 8);
    ck_assert_int_eq(run_until(l, &s.calls, 2), 2);
    ck_assert_uint_eq(s.total, 8);
    ck_assert_int_eq(s.calls, 2);
    /* after free: no more callbacks */
    bf_net_watch_free(w);
    ck_assert_int_eq(write(efd, &v, 8), 8);
    run_for(l, 10 * BF_NS_PER_MS);
    ck_assert_int_eq(s.calls, 2);
    close(efd);
    bf_net_loop_free(l);
}
END_TEST

START_TEST(eventfd_watch_rejects_bad_fds)
{
    struct bf_net_loop *l;
    ck_assert_int_eq(bf_net_loop_new(NULL, &l), 0);
    struct efd_state s = {0};
    struct bf_net_watch *w;
    ck_assert_int_eq(bf_net_watch_eventfd(l, -1, on_eventfd, &s, &w), -EBADF);
    ck_assert_int_eq(bf_net_watch_eventfd(l, 12345, on_eventfd, &s, &w), -EBADF);
    bf_net_loop_free(l);
}
END_TEST

struct pipe_state {
    int fd;
    int reads;
    char last;
};

static void on_pipe(struct bf_net_watch *w, int fd, unsigned revents, void *arg)
{
    (void)w;
    struct pipe_state *s = arg;
    ck_assert(revents & POLLIN);
    char c;
    if (read(fd, &c, 1) == 1) {
        s->reads++;
        s->last = c;
    }
}

START_TEST(fd_watch_is_level_triggered)
{
    struct bf_net_loop *l;
    ck_assert_int_eq(bf_net_loop_new(NULL, &l), 0);
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    struct pipe_state s = {.fd = p[0]};
    struct bf_net_watch *w;
    ck_assert_int_eq(bf_net_watch_fd(l, p[0], POLLIN, on_pipe, &s, &w), 0);
    ck_assert_int_eq(write(p[1], "abc", 3), 3);
    /* one byte per callback; the callback keeps coming while data remains */
    ck_assert_int_eq(run_until(l, &s.reads, 3), 3);
    run_for(l, 10 * BF_NS_PER_MS);
    ck_assert_int_eq(s.reads, 3);
    ck_assert_int_eq(s.last, 'c');
    bf_net_watch_free(w);
    close(p[0]);
    close(p[1]);
    bf_net_loop_free(l);
}
END_TEST

static void deferred(void *arg)
{
    (*(int *)arg)++;
}

static void defer_again(void *arg)
{
    int *n = arg;
    (*n)++;
}

struct reenter {
    struct bf_net_loop *l;
    int n;
};
static void defer_chain(void *arg)
{
    struct reenter *r = arg;
    r->n++;
    if (r->n < 3)
        bf_net_loop_defer(r->l, defer_chain, r);
}

START_TEST(deferred_calls_run_next_iteration_and_chains_make_progress)
{
    struct bf_net_loop *l;
    ck_assert_int_eq(bf_net_loop_new(NULL, &l), 0);
    int n = 0;
    ck_assert_int_eq(bf_net_loop_defer(l, deferred, &n), 0);
    ck_assert_int_eq(bf_net_loop_defer(l, defer_again, &n), 0);
    ck_assert_int_eq(n, 0); /* not from inside the call */
    bf_net_loop_run_once(l, 0);
    ck_assert_int_eq(n, 2);
    struct reenter r = {l, 0};
    bf_net_loop_defer(l, defer_chain, &r);
    for (int i = 0; i < 5; i++)
        bf_net_loop_run_once(l, 0);
    ck_assert_int_eq(r.n, 3);
    bf_net_loop_free(l);
}
END_TEST

static struct bf_net_loop *g_sig_loop;
static void on_alarm(int sig)
{
    (void)sig;
    bf_net_loop_stop_async(g_sig_loop);
}

START_TEST(stop_async_from_a_signal_handler_ends_run)
{
    struct bf_net_loop *l;
    ck_assert_int_eq(bf_net_loop_new(NULL, &l), 0);
    g_sig_loop = l;
    struct sigaction sa = {.sa_handler = on_alarm};
    sigaction(SIGALRM, &sa, NULL);
    ualarm(50000, 0);
    int64_t t0 = bf_mono_ns();
    ck_assert_int_eq(bf_net_loop_run(l), 0);
    int64_t took = bf_mono_ns() - t0;
    ck_assert(took >= 40 * BF_NS_PER_MS);
    ck_assert(took < 2 * BF_NS_PER_SEC);
    bf_net_loop_free(l);
}
END_TEST

static void stop_cb(struct bf_net_timer *t, void *arg)
{
    (void)t;
    bf_net_loop_stop(arg);
}

START_TEST(run_once_wait_is_bounded_by_the_next_timer)
{
    struct bf_net_loop *l;
    ck_assert_int_eq(bf_net_loop_new(NULL, &l), 0);
    struct bf_net_timer *t = bf_net_timer_new(l, stop_cb, l);
    bf_net_timer_start(t, 30 * BF_NS_PER_MS, 0);
    int64_t t0 = bf_mono_ns();
    /* asks to wait forever: the timer must cut the wait short */
    ck_assert_int_eq(bf_net_loop_run(l), 0);
    int64_t took = bf_mono_ns() - t0;
    /* never early; and it ends (without the timer it would wait forever) */
    ck_assert(took >= 30 * BF_NS_PER_MS && took < WAIT_MAX_NS);
    bf_net_timer_free(t);
    bf_net_loop_free(l);
}
END_TEST

START_TEST(loop_options_are_validated)
{
    struct bf_net_loop *l;
    struct bf_net_loop_opts o = {.recv_buffers = 100}; /* not a power of two */
    ck_assert_int_eq(bf_net_loop_new(&o, &l), -EINVAL);
    o = (struct bf_net_loop_opts){.recv_buffers = 64, .recv_buffer_size = 4096, .sq_entries = 64};
    ck_assert_int_eq(bf_net_loop_new(&o, &l), 0);
    bf_net_loop_free(l);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("net_loop");
    TCase *tc = tcase_create("loop");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, timers_fire_in_expiry_order_not_start_order);
    tcase_add_test(tc, stopped_and_restarted_timers_obey_the_last_start);
    tcase_add_test(tc, periodic_timer_repeats_and_can_free_itself_in_its_callback);
    tcase_add_test(tc, eventfd_watch_reads_and_resets_the_counter);
    tcase_add_test(tc, eventfd_watch_rejects_bad_fds);
    tcase_add_test(tc, fd_watch_is_level_triggered);
    tcase_add_test(tc, deferred_calls_run_next_iteration_and_chains_make_progress);
    tcase_add_test(tc, stop_async_from_a_signal_handler_ends_run);
    tcase_add_test(tc, run_once_wait_is_bounded_by_the_next_timer);
    tcase_add_test(tc, loop_options_are_validated);
    suite_add_tcase(s, tc);
    return check_run(s);
}
