/*
 * shm_fixture.h — the shared-memory segments a unit test runs against: one
 * shard id per test process, created empty before each test and removed
 * after it (a check fixture). Linked into every unit test (GNUmakefile's
 * UNIT_HELPERS); the suites that use it read and write g_s directly.
 *
 *   g_id   the shard id, "test-<name>-<pid>" (each forked test has its own)
 *   g_s    the four segments, mapped read-write (as the supervisor maps them)
 *
 * shm_fixture_create(name, caps, epoch): removes segments of the same id an
 * earlier test of this pid left, then bf_shm_create(g_id, caps, epoch,
 * generation 0). caps NULL: 1024 machines, 256 Needs, 16 clusters. A
 * failure fails the running test with bf_shm_create's message.
 * shm_fixture_remove(): detaches g_s and unlinks g_id's segments.
 * Single-threaded: call them from a check setup/teardown.
 */
#ifndef SHM_FIXTURE_H
#define SHM_FIXTURE_H

#include <stdint.h>

#include "bigfleet/shm.h"

extern char g_id[64];
extern struct bf_shm g_s;

void shm_fixture_create(const char *name, const struct bf_shm_caps *caps, int64_t epoch);
void shm_fixture_remove(void);
/* The size in bytes of g_id's segment file of this kind (fstat of the
 * /dev/shm file: what the file backs, grown tables included). */
uint64_t shm_fixture_file_bytes(int kind);

#endif
