//! Counters behind the `INFO rl` section.
//!
//! Atomics because values can be freed on a lazy-free thread; relaxed ordering because these are
//! statistics, read without any other memory depending on them.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

use crate::core::rule::Algo;

/// Calls, admissions and refusals of one command.
pub struct CommandStats {
    pub name: &'static str,
    calls: AtomicU64,
    admitted: AtomicU64,
    refused: AtomicU64,
}

impl CommandStats {
    pub const fn new(name: &'static str) -> Self {
        CommandStats {
            name,
            calls: AtomicU64::new(0),
            admitted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// Counts one call: a decision (admitted or refused), or an error for `None`.
    pub fn count(&self, allowed: Option<bool>) {
        self.calls.fetch_add(1, Relaxed);
        match allowed {
            Some(true) => self.admitted.fetch_add(1, Relaxed),
            Some(false) => self.refused.fetch_add(1, Relaxed),
            None => 0,
        };
    }

    /// Counts one call that produced `result`.
    pub fn record<E>(&self, result: &Result<crate::core::rate::Decision, E>) {
        self.count(result.as_ref().ok().map(|d| d.allowed));
    }

    pub fn snapshot(&self) -> [(&'static str, u64); 3] {
        [
            ("calls", self.calls.load(Relaxed)),
            ("admitted", self.admitted.load(Relaxed)),
            ("refused", self.refused.load(Relaxed)),
        ]
    }
}

// For ACQUIRE, RELEASE and RENEW "admitted" counts slots taken, released or renewed; for
// SETTLE, ids found; for GRANT, grants of at least one unit. The command table says which
// command counts into which, in the order `INFO rl` shows them.
pub static ADMIT: CommandStats = CommandStats::new("admit");
pub static MULTI: CommandStats = CommandStats::new("multi");
pub static THROTTLE: CommandStats = CommandStats::new("throttle");
pub static GRANT: CommandStats = CommandStats::new("grant");
pub static ACQUIRE: CommandStats = CommandStats::new("acquire");
pub static RELEASE: CommandStats = CommandStats::new("release");
pub static RENEW: CommandStats = CommandStats::new("renew");
pub static SETTLE: CommandStats = CommandStats::new("settle");

/// Live keys per algorithm, indexed by `Algo::code`.
static KEYS: [AtomicI64; 6] = [
    AtomicI64::new(0),
    AtomicI64::new(0),
    AtomicI64::new(0),
    AtomicI64::new(0),
    AtomicI64::new(0),
    AtomicI64::new(0),
];

fn keys(algo: Algo) -> Option<&'static AtomicI64> {
    KEYS.get(usize::from(algo.code()))
}

pub fn key_created(algo: Algo) {
    if let Some(k) = keys(algo) {
        k.fetch_add(1, Relaxed);
    }
}

pub fn key_freed(algo: Algo) {
    if let Some(k) = keys(algo) {
        k.fetch_sub(1, Relaxed);
    }
}

pub fn key_count(algo: Algo) -> i64 {
    keys(algo).map_or(0, |k| k.load(Relaxed))
}
