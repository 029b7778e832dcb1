/*
 * test_net_http1.c — the HTTP/1.1 request-head parser (src/net/http1.c)
 * and the HTTP/1.1 server on a real loop: keep-alive, pipelining, HEAD,
 * 404/405/400/431, closing after Connection: close.
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bigfleet/net.h"
#include "bigfleet/util.h"
#include "net/http1.h"
#include "check_run.h"

#define P(s, r) bf_http1_parse((s), strlen(s), (r))

START_TEST(parses_get_with_query_and_keep_alive_default)
{
    struct bf_http1_request r;
    const char *s = "GET /metrics?x=1&y HTTP/1.1\r\nHost: a\r\nAccept: */*\r\n\r\nGET /next";
    int n = P(s, &r);
    ck_assert_int_eq(n, (int)(strstr(s, "GET /next") - s));
    ck_assert_str_eq(r.method, "GET");
    ck_assert_str_eq(r.path, "/metrics");
    ck_assert_str_eq(r.query, "x=1&y");
    ck_assert_int_eq(r.minor, 1);
    ck_assert(r.keep_alive);
    ck_assert(!r.has_body);
}
END_TEST

START_TEST(connection_header_and_http10_decide_keep_alive)
{
    struct bf_http1_request r;
    ck_assert_int_gt(P("GET / HTTP/1.1\r\nConnection: Keep-Alive, close\r\n\r\n", &r), 0);
    ck_assert(!r.keep_alive);
    ck_assert_int_gt(P("GET / HTTP/1.0\r\n\r\n", &r), 0);
    ck_assert(!r.keep_alive);
    ck_assert_int_gt(P("GET / HTTP/1.0\r\nconnection: keep-alive\r\n\r\n", &r), 0);
    ck_assert(r.keep_alive);
}
END_TEST

START_TEST(incomplete_head_needs_more_bytes)
{
    struct bf_http1_request r;
    ck_assert_int_eq(P("GET /healthz HTTP/1.1\r\nHost: x\r\n", &r), 0);
    ck_assert_int_eq(P("GET /healthz HTTP/1.1\r\nHost: x\r\n\r", &r), 0);
    ck_assert_int_eq(P("", &r), 0);
}
END_TEST

START_TEST(malformed_requests_are_rejected_with_the_right_error)
{
    struct bf_http1_request r;
    ck_assert_int_eq(P("GET /\r\n\r\n", &r), -EINVAL);
    ck_assert_int_eq(P("GET / HTTP/2.0\r\n\r\n", &r), -ENOTSUP);
    ck_assert_int_eq(P("GET / HTTP/1.2\r\n\r\n", &r), -ENOTSUP);
    ck_assert_int_eq(P("GET http://x/ HTTP/1.1\r\n\r\n", &r), -EINVAL);
    ck_assert_int_eq(P("G@T / HTTP/1.1\r\n\r\n", &r), -EINVAL);
    ck_assert_int_eq(P("GET / HTTP/1.1\r\nNoColon\r\n\r\n", &r), -EINVAL);
    ck_assert_int_eq(P("GET / HTTP/1.1\r\nBad Name: x\r\n\r\n", &r), -EINVAL);
    ck_assert_int_eq(P("GET / HTTP/1.1\r\n folded: x\r\n\r\n", &r), -EINVAL);
    ck_assert_int_eq(P("GET / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", &r), -EINVAL);
    ck_assert_int_eq(P("GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", &r),
                     -EINVAL);
    ck_assert_int_eq(P("\x16\x03\x01\x02\x01 garbage\r\n\r\n", &r), -EINVAL);
    /* junk is rejected at once, without waiting for the end of a head */
    ck_assert_int_eq(bf_http1_parse("\x16\x03\x01\x00\x05", 5, &r), -EINVAL);
    ck_assert_int_eq(P("GE", &r), 0);
}
END_TEST

START_TEST(bodies_are_detected)
{
    struct bf_http1_request r;
    ck_assert_int_gt(P("GET / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", &r), 0);
    ck_assert(!r.has_body);
    ck_assert_int_gt(P("POST / HTTP/1.1\r\nContent-Length: 12\r\n\r\n", &r), 0);
    ck_assert(r.has_body);
    ck_assert_int_gt(P("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", &r), 0);
    ck_assert(r.has_body);
}
END_TEST

START_TEST(oversized_heads_and_targets_are_limited)
{
    struct bf_http1_request r;
    size_t n = BF_HTTP1_MAX_HEAD + 100;
    char *s = malloc(n + 1);
    memcpy(s, "GET / HTTP/1.1\r\nX: ", 19);
    memset(s + 19, 'a', n - 19);
    s[n] = 0;
    ck_assert_int_eq(bf_http1_parse(s, n, &r), -E2BIG);
    /* a long target inside the head limit */
    memcpy(s, "GET /", 5);
    memset(s + 5, 'b', 3000);
    strcpy(s + 3005, " HTTP/1.1\r\n\r\n");
    ck_assert_int_eq(P(s, &r), -ENAMETOOLONG);
    free(s);
}
END_TEST

/* ------------------------------------------------------------ live server */

static void handler(const struct bf_net_http_request *req, struct bf_net_http_response *resp,
                    void *arg)
{
    int *count = arg;
    (*count)++;
    if (strcmp(req->path, "/healthz") == 0) {
        bf_net_http_printf(resp, "ok\n");
    } else if (strcmp(req->path, "/metrics") == 0) {
        bf_net_http_set_status(resp, 200, "text/plain; version=0.0.4");
        bf_net_http_printf(resp, "x_total %d\n", *count);
    } else {
        bf_net_http_set_status(resp, 404, NULL);
        bf_net_http_printf(resp, "nope\n");
    }
}

static int connect_to(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

/* drives the loop until `want` bytes (or EOF) arrive on fd */
static size_t read_until(struct bf_net_loop *l, int fd, char *buf, size_t cap, const char *stop,
                         int want_eof)
{
    size_t have = 0;
    int64_t until = bf_mono_ns() + 3 * BF_NS_PER_SEC;
    while (bf_mono_ns() < until) {
        bf_net_loop_run_once(l, 5 * BF_NS_PER_MS);
        ssize_t n = recv(fd, buf + have, cap - 1 - have, MSG_DONTWAIT);
        if (n > 0) {
            have += (size_t)n;
            buf[have] = 0;
            if (!want_eof && stop && strstr(buf, stop))
                return have;
        } else if (n == 0) {
            return have;
        }
    }
    return have;
}

static int count_str(const char *h, const char *n)
{
    int c = 0;
    for (const char *p = h; (p = strstr(p, n)); p += strlen(n))
        c++;
    return c;
}

START_TEST(server_answers_pipelined_keep_alive_requests_in_order)
{
    struct bf_net_loop *l;
    ck_assert_int_eq(bf_net_loop_new(NULL, &l), 0);
    int count = 0;
    struct bf_net_http_server *hs;
    struct bf_net_http_server_opts o = {.addr = "127.0.0.1:0", .handler = handler, .arg = &count};
    ck_assert_int_eq(bf_net_http_server_new(l, &o, &hs), 0);
    int fd = connect_to(bf_net_http_server_port(hs));
    const char *req = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                      "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
                      "HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
                      "GET /missing HTTP/1.1\r\nHost: x\r\n\r\n"
                      "DELETE /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                      "GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n";
    ck_assert_int_eq(send(fd, req, strlen(req), 0), (ssize_t)strlen(req));
    char buf[8192];
    read_until(l, fd, buf, sizeof buf, NULL, 1); /* server closes after the last one */
    ck_assert_int_eq(count_str(buf, "HTTP/1.1 200 OK"), 4);
    ck_assert_int_eq(count_str(buf, "HTTP/1.1 404 Not Found"), 1);
    ck_assert_int_eq(count_str(buf, "HTTP/1.1 405 Method Not Allowed"), 1);
    ck_assert_ptr_nonnull(strstr(buf, "x_total 2\n"));
    /* HEAD carries the length of the body it does not send */
    ck_assert_ptr_null(strstr(buf, "x_total 3\n"));
    ck_assert_ptr_nonnull(strstr(buf, "Connection: close"));
    /* order: 200 healthz, 200 metrics, 200 head, 404, 405, 200 */
    char *p404 = strstr(buf, " 404 "), *p405 = strstr(buf, " 405 ");
    ck_assert(p404 && p405 && p404 < p405);
    ck_assert_int_eq(count, 5); /* DELETE never reaches the handler */
    close(fd);
    struct bf_net_stats st;
    bf_net_http_server_stats(hs, &st);
    ck_assert_uint_eq(st.http_requests, 6);
    bf_net_http_server_free(hs);
    bf_net_loop_free(l);
}
END_TEST

START_TEST(server_rejects_garbage_and_huge_heads_then_keeps_serving)
{
    struct bf_net_loop *l;
    ck_assert_int_eq(bf_net_loop_new(NULL, &l), 0);
    int count = 0;
    struct bf_net_http_server *hs;
    struct bf_net_http_server_opts o = {.addr = "127.0.0.1:0", .handler = handler, .arg = &count};
    ck_assert_int_eq(bf_net_http_server_new(l, &o, &hs), 0);
    uint16_t port = bf_net_http_server_port(hs);
    char buf[8192];

    int fd = connect_to(port);
    const char *garbage = "\x16\x03\x01 not http at all\r\n\r\n";
    send(fd, garbage, strlen(garbage), 0);
    read_until(l, fd, buf, sizeof buf, NULL, 1);
    ck_assert_ptr_nonnull(strstr(buf, "HTTP/1.1 400 Bad Request"));
    close(fd);

    fd = connect_to(port);
    char *big = malloc(20000);
    memset(big, 'h', 20000);
    memcpy(big, "GET / HTTP/1.1\r\nX: ", 19);
    send(fd, big, 20000, 0);
    read_until(l, fd, buf, sizeof buf, NULL, 1);
    ck_assert_ptr_nonnull(strstr(buf, "HTTP/1.1 431"));
    close(fd);
    free(big);

    fd = connect_to(port);
    const char *ok = "GET /healthz HTTP/1.1\r\n\r\n";
    send(fd, ok, strlen(ok), 0);
    read_until(l, fd, buf, sizeof buf, "ok\n", 0);
    ck_assert_ptr_nonnull(strstr(buf, "200 OK"));
    close(fd);

    struct bf_net_stats st;
    bf_net_http_server_stats(hs, &st);
    ck_assert_uint_eq(st.protocol_errors, 2);
    bf_net_http_server_free(hs);
    bf_net_loop_free(l);
}
END_TEST

struct quitter {
    struct bf_net_http_server *hs;
    int calls;
};
static void quit_handler(const struct bf_net_http_request *req, struct bf_net_http_response *resp,
                         void *arg)
{
    (void)req;
    struct quitter *q = arg;
    q->calls++;
    bf_net_http_printf(resp, "bye\n");
    bf_net_http_server_free(q->hs); /* from inside its own handler */
    q->hs = NULL;
}

START_TEST(server_can_be_freed_from_inside_its_own_handler)
{
    struct bf_net_loop *l;
    ck_assert_int_eq(bf_net_loop_new(NULL, &l), 0);
    struct quitter q = {0};
    struct bf_net_http_server_opts o = {.addr = "127.0.0.1:0", .handler = quit_handler, .arg = &q};
    ck_assert_int_eq(bf_net_http_server_new(l, &o, &q.hs), 0);
    int fd = connect_to(bf_net_http_server_port(q.hs));
    const char *req = "GET /quit HTTP/1.1\r\n\r\nGET /again HTTP/1.1\r\n\r\n";
    send(fd, req, strlen(req), 0);
    char buf[4096];
    read_until(l, fd, buf, sizeof buf, NULL, 1);
    ck_assert_int_eq(q.calls, 1); /* the pipelined second request was not handled */
    ck_assert_ptr_null(q.hs);
    close(fd);
    for (int i = 0; i < 5; i++)
        bf_net_loop_run_once(l, 5 * BF_NS_PER_MS);
    bf_net_loop_free(l);
}
END_TEST

START_TEST(dribbling_heads_get_408_at_an_absolute_deadline_and_full_slots_evict_the_slowest)
{
    struct bf_net_loop *l;
    ck_assert_int_eq(bf_net_loop_new(NULL, &l), 0);
    int count = 0;
    struct bf_net_http_server *hs;
    struct bf_net_http_server_opts o = {.addr = "127.0.0.1:0",
                                        .handler = handler,
                                        .arg = &count,
                                        .max_connections = 3,
                                        .head_timeout_ns = 300 * BF_NS_PER_MS};
    ck_assert_int_eq(bf_net_http_server_new(l, &o, &hs), 0);
    uint16_t port = bf_net_http_server_port(hs);
    /* a client that sends a byte every 50 ms: the deadline runs from its
     * first byte and is not pushed back by the others */
    int d = connect_to(port);
    const char *head = "GET /healthz HTTP/1.1\r\n";
    int64_t t0 = bf_mono_ns();
    char buf[4096] = "";
    size_t have = 0;
    for (size_t i = 0; bf_mono_ns() - t0 < 2 * BF_NS_PER_SEC && !strstr(buf, "408"); i++) {
        if (i < strlen(head))
            send(d, head + i, 1, MSG_NOSIGNAL);
        int64_t until = bf_mono_ns() + 50 * BF_NS_PER_MS;
        while (bf_mono_ns() < until)
            bf_net_loop_run_once(l, 5 * BF_NS_PER_MS);
        ssize_t n = recv(d, buf + have, sizeof buf - 1 - have, MSG_DONTWAIT);
        if (n > 0)
            have += (size_t)n;
        buf[have] = 0;
    }
    int64_t took = bf_mono_ns() - t0;
    ck_assert_ptr_nonnull(strstr(buf, "HTTP/1.1 408 Request Timeout"));
    ck_assert_int_ge(took, 250 * BF_NS_PER_MS);
    ck_assert_int_lt(took, 900 * BF_NS_PER_MS);
    close(d);
    /* three silent connections fill the slots; a fourth (a probe) evicts
     * the one that has waited longest and is answered */
    int s1 = connect_to(port), s2 = connect_to(port), s3 = connect_to(port);
    for (int i = 0; i < 5; i++)
        bf_net_loop_run_once(l, 5 * BF_NS_PER_MS);
    int p = connect_to(port);
    const char *get = "GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n";
    ck_assert_int_eq(send(p, get, strlen(get), 0), (ssize_t)strlen(get));
    read_until(l, p, buf, sizeof buf, NULL, 1);
    ck_assert_ptr_nonnull(strstr(buf, "HTTP/1.1 200 OK"));
    struct bf_net_stats st;
    bf_net_http_server_stats(hs, &st);
    ck_assert_uint_eq(st.conns_evicted, 1);
    ck_assert_uint_ge(st.head_timeouts, 1);
    char one;
    ck_assert_int_eq(recv(s1, &one, 1, MSG_DONTWAIT), 0); /* the oldest was the one evicted */
    close(s1);
    close(s2);
    close(s3);
    close(p);
    bf_net_http_server_free(hs);
    bf_net_loop_free(l);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("net_http1");
    TCase *tc = tcase_create("parser");
    tcase_add_test(tc, parses_get_with_query_and_keep_alive_default);
    tcase_add_test(tc, connection_header_and_http10_decide_keep_alive);
    tcase_add_test(tc, incomplete_head_needs_more_bytes);
    tcase_add_test(tc, malformed_requests_are_rejected_with_the_right_error);
    tcase_add_test(tc, bodies_are_detected);
    tcase_add_test(tc, oversized_heads_and_targets_are_limited);
    suite_add_tcase(s, tc);
    TCase *tl = tcase_create("server");
    tcase_set_timeout(tl, 20);
    tcase_add_test(tl, server_answers_pipelined_keep_alive_requests_in_order);
    tcase_add_test(tl, server_rejects_garbage_and_huge_heads_then_keeps_serving);
    tcase_add_test(
        tl, dribbling_heads_get_408_at_an_absolute_deadline_and_full_slots_evict_the_slowest);
    tcase_add_test(tl, server_can_be_freed_from_inside_its_own_handler);
    suite_add_tcase(s, tl);
    return check_run(s);
}
