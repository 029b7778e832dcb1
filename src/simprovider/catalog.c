/*
 * catalog.c — the simulated provider's instance-type catalog: the documented
 * price formula, the openb node-list mapping (one type per distinct node
 * shape), the explicit catalog CSV, spot variants, the built-in legacy
 * catalog, validation, and the per-type precomputed wire pieces.
 *
 * Design notes: loading is a pure function of the file (no global state);
 * the mapping and the formula are documented in docs/simprovider.md and
 * include/bigfleet/simprovider.h and must change together with them.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bigfleet/util.h"
#include "bigfleet/strbuf.h"
#include "simprovider/sim_internal.h"

/* ------------------------------------------------------------ price formula */

#define PRICE_PER_VCPU      0.033   /* $/h, calibrated on AWS m6i/r6i us-east-1 list prices */
#define PRICE_PER_GIB       0.00375 /* $/h */
#define BARE_METAL_FACTOR   0.6     /* amortised owned hardware */
#define SPOT_FACTOR         0.35
#define SPOT_P_GPU          0.10
#define SPOT_P_CPU          0.05
#define BARE_METAL_MIN_GPUS 8

static const struct {
    const char *model;
    double price; /* $/h per GPU */
} gpu_prices[] = {
    {"T4", 0.35},  {"P100", 1.46}, {"V100M16", 2.48}, {"V100M32", 2.98},
    {"A10", 1.20}, {"G1", 1.00},   {"G2", 2.00},      {"G3", 3.00},
};
#define GPU_PRICE_DEFAULT 2.00

static double round4(double x)
{
    return round(x * 10000.0) / 10000.0;
}

double bf_sim_list_price(int64_t cpu_milli, int64_t memory_mib, int32_t gpus, const char *model)
{
    double gpu = GPU_PRICE_DEFAULT;
    for (size_t i = 0; model && i < sizeof gpu_prices / sizeof gpu_prices[0]; i++)
        if (strcasecmp(model, gpu_prices[i].model) == 0)
            gpu = gpu_prices[i].price;
    double p = PRICE_PER_VCPU * (double)cpu_milli / 1000.0 +
               PRICE_PER_GIB * (double)memory_mib / 1024.0 + (gpus > 0 ? gpus * gpu : 0.0);
    return round4(p);
}

/* ------------------------------------------------------------ validation */

static bool name_ok(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n == 0 || n >= max)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!(isalnum(c) || c == '-' || c == '_' || c == '.'))
            return false;
    }
    return true;
}

int bf_sim_type_validate(const struct bf_sim_type *t, char *err, size_t err_len)
{
    if (!name_ok(t->name, BF_SIM_NAME_MAX)) {
        bf_errf(err, err_len, "instance type name %.80s: want 1..%d characters of [A-Za-z0-9._-]",
                t->name, BF_SIM_NAME_MAX - 1);
        return -EINVAL;
    }
    if (t->cpu_milli <= 0 || t->cpu_milli > 1000000000LL) {
        bf_errf(err, err_len, "%s: cpu_milli %lld out of range", t->name, (long long)t->cpu_milli);
        return -EINVAL;
    }
    if (t->memory_mib <= 0 || t->memory_mib > 8000000LL) {
        bf_errf(err, err_len, "%s: memory_mib %lld out of range", t->name,
                (long long)t->memory_mib);
        return -EINVAL;
    }
    if (t->gpus < 0 || t->gpus > 1024) {
        bf_errf(err, err_len, "%s: gpu count %d out of range", t->name, t->gpus);
        return -EINVAL;
    }
    if (t->gpus == 0 && t->gpu_model[0]) {
        bf_errf(err, err_len, "%s: GPU model %s without GPUs", t->name, t->gpu_model);
        return -EINVAL;
    }
    if (t->gpu_model[0] && !name_ok(t->gpu_model, BF_SIM_MODEL_MAX)) {
        bf_errf(err, err_len, "%s: bad GPU model name", t->name);
        return -EINVAL;
    }
    if (t->capacity_type < BF_CT_BARE_METAL || t->capacity_type > BF_CT_SPOT) {
        bf_errf(err, err_len, "%s: capacity type is required", t->name);
        return -EINVAL;
    }
    if (!isfinite(t->price_per_hour) || t->price_per_hour < 0) {
        bf_errf(err, err_len, "%s: price_per_hour must be finite and >= 0", t->name);
        return -EINVAL;
    }
    if (isnan(t->interruption_probability) || t->interruption_probability < 0 ||
        t->interruption_probability > 1) {
        bf_errf(err, err_len, "%s: interruption_probability must be in [0,1]", t->name);
        return -EINVAL;
    }
    if (t->capacity_type == BF_CT_SPOT && !(t->interruption_probability > 0)) {
        bf_errf(err, err_len, "%s: a SPOT type needs interruption_probability > 0", t->name);
        return -EINVAL;
    }
    return 0;
}

/* ------------------------------------------------------------ wire pieces */

static uint8_t *put_entry(uint8_t *p, uint32_t field, const char *k, const char *v)
{
    size_t kl = strlen(k), vl = strlen(v);
    size_t body = (kl ? bf_pb_ld_len(1, kl) : 0) + (vl ? bf_pb_ld_len(2, vl) : 0);
    p = bf_pb_put_ld_header(p, field, body);
    if (kl)
        p = bf_pb_put_ld(p, 1, k, kl);
    if (vl)
        p = bf_pb_put_ld(p, 2, v, vl);
    return p;
}

static size_t entry_len(uint32_t field, const char *k, const char *v)
{
    size_t kl = strlen(k), vl = strlen(v);
    size_t body = (kl ? bf_pb_ld_len(1, kl) : 0) + (vl ? bf_pb_ld_len(2, vl) : 0);
    return bf_pb_ld_len(field, body);
}

int bf_sim_type_prepare(struct sim_type *st)
{
    const struct bf_sim_type *t = &st->t;
    bf_quantity_format(t->cpu_milli, false, st->cpu_q, sizeof st->cpu_q);
    bf_quantity_format(t->memory_mib * 1048576LL * 1000LL, true, st->mem_q, sizeof st->mem_q);
    bf_quantity_format((int64_t)t->gpus * 1000, false, st->gpu_q, sizeof st->gpu_q);
    snprintf(st->gpu_n, sizeof st->gpu_n, "%d", t->gpus);
    size_t n = entry_len(1, "cpu", st->cpu_q) + entry_len(1, "memory", st->mem_q);
    if (t->gpus > 0)
        n += entry_len(1, BF_SIM_RESOURCE_GPU, st->gpu_q);
    st->res_body = malloc(n);
    if (!st->res_body)
        return -ENOMEM;
    uint8_t *p = st->res_body;
    p = put_entry(p, 1, "cpu", st->cpu_q);
    p = put_entry(p, 1, "memory", st->mem_q);
    if (t->gpus > 0)
        p = put_entry(p, 1, BF_SIM_RESOURCE_GPU, st->gpu_q);
    st->res_len = (size_t)(p - st->res_body);
    return 0;
}

/* ------------------------------------------------------------ built-in catalog */

static const struct bf_sim_type builtin[] = {
    {"m6i.large", 2000, 8192, 0, "", BF_CT_ON_DEMAND, 0.096, 0, 0},
    {"r6i.xlarge", 4000, 32768, 0, "", BF_CT_ON_DEMAND, 0.252, 0, 0},
    {"c6i.4xlarge", 16000, 32768, 0, "", BF_CT_ON_DEMAND, 0.68, 0, 0},
    {"n2-standard-32", 32000, 131072, 0, "", BF_CT_ON_DEMAND, 1.5539, 0, 0},
    {"a3-highgpu-8g", 208000, 1916928, 8, "H100", BF_CT_ON_DEMAND, 88.2539, 0, 0},
};

const struct bf_sim_type *bf_sim_catalog_builtin(size_t *n)
{
    *n = sizeof builtin / sizeof builtin[0];
    return builtin;
}

/* ------------------------------------------------------------ CSV loading */

struct tvec {
    struct bf_sim_type *v;
    size_t n, cap;
};

static int tvec_push(struct tvec *tv, const struct bf_sim_type *t)
{
    if (tv->n == tv->cap && bf_grow((void **)&tv->v, &tv->cap, tv->n + 1, sizeof *tv->v))
        return -ENOMEM;
    tv->v[tv->n++] = *t;
    return 0;
}

/* Splits line in place (bf_csv_split) and trims spaces and tabs around each
 * field; returns the field count (max + 1 when more), or -1 for a bad quote. */
static int split_csv(char *line, char **f, int max)
{
    int n = bf_csv_split(line, f, max);
    for (int i = 0; i < n && i < max; i++) {
        while (*f[i] == ' ' || *f[i] == '\t')
            f[i]++;
        size_t l = strlen(f[i]);
        while (l && (f[i][l - 1] == ' ' || f[i][l - 1] == '\t'))
            f[i][--l] = 0;
    }
    return n;
}

static int parse_f64(const char *s, double *out)
{
    if (!*s)
        return -EINVAL;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end || errno || !isfinite(v))
        return -EINVAL;
    *out = v;
    return 0;
}

static int parse_ct(const char *s)
{
    char b[32];
    size_t j = 0;
    for (const char *p = s; *p && j + 1 < sizeof b; p++)
        if (*p != '-' && *p != '_' && *p != ' ')
            b[j++] = (char)tolower((unsigned char)*p);
    b[j] = 0;
    if (!strcmp(b, "baremetal"))
        return BF_CT_BARE_METAL;
    if (!strcmp(b, "reserved"))
        return BF_CT_RESERVED;
    if (!strcmp(b, "ondemand"))
        return BF_CT_ON_DEMAND;
    if (!strcmp(b, "spot"))
        return BF_CT_SPOT;
    return -1;
}

static void lower_into(char *dst, size_t n, const char *src)
{
    size_t i = 0;
    for (; src[i] && i + 1 < n; i++)
        dst[i] = (char)tolower((unsigned char)src[i]);
    dst[i] = 0;
}

/* "openb-<vcpu>c-<GiB>g[-<g>x<model>]"; non-integral values use milli / MiB. */
static int openb_name(struct bf_sim_type *t)
{
    char cpu[32], mem[32], gpu[48] = "";
    if (t->cpu_milli % 1000 == 0)
        snprintf(cpu, sizeof cpu, "%lldc", (long long)(t->cpu_milli / 1000));
    else
        snprintf(cpu, sizeof cpu, "%lldmc", (long long)t->cpu_milli);
    if (t->memory_mib % 1024 == 0)
        snprintf(mem, sizeof mem, "%lldg", (long long)(t->memory_mib / 1024));
    else
        snprintf(mem, sizeof mem, "%lldm", (long long)t->memory_mib);
    if (t->gpus > 0) {
        char lm[BF_SIM_MODEL_MAX];
        lower_into(lm, sizeof lm, t->gpu_model[0] ? t->gpu_model : "gpu");
        snprintf(gpu, sizeof gpu, "-%dx%s", t->gpus, lm);
    }
    char full[160];
    int n = snprintf(full, sizeof full, "openb-%s-%s%s", cpu, mem, gpu);
    if (n < 0 || (size_t)n >= sizeof t->name)
        return -EINVAL;
    memcpy(t->name, full, (size_t)n + 1);
    return 0;
}

static int shape_cmp(const void *a, const void *b)
{
    const struct bf_sim_type *x = a, *y = b;
    if (x->gpus != y->gpus)
        return x->gpus < y->gpus ? -1 : 1;
    int c = strcmp(x->gpu_model, y->gpu_model);
    if (c)
        return c;
    if (x->cpu_milli != y->cpu_milli)
        return x->cpu_milli < y->cpu_milli ? -1 : 1;
    if (x->memory_mib != y->memory_mib)
        return x->memory_mib < y->memory_mib ? -1 : 1;
    return 0;
}

static int add_spot_variants(struct tvec *tv, char *err, size_t err_len)
{
    size_t n = tv->n;
    for (size_t i = 0; i < n; i++) {
        if (tv->v[i].capacity_type != BF_CT_ON_DEMAND)
            continue;
        struct bf_sim_type s = tv->v[i];
        if (strlen(s.name) + 5 >= sizeof s.name) {
            bf_errf(err, err_len, "%s: name too long for a spot variant", s.name);
            return -EINVAL;
        }
        strcat(s.name, "-spot");
        s.capacity_type = BF_CT_SPOT;
        s.price_per_hour = round4(s.price_per_hour * SPOT_FACTOR);
        s.interruption_probability = s.gpus > 0 ? SPOT_P_GPU : SPOT_P_CPU;
        int rc = tvec_push(tv, &s);
        if (rc)
            return rc;
    }
    return 0;
}

static int validate_all(const struct tvec *tv, const char *what, char *err, size_t err_len)
{
    for (size_t i = 0; i < tv->n; i++) {
        int rc = bf_sim_type_validate(&tv->v[i], err, err_len);
        if (rc)
            return rc;
        for (size_t j = 0; j < i; j++) {
            if (!strcmp(tv->v[i].name, tv->v[j].name)) {
                bf_errf(err, err_len, "catalog %s: duplicate instance type %s", what,
                        tv->v[i].name);
                return -EINVAL;
            }
        }
    }
    return 0;
}

int bf_sim_catalog_build(const struct bf_sim_type *in, size_t n, bool spot_variants,
                         struct bf_sim_type **out, size_t *n_out, char *err, size_t err_len)
{
    struct tvec tv = {0};
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++)
        rc = tvec_push(&tv, &in[i]);
    if (!rc && spot_variants)
        rc = add_spot_variants(&tv, err, err_len);
    if (!rc && tv.n == 0) {
        bf_errf(err, err_len, "catalog: no instance types");
        rc = -EINVAL;
    }
    if (!rc)
        rc = validate_all(&tv, "(config)", err, err_len);
    if (!rc && tv.n > 65535) {
        bf_errf(err, err_len, "catalog: more than 65535 instance types");
        rc = -EINVAL;
    }
    if (rc) {
        free(tv.v);
        return rc;
    }
    *out = tv.v;
    *n_out = tv.n;
    return 0;
}

int bf_sim_catalog_load(const char *path, bool spot_variants, struct bf_sim_type **types,
                        size_t *n_out, char *err, size_t err_len)
{
    struct tvec tv = {0};
    int rc = 0;
    char *line = NULL;
    size_t cap = 0;
    FILE *f = fopen(path, "r");
    if (!f) {
        rc = -errno;
        bf_errf(err, err_len, "catalog %s: %s", path, strerror(errno));
        return rc;
    }
    enum { FMT_NONE, FMT_OPENB, FMT_EXPLICIT } fmt = FMT_NONE;
    long lineno = 0;
    ssize_t got;
    while ((got = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r'))
            line[--got] = 0;
        char *l = line;
        if (lineno == 1 && (unsigned char)l[0] == 0xef && (unsigned char)l[1] == 0xbb &&
            (unsigned char)l[2] == 0xbf)
            l += 3; /* UTF-8 BOM */
        if (!*l || *l == '#')
            continue;
        char *fl[9];
        if (fmt == FMT_NONE) {
            int nf = split_csv(l, fl, 8);
            if (nf == 5 && !strcmp(fl[0], "sn") && !strcmp(fl[1], "cpu_milli") &&
                !strcmp(fl[2], "memory_mib") && !strcmp(fl[3], "gpu") && !strcmp(fl[4], "model")) {
                fmt = FMT_OPENB;
            } else if (nf == 8 && !strcmp(fl[0], "type") && !strcmp(fl[1], "cpu_milli") &&
                       !strcmp(fl[2], "memory_mib") && !strcmp(fl[3], "gpu") &&
                       !strcmp(fl[4], "model") && !strcmp(fl[5], "capacity_type") &&
                       !strcmp(fl[6], "price_per_hour") &&
                       !strcmp(fl[7], "interruption_probability")) {
                fmt = FMT_EXPLICIT;
            } else {
                bf_errf(err, err_len,
                        "catalog %s:%ld: unknown header (want the openb node list "
                        "\"sn,cpu_milli,memory_mib,gpu,model\" or \"type,cpu_milli,memory_mib,gpu,"
                        "model,capacity_type,price_per_hour,interruption_probability\")",
                        path, lineno);
                rc = -EINVAL;
                goto out;
            }
            continue;
        }
        struct bf_sim_type t = {0};
        uint64_t cpu, mem, gpu;
        int want = fmt == FMT_OPENB ? 5 : 8;
        int nf = split_csv(l, fl, 8);
        if (nf != want || bf_parse_digits(fl[1], INT64_MAX, &cpu) ||
            bf_parse_digits(fl[2], INT64_MAX, &mem) || bf_parse_digits(fl[3], INT64_MAX, &gpu) ||
            gpu > 1024 || strlen(fl[4]) >= BF_SIM_MODEL_MAX) {
            bf_errf(err, err_len,
                    "catalog %s:%ld: want %d fields with integer cpu_milli, "
                    "memory_mib, gpu",
                    path, lineno, want);
            rc = -EINVAL;
            goto out;
        }
        t.cpu_milli = cpu;
        t.memory_mib = mem;
        t.gpus = (int32_t)gpu;
        snprintf(t.gpu_model, sizeof t.gpu_model, "%s", fl[4]);
        if (fmt == FMT_OPENB) {
            if (t.gpus > 0 && !t.gpu_model[0])
                snprintf(t.gpu_model, sizeof t.gpu_model, "unknown");
            if (t.gpus == 0 && t.gpu_model[0]) {
                bf_errf(err, err_len, "catalog %s:%ld: GPU model without GPUs", path, lineno);
                rc = -EINVAL;
                goto out;
            }
            size_t k = 0;
            for (; k < tv.n; k++)
                if (shape_cmp(&tv.v[k], &t) == 0)
                    break;
            if (k < tv.n) {
                tv.v[k].trace_nodes++;
                continue;
            }
            t.trace_nodes = 1;
            if (t.gpus >= BARE_METAL_MIN_GPUS) {
                t.capacity_type = BF_CT_BARE_METAL;
                t.price_per_hour =
                    round4(BARE_METAL_FACTOR * bf_sim_list_price(cpu, mem, t.gpus, t.gpu_model));
            } else {
                t.capacity_type = BF_CT_ON_DEMAND;
                t.price_per_hour = bf_sim_list_price(cpu, mem, t.gpus, t.gpu_model);
            }
            t.interruption_probability = 0;
        } else {
            if (strlen(fl[0]) >= sizeof t.name) {
                bf_errf(err, err_len, "catalog %s:%ld: type name too long", path, lineno);
                rc = -EINVAL;
                goto out;
            }
            snprintf(t.name, sizeof t.name, "%s", fl[0]);
            int ct = parse_ct(fl[5]);
            if (ct < 0 || parse_f64(fl[6], &t.price_per_hour) ||
                parse_f64(fl[7], &t.interruption_probability)) {
                bf_errf(err, err_len, "catalog %s:%ld: bad capacity_type, price or probability",
                        path, lineno);
                rc = -EINVAL;
                goto out;
            }
            t.capacity_type = (uint8_t)ct;
            char e2[160];
            if (bf_sim_type_validate(&t, e2, sizeof e2)) {
                bf_errf(err, err_len, "catalog %s:%ld: %s", path, lineno, e2);
                rc = -EINVAL;
                goto out;
            }
        }
        if ((rc = tvec_push(&tv, &t)))
            goto out;
    }
    if (ferror(f)) {
        bf_errf(err, err_len, "catalog %s: read error", path);
        rc = -EIO;
        goto out;
    }
    if (fmt == FMT_NONE || tv.n == 0) {
        bf_errf(err, err_len, "catalog %s: no instance types", path);
        rc = -EINVAL;
        goto out;
    }
    if (fmt == FMT_OPENB) {
        qsort(tv.v, tv.n, sizeof *tv.v, shape_cmp);
        for (size_t i = 0; i < tv.n; i++) {
            if (openb_name(&tv.v[i])) {
                bf_errf(err, err_len, "catalog %s: a shape's type name exceeds %d bytes", path,
                        BF_SIM_NAME_MAX - 1);
                rc = -EINVAL;
                goto out;
            }
        }
    }
    if (spot_variants && (rc = add_spot_variants(&tv, err, err_len)))
        goto out;
    rc = validate_all(&tv, path, err, err_len);
out:
    free(line);
    fclose(f);
    if (rc) {
        free(tv.v);
        return rc;
    }
    *types = tv.v;
    *n_out = tv.n;
    return 0;
}
