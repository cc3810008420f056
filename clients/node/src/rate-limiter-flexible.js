// A rate-limiter-flexible compatible limiter on the module: `consume`, `penalty`, `reward`,
// `get`, `block`, `delete`, with its options (`points` per `duration` seconds, `keyPrefix`,
// `blockDuration`, `insuranceLimiter`). A refusal rejects with a RateLimiterRes; a store error
// rejects with the error unchanged, or goes to the insurance limiter when there is one.
//
// Each consumption is a reservation (RL.ADMIT ... RESERVE), so `penalty` and `reward` settle
// the key's latest ones upward or downward: the module has no other way to spend or give back
// units outside a decision.
import { randomBytes } from 'node:crypto';
import { RL } from './client.js';

export class RateLimiterRes {
  constructor(remainingPoints = 0, msBeforeNext = 0, consumedPoints = 0, isFirstInDuration = false) {
    this.remainingPoints = remainingPoints;
    this.msBeforeNext = msBeforeNext;
    this.consumedPoints = consumedPoints;
    this.isFirstInDuration = Boolean(isFirstInDuration);
  }

  toJSON() {
    return { remainingPoints: this.remainingPoints, msBeforeNext: this.msBeforeNext,
      consumedPoints: this.consumedPoints, isFirstInDuration: this.isFirstInDuration };
  }

  toString() {
    return JSON.stringify(this.toJSON());
  }
}

// Reservations kept per key for penalty and reward, newest last.
const KEPT_PER_KEY = 16;

export class RateLimiterRL {
  // Options: `storeClient` (an ioredis/iovalkey/node-redis client or cluster, an adapter, a
  // sendCommand function, or an RL), `points` (default 4), `duration` (seconds, default 1),
  // `keyPrefix` (default `rlflx`), `blockDuration` (seconds a refused key stays refused in this
  // process, default 0), `insuranceLimiter`, `timeout` (ms per store call), `algo` (gcra or
  // bucket).
  constructor(options = {}) {
    this.rl = options.storeClient instanceof RL ? options.storeClient
      : new RL(options.storeClient, { timeout: options.timeout, logger: options.logger });
    this.points = options.points ?? 4;
    this.duration = options.duration ?? 1;
    if (!(this.duration > 0)) throw new TypeError('RateLimiterRL: duration must be a positive number of seconds');
    this.keyPrefix = options.keyPrefix ?? 'rlflx';
    this.blockDuration = options.blockDuration ?? 0;
    this.insuranceLimiter = options.insuranceLimiter;
    this.algo = options.algo;
    this.reservations = new Map();
    this.blocked = new Map();
  }

  getKey(key) {
    return this.keyPrefix ? `${this.keyPrefix}:${key}` : String(key);
  }

  rule(k, cost, id) {
    return { key: k, limit: this.points, period: Math.round(this.duration * 1000), cost, algo: this.algo,
      reserve: id && { id, keep: Math.round(this.duration * 1000) } };
  }

  // A store failure goes to the insurance limiter when there is one, else rejects unchanged.
  async insured(method, args, err) {
    if (this.insuranceLimiter && err?.isUnavailable) return this.insuranceLimiter[method](...args);
    throw err;
  }

  blockedFor(k) {
    const until = this.blocked.get(k);
    if (until === undefined) return 0;
    const left = until - Date.now();
    if (left <= 0) this.blocked.delete(k);
    return Math.max(0, left);
  }

  async consume(key, points = 1, options = {}) {
    const k = this.getKey(key);
    const blockedMs = this.blockedFor(k);
    if (blockedMs > 0) throw new RateLimiterRes(0, blockedMs, this.points + points);
    // More than the key can ever admit: refused as rate-limiter-flexible refuses it, without the
    // call the module would refuse as an error.
    if (points > this.points) throw new RateLimiterRes(0, Math.round(this.duration * 1000), points);
    const id = randomBytes(12).toString('hex');
    let d;
    try {
      d = await this.rl.admit(this.rule(k, points, id));
    } catch (err) {
      return this.insured('consume', [key, points, options], err);
    }
    const consumed = d.capacity - d.remaining;
    if (!d.allowed) {
      if (this.blockDuration > 0) this.blocked.set(k, Date.now() + this.blockDuration * 1000);
      const wait = this.blockDuration > 0 ? Math.max(d.retry_after_ms, this.blockDuration * 1000) : d.retry_after_ms;
      throw new RateLimiterRes(d.remaining, wait, consumed + points);
    }
    const list = this.reservations.get(k) ?? [];
    list.push({ id, estimate: points, until: Date.now() + this.duration * 1000 });
    if (list.length > KEPT_PER_KEY) list.shift();
    this.reservations.set(k, list);
    return new RateLimiterRes(d.remaining, d.reset_after_ms, consumed, consumed === points);
  }

  liveReservation(k) {
    const list = this.reservations.get(k);
    const now = Date.now();
    while (list?.length) {
      const r = list.pop();
      if (r.until > now) return r;
    }
    this.reservations.delete(k);
    return null;
  }

  // Spends `points` more: the latest reservation settles at its estimate plus them, or a new
  // one of 1 unit settles at 1 + points (a debit stops at the module's debt floor).
  async penalty(key, points = 1) {
    const k = this.getKey(key);
    try {
      let r = this.liveReservation(k);
      if (!r) {
        const id = randomBytes(12).toString('hex');
        const d = await this.rl.admit(this.rule(k, 1, id));
        if (!d.allowed) return new RateLimiterRes(0, d.retry_after_ms, this.points);
        r = { id, estimate: 1 };
      }
      const s = await this.rl.settle(k, r.id, r.estimate + points);
      return this.afterSettle(k, s);
    } catch (err) {
      return this.insured('penalty', [key, points], err);
    }
  }

  // Gives `points` back, from the key's latest reservations (never more than they spent).
  async reward(key, points = 1) {
    const k = this.getKey(key);
    let left = points;
    let s = null;
    try {
      while (left > 0) {
        const r = this.liveReservation(k);
        if (!r) break;
        const back = Math.min(left, r.estimate);
        s = await this.rl.settle(k, r.id, r.estimate - back);
        left -= back;
      }
      return this.afterSettle(k, s);
    } catch (err) {
      return this.insured('reward', [key, points], err);
    }
  }

  async afterSettle(k, settled) {
    if (settled === null) return this.resOf(await this.rl.info(k));
    const info = await this.rl.info(k);
    return info ? this.resOf(info) : new RateLimiterRes(settled.remaining, 0, this.points - settled.remaining);
  }

  resOf(info) {
    if (info === null) return new RateLimiterRes(this.points, 0, 0);
    return new RateLimiterRes(info.remaining, info.reset_after_ms, Math.max(0, info.capacity - info.remaining));
  }

  async get(key) {
    const k = this.getKey(key);
    try {
      const info = await this.rl.info(k);
      return info === null ? null : this.resOf(info);
    } catch (err) {
      return this.insured('get', [key], err);
    }
  }

  // Refuses the key for `secDuration` seconds in this process, and spends what the store key
  // has left, so other processes refuse it until it refills.
  async block(key, secDuration) {
    const k = this.getKey(key);
    this.blocked.set(k, Date.now() + secDuration * 1000);
    try {
      const info = await this.rl.info(k);
      const left = info === null ? this.points : info.remaining;
      if (left > 0) await this.rl.admit(this.rule(k, left));
    } catch (err) {
      return this.insured('block', [key, secDuration], err);
    }
    return new RateLimiterRes(0, secDuration * 1000, this.points + 1);
  }

  async delete(key) {
    const k = this.getKey(key);
    this.blocked.delete(k);
    this.reservations.delete(k);
    try {
      return (await this.rl.adapter.send('DEL', [k], k)) > 0;
    } catch (err) {
      return this.insured('delete', [key], err);
    }
  }
}
