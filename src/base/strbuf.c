/*
 * strbuf.c — the growable buffer and the vector-grow helper
 * (bigfleet/strbuf.h has the contract).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/strbuf.h"

/* bf_grow, doubling from `first` elements */
static int grow_from(void **p, size_t *cap, size_t need, size_t elsz, size_t first)
{
    if (need <= *cap)
        return 0;
    size_t nc = *cap ? *cap : first;
    while (nc < need) {
        if (nc > SIZE_MAX / 2)
            return -ENOMEM;
        nc *= 2;
    }
    size_t bytes;
    if (__builtin_mul_overflow(nc, elsz, &bytes))
        return -ENOMEM;
    void *q = realloc(*p, bytes);
    if (!q)
        return -ENOMEM;
    *p = q;
    *cap = nc;
    return 0;
}

int bf_grow(void **p, size_t *cap, size_t need, size_t elsz)
{
    return grow_from(p, cap, need, elsz, 8);
}

/* room for n more bytes and the NUL; false (failed set) when there is none */
static bool sb_room(struct bf_strbuf *b, size_t n)
{
    if (b->failed)
        return false;
    size_t need;
    if (__builtin_add_overflow(b->len, n, &need) || __builtin_add_overflow(need, 1, &need)) {
        b->failed = true;
        return false;
    }
    if (grow_from((void **)&b->p, &b->cap, need, 1, 4096)) {
        b->failed = true;
        return false;
    }
    return true;
}

void bf_sb_put(struct bf_strbuf *b, const void *s, size_t n)
{
    if (!sb_room(b, n))
        return;
    if (n)
        memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void bf_sb_puts(struct bf_strbuf *b, const char *s)
{
    bf_sb_put(b, s, strlen(s));
}

void bf_sb_vprintf(struct bf_strbuf *b, const char *fmt, va_list ap)
{
    va_list again;
    va_copy(again, ap);
    char tmp[512];
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    if (n >= 0 && (size_t)n < sizeof tmp)
        bf_sb_put(b, tmp, (size_t)n);
    else if (n >= 0 && sb_room(b, (size_t)n)) {
        vsnprintf(b->p + b->len, (size_t)n + 1, fmt, again);
        b->len += (size_t)n;
    }
    va_end(again);
}

void bf_sb_printf(struct bf_strbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bf_sb_vprintf(b, fmt, ap);
    va_end(ap);
}

void bf_sb_reset(struct bf_strbuf *b)
{
    b->len = 0;
    b->failed = false;
    if (b->p)
        b->p[0] = 0;
}

void bf_sb_free(struct bf_strbuf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
    b->failed = false;
}
