//! Capacity protection (`clients/CONTRACT.md` section 14): an in-flight limit
//! per named capacity, fixed or learned ([`adaptive`]), shared by every request of a process,
//! with classes that are shed in order and tenants that are shed by their share.
//!
//! **Classes.** Each class has a ceiling on the in-flight count: `critical` the whole limit,
//! `standard` a tenth less, `batch` two tenths less (at least one slot each). Critical counts
//! only its own requests against its ceiling: it borrows the slots lower classes hold, which
//! are not refilled until the count is under their ceilings again (so the in-flight count
//! exceeds the limit only by lower-class requests already admitted, while they drain). A
//! critical request is refused only when critical requests alone fill the limit.
//!
//! **Hold-down.** When a critical request is refused (for room, or a tenant for its share),
//! batch is *held down* (refused whatever the count) for [`HOLD`], and standard's ceiling drops
//! by another reserve for as long; when a standard request is refused for room, batch is held
//! down too. Standard is squeezed rather than held: holding it after each rare critical refusal
//! would leave the backend idle whenever critical demand is below capacity. While the adaptive
//! limit re-measures the no-load latency, standard and batch see half the limit and their
//! refusals then hold nothing down: they are the probe's, not demand's. A priority inversion,
//! as this module defines and its tests check it, is a batch admission less than [`HOLD`]
//! after a critical refusal: the hold-down makes it impossible.
//!
//! **Fair share.** With `fair`, near a class's ceiling (within a reserve of it, critical
//! counting its own requests), a tenant is admitted only while its in-flight count in the class
//! is under its share of the class's in-flight count, weighted: `(in_flight(class) + 1) * w /
//! W`, `W` the weights of the class's tenants with a request in flight. A tenant above its share
//! is shed there, one below it is not. Tenants are tracked while they have a request in flight
//! (an entry leaves with its last request), and at most [`MAX_TENANTS`] at once; beyond that a
//! newcomer is admitted by its class alone.
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
    /// How long a request may wait for a slot: the engine asks again with
    /// [`Capacity::try_admit`] until then (the core itself never waits).
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
    /// The limit (critical's ceiling; standard's and batch's are under it, and halved while
    /// the no-load latency is re-measured).
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
    /// Batch is refused until then: a class above it was refused for room.
    batch_held_until: Instant,
    /// Standard's ceiling is a reserve lower until then: critical was refused for room.
    squeezed_until: Instant,
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
                batch_held_until: Instant::default(),
                squeezed_until: Instant::default(),
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
        self.decide(priority, tenant, now, true)
    }

    /// [`Capacity::admit`] for a request that may wait for a slot and will ask again
    /// (`queue.max_wait`): a refusal is not counted as a shed, though it holds the classes
    /// below down as any refusal for room does (a request waiting is one they must not pass).
    pub fn try_admit(&self, priority: Priority, tenant: Option<Tenant>, now: Instant) -> Admission {
        self.decide(priority, tenant, now, false)
    }

    fn decide(
        &self,
        priority: Priority,
        tenant: Option<Tenant>,
        now: Instant,
        last: bool,
    ) -> Admission {
        let mut st = self.lock();
        let in_flight = st.in_flight;
        if let Limit::Adaptive(a) = &mut st.limit {
            a.tick(now, in_flight, &self.rng);
        }
        let limit = match (&st.limit, priority) {
            (Limit::Adaptive(a), Priority::Standard | Priority::Batch) => a.probe_limit(),
            _ => st.limit(),
        };
        let ceiling = ceiling(limit, priority, now < st.squeezed_until);
        let held = priority == Priority::Batch && now < st.batch_held_until;
        // Critical counts only itself against the limit: it takes the slots that standard and
        // batch requests in flight will free, and they are refused until the count is back
        // under their ceilings. So it is refused only when critical alone fills the limit,
        // not because a cut of the limit found lower classes in flight.
        let counted = match priority {
            Priority::Critical => *st.by_class.get(Priority::Critical),
            _ => st.in_flight,
        };
        if held || counted >= ceiling {
            if !held {
                st.mark_saturated();
            }
            // Critical is never refused by a probe; the others' refusals during one are the
            // probe's, not demand's, and hold nothing down.
            let probing = matches!(&st.limit, Limit::Adaptive(a) if a.probing());
            if !probing || priority == Priority::Critical {
                st.refused_for_room(priority, now);
            }
            return self.shed(&mut st, priority, ceiling, now, last);
        }
        let tenant = tenant.map(|t| (t.id, t.weight.max(1)));
        let key = tenant.map(|(id, _)| (id, priority.index()));
        if let (true, Some((id, weight))) = (self.fair, tenant) {
            let pressed = counted.saturating_add(reserve(limit)) >= ceiling;
            // A critical tenant refused while a batch request could be admitted would be an
            // inversion too: it holds batch down (and squeezes standard) like a refusal for
            // room. Standard's fair-share refusals hold nothing: its tenants are not short of
            // room, this one has its share.
            if pressed && st.above_share(id, weight, priority) {
                st.mark_saturated();
                if priority == Priority::Critical {
                    st.refused_for_room(priority, now);
                }
                return self.shed(&mut st, priority, ceiling, now, last);
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

    /// A refusal: counted as a shed when it is the request's `last` answer.
    fn shed(
        &self,
        st: &mut State,
        priority: Priority,
        ceiling: u32,
        now: Instant,
        last: bool,
    ) -> Admission {
        if last {
            let s = st.shed.get_mut(priority);
            *s = s.saturating_add(1);
        }
        let held = match priority {
            Priority::Batch => st.batch_held_until.duration_since(now),
            _ => Duration::ZERO,
        };
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

/// The in-flight count at which a class is refused: `limit` less a reserve per class above it
/// (one more for standard while `squeezed`), and at least one, so no class is refused by an
/// idle gateway.
fn ceiling(limit: u32, p: Priority, squeezed: bool) -> u32 {
    let reserves = match p {
        Priority::Critical => 0,
        Priority::Standard if squeezed => 2,
        Priority::Standard => 1,
        Priority::Batch => 2,
    };
    let below = reserve(limit).saturating_mul(reserves);
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

    /// A class was refused for room. Below critical, batch is refused for [`HOLD`] and
    /// standard's ceiling drops by another reserve (critical's room doubles): so critical is not
    /// refused again while the classes below could be, yet standard, whose demand is not
    /// deferrable like batch's, keeps most of its room.
    fn refused_for_room(&mut self, p: Priority, now: Instant) {
        let until = now + HOLD;
        if p == Priority::Critical {
            self.squeezed_until = self.squeezed_until.max(until);
        }
        if p != Priority::Batch {
            self.batch_held_until = self.batch_held_until.max(until);
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
