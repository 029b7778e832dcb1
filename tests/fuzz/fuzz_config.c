/*
 * fuzz_config.c — bigfleet-shardd's flag parser (src/base/config.c).
 * Input: NUL-separated arguments (argv[0] is added).
 *
 * Properties: the result is 0, BF_CONFIG_EXIT_OK (--help/--version) or
 * BF_CONFIG_USAGE with the reason in err; parsing the same argv twice
 * gives the same result and a byte-identical struct bf_config (no state
 * survives between parses: getopt is re-armed); nothing leaks
 * (LeakSanitizer).
 */
#include "bigfleet/config.h"
#include "fuzz.h"

#define MAX_ARGS 64

static FILE *g_null;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    g_null = fopen("/dev/null", "w");
    return 0;
}

static int parse(char **av, int ac, struct bf_config *c, char *err, size_t errlen)
{
    char *copy[MAX_ARGS + 2];
    memcpy(copy, av, sizeof(char *) * (size_t)(ac + 1)); /* getopt may permute */
    memset(c, 0, sizeof *c);
    bf_config_defaults(c);
    err[0] = 0;
    return bf_config_parse(c, ac, copy, g_null, err, errlen);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = fuzz_cstr(data, size);
    char *av[MAX_ARGS + 2];
    int ac = 0;
    av[ac++] = "bigfleet-shardd";
    for (char *p = s; ac < MAX_ARGS && p <= s + size;) {
        av[ac++] = p;
        p += strlen(p) + 1;
    }
    av[ac] = NULL;
    static struct bf_config c1, c2;
    char e1[512], e2[512];
    int a = parse(av, ac, &c1, e1, sizeof e1);
    FUZZ_CHECK(a == 0 || a == BF_CONFIG_EXIT_OK || a == BF_CONFIG_USAGE);
    int b = parse(av, ac, &c2, e2, sizeof e2);
    FUZZ_CHECK(a == b);
    if (a == 0)
        FUZZ_CHECK(memcmp(&c1, &c2, sizeof c1) == 0);
    else if (a == BF_CONFIG_USAGE)
        FUZZ_CHECK(e1[0] != 0 && strcmp(e1, e2) == 0);
    free(s);
    return 0;
}
