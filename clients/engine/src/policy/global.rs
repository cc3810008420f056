//! `rules.<name>.global` and the policy's `regions` (section 15): a rule whose limit is shared
//! by the regions named there, each enforcing on its own store the allocation the home store
//! answers it.

use std::time::Duration;

use rl_core::allocate::{valid_name, Terms, MAX_REGIONS};
use rl_core::rule::{Algo, Rule};
use serde::Deserialize;

use super::field::duration;
use super::{invalid, PolicyError, RuleKind, RuleSpec};

/// A lease is this many reports unless the rule says: a region keeps its allocation through
/// four missed reports.
const LEASE_REPORTS: u32 = 5;
/// The shortest `every`: each report is a call to the home store per active key.
const MIN_EVERY: Duration = Duration::from_millis(100);
const MAX_EVERY_TEXT: &str = "1h";
const MAX_EVERY_US: u64 = 3_600_000_000;
/// The longest lease: a day.
const MAX_LEASE_US: u64 = 86_400_000_000;

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGlobal {
    reserve: f64,
    every: String,
    lease: Option<String>,
}

/// How a global rule's limit is shared.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GlobalSpec {
    /// The share of the limit held back from every allocation, in [0, 1).
    pub reserve: f64,
    /// How often each gateway reports its demand and is answered its region's allocation.
    pub every: Duration,
    /// How long an allocation may be enforced without a newer one.
    pub lease: Duration,
    /// The regions that share it (the policy's `regions`).
    pub regions: u64,
}

impl RawGlobal {
    pub(super) fn validate(
        &self,
        path: &str,
        kind: &RuleKind,
        regions: u64,
    ) -> Result<GlobalSpec, PolicyError> {
        let at = |field: &str| format!("{path}.{field}");
        if !matches!(kind, RuleKind::Rate(_)) {
            return Err(invalid(
                path,
                "a semaphore rule (concurrency) counts in-flight requests, not a limit to share",
            ));
        }
        if regions == 0 {
            return Err(invalid(
                path,
                "a global rule needs the policy's `regions`: the names of the regions that share it",
            ));
        }
        if !(0.0..1.0).contains(&self.reserve) {
            return Err(invalid(
                at("reserve"),
                format!(
                    "must be in [0, 1): the share of the limit held back (got {})",
                    self.reserve
                ),
            ));
        }
        let every = duration(&at("every"), &self.every, MAX_EVERY_US, MAX_EVERY_TEXT)?;
        if every < MIN_EVERY {
            return Err(invalid(at("every"), "must be at least 100ms"));
        }
        let lease = match &self.lease {
            None => every.saturating_mul(LEASE_REPORTS),
            Some(text) => duration(&at("lease"), text, MAX_LEASE_US, "1d")?,
        };
        if lease <= every {
            return Err(invalid(
                at("lease"),
                "must be longer than every: an allocation must outlive the report that renews it",
            ));
        }
        Ok(GlobalSpec {
            reserve: self.reserve,
            every,
            lease,
            regions,
        })
    }
}

/// The policy's `regions`: distinct names, each a valid region name.
pub(super) fn validate_regions(regions: &[String]) -> Result<(), PolicyError> {
    if regions.len() as u64 > MAX_REGIONS {
        return Err(invalid("regions", format!("at most {MAX_REGIONS} regions")));
    }
    for (i, name) in regions.iter().enumerate() {
        if !valid_name(name.as_bytes()) {
            return Err(invalid(
                format!("regions[{i}]"),
                "must be 1 to 64 bytes of letters, digits, '-', '_', '.' and ':'",
            ));
        }
        if let Some(first) = regions.iter().position(|n| n == name).filter(|&f| f < i) {
            return Err(invalid(
                format!("regions[{i}]"),
                format!("'{name}' is also regions[{first}]"),
            ));
        }
    }
    Ok(())
}

impl super::Policy {
    /// Whether a gateway of `region` (or of none) may enforce this policy: a global rule needs
    /// a region, and the region must be one the policy names.
    pub fn require_region(&self, region: Option<&str>) -> Result<(), PolicyError> {
        if let Some(region) = region {
            if !self.regions.iter().any(|r| r == region) {
                return Err(invalid(
                    "regions",
                    format!(
                        "this gateway's region '{region}' is not one of [{}]",
                        self.regions.join(", ")
                    ),
                ));
            }
            return Ok(());
        }
        match self.rules.iter().find(|(_, r)| r.global.is_some()) {
            Some((name, _)) => Err(invalid(
                format!("rules.{name}.global"),
                "a global rule is enforced by allocation, and this gateway was given no region (--region NAME, with --home)",
            )),
            None => Ok(()),
        }
    }
}

impl GlobalSpec {
    /// The terms the home store allocates `rule`'s limit by (the limit of the caller's plan
    /// or override, when it has one).
    pub fn terms(&self, rule: &Rule) -> Terms {
        let limit = rule.limit();
        // Rounded down, so a reserve of 0.1 of 10,000 is 1,000 and never more than asked.
        let reserve = (limit as f64 * self.reserve) as u64;
        Terms {
            limit,
            reserve: reserve.min(limit.saturating_sub(1)),
            regions: self.regions,
            lease_ms: u64::try_from(self.lease.as_millis()).unwrap_or(u64::MAX),
        }
    }
}

impl RuleSpec {
    /// This rule with its limit replaced by a region's `allocation` (at least 1), its burst
    /// scaled alike (what a full bucket holds stays the same time's worth), or `None` when
    /// the rule is not a rate rule or the numbers are not a rule the module takes.
    pub fn allocated(&self, allocation: u64) -> Option<RuleSpec> {
        let RuleKind::Rate(rate) = &self.kind else {
            return None;
        };
        let limit = rate.rule.limit();
        let burst = match rate.algo {
            Algo::Gcra | Algo::Bucket if rate.burst_given => {
                let scaled = u128::from(rate.rule.burst()) * u128::from(allocation)
                    / u128::from(limit.max(1));
                Some(u64::try_from(scaled).unwrap_or(u64::MAX).max(1))
            }
            _ => None,
        };
        let rule = Rule::new(rate.algo, allocation, rate.rule.period_us(), burst).ok()?;
        let mut spec = self.clone();
        spec.kind = RuleKind::Rate(super::RateSpec { rule, ..*rate });
        Some(spec)
    }
}
