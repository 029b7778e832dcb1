// http1.test.js — the /healthz /readyz /metrics server stays reachable
// under connection floods (issue 13 part 5 and the first report's item 4):
// slow clients that send "GET /healthz HTTP/1.1\r\n" and then one byte now
// and then (the idle timer used to restart on every byte), and a flood of
// connections that send nothing. Slots are bounded; the slowest request
// head (or the longest idle connection) is evicted for a newcomer, and a
// request head must be complete 5 s after its first byte. A probe on its
// own connection gets 200 within 1 s throughout, while the well-behaved
// operator keeps working.
'use strict';
const { before, after } = require('node:test');
const H = require('./lib');

const { assert, sleep, HEAVY } = H;

// Probes every 100 ms until `until` from the operator's thread (not the
// attacker's); every one must answer 200 within 1 s.
async function probeUntil(op, port, until) {
  const rs = await op.probe(port, until);
  const bad = rs.filter((r) => r.status !== 200 || r.ms > 1000);
  assert.strictEqual(bad.length, 0, `${bad.length} of ${rs.length} probes failed: ${JSON.stringify(bad.slice(0, 5))}`);
  assert.ok(rs.length >= 20, `only ${rs.length} probes`);
  return rs;
}

// n clients from 127.0.0.2, each sending `head` then one byte every `everyMs`
// until `until` (a closed one stays closed: these are slow clients, not a
// connection-rate flood).
function slowClients(port, n, everyMs, head, until) {
  let opened = 0, closed = 0;
  const one = () => {
    if (Date.now() >= until) return;
    opened++;
    const s = H.attackerSocket(port);
    s.on('error', () => {});
    s.resume();
    let t;
    s.on('connect', () => {
      if (head) s.write(head);
      t = setInterval(() => { if (!s.destroyed) s.write('X'); }, everyMs);
    });
    s.on('close', () => { clearInterval(t); closed++; });
    setTimeout(() => s.destroy(), Math.max(0, until - Date.now()));
  };
  for (let i = 0; i < n; i++) one();
  return { stats: () => ({ opened, closed }) };
}

let S, op, port; /* port: the metrics (HTTP/1) port */
const nSlow = HEAVY ? 1000 : 300;
const every = HEAVY ? 20000 : 2000;
before(async () => {
  ({ S, op } = await H.setUp());
  port = S.metricsPort;
});
after(() => H.tearDown('http1', S, op));
const test = H.checks(() => S);


test(`${nSlow} slow HTTP/1 clients leave /healthz answering 200 within 1 s`, () =>
  H.attack(S, op, {
    name: `http1-${nSlow}-slow-clients`,
    what: `${nSlow} connections sending "GET /healthz HTTP/1.1\\r\\n" then one byte every ${every / 1000} s; probes every 100 ms`,
    rssBoundMB: 100,
    minMs: 7000,
    counters: [['bigfleet_appliance_http_connections_evicted_total', 1],
      ['bigfleet_appliance_http_request_head_timeouts_total', 1]],
    log: /every connection slot taken; evicting one/,
    run: async (until) => {
      const a = slowClients(port, nSlow, every, 'GET /healthz HTTP/1.1\r\n', until);
      await sleep(300);
      const rs = await probeUntil(op, port, until);
      console.log(`     probes: ${rs.length}, slowest ${Math.max(...rs.map((r) => r.ms))} ms; attacker ${JSON.stringify(a.stats())}`);
    },
    after: async (m0, m1, log) => {
      assert.match(log, /request head not complete in time; closing/);
    },
  }));

test('a flood of silent connections leaves /healthz answering 200 within 1 s', () =>
  H.attack(S, op, {
    name: 'http1-silent-connection-flood',
    what: `${HEAVY ? 5000 : 1000} connections that send nothing; probes every 100 ms`,
    minMs: 7000,
    rssBoundMB: 100,
    counters: [['bigfleet_appliance_http_connections_evicted_total', 1],
      ['bigfleet_appliance_http_request_head_timeouts_total', 1]],
    run: async (until) => {
      slowClients(port, HEAVY ? 5000 : 1000, 3600000, '', until);
      await sleep(300);
      const rs = await probeUntil(op, port, until);
      console.log(`     probes: ${rs.length}, slowest ${Math.max(...rs.map((r) => r.ms))} ms`);
    },
  }));
