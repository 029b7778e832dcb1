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
 *     accepts, with the same id slice and state, and refuses exactly the
 *     top-level faults the general reader finds (its inline fast paths);
 *   - an accepted MachineList counts what the general reader counts;
 *   - decoding is deterministic (twice -> identical view).
 */
#include "bigfleet/pbwire.h"
#include "bigfleet/provider.h"
#include "fuzz.h"
#include "provider_reference.h"

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

/* A growable output buffer for the re-encoder. */
struct obuf {
    uint8_t *b;
    size_t n, cap;
};

static uint8_t *room(struct obuf *o, size_t more)
{
    if (o->n + more > o->cap) {
        o->cap = (o->n + more) * 2;
        o->b = realloc(o->b, o->cap);
        FUZZ_CHECK(o->b);
    }
    return o->b + o->n;
}

static void put_str(struct obuf *o, uint32_t field, struct bf_prov_bytes s)
{
    if (s.len)
        o->n =
            (size_t)(bf_pb_put_ld(room(o, bf_pb_ld_len(field, s.len)), field, s.p, s.len) - o->b);
}

/* One map's entries, each as field `field`; nested (Resources{1: entry}) when asked. */
static void put_map(struct obuf *o, const struct bf_prov_machine *m, enum bf_prov_map_which w,
                    uint32_t field, bool nested)
{
    uint8_t *e = NULL;
    size_t el = 0, ec = 0;
    count_map(m, w, &e, &el, &ec);
    if (nested) {
        /* no entries: the view cannot tell an empty Resources from none */
        if (el)
            o->n = (size_t)(bf_pb_put_ld(room(o, bf_pb_ld_len(field, el)), field, e, el) - o->b);
    } else { /* entries were written with tag 1: rewrite each with the map's field number */
        struct bf_pb_reader r;
        struct bf_pb_field f;
        bf_pb_reader_init(&r, e, el);
        while (bf_pb_next(&r, &f) == 1)
            o->n = (size_t)(bf_pb_put_ld(room(o, bf_pb_ld_len(field, f.len)), field, f.p, f.len) -
                            o->b);
    }
    free(e);
}

/* The known fields of a decoded view, re-encoded in number order. */
static uint8_t *encode_view(const struct bf_prov_machine *m, size_t *len)
{
    struct obuf o = {0};
    put_str(&o, 1, m->id);
    if (m->state)
        o.n = (size_t)(bf_pb_put_varint_field(room(&o, 16), 2, (uint64_t)(int64_t)m->state) - o.b);
    if (m->has_host) {
        size_t hb = (m->host_provider.len ? bf_pb_ld_len(1, m->host_provider.len) : 0) +
                    (m->host_ref.len ? bf_pb_ld_len(2, m->host_ref.len) : 0);
        o.n = (size_t)(bf_pb_put_ld_header(room(&o, bf_pb_ld_len(3, hb)), 3, hb) - o.b);
        put_str(&o, 1, m->host_provider);
        put_str(&o, 2, m->host_ref);
    }
    put_str(&o, 4, m->instance_type);
    put_str(&o, 5, m->zone);
    if (m->capacity_type)
        o.n =
            (size_t)(bf_pb_put_varint_field(room(&o, 16), 6, (uint64_t)(int64_t)m->capacity_type) -
                     o.b);
    uint64_t u;
    memcpy(&u, &m->price_per_hour, 8);
    if (u)
        o.n = (size_t)(bf_pb_put_double(room(&o, 16), 7, m->price_per_hour) - o.b);
    memcpy(&u, &m->interruption_probability, 8);
    if (u)
        o.n = (size_t)(bf_pb_put_double(room(&o, 16), 8, m->interruption_probability) - o.b);
    /* resources (9) and allocatable (13) are Resources{1: entries}, labels 10, metadata 15 */
    put_map(&o, m, BF_PROV_MAP_RESOURCES, 9, true);
    put_map(&o, m, BF_PROV_MAP_LABELS, 10, false);
    put_str(&o, 12, m->last_error);
    put_map(&o, m, BF_PROV_MAP_ALLOCATABLE, 13, true);
    put_str(&o, 14, m->cluster);
    put_map(&o, m, BF_PROV_MAP_METADATA, 15, false);
    room(&o, 1); /* never NULL, even for an empty view */
    *len = o.n;
    return o.b;
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
    struct bf_prov_bytes rid;
    int32_t rstate;
    FUZZ_CHECK(reference_peek(data, size, &rid, &rstate) == prc);
    if (prc == 0)
        FUZZ_CHECK(rstate == pstate && rid.len == pid.len && (pid.len == 0 || rid.p == pid.p));
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
    {
        /* the List decoder's one-branch entry path against the general reader */
        struct bf_pb_reader r;
        struct bf_pb_field f;
        uint32_t rn = 0;
        int rrc;
        bf_pb_reader_init(&r, data, size);
        while ((rrc = bf_pb_next(&r, &f)) == 1) {
            if ((f.num == 1 || f.num == 2) && f.wt != BF_PB_LEN) {
                rrc = -EBADMSG;
                break;
            }
            rn += f.num == 1;
        }
        FUZZ_CHECK(rc == (rrc ? -EBADMSG : 0));
        if (rc == 0)
            FUZZ_CHECK(rn == l.n_machines);
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
