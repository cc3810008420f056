//! The limiters compared, behind one interface driven from the virtual clock.

use std::time::Duration;

use congestion_limiter::limiter::{DefaultLimiter, Limiter as _, Outcome, Token};
use congestion_limiter::limits::LimitAlgorithm;
use rl_engine::capacity::{
    Admission, Capacity, CapacitySpec, End, LimitSpec, Permit, Priority, Tenant,
};
use rl_engine::Instant;
use tower_acc::Algorithm;

pub enum Ticket {
    Plain,
    Engine(Permit),
    Congestion(Token),
}

pub trait Contender {
    fn admit(&mut self, p: Priority, tenant: Tenant, now: Instant) -> Option<Ticket>;
    fn finish(&mut self, t: Ticket, end: End, now: Instant);
    /// The limit now; `None` without one.
    fn limit(&self) -> Option<u32>;
}

pub struct NoLimit;

impl Contender for NoLimit {
    fn admit(&mut self, _: Priority, _: Tenant, _: Instant) -> Option<Ticket> {
        Some(Ticket::Plain)
    }
    fn finish(&mut self, _: Ticket, _: End, _: Instant) {}
    fn limit(&self) -> Option<u32> {
        None
    }
}

/// A plain in-flight limit: the oracle, once the search has chosen it.
pub struct Fixed {
    pub limit: u32,
    in_flight: u32,
}

impl Fixed {
    pub fn new(limit: u32) -> Fixed {
        Fixed {
            limit,
            in_flight: 0,
        }
    }
}

impl Contender for Fixed {
    fn admit(&mut self, _: Priority, _: Tenant, _: Instant) -> Option<Ticket> {
        (self.in_flight < self.limit).then(|| {
            self.in_flight += 1;
            Ticket::Plain
        })
    }
    fn finish(&mut self, _: Ticket, _: End, _: Instant) {
        self.in_flight -= 1;
    }
    fn limit(&self) -> Option<u32> {
        Some(self.limit)
    }
}

/// `tower-acc`'s algorithms, fed as its layer feeds them: the latency, the in-flight count,
/// and whether the response was an error.
pub struct TowerAcc<A> {
    algo: A,
    in_flight: usize,
}

impl<A: Algorithm> TowerAcc<A> {
    pub fn new(algo: A) -> TowerAcc<A> {
        TowerAcc { algo, in_flight: 0 }
    }
}

impl<A: Algorithm> Contender for TowerAcc<A> {
    fn admit(&mut self, _: Priority, _: Tenant, _: Instant) -> Option<Ticket> {
        (self.in_flight < self.algo.max_concurrency()).then(|| {
            self.in_flight += 1;
            Ticket::Plain
        })
    }
    fn finish(&mut self, _: Ticket, end: End, _: Instant) {
        let (rtt, error, canceled) = match end {
            End::Done { latency } => (latency, false, false),
            End::Failed { latency } | End::TimedOut { latency } => (latency, true, false),
            End::Abandoned => (Duration::ZERO, false, true),
        };
        self.algo.update(rtt, self.in_flight, error, canceled);
        self.in_flight -= 1;
    }
    fn limit(&self) -> Option<u32> {
        Some(self.algo.max_concurrency() as u32)
    }
}

/// `congestion-limiter`'s limiter, on a current-thread tokio runtime whose clock is paused
/// and advanced to the simulator's: its tokens time themselves with tokio's clock, and its
/// algorithms' samples cannot be built outside the crate.
pub struct Congestion<T> {
    rt: tokio::runtime::Runtime,
    limiter: DefaultLimiter<T>,
    clock: Instant,
}

impl<T: LimitAlgorithm + Send + Sync + std::fmt::Debug> Congestion<T> {
    pub fn new(algo: T) -> Congestion<T> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a runtime");
        let limiter = rt.block_on(async { DefaultLimiter::new(algo) });
        Congestion {
            rt,
            limiter,
            clock: Instant::from_micros(0),
        }
    }

    fn advance(&mut self, now: Instant) -> Duration {
        let d = now.duration_since(self.clock);
        self.clock = self.clock.max(now);
        d
    }
}

impl<T: LimitAlgorithm + Send + Sync + std::fmt::Debug> Contender for Congestion<T> {
    fn admit(&mut self, _: Priority, _: Tenant, now: Instant) -> Option<Ticket> {
        let d = self.advance(now);
        let limiter = &self.limiter;
        self.rt.block_on(async {
            tokio::time::advance(d).await;
            limiter.try_acquire().await.map(Ticket::Congestion)
        })
    }
    fn finish(&mut self, t: Ticket, end: End, now: Instant) {
        let d = self.advance(now);
        let Ticket::Congestion(token) = t else { return };
        let outcome = match end {
            End::Done { .. } => Some(Outcome::Success),
            End::Failed { .. } | End::TimedOut { .. } => Some(Outcome::Overload),
            End::Abandoned => None,
        };
        let limiter = &self.limiter;
        self.rt.block_on(async {
            tokio::time::advance(d).await;
            limiter.release(token, outcome).await;
            // A cut takes its permits back in a spawned task: let it run.
            tokio::task::yield_now().await;
        });
    }
    fn limit(&self) -> Option<u32> {
        Some(self.limiter.state().limit() as u32)
    }
}

/// The engine's capacity core, with fair share.
pub struct Engine(pub Capacity);

impl Engine {
    pub fn adaptive(seed: u64) -> Engine {
        Engine(Capacity::new(
            CapacitySpec {
                limit: LimitSpec::Adaptive {
                    min: 1,
                    max: 10_000,
                    initial: 16,
                },
                max_wait: Duration::ZERO,
                fair: true,
            },
            seed,
        ))
    }
}

impl Contender for Engine {
    fn admit(&mut self, p: Priority, tenant: Tenant, now: Instant) -> Option<Ticket> {
        match self.0.admit(p, Some(tenant), now) {
            Admission::Admitted(permit) => Some(Ticket::Engine(permit)),
            Admission::Shed { .. } => None,
        }
    }
    fn finish(&mut self, t: Ticket, end: End, now: Instant) {
        if let Ticket::Engine(permit) = t {
            self.0.finish(permit, end, now);
        }
    }
    fn limit(&self) -> Option<u32> {
        Some(self.0.stats().limit)
    }
}
