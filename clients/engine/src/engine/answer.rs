//! The verdict of each way a request ends: admitted, refused (by the store or the negative
//! cache), the module's refusal of a call, exempt, shed, and the route's posture when the store
//! gave no decision.

use std::time::Duration;

use smallvec::SmallVec;

use super::checks::{self, CheckOutcome, CheckSource};
use super::ctx::{Before, Ctx, Outcomes, Refusal};
use super::verdict::{LogLevel, LogRecord, Verdict, VerdictKind};
use super::{Shared, RETRY_AFTER};
use crate::headers::{self, HeaderOutcome, HeaderRule};
use crate::metrics::{Event, Outcome};
use crate::policy::{OnStoreError, Policy, Route, RuleKind};
use crate::problem;
use crate::time::{millis, Instant};
use crate::wire::Error;

impl Shared {
    /// The rules refused before any call (shadow rules apart): those refused as they were
    /// keyed ([`Keyed::refuse`](super::ctx::Keyed)), and those whose key the negative cache
    /// holds refused.
    pub(crate) fn refused_before(&self, ctx: &Ctx, now: Instant) -> Vec<(usize, Refusal)> {
        ctx.keyed
            .iter()
            .enumerate()
            .filter(|(_, k)| !k.rule.shadow)
            .filter_map(|(i, k)| {
                if let Some(refusal) = k.refuse {
                    return Some((i, refusal));
                }
                let wait = self.cache.check(&k.rule.name, &k.key, k.cost(), now)?;
                let refusal = Refusal {
                    wait_ms: millis(wait).max(1),
                    by: Before::Cache,
                };
                Some((i, refusal))
            })
            .collect()
    }

    /// Refuses an HTTP request without any call when one of its rules is refused before any
    /// (see [`Shared::refused_before`]).
    pub(crate) fn refuse_cached(&self, ctx: &Ctx, now: Instant) -> Option<Verdict> {
        let refusals = self.refused_before(ctx, now);
        if refusals.is_empty() {
            return None;
        }
        let mut log = Vec::new();
        for (i, refusal) in &refusals {
            self.count(ctx, *i, refusal.by.outcome(), &mut log);
        }
        let waits: Vec<(usize, u64)> = refusals.iter().map(|(i, r)| (*i, r.wait_ms)).collect();
        let outcomes: Vec<(usize, HeaderOutcome)> = waits
            .iter()
            .map(|(i, wait)| (*i, HeaderOutcome::refused(*wait)))
            .collect();
        let mut verdict = self.too_many(ctx, &waits, &outcomes, Outcome::RefuseCached);
        verdict.log = log;
        Some(verdict)
    }

    pub(crate) fn admitted(&self, ctx: &Ctx, answer: &Outcomes) -> Verdict {
        let mut log = Vec::new();
        for (i, k) in ctx.keyed.iter().enumerate() {
            if !k.rule.shadow {
                self.count(ctx, i, Outcome::Admit, &mut log);
            }
        }
        self.shadows(ctx, answer, &mut log);
        Verdict {
            headers: self.rate_headers(ctx, &answer.outcomes),
            log,
            checks: checks::outcomes(ctx, answer),
            ..ctx.base(VerdictKind::Admit, Outcome::Admit)
        }
    }

    pub(crate) fn refused(&self, ctx: &Ctx, answer: &Outcomes, now: Instant) -> Verdict {
        let mut log = Vec::new();
        for (i, retry_ms) in &answer.refused {
            let before = answer.before(*i);
            // A semaphore's slot can be released any moment, long before its `retry_after`:
            // only rate refusals are cached (once: a refusal before any call is not the
            // store's).
            let cacheable = ctx
                .keyed
                .get(*i)
                .filter(|k| matches!(k.rule.kind, RuleKind::Rate(_)))
                .filter(|_| !answer.uncached.contains(i) && before.is_none());
            if let Some(k) = cacheable {
                self.cache.refused(
                    &k.rule.name,
                    &k.key,
                    k.cost(),
                    Duration::from_millis(*retry_ms),
                    now,
                );
            }
            self.count(
                ctx,
                *i,
                before.map_or(Outcome::Refuse, Before::outcome),
                &mut log,
            );
        }
        // A shadow semaphore found full before the refusal still would have refused.
        self.shadows(ctx, answer, &mut log);
        // Refused from the negative cache when every refusing rule was.
        let outcome = if answer
            .refused
            .iter()
            .all(|(i, _)| answer.before(*i).map(Before::outcome) == Some(Outcome::RefuseCached))
        {
            Outcome::RefuseCached
        } else {
            Outcome::Refuse
        };
        let mut verdict = self.too_many(ctx, &answer.refused, &answer.outcomes, outcome);
        verdict.log = log;
        verdict.checks = checks::outcomes(ctx, answer);
        verdict
    }

    /// A 500: the module refused a call.
    pub(crate) fn store_refused(&self, ctx: &Ctx, error: &Error) -> Verdict {
        let mut log = Vec::new();
        self.count_all(ctx, Outcome::Error, &mut log);
        Verdict {
            status: Some(500),
            problem: Some(problem::store_refused(&error.to_string())),
            log,
            ..ctx.base(VerdictKind::Error, Outcome::Error)
        }
    }

    /// An exempt route's request (`"rules": []`): it passes, counted `exempt`, with no
    /// headers (there is no limit to tell).
    pub(crate) fn exempt(&self, policy: &Policy, route: &Route) -> Verdict {
        self.metrics.record(Event::Decision {
            route: route.name(),
            rule: "",
            outcome: Outcome::Exempt,
        });
        Verdict {
            outcome: Some(Outcome::Exempt),
            route: Some(route.name().to_string()),
            ..Verdict::pass(policy.version)
        }
    }

    /// A 503 for the gateway's own overload: each rule of the route counted `shed`, and
    /// `Retry-After` a jittered second, the time a saturated process needs to drain.
    pub(crate) fn shed(&self, policy: &Policy, route: &Route) -> Verdict {
        for rule in route.rules.iter().filter(|r| !r.shadow) {
            self.metrics.record(Event::Decision {
                route: route.name(),
                rule: &rule.name,
                outcome: Outcome::Shed,
            });
        }
        let seconds =
            headers::retry_after_seconds(1000, policy.retry_after_jitter, self.rng.f64()).max(1);
        Verdict {
            kind: VerdictKind::Shed,
            outcome: Some(Outcome::Shed),
            status: Some(503),
            headers: vec![(RETRY_AFTER, seconds.to_string())],
            problem: Some(problem::gateway_overloaded()),
            route: Some(route.name().to_string()),
            log: vec![LogRecord::new(
                LogLevel::Warn,
                "shed: the gateway is saturated",
                "shed".to_string(),
                route.name(),
                "",
                policy.version,
                Outcome::Shed.name(),
            )],
            ..Verdict::pass(policy.version)
        }
    }

    /// An admitted request cut short by its gateway stopping: 503, the admission's fields and
    /// `Retry-After` (a jittered second, as for a shed request), and the `drain` record. The
    /// admission was counted; this is not counted again.
    pub(crate) fn drained(&self, policy: &Policy, admitted: &Verdict) -> Verdict {
        let seconds =
            headers::retry_after_seconds(1000, policy.retry_after_jitter, self.rng.f64()).max(1);
        let mut headers: Vec<_> = admitted
            .headers
            .iter()
            .filter(|(name, _)| *name != RETRY_AFTER)
            .cloned()
            .collect();
        headers.push((RETRY_AFTER, seconds.to_string()));
        let route = admitted.route.as_deref().unwrap_or_default();
        Verdict {
            kind: VerdictKind::Shed,
            outcome: Some(Outcome::Shed),
            status: Some(503),
            headers,
            problem: Some(problem::gateway_stopping()),
            route: admitted.route.clone(),
            plan: admitted.plan.clone(),
            policy_version: admitted.policy_version,
            background: Vec::new(),
            log: vec![LogRecord::new(
                LogLevel::Warn,
                "cut short: the gateway stopped before the request ended",
                "drain".to_string(),
                route,
                "",
                admitted.policy_version,
                "drain",
            )],
            checks: Vec::new(),
        }
    }

    /// A 429: `Retry-After` from the longest refusing wait, jittered upward.
    fn too_many(
        &self,
        ctx: &Ctx,
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
            status: Some(429),
            headers,
            problem: Some(problem::too_many_requests(&violated)),
            ..ctx.base(VerdictKind::Refuse, outcome)
        }
    }

    fn retry_after(&self, ctx: &Ctx, wait_ms: u64) -> String {
        headers::retry_after_seconds(wait_ms, ctx.policy.retry_after_jitter, self.rng.f64())
            .max(1)
            .to_string()
    }

    /// `RateLimit-Policy` and `RateLimit` for the rules the caller may see: never shadow rules,
    /// and non-public rules only for a caller with a user.
    fn rate_headers(
        &self,
        ctx: &Ctx,
        outcomes: &[(usize, HeaderOutcome)],
    ) -> Vec<(&'static str, String)> {
        // Inline for most routes' rules: every admission renders them.
        let mut shown: SmallVec<[(usize, &headers::Prepared, &HeaderOutcome); 4]> = outcomes
            .iter()
            .filter_map(|(i, o)| {
                let k = ctx.keyed.get(*i)?;
                let visible = !k.rule.shadow && (k.rule.public || ctx.has_user);
                visible.then(|| (*i, k.rule.header(), o))
            })
            .collect();
        shown.sort_by_key(|(i, _, _)| *i);
        let pairs = shown.iter().map(|&(_, r, o)| (r, o));
        headers::render_prepared(pairs, self.options.legacy_headers)
    }

    /// The route's posture when the store gave no decision.
    pub(crate) fn posture(&self, ctx: &Ctx, now: Instant) -> Verdict {
        let mut log = Vec::new();
        let mut verdict = match ctx.route.on_store_error {
            OnStoreError::Deny => {
                self.count_all(ctx, Outcome::UnavailableDeny, &mut log);
                let wait_ms = millis(ctx.policy.store.breaker_open);
                Verdict {
                    status: Some(503),
                    headers: vec![(RETRY_AFTER, self.retry_after(ctx, wait_ms))],
                    problem: Some(problem::limiter_unavailable()),
                    ..ctx.base(VerdictKind::Unavailable, Outcome::UnavailableDeny)
                }
            }
            OnStoreError::Allow => {
                self.count_all(ctx, Outcome::OpenAdmit, &mut log);
                Verdict {
                    checks: ctx.keyed.iter().map(|_| CheckOutcome::open()).collect(),
                    ..ctx.base(VerdictKind::Unavailable, Outcome::OpenAdmit)
                }
            }
            OnStoreError::FallbackEach => self.fall_back_each(ctx, now, &mut log),
            OnStoreError::Fallback(rule) => self.fall_back(ctx, rule, now, &mut log),
        };
        verdict.log = log;
        verdict
    }

    fn fall_back(
        &self,
        ctx: &Ctx,
        rule: rl_core::rule::Rule,
        now: Instant,
        log: &mut Vec<LogRecord>,
    ) -> Verdict {
        // The policy guarantees a route has at least one rule.
        let Some(first) = ctx.keyed.first() else {
            return ctx.base(VerdictKind::Unavailable, Outcome::FallbackAdmit);
        };
        let decided = self
            .fallback(ctx.route.name(), rule)
            .admit(&first.key, first.cost(), now);
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
            headers::render(&[(spec, outcome)], self.options.legacy_headers)
        } else {
            Vec::new()
        };
        if decided.allowed {
            self.count(ctx, 0, Outcome::FallbackAdmit, log);
            return Verdict {
                headers,
                ..ctx.base(VerdictKind::Unavailable, Outcome::FallbackAdmit)
            };
        }
        self.count(ctx, 0, Outcome::FallbackRefuse, log);
        headers.push((RETRY_AFTER, self.retry_after(ctx, decided.retry_after_ms())));
        Verdict {
            status: Some(429),
            headers,
            problem: Some(problem::too_many_requests(&[first.rule.name.as_str()])),
            ..ctx.base(VerdictKind::Unavailable, Outcome::FallbackRefuse)
        }
    }

    /// The posture `FallbackEach` of keyed checks: each check on a local limiter of its own rule
    /// (the gcra arithmetic of its limit and period), the request refused when one refuses.
    /// The limiters of one gateway only: an outage lets each gateway admit its own share.
    fn fall_back_each(&self, ctx: &Ctx, now: Instant, log: &mut Vec<LogRecord>) -> Verdict {
        let mut outcomes = Vec::with_capacity(ctx.keyed.len());
        let mut refusing = Vec::new();
        for (i, k) in ctx.keyed.iter().enumerate() {
            let RuleKind::Rate(rate) = &k.rule.kind else {
                outcomes.push(CheckOutcome::open());
                continue;
            };
            // A blocked shadow check (the others end the request before any call).
            if let Some(refusal) = k.refuse {
                let refused = HeaderOutcome::refused(refusal.wait_ms);
                outcomes.push(CheckOutcome::of(&refused, CheckSource::Blocked));
                continue;
            }
            let table = format!("{}\u{0}{}", ctx.route.name(), k.rule.name);
            let decided = self.fallback(&table, rate.rule).decide(
                &k.store_key(),
                k.cost(),
                k.spend && !k.rule.shadow,
                now,
            );
            let over = !decided.allowed;
            outcomes.push(CheckOutcome {
                over,
                remaining: Some(decided.remaining),
                reset_after_ms: Some(decided.reset_after_ms()),
                retry_after_ms: over.then(|| decided.retry_after_ms()),
                source: CheckSource::Fallback,
            });
            if over && !k.rule.shadow {
                refusing.push((i, decided.retry_after_ms()));
            }
        }
        let outcome = if refusing.is_empty() {
            Outcome::FallbackAdmit
        } else {
            Outcome::FallbackRefuse
        };
        for (i, k) in ctx.keyed.iter().enumerate() {
            if !k.rule.shadow && (refusing.is_empty() || refusing.iter().any(|(r, _)| *r == i)) {
                self.count(ctx, i, outcome, log);
            }
        }
        let mut verdict = match refusing.iter().map(|(_, ms)| *ms).max() {
            None => ctx.base(VerdictKind::Unavailable, Outcome::FallbackAdmit),
            Some(longest) => {
                let names: Vec<&str> = refusing
                    .iter()
                    .filter_map(|(i, _)| ctx.keyed.get(*i))
                    .map(|k| k.rule.name.as_str())
                    .collect();
                Verdict {
                    status: Some(429),
                    headers: vec![(RETRY_AFTER, self.retry_after(ctx, longest))],
                    problem: Some(problem::too_many_requests(&names)),
                    ..ctx.base(VerdictKind::Unavailable, Outcome::FallbackRefuse)
                }
            }
        };
        verdict.checks = outcomes;
        verdict
    }
}
