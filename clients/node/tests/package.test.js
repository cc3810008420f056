// The package as users get it: the CommonJS build (made at pack time) exports what the ESM source
// does, the declarations compile, `npm install ./clients/node` brings the script along, the pure
// parts run without the native engine, and the README's gateway runs verbatim.
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { after, describe, test } from 'node:test';
import * as esm from '../src/index.js';
import { Server } from './support/server.js';

const run = promisify(execFile);
const PKG = join(dirname(fileURLToPath(import.meta.url)), '..');
const bin = (name) => join(PKG, 'node_modules', '.bin', name);

const children = new Set();
after(() => {
  for (const c of children) c.kill('SIGKILL');
});

describe('the package', () => {
  test('the CommonJS build (npm run build, which npm pack runs) exports what the ESM source does', async () => {
    await run('npm', ['run', '--silent', 'build'], { cwd: PKG });
    const cjs = createRequire(import.meta.url)('../dist/index.cjs');
    assert.deepEqual(Object.keys(cjs).sort(), Object.keys(esm).sort());
    assert.equal(cjs.SCRIPT_PATH, esm.SCRIPT_PATH);
  });

  test('the TypeScript declarations compile against a usage sample', async () => {
    await run(bin('tsc'), ['-p', join(PKG, 'tests/types')], { cwd: PKG });
  });

  test('every export is declared in index.d.ts', () => {
    const dts = readFileSync(join(PKG, 'index.d.ts'), 'utf8');
    const declared = new Set([...dts.matchAll(/^export (?:class|function|const|namespace) (\w+)/gm)].map((m) => m[1]));
    assert.deepEqual(Object.keys(esm).filter((name) => !declared.has(name)), []);
  });

  test('npm install ./clients/node: ESM and CommonJS imports, and the script', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'rl-install-'));
    try {
      writeFileSync(join(dir, 'package.json'), '{"name": "scratch", "private": true}');
      await run('npm', ['install', '--offline', '--no-audit', '--no-fund', '--loglevel=error', PKG], { cwd: dir });
      const { stdout } = await run('node', ['--input-type=module', '-e',
        "import { RL, SCRIPT_PATH } from 'redis-rl'; import { createRequire } from 'node:module';"
        + "const cjs = createRequire(process.cwd() + '/').call(null, 'redis-rl');"
        + "console.log(typeof RL, typeof cjs.RL, SCRIPT_PATH === cjs.SCRIPT_PATH, SCRIPT_PATH);"], { cwd: dir });
      const [esmType, cjsType, same, script] = stdout.trim().split(' ');
      assert.deepEqual([esmType, cjsType, same], ['function', 'function', 'true']);
      assert.ok(existsSync(script), script);
      assert.match(readFileSync(script, 'utf8'), /RL\.ADMIT/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('the pure parts work without the native engine; the gateway says what is missing', async () => {
    // The package's JavaScript without native/ (as on a platform with no prebuilt addon).
    const dir = mkdtempSync(join(tmpdir(), 'rl-pure-'));
    const server = await Server.start();
    try {
      cpSync(join(PKG, 'src'), join(dir, 'src'), { recursive: true });
      cpSync(join(PKG, 'package.json'), join(dir, 'package.json'));
      cpSync(join(PKG, '..', 'scripts', 'rl.lua'), join(dir, 'rl.lua'));
      symlinkSync(join(PKG, 'node_modules'), join(dir, 'node_modules'));
      const { stdout } = await run('node', ['--input-type=module', '-e', `
        import Redis from 'ioredis';
        import { Gateway, RateLimiterRL, RL, RLStore } from './src/index.js';
        const io = new Redis(${server.port}, '127.0.0.1');
        const rl = new RL(io);
        const a = await rl.admit({ key: 'pure:a', limit: 5, period: 60000 });
        const store = new RLStore({ client: rl });
        store.init({ windowMs: 60000, limit: 3 });
        const hit = await store.increment('b');
        const flexible = await new RateLimiterRL({ storeClient: io, points: 2, duration: 60 }).consume('c');
        let gateway;
        try { new Gateway({ store: io, policy: { version: 1, default: { rules: [] }, rules: {}, routes: [] } }); gateway = 'built'; }
        catch (err) { gateway = err.message; }
        io.disconnect();
        console.log(JSON.stringify([a.remaining, hit.totalHits, flexible.remainingPoints, gateway]));`], { cwd: dir });
      // The last line: the client may log a line of its own first (the mode it detected).
      const [remaining, hits, points, gateway] = JSON.parse(stdout.trim().split('\n').at(-1));
      assert.deepEqual([remaining, hits, points], [4, 1, 1]);
      assert.match(gateway, /^redis-rl: the gateway's native engine is not installed for \S+ \(tried .*native\/redis-rl\./);
      // A copy without native/'s source: a prebuilt package, or the package from its repository.
      assert.match(gateway, /npm install redis-rl-\S+\), or install redis-rl from its repository with Rust/);
    } finally {
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('npm pack carries the script', async () => {
    const { stdout } = await run('npm', ['pack', '--dry-run', '--json', '--loglevel=error'], { cwd: PKG });
    const files = JSON.parse(stdout)[0].files.map((f) => f.path);
    for (const f of ['rl.lua', 'index.d.ts', 'dist/index.cjs', 'src/index.js']) assert.ok(files.includes(f), f);
    assert.ok(!existsSync(join(PKG, 'rl.lua')), 'postpack removes the copy');
  });

  test("the README's gateway runs verbatim", async () => {
    const readme = readFileSync(join(PKG, 'README.md'), 'utf8');
    const block = /<!-- tests\/package.test.js runs this block verbatim -->\n```js\n([\s\S]*?)```/.exec(readme)[1];
    assert.ok(block.split('\n').filter(Boolean).length <= 11, 'a ten-line app');
    const server = await Server.start();
    // Inside the package, `redis-rl` resolves to itself and express and ioredis to its own.
    const dir = mkdtempSync(join(PKG, '.scratch-'));
    try {
      writeFileSync(join(dir, 'app.mjs'), block);
      writeFileSync(join(dir, 'policy.json'), JSON.stringify({ version: 1, default: { rules: [] }, identity: { user: 'x-user' }, store: { timeout: '1s' },
        rules: { read: { key: 'readme:${user}', limit: 2, period: '1h' } },
        routes: [{ method: 'GET', path: '/catalog', rules: ['read'] }] }));
      const port = 20000 + Math.floor(Math.random() * 10000);
      const child = spawn('node', ['app.mjs'], { cwd: dir, env: { ...process.env, REDIS_URL: server.url, PORT: String(port) },
        stdio: 'ignore' });
      children.add(child);
      const url = `http://127.0.0.1:${port}/catalog`;
      const deadline = Date.now() + 10_000;
      // Until its connection is up, the app answers with the route's posture (deny: 503).
      for (;;) {
        const probe = await fetch(url, { headers: { 'x-user': 'probe' } }).catch(() => null);
        if (probe?.status === 200) break;
        if (Date.now() > deadline) throw new Error(`the README app did not start (${probe?.status})`);
        await new Promise((r) => setTimeout(r, 50));
      }
      const first = await fetch(url, { headers: { 'x-user': 'r' } });
      assert.equal(first.status, 200);
      assert.equal(first.headers.get('ratelimit'), '"read";r=1;t=1800');
      assert.equal((await fetch(url, { headers: { 'x-user': 'r' } })).status, 200);
      assert.equal((await fetch(url, { headers: { 'x-user': 'r' } })).status, 429);
      child.kill('SIGKILL');
    } finally {
      rmSync(dir, { recursive: true, force: true });
      await server.stop();
    }
  });
});
