/*
 * bigfleet/metrics.h — Prometheus text exposition (format 0.0.4) of the
 * appliance's state, rendered from the shared segments by whichever process
 * serves /metrics (the session process, on --metrics-addr).
 *
 * The renderer only reads shared memory (every counter it prints has one
 * writer, named in shm_layout.h), so it is safe on a read-only attachment
 * and never blocks a writer. Series names follow reference/shard.md §7
 * (bigfleet_shard_*). This first version covers the session's own series
 * (lifecycle, identity rejections, rollups, outbox, bootstrap/reclaim
 * relays, node and AC updates, rollup ingest latency, per-cluster rollup
 * counters and rail-2 quarantine) and readiness; the full metric set is
 * added in src/session/metrics.c without changing this interface.
 *
 * A struct bf_metrics_buf is a growable text buffer: append never fails
 * visibly; on allocation failure `oom` is set and further output dropped
 * (the caller answers 500).
 */
#ifndef BIGFLEET_METRICS_H
#define BIGFLEET_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bigfleet/shm.h"

struct bf_metrics_buf {
    char *data;
    size_t len, cap;
    bool oom;
};

void bf_metrics_buf_init(struct bf_metrics_buf *b);
void bf_metrics_buf_free(struct bf_metrics_buf *b);
void bf_metrics_printf(struct bf_metrics_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* "# HELP name help\n# TYPE name type\n" */
void bf_metrics_header(struct bf_metrics_buf *b, const char *name, const char *type,
                       const char *help);
/* Appends a label value escaped per the exposition format (\\, \", \n). */
void bf_metrics_label_value(struct bf_metrics_buf *b, const char *v, size_t len);
/* A histogram with exp(start, factor, n) upper bounds (seconds) from h
 * (non-cumulative buckets, sum in nanoseconds). labels: "" or "k=\"v\"". */
void bf_metrics_hist(struct bf_metrics_buf *b, const char *name, const char *labels,
                     const struct bf_hist *h, double start, double factor, int n);

/* Renders every series this module knows into b. 0 or -ENOMEM. */
int bf_metrics_render(const struct bf_shm *s, struct bf_metrics_buf *b);

#endif /* BIGFLEET_METRICS_H */
