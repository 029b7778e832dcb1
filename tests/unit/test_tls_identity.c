/*
 * test_tls_identity.c — the identity rule of a verified mTLS leaf
 * (bf_tls_leaf_identity, src/net/tls.c; wire.md §7): exactly one URI SAN
 * with scheme bigfleet is the identity, two are refused, none is no
 * identity; other schemes, relative URIs and embedded NULs do not count;
 * bytes that are not a certificate are -EINVAL; out of memory is never "one
 * identity without the identity". Certificates are made with the openssl
 * CLI (self-signed: the function parses, the handshake verified).
 * The allocator is wrapped (-Wl,--wrap=malloc, GNUmakefile) to fail the
 * n-th allocation.
 */
#include <check.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "net/net_internal.h"
#include "check_run.h"

/* ------------------------------------------------------------ malloc hook */

void *__real_malloc(size_t n);
void *__wrap_malloc(size_t n);
static long g_fail_in = -1; /* fail the allocation after this many (-1: never) */
static long g_mallocs;

void *__wrap_malloc(size_t n)
{
    g_mallocs++;
    if (g_fail_in == 0) {
        g_fail_in = -1;
        return NULL;
    }
    if (g_fail_in > 0)
        g_fail_in--;
    return __real_malloc(n);
}

/* ------------------------------------------------------------ certificates */

static char tmpdir[64];

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    return system(cmd);
}

/* a self-signed ECDSA P-256 certificate NAME.der with subjectAltName SAN
 * (none when SAN is empty) */
static int make_cert(const char *name, const char *san)
{
    char ext[512] = "";
    if (*san)
        snprintf(ext, sizeof ext, "-addext 'subjectAltName=%s'", san);
    return sh("cd %s && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
              "-keyout %s.key -subj /CN=%s %s -days 1 -outform DER -out %s.der 2>/dev/null",
              tmpdir, name, name, ext, name);
}

static uint8_t *read_der(const char *name, size_t *len)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s.der", tmpdir, name);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "%s missing", path);
    static uint8_t buf[8192];
    *len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    ck_assert_uint_gt(*len, 100);
    return buf;
}

/* bf_tls_leaf_identity of certificate NAME */
static int identity_of(const char *name, char **ident)
{
    size_t len;
    uint8_t *der = read_der(name, &len);
    *ident = (char *)0x1; /* must be overwritten */
    return bf_tls_leaf_identity(der, len, ident);
}

/* ------------------------------------------------------------ tests */

START_TEST(one_bigfleet_uri_is_the_identity)
{
    char *id;
    ck_assert_int_eq(identity_of("one", &id), 1);
    ck_assert_ptr_nonnull(id);
    ck_assert_str_eq(id, "bigfleet://cluster/c1");
    free(id);
}
END_TEST

START_TEST(the_scheme_matches_in_any_case_and_is_lowered)
{
    char *id;
    ck_assert_int_eq(identity_of("upper", &id), 1);
    ck_assert_ptr_nonnull(id);
    ck_assert_str_eq(id, "bigfleet://cluster/C1");
    free(id);
}
END_TEST

START_TEST(two_bigfleet_uris_are_refused)
{
    char *id;
    ck_assert_int_eq(identity_of("two", &id), 2);
    ck_assert_ptr_null(id);
}
END_TEST

START_TEST(no_uri_san_is_no_identity)
{
    char *id;
    ck_assert_int_eq(identity_of("dns", &id), 0);
    ck_assert_ptr_null(id);
    ck_assert_int_eq(identity_of("nosan", &id), 0);
    ck_assert_ptr_null(id);
}
END_TEST

START_TEST(other_schemes_do_not_count)
{
    char *id;
    ck_assert_int_eq(identity_of("mixed", &id), 1);
    ck_assert_ptr_nonnull(id);
    ck_assert_str_eq(id, "bigfleet://shard/s1");
    free(id);
    ck_assert_int_eq(identity_of("lookalike", &id), 0);
    ck_assert_ptr_null(id);
}
END_TEST

/* "bigfleet/cluster/c1" has no scheme: never an identity. wolfSSL without
 * WOLFSSL_FPKI (the default build) refuses such a certificate altogether
 * (RFC 5280 4.2.1.6, -EINVAL; the handshake fails the same way); Debian's
 * build parses it and the URI does not count (0). */
START_TEST(a_relative_uri_is_not_an_identity)
{
    char *id;
    int n = identity_of("relative", &id);
    ck_assert_msg(n == 0 || n == -EINVAL, "relative URI SAN: %d", n);
    ck_assert_ptr_null(id);
    n = identity_of("relative_and_one", &id);
    ck_assert_msg(n == -EINVAL || n == 1, "relative + bigfleet URI SAN: %d", n);
    if (n == 1) {
        ck_assert_str_eq(id, "bigfleet://cluster/c1");
        free(id);
    } else {
        ck_assert_ptr_null(id);
    }
}
END_TEST

/* the URI "bigfleet://cluster/c1X" with the X replaced by a NUL byte in the
 * DER (the signature no longer matches; the parser does not check it) */
START_TEST(a_uri_with_an_embedded_nul_does_not_count)
{
    size_t len;
    uint8_t *der = read_der("nul", &len);
    const char pat[] = "bigfleet://cluster/c1X";
    uint8_t *p = memmem(der, len, pat, sizeof pat - 1);
    ck_assert_ptr_nonnull(p);
    p[sizeof pat - 2] = 0;
    char *id = (char *)0x1;
    int n = bf_tls_leaf_identity(der, len, &id);
    ck_assert_msg(n == 0, "embedded NUL: %d (the certificate parses; the URI must not count)", n);
    ck_assert_ptr_null(id);
}
END_TEST

START_TEST(bytes_that_are_not_a_certificate_are_einval)
{
    size_t len;
    uint8_t *der = read_der("one", &len);
    char *id = (char *)0x1;
    ck_assert_int_eq(bf_tls_leaf_identity(der, len / 2, &id), -EINVAL);
    ck_assert_ptr_null(id);
    uint8_t junk[300];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (uint8_t)(i * 37 + 11);
    ck_assert_int_eq(bf_tls_leaf_identity(junk, sizeof junk, &id), -EINVAL);
    ck_assert_ptr_null(id);
    ck_assert_int_eq(bf_tls_leaf_identity(NULL, 0, &id), -EINVAL);
    ck_assert_ptr_null(id);
}
END_TEST

/* Every allocation of the call failed in turn: the result is the identity
 * (1, set) or an error with none (never 1 without it); the copy's own
 * failure is -ENOMEM. */
START_TEST(out_of_memory_is_never_one_without_the_identity)
{
    size_t len;
    uint8_t *der = read_der("one", &len);
    g_mallocs = 0;
    char *id = NULL;
    ck_assert_int_eq(bf_tls_leaf_identity(der, len, &id), 1);
    free(id);
    long total = g_mallocs;
    ck_assert_int_gt(total, 0);
    int enomem = 0;
    for (long k = 0; k < total; k++) {
        g_fail_in = k;
        id = (char *)0x1;
        int n = bf_tls_leaf_identity(der, len, &id);
        g_fail_in = -1;
        if (n == 1) {
            ck_assert_ptr_nonnull(id);
            ck_assert_str_eq(id, "bigfleet://cluster/c1");
            free(id);
        } else {
            ck_assert_msg(n == -ENOMEM || n == -EINVAL, "allocation %ld failed: %d", k, n);
            ck_assert_ptr_null(id);
            enomem += n == -ENOMEM;
        }
    }
    ck_assert_int_ge(enomem, 1); /* the identity's copy (the last allocation) */
}
END_TEST

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/bf-tlsid-%d", getpid());
    if (sh("mkdir -p %s", tmpdir) != 0 ||
        make_cert("one", "URI:bigfleet://cluster/c1,DNS:x.example") ||
        make_cert("upper", "URI:BigFleet://cluster/C1") ||
        make_cert("two", "URI:bigfleet://cluster/a,URI:bigfleet://admin") ||
        make_cert("dns", "DNS:client.example") || make_cert("nosan", "") ||
        make_cert("mixed", "URI:https://bigfleet.example/x,URI:bigfleet://shard/s1,DNS:bigfleet") ||
        make_cert("lookalike", "URI:bigfleetx://cluster/c1,URI:https://bigfleet/c1") ||
        make_cert("relative", "URI:bigfleet/cluster/c1") ||
        make_cert("relative_and_one", "URI:cluster/c2,URI:bigfleet://cluster/c1") ||
        make_cert("nul", "URI:bigfleet://cluster/c1X")) {
        fprintf(stderr, "test_tls_identity: openssl could not make the certificates\n");
        return EXIT_FAILURE;
    }
    Suite *s = suite_create("tls_identity");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, one_bigfleet_uri_is_the_identity);
    tcase_add_test(tc, the_scheme_matches_in_any_case_and_is_lowered);
    tcase_add_test(tc, two_bigfleet_uris_are_refused);
    tcase_add_test(tc, no_uri_san_is_no_identity);
    tcase_add_test(tc, other_schemes_do_not_count);
    tcase_add_test(tc, a_relative_uri_is_not_an_identity);
    tcase_add_test(tc, a_uri_with_an_embedded_nul_does_not_count);
    tcase_add_test(tc, bytes_that_are_not_a_certificate_are_einval);
    tcase_add_test(tc, out_of_memory_is_never_one_without_the_identity);
    suite_add_tcase(s, tc);
    int rc = check_run(s);
    sh("rm -rf %s", tmpdir);
    return rc;
}
