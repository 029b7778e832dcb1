// ports.js — a free TCP port on 127.0.0.1 for a server the test starts later.
// Picked below the kernel's ephemeral range: a port the kernel hands out for
// listen(0) is an ephemeral one, and an outgoing connection (of the appliance
// itself, to its simulated provider) may take it as its local port before the
// server binds it; a port below the range can only be taken by a listener.
'use strict';
const fs = require('fs');
const net = require('net');

function ephemeralLow() {
  try {
    const low = +fs.readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0];
    return low > 12000 ? low : 32768;
  } catch (e) {
    return 32768;
  }
}

function tryListen(port) {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

async function freePort() {
  const low = ephemeralLow();
  for (let i = 0; i < 500; i++) {
    const p = 10000 + Math.floor(Math.random() * (low - 10000));
    if (await tryListen(p)) return p;
  }
  throw new Error('no free TCP port below the ephemeral range');
}

module.exports = { freePort };
