// Capacity through the express middleware against a real server (section 14 of the contract):
// a flood of batch work at twice what the capacity admits leaves every critical request
// served, and the shed batch requests get the capacity's own 503.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import express from 'express';
import { expressMiddleware, Gateway } from '../src/index.js';
import { listen } from './support/http.js';
import { fresh, quiet } from './support/gateway.js';
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

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

test('a batch flood at twice the capacity leaves critical requests served', async () => {
  const p = fresh();
  const gateway = new Gateway({ store: io, logger: quiet, policy: {
    version: 1, default: { rules: [] },
    identity: { tenant: 'x-tenant' },
    rules: { tenant: { key: `${p}:{t:\${tenant}}:all`, limit: 100000, period: '1s' } },
    capacity: { orders: { limit: { fixed: 8 } } },
    store: { timeout: '1s' },
    routes: [
      { method: 'POST', path: '/checkout', rules: ['tenant'], capacity: 'orders', priority: 'critical' },
      { method: 'POST', path: '/export', rules: ['tenant'], capacity: 'orders', priority: 'batch' },
    ],
  } });
  const app = express();
  app.use(expressMiddleware(gateway));
  const work = async (req, res) => { await sleep(50); res.json({ ok: true }); };
  app.post('/checkout', work);
  app.post('/export', work);
  const { url, close } = await listen(app);
  try {
    let running = true;
    const batch = { 200: 0, 503: 0 };
    const flood = async () => {
      while (running) {
        const r = await fetch(`${url}/export`, { method: 'POST', headers: { 'x-tenant': 'acme' } });
        batch[r.status] += 1;
        const body = await r.json();
        if (r.status === 503) {
          assert.equal(body.type, 'urn:redis-rl:problem:capacity-exceeded');
          await sleep(5);
        }
      }
    };
    const callers = Array.from({ length: 16 }, flood);
    await sleep(300);
    const critical = [];
    for (let i = 0; i < 10; i++) {
      const answers = await Promise.all(Array.from({ length: 4 }, () =>
        fetch(`${url}/checkout`, { method: 'POST', headers: { 'x-tenant': 'acme' } })));
      for (const r of answers) {
        critical.push(r.status);
        await r.arrayBuffer();
      }
    }
    running = false;
    await Promise.all(callers);
    assert.deepEqual(critical, Array(40).fill(200));
    assert.ok(batch[200] > 0 && batch[503] > 0, JSON.stringify(batch));
    const metrics = gateway.metrics.render();
    assert.match(metrics, new RegExp(`rl_gateway_capacity_shed_total\\{capacity="orders",class="batch"\\} ${batch[503]}\\n`));
    assert.match(metrics, /rl_gateway_capacity_shed_total\{capacity="orders",class="critical"\} 0\n/);
  } finally {
    await close();
  }
});
