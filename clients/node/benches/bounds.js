// Memory: 100,000 distinct callers through the addon stay within the policy's bounds, as
// clients/engine/tests/bounds.rs checks of the engine itself. Each caller is admitted, then
// refused by the store (a negative-cache entry) while spending a chunk of its own (a grant
// rule), then decided by the local fallback while the store is down; every table must stay at
// negative_cache.entries, and the process's memory flat once the tables are full.
//   node benches/bounds.js [callers, default 100000]
import assert from 'node:assert/strict';
import { setImmediate as tick } from 'node:timers/promises';
import { engine } from '../src/gateway/native.js';

const CALLERS = Number(process.argv[2] ?? 100_000);
const ENTRIES = 1000;
const { Engine, MemoryStore } = engine();
const policy = {
  version: 1, default: { rules: [] },
  identity: { user: 'x-user' },
  rules: {
    user: { key: 'u:${user}', limit: 1, period: '1h' },
    chunk: { key: 'c:${user}', limit: 100, period: '1s', grant: { want: 10 } },
  },
  routes: [{ method: 'GET', path: '/', rules: ['user', 'chunk'], on_store_error: { mode: 'fallback', limit: 1, period: '1h' } }],
  negative_cache: { entries: ENTRIES },
};
const gateway = new Engine(JSON.stringify(policy), { logSample: 0 });
const now = 1_767_225_600_000_000;

// One decision, each call answered by `answer`.
function decide(user, answer) {
  const pending = gateway.begin({ method: 'GET', path: '/' }, { 'x-user': user }, now);
  let step = pending.first();
  while (step.kind !== 'done') {
    const answers = step.kind === 'wait' ? [] : step.calls.map((c) => answer(c));
    step = pending.resume(answers, step.kind === 'wait' ? step.until : now);
  }
  return step.verdict.status ?? 200;
}
// Each caller's keys are its own, so a store per caller answers as one store would, and the
// memory measured is the engine's, not the store's.
const memoryOf = (store) => (c) => ({ reply: store.call(c.args, now) });
const down = () => ({ fail: 'connection refused' });

const mb = () => Math.round(process.memoryUsage().rss / 2 ** 20);
const started = process.hrtime.bigint();
let rssFull = 0;
for (let i = 0; i < CALLERS; i++) {
  const memory = memoryOf(new MemoryStore());
  assert.equal(decide(`user-${i}`, memory), 200);
  assert.equal(decide(`user-${i}`, memory), 429);
  if (i === 2 * ENTRIES) rssFull = mb();
  // A server returns to the event loop between requests; the addon's objects are freed there
  // (V8 runs the finalizers of collected wrappers from it).
  if (i % 1000 === 0) await tick();
}
const refused = gateway.tables();
assert.deepEqual([refused.negativeCache.entries, refused.chunks.entries], [ENTRIES, ENTRIES]);
// Far past the negative cache's entries: the store is asked again, and it is down.
for (let i = 0; i < CALLERS; i++) {
  decide(`other-${i}`, down);
  if (i % 1000 === 0) await tick();
}
const fallback = gateway.tables();
assert.ok(fallback.fallback.entries <= ENTRIES, `fallback table ${fallback.fallback.entries}`);
const seconds = Number(process.hrtime.bigint() - started) / 1e9;
console.log(`${CALLERS} callers, ${3 * CALLERS} decisions in ${seconds.toFixed(1)} s `
  + `(${Math.round((seconds / (3 * CALLERS)) * 1e6)} µs each, the memory store's work included)`);
console.log(`tables after the refusals: negative cache ${refused.negativeCache.entries}, chunks ${refused.chunks.entries}; `
  + `after the fallback: ${JSON.stringify(fallback)} (bound ${ENTRIES})`);
console.log(`rss ${rssFull} MB once the tables were full (after ${2 * ENTRIES} callers), ${mb()} MB at the end`);
