#!/usr/bin/env bash
# inspect_watch_impact.sh — MEASUREMENT, not a pass/fail test (speed is
# never asserted): cycle latency with and without `bigfleet-inspect --watch`
# beside it. Skipped (77) unless INSPECT_MEASURE=1.
#
# The real cycle process is not in this base, so the cycle is the synthetic
# proxy of tests/unit/test_inspect.c (`test_inspect cycle-proxy`): MACHINES
# records, each cycle a full seqlock snapshot of every record + a tally and
# a cost scan + a double-buffered publish, every PERIOD_MS, while a forked
# writer moves ~20K records/s through the seqlock (executor-like).
#
# Interleaved A/B (drift on a shared host would swamp separate runs): one
# long proxy run; `bigfleet-inspect --watch --interval INTERVAL` (summary:
# a full scan of every record per frame) is started and stopped in
# alternating WINDOW_S windows; each cycle is attributed to the window it
# started in. Prints one JSON line per side and one for the whole run.
#
#   INSPECT_MEASURE=1 [MACHINES=500000] [PERIOD_MS=100] [WINDOWS=12] [WINDOW_S=10]
#     [INTERVAL=1s] bash tests/integration/inspect_watch_impact.sh
source "$(dirname "$0")/lib.bash"
[ "${INSPECT_MEASURE:-0}" = 1 ] || { echo "skipped: set INSPECT_MEASURE=1 to measure"; exit 77; }
T="$BIN/../tests/test_inspect"
[ -x "$T" ] || fail "$T not built"
MACHINES=${MACHINES:-500000}; PERIOD_MS=${PERIOD_MS:-100}; WINDOWS=${WINDOWS:-12}
WINDOW_S=${WINDOW_S:-10}; INTERVAL=${INTERVAL:-1s}
CYCLES=$(( (WINDOWS * WINDOW_S * 1000 + 5000) / PERIOD_MS ))
ID=$(new_id proxy)

"$T" cycle-proxy "$ID" "$MACHINES" "$CYCLES" "$PERIOD_MS" "$TMP/trace" >"$TMP/out" 2>"$TMP/err" &
PROXY=$!; PIDS+=("$PROXY")
wait_for 60 grep -q READY "$TMP/err" || fail "cycle proxy did not start: $(cat "$TMP/err")"
: >"$TMP/windows"
for w in $(seq 1 "$WINDOWS"); do
    start=$(date +%s%N)
    if [ $((w % 2)) -eq 0 ]; then
        "$BIN/bigfleet-inspect" --id "$ID" --watch --interval "$INTERVAL" >/dev/null 2>>"$TMP/werr" &
        W=$!; PIDS+=("$W")
        sleep "$WINDOW_S"
        kill -INT "$W"; wait "$W" || fail "inspect --watch failed: $(cat "$TMP/werr")"
        echo "on $start $(date +%s%N)" >>"$TMP/windows"
    else
        sleep "$WINDOW_S"
        echo "off $start $(date +%s%N)" >>"$TMP/windows"
    fi
done
wait "$PROXY" || fail "cycle proxy failed: $(cat "$TMP/err")"
python3 - "$TMP/trace" "$TMP/windows" "$MACHINES" "$PERIOD_MS" "$INTERVAL" <<'EOF'
import json, math, sys
trace = [tuple(map(int, l.split())) for l in open(sys.argv[1]) if l.strip()]
wins = [(l.split()[0], int(l.split()[1]), int(l.split()[2])) for l in open(sys.argv[2])]
side = {"off": [], "on": []}
for start, dur in trace:
    for kind, a, b in wins:
        if a <= start < b:
            side[kind].append(dur / 1e6)
def stats(v):
    v = sorted(v)
    if not v:
        return {}
    q = lambda p: v[max(0, math.ceil(p * len(v)) - 1)]
    return {"cycles": len(v), "mean_ms": round(sum(v) / len(v), 3), "p50_ms": round(q(0.5), 3),
            "p99_ms": round(q(0.99), 3), "max_ms": round(v[-1], 3)}
common = {"machines": int(sys.argv[3]), "period_ms": int(sys.argv[4])}
print(json.dumps({"side": "without inspect", **common, **stats(side["off"])}))
print(json.dumps({"side": "with inspect --watch --interval " + sys.argv[5], **common, **stats(side["on"])}))
EOF
echo "{\"side\":\"whole run\",$(sed 's/^{//' "$TMP/out")"
