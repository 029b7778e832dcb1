#!/usr/bin/env node
// host_health_reflection.test.js: the standard gRPC surfaces of the real
// bigfleet-shardd on --listen, driven by third-party clients from npm:
//   - grpc.health.v1.Health with the service definition that the
//     grpc-health-check package ships (Check, Watch, List): NOT_SERVING
//     until the first provider reconcile succeeded, SERVING after it, per
//     service (Shard, ShardRead), NOT_FOUND / SERVICE_UNKNOWN for an unknown
//     service, NOT_SERVING to a watcher when the shard stops;
//   - server reflection v1 and v1alpha with the protos the @grpc/reflection
//     package ships: list_services, file_containing_symbol,
//     file_by_filename, errors; and the reflected descriptors are enough for
//     @grpc/proto-loader to build a working ShardRead client (an
//     InspectNeeds call that succeeds), as grpcurl would.
'use strict';
const path = require('path');
const L = require('./session_lib');
const { register } = require('./register');
const { assert, grpc, waitFor, freePort } = L;
const protoLoader = require('@grpc/proto-loader');
const health = require('grpc-health-check');
const descriptor = require('protobufjs/ext/descriptor');

const REFL_PROTO = path.join(path.dirname(require.resolve('@grpc/reflection/package.json')),
  'build', 'proto');
const HealthClient = grpc.makeClientConstructor(health.service, 'grpc.health.v1.Health');
const ST = { UNKNOWN: 0, SERVING: 1, NOT_SERVING: 2, SERVICE_UNKNOWN: 3 };
const stName = (v) => (typeof v === 'string' ? v : Object.keys(ST).find((k) => ST[k] === v));

function reflectionClient(version, addr) {
  const def = protoLoader.loadSync(`grpc/reflection/${version}/reflection.proto`, {
    includeDirs: [REFL_PROTO], keepCase: true, longs: String, enums: String, bytes: Buffer,
    defaults: true, oneofs: true,
  });
  const pkg = grpc.loadPackageDefinition(def).grpc.reflection[version];
  return new pkg.ServerReflection(addr, grpc.credentials.createInsecure());
}

// one request on a fresh ServerReflectionInfo stream; resolves the response
function reflect(client, req) {
  return new Promise((resolve, reject) => {
    const call = client.ServerReflectionInfo();
    let got = null;
    call.on('data', (m) => { got = m; call.end(); });
    call.on('error', reject);
    call.on('end', () => (got ? resolve(got) : reject(new Error('no response'))));
    call.write(Object.assign({ host: '' }, req));
  });
}

const check = (c, service) => new Promise((resolve, reject) =>
  c.check({ service }, { deadline: Date.now() + 5000 }, (e, r) => (e ? reject(e) : resolve(r))));
const list = (c) => new Promise((resolve, reject) =>
  c.list({}, { deadline: Date.now() + 5000 }, (e, r) => (e ? reject(e) : resolve(r))));

let unready; // a shard whose provider never answers
let ready; // a shard with the embedded simulated provider
let watching; // a Watch("") on `ready`, kept open until the shard stops

register([
  ['start two shards: one without a reachable provider, one with the embedded provider', async () => {
    unready = await L.startShard();
    const sim = await freePort();
    ready = await L.startShard({ args: ['--provider-addr=', `--sim-listen=127.0.0.1:${sim}`,
      '--cycle-interval=200ms', '--max-machines=4096', '--max-needs=256', '--max-clusters=16'] });
  }],
  ['health: NOT_SERVING before the first provider reconcile; unknown services are NOT_FOUND', async () => {
    const c = new HealthClient(unready.addr, grpc.credentials.createInsecure());
    assert.strictEqual(stName((await check(c, '')).status), 'NOT_SERVING');
    assert.strictEqual(stName((await check(c, 'bigfleet.v1alpha1.Shard')).status), 'NOT_SERVING');
    assert.strictEqual(stName((await check(c, 'grpc.health.v1.Health')).status), 'SERVING');
    await assert.rejects(check(c, 'no.such.Service'), (e) => e.code === grpc.status.NOT_FOUND);
    const r = await L.httpGet(unready.metricsPort, '/readyz');
    assert.strictEqual(r.status, 503, 'health agrees with /readyz');
    c.close();
  }],
  ['health: SERVING once ready, per service; List names them all; Watch follows changes', async () => {
    const c = new HealthClient(ready.addr, grpc.credentials.createInsecure());
    await waitFor(async () => stName((await check(c, '')).status) === 'SERVING', 15000, 'SERVING');
    assert.strictEqual(stName((await check(c, 'bigfleet.v1alpha1.Shard')).status), 'SERVING');
    await waitFor(async () => stName((await check(c, 'bigfleet.v1alpha1.ShardRead')).status) ===
      'SERVING', 10000, 'ShardRead SERVING after the first cycle');
    const l = await list(c);
    const names = Object.keys(l.statuses).sort();
    assert.deepStrictEqual(names, ['', 'bigfleet.v1alpha1.Shard', 'bigfleet.v1alpha1.ShardRead',
      'grpc.health.v1.Health', 'grpc.reflection.v1.ServerReflection',
      'grpc.reflection.v1alpha.ServerReflection']);
    for (const n of names) assert.strictEqual(stName(l.statuses[n].status), 'SERVING', n);
    // Watch: the current status at once; an unknown service: SERVICE_UNKNOWN (stream stays open)
    const seen = [];
    const w = c.watch({ service: '' });
    w.on('data', (m) => seen.push(stName(m.status)));
    const wend = new Promise((resolve) => { w.on('error', (e) => resolve(e)); w.on('end', () => resolve(null)); });
    const u = c.watch({ service: 'no.such.Service' });
    const useen = [];
    u.on('data', (m) => useen.push(stName(m.status)));
    u.on('error', () => {});
    await waitFor(() => seen.length >= 1 && useen.length >= 1, 5000, 'first watch messages');
    assert.strictEqual(seen[0], 'SERVING');
    assert.strictEqual(useen[0], 'SERVICE_UNKNOWN');
    watching = { c, seen, wend };
  }],
  ['reflection v1 and v1alpha: list_services names every service', async () => {
    for (const v of ['v1', 'v1alpha']) {
      const rc = reflectionClient(v, unready.addr);
      const r = await reflect(rc, { list_services: '*' });
      assert.strictEqual(r.message_response, 'list_services_response', v);
      const names = r.list_services_response.service.map((s) => s.name).sort();
      assert.deepStrictEqual(names, ['bigfleet.v1alpha1.Shard', 'bigfleet.v1alpha1.ShardRead',
        'grpc.health.v1.Health', 'grpc.reflection.v1.ServerReflection',
        'grpc.reflection.v1alpha.ServerReflection'], v);
      rc.close();
    }
  }],
  ['reflection: file_containing_symbol returns the file and its dependencies, decodable by protobufjs', async () => {
    const rc = reflectionClient('v1', unready.addr);
    const r = await reflect(rc, { file_containing_symbol: 'bigfleet.v1alpha1.Shard' });
    assert.strictEqual(r.message_response, 'file_descriptor_response');
    const files = r.file_descriptor_response.file_descriptor_proto.map(
      (b) => descriptor.FileDescriptorProto.decode(b));
    const byName = Object.fromEntries(files.map((f) => [f.name, f]));
    assert.deepStrictEqual(Object.keys(byName).sort(), ['bigfleet/v1alpha1/capacity.proto',
      'bigfleet/v1alpha1/provider.proto', 'bigfleet/v1alpha1/shard.proto']);
    const svc = byName['bigfleet/v1alpha1/shard.proto'].service.find((s) => s.name === 'Shard');
    const m = svc.method.find((x) => x.name === 'Session');
    assert.ok(m.clientStreaming && m.serverStreaming, 'Session is bidi');
    // a method symbol and a nested/message symbol resolve too
    const h = await reflect(rc, { file_containing_symbol: 'grpc.health.v1.Health.Check' });
    assert.strictEqual(descriptor.FileDescriptorProto.decode(
      h.file_descriptor_response.file_descriptor_proto[0]).name, 'grpc/health/v1/health.proto');
    const f = await reflect(rc, { file_by_filename: 'bigfleet/v1alpha1/shardread.proto' });
    assert.strictEqual(f.message_response, 'file_descriptor_response');
    const e1 = await reflect(rc, { file_containing_symbol: 'bigfleet.v1alpha1.NoSuchThing' });
    assert.strictEqual(e1.message_response, 'error_response');
    assert.strictEqual(e1.error_response.error_code, grpc.status.NOT_FOUND);
    const e2 = await reflect(rc, { file_by_filename: 'nope.proto' });
    assert.strictEqual(e2.error_response.error_code, grpc.status.NOT_FOUND);
    rc.close();
  }],
  ['reflection: a client built only from reflected descriptors calls ShardRead/InspectNeeds', async () => {
    const rc = reflectionClient('v1alpha', unready.addr);
    const r = await reflect(rc, { file_containing_symbol: 'bigfleet.v1alpha1.ShardRead' });
    rc.close();
    const set = descriptor.FileDescriptorSet.encode({
      file: r.file_descriptor_response.file_descriptor_proto.map(
        (b) => descriptor.FileDescriptorProto.decode(b)),
    }).finish();
    const def = protoLoader.loadFileDescriptorSetFromBuffer(Buffer.from(set),
      { keepCase: true, longs: String, enums: String, defaults: true });
    const ShardRead = grpc.loadPackageDefinition(def).bigfleet.v1alpha1.ShardRead;
    const c = new ShardRead(ready.addr, grpc.credentials.createInsecure());
    const frames = [];
    await new Promise((resolve, reject) => {
      const call = c.InspectNeeds({}, { deadline: Date.now() + 10000 });
      call.on('data', (m) => frames.push(m));
      call.on('error', reject);
      call.on('end', resolve);
    });
    assert.ok(frames.length >= 1 && frames[0].header, `InspectNeeds frames: ${JSON.stringify(frames)}`);
    c.close();
  }],
  ['health: a watcher is told NOT_SERVING when the shard stops, then the stream ends', async () => {
    await ready.stop();
    const err = await watching.wend;
    const { seen } = watching;
    assert.ok(seen.includes('NOT_SERVING'), `watch saw ${JSON.stringify(seen)} before the end`);
    assert.ok(!err || err.code === grpc.status.UNAVAILABLE, `watch ended with ${err && err.code}`);
    watching.c.close();
  }],
  ['metrics count health checks and reflection requests', async () => {
    const m = (await L.httpGet(unready.metricsPort, '/metrics')).body;
    const v = (n) => Number((new RegExp(`^${n} (\\S+)$`, 'm').exec(m) || [])[1]);
    assert.ok(v('bigfleet_shard_grpc_health_checks_total') >= 4, 'health checks counted');
    assert.ok(v('bigfleet_shard_grpc_reflection_requests_total') >= 7, 'reflection requests counted');
    await unready.stop();
  }],
]);
