/*
 * quantity.c — Kubernetes resource.Quantity <-> int64 milli-units, the
 * resource-dimension registry, and vector scaling.
 *
 * Parsing is exact integer arithmetic (no floating point): the decimal
 * mantissa is accumulated in __int128, scaled by the suffix, and the milli
 * value is ceil(q * 1000) as Quantity.MilliValue defines it.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "bigfleet/model.h"

typedef __int128 i128;
#define I128_LIMIT ((i128)1 << 120)

static bool mul_ok(i128 *v, i128 m)
{
    if (*v == 0)
        return true;
    i128 a = *v < 0 ? -*v : *v;
    if (a > I128_LIMIT / m)
        return false;
    *v *= m;
    return true;
}

int bf_quantity_parse(const char *s, size_t len, int64_t *milli)
{
    size_t i = 0;
    bool neg = false;
    if (len == 0)
        return -EINVAL;
    if (s[i] == '+' || s[i] == '-') {
        neg = s[i] == '-';
        i++;
    }
    i128 mant = 0;
    int frac = 0, ndigits = 0;
    bool dot = false;
    for (; i < len; i++) {
        char c = s[i];
        if (c >= '0' && c <= '9') {
            if (mant > I128_LIMIT / 10)
                return -ERANGE;
            mant = mant * 10 + (c - '0');
            ndigits++;
            if (dot)
                frac++;
        } else if (c == '.' && !dot) {
            dot = true;
        } else {
            break;
        }
    }
    if (ndigits == 0)
        return -EINVAL;
    /* suffix */
    int exp10 = 0, pow1024 = 0;
    size_t rest = len - i;
    const char *suf = s + i;
    if (rest == 0) {
        /* plain number */
    } else if (rest == 2 && suf[1] == 'i') {
        static const char bin[] = "KMGTPE";
        const char *p = memchr(bin, suf[0], 6);
        if (!p)
            return -EINVAL;
        pow1024 = (int)(p - bin) + 1;
    } else if (suf[0] == 'e' || suf[0] == 'E') {
        size_t j = 1;
        bool eneg = false;
        if (j < rest && (suf[j] == '+' || suf[j] == '-')) {
            eneg = suf[j] == '-';
            j++;
        }
        if (j >= rest)
            return -EINVAL;
        int e = 0;
        for (; j < rest; j++) {
            if (suf[j] < '0' || suf[j] > '9')
                return -EINVAL;
            e = e * 10 + (suf[j] - '0');
            if (e > 100)
                return -ERANGE;
        }
        exp10 = eneg ? -e : e;
    } else if (rest == 1) {
        switch (suf[0]) {
        case 'n':
            exp10 = -9;
            break;
        case 'u':
            exp10 = -6;
            break;
        case 'm':
            exp10 = -3;
            break;
        case 'k':
            exp10 = 3;
            break;
        case 'M':
            exp10 = 6;
            break;
        case 'G':
            exp10 = 9;
            break;
        case 'T':
            exp10 = 12;
            break;
        case 'P':
            exp10 = 15;
            break;
        case 'E':
            exp10 = 18;
            break;
        default:
            return -EINVAL;
        }
    } else {
        return -EINVAL;
    }
    /* milli = mant * 10^(exp10 + 3 - frac) * 1024^pow1024, ceil */
    i128 v = mant;
    for (int k = 0; k < pow1024; k++)
        if (!mul_ok(&v, 1024))
            return -ERANGE;
    int p10 = exp10 + 3 - frac;
    if (p10 >= 0) {
        for (int k = 0; k < p10; k++)
            if (!mul_ok(&v, 10))
                return -ERANGE;
    } else {
        i128 div = 1;
        for (int k = 0; k < -p10; k++) {
            if (div > I128_LIMIT / 10) {
                div = 0; /* divisor larger than any mantissa: result is 0 or 1 */
                break;
            }
            div *= 10;
        }
        if (div == 0) {
            v = (v != 0 && !neg) ? 1 : 0;
        } else {
            i128 q = v / div;
            if (v % div != 0 && !neg)
                q++; /* ceil toward +inf for positive values */
            v = q;
        }
    }
    if (neg)
        v = -v;
    if (v > INT64_MAX || v < INT64_MIN)
        return -ERANGE;
    *milli = (int64_t)v;
    return 0;
}

size_t bf_quantity_format(int64_t milli, bool binary_hint, char *buf, size_t n)
{
    if (milli % 1000 != 0)
        return (size_t)snprintf(buf, n, "%lldm", (long long)milli);
    int64_t v = milli / 1000;
    if (binary_hint && v != 0) {
        static const char *suf[] = {"Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
        int k = -1;
        int64_t u = v;
        while (k < 5 && u % 1024 == 0 && (u / 1024) != 0) {
            u /= 1024;
            k++;
        }
        if (k >= 0)
            return (size_t)snprintf(buf, n, "%lld%s", (long long)u, suf[k]);
    }
    return (size_t)snprintf(buf, n, "%lld", (long long)v);
}

bool bf_dim_is_bytes(const char *name)
{
    return strcmp(name, "memory") == 0 || strcmp(name, "ephemeral-storage") == 0 ||
           strncmp(name, "hugepages-", 10) == 0;
}

int bf_dims_lookup(const struct bf_dims *d, const char *name)
{
    for (uint32_t i = 0; i < d->n && i < BF_MAX_DIMS; i++)
        if (strcmp(d->names[i], name) == 0)
            return (int)i;
    return -1;
}

int bf_dims_intern(struct bf_dims *d, const char *name)
{
    size_t l = strlen(name);
    if (l == 0 || l >= BF_DIM_NAME_MAX)
        return -EINVAL;
    int i = bf_dims_lookup(d, name);
    if (i >= 0)
        return i;
    if (d->n >= BF_MAX_DIMS)
        return -ENOSPC;
    memcpy(d->names[d->n], name, l + 1);
    return (int)d->n++;
}

void bf_vec_scale(bf_vec *a, int64_t k)
{
    for (int i = 0; i < BF_MAX_DIMS; i++) {
        if (k <= 0) {
            a->v[i] = 0;
            continue;
        }
        i128 r = (i128)a->v[i] * k;
        a->v[i] = r > INT64_MAX ? INT64_MAX : (r < INT64_MIN ? INT64_MIN : (int64_t)r);
    }
}
