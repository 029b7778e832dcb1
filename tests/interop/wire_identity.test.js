#!/usr/bin/env node
// wire_identity.test.js: wire identity of every top-level bigfleet.v1alpha1
// message between protobuf-c (our C side, through the helper program
// $BUILD_DIR/tests/interop/wire_identity) and protobufjs (the copy that
// @grpc/proto-loader uses, loading proto/ at run time).
//
// One fixture, tests/interop/wire_fixtures.json, is read by both sides:
//   1. C encodes every fixture case; protobufjs decodes the bytes and every
//      field must equal the fixture (and proto-loader's deserializer too).
//   2. protobufjs encodes the same values; the bytes must equal C's exactly,
//      except where protobuf encoding is not canonical and the case asks for
//      it (traits(): integer-like map keys -> entry order; default key/value
//      in a map entry; a field explicitly set to its default); C decodes them,
//      its dump must equal the fixture, and its re-pack must be its own
//      encoding of the fixture.
//   3. Every message's default instance packs to zero bytes on both sides.
//   4. Probes built with protobufjs' raw Writer: a value on every reserved
//      field number (protobuf-c must skip it without error), one nested in a
//      CapacityNeed, ListFilter.states unpacked and mixed (packed is the
//      fixture), duplicate map keys, two oneof members, a repeated singular
//      field and a split sub-message, -0.0, a 5-byte negative int32.
// Exit 0 on success; 1 with a per-field diff on mismatch.
//
// Env: BUILD_DIR (default ./build), PROTO_DIR (default ./proto),
// WIRE_FIXTURES (default next to this file), WIRE_KEEP=1 keeps the temp dir.
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const { execFileSync } = require('child_process');
const { test } = require('node:test');

const repo = path.resolve(__dirname, '..', '..');
const BUILD_DIR = process.env.BUILD_DIR || path.join(repo, 'build');
const PROTO_DIR = process.env.PROTO_DIR || path.join(repo, 'proto');
const HELPER = path.join(BUILD_DIR, 'tests', 'interop', 'wire_identity');
const FIXTURE = process.env.WIRE_FIXTURES || path.join(__dirname, 'wire_fixtures.json');
const FILES = ['capacity', 'provider', 'shard', 'shardread', 'coordinator'].map(
  (f) => `bigfleet/v1alpha1/${f}.proto`);

const protoLoader = require('@grpc/proto-loader');
// The protobufjs that proto-loader itself resolves (not whatever is hoisted).
const protobuf = require(require.resolve('protobufjs', {
  paths: [path.dirname(require.resolve('@grpc/proto-loader'))],
}));

// toObject options as a grpc-js peer would use them (ecosystem.md §1.1).
const TOOBJ = { longs: String, enums: Number, bytes: String, defaults: true, oneofs: true,
  arrays: true, objects: true };

const failures = [];
const notes = [];
const fail = (msg) => failures.push(msg);
const J = (v) => JSON.stringify(v, (k, x) => (typeof x === 'number' && !Number.isFinite(x)) ||
  Object.is(x, -0) ? `<${Object.is(x, -0) ? '-0' : x}>` : x);

// ------------------------------------------------------------------ schema

const root = new protobuf.Root();
root.resolvePath = (origin, target) => path.join(PROTO_DIR, target);
root.loadSync(FILES, { keepCase: true });
root.resolveAll();
const pkg = root.lookup('bigfleet.v1alpha1');

function collectTypes(ns, out) {
  for (const o of ns.nestedArray) {
    if (o instanceof protobuf.Type) out.push(o);
    if (o instanceof protobuf.Namespace) collectTypes(o, out);
  }
  return out;
}
const TYPES = collectTypes(pkg, []);
const fullName = (t) => t.fullName.replace(/^\./, '');
const byId = (t) => t.fieldsArray.slice().sort((a, b) => a.id - b.id);
const isMsg = (f) => f.resolvedType instanceof protobuf.Type;
const isEnum = (f) => f.resolvedType instanceof protobuf.Enum;
const INT32 = new Set(['int32', 'sint32', 'sfixed32']);
const UINT32 = new Set(['uint32', 'fixed32']);
const INT64 = new Set(['int64', 'sint64', 'sfixed64', 'uint64', 'fixed64']);

// ------------------------------------------------------------------ canonical values
// canon(type, value, dialect) maps a fixture value ('fixture'), a protobufjs
// toObject result ('pbjs') or a C dump ('c') onto one shape: fields in number
// order, int64 as decimal strings, doubles as String(x) ('-0', 'NaN'), bytes as
// lowercase hex, maps as key-sorted objects, absent oneof members omitted.
// A value of the wrong shape becomes a '<bad ...>' string, so it shows in diffs.

const dstr = (x) => (Object.is(x, -0) ? '-0' : String(x));
const SPECIAL = { NaN: NaN, Infinity: Infinity, '-Infinity': -Infinity };

function canonScalar(f, v, d) {
  const bad = (why) => `<bad ${why}: ${J(v)}>`;
  if (isEnum(f) || INT32.has(f.type) || UINT32.has(f.type)) {
    return typeof v === 'number' && Number.isInteger(v) ? v : bad(f.type);
  }
  if (INT64.has(f.type)) {
    if (typeof v === 'string' && /^-?\d+$/.test(v)) return BigInt(v).toString();
    if (d === 'fixture' && typeof v === 'number' && Number.isSafeInteger(v)) return String(v);
    return bad(f.type);
  }
  if (f.type === 'double' || f.type === 'float') {
    if (typeof v === 'number') return dstr(v);
    if (d !== 'pbjs' && typeof v === 'string' && v in SPECIAL) return dstr(SPECIAL[v]);
    return bad(f.type);
  }
  if (f.type === 'bool') return typeof v === 'boolean' ? v : bad('bool');
  if (f.type === 'string') return typeof v === 'string' ? v : bad('string');
  if (f.type === 'bytes') {
    if (typeof v !== 'string') return bad('bytes');
    if (d === 'pbjs') return Buffer.from(v, 'base64').toString('hex');
    return /^([0-9a-fA-F]{2})*$/.test(v) ? v.toLowerCase() : bad('hex');
  }
  return bad(`type ${f.type}`);
}

function canonValue(f, v, d) {
  if (isMsg(f)) return v === null || v === undefined ? null : canon(f.resolvedType, v, d);
  return canonScalar(f, v, d);
}

function defaultOf(f) {
  if (f.map) return {};
  if (f.repeated) return [];
  return scalarDefault(f);
}

function scalarDefault(f) {
  if (isMsg(f)) return null;
  if (isEnum(f) || INT32.has(f.type) || UINT32.has(f.type)) return 0;
  if (INT64.has(f.type)) return '0';
  if (f.type === 'double' || f.type === 'float') return '0';
  if (f.type === 'bool') return false;
  return '';
}

function canon(type, v, d) {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return `<not a message: ${J(v)}>`;
  const out = {};
  for (const k of Object.keys(v)) {
    if (type.fields[k]) continue;
    if (d === 'pbjs' && type.oneofs && type.oneofs[k]) continue; // virtual oneof property
    if (k.startsWith('$') && d === 'fixture') continue; // comment
    out[k] = v[k]; // an unexpected key (or the C dump's $unknown): shows in the diff
  }
  for (const f of byId(type)) {
    if (f.partOf) {
      const set = d === 'pbjs' ? v[f.partOf.name] === f.name : Object.hasOwn(v, f.name);
      if (set) out[f.name] = canonValue(f, v[f.name], d);
      continue;
    }
    if (!Object.hasOwn(v, f.name)) {
      out[f.name] = d === 'fixture' ? defaultOf(f) : '<missing>';
      continue;
    }
    const x = v[f.name];
    if (f.map) {
      // fixture and protobufjs: an object; C: [[key, value], ...] in wire order.
      let pairs;
      if (d === 'c') pairs = Array.isArray(x) ? x : null;
      else pairs = x && typeof x === 'object' && !Array.isArray(x) ? Object.entries(x) : null;
      if (!pairs) {
        out[f.name] = `<bad map: ${J(x)}>`;
        continue;
      }
      const m = {};
      for (const [key, val] of pairs) {
        const ck = String(key);
        if (Object.hasOwn(m, ck)) m[`<duplicate key ${ck}>`] = true;
        m[ck] = canonValue(f, val, d);
      }
      out[f.name] = Object.fromEntries(Object.keys(m).sort().map((key) => [key, m[key]]));
    } else if (f.repeated) {
      out[f.name] = Array.isArray(x) ? x.map((e) => canonValue(f, e, d)) : `<bad array: ${J(x)}>`;
    } else {
      out[f.name] = canonValue(f, x, d);
    }
  }
  return out;
}

function diff(exp, got, p, out) {
  const obj = (x) => x !== null && typeof x === 'object';
  if (!obj(exp) || !obj(got) || Array.isArray(exp) !== Array.isArray(got)) {
    if (J(exp) !== J(got)) out.push(`    ${p || '(message)'}: expected ${J(exp)}, got ${J(got)}`);
    return out;
  }
  if (Array.isArray(exp)) {
    if (exp.length !== got.length) out.push(`    ${p}: expected ${exp.length} elements, got ${got.length}`);
    for (let i = 0; i < Math.min(exp.length, got.length); i++) diff(exp[i], got[i], `${p}[${i}]`, out);
    return out;
  }
  for (const k of new Set([...Object.keys(exp), ...Object.keys(got)])) {
    if (!Object.hasOwn(got, k)) out.push(`    ${p}.${k}: expected ${J(exp[k])}, absent`);
    else if (!Object.hasOwn(exp, k)) out.push(`    ${p}.${k}: unexpected ${J(got[k])}`);
    else diff(exp[k], got[k], `${p}.${k}`, out);
  }
  return out;
}

function expectSame(what, exp, got) {
  const d = diff(exp, got, '', []);
  if (d.length) fail(`${what}: ${d.length} field(s) differ\n${d.slice(0, 40).join('\n')}`);
  return d.length === 0;
}

// ------------------------------------------------------------------ fixture -> protobufjs input

function toPbjsValue(f, v) {
  if (isMsg(f)) return toPbjs(f.resolvedType, v);
  if (f.type === 'bytes') return Buffer.from(v, 'hex');
  if (f.type === 'double' || f.type === 'float') return typeof v === 'string' ? SPECIAL[v] : v;
  return v;
}

function toPbjs(type, v) {
  const o = {};
  for (const [k, x] of Object.entries(v)) {
    const f = type.fields[k];
    if (!f) continue; // comments (validated separately)
    if (f.map) o[k] = Object.fromEntries(Object.entries(x).map(([key, val]) => [key, toPbjsValue(f, val)]));
    else if (f.repeated) o[k] = x.map((e) => toPbjsValue(f, e));
    else o[k] = toPbjsValue(f, x);
  }
  return o;
}

// What in a fixture value makes protobuf-c's and protobufjs' bytes legitimately
// differ (protobuf encoding is not canonical there):
//   intKeys           a map key JS enumerates first ("10"): entry order differs
//   mapEntryDefaults  a map entry whose key or value is the default ("")
//   explicitDefaults  an implicit-presence field explicitly set to its default
function traits(type, v, t = { intKeys: false, mapEntryDefaults: false, explicitDefaults: false }) {
  for (const [k, x] of Object.entries(v)) {
    const f = type.fields[k];
    if (!f) continue;
    if (f.map) {
      for (const [key, val] of Object.entries(x)) {
        if (/^(0|[1-9]\d{0,8})$/.test(key)) t.intKeys = true;
        if (key === '' || (!isMsg(f) && J(canonScalar(f, val, 'fixture')) === J(scalarDefault(f)))) t.mapEntryDefaults = true;
        if (isMsg(f)) traits(f.resolvedType, val, t);
      }
    } else if (isMsg(f)) {
      for (const e of f.repeated ? x : [x]) traits(f.resolvedType, e, t);
    } else if (!f.repeated && !f.partOf && J(canonScalar(f, x, 'fixture')) === J(defaultOf(f))) {
      t.explicitDefaults = true;
    }
  }
  return t;
}

// ------------------------------------------------------------------ fixture validation + coverage

const coverage = new Map(); // "Type.field" -> rich value seen
const enumTop = new Map(); // "Type.field" -> highest enum value seen
const richness = { negInt32: 0, negInt64: 0, int64NearMax: 0, dblTenth: 0, dbl1e300: 0,
  bytesNulFf: 0, nonAscii: 0 };

function validate(type, v, p) {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return fail(`fixture ${p}: not an object`);
  const arms = new Map();
  for (const [k, x] of Object.entries(v)) {
    if (k.startsWith('$')) continue;
    const f = type.fields[k];
    if (!f) {
      fail(`fixture ${p}.${k}: no such field in ${fullName(type)}`);
      continue;
    }
    if (f.partOf) {
      if (arms.has(f.partOf.name)) fail(`fixture ${p}: oneof ${f.partOf.name} set twice (${arms.get(f.partOf.name)}, ${k})`);
      arms.set(f.partOf.name, k);
    }
    const key = `${type.name}.${k}`;
    const one = (e, ep) => {
      if (isMsg(f)) return validate(f.resolvedType, e, ep);
      const c = canonScalar(f, e, 'fixture');
      if (typeof c === 'string' && c.startsWith('<bad')) return fail(`fixture ${ep}: ${c}`);
      if (isEnum(f)) {
        const max = Math.max(...Object.values(f.resolvedType.values));
        if (e < -2147483648 || e > 2147483647) fail(`fixture ${ep}: enum value out of int32 range`);
        enumTop.set(key, Math.max(enumTop.get(key) ?? -Infinity, e === max ? Infinity : e));
      }
      if (INT32.has(f.type) && (e < -2147483648 || e > 2147483647)) fail(`fixture ${ep}: out of int32 range`);
      if (INT64.has(f.type)) {
        const b = BigInt(c);
        if (b < -(2n ** 63n) || b >= 2n ** 63n) fail(`fixture ${ep}: out of int64 range`);
        if (b < 0n) richness.negInt64++;
        if (b > 2n ** 62n) richness.int64NearMax++;
      }
      if (INT32.has(f.type) && e < 0) richness.negInt32++;
      if (f.type === 'double' && e === 0.1) richness.dblTenth++;
      if (f.type === 'double' && e === 1e300) richness.dbl1e300++;
      if (f.type === 'bytes' && /^(..)*00/.test(c) && /^(..)*ff/.test(c)) richness.bytesNulFf++;
      if (f.type === 'string') {
        if (e.includes('\0')) fail(`fixture ${ep}: NUL in a string field (protobuf-c truncates; use bytes)`);
        if (/[^\x00-\x7f]/.test(e)) richness.nonAscii++;
      }
      return c;
    };
    let rich;
    if (f.map) {
      if (!x || typeof x !== 'object' || Array.isArray(x)) {
        fail(`fixture ${p}.${k}: a map is an object`);
        continue;
      }
      for (const [mk, mv] of Object.entries(x)) one(mv, `${p}.${k}[${mk}]`);
      rich = Object.keys(x).length >= 2;
    } else if (f.repeated) {
      if (!Array.isArray(x)) {
        fail(`fixture ${p}.${k}: a repeated field is an array`);
        continue;
      }
      x.forEach((e, i) => one(e, `${p}.${k}[${i}]`));
      rich = x.length >= 2;
    } else {
      const c = one(x, `${p}.${k}`);
      rich = isMsg(f) || f.partOf || J(c) !== J(defaultOf(f));
    }
    if (rich) coverage.set(key, true);
  }
}

// ------------------------------------------------------------------ wire-level comparison

// Parses a buffer into [{id, wt, raw, body}]: raw is the hex of the value
// (varint bytes, fixed bytes, or the length-delimited body without its length).
function parseWire(buf) {
  const r = protobuf.Reader.create(buf);
  const out = [];
  while (r.pos < r.len) {
    const tag = r.uint32();
    const x = { id: tag >>> 3, wt: tag & 7 };
    let start = r.pos;
    if (x.wt === 2) {
      const len = r.uint32();
      start = r.pos;
      r.skip(len);
    } else {
      r.skipType(x.wt);
    }
    x.body = r.buf.subarray(start, r.pos);
    x.raw = Buffer.from(x.body).toString('hex');
    out.push(x);
  }
  return out;
}

// One line per field (sub-messages opened and closed, map entries on one
// line), so that two encodings can be compared and diffed. opts:
//   sortMaps          sort the entries of each run of one map field
//   mapEntryDefaults  drop default key/value fields inside map entries
//   dropDefaults      drop implicit-presence scalars at their default value
const ZERO = new Set(['00', '0000000000000000', '00000000', '']);
function wireLines(type, buf, opts, prefix = '') {
  const out = [];
  let run = null;
  const flush = () => {
    if (run) out.push(...(opts.sortMaps ? run.lines.sort() : run.lines));
    run = null;
  };
  for (const x of parseWire(buf)) {
    const f = type ? type.fieldsById[x.id] : null;
    const name = `${prefix}${f ? f.name : `#${x.id}`}`;
    if (f && f.map && x.wt === 2) {
      let kv = parseWire(x.body);
      if (opts.mapEntryDefaults) kv = kv.filter((e) => !ZERO.has(e.raw));
      const line = `${name} {${kv.map((e) => `${e.id}/wt${e.wt}:${e.raw}`).join(' ')}}`;
      if (!run || run.id !== x.id) {
        flush();
        run = { id: x.id, lines: [] };
      }
      run.lines.push(line);
      continue;
    }
    flush();
    if (f && isMsg(f) && x.wt === 2) {
      out.push(`${name} {`, ...wireLines(f.resolvedType, x.body, opts, `${name}.`), `${name} }`);
    } else if (!(opts.dropDefaults && f && !f.repeated && !f.partOf && !isMsg(f) && ZERO.has(x.raw))) {
      out.push(`${name} wt${x.wt}:${x.raw}`);
    }
  }
  flush();
  return out;
}

// 'identical', or the tolerated difference that explains the bytes
// ('map-order' | 'map-entry-defaults' | 'explicit-defaults'), or null (mismatch).
// Only differences the case's traits() allow are tolerated.
function compareBytes(type, aBuf, bBuf, allow) {
  if (Buffer.compare(aBuf, bBuf) === 0) return 'identical';
  const same = (opts) => J(wireLines(type, aBuf, opts)) === J(wireLines(type, bBuf, opts));
  const opts = {};
  for (const [kind, trait, opt] of [['map-order', 'intKeys', 'sortMaps'],
    ['map-entry-defaults', 'mapEntryDefaults', 'mapEntryDefaults'],
    ['explicit-defaults', 'explicitDefaults', 'dropDefaults']]) {
    if (!allow[trait]) continue;
    opts[opt] = true;
    if (same(opts)) return kind;
  }
  return null;
}

function wireDiff(type, aBuf, bBuf, aName = 'protobuf-c', bName = 'protobufjs') {
  let opts = { sortMaps: true, mapEntryDefaults: true }; // keep tolerable differences out, if that leaves any
  if (J(wireLines(type, aBuf, opts)) === J(wireLines(type, bBuf, opts))) opts = {};
  const a = wireLines(type, aBuf, opts);
  const b = wireLines(type, bBuf, opts);
  const lines = [`    ${aName} (${aBuf.length} B): ${aBuf.toString('hex').slice(0, 400)}`,
    `    ${bName} (${bBuf.length} B): ${bBuf.toString('hex').slice(0, 400)}`];
  const minus = (xs, ys) => {
    const m = ys.reduce((acc, y) => acc.set(y, (acc.get(y) || 0) + 1), new Map());
    return xs.filter((x) => {
      const n = m.get(x) || 0;
      if (n) m.set(x, n - 1);
      return !n;
    });
  };
  const onlyA = minus(a, b);
  const onlyB = minus(b, a);
  for (const x of onlyA.slice(0, 8)) lines.push(`    only ${aName}: ${x.slice(0, 200)}`);
  for (const x of onlyB.slice(0, 8)) lines.push(`    only ${bName}: ${x.slice(0, 200)}`);
  return lines.join('\n');
}

// ------------------------------------------------------------------ helpers

function runHelper(args, what) {
  try {
    return execFileSync(HELPER, args, { encoding: 'utf8', maxBuffer: 256 << 20, stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (e) {
    throw new Error(`wire_identity ${what} failed (status ${e.status}):\n${e.stderr || e.message}`);
  }
}

const decodeC = (dir) => JSON.parse(runHelper(['decode', dir], 'decode'));
const pbjsObject = (type, buf) => type.toObject(type.decode(buf), TOOBJ);
const stripUnknown = (v) => {
  const { $unknown, ...rest } = v;
  return rest;
};

// ------------------------------------------------------------------ main

function main() {
  if (!fs.existsSync(HELPER)) throw new Error(`missing ${HELPER}: build it with make`);
  const fixture = JSON.parse(fs.readFileSync(FIXTURE, 'utf8'));
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'wire-identity-'));
  const cDir = path.join(tmp, 'c');
  const jsDir = path.join(tmp, 'js');
  fs.mkdirSync(cDir);
  fs.mkdirSync(jsDir);

  // 1. the C table and protobufjs see the same set of messages
  const cTypes = runHelper(['list'], 'list').trim().split('\n').sort();
  const jsTypes = TYPES.map(fullName).sort();
  const onlyC = cTypes.filter((t) => !jsTypes.includes(t));
  const onlyJs = jsTypes.filter((t) => !cTypes.includes(t));
  if (onlyC.length || onlyJs.length) fail(`message sets differ: only in the C table ${J(onlyC)}, only in protobufjs ${J(onlyJs)}`);

  // 2. the fixture covers every message and field with rich values
  if (fixture.package !== 'bigfleet.v1alpha1') fail('fixture package must be bigfleet.v1alpha1');
  const msgs = fixture.messages || {};
  for (const t of TYPES) if (!msgs[t.name]) fail(`fixture has no case for ${fullName(t)}`);
  for (const name of Object.keys(msgs)) if (!name.startsWith('$') && !TYPES.some((t) => t.name === name)) fail(`fixture type ${name} is not in the schema`);
  const cases = [];
  for (const t of TYPES) {
    for (const [cname, v] of Object.entries(msgs[t.name] || {})) {
      if (cname.startsWith('$')) continue;
      validate(t, v, `${t.name}@${cname}`);
      cases.push({ type: t, cname, v, label: `${fullName(t)}@${cname}` });
    }
  }
  for (const t of TYPES) {
    for (const f of t.fieldsArray) {
      const key = `${t.name}.${f.name}`;
      if (!coverage.get(key)) fail(`fixture never sets ${key} to a rich value (non-default; >= 2 elements/entries)`);
      if (isEnum(f) && enumTop.get(key) !== Infinity) fail(`fixture never sets ${key} to the highest enum value`);
    }
  }
  for (const [k, n] of Object.entries(richness)) if (!n) fail(`fixture lacks a ${k} value`);
  if (failures.length) return finish(tmp, 0);

  // 3. C encodes; protobufjs decodes and compares with the fixture
  runHelper(['encode', FIXTURE, cDir], 'encode');
  const expected = new Map();
  const cBytes = new Map();
  for (const c of cases) {
    const buf = fs.readFileSync(path.join(cDir, `${c.label}.bin`));
    cBytes.set(c.label, buf);
    expected.set(c.label, canon(c.type, c.v, 'fixture'));
    let msg;
    try {
      msg = c.type.decode(buf);
    } catch (e) {
      fail(`${c.label}: protobufjs cannot decode protobuf-c's bytes: ${e.message}`);
      continue;
    }
    const verr = c.type.verify(msg);
    // verify() rejects enum numbers the schema does not name, although decode
    // keeps them (proto3 enums are open); the value comparison still applies.
    if (verr && /enum value expected/.test(verr)) notes.push(`${c.label}: protobufjs verify() rejects open enum values (${verr}); decode keeps them`);
    else if (verr) fail(`${c.label}: protobufjs verify: ${verr}`);
    expectSame(`${c.label}: protobuf-c -> protobufjs`, expected.get(c.label),
      canon(c.type, c.type.toObject(msg, TOOBJ), 'pbjs'));
  }
  for (const t of TYPES) {
    const buf = fs.readFileSync(path.join(cDir, `${fullName(t)}@_default.bin`));
    if (buf.length !== 0) fail(`${fullName(t)}: protobuf-c packs a default message to ${buf.length} bytes, expected 0`);
    if (t.encode(t.create({})).finish().length !== 0) fail(`${fullName(t)}: protobufjs packs a default message to non-zero bytes`);
    fs.writeFileSync(path.join(jsDir, `${fullName(t)}@_default.bin`), Buffer.alloc(0));
  }

  // 3b. the same through proto-loader's (grpc-js') serializers for RPC types
  const pkgDef = protoLoader.loadSync(FILES, { keepCase: true, longs: String, enums: Number,
    bytes: String, defaults: true, oneofs: true, includeDirs: [PROTO_DIR] });
  let viaLoader = 0;
  for (const svc of pkg.nestedArray.filter((o) => o instanceof protobuf.Service)) {
    const def = pkgDef[fullName(svc)];
    for (const m of svc.methodsArray) {
      for (const [t, ser, des] of [[m.resolvedRequestType, 'requestSerialize', 'requestDeserialize'],
        [m.resolvedResponseType, 'responseSerialize', 'responseDeserialize']]) {
        for (const c of cases.filter((x) => x.type === t)) {
          const got = canon(t, def[m.name][des](cBytes.get(c.label)), 'pbjs');
          expectSame(`${c.label}: protobuf-c -> proto-loader ${fullName(svc)}/${m.name} ${des}`, expected.get(c.label), got);
          const sbuf = def[m.name][ser](toPbjs(t, c.v));
          const plain = t.encode(t.fromObject(toPbjs(t, c.v))).finish();
          if (Buffer.compare(sbuf, plain) !== 0) fail(`${c.label}: proto-loader ${ser} differs from protobufjs encode`);
          viaLoader++;
        }
      }
    }
  }

  // 4. protobufjs encodes; bytes compared with C's
  const byteKinds = { identical: 0, 'map-order': 0, 'map-entry-defaults': 0, 'explicit-defaults': 0 };
  const KIND_TEXT = {
    'map-order': 'map entry order',
    'map-entry-defaults': 'default key/value fields inside map entries (protobufjs writes them, protobuf-c omits them)',
    'explicit-defaults': 'fields explicitly set to their default value (protobufjs writes them, protobuf-c omits them)',
  };
  const kindCases = {};
  for (const c of cases) {
    const buf = Buffer.from(c.type.encode(c.type.fromObject(toPbjs(c.type, c.v))).finish());
    fs.writeFileSync(path.join(jsDir, `${c.label}.bin`), buf);
    const kind = compareBytes(c.type, cBytes.get(c.label), buf, traits(c.type, c.v));
    if (!kind) fail(`${c.label}: encodings differ\n${wireDiff(c.type, cBytes.get(c.label), buf)}`);
    else {
      byteKinds[kind]++;
      if (kind !== 'identical') (kindCases[kind] ||= []).push(`${c.label.replace(/^.*\./, '')} (${cBytes.get(c.label).length} vs ${buf.length} B)`);
    }
  }
  for (const [kind, list] of Object.entries(kindCases)) notes.push(`bytes differ only by ${KIND_TEXT[kind]}: ${list.join(', ')}`);

  // 5. probes (raw Writer)
  const probes = buildProbes(msgs, jsDir, cBytes);

  // 6. C decodes everything protobufjs wrote
  const dumps = decodeC(jsDir);
  for (const c of cases) {
    const dump = dumps[c.label];
    if (!dump || !dump.ok) {
      fail(`${c.label}: protobuf-c failed to unpack protobufjs' bytes`);
      continue;
    }
    expectSame(`${c.label}: protobufjs -> protobuf-c`, expected.get(c.label), canon(c.type, dump.value, 'c'));
    // protobuf-c's re-pack of what protobufjs sent is protobuf-c's own encoding
    // of the fixture (entry order follows the bytes it was given)
    const re = Buffer.from(dump.repacked, 'hex');
    if (!compareBytes(c.type, cBytes.get(c.label), re, { intKeys: traits(c.type, c.v).intKeys })) fail(`${c.label}: protobuf-c re-pack of protobufjs' bytes is not protobuf-c's encoding of the fixture\n${wireDiff(c.type, cBytes.get(c.label), re, 'encode', 're-pack')}`);
  }
  for (const t of TYPES) {
    const dump = dumps[`${fullName(t)}@_default`];
    if (!dump || !dump.ok) fail(`${fullName(t)}: protobuf-c failed to unpack zero bytes`);
    else expectSame(`${fullName(t)}@_default: protobufjs -> protobuf-c`, canon(t, {}, 'fixture'), canon(t, dump.value, 'c'));
  }
  for (const p of probes) p.check(dumps[p.label], p);

  console.log(`wire identity: ${TYPES.length} message types (C table ${cTypes.length}), ${cases.length} fixture cases + ${TYPES.length} default instances, ${viaLoader} via proto-loader RPC (de)serializers, ${probes.length} raw probes`);
  console.log(`  bytes protobuf-c vs protobufjs: ${byteKinds.identical} identical, ${byteKinds['map-order']} up to map entry order, ${byteKinds['map-entry-defaults']} up to default values inside map entries, ${byteKinds['explicit-defaults']} up to explicitly set defaults`);
  return finish(tmp, cases.length);
}

function finish(tmp, n) {
  for (const n2 of notes) console.log(`  note: ${n2}`);
  if (failures.length) {
    throw new Error(`${failures.length} problem(s):\n${failures.map((f) => `- ${f}`).join('\n')}\n(files kept in ${tmp})`);
  }
  if (process.env.WIRE_KEEP) console.log(`  files kept in ${tmp}`);
  else fs.rmSync(tmp, { recursive: true, force: true });
  console.log(`PASS wire_identity (${n} cases)`);
}

// ------------------------------------------------------------------ probes

function buildProbes(msgs, dir, cBytes) {
  const probes = [];
  const T = (n) => pkg.lookupType(n);
  const enc = (t, v) => Buffer.from(t.encode(t.fromObject(toPbjs(t, v))).finish());
  const firstName = (t) => Object.keys(msgs[t.name]).find((k) => !k.startsWith('$'));
  const firstCase = (t) => msgs[t.name][firstName(t)];
  const add = (label, type, buf, check) => {
    const full = `${fullName(type)}@probe-${label}`;
    fs.writeFileSync(path.join(dir, `${full}.bin`), buf);
    probes.push({ label: full, type, buf, check });
  };
  const cOk = (dump, p) => {
    if (!dump || !dump.ok) {
      fail(`${p.label}: protobuf-c failed to unpack`);
      return null;
    }
    return dump.value;
  };
  const pbjsOf = (p) => {
    try {
      return canon(p.type, pbjsObject(p.type, p.buf), 'pbjs');
    } catch (e) {
      fail(`${p.label}: protobufjs failed to decode: ${e.message}`);
      return null;
    }
  };

  // (a) a value on every reserved field number, in front of a full message;
  //     protobuf-c must skip it (keeping it as an unknown field), protobufjs too.
  const WT = [0, 1, 2, 5];
  let k = 0;
  for (const t of TYPES) {
    for (const range of t.reserved || []) {
      if (!Array.isArray(range)) continue; // reserved names
      for (let n = range[0]; n <= range[1]; n++) {
        const wt = WT[k++ % WT.length];
        const w = protobuf.Writer.create().uint32((n << 3) | wt);
        if (wt === 0) w.int64('-9223372036854775807');
        else if (wt === 1) w.fixed64('1767225600123456789');
        else if (wt === 2) w.bytes(Buffer.from('old\0value\xff', 'latin1'));
        else w.fixed32(0xdeadbeef);
        const v = firstCase(t);
        const unknown = Buffer.from(w.finish());
        add(`reserved-${n}`, t, Buffer.concat([unknown, enc(t, v)]), (dump, p) => {
          const val = cOk(dump, p);
          if (!val) return;
          const u = val.$unknown || [];
          if (u.length !== 1 || u[0][0] !== n || u[0][1] !== wt) fail(`${p.label}: protobuf-c unknown fields ${J(u)}, expected field ${n} wire type ${wt}`);
          expectSame(`${p.label}: protobuf-c known fields`, canon(t, v, 'fixture'), canon(t, stripUnknown(val), 'c'));
          const pj = pbjsOf(p);
          if (pj) expectSame(`${p.label}: protobufjs`, canon(t, v, 'fixture'), pj);
          // protobuf-c keeps the unknown field and re-packs it after the known ones
          const exp = Buffer.concat([cBytes.get(`${fullName(t)}@${firstName(t)}`), unknown]);
          if (!compareBytes(t, exp, Buffer.from(dump.repacked, 'hex'), { intKeys: traits(t, v).intKeys })) fail(`${p.label}: protobuf-c re-pack is not its encoding + the unknown field\n${wireDiff(t, exp, Buffer.from(dump.repacked, 'hex'), 'expected', 're-pack')}`);
        });
      }
    }
  }
  // reserved number inside a nested message: an older operator's CapacityNeed.count (4)
  {
    const ccn = T('ClusterCapacityNeeds');
    const need = T('CapacityNeed');
    const nv = firstCase(need);
    const needBuf = Buffer.concat([protobuf.Writer.create().uint32((4 << 3) | 0).int32(12).finish(), enc(need, nv)]);
    const buf = Buffer.from(protobuf.Writer.create().uint32((1 << 3) | 2).string('cluster-α')
      .uint32((3 << 3) | 2).bytes(needBuf).finish());
    add('nested-reserved', ccn, buf, (dump, p) => {
      const val = cOk(dump, p);
      if (!val) return;
      const n0 = val.needs && val.needs[0];
      if (!n0 || J(n0.$unknown) !== J([[4, 0, '0c']])) fail(`${p.label}: protobuf-c needs[0].$unknown = ${J(n0 && n0.$unknown)}, expected [[4,0,"0c"]]`);
      const exp = canon(ccn, { cluster_id: 'cluster-α', needs: [nv] }, 'fixture');
      if (n0) val.needs[0] = stripUnknown(n0);
      expectSame(`${p.label}: protobuf-c`, exp, canon(ccn, val, 'c'));
      const pj = pbjsOf(p);
      if (pj) expectSame(`${p.label}: protobufjs`, exp, pj);
    });
  }

  // (b) ListFilter.states packed (protobufjs' default, covered above), unpacked, mixed
  {
    const lf = T('ListFilter');
    const v = msgs.ListFilter.full;
    const rest = enc(lf, { ...v, states: [] });
    const unpacked = protobuf.Writer.create();
    for (const s of v.states) unpacked.uint32((1 << 3) | 0).int32(s);
    const half = Math.floor(v.states.length / 2);
    const mixed = protobuf.Writer.create();
    for (const s of v.states.slice(0, half)) mixed.uint32((1 << 3) | 0).int32(s);
    mixed.uint32((1 << 3) | 2).fork();
    for (const s of v.states.slice(half)) mixed.int32(s);
    mixed.ldelim();
    const packedBuf = enc(lf, v);
    if (packedBuf[0] !== ((1 << 3) | 2)) fail('ListFilter@full: protobufjs did not pack states');
    for (const [label, w] of [['states-unpacked', unpacked], ['states-mixed', mixed]]) {
      add(label, lf, Buffer.concat([w.finish(), rest]), (dump, p) => {
        const val = cOk(dump, p);
        if (!val) return;
        expectSame(`${p.label}: protobuf-c`, canon(lf, v, 'fixture'), canon(lf, val, 'c'));
        const pj = pbjsOf(p);
        if (pj) expectSame(`${p.label}: protobufjs`, canon(lf, v, 'fixture'), pj);
        // protobuf-c re-packs canonically: packed, like protobufjs and the C encoder
        if (dump.repacked !== cBytes.get('bigfleet.v1alpha1.ListFilter@full').toString('hex')) fail(`${p.label}: protobuf-c re-pack is not its packed encoding`);
      });
    }
  }

  // (c) one map key twice: proto3 says the last entry wins
  {
    const m = T('Machine');
    const entry = (key, val) => protobuf.Writer.create().uint32((1 << 3) | 2).string(key).uint32((2 << 3) | 2).string(val).finish();
    const w = protobuf.Writer.create().uint32((1 << 3) | 2).string('m-dup');
    for (const [key, val] of [['a', '1'], ['b', 'x'], ['a', '2']]) w.uint32((10 << 3) | 2).bytes(entry(key, val));
    add('duplicate-map-key', m, Buffer.from(w.finish()), (dump, p) => {
      const val = cOk(dump, p);
      const pj = pbjsOf(p);
      if (pj && J(pj.labels) !== J({ a: '2', b: 'x' })) fail(`${p.label}: protobufjs labels ${J(pj.labels)}, expected last-wins {a:2,b:x}`);
      // protobuf-c has no map semantics: it keeps every entry in wire order, so
      // C consumers must apply last-wins themselves.
      if (val && J(val.labels) !== J([['a', '1'], ['b', 'x'], ['a', '2']])) fail(`${p.label}: protobuf-c labels ${J(val.labels)}, expected all three entries in wire order`);
      if (val) notes.push(`${p.label}: protobuf-c keeps duplicate map keys (${J(val.labels)}); protobufjs keeps the last (${J(pj && pj.labels)})`);
    });
  }

  // (d) two members of one oneof: the last one wins
  {
    const om = T('OperatorMessage');
    const hello = firstCase(T('Hello'));
    const rollup = firstCase(T('ClusterCapacityNeeds'));
    const buf = Buffer.concat([enc(om, { hello }), enc(om, { rollup })]);
    add('oneof-last-wins', om, buf, (dump, p) => {
      const val = cOk(dump, p);
      const exp = canon(om, { rollup }, 'fixture');
      if (val) expectSame(`${p.label}: protobuf-c`, exp, canon(om, val, 'c'));
      const pj = pbjsOf(p);
      if (pj) expectSame(`${p.label}: protobufjs`, exp, pj);
    });
  }

  // (e) a singular scalar twice (last wins) and a singular message split in two (merged)
  {
    const m = T('Machine');
    const buf = Buffer.concat([enc(m, { id: 'first', host: { provider: 'p-1' } }),
      enc(m, { id: 'second', host: { ref: 'r-2' } })]);
    add('repeated-singular', m, buf, (dump, p) => {
      const val = cOk(dump, p);
      const exp = canon(m, { id: 'second', host: { provider: 'p-1', ref: 'r-2' } }, 'fixture');
      if (val) expectSame(`${p.label}: protobuf-c`, exp, canon(m, val, 'c'));
      const pj = pbjsOf(p);
      if (pj && J(pj) !== J(exp)) {
        notes.push(`${p.label}: protobufjs does not merge a repeated singular sub-message (host = ${J(pj.host)}); protobuf-c merges it as the spec says`);
      }
    });
  }

  // (f) -0.0 in an implicit-presence double: protobufjs (like Go and C++) sends
  //     it, protobuf-c reads it back as -0.0, but protobuf-c's own packer
  //     treats -0.0 as the default and leaves the field out.
  {
    const m = T('Machine');
    const buf = enc(m, { id: 'm-neg-zero', price_per_hour: -0 });
    const without = enc(m, { id: 'm-neg-zero' });
    add('negative-zero', m, buf, (dump, p) => {
      const val = cOk(dump, p);
      const exp = canon(m, { id: 'm-neg-zero', price_per_hour: -0 }, 'fixture');
      if (buf.length !== without.length + 9) fail(`${p.label}: protobufjs did not send -0.0`);
      if (val) expectSame(`${p.label}: protobuf-c`, exp, canon(m, val, 'c'));
      const pj = pbjsOf(p);
      if (pj) expectSame(`${p.label}: protobufjs`, exp, pj);
      if (val && dump.repacked !== without.toString('hex')) fail(`${p.label}: protobuf-c re-pack ${dump.repacked}, expected -0.0 dropped (${without.toString('hex')})`);
      else if (val) notes.push(`${p.label}: protobuf-c decodes -0.0 but its packer drops it (treats it as the proto3 default); protobufjs sends it`);
    });
  }

  // (g) a negative int32 written as a 5-byte varint (some encoders do): must read as -1
  {
    const ra = T('ReclaimAck');
    const buf = Buffer.from([(2 << 3) | 0, 0xff, 0xff, 0xff, 0xff, 0x0f]);
    add('int32-5-byte-negative', ra, buf, (dump, p) => {
      const val = cOk(dump, p);
      const exp = canon(ra, { nodes_started: -1 }, 'fixture');
      if (val) expectSame(`${p.label}: protobuf-c`, exp, canon(ra, val, 'c'));
      const pj = pbjsOf(p);
      if (pj) expectSame(`${p.label}: protobufjs`, exp, pj);
      if (val && dump.repacked !== '10ffffffffffffffffff01') fail(`${p.label}: protobuf-c re-pack ${dump.repacked}, expected the 10-byte form`);
    });
  }
  return probes;
}

test('protobuf-c and protobufjs read and write every fixture and probe alike (wire identity)', () => main());
