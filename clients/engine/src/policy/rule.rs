//! A rule as written (`rules.<name>`), and its validation into a rule the module accepts. Plans
//! and overrides merge their numbers into it and validate it again, so it stands apart from the
//! document that holds it.

use std::time::Duration;

use rl_core::request::grant::{DEFAULT_TTL_US, MAX_TTL_US};
use rl_core::rule::{
    check_cost, Algo, Rule, MAX_COUNT, MAX_PERIOD_TEXT, MAX_PERIOD_US, MAX_SEMAPHORE_CAPACITY,
};
use serde::Deserialize;

use super::field::{core_message, duration};
use super::global::RawGlobal;
use super::RuleKind;
use super::{header_rule, invalid, ChargeOn, GrantSpec, KeyTemplate, PolicyError, RateSpec};
use super::{RuleSpec, SemaphoreSpec};
use crate::headers::Prepared;

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRule {
    key: String,
    algo: Option<String>,
    pub(super) limit: Option<u64>,
    pub(super) period: Option<String>,
    pub(super) burst: Option<u64>,
    pub(super) cost: Option<u64>,
    public: Option<bool>,
    shadow: Option<bool>,
    settle: Option<bool>,
    durable: Option<bool>,
    expect_refusals: Option<f64>,
    grant: Option<RawGrant>,
    charge: Option<RawCharge>,
    pub(super) concurrency: Option<u64>,
    pub(super) lease: Option<String>,
    pub(super) global: Option<RawGlobal>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct RawCharge {
    on_status: Vec<u16>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct RawGrant {
    want: u64,
    ttl: Option<String>,
}

impl RawRule {
    pub(super) fn validate(self, path: &str, name: &str) -> Result<RuleSpec, PolicyError> {
        let at = |field: &str| format!("{path}.{field}");
        let key = KeyTemplate::parse(&self.key).map_err(|m| invalid(at("key"), m))?;
        let kind = if let Some(concurrency) = self.concurrency {
            let rate_fields = [
                ("algo", self.algo.is_some()),
                ("limit", self.limit.is_some()),
                ("period", self.period.is_some()),
                ("burst", self.burst.is_some()),
                ("cost", self.cost.is_some()),
                ("settle", self.settle.is_some()),
                ("grant", self.grant.is_some()),
                ("charge", self.charge.is_some()),
            ];
            if let Some((field, _)) = rate_fields.iter().find(|(_, given)| *given) {
                return Err(invalid(
                    at(field),
                    "a semaphore rule (concurrency) takes no rate field or grant",
                ));
            }
            if !(1..=MAX_SEMAPHORE_CAPACITY).contains(&concurrency) {
                return Err(invalid(
                    at("concurrency"),
                    format!("must be in the range [1, {MAX_SEMAPHORE_CAPACITY}]"),
                ));
            }
            let lease = self
                .lease
                .ok_or_else(|| invalid(at("lease"), "a semaphore rule needs a lease"))?;
            RuleKind::Semaphore(SemaphoreSpec {
                concurrency,
                lease: duration(&at("lease"), &lease, MAX_PERIOD_US, MAX_PERIOD_TEXT)?,
            })
        } else {
            if self.lease.is_some() {
                return Err(invalid(
                    at("lease"),
                    "lease belongs to a semaphore rule (concurrency)",
                ));
            }
            let algo = match self.algo.as_deref() {
                None => Algo::Gcra,
                Some(a) => Algo::parse(a.as_bytes()).map_err(|_| {
                    invalid(
                        at("algo"),
                        format!("must be one of gcra, bucket, window, sliding, log (got '{a}')"),
                    )
                })?,
            };
            let limit = self
                .limit
                .ok_or_else(|| invalid(at("limit"), "a rate rule needs a limit"))?;
            let period_text = self
                .period
                .ok_or_else(|| invalid(at("period"), "a rate rule needs a period"))?;
            let period = duration(&at("period"), &period_text, MAX_PERIOD_US, MAX_PERIOD_TEXT)?;
            let period_us = u64::try_from(period.as_micros()).unwrap_or(u64::MAX);
            let rule = Rule::new(algo, limit, period_us, self.burst).map_err(|e| {
                let field = match &e {
                    rl_core::error::Error::OutOfRange { arg: "limit", .. } => "limit",
                    rl_core::error::Error::OutOfRange { arg: "BURST", .. }
                    | rl_core::error::Error::OptionNotAllowed { .. } => "burst",
                    rl_core::error::Error::RefillTooLong => "burst",
                    _ => "period",
                };
                invalid(at(field), core_message(&e))
            })?;
            let cost = self.cost.unwrap_or(1);
            if !(1..=MAX_COUNT).contains(&cost) {
                return Err(invalid(
                    at("cost"),
                    format!("must be in the range [1, {MAX_COUNT}]"),
                ));
            }
            check_cost(cost, &rule).map_err(|e| invalid(at("cost"), core_message(&e)))?;
            let settle = self.settle.unwrap_or(false);
            if settle && !matches!(algo, Algo::Gcra | Algo::Bucket) {
                return Err(invalid(at("settle"), "settling needs algo gcra or bucket"));
            }
            let grant = match self.grant {
                None => None,
                Some(g) => {
                    if !(1..=MAX_COUNT).contains(&g.want) {
                        return Err(invalid(
                            at("grant.want"),
                            format!("must be in the range [1, {MAX_COUNT}]"),
                        ));
                    }
                    let ttl = match g.ttl {
                        None => Duration::from_micros(DEFAULT_TTL_US),
                        Some(t) => duration(&at("grant.ttl"), &t, MAX_TTL_US, "1d")?,
                    };
                    Some(GrantSpec { want: g.want, ttl })
                }
            };
            let charge = match self.charge {
                None => None,
                Some(c) => Some(validate_charge(&at("charge"), &c, algo, settle, &grant)?),
            };
            RuleKind::Rate(RateSpec {
                algo,
                rule,
                burst_given: self.burst.is_some(),
                cost,
                settle,
                grant,
                charge,
            })
        };
        let header = Prepared::new(&header_rule(name, &kind));
        Ok(RuleSpec {
            name: name.to_string(),
            key,
            kind,
            header,
            public: self.public.unwrap_or(true),
            shadow: self.shadow.unwrap_or(false),
            durable: self.durable.unwrap_or(false),
            // Set by the policy, which knows its regions.
            global: None,
            expect_refusals: match self.expect_refusals {
                None => None,
                Some(_) if !self.shadow.unwrap_or(false) => {
                    return Err(invalid(
                        at("expect_refusals"),
                        "only a shadow rule declares the refusals it expects",
                    ))
                }
                Some(x) if (0.0..=1.0).contains(&x) => Some(x),
                Some(x) => {
                    return Err(invalid(
                        at("expect_refusals"),
                        format!("must be in [0, 1] (got {x})"),
                    ))
                }
            },
        })
    }
}

/// `charge.on_status`: some statuses, each a valid HTTP status; reserved and settled as a
/// `settle` rule is, so gcra or bucket, and neither `settle` (the backend's count) nor `grant`
/// (spent from local chunks, which no status gives back).
fn validate_charge(
    path: &str,
    charge: &RawCharge,
    algo: Algo,
    settle: bool,
    grant: &Option<GrantSpec>,
) -> Result<ChargeOn, PolicyError> {
    let at = format!("{path}.on_status");
    if charge.on_status.is_empty() {
        return Err(invalid(
            at,
            "names no status: a rule charged on none counts nothing",
        ));
    }
    let on = ChargeOn::of(&charge.on_status).ok_or_else(|| {
        invalid(
            &at,
            format!(
                "each status must be in the range [{}, {}]",
                ChargeOn::LOWEST,
                ChargeOn::HIGHEST
            ),
        )
    })?;
    if !matches!(algo, Algo::Gcra | Algo::Bucket) {
        return Err(invalid(
            path,
            "charging by status needs algo gcra or bucket",
        ));
    }
    if settle {
        return Err(invalid(
            path,
            "a rule is charged by status or settled to the backend's count, not both",
        ));
    }
    if grant.is_some() {
        return Err(invalid(
            path,
            "a rule spent from chunks (grant) cannot be charged by status",
        ));
    }
    Ok(on)
}
