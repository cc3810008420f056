// Postures under real faults: a killed server, DEBUG SLEEP, CLIENT PAUSE, a port nothing listens
// on; the breaker opens, probes and ramps back.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import Redis from 'ioredis';
import { createClient } from 'redis';
import { freePort, Server } from './support/server.js';
import { fresh, series, serveGateway } from './support/gateway.js';

function policy(p, store = {}) {
  return {
    version: 1, default: { rules: [] },
    identity: { user: 'x-user' },
    rules: {
      write: { key: `${p}:write:\${user}`, limit: 100, period: '1h' },
      search: { key: `${p}:search:\${user}`, limit: 100, period: '1h', cost: 2 },
      open: { key: `${p}:open`, limit: 100, period: '1h' },
    },
    routes: [
      { method: 'POST', path: '/checkout', rules: ['write'], on_store_error: { mode: 'deny' } },
      { method: 'POST', path: '/search', rules: ['search'], on_store_error: { mode: 'fallback', limit: 3, period: '1h', burst: 4 } },
      { method: 'GET', path: '/open', rules: ['open'], on_store_error: { mode: 'allow' } },
    ],
    // Long enough for a loaded machine to answer, short against the 3 s faults below.
    store: { timeout: '250ms', breaker: { failures: 3, open: '1s' }, ramp: '1ms', ...store },
  };
}

const post = (url, path, user = 'u') => fetch(`${url}${path}`, { method: 'POST', headers: { 'x-user': user } });

async function expectPostures(url, gateway) {
  const deny = await post(url, '/checkout');
  assert.equal(deny.status, 503);
  assert.equal(deny.headers.get('content-type'), 'application/problem+json');
  assert.equal(deny.headers.get('ratelimit'), null);
  assert.ok(Number(deny.headers.get('retry-after')) >= 1);
  const body = await deny.json();
  assert.equal(body.title, 'Service Unavailable');
  assert.match(body.detail, /^The rate limiter is unavailable; /);
  // The fallback: gcra of 3 per hour with a burst of 4, the route's cost of 2.
  const fb = [];
  for (let i = 0; i < 3; i++) fb.push(await post(url, '/search', 'fb'));
  assert.deepEqual(fb.map((r) => r.status), [200, 200, 429]);
  assert.equal(fb[0].headers.get('ratelimit'), '"search";r=2;t=2400');
  assert.deepEqual((await fb[2].json())['violated-policies'], ['search']);
  const open = await fetch(`${url}/open`);
  assert.equal(open.status, 200);
  const m = gateway.metrics;
  assert.ok(m.count('POST /checkout', 'write', 'unavailable_deny') >= 1);
  assert.equal(m.count('POST /search', 'search', 'fallback_admit'), 2);
  assert.equal(m.count('POST /search', 'search', 'fallback_refuse'), 1);
  assert.ok(m.count('GET /open', 'open', 'open_admit') >= 1);
}

describe('postures under faults', () => {
  const clients = [
    ['ioredis', (server) => server.ioredis(), (c) => c.disconnect()],
    ['node-redis RESP3', async (server) => {
      const c = createClient({ socket: { port: server.port, host: '127.0.0.1', reconnectStrategy: 50 }, RESP: 3, disableOfflineQueue: true });
      c.on('error', () => {});
      await c.connect();
      return c;
    }, (c) => c.destroy()],
  ];
  for (const [name, connect, disconnect] of clients) {
    test(`a killed server (${name}): deny, fallback and allow; the breaker opens`, async () => {
      const server = await Server.start();
      const client = await connect(server);
      const g = await serveGateway({ store: client, policy: policy(fresh()) });
      try {
        assert.equal((await post(g.url, '/checkout')).status, 200);
        server.kill();
        await new Promise((r) => setTimeout(r, 100));
        await expectPostures(g.url, g.gateway);
        assert.equal(series(g.gateway, 'rl_gateway_breaker_state{state="open"}'), 1);
        assert.match(g.gateway.metrics.render(), /rl_gateway_breaker_state\{state="open"\} 1\n/);
        assert.match(g.gateway.metrics.render(), /rl_gateway_store_call_duration_seconds_count\{result="(error|timeout)"\} \d\n/);
      } finally {
        disconnect(client);
        await g.close();
        await server.stop();
      }
    });
  }

  test('DEBUG SLEEP: calls miss their deadline and take the posture', async () => {
    const server = await Server.start();
    const io = await server.ioredis();
    const other = await server.ioredis();
    const g = await serveGateway({ store: io, policy: policy(fresh(), { breaker: { failures: 100, open: '1s' } }) });
    try {
      const sleeping = other.call('DEBUG', 'SLEEP', '3');
      await new Promise((r) => setTimeout(r, 100));
      await expectPostures(g.url, g.gateway);
      assert.match(g.gateway.metrics.render(), /rl_gateway_store_call_duration_seconds_count\{result="timeout"\} \d+\n/);
      await sleeping;
    } finally {
      io.disconnect();
      other.disconnect();
      await g.close();
      await server.stop();
    }
  });

  test('CLIENT PAUSE: the same', async () => {
    const server = await Server.start();
    const io = await server.ioredis();
    const other = await server.ioredis();
    const g = await serveGateway({ store: io, policy: policy(fresh(), { breaker: { failures: 100, open: '1s' } }) });
    try {
      await other.call('CLIENT', 'PAUSE', '3000', 'ALL');
      await expectPostures(g.url, g.gateway);
    } finally {
      await other.call('CLIENT', 'UNPAUSE');
      io.disconnect();
      other.disconnect();
      await g.close();
      await server.stop();
    }
  });

  test('a port nothing listens on: the posture from the first request', async () => {
    const port = await freePort();
    const io = new Redis({ port, host: '127.0.0.1', enableOfflineQueue: false, maxRetriesPerRequest: 0, lazyConnect: true });
    io.on('error', () => {});
    io.connect().catch(() => {});
    const g = await serveGateway({ store: io, policy: policy(fresh()) });
    try {
      await expectPostures(g.url, g.gateway);
    } finally {
      io.disconnect();
      await g.close();
    }
  });

  test('the breaker: open, one probe when half-open, closed when the store is back', async () => {
    const server = await Server.start();
    const io = await server.ioredis({ retryStrategy: () => 20 });
    const g = await serveGateway({ store: io, policy: policy(fresh(), { breaker: { failures: 2, open: '300ms' } }) });
    try {
      server.kill();
      await new Promise((r) => setTimeout(r, 50));
      for (let i = 0; i < 2; i++) assert.equal((await post(g.url, '/checkout')).status, 503);
      assert.equal(series(g.gateway, 'rl_gateway_breaker_state{state="open"}'), 1);
      const calls = () => series(g.gateway, 'rl_gateway_store_call_duration_seconds_count{result="error"}');
      const before = calls();
      assert.equal((await post(g.url, '/checkout')).status, 503);
      assert.equal(calls(), before, 'an open breaker sends nothing to the store');
      await server.restart();
      const deadline = Date.now() + 5000;
      while (io.status !== 'ready' && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      // Half-open once the open period has passed: the next request is the probe.
      await new Promise((r) => setTimeout(r, 350));
      assert.equal((await post(g.url, '/checkout')).status, 200);
      // The probe's success ramps back (1 ms here); the next report is closed.
      await new Promise((r) => setTimeout(r, 5));
      assert.equal((await post(g.url, '/checkout')).status, 200);
      assert.equal(series(g.gateway, 'rl_gateway_breaker_state{state="closed"}'), 1);
    } finally {
      io.disconnect();
      await g.close();
      await server.stop();
    }
  });
});

describe('background calls', () => {
  test('a settlement or a release that fails is logged with its command and route, never a key or an identity', async () => {
    const server = await Server.start();
    const io = await server.ioredis();
    const admin = await server.ioredis();
    const lines = [];
    const logger = { info() {}, warn: (message, entry) => lines.push({ message, entry }), error() {} };
    const p = fresh();
    const g = await serveGateway({ store: io, logger, policy: {
      version: 1, default: { rules: [] },
      identity: { tenant: 'x-tenant' },
      rules: {
        slot: { key: `${p}:{t:\${tenant}}:slot`, concurrency: 2, lease: '1m' },
        job: { key: `${p}:{t:\${tenant}}:job`, limit: 100, period: '1h', cost: 10, settle: true },
      },
      routes: [{ method: 'POST', path: '/job', rules: ['slot', 'job'] }],
      store: { timeout: '1s' },
    } });
    try {
      const answer = fetch(`${g.url}/job?ms=1000&units=3`, { method: 'POST', headers: { 'x-tenant': 'secret-tenant' } });
      // The store goes away once the request holds its slot and its reservation (the last call)
      // and the backend works.
      const deadline = Date.now() + 5000;
      while (!(await admin.exists(`${p}:{t:secret-tenant}:job`)) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
      server.kill();
      assert.equal((await answer).status, 200);
      while (lines.length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
      assert.deepEqual(lines.map((l) => l.entry), [{ route: 'POST /job', command: 'RL.SETTLE' }, { route: 'POST /job', command: 'RL.RELEASE' }]);
      assert.match(lines[0].message, /^redis-rl: RL\.SETTLE in the background failed: the store did not answer: .*; the reservation stays at its estimate$/);
      assert.match(lines[1].message, /; the slot is held until its lease ends$/);
      for (const { message } of lines) {
        assert.ok(!message.includes('secret-tenant') && !message.includes(p), message);
      }
    } finally {
      io.disconnect();
      admin.disconnect();
      await g.close();
      await server.stop();
    }
  });
});
