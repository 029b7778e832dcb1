/*
 * test_base.c — the base layer's buffer, vector-grow helper and JSON writer
 * (bigfleet/strbuf.h, bigfleet/json.h).
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/json.h"
#include "bigfleet/strbuf.h"
#include "check_run.h"

START_TEST(strbuf_appends_past_its_first_capacity_and_stays_nul_terminated)
{
    struct bf_strbuf b = {0};
    for (int i = 0; i < 3000; i++)
        bf_sb_printf(&b, "%04d,", i); /* 15000 bytes: grows 4096 -> 16384 */
    ck_assert(!b.failed);
    ck_assert_uint_eq(b.len, 15000);
    ck_assert_uint_ge(b.cap, b.len + 1);
    ck_assert_int_eq(b.p[b.len], 0);
    ck_assert(!strncmp(b.p + 5 * 2999, "2999,", 5));
    char big[2000]; /* longer than printf's stack buffer */
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    bf_sb_printf(&b, "[%s]", big);
    ck_assert_uint_eq(b.len, 15000 + 2001);
    ck_assert_int_eq(b.p[b.len - 1], ']');
    bf_sb_reset(&b);
    ck_assert_uint_eq(b.len, 0);
    ck_assert_str_eq(b.p, "");
    bf_sb_free(&b);
    ck_assert_ptr_null(b.p);
}
END_TEST

START_TEST(strbuf_refuses_an_append_it_cannot_size_and_keeps_what_it_has)
{
    struct bf_strbuf b = {0};
    bf_sb_puts(&b, "kept");
    bf_sb_put(&b, "x", SIZE_MAX - 2); /* len + n + 1 overflows */
    ck_assert(b.failed);
    bf_sb_puts(&b, "dropped"); /* nothing after a failure */
    ck_assert_str_eq(b.p, "kept");
    bf_sb_reset(&b);
    ck_assert(!b.failed);
    bf_sb_free(&b);
}
END_TEST

START_TEST(grow_doubles_and_refuses_an_overflowing_size)
{
    int *a = NULL;
    size_t cap = 0;
    ck_assert_int_eq(bf_grow((void **)&a, &cap, 1, sizeof *a), 0);
    ck_assert_uint_eq(cap, 8);
    ck_assert_int_eq(bf_grow((void **)&a, &cap, 9, sizeof *a), 0);
    ck_assert_uint_eq(cap, 16);
    a[15] = 7;
    ck_assert_int_eq(bf_grow((void **)&a, &cap, 100, sizeof *a), 0);
    ck_assert_uint_eq(cap, 128);
    ck_assert_int_eq(a[15], 7);
    ck_assert_int_eq(bf_grow((void **)&a, &cap, SIZE_MAX / 2, 16), -ENOMEM);
    ck_assert_uint_eq(cap, 128); /* unchanged */
    free(a);
}
END_TEST

START_TEST(json_writer_places_commas_and_nesting_and_writes_nan_as_null)
{
    struct bf_strbuf b = {0};
    struct bf_jw w;
    bf_jw_init(&w, &b);
    bf_jw_obj(&w, NULL);
    bf_jw_str(&w, "id", "a\"b");
    bf_jw_int(&w, "n", -3);
    bf_jw_uint(&w, "u", UINT64_MAX);
    bf_jw_arr(&w, "xs");
    bf_jw_double(&w, NULL, 0.5);
    bf_jw_double(&w, NULL, NAN);
    bf_jw_obj(&w, NULL);
    bf_jw_bool(&w, "ok", true);
    bf_jw_obj_end(&w);
    bf_jw_arr_end(&w);
    bf_jw_null(&w, "none");
    bf_jw_float(&w, "f", 0.1f);
    bf_jw_obj_end(&w);
    ck_assert_str_eq(b.p, "{\"id\":\"a\\\"b\",\"n\":-3,\"u\":18446744073709551615,"
                          "\"xs\":[0.5,null,{\"ok\":true}],\"none\":null,\"f\":0.1}");
    bf_sb_free(&b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("base");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, strbuf_appends_past_its_first_capacity_and_stays_nul_terminated);
    tcase_add_test(tc, strbuf_refuses_an_append_it_cannot_size_and_keeps_what_it_has);
    tcase_add_test(tc, grow_doubles_and_refuses_an_overflowing_size);
    tcase_add_test(tc, json_writer_places_commas_and_nesting_and_writes_nan_as_null);
    suite_add_tcase(s, tc);
    return check_run(s);
}
