//! What one rule gives one kind of caller, resolved by the engine's own precedence
//! (`Policy::effective`: the override of the tenant and user, of the tenant, the plan, the
//! rule), so that the table can never disagree with what a gateway enforces.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use rl_engine::policy::{ChargeOn, RuleKind, RuleSpec};
use rl_engine::time::format_rfc3339;
use rl_engine::{Instant, Policy};

use super::ratio::{wide, Ratio};

/// Who a row's numbers apply to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Subject {
    /// Every caller: a policy without plans (with plans, the default plan's callers).
    All,
    /// The callers on this plan (in a policy without that plan: where they land, the default).
    Plan(String),
    /// One tenant's callers, or one user's of that tenant: an override's subject, or a tenant
    /// the two documents put on different plans.
    Tenant {
        tenant: String,
        user: Option<String>,
    },
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            Subject::All => "all callers".to_string(),
            Subject::Plan(p) => format!("plan {}", printable(p)),
            Subject::Tenant { tenant, user: None } => format!("tenant {}", printable(tenant)),
            Subject::Tenant {
                tenant,
                user: Some(u),
            } => format!("tenant {} user {}", printable(tenant), printable(u)),
        };
        f.pad(&text)
    }
}

/// A name from the document as it may be shown on one line of a terminal: control characters
/// (a newline in a tenant's name could forge a line of the report) are escaped.
pub(crate) fn printable(text: &str) -> String {
    if text.chars().any(char::is_control) {
        text.chars()
            .map(|c| {
                if c.is_control() {
                    c.escape_default().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect()
    } else {
        text.to_string()
    }
}

/// Where a cell's numbers come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Source {
    /// The rule as written.
    Rule,
    /// The plan's numbers for the rule.
    Plan(String),
    /// An active override, until that instant.
    Override(Instant),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Rule => f.pad("rule"),
            Source::Plan(p) => f.pad(&format!("plan {}", printable(p))),
            Source::Override(until) => f.pad(&format!("override until {}", format_rfc3339(*until))),
        }
    }
}

/// A rule's numbers for one subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Limit {
    Rate {
        algo: &'static str,
        limit: u64,
        period_us: u64,
        /// The capacity, in units (`burst`, else `limit`).
        burst: u64,
        cost: u64,
    },
    Semaphore {
        concurrency: u64,
        lease: Duration,
    },
}

/// The measures a cut is read on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Measure {
    /// Requests per hour: `limit / cost` per `period`, so that a per-minute rule whose number
    /// moved to per second reads as the rise it is, and a cost that triples as the cut it is.
    Rate,
    /// Requests admitted at once from a full capacity: `capacity / cost`, rounded down.
    Capacity,
    /// A semaphore's requests in flight.
    Concurrency,
}

impl fmt::Display for Measure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Measure::Rate => "requests per hour",
            Measure::Capacity => "requests at once",
            Measure::Concurrency => "requests in flight",
        })
    }
}

pub(crate) const SECOND_US: u64 = 1_000_000;
pub(crate) const MINUTE_US: u64 = 60 * SECOND_US;
pub(crate) const HOUR_US: u64 = 60 * MINUTE_US;

impl Limit {
    /// Units (the rule's `limit` counts units; a request takes `cost`) per `unit_us`.
    pub(crate) fn units_per(&self, unit_us: u64) -> Option<Ratio> {
        match *self {
            Limit::Rate {
                limit, period_us, ..
            } => Ratio::new(wide(limit, unit_us), u128::from(period_us)),
            Limit::Semaphore { .. } => None,
        }
    }

    /// The value of one measure, when the limit has it.
    pub(crate) fn measure(&self, measure: Measure) -> Option<Ratio> {
        match (*self, measure) {
            (
                Limit::Rate {
                    limit,
                    period_us,
                    cost,
                    ..
                },
                Measure::Rate,
            ) => Ratio::new(wide(limit, HOUR_US), wide(period_us, cost)),
            (Limit::Rate { burst, cost, .. }, Measure::Capacity) => {
                burst.checked_div(cost).map(|n| Ratio::integer(n.into()))
            }
            (Limit::Semaphore { concurrency, .. }, Measure::Concurrency) => {
                Some(Ratio::integer(concurrency.into()))
            }
            _ => None,
        }
    }

    pub(crate) fn measures(&self) -> &'static [Measure] {
        match self {
            Limit::Rate { .. } => &[Measure::Rate, Measure::Capacity],
            Limit::Semaphore { .. } => &[Measure::Concurrency],
        }
    }
}

/// One rule's numbers for one subject, with what the table notes about them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cell {
    pub limit: Limit,
    pub source: Source,
    /// Evaluated apart and counted, never refusing.
    pub shadow: bool,
    /// No route and not the default names it: it limits nothing.
    pub unused: bool,
    pub settle: bool,
    /// `grant`: chunks of `want`, lapsing after `ttl`.
    pub grant: Option<(u64, Duration)>,
    /// `charge.on_status`: charged only on these statuses.
    pub charge: Option<ChargeOn>,
}

impl Cell {
    /// Whether some request is held to this limit (a shadow or unused rule refuses nothing).
    pub(crate) fn enforced(&self) -> bool {
        !self.shadow && !self.unused
    }

    /// The notes column: what the numbers alone do not say.
    pub(crate) fn notes(&self) -> String {
        let mut notes = Vec::new();
        if self.shadow {
            notes.push("shadow".to_string());
        }
        if self.unused {
            notes.push("unused".to_string());
        }
        if let Limit::Semaphore { lease, .. } = self.limit {
            notes.push(format!("lease {}", duration(lease)));
        }
        if let Some((want, ttl)) = self.grant {
            notes.push(format!("grant {want}/{}", duration(ttl)));
        }
        if self.settle {
            notes.push("settle".to_string());
        }
        if let Some(on) = self.charge {
            let statuses: Vec<String> = on.statuses().map(|s| s.to_string()).collect();
            notes.push(format!("charged on {}", statuses.join("/")));
        }
        notes.join(", ")
    }
}

/// The names of the rules some route or the default takes.
pub(crate) fn used_rules(policy: &Policy) -> Vec<String> {
    let mut used: Vec<String> = policy
        .routes
        .iter()
        .chain(std::iter::once(&policy.default))
        .flat_map(|route| route.rules.iter().map(|r| r.name.clone()))
        .collect();
    used.sort_unstable();
    used.dedup();
    used
}

/// The numbers of `rule` for `subject` at `now`, exactly as a gateway would pick them.
pub(crate) fn resolve(
    policy: &Policy,
    rule: &Arc<RuleSpec>,
    subject: &Subject,
    unused: bool,
    now: Instant,
) -> Cell {
    let (header, tenant, user) = match subject {
        Subject::All => (None, None, None),
        Subject::Plan(p) => (Some(p.as_bytes()), None, None),
        Subject::Tenant { tenant, user } => (
            None,
            Some(tenant.as_bytes()),
            user.as_deref().map(str::as_bytes),
        ),
    };
    let plan = policy
        .plans
        .as_ref()
        .map(|plans| plans.resolve(header, tenant).plan);
    let overrides = policy.overrides.of(tenant);
    let spec = policy.effective(rule, plan, &overrides, user, now);
    let source = match overrides.find(user, &rule.name, now) {
        Some(o) if Arc::ptr_eq(&o.spec, spec) => Source::Override(o.expires),
        _ if Arc::ptr_eq(spec, rule) => Source::Rule,
        _ => Source::Plan(
            plan.zip(policy.plans.as_ref())
                .and_then(|(p, plans)| plans.name(p))
                .map(ToString::to_string)
                .unwrap_or_default(),
        ),
    };
    let (limit, settle, grant, charge) = match &spec.kind {
        RuleKind::Rate(r) => (
            Limit::Rate {
                algo: r.algo.name(),
                limit: r.rule.limit(),
                period_us: r.rule.period_us(),
                burst: r.rule.burst(),
                cost: r.cost,
            },
            r.settle,
            r.grant.map(|g| (g.want, g.ttl)),
            r.charge,
        ),
        RuleKind::Semaphore(s) => (
            Limit::Semaphore {
                concurrency: s.concurrency,
                lease: s.lease,
            },
            false,
            None,
            None,
        ),
    };
    Cell {
        limit,
        source,
        shadow: spec.shadow,
        unused,
        settle,
        grant,
        charge,
    }
}

/// A policy duration in its largest exact unit, as the module writes them (`250ms`, `60s`,
/// `1m`, `2h`, `1d`).
pub(crate) fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        match ms.checked_div(size) {
            Some(n) if n > 0 && ms.is_multiple_of(size) => return format!("{n}{unit}"),
            _ => {}
        }
    }
    format!("{ms}ms")
}
