// What the install tests share: a real redis-server with the module of dist/, processes killed
// when the test file ends, an environment without a Rust toolchain, a fresh clone of the
// repository, and the small ASGI app the Python tests serve through uvicorn.
import assert from 'node:assert/strict';
import { execFile, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
export const DIST = join(REPO, 'dist');
export const VERSION = readFileSync(join(REPO, 'VERSION'), 'utf8').trim();
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const exec = promisify(execFile);
// A command that must succeed; its output, with what it printed on failure.
export async function run(command, args, options = {}) {
  try {
    return await exec(command, args, { maxBuffer: 64 << 20, ...options });
  } catch (err) {
    throw new Error(`${command} ${args.join(' ')} failed (${err.code}):\n${err.stdout}\n${err.stderr}`);
  }
}

const scratch = new Set();
const children = new Set();
// Each process leads a group of its own, killed whole: a script's installer with it.
function kill(child) {
  try {
    process.kill(-child.pid, 'SIGKILL');
  } catch {
    // already gone
  }
}
process.on('exit', () => {
  for (const child of children) kill(child);
  for (const dir of scratch) rmSync(dir, { recursive: true, force: true });
});

// A directory removed when the test file ends.
export function tempDir(prefix) {
  const dir = mkdtempSync(join(tmpdir(), `rl-install-${prefix}-`));
  scratch.add(dir);
  return dir;
}

// A process killed when the test file ends; `output.text` collects what it prints on stdout and
// stderr, `waitFor(re, ms)` resolves with the first line that matches.
export function start(command, args, options = {}) {
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'], detached: true, ...options });
  children.add(child);
  child.on('exit', () => children.delete(child));
  const output = { text: '' };
  const waiters = [];
  const feed = (chunk) => {
    output.text += chunk;
    for (const w of [...waiters]) {
      const line = output.text.split('\n').find((l) => w.re.test(l));
      if (line !== undefined) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(line);
      }
    }
  };
  child.stdout.on('data', feed);
  child.stderr.on('data', feed);
  child.on('exit', (code) => {
    for (const w of waiters.splice(0)) w.reject(new Error(`${command} exited (${code}) before ${w.re}:\n${output.text}`));
  });
  return {
    child,
    output,
    waitFor(re, ms) {
      return new Promise((res, rej) => {
        const timer = setTimeout(() => rej(new Error(`${command}: no ${re} within ${ms} ms:\n${output.text}`)), ms);
        const w = { re, resolve: (l) => { clearTimeout(timer); res(l); }, reject: (e) => { clearTimeout(timer); rej(e); } };
        waiters.push(w);
        feed('');
      });
    },
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((r) => child.once('exit', r));
      kill(child);
      await exited;
    },
  };
}

function portFree(port) {
  return new Promise((res) => {
    const srv = net.createServer();
    srv.once('error', () => res(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => res(true)));
  });
}

export async function freePort() {
  for (;;) {
    const port = 20000 + Math.floor(Math.random() * 20000);
    if (await portFree(port)) return port;
  }
}

// redis-server from the PATH with dist/librl.so loaded.
export async function redisServer() {
  const module = join(DIST, 'librl.so');
  assert.ok(existsSync(module), `${module} is missing: run scripts/package first`);
  const port = await freePort();
  const dir = tempDir('redis');
  const server = start('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '',
    '--appendonly', 'no', '--loadmodule', module]);
  await server.waitFor(/Ready to accept connections/, 10_000);
  return { ...server, port, url: `redis://127.0.0.1:${port}` };
}

export async function redisCli(port, ...args) {
  const { stdout } = await run('redis-cli', ['-p', String(port), ...args]);
  return stdout.trim().split('\n');
}

// The environment with no Rust toolchain: every PATH entry holding cargo, rustc or rustup
// dropped, and cargo's and rustup's variables unset.
export function withoutRust(env = process.env) {
  const tools = ['cargo', 'rustc', 'rustup'];
  const path = (env.PATH ?? '').split(delimiter).filter((d) => d && !tools.some((t) => existsSync(join(d, t))));
  const clean = Object.fromEntries(Object.entries(env).filter(([k]) => !/^(CARGO|RUSTUP|RUSTC|RUST)(_|$)/.test(k)));
  clean.PATH = path.join(delimiter);
  const found = spawnSync('sh', ['-c', 'command -v cargo || command -v rustc'], { env: clean, encoding: 'utf8' });
  assert.notEqual(found.status, 0, `a Rust toolchain is still on the PATH: ${found.stdout}`);
  return clean;
}

// A fresh clone of the repository at its HEAD (what CI tests is committed; work not committed is
// not in it).
export async function freshClone() {
  const dir = join(tempDir('clone'), 'redis-rl');
  const { stdout: head } = await run('git', ['-C', REPO, 'rev-parse', 'HEAD']);
  await run('git', ['clone', '--quiet', '--no-checkout', REPO, dir]);
  await run('git', ['-C', dir, 'checkout', '--quiet', '--detach', head.trim()]);
  return dir;
}

export const POLICY = {
  version: 1,
  default: { rules: [] },
  identity: { user: 'x-user' },
  store: { timeout: '1s' },
  rules: { read: { key: 'install:${user}', limit: 2, period: '1h' } },
  routes: [{ method: 'GET', path: '/catalog', rules: ['read'] }],
};

// Until its store connection is up a gateway answers with the route's posture (deny: 503): the
// probe waits for the store's answer (200, or 429 once its own identity is spent).
export async function untilServing(url, within = 20_000) {
  const deadline = Date.now() + within;
  for (;;) {
    const probe = await fetch(url, { headers: { 'x-user': 'probe' } }).catch(() => null);
    if (probe?.status === 200 || probe?.status === 429) return;
    if (Date.now() > deadline) throw new Error(`${url} did not serve (${probe?.status})`);
    await sleep(100);
  }
}

// Three requests of one caller on the policy above: two admitted with the store's headers, the
// third refused; the store holds the caller's state.
export async function assertDecides(url, server, user) {
  const first = await fetch(url, { headers: { 'x-user': user } });
  assert.equal(first.status, 200);
  assert.equal(first.headers.get('ratelimit'), '"read";r=1;t=1800');
  assert.equal((await fetch(url, { headers: { 'x-user': user } })).status, 200);
  const third = await fetch(url, { headers: { 'x-user': user } });
  assert.equal(third.status, 429);
  assert.equal(third.headers.get('ratelimit'), '"read";r=0;t=1800');
  const keys = await redisCli(server.port, '--scan', '--pattern', `*install:${user}*`);
  assert.equal(keys.filter(Boolean).length, 1, `the store holds ${user}'s state: ${keys}`);
}

// The ASGI app of the Python README with the gateway in front, served by uvicorn from `venv`.
export async function serveAsgi(venv, server, env) {
  const dir = tempDir('asgi');
  writeFileSync(join(dir, 'policy.json'), JSON.stringify(POLICY));
  writeFileSync(join(dir, 'app.py'), [
    'import os',
    'import redis.asyncio',
    'from starlette.applications import Starlette',
    'from starlette.responses import JSONResponse',
    'from starlette.routing import Route',
    'from redis_rl import AsyncClient',
    'from redis_rl.gateway import Gateway, RateLimitMiddleware',
    '',
    'async def catalog(request):',
    '    return JSONResponse({"items": []})',
    '',
    'store = AsyncClient(redis.asyncio.Redis.from_url(os.environ["REDIS_URL"]))',
    'app = Starlette(routes=[Route("/catalog", catalog)])',
    'app.add_middleware(RateLimitMiddleware, gateway=Gateway(store, "policy.json"))',
    '',
  ].join('\n'));
  const port = await freePort();
  const app = start(join(venv, 'bin', 'python'), ['-m', 'uvicorn', 'app:app', '--host', '127.0.0.1', '--port', String(port),
    '--no-proxy-headers'], { cwd: dir, env: { ...env, REDIS_URL: server.url } });
  await app.waitFor(/Uvicorn running on/, 30_000);
  const url = `http://127.0.0.1:${port}/catalog`;
  await untilServing(url);
  return { ...app, url };
}
