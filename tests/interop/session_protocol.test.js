#!/usr/bin/env node
// session_protocol.test.js: the Shard/Session handshake against the real
// bigfleet-shardd with a @grpc/grpc-js operator — Hello rules, mTLS
// identity binding (throwaway certificates made with openssl), one session
// per cluster with replacement, a reconnect flood, and the HTTP probes.
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const L = require('./session_lib');
const { register } = require('./register');
const { assert } = L;

const G = L.grpc.status;

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

function metric(text, name) {
  const m = text.split('\n').find((l) => l.startsWith(name + ' ') || l.startsWith(name + '{'));
  return m ? Number(m.split(' ').pop()) : undefined;
}

let S; // the shared appliance for the plaintext tests

const tests = [
  ['a non-Hello first frame ends the stream with FAILED_PRECONDITION', async () => {
    const op = new L.Operator(S.addr);
    op.rollup('c-first', []);
    const st = await op.waitEnd();
    assert.strictEqual(st.code, G.FAILED_PRECONDITION);
    assert.match(st.details, /first frame must be Hello/);
    op.close();
  }],
  ['Hello without a cluster_id ends the stream with INVALID_ARGUMENT', async () => {
    const op = new L.Operator(S.addr);
    op.send({ hello: { cluster_id: '', protocol_version: 'v1alpha1' } });
    const st = await op.waitEnd();
    assert.strictEqual(st.code, G.INVALID_ARGUMENT);
    const op2 = new L.Operator(S.addr);
    op2.send({ hello: { cluster_id: 'bad id with spaces' } });
    assert.strictEqual((await op2.waitEnd()).code, G.INVALID_ARGUMENT);
    op.close();
    op2.close();
    assert.ok(L.shm(S.id, 'dump').stats.hello_rejected >= 3);
  }],
  ['Hello is acknowledged with echo "hello", the term and the shard epoch; a second Hello too', async () => {
    const op = new L.Operator(S.addr);
    op.hello('c-hello');
    const a = await op.ack('hello');
    assert.strictEqual(a.ack.coordinator_term, '0');
    assert.strictEqual(a.ack.shard_epoch, '1');
    op.hello('c-hello');
    await op.ack('hello');
    const c = L.cluster(S.id, 'c-hello');
    assert.strictEqual(c.connected, 1);
    assert.strictEqual(c.session_epoch, 1);
    assert.ok(c.connected_since_ns > 0);
    op.close();
    await L.waitFor(() => L.cluster(S.id, 'c-hello').connected === 0, 3000, 'disconnect');
  }],
  ['a new session replaces the old one, whose cleanup cannot evict its successor', async () => {
    const before = L.shm(S.id, 'dump').stats;
    const a = new L.Operator(S.addr);
    a.hello('c-repl');
    await a.ack('hello');
    const b = new L.Operator(S.addr);
    b.hello('c-repl');
    await b.ack('hello');
    const st = await a.waitEnd();
    assert.strictEqual(st.code, G.ABORTED);
    assert.match(st.details, /replaced/);
    a.close();
    await L.sleep(200); // the old stream's cleanup has run
    let c = L.cluster(S.id, 'c-repl');
    assert.strictEqual(c.connected, 1, 'successor still connected');
    assert.strictEqual(c.session_epoch, 2);
    b.rollup('c-repl', []);
    await b.ack('rollup'); // the successor is fully functional
    const after = L.shm(S.id, 'dump').stats;
    assert.strictEqual(after.installed - before.installed, 1);
    assert.strictEqual(after.replaced - before.replaced, 1);
    b.close();
    await L.waitFor(() => L.cluster(S.id, 'c-repl').connected === 0, 3000, 'disconnect');
    c = L.shm(S.id, 'dump').stats;
    assert.strictEqual(c.removed - before.removed, 1);
  }],
  ['a flood of reconnects leaves one live session and other clusters unaffected', async () => {
    const steady = new L.Operator(S.addr);
    steady.hello('c-steady');
    await steady.ack('hello');
    const ops = [];
    for (let i = 0; i < 150; i++) {
      // every other one on its own TCP connection (grpc-js shares subchannels otherwise)
      const o = new L.Operator(S.addr, null,
        { channelOptions: i % 2 ? { 'grpc.use_local_subchannel_pool': 1 } : {} });
      o.hello('c-flood');
      ops.push(o);
      if (i % 3 === 0) o.close(); // some vanish at once
    }
    // the steady operator keeps its service during the flood
    steady.rollup('c-steady', [L.need({ aggregate: { cpu: '2' } })]);
    await steady.ack('rollup', 5000);
    // every flooded stream was either acknowledged or ended before the last one
    await L.waitFor(() => ops.every((o) => o.status ||
      o.msgs.some((m) => m.payload === 'ack' && m.ack.echo === 'hello')), 10000, 'flood settled');
    const last = new L.Operator(S.addr);
    last.hello('c-flood');
    await last.ack('hello');
    await L.waitFor(() => ops.every((o) => o.status), 10000, 'flooded streams to end');
    for (const o of ops) o.close();
    const d = L.shm(S.id, 'dump');
    const c = d.clusters.find((x) => x.name === 'c-flood');
    assert.strictEqual(c.connected, 1);
    last.rollup('c-flood', []);
    await last.ack('rollup');
    assert.strictEqual(d.clusters.find((x) => x.name === 'c-steady').rows_count, 1);
    last.close();
    steady.close();
  }],
  ['an unknown payload after Hello is ignored; a malformed frame ends the stream with INVALID_ARGUMENT', async () => {
    const op = new L.RawOperator(S.addr);
    op.send({ hello: { cluster_id: 'c-raw' } });
    await op.next((m) => m.payload === 'ack' && m.ack.echo === 'hello', 5000, 'hello ack');
    op.sendRaw([0x48, 0x01]); // field 9 (unknown to this schema version)
    op.sendRaw([0x48, 0x01]);
    op.send({ rollup: { cluster_id: 'c-raw', needs: [] } });
    await op.next((m) => m.payload === 'ack' && m.ack.echo === 'rollup', 5000, 'rollup ack');
    assert.strictEqual((S.log().match(/OperatorMessage without a known payload ignored/g) || []).length, 1,
      'logged once per stream');
    op.sendRaw([0x12, 0x05, 0x0a]); // a rollup whose length runs past the frame
    await L.waitFor(() => op.status, 5000, 'stream end');
    assert.strictEqual(op.status.code, G.INVALID_ARGUMENT);
    assert.match(op.status.details, /malformed OperatorMessage/);
    op.close();
  }],
  ['/healthz answers 200, /readyz 503 until the first reconcile, /metrics carries the session series', async () => {
    const h = await L.httpGet(S.metricsPort, '/healthz');
    assert.strictEqual(h.status, 200);
    const r = await L.httpGet(S.metricsPort, '/readyz');
    assert.strictEqual(r.status, 503); // the provider address is closed
    assert.match(r.body, /first provider reconcile not yet complete/);
    const m = await L.httpGet(S.metricsPort, '/metrics');
    assert.strictEqual(m.status, 200);
    assert.ok(metric(m.body, 'bigfleet_shard_session_lifecycle_total{event="installed"}') >= 3);
    assert.ok(metric(m.body, 'bigfleet_shard_session_hello_rejected_total') >= 3);
    assert.match(m.body, /bigfleet_shard_rollup_quarantined\{cluster="c-steady"\} 0/);
    assert.match(m.body, /bigfleet_shard_session_rollup_ingest_seconds_bucket\{le="\+Inf"\} \d+/);
    assert.strictEqual((await L.httpGet(S.metricsPort, '/nope')).status, 404);
  }],
];

// ------------------------------------------------------------------ mTLS

function makeCerts(dir) {
  L.makeCerts(dir, {
    shard: 'DNS:localhost,IP:127.0.0.1,URI:bigfleet://shard/s1',
    c1: 'URI:bigfleet://cluster/c1',
    two: 'URI:bigfleet://cluster/c1,URI:bigfleet://cluster/c2',
  });
}

const creds = (dir, who) => L.certCreds(dir, who);

const tlsTests = [
  ['mTLS: the certificate\'s bigfleet://cluster/<id> must equal Hello.cluster_id', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bf-certs-'));
    try {
      makeCerts(dir);
      const tls = { cert: path.join(dir, 'shard.pem'), key: path.join(dir, 'shard.key'),
        ca: path.join(dir, 'ca.pem') };
      await withShard({ tls }, async (s) => {
        const addr = `localhost:${s.port}`;
        const good = new L.Operator(addr, creds(dir, 'c1'));
        good.hello('c1');
        await good.ack('hello', 8000);
        const bad = new L.Operator(addr, creds(dir, 'c1'));
        bad.hello('c2'); // impersonation attempt
        const st = await bad.waitEnd(8000);
        assert.strictEqual(st.code, G.PERMISSION_DENIED);
        assert.match(st.details, /does not authorize cluster_id c2/);
        const two = new L.Operator(addr, creds(dir, 'two'));
        two.hello('c1'); // two bigfleet SANs: refused by the transport
        assert.strictEqual((await two.waitEnd(8000)).code, G.PERMISSION_DENIED);
        const d = L.shm(s.id, 'dump');
        assert.strictEqual(d.stats.identity_rejected, 1);
        assert.strictEqual(d.clusters.find((c) => c.name === 'c1').connected, 1);
        assert.strictEqual(d.clusters.find((c) => c.name === 'c2'), undefined);
        const m = await L.httpGet(s.metricsPort, '/metrics');
        assert.strictEqual(metric(m.body, 'bigfleet_shard_session_identity_rejected_total'), 1);
        good.close();
        bad.close();
        two.close();
      });
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }],
];

register([...L.logOnFail(tests, () => S, 30), ['(stop the shared appliance)', async () => {
  const ex = await S.stop();
  assert.strictEqual(ex.code, 0);
}], ...tlsTests], { before: async () => { S = await L.startShard(); } });
