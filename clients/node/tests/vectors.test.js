// The command vectors of clients/vectors/ (the files holding a `vectors` array, format in
// clients/SPEC.md section 4) against a real server, on every
// client variant: the typed request builds exactly the vector's arguments, sending them replies
// the vector's raw reply, and the typed call parses it into the vector's decision and renders
// its headers. Each run uses keys no other run uses.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { commands, renderHeaders, RL, RLError } from '../src/index.js';
import { VARIANTS } from './support/clients.js';
import { REPO, SCRIPT_MODE, Server } from './support/server.js';

const DIR = join(REPO, 'clients/vectors');
// Policies and scenarios live beside them; tests/engine.test.js runs those.
const FILES = readdirSync(DIR).filter((f) => f.endsWith('.json')).sort()
  .filter((f) => Array.isArray(JSON.parse(readFileSync(join(DIR, f), 'utf8')).vectors));
let next = 0;
const fresh = () => `v${process.pid}-${next++}`;

function substitute(v, prefix) {
  if (typeof v === 'string') return v.replaceAll('$p', prefix);
  if (Array.isArray(v)) return v.map((x) => substitute(x, prefix));
  if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, substitute(x, prefix)]));
  return v;
}

function toJson(v) {
  if (Buffer.isBuffer(v)) return v.toString('utf8');
  if (v instanceof Map) return Object.fromEntries([...v].map(([k, x]) => [String(k), toJson(x)]));
  if (Array.isArray(v)) return v.map(toJson);
  if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, toJson(x)]));
  return v === undefined ? null : v;
}

function matches(expected, actual) {
  if (expected && typeof expected === 'object' && !Array.isArray(expected)) {
    if ('$range' in expected) {
      const [lo, hi] = expected.$range;
      return Number.isInteger(actual) && actual >= lo && actual <= hi;
    }
    if ('$any' in expected) return actual !== null && actual !== undefined;
    if (!actual || typeof actual !== 'object' || Array.isArray(actual)) return false;
    const keys = Object.keys(expected);
    return keys.length === Object.keys(actual).length && keys.every((k) => k in actual && matches(expected[k], actual[k]));
  }
  if (Array.isArray(expected)) {
    return Array.isArray(actual) && actual.length === expected.length && expected.every((e, i) => matches(e, actual[i]));
  }
  return expected === actual;
}

// `<name>_ms`, or `<name>_us` for durations finer than a millisecond.
const dur = (req, name) => req[`${name}_ms`] ?? (req[`${name}_us`] !== undefined ? req[`${name}_us`] / 1000 : undefined);

const rateOf = (r) => ({ key: r.key, limit: r.limit, period: dur(r, 'period'), burst: r.burst, cost: r.cost, algo: r.algo });
const admitOf = (req) => ({ ...rateOf(req), dryRun: req.dry_run,
  reserve: req.reserve && { id: req.reserve.id, keep: dur(req.reserve, 'keep') } });
const multiOf = (req) => ({ rules: req.rules.map((r) => ({ name: r.name, ...rateOf(r) })), dryRun: req.dry_run });
const grantOf = (req) => ({ key: req.key, limit: req.limit, period: dur(req, 'period'), burst: req.burst, algo: req.algo,
  want: req.want, ttl: dur(req, 'ttl') });
const acquireOf = (req) => ({ key: req.key, capacity: req.capacity, lease: dur(req, 'lease'), holder: req.holder });

function build(req) {
  switch (req.type) {
    case 'admit': return commands.admit(admitOf(req));
    case 'multi': return commands.multi(multiOf(req));
    case 'grant': return commands.grant(grantOf(req));
    case 'acquire': return commands.acquire(acquireOf(req));
    case 'release': return commands.release(req.key, req.holder);
    case 'renew': return commands.renew(req.key, req.holder, dur(req, 'lease'));
    case 'settle': return commands.settle(req.key, req.id, req.actual, { forget: req.forget });
    case 'info': return commands.info(req.key);
    default: throw new Error(`request type ${req.type}`);
  }
}

// The headers the engine renders for a typed decision (the addon's rendering, the gateway's).
const headerJson = (rules) => Object.fromEntries(renderHeaders(rules, true));

async function typed(rl, req, ruleName) {
  switch (req.type) {
    case 'admit': {
      const a = admitOf(req);
      const d = await rl.admit(a);
      const rendered = ruleName && headerJson([{ name: ruleName, limit: a.limit, periodMs: a.period, capacity: d.capacity,
        remaining: d.remaining, resetAfterMs: d.reset_after_ms, retryAfterMs: d.allowed ? undefined : d.retry_after_ms }]);
      return [d, rendered];
    }
    case 'multi': {
      const m = multiOf(req);
      const d = await rl.multi(m);
      const rules = m.rules.map((r, i) => ({ name: r.name, limit: r.limit, periodMs: r.period, capacity: r.burst ?? r.limit,
        remaining: d.rules[i].remaining, resetAfterMs: d.rules[i].reset_after_ms,
        retryAfterMs: d.denied_by === r.name ? d.retry_after_ms : undefined }));
      return [d, headerJson(rules)];
    }
    case 'grant': return [await rl.grant(grantOf(req))];
    case 'acquire': return [await rl.acquire(acquireOf(req))];
    case 'release': return [await rl.release(req.key, req.holder)];
    case 'renew': return [await rl.renew(req.key, req.holder, dur(req, 'lease'))];
    case 'settle': return [await rl.settle(req.key, req.id, req.actual, { forget: req.forget })];
    case 'info': return [await rl.info(req.key)];
    default: throw new Error(`request type ${req.type}`);
  }
}

// A raw command through the client's mode (natively, or through the script), reply unparsed.
function raw(rl, line) {
  const [name, ...args] = line;
  const keys = name === 'RL.MULTI' ? args.slice(1, 1 + Number(args[0])) : [args[0]];
  if (name.startsWith('RL.') || name.startsWith('CL.')) return rl.execute({ name, args, keys, parse: (x) => x });
  return rl.adapter.send(name, args, args[0]);
}

async function setup(rl, lines) {
  for (const line of lines) await raw(rl, line);
}

async function runVector(rl, resp, vector) {
  const name = vector.name;
  if (vector.client_error) {
    assert.equal(vector.client_error, 'invalid_request');
    const v = substitute(vector, fresh());
    await assert.rejects(typed(rl, v.request), (e) => e instanceof RLError && e.kind === 'invalid_request', name);
    return;
  }
  let v = substitute(vector, fresh());
  const cmd = build(v.request);
  assert.deepEqual([cmd.name, ...cmd.args], v.args, `${name}: arguments`);
  await setup(rl, v.setup);
  const sent = raw(rl, v.args);
  if (v.error) {
    await assert.rejects(sent, (e) => e instanceof RLError && e.kind === 'refused' && e.message === v.error, name);
  } else {
    const got = toJson(await sent);
    // The script replies RESP2 shapes on either protocol.
    const want = resp === 3 && !SCRIPT_MODE ? v.resp3 : v.resp2;
    assert.ok(matches(want, got), `${name}: raw ${JSON.stringify(got)} is not ${JSON.stringify(want)}`);
  }
  v = substitute(vector, fresh());
  await setup(rl, v.setup);
  const call = typed(rl, v.request, v.rule_name);
  if (v.error) {
    await assert.rejects(call, (e) => e instanceof RLError && e.kind === 'refused' && e.message === v.error, name);
    return;
  }
  const [decision, rendered] = await call;
  assert.ok(matches(v.decision, toJson(decision)), `${name}: ${JSON.stringify(decision)} is not ${JSON.stringify(v.decision)}`);
  for (const [header, value] of Object.entries(v.headers ?? {})) {
    assert.equal(rendered?.[header], value, `${name}: ${header}`);
  }
}

let server;
before(async () => { server = await Server.start(); });
after(async () => { await server.stop(); });

for (const variant of VARIANTS) {
  describe(`vectors on ${variant.name}`, () => {
    let conn;
    let rl;
    before(async () => {
      conn = await variant.connect(server.port);
      rl = new RL(conn.adapter, { logger: {} });
    });
    after(() => conn.close());
    test('the store mode is detected', async () => {
      await rl.info('mode-probe');
      assert.equal(rl.mode, SCRIPT_MODE ? 'script' : 'module');
    });
    for (const file of FILES) {
      const doc = JSON.parse(readFileSync(join(DIR, file), 'utf8'));
      test(`${file} is format 1`, () => assert.equal(doc.format, 1));
      for (const vector of doc.vectors) {
        test(`${file}: ${vector.name}`, () => runVector(rl, variant.resp, vector));
      }
    }
  });
}
