// grpc_bad_input.test.js — bad input against our gRPC server; after each
// case a fresh @grpc/grpc-js client must still be served, and the server's
// counters must show the event.
//
//   raw TCP:   garbage bytes, a wrong connection preface, an oversized HTTP/2
//              frame (GOAWAY FRAME_SIZE_ERROR), connection churn
//   node http2 (real HTTP/2, hand-made gRPC bodies): a truncated gRPC frame,
//              a declared 2 GiB message, compressed messages, a bad
//              content-type, GET instead of POST, a grpc-timeout the server
//              enforces on its own
//              partially received messages over the server's inbound budget
//   grpc-js:   a message over the server's limit (RESOURCE_EXHAUSTED)
//   TLS port:  garbage instead of a ClientHello, a client offering only
//              http/1.1 in ALPN, a client that never speaks (handshake timeout)
//   HTTP/1.1:  garbage on the metrics port
'use strict';
const net = require('net');
const tls = require('tls');
const http2 = require('http2');
const L = require('./grpc_lib');
const { register } = require('./register');
const { grpc, eq, assert } = L;

const pkg = L.loadPkg();
const MAX_RECV = 1 << 20;
let pki;

async function healthy(srv) {
  const c = new pkg.CapacityProvider(srv.addr, grpc.credentials.createInsecure());
  const r = await L.unary(c, 'Get', { id: 'still-alive' });
  c.close();
  eq(r.err, null, 'server must still serve');
  eq(r.resp.id, 'still-alive', 'echo');
}

async function healthyTls(srv) {
  const creds = grpc.credentials.createSsl(pki.read('ca.crt'));
  const c = new pkg.CapacityProvider(srv.addr, creds, { 'grpc.ssl_target_name_override': 'localhost' });
  const r = await L.unary(c, 'Get', { id: 'still-alive' });
  c.close();
  eq(r.err, null, 'TLS server must still serve');
}

// Writes bytes, collects what the server sends until it closes (or ms pass).
function rawExchange(port, chunks, ms = 3000) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    const got = [];
    let closed = false;
    const t = setTimeout(() => { s.destroy(); resolve({ data: Buffer.concat(got), closed }); }, ms);
    s.on('connect', () => { for (const c of chunks) s.write(c); });
    s.on('data', d => got.push(d));
    s.on('error', () => {});
    s.on('close', () => { closed = true; clearTimeout(t); resolve({ data: Buffer.concat(got), closed }); });
  });
}

function frame(type, flags, sid, payload) {
  const h = Buffer.alloc(9);
  h.writeUIntBE(payload.length, 0, 3);
  h[3] = type; h[4] = flags; h.writeUInt32BE(sid, 5);
  return Buffer.concat([h, payload]);
}
function parseFrames(buf) {
  const out = [];
  let o = 0;
  while (o + 9 <= buf.length) {
    const len = buf.readUIntBE(o, 3);
    if (o + 9 + len > buf.length) break;
    out.push({ type: buf[o + 3], flags: buf[o + 4], sid: buf.readUInt32BE(o + 5) & 0x7fffffff, payload: buf.subarray(o + 9, o + 9 + len) });
    o += 9 + len;
  }
  return out;
}
const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');

// One raw gRPC request over node's http2; resolves {headers, trailers, data}.
function h2request(port, path, { headers = {}, body = Buffer.alloc(0), end = true, method = 'POST' } = {}) {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`http://127.0.0.1:${port}`);
    session.on('error', () => {});
    const req = session.request({
      ':method': method, ':path': path, 'content-type': 'application/grpc', te: 'trailers', ...headers,
    });
    const res = { headers: null, trailers: null, data: [] , t0: Date.now() };
    req.on('response', h => { res.headers = h; });
    req.on('trailers', t => { res.trailers = t; });
    req.on('data', d => res.data.push(d));
    req.on('error', e => { res.error = e; });
    req.on('close', () => {
      res.ms = Date.now() - res.t0;
      res.code = req.rstCode;
      session.close();
      // Trailers-Only responses carry grpc-status in the headers
      const st = (res.trailers && res.trailers['grpc-status']) || (res.headers && res.headers['grpc-status']);
      res.grpcStatus = st === undefined ? undefined : +st;
      res.grpcMessage = (res.trailers && res.trailers['grpc-message']) || (res.headers && res.headers['grpc-message']);
      resolve(res);
    });
    if (body.length) req.write(body);
    if (end) req.end();
    setTimeout(() => reject(new Error('h2 request timed out')), 10000).unref();
  });
}
function grpcFrame(payload, flag = 0) {
  const h = Buffer.alloc(5);
  h[0] = flag; h.writeUInt32BE(payload.length, 1);
  return Buffer.concat([h, payload]);
}
// MachineRef{id: "x"}
const MREF = Buffer.from([0x0a, 0x01, 0x78]);

// A gRPC call on an existing node http2 session that the test writes to
// piecemeal; `done` resolves {grpcStatus, grpcMessage, data} at close.
function openCall(session, path) {
  const req = session.request({ ':method': 'POST', ':path': path, 'content-type': 'application/grpc', te: 'trailers' });
  const res = { headers: null, trailers: null, data: [] };
  req.on('response', h => { res.headers = h; });
  req.on('trailers', t => { res.trailers = t; });
  req.on('data', d => res.data.push(d));
  req.on('error', e => { res.error = e; });
  const done = new Promise(resolve => req.on('close', () => {
    const st = (res.trailers && res.trailers['grpc-status']) || (res.headers && res.headers['grpc-status']);
    res.grpcStatus = st === undefined ? undefined : +st;
    res.grpcMessage = (res.trailers && res.trailers['grpc-message']) || (res.headers && res.headers['grpc-message']);
    resolve(res);
  }));
  return { req, done };
}
function varint(n) {
  const out = [];
  while (n >= 0x80) { out.push((n & 0x7f) | 0x80); n = Math.floor(n / 128); }
  out.push(n);
  return Buffer.from(out);
}
// MachineRef{id: 'y' x ...} of exactly n bytes (n < 2^21)
function machineRefOf(n) {
  const idLen = n - 4;
  const v = varint(idLen);
  if (v.length !== 3) throw new Error('machineRefOf: size out of range');
  return Buffer.concat([Buffer.from([0x0a]), v, Buffer.alloc(idLen, 'y')]);
}

const tests = [
  ['garbage bytes: connection closed, counted, server carries on', async ({ h2c }) => {
    const before = (await L.stats(h2c)).server.protocol_errors;
    const r = await rawExchange(h2c.port, [Buffer.from('\x16\x03\x01\x00\xff\x01\x00 garbage garbage garbage garbage\r\n\r\n', 'latin1')]);
    assert(r.closed, 'server closed the connection');
    await L.waitStat(h2c, s => s.server.protocol_errors > before);
    eq((await L.stats(h2c)).server.protocol_errors - before, 1, 'protocol error counted');
    await healthy(h2c);
  }],
  ['wrong connection preface (HTTP/1.1 request on the h2c port) is rejected', async ({ h2c }) => {
    const before = (await L.stats(h2c)).server.protocol_errors;
    const r = await rawExchange(h2c.port, [Buffer.from('GET / HTTP/1.1\r\nHost: x\r\n\r\n')]);
    assert(r.closed, 'closed');
    const s = await L.waitStat(h2c, s => s.server.protocol_errors > before);
    eq(s.server.protocol_errors - before, 1, 'counted');
    await healthy(h2c);
  }],
  ['oversized HTTP/2 frame: GOAWAY(FRAME_SIZE_ERROR), close, server carries on', async ({ h2c }) => {
    const big = frame(0x0 /* DATA */, 0, 1, Buffer.alloc(20000));
    const r = await rawExchange(h2c.port, [PREFACE, frame(0x4, 0, 0, Buffer.alloc(0)), big]);
    const frames = parseFrames(r.data);
    const settings = frames.find(f => f.type === 0x4 && !(f.flags & 1));
    assert(settings, 'server SETTINGS');
    // SETTINGS_MAX_CONCURRENT_STREAMS (0x3) is advertised
    let maxStreams = null;
    for (let o = 0; o + 6 <= settings.payload.length; o += 6)
      if (settings.payload.readUInt16BE(o) === 3) maxStreams = settings.payload.readUInt32BE(o + 2);
    eq(maxStreams, 1024, 'max concurrent streams advertised');
    const goaway = frames.find(f => f.type === 0x7);
    assert(goaway, 'GOAWAY sent');
    eq(goaway.payload.readUInt32BE(4), 0x6, 'FRAME_SIZE_ERROR');
    assert(r.closed, 'closed');
    await healthy(h2c);
  }],
  ['truncated gRPC frame: INTERNAL', async ({ h2c }) => {
    const before = (await L.stats(h2c)).server.bad_messages;
    const r = await h2request(h2c.port, '/bigfleet.v1alpha1.CapacityProvider/Get', { body: grpcFrame(MREF).subarray(0, 6) });
    eq(r.grpcStatus, grpc.status.INTERNAL, 'status');
    assert(/truncated/.test(r.grpcMessage), r.grpcMessage);
    eq((await L.stats(h2c)).server.bad_messages - before, 1, 'counted');
    await healthy(h2c);
  }],
  ['a declared 2 GiB message is RESOURCE_EXHAUSTED at once', async ({ h2c }) => {
    const before = (await L.stats(h2c)).server.oversize_messages;
    const h = Buffer.alloc(5); h.writeUInt32BE(0x80000000, 1);
    const r = await h2request(h2c.port, '/bigfleet.v1alpha1.CapacityProvider/Get', { body: h, end: false });
    eq(r.grpcStatus, grpc.status.RESOURCE_EXHAUSTED, 'status');
    eq((await L.stats(h2c)).server.oversize_messages - before, 1, 'counted');
    await healthy(h2c);
  }],
  ['partially received messages over the inbound budget: the newcomer gets RESOURCE_EXHAUSTED, the others carry on', async () => {
    // budget 1.5 MiB, limit 1 MiB: one 1,000,000-byte message held at
    // 600,000 bytes costs its full assembly buffer (1,000,000); a second one
    // (on another connection: each connection's own share is 1 MiB here)
    // cannot grow past the budget
    const srv = await L.startServer(['--max-recv', String(MAX_RECV), '--max-inbound', String(1536 * 1024)]);
    const session = http2.connect(`http://127.0.0.1:${srv.port}`);
    session.on('error', () => {});
    const session2 = http2.connect(`http://127.0.0.1:${srv.port}`);
    session2.on('error', () => {});
    try {
      const path = '/bigfleet.v1alpha1.CapacityProvider/Get';
      const fa = grpcFrame(machineRefOf(1000000)), fb = grpcFrame(machineRefOf(1000000));
      const a = openCall(session, path);
      a.req.write(fa.subarray(0, 5 + 600000));
      let st = await L.waitStat(srv, x => x.server.inbound_buffered_bytes >= 600000);
      assert(st.server.inbound_buffered_bytes >= 600000, `A is buffered: ${JSON.stringify(st.server)}`);
      const b = openCall(session2, path);
      b.req.write(fb.subarray(0, 5 + 600000));
      const rb = await b.done;
      eq(rb.grpcStatus, grpc.status.RESOURCE_EXHAUSTED, 'B refused');
      assert(/inbound buffer budget/.test(rb.grpcMessage), rb.grpcMessage);
      st = await L.stats(srv);
      eq(st.server.inbound_budget_refusals, 1, 'refusal counted');
      eq(st.server.oversize_messages, 0, 'not an oversize message');
      assert(/inbound buffer budget exhausted/.test(srv.stderr()), 'logged');
      // A was never disturbed: it completes and is answered
      a.req.end(fa.subarray(5 + 600000));
      const ra = await a.done;
      eq(ra.grpcStatus, 0, 'A completes OK');
      assert(Buffer.concat(ra.data).length > 999000, 'A answered with its echo');
      st = await L.waitStat(srv, x => x.server.inbound_buffered_bytes === 0);
      eq(st.server.inbound_buffered_bytes, 0, 'everything refunded');
      await healthy(srv);
    } finally {
      session.close();
      session2.close();
      const e = await srv.stop();
      eq(e.code, 0, 'clean exit');
    }
  }],
  ['one connection cannot take more than its share of the inbound budget; another connection can', async () => {
    // budget 4 MiB, share 1.5 MiB per connection, limit 1 MiB
    const srv = await L.startServer(['--max-recv', String(MAX_RECV), '--max-inbound', String(4 << 20),
      '--max-inbound-per-conn', String(1536 * 1024)]);
    const s1 = http2.connect(`http://127.0.0.1:${srv.port}`);
    s1.on('error', () => {});
    const s2 = http2.connect(`http://127.0.0.1:${srv.port}`);
    s2.on('error', () => {});
    try {
      const path = '/bigfleet.v1alpha1.CapacityProvider/Get';
      const f = grpcFrame(machineRefOf(1000000));
      const a = openCall(s1, path);
      a.req.write(f.subarray(0, 5 + 600000));
      await L.waitStat(srv, x => x.server.inbound_buffered_bytes >= 600000);
      const b = openCall(s1, path); // the same connection: over its share
      b.req.write(f.subarray(0, 5 + 600000));
      const rb = await b.done;
      eq(rb.grpcStatus, grpc.status.RESOURCE_EXHAUSTED, 'B refused');
      assert(/connection's share of the inbound buffer budget/.test(rb.grpcMessage), rb.grpcMessage);
      const c = openCall(s2, path); // another connection: room in the total
      c.req.end(f);
      const rc = await c.done;
      eq(rc.grpcStatus, 0, 'C on another connection completes');
      const st = await L.stats(srv);
      eq(st.server.inbound_conn_refusals, 1, 'the connection refusal counted');
      eq(st.server.inbound_budget_refusals, 0, 'not a server-wide refusal');
      a.req.end(f.subarray(5 + 600000));
      eq((await a.done).grpcStatus, 0, 'A completes OK');
      await healthy(srv);
    } finally {
      s1.close();
      s2.close();
      const e = await srv.stop();
      eq(e.code, 0, 'clean exit');
    }
  }],
  ['a message that stops arriving is ended after the stall timeout and its memory returned', async () => {
    const srv = await L.startServer(['--max-recv', String(MAX_RECV), '--stall-timeout-ms', '800']);
    const s1 = http2.connect(`http://127.0.0.1:${srv.port}`);
    s1.on('error', () => {});
    try {
      const f = grpcFrame(machineRefOf(1000000));
      const a = openCall(s1, '/bigfleet.v1alpha1.CapacityProvider/Get');
      a.req.write(f.subarray(0, 5 + 300000));
      await L.waitStat(srv, x => x.server.inbound_buffered_bytes >= 300000);
      const t0 = Date.now();
      const ra = await a.done;
      eq(ra.grpcStatus, grpc.status.RESOURCE_EXHAUSTED, 'ended');
      assert(/stopped arriving/.test(ra.grpcMessage), ra.grpcMessage);
      assert(Date.now() - t0 < 5000, 'within the stall timeout (plus slack)');
      const st = await L.waitStat(srv, x => x.server.inbound_buffered_bytes === 0);
      eq(st.server.stalled_messages, 1, 'counted');
      assert(/stalled gRPC message/.test(srv.stderr()), 'logged');
      await healthy(srv);
    } finally {
      s1.close();
      const e = await srv.stop();
      eq(e.code, 0, 'clean exit');
    }
  }],
  ['grpc-js message over the server limit: RESOURCE_EXHAUSTED; the limit itself passes', async ({ h2c }) => {
    const c = new pkg.CapacityProvider(h2c.addr, grpc.credentials.createInsecure(), L.CHANNEL_OPTS);
    const over = await L.unary(c, 'Configure', { machine_id: 'm', bootstrap_blob: Buffer.alloc(MAX_RECV) });
    eq(over.err && over.err.code, grpc.status.RESOURCE_EXHAUSTED, 'over the limit');
    // MachineRef with an id that makes the message exactly MAX_RECV bytes: 1 tag + 3 len + id
    const at = await L.unary(c, 'Get', { id: 'y'.repeat(MAX_RECV - 4) });
    eq(at.err, null, 'exactly at the limit');
    c.close();
    await healthy(h2c);
  }],
  ['compressed messages: INTERNAL without grpc-encoding, UNIMPLEMENTED with gzip', async ({ h2c }) => {
    const a = await h2request(h2c.port, '/bigfleet.v1alpha1.CapacityProvider/Get', { body: grpcFrame(MREF, 1) });
    eq(a.grpcStatus, grpc.status.INTERNAL, 'no encoding');
    const b = await h2request(h2c.port, '/bigfleet.v1alpha1.CapacityProvider/Get',
      { body: grpcFrame(MREF, 1), headers: { 'grpc-encoding': 'gzip' } });
    eq(b.grpcStatus, grpc.status.UNIMPLEMENTED, 'gzip');
  }],
  ['bad content-type is 415, GET is 405', async ({ h2c }) => {
    const a = await h2request(h2c.port, '/bigfleet.v1alpha1.CapacityProvider/Get',
      { body: grpcFrame(MREF), headers: { 'content-type': 'application/json' } });
    eq(a.headers[':status'], 415, '415');
    const b = await h2request(h2c.port, '/bigfleet.v1alpha1.CapacityProvider/Get', { method: 'GET' });
    eq(b.headers[':status'], 405, '405');
    await healthy(h2c);
  }],
  ['the server enforces grpc-timeout by itself (client never cancels)', async ({ h2c }) => {
    const r = await h2request(h2c.port, '/bigfleet.v1alpha1.CapacityProvider/Drain',
      { body: grpcFrame(Buffer.from([0x0a, 0x01, 0x78])), headers: { 'grpc-timeout': '200m' } });
    eq(r.grpcStatus, grpc.status.DEADLINE_EXCEEDED, 'status');
    assert(r.ms >= 190 && r.ms < 2000, `after ${r.ms} ms`);
    const s = await L.stats(h2c);
    assert((s.done.Drain.DEADLINE_EXCEEDED || 0) >= 1, 'handler saw DEADLINE_EXCEEDED');
    const bad = await h2request(h2c.port, '/bigfleet.v1alpha1.CapacityProvider/Get',
      { body: grpcFrame(MREF), headers: { 'grpc-timeout': 'soon' } });
    eq(bad.grpcStatus, grpc.status.INTERNAL, 'malformed grpc-timeout');
  }],
  ['connection churn: 200 abrupt connections leave nothing open', async ({ h2c }) => {
    const socks = [];
    for (let i = 0; i < 200; i++) {
      await new Promise(res => {
        const s = net.connect(h2c.port, '127.0.0.1', () => {
          if (i % 2) s.write(PREFACE); // half of them start HTTP/2, then vanish
          res();
        });
        s.on('error', () => {});
        socks.push(s);
      });
    }
    for (const s of socks) s.destroy();
    const st = await L.waitStat(h2c, s => s.server.conns_open === 0, 5000);
    eq(st.server.conns_open, 0, 'all closed');
    eq(st.server.streams_open, 0, 'no streams');
    await healthy(h2c);
  }],
  ['keepalive: a peer that never answers PING is dropped; live grpc-js peers are not', async ({ h2c }) => {
    const before = (await L.stats(h2c)).server.keepalive_timeouts;
    // a grpc-js stream idle for several keepalive periods survives (grpc-js acks PINGs)
    const sh = new pkg.Shard(h2c.addr, grpc.credentials.createInsecure());
    const call = sh.Session();
    const acks = [];
    const p = L.collect(call, { onData: d => acks.push(d.ack.echo) });
    call.write({ hello: { cluster_id: 'c1' } });
    // meanwhile a raw peer: preface + SETTINGS + ACK of ours, then silence
    const t0 = Date.now();
    const raw = rawExchange(h2c.port, [PREFACE, frame(0x4, 0, 0, Buffer.alloc(0)), frame(0x4, 1, 0, Buffer.alloc(0))], 5000);
    const r = await raw;
    const ms = Date.now() - t0;
    assert(r.closed, 'silent peer closed');
    assert(ms >= 450 && ms < 3000, `closed after ${ms} ms (200 ms idle + 300 ms timeout)`);
    assert(parseFrames(r.data).some(f => f.type === 0x6 && !(f.flags & 1)), 'server sent a PING');
    call.write({ rollup: { cluster_id: 'c1' } });
    call.end();
    const res = await p;
    eq(res.status.code, 0, 'grpc-js stream survived');
    eq(acks.join(','), 'hello,rollup', 'acks');
    sh.close();
    eq((await L.stats(h2c)).server.keepalive_timeouts - before, 1, 'one keepalive timeout counted');
  }],
  ['TLS port: garbage instead of a ClientHello is a handshake failure', async ({ tlsSrv }) => {
    const before = (await L.stats(tlsSrv)).server.handshake_failures;
    const r = await rawExchange(tlsSrv.port, [Buffer.from('this is not TLS at all\r\n'.repeat(10))]);
    assert(r.closed, 'closed');
    const s = await L.waitStat(tlsSrv, s => s.server.handshake_failures > before);
    eq(s.server.handshake_failures - before, 1, 'counted');
    await healthyTls(tlsSrv);
  }],
  ['TLS port: a client offering only http/1.1 in ALPN is refused', async ({ tlsSrv }) => {
    const err = await new Promise((resolve) => {
      const s = tls.connect({ host: '127.0.0.1', port: tlsSrv.port, ca: pki.read('ca.crt'), servername: 'localhost',
        ALPNProtocols: ['http/1.1'] });
      s.on('secureConnect', () => { resolve(s.alpnProtocol ? `negotiated ${s.alpnProtocol}` : 'connected'); s.destroy(); });
      s.on('error', e => resolve(e));
    });
    assert(err instanceof Error, `handshake must fail, got ${err}`);
    await healthyTls(tlsSrv);
  }],
  ['TLS port: a silent client is dropped after the handshake timeout', async ({ tlsSrv }) => {
    const t0 = Date.now();
    const r = await rawExchange(tlsSrv.port, [], 5000);
    assert(r.closed, 'server closed the idle connection');
    const ms = Date.now() - t0;
    assert(ms >= 250 && ms < 3000, `closed after ${ms} ms (timeout 300 ms)`);
    await healthyTls(tlsSrv);
  }],
  ['HTTP/1.1 port: garbage gets 400 and the port keeps answering', async ({ h2c }) => {
    const r = await rawExchange(h2c.httpPort, [Buffer.from('\x00\x01\x02garbage\r\n\r\n', 'latin1')]);
    assert(r.closed, 'closed');
    assert(/^HTTP\/1\.1 400 /.test(r.data.toString()), r.data.toString());
    eq((await L.httpGet(h2c.httpPort, '/healthz')).status, 200, 'healthz');
  }],
];

register(tests, {
  timeout: 20000,
  before: async () => {
    pki = L.makePki({ server: 'DNS:localhost,IP:127.0.0.1' });
    const h2c = await L.startServer(['--max-recv', String(MAX_RECV), '--keepalive-ms', '200',
      '--keepalive-timeout-ms', '300']);
    const tlsSrv = await L.startServer(['--tls-cert', pki.p('server.crt'), '--tls-key', pki.p('server.key'),
      '--handshake-timeout-ms', '300']);
    return { h2c, tlsSrv };
  },
  after: async (ctx) => {
    for (const s of [ctx.h2c, ctx.tlsSrv]) {
      if (!s) continue;
      const e = await s.stop();
      if (e.code !== 0) throw new Error(`server exit ${JSON.stringify(e)}: ${s.stderr().slice(-2000)}`);
    }
    if (pki) pki.cleanup();
  },
});
