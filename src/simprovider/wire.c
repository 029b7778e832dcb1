/*
 * wire.c — protobuf wire format for the simulated provider: byte-exact
 * decoders of the six request messages and a fast encoder of Machine.
 *
 * Design notes:
 *   - Decoders borrow from the input buffer and keep every string as
 *     (pointer, length), so a NUL inside machine_id, cluster_id or a
 *     shard_metadata key survives (protobuf-c's char * fields cannot carry
 *     it). They run on the protobuf wire reader (bigfleet/pbwire.h). Unknown
 *     fields are skipped (reserved numbers included: older peers may still
 *     send them); a known field with the wrong wire type, a truncated varint
 *     or length, or a group wire type is malformed (-EBADMSG).
 *     Scalars seen twice: the last wins; ListFilter.states is accepted packed
 *     and unpacked (wire.md §12).
 *   - The Machine encoder writes exactly the bytes protobuf-c 1.4 packs for
 *     the same message (proto3: zero scalars, empty strings and NULL
 *     sub-messages omitted; map entries omit an empty key or value; fields in
 *     number order), with the writer of bigfleet/pbwire.h. The parts that depend only on (instance
 * type, rack) — fields 4 to 10 — and on the type — field 13 — are built once and copied;
 *     shard_metadata is pre-encoded per interned map. test_simprovider_wire
 *     checks the identity against protobuf-c over a seeded pool.
 *   - bf_sim_machine_pb() builds the protobuf-c struct of a machine (the
 *     reference the identity test packs, and a convenience for tools).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/strbuf.h"
#include "simprovider/sim_internal.h"

/* ------------------------------------------------------------ labels */

struct labels {
    const char *k[5];
    const char *v[5];
    int n;
};

static void labels_of(const struct bf_sim *s, uint32_t type, uint32_t rack, struct labels *l)
{
    const struct sim_type *st = &s->types[type];
    l->n = 0;
    l->k[l->n] = BF_LABEL_INSTANCE_TYPE;
    l->v[l->n++] = st->t.name;
    l->k[l->n] = BF_LABEL_ZONE;
    l->v[l->n++] = sim_str(&s->zones, s->rack_zone[rack]);
    l->k[l->n] = BF_SIM_LABEL_RACK;
    l->v[l->n++] = sim_str(&s->racks, rack);
    if (st->t.gpus > 0) {
        if (st->t.gpu_model[0]) {
            l->k[l->n] = BF_SIM_LABEL_GPU_MODEL;
            l->v[l->n++] = st->t.gpu_model;
        }
        l->k[l->n] = BF_SIM_LABEL_GPU_COUNT;
        l->v[l->n++] = st->gpu_n;
    }
}

static size_t entry_body_len(const char *k, const char *v)
{
    size_t kl = strlen(k), vl = strlen(v);
    return (kl ? bf_pb_ld_len(1, kl) : 0) + (vl ? bf_pb_ld_len(2, vl) : 0);
}

static uint8_t *put_str_entry(uint8_t *p, uint32_t field, const char *k, const char *v)
{
    size_t kl = strlen(k), vl = strlen(v);
    p = bf_pb_put_ld_header(p, field, entry_body_len(k, v));
    if (kl)
        p = bf_pb_put_ld(p, 1, k, kl);
    if (vl)
        p = bf_pb_put_ld(p, 2, v, vl);
    return p;
}

/* ------------------------------------------------------------ static chunks */

int bf_sim_chunks_ensure(struct bf_sim *s, uint32_t type, uint32_t rack)
{
    size_t nr = s->racks.n;
    if (!s->chunks || s->chunks_racks < nr) {
        struct sim_chunk *c = calloc(s->n_types * nr, sizeof *c);
        if (!c)
            return -ENOMEM;
        if (s->chunks) {
            for (size_t t = 0; t < s->n_types; t++)
                for (size_t r = 0; r < s->chunks_racks; r++)
                    c[t * nr + r] = s->chunks[t * s->chunks_racks + r];
            free(s->chunks);
        }
        s->chunks = c;
        s->chunks_racks = nr;
    }
    if (!s->alloc_chunks) {
        s->alloc_chunks = calloc(s->n_types, sizeof *s->alloc_chunks);
        if (!s->alloc_chunks)
            return -ENOMEM;
    }
    struct sim_type *st = &s->types[type];
    struct sim_chunk *ac = &s->alloc_chunks[type];
    if (!ac->p) {
        size_t n = bf_pb_ld_len(13, st->res_len);
        ac->p = malloc(n);
        if (!ac->p)
            return -ENOMEM;
        bf_pb_put_ld(ac->p, 13, st->res_body, st->res_len);
        ac->len = (uint32_t)n;
    }
    struct sim_chunk *c = &s->chunks[(size_t)type * s->chunks_racks + rack];
    if (c->p)
        return 0;
    const char *zone = sim_str(&s->zones, s->rack_zone[rack]);
    struct labels l;
    labels_of(s, type, rack, &l);
    size_t n = bf_pb_ld_len(4, strlen(st->t.name)) + bf_pb_ld_len(5, strlen(zone));
    if (st->t.capacity_type)
        n += 1 + bf_pb_varint_len(st->t.capacity_type);
    if (st->t.price_per_hour != 0)
        n += 9;
    if (st->t.interruption_probability != 0)
        n += 9;
    n += bf_pb_ld_len(9, st->res_len);
    for (int i = 0; i < l.n; i++)
        n += bf_pb_ld_len(10, entry_body_len(l.k[i], l.v[i]));
    uint8_t *p = malloc(n), *q = p;
    if (!p)
        return -ENOMEM;
    q = bf_pb_put_ld(q, 4, st->t.name, strlen(st->t.name));
    q = bf_pb_put_ld(q, 5, zone, strlen(zone));
    if (st->t.capacity_type) {
        q = bf_pb_put_varint_field(q, 6, st->t.capacity_type);
    }
    if (st->t.price_per_hour != 0)
        q = bf_pb_put_double(q, 7, st->t.price_per_hour);
    if (st->t.interruption_probability != 0)
        q = bf_pb_put_double(q, 8, st->t.interruption_probability);
    q = bf_pb_put_ld(q, 9, st->res_body, st->res_len);
    for (int i = 0; i < l.n; i++)
        q = put_str_entry(q, 10, l.k[i], l.v[i]);
    c->p = p;
    c->len = (uint32_t)(q - p);
    return 0;
}

void bf_sim_chunks_free(struct bf_sim *s)
{
    if (s->chunks) {
        for (size_t i = 0; i < s->n_types * s->chunks_racks; i++)
            free(s->chunks[i].p);
        free(s->chunks);
    }
    if (s->alloc_chunks) {
        for (size_t i = 0; i < s->n_types; i++)
            free(s->alloc_chunks[i].p);
        free(s->alloc_chunks);
    }
    s->chunks = NULL;
    s->alloc_chunks = NULL;
    s->chunks_racks = 0;
}

/* ------------------------------------------------------------ metadata encoding */

int bf_sim_md_encode(struct sim_md *md)
{
    size_t n = 0, off = 0;
    while (off < md->raw_len) {
        uint32_t kl, vl;
        memcpy(&kl, md->raw + off, 4);
        off += 4 + kl;
        memcpy(&vl, md->raw + off, 4);
        off += 4 + vl;
        size_t body = (kl ? bf_pb_ld_len(1, kl) : 0) + (vl ? bf_pb_ld_len(2, vl) : 0);
        n += bf_pb_ld_len(15, body);
    }
    md->enc = malloc(n ? n : 1);
    if (!md->enc)
        return -ENOMEM;
    uint8_t *p = md->enc;
    off = 0;
    while (off < md->raw_len) {
        uint32_t kl, vl;
        memcpy(&kl, md->raw + off, 4);
        const uint8_t *k = md->raw + off + 4;
        off += 4 + kl;
        memcpy(&vl, md->raw + off, 4);
        const uint8_t *v = md->raw + off + 4;
        off += 4 + vl;
        size_t body = (kl ? bf_pb_ld_len(1, kl) : 0) + (vl ? bf_pb_ld_len(2, vl) : 0);
        p = bf_pb_put_ld_header(p, 15, body);
        if (kl)
            p = bf_pb_put_ld(p, 1, k, kl);
        if (vl)
            p = bf_pb_put_ld(p, 2, v, vl);
    }
    md->enc_len = (size_t)(p - md->enc);
    return 0;
}

/* ------------------------------------------------------------ machine encoder */

/* "i-" + 17 lower-case hex digits of the host serial. */
static size_t host_ref(uint64_t serial, char out[24])
{
    static const char hex[] = "0123456789abcdef";
    out[0] = 'i';
    out[1] = '-';
    for (int i = 0; i < 17; i++) {
        int shift = (16 - i) * 4;
        out[2 + i] = shift >= 64 ? '0' : hex[(serial >> shift) & 15];
    }
    out[19] = 0;
    return 19;
}

static size_t host_body_len(const struct bf_sim *s)
{
    return (s->provider_len ? bf_pb_ld_len(1, s->provider_len) : 0) + bf_pb_ld_len(2, 19);
}

/* Whether bf_sim_chunks_ensure(s, type, rack) has nothing to do: asked
 * once per listed machine (500K a resync walk), so checked inline. */
static inline bool chunks_ready(const struct bf_sim *s, uint32_t type, uint32_t rack)
{
    return s->chunks && s->chunks_racks >= s->racks.n && s->alloc_chunks &&
           s->alloc_chunks[type].p && s->chunks[(size_t)type * s->chunks_racks + rack].p;
}

size_t bf_sim_machine_size(struct bf_sim *s, uint32_t i)
{
    const struct sim_machine *m = &s->m[i];
    if (!chunks_ready(s, m->type, m->rack) && bf_sim_chunks_ensure(s, m->type, m->rack))
        return 0;
    size_t n = bf_pb_ld_len(1, sim_midlen(s, i)) + 1 + bf_pb_varint_len(m->state);
    if (m->host)
        n += bf_pb_ld_len(3, host_body_len(s)) + s->alloc_chunks[m->type].len;
    n += s->chunks[(size_t)m->type * s->chunks_racks + m->rack].len;
    if (m->err)
        n += bf_pb_ld_len(12, sim_strlen(&s->errors, m->err));
    if (m->cluster)
        n += bf_pb_ld_len(14, sim_strlen(&s->clusters, m->cluster));
    if (m->md)
        n += s->md.v[m->md].enc_len;
    return n;
}

/* The caller sized the buffer with bf_sim_machine_size() (which built the chunks). */
uint8_t *bf_sim_machine_write(struct bf_sim *s, uint32_t i, uint8_t *p)
{
    const struct sim_machine *m = &s->m[i];
    p = bf_pb_put_ld(p, 1, sim_mid(s, i), sim_midlen(s, i));
    p = bf_pb_put_varint_field(p, 2, m->state);
    if (m->host) {
        char ref[24];
        size_t rl = host_ref(m->host, ref);
        size_t pl = s->provider_len;
        p = bf_pb_put_ld_header(p, 3, host_body_len(s));
        if (pl)
            p = bf_pb_put_ld(p, 1, s->provider, pl);
        p = bf_pb_put_ld(p, 2, ref, rl);
    }
    const struct sim_chunk *c = &s->chunks[(size_t)m->type * s->chunks_racks + m->rack];
    memcpy(p, c->p, c->len);
    p += c->len;
    if (m->err)
        p = bf_pb_put_ld(p, 12, sim_str(&s->errors, m->err), sim_strlen(&s->errors, m->err));
    if (m->host) {
        const struct sim_chunk *ac = &s->alloc_chunks[m->type];
        memcpy(p, ac->p, ac->len);
        p += ac->len;
    }
    if (m->cluster)
        p = bf_pb_put_ld(p, 14, sim_str(&s->clusters, m->cluster),
                         sim_strlen(&s->clusters, m->cluster));
    if (m->md) {
        const struct sim_md *md = &s->md.v[m->md];
        memcpy(p, md->enc, md->enc_len);
        p += md->enc_len;
    }
    return p;
}

/* ------------------------------------------------------------ protobuf-c reference */

struct sim_pb_machine {
    Bigfleet__V1alpha1__Machine m;
    Bigfleet__V1alpha1__HostRef host;
    Bigfleet__V1alpha1__Resources res, alloc;
    Bigfleet__V1alpha1__Resources__ResourcesEntry re[3];
    Bigfleet__V1alpha1__Resources__ResourcesEntry *rep[3];
    Bigfleet__V1alpha1__Machine__LabelsEntry le[5];
    Bigfleet__V1alpha1__Machine__LabelsEntry *lep[5];
    Bigfleet__V1alpha1__Machine__ShardMetadataEntry *mde;
    Bigfleet__V1alpha1__Machine__ShardMetadataEntry **mdep;
    char *keys;
    char hostref[24];
};

struct sim_pb_machine *bf_sim_machine_pb(struct bf_sim *s, uint32_t i)
{
    const struct sim_machine *m = &s->m[i];
    struct sim_type *st = &s->types[m->type];
    struct sim_pb_machine *pm = calloc(1, sizeof *pm);
    if (!pm)
        return NULL;
    Bigfleet__V1alpha1__Machine init = BIGFLEET__V1ALPHA1__MACHINE__INIT;
    pm->m = init;
    pm->m.id = (char *)sim_mid(s, i);
    pm->m.state = (Bigfleet__V1alpha1__MachineState)m->state;
    if (m->host) {
        Bigfleet__V1alpha1__HostRef hi = BIGFLEET__V1ALPHA1__HOST_REF__INIT;
        pm->host = hi;
        pm->host.provider = s->provider;
        host_ref(m->host, pm->hostref);
        pm->host.ref = pm->hostref;
        pm->m.host = &pm->host;
    }
    pm->m.instance_type = st->t.name;
    pm->m.zone = (char *)sim_str(&s->zones, s->rack_zone[m->rack]);
    pm->m.capacity_type = (Bigfleet__V1alpha1__CapacityType)st->t.capacity_type;
    pm->m.price_per_hour = st->t.price_per_hour;
    pm->m.interruption_probability = st->t.interruption_probability;
    Bigfleet__V1alpha1__Resources ri = BIGFLEET__V1ALPHA1__RESOURCES__INIT;
    Bigfleet__V1alpha1__Resources__ResourcesEntry rei =
        BIGFLEET__V1ALPHA1__RESOURCES__RESOURCES_ENTRY__INIT;
    size_t nr = 0;
    const char *rk[3] = {"cpu", "memory", BF_SIM_RESOURCE_GPU};
    char *rv[3] = {st->cpu_q, st->mem_q, st->gpu_q};
    for (size_t k = 0; k < (st->t.gpus > 0 ? 3u : 2u); k++) {
        pm->re[k] = rei;
        pm->re[k].key = (char *)rk[k];
        pm->re[k].value = rv[k];
        pm->rep[k] = &pm->re[k];
        nr++;
    }
    pm->res = ri;
    pm->res.n_resources = nr;
    pm->res.resources = pm->rep;
    pm->m.resources = &pm->res;
    if (m->host) {
        pm->alloc = pm->res; /* same shape */
        pm->m.allocatable = &pm->alloc;
    }
    struct labels l;
    labels_of(s, m->type, m->rack, &l);
    Bigfleet__V1alpha1__Machine__LabelsEntry lei = BIGFLEET__V1ALPHA1__MACHINE__LABELS_ENTRY__INIT;
    for (int k = 0; k < l.n; k++) {
        pm->le[k] = lei;
        pm->le[k].key = (char *)l.k[k];
        pm->le[k].value = (char *)l.v[k];
        pm->lep[k] = &pm->le[k];
    }
    pm->m.n_labels = (size_t)l.n;
    pm->m.labels = pm->lep;
    if (m->err)
        pm->m.last_error = (char *)sim_str(&s->errors, m->err);
    if (m->cluster)
        pm->m.cluster = (char *)sim_str(&s->clusters, m->cluster);
    if (m->md) {
        const struct sim_md *md = &s->md.v[m->md];
        pm->mde = calloc(md->n, sizeof *pm->mde);
        pm->mdep = calloc(md->n, sizeof *pm->mdep);
        pm->keys = malloc(md->raw_len + md->n + 1);
        if (!pm->mde || !pm->mdep || !pm->keys) {
            bf_sim_machine_pb_free(pm);
            return NULL;
        }
        Bigfleet__V1alpha1__Machine__ShardMetadataEntry mi =
            BIGFLEET__V1ALPHA1__MACHINE__SHARD_METADATA_ENTRY__INIT;
        size_t off = 0, ko = 0;
        for (uint32_t k = 0; k < md->n; k++) {
            uint32_t kl, vl;
            memcpy(&kl, md->raw + off, 4);
            memcpy(pm->keys + ko, md->raw + off + 4, kl);
            pm->keys[ko + kl] = 0;
            off += 4 + kl;
            memcpy(&vl, md->raw + off, 4);
            pm->mde[k] = mi;
            pm->mde[k].key = pm->keys + ko;
            pm->mde[k].value.data = (uint8_t *)md->raw + off + 4;
            pm->mde[k].value.len = vl;
            pm->mdep[k] = &pm->mde[k];
            off += 4 + vl;
            ko += kl + 1;
        }
        pm->m.n_shard_metadata = md->n;
        pm->m.shard_metadata = pm->mdep;
    }
    return pm;
}

Bigfleet__V1alpha1__Machine *bf_sim_machine_pb_msg(struct sim_pb_machine *pm)
{
    return &pm->m;
}

void bf_sim_machine_pb_free(struct sim_pb_machine *pm)
{
    if (!pm)
        return;
    free(pm->mde);
    free(pm->mdep);
    free(pm->keys);
    free(pm);
}

/* ------------------------------------------------------------ reader */

static struct bf_sim_bytes bytes_of(const struct bf_pb_field *f)
{
    struct bf_sim_bytes b = {f->p, f->len};
    return b;
}

enum slot { S_NONE, S_ID, S_SHARD, S_EPOCH, S_SEQ, S_CLUSTER, S_BLOB, S_MD, S_GRACE };

/* field number -> slot, per lifecycle kind (wire.md §4) */
static enum slot slot_of(int kind, uint32_t f)
{
    switch (kind) {
    case BF_SIM_RPC_CREATE: /* 1 id, 3 shard, 4 epoch, 5 seq */
        return f == 1 ? S_ID : f == 3 ? S_SHARD : f == 4 ? S_EPOCH : f == 5 ? S_SEQ : S_NONE;
    case BF_SIM_RPC_CONFIGURE: /* 1 id, 2 cluster, 3 blob, 4 shard, 5 epoch, 6 seq, 7 md */
        return f == 1   ? S_ID
               : f == 2 ? S_CLUSTER
               : f == 3 ? S_BLOB
               : f == 4 ? S_SHARD
               : f == 5 ? S_EPOCH
               : f == 6 ? S_SEQ
               : f == 7 ? S_MD
                        : S_NONE;
    case BF_SIM_RPC_DRAIN: /* 1 id, 2 grace, 3 shard, 4 epoch, 5 seq */
        return f == 1   ? S_ID
               : f == 2 ? S_GRACE
               : f == 3 ? S_SHARD
               : f == 4 ? S_EPOCH
               : f == 5 ? S_SEQ
                        : S_NONE;
    case BF_SIM_RPC_DELETE: /* 1 id, 2 shard, 3 epoch, 4 seq */
        return f == 1 ? S_ID : f == 2 ? S_SHARD : f == 3 ? S_EPOCH : f == 4 ? S_SEQ : S_NONE;
    default:
        return S_NONE;
    }
}

static int rd_md_entry(struct bf_sim_bytes e, struct bf_sim_md_entry *out)
{
    struct bf_pb_reader r;
    struct bf_pb_field f;
    int rc;
    memset(out, 0, sizeof *out);
    bf_pb_reader_init(&r, e.p, e.len);
    while ((rc = bf_pb_next(&r, &f)) == 1) {
        if (f.num != 1 && f.num != 2)
            continue;
        if (f.wt != BF_PB_LEN)
            return -EBADMSG;
        if (f.num == 1)
            out->key = bytes_of(&f);
        else
            out->value = bytes_of(&f);
    }
    return rc ? -EBADMSG : 0;
}

int bf_sim_decode_lifecycle(int kind, const uint8_t *p, size_t len, struct bf_sim_request *q,
                            struct bf_sim_md_entry **md_out)
{
    memset(q, 0, sizeof *q);
    q->kind = kind;
    *md_out = NULL;
    struct bf_sim_md_entry *md = NULL;
    size_t n_md = 0, cap_md = 0;
    struct bf_pb_reader r;
    struct bf_pb_field f;
    int rc;
    bf_pb_reader_init(&r, p, len);
    while ((rc = bf_pb_next(&r, &f)) == 1) {
        enum slot sl = slot_of(kind, f.num);
        switch (sl) {
        case S_NONE:
            break; /* unknown or reserved: skipped */
        case S_ID:
        case S_SHARD:
        case S_CLUSTER:
        case S_BLOB:
        case S_MD:
            if (f.wt != BF_PB_LEN)
                goto bad;
            if (sl == S_ID)
                q->machine_id = bytes_of(&f);
            else if (sl == S_SHARD)
                q->shard_id = bytes_of(&f);
            else if (sl == S_CLUSTER)
                q->cluster_id = bytes_of(&f);
            else if (sl == S_BLOB)
                q->bootstrap_blob_len = f.len;
            else {
                if (n_md == cap_md && bf_grow((void **)&md, &cap_md, n_md + 1, sizeof *md)) {
                    free(md);
                    return -ENOMEM;
                }
                if (rd_md_entry(bytes_of(&f), &md[n_md]))
                    goto bad;
                n_md++;
            }
            break;
        case S_EPOCH:
        case S_SEQ:
        case S_GRACE:
            if (f.wt != BF_PB_VARINT)
                goto bad;
            if (sl == S_EPOCH)
                q->shard_epoch = (int64_t)f.varint;
            else if (sl == S_SEQ)
                q->sequence_number = (int64_t)f.varint;
            else
                q->grace_period_seconds = (int64_t)f.varint;
            break;
        }
    }
    if (rc)
        goto bad;
    q->metadata = md;
    q->n_metadata = n_md;
    *md_out = md;
    return 0;
bad:
    free(md);
    return -EBADMSG;
}

int bf_sim_decode_ref(const uint8_t *p, size_t len, struct bf_sim_bytes *id)
{
    struct bf_pb_reader r;
    struct bf_pb_field f;
    int rc;
    memset(id, 0, sizeof *id);
    bf_pb_reader_init(&r, p, len);
    while ((rc = bf_pb_next(&r, &f)) == 1) {
        if (f.num != 1)
            continue;
        if (f.wt != BF_PB_LEN)
            return -EBADMSG;
        *id = bytes_of(&f);
    }
    return rc ? -EBADMSG : 0;
}

static void list_state(struct bf_sim_list_args *a, uint64_t v)
{
    int32_t s = (int32_t)(uint32_t)v;
    if (s >= BF_STATE_SPECULATIVE && s <= BF_STATE_FAILED)
        a->state_mask |= 1u << s;
    else
        a->bad_state = true;
}

int bf_sim_decode_list(const uint8_t *p, size_t len, struct bf_sim_list_args *a)
{
    struct bf_pb_reader r;
    struct bf_pb_field f;
    int rc;
    memset(a, 0, sizeof *a);
    bf_pb_reader_init(&r, p, len);
    while ((rc = bf_pb_next(&r, &f)) == 1) {
        if (f.num == 1) {
            if (f.wt == BF_PB_VARINT) {
                list_state(a, f.varint);
            } else if (f.wt == BF_PB_LEN) { /* packed */
                struct bf_pb_reader pr;
                uint64_t v;
                int prc;
                bf_pb_reader_init(&pr, f.p, f.len);
                while ((prc = bf_pb_packed_next(&pr, &v)) == 1)
                    list_state(a, v);
                if (prc)
                    return -EBADMSG;
            } else {
                return -EBADMSG;
            }
        } else if (f.num == 4) {
            if (f.wt != BF_PB_VARINT)
                return -EBADMSG;
            a->max_results = (int32_t)(uint32_t)f.varint;
        } else if (f.num == 5) {
            if (f.wt != BF_PB_LEN)
                return -EBADMSG;
            a->since_revision = bytes_of(&f);
        }
    }
    return rc ? -EBADMSG : 0;
}
