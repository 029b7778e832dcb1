// session_lib.js: shared helpers of the session interop tests.
//
//   startShard(opts)   runs the real bigfleet-shardd (supervisor + children)
//                      with --provider-addr pointing at a closed port, waits
//                      for /healthz, returns {id, port, metricsPort, stop()}
//   shm(id, ...args)   runs the C helper tests/interop/session_shm (JSON out)
//   Operator           a grpc-js Shard/Session client: send(), next(pred),
//                      status; written the way a BigFleet operator talks
//   makeCerts(dir, leaves), certCreds(dir, who)  a throwaway mTLS PKI
//   logOnFail(tests, () => S, n)  the tests, each printing the appliance
//                      log's last n lines when it fails
'use strict';

// The appliance refuses to run its children as root unless told (docs/operating.md
// "Least privilege"); the tests run as root in CI and keep the children root.
if (process.getuid && process.getuid() === 0) {
  if (process.env.BIGFLEET_SHARDD_USER === undefined) process.env.BIGFLEET_SHARDD_USER = 'root';
  if (process.env.BIGFLEET_SHARDD_ALLOW_ROOT === undefined) process.env.BIGFLEET_SHARDD_ALLOW_ROOT = 'true';
}

const assert = require('assert');
const fs = require('fs');
const http = require('http');
const net = require('net');
const os = require('os');
const path = require('path');
const { spawn, execFileSync, execFile } = require('child_process');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const { onEnd } = require('./register');

const repo = path.resolve(__dirname, '..', '..');
const BUILD_DIR = process.env.BUILD_DIR || path.join(repo, 'build');
const BIN = process.env.BIN || path.join(BUILD_DIR, 'bin');
const PROTO_DIR = process.env.PROTO_DIR || path.join(repo, 'proto');
const HELPER = path.join(BUILD_DIR, 'tests', 'interop', 'session_shm');

const pkgDef = protoLoader.loadSync(['bigfleet/v1alpha1/shard.proto',
  'bigfleet/v1alpha1/coordinator.proto'], {
  includeDirs: [PROTO_DIR], keepCase: true, longs: String, enums: Number, bytes: Buffer,
  defaults: true, oneofs: true,
});
const proto = grpc.loadPackageDefinition(pkgDef).bigfleet.v1alpha1;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const { freePort } = require('./ports');

function httpGet(port, p) {
  return new Promise((resolve) => {
    const req = http.get({ host: '127.0.0.1', port, path: p, timeout: 2000 }, (res) => {
      let body = '';
      res.on('data', (d) => { body += d; });
      res.on('end', () => resolve({ status: res.statusCode, body }));
    });
    req.on('error', () => resolve({ status: 0, body: '' }));
    req.on('timeout', () => { req.destroy(); resolve({ status: 0, body: '' }); });
  });
}

async function waitFor(fn, ms, what) {
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    last = await fn();
    if (last) return last;
    await sleep(25);
  }
  throw new Error(`timed out waiting for ${what}`);
}

// Appliances still running when the file's tests and hooks are done (a test
// failed before stopping its own) are killed then, so that node can end.
const live = new Set();
onEnd(async () => {
  if (!live.size) return;
  console.log(`     stopping ${live.size} appliance(s) a failed test left running`);
  const gone = [...live].map((p) => new Promise((resolve) => p.once('exit', resolve)));
  for (const p of live) p.kill('SIGTERM');
  const killer = setTimeout(() => { for (const p of live) p.kill('SIGKILL'); }, 8000);
  await Promise.all(gone);
  clearTimeout(killer);
});

async function startShard(opts = {}) {
  const id = `it-sess-${process.pid}-${Math.floor(Math.random() * 1e6)}`;
  const dir = opts.dir || fs.mkdtempSync(path.join(os.tmpdir(), 'bf-sess-'));
  const port = await freePort();
  const metricsPort = await freePort();
  const args = [`--id=${id}`, `--listen=127.0.0.1:${port}`,
    `--metrics-addr=127.0.0.1:${metricsPort}`, `--data-dir=${dir}/data`,
    '--provider-addr=127.0.0.1:1', '--log-level=info', ...(opts.args || [])];
  if (opts.tls) args.push(`--tls-cert=${opts.tls.cert}`, `--tls-key=${opts.tls.key}`,
    `--tls-ca=${opts.tls.ca}`);
  const logPath = path.join(dir, 'shardd.log');
  const log = fs.openSync(logPath, 'a');
  const proc = spawn(path.join(BIN, 'bigfleet-shardd'), args,
    { stdio: ['ignore', log, log] });
  let exited = null;
  live.add(proc);
  proc.on('exit', (code, sig) => { exited = { code, sig }; live.delete(proc); });
  const shard = {
    id, port, metricsPort, dir, proc, logPath, args,
    log: () => fs.readFileSync(logPath, 'utf8'),
    addr: `127.0.0.1:${port}`,
    async stop() {
      if (!exited) {
        proc.kill('SIGTERM');
        await waitFor(() => exited, 8000, 'shardd exit').catch(() => proc.kill('SIGKILL'));
      }
      // a sanitizer build reports into the log: a report from the session's
      // code fails the suite; one from another module is printed as a note
      const text = fs.existsSync(logPath) ? fs.readFileSync(logPath, 'utf8') : '';
      const reports = [];
      const re = /(==\d+==ERROR: (Address|Leak)Sanitizer[^]*?SUMMARY[^\n]*|[^\n]*runtime error:[^\n]*)/g;
      for (let m; (m = re.exec(text));) reports.push(m[0]);
      if (!process.env.KEEP && !opts.keepDir) fs.rmSync(dir, { recursive: true, force: true });
      const pids = new Set([...text.matchAll(/role=session pid=(\d+)/g)].map((m) => m[1]));
      const ours = reports.filter((r) => /src\/session\/|session_main|bf_session/.test(r) ||
        pids.has((/^==(\d+)==/.exec(r) || [])[1]));
      for (const r of reports.filter((x) => !ours.includes(x)))
        console.log(`     note: sanitizer report from another module: ${r.split('\n')[0].slice(0, 200)}`);
      if (ours.length) throw new Error(`sanitizer report in the session:\n${ours.join('\n').slice(0, 4000)}`);
      return exited;
    },
    sessionPid() { return shm(id, 'dump').session_pid; },
  };
  try {
    await waitFor(async () => {
      if (exited) throw new Error(`shardd exited early: ${JSON.stringify(exited)}\n${shard.log()}`);
      const r = await httpGet(metricsPort, '/healthz');
      return r.status === 200;
    }, 10000, 'shardd /healthz');
    // the gRPC listener too
    await waitFor(() => new Promise((resolve) => {
      const c = net.connect(port, '127.0.0.1', () => { c.destroy(); resolve(true); });
      c.on('error', () => resolve(false));
    }), 5000, 'shardd gRPC port');
  } catch (e) {
    await shard.stop();
    throw e;
  }
  return shard;
}

function shm(id, cmd, ...args) {
  let out;
  try {
    out = execFileSync(HELPER, [cmd, id, ...args.map(String)],
      { encoding: 'utf8', maxBuffer: 256 << 20, stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (e) {
    throw new Error(`session_shm ${cmd} failed: ${e.stderr || e.message}`);
  }
  const t = out.trim();
  return t ? JSON.parse(t) : null;
}

function shmAsync(id, cmd, ...args) {
  return new Promise((resolve, reject) => {
    execFile(HELPER, [cmd, id, ...args.map(String)], { encoding: 'utf8', maxBuffer: 64 << 20 },
      (err, out, errout) => {
        if (err) reject(new Error(`${cmd}: ${err.message} ${errout}`));
        else resolve(out.trim() ? JSON.parse(out) : null);
      });
  });
}

function cluster(id, name) {
  return shm(id, 'dump', name).clusters.find((c) => c.name === name);
}

// A grpc-js operator stream.
class Operator {
  constructor(addr, creds, opts = {}) {
    this.client = new proto.Shard(addr, creds || grpc.credentials.createInsecure(),
      opts.channelOptions || {});
    this.msgs = [];
    this.waiters = [];
    this.status = null;
    this.ended = new Promise((resolve) => { this._end = resolve; });
    this.call = this.client.Session();
    this.call.on('data', (m) => {
      this.msgs.push(m);
      this._poke();
    });
    this.call.on('error', (e) => { this.status = { code: e.code, details: e.details }; this._end(this.status); this._poke(); });
    this.call.on('status', (s) => {
      if (!this.status) this.status = { code: s.code, details: s.details };
      this._end(this.status);
      this._poke();
    });
  }

  _poke() { for (const w of this.waiters.splice(0)) w(); }

  send(m) { this.call.write(m); }

  hello(clusterId) { this.send({ hello: { cluster_id: clusterId, protocol_version: 'v1alpha1' } }); }

  rollup(clusterId, needs, ts) {
    this.send({ rollup: { cluster_id: clusterId, timestamp_unix_nanos: String(ts || Date.now() * 1e6), needs } });
  }

  // Waits for (and removes) the first received message matching pred.
  async next(pred, ms = 5000, what = 'a message') {
    const end = Date.now() + ms;
    for (;;) {
      const i = this.msgs.findIndex(pred);
      if (i >= 0) return this.msgs.splice(i, 1)[0];
      if (this.status) throw new Error(`stream ended (${JSON.stringify(this.status)}) before ${what}`);
      const left = end - Date.now();
      if (left <= 0) throw new Error(`timed out waiting for ${what}`);
      await new Promise((resolve) => {
        const t = setTimeout(resolve, left);
        this.waiters.push(() => { clearTimeout(t); resolve(); });
      });
    }
  }

  ack(echo, ms) { return this.next((m) => m.payload === 'ack' && m.ack.echo === echo, ms, `ack "${echo}"`); }

  async waitEnd(ms = 5000) {
    return Promise.race([this.ended, sleep(ms).then(() => { throw new Error('stream did not end'); })]);
  }

  close() {
    try { this.call.end(); } catch (e) { /* already closed */ }
    this.client.close();
  }
}

// A raw HTTP/2 gRPC client: sends arbitrary bytes as messages (unknown
// fields, malformed protobuf) and decodes what the shard answers.
class RawOperator {
  constructor(addr) {
    const http2 = require('http2');
    this.h2 = http2.connect(`http://${addr}`);
    this.h2.on('error', () => {});
    this.req = this.h2.request({ ':method': 'POST', ':path': '/bigfleet.v1alpha1.Shard/Session',
      'content-type': 'application/grpc', te: 'trailers' });
    this.req.on('error', () => {});
    this.msgs = [];
    this.status = null;
    let buf = Buffer.alloc(0);
    const de = proto.Shard.service.Session.responseDeserialize;
    this.req.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      while (buf.length >= 5 && buf.length >= 5 + buf.readUInt32BE(1)) {
        const n = buf.readUInt32BE(1);
        this.msgs.push(de(buf.subarray(5, 5 + n)));
        buf = buf.subarray(5 + n);
      }
    });
    this.req.on('trailers', (t) => { this.status = { code: Number(t['grpc-status']), details: t['grpc-message'] }; });
    this.req.on('response', (h) => {
      if (h['grpc-status'] !== undefined) this.status = { code: Number(h['grpc-status']), details: h['grpc-message'] };
    });
  }

  sendRaw(bytes) {
    const f = Buffer.alloc(5 + bytes.length);
    f.writeUInt32BE(bytes.length, 1);
    Buffer.from(bytes).copy(f, 5);
    this.req.write(f);
  }

  send(obj) { this.sendRaw(proto.Shard.service.Session.requestSerialize(obj)); }

  async next(pred, ms = 5000, what = 'a message') {
    await waitFor(() => this.msgs.some(pred) || this.status, ms, what);
    const i = this.msgs.findIndex(pred);
    if (i < 0) throw new Error(`stream ended (${JSON.stringify(this.status)}) before ${what}`);
    return this.msgs.splice(i, 1)[0];
  }

  close() { this.h2.destroy(); }
}

const need = (o = {}) => ({
  requirements: o.requirements || [],
  aggregate_resources: o.aggregate || { cpu: '1' },
  priority: o.priority || 0,
  spread: o.spread || [],
  interruption_penalty_bucket: o.ipb || 0,
  reclamation_penalty_bucket: o.rpb || 0,
  min_unit: o.min_unit || {},
  group: o.group || Buffer.alloc(0),
});

// An ECDSA P-256 test PKI in dir (openssl): the authority opts.ca
// ('ca': ca.pem / ca.key, subject CN opts.cn) and, for each name -> SAN of
// `leaves`, name.pem / name.key signed by it (serverAuth and clientAuth).
function makeCerts(dir, leaves, { ca = 'ca', cn = 'bigfleet-test-ca' } = {}) {
  const ossl = (...a) => execFileSync('openssl', a, { cwd: dir, stdio: 'pipe' });
  ossl('req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
    '-keyout', `${ca}.key`, '-out', `${ca}.pem`, '-days', '2', '-subj', `/CN=${cn}`);
  for (const [name, san] of Object.entries(leaves)) {
    fs.writeFileSync(path.join(dir, `${name}.ext`),
      `subjectAltName=${san}\nbasicConstraints=CA:FALSE\n` +
      'keyUsage=digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\n');
    ossl('req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
      '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${name}`);
    ossl('x509', '-req', '-in', `${name}.csr`, '-CA', `${ca}.pem`, '-CAkey', `${ca}.key`,
      '-CAcreateserial', '-out', `${name}.pem`, '-days', '2', '-extfile', `${name}.ext`);
  }
}

// grpc-js mTLS credentials of makeCerts' leaf `who` (trusting authority `ca`).
function certCreds(dir, who, ca = 'ca') {
  const r = (f) => fs.readFileSync(path.join(dir, f));
  return grpc.credentials.createSsl(r(`${ca}.pem`), r(`${who}.key`), r(`${who}.pem`));
}

// The table of named tests with each one printing the last `lines` lines of
// the appliance log when it fails (appliance() is read at failure time).
function logOnFail(tests, appliance, lines) {
  return tests.map(([n, f]) => [n, async (...a) => {
    try {
      await f(...a);
    } catch (e) {
      console.log(appliance().log().split('\n').slice(-lines).join('\n'));
      throw e;
    }
  }]);
}

module.exports = {
  assert, grpc, proto, sleep, waitFor, freePort, httpGet, startShard, shm, shmAsync, cluster,
  Operator, RawOperator, need, logOnFail, makeCerts, certCreds, HELPER, BIN,
};
