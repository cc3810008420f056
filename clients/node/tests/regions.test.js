// One limit across regions through the gateway, against a home server and a regional server: a
// global rule's key decided at the floor until the home answers, the home's record of this
// gateway's report and its grant, then a burst admitted by the allocation; the reports stopped
// by close; a home behind Sentinel, given as ioredis's client of the primary it names; a global
// rule without a region refused, naming the rule.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Gateway, PolicyError } from '../src/index.js';
import { fresh, quiet, serveGateway } from './support/gateway.js';
import Redis from 'ioredis';
import { Sentinel, Server } from './support/server.js';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// 100 a second shared by two regions, a tenth held back, reported every 500 ms: the pool is 90
// and the floor 2 (the pool's 5 % over two regions).
const policy = (prefix) => ({
  version: 1, default: { rules: [] }, regions: ['eu', 'us'], identity: { tenant: 'x-tenant' },
  rules: { tenant: { key: `{${prefix}:\${tenant}}:tenant`, limit: 100, period: '1s',
    global: { reserve: 0.1, every: '500ms' } } },
  routes: [{ method: 'GET', path: '/', rules: ['tenant'] }],
});

describe('one limit across regions', () => {
  let regional;
  let home;
  const clients = [];
  before(async () => {
    regional = await Server.start();
    home = await Server.start();
  });
  after(async () => {
    for (const c of clients) c.disconnect();
    await regional?.stop();
    await home?.stop();
  });

  test('the floor until the home answers, the home keeps the report, then the allocation', async () => {
    const prefix = fresh();
    const [store, homeIo, reader] = [await regional.ioredis(), await home.ioredis(), await home.ioredis()];
    clients.push(store, homeIo, reader);
    const served = await serveGateway({ store, policy: policy(prefix), region: 'eu', home: homeIo, reporter: 'gw-1' });
    const admitted = async (n) => {
      let ok = 0;
      for (let i = 0; i < n; i++) {
        const res = await fetch(served.url, { headers: { 'x-tenant': 'atlas' } });
        await res.arrayBuffer();
        assert.ok(res.status === 200 || res.status === 429, String(res.status));
        if (res.status === 200) ok++;
      }
      return ok;
    };
    try {
      // No answer yet: the floor's 2, however many ask (and its 2 a second if asking takes a
      // while on a busy machine).
      const t0 = performance.now();
      const floor = await admitted(10);
      const took = (performance.now() - t0) / 1000;
      assert.ok(floor >= 2 && floor <= 2 + Math.ceil(2 * took), `${floor} in ${took}s`);
      // The first report goes a quarter of `every` (a jump) to `every` after the key's first
      // request; the home keeps it.
      const key = `rl:alloc:{${prefix}:atlas}:tenant`;
      let record = {};
      for (let i = 0; i < 100 && Object.keys(record).length === 0; i++) {
        record = await reader.hgetall(key);
        if (Object.keys(record).length === 0) await sleep(20);
      }
      assert.deepEqual(Object.keys(record), ['eu gw-1']);
      const [demand, , granted] = record['eu gw-1'].split(' ').map(Number);
      // Ten asked within a period, reported per period.
      assert.ok(demand >= 10 && demand <= 100, JSON.stringify(record));
      // The only region asking is granted the pool but the other region's floor.
      assert.equal(granted, 88, JSON.stringify(record));
      // Once the floor's state has drained (GCRA carries it into the new limit), a burst is
      // admitted by the allocation: ten times the floor or more (a report with less demand is
      // answered the safe share, 45), never more than 88 and what 88 a second adds.
      await sleep(1000);
      const start = performance.now();
      const n = await admitted(150);
      const elapsed = (performance.now() - start) / 1000;
      assert.ok(n >= 20 && n <= 88 + 88 * elapsed + 1, `${n} in ${elapsed}s, ${JSON.stringify(record)}`);
    } finally {
      served.gateway.close();
      await served.close();
    }
    assert.equal(served.gateway.reporter.timer, null);
  });

  test('the home may be behind Sentinel', async () => {
    const prefix = fresh();
    const sentinel = await Sentinel.start(home);
    const store = await regional.ioredis();
    const reader = await home.ioredis();
    const primary = new Redis({ sentinels: [{ host: '127.0.0.1', port: sentinel.port }], name: Sentinel.NAME });
    primary.on('error', () => {});
    clients.push(store, reader, primary);
    const served = await serveGateway({ store, policy: policy(prefix), region: 'eu', home: primary, reporter: 'gw-1' });
    try {
      const key = `rl:alloc:{${prefix}:atlas}:tenant`;
      let record = {};
      for (let i = 0; i < 100 && Object.keys(record).length === 0; i++) {
        const res = await fetch(served.url, { headers: { 'x-tenant': 'atlas' } });
        await res.arrayBuffer();
        record = await reader.hgetall(key);
        if (Object.keys(record).length === 0) await sleep(50);
      }
      assert.deepEqual(Object.keys(record), ['eu gw-1']);
    } finally {
      served.gateway.close();
      await served.close();
      await sentinel.stop();
    }
  });

  test('a global rule without a region is refused, naming the rule', () => {
    assert.throws(() => new Gateway({ store: {}, logger: quiet, policy: policy(fresh()) }),
      (err) => err instanceof PolicyError && /rules\.tenant\.global/.test(err.message));
    assert.throws(() => new Gateway({ store: {}, logger: quiet, policy: policy(fresh()), region: 'mars', home: {} }),
      (err) => err instanceof PolicyError && /'mars' is not one of/.test(err.message));
  });
});
