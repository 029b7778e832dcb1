/*
 * fuzz_inspect_needs.c — InspectNeedsRequest as the session's ShardRead
 * service decodes it (src/session/inspect_needs.c), and the
 * InspectNeedsResponse stream messages bigfleet-inspect --addr decodes from
 * a shard (tools/inspect/remote.c). Input: one selector byte, then the
 * message.
 *
 * Properties: decode -> encode -> decode -> encode is a fixed point; an
 * accepted request has a non-NULL cluster_id (the handler strlen()s it).
 */
#include "bigfleet/v1alpha1/shardread.pb-c.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int which = data[0] % 2;
    data++;
    size--;
    if (which == 0) {
        Bigfleet__V1alpha1__InspectNeedsRequest *r =
            (Bigfleet__V1alpha1__InspectNeedsRequest *)fuzz_pb_roundtrip(
                &bigfleet__v1alpha1__inspect_needs_request__descriptor, data, size);
        fuzz_pb_bounded(&bigfleet__v1alpha1__inspect_needs_request__descriptor, data, size,
                        r ? &r->base : NULL); /* the session's decode */
        if (r) {
            FUZZ_CHECK(r->cluster_id != NULL);
            protobuf_c_message_free_unpacked(&r->base, NULL);
        }
    } else {
        ProtobufCMessage *m =
            fuzz_pb_roundtrip(&bigfleet__v1alpha1__inspect_needs_response__descriptor, data, size);
        if (m)
            protobuf_c_message_free_unpacked(m, NULL);
    }
    return 0;
}
