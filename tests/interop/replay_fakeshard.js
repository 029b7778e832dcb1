// replay_fakeshard.js: a Shard/Session server written with @grpc/grpc-js for
// the bigfleet-replay interop tests (a helper module, not a test).
//
// It speaks the shard's side of the session (reference/shard.md §4): Ack
// "hello" for a Hello, Ack "rollup" for every rollup, and records every
// frame with its arrival time, stream and peer. With `autoscale` it also
// acts as a tiny, deliberately simple shard: after each rollup it binds
// machines of the cheapest eligible catalog type to each uncovered Need
// (BootstrapRequest -> wait for the blob -> NodeStateUpdates Creating,
// Configuring, Configured) and reclaims surplus machines (ReclaimInstruction
// -> wait for the ack -> Draining, Idle). Options let a test inject a
// reclaim of a machine that is still needed: badReclaimWhen(rollup) says
// from which rollup on (by its content, not by a count of rollups: the
// replay skips the ticks it was too late for on a loaded machine) the fake
// looks for a victim, at every rollup until it found one.
'use strict';

const nodeTest = require('node:test');
const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const repo = path.resolve(__dirname, '..', '..');
const PROTO_DIR = process.env.PROTO_DIR || path.join(repo, 'proto');

function loadProto() {
  const def = protoLoader.loadSync(['bigfleet/v1alpha1/shard.proto'], {
    includeDirs: [PROTO_DIR], keepCase: true, longs: String, enums: Number,
    defaults: true, oneofs: true,
  });
  return grpc.loadPackageDefinition(def).bigfleet.v1alpha1;
}

// ------------------------------------------------------------ quantities

// Kubernetes quantity -> milli-units (integers as Number; exact for our sizes).
function milli(q) {
  const m = /^([0-9]+)(\.[0-9]+)?(m|Ki|Mi|Gi|Ti|k|M|G)?$/.exec(q);
  if (!m) throw new Error(`bad quantity ${JSON.stringify(q)}`);
  const v = Number(m[1] + (m[2] || ''));
  const mul = { undefined: 1000, m: 1, Ki: 1024e3, Mi: 1048576e3, Gi: 1073741824e3,
    Ti: 1099511627776e3, k: 1e6, M: 1e9, G: 1e12 }[m[3]];
  return Math.ceil(v * mul);
}
// A wire resource map -> {cpu: milli-CPU, mem: MiB, gpu: milli-GPU}
function vec(entries) {
  const o = { cpu: 0, mem: 0, gpu: 0 };
  for (const [k, v] of Object.entries(entries || {})) {
    if (k === 'cpu') o.cpu = milli(v);
    else if (k === 'memory') o.mem = milli(v) / 1048576e3;
    else if (k === 'nvidia.com/gpu') o.gpu = milli(v);
    else throw new Error(`unexpected resource ${k}`);
  }
  return o;
}

// ------------------------------------------------------------ matching

function labelsOf(type, zone) {
  const l = { 'node.kubernetes.io/instance-type': type.name, 'topology.kubernetes.io/zone': zone,
    'topology.bigfleet/rack': `${zone}-rack-0` };
  if (type.gpus > 0) {
    l['nvidia.com/gpu.product'] = type.model;
    l['nvidia.com/gpu.count'] = String(type.gpus);
  }
  return l;
}
function reqOk(r, labels) {
  const v = labels[r.key];
  switch (r.operator) {
    case 1: return v !== undefined && r.values.includes(v);
    case 2: return v === undefined || !r.values.includes(v);
    case 3: return v !== undefined;
    case 4: return v === undefined;
    default: return false;
  }
}
function eligible(need, type) {
  const min = need._min;
  if (type.cpu < min.cpu || type.mem < min.mem || type.gpus * 1000 < min.gpu) return false;
  const labels = labelsOf(type, 'zone-a');
  return need.requirements.every((r) => reqOk(r, labels));
}
function needKey(n) {
  return JSON.stringify([n.priority, n.interruption_penalty_bucket, n.reclamation_penalty_bucket,
    n.requirements.map((r) => [r.key, r.operator, [...r.values].sort()])]);
}

// ------------------------------------------------------------ server

class FakeShard {
  constructor(opts = {}) {
    this.opts = Object.assign({ autoscale: false, catalog: [], badReclaimWhen: null,
      reclaimGraceSeconds: 600 }, opts);
    this.pkg = loadProto();
    this.streams = [];       // {cluster, peer, call, rollups: [{t, msg}], frames: []}
    this.bootstrapResponses = [];
    this.reclaimAcks = [];
    this.machines = new Map(); // id -> {id, type, cluster, needKey, state}
    this.nextId = 0;
    this.pendingBoot = new Map();
    this.pendingReclaim = new Map();
    this.errors = [];
    this.badReclaimsSent = 0;
    this.badReclaimArmed = false;
    this.rollupsTotal = 0;
  }

  start(addr = '127.0.0.1:0') {
    this.server = new grpc.Server();
    this.server.addService(this.pkg.Shard.service, { Session: (call) => this.session(call) });
    return new Promise((resolve, reject) => {
      this.server.bindAsync(addr, grpc.ServerCredentials.createInsecure(), (err, port) => {
        if (err) return reject(err);
        this.port = port;
        resolve(port);
      });
    });
  }

  stop() {
    return new Promise((resolve) => {
      this.server.tryShutdown(() => resolve());
      setTimeout(() => { this.server.forceShutdown(); resolve(); }, 2000).unref();
    });
  }

  session(call) {
    const s = { cluster: null, peer: call.getPeer(), call, rollups: [], frames: [], ended: false };
    this.streams.push(s);
    call.on('data', (m) => this.onFrame(s, m));
    call.on('end', () => { s.ended = true; call.end(); });
    call.on('error', () => { s.ended = true; });
  }

  send(s, m) {
    if (!s.ended) s.call.write(m);
  }

  onFrame(s, m) {
    const now = process.hrtime.bigint();
    s.frames.push({ t: now, kind: m.payload });
    if (s.cluster === null && m.payload !== 'hello') {
      this.errors.push(`first frame on ${s.peer} is ${m.payload}, not hello`);
      return;
    }
    switch (m.payload) {
      case 'hello':
        if (s.cluster !== null && s.cluster !== m.hello.cluster_id)
          this.errors.push(`second Hello changed the cluster ${s.cluster} -> ${m.hello.cluster_id}`);
        s.cluster = m.hello.cluster_id;
        s.protocol = m.hello.protocol_version;
        this.send(s, { ack: { echo: 'hello', coordinator_term: '0', shard_epoch: '7' } });
        break;
      case 'rollup':
        this.rollupsTotal++;
        s.rollups.push({ t: now, msg: m.rollup });
        this.send(s, { ack: { echo: 'rollup', coordinator_term: '0', shard_epoch: '7' } });
        if (this.opts.autoscale) this.autoscale(s, m.rollup);
        break;
      case 'bootstrap_response': {
        this.bootstrapResponses.push(m.bootstrap_response);
        const cb = this.pendingBoot.get(m.bootstrap_response.request_id);
        if (cb) { this.pendingBoot.delete(m.bootstrap_response.request_id); cb(m.bootstrap_response); }
        break;
      }
      case 'reclaim_ack': {
        this.reclaimAcks.push(m.reclaim_ack);
        const cb = this.pendingReclaim.get(m.reclaim_ack.instruction_id);
        if (cb) { this.pendingReclaim.delete(m.reclaim_ack.instruction_id); cb(m.reclaim_ack); }
        break;
      }
      default:
        this.errors.push(`unexpected operator frame ${m.payload}`);
    }
  }

  nsu(s, mach, state) {
    mach.state = state;
    const t = mach.type;
    const res = { cpu: String(t.cpu / 1000), memory: `${t.mem}Mi` };
    if (t.gpus) res['nvidia.com/gpu'] = String(t.gpus);
    this.send(s, { node_state_update: {
      supersedes_key: `node:${mach.id}`, machine_id: mach.id, state,
      labels: labelsOf(t, mach.zone), resources: { resources: res } } });
  }

  // bind one machine of `type` to cluster s for need key k
  bind(s, type, k) {
    const id = `fake-${type.name}-${this.nextId++}`;
    const mach = { id, type, cluster: s.cluster, needKey: k, zone: ['zone-a', 'zone-b'][this.nextId % 2] };
    this.machines.set(id, mach);
    this.nsu(s, mach, 2); // Creating
    const rid = (this.nextId * 7919).toString(16).padStart(16, '0');
    this.pendingBoot.set(rid, (resp) => {
      if (resp.error) { this.errors.push(`bootstrap error ${resp.error}`); return; }
      this.nsu(s, mach, 4); // Configuring
      this.nsu(s, mach, 5); // Configured
    });
    this.send(s, { bootstrap_request: { request_id: rid, cluster_id: s.cluster,
      requirements: [{ key: 'node.kubernetes.io/instance-type', operator: 1, values: [type.name] }] } });
  }

  reclaim(s, mach) {
    const iid = `r${this.nextId++}`.padStart(16, '0');
    this.pendingReclaim.set(iid, (ack) => {
      if (ack.nodes_started !== 1) this.errors.push(`reclaim ack nodes_started ${ack.nodes_started}`);
      this.nsu(s, mach, 6); // Draining
      this.nsu(s, mach, 3); // Idle (unbound)
      this.machines.delete(mach.id);
    });
    mach.reclaiming = true;
    this.send(s, { reclaim_instruction: { instruction_id: iid, nodes: [mach.id],
      grace_period_seconds: String(this.opts.reclaimGraceSeconds), preemptor_priority: 0 } });
  }

  // A mini engine: credit the cluster's bound machines to its Needs the way
  // the engine's pre-pass does (priority order; Configured, Configuring,
  // Creating; cheapest first), reclaim what no Need claimed, provision the
  // deficits with the cheapest eligible type.
  autoscale(s, rollup) {
    const needs = rollup.needs.map((n, i) => Object.assign(n, { _i: i, _agg: vec(n.aggregate_resources),
      _min: vec(n.min_unit), _key: needKey(n) }));
    const order = [...needs].sort((a, b) => (b.priority - a.priority) || (a._i - b._i));
    const tier = { 5: 0, 4: 1, 2: 2 };
    const mine = [...this.machines.values()].filter((m) => m.cluster === s.cluster && !m.reclaiming)
      .sort((a, b) => (tier[a.state] - tier[b.state]) || (a.type.price - b.type.price) ||
        (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    const claimed = new Map(); // machine id -> need
    const left = new Map();
    for (const n of order) {
      const r = { ...n._agg };
      for (const m of mine) {
        if (r.cpu <= 0 && r.mem <= 0 && r.gpu <= 0) break;
        if (claimed.has(m.id) || !eligible(n, m.type)) continue;
        claimed.set(m.id, n);
        r.cpu -= m.type.cpu; r.mem -= m.type.mem; r.gpu -= m.type.gpus * 1000;
      }
      left.set(n, r);
    }
    for (const m of mine)
      if (!claimed.has(m.id) && m.state === 5) this.reclaim(s, m);
    for (const n of order) {
      const r = left.get(n);
      while (r.cpu > 0 || r.mem > 0 || r.gpu > 0) {
        const types = this.opts.catalog.filter((t) => eligible(n, t)).sort((a, b) => a.price - b.price);
        if (!types.length) { this.errors.push(`no eligible type for ${n._key}`); break; }
        const t = types[0];
        this.bind(s, t, n._key);
        r.cpu -= t.cpu; r.mem -= t.mem; r.gpu -= t.gpus * 1000;
      }
    }
    // fault injection: once, from the rollup badReclaimWhen picks on, reclaim
    // a Configured machine without which a Need it can serve is short even if
    // that Need had every other eligible machine of the cluster (so no claim
    // order could cover it)
    if (this.opts.badReclaimWhen && !this.badReclaimArmed) this.badReclaimArmed = this.opts.badReclaimWhen(rollup);
    if (this.badReclaimArmed && this.badReclaimsSent === 0) {
      const live = mine.filter((m) => m.state === 5 || m.state === 4);
      for (const n of order) {
        const victim = live.find((m) => {
          if (m.state !== 5 || !eligible(n, m.type)) return false;
          const rest = live.filter((o) => o !== m && eligible(n, o.type)).reduce((a, o) => ({
            cpu: a.cpu + o.type.cpu, mem: a.mem + o.type.mem, gpu: a.gpu + o.type.gpus * 1000 }),
          { cpu: 0, mem: 0, gpu: 0 });
          return rest.cpu < n._agg.cpu || rest.mem < n._agg.mem || rest.gpu < n._agg.gpu;
        });
        if (victim) {
          this.badReclaimsSent++;
          this.badVictim = victim.id;
          this.reclaim(s, victim);
          break;
        }
      }
    }
  }
}

// An explicit catalog CSV (type,cpu_milli,memory_mib,gpu,model,capacity_type,
// price_per_hour,interruption_probability) -> [{name, cpu, mem, gpus, model, price}]
function loadCatalog(file) {
  const lines = require('fs').readFileSync(file, 'utf8').split(/\r?\n/).filter((l) => l && l[0] !== '#');
  if (!lines[0].startsWith('type,')) throw new Error(`${file}: not an explicit catalog`);
  return lines.slice(1).map((l) => {
    const f = l.split(',');
    return { name: f[0], cpu: Number(f[1]), mem: Number(f[2]), gpus: Number(f[3]), model: f[4],
      price: Number(f[6]) };
  });
}

// Runs bigfleet-replay; resolves {code, stdout, stderr}.
const BIN = process.env.BIN || path.join(repo, 'build', 'bin');
function runReplay(args, { timeoutMs = 60000 } = {}) {
  const { spawn } = require('child_process');
  return new Promise((resolve) => {
    const p = spawn(path.join(BIN, 'bigfleet-replay'), args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '', stderr = '';
    p.stdout.on('data', (d) => { stdout += d; });
    p.stderr.on('data', (d) => { stderr += d; });
    const timer = setTimeout(() => p.kill('SIGKILL'), timeoutMs);
    p.on('exit', (code, signal) => { clearTimeout(timer); resolve({ code, signal, stdout, stderr }); });
  });
}

// A tiny test harness: named checks, a summary, exit status.
// harness(name): soft checks on node:test. T.run(fn) registers one test,
// `name`, whose body is fn. T.check / T.eq record a failed check and go on;
// await T.ok(msg) closes a step: a subtest named msg that fails with every check
// that failed since the previous step; T.finish() throws (failing the test)
// if a check failed since the last step, so it also ends the test early
// when what follows cannot run. T.skip(reason), before T.run, reports the
// test as skipped (what it needs is missing).
function harness(name) {
  let failures = [];
  let ctx = null;
  let skip = false;
  const T = {
    check(cond, msg) { if (!cond) failures.push(msg); return cond; },
    eq(a, b, msg) {
      const ok = JSON.stringify(a) === JSON.stringify(b);
      if (!ok) failures.push(`${msg}: got ${JSON.stringify(a)}, want ${JSON.stringify(b)}`);
      return ok;
    },
    ok(msg) { /* awaited: the step is reported before the next one runs */
      const failed = failures.splice(0);
      return ctx.test(msg, () => { if (failed.length) throw new Error(failed.join('\n')); });
    },
    finish() {
      const failed = failures.splice(0);
      if (failed.length) throw new Error(`${failed.length} check(s) failed:\n${failed.join('\n')}`);
    },
    skip(reason) { skip = reason; },
    run(fn) {
      nodeTest.test(name, { skip }, async (t) => {
        ctx = t;
        await fn();
        T.finish();
      });
    },
  };
  return T;
}

// The four-type catalog (CPU, a CPU giant, a T4 pair, a bare-metal V100 box)
// that replay_report and replay_session replay their small pod traces on.
const CATALOG = `type,cpu_milli,memory_mib,gpu,model,capacity_type,price_per_hour,interruption_probability
cpu-8,8000,32768,0,,on-demand,0.4,0
cpu-64,64000,262144,0,,on-demand,3.0,0
t4-2,16000,65536,2,T4,on-demand,1.5,0
v100-8,96000,786432,8,V100M32,bare-metal,20.0,0
`;

module.exports = { FakeShard, milli, vec, loadProto, loadCatalog, runReplay, harness, BIN, CATALOG };
