/*
 * json.c — the JSON writer (bigfleet/json.h has the contract; moved from
 * bigfleet-inspect, which was its first user).
 */
#include <math.h>
#include <string.h>

#include "bigfleet/json.h"
#include "bigfleet/util.h"

void bf_json_escape(struct bf_strbuf *b, const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    bf_sb_put(b, "\"", 1);
    size_t run = 0; /* start of a run of bytes copied verbatim */
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
            i++;
            continue;
        }
        if (c >= 0x80) {
            size_t l = bf_utf8_len(s + i, n - i);
            if (l) {
                i += l;
                continue;
            }
        }
        bf_sb_put(b, s + run, i - run);
        if (c == '"')
            bf_sb_puts(b, "\\\"");
        else if (c == '\\')
            bf_sb_puts(b, "\\\\");
        else if (c == '\n')
            bf_sb_puts(b, "\\n");
        else if (c == '\t')
            bf_sb_puts(b, "\\t");
        else if (c == '\r')
            bf_sb_puts(b, "\\r");
        else
            bf_sb_printf(b, "\\u%04x", c);
        i++;
        run = i;
    }
    bf_sb_put(b, s + run, n - run);
    bf_sb_put(b, "\"", 1);
}

void bf_jw_init(struct bf_jw *w, struct bf_strbuf *b)
{
    w->b = b;
    w->depth = 0;
    w->first[0] = true;
}

static void jw_key(struct bf_jw *w, const char *key)
{
    if (!w->first[w->depth])
        bf_sb_put(w->b, ",", 1);
    w->first[w->depth] = false;
    if (key && w->depth > 0) {
        bf_json_escape(w->b, key, strlen(key));
        bf_sb_put(w->b, ":", 1);
    }
}

static void jw_open(struct bf_jw *w, const char *key, char c)
{
    jw_key(w, key);
    bf_sb_put(w->b, &c, 1);
    if (w->depth < BF_JW_MAX_DEPTH - 1)
        w->depth++;
    w->first[w->depth] = true;
}

static void jw_close(struct bf_jw *w, char c)
{
    bf_sb_put(w->b, &c, 1);
    if (w->depth > 0)
        w->depth--;
}

void bf_jw_obj(struct bf_jw *w, const char *key)
{
    jw_open(w, key, '{');
}
void bf_jw_obj_end(struct bf_jw *w)
{
    jw_close(w, '}');
}
void bf_jw_arr(struct bf_jw *w, const char *key)
{
    jw_open(w, key, '[');
}
void bf_jw_arr_end(struct bf_jw *w)
{
    jw_close(w, ']');
}

void bf_jw_strn(struct bf_jw *w, const char *key, const char *s, size_t n)
{
    jw_key(w, key);
    bf_json_escape(w->b, s ? s : "", s ? n : 0);
}

void bf_jw_str(struct bf_jw *w, const char *key, const char *s)
{
    bf_jw_strn(w, key, s, s ? strlen(s) : 0);
}

void bf_jw_int(struct bf_jw *w, const char *key, int64_t v)
{
    jw_key(w, key);
    bf_sb_printf(w->b, "%lld", (long long)v);
}

void bf_jw_uint(struct bf_jw *w, const char *key, uint64_t v)
{
    jw_key(w, key);
    bf_sb_printf(w->b, "%llu", (unsigned long long)v);
}

void bf_jw_double(struct bf_jw *w, const char *key, double v)
{
    jw_key(w, key);
    if (isnan(v) || isinf(v))
        bf_sb_puts(w->b, "null");
    else
        bf_sb_printf(w->b, "%.17g", v);
}

void bf_jw_float(struct bf_jw *w, const char *key, float v)
{
    jw_key(w, key);
    if (isnan(v) || isinf(v))
        bf_sb_puts(w->b, "null");
    else
        bf_sb_printf(w->b, "%.7g", (double)v);
}

void bf_jw_bool(struct bf_jw *w, const char *key, bool v)
{
    jw_key(w, key);
    bf_sb_puts(w->b, v ? "true" : "false");
}

void bf_jw_null(struct bf_jw *w, const char *key)
{
    jw_key(w, key);
    bf_sb_puts(w->b, "null");
}
