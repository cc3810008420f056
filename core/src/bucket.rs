//! `bucket`: a token bucket, whose state is the level (in ticks, see `rate`) and the instant it
//! was counted at. It refills at the steady rate up to the capacity and decides exactly as
//! `gcra` does; only the stored form differs.

use crate::algorithm::{Algorithm, Decide};
use crate::rate::{self, Decision};
use crate::rule::Rule;
use crate::wide::Wide;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    pub updated_us: u64,
    /// The level in ticks as counted at `updated_us`.
    pub level: Wide,
}

impl Bucket {
    /// Available capacity at `now_us`, in ticks.
    pub fn level(&self, rule: &Rule, now_us: u64) -> i128 {
        let cap = rate::capacity(rule);
        // A clock that stepped back refills nothing.
        let elapsed = now_us.saturating_sub(self.updated_us);
        self.level
            .get()
            .saturating_add(rate::refill(rule, elapsed, 2 * cap))
            .min(cap)
    }

    /// The state that holds `level` ticks counted at `now_us`: a bucket counted from another
    /// state (for a bucket's own count, see [`Bucket::recount`]).
    pub fn at_level(_: &Rule, level: i128, now_us: u64) -> Bucket {
        Bucket {
            updated_us: now_us,
            level: Wide::new(level),
        }
    }

    /// This bucket holding `level` ticks counted at `now_us`, or at its own count's instant when
    /// that was later (a clock that stepped back must not refill the bucket twice).
    pub fn recount(&self, level: i128, now_us: u64) -> Bucket {
        Bucket {
            updated_us: self.updated_us.max(now_us),
            level: Wide::new(level),
        }
    }
}

impl Algorithm for Bucket {
    fn fresh(rule: &Rule) -> Bucket {
        Bucket {
            updated_us: 0,
            level: Wide::new(rate::capacity(rule)),
        }
    }

    /// A settlement may owe down to minus the capacity, and nothing fills above it.
    fn refused(&self, rule: &Rule) -> Option<&'static str> {
        let (cap, level) = (rate::capacity(rule), self.level.get());
        (level > cap || level < -cap)
            .then_some("bucket level is beyond the capacity or the debt floor")
    }

    fn time_floor(&self, _: &Rule) -> u64 {
        self.updated_us
    }

    /// When the refill reaches the capacity.
    fn full_at_us(&self, rule: &Rule) -> u64 {
        let missing = rate::capacity(rule) - self.level.get();
        self.updated_us
            .saturating_add(rate::ticks_to_us(rule, missing))
    }
}

impl Decide for Bucket {
    fn decide(&self, rule: &Rule, cost: u64, now_us: u64) -> (Decision, Bucket) {
        let (decision, after) = rate::decide(rule, self.level(rule, now_us), cost);
        (decision, self.recount(after, now_us))
    }

    fn convert(&self, from: &Rule, to: &Rule, now_us: u64) -> Bucket {
        let level = rate::convert(self.level(from, now_us), from, to);
        self.recount(level, now_us)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::Limiter;
    use crate::rule::Algo;
    use crate::state::State;

    #[test]
    fn levels_beyond_the_capacity_or_the_debt_floor_are_refused() {
        let r = Rule::new(Algo::Gcra, 5, 1_000_000, None).unwrap();
        let cap = rate::capacity(&r);
        let over = State::Bucket(Bucket {
            updated_us: 0,
            level: Wide::new(cap + 1),
        });
        assert!(Limiter::from_parts(r, over).is_err());
        let debt = State::Bucket(Bucket {
            updated_us: 0,
            level: Wide::new(-cap),
        });
        assert!(Limiter::from_parts(r, debt).is_ok());
    }
}
