// Policy validation (every refusal names its field), versioned reloads, key templates, and the
// pure header and fallback arithmetic.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { headers, parsePolicy, PolicyStore } from '../src/index.js';
import { renderKey } from '../src/gateway/policy.js';
import { gcraDecide } from '../src/gateway/fallback.js';
import { REPO } from './support/server.js';

const base = () => ({
  version: 3,
  rules: {
    a: { key: '{t:${tenant}}:a', limit: 10, period: '1s' },
    b: { key: '{t:${tenant}}:b', limit: 10, period: '1m' },
    sem: { key: '{t:${tenant}}:sem', concurrency: 3, lease: '60s' },
  },
  routes: [{ method: 'GET', path: '/x', rules: ['a', 'b'] }],
});

function refusal(mutate) {
  const doc = base();
  mutate(doc);
  try {
    parsePolicy(JSON.stringify(doc));
  } catch (err) {
    return err.message;
  }
  return null;
}

describe('policy validation', () => {
  test('the example policies load', () => {
    const p = parsePolicy(readFileSync(join(REPO, 'clients/rust/northstar.policy.json'), 'utf8'));
    assert.equal(p.version, 7);
    assert.equal(p.route('get', '/catalog').rules.map((r) => r.name).join(), 'read,tenant,global');
    assert.equal(p.store.timeoutMs, 50);
  });

  for (const [what, mutate, message] of [
    ['not JSON', null, /^invalid policy: not JSON/],
    ['an unknown field', (d) => { d.extra = 1; }, 'invalid policy: extra: unknown field'],
    ['an unknown rule field', (d) => { d.rules.a.colour = 1; }, 'invalid policy: rules.a.colour: unknown field'],
    ['a missing version', (d) => { delete d.version; }, 'invalid policy: version: required'],
    ['an unknown rule', (d) => { d.routes[0].rules[1] = 'zz'; }, "invalid policy: routes[0].rules[1]: unknown rule 'zz'"],
    ['a rule twice', (d) => { d.routes[0].rules = ['a', 'a']; }, "invalid policy: routes[0].rules[1]: rule 'a' given twice"],
    ['no rule', (d) => { d.routes[0].rules = []; }, 'invalid policy: routes[0].rules: a route needs at least one rule'],
    ['a bare number', (d) => { d.rules.a.period = '10'; },
      'invalid policy: rules.a.period: needs a unit: add ms, s, m, h or d (for example 10s)'],
    ['an unknown unit', (d) => { d.rules.a.period = '10y'; }, /^invalid policy: rules.a.period: must be a positive integer/],
    ['a period too long', (d) => { d.rules.a.period = '3651d'; }, 'invalid policy: rules.a.period: must be between 1ms and 3650d'],
    ['a semaphore with a rate field', (d) => { d.rules.sem.limit = 3; },
      'invalid policy: rules.sem.limit: a semaphore rule (concurrency) takes no rate field or grant'],
    ['a semaphore without a lease', (d) => { delete d.rules.sem.lease; }, 'invalid policy: rules.sem.lease: a semaphore rule needs a lease'],
    ['a rate rule with a lease', (d) => { d.rules.a.lease = '1s'; }, /^invalid policy: rules.a.lease: /],
    ['a bad algo', (d) => { d.rules.a.algo = 'leaky'; }, /^invalid policy: rules.a.algo: must be one of/],
    ['burst on window', (d) => { Object.assign(d.rules.a, { algo: 'window', burst: 20 }); }, /^invalid policy: rules.a.burst: /],
    ['settle on window', (d) => { Object.assign(d.rules.a, { algo: 'window', settle: true }); }, /^invalid policy: rules.a.settle: /],
    ['cost above the capacity', (d) => { d.rules.a.cost = 11; }, /^invalid policy: rules.a.cost: COST 11 exceeds the capacity 10/],
    ['a log limit above 10000', (d) => { Object.assign(d.rules.a, { algo: 'log', limit: 10001 }); },
      'invalid policy: rules.a.limit: must be in the range [1, 10000]'],
    ['a refill above 3650d', (d) => { Object.assign(d.rules.a, { period: '10d', burst: 1000, limit: 1 }); }, /^invalid policy: rules.a.burst: /],
    ['a duplicate route', (d) => { d.routes.push({ method: 'get', path: '/x', rules: ['a'] }); },
      'invalid policy: routes[1]: duplicate route GET /x (also routes[0])'],
    ['jitter above 1', (d) => { d.retry_after_jitter = 1.5; }, /^invalid policy: retry_after_jitter: /],
    ['zero cache entries', (d) => { d.negative_cache = { entries: 0 }; }, 'invalid policy: negative_cache.entries: must be at least 1'],
    ['zero breaker failures', (d) => { d.store = { breaker: { failures: 0 } }; }, 'invalid policy: store.breaker.failures: must be at least 1'],
    ['a bad proxy', (d) => { d.identity = { trusted_proxies: ['10.0.0.0/8', 'nope'] }; },
      "invalid policy: identity.trusted_proxies[1]: 'nope' is not an IP address or CIDR block"],
    ['keys without a shared hash tag', (d) => { d.rules.b.key = 'b:${tenant}'; }, /^invalid policy: routes\[0\].rules: rules 'a' and 'b' go in one RL.MULTI/],
    ['the same key twice in one call', (d) => { d.rules.b.key = d.rules.a.key; }, "invalid policy: routes[0].rules: rules 'a' and 'b' have the same key"],
    ['a fallback below the first cost', (d) => {
      d.rules.a.cost = 5;
      d.routes[0].on_store_error = { mode: 'fallback', limit: 4, period: '1s' };
    }, "invalid policy: routes[0].on_store_error.burst: the route's first rule costs 5, more than the fallback's capacity 4"],
    ['a deny with a limit', (d) => { d.routes[0].on_store_error = { mode: 'deny', limit: 3 }; }, /^invalid policy: routes\[0\].on_store_error.limit: /],
    ['an unknown variable', (d) => { d.rules.a.key = '{t:${team}}:a'; }, /^invalid policy: rules.a.key: unknown variable '\$\{team\}'/],
    ['an unclosed variable', (d) => { d.rules.a.key = '{t:${tenant'; }, /^invalid policy: rules.a.key: unclosed/],
    ['an empty key', (d) => { d.rules.a.key = ''; }, 'invalid policy: rules.a.key: a key must not be empty'],
  ]) {
    test(`refuses ${what}`, () => {
      const got = mutate === null ? (() => { try { parsePolicy('{'); } catch (e) { return e.message; } })() : refusal(mutate);
      if (message instanceof RegExp) assert.match(got ?? '', message);
      else assert.ok(got?.startsWith(message), got);
    });
  }

  test('a reload needs a higher version and keeps the snapshot in force otherwise', () => {
    const dir = mkdtempSync(join(tmpdir(), 'rl-policy-'));
    const file = join(dir, 'policy.json');
    writeFileSync(file, JSON.stringify(base()));
    const store = PolicyStore.fromFile(file);
    assert.throws(() => store.reload(), { message: 'policy version 3 is not higher than the version in force, 3' });
    writeFileSync(file, '{"version": 9');
    assert.throws(() => store.reload(), { message: /^invalid policy: not JSON/ });
    assert.equal(store.current.version, 3);
    writeFileSync(file, JSON.stringify({ ...base(), version: 4 }));
    assert.equal(store.reload().version, 4);
    assert.equal(store.current.version, 4);
  });
});

describe('keys', () => {
  test('values are escaped so a caller can neither move nor collide keys', () => {
    const t = parsePolicy(JSON.stringify(base())).rules.a.key;
    assert.equal(renderKey(t, { tenant: 'a}b{c%' }), '{t:a%7Db%7Bc%25}:a');
    assert.equal(renderKey(t, { tenant: '' }), '{t:anonymous}:a');
  });
});

describe('headers', () => {
  test('sub-second periods are scaled to whole seconds', () => {
    assert.equal(headers.policyItem({ name: 'fast', limit: 5, periodMs: 250, capacity: 5 }), '"fast";q=20;w=1;rl-burst=5');
    assert.equal(headers.policyItem({ name: 'odd', limit: 3, periodMs: 700, capacity: 30 }), '"odd";q=30;w=7');
    assert.equal(headers.policyItem({ name: 's', capacity: 3, semaphore: true }), '"s";q=3;qu="concurrent-requests"');
  });

  test('names are structured-field strings', () => {
    assert.equal(headers.sfString('a"b\\c\u00e9'), '"a\\"b\\\\c_"');
  });

  test('Retry-After is never earlier than the wait, at most the jitter later', () => {
    assert.equal(headers.retryAfterSeconds(1001, 0, 0.9), 2);
    assert.equal(headers.retryAfterSeconds(10_000, 0.2, 0.999), 12);
    assert.equal(headers.retryAfterSeconds(10_000, NaN, 0.5), 10);
    assert.equal(headers.retryAfterSeconds(10_000, -1, 0.5), 10);
  });
});

describe('the fallback limiter', () => {
  test('gcra with the module arithmetic: 20 at once, the 21st waits 500 ms', () => {
    const state = { tat: 0n };
    const rule = { limit: 2, periodMs: 1000, capacity: 20 };
    const now = 1_700_000_000_000_000;
    for (let i = 0; i < 20; i++) assert.equal(gcraDecide(state, rule, 1, now).allowed, true);
    const refused = gcraDecide(state, rule, 1, now);
    assert.deepEqual([refused.allowed, refused.retry_after_ms, refused.remaining], [false, 500, 0]);
    const later = gcraDecide(state, rule, 10, now + 1_500_000);
    assert.deepEqual([later.allowed, later.retry_after_ms], [false, 3500]);
  });
});
