/*
 * bigfleet/util.h — small helpers used everywhere: clocks, duration
 * parsing (Go syntax, as the Go original's flags), checked arithmetic.
 * Pure or reentrant; callable from any process or thread.
 */
#ifndef BIGFLEET_UTIL_H
#define BIGFLEET_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define BF_NS_PER_SEC 1000000000LL
#define BF_NS_PER_MS  1000000LL

/* Wall clock, nanoseconds since the Unix epoch (CLOCK_REALTIME). */
static inline int64_t bf_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * BF_NS_PER_SEC + ts.tv_nsec;
}
/* Monotonic clock in nanoseconds (CLOCK_MONOTONIC); for intervals only. */
static inline int64_t bf_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * BF_NS_PER_SEC + ts.tv_nsec;
}

/*
 * Parses a Go duration ("10s", "500ms", "1m30s", "2h", "1.5s", "0") into
 * nanoseconds. Units: ns us µs ms s m h. Returns 0 or -EINVAL / -ERANGE.
 */
int bf_parse_duration(const char *s, int64_t *ns);
/* Formats nanoseconds as a Go-style duration ("10s", "1m30s", "250ms"). */
size_t bf_format_duration(int64_t ns, char *buf, size_t n);

/* Overflow-checked size arithmetic for shared-memory layout computations:
 * return false (and leave *out unspecified) on overflow. */
static inline bool bf_add_size(size_t a, size_t b, size_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}
static inline bool bf_mul_size(size_t a, size_t b, size_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}
static inline size_t bf_align_up(size_t v, size_t a)
{
    return (v + a - 1) & ~(a - 1);
}

/* Reads 8 bytes from the kernel CSPRNG (getrandom); falls back to a clock
 * mix only if getrandom fails. */
uint64_t bf_random_u64(void);
/* 16 lowercase hex characters of a random 64-bit value, NUL-terminated
 * (the request_id / instruction_id format). */
void bf_random_hex16(char out[17]);

/*
 * Whether a listen address ("host:port", ":port", "[v6]:port") binds only
 * loopback: 1 for 127.0.0.0/8, ::1 (also IPv4-mapped) or a name all of whose
 * addresses are loopback (resolved with getaddrinfo: may block, startup
 * only); 0 for ":port" (every interface) or any other address; -EINVAL when
 * it does not parse or resolve.
 */
int bf_addr_is_loopback(const char *addr);

/*
 * Length of the valid UTF-8 sequence at s (n >= 1 bytes available): 1-4,
 * or 0 when it is not one (an overlong form, a surrogate, a code point over
 * U+10FFFF, a bad continuation byte, or a sequence cut by n). Pure. Used by
 * every writer that escapes untrusted bytes into JSON (audit log, inspect).
 */
size_t bf_utf8_len(const unsigned char *s, size_t n);

/*
 * Splits one CSV line (RFC 4180 fields; NUL-terminated, no line break;
 * modified in place) on commas into at most max fields: a field that starts
 * with '"' runs to the matching quote, with "" for a quote inside it. No
 * trimming. Returns the field count, max + 1 when the line has more fields,
 * or -1 for an unterminated quote or text after a closing quote. Pure.
 * The one CSV reader of the openb files (the simulated provider's catalog,
 * bigfleet-replay's pod lists).
 */
int bf_csv_split(char *line, char **fields, int max);

/*
 * Parses an unsigned decimal integer: one or more ASCII digits and nothing
 * else (no sign, no space, no base prefix). Returns 0 with *out set, -EINVAL
 * for anything that is not such a number, -ERANGE when it exceeds max (*out
 * untouched on error). Pure. Used by every parser of untrusted numbers in
 * files and flags that take plain counts (openb CSV, simulated-provider
 * config, replay trace).
 */
int bf_parse_digits(const char *s, uint64_t max, uint64_t *out);

/*
 * vsnprintf into a caller's error buffer: does nothing when err is NULL or
 * n is 0, truncates to n - 1 bytes otherwise. The one error-text helper of
 * functions that take (char *err, size_t errlen).
 */
void bf_errf(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif /* BIGFLEET_UTIL_H */
