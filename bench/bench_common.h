/*
 * bench_common.h — what several benchmarks share (header-only: each bench is
 * one binary): the median of repeated runs (docs/DEVELOPING.md: medians of
 * >= 3 repetitions on a shared machine), where the openb machine list is,
 * and another process's CPU time.
 */
#ifndef BF_BENCH_COMMON_H
#define BF_BENCH_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of v[0..n) (the upper one when n is even); sorts v in place. */
static inline double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return v[n / 2];
}

/* The openb node list: argv[1], else $BF_OPENB_CSV, else the shared copy
 * relative to the repository root. */
static inline const char *bench_openb_csv(int argc, char **argv)
{
    if (argc > 1)
        return argv[1];
    const char *e = getenv("BF_OPENB_CSV");
    if (e && *e)
        return e;
    return "../shared/data/openb/openb_node_list_all_node.csv";
}

/* user + system CPU seconds of process pid, from /proc/<pid>/stat (clock
 * ticks: 10 ms resolution; sum many passes before dividing); 0 when the
 * file cannot be read or parsed */
static inline double bench_proc_cpu_s(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    /* fields after ")": state(3) ... utime(14) stime(15) */
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return 0;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

#endif /* BF_BENCH_COMMON_H */
