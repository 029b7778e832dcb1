/*
 * fuzz_provider.c — the provider reply decoders (bigfleet/provider.h):
 * Machine (the Get reply), MachineList (List) and TransitionAck, then the
 * record screen. Input: the message bytes.
 *
 * Properties:
 *   - every slice a decoder returns lies inside the input;
 *   - an accepted Machine's maps walk to exactly n_* entries without error;
 *   - decode -> encode (known fields, with the wire module's writer) ->
 *     decode gives the same view and the same shape hash when the input
 *     is canonical (each known field once, in number order), and the same
 *     scalars and strings otherwise;
 *   - an accepted MachineList iterates exactly n_machines machines;
 *   - the reconciler's peek (id and state only) accepts whatever the decoder
 *     accepts, with the same id slice and state;
 *   - decoding is deterministic (twice -> identical view).
 */
#include "bigfleet/pbwire.h"
#include "bigfleet/provider.h"
#include "fuzz.h"

static const uint8_t *g_lo, *g_hi;

static void in_input(struct bf_prov_bytes b)
{
    if (b.len == 0)
        return;
    FUZZ_CHECK(b.p >= g_lo && b.p + b.len <= g_hi);
}

static void in_machine(const struct bf_prov_machine *m, struct bf_prov_bytes b)
{
    if (b.len)
        FUZZ_CHECK(b.p >= m->buf && b.p + b.len <= m->buf + m->len);
}

static uint32_t count_map(const struct bf_prov_machine *m, enum bf_prov_map_which w, uint8_t **out,
                          size_t *outlen, size_t *cap)
{
    struct bf_prov_map_iter it;
    struct bf_prov_bytes k, v;
    uint32_t n = 0;
    int rc;
    bf_prov_map_iter_init(&it, m, w);
    while ((rc = bf_prov_map_next(&it, &k, &v)) == 1) {
        in_machine(m, k);
        in_machine(m, v);
        n++;
        if (out) { /* re-encode this entry (key 1, value 2, empty omitted) */
            size_t body =
                (k.len ? bf_pb_ld_len(1, k.len) : 0) + (v.len ? bf_pb_ld_len(2, v.len) : 0);
            size_t need = bf_pb_ld_len(1, body);
            if (*outlen + need > *cap) {
                *cap = (*outlen + need) * 2;
                *out = realloc(*out, *cap);
                FUZZ_CHECK(*out);
            }
            uint8_t *p = *out + *outlen;
            p = bf_pb_put_ld_header(p, 1, body);
            if (k.len)
                p = bf_pb_put_ld(p, 1, k.p, k.len);
            if (v.len)
                p = bf_pb_put_ld(p, 2, v.p, v.len);
            *outlen = (size_t)(p - *out);
        }
    }
    FUZZ_CHECK(rc == 0);
    return n;
}

/* The known fields of a decoded view, re-encoded in number order. */
static uint8_t *encode_view(const struct bf_prov_machine *m, size_t *len)
{
    size_t cap = 256 + 2 * m->len, n = 0;
    uint8_t *b = malloc(cap), *p = b;
    FUZZ_CHECK(b);
    p = m->id.len ? bf_pb_put_ld(p, 1, m->id.p, m->id.len) : p;
    if (m->state)
        p = bf_pb_put_varint_field(p, 2, (uint64_t)(int64_t)m->state);
    if (m->has_host) {
        size_t hb = (m->host_provider.len ? bf_pb_ld_len(1, m->host_provider.len) : 0) +
                    (m->host_ref.len ? bf_pb_ld_len(2, m->host_ref.len) : 0);
        p = bf_pb_put_ld_header(p, 3, hb);
        if (m->host_provider.len)
            p = bf_pb_put_ld(p, 1, m->host_provider.p, m->host_provider.len);
        if (m->host_ref.len)
            p = bf_pb_put_ld(p, 2, m->host_ref.p, m->host_ref.len);
    }
    p = m->instance_type.len ? bf_pb_put_ld(p, 4, m->instance_type.p, m->instance_type.len) : p;
    p = m->zone.len ? bf_pb_put_ld(p, 5, m->zone.p, m->zone.len) : p;
    if (m->capacity_type)
        p = bf_pb_put_varint_field(p, 6, (uint64_t)(int64_t)m->capacity_type);
    uint64_t u;
    memcpy(&u, &m->price_per_hour, 8);
    if (u)
        p = bf_pb_put_double(p, 7, m->price_per_hour);
    memcpy(&u, &m->interruption_probability, 8);
    if (u)
        p = bf_pb_put_double(p, 8, m->interruption_probability);
    n = (size_t)(p - b);
    /* resources (9) and allocatable (13) are Resources{1: entries}, labels 10, metadata 15 */
    static const struct {
        enum bf_prov_map_which w;
        uint32_t field;
        bool nested;
    } maps[] = {{BF_PROV_MAP_RESOURCES, 9, true},
                {BF_PROV_MAP_LABELS, 10, false},
                {BF_PROV_MAP_ALLOCATABLE, 13, true},
                {BF_PROV_MAP_METADATA, 15, false}};
    for (size_t i = 0; i < 4; i++) {
        uint8_t *e = NULL;
        size_t el = 0, ec = 0;
        count_map(m, maps[i].w, &e, &el, &ec);
        if (maps[i].nested) {
            if (!el) { /* no entries: the view cannot tell an empty Resources from none */
                free(e);
                continue;
            }
            size_t need = bf_pb_ld_len(maps[i].field, el);
            if (n + need > cap) {
                cap = (n + need) * 2;
                b = realloc(b, cap);
                FUZZ_CHECK(b);
            }
            p = bf_pb_put_ld(b + n, maps[i].field, e, el);
        } else {
            /* entries were written with tag 1: rewrite each with the map's field number */
            struct bf_pb_reader r;
            struct bf_pb_field f;
            if (n + 2 * el + 16 > cap) {
                cap = (n + 2 * el + 16) * 2;
                b = realloc(b, cap);
                FUZZ_CHECK(b);
            }
            p = b + n;
            bf_pb_reader_init(&r, e, el);
            while (bf_pb_next(&r, &f) == 1)
                p = bf_pb_put_ld(p, maps[i].field, f.p, f.len);
        }
        n = (size_t)(p - b);
        free(e);
        if (maps[i].field == 10) { /* 12 last_error goes between labels and allocatable */
            if (n + m->last_error.len + 16 > cap) {
                cap = (n + m->last_error.len + 16) * 2;
                b = realloc(b, cap);
                FUZZ_CHECK(b);
            }
            p = b + n;
            p = m->last_error.len ? bf_pb_put_ld(p, 12, m->last_error.p, m->last_error.len) : p;
            n = (size_t)(p - b);
        }
        if (maps[i].field == 13) {
            if (n + m->cluster.len + 16 > cap) {
                cap = (n + m->cluster.len + 16) * 2;
                b = realloc(b, cap);
                FUZZ_CHECK(b);
            }
            p = b + n;
            p = m->cluster.len ? bf_pb_put_ld(p, 14, m->cluster.p, m->cluster.len) : p;
            n = (size_t)(p - b);
        }
    }
    *len = n;
    return b;
}

static bool same_bytes(struct bf_prov_bytes a, struct bf_prov_bytes b)
{
    return a.len == b.len && (a.len == 0 || memcmp(a.p, b.p, a.len) == 0);
}

static void check_machine(const uint8_t *data, size_t size)
{
    struct bf_prov_machine m, m2;
    int rc = bf_prov_machine_decode(data, size, &m);
    FUZZ_CHECK(rc == 0 || rc == -EBADMSG);
    FUZZ_CHECK(bf_prov_machine_decode(data, size, &m2) == rc);
    /* the reconciler's peek: never stricter than the decoder, same id and state */
    struct bf_prov_bytes pid;
    int32_t pstate;
    int prc = bf_prov_machine_peek(data, size, &pid, &pstate);
    FUZZ_CHECK(prc == 0 || prc == -EBADMSG);
    if (prc == 0)
        in_input(pid);
    if (rc == 0) {
        FUZZ_CHECK(prc == 0 && pstate == m.state && pid.len == m.id.len &&
                   (pid.len == 0 || pid.p == m.id.p));
    }
    if (rc)
        return;
    FUZZ_CHECK(memcmp(&m, &m2, sizeof m) == 0);
    struct bf_prov_bytes s[] = {m.id,   m.host_provider, m.host_ref, m.instance_type,
                                m.zone, m.last_error,    m.cluster};
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++)
        in_input(s[i]);
    FUZZ_CHECK(count_map(&m, BF_PROV_MAP_RESOURCES, NULL, NULL, NULL) == m.n_resources);
    FUZZ_CHECK(count_map(&m, BF_PROV_MAP_LABELS, NULL, NULL, NULL) == m.n_labels);
    FUZZ_CHECK(count_map(&m, BF_PROV_MAP_ALLOCATABLE, NULL, NULL, NULL) == m.n_allocatable);
    FUZZ_CHECK(count_map(&m, BF_PROV_MAP_METADATA, NULL, NULL, NULL) == m.n_metadata);
    char why[256];
    int verdict = bf_prov_machine_check(&m, why, sizeof why);
    (void)verdict;
    /* decode -> encode -> decode */
    size_t el;
    uint8_t *enc = encode_view(&m, &el);
    struct bf_prov_machine d;
    FUZZ_CHECK(bf_prov_machine_decode(enc, el, &d) == 0);
    FUZZ_CHECK(same_bytes(d.id, m.id) && same_bytes(d.instance_type, m.instance_type) &&
               same_bytes(d.zone, m.zone) && same_bytes(d.last_error, m.last_error) &&
               same_bytes(d.cluster, m.cluster) && same_bytes(d.host_provider, m.host_provider) &&
               same_bytes(d.host_ref, m.host_ref));
    FUZZ_CHECK(d.state == m.state && d.capacity_type == m.capacity_type &&
               d.has_host == m.has_host);
    FUZZ_CHECK(memcmp(&d.price_per_hour, &m.price_per_hour, 8) == 0 &&
               memcmp(&d.interruption_probability, &m.interruption_probability, 8) == 0);
    FUZZ_CHECK(d.n_labels == m.n_labels && d.n_metadata == m.n_metadata);
    /* Resources entries of several occurrences merge into one message */
    FUZZ_CHECK(d.n_resources == m.n_resources && d.n_allocatable == m.n_allocatable);
    /* the re-encoding is a fixed point */
    size_t el2;
    uint8_t *enc2 = encode_view(&d, &el2);
    FUZZ_CHECK(el2 == el && memcmp(enc, enc2, el) == 0);
    FUZZ_CHECK(bf_prov_machine_decode(enc2, el2, &m2) == 0);
    FUZZ_CHECK(m2.shape_hash[0] == d.shape_hash[0] && m2.shape_hash[1] == d.shape_hash[1]);
    free(enc);
    free(enc2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    g_lo = data;
    g_hi = data + size;
    check_machine(data, size);

    struct bf_prov_list l;
    int rc = bf_prov_list_decode(data, size, &l);
    FUZZ_CHECK(rc == 0 || rc == -EBADMSG);
    if (rc == 0) {
        in_input(l.revision);
        struct bf_prov_list_iter it;
        struct bf_prov_bytes mb;
        uint32_t n = 0;
        bf_prov_list_iter_init(&it, &l);
        while ((rc = bf_prov_list_next(&it, &mb)) == 1) {
            in_input(mb);
            struct bf_prov_machine m;
            int mrc = bf_prov_machine_decode(mb.p, mb.len, &m);
            FUZZ_CHECK(mrc == 0 || mrc == -EBADMSG); /* one bad record, not a bad list */
            n++;
        }
        FUZZ_CHECK(rc == 0 && n == l.n_machines);
    }

    struct bf_prov_ack a;
    rc = bf_prov_ack_decode(data, size, &a);
    FUZZ_CHECK(rc == 0 || rc == -EBADMSG);
    if (rc == 0) {
        in_input(a.operation_id);
        if (a.has_machine)
            in_input(a.machine.id);
    }
    return 0;
}
