//! The engine that decides one request (`CLIENTS.md` sections 1 to 6): it renders the route's
//! keys for the caller, refuses from the negative cache when it can, otherwise asks the store
//! (semaphores first, then one `RL.MULTI`, then the rules that live outside it), and turns the
//! answer, or its absence, into exactly one of admit, refuse or unavailable.
//!
//! Not here yet: shadow semaphores (not evaluated), `durable` (no `WAIT`).

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::HeaderMap;
use lru::LruCache;
use rl_core::rule::Rule;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::cache::NegativeCache;
use crate::client::{Rl, RlConnection};
use crate::command::{Acquire, Admit, Grant, Multi, MultiRule};
use crate::headers::{self, Outcome as HeaderOutcome, RuleSpec as HeaderRule};
use crate::metrics::{CallResult, Event, Metrics, Outcome};
use crate::policy::{
    GrantSpec, Identity, OnStoreError, Policy, PolicyError, PolicyStore, RateSpec, RequestIdentity,
    Route, RuleKind, RuleSpec,
};
use crate::posture::{with_deadline, Breaker, Fallback, Pass, StoreFailure};
use crate::problem::{self, Problem};
use crate::reply::Error;

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

    fn cost(&self) -> u64 {
        match &self.rule.kind {
            RuleKind::Rate(r) => r.cost,
            RuleKind::Semaphore(_) => 1,
        }
    }
}

/// How the store answered.
struct Answer {
    /// The rules that refused: (index in the route, retry after in ms). Empty when admitted.
    refused: Vec<(usize, u64)>,
    outcomes: Vec<(usize, HeaderOutcome)>,
    shadow_refused: Vec<usize>,
}

/// A slot of a semaphore rule held for one request.
struct Held {
    key: Vec<u8>,
    holder: Vec<u8>,
    lease: Duration,
}

/// A reservation (`RESERVE id`) of a `settle` rule, settled after the response.
struct Reserved {
    key: Vec<u8>,
    id: Vec<u8>,
}

/// What a request holds in the store. Semaphore slots are renewed at a third of their lease
/// while the request runs and released when this is dropped (the response ended or the
/// request was cancelled); reservations are settled by [`Leases::settle`], or their estimate
/// stands.
pub struct Leases<C: RlConnection + 'static> {
    rl: Rl<C>,
    held: Vec<Held>,
    reserved: Vec<Reserved>,
    heartbeat: Option<JoinHandle<()>>,
}

/// A release that cannot be sent in this long is abandoned: the lease expires on its own.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(1);

impl<C: RlConnection + 'static> Leases<C> {
    fn new(rl: Rl<C>, held: Vec<Held>, reserved: Vec<Reserved>) -> Leases<C> {
        let heartbeat = held.iter().map(|h| h.lease / 3).min().and_then(|every| {
            if every.is_zero() {
                return None;
            }
            let rl = rl.clone();
            let renew: Vec<_> = held
                .iter()
                .map(|h| (h.key.clone(), h.holder.clone(), h.lease))
                .collect();
            Some(tokio::spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    for (key, holder, lease) in &renew {
                        // A failed renewal leaves the lease to run out; the request goes on.
                        let _ = tokio::time::timeout(every, rl.renew(key, holder, *lease)).await;
                    }
                }
            }))
        });
        Leases {
            rl,
            held,
            reserved,
            heartbeat,
        }
    }

    /// Settles the request's reservations with the units the backend reported. A settlement
    /// that fails leaves the estimate standing; a retried one changes nothing (the module
    /// settles an id once).
    pub async fn settle(&mut self, actual: u64) {
        for r in std::mem::take(&mut self.reserved) {
            let _ =
                tokio::time::timeout(RELEASE_TIMEOUT, self.rl.settle(&r.key, &r.id, actual)).await;
        }
    }

    /// How many slots are held.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Releases every slot now and waits for the store's answers.
    pub async fn release(mut self) {
        let held = std::mem::take(&mut self.held);
        release_all(&self.rl, held).await;
    }
}

async fn release_all<C: RlConnection>(rl: &Rl<C>, held: Vec<Held>) {
    for h in held {
        // An unreleased slot frees itself when its lease runs out.
        let _ = tokio::time::timeout(RELEASE_TIMEOUT, rl.release(&h.key, &h.holder)).await;
    }
}

impl<C: RlConnection + 'static> Drop for Leases<C> {
    fn drop(&mut self) {
        if let Some(beat) = self.heartbeat.take() {
            beat.abort();
        }
        let held = std::mem::take(&mut self.held);
        if held.is_empty() {
            return;
        }
        // Outside a runtime nothing can be sent; the leases then run out on their own.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let rl = self.rl.clone();
            runtime.spawn(async move { release_all(&rl, held).await });
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
}

/// Tokens leased with `RL.GRANT`, spent locally until `until`.
#[derive(Debug, Default)]
struct Chunk {
    tokens: u64,
    until: Option<Instant>,
    /// Bumped by each refill, so a token is given back only to the chunk it came from.
    generation: u64,
}

/// A token taken from a chunk, to give back if a later rule refuses the request.
struct Taken {
    chunk: Arc<tokio::sync::Mutex<Chunk>>,
    generation: u64,
    cost: u64,
}

impl<C: RlConnection + 'static> Gateway<C> {
    /// The negative cache and the breaker are sized from the policy in force now; a reload
    /// changes rules and routes, not those.
    pub fn new(rl: Rl<C>, policies: PolicyStore, metrics: Arc<Metrics>) -> Gateway<C> {
        let policy = policies.current();
        metrics.policy_loaded(&policy);
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
        }
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
        let user = header(&policy.identity.user);
        let ip =
            client_ip(&policy.identity, request.headers, request.peer).map(|ip| ip.to_string());
        let id = RequestIdentity {
            user,
            tenant: header(&policy.identity.tenant),
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
        let mut held = Vec::new();
        let mut reserved = Vec::new();
        let asked = with_deadline(
            policy.store.timeout,
            self.ask(&keyed, id.as_bytes(), &mut held, &mut reserved),
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
        let leases = Leases::new(self.rl.clone(), held, reserved);
        match asked {
            Ok(answer) if answer.refused.is_empty() => (self.admitted(&ctx, &answer), leases),
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

    /// Grant rules first, from their local chunks; then the store rules. Tokens taken are given
    /// back when a later rule refuses.
    async fn ask(
        &self,
        keyed: &[Keyed],
        id: &[u8],
        held: &mut Vec<Held>,
        reserved: &mut Vec<Reserved>,
    ) -> Result<Answer, Error> {
        let mut taken = Vec::new();
        for (i, k) in keyed.iter().enumerate() {
            let RuleKind::Rate(rate) = &k.rule.kind else {
                continue;
            };
            let Some(grant) = rate.grant.filter(|_| !k.rule.shadow) else {
                continue;
            };
            match self.take(k, rate, grant).await? {
                Ok(t) => taken.push(t),
                Err(retry_after_ms) => {
                    give_back(taken).await;
                    return Ok(Answer {
                        refused: vec![(i, retry_after_ms)],
                        outcomes: vec![(i, HeaderOutcome::refused(retry_after_ms))],
                        shadow_refused: Vec::new(),
                    });
                }
            }
        }
        let answer = self.ask_store(keyed, id, held, reserved).await?;
        if !answer.refused.is_empty() {
            give_back(taken).await;
        }
        Ok(answer)
    }

    /// Takes `cost` tokens of a grant rule from its chunk, refilling it with `RL.GRANT` when it
    /// is spent or lapsed. `Err(retry_after_ms)` when the store grants too little.
    async fn take(
        &self,
        k: &Keyed,
        rate: &RateSpec,
        grant: GrantSpec,
    ) -> Result<Result<Taken, u64>, Error> {
        let slot = format!("{}:{}{}", k.rule.name.len(), k.rule.name, k.key);
        let chunk = {
            let mut chunks = self.chunks.lock().unwrap_or_else(|p| p.into_inner());
            Arc::clone(chunks.get_or_insert(slot, Default::default))
        };
        let mut c = chunk.lock().await;
        let live = c.until.is_some_and(|until| Instant::now() < until);
        if !live || c.tokens < rate.cost {
            let mut request = Grant::new(
                k.key.as_bytes(),
                rate.rule.limit(),
                Duration::from_micros(rate.rule.period_us()),
                grant.want.max(rate.cost),
            )
            .algo(rate.algo)
            .ttl(grant.ttl);
            if rate.burst_given {
                request = request.burst(rate.rule.burst());
            }
            let reply = self.rl.grant(&request).await?;
            self.metrics
                .record(Event::GrantRefill { rule: &k.rule.name });
            // The chunk lapses `valid_ms` after its reply arrived; unspent tokens lapse with it.
            c.tokens = reply.granted;
            c.until = Instant::now().checked_add(Duration::from_millis(reply.valid_ms));
            c.generation = c.generation.wrapping_add(1);
            if c.tokens < rate.cost {
                return Ok(Err(reply.retry_after_ms.max(1)));
            }
        }
        c.tokens = c.tokens.saturating_sub(rate.cost);
        Ok(Ok(Taken {
            chunk: Arc::clone(&chunk),
            generation: c.generation,
            cost: rate.cost,
        }))
    }

    /// Semaphores first, then the `settle` rules (`RESERVE id`), then one `RL.MULTI`, then the
    /// shadow rules. A refusal stops there: the slots already acquired are
    /// in `held`, to be released, and reservations already made are refunded (settled at 0).
    async fn ask_store(
        &self,
        keyed: &[Keyed],
        id: &[u8],
        held: &mut Vec<Held>,
        reserved: &mut Vec<Reserved>,
    ) -> Result<Answer, Error> {
        let mut answer = Answer {
            refused: Vec::new(),
            outcomes: Vec::new(),
            shadow_refused: Vec::new(),
        };
        for (i, k) in keyed.iter().enumerate() {
            let RuleKind::Semaphore(sem) = &k.rule.kind else {
                continue;
            };
            if k.rule.shadow {
                continue;
            }
            let lease = self
                .rl
                .acquire(&Acquire::new(k.key.as_bytes(), sem.concurrency, sem.lease))
                .await?;
            let outcome = HeaderOutcome {
                remaining: sem.concurrency.saturating_sub(lease.in_flight),
                reset_after_ms: 0,
                retry_after_ms: (!lease.acquired).then_some(lease.retry_after_ms),
            };
            answer.outcomes.push((i, outcome));
            match lease.holder {
                Some(holder) if lease.acquired => held.push(Held {
                    key: k.key.clone().into_bytes(),
                    holder,
                    lease: sem.lease,
                }),
                _ => {
                    answer.refused.push((i, lease.retry_after_ms));
                    return Ok(answer);
                }
            }
        }

        for (i, k) in keyed.iter().enumerate() {
            let RuleKind::Rate(rate) = &k.rule.kind else {
                continue;
            };
            if !k.settles() {
                continue;
            }
            let mut admit = Admit::new(
                k.key.as_bytes(),
                rate.rule.limit(),
                Duration::from_micros(rate.rule.period_us()),
            )
            .algo(rate.algo)
            .cost(rate.cost)
            .reserve(id, None);
            if rate.burst_given {
                admit = admit.burst(rate.rule.burst());
            }
            let decided = self.rl.admit(&admit).await?;
            answer.outcomes.push((i, HeaderOutcome::of(&decided)));
            if !decided.allowed {
                self.refund(reserved).await?;
                answer.refused.push((i, decided.retry_after_ms));
                return Ok(answer);
            }
            reserved.push(Reserved {
                key: k.key.clone().into_bytes(),
                id: id.to_vec(),
            });
        }

        let multi: Vec<(usize, MultiRule)> = keyed
            .iter()
            .enumerate()
            .filter(|(_, k)| k.rule.in_multi() && !k.settles())
            .filter_map(|(i, k)| match &k.rule.kind {
                RuleKind::Rate(rate) => {
                    let mut rule = MultiRule::new(
                        k.rule.name.clone(),
                        k.key.as_bytes(),
                        rate.rule.limit(),
                        Duration::from_micros(rate.rule.period_us()),
                    )
                    .algo(rate.algo)
                    .cost(rate.cost);
                    if rate.burst_given {
                        rule = rule.burst(rate.rule.burst());
                    }
                    Some((i, rule))
                }
                RuleKind::Semaphore(_) => None,
            })
            .collect();
        if !multi.is_empty() {
            let index: HashMap<String, usize> =
                multi.iter().map(|(i, r)| (r.name.clone(), *i)).collect();
            let decided = self
                .rl
                .multi(&Multi::new(multi.into_iter().map(|(_, r)| r).collect()))
                .await?;
            for rule in &decided.rules {
                if let Some(i) = index.get(&rule.name) {
                    let refusing = decided.denied_by.as_deref() == Some(rule.name.as_str());
                    answer.outcomes.push((
                        *i,
                        HeaderOutcome {
                            remaining: rule.remaining,
                            reset_after_ms: rule.reset_after_ms,
                            retry_after_ms: refusing.then_some(decided.retry_after_ms),
                        },
                    ));
                }
            }
            if !decided.allowed {
                self.refund(reserved).await?;
                let by = decided.denied_by.as_ref().and_then(|name| index.get(name));
                // A refusal without a known rule is still a refusal: pin it on the first.
                let i = by.copied().or_else(|| index.values().min().copied());
                answer
                    .refused
                    .push((i.unwrap_or_default(), decided.retry_after_ms));
                return Ok(answer);
            }
        }

        for (i, k) in keyed.iter().enumerate() {
            let RuleKind::Rate(rate) = &k.rule.kind else {
                continue;
            };
            if k.rule.in_multi() || (rate.grant.is_some() && !k.rule.shadow) {
                continue;
            }
            let key = if k.rule.shadow {
                format!("shadow:{}", k.key)
            } else {
                k.key.clone()
            };
            let mut admit = Admit::new(
                key,
                rate.rule.limit(),
                Duration::from_micros(rate.rule.period_us()),
            )
            .algo(rate.algo)
            .cost(rate.cost);
            if rate.burst_given {
                admit = admit.burst(rate.rule.burst());
            }
            let decided = self.rl.admit(&admit).await?;
            if k.rule.shadow {
                if !decided.allowed {
                    answer.shadow_refused.push(i);
                }
                continue;
            }
            answer.outcomes.push((i, HeaderOutcome::of(&decided)));
            if !decided.allowed {
                self.refund(reserved).await?;
                answer.refused.push((i, decided.retry_after_ms));
                return Ok(answer);
            }
        }
        Ok(answer)
    }

    /// Gives back what the request reserved before a later rule refused it.
    async fn refund(&self, reserved: &mut Vec<Reserved>) -> Result<(), Error> {
        for r in std::mem::take(reserved) {
            self.rl.settle(&r.key, &r.id, 0).await?;
        }
        Ok(())
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

/// Returns tokens to the chunks they came from (a refilled chunk does not take them back).
async fn give_back(taken: Vec<Taken>) {
    for t in taken {
        let mut c = t.chunk.lock().await;
        if c.generation == t.generation {
            c.tokens = c.tokens.saturating_add(t.cost);
        }
    }
}

struct Context<'a> {
    policy: &'a Policy,
    route: &'a Route,
    route_name: &'a str,
    keyed: &'a [Keyed],
    has_user: bool,
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

/// The caller's address: the peer, unless the peer is a trusted proxy; then `X-Forwarded-For`
/// is read from the right, skipping trusted proxies, and the first untrusted hop is the client
/// (entries left of it were written by the caller and prove nothing).
pub fn client_ip(identity: &Identity, headers: &HeaderMap, peer: Option<IpAddr>) -> Option<IpAddr> {
    let mut client = peer?;
    if !identity.trusts(client) {
        return Some(client);
    }
    let hops: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    for hop in hops.iter().rev() {
        // A malformed hop ends the chain: nothing left of it can be trusted.
        let Ok(ip) = hop.parse::<IpAddr>() else {
            break;
        };
        client = ip;
        if !identity.trusts(ip) {
            break;
        }
    }
    Some(client)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(trusted: &[&str]) -> Identity {
        let policy = Policy::from_json(&format!(
            r#"{{"version": 1, "identity": {{"trusted_proxies": {}}},
                "rules": {{"r": {{"key": "k", "limit": 1, "period": "1s"}}}},
                "routes": [{{"method": "GET", "path": "/", "rules": ["r"]}}]}}"#,
            serde_json::to_string(trusted).unwrap()
        ))
        .unwrap();
        policy.identity
    }

    fn xff(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", value.parse().unwrap());
        h
    }

    #[test]
    fn forwarded_for_is_read_only_from_trusted_proxies() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let none = identity(&[]);
        // An untrusted peer cannot name someone else.
        assert_eq!(
            client_ip(&none, &xff("9.9.9.9"), Some(ip("127.0.0.5"))),
            Some(ip("127.0.0.5"))
        );
        let proxies = identity(&["127.0.0.0/8"]);
        assert_eq!(
            client_ip(
                &proxies,
                &xff("1.1.1.1, 2.2.2.2, 127.0.0.9"),
                Some(ip("127.0.0.5"))
            ),
            Some(ip("2.2.2.2"))
        );
        // A malformed hop stops the walk at the last address read.
        assert_eq!(
            client_ip(
                &proxies,
                &xff("1.1.1.1, junk, 127.0.0.9"),
                Some(ip("127.0.0.5"))
            ),
            Some(ip("127.0.0.9"))
        );
        assert_eq!(client_ip(&proxies, &HeaderMap::new(), None), None);
    }
}
