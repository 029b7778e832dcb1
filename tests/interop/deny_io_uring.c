/*
 * deny_io_uring.c — test helper: runs a command with io_uring_setup refused
 * (EPERM), as the default seccomp profiles of container runtimes do; the
 * filter is inherited by every process the command starts.
 *
 *   deny_io_uring PROGRAM [ARGS...]
 */
#include <errno.h>
#include <seccomp.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: deny_io_uring PROGRAM [ARGS...]\n");
        return 2;
    }
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx || seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(io_uring_setup), 0) < 0 ||
        prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || seccomp_load(ctx) < 0) {
        fprintf(stderr, "deny_io_uring: cannot install the filter\n");
        return 2;
    }
    seccomp_release(ctx);
    execv(argv[1], argv + 1);
    fprintf(stderr, "deny_io_uring: exec %s: %s\n", argv[1], strerror(errno));
    return 127;
}
