// Typed requests into the exact arguments of commands.md, each with the keys it touches (for
// cluster routing and script mode) and the parser of its reply. Bounds are the module's to
// check (its errors name the argument); a request only refuses here what cannot be written on
// the wire at all, and RL.MULTI keys in several cluster slots.
import { invalidRequest } from './errors.js';
import * as reply from './reply.js';
import { commonSlot, countArg, durationArg } from './wire.js';

export const ALGOS = ['gcra', 'bucket', 'window', 'sliding', 'log'];

function command(name, args, keys, parse) {
  return { name, args, keys, parse };
}

function key(k, what = 'key') {
  if (typeof k === 'string' || Buffer.isBuffer(k)) return k;
  throw invalidRequest(`${what} must be a string or a Buffer`);
}

function ruleOptions(args, { burst, cost, algo }) {
  if (burst !== undefined && burst !== null) args.push('BURST', countArg(burst, 'BURST'));
  if (cost !== undefined && cost !== null) args.push('COST', countArg(cost, 'COST'));
  if (algo !== undefined && algo !== null) {
    if (!ALGOS.includes(algo)) throw invalidRequest(`ALGO must be one of ${ALGOS.join(', ')}, not ${algo}`);
    args.push('ALGO', algo);
  }
}

// { key, limit, period, burst?, cost?, algo?, dryRun?, reserve?: { id, keep? } }
export function admit(req) {
  const args = [key(req.key), countArg(req.limit, 'limit'), durationArg(req.period, 'period')];
  ruleOptions(args, req);
  if (req.dryRun) args.push('DRYRUN');
  if (req.reserve) {
    args.push('RESERVE', key(req.reserve.id, 'RESERVE id'));
    if (req.reserve.keep !== undefined && req.reserve.keep !== null) {
      args.push('KEEP', durationArg(req.reserve.keep, 'KEEP'));
    }
  }
  return command('RL.ADMIT', args, [args[0]], reply.parseAdmit);
}

// { rules: [{ name, key, limit, period, burst?, cost?, algo? }], dryRun? }
export function multi(req) {
  const rules = req.rules;
  if (!Array.isArray(rules) || rules.length === 0) throw invalidRequest('RL.MULTI needs at least one rule');
  const keys = rules.map((r) => key(r.key));
  commonSlot(keys);
  const args = [String(rules.length), ...keys];
  for (const r of rules) {
    if (typeof r.name !== 'string') throw invalidRequest('a RULE name must be a string');
    args.push('RULE', r.name, countArg(r.limit, 'limit'), durationArg(r.period, 'period'));
    ruleOptions(args, r);
  }
  if (req.dryRun) args.push('DRYRUN');
  return command('RL.MULTI', args, keys, reply.parseMulti);
}

// { key, limit, period, burst?, algo?, want, ttl? }
export function grant(req) {
  const args = [key(req.key), countArg(req.limit, 'limit'), durationArg(req.period, 'period')];
  ruleOptions(args, { burst: req.burst, algo: req.algo });
  args.push('WANT', countArg(req.want, 'WANT'));
  if (req.ttl !== undefined && req.ttl !== null) args.push('TTL', durationArg(req.ttl, 'TTL'));
  return command('RL.GRANT', args, [args[0]], reply.parseGrant);
}

// { key, capacity, lease, holder? }
export function acquire(req) {
  const args = [key(req.key), countArg(req.capacity, 'capacity'), durationArg(req.lease, 'lease')];
  if (req.holder !== undefined && req.holder !== null) args.push('ID', key(req.holder, 'holder'));
  return command('RL.ACQUIRE', args, [args[0]], reply.parseAcquire);
}

export function release(k, holder) {
  return command('RL.RELEASE', [key(k), key(holder, 'holder')], [k], reply.parseDone);
}

export function renew(k, holder, lease) {
  return command('RL.RENEW', [key(k), key(holder, 'holder'), durationArg(lease, 'lease')], [k], reply.parseDone);
}

// `forget`: then forget the reservation, so the id reserves (and is charged) anew.
export function settle(k, id, actual, { forget = false } = {}) {
  const args = [key(k), key(id, 'id'), countArg(actual, 'actual')];
  return command('RL.SETTLE', forget ? [...args, 'FORGET'] : args, [k], reply.parseSettle);
}

export function info(k) {
  return command('RL.INFO', [key(k)], [k], reply.parseInfo);
}

// redis-cell's arguments: the period is a bare number of seconds.
export function throttle(k, maxBurst, count, periodSeconds, quantity) {
  const args = [key(k), countArg(maxBurst, 'max_burst'), countArg(count, 'count'), countArg(periodSeconds, 'period')];
  if (quantity !== undefined && quantity !== null) args.push(countArg(quantity, 'quantity'));
  return command('CL.THROTTLE', args, [k], reply.parseThrottle);
}

// The most demand RL.ALLOCATE takes (units per period): a larger one is sent as this, since only
// its share of the total matters.
const MAX_DEMAND = 1e12;

// RL.ALLOCATE on the home store of a global rule (one limit across regions):
// { key, limit, region, reporter, demand, held, reserve, regions, lease }.
export function allocate(req) {
  const demand = countArg(req.demand, 'demand');
  const args = [key(req.key), countArg(req.limit, 'limit'), key(req.region, 'region'), key(req.reporter, 'reporter'),
    Number(demand) > MAX_DEMAND ? String(MAX_DEMAND) : demand, countArg(req.held, 'held'),
    'RESERVE', countArg(req.reserve, 'RESERVE'), 'REGIONS', countArg(req.regions, 'REGIONS'),
    'LEASE', durationArg(req.lease, 'LEASE')];
  return command('RL.ALLOCATE', args, [args[0]], reply.parseAllocate);
}
