// The gateway over real HTTP against a real server: headers, refusals, the negative cache,
// semaphores, settlement, grants, shadow and durable rules, metrics and the exact bound
// under concurrent clients.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { RL } from '../src/index.js';
import { fresh, quiet, series, serveGateway } from './support/gateway.js';
import { SCRIPT_MODE, Server } from './support/server.js';

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

function policy(p, extra = {}) {
  return {
    version: 1, default: { rules: [] },
    identity: { user: 'x-user', tenant: 'x-tenant' },
    rules: {
      read: { key: `${p}:{t:\${tenant}}:read:\${user}`, algo: 'bucket', limit: 2, period: '1s', burst: 20 },
      tenant: { key: `${p}:{t:\${tenant}}:tenant`, limit: 1000, period: '1d', public: false },
      hourly: { key: `${p}:{h:\${user}}:hourly`, limit: 3, period: '1h' },
      bound: { key: `${p}:bound`, limit: 10, period: '1h' },
      inflight: { key: `${p}:{t:\${tenant}}:inflight`, concurrency: 2, lease: '60s' },
      export: { key: `${p}:{t:\${tenant}}:export`, limit: 100, period: '1h', cost: 10, settle: true },
      global: { key: `${p}:global`, limit: 1000, period: '1h', grant: { want: 10, ttl: '10s' } },
      watch: { key: `${p}:watch:\${user}`, limit: 1, period: '1h', shadow: true },
      durable: { key: `${p}:durable:\${user}`, limit: 100, period: '1h', durable: true },
    },
    routes: [
      { method: 'GET', path: '/catalog', rules: ['read', 'tenant'] },
      { method: 'GET', path: '/hourly', rules: ['hourly'] },
      { method: 'GET', path: '/bound', rules: ['bound'] },
      { method: 'POST', path: '/export', rules: ['inflight', 'export'] },
      { method: 'GET', path: '/global', rules: ['global', 'hourly'] },
      { method: 'GET', path: '/watched', rules: ['watch', 'hourly'] },
      { method: 'POST', path: '/durable', rules: ['durable'] },
      { method: 'POST', path: '/mixed', rules: ['export', 'inflight'] },
      { method: 'GET', path: '/chunk', rules: ['global'] },
    ],
    // A deadline a loaded test machine meets; the faults tests take the default's place.
    store: { timeout: '1s' },
    ...extra,
  };
}

async function withGateway(fn, options = {}) {
  const p = fresh();
  const g = await serveGateway({ store: io, policy: policy(p, options.policyExtra), legacyHeaders: options.legacy, ...options.gateway });
  try {
    await fn({ ...g, p, rl: new RL(io, { logger: quiet }) });
  } finally {
    await g.close();
  }
}

const get = (url, headers = {}) => fetch(url, { headers });

describe('gateway', () => {
  test('an admission carries RateLimit fields; private rules only for a known user', async () => {
    await withGateway(async ({ url }) => {
      const anon = await get(`${url}/catalog`, { 'x-tenant': 'acme' });
      assert.equal(anon.status, 200);
      assert.deepEqual(await anon.json(), { ok: true, path: '/catalog' });
      assert.equal(anon.headers.get('ratelimit-policy'), '"read";q=2;w=1;rl-burst=20');
      assert.equal(anon.headers.get('ratelimit'), '"read";r=19;t=1');
      const user = await get(`${url}/catalog`, { 'x-tenant': 'acme', 'x-user': 'ann' });
      assert.equal(user.headers.get('ratelimit-policy'), '"read";q=2;w=1;rl-burst=20, "tenant";q=1000;w=86400');
      assert.equal(user.headers.get('ratelimit'), '"read";r=19;t=1, "tenant";r=998;t=173');
    });
  });

  test('a route no policy names passes untouched', async () => {
    await withGateway(async ({ url, gateway }) => {
      const r = await get(`${url}/elsewhere`);
      assert.equal(r.status, 200);
      assert.equal(r.headers.get('ratelimit'), null);
      assert.ok(!gateway.metrics.render().includes('route="GET /elsewhere"'));
    });
  });

  test('a refusal is a 429 problem, then the negative cache refuses without the store', async () => {
    await withGateway(async ({ url, gateway }) => {
      for (let i = 0; i < 3; i++) assert.equal((await get(`${url}/hourly`, { 'x-user': 'bob' })).status, 200);
      const refused = await get(`${url}/hourly`, { 'x-user': 'bob' });
      assert.equal(refused.status, 429);
      assert.equal(refused.headers.get('content-type'), 'application/problem+json');
      assert.equal(refused.headers.get('retry-after'), '1200');
      assert.equal(refused.headers.get('ratelimit'), '"hourly";r=0;t=1200');
      assert.equal(refused.headers.get('x-ratelimit-limit'), '3');
      const body = await refused.json();
      assert.equal(body.type, 'https://iana.org/assignments/http-problem-types#quota-exceeded');
      assert.equal(body.status, 429);
      assert.deepEqual(body['violated-policies'], ['hourly']);
      const cached = await get(`${url}/hourly`, { 'x-user': 'bob' });
      assert.equal(cached.status, 429);
      assert.deepEqual((await cached.json())['violated-policies'], ['hourly']);
      assert.match(cached.headers.get('ratelimit'), /^"hourly";r=0;t=1$/);
      const m = gateway.metrics;
      assert.equal(m.count('GET /hourly', 'hourly', 'admit'), 3);
      assert.equal(m.count('GET /hourly', 'hourly', 'refuse'), 1);
      assert.equal(m.count('GET /hourly', 'hourly', 'refuse_cached'), 1);
    }, { legacy: true });
  });

  test('concurrent clients on one key stay within the exact bound', async () => {
    await withGateway(async ({ url, gateway }) => {
      const statuses = await Promise.all(Array.from({ length: 60 }, () => get(`${url}/bound`).then((r) => r.status)));
      assert.equal(statuses.filter((s) => s === 200).length, 10);
      assert.equal(statuses.filter((s) => s === 429).length, 50);
      assert.equal(gateway.metrics.count('GET /bound', 'bound', 'admit'), 10);
    });
  });

  test('semaphore slots are held while the backend works and released after', async () => {
    await withGateway(async ({ url, p, rl }) => {
      const slow = () => fetch(`${url}/export?ms=300`, { method: 'POST', headers: { 'x-tenant': 'sem' } }).then(async (r) => {
        await r.arrayBuffer();
        return r.status;
      });
      const statuses = await Promise.all([slow(), slow(), slow(), slow()]);
      assert.equal(statuses.filter((s) => s === 200).length, 2);
      assert.equal(statuses.filter((s) => s === 429).length, 2);
      const key = `${p}:{t:sem}:inflight`;
      const deadline = Date.now() + 5000;
      while ((await rl.info(key)) !== null && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
      assert.equal(await rl.info(key), null);
    });
  });

  test('a caller that goes away releases its slot at once', async () => {
    await withGateway(async ({ url, p, rl }) => {
      const ac = new AbortController();
      const gone = fetch(`${url}/export?ms=60000`, { method: 'POST', headers: { 'x-tenant': 'gone' }, signal: ac.signal })
        .catch((e) => e.name);
      const key = `${p}:{t:gone}:inflight`;
      const deadline = Date.now() + 5000;
      while ((await rl.info(key)) === null && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
      assert.equal((await rl.info(key)).in_flight, 1);
      ac.abort();
      assert.equal(await gone, 'AbortError');
      while ((await rl.info(key)) !== null && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
      assert.equal(await rl.info(key), null);
    });
  });

  test('X-Actual-Cost settles the reservation; an Idempotency-Key is not charged again until a 2xx', async () => {
    await withGateway(async ({ url, p, rl }) => {
      const post = (q, key) => fetch(`${url}/export${q}`, { method: 'POST', headers: { 'x-tenant': 'set', 'idempotency-key': key } });
      const key = `${p}:{t:set}:export`;
      const failed = await post('?status=502', 'job-1');
      assert.equal(failed.status, 502);
      assert.match(failed.headers.get('ratelimit'), /"export";r=90;/);
      assert.equal((await rl.info(key)).remaining, 90);
      // The retry of the failed attempt is not charged again; its 200 settles at 3, forgotten.
      const retry = await post('?units=3', 'job-1');
      assert.equal(retry.status, 200);
      assert.equal((await rl.info(key)).remaining, 97);
      // The key used once more after that 2xx is charged like a new request.
      const reused = await post('?units=3', 'job-1');
      assert.equal(reused.status, 200);
      assert.equal((await rl.info(key)).remaining, 94);
      await post('', 'job-2');
      assert.equal((await rl.info(key)).remaining, 84);
    });
  });

  // The script rewrites a key's reservations at each call: filling one takes minutes there; its
  // refusal's text is the module's, which is what the engine reads (the engine's own test).
  test("a key full of reservations is the caller's 429 and trips nothing", { skip: SCRIPT_MODE }, async () => {
    await withGateway(async ({ url, p }) => {
      const pipe = io.pipeline();
      for (let i = 0; i < 10000; i++) pipe.call('RL.ADMIT', `${p}:{t:full}:export`, '1000000', '1h', 'RESERVE', `held-${i}`);
      await pipe.exec();
      const post = (tenant) => fetch(`${url}/export`, { method: 'POST', headers: { 'x-tenant': tenant, 'idempotency-key': 'k' } });
      const refused = [];
      for (let i = 0; i < 6; i++) {
        const r = await post('full');
        refused.push([r.status, r.headers.get('retry-after'), (await r.json())['violated-policies']]);
      }
      assert.deepEqual(refused, Array(6).fill([429, '3600', ['export']]));
      // Six refusals later the breaker is closed: another tenant is decided by the store.
      const other = await post('other');
      assert.equal(other.status, 200);
      assert.match(other.headers.get('ratelimit'), /"export";r=90;/);
    });
  });

  test('headers follow route order whatever order the calls run in', async () => {
    await withGateway(async ({ url }) => {
      const r = await fetch(`${url}/mixed`, { method: 'POST', headers: { 'x-tenant': 'mix' } });
      assert.equal(r.status, 200);
      assert.equal(r.headers.get('ratelimit-policy'), '"export";q=100;w=3600, "inflight";q=2;qu="concurrent-requests"');
    });
  });

  test('a grant rule spends its chunk locally and refills it once per chunk', async () => {
    await withGateway(async ({ url, gateway }) => {
      for (let i = 0; i < 3; i++) assert.equal((await get(`${url}/global`, { 'x-user': `u${i}` })).status, 200);
      assert.match(gateway.metrics.render(), /rl_gateway_grant_refills_total\{rule="global"\} 1\n/);
      // Each request still called the store for its other rule: one call each, the refill in it.
      assert.equal(series(gateway, 'rl_gateway_store_call_duration_seconds_count{result="ok"}'), 3);
      // A refusal by a later rule gives the token back: 6 admissions spend 6 of the 10, so
      // 4 more are admitted from the same chunk, with no second refill.
      for (let i = 0; i < 3; i++) await get(`${url}/global`, { 'x-user': 'same' });
      assert.equal((await get(`${url}/global`, { 'x-user': 'same' })).status, 429);
      for (let i = 0; i < 4; i++) assert.equal((await get(`${url}/global`, { 'x-user': `v${i}` })).status, 200);
      assert.match(gateway.metrics.render(), /rl_gateway_grant_refills_total\{rule="global"\} 1\n/);
    });
  });

  test('a request spent from its chunk alone is no store call', async () => {
    await withGateway(async ({ url, gateway, p, rl }) => {
      for (let i = 0; i < 3; i++) assert.equal((await get(`${url}/chunk`)).status, 200);
      assert.equal(series(gateway, 'rl_gateway_grant_refills_total{rule="global"}'), 1);
      // One RL.GRANT of 10 spent the store's tokens; the three requests spent the chunk's.
      assert.equal((await rl.info(`${p}:global`)).remaining, 1000 - 10);
    });
  });

  test('a shadow rule counts its refusals and never refuses', async () => {
    await withGateway(async ({ url, gateway }) => {
      assert.equal((await get(`${url}/watched`, { 'x-user': 'sh' })).status, 200);
      const second = await get(`${url}/watched`, { 'x-user': 'sh' });
      assert.equal(second.status, 200);
      assert.equal(second.headers.get('ratelimit-policy'), '"hourly";q=3;w=3600');
      assert.equal(gateway.metrics.count('GET /watched', 'watch', 'shadow_refuse'), 1);
    });
  });

  test('a durable rule without a replica counts unreplicated_admit, and the admission stands', async () => {
    await withGateway(async ({ url, gateway }) => {
      const r = await fetch(`${url}/durable`, { method: 'POST', headers: { 'x-user': 'd' } });
      assert.equal(r.status, 200);
      assert.equal(gateway.metrics.count('POST /durable', 'durable', 'unreplicated_admit'), 1);
      assert.equal(gateway.metrics.count('POST /durable', 'durable', 'admit'), 1);
    });
  });

  test('a durable rule with a replica waits for its acknowledgement', async () => {
    const replica = await Server.start(['--replicaof', '127.0.0.1', String(server.port)]);
    const r = await replica.ioredis();
    try {
      const deadline = Date.now() + 20_000;
      while (!(await r.info('replication')).includes('master_link_status:up')) {
        if (Date.now() > deadline) throw new Error('the replica did not sync');
        await new Promise((res) => setTimeout(res, 50));
      }
      const own = await server.ioredis();
      const ownId = await own.call('CLIENT', 'ID');
      try {
        // On the gateway's connection, then on connections of its own for durable routes.
        for (const durableStore of [undefined, own]) {
          await withGateway(async ({ url, gateway }) => {
            const res = await fetch(`${url}/durable`, { method: 'POST', headers: { 'x-user': 'd' } });
            assert.equal(res.status, 200);
            assert.equal(gateway.metrics.count('POST /durable', 'durable', 'admit'), 1);
            assert.equal(gateway.metrics.count('POST /durable', 'durable', 'unreplicated_admit'), 0);
          }, { policyExtra: { store: { timeout: '2s' } }, gateway: { durableStore } });
        }
        // The durable connection carried the route's calls, its WAIT last.
        assert.match(await io.call('CLIENT', 'LIST', 'ID', ownId), / cmd=wait /);
      } finally {
        own.disconnect();
      }
    } finally {
      r.disconnect();
      await replica.stop();
    }
  });

  test('metrics: every family declared, series in order, the hook sees every event', async () => {
    const events = [];
    await withGateway(async ({ url, gateway }) => {
      await get(`${url}/hourly`, { 'x-user': 'm' });
      const text = gateway.metrics.render();
      for (const family of ['rl_gateway_decisions_total counter', 'rl_gateway_store_call_duration_seconds histogram',
        'rl_gateway_grant_refills_total counter', 'rl_gateway_breaker_state gauge', 'rl_gateway_policy_version gauge',
        'rl_gateway_route_mode gauge']) {
        assert.ok(text.includes(`# TYPE ${family}\n`), family);
      }
      assert.match(text, /rl_gateway_decisions_total\{route="GET \/hourly",rule="hourly",outcome="admit"\} 1\n/);
      assert.match(text, /rl_gateway_breaker_state\{state="closed"\} 1\n/);
      assert.match(text, /rl_gateway_policy_version 1\n/);
      assert.match(text, /rl_gateway_route_mode\{route="GET \/bound",mode="deny"\} 1\n/);
      assert.match(text, /rl_gateway_store_call_duration_seconds_count\{result="ok"\} 1\n/);
      assert.match(text, /rl_gateway_store_mode\{mode="(module|script)"\} 1\n/);
      const routes = [...text.matchAll(/rl_gateway_route_mode\{route="([^"]+)",mode="deny"\}/g)].map((m) => m[1]);
      assert.deepEqual(routes, [...routes].sort());
    }, { gateway: { hook: (e) => events.push(e.type) } });
    for (const type of ['policy_version', 'route_mode', 'decision', 'store_call']) assert.ok(events.includes(type), type);
  });

  test('decision logs: sampled requests log every rule, never a key or an identity', async () => {
    const lines = [];
    const logger = { info: (msg, entry) => lines.push(entry), warn: (msg, entry) => lines.push(entry), error() {} };
    await withGateway(async ({ url }) => {
      await get(`${url}/catalog`, { 'x-user': 'secret-user', 'x-tenant': 'secret-tenant' });
    }, { gateway: { logger, logSample: 1 } });
    const decisions = lines.filter((l) => l?.outcome);
    assert.deepEqual(decisions.map((l) => [l.rule, l.outcome, l.policy_version]), [['read', 'admit', 1], ['tenant', 'admit', 1]]);
    assert.ok(!JSON.stringify(lines).includes('secret'));
  });

  test('decision logs: a refusal and an unmatched request are recorded with their reason, plan and id', async () => {
    const lines = [];
    const logger = { info: (msg, entry) => lines.push(entry), warn: (msg, entry) => lines.push(entry), error() {} };
    await withGateway(async ({ url }) => {
      const h = { 'x-user': 'rec', 'x-tenant': 'rec' };
      const statuses = [];
      for (let i = 0; i < 4; i++) statuses.push((await get(`${url}/hourly`, h)).status);
      assert.deepEqual(statuses, [200, 200, 200, 429]);
      await get(`${url}/nowhere`, h);
    }, { gateway: { logger, logSample: 0 } });
    const records = lines.filter((l) => l?.reason);
    assert.deepEqual(records.map((l) => [l.reason, l.route, l.rule, l.plan]),
      [['refuse:hourly', 'GET /hourly', 'hourly', ''], ['unmatched', 'default', '', '']]);
    assert.match(records[0].decision, /^[0-9a-f]{16}$/);
    assert.notEqual(records[0].decision, records[1].decision);
  });
});
