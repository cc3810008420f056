//! The local limiter of a `fallback` route: one gcra limiter per key of the route's first rule,
//! with the module's own arithmetic (the core's [`Limiter`]), so a fallback limit means what a
//! store limit means. Bounded: evicting a key forgets it, which admits its burst again.

use std::num::NonZeroUsize;
use std::sync::Mutex;

use rl_core::limiter::Limiter;
use rl_core::rate::Decision;
use rl_core::rule::{Algo, Rule};

use crate::table::{Table, TableUse};
use crate::time::Instant;

pub struct Fallback {
    rule: Rule,
    keys: Mutex<Table<Limiter>>,
}

impl Fallback {
    /// At most `max_keys` limiters and `max_bytes`, the least recently used forgotten first.
    pub fn new(rule: Rule, max_keys: NonZeroUsize, max_bytes: usize) -> Fallback {
        Fallback {
            rule,
            keys: Mutex::new(Table::new(max_keys, max_bytes)),
        }
    }

    pub fn rule(&self) -> &Rule {
        &self.rule
    }

    /// Decides `cost` units on `key` at `now` (read as the module reads its clock).
    pub fn admit(&self, key: &str, cost: u64, now: Instant) -> Decision {
        self.decide(key, cost, true, now)
    }

    /// Decides `cost` units on `key` at `now`, spending them only when `spend` and admitted.
    pub fn decide(&self, key: &str, cost: u64, spend: bool, now: Instant) -> Decision {
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        let limiter = keys.get_or_insert_mut(key, || Limiter::new(Algo::Gcra, self.rule));
        limiter
            .admit(Algo::Gcra, self.rule, cost, now.as_micros(), !spend)
            // The limiter was built with this very algorithm and rule, so the core has no
            // mismatch to report; were it ever to, refusing is the safe answer.
            .unwrap_or_else(|_| Decision::refused(&self.rule))
    }

    /// Its limiters and their bytes (at most its budget).
    pub fn usage(&self) -> TableUse {
        self.keys.lock().unwrap_or_else(|p| p.into_inner()).usage()
    }
}
