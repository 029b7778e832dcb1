/*
 * bigfleet/json.h — the one JSON writer of the code base (base layer): a
 * document written into a bf_strbuf (bigfleet/strbuf.h), with commas and
 * nesting tracked by the writer. Keys may be NULL inside arrays (and for the
 * top-level value).
 *
 * Strings (bf_json_escape): '"' and '\\' escaped, \n \t \r by name, every
 * other byte < 0x20 and 0x7f as \u00XX (NUL included: ids are bytes), valid
 * UTF-8 sequences copied (bf_utf8_len), any other byte as \u00XX (its
 * Latin-1 reading), so the document always parses. Numbers: integers exact,
 * doubles with 17 significant digits, floats with 7; NaN and Inf as null.
 * Nesting deeper than BF_JW_MAX_DEPTH stops being tracked (the caller's
 * shapes are fixed and shallow). Allocation failure is the buffer's
 * `failed` flag. One owner; not thread-safe.
 *
 * Not for the executor's audit log: it must escape as Go's encoding/json
 * does for slog, byte for byte (src/executor/audit.c).
 */
#ifndef BIGFLEET_JSON_H
#define BIGFLEET_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bigfleet/strbuf.h"

#define BF_JW_MAX_DEPTH 32
struct bf_jw {
    struct bf_strbuf *b;
    int depth;
    bool first[BF_JW_MAX_DEPTH];
};
void bf_jw_init(struct bf_jw *w, struct bf_strbuf *b);
void bf_jw_obj(struct bf_jw *w, const char *key);
void bf_jw_obj_end(struct bf_jw *w);
void bf_jw_arr(struct bf_jw *w, const char *key);
void bf_jw_arr_end(struct bf_jw *w);
void bf_jw_str(struct bf_jw *w, const char *key, const char *s);
void bf_jw_strn(struct bf_jw *w, const char *key, const char *s, size_t n);
void bf_jw_int(struct bf_jw *w, const char *key, int64_t v);
void bf_jw_uint(struct bf_jw *w, const char *key, uint64_t v);
void bf_jw_double(struct bf_jw *w, const char *key, double v); /* NaN/Inf -> null */
void bf_jw_float(struct bf_jw *w, const char *key, float v);   /* 7 significant digits */
void bf_jw_bool(struct bf_jw *w, const char *key, bool v);
void bf_jw_null(struct bf_jw *w, const char *key);
/* A JSON string literal of n bytes (escaped, quoted) appended to b. */
void bf_json_escape(struct bf_strbuf *b, const char *s, size_t n);

#endif
