#!/usr/bin/env bash
# metrics_watch_impact.sh — MEASUREMENT, not a pass/fail test (speed is never
# asserted): the real appliance's cycle latency with and without readers
# beside it. Skipped (77) unless METRICS_MEASURE=1.
#
# The whole appliance (supervisor, session, reconciler --incremental-reconcile,
# cycle, executor, embedded simulated provider seeded with TYPES x (SPEC +
# IDLE + CONF) machines), CLUSTERS grpc-js operator sessions holding NEEDS
# Need rows each, a cycle every PERIOD. Interleaved A/B (drift on a shared
# host would swamp separate runs): WINDOWS windows of WINDOW_S seconds
# rotate through
#   off      nothing beside the appliance
#   watch    bigfleet-inspect --watch --interval INTERVAL (read-only attach;
#            the summary frame scans every record)
#   metrics  a tight loop of /metrics scrapes (one keep-alive connection, back
#            to back; scrapes per window in the output)
#   scrape1s one /metrics scrape a second (a busy Prometheus)
#   needs    a tight loop of full ShardRead/InspectNeeds streams (grpc-js)
# and every cycle (debug log line "cycle=N ms=X", its timestamp) is
# attributed to the window it ended in. Prints one JSON line per side.
#
#   METRICS_MEASURE=1 [SPEC=40000] [IDLE=5000] [CONF=5000] [CLUSTERS=100] [NEEDS=20]
#     [PERIOD=100ms] [WINDOWS=16] [WINDOW_S=10] [INTERVAL=1s] [SIDES="watch metrics needs scrape1s"]
#     bash tests/integration/metrics_watch_impact.sh
source "$(dirname "$0")/lib.bash"
[ "${METRICS_MEASURE:-0}" = 1 ] || { echo "skipped: set METRICS_MEASURE=1 to measure"; exit 77; }
REPO=$(cd "$(dirname "$0")/../.." && pwd)
export PROTO_DIR=$REPO/proto NODE_PATH=$REPO/tests/interop/node_modules
SPEC=${SPEC:-40000}; IDLE=${IDLE:-5000}; CONF=${CONF:-5000}; CLUSTERS=${CLUSTERS:-100}
NEEDS=${NEEDS:-20}; PERIOD=${PERIOD:-100ms}; WINDOWS=${WINDOWS:-16}; WINDOW_S=${WINDOW_S:-10}
INTERVAL=${INTERVAL:-1s}; SIDES=(${SIDES:-watch metrics needs scrape1s})
ID=$(new_id impact)
GRPC=$(free_port); HTTP=$(free_port); SIMP=$(free_port)
"$BIN/bigfleet-shardd" --id "$ID" --data-dir "$TMP/data" --listen "127.0.0.1:$GRPC" \
    --metrics-addr "127.0.0.1:$HTTP" --sim-listen "127.0.0.1:$SIMP" \
    --sim-args "--seed-speculative $SPEC --seed-idle $IDLE --seed-configured $CONF --seed-clusters $CLUSTERS --cluster-prefix cl-" \
    --cycle-interval "$PERIOD" --incremental-reconcile --local-bootstrap --log-level debug \
    >"$TMP/appliance.log" 2>&1 &
SUP=$!; PIDS+=("$SUP")
URL="http://127.0.0.1:$HTTP"
wait_for 300 curl -sf "$URL/readyz" || fail "not ready: $(tail -5 "$TMP/appliance.log")"

cat >"$TMP/ops.js" <<'EOF'
// CLUSTERS operator sessions, NEEDS needs each, held open; prints READY.
const grpc = require('@grpc/grpc-js'), pl = require('@grpc/proto-loader');
const [addr, nc, nn] = process.argv.slice(2).map((x, i) => (i ? Number(x) : x));
const p = grpc.loadPackageDefinition(pl.loadSync(['bigfleet/v1alpha1/shard.proto'],
  { includeDirs: [process.env.PROTO_DIR], keepCase: true, longs: String, enums: Number, bytes: Buffer,
    defaults: true, oneofs: true })).bigfleet.v1alpha1;
const types = ['m6i.large', 'r6i.xlarge', 'c6i.4xlarge', 'n2-standard-32', 'a3-highgpu-8g'];
let acked = 0;
for (let c = 0; c < nc; c++) {
  const cl = new p.Shard(addr, grpc.credentials.createInsecure());
  const s = cl.Session();
  s.on('error', () => {});
  s.on('data', (m) => {
    if (m.payload === 'ack' && m.ack.echo === 'rollup' && ++acked === nc) console.log('READY');
    if (m.payload === 'reclaim_instruction')
      s.write({ reclaim_ack: { instruction_id: m.reclaim_instruction.instruction_id } });
  });
  const needs = [];
  for (let i = 0; i < nn; i++)
    needs.push({ requirements: [{ key: 'node.kubernetes.io/instance-type', operator: 1,
      values: [i % 23 === 0 ? 'no-such-type' : types[(c + i) % types.length]] }],
      aggregate_resources: { cpu: String(1 + (i % 4)) }, priority: [100, 1000, 5000, 1000000][i % 4],
      spread: [], interruption_penalty_bucket: 3 + (i % 10), reclamation_penalty_bucket: 0,
      min_unit: {}, group: Buffer.alloc(0) });
  s.write({ hello: { cluster_id: `cl-${c}`, protocol_version: 'v1alpha1' } });
  s.write({ rollup: { cluster_id: `cl-${c}`, timestamp_unix_nanos: String(BigInt(Date.now()) * 1000000n + BigInt(c)), needs } });
}
EOF
cat >"$TMP/needs.js" <<'EOF'
// Full InspectNeeds streams back to back until killed; prints rows per stream.
const grpc = require('@grpc/grpc-js'), pl = require('@grpc/proto-loader');
const p = grpc.loadPackageDefinition(pl.loadSync(['bigfleet/v1alpha1/shardread.proto'],
  { includeDirs: [process.env.PROTO_DIR], keepCase: true, longs: String, enums: String, defaults: false,
    oneofs: true })).bigfleet.v1alpha1;
const c = new p.ShardRead(process.argv[2], grpc.credentials.createInsecure());
let n = 0, streams = 0;
const once = () => {
  const call = c.InspectNeeds({});
  call.on('data', () => { n++; });
  call.on('error', () => {});
  call.on('status', () => { streams++; setImmediate(once); });
};
process.on('SIGTERM', () => { console.log(JSON.stringify({ streams, frames: n })); process.exit(0); });
once();
EOF
node "$TMP/ops.js" "127.0.0.1:$GRPC" "$CLUSTERS" "$NEEDS" >"$TMP/ops.out" 2>"$TMP/ops.err" &
PIDS+=("$!")
wait_for 60 grep -q READY "$TMP/ops.out" || fail "operators: $(cat "$TMP/ops.err")"
sleep 5 # let the cycle settle the demand
machines=$(curl -sf "$URL/metrics" | awk '/^bigfleet_appliance_result_machines /{print $2}')
needs=$(curl -sf "$URL/metrics" | awk '/^bigfleet_appliance_result_needs /{print $2}')

: >"$TMP/windows"
for w in $(seq 1 "$WINDOWS"); do
    if [ $((w % 2)) -eq 1 ]; then side=off; else side=${SIDES[$(( (w / 2 - 1) % ${#SIDES[@]} ))]}; fi
    start=$(date +%s%N)
    case $side in
    off) sleep "$WINDOW_S" ;;
    watch)
        "$BIN/bigfleet-inspect" --id "$ID" --watch --interval "$INTERVAL" >/dev/null 2>>"$TMP/werr" &
        R=$!; sleep "$WINDOW_S"; kill -INT "$R"; wait "$R" ;;
    metrics)
        # (a background job of a script ignores SIGINT: stop it with SIGTERM)
        python3 -c '
import http.client, signal, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]))
n = 0
def done(*_):
    print(n, file=sys.stderr)
    sys.exit(0)
signal.signal(signal.SIGTERM, done)
while True:
    c.request("GET", "/metrics"); c.getresponse().read(); n += 1' "$HTTP" 2>>"$TMP/scrapes" &
        R=$!; sleep "$WINDOW_S"; kill -TERM "$R"; wait "$R" 2>/dev/null ;;
    scrape1s)
        ( while :; do curl -sf -o /dev/null "$URL/metrics"; sleep 1; done ) &
        R=$!; sleep "$WINDOW_S"; kill "$R"; wait "$R" 2>/dev/null ;;
    needs)
        node "$TMP/needs.js" "127.0.0.1:$GRPC" >>"$TMP/needs.out" &
        R=$!; sleep "$WINDOW_S"; kill -TERM "$R"; wait "$R" ;;
    esac
    echo "$side $start $(date +%s%N)" >>"$TMP/windows"
done
scrape_s=$(curl -s -o /dev/null -w '%{time_total}' "$URL/metrics")
kill -TERM "$SUP"
wait_for 10 no_procs "$ID" || true
python3 - "$TMP/appliance.log" "$TMP/windows" "$machines" "$needs" "$PERIOD" "$INTERVAL" <<'EOF'
import datetime, json, math, re, sys
log, wins = sys.argv[1], [l.split() for l in open(sys.argv[2])]
wins = [(s, int(a), int(b)) for s, a, b in wins]
pat = re.compile(r'^ts=(\S+) .*role=cycle .*msg="?cycle"? cycle=(\d+) ms=([0-9.]+)')
side = {}
for line in open(log):
    m = pat.match(line)
    if not m:
        continue
    t = datetime.datetime.strptime(m.group(1), '%Y-%m-%dT%H:%M:%S.%fZ').replace(tzinfo=datetime.timezone.utc)
    ns = int(t.timestamp() * 1e9)
    for s, a, b in wins:
        if a <= ns < b:
            side.setdefault(s, []).append(float(m.group(3)))
def stats(v):
    v = sorted(v)
    q = lambda p: v[max(0, math.ceil(p * len(v)) - 1)]
    return {"cycles": len(v), "mean_ms": round(sum(v) / len(v), 3), "p50_ms": round(q(0.5), 3),
            "p99_ms": round(q(0.99), 3), "max_ms": round(v[-1], 3)}
for s in ['off'] + [x for x in side if x != 'off']:
    if s in side:
        print(json.dumps({"side": s, "machines": sys.argv[3], "needs": sys.argv[4], "period": sys.argv[5],
                          **({"interval": sys.argv[6]} if s == 'watch' else {}), **stats(side[s])}))
EOF
[ -s "$TMP/scrapes" ] && echo "/metrics loop: $(grep -E '^[0-9]+$' "$TMP/scrapes" | paste -sd' ') scrapes per window"
[ -s "$TMP/needs.out" ] && echo "InspectNeeds loop: $(tail -1 "$TMP/needs.out")"
echo "one /metrics scrape: ${scrape_s}s (curl time_total)"
