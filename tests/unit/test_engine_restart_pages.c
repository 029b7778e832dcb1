/*
 * test_engine_restart_pages.c — the pages a restarted cycle's bulk load
 * writes (i18-restart6, stop 31). Pre-faulting in bulk (engine.h bf_engine_populate,
 * bf_engine_bulk_begin's n_hint; i18-restart6, stop 31): the pages a range
 * covers are resident after one call and no other page is, and a bulk load
 * of n slots makes the first n slots of the per-slot columns resident before
 * it writes them, never the columns' tail (the engine's capacity) nor the
 * columns only idle machines write, and the id buffer BFE_POP_STEP ahead
 * during the load, given back at its end. Residency is read with
 * mincore(2). With huge pages on, nothing is pre-faulted. And the id
 * length column is 16 bits: an id longer than BF_ENGINE_ID_MAX is refused.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bigfleet/engine.h"
#include "check_run.h"
#include "cycle/engine/engine_internal.h"

#define PG 4096u

/* The number of resident pages among the pages holding [p, p + n). */
static size_t resident(const void *p, size_t n)
{
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)(PG - 1),
              b = ((uintptr_t)p + n + PG - 1) & ~(uintptr_t)(PG - 1);
    size_t np = (b - a) / PG, k = 0;
    unsigned char *v = malloc(np ? np : 1);
    ck_assert_ptr_nonnull(v);
    ck_assert_int_eq(mincore((void *)a, b - a, v), 0);
    for (size_t i = 0; i < np; i++)
        k += v[i] & 1;
    free(v);
    return k;
}

START_TEST(populate_makes_exactly_the_pages_of_the_range_resident)
{
    size_t len = 64 * PG;
    uint8_t *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert(m != MAP_FAILED);
    (void)madvise(m, len, MADV_NOHUGEPAGE);
    ck_assert_uint_eq(resident(m, len), 0);
    /* from 5 bytes into page 1 to 5 bytes into page 11: pages 1..11 */
    bf_engine_populate(m + PG + 5, 10 * PG);
    ck_assert_uint_eq(resident(m, PG), 0);
    ck_assert_uint_eq(resident(m + PG, 11 * PG), 11);
    ck_assert_uint_eq(resident(m + 12 * PG, len - 12 * PG), 0);
    bf_engine_populate(m + 40 * PG, 0); /* nothing */
    ck_assert_uint_eq(resident(m + 12 * PG, len - 12 * PG), 0);
    /* with huge pages on: nothing (one fault per 2 MiB already) */
    bf_engine_set_huge_pages(true);
    bf_engine_populate(m + 20 * PG, 4 * PG);
    bf_engine_set_huge_pages(false);
    ck_assert_uint_eq(resident(m + 12 * PG, len - 12 * PG), 0);
    munmap(m, len);
}
END_TEST

#define CAP  200000u /* columns of 1.6 MiB and more: their own mappings */
#define LOAD 50000u

START_TEST(a_bulk_load_prefaults_the_slots_it_loads_and_not_the_capacity)
{
    struct bf_engine_config cfg;
    bf_engine_config_defaults(&cfg);
    cfg.capacity = CAP;
    struct bf_engine *e = NULL;
    ck_assert_int_eq(bf_engine_new(&cfg, &e), 0);
    /* untouched before the load (leaf_of is written whole at creation) */
    ck_assert_uint_eq(resident(e->idpfx, (size_t)CAP * 8), 0);
    /* (idle_since's last page is leaf_of's first: resident) */
    ck_assert_uint_eq(resident(e->idle_since, (size_t)CAP * 8 - PG), 0);
    struct bf_engine_bulk *b = NULL;
    ck_assert_int_eq(bf_engine_bulk_begin(e, LOAD, &b), 0);
    /* [0, LOAD) of every column resident before a record is written */
    size_t want8 = ((size_t)LOAD * 8 + PG - 1) / PG;
    ck_assert_uint_ge(resident(e->idpfx, (size_t)LOAD * 8), want8 - 1);
    ck_assert_uint_ge(resident(e->idpfx2, (size_t)LOAD * 8), want8 - 1);
    ck_assert_uint_ge(resident(e->id_off, (size_t)LOAD * 4), (size_t)LOAD * 4 / PG);
    ck_assert_uint_ge(resident(e->present, LOAD), (size_t)LOAD / PG);
    /* the capacity past it: not (the last loaded page may be shared, the
     * column's last page is the next column's first) */
    size_t tail = (size_t)LOAD * 8 + PG;
    ck_assert_uint_eq(resident((uint8_t *)e->idpfx + tail, (size_t)CAP * 8 - tail - PG), 0);
    /* idle_since (and in_release) are written for idle machines only: not */
    ck_assert_uint_eq(resident(e->idle_since, (size_t)CAP * 8 - PG), 0);
    ck_assert_uint_eq(resident(e->in_release, CAP - PG), 0);
    /* the load: ids of 40 bytes, every machine ineligible (its id is stored) */
    static char ids[LOAD][48];
    for (uint32_t s = 0; s < LOAD; s++) {
        snprintf(ids[s], sizeof ids[s], "machine-%08u-of-the-prefaulted-mirror", s);
        struct bf_engine_machine m = {.id = ids[s], .state = 0};
        ck_assert_int_eq(bf_engine_bulk_upsert(b, s, &m), 0);
        if (s == 0) /* the id buffer: BFE_POP_STEP pre-faulted ahead */
            ck_assert_uint_ge(resident(e->idbuf, e->idbuf_cap), BFE_POP_STEP / PG);
    }
    bf_engine_bulk_end(b, NULL);
    ck_assert_uint_eq(e->n_present, LOAD);
    ck_assert_str_eq(bfe_machine_id(e, LOAD - 1), ids[LOAD - 1]);
    /* the id buffer: what it holds resident, what it was pre-faulted ahead
     * given back at the load's end */
    size_t held = (e->idbuf_len + PG - 1) / PG, res = resident(e->idbuf, e->idbuf_cap);
    ck_assert_uint_ge(res, held);
    ck_assert_msg(res <= held + 1, "the id buffer: %zu pages resident for %zu held (cap %zu bytes)",
                  res, held, e->idbuf_cap);
    ck_assert_uint_eq(resident((uint8_t *)e->idpfx + tail, (size_t)CAP * 8 - tail - PG), 0);
    /* no machine idle: idle_since never written (an absent slot's is 0) */
    ck_assert_uint_eq(resident(e->idle_since, (size_t)CAP * 8 - PG), 0);
    /* after the load, a new id does not pre-fault ahead */
    size_t before = resident(e->idbuf, e->idbuf_cap);
    struct bf_engine_machine m = {.id = "one-more-machine-after-the-load-ended", .state = 0};
    ck_assert_int_eq(bf_engine_upsert(e, LOAD, &m), 0);
    ck_assert_uint_le(resident(e->idbuf, e->idbuf_cap), before + 1);
    bf_engine_free(e);
}
END_TEST

START_TEST(a_bulk_load_prefaults_nothing_with_huge_pages_on)
{
    bf_engine_set_huge_pages(true);
    struct bf_engine_config cfg;
    bf_engine_config_defaults(&cfg);
    cfg.capacity = CAP;
    struct bf_engine *e = NULL;
    ck_assert_int_eq(bf_engine_new(&cfg, &e), 0);
    struct bf_engine_bulk *b = NULL;
    ck_assert_int_eq(bf_engine_bulk_begin(e, LOAD, &b), 0);
    ck_assert_uint_eq(resident(e->idpfx, (size_t)CAP * 8), 0);
    bf_engine_bulk_end(b, NULL);
    bf_engine_free(e);
    bf_engine_set_huge_pages(false);
}
END_TEST

START_TEST(an_id_longer_than_the_bound_is_refused_and_the_bound_kept)
{
    struct bf_engine_config cfg;
    bf_engine_config_defaults(&cfg);
    cfg.capacity = 8;
    struct bf_engine *e = NULL;
    ck_assert_int_eq(bf_engine_new(&cfg, &e), 0);
    char *id = malloc(BF_ENGINE_ID_MAX + 2);
    ck_assert_ptr_nonnull(id);
    memset(id, 'x', BF_ENGINE_ID_MAX + 1);
    id[BF_ENGINE_ID_MAX + 1] = 0;
    struct bf_engine_machine m = {.id = id, .state = 0};
    ck_assert_int_eq(bf_engine_upsert(e, 0, &m), -EINVAL);
    struct bf_engine_bulk *b = NULL;
    ck_assert_int_eq(bf_engine_bulk_begin(e, 2, &b), 0);
    ck_assert_int_eq(bf_engine_bulk_upsert(b, 1, &m), -EINVAL);
    bf_engine_bulk_end(b, NULL);
    ck_assert_uint_eq(e->n_present, 0);
    id[BF_ENGINE_ID_MAX - 1] = 'y';
    id[BF_ENGINE_ID_MAX] = 0; /* the longest kept */
    ck_assert_int_eq(bf_engine_upsert(e, 2, &m), 0);
    ck_assert_uint_eq(e->id_len[2], BF_ENGINE_ID_MAX);
    ck_assert_str_eq(bfe_machine_id(e, 2), id);
    ck_assert_int_eq(bf_engine_upsert(e, 2, &m), 0); /* the same id again */
    ck_assert_uint_eq(e->n_present, 1);
    free(id);
    bf_engine_free(e);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("engine_restart_pages");
    TCase *t = tcase_create("populate");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, populate_makes_exactly_the_pages_of_the_range_resident);
    tcase_add_test(t, a_bulk_load_prefaults_the_slots_it_loads_and_not_the_capacity);
    tcase_add_test(t, a_bulk_load_prefaults_nothing_with_huge_pages_on);
    tcase_add_test(t, an_id_longer_than_the_bound_is_refused_and_the_bound_kept);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return check_run(suite());
}
