//! What a limiter enforces: the algorithm, `limit` units per `period`, and the capacity.
//!
//! A `Rule` can only be built through [`Rule::new`], which enforces every documented bound, so
//! the arithmetic downstream never sees a value that could overflow it.

use crate::error::{printable, Error};
use crate::protocol::token;

pub use crate::algo::{Algo, Family};
pub use crate::bounds::{
    MAX_CLOCK_SKEW_TEXT, MAX_CLOCK_SKEW_US, MAX_COUNT, MAX_LOG_LIMIT, MAX_PERIOD_TEXT,
    MAX_PERIOD_US, MAX_SEMAPHORE_CAPACITY,
};

// Defined here rather than in `algo`: it builds an `Error`, and `error` imports `algo`.
impl Algo {
    /// An algorithm `ALGO` may name (every one but the semaphore).
    pub fn parse(bytes: &[u8]) -> Result<Algo, Error> {
        Algo::ALL
            .into_iter()
            .filter(|a| *a != Algo::Semaphore)
            .find(|a| bytes.eq_ignore_ascii_case(a.name().as_bytes()))
            .ok_or_else(|| Error::UnknownAlgo(printable(bytes)))
    }
}

/// `limit` units per `period_us`, with room for `burst` units at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rule {
    limit: u64,
    period_us: u64,
    burst: u64,
}

impl Rule {
    /// Validates a rule for `algo`. `burst` is `None` when the caller gave no `BURST`.
    pub fn new(algo: Algo, limit: u64, period_us: u64, burst: Option<u64>) -> Result<Rule, Error> {
        let max_limit = match algo {
            Algo::Log => MAX_LOG_LIMIT,
            Algo::Semaphore => MAX_SEMAPHORE_CAPACITY,
            _ => MAX_COUNT,
        };
        if !(1..=max_limit).contains(&limit) {
            return Err(Error::OutOfRange {
                arg: "limit",
                min: 1,
                max: max_limit,
            });
        }
        if !(1_000..=MAX_PERIOD_US).contains(&period_us) {
            return Err(Error::DurationRange {
                arg: "period",
                max: MAX_PERIOD_TEXT,
            });
        }
        let burst = match (algo.family(), burst) {
            (Family::Rate, Some(b)) => b,
            (Family::Rate, None) => limit,
            (_, Some(_)) => {
                return Err(Error::OptionNotAllowed {
                    option: token::BURST,
                    algo: algo.name(),
                })
            }
            (_, None) => limit,
        };
        if !(1..=MAX_COUNT).contains(&burst) {
            return Err(Error::OutOfRange {
                arg: token::BURST,
                min: 1,
                max: MAX_COUNT,
            });
        }
        let rule = Rule {
            limit,
            period_us,
            burst,
        };
        // refill_us(burst) > MAX_PERIOD_US without the division: ceil(a / b) > m iff a > m * b.
        if u128::from(burst) * u128::from(period_us) > u128::from(MAX_PERIOD_US) * u128::from(limit)
        {
            return Err(Error::RefillTooLong);
        }
        Ok(rule)
    }

    /// Rebuilds a rule read back from storage, applying the same bounds.
    pub fn restore(algo: Algo, limit: u64, period_us: u64, burst: u64) -> Result<Rule, Error> {
        // Durations are given in whole milliseconds at least.
        if !period_us.is_multiple_of(1000) {
            return Err(Error::BadPayload(
                "period is not a whole number of milliseconds",
            ));
        }
        let given = (algo.family() == Family::Rate).then_some(burst);
        let rule = Rule::new(algo, limit, period_us, given)?;
        if rule.burst != burst {
            return Err(Error::BadPayload("capacity differs from limit"));
        }
        Ok(rule)
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    pub fn period_us(&self) -> u64 {
        self.period_us
    }

    /// The capacity: `BURST` for gcra and bucket, `limit` for the window algorithms.
    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// Microseconds for the steady rate to produce `units` (rounded up).
    pub fn refill_us(&self, units: u64) -> u128 {
        ceil_div(
            u128::from(units) * u128::from(self.period_us),
            u128::from(self.limit),
        )
    }
}

/// Checks `COST` against the capacity: a request above it could never be admitted.
pub fn check_cost(cost: u64, rule: &Rule) -> Result<(), Error> {
    if cost > rule.burst() {
        return Err(Error::CostAboveCapacity {
            cost,
            capacity: rule.burst(),
        });
    }
    Ok(())
}

/// `ceil(a / b)` for `b > 0`; `b == 0` yields 0 rather than a panic.
pub fn ceil_div(a: u128, b: u128) -> u128 {
    // Nearly every operand fits in 64 bits, whose division is a single instruction rather
    // than a call to the 128-bit routine; the quotient is the same.
    if let (Ok(a), Ok(b)) = (u64::try_from(a), u64::try_from(b)) {
        return match b {
            0 => 0,
            _ => u128::from(a.div_ceil(b)),
        };
    }
    match b {
        0 => 0,
        _ => a.div_ceil(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bounds::DAY_US;

    #[test]
    fn burst_defaults_to_limit() {
        let r = Rule::new(Algo::Gcra, 10, 1_000_000, None).unwrap();
        assert_eq!(r.burst(), 10);
    }

    #[test]
    fn burst_is_refused_for_window_algorithms() {
        for algo in [Algo::Window, Algo::Sliding, Algo::Log] {
            let e = Rule::new(algo, 10, 1_000_000, Some(5)).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("ERR BURST is not allowed with ALGO {}", algo.name())
            );
        }
    }

    #[test]
    fn bounds_are_enforced() {
        assert!(Rule::new(Algo::Gcra, 0, 1_000_000, None).is_err());
        assert!(Rule::new(Algo::Gcra, MAX_COUNT + 1, 1_000_000, None).is_err());
        assert!(Rule::new(Algo::Gcra, MAX_COUNT, 1_000_000, None).is_ok());
        assert!(Rule::new(Algo::Gcra, 1, 999, None).is_err());
        assert!(Rule::new(Algo::Gcra, 1, MAX_PERIOD_US + 1, None).is_err());
        assert!(Rule::new(Algo::Log, MAX_LOG_LIMIT + 1, 1_000_000, None).is_err());
        // 1 per 10 days with a burst of 1000 would take 10,000 days to refill.
        let e = Rule::new(Algo::Gcra, 1, 10 * DAY_US, Some(1000)).unwrap_err();
        assert_eq!(e, Error::RefillTooLong);
        // The largest accepted values together stay within the refill bound.
        assert!(Rule::new(Algo::Gcra, MAX_COUNT, MAX_PERIOD_US, Some(MAX_COUNT)).is_ok());
    }

    proptest::proptest! {
        /// The refill bound, checked by multiplication, is the documented one: the time to
        /// refill the burst, rounded up, is at most the largest period.
        #[test]
        fn refill_bound_is_exact(
            limit in 1..=MAX_COUNT,
            period_us in 1_000..=MAX_PERIOD_US,
            burst in 1..=MAX_COUNT,
            scale in 0u32..50,
        ) {
            // Shrink one side at random so that both outcomes occur often.
            let limit = (limit >> scale).max(1);
            let r = Rule::new(Algo::Gcra, limit, period_us, Some(burst));
            let refill = ceil_div(u128::from(burst) * u128::from(period_us), u128::from(limit));
            proptest::prop_assert_eq!(r.is_ok(), refill <= u128::from(MAX_PERIOD_US));
        }
    }

    #[test]
    fn refill_bound_at_its_edge() {
        // 1 per 3650 days with a burst of 1 refills in exactly the largest period.
        assert!(Rule::new(Algo::Gcra, 1, MAX_PERIOD_US, Some(1)).is_ok());
        // 2 per 3650 days, burst 3: 1.5 periods.
        assert_eq!(
            Rule::new(Algo::Gcra, 2, MAX_PERIOD_US, Some(3)),
            Err(Error::RefillTooLong)
        );
        // 3 per 1000 ms, burst such that the refill lands just on, then just past, the bound.
        let on = MAX_PERIOD_US / 1000 * 3;
        assert!(Rule::new(Algo::Gcra, 3, 1000, Some(on)).is_ok());
        assert!(Rule::new(Algo::Gcra, 3, 1000, Some(on + 1)).is_err());
    }

    #[test]
    fn algo_names_round_trip() {
        for a in Algo::ALL {
            if a != Algo::Semaphore {
                assert_eq!(Algo::parse(a.name().to_uppercase().as_bytes()), Ok(a));
            }
            assert_eq!(Algo::from_code(a.code()), Some(a));
        }
        assert!(Algo::parse(b"semaphore").is_err());
        assert!(Algo::parse(b"leaky").is_err());
    }

    #[test]
    fn ceil_div_rounds_up() {
        assert_eq!(ceil_div(7, 2), 4);
        assert_eq!(ceil_div(6, 2), 3);
        assert_eq!(ceil_div(0, 2), 0);
        assert_eq!(ceil_div(5, 0), 0);
    }
}
