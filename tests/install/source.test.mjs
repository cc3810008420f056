// A fresh clone of the repository, used as its READMEs print: the two example gateways with no
// variable set (each installs what it needs on its first run, and nothing on the next), `npm
// install <clone>/clients/node` in a fresh folder (with Rust, and without it and with no prebuilt
// addon), and `pip install './clients/python[gateway]'`; each makes real decisions against a real
// server. The engine compiles in the repository's target/ (CARGO_TARGET_DIR, as the READMEs
// say, chooses where cargo compiles): the dependencies are shared, the clone's crates build once.
import assert from 'node:assert/strict';
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import {
  assertDecides, freePort, freshClone, POLICY, REPO, redisServer, run, serveAsgi, sleep, start, tempDir, untilServing,
  withoutRust,
} from './support.mjs';

let server;
let clone;
// The user's environment: nothing of the tests' own (the clients' suites set NORTHSTAR_VENV).
const env = { ...process.env, CARGO_TARGET_DIR: process.env.CARGO_TARGET_DIR ?? join(REPO, 'target') };
delete env.NORTHSTAR_VENV;

before(async () => {
  server = await redisServer();
  clone = await freshClone();
});
after(() => server?.stop());

// The example gateway, run as the README prints it, with this test's server and port: its
// /catalog route is decided by the store (until the connection is up, and while the machine is
// too busy for the policy's 50 ms store timeout, the route's posture answers 503).
async function northstar(script, policy, within) {
  const port = await freePort();
  const gateway = start(join(clone, script), ['--redis', server.url, '--listen', `127.0.0.1:${port}`,
    '--policy', join(clone, policy)], { cwd: clone, env });
  try {
    await gateway.waitFor(/^listening on /, within);
    const headers = { 'x-user': 'northstar', 'x-tenant': 'northstar' };
    const deadline = Date.now() + 20_000;
    let r = await fetch(`http://127.0.0.1:${port}/catalog`, { headers });
    while (r.status === 503 && Date.now() < deadline) {
      await sleep(100);
      r = await fetch(`http://127.0.0.1:${port}/catalog`, { headers });
    }
    assert.equal(r.status, 200, gateway.output.text);
    assert.match(r.headers.get('ratelimit') ?? '', /"read";r=\d+;t=\d+/);
  } finally {
    await gateway.stop();
  }
  return gateway.output.text;
}

const mtime = (path) => statSync(path).mtimeMs;

describe('a fresh clone, as the READMEs print it', () => {
  test('npm install <clone>/clients/node without Rust and without a prebuilt addon says what to do', async () => {
    const dir = tempDir('npm-norust');
    writeFileSync(join(dir, 'package.json'), '{"name": "app", "private": true, "type": "module"}');
    const bare = withoutRust(env);
    // npm shows a dependency's script output only when it fails: the install goes on (exit 0), and
    // the gateway says what to do when it is made.
    await run('npm', ['install', '--no-audit', '--no-fund', join(clone, 'clients/node')], { cwd: dir, env: bare });
    const { stdout } = await run('node', ['--input-type=module', '-e', `
      import { Gateway, RL } from 'redis-rl';
      try { new Gateway({ store: null, policy: '{}' }); console.log('built'); } catch (err) { console.log(typeof RL, err.message); }`],
    { cwd: dir, env: bare });
    assert.match(stdout, /^function redis-rl: the gateway's native engine is not installed for linux-x64-gnu /);
    assert.match(stdout, /install the prebuilt package \(npm install redis-rl-linux-x64-gnu\), or build it with Rust \(https:\/\/rustup\.rs\): npm run build:native in \S+clients\/node$/m);
  });

  test('npm install <clone>/clients/node builds the addon with cargo alone; the README gateway decides', async () => {
    const dir = tempDir('npm-link');
    writeFileSync(join(dir, 'package.json'), '{"name": "app", "private": true}');
    // The README's two lines: the package, then what its examples use beside it.
    await run('npm', ['install', '--no-audit', '--no-fund', '--loglevel=error', join(clone, 'clients/node')], { cwd: dir, env });
    await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error', 'express', 'ioredis'],
      { cwd: dir, env });
    const readme = readFileSync(join(clone, 'clients/node/README.md'), 'utf8');
    const block = /<!-- tests\/package.test.js runs this block verbatim -->\n```js\n([\s\S]*?)```/.exec(readme)[1];
    writeFileSync(join(dir, 'app.mjs'), block);
    writeFileSync(join(dir, 'policy.json'), JSON.stringify(POLICY));
    const port = await freePort();
    const app = start('node', ['app.mjs'], { cwd: dir, env: { ...env, REDIS_URL: server.url, PORT: String(port) } });
    try {
      const url = `http://127.0.0.1:${port}/catalog`;
      await untilServing(url);
      await assertDecides(url, server, 'linked');
    } finally {
      await app.stop();
    }
  });

  test("pip install './clients/python[gateway]' builds the engine from the clone; the ASGI gateway decides", async () => {
    const venv = join(tempDir('venv'), 'venv');
    await run('python3', ['-m', 'venv', venv], { env });
    await run(join(venv, 'bin', 'pip'), ['install', '-q', '--disable-pip-version-check', './clients/python[gateway]',
      'uvicorn>=0.23'], { cwd: clone, env });
    const app = await serveAsgi(venv, server, env);
    try {
      await assertDecides(app.url, server, 'source');
    } finally {
      await app.stop();
    }
  });

  test('clients/python/northstar installs its environment once, then serves at once', async () => {
    const first = await northstar('clients/python/northstar', 'clients/python/northstar.policy.json', 600_000);
    assert.match(first, /northstar: installing the package, its engine \(compiled once\) and uvicorn/);
    const venv = join(clone, 'clients/python/.northstar-venv');
    const installed = mtime(join(venv, '.installed'));
    const second = await northstar('clients/python/northstar', 'clients/python/northstar.policy.json', 30_000);
    assert.doesNotMatch(second, /installing/);
    assert.equal(mtime(join(venv, '.installed')), installed, 'nothing installed on the second run');
  });

  test('clients/node/northstar installs its dependencies and addon once, then serves at once', async () => {
    const node = join(clone, 'clients/node');
    const first = await northstar('clients/node/northstar', 'clients/node/northstar.policy.json', 600_000);
    const stamp = mtime(join(node, 'node_modules/.package-lock.json'));
    const addon = mtime(join(node, 'native/redis-rl.linux-x64-gnu.node'));
    const second = await northstar('clients/node/northstar', 'clients/node/northstar.policy.json', 30_000);
    assert.equal(mtime(join(node, 'node_modules/.package-lock.json')), stamp, `npm ci ran again:\n${second}`);
    assert.equal(mtime(join(node, 'native/redis-rl.linux-x64-gnu.node')), addon, 'the addon was built again');
    assert.match(first, /^listening on /m);
  });
});
