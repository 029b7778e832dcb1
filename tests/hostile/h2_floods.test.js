// h2_floods.test.js — HTTP/2 floods are refused by the server's own frame
// accounting (src/net/guard.h), whatever libnghttp2 is installed (issue 13
// part 3): rapid reset (CVE-2023-44487), CONTINUATION flood
// (CVE-2024-28182), PING / SETTINGS / empty-DATA floods, new-stream churn,
// an HPACK header-list bomb, and more concurrent streams than the 100 a
// connection may have. Raw frames written by hand from 127.0.0.2; each
// attack is bounded and stops by itself while a well-behaved operator on
// its own connection keeps working.
'use strict';
const { before, after } = require('node:test');
const H = require('./lib');

const { assert, sleep, T, F, h2frame, hpackLiteral, H2_ENHANCE_YOUR_CALM } = H;
const SESSION = '/bigfleet.v1alpha1.Shard/Session';
const INSPECT = '/bigfleet.v1alpha1.ShardRead/InspectNeeds';
const flood = (r) => `bigfleet_shard_grpc_flood_closes_total{reason="${r}"}`;

// Opens raw connections one after another until `until`, each sending
// frames from make(c, i) until the server answers GOAWAY; every connection
// must be closed by the server, with GOAWAY(ENHANCE_YOUR_CALM) read first.
// One exception, a property of TCP rather than of the server: the server
// sends the GOAWAY, shuts its side down and lingers at most 1 s discarding
// input, then resets a peer that is still flooding; a reset discards what
// the client had received and not yet read, so on a loaded machine the
// attacker can see the reset without the GOAWAY. That connection must then
// end in ECONNRESET, and at least one connection of the attack must have
// read its GOAWAY (the flood-close counters are checked by H.attack).
async function floodConnections(port, until, make, { n = 5000, open } = {}) {
  let conns = 0, goaways = 0;
  do {
    const c = new H.RawH2(port);
    await c.connected;
    if (open) c.write(open(c));
    await c.burst((i) => make(c, i), n);
    const g = await c.waitGoaway(5000);
    await Promise.race([c.ended, sleep(2000)]);
    assert.ok(c.closed, 'the server closed the connection');
    if (g) {
      assert.strictEqual(g.code, H2_ENHANCE_YOUR_CALM, `GOAWAY code ${g.code}`);
      goaways++;
    } else {
      assert.strictEqual(c.error, 'ECONNRESET', `closed without GOAWAY and without a reset (${c.error})`);
    }
    c.close();
    conns++;
    await sleep(100);
  } while (Date.now() < until);
  assert.ok(goaways >= 1, `the server answered with GOAWAY (${goaways} of ${conns} connections read it)`);
  return conns;
}

let S, op;
before(async () => ({ S, op } = await H.setUp()));
after(() => H.tearDown('h2_floods', S, op));
const test = H.checks(() => S);

// A flood test: connections from floodConnections sending make(c, i)
// (after open(c), if given) until the server closes them; the attack must
// be counted under flood_closes_total{reason} and logged with that detail.
function floodTest(title, { name, reason, what, make, open }) {
  test(title, () =>
    H.attack(S, op, {
      name,
      what,
      rssBoundMB: 100,
      counters: [[flood(reason), 1]],
      log: new RegExp(`closed as an HTTP/2 flood .*detail="${reason}"`),
      run: (until) => floodConnections(S.port, until, make, { open }),
    }));
}

floodTest('rapid reset (HEADERS + RST_STREAM, CVE-2023-44487): GOAWAY ENHANCE_YOUR_CALM', {
  name: 'rapid-reset',
  reason: 'rapid_reset',
  what: 'connections each sending up to 5,000 x (HEADERS Shard/Session + RST_STREAM CANCEL)',
  make: (c) => {
    const sid = c.nextSid();
    return Buffer.concat([c.headers(sid, SESSION),
      h2frame(T.RST_STREAM, 0, sid, Buffer.from([0, 0, 0, 8]))]);
  },
});

floodTest('CONTINUATION flood (CVE-2024-28182): cut after 4 CONTINUATION frames', {
  name: 'continuation-flood',
  reason: 'continuation',
  what: 'connections each sending HEADERS without END_HEADERS, then up to 5,000 CONTINUATION frames of valid header fields',
  make: () => h2frame(T.CONTINUATION, 0, 1, hpackLiteral('x-pad', 'a'.repeat(40))),
  open: (c) => h2frame(T.HEADERS, 0, c.nextSid(), H.grpcHeaderBlock(SESSION)),
});

floodTest('PING flood: GOAWAY ENHANCE_YOUR_CALM', {
  name: 'ping-flood',
  reason: 'ping',
  what: 'connections each sending up to 5,000 PINGs',
  make: (c, i) => {
    const p = Buffer.alloc(8);
    p.writeUInt32BE(i, 4);
    return h2frame(T.PING, 0, 0, p);
  },
});

floodTest('SETTINGS flood: GOAWAY ENHANCE_YOUR_CALM', {
  name: 'settings-flood',
  reason: 'settings',
  what: 'connections each sending up to 5,000 SETTINGS frames',
  make: () => h2frame(T.SETTINGS, 0, 0, Buffer.from([0, 4, 0, 0x10, 0, 0])),
});

floodTest('empty DATA flood on an open stream: GOAWAY ENHANCE_YOUR_CALM', {
  name: 'empty-data-flood',
  reason: 'empty_frames',
  what: 'connections each opening a Session stream, then up to 5,000 empty DATA frames without END_STREAM',
  make: () => h2frame(T.DATA, 0, 1),
  open: (c) => c.headers(c.nextSid(), SESSION),
});

floodTest('new-stream churn (HEADERS with END_STREAM, no reset): GOAWAY ENHANCE_YOUR_CALM', {
  name: 'stream-churn',
  reason: 'streams',
  what: 'connections each opening up to 5,000 InspectNeeds streams that end at once (no request)',
  make: (c) => c.headers(c.nextSid(), INSPECT, true),
});

test('an HPACK header-list bomb resets its stream; the connection lives on', () =>
  H.attack(S, op, {
    name: 'hpack-header-list-bomb',
    what: 'HEADERS adding a 4,000-byte header to the HPACK table and referencing it 1,000 times (4 MB decoded from 5 KB)',
    rssBoundMB: 100,
    counters: [['bigfleet_shard_grpc_header_list_refusals_total', 1]],
    log: /request header list too large/,
    run: async (until) => {
      let n = 0;
      do {
        const c = new H.RawH2(S.port);
        await c.connected;
        const name = Buffer.from('x-bomb');
        const add = Buffer.concat([Buffer.from([0x40]), H.hpackInt(name.length, 7, 0), name,
          H.hpackInt(4000, 7, 0), Buffer.alloc(4000, 0x62)]); /* literal, incremental indexing */
        const refs = Buffer.alloc(1000, 0xbe); /* indexed field 62, 1,000 times */
        const sid = c.nextSid();
        c.write(h2frame(T.HEADERS, F.END_HEADERS, sid,
          Buffer.concat([H.grpcHeaderBlock(SESSION), add, refs])));
        await H.L.waitFor(() => c.rst.has(sid) || c.goaway || c.closed, 5000, 'the stream reset');
        assert.ok(c.rst.has(sid), `stream ${sid} reset (goaway ${JSON.stringify(c.goaway)})`);
        /* the same connection still works: a PING is answered */
        const f0 = c.frames;
        c.write(h2frame(T.PING, 0, 0, Buffer.alloc(8)));
        await H.L.waitFor(() => c.frames > f0, 3000, 'PING ACK');
        c.close();
        n++;
        await sleep(100);
      } while (Date.now() < until);
    },
  }));

test('more than 100 concurrent streams on one connection: the excess refused', () =>
  H.attack(S, op, {
    name: 'concurrent-streams-150',
    what: 'connections each opening 150 Session streams that stay open (no Hello), after acknowledging MAX_CONCURRENT_STREAMS 100',
    rssBoundMB: 100,
    counters: [['bigfleet_shard_grpc_protocol_errors_total', 1]],
    log: /invalid HTTP\/2 frame|HTTP\/2 connection error/,
    run: async (until) => {
      do {
        const c = new H.RawH2(S.port);
        await c.connected;
        await sleep(100); /* the server's SETTINGS (MAX_CONCURRENT_STREAMS 100), acknowledged */
        const sids = [];
        for (let i = 0; i < 150; i++) sids.push(c.nextSid());
        c.write(Buffer.concat(sids.map((sid) => c.headers(sid, SESSION))));
        /* nghttp2 answers the 101st with GOAWAY(PROTOCOL_ERROR, last stream = the 100th);
         * a REFUSED_STREAM per extra stream is the RFC's other allowed answer */
        await H.L.waitFor(() => c.goaway || c.rst.size >= 50, 5000, 'the excess refused');
        if (c.goaway) {
          assert.strictEqual(c.goaway.code, 1, `GOAWAY code ${c.goaway.code}`);
          assert.strictEqual(c.goaway.lastSid, sids[99], 'the first 100 streams were accepted');
        } else {
          assert.ok([...c.rst.entries()].every(([sid, code]) => sid > sids[99] && code === 7));
        }
        c.close();
        await sleep(200);
      } while (Date.now() < until);
    },
  }));
