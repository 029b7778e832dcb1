/*
 * fuzz_grpc_frame.c — the gRPC Length-Prefixed-Message parser with the
 * shared inbound budget (src/net/grpc_wire.c). Input: a small limit
 * selector, a budget selector, a split seed, then the DATA bytes.
 *
 * The same bytes are fed twice: whole, and cut into pieces at the points
 * the seed picks (as HTTP/2 DATA frames would cut them). Properties:
 *   - both feeds deliver the same messages (bytes and flags) and end with
 *     the same status;
 *   - no delivered message is longer than the limit;
 *   - the budget: `used` never exceeds `max`, equals the parser's assembly
 *     capacity while a message is partial, and is back to 0 once the
 *     parser is idle or reset; a refusal for the budget counts `refused`
 *     and sets over_budget;
 *   - after a non-zero status, reset leaves the parser idle with nothing
 *     charged (no state behind).
 */
#include "fuzz.h"
#include "net/grpc_wire.h"

struct log {
    uint8_t *b;
    size_t len, cap;
    uint32_t n;
    uint32_t max;
};

static int on_msg(void *arg, const uint8_t *msg, size_t len, bool compressed)
{
    struct log *l = arg;
    FUZZ_CHECK(len <= l->max);
    size_t need = l->len + len + 5;
    if (need > l->cap) {
        l->cap = need * 2;
        l->b = realloc(l->b, l->cap);
        FUZZ_CHECK(l->b);
    }
    l->b[l->len++] = compressed;
    memcpy(l->b + l->len, &len, 4);
    l->len += 4;
    if (len)
        memcpy(l->b + l->len, msg, len);
    l->len += len;
    l->n++;
    return 0;
}

static int feed(const uint8_t *d, size_t n, uint32_t max, size_t budget_max, uint32_t seed,
                bool split, struct log *out)
{
    struct bf_grpc_budget bud = {.max = budget_max};
    struct bf_grpc_parser p;
    bf_grpc_parser_init(&p, max, &bud);
    out->max = max;
    int rc = 0;
    size_t at = 0;
    while (at < n && rc == 0) {
        size_t step = n - at;
        if (split) {
            seed = seed * 1103515245u + 12345u;
            step = 1 + (seed >> 16) % 13;
            if (step > n - at)
                step = n - at;
        }
        rc = bf_grpc_parser_feed(&p, d + at, step, on_msg, out);
        at += step;
        FUZZ_CHECK(budget_max == 0 || bud.used <= bud.max);
        if (rc == 0 && bf_grpc_parser_idle(&p))
            FUZZ_CHECK(bud.used == 0);
        if (rc == 0)
            FUZZ_CHECK(bud.used == p.cap);
    }
    if (rc == 8 && p.over_budget)
        FUZZ_CHECK(bud.refused == 1);
    bf_grpc_parser_reset(&p);
    FUZZ_CHECK(bf_grpc_parser_idle(&p) && bud.used == 0);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    static const uint32_t limits[] = {0, 1, 7, 64, 1000, 4u << 20};
    static const size_t budgets[] = {0, 1, 16, 100, 4096};
    uint32_t max = limits[data[0] % 6];
    size_t bmax = budgets[data[1] % 5];
    uint32_t seed = data[2];
    data += 3;
    size -= 3;
    struct log whole = {0}, pieces = {0};
    int a = feed(data, size, max, bmax, seed, false, &whole);
    int b = feed(data, size, max, bmax, seed, true, &pieces);
    bool same = a == b && whole.n == pieces.n && whole.len == pieces.len &&
                (whole.len == 0 || memcmp(whole.b, pieces.b, whole.len) == 0);
    if (!same) {
        /* only the budget may tell them apart: a message that arrives whole is
         * delivered without a copy, the same message in pieces is assembled
         * and may be refused; what was delivered before is a prefix */
        FUZZ_CHECK(bmax != 0 && b == 8);
        FUZZ_CHECK(pieces.len <= whole.len &&
                   (pieces.len == 0 || memcmp(whole.b, pieces.b, pieces.len) == 0));
    }
    free(whole.b);
    free(pieces.b);
    return 0;
}
