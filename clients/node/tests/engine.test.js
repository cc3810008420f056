// The executable contract of clients/vectors/ through the addon, as the reference runner
// clients/engine/tests/vectors.rs runs it: every policy document gives its stated outcome, and
// every scenario's requests, clock steps and store answers (scripted, or the engine's memory
// store) give the stated responses, calls, logs, metrics and table sizes. Format:
// clients/vectors/README.md.
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { describe, test } from 'node:test';
import { engine } from '../src/gateway/native.js';
import { REPO } from './support/server.js';

const DIR = join(REPO, 'clients/vectors');
const { Engine, MemoryStore } = engine();
const jsonFiles = (dir) => (existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith('.json')).sort().map((f) => join(dir, f)) : []);
// A file's `env` holds the variables its documents read (the identity hash key).
const read = (file) => {
  const doc = JSON.parse(readFileSync(file, 'utf8'));
  Object.assign(process.env, doc.env ?? {});
  return doc;
};

// The clock every scenario starts at: 2026-01-01T00:00:00Z, in microseconds.
const START_US = 1_767_225_600_000_000;
const UNITS = { us: 1, ms: 1e3, s: 1e6, m: 60e6, h: 3600e6 };

function durationUs(text) {
  const m = /^([0-9]+)(us|ms|s|m|h)$/.exec(text);
  if (!m) throw new Error(`bad duration ${text}`);
  return Number(m[1]) * UNITS[m[2]];
}

// `want` matches `got`: equal, or {$range: [lo, hi]} for a number, {$any: true} for anything
// present, "*" for any string, an object's listed fields only ({$exact: v} for all), an array
// element by element.
function matches(want, got, what) {
  const fail = () => {
    throw new Error(`${what}: expected ${JSON.stringify(want)}, got ${JSON.stringify(got)}`);
  };
  if (want === '*') return;
  if (Array.isArray(want)) {
    if (!Array.isArray(got) || got.length !== want.length) fail();
    want.forEach((w, i) => matches(w, got[i], `${what}[${i}]`));
    return;
  }
  if (want !== null && typeof want === 'object') {
    if ('$range' in want) {
      const [lo, hi] = want.$range;
      if (typeof got !== 'number' || got < lo || got > hi) fail();
    } else if ('$any' in want) {
      if (got === null || got === undefined) fail();
    } else if ('$exact' in want) {
      if (!isDeepStrictEqual(want.$exact, got)) fail();
    } else {
      if (got === null || typeof got !== 'object' || Array.isArray(got)) fail();
      for (const [k, v] of Object.entries(want)) matches(v, got[k] ?? null, `${what}.${k}`);
    }
    return;
  }
  if (want !== got) fail();
}

// A header value: text (its UTF-8 bytes), {hex} bytes, or {repeat, times}; a list repeats the
// header.
function headerValue(v) {
  if (Array.isArray(v)) return v.map(headerValue);
  if (typeof v === 'string') return v;
  if (v.hex !== undefined) return Buffer.from(v.hex, 'hex');
  return v.repeat.repeat(v.times);
}

const argsOf = (calls) => calls.map((c) => c.args);

function expectCalls(want, calls) {
  if (want !== undefined) matches(want, argsOf(calls), 'calls');
}

// The store's scripted answers for one request (README "The store S").
class Script {
  constructor(spec) {
    this.entries = [];
    this.restMemory = false;
    if (spec === undefined || spec === 'memory') this.restMemory = true;
    else if (Array.isArray(spec)) this.entries = spec;
    else if (spec && typeof spec === 'object') {
      this.entries = spec.script ?? [];
      this.restMemory = spec.rest === 'memory';
    }
    this.next = 0;
    this.made = [];
    this.deadlines = [];
  }

  // A {"wait": "1ms"} entry answers a Wait step by moving the clock.
  wait() {
    const e = this.entries[this.next];
    if (e?.wait === undefined) return null;
    this.next += 1;
    return durationUs(e.wait);
  }

  // [answer, advance], or null when the memory store answers.
  answer(call) {
    const entry = this.entries[this.next];
    if (!entry) {
      if (this.restMemory) return null;
      throw new Error(`unscripted call ${JSON.stringify(call.args)}`);
    }
    this.next += 1;
    if (entry.call !== undefined && entry.call !== '*') matches(entry.call, call.args, 'call');
    const advance = entry.after ? durationUs(entry.after) : 0;
    if (entry.memory !== undefined) return [null, advance];
    if ('reply' in entry) return [{ reply: entry.reply }, advance];
    if (entry.error !== undefined) return [{ error: entry.error }, advance];
    if (entry.fail !== undefined) return [{ fail: entry.fail }, advance];
    throw new Error(`script entry ${JSON.stringify(entry)} gives no answer`);
  }

  done() {
    if (this.next < this.entries.length) throw new Error(`scripted store entries left unused, from ${JSON.stringify(this.entries[this.next])}`);
  }
}

class Run {
  constructor(scenario, policies) {
    const policy = typeof scenario.policy === 'string' ? policies[scenario.policy] : scenario.policy;
    if (!policy) throw new Error(`no policy named ${scenario.policy}`);
    const o = scenario.options ?? {};
    this.engine = new Engine(JSON.stringify(policy), { legacyHeaders: o.legacy_headers ?? false, logSample: o.log_sample ?? 0,
      logPerSecond: o.log_per_second ?? 100, seed: o.seed ?? 1, tableBytes: o.table_bytes, nowUs: START_US });
    this.store = new MemoryStore();
    this.now = START_US;
    this.pending = new Map();
    this.leases = new Map();
  }

  toMemory(calls) {
    for (const c of calls) this.store.call(c.args, this.now);
  }

  step(step) {
    if (step.advance !== undefined) {
      this.now += durationUs(step.advance);
    } else if (step.repeat !== undefined) {
      for (let k = 0; k < step.repeat; k++) {
        try {
          this.step(step.do);
        } catch (err) {
          throw new Error(`repetition ${k}: ${err.message}`);
        }
      }
    } else if (step.request !== undefined) {
      this.request(step.request, step);
    } else if (step.check !== undefined) {
      this.check(step.check, step);
    } else if (step.resume !== undefined) {
      const held = this.take(this.pending, step.resume, 'no such held request');
      const script = new Script(step.store);
      const verdict = this.drive(held.pending, held.step, script);
      script.done();
      this.checkVerdict(step.expect, verdict, script);
    } else if (step.drop !== undefined) {
      expectCalls(step.calls, this.take(this.pending, step.drop, 'no such held request').pending.abandon());
    } else if (step.finish !== undefined) {
      // The lease stays known: a later `tick` or `finish` of it must give nothing.
      const lease = this.leases.get(step.finish);
      if (!lease) throw new Error('no lease of that request');
      // The response's status: 200 unless the step says otherwise (null: unknown).
      const calls = lease.holdings.finish(step.actual_cost, step.status === undefined ? 200 : step.status, this.now);
      expectCalls(step.calls, calls);
      this.toMemory(calls);
    } else if (step.tick !== undefined) {
      const lease = this.leases.get(step.tick);
      if (!lease) throw new Error('no lease of that request');
      const calls = lease.holdings.tick(lease.started, this.now);
      expectCalls(step.calls, calls);
      this.toMemory(calls);
    } else if (step.reload !== undefined) {
      let refused = null;
      try {
        this.engine.reload(JSON.stringify(step.reload), this.now);
      } catch (err) {
        refused = err.message;
      }
      if (refused !== (step.error ?? null)) throw new Error(`reload: expected ${step.error ?? 'acceptance'}, got ${refused ?? 'acceptance'}`);
    } else if (step.metrics !== undefined) {
      this.checkMetrics(step.metrics);
    } else if (step.tables !== undefined) {
      const t = this.engine.tables();
      matches(step.tables, { negative_cache: t.negativeCache.entries, chunks: t.chunks.entries, fallback: t.fallback.entries },
        'tables');
    } else {
      throw new Error(`unknown step ${JSON.stringify(step)}`);
    }
  }

  take(map, id, missing) {
    const v = map.get(id);
    if (!v) throw new Error(missing);
    map.delete(id);
    return v;
  }

  request(r, step) {
    const started = this.now;
    const headers = Object.fromEntries(Object.entries(r.headers ?? {}).map(([k, v]) => [k, headerValue(v)]));
    const request = { method: r.method ?? 'GET', path: r.path, peer: r.peer ?? '192.0.2.1', caller: r.caller ?? undefined,
      caseInsensitive: r.case_insensitive ?? false };
    if (step.shed) {
      // The driver sheds the request before deciding it: no store call at all.
      this.checkVerdict(step.expect, this.engine.shed(request, headers, this.now), new Script(undefined));
      return;
    }
    const pending = this.engine.begin(request, headers, this.now);
    const first = pending.first();
    if (step.hold !== undefined) {
      // Held after its first step, unanswered: the next requests run beside it.
      if (step.step !== undefined) matches(step.step, stepJson(first), 'step');
      this.pending.set(step.hold, { pending, step: first });
      return;
    }
    const script = new Script(step.store);
    const verdict = this.drive(pending, first, script);
    script.done();
    this.checkVerdict(step.expect, verdict, script);
    // A request that holds nothing has no holdings: its finish and tick make no call.
    const none = { finish: () => [], tick: () => [] };
    if (step.id !== undefined) this.leases.set(step.id, { holdings: pending.holdings() ?? none, started });
  }

  // Keyed checks under a route, each naming a rule of the policy.
  check(c, step) {
    const items = c.items.map((i) => ({ rule: i.rule, key: i.key, cost: i.cost ?? 1, blocked: i.blocked }));
    const pending = this.engine.check(c.route, items, this.now);
    const script = new Script(step.store);
    const verdict = this.drive(pending, pending.first(), script);
    script.done();
    this.checkVerdict(step.expect, verdict, script);
    if (step.expect?.checks !== undefined) {
      matches(step.expect.checks, verdict.checks.map((o) => ({ over: o.over, remaining: o.remaining ?? null,
        reset_after_ms: o.resetAfterMs ?? null, retry_after_ms: o.retryAfterMs ?? null, source: o.source })), 'checks');
    }
  }

  // Answers each step from the script, or from the memory store where the script allows.
  drive(pending, first, script) {
    let step = first;
    for (let i = 0; i < 64; i++) {
      if (step.kind === 'done') {
        this.toMemory(step.verdict.background);
        return step.verdict;
      }
      if (step.kind === 'wait') {
        const advance = script.wait();
        this.now = advance === null ? step.until : this.now + advance;
        step = pending.resume([], this.now);
        continue;
      }
      script.deadlines.push(step.deadline - this.now);
      const answers = step.calls.map((call) => {
        script.made.push(call.args);
        const scripted = script.answer(call);
        if (scripted) this.now += scripted[1];
        return scripted?.[0] ?? { reply: this.store.call(call.args, this.now) };
      });
      step = pending.resume(answers, this.now);
    }
    throw new Error('more than 64 steps for one request');
  }

  checkVerdict(want, v, script) {
    if (!want) return;
    if ('status' in want) matches(want.status, v.status ?? 200, 'status');
    if ('outcome' in want) matches(want.outcome, v.outcome ?? null, 'outcome');
    if ('kind' in want) matches(want.kind, v.kind, 'kind');
    if ('route' in want) matches(want.route, v.route ?? null, 'route');
    if (want.headers) {
      const got = Object.fromEntries(v.headers);
      for (const [name, value] of Object.entries(want.headers)) {
        if (value === null) {
          if (name in got) throw new Error(`header ${name} is ${got[name]}, expected none`);
        } else if (!(name in got)) {
          throw new Error(`no header ${name}; headers ${JSON.stringify(v.headers)}`);
        } else {
          // Retry-After is a number of seconds: a range compares it as one.
          const g = typeof value === 'object' && /^[0-9]+$/.test(got[name]) ? Number(got[name]) : got[name];
          matches(value, g, `header ${name}`);
        }
      }
    }
    if (want.no_rate_headers === true) {
      const found = v.headers.find(([k]) => k.startsWith('RateLimit'));
      if (found) throw new Error(`unexpected header ${found[0]}`);
    }
    if ('problem' in want) matches(want.problem, v.problem ? JSON.parse(v.problem) : null, 'problem');
    if ('calls' in want) matches(want.calls, script.made, 'calls');
    if ('deadlines_ms' in want) matches(want.deadlines_ms, script.deadlines.map((us) => Math.floor(us / 1000)), 'deadlines_ms');
    if ('background' in want) expectCalls(want.background, v.background);
    if ('log' in want) matches(want.log, v.log.map((r) => ({ level: r.level, reason: r.reason, route: r.route, rule: r.rule, plan: r.plan,
      policy_version: r.policyVersion, outcome: r.outcome, decision: r.decision })), 'log');
  }

  checkMetrics(want) {
    const text = this.engine.metrics(this.now);
    for (const [series, value] of Object.entries(want)) {
      const line = text.split('\n').find((l) => l.startsWith(`${series} `));
      if (value === null) {
        if (line) throw new Error(`${series} is ${line}, expected none`);
      } else if (!line) {
        throw new Error(`no series ${series} in\n${text}`);
      } else {
        matches(value, Number(line.slice(series.length + 1)), series);
      }
    }
  }
}

function stepJson(step) {
  if (step.kind === 'done') return { done: step.verdict.status ?? 200 };
  if (step.kind === 'wait') return 'wait';
  return { calls: argsOf(step.calls) };
}

describe('policy vectors', () => {
  const files = jsonFiles(join(DIR, 'policies'));
  test('there are policy vectors', () => assert.ok(files.length > 0));
  for (const file of files) {
    for (const c of read(file).policies) {
      test(`${file.slice(DIR.length + 1)}: ${c.name}`, () => {
        // `text` gives the document's exact bytes, for messages that cite a position.
        const doc = c.text ?? JSON.stringify(c.policy);
        let refused = null;
        // A gateway in the policy's first region, if it names regions: a global rule needs one.
        const region = Array.isArray(c.policy?.regions) ? c.policy.regions[0] : undefined;
        try {
          // Loaded at the vectors' clock: an override may expire at most 90 days after it.
          new Engine(doc, { nowUs: START_US, region });
        } catch (err) {
          refused = err.message;
        }
        assert.equal(refused, c.error);
      });
    }
  }
});

describe('scenarios', () => {
  const files = jsonFiles(join(DIR, 'scenarios'));
  test('there are scenarios', () => assert.ok(files.length > 0));
  for (const file of files) {
    const doc = read(file);
    for (const scenario of doc.scenarios) {
      test(`${file.slice(DIR.length + 1)}: ${scenario.name}`, () => {
        const run = new Run(scenario, doc.policies ?? {});
        scenario.steps.forEach((step, i) => {
          try {
            run.step(step);
          } catch (err) {
            throw new Error(`step ${i}: ${err.message}`);
          }
        });
      });
    }
  }
});
