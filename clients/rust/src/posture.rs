//! What a route does when the store cannot answer (`CLIENTS.md` section 4): the deadline on
//! every store call, the breaker shared by the routes of one store, the ramp back after
//! recovery, and the local fallback limiter deciding with the module's own arithmetic.

use std::future::Future;
use std::num::NonZeroUsize;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lru::LruCache;
use rl_core::limiter::Limiter;
use rl_core::rate::Decision;
use rl_core::rule::{Algo, Rule};
use tokio::time::Instant;

use crate::policy::{OnStoreError, StoreSpec};

/// Why a store call gave no decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreFailure<E> {
    /// No answer within `store.timeout`.
    Timeout,
    Error(E),
}

/// Runs a store call under the deadline, so a slow store becomes a failure the breaker counts
/// rather than a request that hangs.
pub async fn with_deadline<T, E, F>(deadline: Duration, call: F) -> Result<T, StoreFailure<E>>
where
    F: Future<Output = Result<T, E>>,
{
    match tokio::time::timeout(deadline, call).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(StoreFailure::Error(e)),
        Err(_) => Err(StoreFailure::Timeout),
    }
}

/// The breaker's state as operators see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    Closed,
    Open,
    HalfOpen,
    Ramping,
}

impl BreakerState {
    pub const ALL: [BreakerState; 4] = [
        BreakerState::Closed,
        BreakerState::Open,
        BreakerState::HalfOpen,
        BreakerState::Ramping,
    ];

    pub fn name(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
            BreakerState::Ramping => "ramping",
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum State {
    Closed,
    Open { until: Instant },
    HalfOpen { probing: bool },
    Ramping { since: Instant },
}

#[derive(Debug)]
struct Inner {
    state: State,
    consecutive_failures: u32,
}

/// The breaker of one store: closed → open after `failures` consecutive failures, for `open`;
/// then half-open, letting one probe through at a time; a successful probe starts the ramp, a
/// failed one opens again; the ramp ends closed after `ramp`.
#[derive(Debug)]
pub struct Breaker {
    failures: u32,
    open: Duration,
    ramp: Duration,
    inner: Mutex<Inner>,
}

/// Whether a request goes to the store or takes its route's posture.
#[derive(Debug)]
pub enum Pass<'a> {
    Store(Call<'a>),
    /// The store is not asked: apply the route's `on_store_error`.
    Posture,
}

/// A store call the breaker let through; report how it ended. A probe dropped without a report
/// (the request was cancelled) frees the probe slot, so the breaker never stays half-open.
#[derive(Debug)]
pub struct Call<'a> {
    breaker: &'a Breaker,
    probe: bool,
    reported: bool,
}

impl Call<'_> {
    pub fn is_probe(&self) -> bool {
        self.probe
    }

    /// The store answered (a refusal is an answer too).
    pub fn succeeded(mut self, now: Instant) {
        self.reported = true;
        self.breaker.outcome(self.probe, true, now);
    }

    /// The call failed or missed its deadline.
    pub fn failed(mut self, now: Instant) {
        self.reported = true;
        self.breaker.outcome(self.probe, false, now);
    }
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        if self.probe && !self.reported {
            let mut inner = self.breaker.lock();
            if let State::HalfOpen { probing: true } = inner.state {
                inner.state = State::HalfOpen { probing: false };
            }
        }
    }
}

impl Breaker {
    pub fn new(failures: u32, open: Duration, ramp: Duration) -> Breaker {
        Breaker {
            failures: failures.max(1),
            open,
            ramp,
            inner: Mutex::new(Inner {
                state: State::Closed,
                consecutive_failures: 0,
            }),
        }
    }

    pub fn from_spec(spec: &StoreSpec) -> Breaker {
        Breaker::new(spec.breaker_failures, spec.breaker_open, spec.ramp)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The state at `now` (an elapsed open period reads as half-open, an elapsed ramp as closed).
    pub fn state(&self, now: Instant) -> BreakerState {
        match self.lock().state {
            State::Closed => BreakerState::Closed,
            State::Open { until } if now < until => BreakerState::Open,
            State::Open { .. } | State::HalfOpen { .. } => BreakerState::HalfOpen,
            State::Ramping { since } if now.duration_since(since) < self.ramp => {
                BreakerState::Ramping
            }
            State::Ramping { .. } => BreakerState::Closed,
        }
    }

    /// Decides whether a request of a route with posture `on_error` asks the store. `draw` is a
    /// uniform random number in [0, 1): during the ramp, a request goes to the store when `draw`
    /// is below the share elapsed, so tests can be exact.
    ///
    /// A `deny` route goes straight to the store during the ramp: it admitted nothing locally, so
    /// the store's buckets hold no catch-up burst, and refusing would prolong the outage.
    pub fn enter(&self, now: Instant, on_error: &OnStoreError, draw: f64) -> Pass<'_> {
        let mut inner = self.lock();
        let probe = match inner.state {
            State::Closed => false,
            State::Open { until } if now < until => return Pass::Posture,
            State::Open { .. } | State::HalfOpen { probing: false } => {
                inner.state = State::HalfOpen { probing: true };
                true
            }
            State::HalfOpen { probing: true } => return Pass::Posture,
            State::Ramping { since } => {
                let elapsed = now.duration_since(since);
                if elapsed >= self.ramp {
                    inner.state = State::Closed;
                } else if !matches!(on_error, OnStoreError::Deny)
                    && draw >= elapsed.as_secs_f64() / self.ramp.as_secs_f64()
                {
                    return Pass::Posture;
                }
                false
            }
        };
        Pass::Store(Call {
            breaker: self,
            probe,
            reported: false,
        })
    }

    /// Open from `now` for `open`. A period beyond the clock's range (no policy can write one)
    /// half-opens at once rather than panicking: the next request probes.
    fn opened(&self, now: Instant) -> State {
        State::Open {
            until: now.checked_add(self.open).unwrap_or(now),
        }
    }

    fn outcome(&self, probe: bool, ok: bool, now: Instant) {
        let mut inner = self.lock();
        match (inner.state, probe, ok) {
            (State::HalfOpen { .. }, true, true) => {
                inner.consecutive_failures = 0;
                inner.state = if self.ramp.is_zero() {
                    State::Closed
                } else {
                    State::Ramping { since: now }
                };
            }
            (State::HalfOpen { .. }, true, false) => {
                inner.state = self.opened(now);
            }
            (State::Closed | State::Ramping { .. }, false, true) => inner.consecutive_failures = 0,
            (State::Closed | State::Ramping { .. }, false, false) => {
                inner.consecutive_failures = inner.consecutive_failures.saturating_add(1);
                if inner.consecutive_failures >= self.failures {
                    inner.consecutive_failures = 0;
                    inner.state = self.opened(now);
                }
            }
            // Calls let through before the breaker opened end late; the probe alone decides.
            _ => {}
        }
    }
}

/// The local limiter of a `fallback` route: one gcra limiter per key of the route's first
/// rule, with the module's own arithmetic, so a fallback limit means what a store limit means.
/// At most `max_keys` keys; evicting one forgets it, which admits its burst again.
pub struct Fallback {
    rule: Rule,
    keys: Mutex<LruCache<String, Limiter>>,
}

/// The wall clock in microseconds, as the module reads its own (a clock before 1970 reads 0,
/// and the limiter's time floor keeps a backward step from minting tokens).
fn wall_clock_us() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
}

impl Fallback {
    pub fn new(rule: Rule, max_keys: NonZeroUsize) -> Fallback {
        Fallback {
            rule,
            keys: Mutex::new(LruCache::new(max_keys)),
        }
    }

    pub fn rule(&self) -> &Rule {
        &self.rule
    }

    /// Decides `cost` units on `key` now.
    pub fn admit(&self, key: &str, cost: u64) -> Decision {
        self.admit_at(key, cost, wall_clock_us())
    }

    /// Decides `cost` units on `key` at `now_us` (wall-clock microseconds).
    pub fn admit_at(&self, key: &str, cost: u64, now_us: u64) -> Decision {
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        let limiter =
            keys.get_or_insert_mut(key.to_string(), || Limiter::new(Algo::Gcra, self.rule));
        limiter
            .admit(Algo::Gcra, self.rule, cost, now_us, false)
            // The limiter was built with this very algorithm and rule, so the core has no
            // mismatch to report; were it ever to, refusing is the safe answer.
            .unwrap_or_else(|_| Decision::refused(&self.rule))
    }
}
