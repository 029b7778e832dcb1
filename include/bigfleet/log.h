/*
 * bigfleet/log.h — structured logs to stderr, one line per event, logfmt:
 *
 *   ts=2026-11-22T04:15:46.123456Z level=info role=cycle pid=4242 msg="cycle done" cycle=7 ms=1.2
 *
 * The message is always quoted; the key=value tail is printf-formatted by the
 * caller (quote string values that may contain spaces: key="%s"). Each line
 * is written with a single write(2), so concurrent processes sharing stderr
 * never interleave within a line (lines up to BF_LOG_LINE_MAX bytes).
 *
 * Process-wide state (role, level) is set once by bf_log_init(); the calls
 * are async-signal-unsafe but thread-safe (no shared buffers).
 */
#ifndef BIGFLEET_LOG_H
#define BIGFLEET_LOG_H

#include <stdarg.h>

enum bf_log_level { BF_LOG_DEBUG = 0, BF_LOG_INFO = 1, BF_LOG_WARN = 2, BF_LOG_ERROR = 3 };

#define BF_LOG_LINE_MAX 4096

/* role: a short process role ("supervisor", "cycle", ...); copied. */
void bf_log_init(const char *role, int min_level);
/* Parses "debug", "info", "warn", "error"; -1 if unknown. */
int bf_log_level_parse(const char *s);
int bf_log_level(void);
/* Changes the minimum level (a SIGHUP reload); out-of-range values are ignored. */
void bf_log_set_level(int min_level);

void bf_log(int level, const char *msg, const char *kv_fmt, ...)
    __attribute__((format(printf, 3, 4)));
void bf_vlog(int level, const char *msg, const char *kv_fmt, va_list ap);

#define BF_DEBUG(msg, ...) bf_log(BF_LOG_DEBUG, msg, __VA_ARGS__)
#define BF_INFO(msg, ...)  bf_log(BF_LOG_INFO, msg, __VA_ARGS__)
#define BF_WARN(msg, ...)  bf_log(BF_LOG_WARN, msg, __VA_ARGS__)
#define BF_ERROR(msg, ...) bf_log(BF_LOG_ERROR, msg, __VA_ARGS__)

#endif /* BIGFLEET_LOG_H */
