/*
 * bf_actuate.c — TEST HELPER standing in for the cycle process: attaches to a
 * running appliance's segments and drives the provider path exactly as the
 * cycle would (docs/internals.md): reconcile requests (reconcile_req_seq +
 * wake RECONCILER, bounded wait for reconcile_done_seq), actions
 * (bf_pending_mark + struct bf_action_msg on the ACTIONS ring + wake
 * EXECUTOR), and read-only views of the inventory and the stats. Run the
 * appliance with a huge --cycle-interval so this is the only action source.
 *
 * Wake-ups: the wake eventfds live in the appliance's processes; the helper
 * borrows the target's descriptor with pidfd_getfd(2). Without that (no
 * permission, old kernel) it does not wake at all: reconciler and executor
 * re-check their inputs every 100 ms.
 *
 * usage: bf_actuate --id SHARD COMMAND [options]
 *   wait-ready [--timeout S]          first_reconcile_done latched
 *   reconcile [--timeout S]           one pass; prints "done=N ok=0|1"
 *   act --kind K --machine ID [need options] [--cluster C] [--grace S]
 *       [--reason R] [--disposition execute|suppressed|dryrun] [--preemptor P]
 *   act-state --kind K --state S --count N [need options] [--cluster C] ...
 *                                     one action per machine in state S (not in flight)
 *   wait-quiet [--timeout S]          no action in flight and the ring drained
 *   wait-state --machine ID --state S [--timeout S]
 *   count --state S                   machines in state S
 *   dump                              one line per machine
 *   stats                             executor and reconciler stats (key=value)
 *   rollup --cluster C [--count N --cpu Q --memory Q] [need options]
 *                                     SESSION STAND-IN: publishes a full-replacement
 *                                     rollup for cluster C exactly as the session
 *                                     does (rows in a free arena extent, the
 *                                     cluster row published with generation+1 and
 *                                     first_rollup, change counter bumped, cycle
 *                                     woken): one Need of N x (cpu, memory), or
 *                                     no Need at all without --count (demand
 *                                     withdrawn). Until the session process lands.
 * need options: --priority P --ipb B --rpb B --req key:op:v1,v2 (op In, NotIn,
 *   Exists, DoesNotExist, Same; repeatable) --group G
 * Kinds: Bootstrap Provision Reclaim Preempt Delete. Exit 0 ok, 1 failure
 * (timeout, unknown machine), 2 usage.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "bigfleet/blobs.h"
#include "bigfleet/log.h"
#include "bigfleet/model.h"
#include "bigfleet/shm.h"
#include "bigfleet/util.h"

static struct bf_shm S;

static int borrow_fd(int role)
{
    uint32_t pid = atomic_load(&S.st->proc[role].pid);
    uint32_t fd = atomic_load(&S.st->proc[role].wake_fd);
    if (!pid || !fd)
        return -1;
    int pfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
    if (pfd < 0)
        return -1;
    int r = (int)syscall(SYS_pidfd_getfd, pfd, (int)fd, 0);
    close(pfd);
    return r;
}

static void wake(int role)
{
    int fd = borrow_fd(role);
    if (fd < 0)
        return;
    uint64_t one = 1;
    ssize_t w = write(fd, &one, sizeof one);
    (void)w;
    close(fd);
}

static int kind_from_name(const char *n)
{
    for (int k = 1; k < BF_ACT_KIND_COUNT; k++)
        if (!strcasecmp(n, bf_action_kind_name(k)))
            return k;
    return -1;
}

static int reason_from_name(const char *n)
{
    for (int r = 1; r <= BF_REASON_CROSS_SHARD_DRAIN; r++)
        if (!strcmp(n, bf_action_reason_name(r)))
            return r;
    return -1;
}

static int op_from_name(const char *n)
{
    static const char *const ops[] = {"", "In", "NotIn", "Exists", "DoesNotExist", "Same"};
    for (int i = 1; i <= 5; i++)
        if (!strcasecmp(n, ops[i]))
            return i;
    return -1;
}

struct need {
    struct bf_need_profile p;
    struct bf_requirement reqs[16];
    const char *vals[16][16];
    const char *group;
};

static int add_req(struct need *n, char *spec)
{
    if (n->p.n_reqs >= 16)
        return -1;
    char *c1 = strchr(spec, ':');
    if (!c1)
        return -1;
    *c1 = 0;
    char *c2 = strchr(c1 + 1, ':');
    if (c2)
        *c2 = 0;
    int op = op_from_name(c1 + 1);
    if (op < 0)
        return -1;
    struct bf_requirement *r = &n->reqs[n->p.n_reqs];
    r->key = spec;
    r->op = (uint8_t)op;
    r->values = n->vals[n->p.n_reqs];
    r->n_values = 0;
    for (char *v = c2 ? strtok(c2 + 1, ",") : NULL; v && r->n_values < 16; v = strtok(NULL, ","))
        n->vals[n->p.n_reqs][r->n_values++] = v;
    n->p.n_reqs++;
    n->p.reqs = n->reqs;
    return 0;
}

struct actopts {
    int kind, reason, disposition;
    const char *cluster;
    uint32_t grace;
    int32_t preemptor;
    struct need need;
    uint32_t need_ref, group_ref, cluster_ref;
};

static int prepare(struct actopts *o)
{
    if (o->kind == BF_ACT_BOOTSTRAP || o->kind == BF_ACT_PROVISION) {
        uint32_t fp;
        int rc = bf_nprofile_intern(&S, &o->need.p, &o->need_ref, &fp);
        if (rc) {
            fprintf(stderr, "bf_actuate: cannot intern the need profile: %s\n", strerror(-rc));
            return -1;
        }
    }
    if (o->need.group &&
        bf_str_intern(&S, o->need.group, (uint32_t)strlen(o->need.group), &o->group_ref))
        return -1;
    if (o->cluster && bf_str_intern_cstr(&S, o->cluster, &o->cluster_ref))
        return -1;
    return 0;
}

static int push_action(struct actopts *o, uint32_t slot, const struct bf_machine_rec *rec)
{
    if (bf_pending(&S, slot))
        return 1; /* the cycle never enqueues a second action for a machine in flight */
    uint8_t tag = bf_pending_mark(&S, slot);
    struct bf_action_msg a = {
        .serial = atomic_fetch_add(&S.st->action_serial, 1) + 1,
        .decided_cycle = atomic_load(&S.st->cycle_count),
        .slot = slot,
        .machine_id_ref = rec->id,
        .cluster_ref = o->cluster_ref ? o->cluster_ref : rec->cluster,
        .need_profile_ref = o->need_ref,
        .group_ref = o->group_ref,
        .grace_seconds = o->grace,
        .preemptor_priority = o->preemptor,
        .kind = (uint8_t)o->kind,
        .reason = (uint8_t)o->reason,
        .pending_tag = tag,
        .disposition = (uint8_t)o->disposition,
    };
    if (bf_ring_push(&S, BF_RING_ACTIONS, &a) != 0) {
        atomic_store(&S.pending_enq[slot], (uint8_t)(tag - 1)); /* undo */
        return -1;
    }
    return 0;
}

static int find_machine(const char *id, uint32_t *slot, struct bf_machine_rec *rec)
{
    if (bf_inv_lookup_id(&S, id, strlen(id), slot) || bf_inv_read(&S, *slot, rec) ||
        !(rec->flags & BF_REC_VALID)) {
        fprintf(stderr, "bf_actuate: unknown machine %s\n", id);
        return -1;
    }
    return 0;
}

static int count_state(int st, uint32_t *pending)
{
    int n = 0;
    uint32_t hwm = bf_inv_hwm(&S), pend = 0;
    for (uint32_t i = 0; i < hwm; i++) {
        struct bf_machine_rec r;
        if (bf_inv_read(&S, i, &r) == 0 && (r.flags & BF_REC_VALID)) {
            if (st < 0 || r.state == st)
                n++;
            if (bf_pending(&S, i))
                pend++;
        }
    }
    if (pending)
        *pending = pend;
    return n;
}

static void print_str(const char *key, uint32_t ref)
{
    uint32_t l = 0;
    const char *s = ref ? bf_str(&S, ref, &l) : "";
    printf(" %s=", key);
    for (uint32_t i = 0; s && i < l; i++)
        putchar(s[i] > ' ' && s[i] < 127 ? s[i] : '_');
}

static void dump(void)
{
    uint32_t hwm = bf_inv_hwm(&S);
    for (uint32_t i = 0; i < hwm; i++) {
        struct bf_machine_rec r;
        if (bf_inv_read(&S, i, &r) || !(r.flags & BF_REC_VALID))
            continue;
        uint32_t l;
        const char *id = bf_str(&S, r.id, &l);
        printf("%.*s state=%s", (int)l, id, bf_state_name(r.state));
        print_str("cluster", r.cluster);
        print_str("fp", r.fingerprint);
        print_str("group", r.group);
        printf(" prio=%d ipb=%u rpb=%u ct=%s price=%.4f p=%.3f flags=0x%x pending=%d slot=%u",
               r.assigned_priority, r.ipb, r.rpb, bf_capacity_type_name(r.capacity_type),
               r.price_per_hour, r.interruption_probability, r.flags, bf_pending(&S, i), i);
        print_str("host", r.host);
        print_str("error", r.last_error);
        putchar('\n');
    }
}

static void stats(void)
{
    struct bf_state_main *st = S.st;
    for (int k = 0; k < BF_ACT_KIND_COUNT; k++)
        for (int o = 0; o < BF_OUT_COUNT; o++) {
            uint64_t v = atomic_load(&st->executor.outcomes[k][o]);
            if (v)
                printf("outcome.%s.%s=%llu\n", k ? bf_action_kind_name(k) : "invalid",
                       bf_outcome_label(o), (unsigned long long)v);
        }
    printf("executor.inflight=%lld\n", (long long)atomic_load(&st->executor.inflight));
    printf("executor.idle_releases=%llu\n",
           (unsigned long long)atomic_load(&st->executor.idle_releases));
    printf("executor.audit_records=%llu\n",
           (unsigned long long)atomic_load(&st->executor.audit_records));
    printf("executor.audit_errors=%llu\n",
           (unsigned long long)atomic_load(&st->executor.audit_errors));
    printf("executor.ring_drops=%llu\n", (unsigned long long)atomic_load(&st->executor.ring_drops));
    printf("executor.configure_phase.count=%llu\n",
           (unsigned long long)atomic_load(&st->executor.configure_phase.count));
    printf("executor.drain_phase.count=%llu\n",
           (unsigned long long)atomic_load(&st->executor.drain_phase.count));
    printf("reconciler.reconciles=%llu\n",
           (unsigned long long)atomic_load(&st->reconciler.reconciles));
    printf("reconciler.errors=%llu\n",
           (unsigned long long)atomic_load(&st->reconciler.reconcile_errors));
    for (int r = 1; r < 4; r++)
        printf("reconciler.rejected.%s=%llu\n", bf_reject_reason_label(r),
               (unsigned long long)atomic_load(&st->reconciler.machines_rejected[r]));
    printf("reconciler.inserted=%llu\n",
           (unsigned long long)atomic_load(&st->reconciler.machines_inserted));
    printf("reconciler.updated=%llu\n",
           (unsigned long long)atomic_load(&st->reconciler.machines_updated));
    printf("reconciler.removed=%llu\n",
           (unsigned long long)atomic_load(&st->reconciler.machines_removed));
    printf("reconciler.skipped_pending=%llu\n",
           (unsigned long long)atomic_load(&st->reconciler.machines_skipped_pending));
    printf("reconciler.metadata_decode_errors=%llu\n",
           (unsigned long long)atomic_load(&st->reconciler.metadata_decode_errors));
    printf("reconciler.last_list_machines=%llu\n",
           (unsigned long long)atomic_load(&st->reconciler.last_list_machines));
    printf("first_reconcile_done=%u\n", atomic_load(&st->first_reconcile_done));
    printf("reconcile_done_seq=%llu\n", (unsigned long long)atomic_load(&st->reconcile_done_seq));
    printf("reconcile_ok_seq=%llu\n", (unsigned long long)atomic_load(&st->reconcile_ok_seq));
    printf("ring.actions.depth=%llu\n", (unsigned long long)bf_ring_depth(&S, BF_RING_ACTIONS));
    printf("ring.node_exec.depth=%llu\n", (unsigned long long)bf_ring_depth(&S, BF_RING_NODE_EXEC));
    printf("ring.reclaim.depth=%llu\n", (unsigned long long)bf_ring_depth(&S, BF_RING_RECLAIM));
    printf("ring.boot_req.depth=%llu\n", (unsigned long long)bf_ring_depth(&S, BF_RING_BOOT_REQ));
    printf("ring.reclaim.pushes=%llu\n",
           (unsigned long long)atomic_load(&S.ring[BF_RING_RECLAIM]->pushes));
    printf("ring.node_exec.pushes=%llu\n",
           (unsigned long long)atomic_load(&S.ring[BF_RING_NODE_EXEC]->pushes));
    printf("executor.restarts=%u\n", atomic_load(&st->proc[BF_ROLE_EXECUTOR].restarts));
    printf("cycle.count=%llu\n", (unsigned long long)atomic_load(&st->cycle_count));
    printf("supervisor.records_repaired=%llu\n",
           (unsigned long long)atomic_load(&st->supervisor.records_repaired));
}

/* Session stand-in: one full-replacement rollup for a cluster (see usage). */
static int rollup(const char *cluster, int count, const char *cpu, const char *mem,
                  struct need *need)
{
    uint32_t name;
    if (!cluster || bf_str_intern_cstr(&S, cluster, &name))
        return -1;
    int idx = bf_cluster_find(&S, name);
    struct bf_cluster_rec rec = {0};
    if (idx < 0) {
        idx = (int)atomic_load(&S.needs->n_clusters);
        if ((uint32_t)idx >= S.max_clusters || (uint32_t)(idx + 1) * 2 > 2 * S.max_needs)
            return -1;
        atomic_store_explicit(&S.needs->n_clusters, (uint32_t)idx + 1, memory_order_release);
    } else if (bf_cluster_read(&S, (uint32_t)idx, &rec, NULL)) {
        return -1;
    }
    /* two one-row extents per cluster, alternating: the published one is never overwritten */
    uint32_t off = (uint32_t)idx * 2 + (uint32_t)((rec.generation + 1) & 1);
    uint32_t nrows = 0;
    if (count > 0) {
        uint32_t prof, fp;
        if (bf_nprofile_intern(&S, &need->p, &prof, &fp))
            return -1;
        struct bf_kv kv[2] = {{"cpu", cpu ? cpu : "1"}, {"memory", mem ? mem : "1Gi"}};
        bf_vec unit;
        char err[128];
        if (bf_resources_to_vec(&S, 2, kv, &unit, err, sizeof err)) {
            fprintf(stderr, "bf_actuate: %s\n", err);
            return -1;
        }
        struct bf_need_row row = {
            .profile_ref = prof, .cluster_ref = name, .arrival_ns = bf_now_ns()};
        if (need->group &&
            bf_str_intern(&S, need->group, (uint32_t)strlen(need->group), &row.group_ref))
            return -1;
        for (int d = 0; d < BF_MAX_DIMS; d++) {
            row.min_unit[d] = unit.v[d];
            row.aggregate[d] = unit.v[d] * count;
        }
        bf_shm_store_words(&S.rows[off], &row, sizeof row);
        nrows = 1;
    }
    int64_t now = bf_now_ns();
    rec.name_ref = name;
    rec.in_use = 1;
    rec.first_rollup = 1;
    rec.rows_off = off;
    rec.rows_count = nrows;
    rec.accepted_rows = nrows;
    rec.generation++;
    rec.last_rollup_ns = now;
    rec.last_rollup_timestamp_ns = now;
    rec.rollups_accepted++;
    bf_cluster_write(&S, (uint32_t)idx, &rec);
    atomic_fetch_add_explicit(&S.needs->change_counter, 1, memory_order_release);
    wake(BF_ROLE_CYCLE);
    return 0;
}

static bool sleep_until(int64_t deadline)
{
    if (bf_mono_ns() >= deadline)
        return false;
    usleep(20000);
    return true;
}

int main(int argc, char **argv)
{
    const char *id = NULL, *machine = NULL, *cpu = NULL, *mem = NULL;
    double timeout = 30;
    int state = -1, count = 0;
    struct actopts o = {.reason = BF_REASON_NONE, .disposition = BF_DISP_EXECUTE};
    o.need.p.priority = 1000;
    o.need.p.ipb = 3;
    o.need.p.rpb = 3;
    static const struct option lo[] = {{"id", required_argument, 0, 'i'},
                                       {"timeout", required_argument, 0, 't'},
                                       {"kind", required_argument, 0, 'k'},
                                       {"machine", required_argument, 0, 'm'},
                                       {"cluster", required_argument, 0, 'c'},
                                       {"grace", required_argument, 0, 'g'},
                                       {"reason", required_argument, 0, 'r'},
                                       {"disposition", required_argument, 0, 'd'},
                                       {"preemptor", required_argument, 0, 'P'},
                                       {"priority", required_argument, 0, 'p'},
                                       {"ipb", required_argument, 0, 'I'},
                                       {"rpb", required_argument, 0, 'R'},
                                       {"req", required_argument, 0, 'q'},
                                       {"group", required_argument, 0, 'G'},
                                       {"state", required_argument, 0, 's'},
                                       {"count", required_argument, 0, 'n'},
                                       {"cpu", required_argument, 0, 'C'},
                                       {"memory", required_argument, 0, 'M'},
                                       {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 'i':
            id = optarg;
            break;
        case 't':
            timeout = atof(optarg);
            break;
        case 'k':
            if ((o.kind = kind_from_name(optarg)) < 0)
                goto usage;
            break;
        case 'm':
            machine = optarg;
            break;
        case 'c':
            o.cluster = optarg;
            break;
        case 'g':
            o.grace = (uint32_t)atoi(optarg);
            break;
        case 'r':
            if ((o.reason = reason_from_name(optarg)) < 0)
                goto usage;
            break;
        case 'd':
            o.disposition = !strcmp(optarg, "suppressed") ? BF_DISP_SUPPRESSED
                            : !strcmp(optarg, "dryrun")   ? BF_DISP_DRYRUN
                                                          : BF_DISP_EXECUTE;
            break;
        case 'P':
            o.preemptor = atoi(optarg);
            break;
        case 'p':
            o.need.p.priority = atoi(optarg);
            break;
        case 'I':
            o.need.p.ipb = (uint8_t)atoi(optarg);
            break;
        case 'R':
            o.need.p.rpb = (uint8_t)atoi(optarg);
            break;
        case 'q':
            if (add_req(&o.need, optarg))
                goto usage;
            break;
        case 'G':
            o.need.group = optarg;
            break;
        case 's':
            if ((state = bf_state_from_name(optarg)) < 0)
                goto usage;
            break;
        case 'n':
            count = atoi(optarg);
            break;
        case 'C':
            cpu = optarg;
            break;
        case 'M':
            mem = optarg;
            break;
        default:
            goto usage;
        }
    }
    if (!id || optind != argc - 1)
        goto usage;
    const char *cmd = argv[optind];
    char err[256];
    int64_t deadline = bf_mono_ns() + (int64_t)(timeout * 1e9);
    while (bf_shm_attach(&S, id, false, err, sizeof err)) { /* the appliance may be starting */
        if (!sleep_until(deadline)) {
            fprintf(stderr, "bf_actuate: %s\n", err);
            return 1;
        }
    }
    bf_shm_set_role(&S, BF_ROLE_CYCLE);
    int rc = 0;
    if (!strcmp(cmd, "wait-ready")) {
        while (!atomic_load(&S.st->first_reconcile_done))
            if (!sleep_until(deadline)) {
                rc = 1;
                break;
            }
    } else if (!strcmp(cmd, "reconcile")) {
        uint64_t n = atomic_load(&S.st->reconcile_req_seq) + 1;
        atomic_store_explicit(&S.st->reconcile_req_seq, n, memory_order_release);
        wake(BF_ROLE_RECONCILER);
        while (atomic_load_explicit(&S.st->reconcile_done_seq, memory_order_acquire) < n)
            if (!sleep_until(deadline)) {
                rc = 1;
                break;
            }
        printf("done=%llu ok=%d\n", (unsigned long long)atomic_load(&S.st->reconcile_done_seq),
               atomic_load(&S.st->reconcile_ok_seq) >= n);
    } else if (!strcmp(cmd, "act")) {
        uint32_t slot;
        struct bf_machine_rec rec;
        if (o.kind <= 0 || !machine || find_machine(machine, &slot, &rec) || prepare(&o))
            rc = 1;
        else if ((rc = push_action(&o, slot, &rec)) != 0)
            fprintf(stderr, "bf_actuate: %s\n", rc > 0 ? "machine already in flight" : "ring full");
        else
            wake(BF_ROLE_EXECUTOR);
        rc = rc ? 1 : 0;
    } else if (!strcmp(cmd, "act-state")) {
        if (o.kind <= 0 || state < 0 || prepare(&o)) {
            rc = 1;
        } else {
            int pushed = 0;
            uint32_t hwm = bf_inv_hwm(&S);
            for (uint32_t i = 0; i < hwm && pushed < count; i++) {
                struct bf_machine_rec r;
                if (bf_inv_read(&S, i, &r) || !(r.flags & BF_REC_VALID) || r.state != state)
                    continue;
                if (push_action(&o, i, &r) == 0)
                    pushed++;
            }
            wake(BF_ROLE_EXECUTOR);
            printf("pushed=%d\n", pushed);
        }
    } else if (!strcmp(cmd, "wait-quiet")) {
        for (;;) {
            uint32_t pend;
            count_state(-1, &pend);
            if (!pend && bf_ring_depth(&S, BF_RING_ACTIONS) == 0)
                break;
            if (!sleep_until(deadline)) {
                fprintf(stderr, "bf_actuate: still in flight: %u\n", pend);
                rc = 1;
                break;
            }
        }
    } else if (!strcmp(cmd, "wait-state")) {
        uint32_t slot;
        struct bf_machine_rec rec;
        if (!machine || state < 0) {
            rc = 1;
        } else {
            for (;;) {
                if (find_machine(machine, &slot, &rec) == 0 && rec.state == state)
                    break;
                if (!sleep_until(deadline)) {
                    rc = 1;
                    break;
                }
            }
        }
    } else if (!strcmp(cmd, "rollup")) {
        rc = rollup(o.cluster, count, cpu, mem, &o.need) ? 1 : 0;
    } else if (!strcmp(cmd, "count")) {
        printf("%d\n", count_state(state, NULL));
    } else if (!strcmp(cmd, "dump")) {
        dump();
    } else if (!strcmp(cmd, "stats")) {
        stats();
    } else {
        bf_shm_detach(&S);
        goto usage;
    }
    bf_shm_detach(&S);
    return rc;
usage:
    fprintf(stderr, "usage: bf_actuate --id SHARD wait-ready|reconcile|act|act-state|wait-quiet|"
                    "wait-state|count|dump|stats|rollup [options] (see the source header)\n");
    return 2;
}
