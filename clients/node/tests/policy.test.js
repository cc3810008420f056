// Policy files as the gateway reads and reloads them (validation itself is the engine's, held to
// clients/vectors/policies by tests/engine.test.js), and the engine's headers for a typed decision.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { Gateway, parsePolicy, PolicyStore, renderHeaders } from '../src/index.js';
import { quiet } from './support/gateway.js';
import { REPO } from './support/server.js';

const base = () => ({
  version: 3, default: { rules: [] },
  rules: { a: { key: '{t:${tenant}}:a', limit: 10, period: '1s' } },
  routes: [{ method: 'GET', path: '/x', rules: ['a'] }],
});

describe('policy files', () => {
  test('the example policies load', () => {
    assert.equal(parsePolicy(readFileSync(join(REPO, 'clients/rust/northstar.policy.json'), 'utf8')).version, 7);
    assert.throws(() => parsePolicy({ ...base(), routes: 'x' }), { name: 'PolicyError', message: /routes/ });
  });

  test('a reload needs a higher version and keeps the snapshot in force otherwise', () => {
    const dir = mkdtempSync(join(tmpdir(), 'rl-policy-'));
    const file = join(dir, 'policy.json');
    writeFileSync(file, JSON.stringify(base()));
    const gateway = new Gateway({ store: async () => null, policy: PolicyStore.fromFile(file), logger: quiet });
    assert.throws(() => gateway.reload(), { name: 'PolicyError', message: /is not higher than the version in force/ });
    writeFileSync(file, '{"version": 9');
    assert.throws(() => gateway.reload(), { name: 'PolicyError' });
    assert.equal(gateway.policy.version, 3);
    writeFileSync(file, JSON.stringify({ ...base(), version: 4 }));
    assert.equal(gateway.reload().version, 4);
    assert.equal(gateway.policy.version, 4);
  });
});

describe('headers of a typed decision, rendered by the engine', () => {
  test('sub-second periods are scaled to whole seconds, names are structured-field strings', () => {
    const rate = (name, limit, periodMs, capacity) => ({ name, limit, periodMs, capacity, remaining: 1, resetAfterMs: 1500 });
    assert.deepEqual(renderHeaders([rate('fast', 5, 250, 5), rate('odd', 3, 700, 30), rate('a"b\\c\u00e9', 2, 60_000, 2)]), [
      ['RateLimit-Policy', '"fast";q=20;w=1;rl-burst=5, "odd";q=30;w=7, "a\\"b\\\\c_";q=2;w=60'],
      ['RateLimit', '"fast";r=1;t=2, "odd";r=1;t=2, "a\\"b\\\\c_";r=1;t=2'],
    ]);
  });

  test('a semaphore shows its slots; legacy fields name the rule that refused longest', () => {
    const rules = [
      { name: 's', limit: 3, capacity: 3, semaphore: true, remaining: 0, resetAfterMs: 0, retryAfterMs: 900 },
      { name: 'r', limit: 10, periodMs: 60_000, capacity: 10, remaining: 0, resetAfterMs: 30_000, retryAfterMs: 4_001 },
    ];
    assert.deepEqual(renderHeaders(rules, true), [
      ['RateLimit-Policy', '"s";q=3;qu="concurrent-requests", "r";q=10;w=60'],
      ['RateLimit', '"s";r=0;t=1, "r";r=0;t=5'],
      ['X-RateLimit-Limit', '10'],
      ['X-RateLimit-Remaining', '0'],
      ['X-RateLimit-Reset', '5'],
    ]);
    assert.deepEqual(renderHeaders([]), []);
  });
});
