#!/usr/bin/env node
// shard_component.test.js: Go's pkg/shard component tests (shard_test.go,
// safety_test.go) re-expressed against the REAL appliance: bigfleet-shardd
// (supervisor, session, reconciler, cycle, executor) with its embedded
// simulated provider (real gRPC CapacityProvider), and @grpc/grpc-js
// operators on Shard/Session that answer BootstrapRequests and acknowledge
// ReclaimInstructions. Every scenario asserts EXACT operator-visible counts,
// counted again after the appliance has run several more cycles (so a late
// duplicate would be seen):
//   - TestShard_TrainingJob_BootstrapFromIdle: 4 Idle GPU machines, demand 4
//     -> exactly 4 BootstrapRequests (the Need's requirements, the session's
//     cluster), 4 machines Configured for the cluster;
//   - TestShard_Stockout_PartialFulfilment: 2 Idle, demand 8 -> exactly 2,
//     and the residual is a shortfall, stable cycle after cycle;
//   - TestShard_Withdrawal_ReclaimsConfigured with a cap that allows it
//     (--reclaim-cap-fraction 1): demand 4 then an empty rollup -> exactly 4
//     ReclaimInstructions (Phase 3: grace 600 s, no preemptor), all 4 Idle;
//   - TestReclaimCap_RollsOverAcrossCycles on the appliance: the default cap
//     (0.05 of 4 Configured -> 1) meters the same withdrawal to one Reclaim
//     per deciding cycle (audit log), 4 in total, counted as capped;
//   - TestShard_PriorityInversion: batch holds 4 at priority 100000, train
//     asks for 4 at 1000000 -> batch gets exactly 4 ReclaimInstructions
//     (Preempt: preemptor 1000000, grace 30 s = DrainGrace(900000 gap)),
//     train gets exactly 4 BootstrapRequests and ends with the 4 machines;
//   - TestActuationPaused_SuppressesExecution / _ReportingContinues: with
//     --actuation-paused cycles keep deciding (suppressed counted), the
//     verdicts and the shortfall keep being published, and the operator
//     gets no BootstrapRequest while nothing leaves Idle.
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const protoLoader = require('@grpc/proto-loader');
const L = require('./session_lib');
const { register } = require('./register');
const { assert } = L;

// without the simulated provider every test is reported as skipped
const SKIP = !fs.existsSync(path.join(L.BIN, 'bigfleet-simprovider')) && 'no bigfleet-simprovider';

const PROTO_DIR = process.env.PROTO_DIR || path.resolve(__dirname, '..', '..', 'proto');
const read = L.grpc.loadPackageDefinition(protoLoader.loadSync(['bigfleet/v1alpha1/shardread.proto'], {
  includeDirs: [PROTO_DIR], keepCase: true, longs: String, enums: String, bytes: Buffer,
  defaults: true, oneofs: true,
})).bigfleet.v1alpha1;

const IT = 'node.kubernetes.io/instance-type';
const GPU_TYPE = 'a3-highgpu-8g'; // the simulated provider's built-in 8-GPU type
const CONFIGURED = 5, IDLE = 3;   // MachineState

// Go's gpuNeed(priority, machines): the 8-GPU profile of the paper examples.
const gpuNeed = (priority, machines) => L.need({
  priority, ipb: 16, rpb: 27,
  requirements: [{ key: IT, operator: 1, values: [GPU_TYPE] }],
  aggregate: { 'nvidia.com/gpu': String(8 * machines) },
  min_unit: { 'nvidia.com/gpu': '8' },
});

// A grpc-js operator that records what the shard sends and answers it the
// way a BigFleet operator does.
class Op extends L.Operator {
  constructor(addr, cluster) {
    super(addr);
    this.cluster = cluster;
    this.boots = [];
    this.reclaims = [];
    this.nodeState = new Map(); // machine id -> last NodeStateUpdate state
    this.call.on('data', (m) => {
      if (m.payload === 'bootstrap_request') {
        this.boots.push(m.bootstrap_request);
        this.send({ bootstrap_response: { request_id: m.bootstrap_request.request_id,
          user_data: Buffer.from('#cloud-config\n'), ttl_seconds: 600, error: '' } });
      } else if (m.payload === 'reclaim_instruction') {
        this.reclaims.push(m.reclaim_instruction);
        this.send({ reclaim_ack: { instruction_id: m.reclaim_instruction.instruction_id,
          nodes_started: m.reclaim_instruction.nodes.length } });
      } else if (m.payload === 'node_state_update') {
        this.nodeState.set(m.node_state_update.machine_id, m.node_state_update.state);
      }
      this.msgs.length = 0; // recorded above; keep memory flat
    });
  }

  inState(state) { return [...this.nodeState.values()].filter((s) => s === state).length; }

  // Op clears msgs on every frame, so acks are awaited on the stream itself
  // (subscribe before sending).
  ack(echo, ms = 10000) {
    return new Promise((resolve, reject) => {
      const f = (m) => {
        if (m.payload === 'ack' && m.ack.echo === echo) {
          clearTimeout(t);
          this.call.off('data', f);
          resolve(m);
        }
      };
      const t = setTimeout(() => { this.call.off('data', f); reject(new Error(`no "${echo}" ack`)); }, ms);
      this.call.on('data', f);
    });
  }

  async rollup(needs) {
    const acked = this.ack('rollup');
    super.rollup(this.cluster, needs);
    await acked;
  }
}

async function connect(S, cluster) {
  const op = new Op(S.addr, cluster);
  const hello = op.ack('hello');
  op.hello(cluster);
  await hello;
  return op;
}

async function metrics(S) { return (await L.httpGet(S.metricsPort, '/metrics')).body; }

// Sum of the samples of `name` whose labels contain every `labels` pair.
function sum(text, name, labels = {}) {
  let total = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name) || (line[name.length] !== '{' && line[name.length] !== ' ')) continue;
    if (!Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`))) continue;
    total += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return total;
}

const gpuMachines = (text, state) =>
  sum(text, 'bigfleet_appliance_inventory_machines_by_type', { state, instance_type: GPU_TYPE });

// Lets the appliance run `n` more cycles (the counts asserted afterwards
// include anything those cycles might have sent).
async function moreCycles(S, n) {
  const c0 = sum(await metrics(S), 'bigfleet_appliance_cycles_total');
  await L.waitFor(async () => sum(await metrics(S), 'bigfleet_appliance_cycles_total') >= c0 + n,
    30000, `${n} more cycles`);
  await L.sleep(300); // the last cycle's actions reach the operator
}

function inspectNeeds(S) {
  const client = new read.ShardRead(S.addr, L.grpc.credentials.createInsecure());
  return new Promise((resolve, reject) => {
    const rows = [];
    const call = client.InspectNeeds({}, { deadline: Date.now() + 20000 });
    call.on('data', (f) => { if (f.frame === 'need') rows.push(f.need); });
    call.on('error', (e) => { client.close(); reject(e); });
    call.on('end', () => { client.close(); resolve(rows); });
  });
}

async function withShard(simArgs, args, fn) {
  const simPort = await L.freePort();
  const S = await L.startShard({ args: ['--provider-addr=', `--sim-listen=127.0.0.1:${simPort}`,
    `--sim-args=--seed-speculative 0 --zones 1 ${simArgs}`, '--cycle-interval=200ms',
    '--max-machines=4096', '--max-needs=1024', '--max-clusters=16', ...args] });
  const ops = [];
  try {
    await L.waitFor(async () => (await L.httpGet(S.metricsPort, '/readyz')).status === 200, 20000,
      'the first reconcile of the embedded provider');
    await fn(S, async (cluster) => { const op = await connect(S, cluster); ops.push(op); return op; });
  } catch (e) {
    console.log(S.log().split('\n').filter((l) => !/msg="cycle"/.test(l)).slice(-40).join('\n'));
    throw e;
  } finally {
    for (const op of ops) op.close();
    const ex = await S.stop();
    assert.strictEqual(ex.code, 0, `shardd exit ${JSON.stringify(ex)}`);
  }
}

const tests = [
  ['TrainingJob: 4 Idle GPU machines, demand 4 -> exactly 4 BootstrapRequests, 4 Configured', () =>
    withShard('--seed-idle 4', [], async (S, connectOp) => {
      const op = await connectOp('cluster-train');
      await op.rollup([gpuNeed(1000000, 4)]);
      await L.waitFor(async () => op.inState(CONFIGURED) === 4 &&
        gpuMachines(await metrics(S), 'Configured') === 4, 20000, '4 machines Configured');
      await moreCycles(S, 5);
      assert.strictEqual(op.boots.length, 4, 'BootstrapRequests');
      for (const b of op.boots) {
        assert.strictEqual(b.cluster_id, 'cluster-train');
        assert.deepStrictEqual(b.requirements.map((r) => [r.key, r.operator, r.values]),
          [[IT, 1, [GPU_TYPE]]]);
      }
      assert.strictEqual(new Set(op.boots.map((b) => b.request_id)).size, 4);
      assert.strictEqual(op.inState(CONFIGURED), 4);
      assert.strictEqual(op.reclaims.length, 0);
      const m = await metrics(S);
      assert.strictEqual(gpuMachines(m, 'Configured'), 4);
      assert.strictEqual(gpuMachines(m, 'Idle'), 0);
      assert.strictEqual(sum(m, 'bigfleet_shard_actions_total', { kind: 'Bootstrap' }), 4);
      assert.strictEqual(sum(m, 'bigfleet_shard_shortfalls'), 0);
    })],

  ['Stockout: 2 Idle, demand 8 -> exactly 2 BootstrapRequests; the rest stays a shortfall', () =>
    withShard('--seed-idle 2', [], async (S, connectOp) => {
      const op = await connectOp('cluster-train');
      await op.rollup([gpuNeed(1000000, 8)]);
      await L.waitFor(async () => op.inState(CONFIGURED) === 2, 20000, '2 machines Configured');
      await moreCycles(S, 5);
      assert.strictEqual(op.boots.length, 2, 'BootstrapRequests');
      const m = await metrics(S);
      assert.strictEqual(gpuMachines(m, 'Configured'), 2, 'steady-state Configured');
      assert.strictEqual(sum(m, 'bigfleet_shard_shortfalls'), 1);
      const rows = await inspectNeeds(S);
      assert.strictEqual(rows.length, 1);
      assert.strictEqual(rows[0].satisfied, false);
      assert.strictEqual(rows[0].claimed_machine_count, 2);
      assert.deepStrictEqual(rows[0].residual_deficit.resources, { 'nvidia.com/gpu': '48' });
    })],

  ['Withdrawal (cap allows it): demand 4, then an empty rollup -> exactly 4 ReclaimInstructions', () =>
    withShard('--seed-idle 4', ['--reclaim-cap-fraction=1'], async (S, connectOp) => {
      const op = await connectOp('cluster-train');
      await op.rollup([gpuNeed(1000000, 4)]);
      await L.waitFor(async () => op.inState(CONFIGURED) === 4, 20000, '4 Configured');
      const bound = [...op.nodeState.keys()].sort();
      await op.rollup([]);
      await L.waitFor(async () => gpuMachines(await metrics(S), 'Idle') === 4, 20000,
        'all 4 back to Idle');
      await moreCycles(S, 5);
      assert.strictEqual(op.reclaims.length, 4, 'ReclaimInstructions');
      assert.deepStrictEqual(op.reclaims.flatMap((r) => r.nodes).sort(), bound);
      for (const r of op.reclaims) {
        assert.strictEqual(Number(r.grace_period_seconds), 600, 'Phase 3 reclaim grace');
        assert.strictEqual(r.preemptor_priority, 0);
      }
      assert.strictEqual(op.boots.length, 4);
      const m = await metrics(S);
      assert.strictEqual(gpuMachines(m, 'Configured'), 0);
      assert.strictEqual(sum(m, 'bigfleet_shard_actions_total', { kind: 'Reclaim' }), 4);
      assert.strictEqual(sum(m, 'bigfleet_shard_reclaims_capped_total'), 0);
    })],

  ['Withdrawal under the default cap: one Reclaim per deciding cycle, 4 in all (roll-over)', () => {
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'bf-comp-'));
    const audit = path.join(tmp, 'audit.jsonl');
    return withShard('--seed-idle 4', [`--audit-log=${audit}`], async (S, connectOp) => {
      const op = await connectOp('cluster-train');
      await op.rollup([gpuNeed(1000000, 4)]);
      await L.waitFor(async () => op.inState(CONFIGURED) === 4, 20000, '4 Configured');
      await op.rollup([]);
      await L.waitFor(async () => gpuMachines(await metrics(S), 'Idle') === 4, 30000,
        'all 4 back to Idle');
      await moreCycles(S, 5);
      assert.strictEqual(op.reclaims.length, 4, 'ReclaimInstructions');
      const recs = fs.readFileSync(audit, 'utf8').trim().split('\n').map((l) => JSON.parse(l))
        .filter((r) => r.kind === 'Reclaim');
      assert.strictEqual(recs.length, 4);
      const perCycle = new Map();
      for (const r of recs) perCycle.set(r.decided_cycle, (perCycle.get(r.decided_cycle) || 0) + 1);
      assert.ok([...perCycle.values()].every((n) => n === 1),
        `max(1, floor(0.05 x Configured)) = 1 Reclaim per cycle: ${JSON.stringify([...perCycle])}`);
      assert.strictEqual(perCycle.size, 4);
      assert.ok(sum(await metrics(S), 'bigfleet_shard_reclaims_capped_total') > 0,
        'the deferred Reclaims are counted');
    }).finally(() => fs.rmSync(tmp, { recursive: true, force: true }));
  }],

  ['PriorityInversion: train (1000000) displaces batch (100000) -> exactly 4 Preempts, 4 re-bootstraps', () =>
    withShard('--seed-idle 4', [], async (S, connectOp) => {
      const batch = await connectOp('cluster-batch');
      await batch.rollup([gpuNeed(100000, 4)]);
      await L.waitFor(async () => batch.inState(CONFIGURED) === 4, 20000, 'batch holds 4');
      const held = [...batch.nodeState.keys()].sort();
      const train = await connectOp('cluster-train');
      await train.rollup([gpuNeed(1000000, 4)]);
      await L.waitFor(async () => train.inState(CONFIGURED) === 4, 30000, 'train ends with 4');
      await moreCycles(S, 5);
      assert.strictEqual(batch.reclaims.length, 4, 'ReclaimInstructions to batch');
      assert.deepStrictEqual(batch.reclaims.flatMap((r) => r.nodes).sort(), held);
      for (const r of batch.reclaims) {
        assert.strictEqual(r.preemptor_priority, 1000000);
        assert.strictEqual(Number(r.grace_period_seconds), 30, 'DrainGrace(gap 900000) = 30 s');
      }
      assert.strictEqual(train.boots.length, 4, 'BootstrapRequests to train');
      assert.deepStrictEqual([...train.nodeState.keys()].sort(), held, 'train got the 4 machines');
      assert.strictEqual(batch.boots.length, 4, 'batch was bootstrapped once, never again');
      assert.strictEqual(train.reclaims.length, 0, 'batch never preempts back');
      const m = await metrics(S);
      assert.strictEqual(sum(m, 'bigfleet_shard_actions_total', { kind: 'Preempt' }), 4);
      assert.strictEqual(sum(m, 'bigfleet_shard_actions_total', { kind: 'Reclaim' }), 0);
      const rows = await inspectNeeds(S);
      const b = rows.find((r) => r.cluster_id === 'cluster-batch');
      assert.strictEqual(b.satisfied, false, 'batch is left unmet');
      assert.strictEqual(rows.find((r) => r.cluster_id === 'cluster-train').satisfied, true);
    })],

  ['ActuationPaused: cycles keep deciding and reporting; the operator gets nothing, nothing leaves Idle', () =>
    withShard('--seed-idle 4', ['--actuation-paused'], async (S, connectOp) => {
      const op = await connectOp('cluster-train');
      await op.rollup([gpuNeed(1000000, 6)]); // 4 Idle exist: 2 machines short
      await L.waitFor(async () => sum(await metrics(S), 'bigfleet_shard_actions_suppressed_total',
        { kind: 'Bootstrap' }) >= 4, 20000, 'suppressed Bootstraps');
      const m0 = await metrics(S);
      await moreCycles(S, 5);
      const m1 = await metrics(S);
      assert.strictEqual(sum(m1, 'bigfleet_shard_actuation_paused'), 1);
      assert.ok(sum(m1, 'bigfleet_shard_actions_suppressed_total', { kind: 'Bootstrap' }) >=
        sum(m0, 'bigfleet_shard_actions_suppressed_total', { kind: 'Bootstrap' }) + 4 * 5,
      'every cycle decides the 4 Bootstraps again');
      assert.strictEqual(sum(m1, 'bigfleet_shard_actions_total'), 0, 'nothing emitted for execution');
      assert.strictEqual(sum(m1, 'bigfleet_shard_action_execute_outcomes_total'), 0);
      assert.strictEqual(op.boots.length, 0, 'no BootstrapRequest while paused');
      assert.strictEqual(op.nodeState.size, 0, 'no machine moved');
      assert.strictEqual(gpuMachines(m1, 'Idle'), 4);
      assert.strictEqual(gpuMachines(m1, 'Configured'), 0);
      // reporting continues: the shortfall ages, the verdicts are fresh
      assert.strictEqual(sum(m1, 'bigfleet_shard_shortfalls'), 1);
      assert.ok(sum(m1, 'bigfleet_appliance_result_cycle') >= sum(m0, 'bigfleet_appliance_result_cycle') + 5);
      assert.strictEqual(sum(m1, 'bigfleet_appliance_result_unsatisfied_needs'), 1);
      const rows = await inspectNeeds(S);
      assert.strictEqual(rows.length, 1);
      assert.strictEqual(rows[0].satisfied, false);
      assert.strictEqual(rows[0].bootstrap_count, 4, 'the verdict shows what was decided');
      assert.ok(Number(rows[0].age_cycles_unmet) >= 5, `unmet age ${rows[0].age_cycles_unmet}`);
    })],

  // --cycle-min-gap on the real cycle process (test_cycle_pace checks the
  // arithmetic; this checks the loop's wiring): with no periodic cycle due
  // for 60 s, a demand change after a quiet period is decided at once, and
  // three changes sent right after that cycle wait out the 1 s gap and are
  // decided by ONE cycle, which sees the last of them (nothing is lost while
  // the cycle process sleeps through their wake-ups).
  ['Pacing: changes inside --cycle-min-gap wait for it, one cycle decides them all, the last is kept', () =>
    withShard('--seed-idle 8', ['--cycle-interval=60s', '--cycle-min-gap=1s'], async (S, connectOp) => {
      const op = await connectOp('cluster-train');
      const cycles = async () => sum(await metrics(S), 'bigfleet_appliance_cycles_total');
      const c0 = await cycles();
      const tSent = Date.now();
      await op.rollup([gpuNeed(1000000, 1)]);
      let c1 = c0;
      await L.waitFor(async () => (c1 = await cycles()) > c0, 5000, 'the first demand cycle');
      const tFirst = Date.now();
      assert.ok(tFirst - tSent < 5000);
      assert.strictEqual(c1 - c0, 1, 'one cycle for the first change');
      for (const n of [2, 3, 4]) await op.rollup([gpuNeed(1000000, n)]);
      await L.waitFor(async () => op.boots.length >= 4, 20000, 'the last change decided');
      const waited = Date.now() - tFirst;
      assert.ok(waited >= 700, `the burst was decided ${waited} ms after the first demand cycle`);
      await L.sleep(500); // anything a further cycle would send
      assert.strictEqual(await cycles() - c1, 1, 'one cycle took the three changes');
      assert.strictEqual(op.boots.length, 4, 'BootstrapRequests: the last demand (4), no more');
    })],
];

register(tests, { skip: SKIP });
