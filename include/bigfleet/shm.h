/*
 * bigfleet/shm.h — creating, attaching and using the shared segments whose
 * layout bigfleet/shm_layout.h fixes (ARCHITECTURE.md §3,
 * reference/aesthetics.md §2–§3).
 *
 * A `struct bf_shm` is a process-local handle holding the four mappings and
 * typed pointers into them. The supervisor creates the segments
 * (bf_shm_create) before forking; every child and every inspection tool
 * attaches by shard id (bf_shm_attach), which validates magic, layout
 * version, kind and size first. Inspection tools attach read-only
 * (PROT_READ): every read path here works on a read-only mapping; write
 * paths must not be called on one.
 *
 * Process rules: the handle is not shared between threads without external
 * locking, except that readers and the string table may be used from two
 * threads of one process (the session's loop and its ingest thread): the
 * string lock is keyed by pid, so a thread waits for its sibling to release
 * it (bounded) exactly as for another process. Functions that
 * write name the role allowed to call them; the rest are readers usable by
 * anyone. Waits are bounded: a seqlock read retries at most
 * BF_SEQLOCK_READ_TRIES times, a seqlock write acquisition and the string
 * lock give up after their timeouts.
 *
 * Errors are negative errno values, listed per function.
 */
#ifndef BIGFLEET_SHM_H
#define BIGFLEET_SHM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bigfleet/model.h"
#include "bigfleet/shm_layout.h"
#include "bigfleet/shm_stat.h"

#define BF_SEQLOCK_READ_TRIES       256
#define BF_SEQLOCK_WRITE_TIMEOUT_NS (50LL * 1000 * 1000)  /* 50 ms */
#define BF_STRLOCK_TIMEOUT_NS       (200LL * 1000 * 1000) /* 200 ms */

/* Capacities chosen by flags (--max-machines, --max-needs, --max-clusters). */
struct bf_shm_caps {
    uint32_t max_machines; /* default 600000 */
    uint32_t max_needs;    /* default 65536 (rows per cycle across clusters) */
    uint32_t max_clusters; /* default 4096 */
};

struct bf_shm {
    void *base[BF_SEG_KIND_COUNT];
    size_t len[BF_SEG_KIND_COUNT];
    bool readonly;
    uint32_t pid; /* this process, stored as seqlock/lock owner */
    int role;     /* enum bf_role of this process (stats slots) */
    char shard_id[BF_SHARD_ID_MAX];
    /* typed views (process-local pointers into the mappings) */
    struct bf_seg_header *inv_hdr, *needs_hdr, *rings_hdr, *state_hdr;
    struct bf_inv_meta *inv;
    _Atomic uint32_t *strhash;
    uint8_t *arena;
    struct bf_shm_machine *records;
    _Atomic uint32_t *idindex;
    struct bf_changelog *changelog; /* [BF_CHANGELOG_WRITERS] */
    _Atomic uint8_t *pending_enq;
    _Atomic uint8_t *pending_done;
    struct bf_needs_meta *needs;
    struct bf_shm_cluster *clusters;
    struct bf_need_row *rows;
    struct bf_stamp *stamps;
    _Atomic uint32_t *stamp_observed;
    struct bf_ring_hdr *ring[BF_RING_COUNT];
    struct bf_state_main *st;
    union bf_verdict_cell *verdicts; /* [4 * max_needs], interleaved: bf_verdict_index */
    /* copies of header fields */
    uint32_t max_machines, max_needs, max_clusters, index_mask, changelog_mask, stamp_mask;
    uint64_t arena_bytes; /* the arena's reserve (strings_arena_bytes) */
    uint64_t arena_off;   /* the arena's offset in the inventory segment */
    int inv_fd;           /* the inventory segment (read-write attachments): arena growth */
    /* segments whose last table grows with use (bf_shm_grow), by kind;
     * grow_off 0: the kind's tables are all fixed */
    int grow_fd[BF_SEG_KIND_COUNT];           /* read-write attachments; else -1 */
    uint64_t grow_off[BF_SEG_KIND_COUNT];     /* the growing table's offset in the segment */
    uint64_t grow_reserve[BF_SEG_KIND_COUNT]; /* its reserve: the most it may grow to */
};

/* --------------------------------------------------------------- segments */

/*
 * A segment's last table that grows with use (the way the inventory's
 * string arena does): every process maps the table's whole reserve (address
 * space only), the file backs its first bf_shm_grown() bytes, and the
 * table's one writer calls bf_shm_grow() BEFORE it publishes anything
 * (a row count) that lies past what is backed, so a reader that bounds what
 * it reads by the published count, or by bf_shm_grown(), never touches
 * bytes past the file's end (SIGBUS). The file never shrinks while the
 * segment lives.
 *
 * bf_shm_grow: makes the table's first `upto` bytes backed, growing the
 * file by at least BF_ARENA_STEP or an eighth of what it backs, capped at
 * the reserve. The new bytes are allocated (fallocate(2)), so a full
 * tmpfs or RLIMIT_FSIZE refuses here rather than with a SIGBUS at the first
 * store. One writer per table (no lock). 0, -EINVAL (the kind's
 * tables are fixed), -ENOSPC (past the reserve, or tmpfs refused), -EROFS
 * (a read-only attachment). [the table's writer]
 * bf_shm_grown: the bytes of the table the file backs (acquire; pairs with
 * bf_shm_grow's release store after the file grew), at most the reserve;
 * 0 for a kind without a growing table. [any process]
 */
int bf_shm_grow(struct bf_shm *s, int kind, uint64_t upto);
uint64_t bf_shm_grown(const struct bf_shm *s, int kind);

/* "/bigfleet.<id>.<kind>" into buf (for shm_open). */
void bf_shm_name(const char *shard_id, int kind, char *buf, size_t n);
/* Segment sizes for these capacities, in bytes (for reporting/benchmarks). */
size_t bf_shm_segment_size(int kind, const struct bf_shm_caps *caps);

/*
 * Creates (O_EXCL, mode 0600) and initialises the four segments, then maps
 * them read-write into s. Existing segments of the same id must have been
 * unlinked first (bf_shm_unlink). [supervisor]
 * Errors: -EEXIST (segments exist), -EINVAL (bad id or capacities),
 * -ENOMEM/-ENOSPC (tmpfs full), other -errno from shm_open/ftruncate/mmap.
 * err (may be NULL) receives a message.
 */
int bf_shm_create(struct bf_shm *s, const char *shard_id, const struct bf_shm_caps *caps,
                  int64_t epoch, uint32_t generation, char *err, size_t errlen);
/*
 * Attaches to existing segments; readonly maps PROT_READ (inspection).
 * Validates each header: magic, kind, layout version (a mismatch names both
 * versions in err), size (the file's, the header's), ready flag; then every
 * capacity, derived capacity, table offset and length (offset + length
 * overflow-checked against the file size) and every offset stored inside a
 * table (pending arrays, change-log entries, ring kind/slot/capacity/data)
 * against the layout recomputed from the capacities, which must agree in
 * all four segments. Nothing is read through a header offset before that.
 * Ownership is checked first (least privilege): read-write needs segments
 * owned by the caller's effective uid (or a root caller), read-only needs
 * segments no one but their owner can write; all four must have one owner.
 * Errors: -ENOENT (no segments for this id), -EPERM (ownership or mode, the
 * uids named in err), -EACCES (not readable by this user),
 * -EPROTO (bad magic/kind/size, truncated file, a capacity, table or inner
 * offset that does not match the layout: err names the segment and field),
 * -EPROTONOSUPPORT (layout version mismatch), -EAGAIN (not initialised yet),
 * other -errno.
 */
int bf_shm_attach(struct bf_shm *s, const char *shard_id, bool readonly, char *err, size_t errlen);
/*
 * Ownership and mode of the segments (least privilege, docs/operating.md):
 * the supervisor creates them 0600 (0640 with an inspect group) and hands
 * them to the children's account. owner_uid/owner_gid (uid_t)-1 keep the
 * creator's. [supervisor, before forking]. 0 or -errno (fchown/fchmod);
 * message in err.
 */
struct bf_shm_owner {
    uint32_t uid;  /* (uint32_t)-1 = the creator */
    uint32_t gid;  /* (uint32_t)-1 = the creator's */
    uint32_t mode; /* 0600 or 0640 */
};
int bf_shm_set_owner(struct bf_shm *s, const struct bf_shm_owner *o, char *err, size_t errlen);
/* Unmaps (does not unlink). Safe on a zeroed handle. */
void bf_shm_detach(struct bf_shm *s);
/* Unlinks all four segment names; returns 0 if at least one existed, else -ENOENT. */
int bf_shm_unlink(const char *shard_id);

/* ---------------------------------------------------- live configuration */

/* The settings a SIGHUP may change (struct bf_live_config, shm_layout.h). */
struct bf_live_values {
    bool actuation_paused;
    bool dry_run;
    double reclaim_cap_fraction;
    uint32_t max_actions_per_cycle;
    int log_level; /* enum bf_log_level */
    char tls_cert[BF_LIVE_PATH_WORDS * 8];
    char tls_key[BF_LIVE_PATH_WORDS * 8];
    char tls_ca[BF_LIVE_PATH_WORDS * 8];
    char audit_log[BF_LIVE_PATH_WORDS * 8];
    uint64_t generation; /* filled by bf_live_read */
};
struct bf_config;
/* The live settings of a parsed configuration (paths truncated to 1023 bytes). */
void bf_live_from_config(struct bf_live_values *v, const struct bf_config *c);
/* Publishes v (generation + 1). [supervisor] */
void bf_live_publish(struct bf_shm *s, const struct bf_live_values *v);
/* Copies the live settings. 0, or -EAGAIN when 64 attempts all raced a
 * publish (the caller keeps what it has and tries again later). Lock-free. */
int bf_live_read(const struct bf_shm *s, struct bf_live_values *v);
/* The current generation (acquire); cheap: compare it on every tick. */
uint64_t bf_live_generation(const struct bf_shm *s);
/* Sets the role used for per-role counters (seqlock retries). */
void bf_shm_set_role(struct bf_shm *s, int role);
/* Bytes of the four segments' files (see bf_shm_segment_bytes). */
size_t bf_shm_total_bytes(const struct bf_shm *s);
/* Bytes of one segment's file (what tmpfs may hold): the mapping, except
 * for the inventory, whose string arena is backed only as far as it grew
 * (strtab.arena_committed). bf_shm_total_bytes is their sum. */
size_t bf_shm_segment_bytes(const struct bf_shm *s, int kind);

/* --------------------------------------------------------------- strings */

/*
 * Interns bytes (may contain NUL), returning its stable ref (0 for len 0).
 * Takes the string lock (bounded). [any writer process]
 * Errors: -ENOSPC (arena or hash full, counted), -ETIMEDOUT (lock busy),
 * -E2BIG (len > 16 MiB), -EROFS (read-only handle).
 */
int bf_str_intern(struct bf_shm *s, const void *bytes, uint32_t len, uint32_t *ref);
static inline int bf_str_intern_cstr(struct bf_shm *s, const char *str, uint32_t *ref);
/*
 * As bf_str_intern, but for strings that are unique per machine or per
 * event (host refs, error messages): refuses with -ENOSPC (not counted as a
 * failure) once the arena or the hash is three-quarters full, so such
 * strings can never starve the essential ones (ids, profiles, clusters,
 * fingerprints), which the table never frees. Callers fall back to a
 * bounded string.
 */
int bf_str_intern_soft(struct bf_shm *s, const void *bytes, uint32_t len, uint32_t *ref);
/* Bytes of the string arena a new string of len bytes takes (entry header,
 * the bytes, a NUL, 8-byte alignment): for reserve checks before interning. */
uint64_t bf_str_cost(uint32_t len);
/* Bytes of the string arena in use (published end, acquire: every entry
 * below it is complete). For reserve checks and growth accounting. Any
 * process. */
uint64_t bf_str_arena_used(const struct bf_shm *s);
/* Finds an existing entry without inserting. 0 or -ENOENT. Lock-free. */
int bf_str_find(const struct bf_shm *s, const void *bytes, uint32_t len, uint32_t *ref);
/* A hint, no effect on the table: starts loading the hash bucket a probe
 * for these bytes begins at, so a bf_str_find/intern of them soon after
 * finds it in cache (the reconciler's cold start issues it one machine
 * ahead). Reads one word of the table, nothing else. Any process. */
void bf_str_prefetch(const struct bf_shm *s, const void *bytes, uint32_t len);
/* The bytes of ref (NUL-terminated; *len gets the length, may be NULL).
 * Returns NULL for a ref whose entry or bytes lie outside the published
 * arena (the published end bounded by the arena's size: a corrupted segment
 * never leads a reader outside it). The pointer stays valid while the
 * segment is mapped. Lock-free. */
const char *bf_str(const struct bf_shm *s, uint32_t ref, uint32_t *len);

/* Registries (dimensions, instance types, zones): index of name, adding it
 * under the string lock when absent. -ENOSPC when full, -EINVAL for an empty
 * or too-long name, -ETIMEDOUT. Lookups return -1 when absent. */
int bf_dim_intern(struct bf_shm *s, const char *name);
int bf_dim_lookup(const struct bf_shm *s, const char *name);
void bf_shm_dims(const struct bf_shm *s, struct bf_dims *out);
int bf_type_intern(struct bf_shm *s, const char *name);
int bf_zone_intern(struct bf_shm *s, const char *name);
const char *bf_type_name(const struct bf_shm *s, uint32_t idx);
const char *bf_zone_name(const struct bf_shm *s, uint32_t idx);

/* --------------------------------------------------------------- inventory */

/*
 * Consistent copy of a record (seqlock read, bounded retries; retries and
 * give-ups are counted per role). 0, -EAGAIN (a writer held the record for
 * the whole retry budget: a live long write, or a dead writer the
 * supervisor has not repaired yet), -ERANGE (slot >= capacity).
 * The copy may be an invalid (free) slot: check BF_REC_VALID.
 */
int bf_inv_read(const struct bf_shm *s, uint32_t slot, struct bf_machine_rec *out);
/* Same, also returning the even seq the copy was taken at. */
int bf_inv_read_seq(const struct bf_shm *s, uint32_t slot, struct bf_machine_rec *out,
                    uint32_t *seq);

/*
 * Bulk reads for a full rescan (i18-restart4, stop 29; src/shm/scan.c).
 * A process that reads every record once (a restarted cycle process
 * rebuilding its mirror) would touch every page of the records table and
 * most of the string arena through its mapping for the first time; on this
 * project's hypervisor each such first touch of a 4 KiB page costs several
 * microseconds (~8 us measured), far more than the page's bytes. A scan
 * handle reads them with pread(2) into small buffers it reuses instead:
 *  - records in chunks of BF_INV_SCAN_RECS, each chunk copied three times
 *    (seqs before, payload, seqs after, a full fence between the copies);
 *    a record is taken from the payload copy when its seq is the same even
 *    value in the copies before and after (no write began or ended while
 *    the payload was copied: the seqlock's R1/R2 with the copies' order in
 *    place of the loads' order), else it is read live (bf_inv_read_seq,
 *    counted there);
 *  - strings through a window of the published arena (entries never
 *    change once published, strtab.c), reloaded at the asked ref when the
 *    ref falls outside it; refs out of window order fall back to bf_str,
 *    and so does every later ref once the window mostly misses.
 * Without the inventory's descriptor (read-only attachments close it) or
 * after a failed or short pread everything is read live. Same results as
 * bf_inv_read / bf_str. One thread; the handle is ~200 KiB; the bf_shm it
 * was begun on must outlive it, and it serves one rescan (never across a
 * re-attach of the segment). The record check assumes the kernel's copy
 * never tears an aligned 4-byte seq word (true of the x86-64 and arm64
 * copy routines, not promised by pread's API); a torn seq could match
 * falsely only after ~2^31 writes to one record during one chunk's copies.
 */
#define BF_INV_SCAN_RECS   1024u       /* 64 KiB of records per copy */
#define BF_INV_SCAN_WINDOW (64u << 10) /* bytes of arena per window */
struct bf_inv_scan;
struct bf_inv_scan_stats {
    uint64_t copied;     /* records taken from the copies */
    uint64_t live;       /* records read live (seq moved or odd, no copy) */
    uint64_t chunks;     /* chunks copied (three preads each) */
    uint64_t str_window; /* strings served from the window */
    uint64_t str_live;   /* strings read live through bf_str */
    uint64_t win_loads;  /* window reloads */
};
/* 0 or -ENOMEM. */
int bf_inv_scan_begin(const struct bf_shm *s, struct bf_inv_scan **out);
/* bf_inv_read(s, slot, out) through the copies; same returns. */
int bf_inv_scan_read(struct bf_inv_scan *sc, uint32_t slot, struct bf_machine_rec *out);
/* bf_str(s, ref, len), but the bytes may be the window's: valid until the
 * next bf_inv_scan_str or bf_inv_scan_end on this handle. */
const char *bf_inv_scan_str(struct bf_inv_scan *sc, uint32_t ref, uint32_t *len);
/* Frees the handle (NULL: no-op); st (may be NULL) gets its counts. */
void bf_inv_scan_end(struct bf_inv_scan *sc, struct bf_inv_scan_stats *st);

/* The id ref in slot's first payload word as it is now, without the
 * seqlock: a hint for a record a writer holds (bf_inv_read gave -EAGAIN),
 * possibly torn or stale, never a value to act on. Any reader. */
uint32_t bf_inv_peek_id(const struct bf_shm *s, uint32_t slot);
/* Slot of the machine whose id ref is id_ref: 0 or -ENOENT. Lock-free. */
int bf_inv_lookup(const struct bf_shm *s, uint32_t id_ref, uint32_t *slot);
/* Same by id string (finds the ref first). */
int bf_inv_lookup_id(const struct bf_shm *s, const char *id, size_t len, uint32_t *slot);

/* A write transaction on one record (seqlock writer side). */
struct bf_inv_txn {
    uint32_t slot;
    uint32_t seq; /* the odd seq we hold */
    struct bf_machine_rec old;
};
/*
 * Acquires the record's writer side by CAS (even -> odd, storing our pid),
 * copying the current payload into t->old. Bounded: spins, then yields,
 * up to BF_SEQLOCK_WRITE_TIMEOUT_NS. [reconciler | executor | supervisor]
 * Errors: -EBUSY (another writer held it past the timeout), -ERANGE, -EROFS.
 */
int bf_inv_begin(struct bf_shm *s, uint32_t slot, struct bf_inv_txn *t);
/* Writes rec, appends the slot to change log `cl_writer`
 * (enum bf_changelog_writer), releases (seq -> even). */
void bf_inv_commit(struct bf_shm *s, struct bf_inv_txn *t, const struct bf_machine_rec *rec,
                   int cl_writer);
/* Releases without changing the payload (seq still advances by 2). */
void bf_inv_abort(struct bf_shm *s, struct bf_inv_txn *t);

/*
 * Inserts a new machine (rec->id must be set, rec->flags gets BF_REC_VALID):
 * allocates a slot (free stack first, then the high-water mark), writes the
 * record, publishes it in the id index. [reconciler only]
 * Errors: -EEXIST (*slot set to the existing slot), -ENOSPC (no free slot or
 * index full), -EINVAL.
 */
int bf_inv_insert(struct bf_shm *s, const struct bf_machine_rec *rec, uint32_t *slot);
/*
 * bf_inv_insert without the id lookup, for the cold start's bulk inserts:
 * the caller (the sole inserter) guarantees that no record holds rec->id,
 * e.g. because bf_str_find did not find the id's bytes before it interned
 * them (a record's id ref always names an existing string, and only the
 * reconciler inserts records). Saves the probe's record reads (a random
 * record per collision in the id index). [reconciler only]
 * Errors: -ENOSPC (no free slot or index full), -EINVAL, -EROFS, -EBUSY.
 */
int bf_inv_insert_new(struct bf_shm *s, const struct bf_machine_rec *rec, uint32_t *slot);
/* A hint, no effect on the index: starts loading the id index bucket of
 * id_ref, so an insert or lookup of it soon after finds it in cache
 * (issued when an id is interned, before the rest of its record is built).
 * Any process. */
void bf_inv_index_prefetch(const struct bf_shm *s, uint32_t id_ref);
/* Removes a machine: tombstones its index entry, clears the record (flags 0),
 * pushes the slot on the free stack, logs the change. [reconciler only]
 * Errors: -ENOENT, -EBUSY. */
int bf_inv_remove(struct bf_shm *s, uint32_t slot);
/* Slots [0, hwm) may hold machines; iterate them for full scans. */
static inline uint32_t bf_inv_hwm(const struct bf_shm *s)
{
    return atomic_load_explicit(&s->inv->slot_hwm, memory_order_acquire);
}

/* ------------------------------------------------- dead-writer repair
 * Everything a writer killed mid-write can leave behind, repaired in one
 * place (src/shm/repair.c explains each case). [supervisor, only after
 * waitpid() reaped dead_pid: the dead writer can store nothing more] */

/* What one repair found (the supervisor counts and logs it). */
struct bf_repair_report {
    int records;      /* machine records left odd (bf_inv_repair_dead_writer) */
    int cluster_rows; /* cluster rows left mid-write (bf_cluster_repair_dead_writer) */
    int stamps;       /* latency stamps left odd (bf_stamp_repair_dead_writer) */
    int locks;        /* 1 if it held the string lock (bf_strtab_repair_dead_writer) */
};
/*
 * The whole repair after reaping `dead_pid`, whose role was `dead_role`
 * (enum bf_role): its records, its string lock, its cluster rows, and, when
 * it was the session (the stamps' only writer), the stamps. Never fails;
 * *out gets the counts.
 */
void bf_shm_repair_dead_writer(struct bf_shm *s, uint32_t dead_pid, int dead_role,
                               struct bf_repair_report *out);
/* Every record left odd by dead_pid is made even with BF_REC_NEEDS_REFRESH
 * set (and logged to the supervisor's change log); every writer word naming
 * it is cleared. Returns the number of records repaired. */
int bf_inv_repair_dead_writer(struct bf_shm *s, uint32_t dead_pid);
/* The string table's intern lock, if dead_pid still holds it, is released
 * (CAS: a live holder is never touched). Returns 1 if it was released, else
 * 0. (An interning process that finds the lock held by a dead pid steals it
 * itself, counted in strtab.lock_steals; this is the supervisor's side.) */
int bf_strtab_repair_dead_writer(struct bf_shm *s, uint32_t dead_pid);
/* Every cluster row whose writer word names dead_pid: the copy readers were
 * reading (seq & 1) is copied over the other, an odd seq made even, the
 * writer word cleared. Returns the number of rows repaired. */
int bf_cluster_repair_dead_writer(struct bf_shm *s, uint32_t dead_pid);
/* Every stamp left odd is made even, keeping its fields. Only after the
 * session (their sole writer) died. Returns the number repaired. */
int bf_stamp_repair_dead_writer(struct bf_shm *s);

/* --------------------------------------------------------------- change log */

/* Appends a slot to a change log (never blocks). [the log's writer] */
void bf_cl_append(struct bf_shm *s, int cl_writer, uint32_t slot);
typedef void (*bf_cl_fn)(void *arg, uint32_t slot);
/*
 * Drains change log `cl_writer` calling fn per entry (duplicates possible).
 * Returns the number of entries, or -EOVERFLOW when the producer lapped the
 * consumer (entries were lost: the caller must rescan every slot; the tail
 * is reset to the head and the overflow counted). [cycle]
 */
int bf_cl_drain(struct bf_shm *s, int cl_writer, bf_cl_fn fn, void *arg);
/* Empties change log `cl_writer` without reading it (tail = head): before a
 * full rescan, so entries appended during the scan are seen next time. [cycle] */
void bf_cl_skip(struct bf_shm *s, int cl_writer);
/* The log's head: the position after its last entry (acquire: the entries
 * before it are readable). Any process; a cursor for bf_cl_peek. */
uint64_t bf_cl_head(const struct bf_shm *s, int cl_writer);
/* Returns nonzero to stop bf_cl_peek early. */
typedef int (*bf_cl_peek_fn)(void *arg, uint32_t slot);
/*
 * Reads change log `cl_writer` from absolute position `from` without
 * consuming it (the cycle owns the tail): a second consumer's private
 * cursor (the reconciler). *head gets the head the read stopped at (the
 * next `from`); fn is called per entry naming a slot below max_machines,
 * until it returns nonzero. Returns the number of entries passed to fn, or
 * -EOVERFLOW when the producer was already more than the log's capacity
 * past `from` (entries lost; fn not called), or -ESTALE when it lapped
 * `from` while the entries were read (fn may have seen overwritten
 * entries: some were lost). Lock-free; never writes. [any process]
 */
int bf_cl_peek(const struct bf_shm *s, int cl_writer, uint64_t from, uint64_t *head,
               bf_cl_peek_fn fn, void *arg);

/* --------------------------------------------------------------- pending */

/* True while an action is in flight on slot (enq != done). Any reader. */
static inline bool bf_pending(const struct bf_shm *s, uint32_t slot)
{
    return atomic_load_explicit(&s->pending_enq[slot], memory_order_acquire) !=
           atomic_load_explicit(&s->pending_done[slot], memory_order_acquire);
}
/* Marks slot in flight; returns the tag to carry in the action. [cycle] */
static inline uint8_t bf_pending_mark(struct bf_shm *s, uint32_t slot)
{
    uint8_t t = (uint8_t)(atomic_load_explicit(&s->pending_enq[slot], memory_order_relaxed) + 1);
    atomic_store_explicit(&s->pending_enq[slot], t, memory_order_release);
    return t;
}
/* Clears the in-flight mark once the action with `tag` finished. [executor] */
static inline void bf_pending_done(struct bf_shm *s, uint32_t slot, uint8_t tag)
{
    atomic_store_explicit(&s->pending_done[slot], tag, memory_order_release);
}
/* Takes back the mark bf_pending_mark returned (`tag`) when the action
 * carrying it was never enqueued (ring full). [cycle: pending_enq's only
 * writer] */
static inline void bf_pending_unmark(struct bf_shm *s, uint32_t slot, uint8_t tag)
{
    atomic_store_explicit(&s->pending_enq[slot], (uint8_t)(tag - 1), memory_order_release);
}
/* The tag of the latest action marked on slot, and of the latest finished
 * (acquire: pairs with bf_pending_mark / bf_pending_done). An action with
 * tag t is live while enq == t and done != t. Any reader. */
static inline uint8_t bf_pending_enq_tag(const struct bf_shm *s, uint32_t slot)
{
    return atomic_load_explicit(&s->pending_enq[slot], memory_order_acquire);
}
static inline uint8_t bf_pending_done_tag(const struct bf_shm *s, uint32_t slot)
{
    return atomic_load_explicit(&s->pending_done[slot], memory_order_acquire);
}

/* --------------------------------------------------------------- rings */

/* Pushes one fixed-size message (msg must be slot_size bytes). Never blocks.
 * 0, or -ENOSPC when full (counted in drops). [the ring's producer] */
int bf_ring_push(struct bf_shm *s, int ring, const void *msg);
/* Pops one message into out (slot_size bytes). 0 or -EAGAIN when empty.
 * [the ring's consumer] */
int bf_ring_pop(struct bf_shm *s, int ring, void *out);
/* Bytes ring: pushes one record made of two parts (header + payload; either
 * may be empty). -ENOSPC when full, -E2BIG when larger than half the ring
 * less the 8-byte record header (such a record always fits once the ring has
 * drained). [producer] */
int bf_ring_push_bytes(struct bf_shm *s, int ring, const void *a, size_t alen, const void *b,
                       size_t blen);
/* Bytes ring: pops one record into buf (cap bytes). 0 with *len set,
 * -EAGAIN when empty, -EMSGSIZE when cap is too small (*len = needed; the
 * record stays). [consumer] */
int bf_ring_pop_bytes(struct bf_shm *s, int ring, void *buf, size_t cap, size_t *len);
/*
 * Deferred consumption (fixed rings): read the message at absolute position
 * pos without consuming it, and release everything before new_cons later.
 * A consumer that keeps work in flight reads ahead with a private index and
 * releases only what it finished, so a crash redelivers unfinished entries
 * to its successor. bf_ring_read_at: 0, -EAGAIN (pos not yet produced),
 * -ERANGE (pos already released). [consumer]
 */
int bf_ring_read_at(struct bf_shm *s, int ring, uint64_t pos, void *out);
uint64_t bf_ring_cons(const struct bf_shm *s, int ring);
void bf_ring_release(struct bf_shm *s, int ring, uint64_t new_cons);
/* Messages (or bytes) waiting. Any reader. */
uint64_t bf_ring_depth(const struct bf_shm *s, int ring);
/* Wakes the process of `role` through its eventfd (no-op without one). */
void bf_wake(const struct bf_shm *s, int role);
/* Drains this process's wake eventfd (non-blocking). */
void bf_wake_clear(const struct bf_shm *s, int role);

/* --------------------------------------------------------------- needs */

/* Consistent copy of a cluster row. 0, -EAGAIN, -ERANGE. Any reader. */
int bf_cluster_read(const struct bf_shm *s, uint32_t idx, struct bf_cluster_rec *out,
                    uint32_t *seq);
/* Index of the cluster whose name ref is name_ref, or -1. Any reader. */
int bf_cluster_find(const struct bf_shm *s, uint32_t name_ref);
/* Publishes a cluster row (seqlock write). [session] */
void bf_cluster_write(struct bf_shm *s, uint32_t idx, const struct bf_cluster_rec *rec);
/*
 * Copies the cluster's published rows into out (up to max rows): reads the
 * row under its seqlock, copies rows with atomic word loads, re-checks the
 * seq; a nonzero rec->rows_arrival_ns replaces every copied row's
 * arrival_ns (a republished repeat, shm_layout.h). Returns the row count
 * (which may exceed max: call again with a bigger buffer), -EAGAIN after
 * bounded retries, -ERANGE.
 */
int bf_needs_copy(const struct bf_shm *s, uint32_t idx, struct bf_cluster_rec *rec,
                  struct bf_need_row *out, uint32_t max);
/* Copies rows [off, off+n) of the arena with relaxed atomic word loads.
 * The caller keeps off + n within bf_needs_rows_backed(). */
void bf_needs_copy_rows(const struct bf_shm *s, uint32_t off, uint32_t n, struct bf_need_row *out);
/*
 * The need-row arena (BF_NEEDS_T_ROWS) is the needs segment's last table
 * and grows with use (bf_shm_grow; i18-needseg, stop 33): every process maps
 * its whole reserve (BF_NEED_ROWS_PER_NEED x max_needs rows, address space only), the file backs
 * its first bf_needs_rows_backed() rows. The session allocates extents
 * lowest-first, so the file follows the highest extent in use (about the
 * live rows + one cluster's replacement), and makes an extent backed
 * (bf_needs_rows_reserve) BEFORE it writes rows there; bf_needs_copy never
 * reads a published extent past the backed rows (a corrupted cluster row
 * cannot lead a reader past the file's end: -EAGAIN).
 *
 * bf_needs_rows_backed: rows of the arena the file backs, at most the
 * reserve. [any process]
 * bf_needs_rows_reserve: makes rows [0, end) backed, growing the file by at
 * least 1 MiB or an eighth of what it backs. 0; -ENOSPC (past the reserve,
 * or tmpfs refused: the caller rejects what needed the rows, loudly, and
 * keeps what was published), -EROFS (read-only attachment). [session]
 */
uint32_t bf_needs_rows_backed(const struct bf_shm *s);
int bf_needs_rows_reserve(struct bf_shm *s, uint64_t end);

/* --------------------------------------------------------------- stamps */

/*
 * Provisioning-latency stamps (seed 000 §8): first-seen time of each
 * (cluster, fingerprint) in a rollup, keyed by the two string refs in an
 * open-addressing table (linear probing from bf_stamp_hash; an empty slot
 * has epoch 0). Stamps are never deleted, only re-stamped or marked absent
 * (first_seen 0, bf_stamp_prune), so probing needs no tombstones; the table
 * holds stamp_capacity keys. Go's demandObservedAt map (provisioning_latency.go
 * observeRolledUpDemand / observeProvisioningLatency) with the same rules:
 * first-seen kept across rollups, pruned when a rollup stops demanding it,
 * observed once.
 */
static inline uint32_t bf_stamp_hash(uint32_t cluster_ref, uint32_t fp_ref)
{
    uint64_t x = ((uint64_t)cluster_ref << 32 | fp_ref) * 0x9E3779B97F4A7C15ULL;
    return (uint32_t)(x >> 32);
}
/* Index of the stamp for the key, or -1. Any reader. */
int bf_stamp_find(const struct bf_shm *s, uint32_t cluster_ref, uint32_t fp_ref);
/*
 * At rollup ingest: creates the stamp (epoch 1, first_seen = now_ns) if the
 * key is new; if the executor already observed the current epoch
 * (observed_epoch == epoch) or the stamp was pruned, re-stamps it
 * (epoch + 1, now_ns); otherwise leaves it (first-seen preserved). 0, or
 * -ENOSPC when the table is full. [session]
 */
int bf_stamp_touch(struct bf_shm *s, uint32_t cluster_ref, uint32_t fp_ref, int64_t now_ns);
/*
 * At rollup ingest, for a fingerprint the cluster's previous accepted
 * rollup demanded and the newly accepted one does not: marks the stamp
 * absent (epoch + 1, first_seen 0), so no completion observes it and a
 * later rollup demanding the fingerprint again stamps it afresh. Returns 1
 * when a live stamp was pruned, 0 otherwise (none, or already absent).
 * [session]
 */
int bf_stamp_prune(struct bf_shm *s, uint32_t cluster_ref, uint32_t fp_ref);
/*
 * When a machine for the key reaches Configured: if the stamp is live and
 * its epoch was not observed yet, marks it observed (compare-and-swap) and
 * returns 1 with *latency_ns = now_ns - first_seen (observe once, even when
 * executor and reconciler both see the completion) and moves
 * needs->stamps_observed; else 0 (no stamp, a pruned one, or already
 * observed). [executor, reconciler]
 */
int bf_stamp_observe(struct bf_shm *s, uint32_t cluster_ref, uint32_t fp_ref, int64_t now_ns,
                     int64_t *latency_ns);

/* -------------------------------------------------------- cycle results
 * The state segment holds two struct bf_cycle_result buffers and, in the
 * verdicts table, two buffers of up to 2 x max_needs verdict cells (cell i
 * of buffer b at s->verdicts[bf_verdict_index(b, i)]; rows and their
 * extras, struct bf_verdict_slim/extra). One protocol, implemented here only
 * (src/shm/result.c explains why it is safe):
 *   writer [cycle]: b = bf_result_publish_begin(s, &seq) (publish_seq made
 *     odd); fill result[b] and buffer b's verdict rows; then
 *     bf_result_publish_end(s, b, seq) (flips `published`, publish_seq even);
 *   reader [session, bigfleet-inspect; safe on a read-only attachment]:
 *     bf_result_read_begin(s, &r); copy what is needed from r.buffer with
 *     relaxed loads (bf_shm_load_words); the copy is consistent iff
 *     bf_result_read_valid(s, &r) (publish_seq moved by less than 2 since
 *     begin); else retry, a bounded number of times (BF_RESULT_READ_TRIES).
 * A reader never blocks the writer ("build then swap"). */

/*
 * The verdict table grows with use (bf_shm_grow): the two buffers
 * interleave, cell i of buffer b at s->verdicts[bf_verdict_index(b, i)], so
 * the file backs what the larger buffer holds, twice, not the whole
 * reserve. A row is one 184-byte cell (struct bf_verdict_slim), plus one
 * extra cell (struct bf_verdict_extra) when it has matching supply, a
 * residual deficit, a preemption summary or Same candidates. The cycle
 * writes through bf_verdict_write_* (which grows the file before any cell
 * it writes, and so before the counts it publishes); readers copy rows
 * with bf_verdict_read after bf_verdict_bound (a torn or corrupted count
 * never leads them past the file's end, a bad index or ref reads as none).
 */
#define BF_VERDICT_CELLS_PER_BUFFER(max_needs) (2 * (uint64_t)(max_needs))
static inline size_t bf_verdict_index(uint32_t b, uint32_t i)
{
    return 2 * (size_t)i + (b & 1u);
}
/* Cells of buffer b the file backs, at most 2 x max_needs. [any process] */
uint32_t bf_verdict_cells_backed(const struct bf_shm *s, uint32_t b);
/* Makes the first n cells of buffer b backed; returns how many are (n, or
 * fewer when the file could not grow). [cycle] */
uint32_t bf_verdict_cells_reserve(struct bf_shm *s, uint32_t b, uint32_t n);

/* Writing one publish's rows into buffer b. [cycle] */
struct bf_verdict_writer {
    struct bf_shm *s;
    uint32_t b, n_rows, nv, ne, backed;
    uint32_t lost; /* rows whose extra cell or a domain name could not be stored */
};
/* Starts buffer b with room for n_rows rows (grows the file); returns how
 * many rows it takes (fewer when the file cannot grow). Exactly that many
 * bf_verdict_write calls follow, then bf_verdict_write_end. */
uint32_t bf_verdict_write_begin(struct bf_verdict_writer *w, struct bf_shm *s, uint32_t b,
                                uint32_t n_rows);
/* Stores the next row (domain names interned, at most BF_DOMAIN_MAX - 1
 * bytes; the extra cell only when needed). */
void bf_verdict_write(struct bf_verdict_writer *w, const struct bf_verdict_row *row);
/* The same from the cells: *o (its `extra` set here) and *x when the row
 * has details (NULL: none; then every extra field must be zero). */
void bf_verdict_write_cells(struct bf_verdict_writer *w, struct bf_verdict_slim *o,
                            const struct bf_verdict_extra *x);
/* The string-table ref of a domain name as a row keeps it (its first
 * BF_DOMAIN_MAX - 1 bytes), memoised; 0 for "" or when it cannot be
 * interned (counted in w->lost). Names are peer-controlled (label values):
 * a name the table lacks is added only below its soft reserve
 * (bf_str_intern_soft), never into the room kept for ids and profiles. */
uint32_t bf_verdict_domain_ref(struct bf_verdict_writer *w, const char *name);
/* Sets out->n_verdicts and out->n_verdict_extras. */
void bf_verdict_write_end(struct bf_verdict_writer *w, struct bf_cycle_result *out);

/* Clamps a publish's counts of buffer b (read from the segment) to the
 * cells the file backs. [any reader] */
void bf_verdict_bound(const struct bf_shm *s, uint32_t b, uint32_t *nv, uint32_t *ne);
/* Row i < nv of buffer b (counts bounded by bf_verdict_bound) into *out as
 * the cycle wrote it, with relaxed loads: consistent iff the publish
 * protocol's re-check passes. An extra index outside [nv, nv + ne) reads
 * as no extras, a string ref outside the table as "". [any reader] */
void bf_verdict_read(const struct bf_shm *s, uint32_t b, uint32_t i, uint32_t nv, uint32_t ne,
                     struct bf_verdict_row *out);

/* Copy attempts of bf_result_read before it gives up. */
#define BF_RESULT_READ_TRIES 16

struct bf_result_read {
    uint64_t seq;    /* publish_seq at begin */
    uint32_t buffer; /* the published buffer (0 or 1) to copy from */
};

/* Starts a publish; returns the buffer to fill. *seq is for _end. [cycle] */
uint32_t bf_result_publish_begin(struct bf_shm *s, uint64_t *seq);
/* Makes `buffer` the published one. [cycle] */
void bf_result_publish_end(struct bf_shm *s, uint32_t buffer, uint64_t seq);
/* Starts a copy of the published buffer. [any reader] */
void bf_result_read_begin(const struct bf_shm *s, struct bf_result_read *r);
/* After the copy: true when it is consistent. [any reader] */
bool bf_result_read_valid(const struct bf_shm *s, const struct bf_result_read *r);
/*
 * Copies the published cycle result (header fields, shortfall ledger,
 * inventory counts; ~150 KiB) into *out under the protocol above.
 * out->cycle == 0 means no cycle has published yet (everything zero).
 * *retries (may be NULL) gets the number of copies that had to be repeated.
 * Returns 0 or -EAGAIN (the cycle published during every one of
 * BF_RESULT_READ_TRIES copies; *out zeroed). [any reader]
 */
int bf_result_read(const struct bf_shm *s, struct bf_cycle_result *out, uint32_t *retries);

/* -------------------------------------------------- ownership tables
 * The bounded tables of st->own (struct bf_ownership_state from
 * n_pub_reservations to its end: BF_OWN_TABLES_BYTES bytes laid out as
 * those fields), published by the cycle under st->own.seq and copied by
 * bigfleet-inspect (src/shm/own.c). */
#define BF_OWN_TABLES_OFF   offsetof(struct bf_ownership_state, n_pub_reservations)
#define BF_OWN_TABLES_BYTES (sizeof(struct bf_ownership_state) - BF_OWN_TABLES_OFF)
/* Copy attempts of bf_own_tables_read before it gives up. */
#define BF_OWN_READ_TRIES 64
/* Publishes BF_OWN_TABLES_BYTES bytes from `tables` (8-aligned). [cycle] */
void bf_own_tables_publish(struct bf_shm *s, const void *tables);
/*
 * Copies the published tables into `out` (BF_OWN_TABLES_BYTES bytes,
 * 8-aligned). 0 when the copy is consistent; -EAGAIN when a publish
 * overlapped every one of BF_OWN_READ_TRIES attempts: `out` then holds the
 * last attempt's copy, which may be torn (bound its counts before use).
 * Never writes; safe on a read-only attachment. [any reader]
 */
int bf_own_tables_read(const struct bf_shm *s, void *out);

/* ---------------------------------------------------------------- labels
 * The names metrics, bigfleet-inspect and the audit log print for the
 * enums of shm_layout.h (reference/shard.md §3.7 for the outcomes), defined
 * next to nothing else (src/shm/labels.c). Out-of-range values give
 * "other" (outcomes) or "unknown". Static strings; any process. */
const char *bf_outcome_label(int outcome); /* enum bf_outcome */
const char *bf_ring_label(int ring);       /* enum bf_ring_id */
const char *bf_phase_label(int phase);     /* enum bf_phase */

/* --------------------------------------------------------------- helpers */

/* Relaxed atomic word copy from shared memory (n multiple of 8, 8-aligned). */
void bf_shm_load_words(void *dst, const void *src, size_t n);
/* Relaxed atomic word store into shared memory (n multiple of 8, 8-aligned). */
void bf_shm_store_words(void *dst, const void *src, size_t n);
/* The pause between two attempts of a bounded shared-memory retry loop
 * (attempt counts from 0): a CPU pause for the first 32, then sched_yield. */
void bf_shm_backoff(unsigned attempt);

/* Histogram observation with exp(start, factor, n) buckets: value in
 * nanoseconds-of-base-unit (e.g. seconds x 1e9). [owning process] */
void bf_hist_observe(struct bf_hist *h, double start, double factor, int n, int64_t value_ns);

static inline int bf_str_intern_cstr(struct bf_shm *s, const char *str, uint32_t *ref)
{
    size_t l = 0;
    while (str[l])
        l++;
    return bf_str_intern(s, str, (uint32_t)l, ref);
}

/* Converts a record's idle_since to wall seconds (0 when unknown). */
static inline int64_t bf_rec_idle_since_unix(const struct bf_shm *s, const struct bf_machine_rec *r)
{
    if (!r->idle_since)
        return 0;
    return s->inv_hdr->created_unix_ns / 1000000000LL + (int64_t)r->idle_since - 1;
}
/*
 * The idle-since stamp for a machine entering Idle at unix time `now_ns`:
 * whole seconds rounded UP, so the stored stamp is never earlier than the
 * real transition and a release (now - idle_since >= hold) never fires
 * early; it may fire up to 1 s late. Go keeps the exact time.Time; a
 * truncated stamp would release up to 1 s early (docs/fidelity.md item 10).
 */
static inline int64_t bf_idle_since_stamp_s(int64_t now_ns)
{
    int64_t s = now_ns / 1000000000LL;
    return now_ns % 1000000000LL > 0 ? s + 1 : s;
}
static inline uint32_t bf_rec_idle_since_encode(const struct bf_shm *s, int64_t unix_s)
{
    int64_t base = s->inv_hdr->created_unix_ns / 1000000000LL;
    int64_t d = unix_s - base;
    return d < 0 ? 1u : (uint32_t)(d + 1);
}

#endif /* BIGFLEET_SHM_H */
