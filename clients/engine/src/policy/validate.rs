//! The document as written (serde's view of the JSON), and its validation into the types the
//! gateway uses.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use rl_core::bounds::{MAX_CLOCK_SKEW_TEXT, MAX_CLOCK_SKEW_US};
use rl_core::rule::{MAX_PERIOD_TEXT, MAX_PERIOD_US};
use serde::Deserialize;

use super::capacity::{validate_capacities, RawCapacity};
use super::field::duration;
use super::plans::{validate_overrides, RawOverride, RawPlans};
use super::rule::RawRule;
use super::validate_route::{RawDefault, RawRoute, DEFAULT_NAME, MISSING_DEFAULT};
use super::{invalid, NegativeCacheSpec, Policy, PolicyError, Route, Router, StoreSpec, Var};
use crate::identity::{Identity, IdentityHash, IpNet, MIN_HASH_KEY};
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
    capacity: BTreeMap<String, RawCapacity>,
    #[serde(default)]
    regions: Vec<String>,
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
        super::global::validate_regions(&self.regions)?;
        let mut rules = BTreeMap::new();
        for (name, raw) in &self.rules {
            let mut spec = raw.clone().validate(&format!("rules.{name}"), name)?;
            spec.global = raw
                .global
                .as_ref()
                .map(|g| {
                    g.validate(
                        &format!("rules.{name}.global"),
                        &spec.kind,
                        self.regions.len() as u64,
                    )
                })
                .transpose()?;
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
        let capacities = validate_capacities(self.capacity)?;
        let mut routes: Vec<Arc<Route>> = Vec::with_capacity(self.routes.len());
        for (i, raw) in self.routes.into_iter().enumerate() {
            let route = raw.validate(&format!("routes[{i}]"), &rules, &capacities)?;
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
            capacities,
            regions: self.regions,
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
