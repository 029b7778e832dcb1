/*
 * fuzz_http1.c — the HTTP/1.1 request-head parser behind the metrics and
 * health port (src/net/http1.c). Input: the bytes a client sent.
 *
 * Properties:
 *   - the result is > 0 (bytes of the head, never more than the input or
 *     BF_HTTP1_MAX_HEAD), 0 (incomplete) or one of the documented errors;
 *   - an accepted head ends with a blank line, parses identically when
 *     the bytes after it are cut off, and is incomplete when its last byte
 *     is cut off;
 *   - method, path and query are NUL-terminated inside their arrays;
 *   - an incomplete input stays incomplete or errs, never "succeeds", when
 *     a byte is removed from its end (incremental reads are consistent).
 */
#include <errno.h>

#include "fuzz.h"
#include "net/http1.h"

static void terminated(const char *s, size_t cap)
{
    FUZZ_CHECK(memchr(s, 0, cap) != NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    struct bf_http1_request r, r2;
    memset(&r, 0x5a, sizeof r);
    int rc = bf_http1_parse(buf, size, &r);
    FUZZ_CHECK(rc >= 0 || rc == -E2BIG || rc == -EINVAL || rc == -ENOTSUP || rc == -ENAMETOOLONG);
    if (rc > 0) {
        FUZZ_CHECK((size_t)rc <= size && rc <= BF_HTTP1_MAX_HEAD);
        FUZZ_CHECK(rc >= 2 && buf[rc - 1] == '\n');
        terminated(r.method, sizeof r.method);
        terminated(r.path, sizeof r.path);
        terminated(r.query, sizeof r.query);
        memset(&r2, 0x5a, sizeof r2);
        FUZZ_CHECK(bf_http1_parse(buf, (size_t)rc, &r2) == rc);
        FUZZ_CHECK(strcmp(r.method, r2.method) == 0 && strcmp(r.path, r2.path) == 0 &&
                   strcmp(r.query, r2.query) == 0 && r.minor == r2.minor &&
                   r.keep_alive == r2.keep_alive && r.has_body == r2.has_body);
        int cut = bf_http1_parse(buf, (size_t)rc - 1, &r2);
        FUZZ_CHECK(cut <= 0);
    } else if (rc == 0 && size > 0) {
        FUZZ_CHECK(bf_http1_parse(buf, size - 1, &r2) <= 0);
    }
    return 0;
}
