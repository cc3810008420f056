//! Keyed checks: a face whose requests are not HTTP requests (the Envoy rate limit service's
//! descriptors, a concurrency layer's one semaphore) translates each into rules with their
//! keys rendered and the units they take, and the engine decides them as it decides a route's
//! rules: the negative cache, the breaker and its ramp, chunks for `grant` rules, all or
//! nothing in one `RL.MULTI`, shadow rules, the posture and the decision records.
//!
//! A check refused before any call (one no request can pass, a key the negative cache holds
//! refused, a global rule its allocation cannot pass) refuses the request; the other checks are
//! then asked without spending (`DRYRUN`, one step), so that each outcome still says what its
//! key holds, as the Envoy reference service's statuses do.

use std::sync::Arc;

use super::ctx::{Before, Ctx, Outcomes};
use crate::headers::HeaderOutcome;
use crate::policy::RuleSpec;

/// One check: a rule, the key it counts on, and the units the request takes.
#[derive(Debug, Clone)]
pub struct Check {
    pub rule: Arc<RuleSpec>,
    pub key: String,
    /// Units to spend. 0 spends nothing: the rule is only asked whether one unit would pass
    /// now (Envoy's `hits_addend: 0`), and a refusal of that refuses the request.
    pub cost: u64,
    /// No request passes this check, whatever its key holds: a limit of 0 (Envoy's
    /// `requests_per_unit: 0`), which no rule can state, is a check of a rule with the same
    /// name, algorithm and period and any limit, `blocked`. The engine refuses it without a store
    /// call ([`CheckSource::Blocked`]: nothing remaining, reset and retry at the end of the
    /// current window of the rule's period, or after a semaphore's lease), counted `refuse`, and
    /// the request's other checks are only asked; a blocked shadow check would refuse, and
    /// refuses nothing. A cost above the rule's capacity, which the module refuses to decide, is
    /// blocked without this.
    pub blocked: bool,
}

impl Check {
    /// A check of `cost` units of `rule` on `key`, not blocked (`Check { blocked: true,
    /// ..Check::new(rule, key, cost) }` is one that is).
    pub fn new(rule: Arc<RuleSpec>, key: String, cost: u64) -> Check {
        Check {
            rule,
            key,
            cost,
            blocked: false,
        }
    }
}

/// Where a check's outcome came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckSource {
    /// The store's reply.
    Store,
    /// A chunk leased earlier, spent in this process.
    Chunk,
    /// The negative cache: refused without a store call.
    Cache,
    /// This engine, without a store call: no request can pass the check ([`Check::blocked`],
    /// or a cost above its rule's capacity).
    Blocked,
    /// The local fallback limiter of the posture `fallback`.
    Fallback,
    /// Nobody: the rule was not asked (the store could not answer and the posture let the
    /// request pass, or another rule refused first).
    Open,
}

/// What one check decided (for a shadow rule: what it would have decided), in the order the
/// checks were given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckOutcome {
    pub over: bool,
    /// Units the key holds after this decision, when the store or a limiter told.
    pub remaining: Option<u64>,
    pub reset_after_ms: Option<u64>,
    /// When over: when the same request would pass.
    pub retry_after_ms: Option<u64>,
    pub source: CheckSource,
}

impl CheckOutcome {
    pub(crate) fn open() -> CheckOutcome {
        CheckOutcome {
            over: false,
            remaining: None,
            reset_after_ms: None,
            retry_after_ms: None,
            source: CheckSource::Open,
        }
    }

    pub(crate) fn of(outcome: &HeaderOutcome, source: CheckSource) -> CheckOutcome {
        CheckOutcome {
            over: outcome.retry_after_ms.is_some(),
            remaining: Some(outcome.remaining),
            reset_after_ms: Some(outcome.reset_after_ms),
            retry_after_ms: outcome.retry_after_ms,
            source,
        }
    }
}

/// Each check's outcome from the store's answers: a rule that answered, a shadow rule's
/// verdict, a rule spent from its chunk, or not asked.
pub(crate) fn outcomes(ctx: &Ctx, answer: &Outcomes) -> Vec<CheckOutcome> {
    if !ctx.checks {
        return Vec::new();
    }
    let refused = |i: usize| {
        answer
            .refused
            .iter()
            .find(|(r, _)| *r == i)
            .map(|(_, ms)| *ms)
    };
    let admitted = answer.refused.is_empty();
    let spent = |i: usize| answer.spent.contains(&i) || (admitted && answer.taken.contains(&i));
    ctx.keyed
        .iter()
        .enumerate()
        .map(|(i, k)| {
            if let Some((_, o)) = answer.outcomes.iter().find(|(r, _)| *r == i) {
                let source = match answer.before(i) {
                    None => CheckSource::Store,
                    Some(Before::Cache | Before::Allocation) => CheckSource::Cache,
                    Some(Before::Blocked) => CheckSource::Blocked,
                };
                let mut out = CheckOutcome::of(o, source);
                if let Some(ms) = refused(i) {
                    out.over = true;
                    out.retry_after_ms = Some(ms);
                } else if !(out.over || k.rule.shadow || spent(i)) {
                    // A rule that would admit reports what spending would leave; its call spent
                    // nothing (another rule of it refused, or it was only asked): it holds its
                    // cost more.
                    out.remaining = out.remaining.map(|r| r.saturating_add(k.cost));
                }
                return out;
            }
            if let Some(ms) = refused(i) {
                return CheckOutcome {
                    over: true,
                    retry_after_ms: Some(ms),
                    ..CheckOutcome::of(&HeaderOutcome::refused(ms), CheckSource::Store)
                };
            }
            if answer.shadow_refused.contains(&i) || answer.shadow_admitted.contains(&i) {
                return CheckOutcome {
                    over: answer.shadow_refused.contains(&i),
                    source: CheckSource::Store,
                    ..CheckOutcome::open()
                };
            }
            let chunked =
                matches!(&k.rule.kind, crate::policy::RuleKind::Rate(r) if r.grant.is_some());
            if chunked && answer.refused.is_empty() {
                return CheckOutcome {
                    source: CheckSource::Chunk,
                    ..CheckOutcome::open()
                };
            }
            CheckOutcome::open()
        })
        .collect()
}
