#!/usr/bin/env bash
# host_reload.sh — SIGHUP reloads the configuration file without a restart
# (docs/operating.md "Reload"), on the real appliance with real operator
# demand (grpc-js) over the embedded simulated provider:
#   1. demand is executed while --actuation-paused is false;
#   2. the file flips actuation-paused = true (and asks for a new
#      cycle-interval, which needs a restart), SIGHUP: the epoch and every
#      process id are unchanged, /metrics shows paused=1 and one applied
#      reload with one refused change, and new demand is decided but nothing
#      executes (suppressed in /metrics and in the audit log);
#   3. an invalid file: refused, counted, nothing changes;
#   4. the audit log is moved away (rotation) and the file un-pauses and
#      sets log-level = debug: SIGHUP reopens the audit log at its path, the
#      held demand executes, and the children log at debug.
source "$(dirname "$0")/lib.bash"
REPO=$(cd "$(dirname "$0")/../.." && pwd)
command -v node >/dev/null || { echo "skip: node not found"; exit 77; }
export PROTO_DIR=$REPO/proto
OPJS=$REPO/tests/integration/metrics_operator.js
ID=$(new_id reload); GRPC=$(free_port); HTTP=$(free_port); SIMP=$(free_port)
URL="http://127.0.0.1:$HTTP"
CONF=$TMP/shardd.conf
AUDIT=$TMP/audit.jsonl
metric() { curl -sf "$URL/metrics" | awk -v k="$1" '$1 == k {print $2}'; }
sum_metric() { curl -sf "$URL/metrics" | awk -v p="$1" 'index($1, p) == 1 {s += $2} END {print s + 0}'; }
pids() { for r in session reconciler cycle executor; do child_pid $r "$SUP"; done | tr '\n' ' '; }

cat >"$CONF" <<EOF
# written by host_reload.sh
[shardd]
actuation-paused = false
cycle-interval = 300ms
log-level = info
EOF
"$BIN/bigfleet-shardd" --config "$CONF" --id "$ID" --data-dir "$TMP/data" \
    --listen "127.0.0.1:$GRPC" --metrics-addr "127.0.0.1:$HTTP" --sim-listen "127.0.0.1:$SIMP" \
    --sim-args "--seed-idle 6 --seed-configured 0" --max-machines 4096 --max-needs 1024 \
    --max-clusters 16 --audit-log "$AUDIT" >"$TMP/log" 2>&1 &
SUP=$!; PIDS+=("$SUP")
wait_for 15 curl -sf "$URL/readyz" || fail "not ready: $(tail -5 "$TMP/log")"
node "$OPJS" "127.0.0.1:$GRPC" c1 '[{"priority":1000,"cpu":4,"types":["m6i.large"]}]' 120 \
    >"$TMP/op1" 2>&1 &
PIDS+=("$!")
wait_for 10 grep -q ACK "$TMP/op1" || fail "c1 rollup not acknowledged: $(cat "$TMP/op1")"
wait_for 20 bash -c "curl -sf '$URL/metrics' | grep -q '^bigfleet_shard_action_execute_outcomes_total{kind=\"Bootstrap\",outcome=\"success\"} [1-9]'" ||
    fail "c1's demand was not executed"
pass "demand executed while actuation is not paused"

EPOCH=$(metric bigfleet_appliance_shard_epoch); BEFORE=$(pids)
[ -n "$EPOCH" ] && [ "$(echo "$BEFORE" | wc -w)" = 4 ] || fail "epoch/pids: $EPOCH / $BEFORE"
sed -i 's/^actuation-paused = false/actuation-paused = true/; s/^cycle-interval = 300ms/cycle-interval = 5s/' "$CONF"
kill -HUP "$SUP"
wait_for 5 bash -c "curl -sf '$URL/metrics' | grep -q '^bigfleet_shard_actuation_paused 1$'" ||
    fail "paused not 1 after SIGHUP: $(grep -i reload "$TMP/log" | tail -3)"
[ "$(metric 'bigfleet_appliance_config_reloads_total{result="applied"}')" = 1 ] || fail "reload not counted"
[ "$(metric 'bigfleet_appliance_config_reload_changes_total{result="applied"}')" = 1 ] || fail "applied changes"
[ "$(metric 'bigfleet_appliance_config_reload_changes_total{result="needs_restart"}')" = 1 ] || fail "refused changes"
grep -q 'msg="configuration changed" setting=actuation-paused from="false" to="true"' "$TMP/log" ||
    fail "the change is not logged"
grep -q 'needs a restart.*setting=cycle-interval' "$TMP/log" || fail "the refused change is not logged"
OUT0=$(sum_metric bigfleet_shard_action_execute_outcomes_total)
CYC0=$(metric bigfleet_appliance_cycles_total)
node "$OPJS" "127.0.0.1:$GRPC" c2 '[{"priority":1000,"cpu":8,"types":["r6i.xlarge"]}]' 120 \
    >"$TMP/op2" 2>&1 &
PIDS+=("$!")
wait_for 10 grep -q ACK "$TMP/op2" || fail "c2 rollup not acknowledged"
wait_for 20 bash -c "[ \"\$(curl -sf '$URL/metrics' | awk 'index(\$1, \"bigfleet_shard_actions_suppressed_total\") == 1 {s += \$2} END {print s + 0}')\" -gt 0 ]" ||
    fail "new demand was not decided (suppressed) after the flip"
CYC1=$(metric bigfleet_appliance_cycles_total)
[ "$CYC1" -gt "$((CYC0 + 1))" ] || fail "cycles did not keep running: $CYC0 -> $CYC1"
sleep 1
OUT1=$(sum_metric bigfleet_shard_action_execute_outcomes_total)
[ "$OUT0" = "$OUT1" ] || fail "actions executed while paused: outcomes $OUT0 -> $OUT1"
grep -q '"outcome":"suppressed"' "$AUDIT" || fail "no suppressed record in the audit log"
[ "$(metric bigfleet_appliance_shard_epoch)" = "$EPOCH" ] || fail "epoch changed"
[ "$(pids)" = "$BEFORE" ] || fail "processes replaced: $BEFORE -> $(pids)"
[ "$(grep -c 'first reconcile complete' "$TMP/log")" = 1 ] || fail "a new reconciler started from scratch"
pass "SIGHUP flipped actuation-paused without a restart: epoch $EPOCH and pids unchanged, /metrics paused=1, cycles $CYC0 -> $CYC1 decided and executed nothing (outcomes stay $OUT0); the cycle-interval change was refused and logged"

echo "lisen = :1" >>"$CONF"
kill -HUP "$SUP"
wait_for 5 bash -c "curl -sf '$URL/metrics' | grep -q '^bigfleet_appliance_config_reloads_total{result=\"failed\"} 1$'" ||
    fail "invalid file not counted"
[ "$(metric bigfleet_appliance_config_last_reload_success)" = 0 ] || fail "last reload success not 0"
[ "$(metric bigfleet_shard_actuation_paused)" = 1 ] || fail "an invalid file changed a value"
grep -q 'configuration reload refused.*unknown setting' "$TMP/log" || fail "refusal not logged"
pass "an invalid file is refused (logged, counted) and changes nothing"

# rotation: rename, SIGHUP (the file otherwise unchanged but for the log level);
# the executor reopens at the path within its 100 ms tick
mv "$AUDIT" "$AUDIT.1"
sed -i 's/^log-level = info/log-level = debug/; /^lisen/d; s/^cycle-interval = 5s/cycle-interval = 300ms/' "$CONF"
kill -HUP "$SUP"
wait_for 5 test -e "$AUDIT" || fail "the audit log was not reopened at its path"
wait_for 5 grep -q 'msg="audit log reopened"' "$TMP/log" || fail "reopen not logged"
[ "$(metric bigfleet_shard_actuation_paused)" = 1 ] || fail "the rotation reload changed the kill switch"
sed -i 's/^actuation-paused = true/actuation-paused = false/' "$CONF"
kill -HUP "$SUP"
wait_for 20 bash -c "[ \"\$(curl -sf '$URL/metrics' | awk 'index(\$1, \"bigfleet_shard_action_execute_outcomes_total\") == 1 {s += \$2} END {print s + 0}')\" -gt $OUT1 ]" ||
    fail "held demand not executed after un-pausing"
wait_for 5 grep -q '"outcome":"success"' "$AUDIT" || fail "no executed record in the reopened audit log"
[ "$(metric 'bigfleet_appliance_log_level{level="debug"}')" = 1 ] || fail "log level metric"
wait_for 5 grep -q 'level=debug role=cycle' "$TMP/log" || fail "the cycle does not log at debug"
[ "$(pids)" = "$BEFORE" ] || fail "processes replaced"
pass "rotation: SIGHUP reopened the audit log at its path; un-paused demand executes; log level debug reached the children"
kill -TERM "$SUP"
wait_for 8 no_procs "$ID" || fail "did not stop"
