// One limit across regions (clients/CONTRACT.md section 15): this gateway's reports to the home
// store, as rl-gateway's reporter (clients/gateway/src/regions.rs) sends them. Every TICK_MS the
// engine is asked for the reports due; each goes to the home store as RL.ALLOCATE with the key's
// demand and what this gateway enforces, within a fifth of its lease, and the answer (or null when
// the home did not answer) goes back to the engine, which decides the key by it on the regional
// store. Requests never wait for the home store.
import { hostname } from 'node:os';
import { classify } from '../adapters.js';

// How often the engine is asked for the reports due: well under the shortest `every`.
const TICK_MS = 25;

// The host's name and this process's id: unique among a host's workers. A name stable across
// restarts (`reporter`) lets the home replace a restarted gateway's record at once instead of
// waiting for the old one to age out.
export function defaultReporter() {
  return `${hostname()}:${process.pid}`;
}

export class Reporter {
  constructor({ engine, nowUs, home, region, name, logger }) {
    Object.assign(this, { engine, nowUs, home, region, name, logger });
    this.failing = false;
    this.busy = false;
    // Unref'd: the reports never keep the process alive on their own.
    this.timer = setInterval(() => this.tick(), TICK_MS);
    this.timer.unref?.();
  }

  stop() {
    clearInterval(this.timer);
    this.timer = null;
  }

  async tick() {
    // A round still waiting on the home (a fifth of a lease at most) is not overlapped.
    if (this.busy || this.timer === null) return;
    const reports = this.engine.allocationReports(this.nowUs());
    if (reports.length === 0) return;
    this.busy = true;
    try {
      const answers = await Promise.all(reports.map((r) => this.send(r)));
      let failed = null;
      reports.forEach((report, i) => {
        this.engine.allocated(report, answers[i].answer);
        if (answers[i].error && !failed) failed = { report, error: answers[i].error };
      });
      // One line when the home stops answering and one when it answers again, not one per report.
      if (failed && !this.failing) {
        this.logger.warn?.(`redis-rl: the home store did not answer a report of rule ${failed.report.rule} `
          + `(${failed.error}): each key keeps its allocation until its lease ends`, { rule: failed.report.rule });
        this.failing = true;
      } else if (!failed && this.failing) {
        this.logger.info?.('redis-rl: the home store answers reports again');
        this.failing = false;
      }
    } finally {
      this.busy = false;
    }
  }

  // One report's answer within a fifth of its lease (100 ms at least): a late answer would still
  // be safe, but one stuck on a dead connection must not hold the next report back.
  async send(report) {
    const { terms } = report;
    try {
      const answer = await this.home.allocate({
        key: report.key, limit: terms.limit, region: this.region, reporter: this.name,
        demand: report.demand, held: report.held, reserve: terms.reserve, regions: terms.regions,
        lease: terms.leaseMs,
      }, { timeout: Math.max(100, Math.floor(terms.leaseMs / 5)) });
      return {
        answer: { allocation: answer.allocation, leaseMs: answer.lease_ms, regionDemand: answer.region_demand,
          totalDemand: answer.total_demand },
        error: null,
      };
    } catch (err) {
      return { answer: null, error: classify(err).message };
    }
  }
}
