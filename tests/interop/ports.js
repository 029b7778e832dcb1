// ports.js — a free TCP port on 127.0.0.1 for a server the test starts later,
// picked below the kernel's ephemeral range by scripts/free-port (the same
// policy as the main job and the integration tests; see that script).
'use strict';
const path = require('path');
const { execFile } = require('child_process');

const FREE_PORT = path.join(__dirname, '..', '..', 'scripts', 'free-port');

function freePort() {
  return new Promise((resolve, reject) => {
    execFile(FREE_PORT, (err, stdout, stderr) => {
      if (err) reject(new Error(`free-port: ${stderr || err.message}`));
      else resolve(+stdout.trim());
    });
  });
}

module.exports = { freePort };
