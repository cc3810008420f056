//! `bucket`: a token bucket, whose state is the level (in ticks, see `rate`) and the instant it
//! was counted at. It refills at the steady rate up to the capacity and decides exactly as
//! `gcra` does; only the stored form differs.

use crate::limiter::{State, Wide};
use crate::rate;
use crate::rule::Rule;

/// Available capacity at `now_us`, in ticks.
pub fn level(rule: &Rule, updated_us: u64, level: i128, now_us: u64) -> i128 {
    let cap = rate::capacity(rule);
    // A clock that stepped back refills nothing.
    let elapsed = now_us.saturating_sub(updated_us);
    level
        .saturating_add(rate::refill(rule, elapsed, 2 * cap))
        .min(cap)
}

/// The state that holds `level` ticks counted at `now_us`, or at `updated_us` when an earlier
/// count was later (a clock that stepped back must not refill the bucket twice).
pub fn at_level(level: i128, updated_us: u64, now_us: u64) -> State {
    State::Bucket {
        updated_us: updated_us.max(now_us),
        level: Wide::new(level),
    }
}

/// When the refill reaches the capacity: the key is full again.
pub fn full_at_us(rule: &Rule, updated_us: u64, level: i128) -> u64 {
    let missing = rate::capacity(rule) - level;
    updated_us.saturating_add(rate::ticks_to_us(rule, missing))
}

/// Why no command could have left `level` under `rule`: a settlement may owe down to minus the
/// capacity, and nothing fills above it.
pub fn refused(rule: &Rule, level: i128) -> Option<&'static str> {
    let cap = rate::capacity(rule);
    (level > cap || level < -cap).then_some("bucket level is beyond the capacity or the debt floor")
}

#[cfg(test)]
mod tests {
    use crate::limiter::{Limiter, State, Wide};
    use crate::rate;
    use crate::rule::{Algo, Rule};

    #[test]
    fn levels_beyond_the_capacity_or_the_debt_floor_are_refused() {
        let r = Rule::new(Algo::Gcra, 5, 1_000_000, None).unwrap();
        let cap = rate::capacity(&r);
        let over = State::Bucket {
            updated_us: 0,
            level: Wide::new(cap + 1),
        };
        assert!(Limiter::from_parts(r, over).is_err());
        let debt = State::Bucket {
            updated_us: 0,
            level: Wide::new(-cap),
        };
        assert!(Limiter::from_parts(r, debt).is_ok());
    }
}
