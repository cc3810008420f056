//! The arithmetic shared by `gcra` and `bucket`.
//!
//! Both algorithms reduce to one quantity, the *level*: how much capacity is available now,
//! counted in ticks. One token is `period_us` ticks and the steady rate adds `limit` ticks per
//! microsecond, so every quantity is an exact integer for any `limit` and `period`, and long runs
//! never drift. `gcra` stores the level as a theoretical arrival time, `bucket` as a token count
//! with the time it was counted; they convert to the same level and take the same decision.

use crate::rule::{ceil_div, Rule};

pub use crate::decision::Decision;

/// One token in ticks.
pub fn token(rule: &Rule) -> i128 {
    i128::from(rule.period_us())
}

/// The full capacity in ticks.
pub fn capacity(rule: &Rule) -> i128 {
    i128::from(rule.burst()) * token(rule)
}

/// Ticks the steady rate adds in `elapsed_us`, capped at `cap` so huge gaps cannot overflow.
pub fn refill(rule: &Rule, elapsed_us: u64, cap: i128) -> i128 {
    i128::from(elapsed_us)
        .saturating_mul(i128::from(rule.limit()))
        .min(cap)
}

/// Microseconds for the steady rate to produce `ticks` (rounded up; 0 for `ticks <= 0`).
pub fn ticks_to_us(rule: &Rule, ticks: i128) -> u64 {
    let us = ceil_div(u128::try_from(ticks).unwrap_or(0), u128::from(rule.limit()));
    u64::try_from(us).unwrap_or(u64::MAX)
}

/// The whole tokens in `level` ticks (0 when negative), in 64-bit arithmetic when it fits.
fn whole_tokens(level: i128, rule: &Rule) -> u64 {
    let Ok(level) = u128::try_from(level) else {
        return 0;
    };
    let token = rule.period_us();
    match u64::try_from(level) {
        Ok(l) => l.checked_div(token).unwrap_or(0),
        Err(_) => u64::try_from(level / u128::from(token).max(1)).unwrap_or(0),
    }
}

/// Decides a request of `cost` units against `level` ticks. Returns the decision and the level
/// after it (unchanged when refused).
pub fn decide(rule: &Rule, level: i128, cost: u64) -> (Decision, i128) {
    let cap = capacity(rule);
    let need = i128::from(cost) * token(rule);
    let allowed = level >= need;
    let after = if allowed { level - need } else { level };
    let retry_after_us = if allowed {
        0
    } else {
        ticks_to_us(rule, need - level)
    };
    let decision = Decision {
        allowed,
        remaining: whole_tokens(after, rule),
        retry_after_us,
        reset_after_us: ticks_to_us(rule, cap - after),
        capacity: rule.burst(),
    };
    (decision, after)
}

/// Re-expresses a level measured under `from` in the ticks of `to`, keeping the number of
/// tokens (rounded down, so a change of parameters never mints capacity) and clamping to the new
/// capacity and debt floor.
pub fn convert(level: i128, from: &Rule, to: &Rule) -> i128 {
    if from.period_us() == to.period_us() {
        return level.clamp(-capacity(to), capacity(to));
    }
    let old_token = token(from);
    let whole = level.div_euclid(old_token);
    let part = level.rem_euclid(old_token);
    let converted = whole
        .saturating_mul(token(to))
        .saturating_add(part * token(to) / old_token);
    converted.clamp(-capacity(to), capacity(to))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::Limiter;
    use crate::rule::Algo;

    fn read_bucket() -> Rule {
        Rule::new(Algo::Bucket, 2, 1_000_000, Some(20)).unwrap()
    }

    #[test]
    fn read_bucket_21st_waits_500ms() {
        let r = read_bucket();
        let mut level = capacity(&r);
        for i in 0..20 {
            let (d, after) = decide(&r, level, 1);
            assert!(d.allowed, "call {i}");
            assert_eq!(d.remaining, 19 - i);
            level = after;
        }
        let (d, after) = decide(&r, level, 1);
        assert!(!d.allowed);
        assert_eq!(d.retry_after_ms(), 500);
        assert_eq!(d.reset_after_ms(), 10_000);
        assert_eq!(after, level);
    }

    #[test]
    fn read_bucket_cost_10_with_3_left_waits_3500ms() {
        let r = read_bucket();
        let (d, _) = decide(&r, 3 * token(&r), 10);
        assert!(!d.allowed);
        assert_eq!(d.retry_after_ms(), 3500);
        assert_eq!(d.remaining, 3);
    }

    #[test]
    fn conversion_keeps_tokens_and_never_mints() {
        let from = Rule::new(Algo::Gcra, 10, 1_000_000, None).unwrap();
        let to = Rule::new(Algo::Gcra, 10, 60_000_000, Some(100)).unwrap();
        let lvl = 7 * token(&from) + token(&from) / 2;
        assert_eq!(convert(lvl, &from, &to), 7 * token(&to) + token(&to) / 2);
        // Clamped to the new capacity.
        let small = Rule::new(Algo::Gcra, 1, 1_000, Some(3)).unwrap();
        assert_eq!(convert(capacity(&to), &to, &small), capacity(&small));
        assert_eq!(convert(-capacity(&to), &to, &small), -capacity(&small));
    }

    const T0: u64 = 1_764_000_000_000_000;

    fn rule(limit: u64, period_us: u64, burst: Option<u64>) -> Rule {
        Rule::new(Algo::Gcra, limit, period_us, burst).unwrap()
    }

    #[test]
    fn read_bucket_worked_example_for_both_algorithms() {
        for algo in [Algo::Gcra, Algo::Bucket] {
            let r = rule(2, 1_000_000, Some(20));
            let mut l = Limiter::new(algo, r);
            for _ in 0..20 {
                assert!(l.admit(algo, r, 1, T0, false).unwrap().allowed);
            }
            let d = l.admit(algo, r, 1, T0, false).unwrap();
            assert!(!d.allowed);
            assert_eq!(d.retry_after_ms(), 500);
            assert_eq!(d.reset_after_ms(), 10_000);
            // 1.5 s later three tokens are back; an export of cost 10 waits 3.5 s.
            let d = l.admit(algo, r, 10, T0 + 1_500_000, false).unwrap();
            assert!(!d.allowed);
            assert_eq!(d.remaining, 3);
            assert_eq!(d.retry_after_ms(), 3500);
            // Waiting exactly retry_after_ms is enough.
            let d = l.admit(algo, r, 10, T0 + 5_000_000, false).unwrap();
            assert!(d.allowed, "{algo:?}");
            assert_eq!(d.remaining, 0);
            assert_eq!(l.full_at_us(), T0 + 15_000_000);
        }
    }

    #[test]
    fn dry_run_changes_nothing() {
        let r = rule(5, 1_000_000, None);
        for algo in [Algo::Gcra, Algo::Bucket] {
            let mut l = Limiter::new(algo, r);
            let before = l.clone();
            let d = l.admit(algo, r, 5, T0, true).unwrap();
            assert!(d.allowed);
            assert_eq!(d.remaining, 0);
            assert_eq!(l, before);
        }
    }

    #[test]
    fn a_clock_that_steps_back_mints_nothing() {
        let r = rule(1, 1_000_000, Some(1));
        for algo in [Algo::Gcra, Algo::Bucket] {
            let mut l = Limiter::new(algo, r);
            assert!(l.admit(algo, r, 1, T0, false).unwrap().allowed);
            assert!(!l.admit(algo, r, 1, T0 - 10_000_000, false).unwrap().allowed);
            assert!(!l.admit(algo, r, 1, T0 + 999_999, false).unwrap().allowed);
            assert!(l.admit(algo, r, 1, T0 + 1_000_000, false).unwrap().allowed);
        }
    }

    #[test]
    fn thirds_do_not_drift_over_a_long_run() {
        // 3 per second: the emission interval is 333,333.33 µs, which no integer µs can hold.
        // A burst of 3 keeps the level below the capacity, so no refill is clipped.
        let r = rule(3, 1_000_000, Some(3));
        for algo in [Algo::Gcra, Algo::Bucket] {
            let mut l = Limiter::new(algo, r);
            let mut admitted = 0u64;
            let mut now = T0;
            // Poll every 1 ms for 1000 s: exactly 3 per second plus the initial burst.
            while now <= T0 + 1_000_000_000 {
                if l.admit(algo, r, 1, now, false).unwrap().allowed {
                    admitted += 1;
                }
                now += 1_000;
            }
            assert_eq!(admitted, 3003, "{algo:?}");
        }
    }

    #[test]
    fn gcra_and_bucket_convert_keeping_the_level() {
        let r = rule(5, 1_000_000, None);
        let mut l = Limiter::new(Algo::Gcra, r);
        l.admit(Algo::Gcra, r, 1, T0, false).unwrap();
        let d = l.admit(Algo::Bucket, r, 1, T0, false).unwrap();
        assert_eq!(d.remaining, 3);
        assert_eq!(l.algo(), Algo::Bucket);
        let d = l.admit(Algo::Gcra, r, 1, T0 + 200_000, false).unwrap();
        assert_eq!(d.remaining, 3);
        assert_eq!(l.algo(), Algo::Gcra);
    }
}
