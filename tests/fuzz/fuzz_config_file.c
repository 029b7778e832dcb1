/*
 * fuzz_config_file.c — bigfleet-shardd's configuration file and environment
 * layers (src/base/config.c, libinih). Input: a selector byte (low bit),
 * then:
 *   0  the text of a configuration file, to bf_config_apply_text;
 *   1  NUL-separated environment entries "NAME=value", each given the
 *      BIGFLEET_SHARDD_ prefix unless it starts with '!' (kept as is, minus
 *      the '!'), to bf_config_load with no flags (entries naming the file,
 *      ..._CONFIG, are dropped: the target reads no file from disk).
 *
 * Properties:
 *   - results are the documented ones (0 / -EINVAL / -EFBIG / -ENOMEM for
 *     the file layer, OK / USAGE for a load), with a message that names the
 *     file (and line) or the variable when not 0;
 *   - parsing is deterministic: twice from the defaults gives the same
 *     result, message and settings (libinih's process-wide knobs and the
 *     static state reset every time);
 *   - what a file sets, rendered back as a file ("name = value" per
 *     setting), parses to the same settings (a fixed point), whenever every
 *     value can be written in a file (no quoting in the format: no value
 *     that starts with ';' or '#', has one after whitespace, or has
 *     whitespace at its ends);
 *   - a valid result survives the supervisor's hand-over to a child: its
 *     argv (bf_config_child_argv) parses to the same settings.
 */
#include "bigfleet/config.h"
#include "fuzz.h"

#define MAX_ENV 64

static void print_diff(const char *name, const char *x, const char *y, bool live, void *arg)
{
    (void)live, (void)arg;
    fprintf(stderr, "setting %s: \"%s\" vs \"%s\"\n", name, x, y);
}

static void same(const struct bf_config *a, const struct bf_config *b)
{
    if (bf_config_diff(a, b, NULL, NULL) != 0)
        bf_config_diff(a, b, print_diff, NULL);
    FUZZ_CHECK(bf_config_diff(a, b, NULL, NULL) == 0);
}

/* Whether a value can be written in a configuration file: the format has
 * no quoting, so libinih trims whitespace around it and reads ';' or '#'
 * after whitespace (or at its start) as a comment. */
static bool representable(const char *v)
{
    size_t l = strlen(v);
    if (!l)
        return true;
    if (v[0] == ';' || v[0] == '#' || v[0] == ' ' || v[0] == '\t' || v[l - 1] == ' ' ||
        v[l - 1] == '\t' || v[l - 1] == '\r' || strpbrk(v, "\n\r"))
        return false;
    for (size_t i = 1; i < l; i++)
        if ((v[i] == ';' || v[i] == '#') && (v[i - 1] == ' ' || v[i - 1] == '\t'))
            return false;
    return true;
}

/* The settings of c as a configuration file, from its child argv; NULL when
 * a value cannot be written in a file (representable). */
static char *render(const struct bf_config *c, size_t *len)
{
    static char buf[1 << 16];
    char *argv[256];
    int n = bf_config_child_argv(c, "bigfleet-shardd", "supervisor", buf, sizeof buf, argv, 256);
    FUZZ_CHECK(n > 0);
    size_t cap = 1 << 16, used = 0;
    char *t = malloc(cap);
    FUZZ_CHECK(t);
    for (int i = 1; i < n; i++) {
        const char *name = argv[i] + 2, *val;
        char nm[96];
        const char *eq = strchr(name, '=');
        if (eq) {
            snprintf(nm, sizeof nm, "%.*s", (int)(eq - name), name);
            val = eq + 1;
        } else {
            snprintf(nm, sizeof nm, "%s", name);
            val = argv[++i];
        }
        if (strcmp(nm, "role") == 0)
            continue;
        if (!representable(val)) {
            free(t);
            return NULL;
        }
        size_t need = strlen(nm) + strlen(val) + 8;
        if (used + need > cap) {
            cap = (used + need) * 2;
            t = realloc(t, cap);
            FUZZ_CHECK(t);
        }
        used += (size_t)snprintf(t + used, cap - used, "%s = %s\n", nm, val);
    }
    *len = used;
    return t;
}

/* c (valid) -> child argv -> a child's parse: the same settings. */
static void child_round_trip(const struct bf_config *c)
{
    static char buf[1 << 16];
    char *argv[256];
    int n = bf_config_child_argv(c, "bigfleet-shardd", "session", buf, sizeof buf, argv, 256);
    if (n == -E2BIG)
        return; /* values longer than the buffer: the supervisor refuses to start */
    FUZZ_CHECK(n > 0);
    struct bf_config k;
    char err[512] = "";
    int rc = bf_config_load(&k, n, argv, NULL, NULL, err, sizeof err);
    if (rc != BF_CONFIG_OK)
        fprintf(stderr, "child parse: %s\n", err);
    FUZZ_CHECK(rc == BF_CONFIG_OK);
    same(c, &k);
}

static void file_layer(const uint8_t *data, size_t size)
{
    static struct bf_config a, b, r;
    char e1[512] = "", e2[512] = "", e3[512] = "";
    bf_config_defaults(&a);
    int rc = bf_config_apply_text(&a, (const char *)data, size, "fuzz.conf", e1, sizeof e1);
    FUZZ_CHECK(rc == 0 || rc == -EINVAL || rc == -EFBIG || rc == -ENOMEM);
    bf_config_defaults(&b);
    FUZZ_CHECK(bf_config_apply_text(&b, (const char *)data, size, "fuzz.conf", e2, sizeof e2) ==
               rc);
    FUZZ_CHECK(strcmp(e1, e2) == 0);
    if (rc) {
        FUZZ_CHECK(strncmp(e1, "fuzz.conf", 9) == 0);
        return;
    }
    same(&a, &b);
    /* rendered back as a file: the same settings */
    size_t tl;
    char *t = render(&a, &tl);
    if (!t)
        goto child;
    bf_config_defaults(&r);
    int rc3 = bf_config_apply_text(&r, t, tl, "rendered.conf", e3, sizeof e3);
    if (rc3)
        fprintf(stderr, "rendered file refused: %s\n--\n%s--\n", e3, t);
    FUZZ_CHECK(rc3 == 0);
    same(&a, &r);
    free(t);
child:;
    char ev[512];
    if (bf_config_validate(&a, ev, sizeof ev) == BF_CONFIG_OK)
        child_round_trip(&a);
}

static void env_layer(const uint8_t *data, size_t size)
{
    char *s = fuzz_cstr(data, size);
    char *envp[MAX_ENV + 1];
    char *owned[MAX_ENV];
    int ne = 0, no = 0;
    for (char *p = s; ne < MAX_ENV && no < MAX_ENV && p < s + size; p += strlen(p) + 1) {
        char *e;
        if (p[0] == '!') {
            e = p + 1;
        } else {
            size_t l = strlen(BF_CONFIG_ENV_PREFIX) + strlen(p) + 1;
            e = owned[no++] = malloc(l);
            FUZZ_CHECK(e);
            snprintf(e, l, "%s%s", BF_CONFIG_ENV_PREFIX, p);
        }
        if (strncmp(e, BF_CONFIG_ENV_PREFIX "CONFIG=", strlen(BF_CONFIG_ENV_PREFIX) + 7) == 0)
            continue;
        envp[ne++] = e;
    }
    envp[ne] = NULL;
    char *argv[] = {"bigfleet-shardd", NULL};
    static struct bf_config a, b;
    char e1[512] = "", e2[512] = "";
    int rc = bf_config_load(&a, 1, argv, envp, NULL, e1, sizeof e1);
    FUZZ_CHECK(rc == BF_CONFIG_OK || rc == BF_CONFIG_USAGE);
    FUZZ_CHECK(bf_config_load(&b, 1, argv, envp, NULL, e2, sizeof e2) == rc);
    FUZZ_CHECK(strcmp(e1, e2) == 0);
    if (rc == BF_CONFIG_OK) {
        same(&a, &b);
        child_round_trip(&a);
    } else {
        FUZZ_CHECK(e1[0] != 0);
    }
    for (int i = 0; i < no; i++)
        free(owned[i]);
    free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] & 1)
        env_layer(data + 1, size - 1);
    else
        file_layer(data + 1, size - 1);
    return 0;
}
