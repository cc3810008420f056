// The versioned JSON policy (clients/CONTRACT.md section 2, clients/SPEC.md "Gateway behaviour" 1),
// validated into the shapes the gateway uses without re-checking. Every refusal names the
// field by its JSON path, because the operator reading it has the file open, not this code.
import { readFileSync } from 'node:fs';
import net from 'node:net';
import { ALGOS } from '../commands.js';

export class PolicyError extends Error {
  constructor(message) {
    super(message);
    this.name = 'PolicyError';
  }
}

const invalid = (path, message) => new PolicyError(path ? `invalid policy: ${path}: ${message}` : `invalid policy: ${message}`);

const MAX_COUNT = 1e15;
const MAX_LOG_LIMIT = 10000;
const MAX_SEMAPHORE = 100000;
const DAY_MS = 86_400_000;
const MAX_PERIOD_MS = 3650 * DAY_MS;
const UNIT_MS = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: DAY_MS };

// A duration exactly as the module parses it: a positive integer and a unit.
function duration(path, value, maxMs = MAX_PERIOD_MS, maxText = '3650d') {
  if (typeof value !== 'string') throw invalid(path, `must be a duration string such as "10s" (got ${JSON.stringify(value)})`);
  const m = /^([0-9]*)([a-zA-Z]*)$/.exec(value);
  if (m && m[1] && !m[2]) throw invalid(path, 'needs a unit: add ms, s, m, h or d (for example 10s)');
  const scale = m && UNIT_MS[m[2].toLowerCase()];
  if (!m || !m[1] || !scale) throw invalid(path, 'must be a positive integer followed by ms, s, m, h or d (for example 10s)');
  const ms = Number(m[1]) * scale;
  if (!(ms >= 1 && ms <= maxMs)) throw invalid(path, `must be between 1ms and ${maxText}`);
  return ms;
}

function count(path, value, max = MAX_COUNT) {
  if (!Number.isInteger(value)) throw invalid(path, `must be an integer (got ${JSON.stringify(value)})`);
  if (value < 1 || value > max) throw invalid(path, `must be in the range [1, ${max}]`);
  return value;
}

function object(path, value, fields) {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw invalid(path, 'must be an object');
  for (const k of Object.keys(value)) {
    if (!fields.includes(k)) throw invalid(path ? `${path}.${k}` : k, `unknown field (known: ${fields.join(', ')})`);
  }
  return value;
}

function bool(path, value, dflt) {
  if (value === undefined) return dflt;
  if (typeof value !== 'boolean') throw invalid(path, 'must be true or false');
  return value;
}

function str(path, value) {
  if (typeof value !== 'string') throw invalid(path, 'must be a string');
  return value;
}

// ---- Key templates ----

const VARS = ['user', 'tenant', 'ip', 'route'];
export const ANONYMOUS = 'anonymous';

export function parseTemplate(path, source) {
  if (typeof source !== 'string') throw invalid(path, 'must be a string');
  if (source === '') throw invalid(path, 'a key must not be empty');
  const parts = [];
  let rest = source;
  for (let at = rest.indexOf('${'); at >= 0; at = rest.indexOf('${')) {
    if (at > 0) parts.push({ text: rest.slice(0, at) });
    const close = rest.indexOf('}', at + 2);
    if (close < 0) throw invalid(path, `unclosed '\${' in '${source}'`);
    const name = rest.slice(at + 2, close);
    if (!VARS.includes(name)) throw invalid(path, `unknown variable '\${${name}}' (known: user, tenant, ip, route)`);
    parts.push({ v: name });
    rest = rest.slice(close + 1);
  }
  if (rest) parts.push({ text: rest });
  return { source, parts, tag: hashTag(parts) };
}

// The template text between the first literal `{` and the next literal `}`: rendered values
// never contain braces, so equal tags always land in one slot.
function hashTag(parts) {
  let tag = null;
  for (const p of parts) {
    if (p.text !== undefined) {
      if (tag === null) {
        const open = p.text.indexOf('{');
        if (open < 0) continue;
        const inside = p.text.slice(open + 1);
        const close = inside.indexOf('}');
        if (close >= 0) return close > 0 ? inside.slice(0, close) : null;
        tag = inside;
      } else {
        const close = p.text.indexOf('}');
        if (close >= 0) {
          tag += p.text.slice(0, close);
          return tag || null;
        }
        tag += p.text;
      }
    } else if (tag !== null) tag += `\${${p.v}}`;
  }
  return null;
}

const escapeValue = (s) => s.replace(/[%{}]/g, (c) => ({ '%': '%25', '{': '%7B', '}': '%7D' })[c]);

export function renderKey(template, identity) {
  let out = '';
  for (const p of template.parts) {
    if (p.text !== undefined) out += p.text;
    else {
      const value = identity[p.v];
      out += escapeValue(value ? String(value) : ANONYMOUS);
    }
  }
  return out;
}

// ---- Addresses ----

function parseNet(text) {
  if (typeof text !== 'string') return null;
  const [addr, prefix, extra] = text.split('/');
  if (extra !== undefined) return null;
  const family = net.isIP(addr);
  if (!family) return null;
  const bits = family === 4 ? 32 : 128;
  const p = prefix === undefined ? bits : /^[0-9]+$/.test(prefix) ? Number(prefix) : NaN;
  if (!(p >= 0 && p <= bits)) return null;
  return { value: ipValue(addr), bits, prefix: p };
}

// An address as a BigInt, IPv4-mapped IPv6 as IPv4.
export function ipValue(addr) {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(addr);
  if (mapped) addr = mapped[1];
  if (net.isIPv4(addr)) return addr.split('.').reduce((a, o) => (a << 8n) | BigInt(Number(o)), 0n);
  const [head, tail = ''] = addr.split('::');
  const h = head ? head.split(':') : [];
  const t = tail ? tail.split(':') : [];
  const groups = addr.includes('::') ? [...h, ...Array(8 - h.length - t.length).fill('0'), ...t] : h;
  return groups.reduce((a, g) => (a << 16n) | BigInt(parseInt(g || '0', 16)), 0n) | (1n << 200n);
}

export function netContains(n, addr) {
  if (!net.isIP(addr)) return false;
  const v = ipValue(addr);
  const isV6 = v >= 1n << 200n;
  if (isV6 !== (n.bits === 128)) return false;
  const host = BigInt(n.bits - n.prefix);
  return v >> host === n.value >> host;
}

// ---- Rules and routes ----

const RULE_FIELDS = ['key', 'algo', 'limit', 'period', 'burst', 'cost', 'public', 'shadow', 'settle', 'durable', 'grant',
  'concurrency', 'lease'];

function parseRule(path, name, raw) {
  object(path, raw, RULE_FIELDS);
  const at = (f) => `${path}.${f}`;
  if (raw.key === undefined) throw invalid(at('key'), 'a rule needs a key');
  const key = parseTemplate(at('key'), raw.key);
  const common = { name, key, public: bool(at('public'), raw.public, true), shadow: bool(at('shadow'), raw.shadow, false),
    durable: bool(at('durable'), raw.durable, false) };
  if (raw.concurrency !== undefined) {
    for (const f of ['algo', 'limit', 'period', 'burst', 'cost', 'settle', 'grant']) {
      if (raw[f] !== undefined) throw invalid(at(f), 'a semaphore rule (concurrency) takes no rate field or grant');
    }
    const concurrency = count(at('concurrency'), raw.concurrency, MAX_SEMAPHORE);
    if (raw.lease === undefined) throw invalid(at('lease'), 'a semaphore rule needs a lease');
    return { ...common, semaphore: true, concurrency, leaseMs: duration(at('lease'), raw.lease) };
  }
  if (raw.lease !== undefined) throw invalid(at('lease'), 'lease belongs to a semaphore rule (concurrency)');
  const algo = raw.algo === undefined ? 'gcra' : raw.algo;
  if (!ALGOS.includes(algo)) throw invalid(at('algo'), `must be one of gcra, bucket, window, sliding, log (got '${algo}')`);
  if (raw.limit === undefined) throw invalid(at('limit'), 'a rate rule needs a limit');
  const limit = count(at('limit'), raw.limit, algo === 'log' ? MAX_LOG_LIMIT : MAX_COUNT);
  if (raw.period === undefined) throw invalid(at('period'), 'a rate rule needs a period');
  const periodMs = duration(at('period'), raw.period);
  const rateFamily = algo === 'gcra' || algo === 'bucket';
  if (raw.burst !== undefined && !rateFamily) throw invalid(at('burst'), `BURST is not allowed with ALGO ${algo}`);
  const capacity = raw.burst === undefined ? limit : count(at('burst'), raw.burst);
  if (BigInt(capacity) * BigInt(periodMs) > BigInt(MAX_PERIOD_MS) * BigInt(limit)) {
    throw invalid(at('burst'), 'capacity / limit * period (the time to refill the capacity) must be at most 3650d');
  }
  const cost = raw.cost === undefined ? 1 : count(at('cost'), raw.cost);
  if (cost > capacity) {
    throw invalid(at('cost'), `COST ${cost} exceeds the capacity ${capacity}: such a request could never be admitted`);
  }
  const settle = bool(at('settle'), raw.settle, false);
  if (settle && !rateFamily) throw invalid(at('settle'), 'settling needs algo gcra or bucket');
  let grant = null;
  if (raw.grant !== undefined) {
    object(at('grant'), raw.grant, ['want', 'ttl']);
    if (raw.grant.want === undefined) throw invalid(at('grant.want'), 'a grant needs want');
    grant = { want: count(at('grant.want'), raw.grant.want),
      ttlMs: raw.grant.ttl === undefined ? 1000 : duration(at('grant.ttl'), raw.grant.ttl, DAY_MS, '1d') };
  }
  return { ...common, semaphore: false, algo, limit, periodMs, burst: raw.burst, capacity, cost, settle, grant };
}

// A rate rule neither spent locally (grant) nor evaluated apart (shadow) goes in RL.MULTI.
export const inMulti = (rule) => !rule.semaphore && !rule.grant && !rule.shadow;

function parseRoute(path, raw, rules) {
  object(path, raw, ['method', 'path', 'rules', 'on_store_error']);
  const method = str(`${path}.method`, raw.method);
  if (!/^[A-Za-z]+$/.test(method)) throw invalid(`${path}.method`, 'must be an HTTP method such as GET');
  const p = str(`${path}.path`, raw.path);
  if (!p.startsWith('/')) throw invalid(`${path}.path`, "must start with '/'");
  if (!Array.isArray(raw.rules)) throw invalid(`${path}.rules`, 'must be a list of rule names');
  if (raw.rules.length === 0) throw invalid(`${path}.rules`, 'a route needs at least one rule');
  const specs = [];
  raw.rules.forEach((name, i) => {
    const spec = typeof name === 'string' && Object.hasOwn(rules, name) ? rules[name] : null;
    if (!spec) throw invalid(`${path}.rules[${i}]`, `unknown rule '${name}'`);
    if (specs.includes(spec)) throw invalid(`${path}.rules[${i}]`, `rule '${name}' given twice`);
    specs.push(spec);
  });
  const multi = specs.filter(inMulti);
  for (const other of multi.slice(1)) {
    const first = multi[0];
    if (first.key.tag === null || first.key.tag !== other.key.tag) {
      throw invalid(`${path}.rules`, `rules '${first.name}' and '${other.name}' go in one RL.MULTI, so their keys must share a hash tag (a '{...}' part written the same in both)`);
    }
    if (first.key.source === other.key.source) throw invalid(`${path}.rules`, `rules '${first.name}' and '${other.name}' have the same key`);
  }
  const onStoreError = parseOnStoreError(`${path}.on_store_error`, raw.on_store_error, specs[0]);
  const m = method.toUpperCase();
  return { method: m, path: p, name: `${m} ${p}`, rules: specs, onStoreError };
}

function parseOnStoreError(path, raw, firstRule) {
  if (raw === undefined) return { mode: 'deny' };
  object(path, raw, ['mode', 'limit', 'period', 'burst']);
  const mode = raw.mode;
  if (mode === 'deny' || mode === 'allow') {
    for (const f of ['limit', 'period', 'burst']) {
      if (raw[f] !== undefined) throw invalid(`${path}.${f}`, 'only a fallback takes a limit, period or burst');
    }
    return { mode };
  }
  if (mode !== 'fallback') throw invalid(`${path}.mode`, `must be deny, fallback or allow (got '${mode}')`);
  if (raw.limit === undefined) throw invalid(`${path}.limit`, 'a fallback needs a limit');
  const limit = count(`${path}.limit`, raw.limit);
  if (raw.period === undefined) throw invalid(`${path}.period`, 'a fallback needs a period');
  const periodMs = duration(`${path}.period`, raw.period);
  const capacity = raw.burst === undefined ? limit : count(`${path}.burst`, raw.burst);
  if (BigInt(capacity) * BigInt(periodMs) > BigInt(MAX_PERIOD_MS) * BigInt(limit)) {
    throw invalid(`${path}.burst`, 'capacity / limit * period (the time to refill the capacity) must be at most 3650d');
  }
  // One it could never admit would turn an outage into refusing every request.
  if (!firstRule.semaphore && firstRule.cost > capacity) {
    throw invalid(`${path}.burst`, `the route's first rule costs ${firstRule.cost}, more than the fallback's capacity ${capacity}`);
  }
  return { mode, limit, periodMs, capacity };
}

export function parsePolicy(text) {
  let doc;
  try {
    doc = typeof text === 'string' ? JSON.parse(text) : text;
  } catch (err) {
    throw invalid('', `not JSON: ${err.message}`);
  }
  object('', doc, ['version', 'identity', 'rules', 'routes', 'negative_cache', 'store', 'retry_after_jitter']);
  if (doc.version === undefined) throw invalid('version', 'required');
  if (!Number.isSafeInteger(doc.version) || doc.version < 0) throw invalid('version', 'must be an unsigned integer');
  const id = object('identity', doc.identity ?? {}, ['user', 'tenant', 'trusted_proxies']);
  const identity = {
    user: id.user === undefined ? null : str('identity.user', id.user).toLowerCase(),
    tenant: id.tenant === undefined ? null : str('identity.tenant', id.tenant).toLowerCase(),
    trustedProxies: (() => {
      const list = id.trusted_proxies ?? [];
      if (!Array.isArray(list)) throw invalid('identity.trusted_proxies', 'must be a list');
      return list.map((p, i) => parseNet(p) ?? (() => {
        throw invalid(`identity.trusted_proxies[${i}]`, `'${p}' is not an IP address or CIDR block`);
      })());
    })(),
  };
  if (doc.rules === undefined) throw invalid('rules', 'required');
  object('rules', doc.rules, Object.keys(doc.rules));
  const rules = {};
  for (const [name, raw] of Object.entries(doc.rules)) rules[name] = parseRule(`rules.${name}`, name, raw);
  if (doc.routes === undefined) throw invalid('routes', 'required');
  if (!Array.isArray(doc.routes)) throw invalid('routes', 'must be a list');
  const routes = [];
  const seen = new Map();
  doc.routes.forEach((raw, i) => {
    const route = parseRoute(`routes[${i}]`, raw, rules);
    if (seen.has(route.name)) throw invalid(`routes[${i}]`, `duplicate route ${route.name} (also routes[${seen.get(route.name)}])`);
    seen.set(route.name, i);
    routes.push(route);
  });
  const nc = object('negative_cache', doc.negative_cache ?? {}, ['max', 'entries']);
  const negativeCache = {
    maxMs: nc.max === undefined ? 250 : duration('negative_cache.max', nc.max),
    entries: nc.entries === undefined ? 100000 : (() => {
      if (nc.entries === 0) throw invalid('negative_cache.entries', 'must be at least 1');
      return count('negative_cache.entries', nc.entries);
    })(),
  };
  const st = object('store', doc.store ?? {}, ['timeout', 'breaker', 'ramp']);
  const br = object('store.breaker', st.breaker ?? {}, ['failures', 'open']);
  const store = {
    timeoutMs: st.timeout === undefined ? 50 : duration('store.timeout', st.timeout),
    failures: br.failures === undefined ? 5 : (() => {
      if (br.failures === 0) throw invalid('store.breaker.failures', 'must be at least 1');
      return count('store.breaker.failures', br.failures);
    })(),
    openMs: br.open === undefined ? 1000 : duration('store.breaker.open', br.open),
    rampMs: st.ramp === undefined ? 10000 : duration('store.ramp', st.ramp),
  };
  const jitter = doc.retry_after_jitter ?? 0;
  if (typeof jitter !== 'number' || !(jitter >= 0 && jitter <= 1)) {
    throw invalid('retry_after_jitter', `must be in [0, 1] (got ${JSON.stringify(jitter)})`);
  }
  const byRoute = new Map(routes.map((r) => [r.name, r]));
  return {
    version: doc.version, identity, rules, routes, negativeCache, store, retryAfterJitter: jitter,
    route: (method, path) => byRoute.get(`${String(method).toUpperCase()} ${path}`),
  };
}

// The policy in force, read from a file and swapped whole on reload.
export class PolicyStore {
  static fromFile(file) {
    return new PolicyStore(readPolicy(file), file);
  }

  constructor(policy, file = null) {
    this.current = typeof policy === 'string' || !policy.route ? parsePolicy(policy) : policy;
    this.file = file;
    this.listeners = [];
  }

  // Re-reads the file: a version not higher than the one in force is refused, and on any error
  // the snapshot in force stays.
  reload() {
    const next = readPolicy(this.file);
    if (next.version <= this.current.version) {
      throw new PolicyError(`policy version ${next.version} is not higher than the version in force, ${this.current.version}`);
    }
    this.current = next;
    for (const l of this.listeners) l(next);
    return next;
  }

  onChange(listener) {
    this.listeners.push(listener);
  }
}

function readPolicy(file) {
  let text;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new PolicyError(`cannot read policy ${file}: ${err.message}`);
  }
  return parsePolicy(text);
}
