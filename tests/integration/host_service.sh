#!/usr/bin/env bash
# host_service.sh — the appliance the way deploy/bigfleet-shardd.service runs
# it (there is no systemd PID 1 here: the test plays systemd's part):
#   - the whole service as an unprivileged account (User=), with the
#     packaged shardd.conf (--config) and NOTIFY_SOCKET + WATCHDOG_USEC;
#     ExecStartPre's --check-config passes;
#   - READY=1 (with MAINPID) only once both listeners accept and the cycle
#     requested the first reconcile; WATCHDOG=1 at least every
#     WatchdogSec/2; STOPPING=1 and exit 0 on SIGTERM, segments removed;
#   - the children run as that account too, segments 0600 owned by it;
#   - the exit statuses the unit's RestartPreventExitStatus= names: 2 for a
#     bad configuration file, 78 for a listener that cannot be bound, 69 when
#     a seccomp filter refuses io_uring (tests/interop/deny_io_uring);
#   - crash loops: full re-initialisations are capped
#     (--crash-loop-max-reinits), after which the supervisor exits 1.
source "$(dirname "$0")/lib.bash"
REPO=$(cd "$(dirname "$0")/../.." && pwd)
[ "$(id -u)" = 0 ] || { echo "skip: needs root (creates a throwaway account)"; exit 77; }
for c in useradd userdel setpriv python3; do
    command -v "$c" >/dev/null || { echo "skip: $c not found"; exit 77; }
done
TAG=$(basename "$TMP" | tr -dc 'a-z0-9' | tail -c 6)
U=bfs$TAG
trap 'cleanup; userdel "$U" 2>/dev/null' EXIT
useradd --system --no-create-home --shell /usr/sbin/nologin "$U" || fail "useradd"
UID_U=$(id -u "$U"); GID_U=$(id -g "$U")
chmod 0711 "$TMP"
mkdir -p "$TMP/state" "$TMP/logs" && chown "$U:$U" "$TMP/state" "$TMP/logs" # StateDirectory=, LogsDirectory=
AS_U=(setpriv --reuid="$UID_U" --regid="$GID_U" --clear-groups --reset-env)
as_u() { "${AS_U[@]}" "$@"; }

SOCK=$TMP/notify.sock
notify_listener "$SOCK" "$TMP/notify.log" 90 "$UID_U"

ID=$(new_id svc); GRPC=$(free_port); HTTP=$(free_port); SIMP=$(free_port)
FLAGS=(--config="$REPO/deploy/shardd.conf" --id "$ID" --data-dir "$TMP/state"
       --audit-log "$TMP/logs/audit.jsonl" --listen "127.0.0.1:$GRPC" --metrics-addr "127.0.0.1:$HTTP"
       --sim-listen "127.0.0.1:$SIMP" --max-machines 4096 --max-needs 256 --max-clusters 16
       --cycle-interval 500ms)
as_u "$BIN/bigfleet-shardd" "${FLAGS[@]}" --check-config >"$TMP/pre" 2>&1 ||
    fail "ExecStartPre --check-config: $(cat "$TMP/pre")"
grep -q "children run as $U" "$TMP/pre" || fail "check-config output: $(cat "$TMP/pre")"
pass "ExecStartPre: --check-config with the packaged shardd.conf, as $U"

# exec chain setpriv -> env -> shardd keeps one pid: $! is the supervisor's (MAINPID)
"${AS_U[@]}" env NOTIFY_SOCKET="$SOCK" WATCHDOG_USEC=2000000 "$BIN/bigfleet-shardd" "${FLAGS[@]}" \
    >"$TMP/log" 2>&1 &
SUP=$!; PIDS+=("$SUP")
wait_for 15 grep -q "READY=1" "$TMP/notify.log" || fail "no READY=1: $(tail -5 "$TMP/log")"
# READY=1 came after the listeners accepted and the first reconcile was requested
curl -sf "127.0.0.1:$HTTP/healthz" >/dev/null || fail "READY=1 before /healthz answers"
grep -q "READY=1.*MAINPID=$SUP" "$TMP/notify.log" || fail "READY=1 without MAINPID: $(cat "$TMP/notify.log")"
ready_line=$(grep -n 'msg="ready"' "$TMP/log" | head -1 | cut -d: -f1)
listen_line=$(grep -n 'role=session.*msg="started"' "$TMP/log" | head -1 | cut -d: -f1)
[ -n "$ready_line" ] && [ -n "$listen_line" ] || fail "ready/started lines missing"
curl -sf "127.0.0.1:$HTTP/metrics" >"$TMP/m1" || fail "no /metrics after READY=1"
grep -q '^bigfleet_appliance_cycles_total' "$TMP/m1" || fail "metrics lack cycles_total"
pass "READY=1 (MAINPID=$SUP) once the listeners accept and the first reconcile is requested"

for r in session reconciler cycle executor; do
    p=$(child_pid "$r" "$SUP"); [ -n "$p" ] || fail "no $r"
    [ "$(ps -o uid= -p "$p" | tr -d ' ')" = "$UID_U" ] || fail "$r not running as $U"
done
[ "$(ps -o uid= -p "$SUP" | tr -d ' ')" = "$UID_U" ] || fail "supervisor not running as $U"
for k in inventory needs rings state; do
    [ "$(stat -c '%u %a' "/dev/shm/bigfleet.$ID.$k")" = "$UID_U 600" ] || fail "segment $k"
done
pass "supervisor and children run as $U; segments 0600 owned by $U"

sleep 3
pings=$(grep -c "WATCHDOG=1" "$TMP/notify.log")
[ "$pings" -ge 3 ] || fail "only $pings WATCHDOG=1 in 3 s with WatchdogSec=2s"
# no gap between pings longer than WatchdogSec/2 (+ scheduling slack)
python3 - "$TMP/notify.log" <<'PY' || fail "watchdog gaps: $(grep WATCHDOG "$TMP/notify.log" | tail -5)"
import sys
t = [float(l.split()[0]) for l in open(sys.argv[1]) if 'WATCHDOG=1' in l]
gaps = [b - a for a, b in zip(t, t[1:])]
assert gaps and max(gaps) < 1.5, gaps
PY
curl -sf "127.0.0.1:$HTTP/metrics" >"$TMP/m2" || fail "no /metrics"
grep -q '^bigfleet_appliance_systemd_watchdog_pings_total [1-9]' "$TMP/m2" || fail "watchdog pings not counted"
pass "WATCHDOG=1 every WatchdogSec/2 or sooner ($pings in 3 s)"

kill -TERM "$SUP"
wait "$SUP"; rc=$?
[ $rc = 0 ] || fail "exit $rc after SIGTERM"
wait_for 5 grep -q "STOPPING=1" "$TMP/notify.log" || fail "no STOPPING=1"
wait_for 5 no_procs "$ID" || fail "processes left"
ls /dev/shm/bigfleet."$ID".* >/dev/null 2>&1 && fail "segments left"
pass "SIGTERM: STOPPING=1, exit 0, nothing left in /dev/shm"

# exit statuses named by RestartPreventExitStatus=2 69 78
printf 'listen = :1\nno-such-setting = 1\n' >"$TMP/bad.conf"
chmod 0644 "$TMP/bad.conf"
as_u "$BIN/bigfleet-shardd" --config="$TMP/bad.conf" --check-config >/dev/null 2>"$TMP/e1"; rc=$?
[ $rc = 2 ] && grep -q "bad.conf:2" "$TMP/e1" || fail "bad file: rc=$rc $(cat "$TMP/e1")"
python3 -c 'import socket,sys,time; s=socket.socket(); s.bind(("127.0.0.1",int(sys.argv[1]))); s.listen(); time.sleep(30)' "$GRPC" &
HOLD=$!; PIDS+=("$HOLD")
wait_for 5 bash -c "exec 3<>/dev/tcp/127.0.0.1/$GRPC" || fail "port holder"
as_u "$BIN/bigfleet-shardd" "${FLAGS[@]}" >"$TMP/e2" 2>&1; rc=$?
kill "$HOLD"
[ $rc = 78 ] && grep -q "cannot listen on --listen" "$TMP/e2" || fail "port in use: rc=$rc $(tail -3 "$TMP/e2")"
ls /dev/shm/bigfleet."$ID".* >/dev/null 2>&1 && fail "segments left by a refused start"
pass "exit 2 for an invalid configuration file (file:line named), 78 for a listener that cannot be bound"

# io_uring refused (a container runtime's seccomp profile): exit 69 at once, with the reason
DENY=$BIN/../tests/interop/deny_io_uring
if [ -x "$DENY" ]; then
    "$DENY" "$BIN/bigfleet-shardd" "${FLAGS[@]}" >"$TMP/e3" 2>&1; rc=$?
    [ $rc = 69 ] && grep -q "io_uring unavailable to account .*: Operation not permitted: a seccomp filter" "$TMP/e3" ||
        fail "io_uring refused: rc=$rc $(tail -3 "$TMP/e3")"
    ls /dev/shm/bigfleet."$ID".* >/dev/null 2>&1 && fail "segments left after the io_uring refusal"
    pass "io_uring refused by seccomp: exit 69 naming the cause ($(grep -o 'io_uring unavailable[^(]*' "$TMP/e3" | head -1)), nothing created, no restart loop"
else
    echo "note: $DENY not built; io_uring refusal not tested"
fi

# crash loops: 2 restarts within the window => reinit; at most 1 reinit => give up, exit 1
"${AS_U[@]}" "$BIN/bigfleet-shardd" "${FLAGS[@]}" --crash-loop-restarts 2 --crash-loop-window 30s \
    --crash-loop-max-reinits 1 >"$TMP/log3" 2>&1 &
SUP=$!; PIDS+=("$SUP")
wait_for 15 curl -sf "127.0.0.1:$HTTP/healthz" || fail "not up: $(tail -3 "$TMP/log3")"
kill_cycle() {
    local old; old=$(child_pid cycle "$SUP"); [ -n "$old" ] || return 1
    kill -KILL "$old"; wait_for 3 has_new_child cycle "$SUP" "$old"
}
for i in 1 2; do kill_cycle || fail "cycle not restarted ($i)"; done
wait_for 5 grep -q "crash loop: re-initialising" "$TMP/log3" || fail "no first re-initialisation"
for _ in 1 2 3; do kill_cycle || break; done
wait_for 10 bash -c "! kill -0 $SUP 2>/dev/null" || fail "supervisor did not give up"
wait "$SUP"; rc=$?
[ $rc = 1 ] && grep -q "giving up" "$TMP/log3" || fail "after the cap: rc=$rc $(tail -3 "$TMP/log3")"
wait_for 5 no_procs "$ID" || fail "processes left after giving up"
pass "a second crash loop beyond --crash-loop-max-reinits=1: the supervisor gives up with exit 1 (systemd restarts it, new epoch)"
