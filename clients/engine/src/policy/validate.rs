//! The document as written (serde's view of the JSON), and its validation into the types the
//! gateway uses.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use rl_core::bounds::{MAX_CLOCK_SKEW_TEXT, MAX_CLOCK_SKEW_US};
use rl_core::parse::parse_duration;
use rl_core::request::grant::{DEFAULT_TTL_US, MAX_TTL_US};
use rl_core::rule::{
    check_cost, Algo, Rule, MAX_COUNT, MAX_PERIOD_TEXT, MAX_PERIOD_US, MAX_SEMAPHORE_CAPACITY,
};
use serde::Deserialize;

use super::plans::{validate_overrides, RawOverride, RawPlans};
use super::validate_route::{RawDefault, RawRoute, DEFAULT_NAME, MISSING_DEFAULT};
use super::{
    header_rule, invalid, GrantSpec, Identity, IpNet, KeyTemplate, NegativeCacheSpec, Policy,
    PolicyError, RateSpec, Route, Router, RuleKind, RuleSpec, SemaphoreSpec, StoreSpec, Var,
};
use crate::headers::Prepared;
use crate::identity::{IdentityHash, MIN_HASH_KEY};
use crate::time::Instant;

// ---- The document as written ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPolicy {
    version: u64,
    #[serde(default)]
    identity: RawIdentity,
    rules: BTreeMap<String, RawRule>,
    routes: Vec<RawRoute>,
    default: Option<RawDefault>,
    plans: Option<RawPlans>,
    #[serde(default)]
    overrides: Vec<RawOverride>,
    #[serde(default)]
    negative_cache: RawNegativeCache,
    #[serde(default)]
    store: RawStore,
    #[serde(default)]
    retry_after_jitter: f64,
    #[serde(default)]
    strict_slash: bool,
    #[serde(default = "yes")]
    case_sensitive: bool,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawIdentity {
    user: Option<String>,
    tenant: Option<String>,
    plan: Option<String>,
    #[serde(default)]
    trusted_proxies: Vec<String>,
    ipv4_prefix: Option<u64>,
    ipv6_prefix: Option<u64>,
    hash: Option<RawHash>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHash {
    key_env: String,
}

impl RawHash {
    /// The key is read from the environment when the policy loads, so it is never in the
    /// document (which is published, diffed and logged) and a reload can rotate it.
    fn validate(&self) -> Result<IdentityHash, PolicyError> {
        let path = "identity.hash.key_env";
        let name = self.key_env.as_str();
        if name.is_empty() || name.contains(['=', '\0']) {
            return Err(invalid(path, "must name an environment variable"));
        }
        let Some(key) = std::env::var_os(name) else {
            return Err(invalid(
                path,
                format!("the variable {name} is not set (it holds the identity hash key)"),
            ));
        };
        let key = key.as_encoded_bytes();
        IdentityHash::new(name, key).ok_or_else(|| {
            invalid(
                path,
                format!(
                    "the variable {name} holds {} bytes; an identity hash key needs at least {MIN_HASH_KEY} (e.g. 32 random bytes in hex)",
                    key.len()
                ),
            )
        })
    }
}

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
    pub(super) concurrency: Option<u64>,
    pub(super) lease: Option<String>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct RawGrant {
    want: u64,
    ttl: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawNegativeCache {
    max: Option<String>,
    entries: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawStore {
    timeout: Option<String>,
    skew: Option<String>,
    #[serde(default)]
    breaker: RawBreaker,
    ramp: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawBreaker {
    failures: Option<u32>,
    open: Option<String>,
}

pub(super) const DEFAULT_NEGATIVE_MAX: Duration = Duration::from_millis(250);
pub(super) const DEFAULT_NEGATIVE_ENTRIES: u64 = 100_000;
pub(super) const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);
/// Clocks kept by NTP agree within milliseconds; a second also covers a host whose clock is
/// badly kept, and bounds what a stalled store may apply late to a second past its timeout.
pub(super) const DEFAULT_SKEW: Duration = Duration::from_secs(1);
pub(super) const DEFAULT_FAILURES: u32 = 5;
pub(super) const DEFAULT_OPEN: Duration = Duration::from_secs(1);
pub(super) const DEFAULT_RAMP: Duration = Duration::from_secs(10);

/// A duration exactly as the module parses it, so a policy unit means what a command unit means.
pub(super) fn duration(
    path: &str,
    text: &str,
    max_us: u64,
    max_text: &'static str,
) -> Result<Duration, PolicyError> {
    parse_duration(text.as_bytes(), "duration", max_us, max_text)
        .map(Duration::from_micros)
        .map_err(|e| invalid(path, core_message(&e)))
}

/// The core's error text without its `ERR <arg> ` prefix, which names a command argument
/// rather than the policy field the path already names.
pub(super) fn core_message(e: &rl_core::error::Error) -> String {
    let text = e.to_string();
    let text = text.strip_prefix("ERR ").unwrap_or(&text);
    for arg in ["duration ", "limit ", "period ", "BURST ", "COST "] {
        if let Some(rest) = text.strip_prefix(arg) {
            return rest.to_string();
        }
    }
    text.to_string()
}

fn optional_duration(
    path: &str,
    text: Option<&str>,
    default: Duration,
) -> Result<Duration, PolicyError> {
    text.map_or(Ok(default), |t| {
        duration(path, t, MAX_PERIOD_US, MAX_PERIOD_TEXT)
    })
}

impl RawPolicy {
    /// The policy as loaded at `loaded` (the instant overrides' expiry is measured from).
    pub(super) fn validate(self, loaded: Instant) -> Result<Policy, PolicyError> {
        if self.identity.plan.is_some() && self.plans.is_none() {
            return Err(invalid(
                "identity.plan",
                "names a plan header, but the policy has no plans",
            ));
        }
        let prefix = |field: &str, given: Option<u64>, bits: u8, default: u8| match given {
            None => Ok(default),
            Some(p) => u8::try_from(p).ok().filter(|p| *p <= bits).ok_or_else(|| {
                invalid(
                    format!("identity.{field}"),
                    format!("must be in the range [0, {bits}] (got {p})"),
                )
            }),
        };
        let identity = Identity {
            ipv4_prefix: prefix("ipv4_prefix", self.identity.ipv4_prefix, 32, 32)?,
            ipv6_prefix: prefix("ipv6_prefix", self.identity.ipv6_prefix, 128, 64)?,
            user: self.identity.user,
            tenant: self.identity.tenant,
            plan: self.identity.plan,
            hash: self
                .identity
                .hash
                .as_ref()
                .map(RawHash::validate)
                .transpose()?,
            trusted_proxies: self
                .identity
                .trusted_proxies
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    IpNet::parse(p).ok_or_else(|| {
                        invalid(
                            format!("identity.trusted_proxies[{i}]"),
                            format!("'{p}' is not an IP address or CIDR block"),
                        )
                    })
                })
                .collect::<Result<_, _>>()?,
        };
        let mut rules = BTreeMap::new();
        for (name, raw) in &self.rules {
            let spec = raw.clone().validate(&format!("rules.{name}"), name)?;
            if self.plans.is_none() && spec.key.uses(Var::Plan) {
                return Err(invalid(
                    format!("rules.{name}.key"),
                    "uses ${plan}, but the policy has no plans",
                ));
            }
            rules.insert(name.clone(), Arc::new(spec));
        }
        let plans = self
            .plans
            .map(|p| p.validate(&self.rules, &rules))
            .transpose()?;
        let mut warnings = Vec::new();
        let overrides =
            validate_overrides(self.overrides, &self.rules, &rules, loaded, &mut warnings)?;
        let mut router = Router::new(self.case_sensitive, self.strict_slash);
        let mut names: HashMap<String, usize> = HashMap::new();
        let mut routes: Vec<Arc<Route>> = Vec::with_capacity(self.routes.len());
        for (i, raw) in self.routes.into_iter().enumerate() {
            let route = raw.validate(&format!("routes[{i}]"), &rules)?;
            // Two routes one request could match are one route written twice.
            if let Err(first) = router.insert(&route.template, &route.methods, i) {
                let other = routes.get(first).map(|r| r.name()).unwrap_or_default();
                let message = if other == route.name() {
                    format!("duplicate route {other} (also routes[{first}])")
                } else {
                    format!(
                        "route {} matches the requests of routes[{first}] ({other}): the same path shape and a method in common",
                        route.name()
                    )
                };
                return Err(invalid(format!("routes[{i}]"), message));
            }
            if route.name() == DEFAULT_NAME {
                return Err(invalid(
                    format!("routes[{i}].name"),
                    "'default' is the name of the default route",
                ));
            }
            if let Some(first) = names.insert(route.name().to_string(), i) {
                return Err(invalid(
                    format!("routes[{i}].name"),
                    format!("'{}' is also the name of routes[{first}]", route.name()),
                ));
            }
            routes.push(Arc::new(route));
        }
        let negative_cache = NegativeCacheSpec {
            max: optional_duration(
                "negative_cache.max",
                self.negative_cache.max.as_deref(),
                DEFAULT_NEGATIVE_MAX,
            )?,
            entries: match self
                .negative_cache
                .entries
                .unwrap_or(DEFAULT_NEGATIVE_ENTRIES)
            {
                0 => return Err(invalid("negative_cache.entries", "must be at least 1")),
                n => usize::try_from(n)
                    .map_err(|_| invalid("negative_cache.entries", "is too large"))?,
            },
        };
        let timeout = optional_duration(
            "store.timeout",
            self.store.timeout.as_deref(),
            DEFAULT_TIMEOUT,
        )?;
        // Zero is allowed: a gateway on the store's own host shares its clock.
        let skew = match self.store.skew.as_deref() {
            Some("0" | "0ms" | "0s") => Duration::ZERO,
            text => optional_duration("store.skew", text, DEFAULT_SKEW)?,
        };
        if timeout.saturating_add(skew) > Duration::from_micros(MAX_CLOCK_SKEW_US) {
            return Err(invalid(
                "store.skew",
                format!(
                    "plus store.timeout must be at most {MAX_CLOCK_SKEW_TEXT}, the furthest ahead the module takes a DEADLINE"
                ),
            ));
        }
        let store = StoreSpec {
            timeout,
            skew,
            breaker_failures: match self.store.breaker.failures.unwrap_or(DEFAULT_FAILURES) {
                0 => return Err(invalid("store.breaker.failures", "must be at least 1")),
                n => n,
            },
            breaker_open: optional_duration(
                "store.breaker.open",
                self.store.breaker.open.as_deref(),
                DEFAULT_OPEN,
            )?,
            // A zero ramp is allowed: the breaker closes at once after a successful probe.
            ramp: match self.store.ramp.as_deref() {
                Some("0" | "0ms" | "0s") => Duration::ZERO,
                text => optional_duration("store.ramp", text, DEFAULT_RAMP)?,
            },
        };
        if !(0.0..=1.0).contains(&self.retry_after_jitter) {
            return Err(invalid(
                "retry_after_jitter",
                format!("must be in [0, 1] (got {})", self.retry_after_jitter),
            ));
        }
        // Checked last, so that a document from before this field still hears of its other
        // mistakes first.
        let default = self
            .default
            .ok_or_else(|| invalid("default", MISSING_DEFAULT))?
            .validate(&rules)?;
        Ok(Policy {
            version: self.version,
            default: Arc::new(default),
            identity,
            rules,
            routes,
            router,
            plans,
            overrides,
            warnings,
            negative_cache,
            store,
            retry_after_jitter: self.retry_after_jitter,
            strict_slash: self.strict_slash,
            case_sensitive: self.case_sensitive,
            for_checks: false,
        })
    }
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
            RuleKind::Rate(RateSpec {
                algo,
                rule,
                burst_given: self.burst.is_some(),
                cost,
                settle,
                grant,
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
