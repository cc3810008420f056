//! The breaker shared by the routes of one store (`clients/SPEC.md`, gateway section 3): open
//! after consecutive failures, one probe at a time, and the ramp back after recovery.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crate::policy::{OnStoreError, StoreSpec};
use crate::time::Instant;

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
    /// Counts openings: a ticket from before the last one reports nothing.
    epoch: u64,
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
#[derive(Debug, PartialEq, Eq)]
pub enum Pass {
    Store(Ticket),
    /// The store is not asked: apply the route's `on_store_error`.
    Posture,
}

/// A store call the breaker let through, to report with [`Breaker::report`]. A probe abandoned
/// without a report (the request was cancelled) must be given back with [`Breaker::abandon`],
/// so the breaker never stays half-open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    probe: bool,
    epoch: u64,
}

impl Ticket {
    pub fn is_probe(&self) -> bool {
        self.probe
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
                epoch: 0,
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
    pub fn enter(&self, now: Instant, on_error: &OnStoreError, draw: f64) -> Pass {
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
        Pass::Store(Ticket {
            probe,
            epoch: inner.epoch,
        })
    }

    /// Open from `now` for `open`. A period beyond the clock's range (no policy can write one)
    /// half-opens at once rather than panicking: the next request probes.
    fn opened(&self, now: Instant) -> State {
        State::Open {
            until: now.checked_add(self.open).unwrap_or(now),
        }
    }

    /// A probe whose request went away before its calls ended frees the probe slot.
    pub fn abandon(&self, ticket: Ticket) {
        if ticket.probe {
            let mut inner = self.lock();
            if let State::HalfOpen { probing: true } = inner.state {
                inner.state = State::HalfOpen { probing: false };
            }
        }
    }

    /// How the calls a ticket let through ended: `ok` when the store answered (a refusal, even
    /// one of the module's errors, is an answer).
    pub fn report(&self, ticket: Ticket, ok: bool, now: Instant) {
        let probe = ticket.probe;
        let mut inner = self.lock();
        // Calls let through before the breaker last opened end late: the probe alone decides
        // (a late failure must not reopen a breaker its probe has just closed).
        if ticket.epoch != inner.epoch {
            return;
        }
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
                inner.epoch = inner.epoch.wrapping_add(1);
            }
            (State::Closed | State::Ramping { .. }, false, true) => inner.consecutive_failures = 0,
            (State::Closed | State::Ramping { .. }, false, false) => {
                inner.consecutive_failures = inner.consecutive_failures.saturating_add(1);
                if inner.consecutive_failures >= self.failures {
                    inner.consecutive_failures = 0;
                    inner.state = self.opened(now);
                    inner.epoch = inner.epoch.wrapping_add(1);
                }
            }
            // Calls let through before the breaker opened end late; the probe alone decides.
            _ => {}
        }
    }
}
