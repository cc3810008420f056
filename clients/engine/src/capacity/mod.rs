//! Capacity protection (`../shared/CLIENTS.md` section 14 of the contract): an in-flight limit
//! per named capacity, fixed or learned ([`adaptive`]), shared by every request of a process,
//! with classes that are shed in order and tenants that are shed by their share.
//!
//! **Classes.** Each class has a ceiling on the in-flight count: `critical` the whole limit,
//! `standard` a tenth less, `batch` two tenths less (at least one slot each). So a critical
//! request is refused only when the in-flight count is at the limit, which no standard or batch
//! admission can bring about alone; and when a class is shed, every class below it is *held
//! down* (shed whatever the count) for [`HOLD`]. A priority inversion, as this module defines
//! and its tests check it, is the admission of a lower-class request less than [`HOLD`] after a
//! higher-class one was refused for room: the hold-down makes it impossible. (A tenant refused
//! for being above its fair share is not refused for room, and holds nothing down.)
//!
//! **Fair share.** With `fair`, near a class's ceiling (within the tenth above it that the class
//! below cannot reach), a tenant is admitted only while its in-flight count in the class is under
//! its share of the class's in-flight count, weighted: `(in_flight(class) + 1) * w / W`, `W` the
//! weights of the class's tenants with a request in flight. A tenant above its share is shed
//! there, one below it is not. Tenants are tracked while they have a request in flight (an entry
//! leaves with its last request), and at most [`MAX_TENANTS`] at once; beyond that a newcomer is
//! admitted by its class alone.
//!
//! The core has no clock and no I/O: the driver gives the instant of every call, and reports
//! each admitted request's end exactly once ([`Capacity::finish`]).

mod adaptive;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use foldhash::fast::RandomState;

use crate::rng::Rng;
use crate::time::Instant;
use adaptive::Adaptive;

/// How long a shed holds the classes below it down.
pub const HOLD: Duration = Duration::from_secs(1);
/// Tenants tracked at once for fair share.
pub const MAX_TENANTS: usize = 4096;
/// The share of the limit each class keeps from the class below it.
const RESERVE: f64 = 0.1;
/// `Retry-After` never says less, nor more.
const RETRY_MIN: Duration = Duration::from_millis(1);
const RETRY_MAX: Duration = Duration::from_secs(60);
/// The completion rate behind `Retry-After` is counted over windows this long.
const RATE_WINDOW: Duration = Duration::from_millis(100);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Priority {
    Critical,
    Standard,
    Batch,
}

impl Priority {
    pub const ALL: [Priority; 3] = [Priority::Critical, Priority::Standard, Priority::Batch];

    /// 0 for critical, 1 for standard, 2 for batch: the number of class reserves below the
    /// limit that its ceiling sits.
    pub const fn index(self) -> usize {
        match self {
            Priority::Critical => 0,
            Priority::Standard => 1,
            Priority::Batch => 2,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            Priority::Critical => "critical",
            Priority::Standard => "standard",
            Priority::Batch => "batch",
        }
    }
}

/// One value per class, read by class without indexing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PerClass<T>(pub [T; 3]);

impl<T> PerClass<T> {
    pub fn get(&self, p: Priority) -> &T {
        let [c, s, b] = &self.0;
        match p {
            Priority::Critical => c,
            Priority::Standard => s,
            Priority::Batch => b,
        }
    }

    fn get_mut(&mut self, p: Priority) -> &mut T {
        let [c, s, b] = &mut self.0;
        match p {
            Priority::Critical => c,
            Priority::Standard => s,
            Priority::Batch => b,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitSpec {
    Fixed(u32),
    Adaptive { min: u32, max: u32, initial: u32 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapacitySpec {
    pub limit: LimitSpec,
    /// Not used yet: the core never waits, `admit` answers at once (as with `0ms`).
    pub max_wait: Duration,
    pub fair: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tenant {
    /// A hash of the tenant's identity.
    pub id: u64,
    /// The plan's weight; 0 counts as 1.
    pub weight: u32,
}

/// What a request admitted carries to its end. Not `Clone`: each is finished once.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "an admitted request holds a slot until it is finished"]
pub struct Permit {
    priority: Priority,
    /// The tenant, when it is tracked for fair share.
    tenant: Option<u64>,
    start: Instant,
    /// The admission's number, for the adaptive limit's cohorts.
    seq: u64,
}

impl Permit {
    pub fn priority(&self) -> Priority {
        self.priority
    }

    pub fn start(&self) -> Instant {
        self.start
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum Admission {
    Admitted(Permit),
    /// `retry_after`: when a slot of the class is likely free, from the observed drain rate
    /// (or the hold-down's end), jittered up to half again so refused callers do not return
    /// together.
    Shed {
        retry_after: Duration,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Done {
        latency: Duration,
    },
    /// A 5xx.
    Failed {
        latency: Duration,
    },
    TimedOut {
        latency: Duration,
    },
    /// The caller went away: the slot is freed and nothing is learned.
    Abandoned,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapacityStats {
    /// The limit admissions see now (halved while the no-load latency is re-measured).
    pub limit: u32,
    pub in_flight: u32,
    pub in_flight_by_priority: PerClass<u32>,
    /// The learned no-load latency; `None` for a fixed limit, or before the first measure.
    pub no_load: Option<Duration>,
    pub shed: PerClass<u64>,
    pub admitted: PerClass<u64>,
}

enum Limit {
    Fixed(u32),
    Adaptive(Box<Adaptive>),
}

struct TenantEntry {
    in_flight: u32,
    weight: u32,
}

struct State {
    limit: Limit,
    in_flight: u32,
    by_class: PerClass<u32>,
    tenants: HashMap<(u64, usize), TenantEntry, RandomState>,
    /// Sum of the weights of the tracked tenants, per class.
    weights: PerClass<u64>,
    /// Each class is shed until then (a class above it was shed).
    held_until: PerClass<Instant>,
    shed: PerClass<u64>,
    admitted: PerClass<u64>,
    rate: DrainRate,
}

/// Completions per second, over the last full [`RATE_WINDOW`].
struct DrainRate {
    /// `None` until the first completion.
    start: Option<Instant>,
    count: u32,
    per_sec: f64,
}

pub struct Capacity {
    fair: bool,
    rng: Rng,
    state: Mutex<State>,
}

impl Capacity {
    /// Its clocks start at the first admission.
    pub fn new(spec: CapacitySpec, seed: u64) -> Capacity {
        let now = Instant::default();
        let rng = Rng::new(seed);
        let limit = match spec.limit {
            LimitSpec::Fixed(n) => Limit::Fixed(n.max(1)),
            LimitSpec::Adaptive { min, max, initial } => {
                Limit::Adaptive(Box::new(Adaptive::new(min, max, initial, now, &rng)))
            }
        };
        Capacity {
            fair: spec.fair,
            rng,
            state: Mutex::new(State {
                limit,
                in_flight: 0,
                by_class: PerClass::default(),
                tenants: HashMap::with_hasher(RandomState::default()),
                weights: PerClass::default(),
                held_until: PerClass::default(),
                shed: PerClass::default(),
                admitted: PerClass::default(),
                rate: DrainRate {
                    start: None,
                    count: 0,
                    per_sec: 0.0,
                },
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing under the lock panics; were it poisoned, the counts are still whole.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn admit(&self, priority: Priority, tenant: Option<Tenant>, now: Instant) -> Admission {
        let mut st = self.lock();
        let in_flight = st.in_flight;
        if let Limit::Adaptive(a) = &mut st.limit {
            a.tick(now, in_flight, &self.rng);
        }
        let limit = st.limit();
        let ceiling = ceiling(limit, priority);
        // Both mean demand beyond the limit: the limit is in use.
        if now < *st.held_until.get(priority) || st.in_flight >= ceiling {
            st.mark_saturated();
            let probing = matches!(&st.limit, Limit::Adaptive(a) if a.probing());
            if !probing {
                st.hold_below(priority, now);
            }
            return self.shed(&mut st, priority, ceiling, now);
        }
        let tenant = tenant.map(|t| (t.id, t.weight.max(1)));
        let key = tenant.map(|(id, _)| (id, priority.index()));
        if let (true, Some((id, weight))) = (self.fair, tenant) {
            let pressed = st.in_flight.saturating_add(reserve(limit)) >= ceiling;
            // Not a hold-down: the class is not short of room, this tenant has its share.
            if pressed && st.above_share(id, weight, priority) {
                st.mark_saturated();
                return self.shed(&mut st, priority, ceiling, now);
            }
        }
        st.in_flight = st.in_flight.saturating_add(1);
        let c = st.by_class.get_mut(priority);
        *c = c.saturating_add(1);
        let a = st.admitted.get_mut(priority);
        *a = a.saturating_add(1);
        if st.in_flight >= ceiling {
            st.mark_saturated();
        }
        let seq = match &mut st.limit {
            Limit::Adaptive(a) => a.admitted(),
            Limit::Fixed(_) => 0,
        };
        let tracked = match (key, tenant) {
            (Some(key), Some((_, weight))) => st.track(key, weight, priority),
            _ => false,
        };
        Admission::Admitted(Permit {
            priority,
            tenant: if tracked {
                tenant.map(|(id, _)| id)
            } else {
                None
            },
            start: now,
            seq,
        })
    }

    fn shed(&self, st: &mut State, priority: Priority, ceiling: u32, now: Instant) -> Admission {
        let s = st.shed.get_mut(priority);
        *s = s.saturating_add(1);
        let hold = now + HOLD;
        for lower in Priority::ALL
            .iter()
            .filter(|p| p.index() > priority.index())
        {
            let h = st.held_until.get_mut(*lower);
            *h = (*h).max(hold);
        }
        let held = st.held_until.get(priority).duration_since(now);
        let excess = st
            .in_flight
            .saturating_add(1)
            .saturating_sub(ceiling)
            .max(1);
        let drain = if st.rate.per_sec > 0.0 {
            Duration::from_secs_f64((f64::from(excess) / st.rate.per_sec).min(60.0))
        } else {
            st.no_load().unwrap_or(Duration::from_secs(1))
        };
        let base = held.max(drain);
        let retry_after = base.mul_f64(1.0 + 0.5 * self.rng.f64());
        Admission::Shed {
            retry_after: retry_after.clamp(RETRY_MIN, RETRY_MAX),
        }
    }

    /// Reports the end of an admitted request; exactly once per [`Permit`].
    pub fn finish(&self, permit: Permit, end: End, now: Instant) {
        let mut st = self.lock();
        st.in_flight = st.in_flight.saturating_sub(1);
        let c = st.by_class.get_mut(permit.priority);
        *c = c.saturating_sub(1);
        if let Some(id) = permit.tenant {
            st.untrack((id, permit.priority.index()), permit.priority);
        }
        st.rate.count_one(now);
        if let Limit::Adaptive(a) = &mut st.limit {
            a.on_end(permit.seq, &end, now, &self.rng);
        }
    }

    pub fn stats(&self) -> CapacityStats {
        let st = self.lock();
        CapacityStats {
            limit: st.limit(),
            in_flight: st.in_flight,
            in_flight_by_priority: st.by_class,
            no_load: st.no_load(),
            shed: st.shed,
            admitted: st.admitted,
        }
    }
}

/// A tenth of the limit, at least one.
fn reserve(limit: u32) -> u32 {
    ((f64::from(limit) * RESERVE).round() as u32).max(1)
}

/// The in-flight count at which a class is refused: `limit` less a reserve per class above it,
/// and at least one, so no class is refused by an idle gateway.
fn ceiling(limit: u32, p: Priority) -> u32 {
    let below = reserve(limit).saturating_mul(p.index() as u32);
    limit.saturating_sub(below).max(1)
}

impl State {
    fn limit(&self) -> u32 {
        match &self.limit {
            Limit::Fixed(n) => *n,
            Limit::Adaptive(a) => a.limit(),
        }
    }

    fn no_load(&self) -> Option<Duration> {
        match &self.limit {
            Limit::Fixed(_) => None,
            Limit::Adaptive(a) => a.no_load(),
        }
    }

    /// A class was refused for room: the classes below it are refused for [`HOLD`].
    fn hold_below(&mut self, p: Priority, now: Instant) {
        let hold = now + HOLD;
        for lower in Priority::ALL.iter().filter(|l| l.index() > p.index()) {
            let h = self.held_until.get_mut(*lower);
            *h = (*h).max(hold);
        }
    }

    fn mark_saturated(&mut self) {
        if let Limit::Adaptive(a) = &mut self.limit {
            a.saturated();
        }
    }

    /// Whether one more request would put the tenant above its weighted share of the class.
    fn above_share(&self, id: u64, weight: u32, p: Priority) -> bool {
        let (mine, total_weight) = match self.tenants.get(&(id, p.index())) {
            Some(e) => (e.in_flight, *self.weights.get(p)),
            None => (0, self.weights.get(p).saturating_add(u64::from(weight))),
        };
        let class = f64::from(self.by_class.get(p).saturating_add(1));
        let share = class * f64::from(weight) / (total_weight.max(1) as f64);
        f64::from(mine.saturating_add(1)) > share.max(1.0)
    }

    /// Counts an admitted request of a tenant; false when the table is full of others.
    fn track(&mut self, key: (u64, usize), weight: u32, p: Priority) -> bool {
        if let Some(e) = self.tenants.get_mut(&key) {
            e.in_flight = e.in_flight.saturating_add(1);
            return true;
        }
        if self.tenants.len() >= MAX_TENANTS {
            return false;
        }
        self.tenants.insert(
            key,
            TenantEntry {
                in_flight: 1,
                weight,
            },
        );
        let w = self.weights.get_mut(p);
        *w = w.saturating_add(u64::from(weight));
        true
    }

    fn untrack(&mut self, key: (u64, usize), p: Priority) {
        let Some(e) = self.tenants.get_mut(&key) else {
            return;
        };
        e.in_flight = e.in_flight.saturating_sub(1);
        if e.in_flight == 0 {
            let weight = e.weight;
            self.tenants.remove(&key);
            let w = self.weights.get_mut(p);
            *w = w.saturating_sub(u64::from(weight));
        }
    }
}

impl DrainRate {
    fn count_one(&mut self, now: Instant) {
        let Some(start) = self.start else {
            self.start = Some(now);
            return;
        };
        self.count = self.count.saturating_add(1);
        let elapsed = now.duration_since(start);
        if elapsed >= RATE_WINDOW {
            self.per_sec = f64::from(self.count) / elapsed.as_secs_f64();
            self.count = 0;
            self.start = Some(now);
        }
    }
}
