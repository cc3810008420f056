//! Policies and rules made in code by a face that decides keyed checks (the Envoy rate limit
//! service translates its own configuration into them), validated as a document's are.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rl_core::rule::{Algo, Rule};

use super::validate::{DEFAULT_FAILURES, DEFAULT_NEGATIVE_ENTRIES, DEFAULT_NEGATIVE_MAX};
use super::validate::{DEFAULT_OPEN, DEFAULT_RAMP, DEFAULT_SKEW, DEFAULT_TIMEOUT};
use super::StoreSpec;
use super::{header_rule, Identity, KeyTemplate, Methods, NegativeCacheSpec, OnStoreError};
use super::{Overrides, PathTemplate, Policy, RateSpec, Route, Router, RuleKind, RuleSpec};
use crate::headers::Prepared;

impl Default for StoreSpec {
    fn default() -> StoreSpec {
        StoreSpec {
            timeout: DEFAULT_TIMEOUT,
            skew: DEFAULT_SKEW,
            breaker_failures: DEFAULT_FAILURES,
            breaker_open: DEFAULT_OPEN,
            ramp: DEFAULT_RAMP,
        }
    }
}

impl Default for NegativeCacheSpec {
    fn default() -> NegativeCacheSpec {
        NegativeCacheSpec {
            max: DEFAULT_NEGATIVE_MAX,
            entries: usize::try_from(DEFAULT_NEGATIVE_ENTRIES).unwrap_or(usize::MAX),
        }
    }
}

impl Policy {
    /// A policy for keyed checks only: no routes; its default, named `route`, holds the
    /// posture and names the checks' decisions in metrics and records.
    pub fn for_checks(
        version: u64,
        route: &str,
        on_store_error: OnStoreError,
        store: StoreSpec,
    ) -> Policy {
        let default = Route::new(
            Methods::Any,
            "/*".to_string(),
            PathTemplate::any(),
            Some(route.to_string()),
            Vec::new(),
            on_store_error,
        );
        Policy {
            capacities: BTreeMap::new(),
            regions: Vec::new(),
            version,
            identity: Identity {
                user: None,
                tenant: None,
                plan: None,
                trusted_proxies: Vec::new(),
                ipv4_prefix: 32,
                ipv6_prefix: 64,
                hash: None,
            },
            rules: BTreeMap::new(),
            routes: Vec::new(),
            router: Router::new(true, false),
            default: Arc::new(default),
            plans: None,
            overrides: Overrides::default(),
            warnings: Vec::new(),
            negative_cache: NegativeCacheSpec::default(),
            store,
            retry_after_jitter: 0.0,
            strict_slash: false,
            case_sensitive: true,
            for_checks: true,
        }
    }
}

impl RuleSpec {
    /// A rate rule named `name`: `limit` per `period` by `algo`, `burst` the capacity when
    /// given, `grant` the chunks leased for a hot key; refused as a policy's rule would be.
    pub fn rate(
        name: &str,
        algo: Algo,
        limit: u64,
        period: Duration,
        burst: Option<u64>,
        grant: Option<super::GrantSpec>,
        shadow: bool,
    ) -> Result<RuleSpec, String> {
        let period_us = u64::try_from(period.as_micros()).map_err(|_| "period is too long")?;
        let rule = Rule::new(algo, limit, period_us, burst).map_err(|e| e.to_string())?;
        let kind = RuleKind::Rate(RateSpec {
            algo,
            rule,
            burst_given: burst.is_some(),
            cost: 1,
            settle: false,
            grant,
            charge: None,
        });
        let key = KeyTemplate::parse(name)?;
        Ok(RuleSpec {
            header: Prepared::new(&header_rule(name, &kind)),
            name: name.to_string(),
            key,
            kind,
            public: true,
            shadow,
            durable: false,
            global: None,
            expect_refusals: None,
        })
    }
}

impl RuleSpec {
    /// A semaphore named `name`: at most `concurrency` holders of a key at once, each slot
    /// free after `lease` unless renewed; refused as a policy's rule would be.
    pub fn semaphore(name: &str, concurrency: u64, lease: Duration) -> Result<RuleSpec, String> {
        if !(1..=rl_core::rule::MAX_SEMAPHORE_CAPACITY).contains(&concurrency) {
            return Err(format!(
                "capacity {concurrency} is not in the range [1, {}]",
                rl_core::rule::MAX_SEMAPHORE_CAPACITY
            ));
        }
        let lease_us = u64::try_from(lease.as_micros()).unwrap_or(u64::MAX);
        if lease.is_zero() || lease_us > rl_core::rule::MAX_PERIOD_US {
            return Err(format!(
                "lease {lease:?} is not in the range (0, {}]",
                rl_core::rule::MAX_PERIOD_TEXT
            ));
        }
        crate::wire::command::duration_arg(lease, "lease").map_err(|e| e.to_string())?;
        let kind = RuleKind::Semaphore(super::SemaphoreSpec { concurrency, lease });
        Ok(RuleSpec {
            header: Prepared::new(&header_rule(name, &kind)),
            name: name.to_string(),
            key: KeyTemplate::parse(name)?,
            kind,
            public: true,
            shadow: false,
            durable: false,
            global: None,
            expect_refusals: None,
        })
    }
}
