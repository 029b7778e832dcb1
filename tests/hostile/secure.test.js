// secure.test.js — secure by default (issue 13 part 1 and the first
// report's item 1): plaintext gRPC off loopback refuses to start (exit 2,
// naming --insecure-plaintext and the TLS flags); under mTLS a client
// certificate for one cluster can neither take over another cluster's
// session (so no "three empty rollups" walk its demand down) nor read
// Needs through InspectNeeds; one identity holds at most
// --max-conns-per-identity connections; a TLS client that never finishes
// its handshake is cut at the deadline. The well-behaved operator has its
// own certificate and connection.
'use strict';
const http2 = require('http2');
const tls = require('tls');
const { spawnSync } = require('child_process');
const path = require('path');
const { before, after } = require('node:test');
const H = require('./lib');
const G = require('../interop/grpc_lib');

const { assert, sleep } = H;
const SESSION = '/bigfleet.v1alpha1.Shard/Session';
const INSPECT = '/bigfleet.v1alpha1.ShardRead/InspectNeeds';

// an mTLS HTTP/2 connection from the attacker's address with one of the PKI's certificates
function tlsSession(port, pki, who) {
  const s = http2.connect(`https://localhost:${port}`, {
    createConnection: () => tls.connect({ host: '127.0.0.1', port, localAddress: H.ATTACKER,
      servername: 'localhost', ca: pki.read('ca.crt'), key: pki.read(`${who}.key`),
      cert: pki.read(`${who}.crt`), ALPNProtocols: ['h2'] }),
  });
  s.on('error', () => {});
  return s;
}

const pki = G.makePki({ shard: 'DNS:localhost,IP:127.0.0.1', good: 'URI:bigfleet://cluster/good',
  a: 'URI:bigfleet://cluster/a', ro: 'URI:bigfleet://readonly' });
let S, op;
before(async () => ({ S, op } = await H.setUp({
  tls: { cert: pki.p('shard.crt'), key: pki.p('shard.key'), ca: pki.p('ca.crt') },
  args: ['--max-conns-per-identity=4', '--grpc-handshake-timeout=1s'],
}, 'good', { ca: pki.p('ca.crt'), key: pki.p('good.key'), cert: pki.p('good.crt') })));
after(async () => {
  try {
    await H.tearDown('secure', S, op);
  } finally {
    pki.cleanup();
  }
});
const test = H.checks(() => S);

test('plaintext gRPC off loopback refuses to start: exit 2 naming --insecure-plaintext and the TLS flags', async () => {
  for (const listen of ['0.0.0.0:7780', ':7780', '[::]:7780']) {
    const r = spawnSync(path.join(H.L.BIN, 'bigfleet-shardd'), [`--listen=${listen}`, '--metrics-addr=0',
      `--id=hostile-secure-${process.pid}`, '--data-dir=/nonexistent'], { encoding: 'utf8', timeout: 10000 });
    assert.strictEqual(r.status, 2, `${listen}: exit ${r.status} ${r.stderr}`);
    assert.match(r.stderr, /--insecure-plaintext/);
    assert.match(r.stderr, /--tls-cert, --tls-key and --tls-ca/);
  }
});

test('with TLS the plaintext gauge is 0 and no plaintext warning is logged', async () => {
  assert.strictEqual((await H.metrics(S)).get('bigfleet_appliance_insecure_plaintext'), 0);
  assert.doesNotMatch(S.log(), /gRPC is PLAINTEXT/);
});

test('a certificate for cluster a cannot take over cluster good\'s session', () =>
  H.attack(S, op, {
    name: 'mtls-session-hijack',
    what: 'mTLS streams with the certificate of cluster a saying Hello{cluster_id: good}, each followed by 3 empty rollups',
    rssBoundMB: 100,
    counters: [['bigfleet_shard_session_identity_rejected_total', 1]],
    log: /session identity mismatch/,
    run: async (until) => {
      const d0 = H.L.shm(S.id, 'dump', 'good');
      do {
        const s = tlsSession(S.port, pki, 'a');
        const h = new H.HostileSession(S.port, 'good', { session: s });
        h.send({ hello: { cluster_id: 'good', protocol_version: 'v1alpha1' } });
        for (let i = 0; i < 3; i++) h.rollup([]);
        const r = await h.c.done;
        assert.strictEqual(r.code, 7, `PERMISSION_DENIED, got ${JSON.stringify(r)}`);
        assert.match(r.message, /does not authorize cluster_id good/);
        s.close();
        await sleep(100);
      } while (Date.now() < until);
      const d1 = H.L.shm(S.id, 'dump', 'good');
      assert.strictEqual(d1.stats.replaced, d0.stats.replaced, 'the good session was never replaced');
      const g = d1.clusters.find((c) => c.name === 'good');
      assert.strictEqual(g.connected, 1);
      assert.ok(g.rows_count >= 1, 'its demand is intact');
    },
  }));

test('a cluster certificate cannot read Needs through InspectNeeds', () =>
  H.attack(S, op, {
    name: 'mtls-inspect-needs-as-cluster',
    what: 'InspectNeeds calls with the certificate of cluster a',
    rssBoundMB: 100,
    counters: [['bigfleet_shard_inspect_needs_denied_total', 1]],
    log: /InspectNeeds refused: the client certificate is neither readonly nor admin/,
    run: async (until) => {
      do {
        const s = tlsSession(S.port, pki, 'a');
        const req = Buffer.from([0x0a, 0x04, 0x67, 0x6f, 0x6f, 0x64]); /* cluster_id "good" */
        const c = H.grpcCall(s, INSPECT, { write: (r) => r.end(Buffer.concat([H.grpcPrefix(req.length), req])) });
        const r = await c.done;
        assert.strictEqual(r.code, 7, `PERMISSION_DENIED, got ${JSON.stringify(r)}`);
        s.close();
        await sleep(100);
      } while (Date.now() < until);
      /* the readonly identity may */
      const s = tlsSession(S.port, pki, 'ro');
      const c = H.grpcCall(s, INSPECT, { write: (r) => r.end(H.grpcPrefix(0)) });
      assert.strictEqual((await c.done).code, 0, 'bigfleet://readonly reads');
      s.close();
    },
  }));

test('one identity holds at most --max-conns-per-identity (4) connections', () =>
  H.attack(S, op, {
    name: 'connections-per-identity',
    what: '10 mTLS connections with the certificate of cluster a, kept open',
    rssBoundMB: 150,
    counters: [['bigfleet_shard_grpc_connections_identity_limited_total', 6]],
    log: /per-identity connection limit/,
    run: async (until) => {
      const sessions = [];
      for (let i = 0; i < 10; i++) {
        const s = tlsSession(S.port, pki, 'a');
        s.closedAt = 0;
        s.on('close', () => { s.closedAt = Date.now(); });
        sessions.push(s);
        await sleep(30);
      }
      await sleep(1000);
      const open = sessions.filter((s) => !s.closedAt && !s.destroyed);
      assert.strictEqual(open.length, 4, `${open.length} connections open`);
      while (Date.now() < until) await sleep(100);
      sessions.forEach((s) => s.destroy());
    },
  }));

test('a TLS client that never finishes its handshake is cut at the deadline (1 s)', () =>
  H.attack(S, op, {
    name: 'tls-handshake-stall',
    what: 'rounds of 30 TCP connections to the mTLS port that send nothing or half a ClientHello',
    rssBoundMB: 100,
    counters: [['bigfleet_shard_grpc_handshake_failures_total', 30]],
    log: /handshake timeout/,
    run: async (until) => {
      do {
        const t0 = Date.now();
        const socks = Array.from({ length: 30 }, (_, i) => {
          const s = H.attackerSocket(S.port);
          s.on('error', () => {});
          s.resume();
          if (i % 2) s.on('connect', () => s.write(Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01])));
          s.closedAt = 0;
          s.on('close', () => { s.closedAt = Date.now(); });
          return s;
        });
        await H.L.waitFor(() => socks.every((s) => s.closedAt), 5000, 'every connection closed');
        const lives = socks.map((s) => s.closedAt - t0);
        assert.ok(Math.min(...lives) >= 800 && Math.max(...lives) <= 3000, `lives ${Math.min(...lives)}..${Math.max(...lives)} ms`);
      } while (Date.now() < until);
    },
  }));
