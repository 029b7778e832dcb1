/*
 * coord.c — the coordinator term high-water mark (LMDB under --data-dir)
 * and, when --coordinator-addr is set, the coordinator client
 * (reference/shard.md §4.7). Placeholder: term only.
 */
#include <errno.h>
#include <stdlib.h>

#include "session_internal.h"

int64_t coord_term(const struct ss *ss)
{
    return atomic_load_explicit(&ss->shm->st->session.coordinator_term, memory_order_relaxed);
}

int coord_start(struct ss *ss)
{
    (void)ss;
    return 0;
}

void coord_stop(struct ss *ss)
{
    (void)ss;
}
