//! `gcra`: the generic cell rate algorithm, whose state is one number, the theoretical arrival
//! time (TAT) of the next conforming request.
//!
//! The TAT is kept in ticks (see `rate`): microseconds times `limit`, so one emission interval is
//! exactly `period_us` and no rate drifts. Zero is a fresh key. The level a decision needs is the
//! capacity minus how far the TAT is ahead of now.

use crate::algorithm::{Algorithm, Decide};
use crate::rate::{self, Decision};
use crate::rule::Rule;
use crate::wide::Wide;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Gcra {
    /// Theoretical arrival time of the next conforming request, in microseconds times `limit`
    /// (so one emission interval is exactly `period_us`). Zero for a fresh key.
    pub tat: Wide,
}

impl Gcra {
    /// Available capacity at `now_us`, in ticks.
    pub fn level(&self, rule: &Rule, now_us: u64) -> i128 {
        let now = i128::from(now_us) * i128::from(rule.limit());
        rate::capacity(rule) - (self.tat.get() - now).max(0)
    }

    /// The state that holds `level` ticks at `now_us`.
    pub fn at_level(rule: &Rule, level: i128, now_us: u64) -> Gcra {
        let now = i128::from(now_us) * i128::from(rule.limit());
        Gcra {
            tat: Wide::new(now + rate::capacity(rule) - level),
        }
    }
}

impl Algorithm for Gcra {
    fn fresh(_: &Rule) -> Gcra {
        Gcra { tat: Wide::new(0) }
    }

    fn refused(&self, rule: &Rule) -> Option<&'static str> {
        let tat = self.tat.get();
        if tat < 0 {
            return Some("gcra TAT is negative");
        }
        // now * limit + twice the capacity (a full debt) bounds any TAT we write.
        let bound = i128::from(i64::MAX) * i128::from(rule.limit()) + 2 * rate::capacity(rule);
        (tat > bound).then_some("gcra TAT is out of range")
    }

    /// The earliest instant the TAT can have been written: at most a full debt and a full
    /// capacity ahead of its clock.
    fn time_floor(&self, rule: &Rule) -> u64 {
        let written = self.tat.get() - 2 * rate::capacity(rule);
        rate::ticks_to_us(rule, written)
    }

    fn ahead(&self, rule: &Rule, horizon_us: u64) -> Option<&'static str> {
        let bound = i128::from(horizon_us) * i128::from(rule.limit()) + 2 * rate::capacity(rule);
        (self.tat.get() > bound).then_some("gcra TAT is ahead of the server's clock")
    }

    /// When the TAT is reached.
    fn full_at_us(&self, rule: &Rule) -> u64 {
        rate::ticks_to_us(rule, self.tat.get())
    }
}

impl Decide for Gcra {
    fn decide(&self, rule: &Rule, cost: u64, now_us: u64) -> (Decision, Gcra) {
        let (decision, after) = rate::decide(rule, self.level(rule, now_us), cost);
        (decision, Gcra::at_level(rule, after, now_us))
    }

    fn convert(&self, from: &Rule, to: &Rule, now_us: u64) -> Gcra {
        let level = rate::convert(self.level(from, now_us), from, to);
        Gcra::at_level(to, level, now_us)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::limiter::Limiter;
    use crate::rule::Algo;
    use crate::state::State;

    const S: u64 = 1_000_000;
    const T0: u64 = 1_764_000_000 * S;

    fn at(tat: i128) -> State {
        State::Gcra(Gcra {
            tat: Wide::new(tat),
        })
    }

    #[test]
    fn tats_no_command_could_write_are_refused() {
        let r = Rule::new(Algo::Gcra, 5, S, None).unwrap();
        assert!(Limiter::from_parts(r, at(-1)).is_err());
        let g = Rule::new(Algo::Gcra, 10, S, None).unwrap();
        let far = i128::from(T0 + 1000 * 365 * 86_400 * S) * 10;
        let l = Limiter::from_parts(g, at(far)).unwrap();
        assert_eq!(
            l.check_times(T0),
            Err(Error::BadPayload("gcra TAT is ahead of the server's clock"))
        );
    }
}
