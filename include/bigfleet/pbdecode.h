/*
 * bigfleet/pbdecode.h — decoding untrusted protobuf with protobuf-c without
 * amplification (docs/security.md "Decoding untrusted protobuf").
 *
 * protobuf-c keeps every unknown field it meets (a ProtobufCMessageUnknownField
 * plus a copy of its bytes), so 48 MiB of two-byte unknown varints cost it
 * ~1.6 GB; and a known repeated field of empty strings or empty messages
 * costs it 10-30x the bytes it came in. bf_pb_unpack() closes both:
 *
 *   1. Unknown fields are counted and skipped, never kept: the bytes are
 *      walked with the message's descriptor (recursing into every
 *      message-typed field, map entries included); when any field is
 *      unknown, a stripped copy (never longer than the input) is what
 *      protobuf-c sees. A known field with a wire type its type cannot have,
 *      a group, a varint over 10 bytes (or a 10th byte above 1), a length
 *      past its end, or nesting deeper than 32 is malformed.
 *   2. protobuf-c decodes with a bounded allocator: every allocation
 *      (including its transient scan tables) is charged at the size the
 *      allocator really reserved (malloc_usable_size), and the decode fails
 *      once the charge would pass 3 bytes per input byte (2 when a stripped
 *      copy exists) plus 256 KiB.
 *
 * Worst case held per byte received, at the decode's peak: the received
 * bytes (1) + the stripped copy (0 or 1, freed before returning) + decoded
 * structures (3 or 2) = at most 4 bytes per byte, plus 256 KiB per message;
 * after it returns, at most 3 per byte (the caller's input and the result).
 *
 * The result is an ordinary protobuf-c message from malloc: free it with
 * the generated <type>__free_unpacked(m, NULL) or protobuf_c_message_free_unpacked(m, NULL).
 * Thread-safe (no state). The fuzz entry point is bf_pb_unpack() itself.
 */
#ifndef BIGFLEET_PBDECODE_H
#define BIGFLEET_PBDECODE_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#define BF_PB_DECODE_SLACK     (256u << 10) /* bytes allowed on top of the per-byte factor */
#define BF_PB_DECODE_MAX_DEPTH 32

struct bf_pb_decode_info {
    uint64_t unknown_fields; /* counted and skipped, at every depth */
    size_t charged;          /* peak bytes charged to the decode allocator */
};

/*
 * Decodes len bytes as a message of type desc. Returns 0 and *out (never
 * NULL on success); -EBADMSG malformed input (also anything protobuf-c
 * itself refuses);
 * -E2BIG the decoded structures would pass the allocation bound above;
 * -ENOMEM. info may be NULL; it is filled on every return.
 */
int bf_pb_unpack(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len,
                 ProtobufCMessage **out, struct bf_pb_decode_info *info);

#endif /* BIGFLEET_PBDECODE_H */
