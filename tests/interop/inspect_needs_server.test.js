#!/usr/bin/env node
// inspect_needs_server.test.js: ShardRead/InspectNeeds served by the real
// bigfleet-shardd (session process) to a @grpc/grpc-js client, with the
// real cycle deciding over the embedded simulated provider: the header
// frame first (cycle 0 before the first cycle), the documented row order
// (priority desc, arrival asc, cluster asc), the per-cluster filter,
// `limit` (total_needs counts before it), every NeedView field incl. the
// reason taxonomy and the omitted-when rules, a slow reader of a large
// ledger (flow control), a client cancelling mid-stream, the /metrics
// counters, and the mTLS identity gate (readonly/admin allowed, a cluster
// certificate PERMISSION_DENIED, two bigfleet SANs refused by the transport).
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const protoLoader = require('@grpc/proto-loader');
const L = require('./session_lib');
const { register } = require('./register');
const { assert } = L;

const G = L.grpc.status;
const PROTO_DIR = process.env.PROTO_DIR || path.resolve(__dirname, '..', '..', 'proto');
const read = L.grpc.loadPackageDefinition(protoLoader.loadSync(['bigfleet/v1alpha1/shardread.proto'], {
  includeDirs: [PROTO_DIR], keepCase: true, longs: String, enums: String, bytes: Buffer,
  defaults: false, oneofs: true,
})).bigfleet.v1alpha1;

const IT = 'node.kubernetes.io/instance-type';
const ZONE = 'topology.kubernetes.io/zone';
// rollup timestamps: recent (the shard takes a timestamp as arrival only
// within the last 60 s, else the receive time; docs/security.md); set by
// the first test, right before its rollups
let T0 = 0n;

// Runs InspectNeeds; resolves {header, rows, status, frames}.
function inspect(addr, req, { creds, pauseMs = 0, cancelAfter = 0 } = {}) {
  const client = new read.ShardRead(addr, creds || L.grpc.credentials.createInsecure(),
    { 'grpc.max_receive_message_length': 64 << 20 });
  return new Promise((resolve) => {
    const frames = [];
    const call = client.InspectNeeds(req, { deadline: Date.now() + 60000 });
    let status = null, done = false, ended = false;
    const finish = () => {
      if (done || !status || !ended) return;
      done = true;
      client.close();
      const header = frames.length && frames[0].frame === 'header' ? frames[0].header : null;
      resolve({ header, frames, rows: frames.filter((f) => f.frame === 'need').map((f) => f.need), status });
    };
    call.on('data', (m) => {
      frames.push(m);
      if (pauseMs && frames.length === 1) {
        call.pause();
        setTimeout(() => call.resume(), pauseMs);
      }
      if (cancelAfter && frames.length === cancelAfter) call.cancel();
    });
    call.on('status', (s) => { status = s; finish(); });
    call.on('error', (e) => { status = status || { code: e.code, details: e.details }; ended = true; finish(); });
    call.on('end', () => { ended = true; finish(); });
  });
}

function metric(text, name) {
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line === undefined ? undefined : Number(line.slice(name.length + 1));
}

const rowKey = (r) => `${r.cluster_id}/${r.need.priority || 0}/${r.arrival_unix_nanos}`;

// The documented order holds for consecutive rows.
function assertOrdered(rows) {
  for (let i = 1; i < rows.length; i++) {
    const a = rows[i - 1], b = rows[i];
    const pa = a.need.priority || 0, pb = b.need.priority || 0;
    if (pa !== pb) { assert.ok(pa > pb, `priority order at ${i}: ${rowKey(a)} then ${rowKey(b)}`); continue; }
    const ta = BigInt(a.arrival_unix_nanos || 0), tb = BigInt(b.arrival_unix_nanos || 0);
    if (ta !== tb) { assert.ok(ta < tb, `arrival order at ${i}: ${rowKey(a)} then ${rowKey(b)}`); continue; }
    assert.ok(Buffer.compare(Buffer.from(a.cluster_id), Buffer.from(b.cluster_id)) <= 0,
      `cluster order at ${i}: ${rowKey(a)} then ${rowKey(b)}`);
  }
}

let S;
let ops = [];

async function connect(name) {
  const op = new L.Operator(S.addr);
  op.hello(name);
  await op.ack('hello');
  ops.push(op);
  return op;
}

async function rollup(op, name, needs, ts) {
  op.rollup(name, needs, String(ts));
  await op.ack('rollup');
}

// Waits until a cycle has seen exactly `want` needs in total (and, when
// given, the rows pass ok(rows)).
async function settled(want, ok) {
  return L.waitFor(async () => {
    const r = await inspect(S.addr, {});
    return r.status.code === G.OK && r.header && r.header.total_needs === want &&
      (!ok || ok(r.rows)) && r;
  }, 20000, `a cycle over ${want} needs`);
}

// The four satisfiable needs of the first test are satisfied (the sim has
// idle machines of their shapes; a cycle that ran before they were decided
// may say otherwise, so this is what the tests wait for, bounded).
const fourSatisfied = (rows) => rows.length >= 5 && rows.slice(0, 4).every((x) => x.satisfied);

const GROUP = Buffer.from('topology.bigfleet/rack\0app=trainer');

const tests = [
  ['the header comes first; every need follows in priority/arrival/cluster order', async () => {
    await L.waitFor(async () => (await L.httpGet(S.metricsPort, '/readyz')).status === 200, 15000,
      'the first reconcile of the embedded provider');
    const zeta = await connect('zeta');
    const alpha = await connect('alpha');
    const beta = await connect('beta');
    T0 = BigInt(Date.now() - 20000) * 1000000n;
    await rollup(zeta, 'zeta', [
      L.need({ priority: 500, aggregate: { cpu: '2' }, requirements: [{ key: IT, operator: 1, values: ['m6i.large'] }] }),
      L.need({ priority: 100, aggregate: { cpu: '3' }, min_unit: { cpu: '3' },
        requirements: [{ key: IT, operator: 1, values: ['no-such-type'] }] }),
    ], T0);
    await rollup(alpha, 'alpha', [
      L.need({ priority: 500, aggregate: { cpu: '2' }, requirements: [{ key: IT, operator: 1, values: ['m6i.large'] }] }),
      L.need({ priority: 1000, ipb: 16, rpb: 19, aggregate: { cpu: '4', memory: '16Gi' },
        min_unit: { cpu: '2' }, group: GROUP,
        spread: [{ topology_key: ZONE, max_skew: 2, when_unsatisfiable: 2 }],
        requirements: [{ key: IT, operator: 1, values: ['r6i.xlarge', 'm6i.large'] }] }),
    ], T0);
    await rollup(beta, 'beta', [
      L.need({ priority: 500, aggregate: { cpu: '2' }, requirements: [{ key: IT, operator: 1, values: ['c6i.4xlarge'] }] }),
    ], T0 - 1000n);
    const r = await settled(5, fourSatisfied);
    assert.strictEqual(r.frames[0].frame, 'header');
    assert.ok(Number(r.header.cycle) > 0);
    const at = BigInt(r.header.computed_at_unix_nanos);
    assert.ok(at > BigInt(Date.now() - 60000) * 1000000n && at <= BigInt(Date.now() + 1000) * 1000000n,
      `computed_at ${at}`);
    assert.strictEqual(r.rows.length, 5);
    assert.deepStrictEqual(r.rows.map((x) => `${x.cluster_id}:${x.need.priority}`),
      ['alpha:1000', 'beta:500', 'alpha:500', 'zeta:500', 'zeta:100']);
    assertOrdered(r.rows);
    assert.ok(r.frames.slice(1).every((f) => f.frame === 'need'), 'only one header');
  }],
  ['NeedView fields: the need rebuilt from its profile, verdicts, reasons, omitted-when rules', async () => {
    const r = await settled(5, fourSatisfied);
    const big = r.rows[0];
    const n = big.need;
    assert.strictEqual(big.cluster_id, 'alpha');
    assert.strictEqual(big.arrival_unix_nanos, String(T0));
    assert.strictEqual(n.priority, 1000);
    assert.strictEqual(n.interruption_penalty_bucket, 'PENALTY_BUCKET_8192');
    assert.strictEqual(n.reclamation_penalty_bucket, 'PENALTY_BUCKET_65536');
    assert.deepStrictEqual(n.requirements, [{ key: IT, operator: 'OPERATOR_IN', values: ['m6i.large', 'r6i.xlarge'] }]);
    assert.deepStrictEqual(n.spread, [{ topology_key: ZONE, max_skew: 2, when_unsatisfiable: 'WHEN_UNSATISFIABLE_SCHEDULE_ANYWAY' }]);
    assert.deepStrictEqual(n.aggregate_resources, { cpu: '4', memory: '16Gi' });
    assert.deepStrictEqual(n.min_unit, { cpu: '2' });
    assert.ok(Buffer.compare(n.group, GROUP) === 0, `group bytes ${JSON.stringify(n.group)}`);
    assert.strictEqual(big.profile_fingerprint,
      `p=1000|ipb=16|rpb=19|reqs=${IT}:1:m6i.large,r6i.xlarge;|spr=${ZONE}:2:2;`);
    assert.strictEqual(big.satisfied, true, JSON.stringify(big));
    assert.ok(big.claimed_machine_count >= 1, `claimed ${big.claimed_machine_count}`);
    assert.strictEqual(big.residual_deficit, undefined);
    assert.strictEqual(big.matching_supply, undefined);
    assert.strictEqual(big.preemption, undefined);
    assert.strictEqual(big.unmet_reason, undefined); // UNSPECIFIED (default, not sent)
    assert.strictEqual(big.age_cycles_unmet, undefined);
    const none = r.rows[4];
    assert.strictEqual(none.cluster_id, 'zeta');
    assert.strictEqual(none.satisfied, undefined); // false
    assert.strictEqual(none.unmet_reason, 'UNMET_REASON_NO_MATCHING_SUPPLY');
    assert.deepStrictEqual(none.residual_deficit, { resources: { cpu: '3' } });
    assert.ok(none.matching_supply, 'matching_supply for an unsatisfied need');
    assert.strictEqual(none.matching_supply.idle || 0, 0);
    assert.strictEqual(none.matching_supply.configured || 0, 0);
    assert.strictEqual(none.matching_supply.speculative || 0, 0);
    assert.ok(Number(none.age_cycles_unmet) >= 1, `age ${none.age_cycles_unmet}`);
    assert.strictEqual(none.claimed_machine_count, undefined);
    assert.strictEqual(none.preemption, undefined);
    assert.strictEqual(none.profile_fingerprint, `p=100|ipb=0|rpb=0|reqs=${IT}:1:no-such-type;|spr=`);
    for (const x of r.rows.slice(1, 4)) {
      assert.strictEqual(x.satisfied, true, `${rowKey(x)} satisfied: ${JSON.stringify(x)}`);
      assert.ok((x.bootstrap_count || 0) + (x.provision_count || 0) + (x.claimed_machine_count || 0) > 0);
    }
  }],
  ['cluster_id filters; total_needs counts the filtered rows; an unknown cluster is empty', async () => {
    const a = await inspect(S.addr, { cluster_id: 'alpha' });
    assert.strictEqual(a.status.code, G.OK);
    assert.strictEqual(a.header.total_needs, 2);
    assert.deepStrictEqual(a.rows.map((x) => `${x.cluster_id}:${x.need.priority}`), ['alpha:1000', 'alpha:500']);
    const z = await inspect(S.addr, { cluster_id: 'zeta' });
    assert.deepStrictEqual(z.rows.map((x) => x.need.priority), [500, 100]);
    const u = await inspect(S.addr, { cluster_id: 'never-heard-of-it' });
    assert.strictEqual(u.status.code, G.OK);
    assert.strictEqual(u.frames.length, 1);
    assert.ok(Number(u.header.cycle) > 0, 'the header still names the cycle');
    assert.strictEqual(u.header.total_needs, undefined); // 0
  }],
  ['limit returns the first N rows of the order; total_needs is the count before the cap', async () => {
    const all = await settled(5, fourSatisfied);
    const two = await inspect(S.addr, { limit: 2 });
    assert.strictEqual(two.header.total_needs, 5);
    assert.deepStrictEqual(two.rows.map(rowKey), all.rows.slice(0, 2).map(rowKey));
    const az = await inspect(S.addr, { cluster_id: 'zeta', limit: 1 });
    assert.strictEqual(az.header.total_needs, 2);
    assert.deepStrictEqual(az.rows.map((x) => x.need.priority), [500]);
    const neg = await inspect(S.addr, { limit: -3 }); // not a cap either
    assert.strictEqual(neg.rows.length, 5);
  }],
  ['a slow reader of a large ledger gets every row, in order, through flow control', async () => {
    const bulk = await connect('bulk');
    const N = 3000;
    const needs = [];
    for (let i = 0; i < N; i++)
      needs.push(L.need({ priority: 10 + (i % 700), aggregate: { cpu: '1' },
        requirements: [{ key: 'bulk/shape', operator: 1, values: [`v${i}`] }] }));
    await rollup(bulk, 'bulk', needs, BigInt(Date.now()) * 1000000n);
    await settled(N + 5);
    const waits0 = metric((await L.httpGet(S.metricsPort, '/metrics')).body,
      'bigfleet_shard_inspect_needs_flow_waits_total');
    const t0 = Date.now();
    const r = await inspect(S.addr, { cluster_id: 'bulk' }, { pauseMs: 1500 });
    assert.strictEqual(r.status.code, G.OK);
    assert.ok(Date.now() - t0 >= 1400, 'the reader paused');
    assert.strictEqual(r.header.total_needs, N);
    assert.strictEqual(r.rows.length, N);
    assertOrdered(r.rows);
    const seen = new Set(r.rows.map((x) => x.need.requirements[0].values[0]));
    assert.strictEqual(seen.size, N, 'every need exactly once');
    const waits1 = metric((await L.httpGet(S.metricsPort, '/metrics')).body,
      'bigfleet_shard_inspect_needs_flow_waits_total');
    assert.ok(waits1 > waits0, `the server waited for the reader (${waits0} -> ${waits1})`);
    const whole = await inspect(S.addr, {});
    assert.strictEqual(whole.rows.length, N + 5);
    assertOrdered(whole.rows);
  }],
  ['a client that cancels mid-stream is cleaned up; /metrics counts calls and rows', async () => {
    const before = (await L.httpGet(S.metricsPort, '/metrics')).body;
    const r = await inspect(S.addr, {}, { cancelAfter: 20 });
    assert.strictEqual(r.status.code, G.CANCELLED);
    await L.waitFor(async () => {
      const m = (await L.httpGet(S.metricsPort, '/metrics')).body;
      return metric(m, 'bigfleet_shard_inspect_needs_streams_open') === 0 &&
        metric(m, 'bigfleet_shard_inspect_needs_snapshot_bytes') === 0;
    }, 5000, 'the cancelled stream released');
    const m = (await L.httpGet(S.metricsPort, '/metrics')).body;
    assert.ok(metric(m, 'bigfleet_shard_inspect_needs_calls_total') >
      metric(before, 'bigfleet_shard_inspect_needs_calls_total'));
    assert.ok(metric(m, 'bigfleet_shard_inspect_needs_cancelled_total') >= 1);
    assert.ok(metric(m, 'bigfleet_shard_inspect_needs_rows_sent_total') >= 3000);
    assert.strictEqual(metric(m, 'bigfleet_shard_inspect_needs_denied_total'), 0);
    // the appliance still answers
    const again = await inspect(S.addr, { cluster_id: 'alpha' });
    assert.strictEqual(again.rows.length, 2);
  }],
];

// ------------------------------------------------------------------ other appliances

async function withShard(opts, fn) {
  const s = await L.startShard(opts);
  try {
    await fn(s);
  } catch (e) {
    console.log(s.log().split('\n').slice(-40).join('\n'));
    throw e;
  } finally {
    await s.stop();
  }
}

function makeCerts(dir) {
  L.makeCerts(dir, {
    shard: 'DNS:localhost,IP:127.0.0.1,URI:bigfleet://shard/s1',
    readonly: 'URI:bigfleet://readonly',
    admin: 'URI:bigfleet://admin',
    c1: 'URI:bigfleet://cluster/c1',
    two: 'URI:bigfleet://readonly,URI:bigfleet://admin',
  });
}

const creds = (dir, who) => L.certCreds(dir, who);

const isolated = [
  ['before the first cycle: a header with cycle 0, timestamp 0 and no rows ("not yet computed")', async () => {
    // a provider that accepts connections and never answers: the first
    // reconcile pass hangs, and the cycle waits (up to a minute) for it, so
    // nothing is published during this test
    const net = require('net');
    const held = [];
    const mute = net.createServer((c) => { held.push(c); c.on('error', () => {}); });
    await new Promise((r) => mute.listen(0, '127.0.0.1', r));
    const addr = `127.0.0.1:${mute.address().port}`;
    try {
      await withShard({ args: [`--provider-addr=${addr}`, '--reconcile-timeout=1m'] }, async (s) => {
      const r = await inspect(s.addr, {});
      assert.strictEqual(r.status.code, G.OK);
      assert.strictEqual(r.frames.length, 1);
      assert.strictEqual(r.frames[0].frame, 'header');
      assert.strictEqual(r.header.cycle, undefined); // 0
      assert.strictEqual(r.header.computed_at_unix_nanos, undefined); // 0
      const f = await inspect(s.addr, { cluster_id: 'x', limit: 3 });
      assert.strictEqual(f.frames.length, 1);
      });
    } finally {
      for (const c of held) c.destroy();
      mute.close();
    }
  }],
  ['mTLS: bigfleet://readonly and bigfleet://admin may call; a cluster certificate is denied', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bf-inspect-certs-'));
    try {
      makeCerts(dir);
      const tls = { cert: path.join(dir, 'shard.pem'), key: path.join(dir, 'shard.key'),
        ca: path.join(dir, 'ca.pem') };
      await withShard({ tls, args: ['--reconcile-timeout=1m'] }, async (s) => {
        const addr = `localhost:${s.port}`;
        for (const who of ['readonly', 'admin']) {
          const r = await inspect(addr, {}, { creds: creds(dir, who) });
          assert.strictEqual(r.status.code, G.OK, `${who}: ${JSON.stringify(r.status)}`);
          assert.strictEqual(r.frames[0].frame, 'header');
        }
        const bad = await inspect(addr, { cluster_id: 'c1' }, { creds: creds(dir, 'c1') });
        assert.strictEqual(bad.status.code, G.PERMISSION_DENIED);
        assert.match(bad.status.details,
          /InspectNeeds requires client certificate URI SAN bigfleet:\/\/readonly or bigfleet:\/\/admin \(got bigfleet:\/\/cluster\/c1\)/);
        assert.strictEqual(bad.frames.length, 0);
        const two = await inspect(addr, {}, { creds: creds(dir, 'two') });
        assert.strictEqual(two.status.code, G.PERMISSION_DENIED);
        const m = (await L.httpGet(s.metricsPort, '/metrics')).body;
        assert.strictEqual(metric(m, 'bigfleet_shard_inspect_needs_denied_total'), 1);
        assert.ok(metric(m, 'bigfleet_shard_grpc_identity_rejected_total') >= 1);
        assert.match(s.log(), /InspectNeeds refused.*identity=bigfleet:\/\/cluster\/c1/);
      });
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }],
];

register([...L.logOnFail(tests, () => S, 30), ['(stop the shared appliance)', async () => {
  for (const op of ops) op.close();
  const ex = await S.stop();
  assert.strictEqual(ex.code, 0);
}], ...isolated], {
  before: async () => {
    const simPort = await L.freePort();
    S = await L.startShard({ args: ['--provider-addr=', `--sim-listen=127.0.0.1:${simPort}`,
      '--sim-args=--seed-idle 2 --zones 3', '--cycle-interval=200ms', '--local-bootstrap',
      '--max-needs=8192', '--cluster-max-needs=8192'] });
  },
});
