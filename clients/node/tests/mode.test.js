// Script mode (clients/SPEC.md section 5): the mode is detected with COMMAND INFO RL.ADMIT,
// logged once per change and exposed as a gauge; NOSCRIPT loads the shipped script again.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Gateway, RL, commands } from '../src/index.js';
import { MODULE, Server } from './support/server.js';

let plain;
let withModule;
before(async () => {
  plain = await Server.start([], { module: false });
  withModule = await Server.start([], { module: true });
});
after(async () => {
  await plain.stop();
  await withModule.stop();
});

const recorder = () => {
  const lines = [];
  return { lines, info: (m) => lines.push(m), warn() {}, error() {} };
};

describe('store mode', () => {
  test('a server without the module runs the script, logged once', async () => {
    const io = await plain.ioredis();
    const logger = recorder();
    const modes = [];
    const rl = new RL(io, { logger, onMode: (m) => modes.push(m) });
    try {
      const d = await rl.admit({ key: 'm:k', limit: 2, period: 1000, burst: 20 });
      assert.deepEqual([d.allowed, d.remaining, d.capacity], [true, 19, 20]);
      await rl.admit({ key: 'm:k', limit: 2, period: 1000, burst: 20 });
      assert.equal(rl.mode, 'script');
      assert.deepEqual(logger.lines, ['redis-rl: store mode script']);
      assert.deepEqual(modes, ['script']);
      // The script's keys are plain Redis types.
      assert.notEqual(await io.type('m:k'), 'rllimiter');
    } finally {
      io.disconnect();
    }
  });

  test('after SCRIPT FLUSH the script is loaded again and the call retried once', async () => {
    const io = await plain.ioredis();
    const rl = new RL(io, { logger: recorder() });
    try {
      await rl.info('m:none');
      await io.call('SCRIPT', 'FLUSH');
      assert.equal(await rl.info('m:none'), null);
      assert.equal(rl.mode, 'script');
    } finally {
      io.disconnect();
    }
  });

  test('a NOSCRIPT from a server that loaded the module since moves the client to module mode', async () => {
    const server = await Server.start(['--enable-module-command', 'yes'], { module: false });
    const io = await server.ioredis();
    const logger = recorder();
    const rl = new RL(io, { logger });
    try {
      await rl.admit({ key: 'm:moving', limit: 5, period: 3_600_000 });
      assert.equal(rl.mode, 'script');
      await io.call('MODULE', 'LOAD', MODULE);
      await io.call('SCRIPT', 'FLUSH');
      const d = await rl.admit({ key: 'm:native', limit: 5, period: 3_600_000 });
      assert.equal(d.remaining, 4);
      assert.equal(rl.mode, 'module');
      assert.equal(await io.type('m:native'), 'rllimiter');
      assert.deepEqual(logger.lines, ['redis-rl: store mode script', 'redis-rl: store mode module']);
    } finally {
      io.disconnect();
      await server.stop();
    }
  });

  test('a server that lost the module answers unknown command, and the same call goes through the script', async () => {
    const server = await Server.start([], { module: true });
    const io = await server.ioredis();
    const rl = new RL(io, { logger: recorder() });
    try {
      assert.equal((await rl.admit({ key: 'm:a', limit: 5, period: 3_600_000 })).remaining, 4);
      assert.equal(rl.mode, 'module');
      const at = server.args.indexOf('--loadmodule');
      server.args.splice(at, 2);
      const ready = new Promise((r) => io.once('ready', r));
      await server.restart();
      await ready;
      const d = await rl.admit({ key: 'm:b', limit: 5, period: 3_600_000 });
      assert.deepEqual([d.allowed, d.remaining], [true, 4]);
      assert.equal(rl.mode, 'script');
    } finally {
      io.disconnect();
      await server.stop();
    }
  });

  test('the script refusing a command is no change of mode', async () => {
    const io = await plain.ioredis();
    const rl = new RL(io, { logger: recorder() });
    const probes = async () => Number(/cmdstat_command\|info:calls=(\d+)/.exec(await io.info('commandstats'))?.[1] ?? 0);
    try {
      await rl.admit({ key: 'm:t', limit: 5, period: 3_600_000 });
      const before = await probes();
      await assert.rejects(rl.throttle('m:t2', 10, 1, 60), /for rl\.lua/);
      assert.equal(rl.mode, 'script');
      await rl.admit({ key: 'm:t', limit: 5, period: 3_600_000 });
      assert.equal(await probes(), before, 'no COMMAND INFO was sent again');
    } finally {
      io.disconnect();
    }
  });

  test('a call whose caller gave up sends nothing more after NOSCRIPT', async () => {
    const io = await plain.ioredis();
    const rl = new RL(io, { logger: recorder() });
    const loads = async () => Number(/cmdstat_script\|load:calls=(\d+)/.exec(await io.info('commandstats'))?.[1] ?? 0);
    try {
      await rl.admit({ key: 'm:c', limit: 5, period: 3_600_000 });
      await io.call('SCRIPT', 'FLUSH');
      const before = await loads();
      const cancel = { cancelled: true };
      await assert.rejects(rl.execute(commands.admit({ key: 'm:c', limit: 5, period: 3_600_000 }), { cancel }), /deadline/);
      assert.equal(await loads(), before, 'no SCRIPT LOAD after the caller gave up');
      // Nothing was spent by the abandoned call.
      assert.equal((await rl.admit({ key: 'm:c', limit: 5, period: 3_600_000 })).remaining, 3);
    } finally {
      io.disconnect();
    }
  });

  test('the gateway exposes the mode as rl_gateway_store_mode', async () => {
    for (const [server, mode] of [[plain, 'script'], [withModule, 'module']]) {
      const io = await server.ioredis();
      const gw = new Gateway({ store: io, logger: recorder(), policy: {
        version: 1, default: { rules: [] }, store: { timeout: '1s' }, rules: { a: { key: 'mode:a', limit: 5, period: '1h' } }, routes: [{ method: 'GET', path: '/', rules: ['a'] }] } });
      try {
        const d = await gw.decide({ method: 'GET', path: '/', headers: {}, peer: '127.0.0.1' });
        assert.equal(d.status, 200);
        const text = gw.metrics.render();
        assert.match(text, new RegExp(`rl_gateway_store_mode\\{mode="${mode}"\\} 1\\n`));
        assert.match(text, new RegExp(`rl_gateway_store_mode\\{mode="${mode === 'module' ? 'script' : 'module'}"\\} 0\\n`));
      } finally {
        io.disconnect();
      }
    }
  });
});
