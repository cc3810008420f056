// An express-rate-limit Store on the module, constructed like rate-limit-redis's
// (`new RLStore({ sendCommand, prefix })`), so its users switch by changing `store:` alone.
//
// Each key is a `gcra` limiter of `limit` per `windowMs` (ALGO `window` behaves like
// rate-limit-redis's fixed window; `sliding` and `log` do not admit twice the limit across a
// window's end). A refused request is not spent by the module, so it reports `limit + 1` hits,
// which express-rate-limit refuses, and a reset time of when the same request would be admitted.
import { randomBytes } from 'node:crypto';
import { RL } from './client.js';
import { classify, fromSendCommand } from './adapters.js';

const SETTLEABLE = new Set(['gcra', 'bucket']);

function clusterAdapter(sendCommandCluster) {
  return {
    async send(name, args, firstKey) {
      try {
        return await sendCommandCluster({ key: firstKey, isReadOnly: false, command: [name, ...args] });
      } catch (err) {
        throw classify(err);
      }
    },
  };
}

export class RLStore {
  // Options: `sendCommand(...args)` or `sendCommandCluster({ key, isReadOnly, command })` as for
  // rate-limit-redis, or `client` (an ioredis/node-redis client or cluster, or an RL); `prefix`
  // (default `rl:`); `algo` (default `gcra`); `burst` (gcra and bucket: what an idle key admits
  // at once, default the limit); `timeout` (ms per store call).
  constructor(options = {}) {
    const { sendCommand, sendCommandCluster, client } = options;
    if ([sendCommand, sendCommandCluster, client].filter(Boolean).length !== 1) {
      throw new TypeError('RLStore: give exactly one of sendCommand, sendCommandCluster or client');
    }
    if (client instanceof RL) this.rl = client;
    else {
      const store = sendCommand ? fromSendCommand(sendCommand) : sendCommandCluster ? clusterAdapter(sendCommandCluster) : client;
      this.rl = new RL(store, { timeout: options.timeout, logger: options.logger });
    }
    this.prefix = options.prefix ?? 'rl:';
    this.algo = options.algo ?? 'gcra';
    this.burst = options.burst;
    this.localKeys = false;
    // Reservations that a later decrement may refund, per key, newest last; and the refused
    // increments whose decrement must refund nothing (the module did not count them).
    this.reservations = new Map();
    this.refusedPending = new Map();
  }

  init(options) {
    this.windowMs = options.windowMs;
    this.limit = options.limit ?? options.max;
    // Decrements only come with skipFailedRequests or skipSuccessfulRequests; only then is
    // each admission reserved, so that it can be refunded.
    this.reserving = Boolean(options.skipFailedRequests || options.skipSuccessfulRequests) && SETTLEABLE.has(this.algo);
    this.refusedDecrement = Boolean(options.skipFailedRequests);
    if (typeof this.limit !== 'number') {
      throw new TypeError('RLStore needs a numeric limit: a limit function cannot be a rule of the store');
    }
  }

  prefixKey(key) {
    return `${this.prefix}${key}`;
  }

  async get(key) {
    const info = await this.rl.info(this.prefixKey(key));
    if (info === null) return undefined;
    return { totalHits: Math.max(0, info.capacity - info.remaining), resetTime: new Date(Date.now() + info.reset_after_ms) };
  }

  async increment(key) {
    const k = this.prefixKey(key);
    const now = Date.now();
    const id = this.reserving ? randomBytes(16).toString('hex') : null;
    const d = await this.rl.admit({
      key: k, limit: this.limit, period: this.windowMs, burst: this.burst, algo: this.algo === 'gcra' ? undefined : this.algo,
      reserve: id ? { id, keep: this.windowMs } : undefined,
    });
    if (!d.allowed) {
      if (this.refusedDecrement) this.refusedPending.set(k, (this.refusedPending.get(k) ?? 0) + 1);
      return { totalHits: d.capacity + 1, resetTime: new Date(now + d.retry_after_ms) };
    }
    if (id) {
      const list = this.reservations.get(k) ?? [];
      // A reservation older than the window is forgotten by the module, and express-rate-limit
      // does not decrement past the reset time either.
      while (list.length && list[0].until <= now) list.shift();
      list.push({ id, until: now + this.windowMs });
      this.reservations.set(k, list);
    }
    return { totalHits: d.capacity - d.remaining, resetTime: new Date(now + d.reset_after_ms) };
  }

  // Refunds one admission of the key (RL.SETTLE ... 0); a refused request's decrement refunds
  // nothing, as nothing was spent.
  async decrement(key) {
    const k = this.prefixKey(key);
    const pending = this.refusedPending.get(k) ?? 0;
    if (pending > 0) {
      if (pending === 1) this.refusedPending.delete(k);
      else this.refusedPending.set(k, pending - 1);
      return;
    }
    const list = this.reservations.get(k);
    const r = list?.pop();
    if (list && list.length === 0) this.reservations.delete(k);
    if (r) await this.rl.settle(k, r.id, 0);
  }

  async resetKey(key) {
    const k = this.prefixKey(key);
    this.reservations.delete(k);
    this.refusedPending.delete(k);
    await this.rl.adapter.send('DEL', [k], k);
  }
}
