//! The versioned JSON policy of `clients/CONTRACT.md` section 2: parsed with serde, then
//! validated into types the gateway can use without re-checking (a rule here is a rule the
//! module accepts).
//!
//! Every refusal names the field by its JSON path (`rules.read.period`), because the operator
//! reading the error has the file open, not this code.

mod capacity;
mod checks;
mod field;
mod global;
mod plans;
mod routes;
mod rule;
mod template;
mod validate;
mod validate_route;

pub use capacity::{RouteCapacity, MAX_IN_FLIGHT, MAX_WAIT};
pub use global::GlobalSpec;
pub use validate_route::DEFAULT_NAME;

pub use plans::{Override, Overrides, Plans, Resolved, TenantOverrides, MAX_OVERRIDE};
pub use routes::{
    decode_unreserved, Methods, NormalPath, PathError, PathTemplate, Router, MAX_SEGMENTS,
};
pub use template::{KeyTemplate, RequestIdentity, Var, ANONYMOUS};
// Where identities come from is written in the policy, so it is named here too.
pub use crate::identity::{Identity, IpNet};
use validate::RawPolicy;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use rl_core::rule::{Algo, Rule};

use crate::capacity::CapacitySpec;
use crate::headers::{HeaderRule, Prepared};
use crate::time::Instant;

/// Why a policy was not loaded. The previous snapshot stays in force whatever the error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyError {
    /// The document could not be read (the driver's I/O: a file, a store key).
    Io { source: String, message: String },
    /// The document is not a valid policy; `path` is the JSON path of the offending field.
    Invalid { path: String, message: String },
    /// A reload offered a version not higher than the one in force.
    Stale { current: u64, offered: u64 },
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyError::Io { source, message } => {
                write!(f, "cannot read policy {source}: {message}")
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

// ---- The validated policy ----

/// One validated policy snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub version: u64,
    pub identity: Identity,
    pub rules: BTreeMap<String, Arc<RuleSpec>>,
    pub routes: Vec<Arc<Route>>,
    /// The routes' templates in one tree.
    pub router: Router,
    /// Decides the requests no route matches (section 8.4).
    pub default: Arc<Route>,
    /// The callers' plans (section 8.1), when the policy has any.
    pub plans: Option<Plans>,
    pub overrides: Overrides,
    /// The in-flight limits routes draw on (section 14), by name.
    pub capacities: BTreeMap<String, CapacitySpec>,
    /// The regions that share its global rules (section 15).
    pub regions: Vec<String>,
    /// What is legal but worth a log line at load (an override already expired).
    pub warnings: Vec<String>,
    pub negative_cache: NegativeCacheSpec,
    pub store: StoreSpec,
    /// Upward jitter of `Retry-After`, as a fraction in [0, 1].
    pub retry_after_jitter: f64,
    /// `/checkout/` is not `/checkout` (by default it is, as most frameworks route).
    pub strict_slash: bool,
    /// Whether paths match case-sensitively (the default; express routes without case).
    pub case_sensitive: bool,
    /// Made by [`Policy::for_checks`] for a face of keyed checks: not the gateway's policy
    /// document, so its version and rules are not the `rl_gateway_policy_*` metrics'.
    pub for_checks: bool,
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
    /// Shared across regions by allocation (section 15).
    pub global: Option<GlobalSpec>,
    /// A shadow rule's declared refusal ratio (section 8.6), watched by the metrics.
    pub expect_refusals: Option<f64>,
    /// Its part of the `RateLimit` headers, from its name and numbers.
    header: Prepared,
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
    /// Charged only when the response has one of these statuses (`charge.on_status`): the
    /// cost is reserved before, and settled to itself or to 0 at the response's end.
    pub charge: Option<ChargeOn>,
}

/// A set of HTTP statuses (100 to 599), the ones a `charge` rule is charged on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChargeOn([u64; 8]);

impl ChargeOn {
    pub const LOWEST: u16 = 100;
    pub const HIGHEST: u16 = 599;

    /// The set of `statuses`, each in 100..=599; `None` for any outside.
    pub fn of(statuses: &[u16]) -> Option<ChargeOn> {
        let mut bits = [0u64; 8];
        for &status in statuses {
            if !(Self::LOWEST..=Self::HIGHEST).contains(&status) {
                return None;
            }
            let i = usize::from(status - Self::LOWEST);
            *bits.get_mut(i / 64)? |= 1 << (i % 64);
        }
        Some(ChargeOn(bits))
    }

    pub fn contains(&self, status: u16) -> bool {
        let Some(i) = status.checked_sub(Self::LOWEST).map(usize::from) else {
            return false;
        };
        self.0.get(i / 64).is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    /// The statuses, in order.
    pub fn statuses(&self) -> impl Iterator<Item = u16> + '_ {
        (Self::LOWEST..=Self::HIGHEST).filter(|s| self.contains(*s))
    }
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
    /// What the rule shows in `RateLimit-Policy` and `RateLimit`, prepared when it was loaded.
    pub fn header(&self) -> &Prepared {
        &self.header
    }

    /// Whether the rule is one of the route's `RL.MULTI` call: a rate rule that is neither spent
    /// locally (grant) nor evaluated apart (shadow). Only these must share a hash tag.
    pub fn in_multi(&self) -> bool {
        matches!(&self.kind, RuleKind::Rate(r) if r.grant.is_none()) && !self.shadow
    }
}

/// What a rule named `name` of `kind` shows in the headers.
fn header_rule(name: &str, kind: &RuleKind) -> HeaderRule {
    match kind {
        RuleKind::Rate(rate) => HeaderRule {
            name: name.to_string(),
            limit: rate.rule.limit(),
            period: Duration::from_micros(rate.rule.period_us()),
            capacity: rate.rule.burst(),
            semaphore: false,
        },
        RuleKind::Semaphore(sem) => HeaderRule {
            name: name.to_string(),
            limit: sem.concurrency,
            period: Duration::ZERO,
            capacity: sem.concurrency,
            semaphore: true,
        },
    }
}

/// One route: its methods and path template, its rules in policy order (none: exempt), and
/// its posture.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    pub methods: Methods,
    /// The path as written.
    pub path: String,
    pub template: PathTemplate,
    pub rules: Vec<Arc<RuleSpec>>,
    pub on_store_error: OnStoreError,
    /// Its `name`, else `<METHOD> <path>` as written: what metrics, logs and `${route}` call it.
    name: String,
    /// Whether a key of the route takes `${ip}` (the address is rendered only then).
    uses_ip: bool,
    /// The headers its keys take (`${header.NAME}`), each once.
    headers: Vec<String>,
    /// The policy's `default`: it decides the requests no other route matches.
    default: bool,
    /// The capacity it draws on, and its priority there.
    pub capacity: Option<RouteCapacity>,
}

impl Route {
    pub fn new(
        methods: Methods,
        path: String,
        template: PathTemplate,
        name: Option<String>,
        rules: Vec<Arc<RuleSpec>>,
        on_store_error: OnStoreError,
    ) -> Route {
        let name = name.unwrap_or_else(|| format!("{} {path}", methods.text()));
        let uses_ip = rules.iter().any(|r| r.key.uses(Var::Ip));
        let mut headers: Vec<String> = Vec::new();
        for name in rules.iter().flat_map(|r| r.key.headers()) {
            if !headers.iter().any(|h| h == name) {
                headers.push(name.to_string());
            }
        }
        Route {
            methods,
            path,
            template,
            rules,
            on_store_error,
            name,
            uses_ip,
            headers,
            default: false,
            capacity: None,
        }
    }

    /// The same route as the policy's `default`.
    pub(crate) fn into_default(self) -> Route {
        Route {
            default: true,
            ..self
        }
    }

    /// Whether this is the policy's `default`, deciding requests no route matches.
    pub fn is_default(&self) -> bool {
        self.default
    }

    /// `"rules": []`: deliberately unlimited, counted `exempt`.
    pub fn exempt(&self) -> bool {
        self.rules.is_empty()
    }

    /// The route's name in metrics and logs: `GET /catalog`.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn uses_ip(&self) -> bool {
        self.uses_ip
    }

    /// The headers the route's keys take (`${header.NAME}`), names in lower case.
    pub fn key_headers(&self) -> &[String] {
        &self.headers
    }
}

/// What a route does when the store cannot answer (`clients/CONTRACT.md` section 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnStoreError {
    Deny,
    /// A local limiter per key of the route's first rule, with this rule (gcra arithmetic).
    Fallback(Rule),
    /// Keyed checks only: each check on a local limiter of its own rule's numbers (gcra
    /// arithmetic), the request refused when one refuses.
    FallbackEach,
    Allow,
}

impl OnStoreError {
    pub fn mode(&self) -> &'static str {
        match self {
            OnStoreError::Deny => "deny",
            OnStoreError::Fallback(_) | OnStoreError::FallbackEach => "fallback",
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
    /// What a spending call's `DEADLINE` adds to the request's own deadline for the skew
    /// between this clock and the store's (clients/SPEC.md, section 3).
    pub skew: Duration,
    pub breaker_failures: u32,
    pub breaker_open: Duration,
    pub ramp: Duration,
}

impl Policy {
    /// Parses and validates a policy document loaded now, by the system clock (the instant
    /// from which an override may run at most 90 days).
    pub fn from_json(text: &str) -> Result<Policy, PolicyError> {
        Policy::from_json_at(text, Instant::wall())
    }

    /// Parses and validates a policy document loaded at `loaded` (Unix-epoch microseconds).
    pub fn from_json_at(text: &str, loaded: Instant) -> Result<Policy, PolicyError> {
        let de = &mut serde_json::Deserializer::from_str(text);
        let raw: RawPolicy = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            invalid(
                // The parser's placeholder paths ('.', '?') name no field.
                if path == "." || path == "?" {
                    String::new()
                } else {
                    path
                },
                e.inner().to_string(),
            )
        })?;
        raw.validate(loaded)
    }

    /// The rule as it applies to one caller at `now`: the override for its tenant and user,
    /// else for its tenant (`overrides`: the tenant's, from `self.overrides.of`), else its
    /// plan's numbers, else the rule as written.
    pub fn effective<'a>(
        &'a self,
        rule: &'a Arc<RuleSpec>,
        plan: Option<usize>,
        overrides: &TenantOverrides<'a>,
        user: Option<&[u8]>,
        now: Instant,
    ) -> &'a Arc<RuleSpec> {
        if let Some(o) = overrides.find(user, &rule.name, now) {
            return &o.spec;
        }
        plan.zip(self.plans.as_ref())
            .and_then(|(p, plans)| plans.rule(p, &rule.name))
            .unwrap_or(rule)
    }

    /// The route for a request, matched the way the backend routes, so that no variant of a
    /// request skips its route's rules: the method without case; the path without its query,
    /// matrix parameters, dot segments and repeated slashes, exactly (without case when
    /// `case_sensitive` is false or the framework routes so, `any_case`), a trailing slash
    /// ignored unless `strict_slash`; and a `HEAD` no route names is decided as the `GET` the
    /// framework runs for it.
    pub fn route<'p, 'r>(&'p self, method: &str, path: &'r str, any_case: bool) -> Routed<'p, 'r> {
        let path = match NormalPath::of(path) {
            Ok(path) => path,
            Err(error) => return Routed::BadPath(error),
        };
        let found = self.router.find(method, &path, any_case).or_else(|| {
            method
                .eq_ignore_ascii_case("HEAD")
                .then(|| self.router.find("GET", &path, any_case))
                .flatten()
        });
        match found.and_then(|i| self.routes.get(i)) {
            Some(route) => Routed::Route {
                captures: routes::captures(&route.template, &path),
                route,
                path,
            },
            None if self.default.exempt() => Routed::Unmatched,
            None => Routed::Route {
                route: &self.default,
                captures: Vec::new(),
                path,
            },
        }
    }
}

/// Where a request goes.
pub enum Routed<'p, 'r> {
    Route {
        route: &'p Arc<Route>,
        /// `{name}` captures with the request's segments.
        captures: Vec<(&'p str, &'r str)>,
        /// The path as matched, which a proxy forwards.
        path: NormalPath<'r>,
    },
    /// No route matches and the default has no rules: the request passes.
    Unmatched,
    /// The path climbs above the root (`/..`) or has an encoded separator in a segment:
    /// answered 400.
    BadPath(PathError),
}

impl Routed<'_, '_> {
    /// Whether a route decides the request (the application's caller lookup runs only then).
    pub fn is_route(&self) -> bool {
        matches!(self, Routed::Route { .. })
    }
}
