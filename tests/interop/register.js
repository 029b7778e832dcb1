// register.js — a table of named tests handed to Node's own test runner
// (node:test), shared by the interop and hostile suites (not a test itself).
//
// register(tests, opts): every [name, fn] of `tests` becomes one node:test
// test; a file's tests run one after another, in order. node:test reports
// each as ok, not ok or skipped (TAP with --test-reporter=tap) and sets the
// exit status; nothing here counts, times out or exits by hand.
//
//   fn(ctx, t)       ctx is what opts.before resolved to ({} without one);
//                    t is node's TestContext
//   opts.before()    async, once before the first test (a node:test hook;
//                    if it throws, every test fails)
//   opts.after(ctx)  async, once after the last (a throw fails the file)
//   opts.timeout     ms per test (node:test's own timeout, a failure)
//   opts.skip        a reason: every test is reported as skipped, and
//                    before/after do not run (what the file needs is missing)
//   opts.bail        the tests build on each other: after the first failure
//                    the rest are reported as skipped, naming it
//   opts.onFail(e, name, ctx)  called before a failure is reported (e.g. to
//                    print the appliance log's last lines)
//
// onEnd(fn): fn runs after the file's last test and hook (the first
// register() call adds the node:test hook that runs them).
//
// Run a file as scripts/run-node-tests does:
//   node [--test-force-exit] --test-reporter=tap tests/interop/X.test.js
// (--test-force-exit, node >= 20.14, ends the process once the last test
// has finished even if a child process or socket would keep it alive; on
// older nodes, Debian 12's 18 included, a file must close what it opened,
// as the suites do: a leaked handle keeps node waiting until the timeout).
'use strict';
const nodeTest = require('node:test');

// Cleanups that run after every other hook of the file (registered by the
// first register() call, after the file's own hooks): see onEnd.
const ends = [];
let endsHooked = false;

function register(tests, opts = {}) {
  let ctx = {};
  let broken = null;
  const live = !opts.skip;
  if (live && opts.before) nodeTest.before(async () => { ctx = (await opts.before()) || {}; });
  for (const [name, fn] of tests) {
    nodeTest.test(name, { timeout: opts.timeout, skip: opts.skip || false }, async (t) => {
      if (broken) {
        t.skip(`an earlier step failed: ${broken}`);
        return;
      }
      try {
        await fn(ctx, t);
      } catch (e) {
        if (opts.bail) broken = name;
        if (opts.onFail) opts.onFail(e, name, ctx);
        throw e;
      }
    });
  }
  if (live && opts.after) nodeTest.after(() => opts.after(ctx));
  if (!endsHooked) {
    endsHooked = true;
    nodeTest.after(async () => {
      for (const fn of ends) await fn();
    });
  }
}

// onEnd(fn): fn runs once the file's tests and hooks are done, e.g. to kill
// what a failed test left running (a child keeps node 18 from ending).
function onEnd(fn) {
  ends.push(fn);
}

module.exports = { register, onEnd };
