/*
 * util.c — durations (Go syntax), random identifiers.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>

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

static bool sa_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a))
            return true;
        return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
    }
    return false;
}

int bf_addr_is_loopback(const char *addr)
{
    char host[256];
    const char *colon;
    if (addr[0] == '[') {
        const char *close = strchr(addr, ']');
        if (!close || close[1] != ':' || (size_t)(close - addr - 1) >= sizeof host)
            return -EINVAL;
        memcpy(host, addr + 1, (size_t)(close - addr - 1));
        host[close - addr - 1] = 0;
        colon = close + 1;
    } else {
        colon = strrchr(addr, ':');
        if (!colon || (size_t)(colon - addr) >= sizeof host)
            return -EINVAL;
        memcpy(host, addr, (size_t)(colon - addr));
        host[colon - addr] = 0;
    }
    if (!colon[1])
        return -EINVAL;
    if (!host[0])
        return 0; /* ":port": every interface */
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(host, NULL, &hints, &res) != 0 || !res)
        return -EINVAL;
    int lb = 1;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next)
        if (!sa_loopback(ai->ai_addr))
            lb = 0;
    freeaddrinfo(res);
    return lb;
}

size_t bf_utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t l;
    uint32_t min;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        l = 2;
        min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        l = 3;
        min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        l = 4;
        min = 0x10000;
    } else {
        return 0;
    }
    if (n < l)
        return 0;
    uint32_t cp = c & (0x7fu >> l);
    for (size_t i = 1; i < l; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3fu);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return l;
}

int bf_csv_split(char *line, char **f, int max)
{
    int n = 0;
    char *p = line;
    for (;;) {
        if (n == max)
            return max + 1;
        if (*p == '"') {
            char *w = ++p;
            f[n++] = w;
            for (;;) {
                if (!*p)
                    return -1;
                if (*p == '"') {
                    if (p[1] == '"') {
                        *w++ = '"';
                        p += 2;
                        continue;
                    }
                    p++;
                    break;
                }
                *w++ = *p++;
            }
            *w = 0;
            if (*p == ',') {
                p++;
                continue;
            }
            if (*p)
                return -1; /* text after a closing quote */
            return n;
        }
        f[n++] = p;
        char *c = strchr(p, ',');
        if (!c)
            return n;
        *c = 0;
        p = c + 1;
    }
}

int bf_parse_digits(const char *s, uint64_t max, uint64_t *out)
{
    if (!s || !*s)
        return -EINVAL;
    uint64_t v = 0;
    bool over = false;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9')
            return -EINVAL;
        uint64_t d = (uint64_t)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            over = true;
        else
            v = v * 10 + d;
    }
    if (over || v > max)
        return -ERANGE;
    *out = v;
    return 0;
}

void bf_errf(char *err, size_t n, const char *fmt, ...)
{
    if (!err || !n)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
}
