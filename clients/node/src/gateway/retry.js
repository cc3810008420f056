// Retrying outgoing calls (clients/SPEC.md "Gateway behaviour" 5): jittered exponential
// backoff, the reply's Retry-After as the lower bound, capped attempts, and one
// Idempotency-Key for every attempt of a non-idempotent call.
import { randomBytes } from 'node:crypto';

const RETRIED = new Set([408, 425, 429, 500, 502, 503, 504]);
const IDEMPOTENT = new Set(['GET', 'HEAD', 'PUT', 'DELETE', 'OPTIONS', 'TRACE']);

// Retry-After as milliseconds: delay-seconds or an HTTP date (a past date is no wait).
export function retryAfterMs(value, now = Date.now()) {
  if (value === null || value === undefined) return null;
  const text = String(value).trim();
  if (/^[0-9]+$/.test(text)) return Number(text) * 1000;
  const at = Date.parse(text);
  return Number.isNaN(at) ? null : Math.max(0, at - now);
}

// `fetch` with retries. Options: `maxAttempts` (default 3), `baseMs` (100), `capMs` (10000),
// `fetch` (default the global), `random` and `sleep` (for tests of the arithmetic).
export async function fetchWithRetry(input, init = {}, options = {}) {
  const { maxAttempts = 3, baseMs = 100, capMs = 10_000, fetch: doFetch = globalThis.fetch, random = Math.random,
    sleep = (ms) => new Promise((r) => setTimeout(r, ms)) } = options;
  const method = String(init.method ?? (input instanceof Request ? input.method : 'GET')).toUpperCase();
  const headers = new Headers(init.headers ?? (input instanceof Request ? input.headers : undefined));
  if (!IDEMPOTENT.has(method) && !headers.has('idempotency-key')) headers.set('idempotency-key', randomBytes(16).toString('hex'));
  let last;
  for (let attempt = 1; ; attempt++) {
    let response = null;
    try {
      response = await doFetch(input, { ...init, headers });
      if (!RETRIED.has(response.status)) return response;
      last = { response };
    } catch (err) {
      last = { error: err };
    }
    if (attempt >= maxAttempts) break;
    const d = Math.min(capMs, baseMs * 2 ** (attempt - 1));
    let wait = d / 2 + random() * (d / 2);
    const told = response && retryAfterMs(response.headers.get('retry-after'));
    if (told !== null && told !== undefined) {
      // A server asking for longer than the cap is answered with its own reply.
      if (told > capMs) return response;
      wait = Math.max(wait, told);
    }
    // The body of a reply we do not return is never read; release it.
    await response?.body?.cancel().catch(() => {});
    await sleep(wait);
  }
  if (last.error) throw last.error;
  return last.response;
}
