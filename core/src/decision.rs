//! [`Decision`], the reply every algorithm gives to one admission request.
//!
//! Below the algorithms (it needs only `rule`), so `window`, `sliding` and `log` reply it without
//! importing the tick arithmetic of `rate`, which re-exports it (`rate::Decision`).

use crate::rule::Rule;

/// The reply to one admission request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    /// Units that could still be admitted at once after this decision.
    pub remaining: u64,
    /// 0 when allowed; otherwise how long until this same request would be admitted (µs).
    pub retry_after_us: u64,
    /// How long until the key is back to full, and expires (µs).
    pub reset_after_us: u64,
    /// The burst size: the most units admitted at once from a full key (for window, sliding
    /// and log, the limit; for a semaphore, the concurrency).
    pub capacity: u64,
}

impl Decision {
    /// A refusal with nothing known: only the capacity of `rule`.
    pub fn refused(rule: &Rule) -> Decision {
        Decision {
            allowed: false,
            remaining: 0,
            retry_after_us: 0,
            reset_after_us: 0,
            capacity: rule.burst(),
        }
    }

    /// `retry_after` in milliseconds, rounded up: waiting this long is always enough.
    pub fn retry_after_ms(&self) -> u64 {
        self.retry_after_us.div_ceil(1000)
    }

    /// `reset_after` in milliseconds, rounded up.
    pub fn reset_after_ms(&self) -> u64 {
        self.reset_after_us.div_ceil(1000)
    }
}
