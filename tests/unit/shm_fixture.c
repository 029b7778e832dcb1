/*
 * shm_fixture.c — one unit test's shared-memory segments (see shm_fixture.h).
 */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
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

uint64_t shm_fixture_file_bytes(int kind)
{
    char name[128];
    bf_shm_name(g_id, kind, name, sizeof name);
    int fd = shm_open(name, O_RDONLY, 0);
    ck_assert_int_ge(fd, 0);
    struct stat st;
    ck_assert_int_eq(fstat(fd, &st), 0);
    close(fd);
    return (uint64_t)st.st_size;
}
