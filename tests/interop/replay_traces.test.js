#!/usr/bin/env node
// replay_traces.test.js: `make run TRACE=<file>` for every pod list shipped in
// ../shared/data/openb (found by name, so a new list gets its test), each a
// short window through scripts/run-main-job against the real appliance
// (bigfleet-shardd + embedded simulated provider). Proves, per file:
//   - the job runs end to end: the appliance starts, the replay finishes
//     with a verdict (exit 0 = acceptance met, 3 = not met, and the exit
//     status is the report's verdict), the appliance stops cleanly (else
//     exit 1); the report names the file and states the wall -> trace time
//     mapping in its first lines;
//   - pods reached the shard (seen in a rollup), machines were bound, and no
//     machine was reclaimed while its Need still required it;
//   - a list without times (the multigpu snapshots) replays as a snapshot.
// Then, through the same script: a pod list whose header the replay cannot
// use fails with exit 2 and the replay's own message (file, line 1, every
// missing column), before any appliance is started; and a short contended
// run (CONTENDED=1) preempts, judges every preemption and reads the shard's
// verdicts.
//
// Speed is measured in benchmarks, not asserted here: the acceptance
// criteria about how fast the shard keeps up in a 6 s window (satisfied at
// the peak >= 99 %, binding p99 <= rollup interval + 2 cycles) depend on how
// loaded the machine is, so they are printed with each file's result, and
// `make run` (the benchmark of the main job) is where they are judged.
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawn } = require('child_process');
const { harness, BIN } = require('./replay_fakeshard.js');

const T = harness('replay_traces');
const repo = path.resolve(__dirname, '..', '..');
const shared = path.resolve(repo, '..', 'shared');
const openb = path.join(shared, 'data', 'openb');
if (!fs.existsSync(path.join(openb, 'openb_node_list_all_node.csv')) ||
    !fs.existsSync(path.join(BIN, 'bigfleet-shardd')) || !fs.existsSync(path.join(BIN, 'bigfleet-simprovider'))) {
  T.skip('no ../shared/data/openb, or the appliance is not built');
}
const build = path.dirname(BIN);
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'replay-traces-'));

function runJob(env, extra = [], timeoutMs = 240000) {
  return new Promise((resolve) => {
    const p = spawn('bash', [path.join(repo, 'scripts', 'run-main-job'), build, ...extra],
      { env: Object.assign({}, process.env, env), stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '', stderr = '';
    p.stdout.on('data', (d) => { stdout += d; });
    p.stderr.on('data', (d) => { stderr += d; });
    const timer = setTimeout(() => p.kill('SIGKILL'), timeoutMs);
    p.on('exit', (code) => { clearTimeout(timer); resolve({ code, stdout, stderr }); });
  });
}

T.run(async () => {
  const lists = fs.readdirSync(openb).filter((f) => /^openb_pod_list_.*\.csv$/.test(f)).sort();
  T.check(lists.length >= 5, `the shipped pod lists: ${lists}`);
  for (const trace of lists) {
    const results = path.join(tmp, trace);
    const r = await runJob({ TRACE: trace, RESULTS: results, CLUSTERS: '1', WALL: '6s', WINDOW: '12h',
      ROLLUP_INTERVAL: '200ms', CYCLE_INTERVAL: '200ms' }, ['--settle', '1s', '--progress', 'off']);
    T.check(r.code === 0 || r.code === 3,
      `make run TRACE=${trace}: exit 0 or 3 (${r.code}: ${r.stdout.slice(-600)} ${r.stderr.slice(-800)})`);
    if (!T.check(fs.existsSync(path.join(results, 'report.json')), `${trace}: report.json written`)) continue;
    const j = JSON.parse(fs.readFileSync(path.join(results, 'report.json'), 'utf8'));
    T.eq(r.code === 0, j.acceptance.pass, `${trace}: the exit status is the report's verdict`);
    T.eq(j.acceptance.no_reclaims_of_still_demanded, true,
      `${trace}: no reclaim of a still-demanded machine (${JSON.stringify(j.reclaims_still_demanded)})`);
    T.check(j.input.trace.endsWith(trace), `${trace}: the report names it`);
    T.check(j.pods.observed > 0 && j.pods.window >= j.pods.observed, `${trace}: pods seen ${j.pods.observed} of ${j.pods.window}`);
    T.check(j.machines.provisioned > 0, `${trace}: machines bound (${j.machines.provisioned})`);
    const head = r.stdout.split('\n').filter((l) => l.trim()).slice(1, 3).join('\n');
    T.check(/^ {2}time {9}trace day \d+ \d\d:\d\d \.\. day \d+ \d\d:\d\d .* replayed in \d+ s of wall time\n {15}1 s of wall time = .* of trace/.test(head),
      `${trace}: the first lines map wall time to trace time:\n${head}`);
    const timed = fs.readFileSync(path.join(openb, trace), 'utf8').split('\n')[0].includes('creation_time');
    T.eq(j.input.snapshot !== null, !timed, `${trace}: replayed as a snapshot iff it has no times`);
    await T.ok(`make run TRACE=${trace} runs end to end (figures, not asserted: satisfied at peak ` +
      `${j.satisfied.at_peak ? j.satisfied.at_peak.min : null}, binding p99 ${j.binding_latency_s.p99} s ` +
      `(target ${j.binding_latency_s.target_p99} s), acceptance ${j.acceptance.pass ? 'PASS' : 'FAIL'})`);
  }

  // a header the replay cannot use: the replay's own message, nothing started
  const bad = path.join(tmp, 'shared');
  fs.mkdirSync(path.join(bad, 'data', 'openb'), { recursive: true });
  fs.copyFileSync(path.join(openb, 'openb_node_list_all_node.csv'), path.join(bad, 'data', 'openb', 'openb_node_list_all_node.csv'));
  fs.writeFileSync(path.join(bad, 'data', 'openb', 'pods.csv'), 'name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_tme\np,1,1,0,0,5\n');
  let r = await runJob({ SHARED: bad, TRACE: 'pods.csv', RESULTS: path.join(tmp, 'bad'), SNAPSHOT: 'off' });
  T.eq(r.code, 2, `a pod list with an unusable header: exit 2 (${r.stderr})`);
  T.check(r.stderr.includes(`${path.join(bad, 'data', 'openb', 'pods.csv')}:1: header: missing columns qos, creation_time, deletion_time`),
    `the replay names the file, the line and every missing column: ${r.stderr}`);
  T.check(!/catalog/.test(r.stderr) && !/starting bigfleet-shardd/.test(r.stderr),
    `no message about the catalog, and no appliance started: ${r.stderr}`);
  await T.ok('an unusable header fails with the replay\'s own message, before anything starts');

  // contended: the production fleet only, demand above it
  const cres = path.join(tmp, 'contended');
  r = await runJob({ CONTENDED: '1', RESULTS: cres, WALL: '20s' }, ['--settle', '1s', '--progress', 'off',
    '--inspect-interval', '1s']);
  T.check(r.code === 0 || r.code === 3, `contended run: exit 0 or 3 (${r.stdout.slice(-800)} ${r.stderr.slice(-600)})`);
  if (fs.existsSync(path.join(cres, 'report.json'))) {
    const j = JSON.parse(fs.readFileSync(path.join(cres, 'report.json'), 'utf8'));
    T.eq(j.acceptance.contended, true, 'the contended criteria were applied');
    T.eq(r.code === 0, j.acceptance.pass, 'the exit status is the verdict');
    T.check(j.preemptions.total >= 1, `preemptions: ${j.preemptions.total}`);
    const judged = Object.values(j.preemptions.by_preemptor).reduce((a, v) => a + Object.values(v).reduce((x, y) => x + y, 0), 0);
    T.eq(judged, j.preemptions.total, 'every preemption is classified by preemptor and victim class');
    T.check(j.shard_verdicts && j.shard_verdicts.polls > 0 && j.shard_verdicts.most_unsatisfied.unsatisfied > 0,
      `the shard's verdicts show unsatisfied Needs: ${JSON.stringify(j.shard_verdicts)}`);
    T.check(j.satisfied.by_qos.LS.over_run !== null && j.satisfied.by_qos.BE.over_run !== null, 'satisfaction per qos class');
    T.check(/preemptions {2}\d+; by /.test(r.stdout), 'the report prints the preemptions');
  }
  await T.ok('a contended run preempts, and every preemption is judged');

  fs.rmSync(tmp, { recursive: true, force: true });
  T.finish();
});
