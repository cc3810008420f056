//! The start of a request: its route and the caller's keys (an HTTP request), or keyed checks
//! given whole (what a face such as the Envoy rate limit service translates its requests
//! into); then the negative cache and the breaker, before the first store call.

use std::fmt::Write;
use std::sync::Arc;

use super::{Pending, Phase, MAX_IDENTITY};
use crate::breaker::Pass;
use crate::engine::ctx::{Ctx, Keyed, Outcomes};
use crate::engine::{Request, Shared, Step, IDEMPOTENCY_KEY};
use crate::identity::{client_ip, network};
use crate::metrics::Event;
use crate::policy::{decode_unreserved, RequestIdentity, Routed};
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
            taken: Vec::new(),
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
    /// store, phase by phase.
    fn start(self, ctx: Ctx, now: Instant) -> (Pending, Step) {
        let mut pending = self;
        let shared = Arc::clone(&pending.shared);
        if let Some(verdict) = shared.refuse_cached(&ctx, now) {
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
            Pass::Posture => {
                let verdict = shared.posture(&ctx, now);
                pending.ctx = Some(ctx);
                return (pending, Step::Done(verdict));
            }
        }
        pending.ctx = Some(ctx);
        pending.phase = Phase::Grant(0);
        let step = pending.advance(now);
        (pending, step)
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
                Keyed {
                    rule: c.rule,
                    key: c.key,
                    cost: c.cost.max(1),
                    spend: c.cost > 0,
                    refuse: None,
                }
                .allocated(&pending.shared.allocations, now)
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
