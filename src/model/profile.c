/*
 * profile.c — Need profile canonicalisation and the fingerprint string
 * (reference/engine.md §1.6, wire.md §8), plus Go-compatible float
 * formatting for the shard_metadata echo (wire.md §10).
 *
 * The fingerprint is compared by other tools and restarted shards, so its
 * format is exact: decimal integers, numeric operator and bucket values.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bigfleet/model.h"

/* Stable insertion sorts: profiles have a handful of entries. */
static void sort_strings(const char **v, uint32_t n)
{
    for (uint32_t i = 1; i < n; i++) {
        const char *x = v[i];
        uint32_t j = i;
        while (j > 0 && strcmp(v[j - 1], x) > 0) {
            v[j] = v[j - 1];
            j--;
        }
        v[j] = x;
    }
}

static int req_cmp(const struct bf_requirement *a, const struct bf_requirement *b)
{
    int c = strcmp(a->key, b->key);
    if (c)
        return c;
    return (int)a->op - (int)b->op;
}

void bf_profile_canonicalize(struct bf_need_profile *p)
{
    for (uint32_t i = 0; i < p->n_reqs; i++)
        sort_strings(p->reqs[i].values, p->reqs[i].n_values);
    for (uint32_t i = 1; i < p->n_reqs; i++) {
        struct bf_requirement x = p->reqs[i];
        uint32_t j = i;
        while (j > 0 && req_cmp(&p->reqs[j - 1], &x) > 0) {
            p->reqs[j] = p->reqs[j - 1];
            j--;
        }
        p->reqs[j] = x;
    }
    for (uint32_t i = 1; i < p->n_spread; i++) {
        struct bf_spread x = p->spread[i];
        uint32_t j = i;
        while (j > 0 && strcmp(p->spread[j - 1].topology_key, x.topology_key) > 0) {
            p->spread[j] = p->spread[j - 1];
            j--;
        }
        p->spread[j] = x;
    }
}

struct sbuf {
    char *buf;
    size_t n, len;
};

static void put(struct sbuf *b, const char *s, size_t l)
{
    if (b->len < b->n) {
        size_t room = b->n - b->len;
        memcpy(b->buf + b->len, s, l < room ? l : room);
    }
    b->len += l;
}

static void puts_(struct sbuf *b, const char *s)
{
    put(b, s, strlen(s));
}

static void putll(struct sbuf *b, long long v)
{
    char tmp[32];
    int l = snprintf(tmp, sizeof tmp, "%lld", v);
    put(b, tmp, (size_t)l);
}

size_t bf_profile_fingerprint(const struct bf_need_profile *p, char *buf, size_t n)
{
    struct sbuf b = {buf, n, 0};
    puts_(&b, "p=");
    putll(&b, p->priority);
    puts_(&b, "|ipb=");
    putll(&b, p->ipb);
    puts_(&b, "|rpb=");
    putll(&b, p->rpb);
    puts_(&b, "|reqs=");
    for (uint32_t i = 0; i < p->n_reqs; i++) {
        const struct bf_requirement *r = &p->reqs[i];
        puts_(&b, r->key);
        puts_(&b, ":");
        putll(&b, r->op);
        puts_(&b, ":");
        for (uint32_t j = 0; j < r->n_values; j++) {
            if (j)
                puts_(&b, ",");
            puts_(&b, r->values[j]);
        }
        puts_(&b, ";");
    }
    puts_(&b, "|spr=");
    for (uint32_t i = 0; i < p->n_spread; i++) {
        const struct bf_spread *s = &p->spread[i];
        puts_(&b, s->topology_key);
        puts_(&b, ":");
        putll(&b, s->max_skew);
        puts_(&b, ":");
        putll(&b, s->when);
        puts_(&b, ";");
    }
    if (n) {
        size_t end = b.len < n ? b.len : n - 1;
        buf[end] = 0;
    }
    return b.len;
}

char *bf_profile_fingerprint_dup(const struct bf_need_profile *p)
{
    size_t l = bf_profile_fingerprint(p, NULL, 0);
    char *s = malloc(l + 1);
    if (!s)
        return NULL;
    bf_profile_fingerprint(p, s, l + 1);
    return s;
}

int bf_profile_same_index(const struct bf_need_profile *p)
{
    for (uint32_t i = 0; i < p->n_reqs; i++)
        if (p->reqs[i].op == BF_OP_SAME)
            return (int)i;
    return -1;
}

int bf_profile_strict_spread_index(const struct bf_need_profile *p)
{
    for (uint32_t i = 0; i < p->n_spread; i++)
        if (p->spread[i].when == BF_WHEN_DO_NOT_SCHEDULE)
            return (int)i;
    return -1;
}

int bf_profile_pinned_types_index(const struct bf_need_profile *p)
{
    for (uint32_t i = 0; i < p->n_reqs; i++) {
        if (strcmp(p->reqs[i].key, BF_LABEL_INSTANCE_TYPE) != 0)
            continue;
        if (p->reqs[i].op == BF_OP_IN && p->reqs[i].n_values > 0)
            return (int)i;
        return -1;
    }
    return -1;
}

size_t bf_format_float_go(double f, char *buf, size_t n)
{
    if (isnan(f))
        return (size_t)snprintf(buf, n, "NaN");
    if (isinf(f))
        return (size_t)snprintf(buf, n, "%sInf", f > 0 ? "+" : "-");
    if (f == 0)
        return (size_t)snprintf(buf, n, "%s0", signbit(f) ? "-" : "");
    /* shortest round-trip digits via %.*e */
    char e[40];
    int prec;
    for (prec = 0; prec < 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec, f);
        if (strtod(e, NULL) == f)
            break;
    }
    /* e = [-]d[.ddd]e[+-]XX */
    const char *s = e;
    bool neg = false;
    if (*s == '-') {
        neg = true;
        s++;
    }
    char digits[24];
    int nd = 0;
    for (; *s && *s != 'e'; s++)
        if (*s >= '0' && *s <= '9')
            digits[nd++] = *s;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = 0;
    int exp = atoi(s + 1);
    char out[64];
    int l = 0;
    if (neg)
        out[l++] = '-';
    if (exp < -4 || exp >= 6) {
        out[l++] = digits[0];
        if (nd > 1) {
            out[l++] = '.';
            memcpy(out + l, digits + 1, (size_t)nd - 1);
            l += nd - 1;
        }
        l += snprintf(out + l, sizeof out - (size_t)l, "e%c%02d", exp < 0 ? '-' : '+',
                      exp < 0 ? -exp : exp);
    } else if (exp < 0) {
        out[l++] = '0';
        out[l++] = '.';
        for (int k = 0; k < -exp - 1; k++)
            out[l++] = '0';
        memcpy(out + l, digits, (size_t)nd);
        l += nd;
    } else {
        int ip = exp + 1; /* integer digits */
        for (int k = 0; k < ip; k++)
            out[l++] = k < nd ? digits[k] : '0';
        if (nd > ip) {
            out[l++] = '.';
            memcpy(out + l, digits + ip, (size_t)(nd - ip));
            l += nd - ip;
        }
    }
    out[l] = 0;
    return (size_t)snprintf(buf, n, "%s", out);
}

int bf_parse_float(const char *s, size_t len, double *out)
{
    char tmp[64];
    if (len == 0 || len >= sizeof tmp)
        return -EINVAL;
    memcpy(tmp, s, len);
    tmp[len] = 0;
    const char *p = tmp;
    if (strcasecmp(p, "+inf") == 0 || strcasecmp(p, "inf") == 0 ||
        strcasecmp(p, "+infinity") == 0 || strcasecmp(p, "infinity") == 0) {
        *out = INFINITY;
        return 0;
    }
    if (strcasecmp(p, "-inf") == 0 || strcasecmp(p, "-infinity") == 0) {
        *out = -INFINITY;
        return 0;
    }
    if (strcasecmp(p, "nan") == 0) {
        *out = NAN;
        return 0;
    }
    /* reject hex floats and leading spaces, which Go's ParseFloat (base 10) refuses */
    for (const char *q = p; *q; q++)
        if (!((*q >= '0' && *q <= '9') || *q == '.' || *q == 'e' || *q == 'E' || *q == '+' ||
              *q == '-'))
            return -EINVAL;
    char *end;
    errno = 0;
    double v = strtod(p, &end);
    if (end == p || *end != 0)
        return -EINVAL;
    *out = v;
    return 0;
}
