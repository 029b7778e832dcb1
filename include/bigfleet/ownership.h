/*
 * bigfleet/ownership.h — the ADR-0055 ownership partition (seeds/002,
 * docs/adr0055.md): the LMDB store under --data-dir that keeps the
 * partition's rule inputs, the owned set and the coordinator-instruction
 * dedup set, and the partition rule itself.
 *
 * The rule (docs/adr0055.md §1). A machine listed by the provider is owned
 * by this shard iff
 *     it was not transferred out, and
 *     (it was transferred in, or the shard owns everything, or one of its
 *      attributes equals an assigned domain: attr(topology_key) == value),
 * where "owns everything" (own-all mode) follows --ownership: "all" always;
 * "partitioned" never; "auto" (the default) until the shard is first
 * assigned a domain (a latch in own.meta: it stays partitioned after). A
 * shard with no coordinator and no assignment therefore owns everything,
 * as before; shards sharing one provider run "partitioned".
 * attr() is lookupAttribute (engine.md §1.5): the instance-type and zone
 * keys resolve to the machine's fields, any other key to its label.
 *
 * LMDB (one environment per --data-dir, shared with the supervisor's epoch
 * and the session's coordinator term, which live in the unnamed database).
 * Named databases, each with ONE writer process:
 *   own.domains   "key\0value" -> int64 assigned_at_ns             [W: cycle]
 *   own.in        machine id -> bf_own_xfer_rec + from-shard bytes [W: cycle]
 *   own.out       machine id -> bf_own_xfer_rec + to-shard bytes   [W: cycle]
 *   own.reserved  machine id -> bf_own_resv_rec + instruction id   [W: cycle]
 *   own.done      instruction id -> uint64 seq + packed InstructAck [W: cycle]
 *   own.doneseq   uint64 seq (big-endian) -> instruction id        [W: cycle]
 *   own.meta      "generation" -> uint64 (+1 per change of domains/in/out),
 *                 "done_seq" -> uint64 (next dedup sequence),
 *                 "partitioned" -> "1" once a domain was assigned   [W: cycle]
 *   owned         machine id -> bf_own_owned_rec (the owned set: what the
 *                 reconciler adopted and still holds)             [W: reconciler]
 * Integers are stored in host byte order (the appliance runs on one host),
 * except the doneseq keys (big-endian so the oldest sorts first).
 *
 * Process rules: every process opens its own environment after fork()
 * (bf_lmdb_open; LMDB forbids sharing an MDB_env across fork). A store is
 * used by one thread. LMDB serialises writers across processes itself; the
 * one-writer-per-database rule above keeps every database's content owned.
 * Units: times in nanoseconds since the Unix epoch.
 */
#ifndef BIGFLEET_OWNERSHIP_H
#define BIGFLEET_OWNERSHIP_H

#include <lmdb.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bigfleet/config.h"

/* Every opener of the --data-dir environment uses the same map size (a
 * smaller one would fail with MDB_MAP_RESIZED once the file grew past it).
 * The map is reserved address space; the file grows with the data. */
#define BF_LMDB_MAPSIZE (4ull << 30)
#define BF_LMDB_MAXDBS  16

#define BF_OWN_MAX_IDS      1024  /* machines one instruction may name or select */
#define BF_OWN_ID_MAX       1024  /* bytes of a machine id, shard id or domain part */
#define BF_OWN_DONE_MAX     65536 /* dedup set: oldest evicted past this */
#define BF_OWN_DOMAINS_MAX  4096
#define BF_OWN_RESERVED_MAX 4096 /* reservations held at once */
/* own.in holds at most --max-machines entries, own.out at most this many
 * times --max-machines (what a coordinator can make a shard remember) */
#define BF_OWN_XFER_TABLE_FACTOR 4

/* enum bf_own_policy and bf_own_policy_parse (the --ownership values)
 * are in bigfleet/config.h: the flag parser validates them, and the base
 * layer does not depend on this one. */

/*
 * Opens the LMDB environment of data_dir (which must exist): map size
 * BF_LMDB_MAPSIZE, BF_LMDB_MAXDBS named databases, file mode 0600, stale
 * reader slots of dead processes cleared. 0 or -errno / -EIO with a message
 * in err.
 */
int bf_lmdb_open(const char *data_dir, MDB_env **env, char *err, size_t errlen);

enum bf_own_db {
    BF_OWN_DB_DOMAINS = 0,
    BF_OWN_DB_IN = 1,
    BF_OWN_DB_OUT = 2,
    BF_OWN_DB_RESERVED = 3,
    BF_OWN_DB_DONE = 4,
    BF_OWN_DB_DONESEQ = 5,
    BF_OWN_DB_META = 6,
    BF_OWN_DB_OWNED = 7,
    BF_OWN_DB_COUNT = 8
};

struct bf_own_store {
    MDB_env *env;
    MDB_dbi dbi[BF_OWN_DB_COUNT];
};

/* Opens (creating the databases on first use) the store of data_dir.
 * 0, or -errno / -EIO with a message in err. */
int bf_own_store_open(const char *data_dir, struct bf_own_store **out, char *err, size_t errlen);
void bf_own_store_close(struct bf_own_store *s);
/* The generation in own.meta (0 when never written or unreadable). */
uint64_t bf_own_store_generation(struct bf_own_store *s);
/* Entries of one database (mdb_stat), 0 on error. */
uint64_t bf_own_store_count(struct bf_own_store *s, int db);

/* How a machine came to be owned (the owned set's value, audit records). */
enum bf_own_source {
    BF_OWN_SRC_NONE = 0,
    BF_OWN_SRC_ALL = 1,         /* own-all mode */
    BF_OWN_SRC_DOMAIN = 2,      /* an assigned domain */
    BF_OWN_SRC_TRANSFER = 3,    /* TransferOwnership in */
    BF_OWN_SRC_SPECULATIVE = 4, /* ReassignSpeculative in */
    BF_OWN_SRC_COUNT = 5
};
/* "none", "all", "domain", "transfer", "speculative". */
const char *bf_own_source_name(int source);

/* Values (host order), each followed by the bytes named in the comment. */
struct bf_own_xfer_rec { /* own.in / own.out; then the peer shard id */
    uint8_t kind;        /* BF_OWN_SRC_TRANSFER or BF_OWN_SRC_SPECULATIVE */
    uint8_t pad[7];
    int64_t at_ns;
};
struct bf_own_resv_rec { /* own.reserved; then the instruction id */
    int64_t since_ns;
    int64_t until_ns;
    int32_t preemptor_priority;
    uint32_t grace_s;
};
struct bf_own_owned_rec { /* owned */
    uint8_t source;       /* enum bf_own_source */
    uint8_t pad[7];
    int64_t at_ns;
};

/* ------------------------------------------------------------ id maps */

/*
 * A set of byte-string ids with an int64 value each (open addressing over
 * a 64-bit hash, exact comparison of the bytes). Not thread-safe.
 */
struct bf_idmap_entry {
    uint64_t hash; /* 0 = empty */
    char *id;      /* owned, NUL-terminated copy */
    uint32_t len;
    int64_t val;
};
struct bf_idmap {
    struct bf_idmap_entry *e;
    uint32_t cap, n;
};
/* 0 or -ENOMEM (the map is unchanged). Replaces the value of an existing id. */
int bf_idmap_put(struct bf_idmap *m, const char *id, size_t len, int64_t val);
/* True (and *val, may be NULL) when present. */
bool bf_idmap_get(const struct bf_idmap *m, const char *id, size_t len, int64_t *val);
/* True when it was present. */
bool bf_idmap_del(struct bf_idmap *m, const char *id, size_t len);
void bf_idmap_clear(struct bf_idmap *m);
void bf_idmap_free(struct bf_idmap *m);

/* ------------------------------------------------------------ the rule */

struct bf_own_domain {
    char *key;
    char *value;
};

/* The rule inputs as one process loaded them (private copy). */
struct bf_own_view {
    uint64_t generation;
    int policy;    /* enum bf_own_policy */
    bool latched;  /* own.meta "partitioned": a domain was assigned once */
    bool all_mode; /* ALL, or AUTO while not latched and no domain */
    uint32_t n_domains;
    struct bf_own_domain *domains;
    struct bf_idmap in;  /* value: enum bf_own_source */
    struct bf_idmap out; /* value: enum bf_own_source */
};

/* Loads domains, transfers in/out, the latch and the generation in one
 * read transaction (replacing v's content). 0, -EIO (LMDB), -ENOMEM. */
int bf_own_view_load(struct bf_own_store *s, int policy, struct bf_own_view *v);
/* own-all mode for a policy, latch and domain count. */
bool bf_own_all_mode(int policy, bool latched, uint32_t n_domains);
void bf_own_view_free(struct bf_own_view *v);

/* A machine's value for a topology key (lookupAttribute), or NULL. */
typedef const char *(*bf_own_attr_fn)(void *ctx, const char *key);

/* Index of the first assigned domain the machine is in, or -1. */
int bf_own_domain_of(const struct bf_own_view *v, bf_own_attr_fn attr, void *ctx);
/*
 * The partition rule (file comment). Returns the enum bf_own_source that
 * owns it (ALL, DOMAIN, TRANSFER, SPECULATIVE), or BF_OWN_SRC_NONE.
 * `dom` is the answer of bf_own_domain_of for the machine when the caller
 * already has it, else pass -2 and attr/ctx (called only when needed).
 */
int bf_own_decide(const struct bf_own_view *v, const char *id, size_t len, int dom,
                  bf_own_attr_fn attr, void *ctx);

#endif /* BIGFLEET_OWNERSHIP_H */
