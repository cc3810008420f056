//! What operators see (`clients/CONTRACT.md` section 6): decision counters by route, rule and
//! outcome, store call latency, grant refills, the breaker state, the policy version and each
//! route's posture, rendered as Prometheus text; and a hook handing every event to the
//! application's own metrics library.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::breaker::BreakerState;
use crate::policy::Policy;
use crate::time::Instant;
use crate::wire::Mode;

mod allocation;
mod capacity;
mod render;
mod text;
pub use text::escape;

/// How one rule's decision for one request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Outcome {
    Admit,
    Refuse,
    /// Refused locally by the negative cache.
    RefuseCached,
    /// The store could not answer and the route denies.
    UnavailableDeny,
    FallbackAdmit,
    FallbackRefuse,
    /// The store could not answer and the route allows.
    OpenAdmit,
    /// A shadow rule would have refused.
    ShadowRefuse,
    /// A durable rule's admission whose replica acknowledgement timed out.
    UnreplicatedAdmit,
    /// The module refused a store call (`ERR`, `WRONGTYPE`, `CROSSSLOT`): a bug in the policy
    /// or the deployment, answered 500.
    Error,
    /// The gateway shed the request for its own overload (its driver said so): answered 503,
    /// and the store is not blamed.
    Shed,
    /// An exempt route's request (`"rules": []`), counted with an empty rule.
    Exempt,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Admit => "admit",
            Outcome::Refuse => "refuse",
            Outcome::RefuseCached => "refuse_cached",
            Outcome::UnavailableDeny => "unavailable_deny",
            Outcome::FallbackAdmit => "fallback_admit",
            Outcome::FallbackRefuse => "fallback_refuse",
            Outcome::OpenAdmit => "open_admit",
            Outcome::ShadowRefuse => "shadow_refuse",
            Outcome::UnreplicatedAdmit => "unreplicated_admit",
            Outcome::Error => "error",
            Outcome::Shed => "shed",
            Outcome::Exempt => "exempt",
        }
    }
}

/// How a store call ended, for the latency histogram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CallResult {
    Ok,
    Error,
    Timeout,
}

impl CallResult {
    pub fn name(self) -> &'static str {
        match self {
            CallResult::Ok => "ok",
            CallResult::Error => "error",
            CallResult::Timeout => "timeout",
        }
    }
}

/// Every event the gateway reports.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Event<'a> {
    Decision {
        route: &'a str,
        rule: &'a str,
        outcome: Outcome,
    },
    StoreCall {
        result: CallResult,
        latency: Duration,
    },
    GrantRefill {
        rule: &'a str,
    },
    Breaker(BreakerState),
    PolicyVersion(u64),
    /// A route's posture when the store cannot answer (`deny`, `fallback`, `allow`).
    RouteMode {
        route: &'a str,
        mode: &'static str,
    },
    /// The store's implementation of the commands (module or script), when detected.
    StoreMode(Mode),
    /// A plan header named no plan of the policy (section 8.1): ignored.
    UnknownPlan,
    /// A request no route matched, decided by the policy's `default` (section 8.4).
    Unmatched,
    /// Decision records not written: past the bound of records a second (section 8.7).
    RecordsDropped(u64),
    /// A published snapshot a follower refused (invalid, past the size bound, or with a
    /// version field that disagrees with its document): once per distinct document.
    PolicyRejected,
    /// A capacity shed a request its route's rules admitted (section 14); `/metrics` counts
    /// these from the capacity itself.
    CapacityShed {
        route: &'a str,
        capacity: &'a str,
        class: &'static str,
    },
}

/// Implemented by the application to feed its own metrics library; called for every event,
/// on the request's task, so it must be cheap.
pub trait MetricsHook: Send + Sync {
    fn event(&self, event: &Event<'_>);
}

/// Latency bucket bounds in microseconds: a store call is expected well under a 50 ms deadline.
const BUCKETS_US: [u64; 11] = [
    500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000,
];

#[derive(Default)]
struct Histogram {
    buckets: [u64; BUCKETS_US.len()],
    count: u64,
    sum_us: u64,
}

#[derive(Default)]
struct Tables {
    // Route, then rule, then outcome: looked up by borrowed names, so counting an existing
    // series allocates nothing.
    decisions: BTreeMap<String, BTreeMap<String, BTreeMap<Outcome, u64>>>,
    latency: BTreeMap<CallResult, Histogram>,
    grant_refills: BTreeMap<String, u64>,
    modes: BTreeMap<String, &'static str>,
}

/// The gateway's metrics, shared by all its requests.
pub struct Metrics {
    tables: Mutex<Tables>,
    breaker: Mutex<BreakerState>,
    policy_version: AtomicU64,
    store_mode: Mutex<Option<Mode>>,
    unknown_plan: AtomicU64,
    unmatched: AtomicU64,
    records_dropped: AtomicU64,
    // When the snapshot in force was published (Unix µs; 0: not published through a store).
    published_at_us: AtomicU64,
    policy_rejected: AtomicU64,
    // Whether the policy in force has plans (the unknown-plan counter is shown only then).
    plans: AtomicBool,
    // The rule and expiry of each override of the policy in force, for the gauge of active
    // and expired overrides, which changes with the time, not with events.
    overrides: Mutex<Vec<(String, Instant)>>,
    // The shadow rules of the policy in force that declare `expect_refusals`, counted from
    // the load of that snapshot.
    shadows: Mutex<BTreeMap<String, ShadowWatch>>,
    capacities: capacity::Registered,
    allocations: allocation::Registered,
    hook: Option<Arc<dyn MetricsHook>>,
}

/// Evaluations before a shadow rule's refusal ratio is reported and may raise its alarm.
pub const SHADOW_EVALUATIONS: u64 = 1000;

/// One shadow rule's evaluations under one snapshot, against what it declared.
#[derive(Debug, Clone, Copy, Default)]
struct ShadowWatch {
    expect: f64,
    evaluated: u64,
    refused: u64,
    alarm: bool,
}

impl ShadowWatch {
    fn ratio(&self) -> Option<f64> {
        (self.evaluated >= SHADOW_EVALUATIONS).then(|| self.refused as f64 / self.evaluated as f64)
    }

    /// More than ten times the declared share, or any refusal when it declared none.
    fn alarming(&self) -> bool {
        self.ratio().is_some_and(|r| {
            if self.expect == 0.0 {
                self.refused > 0
            } else {
                r > 10.0 * self.expect
            }
        })
    }
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new(None)
    }
}

impl Metrics {
    pub fn new(hook: Option<Arc<dyn MetricsHook>>) -> Metrics {
        Metrics {
            tables: Mutex::default(),
            breaker: Mutex::new(BreakerState::Closed),
            policy_version: AtomicU64::new(0),
            store_mode: Mutex::new(None),
            unknown_plan: AtomicU64::new(0),
            unmatched: AtomicU64::new(0),
            records_dropped: AtomicU64::new(0),
            published_at_us: AtomicU64::new(0),
            policy_rejected: AtomicU64::new(0),
            plans: AtomicBool::new(false),
            overrides: Mutex::new(Vec::new()),
            shadows: Mutex::default(),
            capacities: capacity::Registered::default(),
            allocations: allocation::Registered::default(),
            hook,
        }
    }

    /// The capacities of the policy in force, whose gauges `/metrics` shows.
    pub fn capacities(&self, capacities: Vec<(String, Arc<crate::capacity::Capacity>)>) {
        self.capacities.set(capacities);
    }

    /// The engine's global keys, whose allocations `/metrics` shows.
    pub(crate) fn allocations(&self, allocations: Arc<crate::allocation::Allocations>) {
        self.allocations.set(allocations);
    }

    fn tables(&self) -> MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn record(&self, event: Event<'_>) {
        match event {
            Event::Decision {
                route,
                rule,
                outcome,
            } => {
                let mut t = self.tables();
                let rules = match t.decisions.get_mut(route) {
                    Some(rules) => rules,
                    None => t.decisions.entry(route.to_string()).or_default(),
                };
                let outcomes = match rules.get_mut(rule) {
                    Some(outcomes) => outcomes,
                    None => rules.entry(rule.to_string()).or_default(),
                };
                let n = outcomes.entry(outcome).or_default();
                *n = n.saturating_add(1);
            }
            Event::StoreCall { result, latency } => {
                let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
                let mut t = self.tables();
                let h = t.latency.entry(result).or_default();
                for (bound, n) in BUCKETS_US.iter().zip(h.buckets.iter_mut()) {
                    if us <= *bound {
                        *n = n.saturating_add(1);
                    }
                }
                h.count = h.count.saturating_add(1);
                h.sum_us = h.sum_us.saturating_add(us);
            }
            Event::GrantRefill { rule } => {
                let mut t = self.tables();
                let n = t.grant_refills.entry(rule.to_string()).or_default();
                *n = n.saturating_add(1);
            }
            Event::Breaker(state) => {
                *self.breaker.lock().unwrap_or_else(|p| p.into_inner()) = state;
            }
            Event::PolicyVersion(v) => self.policy_version.store(v, Ordering::Relaxed),
            Event::RouteMode { route, mode } => {
                self.tables().modes.insert(route.to_string(), mode);
            }
            Event::StoreMode(mode) => {
                *self.store_mode.lock().unwrap_or_else(|p| p.into_inner()) = Some(mode);
            }
            Event::UnknownPlan => {
                self.unknown_plan.fetch_add(1, Ordering::Relaxed);
            }
            Event::Unmatched => {
                self.unmatched.fetch_add(1, Ordering::Relaxed);
            }
            Event::RecordsDropped(n) => {
                self.records_dropped.fetch_add(n, Ordering::Relaxed);
            }
            Event::PolicyRejected => {
                self.policy_rejected.fetch_add(1, Ordering::Relaxed);
            }
            Event::CapacityShed { .. } => {}
        }
        if let Some(hook) = &self.hook {
            hook.event(&event);
        }
    }

    /// When the snapshot in force was published (a gateway following a store): `/metrics` then
    /// shows its age, which grows while a gateway cannot refresh.
    pub fn policy_published(&self, at: Instant) {
        self.published_at_us
            .store(at.as_micros(), Ordering::Relaxed);
    }

    /// A published snapshot the follower refused: counted in `rl_gateway_policy_rejected_total`.
    pub fn policy_rejected(&self) {
        self.record(Event::PolicyRejected);
    }

    /// Records a newly loaded policy: its version and every route's posture. Routes a reload
    /// removed keep their last mode line, as Prometheus series do until the process restarts.
    pub fn policy_loaded(&self, policy: &Policy) {
        self.record(Event::PolicyVersion(policy.version));
        self.plans.store(policy.plans.is_some(), Ordering::Relaxed);
        *self.overrides.lock().unwrap_or_else(|p| p.into_inner()) = policy
            .overrides
            .iter()
            .map(|o| (o.rule.clone(), o.expires))
            .collect();
        *self.shadows.lock().unwrap_or_else(|p| p.into_inner()) = policy
            .rules
            .values()
            .filter_map(|r| {
                let expect = r.expect_refusals?;
                let watch = ShadowWatch {
                    expect,
                    ..ShadowWatch::default()
                };
                Some((r.name.clone(), watch))
            })
            .collect();
        let default = (!policy.default.exempt()).then_some(&policy.default);
        for route in policy.routes.iter().chain(default) {
            self.record(Event::RouteMode {
                route: route.name(),
                mode: route.on_store_error.mode(),
            });
        }
    }

    /// Counts one evaluation of a shadow rule that declares `expect_refusals`; true when this
    /// one switched its alarm on (the caller logs it, once). The alarm goes off again when the
    /// ratio falls back.
    pub fn shadow_evaluated(&self, rule: &str, refused: bool) -> bool {
        let mut shadows = self.shadows.lock().unwrap_or_else(|p| p.into_inner());
        let Some(watch) = shadows.get_mut(rule) else {
            return false;
        };
        watch.evaluated = watch.evaluated.saturating_add(1);
        watch.refused = watch.refused.saturating_add(u64::from(refused));
        let was = watch.alarm;
        watch.alarm = watch.alarming();
        watch.alarm && !was
    }
}
