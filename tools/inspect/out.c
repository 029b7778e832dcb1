/*
 * out.c — output helpers of bigfleet-inspect: a growable buffer (a frame is
 * built in memory and written with one write so --watch redraws without
 * tearing), a small JSON writer, text escaping of byte strings, ages and
 * timestamps, and histogram quantiles.
 *
 * JSON strings: '"' and '\\' escaped, every byte < 0x20 and 0x7f as \u00XX
 * (NUL included: group ids are bytes), valid UTF-8 sequences copied, any
 * other byte as \u00XX (its Latin-1 reading) so the document always parses.
 * Allocation failure aborts the process (a CLI tool with nothing to undo).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bigfleet/util.h"
#include "inspect.h"

static void ib_grow(struct insp_buf *b, size_t need)
{
    if (b->len + need + 1 <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + need + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        fputs("bigfleet-inspect: out of memory\n", stderr);
        exit(INSP_EXIT_RUNTIME);
    }
    b->p = p;
    b->cap = cap;
}

void ib_put(struct insp_buf *b, const void *s, size_t n)
{
    ib_grow(b, n);
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void ib_puts(struct insp_buf *b, const char *s)
{
    ib_put(b, s, strlen(s));
}

void ib_printf(struct insp_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char tmp[512];
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof tmp) {
        ib_put(b, tmp, (size_t)n);
        return;
    }
    ib_grow(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void ib_reset(struct insp_buf *b)
{
    b->len = 0;
    if (b->p)
        b->p[0] = 0;
}

void ib_free(struct insp_buf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

void ib_bytes_text(struct insp_buf *b, const char *s, size_t n, size_t max)
{
    size_t lim = (max && n > max) ? max : n;
    for (size_t i = 0; i < lim; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == 0)
            ib_puts(b, "\\0");
        else if (c == '\n')
            ib_puts(b, "\\n");
        else if (c == '\t')
            ib_puts(b, "\\t");
        else if (c == '\\')
            ib_puts(b, "\\\\");
        else if (c < 0x20 || c == 0x7f)
            ib_printf(b, "\\x%02x", c);
        else
            ib_put(b, &s[i], 1);
    }
    if (lim < n)
        ib_puts(b, "...");
}

/* ------------------------------------------------------------------ JSON */

void json_escape(struct insp_buf *b, const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    ib_put(b, "\"", 1);
    size_t run = 0; /* start of a run of bytes copied verbatim */
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
            i++;
            continue;
        }
        if (c >= 0x80) {
            size_t l = bf_utf8_len(s + i, n - i);
            if (l) {
                i += l;
                continue;
            }
        }
        ib_put(b, s + run, i - run);
        if (c == '"')
            ib_puts(b, "\\\"");
        else if (c == '\\')
            ib_puts(b, "\\\\");
        else if (c == '\n')
            ib_puts(b, "\\n");
        else if (c == '\t')
            ib_puts(b, "\\t");
        else if (c == '\r')
            ib_puts(b, "\\r");
        else
            ib_printf(b, "\\u%04x", c);
        i++;
        run = i;
    }
    ib_put(b, s + run, n - run);
    ib_put(b, "\"", 1);
}

void base64_put(struct insp_buf *b, const uint8_t *s, size_t n)
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
        ib_put(b, o, 4);
    }
}

void jw_init(struct jw *w, struct insp_buf *b)
{
    w->b = b;
    w->depth = 0;
    w->first[0] = true;
}

static void jw_key(struct jw *w, const char *key)
{
    if (!w->first[w->depth])
        ib_put(w->b, ",", 1);
    w->first[w->depth] = false;
    if (key && w->depth > 0) {
        json_escape(w->b, key, strlen(key));
        ib_put(w->b, ":", 1);
    }
}

static void jw_open(struct jw *w, const char *key, char c)
{
    jw_key(w, key);
    ib_put(w->b, &c, 1);
    if (w->depth < JW_MAX_DEPTH - 1)
        w->depth++;
    w->first[w->depth] = true;
}

static void jw_close(struct jw *w, char c)
{
    ib_put(w->b, &c, 1);
    if (w->depth > 0)
        w->depth--;
}

void jw_obj(struct jw *w, const char *key)
{
    jw_open(w, key, '{');
}
void jw_obj_end(struct jw *w)
{
    jw_close(w, '}');
}
void jw_arr(struct jw *w, const char *key)
{
    jw_open(w, key, '[');
}
void jw_arr_end(struct jw *w)
{
    jw_close(w, ']');
}

void jw_strn(struct jw *w, const char *key, const char *s, size_t n)
{
    jw_key(w, key);
    json_escape(w->b, s ? s : "", s ? n : 0);
}

void jw_str(struct jw *w, const char *key, const char *s)
{
    jw_strn(w, key, s, s ? strlen(s) : 0);
}

void jw_int(struct jw *w, const char *key, int64_t v)
{
    jw_key(w, key);
    ib_printf(w->b, "%lld", (long long)v);
}

void jw_uint(struct jw *w, const char *key, uint64_t v)
{
    jw_key(w, key);
    ib_printf(w->b, "%llu", (unsigned long long)v);
}

void jw_double(struct jw *w, const char *key, double v)
{
    jw_key(w, key);
    if (isnan(v) || isinf(v))
        ib_puts(w->b, "null");
    else
        ib_printf(w->b, "%.17g", v);
}

void jw_float(struct jw *w, const char *key, float v)
{
    jw_key(w, key);
    if (isnan(v) || isinf(v))
        ib_puts(w->b, "null");
    else
        ib_printf(w->b, "%.7g", (double)v);
}

void jw_bool(struct jw *w, const char *key, bool v)
{
    jw_key(w, key);
    ib_puts(w->b, v ? "true" : "false");
}

void jw_null(struct jw *w, const char *key)
{
    jw_key(w, key);
    ib_puts(w->b, "null");
}

/* ------------------------------------------------------------ times */

int64_t age_ns(int64_t now_ns, int64_t then_ns)
{
    int64_t d;
    if (__builtin_sub_overflow(now_ns, then_ns, &d))
        return then_ns < 0 ? INT64_MAX : INT64_MIN;
    return d;
}

int64_t sec_to_ns(int64_t s)
{
    int64_t ns;
    if (__builtin_mul_overflow(s, 1000000000LL, &ns))
        return s < 0 ? INT64_MIN : INT64_MAX;
    return ns;
}

void fmt_age(char *buf, size_t n, int64_t ns)
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

void fmt_time(char *buf, size_t n, int64_t unix_ns)
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
