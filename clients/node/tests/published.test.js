// A policy published through Redis, followed (clients/CONTRACT.md section 11): the snapshot
// `rl-gateway policy publish` writes (a hash at the key, a notice on its channel) loaded, a
// publication put in force by its notice, the cache file a start falls back on while Redis is
// down.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import Redis from 'ioredis';
import { Gateway, PolicyError, PublishedPolicy, RL } from '../src/index.js';
import { quiet } from './support/gateway.js';
import { freePort, Server } from './support/server.js';

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

const policy = (version) => ({
  version, default: { rules: [] }, identity: { user: 'x-user' },
  rules: { user: { key: 'pub:u:${user}', limit: 10, period: '1m' } },
  routes: [{ method: 'GET', path: '/r', rules: ['user'] }],
});

// What `rl-gateway policy publish` stores, then its notice.
async function publish(version, key = 'rl:policy') {
  await io.hset(key, { version, published_by: 'test', published_at_ms: Date.now(), document: JSON.stringify(policy(version)) });
  await io.publish(key, String(version));
}

const eventually = async (check) => {
  for (let i = 0; i < 400 && !check(); i++) await new Promise((r) => setTimeout(r, 25));
  assert.ok(check());
};

describe('a published policy', () => {
  test('is loaded, and a publication followed by its notice', async () => {
    await publish(1);
    const cache = join(mkdtempSync(join(tmpdir(), 'rl-pub-')), 'policy.json');
    // A poll an hour apart: what reaches the gateway here comes by the notice.
    const published = new PublishedPolicy(io, { cache, pollMs: 3_600_000, logger: quiet });
    const gateway = new Gateway({ store: new RL(io, { logger: quiet }), policy: await published.load(), logger: quiet });
    assert.equal(gateway.policy.version, 1);
    assert.equal(JSON.parse(readFileSync(cache, 'utf8')).version, 1);
    published.follow(gateway);
    try {
      await publish(2);
      await eventually(() => gateway.policy.version === 2);
      assert.match(gateway.metrics.render(), /^rl_gateway_policy_age_seconds \d/m);
      assert.equal(JSON.parse(readFileSync(cache, 'utf8')).version, 2);
    } finally {
      await published.stop();
    }
  });

  test('with Redis down, a start uses the cache, and without one says why', async () => {
    await publish(3, 'rl:policy:cached');
    const cache = join(mkdtempSync(join(tmpdir(), 'rl-pub-')), 'policy.json');
    await new PublishedPolicy(io, { key: 'rl:policy:cached', cache, logger: quiet }).load();
    const down = new Redis({ port: await freePort(), lazyConnect: true, maxRetriesPerRequest: 0, enableOfflineQueue: false, retryStrategy: () => null });
    down.on('error', () => {});
    const text = await new PublishedPolicy(down, { key: 'rl:policy:cached', cache, logger: quiet }).load();
    assert.equal(JSON.parse(text).version, 3);
    await assert.rejects(new PublishedPolicy(down, { key: 'rl:policy:cached', logger: quiet }).load(),
      (err) => err instanceof PolicyError && /unreachable/.test(err.message));
    await assert.rejects(new PublishedPolicy(io, { key: 'rl:policy:none', logger: quiet }).load(),
      (err) => err instanceof PolicyError && /no policy is published at rl:policy:none/.test(err.message));
    down.disconnect();
  });
});
