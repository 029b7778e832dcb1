#!/usr/bin/env bash
# appliance_spot_release.sh — with the real cycle deciding: an Idle machine
# nobody claims is released (Delete: Idle -> Deleting -> Speculative, host
# given back) once it has been idle longer than its capacity type's hold:
# SPOT after 60 s; ON_DEMAND (600 s) and BARE_METAL (forever) stay. The
# hold clock starts when the shard first saw the machine Idle (reconcile).
# Takes ~70 s: the spot hold is a constant (model.h BF_SPOT_IDLE_HOLD_S).
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/provider_lib.bash"
ID=$(new_id spot)
cat >"$TMP/cat.csv" <<EOT
type,cpu_milli,memory_mib,gpu,model,capacity_type,price_per_hour,interruption_probability
od-2,2000,8192,0,,on-demand,0.10,0
spot-2,2000,8192,0,,spot,0.03,0.05
metal-2,2000,8192,0,,bare-metal,0.05,0
EOT
start_sim sim --catalog "$TMP/cat.csv" --seed-idle 1 --seed-speculative 1 --zones 1
start_appliance --provider-addr "$SIM_ADDR" --cycle-interval 500ms
A wait-ready --timeout 15 || fail "no first reconcile"
t0=$(date +%s)
view dump
[ "$(grep -c "state=Idle" "$TMP/view")" = 3 ] || fail "expected 3 Idle machines: $(cat "$TMP/view")"
grep "^spot-2-" "$TMP/view" | grep -q "state=Idle .*ct=Spot" || fail "the spot machine is not typed Spot"
state_of() { view dump && grep "^$1 " "$TMP/view" | sed 's/.* state=\([A-Za-z]*\) .*/\1/'; }
sleep 45
[ "$(state_of spot-2-zone-a-0)" = Idle ] || fail "spot machine released before its 60 s hold ($(( $(date +%s) - t0 )) s)"
pass "45 s: the idle spot machine is still held"
wait_for 40 bash -c "'$ACT' --id '$ID' dump | grep '^spot-2-zone-a-0 ' | grep -q 'state=Speculative'" ||
    fail "spot machine not released after its hold: $(state_of spot-2-zone-a-0)"
el=$(( $(date +%s) - t0 ))
[ $el -ge 59 ] || fail "released after only $el s"
view dump
grep "^spot-2-zone-a-0 " "$TMP/view" | grep -q "host= " || fail "host not released"
[ "$(state_of od-2-zone-a-0)" = Idle ] && [ "$(state_of metal-2-zone-a-0)" = Idle ] ||
    fail "on-demand or bare-metal machine released too early"
view stats
grep -q "executor.idle_releases=1" "$TMP/view" || fail "idle release not counted: $(grep idle "$TMP/view")"
grep -q "outcome.Delete.success=1" "$TMP/view" || fail "Delete outcome: $(grep outcome "$TMP/view")"
[ "$(sim_stat by_state Speculative)" = 4 ] || fail "provider did not get the machine back"
pass "the idle spot machine was released after ${el} s (hold 60 s); on-demand and bare metal still held"
kill -TERM "$SUP"
wait_for 5 no_procs "$ID" || fail "appliance did not stop"
