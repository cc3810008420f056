//! The engine's clock: an instant is a count of microseconds the driver gives with every call
//! (from a monotonic clock in production, from a script in tests), so no decision depends on
//! when the code happens to run.

use std::ops::{Add, AddAssign};
use std::time::Duration;

/// An instant, in microseconds since an origin the driver chooses (its process start, the Unix
/// epoch, zero in a scenario). Only differences between instants mean anything, except for the
/// local fallback limiters, which read it as the module reads its wall clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(u64);

impl Instant {
    pub const fn from_micros(us: u64) -> Instant {
        Instant(us)
    }

    pub const fn as_micros(self) -> u64 {
        self.0
    }

    /// `None` past the clock's range, which no policy duration reaches from a real clock.
    pub fn checked_add(self, d: Duration) -> Option<Instant> {
        let us = u64::try_from(d.as_micros()).ok()?;
        self.0.checked_add(us).map(Instant)
    }

    /// The instant `d` later, or the end of the clock's range.
    pub fn saturating_add(self, d: Duration) -> Instant {
        self.checked_add(d).unwrap_or(Instant(u64::MAX))
    }

    /// How long after `earlier` this is; zero when it is not after.
    pub fn duration_since(self, earlier: Instant) -> Duration {
        Duration::from_micros(self.0.saturating_sub(earlier.0))
    }
}

/// Milliseconds of a duration, saturated (no policy duration comes near the limit).
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Add<Duration> for Instant {
    type Output = Instant;

    /// Saturates at the end of the clock's range.
    fn add(self, d: Duration) -> Instant {
        self.saturating_add(d)
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = self.saturating_add(d);
    }
}
