/*
 * fuzz_h2_guard.c — the gRPC server's hostile-peer accounting
 * (src/net/guard.c): the HTTP/2 frame guard fed any sequence of frame
 * headers, and the per-address / per-identity connection counts fed any
 * sequence of increments and decrements. Input: records of 12 bytes
 * (type, flags, stream id x4, length x3, time step in ms x2, op).
 *
 * Properties:
 *   - bf_h2_guard_frame returns 0 or a flood reason in 1..BF_NET_FLOOD_COUNT-1,
 *     and, replayed from a fresh guard on the same records, the same answers
 *     (deterministic: no hidden state);
 *   - PING and SETTINGS acknowledgements and WINDOW_UPDATEs never count;
 *   - the connection counts equal a plain array model after every operation
 *     (16 keys), and a key at 0 is gone (bf_cc_get 0, n matches).
 */
#include "fuzz.h"
#include "net/guard.h"

#define REC 12

static void run(const uint8_t *data, size_t size, int *out, size_t *nout)
{
    struct bf_h2_guard g;
    bf_h2_guard_init(&g, 0);
    int64_t now = 1000000000;
    *nout = 0;
    for (size_t off = 0; off + REC <= size; off += REC) {
        const uint8_t *r = data + off;
        int32_t sid =
            (int32_t)((uint32_t)r[2] << 24 | (uint32_t)r[3] << 16 | (uint32_t)r[4] << 8 | r[5]) &
            0x7fffffff;
        size_t len = (size_t)r[6] << 16 | (size_t)r[7] << 8 | r[8];
        now += ((int64_t)r[9] << 8 | r[10]) * 1000000;
        int rc = bf_h2_guard_frame(&g, r[0], r[1], sid, len, now);
        FUZZ_CHECK(rc >= 0 && rc < BF_NET_FLOOD_COUNT);
        if (((r[0] == 6 || r[0] == 4) && (r[1] & 1)) || r[0] == 8)
            FUZZ_CHECK(rc == 0); /* acknowledgements and window updates are free */
        out[(*nout)++] = rc;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 64 * REC * 64)
        return 0;
    size_t cap = size / REC + 1;
    int *a = malloc(cap * sizeof *a), *b = malloc(cap * sizeof *b);
    size_t na, nb;
    run(data, size, a, &na);
    run(data, size, b, &nb);
    FUZZ_CHECK(na == nb && memcmp(a, b, na * sizeof *a) == 0);
    free(a);
    free(b);
    /* connection counts against a model */
    struct bf_conn_counts cc;
    bf_cc_init(&cc);
    uint32_t model[16] = {0};
    for (size_t off = 0; off + REC <= size; off += REC) {
        const uint8_t *r = data + off;
        unsigned k = r[11] & 15;
        struct bf_cc_key key;
        memset(&key, 0, sizeof key);
        key.b[0] = (uint8_t)k;
        key.b[15] = (uint8_t)(k * 37);
        if (r[11] & 16) {
            bf_cc_dec(&cc, &key);
            if (model[k])
                model[k]--;
        } else if (bf_cc_inc(&cc, &key) > 0) {
            model[k]++;
        }
        uint32_t live = 0;
        for (unsigned i = 0; i < 16; i++) {
            struct bf_cc_key q;
            memset(&q, 0, sizeof q);
            q.b[0] = (uint8_t)i;
            q.b[15] = (uint8_t)(i * 37);
            FUZZ_CHECK(bf_cc_get(&cc, &q) == model[i]);
            live += model[i] > 0;
        }
        FUZZ_CHECK(cc.n == live);
    }
    bf_cc_free(&cc);
    return 0;
}
