/*
 * log.c — logfmt structured logging to stderr (see bigfleet/log.h).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "bigfleet/log.h"

static char g_role[32] = "bigfleet";
static _Atomic int g_level = BF_LOG_INFO; /* relaxed: threads read, SIGHUP writes */

void bf_log_init(const char *role, int min_level)
{
    snprintf(g_role, sizeof g_role, "%s", role ? role : "bigfleet");
    if (min_level >= BF_LOG_DEBUG && min_level <= BF_LOG_ERROR)
        atomic_store_explicit(&g_level, min_level, memory_order_relaxed);
}

void bf_log_set_level(int min_level)
{
    if (min_level >= BF_LOG_DEBUG && min_level <= BF_LOG_ERROR)
        atomic_store_explicit(&g_level, min_level, memory_order_relaxed);
}

int bf_log_level(void)
{
    return atomic_load_explicit(&g_level, memory_order_relaxed);
}

int bf_log_level_parse(const char *s)
{
    static const char *names[] = {"debug", "info", "warn", "error"};
    for (int i = 0; i < 4; i++)
        if (strcasecmp(s, names[i]) == 0)
            return i;
    if (strcasecmp(s, "warning") == 0)
        return BF_LOG_WARN;
    return -1;
}

void bf_vlog(int level, const char *msg, const char *kv_fmt, va_list ap)
{
    static const char *lv[] = {"debug", "info", "warn", "error"};
    if (level < atomic_load_explicit(&g_level, memory_order_relaxed))
        return;
    if (level < 0 || level > 3)
        level = BF_LOG_ERROR;
    char line[BF_LOG_LINE_MAX];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line,
                     "ts=%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ level=%s role=%s pid=%d msg=\"",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000, lv[level], g_role, (int)getpid());
    /* message, with quotes and backslashes escaped */
    for (const char *p = msg; *p && n < (int)sizeof line - 8; p++) {
        if (*p == '"' || *p == '\\')
            line[n++] = '\\';
        line[n++] = (*p == '\n') ? ' ' : *p;
    }
    line[n++] = '"';
    if (kv_fmt && *kv_fmt && n < (int)sizeof line - 2) {
        line[n++] = ' ';
        int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, kv_fmt, ap);
        if (m > 0)
            n += m < (int)(sizeof line - (size_t)n - 1) ? m : (int)(sizeof line - (size_t)n - 2);
    }
    if (n > (int)sizeof line - 1)
        n = (int)sizeof line - 1;
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}

void bf_log(int level, const char *msg, const char *kv_fmt, ...)
{
    va_list ap;
    va_start(ap, kv_fmt);
    bf_vlog(level, msg, kv_fmt, ap);
    va_end(ap);
}
