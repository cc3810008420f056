// The breaker, the negative cache and their bounds, on a clock the tests move.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Breaker } from '../src/gateway/breaker.js';
import { Lru, NegativeCache } from '../src/gateway/cache.js';

function clock() {
  const c = { t: 1_000_000, now: () => c.t, u: 0.5, random: () => c.u };
  return c;
}

describe('breaker', () => {
  test('opens after consecutive failures; a success resets the count', () => {
    const c = clock();
    const states = [];
    const b = new Breaker({ failures: 3, openMs: 1000, rampMs: 10_000 }, { now: c.now, random: c.random, onState: (s) => states.push(s) });
    for (const ok of [false, false, true, false, false]) b.report(b.admit('deny'), ok);
    assert.equal(b.current(), 'closed');
    b.report(b.admit('deny'), false);
    assert.equal(b.current(), 'open');
    assert.equal(b.admit('deny'), null);
    assert.deepEqual(states, ['open']);
  });

  test('half-open lets one probe through; a failed probe opens for the whole period again', () => {
    const c = clock();
    const b = new Breaker({ failures: 1, openMs: 1000, rampMs: 10_000 }, { now: c.now, random: c.random });
    b.report(b.admit('deny'), false);
    c.t += 1000;
    const probe = b.admit('fallback');
    assert.equal(probe.probe, true);
    assert.equal(b.admit('fallback'), null, 'one probe at a time');
    b.report(probe, false);
    assert.equal(b.current(), 'open');
    c.t += 999;
    assert.equal(b.current(), 'open');
    c.t += 1;
    assert.equal(b.current(), 'half_open');
  });

  test('ramping: a growing share of fallback and allow routes, every deny route', () => {
    const c = clock();
    const b = new Breaker({ failures: 1, openMs: 1000, rampMs: 10_000 }, { now: c.now, random: c.random });
    b.report(b.admit('deny'), false);
    c.t += 1000;
    b.report(b.admit('deny'), true);
    assert.equal(b.current(), 'ramping');
    c.t += 4000;
    c.u = 0.39;
    assert.notEqual(b.admit('fallback'), null);
    c.u = 0.41;
    assert.equal(b.admit('allow'), null);
    assert.notEqual(b.admit('deny'), null);
    c.t += 6000;
    assert.equal(b.current(), 'closed');
  });

  test('an outcome of a call let through before the breaker opened changes nothing after', () => {
    const c = clock();
    const b = new Breaker({ failures: 2, openMs: 1000, rampMs: 10_000 }, { now: c.now, random: c.random });
    const early = b.admit('deny');
    b.report(b.admit('deny'), false);
    b.report(b.admit('deny'), false);
    assert.equal(b.current(), 'open');
    c.t += 1000;
    b.report(early, true);
    assert.equal(b.current(), 'half_open');
    b.report(early, false);
    const probe = b.admit('deny');
    assert.equal(probe.probe, true);
  });
});

describe('negative cache', () => {
  test('refuses cost >= c for min(R, max), never a cheaper request', () => {
    const c = clock();
    const cache = new NegativeCache(10, c.now);
    cache.refused('read', 'k', 5, 10_000, 250);
    assert.equal(cache.check('read', 'k', 5), 250);
    assert.equal(cache.check('read', 'k', 4), 0);
    assert.equal(cache.check('read', 'other', 5), 0);
    c.t += 100;
    assert.equal(cache.check('read', 'k', 9), 150);
    cache.refused('read', 'k', 5, 40, 250);
    assert.equal(cache.check('read', 'k', 5), 40, 'the newest refusal replaces the entry');
    c.t += 40;
    assert.equal(cache.check('read', 'k', 5), 0);
    assert.equal(cache.lru.size, 0, 'an expired entry is removed');
  });

  test('bounded: the least recently used entry goes first', () => {
    const lru = new Lru(2);
    lru.set('a', 1);
    lru.set('b', 2);
    lru.get('a');
    lru.set('c', 3);
    assert.deepEqual([...lru.map.keys()], ['a', 'c']);
  });
});
