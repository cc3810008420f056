// The express-rate-limit stores alone, in this process, without HTTP: `increment` one call at a
// time on 100 keys, RLStore against rate-limit-redis's RedisStore on the same server and the same
// ioredis client (and, with RL_BENCH_BEFORE=<another copy's src/index.js>, that copy's RLStore),
// alternating round by round so a change of load hits them alike. Each call is timed to the
// microsecond; what differs between the stores is their JavaScript and their one command.
// node benches/store.js [calls per store, default 20000] [rounds, default 20]
import { RedisStore } from 'rate-limit-redis';
import * as current from '../src/index.js';
import { Server, SERVER } from '../tests/support/server.js';

const calls = Number(process.argv[2] ?? 20000);
const rounds = Number(process.argv[3] ?? 20);
const server = await Server.start();
const io = await server.ioredis();
const sendCommand = (...args) => io.call(...args);
const quiet = { info() {} };
const stores = {
  'rate-limit-redis': new RedisStore({ sendCommand, prefix: 'bench-rlr:' }),
  rlstore: new current.RLStore({ sendCommand, prefix: 'bench-rl:', logger: quiet }),
};
if (process.env.RL_BENCH_BEFORE) {
  const before = await import(process.env.RL_BENCH_BEFORE);
  stores['before-rlstore'] = new before.RLStore({ sendCommand, prefix: 'bench-rl-before:', logger: quiet });
}
// A limit no run reaches: every call is admitted, so each store does the same work.
for (const store of Object.values(stores)) store.init({ windowMs: 60_000, limit: 1_000_000_000 });

async function run(store, n) {
  const times = [];
  for (let i = 0; i < n; i++) {
    const started = process.hrtime.bigint();
    await store.increment(`u${i % 100}`);
    times.push(Number(process.hrtime.bigint() - started) / 1000);
  }
  return times;
}

const times = Object.fromEntries(Object.keys(stores).map((name) => [name, []]));
for (const store of Object.values(stores)) await run(store, 1000);
for (let r = 0; r < rounds; r++) {
  for (const [name, store] of Object.entries(stores)) times[name].push(...(await run(store, Math.floor(calls / rounds))));
}
io.disconnect();
await server.stop();

const at = (xs, q) => xs[Math.min(xs.length - 1, Math.floor(q * xs.length))];
const rows = Object.entries(times).map(([name, xs]) => {
  xs.sort((a, b) => a - b);
  return { name, p50: at(xs, 0.5), p99: at(xs, 0.99) };
});
const base = rows[0].p50;
console.log(`server: ${SERVER}; ${calls} calls per store in ${rounds} rounds, one at a time`);
console.log('| store | p50 µs | p99 µs | p50 over rate-limit-redis |');
console.log('|---|---|---|---|');
for (const r of rows) {
  const over = r.p50 - base;
  console.log(`| ${r.name} | ${r.p50.toFixed(1)} | ${r.p99.toFixed(0)} | ${over >= 0 ? '+' : ''}${over.toFixed(1)} µs |`);
}
