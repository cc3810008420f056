// A policy published through Redis (`rl-gateway policy publish`, clients/CONTRACT.md section
// 11), followed: the snapshot at `key` loaded at start (or, with Redis down or holding nothing
// enforceable, the last good one from `cache`), then each publication's notice on the key's
// channel, and a poll every `pollMs` as a safety net, put a higher version in force. A gateway
// that cannot refresh keeps enforcing the snapshot it has; its metrics show the snapshot's age.
//
// The same rules as the Rust and Python followers: the document's own `version` governs (an
// entry whose `version` field disagrees is refused), an entry is read whole only when its small
// fields or its length changed, a document past MAX_DOCUMENT_BYTES is refused without being
// read, and each distinct refused document is logged once and counted in
// `rl_gateway_policy_rejected_total`.
//
//   const published = new PublishedPolicy(new Redis(), { cache: '/var/lib/app/policy.json' });
//   const gateway = new Gateway({ store, policy: await published.load() });
//   published.follow(gateway);
//
// `redis`: an ioredis (or iovalkey) client; notices come on a duplicate of it.

import { createHash } from 'node:crypto';
import { readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';

import { parsePolicy, PolicyError } from './policy.js';

export const DEFAULT_KEY = 'rl:policy';

// The largest document a follower reads (8 MiB), as in the Rust client
// (`redis_rl_client::gateway::published::MAX_DOCUMENT_BYTES`).
export const MAX_DOCUMENT_BYTES = 8 << 20;

// Refused documents remembered so each is logged and counted once.
const REMEMBERED = 16;
// The head, read at one instant (see head()).
const READ_HEAD = `return {redis.call('HMGET', KEYS[1], 'version', 'published_by', 'published_at_ms'),
  redis.call('HSTRLEN', KEYS[1], 'document')}`;

const withTimeout = (promise, ms, what) => {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
};

// A refused entry: logged and counted when it was made.
class Refused extends PolicyError {}

const text = (v) => (v === null || v === undefined ? null : v.toString());
const absent = (head) => head.version === null && head.publishedAtMs === null && head.length === 0;
const describe = (key, head) => `the snapshot at ${key} (version ${head.version ?? 'none'}, published by ${head.publishedBy || 'nobody'})`;
const sameHead = (a, b) => a !== null && b !== null && a.version === b.version && a.publishedBy === b.publishedBy
  && a.publishedAtMs === b.publishedAtMs && a.length === b.length;
const identity = (head, document = null) => {
  const hash = createHash('sha256').update(JSON.stringify(head));
  if (document !== null) hash.update(document);
  return hash.digest('hex');
};

// The rules an entry meets before any gateway enforces it: a document within the bound, a valid
// policy, and a `version` field that says the document's own version. The snapshot, or a throw.
function judge(head, document) {
  if (document.length > MAX_DOCUMENT_BYTES) {
    throw new PolicyError(`its document is ${document.length} bytes, past the bound of ${MAX_DOCUMENT_BYTES} (8 MiB)`);
  }
  const source = new TextDecoder('utf-8', { fatal: true });
  let policy;
  try {
    policy = source.decode(document);
  } catch {
    throw new PolicyError('its document is not UTF-8 text');
  }
  const { version } = parsePolicy(policy);
  if (!/^\d+$/.test(head.version ?? '') || Number(head.version) !== version) {
    throw new PolicyError(`its version field says ${head.version ?? 'nothing'}, its document's version is ${version}`);
  }
  return {
    version, published_by: head.publishedBy, published_at_ms: Number(head.publishedAtMs ?? 0) || 0, document: policy, head,
  };
}

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
    this.seen = null; // the head last examined: unchanged, not read again
    this.refused = []; // the identities of the documents refused lately
    this.uncounted = 0; // refusals before a gateway was given, counted by `follow`
    this.running = null; // the refresh under way: notices and polls join it
  }

  // The small fields and the document's length: what tells one entry from another. Read at one
  // instant, by a script: as two commands, a write between them gave a head that never was (the
  // old version with the new length), refused twice as two documents.
  async head() {
    const [[version, publishedBy, publishedAtMs], length] = await withTimeout(
      this.redis.eval(READ_HEAD, 1, this.key), this.timeoutMs, 'read the snapshot');
    return { version: text(version), publishedBy: text(publishedBy) ?? '', publishedAtMs: text(publishedAtMs), length: Number(length) };
  }

  async whole() {
    const [version, publishedBy, publishedAtMs, document] = await withTimeout(
      this.redis.hmgetBuffer(this.key, 'version', 'published_by', 'published_at_ms', 'document'),
      this.timeoutMs, 'read the snapshot');
    const bytes = document ?? Buffer.alloc(0);
    return {
      head: { version: text(version), publishedBy: text(publishedBy) ?? '', publishedAtMs: text(publishedAtMs), length: bytes.length },
      document: bytes,
    };
  }

  // Logs and counts a refused entry once per distinct document.
  refuse(head, id, why, gateway) {
    const message = `${describe(this.key, head)} is refused: ${why}`;
    this.seen = head;
    if (!this.refused.includes(id)) {
      this.refused.push(id);
      if (this.refused.length > REMEMBERED) this.refused.shift();
      if (gateway) gateway.engine.policyRejected();
      else this.uncounted += 1;
      this.logger.warn?.(`${message}; the snapshot in force stays`);
    }
    return new Refused(message);
  }

  // The stored snapshot when its head changed and it is enforceable; null when nothing is
  // stored or nothing changed; throws a Refused (logged and counted).
  async examine(gateway) {
    const head = await this.head();
    if (absent(head) || sameHead(head, this.seen)) return null;
    if (head.length > MAX_DOCUMENT_BYTES) {
      throw this.refuse(head, identity(head), `its document is ${head.length} bytes, past the bound of ${MAX_DOCUMENT_BYTES} (8 MiB)`, gateway);
    }
    const whole = await this.whole();
    if (absent(whole.head)) return null;
    try {
      return judge(whole.head, whole.document);
    } catch (err) {
      if (!(err instanceof PolicyError)) throw err;
      throw this.refuse(whole.head, identity(whole.head, whole.document), err.message, gateway);
    }
  }

  // Whole or not at all: a crash mid-write never leaves a half file to start from.
  writeCache(snapshot) {
    if (this.cache === null) return;
    const { head, ...stored } = snapshot;
    writeFileSync(`${this.cache}.tmp`, JSON.stringify(stored));
    renameSync(`${this.cache}.tmp`, this.cache);
  }

  // The cache file's snapshot, held to the rules of a stored entry.
  readCache() {
    // A document escaped into JSON grows; twice the bound is room enough for any real one.
    if (statSync(this.cache).size > 2 * MAX_DOCUMENT_BYTES) {
      throw new Error(`${this.cache}: larger than ${2 * MAX_DOCUMENT_BYTES} bytes`);
    }
    const stored = JSON.parse(readFileSync(this.cache, 'utf8'));
    if (typeof stored?.document !== 'string') throw new Error(`${this.cache}: not a snapshot`);
    const document = Buffer.from(stored.document);
    const head = {
      version: stored.version === undefined ? null : String(stored.version), publishedBy: String(stored.published_by ?? ''),
      publishedAtMs: String(stored.published_at_ms ?? 0), length: document.length,
    };
    try {
      return judge(head, document);
    } catch (err) {
      throw new Error(`${this.cache}: ${err.message}`);
    }
  }

  // The snapshot to start with, as the policy's text: the store's when it is good (and not below
  // the cache's), else the cache's when that is good, whatever the store holds; throws a
  // PolicyError saying why there is none.
  async load() {
    let cached = null;
    let cacheError = 'no cache holds a snapshot to start from';
    if (this.cache !== null) {
      try {
        cached = this.readCache();
      } catch (err) {
        cacheError = `the policy cache cannot be used: ${err.message}`;
      }
    }
    let why;
    let refused = false;
    try {
      const stored = await this.examine(null);
      if (stored === null) {
        why = `no policy is published at ${this.key}`;
      } else {
        this.seen = stored.head;
        if (cached === null || stored.version >= cached.version) {
          this.publishedAtMs = stored.published_at_ms;
          try {
            this.writeCache(stored);
          } catch (err) {
            this.logger.warn?.(`cannot write the policy cache: ${err.message}`);
          }
          return stored.document;
        }
        why = `the snapshot at ${this.key} is version ${stored.version}, below the cached one`;
      }
    } catch (err) {
      refused = err instanceof Refused;
      why = refused ? err.message : `the store is unreachable (${err.message})`;
    }
    if (cached === null) throw new PolicyError(`${why}, and ${cacheError}`);
    // A refusal was logged on its own already.
    const said = refused ? `the store holds nothing to enforce at ${this.key}` : why;
    this.logger.warn?.(`${said}; starting from the snapshot cached in ${this.cache} (version ${cached.version})`);
    this.publishedAtMs = cached.published_at_ms;
    return cached.document;
  }

  // Puts the stored snapshot in force if it changed and is higher than the gateway's: its
  // version, or null. Throws a PolicyError for an entry no gateway may enforce (logged and
  // counted already), another error when the store did not answer.
  refresh(gateway) {
    // One at a time: a notice and a poll at once read the store once.
    this.running ??= this.refreshNow(gateway).finally(() => { this.running = null; });
    return this.running;
  }

  async refreshNow(gateway) {
    const snapshot = await this.examine(gateway);
    if (snapshot === null) return null;
    this.seen = snapshot.head;
    try {
      gateway.engine.reload(snapshot.document);
    } catch (err) {
      // Not above the version in force (a store reset, an entry written by hand).
      this.logger.warn?.(`${describe(this.key, snapshot.head)} is not followed: ${err.message}`);
      return null;
    }
    this.publishedAtMs = snapshot.published_at_ms;
    gateway.engine.policyPublished(this.publishedAtMs * 1000);
    try {
      this.writeCache(snapshot);
    } catch (err) {
      this.logger.warn?.(`cannot write the policy cache: ${err.message}`);
    }
    this.logger.info?.(`following ${this.key}: version ${gateway.policy.version} in force (published by ${snapshot.published_by})`);
    return gateway.policy.version;
  }

  // Follows the key until `stop()`: each notice, and each poll, refreshes; a store failure is
  // logged once per streak and the snapshot in force stays.
  follow(gateway) {
    if (this.publishedAtMs) gateway.engine.policyPublished(this.publishedAtMs * 1000);
    for (; this.uncounted > 0; this.uncounted -= 1) gateway.engine.policyRejected();
    let failing = false;
    const refresh = () => this.refresh(gateway).then(
      () => { failing = false; },
      (err) => {
        if (err instanceof PolicyError) {
          failing = false; // logged when it was refused
          return;
        }
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
