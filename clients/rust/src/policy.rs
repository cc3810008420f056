//! The versioned JSON policy of `CLIENTS.md` section 2: parsed with serde, then validated into
//! types the gateway can use without re-checking (a rule here is a rule the module accepts).
//!
//! Every refusal names the field by its JSON path (`rules.read.period`), because the operator
//! reading the error has the file open, not this code.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use rl_core::parse::parse_duration;
use rl_core::request::grant::{DEFAULT_TTL_US, MAX_TTL_US};
use rl_core::rule::{
    check_cost, Algo, Rule, MAX_COUNT, MAX_PERIOD_TEXT, MAX_PERIOD_US, MAX_SEMAPHORE_CAPACITY,
};
use serde::Deserialize;

/// Why a policy was not loaded. The previous snapshot stays in force whatever the error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyError {
    /// The file could not be read.
    Io { file: PathBuf, message: String },
    /// The document is not a valid policy; `path` is the JSON path of the offending field.
    Invalid { path: String, message: String },
    /// A reload offered a version not higher than the one in force.
    Stale { current: u64, offered: u64 },
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyError::Io { file, message } => {
                write!(f, "cannot read policy {}: {message}", file.display())
            }
            PolicyError::Invalid { path, message } if path.is_empty() => {
                write!(f, "invalid policy: {message}")
            }
            PolicyError::Invalid { path, message } => {
                write!(f, "invalid policy: {path}: {message}")
            }
            PolicyError::Stale { current, offered } => write!(
                f,
                "policy version {offered} is not higher than the version in force, {current}"
            ),
        }
    }
}

impl std::error::Error for PolicyError {}

fn invalid(path: impl Into<String>, message: impl Into<String>) -> PolicyError {
    PolicyError::Invalid {
        path: path.into(),
        message: message.into(),
    }
}

// ---- The document as written ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    version: u64,
    #[serde(default)]
    identity: RawIdentity,
    rules: BTreeMap<String, RawRule>,
    routes: Vec<RawRoute>,
    #[serde(default)]
    negative_cache: RawNegativeCache,
    #[serde(default)]
    store: RawStore,
    #[serde(default)]
    retry_after_jitter: f64,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawIdentity {
    user: Option<String>,
    tenant: Option<String>,
    #[serde(default)]
    trusted_proxies: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    key: String,
    algo: Option<String>,
    limit: Option<u64>,
    period: Option<String>,
    burst: Option<u64>,
    cost: Option<u64>,
    public: Option<bool>,
    shadow: Option<bool>,
    settle: Option<bool>,
    durable: Option<bool>,
    grant: Option<RawGrant>,
    concurrency: Option<u64>,
    lease: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGrant {
    want: u64,
    ttl: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoute {
    method: String,
    path: String,
    rules: Vec<String>,
    on_store_error: Option<RawOnStoreError>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOnStoreError {
    mode: String,
    limit: Option<u64>,
    period: Option<String>,
    burst: Option<u64>,
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

// ---- The validated policy ----

/// One validated policy snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub version: u64,
    pub identity: Identity,
    pub rules: BTreeMap<String, Arc<RuleSpec>>,
    pub routes: Vec<Route>,
    pub negative_cache: NegativeCacheSpec,
    pub store: StoreSpec,
    /// Upward jitter of `Retry-After`, as a fraction in [0, 1].
    pub retry_after_jitter: f64,
}

/// Where a request's identity comes from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Identity {
    /// Header naming the user, if the policy keys anything by user.
    pub user: Option<String>,
    pub tenant: Option<String>,
    pub trusted_proxies: Vec<IpNet>,
}

impl Identity {
    /// Whether a peer address is a trusted proxy, whose forwarding header may name the client.
    pub fn trusts(&self, peer: IpAddr) -> bool {
        self.trusted_proxies.iter().any(|net| net.contains(peer))
    }
}

/// An address or a CIDR block (`10.0.0.0/8`, `::1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNet {
    addr: IpAddr,
    prefix: u8,
}

impl IpNet {
    fn parse(text: &str) -> Option<IpNet> {
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a.parse::<IpAddr>().ok()?, Some(p.parse::<u8>().ok()?)),
            None => (text.parse::<IpAddr>().ok()?, None),
        };
        let bits = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = prefix.unwrap_or(bits);
        (prefix <= bits).then_some(IpNet { addr, prefix })
    }

    pub fn contains(&self, peer: IpAddr) -> bool {
        let (net, peer, bits) = match (self.addr, peer) {
            (IpAddr::V4(n), IpAddr::V4(p)) => {
                (u128::from(u32::from(n)), u128::from(u32::from(p)), 32u32)
            }
            (IpAddr::V6(n), IpAddr::V6(p)) => (u128::from(n), u128::from(p), 128u32),
            _ => return false,
        };
        let host_bits = bits.saturating_sub(u32::from(self.prefix));
        // A /0 has every host bit free; shifting a u128 by 128 would overflow.
        let shift = |v: u128| v.checked_shr(host_bits).unwrap_or(0);
        shift(net) == shift(peer)
    }
}

/// A validated rule.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleSpec {
    pub name: String,
    pub key: KeyTemplate,
    pub kind: RuleKind,
    /// Whether its numbers may appear in headers sent to a caller without a `user`.
    pub public: bool,
    /// Evaluated on `shadow:`-prefixed keys, counted, never refusing.
    pub shadow: bool,
    /// After an admission, wait for one replica's acknowledgement.
    pub durable: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub enum RuleKind {
    Rate(RateSpec),
    Semaphore(SemaphoreSpec),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateSpec {
    pub algo: Algo,
    /// The core's validated rule: limit, period and capacity as the module will see them.
    pub rule: Rule,
    /// Whether `burst` was written (the module is then sent `BURST`).
    pub burst_given: bool,
    pub cost: u64,
    pub settle: bool,
    pub grant: Option<GrantSpec>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrantSpec {
    pub want: u64,
    pub ttl: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SemaphoreSpec {
    pub concurrency: u64,
    pub lease: Duration,
}

impl RuleSpec {
    /// Whether the rule is one of the route's `RL.MULTI` call: a rate rule that is neither spent
    /// locally (grant) nor evaluated apart (shadow). Only these must share a hash tag.
    pub fn in_multi(&self) -> bool {
        matches!(&self.kind, RuleKind::Rate(r) if r.grant.is_none()) && !self.shadow
    }
}

/// One route: a method and an exact path, its rules in policy order, and its posture.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    pub method: String,
    pub path: String,
    pub rules: Vec<Arc<RuleSpec>>,
    pub on_store_error: OnStoreError,
}

impl Route {
    /// The route's name in metrics and logs: `GET /catalog`.
    pub fn name(&self) -> String {
        format!("{} {}", self.method, self.path)
    }
}

/// What a route does when the store cannot answer (`CLIENTS.md` section 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnStoreError {
    Deny,
    /// A local limiter per key of the route's first rule, with this rule (gcra arithmetic).
    Fallback(Rule),
    Allow,
}

impl OnStoreError {
    pub fn mode(&self) -> &'static str {
        match self {
            OnStoreError::Deny => "deny",
            OnStoreError::Fallback(_) => "fallback",
            OnStoreError::Allow => "allow",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NegativeCacheSpec {
    pub max: Duration,
    pub entries: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreSpec {
    pub timeout: Duration,
    pub breaker_failures: u32,
    pub breaker_open: Duration,
    pub ramp: Duration,
}

const DEFAULT_NEGATIVE_MAX: Duration = Duration::from_millis(250);
const DEFAULT_NEGATIVE_ENTRIES: u64 = 100_000;
const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);
const DEFAULT_FAILURES: u32 = 5;
const DEFAULT_OPEN: Duration = Duration::from_secs(1);
const DEFAULT_RAMP: Duration = Duration::from_secs(10);

/// A duration exactly as the module parses it, so a policy unit means what a command unit means.
fn duration(
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
fn core_message(e: &rl_core::error::Error) -> String {
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

impl Policy {
    /// Parses and validates a policy document.
    pub fn from_json(text: &str) -> Result<Policy, PolicyError> {
        let de = &mut serde_json::Deserializer::from_str(text);
        let raw: RawPolicy = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            invalid(
                if path == "." { String::new() } else { path },
                e.inner().to_string(),
            )
        })?;
        raw.validate()
    }

    /// The route for a request, matched exactly on method and path.
    pub fn route(&self, method: &str, path: &str) -> Option<&Route> {
        self.routes
            .iter()
            .find(|r| r.method.eq_ignore_ascii_case(method) && r.path == path)
    }
}

impl RawPolicy {
    fn validate(self) -> Result<Policy, PolicyError> {
        let identity = Identity {
            user: self.identity.user,
            tenant: self.identity.tenant,
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
        for (name, raw) in self.rules {
            let spec = raw.validate(&format!("rules.{name}"), &name)?;
            rules.insert(name, Arc::new(spec));
        }
        let mut seen: HashMap<(String, String), usize> = HashMap::new();
        let mut routes = Vec::with_capacity(self.routes.len());
        for (i, raw) in self.routes.into_iter().enumerate() {
            let route = raw.validate(&format!("routes[{i}]"), &rules)?;
            let id = (route.method.clone(), route.path.clone());
            if let Some(first) = seen.insert(id, i) {
                return Err(invalid(
                    format!("routes[{i}]"),
                    format!("duplicate route {} (also routes[{first}])", route.name()),
                ));
            }
            routes.push(route);
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
        let store = StoreSpec {
            timeout: optional_duration(
                "store.timeout",
                self.store.timeout.as_deref(),
                DEFAULT_TIMEOUT,
            )?,
            breaker_failures: match self.store.breaker.failures.unwrap_or(DEFAULT_FAILURES) {
                0 => return Err(invalid("store.breaker.failures", "must be at least 1")),
                n => n,
            },
            breaker_open: optional_duration(
                "store.breaker.open",
                self.store.breaker.open.as_deref(),
                DEFAULT_OPEN,
            )?,
            ramp: optional_duration("store.ramp", self.store.ramp.as_deref(), DEFAULT_RAMP)?,
        };
        if !(0.0..=1.0).contains(&self.retry_after_jitter) {
            return Err(invalid(
                "retry_after_jitter",
                format!("must be in [0, 1] (got {})", self.retry_after_jitter),
            ));
        }
        Ok(Policy {
            version: self.version,
            identity,
            rules,
            routes,
            negative_cache,
            store,
            retry_after_jitter: self.retry_after_jitter,
        })
    }
}

impl RawRule {
    fn validate(self, path: &str, name: &str) -> Result<RuleSpec, PolicyError> {
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
        Ok(RuleSpec {
            name: name.to_string(),
            key,
            kind,
            public: self.public.unwrap_or(true),
            shadow: self.shadow.unwrap_or(false),
            durable: self.durable.unwrap_or(false),
        })
    }
}

impl RawRoute {
    fn validate(
        self,
        path: &str,
        rules: &BTreeMap<String, Arc<RuleSpec>>,
    ) -> Result<Route, PolicyError> {
        if self.method.is_empty() || !self.method.bytes().all(|b| b.is_ascii_alphabetic()) {
            return Err(invalid(
                format!("{path}.method"),
                "must be an HTTP method such as GET",
            ));
        }
        if !self.path.starts_with('/') {
            return Err(invalid(format!("{path}.path"), "must start with '/'"));
        }
        if self.rules.is_empty() {
            return Err(invalid(
                format!("{path}.rules"),
                "a route needs at least one rule",
            ));
        }
        let mut specs: Vec<Arc<RuleSpec>> = Vec::with_capacity(self.rules.len());
        for (i, name) in self.rules.iter().enumerate() {
            let spec = rules.get(name).ok_or_else(|| {
                invalid(
                    format!("{path}.rules[{i}]"),
                    format!("unknown rule '{name}'"),
                )
            })?;
            if specs.iter().any(|s| s.name == *name) {
                return Err(invalid(
                    format!("{path}.rules[{i}]"),
                    format!("rule '{name}' given twice"),
                ));
            }
            specs.push(Arc::clone(spec));
        }
        let multi: Vec<&RuleSpec> = specs
            .iter()
            .map(AsRef::as_ref)
            .filter(|s| s.in_multi())
            .collect();
        if let [first, rest @ ..] = multi.as_slice() {
            for other in rest {
                let (a, b) = (first.key.hash_tag(), other.key.hash_tag());
                if a.is_none() || a != b {
                    return Err(invalid(
                        format!("{path}.rules"),
                        format!(
                            "rules '{}' and '{}' go in one RL.MULTI, so their keys must share a hash tag (a '{{...}}' part written the same in both)",
                            first.name, other.name
                        ),
                    ));
                }
                if first.key == other.key {
                    return Err(invalid(
                        format!("{path}.rules"),
                        format!(
                            "rules '{}' and '{}' have the same key",
                            first.name, other.name
                        ),
                    ));
                }
            }
        }
        let at = |field: &str| format!("{path}.on_store_error.{field}");
        let on_store_error = match self.on_store_error {
            None => OnStoreError::Deny,
            Some(raw) => match raw.mode.as_str() {
                "deny" | "allow" => {
                    if let Some(field) = [
                        ("limit", raw.limit.is_some()),
                        ("period", raw.period.is_some()),
                        ("burst", raw.burst.is_some()),
                    ]
                    .iter()
                    .find_map(|(f, given)| given.then_some(*f))
                    {
                        return Err(invalid(
                            at(field),
                            "only a fallback takes a limit, period or burst",
                        ));
                    }
                    if raw.mode == "deny" {
                        OnStoreError::Deny
                    } else {
                        OnStoreError::Allow
                    }
                }
                "fallback" => {
                    let limit = raw
                        .limit
                        .ok_or_else(|| invalid(at("limit"), "a fallback needs a limit"))?;
                    let period_text = raw
                        .period
                        .ok_or_else(|| invalid(at("period"), "a fallback needs a period"))?;
                    let period =
                        duration(&at("period"), &period_text, MAX_PERIOD_US, MAX_PERIOD_TEXT)?;
                    let period_us = u64::try_from(period.as_micros()).unwrap_or(u64::MAX);
                    let rule = Rule::new(Algo::Gcra, limit, period_us, raw.burst).map_err(|e| {
                        let field = match &e {
                            rl_core::error::Error::OutOfRange { arg: "limit", .. } => "limit",
                            _ => "burst",
                        };
                        invalid(at(field), core_message(&e))
                    })?;
                    // The fallback counts the route's first rule's cost: one it could never admit
                    // would turn an outage into refusing every request.
                    if let Some(RuleKind::Rate(r)) = specs.first().map(|s| &s.kind) {
                        if check_cost(r.cost, &rule).is_err() {
                            return Err(invalid(
                                at("burst"),
                                format!(
                                    "the route's first rule costs {}, more than the fallback's capacity {}",
                                    r.cost,
                                    rule.burst()
                                ),
                            ));
                        }
                    }
                    OnStoreError::Fallback(rule)
                }
                other => {
                    return Err(invalid(
                        at("mode"),
                        format!("must be deny, fallback or allow (got '{other}')"),
                    ))
                }
            },
        };
        Ok(Route {
            method: self.method.to_ascii_uppercase(),
            path: self.path,
            rules: specs,
            on_store_error,
        })
    }
}

// ---- Key templates ----

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Var {
    User,
    Tenant,
    Ip,
    Route,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Var(Var),
}

/// A key with `${user}`, `${tenant}`, `${ip}`, `${route}` placeholders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyTemplate {
    source: String,
    parts: Vec<Part>,
}

/// What a request contributes to its keys; a missing part renders as `anonymous`.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestIdentity<'a> {
    pub user: Option<&'a str>,
    pub tenant: Option<&'a str>,
    pub ip: Option<&'a str>,
    pub route: Option<&'a str>,
}

pub const ANONYMOUS: &str = "anonymous";

impl KeyTemplate {
    pub fn parse(source: &str) -> Result<KeyTemplate, String> {
        if source.is_empty() {
            return Err("a key must not be empty".into());
        }
        let mut parts = Vec::new();
        let mut rest = source;
        while let Some(start) = rest.find("${") {
            let (text, after) = rest.split_at(start);
            if !text.is_empty() {
                parts.push(Part::Text(text.to_string()));
            }
            let (name, tail) = after
                .get(2..)
                .and_then(|a| a.split_once('}'))
                .ok_or_else(|| format!("unclosed '${{' in '{source}'"))?;
            parts.push(Part::Var(match name {
                "user" => Var::User,
                "tenant" => Var::Tenant,
                "ip" => Var::Ip,
                "route" => Var::Route,
                _ => {
                    return Err(format!(
                        "unknown variable '${{{name}}}' (known: user, tenant, ip, route)"
                    ))
                }
            }));
            rest = tail;
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_string()));
        }
        Ok(KeyTemplate {
            source: source.to_string(),
            parts,
        })
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// The template text of the key's hash tag: what lies between the first literal `{` and the
    /// next literal `}`, as Redis Cluster reads a rendered key. Rendered values never contain
    /// braces (see [`KeyTemplate::render`]), so equal tag templates always land in one slot.
    pub fn hash_tag(&self) -> Option<String> {
        let mut tag: Option<String> = None;
        for part in &self.parts {
            match (part, tag.as_mut()) {
                (Part::Text(t), None) => {
                    if let Some((_, inside)) = t.split_once('{') {
                        if let Some((tag, _)) = inside.split_once('}') {
                            return (!tag.is_empty()).then(|| tag.to_string());
                        }
                        tag = Some(inside.to_string());
                    }
                }
                (Part::Text(t), Some(acc)) => {
                    if let Some((end, _)) = t.split_once('}') {
                        acc.push_str(end);
                        return (!acc.is_empty()).then(|| acc.clone());
                    }
                    acc.push_str(t);
                }
                (Part::Var(v), Some(acc)) => {
                    acc.push_str(match v {
                        Var::User => "${user}",
                        Var::Tenant => "${tenant}",
                        Var::Ip => "${ip}",
                        Var::Route => "${route}",
                    });
                }
                (Part::Var(_), None) => {}
            }
        }
        None
    }

    /// Renders the key for a request. Values are percent-escaped for `%`, `{` and `}` so a
    /// caller-chosen header can neither move its key to another slot (breaking `RL.MULTI`) nor
    /// collide with another identity's key.
    pub fn render(&self, id: &RequestIdentity<'_>) -> String {
        let mut out = String::with_capacity(self.source.len().saturating_add(16));
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Var(v) => {
                    let value = match v {
                        Var::User => id.user,
                        Var::Tenant => id.tenant,
                        Var::Ip => id.ip,
                        Var::Route => id.route,
                    }
                    .filter(|s| !s.is_empty())
                    .unwrap_or(ANONYMOUS);
                    for c in value.chars() {
                        match c {
                            '%' => out.push_str("%25"),
                            '{' => out.push_str("%7B"),
                            '}' => out.push_str("%7D"),
                            c => out.push(c),
                        }
                    }
                }
            }
        }
        out
    }
}

// ---- The snapshot in force ----

/// The policy in force, swapped atomically on reload; readers never wait for a reload.
pub struct PolicyStore {
    file: PathBuf,
    current: ArcSwap<Policy>,
    // Serializes reloads, so two racing reloads cannot both pass the version check.
    reload: Mutex<()>,
}

fn read_policy(file: &Path) -> Result<Policy, PolicyError> {
    let text = std::fs::read_to_string(file).map_err(|e| PolicyError::Io {
        file: file.to_path_buf(),
        message: e.to_string(),
    })?;
    Policy::from_json(&text)
}

impl PolicyStore {
    pub fn load_file(file: impl AsRef<Path>) -> Result<PolicyStore, PolicyError> {
        let file = file.as_ref().to_path_buf();
        let policy = read_policy(&file)?;
        Ok(PolicyStore {
            file,
            current: ArcSwap::from_pointee(policy),
            reload: Mutex::new(()),
        })
    }

    /// The snapshot a request should be evaluated against, from start to end.
    pub fn current(&self) -> Arc<Policy> {
        self.current.load_full()
    }

    /// Re-reads the file; a version not higher than the one in force is refused, and on any
    /// error the previous snapshot stays.
    pub fn reload(&self) -> Result<Arc<Policy>, PolicyError> {
        let _serial = self.reload.lock().unwrap_or_else(|p| p.into_inner());
        let next = read_policy(&self.file)?;
        let current = self.current.load();
        if next.version <= current.version {
            return Err(PolicyError::Stale {
                current: current.version,
                offered: next.version,
            });
        }
        let next = Arc::new(next);
        self.current.store(Arc::clone(&next));
        Ok(next)
    }
}
