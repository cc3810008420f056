// A Map kept in least-recently-used order: reads and writes move an entry to the end, and the
// first entry goes when the map is full.
export class Lru {
  constructor(max) {
    this.max = max;
    this.map = new Map();
  }

  get(key) {
    const v = this.map.get(key);
    if (v !== undefined) {
      this.map.delete(key);
      this.map.set(key, v);
    }
    return v;
  }

  set(key, value) {
    this.map.delete(key);
    this.map.set(key, value);
    while (this.map.size > this.max) this.map.delete(this.map.keys().next().value);
  }

  delete(key) {
    this.map.delete(key);
  }

  get size() {
    return this.map.size;
  }
}

// The negative cache (clients/SPEC.md "Gateway behaviour" 2): after the store refused cost c
// under rule X on key K for R ms, requests of cost >= c on (X, K) are refused locally for
// min(R, max), never longer than the store would.
export class NegativeCache {
  constructor(entries, now = Date.now) {
    this.lru = new Lru(entries);
    this.now = now;
  }

  resize(entries) {
    this.lru.max = entries;
  }

  refused(rule, key, cost, retryAfterMs, maxMs) {
    if (retryAfterMs <= 0) return;
    this.lru.set(`${rule}\0${key}`, { cost, until: this.now() + Math.min(retryAfterMs, maxMs) });
  }

  // The remaining wait when (rule, key) refuses a request of `cost` locally, or 0.
  check(rule, key, cost) {
    const id = `${rule}\0${key}`;
    const entry = this.lru.get(id);
    if (!entry) return 0;
    const left = entry.until - this.now();
    if (left <= 0) {
      this.lru.delete(id);
      return 0;
    }
    return cost >= entry.cost ? left : 0;
  }
}
