//! The contenders with a home: every gateway reports each active key's demand every `EVERY_MS`
//! (its own phase), the report travels to the home with its region's delay, the home answers,
//! and the answer travels back. A message is lost if its region is cut from home when it is
//! sent or when it would arrive.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rl_core::allocate::{allocate, Report, Reporter, Terms};
use rl_core::limiter::Limiter;

use super::doorman::Store;
use super::{admit_under, fresh, Contender};
use crate::{
    Rng, Scenario, DELAY_MS, EVERY_MS, JITTER_MS, LEASE_MS, LIMIT, PERIOD_MS, REGIONS, RESERVE,
    TENANTS,
};

/// The terms of every tenant's rule, as the home and the gateways read them.
pub const TERMS: Terms = Terms {
    limit: LIMIT,
    reserve: RESERVE,
    regions: REGIONS as u64,
    lease_ms: LEASE_MS,
};

const NAMES: [&[u8]; REGIONS] = [b"eu", b"us", b"ap"];

/// What the home computes.
pub enum Home {
    /// `rl_core::allocate`, the home store's `RL.ALLOCATE`: one record list per tenant.
    Design(Vec<Vec<Reporter>>),
    /// Doorman's proportional share: one lease store per tenant.
    Doorman(Vec<Store>),
}

impl Home {
    pub fn design() -> Home {
        Home::Design(vec![vec![]; TENANTS])
    }

    pub fn doorman() -> Home {
        Home::Doorman((0..TENANTS).map(|_| Store::default()).collect())
    }
}

/// Which keys a gateway reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reporting {
    /// Only keys with demand since the last report.
    Demand,
    /// Those, and once more a key whose demand stopped (reporting none frees its share).
    Release,
    /// Those, and then until the home has seen it hold no more than its last grant: after
    /// the report of none, one more telling the home it holds the smaller grant it was
    /// answered. Otherwise the home, which cannot know the answer arrived, counts the silent
    /// reporter at what it held when it last reported (up to the safe share) until it is
    /// forgotten, `FORGET_LEASES` leases later.
    Confirm,
}

/// A gateway's last answer for a key: the grant, when it sent the report that was answered and
/// when the home answered (Doorman's lease runs from the home's answer, as its expiry is an
/// instant the server gives).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Answer {
    grant: u64,
    /// Below the region's target, read from the answer's demands as rl-gateway reads them:
    /// the others' holds capped it, and the gateway asks again a quarter of the cycle later.
    capped: bool,
    sent_ms: u64,
    home_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Msg {
    Report {
        tenant: usize,
        gw: usize,
        demand: u64,
        held: u64,
        sent_ms: u64,
    },
    Reply {
        tenant: usize,
        gw: usize,
        answer: Answer,
    },
}

pub struct Coordinated {
    home: Home,
    gateways: usize,
    reporting: Reporting,
    /// Per gateway (`region * gateways + gw`) and tenant: units seen since its last report,
    /// and its last report's demand and held (none before the first).
    seen: Vec<u64>,
    /// Units seen in the current quarter of the cycle, and when the key was last reported.
    recent: Vec<u64>,
    since: Vec<u64>,
    /// The rule's terms (the reserve can be changed to measure what it buys).
    terms: Terms,
    /// The most any tenant's regions enforced at once, summed (for each region, the most of
    /// its gateways'), by the millisecond.
    most: u64,
    /// Per tenant, the units its regions' limits summed above the limit in the current cycle
    /// (the sum's excess integrated over time), and the most of any cycle.
    excess: Vec<f64>,
    most_excess: f64,
    /// Whether a key whose demand jumps is reported at once rather than at the cycle's end.
    early: bool,
    reported: Vec<Option<(u64, u64)>>,
    last: Vec<Option<Answer>>,
    /// Per tenant and region: the region's key.
    keys: Vec<Limiter>,
    /// Each gateway reports on its own phase of the cycle, drawn from the seed.
    phases: Vec<u64>,
    queue: BinaryHeap<Reverse<(u64, u64, Msg)>>,
    seq: u64,
    net: Rng,
}

impl Coordinated {
    pub fn new(home: Home, reporting: Reporting, gateways: usize, seed: u64) -> Coordinated {
        let n = REGIONS * gateways * TENANTS;
        let mut net = Rng::new(seed ^ 0x6e65_7477_6f72_6b00);
        let phases = (0..REGIONS * gateways)
            .map(|_| net.u64() % EVERY_MS)
            .collect();
        Coordinated {
            home,
            gateways,
            reporting,
            seen: vec![0; n],
            recent: vec![0; n],
            since: vec![0; n],
            early: false,
            terms: TERMS,
            most: 0,
            excess: vec![0.0; TENANTS],
            most_excess: 0.0,
            reported: vec![None; n],
            last: vec![None; n],
            keys: fresh(TENANTS * REGIONS),
            queue: BinaryHeap::new(),
            seq: 0,
            phases,
            net,
        }
    }

    /// The design with another reserve, units per period.
    pub fn reserve(mut self, reserve: u64) -> Coordinated {
        self.terms.reserve = reserve;
        self
    }

    /// Reports a key off its cycle (at most every quarter of it) when its demand jumps.
    pub fn early(mut self) -> Coordinated {
        self.early = true;
        self
    }

    fn region(&self, gw: usize) -> usize {
        gw / self.gateways
    }

    fn send(&mut self, at_ms: u64, region: usize, msg: Msg) {
        let jitter = self.net.u64() % (2 * JITTER_MS + 1);
        let deliver = at_ms + DELAY_MS[region] + jitter - JITTER_MS;
        self.seq += 1;
        self.queue.push(Reverse((deliver, self.seq, msg)));
    }

    /// What gateway `gw` enforces for `tenant` at `ms`.
    fn enforced(&self, gw: usize, tenant: usize, ms: u64) -> u64 {
        let last = self.last[gw * TENANTS + tenant];
        match self.home {
            Home::Design(_) => self.terms.enforced(
                last.map(|a| a.grant),
                ms.saturating_sub(last.map_or(0, |a| a.sent_ms)),
            ),
            Home::Doorman(_) => last
                .filter(|a| ms < a.home_ms + LEASE_MS)
                .map_or(0, |a| a.grant),
        }
    }

    /// What the region's key is admitted under for a unit arriving at gateway `gw`: the
    /// gateway's own allocation for the design (each gateway of a region holds the region's);
    /// for Doorman, whose clients are the gateways, the sum of the region's leases.
    fn limit(&self, gw: usize, tenant: usize, ms: u64) -> u64 {
        match self.home {
            Home::Design(_) => self.enforced(gw, tenant, ms),
            Home::Doorman(_) => {
                let first = self.region(gw) * self.gateways;
                (first..first + self.gateways)
                    .map(|g| self.enforced(g, tenant, ms))
                    .sum()
            }
        }
    }

    fn answer(
        &mut self,
        tenant: usize,
        gw: usize,
        demand: u64,
        held: u64,
        ms: u64,
    ) -> Option<(u64, bool)> {
        let region = self.region(gw);
        match &mut self.home {
            Home::Design(records) => {
                let records = &mut records[tenant];
                let report = Report {
                    region: NAMES[region].to_vec(),
                    id: format!("g{}", gw % self.gateways).into_bytes(),
                    demand,
                    held,
                };
                let a = allocate(&self.terms, &report, records, ms).ok()?;
                records
                    .retain(|r| !a.forgotten.contains(&r.field()) && r.field() != a.record.field());
                records.push(a.record);
                let target = self.terms.target(a.region_demand, a.total_demand);
                Some((a.allocation, a.allocation < target))
            }
            Home::Doorman(stores) => {
                let has = stores[tenant].decide(LIMIT as f64, gw, demand as f64, ms, LEASE_MS);
                Some((has as u64, false))
            }
        }
    }
}

impl Contender for Coordinated {
    fn step(&mut self, ms: u64, sc: &Scenario) {
        while let Some(Reverse((at, _, msg))) = self.queue.peek().copied() {
            if at > ms {
                break;
            }
            self.queue.pop();
            match msg {
                Msg::Report {
                    tenant,
                    gw,
                    demand,
                    held,
                    sent_ms,
                } => {
                    let region = self.region(gw);
                    if sc.cut(region, sent_ms, true) || sc.cut(region, ms, true) {
                        continue;
                    }
                    if let Some((grant, capped)) = self.answer(tenant, gw, demand, held, ms) {
                        let answer = Answer {
                            grant,
                            capped,
                            sent_ms,
                            home_ms: ms,
                        };
                        self.send(ms, region, Msg::Reply { tenant, gw, answer });
                    }
                }
                Msg::Reply { tenant, gw, answer } => {
                    let region = self.region(gw);
                    if sc.cut(region, answer.home_ms, false) || sc.cut(region, ms, false) {
                        continue;
                    }
                    let i = gw * TENANTS + tenant;
                    // A late answer to an older report never replaces a newer one.
                    if self.last[i].is_some_and(|l| l.sent_ms >= answer.sent_ms) {
                        continue;
                    }
                    self.last[i] = Some(answer);
                    // Granted less than it said it held: as rl-gateway does, it tells the home
                    // at once (with the demand it last reported), which counts it at the larger
                    // until then.
                    if let (true, Home::Design(_), Some((demand, held))) =
                        (self.early, &self.home, self.reported[i])
                    {
                        let now_held = self.enforced(gw, tenant, ms);
                        if now_held < held {
                            self.reported[i] = Some((demand, now_held));
                            let msg = Msg::Report {
                                tenant,
                                gw,
                                demand,
                                held: now_held,
                                sent_ms: ms,
                            };
                            self.send(ms, region, msg);
                        }
                    }
                }
            }
        }
        if ms.is_multiple_of(EVERY_MS) {
            for e in &mut self.excess {
                self.most_excess = self.most_excess.max(std::mem::take(e));
            }
        }
        for tenant in 0..TENANTS {
            let sum: u64 = (0..REGIONS)
                .map(|r| {
                    (r * self.gateways..(r + 1) * self.gateways)
                        .map(|gw| self.limit(gw, tenant, ms))
                        .max()
                        .unwrap_or(0)
                })
                .sum();
            self.most = self.most.max(sum);
            self.excess[tenant] += sum.saturating_sub(LIMIT) as f64 / PERIOD_MS as f64;
        }
        let quarter = EVERY_MS / 4;
        for gw in 0..REGIONS * self.gateways {
            let at = ms + self.phases[gw];
            if !at.is_multiple_of(quarter) {
                continue;
            }
            let regular = at.is_multiple_of(EVERY_MS);
            for tenant in 0..TENANTS {
                let i = gw * TENANTS + tenant;
                let recent = std::mem::take(&mut self.recent[i]);
                let held = self.enforced(gw, tenant, ms);
                let report = if regular {
                    match (self.reporting, self.reported[i]) {
                        _ if self.seen[i] > 0 => true,
                        (_, None) | (Reporting::Demand, _) => false,
                        (Reporting::Release, Some((d, _))) => d > 0,
                        (Reporting::Confirm, Some((d, h))) => d > 0 || h > held,
                    }
                } else {
                    // Off the cycle, a jump: the last quarter's rate half as much again as the
                    // demand last reported, or half of it (and 20 units a second apart); or a
                    // grant smaller than the hold last reported, so the home hears at once that
                    // the region holds less and frees its share for the others.
                    let rate = recent * PERIOD_MS / quarter;
                    let last = self.reported[i].map_or(0, |(d, _)| d);
                    let capped = self.last[i].is_some_and(|a| a.capped);
                    self.early && (rate.abs_diff(last) >= (last / 2).max(20) || capped)
                };
                if !report {
                    continue;
                }
                let seen = std::mem::take(&mut self.seen[i]);
                let since = std::mem::replace(&mut self.since[i], ms);
                let span = if regular { ms - since } else { quarter };
                let counted = if regular { seen } else { recent };
                let demand = counted * PERIOD_MS / span.max(1);
                self.reported[i] = Some((demand, held));
                let msg = Msg::Report {
                    tenant,
                    gw,
                    demand,
                    held,
                    sent_ms: ms,
                };
                self.send(ms, self.region(gw), msg);
            }
        }
    }

    fn admit(&mut self, tenant: usize, region: usize, gw: usize, at_us: u64) -> bool {
        let gw = region * self.gateways + gw;
        self.seen[gw * TENANTS + tenant] += 1;
        self.recent[gw * TENANTS + tenant] += 1;
        let a = self.limit(gw, tenant, at_us / 1_000);
        admit_under(&mut self.keys[tenant * REGIONS + region], a, at_us)
    }

    fn over_limit(&self) -> Option<(u64, f64)> {
        let current = self.excess.iter().copied().fold(0.0, f64::max);
        Some((self.most, self.most_excess.max(current)))
    }

    fn enforced(&self, tenant: usize, region: usize, ms: u64) -> Option<u64> {
        let first = region * self.gateways;
        (first..first + self.gateways)
            .map(|gw| self.limit(gw, tenant, ms))
            .min()
    }
}
