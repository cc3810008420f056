//! A deterministic simulator of one limit across regions (`clients/CONTRACT.md` section 15) on
//! a virtual clock: three regions, each with its own store and gateways; a home store the
//! gateways report their demand to with a one-way delay of 50-150 ms; 50 tenants of Zipf-skewed
//! demand, each under one global rule. A contender decides every request; the regional limiters
//! are `rl_core`'s, with the rule's limit replaced by what the region enforces, so what the
//! simulator admits is what the module would. What it measures is in [`Report`]; the README has
//! the tables and how to read them.

pub mod contenders;
pub mod metrics;
mod scenario;

pub use contenders::Contender;
pub use metrics::{Counts, Report};
pub use scenario::{Kind, Scenario};

/// The global rule every tenant is under: `LIMIT` units per `PERIOD_MS`, gcra with a burst of
/// the limit, `RESERVE` held back from the allocations, reported every `EVERY_MS`.
pub const LIMIT: u64 = 1_000;
pub const PERIOD_MS: u64 = 1_000;
pub const BURST: u64 = LIMIT;
pub const RESERVE: u64 = LIMIT / 10;
pub const EVERY_MS: u64 = 2_000;
/// How long a grant may be enforced without a newer one: five reports.
pub const LEASE_MS: u64 = 5 * EVERY_MS;
pub const REGIONS: usize = 3;
pub const TENANTS: usize = 50;
/// Tenant `k` (from 0) asks `TOP_DEMAND / (k + 1)` units a second: Zipf(1.0). The first three
/// are over their limit, the fourth at it, the others under.
pub const TOP_DEMAND: f64 = 4.0 * LIMIT as f64;
/// Each tenant's split of its demand across the regions, rotated by the tenant's index.
pub const SKEW: [f64; REGIONS] = [0.6, 0.3, 0.1];
/// One-way delay between each region and the home: a base per region, jittered by up to
/// `JITTER_MS` either way (so 50-150 ms).
pub const DELAY_MS: [u64; REGIONS] = [60, 100, 140];
pub const JITTER_MS: u64 = 10;
/// Steady demand before the measured time, so every contender starts settled.
pub const WARMUP_MS: u64 = 10_000;
/// The resolution of the counts the metrics read.
pub const SLOT_MS: u64 = 100;

/// The simulator's only randomness: SplitMix64, deterministic from a seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn f64(&mut self) -> f64 {
        (self.u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// An exponential gap, in µs, for a rate in units per second.
    fn gap_us(&mut self, rate: f64) -> f64 {
        -(1.0 - self.f64()).ln() / rate * 1e6
    }
}

/// Tenant `k`'s demand, units a second, before any scenario's change.
pub fn demand(tenant: usize) -> f64 {
    TOP_DEMAND / (tenant + 1) as f64
}

/// Runs `sc` against `c` with `gateways` per region, deterministically from `seed`: the same
/// arrivals, to the same gateways, whatever the contender.
pub fn run(sc: &Scenario, c: &mut dyn Contender, gateways: usize, seed: u64) -> Report {
    let mut rng = Rng::new(seed);
    let end_ms = WARMUP_MS + sc.secs * 1_000;
    let mut counts = Counts::new(end_ms);
    // Per stream (tenant, region): its rate and its next arrival (µs).
    let streams = TENANTS * REGIONS;
    let mut rate = vec![0.0; streams];
    let mut next = vec![f64::INFINITY; streams];
    let mut tick: Vec<(u64, usize, usize)> = Vec::new();
    for ms in 0..end_ms {
        if ms.is_multiple_of(SLOT_MS) {
            for s in 0..streams {
                let r = sc.rate(s / REGIONS, s % REGIONS, ms);
                if r != rate[s] {
                    // Poisson arrivals are memoryless: a new rate draws a new gap from now.
                    rate[s] = r;
                    next[s] = if r > 0.0 {
                        (ms * 1_000) as f64 + rng.gap_us(r)
                    } else {
                        f64::INFINITY
                    };
                }
            }
        }
        c.step(ms, sc);
        if ms.is_multiple_of(SLOT_MS) {
            for s in 0..streams {
                let (tenant, region) = (s / REGIONS, s % REGIONS);
                counts.enforced(tenant, region, ms, c.enforced(tenant, region, ms));
            }
        }
        // This millisecond's arrivals, in the order they arrive: a limiter seeing several
        // regions (the ideal bucket) must not favour one by the order the streams are read.
        let tick_end = ((ms + 1) * 1_000) as f64;
        tick.clear();
        for s in 0..streams {
            while next[s] < tick_end {
                let gw = (rng.u64() % gateways as u64) as usize;
                tick.push((next[s] as u64, s, gw));
                next[s] += rng.gap_us(rate[s]);
            }
        }
        tick.sort_unstable();
        for &(at, s, gw) in &tick {
            let (tenant, region) = (s / REGIONS, s % REGIONS);
            let admitted = c.admit(tenant, region, gw, at);
            counts.record(tenant, region, ms, admitted);
        }
    }
    let mut report = counts.report(sc);
    if let Some((most, excess)) = c.over_limit() {
        report.most_enforced = Some(most as f64 / LIMIT as f64);
        report.excess_units = Some(excess);
    }
    report
}
