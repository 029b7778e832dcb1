// grpc_lib.js — shared helpers for the grpc_*.test.js interop tests (not a
// test itself): load the bigfleet protos into @grpc/grpc-js, start/stop the C
// test server (build/tests/interop/grpc_test_server), make a throwaway PKI
// with openssl, two assertion helpers. The tests themselves are registered
// with node:test through register.js.
//
// Environment (scripts/run-interop-tests): BUILD_DIR, PROTO_DIR.
// GRPC_TEST_SERVER overrides the server binary (e.g. the ASan build).
'use strict';
const { spawn, execFileSync } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');
const http = require('http');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const BUILD_DIR = process.env.BUILD_DIR || path.resolve(__dirname, '../../build');
const PROTO_DIR = process.env.PROTO_DIR || path.resolve(__dirname, '../../proto');
const SERVER_BIN = process.env.GRPC_TEST_SERVER || path.join(BUILD_DIR, 'tests/interop/grpc_test_server');
const CLIENT_BIN = process.env.GRPC_TEST_CLIENT || path.join(BUILD_DIR, 'tests/interop/grpc_test_client');

function loadPkg() {
  const def = protoLoader.loadSync(
    ['bigfleet/v1alpha1/provider.proto', 'bigfleet/v1alpha1/shard.proto', 'bigfleet/v1alpha1/shardread.proto'],
    { includeDirs: [PROTO_DIR], keepCase: true, longs: String, enums: String, defaults: true });
  return grpc.loadPackageDefinition(def).bigfleet.v1alpha1;
}

const BIG = 256 * 1024 * 1024;
const CHANNEL_OPTS = {
  'grpc.max_receive_message_length': BIG,
  'grpc.max_send_message_length': BIG,
};

// Starts the C test server; resolves {proc, port, httpPort, stderr(), stop()}.
function startServer(args = [], opts = {}) {
  return new Promise((resolve, reject) => {
    const proc = spawn(opts.bin || SERVER_BIN, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '';
    let settled = false;
    const timer = setTimeout(() => { if (!settled) { settled = true; proc.kill('SIGKILL'); reject(new Error('server did not start: ' + err)); } }, 10000);
    proc.stderr.on('data', d => { err += d; });
    proc.stdout.on('data', d => {
      out += d;
      const m = /READY grpc=(\d+) http=(\d+)/.exec(out);
      if (m && !settled) {
        settled = true;
        clearTimeout(timer);
        const exited = new Promise(res => proc.on('exit', (code, sig) => res({ code, sig })));
        resolve({
          proc, port: +m[1], httpPort: +m[2], addr: '127.0.0.1:' + m[1],
          stderr: () => err,
          // SIGTERM: graceful shutdown; resolves the exit status
          stop: async () => {
            proc.kill('SIGTERM');
            const killer = setTimeout(() => proc.kill('SIGKILL'), 15000);
            const r = await exited;
            clearTimeout(killer);
            return r;
          },
          alive: () => proc.exitCode === null && proc.signalCode === null,
        });
      }
    });
    proc.on('exit', (code) => { if (!settled) { settled = true; clearTimeout(timer); reject(new Error(`server exited ${code}: ${err}`)); } });
  });
}

function httpGet(port, p) {
  return new Promise((resolve, reject) => {
    http.get({ host: '127.0.0.1', port, path: p, agent: false }, res => {
      let body = '';
      res.on('data', d => { body += d; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body }));
    }).on('error', reject);
  });
}

async function stats(srv) {
  const r = await httpGet(srv.httpPort, '/stats');
  return JSON.parse(r.body);
}

// Polls the server's /stats every 20 ms until pred(stats) holds or ms pass;
// resolves the last stats read (the caller asserts on them).
async function waitStat(srv, pred, ms = 3000) {
  const until = Date.now() + ms;
  let s;
  while (Date.now() < until) {
    s = await stats(srv);
    if (pred(s)) return s;
    await sleep(20);
  }
  return s;
}

// ---------------------------------------------------------------- PKI

// Makes a CA and leaf certificates (ECDSA P-256) in a fresh temp dir.
// leaves: {name: 'subjectAltName value'}; signer: 'ca' (default) or another CA name.
function makePki(leaves, extraCas = []) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bf-grpc-pki-'));
  const ossl = (args) => execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
  for (const ca of ['ca', ...extraCas]) {
    ossl(['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
      '-keyout', `${ca}.key`, '-out', `${ca}.crt`, '-days', '1', '-subj', `/CN=${ca}-test-ca`]);
  }
  for (const [name, spec] of Object.entries(leaves)) {
    const san = typeof spec === 'string' ? spec : spec.san;
    const ca = (typeof spec === 'object' && spec.ca) || 'ca';
    ossl(['req', '-new', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
      '-keyout', `${name}.key`, '-subj', `/CN=${name}`, '-out', `${name}.csr`]);
    fs.writeFileSync(path.join(dir, `${name}.ext`), `subjectAltName=${san}\n`);
    ossl(['x509', '-req', '-in', `${name}.csr`, '-CA', `${ca}.crt`, '-CAkey', `${ca}.key`,
      '-CAcreateserial', '-days', '1', '-extfile', `${name}.ext`, '-out', `${name}.crt`]);
  }
  const p = (f) => path.join(dir, f);
  return {
    dir, p,
    read: (f) => fs.readFileSync(p(f)),
    cleanup: () => fs.rmSync(dir, { recursive: true, force: true }),
  };
}

// ---------------------------------------------------------------- calls

function unary(client, method, req, { deadlineMs = 5000, metadata } = {}) {
  return new Promise((resolve) => {
    const started = Date.now();
    const call = client[method](req, metadata || new grpc.Metadata(), { deadline: Date.now() + deadlineMs }, (err, resp) => {
      resolve({ err, resp, ms: Date.now() - started });
    });
    void call;
  });
}

// Collects a server stream; resolves {msgs, status}.
function collect(call, { onData } = {}) {
  return new Promise((resolve) => {
    const msgs = [];
    let status = null, error = null, ended = false;
    const finish = () => { if (status && ended) resolve({ msgs, status, error }); };
    call.on('data', d => { msgs.push(d); if (onData) onData(d, msgs.length, call); });
    call.on('error', e => { error = e; ended = true; finish(); });
    call.on('end', () => { ended = true; finish(); });
    call.on('status', s => { status = s; if (error) ended = true; finish(); });
  });
}

const sleep = (ms) => new Promise(r => setTimeout(r, ms));

// ---------------------------------------------------------------- assertions

function assert(cond, msg) {
  if (!cond) throw new Error('assertion failed: ' + msg);
}
function eq(a, b, msg) {
  if (a !== b) throw new Error(`${msg}: expected ${JSON.stringify(b)}, got ${JSON.stringify(a)}`);
}

module.exports = {
  grpc, loadPkg, CHANNEL_OPTS, BIG, startServer, httpGet, stats, waitStat, makePki, unary, collect, sleep,
  assert, eq, SERVER_BIN, CLIENT_BIN, BUILD_DIR, PROTO_DIR,
};
