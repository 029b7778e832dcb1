/*
 * provider_reference.h — the provider Machine peek's rule written with the
 * general protobuf reader alone (bigfleet/pbwire.h), the oracle that
 * tests/unit/test_provider.c and tests/fuzz/fuzz_provider.c compare
 * bf_prov_machine_peek's inline fast paths against. Header-only (each
 * includer gets its own static copy).
 */
#ifndef BF_TEST_PROVIDER_REFERENCE_H
#define BF_TEST_PROVIDER_REFERENCE_H

#include <stddef.h>
#include <stdint.h>

#include "bigfleet/pbwire.h"
#include "bigfleet/provider.h"

/* The peek's rule written with the general reader alone (bigfleet/pbwire.h):
 * every top-level field reads, and a field provider.proto knows has its wire
 * type (field 11 is reserved, 16 and up unknown: skipped); id is field 1's
 * last occurrence, state field 2's. */
static int reference_peek(const uint8_t *p, size_t len, struct bf_prov_bytes *id, int32_t *state)
{
    static const int8_t want[16] = {-1,        BF_PB_LEN, BF_PB_VARINT, BF_PB_LEN,
                                    BF_PB_LEN, BF_PB_LEN, BF_PB_VARINT, BF_PB_I64,
                                    BF_PB_I64, BF_PB_LEN, BF_PB_LEN,    -1,
                                    BF_PB_LEN, BF_PB_LEN, BF_PB_LEN,    BF_PB_LEN};
    struct bf_pb_reader r;
    struct bf_pb_field f;
    int rc;
    id->p = NULL;
    id->len = 0;
    *state = 0;
    bf_pb_reader_init(&r, p, len);
    while ((rc = bf_pb_next(&r, &f)) == 1) {
        if (f.num < 16 && want[f.num] >= 0 && f.wt != want[f.num])
            return -EBADMSG;
        if (f.num == 1) {
            id->p = f.p;
            id->len = f.len;
        } else if (f.num == 2) {
            *state = (int32_t)(uint32_t)f.varint;
        }
    }
    return rc ? -EBADMSG : 0;
}

#endif /* BF_TEST_PROVIDER_REFERENCE_H */
