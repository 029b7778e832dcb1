/*
 * probe.c — fail fast when io_uring is unavailable (docs/operating.md
 * "Kernel and container requirements").
 *
 * Every child runs an io_uring event loop; a refusal used to make the
 * session exit and be restarted forever. The supervisor now creates and
 * frees one loop (bf_net_loop_new: the ring, its flags and the provided
 * buffer ring, exactly the children's set-up) in a forked process carrying
 * the children's credentials — kernel.io_uring_disabled=1 refuses
 * unprivileged users only, so probing as root would not tell — and reports
 * the errno through the exit status; with --seccomp it loads the session's
 * allow-list first, so a filter that refused io_uring would show here. The
 * wait is bounded (5 s).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bigfleet/net.h"
#include "bigfleet/process.h"
#include "bigfleet/util.h"
#include "supervisor.h"

#define PROBE_TIMEOUT_NS (5LL * BF_NS_PER_SEC)

static int read_sysctl(const char *path)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    int v = -1;
    if (fscanf(f, "%d", &v) != 1)
        v = -1;
    fclose(f);
    return v;
}

int bf_probe_io_uring(const struct bf_priv *p, bool seccomp, char *err, size_t errlen)
{
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "io_uring probe: fork: %s", strerror(errno));
        return -errno;
    }
    if (pid == 0) {
        if (bf_priv_drop(p) != 0)
            _exit(125);
        char e2[256];
        if (seccomp && bf_seccomp_install(BF_ROLE_SESSION, e2, sizeof e2) != 0)
            _exit(124);
        struct bf_net_loop *loop;
        int rc = bf_net_loop_new(NULL, &loop);
        if (rc == 0)
            bf_net_loop_free(loop);
        _exit(rc == 0 ? 0 : (-rc > 0 && -rc < 120 ? -rc : 120));
    }
    int st = 0;
    int64_t deadline = bf_mono_ns() + PROBE_TIMEOUT_NS;
    pid_t w;
    while ((w = waitpid(pid, &st, WNOHANG)) == 0 && bf_mono_ns() < deadline)
        usleep(5000);
    if (w == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        snprintf(err, errlen, "io_uring probe did not finish within 5 s");
        return -ETIMEDOUT;
    }
    if (WIFSIGNALED(st)) {
        snprintf(err, errlen,
                 "io_uring probe killed by signal %d (a seccomp filter that kills on "
                 "io_uring_setup?)",
                 WTERMSIG(st));
        return -EPERM;
    }
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 120;
    if (code == 0)
        return 0;
    if (code == 124) {
        snprintf(err, errlen, "io_uring probe: cannot load the --seccomp allow-list");
        return -EPERM;
    }
    if (code == 125) {
        snprintf(err, errlen, "io_uring probe: cannot switch to the children's account %s",
                 p->name);
        return -EPERM;
    }
    int disabled = read_sysctl("/proc/sys/kernel/io_uring_disabled");
    const char *why = "";
    if (code == EPERM || code == EACCES) {
        if (disabled == 2)
            why = "kernel.io_uring_disabled=2 disables io_uring for everyone";
        else if (disabled == 1)
            why = "kernel.io_uring_disabled=1 allows io_uring only to root and members of "
                  "kernel.io_uring_group: add the account to that group or set it to 0";
        else
            why = "a seccomp filter (container runtime default profile, systemd "
                  "SystemCallFilter=) or an LSM refuses io_uring_setup";
    } else if (code == ENOSYS) {
        why = "the kernel has no io_uring (CONFIG_IO_URING off, or older than 5.19 for the "
              "features used) or a seccomp filter answers ENOSYS";
    } else if (code == ENOMEM) {
        why = "RLIMIT_MEMLOCK too low for the ring (kernels before 5.12), or out of memory";
    } else if (code == EINVAL) {
        why = "the kernel lacks a feature the loop needs (provided buffer rings: 5.19+)";
    }
    snprintf(err, errlen, "io_uring unavailable to account %s: %s%s%s", p->name, strerror(code),
             why[0] ? ": " : "", why);
    return -code;
}
