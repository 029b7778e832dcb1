/*
 * fuzz_opmsg.c — every OperatorMessage kind as the session receives it
 * (src/session/wire.c + protobuf-c): the no-unpack router
 * bf_opmsg_classify, Hello.cluster_id read byte-exact, the merged rollup
 * bytes (bf_opmsg_member_bytes) and their Need pre-count, and the
 * protobuf-c unpack the session uses for bootstrap_response and
 * reclaim_ack. Input: the OperatorMessage bytes.
 *
 * Properties:
 *   - when protobuf-c unpacks the message, the router accepts it and names
 *     the same oneof member (the last one on the wire), unless the input
 *     holds one of the documented encodings the wire module refuses on
 *     purpose (fuzz_pb_stricter);
 *   - a single Hello: the byte-exact cluster_id equals protobuf-c's (when it
 *     holds no NUL, which protobuf-c cannot carry);
 *   - a rollup: bf_rollup_count_needs over the merged member bytes (every
 *     occurrence of the member after the last switch, concatenated: the
 *     protobuf merge) equals protobuf-c's n_needs for those bytes; with one
 *     occurrence they are that occurrence's bytes and unpack as the
 *     ClusterCapacityNeeds protobuf-c built inside the OperatorMessage; with
 *     several, protobuf-c's OperatorMessage holds the last one only (its
 *     oneof handling does not merge: docs/fuzzing.md);
 *   - decode -> encode -> decode -> encode is a fixed point (protobuf-c);
 *   - more than BF_OPMSG_MAX_FIELDS top-level fields: -E2BIG, nothing else;
 *   - bf_pb_unpack (the session's decode of BootstrapBlobResponse and
 *     ReclaimAck, and of the whole message): see fuzz_pb_bounded.
 */
#include <errno.h>

#include "bigfleet/opmsg.h"
#include "bigfleet/v1alpha1/shard.pb-c.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int payload;
    const uint8_t *sub;
    size_t sublen;
    uint32_t parts;
    int crc = bf_opmsg_classify(data, size, &payload, &sub, &sublen, &parts);
    FUZZ_CHECK(crc == 0 || crc == -EBADMSG || crc == -E2BIG);
    if (crc == -E2BIG) { /* refused only for more than BF_OPMSG_MAX_FIELDS fields */
        struct bf_pb_reader r;
        struct bf_pb_field f;
        bf_pb_reader_init(&r, data, size);
        uint32_t n = 0;
        while (n <= BF_OPMSG_MAX_FIELDS && bf_pb_next(&r, &f) == 1)
            n++;
        FUZZ_CHECK(n > BF_OPMSG_MAX_FIELDS);
    }
    Bigfleet__V1alpha1__OperatorMessage *om =
        (Bigfleet__V1alpha1__OperatorMessage *)fuzz_pb_roundtrip(
            &bigfleet__v1alpha1__operator_message__descriptor, data, size);
    /* the bounded decode the session uses, on the whole message and on the
     * sub-message of a BootstrapBlobResponse / ReclaimAck */
    fuzz_pb_bounded(&bigfleet__v1alpha1__operator_message__descriptor, data, size,
                    om ? &om->base : NULL);
    if (crc == 0 && parts == 1 && (payload == 3 || payload == 4))
        fuzz_pb_bounded(payload == 3 ? &bigfleet__v1alpha1__bootstrap_blob_response__descriptor
                                     : &bigfleet__v1alpha1__reclaim_ack__descriptor,
                        sub, sublen, NULL);
    if (crc == 0) {
        FUZZ_CHECK(payload >= 0 && payload <= 4);
        if (sub)
            FUZZ_CHECK(sub >= data && sub + sublen <= data + size);
        if (payload == 1) {
            const uint8_t *id;
            size_t idlen;
            if (bf_hello_cluster_id(sub, sublen, &id, &idlen) == 0 && om && parts == 1 &&
                om->hello->cluster_id && !memchr(id ? id : (const uint8_t *)"", 0, idlen))
                FUZZ_CHECK(idlen == strlen(om->hello->cluster_id) &&
                           (idlen == 0 || memcmp(id, om->hello->cluster_id, idlen) == 0));
            if (id)
                (void)bf_cluster_id_valid(id, idlen);
        }
        uint8_t *rb = NULL;
        size_t rl = 0;
        int mrc = bf_opmsg_member_bytes(data, size, 2, 1, 4, &rb, &rl);
        FUZZ_CHECK(mrc == 0 || mrc == -ENOMEM);
        if (payload == 2 && mrc == 0) {
            FUZZ_CHECK(rb != NULL);
            uint32_t n;
            int nrc = bf_rollup_count_needs(rb, rl, &n);
            FUZZ_CHECK(nrc == 0 || nrc == -EBADMSG);
            if (om && nrc != 0)
                FUZZ_CHECK(fuzz_pb_stricter(fuzz_pb_first_error(rb, rl), rb + rl));
            if (om && nrc == 0 && !fuzz_pb_has_unknown0(&om->base)) {
                /* protobuf-c's own merge of the member: the merged bytes as one
                 * ClusterCapacityNeeds (a field stream: needs append, scalars
                 * last-wins, which is the protobuf merge) */
                Bigfleet__V1alpha1__ClusterCapacityNeeds *r =
                    bigfleet__v1alpha1__cluster_capacity_needs__unpack(NULL, rl, rb);
                FUZZ_CHECK(r != NULL);
                FUZZ_CHECK(n == r->n_needs);
                /* protobuf-c 1.4 keeps only the LAST occurrence of a oneof
                 * message member given more than once (parse_oneof_member
                 * frees the earlier one; C++ and Go protobuf merge them, as
                 * the session does): om->rollup is that occurrence alone */
                const uint8_t *ob = parts == 1 ? rb : sub;
                size_t ol = parts == 1 ? rl : sublen;
                if (parts == 1)
                    FUZZ_CHECK(rl == sublen && memcmp(rb, sub, rl) == 0);
                Bigfleet__V1alpha1__ClusterCapacityNeeds *last =
                    bigfleet__v1alpha1__cluster_capacity_needs__unpack(NULL, ol, ob);
                FUZZ_CHECK(last != NULL);
                FUZZ_CHECK(last->n_needs == om->rollup->n_needs);
                size_t a = bigfleet__v1alpha1__cluster_capacity_needs__get_packed_size(last);
                size_t b = bigfleet__v1alpha1__cluster_capacity_needs__get_packed_size(om->rollup);
                FUZZ_CHECK(a == b);
                uint8_t *pa = malloc(a + 1), *pb = malloc(b + 1);
                FUZZ_CHECK(pa && pb);
                bigfleet__v1alpha1__cluster_capacity_needs__pack(last, pa);
                bigfleet__v1alpha1__cluster_capacity_needs__pack(om->rollup, pb);
                FUZZ_CHECK(memcmp(pa, pb, a) == 0);
                free(pa);
                free(pb);
                bigfleet__v1alpha1__cluster_capacity_needs__free_unpacked(last, NULL);
                bigfleet__v1alpha1__cluster_capacity_needs__free_unpacked(r, NULL);
            }
        } else if (mrc == 0) {
            FUZZ_CHECK(rb == NULL); /* not the member in effect */
        }
        free(rb);
    }
    if (om && crc == -EBADMSG)
        FUZZ_CHECK(fuzz_pb_stricter(fuzz_pb_first_error(data, size), data + size));
    if (om && crc == 0) {
        FUZZ_CHECK(payload == (int)om->payload_case);
        /* the pointers the session's handlers dereference */
        if (om->payload_case == BIGFLEET__V1ALPHA1__OPERATOR_MESSAGE__PAYLOAD_BOOTSTRAP_RESPONSE)
            FUZZ_CHECK(om->bootstrap_response != NULL);
        if (om->payload_case == BIGFLEET__V1ALPHA1__OPERATOR_MESSAGE__PAYLOAD_RECLAIM_ACK)
            FUZZ_CHECK(om->reclaim_ack != NULL);
    }
    if (om)
        protobuf_c_message_free_unpacked(&om->base, NULL);
    return 0;
}
