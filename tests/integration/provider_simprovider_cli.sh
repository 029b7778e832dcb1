#!/usr/bin/env bash
# provider_simprovider_cli.sh — bigfleet-simprovider as a program: --help
# lists the knobs, usage errors exit 2 naming the flag, the catalog and seed
# flags shape the pool (seen on /stats), the conformance-harness aliases are
# accepted, SIGTERM stops it cleanly (exit 0) within 3 s, and --state keeps
# the pool across a restart.
source "$(dirname "$0")/lib.bash"
SP="$BIN/bigfleet-simprovider"
"$SP" --help >"$TMP/help" || fail "--help exit code"
for f in --addr --catalog --seed-speculative "delete}-latency" "delete}-failure" \
         "list}-reply-latency" "list}-error" --max-hosts --spot-interruption-rate --state \
         --rpc-latency --tls-cert --http-addr; do
    grep -q -- "$f" "$TMP/help" || fail "--help does not list $f"
done
"$SP" --version | grep -q "bigfleet-simprovider" || fail "--version"
"$SP" --no-such-flag 2>"$TMP/err"; rc=$?
[ $rc -eq 2 ] && grep -q -- "--no-such-flag" "$TMP/err" || fail "unknown flag: rc=$rc $(cat "$TMP/err")"
"$SP" --create-failure 1.5 2>"$TMP/err"; rc=$?
[ $rc -eq 2 ] && grep -q -- "--create-failure" "$TMP/err" || fail "bad value: rc=$rc $(cat "$TMP/err")"
"$SP" --tls-cert /nonexistent 2>"$TMP/err"; rc=$?
[ $rc -eq 2 ] || fail "partial TLS flags accepted: rc=$rc"
pass "--help lists the knobs; usage errors exit 2 naming the flag"

cat >"$TMP/cat.csv" <<EOT
type,cpu_milli,memory_mib,gpu,model,capacity_type,price_per_hour,interruption_probability
a-1,1000,4096,0,,on-demand,0.05,0
b-1,1000,4096,0,,spot,0.02,0.1
EOT
run() {
    "$SP" --addr 127.0.0.1:0 --http-addr 127.0.0.1:0 "$@" >"$TMP/out" 2>"$TMP/log" &
    PID=$!; PIDS+=("$PID")
    wait_for 10 grep -q READY "$TMP/out" || { cat "$TMP/log"; fail "did not start"; }
    HTTP=$(sed -n 's/.*http=\([0-9]*\).*/\1/p' "$TMP/out")
}
stat() { curl -sf "http://127.0.0.1:$HTTP/stats" | python3 -c "import json,sys; v=json.load(sys.stdin); print(eval(sys.argv[1]))" "$1"; }
run --catalog "$TMP/cat.csv" --seed-count 5 --seed-idle 2 --seed-configured 1 --use-fake-backend \
    --state "$TMP/state" --zones 2
[ "$(stat 'v["machines"]')" = 16 ] || fail "pool size: $(stat 'v')"
[ "$(stat 'v["by_state"]["Configured"]')" = 2 ] && [ "$(stat 'v["by_state"]["Idle"]')" = 4 ] ||
    fail "seeding: $(stat 'v["by_state"]')"
t0=$(date +%s%N)
kill -TERM $PID; wait $PID; rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ $rc -eq 0 ] || fail "SIGTERM exit code $rc"
[ $ms -lt 3000 ] || fail "SIGTERM took $ms ms"
pass "catalog + seed flags shape the pool (16 machines: 2 Configured, 4 Idle, 10 Speculative); SIGTERM -> exit 0 in $ms ms"

run --catalog "$TMP/cat.csv" --seed-count 50 --state "$TMP/state"
[ "$(stat 'v["machines"]')" = 16 ] || fail "the persisted pool was not reloaded (seeding flags must be ignored)"
[ "$(stat 'v["by_state"]["Configured"]')" = 2 ] || fail "persisted states lost"
kill -TERM $PID; wait $PID
pass "--state: the pool survives a restart (seeding flags ignored when the state holds a pool)"
