/*
 * pool.c — the simulated provider's pool tables: machines (id index, zone
 * and rack names, the spot set), per-machine operation slots, fences, and
 * the dirty sets that store.c writes through to LMDB.
 *
 * Design notes. The bottom of the simulated provider: sim.c (the RPCs) and
 * store.c (LMDB load and write-through) both build on these primitives, so
 * the three files depend one way: sim.c -> store.c -> pool.c, and sim.c ->
 * pool.c (scripts/lint-includes). Nothing here does mutation bookkeeping
 * (revisions, the log, timers): that is sim.c's. Allocation failures return
 * UINT32_MAX / -ENOMEM and leave the tables as they were.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/strbuf.h"
#include "simprovider/sim_internal.h"

uint32_t bf_sim_find_machine(const struct bf_sim *s, const void *id, size_t len)
{
    /* machine i is ids entry i + 1; an absent id is entry 0 -> UINT32_MAX */
    return bf_sim_str_find(&s->ids, id, len) - 1;
}

uint32_t bf_sim_zone(struct bf_sim *s, const char *name, size_t len)
{
    return bf_sim_str_intern(&s->zones, name, len);
}

uint32_t bf_sim_rack(struct bf_sim *s, uint32_t zone, const char *name, size_t len)
{
    uint32_t had = (uint32_t)s->racks.n;
    uint32_t r = bf_sim_str_intern(&s->racks, name, len);
    if (r == UINT32_MAX || r < had)
        return r;
    if (bf_grow((void **)&s->rack_zone, &s->rack_zone_cap, (size_t)r + 1, sizeof *s->rack_zone))
        return UINT32_MAX;
    s->rack_zone[r] = zone;
    return r;
}

uint32_t bf_sim_type_by_name(const struct bf_sim *s, const char *name, size_t len)
{
    for (size_t t = 0; t < s->n_types; t++)
        if (strlen(s->types[t].t.name) == len && memcmp(s->types[t].t.name, name, len) == 0)
            return (uint32_t)t;
    return UINT32_MAX;
}

static bool spot_eligible(const struct bf_sim *s, const struct sim_machine *m)
{
    return s->types[m->type].t.capacity_type == BF_CT_SPOT &&
           (m->state == BF_STATE_IDLE || m->state == BF_STATE_CONFIGURED);
}

void bf_sim_spot_update(struct bf_sim *s, uint32_t i)
{
    if (!s->spot_pos)
        return;
    bool want = spot_eligible(s, &s->m[i]);
    int32_t pos = s->spot_pos[i];
    if (want && pos < 0) {
        s->spot_pos[i] = (int32_t)s->n_spot;
        s->spot_set[s->n_spot++] = i;
    } else if (!want && pos >= 0) {
        uint32_t last = s->spot_set[--s->n_spot];
        s->spot_set[pos] = last;
        s->spot_pos[last] = pos;
        s->spot_pos[i] = -1;
    }
}

int bf_sim_grow_machines(struct bf_sim *s, size_t want)
{
    if (want <= s->cap)
        return 0;
    size_t cap = s->cap ? s->cap : 1024;
    while (cap < want)
        cap *= 2;
    struct sim_machine *m = realloc(s->m, cap * sizeof *m);
    if (!m)
        return -ENOMEM;
    s->m = m;
    if (s->spot_pos) {
        int32_t *sp = realloc(s->spot_pos, cap * sizeof *sp);
        if (!sp)
            return -ENOMEM;
        s->spot_pos = sp;
        uint32_t *ss = realloc(s->spot_set, cap * sizeof *ss);
        if (!ss)
            return -ENOMEM;
        s->spot_set = ss;
    }
    s->cap = cap;
    return 0;
}

uint32_t bf_sim_add_machine(struct bf_sim *s, const char *id, size_t id_len, uint16_t type,
                            uint32_t rack, uint8_t state)
{
    if (s->n >= SIM_MAX_MACHINES || bf_sim_grow_machines(s, s->n + 1))
        return UINT32_MAX;
    uint32_t k = bf_sim_str_append(&s->ids, id, id_len);
    if (k == UINT32_MAX)
        return UINT32_MAX;
    uint32_t i = (uint32_t)s->n;
    struct sim_machine *m = &s->m[i];
    memset(m, 0, sizeof *m);
    m->type = type;
    m->rack = rack;
    m->state = state;
    if (s->spot_pos)
        s->spot_pos[i] = -1;
    s->count[state]++;
    s->n++;
    return i;
}

int bf_sim_ops_slot(struct bf_sim *s, uint32_t i)
{
    if (s->m[i].ops)
        return 0;
    if (s->n_ops == s->cap_ops &&
        bf_grow((void **)&s->ops, &s->cap_ops, s->n_ops + 1, sizeof *s->ops))
        return -ENOMEM;
    memset(s->ops[s->n_ops], 0, sizeof s->ops[0]);
    s->m[i].ops = (uint32_t)++s->n_ops;
    return 0;
}

void bf_sim_mark_dirty(struct bf_sim *s, uint32_t i)
{
    if (!s->store || (s->m[i].flags & SIM_F_DIRTY))
        return;
    if (s->n_dirty == s->cap_dirty &&
        bf_grow((void **)&s->dirty, &s->cap_dirty, s->n_dirty + 1, sizeof *s->dirty)) {
        s->dirty_all = true; /* flush writes every machine instead */
        return;
    }
    s->m[i].flags |= SIM_F_DIRTY;
    s->dirty[s->n_dirty++] = i;
}

void bf_sim_fence_mark_dirty(struct bf_sim *s, uint32_t f)
{
    s->meta_dirty = true;
    if (!s->store || s->fences[f].dirty)
        return;
    if (s->n_dirty_f == s->cap_dirty_f &&
        bf_grow((void **)&s->dirty_f, &s->cap_dirty_f, s->n_dirty_f + 1, sizeof *s->dirty_f)) {
        s->dirty_all = true;
        return;
    }
    s->fences[f].dirty = 1;
    s->dirty_f[s->n_dirty_f++] = f;
}

/* ------------------------------------------------------------ fences */

uint32_t bf_sim_fence_find(const struct bf_sim *s, uint32_t shard, uint32_t mref)
{
    return sim_fenceix_find(&s->fence_ix, sim_fence_hash(shard, mref), s,
                            (struct sim_fence_key){shard, mref});
}

uint32_t bf_sim_fence_put(struct bf_sim *s, uint32_t shard, uint32_t mref, int64_t epoch,
                          int64_t seq, uint64_t no)
{
    uint32_t f = bf_sim_fence_find(s, shard, mref);
    if (f == UINT32_MAX) {
        if (s->n_fences == s->cap_fences &&
            bf_grow((void **)&s->fences, &s->cap_fences, s->n_fences + 1, sizeof *s->fences))
            return UINT32_MAX;
        f = (uint32_t)s->n_fences;
        if (sim_fenceix_add(&s->fence_ix, sim_fence_hash(shard, mref), f, s))
            return UINT32_MAX;
        s->n_fences++;
        memset(&s->fences[f], 0, sizeof s->fences[f]);
        s->fences[f].shard = shard;
        s->fences[f].mref = mref;
        s->fences[f].no = no;
        if (no > s->next_fence_no)
            s->next_fence_no = no;
    }
    s->fences[f].epoch = epoch;
    s->fences[f].seq = seq;
    return f;
}
