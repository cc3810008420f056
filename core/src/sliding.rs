//! `sliding`: the weighted two-window estimate, `previous × (1 − elapsed/period) + current`.
//!
//! Windows are aligned as for `window`. The state names the window it counted in and carries the
//! count of the one before; once both have slid out it reads as zero, which is why a key can
//! expire when the window after its own ends.

use crate::algorithm::{Algorithm, Decide};
use crate::bounds::MAX_COUNT;
use crate::decision::Decision;
use crate::rule::Rule;
use crate::window::{window_start, Fixed};

/// The sliding estimate: `previous` units in the window before `start_us`, `current` in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sliding {
    pub start_us: u64,
    pub previous: u64,
    pub current: u64,
}

impl Sliding {
    /// The counts as seen from the window containing `now_us`.
    pub fn rolled(&self, rule: &Rule, now_us: u64) -> Sliding {
        let period = rule.period_us();
        let start = window_start(now_us, period);
        let (previous, current) = if self.start_us == start {
            (self.previous, self.current)
        } else if self.start_us.saturating_add(period) == start {
            (self.current, 0)
        } else {
            (0, 0)
        };
        Sliding {
            start_us: start,
            previous,
            current,
        }
    }

    /// `previous × unelapsed + current × period`, compared with `limit × period`: the usual
    /// estimate `previous × (1 − elapsed/period) + current` multiplied through by `period`.
    fn weighted(&self, rule: &Rule, elapsed: u64, current: u64) -> u128 {
        let period = u128::from(rule.period_us());
        u128::from(self.previous) * (period - u128::from(elapsed)) + u128::from(current) * period
    }

    /// The first instant a request of `cost` is admitted, with nothing else spent meanwhile.
    fn admit_at(&self, rule: &Rule, cost: u64) -> u64 {
        let period = u128::from(rule.period_us());
        // Smallest elapsed e with prev × (P − e) ≤ room × P, i.e. e ≥ P − room × P / prev.
        let earliest = |prev: u64, room: u64| -> u64 {
            if prev == 0 {
                return 0;
            }
            let keep = u128::from(room) * period / u128::from(prev);
            u64::try_from(period.saturating_sub(keep)).unwrap_or(0)
        };
        let limit = rule.limit();
        match limit.checked_sub(self.current.saturating_add(cost)) {
            // Room in this window once enough of the previous one has slid out.
            Some(room) => self.start_us.saturating_add(earliest(self.previous, room)),
            // Only in the next window, where the current count becomes the previous one.
            None => {
                let next = self.start_us.saturating_add(rule.period_us());
                next.saturating_add(earliest(self.current, limit - cost.min(limit)))
            }
        }
    }

    pub fn from_fixed(f: Fixed) -> Sliding {
        Sliding {
            start_us: f.start_us,
            previous: 0,
            current: f.count,
        }
    }

    pub fn to_fixed(self) -> Fixed {
        Fixed {
            start_us: self.start_us,
            count: self.current,
        }
    }
}

impl Algorithm for Sliding {
    fn fresh(_: &Rule) -> Sliding {
        Sliding::default()
    }

    /// Why no command could have written this state under `rule`.
    fn refused(&self, rule: &Rule) -> Option<&'static str> {
        if self.start_us != window_start(self.start_us, rule.period_us()) {
            Some("sliding window start is not aligned to the period")
        } else if self.current > rule.limit() {
            Some("sliding current count is above the limit")
        } else if self.previous > MAX_COUNT {
            // The previous window was counted under an earlier rule: any limit there was.
            Some("sliding previous count is above the largest limit")
        } else {
            None
        }
    }

    fn time_floor(&self, _: &Rule) -> u64 {
        self.start_us
    }

    /// When both windows have slid out: the estimate is 0 and the key equals an absent one.
    fn full_at_us(&self, rule: &Rule) -> u64 {
        let period = rule.period_us();
        match (self.previous, self.current) {
            (_, c) if c > 0 => self.start_us.saturating_add(2 * period),
            (p, _) if p > 0 => self.start_us.saturating_add(period),
            _ => self.start_us,
        }
    }
}

impl Decide for Sliding {
    fn decide(&self, rule: &Rule, cost: u64, now_us: u64) -> (Decision, Sliding) {
        let now_us = now_us.max(self.start_us);
        let s = self.rolled(rule, now_us);
        let period = rule.period_us();
        let elapsed = now_us - s.start_us;
        let budget = u128::from(rule.limit()) * u128::from(period);
        let allowed = s.weighted(rule, elapsed, s.current.saturating_add(cost)) <= budget;
        let after = Sliding {
            current: if allowed { s.current + cost } else { s.current },
            ..s
        };
        let spare = budget.saturating_sub(after.weighted(rule, elapsed, after.current));
        let decision = Decision {
            allowed,
            remaining: u64::try_from(spare / u128::from(period)).unwrap_or(u64::MAX),
            retry_after_us: if allowed {
                0
            } else {
                s.admit_at(rule, cost).saturating_sub(now_us)
            },
            reset_after_us: after.full_at_us(rule).saturating_sub(now_us),
            capacity: rule.limit(),
        };
        (decision, after)
    }

    /// Re-aligns to a new period: counts of windows that have not slid out carry over.
    fn convert(&self, from: &Rule, to: &Rule, now_us: u64) -> Sliding {
        let s = self.rolled(from, now_us.max(self.start_us));
        Sliding {
            start_us: window_start(now_us.max(self.start_us), to.period_us()),
            ..s
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::limiter::{Limiter, State};
    use crate::rule::Algo;

    const S: u64 = 1_000_000;
    /// An epoch-aligned instant: a multiple of 10 s.
    const T0: u64 = 1_764_000_000 * S;

    #[test]
    fn sliding_estimate_18_5_admits_one_more() {
        let r = Rule::new(Algo::Sliding, 20, 10 * S, None).unwrap();
        let s = Sliding {
            start_us: T0,
            previous: 18,
            current: 5,
        };
        let now = T0 + 2_500_000;
        let (d, after) = s.decide(&r, 1, now);
        assert!(d.allowed, "18 × 0.75 + 5 + 1 = 19.5 ≤ 20");
        assert_eq!(after.current, 6);
        assert_eq!(d.remaining, 0, "19.5 leaves half a unit");
        let (d, _) = after.decide(&r, 1, now);
        assert!(!d.allowed, "20.5 > 20");
        // 18 × (1 − e/10) + 7 ≤ 20 needs e ≥ 2.777… s: 277.8 ms from now, rounded up.
        assert_eq!(d.retry_after_ms(), 278);
    }

    #[test]
    fn sliding_retry_after_is_exact_and_sufficient() {
        let r = Rule::new(Algo::Sliding, 5, S, None).unwrap();
        let mut s = Sliding::default();
        let mut now = T0 + 300_000;
        for _ in 0..200 {
            let (d, next) = s.decide(&r, 2, now);
            if d.allowed {
                s = next;
                now += 37_000;
            } else {
                let later = now + d.retry_after_ms() * 1000;
                assert!(s.decide(&r, 2, later).0.allowed);
                if d.retry_after_ms() > 1 {
                    let earlier = later - 1000;
                    assert!(
                        !s.decide(&r, 2, earlier).0.allowed,
                        "retry was not the earliest"
                    );
                }
                now = later;
            }
        }
    }

    #[test]
    fn sliding_key_is_equivalent_to_absent_after_two_windows() {
        let r = Rule::new(Algo::Sliding, 3, S, None).unwrap();
        let (_, s) = Sliding::default().decide(&r, 3, T0 + 500_000);
        assert_eq!(s.full_at_us(&r), T0 + 2 * S);
        let (d, _) = s.decide(&r, 3, T0 + 2 * S);
        assert_eq!(d.remaining, 0);
        assert!(d.allowed);
    }

    #[test]
    fn a_previous_count_above_any_limit_is_refused() {
        let s = Rule::new(Algo::Sliding, 10, S, None).unwrap();
        let huge = Sliding {
            start_us: T0,
            previous: u64::MAX,
            current: 1,
        };
        let e = Limiter::from_parts(s, State::Sliding(huge));
        assert_eq!(
            e,
            Err(Error::BadPayload(
                "sliding previous count is above the largest limit"
            ))
        );
    }
}
