/*
 * model.c — from pods to CapacityRequests to rollups, and the replay clock.
 *
 * Mapping (docs/replay.md "Mapping"): one CapacityRequest per pod; its
 * request is {cpu: cpu_milli, memory: memory_mib Mi, nvidia.com/gpu:
 * num_gpu x gpu_milli milli-GPU} (a sharing pod asks for "460m" of a GPU);
 * its requirements are
 *   - gpu_spec "A|B"  -> nvidia.com/gpu.product In [A, B]
 *   - no GPUs         -> nvidia.com/gpu.product DoesNotExist
 *   - with a catalog  -> node.kubernetes.io/instance-type In [the catalog
 *                        types whose shape can host the pod]
 * and qos selects priority and the two penalties (rp_qos_table), bucketed
 * with bf_bucket_for_dollars exactly as the operator does (wire.md §9).
 *
 * A class is the aggregation key: the canonical profile's fingerprint
 * (wire.md §8; openb has no co-location, so the group is always empty).
 * Pods of a class aggregate into one Need per rollup: aggregate_resources is
 * the vector sum, min_unit the per-dimension maximum (engine.md §1.7). The
 * instance-type pin puts pods with different sets of fitting types into
 * different classes, so the folded min_unit of a class always fits every
 * type of its pin list (each member fits each type, hence so does the max).
 *
 * Initialisation: rp_model_build() once after the trace and the catalog are
 * loaded; everything after that is read-only and allocation-light (one
 * buffer per encoded rollup).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bigfleet/strbuf.h"
#include "bigfleet/v1alpha1/shard.pb-c.h"
#include "replay.h"

const char *const rp_dim_wire_name[RP_DIMS] = {"cpu", "memory", BF_SIM_RESOURCE_GPU};

/*
 * Priorities follow the shard's priority classes (shard.md §7: batch
 * 100–999, service 1000–999999). Penalties in dollars: what interrupting
 * (interruption) or taking back the machine of (reclamation) one pod costs
 * its owner; BE work is cheap to restart, LS/Guaranteed serving is not.
 */
const struct rp_qos_policy rp_qos_table[RP_QOS_COUNT] = {
    [RP_QOS_BE] = {"BE", 100, 2.0, 4.0},
    [RP_QOS_BURSTABLE] = {"Burstable", 1000, 512.0, 1024.0},
    [RP_QOS_LS] = {"LS", 10000, 4096.0, 8192.0},
    [RP_QOS_GUARANTEED] = {"Guaranteed", 20000, 8192.0, 16384.0},
};

int rp_qos_parse(const char *s, size_t len)
{
    for (int q = 0; q < RP_QOS_COUNT; q++) {
        const char *n = rp_qos_table[q].name;
        if (strlen(n) == len && !strncasecmp(n, s, len))
            return q;
    }
    return -1;
}

bool rp_type_fits(const struct rp_trace *t, const struct bf_sim_type *ty, const rp_res *r,
                  uint32_t spec)
{
    if (ty->cpu_milli < r->v[RP_CPU] || ty->memory_mib < r->v[RP_MEM] ||
        (int64_t)ty->gpus * 1000 < r->v[RP_GPU])
        return false;
    if (r->v[RP_GPU] == 0)
        return ty->gpus == 0;
    if (ty->gpus == 0)
        return false;
    if (spec == 0)
        return true;
    const struct rp_spec *sp = &t->specs[spec];
    for (uint32_t i = 0; i < sp->n; i++)
        if (!strcmp(sp->models[i], ty->gpu_model))
            return true;
    return false;
}

/* ------------------------------------------------------------ classes */

struct wire_reqs {
    size_t n;
    Bigfleet__V1alpha1__NodeSelectorRequirement *r;
    Bigfleet__V1alpha1__NodeSelectorRequirement **p;
};

static void class_free(struct rp_class *c)
{
    for (uint32_t i = 0; i < c->prof.n_reqs; i++) {
        free((char *)c->prof.reqs[i].key);
        for (uint32_t j = 0; j < c->prof.reqs[i].n_values; j++)
            free((char *)c->prof.reqs[i].values[j]);
        free(c->prof.reqs[i].values);
    }
    free(c->prof.reqs);
    free(c->fp);
    free(c->fit);
    struct wire_reqs *w = c->wire_reqs;
    if (w) {
        free(w->r);
        free(w->p);
        free(w);
    }
}

/* Deep copy of a canonical temporary profile into class c. */
static int class_fill(struct rp_class *c, const struct bf_need_profile *tmp, const char *fp,
                      const uint32_t *fit, uint32_t n_fit)
{
    c->prof = *tmp;
    c->prof.reqs = calloc(tmp->n_reqs ? tmp->n_reqs : 1, sizeof *c->prof.reqs);
    c->fp = strdup(fp);
    c->fit = malloc((n_fit ? n_fit : 1) * sizeof *c->fit);
    struct wire_reqs *w = calloc(1, sizeof *w);
    c->wire_reqs = w;
    if (!c->prof.reqs || !c->fp || !c->fit || !w)
        return -ENOMEM;
    c->prof.n_reqs = 0;
    for (uint32_t i = 0; i < tmp->n_reqs; i++) {
        struct bf_requirement *r = &c->prof.reqs[i];
        r->op = tmp->reqs[i].op;
        r->key = strdup(tmp->reqs[i].key);
        r->values = calloc(tmp->reqs[i].n_values ? tmp->reqs[i].n_values : 1, sizeof *r->values);
        c->prof.n_reqs++;
        if (!r->key || !r->values)
            return -ENOMEM;
        for (uint32_t j = 0; j < tmp->reqs[i].n_values; j++) {
            r->values[j] = strdup(tmp->reqs[i].values[j]);
            if (!r->values[j])
                return -ENOMEM;
            r->n_values++;
        }
    }
    memcpy(c->fit, fit, n_fit * sizeof *fit);
    c->n_fit = n_fit;
    w->n = c->prof.n_reqs;
    w->r = calloc(w->n ? w->n : 1, sizeof *w->r);
    w->p = calloc(w->n ? w->n : 1, sizeof *w->p);
    if (!w->r || !w->p)
        return -ENOMEM;
    for (size_t i = 0; i < w->n; i++) {
        Bigfleet__V1alpha1__NodeSelectorRequirement init =
            BIGFLEET__V1ALPHA1__NODE_SELECTOR_REQUIREMENT__INIT;
        w->r[i] = init;
        w->r[i].key = (char *)c->prof.reqs[i].key;
        w->r[i].operator_ =
            (Bigfleet__V1alpha1__NodeSelectorRequirement__Operator)c->prof.reqs[i].op;
        w->r[i].n_values = c->prof.reqs[i].n_values;
        w->r[i].values = (char **)c->prof.reqs[i].values;
        w->p[i] = &w->r[i];
    }
    return 0;
}

int rp_model_build(struct rp_model *m, struct rp_trace *t, const struct bf_sim_type *types,
                   size_t n_types, bool pin)
{
    memset(m, 0, sizeof *m);
    m->trace = t;
    m->types = types;
    m->n_types = types ? n_types : 0;
    m->pin = pin && m->n_types > 0;
    int rc = 0;
    size_t cap = 0;
    struct rp_idmap ft = {0}; /* fingerprint (classes[i].fp) -> i */
    uint32_t *fit = malloc((m->n_types ? m->n_types : 1) * sizeof *fit);
    const char **fit_names = malloc((m->n_types ? m->n_types : 1) * sizeof *fit_names);
    if (!fit || !fit_names) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < t->n_pods; i++) {
        struct rp_pod *p = &t->pods[i];
        uint32_t n_fit = 0;
        for (size_t k = 0; k < m->n_types; k++) {
            if (rp_type_fits(t, &types[k], &p->req, p->spec)) {
                fit_names[n_fit] = types[k].name;
                fit[n_fit++] = (uint32_t)k;
            }
        }
        if (m->n_types && n_fit == 0)
            m->unfittable_pods++;
        struct bf_requirement reqs[3];
        uint32_t nr = 0;
        const char *spec_vals[64];
        if (p->req.v[RP_GPU] == 0) {
            reqs[nr++] =
                (struct bf_requirement){.key = BF_SIM_LABEL_GPU_MODEL, .op = BF_OP_DOES_NOT_EXIST};
        } else if (p->spec) {
            const struct rp_spec *sp = &t->specs[p->spec];
            for (uint32_t j = 0; j < sp->n; j++)
                spec_vals[j] = sp->models[j];
            reqs[nr++] = (struct bf_requirement){.key = BF_SIM_LABEL_GPU_MODEL,
                                                 .op = BF_OP_IN,
                                                 .n_values = sp->n,
                                                 .values = spec_vals};
        }
        if (m->pin && n_fit > 0)
            reqs[nr++] = (struct bf_requirement){.key = BF_LABEL_INSTANCE_TYPE,
                                                 .op = BF_OP_IN,
                                                 .n_values = n_fit,
                                                 .values = fit_names};
        const struct rp_qos_policy *q = &rp_qos_table[p->qos];
        struct bf_need_profile prof = {
            .priority = q->priority,
            .ipb = bf_bucket_for_dollars(q->interruption_dollars),
            .rpb = bf_bucket_for_dollars(q->reclamation_dollars),
            .n_reqs = nr,
            .reqs = reqs,
        };
        /* canonicalize permutes the values in place (fit_names is scratch);
         * fit[] stays in catalog order: it is used as a set */
        bf_profile_canonicalize(&prof);
        char *fp = bf_profile_fingerprint_dup(&prof);
        if (!fp) {
            rc = -ENOMEM;
            goto out;
        }
        const uint32_t *known = rp_idmap_ref(&ft, fp);
        if (known) {
            p->cls = *known;
            m->classes[p->cls].pods++;
            free(fp);
            continue;
        }
        if (m->n_classes == cap &&
            bf_grow((void **)&m->classes, &cap, m->n_classes + 1, sizeof *m->classes)) {
            free(fp);
            rc = -ENOMEM;
            goto out;
        }
        struct rp_class *c = &m->classes[m->n_classes];
        memset(c, 0, sizeof *c);
        m->n_classes++;
        c->qos = p->qos;
        c->spec = p->spec;
        c->gpu = p->req.v[RP_GPU] > 0;
        c->pinned = m->pin && n_fit > 0;
        c->pods = 1;
        rc = class_fill(c, &prof, fp, fit, n_fit);
        free(fp);
        if (rc)
            goto out;
        p->cls = (uint32_t)(m->n_classes - 1);
        if (rp_idmap_put(&ft, c->fp, p->cls)) {
            rc = -ENOMEM;
            goto out;
        }
    }
out:
    free(fit);
    free(fit_names);
    rp_idmap_free(&ft);
    if (rc)
        rp_model_free(m);
    return rc;
}

void rp_model_free(struct rp_model *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n_classes; i++)
        class_free(&m->classes[i]);
    free(m->classes);
    memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------ aggregation */

static int cmp_need(const void *a, const void *b)
{
    const struct rp_need *x = a, *y = b;
    return x->cls < y->cls ? -1 : (x->cls > y->cls);
}

size_t rp_aggregate(const struct rp_model *m, const uint32_t *pods, size_t n, struct rp_need *out)
{
    size_t nn = 0;
    for (size_t i = 0; i < n; i++) {
        const struct rp_pod *p = &m->trace->pods[pods[i]];
        size_t k = 0;
        while (k < nn && out[k].cls != p->cls)
            k++;
        if (k == nn) {
            memset(&out[nn], 0, sizeof out[nn]);
            out[nn].cls = p->cls;
            nn++;
        }
        struct rp_need *d = &out[k];
        d->pods++;
        for (int x = 0; x < RP_DIMS; x++) {
            d->agg.v[x] += p->req.v[x];
            if (p->req.v[x] > d->min_unit.v[x])
                d->min_unit.v[x] = p->req.v[x];
        }
    }
    qsort(out, nn, sizeof *out, cmp_need);
    return nn;
}

void rp_format_dim(int dim, int64_t v, char *buf, size_t n)
{
    if (dim == RP_MEM) {
        if (v == 0)
            snprintf(buf, n, "0");
        else if (v % (1024 * 1024) == 0)
            snprintf(buf, n, "%lldTi", (long long)(v / (1024 * 1024)));
        else if (v % 1024 == 0)
            snprintf(buf, n, "%lldGi", (long long)(v / 1024));
        else
            snprintf(buf, n, "%lldMi", (long long)v);
        return;
    }
    bf_quantity_format(v, false, buf, n);
}

int rp_rollup_encode(const struct rp_model *m, const char *cluster_id, int64_t ts_unix_ns,
                     const struct rp_need *needs, size_t n, uint8_t **buf, size_t *len)
{
    typedef Bigfleet__V1alpha1__CapacityNeed Need;
    typedef Bigfleet__V1alpha1__CapacityNeed__AggregateResourcesEntry AggE;
    typedef Bigfleet__V1alpha1__CapacityNeed__MinUnitEntry MinE;
    size_t nn = n ? n : 1;
    Need *nv = calloc(nn, sizeof *nv);
    Need **np = calloc(nn, sizeof *np);
    AggE *ae = calloc(nn * RP_DIMS, sizeof *ae);
    AggE **ap = calloc(nn * RP_DIMS, sizeof *ap);
    MinE *me = calloc(nn * RP_DIMS, sizeof *me);
    MinE **mp = calloc(nn * RP_DIMS, sizeof *mp);
    char(*str)[32] = calloc(nn * RP_DIMS * 2, sizeof *str);
    int rc = 0;
    if (!nv || !np || !ae || !ap || !me || !mp || !str) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const struct rp_class *c = &m->classes[needs[i].cls];
        const struct wire_reqs *w = c->wire_reqs;
        Need init = BIGFLEET__V1ALPHA1__CAPACITY_NEED__INIT;
        nv[i] = init;
        nv[i].n_requirements = w->n;
        nv[i].requirements = w->p;
        nv[i].priority = c->prof.priority;
        nv[i].interruption_penalty_bucket = (Bigfleet__V1alpha1__PenaltyBucket)c->prof.ipb;
        nv[i].reclamation_penalty_bucket = (Bigfleet__V1alpha1__PenaltyBucket)c->prof.rpb;
        int dims = c->gpu ? RP_DIMS : RP_GPU;
        for (int d = 0; d < dims; d++) {
            size_t k = i * RP_DIMS + (size_t)d;
            AggE ai = BIGFLEET__V1ALPHA1__CAPACITY_NEED__AGGREGATE_RESOURCES_ENTRY__INIT;
            MinE mi = BIGFLEET__V1ALPHA1__CAPACITY_NEED__MIN_UNIT_ENTRY__INIT;
            rp_format_dim(d, needs[i].agg.v[d], str[2 * k], sizeof str[0]);
            rp_format_dim(d, needs[i].min_unit.v[d], str[2 * k + 1], sizeof str[0]);
            ae[k] = ai;
            ae[k].key = (char *)rp_dim_wire_name[d];
            ae[k].value = str[2 * k];
            ap[i * RP_DIMS + (size_t)d] = &ae[k];
            me[k] = mi;
            me[k].key = (char *)rp_dim_wire_name[d];
            me[k].value = str[2 * k + 1];
            mp[i * RP_DIMS + (size_t)d] = &me[k];
        }
        nv[i].n_aggregate_resources = (size_t)dims;
        nv[i].aggregate_resources = &ap[i * RP_DIMS];
        nv[i].n_min_unit = (size_t)dims;
        nv[i].min_unit = &mp[i * RP_DIMS];
        np[i] = &nv[i];
    }
    Bigfleet__V1alpha1__ClusterCapacityNeeds ccn = BIGFLEET__V1ALPHA1__CLUSTER_CAPACITY_NEEDS__INIT;
    ccn.cluster_id = (char *)cluster_id;
    ccn.timestamp_unix_nanos = ts_unix_ns;
    ccn.n_needs = n;
    ccn.needs = np;
    Bigfleet__V1alpha1__OperatorMessage om = BIGFLEET__V1ALPHA1__OPERATOR_MESSAGE__INIT;
    om.payload_case = BIGFLEET__V1ALPHA1__OPERATOR_MESSAGE__PAYLOAD_ROLLUP;
    om.rollup = &ccn;
    size_t sz = bigfleet__v1alpha1__operator_message__get_packed_size(&om);
    *buf = malloc(sz ? sz : 1);
    if (!*buf) {
        rc = -ENOMEM;
        goto out;
    }
    *len = bigfleet__v1alpha1__operator_message__pack(&om, *buf);
out:
    free(nv);
    free(np);
    free(ae);
    free(ap);
    free(me);
    free(mp);
    free(str);
    return rc;
}

/* ------------------------------------------------------------ clock */

int64_t rp_clock_phase_ns(const struct rp_clock *c, uint32_t i)
{
    if (c->clusters <= 1)
        return 0;
    return (int64_t)((__int128)c->interval_ns * i / c->clusters);
}

static int64_t tau_unclamped(const struct rp_clock *c, uint32_t i, int64_t k)
{
    long double wall_s =
        ((long double)rp_clock_phase_ns(c, i) + (long double)k * (long double)c->interval_ns) /
        1e9L;
    long double base = (long double)c->from + wall_s * (long double)c->speed;
    return (int64_t)floorl(base) - (int64_t)i * c->offset;
}

int64_t rp_clock_tau(const struct rp_clock *c, uint32_t i, int64_t k)
{
    int64_t t = tau_unclamped(c, i, k);
    return t > c->until ? c->until : t;
}

int64_t rp_clock_last_k(const struct rp_clock *c, uint32_t i)
{
    long double need_s = ((long double)c->until + (long double)i * c->offset - c->from) / c->speed;
    long double k = (need_s * 1e9L - rp_clock_phase_ns(c, i)) / (long double)c->interval_ns;
    int64_t kk = k < 0 ? 0 : (int64_t)ceill(k);
    while (kk > 0 && tau_unclamped(c, i, kk - 1) >= c->until)
        kk--;
    while (tau_unclamped(c, i, kk) < c->until)
        kk++;
    return kk;
}

int64_t rp_clock_wall_of(const struct rp_clock *c, uint32_t i, int64_t tau)
{
    long double s = ((long double)tau + (long double)i * c->offset - c->from) / c->speed;
    return (int64_t)(s * 1e9L);
}

int rp_parse_trace_seconds(const char *s, int64_t *out)
{
    if (!s || !*s)
        return -EINVAL;
    char *end;
    long double total = strtold(s, &end);
    if (end != s && !*end) {
        /* a plain number: seconds */
        if (total < 0 || !isfinite((double)total))
            return -EINVAL;
    } else {
        /* <number><unit> components, unit one of s m h d: "2d12h", "1.5h" */
        total = 0;
        const char *p = s;
        while (*p) {
            if (*p == '+' || *p == '-')
                return -EINVAL;
            long double v = strtold(p, &end);
            if (end == p || v < 0 || !isfinite((double)v))
                return -EINVAL;
            static const char units[] = "smhd";
            static const long double mul[] = {1, 60, 3600, 86400};
            const char *u = *end ? strchr(units, *end) : NULL;
            if (!u)
                return -EINVAL;
            total += v * mul[u - units];
            p = end + 1;
        }
    }
    if (total > 9.0e15L)
        return -ERANGE;
    *out = (int64_t)(total + 0.5L);
    return 0;
}
