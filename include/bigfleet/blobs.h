/*
 * bigfleet/blobs.h — machine profiles and Need profiles as interned blobs in
 * the shared string table, their process-local decode caches, resource maps
 * <-> vectors over the shared dimension registry, and the shard_metadata
 * echo encoding.
 *
 * A machine record (bigfleet/shm_layout.h) stores one ref to a
 * MachineProfileBlob (proto/bigfleet/internal/blobs.proto): instance type,
 * zone, capacity type, resources, labels, allocatable. A Need row stores one
 * ref to a NeedProfileBlob: canonical requirements, spread, priority, both
 * penalty buckets, and the fingerprint (reference/engine.md §1.6). Equal
 * shapes encode to equal bytes, so they share one ref; a ref is stable for
 * the life of the segments and can be compared for equality directly.
 *
 * Caches: decoding a blob costs a protobuf-c unpack; processes keep a
 * struct bf_blob_cache (ref -> decoded struct, never evicted: the number of
 * distinct shapes is small). Returned pointers stay valid until the cache is
 * freed. Not thread-safe (one cache per process).
 */
#ifndef BIGFLEET_BLOBS_H
#define BIGFLEET_BLOBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bigfleet/model.h"
#include "bigfleet/shm.h"

struct bf_kv {
    const char *key;
    const char *value;
};

/* ---------------------------------------------------------- machine profiles */

/* Input for bf_mprofile_intern (borrowed; arrays need not be sorted). */
struct bf_mprofile_input {
    const char *instance_type; /* "" allowed */
    const char *zone;          /* "" allowed */
    int capacity_type;         /* enum bf_capacity_type */
    uint32_t n_resources;
    const struct bf_kv *resources; /* Kubernetes quantity strings */
    uint32_t n_labels;
    const struct bf_kv *labels;
    uint32_t n_allocatable;
    const struct bf_kv *allocatable;
};

/* A decoded machine profile (owned by the cache). */
struct bf_mprofile {
    uint32_t ref;
    const char *instance_type;
    const char *zone;
    int capacity_type;
    uint32_t n_labels;
    const struct bf_kv *labels; /* sorted by key */
    uint32_t n_resources;
    const struct bf_kv *resources;
    uint32_t n_allocatable;
    const struct bf_kv *allocatable;
    bf_vec resources_vec;
    bf_vec allocatable_vec;
    bf_vec effective; /* EffectiveAllocatable: allocatable if it has an entry, else resources */
};

/*
 * Canonicalises (sorts by key; a duplicate key keeps the last value, as
 * protobuf map semantics require), validates every quantity, registers the
 * resource names in the shared dimension registry, encodes and interns.
 * Errors: -EINVAL (unparseable quantity, empty key; message in err),
 * -ENOSPC (dimension registry or string table full), -ETIMEDOUT.
 */
int bf_mprofile_intern(struct bf_shm *s, const struct bf_mprofile_input *in, uint32_t *ref,
                       char *err, size_t errlen);

/*
 * lookupAttribute (engine.md §1.5): instance-type and zone keys resolve to
 * the profile fields when non-empty, otherwise to the label. Returns the
 * value or NULL when absent (an empty label value counts as present).
 */
const char *bf_mprofile_attr(const struct bf_mprofile *p, const char *key);

/* ---------------------------------------------------------- need profiles */

/* A decoded Need profile (owned by the cache). p borrows the cache's storage
 * and is canonical. */
struct bf_nprofile {
    uint32_t ref;
    struct bf_need_profile p;
    const char *fingerprint;
    uint32_t fingerprint_ref; /* the fingerprint string's own ref */
};

/* Forward declaration of the generated wire type (capacity.pb-c.h). */
struct Bigfleet__V1alpha1__CapacityNeed;

/*
 * Validates a wire CapacityNeed's profile part (operators 0..5, spread
 * when_unsatisfiable 0..2, penalty buckets 0..27, non-empty requirement
 * keys), canonicalises it, computes the fingerprint, encodes and interns the
 * NeedProfileBlob and the fingerprint string. reserve: refused with -ENOSPC
 * (nothing interned) when the blob and the fingerprint would leave fewer than
 * this many bytes of the string arena free (strings already interned cost
 * nothing; 0 = no reserve). Errors: -EINVAL (message in err names the
 * field), -ENOSPC, -ETIMEDOUT.
 */
int bf_nprofile_intern_need(struct bf_shm *s, const struct Bigfleet__V1alpha1__CapacityNeed *n,
                            uint64_t reserve, uint32_t *ref, uint32_t *fingerprint_ref, char *err,
                            size_t errlen);
/* Same from an in-memory profile (canonicalised in place). */
int bf_nprofile_intern(struct bf_shm *s, struct bf_need_profile *p, uint32_t *ref,
                       uint32_t *fingerprint_ref);

/* ---------------------------------------------------------- caches */

struct bf_blob_cache;
struct bf_blob_cache *bf_blob_cache_new(void);
void bf_blob_cache_free(struct bf_blob_cache *c);
/* Decoded profile for ref, or NULL (invalid ref or a blob that fails to
 * decode). ref 0 (no profile) returns a static empty profile. */
const struct bf_mprofile *bf_mprofile_get(struct bf_blob_cache *c, const struct bf_shm *s,
                                          uint32_t ref);
const struct bf_nprofile *bf_nprofile_get(struct bf_blob_cache *c, const struct bf_shm *s,
                                          uint32_t ref);

/* ---------------------------------------------------------- resource maps */

/*
 * Parses (key, quantity) pairs into a vector over the shared dimension
 * registry, registering new names. A duplicate key: the last wins.
 * Errors: -EINVAL (bad quantity or key; message names it), -ENOSPC (more
 * than BF_MAX_DIMS distinct resource names shard-wide), -ERANGE.
 * Negative quantities are accepted here; callers that must reject them check.
 */
int bf_resources_to_vec(struct bf_shm *s, uint32_t n, const struct bf_kv *kv, bf_vec *out,
                        char *err, size_t errlen);
/* Formats the non-zero dimensions of v as (name, quantity) into kv/buf
 * (buf holds the quantity strings; 32 bytes per dimension). Returns the
 * number of pairs written. */
uint32_t bf_vec_to_kv(const struct bf_shm *s, const bf_vec *v, struct bf_kv kv[BF_MAX_DIMS],
                      char buf[BF_MAX_DIMS][32]);

/* ---------------------------------------------------------- shard_metadata */

/* The assignment state a Configure stamps and a restarted shard restores
 * (reference/wire.md §10). */
struct bf_assignment {
    int32_t priority;
    uint8_t ipb; /* bucket; encoded as its upper bound in dollars */
    uint8_t rpb;
    const char *fingerprint;
    uint32_t fingerprint_len;
    const char *group; /* bytes, may contain NUL */
    uint32_t group_len;
};

/* A key with a bytes value (shard_metadata values are bytes on our side). */
struct bf_md_entry {
    const char *key;
    const uint8_t *value;
    size_t len;
};

/* Storage for an encoded map (5 entries, number text). */
struct bf_md_encoded {
    struct bf_md_entry e[5];
    char prio[16];
    char ipd[32];
    char rpd[32];
};
/* Encodes the five keys (Go FormatInt / FormatFloat('g', -1) spellings). */
void bf_shard_metadata_encode(const struct bf_assignment *a, struct bf_md_encoded *out);

/* Which fields a decode found. */
#define BF_MD_HAS_PRIORITY    0x1u
#define BF_MD_HAS_IPD         0x2u
#define BF_MD_HAS_RPD         0x4u
#define BF_MD_HAS_FINGERPRINT 0x8u
#define BF_MD_HAS_GROUP       0x10u
/*
 * Decodes a provider-echoed map: each known key on its own (missing keys
 * leave fields alone; unknown keys ignored; a malformed value is skipped and
 * counted). Dollar values map to buckets with bf_bucket_for_dollars; a
 * dollar value that is not exactly a bucket's upper bound (no shard writes
 * one: wire.md §10) is applied as the bucket covering it and also counted
 * (docs/fidelity.md item 4: Go would order victims by the raw dollars).
 * fingerprint/group point into the entries. Returns the number of malformed
 * or off-bucket values; *found gets BF_MD_HAS_* bits.
 */
int bf_shard_metadata_decode(const struct bf_md_entry *e, size_t n, struct bf_assignment *a,
                             uint32_t *found);

#endif /* BIGFLEET_BLOBS_H */
