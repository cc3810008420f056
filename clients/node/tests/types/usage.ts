// Compiled by tests/package.test.js with tsc --noEmit: the declarations cover what the README shows.
import { Gateway, RateLimiterRL, RateLimiterRes, RL, RLError, RLStore, expressMiddleware, fetchWithRetry } from 'redis-rl';

declare const client: object;
const rl = new RL(client, { timeout: 50 });
async function use(): Promise<number> {
  const d = await rl.admit({ key: 'user:17', limit: 2, period: '1s', burst: 20 });
  const m = await rl.multi({ rules: [{ name: 'user', key: '{t}:u', limit: 2, period: 1000 }] });
  const s = await rl.settle('k', 'id', 3);
  try {
    await rl.info('k');
  } catch (err) {
    if (err instanceof RLError && err.kind === 'unavailable') return 0;
  }
  const store = new RLStore({ sendCommand: (...args: string[]) => Promise.resolve(args), prefix: 'rl:' });
  const limiter = new RateLimiterRL({ storeClient: client, points: 5, duration: 1 });
  const res: RateLimiterRes = await limiter.consume('ip');
  const gw = new Gateway({ store: client, policy: '{}' });
  const mw = expressMiddleware(gw);
  const keyed = await gw.check('jobs', [{ rule: 'user', key: '{j}:u:17', blocked: false }, { rule: 'slot', key: '{j}:slot', cost: 0 }]);
  keyed.done?.();
  const r: Response = await fetchWithRetry('http://x/', { method: 'POST' });
  return d.remaining + (m.denied_by === null ? 1 : 0) + (s?.delta ?? 0) + res.remainingPoints + store.prefix.length + r.status
    + (typeof mw === 'function' ? 1 : 0) + (keyed.checks[0]?.remaining ?? 0);
}
void use;
