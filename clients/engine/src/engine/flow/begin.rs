//! The start of a request: its route and the caller's keys (an HTTP request), or keyed checks
//! given whole (what a face such as the Envoy rate limit service translates its requests
//! into); then the negative cache and the breaker, before the first store call.

use std::fmt::Write;
use std::sync::Arc;

use super::{Pending, Phase, MAX_IDENTITY};
use crate::breaker::Pass;
use crate::engine::ctx::{Before, Ctx, Keyed, Outcomes, Refusal};
use crate::engine::{Request, Shared, Step, IDEMPOTENCY_KEY};
use crate::headers::HeaderOutcome;
use crate::identity::{client_ip, network};
use crate::metrics::Event;
use crate::policy::{decode_unreserved, RequestIdentity, Routed, RuleKind, RuleSpec};
use crate::time::Instant;

/// The reservation id of a request that sent `Idempotency-Key`: the key scoped to the tenant
/// and the route, so one tenant's key never answers for another's request nor one route's for
/// another's, and hashed, so a key of any length the header allows is a valid id (the module
/// takes 1 to 256 bytes). 128 bits of SHA-1 in hex: the shape of a drawn id. Each part is
/// length-prefixed, so no two (tenant, route, key) triples hash the same bytes.
pub(crate) fn idempotency_id(tenant: Option<&[u8]>, route: &str, key: &[u8]) -> Vec<u8> {
    let mut hash = sha1_smol::Sha1::new();
    for part in [tenant.unwrap_or_default(), route.as_bytes(), key] {
        hash.update(&(part.len() as u64).to_be_bytes());
        hash.update(part);
    }
    let digest = hash.digest().bytes();
    let mut id = String::with_capacity(32);
    for b in digest.iter().take(16) {
        let _ = write!(id, "{b:02x}");
    }
    id.into_bytes()
}

impl Pending {
    /// A request's state before its first call; its deadline is `timeout` from `now`.
    fn new(shared: Arc<Shared>, timeout: std::time::Duration, now: Instant) -> Pending {
        Pending {
            id: Vec::new(),
            keyed_id: false,
            ticket: None,
            sent: false,
            started: now,
            deadline: now.saturating_add(timeout),
            phase: Phase::Done,
            expect: Vec::new(),
            taken: smallvec::SmallVec::new(),
            refilled: Vec::new(),
            held: Vec::new(),
            reserved: Vec::new(),
            answer: Outcomes::default(),
            drawing: None,
            slot: None,
            parked: None,
            ctx: None,
            shared,
        }
    }

    pub(crate) fn begin(
        shared: Arc<Shared>,
        request: &Request<'_>,
        now: Instant,
    ) -> (Pending, Step) {
        let policy = shared.policy.load_full();
        let mut pending = Pending::new(shared, policy.store.timeout, now);
        let path = decode_unreserved(request.path);
        let (route, captures) = match policy.route(request.method, &path, request.case_insensitive)
        {
            Routed::Route {
                route, captures, ..
            } => (Arc::clone(route), captures),
            Routed::Unmatched => {
                pending.shared.metrics.record(Event::Unmatched);
                let verdict = crate::engine::Verdict::unmatched(policy.version);
                return (pending, Step::Done(verdict));
            }
            Routed::BadPath(error) => {
                let verdict = crate::engine::Verdict::bad_path(policy.version, error);
                return (pending, Step::Done(verdict));
            }
        };
        if route.is_default() {
            pending.shared.metrics.record(Event::Unmatched);
        }
        let header = |name: Option<&str>| -> Option<&[u8]> {
            request.headers.first(name?).filter(|v| !v.is_empty())
        };
        let caller = request.caller;
        let tenant_of = || {
            caller
                .and_then(|c| c.tenant.as_deref().filter(|t| !t.is_empty()))
                .map(str::as_bytes)
                .or_else(|| header(policy.identity.tenant.as_deref()))
        };
        if route.exempt() {
            // No rule to decide: only its capacity, if it names one (the caller is looked up
            // only then: an exempt route is otherwise decided without reading a header).
            if route.capacity.is_some() {
                let tenant = tenant_of();
                let plan = policy.plans.as_ref().map(|plans| {
                    let plan = plans.resolve(header(policy.identity.plan.as_deref()), tenant);
                    (plan.plan, plans)
                });
                pending.drawing = pending.shared.drawing(&route, tenant, plan, now);
            }
            let verdict = pending.shared.exempt(&policy, &route);
            return (pending, Step::Done(verdict));
        }
        let tenant = tenant_of();
        let user = caller
            .and_then(|c| c.user.as_deref().filter(|u| !u.is_empty()))
            .map(str::as_bytes)
            .or_else(|| header(policy.identity.user.as_deref()));
        // An identity longer than any real one is a caller's attempt to grow the tables.
        let keyed_headers = route.key_headers().iter().map(|name| header(Some(name)));
        if [user, tenant]
            .into_iter()
            .chain(keyed_headers)
            .flatten()
            .any(|v| v.len() > MAX_IDENTITY)
        {
            let verdict = crate::engine::Verdict::identity_too_long(policy.version, route.name());
            return (pending, Step::Done(verdict));
        }
        if captures.iter().any(|(_, v)| v.len() > MAX_IDENTITY) {
            let verdict = crate::engine::Verdict::segment_too_long(policy.version, route.name());
            return (pending, Step::Done(verdict));
        }
        // The caller's plan (a plan header naming no plan is ignored, and counted).
        let plan = policy.plans.as_ref().map(|plans| {
            let resolved = plans.resolve(header(policy.identity.plan.as_deref()), tenant);
            if resolved.unknown {
                pending.shared.metrics.record(Event::UnknownPlan);
            }
            resolved.plan
        });
        let plan_name = plan
            .zip(policy.plans.as_ref())
            .and_then(|(p, plans)| plans.name(p));
        pending.drawing =
            pending
                .shared
                .drawing(&route, tenant, plan.zip(policy.plans.as_ref()), now);
        let ip = route
            .uses_ip()
            .then(|| client_ip(&policy.identity, request.headers, request.peer))
            .flatten()
            .map(|ip| network(&policy.identity, ip));
        let id = RequestIdentity {
            user,
            tenant,
            ip: ip.as_deref().map(str::as_bytes),
            route: Some(route.name().as_bytes()),
            plan: plan_name.map(|n| n.as_bytes()),
            headers: Some(request.headers),
            path: &captures,
            hash: policy.identity.hash.as_ref(),
        };
        // Each rule with the caller's numbers: an override's, its plan's, or its own.
        let overrides = policy.overrides.of(tenant);
        let keyed: Vec<Keyed> = route
            .rules
            .iter()
            .map(|rule| {
                let effective = policy.effective(rule, plan, &overrides, user, now);
                Keyed::of(Arc::clone(effective), rule.key.render(&id))
                    .allocated(&pending.shared.allocations, now)
            })
            .collect();
        let sample = pending.shared.options.log_sample;
        let sampled = sample > 0.0 && pending.shared.rng.f64() < sample;
        // The reservation id, for `settle` rules only: the caller's key hashed with its tenant
        // and route, or one drawn when a reservation is first made.
        pending.id = request
            .headers
            .first(IDEMPOTENCY_KEY)
            .filter(|v| !v.is_empty())
            .map(|key| idempotency_id(tenant, route.name(), key))
            .unwrap_or_default();
        pending.keyed_id = !pending.id.is_empty();
        let plan_name = plan_name.cloned();
        let ctx = Ctx {
            policy,
            route,
            keyed,
            has_user: user.is_some(),
            sampled,
            plan: plan_name,
            checks: false,
        };
        pending.start(ctx, now)
    }

    /// A request whose rules and keys are known: the negative cache, the breaker, then the
    /// store, phase by phase. An HTTP request refused before any call makes none; keyed checks
    /// then ask their others, without spending ([`Pending::refuse_before`]).
    fn start(self, mut ctx: Ctx, now: Instant) -> (Pending, Step) {
        let mut pending = self;
        let shared = Arc::clone(&pending.shared);
        let mut first = Phase::Grant(0);
        if ctx.checks {
            if pending.refuse_before(&mut ctx, now) {
                let shadow_asks = |k: &Keyed| {
                    k.rule.shadow && k.refuse.is_none() && matches!(k.rule.kind, RuleKind::Rate(_))
                };
                if !ctx.keyed.iter().any(|k| k.asks() || shadow_asks(k)) {
                    pending.ctx = Some(ctx);
                    let step = pending.refused(now);
                    return (pending, step);
                }
                first = Phase::Rest;
            }
        } else if let Some(verdict) = shared.refuse_cached(&ctx, now) {
            pending.ctx = Some(ctx);
            return (pending, Step::Done(verdict));
        }
        let draw = shared.rng.f64();
        let pass = shared.breaker.enter(now, &ctx.route.on_store_error, draw);
        // Entering moves the breaker too (half-open, a probe, closed after the ramp): the gauge
        // shows where it is now, not where the last call left it.
        shared
            .metrics
            .record(Event::Breaker(shared.breaker.state(now)));
        match pass {
            Pass::Store(ticket) => pending.ticket = Some(ticket),
            // Refused whatever the store would say: the others stay unasked.
            Pass::Posture if first == Phase::Rest => {
                pending.ctx = Some(ctx);
                let step = pending.refused(now);
                return (pending, step);
            }
            Pass::Posture => {
                let verdict = shared.posture(&ctx, now);
                pending.ctx = Some(ctx);
                return (pending, Step::Done(verdict));
            }
        }
        pending.ctx = Some(ctx);
        pending.phase = first;
        let step = pending.advance(now);
        (pending, step)
    }

    /// Keyed checks: notes the checks refused before any call (a blocked shadow check as a
    /// shadow refusal); when one refuses the request, the others spend nothing and are only
    /// asked, so that each outcome says what its key holds. Whether the request is refused.
    fn refuse_before(&mut self, ctx: &mut Ctx, now: Instant) -> bool {
        for (i, k) in ctx.keyed.iter().enumerate() {
            if let (true, Some(refusal)) = (k.rule.shadow, k.refuse) {
                let refused = HeaderOutcome::refused(refusal.wait_ms);
                self.answer.outcomes.push((i, refused));
                self.answer.shadow_refused.push(i);
                self.answer.before.push((i, refusal.by));
            }
        }
        let refusals = self.shared.refused_before(ctx, now);
        if refusals.is_empty() {
            return false;
        }
        for (i, refusal) in refusals {
            let refused = HeaderOutcome::refused(refusal.wait_ms);
            self.answer.outcomes.push((i, refused));
            self.answer.refused.push((i, refusal.wait_ms));
            self.answer.before.push((i, refusal.by));
            if let Some(k) = ctx.keyed.get_mut(i) {
                k.refuse = Some(refusal);
            }
        }
        for k in &mut ctx.keyed {
            k.spend = false;
        }
        true
    }

    /// Keyed checks, decided together under the policy's default route (its posture, its
    /// name in metrics and records): see [`crate::engine::Check`].
    pub(crate) fn begin_checks(
        shared: Arc<Shared>,
        route: &str,
        checks: Vec<crate::engine::Check>,
        now: Instant,
    ) -> (Pending, Step) {
        let policy = shared.policy.load_full();
        let pending = Pending::new(shared, policy.store.timeout, now);
        let route = policy
            .routes
            .iter()
            .chain(std::iter::once(&policy.default))
            .find(|r| r.name() == route)
            .map(Arc::clone);
        let Some(route) = route else {
            // The face names a route its own policy lacks: its bug, answered 500.
            let verdict = crate::engine::Verdict::no_such_route(policy.version, checks.len());
            return (pending, Step::Done(verdict));
        };
        let sample = pending.shared.options.log_sample;
        let sampled = sample > 0.0 && pending.shared.rng.f64() < sample;
        let keyed = checks
            .into_iter()
            .map(|c| {
                let cost = c.cost.max(1);
                let blocked =
                    c.blocked || matches!(&c.rule.kind, RuleKind::Rate(r) if cost > r.rule.burst());
                let keyed = Keyed {
                    refuse: blocked.then(|| Refusal {
                        wait_ms: blocked_wait(&c.rule, now),
                        by: Before::Blocked,
                    }),
                    rule: c.rule,
                    key: c.key,
                    cost,
                    spend: c.cost > 0,
                };
                if blocked {
                    keyed
                } else {
                    keyed.allocated(&pending.shared.allocations, now)
                }
            })
            .collect();
        let ctx = Ctx {
            route,
            policy,
            keyed,
            has_user: true,
            sampled,
            plan: None,
            checks: true,
        };
        pending.start(ctx, now)
    }
}

/// When a blocked check's request could be retried: at the end of the current window of its
/// rule's period (as the reference service reports a limit's reset), or after a semaphore's
/// lease.
fn blocked_wait(rule: &RuleSpec, now: Instant) -> u64 {
    let span_us = match &rule.kind {
        RuleKind::Rate(r) => {
            let period = r.rule.period_us().max(1);
            period.saturating_sub(now.as_micros().checked_rem(period).unwrap_or(0))
        }
        RuleKind::Semaphore(s) => u64::try_from(s.lease.as_micros()).unwrap_or(u64::MAX),
    };
    span_us.div_ceil(1000).max(1)
}
