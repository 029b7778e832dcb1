/*
 * test_seccomp.c — the --seccomp allow-lists (src/supervisor/seccomp.c): each
 * role keeps what it needs (the session and the executor run an io_uring
 * loop and threads) and loses the rest (the cycle cannot open a socket; no
 * role can fork or exec). Every case runs in a forked child, which sets
 * no_new_privs and loads the filter; a refused call kills it with SIGSYS.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bigfleet/net.h"
#include "bigfleet/process.h"
#include "bigfleet/shm_layout.h"
#include "check_run.h"

enum action { DO_SOCKET, DO_IO_URING, DO_THREAD, DO_FORK, DO_EXEC };

static void *thread_fn(void *arg)
{
    return arg;
}

/* Runs `what` under role's filter in a child: its wait status. */
static int run_confined(int role, enum action what)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char err[256];
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
            bf_seccomp_install(role, err, sizeof err))
            _exit(100);
        switch (what) {
        case DO_SOCKET: {
            int fd = socket(AF_INET, SOCK_STREAM, 0);
            _exit(fd >= 0 ? 0 : 1);
        }
        case DO_IO_URING: {
            struct bf_net_loop *loop;
            if (bf_net_loop_new(NULL, &loop) != 0)
                _exit(1);
            bf_net_loop_free(loop);
            _exit(0);
        }
        case DO_THREAD: {
            pthread_t t;
            if (pthread_create(&t, NULL, thread_fn, NULL) != 0)
                _exit(1);
            pthread_join(t, NULL);
            _exit(0);
        }
        case DO_FORK: {
            pid_t p = fork();
            if (p == 0)
                _exit(0);
            _exit(2); /* fork returned in the parent: not refused */
        }
        case DO_EXEC:
            execl("/bin/true", "true", (char *)NULL);
            _exit(2);
        }
        _exit(3);
    }
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    return st;
}

static bool exited_ok(int st)
{
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static bool killed_by_seccomp(int st)
{
    return WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS;
}

START_TEST(network_roles_keep_io_uring_sockets_and_threads)
{
    const int roles[] = {BF_ROLE_SESSION, BF_ROLE_RECONCILER, BF_ROLE_EXECUTOR};
    for (size_t i = 0; i < 3; i++) {
        int st = run_confined(roles[i], DO_IO_URING);
        ck_assert_msg(exited_ok(st), "role %d: io_uring loop (status %d)", roles[i], st);
        st = run_confined(roles[i], DO_SOCKET);
        ck_assert_msg(exited_ok(st), "role %d: socket (status %d)", roles[i], st);
        st = run_confined(roles[i], DO_THREAD);
        ck_assert_msg(exited_ok(st), "role %d: thread (status %d)", roles[i], st);
    }
}
END_TEST

START_TEST(the_cycle_has_no_network_no_io_uring_and_no_threads)
{
    ck_assert(killed_by_seccomp(run_confined(BF_ROLE_CYCLE, DO_SOCKET)));
    ck_assert(killed_by_seccomp(run_confined(BF_ROLE_CYCLE, DO_IO_URING)));
    ck_assert(killed_by_seccomp(run_confined(BF_ROLE_CYCLE, DO_THREAD)));
}
END_TEST

START_TEST(no_role_can_fork_or_exec)
{
    const int roles[] = {BF_ROLE_SESSION, BF_ROLE_RECONCILER, BF_ROLE_CYCLE, BF_ROLE_EXECUTOR};
    for (size_t i = 0; i < 4; i++) {
        int st = run_confined(roles[i], DO_FORK);
        ck_assert_msg(killed_by_seccomp(st), "role %d: fork (status %d)", roles[i], st);
        st = run_confined(roles[i], DO_EXEC);
        ck_assert_msg(killed_by_seccomp(st), "role %d: exec (status %d)", roles[i], st);
    }
}
END_TEST

START_TEST(a_role_without_a_list_is_refused)
{
    char err[256] = "";
    ck_assert_int_eq(bf_seccomp_install(BF_ROLE_SUPERVISOR, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "no allow-list"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("seccomp");
    TCase *tc = tcase_create("allow-lists");
    tcase_add_test(tc, network_roles_keep_io_uring_sockets_and_threads);
    tcase_add_test(tc, the_cycle_has_no_network_no_io_uring_and_no_threads);
    tcase_add_test(tc, no_role_can_fork_or_exec);
    tcase_add_test(tc, a_role_without_a_list_is_refused);
    suite_add_tcase(s, tc);
    return check_run(s);
}
