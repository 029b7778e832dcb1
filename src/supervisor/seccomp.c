/*
 * seccomp.c — the per-role system-call allow-lists of --seccomp (libseccomp;
 * docs/operating.md "Least privilege").
 *
 * Installed by bf_child_start() once the child is set up (segments attached,
 * handlers installed), so the lists cover what the role does from then on.
 * Anything else kills the process (SECCOMP_RET_KILL_PROCESS; the kernel's
 * audit log names the call): the supervisor reports the child "killed
 * signal=31" and the crash-loop rules apply. The lists were taken from
 * strace of every role through the integration and interop suites
 * (operator sessions, TLS, coordinator, reload, audit-log reopen, health,
 * reflection), plus what glibc, jemalloc, LMDB and wolfSSL may call on
 * other paths of the same functions.
 *
 * What every role may do: memory (mmap, mprotect, madvise, brk, mremap),
 * files already named by the configuration (openat, read, write, pread64,
 * pwrite64, fstat, lseek, fsync, fdatasync, msync, flock and fcntl locks
 * for LMDB), time, signals, futexes, eventfds and poll, getrandom, exit.
 * Nobody may execve, fork a process, ptrace, mount, load modules, change
 * credentials, chown or create device nodes.
 *   cycle        nothing more: no sockets, no io_uring, no threads (it decides
 *                from shared memory and wakes others through eventfds)
 *   reconciler,  + io_uring (setup, enter, register), threads (the resolver's
 *   executor       helper thread: clone with CLONE_THREAD only, so no fork;
 *                  clone3 answers ENOSYS), sockets as a client: socket, connect,
 *                  setsockopt, getsockopt, getsockname, getpeername, shutdown,
 *                  sendto/recvfrom/sendmsg/recvmsg/sendmmsg (DNS)
 *   session      + the above, bind and listen (only used when it runs without
 *                  an inherited socket)
 * io_uring operations themselves (accept, recv, send, connect, ...) are not
 * system calls and are not filtered: the allow-list bounds what a subverted
 * process can do outside its event loop, not inside it.
 */
#include <errno.h>
#include <sched.h>
#include <seccomp.h>
#include <stdio.h>
#include <string.h>

#include "bigfleet/process.h"
#include "bigfleet/shm_layout.h"

static const char *const base[] = {
    /* memory */
    "brk",
    "mmap",
    "munmap",
    "mprotect",
    "madvise",
    "mremap",
    "msync",
    "mlock",
    "munlock",
    /* files and descriptors */
    "read",
    "write",
    "readv",
    "writev",
    "pread64",
    "pwrite64",
    "preadv",
    "pwritev",
    "openat",
    "open",
    "close",
    "lseek",
    "fstat",
    "newfstatat",
    "statx",
    "stat",
    "lstat",
    "fstatfs",
    "statfs",
    "fcntl",
    "dup",
    "dup2",
    "dup3",
    "fsync",
    "fdatasync",
    "ftruncate",
    "fallocate",
    "flock",
    "readlink",
    "readlinkat",
    "access",
    "faccessat",
    "faccessat2",
    "getdents64",
    "pipe2",
    "ioctl",
    /* waiting and time */
    "poll",
    "ppoll",
    "eventfd2",
    "futex",
    "futex_waitv",
    "nanosleep",
    "clock_nanosleep",
    "clock_gettime",
    "clock_getres",
    "gettimeofday",
    "time",
    "sched_yield",
    "sched_getaffinity",
    "restart_syscall",
    /* signals and exit */
    "rt_sigaction",
    "rt_sigprocmask",
    "rt_sigreturn",
    "rt_sigtimedwait",
    "sigaltstack",
    "tgkill",
    "tkill",
    "exit",
    "exit_group",
    /* identity and process facts (read only) */
    "getpid",
    "gettid",
    "getppid",
    "getuid",
    "geteuid",
    "getgid",
    "getegid",
    "getgroups",
    "getrlimit",
    "prlimit64",
    "setrlimit",
    "getrusage",
    "uname",
    "sysinfo",
    "prctl",
    "arch_prctl",
    "set_robust_list",
    "get_robust_list",
    "rseq",
    "set_tid_address",
    "getrandom",
    "membarrier",
    "getcpu",
};

static const char *const net_client[] = {
    "io_uring_setup", "io_uring_enter", "io_uring_register", "socket",   "connect", "setsockopt",
    "getsockopt",     "getsockname",    "getpeername",       "shutdown", "sendto",  "recvfrom",
    "sendmsg",        "recvmsg",        "sendmmsg",          "recvmmsg", "accept4", "epoll_create1",
    "epoll_ctl",      "epoll_wait",     "epoll_pwait",
};

static const char *const net_server[] = {"bind", "listen"};

static int allow(scmp_filter_ctx ctx, const char *const *names, size_t n, char *err, size_t errlen)
{
    for (size_t i = 0; i < n; i++) {
        int nr = seccomp_syscall_resolve_name(names[i]);
        if (nr == __NR_SCMP_ERROR)
            continue; /* not on this architecture (e.g. open on arm64) */
        int rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0);
        if (rc < 0) {
            snprintf(err, errlen, "seccomp: cannot allow %s: %s", names[i], strerror(-rc));
            return rc;
        }
    }
    return 0;
}

#define ALLOW(list) allow(ctx, list, sizeof list / sizeof list[0], err, errlen)

/* Threads, not processes: clone only with CLONE_THREAD; clone3 (whose flags
 * sit in a struct the filter cannot read) answers ENOSYS, and glibc falls
 * back to clone. fork() and posix_spawn() therefore kill the process. */
static int allow_threads(scmp_filter_ctx ctx, char *err, size_t errlen)
{
    int rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1,
                              SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, CLONE_THREAD));
    if (!rc)
        rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
    if (rc < 0)
        snprintf(err, errlen, "seccomp: cannot allow threads: %s", strerror(-rc));
    return rc;
}

int bf_seccomp_install(int role, char *err, size_t errlen)
{
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_KILL_PROCESS);
    if (!ctx) {
        snprintf(err, errlen, "seccomp: cannot create a filter");
        return -ENOMEM;
    }
    /* log what gets killed (the kernel audit log names the call) */
    seccomp_attr_set(ctx, SCMP_FLTATR_CTL_LOG, 1);
    int rc = ALLOW(base);
    switch (role) {
    case BF_ROLE_CYCLE:
        break;
    case BF_ROLE_SESSION:
        if (!rc)
            rc = ALLOW(net_server);
        /* fall through */
    case BF_ROLE_RECONCILER:
    case BF_ROLE_EXECUTOR:
        if (!rc)
            rc = allow_threads(ctx, err, errlen);
        if (!rc)
            rc = ALLOW(net_client);
        break;
    default:
        snprintf(err, errlen, "seccomp: no allow-list for role %d", role);
        rc = -EINVAL;
    }
    if (!rc) {
        rc = seccomp_load(ctx);
        if (rc < 0)
            snprintf(err, errlen, "seccomp: cannot load the filter: %s", strerror(-rc));
    }
    seccomp_release(ctx);
    return rc < 0 ? rc : 0;
}
