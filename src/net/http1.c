/*
 * http1.c — the small HTTP/1.1 server for /metrics, /healthz, /readyz
 * (bigfleet/net.h) and its request-head parser (http1.h).
 *
 * Design notes
 *   - Plaintext only, on conn.c. GET and HEAD; anything else 405. No request
 *     bodies (400). Persistent connections and pipelining: requests are
 *     answered in order, synchronously, from the handler callback.
 *   - Input is accumulated per connection up to BF_HTTP1_MAX_HEAD bytes;
 *     beyond that 431 and close. Responses queue in `out` until produce();
 *     more than 4 MiB unsent (a client pipelining without reading) closes
 *     the connection.
 *   - Time limits: a request head must be complete head_timeout_ns after
 *     its first byte (absolute: a client sending a byte now and then does
 *     not extend it; 408 and close), and a connection waiting for its next
 *     request is closed after idle_timeout_ns.
 *   - Slots: when max_connections are open, an accept evicts one to make
 *     room: the connection stuck longest inside a request head, else the
 *     one idle longest, else the oldest. A probe (/healthz) therefore always
 *     gets in, however many slow clients hold slots.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "bigfleet/log.h"
#include "bigfleet/strbuf.h"
#include "bigfleet/util.h"
#include "net/http1.h"
#include "net/net_internal.h"

/* ------------------------------------------------------------ parser */

static const char *find_crlfcrlf(const char *b, size_t len)
{
    for (size_t i = 0; i + 3 < len; i++)
        if (b[i] == '\r' && b[i + 1] == '\n' && b[i + 2] == '\r' && b[i + 3] == '\n')
            return b + i;
    return NULL;
}

static bool is_tchar(int c)
{
    return isalnum(c) || strchr("!#$%&'*+-.^_`|~", c);
}

static bool token_has(const char *v, size_t vl, const char *tok)
{
    /* comma-separated, case-insensitive */
    size_t tl = strlen(tok);
    size_t i = 0;
    while (i < vl) {
        while (i < vl && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
            i++;
        size_t s = i;
        while (i < vl && v[i] != ',')
            i++;
        size_t e = i;
        while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t'))
            e--;
        if (e - s == tl && strncasecmp(v + s, tok, tl) == 0)
            return true;
    }
    return false;
}

int bf_http1_parse(const char *buf, size_t len, struct bf_http1_request *req)
{
    /* reject non-HTTP early (a TLS ClientHello, binary junk) instead of
     * waiting for a blank line that will never come */
    for (size_t i = 0; i < len; i++) {
        if (buf[i] == ' ' && i > 0)
            break;
        if (i >= sizeof req->method - 1 || !is_tchar((unsigned char)buf[i]))
            return -EINVAL;
    }
    size_t scan = len < BF_HTTP1_MAX_HEAD ? len : BF_HTTP1_MAX_HEAD;
    const char *end = find_crlfcrlf(buf, scan);
    if (!end)
        return len >= BF_HTTP1_MAX_HEAD ? -E2BIG : 0;
    size_t head_len = (size_t)(end - buf) + 4;
    memset(req, 0, sizeof *req);
    /* request line: method SP target SP HTTP/1.x CRLF */
    const char *p = buf, *le = memchr(buf, '\r', head_len);
    if (!le || le[1] != '\n')
        return -EINVAL;
    const char *sp1 = memchr(p, ' ', (size_t)(le - p));
    if (!sp1 || sp1 == p || (size_t)(sp1 - p) >= sizeof req->method)
        return -EINVAL;
    for (const char *q = p; q < sp1; q++)
        if (!is_tchar((unsigned char)*q))
            return -EINVAL;
    memcpy(req->method, p, (size_t)(sp1 - p));
    const char *t = sp1 + 1;
    const char *sp2 = memchr(t, ' ', (size_t)(le - t));
    if (!sp2 || sp2 == t)
        return -EINVAL;
    size_t tl = (size_t)(sp2 - t);
    for (size_t i = 0; i < tl; i++)
        if ((unsigned char)t[i] <= 0x20 || (unsigned char)t[i] >= 0x7f)
            return -EINVAL;
    if (t[0] != '/')
        return -EINVAL; /* origin-form only */
    const char *qm = memchr(t, '?', tl);
    size_t pl = qm ? (size_t)(qm - t) : tl;
    size_t ql = qm ? tl - pl - 1 : 0;
    if (pl >= sizeof req->path || ql >= sizeof req->query)
        return -ENAMETOOLONG;
    memcpy(req->path, t, pl);
    if (qm)
        memcpy(req->query, qm + 1, ql);
    const char *ver = sp2 + 1;
    size_t vl = (size_t)(le - ver);
    if (vl != 8 || memcmp(ver, "HTTP/1.", 7) != 0 || !isdigit((unsigned char)ver[7]))
        return vl >= 5 && memcmp(ver, "HTTP/", 5) == 0 ? -ENOTSUP : -EINVAL;
    req->minor = ver[7] - '0';
    if (req->minor > 1)
        return -ENOTSUP;
    req->keep_alive = req->minor == 1;
    /* header fields */
    p = le + 2;
    const char *hend = buf + head_len - 2; /* the final CRLF */
    bool have_cl = false;
    while (p < hend) {
        le = memchr(p, '\r', (size_t)(hend - p) + 1);
        if (!le || le[1] != '\n')
            return -EINVAL;
        const char *colon = memchr(p, ':', (size_t)(le - p));
        if (!colon || colon == p)
            return -EINVAL;
        for (const char *q = p; q < colon; q++)
            if (!is_tchar((unsigned char)*q))
                return -EINVAL; /* also rejects obs-fold and "name :" */
        const char *v = colon + 1;
        while (v < le && (*v == ' ' || *v == '\t'))
            v++;
        const char *ve = le;
        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
            ve--;
        size_t nl = (size_t)(colon - p), vlen = (size_t)(ve - v);
        for (const char *q = v; q < ve; q++)
            if ((unsigned char)*q < 0x20 && *q != '\t')
                return -EINVAL;
        if (nl == 10 && strncasecmp(p, "connection", 10) == 0) {
            if (token_has(v, vlen, "close"))
                req->keep_alive = false;
            else if (token_has(v, vlen, "keep-alive"))
                req->keep_alive = true;
        } else if (nl == 14 && strncasecmp(p, "content-length", 14) == 0) {
            if (vlen == 0 || have_cl)
                return -EINVAL;
            have_cl = true;
            for (size_t i = 0; i < vlen; i++)
                if (!isdigit((unsigned char)v[i]))
                    return -EINVAL;
            for (size_t i = 0; i < vlen; i++)
                if (v[i] != '0')
                    req->has_body = true;
        } else if (nl == 17 && strncasecmp(p, "transfer-encoding", 17) == 0) {
            req->has_body = true;
        }
        p = le + 2;
    }
    return (int)head_len;
}

/* ------------------------------------------------------------ server */

struct bf_net_http_response {
    int status;
    char content_type[128];
    char *body;
    size_t len, cap;
    bool oom;
};

struct bf_net_http_server {
    struct bf_net_loop *loop;
    struct bf_listener *listener;
    struct bf_net_http_server_opts o;
    struct bf_net_stats stats;
    struct bf_list conns;
    uint32_t nconns;
    uint16_t port;
    int depth; /* handler calls on the stack; a free inside one is deferred */
    bool free_pending;
    int64_t evict_log_ns, head_log_ns; /* rate-limited log lines */
};

struct hconn {
    struct conn c;
    struct bf_net_http_server *hs;
    struct bf_list link;
    char in[BF_HTTP1_MAX_HEAD];
    size_t in_len;
    struct obuf out; /* unsent responses */
    bool close_after;
    int64_t head_start; /* mono ns of the first byte of the pending request head; 0 = none */
    int64_t idle_since; /* mono ns since the connection waits for a request */
    struct bf_net_timer timer;
};

#define HTTP_MAX_UNSENT (4u << 20)

void bf_net_http_set_status(struct bf_net_http_response *r, int status, const char *content_type)
{
    if (status >= 100 && status <= 999)
        r->status = status;
    if (content_type)
        snprintf(r->content_type, sizeof r->content_type, "%s", content_type);
}

int bf_net_http_append(struct bf_net_http_response *r, const void *data, size_t len)
{
    if (r->oom)
        return -ENOMEM;
    if (bf_grow((void **)&r->body, &r->cap, r->len + len + 1, 1)) {
        r->oom = true;
        return -ENOMEM;
    }
    memcpy(r->body + r->len, data, len);
    r->len += len;
    r->body[r->len] = 0;
    return 0;
}

int bf_net_http_printf(struct bf_net_http_response *r, const char *fmt, ...)
{
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -EINVAL;
    if ((size_t)n < sizeof small)
        return bf_net_http_append(r, small, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big) {
        r->oom = true;
        return -ENOMEM;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    int rc = bf_net_http_append(r, big, (size_t)n);
    free(big);
    return rc;
}

static const char *reason(int st)
{
    switch (st) {
    case 200:
        return "OK";
    case 204:
        return "No Content";
    case 400:
        return "Bad Request";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 414:
        return "URI Too Long";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 503:
        return "Service Unavailable";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Status";
    }
}

static int queue_response(struct hconn *h, int status, const char *ctype, const char *body,
                          size_t blen, bool head_only, bool keep_alive)
{
    char hdr[512];
    int n = snprintf(hdr, sizeof hdr,
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Cache-Control: no-store\r\nConnection: %s\r\n\r\n",
                     status, reason(status), ctype, blen, keep_alive ? "keep-alive" : "close");
    struct obuf *o = &h->out;
    size_t need = (size_t)n + (head_only ? 0 : blen);
    if (obuf_reserve(o, need))
        return -ENOMEM;
    memcpy(o->p + o->len, hdr, (size_t)n);
    o->len += (size_t)n;
    if (!head_only && blen) {
        memcpy(o->p + o->len, body, blen);
        o->len += blen;
    }
    h->hs->stats.http_requests++;
    return 0;
}

static int error_response(struct hconn *h, int status, const char *msg)
{
    h->close_after = true;
    return queue_response(h, status, "text/plain; charset=utf-8", msg, strlen(msg), false, false);
}

static int handle_request(struct hconn *h, const struct bf_http1_request *rq)
{
    struct bf_net_http_server *hs = h->hs;
    bool keep = rq->keep_alive;
    if (!keep)
        h->close_after = true;
    if (rq->has_body) {
        hs->stats.protocol_errors++;
        return error_response(h, 400, "request bodies are not accepted\n");
    }
    bool head = strcmp(rq->method, "HEAD") == 0;
    if (!head && strcmp(rq->method, "GET") != 0) {
        h->close_after = h->close_after || !keep;
        return queue_response(h, 405, "text/plain; charset=utf-8", "method not allowed\n", 19,
                              false, keep);
    }
    struct bf_net_http_response resp = {.status = 200};
    strcpy(resp.content_type, "text/plain; charset=utf-8");
    struct bf_net_http_request req = {.method = rq->method, .path = rq->path, .query = rq->query};
    hs->o.handler(&req, &resp, hs->o.arg);
    int r;
    if (resp.oom)
        r = queue_response(h, 500, "text/plain; charset=utf-8", "out of memory\n", 14, head, keep);
    else
        r = queue_response(h, resp.status, resp.content_type, resp.body ? resp.body : "", resp.len,
                           head, keep);
    free(resp.body);
    return r;
}

static void http_destroy(struct bf_net_http_server *hs);

static int hconn_on_data_inner(struct hconn *h, const uint8_t *p, size_t n);

static int hconn_on_data(struct conn *c, const uint8_t *p, size_t n)
{
    struct hconn *h = BF_CONTAINER_OF(c, struct hconn, c);
    struct bf_net_http_server *hs = h->hs;
    hs->depth++;
    int r = hconn_on_data_inner(h, p, n);
    if (--hs->depth == 0 && hs->free_pending)
        http_destroy(hs);
    return r;
}

/* One timer per connection: the head deadline while a request head is
 * pending (never moved by its bytes), else the idle limit. */
static void hconn_arm(struct hconn *h)
{
    struct bf_net_http_server *hs = h->hs;
    if (!hs)
        return;
    int64_t at = h->head_start ? h->head_start + hs->o.head_timeout_ns
                               : h->idle_since + hs->o.idle_timeout_ns;
    bf_net_timer_start(&h->timer, at - bf_mono_ns(), 0);
}

static int hconn_on_data_inner(struct hconn *h, const uint8_t *p, size_t n)
{
    struct conn *c = &h->c;
    struct bf_net_http_server *hs = h->hs;
    int64_t now = bf_mono_ns();
    if (h->in_len == 0 && !h->close_after && !h->head_start)
        h->head_start = now; /* a new connection's clock runs from the accept */
    while (n > 0 && !h->close_after) {
        size_t take = sizeof h->in - h->in_len;
        if (take > n)
            take = n;
        memcpy(h->in + h->in_len, p, take);
        h->in_len += take;
        p += take;
        n -= take;
        for (;;) {
            if (h->close_after || h->in_len == 0)
                break;
            struct bf_http1_request rq;
            int r = bf_http1_parse(h->in, h->in_len, &rq);
            if (r == 0) {
                if (h->in_len == sizeof h->in)
                    r = -E2BIG;
                else
                    break;
            }
            if (r < 0) {
                hs->stats.protocol_errors++;
                BF_WARN("HTTP/1.1: bad request", "peer=%s err=%d", c->peer, r);
                int st = r == -E2BIG ? 431 : r == -ENOTSUP ? 505 : r == -ENAMETOOLONG ? 414 : 400;
                if (error_response(h, st, "bad request\n") < 0)
                    return -ENOMEM;
                h->in_len = 0;
                break;
            }
            if (handle_request(h, &rq) < 0)
                return -ENOMEM;
            if (hs->free_pending)
                return 0;
            memmove(h->in, h->in + r, h->in_len - (size_t)r);
            h->in_len -= (size_t)r;
            /* a pipelined request already begun: its clock starts now */
            h->head_start = h->in_len ? now : 0;
            h->idle_since = now;
            if (h->out.len > HTTP_MAX_UNSENT)
                return -ENOBUFS;
        }
    }
    if (h->in_len == 0)
        h->head_start = 0;
    if (!h->close_after)
        hconn_arm(h);
    return 0;
}

static int hconn_produce(struct conn *c)
{
    struct hconn *h = BF_CONTAINER_OF(c, struct hconn, c);
    if (h->out.len == 0)
        return 0;
    int r = bf_conn_write(c, h->out.p, h->out.len);
    free(h->out.p);
    memset(&h->out, 0, sizeof h->out);
    return r;
}

static bool hconn_done(struct conn *c)
{
    struct hconn *h = BF_CONTAINER_OF(c, struct hconn, c);
    return h->close_after && h->out.len == 0;
}

static int hconn_on_ready(struct conn *c)
{
    (void)c;
    return 0;
}

static void hconn_on_close(struct conn *c, int err)
{
    (void)err;
    struct hconn *h = BF_CONTAINER_OF(c, struct hconn, c);
    bf_net_timer_stop(&h->timer);
    free(h->out.p);
    memset(&h->out, 0, sizeof h->out);
    if (h->hs) {
        bf_list_del(&h->link);
        h->hs->nconns--;
        h->hs = NULL;
    }
}

static void hconn_release(struct conn *c)
{
    free(BF_CONTAINER_OF(c, struct hconn, c));
}

static const struct conn_ops hconn_ops = {
    .on_ready = hconn_on_ready,
    .on_data = hconn_on_data,
    .produce = hconn_produce,
    .done = hconn_done,
    .on_close = hconn_on_close,
    .release = hconn_release,
};

static void hconn_timer_cb(struct bf_net_timer *t, void *arg)
{
    (void)t;
    struct hconn *h = arg;
    struct bf_net_http_server *hs = h->hs;
    if (hs && h->head_start && !h->close_after) {
        hs->stats.head_timeouts++;
        int64_t now = bf_mono_ns();
        if (!hs->head_log_ns || now - hs->head_log_ns >= 10 * BF_NS_PER_SEC) {
            hs->head_log_ns = now;
            BF_WARN("HTTP/1.1: request head not complete in time; closing",
                    "peer=%s bytes=%zu "
                    "head_timeout_ms=%lld total=%llu",
                    h->c.peer, h->in_len, (long long)(hs->o.head_timeout_ns / BF_NS_PER_MS),
                    (unsigned long long)hs->stats.head_timeouts);
        }
        h->in_len = 0;
        if (error_response(h, 408, "request head not received in time\n") == 0) {
            bf_conn_mark_dirty(&h->c); /* 408, then close (the linger bounds a non-reader) */
            return;
        }
    }
    bf_conn_abort(&h->c, -ETIMEDOUT);
}

/* Every slot is taken: close the connection a new one is most entitled to replace. */
static void http_evict_one(struct bf_net_http_server *hs)
{
    struct hconn *slow = NULL, *idle = NULL, *oldest = NULL;
    for (struct bf_list *it = hs->conns.next; it != &hs->conns; it = it->next) {
        struct hconn *h = BF_CONTAINER_OF(it, struct hconn, link);
        if (!oldest)
            oldest = h;
        if (h->head_start) {
            if (!slow || h->head_start < slow->head_start)
                slow = h;
        } else if (h->out.len == 0 && !h->close_after && bf_conn_queued(&h->c) == 0) {
            if (!idle || h->idle_since < idle->idle_since)
                idle = h;
        }
    }
    struct hconn *v = slow ? slow : idle ? idle : oldest;
    if (!v)
        return;
    hs->stats.conns_evicted++;
    int64_t now = bf_mono_ns();
    if (!hs->evict_log_ns || now - hs->evict_log_ns >= 10 * BF_NS_PER_SEC) {
        hs->evict_log_ns = now;
        BF_WARN("HTTP/1.1: every connection slot taken; evicting one",
                "peer=%s why=%s "
                "slots=%u total=%llu",
                v->c.peer,
                v == slow   ? "slowest request head"
                : v == idle ? "longest idle"
                            : "oldest",
                hs->o.max_connections, (unsigned long long)hs->stats.conns_evicted);
    }
    bf_conn_abort(&v->c, -ECONNRESET);
}

static void http_on_accept(void *owner, int fd)
{
    struct bf_net_http_server *hs = owner;
    hs->stats.conns_accepted++;
    if (hs->nconns >= hs->o.max_connections)
        http_evict_one(hs);
    if (hs->nconns >= hs->o.max_connections) {
        hs->stats.conns_rejected++;
        close(fd);
        return;
    }
    struct hconn *h = malloc(sizeof *h);
    if (!h) {
        hs->stats.conns_rejected++;
        close(fd);
        return;
    }
    memset(h, 0, offsetof(struct hconn, in));
    h->in_len = 0;
    memset(&h->out, 0, sizeof h->out);
    h->close_after = false;
    h->hs = hs;
    if (bf_conn_init_accepted(&h->c, hs->loop, fd, &hconn_ops, &hs->stats, NULL) < 0) {
        free(h);
        close(fd);
        hs->stats.conns_rejected++;
        return;
    }
    bf_list_add_tail(&hs->conns, &h->link);
    hs->nconns++;
    bf_timer_init(&h->timer, hs->loop, hconn_timer_cb, h);
    /* a new connection's first request head is timed from the accept */
    h->idle_since = h->head_start = bf_mono_ns();
    hconn_arm(h);
}

int bf_net_http_server_new(struct bf_net_loop *loop, const struct bf_net_http_server_opts *opts,
                           struct bf_net_http_server **out)
{
    if (!loop || !opts || !opts->addr || !opts->handler || !out)
        return -EINVAL;
    struct bf_net_http_server *hs = calloc(1, sizeof *hs);
    if (!hs)
        return -ENOMEM;
    hs->loop = loop;
    hs->o = *opts;
    hs->o.addr = NULL;
    if (!hs->o.max_connections)
        hs->o.max_connections = 256;
    if (!hs->o.idle_timeout_ns)
        hs->o.idle_timeout_ns = 30 * BF_NS_PER_SEC;
    if (!hs->o.head_timeout_ns)
        hs->o.head_timeout_ns = 5 * BF_NS_PER_SEC;
    bf_list_init(&hs->conns);
    int r = opts->listen_fd > 0 ? bf_listener_adopt(loop, opts->listen_fd, true, http_on_accept, hs,
                                                    &hs->stats.accept_errors, &hs->listener)
                                : bf_listener_open(loop, opts->addr, http_on_accept, hs,
                                                   &hs->stats.accept_errors, &hs->listener);
    if (r < 0) {
        BF_ERROR("HTTP server: cannot listen", "addr=\"%s\" err=\"%s\"", opts->addr, strerror(-r));
        free(hs);
        return r;
    }
    hs->port = hs->listener->port;
    BF_INFO("HTTP server listening", "addr=\"%s\" port=%u", opts->addr, hs->port);
    *out = hs;
    return 0;
}

uint16_t bf_net_http_server_port(const struct bf_net_http_server *hs)
{
    return hs->port;
}

void bf_net_http_server_stats(const struct bf_net_http_server *hs, struct bf_net_stats *out)
{
    *out = hs->stats;
}

static void http_destroy(struct bf_net_http_server *hs)
{
    hs->free_pending = false;
    hs->depth = 1 << 30; /* no re-entry while tearing down */
    bf_listener_close(hs->listener);
    while (!bf_list_empty(&hs->conns)) {
        struct hconn *h = BF_CONTAINER_OF(hs->conns.next, struct hconn, link);
        bf_conn_abort(&h->c, -ECANCELED);
    }
    free(hs);
}

void bf_net_http_server_free(struct bf_net_http_server *hs)
{
    if (!hs || hs->free_pending)
        return;
    if (hs->depth > 0) {
        hs->free_pending = true;
        return;
    }
    http_destroy(hs);
}
