#!/usr/bin/env node
// session_coordinator.test.js: the shard's coordinator client against a
// @grpc/grpc-js Coordinator (ReportShard) written for the test: reports with
// the summary and the shortfall ledger of the cycle's published result,
// fenced and deduplicated instructions acked on the next report (applied by
// the cycle; the handlers themselves are tested in adr0055.test.js), the term
// high-water mark in every Acknowledgement and persisted across restarts,
// and static stability while the coordinator is down.
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const L = require('./session_lib');
const { register } = require('./register');
const { assert, grpc } = L;

const OUT = { ACCEPTED: 1, REJECTED_STALE: 2, REJECTED_INVALID: 3, FAILED: 4 };

class FakeCoordinator {
  constructor() {
    this.reports = [];
    this.replies = []; // queued ReportAck objects, one per report
    this.waiters = [];
  }

  async start(port) {
    this.server = new grpc.Server();
    this.server.addService(L.proto.Coordinator.service, {
      ReportShard: (call, cb) => {
        this.reports.push(call.request);
        for (const w of this.waiters.splice(0)) w();
        cb(null, this.replies.shift() || { coordinator_term: '0', acknowledged: true, instructions: [] });
      },
    });
    this.port = await new Promise((resolve, reject) => this.server.bindAsync(`127.0.0.1:${port || 0}`,
      grpc.ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))));
    return this.port;
  }

  stop() { return new Promise((resolve) => this.server.tryShutdown(() => resolve())); }

  // next report after `after` reports were seen
  async report(after, ms = 5000) {
    const end = Date.now() + ms;
    while (this.reports.length <= after) {
      if (Date.now() > end) throw new Error(`no report #${after + 1}`);
      await new Promise((r) => { const t = setTimeout(r, 50); this.waiters.push(() => { clearTimeout(t); r(); }); });
    }
    return this.reports[after];
  }
}

const instr = (id, term, payload) => ({ instruction_id: id, coordinator_term: String(term),
  sequence_number: '1', ...payload });
const acksOf = (r) => Object.fromEntries(r.instruction_acks.map((a) => [a.instruction_id, [a.outcome, a.reason]]));

async function helloTerm(s) {
  const op = new L.Operator(s.addr);
  op.hello('k1');
  const a = await op.ack('hello');
  op.close();
  return a.ack.coordinator_term;
}

let dir, fc, cport, S; /* set by the before hook */
const tests = [
  ['the first report carries identity, epoch and an empty summary before any cycle', async () => {
    const r = await fc.report(0);
    assert.strictEqual(r.shard_id, S.id);
    assert.strictEqual(r.cycle, '1');
    assert.strictEqual(r.shard_epoch, '1');
    assert.strictEqual(r.shard_address, 'shard-0.example:7780');
    assert.ok(Number(r.timestamp_unix_nanos) > 0);
    assert.strictEqual(r.summary.total_machines, 0);
    assert.deepStrictEqual(r.shortfalls, []);
    assert.deepStrictEqual(r.instruction_acks, []);
  }],
  ['instructions are fenced by term, deduplicated, and acked on the next report', async () => {
    const r = await fc.report(1);
    assert.strictEqual(r.cycle, '2');
    const a = acksOf(r);
    assert.deepStrictEqual(a.i1, [OUT.ACCEPTED, '']);
    // ADR-0055 handlers are real (tests/interop/adr0055.test.js): a drain of
    // a machine this shard does not hold fails with a reason
    assert.deepStrictEqual(a.i2, [OUT.FAILED, "machine m1 is not in this shard's inventory"]);
    assert.strictEqual(a.i3[0], OUT.REJECTED_STALE);
    assert.match(a.i3[1], /stale coordinator term 3 < 5/);
    assert.deepStrictEqual(a.i4, [OUT.REJECTED_INVALID, 'unknown payload']);
    assert.deepStrictEqual(a.i5, [OUT.ACCEPTED, ''], 'upstream form: a slot not held here is taken over');
    assert.strictEqual(Object.keys(a).length, 5, 'the empty id is ignored');
    // redelivery of a done instruction, and a whole reply from a stale term
    fc.replies.push({ coordinator_term: '5', instructions: [instr('i1', 5, { assign_domain: { topology_key: 'rack', topology_value: 'r1' } })] });
    const n = fc.reports.length;
    await fc.report(n);
    fc.replies.push({ coordinator_term: '4', instructions: [instr('old', 4, { assign_domain: { topology_key: 'x', topology_value: 'y' } })] });
    const r2 = await fc.report(n + 1);
    assert.deepStrictEqual(acksOf(r2).i1, [OUT.ACCEPTED, 'duplicate-redelivery']);
    const r3 = await fc.report(n + 2);
    assert.strictEqual(acksOf(r3).old, undefined, 'a stale reply is ignored whole');
    assert.deepStrictEqual(r3.instruction_acks, []);
    const m = await L.httpGet(S.metricsPort, '/metrics');
    assert.match(m.body, /bigfleet_shard_coordinator_term 5/);
    // the stale reply is counted, with the one instruction it carried
    assert.match(m.body, /^bigfleet_shard_coordinator_stale_replies_total 1$/m);
    assert.match(m.body, /^bigfleet_shard_coordinator_stale_reply_instructions_total 1$/m);
    assert.match(m.body, /bigfleet_shard_coordinator_assigned_domains 1/);
  }],
  ['every Acknowledgement carries the term high-water mark', async () => {
    assert.strictEqual(await helloTerm(S), '5');
  }],
  ['the summary and the shortfall ledger come from the cycle\'s published result', async () => {
    L.shm(S.id, 'cycle-result', 'node.kubernetes.io/instance-type:1:m6i.large');
    const n = fc.reports.length;
    const r = await fc.report(n);
    assert.strictEqual(r.summary.total_machines, 10);
    assert.strictEqual(r.summary.free_machines, 5);
    assert.deepStrictEqual(r.summary.per_instance_type_counts, { 'm6i.large': 8, 'c6i.4xlarge': 2 });
    assert.deepStrictEqual(r.summary.per_zone_counts, { 'zone-a': 3, 'zone-b': 7 });
    assert.deepStrictEqual(r.shortfalls.map((x) => [x.priority, x.age_cycles, x.interruption_penalty_bucket,
      x.deficit.resources.cpu]), [[1000, 1, 9, '1500m'], [500, 3, 7, '4']]);
    assert.deepStrictEqual(r.shortfalls[0].requirements.map((q) => [q.key, q.operator, q.values]),
      [['node.kubernetes.io/instance-type', 1, ['m6i.large']]]);
    // extension field 7 (ADR-0055 §2): In pins an attribute, it does not co-locate
    assert.deepStrictEqual(r.shortfalls.map((x) => x.topology_constrained), [false, false]);
  }],
  ['a shortfall whose profile has a Same requirement is reported topology_constrained', async () => {
    L.shm(S.id, 'cycle-result', 'topology.bigfleet/rack:5');
    const n = fc.reports.length;
    const r = await fc.report(n);
    assert.deepStrictEqual(r.shortfalls.map((x) => x.topology_constrained), [true, true]);
    assert.deepStrictEqual(r.shortfalls[0].requirements.map((q) => [q.key, q.operator]),
      [['topology.bigfleet/rack', 5]]);
  }],
  ['a coordinator outage is counted, operators are unaffected, pending acks arrive after it', async () => {
    fc.replies.push({ coordinator_term: '6', instructions: [instr('i6', 6, { unassign_domain: { topology_key: 'rack', topology_value: 'r1' } })] });
    const n = fc.reports.length;
    await fc.report(n);
    await fc.stop(); // down before the report carrying the i6 ack
    const m0 = await L.httpGet(S.metricsPort, '/metrics');
    const errs = (b) => Number(/bigfleet_shard_coordinator_report_errors_total (\d+)/.exec(b)[1]);
    await L.waitFor(async () => errs((await L.httpGet(S.metricsPort, '/metrics')).body) > errs(m0.body),
      5000, 'report errors counted');
    assert.strictEqual(await helloTerm(S), '6'); // the session does not wait for the coordinator
    const op = new L.Operator(S.addr);
    op.hello('k2');
    await op.ack('hello');
    op.rollup('k2', [L.need()]);
    await op.ack('rollup');
    op.close();
    const fc2 = new FakeCoordinator();
    await fc2.start(cport);
    let got;
    for (let i = 0; i < 100 && !got; i++) {
      const r = await fc2.report(i, 10000);
      got = acksOf(r).i6;
    }
    assert.deepStrictEqual(got, [OUT.ACCEPTED, '']);
    await fc2.stop();
  }],
  ['the term high-water mark survives an appliance restart (LMDB under --data-dir)', async () => {
    const ex = await S.stop();
    assert.strictEqual(ex.code, 0);
    S = await L.startShard({ dir }); // no coordinator configured this time
    assert.strictEqual(await helloTerm(S), '6');
    const ex2 = await S.stop();
    assert.strictEqual(ex2.code, 0);
  }],
];
register(L.logOnFail(tests, () => S, 20), {
  before: async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bf-coord-'));
    fc = new FakeCoordinator();
    cport = await fc.start();
    // the reply to the first report (queued before the shard starts: it reports at once)
    fc.replies.push({ coordinator_term: '5', acknowledged: true, instructions: [
      instr('i1', 5, { assign_domain: { topology_key: 'rack', topology_value: 'r1' } }),
      instr('i2', 5, { cross_shard_drain: { machine_ids: ['m1'], preemptor_priority: 9 } }),
      instr('i3', 3, { assign_domain: { topology_key: 'rack', topology_value: 'r3' } }),
      instr('i4', 5, {}),
      instr('i5', 5, { reassign_speculative: { machine_ids: ['s1'] } }),
      instr('', 5, { assign_domain: { topology_key: 'rack', topology_value: 'ignored' } }),
    ] });
    S = await L.startShard({ dir, keepDir: true, args: [`--coordinator-addr=127.0.0.1:${cport}`,
      '--coordinator-heartbeat-interval=200ms', '--advertise-addr=shard-0.example:7780'] });
  },
});
