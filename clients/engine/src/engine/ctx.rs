//! What a request is decided against (its rules with their keys rendered) and how the store
//! answered them.

use std::sync::Arc;

use smallvec::SmallVec;

use super::verdict::{Verdict, VerdictKind};
use crate::allocation::{Allocations, Enforce};
use crate::headers::HeaderOutcome;
use crate::metrics::Outcome;
use crate::policy::{ChargeOn, Policy, Route, RuleKind, RuleSpec};
use crate::time::Instant;

/// One rule of the route with its key rendered for this request.
pub(crate) struct Keyed {
    pub(crate) rule: Arc<RuleSpec>,
    pub(crate) key: String,
    /// The units the request takes (at least 1).
    pub(crate) cost: u64,
    /// Whether the request spends them; when not, the rule is only asked whether `cost` units
    /// would pass (a check with `hits_addend: 0`), apart from and before the spending calls.
    pub(crate) spend: bool,
    /// Refused before any call: retried after `wait_ms`, for the reason it says.
    pub(crate) refuse: Option<Refusal>,
}

/// A rule refused before any call, and when the same request could pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) wait_ms: u64,
    pub(crate) by: Before,
}

/// Why a rule is refused before any call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Before {
    /// The negative cache holds a recent refusal of its key for this cost.
    Cache,
    /// A global rule whose allocation cannot pass the request until the next one (section 15);
    /// counted and reported as the negative cache's refusals are.
    Allocation,
    /// No request can pass it: a blocked check, or a cost above its rule's capacity.
    Blocked,
}

impl Before {
    /// How the refusal is counted.
    pub(crate) fn outcome(self) -> Outcome {
        match self {
            Before::Cache | Before::Allocation => Outcome::RefuseCached,
            Before::Blocked => Outcome::Refuse,
        }
    }
}

impl Keyed {
    /// A rule of a route, with the cost the rule states.
    pub(crate) fn of(rule: Arc<RuleSpec>, key: String) -> Keyed {
        let cost = match &rule.kind {
            RuleKind::Rate(r) => r.cost,
            RuleKind::Semaphore(_) => 1,
        };
        Keyed {
            rule,
            key,
            cost,
            spend: true,
            refuse: None,
        }
    }

    /// A global rule's key decided by this region's allocation: its rule with the allocation
    /// as the limit, or refused before any call. Its units count into the demand reported.
    pub(crate) fn allocated(mut self, allocations: &Allocations, now: Instant) -> Keyed {
        if self.rule.global.is_none() || self.rule.shadow {
            return self;
        }
        match allocations.enforce(&self.rule, &self.key, self.cost, now) {
            Enforce::Rule(rule) => self.rule = rule,
            Enforce::Refuse(wait_ms) => {
                self.refuse = Some(Refusal {
                    wait_ms,
                    by: Before::Allocation,
                })
            }
        }
        self
    }

    /// Asked apart with `RESERVE`, since `RL.MULTI` takes no reservation: a `settle` rule, and
    /// a `charge` rule, which is settled by the response's status.
    pub(crate) fn settles(&self) -> bool {
        matches!(&self.rule.kind, RuleKind::Rate(r) if r.settle || r.charge.is_some())
            && !self.rule.shadow
            && self.spend
    }

    /// The statuses a `charge` rule is charged on.
    pub(crate) fn charge(&self) -> Option<ChargeOn> {
        match &self.rule.kind {
            RuleKind::Rate(r) => r.charge,
            RuleKind::Semaphore(_) => None,
        }
    }

    /// Asked alone, without spending, before the calls that spend (or instead of them, when
    /// another rule was refused before any call); a rule refused before any call is not.
    pub(crate) fn asks(&self) -> bool {
        !self.spend
            && !self.rule.shadow
            && self.refuse.is_none()
            && matches!(self.rule.kind, RuleKind::Rate(_))
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
        self.cost
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
    /// Keyed checks (`Engine::check`): the verdict carries each check's outcome.
    pub(crate) checks: bool,
}

impl Ctx {
    pub(crate) fn rule_cost(&self, index: usize) -> u64 {
        self.keyed.get(index).map(Keyed::cost).unwrap_or(1)
    }

    pub(super) fn base(&self, kind: VerdictKind, outcome: Outcome) -> Verdict {
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
    /// Inline for the rules of most routes: every decision that reaches the store fills it.
    pub(crate) outcomes: SmallVec<[(usize, HeaderOutcome); 4]>,
    pub(crate) shadow_refused: Vec<usize>,
    /// Shadow rules that would have admitted.
    pub(crate) shadow_admitted: Vec<usize>,
    /// Refusals that are not cached: their end may come any moment.
    pub(crate) uncached: Vec<usize>,
    /// Keyed checks only: the rules of `RL.MULTI` calls that admitted, and so spent (on a
    /// cluster one slot's call may admit while another's refuses).
    pub(crate) spent: Vec<usize>,
    /// Keyed checks only: the slots acquired and reservations made, which stay taken only when
    /// the request is admitted (a refusal releases and refunds them).
    pub(crate) taken: Vec<usize>,
    /// Keyed checks only: the rules refused before any call (in `refused`, or for a shadow rule
    /// in `shadow_refused`), and why.
    pub(crate) before: Vec<(usize, Before)>,
}

impl Outcomes {
    /// Why rule `index` was refused before any call, if it was.
    pub(crate) fn before(&self, index: usize) -> Option<Before> {
        self.before
            .iter()
            .find(|(i, _)| *i == index)
            .map(|(_, by)| *by)
    }

    /// Whether the request was refused before any call: it stays refused whatever its other
    /// rules' calls answer, or fail to.
    pub(crate) fn refused_before(&self) -> bool {
        self.refused.iter().any(|(i, _)| self.before(*i).is_some())
    }
}
