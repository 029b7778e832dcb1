/*
 * bench_stats.h — the figures the benchmarks report from repeated runs
 * (docs/DEVELOPING.md: medians of >= 3 repetitions on a shared machine).
 */
#ifndef BF_BENCH_STATS_H
#define BF_BENCH_STATS_H

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

#endif /* BF_BENCH_STATS_H */
