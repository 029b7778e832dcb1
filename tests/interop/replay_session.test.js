#!/usr/bin/env node
// replay_session.test.js: bigfleet-replay against a Shard/Session server
// written with @grpc/grpc-js (replay_fakeshard.js). Proves, from the
// shard's side of the wire:
//   - one stream per cluster, Hello first (cluster id, "v1alpha1"), K
//     clusters spread over N HTTP/2 connections;
//   - every rollup is a full replacement equal to the demand computed here,
//     independently, from the CSV at the trace time the clock maps that
//     rollup to (aggregation key = priority, buckets, requirements; sum as
//     aggregate_resources; per-dimension max as min_unit; empty group;
//     gpu_spec -> In on nvidia.com/gpu.product, CPU-only -> DoesNotExist,
//     the instance-type pin = the catalog types that fit), timestamps in
//     wall-clock nanoseconds;
//   - the cadence under --speed: one rollup per --rollup-interval of wall
//     time per cluster, the last one at the end of the window; a tick the
//     replay was too late for on a loaded machine is skipped (the trace stays
//     in step with the wall clock) and counted in the report's
//     clusters[].ticks_skipped, so the rollups sent plus those skipped are
//     one per interval, and each rollup carries the demand of its own tick
//     (matched in order; a skip moves the match on);
//   - BootstrapRequest -> BootstrapBlobResponse (same id, a blob, a TTL),
//     ReclaimInstruction -> ReclaimAck (same id, nodes_started), the node
//     updates accounted in the report;
//   - a stream the shard ends is re-dialled: a new Hello, and the current
//     rollup at once. (grpc-js ends a bidi call with trailers and no
//     RST_STREAM; our net client completes a call only when the HTTP/2
//     stream closes, so here the re-dial comes from the replay's session
//     watchdog, --session-timeout.)
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const { FakeShard, vec, runReplay, harness, CATALOG } = require('./replay_fakeshard.js');

const T = harness('replay_session');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'replay-session-'));

const PODS = `name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
ls-cpu-a,4000,8192,0,0,,LS,Running,0,2000,0
ls-cpu-b,2000,4096,0,0,,LS,Running,300,1200,300
be-share,4000,8192,1,500,,BE,Running,100,1500,100
be-share2,2000,4096,1,250,,BE,Running,500,1700,500
ls-8gpu,32000,65536,8,1000,,LS,Running,800,1900,800
ls-t4,4000,8192,1,1000,T4,LS,Pending,200,,
burst-short,1000,1024,0,0,,Burstable,Running,1010,1011,1010
guar,1000,1024,0,0,,Guaranteed,Running,1500,2000,1500
big-cpu,48000,16384,0,0,,BE,Running,600,1400,600
`;
fs.writeFileSync(path.join(tmp, 'catalog.csv'), CATALOG);
fs.writeFileSync(path.join(tmp, 'pods.csv'), PODS);

// ------------------------------------------------------------ the expected demand, from scratch

const types = CATALOG.trim().split('\n').slice(1).map((l) => {
  const f = l.split(',');
  return { name: f[0], cpu: +f[1], mem: +f[2], gpus: +f[3], model: f[4] };
});
const QOS = { LS: [10000, 15, 16], BE: [100, 4, 5], Burstable: [1000, 12, 13], Guaranteed: [20000, 16, 17] };
const pods = PODS.trim().split('\n').slice(1).map((l) => {
  const f = l.split(',');
  return { name: f[0], cpu: +f[1], mem: +f[2], gpu: +f[3] * +f[4], spec: f[5] ? f[5].split('|') : [],
    qos: f[6], create: +f[8], del: f[9] === '' ? Infinity : +f[9] };
});
const END = 2000; // the largest time in the file
function reqsOf(p) {
  const fit = types.filter((t) => t.cpu >= p.cpu && t.mem >= p.mem && t.gpus * 1000 >= p.gpu &&
    (p.gpu === 0 ? t.gpus === 0 : t.gpus > 0 && (!p.spec.length || p.spec.includes(t.model))));
  const r = [];
  if (fit.length) r.push({ key: 'node.kubernetes.io/instance-type', operator: 1, values: fit.map((t) => t.name).sort() });
  if (p.gpu === 0) r.push({ key: 'nvidia.com/gpu.product', operator: 4, values: [] });
  else if (p.spec.length) r.push({ key: 'nvidia.com/gpu.product', operator: 1, values: [...new Set(p.spec)].sort() });
  return r.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : a.operator - b.operator));
}
const keyOf = (prio, ipb, rpb, reqs) => JSON.stringify([prio, ipb, rpb,
  reqs.map((r) => [r.key, r.operator, [...r.values].sort()])]);
function expectedNeeds(tau) {
  const m = new Map();
  if (tau < 0) return m; // from = the first creation time = 0
  for (const p of pods) {
    if (!(p.create <= tau && (tau < p.del || p.del >= END))) continue;
    const [prio, ipb, rpb] = QOS[p.qos];
    const k = keyOf(prio, ipb, rpb, reqsOf(p));
    const n = m.get(k) || { agg: { cpu: 0, mem: 0, gpu: 0 }, min: { cpu: 0, mem: 0, gpu: 0 }, gpu: false };
    for (const d of ['cpu', 'mem', 'gpu']) {
      n.agg[d] += p[d];
      n.min[d] = Math.max(n.min[d], p[d]);
    }
    n.gpu = n.gpu || p.gpu > 0;
    m.set(k, n);
  }
  return m;
}

// the replay clock: tau(i, k) = floor((phase_i + k*I) * speed) - i*offset, clamped to until
const SPEED = 1000, I_NS = 100e6, OFFSET = 50, K = 3, UNTIL = END;
function tau(i, k) {
  const phase = Math.floor(I_NS * i / K);
  const t = Math.floor((phase + k * I_NS) * SPEED / 1e9) - i * OFFSET;
  return Math.min(t, UNTIL);
}

// ------------------------------------------------------------ run

T.run(async () => {
  const shard = new FakeShard();
  const port = await shard.start();
  // the shard's own frames, sent once the replay is under way
  let injected = false, restarted = false;
  const inject = setInterval(() => {
    const s0 = shard.streams.find((s) => s.cluster === 'openb-0' && s.rollups.length >= 3);
    if (s0 && !injected) {
      injected = true;
      shard.send(s0, { bootstrap_request: { request_id: '00000000deadbeef', cluster_id: 'openb-0',
        requirements: [{ key: 'node.kubernetes.io/instance-type', operator: 1, values: ['cpu-8'] }] } });
      const res = { resources: { cpu: '8', memory: '32Gi' } };
      const labels = { 'node.kubernetes.io/instance-type': 'cpu-8', 'topology.kubernetes.io/zone': 'zone-a' };
      for (const st of [2, 4, 5])
        shard.send(s0, { node_state_update: { supersedes_key: 'node:m-1', machine_id: 'm-1', state: st, labels, resources: res } });
      shard.send(s0, { available_capacity: { supersedes_key: 'available:x', available_count: 3, confidence: 4 } });
      shard.send(s0, { reclaim_instruction: { instruction_id: 'feedfacefeedface', nodes: ['m-1'],
        grace_period_seconds: '600', preemptor_priority: 0 } });
      shard.send(s0, { node_state_update: { supersedes_key: 'node:m-1', machine_id: 'm-1', state: 6, labels, resources: res } });
      shard.send(s0, { node_state_update: { supersedes_key: 'node:m-1', machine_id: 'm-1', state: 3, labels, resources: res } });
    }
    const s2 = shard.streams.find((s) => s.cluster === 'openb-2' && s.rollups.length >= 8 && !s.ended);
    if (s2 && !restarted) {
      restarted = true;
      s2.restartedAt = process.hrtime.bigint();
      s2.call.emit('error', { code: 14, details: 'fake shard restarts this session' });
    }
  }, 5);
  const report = path.join(tmp, 'report');
  const r = await runReplay(['--trace', path.join(tmp, 'pods.csv'), '--catalog', path.join(tmp, 'catalog.csv'),
    '--shard-addr', `127.0.0.1:${port}`, '--clusters', String(K), '--connections', '2',
    '--cluster-offset', String(OFFSET), '--speed', String(SPEED), '--rollup-interval', '100ms',
    '--settle', '300ms', '--session-timeout', '400ms', '--progress', 'off', '--report', report]);
  clearInterval(inject);
  await shard.stop();
  T.eq(r.code, 0, `exit status (stderr: ${r.stderr.slice(-500)})`);
  T.eq(shard.errors, [], 'fake shard saw no protocol error');

  // sessions: one stream per cluster (+1 re-dial), Hello first, 2 connections
  const clusters = [...new Set(shard.streams.map((s) => s.cluster))].sort();
  T.eq(clusters, ['openb-0', 'openb-1', 'openb-2'], 'cluster ids');
  T.eq(shard.streams.length, 4, 'streams: one per cluster plus the re-dialled one');
  T.check(shard.streams.every((s) => s.frames[0].kind === 'hello' && s.protocol === 'v1alpha1'),
    'every stream starts with Hello{protocol_version: "v1alpha1"}');
  const peers = new Set(shard.streams.filter((s) => s.cluster !== 'openb-2').map((s) => s.peer));
  T.check(new Set(shard.streams.map((s) => s.peer)).size <= 2 && peers.size === 2,
    `3 clusters over --connections 2 (peers ${[...peers]})`);
  await T.ok('sessions: Hello first, 3 clusters over 2 connections');

  if (!T.check(fs.existsSync(path.join(report, 'report.json')), 'report.json written')) T.finish();
  const rep = JSON.parse(fs.readFileSync(path.join(report, 'report.json'), 'utf8'));

  // content and cadence of clusters 0 and 1
  for (const id of ['openb-0', 'openb-1']) {
    const i = Number(id.split('-')[1]);
    const s = shard.streams.find((x) => x.cluster === id);
    const kLast = (() => { let k = 0; while (tau(i, k) < UNTIL) k++; return k; })();
    const cl = (rep.clusters || []).find((c) => c.id === id) || {};
    const skipped = cl.ticks_skipped;
    T.check(Number.isInteger(skipped) && skipped >= 0, `${id}: the report counts the ticks skipped (${skipped})`);
    T.eq(s.rollups.length + skipped, kLast + 1,
      `${id}: one rollup per interval up to the end of the window (sent ${s.rollups.length} + skipped ${skipped})`);
    T.eq(cl.rollups_sent, s.rollups.length, `${id}: the report counts the rollups the shard received`);
    // rollup j carries the demand of tick k_j: k_0 < k_1 < ... <= kLast, at
    // most `skipped` ticks passed over in all, the last one = kLast
    const diff = (ro, k) => {
      const want = expectedNeeds(tau(i, k));
      const got = new Map();
      for (const n of ro.msg.needs) {
        const key = keyOf(n.priority, n.interruption_penalty_bucket, n.reclamation_penalty_bucket, n.requirements);
        if (got.has(key)) return `two Needs with one key ${key}`;
        got.set(key, { agg: vec(n.aggregate_resources), min: vec(n.min_unit), gpuKey: 'nvidia.com/gpu' in n.aggregate_resources,
          group: n.group.length });
      }
      if (got.size !== want.size) return `${got.size} Needs, want ${want.size}`;
      for (const [key, w] of want) {
        const g = got.get(key);
        if (!g) return `missing Need ${key}`;
        const a = JSON.stringify([g.agg, g.min, g.gpuKey, g.group]), b = JSON.stringify([w.agg, w.min, w.gpu, 0]);
        if (a !== b) return `Need ${key}: got ${a}, want ${b}`;
      }
      return null;
    };
    let bad = 0, k = -1, passed = 0;
    s.rollups.forEach((ro, j) => {
      T.eq(ro.msg.cluster_id, id, `${id} rollup ${j} cluster_id`);
      const last = j === s.rollups.length - 1;
      let why = null;
      for (let cand = k + 1; cand <= kLast && cand - (k + 1) + passed <= (skipped || 0); cand++) {
        if (last && cand !== kLast) continue; // the last rollup is the end of the window
        why = diff(ro, cand);
        if (why === null) { passed += cand - (k + 1); k = cand; return; }
      }
      bad++;
      T.check(false, `${id} rollup ${j} (after tick ${k}, tau ${tau(i, k + 1)}): matches no tick's demand` +
        ` within the ${skipped} skipped (at tick ${k + 1}: ${diff(ro, Math.min(k + 1, kLast))})`);
      k++;
    });
    T.check(bad === 0, `${id}: ${bad} rollups differ from the demand computed from the CSV`);
    // cadence: wall intervals around 100 ms, by the replay's own send
    // timestamps (wall-clock ns) rather than by when this process read them
    const sent = s.rollups.map((ro) => BigInt(ro.msg.timestamp_unix_nanos));
    const gaps = sent.slice(1).map((t, j) => Number(t - sent[j]) / 1e6).sort((a, b) => a - b);
    const median = gaps[Math.floor(gaps.length / 2)];
    T.check(median > 80 && median < 120, `${id}: median gap ${median} ms, want ~100 ms`);
    const ts = s.rollups.map((ro) => Number(BigInt(ro.msg.timestamp_unix_nanos) / 1000000n));
    T.check(ts.every((x, j) => j === 0 || x >= ts[j - 1]) && Math.abs(ts[0] - Date.now()) < 60000,
      `${id}: timestamps are increasing wall-clock nanoseconds`);
  }
  await T.ok('rollups: full replacement, aggregation, MinUnit, buckets, pins, timing under --speed (ticks skipped: ' +
    `${(rep.clusters || []).map((c) => `${c.id} ${c.ticks_skipped}`).join(', ')})`);
  // the sub-interval pod (1 s of trace inside a 100 s step) never shows up
  T.check(shard.streams.every((s) => s.rollups.every((ro) => ro.msg.needs.every((n) => n.priority !== 1000))),
    'a pod living between two rollups is never sent');

  // shard-initiated frames
  T.eq(shard.bootstrapResponses.length, 1, 'one BootstrapBlobResponse');
  const b = shard.bootstrapResponses[0] || {};
  T.check(b.request_id === '00000000deadbeef' && b.user_data && b.user_data.length > 0 &&
    Number(b.ttl_seconds) > 0 && b.error === '', `BootstrapBlobResponse echoes the id with a blob: ${JSON.stringify(b)}`);
  T.eq(shard.reclaimAcks.map((a) => [a.instruction_id, a.nodes_started]), [['feedfacefeedface', 1]], 'ReclaimAck');
  await T.ok('BootstrapRequest answered, ReclaimInstruction acked');

  // re-dial: new Hello, current rollup at once
  const s2 = shard.streams.filter((s) => s.cluster === 'openb-2');
  T.eq(s2.length, 2, 'openb-2 re-dialled after the shard ended its stream');
  if (s2.length === 2 && s2[1].rollups.length) {
    const first = Number(s2[1].rollups[0].t - s2[1].frames[0].t) / 1e6;
    T.check(first < 60, `first rollup ${first} ms after the new Hello (immediate, not the next tick)`);
    const down = s2[0].restartedAt ? Number(s2[1].frames[0].t - s2[0].restartedAt) / 1e6 : NaN;
    T.check(down < 1500, `re-dialled ${down} ms after the shard ended the stream`);
    T.check(s2[1].rollups.length >= 5, 'rollups continue on the new stream');
  }
  await T.ok('a re-dialled session says Hello and gets its rollup at once');

  // the report accounts for what the shard said
  T.eq([rep.protocol.bootstrap_requests, rep.protocol.reclaim_instructions, rep.protocol.node_state_updates,
    rep.protocol.available_capacity_updates], [1, 1, 5, 1], 'protocol counters');
  T.eq([rep.machines.provisioned, rep.machines.reclaimed, rep.machines.drained], [1, 1, 1], 'machine counters');
  T.eq(rep.protocol.session_restarts, 1, 'session restarts');
  T.eq(rep.replay.clusters, 3, 'report: clusters');
  T.check(rep.pods.between_rollups >= 3, 'report counts the pods that fell between rollups');
  T.check(fs.existsSync(path.join(report, 'demand.svg')) && fs.existsSync(path.join(report, 'binding-latency.svg')),
    'plots written');
  fs.rmSync(tmp, { recursive: true, force: true });
  T.finish();
});
