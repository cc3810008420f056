// What the vectors do not cover: CL.THROTTLE, duration arguments, error kinds, replies of other
// shapes.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { classify, commands, durationArg, keySlot, RL, RLError } from '../src/index.js';
import { fromServerError } from '../src/errors.js';
import { VARIANTS } from './support/clients.js';
import { SCRIPT_MODE, Server } from './support/server.js';

describe('arguments', () => {
  test('durations in the largest exact unit; finer than a millisecond is refused', () => {
    assert.deepEqual([60_000, 90_000, 1500, 0, 86_400_000, 3_600_000, '10s', '250MS'].map((d) => durationArg(d, 'period')),
      ['1m', '90s', '1500ms', '0ms', '1d', '1h', '10s', '250ms']);
    assert.throws(() => durationArg(1.5, 'period'), (e) => e instanceof RLError && e.kind === 'invalid_request');
    assert.throws(() => durationArg('10', 'period'), /needs a unit/);
  });

  test('every option of RL.ADMIT, RL.GRANT and RL.ACQUIRE in the documented order', () => {
    const a = commands.admit({ key: 'k', limit: 5, period: 1000, burst: 10, cost: 2, algo: 'bucket', dryRun: true,
      reserve: { id: 'r', keep: 60_000 } });
    assert.deepEqual([a.name, ...a.args], ['RL.ADMIT', 'k', '5', '1s', 'BURST', '10', 'COST', '2', 'ALGO', 'bucket', 'DRYRUN',
      'RESERVE', 'r', 'KEEP', '1m']);
    const t = commands.throttle('k', 15, 30, 60, 2);
    assert.deepEqual([t.name, ...t.args], ['CL.THROTTLE', 'k', '15', '30', '60', '2']);
  });

  test('hash tags as Redis Cluster reads them', () => {
    assert.equal(keySlot('{user1000}.following'), keySlot('{user1000}.followers'));
    assert.equal(keySlot('foo{}{bar}'), keySlot('foo{}{bar}'));
    assert.notEqual(keySlot('foo{}{bar}'), keySlot('bar'));
    assert.equal(keySlot('123456789'), 12739);
  });
});

describe('error kinds', () => {
  test('only a verdict on the request is a refusal', () => {
    for (const text of ['ERR COST 11 exceeds the capacity 10', 'WRONGTYPE Operation', 'CROSSSLOT Keys']) {
      assert.equal(fromServerError(text).kind, 'refused', text);
    }
    for (const text of ['LOADING Redis is loading', 'BUSY Redis is busy', 'TRYAGAIN', 'CLUSTERDOWN', 'MASTERDOWN',
      'READONLY You can\'t write', 'OOM command not allowed', 'NOAUTH', 'NOPERM', 'WEIRD new code']) {
      assert.equal(fromServerError(text).kind, 'unavailable', text);
    }
    assert.equal(classify(new Error('connect ECONNREFUSED')).kind, 'unavailable');
  });

  test('replies of another shape are unexpected; an error inside a value is that error', () => {
    const admit = commands.admit({ key: 'k', limit: 1, period: 1000 });
    for (const bad of [[2, 0, 0, 0, 1], [1, -1, 0, 0, 1], [1, 0, 0], { allowed: 1 }, 'OK']) {
      assert.throws(() => admit.parse(bad), (e) => e.kind === 'unexpected_reply', JSON.stringify(bad));
    }
    class ErrorReply extends Error {}
    assert.throws(() => admit.parse({ allowed: new ErrorReply('BUSY script'), remaining: 0, retry_after_ms: 0,
      reset_after_ms: 0, capacity: 1 }), (e) => e.kind === 'unavailable');
    assert.deepEqual(commands.settle('k', 'i', 1).parse([-4, 8]), { delta: -4, remaining: 8 });
    assert.throws(() => commands.settle('k', 'i', 1).parse([-4, -8]), (e) => e.kind === 'unexpected_reply');
  });
});

describe('CL.THROTTLE', { skip: SCRIPT_MODE && 'rl.lua does not provide CL.THROTTLE' }, () => {
  let server;
  before(async () => { server = await Server.start(); });
  after(async () => { await server.stop(); });
  for (const variant of VARIANTS) {
    test(`redis-cell's reply on ${variant.name}`, async () => {
      const conn = await variant.connect(server.port);
      try {
        const rl = new RL(conn.adapter, { logger: {} });
        const key = `throttle:${variant.name}`;
        assert.deepEqual(await rl.throttle(key, 1, 1, 3600), { limited: false, limit: 2, remaining: 1, retry_after: -1, reset_after: 3600 });
        await rl.throttle(key, 1, 1, 3600);
        const refused = await rl.throttle(key, 1, 1, 3600);
        assert.equal(refused.limited, true);
        assert.ok(refused.retry_after > 3590 && refused.retry_after <= 3600, String(refused.retry_after));
        const peek = await rl.throttle(key, 1, 1, 3600, 0);
        assert.equal(peek.limited, false);
      } finally {
        conn.close();
      }
    });
  }
});
