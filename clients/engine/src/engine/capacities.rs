//! Capacity in a request's decision (section 14): the policy's capacities, kept across reloads;
//! what a request of a capacity route draws on; the slot an admitted one holds until its
//! response ends; and the 503 of one shed.

use std::collections::HashMap;
use std::fmt;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Duration;

use super::verdict::{LogLevel, LogRecord, Verdict, VerdictKind};
use super::{Call, Shared, RETRY_AFTER};
use crate::capacity::{Capacity, CapacitySpec, End, Permit, Priority, Tenant};
use crate::metrics::{Event, Outcome};
use crate::policy::{Plans, Policy, Route};
use crate::problem;
use crate::time::Instant;

/// The capacities of the policy in force, by name. A reload keeps each one whose spec it leaves
/// unchanged, with what it learned and what it has in flight.
#[derive(Default)]
pub(crate) struct Capacities(HashMap<String, (CapacitySpec, Arc<Capacity>)>);

impl Capacities {
    pub(crate) fn of(policy: &Policy, previous: &Capacities, seed: u64) -> Capacities {
        let by_name = policy
            .capacities
            .iter()
            .enumerate()
            .map(|(i, (name, spec))| {
                let kept = previous
                    .0
                    .get(name)
                    .filter(|(s, _)| s == spec)
                    .map(|(_, c)| Arc::clone(c));
                let seed = seed.wrapping_add(i as u64);
                let capacity = kept.unwrap_or_else(|| Arc::new(Capacity::new(*spec, seed)));
                (name.clone(), (*spec, capacity))
            })
            .collect();
        Capacities(by_name)
    }

    /// Each capacity by name, in name order: what `/metrics` shows.
    pub(crate) fn listed(&self) -> Vec<(String, Arc<Capacity>)> {
        let mut list: Vec<_> = self
            .0
            .iter()
            .map(|(name, (_, c))| (name.clone(), Arc::clone(c)))
            .collect();
        list.sort_by(|a, b| a.0.cmp(&b.0));
        list
    }

    fn get(&self, name: &str) -> Option<(&CapacitySpec, &Arc<Capacity>)> {
        self.0.get(name).map(|(spec, c)| (spec, c))
    }
}

/// What a request of a capacity route draws on, decided once its rules admitted it.
pub(crate) struct Drawing {
    pub(crate) name: Arc<str>,
    pub(crate) capacity: Arc<Capacity>,
    pub(crate) priority: Priority,
    pub(crate) tenant: Option<Tenant>,
    /// Until when it may wait for a slot (`queue.max_wait` from its start).
    pub(crate) until: Instant,
}

impl Shared {
    /// What a request of `route` draws on, if the route names a capacity: its class, and the
    /// caller's tenant (hashed) with its plan's weight when the capacity shares fairly.
    pub(crate) fn drawing(
        &self,
        route: &Route,
        tenant: Option<&[u8]>,
        plan: Option<(usize, &Plans)>,
        started: Instant,
    ) -> Option<Drawing> {
        let on = route.capacity.as_ref()?;
        let capacities = self.capacities.load();
        let (spec, capacity) = capacities.get(&on.name)?;
        let tenant = tenant.filter(|_| spec.fair).map(|t| Tenant {
            id: self.tenant_hash.hash_one(t),
            weight: plan.map_or(1, |(p, plans)| plans.weight(p)),
        });
        Some(Drawing {
            name: Arc::clone(&on.name),
            capacity: Arc::clone(capacity),
            priority: on.priority,
            tenant,
            until: started.saturating_add(spec.max_wait),
        })
    }

    /// The 503 of a request its rules admitted and its capacity shed: the admission's
    /// `RateLimit` fields, `Retry-After` from the capacity's drain (at least a second), the
    /// capacity's own problem type, and the record `shed:<capacity>:<class>`. What the request
    /// took in the store is given back by `undo`, sent in the background.
    pub(crate) fn capacity_shed(
        &self,
        admitted: Verdict,
        drawing: &Drawing,
        retry_after: Duration,
        undo: Vec<Call>,
    ) -> Verdict {
        let route = admitted.route.clone().unwrap_or_default();
        let class = drawing.priority.name();
        self.metrics.record(Event::CapacityShed {
            route: &route,
            capacity: &drawing.name,
            class,
        });
        let seconds = retry_after
            .as_secs()
            .saturating_add(u64::from(retry_after.subsec_nanos() > 0))
            .max(1);
        let mut headers: Vec<_> = admitted
            .headers
            .into_iter()
            .filter(|(name, _)| *name != RETRY_AFTER)
            .collect();
        headers.push((RETRY_AFTER, seconds.to_string()));
        let mut log = admitted.log;
        log.push(LogRecord::new(
            LogLevel::Warn,
            "shed: the capacity the route draws on is full",
            format!("shed:{}:{class}", drawing.name),
            &route,
            "",
            admitted.policy_version,
            Outcome::Shed.name(),
        ));
        let mut background = admitted.background;
        background.extend(undo);
        Verdict {
            kind: VerdictKind::Shed,
            outcome: Some(Outcome::Shed),
            status: Some(503),
            headers,
            problem: Some(problem::capacity_exceeded()),
            route: admitted.route,
            plan: admitted.plan,
            policy_version: admitted.policy_version,
            background,
            log,
            checks: Vec::new(),
        }
    }
}

/// A request's place in a capacity, from its admission to its response's end. Dropped without
/// [`Slot::end`] (the request was cancelled), the place is given back and nothing is learned.
pub struct Slot {
    capacity: Arc<Capacity>,
    permit: Option<Permit>,
}

impl fmt::Debug for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Slot")
            .field("permit", &self.permit)
            .finish()
    }
}

impl Slot {
    pub(crate) fn new(capacity: Arc<Capacity>, permit: Permit) -> Slot {
        Slot {
            capacity,
            permit: Some(permit),
        }
    }

    /// The response ended at `now` with `status` (`None`: without one). Its latency and
    /// outcome teach an adaptive limit: a 5xx is the backend failing, a 504 timing out, any
    /// other status a completion; without a status nothing is learned.
    pub(crate) fn end(&mut self, status: Option<u16>, now: Instant) {
        let Some(permit) = self.permit.take() else {
            return;
        };
        let latency = now.duration_since(permit.start());
        let end = match status {
            None => End::Abandoned,
            Some(504) => End::TimedOut { latency },
            Some(s) if s >= 500 => End::Failed { latency },
            Some(_) => End::Done { latency },
        };
        self.capacity.finish(permit, end, now);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(permit) = self.permit.take() {
            // No clock here: an abandoned request teaches nothing, so its start will do.
            let at = permit.start();
            self.capacity.finish(permit, End::Abandoned, at);
        }
    }
}
