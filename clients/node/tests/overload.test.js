// The gateway's own overload (clients/SPEC.md section 7), judged by the engine: the driver only
// reports how late its event loop ran. Lateness the loop recovered from before a request arrived,
// or that began before its call was sent, sheds nothing.
import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';
import { describe, test } from 'node:test';
import { Gateway } from '../src/index.js';
import { engine as addon } from '../src/gateway/native.js';
import { Server } from './support/server.js';
import { fresh, quiet } from './support/gateway.js';

const policy = (p, timeout) => ({
  version: 1, default: { rules: [] }, identity: { user: 'x-user' },
  rules: { user: { key: `${p}:u:\${user}`, limit: 100, period: '1h' } },
  routes: [{ method: 'GET', path: '/r', rules: ['user'] }],
  store: { timeout },
});

const request = (user) => ({ method: 'GET', path: '/r', headers: { 'x-user': user }, peer: '127.0.0.1' });

// The event loop held by synchronous work, as a saturated process holds it.
function block(ms) {
  const end = performance.now() + ms;
  while (performance.now() < end);
}

const sheds = (gateway) => gateway.metrics.count('GET /r', 'user', 'shed');

describe('the gateway\'s own overload', () => {
  test('the addon asks the engine its rule', () => {
    const { Engine } = addon();
    const e = new Engine(JSON.stringify(policy(fresh(), '10ms')));
    // A quarter of the 40 ms the call had, and 5 ms at least.
    assert.deepEqual(e.missed(40, 9.999), { fail: 'timeout' });
    assert.deepEqual(e.missed(40, 10), { fail: 'overloaded' });
    assert.deepEqual(e.missed(8, 4.999), { fail: 'timeout' });
    assert.deepEqual(e.missed(8, 5), { fail: 'overloaded' });
    assert.deepEqual(e.missed(40, Number.NaN), { fail: 'timeout' });
    // Two store timeouts of a stall under way.
    assert.equal(e.saturated(19.999), false);
    assert.equal(e.saturated(20), true);
    assert.equal(e.saturated(Number.POSITIVE_INFINITY), true);
    assert.equal(e.saturated(-1), false);
  });

  test('a stall the loop recovered from sheds no new request', async () => {
    const server = await Server.start();
    const io = await server.ioredis();
    const gateway = new Gateway({ store: io, policy: policy(fresh(), '50ms'), logger: quiet });
    try {
      assert.equal((await gateway.decide(request('recovered'))).status, 200);
      // The loop stalls four store timeouts; the late tick runs, then this request.
      block(200);
      await new Promise((r) => setTimeout(r, 1));
      const after = await gateway.decide(request('recovered'));
      assert.equal(after.status, 200, after.body);
      assert.equal(sheds(gateway), 0);
    } finally {
      io.disconnect();
      await server.stop();
    }
  });

  test('lateness that began before the request arrived is not its overload', async () => {
    const server = await Server.start();
    const io = await server.ioredis();
    const admin = await server.ioredis();
    const gateway = new Gateway({ store: io, policy: policy(fresh(), '100ms'), logger: quiet });
    try {
      assert.equal((await gateway.decide(request('paused'))).status, 200);
      await admin.call('CLIENT', 'PAUSE', '800', 'WRITE');
      // The loop's tick is 50 ms overdue when the request arrives (a quarter of the deadline is
      // 25 ms), well short of two timeouts: the request is decided, its call sent, and the
      // paused store misses the deadline. The lateness is older than the request: a timeout.
      block(60);
      const decision = await gateway.decide(request('paused'));
      assert.equal(decision.status, 503);
      assert.match(JSON.parse(decision.body).detail, /^The rate limiter is unavailable; /);
      assert.equal(sheds(gateway), 0);
      assert.match(gateway.metrics.render(), /rl_gateway_store_call_duration_seconds_count\{result="timeout"\} 1\n/);
    } finally {
      await admin.call('CLIENT', 'UNPAUSE');
      io.disconnect();
      admin.disconnect();
      await server.stop();
    }
  });
});
