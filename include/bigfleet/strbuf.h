/*
 * bigfleet/strbuf.h — the one growable byte/string buffer and the one
 * vector-grow helper of the code base (base layer: no dependency on any
 * other module of ours).
 *
 * bf_strbuf: bytes appended at the end, always NUL-terminated once anything
 * was appended (p[len] == 0), capacity doubled from 4096 bytes. A zero-
 * initialised struct is an empty buffer. Allocation failure never aborts:
 * it sets `failed`, drops that append and every later one, and keeps what
 * was already there; the owner checks `failed` once, where it uses the
 * result (a partial document is never sent as a whole one). One owner; not
 * thread-safe.
 *
 * bf_grow: makes room for `need` elements of `elsz` bytes in a malloc'd
 * array (*p, capacity *cap in elements), doubling from 8; 0 or -ENOMEM
 * (array and capacity unchanged; also when need * elsz overflows).
 */
#ifndef BIGFLEET_STRBUF_H
#define BIGFLEET_STRBUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

struct bf_strbuf {
    char *p;     /* NULL until the first append */
    size_t len;  /* bytes, excluding the NUL */
    size_t cap;  /* allocated bytes */
    bool failed; /* an append was dropped for lack of memory */
};

void bf_sb_put(struct bf_strbuf *b, const void *s, size_t n);
void bf_sb_puts(struct bf_strbuf *b, const char *s);
void bf_sb_printf(struct bf_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void bf_sb_vprintf(struct bf_strbuf *b, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
/* Empties the buffer (keeps the memory; clears `failed`). */
void bf_sb_reset(struct bf_strbuf *b);
/* Releases the memory; b is an empty buffer again. */
void bf_sb_free(struct bf_strbuf *b);

int bf_grow(void **p, size_t *cap, size_t need, size_t elsz);

#endif
