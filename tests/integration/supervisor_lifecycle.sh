#!/usr/bin/env bash
# supervisor_lifecycle.sh — bigfleet-shardd starts its four named children,
# refuses a second appliance with the same --id, restarts any child killed
# with SIGKILL within 1 s, reclaims stale segments after a supervisor crash,
# and on SIGTERM stops every process within 5 s leaving nothing in /dev/shm.
source "$(dirname "$0")/lib.bash"
ID=$(new_id sup)
ARGS=(--id "$ID" --data-dir "$TMP/data" --provider-addr 127.0.0.1:1 --listen 127.0.0.1:0
      --metrics-addr 0 --max-machines 20000 --max-needs 4096 --max-clusters 64)

"$BIN/bigfleet-shardd" --help >"$TMP/help" || fail "--help failed"
grep -q -- "--execute-concurrency" "$TMP/help" || fail "--help lacks flags"
"$BIN/bigfleet-shardd" --no-such-flag 2>"$TMP/err"; rc=$?
[ $rc -eq 2 ] && grep -q -- "--no-such-flag" "$TMP/err" || fail "unknown flag: rc=$rc"
pass "usage errors exit 2 naming the flag"

"$BIN/bigfleet-shardd" "${ARGS[@]}" >"$TMP/log" 2>&1 &
SUP=$!; PIDS+=("$SUP")
for r in session reconciler cycle executor; do
    wait_for 5 has_child $r $SUP || fail "child $r did not start"
done
pass "supervisor $SUP runs bf-session, bf-reconciler, bf-cycle, bf-executor"
[ -e "/dev/shm/bigfleet.$ID.inventory" ] || fail "no inventory segment"

"$BIN/bigfleet-shardd" "${ARGS[@]}" 2>"$TMP/err2"; rc=$?
[ $rc -ne 0 ] && grep -q "another appliance with --id $ID is running" "$TMP/err2" ||
    fail "second appliance with the same id was not refused (rc=$rc)"
pass "a second appliance with the same --id is refused"

for r in session reconciler cycle executor; do
    old=$(child_pid $r $SUP)
    kill -KILL "$old"
    t0=$(date +%s%N)
    wait_for 1 has_new_child $r $SUP "$old" ||
        fail "no new $r within 1 s"
    echo "  $r restarted in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
done
pass "every child killed with SIGKILL is replaced within 1 s"

# crash of the supervisor itself: children die with it (PDEATHSIG), segments stay stale
kill -KILL "$SUP"
wait_for 5 no_procs "$ID" || fail "children outlived the supervisor: $(procs_of "$ID")"
[ -e "/dev/shm/bigfleet.$ID.inventory" ] || fail "expected stale segments after a crash"
"$BIN/bigfleet-shardd" "${ARGS[@]}" >"$TMP/log2" 2>&1 &
SUP=$!; PIDS+=("$SUP")
wait_for 5 has_child executor $SUP || fail "restart after crash failed"
grep -q "reclaimed stale segments" "$TMP/log2" || fail "stale segments not reported as reclaimed"
grep -q "epoch=2" "$TMP/log2" || fail "epoch did not advance on restart"
pass "stale segments of a dead appliance are reclaimed; epoch advanced to 2"

t0=$(date +%s%N)
kill -TERM "$SUP"
wait_for 5 no_procs "$ID" || fail "processes left 5 s after SIGTERM: $(procs_of "$ID")"
echo "  stopped in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
# (a test of names, not `ls | grep -q`: under pipefail a long /dev/shm makes
# ls die of SIGPIPE when grep stops early, and the pipeline fails)
left=$(compgen -G "/dev/shm/bigfleet.$ID.*")
[ -n "$left" ] && fail "segments left in /dev/shm: $left"
pass "SIGTERM stops every process within 5 s and leaves nothing in /dev/shm"
