#!/usr/bin/env node
// metrics_operator.js — a minimal BigFleet operator for the integration
// tests (not a test itself): a @grpc/grpc-js Shard/Session client that says
// Hello, sends one rollup, prints "ACK" once the shard acknowledged it, then
// keeps the session open (answering bootstrap requests with a small blob)
// for HOLD seconds or until SIGTERM.
//
//   node metrics_operator.js ADDR CLUSTER NEEDS_JSON [HOLD_SECONDS]
//
// NEEDS_JSON: [{priority, cpu, memory, types: [...], ipb, rpb, min_cpu}, ...]
'use strict';
const path = require('path');
const modules = path.resolve(__dirname, '..', 'interop', 'node_modules');
const grpc = require(path.join(modules, '@grpc/grpc-js'));
const protoLoader = require(path.join(modules, '@grpc/proto-loader'));

const [addr, cluster, needsJson, holdArg] = process.argv.slice(2);
if (!addr || !cluster || !needsJson) {
  console.error('usage: metrics_operator.js ADDR CLUSTER NEEDS_JSON [HOLD_SECONDS]');
  process.exit(2);
}
const PROTO_DIR = process.env.PROTO_DIR || path.resolve(__dirname, '..', '..', 'proto');
const pkg = grpc.loadPackageDefinition(protoLoader.loadSync(['bigfleet/v1alpha1/shard.proto'], {
  includeDirs: [PROTO_DIR], keepCase: true, longs: String, enums: Number, bytes: Buffer,
  defaults: true, oneofs: true,
})).bigfleet.v1alpha1;

const needs = JSON.parse(needsJson).map((n) => ({
  requirements: n.types ? [{ key: 'node.kubernetes.io/instance-type', operator: 1, values: n.types }] : [],
  aggregate_resources: Object.assign({ cpu: String(n.cpu || 1) }, n.memory ? { memory: n.memory } : {}),
  priority: n.priority || 0,
  spread: [],
  interruption_penalty_bucket: n.ipb || 0,
  reclamation_penalty_bucket: n.rpb || 0,
  min_unit: n.min_cpu ? { cpu: String(n.min_cpu) } : {},
  group: Buffer.alloc(0),
}));

const client = new pkg.Shard(addr, grpc.credentials.createInsecure());
const call = client.Session();
let acked = false;
call.on('data', (m) => {
  if (m.payload === 'ack' && m.ack.echo === 'rollup' && !acked) {
    acked = true;
    console.log('ACK');
  } else if (m.payload === 'bootstrap_request') {
    call.write({ bootstrap_response: { request_id: m.bootstrap_request.request_id,
      user_data: Buffer.from('#!/bin/sh\necho join\n'), ttl_seconds: 600, error: '' } });
  } else if (m.payload === 'reclaim_instruction') {
    call.write({ reclaim_ack: { instruction_id: m.reclaim_instruction.instruction_id, nodes_started: 0 } });
  }
});
call.on('error', (e) => { console.error(`session ended: ${e.code} ${e.details}`); process.exit(acked ? 0 : 1); });
call.write({ hello: { cluster_id: cluster, protocol_version: 'v1alpha1' } });
call.write({ rollup: { cluster_id: cluster, timestamp_unix_nanos: String(BigInt(Date.now()) * 1000000n), needs } });
const stop = () => { try { call.end(); } catch (e) { /* closed */ } setTimeout(() => process.exit(acked ? 0 : 1), 200); };
process.on('SIGTERM', stop);
setTimeout(stop, Number(holdArg || 3600) * 1000);
