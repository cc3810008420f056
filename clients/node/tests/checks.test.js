// Keyed checks: through the addon (`Engine.check`, answered by the engine's memory store), the
// forms a check may take and the bad ones refused whole before anything is decided; through the
// gateway (`Gateway.check`) against a real server, a rate rule and a semaphore decided together
// under a route of the policy, each check's outcome read back, the slot held until `done()`.
// What the engine decides for them is the contract's (clients/vectors/scenarios/checks.json, run
// by tests/engine.test.js).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Gateway, RL } from '../src/index.js';
import { engine } from '../src/gateway/native.js';
import { fresh, quiet } from './support/gateway.js';
import { Server } from './support/server.js';

const NOW = 1_767_225_600_000_000;

describe('Engine.check', () => {
  const { Engine, MemoryStore } = engine();
  const POLICY = JSON.stringify({
    version: 3,
    rules: {
      user: { key: '{r}u', algo: 'window', limit: 3, period: '1m' },
      tenant: { key: '{r}t', algo: 'window', limit: 10, period: '1m' },
    },
    routes: [{ name: 'rls:api', method: '*', path: '/rls', rules: ['user', 'tenant'] }],
    default: { rules: [] },
  });
  const setup = () => ({ e: new Engine(POLICY, { nowUs: NOW, logSample: 0, seed: 1 }), store: new MemoryStore() });
  const decide = ({ e, store }, checks, route = 'rls:api') => {
    const pending = e.check(route, checks, NOW);
    let step = pending.first();
    while (step.kind !== 'done') step = pending.resume(step.calls.map((c) => ({ reply: store.call(c.args, NOW) })), NOW);
    return step.verdict;
  };
  const read = (v) => v.checks.map((c) => [c.over, c.remaining ?? null, c.source]);

  test('string and Buffer keys, a cost given or not, a cost of 0 only asked', () => {
    const run = setup();
    const first = decide(run, [{ rule: 'user', key: 'rls:u1' }, { rule: 'tenant', key: Buffer.from('rls:t1'), cost: 2 }]);
    assert.equal(first.status, undefined);
    assert.equal(first.route, 'rls:api');
    assert.deepEqual(read(first), [[false, 2, 'store'], [false, 8, 'store']]);
    assert.deepEqual(read(decide(run, [{ rule: 'user', key: 'rls:u1', cost: 0 }])), [[false, 2, 'store']]);
    const refused = decide(run, [{ rule: 'tenant', key: 'rls:t1' }, { rule: 'user', key: new Uint8Array(Buffer.from('rls:u1')), cost: 3 }]);
    assert.equal(refused.status, 429);
    assert.deepEqual(read(refused), [[false, 8, 'store'], [true, 2, 'store']]);
    assert.ok(refused.checks[1].retryAfterMs > 0 && refused.checks[1].retryAfterMs <= 60_000);
    const lacking = decide(run, [{ rule: 'user', key: 'rls:u1' }], 'nowhere');
    assert.equal(lacking.status, 500);
    assert.deepEqual(read(lacking), [[false, null, 'open']]);
  });

  test('a blocked check is refused without a call; the other is only asked', () => {
    const run = setup();
    const checks = [{ rule: 'user', key: 'rls:u4', blocked: true }, { rule: 'tenant', key: 'rls:t4' }];
    const first = run.e.check('rls:api', checks, NOW).first();
    assert.deepEqual(first.calls.map((c) => [c.args[0], c.args.includes('DRYRUN')]), [['RL.ADMIT', true]]);
    const refused = decide(run, checks);
    assert.equal(refused.status, 429);
    assert.deepEqual(read(refused), [[true, 0, 'blocked'], [false, 10, 'store']]);
    assert.deepEqual(read(decide(run, [{ rule: 'user', key: 'rls:u4', blocked: false }])), [[false, 2, 'store']]);
  });

  test('a bad check throws, naming it, and nothing is decided', () => {
    const run = setup();
    for (const [checks, message] of [
      [[{ rule: 'user', key: 'rls:u2' }, { rule: 'nobody', key: 'x' }], 'check 1: no rule named "nobody" in the policy in force (version 3)'],
      [[{ rule: 'user', key: Buffer.from([0xff]) }], 'check 0: the key is not UTF-8'],
      [[{ rule: 'user', key: 'rls:u2', cost: -1 }], 'check 0: the cost is a whole number of units from 0 to 2^53-1, not -1'],
      [[{ rule: 'user', key: 'rls:u2', cost: 1.5 }], 'check 0: the cost is a whole number of units from 0 to 2^53-1, not 1.5'],
      [[{ rule: 'user', key: 'rls:u2', cost: 2 ** 53 }], 'check 0: the cost is a whole number of units from 0 to 2^53-1, not 9007199254740992'],
      [[{ rule: 'user' }], 'Missing field `key`'],
    ]) {
      assert.throws(() => run.e.check('rls:api', checks, NOW), { message });
    }
    assert.doesNotMatch(run.e.metrics(NOW), /rl_gateway_decisions_total\{/);
    assert.deepEqual(read(decide(run, [{ rule: 'user', key: 'rls:u2' }])), [[false, 2, 'store']]);
  });
});

describe('Gateway.check', () => {
  let server;
  let io;
  before(async () => {
    server = await Server.start();
    io = await server.ioredis();
  });
  after(async () => {
    io.disconnect();
    await server.stop();
  });

  test('keyed checks are decided together on a real server and hold their slot until done()', async () => {
    const p = fresh();
    const gateway = new Gateway({ store: io, logger: quiet, policy: {
      version: 1, default: { rules: [] },
      rules: {
        user: { key: '{j}:u:${user}', limit: 2, period: '1h' },
        slot: { key: '{j}:slot:${tenant}', concurrency: 1, lease: '60s' },
      },
      routes: [{ name: 'jobs', method: '*', path: '/jobs', rules: ['user', 'slot'] }],
      store: { timeout: '1s' },
    } });
    const checks = [{ rule: 'user', key: `{${p}}:u:ann` }, { rule: 'slot', key: `{${p}}:slot` }];
    const first = await gateway.check('jobs', checks);
    assert.equal(first.status, 200);
    assert.deepEqual(first.checks.map((c) => [c.over, c.source]), [[false, 'store'], [false, 'store']]);
    assert.equal(first.checks[0].remaining, 1);
    // The slot is held: the same checks are refused by it, and spend nothing on the rate rule.
    const busy = await gateway.check('jobs', checks);
    assert.equal(busy.status, 429);
    assert.deepEqual(JSON.parse(busy.body)['violated-policies'], ['slot']);
    assert.deepEqual(busy.checks.map((c) => c.over), [false, true]);
    const rl = new RL(io, { logger: quiet });
    assert.equal((await rl.info(`{${p}}:u:ann`)).remaining, 1);
    await first.done();
    const again = await gateway.check('jobs', checks);
    assert.equal(again.status, 200);
    assert.equal(again.checks[0].remaining, 0);
    await again.done();
    // A rule the policy lacks is the caller's error: thrown, nothing decided.
    await assert.rejects(gateway.check('jobs', [{ rule: 'user', key: `{${p}}:u:ann` }, { rule: 'other', key: 'x' }]),
      { message: 'check 1: no rule named "other" in the policy in force (version 1)' });
    assert.equal((await rl.info(`{${p}}:u:ann`)).remaining, 0);
  });
});
