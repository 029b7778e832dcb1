#!/usr/bin/env bash
# appliance_provider_path.sh — the whole provider path in the real processes,
# against the embedded bigfleet-simprovider the supervisor starts when
# --provider-addr is empty: the reconciler lists the pool (ready), actions
# pushed on the ACTIONS ring exactly as the cycle does (bf_actuate) walk
# machines Speculative -> Creating -> Idle -> Configuring -> Configured, back
# through Draining to Idle, and through Deleting to Speculative; spot
# machines carry their capacity type; every executed, suppressed and dry-run
# action lands in the JSONL audit log, one valid JSON object per line.
source "$(dirname "$0")/lib.bash"
ACT="$BIN/../tests/interop/bf_actuate"
[ -x "$ACT" ] || { echo "skip: $ACT not built"; exit 77; }
ID=$(new_id path)
SIMPORT=$(free_port)
CAT="$TMP/catalog.csv"
cat >"$CAT" <<EOF
type,cpu_milli,memory_mib,gpu,model,capacity_type,price_per_hour,interruption_probability
std-4,4000,16384,0,,on-demand,0.20,0
std-4-spot,4000,16384,0,,spot,0.07,0.05
EOF
"$BIN/bigfleet-shardd" --id "$ID" --data-dir "$TMP/data" --listen 127.0.0.1:0 --metrics-addr 0 \
    --max-machines 4096 --max-needs 1024 --max-clusters 16 --cycle-interval 24h \
    --local-bootstrap --audit-log "$TMP/audit.jsonl" --sim-listen "127.0.0.1:$SIMPORT" \
    --sim-args "--catalog $CAT --seed-speculative 12" >"$TMP/log" 2>&1 &
SUP=$!; PIDS+=("$SUP")
A() { "$ACT" --id "$ID" "$@"; }
# views captured to files first: `A dump | grep -q` under pipefail would
# fail on the SIGPIPE grep -q leaves behind
dump() { A dump >"$TMP/dump" && cat "$TMP/dump"; }
has() { local f=$1; shift; A "$f" >"$TMP/view" && grep -q "$@" "$TMP/view"; }
A wait-ready --timeout 15 || { tail -20 "$TMP/log"; fail "no first reconcile"; }
[ "$(A count --state Speculative)" = 24 ] || fail "expected 24 Speculative machines: $(A count --state Speculative)"
has dump "std-4-spot-zone-a-0 state=Speculative .*ct=Spot price=0.0700 p=0.050" ||
    fail "spot capacity type / price / probability not recorded: $(grep spot "$TMP/view" | head -2)"
pass "reconciler listed the embedded simulated provider (24 machines, spot typed)"

NEED=(--priority 5000 --ipb 16 --rpb 19 --req node.kubernetes.io/instance-type:In:std-4)
[ "$(A act-state --kind Provision --state Speculative --count 10 --cluster cl-a --reason phase1.speculative "${NEED[@]}")" = pushed=10 ] ||
    fail "could not push 10 Provision actions"
A wait-quiet --timeout 20 || fail "Provision actions still in flight"
[ "$(A count --state Configured)" = 10 ] || fail "expected 10 Configured: $(dump | grep -v Speculative)"
dump >/dev/null
grep "state=Configured" "$TMP/dump" | grep -v "cluster=cl-a .*prio=5000 ipb=16 rpb=19" &&
    fail "a Configured machine lacks its stamps"
pass "10 machines Speculative -> Configured through Create + Configure, stamped with the assignment"

[ "$(A act-state --kind Reclaim --state Configured --count 4 --grace 600 --reason phase3.excess)" = pushed=4 ] ||
    fail "could not push Reclaim"
A wait-quiet --timeout 20 || fail "Reclaim actions still in flight"
[ "$(A count --state Idle)" = 4 ] || fail "expected 4 Idle after Reclaim: $(dump | grep -v Speculative)"
dump >/dev/null
grep "state=Idle" "$TMP/dump" | grep -v "cluster= fp= group= prio=0" && fail "Assigned* not cleared by Drain"
has stats "ring.reclaim.pushes=4" || fail "no reclaim instruction for the operator: $(grep ring "$TMP/view")"
pass "4 machines Configured -> Draining -> Idle, assignment cleared, reclaim instructions queued first"

[ "$(A act-state --kind Delete --state Idle --count 4 --reason phase3.release)" = pushed=4 ] || fail "could not push Delete"
A wait-quiet --timeout 20 || fail "Delete actions still in flight"
[ "$(A count --state Speculative)" = 18 ] || fail "expected 18 Speculative after Delete: $(A count --state Speculative)"
has stats "executor.idle_releases=4" || fail "idle releases not counted: $(grep idle "$TMP/view")"
pass "4 machines Idle -> Deleting -> Speculative (host released, counted as idle releases)"

# audit-only dispositions and a reconcile that changes nothing
A act --kind Provision --machine std-4-zone-c-3 --cluster cl-a --disposition dryrun "${NEED[@]}" || fail "dry-run push"
A act --kind Delete --machine std-4-spot-zone-a-1 --disposition suppressed || fail "suppressed push"
A wait-quiet --timeout 10 || fail "audit-only actions not marked done"
has dump "^std-4-zone-c-3 state=Speculative" || fail "a dry-run action was executed: $(grep std-4-zone-c-3 "$TMP/view")"
out=$(A reconcile --timeout 10) || fail "reconcile request not served"
echo "$out" | grep -q "ok=1" || fail "reconcile failed: $out"
[ "$(A count --state Configured)" = 6 ] || fail "reconcile disturbed the inventory"
pass "dry-run and suppressed actions are audited only; a reconcile request is served (ok)"

n=$(wc -l <"$TMP/audit.jsonl")
[ "$n" -eq 20 ] || fail "expected 20 audit lines (10+4+4+2), got $n"
python3 - "$TMP/audit.jsonl" <<'EOF' || fail "audit log is not one JSON object per line with the documented keys"
import json, sys
keys = {"time", "level", "msg", "cycle", "kind", "machine", "cluster", "reason", "grace_seconds",
        "outcome", "serial", "decided_cycle", "duration_ms"}
outs = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    assert keys <= set(r), r
    assert r["msg"] == "action" and r["level"] == "INFO" and r["time"].endswith("Z"), r
    outs[(r["kind"], r["outcome"])] = outs.get((r["kind"], r["outcome"]), 0) + 1
want = {("Provision", "success"): 10, ("Reclaim", "success"): 4, ("Delete", "success"): 4,
        ("Provision", "dryrun"): 1, ("Delete", "suppressed"): 1}
assert outs == want, outs
EOF
pass "audit log: 20 JSONL records with every documented key and the right outcomes"
grep -q "level=error" "$TMP/log" && { grep "level=error" "$TMP/log" | head -5; fail "errors in the appliance log"; }
kill -TERM "$SUP"
wait_for 5 no_procs "$ID" || fail "appliance did not stop"
pass "clean stop"
