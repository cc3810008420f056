// The middleware against a plain express app, and RLStore against rate-limit-redis, on one
// server with the module: requests per second and latency percentiles from autocannon, each app
// in a process of its own, the variants interleaved over several rounds and the median kept
// (the machine is shared); then one request at a time on one keep-alive connection, timed to the
// microsecond, for the latency each variant adds without queueing.
// node benches/run.js [seconds per run, default 5] [rounds, default 3]; RL_BENCH_BEFORE=<another
// copy's src/index.js> adds its gateway and its RLStore (benches/README.md).
import { spawn } from 'node:child_process';
import http from 'node:http';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import { freePort, Server, SERVER } from '../tests/support/server.js';

const here = dirname(fileURLToPath(import.meta.url));
const seconds = Number(process.argv[2] ?? 5);
const rounds = Number(process.argv[3] ?? 3);
const VARIANTS = ['plain', 'gateway-1', 'gateway-3', 'rate-limit-redis', 'rlstore',
  ...(process.env.RL_BENCH_BEFORE ? ['before-gateway-1', 'before-gateway-3', 'before-rlstore'] : [])];

const HEADERS = { 'x-user': 'u1', 'x-tenant': 't1' };
const SEQUENTIAL = 2000;

// One request at a time: each one's time from sending to the end of its body, in µs.
async function sequential(port) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const one = () => new Promise((resolve, reject) => {
    const started = process.hrtime.bigint();
    http.get({ host: '127.0.0.1', port, path: '/', headers: HEADERS, agent }, (res) => {
      res.resume();
      res.on('end', () => resolve(Number(process.hrtime.bigint() - started) / 1000));
    }).on('error', reject);
  });
  for (let i = 0; i < 200; i++) await one();
  const times = [];
  for (let i = 0; i < SEQUENTIAL; i++) times.push(await one());
  agent.destroy();
  times.sort((a, b) => a - b);
  return { p50: times[Math.floor(times.length / 2)], p99: times[Math.floor(times.length * 0.99)] };
}

async function measure(variant, redisPort) {
  const port = await freePort();
  const child = spawn('node', [join(here, 'app.js'), variant, String(port), String(redisPort)], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise((r) => child.stdout.once('data', r));
  const opts = { url: `http://127.0.0.1:${port}/`, connections: 16, headers: HEADERS };
  await autocannon({ ...opts, duration: 1 });
  const r = await autocannon({ ...opts, duration: seconds });
  const one = await sequential(port);
  child.kill();
  return { variant, rps: r.requests.average, p50: r.latency.p50, p99: r.latency.p99, non2xx: r.non2xx, seqP50: one.p50,
    seqP99: one.p99 };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const server = await Server.start();
const runs = new Map(VARIANTS.map((v) => [v, []]));
for (let i = 0; i < rounds; i++) for (const v of VARIANTS) runs.get(v).push(await measure(v, server.port));
await server.stop();
const rows = VARIANTS.map((variant) => {
  const rs = runs.get(variant);
  return { variant, rps: median(rs.map((r) => r.rps)), p50: median(rs.map((r) => r.p50)), p99: median(rs.map((r) => r.p99)),
    non2xx: rs.reduce((n, r) => n + r.non2xx, 0), seqP50: median(rs.map((r) => r.seqP50)), seqP99: median(rs.map((r) => r.seqP99)) };
});
const plain = rows[0];
console.log(`server: ${SERVER}; median of ${rounds} rounds of ${seconds} s, 16 connections, autocannon`);
console.log('| app | requests/s | p50 ms | p99 ms | added p50 ms | added p99 ms | non-2xx |');
console.log('|---|---|---|---|---|---|---|');
for (const r of rows) {
  console.log(`| ${r.variant} | ${Math.round(r.rps)} | ${r.p50} | ${r.p99} | ${r.p50 - plain.p50} | ${r.p99 - plain.p99} | ${r.non2xx} |`);
}
console.log(`\nOne request at a time, ${SEQUENTIAL} requests on one keep-alive connection (median of the rounds)`);
console.log('| app | p50 µs | p99 µs | added p50 µs | added p99 µs |');
console.log('|---|---|---|---|---|');
const us = (x) => Math.round(x);
for (const r of rows) {
  console.log(`| ${r.variant} | ${us(r.seqP50)} | ${us(r.seqP99)} | ${us(r.seqP50 - plain.seqP50)} | ${us(r.seqP99 - plain.seqP99)} |`);
}
