/*
 * bigfleet/shm_stat.h — the only atomic operations code outside src/shm
 * may use on shared-segment words (counters, gauges, published flags), with
 * their memory order stated once here (reference/aesthetics.md §2.2).
 * Protocols (seqlocks, latches, rings, change logs, the result and
 * ownership publishes, pending marks, dead-writer repair) are functions of
 * bigfleet/shm.h, implemented in src/shm; `make lint-atomics`
 * (scripts/lint-atomics) fails on any other atomic operation outside
 * src/shm that is not on its allow-list.
 *
 * Arguments are lvalues of an _Atomic type (a field of a shm_layout.h
 * struct, or a process-local _Atomic counter), not pointers:
 * BF_STAT_INC(st->cycle.cycles).
 *
 * Statistics — counters and gauges read only to be reported (metrics,
 * bigfleet-inspect) or compared with nothing else. Relaxed: no other data
 * is published through them, so a reader may see one counter ahead of
 * another; each counter alone never goes backwards (INC/ADD), a gauge reads
 * as some value that was set (SET). RMWs are atomic across processes.
 */
#ifndef BIGFLEET_SHM_STAT_H
#define BIGFLEET_SHM_STAT_H

#include <stdatomic.h>

#define BF_STAT_INC(c)    atomic_fetch_add_explicit(&(c), 1, memory_order_relaxed)
#define BF_STAT_ADD(c, n) atomic_fetch_add_explicit(&(c), (n), memory_order_relaxed)
#define BF_STAT_SUB(c, n) atomic_fetch_sub_explicit(&(c), (n), memory_order_relaxed)
#define BF_STAT_SET(c, v) atomic_store_explicit(&(c), (v), memory_order_relaxed)
#define BF_STAT_GET(c)    atomic_load_explicit(&(c), memory_order_relaxed)
/* Reads and zeroes in one step (a dead child's CPU counter folded into a
 * lifetime total by the supervisor). */
#define BF_STAT_TAKE(c) atomic_exchange_explicit(&(c), 0, memory_order_relaxed)

/*
 * Published words — a value one process stores for another to act on: a
 * child's pid, state, wake fd and heartbeat; listening fds handed over by
 * the supervisor; flags (first_reconcile_done, session_listening,
 * shutting_down, actuation_paused); request/done sequence numbers
 * (reconcile_req_seq / reconcile_done_seq); table lengths (n_clusters,
 * rows_used, n_types, n_zones, the action serial).
 * Release store / acquire load: everything the writer stored before
 * BF_SHARED_STORE is visible to a reader whose BF_SHARED_LOAD returned that
 * value (or a later one). BF_SHARED_BUMP is a release increment of a change
 * counter (needs.change_counter) read with BF_SHARED_LOAD.
 */
#define BF_SHARED_STORE(x, v) atomic_store_explicit(&(x), (v), memory_order_release)
#define BF_SHARED_LOAD(x)     atomic_load_explicit(&(x), memory_order_acquire)
#define BF_SHARED_BUMP(x)     atomic_fetch_add_explicit(&(x), 1, memory_order_release)

/*
 * A plain (non-_Atomic) field of a buffer being copied under a publish
 * protocol (bf_result_read_begin / bf_result_read_valid): a relaxed load,
 * which is enough because the protocol's re-check decides whether the copy
 * is kept (a torn value is discarded, never acted on).
 */
#define BF_SHM_PEEK(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)

#endif /* BIGFLEET_SHM_STAT_H */
