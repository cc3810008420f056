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

  // Following cannot be steered around (clients/CONTRACT.md section 11): entries written into
  // Redis by hand, as an attacker or a mistaken script would.
  const BOUND = 8 << 20; // MAX_DOCUMENT_BYTES
  const writeEntry = async (key, versionField, document, at = Date.now()) => {
    await io.hset(key, { version: versionField, published_by: 'by-hand', published_at_ms: at, document });
    await io.publish(key, String(versionField));
  };
  const rejected = (gateway) => {
    const line = gateway.metrics.render().split('\n').find((l) => l.startsWith('rl_gateway_policy_rejected_total '));
    return line === undefined ? null : Number(line.split(' ')[1]);
  };
  // A logger that keeps the warnings.
  const recording = () => {
    const warnings = [];
    return { warnings, info() {}, error() {}, warn: (m) => warnings.push(m) };
  };
  const refusals = (logger) => logger.warnings.filter((m) => m.includes('is refused'));
  const sent = async () => Number(/total_net_output_bytes:(\d+)/.exec(await io.info('stats'))[1]);
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  test('refuses an entry whose version field disagrees with its document', async () => {
    const key = 'rl:policy:disagree';
    await publish(1, key);
    const published = new PublishedPolicy(io, { key, pollMs: 50, logger: quiet });
    const gateway = new Gateway({ store: new RL(io, { logger: quiet }), policy: await published.load(), logger: quiet });
    published.follow(gateway);
    try {
      assert.equal(rejected(gateway), 0);
      // The field claims 9, the document is version 5: never in force.
      await writeEntry(key, 9, JSON.stringify(policy(5)));
      await eventually(() => rejected(gateway) === 1);
      // The field claims less than the document: refused too.
      await writeEntry(key, 3, JSON.stringify(policy(900)));
      await eventually(() => rejected(gateway) === 2);
      assert.equal(gateway.policy.version, 1);
      // A correct entry is followed as ever.
      await publish(2, key);
      await eventually(() => gateway.policy.version === 2);
    } finally {
      await published.stop();
    }
  });

  test('a start with a good cache uses it, whatever the store holds', async () => {
    const key = 'rl:policy:restart';
    await publish(4, key);
    const cache = join(mkdtempSync(join(tmpdir(), 'rl-pub-')), 'policy.json');
    await new PublishedPolicy(io, { key, cache, logger: quiet }).load();
    const held = [
      [5, JSON.stringify({ version: 5, routes: [] })],
      [9, JSON.stringify(policy(6))],
      [7, JSON.stringify({ version: 7, pad: 'x'.repeat(BOUND) })],
    ];
    for (const [field, document] of held) {
      await writeEntry(key, field, document);
      const logger = recording();
      const published = new PublishedPolicy(io, { key, cache, pollMs: 3_600_000, logger });
      const text = await published.load();
      assert.equal(JSON.parse(text).version, 4);
      const gateway = new Gateway({ store: new RL(io, { logger: quiet }), policy: text, logger: quiet });
      published.follow(gateway);
      await published.stop();
      assert.equal(rejected(gateway), 1);
      assert.equal(refusals(logger).length, 1, refusals(logger).join('\n'));
    }
    // Without a cache to start on, a refused entry is a refusal to start, saying why.
    await assert.rejects(new PublishedPolicy(io, { key, logger: quiet }).load(),
      (err) => err instanceof PolicyError && /is refused.*and no cache holds/.test(err.message));
  });

  test('reads a document only when it changed, and never past the bound', async () => {
    const key = 'rl:policy:large';
    await publish(1, key);
    const published = new PublishedPolicy(io, { key, pollMs: 20, logger: quiet });
    const gateway = new Gateway({ store: new RL(io, { logger: quiet }), policy: await published.load(), logger: quiet });
    published.follow(gateway);
    try {
      // Past the bound: refused by its length, never read.
      let before = await sent();
      await writeEntry(key, 2, JSON.stringify({ version: 2, pad: 'x'.repeat(BOUND + 1024) }));
      await eventually(() => rejected(gateway) === 1);
      await sleep(1000);
      assert.ok((await sent()) - before < 1 << 20);
      // Under the bound but invalid: read once, not at each of some fifty polls.
      before = await sent();
      await writeEntry(key, 3, JSON.stringify({ version: 3, routes: [], pad: 'x'.repeat(1 << 20) }));
      await eventually(() => rejected(gateway) === 2);
      await sleep(1000);
      const read = (await sent()) - before;
      assert.ok(read >= 1 << 20 && read < 2 << 20, `${read} bytes sent for one read of a 1 MiB document`);
      assert.equal(gateway.policy.version, 1);
    } finally {
      await published.stop();
    }
  });

  test('logs and counts every distinct refused document once', async () => {
    const key = 'rl:policy:distinct';
    await publish(1, key);
    const logger = recording();
    const published = new PublishedPolicy(io, { key, pollMs: 20, logger });
    const gateway = new Gateway({ store: new RL(io, { logger: quiet }), policy: await published.load(), logger: quiet });
    published.follow(gateway);
    try {
      const first = JSON.stringify({ version: 2, routes: [] });
      const second = JSON.stringify({ version: 3, rules: {} });
      const at = Date.now();
      await writeEntry(key, 2, first, at);
      await eventually(() => rejected(gateway) === 1);
      await writeEntry(key, 3, second, at);
      await eventually(() => rejected(gateway) === 2);
      // The first again, exactly: the same document, neither logged nor counted twice.
      await writeEntry(key, 2, first, at);
      await sleep(500);
      assert.equal(rejected(gateway), 2);
      assert.equal(gateway.policy.version, 1);
      const logged = refusals(logger);
      assert.equal(logged.length, 2, logged.join('\n'));
      assert.ok(logged[0].includes('version 2') && logged[1].includes('version 3'), logged.join('\n'));
    } finally {
      await published.stop();
    }
  });
});
