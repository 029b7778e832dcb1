/*
 * pbc_fields.h — a protobuf-c message's fields reached through its
 * descriptor, for the test code that walks every field of every message
 * type (tests/interop/wire_identity.c builds and dumps messages from the
 * shared fixture; tests/fuzz/fuzz_pbwire_diff.c compares pbwire's decode
 * with protobuf-c's). Header-only: static inline, no state.
 *
 *   pbc_elem_size(t)     bytes of one element of a repeated field of type t
 *                        in protobuf-c's arrays (a pointer for strings and
 *                        messages, ProtobufCBinaryData for bytes); 0 for an
 *                        unknown type
 *   pbc_member(m, f)     the field's storage inside m (f->offset)
 *   pbc_count(m, f)      a repeated field's element count (quantifier_offset)
 */
#ifndef PBC_FIELDS_H
#define PBC_FIELDS_H

#include <stddef.h>

#include <protobuf-c/protobuf-c.h>

static inline size_t pbc_elem_size(ProtobufCType t)
{
    switch (t) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
    case PROTOBUF_C_TYPE_FLOAT:
    case PROTOBUF_C_TYPE_ENUM:
        return 4;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_DOUBLE:
        return 8;
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_STRING:
        return sizeof(char *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(ProtobufCMessage *);
    }
    return 0;
}

static inline void *pbc_member(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f)
{
    return (char *)m + f->offset;
}

static inline size_t pbc_count(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f)
{
    return *(const size_t *)((const char *)m + f->quantifier_offset);
}

#endif
