//! `gcra`: the generic cell rate algorithm, whose state is one number, the theoretical arrival
//! time (TAT) of the next conforming request.
//!
//! The TAT is kept in ticks (see `rate`): microseconds times `limit`, so one emission interval is
//! exactly `period_us` and no rate drifts. Zero is a fresh key. The level a decision needs is the
//! capacity minus how far the TAT is ahead of now.

use crate::limiter::{State, Wide};
use crate::rate;
use crate::rule::Rule;

/// Available capacity at `now_us`, in ticks.
pub fn level(rule: &Rule, tat: i128, now_us: u64) -> i128 {
    let now = i128::from(now_us) * i128::from(rule.limit());
    rate::capacity(rule) - (tat - now).max(0)
}

/// The state that holds `level` ticks at `now_us`.
pub fn at_level(rule: &Rule, level: i128, now_us: u64) -> State {
    let now = i128::from(now_us) * i128::from(rule.limit());
    State::Gcra {
        tat: Wide::new(now + rate::capacity(rule) - level),
    }
}

/// When the TAT is reached: the key is full again.
pub fn full_at_us(rule: &Rule, tat: i128) -> u64 {
    rate::ticks_to_us(rule, tat)
}

/// The earliest instant a TAT can have been written: at most a full debt and a full capacity
/// ahead of its clock.
pub fn time_floor(rule: &Rule, tat: i128) -> u64 {
    let written = tat - 2 * rate::capacity(rule);
    rate::ticks_to_us(rule, written)
}

/// Why no command could have written `tat` under `rule`, whatever its clock did.
pub fn refused(rule: &Rule, tat: i128) -> Option<&'static str> {
    if tat < 0 {
        return Some("gcra TAT is negative");
    }
    // now * limit + twice the capacity (a full debt) bounds any TAT we write.
    let bound = i128::from(i64::MAX) * i128::from(rule.limit()) + 2 * rate::capacity(rule);
    (tat > bound).then_some("gcra TAT is out of range")
}

/// Why no command on a clock before `horizon_us` could have written `tat`.
pub fn ahead(rule: &Rule, tat: i128, horizon_us: u64) -> Option<&'static str> {
    let bound = i128::from(horizon_us) * i128::from(rule.limit()) + 2 * rate::capacity(rule);
    (tat > bound).then_some("gcra TAT is ahead of the server's clock")
}

#[cfg(test)]
mod tests {
    use crate::error::Error;
    use crate::limiter::{Limiter, State, Wide};
    use crate::rule::{Algo, Rule};

    const S: u64 = 1_000_000;
    const T0: u64 = 1_764_000_000 * S;

    #[test]
    fn tats_no_command_could_write_are_refused() {
        let r = Rule::new(Algo::Gcra, 5, S, None).unwrap();
        assert!(Limiter::from_parts(r, State::Gcra { tat: Wide::new(-1) }).is_err());
        let g = Rule::new(Algo::Gcra, 10, S, None).unwrap();
        let far = i128::from(T0 + 1000 * 365 * 86_400 * S) * 10;
        let l = Limiter::from_parts(
            g,
            State::Gcra {
                tat: Wide::new(far),
            },
        )
        .unwrap();
        assert_eq!(
            l.check_times(T0),
            Err(Error::BadPayload("gcra TAT is ahead of the server's clock"))
        );
    }
}
