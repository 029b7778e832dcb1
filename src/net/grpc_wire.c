/*
 * grpc_wire.c — pure gRPC wire helpers (see grpc_wire.h): message framing
 * parser, grpc-timeout, grpc-message percent-encoding, status mappings.
 *
 * Design notes: no global state; the parser owns at most one assembly
 * buffer, sized by what has arrived (doubling, capped at the declared
 * length) and freed after each message so idle streams hold nothing —
 * except a mapped buffer given back to the connection's spare (struct
 * bf_grpc_spare), which the next large message starts in. Buffers of 1 MiB
 * and more are anonymous mappings grown with mremap (page tables move,
 * bytes do not).
 */
#include <errno.h>
#include <stdio.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bigfleet/net.h"
#include "net/grpc_wire.h"

void bf_grpc_parser_init(struct bf_grpc_parser *p, uint32_t max, struct bf_grpc_budget *budget)
{
    memset(p, 0, sizeof *p);
    p->max = max;
    p->budget = budget;
}

static size_t page_round(size_t n)
{
    return (n + 4095) & ~(size_t)4095;
}

void *bf_grpc_buf_alloc(size_t cap)
{
    if (cap < BF_GRPC_MMAP_MIN)
        return malloc(cap ? cap : 1);
    void *p =
        mmap(NULL, page_round(cap), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void bf_grpc_buf_free(void *p, size_t cap)
{
    if (!p)
        return;
    if (cap >= BF_GRPC_MMAP_MIN)
        munmap(p, page_round(cap));
    else
        free(p);
}

/* Grows a buffer of capacity cap (have bytes used) to ncap > cap. NULL
 * leaves the old buffer as it was. */
static void *buf_grow(void *p, size_t cap, size_t have, size_t ncap)
{
    if (ncap < BF_GRPC_MMAP_MIN)
        return realloc(p, ncap);
    if (p && cap >= BF_GRPC_MMAP_MIN) {
        void *q = mremap(p, page_round(cap), page_round(ncap), MREMAP_MAYMOVE);
        return q == MAP_FAILED ? NULL : q;
    }
    void *q = bf_grpc_buf_alloc(ncap);
    if (!q)
        return NULL;
    if (have)
        memcpy(q, p, have);
    free(p);
    return q;
}

/* The budget in b's chain that n more bytes would take over its max, or NULL
 * (then n is charged to the whole chain). Nothing is yielded or counted. */
static struct bf_grpc_budget *budget_try(struct bf_grpc_budget *b, size_t n)
{
    for (struct bf_grpc_budget *x = b; x; x = x->parent)
        if (x->max && x->used + n > x->max)
            return x;
    for (struct bf_grpc_budget *x = b; x; x = x->parent)
        x->used += n;
    return NULL;
}

static size_t spare_min(const struct bf_grpc_spare *spare)
{
    return spare->min ? spare->min : BF_GRPC_MMAP_MIN;
}

void bf_grpc_spare_put(struct bf_grpc_spare *spare, void *buf, size_t cap)
{
    if (!buf)
        return;
    if (!spare || cap < spare_min(spare) || cap > spare->max || cap <= spare->cap) {
        bf_grpc_buf_free(buf, cap);
        return;
    }
    bf_grpc_spare_release(spare); /* the smaller one goes */
    if (spare->charge && budget_try(spare->charge, cap) != NULL) {
        /* the budget is in use by messages: the memory goes back, not kept */
        spare->idle_releases++;
        bf_grpc_buf_free(buf, cap);
        return;
    }
    spare->buf = buf;
    spare->cap = cap;
    spare->touched = true;
}

void bf_grpc_spare_release(struct bf_grpc_spare *spare)
{
    if (spare->buf && spare->charge)
        bf_grpc_budget_refund(spare->charge, spare->cap);
    bf_grpc_buf_free(spare->buf, spare->cap);
    spare->buf = NULL;
    spare->cap = 0;
}

bool bf_grpc_spare_tick(struct bf_grpc_spare *spare)
{
    if (spare->buf && !spare->touched) {
        bf_grpc_spare_release(spare);
        spare->idle_releases++;
    }
    spare->touched = false;
    return spare->buf != NULL;
}

/* Starts a message's assembly in the spare (its declared length is at least
 * the spare's min, by default BF_GRPC_MMAP_MIN, so it would be mapped anyway,
 * and at most the spare's max): false when there is none or the budget
 * refuses it. The spare's own charge (if any) becomes the parser's. A
 * buffer's capacity tells how it was allocated (bf_grpc_buf_free), whoever
 * uses it, and growth from it follows the same rule (buf_grow). */
static bool take_spare(struct bf_grpc_parser *p)
{
    struct bf_grpc_spare *sp = p->spare;
    if (!sp || !sp->buf || p->buf || p->msg_len < spare_min(sp) || p->msg_len > sp->max)
        return false; /* (a message over max would not give it back) */
    uint8_t *buf = sp->buf;
    size_t cap = sp->cap;
    sp->buf = NULL; /* detached: the charge below cannot yield it */
    sp->cap = 0;
    if (sp->charge)
        bf_grpc_budget_refund(sp->charge, cap);
    if (p->budget && budget_try(p->budget, cap) != NULL) {
        /* kept idle as it was (the refund made room for its charge again);
         * the normal growth path reports the refusal */
        if (sp->charge)
            budget_try(sp->charge, cap);
        sp->buf = buf;
        sp->cap = cap;
        return false;
    }
    p->buf = buf;
    p->cap = cap;
    sp->reuses++;
    sp->touched = true;
    return true;
}

struct bf_grpc_budget *bf_grpc_budget_charge(struct bf_grpc_budget *b, size_t n)
{
    for (;;) {
        struct bf_grpc_budget *x = budget_try(b, n);
        if (!x)
            return NULL;
        if (x->yield && x->yield->buf) {
            bf_grpc_spare_release(x->yield); /* an idle buffer never refuses a message */
            x->yield->idle_releases++;
            continue;
        }
        x->refused++;
        return x;
    }
}

void bf_grpc_budget_refund(struct bf_grpc_budget *b, size_t n)
{
    for (struct bf_grpc_budget *x = b; x; x = x->parent)
        x->used -= n;
}

/* frees the assembly buffer and refunds its charge */
static void release_buf(struct bf_grpc_parser *p)
{
    if (p->buf && p->budget)
        bf_grpc_budget_refund(p->budget, p->cap);
    bf_grpc_spare_put(p->spare, p->buf, p->cap);
    p->buf = NULL;
    p->cap = 0;
}

void bf_grpc_parser_reset(struct bf_grpc_parser *p)
{
    release_buf(p);
    uint32_t max = p->max;
    struct bf_grpc_budget *budget = p->budget;
    struct bf_grpc_spare *spare = p->spare;
    memset(p, 0, sizeof *p);
    p->max = max;
    p->budget = budget;
    p->spare = spare;
}

bool bf_grpc_parser_idle(const struct bf_grpc_parser *p)
{
    return p->hdr_len == 0 && !p->in_body;
}

void bf_grpc_prefix(uint8_t out[BF_GRPC_PREFIX], uint32_t len)
{
    out[0] = 0;
    out[1] = (uint8_t)(len >> 24);
    out[2] = (uint8_t)(len >> 16);
    out[3] = (uint8_t)(len >> 8);
    out[4] = (uint8_t)len;
}

static void end_message(struct bf_grpc_parser *p)
{
    release_buf(p);
    p->have = 0;
    p->in_body = false;
    p->hdr_len = 0;
}

int bf_grpc_parser_feed(struct bf_grpc_parser *p, const uint8_t *data, size_t len,
                        bf_grpc_msg_fn fn, void *arg)
{
    while (len > 0) {
        if (!p->in_body) {
            size_t take = BF_GRPC_PREFIX - p->hdr_len;
            if (take > len)
                take = len;
            memcpy(p->hdr + p->hdr_len, data, take);
            p->hdr_len = (uint8_t)(p->hdr_len + take);
            data += take;
            len -= take;
            if (p->hdr_len < BF_GRPC_PREFIX)
                return 0;
            if (p->hdr[0] > 1)
                return BF_NET_INTERNAL;
            p->compressed = p->hdr[0] == 1;
            p->msg_len = (uint32_t)p->hdr[1] << 24 | (uint32_t)p->hdr[2] << 16 |
                         (uint32_t)p->hdr[3] << 8 | p->hdr[4];
            if (p->msg_len > p->max)
                return BF_NET_RESOURCE_EXHAUSTED;
            p->in_body = true;
            p->have = 0;
            /* zero-copy: the whole body is in this piece */
            if (len >= p->msg_len) {
                p->msg_owned = NULL;
                p->msg_charge = 0;
                int r = fn(arg, data, p->msg_len, p->compressed);
                if (r == BF_GRPC_MSG_KEPT)
                    r = 0; /* nothing to keep: the bytes are the caller's */
                data += p->msg_len;
                len -= p->msg_len;
                end_message(p);
                if (r != 0)
                    return r;
                continue;
            }
        }
        size_t need = p->msg_len - p->have;
        size_t take = need < len ? need : len;
        if (take > 0) {
            if (p->have + take > p->cap)
                take_spare(p);
            if (p->have + take > p->cap) {
                size_t nc = p->cap ? p->cap : 4096;
                while (nc < p->have + take)
                    nc *= 2;
                if (nc > p->msg_len)
                    nc = p->msg_len;
                struct bf_grpc_budget *b = p->budget;
                if (b && (p->refused_by = bf_grpc_budget_charge(b, nc - p->cap)) != NULL) {
                    p->over_budget = true;
                    return BF_NET_RESOURCE_EXHAUSTED;
                }
                uint8_t *nb = buf_grow(p->buf, p->cap, p->have, nc);
                if (!nb) {
                    if (b)
                        bf_grpc_budget_refund(b, nc - p->cap);
                    return BF_NET_RESOURCE_EXHAUSTED;
                }
                p->buf = nb;
                p->cap = nc;
            }
            memcpy(p->buf + p->have, data, take);
            p->have += take;
            data += take;
            len -= take;
        }
        if (p->have == p->msg_len) {
            uint8_t *b = p->buf;
            size_t charged = b ? p->cap : 0;        /* also what b was allocated with */
            struct bf_grpc_budget *bud = p->budget; /* fn may free the parser */
            struct bf_grpc_spare *spare = p->spare;
            p->buf = NULL;
            p->cap = 0;
            size_t n = p->have;
            end_message(p);
            p->msg_owned = b;
            p->msg_charge = charged;
            int r = fn(arg, b ? b : (const uint8_t *)"", n, p->compressed);
            if (r == BF_GRPC_MSG_KEPT && b) {
                r = 0; /* the callback owns b and its charge now */
            } else {
                if (r == BF_GRPC_MSG_KEPT)
                    r = 0;
                if (bud) /* first: the spare's own charge may need the room */
                    bf_grpc_budget_refund(bud, charged);
                bf_grpc_spare_put(spare, b, charged);
            }
            if (r != 0)
                return r;
        }
    }
    return 0;
}

int bf_grpc_timeout_parse(const char *s, size_t len, int64_t *ns)
{
    if (len < 2 || len > 9)
        return -EINVAL;
    int64_t v = 0;
    for (size_t i = 0; i + 1 < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -EINVAL;
        v = v * 10 + (s[i] - '0');
    }
    int64_t mul;
    switch (s[len - 1]) {
    case 'H':
        mul = 3600LL * 1000000000LL;
        break;
    case 'M':
        mul = 60LL * 1000000000LL;
        break;
    case 'S':
        mul = 1000000000LL;
        break;
    case 'm':
        mul = 1000000LL;
        break;
    case 'u':
        mul = 1000LL;
        break;
    case 'n':
        mul = 1;
        break;
    default:
        return -EINVAL;
    }
    if (__builtin_mul_overflow(v, mul, ns))
        *ns = INT64_MAX;
    return 0;
}

size_t bf_grpc_timeout_format(int64_t ns, char *out)
{
    static const struct {
        char unit;
        int64_t ns;
    } units[] = {{'n', 1},
                 {'u', 1000LL},
                 {'m', 1000000LL},
                 {'S', 1000000000LL},
                 {'M', 60000000000LL},
                 {'H', 3600000000000LL}};
    if (ns < 1)
        ns = 1;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        int64_t v = ns / units[i].ns + (ns % units[i].ns != 0);
        if (v <= 99999999) {
            return (size_t)snprintf(out, 10, "%lld%c", (long long)v, units[i].unit);
        }
    }
    return (size_t)snprintf(out, 10, "99999999H");
}

char *bf_grpc_percent_encode(const char *msg)
{
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)msg; *p; p++)
        n += (*p < 0x20 || *p > 0x7e || *p == '%') ? 3 : 1;
    char *out = malloc(n + 1);
    if (!out)
        return NULL;
    static const char hex[] = "0123456789ABCDEF";
    char *o = out;
    for (const unsigned char *p = (const unsigned char *)msg; *p; p++) {
        if (*p < 0x20 || *p > 0x7e || *p == '%') {
            *o++ = '%';
            *o++ = hex[*p >> 4];
            *o++ = hex[*p & 15];
        } else {
            *o++ = (char)*p;
        }
    }
    *o = 0;
    return out;
}

static int hexval(uint8_t c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

char *bf_grpc_percent_decode(const uint8_t *s, size_t len)
{
    char *out = malloc(len + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '%' && i + 2 < len) {
            int hi = hexval(s[i + 1]), lo = hexval(s[i + 2]);
            if (hi >= 0 && lo >= 0) {
                out[o++] = (char)(hi << 4 | lo);
                i += 2;
                continue;
            }
        }
        out[o++] = (char)s[i];
    }
    out[o] = 0;
    return out;
}

bool bf_grpc_content_type_ok(const uint8_t *v, size_t len)
{
    static const char base[] = "application/grpc";
    size_t bl = sizeof base - 1;
    if (len < bl || strncasecmp((const char *)v, base, bl) != 0)
        return false;
    return len == bl || v[bl] == '+' || v[bl] == ';';
}

int bf_grpc_code_from_http(int http_status)
{
    switch (http_status) {
    case 400:
        return BF_NET_INTERNAL;
    case 401:
        return BF_NET_UNAUTHENTICATED;
    case 403:
        return BF_NET_PERMISSION_DENIED;
    case 404:
        return BF_NET_UNIMPLEMENTED;
    case 429:
    case 502:
    case 503:
    case 504:
        return BF_NET_UNAVAILABLE;
    default:
        return BF_NET_UNKNOWN;
    }
}

int bf_grpc_code_from_h2(uint32_t e)
{
    switch (e) {
    case 0x0: /* NO_ERROR */
    case 0x1: /* PROTOCOL_ERROR */
    case 0x2: /* INTERNAL_ERROR */
    case 0x3: /* FLOW_CONTROL_ERROR */
    case 0x4: /* SETTINGS_TIMEOUT */
    case 0x6: /* FRAME_SIZE_ERROR */
    case 0x9: /* COMPRESSION_ERROR */
    case 0xa: /* CONNECT_ERROR */
        return BF_NET_INTERNAL;
    case 0x7: /* REFUSED_STREAM */
        return BF_NET_UNAVAILABLE;
    case 0x8: /* CANCEL */
        return BF_NET_CANCELLED;
    case 0xb: /* ENHANCE_YOUR_CALM */
        return BF_NET_RESOURCE_EXHAUSTED;
    case 0xc: /* INADEQUATE_SECURITY */
        return BF_NET_PERMISSION_DENIED;
    default:
        return BF_NET_UNKNOWN;
    }
}

int bf_grpc_status_parse(const uint8_t *v, size_t len)
{
    if (len == 0 || len > 2)
        return BF_NET_UNKNOWN;
    int c = 0;
    for (size_t i = 0; i < len; i++) {
        if (v[i] < '0' || v[i] > '9')
            return BF_NET_UNKNOWN;
        c = c * 10 + (v[i] - '0');
    }
    return c < BF_NET_CODE_COUNT ? c : BF_NET_UNKNOWN;
}
