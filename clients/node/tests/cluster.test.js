// A 3-node cluster: every command reaches its key's primary, RL.MULTI by its first key (cluster
// clients would route it by `numkeys`), and keys in several slots are refused before any round
// trip.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import Redis from 'ioredis';
import Valkey from 'iovalkey';
import { createCluster } from 'redis';
import express from 'express';
import { rateLimit } from 'express-rate-limit';
import { fromIoredis, fromNodeRedis, Gateway, keySlot, RateLimiterRL, RateLimiterRes, RL, RLError, RLStore } from '../src/index.js';
import { quiet } from './support/gateway.js';
import { listen } from './support/http.js';
import { Cluster } from './support/server.js';

let cluster;
before(async () => { cluster = await Cluster.start(); });
after(async () => { await cluster.stop(); });

const CLIENTS = [
  ['ioredis Cluster', async () => {
    const c = new Redis.Cluster(cluster.startup, { enableOfflineQueue: false, redisOptions: { maxRetriesPerRequest: 0 } });
    c.on('error', () => {});
    await new Promise((r) => c.once('ready', r));
    return { adapter: fromIoredis(c), close: () => c.disconnect() };
  }],
  ['iovalkey Cluster', async () => {
    const c = new Valkey.Cluster(cluster.startup, { enableOfflineQueue: false, redisOptions: { maxRetriesPerRequest: 0 } });
    c.on('error', () => {});
    await new Promise((r) => c.once('ready', r));
    return { adapter: fromIoredis(c), close: () => c.disconnect() };
  }],
  ['node-redis cluster', async () => {
    const c = createCluster({ rootNodes: cluster.nodes.map((n) => ({ url: n.url })) });
    c.on('error', () => {});
    await c.connect();
    return { adapter: fromNodeRedis(c), close: () => c.destroy() };
  }],
];

// What the nodes' `INFO` says: the module's calls they answered (natively or through the script),
// and the MOVED replies they sent.
async function nodeStats() {
  let calls = 0;
  let moved = 0;
  for (const n of cluster.nodes) {
    const c = await n.ioredis();
    const stats = await c.info('everything');
    c.disconnect();
    for (const m of stats.matchAll(/cmdstat_(?:rl\.admit|rl\.multi|evalsha):calls=(\d+)/gi)) calls += Number(m[1]);
    // In script mode, the first EVALSHA a node sees answers NOSCRIPT and is sent again.
    calls -= Number(/errorstat_NOSCRIPT:count=(\d+)/.exec(stats)?.[1] ?? 0);
    moved += Number(/errorstat_MOVED:count=(\d+)/.exec(stats)?.[1] ?? 0);
  }
  return { calls, moved };
}

for (const [name, connect] of CLIENTS) {
  describe(`${name}`, () => {
    let conn;
    let rl;
    before(async () => {
      conn = await connect();
      rl = new RL(conn.adapter, { logger: {} });
    });
    after(() => conn.close());

    test('RL.ADMIT and RL.MULTI reach every slot range without a redirect', async () => {
      const before = await nodeStats();
      const tags = ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'].map((t) => `${name}-${t}`);
      assert.equal(new Set(tags.map((t) => Math.floor(keySlot(t) / 5461))).size > 1, true);
      for (const tag of tags) {
        const d = await rl.admit({ key: `{${tag}}:one`, limit: 5, period: 60_000 });
        assert.equal(d.remaining, 4);
        const m = await rl.multi({ rules: [
          { name: 'user', key: `{${tag}}:user`, limit: 2, period: 1000, burst: 20 },
          { name: 'tenant', key: `{${tag}}:tenant`, limit: 1000, period: 60_000 },
        ] });
        assert.equal(m.allowed, true);
        assert.deepEqual(m.rules.map((r) => r.remaining), [19, 999]);
      }
      const now = await nodeStats();
      assert.equal(now.calls - before.calls, 2 * tags.length);
      assert.equal(now.moved, before.moved, 'a call went to a node that does not own its slot');
    });

    test('express-rate-limit with RLStore and RateLimiterRL work on the cluster', async () => {
      const store = new RLStore({ client: conn.adapter, prefix: `erl-${name}:` });
      const app = express();
      app.use(rateLimit({ windowMs: 60_000, limit: 2, store, keyGenerator: (req) => String(req.query.who) }));
      app.get('/', (req, res) => res.send('ok'));
      const s = await listen(app);
      try {
        // Callers whose keys land on different nodes.
        const who = ['a', 'b', 'c', 'd', 'e', 'f'];
        assert.ok(new Set(who.map((w) => Math.floor(keySlot(`erl-${name}:${w}`) / 5461))).size > 1);
        for (const w of who) {
          const statuses = [];
          for (let i = 0; i < 3; i++) statuses.push((await fetch(`${s.url}/?who=${w}`)).status);
          assert.deepEqual(statuses, [200, 200, 429], w);
        }
      } finally {
        await s.close();
      }
      const limiter = new RateLimiterRL({ storeClient: conn.adapter, keyPrefix: `flx-${name}`, points: 1, duration: 3600 });
      for (const w of ['a', 'b', 'c', 'd']) {
        await limiter.consume(w);
        await assert.rejects(limiter.consume(w), RateLimiterRes);
      }
    });

    test('durable rules in two slots: one WAIT to each slot\'s primary', async () => {
      const tags = ['a', 'b', 'c', 'd', 'e', 'f', 'g'];
      const node = (tag) => Math.floor(keySlot(`{${name}-${tag}}`) / 5461.34);
      const [t1, t2] = [tags[0], tags.find((t) => node(t) !== node(tags[0]))];
      const gw = new Gateway({ store: conn.adapter, durableStore: conn.adapter, logger: quiet, policy: {
        version: 1, default: { rules: [] },
        rules: {
          slot: { key: `{${name}-${t1}}:slot`, concurrency: 5, lease: '1m', durable: true },
          rate: { key: `{${name}-${t2}}:rate`, limit: 100, period: '1h', durable: true },
        },
        routes: [{ method: 'POST', path: '/d', rules: ['slot', 'rate'] }],
        store: { timeout: '500ms' },
      } });
      const waits = async () => {
        const out = [];
        for (const n of cluster.nodes) {
          const c = await n.ioredis();
          out.push(Number(/cmdstat_wait:calls=(\d+)/.exec(await c.info('commandstats'))?.[1] ?? 0));
          c.disconnect();
        }
        return out;
      };
      const before = await waits();
      const d = await gw.decide({ method: 'POST', path: '/d', headers: {}, peer: '127.0.0.1' });
      assert.equal(d.status, 200);
      d.done();
      const after = await waits();
      const delta = after.map((n, i) => n - before[i]);
      assert.equal(delta.reduce((a, b) => a + b, 0), 2, JSON.stringify(delta));
      assert.ok(delta.every((n) => n <= 1), JSON.stringify(delta));
      // No replica: each slot's admission stands, counted unreplicated.
      assert.equal(gw.metrics.count('POST /d', 'slot', 'unreplicated_admit'), 1);
      assert.equal(gw.metrics.count('POST /d', 'rate', 'unreplicated_admit'), 1);
    });

    test('keys in two slots are refused before any round trip, naming both slots', async () => {
      const before = await nodeStats();
      const err = await rl.multi({ rules: [
        { name: 'user', key: 'user:17', limit: 2, period: 1000 },
        { name: 'tenant', key: 'tenant:atlas', limit: 1000, period: 60_000 },
      ] }).then(() => null, (e) => e);
      assert.ok(err instanceof RLError && err.kind === 'invalid_request', String(err));
      assert.match(err.message, new RegExp(`${keySlot('user:17')}.*${keySlot('tenant:atlas')}`));
      assert.deepEqual(await nodeStats(), before);
    });
  });
}
