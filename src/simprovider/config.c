/*
 * config.c — struct bf_sim_config: defaults, option-by-name setting for a
 * getopt_long main, the --help text, and latency-distribution parsing.
 *
 * Design notes: pure functions over the struct; string values are borrowed
 * (argv outlives the simulator). Every option name here is listed in
 * bf_sim_config_help() and in include/bigfleet/simprovider.h.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bigfleet/util.h"
#include "simprovider/sim_internal.h"

void bf_sim_config_init(struct bf_sim_config *c)
{
    memset(c, 0, sizeof *c);
    c->provider_name = "bigfleet-sim";
    c->zones = 3;
    c->racks_per_zone = 10;
    c->seed_speculative = 16;
    c->seed_clusters = 1;
    c->cluster_prefix = "cluster-";
    c->seed_priority = 1000000;
    c->seed_interruption_penalty = 8192;
    c->seed_reclamation_penalty = 65536;
    c->spot_tick_ns = BF_NS_PER_SEC;
    c->bare_metal_delete_unimplemented = true;
    c->max_metadata_bytes = 16u << 20;
    c->state_map_size = (size_t)64 << 30;
    c->rng_seed = 1;
}

static int parse_dur(const char *s, size_t len, int64_t *ns)
{
    char b[64];
    if (len == 0 || len >= sizeof b)
        return -EINVAL;
    memcpy(b, s, len);
    b[len] = 0;
    if (b[0] == '-' || bf_parse_duration(b, ns) || *ns < 0)
        return -EINVAL;
    return 0;
}

int bf_sim_dist_parse(const char *s, struct bf_sim_dist *out)
{
    struct bf_sim_dist d = {0};
    const char *open = strchr(s, '(');
    if (!open) {
        d.kind = BF_SIM_DIST_FIXED;
        if (parse_dur(s, strlen(s), &d.a_ns))
            return -EINVAL;
        *out = d;
        return 0;
    }
    size_t nl = (size_t)(open - s), len = strlen(s);
    if (len < nl + 2 || s[len - 1] != ')')
        return -EINVAL;
    const char *args = open + 1;
    size_t al = len - nl - 2;
    const char *comma = memchr(args, ',', al);
    if (nl == 5 && !strncmp(s, "fixed", 5)) {
        d.kind = BF_SIM_DIST_FIXED;
        if (comma || parse_dur(args, al, &d.a_ns))
            return -EINVAL;
    } else if ((nl == 7 && !strncmp(s, "uniform", 7)) || (nl == 6 && !strncmp(s, "normal", 6))) {
        d.kind = nl == 7 ? BF_SIM_DIST_UNIFORM : BF_SIM_DIST_NORMAL;
        if (!comma)
            return -EINVAL;
        size_t l1 = (size_t)(comma - args);
        while (l1 && args[l1 - 1] == ' ')
            l1--;
        const char *b2 = comma + 1;
        size_t l2 = al - (size_t)(b2 - args);
        while (l2 && *b2 == ' ') {
            b2++;
            l2--;
        }
        if (parse_dur(args, l1, &d.a_ns) || parse_dur(b2, l2, &d.b_ns))
            return -EINVAL;
        if (d.kind == BF_SIM_DIST_UNIFORM && d.b_ns < d.a_ns)
            return -EINVAL;
    } else {
        return -EINVAL;
    }
    *out = d;
    return 0;
}

static int parse_u32(const char *v, uint32_t *out)
{
    uint64_t x;
    if (bf_parse_digits(v, UINT32_MAX, &x))
        return -EINVAL;
    *out = (uint32_t)x;
    return 0;
}

static int parse_u64(const char *v, uint64_t *out)
{
    return bf_parse_digits(v, UINT64_MAX, out) ? -EINVAL : 0;
}

static int parse_double(const char *v, double *out)
{
    char *end;
    if (!*v)
        return -EINVAL;
    errno = 0;
    double d = strtod(v, &end);
    if (*end || errno || !isfinite(d))
        return -EINVAL;
    *out = d;
    return 0;
}

static int parse_prob(const char *v, double *out)
{
    double d;
    if (parse_double(v, &d) || d < 0 || d > 1)
        return -EINVAL;
    *out = d;
    return 0;
}

static int parse_bool(const char *v, bool *out)
{
    if (!strcasecmp(v, "true") || !strcmp(v, "1") || !strcasecmp(v, "yes")) {
        *out = true;
        return 0;
    }
    if (!strcasecmp(v, "false") || !strcmp(v, "0") || !strcasecmp(v, "no")) {
        *out = false;
        return 0;
    }
    return -EINVAL;
}

static const char *const rpc_flag[BF_SIM_RPC_COUNT] = {"create", "configure", "drain",
                                                       "delete", "get",       "list"};

/* "<rpc>-<suffix>" -> rpc index or -1 */
static int rpc_prefixed(const char *name, const char *suffix, int limit)
{
    for (int k = 0; k < limit; k++) {
        size_t l = strlen(rpc_flag[k]);
        if (!strncmp(name, rpc_flag[k], l) && name[l] == '-' && !strcmp(name + l + 1, suffix))
            return k;
    }
    return -1;
}

int bf_sim_config_set(struct bf_sim_config *c, const char *name, const char *v, char *err,
                      size_t err_len)
{
    int rc = 0, k;
    uint64_t u64;
    if (!v)
        v = "";
    if (!strcmp(name, "provider"))
        c->provider_name = v;
    else if (!strcmp(name, "catalog"))
        c->catalog_path = *v ? v : NULL;
    else if (!strcmp(name, "spot-variants"))
        rc = parse_bool(v, &c->spot_variants);
    else if (!strcmp(name, "zones"))
        rc = parse_u32(v, &c->zones);
    else if (!strcmp(name, "zone-names"))
        c->zone_names = *v ? v : NULL;
    else if (!strcmp(name, "racks-per-zone"))
        rc = parse_u32(v, &c->racks_per_zone);
    else if (!strcmp(name, "seed-speculative"))
        rc = parse_u32(v, &c->seed_speculative);
    else if (!strcmp(name, "seed-speculative-per-node"))
        rc = parse_u32(v, &c->seed_speculative_per_node);
    else if (!strcmp(name, "seed-idle"))
        rc = parse_u32(v, &c->seed_idle);
    else if (!strcmp(name, "seed-configured"))
        rc = parse_u32(v, &c->seed_configured);
    else if (!strcmp(name, "seed-clusters"))
        rc = parse_u32(v, &c->seed_clusters);
    else if (!strcmp(name, "cluster-prefix"))
        c->cluster_prefix = v;
    else if (!strcmp(name, "seed-priority")) {
        uint32_t p;
        rc = parse_u32(v, &p);
        if (!rc && p > INT32_MAX)
            rc = -EINVAL;
        if (!rc)
            c->seed_priority = (int32_t)p;
    } else if ((k = rpc_prefixed(name, "latency", BF_SIM_KIND_COUNT)) >= 0)
        rc = bf_sim_dist_parse(v, &c->transition_latency[k]);
    else if ((k = rpc_prefixed(name, "failure", BF_SIM_KIND_COUNT)) >= 0)
        rc = parse_prob(v, &c->transition_failure[k]);
    else if (!strcmp(name, "defer-instant"))
        rc = parse_bool(v, &c->defer_instant);
    else if ((k = rpc_prefixed(name, "reply-latency", BF_SIM_RPC_COUNT)) >= 0)
        rc = bf_sim_dist_parse(v, &c->reply_latency[k]);
    else if ((k = rpc_prefixed(name, "error", BF_SIM_RPC_COUNT)) >= 0)
        rc = parse_prob(v, &c->rpc_error[k]);
    else if (!strcmp(name, "max-hosts"))
        rc = parse_u32(v, &c->max_hosts);
    else if (!strcmp(name, "max-hosts-per-type"))
        rc = parse_u32(v, &c->max_hosts_per_type);
    else if (!strcmp(name, "spot-interruption-rate")) {
        rc = parse_double(v, &c->spot_interruption_rate);
        if (!rc && c->spot_interruption_rate < 0)
            rc = -EINVAL;
    } else if (!strcmp(name, "spot-tick")) {
        int64_t ns;
        rc = bf_parse_duration(v, &ns);
        if (!rc && ns <= 0)
            rc = -EINVAL;
        if (!rc)
            c->spot_tick_ns = ns;
    } else if (!strcmp(name, "bare-metal-delete")) {
        if (!strcmp(v, "unimplemented"))
            c->bare_metal_delete_unimplemented = true;
        else if (!strcmp(v, "allowed"))
            c->bare_metal_delete_unimplemented = false;
        else
            rc = -EINVAL;
    } else if (!strcmp(name, "max-metadata-bytes")) {
        rc = parse_u64(v, &u64);
        if (!rc && (u64 == 0 || u64 > SIZE_MAX))
            rc = -EINVAL;
        if (!rc)
            c->max_metadata_bytes = (size_t)u64;
    } else if (!strcmp(name, "state"))
        c->state_path = *v ? v : NULL;
    else if (!strcmp(name, "state-fsync"))
        rc = parse_bool(v, &c->state_fsync);
    else if (!strcmp(name, "state-map-size")) {
        rc = parse_u64(v, &u64);
        if (!rc && (u64 < (1u << 20) || u64 > SIZE_MAX))
            rc = -EINVAL;
        if (!rc)
            c->state_map_size = (size_t)u64;
    } else if (!strcmp(name, "rng-seed"))
        rc = parse_u64(v, &c->rng_seed);
    else {
        bf_errf(err, err_len, "unknown option --%s", name);
        return -ENOENT;
    }
    if (rc) {
        bf_errf(err, err_len, "--%s: bad value \"%s\"", name, v);
        return -EINVAL;
    }
    return 0;
}

const char *bf_sim_config_help(void)
{
    return "  --provider NAME                 HostRef.provider (default bigfleet-sim)\n"
           "  --catalog FILE                  openb node list or explicit catalog CSV\n"
           "                                  (default: built-in 5-type catalog)\n"
           "  --spot-variants BOOL            add <type>-spot twins of on-demand types\n"
           "  --zones N                       zones zone-a, zone-b, ... (default 3)\n"
           "  --zone-names A,B,...            explicit zone names\n"
           "  --racks-per-zone N              racks <zone>-rack-<r> (default 10)\n"
           "  --seed-speculative N            Speculative slots per type (default 16)\n"
           "  --seed-speculative-per-node N   + N per source-CSV node of the shape\n"
           "  --seed-idle N                   Idle machines per type\n"
           "  --seed-configured N             Configured machines per type\n"
           "  --seed-clusters N               clusters the Configured seed binds to (default 1)\n"
           "  --cluster-prefix P              cluster names P<c> (default cluster-)\n"
           "  --seed-priority N               priority in seeded shard_metadata\n"
           "  --{create,configure,drain,delete}-latency D\n"
           "                                  transition latency: 2s | fixed(2s) |\n"
           "                                  uniform(1s,3s) | normal(2s,500ms) (default 0)\n"
           "  --{create,configure,drain,delete}-failure P\n"
           "                                  probability a transition ends FAILED\n"
           "  --defer-instant BOOL            zero latency completes at the next advance\n"
           "  --{create,...,get,list}-reply-latency D   delay before the reply is sent\n"
           "  --{create,...,get,list}-error P probability of an injected UNAVAILABLE\n"
           "  --max-hosts N                   Create exhaustion: host-holding cap (0 = none)\n"
           "  --max-hosts-per-type N          the same per instance type\n"
           "  --spot-interruption-rate R      per spot Idle/Configured machine per second\n"
           "  --spot-tick D                   spot interruption timer granularity (1s)\n"
           "  --bare-metal-delete unimplemented|allowed   (default unimplemented)\n"
           "  --max-metadata-bytes N          shard_metadata cap per Configure (16 MiB)\n"
           "  --state DIR                     LMDB state directory (survives restarts)\n"
           "  --state-fsync BOOL              fsync every commit (default false)\n"
           "  --state-map-size BYTES          LMDB map size (default 64 GiB, sparse)\n"
           "  --rng-seed N                    PRNG seed (default 1)\n";
}
