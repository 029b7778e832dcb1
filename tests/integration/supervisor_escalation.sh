#!/usr/bin/env bash
# supervisor_escalation.sh — systemd readiness (READY=1 on $NOTIFY_SOCKET
# once the children run, STOPPING=1 at stop), and crash-loop escalation: a
# child that keeps dying (--crash-loop-restarts within --crash-loop-window)
# makes the supervisor re-initialise every child and the shared segments
# (generation + 1), after which the appliance runs normally again.
source "$(dirname "$0")/lib.bash"
ID=$(new_id esc)
SOCK="$TMP/notify.sock"
notify_listener "$SOCK" "$TMP/notify.log" 60
NOTIFY_SOCKET="$SOCK" "$BIN/bigfleet-shardd" --id "$ID" --data-dir "$TMP/data" \
    --provider-addr 127.0.0.1:1 --listen 127.0.0.1:0 --metrics-addr 0 --max-machines 4096 \
    --max-needs 256 --max-clusters 16 --crash-loop-restarts 3 --crash-loop-window 30s \
    >"$TMP/log" 2>&1 &
SUP=$!; PIDS+=("$SUP")
wait_for 5 grep -q "READY=1" "$TMP/notify.log" || fail "no READY=1 on NOTIFY_SOCKET"
pass "READY=1 sent to NOTIFY_SOCKET"
for r in session reconciler cycle executor; do wait_for 5 has_child $r $SUP || fail "no $r"; done
for i in 1 2 3; do
    old=$(child_pid cycle $SUP)
    kill -KILL "$old"
    wait_for 2 has_new_child cycle $SUP "$old" || fail "cycle not restarted ($i)"
done
wait_for 5 grep -q "crash loop: re-initialising" "$TMP/log" || fail "no escalation after 3 fast restarts"
wait_for 5 grep -q "generation=1" "$TMP/log" || fail "segments not re-created with generation 1"
for r in session reconciler cycle executor; do wait_for 5 has_child $r $SUP || fail "no $r after re-initialisation"; done
pass "3 restarts of one child within the window escalate to a full re-initialisation (generation 1); all four children run again"
kill -TERM "$SUP"
wait_for 5 no_procs "$ID" || fail "processes left after SIGTERM"
wait_for 5 grep -q "STOPPING=1" "$TMP/notify.log" || fail "no STOPPING=1"
pass "STOPPING=1 sent at stop"
