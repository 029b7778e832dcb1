#!/usr/bin/env bash
# host_seccomp.sh — the real appliance with --seccomp: every child runs
# under its role's allow-list (Seccomp: 2 in /proc) and the appliance still
# does all of its work through the filters: operator demand over gRPC,
# provider actions executed, a SIGHUP (log level, audit log reopen), health
# and /metrics, a clean stop. No child is killed by the filter.
source "$(dirname "$0")/lib.bash"
REPO=$(cd "$(dirname "$0")/../.." && pwd)
command -v node >/dev/null || { echo "skip: node not found"; exit 77; }
grep -q '^Seccomp:' /proc/self/status || { echo "skip: kernel without seccomp"; exit 77; }
export PROTO_DIR=$REPO/proto
OPJS=$REPO/tests/integration/metrics_operator.js
ID=$(new_id secc); GRPC=$(free_port); HTTP=$(free_port); SIMP=$(free_port)
URL="http://127.0.0.1:$HTTP"
printf 'log-level = info\n' >"$TMP/conf"
"$BIN/bigfleet-shardd" --seccomp --config "$TMP/conf" --id "$ID" --data-dir "$TMP/data" \
    --listen "127.0.0.1:$GRPC" --metrics-addr "127.0.0.1:$HTTP" --sim-listen "127.0.0.1:$SIMP" \
    --sim-args "--seed-idle 4 --seed-configured 0" --cycle-interval 300ms --max-machines 4096 \
    --max-needs 256 --max-clusters 16 --audit-log "$TMP/audit.jsonl" \
    --coordinator-addr 127.0.0.1:1 >"$TMP/log" 2>&1 &
SUP=$!; PIDS+=("$SUP")
wait_for 15 curl -sf "$URL/readyz" || fail "not ready: $(tail -5 "$TMP/log")"
for r in session reconciler cycle executor; do
    p=$(child_pid "$r" "$SUP"); [ -n "$p" ] || fail "no $r"
    grep -q '^Seccomp:[[:space:]]*2$' "/proc/$p/status" || fail "$r not confined: $(grep Seccomp "/proc/$p/status")"
done
pass "session, reconciler, cycle and executor run under their seccomp allow-lists"

node "$OPJS" "127.0.0.1:$GRPC" c1 '[{"priority":1000,"cpu":4,"types":["m6i.large"]}]' 60 >"$TMP/op" 2>&1 &
PIDS+=("$!")
wait_for 10 grep -q ACK "$TMP/op" || fail "rollup not acknowledged: $(cat "$TMP/op")"
wait_for 20 bash -c "curl -sf '$URL/metrics' | grep -q '^bigfleet_shard_action_execute_outcomes_total{kind=\"Bootstrap\",outcome=\"success\"} [1-9]'" ||
    fail "demand not executed under the filters: $(grep -E 'killed|error' "$TMP/log" | tail -5)"
mv "$TMP/audit.jsonl" "$TMP/audit.1"
printf 'log-level = debug\n' >"$TMP/conf"
kill -HUP "$SUP"
wait_for 5 test -e "$TMP/audit.jsonl" || fail "audit log not reopened under the filter"
wait_for 5 grep -q 'level=debug role=cycle' "$TMP/log" || fail "log level not applied"
node -e "
const path = require('path');
const m = path.resolve('$REPO', 'tests', 'interop', 'node_modules');
const grpc = require(path.join(m, '@grpc/grpc-js'));
const h = require(path.join(m, 'grpc-health-check'));
const C = grpc.makeClientConstructor(h.service, 'H');
new C('127.0.0.1:$GRPC', grpc.credentials.createInsecure()).check({ service: '' }, (e, r) => {
  if (e || r.status !== 'SERVING') { console.error(e || r); process.exit(1); } process.exit(0); });
" || fail "health check under the filter"
grep -E 'child killed|signal=31' "$TMP/log" && fail "a child was killed: $(grep 'child killed' "$TMP/log")"
pass "demand executed, SIGHUP applied (audit reopen, log level), health SERVING, coordinator dialled: no child killed by its filter"
kill -TERM "$SUP"
wait "$SUP"; rc=$?
[ $rc = 0 ] || fail "exit $rc at stop"
grep -E 'child killed|signal=31' "$TMP/log" && fail "a child was killed while stopping"
wait_for 5 no_procs "$ID" || fail "processes left"
pass "clean stop under the filters"
