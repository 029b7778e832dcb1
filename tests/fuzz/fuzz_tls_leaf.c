/*
 * fuzz_tls_leaf.c — the identity of an mTLS peer's leaf certificate
 * (bf_tls_leaf_identity, src/net/tls.c): the certificate's DER bytes, parsed
 * by wolfSSL's certificate parser, then the wire.md §7 rule on its URI SANs.
 * In a handshake the leaf's chain has verified first; the parse and the rule
 * are fuzzed on any bytes. (wolfSSL itself is not instrumented for coverage:
 * the static library is built by scripts/build-wolfssl with gcc; ASan still
 * sees its allocations and our reads of what it returns.)
 *
 * Properties:
 *   - the result is a count 0..INT8_MAX, -EINVAL or -ENOMEM;
 *   - *ident is set exactly when the result is 1: a NUL-terminated string
 *     starting "bigfleet:" (lower case) with no NUL before its end;
 *   - deterministic: a second call gives the same result and string.
 */
#include <errno.h>

#include "fuzz.h"
#include "net/net_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *id = (char *)0x1, *id2 = (char *)0x1;
    int n = bf_tls_leaf_identity(data, size, &id);
    FUZZ_CHECK(n == -EINVAL || n == -ENOMEM || (n >= 0 && n <= INT8_MAX));
    FUZZ_CHECK((n == 1) == (id != NULL));
    if (id) {
        FUZZ_CHECK(strncmp(id, "bigfleet:", 9) == 0);
        FUZZ_CHECK(strlen(id) >= 9);
    }
    int n2 = bf_tls_leaf_identity(data, size, &id2);
    FUZZ_CHECK(n2 == n || n == -ENOMEM || n2 == -ENOMEM);
    if (n == 1 && n2 == 1)
        FUZZ_CHECK(strcmp(id, id2) == 0);
    free(id);
    free(id2);
    return 0;
}
