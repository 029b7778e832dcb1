#!/usr/bin/env node
// table.js — prints the hostile suite's figures (results/hostile.json, or
// the file given) as the markdown table of docs/security.md: per attack,
// what was sent, the RSS bound, the session's measured peak RSS, and the
// well-behaved operator's rollup-ack p50/p99 before / during / after.
//   node tests/hostile/table.js [results/hostile.json]
'use strict';
const fs = require('fs');
const path = require('path');

const file = process.argv[2] || path.join(__dirname, '..', '..', 'results', 'hostile.json');
const all = JSON.parse(fs.readFileSync(file, 'utf8'));
const f2 = (x) => (x === null || x === undefined || Number.isNaN(x) ? '—' : x.toFixed(1));
console.log('| attack | what is sent | RSS bound | session peak RSS | ack p50 / p99 before (ms) | during (ms) | after (ms) | counted |');
console.log('|---|---|---|---|---|---|---|---|');
for (const [suite, r] of Object.entries(all)) {
  // the last trial of each attack is the one that counted
  const last = new Map();
  for (const f of r.figures) last.set(f.attack, f);
  for (const f of last.values()) {
    const counted = Object.entries(f.counters).map(([k, v]) =>
      `${k.replace(/^bigfleet_(shard|appliance)_/, '').replace(/_total/, '')} +${v}`).join(', ');
    console.log(`| ${suite}: ${f.attack}${f.trial > 1 ? ` (trial ${f.trial})` : ''} | ${f.sent} | ` +
      `${f.bound_mb} MB | ${f2(f.peak_rss_mb)} MB | ${f2(f.ack_before.p50_ms)} / ${f2(f.ack_before.p99_ms)} | ` +
      `${f2(f.ack_during.p50_ms)} / ${f2(f.ack_during.p99_ms)} | ` +
      `${f.ack_after ? `${f2(f.ack_after.p50_ms)} / ${f2(f.ack_after.p99_ms)}` : '—'} | ${counted || '—'} |`);
  }
}
