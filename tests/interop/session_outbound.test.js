#!/usr/bin/env node
// session_outbound.test.js: what the shard sends to a @grpc/grpc-js operator
// through the real bigfleet-shardd. The C helper (session_shm) plays the
// session's producers exactly as the executor, reconciler and cycle would:
// it inserts machine records, pushes BOOT_REQ / NODE_EXEC / RECLAIM /
// AC_HINTS messages and reads BOOT_RESP records back.
//   bootstrap round trip (OK, operator error, no session, late and foreign
//   responses, cancel on close); reclaim instruction and ack; resync and
//   NodeStateUpdate with the node identity; AvailableCapacityUpdate;
//   coalescing under a paused reader; a non-reading operator is closed
//   while another cluster keeps its service.
'use strict';

const http2 = require('http2');
const L = require('./session_lib');
const { register } = require('./register');
const { assert } = L;

let S;
const stats = () => L.shm(S.id, 'dump', '-').stats;

async function connect(name, opts) {
  const op = new L.Operator(S.addr, null, opts);
  op.hello(name);
  await op.ack('hello');
  return op;
}

const isBoot = (m) => m.payload === 'bootstrap_request';
const isNode = (id) => (m) => m.payload === 'node_state_update' && m.node_state_update.machine_id === id;

const tests = [
  ['bootstrap round trip: request id, requirements and cluster out; the blob back to the executor', async () => {
    const op = await connect('o-boot');
    const helper = L.shmAsync(S.id, 'boot', 4242, 'o-boot', 5000, 'zone:1:b,a', 'gpu:3');
    const m = await op.next(isBoot, 5000, 'BootstrapRequest');
    const r = m.bootstrap_request;
    assert.match(r.request_id, /^[0-9a-f]{16}$/);
    assert.strictEqual(r.cluster_id, 'o-boot');
    assert.deepStrictEqual(r.requirements.map((q) => [q.key, q.operator, q.values]),
      [['gpu', 3, []], ['zone', 1, ['a', 'b']]]);
    op.send({ bootstrap_response: { request_id: r.request_id, user_data: Buffer.from('#cloud-config\nkubelet'),
      ttl_seconds: 3600, error: '' } });
    const resp = await helper;
    assert.deepStrictEqual(resp, { status: 0, ttl: 3600, error: '', blob: '#cloud-config\nkubelet' });
    op.close();
  }],
  ['an operator error is relayed; no session answers NO_SESSION; unknown and foreign responses are dropped', async () => {
    const op = await connect('o-boot2');
    const spy = await connect('o-spy');
    const late0 = stats().boot_late_responses;
    const helper = L.shmAsync(S.id, 'boot', 7, 'o-boot2', 5000);
    const r = (await op.next(isBoot)).bootstrap_request;
    // another cluster answering this id is not accepted
    spy.send({ bootstrap_response: { request_id: r.request_id, user_data: Buffer.from('evil') } });
    op.send({ bootstrap_response: { request_id: 'ffffffffffffffff', user_data: Buffer.from('x') } });
    await L.waitFor(() => stats().boot_late_responses === late0 + 2, 3000, 'late responses counted');
    op.send({ bootstrap_response: { request_id: r.request_id, error: 'kubelet version skew' } });
    assert.deepStrictEqual(await helper, { status: 1, ttl: 0, error: 'kubelet version skew', blob: '' });
    // the answered id is gone: a second answer is late
    op.send({ bootstrap_response: { request_id: r.request_id, user_data: Buffer.from('again') } });
    await L.waitFor(() => stats().boot_late_responses === late0 + 3, 3000, 'late response');
    const none = await L.shmAsync(S.id, 'boot', 8, 'o-nobody', 3000);
    assert.strictEqual(none.status, 2);
    op.close();
    spy.close();
  }],
  ['a bootstrap request in flight is cancelled when its session closes', async () => {
    const op = await connect('o-boot3');
    const helper = L.shmAsync(S.id, 'boot', 9, 'o-boot3', 5000);
    await op.next(isBoot);
    op.close();
    assert.strictEqual((await helper).status, 4);
  }],
];

tests.push(['reclaim instruction names the machine, grace and preemptor; its ack is matched', async () => {
  L.shm(S.id, 'machine', 'm-rec-1', 'o-rec', 'Configured', 'm6i.large', 'zone-a', 'host:aws/i-rec1');
  const op = await connect('o-rec');
  const acks0 = stats().reclaim_acks;
  L.shm(S.id, 'reclaim', 'm-rec-1', 'o-rec', 120, 5000);
  const m = await op.next((x) => x.payload === 'reclaim_instruction', 5000, 'ReclaimInstruction');
  const ri = m.reclaim_instruction;
  assert.match(ri.instruction_id, /^[0-9a-f]{16}$/);
  assert.deepStrictEqual(ri.nodes, ['m-rec-1']);
  assert.strictEqual(ri.grace_period_seconds, '120');
  assert.strictEqual(ri.preemptor_priority, 5000);
  op.send({ reclaim_ack: { instruction_id: ri.instruction_id, nodes_started: 1 } });
  await L.waitFor(() => stats().reclaim_acks === acks0 + 1, 3000, 'ack matched');
  op.send({ reclaim_ack: { instruction_id: ri.instruction_id, nodes_started: 1 } });
  await L.sleep(100);
  assert.strictEqual(stats().reclaim_acks, acks0 + 1, 'a repeated ack is not matched twice');
  op.close();
}]);

tests.push(
  ['connect resyncs every machine of the cluster; NodeStateUpdate carries the node identity', async () => {
    L.shm(S.id, 'machine', 'm-n1', 'o-node', 'Configured', 'm6i.large', 'zone-a',
      'topology.bigfleet/rack=r7', `${'node.kubernetes.io/instance-type'}=stale`, 'alloc:cpu=2',
      'alloc:memory=7Gi', 'host:aws/i-0abc');
    L.shm(S.id, 'machine', 'm-n2', 'o-node', 'Configuring', 'c6i.4xlarge', 'zone-b');
    L.shm(S.id, 'machine', 'm-other', 'o-elsewhere', 'Configured', 'm6i.large', 'zone-a');
    const op = await connect('o-node');
    const u1 = (await op.next(isNode('m-n1'), 5000, 'resync m-n1')).node_state_update;
    const u2 = (await op.next(isNode('m-n2'), 5000, 'resync m-n2')).node_state_update;
    assert.strictEqual(u1.supersedes_key, 'node:m-n1');
    assert.strictEqual(u1.cluster_id, 'o-node');
    assert.strictEqual(u1.state, 5);
    assert.strictEqual(u1.provider_id, 'i-0abc');
    assert.deepStrictEqual(u1.labels, { 'topology.bigfleet/rack': 'r7',
      'node.kubernetes.io/instance-type': 'm6i.large', 'topology.kubernetes.io/zone': 'zone-a' });
    assert.deepStrictEqual(u1.resources.resources, { cpu: '2', memory: '7Gi' }); // allocatable wins
    assert.strictEqual(u2.state, 4);
    assert.deepStrictEqual(u2.resources.resources, { cpu: '4', memory: '16Gi' }); // no allocatable
    assert.strictEqual(u2.provider_id, '');
    // a transition event, and a Failed one with its error
    L.shm(S.id, 'node', 'm-n1', 'Draining');
    assert.strictEqual((await op.next(isNode('m-n1'))).node_state_update.state, 6);
    L.shm(S.id, 'node', 'm-n2', 'Failed', 'provider refused');
    const f = (await op.next(isNode('m-n2'))).node_state_update;
    assert.strictEqual(f.state, 8);
    assert.strictEqual(f.last_error, 'provider refused');
    await L.sleep(100);
    assert.ok(!op.msgs.some(isNode('m-other')), 'another cluster\'s machine is not sent');
    op.close();
  }],
  ['AvailableCapacityUpdate is keyed by fingerprint and sent only on a live stream', async () => {
    const op = await connect('o-ac');
    L.shm(S.id, 'ac', 'o-ac', 7, 4, 1.25, 'node.kubernetes.io/instance-type:1:m6i.large');
    const m = await op.next((x) => x.payload === 'available_capacity', 5000, 'AC update');
    const a = m.available_capacity;
    assert.strictEqual(a.supersedes_key,
      'available:p=100|ipb=3|rpb=4|reqs=node.kubernetes.io/instance-type:1:m6i.large;|spr=');
    assert.strictEqual(a.available_count, 7);
    assert.strictEqual(a.confidence, 4);
    assert.strictEqual(a.cost_per_hour, 1.25);
    assert.deepStrictEqual(a.requirements.map((q) => q.values), [['m6i.large']]);
    op.close();
    await L.waitFor(() => L.cluster(S.id, 'o-ac').connected === 0, 3000, 'disconnect');
    const n0 = stats().ac_updates;
    L.shm(S.id, 'ac', 'o-ac', 8, 4, 1.25, 'node.kubernetes.io/instance-type:1:m6i.large');
    await L.sleep(300);
    assert.strictEqual(stats().ac_updates, n0);
  }],
  ['a paused operator gets coalesced node-state and AC frames: latest state per key, nothing lost', async () => {
    const own = { channelOptions: { 'grpc.use_local_subchannel_pool': 1 } };
    for (let i = 0; i < 4; i++)
      L.shm(S.id, 'machine', `m-co-${i}`, 'o-coal', 'Idle', 'm6i.large', 'zone-a');
    const op = await connect('o-coal', own);
    for (let i = 0; i < 4; i++) await op.next(isNode(`m-co-${i}`), 5000, 'resync');
    const c0 = stats().outbox_coalesced;
    op.call.pause(); // stop reading: the shard's transport queue fills up
    for (let i = 0; i < 4; i++)
      await L.shmAsync(S.id, 'nodes', `m-co-${i}`, i === 3 ? 'Failed' : 'Configured', 12000);
    for (let k = 1; k <= 50; k++)
      L.shm(S.id, 'ac', 'o-coal', k, 3, 0.5, 'zone:1:a');
    await L.waitFor(() => stats().outbox_coalesced > c0, 10000, 'coalescing');
    op.call.resume();
    // Frames received before the pause (the resync) are in op.msgs too: wait
    // for frames that arrived after the resume, then let the stream settle.
    const seenBefore = op.msgs.length;
    const lastOf = async (pred, what) => {
      await L.waitFor(() => op.msgs.slice(seenBefore).some(pred), 10000, what);
      await L.sleep(300);
      return op.msgs.filter(pred);
    };
    const lastStates = () => [0, 1, 2, 3].map((i) => {
      const us = op.msgs.filter(isNode(`m-co-${i}`));
      return us.length ? us[us.length - 1].node_state_update.state : -1;
    });
    for (let i = 0; i < 4; i++) {
      const us = await lastOf(isNode(`m-co-${i}`), `updates of m-co-${i}`);
      assert.ok(us.length < 12000, `m-co-${i}: ${us.length} frames for 12000 events`);
    }
    // The queue drains at the client's pace: wait (bounded) for the latest
    // state of every machine rather than assume 300 ms is enough.
    await L.waitFor(() => lastStates().join() === '5,5,5,8', 10000, 'latest states').catch(() => {});
    assert.deepStrictEqual(lastStates(), [5, 5, 5, 8], 'the latest state of every machine arrived');
    const acs = await lastOf((m) => m.payload === 'available_capacity', 'AC');
    assert.strictEqual(acs[acs.length - 1].available_capacity.available_count, 50);
    assert.ok(acs.length < 50);
    assert.ok(stats().outbox_coalesced - c0 > 1000);
    op.close();
  }],
  ['an operator that never reads is closed while another cluster keeps its service', async () => {
    // The non-reading operator is a raw HTTP/2 client that never consumes its
    // response stream (no 'data' listener): its flow-control window closes
    // and the shard's queue for it fills while it keeps sending Hellos.
    const own = { channelOptions: { 'grpc.use_local_subchannel_pool': 1 } };
    const fast = await connect('o-fast', own);
    const ser = L.proto.Shard.service.Session.requestSerialize;
    const frame = (obj) => {
      const b = ser(obj);
      const f = Buffer.alloc(5 + b.length);
      f.writeUInt32BE(b.length, 1);
      b.copy(f, 5);
      return f;
    };
    const h2 = http2.connect(`http://${S.addr}`);
    h2.on('error', () => {});
    const req = h2.request({ ':method': 'POST', ':path': '/bigfleet.v1alpha1.Shard/Session',
      'content-type': 'application/grpc', te: 'trailers' });
    req.on('error', () => {});
    let closed = null;
    req.on('close', () => { closed = { rst: req.rstCode }; });
    const hello = frame({ hello: { cluster_id: 'o-slow' } });
    const m0 = await L.httpGet(S.metricsPort, '/metrics');
    const closed0 = Number(/bigfleet_shard_session_slow_readers_closed_total (\d+)/.exec(m0.body)[1]);
    await L.waitFor(() => { req.write(hello); return L.cluster(S.id, 'o-slow')?.connected === 1; },
      3000, 'o-slow installed');
    let sent = 1;
    const pump = setInterval(() => {
      if (closed) return;
      for (let i = 0; i < 500; i++) req.write(hello);
      sent += 500;
    }, 2);
    const t0 = Date.now();
    let fastAcks = 0;
    while (!closed && Date.now() - t0 < 30000) {
      fast.rollup('o-fast', []);
      await fast.ack('rollup', 2000); // served throughout
      fastAcks++;
      await L.sleep(20);
    }
    clearInterval(pump);
    assert.ok(closed, 'the non-reading stream was reset');
    assert.strictEqual(closed.rst, http2.constants.NGHTTP2_CANCEL);
    assert.ok(fastAcks > 0);
    const m1 = await L.httpGet(S.metricsPort, '/metrics');
    const closed1 = Number(/bigfleet_shard_session_slow_readers_closed_total (\d+)/.exec(m1.body)[1]);
    assert.strictEqual(closed1, closed0 + 1);
    assert.match(S.log(), /operator not reading its stream; closing it.*cluster=o-slow.*outbox full/);
    await L.waitFor(() => L.cluster(S.id, 'o-slow').connected === 0, 3000, 'o-slow detached');
    fast.hello('o-fast');
    await fast.ack('hello');
    h2.destroy();
    fast.close();
    console.log(`     (reset after ${sent} unread Hellos, ${Date.now() - t0} ms)`);
  }],
);

register([...L.logOnFail(tests, () => S, 25), ['(stop the appliance)', async () => {
  const ex = await S.stop();
  assert.strictEqual(ex.code, 0);
}]], { before: async () => { S = await L.startShard(); } });
