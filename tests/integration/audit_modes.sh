#!/usr/bin/env bash
# audit_modes.sh — the decision audit log (--audit-log, docs/audit-log.md,
# reference/shard.md §6.7) written by the real appliance in its three modes,
# with the same operator demand each time (grpc-js, the real cycle over the
# embedded simulated provider):
#   normal             Bootstrap, Provision, then (demand withdrawn) Reclaim,
#                      executed: outcome "success", the machines move;
#   --dry-run          outcome "dryrun", nothing reaches the provider;
#   --actuation-paused outcome "suppressed", nothing reaches the provider.
# Every line must be one JSON object with the documented keys, in order,
# with the documented types and values; the counts must agree with
# /metrics (audit_records_total, actions_total / actions_dryrun_total /
# actions_suppressed_total per kind).
source "$(dirname "$0")/lib.bash"
REPO=$(cd "$(dirname "$0")/../.." && pwd)
command -v node >/dev/null || { echo "skip: node not found"; exit 77; }
export PROTO_DIR=$REPO/proto
OPJS=$REPO/tests/integration/metrics_operator.js
DEMAND='[{"priority":1000,"cpu":4,"types":["m6i.large"]},{"priority":500,"cpu":8,"types":["r6i.xlarge"]}]'

cat >"$TMP/check.py" <<'EOF'
# check.py MODE AUDIT METRICS: validates every audit line; prints per-kind counts
import json, re, sys
mode, audit, metrics = sys.argv[1:4]
KEYS = ['time', 'level', 'msg', 'cycle', 'kind', 'machine', 'cluster', 'reason', 'grace_seconds',
        'outcome', 'serial', 'decided_cycle', 'duration_ms']
OUTCOMES = {'success', 'ctx_canceled', 'fenced', 'no_session', 'transition_raced_to_idle',
            'transition_error', 'blob_error', 'provider_error', 'stale_state', 'inventory_miss',
            'missing_profile', 'other'}
REASON = {'Bootstrap': 'phase1.idle', 'Provision': 'phase1.speculative', 'Reclaim': 'phase3.excess',
          'Preempt': 'phase2.inversion', 'Delete': 'phase3.release'}
TIME = re.compile(r'^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z$')
raw = open(audit, 'rb').read()
assert raw.endswith(b'\n'), 'the last record is newline-terminated'
lines = raw.decode('utf-8').split('\n')[:-1]
assert lines, 'no audit records'
kinds, serials = {}, set()
for i, line in enumerate(lines):
    rec = json.loads(line)  # one complete object per line
    assert isinstance(rec, dict), line
    keys = list(rec.keys())
    want = KEYS + (['error'] if 'error' in rec else [])
    assert keys == want, f"line {i}: keys {keys}"
    assert TIME.match(rec['time']), rec['time']
    assert rec['level'] == 'INFO' and rec['msg'] == 'action'
    for k in ['cycle', 'serial', 'decided_cycle']:
        assert isinstance(rec[k], int) and rec[k] >= 1, (k, rec)
    assert rec['cycle'] >= rec['decided_cycle'], rec
    assert rec['kind'] in REASON, rec
    assert rec['reason'] == REASON[rec['kind']], rec
    assert isinstance(rec['machine'], str) and rec['machine'], rec
    assert rec['cluster'] == ('' if rec['kind'] == 'Delete' else 'c1'), rec
    assert isinstance(rec['grace_seconds'], (int, float)), rec
    assert (rec['grace_seconds'] > 0) == (rec['kind'] in ('Reclaim', 'Preempt')), rec
    assert isinstance(rec['duration_ms'], (int, float)) and rec['duration_ms'] >= 0, rec
    if mode == 'normal':
        assert rec['outcome'] in OUTCOMES, rec
        assert rec['outcome'] == 'success', f"unexpected outcome {rec}"
        assert 'error' not in rec
        assert rec['serial'] not in serials, f"duplicate serial without a restart: {rec}"
    else:
        assert rec['outcome'] == mode, rec
        assert rec['duration_ms'] == 0 and 'error' not in rec, rec
    serials.add(rec['serial'])
    kinds[rec['kind']] = kinds.get(rec['kind'], 0) + 1
vals = {}
for line in open(metrics):
    if line.strip() and not line.startswith('#'):
        s, v = line.rsplit(' ', 1)
        vals[s] = float(v)
assert vals['bigfleet_appliance_audit_records_total'] == len(lines), (vals['bigfleet_appliance_audit_records_total'], len(lines))
assert vals['bigfleet_appliance_audit_errors_total'] == 0
fam = {'normal': 'bigfleet_shard_actions_total', 'dryrun': 'bigfleet_shard_actions_dryrun_total',
       'suppressed': 'bigfleet_shard_actions_suppressed_total'}
for m, f in fam.items():
    for k in REASON:
        got = vals[f'{f}{{kind="{k}"}}']
        want = kinds.get(k, 0) if m == mode else 0
        assert got == want, f"{f}{{kind={k}}} = {got}, audit lines {want}"
if mode == 'normal':
    for k, n in kinds.items():
        assert vals[f'bigfleet_shard_action_execute_outcomes_total{{kind="{k}",outcome="success"}}'] == n, k
assert vals['bigfleet_shard_actuation_paused'] == (1 if mode == 'suppressed' else 0)
assert vals['bigfleet_appliance_dry_run'] == (1 if mode == 'dryrun' else 0)
print(' '.join(f"{k}={n}" for k, n in sorted(kinds.items())), f"lines={len(lines)}")
EOF

# run MODE FLAGS...: one appliance, the demand, wait, stop; leaves $TMP/MODE.{jsonl,metrics}
run() {
    local mode=$1; shift
    local id grpc http simp sup op url
    id=$(new_id "audit$mode"); grpc=$(free_port); http=$(free_port); simp=$(free_port)
    url="http://127.0.0.1:$http"
    "$BIN/bigfleet-shardd" --id "$id" --data-dir "$TMP/data-$mode" --listen "127.0.0.1:$grpc" \
        --metrics-addr "127.0.0.1:$http" --sim-listen "127.0.0.1:$simp" \
        --sim-args "--seed-idle 1 --seed-configured 0" \
        --cycle-interval 300ms --max-machines 4096 --max-needs 1024 --max-clusters 16 \
        --audit-log "$TMP/$mode.jsonl" "$@" >"$TMP/$mode.log" 2>&1 &
    sup=$!; PIDS+=("$sup")
    wait_for 15 curl -sf "$url/readyz" || fail "$mode: not ready: $(tail -5 "$TMP/$mode.log")"
    node "$OPJS" "127.0.0.1:$grpc" c1 "$DEMAND" 600 >"$TMP/$mode.op" 2>&1 &
    op=$!; PIDS+=("$op")
    wait_for 10 grep -q ACK "$TMP/$mode.op" || fail "$mode: rollup not acknowledged: $(cat "$TMP/$mode.op")"
    if [ "$mode" = normal ]; then
        # wait for the Provisions and Bootstraps to finish, then withdraw the demand
        wait_for 20 bash -c "curl -sf '$url/metrics' | grep -q '^bigfleet_shard_action_execute_outcomes_total{kind=\"Provision\",outcome=\"success\"} [1-9]'" ||
            fail "normal: no Provision executed"
        wait_for 20 bash -c "curl -sf '$url/metrics' | grep -q '^bigfleet_shard_action_execute_outcomes_total{kind=\"Bootstrap\",outcome=\"success\"} [1-9]'" ||
            fail "normal: no Bootstrap executed"
        node "$OPJS" "127.0.0.1:$grpc" c1 '[]' 600 >"$TMP/$mode.op2" 2>&1 &
        PIDS+=("$!")
        wait_for 10 grep -q ACK "$TMP/$mode.op2" || fail "normal: the empty rollup was not acknowledged"
        wait_for 30 bash -c "curl -sf '$url/metrics' >'$TMP/w' && ! grep -q '^bigfleet_shard_inventory_machines{state=\"\(Configured\|Draining\)\",.*} [1-9]' '$TMP/w'" ||
            fail "normal: the withdrawn demand's machines were not reclaimed"
        wait_for 10 bash -c "curl -sf '$url/metrics' | grep -q '^bigfleet_shard_execute_inflight 0\$'" || fail "normal: actions still in flight"
    else
        sleep 3 # ~10 cycles, each deciding the same audit-only actions again
    fi
    # freeze the cycle so the counters and the file can be compared: no new
    # decisions; the executor drains what is already on the ring
    local cyc
    cyc=$(child_pid cycle "$sup")
    [ -n "$cyc" ] || fail "$mode: no cycle process"
    kill -STOP "$cyc"
    wait_for 10 bash -c "curl -sf '$url/metrics' | grep -q '^bigfleet_appliance_ring_depth{ring=\"actions\"} 0\$'" ||
        fail "$mode: the executor did not drain the actions ring"
    sleep 0.3
    curl -sf "$url/metrics" >"$TMP/$mode.metrics" || fail "$mode: scrape"
    kill -CONT "$cyc"
    kill -TERM "$sup"
    wait_for 8 no_procs "$id" || fail "$mode: appliance did not stop"
    curl -sf "$url/metrics" >/dev/null 2>&1 && fail "$mode: still serving"
    grep -E 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$TMP/$mode.log" &&
        fail "$mode: sanitizer report in the appliance log"
    # records written after the scrape (the cycle resumed) are not counted in it
    head -n "$(awk '/^bigfleet_appliance_audit_records_total /{print $2}' "$TMP/$mode.metrics")" \
        "$TMP/$mode.jsonl" >"$TMP/$mode.cut" && mv "$TMP/$mode.jsonl" "$TMP/$mode.all" &&
        mv "$TMP/$mode.cut" "$TMP/$mode.jsonl"
    python3 -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1])]' "$TMP/$mode.all" ||
        fail "$mode: a line written after the scrape is not JSON"
    python3 "$TMP/check.py" "$mode" "$TMP/$mode.jsonl" "$TMP/$mode.metrics" >"$TMP/$mode.check" 2>&1 ||
        fail "$mode: $(cat "$TMP/$mode.check"); log: $(head -3 "$TMP/$mode.jsonl")"
}

run normal
grep -q 'Bootstrap=[1-9]' "$TMP/normal.check" && grep -q 'Provision=[1-9]' "$TMP/normal.check" &&
    grep -q 'Reclaim=[1-9]' "$TMP/normal.check" || fail "normal: kinds $(cat "$TMP/normal.check")"
pass "normal: every line valid, outcome success, matches /metrics ($(cat "$TMP/normal.check"))"

run dryrun --dry-run
grep -q 'Bootstrap=[1-9]' "$TMP/dryrun.check" && grep -q 'Provision=[1-9]' "$TMP/dryrun.check" ||
    fail "dryrun: kinds $(cat "$TMP/dryrun.check")"
pass "--dry-run: every line valid, outcome dryrun, matches /metrics ($(cat "$TMP/dryrun.check"))"

run suppressed --actuation-paused
grep -q 'Bootstrap=[1-9]' "$TMP/suppressed.check" && grep -q 'Provision=[1-9]' "$TMP/suppressed.check" ||
    fail "suppressed: kinds $(cat "$TMP/suppressed.check")"
pass "--actuation-paused: every line valid, outcome suppressed, matches /metrics ($(cat "$TMP/suppressed.check"))"

# nothing reached the provider in the audit-only modes: no machine left Idle/Speculative
for m in dryrun suppressed; do
    grep -E '^bigfleet_shard_inventory_machines\{state="(Configured|Configuring|Creating)"' "$TMP/$m.metrics" |
        grep -qv ' 0$' && fail "$m: machines moved: $(grep inventory_machines "$TMP/$m.metrics")"
done
pass "audit-only modes: no machine moved"
