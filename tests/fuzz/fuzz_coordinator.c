/*
 * fuzz_coordinator.c — what bigfleet-coordinator decodes from peers it does
 * not control: a ShardReport from a shard (decoded by protobuf-c, then
 * digested into the leader's soft state by co_soft_ingest, twice, so the
 * carry-over of first-seen times runs too) and a key/value read from etcd
 * (co_store_apply_kv). Input: one selector byte, then the message; for
 * etcd, a second byte splits the rest into key and value.
 *
 * Properties: the digest holds at most CO_MAX_SHORTFALL shortfalls and
 * CO_MAX_FREE free rows, every string it points to is set, a deficit is
 * never negative; the store never holds more than its bounds, and every
 * entry it keeps has its strings set.
 */
#include "../../tools/coordinator/coordinator.h"
#include "bigfleet/log.h"
#include "fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    bf_log_init("fuzz", BF_LOG_ERROR + 1);
    return 0;
}

static void report(const uint8_t *p, size_t n)
{
    static struct coord c;
    struct co_soft s = {0};
    for (int round = 0; round < 2; round++) {
        Bigfleet__V1alpha1__ShardReport *rep = bigfleet__v1alpha1__shard_report__unpack(NULL, n, p);
        if (!rep)
            break;
        if (co_soft_ingest(&c, &s, rep) != 0) {
            bigfleet__v1alpha1__shard_report__free_unpacked(rep, NULL);
            break;
        }
        FUZZ_CHECK(s.n_sf <= CO_MAX_SHORTFALL && s.n_free <= CO_MAX_FREE);
        for (uint32_t i = 0; i < s.n_free; i++)
            FUZZ_CHECK(s.free[i].type && s.free[i].zone && s.free[i].idle >= 0 &&
                       s.free[i].spec >= 0 && s.free[i].bound >= 0);
        for (uint32_t i = 0; i < s.n_sf; i++) {
            for (int d = 0; d < RB_DIMS; d++)
                FUZZ_CHECK(s.sf[i].deficit[d] >= 0);
            for (uint32_t j = 0; j < s.sf[i].n_types; j++)
                FUZZ_CHECK(s.sf[i].types[j] != NULL);
            for (uint32_t j = 0; j < s.sf[i].n_zones; j++)
                FUZZ_CHECK(s.sf[i].zones[j] != NULL);
        }
    }
    co_soft_free(&s);
}

static void etcd_kv(const uint8_t *p, size_t n)
{
    if (n < 1)
        return;
    size_t kl = p[0] < n - 1 ? p[0] : n - 1;
    static struct co_store st;
    co_store_apply_kv(&st, "/bf/", p + 1, kl, p + 1 + kl, n - 1 - kl);
    FUZZ_CHECK(st.n_shards <= CO_MAX_SHARDS && st.n_domains <= CO_MAX_DOMAINS);
    for (uint32_t i = 0; i < st.n_shards; i++)
        FUZZ_CHECK(st.shards[i].id && st.shards[i].address);
    for (uint32_t i = 0; i < st.n_domains; i++)
        FUZZ_CHECK(st.domains[i].key && st.domains[i].value && st.domains[i].shard);
    if (st.n_shards + st.n_domains + st.n_clusters + st.n_quotas > 64)
        co_store_clear(&st); /* keep every run short */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] & 1)
        etcd_kv(data + 1, size - 1);
    else
        report(data + 1, size - 1);
    return 0;
}
