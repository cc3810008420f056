// Real servers for the tests: `$RL_SERVER` (default redis-server) with the module at
// `$RL_MODULE` (default the workspace's target/release/librl.so), each on its own loopback port
// and directory, killed when the test file ends. `RL_MODE=script` starts them without the module,
// so the client runs in script mode.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import Redis from 'ioredis';

const here = dirname(fileURLToPath(import.meta.url));
export const REPO = resolve(here, '../../../..');
export const MODULE = process.env.RL_MODULE ?? join(REPO, 'target/release/librl.so');
export const SERVER = process.env.RL_SERVER ?? 'redis-server';
export const SCRIPT_MODE = process.env.RL_MODE === 'script';
export const IS_VALKEY = SERVER.includes('valkey');

const live = new Set();
// A test file that ends without stopping its servers (a failed hook, an uncaught error) still
// takes them down.
process.on('exit', () => {
  for (const s of live) {
    s.child.kill('SIGKILL');
    rmSync(s.dir, { recursive: true, force: true });
  }
});

function portFree(port) {
  return new Promise((res) => {
    const srv = net.createServer();
    srv.once('error', () => res(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => res(true)));
  });
}

// A port below the ephemeral range whose cluster bus port (+10000) is free too.
export async function freePort() {
  for (;;) {
    const port = 12000 + Math.floor(Math.random() * 10000);
    if ((await portFree(port)) && (await portFree(port + 10000))) return port;
  }
}

function ping(port) {
  return new Promise((res) => {
    const sock = net.connect(port, '127.0.0.1');
    let data = '';
    sock.on('connect', () => sock.write('PING\r\n'));
    sock.on('data', (d) => {
      data += d;
      if (data.includes('\r\n')) {
        sock.destroy();
        res(data.startsWith('+PONG'));
      }
    });
    sock.on('error', () => res(false));
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export class Server {
  // `port`: the one to listen on (a gateway may already be trying it), else a free one.
  static async start(extra = [], { module = !SCRIPT_MODE, port: wanted } = {}) {
    for (let attempt = 0; ; attempt++) {
      const port = wanted ?? (await freePort());
      const dir = mkdtempSync(join(tmpdir(), 'rl-node-'));
      const args = ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no',
        '--enable-debug-command', 'yes', ...extra];
      if (module) args.push('--loadmodule', MODULE);
      const child = spawn(SERVER, args, { stdio: ['ignore', 'ignore', 'pipe'] });
      let stderr = '';
      child.stderr.on('data', (d) => { stderr += d; });
      const server = new Server(port, dir, child, args);
      live.add(server);
      const deadline = Date.now() + 10_000;
      while (Date.now() < deadline && child.exitCode === null) {
        // A PONG from a server that won the port race is not ours: ours must still be running.
        if ((await ping(port)) && child.exitCode === null && child.signalCode === null) return server;
        await sleep(20);
      }
      await server.stop();
      if (attempt >= 3) throw new Error(`${SERVER} did not start: ${stderr}`);
    }
  }

  constructor(port, dir, child, args) {
    Object.assign(this, { port, dir, child, args });
    this.url = `redis://127.0.0.1:${port}`;
  }

  // Kills the server for good (a dead store); `restart` brings one back on the same port.
  kill() {
    if (this.child.exitCode === null) this.child.kill('SIGKILL');
    live.delete(this);
  }

  async stop() {
    this.kill();
    await new Promise((r) => (this.child.exitCode !== null || this.child.signalCode ? r() : this.child.once('exit', r)));
    rmSync(this.dir, { recursive: true, force: true });
  }

  async restart() {
    this.kill();
    await new Promise((r) => (this.child.exitCode !== null || this.child.signalCode ? r() : this.child.once('exit', r)));
    this.child = spawn(SERVER, this.args, { stdio: 'ignore' });
    live.add(this);
    while (!(await ping(this.port))) await sleep(20);
  }

  // An ioredis client as a posture needs it (no offline queue, no retries), once connected.
  async ioredis(options = {}) {
    const client = new Redis({ port: this.port, host: '127.0.0.1', enableOfflineQueue: false, maxRetriesPerRequest: 0,
      ...options });
    client.on('error', () => {});
    await new Promise((r) => client.once('ready', r));
    return client;
  }
}

// Three primaries with the cluster's slots split between them.
export class Cluster {
  static async start() {
    const extra = ['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', '5000'];
    const nodes = [];
    for (let i = 0; i < 3; i++) nodes.push(await Server.start(extra));
    const admins = await Promise.all(nodes.map((n) => n.ioredis()));
    const ranges = [[0, 5460], [5461, 10922], [10923, 16383]];
    await Promise.all(admins.map((a, i) => a.call('CLUSTER', 'ADDSLOTSRANGE', ranges[i][0], ranges[i][1])));
    for (let i = 1; i < 3; i++) await admins[i].call('CLUSTER', 'MEET', '127.0.0.1', nodes[0].port);
    const deadline = Date.now() + 30_000;
    for (;;) {
      const states = await Promise.all(admins.map(async (a) => {
        const info = await a.call('CLUSTER', 'INFO');
        const slots = await a.call('CLUSTER', 'SLOTS');
        return info.includes('cluster_state:ok') && slots.length === 3;
      }));
      if (states.every(Boolean)) break;
      if (Date.now() > deadline) throw new Error('the cluster did not converge');
      await sleep(100);
    }
    admins.forEach((a) => a.disconnect());
    return Object.assign(new Cluster(), { nodes });
  }

  get startup() {
    return this.nodes.map((n) => ({ host: '127.0.0.1', port: n.port }));
  }

  async stop() {
    await Promise.all(this.nodes.map((n) => n.stop()));
  }
}

// A Sentinel (the server binary in --sentinel mode) watching `primary` as 'rl', quorum 1.
export class Sentinel {
  static NAME = 'rl';

  static async start(primary) {
    const port = await freePort();
    const dir = mkdtempSync(join(tmpdir(), 'rl-node-sentinel-'));
    const conf = join(dir, 'sentinel.conf');
    writeFileSync(conf, `port ${port}\nbind 127.0.0.1\ndir ${dir}\n`
      + `sentinel monitor ${Sentinel.NAME} 127.0.0.1 ${primary.port} 1\n`
      + `sentinel down-after-milliseconds ${Sentinel.NAME} 1000\n`);
    const child = spawn(SERVER, [conf, '--sentinel'], { stdio: 'ignore' });
    const sentinel = Object.assign(new Sentinel(), { port, dir, child });
    live.add(sentinel);
    const deadline = Date.now() + 20_000;
    while (!(await ping(port))) {
      if (Date.now() > deadline || child.exitCode !== null) throw new Error('the Sentinel did not start');
      await sleep(50);
    }
    return sentinel;
  }

  async stop() {
    live.delete(this);
    this.child.kill('SIGKILL');
    await new Promise((r) => (this.child.exitCode !== null || this.child.signalCode ? r() : this.child.once('exit', r)));
    rmSync(this.dir, { recursive: true, force: true });
  }
}
