// Replies into typed records (clients/SPEC.md section 2): a RESP2 array in the documented
// order, or a RESP3 map read by name (a plain object, a Map, or the flat name/value array some
// clients make of a map), all into the same record.
import { fromServerError, unexpectedReply } from './errors.js';

function check(value, what) {
  if (value instanceof Error) throw fromServerError(value.message, value);
  return value;
}

function asText(v, what) {
  check(v, what);
  if (typeof v === 'string') return v;
  if (Buffer.isBuffer(v)) return v.toString('utf8');
  throw unexpectedReply(`${what} is not a string: ${show(v)}`);
}

function asInt(v, what, { signed = false } = {}) {
  check(v, what);
  let n = v;
  if (typeof v === 'bigint') n = Number(v);
  else if (typeof v === 'string' || Buffer.isBuffer(v)) {
    const s = String(v);
    n = /^-?[0-9]+$/.test(s) ? Number(s) : NaN;
  }
  if (typeof n !== 'number' || !Number.isInteger(n)) throw unexpectedReply(`${what} is not an integer: ${show(v)}`);
  if (!signed && n < 0) throw unexpectedReply(`${what} is negative: ${n}`);
  return n;
}

function asFlag(v, what) {
  const n = asInt(v, what);
  if (n !== 0 && n !== 1) throw unexpectedReply(`${what} must be 0 or 1, not ${n}`);
  return n === 1;
}

function show(v) {
  try {
    return JSON.stringify(v, (_, x) => (typeof x === 'bigint' ? x.toString() : x));
  } catch {
    return String(v);
  }
}

function isMapLike(v) {
  return v instanceof Map || (v !== null && typeof v === 'object' && !Array.isArray(v) && !Buffer.isBuffer(v));
}

function entriesOf(v) {
  return v instanceof Map ? [...v.entries()].map(([k, x]) => [String(k), x]) : Object.entries(v);
}

// A record of `fields` (names in reply order) as an object of raw values, by position or name.
function fieldsOf(value, fields, what) {
  check(value, what);
  if (isMapLike(value)) {
    const m = new Map(entriesOf(value));
    return Object.fromEntries(
      fields.map((f) => {
        if (!m.has(f)) throw unexpectedReply(`${what}: field ${f} missing in ${show(value)}`);
        return [f, m.get(f)];
      }),
    );
  }
  if (!Array.isArray(value)) throw unexpectedReply(`${what}: ${show(value)} is not an array or a map`);
  if (namesInOrder(value, fields)) {
    const r = {};
    for (let i = 0; i < fields.length; i++) r[fields[i]] = value[2 * i + 1];
    return r;
  }
  if (value.length === fields.length * 2 && textIs(value[0], fields[0])) {
    const m = new Map();
    for (let i = 0; i < value.length; i += 2) m.set(asText(value[i], what), value[i + 1]);
    return fieldsOf(m, fields, what);
  }
  if (value.length !== fields.length) {
    throw unexpectedReply(`${what}: ${fields.length} fields expected, got ${show(value)}`);
  }
  return Object.fromEntries(fields.map((f, i) => [f, value[i]]));
}

// The flat array ioredis (RESP3) makes of a map, its names the fields in order (as the module
// writes them): read by position. What the general path below would make of it, without the two
// Maps it builds, which cost more than the rest of a call's JavaScript.
function namesInOrder(value, fields) {
  if (value.length !== fields.length * 2) return false;
  for (let i = 0; i < fields.length; i++) if (value[2 * i] !== fields[i]) return false;
  return true;
}

function textIs(v, s) {
  return (typeof v === 'string' || Buffer.isBuffer(v)) && String(v) === s;
}

export function parseAdmit(value) {
  const r = fieldsOf(value, ['allowed', 'remaining', 'retry_after_ms', 'reset_after_ms', 'capacity'], 'RL.ADMIT');
  return {
    allowed: asFlag(r.allowed, 'allowed'),
    remaining: asInt(r.remaining, 'remaining'),
    retry_after_ms: asInt(r.retry_after_ms, 'retry_after_ms'),
    reset_after_ms: asInt(r.reset_after_ms, 'reset_after_ms'),
    capacity: asInt(r.capacity, 'capacity'),
  };
}

export function parseMulti(value) {
  const r = fieldsOf(value, ['allowed', 'denied_by', 'retry_after_ms', 'rules'], 'RL.MULTI');
  const rules = check(r.rules, 'rules');
  if (!Array.isArray(rules)) throw unexpectedReply(`RL.MULTI rules: ${show(rules)} is not an array`);
  return {
    allowed: asFlag(r.allowed, 'allowed'),
    denied_by: r.denied_by === null || r.denied_by === undefined ? null : asText(r.denied_by, 'denied_by'),
    retry_after_ms: asInt(r.retry_after_ms, 'retry_after_ms'),
    rules: rules.map((rule) => {
      const f = fieldsOf(rule, ['name', 'remaining', 'reset_after_ms'], 'RL.MULTI rule');
      return {
        name: asText(f.name, 'name'),
        remaining: asInt(f.remaining, 'remaining'),
        reset_after_ms: asInt(f.reset_after_ms, 'reset_after_ms'),
      };
    }),
  };
}

export function parseGrant(value) {
  const r = fieldsOf(value, ['granted', 'remaining', 'valid_ms', 'retry_after_ms'], 'RL.GRANT');
  return {
    granted: asInt(r.granted, 'granted'),
    remaining: asInt(r.remaining, 'remaining'),
    valid_ms: asInt(r.valid_ms, 'valid_ms'),
    retry_after_ms: asInt(r.retry_after_ms, 'retry_after_ms'),
  };
}

export function parseAllocate(value) {
  const r = fieldsOf(value, ['allocation', 'lease_ms', 'region_demand', 'total_demand'], 'RL.ALLOCATE');
  return {
    allocation: asInt(r.allocation, 'allocation'),
    lease_ms: asInt(r.lease_ms, 'lease_ms'),
    region_demand: asInt(r.region_demand, 'region_demand'),
    total_demand: asInt(r.total_demand, 'total_demand'),
  };
}

export function parseAcquire(value) {
  const r = fieldsOf(value, ['acquired', 'holder', 'in_flight', 'retry_after_ms'], 'RL.ACQUIRE');
  return {
    acquired: asFlag(r.acquired, 'acquired'),
    holder: r.holder === null || r.holder === undefined ? null : asText(r.holder, 'holder'),
    in_flight: asInt(r.in_flight, 'in_flight'),
    retry_after_ms: asInt(r.retry_after_ms, 'retry_after_ms'),
  };
}

// RL.RELEASE and RL.RENEW: 1 done, 0 not held.
export function parseDone(value) {
  return asFlag(value, 'reply');
}

export function parseSettle(value) {
  if (value === null || value === undefined) return null;
  const r = fieldsOf(value, ['delta', 'remaining'], 'RL.SETTLE');
  return { delta: asInt(r.delta, 'delta', { signed: true }), remaining: asInt(r.remaining, 'remaining') };
}

const INFO_ALWAYS = ['algo', 'limit', 'period_ms', 'capacity', 'remaining', 'reset_after_ms', 'ttl_ms'];
const INFO_OPTIONAL = [
  'tat_us', 'tokens', 'updated_us', 'window_start_ms', 'count', 'previous', 'current', 'entries',
  'logged_units', 'in_flight', 'next_expiry_ms', 'reservations', 'debt',
];
const INFO_SIGNED = new Set(['tokens', 'ttl_ms']);

export function parseInfo(value) {
  check(value, 'RL.INFO');
  if (value === null || value === undefined) return null;
  let pairs;
  if (isMapLike(value)) pairs = entriesOf(value);
  else if (Array.isArray(value) && value.length % 2 === 0) {
    pairs = [];
    for (let i = 0; i < value.length; i += 2) pairs.push([asText(value[i], 'RL.INFO name'), value[i + 1]]);
  } else throw unexpectedReply(`RL.INFO: ${show(value)} is not name/value pairs`);
  const m = new Map(pairs);
  const out = {};
  for (const f of INFO_ALWAYS) {
    if (!m.has(f)) throw unexpectedReply(`RL.INFO: field ${f} missing`);
  }
  out.algo = asText(m.get('algo'), 'algo');
  for (const f of [...INFO_ALWAYS.slice(1), ...INFO_OPTIONAL]) {
    // Fields a newer module adds are ignored.
    if (m.has(f)) out[f] = asInt(m.get(f), f, { signed: INFO_SIGNED.has(f) });
  }
  return out;
}

// CL.THROTTLE: five integers in both protocols, as redis-cell replies.
export function parseThrottle(value) {
  check(value, 'CL.THROTTLE');
  if (!Array.isArray(value) || value.length !== 5) throw unexpectedReply(`CL.THROTTLE: ${show(value)}`);
  const retry = asInt(value[3], 'retry_after', { signed: true });
  if (retry < -1) throw unexpectedReply(`CL.THROTTLE retry_after ${retry}`);
  return {
    limited: asFlag(value[0], 'limited'),
    limit: asInt(value[1], 'limit'),
    remaining: asInt(value[2], 'remaining'),
    retry_after: retry,
    reset_after: asInt(value[4], 'reset_after'),
  };
}
