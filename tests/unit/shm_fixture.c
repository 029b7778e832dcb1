/*
 * shm_fixture.c — one unit test's shared-memory segments (see shm_fixture.h).
 */
#include <check.h>
#include <stdio.h>
#include <unistd.h>

#include "shm_fixture.h"

char g_id[64];
struct bf_shm g_s;

void shm_fixture_create(const char *name, const struct bf_shm_caps *caps, int64_t epoch)
{
    static const struct bf_shm_caps small = {
        .max_machines = 1024, .max_needs = 256, .max_clusters = 16};
    char err[256] = "";
    snprintf(g_id, sizeof g_id, "test-%s-%d", name, (int)getpid());
    bf_shm_unlink(g_id);
    int rc = bf_shm_create(&g_s, g_id, caps ? caps : &small, epoch, 0, err, sizeof err);
    ck_assert_msg(rc == 0, "create %s: %s", g_id, err);
}

void shm_fixture_remove(void)
{
    bf_shm_detach(&g_s);
    bf_shm_unlink(g_id);
}
