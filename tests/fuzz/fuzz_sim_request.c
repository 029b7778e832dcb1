/*
 * fuzz_sim_request.c — the simulated provider's request decoders
 * (src/simprovider/wire.c): Create/Configure/Drain/Delete requests,
 * MachineRef (Get) and ListFilter. Input: one selector byte (the RPC),
 * then the request message.
 *
 * Properties: the decoder returns 0 or -EBADMSG (never another error);
 * every slice lies inside the input; decode -> encode (known fields, the
 * wire module's writer) -> decode gives the same request; a rejected input
 * leaves no allocation behind (LeakSanitizer).
 */
#include <errno.h>

#include "fuzz.h"
#include "simprovider/sim_internal.h"

static const uint8_t *g_lo, *g_hi;

static void in_input(struct bf_sim_bytes b)
{
    if (b.len)
        FUZZ_CHECK(b.p >= g_lo && b.p + b.len <= g_hi);
}

static bool same(struct bf_sim_bytes a, struct bf_sim_bytes b)
{
    return a.len == b.len && (a.len == 0 || memcmp(a.p, b.p, a.len) == 0);
}

/* field numbers per kind: id, shard, epoch, seq, cluster, blob, md, grace (0 = absent) */
static const uint32_t nums[4][8] = {
    [BF_SIM_RPC_CREATE] = {1, 3, 4, 5, 0, 0, 0, 0},
    [BF_SIM_RPC_CONFIGURE] = {1, 4, 5, 6, 2, 3, 7, 0},
    [BF_SIM_RPC_DRAIN] = {1, 3, 4, 5, 0, 0, 0, 2},
    [BF_SIM_RPC_DELETE] = {1, 2, 3, 4, 0, 0, 0, 0},
};

static uint8_t *put_b(uint8_t *p, uint32_t f, struct bf_sim_bytes b)
{
    return f && b.len ? bf_pb_put_ld(p, f, b.p, b.len) : p;
}

static uint8_t *put_v(uint8_t *p, uint32_t f, int64_t v)
{
    return f && v ? bf_pb_put_varint_field(p, f, (uint64_t)v) : p;
}

static void lifecycle(int kind, const uint8_t *data, size_t size)
{
    struct bf_sim_request q, q2;
    struct bf_sim_md_entry *md = NULL, *md2 = NULL;
    int rc = bf_sim_decode_lifecycle(kind, data, size, &q, &md);
    FUZZ_CHECK(rc == 0 || rc == -EBADMSG || rc == -ENOMEM);
    if (rc) {
        FUZZ_CHECK(md == NULL);
        return;
    }
    in_input(q.machine_id);
    in_input(q.shard_id);
    in_input(q.cluster_id);
    for (size_t i = 0; i < q.n_metadata; i++) {
        in_input(q.metadata[i].key);
        in_input(q.metadata[i].value);
    }
    /* re-encode: fields in any order decode the same; the blob is kept as its length */
    const uint32_t *n = nums[kind];
    size_t cap = 128 + size + q.bootstrap_blob_len + 16 * q.n_metadata;
    uint8_t *b = malloc(cap), *p = b;
    FUZZ_CHECK(b);
    p = put_b(p, n[0], q.machine_id);
    p = put_b(p, n[1], q.shard_id);
    p = put_v(p, n[2], q.shard_epoch);
    p = put_v(p, n[3], q.sequence_number);
    p = put_b(p, n[4], q.cluster_id);
    if (n[5] && q.bootstrap_blob_len) {
        p = bf_pb_put_ld_header(p, n[5], q.bootstrap_blob_len);
        memset(p, 0xab, q.bootstrap_blob_len);
        p += q.bootstrap_blob_len;
    }
    for (size_t i = 0; n[6] && i < q.n_metadata; i++) {
        const struct bf_sim_md_entry *e = &q.metadata[i];
        size_t body = (e->key.len ? bf_pb_ld_len(1, e->key.len) : 0) +
                      (e->value.len ? bf_pb_ld_len(2, e->value.len) : 0);
        p = bf_pb_put_ld_header(p, n[6], body);
        p = put_b(p, 1, e->key);
        p = put_b(p, 2, e->value);
    }
    p = put_v(p, n[7], q.grace_period_seconds);
    FUZZ_CHECK((size_t)(p - b) <= cap);
    FUZZ_CHECK(bf_sim_decode_lifecycle(kind, b, (size_t)(p - b), &q2, &md2) == 0);
    FUZZ_CHECK(same(q.machine_id, q2.machine_id) && same(q.shard_id, q2.shard_id) &&
               same(q.cluster_id, q2.cluster_id));
    FUZZ_CHECK(q.shard_epoch == q2.shard_epoch && q.sequence_number == q2.sequence_number &&
               q.grace_period_seconds == q2.grace_period_seconds &&
               q.bootstrap_blob_len == q2.bootstrap_blob_len && q.n_metadata == q2.n_metadata);
    for (size_t i = 0; i < q.n_metadata; i++)
        FUZZ_CHECK(same(q.metadata[i].key, q2.metadata[i].key) &&
                   same(q.metadata[i].value, q2.metadata[i].value));
    free(md);
    free(md2);
    free(b);
}

static void list(const uint8_t *data, size_t size)
{
    struct bf_sim_list_args a, a2;
    int rc = bf_sim_decode_list(data, size, &a);
    FUZZ_CHECK(rc == 0 || rc == -EBADMSG);
    if (rc)
        return;
    in_input(a.since_revision);
    uint8_t *p;
    size_t need = 64 + a.since_revision.len;
    uint8_t *big = malloc(need + 16 * 12);
    FUZZ_CHECK(big);
    p = big;
    for (int s = 0; s < 32; s++) /* states as unpacked varints */
        if (a.state_mask >> s & 1)
            p = bf_pb_put_varint_field(p, 1, (uint64_t)s);
    if (a.bad_state)
        p = bf_pb_put_varint_field(p, 1, 99);
    p = put_v(p, 4, a.max_results);
    p = put_b(p, 5, a.since_revision);
    FUZZ_CHECK(bf_sim_decode_list(big, (size_t)(p - big), &a2) == 0);
    FUZZ_CHECK(a.state_mask == a2.state_mask && a.bad_state == a2.bad_state &&
               a.max_results == a2.max_results && same(a.since_revision, a2.since_revision));
    free(big);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int rpc = data[0] % BF_SIM_RPC_COUNT;
    data++;
    size--;
    g_lo = data;
    g_hi = data + size;
    if (rpc < BF_SIM_KIND_COUNT) {
        lifecycle(rpc, data, size);
    } else if (rpc == BF_SIM_RPC_GET) {
        struct bf_sim_bytes id, id2;
        int rc = bf_sim_decode_ref(data, size, &id);
        FUZZ_CHECK(rc == 0 || rc == -EBADMSG);
        if (rc == 0) {
            in_input(id);
            uint8_t *b = malloc(id.len + 16), *p = put_b(b, 1, id);
            FUZZ_CHECK(bf_sim_decode_ref(b, (size_t)(p - b), &id2) == 0 && same(id, id2));
            free(b);
        }
    } else {
        list(data, size);
    }
    return 0;
}
