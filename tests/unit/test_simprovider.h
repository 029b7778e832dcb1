/*
 * test_simprovider.h — helpers shared by the test_simprovider*.c suites
 * (static, header-only: every tests/unit/test_*.c is its own binary).
 *
 * The helpers drive the simulator the way a gRPC server would: requests are
 * packed with protobuf-c, passed as bytes to bf_sim_handle(), and replies are
 * unpacked with protobuf-c — so every test exercises the wire path. Where a
 * byte string must carry a NUL (shard_metadata keys), requests are encoded by
 * hand here and replies parsed by an independent reader (simt_md_raw).
 */
#ifndef TEST_SIMPROVIDER_H
#define TEST_SIMPROVIDER_H

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bigfleet/model.h"
#include "bigfleet/simprovider.h"
#include "bigfleet/util.h"
#include "check_run.h"

#define SIMT_UNUSED __attribute__((unused))
#define T0          (1000 * BF_NS_PER_SEC)
#define SEC         BF_NS_PER_SEC
#define MS          BF_NS_PER_MS

typedef Bigfleet__V1alpha1__Machine PbMachine;
typedef Bigfleet__V1alpha1__MachineList PbList;
typedef Bigfleet__V1alpha1__TransitionAck PbAck;

/* Path of the real openb node list: $BF_OPENB_CSV or ../shared/data/openb. */
static SIMT_UNUSED const char *simt_openb_csv(void)
{
    const char *e = getenv("BF_OPENB_CSV");
    if (e && *e)
        return e;
    static const char *const cands[] = {"../shared/data/openb/openb_node_list_all_node.csv",
                                        "../../shared/data/openb/openb_node_list_all_node.csv",
                                        "/work/shared/data/openb/openb_node_list_all_node.csv"};
    for (size_t i = 0; i < sizeof cands / sizeof cands[0]; i++)
        if (access(cands[i], R_OK) == 0)
            return cands[i];
    ck_abort_msg("openb node list not found: set BF_OPENB_CSV");
    return NULL;
}

/* A small default config: built-in 5-type catalog, 3 zones, 4 racks,
 * 8 Speculative slots per type, instant transitions. */
static SIMT_UNUSED void simt_cfg(struct bf_sim_config *c)
{
    bf_sim_config_init(c);
    c->racks_per_zone = 4;
    c->seed_speculative = 8;
}

static SIMT_UNUSED struct bf_sim *simt_open(const struct bf_sim_config *c)
{
    struct bf_sim *s = NULL;
    char err[256] = "";
    int rc = bf_sim_open(c, &s, err, sizeof err);
    ck_assert_msg(rc == 0, "bf_sim_open: %d %s", rc, err);
    return s;
}

/* A simulator on simt_cfg's defaults seeded with `idle` Idle machines. */
static SIMT_UNUSED struct bf_sim *simt_open_idle(uint32_t idle)
{
    struct bf_sim_config c;
    simt_cfg(&c);
    c.seed_idle = idle;
    return simt_open(&c);
}

/* ------------------------------------------------------------ calls */

struct simt_ack {
    int code;
    char msg[256];
    char op[64];
    int state;
    PbAck *ack; /* unpacked, NULL unless OK */
};

static SIMT_UNUSED void simt_ack_free(struct simt_ack *a)
{
    if (a->ack)
        bigfleet__v1alpha1__transition_ack__free_unpacked(a->ack, NULL);
    a->ack = NULL;
}

static SIMT_UNUSED struct simt_ack simt_call(struct bf_sim *s, int rpc, const ProtobufCMessage *req,
                                             int64_t now)
{
    struct simt_ack a = {0};
    size_t n = protobuf_c_message_get_packed_size(req);
    uint8_t *buf = malloc(n ? n : 1);
    protobuf_c_message_pack(req, buf);
    struct bf_sim_reply r = {0};
    bf_sim_handle(s, rpc, buf, n, now, &r);
    free(buf);
    a.code = r.code;
    snprintf(a.msg, sizeof a.msg, "%s", r.message);
    if (r.code == 0) {
        a.ack = bigfleet__v1alpha1__transition_ack__unpack(NULL, r.len, r.body);
        ck_assert_msg(a.ack != NULL, "TransitionAck does not unpack");
        ck_assert_ptr_nonnull(a.ack->machine);
        snprintf(a.op, sizeof a.op, "%s", a.ack->operation_id);
        a.state = a.ack->machine->state;
    } else {
        ck_assert_msg(r.len == 0, "error reply carries a body");
    }
    bf_sim_reply_free(&r);
    return a;
}

static SIMT_UNUSED struct simt_ack simt_create(struct bf_sim *s, const char *id, const char *shard,
                                               int64_t epoch, int64_t seq, int64_t now)
{
    Bigfleet__V1alpha1__CreateRequest q = BIGFLEET__V1ALPHA1__CREATE_REQUEST__INIT;
    q.machine_id = (char *)id;
    q.shard_id = (char *)shard;
    q.shard_epoch = epoch;
    q.sequence_number = seq;
    struct simt_ack a = simt_call(s, BF_SIM_RPC_CREATE, &q.base, now);
    return a;
}

/* md: alternating key, value C strings, NULL-terminated */
static SIMT_UNUSED struct simt_ack simt_configure(struct bf_sim *s, const char *id,
                                                  const char *cluster, const char *const *md,
                                                  const char *shard, int64_t epoch, int64_t seq,
                                                  int64_t now)
{
    Bigfleet__V1alpha1__ConfigureRequest q = BIGFLEET__V1ALPHA1__CONFIGURE_REQUEST__INIT;
    q.machine_id = (char *)id;
    q.cluster_id = (char *)cluster;
    q.shard_id = (char *)shard;
    q.shard_epoch = epoch;
    q.sequence_number = seq;
    q.bootstrap_blob.data = (uint8_t *)"#cloud-config\n";
    q.bootstrap_blob.len = 14;
    size_t n = 0;
    while (md && md[2 * n])
        n++;
    Bigfleet__V1alpha1__ConfigureRequest__ShardMetadataEntry *e = calloc(n + 1, sizeof *e);
    Bigfleet__V1alpha1__ConfigureRequest__ShardMetadataEntry **ep = calloc(n + 1, sizeof *ep);
    for (size_t i = 0; i < n; i++) {
        Bigfleet__V1alpha1__ConfigureRequest__ShardMetadataEntry init =
            BIGFLEET__V1ALPHA1__CONFIGURE_REQUEST__SHARD_METADATA_ENTRY__INIT;
        e[i] = init;
        e[i].key = (char *)md[2 * i];
        e[i].value.data = (uint8_t *)md[2 * i + 1];
        e[i].value.len = strlen(md[2 * i + 1]);
        ep[i] = &e[i];
    }
    q.n_shard_metadata = n;
    q.shard_metadata = ep;
    struct simt_ack a = simt_call(s, BF_SIM_RPC_CONFIGURE, &q.base, now);
    free(e);
    free(ep);
    return a;
}

static SIMT_UNUSED struct simt_ack simt_drain(struct bf_sim *s, const char *id, int64_t grace,
                                              const char *shard, int64_t epoch, int64_t seq,
                                              int64_t now)
{
    Bigfleet__V1alpha1__DrainRequest q = BIGFLEET__V1ALPHA1__DRAIN_REQUEST__INIT;
    q.machine_id = (char *)id;
    q.grace_period_seconds = grace;
    q.shard_id = (char *)shard;
    q.shard_epoch = epoch;
    q.sequence_number = seq;
    return simt_call(s, BF_SIM_RPC_DRAIN, &q.base, now);
}

static SIMT_UNUSED struct simt_ack simt_delete(struct bf_sim *s, const char *id, const char *shard,
                                               int64_t epoch, int64_t seq, int64_t now)
{
    Bigfleet__V1alpha1__DeleteRequest q = BIGFLEET__V1ALPHA1__DELETE_REQUEST__INIT;
    q.machine_id = (char *)id;
    q.shard_id = (char *)shard;
    q.shard_epoch = epoch;
    q.sequence_number = seq;
    return simt_call(s, BF_SIM_RPC_DELETE, &q.base, now);
}

/* Get: returns the unpacked Machine (caller frees) or NULL with *code set. */
static SIMT_UNUSED PbMachine *simt_get(struct bf_sim *s, const char *id, int64_t now, int *code)
{
    Bigfleet__V1alpha1__MachineRef q = BIGFLEET__V1ALPHA1__MACHINE_REF__INIT;
    q.id = (char *)id;
    size_t n = protobuf_c_message_get_packed_size(&q.base);
    uint8_t buf[2048];
    ck_assert(n <= sizeof buf);
    protobuf_c_message_pack(&q.base, buf);
    struct bf_sim_reply r = {0};
    bf_sim_handle(s, BF_SIM_RPC_GET, buf, n, now, &r);
    if (code)
        *code = r.code;
    PbMachine *m = NULL;
    if (r.code == 0) {
        m = bigfleet__v1alpha1__machine__unpack(NULL, r.len, r.body);
        ck_assert_msg(m != NULL, "Machine does not unpack");
    }
    bf_sim_reply_free(&r);
    return m;
}

static SIMT_UNUSED int simt_state(struct bf_sim *s, const char *id, int64_t now)
{
    int code;
    PbMachine *m = simt_get(s, id, now, &code);
    ck_assert_msg(code == 0, "Get %s: code %d", id, code);
    int st = m->state;
    bigfleet__v1alpha1__machine__free_unpacked(m, NULL);
    return st;
}

static SIMT_UNUSED void simt_free_machine(PbMachine *m)
{
    if (m)
        bigfleet__v1alpha1__machine__free_unpacked(m, NULL);
}

/* List: states (0-terminated array or NULL), max, since (len may be 0).
 * Returns the unpacked list (caller frees) or NULL with *code set. */
static SIMT_UNUSED PbList *simt_list(struct bf_sim *s, const int *states, int32_t max,
                                     const void *since, size_t since_len, int64_t now, int *code)
{
    Bigfleet__V1alpha1__ListFilter q = BIGFLEET__V1ALPHA1__LIST_FILTER__INIT;
    Bigfleet__V1alpha1__MachineState st[16];
    size_t n = 0;
    while (states && states[n] && n < 16) {
        st[n] = (Bigfleet__V1alpha1__MachineState)states[n];
        n++;
    }
    q.n_states = n;
    q.states = st;
    q.max_results = max;
    q.since_revision.data = (uint8_t *)since;
    q.since_revision.len = since_len;
    size_t pl = protobuf_c_message_get_packed_size(&q.base);
    uint8_t *buf = malloc(pl + 1);
    protobuf_c_message_pack(&q.base, buf);
    struct bf_sim_reply r = {0};
    bf_sim_handle(s, BF_SIM_RPC_LIST, buf, pl, now, &r);
    free(buf);
    if (code)
        *code = r.code;
    PbList *l = NULL;
    if (r.code == 0) {
        l = bigfleet__v1alpha1__machine_list__unpack(NULL, r.len, r.body);
        ck_assert_msg(l != NULL, "MachineList does not unpack");
    }
    bf_sim_reply_free(&r);
    return l;
}

static SIMT_UNUSED PbList *simt_list_all(struct bf_sim *s, int64_t now)
{
    int code;
    PbList *l = simt_list(s, NULL, 0, NULL, 0, now, &code);
    ck_assert_int_eq(code, 0);
    return l;
}

static SIMT_UNUSED void simt_free_list(PbList *l)
{
    if (l)
        bigfleet__v1alpha1__machine_list__free_unpacked(l, NULL);
}

/* The revision of a list as a C string (static buffer per call site use). */
static SIMT_UNUSED void simt_rev(const PbList *l, char *out, size_t n)
{
    size_t k = l->revision.len < n - 1 ? l->revision.len : n - 1;
    memcpy(out, l->revision.data, k);
    out[k] = 0;
}

/* Id of the first machine in `state` (from a full List), copied into out. */
static SIMT_UNUSED int simt_pick(struct bf_sim *s, int state, int skip, char *out, size_t n,
                                 int64_t now)
{
    int st[2] = {state, 0};
    int code;
    PbList *l = simt_list(s, st, 0, NULL, 0, now, &code);
    ck_assert_int_eq(code, 0);
    int found = -1;
    if ((size_t)skip < l->n_machines) {
        snprintf(out, n, "%s", l->machines[skip]->id);
        found = 0;
    }
    simt_free_list(l);
    return found;
}

/* A simulator with one Idle machine, whose id (picked at now) goes to id[0..n). */
static SIMT_UNUSED struct bf_sim *simt_open_one_idle(char *id, size_t n, int64_t now)
{
    struct bf_sim *s = simt_open_idle(1);
    simt_pick(s, BF_STATE_IDLE, 0, id, n, now);
    return s;
}

/* ------------------------------------------------------------ hand-made wire */

struct simt_buf {
    uint8_t *p;
    size_t len, cap;
};

static SIMT_UNUSED void simt_put(struct simt_buf *b, const void *d, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->len, d, n);
    b->len += n;
}

static SIMT_UNUSED void simt_varint(struct simt_buf *b, uint64_t v)
{
    uint8_t t[10];
    size_t n = 0;
    do {
        t[n++] = (uint8_t)((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
        v >>= 7;
    } while (v);
    simt_put(b, t, n);
}

static SIMT_UNUSED void simt_ld(struct simt_buf *b, uint32_t field, const void *d, size_t n)
{
    simt_varint(b, (uint64_t)field << 3 | 2);
    simt_varint(b, n);
    simt_put(b, d, n);
}

struct simt_kv {
    const uint8_t *k;
    size_t kl;
    const uint8_t *v;
    size_t vl;
};

/* A ConfigureRequest with byte-exact metadata keys and values. */
static SIMT_UNUSED struct simt_buf simt_configure_raw(const char *id, const char *cluster,
                                                      const struct simt_kv *md, size_t n,
                                                      size_t blob_len)
{
    struct simt_buf b = {0};
    simt_ld(&b, 1, id, strlen(id));
    simt_ld(&b, 2, cluster, strlen(cluster));
    if (blob_len) {
        uint8_t *blob = malloc(blob_len);
        for (size_t i = 0; i < blob_len; i++)
            blob[i] = (uint8_t)('a' + i % 26);
        simt_ld(&b, 3, blob, blob_len);
        free(blob);
    }
    for (size_t i = 0; i < n; i++) {
        struct simt_buf e = {0};
        simt_ld(&e, 1, md[i].k, md[i].kl);
        simt_ld(&e, 2, md[i].v, md[i].vl);
        simt_ld(&b, 7, e.p, e.len);
        free(e.p);
    }
    return b;
}

/* Independent reader: the shard_metadata entries (field 15) of a packed
 * Machine, byte-exact. Fills up to max entries; returns the count, -1 if the
 * bytes are malformed. */
static SIMT_UNUSED int simt_rd_varint(const uint8_t **p, const uint8_t *e, uint64_t *v)
{
    uint64_t x = 0;
    for (int s = 0; s < 64 && *p < e; s += 7) {
        uint8_t c = *(*p)++;
        x |= (uint64_t)(c & 0x7f) << s;
        if (!(c & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

/* ConfigureMachine(id, cluster, metadata md[0..n), a bootstrap blob of
 * blob_bytes) sent as raw bytes (simt_configure_raw) at now: the reply. */
static SIMT_UNUSED struct bf_sim_reply simt_configure_md(struct bf_sim *s, const char *id,
                                                         const char *cluster,
                                                         const struct simt_kv *md, size_t n,
                                                         size_t blob_bytes, int64_t now)
{
    struct simt_buf b = simt_configure_raw(id, cluster, md, n, blob_bytes);
    struct bf_sim_reply r = {0};
    bf_sim_handle(s, BF_SIM_RPC_CONFIGURE, b.p, b.len, now, &r);
    free(b.p);
    return r;
}

/* One length-delimited field's bytes inside a message. */
struct simt_span {
    const uint8_t *p;
    size_t len;
};

/* Walks the top-level fields of a message whose fields are all
 * length-delimited (a TransitionAck, a ListResponse), asserting every key
 * and length parses and stays inside; stores up to max occurrences of
 * `field` in out and returns how many there were (a count over max fails). */
static SIMT_UNUSED size_t simt_ld_fields(const uint8_t *p, size_t len, uint32_t field,
                                         struct simt_span *out, size_t max)
{
    const uint8_t *e = p + len;
    size_t n = 0;
    while (p < e) {
        uint64_t key, l;
        ck_assert_int_eq(simt_rd_varint(&p, e, &key), 0);
        ck_assert_int_eq(simt_rd_varint(&p, e, &l), 0);
        ck_assert_uint_le(l, (uint64_t)(e - p));
        if ((key >> 3) == field) {
            ck_assert_uint_lt(n, max);
            out[n++] = (struct simt_span){p, (size_t)l};
        }
        p += l;
    }
    return n;
}

static SIMT_UNUSED int simt_md_raw(const uint8_t *p, size_t len, struct simt_kv *out, int max)
{
    const uint8_t *e = p + len;
    int n = 0;
    while (p < e) {
        uint64_t key, l;
        if (simt_rd_varint(&p, e, &key))
            return -1;
        int wt = (int)(key & 7);
        uint64_t f = key >> 3;
        if (wt == 0) {
            if (simt_rd_varint(&p, e, &l))
                return -1;
            continue;
        }
        if (wt == 1) {
            p += 8;
            continue;
        }
        if (wt != 2 || simt_rd_varint(&p, e, &l) || l > (uint64_t)(e - p))
            return -1;
        if (f == 15) {
            if (n >= max)
                return -1;
            struct simt_kv kv = {(const uint8_t *)"", 0, (const uint8_t *)"", 0};
            const uint8_t *q = p, *qe = p + l;
            while (q < qe) {
                uint64_t k2, l2;
                if (simt_rd_varint(&q, qe, &k2) || (k2 & 7) != 2 || simt_rd_varint(&q, qe, &l2) ||
                    l2 > (uint64_t)(qe - q))
                    return -1;
                if ((k2 >> 3) == 1) {
                    kv.k = q;
                    kv.kl = l2;
                } else if ((k2 >> 3) == 2) {
                    kv.v = q;
                    kv.vl = l2;
                }
                q += l2;
            }
            out[n++] = kv;
        }
        p += l;
    }
    return n;
}

/* Raw Get bytes for id (caller frees reply). */
static SIMT_UNUSED struct bf_sim_reply simt_get_raw(struct bf_sim *s, const char *id, int64_t now)
{
    struct simt_buf b = {0};
    simt_ld(&b, 1, id, strlen(id));
    struct bf_sim_reply r = {0};
    bf_sim_handle(s, BF_SIM_RPC_GET, b.p, b.len, now, &r);
    free(b.p);
    return r;
}

/* True when the metadata of the machine encoded in (p, len) equals md[0..n) as
 * a map (order free, byte-exact). */
static SIMT_UNUSED bool simt_md_equal(const uint8_t *p, size_t len, const struct simt_kv *md,
                                      size_t n)
{
    struct simt_kv *got = calloc(n + 64, sizeof *got);
    int g = simt_md_raw(p, len, got, (int)n + 64);
    bool ok = g == (int)n;
    for (size_t i = 0; ok && i < n; i++) {
        bool hit = false;
        for (int j = 0; j < g && !hit; j++)
            hit = got[j].kl == md[i].kl && got[j].vl == md[i].vl &&
                  (md[i].kl == 0 || memcmp(got[j].k, md[i].k, md[i].kl) == 0) &&
                  (md[i].vl == 0 || memcmp(got[j].v, md[i].v, md[i].vl) == 0);
        ok = hit;
    }
    free(got);
    return ok;
}

/* A temporary directory (removed by simt_rmdir). */
static SIMT_UNUSED char *simt_tmpdir(void)
{
    char *t = strdup("/tmp/bf-simtest-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(t));
    return t;
}

static SIMT_UNUSED void simt_rmdir(char *d)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
    ck_assert_int_eq(system(cmd), 0);
    free(d);
}

#endif /* TEST_SIMPROVIDER_H */
