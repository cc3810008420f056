//! The ways of sharing one limit across regions, behind one interface driven from the virtual
//! clock. Every contender enforces with `rl_core`'s gcra limiter on a per-region key (the ideal
//! bucket on one key for all regions), the rule's limit replaced by what it enforces and its
//! burst scaled with it, as a gateway does with `RL.ADMIT key a period BURST max(1, burst*a/limit)`.

mod coordinated;
mod doorman;

pub use coordinated::{Coordinated, Home, Reporting};

use rl_core::limiter::Limiter;
use rl_core::rule::{Algo, Rule};

use crate::{Scenario, BURST, LIMIT, PERIOD_MS, REGIONS, TENANTS};

pub trait Contender {
    /// Moves the contender's own clock to `ms` (its reports, the home's answers).
    fn step(&mut self, ms: u64, sc: &Scenario);
    /// Decides one unit of `tenant` arriving at gateway `gw` of `region` at `at_us`.
    fn admit(&mut self, tenant: usize, region: usize, gw: usize, at_us: u64) -> bool;
    /// The limit `region` enforces for `tenant` at `ms` (the least of its gateways'); `None`
    /// with no regional limit.
    fn enforced(&self, tenant: usize, region: usize, ms: u64) -> Option<u64>;
    /// The most any tenant's regions enforced at once, summed; and the most units their sum
    /// was above the limit in one cycle of reports (its excess integrated over time). `None`
    /// with no regional limits.
    fn over_limit(&self) -> Option<(u64, f64)> {
        None
    }
}

/// A key's limiter, admitting one unit under a limit of `a` units per period (none at 0).
fn admit_under(limiter: &mut Limiter, a: u64, at_us: u64) -> bool {
    if a == 0 {
        return false;
    }
    let burst = (u128::from(BURST) * u128::from(a) / u128::from(LIMIT)).max(1) as u64;
    let Ok(rule) = Rule::new(Algo::Gcra, a, PERIOD_MS * 1_000, Some(burst)) else {
        return false;
    };
    limiter
        .admit(Algo::Gcra, rule, 1, at_us, false)
        .is_ok_and(|d| d.allowed)
}

fn fresh(n: usize) -> Vec<Limiter> {
    let Ok(rule) = Rule::new(Algo::Gcra, LIMIT, PERIOD_MS * 1_000, Some(BURST)) else {
        return vec![];
    };
    vec![Limiter::new(Algo::Gcra, rule); n]
}

/// Each region enforces a fixed limit: `LIMIT / 3` (the static split) or `LIMIT` (no
/// coordination at all: the "quota that doubled").
pub struct Fixed {
    limit: u64,
    keys: Vec<Limiter>,
}

impl Fixed {
    pub fn split() -> Fixed {
        Fixed {
            limit: LIMIT / REGIONS as u64,
            keys: fresh(TENANTS * REGIONS),
        }
    }

    pub fn uncoordinated() -> Fixed {
        Fixed {
            limit: LIMIT,
            keys: fresh(TENANTS * REGIONS),
        }
    }
}

impl Contender for Fixed {
    fn step(&mut self, _: u64, _: &Scenario) {}
    fn admit(&mut self, tenant: usize, region: usize, _: usize, at_us: u64) -> bool {
        admit_under(&mut self.keys[tenant * REGIONS + region], self.limit, at_us)
    }
    fn enforced(&self, _: usize, _: usize, _: u64) -> Option<u64> {
        Some(self.limit)
    }
    fn over_limit(&self) -> Option<(u64, f64)> {
        let sum = self.limit * REGIONS as u64;
        let per_cycle = sum.saturating_sub(LIMIT) * crate::EVERY_MS / PERIOD_MS;
        Some((sum, per_cycle as f64))
    }
}

/// One limiter per tenant seeing every region's requests at once, with no delay: what a single
/// global store would admit if reaching it cost nothing.
pub struct Ideal {
    keys: Vec<Limiter>,
}

impl Ideal {
    pub fn new() -> Ideal {
        Ideal {
            keys: fresh(TENANTS),
        }
    }
}

impl Default for Ideal {
    fn default() -> Self {
        Ideal::new()
    }
}

impl Contender for Ideal {
    fn step(&mut self, _: u64, _: &Scenario) {}
    fn admit(&mut self, tenant: usize, _: usize, _: usize, at_us: u64) -> bool {
        admit_under(&mut self.keys[tenant], LIMIT, at_us)
    }
    fn enforced(&self, _: usize, _: usize, _: u64) -> Option<u64> {
        None
    }
}
