//! What a replay found, counted as the lines go by and rendered at the end. Every table is
//! bounded by the policy (routes, plans, rules) or by a constant: the refusals by route, plan
//! and reason; the shadow rules; the first malformed and out-of-order lines; the tenants
//! ([`super::tenants`]).

use std::collections::HashMap;

use rl_engine::metrics::Outcome;
use rl_engine::{Verdict, VerdictKind};

use super::tenants::{TenantRefusals, Tenants};

/// How many malformed and out-of-order lines are kept by number (the rest are counted).
pub const FIRST_LINES: usize = 10;

/// The most characters of a malformed line's reason kept.
const MAX_REASON: usize = 200;

/// The tenants the report names.
pub const TOP_TENANTS: usize = 10;

/// Requests one rule refused on one route for one plan, with the record's reason code
/// (`refuse:<rule>` from the store, `refuse_cached:<rule>` from the negative cache).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusals {
    pub route: String,
    pub rule: String,
    /// Empty when the policy has no plans.
    pub plan: String,
    pub reason: String,
    pub requests: u64,
}

/// A shadow rule's evaluations and would-be refusals, against what it declares.
#[derive(Debug, Clone, PartialEq)]
pub struct ShadowRatio {
    pub rule: String,
    pub evaluated: u64,
    pub refused: u64,
    /// Its `expect_refusals`, when it declares one.
    pub expect: Option<f64>,
    /// The line at which the engine first raised its alarm (more than ten times the share it
    /// expects, once evaluated 1000 times), as `/metrics` would have.
    pub alarm_line: Option<u64>,
}

impl ShadowRatio {
    pub fn ratio(&self) -> Option<f64> {
        (self.evaluated > 0).then(|| self.refused as f64 / self.evaluated as f64)
    }
}

/// How each decided request ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcomes {
    /// Admitted by the route's rules.
    pub admitted: u64,
    /// 429.
    pub refused: u64,
    /// An exempt route's (`"rules": []`).
    pub exempt: u64,
    /// No route matched and the default has no rules: passed untouched.
    pub passed: u64,
    /// Not decidable as sent (400 above the root, 414, 431).
    pub rejected: u64,
    /// The route's posture (503, or the fallback's answer): never with the in-memory store,
    /// which always answers; counted so that it would show.
    pub posture: u64,
    /// The module refused a call (500): a bug in the policy.
    pub error: u64,
}

/// A route's refusals: plan, then reason, to the rule and the count.
type ByPlan = HashMap<String, HashMap<String, (String, u64)>>;

/// The report of a replay.
#[derive(Debug, Default)]
pub struct Report {
    pub(super) version: u64,
    pub(super) warnings: Vec<String>,
    pub(super) lines: u64,
    pub(super) outcomes: Outcomes,
    pub(super) unmatched: u64,
    pub(super) malformed: u64,
    pub(super) first_malformed: Vec<(u64, String)>,
    pub(super) out_of_order: u64,
    pub(super) first_out_of_order: Vec<u64>,
    pub(super) most_back_us: u64,
    pub(super) span_us: Option<(u64, u64)>,
    // Route, then plan, then reason: each series counted without an allocation once it exists.
    pub(super) refusals: HashMap<String, ByPlan>,
    pub(super) tenant_header: Option<String>,
    pub(super) tenants: Tenants,
    pub(super) refused_without_tenant: u64,
    pub(super) shadows: Vec<ShadowRatio>,
    pub(super) evicted: u64,
}

fn bump(n: &mut u64) {
    *n = n.saturating_add(1);
}

impl Report {
    pub(super) fn malformed_line(&mut self, line: u64, mut reason: String) {
        bump(&mut self.malformed);
        if self.first_malformed.len() < FIRST_LINES {
            // A reason quotes what it could not read, which may be most of a long line.
            if let Some((cut, _)) = reason.char_indices().nth(MAX_REASON) {
                reason.truncate(cut);
                reason.push_str("...");
            }
            self.first_malformed.push((line, reason));
        }
    }

    /// The line's instant on the replay's clock, which never goes back: an earlier line is
    /// decided at the instant of the one before it, and counted.
    pub(super) fn clock(&mut self, line: u64, at_us: u64) -> u64 {
        let (first, last) = self.span_us.unwrap_or((at_us, at_us));
        if at_us < last {
            bump(&mut self.out_of_order);
            self.most_back_us = self.most_back_us.max(last.saturating_sub(at_us));
            if self.first_out_of_order.len() < FIRST_LINES {
                self.first_out_of_order.push(line);
            }
        }
        let now = at_us.max(last);
        self.span_us = Some((first, now));
        now
    }

    /// Counts one request's verdict; `shadows` are the indices (in `self.shadows`) of its
    /// route's shadow rules, `tenant` its tenant as the policy reads it.
    pub(super) fn decided(
        &mut self,
        line: u64,
        verdict: &Verdict,
        shadows: &[usize],
        tenant: Option<&str>,
    ) {
        let o = &mut self.outcomes;
        match (verdict.kind, verdict.outcome) {
            (VerdictKind::Admit, Some(Outcome::Exempt)) => bump(&mut o.exempt),
            (VerdictKind::Admit, None) => bump(&mut o.passed),
            (VerdictKind::Admit, Some(_)) => bump(&mut o.admitted),
            (VerdictKind::Refuse, _) => bump(&mut o.refused),
            (VerdictKind::Reject, _) => bump(&mut o.rejected),
            (VerdictKind::Error, _) => bump(&mut o.error),
            // Nothing sheds here (no process is saturated): shown with the postures if it did.
            (VerdictKind::Unavailable | VerdictKind::Shed, _) => bump(&mut o.posture),
        }
        // The store admitted: every shadow rule of the route was asked. A refused request's
        // shadow rate rules were not (they are asked last); a shadow semaphore asked before
        // the refusal is counted when it would have refused (it never does here, every slot
        // being released at once).
        let asked_all =
            verdict.kind == VerdictKind::Admit && verdict.outcome == Some(Outcome::Admit);
        if asked_all {
            for i in shadows {
                if let Some(s) = self.shadows.get_mut(*i) {
                    bump(&mut s.evaluated);
                }
            }
        }
        for record in &verdict.log {
            match record.outcome {
                "unmatched" => bump(&mut self.unmatched),
                "refuse" | "refuse_cached" => {
                    // Looked up by borrowed names: a series that exists costs no allocation.
                    let plans = match self.refusals.get_mut(&record.route) {
                        Some(plans) => plans,
                        None => self.refusals.entry(record.route.clone()).or_default(),
                    };
                    let reasons = match plans.get_mut(&record.plan) {
                        Some(reasons) => reasons,
                        None => plans.entry(record.plan.clone()).or_default(),
                    };
                    let (rule, n) = match reasons.get_mut(&record.reason) {
                        Some(series) => series,
                        None => reasons.entry(record.reason.clone()).or_default(),
                    };
                    if rule.is_empty() {
                        rule.clone_from(&record.rule);
                    }
                    bump(n);
                }
                "shadow_refuse" => {
                    if let Some(s) = self.shadows.iter_mut().find(|s| s.rule == record.rule) {
                        bump(&mut s.refused);
                        if !asked_all {
                            bump(&mut s.evaluated);
                        }
                    }
                }
                "shadow_alarm" => {
                    if let Some(s) = self.shadows.iter_mut().find(|s| s.rule == record.rule) {
                        s.alarm_line.get_or_insert(line);
                    }
                }
                _ => {}
            }
        }
        if verdict.kind == VerdictKind::Refuse {
            match tenant {
                Some(tenant) => self.tenants.refused(tenant),
                None => bump(&mut self.refused_without_tenant),
            }
        }
    }

    /// Lines read, blank and malformed ones included.
    pub fn lines(&self) -> u64 {
        self.lines
    }

    /// Requests decided (every line but blank and malformed ones).
    pub fn requests(&self) -> u64 {
        let o = &self.outcomes;
        [
            o.admitted, o.refused, o.exempt, o.passed, o.rejected, o.posture, o.error,
        ]
        .iter()
        .fold(0u64, |sum, n| sum.saturating_add(*n))
    }

    pub fn outcomes(&self) -> Outcomes {
        self.outcomes
    }

    /// Requests the policy would have refused (429).
    pub fn refusals(&self) -> u64 {
        self.outcomes.refused
    }

    /// Requests no route matched (the default decided them, or let them pass).
    pub fn unmatched(&self) -> u64 {
        self.unmatched
    }

    pub fn malformed(&self) -> u64 {
        self.malformed
    }

    /// The numbers of the first [`FIRST_LINES`] malformed lines, with why each is.
    pub fn first_malformed(&self) -> &[(u64, String)] {
        &self.first_malformed
    }

    /// Lines earlier than the line before them (decided at that line's instant).
    pub fn out_of_order(&self) -> u64 {
        self.out_of_order
    }

    pub fn first_out_of_order(&self) -> &[u64] {
        &self.first_out_of_order
    }

    /// Refusals by route, rule and plan, most first (then by route, plan and reason).
    pub fn refusals_by(&self) -> Vec<Refusals> {
        let mut rows: Vec<Refusals> = self
            .refusals
            .iter()
            .flat_map(|(route, plans)| {
                plans.iter().flat_map(move |(plan, reasons)| {
                    reasons.iter().map(move |(reason, (rule, n))| Refusals {
                        route: route.clone(),
                        rule: rule.clone(),
                        plan: plan.clone(),
                        reason: reason.clone(),
                        requests: *n,
                    })
                })
            })
            .collect();
        rows.sort_by(|a, b| {
            b.requests
                .cmp(&a.requests)
                .then_with(|| (&a.route, &a.plan, &a.reason).cmp(&(&b.route, &b.plan, &b.reason)))
        });
        rows
    }

    /// The [`TOP_TENANTS`] tenants refused most.
    pub fn tenants(&self) -> Vec<TenantRefusals> {
        self.tenants.top(TOP_TENANTS)
    }

    pub fn shadows(&self) -> &[ShadowRatio] {
        &self.shadows
    }
}
