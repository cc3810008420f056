//! A request resolved against the configuration, before any store call: each descriptor's
//! limit (or none) and cost, `replaces` applied, and the checks to make, one per store key.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use redis_rl_client::Algo;
use rl_core::request::multi::MAX_MULTI_KEYS;
use rl_engine::policy::RuleSpec;
use tonic::Status;

use super::config::Config;
use super::tree::{self, Limit, Rate};

/// Descriptors in one request: Envoy sends a handful; the bound keeps a request's work and
/// its fan-out of store calls small whatever a caller sends.
pub(crate) const MAX_REQUEST_DESCRIPTORS: usize = 64;

/// What one descriptor of the request meets.
pub(crate) enum Item {
    /// No limit (nothing matched, or its limit was replaced): `OK`.
    Free,
    /// `unlimited: true`: `OK`, decided here.
    Unlimited(Arc<Limit>),
    /// A rate, checked by `checks[check]`.
    Limited {
        limit: Arc<Limit>,
        rate: Rate,
        check: usize,
    },
}

/// One store key to decide, with the summed cost of the descriptors counted on it (0: only
/// asked).
pub(crate) struct Check {
    pub key: Vec<u8>,
    pub rate: Rate,
    pub rule: Arc<RuleSpec>,
    pub cost: u64,
    pub shadow: bool,
}

pub(crate) struct Plan {
    pub items: Vec<Item>,
    pub checks: Vec<Check>,
}

struct Resolved {
    limit: Arc<Limit>,
    /// The store key, the rate and its rule; `None` when unlimited.
    key: Option<(Vec<u8>, Rate, Arc<RuleSpec>)>,
    cost: u64,
}

/// The longest descriptor value, in bytes: a value is an identity (a user, an address), and a
/// longer one would only make a long-lived key of whatever a caller sends.
pub(crate) const MAX_VALUE: usize = 256;

/// Resolves `request`; a request no answer could be given to is `INVALID_ARGUMENT`.
pub(crate) fn plan(config: &Config, request: &RateLimitRequest) -> Result<Plan, Status> {
    if request.domain.is_empty() {
        return Err(Status::invalid_argument(
            "rate limit domain must not be empty",
        ));
    }
    if request.descriptors.is_empty() {
        return Err(Status::invalid_argument(
            "rate limit descriptor list must not be empty",
        ));
    }
    if request.descriptors.len() > MAX_REQUEST_DESCRIPTORS {
        return Err(Status::invalid_argument(format!(
            "{} descriptors: at most {MAX_REQUEST_DESCRIPTORS} per request",
            request.descriptors.len()
        )));
    }
    // The request's `hits_addend` unset (0) means 1; a descriptor's own, when set, is its
    // cost, and 0 only asks, as the reference service's does.
    let hits = u64::from(request.hits_addend.max(1));
    let mut resolved = Vec::with_capacity(request.descriptors.len());
    for (i, d) in request.descriptors.iter().enumerate() {
        if d.is_negative_hits {
            // A refund: the module credits nothing back, and a refund counted as a hit would
            // take the very budget it means to return.
            return Err(Status::invalid_argument(format!(
                "descriptors[{i}].is_negative_hits: refunds are not supported"
            )));
        }
        // An unknown domain has no limits, as in the reference service.
        if request.domain != config.domain {
            resolved.push(None);
            continue;
        }
        if let Some(j) = d.entries.iter().position(|e| e.value.len() > MAX_VALUE) {
            return Err(Status::invalid_argument(format!(
                "descriptors[{i}].entries[{j}].value: longer than {MAX_VALUE} bytes"
            )));
        }
        let cost = d.hits_addend.map_or(hits, |h| h.value);
        resolved.push(resolve(config, d, i, cost)?);
    }
    // A limit named in the `replaces` of another limit the request meets is not applied.
    let replaced: HashSet<&str> = resolved
        .iter()
        .flatten()
        .flat_map(|r| r.limit.replaces.iter().map(String::as_str))
        .collect();
    let mut plan = Plan {
        items: Vec::with_capacity(resolved.len()),
        checks: Vec::new(),
    };
    for r in &resolved {
        let item = match r {
            None => Item::Free,
            Some(r)
                if r.limit
                    .name
                    .as_deref()
                    .is_some_and(|n| replaced.contains(n)) =>
            {
                Item::Free
            }
            Some(Resolved {
                limit, key: None, ..
            }) => Item::Unlimited(Arc::clone(limit)),
            Some(Resolved {
                limit,
                key: Some((key, rate, rule)),
                cost,
            }) => Item::Limited {
                limit: Arc::clone(limit),
                rate: *rate,
                check: plan.check(key, *rate, rule, *cost, limit.shadow),
            },
        };
        plan.items.push(item);
    }
    let enforcing = plan.checks.iter().filter(|c| !c.shadow).count();
    if enforcing > usize::try_from(MAX_MULTI_KEYS).unwrap_or(usize::MAX) {
        return Err(Status::invalid_argument(format!(
            "{enforcing} rate-limited descriptors: at most {MAX_MULTI_KEYS} are decided together"
        )));
    }
    Ok(plan)
}

impl Plan {
    /// The check counting on `key`, new or shared with an earlier descriptor of the request
    /// (the same descriptor sent twice costs twice, in one decision).
    fn check(
        &mut self,
        key: &[u8],
        rate: Rate,
        rule: &Arc<RuleSpec>,
        cost: u64,
        shadow: bool,
    ) -> usize {
        if let Some(i) = self
            .checks
            .iter()
            .position(|c| c.key == key && c.shadow == shadow)
        {
            if let Some(c) = self.checks.get_mut(i) {
                c.cost = c.cost.saturating_add(cost);
            }
            return i;
        }
        self.checks.push(Check {
            key: key.to_vec(),
            rate,
            rule: Arc::clone(rule),
            cost,
            shadow,
        });
        self.checks.len().saturating_sub(1)
    }
}

fn resolve(
    config: &Config,
    d: &RateLimitDescriptor,
    i: usize,
    cost: u64,
) -> Result<Option<Resolved>, Status> {
    // A descriptor carrying its own limit (Envoy's `limit` override) is limited by it, on a
    // fixed window, whatever the file says, as in the reference service.
    if let Some(o) = d.limit {
        let unit = match RateLimitUnit::try_from(o.unit) {
            Ok(RateLimitUnit::Second) => Unit::Second,
            Ok(RateLimitUnit::Minute) => Unit::Minute,
            Ok(RateLimitUnit::Hour) => Unit::Hour,
            Ok(RateLimitUnit::Day) => Unit::Day,
            _ => {
                return Err(Status::invalid_argument(format!(
                    "descriptors[{i}].limit.unit: {} is not second, minute, hour or day",
                    o.unit
                )))
            }
        };
        let rate = Rate {
            requests_per_unit: o.requests_per_unit,
            unit,
            period: Duration::from_secs(tree::unit_seconds(unit)),
            algo: Algo::Window,
            burst: None,
            capacity: u64::from(o.requests_per_unit),
            grant: None,
        };
        // Named `override` in metrics and records whatever the descriptor: a caller's values
        // must not become label values.
        let rule = Arc::new(
            rate.rule("override", false)
                .map_err(|e| Status::invalid_argument(format!("descriptors[{i}].limit: {e}")))?,
        );
        let limit = Arc::new(Limit {
            label: "override".into(),
            name: None,
            replaces: Vec::new(),
            rate: Some(rate),
            shadow: false,
            rule: Some(Arc::clone(&rule)),
        });
        let path = tree::entries_path(&d.entries);
        let key = tree::store_key(&config.domain, &path, "override");
        return Ok(Some(Resolved {
            limit,
            key: Some((key, rate, rule)),
            cost,
        }));
    }
    let Some(found) = tree::lookup(&config.root, &d.entries) else {
        return Ok(None);
    };
    let key = found
        .limit
        .rate
        .zip(found.limit.rule.clone())
        .map(|(rate, rule)| {
            let key = tree::store_key(&config.domain, &found.path, rate.algo.name());
            (key, rate, rule)
        });
    Ok(Some(Resolved {
        limit: Arc::clone(found.limit),
        key,
        cost,
    }))
}
