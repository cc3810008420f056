// RateLimit-Policy and RateLimit (X-RateLimit-* with `legacy`) for what the typed client decided
// (`rl.admit`, `rl.multi`), rendered by the gateway's engine (clients/SPEC.md section 3): the
// fields every gateway sends, from the one rendering. Needs the native addon, as the gateway does.
import { engine } from './native.js';

// `rules`: one per rule shown, in order: { name, limit, periodMs, capacity, remaining,
// resetAfterMs, retryAfterMs (when it refused), semaphore? }. Returns [name, value] pairs.
export function renderHeaders(rules, legacy = false) {
  return engine().renderHeaders(rules, legacy);
}
