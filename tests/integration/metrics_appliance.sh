#!/usr/bin/env bash
# metrics_appliance.sh — /metrics, /healthz and /readyz of the real appliance
# (supervisor + session, reconciler, cycle, executor and the embedded
# simulated provider) after a scripted run: an operator (grpc-js) sends
# demand that makes the real cycle Bootstrap and Provision machines and
# leaves one need unmet; a killed executor is restarted. Every scrape must
# pass `promtool check metrics` (exit 0), and the expected series of
# reference/shard.md §7 and the appliance's own must be present with sane
# values (docs/metrics.md).
source "$(dirname "$0")/lib.bash"
REPO=$(cd "$(dirname "$0")/../.." && pwd)
PROMTOOL=${PROMTOOL:-$REPO/.deps/prometheus/usr/bin/promtool}
[ -x "$PROMTOOL" ] || { echo "skip: promtool not found ($PROMTOOL); run scripts/install-deps"; exit 77; }
command -v node >/dev/null || { echo "skip: node not found"; exit 77; }
export PROTO_DIR=$REPO/proto
ID=$(new_id metrics)
GRPC=$(free_port); HTTP=$(free_port); SIMP=$(free_port)
"$BIN/bigfleet-shardd" --id "$ID" --data-dir "$TMP/data" --listen "127.0.0.1:$GRPC" \
    --metrics-addr "127.0.0.1:$HTTP" --sim-listen "127.0.0.1:$SIMP" \
    --sim-args "--seed-idle 1 --seed-configured 1" --cycle-interval 300ms \
    --max-machines 4096 --max-needs 1024 --max-clusters 16 --grpc-inbound-budget-mib 512 \
    --audit-log "$TMP/audit.jsonl" >"$TMP/appliance.log" 2>&1 &
SUP=$!; PIDS+=("$SUP")
URL="http://127.0.0.1:$HTTP"
wait_for 10 curl -sf "$URL/healthz" || fail "/healthz never answered: $(tail -20 "$TMP/appliance.log")"
wait_for 15 curl -sf "$URL/readyz" || fail "/readyz never ready: $(curl -s "$URL/readyz")"
[ "$(curl -s "$URL/healthz")" = ok ] || fail "/healthz body"
pass "/healthz and /readyz answer 200"

# scrape N: the exposition in $TMP/mN, checked by promtool (exit 0 = clean)
scrape() {
    curl -sf -D "$TMP/h$1" "$URL/metrics" >"$TMP/m$1" || fail "scrape $1 failed"
    grep -qi '^content-type: text/plain; version=0.0.4' "$TMP/h$1" || fail "content type: $(cat "$TMP/h$1")"
    "$PROMTOOL" check metrics <"$TMP/m$1" >"$TMP/p$1" 2>&1
    local rc=$?
    [ $rc -eq 0 ] || fail "promtool check metrics exit $rc on scrape $1: $(head -20 "$TMP/p$1")"
    pass "scrape $1: $(grep -c '^# TYPE' "$TMP/m$1") families, $(grep -vc '^#' "$TMP/m$1") samples, promtool check metrics clean"
}
# v FILE SERIES: the value of one exact series (empty when absent)
v() { awk -v s="$2" 'index($0, s " ") == 1 { print $NF; exit }' "$1"; }

scrape 1
[ "$(v "$TMP/m1" bigfleet_shard_ready)" = 1 ] || fail "ready gauge"
[ "$(v "$TMP/m1" bigfleet_shard_active_sessions)" = 0 ] || fail "sessions before any operator"

DEMAND='[{"priority":1000,"cpu":6,"types":["m6i.large"]},
         {"priority":500,"cpu":8,"types":["r6i.xlarge"],"ipb":16},
         {"priority":50,"cpu":1,"types":["no-such-type"]}]'
node "$REPO/tests/integration/metrics_operator.js" "127.0.0.1:$GRPC" c1 "$DEMAND" 600 \
    >"$TMP/op.out" 2>"$TMP/op.err" &
OP=$!; PIDS+=("$OP")
wait_for 10 grep -q ACK "$TMP/op.out" || fail "rollup not acknowledged: $(cat "$TMP/op.err")"
outcome() { curl -sf "$URL/metrics" | awk -v s="bigfleet_shard_action_execute_outcomes_total{kind=\"$1\",outcome=\"success\"}" 'index($0, s " ") == 1 {print $NF}'; }
wait_for 20 bash -c "[ \"\$(curl -sf '$URL/metrics' | grep -c 'outcomes_total{kind=\"Bootstrap\",outcome=\"success\"} [1-9]')\" = 1 ]" ||
    fail "no Bootstrap executed: $(grep outcomes_total "$TMP/m1" | head -3)"
wait_for 20 bash -c "[ \"\$(curl -sf '$URL/metrics' | grep -c 'outcomes_total{kind=\"Provision\",outcome=\"success\"} [1-9]')\" = 1 ]" ||
    fail "no Provision executed"
sleep 1 # a few more cycles over the settled state
scrape 2

python3 - "$TMP/m2" <<'EOF' || fail "series check on scrape 2"
import re, sys
fams, vals = {}, {}
for line in open(sys.argv[1]):
    line = line.rstrip('\n')
    if line.startswith('# TYPE '):
        _, _, name, typ = line.split(' ', 3)
        fams[name] = typ
    elif line and not line.startswith('#'):
        series, val = line.rsplit(' ', 1)
        vals[series] = float(val)
def need(name, typ):
    assert fams.get(name) == typ, f"{name}: family {fams.get(name)} (want {typ})"
def val(series):
    assert series in vals, f"missing series {series}"
    return vals[series]
def matching(prefix):
    return {k: v for k, v in vals.items() if k.startswith(prefix)}
# reference/shard.md §7
for n in ['cycle_duration_seconds', 'cycle_phase_duration_seconds', 'provisioning_latency_seconds',
          'configure_phase_seconds', 'request_bootstrap_seconds', 'drain_phase_seconds']:
    need('bigfleet_shard_' + n, 'histogram')
for n in ['actions_total', 'action_execute_outcomes_total', 'actions_deferred_total',
          'actions_dropped_total', 'actions_deduped_total', 'session_lifecycle_total',
          'session_identity_rejected_total', 'reclaims_capped_total', 'idle_releases_total',
          'actions_suppressed_total', 'actions_dryrun_total', 'machines_rejected_total',
          'rollups_rejected_total']:
    need('bigfleet_shard_' + n, 'counter')
for n in ['action_queue_depth', 'execute_inflight', 'inventory_machines', 'demand_machines',
          'shortfalls', 'shortfalls_aged', 'shortfalls_by_priority', 'active_sessions',
          'rollup_quarantined', 'actuation_paused']:
    need('bigfleet_shard_' + n, 'gauge')
cyc = val('bigfleet_shard_cycle_duration_seconds_count')
assert cyc >= 3, f"cycles observed {cyc}"
assert val('bigfleet_shard_cycle_duration_seconds_bucket{le="+Inf"}') == cyc
assert val('bigfleet_shard_cycle_duration_seconds_sum') > 0
b = [v for k, v in vals.items() if k.startswith('bigfleet_shard_cycle_duration_seconds_bucket{')]
assert b == sorted(b) and len(b) == 15, "cumulative, 14 bounds + Inf"
for p in ['reconcile', 'snapread', 'phase1', 'phase2', 'phase3', 'emit', 'execute']:
    assert val(f'bigfleet_shard_cycle_phase_duration_seconds_count{{phase="{p}"}}') >= 1, p
assert val('bigfleet_shard_actions_total{kind="Bootstrap"}') >= 1
assert val('bigfleet_shard_actions_total{kind="Provision"}') >= 1
assert val('bigfleet_shard_action_execute_outcomes_total{kind="Bootstrap",outcome="success"}') >= 1
assert len(matching('bigfleet_shard_action_execute_outcomes_total{')) == 5 * 12
assert val('bigfleet_shard_configure_phase_seconds_count') >= 1
assert val('bigfleet_shard_request_bootstrap_seconds_count') >= 1
assert val('bigfleet_shard_provisioning_latency_seconds_count') >= 1
inv = matching('bigfleet_shard_inventory_machines{')
assert sum(inv.values()) == val('bigfleet_appliance_result_machines') > 0, inv
assert any('state="Configured"' in k and 'interruption_penalty_bucket="8192"' in k and v > 0
           for k, v in inv.items()), f"the ipb-16 need's machines: {inv}"
dem = matching('bigfleet_shard_demand_machines{')
assert len(dem) == 27 and sum(dem.values()) == 3, dem
assert dem['bigfleet_shard_demand_machines{interruption_penalty_bucket="8192"}'] == 1
assert val('bigfleet_shard_shortfalls') == 1
assert sum(matching('bigfleet_shard_shortfalls_aged{').values()) == 1
assert val('bigfleet_shard_shortfalls_by_priority{priority_class="other"}') == 1
assert val('bigfleet_shard_active_sessions') == 1
assert val('bigfleet_shard_session_lifecycle_total{event="installed"}') == 1
assert val('bigfleet_shard_rollup_quarantined{cluster="c1"}') == 0
assert val('bigfleet_shard_rollups_rejected_total{cluster="c1"}') == 0
assert val('bigfleet_shard_actuation_paused') == 0
assert val('bigfleet_shard_action_queue_depth') >= 0
# the appliance's own
for r in ['session', 'reconciler', 'cycle', 'executor', 'simprovider']:
    assert val(f'bigfleet_appliance_process_up{{role="{r}"}}') == 1, r
    assert val(f'bigfleet_appliance_process_restarts_total{{role="{r}"}}') == 0, r
for r in ['session', 'reconciler', 'cycle', 'executor']:
    assert 0 <= val(f'bigfleet_appliance_process_heartbeat_age_seconds{{role="{r}"}}') < 10, r
for ring in ['actions', 'boot_req', 'node_exec', 'node_recon', 'reclaim', 'ac_hints']:
    assert 0 <= val(f'bigfleet_appliance_ring_depth{{ring="{ring}"}}') <= val(f'bigfleet_appliance_ring_capacity{{ring="{ring}"}}')
    assert val(f'bigfleet_appliance_ring_drops_total{{ring="{ring}"}}') == 0
assert val('bigfleet_appliance_ring_pushes_total{ring="actions"}') >= 2
assert val('bigfleet_appliance_cycles_total') >= cyc
assert val('bigfleet_appliance_reconcile_passes_total') >= 1
assert 0 < val('bigfleet_appliance_strings_bytes_used') < val('bigfleet_appliance_strings_bytes_capacity')
assert val('bigfleet_appliance_strings_intern_failures_total') == 0
assert val('bigfleet_appliance_full_reinits_total') == 0
assert val('bigfleet_appliance_result_cycle') >= 3
assert val('bigfleet_appliance_result_needs') == 3
assert val('bigfleet_appliance_result_unsatisfied_needs') == 1
assert val('bigfleet_appliance_audit_records_total') >= 2
assert val('bigfleet_shard_grpc_streams_open') >= 1
assert val('bigfleet_shard_grpc_inbound_budget_refusals_total') == 0
assert val('bigfleet_shard_grpc_inbound_buffered_bytes') >= 0
assert val('bigfleet_appliance_http_requests_total') >= 1
boots = int(val('bigfleet_shard_actions_total{kind="Bootstrap"}'))
provs = int(val('bigfleet_shard_actions_total{kind="Provision"}'))
print(f"ok: {len(fams)} families, {len(vals)} series; cycles={int(cyc)} bootstraps={boots} provisions={provs}")
EOF
pass "the §7 series and the appliance's own are present with sane values"

# a killed executor is restarted: restarts{executor} 1, up again
EX=$(child_pid executor "$SUP")
[ -n "$EX" ] || fail "no executor child"
kill -KILL "$EX"
wait_for 15 bash -c "curl -sf '$URL/metrics' | grep -q '^bigfleet_appliance_process_restarts_total{role=\"executor\"} 1\$'" ||
    fail "executor restart not counted"
wait_for 15 bash -c "curl -sf '$URL/metrics' | grep -q '^bigfleet_appliance_process_up{role=\"executor\"} 1\$'" ||
    fail "executor not back up"
scrape 3
[ "$(v "$TMP/m3" bigfleet_appliance_child_exits_total)" -ge 1 ] || fail "child exits"
pass "a killed executor: restarts{role=\"executor\"} 1, up again"

# readiness is latched and independent of the coordinator (none configured)
[ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/readyz")" = 200 ] || fail "/readyz after the restart"
kill -TERM "$OP" 2>/dev/null
kill -TERM "$SUP"
wait_for 8 no_procs "$ID" || fail "appliance did not stop"
grep -E 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$TMP/appliance.log" &&
    fail "sanitizer report in the appliance log"
pass "stopped"
