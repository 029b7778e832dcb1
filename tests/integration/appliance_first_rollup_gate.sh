#!/usr/bin/env bash
# appliance_first_rollup_gate.sh — with the real cycle deciding: machines a
# restarted shard finds Configured at the provider (their assignment restored
# from the shard_metadata echo) are never reclaimed for a cluster that has
# not sent its first rollup since the shard started (ADR-0036); once the
# cluster's rollup claims them they stay; when the demand is withdrawn (an
# empty full-replacement rollup) the provider path drains them back to Idle.
# A cluster that never sent a rollup keeps its machines throughout.
# bf_actuate's `rollup` stands in for the session (operators' rollups) until
# the session process lands; the cycle is the real one.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/provider_lib.bash"
ID=$(new_id gate)
cat >"$TMP/cat.csv" <<EOT
type,cpu_milli,memory_mib,gpu,model,capacity_type,price_per_hour,interruption_probability
std-4,4000,16384,0,,on-demand,0.20,0
EOT
# 4 Configured machines bound round-robin to cluster-0 and cluster-1
start_sim sim --catalog "$TMP/cat.csv" --seed-configured 4 --seed-clusters 2 --seed-speculative 0
start_appliance --provider-addr "$SIM_ADDR" --cycle-interval 250ms --reclaim-cap-fraction 0
A wait-ready --timeout 15 || fail "no first reconcile"
view dump
[ "$(grep -c "state=Configured cluster=cluster-0 .*prio=1000000 ipb=16 rpb=19" "$TMP/view")" = 2 ] &&
[ "$(grep -c "state=Configured cluster=cluster-1 " "$TMP/view")" = 2 ] ||
    fail "seeded bindings not restored: $(cat "$TMP/view")"
cycles() { view stats && sed -n 's/cycle.count=//p' "$TMP/view"; }
reclaims() { view stats && { sed -n 's/outcome.Reclaim.success=//p' "$TMP/view"; echo 0; } | head -1; }
c0=$(cycles)
sleep 2.5
c1=$(cycles)
[ $((c1 - c0)) -ge 5 ] || fail "the cycle is not running (cycles $c0 -> $c1)"
[ "$(A count --state Configured)" = 4 ] && [ "$(reclaims)" = 0 ] ||
    fail "machines reclaimed before any rollup: $(grep -c Configured "$TMP/view") Configured"
pass "no rollup yet: $((c1 - c0)) cycles, nothing reclaimed (the first-rollup gate is closed)"

# cluster-0's first rollup: demand for exactly its two machines (the profile they serve)
NEED=(--priority 1000000 --ipb 16 --rpb 19 --req node.kubernetes.io/instance-type:In:std-4)
A rollup --cluster cluster-0 --count 2 --cpu 4 --memory 16Gi "${NEED[@]}" || fail "rollup"
sleep 2
[ "$(A count --state Configured)" = 4 ] && [ "$(reclaims)" = 0 ] ||
    fail "claimed machines were reclaimed"
pass "cluster-0 rolled up demand for its 2 machines: they are claimed, nothing reclaimed"

A rollup --cluster cluster-0 || fail "empty rollup"
wait_for 15 bash -c "[ \$('$ACT' --id '$ID' count --state Idle) = 2 ]" ||
    fail "withdrawn demand not reclaimed: $(A count --state Idle) Idle"
A wait-quiet --timeout 10 || fail "reclaims still in flight"
view dump
[ "$(grep -c "state=Idle cluster= " "$TMP/view")" = 2 ] || fail "cluster-0 machines not drained to Idle"
[ "$(grep -c "state=Configured cluster=cluster-1 " "$TMP/view")" = 2 ] || fail "cluster-1 (no rollup) lost machines"
[ "$(reclaims)" = 2 ] || fail "expected exactly 2 Reclaims, got $(reclaims)"
[ "$(sim_stat accepted drain)" = 2 ] || fail "provider drains: $(sim_stat accepted drain)"
pass "demand withdrawn: cluster-0's 2 machines reclaimed through Drain; cluster-1 (no rollup) untouched"
kill -TERM "$SUP"
wait_for 5 no_procs "$ID" || fail "appliance did not stop"
