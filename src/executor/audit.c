/*
 * audit.c — the decision audit log line (reference/shard.md §6.7,
 * docs/audit-log.md): one JSON object per executed, suppressed or dry-run
 * action, formatted into a caller buffer so the executor writes it with a
 * single write(2) on an O_APPEND descriptor (lines from one process never
 * interleave; a torn line can only be the last one of a killed writer).
 *
 * JSON strings are escaped as Go's encoding/json does for slog: '"', '\\'
 * and control characters escaped, invalid UTF-8 replaced by U+FFFD, and
 * '<', '>', '&' left as they are (slog's JSON handler does not HTML-escape).
 * That is why this file keeps its own writer instead of the base layer's
 * (bigfleet/json.h copies valid UTF-8 and writes other bytes as \u00XX, and
 * writes into a growable buffer, where a line here must fit one fixed one).
 *
 * Ownership records (ADR-0055, docs/audit-log.md): one line per machine a
 * coordinator instruction moved or reserved, and per domain change, sent by
 * the cycle on ring OWN_AUDIT; "msg":"ownership" tells them apart.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "bigfleet/util.h"
#include "bigfleet/model.h"
#include "executor/executor.h"

struct out {
    char *p;
    size_t n, cap;
};

static void put(struct out *o, const char *s, size_t l)
{
    if (o->n + l >= o->cap) /* keep room for the final "}\n" */
        l = o->n < o->cap ? o->cap - o->n - 1 : 0;
    memcpy(o->p + o->n, s, l);
    o->n += l;
}

static void putf(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(struct out *o, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int l = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (l > 0)
        put(o, tmp, (size_t)l < sizeof tmp ? (size_t)l : sizeof tmp - 1);
}

/* A JSON string value, at most max bytes of output (a cut never splits an
 * escape or a UTF-8 sequence). */
static void put_str(struct out *o, const char *s, size_t len, size_t max)
{
    size_t start = o->n;
    put(o, "\"", 1);
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        char esc[8];
        size_t el;
        const char *ep = esc;
        size_t adv = 1;
        unsigned c = u[i];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            el = 2;
        } else if (c < 0x20) {
            switch (c) {
            case '\n':
                ep = "\\n";
                el = 2;
                break;
            case '\r':
                ep = "\\r";
                el = 2;
                break;
            case '\t':
                ep = "\\t";
                el = 2;
                break;
            default:
                el = (size_t)snprintf(esc, sizeof esc, "\\u%04x", c);
            }
        } else if (c < 0x80) {
            esc[0] = (char)c;
            el = 1;
        } else {
            size_t l = bf_utf8_len(u + i, len - i);
            if (l) {
                ep = s + i;
                el = l;
                adv = l;
            } else {
                ep = "\xef\xbf\xbd"; /* U+FFFD */
                el = 3;
            }
        }
        if (o->n - start + el + 1 > max)
            break;
        put(o, ep, el);
        i += adv;
    }
    put(o, "\"", 1);
}

size_t bf_exec_audit_format(char *buf, size_t cap, int64_t now_ns, uint64_t cycle,
                            const struct bf_action_msg *a, const char *machine, size_t machine_len,
                            const char *cluster, size_t cluster_len, const char *outcome,
                            double duration_ms, const char *error)
{
    struct out o = {buf, 0, cap > 4 ? cap - 3 : 0};
    /* The cycle stores its counter only after it enqueued and published, so
     * an action finished (or audited) at once can see the previous cycle's
     * number: "the cycle counter when written" is never before the cycle
     * that decided the action (reference/shard.md §6.7). */
    if (cycle < a->decided_cycle)
        cycle = a->decided_cycle;
    time_t secs = (time_t)(now_ns / 1000000000LL);
    struct tm tm;
    gmtime_r(&secs, &tm);
    char ts[64];
    snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%09lldZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
             (long long)(now_ns % 1000000000LL));
    putf(&o, "{\"time\":\"%s\",\"level\":\"INFO\",\"msg\":\"action\",\"cycle\":%llu,\"kind\":", ts,
         (unsigned long long)cycle);
    const char *k = bf_action_kind_name(a->kind);
    put_str(&o, k, strlen(k), 32);
    put(&o, ",\"machine\":", 11);
    put_str(&o, machine ? machine : "", machine ? machine_len : 0, 2048);
    put(&o, ",\"cluster\":", 11);
    put_str(&o, cluster ? cluster : "", cluster ? cluster_len : 0, 2048);
    put(&o, ",\"reason\":", 10);
    const char *r = bf_action_reason_name(a->reason);
    put_str(&o, r, strlen(r), 64);
    putf(&o, ",\"grace_seconds\":%u,\"outcome\":", a->grace_seconds);
    put_str(&o, outcome, strlen(outcome), 64);
    putf(&o, ",\"serial\":%llu,\"decided_cycle\":%llu,\"duration_ms\":%.3f",
         (unsigned long long)a->serial, (unsigned long long)a->decided_cycle, duration_ms);
    if (error && error[0]) {
        put(&o, ",\"error\":", 9);
        put_str(&o, error, strlen(error), 1024);
    }
    /* the close always fits: the body stopped 3 bytes short of cap */
    o.cap = cap;
    put(&o, "}\n", 2);
    return o.n;
}

static const char *const own_event_names[BF_OWN_EV_COUNT] = {
    [BF_OWN_EV_TRANSFER_OUT] = "transfer_out",
    [BF_OWN_EV_TRANSFER_IN] = "transfer_in",
    [BF_OWN_EV_SPECULATIVE_OUT] = "speculative_out",
    [BF_OWN_EV_SPECULATIVE_IN] = "speculative_in",
    [BF_OWN_EV_RESERVED] = "reserved_for_transfer",
    [BF_OWN_EV_RESERVATION_EXPIRED] = "reservation_expired",
    [BF_OWN_EV_DOMAIN_ASSIGNED] = "domain_assigned",
    [BF_OWN_EV_DOMAIN_UNASSIGNED] = "domain_unassigned",
};

const char *bf_exec_own_event_name(int event)
{
    return event > 0 && event < BF_OWN_EV_COUNT ? own_event_names[event] : "unknown";
}

/* ,"key":"RFC 3339 with nanoseconds" (the leading comma unless first) */
static void put_time(struct out *o, const char *key, int64_t ns, bool first)
{
    time_t secs = (time_t)(ns / 1000000000LL);
    struct tm tm;
    gmtime_r(&secs, &tm);
    putf(o, "%s\"%s\":\"%04d-%02d-%02dT%02d:%02d:%02d.%09lldZ\"", first ? "" : ",", key,
         tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
         (long long)(ns % 1000000000LL));
}

size_t bf_exec_audit_format_ownership(char *buf, size_t cap, const struct bf_own_audit_hdr *h,
                                      const char *strings, size_t strings_len)
{
    struct out o = {buf, 0, cap > 4 ? cap - 3 : 0};
    const char *sv[BF_OWN_AS_COUNT];
    size_t sl[BF_OWN_AS_COUNT], at = 0;
    for (int i = 0; i < BF_OWN_AS_COUNT; i++) {
        sl[i] = h->len[i];
        if (at + sl[i] > strings_len)
            sl[i] = at < strings_len ? strings_len - at : 0;
        sv[i] = strings + at;
        at += sl[i];
    }
    put(&o, "{", 1);
    put_time(&o, "time", h->at_ns, true);
    putf(&o, ",\"level\":\"INFO\",\"msg\":\"ownership\",\"cycle\":%llu,\"event\":",
         (unsigned long long)h->cycle);
    const char *ev = bf_exec_own_event_name((int)h->event);
    put_str(&o, ev, strlen(ev), 64);
    static const char *const keys[BF_OWN_AS_COUNT] = {
        ",\"machine\":", ",\"instruction_id\":", ",\"from_shard\":", ",\"to_shard\":",
        ",\"detail\":"};
    for (int i = 0; i < BF_OWN_AS_COUNT; i++) {
        put(&o, keys[i], strlen(keys[i]));
        put_str(&o, sv[i], sl[i], 2048);
    }
    if (h->until_ns)
        put_time(&o, "reserved_until", h->until_ns, false);
    if (h->preemptor_priority)
        putf(&o, ",\"preemptor_priority\":%d", h->preemptor_priority);
    o.cap = cap;
    put(&o, "}\n", 2);
    return o.n;
}
