// A policy published through Redis (`rl-gateway policy publish`, clients/CONTRACT.md section
// 11), followed: the snapshot at `key` loaded at start (or, with Redis down, the last good one
// from `cache`), then each publication's notice on the key's channel, and a poll every `pollMs`
// as a safety net, put a higher version in force. A gateway that cannot refresh keeps
// enforcing the snapshot it has; its metrics show the snapshot's age.
//
//   const published = new PublishedPolicy(new Redis(), { cache: '/var/lib/app/policy.json' });
//   const gateway = new Gateway({ store, policy: await published.load() });
//   published.follow(gateway);
//
// `redis`: an ioredis (or iovalkey) client; notices come on a duplicate of it.

import { readFileSync, renameSync, writeFileSync } from 'node:fs';

import { PolicyError } from './policy.js';

export const DEFAULT_KEY = 'rl:policy';

const withTimeout = (promise, ms, what) => {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
};

export class PublishedPolicy {
  constructor(redis, { key = DEFAULT_KEY, cache = null, pollMs = 5000, timeoutMs = 2000, logger = console } = {}) {
    this.redis = redis;
    this.key = key;
    this.cache = cache;
    this.pollMs = pollMs;
    this.timeoutMs = timeoutMs;
    this.logger = logger;
    this.publishedAtMs = 0;
    this.subscriber = null;
    this.timer = null;
  }

  async fetch() {
    const fields = await withTimeout(this.redis.hgetall(this.key), this.timeoutMs, 'read the snapshot');
    if (!fields || fields.document === undefined) return null;
    return {
      version: Number(fields.version ?? 0), published_by: fields.published_by ?? '',
      published_at_ms: Number(fields.published_at_ms ?? 0), document: fields.document,
    };
  }

  // Whole or not at all: a crash mid-write never leaves a half file to start from.
  writeCache(snapshot) {
    if (this.cache === null) return;
    writeFileSync(`${this.cache}.tmp`, JSON.stringify(snapshot));
    renameSync(`${this.cache}.tmp`, this.cache);
  }

  // The snapshot to start with, as the policy's text: the store's, else the cache's; throws a
  // PolicyError saying why there is none.
  async load() {
    let unreachable;
    try {
      const snapshot = await this.fetch();
      if (snapshot === null) throw new PolicyError(`no policy is published at ${this.key}`);
      this.publishedAtMs = snapshot.published_at_ms;
      try {
        this.writeCache(snapshot);
      } catch (err) {
        this.logger.warn?.(`cannot write the policy cache: ${err.message}`);
      }
      return snapshot.document;
    } catch (err) {
      if (err instanceof PolicyError) throw err;
      unreachable = err;
    }
    if (this.cache === null) {
      throw new PolicyError(`the store is unreachable (${unreachable.message}) and no cache holds a snapshot to start from`);
    }
    let snapshot;
    try {
      snapshot = JSON.parse(readFileSync(this.cache, 'utf8'));
    } catch (err) {
      throw new PolicyError(`the store is unreachable (${unreachable.message}) and the policy cache cannot be read: ${err.message}`);
    }
    this.logger.warn?.(`the store is unreachable (${unreachable.message}); starting from the snapshot cached in ${this.cache} (version ${snapshot.version})`);
    this.publishedAtMs = Number(snapshot.published_at_ms ?? 0);
    return snapshot.document;
  }

  // Puts the stored snapshot in force if it is higher than the gateway's: its version, or null.
  async refresh(gateway) {
    const version = await withTimeout(this.redis.hget(this.key, 'version'), this.timeoutMs, 'read the version');
    if (version === null || Number(version) <= gateway.policy.version) return null;
    const snapshot = await this.fetch();
    if (snapshot === null) return null;
    gateway.engine.reload(snapshot.document);
    this.publishedAtMs = snapshot.published_at_ms;
    gateway.engine.policyPublished(this.publishedAtMs * 1000);
    this.writeCache(snapshot);
    this.logger.info?.(`following ${this.key}: version ${gateway.policy.version} in force (published by ${snapshot.published_by})`);
    return gateway.policy.version;
  }

  // Follows the key until `stop()`: each notice, and each poll, refreshes; a failure is logged
  // once per streak and the snapshot in force stays.
  follow(gateway) {
    if (this.publishedAtMs) gateway.engine.policyPublished(this.publishedAtMs * 1000);
    let failing = false;
    const refresh = () => this.refresh(gateway).then(
      () => { failing = false; },
      (err) => {
        if (!failing) this.logger.warn?.(`cannot refresh the policy from ${this.key} (${err.message}); the snapshot in force stays`);
        failing = true;
      });
    this.subscriber = this.redis.duplicate();
    this.subscriber.on('error', () => {}); // reconnects on its own; the poll covers the gap
    this.subscriber.on('message', (channel) => { if (channel === this.key) refresh(); });
    // Each (re)subscription reads what was published while nothing listened.
    this.subscriber.on('ready', refresh);
    this.subscriber.subscribe(this.key).catch(() => {});
    this.timer = setInterval(refresh, this.pollMs);
    this.timer.unref?.();
    return this;
  }

  async stop() {
    clearInterval(this.timer);
    this.timer = null;
    if (this.subscriber) {
      this.subscriber.disconnect();
      this.subscriber = null;
    }
  }
}
