//! `window` (fixed window) and `sliding` (weighted two-window estimate).
//!
//! Windows are `period` long and aligned to multiples of `period` since the Unix epoch, so every
//! server and replica agrees on where a window starts. Both states name the window they counted
//! in; a state whose window has passed reads as zero, which is why a key can expire when its
//! window (for `sliding`, the window after it) ends.

use super::rate::Decision;
use super::rule::Rule;

/// Start of the window that contains `now_us`.
pub fn window_start(now_us: u64, period_us: u64) -> u64 {
    now_us - now_us % period_us.max(1)
}

/// A fixed window: `count` units admitted in the window starting at `start_us`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fixed {
    pub start_us: u64,
    pub count: u64,
}

impl Fixed {
    /// The count in the window containing `now_us` (0 once the stored window has ended).
    fn current(&self, rule: &Rule, now_us: u64) -> (u64, u64) {
        let start = window_start(now_us, rule.period_us());
        let count = if self.start_us == start {
            self.count
        } else {
            0
        };
        (start, count)
    }

    pub fn decide(&self, rule: &Rule, cost: u64, now_us: u64) -> (Decision, Fixed) {
        // A clock that stepped back stays in the newest window seen.
        let now_us = now_us.max(self.start_us);
        let (start, count) = self.current(rule, now_us);
        let allowed = count.saturating_add(cost) <= rule.limit();
        let after = if allowed { count + cost } else { count };
        let end = start.saturating_add(rule.period_us());
        let to_end = end - now_us;
        let decision = Decision {
            allowed,
            remaining: rule.limit().saturating_sub(after),
            retry_after_us: if allowed { 0 } else { to_end },
            reset_after_us: if after == 0 { 0 } else { to_end },
            limit: rule.limit(),
        };
        (
            decision,
            Fixed {
                start_us: start,
                count: after,
            },
        )
    }

    pub fn full_at_us(&self, rule: &Rule) -> u64 {
        self.start_us.saturating_add(rule.period_us())
    }

    /// Carries the count of a window that has not ended into the window of `to` that contains
    /// `now_us` (a change of period never forgets spending).
    pub fn convert(&self, from: &Rule, to: &Rule, now_us: u64) -> Fixed {
        let live = now_us < self.start_us.saturating_add(from.period_us());
        Fixed {
            start_us: window_start(now_us.max(self.start_us), to.period_us()),
            count: if live { self.count } else { 0 },
        }
    }
}

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

    pub fn decide(&self, rule: &Rule, cost: u64, now_us: u64) -> (Decision, Sliding) {
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
            limit: rule.limit(),
        };
        (decision, after)
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

    /// When both windows have slid out: the estimate is 0 and the key equals an absent one.
    pub fn full_at_us(&self, rule: &Rule) -> u64 {
        let period = rule.period_us();
        match (self.previous, self.current) {
            (_, c) if c > 0 => self.start_us.saturating_add(2 * period),
            (p, _) if p > 0 => self.start_us.saturating_add(period),
            _ => self.start_us,
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

    /// Re-aligns to a new period: counts of windows that have not slid out carry over.
    pub fn convert(&self, from: &Rule, to: &Rule, now_us: u64) -> Sliding {
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
    use crate::rule::Algo;

    const S: u64 = 1_000_000;
    /// An epoch-aligned instant: a multiple of 10 s.
    const T0: u64 = 1_764_000_000 * S;

    fn p_anon() -> Rule {
        Rule::new(Algo::Window, 20, 10 * S, None).unwrap()
    }

    #[test]
    fn p_anon_boundary_doubling_is_admitted() {
        let r = p_anon();
        let mut w = Fixed::default();
        for _ in 0..20 {
            let (d, next) = w.decide(&r, 1, T0 + 9_900_000);
            assert!(d.allowed);
            w = next;
        }
        let (d, _) = w.decide(&r, 1, T0 + 9_900_000);
        assert!(!d.allowed);
        assert_eq!(d.retry_after_ms(), 100);
        for i in 0..20 {
            let (d, next) = w.decide(&r, 1, T0 + 10_100_000);
            assert!(d.allowed, "second burst, call {i}");
            assert_eq!(d.reset_after_ms(), 9_900);
            w = next;
        }
        assert_eq!(w.full_at_us(&r), T0 + 20 * S);
    }

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
    fn windows_never_go_back_in_time() {
        let r = p_anon();
        let (_, w) = Fixed::default().decide(&r, 20, T0 + 15 * S);
        let (d, _) = w.decide(&r, 1, T0 + 5 * S);
        assert!(!d.allowed, "an older window must not reopen");
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
}
