/*
 * out.c — output helpers of bigfleet-inspect: text escaping of byte
 * strings, base64, ages and timestamps, and histogram quantiles. A frame is
 * built in memory (bigfleet/strbuf.h; JSON with bigfleet/json.h) and written
 * with one write so --watch redraws without tearing; a frame whose buffer
 * ran out of memory is not written and the process exits (main.c).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bigfleet/util.h"
#include "inspect.h"

void insp_ib_bytes_text(struct bf_strbuf *b, const char *s, size_t n, size_t max)
{
    size_t lim = (max && n > max) ? max : n;
    for (size_t i = 0; i < lim; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == 0)
            bf_sb_puts(b, "\\0");
        else if (c == '\n')
            bf_sb_puts(b, "\\n");
        else if (c == '\t')
            bf_sb_puts(b, "\\t");
        else if (c == '\\')
            bf_sb_puts(b, "\\\\");
        else if (c < 0x20 || c == 0x7f)
            bf_sb_printf(b, "\\x%02x", c);
        else
            bf_sb_put(b, &s[i], 1);
    }
    if (lim < n)
        bf_sb_puts(b, "...");
}

/* ------------------------------------------------------------------ base64 */

void insp_base64_put(struct bf_strbuf *b, const uint8_t *s, size_t n)
{
    static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)s[i + 1] << 8;
        if (i + 2 < n)
            v |= s[i + 2];
        char o[4] = {t[v >> 18 & 63], t[v >> 12 & 63], i + 1 < n ? t[v >> 6 & 63] : '=',
                     i + 2 < n ? t[v & 63] : '='};
        bf_sb_put(b, o, 4);
    }
}

/* ------------------------------------------------------------ times */

int64_t insp_age_ns(int64_t now_ns, int64_t then_ns)
{
    int64_t d;
    if (__builtin_sub_overflow(now_ns, then_ns, &d))
        return then_ns < 0 ? INT64_MAX : INT64_MIN;
    return d;
}

int64_t insp_sec_to_ns(int64_t s)
{
    int64_t ns;
    if (__builtin_mul_overflow(s, 1000000000LL, &ns))
        return s < 0 ? INT64_MIN : INT64_MAX;
    return ns;
}

void insp_fmt_age(char *buf, size_t n, int64_t ns)
{
    if (ns < 0)
        ns = 0;
    double s = (double)ns / 1e9;
    if (s < 1)
        snprintf(buf, n, "%.0fms", s * 1000);
    else if (s < 60)
        snprintf(buf, n, "%.1fs", s);
    else if (s < 3600)
        snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else if (s < 86400)
        snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
    else
        snprintf(buf, n, "%dd%02dh", (int)(s / 86400), (int)(s / 3600) % 24);
}

void insp_fmt_time(char *buf, size_t n, int64_t unix_ns)
{
    if (unix_ns <= 0) {
        snprintf(buf, n, "-");
        return;
    }
    time_t t = (time_t)(unix_ns / 1000000000LL);
    struct tm tm;
    char d[32];
    if (!gmtime_r(&t, &tm) || strftime(d, sizeof d, "%Y-%m-%dT%H:%M:%S", &tm) == 0) {
        snprintf(buf, n, "?"); /* a year past what struct tm holds: a corrupted stamp */
        return;
    }
    snprintf(buf, n, "%s.%03dZ", d, (int)(unix_ns % 1000000000LL / 1000000));
}

/* ------------------------------------------------------------ histograms */

double insp_hist_bound(const struct insp_hist *h, int i)
{
    if (i >= h->nb)
        return INFINITY;
    return h->start * pow(h->factor, i);
}

double insp_hist_quantile(const struct insp_hist *h, double q)
{
    uint64_t total = 0;
    for (int i = 0; i <= h->nb && i < BF_HIST_MAX_BUCKETS; i++)
        total += h->bucket[i];
    if (total == 0)
        return NAN;
    double rank = q * (double)total;
    uint64_t cum = 0;
    for (int i = 0; i <= h->nb && i < BF_HIST_MAX_BUCKETS; i++) {
        uint64_t c = h->bucket[i];
        if (c && (double)(cum + c) >= rank) {
            if (i >= h->nb)
                return insp_hist_bound(h, h->nb - 1);
            double lo = i == 0 ? 0 : insp_hist_bound(h, i - 1);
            double hi = insp_hist_bound(h, i);
            return lo + (hi - lo) * ((rank - (double)cum) / (double)c);
        }
        cum += c;
    }
    return insp_hist_bound(h, h->nb - 1);
}
