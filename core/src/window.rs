//! `window`: a fixed window, counting the units admitted in the current window.
//!
//! Windows are `period` long and aligned to multiples of `period` since the Unix epoch, so every
//! server and replica agrees on where a window starts (`sliding` shares the alignment). The state
//! names the window it counted in; a state whose window has passed reads as zero, which is why a
//! key can expire when its window ends.

use crate::algorithm::{Algorithm, Decide};
use crate::decision::Decision;
use crate::rule::Rule;

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
}

impl Algorithm for Fixed {
    fn fresh(_: &Rule) -> Fixed {
        Fixed::default()
    }

    /// Why no command could have written this state under `rule`: an admission leaves at most
    /// `limit` in the window, under the rule it stores.
    fn refused(&self, rule: &Rule) -> Option<&'static str> {
        if self.start_us != window_start(self.start_us, rule.period_us()) {
            Some("window start is not aligned to the period")
        } else if self.count > rule.limit() {
            Some("window count is above the limit")
        } else {
            None
        }
    }

    fn time_floor(&self, _: &Rule) -> u64 {
        self.start_us
    }

    /// When the window ends.
    fn full_at_us(&self, rule: &Rule) -> u64 {
        self.start_us.saturating_add(rule.period_us())
    }
}

impl Decide for Fixed {
    fn decide(&self, rule: &Rule, cost: u64, now_us: u64) -> (Decision, Fixed) {
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
            capacity: rule.limit(),
        };
        (
            decision,
            Fixed {
                start_us: start,
                count: after,
            },
        )
    }

    /// Carries the count of a window that has not ended into the window of `to` that contains
    /// `now_us` (a change of period never forgets spending).
    fn convert(&self, from: &Rule, to: &Rule, now_us: u64) -> Fixed {
        let live = now_us < self.start_us.saturating_add(from.period_us());
        Fixed {
            start_us: window_start(now_us.max(self.start_us), to.period_us()),
            count: if live { self.count } else { 0 },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::limiter::{Limiter, State};
    use crate::rule::{Algo, MAX_CLOCK_SKEW_US};

    const S: u64 = 1_000_000;
    /// An epoch-aligned instant: a multiple of 10 s.
    const T0: u64 = 1_764_000_000 * S;

    fn anonymous_ip_window() -> Rule {
        Rule::new(Algo::Window, 20, 10 * S, None).unwrap()
    }

    #[test]
    fn window_boundary_admits_twice_the_limit() {
        let r = anonymous_ip_window();
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
    fn windows_never_go_back_in_time() {
        let r = anonymous_ip_window();
        let (_, w) = Fixed::default().decide(&r, 20, T0 + 15 * S);
        let (d, _) = w.decide(&r, 1, T0 + 5 * S);
        assert!(!d.allowed, "an older window must not reopen");
    }

    #[test]
    fn a_window_ahead_of_a_clock_that_stepped_back_counts_the_wait_from_the_real_clock() {
        let r = Rule::new(Algo::Window, 1, S, None).unwrap();
        let mut l = Limiter::new(Algo::Window, r);
        assert!(
            l.admit(Algo::Window, r, 1, T0 + 5 * S, false)
                .unwrap()
                .allowed
        );
        // The clock steps back 5 s: the key's window still ends at T0 + 6 s.
        let d = l.admit(Algo::Window, r, 1, T0, false).unwrap();
        assert!(!d.allowed);
        assert_eq!((d.retry_after_ms(), d.reset_after_ms()), (6000, 6000));
        assert!(
            !l.admit(Algo::Window, r, 1, T0 + 5_999_999, true)
                .unwrap()
                .allowed
        );
        assert!(
            l.admit(Algo::Window, r, 1, T0 + 6 * S, true)
                .unwrap()
                .allowed
        );
    }

    #[test]
    fn states_no_command_could_write_are_refused_naming_the_field() {
        let w = Rule::new(Algo::Window, 10, S, None).unwrap();
        let e = Limiter::from_parts(
            w,
            State::Window(Fixed {
                start_us: T0,
                count: 11,
            }),
        );
        assert_eq!(e, Err(Error::BadPayload("window count is above the limit")));
        // Times: fine within the skew, refused beyond it.
        let ahead = |start_us| Limiter::from_parts(w, State::Window(Fixed { start_us, count: 1 }));
        assert!(ahead(T0 + MAX_CLOCK_SKEW_US)
            .unwrap()
            .check_times(T0)
            .is_ok());
        assert_eq!(
            ahead(T0 + MAX_CLOCK_SKEW_US + S).unwrap().check_times(T0),
            Err(Error::BadPayload(
                "state time is ahead of the server's clock"
            ))
        );
    }
}
