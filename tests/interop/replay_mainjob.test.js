#!/usr/bin/env node
// replay_mainjob.test.js: scripts/run-main-job (what `make run` runs),
// rehearsed against a stand-in appliance: a BUILD directory whose
// bigfleet-shardd is a small node program (the grpc-js autoscaling fake
// shard of replay_fakeshard.js on --listen, /readyz and /metrics on
// --metrics-addr) next to the real bigfleet-replay. Proves the job's
// orchestration, independently of the shard's own progress:
//   - bigfleet-shardd gets a unique --id, a private --data-dir, free ports,
//     --cycle-interval, the inventory sizes, and --sim-args naming the openb
//     node list and the Speculative slots (per node x clusters);
//   - the replay waits for /readyz, runs against --listen with
//     --metrics-addr, and writes report.json, report.txt and both plots plus
//     shardd.log into RESULTS;
//   - the appliance is stopped with SIGTERM and nothing is left behind;
//     a stand-in that ignores SIGTERM is killed and reported (exit 1);
//   - a stand-in that dies before /readyz fails the job with its log.
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawn } = require('child_process');
const { harness, BIN } = require('./replay_fakeshard.js');

const T = harness('replay_mainjob');
const repo = path.resolve(__dirname, '..', '..');
const shared = path.resolve(repo, '..', 'shared');
if (!fs.existsSync(path.join(shared, 'data', 'openb', 'openb_pod_list_default.csv'))) {
  T.skip('no ../shared/data/openb');
}
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'replay-mainjob-'));

// the stand-in appliance; MODE selects its behaviour
const STANDIN = `#!/usr/bin/env node
'use strict';
const fs = require('fs');
const http = require('http');
const { execFileSync } = require('child_process');
const { FakeShard, loadCatalog } = require(${JSON.stringify(path.join(__dirname, 'replay_fakeshard.js'))});
const args = process.argv.slice(2);
fs.writeFileSync(process.env.STANDIN_ARGS, JSON.stringify(args));
const get = (f) => { const i = args.indexOf(f); return i >= 0 ? args[i + 1] : undefined; };
const mode = process.env.STANDIN_MODE || 'ok';
if (mode === 'die') { console.error('stand-in: cannot start (as asked)'); process.exit(3); }
const sim = get('--sim-args').split(' ');
const nodes = sim.find((a) => a.startsWith('--catalog=')).slice(10);
const cat = require('path').join(process.env.STANDIN_TMP, 'catalog.csv');
fs.writeFileSync(cat, execFileSync(process.env.STANDIN_REPLAY, ['--trace', process.env.STANDIN_TRACE,
  '--catalog', nodes, '--print-catalog']));
(async () => {
  const shard = new FakeShard({ autoscale: true, catalog: loadCatalog(cat) });
  await shard.start(get('--listen'));
  const [h, p] = get('--metrics-addr').split(':');
  http.createServer((req, res) => {
    if (req.url === '/readyz') { res.end('ok'); return; }
    if (req.url === '/metrics') {
      res.end('# TYPE bigfleet_shard_actions_total counter\\n' +
        'bigfleet_shard_actions_total{kind="Provision"} ' + shard.nextId + '\\n' +
        'bigfleet_shard_idle_releases_total 0\\n' +
        'bigfleet_shard_inventory_machines{state="Configured",capacity_type="OnDemand",interruption_penalty_bucket="0"} ' +
        shard.machines.size + '\\n');
      return;
    }
    res.statusCode = 404; res.end();
  }).listen(Number(p), h);
  process.on('SIGTERM', () => { if (mode !== 'stubborn') process.exit(0); });
})();
`;

function runJob(env, extra = []) {
  return new Promise((resolve) => {
    const p = spawn('bash', [path.join(repo, 'scripts', 'run-main-job'), env.BUILD, ...extra],
      { env: Object.assign({}, process.env, env), stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '', stderr = '';
    p.stdout.on('data', (d) => { stdout += d; });
    p.stderr.on('data', (d) => { stderr += d; });
    const timer = setTimeout(() => p.kill('SIGKILL'), 90000);
    p.on('exit', (code) => { clearTimeout(timer); resolve({ code, stdout, stderr }); });
  });
}

T.run(async () => {
  const build = path.join(tmp, 'build');
  fs.mkdirSync(path.join(build, 'bin'), { recursive: true });
  fs.writeFileSync(path.join(build, 'bin', 'bigfleet-shardd'), STANDIN, { mode: 0o755 });
  fs.writeFileSync(path.join(build, 'bin', 'bigfleet-simprovider'), '#!/bin/sh\nexit 0\n', { mode: 0o755 });
  fs.symlinkSync(path.join(BIN, 'bigfleet-replay'), path.join(build, 'bin', 'bigfleet-replay'));
  const argsFile = path.join(tmp, 'args.json');
  const base = { BUILD: build, STANDIN_ARGS: argsFile, STANDIN_TMP: tmp,
    STANDIN_REPLAY: path.join(BIN, 'bigfleet-replay'),
    STANDIN_TRACE: path.join(shared, 'data', 'openb', 'openb_pod_list_default.csv'),
    WALL: '4s', ROLLUP_INTERVAL: '100ms', CLUSTERS: '2' };

  // 1. the whole job
  const results = path.join(tmp, 'results');
  let r = await runJob(Object.assign({ RESULTS: results }, base), ['--settle', '300ms', '--progress', 'plain']);
  T.eq(r.code, 0, `job exit status (stderr: ${r.stderr.slice(-1500)})`);
  const a = JSON.parse(fs.readFileSync(argsFile, 'utf8'));
  const get = (f) => a[a.indexOf(f) + 1];
  T.check(/^mainjob-\d+-\d+$/.test(get('--id')), `unique --id ${get('--id')}`);
  T.check(get('--data-dir').includes('bigfleet-main-job.'), 'private --data-dir');
  T.eq(get('--cycle-interval'), '250ms', '--cycle-interval (the default CYCLE_INTERVAL)');
  const ports = ['--listen', '--metrics-addr', '--sim-listen'].map((f) => get(f));
  T.check(ports.every((x) => /^127\.0\.0\.1:\d+$/.test(x)) && new Set(ports).size === 3, `three ports ${ports}`);
  const sim = get('--sim-args');
  T.check(sim.includes(`--catalog=${path.join(shared, 'data', 'openb')}/openb_node_list_all_node.csv`) &&
    sim.includes('--seed-speculative-per-node=2') && sim.includes('--seed-speculative=16'), `--sim-args ${sim}`);
  T.check(Number(get('--max-machines')) >= 2 * 1523 + 16 * 27, '--max-machines covers the slots');
  for (const f of ['report.json', 'report.txt', 'demand.svg', 'binding-latency.svg', 'shardd.log'])
    T.check(fs.existsSync(path.join(results, f)), `RESULTS holds ${f}`);
  const rep = JSON.parse(fs.readFileSync(path.join(results, 'report.json'), 'utf8'));
  T.eq(rep.replay.clusters, 2, 'report: 2 clusters');
  T.eq(rep.acceptance.pass, true, 'report: acceptance');
  T.check(rep.shard_metrics && rep.shard_metrics.actions_total.Provision > 0, 'the final /metrics scrape is in the report');
  T.check(/appliance ready/.test(r.stderr) && /stopped cleanly/.test(r.stderr), 'ready, then stopped cleanly');
  T.check(/replay +\d+\.\d%.*act\/s/.test(r.stderr), 'the progress line shows actions/s from /metrics');
  T.check(/acceptance   PASS/.test(r.stdout), 'the report is printed');
  await T.ok('run-main-job: starts, waits for /readyz, replays, reports, stops cleanly');

  // 2. an appliance that ignores SIGTERM is killed and the job fails
  r = await runJob(Object.assign({ RESULTS: path.join(tmp, 'r2'), STANDIN_MODE: 'stubborn', WALL: '1s', STOP_TIMEOUT: '1' }, base),
    ['--settle', '0s', '--progress', 'off']);
  T.eq(r.code, 1, 'a stubborn appliance fails the job');
  T.check(/still running 1 s after SIGTERM; killing it/.test(r.stderr), `says so: ${r.stderr.slice(-400)}`);
  await T.ok('an appliance that does not stop is killed and reported');

  // 3. an appliance that dies before /readyz
  r = await runJob(Object.assign({ RESULTS: path.join(tmp, 'r3'), STANDIN_MODE: 'die' }, base));
  T.eq(r.code, 1, 'a dead appliance fails the job');
  T.check(/exited with status 3 before it was ready/.test(r.stderr) && /cannot start \(as asked\)/.test(r.stderr),
    `shows the log: ${r.stderr.slice(-400)}`);
  await T.ok('an appliance that dies at start fails the job with its log');

  fs.rmSync(tmp, { recursive: true, force: true });
  T.finish();
});
