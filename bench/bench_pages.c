/*
 * bench_pages.c — does this host stall memory held in transparent huge pages?
 * The check behind the cycle process's --transparent-huge-pages (default
 * false; docs/operating.md "Huge pages", docs/performance.md "Huge pages and
 * the 512 ms stall (target 1; lead, stop 30)").
 *
 * One region (default 256 MiB) is mapped twice in turn: advised
 * MADV_NOHUGEPAGE (4 KiB pages) and MADV_HUGEPAGE (transparent huge pages).
 * Each is filled, then read-modify-written at pseudo-random 8-byte words in
 * chunks of 20,000 accesses for a few seconds; every chunk's thread CPU time
 * is kept. A "stall" is a chunk costing more than 3x the median chunk. On the
 * project's VM (Firecracker under PVM: shadow page tables) the THP region has one stall every 512
 * ms (10-15x the median), the 4 KiB region none: that is what made 1-2 of every 100 cycles at 500K
 * machines cost 15-60 ms.
 *
 * Three rounds, each measuring both regions, in alternating order (4 KiB
 * first, then THP first, ...); the figures are the medians of the rounds,
 * printed with the load average before and after.
 *
 * Usage: bench_pages [MiB [seconds]] (default 256 MiB and 2 s per region per
 * round). Prints a table and writes results/bench_pages.json. Not a
 * pass/fail check: read the figures, on a quiet host (under load both regions
 * show stalls: other processes' cache and memory traffic; on this 2-core VM
 * at load ~7, 14-23 of each in 6 s), so the comparison line is printed only
 * when the 1-minute load average stayed below 1.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>

#include "bench_common.h"

#define CHUNK  20000
#define HUGE2M ((size_t)2 << 20)

struct run {
    const char *name;
    size_t chunks, stalls;
    double median_us, p99_us, max_us;
    double period_ms;      /* median wall time between stalls; 0 with < 2 */
    double stall_ms_per_s; /* CPU above the median spent in stalls, per second */
    double thp_mib;        /* AnonHugePages of the region (smaps) */
};

static double cpu_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static double wall_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* AnonHugePages (MiB) of the mapping starting at p, from /proc/self/smaps. */
static double thp_mib_of(const void *p)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    char line[512];
    int inside = 0;
    double kb = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
            continue;
        }
        if (inside && sscanf(line, "AnonHugePages: %lf kB", &kb) == 1)
            break;
    }
    fclose(f);
    return kb < 0 ? -1 : kb / 1024;
}

static int measure(struct run *r, size_t bytes, double seconds, int advice, uint64_t *sink)
{
    uint8_t *raw =
        mmap(NULL, bytes + HUGE2M, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return -errno;
    uint64_t *a = (uint64_t *)(void *)(((uintptr_t)raw + HUGE2M - 1) & ~(uintptr_t)(HUGE2M - 1));
    (void)madvise(a, bytes, advice); /* a hint: EINVAL without THP */
    size_t m = bytes / sizeof *a;
    for (size_t i = 0; i < m; i++)
        a[i] = i * 2654435761u;
    r->thp_mib = thp_mib_of(a);
    size_t cap = (size_t)(seconds * 2e4) + 1024, n = 0; /* chunks take >= 50 us */
    double *cost = malloc(cap * sizeof *cost), *at = malloc(cap * sizeof *at);
    if (!cost || !at) {
        free(cost);
        free(at);
        munmap(raw, bytes + HUGE2M);
        return -ENOMEM;
    }
    uint64_t x = 88172645463325252ull, s = *sink;
    double t0 = wall_ms();
    while (n < cap && wall_ms() - t0 < seconds * 1e3) {
        double c = cpu_us();
        for (int j = 0; j < CHUNK; j++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            size_t q = (size_t)(x % m);
            s += a[q];
            a[q] = s;
        }
        cost[n] = cpu_us() - c;
        at[n++] = wall_ms() - t0;
    }
    *sink = s;
    double *sorted = malloc(n * sizeof *sorted);
    if (!sorted) {
        free(cost);
        free(at);
        munmap(raw, bytes + HUGE2M);
        return -ENOMEM;
    }
    memcpy(sorted, cost, n * sizeof *sorted);
    r->median_us = bench_median(sorted, (int)n); /* sorts */
    r->p99_us = sorted[n * 99 / 100];
    r->max_us = sorted[n - 1];
    r->chunks = n;
    r->stalls = 0;
    double extra = 0, last = -1, *gaps = sorted; /* reused: the stalls' gaps */
    size_t ngaps = 0;
    for (size_t i = 0; i < n; i++) {
        if (cost[i] <= 3 * r->median_us)
            continue;
        r->stalls++;
        extra += cost[i] - r->median_us;
        if (last >= 0)
            gaps[ngaps++] = at[i] - last;
        last = at[i];
    }
    r->period_ms = ngaps ? bench_median(gaps, (int)ngaps) : 0;
    r->stall_ms_per_s = extra / 1e3 / (at[n - 1] / 1e3);
    free(sorted);
    free(cost);
    free(at);
    munmap(raw, bytes + HUGE2M);
    return 0;
}

#define ROUNDS 3

static double median3(double a, double b, double c)
{
    double v[3] = {a, b, c};
    return bench_median(v, 3);
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 256;
    double seconds = argc > 2 ? atof(argv[2]) : 2;
    if (mib < 4 || mib > 65536 || !(seconds > 0 && seconds <= 600)) {
        fprintf(stderr, "usage: %s [MiB (4..65536) [seconds per region per round (0..600]]]\n",
                argv[0]);
        return 2;
    }
    const char *names[2] = {"4KiB", "THP"};
    const int advice[2] = {MADV_NOHUGEPAGE, MADV_HUGEPAGE};
    struct run r[ROUNDS][2];
    uint64_t sink = 1;
    double load0[3] = {0}, load1[3] = {0};
    if (getloadavg(load0, 3) < 1)
        load0[0] = -1;
    printf("bench_pages: %zu MiB, random 8-byte read-modify-writes in chunks of %d (thread CPU), "
           "%g s per region, %d rounds alternating the order; stall = chunk > 3x median; "
           "load %.2f\n",
           mib, CHUNK, seconds, ROUNDS, load0[0]);
    printf("%-5s %5s %8s %8s %8s %8s %7s %10s %12s %8s\n", "pages", "round", "chunks", "med_us",
           "p99_us", "max_us", "stalls", "period_ms", "stall_ms/s", "thp_MiB");
    for (int k = 0; k < ROUNDS; k++)
        for (int j = 0; j < 2; j++) {
            int i = k % 2 ? 1 - j : j; /* 4 KiB first in even rounds, THP first in odd */
            r[k][i].name = names[i];
            int rc = measure(&r[k][i], mib << 20, seconds, advice[i], &sink);
            if (rc) {
                fprintf(stderr, "bench_pages: %s: %s\n", names[i], strerror(-rc));
                return 1;
            }
            printf("%-5s %5d %8zu %8.1f %8.1f %8.1f %7zu %10.1f %12.2f %8.0f\n", names[i], k + 1,
                   r[k][i].chunks, r[k][i].median_us, r[k][i].p99_us, r[k][i].max_us,
                   r[k][i].stalls, r[k][i].period_ms, r[k][i].stall_ms_per_s, r[k][i].thp_mib);
        }
    if (getloadavg(load1, 3) < 1)
        load1[0] = -1;
    double stall[2], thp = r[0][1].thp_mib;
    for (int i = 0; i < 2; i++) {
        stall[i] = median3(r[0][i].stall_ms_per_s, r[1][i].stall_ms_per_s, r[2][i].stall_ms_per_s);
        printf("%-5s median stall time %.2f ms/s, median period %.1f ms\n", names[i], stall[i],
               median3(r[0][i].period_ms, r[1][i].period_ms, r[2][i].period_ms));
    }
    printf("load average %.2f before, %.2f after\n", load0[0], load1[0]);
    if (thp <= 0)
        printf("the THP region got no huge pages (THP off or unavailable): nothing to compare\n");
    else if (load0[0] < 0 || load0[0] >= 1 || load1[0] >= 1)
        printf("the host is not quiet (load >= 1): no comparison; run it again on a quiet host\n");
    else
        printf("huge pages here: %.2f ms of stalls per second against %.2f with 4 KiB pages "
               "(docs/operating.md \"Huge pages\": turn them on only if the first is not larger)\n",
               stall[1], stall[0]);
    mkdir("results", 0755);
    FILE *f = fopen("results/bench_pages.json", "w");
    if (f) {
        fprintf(f,
                "{\"mib\": %zu, \"seconds_per_region\": %g, \"rounds\": %d, \"load_before\": "
                "%.2f, \"load_after\": %.2f, \"sink\": %llu, \"median_stall_ms_per_s\": "
                "{\"4KiB\": %.3f, \"THP\": %.3f}, \"runs\": [",
                mib, seconds, ROUNDS, load0[0], load1[0], (unsigned long long)(sink & 1), stall[0],
                stall[1]);
        for (int k = 0; k < ROUNDS; k++)
            for (int i = 0; i < 2; i++)
                fprintf(f,
                        "%s{\"pages\": \"%s\", \"round\": %d, \"chunks\": %zu, \"median_us\": "
                        "%.2f, \"p99_us\": %.2f, \"max_us\": %.2f, \"stalls\": %zu, "
                        "\"period_ms\": %.1f, \"stall_ms_per_s\": %.3f, \"thp_mib\": %.0f}",
                        k || i ? ", " : "", names[i], k + 1, r[k][i].chunks, r[k][i].median_us,
                        r[k][i].p99_us, r[k][i].max_us, r[k][i].stalls, r[k][i].period_ms,
                        r[k][i].stall_ms_per_s, r[k][i].thp_mib);
        fprintf(f, "]}\n");
        fclose(f);
        printf("wrote results/bench_pages.json\n");
    }
    return 0;
}
