/*
 * bench_common.h — what several benchmarks share (header-only: each bench is
 * one binary): the median of repeated runs (docs/DEVELOPING.md: medians of
 * >= 3 repetitions on a shared machine) and where the openb machine list is.
 */
#ifndef BF_BENCH_COMMON_H
#define BF_BENCH_COMMON_H

#include <stdlib.h>

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

#endif /* BF_BENCH_COMMON_H */
