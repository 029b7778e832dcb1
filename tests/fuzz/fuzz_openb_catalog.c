/*
 * fuzz_openb_catalog.c — the simulated provider's catalog reader
 * (bf_sim_catalog_load, src/simprovider/catalog.c): the openb node list
 * ("sn,cpu_milli,memory_mib,gpu,model") and the explicit catalog CSV.
 * Input: the file's bytes; the first byte's low bit asks for spot twins.
 *
 * Properties: the result is 0 or a documented error with a message; an
 * accepted catalog is non-empty, every type passes the seeding rules
 * (positive CPU and memory, finite price >= 0, probability in [0,1]) and
 * names are unique; loading is deterministic; nothing leaks.
 */
#include <errno.h>
#include <math.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bigfleet/simprovider.h"
#include "fuzz.h"

static int load(int fd, bool spot, struct bf_sim_type **t, size_t *n, char *err, size_t el)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    err[0] = 0;
    return bf_sim_catalog_load(path, spot, t, n, err, el);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    bool spot = data[0] & 1;
    data++;
    size--;
    int fd = memfd_create("catalog", 0);
    FUZZ_CHECK(fd >= 0);
    FUZZ_CHECK(write(fd, data, size) == (ssize_t)size);
    struct bf_sim_type *t = NULL, *t2 = NULL;
    size_t n = 0, n2 = 0;
    char err[256], err2[256];
    int rc = load(fd, spot, &t, &n, err, sizeof err);
    FUZZ_CHECK(rc == 0 || rc == -EINVAL || rc == -ENOMEM || rc == -EIO);
    int rc2 = load(fd, spot, &t2, &n2, err2, sizeof err2);
    FUZZ_CHECK(rc == rc2);
    if (rc == 0) {
        FUZZ_CHECK(n > 0 && n == n2);
        for (size_t i = 0; i < n; i++) {
            FUZZ_CHECK(t[i].cpu_milli > 0 && t[i].memory_mib > 0);
            FUZZ_CHECK(isfinite(t[i].price_per_hour) && t[i].price_per_hour >= 0);
            FUZZ_CHECK(t[i].interruption_probability >= 0 && t[i].interruption_probability <= 1);
            FUZZ_CHECK(memchr(t[i].name, 0, sizeof t[i].name) != NULL);
            for (size_t j = 0; j < i; j++)
                FUZZ_CHECK(strcmp(t[i].name, t[j].name) != 0);
        }
        FUZZ_CHECK(memcmp(t, t2, n * sizeof *t) == 0);
    } else {
        FUZZ_CHECK(err[0] != 0 && strcmp(err, err2) == 0);
    }
    free(t);
    free(t2);
    close(fd);
    return 0;
}
