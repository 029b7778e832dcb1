/*
 * bigfleet/opmsg.h — OperatorMessage routing and a rollup pre-count on the
 * protobuf wire reader (bigfleet/pbwire.h, no allocation), so a large
 * rollup is not unpacked on the event loop; the hello's cluster id
 * (reference/shard.md §4, seed 000 §5). Implemented in src/session/wire.c.
 *
 * Part of the session module (src/session/, docs/internals.md "Layers");
 * single-threaded state owned by its caller. Errors are negative errno
 * values, listed per function.
 */
#ifndef BIGFLEET_OPMSG_H
#define BIGFLEET_OPMSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bigfleet/pbwire.h"

/*
 * Classifies an OperatorMessage (shard.proto) without unpacking it: the
 * oneof member in effect is the last one on the wire (protobuf semantics);
 * repeated occurrences of that member after the last switch are merged by
 * the decoder, so *parts counts them. *payload gets 0 (none), 1 hello,
 * 2 rollup, 3 bootstrap_response, 4 reclaim_ack; *sub and *sublen the LAST
 * occurrence's payload. Returns 0, -EBADMSG, or -E2BIG for more than
 * BF_OPMSG_MAX_FIELDS top-level fields: padding with millions of unknown
 * fields would otherwise make this scan hold the event loop (an operator
 * sends one field; a newer schema a few more).
 */
#define BF_OPMSG_MAX_FIELDS 1024
int bf_opmsg_classify(const uint8_t *msg, size_t len, int *payload, const uint8_t **sub,
                      size_t *sublen, uint32_t *parts);
/*
 * Copies the payloads of the occurrences of field `num` that are in effect
 * (after the last switch to another member of `oneof_lo..oneof_hi`) into a
 * malloc'd buffer (protobuf merge = concatenation). Returns 0 with
 * *out and *outlen, -EBADMSG, -ENOMEM.
 */
int bf_opmsg_member_bytes(const uint8_t *msg, size_t len, uint32_t num, uint32_t oneof_lo,
                          uint32_t oneof_hi, uint8_t **out, size_t *outlen);

/*
 * The top level of a serialized ClusterCapacityNeeds in one walk: the
 * number of field 3 (needs; saturates at UINT32_MAX), field 1 (cluster_id:
 * a borrowed pointer into buf and its length; "" when absent) and field 2
 * (timestamp: 0 when absent); the last cluster_id and timestamp win (they
 * may follow the needs). Returns 0, or -EBADMSG when the top level is not
 * well-formed or a known field has the wrong wire type (outputs then
 * unspecified). Any thread; no allocation.
 */
struct bf_rollup_top {
    uint32_t n_needs;
    const uint8_t *cluster_id;
    size_t cluster_id_len;
    int64_t timestamp;
};
int bf_rollup_scan_top(const uint8_t *buf, size_t len, struct bf_rollup_top *out);

/*
 * Pre-scan of a serialized ClusterCapacityNeeds: bf_rollup_scan_top's
 * count of field 3 (needs) and its checks. Returns 0 and *n_needs, or
 * -EBADMSG.
 */
int bf_rollup_count_needs(const uint8_t *buf, size_t len, uint32_t *n_needs);

/*
 * Hello.cluster_id straight from the wire (protobuf-c would cut a string at
 * an embedded NUL). Returns 0 with *id and *idlen pointing into sub (idlen may
 * be 0 when absent), or -EBADMSG.
 */
int bf_hello_cluster_id(const uint8_t *sub, size_t len, const uint8_t **id, size_t *idlen);

/* A cluster id the shard accepts: 1..BF_CLUSTER_ID_MAX bytes, printable
 * ASCII 0x21..0x7e (URL-safe characters survive the SAN comparison). */
#define BF_CLUSTER_ID_MAX 253
bool bf_cluster_id_valid(const uint8_t *id, size_t len);

#endif /* BIGFLEET_OPMSG_H */
