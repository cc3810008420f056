//! What this gateway enforces of each global key (section 15), and the demand it reports.
//!
//! A global rule's key is decided on the regional store exactly as any rule's, with its limit
//! replaced by the region's allocation: the home store's last answer while its lease runs
//! (measured from when the report was *sent*, so it ends no later than the home's), then the
//! smaller of it and the safe share, then the floor (`rl_core::allocate::Terms::enforced`, the
//! same rule the home counts the region by). Every request adds its units to the key's demand;
//! every `every` the driver takes the reports due ([`Allocations::due`]), sends each to the home
//! store (`RL.ALLOCATE`) and gives back the answer ([`Allocations::answered`]). No request waits
//! for the home store.
//!
//! The table is bounded like the others: a key pushed out starts again at the floor, which is
//! never more than the home counts the region at.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rl_core::allocate::{Allotment, Terms};

use crate::policy::{RuleKind, RuleSpec};
use crate::table::{Table, TableUse};
use crate::time::Instant;

/// One report for the home store: what `RL.ALLOCATE` is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocationReport {
    /// The rule's name (for metrics and logs).
    pub rule: String,
    /// The key on the home store: [`HOME_PREFIX`] and the key the regional store counts on,
    /// so a home that is also a region's store keeps the two apart (a hash tag stays the
    /// key's, and with it the slot).
    pub key: String,
    pub terms: Terms,
    /// Units asked (admitted and refused) per period of the rule since the last report.
    pub demand: u64,
    /// What this gateway enforces now.
    pub held: u64,
    /// When the report was taken: the lease of its answer counts from here.
    pub sent: Instant,
}

/// Each global rule's allocations, demand and lease age, for `/metrics`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocationUse {
    pub rule: String,
    /// Keys held, and the sums of their allocations and their demand (units per period).
    pub keys: u64,
    pub allocation: u64,
    pub demand: u64,
    /// The oldest answer behind a key's allocation: the staleness to alarm on. `None` when no
    /// key was ever answered.
    pub lease_age: Option<Duration>,
}

/// What a request is decided by on a global rule's key.
pub(crate) enum Enforce {
    /// The rule with the allocation as its limit.
    Rule(Arc<RuleSpec>),
    /// Nothing can pass before the next allocation (it is 0, or below the request's cost):
    /// refused without a call, retried after the wait in ms.
    Refuse(u64),
}

struct Entry {
    rule: String,
    terms: Terms,
    /// The rule's period: demand is reported in units per period.
    period_us: u64,
    every: Duration,
    /// The last answer: the allocation, and when its report was sent.
    answer: Option<(u64, Instant)>,
    /// The rule last built for an allocation, reused while it is the same.
    built: Option<(u64, Arc<RuleSpec>)>,
    /// Units asked since `since`.
    demand: u64,
    since: Instant,
    /// A report sent and not yet answered.
    sending: bool,
    /// The demand and the hold of the last report answered: what the home counts this gateway
    /// by.
    acked: Option<(u64, u64)>,
    /// The last answer was less than the region's target: the others' holds capped it, and it
    /// asks again a quarter of `every` later, until they have shrunk.
    capped: bool,
}

impl Entry {
    /// A report of this key, now in flight.
    fn report(&mut self, key: &str, demand: u64, held: u64, now: Instant) -> AllocationReport {
        self.sending = true;
        AllocationReport {
            rule: self.rule.clone(),
            key: format!("{HOME_PREFIX}{key}"),
            terms: self.terms,
            demand,
            held,
            sent: now,
        }
    }

    fn enforced(&self, now: Instant) -> u64 {
        let granted = self.answer.map(|(a, _)| a);
        let since = self
            .answer
            .map_or(0, |(_, sent)| millis(now.duration_since(sent)));
        self.terms.enforced(granted, since)
    }
}

/// What a global key's name on the home store starts with.
pub const HOME_PREFIX: &str = "rl:alloc:";

/// A jump in demand is reported this fraction of `every` after the last report at the
/// earliest...
const EARLY_SHARE: u32 = 4;
/// ...when it moved by this fraction of the limit at least.
const JUMP_FLOOR: u64 = 50;

pub(crate) struct Allocations {
    table: Mutex<Table<Entry>>,
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Allocations {
    pub(crate) fn new(entries: std::num::NonZeroUsize, bytes: usize) -> Allocations {
        Allocations {
            table: Mutex::new(Table::new(entries, bytes)),
        }
    }

    /// What a request of `cost` units on `key` is decided by, `rule` being the caller's
    /// effective global rule; counts its units into the key's demand.
    pub(crate) fn enforce(
        &self,
        rule: &Arc<RuleSpec>,
        key: &str,
        cost: u64,
        now: Instant,
    ) -> Enforce {
        let (Some(global), RuleKind::Rate(rate)) = (&rule.global, &rule.kind) else {
            return Enforce::Rule(Arc::clone(rule));
        };
        let terms = global.terms(&rate.rule);
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        let entry = table.get_or_insert_mut(key, || Entry {
            rule: rule.name.clone(),
            terms,
            period_us: rate.rule.period_us(),
            every: global.every,
            answer: None,
            built: None,
            demand: 0,
            since: now,
            sending: false,
            acked: None,
            capped: false,
        });
        if entry.terms != terms {
            // A reload, a plan or an override changed the limit: the allocations answered
            // for the old one are not this one's.
            entry.terms = terms;
            entry.period_us = rate.rule.period_us();
            entry.every = global.every;
            entry.answer = None;
            entry.built = None;
            entry.acked = None;
            entry.capped = false;
        }
        entry.demand = entry.demand.saturating_add(cost);
        let allocation = entry.enforced(now);
        let wait_ms = millis(global.every).max(1);
        if allocation == 0 {
            return Enforce::Refuse(wait_ms);
        }
        let built = match &entry.built {
            Some((a, spec)) if *a == allocation && spec.name == rule.name => Arc::clone(spec),
            _ => match rule.allocated(allocation) {
                Some(spec) => {
                    let spec = Arc::new(spec);
                    entry.built = Some((allocation, Arc::clone(&spec)));
                    spec
                }
                None => return Enforce::Refuse(wait_ms),
            },
        };
        match &built.kind {
            RuleKind::Rate(r) if cost > r.rule.burst() => Enforce::Refuse(wait_ms),
            _ => Enforce::Rule(built),
        }
    }

    /// The reports due at `now`, none for a key with one in flight:
    /// - at once, a key granted less than the home heard it hold (the home counts it at the
    ///   larger until told, and the others wait for that share);
    /// - `every` after its last report, a key with demand since, or whose demand the home still
    ///   counts (an idle key says so once);
    /// - early, a quarter of `every` after its last report, a key whose demand has jumped to
    ///   half or one and a half times what the home last heard (and by a fiftieth of the limit
    ///   at least: noise is no jump), or whose last answer was below its region's target (the
    ///   others had not shrunk yet): so a shift is served within about two reports.
    ///
    /// Their demand starts again from `now`.
    pub(crate) fn due(&self, now: Instant) -> Vec<AllocationReport> {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        let mut due = Vec::new();
        for (key, entry) in table.iter_mut() {
            if entry.sending {
                continue;
            }
            let held = entry.enforced(now);
            let (heard_demand, heard_held) = entry.acked.unwrap_or((0, held));
            // Granted less than the home heard it hold: the home counts the region at the
            // larger until told, so it is told at once (with the demand it already heard: the
            // current count goes on to the next report), and the others get the share sooner.
            if heard_held > held {
                due.push(entry.report(key, heard_demand, held, now));
                continue;
            }
            let elapsed = now.duration_since(entry.since);
            if elapsed < entry.every / EARLY_SHARE {
                continue;
            }
            let period_us = u128::from(entry.period_us);
            let elapsed_us = elapsed.as_micros().max(1);
            let demand =
                u64::try_from(u128::from(entry.demand).saturating_mul(period_us) / elapsed_us)
                    .unwrap_or(u64::MAX);
            let on_cycle = elapsed >= entry.every && (entry.demand > 0 || heard_demand > 0);
            let jumped = entry.demand > 0
                && demand.abs_diff(heard_demand) >= (entry.terms.limit / JUMP_FLOOR).max(1)
                && (demand.saturating_mul(2) <= heard_demand
                    || demand.saturating_mul(2) >= heard_demand.saturating_mul(3));
            if !(on_cycle || jumped || entry.capped) {
                continue;
            }
            due.push(entry.report(key, demand, held, now));
            entry.demand = 0;
            entry.since = now;
        }
        due
    }

    /// The home store's answer to `report`, or `None` when it could not answer (the key keeps
    /// what it had; its lease runs on).
    pub(crate) fn answered(&self, report: &AllocationReport, answer: Option<Allotment>) {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        let key = report.key.strip_prefix(HOME_PREFIX).unwrap_or(&report.key);
        let Some(entry) = table.peek_mut(key) else {
            return;
        };
        entry.sending = false;
        if let (Some(a), true) = (answer, entry.terms == report.terms) {
            entry.answer = Some((a.allocation, report.sent));
            entry.acked = Some((report.demand, report.held));
            entry.capped = a.allocation < entry.terms.target(a.region_demand, a.total_demand);
        }
    }

    /// Per global rule: keys, allocations, demand and the oldest answer's age.
    pub(crate) fn usage(&self, now: Instant) -> (Vec<AllocationUse>, TableUse) {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        let mut rules: Vec<AllocationUse> = Vec::new();
        for (_, entry) in table.iter_mut() {
            let elapsed_us = now.duration_since(entry.since).as_micros().max(1);
            let demand =
                u128::from(entry.demand).saturating_mul(u128::from(entry.period_us)) / elapsed_us;
            let age = entry.answer.map(|(_, sent)| now.duration_since(sent));
            let allocation = entry.enforced(now);
            let i = match rules.iter().position(|u| u.rule == entry.rule) {
                Some(i) => i,
                None => {
                    rules.push(AllocationUse {
                        rule: entry.rule.clone(),
                        keys: 0,
                        allocation: 0,
                        demand: 0,
                        lease_age: None,
                    });
                    rules.len() - 1
                }
            };
            if let Some(u) = rules.get_mut(i) {
                u.keys = u.keys.saturating_add(1);
                u.allocation = u.allocation.saturating_add(allocation);
                u.demand = u
                    .demand
                    .saturating_add(u64::try_from(demand).unwrap_or(u64::MAX));
                u.lease_age = match (u.lease_age, age) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                };
            }
        }
        rules.sort_by(|a, b| a.rule.cmp(&b.rule));
        (rules, table.usage())
    }
}
