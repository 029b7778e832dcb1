# tests/integration/lib.sh — helpers for the integration tests (sourced).
# Provides: fail, pass, wait_for, child_pid ROLE SUPERVISOR_PID, new_id,
# notify_listener, cleanup trap that stops every process this test started.
set -uo pipefail
# Tests and the demo run as root (CI): the appliance refuses root children
# unless told (docs/operating.md "Least privilege"); keep them root here so the
# suites behave the same whether or not a bigfleet account exists.
if [ "$(id -u)" = 0 ]; then
    export BIGFLEET_SHARDD_USER="${BIGFLEET_SHARDD_USER-root}"
    export BIGFLEET_SHARDD_ALLOW_ROOT="${BIGFLEET_SHARDD_ALLOW_ROOT-true}"
fi
BIN=${BIN:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../../build/bin" && pwd)}
SHARED=${SHARED:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../../../shared" 2>/dev/null && pwd)}
TMP=$(mktemp -d /tmp/bf-it.XXXXXX)
PIDS=()
fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok: $*"; }
# wait_for SECONDS CMD...: poll CMD every 50 ms
wait_for() {
    local t=$1; shift
    local end=$(( $(date +%s%N) + t * 1000000000 ))
    while [ "$(date +%s%N)" -lt "$end" ]; do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.05
    done
    return 1
}
# child_pid ROLE SUP_PID: pid of the child bf-ROLE of supervisor SUP_PID
child_pid() { ps -o pid=,comm= --ppid "$2" 2>/dev/null | awk -v c="bf-$1" '$2==c {print $1}'; }
new_id() { echo "it-$(basename "$TMP" | tr -dc 'a-zA-Z0-9')-$1"; }
# A port free right now, below the kernel's ephemeral range (scripts/free-port).
free_port() { "$(dirname "${BASH_SOURCE[0]}")/../../scripts/free-port"; }
cleanup() {
    for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -TERM "$p" 2>/dev/null; done
    sleep 0.3
    for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -KILL "$p" 2>/dev/null; done
    # segments of appliances this test started and could not stop cleanly
    local tag; tag=$(basename "$TMP" | tr -dc 'a-zA-Z0-9')
    rm -f /dev/shm/bigfleet.it-"$tag"-* 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
# procs_of ID: pids of appliance processes (comm bf-*) started with --id ID
procs_of() { ps -eo pid=,comm=,args= | awk -v id="$1" '$2 ~ /^bf-/ && index($0, "--id " id) {print $1}'; }
no_procs() { [ -z "$(procs_of "$1")" ]; }
# has_child ROLE SUP_PID: true once the supervisor has a live bf-ROLE child
has_child() { [ -n "$(child_pid "$1" "$2")" ]; }
# has_new_child ROLE SUP_PID OLD_PID: a bf-ROLE child other than OLD_PID exists
has_new_child() { local p; p=$(child_pid "$1" "$2"); [ -n "$p" ] && [ "$p" != "$3" ]; }
# notify_listener SOCK LOG TIMEOUT_S [OWNER_UID]: stands in for systemd's
# NOTIFY_SOCKET: a datagram socket at SOCK (chowned to OWNER_UID if given)
# whose messages go to LOG, one line each, prefixed by the seconds since the
# listener started, until STOPPING=1 arrives or TIMEOUT_S pass without one.
notify_listener() {
    python3 - "$1" "$3" "${4:-}" >"$2" <<'PY' &
import os, socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
if sys.argv[3]:
    os.chown(sys.argv[1], int(sys.argv[3]), -1)
s.settimeout(float(sys.argv[2]))
t0 = time.monotonic()
try:
    while True:
        msg = s.recv(4096).decode()
        print(f"{time.monotonic() - t0:.3f} {msg.replace(chr(10), ' ')}", flush=True)
        if "STOPPING=1" in msg:
            break
except socket.timeout:
    pass
PY
    PIDS+=("$!")
    wait_for 5 test -S "$1" || fail "notify listener did not start"
}
