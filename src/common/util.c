/*
 * util.c — durations (Go syntax), random identifiers.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "bigfleet/util.h"

int bf_parse_duration(const char *s, int64_t *out)
{
    if (!s || !*s)
        return -EINVAL;
    bool neg = false;
    if (*s == '+' || *s == '-') {
        neg = *s == '-';
        s++;
    }
    if (strcmp(s, "0") == 0) {
        *out = 0;
        return 0;
    }
    double total = 0;
    int parts = 0;
    while (*s) {
        char *end;
        if (!((*s >= '0' && *s <= '9') || *s == '.'))
            return -EINVAL;
        double v = strtod(s, &end);
        if (end == s)
            return -EINVAL;
        s = end;
        double unit;
        if (strncmp(s, "ns", 2) == 0) {
            unit = 1;
            s += 2;
        } else if (strncmp(s, "us", 2) == 0) {
            unit = 1e3;
            s += 2;
        } else if (strncmp(s, "\xc2\xb5s", 3) == 0) {
            unit = 1e3;
            s += 3;
        } else if (strncmp(s, "ms", 2) == 0) {
            unit = 1e6;
            s += 2;
        } else if (*s == 's') {
            unit = 1e9;
            s += 1;
        } else if (*s == 'm') {
            unit = 60e9;
            s += 1;
        } else if (*s == 'h') {
            unit = 3600e9;
            s += 1;
        } else {
            return -EINVAL; /* Go requires a unit except for "0" */
        }
        total += v * unit;
        parts++;
    }
    if (!parts)
        return -EINVAL;
    if (total > 9.2e18)
        return -ERANGE;
    *out = (int64_t)llround(neg ? -total : total);
    return 0;
}

size_t bf_format_duration(int64_t ns, char *buf, size_t n)
{
    if (ns == 0)
        return (size_t)snprintf(buf, n, "0s");
    const char *sign = ns < 0 ? "-" : "";
    uint64_t u = ns < 0 ? (uint64_t)(-ns) : (uint64_t)ns;
    if (u < 1000)
        return (size_t)snprintf(buf, n, "%s%lluns", sign, (unsigned long long)u);
    if (u < 1000000)
        return (size_t)snprintf(buf, n, "%s%gus", sign, (double)u / 1e3);
    if (u < 1000000000)
        return (size_t)snprintf(buf, n, "%s%gms", sign, (double)u / 1e6);
    uint64_t h = u / 3600000000000ULL;
    uint64_t m = (u / 60000000000ULL) % 60;
    double s = (double)(u % 60000000000ULL) / 1e9;
    if (h)
        return (size_t)snprintf(buf, n, "%s%lluh%llum%gs", sign, (unsigned long long)h,
                                (unsigned long long)m, s);
    if (m)
        return (size_t)snprintf(buf, n, "%s%llum%gs", sign, (unsigned long long)m, s);
    return (size_t)snprintf(buf, n, "%s%gs", sign, s);
}

uint64_t bf_random_u64(void)
{
    uint64_t v;
    if (getrandom(&v, sizeof v, 0) == (ssize_t)sizeof v)
        return v;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    v = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ULL ^ (uint64_t)ts.tv_sec;
    return v;
}

void bf_random_hex16(char out[17])
{
    uint64_t v = bf_random_u64();
    snprintf(out, 17, "%016llx", (unsigned long long)v);
}
