// One breaker per store (clients/SPEC.md "Gateway behaviour" 3): closed, open, half-open with
// one probe at a time, then a linear ramp back.
export const STATES = ['closed', 'open', 'half_open', 'ramping'];

export class Breaker {
  constructor({ failures, openMs, rampMs }, { now = Date.now, random = Math.random, onState } = {}) {
    Object.assign(this, { failures, openMs, rampMs, now, random, onState });
    this.state = 'closed';
    this.consecutive = 0;
    this.until = 0;
    this.probing = false;
    this.rampStart = 0;
    this.openings = 0;
  }

  configure({ failures, openMs, rampMs }) {
    Object.assign(this, { failures, openMs, rampMs });
  }

  set(state) {
    if (state !== this.state) {
      this.state = state;
      this.onState?.(state);
    }
  }

  current() {
    if (this.state === 'open' && this.now() >= this.until) this.set('half_open');
    if (this.state === 'ramping' && this.now() - this.rampStart >= this.rampMs) this.set('closed');
    return this.state;
  }

  // Whether a request goes to the store: a ticket to report with, or null for the posture.
  // `deny` routes always go to the store while ramping: they admitted nothing during the
  // outage, so their keys hold no catch-up burst.
  admit(mode) {
    const state = this.current();
    if (state === 'closed') return { probe: false, epoch: this.epoch() };
    if (state === 'open') return null;
    if (state === 'half_open') {
      if (this.probing) return null;
      this.probing = true;
      return { probe: true, epoch: this.epoch() };
    }
    const share = (this.now() - this.rampStart) / this.rampMs;
    if (mode === 'deny' || this.random() < share) return { probe: false, epoch: this.epoch() };
    return null;
  }

  // The count of openings: a call let through before the breaker opened changes nothing after.
  epoch() {
    return this.openings;
  }

  report(ticket, ok) {
    if (ticket.probe) {
      this.probing = false;
      if (ok) {
        if (this.rampMs === 0) this.set('closed');
        else {
          this.rampStart = this.now();
          this.set('ramping');
        }
        this.consecutive = 0;
      } else this.open();
      return;
    }
    if (ticket.epoch !== this.epoch() || (this.state !== 'closed' && this.state !== 'ramping')) return;
    if (ok) this.consecutive = 0;
    else if (++this.consecutive >= this.failures) this.open();
  }

  // A request that needed no store call (its grants spent locally) decides nothing; a probe's
  // slot goes to the next request.
  unused(ticket) {
    if (ticket.probe) this.probing = false;
  }

  open() {
    this.openings += 1;
    this.consecutive = 0;
    this.until = this.now() + this.openMs;
    this.set('open');
  }
}
