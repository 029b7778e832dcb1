/*
 * executor.h — the executor's engine (private to src/executor, tests and
 * benchmarks): actions from the ACTIONS ring executed as concurrent provider
 * RPCs on one event loop (seed 000 §4, reference/shard.md §2 "execute
 * worker", §3.7; docs/internals.md "Actions ring", "Bootstrap").
 *
 * Consumption: the ring is read ahead with a private index, at most
 * `concurrency` actions in flight; only the prefix of finished positions is
 * released, so a successor (after a crash) is redelivered every unfinished
 * action. An action is live iff pending_enq[slot] == tag != pending_done[slot];
 * anything else (finished, or superseded by a newer action) is skipped.
 * SUPPRESSED / DRYRUN dispositions are only audited (and marked done).
 *
 * Each action has its own deadline (execute_timeout from its start),
 * independent of any cycle; every RPC carries the remaining time. Paths:
 *   Provision  Speculative -> Creating (stamp fingerprint, group) -> Create;
 *              an Idle ack continues into Bootstrap; a Creating ack ends there
 *              (reconcile finishes it); a garbage ack -> Failed.
 *   Bootstrap  Idle -> Configuring (stamp cluster, fingerprint, group) ->
 *              blob (--local-bootstrap stub, or BOOT_REQ/BOOT_RESP through the
 *              session with bootstrap_timeout: timeout / no session -> back
 *              to Idle, operator error -> Failed) -> Configure(blob,
 *              shard_metadata) -> Configured (stamp priority + buckets);
 *              already Configured for the same cluster and fingerprint ->
 *              success with nothing done.
 *   Reclaim,   RECLAIM instruction to the session first, then Configured ->
 *   Preempt    Draining -> Drain(grace) -> an Idle ack clears cluster and
 *              Assigned*; a Draining ack is left for reconcile (ADR-0059).
 *   Delete     Idle -> Deleting -> Delete -> Speculative (host released);
 *              any rejection (UNIMPLEMENTED included) -> Failed.
 * Provider answers: FAILED_PRECONDITION -> Failed, outcome `fenced`, an
 * Error log naming a zombie-shard incident, never retried; a transport
 * failure (deadline, cancel, unavailable: the provider may or may not have
 * applied it) leaves the machine in its transitional state flagged
 * BF_REC_NEEDS_REFRESH, so the reconciler's next successful pass sets the
 * provider's truth and the cycle re-derives — nothing is failed for an
 * outage and nothing stays transitional once the provider answers; any
 * other error -> Failed with last_error "<rpc>: ...".
 * An action read while the provider is not connected waits (in its
 * concurrency slot, machine untouched) until the connection is up, or until
 * its deadline: then it ends ctx_canceled with the machine in its start
 * state, and the cycle re-derives it.
 * A live action whose machine is already in the action's transitional state
 * was in flight when a predecessor died: the record is flagged
 * NEEDS_REFRESH and the action finished (never re-driven blind).
 *
 * Every transition of a cluster-bound machine pushes a node event (route:
 * the cluster after the mutation, else the one before it); every executed,
 * suppressed or dry-run action writes one audit line (docs/audit-log.md),
 * and so does every ownership record the cycle sends on ring OWN_AUDIT
 * (ADR-0055: transfers, reservations, domain changes), so the executor
 * stays the audit log's only writer.
 */
#ifndef BF_EXECUTOR_H
#define BF_EXECUTOR_H

#include <stdbool.h>
#include <stdint.h>

#include "bigfleet/net.h"
#include "bigfleet/provider.h"
#include "bigfleet/shm.h"

struct bf_exec;

struct bf_exec_opts {
    uint32_t concurrency;         /* actions in flight; 0 = 128 */
    int64_t execute_timeout_ns;   /* 0 = 30 s */
    int64_t bootstrap_timeout_ns; /* 0 = 30 s */
    bool local_bootstrap;         /* stub blobs instead of the session */
    int audit_fd;                 /* O_APPEND fd of the audit log, or -1 */
};

/* Outcome labels (shard.md §3.7), indexed by enum bf_outcome. */
const char *bf_exec_outcome_name(int outcome);

int bf_exec_new(struct bf_net_loop *loop, struct bf_shm *shm, struct bf_prov_client *client,
                const struct bf_exec_opts *o, struct bf_exec **out);
/* Drains BOOT_RESP and starts ring actions up to the concurrency. Call on
 * every wake (and periodically). */
void bf_exec_poll(struct bf_exec *e);
/* Replaces the audit log fd (a SIGHUP reopen; -1 = off) and returns the
 * previous one for the caller to close. */
int bf_exec_set_audit_fd(struct bf_exec *e, int fd);
/* Actions in flight now. */
uint32_t bf_exec_inflight(const struct bf_exec *e);
/* Ring positions read but not yet released. */
uint64_t bf_exec_unreleased(const struct bf_exec *e);
/*
 * Shutdown, in this order: bf_exec_close() (no new actions), free the
 * provider client (its in-flight calls complete CANCELLED: those actions end
 * flagged for refresh), then bf_exec_free() (actions still waiting for a
 * bootstrap blob are dropped unreleased: a successor is redelivered them).
 */
void bf_exec_close(struct bf_exec *e);
void bf_exec_free(struct bf_exec *e);

/*
 * One audit line (docs/audit-log.md) into buf: returns its length (with the
 * trailing newline), truncated values never split a UTF-8 sequence. Exposed
 * for tests. error may be NULL.
 */
size_t bf_exec_audit_format(char *buf, size_t cap, int64_t now_ns, uint64_t cycle,
                            const struct bf_action_msg *a, const char *machine, size_t machine_len,
                            const char *cluster, size_t cluster_len, const char *outcome,
                            double duration_ms, const char *error);

/* "transfer_out", "transfer_in", "speculative_out", "speculative_in",
 * "reserved_for_transfer", "reservation_expired", "domain_assigned",
 * "domain_unassigned" (enum bf_own_event); "unknown" otherwise. */
const char *bf_exec_own_event_name(int event);
/*
 * One ownership audit line (docs/audit-log.md "Ownership records") from a
 * ring OWN_AUDIT record: the header and the strings that follow it (len[]
 * bytes each, in enum bf_own_audit_str order). Returns its length.
 */
size_t bf_exec_audit_format_ownership(char *buf, size_t cap, const struct bf_own_audit_hdr *h,
                                      const char *strings, size_t strings_len);

#endif
