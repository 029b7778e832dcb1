#!/usr/bin/env bash
# inspect_appliance.sh — bigfleet-inspect against the REAL appliance:
# bigfleet-shardd (--provider-addr 127.0.0.1:1, --actuation-paused so no
# action changes what the test wrote) is started; the test's helper
# (`test_inspect fixture populate`, built from tests/unit/test_inspect.c)
# writes machines, in-flight marks, clusters and need rows into its segments
# and prints what it wrote. The appliance's own cycle then decides on them
# and publishes its results. bigfleet-inspect must show exactly what was
# written (summary text and --json parsed with jq), the cycle's published
# counts equal to its own scan, a verdict for every need row, the real
# process table, one machine's full record, and never write (checksums of
# the segments only the test writes unchanged; its mappings r--s). A missing
# shard id and a layout-version mismatch exit 1 with the message; stopping
# the appliance under --watch exits 1 with a message.
source "$(dirname "$0")/lib.bash"
T="$BIN/../tests/test_inspect"
I="$BIN/bigfleet-inspect"
[ -x "$I" ] || fail "$I not built"
[ -x "$T" ] || fail "$T not built"
command -v jq >/dev/null || { echo "skipped: jq not installed"; exit 77; }
ID=$(new_id insp)
ARGS=(--id "$ID" --data-dir "$TMP/data" --provider-addr 127.0.0.1:1 --listen 127.0.0.1:0
      --metrics-addr 0 --max-machines 20000 --max-needs 4096 --max-clusters 64
      --actuation-paused --cycle-interval 200ms --reconcile-timeout 20ms)

"$BIN/bigfleet-shardd" "${ARGS[@]}" >"$TMP/log" 2>&1 &
SUP=$!; PIDS+=("$SUP")
for r in session reconciler cycle executor; do
    # (re-evaluated on every poll: a $(child_pid) argument would be evaluated once)
    wait_for 5 bash -c "ps -o comm= --ppid $SUP | grep -qx bf-$r" ||
        fail "child $r did not start: $(grep -v 'msg="cycle"' "$TMP/log" | tail -5)"
done
# wait for every child to mark its slot active (first heartbeat)
wait_for 5 bash -c "[ \"\$('$I' --id '$ID' procs --json | jq '[.processes[] | select(.state==\"active\")] | length')\" = 4 ]" ||
    fail "children never became active: $("$I" --id "$ID" procs)"

# ---- an empty appliance: the real process table
"$I" --id "$ID" --json >"$TMP/s0.json" || fail "summary of an empty appliance failed"
jq -e '.machines.total == 0 and .clusters.total == 0 and .last_cycle.counts.total_machines == 0' "$TMP/s0.json" >/dev/null ||
    fail "empty appliance: $(jq -c '{m:.machines.total,c:.clusters.total,cy:.last_cycle.cycle}' "$TMP/s0.json")"
[ "$(jq -r '.shard.supervisor_pid' "$TMP/s0.json")" = "$SUP" ] || fail "supervisor pid"
for r in session reconciler cycle executor; do
    want=$(child_pid $r $SUP)
    got=$(jq -r --arg r "$r" '.processes[] | select(.role==$r) | .pid' "$TMP/s0.json")
    [ "$got" = "$want" ] || fail "$r pid: inspect says $got, ps says $want"
done
jq -e '[.processes[] | select(.role != "supervisor") | .alive and .heartbeat_age_seconds < 5] | all' \
    "$TMP/s0.json" >/dev/null || fail "heartbeats: $(jq -c .processes "$TMP/s0.json")"
pass "an empty appliance: 0 machines, the real pids of supervisor $SUP and its four children"

# ---- what the test puts in
"$T" fixture populate "$ID" 600 >"$TMP/expect.json" || fail "populate failed"
"$I" --id "$ID" --json >"$TMP/s1.json" || fail "summary failed"
jq -e . "$TMP/s1.json" >/dev/null || fail "--json does not parse"
E="$TMP/expect.json"; S="$TMP/s1.json"
[ "$(jq .total "$E")" = "$(jq .machines.total "$S")" ] || fail "total: $(jq .machines.total "$S") != $(jq .total "$E")"
[ "$(jq -S .by_state "$E")" = "$(jq -S '.machines.by_state' "$S")" ] || fail "by_state differs"
[ "$(jq -S '.by_state_type_zone | sort_by(.state, .type, .zone)' "$E")" = \
  "$(jq -S '.machines.by_state_type_zone | sort_by(.state, .type, .zone)' "$S")" ] ||
    fail "by state x type x zone differs"
[ "$(jq .in_flight "$E")" = "$(jq .in_flight.pending "$S")" ] || fail "in flight differs"
[ "$(jq .bound "$E")" = "$(jq .machines.bound "$S")" ] || fail "bound differs"
for k in clusters:total connected:connected first_rollup:first_rollup quarantined:quarantined; do
    [ "$(jq ".${k%%:*}" "$E")" = "$(jq ".clusters.${k#*:}" "$S")" ] || fail "clusters ${k#*:} differs"
done
[ "$(jq .need_rows "$E")" = "$(jq .needs.total "$S")" ] || fail "needs total differs"
pass "summary --json matches what was put in: $(jq .total "$E") machines by state x type x zone, $(jq .in_flight "$E") in flight, 3 clusters, 5 Needs"

# the appliance's cycle: wait for a cycle that saw what was written
wait_for 10 bash -c "[ \"\$('$I' --id '$ID' --json | jq .last_cycle.counts.total_machines)\" = $(jq .total "$E") ]" ||
    fail "no cycle published counts for $(jq .total "$E") machines: $("$I" --id "$ID" --json | jq -c .last_cycle)"
"$I" --id "$ID" --json >"$S"
[ "$(jq -S .machines.by_state "$S")" = "$(jq -S .last_cycle.counts.by_state "$S")" ] ||
    fail "the cycle's published counts differ from inspect's scan"
jq -e '.shard.flags.actuation_paused and .last_cycle.cycle > 0 and .last_cycle.consistent' "$S" >/dev/null ||
    fail "last cycle: $(jq -c .last_cycle "$S")"
wait_for 10 bash -c "'$I' --id '$ID' needs --json | jq -e '.rows_without_verdict == 0' >/dev/null" ||
    fail "need rows never got verdicts: $("$I" --id "$ID" needs)"
"$I" --id "$ID" needs --json >"$TMP/n.json" || fail "needs failed"
jq -e --argjson rows "$(jq .need_rows "$E")" '
    .header.cycle > 0 and ([.needs[].table_rows] | add) == $rows and .verdicts_without_row == 0
    and ([.needs[] | .has_verdict and (.satisfied | type) == "boolean"
          and (.unmet_reason | startswith("UNMET_REASON_"))] | all)
    and .needs[0].need.priority == 200' "$TMP/n.json" >/dev/null ||
    fail "needs: $(jq -c . "$TMP/n.json" | head -c 800)"
"$I" --id "$ID" needs --cluster alpha --limit 1 --json | jq -e '.header.total_needs >= 2 and (.needs | length) == 1
    and .needs[0].cluster_id == "alpha"' >/dev/null || fail "needs --cluster alpha --limit 1"
pass "the appliance's cycle $(jq .last_cycle.cycle "$S") published counts equal to the scan and a verdict for every need row"

"$I" --id "$ID" >"$TMP/s1.txt" || fail "text summary failed"
grep -q "MACHINES  $(jq .total "$E") " "$TMP/s1.txt" || fail "text summary: $(head -5 "$TMP/s1.txt")"
grep -q "supervisor pid $SUP (running)" "$TMP/s1.txt" || fail "text summary lacks the supervisor"
grep -q "CLUSTERS  3  (connected 2, first rollup 2, quarantined 1)" "$TMP/s1.txt" || fail "text clusters"
pass "text summary carries the same numbers"

M=$(jq -r .group_machine "$E")
"$I" --id "$ID" machine "$M" --json >"$TMP/m.json" || fail "machine $M failed"
jq -e --arg m "$M" --argjson slot "$(jq .group_slot "$E")" '
    .machine.id == $m and .machine.slot == $slot and .machine.state == "Configured"
    and .machine.cluster == "beta" and .machine.assigned_group == "grp\u0000x\u0001\"y"
    and (.machine.assigned_fingerprint | startswith("p=100|"))
    and .machine.profile.labels["bigfleet.test/rack"] == "rack-a"
    and .machine.profile.allocatable.cpu == "1900m" and (.machine.seq % 2 == 0)
    and (.machine.flags | index("valid")) != null and (.machine.pending | type) == "boolean"' \
    "$TMP/m.json" >/dev/null || fail "machine record: $(cat "$TMP/m.json")"
pass "machine $M: the full record (profile, assignment with a NUL-bearing group, flags, seq)"

"$I" --id "$ID" machines --state Configured --cluster alpha --json >"$TMP/ms.json" || fail "machines"
jq -e '(.machines | length) == .matched and .matched > 0 and
       ([.machines[] | .state == "Configured" and .cluster == "alpha"] | all)' "$TMP/ms.json" >/dev/null ||
    fail "machines filter: $(jq -c '{matched, n: (.machines|length)}' "$TMP/ms.json")"
for c in clusters shortfalls rings procs "histogram --all"; do
    "$I" --id "$ID" $c --json | jq -e . >/dev/null || fail "$c --json does not parse"
    "$I" --id "$ID" $c >/dev/null || fail "$c (text) failed"
done
pass "machines filters; clusters, shortfalls, rings, procs, histogram parse"

# ---- read-only. The appliance writes its segments all the time (cycle results, rings,
# heartbeats), so it is frozen (SIGSTOP) while inspect runs: every byte of all four
# segments must be unchanged afterwards. And a live --watch maps them r--s only.
sums() { for k in inventory needs rings state; do md5sum "/dev/shm/bigfleet.$ID.$k" | cut -d' ' -f1; done; }
APP=("$SUP" $(ps -o pid= --ppid "$SUP"))
kill -STOP "${APP[@]}"
sleep 0.3
before=$(sums)
for c in "" machines needs clusters shortfalls rings procs "histogram --all" "machine $M" "--json" \
         "--watch --interval 50ms --frames 3"; do
    "$I" --id "$ID" $c >/dev/null || { kill -CONT "${APP[@]}"; fail "$c failed"; }
done
after=$(sums)
kill -CONT "${APP[@]}"
[ "$before" = "$after" ] || fail "the segments changed while only inspect was reading them"
"$I" --id "$ID" --watch --interval 100ms >/dev/null 2>&1 &
W=$!; PIDS+=("$W")
sleep 0.5
maps=$(grep "/dev/shm/bigfleet.$ID\." "/proc/$W/maps" | awk '{print $2}' | sort -u)
[ "$maps" = "r--s" ] || fail "inspect mappings are not read-only shared: $maps"
[ "$(grep -c "/dev/shm/bigfleet.$ID\." "/proc/$W/maps")" -ge 4 ] || fail "not all four segments mapped"
kill -INT "$W"; wait "$W"; rc=$?
[ $rc -eq 0 ] || fail "--watch did not quit cleanly on SIGINT (rc=$rc)"
pass "inspect never writes: all four segments byte-identical across every command, mappings r--s, SIGINT quits --watch with 0"

# ---- --watch on a terminal: redraws in place on the alternate screen, q quits with 0
python3 - "$I" "$ID" <<'EOF' || fail "--watch on a terminal"
import os, pty, select, sys, time
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], [sys.argv[1], "--id", sys.argv[2], "--watch", "--interval", "100ms"])
buf = b""
def pump(seconds):
    global buf
    end = time.time() + seconds
    while time.time() < end:
        if select.select([fd], [], [], 0.05)[0]:
            try:
                d = os.read(fd, 65536)
            except OSError:
                return
            if not d:
                return
            buf += d
pump(1.0)
frames = buf.count(b"q to quit")
os.write(fd, b"q")
t = time.time()
pump(3)
_, st = os.waitpid(pid, 0)
ok = (os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0 and frames >= 3 and b"\x1b[?1049h" in buf
      and b"\x1b[?1049l" in buf and b"\x1b[?25h" in buf and time.time() - t < 2)
print("  %d frames in 1 s on a pty; q -> exit %d" % (frames, os.WEXITSTATUS(st) if os.WIFEXITED(st) else -1))
sys.exit(0 if ok else 1)
EOF
pass "--watch on a terminal redraws on the alternate screen and quits on q with 0"

# ---- a restarted child shows up
old=$(child_pid cycle $SUP)
kill -KILL "$old"
wait_for 3 bash -c "[ \"\$('$I' --id '$ID' procs --json | jq '.processes[] | select(.role==\"cycle\") | .restarts')\" = 1 ]" ||
    fail "restart not visible: $("$I" --id "$ID" procs)"
"$I" --id "$ID" procs | grep -E "^  cycle +[0-9]+ .* 1 .*signal 9" >/dev/null || fail "procs text: $("$I" --id "$ID" procs)"
pass "procs shows the cycle's restart and its last exit (signal 9)"

# ---- bad input
"$I" --id "no-such-$ID" 2>"$TMP/e1"; rc=$?
[ $rc -eq 1 ] && grep -q "no appliance segments for shard id no-such-$ID" "$TMP/e1" || fail "missing id: rc=$rc $(cat "$TMP/e1")"
# patch the layout version (restored below to whatever it was)
OLDV=$(python3 - "$ID" 99 <<'EOF'
import mmap, os, struct, sys
fd = os.open(f"/dev/shm/bigfleet.{sys.argv[1]}.needs", os.O_RDWR)
m = mmap.mmap(fd, 4096)
print(struct.unpack("<I", m[8:12])[0])
m[8:12] = struct.pack("<I", int(sys.argv[2]))
m.close(); os.close(fd)
EOF
) || fail "cannot patch the version"
"$I" --id "$ID" 2>"$TMP/e2"; rc=$?
python3 - "$ID" "$OLDV" <<'EOF'
import mmap, os, struct, sys
fd = os.open(f"/dev/shm/bigfleet.{sys.argv[1]}.needs", os.O_RDWR)
m = mmap.mmap(fd, 4096)
m[8:12] = struct.pack("<I", int(sys.argv[2]))
m.close(); os.close(fd)
EOF
[ $rc -eq 1 ] && grep -q "layout version 99 but this binary expects version [0-9]" "$TMP/e2" ||
    fail "version mismatch: rc=$rc $(cat "$TMP/e2")"
"$I" --id "$ID" --no-such-flag 2>/dev/null; [ $? -eq 2 ] || fail "usage error is not exit 2"
pass "missing shard id and layout mismatch exit 1 with the message (both versions named); usage exit 2"

# ---- the appliance stops under --watch
"$I" --id "$ID" --watch --interval 100ms >/dev/null 2>"$TMP/w.err" &
W=$!; PIDS+=("$W")
sleep 0.5
kill -TERM "$SUP"
wait_for 10 bash -c "! kill -0 $W 2>/dev/null" || fail "--watch still running after the appliance stopped"
wait "$W"; rc=$?
[ $rc -eq 1 ] || fail "--watch exit $rc after the appliance stopped (want 1)"
grep -Eq "shutting down|went away|were removed" "$TMP/w.err" || fail "no clear message: $(cat "$TMP/w.err")"
pass "stopping the appliance under --watch: exit 1 with \"$(head -1 "$TMP/w.err" | cut -c1-90)\""
