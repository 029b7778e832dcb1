#!/usr/bin/env bash
# appliance_provider_outage.sh — the provider is unreachable for 30 s (killed,
# then restarted on its persisted state): reconcile requests keep being
# answered within their bound (failed passes, readiness stays latched, the
# inventory is kept as it was: no removal, no state change), actions decided
# during the outage wait untouched and time out (nothing stranded in a
# transitional state, nothing failed), no drain ever reaches the provider (no
# reclaim storm), and after the provider returns one reconcile restores
# agreement and new actions complete (full recovery). Runs with
# --incremental-reconcile (the restarted provider invalidates the cursor).
# The provider is addressed by host name (localhost:PORT), so every
# reconnect of the reconciler and executor goes through the clients'
# off-loop name resolution.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/provider_lib.bash"
ID=$(new_id outage)
cat >"$TMP/cat.csv" <<EOT
type,cpu_milli,memory_mib,gpu,model,capacity_type,price_per_hour,interruption_probability
std-2,2000,8192,0,,on-demand,0.10,0
EOT
SIM_PORT=$(free_port)
SIMARGS=(--catalog "$TMP/cat.csv" --seed-speculative 30 --state "$TMP/simstate")
start_sim sim "${SIMARGS[@]}"
start_appliance --provider-addr "localhost:${SIM_ADDR##*:}" --execute-timeout 8s --reconcile-timeout 5s \
    --incremental-reconcile
A wait-ready --timeout 15 || fail "no first reconcile"
NEED=(--cluster cl-o --priority 500000 --ipb 12 --rpb 14)
A act-state --kind Provision --state Speculative --count 20 "${NEED[@]}" >/dev/null
A wait-quiet --timeout 20 || fail "initial provisioning did not finish"
[ "$(A count --state Configured)" = 20 ] || fail "setup: expected 20 Configured"
view dump; cut -d' ' -f1-7 "$TMP/view" | sort >"$TMP/before"
pass "setup: 20 Configured, 10 Speculative"

{ kill -KILL "$SIM_PID"; wait "$SIM_PID"; } 2>/dev/null
t0=$(date +%s)
echo "  provider killed; unreachable for 30 s"
sleep 1
# decided during the outage: 5 Provisions and 3 Reclaims
A act-state --kind Provision --state Speculative --count 5 "${NEED[@]}" >/dev/null
A act-state --kind Reclaim --state Configured --count 3 --grace 600 >/dev/null
worst=0
while [ $(( $(date +%s) - t0 )) -lt 30 ]; do
    s=$(date +%s%N)
    out=$(A reconcile --timeout 10) || fail "a reconcile request went unanswered during the outage"
    ms=$(( ($(date +%s%N) - s) / 1000000 )); [ $ms -gt $worst ] && worst=$ms
    echo "$out" | grep -q ok=0 || fail "a pass succeeded without a provider: $out"
    [ "$(transitional)" = 0 ] || fail "a machine went transitional during the outage: $(grep -E 'Creating|Draining' "$TMP/view" | head -2)"
    cut -d' ' -f1-7 "$TMP/view" | sort | cmp -s - "$TMP/before" || fail "the inventory changed during the outage"
    sleep 2
done
view stats
grep -q "first_reconcile_done=1" "$TMP/view" || fail "readiness regressed"
grep -q "outcome.Provision.ctx_canceled=5" "$TMP/view" && grep -q "outcome.Reclaim.ctx_canceled=3" "$TMP/view" ||
    fail "actions decided during the outage did not time out: $(grep outcome "$TMP/view")"
A wait-quiet --timeout 5 || fail "actions still in flight at the end of the outage"
pass "30 s outage: reconcile answered (worst ${worst} ms), inventory and states untouched, 8 actions timed out untouched"

start_sim sim "${SIMARGS[@]}"
echo "  provider restarted on its state"
ok=0
for i in $(seq 1 20); do
    A reconcile --timeout 10 | grep -q ok=1 && { ok=1; break; }
    sleep 0.5
done
[ $ok = 1 ] || fail "no successful reconcile after the provider returned"
view dump; cut -d' ' -f1-7 "$TMP/view" | sort | cmp -s - "$TMP/before" ||
    { diff <(cut -d' ' -f1-7 "$TMP/view" | sort) "$TMP/before" | head; fail "inventory differs after recovery"; }
grep -q "state=Failed" "$TMP/view" && fail "machines failed because of the outage"
[ "$(sim_stat accepted drain)" = 0 ] || fail "a drain reached the provider"
pass "recovered: one reconcile, inventory identical, nothing failed, no drain (no reclaim storm)"

A act-state --kind Provision --state Speculative --count 10 "${NEED[@]}" >/dev/null
A wait-quiet --timeout 20 || fail "post-recovery actions did not finish"
[ "$(A count --state Configured)" = 30 ] || fail "post-recovery: $(A count --state Configured) Configured"
pass "full recovery: new actions complete (30 Configured)"
kill -TERM "$SUP"
wait_for 5 no_procs "$ID" || fail "appliance did not stop"
