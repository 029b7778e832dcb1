/*
 * test_hmap.c — the generic hash map (bigfleet/hmap.h): lookups after
 * growth, backward-shift deletion (no tombstones) including runs that wrap
 * around the end of the table, byte-string keys, and a random
 * insert/replace/delete churn checked against a direct-indexed model.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/hmap.h"
#include "check_run.h"

/* the engine's instance: u64 -> u32, fmix64 */
BF_HMAP_DEFINE(t_u64map, uint64_t, uint32_t, bf_hash_u64, BF_HMAP_EQ)

/* identity hash: the test places keys in chosen home slots */
static inline uint64_t ident(uint64_t k)
{
    return k;
}
BF_HMAP_DEFINE(t_idmap, uint64_t, uint64_t, ident, BF_HMAP_EQ)

/* 61 distinct hashes at the very top of the range: every home is in the
 * last slots of the table, so runs are long and wrap around the end */
static inline uint64_t wrap_hash(uint64_t k)
{
    return ~(k % 61);
}
BF_HMAP_DEFINE(t_wrapmap, uint64_t, uint64_t, wrap_hash, BF_HMAP_EQ)

/* byte-string keys (XXH3) */
struct t_str {
    const char *p;
    size_t n;
};
static inline uint64_t str_hash(struct t_str k)
{
    return bf_hash_bytes(k.p, k.n);
}
static inline bool str_eq(struct t_str a, struct t_str b)
{
    return a.n == b.n && !memcmp(a.p, b.p, a.n);
}
BF_HMAP_DEFINE(t_strmap, struct t_str, int, str_hash, str_eq)

/* occupied slots counted from the table itself (a tombstone would count) */
#define OCCUPIED(m, slot_t)                                                                        \
    ({                                                                                             \
        uint32_t k_ = 0;                                                                           \
        const slot_t *s_;                                                                          \
        BF_HMAP_FOREACH (m, s_)                                                                    \
            k_++;                                                                                  \
        k_;                                                                                        \
    })
static uint32_t occupied(const struct t_idmap *m)
{
    uint32_t k = 0;
    const struct t_idmap_slot *s;
    BF_HMAP_FOREACH (m, s)
        k++;
    return k;
}

START_TEST(zero_initialised_map_is_empty_and_needs_no_allocation)
{
    struct t_u64map m = {0};
    ck_assert_uint_eq(t_u64map_get(&m, 7, UINT32_MAX), UINT32_MAX);
    ck_assert_ptr_null(t_u64map_ref(&m, 7));
    ck_assert(!t_u64map_del(&m, 7, NULL));
    t_u64map_clear(&m);
    ck_assert_ptr_null(m.slots);
    t_u64map_free(&m);
    ck_assert_uint_eq(m.n, 0);
}
END_TEST

START_TEST(growth_keeps_every_entry_and_bounds_the_load_to_three_quarters)
{
    struct t_u64map m = {0};
    uint32_t caps_seen = 0, last_cap = 0;
    for (uint32_t i = 0; i < 100000; i++) {
        ck_assert_int_eq(t_u64map_put(&m, (uint64_t)i * 0x9e3779b97f4a7c15ULL, i), 0);
        uint32_t cap = m.mask + 1;
        ck_assert(cap >= BF_HMAP_MIN_CAP && (cap & (cap - 1)) == 0);
        ck_assert((uint64_t)m.n * 4 <= (uint64_t)cap * 3);
        if (cap != last_cap) {
            if (last_cap)
                ck_assert_uint_eq(cap, last_cap * 2); /* doubles */
            last_cap = cap;
            caps_seen++;
        }
    }
    ck_assert_uint_eq(m.n, 100000);
    ck_assert_uint_ge(caps_seen, 10);
    for (uint32_t i = 0; i < 100000; i++)
        ck_assert_uint_eq(t_u64map_get(&m, (uint64_t)i * 0x9e3779b97f4a7c15ULL, UINT32_MAX), i);
    ck_assert_uint_eq(t_u64map_get(&m, 1, UINT32_MAX), UINT32_MAX);
    /* replacing does not add or grow */
    uint32_t cap = m.mask + 1;
    ck_assert_int_eq(t_u64map_put(&m, 0, 42), 0);
    ck_assert_uint_eq(m.n, 100000);
    ck_assert_uint_eq(m.mask + 1, cap);
    ck_assert_uint_eq(t_u64map_get(&m, 0, UINT32_MAX), 42);
    /* reserve: room for n without growing on the way */
    struct t_u64map r = {0};
    ck_assert_int_eq(t_u64map_reserve(&r, 1000), 0);
    cap = r.mask + 1;
    for (uint32_t i = 0; i < 1000; i++)
        ck_assert_int_eq(t_u64map_put(&r, i, i), 0);
    ck_assert_uint_eq(r.mask + 1, cap);
    t_u64map_free(&r);
    t_u64map_free(&m);
}
END_TEST

START_TEST(deletion_shifts_the_run_back_including_across_the_wrap)
{
    struct t_idmap m = {0};
    ck_assert_int_eq(t_idmap_reserve(&m, 8), 0);
    ck_assert_uint_eq(m.mask, 15);
    /* homes: 14, 14, 15, 15, 14 -> slots 14, 15, 0, 1, 2 (the run wraps);
     * then 0 and 1 whose homes are occupied -> slots 3, 4 */
    const uint64_t keys[] = {14, 30, 15, 31, 46, 16 /* home 0 */, 17 /* home 1 */};
    for (unsigned i = 0; i < 7; i++)
        ck_assert_int_eq(t_idmap_put(&m, keys[i], 100 + i), 0);
    ck_assert_uint_eq(m.slots[0].key, 15);
    ck_assert_uint_eq(m.slots[4].key, 17);
    /* delete the head of the run: every later entry must stay reachable */
    uint64_t v = 0;
    ck_assert(t_idmap_del(&m, 14, &v));
    ck_assert_uint_eq(v, 100);
    ck_assert(!t_idmap_del(&m, 14, NULL));
    for (unsigned i = 1; i < 7; i++)
        ck_assert_uint_eq(t_idmap_get(&m, keys[i], 0), 100 + i);
    ck_assert_uint_eq(occupied(&m), m.n); /* no tombstone left behind */
    ck_assert_uint_eq(m.n, 6);
    /* 30 moved into its home 14; the run still ends one slot earlier */
    ck_assert_uint_eq(m.slots[14].key, 30);
    ck_assert_uint_eq(m.slots[4].h, 0);
    /* delete in the wrapped part */
    ck_assert(t_idmap_del(&m, 15, NULL));
    for (unsigned i = 1; i < 7; i++)
        if (keys[i] != 15)
            ck_assert_uint_eq(t_idmap_get(&m, keys[i], 0), 100 + i);
    ck_assert_uint_eq(occupied(&m), 5);
    /* 16 sat one past its home; 17 (home 1) moves back into the hole */
    ck_assert(t_idmap_del(&m, 16, NULL));
    ck_assert_uint_eq(t_idmap_get(&m, 17, 0), 106);
    ck_assert_uint_eq(m.slots[1].key, 17);
    ck_assert_uint_eq(occupied(&m), 4);
    t_idmap_clear(&m);
    ck_assert_uint_eq(occupied(&m), 0);
    ck_assert_uint_eq(t_idmap_get(&m, 30, 0), 0);
    t_idmap_free(&m);
}
END_TEST

START_TEST(byte_string_keys_compare_by_content)
{
    struct t_strmap m = {0};
    char a[] = "m-000001", b[] = "m-000001";
    ck_assert_int_eq(t_strmap_put(&m, (struct t_str){a, 8}, 1), 0);
    ck_assert_int_eq(t_strmap_get(&m, (struct t_str){b, 8}, -1), 1);  /* other pointer */
    ck_assert_int_eq(t_strmap_get(&m, (struct t_str){b, 7}, -1), -1); /* prefix */
    ck_assert_int_eq(t_strmap_put(&m, (struct t_str){b, 8}, 2), 0);   /* replace */
    ck_assert_uint_eq(m.n, 1);
    ck_assert_int_eq(*t_strmap_ref(&m, (struct t_str){a, 8}), 2);
    ck_assert(t_strmap_del(&m, (struct t_str){"m-000001", 8}, NULL));
    ck_assert_uint_eq(m.n, 0);
    t_strmap_free(&m);
}
END_TEST

START_TEST(random_churn_matches_a_direct_indexed_model)
{
    enum { U = 1024, OPS = 200000 };
    static uint64_t model[U]; /* 0 absent, else value + 1 */
    memset(model, 0, sizeof model);
    struct t_wrapmap m = {0};
    uint64_t x = 88172645463325252ULL;
    uint32_t n = 0, wrapped = 0;
    for (int op = 0; op < OPS; op++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint64_t k = (x >> 8) % U, r = x & 3;
        if (r < 2) {
            ck_assert_int_eq(t_wrapmap_put(&m, k, x), 0);
            n += !model[k];
            model[k] = x + 1;
        } else {
            uint64_t v = 0;
            bool had = t_wrapmap_del(&m, k, &v);
            ck_assert_int_eq(had, model[k] != 0);
            if (had) {
                ck_assert_uint_eq(v + 1, model[k]);
                n--;
            }
            model[k] = 0;
        }
        ck_assert_uint_eq(m.n, n);
        wrapped += m.slots && m.slots[0].h && (m.slots[0].h & m.mask) != 0;
        if (op % 10000 == 0) {
            for (uint64_t q = 0; q < U; q++)
                ck_assert_uint_eq(t_wrapmap_get(&m, q, UINT64_MAX),
                                  model[q] ? model[q] - 1 : UINT64_MAX);
            ck_assert_uint_eq(OCCUPIED(&m, struct t_wrapmap_slot), n);
        }
    }
    ck_assert_uint_gt(wrapped, OPS / 2); /* the runs did cross the end */
    t_wrapmap_free(&m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("hmap");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, zero_initialised_map_is_empty_and_needs_no_allocation);
    tcase_add_test(tc, growth_keeps_every_entry_and_bounds_the_load_to_three_quarters);
    tcase_add_test(tc, deletion_shifts_the_run_back_including_across_the_wrap);
    tcase_add_test(tc, byte_string_keys_compare_by_content);
    tcase_add_test(tc, random_churn_matches_a_direct_indexed_model);
    suite_add_tcase(s, tc);
    return check_run(s);
}
