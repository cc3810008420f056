// Policy files as the gateway reads and reloads them (validation itself is the engine's, held to
// clients/vectors/policies by tests/engine.test.js), and the typed client's header helpers.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { Gateway, headers, parsePolicy, PolicyStore } from '../src/index.js';
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
