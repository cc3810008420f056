// The local limiter of a `fallback` posture: gcra of `limit` per `period` with `capacity`,
// in exact integers at the gateway's wall clock in microseconds. Time is scaled by `limit` so
// that one unit's emission interval is exactly `period` scaled units.
import { Lru } from './cache.js';

const ceilDiv = (a, b) => (a + b - 1n) / b;

export function gcraDecide(state, { limit, periodMs, capacity }, cost, nowUs) {
  const lim = BigInt(limit);
  const unit = BigInt(periodMs) * 1000n;
  const now = BigInt(nowUs) * lim;
  const tat = state.tat > now ? state.tat : now;
  const window = BigInt(capacity) * unit;
  const next = tat + BigInt(cost) * unit;
  const scaledToMs = (scaled) => Number(ceilDiv(ceilDiv(scaled, lim), 1000n));
  if (next - now > window) {
    return { allowed: false, remaining: Number((window - (tat - now)) / unit), retry_after_ms: scaledToMs(next - now - window),
      reset_after_ms: scaledToMs(tat - now), capacity };
  }
  state.tat = next;
  return { allowed: true, remaining: Number((window - (next - now)) / unit), retry_after_ms: 0,
    reset_after_ms: scaledToMs(next - now), capacity };
}

// One limiter per rendered key, in a bounded map: an evicted key starts full again.
export class Fallback {
  constructor(entries, nowUs = () => Date.now() * 1000) {
    this.lru = new Lru(entries);
    this.nowUs = nowUs;
  }

  decide(routeName, key, rule, cost) {
    const id = `${routeName}\0${key}`;
    let state = this.lru.get(id);
    if (!state) {
      state = { tat: 0n };
      this.lru.set(id, state);
    }
    return gcraDecide(state, rule, cost, this.nowUs());
  }
}
