// quotas.test.js — one cluster cannot fill the shard's shared tables for
// everyone (issue 13 part 4 and the first report's item 5): resource names
// (the Kubernetes ones are reserved; a cluster may add 2, and a rejected
// rollup registers none), Need rows, distinct groups and string-table bytes
// are per-cluster quotas whose overrun rejects the rollup with a clear
// reason; a timestamp in the future or the distant past gives way to the
// receive time; a priority above --max-priority is clamped. Also: plaintext
// is announced (warn line, bigfleet_appliance_insecure_plaintext 1). The
// hostile cluster speaks from 127.0.0.2 while a well-behaved operator on
// another connection keeps working.
'use strict';
const { before, after } = require('node:test');
const H = require('./lib');

const { assert, sleep, need } = H;
const dump = (S, c) => H.L.shm(S.id, 'dump', ...(c ? [c] : []));
const quota = (q) => `bigfleet_shard_session_rollups_over_quota_total{quota="${q}"}`;

let S, op;
before(async () => ({ S, op } = await H.setUp({ args: ['--cluster-max-string-kib=512', '--cluster-max-groups=100'] })));
after(() => H.tearDown('quotas', S, op));
const test = H.checks(() => S);
test('plaintext is announced: a warn line and bigfleet_appliance_insecure_plaintext 1', async () => {
  assert.match(S.log(), /level=warn role=session .*gRPC is PLAINTEXT/);
  assert.strictEqual((await H.metrics(S)).get('bigfleet_appliance_insecure_plaintext'), 1);
  assert.deepStrictEqual(dump(S).dims.slice(0, 4), ['cpu', 'memory', 'nvidia.com/gpu', 'ephemeral-storage'],
    'the Kubernetes resource names are reserved at start');
});

test('resource names: 6 new ones are refused and none registered; the cluster may add 2', async () => {
  const h = new H.HostileSession(S.port, 'h-dims');
  await h.hello();
  const dims0 = dump(S).dims;
  const six = Object.fromEntries(Array.from({ length: 6 }, (_, i) => [`example.com/r${i}`, '1']));
  await H.attack(S, op, {
    name: 'dims-fill',
    what: 'rollups naming 6 resources the shard does not know (the registry has 8 slots, 4 reserved)',
    rssBoundMB: 100,
    counters: [[quota('dims'), 1]],
    log: /the rollup names 6 resource\(s\) the shard does not know .*may add at most 2/,
    run: async (until) => {
      do {
        assert.strictEqual(await h.rollupAcked([need({ aggregate: six })]), false, 'not acked');
        await sleep(100);
      } while (Date.now() < until);
    },
  });
  assert.deepStrictEqual(dump(S).dims, dims0, 'nothing registered for the rejected rollups');
  assert.ok(await h.rollupAcked([need({ aggregate: { cpu: '1', 'example.com/r0': '1', 'example.com/r1': '2' } })]),
    'two new names are within the quota');
  assert.deepStrictEqual(dump(S).dims, [...dims0, 'example.com/r0', 'example.com/r1']);
  assert.strictEqual(await h.rollupAcked([need({ aggregate: { 'example.com/r2': '1' } })]), false,
    'a third is refused');
  assert.strictEqual(dump(S).dims.length, dims0.length + 2);
  h.close();
});

test('Need rows over the cluster quota (a quarter of --max-needs) reject the rollup', async () => {
  const h = new H.HostileSession(S.port, 'h-rows');
  await h.hello();
  await H.attack(S, op, {
    name: 'need-rows',
    what: 'rollups of 1,025 Needs (cluster quota 1,024 of --max-needs 4,096)',
    rssBoundMB: 100,
    counters: [[quota('needs'), 1]],
    log: /1025 needs in one rollup; the cluster may hold at most 1024 rows/,
    run: async (until) => {
      const many = Array.from({ length: 1025 }, (_, i) => need({ priority: i }));
      do {
        assert.strictEqual(await h.rollupAcked(many), false);
      } while (Date.now() < until);
    },
  });
  const c = dump(S, 'h-rows').clusters.find((x) => x.name === 'h-rows');
  assert.strictEqual(c.rows_count, 0, 'no rows taken');
  h.close();
});

test('groups over the quota (--cluster-max-groups 100 here) reject the rollup', async () => {
  const h = new H.HostileSession(S.port, 'h-groups');
  await h.hello();
  await H.attack(S, op, {
    name: 'groups',
    what: 'rollups of 101 Needs with distinct co-location groups (quota 100)',
    rssBoundMB: 100,
    counters: [[quota('groups'), 1]],
    log: /more than 100 distinct groups in one rollup/,
    run: async (until) => {
      const many = Array.from({ length: 101 }, (_, i) => need({ group: Buffer.from(`g-${i}`) }));
      do {
        assert.strictEqual(await h.rollupAcked(many), false);
      } while (Date.now() < until);
    },
  });
  h.close();
});

test('string-table bytes over the cluster quota (512 KiB here) reject the rollup; the table stops growing', async () => {
  const h = new H.HostileSession(S.port, 'h-strings');
  await h.hello();
  const used0 = dump(S).strtab_used;
  let k = 0;
  await H.attack(S, op, {
    name: 'string-table',
    what: 'rollups of 100 Needs each with a fresh 4 KiB group id (400 KiB of new strings per rollup)',
    rssBoundMB: 100,
    counters: [[quota('strings'), 1]],
    log: /the cluster's string-table quota is used up/,
    run: async (until) => {
      do {
        const needs = Array.from({ length: 100 }, () => need({ group: Buffer.alloc(4096, 97 + (k++ % 26)).fill(String(k), 0) }));
        await h.rollupAcked(needs);
      } while (Date.now() < until);
    },
  });
  const grown = dump(S).strtab_used - used0;
  assert.ok(grown <= (512 + 64) * 1024, `the string table grew by ${grown} bytes`);
  h.close();
});

test('timestamps in the future or the distant past give way to the receive time; priorities are clamped', async () => {
  const h = new H.HostileSession(S.port, 'h-time');
  await h.hello();
  await H.attack(S, op, {
    name: 'timestamps-and-priority',
    what: 'rollups with timestamp_unix_nanos 0, 1 hour ahead, and priority 2^31-1',
    rssBoundMB: 100,
    counters: [['bigfleet_shard_session_rollup_timestamps_clamped_total', 2],
      ['bigfleet_shard_session_priorities_clamped_total', 1]],
    run: async (until) => {
      let i = 0;
      do {
        const t0 = BigInt(Date.now()) * 1000000n;
        const ts = i++ % 2 ? 0n : t0 + 3600n * 1000000000n;
        assert.ok(await h.rollupAcked([need({ priority: 2147483647 })], ts), 'acked');
        const row = dump(S, 'h-time').clusters.find((x) => x.name === 'h-time').rows[0];
        assert.ok(BigInt(row.arrival_ns) >= t0 - 1000000000n && BigInt(row.arrival_ns) <= BigInt(Date.now()) * 1000000n,
          `arrival ${row.arrival_ns} is the receive time`);
        assert.strictEqual(row.priority, 1000000000);
        await sleep(100);
      } while (Date.now() < until);
    },
  });
  h.close();
});
