/*
 * scrape.c — reading the shard's /metrics: a blocking HTTP/1.1 GET (one
 * request per connection, "Connection: close") and a parser of the
 * Prometheus text exposition format (version 0.0.4).
 *
 * The replay uses it from a helper thread (progress: actions/s, machines by
 * state) and once at the end (the report's shard_metrics); nothing here
 * touches the event loop. Every call is reentrant.
 */
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bigfleet/util.h"
#include "bigfleet/strbuf.h"
#include "replay.h"

/* ------------------------------------------------------------ parser */

static bool isalnum_ascii(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

static int push(struct rp_prom *p, const char *name, size_t nl, const char *lab, size_t ll,
                double v)
{
    if (p->n == p->cap && bf_grow((void **)&p->v, &p->cap, p->n + 1, sizeof *p->v))
        return -ENOMEM;
    struct rp_prom_sample *s = &p->v[p->n];
    s->name = strndup(name, nl);
    s->labels = strndup(lab, ll);
    s->value = v;
    if (!s->name || !s->labels) {
        free(s->name);
        free(s->labels);
        return -ENOMEM;
    }
    p->n++;
    return 0;
}

int rp_prom_parse(const char *text, size_t len, struct rp_prom *out)
{
    memset(out, 0, sizeof *out);
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol)
            eol = end;
        const char *q = p;
        while (q < eol && (*q == ' ' || *q == '\t'))
            q++;
        if (q == eol || *q == '#') {
            p = eol + 1;
            continue;
        }
        const char *name = q;
        while (q < eol && (isalnum_ascii(*q) || *q == '_' || *q == ':'))
            q++;
        size_t nl = (size_t)(q - name);
        const char *lab = "";
        size_t ll = 0;
        if (nl == 0)
            goto bad;
        if (q < eol && *q == '{') {
            lab = ++q;
            bool inq = false;
            while (q < eol && (inq || *q != '}')) {
                if (inq && *q == '\\' && q + 1 < eol)
                    q++;
                else if (*q == '"')
                    inq = !inq;
                q++;
            }
            if (q >= eol)
                goto bad;
            ll = (size_t)(q - lab);
            q++;
        }
        while (q < eol && (*q == ' ' || *q == '\t'))
            q++;
        char num[64];
        size_t k = 0;
        while (q < eol && *q != ' ' && *q != '\t' && k + 1 < sizeof num)
            num[k++] = *q++;
        num[k] = 0;
        char *e;
        double v = strtod(num, &e);
        if (k == 0 || *e)
            goto bad;
        if (push(out, name, nl, lab, ll, v)) {
            rp_prom_free(out);
            return -ENOMEM;
        }
        p = eol + 1;
        continue;
    bad:
        rp_prom_free(out);
        return -EINVAL;
    }
    return 0;
}

void rp_prom_free(struct rp_prom *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++) {
        free(p->v[i].name);
        free(p->v[i].labels);
    }
    free(p->v);
    memset(p, 0, sizeof *p);
}

bool rp_prom_label(const char *labels, const char *key, char *buf, size_t n)
{
    size_t kl = strlen(key);
    const char *p = labels;
    while (*p) {
        while (*p == ' ' || *p == ',')
            p++;
        const char *k = p;
        while (*p && *p != '=')
            p++;
        if (!*p)
            return false;
        size_t this_kl = (size_t)(p - k);
        p++;
        if (*p != '"')
            return false;
        p++;
        size_t o = 0;
        bool match = this_kl == kl && !strncmp(k, key, kl);
        while (*p && *p != '"') {
            char c = *p;
            if (c == '\\' && p[1]) {
                p++;
                c = *p == 'n' ? '\n' : *p;
            }
            if (match && o + 1 < n)
                buf[o++] = c;
            p++;
        }
        if (*p == '"')
            p++;
        if (match) {
            if (n)
                buf[o] = 0;
            return true;
        }
    }
    return false;
}

/* Every k="v" of match (comma separated) holds in labels. */
static bool labels_match(const char *labels, const char *match)
{
    if (!match || !*match)
        return true;
    const char *p = match;
    while (*p) {
        const char *eq = strchr(p, '=');
        if (!eq || eq[1] != '"')
            return false;
        const char *vs = eq + 2, *ve = strchr(vs, '"');
        if (!ve)
            return false;
        char key[128], want[256], have[256];
        snprintf(key, sizeof key, "%.*s", (int)(eq - p), p);
        snprintf(want, sizeof want, "%.*s", (int)(ve - vs), vs);
        if (!rp_prom_label(labels, key, have, sizeof have) || strcmp(have, want))
            return false;
        p = ve + 1;
        while (*p == ',' || *p == ' ')
            p++;
    }
    return true;
}

double rp_prom_sum(const struct rp_prom *p, const char *name, const char *match)
{
    double s = 0;
    bool any = false;
    for (size_t i = 0; i < p->n; i++) {
        if (!strcmp(p->v[i].name, name) && labels_match(p->v[i].labels, match)) {
            s += p->v[i].value;
            any = true;
        }
    }
    return any ? s : NAN;
}

struct le_count {
    double le, count;
};
static int cmp_le(const void *a, const void *b)
{
    double x = ((const struct le_count *)a)->le, y = ((const struct le_count *)b)->le;
    return x < y ? -1 : (x > y);
}

double rp_prom_hist_quantile(const struct rp_prom *p, const char *name, double q)
{
    char bname[256];
    snprintf(bname, sizeof bname, "%s_bucket", name);
    struct le_count *v = NULL;
    size_t n = 0, cap = 0;
    for (size_t i = 0; i < p->n; i++) {
        if (strcmp(p->v[i].name, bname))
            continue;
        char les[64];
        if (!rp_prom_label(p->v[i].labels, "le", les, sizeof les))
            continue;
        double le = strtod(les, NULL);
        size_t k = 0;
        while (k < n && v[k].le != le)
            k++;
        if (k == n) {
            if (n == cap && bf_grow((void **)&v, &cap, n + 1, sizeof *v)) {
                free(v);
                return NAN;
            }
            v[n].le = le;
            v[n].count = 0;
            n++;
        }
        v[k].count += p->v[i].value;
    }
    double r = NAN;
    if (n == 0 || v == NULL)
        goto out;
    qsort(v, n, sizeof *v, cmp_le);
    double total = v[n - 1].count;
    if (total <= 0)
        goto out;
    double rank = q * total;
    double prev_le = 0, prev_c = 0;
    for (size_t k = 0; k < n; k++) {
        if (v[k].count >= rank) {
            if (isinf(v[k].le)) {
                r = prev_le;
            } else {
                double span = v[k].count - prev_c;
                double f = span > 0 ? (rank - prev_c) / span : 1;
                r = prev_le + (v[k].le - prev_le) * f;
            }
            goto out;
        }
        prev_le = v[k].le;
        prev_c = v[k].count;
    }
    r = prev_le;
out:
    free(v);
    return r;
}

/* ------------------------------------------------------------ HTTP GET */

static int split_addr(const char *addr, char *host, size_t hn, char *port, size_t pn)
{
    const char *colon;
    if (addr[0] == '[') {
        const char *rb = strchr(addr, ']');
        if (!rb || rb[1] != ':')
            return -EINVAL;
        snprintf(host, hn, "%.*s", (int)(rb - addr - 1), addr + 1);
        colon = rb + 1;
    } else {
        colon = strrchr(addr, ':');
        if (!colon)
            return -EINVAL;
        snprintf(host, hn, "%.*s", (int)(colon - addr), addr);
    }
    if (!host[0])
        snprintf(host, hn, "127.0.0.1");
    snprintf(port, pn, "%s", colon + 1);
    return port[0] ? 0 : -EINVAL;
}

static int wait_fd(int fd, short ev, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - bf_mono_ns();
        if (left <= 0)
            return -ETIMEDOUT;
        struct pollfd pf = {.fd = fd, .events = ev};
        int rc = poll(&pf, 1, (int)(left / 1000000 + 1));
        if (rc > 0)
            return 0;
        if (rc < 0 && errno != EINTR)
            return -errno;
    }
}

/* Decodes a chunked body in place; returns the decoded length or -EINVAL. */
static long dechunk(char *b, size_t len)
{
    size_t r = 0, w = 0;
    for (;;) {
        char *e;
        if (r >= len)
            return -EINVAL;
        unsigned long n = strtoul(b + r, &e, 16);
        char *crlf = memchr(b + r, '\n', len - r);
        if (e == b + r || !crlf)
            return -EINVAL;
        r = (size_t)(crlf - b) + 1;
        if (n == 0)
            return (long)w;
        if (r + n > len)
            return -EINVAL;
        memmove(b + w, b + r, n);
        w += n;
        r += n;
        if (r < len && b[r] == '\r')
            r++;
        if (r < len && b[r] == '\n')
            r++;
    }
}

int rp_http_get(const char *addr, const char *path, int64_t timeout_ns, int *status, char **body,
                size_t *len)
{
    char host[256], port[32];
    *body = NULL;
    *len = 0;
    *status = 0;
    if (split_addr(addr, host, sizeof host, port, sizeof port))
        return -EINVAL;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(host, port, &hints, &ai) || !ai)
        return -EHOSTUNREACH;
    int64_t deadline = bf_mono_ns() + timeout_ns;
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int rc = 0;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    if (fd < 0) {
        rc = -errno;
        goto out;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        if (errno != EINPROGRESS) {
            rc = -errno;
            goto out;
        }
        if ((rc = wait_fd(fd, POLLOUT, deadline)))
            goto out;
        int so = 0;
        socklen_t sl = sizeof so;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &sl);
        if (so) {
            rc = -so;
            goto out;
        }
    }
    char req[512];
    int rl = snprintf(req, sizeof req,
                      "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: bigfleet-replay\r\n"
                      "Accept: text/plain\r\nConnection: close\r\n\r\n",
                      path, addr);
    for (int off = 0; off < rl;) {
        ssize_t w = send(fd, req + off, (size_t)(rl - off), MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EAGAIN || errno == EINTR) {
                if ((rc = wait_fd(fd, POLLOUT, deadline)))
                    goto out;
                continue;
            }
            rc = -errno;
            goto out;
        }
        off += (int)w;
    }
    size_t hdr_end = 0;
    long content_length = -1;
    bool chunked = false;
    for (;;) {
        if (n + 65536 + 1 > cap) {
            size_t nc = cap ? cap * 2 : 131072;
            if (nc > (256u << 20)) {
                rc = -EFBIG;
                goto out;
            }
            char *nb = realloc(buf, nc);
            if (!nb) {
                rc = -ENOMEM;
                goto out;
            }
            buf = nb;
            cap = nc;
        }
        ssize_t r = recv(fd, buf + n, cap - n - 1, 0);
        if (r < 0) {
            if (errno == EAGAIN || errno == EINTR) {
                if ((rc = wait_fd(fd, POLLIN, deadline)))
                    goto out;
                continue;
            }
            rc = -errno;
            goto out;
        }
        n += (size_t)r;
        buf[n] = 0;
        if (!hdr_end) {
            char *e = strstr(buf, "\r\n\r\n");
            if (e) {
                hdr_end = (size_t)(e - buf) + 4;
                if (sscanf(buf, "HTTP/1.%*d %d", status) != 1) {
                    rc = -EPROTO;
                    goto out;
                }
                for (char *h = strstr(buf, "\r\n"); h && h < e; h = strstr(h + 2, "\r\n")) {
                    if (!strncasecmp(h + 2, "content-length:", 15))
                        content_length = strtol(h + 17, NULL, 10);
                    else if (!strncasecmp(h + 2, "transfer-encoding:", 18)) {
                        char *le = strstr(h + 2, "\r\n");
                        char *ck = strstr(h + 20, "chunked");
                        chunked = ck && le && ck < le;
                    }
                }
            }
        }
        if (hdr_end && content_length >= 0 && n - hdr_end >= (size_t)content_length)
            break;
        if (r == 0)
            break;
    }
    if (!hdr_end) {
        rc = -EPROTO;
        goto out;
    }
    size_t blen = n - hdr_end;
    if (content_length >= 0 && blen > (size_t)content_length)
        blen = (size_t)content_length;
    memmove(buf, buf + hdr_end, blen);
    if (chunked) {
        long d = dechunk(buf, blen);
        if (d < 0) {
            rc = -EPROTO;
            goto out;
        }
        blen = (size_t)d;
    }
    buf[blen] = 0;
    *body = buf;
    *len = blen;
    buf = NULL;
out:
    free(buf);
    if (fd >= 0)
        close(fd);
    freeaddrinfo(ai);
    return rc;
}
