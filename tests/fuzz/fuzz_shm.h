/*
 * fuzz_shm.h — scratch shared segments for the fuzz targets that need a
 * struct bf_shm (rollup, blobs, inspect_segment).
 *
 * Each fuzzing process owns the segments of shard id "<prefix>-<pid>"
 * (unique on the machine), removes them at exit, and on start-up removes the
 * segments of its own prefix whose process is gone (a crashed earlier run):
 * never anyone else's.
 */
#ifndef BF_FUZZ_SHM_H
#define BF_FUZZ_SHM_H

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include "bigfleet/shm.h"
#include "fuzz.h"

static char fuzz_shm_id[64];

static inline void fuzz_shm_unlink_at_exit(void)
{
    if (fuzz_shm_id[0])
        bf_shm_unlink(fuzz_shm_id);
}

/* Removes /dev/shm/bigfleet.<prefix>-<pid>.* of dead processes. */
static inline void fuzz_shm_sweep(const char *prefix)
{
    DIR *d = opendir("/dev/shm");
    if (!d)
        return;
    char head[80];
    int hl = snprintf(head, sizeof head, "bigfleet.%s-", prefix);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, head, (size_t)hl) != 0)
            continue;
        char *end;
        long pid = strtol(e->d_name + hl, &end, 10);
        bool dead = pid > 0 && *end == '.' && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
        if (!dead)
            continue;
        char id[64];
        snprintf(id, sizeof id, "%s-%ld", prefix, pid);
        bf_shm_unlink(id);
    }
    closedir(d);
}

/* Creates fresh segments for this process (replacing its earlier ones). */
static inline void fuzz_shm_create(struct bf_shm *s, const char *prefix,
                                   const struct bf_shm_caps *caps)
{
    if (!fuzz_shm_id[0]) {
        fuzz_shm_sweep(prefix);
        snprintf(fuzz_shm_id, sizeof fuzz_shm_id, "%s-%d", prefix, (int)getpid());
        atexit(fuzz_shm_unlink_at_exit);
    }
    bf_shm_unlink(fuzz_shm_id);
    char err[256];
    int rc = bf_shm_create(s, fuzz_shm_id, caps, 1, 0, err, sizeof err);
    if (rc) {
        fprintf(stderr, "fuzz: cannot create scratch segments %s: %s\n", fuzz_shm_id, err);
        abort();
    }
}

static inline void fuzz_shm_destroy(struct bf_shm *s)
{
    bf_shm_detach(s);
    bf_shm_unlink(fuzz_shm_id);
}

#endif /* BF_FUZZ_SHM_H */
