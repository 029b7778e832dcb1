#!/usr/bin/env bash
# appliance_executor_kill.sh — kill -9 of the executor while provider RPCs are
# in flight: the supervisor restarts it, the successor is redelivered the
# unreleased actions (a finished one is skipped, one that was mid-flight
# is flagged for refresh instead of being re-driven blind), it is not fenced
# out by its predecessor's marks (same epoch), no machine stays in a
# transitional state once reconcile ran, and re-deriving the actions (as the
# cycle does) brings every machine to Configured with exactly one Create and
# one Configure operation minted per machine at the provider: no double
# actuation.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/provider_lib.bash"
ID=$(new_id xkill)
N=40
cat >"$TMP/cat.csv" <<EOF
type,cpu_milli,memory_mib,gpu,model,capacity_type,price_per_hour,interruption_probability
std-8,8000,32768,0,,on-demand,0.40,0
EOF
# every reply held 250 ms: actions stay in flight long enough to be killed mid-way
start_sim sim --catalog "$TMP/cat.csv" --seed-speculative $N --rpc-latency 250ms
start_appliance --provider-addr "$SIM_ADDR" --execute-concurrency 16
A wait-ready --timeout 15 || fail "no first reconcile"
[ "$(A count --state Speculative)" = $N ] || fail "expected $N Speculative"

NEED=(--cluster cl-k --priority 100000 --ipb 10 --rpb 12)
[ "$(A act-state --kind Provision --state Speculative --count $N "${NEED[@]}")" = "pushed=$N" ] ||
    fail "could not push $N Provision actions"
wait_for 5 bash -c "'$ACT' --id '$ID' stats | grep -q 'executor.inflight=1[0-9]'" ||
    fail "actions never in flight"
sleep 0.05 # inside the first RPC (Create) of the first wave
XPID=$(child_pid executor "$SUP")
[ -n "$XPID" ] || fail "no executor"
view stats; inflight=$(sed -n 's/executor.inflight=//p' "$TMP/view")
kill -KILL "$XPID"
echo "  killed executor $XPID with $inflight actions in flight"
wait_for 5 bash -c "p=\$(ps -o pid=,comm= --ppid $SUP | awk '\$2==\"bf-executor\" {print \$1}'); [ -n \"\$p\" ] && [ \"\$p\" != $XPID ]" ||
    fail "executor not restarted"
pass "executor killed with $inflight RPCs in flight and restarted"

A wait-quiet --timeout 40 || fail "redelivered actions never finished"
out=$(A reconcile --timeout 20) && echo "$out" | grep -q ok=1 || fail "reconcile after the restart failed: $out"
[ "$(transitional)" = 0 ] || fail "machines left transitional after reconcile: $(grep -E 'Creating|Configuring' "$TMP/view" | head -3)"
echo "  after reconcile: $(grep -c "state=Configured" "$TMP/view") Configured, $(grep -c "state=Idle" "$TMP/view") Idle, $(grep -c "state=Speculative" "$TMP/view") Speculative"
pass "no machine stranded in a transitional state after the restart and one reconcile"

# re-derive, as the cycle would, until everything is Configured
rounds=0
for round in 1 2 3 4 5; do
    [ "$(A count --state Configured)" = $N ] && break
    rounds=$round
    A act-state --kind Provision --state Speculative --count $N "${NEED[@]}" >/dev/null
    A act-state --kind Bootstrap --state Idle --count $N "${NEED[@]}" >/dev/null
    A wait-quiet --timeout 40 || fail "round $round did not finish"
    A reconcile --timeout 20 >/dev/null || fail "reconcile failed in round $round"
done
[ "$(A count --state Configured)" = $N ] || fail "not all Configured: $(A count --state Configured)/$N"
view dump
grep "state=Configured" "$TMP/view" | grep -v "cluster=cl-k .*prio=100000 ipb=10 rpb=12" &&
    fail "a Configured machine lost its assignment"
pass "all $N machines Configured with their assignment after $rounds re-derive round(s)"

c=$(sim_stat accepted create); g=$(sim_stat accepted configure); f=$(sim_stat fenced)
echo "  provider: creates minted=$c configures minted=$g idempotent replays=$(sim_stat idempotent create)/$(sim_stat idempotent configure) fenced=$f"
[ "$c" = $N ] && [ "$g" = $N ] || fail "double actuation: $c Create and $g Configure operations for $N machines"
[ "$f" = 0 ] || fail "the restarted executor was fenced ($f rejections)"
[ "$(sim_stat by_state Configured)" = $N ] || fail "provider disagrees: $(cat "$TMP/simstats")"
view stats
grep -q "executor.restarts=1" "$TMP/view" || fail "restart not recorded"
pass "exactly one Create and one Configure per machine at the provider; never fenced"
kill -TERM "$SUP"
wait_for 5 no_procs "$ID" || fail "appliance did not stop"
