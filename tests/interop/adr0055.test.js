#!/usr/bin/env node
// adr0055.test.js: ADR-0055 cross-shard rebalancing end to end. A scripted
// coordinator (@grpc/grpc-js serving Coordinator/ReportShard, redelivering
// every instruction until it is acked, as the real one does) drives two real
// appliances (bigfleet-shardd) that share ONE simulated provider
// (bigfleet-simprovider): the domain partition, transfers out and in with the
// donor resolving a selector, a refused transfer of a Configured machine, a
// stale term, a cross-shard drain followed by the transfer, a reservation
// that expires, a speculative reassignment, redelivery after kill -9 of the
// session and after a full restart, and the invariant that no machine is
// ever in both shards' inventories (checked after every step and across
// restarts). What the shards hold is read with the real bigfleet-inspect.
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawn, execFileSync } = require('child_process');
const L = require('./session_lib');
const { register } = require('./register');
const { assert, grpc } = L;

const OUT = { ACCEPTED: 1, REJECTED_STALE: 2, REJECTED_INVALID: 3, FAILED: 4 };
const TERM = 7;
const ZONE = 'topology.kubernetes.io/zone';
const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'bf-adr0055-'));
const CATALOG = path.join(TMP, 'catalog.csv');
fs.writeFileSync(CATALOG, ['type,cpu_milli,memory_mib,gpu,model,capacity_type,price_per_hour,'
  + 'interruption_probability', 'std-4,4000,16384,0,,on-demand,0.20,0'].join('\n') + '\n');
// per zone (slot j -> zone j mod 2, id std-4-<zone>-<j/2>): 2 Configured
// (ids 0, 1), 3 Idle (2, 3, 4), 2 Speculative (5, 6)
const PER_ZONE = 7;

// ------------------------------------------------------------ the coordinator

class Coordinator {
  constructor() {
    this.pending = new Map(); // shard -> Map(id -> instruction), redelivered until acked
    this.acks = new Map();    // `${shard}/${id}` -> [InstructAck...]
    this.reports = new Map(); // shard -> count
    this.waiters = [];
    this.term = TERM;
  }

  async start() {
    this.server = new grpc.Server();
    this.server.addService(L.proto.Coordinator.service, {
      ReportShard: (call, cb) => {
        const r = call.request;
        this.reports.set(r.shard_id, (this.reports.get(r.shard_id) || 0) + 1);
        const q = this.pending.get(r.shard_id) || new Map();
        for (const a of r.instruction_acks) {
          const k = `${r.shard_id}/${a.instruction_id}`;
          if (!this.acks.has(k)) this.acks.set(k, []);
          this.acks.get(k).push(a);
          q.delete(a.instruction_id);
        }
        for (const w of this.waiters.splice(0)) w();
        cb(null, { coordinator_term: String(this.term), acknowledged: true,
          instructions: [...q.values()] });
      },
    });
    this.port = await new Promise((res, rej) => this.server.bindAsync('127.0.0.1:0',
      grpc.ServerCredentials.createInsecure(), (e, p) => (e ? rej(e) : res(p))));
    return this.port;
  }

  stop() { return new Promise((r) => this.server.tryShutdown(() => r())); }

  send(shard, id, payload, term = this.term) {
    if (!this.pending.has(shard)) this.pending.set(shard, new Map());
    this.pending.get(shard).set(id, { instruction_id: id, coordinator_term: String(term),
      sequence_number: '1', ...payload });
  }

  // the n-th ack (1-based) of an instruction
  async ack(shard, id, n = 1, ms = 20000) {
    const k = `${shard}/${id}`;
    const end = Date.now() + ms;
    while (!(this.acks.get(k) || [])[n - 1]) {
      if (Date.now() > end) throw new Error(`no ack #${n} of ${id} from ${shard}`);
      await new Promise((r) => { const t = setTimeout(r, 100); this.waiters.push(() => { clearTimeout(t); r(); }); });
    }
    return this.acks.get(k)[n - 1];
  }

  async exec(shard, id, payload, term) {
    const before = (this.acks.get(`${shard}/${id}`) || []).length;
    this.send(shard, id, payload, term);
    return this.ack(shard, id, before + 1);
  }
}

// ------------------------------------------------------------ processes

let SIM;
function startSim() {
  return new Promise((resolve, reject) => {
    const p = spawn(path.join(L.BIN, 'bigfleet-simprovider'), ['--addr=127.0.0.1:0',
      '--log-level=warn', `--catalog=${CATALOG}`, '--zones=2', '--racks-per-zone=2',
      '--seed-configured=4', '--seed-idle=6', '--seed-speculative=4', '--seed-clusters=1',
      '--seed-priority=1000'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.on('data', (d) => {
      out += d;
      const m = /READY grpc=(\d+)/.exec(out);
      if (m && !p.port) { p.port = +m[1]; resolve(p); }
    });
    p.stderr.on('data', () => {});
    p.on('exit', (code) => { if (!p.port) reject(new Error(`simprovider exited ${code}`)); });
  });
}

async function startAppliance(a) {
  a.port = a.port || await L.freePort();
  a.metricsPort = a.metricsPort || await L.freePort();
  const args = [`--id=${a.id}`, `--listen=127.0.0.1:${a.port}`,
    `--metrics-addr=127.0.0.1:${a.metricsPort}`, `--data-dir=${a.dir}/data`,
    `--provider-addr=127.0.0.1:${SIM.port}`, `--coordinator-addr=127.0.0.1:${a.cport}`,
    '--coordinator-heartbeat-interval=200ms', '--cycle-interval=300ms', '--log-level=info',
    // the cycle's and the reconciler's LMDB use fits their allow-lists
    '--seccomp',
    '--max-machines=4096', '--max-needs=1024', '--max-clusters=16',
    `--audit-log=${a.dir}/audit.jsonl`, '--transfer-reservation-ttl=2s',
    // shards sharing one provider: only domains and transfers, from the start
    '--ownership=partitioned'];
  const log = fs.openSync(path.join(a.dir, 'shardd.log'), 'a');
  a.proc = spawn(path.join(L.BIN, 'bigfleet-shardd'), args, { stdio: ['ignore', log, log] });
  a.exited = null;
  a.proc.on('exit', (code, sig) => { a.exited = { code, sig }; });
  await L.waitFor(async () => {
    if (a.exited) throw new Error(`${a.id} exited: ${JSON.stringify(a.exited)}\n${tail(a)}`);
    return (await L.httpGet(a.metricsPort, '/readyz')).status === 200;
  }, 20000, `${a.id} ready`);
  return a;
}

async function stopAppliance(a) {
  if (a.exited) return a.exited;
  a.proc.kill('SIGTERM');
  await L.waitFor(() => a.exited, 10000, `${a.id} exit`).catch(() => a.proc.kill('SIGKILL'));
  return a.exited;
}

function tail(a, n = 30) {
  try { return fs.readFileSync(path.join(a.dir, 'shardd.log'), 'utf8').split('\n').slice(-n).join('\n'); } catch (e) { return ''; }
}

function inspect(a, ...args) {
  return JSON.parse(execFileSync(path.join(L.BIN, 'bigfleet-inspect'),
    ['--id', a.id, '--json', ...args], { encoding: 'utf8', maxBuffer: 64 << 20 }));
}
// id -> state of every machine in a shard's inventory
function inventory(a) {
  const out = {};
  for (const m of inspect(a, 'machines', '--limit', '0').machines) out[m.id] = m.state;
  return out;
}
const ownership = (a) => inspect(a, 'ownership').ownership;
function audit(a) {
  try {
    return fs.readFileSync(path.join(a.dir, 'audit.jsonl'), 'utf8').split('\n').filter(Boolean)
      .map((l) => JSON.parse(l));
  } catch (e) { return []; }
}
async function metric(a, name) {
  const body = (await L.httpGet(a.metricsPort, '/metrics')).body;
  const m = new RegExp(`^${name} (\\d+)$`, 'm').exec(body);
  return m ? Number(m[1]) : NaN;
}

// The invariant: no machine in two inventories, and (both zones assigned)
// every machine of the pool in exactly one.
function assertPartition(A, B, total) {
  const a = inventory(A), b = inventory(B);
  const both = Object.keys(a).filter((id) => id in b);
  assert.deepStrictEqual(both, [], `machines in both shards: ${both}`);
  if (total !== undefined)
    assert.strictEqual(Object.keys(a).length + Object.keys(b).length, total,
      `every machine owned once: A ${Object.keys(a).length} + B ${Object.keys(b).length}`);
  return { a, b };
}

async function until(fn, what, ms = 20000) {
  return L.waitFor(async () => { try { return await fn(); } catch (e) { return false; } }, ms, what);
}

// ------------------------------------------------------------ the tests

// the coordinator, the two shards (A: zone-a, B: zone-b), what the steps hand on
let C, A, B, mk, xferIds, drained;
const TOTAL = 2 * PER_ZONE;
const tests = [
  ['a partitioned shard owns nothing before its first domain; AssignDomain partitions the shared pool by zone', async () => {
    assert.strictEqual((await C.ack(A.id, 'assign-a')).outcome, OUT.ACCEPTED);
    assert.strictEqual((await C.ack(B.id, 'assign-b')).outcome, OUT.ACCEPTED);
    await until(() => Object.keys(inventory(A)).length === PER_ZONE &&
      Object.keys(inventory(B)).length === PER_ZONE, 'each shard holds its zone');
    const { a, b } = assertPartition(A, B, TOTAL);
    assert.ok(Object.keys(a).every((id) => id.includes('-zone-a-')), JSON.stringify(a));
    assert.ok(Object.keys(b).every((id) => id.includes('-zone-b-')), JSON.stringify(b));
    await until(async () => (await metric(A, 'bigfleet_shard_owned_machines')) === PER_ZONE, 'owned gauge');
    const o = ownership(A);
    assert.strictEqual(o.mode, 'partitioned');
    assert.deepStrictEqual(o.assigned_domains, [`${ZONE}=zone-a`]);
    // a third (partitioned) shard the coordinator has assigned nothing adopts nothing
    const N = await startAppliance(mk('n'));
    try {
      await until(async () => (await metric(N, 'bigfleet_shard_reconcile_machines_not_owned_total')) >= TOTAL, 'N listed the pool');
      assert.deepStrictEqual(inventory(N), {});
      assert.strictEqual(ownership(N).mode, 'partitioned');
    } finally {
      await stopAppliance(N);
    }
    assert.strictEqual(o.owned_machines, PER_ZONE);
    assert.ok(o.not_owned_listed_total >= PER_ZONE, 'the other zone was listed and not adopted');
  }],
  ['TransferOwnership: the donor resolves a selector (Idle, lowest penalty, then price and id) and echoes the ids; the recipient adopts them', async () => {
    const sel = { count: 2, instance_type: 'std-4', zone: 'zone-a', from_shard_id: A.id, to_shard_id: B.id };
    const ack = await C.exec(A.id, 'xfer-1', { transfer_ownership: sel });
    assert.strictEqual(ack.outcome, OUT.ACCEPTED, ack.reason);
    xferIds = ack.machine_ids;
    assert.deepStrictEqual(xferIds, ['std-4-zone-a-2', 'std-4-zone-a-3']);
    // the donor let them go at once: never in both inventories
    await until(() => xferIds.every((id) => !(id in inventory(A))), 'donor released them');
    assertPartition(A, B, TOTAL - 2);
    const ack2 = await C.exec(B.id, 'xfer-1-in', { transfer_ownership: { machine_ids: xferIds,
      from_shard_id: A.id, to_shard_id: B.id } });
    assert.strictEqual(ack2.outcome, OUT.ACCEPTED, ack2.reason);
    assert.deepStrictEqual(ack2.machine_ids, xferIds);
    await until(() => xferIds.every((id) => inventory(B)[id] === 'Idle'), 'recipient holds them Idle');
    assertPartition(A, B, TOTAL);
    assert.strictEqual(ownership(A).transfers_out, 2);
    assert.strictEqual(ownership(B).transfers_in, 2);
    await until(() => audit(A).filter((r) => r.msg === 'ownership' && r.event === 'transfer_out').length === 2, 'donor audit');
    await until(() => audit(B).filter((r) => r.msg === 'ownership' && r.event === 'transfer_in').length === 2, 'recipient audit');
    const rec = audit(A).find((r) => r.event === 'transfer_out');
    assert.strictEqual(rec.instruction_id, 'xfer-1');
    assert.strictEqual(rec.from_shard, A.id);
    assert.strictEqual(rec.to_shard, B.id);
  }],
  ['a transfer of a Configured machine fails with a reason and touches nothing', async () => {
    const ack = await C.exec(A.id, 'xfer-bad', { transfer_ownership: { machine_ids: ['std-4-zone-a-4', 'std-4-zone-a-0'],
      from_shard_id: A.id, to_shard_id: B.id } });
    assert.strictEqual(ack.outcome, OUT.FAILED);
    assert.match(ack.reason, /std-4-zone-a-0 is Configured/);
    assert.deepStrictEqual(ack.machine_ids, []);
    const a = inventory(A);
    assert.strictEqual(a['std-4-zone-a-0'], 'Configured');
    assert.strictEqual(a['std-4-zone-a-4'], 'Idle', 'all or nothing: the Idle one stays too');
    assert.strictEqual(ownership(A).transfers_out, 2);
  }],
  ['an instruction from a stale coordinator term is rejected', async () => {
    const ack = await C.exec(A.id, 'old-term', { transfer_ownership: { machine_ids: ['std-4-zone-a-4'],
      from_shard_id: A.id, to_shard_id: B.id } }, 3);
    assert.strictEqual(ack.outcome, OUT.REJECTED_STALE);
    assert.match(ack.reason, /stale coordinator term 3 < 7/);
    assert.strictEqual(inventory(A)['std-4-zone-a-4'], 'Idle');
  }],
  ['CrossShardDrain drains the best Phase 2 victim as a Preempt and reserves it; the transfer that follows moves it', async () => {
    const ack = await C.exec(A.id, 'drain-1', { cross_shard_drain: { count: 1, instance_type: 'std-4',
      zone: 'zone-a', preemptor_priority: 1000000 } });
    assert.strictEqual(ack.outcome, OUT.ACCEPTED, ack.reason);
    assert.strictEqual(ack.machine_ids.length, 1);
    drained = ack.machine_ids[0];
    await until(() => inventory(A)[drained] === 'Idle', 'drained to Idle');
    const o = ownership(A);
    assert.strictEqual(o.reserved, 1);
    assert.strictEqual(o.reservations[0].machine, drained);
    assert.strictEqual(o.reservations[0].preemptor_priority, 1000000);
    const pre = await until(() => audit(A).find((r) => r.msg === 'action' && r.kind === 'Preempt'
      && r.machine === drained), 'Preempt audited');
    assert.strictEqual(pre.reason, 'cross_shard.drain');
    assert.strictEqual(pre.grace_seconds, 10, 'DrainGrace(1000000, 1000)');
    assert.strictEqual(pre.outcome, 'success');
    assert.ok(audit(A).find((r) => r.msg === 'ownership' && r.event === 'reserved_for_transfer' && r.machine === drained));
    // a transfer names it: the donor first, then the recipient
    const t1 = await C.exec(A.id, 'drain-1-xfer', { transfer_ownership: { machine_ids: [drained], from_shard_id: A.id, to_shard_id: B.id } });
    assert.strictEqual(t1.outcome, OUT.ACCEPTED, t1.reason);
    const t2 = await C.exec(B.id, 'drain-1-xfer', { transfer_ownership: { machine_ids: [drained], from_shard_id: A.id, to_shard_id: B.id } });
    assert.strictEqual(t2.outcome, OUT.ACCEPTED, t2.reason);
    await until(() => inventory(B)[drained] === 'Idle' && !(drained in inventory(A)), 'moved to B');
    assert.strictEqual(ownership(A).reserved, 0);
    assertPartition(A, B, TOTAL);
  }],
  ['a reservation with no transfer after it expires at its TTL and the machine returns to the donor\'s pool', async () => {
    const ack = await C.exec(A.id, 'drain-2', { cross_shard_drain: { machine_ids: ['std-4-zone-a-1'], preemptor_priority: 1000000 } });
    assert.strictEqual(ack.outcome, OUT.ACCEPTED, ack.reason);
    assert.deepStrictEqual(ack.machine_ids, ['std-4-zone-a-1']);
    await until(() => ownership(A).reserved === 1 && inventory(A)['std-4-zone-a-1'] === 'Idle', 'reserved and Idle');
    assert.strictEqual(ownership(A).held, 1, 'held out of the engine while reserved');
    // grace 10 s + TTL 2 s
    await until(() => ownership(A).reserved === 0, 'reservation expired', 30000);
    const o = ownership(A);
    assert.strictEqual(o.reservations_expired_total, 1);
    assert.strictEqual(o.held, 0);
    assert.strictEqual(inventory(A)['std-4-zone-a-1'], 'Idle');
    await until(() => audit(A).find((r) => r.event === 'reservation_expired' && r.machine === 'std-4-zone-a-1'), 'expiry audited');
    // it is an ordinary Idle machine of A again: a selector may give it away
    const t = await C.exec(A.id, 'xfer-after-ttl', { transfer_ownership: { machine_ids: ['std-4-zone-a-1'], from_shard_id: A.id, to_shard_id: B.id } });
    assert.strictEqual(t.outcome, OUT.ACCEPTED, t.reason);
    const t2 = await C.exec(B.id, 'xfer-after-ttl', { transfer_ownership: { machine_ids: ['std-4-zone-a-1'], from_shard_id: A.id, to_shard_id: B.id } });
    assert.strictEqual(t2.outcome, OUT.ACCEPTED, t2.reason);
    await until(() => 'std-4-zone-a-1' in inventory(B), 'moved to B');
    assertPartition(A, B, TOTAL);
  }],
  ['ReassignSpeculative moves a Speculative slot the donor picks', async () => {
    const ack = await C.exec(A.id, 'spec-1', { reassign_speculative: { count: 1, zone: 'zone-a', from_shard_id: A.id, to_shard_id: B.id } });
    assert.strictEqual(ack.outcome, OUT.ACCEPTED, ack.reason);
    assert.deepStrictEqual(ack.machine_ids, ['std-4-zone-a-5']);
    const ack2 = await C.exec(B.id, 'spec-1', { reassign_speculative: { machine_ids: ack.machine_ids, from_shard_id: A.id, to_shard_id: B.id } });
    assert.strictEqual(ack2.outcome, OUT.ACCEPTED, ack2.reason);
    await until(() => inventory(B)['std-4-zone-a-5'] === 'Speculative' && !('std-4-zone-a-5' in inventory(A)), 'slot moved');
    assertPartition(A, B, TOTAL);
  }],
  ['a redelivery after kill -9 of the session is re-acked with the same ids, never re-applied', async () => {
    const ack = await C.exec(A.id, 'xfer-redeliver', { transfer_ownership: { count: 1, zone: 'zone-a',
      from_shard_id: A.id, to_shard_id: B.id } });
    assert.strictEqual(ack.outcome, OUT.ACCEPTED, ack.reason);
    assert.deepStrictEqual(ack.machine_ids, ['std-4-zone-a-4']);
    const out0 = ownership(A).transfers_out;
    const sup = A.proc.pid;
    const sess = execFileSync('ps', ['-o', 'pid=,comm=', '--ppid', String(sup)], { encoding: 'utf8' })
      .split('\n').map((l) => l.trim().split(/\s+/)).find((p) => p[1] === 'bf-session');
    assert.ok(sess, 'session child found');
    process.kill(Number(sess[0]), 'SIGKILL');
    await until(() => {
      const now = execFileSync('ps', ['-o', 'pid=,comm=', '--ppid', String(sup)], { encoding: 'utf8' })
        .split('\n').map((l) => l.trim().split(/\s+/)).find((p) => p[1] === 'bf-session');
      return now && now[0] !== sess[0];
    }, 'session restarted');
    // Acks are at-least-once: a report of the killed session whose reply
    // timed out (a loaded machine) may reach us late and carry the first
    // ack again. Only exact copies of it may come before the re-ack.
    const n0 = (C.acks.get(`${A.id}/xfer-redeliver`) || []).length;
    C.send(A.id, 'xfer-redeliver', { transfer_ownership: { count: 1, zone: 'zone-a',
      from_shard_id: A.id, to_shard_id: B.id } });
    let again;
    for (let n = n0 + 1; !again; n++) {
      const a = await C.ack(A.id, 'xfer-redeliver', n);
      if (a.reason === 'duplicate-redelivery') again = a;
      else assert.deepStrictEqual(a, ack, 'before the re-ack, only a copy of the first ack');
    }
    assert.strictEqual(again.outcome, OUT.ACCEPTED);
    assert.strictEqual(again.reason, 'duplicate-redelivery');
    assert.deepStrictEqual(again.machine_ids, ['std-4-zone-a-4'], 'the same resolution, not a new one');
    assert.strictEqual(ownership(A).transfers_out, out0, 'nothing re-applied');
    const t2 = await C.exec(B.id, 'xfer-redeliver', { transfer_ownership: { machine_ids: again.machine_ids, from_shard_id: A.id, to_shard_id: B.id } });
    assert.strictEqual(t2.outcome, OUT.ACCEPTED, t2.reason);
    await until(() => 'std-4-zone-a-4' in inventory(B), 'moved to B');
    assertPartition(A, B, TOTAL);
  }],
  ['after a full restart of both appliances: domains, transfers and the dedup set survive (LMDB); still no machine in both', async () => {
    const a0 = inventory(A), b0 = inventory(B);
    const ownedA = ownership(A).owned_machines;
    assert.strictEqual(ownedA, Object.keys(a0).length);
    assert.strictEqual((await stopAppliance(A)).code, 0);
    assert.strictEqual((await stopAppliance(B)).code, 0);
    // the coordinator does not repeat AssignDomain: the partition comes from LMDB
    await Promise.all([startAppliance(A), startAppliance(B)]);
    await until(() => Object.keys(inventory(A)).length === Object.keys(a0).length &&
      Object.keys(inventory(B)).length === Object.keys(b0).length, 'the same inventories rebuilt');
    const { a, b } = assertPartition(A, B, TOTAL);
    assert.deepStrictEqual(Object.keys(a).sort(), Object.keys(a0).sort());
    assert.deepStrictEqual(Object.keys(b).sort(), Object.keys(b0).sort());
    const o = ownership(A);
    assert.deepStrictEqual(o.assigned_domains, [`${ZONE}=zone-a`]);
    assert.strictEqual(o.transfers_out, 6);
    await until(async () => (await metric(A, 'bigfleet_shard_owned_machines')) === Object.keys(a0).length, 'owned set');
    // redelivered after the restart: re-acked, not re-applied
    const again = await C.exec(A.id, 'xfer-1', { transfer_ownership: { count: 2, instance_type: 'std-4', zone: 'zone-a',
      from_shard_id: A.id, to_shard_id: B.id } });
    assert.strictEqual(again.reason, 'duplicate-redelivery');
    assert.deepStrictEqual(again.machine_ids, xferIds);
    assert.strictEqual(ownership(A).transfers_out, 6);
    assertPartition(A, B, TOTAL);
  }],
  ['instruction counters per kind and outcome', async () => {
    const body = (await L.httpGet(A.metricsPort, '/metrics')).body;
    assert.match(body, /bigfleet_shard_coordinator_instructions_total\{kind="transfer_ownership",outcome="accepted"\} [1-9]/);
    assert.match(body, /bigfleet_shard_coordinator_instructions_total\{kind="transfer_ownership",outcome="accepted"\} 1\n/,
      'per process: the one redelivery since the restart');
    assert.match(body, /bigfleet_shard_coordinator_instructions_total\{kind="transfer_ownership",outcome="failed"\} 0\n/);
    const bodyB = (await L.httpGet(B.metricsPort, '/metrics')).body;
    assert.match(bodyB, /bigfleet_shard_owned_machines 13\n/);
    assert.match(body, /bigfleet_shard_reserved_for_transfer_machines 0/);
    assert.match(body, /bigfleet_shard_ownership_mode\{mode="partitioned"\} 1/);
  }],
];

register(tests, {
  bail: true, /* the steps build on each other */
  before: async () => {
    SIM = await startSim();
    C = new Coordinator();
    const cport = await C.start();
    mk = (n) => ({ id: `it-adr55-${n}-${process.pid}`, dir: fs.mkdtempSync(path.join(TMP, n)), cport });
    A = mk('a');
    B = mk('b');
    // the domains are the coordinator's first words to each shard
    C.send(A.id, 'assign-a', { assign_domain: { topology_key: ZONE, topology_value: 'zone-a' } });
    C.send(B.id, 'assign-b', { assign_domain: { topology_key: ZONE, topology_value: 'zone-b' } });
    await Promise.all([startAppliance(A), startAppliance(B)]);
  },
  onFail: () => console.log(`--- ${A.id}\n${tail(A)}\n--- ${B.id}\n${tail(B)}`),
  after: async () => {
    const reports = [];
    try {
      // a sanitizer build (BIN=build/san/bin) reports into the logs
      for (const a of [A, B]) {
        const log = fs.readFileSync(path.join(a.dir, 'shardd.log'), 'utf8');
        const bad = /runtime error:|ERROR: (Address|Leak)Sanitizer/.exec(log);
        if (bad) reports.push(`sanitizer report in ${a.id}: ${log.slice(bad.index, bad.index + 2000)}`);
      }
    } finally {
      await stopAppliance(A).catch(() => {});
      await stopAppliance(B).catch(() => {});
      SIM.kill('SIGKILL');
      await C.stop();
      if (!process.env.KEEP) fs.rmSync(TMP, { recursive: true, force: true });
    }
    assert.deepStrictEqual(reports, [], 'no sanitizer report in the shards\' logs');
  },
});
