/*
 * merge.c — k-way merge of index leaves by (k1, k2, machine id).
 *
 * Every ordered walk of the engine (pools by price or effective cost, the
 * keep-priority credit and reclaim order, victims by score, id order) is a
 * merge of leaves whose machines share the sort keys k1/k2; ties are broken by
 * machine id (bytewise), which makes every order total and independent of
 * the order leaves happen to sit in their lists. A binary min-heap of cursors;
 * a single cursor needs no heap work.
 */
#include "cycle/engine/engine_internal.h"

int bfe_mcur_cmp(const struct bf_engine *e, const struct mcur *a, const struct mcur *b)
{
    if (a->k1 != b->k1)
        return a->k1 < b->k1 ? -1 : 1;
    if (a->k2 != b->k2)
        return a->k2 < b->k2 ? -1 : 1;
    return bfe_id_cmp(e, a->slot, b->slot);
}

void bfe_mcur_init(struct bf_engine *e, struct mcur *c, uint32_t li, uint32_t pos, double k1,
                   double k2)
{
    const struct leaf *l = &e->leaves[li];
    c->leaf = li;
    c->k1 = k1;
    c->k2 = k2;
    c->left = pos < l->sl.n ? l->sl.n - pos : 0;
    c->ci = c->off = 0;
    c->slot = NONE32;
    if (c->left) {
        bfe_sl_seek(&l->sl, pos, &c->ci, &c->off);
        c->slot = bfe_sl_at(&l->sl, c->ci, c->off);
    }
}

static void sift_down(struct merge *m, uint32_t i)
{
    struct mcur *h = m->h;
    uint32_t n = m->n;
    struct mcur x = h[i];
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && bfe_mcur_cmp(m->e, &h[c + 1], &h[c]) < 0)
            c++;
        if (bfe_mcur_cmp(m->e, &h[c], &x) >= 0)
            break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
}

void bfe_merge_init(struct merge *m, struct bf_engine *e, struct mcur *curs, uint32_t n)
{
    m->e = e;
    m->h = curs;
    /* drop empty cursors */
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++)
        if (curs[i].left)
            curs[k++] = curs[i];
    m->n = k;
    if (k > 1)
        for (uint32_t i = k / 2; i-- > 0;)
            sift_down(m, i);
}

bool bfe_merge_peek(const struct merge *m, uint32_t *slot, uint32_t *leaf, double *k1)
{
    if (!m->n)
        return false;
    if (slot)
        *slot = m->h[0].slot;
    if (leaf)
        *leaf = m->h[0].leaf;
    if (k1)
        *k1 = m->h[0].k1;
    return true;
}

bool bfe_merge_next(struct merge *m, uint32_t *slot, uint32_t *leaf)
{
    if (!m->n)
        return false;
    struct mcur *c = &m->h[0];
    *slot = c->slot;
    if (leaf)
        *leaf = c->leaf;
    if (--c->left == 0) {
        m->h[0] = m->h[--m->n];
    } else {
        const struct slotlist *sl = &m->e->leaves[c->leaf].sl;
        bfe_sl_step(sl, &c->ci, &c->off);
        c->slot = bfe_sl_at(sl, c->ci, c->off);
    }
    if (m->n > 1)
        sift_down(m, 0);
    return true;
}
