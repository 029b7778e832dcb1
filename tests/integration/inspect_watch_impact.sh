#!/usr/bin/env bash
# inspect_watch_impact.sh — MEASUREMENT, not a pass/fail test (speed is
# never asserted): cycle latency with and without `bigfleet-inspect --watch`
# beside it. Skipped (77) unless INSPECT_MEASURE=1.
#
# MODE=real (default): `test_inspect cycle-real` drives the REAL cycle
# controller (src/cycle: change-log snapread, engine phases, rails, enqueue,
# publish) over real segments: MACHINES records, ~2,000 need rows in 103
# clusters, actuation paused, one cycle every PERIOD_MS, while a forked
# writer applies ~20K same-state record updates/s through the seqlock and the
# change log (reconciler-like).
# MODE=proxy: `test_inspect cycle-proxy`, a synthetic heavier cycle (a full
# seqlock snapshot of every record each cycle) with an executor-like writer.
#
# Interleaved A/B (drift on a shared host would swamp separate runs): one
# long proxy run; `bigfleet-inspect --watch --interval INTERVAL` (summary:
# a full scan of every record per frame) is started and stopped in
# alternating WINDOW_S windows; each cycle is attributed to the window it
# started in. Prints one JSON line per side and one for the whole run.
#
#   INSPECT_MEASURE=1 [MODE=real|proxy] [MACHINES=500000] [PERIOD_MS=100] [WINDOWS=12]
#     [WINDOW_S=10] [INTERVAL=1s] bash tests/integration/inspect_watch_impact.sh
source "$(dirname "$0")/lib.bash"
[ "${INSPECT_MEASURE:-0}" = 1 ] || { echo "skipped: set INSPECT_MEASURE=1 to measure"; exit 77; }
T="$BIN/../tests/test_inspect"
[ -x "$T" ] || fail "$T not built"
MODE=${MODE:-real}; MACHINES=${MACHINES:-500000}; PERIOD_MS=${PERIOD_MS:-100}; WINDOWS=${WINDOWS:-12}
WINDOW_S=${WINDOW_S:-10}; INTERVAL=${INTERVAL:-1s}
CYCLES=$(( (WINDOWS * WINDOW_S * 1000 + 5000) / PERIOD_MS ))
ID=$(new_id proxy)

"$T" "cycle-$MODE" "$ID" "$MACHINES" "$CYCLES" "$PERIOD_MS" "$TMP/trace" >"$TMP/out" 2>"$TMP/err" &
PROXY=$!; PIDS+=("$PROXY")
wait_for 120 grep -q READY "$TMP/err" || fail "cycle-$MODE did not start: $(cat "$TMP/err")"
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
python3 - "$TMP/trace" "$TMP/windows" "$MACHINES" "$PERIOD_MS" "$INTERVAL" "$MODE" <<'EOF'
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
common = {"cycle": sys.argv[6], "machines": int(sys.argv[3]), "period_ms": int(sys.argv[4])}
print(json.dumps({"side": "without inspect", **common, **stats(side["off"])}))
print(json.dumps({"side": "with inspect --watch --interval " + sys.argv[5], **common, **stats(side["on"])}))
EOF
echo "{\"side\":\"whole run\",$(sed 's/^{//' "$TMP/out")"
