#!/usr/bin/env bash
# host_least_privilege.sh — the children drop to --user (docs/operating.md
# "Least privilege"), with throwaway accounts created for the test and
# removed after it:
#   - the supervisor stays root; session, reconciler, cycle, executor and the
#     embedded provider run as the account, with no capabilities (effective,
#     permitted, bounding) and no_new_privs;
#   - the segments are 0600 and owned by the account: another unprivileged
#     user can neither read them nor attach bigfleet-inspect; the account
#     can; the data dir and its LMDB files belong to the account;
#   - --inspect-group makes them 0640 for that group: a member can inspect,
#     a non-member still cannot;
#   - root children are refused without --allow-root (exit 78), and so is
#     an unknown account;
#   - the lock file and the audit log are never opened through a symbolic
#     link.
source "$(dirname "$0")/lib.bash"
[ "$(id -u)" = 0 ] || { echo "skip: needs root (creates throwaway accounts)"; exit 77; }
for c in useradd userdel groupadd groupdel setpriv; do
    command -v "$c" >/dev/null || { echo "skip: $c not found"; exit 77; }
done
TAG=$(basename "$TMP" | tr -dc 'a-z0-9' | tail -c 6)
U=bfu$TAG; O=bfo$TAG; G=bfg$TAG
remove_accounts() {
    userdel "$U" 2>/dev/null; userdel "$O" 2>/dev/null; groupdel "$G" 2>/dev/null
}
trap 'cleanup; remove_accounts' EXIT
groupadd --system "$G" || fail "groupadd"
useradd --system --no-create-home --shell /usr/sbin/nologin "$U" || fail "useradd $U"
useradd --system --no-create-home --shell /usr/sbin/nologin "$O" || fail "useradd $O"
UID_U=$(id -u "$U"); UID_O=$(id -u "$O"); GID_O=$(id -g "$O"); GID_G=$(getent group "$G" | cut -d: -f3)
chmod 0711 "$TMP" # the account must reach its data dir and audit dir below $TMP
mkdir -p "$TMP/audit" && chown "$U" "$TMP/audit"
as_other() { setpriv --reuid="$UID_O" --regid="$GID_O" --clear-groups "$@"; }

ID=$(new_id lp); GRPC=$(free_port); HTTP=$(free_port); SIMP=$(free_port)
start() { # start ARGS...: the appliance as root with children as $U
    "$BIN/bigfleet-shardd" --id "$ID" --data-dir "$TMP/data" --listen "127.0.0.1:$GRPC" \
        --metrics-addr "127.0.0.1:$HTTP" --sim-listen "127.0.0.1:$SIMP" --user "$U" \
        --max-machines 4096 --max-needs 256 --max-clusters 16 --cycle-interval 500ms \
        --audit-log "$TMP/audit/audit.jsonl" "$@" >>"$TMP/log" 2>&1 &
    SUP=$!; PIDS+=("$SUP")
    wait_for 15 curl -sf "127.0.0.1:$HTTP/readyz" || fail "not ready: $(tail -5 "$TMP/log")"
}
stop() {
    kill -TERM "$SUP"; wait_for 8 no_procs "$ID" || fail "did not stop"
    wait "$SUP" 2>/dev/null
}

start
[ "$(ps -o uid= -p "$SUP" | tr -d ' ')" = 0 ] || fail "the supervisor is not root"
for r in session reconciler cycle executor; do
    p=$(child_pid "$r" "$SUP"); [ -n "$p" ] || fail "no $r"
    [ "$(ps -o uid= -p "$p" | tr -d ' ')" = "$UID_U" ] || fail "$r does not run as $U"
    st=/proc/$p/status
    for cap in CapEff CapPrm CapInh CapAmb CapBnd; do
        grep -q "^$cap:[[:space:]]*0000000000000000$" "$st" || fail "$r keeps capabilities: $(grep "^$cap" "$st")"
    done
    grep -q '^NoNewPrivs:[[:space:]]*1$' "$st" || fail "$r without no_new_privs"
done
sim=$(ps -o pid=,args= --ppid "$SUP" | awk '/bigfleet-simprovider/{print $1}')
[ "$(ps -o uid= -p "$sim" | tr -d ' ')" = "$UID_U" ] || fail "the embedded provider does not run as $U"
pass "children (and the embedded provider) run as $U with no capabilities and no_new_privs; the supervisor stays root"

for k in inventory needs rings state; do
    f=/dev/shm/bigfleet.$ID.$k
    [ "$(stat -c '%u %a' "$f")" = "$UID_U 600" ] || fail "$f: $(stat -c '%U %a' "$f")"
    as_other cat "$f" >/dev/null 2>"$TMP/cat.err" && fail "$O could read $f"
    grep -q "Permission denied" "$TMP/cat.err" || fail "unexpected: $(cat "$TMP/cat.err")"
done
as_other "$BIN/bigfleet-inspect" --id "$ID" >/dev/null 2>"$TMP/insp.err" && fail "$O could inspect"
grep -qi "permission denied" "$TMP/insp.err" || fail "inspect error unclear: $(cat "$TMP/insp.err")"
setpriv --reuid="$UID_U" --regid="$(id -g "$U")" --clear-groups "$BIN/bigfleet-inspect" --id "$ID" \
    >"$TMP/insp.ok" 2>&1 || fail "$U cannot inspect its own appliance: $(cat "$TMP/insp.ok")"
[ "$(stat -c '%u %a' "$TMP/data")" = "$UID_U 700" ] || fail "data dir: $(stat -c '%U %a' "$TMP/data")"
for f in "$TMP"/data/*; do
    [ "$(stat -c %u "$f")" = "$UID_U" ] || fail "$f owned by $(stat -c %U "$f")"
done
[ "$(stat -c '%u' "/dev/shm/bigfleet.$ID.lock")" = 0 ] || fail "lock file not the supervisor's"
pass "segments 0600 owned by $U: $O can neither read nor inspect them, $U can; data dir 0700 and its files belong to $U"

# the audit log is written by the account
wait_for 5 test -e "$TMP/audit/audit.jsonl" || true
stop
pass "stopped"

start --inspect-group "$G"
for k in inventory needs rings state; do
    f=/dev/shm/bigfleet.$ID.$k
    [ "$(stat -c '%u %g %a' "$f")" = "$UID_U $GID_G 640" ] || fail "$f: $(stat -c '%U %G %a' "$f")"
done
setpriv --reuid="$UID_O" --regid="$GID_O" --groups="$GID_G" "$BIN/bigfleet-inspect" --id "$ID" \
    >"$TMP/insp.g" 2>&1 || fail "a member of $G cannot inspect: $(cat "$TMP/insp.g")"
grep -q "machines" "$TMP/insp.g" || fail "inspect output: $(head -3 "$TMP/insp.g")"
as_other "$BIN/bigfleet-inspect" --id "$ID" >/dev/null 2>&1 && fail "a non-member could inspect"
stop
pass "--inspect-group $G: segments 0640, a member inspects, a non-member still cannot"

# refusals (the test runners' BIGFLEET_SHARDD_USER=root/ALLOW_ROOT are removed here)
env -u BIGFLEET_SHARDD_USER -u BIGFLEET_SHARDD_ALLOW_ROOT "$BIN/bigfleet-shardd" --id "$ID" \
    --data-dir "$TMP/data2" --listen 127.0.0.1:0 --metrics-addr 0 --user root 2>"$TMP/e1"
rc=$?
[ $rc = 78 ] && grep -q -- "--allow-root" "$TMP/e1" || fail "root children without --allow-root: rc=$rc $(cat "$TMP/e1")"
"$BIN/bigfleet-shardd" --id "$ID" --data-dir "$TMP/data2" --listen 127.0.0.1:0 --metrics-addr 0 \
    --user "nosuch$TAG" 2>"$TMP/e2"
rc=$?
[ $rc = 78 ] && grep -q "no such account" "$TMP/e2" || fail "unknown account: rc=$rc $(cat "$TMP/e2")"
[ -e "/dev/shm/bigfleet.$ID.state" ] && fail "a refused start left segments"
pass "root children without --allow-root and an unknown account: exit 78 with the reason, nothing created"

ID2=$(new_id lk)
ln -s "$TMP/victim" "/dev/shm/bigfleet.$ID2.lock"
"$BIN/bigfleet-shardd" --id "$ID2" --data-dir "$TMP/data3" --listen 127.0.0.1:0 --metrics-addr 0 \
    --user "$U" 2>"$TMP/e3"
rc=$?
rm -f "/dev/shm/bigfleet.$ID2.lock"
[ $rc = 1 ] && grep -q "symbolic link" "$TMP/e3" || fail "lock symlink: rc=$rc $(cat "$TMP/e3")"
[ -e "$TMP/victim" ] && fail "the lock symlink was followed"
ln -s "$TMP/victim2" "$TMP/audit/link.jsonl"
"$BIN/bigfleet-shardd" --id "$ID2" --data-dir "$TMP/data3" --listen "127.0.0.1:$GRPC" \
    --metrics-addr 0 --user "$U" --provider-addr 127.0.0.1:1 --audit-log "$TMP/audit/link.jsonl" \
    >"$TMP/e4" 2>&1
rc=$?
[ $rc = 78 ] && grep -q "cannot open the audit log" "$TMP/e4" || fail "audit symlink: rc=$rc $(tail -3 "$TMP/e4")"
[ -e "$TMP/victim2" ] && fail "the audit log symlink was followed"
pass "lock file and audit log are never opened through a symbolic link (exit 1 / 78)"
