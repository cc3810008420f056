// How late the event loop runs. A process saturated by its callers runs every callback late:
// the timer of a store call's deadline fires long after it was due, and a reply that arrived in
// time waits behind the other callbacks to be read. A call that misses its deadline while the
// loop ran that late tells nothing about the store (clients/CONTRACT.md section 12), so the
// gateway measures it with a timer of its own: every RESOLUTION_MS it notes how much later than
// due it ran. What the lateness means is the engine's to judge (Engine.missed and
// Engine.saturated, clients/SPEC.md section 7). Unref'd, it never keeps the process alive; one
// serves every gateway.
import { performance } from 'node:perf_hooks';

const RESOLUTION_MS = 10;
// Ticks kept: over a second at the resolution (longer the later the loop runs), more than any
// deadline a store call has.
const KEPT = 128;

class LoopLag {
  constructor() {
    this.at = new Float64Array(KEPT);
    this.late = new Float64Array(KEPT);
    this.next = 0;
    this.due = performance.now() + RESOLUTION_MS;
    this.tick = this.tick.bind(this);
    setTimeout(this.tick, RESOLUTION_MS).unref();
  }

  tick() {
    const now = performance.now();
    this.at[this.next] = now;
    this.late[this.next] = Math.max(0, now - this.due);
    this.next = (this.next + 1) % KEPT;
    this.due = now + RESOLUTION_MS;
    setTimeout(this.tick, RESOLUTION_MS).unref();
  }

  // The stall under way: how long the tick now due has waited for the loop.
  stalled() {
    return Math.max(0, performance.now() - this.due);
  }

  // The latest the loop ran (ms) after `since` (performance.now() ms), the stall under way
  // included. A tick's lateness counts from when it was due or from `since`, whichever is later:
  // lateness that began before (a tick already overdue when a request arrived) is not its own.
  since(since) {
    let worst = performance.now() - Math.max(this.due, since);
    for (let n = 1; n <= KEPT; n++) {
      const i = (this.next + KEPT - n) % KEPT;
      if (this.at[i] < since) break;
      worst = Math.max(worst, Math.min(this.late[i], this.at[i] - since));
    }
    return Math.max(0, worst);
  }
}

let shared = null;

export function loopLag() {
  shared ??= new LoopLag();
  return shared;
}
