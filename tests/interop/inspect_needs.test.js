// inspect_needs.test.js — `bigfleet-inspect needs --addr` against a fake
// ShardRead server written with @grpc/grpc-js (a real third-party peer):
// the request carries --cluster and --limit, the header frame comes first,
// then NeedView rows, printed the same way as the local view (text and
// --json); a server error, a stream that does not start with a header, an
// unreachable address all exit 1 with a message; mTLS with a readonly
// client certificate works.
//
// Environment (scripts/run-interop-tests): BIN (build/bin), PROTO_DIR.
'use strict';
const path = require('path');
const { execFile } = require('child_process');
const { grpc, loadPkg, makePki, assert, eq } = require('./grpc_lib');
const { register } = require('./register');

const BIN = process.env.BIN || path.resolve(__dirname, '../../build/bin');
const INSPECT = process.env.BF_INSPECT || path.join(BIN, 'bigfleet-inspect');
const pkg = loadPkg();

const GROUP = Buffer.from([0x67, 0x00, 0x01, 0x22, 0x78]); // "g\0\x01\"x"
const T0 = 1780000000000000000n;

function views() {
  return [
    { // Same need, topology-unsatisfiable, parked
      need: {
        requirements: [{ key: 'topology.kubernetes.io/zone', operator: 'OPERATOR_SAME', values: [] }],
        aggregate_resources: { cpu: '8', memory: '32Gi' },
        priority: 300,
        spread: [{ topology_key: 'topology.kubernetes.io/zone', max_skew: 1, when_unsatisfiable: 'WHEN_UNSATISFIABLE_DO_NOT_SCHEDULE' }],
        interruption_penalty_bucket: 'PENALTY_BUCKET_8',
        reclamation_penalty_bucket: 'PENALTY_BUCKET_ZERO',
        min_unit: { cpu: '2' },
        group: GROUP,
      },
      cluster_id: 'alpha',
      arrival_unix_nanos: String(T0),
      profile_fingerprint: 'p=300|ipb=6|rpb=1|reqs=topology.kubernetes.io/zone:5:;|spr=topology.kubernetes.io/zone:1:1;',
      satisfied: false,
      residual_deficit: { resources: { cpu: '6' } },
      claimed_machine_count: 1,
      bootstrap_count: 1,
      same_domain: 'zone-a',
      same_satisfiable: false,
      acquisition_parked: true,
      parked_age_cycles: 9,
      age_cycles_unmet: 12,
      unmet_reason: 'UNMET_REASON_TOPOLOGY_UNSATISFIABLE',
      matching_supply: { idle: 0, configured: 4, speculative: 2, capped: false },
      same_candidates: [{ domain: 'zone-a', coverage_per_mille: 333, satisfiable: false },
        { domain: 'zone-b', coverage_per_mille: 250, satisfiable: false }],
    },
    { // plain need, priority-starved, with a preemption summary
      need: {
        requirements: [{ key: 'node.kubernetes.io/instance-type', operator: 'OPERATOR_IN', values: ['m5.large', 'm5.xlarge'] }],
        aggregate_resources: { cpu: '4' },
        priority: 100,
        interruption_penalty_bucket: 'PENALTY_BUCKET_1',
        reclamation_penalty_bucket: 'PENALTY_BUCKET_1',
      },
      cluster_id: 'alpha',
      arrival_unix_nanos: String(T0 + 1000000000n),
      profile_fingerprint: 'p=100|ipb=3|rpb=3|reqs=node.kubernetes.io/instance-type:1:m5.large,m5.xlarge;|spr=',
      satisfied: false,
      residual_deficit: { resources: { cpu: '2' } },
      age_cycles_unmet: 3,
      unmet_reason: 'UNMET_REASON_PRIORITY_STARVED',
      matching_supply: { idle: 0, configured: 7, speculative: 0, capped: true },
      preemption: { victims_found: 1, capacity_freed: { resources: { cpu: '2' } } },
    },
  ];
}

// A fake ShardRead server; `behaviour` decides what InspectNeeds does.
function startFake(credentials, behaviour) {
  return new Promise((resolve, reject) => {
    const server = new grpc.Server();
    const seen = [];
    server.addService(pkg.ShardRead.service, {
      InspectNeeds: (call) => {
        seen.push(call.request);
        behaviour(call);
      },
    });
    server.bindAsync('127.0.0.1:0', credentials, (err, port) => {
      if (err) return reject(err);
      resolve({ port, seen, stop: () => new Promise(r => server.tryShutdown(() => r())) });
    });
  });
}

const okBehaviour = (call) => {
  call.write({ header: { cycle: '7', computed_at_unix_nanos: String(T0 + 5000000000n), total_needs: 5 } });
  for (const v of views()) call.write({ need: v });
  call.end();
};

function inspect(args) {
  return new Promise((resolve) => {
    execFile(INSPECT, args, { timeout: 20000 }, (err, stdout, stderr) => {
      resolve({ code: err ? (typeof err.code === 'number' ? err.code : -1) : 0, stdout, stderr });
    });
  });
}

register([
  ['filter and limit are sent; header first, then the rows, printed as text', async (ctx) => {
    const r = await inspect(['needs', '--addr', `127.0.0.1:${ctx.plain.port}`, '--cluster', 'alpha', '--limit', '2']);
    eq(r.code, 0, `exit (stderr: ${r.stderr})`);
    const req = ctx.plain.seen[ctx.plain.seen.length - 1];
    eq(req.cluster_id, 'alpha', 'cluster_id sent');
    eq(req.limit, 2, 'limit sent');
    assert(r.stdout.includes(`needs from InspectNeeds 127.0.0.1:${ctx.plain.port}: cycle 7`), r.stdout);
    assert(r.stdout.includes('5 needs in cluster alpha, 2 shown (--limit)'), r.stdout);
    assert(r.stdout.includes('verdict: TOPOLOGY_UNSATISFIABLE'), r.stdout);
    assert(r.stdout.includes('PARKED for 9 cycles'), r.stdout);
    assert(r.stdout.includes('group g\\0\\x01"x'), r.stdout);
    assert(r.stdout.includes('verdict: PRIORITY_STARVED'), r.stdout);
    assert(r.stdout.includes('matching supply: idle 0, configured 7, speculative 0 (capped)'), r.stdout);
    assert(r.stdout.includes('preemption: 1 victims found, capacity freed cpu=2'), r.stdout);
    assert(r.stdout.includes('requirements node.kubernetes.io/instance-type In m5.large,m5.xlarge'), r.stdout);
  }],
  ['--json carries the same NeedViews (proto field names, bytes escaped)', async (ctx) => {
    const r = await inspect(['needs', '--addr', `127.0.0.1:${ctx.plain.port}`, '--json']);
    eq(r.code, 0, `exit (stderr: ${r.stderr})`);
    const req = ctx.plain.seen[ctx.plain.seen.length - 1];
    eq(req.cluster_id, '', 'no filter sent');
    eq(req.limit, 0, 'no limit sent');
    const doc = JSON.parse(r.stdout);
    eq(doc.header.cycle, 7, 'header.cycle');
    eq(doc.header.total_needs, 5, 'header.total_needs');
    eq(doc.header.computed_at_unix_nanos, Number(T0 + 5000000000n), 'computed_at');
    eq(doc.needs.length, 2, 'rows');
    const [a, b] = doc.needs;
    eq(a.need.group, GROUP.toString('latin1'), 'group bytes (NUL, control, quote) survive');
    eq(a.need.group_base64, GROUP.toString('base64'), 'group base64');
    eq(a.need.priority, 300, 'priority');
    eq(a.need.requirements[0].operator, 'Same', 'operator');
    eq(a.need.spread[0].when_unsatisfiable, 'DoNotSchedule', 'spread');
    eq(a.need.interruption_penalty_bucket, 6, 'ipb');
    eq(a.need.aggregate_resources.memory, '32Gi', 'aggregate');
    eq(a.need.min_unit.cpu, '2', 'min_unit');
    eq(a.cluster_id, 'alpha', 'cluster');
    eq(a.unmet_reason, 'UNMET_REASON_TOPOLOGY_UNSATISFIABLE', 'reason');
    eq(a.residual_deficit.cpu, '6', 'residual');
    eq(a.same_domain, 'zone-a', 'same_domain');
    eq(a.acquisition_parked, true, 'parked');
    eq(a.parked_age_cycles, 9, 'parked age');
    eq(a.same_candidates[1].coverage_per_mille, 250, 'candidates');
    eq(a.matching_supply.speculative, 2, 'matching supply');
    eq(a.preemption, null, 'no preemption summary');
    eq(b.preemption.victims_found, 1, 'victims');
    eq(b.preemption.capacity_freed.cpu, '2', 'freed');
    eq(b.need.requirements[0].values.join(','), 'm5.large,m5.xlarge', 'values');
    eq(b.profile_fingerprint, views()[1].profile_fingerprint, 'fingerprint');
    eq(b.satisfied, false, 'satisfied');
  }],
  ['a header with cycle 0 and no rows is "not yet computed"', async (ctx) => {
    const r = await inspect(['needs', '--addr', `127.0.0.1:${ctx.empty.port}`]);
    eq(r.code, 0, `exit (stderr: ${r.stderr})`);
    assert(r.stdout.includes('not yet computed'), r.stdout);
  }],
  ['a server error exits 1 naming the code and message', async (ctx) => {
    const r = await inspect(['needs', '--addr', `127.0.0.1:${ctx.denied.port}`]);
    eq(r.code, 1, 'exit');
    assert(r.stderr.includes('PERMISSION_DENIED') && r.stderr.includes('requires client certificate URI SAN'), r.stderr);
    eq(r.stdout, '', 'no output');
  }],
  ['a stream that does not start with the header exits 1', async (ctx) => {
    const r = await inspect(['needs', '--addr', `127.0.0.1:${ctx.noheader.port}`]);
    eq(r.code, 1, 'exit');
    assert(r.stderr.includes('protocol error') && r.stderr.includes('not the header'), r.stderr);
  }],
  ['an unreachable address exits 1', async () => {
    const r = await inspect(['needs', '--addr', '127.0.0.1:1', '--timeout', '3s']);
    eq(r.code, 1, 'exit');
    assert(r.stderr.includes('InspectNeeds on 127.0.0.1:1 failed'), r.stderr);
  }],
  ['mTLS with a bigfleet://readonly client certificate', async (ctx) => {
    const p = ctx.pki.p;
    const r = await inspect(['needs', '--addr', `127.0.0.1:${ctx.tls.port}`, '--tls-cert', p('readonly.crt'),
      '--tls-key', p('readonly.key'), '--tls-ca', p('ca.crt'), '--tls-server-name', 'localhost', '--json',
      '--cluster', 'alpha']);
    eq(r.code, 0, `exit (stderr: ${r.stderr})`);
    const doc = JSON.parse(r.stdout);
    eq(doc.needs.length, 2, 'rows over mTLS');
    eq(ctx.tls.seen[0].cluster_id, 'alpha', 'cluster over mTLS');
    // a client that does not trust the server's CA fails the handshake
    const r2 = await inspect(['needs', '--addr', `127.0.0.1:${ctx.tls.port}`, '--tls-cert', p('readonly.crt'),
      '--tls-key', p('readonly.key'), '--tls-ca', p('other-ca.crt'), '--tls-server-name', 'localhost',
      '--timeout', '3s']);
    eq(r2.code, 1, 'untrusted server: exit 1');
  }],
], {
  timeout: 30000,
  before: async () => {
    const insecure = grpc.ServerCredentials.createInsecure();
    const pki = makePki({ server: 'DNS:localhost,IP:127.0.0.1', readonly: 'URI:bigfleet://readonly' }, ['other-ca']);
    const tlsCreds = grpc.ServerCredentials.createSsl(pki.read('ca.crt'),
      [{ cert_chain: pki.read('server.crt'), private_key: pki.read('server.key') }], true);
    return {
      pki,
      plain: await startFake(insecure, okBehaviour),
      empty: await startFake(insecure, (call) => {
        call.write({ header: { cycle: '0', computed_at_unix_nanos: '0', total_needs: 0 } });
        call.end();
      }),
      denied: await startFake(insecure, (call) => call.emit('error', {
        code: grpc.status.PERMISSION_DENIED,
        details: 'shard: InspectNeeds requires client certificate URI SAN bigfleet://readonly or bigfleet://admin (got bigfleet://cluster/x)',
      })),
      noheader: await startFake(insecure, (call) => { call.write({ need: views()[0] }); call.end(); }),
      tls: await startFake(tlsCreds, okBehaviour),
    };
  },
  after: async (ctx) => {
    for (const k of ['plain', 'empty', 'denied', 'noheader', 'tls']) if (ctx[k]) await ctx[k].stop();
    if (ctx.pki) ctx.pki.cleanup();
  },
});
