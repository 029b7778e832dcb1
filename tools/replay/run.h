/*
 * tools/replay/run.h — the running replay: configuration, per-cluster
 * sessions and state, the machines seen, the timeline and the statistics the
 * report is made of. Owned by run.c (one event-loop thread); report.c reads
 * it after the loop has stopped; main.c fills the configuration.
 */
#ifndef BIGFLEET_REPLAY_RUN_H
#define BIGFLEET_REPLAY_RUN_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "bigfleet/hmap.h"
#include "bigfleet/net.h"
#include "replay.h"

/* machine id -> index (bigfleet/hmap.h); keys are the machines' own strdup'd ids */
static inline uint64_t rp_id_hash(const char *s)
{
    return bf_hash_bytes(s, strlen(s));
}
static inline bool rp_id_eq(const char *a, const char *b)
{
    return strcmp(a, b) == 0;
}
BF_HMAP_DEFINE(rp_idmap, const char *, uint32_t, rp_id_hash, rp_id_eq)

struct rp_config {
    const char *trace_path;
    const char *catalog_path; /* openb node list or explicit catalog; NULL = none */
    const char *shard_addr;   /* host:port of Shard/Session */
    const char *metrics_addr; /* host:port of the shard's /metrics, NULL = none */
    const char *report_dir;   /* NULL = no files */
    const char *cluster_prefix;
    struct rp_trace_opts trace_opts; /* skip_bad, snapshot, default qos */
    bool pin;
    bool spot_variants;
    bool check;   /* exit 3 when the acceptance criteria fail */
    bool explain; /* print the mapping and exit */
    uint32_t clusters;
    uint32_t connections; /* 0 = auto */
    bool check_input;     /* load and validate the inputs, print a summary, exit */
    bool contended;       /* a contended run: its own acceptance criteria (docs/replay.md §5) */
    bool from_set, until_set, duration_set;
    int64_t from, until, duration; /* trace seconds */
    int64_t busiest;               /* > 0: the window is the busiest stretch this long */
    int64_t inspect_interval_ns;   /* ShardRead/InspectNeeds poll period, 0 = never */
    double speed;                  /* 0 = from wall_ns */
    int64_t wall_ns;               /* replay the window in this much wall time */
    int64_t interval_ns;           /* rollup interval, wall */
    int64_t offset;                /* trace seconds between clusters */
    int64_t settle_ns;
    int64_t connect_timeout_ns;
    int64_t reclaim_window_ns;
    int64_t session_timeout_ns; /* silent session -> cancelled and re-dialled */
    int64_t cycle_hint_ns;      /* the shard's --cycle-interval, for the latency target */
    int progress;               /* 0 off, 1 plain lines, 2 refresh in place */
    struct bf_net_tls_config tls;
};

enum rp_phase {
    RP_PH_PROVISIONING = 0, /* Speculative / Creating */
    RP_PH_LAUNCHED,         /* Idle */
    RP_PH_REGISTERED,       /* Configuring */
    RP_PH_READY,            /* Configured */
    RP_PH_DRAINING,         /* Draining, or cordoned by a ReclaimInstruction */
    RP_PH_DRAINED,          /* Idle after Draining (UpcomingNode deleted) */
    RP_PH_FAILED,
    RP_PH_DELETING,
    RP_PH_COUNT
};
extern const char *const rp_phase_name[RP_PH_COUNT];

struct rp_machine {
    char *id;
    int32_t cluster; /* bound cluster, -1 none */
    int32_t shape;   /* -1 unknown */
    uint8_t state;   /* enum bf_state */
    uint8_t phase;   /* enum rp_phase */
    bool cordoned;
    bool ever_bound; /* has been Configured for some cluster */
    bool reused;     /* its current binding is not its first (re-used from Idle) */
};

/* One alive pod of a cluster. */
enum { RP_POD_PENDING = 0, RP_POD_BOUND = 1, RP_POD_COVERED_AT_ONCE = 2 };
struct rp_alive {
    uint32_t pod;
    uint32_t cls;
    int64_t first_seen_ns; /* wall (mono) time of the first rollup sent with it; 0 = not yet */
    uint8_t st;
};

/* One sent rollup kept for the reclaim check. */
struct rp_hist {
    int64_t sent_ns;
    int64_t k;
    struct rp_need *needs;
    size_t n, cap;
};

enum rp_sess { RP_SESS_DOWN = 0, RP_SESS_HELLO = 1, RP_SESS_READY = 2 };

struct rp_run;

struct rp_cluster {
    struct rp_run *run;
    uint32_t idx;
    char id[64];
    struct bf_net_client *client;
    struct bf_net_stream *stream;
    int sess;
    bool ever_ready;
    struct bf_net_timer *tick, *retry;
    int64_t backoff_ns;
    int64_t sess_start_ns, last_rx_ns; /* watchdog */
    uint32_t sent_since_rx;
    int64_t k_next, k_last, cur_k;
    bool finished;
    size_t cursor; /* next entry of trace->by_create */
    struct rp_alive *alive;
    size_t n_alive, cap_alive;
    struct rp_need *needs; /* of the last rollup built */
    size_t n_needs;
    uint8_t *pending; /* a built rollup not yet handed to the stream */
    size_t pending_len;
    struct rp_hist *hist;
    uint32_t hist_cap, hist_n, hist_head;
    struct rp_supply_ent *conf, *cing; /* Configured / Configuring per shape */
    size_t n_conf, cap_conf, n_cing, cap_cing;
    struct rp_supply_ent *cord; /* Configured but cordoned by a ReclaimInstruction */
    size_t n_cord, cap_cord;
    struct rp_supply_ent *reuse; /* Configured, not cordoned, bound before (rp_machine.reused) */
    size_t n_reuse, cap_reuse;
    double bound_cost;              /* $/h of machines Configuring, Configured or Draining here */
    double cost_cing;               /* $/h of those Configuring */
    double cost_drain;              /* $/h of those Draining, or Configured and cordoned */
    struct rp_cost_split split_sum; /* sum over this cluster's timeline samples */
    uint32_t split_n;
    bool dirty;
    /* counters */
    uint64_t rollups_sent, rollups_coalesced, rollups_unsent, acks_rollup, acks_hello;
    uint64_t ticks_skipped; /* rollups k the replay was too late for (never built) */
    uint64_t sessions_started, sessions_ended, sessions_timed_out;
};

/* One point of the timeline: rollup index k, summed over the clusters. */
struct rp_tick {
    double demand[RP_DIMS], covered[RP_DIMS], bound[RP_DIMS];
    double demand_q[RP_QOS_COUNT][RP_DIMS], covered_q[RP_QOS_COUNT][RP_DIMS]; /* per qos */
    double cost;                /* $/h of the machines bound at the sample */
    double weight;              /* list-price-weighted demand (peak selection) */
    struct rp_cost_split split; /* where the cost goes (with a catalog) */
    uint32_t pods, needs, clusters;
};

/* Preemptions by the preemptor's qos class (RP_QOS_COUNT = a priority of
 * no class) and the class of the demand the machine was still serving
 * (RP_QOS_COUNT = none: the machine was not needed; RP_QOS_COUNT + 1 = not
 * judged: no shape or no rollup yet). */
#define RP_VICTIM_SPARE   RP_QOS_COUNT
#define RP_VICTIM_UNKNOWN (RP_QOS_COUNT + 1)

/* What the shard's own verdicts (ShardRead/InspectNeeds) said. */
struct rp_inspect_poll {
    int64_t at_ns; /* since t0 */
    uint32_t needs, unsatisfied, parked;
    uint32_t unmet_reason[5];                 /* by UnmetReason 0..4 */
    uint32_t unsatisfied_q[RP_QOS_COUNT + 1]; /* by qos class of the priority */
    uint32_t preempting;                      /* Needs whose Phase 2 found victims */
};
struct rp_inspect {
    struct bf_net_timer *timer;
    struct bf_net_stream *stream;            /* a call in flight */
    struct rp_inspect_poll cur, last, worst; /* worst: most unsatisfied Needs */
    bool got_header, have_last;
    uint64_t calls, errors;
    char last_error[200];
};

struct rp_reclaim_event {
    int64_t at_ns;
    char machine[96];
    char cluster[64];
    char type[64];
    int32_t preemptor_priority;
};

#define RP_RECLAIM_SAMPLES 20

struct rp_scrape_state {
    pthread_t thread;
    bool running;
    pthread_mutex_t mu;
    bool stop;
    /* published by the thread */
    bool ok;
    double actions_total, actions_rate;
    double inv[BF_STATE_COUNT];
    char last_error[160];
};

struct rp_run {
    const struct rp_config *cfg;
    struct rp_trace *trace;
    struct rp_model *model;
    struct bf_sim_type *types; /* catalog (owned by main) */
    size_t n_types;
    struct rp_clock clock;
    struct bf_net_loop *loop;
    struct bf_net_client **clients;
    uint32_t n_clients;
    struct rp_cluster *cl;
    uint32_t n_cl;
    struct rp_shapes shapes;
    /* machines */
    struct rp_machine *m;
    size_t n_m, cap_m;
    struct rp_idmap mh; /* machine id (m[i].id) -> i */
    uint64_t phase_count[RP_PH_COUNT];
    /* clock */
    bool started, ending, stopping, interrupted;
    int64_t t0;       /* mono ns of rollup index 0, phase 0 */
    int64_t start_ns; /* when the run began (before connecting) */
    int64_t end_ns;
    struct bf_net_timer *progress_timer, *settle_timer, *connect_timer, *stop_timer, *watchdog;
    uint32_t ready, finished;
    /* deferred coverage */
    uint32_t *dirty;
    size_t n_dirty;
    bool defer_armed;
    /* timeline */
    struct rp_tick *ticks;
    size_t n_ticks;
    /* latency samples (ns) */
    int64_t *lat, *e2e;
    size_t n_lat, cap_lat, n_e2e, cap_e2e;
    uint64_t pods_covered_at_once, pods_deleted_unbound, pods_never_bound, pods_unobserved,
        pods_observed;
    /* machines */
    uint64_t provisioned, reclaimed, preempted, failed, drained, reclaim_unknown,
        reclaim_still_demanded, reused_bindings;
    struct rp_reclaim_event still_demanded[RP_RECLAIM_SAMPLES];
    uint64_t preempt_by[RP_QOS_COUNT + 1][RP_QOS_COUNT + 2];
    uint64_t preempt_of_higher; /* took a machine demand of > the preemptor's priority needed */
    int64_t preempt_judge_ns;   /* time spent judging preemptions (contend.c) */
    struct rp_reclaim_event preempt_of_higher_ev[RP_RECLAIM_SAMPLES];
    struct rp_inspect inspect;
    /* protocol counters */
    uint64_t nsu, nsu_no_shape, boot_req, boot_cluster_mismatch, reclaim_msgs, ac_updates, bad_msgs,
        unknown_msgs, send_errors, acks_other;
    int64_t shard_epoch, coordinator_term;
    uint64_t ticks_skipped;
    char last_session_error[256];
    /* progress */
    uint64_t nsu_at_last_progress;
    int64_t last_progress_ns;
    bool progress_line_open;
    /* /metrics */
    struct rp_scrape_state scrape;
    struct rp_prom final_metrics;
    bool have_final_metrics;
    char metrics_error[200];
    int exit_code;
};

/* run.c */
/* Sets up the loop, clients and clusters; runs the replay to its end.
 * Returns 0 (the report can be written) or a negative errno with a message
 * already printed. */
int rp_run_execute(struct rp_run *r);
void rp_run_free(struct rp_run *r);
/* Needs of cluster i at its rollup k, recomputed from the trace. out must
 * hold n_classes entries. */
size_t rp_run_needs_at(const struct rp_run *r, uint32_t i, int64_t k, struct rp_need *out);
/* contend.c (below run.c: run.c calls it, it never calls run.c) */
/* The supply the shard credits to cluster c (Configured, then Configuring),
 * without the machines cordoned for a reclaim and without m (may be NULL):
 * a malloc'd array, its length in *n; NULL when out of memory. */
struct rp_supply_ent *rp_supply_without(const struct rp_cluster *c, const struct rp_machine *m,
                                        size_t *n);
/* The rollups of c a cycle may have acted on at `now`: every one sent in
 * [now - --reclaim-window, now] and the last one before; newest first.
 * Returns how many (at most cap) pointers were written. */
size_t rp_candidate_demands(const struct rp_cluster *c, const struct rp_config *cfg, int64_t now,
                            const struct rp_hist **out, size_t cap);

/* The qos class of a priority (RP_QOS_COUNT when no class has it). */
int rp_qos_of_priority(int32_t priority);
/* A ReclaimInstruction with preemptor priority > 0 for machine m of c:
 * classifies the demand the machine served and counts a preemption of
 * demand at or above the preemptor's priority (docs/replay.md §5). */
void rp_contend_preempt(struct rp_run *r, struct rp_cluster *c, struct rp_machine *m,
                        int32_t preemptor_priority, int64_t now);
/* Starts the periodic ShardRead/InspectNeeds poll (cfg->inspect_interval_ns
 * > 0); stop with rp_contend_inspect_stop. 0 or -ENOMEM. */
int rp_contend_inspect_start(struct rp_run *r);
void rp_contend_inspect_stop(struct rp_run *r);

/* cost.c */
/* Writes cost.svg: the lower bound and the parts of the gap stacked over
 * trace time, the cost as a line. */
void rp_cost_svg(FILE *f, const struct rp_run *r);

/* report.c */
struct rp_summary {
    bool have_peak;
    size_t peak_k;
    double peak_trace_s;
    double sat_peak[RP_DIMS], sat_peak_min, sat_peak_weighted;
    double sat_mean, sat_min;
    size_t sat_samples;
    int64_t lat_p50, lat_p90, lat_p99, lat_max;
    int64_t e2e_p50, e2e_p99;
    int64_t lat_target_ns;
    double cost_peak, lower_bound_peak;
    uint64_t lb_infeasible_needs;
    struct rp_cost_split split_peak; /* where the cost goes at the peak */
    /* per qos class: sum over the timeline of covered / demand, min over the
     * dimensions with demand; NaN when the class had no demand */
    double sat_q[RP_QOS_COUNT], sat_q_peak[RP_QOS_COUNT];
    uint64_t pods_window; /* pods the clusters went through (seen + between rollups) */
    bool pass_satisfied, pass_reclaims, pass_latency, pass;
    /* --contended */
    uint64_t preemptions;
    bool pass_preempted, pass_no_higher, pass_qos_order;
};
void rp_report_summarize(struct rp_run *r, struct rp_summary *s);
void rp_report_print(const struct rp_run *r, const struct rp_summary *s, FILE *f);
/* Writes report.json, demand.svg and binding-latency.svg into dir (created).
 * 0 or -errno (message printed). */
int rp_report_write(const struct rp_run *r, const struct rp_summary *s, const char *dir);

#endif /* BIGFLEET_REPLAY_RUN_H */
