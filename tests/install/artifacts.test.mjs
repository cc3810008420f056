// The release artifacts of scripts/package (dist/), installed as a user installs them, in an
// environment with no Rust toolchain on the PATH, each making one real decision against a real
// server: the Python wheels through the ASGI gateway, the npm packages through the express
// gateway, rl-gateway proxying a request, and the module answering RL.ADMIT.
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import {
  assertDecides, DIST, freePort, POLICY, REPO, redisCli, redisServer, run, serveAsgi, start, tempDir, untilServing,
  VERSION, withoutRust,
} from './support.mjs';

let server;
let env;
before(async () => {
  env = withoutRust();
  server = await redisServer();
});
after(() => server?.stop());

describe('the release artifacts, with no Rust toolchain', () => {
  test('dist/ holds every artifact of this version', () => {
    const files = readdirSync(DIST).sort();
    for (const name of [`redis_rl-${VERSION}-py3-none-any.whl`, `redis_rl-${VERSION}.tar.gz`,
      `redis_rl_engine-${VERSION}-cp39-abi3-manylinux_2_34_x86_64.whl`,
      `redis-rl-${VERSION}.tgz`, `redis-rl-linux-x64-gnu-${VERSION}.tgz`, 'rl-gateway', 'librl.so', 'SHA256SUMS']) {
      assert.ok(files.includes(name), `${name} in ${files.join(', ')}`);
    }
  });

  test('redis-server --loadmodule dist/librl.so answers RL.ADMIT', async () => {
    // The top README's example: 20 at once, then 2 a second.
    assert.deepEqual(await redisCli(server.port, 'RL.ADMIT', 'user:17', '2', '1s', 'BURST', '20'), ['1', '19', '0', '500', '20']);
    assert.ok((await redisCli(server.port, 'MODULE', 'LIST')).includes('rl'));
  });

  test("pip install --find-links dist 'redis-rl[gateway]': the ASGI gateway decides", async () => {
    const venv = join(tempDir('venv'), 'venv');
    await run('python3', ['-m', 'venv', venv], { env });
    await run(join(venv, 'bin', 'pip'), ['install', '-q', '--disable-pip-version-check', '--find-links', DIST,
      `redis-rl[gateway]==${VERSION}`, 'uvicorn>=0.23'], { env });
    // The engine is the wheel of dist/ (with no cargo, its sdist could not have been built).
    const { stdout } = await run(join(venv, 'bin', 'python'), ['-c',
      "from importlib.metadata import distribution as d; print(d('redis-rl-engine').read_text('WHEEL'))"], { env });
    assert.match(stdout, /^Tag: cp39-abi3-manylinux_2_34_x86_64$/m);
    const app = await serveAsgi(venv, server, env);
    try {
      await assertDecides(app.url, server, 'py');
    } finally {
      await app.stop();
    }
  });

  test('npm install dist/*.tgz: the addon comes from its platform package, the express gateway decides', async () => {
    const dir = tempDir('npm');
    writeFileSync(join(dir, 'package.json'), '{"name": "app", "private": true}');
    const tarballs = readdirSync(DIST).filter((f) => f.endsWith('.tgz')).map((f) => join(DIST, f));
    await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error', ...tarballs,
      'express', 'ioredis'], { cwd: dir, env });
    const installed = join(dir, 'node_modules');
    assert.ok(existsSync(join(installed, 'redis-rl-linux-x64-gnu', 'redis-rl.linux-x64-gnu.node')));
    assert.ok(!existsSync(join(installed, 'redis-rl', 'native', 'redis-rl.linux-x64-gnu.node')));
    const manifest = JSON.parse(readFileSync(join(installed, 'redis-rl', 'package.json'), 'utf8'));
    assert.deepEqual(manifest.optionalDependencies, { 'redis-rl-linux-x64-gnu': VERSION });

    // The README's ten-line gateway, verbatim.
    const readme = readFileSync(join(REPO, 'clients/node/README.md'), 'utf8');
    const block = /<!-- tests\/package.test.js runs this block verbatim -->\n```js\n([\s\S]*?)```/.exec(readme)[1];
    writeFileSync(join(dir, 'app.mjs'), block);
    writeFileSync(join(dir, 'policy.json'), JSON.stringify(POLICY));
    const port = await freePort();
    const app = start('node', ['app.mjs'], { cwd: dir, env: { ...env, REDIS_URL: server.url, PORT: String(port) } });
    try {
      const url = `http://127.0.0.1:${port}/catalog`;
      await untilServing(url);
      await assertDecides(url, server, 'node');
    } finally {
      await app.stop();
    }

    // The CommonJS build (what Node before 20.19 loads for `require`) reaches the addon too.
    const cjs = join(installed, 'redis-rl', 'dist', 'index.cjs');
    const { stdout } = await run('node', ['-e', `
      const { Gateway, RL } = require(${JSON.stringify(cjs)});
      const Redis = require('ioredis');
      const store = new Redis({ lazyConnect: true });
      const g = new Gateway({ store, policy: ${JSON.stringify(JSON.stringify(POLICY))} });
      store.disconnect();
      console.log(typeof RL, g.constructor.name);`], { cwd: dir, env });
    assert.equal(stdout.trim().split('\n').at(-1), 'function Gateway');
  });

  test('dist/rl-gateway --store memory:// proxies a request and refuses past the limit', async () => {
    const upstream = http.createServer((req, res) => res.end(`upstream saw ${req.url}`));
    await new Promise((r) => upstream.listen(0, '127.0.0.1', r));
    const dir = tempDir('gateway');
    const policy = join(dir, 'policy.json');
    writeFileSync(policy, JSON.stringify({ ...POLICY, routes: [{ method: 'GET', path: '/orders/{id}', rules: ['read'] }] }));
    const gateway = start(join(DIST, 'rl-gateway'), ['--policy', policy, '--store', 'memory://', '--listen', '127.0.0.1:0',
      '--upstream', `http://127.0.0.1:${upstream.address().port}`], { env });
    try {
      const line = await gateway.waitFor(/^listening on \S+ \(proxy\)$/, 10_000);
      const base = `http://${line.split(' ')[2]}`;
      const first = await fetch(`${base}/orders/7`, { headers: { 'x-user': 'ann' } });
      assert.equal(first.status, 200);
      assert.equal(await first.text(), 'upstream saw /orders/7');
      assert.equal(first.headers.get('ratelimit'), '"read";r=1;t=1800');
      assert.equal((await fetch(`${base}/orders/8`, { headers: { 'x-user': 'ann' } })).status, 200);
      const third = await fetch(`${base}/orders/9`, { headers: { 'x-user': 'ann' } });
      assert.equal(third.status, 429);
      assert.equal(third.headers.get('content-type'), 'application/problem+json');
    } finally {
      await gateway.stop();
      upstream.close();
    }
  });
});
