// lib.js — the hostile-peer suite's harness (docs/security.md).
//
//   startAppliance(opts)  the real bigfleet-shardd with its embedded simulated
//                         provider (machines can reach Configured), on loopback
//   GoodOperator          a well-behaved grpc-js operator on its own connection
//                         from 127.0.0.1: closed-loop rollups (ack latency per
//                         phase), bootstrap answers, Configured machines seen
//   attack(S, op, spec)   one bounded attack: measures the operator before and
//                         during it, the session's peak RSS, the counters it
//                         must move and the log line it must leave; asserts
//                         (a) refused/absorbed, counted, logged, (b) RSS bound,
//                         (c) the operator kept working (acks, Configured,
//                         p99 within 2x of before); records the figures
//   RawH2                 a raw HTTP/2 client (frames by hand) from 127.0.0.2
//   h2connect()           node's http2 client from 127.0.0.2 (gRPC calls with
//                         arbitrary bytes)
//
// Attackers connect from 127.0.0.2 (still loopback), the operator from
// 127.0.0.1, so per-address limits apply to the attacker only.
'use strict';

const assert = require('assert');
const fs = require('fs');
const http2 = require('http2');
const net = require('net');
const path = require('path');

const L = require('../interop/session_lib');
const { register } = require('../interop/register');

const ATTACKER = '127.0.0.2';
const HEAVY = process.env.HOSTILE_HEAVY === '1';
// p99 comparisons on a shared 2-core machine: during the attack within 2x
// of the quiet windows bracketing it (the larger of before and after), plus
// this allowance for scheduler noise (docs/security.md states it)
const P99_SLACK_MS = Number(process.env.HOSTILE_P99_SLACK_MS || 25);
const RESULTS = process.env.HOSTILE_RESULTS ||
  path.join(__dirname, '..', '..', 'results', HEAVY ? 'hostile-heavy.json' : 'hostile.json');

const sleep = L.sleep;
const IT = 'node.kubernetes.io/instance-type';

// ------------------------------------------------------------ appliance

async function startAppliance(opts = {}) {
  const simPort = await L.freePort();
  const args = ['--provider-addr=', `--sim-listen=127.0.0.1:${simPort}`,
    '--sim-args=--seed-idle 40 --zones 1', '--cycle-interval=200ms',
    '--max-needs=4096', ...(opts.args || [])];
  const S = await L.startShard({ args, tls: opts.tls });
  await L.waitFor(async () => (await L.httpGet(S.metricsPort, '/readyz')).status === 200, 20000,
    'the first reconcile of the embedded provider');
  S.sessionPid = () => L.shm(S.id, 'dump').session_pid;
  return S;
}

function parseMetrics(text) {
  const m = new Map();
  for (const line of text.split('\n')) {
    if (!line || line[0] === '#') continue;
    const i = line.lastIndexOf(' ');
    m.set(line.slice(0, i), Number(line.slice(i + 1)));
  }
  return m;
}

async function metrics(S) {
  const r = await L.httpGet(S.metricsPort, '/metrics');
  assert.strictEqual(r.status, 200, 'metrics scrape');
  return parseMetrics(r.body);
}

// ------------------------------------------------------------ RSS of the session

function status(pid) {
  const t = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (k) => Number((new RegExp(`^${k}:\\s+(\\d+) kB`, 'm').exec(t) || [])[1] || 0);
  return { rss: kb('VmRSS') * 1024, hwm: kb('VmHWM') * 1024 };
}

// Peak RSS over a window: the kernel's high-water mark reset at the start
// (clear_refs 5), cross-checked by sampling every 20 ms.
class RssWatch {
  constructor(pid) {
    this.pid = pid;
    this.peak = 0;
    this.hwmOk = true;
    try { fs.writeFileSync(`/proc/${pid}/clear_refs`, '5'); } catch (e) { this.hwmOk = false; }
    this.start = status(pid).rss;
    this.timer = setInterval(() => {
      try { this.peak = Math.max(this.peak, status(pid).rss); } catch (e) { /* gone */ }
    }, 20);
  }

  stop() {
    clearInterval(this.timer);
    const s = status(this.pid);
    this.peak = Math.max(this.peak, s.rss, this.hwmOk ? s.hwm : 0);
    this.end = s.rss;
    return this.peak;
  }
}

// ------------------------------------------------------------ the well-behaved operator

function pct(xs, p) {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)];
}

// The operator runs in a worker thread (operator_worker.js): an attack
// generated on this thread never delays its bookkeeping.
class GoodOperator {
  constructor(S, cluster = 'good', tls) {
    const { Worker } = require('worker_threads');
    this.S = S;
    this.machines = 1; // Configured machines its demand asks for (m6i.large: 2 CPUs each)
    this.configuredN = 0;
    this.error = null;
    this.w = new Worker(path.join(__dirname, 'operator_worker.js'), {
      workerData: { addr: `${tls ? 'localhost' : '127.0.0.1'}:${S.port}`, cluster, tls },
    });
    this.pending = new Map();
    this.seq = 0;
    this.w.on('message', (m) => {
      if (m.ev === 'configured') this.configuredN = m.n;
      else if (m.ev === 'error') this.error = m.error;
      else if (m.ev === 'started' && this.onStarted) this.onStarted();
      else if (this.pending.has(m.id)) { this.pending.get(m.id)(m); this.pending.delete(m.id); }
    });
    this.w.on('error', (e) => { this.error = String(e); });
  }

  get configured() { return { size: this.configuredN }; }

  _ask(cmd) {
    const id = ++this.seq;
    return new Promise((resolve) => {
      this.pending.set(id, resolve);
      this.w.postMessage(Object.assign({ id }, cmd));
    });
  }

  async start() {
    await new Promise((resolve, reject) => {
      this.onStarted = resolve;
      this.w.postMessage({ cmd: 'start' });
      const t = setInterval(() => { if (this.error) { clearInterval(t); reject(new Error(this.error)); } }, 50);
      this.onStarted = () => { clearInterval(t); resolve(); };
    });
  }

  setMachines(n) {
    this.machines = n;
    this.w.postMessage({ cmd: 'machines', n });
  }

  // Closes the current window of measurements and returns it.
  async window() {
    const w = await this._ask({ cmd: 'window' });
    return { n: w.acks.length, unacked: w.unacked, p50: pct(w.acks, 50), p99: pct(w.acks, 99) };
  }

  // HTTP probes (new connection, GET, close) every 100 ms until `until`, from
  // the operator's thread; resolves with [{status, ms}...]
  async probe(port, until, p = '/healthz') {
    return (await this._ask({ cmd: 'probe', port, until, path: p })).rs;
  }

  async stop() {
    await Promise.race([this._ask({ cmd: 'stop' }), sleep(5000)]);
    await this.w.terminate();
  }
}

// ------------------------------------------------------------ attackers

function attackerSocket(port) {
  return net.connect({ host: '127.0.0.1', port, localAddress: ATTACKER });
}

// node's HTTP/2 client, from the attacker's address
function h2connect(port, opts = {}) {
  const s = http2.connect(`http://127.0.0.1:${port}`,
    Object.assign({ createConnection: () => attackerSocket(port) }, opts));
  s.on('error', () => {});
  return s;
}

// One gRPC call with a raw request stream; resolves with status/message.
function grpcCall(session, p, { write } = {}) {
  const req = session.request({ ':method': 'POST', ':path': p, 'content-type': 'application/grpc',
    te: 'trailers' });
  const res = { headers: null, trailers: null };
  req.on('response', (h) => { res.headers = h; });
  req.on('trailers', (t) => { res.trailers = t; });
  req.on('data', () => {});
  req.on('error', (e) => { res.error = e; });
  const done = new Promise((resolve) => req.on('close', () => {
    const h = res.trailers || res.headers || {};
    res.code = h['grpc-status'] === undefined ? undefined : Number(h['grpc-status']);
    res.message = h['grpc-message'] ? decodeURIComponent(h['grpc-message']) : '';
    res.rstCode = req.rstCode;
    resolve(res);
  }));
  if (write) write(req);
  return { req, done };
}

function grpcPrefix(len) {
  const b = Buffer.alloc(5);
  b.writeUInt32BE(len, 1);
  return b;
}

const ser = L.proto.Shard.service.Session.requestSerialize;
function frame(obj) {
  const b = ser(obj);
  return Buffer.concat([grpcPrefix(b.length), b]);
}

// A hostile operator: node's http2 client from 127.0.0.2 speaking
// Shard/Session with arbitrary (possibly hand-made) frames; decodes what
// the shard answers.
class HostileSession {
  constructor(port, cluster, opts = {}) {
    this.s = opts.session || h2connect(port);
    this.cluster = cluster;
    this.msgs = [];
    const de = L.proto.Shard.service.Session.responseDeserialize;
    this.c = grpcCall(this.s, '/bigfleet.v1alpha1.Shard/Session');
    let buf = Buffer.alloc(0);
    this.c.req.removeAllListeners('data');
    this.c.req.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      while (buf.length >= 5 && buf.length >= 5 + buf.readUInt32BE(1)) {
        const n = buf.readUInt32BE(1);
        this.msgs.push(de(buf.subarray(5, 5 + n)));
        buf = buf.subarray(5 + n);
      }
    });
    this.status = null;
    this.c.done.then((r) => { this.status = r; });
  }

  send(obj) { this.c.req.write(frame(obj)); }

  sendRaw(bytes) { this.c.req.write(Buffer.concat([grpcPrefix(bytes.length), bytes])); }

  acks(echo) { return this.msgs.filter((m) => m.payload === 'ack' && m.ack.echo === echo).length; }

  async hello() {
    this.send({ hello: { cluster_id: this.cluster, protocol_version: 'v1alpha1' } });
    await L.waitFor(() => this.acks('hello') > 0 || this.status, 5000, `hello ack for ${this.cluster}`);
    assert.ok(!this.status, `${this.cluster}: session ended: ${JSON.stringify(this.status)}`);
  }

  rollup(needs, ts) {
    this.send({ rollup: { cluster_id: this.cluster,
      timestamp_unix_nanos: String(ts === undefined ? BigInt(Date.now()) * 1000000n : ts), needs } });
  }

  // sends a rollup and waits for its ack (true) or 1 s of silence (false)
  async rollupAcked(needs, ts, ms = 1500) {
    const n0 = this.acks('rollup');
    this.rollup(needs, ts);
    try {
      await L.waitFor(() => this.acks('rollup') > n0 || this.status, ms, 'rollup ack');
    } catch (e) { return false; }
    return this.acks('rollup') > n0;
  }

  close() { try { this.c.req.close(); } catch (e) { /* closed */ } if (!this.shared) this.s.close(); }
}

const need = (o = {}) => ({ requirements: o.requirements || [],
  aggregate_resources: o.aggregate || { cpu: '1' }, priority: o.priority || 0, spread: [],
  interruption_penalty_bucket: 0, reclamation_penalty_bucket: 0, min_unit: o.min_unit || {},
  group: o.group || Buffer.alloc(0) });

// ---- raw HTTP/2 (RFC 9113 framing by hand; HPACK literals without indexing)

const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');
const T = { DATA: 0, HEADERS: 1, PRIORITY: 2, RST_STREAM: 3, SETTINGS: 4, PING: 6, GOAWAY: 7,
  WINDOW_UPDATE: 8, CONTINUATION: 9 };
const F = { END_STREAM: 1, ACK: 1, END_HEADERS: 4 };

function h2frame(type, flags, sid, payload = Buffer.alloc(0)) {
  const h = Buffer.alloc(9);
  h.writeUIntBE(payload.length, 0, 3);
  h[3] = type;
  h[4] = flags;
  h.writeUInt32BE(sid & 0x7fffffff, 5);
  return Buffer.concat([h, payload]);
}

function hpackInt(v, prefixBits, first) {
  const max = (1 << prefixBits) - 1;
  if (v < max) return Buffer.from([first | v]);
  const out = [first | max];
  v -= max;
  while (v >= 128) { out.push((v & 127) | 128); v >>= 7; }
  out.push(v);
  return Buffer.from(out);
}

// literal header field without indexing, new name (RFC 7541 §6.2.2)
function hpackLiteral(name, value) {
  const n = Buffer.from(name), v = Buffer.from(value);
  return Buffer.concat([Buffer.from([0x00]), hpackInt(n.length, 7, 0), n, hpackInt(v.length, 7, 0), v]);
}

function grpcHeaderBlock(p) {
  return Buffer.concat([hpackLiteral(':method', 'POST'), hpackLiteral(':scheme', 'http'),
    hpackLiteral(':path', p), hpackLiteral(':authority', 'localhost'),
    hpackLiteral('content-type', 'application/grpc'), hpackLiteral('te', 'trailers')]);
}

class RawH2 {
  constructor(port) {
    this.sock = attackerSocket(port);
    this.sock.setNoDelay(true);
    this.goaway = null;   // {lastSid, code}
    this.rst = new Map(); // sid -> code
    this.closed = false;
    this.frames = 0;
    let buf = Buffer.alloc(0);
    this.connected = new Promise((resolve) => this.sock.on('connect', resolve));
    this.ended = new Promise((resolve) => this.sock.on('close', () => { this.closed = true; resolve(); }));
    this.error = null;    // the socket's error code (ECONNRESET: reset by the server)
    this.sock.on('error', (e) => { this.error = e.code || String(e); });
    this.sock.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      while (buf.length >= 9) {
        const len = buf.readUIntBE(0, 3);
        if (buf.length < 9 + len) break;
        const type = buf[3], flags = buf[4], sid = buf.readUInt32BE(5) & 0x7fffffff;
        const p = buf.subarray(9, 9 + len);
        this.frames++;
        if (type === T.GOAWAY) this.goaway = { lastSid: p.readUInt32BE(0) & 0x7fffffff, code: p.readUInt32BE(4) };
        else if (type === T.RST_STREAM) this.rst.set(sid, p.readUInt32BE(0));
        else if (type === T.SETTINGS && !(flags & F.ACK)) this.write(h2frame(T.SETTINGS, F.ACK, 0));
        buf = buf.subarray(9 + len);
      }
    });
    this.sock.write(Buffer.concat([PREFACE, h2frame(T.SETTINGS, 0, 0)]));
    this.sid = 1;
  }

  write(b) { if (!this.closed && !this.sock.destroyed) return this.sock.write(b); return false; }

  nextSid() { const s = this.sid; this.sid += 2; return s; }

  headers(sid, p, endStream = false) {
    return h2frame(T.HEADERS, F.END_HEADERS | (endStream ? F.END_STREAM : 0), sid, grpcHeaderBlock(p));
  }

  // writes a burst, respecting the socket's buffer (a flood that the kernel
  // absorbs, not one node buffers in memory)
  async burst(makeFrame, n, { stopOnGoaway = true } = {}) {
    let sent = 0;
    while (sent < n && !this.closed && !(stopOnGoaway && this.goaway)) {
      const chunk = [];
      for (let i = 0; i < 256 && sent < n; i++, sent++) chunk.push(makeFrame(sent));
      if (!this.write(Buffer.concat(chunk)))
        await Promise.race([new Promise((r) => this.sock.once('drain', r)), this.ended, sleep(200)]);
    }
    return sent;
  }

  async waitGoaway(ms = 5000) {
    await L.waitFor(() => this.goaway || this.closed, ms, 'GOAWAY or close');
    return this.goaway;
  }

  close() { this.sock.destroy(); }
}

const H2_ENHANCE_YOUR_CALM = 0xb;

// ------------------------------------------------------------ one attack

const figures = [];

// spec: {name, what, rssBoundMB, counters: [[series, minDelta]], log: RegExp,
//        run: async (until) => {...}  (repeats the attack until `until`, ms),
//        minMs, after: async (m0, m1, log) => {}}
let niced = false;

async function attack(S, op, spec) {
  // The attacker would run on another machine; here it shares two cores
  // with the appliance, so its own CPU (building and writing frames) runs
  // at nice 19 on this thread only (Linux: setpriority on the calling
  // thread). The appliance and the operator's worker thread keep theirs.
  if (!niced) {
    niced = true;
    try { require('os').setPriority(19); } catch (e) { /* not permitted: run as is */ }
  }
  // The latency criterion gets a second trial when the first misses it:
  // an attack that slows the operator does so every time; the shared
  // machine's own spikes (other people's builds) do not repeat on cue.
  // Every other criterion must hold in every trial.
  for (let trial = 1; ; trial++) {
    const r = await attackOnce(S, op, spec, trial);
    if (r.latencyOk || trial === 2) {
      assert.ok(r.latencyOk, r.latencyMsg);
      return r.fig;
    }
    console.log(`     (trial ${trial}: ${r.latencyMsg}; once more)`);
  }
}

async function attackOnce(S, op, spec, trial) {
  const pid = S.sessionPid();
  // before: the operator's service with nothing else going on
  await op.window();
  await sleep(HEAVY ? 3000 : 1500);
  const before = await op.window();
  assert.ok(!op.error, `${spec.name}: the operator failed before the attack: ${op.error}`);
  assert.ok(before.n >= 5 && before.unacked === 0, `${spec.name}: baseline ${JSON.stringify(before)}`);
  const m0 = await metrics(S);
  const logLen = S.log().length;
  const conf0 = op.configured.size;
  op.setMachines(op.machines + 1); // this demand needs a new machine Configured during the attack
  const rss = new RssWatch(pid);
  const t0 = Date.now();
  const minMs = spec.minMs || (HEAVY ? 8000 : 2500);
  const runP = spec.run(t0 + minMs); /* repeats the attack until then (or runs it once) */
  // the operator must get its new machine while the attack is still on
  let confDuring = false;
  const confWatch = (async () => {
    while (!confDuring) {
      if (op.configured.size > conf0) confDuring = true;
      await sleep(25);
    }
  })();
  await runP;
  const tAttack = Date.now() - t0;
  const configuredDuring = confDuring || op.configured.size > conf0;
  const during = await op.window();
  const peak = rss.stop();
  confDuring = true; // ends the watcher
  await confWatch;
  // after: the same quiet conditions again; the shared machine's own noise
  // shows in before/after alike, the attack's effect only in during
  await sleep(HEAVY ? 3000 : 1500);
  const afterw = await op.window();
  const base = Math.max(before.p99, afterw.p99 || 0);
  const m1 = await metrics(S);
  const log = S.log().slice(logLen);
  const delta = (k) => (m1.get(k) || 0) - (m0.get(k) || 0);
  const fig = {
    attack: spec.name, sent: spec.what, bound_mb: spec.rssBoundMB, trial,
    peak_rss_mb: +(peak / 1048576).toFixed(1), rss_before_mb: +(rss.start / 1048576).toFixed(1),
    hwm_reset: rss.hwmOk, attack_ms: tAttack,
    ack_before: { n: before.n, p50_ms: +before.p50.toFixed(2), p99_ms: +before.p99.toFixed(2) },
    ack_during: { n: during.n, unacked: during.unacked, p50_ms: +(during.p50 || NaN).toFixed(2),
      p99_ms: +(during.p99 || NaN).toFixed(2) },
    ack_after: { n: afterw.n, p50_ms: +(afterw.p50 || NaN).toFixed(2), p99_ms: +(afterw.p99 || NaN).toFixed(2) },
    configured_during: configuredDuring,
    counters: Object.fromEntries((spec.counters || []).map(([k]) => [k, delta(k)])),
  };
  figures.push(fig);
  console.log(`     ${JSON.stringify(fig)}`);
  // (a) refused or absorbed, counted, logged
  for (const [k, min] of spec.counters || [])
    assert.ok(delta(k) >= min, `${spec.name}: ${k} moved by ${delta(k)} (want >= ${min})`);
  if (spec.log) assert.match(log, spec.log, `${spec.name}: the log names the reason`);
  if (spec.after) await spec.after(m0, m1, log);
  // (b) the session's memory stays bounded
  assert.ok(peak < spec.rssBoundMB * 1048576,
    `${spec.name}: session peak RSS ${(peak / 1048576).toFixed(1)} MB over the ${spec.rssBoundMB} MB bound`);
  // (c) the well-behaved operator kept working during the attack
  assert.ok(!op.error, `${spec.name}: the operator's session failed: ${op.error}`);
  assert.ok(during.n >= 3, `${spec.name}: only ${during.n} rollups acked during the attack`);
  assert.strictEqual(during.unacked, 0, `${spec.name}: rollups without an ack during the attack`);
  assert.ok(configuredDuring, `${spec.name}: no new machine reached Configured during the attack`);
  assert.strictEqual(S.proc.exitCode, null, 'the appliance is still running');
  const latencyOk = during.p99 <= 2 * base + P99_SLACK_MS;
  const latencyMsg = `${spec.name}: ack p99 ${during.p99.toFixed(2)} ms during vs ` +
    `${before.p99.toFixed(2)} ms before and ${(afterw.p99 || NaN).toFixed(2)} ms after ` +
    `(allowed 2x the larger + ${P99_SLACK_MS} ms)`;
  return { fig, latencyOk, latencyMsg };
}

function saveFigures(file) {
  fs.mkdirSync(path.dirname(RESULTS), { recursive: true });
  let all = {};
  try { all = JSON.parse(fs.readFileSync(RESULTS, 'utf8')); } catch (e) { /* new */ }
  all[file] = { when: new Date().toISOString(), heavy: HEAVY, figures: figures.splice(0) };
  fs.writeFileSync(RESULTS, JSON.stringify(all, null, 1));
}

// One hostile script on node:test (tests/interop/register.js):
//   let S, op;
//   before(async () => ({ S, op } = await H.setUp(opts, ...operatorArgs)));
//   after(() => H.tearDown('name', S, op));
//   const test = H.checks(() => S);
// setUp starts the appliance (startAppliance(opts)) and the well-behaved
// operator (new GoodOperator(S, ...operatorArgs)), and waits for its first Configured machine; tearDown stops
// both, saves the figures under `name` and fails (the file) unless the
// appliance exited 0; checks(appliance) is node:test's test(name, fn) that
// also prints the appliance log's last 15 lines when fn fails.
async function setUp(opts, ...operatorArgs) {
  const S = await startAppliance(opts);
  const op = new GoodOperator(S, ...operatorArgs);
  await op.start();
  await L.waitFor(() => op.configured.size >= 1, 20000, 'the operator\'s first machine Configured');
  return { S, op };
}

async function tearDown(name, S, op) {
  if (op) await op.stop().catch(() => {});
  saveFigures(name);
  if (!S) return;
  const ex = await S.stop();
  assert.strictEqual(ex.code, 0, `the appliance exits cleanly: ${JSON.stringify(ex)}`);
}

function checks(appliance) {
  return (name, fn) => register([[name, fn]], {
    onFail: () => console.log(appliance().log().split('\n').slice(-15).join('\n')),
  });
}

module.exports = {
  setUp, tearDown, checks, L, assert, sleep, HEAVY, IT, ATTACKER, startAppliance, metrics, parseMetrics, GoodOperator,
  attack, saveFigures, RssWatch, h2connect, HostileSession, need, attackerSocket, grpcCall, grpcPrefix, frame, RawH2,
  h2frame, hpackInt, hpackLiteral, grpcHeaderBlock, T, F, H2_ENHANCE_YOUR_CALM, pct,
};
