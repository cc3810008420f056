//! The demand scenarios and the network's outages, on the measured timeline (after the warm-up).

use crate::{demand, REGIONS, SKEW, WARMUP_MS};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Each tenant's demand split 60/30/10 across the regions (rotated by tenant), constant.
    Steady,
    /// The demand's centre goes once around the regions over the run (a day in five minutes of
    /// the full run: 288 times faster than the sun).
    Diurnal,
    /// From a third of the run to two thirds, one tenant asks ten times its whole demand in
    /// one region.
    Flash,
    /// At a third of the run, region 0's traffic moves to region 1 in one step.
    Failover,
    /// Churn: every tenant's demand flips between region 0 (the nearest home) and region 2 (the
    /// farthest), 90/10 then 10/90, every report: allocations never settle, and a region that
    /// shrinks enforces its old grant until the answer reaches it.
    Swing,
    /// Steady demand; the home store is unreachable for five reports from a third of the run.
    HomeDown,
    /// At a third of the run every tenant's demand in region 0 triples, so region 2's share
    /// falls; the home's answers to region 2 are lost (its reports arrive: a call that timed
    /// out after the home ran it) for one and a half leases.
    LostReplies,
    /// Steady demand; region 2 cannot reach home from a third of the run for one and a half
    /// leases.
    Partition,
}

pub struct Scenario {
    pub name: &'static str,
    pub kind: Kind,
    /// The measured time, after the warm-up.
    pub secs: u64,
}

/// The flash crowd's tenant (its demand is under its limit before) and region.
pub const FLASH_TENANT: usize = 9;
pub const FLASH_REGION: usize = 0;
pub const FLASH_FACTOR: f64 = 10.0;
/// The region partitioned from home.
pub const CUT_REGION: usize = 2;

impl Scenario {
    pub fn new(kind: Kind, secs: u64) -> Scenario {
        let name = match kind {
            Kind::Steady => "steady skewed split",
            Kind::Diurnal => "diurnal",
            Kind::Flash => "flash crowd",
            Kind::Failover => "failover",
            Kind::Swing => "swing between regions every report",
            Kind::HomeDown => "home down for five reports",
            Kind::Partition => "region partitioned past its lease",
            Kind::LostReplies => "surge while one region's answers are lost",
        };
        Scenario { name, kind, secs }
    }

    /// Every scenario, `secs` long; the diurnal one five times that, its day.
    pub fn all(secs: u64) -> Vec<Scenario> {
        [
            Kind::Steady,
            Kind::Diurnal,
            Kind::Flash,
            Kind::Failover,
            Kind::Swing,
            Kind::HomeDown,
            Kind::Partition,
            Kind::LostReplies,
        ]
        .into_iter()
        .map(|k| Scenario::new(k, if k == Kind::Diurnal { 5 * secs } else { secs }))
        .collect()
    }

    fn third_ms(&self) -> u64 {
        self.secs * 1_000 / 3
    }

    /// The instants (ms of the measured timeline) at which demand moves: where convergence is
    /// timed from. Outages end where their grants do, not when demand moves.
    pub fn shifts(&self) -> Vec<u64> {
        match self.kind {
            Kind::Flash => vec![self.third_ms(), 2 * self.third_ms()],
            Kind::Failover | Kind::LostReplies => vec![self.third_ms()],
            _ => vec![],
        }
    }

    /// When the outage is, if any: `[from, to)` ms of the measured timeline.
    pub fn outage(&self) -> Option<(u64, u64)> {
        let from = self.third_ms();
        match self.kind {
            Kind::HomeDown => Some((from, from + 5 * crate::EVERY_MS)),
            Kind::Partition | Kind::LostReplies => Some((from, from + 3 * crate::LEASE_MS / 2)),
            _ => None,
        }
    }

    /// The measured time of simulator time `ms`: `None` during the warm-up.
    fn at(ms: u64) -> Option<u64> {
        ms.checked_sub(WARMUP_MS)
    }

    /// Tenant `t`'s rate in `region` at simulator time `ms`, units a second.
    pub fn rate(&self, t: usize, region: usize, ms: u64) -> f64 {
        let share = |r: usize| SKEW[(r + t) % REGIONS];
        let base = demand(t) * share(region);
        let Some(now) = Scenario::at(ms) else {
            // The warm-up is the start of the measured time held still.
            return match self.kind {
                Kind::Diurnal | Kind::Swing => self.rate(t, region, WARMUP_MS),
                _ => base,
            };
        };
        let third = self.third_ms();
        match self.kind {
            Kind::Steady | Kind::HomeDown | Kind::Partition => base,
            Kind::Diurnal => demand(t) * self.diurnal(t, region, now),
            Kind::Flash => {
                if t == FLASH_TENANT && region == FLASH_REGION && (third..2 * third).contains(&now)
                {
                    FLASH_FACTOR * demand(t)
                } else {
                    base
                }
            }
            Kind::Swing => {
                let flipped = (now / crate::EVERY_MS) % 2 == 1;
                let share = match (region, flipped) {
                    (1, _) => 0.0,
                    (0, false) | (2, true) => 0.9,
                    _ => 0.1,
                };
                demand(t) * share
            }
            Kind::LostReplies if region == 0 && now >= third => 3.0 * base,
            Kind::LostReplies => base,
            Kind::Failover => match region {
                _ if now < third => base,
                0 => 0.0,
                1 => demand(t) * (share(0) + share(1)),
                _ => base,
            },
        }
    }

    /// Tenant `t`'s share in `region` at `now`: its skew weighted by a sun that goes once round
    /// the regions in the run.
    fn diurnal(&self, t: usize, region: usize, now: u64) -> f64 {
        let turn = now as f64 / (self.secs * 1_000) as f64;
        let weight = |r: usize| {
            let phase = std::f64::consts::TAU * (turn - r as f64 / REGIONS as f64);
            SKEW[(r + t) % REGIONS] * (1.0 + 0.9 * phase.cos())
        };
        let total: f64 = (0..REGIONS).map(weight).sum();
        weight(region) / total
    }

    /// Whether a message between `region` and home is lost at simulator time `ms`: a report
    /// (`to_home`) or an answer.
    pub fn cut(&self, region: usize, ms: u64, to_home: bool) -> bool {
        let (Some(now), Some((from, to))) = (Scenario::at(ms), self.outage()) else {
            return false;
        };
        let during = (from..to).contains(&now);
        match self.kind {
            Kind::HomeDown => during,
            Kind::Partition => during && region == CUT_REGION,
            Kind::LostReplies => during && region == CUT_REGION && !to_home,
            _ => false,
        }
    }
}
