// grpc_memory.test.js — every byte a peer can make the session hold is
// bounded and charged (issue 13 part 2 and the first report's items 2 and 3):
//   - a 48 MiB ReclaimAck padded with unknown varint fields ("28 00"):
//     refused as an oversize ReclaimAck (< 200 MB of session RSS);
//   - the same before the Hello: refused at its 5-byte prefix;
//   - 8 InspectNeeds streams declaring 255 MiB and sending 200 MiB each:
//     refused at the prefix (the method's limit is 4 KiB; < 300 MB);
//   - 8 Session streams that each stop half-way through a large rollup:
//     bounded by the inbound budget, the rest refused, then ended by the
//     stall timeout with their memory returned;
//   - a rollup whose one Need decodes to > 3x its bytes (repeated empty
//     values): rejected without the blow-up.
// Each while a well-behaved operator on its own connection keeps working.
'use strict';
const { before, after } = require('node:test');
const H = require('./lib');

const { assert, sleep, HEAVY } = H;
const SESSION = '/bigfleet.v1alpha1.Shard/Session';
const INSPECT = '/bigfleet.v1alpha1.ShardRead/InspectNeeds';
const MiB = 1 << 20;

// Writes buf into a request stream in 1 MiB slices, honouring backpressure,
// until done or the stream closes.
async function pump(req, bufs) {
  for (const b of bufs) {
    for (let off = 0; off < b.length && !req.closed && !req.destroyed; off += MiB) {
      const ok = req.write(b.subarray(off, Math.min(b.length, off + MiB)));
      if (!ok) await Promise.race([new Promise((r) => req.once('drain', r)), new Promise((r) => req.once('close', r)), sleep(500)]);
    }
  }
}

// A ReclaimAck ("ab", 1 node) followed by unknown varint fields 5 = 0.
function paddedReclaimAck(size) {
  const b = Buffer.alloc(size);
  Buffer.from([0x22, 0x06, 0x0a, 0x02, 0x61, 0x62, 0x10, 0x01]).copy(b, 0);
  for (let i = 8; i + 1 < size; i += 2) { b[i] = 0x28; b[i + 1] = 0x00; }
  return b;
}

let S, op;
const budgetMiB = HEAVY ? 1024 : 256;
const rollupMiB = HEAVY ? 256 : 64;
before(async () => ({ S, op } = await H.setUp({ args: [`--grpc-inbound-budget-mib=${budgetMiB}`,
  `--max-rollup-mib=${rollupMiB}`, '--grpc-stall-timeout=2s'] })));
after(() => H.tearDown('grpc_memory', S, op));
const test = H.checks(() => S);

test('a 48 MiB ReclaimAck of unknown fields ends its stream; the session stays under 200 MB', () =>
  H.attack(S, op, {
    name: 'reclaim-ack-48mib-unknown-fields',
    what: 'after a Hello: one 48 MiB OperatorMessage = ReclaimAck + 25M unknown varint fields (28 00)',
    rssBoundMB: 200,
    counters: [['bigfleet_shard_session_oversize_frames_total', 1]],
    log: /more than 1024 top-level fields \(unknown-field padding\); closing the stream/,
    run: async (until) => {
      const body = paddedReclaimAck(48 * MiB);
      let n = 0;
      do {
        const s = H.h2connect(S.port);
        const c = H.grpcCall(s, SESSION);
        c.req.write(H.frame({ hello: { cluster_id: `h-ack-${n}` } }));
        await pump(c.req, [H.grpcPrefix(body.length), body]);
        const r = await c.done;
        assert.strictEqual(r.code, 3, `INVALID_ARGUMENT, got ${JSON.stringify(r)}`);
        assert.match(r.message, /more than 1024 top-level fields/);
        s.close();
        n++;
        await sleep(150); /* an attacker that keeps trying, not a CPU benchmark */
      } while (Date.now() < until);
    },
  }));

test('a 48 MiB ReclaimAck padded inside its own sub-message ends its stream as oversize', () =>
  H.attack(S, op, {
    name: 'reclaim-ack-48mib-inner-padding',
    what: 'after a Hello: one 48 MiB OperatorMessage whose single ReclaimAck field carries 25M unknown varint fields',
    rssBoundMB: 200,
    counters: [['bigfleet_shard_session_oversize_frames_total', 1]],
    log: /oversize OperatorMessage; closing the stream.*kind=ReclaimAck/,
    run: async (until) => {
      const inner = paddedReclaimAck(48 * MiB - 6).subarray(2); /* drop the outer tag/len */
      const lenv = (x) => { const o = []; while (x >= 128) { o.push((x & 127) | 128); x = Math.floor(x / 128); } o.push(x); return Buffer.from(o); };
      const om = Buffer.concat([Buffer.from([0x22]), lenv(inner.length), inner]);
      let n = 0;
      do {
        const s = H.h2connect(S.port);
        const c = H.grpcCall(s, SESSION);
        c.req.write(H.frame({ hello: { cluster_id: `h-ack2-${n++}` } }));
        await pump(c.req, [H.grpcPrefix(om.length), om]);
        const r = await c.done;
        assert.strictEqual(r.code, 3, `INVALID_ARGUMENT, got ${JSON.stringify(r)}`);
        assert.match(r.message, /a ReclaimAck of \d+ bytes exceeds its 65536-byte limit/);
        s.close();
        await sleep(150);
      } while (Date.now() < until);
    },
  }));

test('the same 48 MiB before a Hello is refused at its 5-byte prefix', () =>
  H.attack(S, op, {
    name: 'pre-hello-48mib',
    what: 'a 48 MiB first frame on a Session stream (no Hello yet), repeated',
    rssBoundMB: 100,
    counters: [['bigfleet_shard_grpc_oversize_messages_total', 1]],
    log: /oversize gRPC message/,
    run: async (until) => {
      const body = paddedReclaimAck(48 * MiB);
      do {
        const s = H.h2connect(S.port);
        const c = H.grpcCall(s, SESSION);
        await pump(c.req, [H.grpcPrefix(body.length), body]);
        const r = await c.done;
        assert.strictEqual(r.code, 8, `RESOURCE_EXHAUSTED, got ${JSON.stringify(r)}`);
        assert.match(r.message, /larger than max \(50331648 vs\. 65536\)/);
        s.close();
        await sleep(20);
      } while (Date.now() < until);
    },
  }));

test('8 InspectNeeds streams declaring 255 MiB and sending 200 MiB are refused at the prefix (< 300 MB)', () =>
  H.attack(S, op, {
    name: 'inspect-needs-8x200mib-partial',
    what: '8 ShardRead/InspectNeeds streams on 8 connections, each declaring a 255 MiB request and sending 200 MiB of it',
    rssBoundMB: 300,
    counters: [['bigfleet_shard_grpc_oversize_messages_total', 8]],
    log: /oversize gRPC message/,
    run: async (until) => {
      const chunk = Buffer.alloc(200 * MiB, 0x41);
      do {
        await Promise.all(Array.from({ length: 8 }, async () => {
          const s = H.h2connect(S.port);
          const c = H.grpcCall(s, INSPECT);
          await pump(c.req, [H.grpcPrefix(255 * MiB), chunk]);
          const r = await c.done;
          assert.strictEqual(r.code, 8, `RESOURCE_EXHAUSTED, got ${JSON.stringify(r)}`);
          assert.match(r.message, /larger than max \(267386880 vs\. 4096\)/);
          s.close();
        }));
        await sleep(200);
      } while (Date.now() < until);
    },
  }));

const partial = HEAVY ? 200 : 40;
test(`8 Session streams stopping half-way through large rollups: bounded by the budget, ended by the stall timeout`, () =>
  H.attack(S, op, {
    name: `session-8x${partial}mib-partial-rollups`,
    what: `8 connections: Hello, then a rollup declaring ${rollupMiB - 4} MiB that stops after ${partial} MiB`,
    rssBoundMB: budgetMiB + 150,
    counters: [['bigfleet_shard_grpc_inbound_budget_refusals_total', 1],
      ['bigfleet_shard_grpc_stalled_messages_total', 1]],
    log: /stalled gRPC message/,
    minMs: 5000,
    run: async () => {
      const body = Buffer.alloc(partial * MiB, 0x42);
      const calls = [];
      for (let i = 0; i < 8; i++) {
        const s = H.h2connect(S.port);
        const c = H.grpcCall(s, SESSION);
        c.req.write(H.frame({ hello: { cluster_id: `h-part-${i}` } }));
        calls.push({ s, c, p: pump(c.req, [H.grpcPrefix((rollupMiB - 4) * MiB), body]) });
      }
      const rs = await Promise.all(calls.map((x) => x.c.done));
      for (const x of calls) x.s.close();
      const codes = rs.map((r) => r.code);
      assert.ok(codes.every((c) => c === 8), `every one ends RESOURCE_EXHAUSTED: ${codes}`);
      assert.ok(rs.some((r) => /inbound buffer budget/.test(r.message)), 'some refused by the budget');
      assert.ok(rs.some((r) => /stopped arriving/.test(r.message)), 'the held ones ended by the stall timeout');
      const m = await H.metrics(S);
      await H.L.waitFor(async () => (await H.metrics(S)).get('bigfleet_shard_grpc_inbound_buffered_bytes') === 0,
        5000, 'every partial byte refunded');
      assert.ok(m.has('bigfleet_shard_grpc_inbound_buffered_bytes'));
    },
  }));

test('a Need that would decode to many times its bytes is rejected without the blow-up', () =>
  H.attack(S, op, {
    name: 'rollup-need-decode-amplification',
    what: 'rollups whose one Need has a requirement with 400,000 empty values (800 KB on the wire, ~20 MB in protobuf-c)',
    rssBoundMB: 100,
    counters: [['bigfleet_shard_rollups_rejected_total{cluster="h-amp"}', 1]],
    log: /decodes to more than/,
    run: async (until) => {
      const s = H.h2connect(S.port);
      const c = H.grpcCall(s, SESSION);
      c.req.write(H.frame({ hello: { cluster_id: 'h-amp' } }));
      let n = 0;
      do {
        const vals = Buffer.alloc(800000);
        for (let i = 0; i < vals.length; i += 2) { vals[i] = 0x1a; vals[i + 1] = 0x00; }
        const req = Buffer.concat([Buffer.from([0x0a, 0x05]), Buffer.from(`k${String(n).padStart(4, '0')}`), vals]);
        const lenv = (x) => { const o = []; while (x >= 128) { o.push((x & 127) | 128); x >>= 7; } o.push(x); return Buffer.from(o); };
        const need = Buffer.concat([Buffer.from([0x0a]), lenv(req.length), req]);
        const rollup = Buffer.concat([Buffer.from([0x1a]), lenv(need.length), need]);
        const om = Buffer.concat([Buffer.from([0x12]), lenv(rollup.length), rollup]);
        c.req.write(Buffer.concat([H.grpcPrefix(om.length), om]));
        n++;
        await sleep(300);
      } while (Date.now() < until);
      c.req.end();
      await c.done;
      s.close();
    },
  }));
