/*
 * usage.c — resource use of the appliance's processes, sampled by the
 * supervisor from /proc about once a second (bigfleet_appliance_process_
 * cpu_seconds_total, _resident_memory_bytes, _open_fds).
 *
 * /proc/<pid>/stat fields 14-15 (utime, stime, clock ticks) and 24 (rss,
 * pages); open fds are the entries of /proc/<pid>/fd. The supervisor may
 * read another account's /proc entries as root; when it runs as the
 * children's account they are its own. A read that fails (the child just
 * died) leaves the previous sample.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "supervisor.h"

int bf_usage_sample(pid_t pid, struct bf_proc_usage *u)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return -errno;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    /* the command name (field 2) may hold spaces and parentheses: skip to the last ')' */
    char *p = strrchr(buf, ')');
    if (!p)
        return -EPROTO;
    p++;
    unsigned long long utime = 0, stime = 0;
    long long rss = 0;
    /* fields 3.. after the name: state(3) ... utime(14) stime(15) ... rss(24) */
    int field = 2;
    for (char *tok = strtok(p, " "); tok; tok = strtok(NULL, " ")) {
        field++;
        if (field == 14)
            utime = strtoull(tok, NULL, 10);
        else if (field == 15)
            stime = strtoull(tok, NULL, 10);
        else if (field == 24) {
            rss = strtoll(tok, NULL, 10);
            break;
        }
    }
    if (field < 24)
        return -EPROTO;
    long hz = sysconf(_SC_CLK_TCK);
    long page = sysconf(_SC_PAGESIZE);
    if (hz <= 0)
        hz = 100;
    if (page <= 0)
        page = 4096;
    BF_STAT_SET(u->cpu_ns, (utime + stime) * (1000000000ULL / (unsigned long long)hz));
    BF_STAT_SET(u->rss_bytes, (uint64_t)(rss > 0 ? rss : 0) * (uint64_t)page);
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (d) {
        uint32_t fds = 0;
        struct dirent *de;
        while ((de = readdir(d)))
            if (de->d_name[0] != '.')
                fds++;
        closedir(d);
        /* our own listing holds one fd of ours while it reads */
        if (pid == getpid() && fds > 0)
            fds--;
        BF_STAT_SET(u->open_fds, fds);
    }
    return 0;
}
