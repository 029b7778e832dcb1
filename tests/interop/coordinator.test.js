#!/usr/bin/env node
// coordinator.test.js: bigfleet-coordinator's gRPC surface with @grpc/grpc-js
// as the shards and the admin tool, against three real replicas on a real
// etcd (started here on loopback with a throwaway data dir): one leader,
// followers answering FAILED_PRECONDITION "coordinator: not leader", the
// admin and read RPCs, registration on first report, AssignDomain delivered
// as an instruction until acked, a Tier-1 move end to end (selector to the
// donor, the echoed ids to the recipient), the quota ledger, and then the
// leader killed with SIGKILL: a new leader with a strictly higher term, the
// durable state (shards, domains, clusters, quotas) intact, instructions
// re-asserted under the new term with higher sequence numbers; and a
// leader paused (SIGSTOP) past its lease: once resumed (SIGCONT) the deposed
// "zombie" answers a ReportShard that waited in its socket "not leader",
// never with its old term.
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const http = require('http');
const { spawn } = require('child_process');
const assert = require('assert');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const { freePort } = require('./ports');
const { register } = require('./register');

const BIN = process.env.BIN || path.resolve(__dirname, '../../build/bin');
const PROTO_DIR = process.env.PROTO_DIR || path.resolve(__dirname, '../../proto');
const def = protoLoader.loadSync(['bigfleet/v1alpha1/coordinator.proto'],
  { includeDirs: [PROTO_DIR], keepCase: true, longs: String, enums: String, defaults: true });
const pkg = grpc.loadPackageDefinition(def).bigfleet.v1alpha1;

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'bf-coord-'));
const procs = [];
let etcdPort;
const replicas = []; // {id, port, http, proc, client}

process.on('exit', () => {
  for (const p of procs) { try { p.kill('SIGKILL'); } catch (e) { /* gone */ } }
  fs.rmSync(tmp, { recursive: true, force: true });
});

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function waitFor(fn, ms, what) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}
function httpGet(port, p) {
  return new Promise((resolve, reject) => {
    http.get({ host: '127.0.0.1', port, path: p, agent: false }, (res) => {
      let body = '';
      res.on('data', (d) => { body += d; });
      res.on('end', () => resolve({ status: res.statusCode, body }));
    }).on('error', reject);
  });
}
function metric(body, name) {
  const m = new RegExp(`^${name.replace(/[{}"=]/g, (c) => '\\' + c)} (\\S+)$`, 'm').exec(body);
  return m ? Number(m[1]) : NaN;
}
function call(client, method, req) {
  return new Promise((resolve) => {
    client[method](req, { deadline: Date.now() + 5000 }, (err, resp) => resolve({ err, resp }));
  });
}

async function startEtcd() {
  const [cp, pp] = [await freePort(), await freePort()];
  etcdPort = cp;
  const p = spawn('etcd', ['--name', 'bf', '--data-dir', path.join(tmp, 'etcd'),
    '--listen-client-urls', `http://127.0.0.1:${cp}`, '--advertise-client-urls', `http://127.0.0.1:${cp}`,
    '--listen-peer-urls', `http://127.0.0.1:${pp}`, '--initial-advertise-peer-urls', `http://127.0.0.1:${pp}`,
    '--initial-cluster', `bf=http://127.0.0.1:${pp}`, '--log-level', 'error'],
  { stdio: ['ignore', 'ignore', fs.openSync(path.join(tmp, 'etcd.log'), 'w')] });
  procs.push(p);
}

async function startReplica(id) {
  const [port, hport] = [await freePort(), await freePort()];
  const log = fs.openSync(path.join(tmp, `${id}.log`), 'w');
  const proc = spawn(path.join(BIN, 'bigfleet-coordinator'), ['--id', id,
    '--listen', `127.0.0.1:${port}`, '--metrics-addr', `127.0.0.1:${hport}`,
    '--etcd-endpoints', `127.0.0.1:${etcdPort}`, '--etcd-prefix', '/t/', '--lease-ttl', '2',
    '--rebalance-interval', '200ms'], { stdio: ['ignore', 'ignore', log] });
  procs.push(proc);
  const client = new pkg.Coordinator(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  const r = { id, port, http: hport, proc, client };
  replicas.push(r);
  return r;
}

function killed(r, sig) {
  const gone = new Promise((res) => r.proc.once('exit', res));
  r.proc.kill(sig);
  return gone;
}

async function leader() {
  return waitFor(async () => {
    for (const r of replicas) {
      if (r.paused || r.proc.exitCode !== null || r.proc.signalCode !== null) continue;
      const h = await httpGet(r.http, '/readyz').catch(() => null);
      if (h && h.status === 200) return r;
    }
    return null;
  }, 15000, 'a leader');
}

const freeRow = (type, idle, spec, bound = 0) => ({ instance_type: type, zone: 'zone-a', idle, speculative: spec, bound });
function report(shard, cycle, { free = [], shortfalls = [], acks = [] } = {}) {
  return { shard_id: shard, cycle: String(cycle), shard_epoch: '1', shard_address: `${shard}:1`,
    summary: { total_machines: 10, free_machines: 5, free_counts: free },
    shortfalls, instruction_acks: acks };
}
const gpuShortfall = (age) => ({
  requirements: [{ key: 'node.kubernetes.io/instance-type', operator: 'OPERATOR_IN', values: ['gpu8'] }],
  deficit: { resources: { 'nvidia.com/gpu': '2' } }, priority: 1000, age_cycles: age,
  interruption_penalty_bucket: 'PENALTY_BUCKET_4096', topology_constrained: false });

let L1; let term1; let seqMax = 0;
const cycles = { s1: 1, s2: 1 };
async function rep(shard, opts) {
  const l = await leader();
  const r = await call(l.client, 'ReportShard', report(shard, cycles[shard]++, opts));
  assert.ifError(r.err);
  for (const i of r.resp.instructions) seqMax = Math.max(seqMax, Number(i.sequence_number));
  return r.resp;
}

register([
  ['etcd and three replicas elect exactly one leader; /readyz says who', async () => {
    await startEtcd();
    for (const id of ['c1', 'c2', 'c3']) await startReplica(id);
    L1 = await leader();
    await sleep(1500);
    let leaders = 0;
    for (const r of replicas) leaders += (await httpGet(r.http, '/readyz')).status === 200;
    assert.strictEqual(leaders, 1);
    const m = (await httpGet(L1.http, '/metrics')).body;
    assert.strictEqual(metric(m, 'bigfleet_coordinator_leader'), 1);
    term1 = metric(m, 'bigfleet_coordinator_term');
    assert.ok(term1 > 0);
  }],
  ['followers answer every RPC FAILED_PRECONDITION "coordinator: not leader"', async () => {
    for (const r of replicas.filter((x) => x !== L1)) {
      for (const [m, q] of [['ReportShard', report('s9', 1)], ['ListShards', {}], ['AssignDomain',
        { topology_key: 'k', topology_value: 'v', shard_id: 's1' }], ['ListShardReports', {}]]) {
        const { err } = await call(r.client, m, q);
        assert.ok(err, m);
        assert.strictEqual(err.code, grpc.status.FAILED_PRECONDITION);
        assert.strictEqual(err.details, 'coordinator: not leader');
      }
    }
  }],
  ['JoinRaftCluster and SnapshotSave are UNIMPLEMENTED and point to etcd', async () => {
    const { err } = await call(L1.client, 'JoinRaftCluster', { node_id: 'x', raft_address: 'y' });
    assert.strictEqual(err.code, grpc.status.UNIMPLEMENTED);
    assert.match(err.details, /etcd/);
    const s = L1.client.SnapshotSave({});
    const e2 = await new Promise((res) => { s.on('error', res); s.on('data', () => {}); });
    assert.strictEqual(e2.code, grpc.status.UNIMPLEMENTED);
    assert.match(e2.details, /etcdctl snapshot save/);
  }],
  ['ReportShard registers a shard on first sight; an empty shard_id is INVALID_ARGUMENT', async () => {
    const { err } = await call(L1.client, 'ReportShard', report('', 1));
    assert.strictEqual(err.code, grpc.status.INVALID_ARGUMENT);
    const a = await rep('s1', { free: [freeRow('gpu8', 0, 3)] });
    assert.strictEqual(a.acknowledged, true);
    assert.strictEqual(Number(a.coordinator_term), term1);
    await rep('s2', { free: [freeRow('gpu8', 5, 7)] });
    const { resp } = await call(L1.client, 'ListShards', {});
    assert.deepStrictEqual(resp.shards.map((s) => s.shard_id).sort(), ['s1', 's2']);
    assert.strictEqual(resp.shards.find((s) => s.shard_id === 's1').address, 's1:1');
    // the ledger starts from the Speculative slots reported; it is written
    // to etcd after the reply (a fenced Txn), so it may show a moment later
    const per = await waitFor(async () => {
      const q = await call(L1.client, 'ListQuotas', {});
      const p = q.resp && q.resp.allocations[0] && q.resp.allocations[0].per_shard;
      return p && p.s1 !== undefined && p.s2 !== undefined ? p : null;
    }, 5000, 'both shards in the quota ledger');
    assert.strictEqual(per.s1, 3);
    assert.strictEqual(per.s2, 7);
  }],
  ['AssignDomain is committed, refused for another shard or an unknown one, and delivered until acked', async () => {
    let r = await call(L1.client, 'AssignDomain', { topology_key: 'topology.kubernetes.io/zone', topology_value: 'zone-a', shard_id: 's1' });
    assert.ifError(r.err);
    r = await call(L1.client, 'AssignDomain', { topology_key: 'topology.kubernetes.io/zone', topology_value: 'zone-a', shard_id: 's2' });
    assert.strictEqual(r.err.code, grpc.status.ALREADY_EXISTS);
    r = await call(L1.client, 'AssignDomain', { topology_key: 'k', topology_value: 'v', shard_id: 'nope' });
    assert.strictEqual(r.err.code, grpc.status.NOT_FOUND);
    r = await call(L1.client, 'AssignCluster', { cluster_id: 'openb-0', shard_id: 's2' });
    assert.ifError(r.err);
    let a = await rep('s1');
    const ins = a.instructions.filter((i) => i.assign_domain);
    assert.strictEqual(ins.length, 1);
    assert.strictEqual(ins[0].assign_domain.topology_value, 'zone-a');
    assert.strictEqual(Number(ins[0].coordinator_term), term1);
    a = await rep('s1'); // redelivered until acked
    assert.strictEqual(a.instructions.filter((i) => i.assign_domain).length, 1);
    a = await rep('s1', { acks: [{ instruction_id: ins[0].instruction_id, outcome: 'OUTCOME_ACCEPTED' }] });
    assert.strictEqual(a.instructions.length, 0);
    const d = await call(L1.client, 'ListDomainAssignments', {});
    assert.deepStrictEqual(d.resp.assignments.map((x) => [x.topology_value, x.shard_id]), [['zone-a', 's1']]);
  }],
  ['Tier 1: an aged shortfall pulls Idle machines: selector to the donor, its ids to the recipient', async () => {
    // s1 short of gpu8 for 7 cycles; s2 has 5 Idle gpu8
    let a;
    const donor = await waitFor(async () => {
      await rep('s1', { shortfalls: [gpuShortfall(7)] });
      a = await rep('s2', { free: [freeRow('gpu8', 5, 7)] });
      return a.instructions.find((i) => i.transfer_ownership);
    }, 10000, 'the transfer to the donor');
    const t = donor.transfer_ownership;
    assert.strictEqual(t.from_shard_id, 's2');
    assert.strictEqual(t.to_shard_id, 's1');
    assert.strictEqual(t.instance_type, 'gpu8');
    assert.ok(t.count >= 1 && t.machine_ids.length === 0);
    await rep('s2', { free: [freeRow('gpu8', 5, 7)], acks: [{ instruction_id: donor.instruction_id, outcome: 'OUTCOME_ACCEPTED', machine_ids: ['m-1'] }] });
    a = await rep('s1', { shortfalls: [gpuShortfall(8)] });
    const recip = a.instructions.find((i) => i.transfer_ownership);
    assert.ok(recip, 'the recipient gets the named machine');
    assert.deepStrictEqual(recip.transfer_ownership.machine_ids, ['m-1']);
    assert.ok(Number(recip.sequence_number) > Number(donor.sequence_number));
    await rep('s1', { acks: [{ instruction_id: recip.instruction_id, outcome: 'OUTCOME_ACCEPTED' }] });
    const m = (await httpGet(L1.http, '/metrics')).body;
    assert.strictEqual(metric(m, 'bigfleet_coordinator_moves_completed_total{tier="1"}'), 1);
    assert.strictEqual(metric(m, 'bigfleet_coordinator_flow_machines_total{from="s2",to="s1",tier="1"}'), 1);
    const lr = await call(L1.client, 'ListShardReports', { shard_id: 's1' });
    assert.strictEqual(lr.resp.reports.length, 1);
    assert.strictEqual(lr.resp.reports[0].shard_id, 's1');
  }],
  ['SIGKILL of the leader: a new leader with a higher term, the durable state intact', async () => {
    const seqBefore = seqMax;
    const t0 = Date.now();
    await killed(L1, 'SIGKILL');
    const L2 = await leader();
    assert.notStrictEqual(L2, L1);
    const failover = Date.now() - t0;
    const m = (await httpGet(L2.http, '/metrics')).body;
    const term2 = metric(m, 'bigfleet_coordinator_term');
    assert.ok(term2 > term1, `term ${term2} > ${term1}`);
    const s = await call(L2.client, 'ListShards', {});
    assert.deepStrictEqual(s.resp.shards.map((x) => x.shard_id).sort(), ['s1', 's2']);
    const d = await call(L2.client, 'ListDomainAssignments', {});
    assert.strictEqual(d.resp.assignments.length, 1);
    const c = await call(L2.client, 'ListClusterAssignments', {});
    assert.deepStrictEqual(c.resp.assignments.map((x) => [x.cluster_id, x.shard_id]), [['openb-0', 's2']]);
    const q = await call(L2.client, 'ListQuotas', {});
    assert.strictEqual(q.resp.allocations[0].per_shard.s1, 3);
    // the domain is re-asserted under the new term, with a higher sequence number
    const a = await rep('s1');
    assert.strictEqual(Number(a.coordinator_term), term2);
    const ins = a.instructions.find((i) => i.assign_domain);
    assert.ok(ins, 'AssignDomain re-asserted');
    assert.strictEqual(Number(ins.coordinator_term), term2);
    assert.ok(Number(ins.sequence_number) > seqBefore, `${ins.sequence_number} > ${seqBefore}`);
    // soft state is leader-local: the new leader knows only what was reported since
    const lr = await call(L2.client, 'ListShardReports', {});
    assert.deepStrictEqual(lr.resp.reports.map((x) => x.shard_id), ['s1']);
    console.log(`     (failover ${failover} ms, term ${term1} -> ${term2})`);
  }],
  ['SIGTERM of a leader revokes its lease: the next one is elected at once', async () => {
    const L2 = await leader();
    const t0 = Date.now();
    await killed(L2, 'SIGTERM');
    const L3 = await leader();
    assert.notStrictEqual(L3, L2);
    assert.ok(Date.now() - t0 < 2000, `took ${Date.now() - t0} ms`);
  }],
  ['a leader paused past its lease answers "not leader" once resumed, never with its old term', async () => {
    await startReplica('c4');
    const Z = await leader();
    const zm = (await httpGet(Z.http, '/metrics')).body;
    const zt = metric(zm, 'bigfleet_coordinator_term');
    assert.ifError((await call(Z.client, 'ListShards', {})).err); // the connection is up
    // the zombie holds an instruction: s1's domain, re-asserted when it was
    // elected and never acked (delivered once here, then the shard goes quiet)
    const held = await call(Z.client, 'ReportShard', report('s1', cycles.s1++));
    assert.ifError(held.err);
    const heldIns = held.resp.instructions.find((i) => i.assign_domain);
    assert.ok(heldIns, 'the zombie holds the re-asserted AssignDomain');
    assert.strictEqual(Number(heldIns.coordinator_term), zt);
    const zp = metric((await httpGet(Z.http, '/metrics')).body, 'bigfleet_coordinator_pending_instructions{shard="s1"}');
    assert.ok(zp >= 1, `pending for s1 ${zp}`);
    const zr = metric((await httpGet(Z.http, '/metrics')).body, 'bigfleet_coordinator_reports_total');
    Z.paused = true;
    Z.proc.kill('SIGSTOP');
    try {
      const N = await leader();
      assert.notStrictEqual(N, Z);
      const nt = metric((await httpGet(N.http, '/metrics')).body, 'bigfleet_coordinator_term');
      assert.ok(nt > zt, `term ${nt} > ${zt}`);
      // a shard's report reaches the zombie while it is stopped; it is
      // handled when it runs again, possibly before its overdue tick
      const pending = call(Z.client, 'ReportShard', report('s1', cycles.s1++));
      await sleep(300);
      Z.proc.kill('SIGCONT');
      Z.paused = false;
      const r = await pending;
      assert.ok(r.err, `the zombie answered with term ${r.resp && r.resp.coordinator_term}`);
      assert.strictEqual(r.err.code, grpc.status.FAILED_PRECONDITION);
      assert.match(r.err.details, /coordinator: not leader/);
      const m = await waitFor(async () => {
        const b = (await httpGet(Z.http, '/metrics')).body;
        return metric(b, 'bigfleet_coordinator_stepdowns_total') >= 1 ? b : null;
      }, 5000, 'the zombie to step down');
      assert.strictEqual(metric(m, 'bigfleet_coordinator_leader'), 0);
      // what it held is dropped with its soft state, and it answered no
      // report since the pause: nothing it held was delivered again
      assert.ok(metric(m, 'bigfleet_coordinator_instructions_dropped_on_stepdown_total') >= zp,
        `dropped ${metric(m, 'bigfleet_coordinator_instructions_dropped_on_stepdown_total')} < held ${zp}`);
      assert.strictEqual(metric(m, 'bigfleet_coordinator_reports_total'), zr);
      // the shard hears the domain again only from the new leader, under its term
      const a = await rep('s1');
      assert.strictEqual(Number(a.coordinator_term), nt);
      for (const i of a.instructions) {
        assert.strictEqual(Number(i.coordinator_term), nt);
        assert.notStrictEqual(i.instruction_id, heldIns.instruction_id);
      }
      assert.ok(a.instructions.find((i) => i.assign_domain), 'AssignDomain re-asserted by the new leader');
      console.log(`     (zombie term ${zt} held ${zp} instruction(s), dropped on step-down; new leader term ${nt})`);
    } finally {
      if (Z.paused) Z.proc.kill('SIGCONT');
    }
  }],
], {
  // what the tests started (etcd, the replicas) is stopped here, so node ends
  // on its own (node 18 has no --test-force-exit); the 'exit' handler above
  // still covers a crash
  after: async () => {
    for (const r of replicas) if (r.client) r.client.close();
    for (const p of procs) { try { p.kill('SIGKILL'); } catch (e) { /* gone */ } }
  },
});
