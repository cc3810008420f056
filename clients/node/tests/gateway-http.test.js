// The fastify plugin, identities behind trusted proxies, what no caller may provoke, the
// sockets' options, and the retry helper for outgoing calls, over real HTTP.
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';
import express from 'express';
import Fastify from 'fastify';
import { expressMiddleware, fastifyPlugin, fetchWithRetry, Gateway, RL } from '../src/index.js';
import { listen, rawStatus } from './support/http.js';
import { backend, fresh, quiet, serveGateway } from './support/gateway.js';
import { Server } from './support/server.js';
import { VARIANTS } from './support/clients.js';

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

describe('fastify', () => {
  test('admits with headers, refuses with a problem, settles and releases', async () => {
    const p = fresh();
    const gateway = new Gateway({ store: io, logger: quiet, policy: {
      version: 1, default: { rules: [] },
      identity: { tenant: 'x-tenant' },
      rules: {
        two: { key: `${p}:two`, limit: 2, period: '1h' },
        slot: { key: `${p}:{t:\${tenant}}:slot`, concurrency: 1, lease: '1m' },
        job: { key: `${p}:{t:\${tenant}}:job`, limit: 100, period: '1h', cost: 10, settle: true },
      },
      store: { timeout: '1s' },
      routes: [
        { method: 'GET', path: '/two', rules: ['two'] },
        { method: 'POST', path: '/job', rules: ['slot', 'job'] },
      ],
    } });
    const app = Fastify();
    await app.register(fastifyPlugin(gateway));
    app.get('/two', async () => ({ ok: true }));
    app.post('/job', async (req, reply) => {
      reply.header('X-Actual-Cost', '4');
      return { ok: true };
    });
    const url = await app.listen({ port: 0, host: '127.0.0.1' });
    try {
      const statuses = [];
      for (let i = 0; i < 3; i++) statuses.push(await fetch(`${url}/two`));
      assert.deepEqual(statuses.map((r) => r.status), [200, 200, 429]);
      assert.equal(statuses[0].headers.get('ratelimit'), '"two";r=1;t=1800');
      assert.deepEqual((await statuses[2].json())['violated-policies'], ['two']);
      const job = await fetch(`${url}/job`, { method: 'POST', headers: { 'x-tenant': 'f' } });
      assert.equal(job.status, 200);
      const rl = new RL(io, { logger: quiet });
      assert.equal((await rl.info(`${p}:{t:f}:job`)).remaining, 96);
      const deadline = Date.now() + 5000;
      while ((await rl.info(`${p}:{t:f}:slot`)) !== null && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
      assert.equal(await rl.info(`${p}:{t:f}:slot`), null);
    } finally {
      await app.close();
    }
  });
});

describe('stacked layers', () => {
  test('a second limiting layer adds its items to the first one\'s', async () => {
    const p = fresh();
    const layer = (name, limit) => expressMiddleware(new Gateway({ store: io, logger: quiet, policy: {
      version: 1, default: { rules: [] }, store: { timeout: '1s' }, rules: { [name]: { key: `${p}:${name}`, limit, period: '1h' } },
      routes: [{ method: 'GET', path: '/s', rules: [name] }] } }));
    const app = express();
    app.use(layer('outer', 100));
    app.use(layer('inner', 10));
    backend(app);
    const s = await listen(app);
    try {
      const r = await fetch(`${s.url}/s`);
      assert.equal(r.headers.get('ratelimit-policy'), '"outer";q=100;w=3600, "inner";q=10;w=3600');
      assert.equal(r.headers.get('ratelimit'), '"outer";r=99;t=36, "inner";r=9;t=360');
    } finally {
      await s.close();
    }
  });
});

describe('identity', () => {
  test('X-Forwarded-For is read from the right past trusted proxies only', async () => {
    const p = fresh();
    const g = await serveGateway({ store: io, policy: {
      version: 1, default: { rules: [] },
      identity: { trusted_proxies: ['127.0.0.0/8', '10.0.0.0/8'] },
      store: { timeout: '1s' },
      rules: { ip: { key: `${p}:ip:\${ip}`, limit: 1, period: '1h' } },
      routes: [{ method: 'GET', path: '/ip', rules: ['ip'] }],
    } });
    try {
      const via = (xff) => fetch(`${g.url}/ip`, { headers: { 'x-forwarded-for': xff } }).then((r) => r.status);
      assert.equal(await via('203.0.113.7, 10.1.2.3'), 200);
      // The same client behind another trusted hop, and with a forged hop on its left.
      assert.equal(await via('198.51.100.1, 203.0.113.7, 10.9.9.9'), 429);
      assert.equal(await via('203.0.113.8'), 200);
      const rl = new RL(io, { logger: quiet });
      assert.notEqual(await rl.info(`${p}:ip:203.0.113.7`), null);
      assert.equal(await rl.info(`${p}:ip:198.51.100.1`), null);
    } finally {
      await g.close();
    }
  });

  test('an application resolver replaces the identity headers', async () => {
    const p = fresh();
    const g = await serveGateway({ store: io,
      identify: async (req) => ({ user: req.headers.authorization === 'Bearer k1' ? 'alice' : undefined }),
      policy: { version: 1, default: { rules: [] }, identity: { user: 'x-user' }, store: { timeout: '1s' },
        rules: { u: { key: `${p}:u:\${user}`, limit: 5, period: '1h' } },
        routes: [{ method: 'GET', path: '/u', rules: ['u'] }] } });
    try {
      await fetch(`${g.url}/u`, { headers: { authorization: 'Bearer k1', 'x-user': 'mallory' } });
      await fetch(`${g.url}/u`, { headers: { 'x-user': 'bob' } });
      const rl = new RL(io, { logger: quiet });
      assert.notEqual(await rl.info(`${p}:u:alice`), null);
      assert.equal(await rl.info(`${p}:u:mallory`), null);
      assert.notEqual(await rl.info(`${p}:u:bob`), null);
    } finally {
      await g.close();
    }
  });
});

// express behind the gateway (an application's `trust proxy` setting given), or fastify (its
// `trustProxy`), in front of the same stub backend: `?units=` is the X-Actual-Cost it declares,
// as given.
async function serveFramework(kind, gateway, trust = false) {
  if (kind === 'express') {
    const app = express();
    app.set('trust proxy', trust);
    app.use(expressMiddleware(gateway));
    backend(app);
    const s = await listen(app);
    return { ...s, seen: (path) => s.server.once('request', (req) => path(req.socket)) };
  }
  const app = Fastify({ trustProxy: trust });
  await app.register(fastifyPlugin(gateway));
  app.all('/*', async (req, reply) => {
    if (req.query.units !== undefined) reply.header('X-Actual-Cost', req.query.units);
    return { ok: true };
  });
  const url = await app.listen({ port: 0, host: '127.0.0.1' });
  return { url, port: app.server.address().port, close: () => app.close(),
    seen: (path) => app.server.once('request', (req) => path(req.socket)) };
}

describe('what no caller may provoke', () => {
  for (const kind of ['express', 'fastify']) {
    test(`${kind}: X-Forwarded-For buys no fresh budget with trusted_proxies: [], whatever the framework trusts`, async () => {
      const p = fresh();
      const gateway = new Gateway({ store: io, logger: quiet, policy: {
        version: 1, default: { rules: [] }, identity: { trusted_proxies: [] }, store: { timeout: '1s' },
        rules: { ip: { key: `${p}:ip:\${ip}`, limit: 3, period: '1h' } },
        routes: [{ method: 'POST', path: '/login', rules: ['ip'] }] } });
      const s = await serveFramework(kind, gateway, true);
      try {
        const statuses = [];
        for (let i = 1; i <= 5; i++) {
          statuses.push((await fetch(`${s.url}/login`, { method: 'POST', headers: { 'x-forwarded-for': `203.0.113.${i}` } })).status);
        }
        assert.deepEqual(statuses, [200, 200, 200, 429, 429]);
        assert.equal(await io.exists(`${p}:ip:127.0.0.1`), 1);
        assert.equal(await io.exists(`${p}:ip:203.0.113.1`), 0);
      } finally {
        await s.close();
      }
    });

    test(`${kind}: HEAD, a trailing slash${kind === 'express' ? ' and another case' : ''} keep the route's rules`, async () => {
      const p = fresh();
      const gateway = new Gateway({ store: io, logger: quiet, policy: {
        version: 1, default: { rules: [] }, store: { timeout: '1s' },
        rules: { r: { key: `${p}:r`, limit: 3, period: '1h' } },
        routes: [{ method: 'GET', path: '/catalog', rules: ['r'] }] } });
      const s = await serveFramework(kind, gateway);
      try {
        // express routes /CATALOG to the handler of /catalog (its default); fastify does not.
        const variants = [['HEAD', '/catalog'], ['GET', '/catalog/'], ['GET', kind === 'express' ? '/CATALOG' : '/catalog']];
        const statuses = [];
        for (const [method, path] of [...variants, ['GET', '/catalog']]) {
          statuses.push((await fetch(`${s.url}${path}`, { method })).status);
        }
        assert.deepEqual(statuses, [200, 200, 200, 429]);
      } finally {
        await s.close();
      }
    });

    test(`${kind}: a repeated identity header is its first value, as in every face`, async () => {
      const p = fresh();
      const gateway = new Gateway({ store: io, logger: quiet, policy: {
        version: 1, default: { rules: [] }, identity: { user: 'x-user' }, store: { timeout: '1s' },
        rules: { u: { key: `${p}:u:\${user}`, limit: 3, period: '1h' } },
        routes: [{ method: 'GET', path: '/u', rules: ['u'] }] } });
      const s = await serveFramework(kind, gateway);
      try {
        assert.equal(await rawStatus(s.port, 'GET /u HTTP/1.1\r\nHost: x\r\nx-user: ann\r\nx-user: bob\r\n'), 200);
        assert.deepEqual(await io.keys(`${p}:u:*`), [`${p}:u:ann`]);
      } finally {
        await s.close();
      }
    });

    test(`${kind}: header bytes that are not UTF-8, long Idempotency-Keys, any X-Actual-Cost: never a 5xx`, async () => {
      const p = fresh();
      const gateway = new Gateway({ store: io, logger: quiet, policy: {
        version: 1, default: { rules: [] }, identity: { user: 'x-user', tenant: 'x-tenant' }, store: { timeout: '1s' },
        rules: {
          read: { key: `${p}:read:\${user}`, limit: 100, period: '1h' },
          job: { key: `${p}:{t:\${tenant}}:job`, limit: 100, period: '1h', cost: 10, settle: true },
        },
        routes: [{ method: 'GET', path: '/read', rules: ['read'] }, { method: 'POST', path: '/job', rules: ['job'] }] } });
      const s = await serveFramework(kind, gateway);
      try {
        const heads = [
          'GET /read HTTP/1.1\r\nHost: x\r\nx-user: \xff\xfe\r\n',
          'GET /read HTTP/1.1\r\nHost: x\r\nx-user: \xc3\x28\r\n',
          'POST /job HTTP/1.1\r\nHost: x\r\nx-tenant: \xe9\xff\r\n',
          `POST /job HTTP/1.1\r\nHost: x\r\nx-tenant: a\r\nIdempotency-Key: ${'k'.repeat(300)}\r\n`,
          `POST /job HTTP/1.1\r\nHost: x\r\nx-tenant: a\r\nIdempotency-Key: ${'k'.repeat(300)}\r\n`,
          `POST /job HTTP/1.1\r\nHost: x\r\nx-tenant: b\r\nIdempotency-Key: ${'\xff'.repeat(300)}\r\n`,
          'POST /job?units=%C2%B2 HTTP/1.1\r\nHost: x\r\nx-tenant: c\r\n',
          'POST /job?units=-1 HTTP/1.1\r\nHost: x\r\nx-tenant: d\r\n',
          'POST /job?units=99999999999999999999999 HTTP/1.1\r\nHost: x\r\nx-tenant: e\r\n',
        ];
        const statuses = [];
        for (const head of heads) statuses.push(await rawStatus(s.port, head));
        assert.deepEqual(statuses, heads.map(() => 200));
        // An identity over 256 bytes is the caller's error.
        assert.equal(await rawStatus(s.port, `GET /read HTTP/1.1\r\nHost: x\r\nx-user: ${'\xff'.repeat(257)}\r\n`), 431);
        // Undeclared or invalid costs leave the estimate.
        for (const t of ['c', 'd', 'e']) assert.equal((await new RL(io, { logger: quiet }).info(`${p}:{t:${t}}:job`)).remaining, 90);
      } finally {
        await s.close();
      }
    });
  }
});

// node:http sets it on accepted sockets, ioredis, iovalkey and node-redis on theirs (their
// default `noDelay: true`); net.Socket keeps what was asked in a symbol of its own.
function noDelay(socket) {
  const key = Object.getOwnPropertySymbols(socket).find((k) => k.description === 'kSetNoDelay');
  assert.ok(key, 'net.Socket no longer records setNoDelay');
  return socket[key];
}

describe('TCP_NODELAY', () => {
  for (const kind of ['express', 'fastify']) {
    test(`${kind}: on every socket from a caller`, async () => {
      const gateway = new Gateway({ store: io, logger: quiet, policy: { version: 1, default: { rules: [] }, store: { timeout: '1s' },
        rules: { r: { key: `${fresh()}:r`, limit: 10, period: '1h' } }, routes: [{ method: 'GET', path: '/r', rules: ['r'] }] } });
      const s = await serveFramework(kind, gateway);
      try {
        const sockets = [];
        s.seen((socket) => sockets.push(socket));
        assert.equal((await fetch(`${s.url}/r`)).status, 200);
        assert.equal(sockets.length, 1);
        assert.equal(noDelay(sockets[0]), true);
      } finally {
        await s.close();
      }
    });
  }

  for (const variant of VARIANTS) {
    test(`${variant.name}: on every socket to the store`, async () => {
      const conn = await variant.connect(server.port);
      try {
        const gateway = new Gateway({ store: conn.adapter, logger: quiet, policy: { version: 1, default: { rules: [] }, store: { timeout: '1s' },
          rules: { r: { key: `${fresh()}:r`, limit: 10, period: '1h' } }, routes: [{ method: 'GET', path: '/r', rules: ['r'] }] } });
        const decision = await gateway.decide({ method: 'GET', path: '/r', headers: {}, peer: '127.0.0.1' });
        assert.equal(decision.status, 200);
        // A path above the root is answered, not passed (HTTP clients remove dot segments
        // before sending, so the driver is asked directly).
        const above = await gateway.decide({ method: 'GET', path: '/../r', headers: {}, peer: '127.0.0.1' });
        assert.equal(above.status, 400);
        assert.equal(JSON.parse(above.body).title, 'Bad Request');
        assert.equal(await gateway.decide({ method: 'GET', path: '/elsewhere', headers: {}, peer: '127.0.0.1' }), null);
        // Node's open handles are the only view of node-redis's sockets (ioredis's are `stream`).
        const sockets = process._getActiveHandles().filter((h) => h instanceof net.Socket && h.remotePort === server.port);
        assert.ok(sockets.length >= 2, `${sockets.length} sockets to the store`);
        for (const socket of sockets) assert.equal(noDelay(socket), true);
      } finally {
        conn.close();
      }
    });
  }
});

describe('fetchWithRetry', () => {
  async function flaky(replies) {
    const seen = [];
    const served = await listen((req, res) => {
      seen.push({ method: req.method, key: req.headers['idempotency-key'] });
      const [status, headers = {}] = replies[Math.min(seen.length - 1, replies.length - 1)];
      res.writeHead(status, headers).end(String(status));
    });
    return { ...served, seen };
  }

  test('retries 503 and 429, one Idempotency-Key for every attempt of a POST', async () => {
    const s = await flaky([[503], [429, { 'retry-after': '0' }], [200]]);
    try {
      const r = await fetchWithRetry(`${s.url}/`, { method: 'POST', body: 'x' }, { baseMs: 1, maxAttempts: 5 });
      assert.equal(r.status, 200);
      assert.equal(s.seen.length, 3);
      assert.equal(new Set(s.seen.map((x) => x.key)).size, 1);
      assert.match(s.seen[0].key, /^[0-9a-f]{32}$/);
    } finally {
      await s.close();
    }
  });

  test('returns other replies at once; no key on GET; the last result after max attempts', async () => {
    const s = await flaky([[404]]);
    const t = await flaky([[500]]);
    try {
      assert.equal((await fetchWithRetry(`${s.url}/`, {}, { baseMs: 1 })).status, 404);
      assert.equal(s.seen.length, 1);
      assert.equal(s.seen[0].key, undefined);
      assert.equal((await fetchWithRetry(`${t.url}/`, {}, { baseMs: 1, maxAttempts: 3 })).status, 500);
      assert.equal(t.seen.length, 3);
    } finally {
      await s.close();
      await t.close();
    }
  });

  test('a Retry-After longer than the cap returns that reply; waits follow the backoff', async () => {
    const s = await flaky([[503, { 'retry-after': '120' }]]);
    try {
      const r = await fetchWithRetry(`${s.url}/`, {}, { capMs: 1000 });
      assert.equal(r.status, 503);
      assert.equal(s.seen.length, 1);
    } finally {
      await s.close();
    }
    const waits = [];
    let calls = 0;
    const fake = async () => {
      calls += 1;
      if (calls < 4) throw new TypeError('fetch failed');
      return new Response('ok');
    };
    await fetchWithRetry('http://unused/', {}, { fetch: fake, baseMs: 100, capMs: 250, maxAttempts: 4, random: () => 0.999,
      sleep: async (ms) => { waits.push(Math.round(ms)); } });
    // d = min(cap, base × 2^(n−1)), the wait a draw in [d/2, d].
    assert.deepEqual(waits, [100, 200, 250]);
  });
});
