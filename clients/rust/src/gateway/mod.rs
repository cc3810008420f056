//! The engine that decides one request (`CLIENTS.md` sections 1 to 6): it renders the route's
//! keys for the caller, refuses from the negative cache when it can, otherwise asks the store
//! (semaphores first, then one `RL.MULTI`, then the rules that live outside it), and turns the
//! answer, or its absence, into exactly one of admit, refuse or unavailable. What the store is
//! asked, and in which order, is in `store`; what a request holds until its response ends
//! (semaphore slots, reservations) in `leases`.

mod identity;
pub(crate) mod leases;
mod store;

pub use identity::client_ip;
pub use leases::Leases;
use store::{Answer, Chunk};

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::HeaderMap;
use lru::LruCache;
use rl_core::rule::Rule;
use tokio::time::Instant;

use crate::cache::NegativeCache;
use crate::client::{Rl, RlConnection};
use crate::headers::{self, Outcome as HeaderOutcome, RuleSpec as HeaderRule};
use crate::metrics::{CallResult, Event, Metrics, Outcome};
use crate::policy::{
    OnStoreError, Policy, PolicyError, PolicyStore, RequestIdentity, Route, RuleKind, RuleSpec,
};
use crate::posture::{with_deadline, Breaker, Fallback, Pass, StoreFailure};
use crate::problem::{self, Problem};

pub const RETRY_AFTER: &str = "Retry-After";
/// The units the backend reports it actually used, for `settle` rules.
pub const ACTUAL_COST: &str = "x-actual-cost";
/// A caller's key for a retried request, used as the reservation id of `settle` rules.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// What the engine needs to know about a request.
#[derive(Debug, Clone, Copy)]
pub struct RequestParts<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub headers: &'a HeaderMap,
    /// The address the connection came from.
    pub peer: Option<IpAddr>,
    /// Who the application says the caller is; `None`: the policy's identity headers say.
    pub caller: Option<&'a Caller>,
}

/// The caller as the application resolved it (an API key looked up, a token verified), in
/// place of the policy's `identity` headers. A part left `None` is read from its header.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caller {
    pub user: Option<String>,
    pub tenant: Option<String>,
}

/// The three outcomes of `CLIENTS.md` section 1, never mixed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Admit,
    Refuse,
    /// The store gave no decision; the route's posture answered (see [`Verdict::outcome`]).
    Unavailable,
}

/// The gateway's answer for one request. It is put into the request's extensions, so a handler
/// can see how it was admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub decision: Decision,
    /// The route-level outcome as counted; `None` for a request no route matches.
    pub outcome: Option<Outcome>,
    /// `Some(429)` or `Some(503)` when the gateway answers the request itself.
    pub status: Option<u16>,
    /// Sent on the response, whatever answers it.
    pub headers: Vec<(&'static str, String)>,
    pub problem: Option<Problem>,
    /// `<METHOD> <path>` of the matched route.
    pub route: Option<String>,
    pub policy_version: u64,
}

impl Verdict {
    fn pass(policy_version: u64) -> Verdict {
        Verdict {
            decision: Decision::Admit,
            outcome: None,
            status: None,
            headers: Vec::new(),
            problem: None,
            route: None,
            policy_version,
        }
    }
}

/// One rule of the route with its key rendered for this request.
struct Keyed {
    rule: Arc<RuleSpec>,
    key: String,
}

impl Keyed {
    /// Asked apart with `RESERVE`, since `RL.MULTI` takes no reservation.
    fn settles(&self) -> bool {
        matches!(&self.rule.kind, RuleKind::Rate(r) if r.settle) && !self.rule.shadow
    }

    /// The key the store is asked about: a shadow rule's lives in its own namespace.
    fn store_key(&self) -> String {
        if self.rule.shadow {
            format!("shadow:{}", self.key)
        } else {
            self.key.clone()
        }
    }

    fn cost(&self) -> u64 {
        match &self.rule.kind {
            RuleKind::Rate(r) => r.cost,
            RuleKind::Semaphore(_) => 1,
        }
    }
}

/// The gateway: one per process and store, shared by every request.
pub struct Gateway<C: RlConnection + 'static> {
    rl: Rl<C>,
    policies: PolicyStore,
    cache: NegativeCache,
    breaker: Breaker,
    metrics: Arc<Metrics>,
    // One local limiter per route, rebuilt when a reload changes the route's fallback rule.
    fallbacks: Mutex<HashMap<String, (Rule, Arc<Fallback>)>>,
    // The chunk leased for each (grant rule, key). The async lock is held across a refill, so
    // there is one refill in flight per key and the requests behind it spend the new chunk.
    chunks: Mutex<LruCache<String, Arc<tokio::sync::Mutex<Chunk>>>>,
    legacy_headers: bool,
    /// The share of requests whose decisions are logged (admissions without the store and
    /// shadow refusals always are).
    log_sample: f64,
    // Connections of their own for routes with a `durable` rule, taken in turn: the server
    // blocks a connection while its WAIT waits, and the other routes must not queue behind it.
    durable: Vec<Rl<C>>,
    next_durable: AtomicUsize,
}

impl<C: RlConnection + 'static> Gateway<C> {
    /// The negative cache and the breaker are sized from the policy in force now; a reload
    /// changes rules and routes, not those.
    pub fn new(rl: Rl<C>, policies: PolicyStore, metrics: Arc<Metrics>) -> Gateway<C> {
        let policy = policies.current();
        metrics.policy_loaded(&policy);
        rl.report_mode_to(&metrics);
        Gateway {
            rl,
            cache: NegativeCache::from_spec(&policy.negative_cache),
            breaker: Breaker::from_spec(&policy.store),
            policies,
            metrics,
            fallbacks: Mutex::new(HashMap::new()),
            chunks: Mutex::new(LruCache::new(
                NonZeroUsize::new(policy.negative_cache.entries).unwrap_or(NonZeroUsize::MIN),
            )),
            legacy_headers: false,
            log_sample: DEFAULT_LOG_SAMPLE,
            durable: Vec::new(),
            next_durable: AtomicUsize::new(0),
        }
    }

    /// Logs the decisions of this share of requests (0 to 1; 1 % by default) as `tracing`
    /// events of target [`DECISION_LOG`]. Admissions without the store (`allow`) and shadow
    /// refusals are logged every time.
    pub fn with_decision_log_sample(mut self, share: f64) -> Gateway<C> {
        self.log_sample = if share.is_nan() {
            0.0
        } else {
            share.clamp(0.0, 1.0)
        };
        self
    }

    /// Sends the store calls of routes with a `durable` rule, and their `WAIT`, on these
    /// connections (each request on one, in turn) instead of the gateway's own. The server
    /// blocks a connection while its `WAIT` waits for a replica, so without them every request
    /// sharing the gateway's connection waits behind a durable one whenever replicas lag.
    pub fn with_durable_connections(mut self, connections: Vec<Rl<C>>) -> Gateway<C> {
        for rl in &connections {
            rl.report_mode_to(&self.metrics);
        }
        self.durable = connections;
        self
    }

    /// Also sends the older `X-RateLimit-Limit/Remaining/Reset`, for the most constraining
    /// rule, to callers that only read those.
    pub fn with_legacy_headers(mut self) -> Gateway<C> {
        self.legacy_headers = true;
        self
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    pub fn policy(&self) -> Arc<Policy> {
        self.policies.current()
    }

    /// Re-reads the policy file (refused when its version is not higher).
    pub fn reload(&self) -> Result<Arc<Policy>, PolicyError> {
        let policy = self.policies.reload()?;
        self.metrics.policy_loaded(&policy);
        Ok(policy)
    }

    /// Decides one request. The leases must live until the response has been sent.
    pub async fn decide(&self, request: &RequestParts<'_>) -> (Verdict, Leases<C>) {
        let no_leases = || Leases::new(self.rl.clone(), Vec::new(), Vec::new());
        let policy = self.policies.current();
        let Some(route) = policy.route(request.method, request.path) else {
            return (Verdict::pass(policy.version), no_leases());
        };
        let route_name = route.name();
        let header = |name: &Option<String>| {
            name.as_deref()
                .and_then(|n| request.headers.get(n))
                .and_then(|v| v.to_str().ok())
                .filter(|v| !v.is_empty())
        };
        let caller = request.caller;
        let user = caller
            .and_then(|c| nonempty(c.user.as_deref()))
            .or_else(|| header(&policy.identity.user));
        let ip =
            client_ip(&policy.identity, request.headers, request.peer).map(|ip| ip.to_string());
        let id = RequestIdentity {
            user,
            tenant: caller
                .and_then(|c| nonempty(c.tenant.as_deref()))
                .or_else(|| header(&policy.identity.tenant)),
            ip: ip.as_deref(),
            route: Some(&route_name),
        };
        let keyed: Vec<Keyed> = route
            .rules
            .iter()
            .map(|rule| Keyed {
                key: rule.key.render(&id),
                rule: Arc::clone(rule),
            })
            .collect();
        let ctx = Context {
            policy: &policy,
            route,
            route_name: &route_name,
            keyed: &keyed,
            has_user: user.is_some(),
            sampled: self.log_sample > 0.0 && fastrand::f64() < self.log_sample,
        };

        if let Some(verdict) = self.refuse_cached(&ctx) {
            return (verdict, no_leases());
        }

        let call = match self
            .breaker
            .enter(Instant::now(), &route.on_store_error, fastrand::f64())
        {
            Pass::Store(call) => call,
            Pass::Posture => return (self.posture(&ctx), no_leases()),
        };
        let started = Instant::now();
        let id = header(&Some(IDEMPOTENCY_KEY.to_string()))
            .map(str::to_string)
            .unwrap_or_else(|| format!("{:032x}", fastrand::u128(..)));
        let rl = self.connection_for(&keyed);
        let mut held = Vec::new();
        let mut reserved = Vec::new();
        let asked = with_deadline(
            policy.store.timeout,
            self.ask(rl, &keyed, id.as_bytes(), &mut held, &mut reserved),
        )
        .await;
        let (result, ok) = match &asked {
            Ok(_) => (CallResult::Ok, true),
            Err(StoreFailure::Timeout) => (CallResult::Timeout, false),
            Err(StoreFailure::Error(_)) => (CallResult::Error, false),
        };
        self.metrics.record(Event::StoreCall {
            result,
            latency: started.elapsed(),
        });
        if ok {
            call.succeeded(Instant::now());
        } else {
            call.failed(Instant::now());
        }
        self.metrics
            .record(Event::Breaker(self.breaker.state(Instant::now())));
        // Slots acquired before a failure or a refusal are given back.
        let leases = Leases::new(rl.clone(), held, reserved);
        match asked {
            Ok(answer) if answer.refused.is_empty() => {
                self.await_replica(rl, &ctx).await;
                (self.admitted(&ctx, &answer), leases)
            }
            Ok(answer) => {
                drop(leases);
                (self.refused(&ctx, &answer), no_leases())
            }
            Err(_) => {
                drop(leases);
                (self.posture(&ctx), no_leases())
            }
        }
    }

    /// Refuses locally when the negative cache holds a recent refusal of one of the rules.
    fn refuse_cached(&self, ctx: &Context<'_>) -> Option<Verdict> {
        let now = Instant::now();
        let waits: Vec<(usize, u64)> = ctx
            .keyed
            .iter()
            .enumerate()
            .filter(|(_, k)| !k.rule.shadow)
            .filter_map(|(i, k)| {
                let wait = self.cache.check(&k.rule.name, &k.key, k.cost(), now)?;
                Some((
                    i,
                    u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1),
                ))
            })
            .collect();
        if waits.is_empty() {
            return None;
        }
        for (i, _) in &waits {
            self.count(ctx, *i, Outcome::RefuseCached);
        }
        let outcomes = waits
            .iter()
            .map(|(i, wait)| (*i, HeaderOutcome::refused(*wait)))
            .collect::<Vec<_>>();
        Some(self.too_many(ctx, &waits, &outcomes, Outcome::RefuseCached))
    }

    /// The connection a request's store calls go on: one of the durable connections for a
    /// route with a durable rule, when there are any.
    fn connection_for(&self, keyed: &[Keyed]) -> &Rl<C> {
        if self.durable.is_empty() || !keyed.iter().any(|k| k.rule.durable) {
            return &self.rl;
        }
        let turn = self.next_durable.fetch_add(1, Ordering::Relaxed);
        self.durable
            .get(turn % self.durable.len())
            .unwrap_or(&self.rl)
    }

    /// `durable` rules that wrote to the store (a grant rule spent locally wrote nothing): the
    /// admission stands, but one that no replica acknowledged within `store.timeout` is
    /// counted `unreplicated_admit`. Rules in several cluster slots are waited for on each
    /// slot's primary.
    async fn await_replica(&self, rl: &Rl<C>, ctx: &Context<'_>) {
        let durable: Vec<(usize, &Keyed)> = ctx
            .keyed
            .iter()
            .enumerate()
            .filter(|(_, k)| k.rule.durable && !k.rule.shadow)
            .filter(|(_, k)| !matches!(&k.rule.kind, RuleKind::Rate(r) if r.grant.is_some()))
            .collect();
        let mut slots: Vec<u16> = durable.iter().map(|(_, k)| slot(&k.key)).collect();
        slots.sort_unstable();
        slots.dedup();
        let timeout = ctx.policy.store.timeout;
        for s in slots {
            let Some((_, first)) = durable.iter().find(|(_, k)| slot(&k.key) == s) else {
                continue;
            };
            // The server ends WAIT at its own timeout; the deadline covers a lost answer.
            let acked = with_deadline(
                timeout.saturating_mul(2),
                rl.wait_replicas(first.key.as_bytes(), 1, timeout),
            )
            .await;
            if !matches!(acked, Ok(n) if n >= 1) {
                for (i, _) in durable.iter().filter(|(_, k)| slot(&k.key) == s) {
                    self.count(ctx, *i, Outcome::UnreplicatedAdmit);
                }
            }
        }
    }

    fn admitted(&self, ctx: &Context<'_>, answer: &Answer) -> Verdict {
        for (i, k) in ctx.keyed.iter().enumerate() {
            if !k.rule.shadow {
                self.count(ctx, i, Outcome::Admit);
            }
        }
        for i in &answer.shadow_refused {
            self.count(ctx, *i, Outcome::ShadowRefuse);
        }
        Verdict {
            decision: Decision::Admit,
            outcome: Some(Outcome::Admit),
            status: None,
            headers: self.rate_headers(ctx, &answer.outcomes),
            problem: None,
            route: Some(ctx.route_name.to_string()),
            policy_version: ctx.policy.version,
        }
    }

    fn refused(&self, ctx: &Context<'_>, answer: &Answer) -> Verdict {
        let now = Instant::now();
        for (i, retry_ms) in &answer.refused {
            // A semaphore's slot can be released any moment, long before its `retry_after`:
            // only rate refusals are cached.
            let cacheable = ctx
                .keyed
                .get(*i)
                .filter(|k| matches!(k.rule.kind, RuleKind::Rate(_)));
            if let Some(k) = cacheable {
                self.cache.refused(
                    &k.rule.name,
                    &k.key,
                    k.cost(),
                    Duration::from_millis(*retry_ms),
                    now,
                );
            }
            self.count(ctx, *i, Outcome::Refuse);
        }
        self.too_many(ctx, &answer.refused, &answer.outcomes, Outcome::Refuse)
    }

    /// A 429: `Retry-After` from the longest refusing wait, jittered upward.
    fn too_many(
        &self,
        ctx: &Context<'_>,
        refusing: &[(usize, u64)],
        outcomes: &[(usize, HeaderOutcome)],
        outcome: Outcome,
    ) -> Verdict {
        let longest = refusing.iter().map(|(_, ms)| *ms).max().unwrap_or_default();
        let mut headers = self.rate_headers(ctx, outcomes);
        headers.push((RETRY_AFTER, self.retry_after(ctx, longest)));
        let mut order: Vec<usize> = refusing.iter().map(|(i, _)| *i).collect();
        order.sort_unstable();
        order.dedup();
        let violated: Vec<&str> = order
            .iter()
            .filter_map(|i| ctx.keyed.get(*i))
            .map(|k| k.rule.name.as_str())
            .collect();
        Verdict {
            decision: Decision::Refuse,
            outcome: Some(outcome),
            status: Some(429),
            headers,
            problem: Some(problem::too_many_requests(&violated)),
            route: Some(ctx.route_name.to_string()),
            policy_version: ctx.policy.version,
        }
    }

    fn retry_after(&self, ctx: &Context<'_>, wait_ms: u64) -> String {
        headers::retry_after_seconds(wait_ms, ctx.policy.retry_after_jitter, fastrand::f64())
            .max(1)
            .to_string()
    }

    /// `RateLimit-Policy` and `RateLimit` for the rules the caller may see: never shadow rules,
    /// and non-public rules only for a caller with a user.
    fn rate_headers(
        &self,
        ctx: &Context<'_>,
        outcomes: &[(usize, HeaderOutcome)],
    ) -> Vec<(&'static str, String)> {
        let mut shown: Vec<(usize, HeaderRule, HeaderOutcome)> = outcomes
            .iter()
            .filter_map(|(i, o)| {
                let k = ctx.keyed.get(*i)?;
                let visible = !k.rule.shadow && (k.rule.public || ctx.has_user);
                visible.then(|| (*i, header_rule(&k.rule), o.clone()))
            })
            .collect();
        shown.sort_by_key(|(i, _, _)| *i);
        let pairs: Vec<(HeaderRule, HeaderOutcome)> =
            shown.into_iter().map(|(_, r, o)| (r, o)).collect();
        headers::render(&pairs, self.legacy_headers)
    }

    /// The route's posture when the store gave no decision.
    fn posture(&self, ctx: &Context<'_>) -> Verdict {
        let base = Verdict {
            decision: Decision::Unavailable,
            outcome: None,
            status: None,
            headers: Vec::new(),
            problem: None,
            route: Some(ctx.route_name.to_string()),
            policy_version: ctx.policy.version,
        };
        match ctx.route.on_store_error {
            OnStoreError::Deny => {
                self.count_all(ctx, Outcome::UnavailableDeny);
                let wait_ms =
                    u64::try_from(ctx.policy.store.breaker_open.as_millis()).unwrap_or(u64::MAX);
                Verdict {
                    outcome: Some(Outcome::UnavailableDeny),
                    status: Some(503),
                    headers: vec![(RETRY_AFTER, self.retry_after(ctx, wait_ms))],
                    problem: Some(problem::limiter_unavailable()),
                    ..base
                }
            }
            OnStoreError::Allow => {
                self.count_all(ctx, Outcome::OpenAdmit);
                Verdict {
                    outcome: Some(Outcome::OpenAdmit),
                    ..base
                }
            }
            OnStoreError::Fallback(rule) => {
                // The policy guarantees a route has at least one rule.
                let Some(first) = ctx.keyed.first() else {
                    return Verdict {
                        outcome: Some(Outcome::FallbackAdmit),
                        ..base
                    };
                };
                let decided = self
                    .fallback(ctx.route_name, rule)
                    .admit(&first.key, first.cost());
                let spec = HeaderRule {
                    name: first.rule.name.clone(),
                    limit: rule.limit(),
                    period: Duration::from_micros(rule.period_us()),
                    capacity: rule.burst(),
                    semaphore: false,
                };
                let outcome = HeaderOutcome {
                    remaining: decided.remaining,
                    reset_after_ms: decided.reset_after_ms(),
                    retry_after_ms: (!decided.allowed).then(|| decided.retry_after_ms()),
                };
                let visible = first.rule.public || ctx.has_user;
                let mut headers = if visible {
                    headers::render(&[(spec, outcome)], self.legacy_headers)
                } else {
                    Vec::new()
                };
                if decided.allowed {
                    self.count(ctx, 0, Outcome::FallbackAdmit);
                    Verdict {
                        outcome: Some(Outcome::FallbackAdmit),
                        headers,
                        ..base
                    }
                } else {
                    self.count(ctx, 0, Outcome::FallbackRefuse);
                    headers.push((RETRY_AFTER, self.retry_after(ctx, decided.retry_after_ms())));
                    Verdict {
                        outcome: Some(Outcome::FallbackRefuse),
                        status: Some(429),
                        headers,
                        problem: Some(problem::too_many_requests(&[first.rule.name.as_str()])),
                        ..base
                    }
                }
            }
        }
    }

    fn fallback(&self, route: &str, rule: Rule) -> Arc<Fallback> {
        let mut map = self.fallbacks.lock().unwrap_or_else(|p| p.into_inner());
        match map.get(route) {
            Some((r, f)) if *r == rule => Arc::clone(f),
            _ => {
                let max = NonZeroUsize::new(self.policies.current().negative_cache.entries)
                    .unwrap_or(NonZeroUsize::MIN);
                let f = Arc::new(Fallback::new(rule, max));
                map.insert(route.to_string(), (rule, Arc::clone(&f)));
                f
            }
        }
    }

    fn count(&self, ctx: &Context<'_>, index: usize, outcome: Outcome) {
        if let Some(k) = ctx.keyed.get(index) {
            self.metrics.record(Event::Decision {
                route: ctx.route_name,
                rule: &k.rule.name,
                outcome,
            });
            log_decision(ctx, &k.rule.name, outcome);
        }
    }

    fn count_all(&self, ctx: &Context<'_>, outcome: Outcome) {
        for (i, k) in ctx.keyed.iter().enumerate() {
            if !k.rule.shadow {
                self.count(ctx, i, outcome);
            }
        }
    }
}

struct Context<'a> {
    policy: &'a Policy,
    route: &'a Route,
    route_name: &'a str,
    keyed: &'a [Keyed],
    has_user: bool,
    /// Whether this request's decisions are in the sampled decision log.
    sampled: bool,
}

/// The `tracing` target of decision logs.
pub const DECISION_LOG: &str = "redis_rl_client::decision";

const DEFAULT_LOG_SAMPLE: f64 = 0.01;

/// A decision log entry (`CLIENTS.md` section 6): the route, the rule, the policy version and
/// the outcome, never a key or an identity (keys are rendered from them).
fn log_decision(ctx: &Context<'_>, rule: &str, outcome: Outcome) {
    let (route, policy_version, name) = (ctx.route_name, ctx.policy.version, outcome.name());
    match outcome {
        Outcome::OpenAdmit => tracing::warn!(
            target: DECISION_LOG,
            route, rule, policy_version, outcome = name,
            "admitted without the store"
        ),
        Outcome::ShadowRefuse => tracing::info!(
            target: DECISION_LOG,
            route, rule, policy_version, outcome = name,
            "a shadow rule would have refused"
        ),
        _ if ctx.sampled => tracing::info!(
            target: DECISION_LOG,
            route, rule, policy_version, outcome = name,
            "decision"
        ),
        _ => {}
    }
}

/// The cluster slot of a key (CRC16 with the hash-tag rule), which a single server ignores.
fn slot(key: &str) -> u16 {
    redis::cluster_routing::get_slot(key.as_bytes())
}

fn nonempty(value: Option<&str>) -> Option<&str> {
    value.filter(|v| !v.is_empty())
}

fn header_rule(rule: &RuleSpec) -> HeaderRule {
    match &rule.kind {
        RuleKind::Rate(rate) => HeaderRule {
            name: rule.name.clone(),
            limit: rate.rule.limit(),
            period: Duration::from_micros(rate.rule.period_us()),
            capacity: rate.rule.burst(),
            semaphore: false,
        },
        RuleKind::Semaphore(sem) => HeaderRule {
            name: rule.name.clone(),
            limit: sem.concurrency,
            period: Duration::ZERO,
            capacity: sem.concurrency,
            semaphore: true,
        },
    }
}
