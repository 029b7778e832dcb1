// conn_limits.test.js — time limits on every phase of a connection and
// limits on connections per peer (issue 13 part 3): silent and dribbling
// clients are cut at the HTTP/2 handshake deadline (absolute, not reset by
// each byte), a Session stream without a Hello ends at the Hello deadline,
// and one address cannot hold more than --max-conns-per-peer connections.
// The attacker is 127.0.0.2; the well-behaved operator (127.0.0.1) keeps
// working throughout.
'use strict';
const { before, after } = require('node:test');
const H = require('./lib');

const { assert, sleep, h2frame, T } = H;
const SESSION = '/bigfleet.v1alpha1.Shard/Session';
const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');

let S, op;
before(async () => ({ S, op } = await H.setUp({ args: ['--grpc-handshake-timeout=1s',
  '--session-hello-timeout=1s', '--max-conns-per-peer=64'] })));
after(() => H.tearDown('conn_limits', S, op));
const test = H.checks(() => S);

test('silent and dribbling clients are cut at the handshake deadline (1 s, absolute)', () =>
  H.attack(S, op, {
    name: 'handshake-slowloris',
    what: 'rounds of 20 TCP connections that send nothing and 20 that send the HTTP/2 preface one byte every 100 ms',
    rssBoundMB: 100,
    counters: [['bigfleet_shard_grpc_protocol_errors_total', 40]],
    log: /handshake timeout/,
    run: async (until) => {
      do {
        const t0 = Date.now();
        const socks = [];
        for (let i = 0; i < 40; i++) {
          const s = H.attackerSocket(S.port);
          s.on('error', () => {});
          s.resume(); /* read (and drop) the server's SETTINGS, so 'close' comes */
          const rec = { s, closedAt: 0 };
          s.on('close', () => { rec.closedAt = Date.now(); });
          if (i % 2) {
            let k = 0;
            rec.t = setInterval(() => { if (k < PREFACE.length && !s.destroyed) s.write(PREFACE.subarray(k, ++k)); }, 100);
          }
          socks.push(rec);
        }
        await H.L.waitFor(() => socks.every((r) => r.closedAt), 5000, 'every connection closed');
        for (const r of socks) clearInterval(r.t);
        const lives = socks.map((r) => r.closedAt - t0);
        assert.ok(Math.min(...lives) >= 800, `closed early: ${Math.min(...lives)} ms`);
        assert.ok(Math.max(...lives) <= 3000, `dribbling kept one alive ${Math.max(...lives)} ms`);
      } while (Date.now() < until);
    },
  }));

test('a Session stream without a Hello ends at the Hello deadline (1 s)', () =>
  H.attack(S, op, {
    name: 'no-hello',
    what: 'rounds of 20 Session streams on 2 connections that never send a message',
    rssBoundMB: 100,
    counters: [['bigfleet_shard_grpc_first_message_timeouts_total', 20]],
    log: /first message timeout/,
    run: async (until) => {
      do {
        const t0 = Date.now();
        const sessions = [H.h2connect(S.port), H.h2connect(S.port)];
        const calls = Array.from({ length: 20 }, (_, i) => H.grpcCall(sessions[i % 2], SESSION));
        const rs = await Promise.all(calls.map((c) => c.done));
        for (const r of rs) {
          assert.strictEqual(r.code, 4, `DEADLINE_EXCEEDED, got ${JSON.stringify(r)}`);
          assert.match(r.message, /no request message within 1000 ms/);
        }
        const took = Date.now() - t0;
        assert.ok(took >= 900 && took < 4000, `ended after ${took} ms`);
        sessions.forEach((s) => s.close());
      } while (Date.now() < until);
    },
  }));

test('one address holds at most --max-conns-per-peer (64) connections', () =>
  H.attack(S, op, {
    name: 'connections-per-peer',
    what: '300 HTTP/2 connections from 127.0.0.2 (preface and SETTINGS sent, then kept open)',
    rssBoundMB: 100,
    counters: [['bigfleet_shard_grpc_connections_peer_limited_total', 236]],
    log: /per-peer connection limit/,
    run: async (until) => {
      const conns = [];
      for (let i = 0; i < 300; i++) {
        const c = new H.RawH2(S.port);
        conns.push(c);
        if (i % 50 === 49) await sleep(20);
      }
      await Promise.all(conns.map((c) => Promise.race([c.connected, c.ended])));
      await sleep(500);
      /* the open ones answer a PING; the others were closed at accept */
      for (const c of conns) c.write(h2frame(T.PING, 0, 0, Buffer.alloc(8)));
      await sleep(500);
      const open = conns.filter((c) => !c.closed);
      assert.strictEqual(open.length, 64, `${open.length} connections open`);
      while (Date.now() < until) await sleep(100);
      conns.forEach((c) => c.close());
    },
  }));
