// The HTTP fields a decision feeds (clients/SPEC.md section 3). Pure: no I/O, no clock, no
// randomness of its own.

// A rule, for RateLimit-Policy: { name, limit, periodMs, capacity, semaphore }.
// An outcome, for RateLimit: { remaining, resetAfterMs, retryAfterMs (a number when it refused) }.

export function refusedOutcome(waitMs) {
  return { remaining: 0, resetAfterMs: waitMs, retryAfterMs: waitMs };
}

export function outcomeOf(decision) {
  return {
    remaining: decision.remaining,
    resetAfterMs: decision.reset_after_ms,
    retryAfterMs: decision.allowed ? null : decision.retry_after_ms,
  };
}

const gcd = (a, b) => {
  while (b !== 0n) [a, b] = [b, a % b];
  return a;
};

// `limit` per `period` as (q, w) with w whole seconds: the fewest whole seconds that hold a
// whole quota (5 per 250 ms is q=20;w=1, 3 per 700 ms is q=30;w=7).
function wholeSecondQuota(limit, periodMs) {
  const ms = BigInt(Math.max(1, periodMs));
  const lim = BigInt(limit);
  if (ms % 1000n === 0n) return [lim, ms / 1000n];
  const unitsMs = lim * 1000n;
  const w = ms / gcd(unitsMs, ms);
  return [(unitsMs * w) / ms, w];
}

// A structured-field string: printable ASCII only, `"` and `\` escaped, anything else `_`.
export function sfString(s) {
  let out = '"';
  for (const c of s) {
    if (c === '"' || c === '\\') out += `\\${c}`;
    else if (c >= ' ' && c <= '~') out += c;
    else out += '_';
  }
  return `${out}"`;
}

export function policyItem(rule) {
  const name = sfString(rule.name);
  if (rule.semaphore) return `${name};q=${rule.capacity};qu="concurrent-requests"`;
  const [q, w] = wholeSecondQuota(rule.limit, rule.periodMs);
  let item = `${name};q=${q};w=${w}`;
  if (BigInt(rule.capacity) !== q) item += `;rl-burst=${rule.capacity}`;
  return item;
}

function resetSeconds(outcome) {
  return Math.ceil((outcome.retryAfterMs ?? outcome.resetAfterMs) / 1000);
}

export function ratelimitItem(rule, outcome) {
  return `${sfString(rule.name)};r=${outcome.remaining};t=${resetSeconds(outcome)}`;
}

// Every field for the rules of one decision, in rule order, as [name, value] pairs; `legacy`
// adds X-RateLimit-* of the rule that constrains most: a refusing one with the longest wait,
// otherwise the one with the fewest units left (the first on ties).
export function render(pairs, legacy = false) {
  if (pairs.length === 0) return [];
  const out = [
    ['RateLimit-Policy', pairs.map(([r]) => policyItem(r)).join(', ')],
    ['RateLimit', pairs.map(([r, o]) => ratelimitItem(r, o)).join(', ')],
  ];
  if (legacy) {
    let best = null;
    const rank = ([, o]) => (o.retryAfterMs !== null && o.retryAfterMs !== undefined ? [0, -o.retryAfterMs] : [1, o.remaining]);
    for (const p of pairs) {
      if (best === null) best = p;
      else {
        const [a1, a2] = rank(p);
        const [b1, b2] = rank(best);
        if (a1 < b1 || (a1 === b1 && a2 < b2)) best = p;
      }
    }
    const [rule, outcome] = best;
    out.push(['X-RateLimit-Limit', String(rule.limit)]);
    out.push(['X-RateLimit-Remaining', String(outcome.remaining)]);
    out.push(['X-RateLimit-Reset', String(resetSeconds(outcome))]);
  }
  return out;
}

// Retry-After in whole seconds: ceil((R + floor(R × jitter × u)) / 1000), never earlier than the
// true wait. `u` is uniform in [0, 1); a negative or NaN jitter counts as 0.
export function retryAfterSeconds(maxRetryMs, jitter, u) {
  const share = (jitter > 0 ? jitter : 0) * Math.min(Math.max(u, 0), 1);
  const extra = share > 0 ? Math.floor(maxRetryMs * share) : 0;
  return Math.ceil((maxRetryMs + extra) / 1000);
}
