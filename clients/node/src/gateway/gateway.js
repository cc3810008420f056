// The gateway: a driver of the engine (clients/engine, as the napi-rs addon) that does only the
// I/O, as the Rust driver (clients/rust/src/gateway) does. It hands each request to the engine,
// sends the store calls the engine asks for under the engine's deadline (natively or through
// the script, by the client's mode; a deadline missed while its own event loop ran late is its
// overload, lag.js), feeds the replies back, sends the background calls after answering, logs
// the decision records, and keeps what an admitted request holds until its response ends. The
// express middleware and the fastify plugin adapt requests and responses.
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { classify } from '../adapters.js';
import { RL, withDeadline } from '../client.js';
import { loopLag } from './lag.js';
import { engine as addon } from './native.js';
import { PolicyError, PolicyStore } from './policy.js';
import { defaultReporter, Reporter } from './regions.js';

// A release, a refund or a settlement not answered in this long is abandoned: a lease expires
// on its own, a reservation stays at its estimate.
const BACKGROUND_TIMEOUT_MS = 1000;

// The engine's clock: Unix microseconds at the first reading, moved on by the monotonic clock,
// so a wall-clock step never moves it.
const WALL_US = Date.now() * 1000;
const MONO_MS = performance.now();
const nowUs = () => Math.floor(WALL_US + (performance.now() - MONO_MS) * 1000);

const sleep = (ms) => new Promise((r) => setTimeout(r, Math.max(0, ms)));

const raw = (x) => x;

// A call of the engine ([name, ...args]) as the typed client's command, so it goes natively or
// through the script as the client's mode says; WAIT is no command of the module.
function send(rl, call, options) {
  const [name, ...args] = call.args;
  if (name === 'WAIT') return rl.adapter.send(name, args, call.key);
  const keys = name === 'RL.MULTI' ? args.slice(1, 1 + Number(args[0])) : args.slice(0, 1);
  return rl.execute({ name, args, keys, parse: raw }, options);
}

// Whether a reply holds anything the engine's JSON does not (Buffers, Maps, objects, bigints,
// booleans, doubles); most replies do not, and go over as they are.
function foreign(v) {
  if (v === null || typeof v === 'string') return false;
  if (typeof v === 'number') return !Number.isInteger(v);
  if (Array.isArray(v)) return v.some(foreign);
  return true;
}

// A reply in the JSON the engine reads (clients/vectors/README.md): whatever the client made of
// RESP2 or RESP3 as strings, integers, arrays and maps. (A map ioredis flattened into
// [name, value, ...] is read as a map by the addon.)
function wire(v) {
  if (!foreign(v)) return v;
  if (v === undefined) return null;
  if (typeof v === 'number') return Number.isInteger(v) ? v : String(v);
  if (typeof v === 'bigint') return Number(v);
  if (typeof v === 'boolean') return v ? 1 : 0;
  if (Buffer.isBuffer(v)) return v.toString('utf8');
  if (Array.isArray(v)) return v.map(wire);
  if (v instanceof Error) return { error: v.message };
  const entries = v instanceof Map ? [...v] : Object.entries(v);
  return { map: entries.map(([k, x]) => [wire(k), wire(x)]) };
}

// How a call ended, as the engine reads it: a server's refusal is a reply (a 500, never the
// posture); only a store that did not answer is a failure.
function failure(err) {
  const e = classify(err);
  if (e.kind === 'refused') return { error: e.message };
  if (e.kind === 'unavailable') return { fail: e.timeout ? 'timeout' : e.message };
  // What this client could not read or send is a refusal in the engine's terms.
  return { error: `ERR ${e.message}` };
}

// Sends the calls in order until `deadline` (µs); those not answered by then are missing, which
// the engine counts as timeouts. After the deadline the client sends nothing more for them. When
// the engine judges how late the loop ran since the request arrived (`arrived`,
// performance.now() ms), against the time the calls had, to be the gateway's own overload
// (Engine.missed), the replies that arrived meanwhile may not have been read yet: they get one
// more turn of the loop (an immediate runs after the loop has read its sockets), and the calls
// still missing after it are that overload. Lateness from before the request arrived is not
// counted; lateness during it is, though the calls were sent after it: a request that waited on
// a busy loop for a chunk another request refills sends its call with what the loop left of its
// deadline, and missing that is the gateway's doing, not the store's.
async function sendAll(engine, rl, calls, deadline, arrived) {
  const answers = [];
  const cancel = { cancelled: false };
  let taken = false;
  // A call that fails once the deadline has passed (the client gives up on a cancelled call
  // too) has no answer; a reply still counts during the turn of grace below.
  const answerOf = async (call) => {
    try {
      return { reply: wire(await send(rl, call, { cancel })) };
    } catch (err) {
      const answer = failure(err);
      return cancel.cancelled && answer.fail !== undefined ? null : answer;
    }
  };
  const sending = (async () => {
    // Each WAIT (one per cluster slot of the durable rules) may block its primary's connection
    // up to its timeout: sent one after the other, the second would miss the deadline.
    if (calls[0]?.args[0] === 'WAIT') {
      answers.push(...calls.map(() => ({ fail: 'timeout' })));
      await Promise.all(calls.map(async (call, i) => {
        const answer = await answerOf(call);
        if (!taken && answer) answers[i] = answer;
      }));
      return;
    }
    for (const call of calls) {
      if (cancel.cancelled) return;
      const answer = await answerOf(call);
      if (taken || !answer) return;
      answers.push(answer);
    }
  })();
  const ms = Math.max(1, (deadline - nowUs()) / 1000);
  const missed = await withDeadline(sending, ms, cancel).then(() => false, () => true);
  const overloaded = missed ? engine.missed(ms, loopLag().since(arrived)) : null;
  if (overloaded?.fail === 'overloaded') await new Promise((r) => setImmediate(r));
  taken = true;
  const got = answers.slice();
  if (overloaded?.fail === 'overloaded') while (got.length < calls.length) got.push(overloaded);
  return got;
}

// What is left behind when a call in the background fails.
const LEFT = {
  'RL.RELEASE': 'the slot is held until its lease ends',
  'RL.RENEW': 'the slot expires at the end of its lease, perhaps before the request ends',
  'RL.SETTLE': 'the reservation stays at its estimate',
};

// Calls whose replies do not matter to the answer, each under its own short deadline. A failure
// is logged with the command and the route, never the key or the server's text, which may name
// keys (and keys are made of identities); the call is not retried.
async function sendEach(rl, calls, logger, route) {
  for (const call of calls) {
    await send(rl, call, { timeout: BACKGROUND_TIMEOUT_MS }).catch((err) => {
      const e = classify(err);
      const why = e.kind === 'refused' ? `the store refused it (${e.message.split(' ', 1)[0]})` : e.message;
      const name = call.args[0];
      logger.warn?.(`redis-rl: ${name} in the background failed: ${why}; ${LEFT[name] ?? 'it is not retried'}`,
        { route, command: name });
    });
  }
}

export class Gateway {
  // Options: `store` (a client, adapter or RL), `policy` (a PolicyStore, or a policy document
  // as text or object), `durableStore` (connections of their own for durable routes),
  // `legacyHeaders`, `logSample` (the share of admissions recorded, 0 to 1, default 0.001),
  // `logPerSecond` (the most decision records a second, default 100), `tableBytes` (each local table's
  // bound in bytes, default 32 MiB), `logger`, `hook(event)`, `identify(request)` (async,
  // `{ user, tenant }`). One limit across regions (a policy's `global` rules): `region` (this
  // gateway's, one of the policy's `regions`), `home` (the home store: a client, adapter or RL)
  // and `reporter` (this gateway's name among the region's reporters; the host's name and the
  // process id by default); a policy with a global rule and no region is refused. The reports
  // run until `close()`.
  constructor(options) {
    const { Engine } = addon();
    this.logger = options.logger ?? console;
    this.identify = options.identify;
    this.hook = options.hook;
    this.policies = options.policy instanceof PolicyStore ? options.policy : new PolicyStore(options.policy);
    try {
      this.engine = new Engine(this.policies.text, { legacyHeaders: Boolean(options.legacyHeaders),
        logSample: options.logSample ?? 0.001, logPerSecond: options.logPerSecond, tableBytes: options.tableBytes, seed: randomBytes(6).readUIntBE(0, 6),
        events: Boolean(this.hook), region: options.region ?? undefined });
    } catch (err) {
      throw new PolicyError(err.message);
    }
    this.warn();
    this.lag = loopLag();
    this.rl = this.client(options.store);
    // The server blocks a connection while its WAIT waits: durable routes go on their own.
    this.durable = options.durableStore ? this.client(options.durableStore) : this.rl;
    this.events();
    if ((options.region == null) !== (options.home == null)) {
      throw new TypeError("redis-rl: region and home go together: a region's allocations are the home store's answers");
    }
    this.reporter = options.region == null ? null : new Reporter({
      engine: this.engine, nowUs, region: options.region, name: options.reporter ?? defaultReporter(),
      home: options.home instanceof RL ? options.home : new RL(options.home, { logger: this.logger }),
      logger: this.logger,
    });
    const engine = this.engine;
    this.metrics = {
      render: () => engine.metrics(),
      // One series of rl_gateway_decisions_total, 0 when absent.
      count(route, rule, outcome) {
        const line = `rl_gateway_decisions_total{route="${route}",rule="${rule}",outcome="${outcome}"} `;
        const found = engine.metrics().split('\n').find((l) => l.startsWith(line));
        return found ? Number(found.slice(line.length)) : 0;
      },
    };
  }

  // The client's mode (module or script) is reported as rl_gateway_store_mode.
  client(store) {
    const onMode = (mode) => {
      this.engine.storeMode(mode);
      this.events();
    };
    if (!(store instanceof RL)) return new RL(store, { logger: this.logger, onMode });
    const previous = store.onMode;
    store.onMode = (m) => {
      previous?.(m);
      onMode(m);
    };
    if (store.mode) onMode(store.mode);
    return store;
  }

  // What the policy holds that is legal but worth an operator's look (an override that had
  // already expired when it was loaded).
  warn() {
    for (const w of this.engine.warnings) this.logger.warn?.(`redis-rl: policy version ${this.engine.policyVersion}: ${w}`);
  }

  events() {
    if (this.hook) for (const e of this.engine.events()) this.hook(e);
  }

  get policy() {
    return { version: this.engine.policyVersion };
  }

  // Stops the reports to the home store.
  close() {
    this.reporter?.stop();
  }

  // Re-reads the policy file; throws a PolicyError (and keeps the snapshot in force) when
  // refused.
  reload() {
    const text = this.policies.read();
    try {
      this.engine.reload(text);
    } catch (err) {
      throw new PolicyError(err.message);
    }
    this.warn();
    this.events();
    return this.policy;
  }

  // `req`: { method, path, headers (as node:http gives them: lower-case names, one code unit per
  // byte received, so keys are those of the other drivers for the same bytes), headersDistinct?,
  // peer, caseInsensitive? (the framework routes paths without case: express by default) }. The engine reads `headersDistinct` when given: `headers` joins a repeated header's
  // values with ", " (`x-user: a` twice would be the identity "a, a"), and the engine takes the
  // first value, as every other face does; `identify` gets `req` as it came. Resolves
  // null when no route matches, else { status, headers, body? (the problem, JSON text), finish?,
  // done? }: `finish({ actualCost, status })` once the backend answered (settlement), `done()`
  // when the response ended or was dropped (releases).
  async decide(req) {
    const request = { method: req.method, path: req.path, latin1: true, peer: req.peer, caseInsensitive: req.caseInsensitive };
    const headers = req.headersDistinct ?? req.headers;
    // Shed before any work when the loop is stalled too long to read this request's replies in
    // time (the engine's rule).
    if (this.engine.saturated(this.lag.stalled())) {
      return this.answer(this.engine.shed(request, headers, nowUs()));
    }
    // A request that passes untouched (no route, a default without rules) is not looked up either.
    if (this.identify && this.engine.routed(req.method, req.path, req.caseInsensitive)) {
      const c = (await this.identify(req)) ?? {};
      request.caller = { user: c.user || undefined, tenant: c.tenant || undefined };
    }
    const started = nowUs();
    return this.drive(this.engine.begin(request, headers, started), started);
  }

  // Decides keyed checks (what a face that is not HTTP translates its requests into, as the Envoy
  // rate limit service's descriptors) under the policy's route named `route`: its posture, its
  // name in metrics and records; a route the policy lacks is answered 500. `checks`: `{ rule,
  // key, cost? }`, a rule of the policy in force by name (one it lacks throws, and nothing is
  // decided), the key it counts on, the units it takes (1 when not given; 0 only asks). All are
  // admitted or none. Resolves { status, headers, body?, checks, done? }: `checks` holds each
  // one's { over, remaining?, resetAfterMs?, retryAfterMs?, source }, in order; `done()` releases
  // a semaphore's slot.
  async check(route, checks) {
    const started = nowUs();
    return this.drive(this.engine.check(route, checks, started), started, true);
  }

  // Runs a decision's steps until its verdict: the calls under the engine's deadline, the waits.
  // `keyed`: the decision carries each check's outcome.
  async drive(pending, started, keyed = false) {
    const rl = pending.isDurable() ? this.durable : this.rl;
    // When the request arrived on the loop's clock, from which its lateness counts.
    const arrived = (started - WALL_US) / 1000 + MONO_MS;
    let step = pending.first();
    while (step.kind !== 'done') {
      if (step.kind === 'wait') {
        // Another request is refilling a chunk this one needs (past its deadline, the engine
        // sheds it).
        await sleep((step.until - nowUs()) / 1000);
        step = pending.resume([], nowUs());
      } else {
        const answers = await sendAll(this.engine, rl, step.calls, step.deadline, arrived);
        step = pending.resume(answers, nowUs());
      }
    }
    const decision = this.answer(step.verdict, rl);
    if (keyed) decision.checks = step.verdict.checks;
    if (decision?.status !== 200) return decision;
    return held(decision, pending.holdings(), started, (calls) => sendEach(rl, calls, this.logger, step.verdict.route));
  }

  // A verdict's background calls sent, its records logged; null when no route matched, else the
  // gateway's own answer or an admission (status 200).
  answer(verdict, rl = this.rl) {
    if (verdict.background.length) sendEach(rl, verdict.background, this.logger, verdict.route);
    this.log(verdict.log);
    this.events();
    // No route and no answer of its own: it passes untouched (a path above the root has no
    // route either, and is answered 400).
    if (verdict.route === undefined && verdict.status === undefined) return null;
    if (verdict.status !== undefined) return { status: verdict.status, headers: verdict.headers, body: verdict.problem };
    return { status: 200, headers: verdict.headers };
  }

  // Decision records; never a key or an identity.
  log(records) {
    for (const r of records) {
      const entry = { reason: r.reason, route: r.route, rule: r.rule, plan: r.plan, policy_version: r.policyVersion,
        outcome: r.outcome, decision: r.decision };
      if (r.level === 'warn') this.logger.warn?.(r.message, entry);
      else this.logger.info?.(r.message, entry);
    }
  }
}

// What an admitted request holds: its slots renewed while the backend works and released when
// the response ends (or is dropped), its reservations settled with the backend's report; each
// through `background(calls)`.
function held(decision, holdings, started, background) {
  if (!holdings) return decision;
  const every = holdings.renewEveryMs();
  const timer = every ? setInterval(() => background(holdings.tick(started, nowUs())), every) : null;
  timer?.unref?.();
  let settled = false;
  decision.finish = async ({ actualCost, status } = {}) => {
    if (settled) return;
    settled = true;
    const actual = Array.isArray(actualCost) ? actualCost[0] : actualCost;
    // After a 2xx the reservations are forgotten (a reused Idempotency-Key is charged anew);
    // a status not known keeps them, so a retry of the attempt is not charged again.
    const known = Number.isInteger(status) && status >= 0 ? status : null;
    // The request's capacity slot is given back now, with the backend's latency.
    await background(holdings.settle(actual === undefined || actual === null ? null : String(actual), known, nowUs()));
  };
  let ended = false;
  // Resolves once the releases were sent (or given up on): a caller may wait for the slot.
  decision.done = async () => {
    if (ended) return;
    ended = true;
    clearInterval(timer);
    await background(holdings.release());
  };
  return decision;
}
