/*
 * bigfleet/config.h — bigfleet-shardd configuration: one table of flags
 * (name, type, default, help) parsed with getopt_long, shared by the
 * supervisor and every child (children are re-executed with the same
 * arguments plus --role).
 *
 * Layers, in increasing precedence: the defaults of the table, the file
 * named by --config (or BIGFLEET_SHARDD_CONFIG), BIGFLEET_SHARDD_<NAME>
 * environment variables (NAME = the flag name upper-cased, '-' as '_'),
 * the command line. The file holds "name = value" lines with the flag names
 * (libinih; '#' or ';' comments; an optional [shardd] section); an unknown
 * name, a name given twice, an indented continuation line or a bad value is
 * an error naming the file and line. Children (--role) read neither the
 * file nor the environment: the supervisor passes them every value.
 *
 * Flag names follow the Go original where it has one (reference/shard.md
 * §1.1): --id, --listen, --metrics-addr, --data-dir (alias --state-dir),
 * --provider-addr, --coordinator-addr, --tls-cert/--tls-key/--tls-ca, the
 * rail flags, --execute-concurrency, --incremental-reconcile (default true
 * here, false in Go), --audit-log,
 * --cycle-interval, ... Durations use Go syntax ("10s", "250ms", "1m30s").
 * Booleans accept --flag, --flag=true|false|1|0.
 *
 * Units: durations in nanoseconds (int64_t *_ns fields); fractions in [0,1].
 */
#ifndef BIGFLEET_CONFIG_H
#define BIGFLEET_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define BF_ADDR_MAX 256
#define BF_PATH_MAX 1024

struct bf_config {
    /* identity and endpoints */
    char id[64];
    char listen[BF_ADDR_MAX];        /* gRPC: Shard/Session + ShardRead */
    char metrics_addr[BF_ADDR_MAX];  /* HTTP /metrics /healthz /readyz; "0" = off */
    char data_dir[BF_PATH_MAX];      /* LMDB state (epoch, term, ownership partition) */
    char provider_addr[BF_ADDR_MAX]; /* "" = start the embedded simulated provider */
    char coordinator_addr[BF_ADDR_MAX];
    char advertise_addr[BF_ADDR_MAX];
    int64_t coordinator_heartbeat_ns;
    int64_t transfer_reservation_ttl_ns; /* ADR-0055 reservation for transfer */
    char ownership[16];                  /* ADR-0055: auto | all | partitioned */
    char tls_cert[BF_PATH_MAX];
    char tls_key[BF_PATH_MAX];
    char tls_ca[BF_PATH_MAX];
    /* plaintext gRPC on a --listen address that is not loopback (else a
     * usage error, exit 2: docs/security.md "Secure by default") */
    bool insecure_plaintext;
    /* cycle and rails */
    int64_t cycle_interval_ns;
    int64_t cycle_min_gap_ns;      /* demand cycles start >= this apart; 0 = off */
    bool transparent_huge_pages;   /* cycle process: engine arrays in THP (engine.h) */
    int32_t max_actions_per_cycle; /* 0 = unlimited */
    bool actuation_paused;
    double reclaim_cap_fraction; /* 0 disables rail 1 */
    bool empty_rollup_guard;     /* rail 2 */
    bool dry_run;
    char audit_log[BF_PATH_MAX];
    int32_t execute_concurrency;
    int64_t execute_timeout_ns;
    int64_t bootstrap_timeout_ns;
    int64_t reconcile_timeout_ns;
    bool local_bootstrap;
    bool incremental_reconcile;           /* default true (the Go shard: false) */
    int64_t reconcile_resync_interval_ns; /* incremental: period of the full resync walk */
    uint32_t reconcile_page_size;         /* incremental: List max_results per page */
    int64_t available_capacity_interval_ns;
    int32_t metrics_warmup_cycles;
    /* capacities of the shared segments */
    uint32_t max_machines;
    uint32_t max_needs;
    uint32_t max_clusters;
    /* MiB all Shard/Session and ShardRead calls together may hold in partially
     * received messages (bf_net_server_opts.max_inbound_buffered; never below
     * one 256 MiB message) */
    uint32_t grpc_inbound_budget_mib;
    /* hostile peers (docs/security.md) */
    uint32_t max_rollup_mib;           /* 0 = bf_config_max_rollup_bytes() default */
    uint32_t max_conns_per_peer;       /* gRPC connections per peer IP; 0 = unlimited */
    uint32_t max_conns_per_identity;   /* mTLS: per bigfleet:// identity; 0 = unlimited */
    uint32_t cluster_max_needs;        /* Need rows of one cluster; 0 = max_needs / 4 (>= 16) */
    uint32_t cluster_max_groups;       /* distinct groups in one rollup; 0 = unlimited */
    uint32_t cluster_max_string_kib;   /* string-table KiB one cluster may add; 0 = 1/16 arena */
    uint32_t cluster_max_new_dims;     /* resource dimensions one cluster may add */
    int32_t max_priority;              /* Need priorities above are clamped to it */
    int64_t grpc_handshake_timeout_ns; /* TLS handshake + HTTP/2 preface + SETTINGS */
    int64_t grpc_stall_timeout_ns;     /* a partial message with no new byte */
    int64_t session_hello_timeout_ns;  /* Hello (or a request) after a stream opens */
    int64_t http_head_timeout_ns;      /* an HTTP/1.1 request head after its first byte */
    /* embedded simulated provider (when --provider-addr is empty) */
    char sim_listen[BF_ADDR_MAX];
    char sim_args[2048];
    /* supervisor */
    int32_t crash_loop_restarts; /* restarts of one role within the window => full reinit */
    int64_t crash_loop_window_ns;
    int32_t crash_loop_max_reinits; /* full reinits within the reinit window => give up */
    int64_t crash_loop_reinit_window_ns;
    char log_level[16];
    /* host: configuration file, least privilege (docs/operating.md) */
    char config_file[BF_PATH_MAX]; /* the file actually read ("" = none) */
    bool check_config;             /* validate and exit */
    char user[64];                 /* children's account; "" = see --help */
    bool allow_root;               /* children may run as uid 0 */
    char inspect_group[64];        /* group that may read the segments ("" = none: 0600) */
    bool seccomp;                  /* per-role seccomp allow-list in every child */
    /* internal: set by the supervisor when it re-executes a child */
    char role[16];
};

/* Limits of the configuration file (bytes). */
#define BF_CONFIG_FILE_MAX   (1u << 20)
#define BF_CONFIG_LINE_MAX   4096u
#define BF_CONFIG_ENV_PREFIX "BIGFLEET_SHARDD_"

/* Result of bf_config_parse. */
enum bf_config_result {
    BF_CONFIG_OK = 0,
    BF_CONFIG_EXIT_OK = 1, /* --help or --version was printed: exit 0 */
    BF_CONFIG_USAGE = 2    /* usage error: message in err, exit 2 */
};

/* --ownership (docs/adr0055.md §1; the rule is in bigfleet/ownership.h). */
enum bf_own_policy {
    BF_OWN_POLICY_AUTO = 0,       /* own everything until the first AssignDomain */
    BF_OWN_POLICY_ALL = 1,        /* own everything not transferred out, always */
    BF_OWN_POLICY_PARTITIONED = 2 /* domains and transfers only, from the start */
};
/* "auto", "all", "partitioned" -> the policy; -1 otherwise. */
int bf_own_policy_parse(const char *s);

/* Fills every field with its documented default. */
void bf_config_defaults(struct bf_config *c);
/*
 * Parses argv over the defaults, then validates (ranges, durations, TLS all
 * or none, non-empty --listen, a well-formed --id, ...). On a usage error
 * err names the flag ("--cycle-interval: invalid duration \"ten\"").
 * --help prints the table (each flag with its default) to `out`.
 * Not thread-safe (getopt_long state); call once at start.
 */
int bf_config_parse(struct bf_config *c, int argc, char **argv, FILE *out, char *err,
                    size_t errlen);
/* As bf_config_parse() with an explicit environment (NULL-terminated
 * "NAME=value" array; bf_config_parse passes environ). File errors name the
 * file and line ("/etc/bigfleet/shardd.conf:7: unknown setting \"lisen\""),
 * environment errors the variable. */
int bf_config_load(struct bf_config *c, int argc, char **argv, char *const *envp, FILE *out,
                   char *err, size_t errlen);
/*
 * The file layer alone: applies "name = value" text (len bytes, need not be
 * NUL-terminated; at most BF_CONFIG_FILE_MAX bytes, lines at most
 * BF_CONFIG_LINE_MAX) over c. origin names the text in messages. 0, or
 * -EINVAL/-EFBIG/-ENOMEM with err set; on error c may hold some of the
 * text's values (callers parse into a scratch copy). Not thread-safe (sets
 * libinih's process-wide options). The fuzz target's entry point.
 */
int bf_config_apply_text(struct bf_config *c, const char *text, size_t len, const char *origin,
                         char *err, size_t errlen);
/* Cross-field validation (id, --listen, TLS all-or-none, log level, role);
 * fills advertise_addr from listen. BF_CONFIG_OK or BF_CONFIG_USAGE. */
int bf_config_validate(struct bf_config *c, char *err, size_t errlen);
/*
 * The argv of a child: prog, then every setting of c as an explicit flag
 * ("--name value", booleans "--name=true"), then --role=<role>. Strings are
 * packed into buf (cap bytes); argv gets at most max_argv entries including
 * the terminating NULL. Returns argc, or -E2BIG.
 */
int bf_config_child_argv(const struct bf_config *c, const char *prog, const char *role, char *buf,
                         size_t cap, char **argv, int max_argv);
/*
 * Calls fn for every setting whose value differs between running and next
 * (values as flag text; live = a SIGHUP may apply it). Returns the number
 * of differences.
 */
typedef void (*bf_config_diff_fn)(const char *name, const char *running, const char *next,
                                  bool live, void *arg);
int bf_config_diff(const struct bf_config *running, const struct bf_config *next,
                   bf_config_diff_fn fn, void *arg);
/* Copies every live setting (actuation-paused, dry-run, reclaim-cap-fraction,
 * max-actions-per-cycle, log-level, tls-cert/key/ca, audit-log) from next. */
void bf_config_copy_live(struct bf_config *running, const struct bf_config *next);
/* True when SIGHUP may change the setting named (flag name without "--"). */
bool bf_config_is_live(const char *name);
/* Prints the usage text: every flag, its default and its meaning. */
void bf_config_usage(FILE *f, const char *prog);
/* True when TLS flags are set (all three). */
bool bf_config_tls(const struct bf_config *c);
/* The rollup (Shard/Session message) receive limit in bytes: --max-rollup-mib,
 * or by default 2 KiB per --max-needs row, at least 4 MiB, at most 256 MiB. */
uint32_t bf_config_max_rollup_bytes(const struct bf_config *c);
/* One cluster's Need-row quota: --cluster-max-needs, or by default a quarter
 * of --max-needs (at least 16, at most --max-needs). */
uint32_t bf_config_cluster_max_needs(const struct bf_config *c);

#define BF_VERSION "0.1.0"

#endif /* BIGFLEET_CONFIG_H */
