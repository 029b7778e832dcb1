/*
 * fuzz_coord.c — what the session decodes from the coordinator
 * (src/session/coord.c): a ReportAck carrying CoordinatorInstructions, and a
 * CoordinatorInstruction alone. Input: one selector byte, then the message.
 *
 * Properties: decode -> encode -> decode -> encode is a fixed point; in an
 * accepted message every pointer the instruction handlers (the session's
 * forwarder, the cycle's src/cycle/instructions.c, moves.c, drain.c)
 * dereference is set: instruction_id; the payload member named by
 * payload_case; its topology key/value strings; every machine id; the
 * ADR-0055 extension strings (shard ids, instance type, zone).
 */
#include "bigfleet/v1alpha1/coordinator.pb-c.h"
#include "fuzz.h"

static void check_instruction(const Bigfleet__V1alpha1__CoordinatorInstruction *in)
{
    FUZZ_CHECK(in != NULL && in->instruction_id != NULL);
    switch (in->payload_case) {
    case BIGFLEET__V1ALPHA1__COORDINATOR_INSTRUCTION__PAYLOAD_ASSIGN_DOMAIN:
        FUZZ_CHECK(in->assign_domain && in->assign_domain->topology_key &&
                   in->assign_domain->topology_value);
        break;
    case BIGFLEET__V1ALPHA1__COORDINATOR_INSTRUCTION__PAYLOAD_UNASSIGN_DOMAIN:
        FUZZ_CHECK(in->unassign_domain && in->unassign_domain->topology_key &&
                   in->unassign_domain->topology_value);
        break;
    case BIGFLEET__V1ALPHA1__COORDINATOR_INSTRUCTION__PAYLOAD_REASSIGN_SPECULATIVE: {
        const Bigfleet__V1alpha1__ReassignSpeculative *r = in->reassign_speculative;
        FUZZ_CHECK(r && r->from_shard_id && r->to_shard_id && r->instance_type && r->zone);
        for (size_t i = 0; i < r->n_machine_ids; i++)
            FUZZ_CHECK(r->machine_ids[i] != NULL);
        break;
    }
    case BIGFLEET__V1ALPHA1__COORDINATOR_INSTRUCTION__PAYLOAD_CROSS_SHARD_DRAIN: {
        const Bigfleet__V1alpha1__CrossShardDrain *d = in->cross_shard_drain;
        FUZZ_CHECK(d && d->instance_type && d->zone);
        for (size_t i = 0; i < d->n_machine_ids; i++)
            FUZZ_CHECK(d->machine_ids[i] != NULL);
        break;
    }
    case BIGFLEET__V1ALPHA1__COORDINATOR_INSTRUCTION__PAYLOAD_TRANSFER_OWNERSHIP: {
        const Bigfleet__V1alpha1__TransferOwnership *t = in->transfer_ownership;
        FUZZ_CHECK(t && t->from_shard_id && t->to_shard_id && t->instance_type && t->zone);
        for (size_t i = 0; i < t->n_machine_ids; i++)
            FUZZ_CHECK(t->machine_ids[i] != NULL);
        break;
    }
    default:
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    bool ack = data[0] & 1;
    data++;
    size--;
    if (ack) {
        Bigfleet__V1alpha1__ReportAck *a = (Bigfleet__V1alpha1__ReportAck *)fuzz_pb_roundtrip(
            &bigfleet__v1alpha1__report_ack__descriptor, data, size);
        fuzz_pb_bounded(&bigfleet__v1alpha1__report_ack__descriptor, data, size,
                        a ? &a->base : NULL); /* the session's decode */
        if (a) {
            for (size_t i = 0; i < a->n_instructions; i++)
                check_instruction(a->instructions[i]);
            protobuf_c_message_free_unpacked(&a->base, NULL);
        }
    } else {
        Bigfleet__V1alpha1__CoordinatorInstruction *in =
            (Bigfleet__V1alpha1__CoordinatorInstruction *)fuzz_pb_roundtrip(
                &bigfleet__v1alpha1__coordinator_instruction__descriptor, data, size);
        if (in) {
            check_instruction(in);
            protobuf_c_message_free_unpacked(&in->base, NULL);
        }
    }
    return 0;
}
