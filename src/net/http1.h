/*
 * http1.h — the HTTP/1.1 request-head parser behind bf_net_http_server
 * (private; unit-tested in test_net_http1.c). RFC 9112 subset: request
 * line, header fields, Connection / Content-Length / Transfer-Encoding.
 */
#ifndef BF_NET_HTTP1_H
#define BF_NET_HTTP1_H

#include <stdbool.h>
#include <stddef.h>

#define BF_HTTP1_MAX_HEAD   8192
#define BF_HTTP1_MAX_TARGET 2048

struct bf_http1_request {
    char method[16];
    char path[BF_HTTP1_MAX_TARGET]; /* without the query */
    char query[BF_HTTP1_MAX_TARGET];
    int minor;       /* HTTP/1.<minor> */
    bool keep_alive; /* after this request */
    bool has_body;   /* Content-Length > 0 or Transfer-Encoding */
};

/*
 * Parses one request head at the start of buf.
 *   > 0  bytes consumed (the head, including the blank line); *req filled
 *   0    incomplete: need more bytes
 *   -E2BIG    head larger than BF_HTTP1_MAX_HEAD (answer 431)
 *   -EINVAL   malformed (answer 400)
 *   -ENOTSUP  not HTTP/1.0 or 1.1 (answer 505)
 *   -ENAMETOOLONG  request target too long (answer 414)
 */
int bf_http1_parse(const char *buf, size_t len, struct bf_http1_request *req);

#endif /* BF_NET_HTTP1_H */
