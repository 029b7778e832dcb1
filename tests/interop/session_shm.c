/*
 * session_shm.c — test helper for the session interop tests: attaches to a
 * running appliance's shared segments and either dumps what the session
 * published (read-only) or plays the part of the session's producers
 * (executor, reconciler, cycle) by pushing ring messages exactly as they
 * would, then waking the session through its eventfd
 * (borrowed with pidfd_getfd).
 *
 *   session_shm dump ID [CLUSTER]            cluster rows + need rows (of CLUSTER only, when
 *                                            given) + session stats (JSON)
 *   session_shm machine ID MID CLUSTER STATE TYPE ZONE [k=v ...] [alloc:k=v ...] [host:P/R]
 *                                            insert a machine record (as the reconciler)
 *   session_shm node ID MID [STATE [ERROR]]   push NODE_EXEC for the machine (as the executor)
 *   session_shm nodes ID MID STATE N          push N events for one machine, states cycling
 *   session_shm reclaim ID MID CLUSTER GRACE PRIO
 *   session_shm boot ID EXEC_ID CLUSTER TIMEOUT_MS [key:op:v1,v2 ...]
 *                                            push BOOT_REQ, wait for the matching BOOT_RESP
 *                                            record (read in place, never consumed), print it
 *   session_shm ac ID CLUSTER COUNT CONF COST [key:op:v1,v2 ...]
 *   session_shm cycle-result ID [key:op:v1,v2 ...]
 *                                            publish a synthetic cycle result (as the cycle)
 *   session_shm stamp ID CLUSTER FINGERPRINT the provisioning-latency stamp of the key
 *                                            (read-only JSON: found, epoch, first_seen_ns)
 *
 * Exit 0 on success, 1 with a message on stderr otherwise.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "bigfleet/blobs.h"
#include "bigfleet/shm.h"
#include "bigfleet/util.h"

static struct bf_shm S;

static void die(const char *fmt, const char *a)
{
    fprintf(stderr, fmt, a);
    fputc('\n', stderr);
    exit(1);
}

static void attach(const char *id, bool ro)
{
    char err[512];
    if (bf_shm_attach(&S, id, ro, err, sizeof err) != 0)
        die("attach: %s", err);
}

static void wake(int role)
{
    uint32_t pid = atomic_load(&S.st->proc[role].pid);
    uint32_t fd = atomic_load(&S.st->proc[role].wake_fd);
    if (!pid || !fd)
        return;
    /* an eventfd cannot be reopened through /proc: borrow it with pidfd_getfd */
    int pfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
    int f = pfd >= 0 ? (int)syscall(SYS_pidfd_getfd, pfd, (int)fd, 0) : -1;
    if (pfd >= 0)
        close(pfd);
    if (f < 0)
        return; /* the session's 1 s tick drains the rings anyway */
    uint64_t one = 1;
    ssize_t w = write(f, &one, sizeof one);
    (void)w;
    close(f);
}

static void json_str(const char *s, size_t n)
{
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20 || c >= 0x7f)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static void json_vec(const int64_t *v)
{
    struct bf_dims d;
    bf_shm_dims(&S, &d);
    putchar('{');
    int first = 1;
    for (uint32_t i = 0; i < d.n; i++) {
        if (!v[i])
            continue;
        printf("%s\"%s\":%lld", first ? "" : ",", d.names[i], (long long)v[i]);
        first = 0;
    }
    putchar('}');
}

static int cmd_dump(const char *only)
{
    struct bf_blob_cache *c = bf_blob_cache_new();
    uint32_t n = atomic_load(&S.needs->n_clusters);
    const struct bf_stats_session *st = &S.st->session;
    printf("{\"rows_used\":%u,\"change_counter\":%llu,\"n_clusters\":%u,",
           atomic_load(&S.needs->rows_used),
           (unsigned long long)atomic_load(&S.needs->change_counter), n);
    printf("\"stats\":{\"installed\":%llu,\"removed\":%llu,\"replaced\":%llu,\"active\":%lld,"
           "\"identity_rejected\":%llu,\"hello_rejected\":%llu,\"rollups_received\":%llu,"
           "\"rollups_accepted\":%llu,\"rollups_rejected\":%llu,\"rollups_quarantined\":%llu,"
           "\"rollups_superseded\":%llu,\"outbox_dropped\":%llu,\"outbox_coalesced\":%llu,"
           "\"boot_requests\":%llu,\"boot_late_responses\":%llu,\"reclaim_instructions\":%llu,"
           "\"reclaim_acks\":%llu,\"node_updates\":%llu,\"ac_updates\":%llu},",
           (unsigned long long)st->lifecycle[0], (unsigned long long)st->lifecycle[1],
           (unsigned long long)st->lifecycle[2], (long long)st->active_sessions,
           (unsigned long long)st->identity_rejected, (unsigned long long)st->hello_rejected,
           (unsigned long long)st->rollups_received, (unsigned long long)st->rollups_accepted,
           (unsigned long long)st->rollups_rejected, (unsigned long long)st->rollups_quarantined,
           (unsigned long long)st->rollups_superseded, (unsigned long long)st->outbox_dropped,
           (unsigned long long)st->outbox_coalesced, (unsigned long long)st->boot_requests,
           (unsigned long long)st->boot_late_responses,
           (unsigned long long)st->reclaim_instructions, (unsigned long long)st->reclaim_acks,
           (unsigned long long)st->node_updates, (unsigned long long)st->ac_updates);
    const struct bf_cycle_result *cr = &S.st->result[atomic_load(&S.st->published) & 1];
    printf("\"cycle\":{\"cycle\":%llu,\"total_needs\":%u,\"unsatisfied\":%u},",
           (unsigned long long)cr->cycle, cr->counts.total_needs, cr->unsatisfied);
    struct bf_dims dims;
    bf_shm_dims(&S, &dims);
    printf("\"dims\":[");
    for (uint32_t i = 0; i < dims.n; i++)
        printf("%s\"%s\"", i ? "," : "", dims.names[i]);
    printf("],\"strtab_used\":%llu,\"strtab_bytes\":%llu,",
           (unsigned long long)atomic_load(&S.inv->strtab.arena_used),
           (unsigned long long)S.arena_bytes);
    printf("\"session_pid\":%u,\"clusters\":[", atomic_load(&S.st->proc[BF_ROLE_SESSION].pid));
    struct bf_need_row *rows = malloc(sizeof *rows * 2 * S.max_needs);
    for (uint32_t i = 0; i < n; i++) {
        struct bf_cluster_rec r;
        int k = bf_needs_copy(&S, i, &r, rows, 2 * S.max_needs);
        if (k < 0)
            die("cluster row unreadable: %s", strerror(-k));
        uint32_t nl;
        const char *nm = bf_str(&S, r.name_ref, &nl);
        printf("%s{\"idx\":%u,\"name\":", i ? "," : "", i);
        json_str(nm ? nm : "", nm ? nl : 0);
        printf(",\"in_use\":%u,\"connected\":%u,\"first_rollup\":%u,\"quarantine_held\":%u,"
               "\"rows_off\":%u,\"rows_count\":%u,\"accepted_rows\":%u,\"session_epoch\":%u,"
               "\"generation\":%llu,\"last_rollup_ns\":%lld,\"rollups_accepted\":%llu,"
               "\"rollups_rejected\":%llu,\"rollups_quarantined\":%llu,\"connected_since_ns\":%lld,"
               "\"last_rollup_timestamp_ns\":%lld,\"rows\":[",
               r.in_use, r.connected, r.first_rollup, r.quarantine_held, r.rows_off, r.rows_count,
               r.accepted_rows, r.session_epoch, (unsigned long long)r.generation,
               (long long)r.last_rollup_ns, (unsigned long long)r.rollups_accepted,
               (unsigned long long)r.rollups_rejected, (unsigned long long)r.rollups_quarantined,
               (long long)r.connected_since_ns, (long long)r.last_rollup_timestamp_ns);
        bool want = !only || (nm && strlen(only) == nl && memcmp(only, nm, nl) == 0);
        for (int j = 0; want && j < k; j++) {
            const struct bf_need_row *w = &rows[j];
            const struct bf_nprofile *p = bf_nprofile_get(c, &S, w->profile_ref);
            printf("%s{\"fingerprint\":", j ? "," : "");
            json_str(p ? p->fingerprint : "", p ? strlen(p->fingerprint) : 0);
            uint32_t gl = 0;
            const char *g = w->group_ref ? bf_str(&S, w->group_ref, &gl) : "";
            printf(",\"group\":");
            json_str(g ? g : "", g ? gl : 0);
            printf(",\"cluster_ok\":%s,\"arrival_ns\":%lld,\"priority\":%d,\"ipb\":%d,\"rpb\":%d,"
                   "\"aggregate\":",
                   w->cluster_ref == r.name_ref ? "true" : "false", (long long)w->arrival_ns,
                   p ? p->p.priority : 0, p ? p->p.ipb : 0, p ? p->p.rpb : 0);
            json_vec(w->aggregate);
            printf(",\"min_unit\":");
            json_vec(w->min_unit);
            int si = p ? bf_stamp_find(&S, r.name_ref, p->fingerprint_ref) : -1;
            printf(",\"stamp_first_seen_ns\":%lld}",
                   si >= 0 ? (long long)atomic_load(&S.stamps[si].first_seen_ns) : 0LL);
        }
        printf("]}");
    }
    printf("]}\n");
    free(rows);
    bf_blob_cache_free(c);
    return 0;
}

static int state_of(const char *s)
{
    int st = bf_state_from_name(s);
    if (st <= 0)
        die("unknown state %s", s);
    return st;
}

static uint32_t ref_of(const char *s)
{
    uint32_t r;
    if (bf_str_intern_cstr(&S, s, &r) != 0)
        die("intern %s failed", s);
    return r;
}

static int cmd_machine(int argc, char **argv)
{
    if (argc < 8)
        die("%s", "usage: machine ID MID CLUSTER STATE TYPE ZONE [k=v] [alloc:k=v] [host:P/R]");
    const char *mid = argv[3], *cluster = argv[4], *state = argv[5], *type = argv[6],
               *zone = argv[7];
    struct bf_kv labels[32], alloc[16];
    char *host = NULL;
    uint32_t nl = 0, na = 0;
    for (int i = 8; i < argc; i++) {
        char *a = argv[i];
        if (strncmp(a, "host:", 5) == 0) {
            host = a + 5;
            continue;
        }
        bool al = strncmp(a, "alloc:", 6) == 0;
        char *kv = al ? a + 6 : a;
        char *eq = strchr(kv, '=');
        if (!eq)
            die("bad k=v %s", a);
        *eq = 0;
        if (al && na < 16)
            alloc[na++] = (struct bf_kv){kv, eq + 1};
        else if (!al && nl < 32)
            labels[nl++] = (struct bf_kv){kv, eq + 1};
    }
    struct bf_kv res[] = {{"cpu", "4"}, {"memory", "16Gi"}};
    struct bf_mprofile_input in = {type, zone, BF_CT_ON_DEMAND, 2, res, nl, labels, na, alloc};
    struct bf_machine_rec rec;
    memset(&rec, 0, sizeof rec);
    char err[256];
    if (bf_mprofile_intern(&S, &in, &rec.profile, err, sizeof err) != 0)
        die("profile: %s", err);
    rec.id = ref_of(mid);
    rec.cluster = strcmp(cluster, "-") ? ref_of(cluster) : 0;
    rec.state = (uint8_t)state_of(state);
    if (host) {
        char hb[256];
        char *slash = strchr(host, '/');
        size_t pl = slash ? (size_t)(slash - host) : strlen(host);
        size_t rl = slash ? strlen(slash + 1) : 0;
        memcpy(hb, host, pl);
        hb[pl] = 0;
        if (slash)
            memcpy(hb + pl + 1, slash + 1, rl);
        if (bf_str_intern(&S, hb, (uint32_t)(pl + 1 + rl), &rec.host) != 0)
            die("%s", "host intern");
    }
    rec.type_idx = (uint16_t)bf_type_intern(&S, type);
    rec.zone_idx = (uint16_t)bf_zone_intern(&S, zone);
    uint32_t slot;
    int rc = bf_inv_insert(&S, &rec, &slot);
    if (rc)
        die("insert: %s", strerror(-rc));
    printf("{\"slot\":%u}\n", slot);
    return 0;
}

static void push_node(uint32_t slot, int state, const char *error)
{
    struct bf_machine_rec r;
    if (bf_inv_read(&S, slot, &r) != 0)
        die("%s", "record unreadable");
    struct bf_node_event_msg ev = {.slot = slot,
                                   .machine_id_ref = r.id,
                                   .cluster_ref = r.cluster,
                                   .profile_ref = r.profile,
                                   .host_ref = r.host,
                                   .last_error_ref = error ? ref_of(error) : r.last_error,
                                   .state = (uint8_t)(state ? state : r.state),
                                   .flags = (uint8_t)(r.flags & BF_REC_HOST_IS_ID)};
    while (bf_ring_push(&S, BF_RING_NODE_EXEC, &ev) == -ENOSPC) {
        wake(BF_ROLE_SESSION);
        usleep(1000);
    }
}

static uint32_t slot_of(const char *mid)
{
    uint32_t slot;
    if (bf_inv_lookup_id(&S, mid, strlen(mid), &slot) != 0)
        die("no machine %s", mid);
    return slot;
}

static int cmd_node(int argc, char **argv)
{
    uint32_t slot = slot_of(argv[3]);
    push_node(slot, argc > 4 ? state_of(argv[4]) : 0, argc > 5 ? argv[5] : NULL);
    wake(BF_ROLE_SESSION);
    return 0;
}

static int cmd_nodes(int argc, char **argv)
{
    if (argc < 6)
        die("%s", "usage: nodes ID MID FINAL_STATE N");
    uint32_t slot = slot_of(argv[3]);
    int final = state_of(argv[4]);
    int n = atoi(argv[5]);
    static const int cyc[] = {BF_STATE_IDLE, BF_STATE_CONFIGURING, BF_STATE_CONFIGURED,
                              BF_STATE_DRAINING};
    for (int i = 0; i < n - 1; i++)
        push_node(slot, cyc[i % 4], NULL);
    push_node(slot, final, NULL);
    wake(BF_ROLE_SESSION);
    return 0;
}

static int cmd_reclaim(int argc, char **argv)
{
    if (argc < 7)
        die("%s", "usage: reclaim ID MID CLUSTER GRACE PRIO");
    struct bf_reclaim_msg m;
    memset(&m, 0, sizeof m);
    m.instruction_serial = 1;
    m.machine_id_ref = ref_of(argv[3]);
    m.cluster_ref = ref_of(argv[4]);
    m.grace_seconds = atoll(argv[5]);
    m.preemptor_priority = atoi(argv[6]);
    m.kind = BF_ACT_RECLAIM;
    if (bf_ring_push(&S, BF_RING_RECLAIM, &m) != 0)
        die("%s", "reclaim ring full");
    wake(BF_ROLE_SESSION);
    return 0;
}

/* Builds a need profile from key:op:v1,v2 arguments. */
static uint32_t profile_from(int argc, char **argv, int from)
{
    struct bf_requirement reqs[16];
    const char *vals[16][16];
    char *copies[16];
    int n = 0;
    for (int i = from; i < argc && n < 16; i++) {
        char *a = copies[n] = strdup(argv[i]);
        char *k = strtok(a, ":"), *op = strtok(NULL, ":"), *vs = strtok(NULL, ":");
        if (!k || !op)
            die("bad requirement %s", argv[i]);
        reqs[n].key = k;
        reqs[n].op = (uint8_t)atoi(op);
        reqs[n].n_values = 0;
        reqs[n].values = vals[n];
        for (char *v = vs ? strtok(vs, ",") : NULL; v && reqs[n].n_values < 16;
             v = strtok(NULL, ","))
            vals[n][reqs[n].n_values++] = v;
        n++;
    }
    struct bf_need_profile p = {
        .priority = 100, .ipb = 3, .rpb = 4, .n_reqs = (uint32_t)n, .reqs = reqs};
    uint32_t ref, fref;
    if (bf_nprofile_intern(&S, &p, &ref, &fref) != 0)
        die("%s", "need profile intern");
    for (int i = 0; i < n; i++)
        free(copies[i]);
    return ref;
}

/* Finds the BOOT_RESP record for exec_id among bytes [from, prod) without consuming. */
static int find_resp(uint64_t from, uint64_t exec_id, uint8_t *out, size_t *len)
{
    struct bf_ring_hdr *r = S.ring[BF_RING_BOOT_RESP];
    uint64_t cap = r->capacity;
    uint64_t prod = atomic_load(&r->prod);
    const uint8_t *d = (const uint8_t *)S.rings_hdr + r->data_off;
    uint64_t at = from;
    while (at < prod) {
        uint64_t off = at & (cap - 1);
        uint32_t h[2];
        memcpy(h, d + off, 8);
        if (h[0] == 0xFFFFFFFFu) {
            at += cap - off;
            continue;
        }
        if (h[1] != 0xB1F0C0DEu)
            return -1;
        struct bf_boot_resp_hdr bh;
        memcpy(&bh, d + off + 8, sizeof bh);
        if (bh.request_id == exec_id) {
            memcpy(out, d + off + 8, h[0]);
            *len = h[0];
            return 0;
        }
        at += (8 + h[0] + 7) & ~7ull;
    }
    return -1;
}

static int cmd_boot(int argc, char **argv)
{
    if (argc < 6)
        die("%s", "usage: boot ID EXEC_ID CLUSTER TIMEOUT_MS [key:op:v1,v2 ...]");
    uint64_t exec_id = strtoull(argv[3], NULL, 10);
    int64_t timeout = atoll(argv[5]) * BF_NS_PER_MS;
    struct bf_boot_req_msg m;
    memset(&m, 0, sizeof m);
    m.request_id = exec_id;
    m.deadline_ns = bf_now_ns() + timeout;
    m.cluster_ref = ref_of(argv[4]);
    m.need_profile_ref = profile_from(argc, argv, 6);
    uint64_t from = atomic_load(&S.ring[BF_RING_BOOT_RESP]->prod);
    if (bf_ring_push(&S, BF_RING_BOOT_REQ, &m) != 0)
        die("%s", "boot ring full");
    wake(BF_ROLE_SESSION);
    static uint8_t buf[9u << 20];
    size_t len;
    int64_t end = bf_mono_ns() + timeout;
    while (bf_mono_ns() < end) {
        if (find_resp(from, exec_id, buf, &len) == 0) {
            struct bf_boot_resp_hdr h;
            memcpy(&h, buf, sizeof h);
            printf("{\"status\":%u,\"ttl\":%lld,\"error\":", h.status, (long long)h.ttl_seconds);
            json_str((const char *)buf + sizeof h, h.error_len);
            printf(",\"blob\":");
            json_str((const char *)buf + sizeof h + h.error_len, h.blob_len);
            printf("}\n");
            return 0;
        }
        usleep(2000);
    }
    printf("{\"status\":-1}\n");
    return 0;
}

static int cmd_ac(int argc, char **argv)
{
    if (argc < 7)
        die("%s", "usage: ac ID CLUSTER COUNT CONF COST [key:op:v1,v2 ...]");
    struct bf_ac_hint_msg h;
    memset(&h, 0, sizeof h);
    h.cluster_ref = ref_of(argv[3]);
    h.available_count = atoi(argv[4]);
    h.confidence = (uint8_t)atoi(argv[5]);
    h.cost_per_hour = atof(argv[6]);
    h.need_profile_ref = profile_from(argc, argv, 7);
    if (bf_ring_push(&S, BF_RING_AC_HINTS, &h) != 0)
        die("%s", "AC ring full");
    wake(BF_ROLE_SESSION);
    return 0;
}

/* A synthetic cycle result, published as the cycle does (double buffer +
 * publish_seq): 10 machines (3 Idle, 2 Speculative, 5 Configured) over two
 * types and two zones, and two shortfalls of the given profile. */
static int cmd_cycle_result(int argc, char **argv)
{
    struct bf_state_main *st = S.st;
    uint32_t next = (atomic_load(&st->published) & 1) ^ 1;
    struct bf_cycle_result *r = &st->result[next];
    memset(r, 0, sizeof *r);
    int t1 = bf_type_intern(&S, "m6i.large"), t2 = bf_type_intern(&S, "c6i.4xlarge");
    int z1 = bf_zone_intern(&S, "zone-a"), z2 = bf_zone_intern(&S, "zone-b");
    int cpu = bf_dim_intern(&S, "cpu");
    if (t1 < 0 || t2 < 0 || z1 < 0 || z2 < 0 || cpu < 0)
        die("%s", "registry full");
    struct bf_inv_counts *k = &r->counts;
    k->by_state_type_zone[BF_STATE_IDLE][t1][z1] = 3;
    k->by_state_type_zone[BF_STATE_SPECULATIVE][t2][z2] = 2;
    k->by_state_type_zone[BF_STATE_CONFIGURED][t1][z2] = 5;
    k->by_state[BF_STATE_IDLE] = 3;
    k->by_state[BF_STATE_SPECULATIVE] = 2;
    k->by_state[BF_STATE_CONFIGURED] = 5;
    k->total_machines = 10;
    uint32_t prof = profile_from(argc, argv, 3);
    r->n_shortfalls = 2;
    r->shortfalls_total = 2;
    r->shortfalls[0] = (struct bf_shortfall_row){
        .need_profile_ref = prof, .priority = 500, .age_cycles = 3, .ipb = 7};
    r->shortfalls[0].deficit[cpu] = 4000;
    r->shortfalls[1] = (struct bf_shortfall_row){
        .need_profile_ref = prof, .priority = 1000, .age_cycles = 1, .ipb = 9};
    r->shortfalls[1].deficit[cpu] = 1500;
    r->cycle = 7;
    r->computed_at_ns = bf_now_ns();
    uint64_t seq = atomic_load(&st->publish_seq);
    atomic_store(&st->publish_seq, seq | 1);
    atomic_store(&st->published, next);
    atomic_store(&st->publish_seq, (seq | 1) + 1);
    return 0;
}

static int cmd_stamp(int argc, char **argv)
{
    if (argc < 5)
        die("%s", "usage: stamp ID CLUSTER FINGERPRINT");
    uint32_t c = 0, f = 0;
    int i = -1;
    if (bf_str_find(&S, argv[3], (uint32_t)strlen(argv[3]), &c) == 0 &&
        bf_str_find(&S, argv[4], (uint32_t)strlen(argv[4]), &f) == 0)
        i = bf_stamp_find(&S, c, f);
    if (i < 0) {
        printf("{\"found\":false}\n");
        return 0;
    }
    printf("{\"found\":true,\"epoch\":%u,\"first_seen_ns\":%lld}\n",
           (unsigned)atomic_load(&S.stamps[i].epoch),
           (long long)atomic_load(&S.stamps[i].first_seen_ns));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        die("%s", "usage: session_shm dump|stamp|machine|node|nodes|reclaim|boot|ac ID ...");
    const char *cmd = argv[1];
    bool ro = strcmp(cmd, "dump") == 0 || strcmp(cmd, "stamp") == 0;
    attach(argv[2], ro);
    bf_shm_set_role(&S, ro ? BF_ROLE_SUPERVISOR : BF_ROLE_EXECUTOR);
    if (strcmp(cmd, "stamp") == 0)
        return cmd_stamp(argc, argv);
    if (ro)
        return cmd_dump(argc > 3 ? argv[3] : NULL);
    if (strcmp(cmd, "machine") == 0)
        return cmd_machine(argc, argv);
    if (strcmp(cmd, "node") == 0)
        return cmd_node(argc, argv);
    if (strcmp(cmd, "nodes") == 0)
        return cmd_nodes(argc, argv);
    if (strcmp(cmd, "reclaim") == 0)
        return cmd_reclaim(argc, argv);
    if (strcmp(cmd, "boot") == 0)
        return cmd_boot(argc, argv);
    if (strcmp(cmd, "ac") == 0)
        return cmd_ac(argc, argv);
    if (strcmp(cmd, "cycle-result") == 0)
        return cmd_cycle_result(argc, argv);
    die("unknown command %s", cmd);
    return 1;
}
