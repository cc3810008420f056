// One app of the benchmark, in a process of its own: node app.js <variant> <port> <redis port>.
// `before-gateway-1`, `before-gateway-3` and `before-rlstore` run the gateway or the Store of
// another copy of the package (RL_BENCH_BEFORE: its src/index.js), side by side with this one.
import express from 'express';
import { rateLimit } from 'express-rate-limit';
import Redis from 'ioredis';
import { RedisStore } from 'rate-limit-redis';
import * as current from '../src/index.js';

const [named, port, redisPort] = process.argv.slice(2);
const before = named.startsWith('before-');
const variant = named.replace(/^before-/, '');
const { expressMiddleware, Gateway, RLStore } = before ? await import(process.env.RL_BENCH_BEFORE) : current;
const redis = new Redis({ port: Number(redisPort), host: '127.0.0.1', enableOfflineQueue: false, maxRetriesPerRequest: 0 });
await new Promise((r) => redis.once('ready', r));
const sendCommand = (...args) => redis.call(...args);
// Limits no run reaches: every request is admitted, so each variant does the same work.
const HUGE = 1_000_000_000;
const policy = (rules) => ({
  version: 1, default: { rules: [] },
  identity: { user: 'x-user', tenant: 'x-tenant' },
  rules,
  routes: [{ method: 'GET', path: '/', rules: Object.keys(rules) }],
  negative_cache: { max: '250ms', entries: 100000 },
  store: { timeout: '200ms' },
});

const app = express();
if (variant === 'gateway-1') {
  app.use(expressMiddleware(new Gateway({ store: redis, logSample: 0, policy: policy({
    user: { key: '{t:${tenant}}:user:${user}', limit: HUGE, period: '1s' } }) })));
} else if (variant === 'gateway-3') {
  app.use(expressMiddleware(new Gateway({ store: redis, logSample: 0, policy: policy({
    user: { key: '{t:${tenant}}:user:${user}', algo: 'bucket', limit: HUGE, period: '1s', burst: HUGE },
    tenant: { key: '{t:${tenant}}:tenant', limit: HUGE, period: '1m' },
    route: { key: '{t:${tenant}}:route', limit: HUGE, period: '1h' } }) })));
} else if (variant === 'rlstore') {
  app.use(rateLimit({ windowMs: 60_000, limit: HUGE, standardHeaders: 'draft-8', legacyHeaders: false,
    store: new RLStore({ sendCommand, prefix: 'bench-rl:' }) }));
} else if (variant === 'rate-limit-redis') {
  app.use(rateLimit({ windowMs: 60_000, limit: HUGE, standardHeaders: 'draft-8', legacyHeaders: false,
    store: new RedisStore({ sendCommand, prefix: 'bench-rlr:' }) }));
} else if (variant !== 'plain') {
  throw new Error(`unknown variant ${variant}`);
}
app.get('/', (req, res) => res.json({ ok: true }));
app.listen(Number(port), '127.0.0.1', () => console.log('ready'));
