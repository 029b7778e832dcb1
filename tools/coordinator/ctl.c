/*
 * ctl.c — `bigfleet-coordinator ctl`: an admin client of the Coordinator
 * service (the operator's bigfleetctl for the commands the main job and
 * docs/coordinator.md need). It tries each --coordinator address in turn
 * until one answers as the leader (a follower answers FAILED_PRECONDITION).
 * Output: one line per entry, space separated. Exit 0, 1 (RPC failed on
 * every address), 2 (usage).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigfleet/log.h"
#include "bigfleet/net.h"
#include "bigfleet/util.h"
#include "bigfleet/v1alpha1/coordinator.pb-c.h"

int co_ctl_main(int argc, char **argv);

struct result {
    bool done;
    int code;
    char message[512];
    uint8_t *resp;
    size_t len;
};

static void on_reply(void *arg, int code, const char *message, const uint8_t *resp, size_t len)
{
    struct result *r = arg;
    r->done = true;
    r->code = code;
    snprintf(r->message, sizeof r->message, "%s", message ? message : "");
    if (code == BF_NET_OK) {
        r->resp = malloc(len ? len : 1);
        if (r->resp) {
            memcpy(r->resp, resp, len);
            r->len = len;
        }
    }
}

/* One unary call on the first address that answers as the leader. */
static int call(const char *addrs, const char *method, const ProtobufCMessage *req,
                struct result *out)
{
    struct bf_net_loop *loop;
    if (bf_net_loop_new(NULL, &loop))
        return -1;
    char path[128];
    snprintf(path, sizeof path, "/bigfleet.v1alpha1.Coordinator/%s", method);
    char list[1024];
    snprintf(list, sizeof list, "%s", addrs);
    int rc = -1;
    for (char *save = NULL, *a = strtok_r(list, ",", &save); a; a = strtok_r(NULL, ",", &save)) {
        struct bf_net_client *cl;
        struct bf_net_client_opts o = {.addr = a, .connect_timeout_ns = 3 * BF_NS_PER_SEC};
        if (bf_net_client_new(loop, &o, &cl))
            continue;
        memset(out, 0, sizeof *out);
        if (!bf_net_client_unary_pb(cl, path, req, 5 * BF_NS_PER_SEC, on_reply, out)) {
            bf_net_client_free(cl);
            continue;
        }
        while (!out->done)
            bf_net_loop_run_once(loop, 100 * BF_NS_PER_MS);
        bf_net_client_free(cl);
        if (out->code == BF_NET_OK) {
            rc = 0;
            break;
        }
        if (out->code != BF_NET_FAILED_PRECONDITION && out->code != BF_NET_UNAVAILABLE &&
            out->code != BF_NET_DEADLINE_EXCEEDED)
            break; /* a real answer: do not ask the others */
    }
    bf_net_loop_free(loop);
    return rc;
}

int co_ctl_main(int argc, char **argv)
{
    const char *addrs = "127.0.0.1:7790";
    static const struct option opts[] = {{"coordinator", 1, NULL, 'c'}, {0}};
    int o;
    while ((o = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
        if (o == 'c')
            addrs = optarg;
        else
            return 2;
    }
    bf_log_init("ctl", BF_LOG_ERROR);
    if (optind >= argc) {
        fprintf(stderr, "bigfleet-coordinator ctl: no command (see --help)\n");
        return 2;
    }
    const char *cmd = argv[optind];
    char **a = argv + optind + 1;
    int na = argc - optind - 1;
    struct result r;
    int rc;
    if (!strcmp(cmd, "assign-domain") && na == 3) {
        Bigfleet__V1alpha1__AssignDomainRequest q = BIGFLEET__V1ALPHA1__ASSIGN_DOMAIN_REQUEST__INIT;
        q.topology_key = a[0];
        q.topology_value = a[1];
        q.shard_id = a[2];
        rc = call(addrs, "AssignDomain", &q.base, &r);
    } else if (!strcmp(cmd, "unassign-domain") && na == 2) {
        Bigfleet__V1alpha1__UnassignDomainRequest q =
            BIGFLEET__V1ALPHA1__UNASSIGN_DOMAIN_REQUEST__INIT;
        q.topology_key = a[0];
        q.topology_value = a[1];
        rc = call(addrs, "UnassignDomain", &q.base, &r);
    } else if (!strcmp(cmd, "assign-cluster") && na == 2) {
        Bigfleet__V1alpha1__AssignClusterRequest q =
            BIGFLEET__V1ALPHA1__ASSIGN_CLUSTER_REQUEST__INIT;
        q.cluster_id = a[0];
        q.shard_id = a[1];
        rc = call(addrs, "AssignCluster", &q.base, &r);
    } else if (!strcmp(cmd, "remove-shard") && na == 1) {
        Bigfleet__V1alpha1__RemoveShardRequest q = BIGFLEET__V1ALPHA1__REMOVE_SHARD_REQUEST__INIT;
        q.shard_id = a[0];
        rc = call(addrs, "RemoveShard", &q.base, &r);
    } else if (!strcmp(cmd, "list-shards") && na == 0) {
        Bigfleet__V1alpha1__ListShardsRequest q = BIGFLEET__V1ALPHA1__LIST_SHARDS_REQUEST__INIT;
        if ((rc = call(addrs, "ListShards", &q.base, &r)) == 0) {
            Bigfleet__V1alpha1__ListShardsResponse *p =
                bigfleet__v1alpha1__list_shards_response__unpack(NULL, r.len, r.resp);
            for (size_t i = 0; p && i < p->n_shards; i++)
                printf("%s %s %lld\n", p->shards[i]->shard_id, p->shards[i]->address,
                       (long long)p->shards[i]->last_heartbeat_unix_ns);
            if (p)
                bigfleet__v1alpha1__list_shards_response__free_unpacked(p, NULL);
        }
    } else if (!strcmp(cmd, "list-domains") && na == 0) {
        Bigfleet__V1alpha1__ListDomainAssignmentsRequest q =
            BIGFLEET__V1ALPHA1__LIST_DOMAIN_ASSIGNMENTS_REQUEST__INIT;
        if ((rc = call(addrs, "ListDomainAssignments", &q.base, &r)) == 0) {
            Bigfleet__V1alpha1__ListDomainAssignmentsResponse *p =
                bigfleet__v1alpha1__list_domain_assignments_response__unpack(NULL, r.len, r.resp);
            for (size_t i = 0; p && i < p->n_assignments; i++)
                printf("%s %s %s\n", p->assignments[i]->topology_key,
                       p->assignments[i]->topology_value, p->assignments[i]->shard_id);
            if (p)
                bigfleet__v1alpha1__list_domain_assignments_response__free_unpacked(p, NULL);
        }
    } else if (!strcmp(cmd, "list-clusters") && na == 0) {
        Bigfleet__V1alpha1__ListClusterAssignmentsRequest q =
            BIGFLEET__V1ALPHA1__LIST_CLUSTER_ASSIGNMENTS_REQUEST__INIT;
        if ((rc = call(addrs, "ListClusterAssignments", &q.base, &r)) == 0) {
            Bigfleet__V1alpha1__ListClusterAssignmentsResponse *p =
                bigfleet__v1alpha1__list_cluster_assignments_response__unpack(NULL, r.len, r.resp);
            for (size_t i = 0; p && i < p->n_assignments; i++)
                printf("%s %s\n", p->assignments[i]->cluster_id, p->assignments[i]->shard_id);
            if (p)
                bigfleet__v1alpha1__list_cluster_assignments_response__free_unpacked(p, NULL);
        }
    } else if (!strcmp(cmd, "list-quotas") && na == 0) {
        Bigfleet__V1alpha1__ListQuotasRequest q = BIGFLEET__V1ALPHA1__LIST_QUOTAS_REQUEST__INIT;
        if ((rc = call(addrs, "ListQuotas", &q.base, &r)) == 0) {
            Bigfleet__V1alpha1__ListQuotasResponse *p =
                bigfleet__v1alpha1__list_quotas_response__unpack(NULL, r.len, r.resp);
            for (size_t i = 0; p && i < p->n_allocations; i++)
                for (size_t j = 0; j < p->allocations[i]->n_per_shard; j++)
                    printf("%s %s %s %d\n", p->allocations[i]->provider, p->allocations[i]->region,
                           p->allocations[i]->per_shard[j]->key,
                           p->allocations[i]->per_shard[j]->value);
            if (p)
                bigfleet__v1alpha1__list_quotas_response__free_unpacked(p, NULL);
        }
    } else if (!strcmp(cmd, "list-reports") && na <= 1) {
        Bigfleet__V1alpha1__ListShardReportsRequest q =
            BIGFLEET__V1ALPHA1__LIST_SHARD_REPORTS_REQUEST__INIT;
        q.shard_id = na ? a[0] : "";
        if ((rc = call(addrs, "ListShardReports", &q.base, &r)) == 0) {
            Bigfleet__V1alpha1__ListShardReportsResponse *p =
                bigfleet__v1alpha1__list_shard_reports_response__unpack(NULL, r.len, r.resp);
            for (size_t i = 0; p && i < p->n_reports; i++) {
                const Bigfleet__V1alpha1__ShardReportSnapshot *s = p->reports[i];
                printf("%s cycle=%lld total=%d free=%d shortfalls=%zu\n", s->shard_id,
                       (long long)s->cycle, s->summary ? s->summary->total_machines : 0,
                       s->summary ? s->summary->free_machines : 0, s->n_shortfalls);
            }
            if (p)
                bigfleet__v1alpha1__list_shard_reports_response__free_unpacked(p, NULL);
        }
    } else {
        fprintf(stderr, "bigfleet-coordinator ctl: unknown command or wrong arguments: %s\n", cmd);
        return 2;
    }
    if (rc) {
        fprintf(stderr, "bigfleet-coordinator ctl: %s: %s: %s\n", cmd,
                r.done ? bf_net_code_name(r.code) : "no coordinator answered",
                r.done ? r.message : addrs);
    }
    free(r.done ? r.resp : NULL);
    return rc ? 1 : 0;
}
