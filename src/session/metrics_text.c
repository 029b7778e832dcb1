/*
 * metrics_text.c — the Prometheus text exposition primitives (format 0.0.4;
 * bigfleet/metrics.h): HELP/TYPE headers, escaped label values, sample
 * values spelled as Go's client spells them, histograms from the shared
 * bf_hist counters. Every renderer of /metrics (metrics.c, metrics_host.c,
 * http.c, inspect_needs.c) writes through these; they render nothing on
 * their own and call no renderer.
 */
#include <stdarg.h>
#include <stdio.h>

#include "bigfleet/metrics.h"
#include "bigfleet/util.h"

void bf_metrics_printf(struct bf_strbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bf_sb_vprintf(b, fmt, ap);
    va_end(ap);
}

void bf_metrics_header(struct bf_strbuf *b, const char *name, const char *type, const char *help)
{
    bf_metrics_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void bf_metrics_label_value(struct bf_strbuf *b, const char *v, size_t len)
{
    size_t run = 0; /* start of the bytes copied as they are */
    for (size_t i = 0; i < len; i++) {
        char c = v[i];
        if (c != '\\' && c != '"' && c != '\n')
            continue;
        bf_sb_put(b, v + run, i - run);
        bf_sb_put(b, c == '\n' ? "\\n" : c == '"' ? "\\\"" : "\\\\", 2);
        run = i + 1;
    }
    bf_sb_put(b, v + run, len - run);
}

void bf_metrics_float(struct bf_strbuf *b, double v)
{
    char t[40];
    bf_format_float_go(v, t, sizeof t);
    bf_metrics_printf(b, "%s", t);
}

void bf_metrics_hist(struct bf_strbuf *b, const char *name, const char *labels,
                     const struct bf_hist *h, double start, double factor, int n)
{
    if (n > BF_HIST_MAX_BUCKETS - 1)
        n = BF_HIST_MAX_BUCKETS - 1;
    const char *sep = labels[0] ? "," : "";
    uint64_t cum = 0;
    double bound = start;
    char le[40];
    for (int i = 0; i < n; i++) {
        cum += BF_STAT_GET(h->bucket[i]);
        bf_format_float_go(bound, le, sizeof le);
        bf_metrics_printf(b, "%s_bucket{%s%sle=\"%s\"} %llu\n", name, labels, sep, le,
                          (unsigned long long)cum);
        bound *= factor;
    }
    cum += BF_STAT_GET(h->bucket[n]);
    bf_metrics_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep,
                      (unsigned long long)cum);
    const char *lb = labels[0] ? "{" : "", *lbe = labels[0] ? "}" : "";
    bf_metrics_printf(b, "%s_sum%s%s%s ", name, lb, labels, lbe);
    bf_metrics_float(b, (double)BF_STAT_GET(h->sum_ns) / 1e9);
    bf_metrics_printf(b, "\n%s_count%s%s%s %llu\n", name, lb, labels, lbe, (unsigned long long)cum);
}
