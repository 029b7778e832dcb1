#!/usr/bin/env node
// replay_shardd.test.js: bigfleet-replay against the real appliance:
// bigfleet-shardd with its embedded simulated provider seeded from the openb
// node list (a short `make run`: 3 clusters, 6 s, 200 ms rollups and cycles).
// Proves: every rollup the replay sends passes the shard's ingest
// validation (received = accepted = sent = acknowledged, none rejected);
// the Need rows the shard holds at the end are exactly the Needs of each
// cluster's last rollup; one session per cluster is installed and removed
// cleanly when the replay half-closes; the shard provisions through the
// session (bootstrap blobs, node updates) and the replay's acceptance
// criteria hold (--check); the appliance stops cleanly.
'use strict';

// The appliance refuses to run its children as root unless told (docs/operating.md
// "Least privilege"); the tests run as root in CI and keep the children root.
if (process.getuid && process.getuid() === 0) {
  if (process.env.BIGFLEET_SHARDD_USER === undefined) process.env.BIGFLEET_SHARDD_USER = 'root';
  if (process.env.BIGFLEET_SHARDD_ALLOW_ROOT === undefined) process.env.BIGFLEET_SHARDD_ALLOW_ROOT = 'true';
}

const fs = require('fs');
const os = require('os');
const path = require('path');
const http = require('http');
const { spawn } = require('child_process');
const { runReplay, harness, BIN } = require('./replay_fakeshard.js');

const T = harness('replay_shardd');
const shardd = path.join(BIN, 'bigfleet-shardd');
const openb = path.resolve(__dirname, '..', '..', '..', 'shared', 'data', 'openb');
if (!fs.existsSync(shardd) || !fs.existsSync(path.join(BIN, 'bigfleet-simprovider')) ||
    !fs.existsSync(path.join(openb, 'openb_pod_list_default.csv'))) {
  T.skip('no bigfleet-shardd / bigfleet-simprovider, or no ../shared/data/openb');
}
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'replay-shardd-'));

const { freePort } = require('./ports');
const get = (port, p) => new Promise((resolve) => {
  http.get({ host: '127.0.0.1', port, path: p, timeout: 1000 }, (res) => {
    let body = '';
    res.on('data', (d) => { body += d; });
    res.on('end', () => resolve({ status: res.statusCode, body }));
  }).on('error', () => resolve({ status: 0, body: '' }));
});
const metric = (text, re) => {
  const m = text.split('\n').filter((l) => re.test(l)).map((l) => Number(l.split(' ').pop()));
  return m.length ? m.reduce((a, b) => a + b, 0) : NaN;
};

T.run(async () => {
  const listen = await freePort(), metrics = await freePort();
  const id = `replay-it-${process.pid}`;
  const sim = await freePort();
  const nodes = path.join(openb, 'openb_node_list_all_node.csv');
  const sh = spawn(shardd, ['--id', id, '--data-dir', path.join(tmp, 'data'),
    '--listen', `127.0.0.1:${listen}`, '--metrics-addr', `127.0.0.1:${metrics}`, '--cycle-interval', '200ms',
    '--sim-listen', `127.0.0.1:${sim}`, '--sim-args', `--catalog=${nodes} --seed-speculative=16 --seed-speculative-per-node=3`,
    '--max-machines', '20000', '--max-needs', '4096', '--max-clusters', '64'],
  { stdio: ['ignore', 'ignore', fs.openSync(path.join(tmp, 'shardd.log'), 'w')] });
  let exited = null;
  sh.on('exit', (code, sig) => { exited = { code, sig }; });
  for (let i = 0; i < 300 && exited === null && (await get(metrics, '/readyz')).status !== 200; i++)
    await new Promise((r) => setTimeout(r, 100));
  if (!T.check(exited === null, `bigfleet-shardd is running (${fs.readFileSync(path.join(tmp, 'shardd.log'), 'utf8').slice(-400)})`))
    T.finish();

  const rep = path.join(tmp, 'rep');
  const r = await runReplay(['--trace', path.join(openb, 'openb_pod_list_default.csv'), '--catalog',
    path.join(openb, 'openb_node_list_all_node.csv'), '--shard-addr', `127.0.0.1:${listen}`,
    '--metrics-addr', `127.0.0.1:${metrics}`, '--clusters', '3', '--wall', '6s', '--rollup-interval', '200ms',
    '--cycle-interval', '200ms', '--settle', '500ms', '--progress', 'off', '--report', rep, '--check']);
  T.eq(r.code, 0, `replay exit status (${r.stderr.slice(-400)})`);
  const m = (await get(metrics, '/metrics')).body;
  sh.kill('SIGTERM');
  for (let i = 0; i < 100 && exited === null; i++) await new Promise((res) => setTimeout(res, 100));
  T.eq(exited && exited.code, 0, 'bigfleet-shardd stops cleanly on SIGTERM');

  const j = JSON.parse(fs.readFileSync(path.join(rep, 'report.json'), 'utf8'));
  const sent = j.protocol.rollups_sent;
  T.check(sent >= 3 * 15, `rollups sent: ${sent}`);
  T.eq(j.protocol.rollup_acks, sent, 'every rollup acknowledged');
  T.eq(j.shard_metrics.session_rollups, { received: sent, accepted: sent, rejected: 0, quarantined: 0 },
    'the shard received and accepted every rollup, rejected none');
  T.eq(metric(m, /^bigfleet_shard_session_lifecycle_total\{event="installed"\}/), 3, 'three sessions installed');
  T.eq(metric(m, /^bigfleet_shard_session_lifecycle_total\{event="removed"\}/), 3, 'and removed at the end');
  T.eq(j.clusters.map((c) => c.id), ['openb-0', 'openb-1', 'openb-2'], 'report: clusters');
  for (const c of j.clusters)
    T.eq(metric(m, new RegExp(`^bigfleet_shard_cluster_need_rows\\{cluster="${c.id}"\\}`)), c.needs,
      `the shard holds the Needs of ${c.id}'s last rollup`);
  T.check(j.timeline.rows.some((row) => row[4] > 0), 'the rollups carried Needs');
  await T.ok('the real session ingests every rollup the replay sends');
  T.check(j.protocol.bootstrap_requests > 0 && j.machines.provisioned > 0,
    `the shard provisioned through the session (${j.protocol.bootstrap_requests} blobs, ${j.machines.provisioned} bindings)`);
  T.eq(j.protocol.bootstrap_cluster_mismatch, 0, 'bootstrap requests name the session\'s cluster');
  T.eq(j.reclaims_still_demanded.count, 0, 'no reclaim of a still-demanded machine');
  T.eq(j.acceptance.pass, true, `acceptance (satisfied at peak ${j.satisfied.at_peak && j.satisfied.at_peak.min}, ` +
    `binding p99 ${j.binding_latency_s.p99} s)`);
  await T.ok('the appliance provisions the replayed demand and meets the acceptance criteria');
  const txt = fs.readFileSync(path.join(rep, 'report.txt'), 'utf8');
  const cyc = /^ {2}shard cycle {2}p50 [\d.]+ [mu]?s, p99 [\d.]+ [mu]?s \((\d+) cycles/m.exec(txt);
  T.check(cyc && Number(cyc[1]) === j.shard_metrics.cycle_duration_s.count && Number(cyc[1]) > 0,
    `the report prints the shard's cycle p50/p99 next to binding latency (${cyc && cyc[0]})`);
  fs.rmSync(tmp, { recursive: true, force: true });
  T.finish();
});
