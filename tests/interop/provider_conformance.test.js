#!/usr/bin/env node
// provider_conformance.test.js: our own provider conformance suite, run over
// the wire with @grpc/grpc-js (+ proto-loader) against bigfleet-simprovider.
// It re-expresses the behaviours of the bigfleet-providers conformance
// registry (reference/ecosystem.md §2.3) that a black-box peer can check:
// lifecycle B101-B106, errors B201-B214, fencing B301-B310, concurrency
// B401-B406, metadata B501-B504, fault B701-B707 (knob-driven), field shape
// B801-B806, List/since_revision B901-B909, durability B1001-B1007 (kill -9
// and restart on --state), scale B1101-B1102 (10k machines), property
// B1203/B1205. Latency budgets (B1105-B1106) are measured in bench/, not here.
// Behaviours that need the faultprovider's actuator timeouts (B702, B705,
// B708) have no simulated counterpart and are not claimed.
//
// Env: BIN (default ./build/bin), PROTO_DIR (default ./proto),
// CONF_ONLY=<regex> runs matching behaviours only. Exit 0 when all pass.
'use strict';

const path = require('path');
const fs = require('fs');
const os = require('os');
const { spawn } = require('child_process');
const grpc = require('@grpc/grpc-js');
const loader = require('@grpc/proto-loader');
const { register } = require('./register');

const repo = path.resolve(__dirname, '..', '..');
const BIN = process.env.BIN || path.join(repo, 'build', 'bin');
const PROTO_DIR = process.env.PROTO_DIR || path.join(repo, 'proto');
const def = loader.loadSync('bigfleet/v1alpha1/provider.proto', {
  includeDirs: [PROTO_DIR], keepCase: true, longs: String, enums: Number, defaults: true,
});
const Provider = grpc.loadPackageDefinition(def).bigfleet.v1alpha1.CapacityProvider;
const S = { SPECULATIVE: 1, CREATING: 2, IDLE: 3, CONFIGURING: 4, CONFIGURED: 5, DRAINING: 6,
  DELETING: 7, FAILED: 8 };
const TRANSITIONAL = new Set([2, 4, 6, 7]);
const LEGAL = new Set(['1>2', '2>3', '3>4', '4>5', '5>6', '6>3', '3>7', '7>1', '2>8', '4>8', '6>8',
  '7>8', '4>3']);
const FP = grpc.status.FAILED_PRECONDITION;
const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'bf-conf-'));
const CATALOG = path.join(TMP, 'catalog.csv');
fs.writeFileSync(CATALOG, [
  'type,cpu_milli,memory_mib,gpu,model,capacity_type,price_per_hour,interruption_probability',
  'od-4,4000,16384,0,,on-demand,0.19,0',
  'spot-4,4000,16384,0,,spot,0.07,0.05',
  'gpu-8,96000,393216,8,A100,bare-metal,12.5,0',
].join('\n') + '\n');

// ------------------------------------------------------------------ providers

const procs = [];
function startSim(args, name) {
  return new Promise((resolve, reject) => {
    const p = spawn(path.join(BIN, 'bigfleet-simprovider'),
      ['--addr=127.0.0.1:' + (args.port || 0), '--log-level=warn', ...args.flags],
      { stdio: ['ignore', 'pipe', 'pipe'] });
    procs.push(p);
    let out = '', errs = '';
    p.stdout.on('data', (d) => {
      out += d;
      const m = /READY grpc=(\d+)/.exec(out);
      if (m && !p.port) {
        p.port = +m[1];
        p.client = newClient(p.port);
        resolve(p);
      }
    });
    p.stderr.on('data', (d) => { errs += d; });
    p.on('exit', (code) => { if (!p.port) reject(new Error(`${name} exited ${code}: ${errs}`)); });
  });
}
function newClient(port) {
  return new Provider('127.0.0.1:' + port, grpc.credentials.createInsecure(),
    { 'grpc.max_receive_message_length': 256 << 20, 'grpc.max_send_message_length': 256 << 20 });
}
function kill9(p) {
  return new Promise((r) => { p.once('exit', r); p.kill('SIGKILL'); });
}

function call(cl, method, req, ms = 10000) {
  return new Promise((resolve) => cl[method](req, { deadline: Date.now() + ms },
    (err, r) => resolve({ err, r })));
}
async function ok(cl, method, req) {
  const { err, r } = await call(cl, method, req);
  if (err) throw new Error(`${method}(${JSON.stringify(req).slice(0, 120)}): ${err.code} ${err.details}`);
  return r;
}
async function code(cl, method, req) {
  const { err } = await call(cl, method, req);
  return err ? err.code : 0;
}

// fencing tokens: one session (shard, epoch) with a strictly increasing sequence
let SEQ = 0;
const tok = (shard = 'conf-shard', epoch = 1) => ({ shard_id: shard, shard_epoch: String(epoch),
  sequence_number: String(++SEQ) });
const ZERO = { shard_id: '', shard_epoch: '0', sequence_number: '0' };

const create = (cl, id, t = tok()) => call(cl, 'Create', { machine_id: id, ...t });
const configure = (cl, id, cluster, md = {}, t = tok(), blob = Buffer.from('#cloud-config')) =>
  call(cl, 'Configure', { machine_id: id, cluster_id: cluster, bootstrap_blob: blob, shard_metadata: md, ...t });
const drain = (cl, id, grace = 0, t = tok()) =>
  call(cl, 'Drain', { machine_id: id, grace_period_seconds: String(grace), ...t });
const del = (cl, id, t = tok()) => call(cl, 'Delete', { machine_id: id, ...t });
const get = (cl, id) => ok(cl, 'Get', { id });
const list = (cl, f = {}) => ok(cl, 'List', f);

async function mustReach(cl, id, state, ms = 15000) {
  const end = Date.now() + ms;
  for (;;) {
    const m = await get(cl, id);
    if (m.state === state) return m;
    if (Date.now() > end) throw new Error(`${id} never reached state ${state} (at ${m.state})`);
    await sleep(20);
  }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
function assert(c, msg) { if (!c) throw new Error(msg); }
function eq(a, b, msg) {
  if (JSON.stringify(a) !== JSON.stringify(b)) throw new Error(`${msg}: ${JSON.stringify(a)} != ${JSON.stringify(b)}`);
}

// machine ids handed out from the pool, so behaviours never share a machine
const pools = new Map();
async function take(p, state, type = 'od-4') {
  if (!pools.has(p)) pools.set(p, new Set());
  const used = pools.get(p);
  const l = await list(p.client, { states: [state] });
  const m = l.machines.find((x) => x.instance_type === type && !used.has(x.id));
  assert(m, `no free ${type} machine in state ${state}`);
  used.add(m.id);
  return m.id;
}
const mdEq = (a, b) => {
  const ka = Object.keys(a).sort(), kb = Object.keys(b).sort();
  if (JSON.stringify(ka) !== JSON.stringify(kb)) return false;
  return ka.every((k) => Buffer.compare(Buffer.from(a[k]), Buffer.from(b[k])) === 0);
};

// ------------------------------------------------------------------ behaviours

const T = [];
const B = (id, name, fn) => T.push({ id, name, fn });
let P; // instant provider
let L; // provider with transition latency (transitional states observable)
let F; // provider whose Create / Configure actuators always fail

B('B101', 'four round-trips Speculative->Idle->Configured->Idle leave cluster, metadata and error empty at Idle', async () => {
  const id = await take(P, S.SPECULATIVE);
  assert(!(await create(P.client, id)).err, 'create');
  for (let i = 0; i < 4; i++) {
    assert(!(await configure(P.client, id, 'c' + i, { k: Buffer.from('v' + i) })).err, 'configure');
    await mustReach(P.client, id, S.CONFIGURED);
    assert(!(await drain(P.client, id)).err, 'drain');
    const m = await mustReach(P.client, id, S.IDLE);
    eq([m.cluster, Object.keys(m.shard_metadata).length, m.last_error], ['', 0, ''], 'Idle is clean');
  }
});

B('B102', 'an observed transitional state is always the right one for the operation', async () => {
  const id = await take(L, S.SPECULATIVE);
  const steps = [[() => create(L.client, id), S.CREATING, S.IDLE],
    [() => configure(L.client, id, 'c'), S.CONFIGURING, S.CONFIGURED],
    [() => drain(L.client, id), S.DRAINING, S.IDLE], [() => del(L.client, id), S.DELETING, S.SPECULATIVE]];
  for (const [op, trans, target] of steps) {
    const { err, r } = await op();
    assert(!err, 'op failed: ' + (err && err.details));
    assert(r.machine.state === trans || r.machine.state === target, `ack state ${r.machine.state}`);
    const seen = await traceUntil(L.client, id, target);
    seen.forEach((s) => assert(s === trans || s === target, `unexpected state ${s} on the way to ${target}`));
  }
});

async function traceUntil(cl, id, target, ms = 15000) {
  const seen = [], end = Date.now() + ms;
  for (;;) {
    const m = await get(cl, id);
    if (seen[seen.length - 1] !== m.state) seen.push(m.state);
    if (m.state === target) return seen;
    assert(Date.now() < end, `${id} stuck before ${target}: ${seen}`);
    await sleep(10);
  }
}

B('B103', 'the de-duplicated state trace walks only legal adjacent edges', async () => {
  const id = await take(L, S.SPECULATIVE);
  let trace = [S.SPECULATIVE];
  await create(L.client, id); trace = trace.concat(await traceUntil(L.client, id, S.IDLE));
  await configure(L.client, id, 'c'); trace = trace.concat(await traceUntil(L.client, id, S.CONFIGURED));
  await drain(L.client, id); trace = trace.concat(await traceUntil(L.client, id, S.IDLE));
  trace = trace.filter((s, i) => i === 0 || trace[i - 1] !== s);
  for (let i = 1; i < trace.length; i++)
    assert(LEGAL.has(`${trace[i - 1]}>${trace[i]}`), `illegal edge ${trace[i - 1]}>${trace[i]} in ${trace}`);
});

B('B104', 'cluster is set in Configuring and Configured and empty after Drain', async () => {
  const id = await take(L, S.IDLE);
  const { r } = await configure(L.client, id, 'clu-104');
  eq(r.machine.cluster, 'clu-104', 'cluster in the Configuring ack');
  eq((await mustReach(L.client, id, S.CONFIGURED)).cluster, 'clu-104', 'cluster in Configured');
  await drain(L.client, id);
  eq((await mustReach(L.client, id, S.IDLE)).cluster, '', 'cluster after Drain');
});

B('B105', 'host is unset for Speculative and set for Idle and Configured', async () => {
  for (const m of (await list(P.client)).machines) {
    if (m.state === S.SPECULATIVE) assert(!m.host || (!m.host.provider && !m.host.ref), `${m.id} has a host`);
    if (m.state === S.IDLE || m.state === S.CONFIGURED) assert(m.host && m.host.ref, `${m.id} lacks a host`);
  }
});

B('B106', 'a settled machine never re-enters a transitional state on its own', async () => {
  const id = await take(P, S.CONFIGURED);
  const end = Date.now() + 1000;
  while (Date.now() < end) {
    assert((await get(P.client, id)).state === S.CONFIGURED, 'moved on its own');
    await sleep(50);
  }
});

B('B201', 'out-of-position calls are rejected (never FAILED_PRECONDITION) without partial transition', async () => {
  const spec = await take(P, S.SPECULATIVE), idle = await take(P, S.IDLE), conf = await take(P, S.CONFIGURED);
  const cases = [[create, conf], [(c, id) => configure(c, id, 'x'), spec], [drain, idle], [del, conf]];
  for (const [op, id] of cases) {
    const before = await get(P.client, id);
    const { err } = await op(P.client, id);
    assert(err && err.code !== FP, `${id}: expected a rejection other than FAILED_PRECONDITION, got ${err && err.code}`);
    const after = await get(P.client, id);
    eq([after.state, after.cluster], [before.state, before.cluster], 'no partial transition');
  }
  const { err } = await del(P.client, spec); // Delete@Speculative: rejected, unimplemented or a no-op
  assert(!err || err.code !== FP, 'Delete@Speculative answered FAILED_PRECONDITION');
  eq((await get(P.client, spec)).state, S.SPECULATIVE, 'Delete@Speculative moved the machine');
});

B('B202', 're-Configure@Configured and re-Create@Idle are idempotent and return the original operation id', async () => {
  const id = await take(P, S.SPECULATIVE);
  const c1 = await create(P.client, id), c2 = await create(P.client, id);
  assert(!c1.err && !c2.err && c1.r.operation_id && c1.r.operation_id === c2.r.operation_id, 'Create op ids differ');
  const g1 = await configure(P.client, id, 'cl'), g2 = await configure(P.client, id, 'cl');
  assert(!g1.err && !g2.err && g1.r.operation_id === g2.r.operation_id, 'Configure op ids differ');
});

B('B203', 'an unknown id is NOT_FOUND (Delete: NOT_FOUND or UNIMPLEMENTED)', async () => {
  eq(await code(P.client, 'Get', { id: 'no-such-machine' }), grpc.status.NOT_FOUND, 'Get');
  eq((await create(P.client, 'no-such-machine')).err.code, grpc.status.NOT_FOUND, 'Create');
  eq((await configure(P.client, 'no-such-machine', 'c')).err.code, grpc.status.NOT_FOUND, 'Configure');
  eq((await drain(P.client, 'no-such-machine')).err.code, grpc.status.NOT_FOUND, 'Drain');
  const d = (await del(P.client, 'no-such-machine')).err.code;
  assert(d === grpc.status.NOT_FOUND || d === grpc.status.UNIMPLEMENTED, `Delete: ${d}`);
});

B('B204', 'an empty id is INVALID_ARGUMENT on every RPC', async () => {
  const IA = grpc.status.INVALID_ARGUMENT;
  eq(await code(P.client, 'Get', { id: '' }), IA, 'Get');
  eq((await create(P.client, '')).err.code, IA, 'Create');
  eq((await configure(P.client, '', 'c')).err.code, IA, 'Configure');
  eq((await drain(P.client, '')).err.code, IA, 'Drain');
  eq((await del(P.client, '')).err.code, IA, 'Delete');
});

B('B209', 'oversized metadata (512 x 1 KiB) is echoed verbatim or refused as INVALID_ARGUMENT', async () => {
  const id = await take(P, S.IDLE), md = {};
  for (let i = 0; i < 512; i++) md['k' + i] = Buffer.alloc(1024, 97 + (i % 26));
  const { err } = await configure(P.client, id, 'c', md);
  if (err) return eq(err.code, grpc.status.INVALID_ARGUMENT, 'refusal code');
  assert(mdEq((await get(P.client, id)).shard_metadata, md), 'metadata not echoed verbatim');
});

B('B210', 'a negative grace is refused (INVALID_ARGUMENT, no change) or accepted and settles Idle', async () => {
  const id = await take(P, S.CONFIGURED);
  const { err } = await drain(P.client, id, -5);
  if (err) {
    eq(err.code, grpc.status.INVALID_ARGUMENT, 'refusal code');
    eq((await get(P.client, id)).state, S.CONFIGURED, 'changed');
  } else await mustReach(P.client, id, S.IDLE);
});

B('B211', 'a negative epoch or sequence with a shard id is refused or accepted, never FAILED_PRECONDITION', async () => {
  const id = await take(P, S.SPECULATIVE);
  const { err } = await create(P.client, id, { shard_id: 'neg-211', shard_epoch: '-3', sequence_number: '-7' });
  assert(!err || err.code === grpc.status.INVALID_ARGUMENT, `code ${err && err.code}`);
});

B('B212', 'the int64-max token is accepted and establishes the mark', async () => {
  const id = await take(P, S.SPECULATIVE), MAX = '9223372036854775807';
  assert(!(await create(P.client, id, { shard_id: 's212', shard_epoch: '1', sequence_number: MAX })).err, 'max token');
  eq((await create(P.client, id, { shard_id: 's212', shard_epoch: '1', sequence_number: '5' })).err.code, FP, 'lower after max');
  assert(!(await create(P.client, id, { shard_id: 's212', shard_epoch: '2', sequence_number: '1' })).err, 'higher epoch');
});

B('B213', 'a 3 MiB bootstrap blob is accepted or refused as INVALID_ARGUMENT', async () => {
  const id = await take(P, S.IDLE);
  const { err } = await configure(P.client, id, 'c', {}, tok(), Buffer.alloc(3 << 20, 120));
  assert(!err || err.code === grpc.status.INVALID_ARGUMENT, `code ${err && err.code}`);
});

B('B214', 'each new lifecycle cycle mints a fresh operation id', async () => {
  const id = await take(P, S.IDLE), ids = new Set();
  for (let i = 0; i < 3; i++) {
    ids.add((await configure(P.client, id, 'c')).r.operation_id);
    await mustReach(P.client, id, S.CONFIGURED);
    ids.add((await drain(P.client, id)).r.operation_id);
    await mustReach(P.client, id, S.IDLE);
  }
  eq(ids.size, 6, 'distinct operation ids');
});

B('B301', 'a stale token to a machine that does not exist is FAILED_PRECONDITION (fence before not-found)', async () => {
  // first contact passes the fence (the mark is kept even for unknown ids), then NOT_FOUND
  eq((await create(P.client, 'ghost-301', tok('s301', 5))).err.code, grpc.status.NOT_FOUND, 'first contact');
  eq((await create(P.client, 'ghost-301', tok('s301', 4))).err.code, FP, 'stale token on an unknown id');
});

B('B302', 'marks are isolated per (shard, machine)', async () => {
  const a = await take(P, S.SPECULATIVE), b = await take(P, S.SPECULATIVE);
  const hi = { shard_id: 's302', shard_epoch: '9', sequence_number: '100' };
  const lo = { shard_id: 's302', shard_epoch: '1', sequence_number: '1' };
  assert(!(await create(P.client, a, hi)).err, 'hi on a');
  assert(!(await create(P.client, b, lo)).err, 'another machine, same shard, low token');
  assert(!(await create(P.client, a, { ...lo, shard_id: 's302-other' })).err, 'another shard, same machine');
  eq((await create(P.client, a, lo)).err.code, FP, 'low token on a');
});

B('B303', 'only strictly newer tokens pass; a higher epoch resets the sequence', async () => {
  const id = await take(P, S.SPECULATIVE), t = (e, s) => ({ shard_id: 's303', shard_epoch: String(e), sequence_number: String(s) });
  assert(!(await create(P.client, id, t(2, 10))).err, '(2,10)');
  eq((await create(P.client, id, t(2, 10))).err.code, FP, 'equal');
  eq((await create(P.client, id, t(2, 9))).err.code, FP, 'lower seq');
  eq((await create(P.client, id, t(1, 99))).err.code, FP, 'lower epoch');
  assert(!(await create(P.client, id, t(2, 11))).err, 'newer seq');
  assert(!(await create(P.client, id, t(3, 1))).err, 'newer epoch, seq reset');
});

B('B304', 'Get and List are unaffected by fenced-out mutations', async () => {
  const id = await take(P, S.IDLE);
  await configure(P.client, id, 'c', {}, tok('s304', 7));
  const before = await get(P.client, id);
  eq((await drain(P.client, id, 0, tok('s304', 6))).err.code, FP, 'zombie drain');
  const after = await get(P.client, id);
  eq([after.state, after.cluster], [before.state, before.cluster], 'Get changed');
  const inList = (await list(P.client, { states: [S.CONFIGURED] })).machines.find((m) => m.id === id);
  assert(inList && inList.cluster === 'c', 'List changed');
});

B('B305', 'the fence runs before the idempotency short-circuit (stale Configure / Drain replays refused)', async () => {
  const id = await take(P, S.IDLE), t = (s) => ({ shard_id: 's305', shard_epoch: '1', sequence_number: String(s) });
  assert(!(await configure(P.client, id, 'c', {}, t(10))).err, 'configure');
  eq((await configure(P.client, id, 'c', {}, t(10))).err.code, FP, 'stale Configure replay');
  assert(!(await drain(P.client, id, 0, t(11))).err, 'drain');
  eq((await drain(P.client, id, 0, t(11))).err.code, FP, 'stale Drain replay');
});

B('B306', 'the all-zero token bypasses fencing', async () => {
  const id = await take(P, S.SPECULATIVE);
  await create(P.client, id, tok('s306', 50));
  for (let i = 0; i < 3; i++) assert(!(await create(P.client, id, ZERO)).err, 'zero token refused');
});

B('B307', 'an auto-advancing session token is accepted across Create, Configure and Drain', async () => {
  const id = await take(P, S.SPECULATIVE);
  assert(!(await create(P.client, id)).err && !(await configure(P.client, id, 'c')).err &&
    !(await drain(P.client, id)).err, 'session tokens refused');
  await mustReach(P.client, id, S.IDLE);
});

B('B308', 'after a new epoch every token of the old one is refused', async () => {
  const id = await take(P, S.SPECULATIVE);
  assert(!(await create(P.client, id, tok('s308', 1))).err, 'epoch 1');
  assert(!(await create(P.client, id, tok('s308', 2))).err, 'epoch 2');
  eq((await create(P.client, id, tok('s308', 1))).err.code, FP, 'epoch 1 again');
});

B('B309', 'a token that passes the fence but whose operation is out of position still advances the mark', async () => {
  const id = await take(P, S.SPECULATIVE), t = (s) => ({ shard_id: 's309', shard_epoch: '1', sequence_number: String(s) });
  const { err } = await drain(P.client, id, 0, t(20));
  assert(err && err.code !== FP, 'out-of-position drain');
  eq((await create(P.client, id, t(19))).err.code, FP, 'mark not advanced by the failed op');
});

B('B310', 'a random token stream is accepted exactly when strictly greater than the running max', async () => {
  const id = await take(P, S.SPECULATIVE);
  let rnd = 310, max = null;
  const next = () => (rnd = (rnd * 1103515245 + 12345) % 2147483648);
  for (let i = 0; i < 60; i++) {
    const e = next() % 3, s = next() % 8, newer = !max || e > max[0] || (e === max[0] && s > max[1]);
    const t = { shard_id: 's310', shard_epoch: String(e + 1), sequence_number: String(s + 1) };
    const { err } = await create(P.client, id, t);
    eq(err ? err.code : 0, newer ? 0 : FP, `token (${e},${s}) max ${max}`);
    if (newer) max = [e, s];
  }
});

B('B401', 'parallel identical retries yield one operation id and one transition, for all four kinds', async () => {
  const id = await take(P, S.SPECULATIVE);
  const same = async (fn, what) => {
    const rs = await Promise.all(Array.from({ length: 8 }, () => fn()));
    const ids = new Set(rs.map(({ err, r }) => { assert(!err, `${what}: ${err && err.details}`); return r.operation_id; }));
    eq(ids.size, 1, `${what} operation ids`);
  };
  await same(() => create(P.client, id, ZERO), 'Create');
  await same(() => configure(P.client, id, 'c', {}, ZERO), 'Configure');
  await same(() => drain(P.client, id, 0, ZERO), 'Drain');
  await same(() => del(P.client, id, ZERO), 'Delete');
  await mustReach(P.client, id, S.SPECULATIVE);
});

B('B403', 'a Configure racing a Drain serialises to one well-defined stable state', async () => {
  const id = await take(P, S.IDLE);
  const [c, d] = await Promise.all([configure(P.client, id, 'race', {}, ZERO), drain(P.client, id, 0, ZERO)]);
  assert(!c.err, 'configure refused');
  const m = await get(P.client, id);
  if (d.err) eq([m.state, m.cluster], [S.CONFIGURED, 'race'], 'drain lost');
  else eq([m.state, m.cluster], [S.IDLE, ''], 'drain won');
});

B('B404', 'zombie vs live interleavings: the live epoch always wins, the zombie is always fenced', async () => {
  const id = await take(P, S.SPECULATIVE);
  let zs = 0, ls = 0;
  const zombie = () => ({ shard_id: 's404', shard_epoch: '1', sequence_number: String(1000 + ++zs) });
  const live = () => ({ shard_id: 's404', shard_epoch: '2', sequence_number: String(++ls) });
  assert(!(await create(P.client, id, live())).err, 'live create');
  for (let i = 0; i < 5; i++) {
    const [z, l] = await Promise.all([create(P.client, id, zombie()), create(P.client, id, live())]);
    eq(z.err && z.err.code, FP, 'zombie accepted');
    assert(!l.err || l.err.code === FP, 'live refused for another reason');
  }
  assert(!(await configure(P.client, id, 'c', {}, live())).err, 'live configure after the interleaving');
});

B('B405', 'retries over distinct connections collapse to one operation id', async () => {
  const id = await take(P, S.IDLE);
  const cls = [newClient(P.port), newClient(P.port), newClient(P.port)];
  const rs = await Promise.all(cls.map((cl) => configure(cl, id, 'c', {}, ZERO)));
  eq(new Set(rs.map((x) => x.r.operation_id)).size, 1, 'operation ids');
  cls.forEach((cl) => cl.close());
});

B('B406', 'K machines in parallel get distinct operation ids and no cross-talk', async () => {
  const ids = [];
  for (let i = 0; i < 8; i++) ids.push(await take(P, S.SPECULATIVE));
  const rs = await Promise.all(ids.map((id) => create(P.client, id)));
  eq(new Set(rs.map((x) => x.r.operation_id)).size, 8, 'distinct op ids');
  rs.forEach((x, i) => eq(x.r.machine.id, ids[i], 'ack for another machine'));
});

function richMetadata() {
  const md = {};
  for (let i = 0; i < 50; i++) md[`key-${i}`] = Buffer.from(`value-${i}`);
  md['nul\u0000key'] = Buffer.from([0, 1, 2, 0, 255, 0]);
  md['ctl'] = Buffer.from([1, 2, 3, 7, 8, 27, 127]);
  md['unicode-\u00e9\u4e2d\ud83d\ude00'] = Buffer.from('\u00e9\u4e2d\ud83d\ude00', 'utf8');
  md['empty'] = Buffer.alloc(0);
  md['bigfleet.lucy.sh/assigned-group'] = Buffer.from('rack\u0000gang-7');
  return md; // 55 keys
}

B('B501', 'a 55-key map with NUL, control bytes, unicode and empty values is echoed byte for byte', async () => {
  const id = await take(P, S.IDLE), md = richMetadata();
  eq(Object.keys(md).length, 55, 'fixture');
  const { err, r } = await configure(P.client, id, 'c', md);
  assert(!err, 'configure');
  assert(mdEq(r.machine.shard_metadata, md), 'ack echo differs');
  assert(mdEq((await get(P.client, id)).shard_metadata, md), 'Get echo differs');
  assert(mdEq((await get(P.client, id)).shard_metadata, md), 'second Get differs');
  const inList = (await list(P.client, { states: [S.CONFIGURED] })).machines.find((m) => m.id === id);
  assert(inList && mdEq(inList.shard_metadata, md), 'List echo differs');
});

B('B502', 'metadata and cluster clear when Drain settles; a later disjoint Configure shows no old key', async () => {
  const id = await take(P, S.IDLE);
  await configure(P.client, id, 'c1', { old: Buffer.from('1') });
  await drain(P.client, id);
  const m = await mustReach(P.client, id, S.IDLE);
  eq([m.cluster, Object.keys(m.shard_metadata)], ['', []], 'not cleared');
  await configure(P.client, id, 'c2', { fresh: Buffer.from('2') });
  eq(Object.keys((await get(P.client, id)).shard_metadata), ['fresh'], 'old key resurfaced');
});

B('B503', 'a ~2 MiB map (256 x 8 KiB) is echoed verbatim or refused, never truncated', async () => {
  const id = await take(P, S.IDLE), md = {};
  for (let i = 0; i < 256; i++) md['big-' + i] = Buffer.alloc(8192, i % 251);
  const { err } = await configure(P.client, id, 'c', md);
  if (err) return eq(err.code, grpc.status.INVALID_ARGUMENT, 'refusal code');
  assert(mdEq((await get(P.client, id)).shard_metadata, md), 'truncated or altered');
});

B('B504', 'metadata is visible while Configuring', async () => {
  const id = await take(L, S.IDLE), md = { during: Buffer.from('configuring') };
  const { r } = await configure(L.client, id, 'c', md);
  const m = await get(L.client, id);
  if (m.state === S.CONFIGURING) assert(mdEq(m.shard_metadata, md), 'not visible in Configuring');
  assert(mdEq(r.machine.shard_metadata, md), 'not in the ack');
});

B('B701', 'an actuator error ends FAILED with last_error (Create and Configure)', async () => {
  const a = await take(F, S.SPECULATIVE), b = await take(F, S.IDLE);
  await create(F.client, a);
  await configure(F.client, b, 'c');
  for (const id of [a, b]) {
    const m = await mustReach(F.client, id, S.FAILED);
    assert(m.last_error, `${id}: FAILED without last_error`);
  }
});

B('B704', 'FAILED is terminal: every mutation is refused (not FAILED_PRECONDITION), last_error preserved', async () => {
  const id = await take(F, S.IDLE);
  await configure(F.client, id, 'c');
  const before = await mustReach(F.client, id, S.FAILED);
  for (const op of [(c, i) => create(c, i), (c, i) => configure(c, i, 'x'), (c, i) => drain(c, i), (c, i) => del(c, i)]) {
    const { err } = await op(F.client, id);
    assert(err && err.code !== FP, `accepted or fenced: ${err && err.code}`);
  }
  const after = await get(F.client, id);
  eq([after.state, after.last_error], [S.FAILED, before.last_error], 'FAILED changed');
});

B('B707', 'FAILED machines stay readable through Get and List', async () => {
  const l = await list(F.client, { states: [S.FAILED] });
  assert(l.machines.length > 0, 'no FAILED machine listed');
  for (const m of l.machines.slice(0, 3)) eq((await get(F.client, m.id)).state, S.FAILED, 'Get');
});

B('B801', 'every machine has a state, an instance type, sane cost inputs and no reserved keys in labels', async () => {
  for (const m of (await list(P.client)).machines) {
    assert(m.state >= 1 && m.state <= 8, `${m.id}: state ${m.state}`);
    assert(m.instance_type, `${m.id}: empty instance_type`);
    for (const k of Object.keys(m.labels)) assert(!/^(zone|instance-type|capacity-type)$/.test(k), `${m.id}: label ${k}`);
    assert(Number.isFinite(m.price_per_hour) && m.price_per_hour >= 0, `${m.id}: price`);
    assert(m.interruption_probability >= 0 && m.interruption_probability <= 1, `${m.id}: probability`);
    if (m.capacity_type === 4) assert(m.interruption_probability > 0, `${m.id}: SPOT with probability 0`);
  }
});

B('B802', 'host and cluster follow the state', async () => {
  for (const m of (await list(P.client)).machines) {
    const host = !!(m.host && (m.host.provider || m.host.ref));
    if ([S.IDLE, S.CONFIGURING, S.CONFIGURED, S.DRAINING, S.DELETING].includes(m.state)) assert(host, `${m.id}: no host`);
    if ([S.CONFIGURED, S.DRAINING].includes(m.state)) assert(m.cluster, `${m.id}: no cluster`);
    if ([S.SPECULATIVE, S.CREATING, S.IDLE].includes(m.state)) assert(!m.cluster, `${m.id}: cluster in ${m.state}`);
  }
});

B('B803', 'allocatable and resources are non-empty when present', async () => {
  for (const m of (await list(P.client)).machines) {
    if (m.resources) for (const [k, v] of Object.entries(m.resources.resources)) assert(k && v, `${m.id}: empty resource`);
    if (m.allocatable) for (const [k, v] of Object.entries(m.allocatable.resources)) assert(k && v, `${m.id}: empty allocatable`);
  }
});

B('B804', 'HostRef.provider is stable through the lifecycle', async () => {
  const id = await take(P, S.SPECULATIVE);
  await create(P.client, id);
  const p0 = (await get(P.client, id)).host.provider;
  await configure(P.client, id, 'c');
  eq((await get(P.client, id)).host.provider, p0, 'Configured');
  await drain(P.client, id);
  eq((await mustReach(P.client, id, S.IDLE)).host.provider, p0, 'after Drain');
});

B('B805', 'capacity_type is set and zone non-empty wherever a host is set', async () => {
  for (const m of (await list(P.client)).machines)
    if (m.host && m.host.ref) assert(m.capacity_type > 0 && m.zone, `${m.id}: capacity_type/zone`);
});

B('B806', 'Delete back to Speculative clears host, cluster and metadata', async () => {
  const id = await take(P, S.IDLE);
  await del(P.client, id);
  const m = await mustReach(P.client, id, S.SPECULATIVE);
  assert((!m.host || !m.host.ref) && !m.cluster && !Object.keys(m.shard_metadata).length, 'not cleared');
});

B('B901', 'a single-state filter and a multi-state union are exact', async () => {
  const all = (await list(P.client)).machines;
  const only = (await list(P.client, { states: [S.IDLE] })).machines;
  eq(only.map((m) => m.id).sort(), all.filter((m) => m.state === S.IDLE).map((m) => m.id).sort(), 'Idle');
  const both = (await list(P.client, { states: [S.IDLE, S.CONFIGURED] })).machines;
  eq(both.map((m) => m.id).sort(), all.filter((m) => m.state === S.IDLE || m.state === S.CONFIGURED).map((m) => m.id).sort(), 'union');
});

B('B902', 'max_results 1, 2, 3 are honoured and 0 means no cap', async () => {
  for (const n of [1, 2, 3]) eq((await list(P.client, { max_results: n })).machines.length, n, `max ${n}`);
  eq((await list(P.client, { max_results: 0 })).machines.length, (await list(P.client)).machines.length, 'no cap');
});

B('B903', 'the revision advances after a mutation and the delta holds the mutated machine', async () => {
  const r0 = (await list(P.client)).revision;
  assert(r0.length, 'no revision');
  const id = await take(P, S.SPECULATIVE);
  await create(P.client, id);
  const d = await list(P.client, { since_revision: r0 });
  assert(Buffer.compare(d.revision, r0) !== 0, 'revision did not move');
  assert(d.machines.some((m) => m.id === id), 'delta lacks the mutated machine');
});

B('B904', 'a delta with no mutation is empty', async () => {
  const r = (await list(P.client)).revision;
  eq((await list(P.client, { since_revision: r })).machines.length, 0, 'delta');
});

B('B905', 'cursors are monotonic and a delta from any earlier cursor holds everything mutated since', async () => {
  const cursors = [], touched = [];
  for (let i = 0; i < 3; i++) {
    cursors.push((await list(P.client)).revision);
    const id = await take(P, S.SPECULATIVE);
    await create(P.client, id);
    touched.push(id);
  }
  for (let i = 0; i < 3; i++) {
    const ids = (await list(P.client, { since_revision: cursors[i] })).machines.map((m) => m.id);
    touched.slice(i).forEach((id) => assert(ids.includes(id), `delta from cursor ${i} lacks ${id}`));
  }
});

B('B906', 'a garbage or zero cursor returns the full list without error', async () => {
  const n = (await list(P.client)).machines.length;
  for (const c of ['garbage', '0', '-1', ''])
    eq((await list(P.client, { since_revision: Buffer.from(c) })).machines.length, n, `cursor "${c}"`);
});

B('B907', 'paging with max_results and since_revision has no duplicate and no gap', async () => {
  const all = new Set((await list(P.client)).machines.map((m) => m.id));
  const seen = [];
  let cursor = Buffer.from('0');
  for (let i = 0; i < 1000; i++) {
    const p = await list(P.client, { max_results: 7, since_revision: cursor });
    if (!p.machines.length) break;
    seen.push(...p.machines.map((m) => m.id));
    cursor = p.revision;
  }
  eq(seen.length, new Set(seen).size, 'duplicates');
  eq(seen.length, all.size, 'gap');
});

B('B908', 'idle ticks do not bump the revision', async () => {
  const r0 = (await list(P.client)).revision;
  await sleep(1200);
  assert(Buffer.compare((await list(P.client)).revision, r0) === 0, 'revision moved while idle');
});

B('B909', 'the exact cursor bytes are accepted; a byte-mutated cursor degrades to a full list', async () => {
  const l = await list(P.client), r = l.revision;
  eq((await list(P.client, { since_revision: r })).machines.length, 0, 'exact cursor');
  const bad = Buffer.from(r); bad[0] ^= 0x40;
  eq((await list(P.client, { since_revision: bad })).machines.length, l.machines.length, 'mutated cursor');
});

B('B1203', 'random lifecycle calls follow the four-edge model; illegal ones change nothing', async () => {
  const ids = [];
  for (let i = 0; i < 4; i++) ids.push(await take(P, S.SPECULATIVE));
  let rnd = 1203;
  const next = () => (rnd = (rnd * 1103515245 + 12345) % 2147483648);
  const legalFrom = { Create: S.SPECULATIVE, Configure: S.IDLE, Drain: S.CONFIGURED, Delete: S.IDLE };
  for (let i = 0; i < 80; i++) {
    const id = ids[next() % ids.length], op = ['Create', 'Configure', 'Drain', 'Delete'][next() % 4];
    const before = await get(P.client, id);
    const req = { machine_id: id, ...tok('s1203') };
    if (op === 'Configure') Object.assign(req, { cluster_id: 'c', bootstrap_blob: Buffer.from('b') });
    const { err } = await call(P.client, op, req);
    if (before.state === legalFrom[op]) assert(!err, `${op} refused at ${before.state}`);
    else if (err) {
      assert(err.code !== FP, 'FAILED_PRECONDITION outside fencing');
      eq((await get(P.client, id)).state, before.state, 'partial transition');
    }
  }
});

B('B1205', 'malformed request bodies are refused with INVALID_ARGUMENT, never FAILED_PRECONDITION', async () => {
  const raw = new grpc.Client('127.0.0.1:' + P.port, grpc.credentials.createInsecure());
  const bodies = [Buffer.from([0x0a]), Buffer.from([0x0a, 0xff, 0xff]), Buffer.from([0x0b, 0x01]),
    Buffer.from([0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01])];
  for (const m of ['Create', 'Configure', 'Drain', 'Delete', 'Get', 'List'])
    for (const b of bodies) {
      const err = await new Promise((res) => raw.makeUnaryRequest(`/bigfleet.v1alpha1.CapacityProvider/${m}`,
        (x) => x, (x) => x, b, { deadline: Date.now() + 5000 }, (e) => res(e)));
      assert(err && err.code !== FP, `${m}: ${err ? err.code : 'accepted'}`);
      assert([grpc.status.INVALID_ARGUMENT, grpc.status.NOT_FOUND, grpc.status.UNIMPLEMENTED].includes(err.code),
        `${m}: code ${err.code}`);
    }
  raw.close();
});

// ------------------------------------------------------------------ durability

B('B1001-B1007', 'after kill -9 and a restart on the same state: fences, operation ids, bindings, inventory, cursors and interrupted transitions', async () => {
  const state = path.join(TMP, 'durable');
  const flags = ['--catalog=' + CATALOG, '--seed-count=6', '--seed-idle=4', '--seed-configured=2',
    '--configure-latency=30s', '--state=' + state];
  let D = await startSim({ flags }, 'durable');
  const port = D.port;
  const l0 = await list(D.client);
  const idle = l0.machines.filter((m) => m.state === S.IDLE && m.instance_type === 'od-4').map((m) => m.id);
  const md = richMetadata();
  const seededConf = l0.machines.find((m) => m.state === S.CONFIGURED);
  const fenced = { shard_id: 'sd', shard_epoch: '3', sequence_number: '30' };
  const stale = { shard_id: 'sd', shard_epoch: '3', sequence_number: '29' };
  assert(!(await configure(D.client, idle[0], 'durable-c', md, fenced)).err, 'configure');  // stays CONFIGURING (30 s)
  const op = (await configure(D.client, idle[1], 'c2', {}, ZERO)).r.operation_id;
  const cursor = (await list(D.client)).revision;
  const before = new Map((await list(D.client)).machines.map((m) => [m.id, m.state]));
  await kill9(D);
  D = await startSim({ flags, port }, 'durable-2');
  // B1001: the mark survived
  eq((await configure(D.client, idle[0], 'durable-c', md, stale)).err.code, FP, 'B1001 stale token after restart');
  // B1006: the interrupted CONFIGURING machines are FAILED with a reason, never stuck
  for (const id of [idle[0], idle[1]]) {
    const m = await get(D.client, id);
    assert(m.state === S.FAILED && m.last_error, `B1006 ${id}: ${m.state} "${m.last_error}"`);
  }
  // B1003: a Configured machine keeps its cluster and its metadata verbatim; the
  // interrupted one keeps its binding and metadata as evidence
  const c1 = await get(D.client, seededConf.id);
  assert(c1.state === S.CONFIGURED && c1.cluster === seededConf.cluster && c1.cluster &&
    mdEq(c1.shard_metadata, seededConf.shard_metadata) && Object.keys(c1.shard_metadata).length === 5,
    'B1003 Configured binding/metadata lost');
  const m0 = await get(D.client, idle[0]);
  assert(m0.cluster === 'durable-c' && mdEq(m0.shard_metadata, md), 'B1003 evidence lost');
  // B1004: every other machine kept its state
  for (const m of (await list(D.client)).machines)
    if (m.id !== idle[0] && m.id !== idle[1]) eq(m.state, before.get(m.id), `B1004 ${m.id}`);
  eq((await list(D.client)).machines.length, before.size, 'B1004 inventory size');
  // B1005: an old cursor gives a full list; fresh op ids are not reused
  eq((await list(D.client, { since_revision: cursor })).machines.length, before.size, 'B1005 old cursor');
  const fresh = (await configure(D.client, idle[2], 'c3', {}, ZERO)).r.operation_id;
  assert(fresh !== op, 'B1005 operation id reused');
  // B1002: an idempotent Configure retry (machine still CONFIGURING) returns the original id
  eq((await configure(D.client, idle[2], 'c3', {}, ZERO)).r.operation_id, fresh, 'B1002 replay id');
  // B1007: a new shard's first low token is accepted
  assert(!(await create(D.client, (l0.machines.find((m) => m.state === S.SPECULATIVE)).id,
    { shard_id: 'brand-new', shard_epoch: '1', sequence_number: '1' })).err, 'B1007');
  D.client.close();
  await kill9(D);
});

// ------------------------------------------------------------------ scale

B('B1101-B1102', '10k machines: the full List passes the field-shape rules; deltas and paging stay exact', async () => {
  const X = await startSim({ flags: ['--seed-count=2000'] }, 'scale');
  const l = await list(X.client);
  eq(l.machines.length, 10000, 'pool');
  for (const m of l.machines)
    assert(m.state === S.SPECULATIVE && m.instance_type && m.zone && m.price_per_hour >= 0, `${m.id}: shape`);
  const ids = l.machines.slice(0, 50).map((m) => m.id);
  await Promise.all(ids.map((id) => create(X.client, id, ZERO)));
  const d = await list(X.client, { since_revision: l.revision });
  eq(d.machines.map((m) => m.id).sort(), ids.slice().sort(), 'delta after 50 Creates');
  const seen = new Set();
  let cursor = Buffer.from('0'), pages = 0;
  for (;;) {
    const p = await list(X.client, { max_results: 1000, since_revision: cursor });
    if (!p.machines.length) break;
    p.machines.forEach((m) => { assert(!seen.has(m.id), 'duplicate ' + m.id); seen.add(m.id); });
    cursor = p.revision;
    pages++;
  }
  eq(seen.size, 10000, `paged ${pages} pages`);
  X.client.close();
  await kill9(X);
});

// ------------------------------------------------------------------ the tests on node:test

const only = process.env.CONF_ONLY ? new RegExp(process.env.CONF_ONLY) : null; /* e.g. CONF_ONLY=B1 */
register(T.filter((t) => !only || only.test(t.id)).map((t) => [`${t.id} ${t.name}`, t.fn]), {
  timeout: 60000,
  before: async () => {
    P = await startSim({ flags: ['--catalog=' + CATALOG, '--seed-count=60', '--seed-idle=20', '--seed-configured=12'] }, 'instant');
    L = await startSim({ flags: ['--catalog=' + CATALOG, '--seed-count=8', '--seed-idle=4',
      '--create-latency=150ms', '--configure-latency=150ms', '--drain-latency=150ms', '--delete-latency=150ms'] }, 'latency');
    F = await startSim({ flags: ['--catalog=' + CATALOG, '--seed-count=6', '--seed-idle=4',
      '--create-failure=1', '--configure-failure=1'] }, 'fault');
  },
  after: async () => {
    [P, L, F].forEach((p) => p && p.client.close());
    procs.forEach((p) => { try { p.kill('SIGTERM'); } catch (e) { /* gone */ } });
    fs.rmSync(TMP, { recursive: true, force: true });
  },
});
