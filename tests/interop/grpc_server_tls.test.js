// grpc_server_tls.test.js — @grpc/grpc-js clients against our gRPC server
// over TLS 1.3 (server certificate only) and mTLS (client certificates with
// bigfleet:// URI SANs, made here with a throwaway CA): unary, streaming and
// bidi over TLS; the identity each call sees; the Session and ShardRead
// identity bindings; certificates with no bigfleet SAN or two of them;
// untrusted and missing client certificates; plaintext against the TLS
// port — and after every failure the server still serves.
'use strict';
const L = require('./grpc_lib');
const { register } = require('./register');
const { grpc, eq, assert } = L;

const pkg = L.loadPkg();
let pki;

function creds(client) {
  if (!client) return grpc.credentials.createSsl(pki.read('ca.crt'));
  return grpc.credentials.createSsl(pki.read('ca.crt'), pki.read(`${client}.key`), pki.read(`${client}.crt`));
}
// the server certificate carries DNS:localhost and IP:127.0.0.1; verify by name
const OPTS = { ...L.CHANNEL_OPTS, 'grpc.ssl_target_name_override': 'localhost' };
function provider(addr, client) {
  return new pkg.CapacityProvider(addr, creds(client), OPTS);
}

async function whoami(addr, client) {
  const c = provider(addr, client);
  const r = await L.unary(c, 'Get', { id: 'whoami' });
  c.close();
  return r;
}

async function session(addr, client, clusterId) {
  const s = new pkg.Shard(addr, creds(client), OPTS);
  const call = s.Session();
  const p = L.collect(call);
  call.write({ hello: { cluster_id: clusterId } });
  call.write({ rollup: { cluster_id: clusterId } });
  call.end();
  const res = await p;
  s.close();
  return res;
}

async function inspect(addr, client) {
  const r = new pkg.ShardRead(addr, creds(client), OPTS);
  const res = await L.collect(r.InspectNeeds({ cluster_id: 'c1', limit: 3 }));
  r.close();
  return res;
}

const tests = [
  ['TLS: unary, server streaming and bidi work; no client identity', async ({ tls }) => {
    const r = await whoami(tls.addr);
    eq(r.err, null, 'whoami error');
    eq(r.resp.id, '', 'no identity without client certificates');
    const st = await inspect(tls.addr);
    eq(st.status.code, 0, 'stream status');
    eq(st.msgs.length, 4, 'stream messages');
    const b = await session(tls.addr, null, 'c1');
    eq(b.status.code, 0, 'bidi status');
    eq(b.msgs.length, 2, 'bidi acks');
  }],
  ['TLS: a plaintext client on the TLS port fails and the server carries on', async ({ tls }) => {
    const before = (await L.stats(tls)).server.handshake_failures;
    const c = new pkg.CapacityProvider(tls.addr, grpc.credentials.createInsecure());
    const r = await L.unary(c, 'Get', { id: 'm1' }, { deadlineMs: 2000 });
    c.close();
    assert(r.err && r.err.code !== 0, 'plaintext call must fail');
    const s = await L.stats(tls);
    assert(s.server.handshake_failures > before, 'handshake failure counted');
    eq((await whoami(tls.addr)).err, null, 'TLS client still served');
  }],
  ['mTLS: the call sees the peer bigfleet identity', async ({ mtls }) => {
    const r = await whoami(mtls.addr, 'cluster-c1');
    eq(r.err, null, 'error');
    eq(r.resp.id, 'bigfleet://cluster/c1', 'identity');
    const o = await whoami(mtls.addr, 'mixed');
    eq(o.resp.id, 'bigfleet://cluster/c1', 'other URI schemes are ignored');
  }],
  ['mTLS: Session accepts its own cluster and denies another', async ({ mtls }) => {
    const ok = await session(mtls.addr, 'cluster-c1', 'c1');
    eq(ok.status.code, 0, 'own cluster');
    eq(ok.msgs.map(m => m.ack.echo).join(','), 'hello,rollup', 'acks');
    const bad = await session(mtls.addr, 'cluster-c1', 'c2');
    eq(bad.status.code, grpc.status.PERMISSION_DENIED, 'other cluster');
    assert(/does not authorize cluster_id c2/.test(bad.status.details), bad.status.details);
    eq(bad.msgs.length, 0, 'no ack');
  }],
  ['mTLS: ShardRead admits readonly and admin, denies a cluster', async ({ mtls }) => {
    eq((await inspect(mtls.addr, 'readonly')).status.code, 0, 'readonly');
    eq((await inspect(mtls.addr, 'admin')).status.code, 0, 'admin');
    eq((await inspect(mtls.addr, 'cluster-c1')).status.code, grpc.status.PERMISSION_DENIED, 'cluster');
  }],
  ['mTLS: a certificate with no bigfleet SAN, or two, gets PERMISSION_DENIED on every call', async ({ mtls }) => {
    const before = (await L.stats(mtls)).server.identity_rejected;
    for (const who of ['nosan', 'two']) {
      const r = await whoami(mtls.addr, who);
      eq(r.err && r.err.code, grpc.status.PERMISSION_DENIED, `${who} unary`);
      assert(/exactly one bigfleet/.test(r.err.details), r.err.details);
      const b = await session(mtls.addr, who, 'c1');
      eq(b.status.code, grpc.status.PERMISSION_DENIED, `${who} bidi`);
    }
    const s = await L.stats(mtls);
    eq(s.server.identity_rejected - before, 4, 'counted');
    eq(s.started.Session, 1 + 1, 'handlers never saw the rejected sessions (only the two earlier c1 sessions)');
  }],
  ['mTLS: untrusted or missing client certificates fail the handshake; server carries on', async ({ mtls }) => {
    const before = (await L.stats(mtls)).server.handshake_failures;
    const rogue = await whoami(mtls.addr, 'rogue');
    eq(rogue.err && rogue.err.code, grpc.status.UNAVAILABLE, 'untrusted CA');
    const none = await whoami(mtls.addr);
    assert(none.err && none.err.code === grpc.status.UNAVAILABLE, `no client cert: ${none.err && none.err.code}`);
    const s = await L.stats(mtls);
    assert(s.server.handshake_failures >= before + 2, `handshake failures ${s.server.handshake_failures - before}`);
    eq((await whoami(mtls.addr, 'admin')).resp.id, 'bigfleet://admin', 'good client still served');
  }],
];

register(tests, {
  timeout: 30000,
  before: async () => {
    pki = L.makePki({
      server: 'DNS:localhost,IP:127.0.0.1',
      'cluster-c1': 'URI:bigfleet://cluster/c1',
      readonly: 'URI:bigfleet://readonly',
      admin: 'URI:bigfleet://admin',
      nosan: 'DNS:client.example',
      two: 'URI:bigfleet://cluster/c1,URI:bigfleet://admin',
      mixed: 'URI:spiffe://example.org/x,URI:bigfleet://cluster/c1,DNS:c1.example',
      rogue: { san: 'URI:bigfleet://cluster/c1', ca: 'rogueca' },
    }, ['rogueca']);
    const tls = await L.startServer(['--tls-cert', pki.p('server.crt'), '--tls-key', pki.p('server.key')]);
    const mtls = await L.startServer(['--tls-cert', pki.p('server.crt'), '--tls-key', pki.p('server.key'),
      '--tls-ca', pki.p('ca.crt')]);
    return { tls, mtls };
  },
  after: async (ctx) => {
    for (const s of [ctx.tls, ctx.mtls]) {
      if (!s) continue;
      const e = await s.stop();
      if (e.code !== 0) throw new Error(`server exit ${JSON.stringify(e)}: ${s.stderr().slice(-2000)}`);
    }
    if (pki) pki.cleanup();
  },
});
