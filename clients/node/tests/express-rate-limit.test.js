// express-rate-limit with RLStore, driven over real HTTP against a real server: the same
// options as with rate-limit-redis, only `store:` changed.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import express from 'express';
import { rateLimit } from 'express-rate-limit';
import { createClient } from 'redis';
import { RLStore } from '../src/index.js';
import { quiet } from './support/gateway.js';
import { listen } from './support/http.js';
import { Server } from './support/server.js';

let server;
let io;
let nodeRedis;
before(async () => {
  server = await Server.start();
  io = await server.ioredis();
  nodeRedis = createClient({ socket: { port: server.port, host: '127.0.0.1' } });
  nodeRedis.on('error', () => {});
  await nodeRedis.connect();
});
after(async () => {
  io.disconnect();
  await nodeRedis.quit();
  await server.stop();
});

let prefixes = 0;
async function app(limiterOptions, storeOptions = {}) {
  const store = new RLStore({ sendCommand: (...args) => io.call(...args), prefix: `erl${process.pid}-${prefixes++}:`, logger: quiet,
    ...storeOptions });
  const a = express();
  // The store-error test answers 500 on purpose: express prints no stack for it in env test.
  a.set('env', 'test');
  a.use(rateLimit({ windowMs: 60_000, limit: 3, standardHeaders: 'draft-8', legacyHeaders: false, store, ...limiterOptions }));
  a.get('/ok', (req, res) => res.json({ ok: true }));
  a.get('/fail', (req, res) => res.status(500).json({ ok: false }));
  return { ...(await listen(a)), store };
}

describe('express-rate-limit with RLStore', () => {
  test('admits the limit, then refuses with 429 and Retry-After', async () => {
    const { url, close } = await app();
    try {
      const statuses = [];
      for (let i = 0; i < 5; i++) statuses.push((await fetch(`${url}/ok`)).status);
      assert.deepEqual(statuses, [200, 200, 200, 429, 429]);
      const refused = await fetch(`${url}/ok`);
      const retry = Number(refused.headers.get('retry-after'));
      assert.ok(retry >= 19 && retry <= 20, `Retry-After ${retry}`);
      assert.match(refused.headers.get('ratelimit'), /r=0/);
    } finally {
      await close();
    }
  });

  test('node-redis sendCommand works the same', async () => {
    const { url, close } = await app({}, { sendCommand: undefined, client: nodeRedis });
    try {
      const statuses = [];
      for (let i = 0; i < 4; i++) statuses.push((await fetch(`${url}/ok`)).status);
      assert.deepEqual(statuses, [200, 200, 200, 429]);
    } finally {
      await close();
    }
  });

  test('resetKey gives the caller its whole limit back', async () => {
    const { url, close, store } = await app({ keyGenerator: () => 'someone' });
    try {
      for (let i = 0; i < 3; i++) assert.equal((await fetch(`${url}/ok`)).status, 200);
      assert.equal((await fetch(`${url}/ok`)).status, 429);
      assert.deepEqual((await store.get('someone')).totalHits, 3);
      await store.resetKey('someone');
      assert.equal(await store.get('someone'), undefined);
      assert.equal((await fetch(`${url}/ok`)).status, 200);
    } finally {
      await close();
    }
  });

  test('skipFailedRequests refunds failed requests through their reservations', async () => {
    const { url, close, store } = await app({ keyGenerator: () => 'flaky', skipFailedRequests: true });
    try {
      for (let i = 0; i < 5; i++) assert.equal((await fetch(`${url}/fail`)).status, 500);
      // Decrements run once the response has finished; wait for them to reach the store.
      await waitFor(async () => (await store.get('flaky'))?.totalHits === 0);
      const statuses = [];
      for (let i = 0; i < 4; i++) statuses.push((await fetch(`${url}/ok`)).status);
      assert.deepEqual(statuses, [200, 200, 200, 429]);
      // The 429 was not spent, so its decrement refunds nothing.
      await new Promise((r) => setTimeout(r, 50));
      assert.equal((await store.get('flaky')).totalHits, 3);
    } finally {
      await close();
    }
  });

  test('skipSuccessfulRequests counts only the failures', async () => {
    const { url, close, store } = await app({ keyGenerator: () => 'good', skipSuccessfulRequests: true });
    try {
      for (let i = 0; i < 6; i++) assert.equal((await fetch(`${url}/ok`)).status, 200);
      await waitFor(async () => (await store.get('good'))?.totalHits === 0);
      assert.equal((await fetch(`${url}/fail`)).status, 500);
      assert.equal((await store.get('good')).totalHits, 1);
    } finally {
      await close();
    }
  });

  test('a store error is a store error: the request fails, or passes with passOnStoreError', async () => {
    const dead = await Server.start();
    const client = await dead.ioredis();
    const storeOptions = { sendCommand: (...args) => client.call(...args) };
    const strict = await app({}, storeOptions);
    const lenient = await app({ passOnStoreError: true }, storeOptions);
    try {
      dead.kill();
      await waitFor(async () => client.status !== 'ready');
      assert.equal((await fetch(`${strict.url}/ok`)).status, 500);
      assert.equal((await fetch(`${lenient.url}/ok`)).status, 200);
    } finally {
      client.disconnect();
      await strict.close();
      await lenient.close();
      await dead.stop();
    }
  });
});

async function waitFor(check) {
  const deadline = Date.now() + 5000;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('condition not met in 5 s');
    await new Promise((r) => setTimeout(r, 10));
  }
}
