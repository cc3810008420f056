//! Verdicts: what the caller sees (status, headers, problem body), what is counted, and the
//! decision records, for each way a request ends.

use std::sync::Arc;

use super::Call;
use crate::metrics::Outcome;
use crate::policy::{PathError, DEFAULT_NAME};
use crate::problem::{self, Problem};

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
    /// `shadow_refuse:<rule>`, `shadow_alarm:<rule>`, `unmatched`, `shed`, `drain`,
    /// `reject:<status>` or `admit` (sampled).
    pub reason: String,
    pub route: String,
    /// The rule the record is about; empty for one about the request (`unmatched`, `shed`,
    /// `drain`, `reject:*`).
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

pub(crate) const SHADOW_ALARM: &str = "shadow_alarm";

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
    /// Each check's outcome, in order, for keyed checks ([`crate::engine::Engine::check`]);
    /// empty for an HTTP request and for a verdict no rule decided (a posture of `deny`, an
    /// error, a shed).
    pub checks: Vec<super::CheckOutcome>,
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

    /// 400: a path that climbs above the root (`/../x`) names no resource, and one with an
    /// encoded separator in a segment names a different one to different backends; matching
    /// either to a route would let the caller pick which route's rules apply.
    pub(crate) fn bad_path(policy_version: u64, error: PathError) -> Verdict {
        Verdict::reject(policy_version, None, 400, problem::bad_path(error))
    }

    /// Keyed checks under a route the policy does not have: the face's bug, a 500 (each check
    /// open, so that a face reading them back reads nothing decided).
    pub(crate) fn no_such_route(policy_version: u64, checks: usize) -> Verdict {
        Verdict {
            kind: VerdictKind::Error,
            status: Some(500),
            problem: Some(problem::store_refused(
                "keyed checks name a route the policy lacks",
            )),
            checks: vec![super::CheckOutcome::open(); checks],
            ..Verdict::pass(policy_version)
        }
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
            checks: Vec::new(),
        }
    }
}
