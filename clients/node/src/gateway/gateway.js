// One request, end to end (clients/SPEC.md "Gateway behaviour" 7): route, identity, negative
// cache, breaker, the store calls under one deadline, posture, headers, problem bodies, and the
// work after the response (settlement, lease renewal and release). Framework-free: the express
// and fastify middleware adapt requests and responses to `decide`.
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import { performance } from 'node:perf_hooks';
import { RL, withDeadline } from '../client.js';
import * as commands from '../commands.js';
import { RLError } from '../errors.js';
import * as H from '../headers.js';
import { keySlot } from '../wire.js';
import { Breaker } from './breaker.js';
import { Lru, NegativeCache } from './cache.js';
import { Fallback } from './fallback.js';
import { Metrics } from './metrics.js';
import { inMulti, netContains, PolicyStore, renderKey } from './policy.js';
import * as problem from './problem.js';

const RELEASE_DEADLINE_MS = 1000;

const hex = (bytes) => randomBytes(bytes).toString('hex');

// What headers show of a rate rule, and of a semaphore.
const rateSpec = (rule) => ({ name: rule.name, limit: rule.limit, periodMs: rule.periodMs, capacity: rule.capacity });
const semaphoreSpec = (rule) => ({ name: rule.name, limit: rule.concurrency, capacity: rule.concurrency, semaphore: true });

export class Gateway {
  // Options: `store` (a client, adapter or RL), `policy` (a PolicyStore, a policy document as
  // text or object), `durableStore` (connections of their own for WAIT), `legacyHeaders`,
  // `logSample` (0 to 1, default 0.01), `logger`, `hook(event)`, `identify(request)` (async,
  // `{ user, tenant }`), `random`, `now`.
  constructor(options) {
    this.random = options.random ?? Math.random;
    this.now = options.now ?? Date.now;
    this.logger = options.logger ?? console;
    this.logSample = options.logSample ?? 0.01;
    this.legacy = Boolean(options.legacyHeaders);
    this.identify = options.identify;
    this.metrics = new Metrics(options.hook);
    const onMode = (mode) => this.metrics.mode(mode);
    this.rl = options.store instanceof RL ? options.store : new RL(options.store, { logger: this.logger, onMode });
    if (options.store instanceof RL) {
      const previous = this.rl.onMode;
      this.rl.onMode = (m) => { previous?.(m); onMode(m); };
      if (this.rl.mode) onMode(this.rl.mode);
    }
    const durable = options.durableStore;
    this.durable = !durable ? this.rl : durable instanceof RL ? durable : new RL(durable, { logger: this.logger });
    this.policies = options.policy instanceof PolicyStore ? options.policy : new PolicyStore(options.policy);
    const p = this.policies.current;
    this.cache = new NegativeCache(p.negativeCache.entries, this.now);
    this.fallback = new Fallback(p.negativeCache.entries, () => this.now() * 1000);
    this.chunks = new Lru(p.negativeCache.entries);
    this.breaker = new Breaker(p.store, { now: this.now, random: this.random, onState: (s) => this.metrics.breakerState(s) });
    this.metrics.policy(p);
    this.policies.onChange((next) => this.applied(next));
  }

  get policy() {
    return this.policies.current;
  }

  // Re-reads the policy file; throws a PolicyError (and keeps the snapshot in force) when refused.
  reload() {
    return this.policies.reload();
  }

  applied(policy) {
    this.cache.resize(policy.negativeCache.entries);
    this.fallback.lru.max = policy.negativeCache.entries;
    this.chunks.max = policy.negativeCache.entries;
    this.breaker.configure(policy.store);
    this.metrics.policy(policy);
  }

  // ---- Identity ----

  clientIp(policy, peer, headers) {
    const trusted = (addr) => policy.identity.trustedProxies.some((n) => netContains(n, addr));
    let ip = peer ?? '';
    if (!trusted(ip)) return ip;
    const hops = String(headers['x-forwarded-for'] ?? '').split(',').map((h) => h.trim()).filter(Boolean);
    for (let i = hops.length - 1; i >= 0; i--) {
      // A malformed hop ends the walk at the last address read.
      if (!net.isIP(hops[i])) break;
      ip = hops[i];
      if (!trusted(ip)) break;
    }
    return ip;
  }

  async identityOf(policy, route, req) {
    const header = (name) => {
      if (!name) return null;
      const v = req.headers[name];
      const s = Array.isArray(v) ? v[0] : v;
      return s ? String(s) : null;
    };
    const resolved = this.identify ? (await this.identify(req)) ?? {} : {};
    return {
      user: resolved.user || header(policy.identity.user),
      tenant: resolved.tenant || header(policy.identity.tenant),
      ip: this.clientIp(policy, req.peer, req.headers),
      route: route.name,
    };
  }

  // ---- Logs and counts ----

  record(ctx, rule, outcome) {
    this.metrics.decision(ctx.route.name, rule.name, outcome);
    const entry = { route: ctx.route.name, rule: rule.name, policy_version: ctx.policy.version, outcome };
    if (outcome === 'open_admit') this.logger.warn?.('redis-rl decision', entry);
    else if (outcome === 'shadow_refuse' || ctx.logged) this.logger.info?.('redis-rl decision', entry);
  }

  // ---- One request ----

  // `req`: { method, path, headers (lower-case names), peer }. Resolves null when no route
  // matches, else { status, headers, body?, finish?, done? }: `finish({ actualCost })` once the
  // backend answered (settlement), `done()` when the response ended or was dropped (releases).
  async decide(req) {
    const policy = this.policies.current;
    const route = policy.route(req.method, req.path);
    if (!route) return null;
    const identity = await this.identityOf(policy, route, req);
    const ctx = {
      policy, route, identity, req,
      logged: this.random() < this.logSample,
      showPrivate: Boolean(identity.user),
      rules: route.rules.map((rule) => {
        const key = renderKey(rule.key, identity);
        return { rule, key: rule.shadow ? `shadow:${key}` : key };
      }),
    };
    const cached = [];
    for (const r of ctx.rules) {
      if (r.rule.shadow || r.rule.semaphore) continue;
      const wait = this.cache.check(r.rule.name, r.key, r.rule.cost);
      if (wait > 0) cached.push([r, wait]);
    }
    if (cached.length) {
      for (const [r] of cached) this.record(ctx, r.rule, 'refuse_cached');
      return this.refusal(ctx, cached.map(([r, wait]) => [r, rateSpec(r.rule), H.refusedOutcome(wait)]),
        cached.map(([r]) => r.rule.name), Math.max(...cached.map(([, w]) => w)));
    }
    const ticket = this.breaker.admit(route.onStoreError.mode);
    if (!ticket) return this.posture(ctx);
    // A durable route's writes and its WAIT go on one connection: WAIT counts the writes of the
    // connection it is sent on.
    const rl = route.rules.some((r) => r.durable) ? this.durable : this.rl;
    const state = { rl, holders: [], reservations: [], taken: [], answered: [], cancelled: false, calls: 0 };
    const started = performance.now();
    let outcome;
    try {
      outcome = await withDeadline(this.storeCalls(ctx, state), policy.store.timeoutMs, state);
    } catch (err) {
      state.cancelled = true;
      const seconds = (performance.now() - started) / 1000;
      this.releaseAll(state);
      this.giveBack(state);
      if (err instanceof RLError && err.isUnavailable) {
        this.metrics.storeCall(err.timeout ? 'timeout' : 'error', seconds);
        this.breaker.report(ticket, false);
        return this.posture(ctx);
      }
      // A refusal of the call is an answer: a bug in the policy or the deployment, never a
      // 429 and never an admission.
      this.metrics.storeCall('ok', seconds);
      this.breaker.report(ticket, true);
      this.logger.error?.('redis-rl: the store refused the call', { route: route.name, error: String(err?.message ?? err) });
      return { status: 500, headers: [['Content-Type', problem.PROBLEM_TYPE]],
        body: { type: 'about:blank', title: 'Internal Server Error', status: 500, detail: 'The rate limiter refused the call.' } };
    }
    if (state.calls === 0) this.breaker.unused(ticket);
    else {
      this.metrics.storeCall('ok', (performance.now() - started) / 1000);
      this.breaker.report(ticket, true);
    }
    if (!outcome.allowed) {
      this.releaseAll(state);
      this.giveBack(state);
      await this.refundAll(state);
      return this.refusal(ctx, state.answered, outcome.refusing.map((r) => r.rule.name), outcome.retryMs);
    }
    for (const r of ctx.rules) if (!r.rule.shadow) this.record(ctx, r.rule, 'admit');
    await this.waitDurable(ctx, state);
    return this.admission(ctx, state);
  }

  // The store calls in order: grants from their chunks, semaphores, settle rules, one RL.MULTI,
  // then shadow rules apart. A refusal stops the sequence.
  async storeCalls(ctx, state) {
    const live = () => {
      if (state.cancelled) throw new RLError('unavailable', 'the request missed its deadline');
    };
    // A call answering after the deadline decides nothing: the request took its posture.
    const record = (rule, outcome) => {
      if (!state.cancelled) this.record(ctx, rule, outcome);
    };
    const refuse = (r, retryMs, spec, outcome) => {
      state.answered.push([r, spec, outcome]);
      record(r.rule, 'refuse');
      return { allowed: false, refusing: [r], retryMs };
    };
    for (const r of ctx.rules) {
      if (r.rule.semaphore || !r.rule.grant || r.rule.shadow) continue;
      const got = await this.takeGrant(r, state, live);
      if (got !== true) {
        if (got.retry_after_ms > 0) this.cache.refused(r.rule.name, r.key, r.rule.cost, got.retry_after_ms, ctx.policy.negativeCache.maxMs);
        return refuse(r, got.retry_after_ms, rateSpec(r.rule), H.refusedOutcome(got.retry_after_ms));
      }
    }
    for (const r of ctx.rules) {
      if (!r.rule.semaphore) continue;
      live();
      const holder = hex(8);
      // Counted as held before the reply, so a reply lost past the deadline is released too.
      state.holders.push({ r, holder });
      state.calls += 1;
      const lease = await state.rl.acquire({ key: r.key, capacity: r.rule.concurrency, lease: r.rule.leaseMs, holder }, { cancel: state });
      const outcome = { remaining: Math.max(0, r.rule.concurrency - lease.in_flight), resetAfterMs: 0,
        retryAfterMs: lease.acquired ? null : lease.retry_after_ms };
      if (r.rule.shadow) {
        if (!lease.acquired) {
          state.holders.pop();
          record(r.rule, 'shadow_refuse');
        }
        continue;
      }
      if (!lease.acquired) {
        state.holders.pop();
        return refuse(r, lease.retry_after_ms, semaphoreSpec(r.rule), outcome);
      }
      state.answered.push([r, semaphoreSpec(r.rule), outcome]);
    }
    const reservationId = headerValue(ctx.req.headers['idempotency-key']) || hex(16);
    for (const r of ctx.rules) {
      if (!inMulti(r.rule) || !r.rule.settle) continue;
      live();
      state.calls += 1;
      const d = await state.rl.admit({ ...this.rateRequest(r), reserve: { id: reservationId } }, { cancel: state });
      if (!d.allowed) {
        this.cache.refused(r.rule.name, r.key, r.rule.cost, d.retry_after_ms, ctx.policy.negativeCache.maxMs);
        return refuse(r, d.retry_after_ms, rateSpec(r.rule), H.outcomeOf(d));
      }
      state.reservations.push({ r, id: reservationId });
      state.answered.push([r, rateSpec(r.rule), H.outcomeOf(d)]);
    }
    const multi = ctx.rules.filter((r) => inMulti(r.rule) && !r.rule.settle);
    if (multi.length) {
      live();
      state.calls += 1;
      const d = await state.rl.multi({ rules: multi.map((r) => ({ name: r.rule.name, ...this.rateRequest(r) })) }, { cancel: state });
      const at = state.answered.length;
      multi.forEach((r, i) => {
        const refusing = d.denied_by === r.rule.name;
        state.answered.push([r, rateSpec(r.rule), { remaining: d.rules[i].remaining, resetAfterMs: d.rules[i].reset_after_ms,
          retryAfterMs: refusing ? d.retry_after_ms : null }]);
      });
      if (!d.allowed) {
        const r = multi.find((x) => x.rule.name === d.denied_by) ?? multi[0];
        record(r.rule, 'refuse');
        this.cache.refused(r.rule.name, r.key, r.rule.cost, d.retry_after_ms, ctx.policy.negativeCache.maxMs);
        // The store reported every rule of the call; the refusal shows them all.
        state.answered = state.answered.slice(0, at + multi.length);
        return { allowed: false, refusing: [r], retryMs: d.retry_after_ms };
      }
    }
    for (const r of ctx.rules) {
      if (r.rule.semaphore || !r.rule.shadow) continue;
      live();
      state.calls += 1;
      const d = await state.rl.admit(this.rateRequest(r), { cancel: state });
      if (!d.allowed) record(r.rule, 'shadow_refuse');
    }
    return { allowed: true };
  }

  rateRequest(r) {
    const rule = r.rule;
    return { key: r.key, limit: rule.limit, period: rule.periodMs, burst: rule.burst, cost: rule.cost === 1 ? undefined : rule.cost,
      algo: rule.algo === 'gcra' ? undefined : rule.algo };
  }

  // Takes the rule's cost from its chunk, refilling it (one refill in flight per key): true, or
  // the RL.GRANT reply that granted less than the cost.
  async takeGrant(r, state, live) {
    const id = `${r.rule.name}\0${r.key}`;
    const cost = r.rule.cost;
    for (;;) {
      let chunk = this.chunks.get(id);
      if (chunk?.refill) {
        await chunk.refill;
        continue;
      }
      if (chunk && chunk.expires > this.now() && chunk.tokens >= cost) {
        chunk.tokens -= cost;
        state.taken.push({ chunk, cost });
        return true;
      }
      live();
      state.calls += 1;
      chunk = { tokens: 0, expires: 0, refill: null };
      this.chunks.set(id, chunk);
      const want = Math.max(r.rule.grant.want, cost);
      let reply;
      chunk.refill = (async () => {
        try {
          this.metrics.grantRefill(r.rule.name);
          reply = await this.rl.grant({ key: r.key, limit: r.rule.limit, period: r.rule.periodMs, burst: r.rule.burst,
            algo: r.rule.algo === 'gcra' ? undefined : r.rule.algo, want, ttl: r.rule.grant.ttlMs });
          chunk.tokens = reply.granted;
          chunk.expires = this.now() + reply.valid_ms;
        } finally {
          chunk.refill = null;
        }
      })();
      try {
        await chunk.refill;
      } catch (err) {
        this.chunks.delete(id);
        throw err;
      }
      if (reply.granted < cost) return reply;
      chunk.tokens -= cost;
      state.taken.push({ chunk, cost });
      return true;
    }
  }

  // Tokens go back to the chunk they came from only, not to a refilled one.
  giveBack(state) {
    for (const t of state.taken) t.chunk.tokens += t.cost;
    state.taken = [];
  }

  releaseAll(state) {
    const holders = state.holders;
    state.holders = [];
    for (const { r, holder } of holders) {
      state.rl.execute(commands.release(r.key, holder), { timeout: RELEASE_DEADLINE_MS }).catch(() => {});
    }
  }

  async refundAll(state) {
    const reservations = state.reservations;
    state.reservations = [];
    await Promise.all(reservations.map(({ r, id }) => state.rl.settle(r.key, id, 0).catch(() => {})));
  }

  // WAIT 1 once per cluster slot of the durable rules that wrote, on the durable connections.
  async waitDurable(ctx, state) {
    const bySlot = new Map();
    for (const r of ctx.rules) {
      if (!r.rule.durable || (r.rule.grant && !r.rule.semaphore)) continue;
      const slot = keySlot(r.key);
      if (!bySlot.has(slot)) bySlot.set(slot, []);
      bySlot.get(slot).push(r);
    }
    const timeout = ctx.policy.store.timeoutMs;
    await Promise.all([...bySlot.values()].map(async (rules) => {
      let acked = 0;
      try {
        acked = await withDeadline(state.rl.adapter.send('WAIT', ['1', String(timeout)], rules[0].key), 2 * timeout);
      } catch {
        acked = 0;
      }
      if (!(Number(acked) >= 1)) for (const r of rules) this.record(ctx, r.rule, 'unreplicated_admit');
    }));
  }

  // ---- Answers ----

  visible(ctx, r) {
    return !r.rule.shadow && (r.rule.public || ctx.showPrivate);
  }

  // Calls run semaphores first, then settle rules, then RL.MULTI; headers follow route order.
  fields(ctx, answered) {
    const pairs = answered.filter(([r]) => this.visible(ctx, r))
      .sort(([a], [b]) => ctx.rules.indexOf(a) - ctx.rules.indexOf(b))
      .map(([, spec, outcome]) => [spec, outcome]);
    return H.render(pairs, this.legacy);
  }

  refusal(ctx, answered, violated, retryMs) {
    const seconds = Math.max(1, H.retryAfterSeconds(retryMs, ctx.policy.retryAfterJitter, this.random()));
    const order = ctx.route.rules.map((r) => r.name);
    violated = [...new Set(violated)].sort((a, b) => order.indexOf(a) - order.indexOf(b));
    return {
      status: 429,
      headers: [...this.fields(ctx, answered), ['Retry-After', String(seconds)], ['Content-Type', problem.PROBLEM_TYPE]],
      body: problem.tooManyRequests(violated, seconds),
    };
  }

  posture(ctx) {
    const route = ctx.route;
    const mode = route.onStoreError;
    if (mode.mode === 'deny') {
      for (const r of ctx.rules) if (!r.rule.shadow) this.record(ctx, r.rule, 'unavailable_deny');
      const seconds = Math.max(1, H.retryAfterSeconds(ctx.policy.store.openMs, ctx.policy.retryAfterJitter, this.random()));
      return { status: 503, headers: [['Retry-After', String(seconds)], ['Content-Type', problem.PROBLEM_TYPE]],
        body: problem.unavailable(seconds) };
    }
    if (mode.mode === 'allow') {
      for (const r of ctx.rules) if (!r.rule.shadow) this.record(ctx, r.rule, 'open_admit');
      return { status: 200, headers: [] };
    }
    const first = ctx.rules[0];
    const cost = first.rule.semaphore ? 1 : first.rule.cost;
    const d = this.fallback.decide(route.name, first.key, mode, cost);
    const spec = { name: first.rule.name, limit: mode.limit, periodMs: mode.periodMs, capacity: mode.capacity };
    const answered = [[first, spec, H.outcomeOf(d)]];
    if (!d.allowed) {
      this.record(ctx, first.rule, 'fallback_refuse');
      return this.refusal(ctx, answered, [first.rule.name], d.retry_after_ms);
    }
    this.record(ctx, first.rule, 'fallback_admit');
    return { status: 200, headers: this.fields(ctx, answered) };
  }

  admission(ctx, state) {
    const leases = state.holders;
    const reservations = state.reservations;
    let renewTimer = null;
    if (leases.length) {
      const every = Math.min(...leases.map(({ r }) => r.rule.leaseMs)) / 3;
      renewTimer = setInterval(() => {
        for (const { r, holder } of leases) state.rl.renew(r.key, holder, r.rule.leaseMs).catch(() => {});
      }, every);
      renewTimer.unref?.();
    }
    const decision = { status: 200, headers: this.fields(ctx, state.answered) };
    if (reservations.length) {
      let finished = false;
      // After the backend answered, before its response is passed on: a valid X-Actual-Cost
      // settles every reservation of the request with that number.
      decision.finish = async ({ actualCost } = {}) => {
        if (finished) return;
        finished = true;
        const actual = parseActual(actualCost);
        if (actual === null) return;
        await Promise.all(reservations.map(({ r, id }) => state.rl.settle(r.key, id, actual).catch(() => {})));
      };
    }
    if (leases.length) {
      let ended = false;
      // The response ended or was dropped: slots are released.
      decision.done = () => {
        if (ended) return;
        ended = true;
        clearInterval(renewTimer);
        this.releaseAll({ rl: state.rl, holders: leases });
      };
    }
    return decision;
  }
}

function headerValue(v) {
  const s = Array.isArray(v) ? v[0] : v;
  return s ? String(s) : null;
}

function parseActual(v) {
  const s = headerValue(v);
  if (s === null || !/^[0-9]+$/.test(s.trim())) return null;
  const n = Number(s.trim());
  return Number.isSafeInteger(n) ? n : null;
}
