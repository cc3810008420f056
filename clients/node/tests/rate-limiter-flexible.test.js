// RateLimiterRL in rate-limiter-flexible's documented usage patterns, against a real server.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import express from 'express';
import { RateLimiterMemory, RateLimiterRes as FlexibleRes } from 'rate-limiter-flexible';
import { RateLimiterRL, RateLimiterRes } from '../src/index.js';
import { quiet } from './support/gateway.js';
import { listen } from './support/http.js';
import { Server } from './support/server.js';

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

let n = 0;
const prefix = () => `flx${process.pid}-${n++}`;

describe('RateLimiterRL', () => {
  test('consume resolves while points last, then rejects with a RateLimiterRes', async () => {
    const limiter = new RateLimiterRL({ logger: quiet, storeClient: io, keyPrefix: prefix(), points: 5, duration: 60 });
    const first = await limiter.consume('user1', 2);
    assert.equal(first.remainingPoints, 3);
    assert.equal(first.consumedPoints, 2);
    assert.equal(first.isFirstInDuration, true);
    assert.equal((await limiter.consume('user1', 3)).remainingPoints, 0);
    const refusal = await limiter.consume('user1').then(() => null, (r) => r);
    assert.ok(refusal instanceof RateLimiterRes && !(refusal instanceof Error));
    assert.equal(refusal.remainingPoints, 0);
    assert.equal(refusal.consumedPoints, 6);
    assert.ok(refusal.msBeforeNext > 11_000 && refusal.msBeforeNext <= 12_000, String(refusal.msBeforeNext));
    // The same fields, in the same JSON, as rate-limiter-flexible's own result.
    assert.deepEqual(Object.keys(refusal.toJSON()), Object.keys(new FlexibleRes().toJSON()));
    const tooMany = await limiter.consume('user2', 6).then(() => null, (r) => r);
    assert.ok(tooMany instanceof RateLimiterRes, String(tooMany));
    assert.equal((await limiter.consume('user2', 5)).remainingPoints, 0);
  });

  test('the documented express middleware answers 429 with Retry-After', async () => {
    const limiter = new RateLimiterRL({ logger: quiet, storeClient: io, keyPrefix: prefix(), points: 2, duration: 60 });
    const app = express();
    app.use((req, res, next) => {
      limiter.consume(req.ip)
        .then(() => next())
        .catch((rejRes) => {
          if (rejRes instanceof Error) return res.status(500).send('store error');
          res.set('Retry-After', String(Math.ceil(rejRes.msBeforeNext / 1000)));
          res.status(429).send('Too Many Requests');
        });
    });
    app.get('/', (req, res) => res.send('ok'));
    const { url, close } = await listen(app);
    try {
      const statuses = [];
      for (let i = 0; i < 3; i++) statuses.push((await fetch(url)).status);
      assert.deepEqual(statuses, [200, 200, 429]);
      const r = await fetch(url);
      assert.equal(r.headers.get('retry-after'), '30');
    } finally {
      await close();
    }
  });

  test('penalty spends and reward gives back through the reservations', async () => {
    const limiter = new RateLimiterRL({ logger: quiet, storeClient: io, keyPrefix: prefix(), points: 10, duration: 3600 });
    await limiter.consume('k', 2);
    assert.equal((await limiter.penalty('k', 3)).remainingPoints, 5);
    assert.equal((await limiter.get('k')).consumedPoints, 5);
    await limiter.consume('k', 4);
    assert.equal((await limiter.reward('k', 3)).remainingPoints, 4);
    assert.equal((await limiter.get('k')).remainingPoints, 4);
  });

  test('get is null for an unknown key; delete forgets a key', async () => {
    const limiter = new RateLimiterRL({ logger: quiet, storeClient: io, keyPrefix: prefix(), points: 1, duration: 3600 });
    assert.equal(await limiter.get('nobody'), null);
    await limiter.consume('x');
    await assert.rejects(limiter.consume('x'), RateLimiterRes);
    assert.equal(await limiter.delete('x'), true);
    assert.equal(await limiter.delete('x'), false);
    assert.equal((await limiter.consume('x')).remainingPoints, 0);
  });

  test('block refuses for its duration, and blockDuration after a refusal', async () => {
    const limiter = new RateLimiterRL({ logger: quiet, storeClient: io, keyPrefix: prefix(), points: 3, duration: 3600, blockDuration: 30 });
    const blocked = await limiter.block('b', 60);
    assert.equal(blocked.msBeforeNext, 60_000);
    const r = await limiter.consume('b').then(() => null, (x) => x);
    assert.ok(r instanceof RateLimiterRes && r.msBeforeNext > 59_000, String(r?.msBeforeNext));
    // Another process sees the store key spent.
    const other = new RateLimiterRL({ logger: quiet, storeClient: io, keyPrefix: limiter.keyPrefix, points: 3, duration: 3600 });
    await assert.rejects(other.consume('b'), RateLimiterRes);
    for (let i = 0; i < 3; i++) await limiter.consume('c');
    const refused = await limiter.consume('c').then(() => null, (x) => x);
    assert.ok(refused.msBeforeNext >= 30_000 - 50, String(refused.msBeforeNext));
  });

  test('a dead store rejects with its error, or the insurance limiter takes over', async () => {
    const dead = await Server.start();
    const client = await dead.ioredis();
    const p = prefix();
    const bare = new RateLimiterRL({ logger: quiet, storeClient: client, keyPrefix: p, points: 2, duration: 60, timeout: 200 });
    const insured = new RateLimiterRL({ logger: quiet, storeClient: client, keyPrefix: p, points: 2, duration: 60, timeout: 200,
      insuranceLimiter: new RateLimiterMemory({ points: 1, duration: 60 }) });
    assert.equal((await insured.consume('u')).remainingPoints, 1);
    dead.kill();
    await new Promise((r) => setTimeout(r, 100));
    try {
      const err = await bare.consume('u').then(() => null, (e) => e);
      assert.ok(err instanceof Error && err.kind === 'unavailable', String(err));
      // The insurance limiter's own budget (1 point) decides now.
      assert.equal((await insured.consume('u')).remainingPoints, 0);
      const refusal = await insured.consume('u').then(() => null, (r) => r);
      assert.ok(refusal instanceof FlexibleRes, String(refusal));
    } finally {
      client.disconnect();
      await dead.stop();
    }
  });
});
