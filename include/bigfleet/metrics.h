/*
 * bigfleet/metrics.h — Prometheus text exposition (format 0.0.4) of the
 * appliance's state, rendered from the shared segments by whichever process
 * serves /metrics (the session process, on --metrics-addr).
 *
 * The renderer only reads shared memory (every counter it prints has one
 * writer, named in shm_layout.h), so it is safe on a read-only attachment
 * and never blocks a writer. Series names follow reference/shard.md §7
 * (bigfleet_shard_*, the Go original's names, types, labels and buckets);
 * the appliance's own series are bigfleet_appliance_*. docs/metrics.md
 * lists every series. Work per render is bounded by the segments'
 * capacities (clusters, fixed tables, one copy of the published cycle
 * result), never by the number of machines.
 *
 * A struct bf_strbuf is a growable text buffer: append never fails
 * visibly; on allocation failure `oom` is set and further output dropped
 * (the caller answers 500).
 */
#ifndef BIGFLEET_METRICS_H
#define BIGFLEET_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bigfleet/shm.h"
#include "bigfleet/strbuf.h"

/* Output goes into a bf_strbuf (bigfleet/strbuf.h): a scrape whose buffer
 * ran out of memory has `failed` set and is not served. */
/* bf_sb_printf under the name every render function of metrics*.c uses */
void bf_metrics_printf(struct bf_strbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* "# HELP name help\n# TYPE name type\n" */
void bf_metrics_header(struct bf_strbuf *b, const char *name, const char *type, const char *help);
/* Appends a label value escaped per the exposition format (\\, \", \n). */
void bf_metrics_label_value(struct bf_strbuf *b, const char *v, size_t len);
/* Appends a sample value the way Go's client does (strconv 'g', shortest
 * round trip: "0.25", "1e+06", "+Inf", "NaN"). */
void bf_metrics_float(struct bf_strbuf *b, double v);
/* A histogram with exp(start, factor, n) upper bounds (seconds) from h
 * (non-cumulative buckets in shared memory, sum in nanoseconds): cumulative
 * _bucket lines with le in Go's float spelling, le="+Inf", _sum in seconds,
 * _count (= the +Inf bucket, so the two always agree). labels: "" or
 * "k=\"v\"" (already escaped). No HELP/TYPE lines (the caller's). */
void bf_metrics_hist(struct bf_strbuf *b, const char *name, const char *labels,
                     const struct bf_hist *h, double start, double factor, int n);

/*
 * Renders every series this module knows into b. 0 or -ENOMEM.
 * Not reentrant: it keeps process-local memory of the label combinations
 * of bigfleet_shard_inventory_machines and
 * bigfleet_appliance_inventory_machines_by_type it has rendered (a
 * combination that disappears is rendered as 0 from then on) and a
 * counter of scrapes that lost every race with the cycle's publish. Call
 * from one thread per process.
 */
int bf_metrics_render(const struct bf_shm *s, struct bf_strbuf *b);
/* The host series (src/session/metrics_host.c; docs/metrics.md "Host,
 * configuration and RPC latency"); part of bf_metrics_render(). */
void bf_metrics_render_host(const struct bf_shm *s, struct bf_strbuf *b);
/* Forgets that memory (tests: a fresh process's view). */
void bf_metrics_forget(void);

#endif /* BIGFLEET_METRICS_H */
