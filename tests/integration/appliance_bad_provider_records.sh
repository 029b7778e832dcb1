#!/usr/bin/env bash
# appliance_bad_provider_records.sh — a provider (a grpc-js fake) that
# starts reporting garbage: a negative price, an interruption probability
# outside [0,1], NaN in either, an unknown state, a record without id. The
# reconciler rejects each loudly (logged, counted by reason), keeps the last
# good record (never read as a removal, never inserted when new), and applies
# the provider's view again once it is sane.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/provider_lib.bash"
command -v node >/dev/null || { echo "skip: node not installed"; exit 77; }
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export NODE_PATH="$ROOT/tests/interop/node_modules"
export PROTO_DIR="$ROOT/proto" PHASE_FILE="$TMP/phase"
echo good >"$PHASE_FILE"
PORT=$(free_port)
node - "$PORT" >"$TMP/fake.log" 2>&1 <<'JS' &
const grpc = require('@grpc/grpc-js');
const loader = require('@grpc/proto-loader');
const fs = require('fs');
const def = loader.loadSync('bigfleet/v1alpha1/provider.proto',
  { includeDirs: [process.env.PROTO_DIR], keepCase: true, longs: String, enums: Number, defaults: true });
const svc = grpc.loadPackageDefinition(def).bigfleet.v1alpha1.CapacityProvider;
const idle = (id) => ({ id, state: 3, host: { provider: 'fake', ref: 'h-' + id }, instance_type: 't1',
  zone: 'z1', capacity_type: 3, price_per_hour: 0.5, interruption_probability: 0.01,
  resources: { resources: { cpu: '4' } }, allocatable: { resources: { cpu: '4' } } });
const conf = (id, patch) => Object.assign(idle(id), { state: 5, cluster: 'cl' }, patch);
const list = () => {
  const phase = fs.readFileSync(process.env.PHASE_FILE, 'utf8').trim();
  const good = ['m1', 'm2', 'm3', 'm4', 'm5'].map(idle);
  if (phase === 'good') return good;
  return [conf('m1', {}), conf('m2', { price_per_hour: -1 }), conf('m3', { interruption_probability: 1.5 }),
          conf('m4', { price_per_hour: NaN }), conf('m5', { state: 42 }), idle(''),
          conf('m6', { interruption_probability: NaN })];
};
const server = new grpc.Server();
server.addService(svc.service, {
  List: (call, cb) => cb(null, { machines: list(), revision: Buffer.from('') }),
  Get: (call, cb) => cb({ code: grpc.status.NOT_FOUND }),
  Create: (c, cb) => cb({ code: grpc.status.UNIMPLEMENTED }), Configure: (c, cb) => cb({ code: 12 }),
  Drain: (c, cb) => cb({ code: 12 }), Delete: (c, cb) => cb({ code: 12 }),
});
server.bindAsync('127.0.0.1:' + process.argv[2], grpc.ServerCredentials.createInsecure(), (e) => {
  if (e) { console.error(e); process.exit(1); }
  console.log('READY');
});
JS
PIDS+=($!)
wait_for 15 grep -q READY "$TMP/fake.log" || { cat "$TMP/fake.log"; fail "fake provider did not start"; }
ID=$(new_id bad)
start_appliance --provider-addr "127.0.0.1:$PORT"
A wait-ready --timeout 15 || fail "no first reconcile"
[ "$(A count --state Idle)" = 5 ] || fail "expected 5 Idle machines"
pass "a sane provider: 5 Idle machines"

echo garbage >"$PHASE_FILE"
out=$(A reconcile --timeout 10); echo "$out" | grep -q ok=1 || fail "the pass itself must succeed: $out"
view stats
# Each pass over the garbage List rejects 2 records per reason. The manual
# pass may not be the only one: a scheduled pass can run between the phase
# flip and it on a loaded machine, so the counters are 2 per garbage pass,
# equal across reasons, and at least one pass happened.
stat() { sed -n "s/^reconciler\.$1=//p" "$TMP/view"; }
rp=$(stat rejected.price) ri=$(stat rejected.interruption_probability) rs=$(stat rejected.structural)
[ -n "$rp" ] && [ "$rp" -ge 2 ] && [ $((rp % 2)) = 0 ] && [ "$ri" = "$rp" ] && [ "$rs" = "$rp" ] ||
    fail "expected 2 rejections per reason per garbage pass: $(grep reconciler "$TMP/view")"
[ "$(stat removed)" = 0 ] || fail "expected reconciler.removed=0: $(grep reconciler "$TMP/view")"
view dump
[ "$(grep -c "state=Idle" "$TMP/view")" = 4 ] && [ "$(grep -c "state=Configured" "$TMP/view")" = 1 ] ||
    fail "last good records not kept: $(cat "$TMP/view")"
for m in m2 m3 m4 m5; do
    grep "^$m " "$TMP/view" | grep -q "state=Idle .*price=0.5000 p=0.010 flags=0x9" ||
        fail "$m: last good record not kept or not flagged rejected: $(grep "^$m " "$TMP/view")"
done
grep -q "^m6 " "$TMP/view" && fail "a rejected new machine was inserted"
grep -q 'msg="provider machine rejected; last good record kept" machine="m2" reason=price' "$TMP/appliance.log" ||
    fail "rejection not logged with its reason"
pass "garbage rejected by reason (price $rp, probability $ri, structural $rs: 2 each per pass), last good records kept, none removed or inserted"

echo good >"$PHASE_FILE"
A reconcile --timeout 10 | grep -q ok=1 || fail "recovery pass failed"
view dump
[ "$(grep -c "state=Idle .*flags=0x1 " "$TMP/view")" = 5 ] || fail "sane records not applied again: $(cat "$TMP/view")"
pass "a sane provider again: every record applied, rejection flags cleared"
kill -TERM "$SUP"
wait_for 5 no_procs "$ID" || fail "appliance did not stop"
