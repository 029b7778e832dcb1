#!/usr/bin/env node
// replay_cli.test.js: bigfleet-replay's command line on bad input and bad
// conditions. Proves: a missing file, a malformed row or a bad catalog row
// fails with exit status 2 and a message naming the file (and line);
// --skip-bad-rows replays anyway and counts the rows in the report; usage
// errors name the flag; an unreachable shard fails with exit status 1
// after --connect-timeout, saying how many sessions were accepted and why;
// --explain prints the mapping without connecting.
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const { FakeShard, runReplay, harness } = require('./replay_fakeshard.js');

const T = harness('replay_cli');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'replay-cli-'));
const HDR = 'name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n';
const good = path.join(tmp, 'good.csv');
const bad = path.join(tmp, 'bad.csv');
fs.writeFileSync(good, `${HDR}a,1000,1024,0,0,,LS,Running,0,100,0\nb,2000,1024,1,500,,BE,Running,20,80,20\n`);
fs.writeFileSync(bad, `${HDR}a,1000,1024,0,0,,LS,Running,0,100,0\nb,x,1024,0,0,,BE,Running,20,80,20\n` +
  'c,1000,1024,0,0,,LS,Running,30,90,30\n');
const badcat = path.join(tmp, 'badcat.csv');
fs.writeFileSync(badcat, 'sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,0,\nn1,lots,65536,0,\n');

T.run(async () => {
  let r = await runReplay(['--trace', path.join(tmp, 'nope.csv')]);
  T.eq(r.code, 2, 'missing trace: exit 2');
  T.check(r.stderr.includes(`${path.join(tmp, 'nope.csv')}: No such file or directory`), `names the file: ${r.stderr}`);

  r = await runReplay(['--trace', bad]);
  T.eq(r.code, 2, 'malformed row: exit 2');
  T.check(r.stderr.includes(`${bad}:3: cpu_milli: "x" is not a non-negative integer`), `names file and line: ${r.stderr}`);

  r = await runReplay(['--trace', good, '--catalog', badcat]);
  T.eq(r.code, 2, 'bad catalog: exit 2');
  T.check(r.stderr.includes(`${badcat}:3`), `names the catalog line: ${r.stderr}`);

  r = await runReplay(['--trace', good, '--catalog', path.join(tmp, 'nocat.csv')]);
  T.eq(r.code, 2, 'missing catalog: exit 2');
  T.check(r.stderr.includes('nocat.csv'), `names the catalog: ${r.stderr}`);
  await T.ok('bad input: exit 2 naming the file and line');

  r = await runReplay(['--trace', good, '--speed', 'fast']);
  T.eq(r.code, 2, 'bad --speed');
  T.check(r.stderr.includes('--speed'), `names the flag: ${r.stderr}`);
  r = await runReplay(['--trace', good, '--frobnicate']);
  T.eq(r.code, 2, 'unknown flag');
  T.check(r.stderr.includes('--frobnicate'), `names the flag: ${r.stderr}`);
  r = await runReplay(['--trace', good, '--speed', '10', '--wall', '1s']);
  T.eq(r.code, 2, '--speed with --wall');
  r = await runReplay(['--trace', good, '--from', '200', '--until', '100']);
  T.eq(r.code, 2, 'empty window');
  T.check(r.stderr.includes('empty window'), r.stderr);
  await T.ok('usage errors: exit 2 naming the flag');

  r = await runReplay(['--trace', good, '--explain']);
  T.eq(r.code, 0, '--explain');
  T.check(/2 pods -> 2 classes/.test(r.stdout) && r.stdout.includes('p=10000|ipb=15|rpb=16|reqs=nvidia.com/gpu.product:4:;|spr='),
    `--explain prints the classes: ${r.stdout}`);
  await T.ok('--explain prints the mapping without a shard');

  // nothing listens on this port
  const s0 = new FakeShard();
  const deadPort = await s0.start();
  await s0.stop();
  const t0 = Date.now();
  r = await runReplay(['--trace', good, '--shard-addr', `127.0.0.1:${deadPort}`, '--connect-timeout', '1s',
    '--progress', 'off']);
  T.eq(r.code, 1, 'unreachable shard: exit 1');
  T.check(r.stderr.includes(`only 0 of 1 sessions to 127.0.0.1:${deadPort} were accepted within 1 s`) &&
    r.stderr.includes('last error: openb-0: UNAVAILABLE'), `says why: ${r.stderr}`);
  T.check(Date.now() - t0 < 5000, 'gives up after --connect-timeout');
  await T.ok('an unreachable shard: exit 1 after --connect-timeout, with the last error');

  // --skip-bad-rows: replays, and the report counts the skipped row
  const shard = new FakeShard();
  const port = await shard.start();
  const rep = path.join(tmp, 'rep');
  r = await runReplay(['--trace', bad, '--skip-bad-rows', '--shard-addr', `127.0.0.1:${port}`,
    '--speed', '100', '--rollup-interval', '100ms', '--settle', '0s', '--progress', 'off', '--report', rep]);
  await shard.stop();
  T.eq(r.code, 0, `--skip-bad-rows replays (${r.stderr})`);
  T.check(r.stderr.includes(`skipped 1 malformed row of ${bad} (first: ${bad}:3: cpu_milli`), r.stderr);
  const j = JSON.parse(fs.readFileSync(path.join(rep, 'report.json'), 'utf8'));
  T.eq([j.input.rows, j.input.pods, j.input.skipped_rows], [3, 2, 1], 'report input counts');
  T.check(j.input.skipped_samples[0].startsWith(`${bad}:3:`), 'report keeps the skipped row message');
  // 100 s of trace at 100x, a rollup per 100 ms: rollups 0..10. A rollup
  // whose tick came late (a loaded machine) is skipped, never queued, and
  // counted: sent + skipped covers the whole window
  T.eq(shard.rollupsTotal, j.protocol.rollups_sent, 'the shard got every rollup sent');
  T.check(j.protocol.rollups_sent + j.protocol.ticks_skipped >= 11 && j.protocol.rollups_sent >= 2,
    `the rest of the trace was replayed (${j.protocol.rollups_sent} sent, ${j.protocol.ticks_skipped} skipped)`);
  await T.ok('--skip-bad-rows skips, counts and replays the rest');

  fs.rmSync(tmp, { recursive: true, force: true });
  T.finish();
});
