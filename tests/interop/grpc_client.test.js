// grpc_client.test.js — our gRPC client (build/tests/interop/grpc_test_client)
// against real @grpc/grpc-js servers: h2c, TLS and mTLS; unary, concurrency
// on one connection, server streaming, bidi, deadlines and cancellation both
// ways (the grpc-js server records what it saw), large messages, the client
// identity the server sees, GOAWAY on graceful shutdown, fail-fast while the
// server is down and reconnection once it is up.
'use strict';
const { spawn } = require('child_process');
const L = require('./grpc_lib');
const { register } = require('./register');
const { grpc, eq, assert } = L;

const pkg = L.loadPkg();
let pki;

// A grpc-js server with the same behaviour as grpc_test_server.c.
function makeServer(seen) {
  const server = new grpc.Server({
    'grpc.max_receive_message_length': L.BIG, 'grpc.max_send_message_length': L.BIG,
  });
  server.addService(pkg.CapacityProvider.service, {
    Get: (call, cb) => {
      const id = call.request.id;
      if (id === 'missing') return cb({ code: grpc.status.NOT_FOUND, details: 'machine missing not found' });
      if (id === 'unicode') return cb({ code: grpc.status.INVALID_ARGUMENT, details: 'bad \u2713 100%\nline2' });
      if (id === 'whoami') {
        const ac = call.getAuthContext && call.getAuthContext();
        const san = (ac && ac.sslPeerCertificate && ac.sslPeerCertificate.subjectaltname) || '';
        return cb(null, { id: san, instance_type: 'whoami' });
      }
      if (id.startsWith('slow:')) return setTimeout(() => cb(null, { id, instance_type: 'slow' }), +id.slice(5));
      cb(null, { id, instance_type: 'echo', state: 'MACHINE_STATE_IDLE' });
    },
    Configure: (call, cb) => cb(null, { operation_id: String(call.request.bootstrap_blob.length), machine: { id: call.request.machine_id } }),
    List: (call, cb) => {
      const n = call.request.max_results;
      const machines = [];
      for (let i = 0; i < n; i++) machines.push({ id: `m${i}`, instance_type: 'gpu.8x', zone: 'zone-a', state: 'MACHINE_STATE_IDLE' });
      cb(null, { machines });
    },
    Drain: (call) => { call.on('cancelled', () => { seen.drainCancelled++; }); },
  });
  server.addService(pkg.ShardRead.service, {
    InspectNeeds: (call) => {
      const limit = call.request.limit;
      call.write({ header: { cycle: '7', total_needs: limit } });
      if (limit >= 0) {
        for (let i = 0; i < limit; i++) call.write({ need: { cluster_id: call.request.cluster_id, profile_fingerprint: `fp-${i}` } });
        return call.end();
      }
      let i = 0;
      const t = setInterval(() => call.write({ need: { profile_fingerprint: `fp-${i++}` } }), 20);
      call.on('cancelled', () => { clearInterval(t); seen.inspectCancelled++; });
    },
  });
  server.addService(pkg.Shard.service, {
    Session: (call) => {
      call.on('data', (m) => {
        if (m.hello) return call.write({ ack: { echo: 'hello' } });
        if (m.rollup && m.rollup.cluster_id === 'cancel-me') {
          // server-side cancellation: reset the HTTP/2 stream
          seen.serverCancelled++;
          return call.call && call.call.stream ? call.call.stream.close(0x8) : call.destroy();
        }
        if (m.rollup && m.rollup.cluster_id === 'shutdown') {
          call.write({ ack: { echo: 'rollup' } });
          seen.shutdownStarted++;
          return setTimeout(() => server.tryShutdown(() => { seen.shutdownDone++; }), 50);
        }
        call.write({ ack: { echo: 'rollup' } });
      });
      call.on('end', () => call.end());
      call.on('error', () => {});
    },
  });
  return server;
}

function bind(server, port, creds) {
  return new Promise((resolve, reject) => server.bindAsync(`127.0.0.1:${port}`, creds, (e, p) => e ? reject(e) : resolve(p)));
}

function runClient(args, ms = 60000) {
  return new Promise((resolve) => {
    const p = spawn(L.CLIENT_BIN, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '';
    p.stdout.on('data', d => { out += d; });
    p.stderr.on('data', d => { err += d; });
    const t = setTimeout(() => p.kill('SIGKILL'), ms);
    p.on('exit', (code, sig) => { clearTimeout(t); resolve({ code, sig, out, err }); });
  });
}

const { freePort } = require('./ports');

function expectOk(r, what) {
  if (r.code !== 0) throw new Error(`${what}: exit ${r.code}/${r.sig}\n${r.out}\n${r.err.slice(-3000)}`);
}

const tests = [
  ['h2c: unary, 200 concurrent, streaming, bidi, deadline, cancel both ways, 64 MiB', async () => {
    const seen = { drainCancelled: 0, inspectCancelled: 0, serverCancelled: 0, shutdownStarted: 0, shutdownDone: 0 };
    const server = makeServer(seen);
    const port = await bind(server, 0, grpc.ServerCredentials.createInsecure());
    try {
      const r = await runClient(['--addr', `127.0.0.1:${port}`, '--scenario',
        'unary,concurrent,stream,bidi,deadline,cancel,servercancel,big']);
      expectOk(r, 'client');
      for (const s of ['unary', 'concurrent', 'stream', 'bidi', 'deadline', 'cancel', 'servercancel', 'big'])
        assert(r.out.includes(`ok ${s}\n`), `scenario ${s}: ${r.out}`);
      await L.sleep(100);
      eq(seen.drainCancelled, 1, 'grpc-js server saw the deadline as a cancelled call');
      eq(seen.inspectCancelled, 1, 'grpc-js server saw our RST_STREAM(CANCEL)');
      eq(seen.serverCancelled, 1, 'server-side cancel happened');
    } finally {
      server.forceShutdown();
    }
  }],
  ['TLS: the client verifies the server against the CA', async () => {
    const server = makeServer({});
    const creds = grpc.ServerCredentials.createSsl(null,
      [{ cert_chain: pki.read('server.crt'), private_key: pki.read('server.key') }], false);
    const port = await bind(server, 0, creds);
    try {
      const r = await runClient(['--addr', `127.0.0.1:${port}`, '--tls-ca', pki.p('ca.crt'),
        '--scenario', 'unary,stream,bidi,whoami']);
      expectOk(r, 'client');
      assert(r.out.includes('identity \n'), `no client identity over TLS: ${r.out}`);
      // a server certificate that does not match the name is refused
      const bad = await runClient(['--addr', `127.0.0.1:${port}`, '--tls-ca', pki.p('ca.crt'),
        '--server-name', 'other.example', '--scenario', 'unary'], 20000);
      eq(bad.code, 1, 'name mismatch must fail');
      assert(/FAIL unary: Get m1: UNAVAILABLE/.test(bad.out), bad.out);
      // a server certificate from another CA is refused
      const rogue = await runClient(['--addr', `127.0.0.1:${port}`, '--tls-ca', pki.p('rogueca.crt'),
        '--scenario', 'unary'], 20000);
      eq(rogue.code, 1, 'untrusted server must fail');
    } finally {
      server.forceShutdown();
    }
  }],
  ['mTLS: the grpc-js server sees our bigfleet://shard identity', async () => {
    const server = makeServer({});
    const creds = grpc.ServerCredentials.createSsl(pki.read('ca.crt'),
      [{ cert_chain: pki.read('server.crt'), private_key: pki.read('server.key') }], true);
    const port = await bind(server, 0, creds);
    try {
      const r = await runClient(['--addr', `127.0.0.1:${port}`, '--tls-ca', pki.p('ca.crt'),
        '--tls-cert', pki.p('shard.crt'), '--tls-key', pki.p('shard.key'),
        '--scenario', 'unary,concurrent,bidi,whoami']);
      expectOk(r, 'client');
      assert(r.out.includes('identity URI:bigfleet://shard/s1\n'), r.out);
      // without a client certificate the mTLS server refuses us
      const none = await runClient(['--addr', `127.0.0.1:${port}`, '--tls-ca', pki.p('ca.crt'),
        '--scenario', 'unary'], 20000);
      eq(none.code, 1, 'no client certificate must fail');
      assert(/UNAVAILABLE/.test(none.out), none.out);
    } finally {
      server.forceShutdown();
    }
  }],
  ['GOAWAY: an open session survives graceful shutdown, new calls fail', async () => {
    const seen = { shutdownStarted: 0, shutdownDone: 0 };
    const server = makeServer(seen);
    const port = await bind(server, 0, grpc.ServerCredentials.createInsecure());
    try {
      const r = await runClient(['--addr', `127.0.0.1:${port}`, '--scenario', 'goaway']);
      expectOk(r, 'client');
      eq(seen.shutdownStarted, 1, 'shutdown requested');
      await L.sleep(200);
      eq(seen.shutdownDone, 1, 'grpc-js finished its graceful shutdown once our stream ended');
    } finally {
      server.forceShutdown();
    }
  }],
  ['reconnect: fast UNAVAILABLE while down, success once the server appears', async () => {
    const port = await freePort();
    const client = runClient(['--addr', `127.0.0.1:${port}`, '--scenario', 'reconnect'], 30000);
    await L.sleep(800);
    const server = makeServer({});
    await bind(server, port, grpc.ServerCredentials.createInsecure());
    try {
      const r = await client;
      expectOk(r, 'client');
      const m = /reconnect: (\d+) fast UNAVAILABLE/.exec(r.out);
      assert(m && +m[1] >= 3, r.out);
    } finally {
      server.forceShutdown();
    }
  }],
];

register(tests, {
  timeout: 60000,
  before: async () => {
    pki = L.makePki({
      server: 'DNS:localhost,IP:127.0.0.1',
      shard: 'URI:bigfleet://shard/s1',
    }, ['rogueca']);
    return {};
  },
  after: async () => { if (pki) pki.cleanup(); },
});
