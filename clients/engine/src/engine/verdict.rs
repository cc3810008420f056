//! Verdicts: what the caller sees (status, headers, problem body), what is counted, and the
//! decision records, for each way a request ends.

use std::sync::Arc;
use std::time::Duration;

use super::{Call, Shared, RETRY_AFTER};
use crate::headers::{self, HeaderOutcome, HeaderRule};
use crate::metrics::{Event, Outcome};
use crate::policy::{OnStoreError, Policy, Route, RuleKind, RuleSpec, DEFAULT_NAME};
use crate::problem::{self, Problem};
use crate::time::{millis, Instant};
use crate::wire::Error;

/// The three outcomes of `clients/CONTRACT.md` section 1, never mixed; and the fourth answer,
/// a store call the module refused, which is none of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerdictKind {
    Admit,
    Refuse,
    /// The store gave no decision; the route's posture answered (see [`Verdict::outcome`]).
    Unavailable,
    /// The module refused a store call (`ERR`, `WRONGTYPE`, `CROSSSLOT`): a bug in the policy
    /// or the deployment, answered 500. Never the posture, never the breaker.
    Error,
    /// The gateway itself is saturated and shed the request (503): the driver's overload,
    /// not the store's failure; no posture and no breaker failure.
    Shed,
    /// The request cannot be decided as sent (431: an identity value over 256 bytes): the
    /// caller's to fix, answered before any store call.
    Reject,
}

/// How a decision record is logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    Info,
    Warn,
}

/// A decision record (`clients/CONTRACT.md` section 8.7): why the request ended as it did, the
/// route, rule, plan and policy version, never a key or an identity (keys are rendered from
/// identities). The driver writes it to its logging library.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    pub level: LogLevel,
    pub message: &'static str,
    /// The reason code: `refuse:<rule>`, `refuse_cached:<rule>`, `unavailable:deny`,
    /// `unavailable:open`, `fallback_admit`, `fallback_refuse`, `error:<rule>`,
    /// `shadow_refuse:<rule>`, `shadow_alarm:<rule>`, `unmatched`, `shed`, `reject:<status>` or
    /// `admit` (sampled).
    pub reason: String,
    pub route: String,
    /// The rule the record is about; empty for one about the request (`unmatched`, `shed`,
    /// `reject:*`).
    pub rule: String,
    /// The caller's plan; empty when the policy has no plans.
    pub plan: String,
    pub policy_version: u64,
    pub outcome: &'static str,
    /// 16 hex digits shared by the records of one request, unique within the process.
    pub decision: String,
}

impl LogRecord {
    /// A record of a request's decision; its plan and decision id are set once the verdict
    /// is complete.
    pub(crate) fn new(
        level: LogLevel,
        message: &'static str,
        reason: String,
        route: &str,
        rule: &str,
        policy_version: u64,
        outcome: &'static str,
    ) -> LogRecord {
        LogRecord {
            level,
            message,
            reason,
            route: route.to_string(),
            rule: rule.to_string(),
            plan: String::new(),
            policy_version,
            outcome,
            decision: String::new(),
        }
    }

    /// The record of a request no route matched, which the policy's default decided.
    pub(crate) fn unmatched(policy_version: u64) -> LogRecord {
        LogRecord::new(
            LogLevel::Info,
            "no route matched: the default decided",
            "unmatched".to_string(),
            DEFAULT_NAME,
            "",
            policy_version,
            "unmatched",
        )
    }

    /// Alarms are once per rule and snapshot, so they are never dropped for the bound.
    pub(crate) fn bounded(&self) -> bool {
        self.outcome != SHADOW_ALARM
    }
}

const SHADOW_ALARM: &str = "shadow_alarm";

/// The engine's answer for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub kind: VerdictKind,
    /// The route-level outcome as counted; `None` for a request that passes untouched (no route matched, the default has no rules).
    pub outcome: Option<Outcome>,
    /// `Some(429)`, `Some(503)` or `Some(500)` when the gateway answers the request itself.
    pub status: Option<u16>,
    /// Sent on the response, whatever answers it.
    pub headers: Vec<(&'static str, String)>,
    pub problem: Option<Problem>,
    /// The matched route's name.
    pub route: Option<String>,
    /// The caller's plan, when the policy has plans and the request got as far as resolving it.
    pub plan: Option<Arc<str>>,
    pub policy_version: u64,
    /// Calls to send after answering (releases, refunds); their replies do not matter.
    pub background: Vec<Call>,
    /// Decision records to log.
    pub log: Vec<LogRecord>,
}

impl Verdict {
    pub(crate) fn identity_too_long(policy_version: u64, route: &str) -> Verdict {
        Verdict::reject(
            policy_version,
            Some(route),
            431,
            problem::identity_too_long(),
        )
    }

    /// 414: a path segment a key takes (`${path.NAME}`) is over 256 bytes.
    pub(crate) fn segment_too_long(policy_version: u64, route: &str) -> Verdict {
        Verdict::reject(
            policy_version,
            Some(route),
            414,
            problem::segment_too_long(),
        )
    }

    /// 400: a path that climbs above the root (`/../x`) names no resource; matching it to a
    /// route would let `..` pick which route's rules apply.
    pub(crate) fn above_root(policy_version: u64) -> Verdict {
        Verdict::reject(policy_version, None, 400, problem::above_root())
    }

    /// A request that cannot be decided as sent, answered before any store call.
    fn reject(policy_version: u64, route: Option<&str>, status: u16, problem: Problem) -> Verdict {
        let record = LogRecord::new(
            LogLevel::Info,
            "the request cannot be decided as sent",
            format!("reject:{status}"),
            route.unwrap_or_default(),
            "",
            policy_version,
            "reject",
        );
        Verdict {
            kind: VerdictKind::Reject,
            status: Some(status),
            problem: Some(problem),
            route: route.map(str::to_string),
            log: vec![record],
            ..Verdict::pass(policy_version)
        }
    }

    /// The request goes on untouched: no route, no headers (what a driver answers for a
    /// request it no longer has the state of).
    /// A request no route matched, under a default with no rules: it passes untouched, and is
    /// recorded.
    pub(crate) fn unmatched(policy_version: u64) -> Verdict {
        Verdict {
            log: vec![LogRecord::unmatched(policy_version)],
            ..Verdict::pass(policy_version)
        }
    }

    pub fn pass(policy_version: u64) -> Verdict {
        Verdict {
            kind: VerdictKind::Admit,
            outcome: None,
            status: None,
            headers: Vec::new(),
            problem: None,
            route: None,
            plan: None,
            policy_version,
            background: Vec::new(),
            log: Vec::new(),
        }
    }
}

/// One rule of the route with its key rendered for this request.
pub(crate) struct Keyed {
    pub(crate) rule: Arc<RuleSpec>,
    pub(crate) key: String,
}

impl Keyed {
    /// Asked apart with `RESERVE`, since `RL.MULTI` takes no reservation.
    pub(crate) fn settles(&self) -> bool {
        matches!(&self.rule.kind, RuleKind::Rate(r) if r.settle) && !self.rule.shadow
    }

    /// The key the store is asked about: a shadow rule's lives in its own namespace.
    pub(crate) fn store_key(&self) -> String {
        if self.rule.shadow {
            format!("shadow:{}", self.key)
        } else {
            self.key.clone()
        }
    }

    pub(crate) fn cost(&self) -> u64 {
        match &self.rule.kind {
            RuleKind::Rate(r) => r.cost,
            RuleKind::Semaphore(_) => 1,
        }
    }
}

/// What a request is decided against.
pub(crate) struct Ctx {
    pub(crate) policy: Arc<Policy>,
    pub(crate) route: Arc<Route>,
    pub(crate) keyed: Vec<Keyed>,
    pub(crate) has_user: bool,
    /// Whether this request's admissions are in the decision log (a sample of them is).
    pub(crate) sampled: bool,
    /// The caller's plan's name, when the policy has plans.
    pub(crate) plan: Option<Arc<str>>,
}

impl Ctx {
    pub(crate) fn rule_cost(&self, index: usize) -> u64 {
        self.keyed.get(index).map(Keyed::cost).unwrap_or(1)
    }

    fn base(&self, kind: VerdictKind, outcome: Outcome) -> Verdict {
        Verdict {
            kind,
            outcome: Some(outcome),
            route: Some(self.route.name().to_string()),
            plan: self.plan.clone(),
            ..Verdict::pass(self.policy.version)
        }
    }
}

/// How the store answered a request's calls.
#[derive(Debug, Default)]
pub(crate) struct Outcomes {
    /// The rules that refused: (index in the route, retry after in ms). Empty when admitted.
    pub(crate) refused: Vec<(usize, u64)>,
    pub(crate) outcomes: Vec<(usize, HeaderOutcome)>,
    pub(crate) shadow_refused: Vec<usize>,
    /// Shadow rules that would have admitted.
    pub(crate) shadow_admitted: Vec<usize>,
    /// Refusals that are not cached: their end may come any moment.
    pub(crate) uncached: Vec<usize>,
}

impl Shared {
    /// Refuses locally when the negative cache holds a recent refusal of one of the rules.
    pub(crate) fn refuse_cached(&self, ctx: &Ctx, now: Instant) -> Option<Verdict> {
        let waits: Vec<(usize, u64)> = ctx
            .keyed
            .iter()
            .enumerate()
            .filter(|(_, k)| !k.rule.shadow)
            .filter_map(|(i, k)| {
                let wait = self.cache.check(&k.rule.name, &k.key, k.cost(), now)?;
                Some((i, millis(wait).max(1)))
            })
            .collect();
        if waits.is_empty() {
            return None;
        }
        let mut log = Vec::new();
        for (i, _) in &waits {
            self.count(ctx, *i, Outcome::RefuseCached, &mut log);
        }
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
            ..ctx.base(VerdictKind::Admit, Outcome::Admit)
        }
    }

    pub(crate) fn refused(&self, ctx: &Ctx, answer: &Outcomes, now: Instant) -> Verdict {
        let mut log = Vec::new();
        for (i, retry_ms) in &answer.refused {
            // A semaphore's slot can be released any moment, long before its `retry_after`:
            // only rate refusals are cached.
            let cacheable = ctx
                .keyed
                .get(*i)
                .filter(|k| matches!(k.rule.kind, RuleKind::Rate(_)))
                .filter(|_| !answer.uncached.contains(i));
            if let Some(k) = cacheable {
                self.cache.refused(
                    &k.rule.name,
                    &k.key,
                    k.cost(),
                    Duration::from_millis(*retry_ms),
                    now,
                );
            }
            self.count(ctx, *i, Outcome::Refuse, &mut log);
        }
        // A shadow semaphore found full before the refusal still would have refused.
        self.shadows(ctx, answer, &mut log);
        let mut verdict = self.too_many(ctx, &answer.refused, &answer.outcomes, Outcome::Refuse);
        verdict.log = log;
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
        let mut shown: Vec<(usize, &headers::Prepared, &HeaderOutcome)> = outcomes
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
                ctx.base(VerdictKind::Unavailable, Outcome::OpenAdmit)
            }
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

    pub(crate) fn count(
        &self,
        ctx: &Ctx,
        index: usize,
        outcome: Outcome,
        log: &mut Vec<LogRecord>,
    ) {
        let Some(k) = ctx.keyed.get(index) else {
            return;
        };
        self.metrics.record(Event::Decision {
            route: ctx.route.name(),
            rule: &k.rule.name,
            outcome,
        });
        let rule = k.rule.name.as_str();
        let (level, message, reason) = match outcome {
            Outcome::Admit if !ctx.sampled => return,
            Outcome::Admit => (LogLevel::Info, "admitted", "admit".to_string()),
            Outcome::Refuse => (LogLevel::Info, "refused", format!("refuse:{rule}")),
            Outcome::RefuseCached => (
                LogLevel::Info,
                "refused from the negative cache",
                format!("refuse_cached:{rule}"),
            ),
            Outcome::UnavailableDeny => (
                LogLevel::Warn,
                "refused: the store cannot answer",
                "unavailable:deny".to_string(),
            ),
            Outcome::OpenAdmit => (
                LogLevel::Warn,
                "admitted without the store",
                "unavailable:open".to_string(),
            ),
            Outcome::FallbackAdmit => (
                LogLevel::Info,
                "admitted by the local fallback",
                "fallback_admit".to_string(),
            ),
            Outcome::FallbackRefuse => (
                LogLevel::Info,
                "refused by the local fallback",
                "fallback_refuse".to_string(),
            ),
            Outcome::ShadowRefuse => (
                LogLevel::Info,
                "a shadow rule would have refused",
                format!("shadow_refuse:{rule}"),
            ),
            Outcome::Error => (
                LogLevel::Warn,
                "the module refused a store call",
                format!("error:{rule}"),
            ),
            Outcome::UnreplicatedAdmit => (
                LogLevel::Warn,
                "admitted, not acknowledged by a replica in time",
                format!("unreplicated:{rule}"),
            ),
            Outcome::Shed | Outcome::Exempt => return,
        };
        log.push(LogRecord::new(
            level,
            message,
            reason,
            ctx.route.name(),
            rule,
            ctx.policy.version,
            outcome.name(),
        ));
    }

    /// Counts the shadow rules' answers, and watches those that declare `expect_refusals`: the
    /// request whose evaluation switches an alarm on logs it.
    fn shadows(&self, ctx: &Ctx, answer: &Outcomes, log: &mut Vec<LogRecord>) {
        for i in &answer.shadow_refused {
            self.count(ctx, *i, Outcome::ShadowRefuse, log);
        }
        let evaluated = answer
            .shadow_refused
            .iter()
            .map(|i| (i, true))
            .chain(answer.shadow_admitted.iter().map(|i| (i, false)));
        for (i, refused) in evaluated {
            let Some(k) = ctx.keyed.get(*i) else {
                continue;
            };
            if k.rule.expect_refusals.is_some()
                && self.metrics.shadow_evaluated(&k.rule.name, refused)
            {
                log.push(LogRecord::new(
                    LogLevel::Warn,
                    "a shadow rule refuses more than ten times the share it expects",
                    format!("shadow_alarm:{}", k.rule.name),
                    ctx.route.name(),
                    &k.rule.name,
                    ctx.policy.version,
                    SHADOW_ALARM,
                ));
            }
        }
    }

    fn count_all(&self, ctx: &Ctx, outcome: Outcome, log: &mut Vec<LogRecord>) {
        for (i, k) in ctx.keyed.iter().enumerate() {
            if !k.rule.shadow {
                self.count(ctx, i, outcome, log);
            }
        }
    }
}
