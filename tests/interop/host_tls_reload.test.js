#!/usr/bin/env node
// host_tls_reload.test.js: SIGHUP re-reads the TLS files of the real
// bigfleet-shardd (docs/operating.md "Reload"), with grpc-js operators:
// the shard starts with a certificate and CA from authority 1 (named in its
// --config file); the file is switched to authority 2 and the supervisor
// gets SIGHUP; without a restart (same epoch, same processes) new
// connections are served with authority 2's certificate and must present
// authority 2's client certificates, while an operator of authority 1 is
// refused. Certificates are throwaway, made with openssl.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const L = require('./session_lib');
const { register } = require('./register');
const { assert, grpc, waitFor } = L;

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bf-tlsreload-'));
// authority n: ca<n>.pem, the shard's certificate shard<n>.pem, the operator's op<n>.pem
function authority(n) {
  L.makeCerts(dir, {
    [`shard${n}`]: 'DNS:localhost,IP:127.0.0.1,URI:bigfleet://shard/s1',
    [`op${n}`]: 'URI:bigfleet://cluster/c1',
  }, { ca: `ca${n}`, cn: `bigfleet-test-ca-${n}` });
}

function writeConfig(n) {
  const p = (f) => path.join(dir, f);
  fs.writeFileSync(p('shardd.conf'),
    `tls-cert = ${p(`shard${n}.pem`)}\ntls-key = ${p(`shard${n}.key`)}\ntls-ca = ${p(`ca${n}.pem`)}\n`);
}

const creds = (n) => L.certCreds(dir, `op${n}`, `ca${n}`);

// Hello as c1 with authority n's credentials: true when the shard acks it
async function helloAcked(addr, n) {
  const op = new L.Operator(addr, creds(n));
  try {
    op.hello('c1');
    await op.ack('hello', 6000);
    return true;
  } catch (e) {
    return false;
  } finally {
    op.close();
  }
}

let S;
register([
  ['start with authority 1 from the --config file', async () => {
    authority(1);
    authority(2);
    writeConfig(1);
    S = await L.startShard({ args: [`--config=${path.join(dir, 'shardd.conf')}`] });
    const addr = `localhost:${S.port}`;
    assert.ok(await helloAcked(addr, 1), 'an operator of authority 1 is served');
    assert.ok(!(await helloAcked(addr, 2)), 'an operator of authority 2 is refused');
  }],
  ['SIGHUP with authority 2 in the file: new connections use it, no restart', async () => {
    const addr = `localhost:${S.port}`;
    const before = L.shm(S.id, 'dump');
    writeConfig(2);
    S.proc.kill('SIGHUP');
    await waitFor(async () => /^bigfleet_appliance_config_reloads_total\{result="applied"\} 1$/m
      .test((await L.httpGet(S.metricsPort, '/metrics')).body), 5000, 'the reload');
    await waitFor(() => helloAcked(addr, 2), 8000, 'authority 2 served after the reload');
    assert.ok(!(await helloAcked(addr, 1)), 'authority 1 refused after the reload');
    const after = L.shm(S.id, 'dump');
    assert.strictEqual(after.session_pid, before.session_pid, 'the session was not restarted');
    assert.ok(/msg="TLS files re-read"/.test(S.log()), 'the session logged the reload');
    assert.ok(/setting=tls-cert from=.*shard1\.pem" to=.*shard2\.pem"/.test(S.log()), 'the change is logged');
  }],
  ['stop', async () => {
    const ex = await S.stop();
    assert.strictEqual(ex.code, 0);
    fs.rmSync(dir, { recursive: true, force: true });
  }],
]);
