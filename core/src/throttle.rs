//! `CL.THROTTLE`: the `redis-cell` module's command, on this module's arithmetic.
//!
//! Same arguments (`key max_burst count period [quantity]`, period in seconds), same reply
//! (`limited, limit, remaining, retry_after_s, reset_after_s`), same rounding (capacity
//! `max_burst + 1`; a time with a partial millisecond-or-more second rounds up; `-1` retry when
//! allowed or when the quantity could never fit; quantity 0 peeks). Unlike redis-cell, absurd
//! arguments are errors instead of silent answers.

use crate::ask::Ask;
use crate::error::Error;
use crate::gcra::Gcra;
use crate::limiter::Limiter;
use crate::rate::Decision;
use crate::request::throttle::ThrottleRequest;
use crate::rule::{Algo, Rule};
use crate::state::State;
use crate::wide::Wide;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThrottleReply {
    pub limited: bool,
    pub limit: u64,
    pub remaining: u64,
    pub retry_after_s: i64,
    pub reset_after_s: i64,
}

/// redis-cell's rounding: whole seconds, plus one when at least a millisecond is left over.
fn seconds(us: u64) -> i64 {
    let s = us / 1_000_000 + u64::from((us % 1_000_000) / 1000 > 0);
    i64::try_from(s).unwrap_or(i64::MAX)
}

/// Decides a request on `limiter` (a fresh one for an absent key). Spends only when admitted
/// with a positive quantity; returns the reply and whether the limiter changed.
pub fn throttle(
    limiter: &mut Limiter,
    req: &ThrottleRequest,
    now_us: u64,
) -> Result<(ThrottleReply, bool), Error> {
    let capacity = req.rule.burst();
    let fits = req.quantity <= capacity;
    let spend = fits && req.quantity > 0;
    let cost = if fits { req.quantity } else { 0 };
    let ask = Ask {
        dry_run: !spend,
        ..Ask::new(Algo::Gcra, req.rule, cost)
    };
    let d: Decision = limiter.admit_ask(ask, now_us)?;
    let limited = !fits || !d.allowed;
    let reply = ThrottleReply {
        limited,
        limit: capacity,
        remaining: d.remaining,
        retry_after_s: if limited && fits {
            seconds(d.retry_after_us)
        } else {
            -1
        },
        reset_after_s: seconds(d.reset_after_us),
    };
    Ok((reply, spend && d.allowed))
}

/// Converts a redis-cell value (the theoretical arrival time in nanoseconds since the epoch, as
/// a decimal string) into this module's gcra state for `rule`. `None` if it is not one.
pub fn from_redis_cell(value: &[u8], rule: Rule) -> Option<Limiter> {
    let tat_ns = crate::parse::parse_u64(value, "value").ok()?;
    let tat_us = tat_ns.div_ceil(1000);
    let tat = i128::from(tat_us) * i128::from(rule.limit());
    Limiter::from_parts(
        rule,
        State::Gcra(Gcra {
            tat: Wide::new(tat),
        }),
    )
    .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::throttle::parse_throttle;

    const S: u64 = 1_000_000;
    const T0: u64 = 1_764_000_000 * S;

    fn req(line: &str) -> ThrottleRequest {
        let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        parse_throttle(&args).unwrap()
    }

    /// redis-cell's own table of cases: max_burst 4 (limit 5), 1 per second.
    #[test]
    fn redis_cell_reference_cases() {
        let mut l = Limiter::new(Algo::Gcra, req("4 1 1").rule);
        let ms = 1000;
        // (now offset µs, quantity, limited, remaining, reset_after_s, retry_after_s)
        let cases: [(u64, u64, bool, u64, i64, i64); 15] = [
            (0, 6, true, 5, 0, -1),
            (0, 1, false, 4, 1, -1),
            (0, 1, false, 3, 2, -1),
            (0, 1, false, 2, 3, -1),
            (0, 1, false, 1, 4, -1),
            (0, 1, false, 0, 5, -1),
            (0, 1, true, 0, 5, 1),
            (3000 * ms, 1, false, 2, 3, -1),
            (3100 * ms, 1, false, 1, 4, -1),
            (4000 * ms, 1, false, 1, 4, -1),
            (8000 * ms, 1, false, 4, 1, -1),
            (9500 * ms, 1, false, 4, 1, -1),
            (9500 * ms, 0, false, 4, 1, -1),
            (9500 * ms, 2, false, 2, 3, -1),
            (9500 * ms, 5, true, 2, 3, 3),
        ];
        for (i, (at, quantity, limited, remaining, reset, retry)) in cases.into_iter().enumerate() {
            let r = ThrottleRequest {
                quantity,
                ..req("4 1 1")
            };
            let (reply, _) = throttle(&mut l, &r, T0 + at).unwrap();
            assert_eq!(
                (
                    reply.limited,
                    reply.limit,
                    reply.remaining,
                    reply.reset_after_s,
                    reply.retry_after_s
                ),
                (limited, 5, remaining, reset, retry),
                "case {i}"
            );
        }
    }

    #[test]
    fn sub_millisecond_remainders_do_not_round_up() {
        assert_eq!(seconds(1_000_999), 1);
        assert_eq!(seconds(1_001_000), 2);
        assert_eq!(seconds(0), 0);
    }

    #[test]
    fn a_redis_cell_value_converts_to_the_same_state() {
        let rule = req("4 1 1").rule;
        // redis-cell wrote TAT = now + 3 s: two tokens left of five.
        let tat_ns = (T0 + 3 * S) * 1000;
        let mut l = from_redis_cell(tat_ns.to_string().as_bytes(), rule).unwrap();
        let (reply, _) = throttle(&mut l, &ThrottleRequest { rule, quantity: 0 }, T0).unwrap();
        assert_eq!((reply.remaining, reply.reset_after_s), (2, 3));
        assert!(from_redis_cell(b"not a number", rule).is_none());
        assert!(from_redis_cell(b"-5", rule).is_none());
        assert!(from_redis_cell(b"", rule).is_none());
        assert!(from_redis_cell(b"+5", rule).is_none());
    }
}
