/*
 * trace.c — the openb pod list (../shared/data/openb/README.md) as a
 * struct rp_trace.
 *
 * The header line names the columns; the required ones are looked up by
 * name, so column order does not matter and unknown columns are ignored.
 * Every data row is validated completely before it is kept; the first bad
 * row is an error "<path>:<line>: <column>: <what>" unless skip_bad, which
 * skips it, counts it and keeps the first RP_SKIP_SAMPLES messages.
 *
 * CSV: comma separated, optional double-quoted fields ("" escapes a quote),
 * CRLF or LF, an optional UTF-8 BOM, blank lines ignored. The whole file is
 * read into memory (the openb lists are ~500 KB).
 *
 * Snapshots (docs/replay.md §2): a pod list without creation/deletion times
 * (openb_pod_list_multigpu20.csv) is what runs at one moment, not a
 * history. With opts->snapshot it is replayed as a ramp: the n pods arrive
 * in file order, pod i at trace second floor(ramp * i / n), and none is
 * deleted before the end, ramp + hold; without a qos column every pod gets
 * opts->default_qos (LS unless set). Without the option, or when only one
 * of the two time columns is there, the header is an error naming every
 * missing column.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/strbuf.h"
#include "bigfleet/util.h"
#include "replay.h"

enum col { C_NAME, C_CPU, C_MEM, C_NGPU, C_GPUMILLI, C_SPEC, C_QOS, C_CREATE, C_DELETE, C_COUNT };
static const char *const col_name[C_COUNT] = {
    "name",     "cpu_milli", "memory_mib",    "num_gpu",       "gpu_milli",
    "gpu_spec", "qos",       "creation_time", "deletion_time",
};
static const bool col_required[C_COUNT] = {true, true, true, true, true, false, true, true, true};
static const struct rp_trace_opts opts_default = {.default_qos = -1};

#define MAX_FIELDS     64
#define MAX_MEMORY_MIB (INT64_C(1) << 40) /* 1 EiB: keeps byte math in int64 */
#define MAX_GPUS       1024
#define MAX_TIME       (INT64_C(1) << 53)

static int str_push(struct rp_trace *t, const char *s, uint32_t *off)
{
    size_t l = strlen(s) + 1;
    if (t->str_len + l > UINT32_MAX)
        return -ENOMEM;
    if (bf_grow((void **)&t->strings, &t->str_cap, t->str_len + l, 1))
        return -ENOMEM;
    memcpy(t->strings + t->str_len, s, l);
    *off = (uint32_t)t->str_len;
    t->str_len += l;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Parses "A|B|A" into a sorted, deduplicated spec and interns it. Returns
 * the index, -EINVAL (bad model name, message in why), -ENOMEM. */
static int spec_intern(struct rp_trace *t, const char *s, char *why, size_t why_len)
{
    if (!*s)
        return 0;
    char *copy = strdup(s);
    if (!copy)
        return -ENOMEM;
    char *models[64];
    uint32_t n = 0;
    int rc = 0;
    for (char *save = NULL, *tok = strtok_r(copy, "|", &save); tok;
         tok = strtok_r(NULL, "|", &save)) {
        size_t l = strlen(tok);
        bool ok = l > 0 && l < BF_SIM_MODEL_MAX;
        for (size_t i = 0; ok && i < l; i++)
            ok = isalnum((unsigned char)tok[i]) || tok[i] == '-' || tok[i] == '_' || tok[i] == '.';
        if (!ok) {
            snprintf(why, why_len, "\"%s\" is not a GPU model name", tok);
            rc = -EINVAL;
            goto out;
        }
        if (n == 64) {
            snprintf(why, why_len, "more than 64 GPU models");
            rc = -EINVAL;
            goto out;
        }
        models[n++] = tok;
    }
    /* "A||B" or a leading/trailing '|' leaves an empty model */
    if (n == 0 || strstr(s, "||") || s[0] == '|' || s[strlen(s) - 1] == '|') {
        snprintf(why, why_len, "\"%s\" has an empty GPU model", s);
        rc = -EINVAL;
        goto out;
    }
    qsort(models, n, sizeof *models, cmp_str);
    uint32_t u = 0;
    for (uint32_t i = 0; i < n; i++)
        if (u == 0 || strcmp(models[u - 1], models[i]))
            models[u++] = models[i];
    n = u;
    for (size_t k = 1; k < t->n_specs; k++) {
        if (t->specs[k].n != n)
            continue;
        uint32_t i = 0;
        while (i < n && !strcmp(t->specs[k].models[i], models[i]))
            i++;
        if (i == n) {
            rc = (int)k;
            goto out;
        }
    }
    struct rp_spec *ns = realloc(t->specs, (t->n_specs + 1) * sizeof *ns);
    if (!ns) {
        rc = -ENOMEM;
        goto out;
    }
    t->specs = ns;
    struct rp_spec *sp = &t->specs[t->n_specs];
    sp->n = 0;
    sp->models = calloc(n, sizeof *sp->models);
    if (!sp->models) {
        rc = -ENOMEM;
        goto out;
    }
    for (uint32_t i = 0; i < n; i++) {
        sp->models[i] = strdup(models[i]);
        if (!sp->models[i]) {
            for (uint32_t j = 0; j < i; j++)
                free(sp->models[j]);
            free(sp->models);
            rc = -ENOMEM;
            goto out;
        }
    }
    sp->n = n;
    rc = (int)t->n_specs++;
out:
    free(copy);
    return rc;
}

/* ---------------------------------------------------------- name set */

/* pod index -> its name, by name: the names live in t->strings, which moves
 * as it grows, so the set holds pod indexes and reaches the names through the
 * trace (the context variant of bigfleet/hmap.h) */
static inline uint64_t pod_name_hash(const struct rp_trace *t, uint32_t pod)
{
    return rp_id_hash(t->strings + t->pods[pod].name);
}
static inline bool pod_name_eq(const struct rp_trace *t, uint32_t pod, const char *name)
{
    return rp_id_eq(t->strings + t->pods[pod].name, name);
}
BF_HMAP_DEFINE_CTX(nameset, const char *, struct rp_trace, pod_name_hash, pod_name_eq)

/* Returns the index of an existing pod with that name, -1 after inserting,
 * -ENOMEM -> -2. */
static long nameset_add_pod(struct nameset *ns, const struct rp_trace *t, const char *name,
                            uint32_t pod)
{
    uint64_t h = rp_id_hash(name);
    uint32_t dup = nameset_find(ns, h, t, name);
    if (dup != BF_HMAP_NONE)
        return (long)dup;
    return nameset_add(ns, h, pod, t) ? -2 : -1;
}

/* ---------------------------------------------------------- rows */

/* Validates one data row; fills *p (name not yet interned). On error writes
 * "<column>: <what>" into why and returns -EINVAL (or -ENOMEM). */
static int parse_row(struct rp_trace *t, char **f, int nf, const int *col, struct rp_pod *p,
                     char *why, size_t why_len)
{
    int64_t v[C_COUNT] = {0};
    (void)nf;
    static const int ints[] = {C_CPU, C_MEM, C_NGPU, C_GPUMILLI, C_CREATE};
    static const int64_t hi[] = {INT64_C(1) << 40, MAX_MEMORY_MIB, MAX_GPUS, 1000, MAX_TIME};
    if (!*f[col[C_NAME]]) {
        snprintf(why, why_len, "name: empty");
        return -EINVAL;
    }
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) {
        if (t->snapshot && ints[i] == C_CREATE)
            continue; /* made up after the last row */
        const char *s = f[col[ints[i]]];
        uint64_t u = 0;
        int rc = bf_parse_digits(s, (uint64_t)hi[i], &u);
        v[ints[i]] = (int64_t)u;
        if (rc) {
            if (rc == -ERANGE)
                snprintf(why, why_len, "%s: %s is out of range 0..%lld", col_name[ints[i]], s,
                         (long long)hi[i]);
            else
                snprintf(why, why_len, "%s: \"%s\" is not a non-negative integer",
                         col_name[ints[i]], s);
            return -EINVAL;
        }
    }
    const char *del = t->snapshot ? "" : f[col[C_DELETE]];
    if (!*del) {
        v[C_DELETE] = RP_LIVES_FOREVER;
    } else {
        uint64_t u = 0;
        int rc = bf_parse_digits(del, (uint64_t)MAX_TIME, &u);
        v[C_DELETE] = (int64_t)u;
        if (rc) {
            snprintf(why, why_len, "deletion_time: \"%s\" is not a non-negative integer", del);
            return -EINVAL;
        }
        if (v[C_DELETE] < v[C_CREATE]) {
            snprintf(why, why_len, "deletion_time: %lld is before creation_time %lld",
                     (long long)v[C_DELETE], (long long)v[C_CREATE]);
            return -EINVAL;
        }
    }
    if (v[C_NGPU] == 0 && v[C_GPUMILLI] != 0) {
        snprintf(why, why_len, "gpu_milli: %lld without num_gpu", (long long)v[C_GPUMILLI]);
        return -EINVAL;
    }
    if (v[C_NGPU] > 0 && v[C_GPUMILLI] == 0) {
        snprintf(why, why_len, "gpu_milli: 0 with num_gpu %lld (want 1..1000 per GPU)",
                 (long long)v[C_NGPU]);
        return -EINVAL;
    }
    const char *q = col[C_QOS] >= 0 ? f[col[C_QOS]] : NULL;
    int qos = q ? rp_qos_parse(q, strlen(q)) : t->qos_default;
    if (qos < 0) {
        snprintf(why, why_len, "qos: \"%s\" is not LS, Burstable, BE or Guaranteed", q);
        return -EINVAL;
    }
    int spec = 0;
    if (col[C_SPEC] >= 0) {
        char w[200];
        spec = spec_intern(t, f[col[C_SPEC]], w, sizeof w);
        if (spec == -ENOMEM)
            return -ENOMEM;
        if (spec < 0) {
            snprintf(why, why_len, "gpu_spec: %s", w);
            return -EINVAL;
        }
        if (spec > 0 && v[C_NGPU] == 0) {
            snprintf(why, why_len, "gpu_spec: \"%s\" on a pod without GPUs", f[col[C_SPEC]]);
            return -EINVAL;
        }
    }
    memset(p, 0, sizeof *p);
    p->req.v[RP_CPU] = v[C_CPU];
    p->req.v[RP_MEM] = v[C_MEM];
    p->req.v[RP_GPU] = v[C_NGPU] * v[C_GPUMILLI];
    p->create = v[C_CREATE];
    p->delete_ = v[C_DELETE];
    p->qos = (uint8_t)qos;
    p->spec = (uint32_t)spec;
    return 0;
}

static int cmp_create(const void *a, const void *b, void *ctx)
{
    const struct rp_pod *pods = ctx;
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    int64_t cx = pods[x].create, cy = pods[y].create;
    if (cx != cy)
        return cx < cy ? -1 : 1;
    return x < y ? -1 : (x > y);
}

/* Checks the header's columns against what the options need; decides
 * whether this is a snapshot. 0 or -EINVAL with the message in err. */
static int header_check(struct rp_trace *t, const char *name, size_t lineno, const int *col,
                        const struct rp_trace_opts *o, char *err, size_t err_len)
{
    bool no_times = col[C_CREATE] < 0 && col[C_DELETE] < 0;
    t->snapshot = o->snapshot == RP_SNAP_RAMP || (o->snapshot == RP_SNAP_AUTO && no_times);
    if (t->snapshot)
        snprintf(t->snap_why, sizeof t->snap_why, "%s",
                 no_times ? "the list has no creation_time/deletion_time columns"
                          : "--snapshot ramp");
    t->qos_default = -1;
    if (col[C_QOS] < 0 && (o->default_qos >= 0 || t->snapshot))
        t->qos_default = o->default_qos >= 0 ? o->default_qos : RP_QOS_LS;
    char miss[256] = "";
    size_t ml = 0;
    int n_miss = 0;
    for (int c = 0; c < C_COUNT; c++) {
        if (col[c] >= 0 || !col_required[c])
            continue;
        if ((c == C_QOS && t->qos_default >= 0) ||
            ((c == C_CREATE || c == C_DELETE) && t->snapshot))
            continue;
        ml +=
            (size_t)snprintf(miss + ml, sizeof miss - ml, "%s%s", n_miss ? ", " : "", col_name[c]);
        if (ml >= sizeof miss)
            ml = sizeof miss - 1;
        n_miss++;
    }
    if (!n_miss)
        return 0;
    const char *hint = "";
    if (no_times && !t->snapshot)
        hint = "; a snapshot pod list without times replays with --snapshot auto or --snapshot "
               "ramp";
    else if (col[C_QOS] < 0 && t->qos_default < 0)
        hint = "; --default-qos fills a missing qos column";
    bf_errf(err, err_len,
            "%s:%zu: header: missing column%s %s (a pod list needs name, cpu_milli, memory_mib, "
            "num_gpu, gpu_milli, qos, creation_time, deletion_time%s)",
            name, lineno, n_miss == 1 ? "" : "s", miss, hint);
    return -EINVAL;
}

int rp_trace_parse(const char *name, const char *buf, size_t len, const struct rp_trace_opts *o,
                   struct rp_trace *t, char *err, size_t err_len)
{
    if (!o)
        o = &opts_default;
    bool skip_bad = o->skip_bad;
    memset(t, 0, sizeof *t);
    struct nameset ns = {0};
    char *copy = NULL;
    int rc = 0;
    size_t cap = 0;
    t->path = strdup(name);
    t->specs = calloc(1, sizeof *t->specs);
    copy = malloc(len + 1);
    if (!t->path || !t->specs || !copy) {
        rc = -ENOMEM;
        goto fail;
    }
    t->n_specs = 1;
    memcpy(copy, buf, len);
    copy[len] = 0;
    if (memchr(copy, 0, len)) {
        size_t ln = 1;
        for (const char *c = copy; *c; c++)
            ln += *c == '\n';
        bf_errf(err, err_len, "%s:%zu: NUL byte in the file", name, ln);
        rc = -EINVAL;
        goto fail;
    }
    char *p = copy;
    if ((unsigned char)p[0] == 0xef && (unsigned char)p[1] == 0xbb && (unsigned char)p[2] == 0xbf)
        p += 3;
    int col[C_COUNT];
    for (int i = 0; i < C_COUNT; i++)
        col[i] = -1;
    int ncols = 0;
    bool have_header = false;
    size_t lineno = 0;
    t->first_create = INT64_MAX;
    t->end = 0;
    while (*p) {
        char *line = p;
        char *nl = strchr(p, '\n');
        if (nl) {
            *nl = 0;
            p = nl + 1;
        } else {
            p += strlen(p);
        }
        lineno++;
        size_t ll = strlen(line);
        if (ll && line[ll - 1] == '\r')
            line[--ll] = 0;
        bool blank = true;
        for (size_t i = 0; i < ll && blank; i++)
            blank = line[i] == ' ' || line[i] == '\t';
        if (blank)
            continue;
        char *f[MAX_FIELDS + 1];
        int nf = bf_csv_split(line, f, MAX_FIELDS);
        if (!have_header) {
            if (nf < 0 || nf > MAX_FIELDS) {
                bf_errf(err, err_len, "%s:%zu: header: %s", name, lineno,
                        nf < 0 ? "unterminated quote" : "more than 64 columns");
                rc = -EINVAL;
                goto fail;
            }
            for (int i = 0; i < nf; i++) {
                for (int c = 0; c < C_COUNT; c++) {
                    if (strcmp(f[i], col_name[c]))
                        continue;
                    if (col[c] >= 0) {
                        bf_errf(err, err_len, "%s:%zu: header: column %s appears twice", name,
                                lineno, col_name[c]);
                        rc = -EINVAL;
                        goto fail;
                    }
                    col[c] = i;
                }
            }
            if ((rc = header_check(t, name, lineno, col, o, err, err_len)))
                goto fail;
            ncols = nf;
            have_header = true;
            continue;
        }
        t->rows++;
        char why[300];
        int prc;
        struct rp_pod pod;
        if (nf < 0) {
            snprintf(why, sizeof why, "unterminated quote");
            prc = -EINVAL;
        } else if (nf != ncols) {
            snprintf(why, sizeof why, "%d fields, the header has %d",
                     nf > MAX_FIELDS ? MAX_FIELDS + 1 : nf, ncols);
            prc = -EINVAL;
        } else {
            prc = parse_row(t, f, nf, col, &pod, why, sizeof why);
        }
        if (prc == -ENOMEM) {
            rc = -ENOMEM;
            goto fail;
        }
        if (prc == 0) {
            if (t->n_pods >= UINT32_MAX - 1) {
                bf_errf(err, err_len, "%s:%zu: too many pods", name, lineno);
                rc = -EINVAL;
                goto fail;
            }
            if (t->n_pods == cap &&
                bf_grow((void **)&t->pods, &cap, t->n_pods + 1, sizeof *t->pods)) {
                rc = -ENOMEM;
                goto fail;
            }
            if ((rc = str_push(t, f[col[C_NAME]], &pod.name)))
                goto fail;
            pod.line = (uint32_t)lineno;
            t->pods[t->n_pods] = pod;
            long dup = nameset_add_pod(&ns, t, f[col[C_NAME]], (uint32_t)t->n_pods);
            if (dup == -2) {
                rc = -ENOMEM;
                goto fail;
            }
            if (dup >= 0) {
                snprintf(why, sizeof why, "name: duplicate pod %s (first at line %u)",
                         f[col[C_NAME]], t->pods[dup].line);
                t->str_len = pod.name; /* drop the interned name */
                prc = -EINVAL;
            } else {
                t->n_pods++;
                if (pod.create < t->first_create)
                    t->first_create = pod.create;
                if (pod.create > t->end)
                    t->end = pod.create;
                if (pod.delete_ != RP_LIVES_FOREVER && pod.delete_ > t->end)
                    t->end = pod.delete_;
            }
        }
        if (prc) {
            if (!skip_bad) {
                bf_errf(err, err_len, "%s:%zu: %s", name, lineno, why);
                rc = -EINVAL;
                goto fail;
            }
            if (t->skipped < RP_SKIP_SAMPLES) {
                char full[1024];
                snprintf(full, sizeof full, "%s:%zu: %s", name, lineno, why);
                size_t fl = strlen(full), lim = sizeof t->skip_samples[0] - 1;
                memcpy(t->skip_samples[t->skipped], full, fl < lim ? fl : lim);
                t->skip_samples[t->skipped][fl < lim ? fl : lim] = 0;
            }
            t->skipped++;
        }
    }
    if (!have_header) {
        bf_errf(err, err_len, "%s: empty file (no header line)", name);
        rc = -EINVAL;
        goto fail;
    }
    if (t->n_pods == 0) {
        bf_errf(err, err_len, "%s: no pods%s", name,
                t->skipped ? " (every row was skipped as malformed)" : "");
        rc = -EINVAL;
        goto fail;
    }
    if (t->snapshot) {
        t->snap_ramp = o->ramp > 0 ? o->ramp : RP_SNAPSHOT_DEFAULT_S;
        t->snap_hold = o->hold > 0 ? o->hold : RP_SNAPSHOT_DEFAULT_S;
        for (size_t i = 0; i < t->n_pods; i++) {
            t->pods[i].create = (int64_t)((__int128)t->snap_ramp * (int64_t)i / (int64_t)t->n_pods);
            t->pods[i].delete_ = RP_LIVES_FOREVER;
        }
        t->first_create = 0;
        t->end = t->snap_ramp + t->snap_hold;
    }
    t->by_create = malloc(t->n_pods * sizeof *t->by_create);
    if (!t->by_create) {
        rc = -ENOMEM;
        goto fail;
    }
    for (size_t i = 0; i < t->n_pods; i++)
        t->by_create[i] = (uint32_t)i;
    qsort_r(t->by_create, t->n_pods, sizeof *t->by_create, cmp_create, t->pods);
    nameset_free(&ns);
    free(copy);
    return 0;
fail:
    if (rc == -ENOMEM)
        bf_errf(err, err_len, "%s: out of memory", name);
    nameset_free(&ns);
    free(copy);
    rp_trace_free(t);
    return rc;
}

int rp_trace_load(const char *path, const struct rp_trace_opts *o, struct rp_trace *t, char *err,
                  size_t err_len)
{
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        bf_errf(err, err_len, "%s: %s", path, strerror(e));
        return -e;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (bf_grow((void **)&buf, &cap, len + 65536, 1)) {
            free(buf);
            fclose(f);
            bf_errf(err, err_len, "%s: out of memory", path);
            return -ENOMEM;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        int e = errno ? errno : EIO;
        free(buf);
        fclose(f);
        bf_errf(err, err_len, "%s: read error: %s", path, strerror(e));
        return -EIO;
    }
    fclose(f);
    int rc = rp_trace_parse(path, buf ? buf : "", len, o, t, err, err_len);
    free(buf);
    return rc;
}

void rp_trace_free(struct rp_trace *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n_specs; i++) {
        for (uint32_t j = 0; j < t->specs[i].n; j++)
            free(t->specs[i].models[j]);
        free(t->specs[i].models);
    }
    free(t->specs);
    free(t->pods);
    free(t->strings);
    free(t->by_create);
    free(t->path);
    memset(t, 0, sizeof *t);
}

/* ---------------------------------------------------------- windows */

/* The first second a pod is no longer alive (its deletion), INT64_MAX when
 * it lives to the end; a pod created and deleted at the same second before
 * the end is never alive (its end equals its creation). */
static int64_t pod_gone(const struct rp_trace *t, const struct rp_pod *p)
{
    return p->delete_ >= t->end ? INT64_MAX : p->delete_;
}

size_t rp_trace_window_pods(const struct rp_trace *t, int64_t from, int64_t until)
{
    size_t n = 0;
    for (size_t i = 0; i < t->n_pods; i++)
        n += rp_pod_alive_in(t, &t->pods[i], from, until);
    return n;
}

static int cmp_time(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : (x > y);
}

/* Elements of a sorted array that are <= x. */
static size_t count_le(const int64_t *v, size_t n, int64_t x)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (v[mid] <= x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/*
 * Pods alive somewhere in [s, s + len] = (creations <= s + len) - (ends
 * <= s), over the pods that are alive at all. That count only rises where
 * s + len reaches a creation, so the best start is the trace start or a
 * creation time minus len.
 */
int64_t rp_trace_busiest(const struct rp_trace *t, int64_t len)
{
    int64_t lo = t->first_create, hi = t->end - len;
    if (len <= 0 || hi <= lo || t->n_pods == 0)
        return lo;
    int64_t *cr = malloc(t->n_pods * sizeof *cr), *gone = malloc(t->n_pods * sizeof *gone);
    if (!cr || !gone) {
        free(cr);
        free(gone);
        return lo;
    }
    size_t n = 0;
    for (size_t i = 0; i < t->n_pods; i++) {
        int64_t g = pod_gone(t, &t->pods[i]);
        if (g <= t->pods[i].create)
            continue; /* never alive */
        cr[n] = t->pods[i].create;
        gone[n++] = g;
    }
    qsort(cr, n, sizeof *cr, cmp_time);
    qsort(gone, n, sizeof *gone, cmp_time);
    int64_t best_s = lo;
    size_t best = count_le(cr, n, lo + len) - count_le(gone, n, lo);
    for (size_t i = 0; i < n; i++) {
        int64_t s = cr[i] - len;
        if (s <= lo || s > hi)
            continue;
        size_t c = count_le(cr, n, s + len) - count_le(gone, n, s);
        if (c > best || (c == best && s < best_s)) {
            best = c;
            best_s = s;
        }
    }
    free(cr);
    free(gone);
    return best_s;
}
