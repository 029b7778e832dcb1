/*
 * fuzz_openb_trace.c — bigfleet-replay's openb pod-list reader
 * (rp_trace_parse, tools/replay/trace.c). Input: the CSV bytes.
 *
 * Properties: the strict parse returns 0 or a documented error with a
 * message; whatever the strict parse accepts, the skipping parse accepts
 * with the same pods and nothing skipped; an accepted trace has every name
 * offset inside the string table, create <= delete, a spec index inside
 * the spec table, by_create ordered by creation time, first_create and end
 * consistent with the pods; nothing leaks (a rejected parse frees all).
 * A third parse with --snapshot auto: whatever the strict parse accepts it
 * accepts alike (a list with times is not a snapshot); a snapshot's pods
 * arrive within the ramp and are never deleted before the end.
 */
#include <errno.h>

#include "fuzz.h"
#include "../../tools/replay/replay.h"

static void check_trace(const struct rp_trace *t)
{
    for (size_t i = 0; i < t->n_pods; i++) {
        const struct rp_pod *p = &t->pods[i];
        FUZZ_CHECK(p->name < t->str_len);
        FUZZ_CHECK(memchr(t->strings + p->name, 0, t->str_len - p->name) != NULL);
        FUZZ_CHECK(p->create <= p->delete_);
        FUZZ_CHECK(p->spec < t->n_specs);
        FUZZ_CHECK(p->create >= t->first_create);
    }
    for (size_t i = 1; i < t->n_pods; i++)
        FUZZ_CHECK(t->pods[t->by_create[i - 1]].create <= t->pods[t->by_create[i]].create);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct rp_trace a, b;
    char err[512], err2[512];
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    err[0] = err2[0] = 0;
    const struct rp_trace_opts strict = {.default_qos = -1};
    const struct rp_trace_opts skip = {.skip_bad = true, .default_qos = -1};
    const struct rp_trace_opts snap = {
        .snapshot = RP_SNAP_AUTO, .ramp = 1000, .hold = 500, .default_qos = -1};
    int ra = rp_trace_parse("fuzz.csv", (const char *)data, size, &strict, &a, err, sizeof err);
    FUZZ_CHECK(ra == 0 || ra == -EINVAL || ra == -ENOMEM);
    int rb = rp_trace_parse("fuzz.csv", (const char *)data, size, &skip, &b, err2, sizeof err2);
    FUZZ_CHECK(rb == 0 || rb == -EINVAL || rb == -ENOMEM);
    if (rb == 0) {
        check_trace(&b);
        rp_trace_free(&b);
    }
    int rc = rp_trace_parse("fuzz.csv", (const char *)data, size, &snap, &b, err2, sizeof err2);
    FUZZ_CHECK(rc == 0 || rc == -EINVAL || rc == -ENOMEM);
    if (rc == 0) {
        check_trace(&b);
        if (b.snapshot) {
            FUZZ_CHECK(b.end == 1500 && b.first_create == 0);
            for (size_t i = 0; i < b.n_pods; i++)
                FUZZ_CHECK(b.pods[i].create < 1000 && b.pods[i].delete_ == RP_LIVES_FOREVER);
        }
    }
    if (ra == 0) {
        check_trace(&a);
        FUZZ_CHECK(rc == 0 && !b.snapshot && b.n_pods == a.n_pods);
        rp_trace_free(&a);
    } else {
        FUZZ_CHECK(err[0] != 0);
    }
    if (rc == 0)
        rp_trace_free(&b);
    /* the skipping parse accepts what the strict one does, skipping nothing */
    if (ra == 0) {
        rb = rp_trace_parse("fuzz.csv", (const char *)data, size, &skip, &b, err2, sizeof err2);
        FUZZ_CHECK(rb == 0 && b.skipped == 0);
        if (rb == 0)
            rp_trace_free(&b);
    }
    return 0;
}
