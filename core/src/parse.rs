//! What every request parser shares: counts, durations and ids from raw argument bytes, and the
//! rule options (`BURST`, `COST`, `ALGO`) of every command that takes a rule.
//!
//! Arguments arrive as bytes (key names and values need not be UTF-8), so parsing works on `&[u8]`
//! and never allocates on the success path.

use crate::bounds::{MAX_COUNT, MAX_ID_LEN, MAX_PERIOD_TEXT, MAX_PERIOD_US};
use crate::error::Error;
use crate::protocol::token;
use crate::rule::{check_cost, Algo, Rule};

/// Microseconds in each duration unit.
const MS: u64 = 1_000;
const S: u64 = 1_000 * MS;
const M: u64 = 60 * S;
const H: u64 = 60 * M;
const D: u64 = 24 * H;

/// A non-negative decimal integer that fits in an `i64`: no sign, no spaces, no leading `+`.
pub fn parse_u64(bytes: &[u8], arg: &'static str) -> Result<u64, Error> {
    if bytes.is_empty() || bytes.len() > 19 {
        // 19 digits already covers i64::MAX; anything longer overflows.
        return Err(
            if bytes.len() > 19 && bytes.iter().all(u8::is_ascii_digit) {
                Error::OutOfRange {
                    arg,
                    min: 0,
                    max: i64::MAX as u64,
                }
            } else {
                Error::NotInteger(arg)
            },
        );
    }
    let mut value: u64 = 0;
    for &b in bytes {
        if !b.is_ascii_digit() {
            return Err(if b == b'-' && bytes.len() > 1 {
                Error::OutOfRange {
                    arg,
                    min: 1,
                    max: i64::MAX as u64,
                }
            } else {
                Error::NotInteger(arg)
            });
        }
        value = value * 10 + u64::from(b - b'0'); // 19 digits cannot overflow u64
    }
    if value > i64::MAX as u64 {
        return Err(Error::OutOfRange {
            arg,
            min: 0,
            max: i64::MAX as u64,
        });
    }
    Ok(value)
}

/// A count in `[min, max]`.
pub fn parse_count(bytes: &[u8], arg: &'static str, min: u64, max: u64) -> Result<u64, Error> {
    match parse_u64(bytes, arg) {
        Ok(v) if (min..=max).contains(&v) => Ok(v),
        Ok(_) | Err(Error::OutOfRange { .. }) => Err(Error::OutOfRange { arg, min, max }),
        Err(e) => Err(e),
    }
}

/// A duration such as `250ms`, `10s`, `1m`, `2h`, `7d`, returned in microseconds, in
/// `[1ms, max_us]`. A bare number is refused: unit mistakes throttle the wrong customer.
pub fn parse_duration(
    bytes: &[u8],
    arg: &'static str,
    max_us: u64,
    max_text: &'static str,
) -> Result<u64, Error> {
    let digits = bytes.iter().take_while(|b| b.is_ascii_digit()).count();
    let (number, unit) = bytes.split_at(digits);
    if unit.is_empty() {
        return Err(if digits > 0 {
            Error::MissingUnit(arg)
        } else {
            Error::BadDuration(arg)
        });
    }
    let scale = if unit.eq_ignore_ascii_case(b"ms") {
        MS
    } else if unit.eq_ignore_ascii_case(b"s") {
        S
    } else if unit.eq_ignore_ascii_case(b"m") {
        M
    } else if unit.eq_ignore_ascii_case(b"h") {
        H
    } else if unit.eq_ignore_ascii_case(b"d") {
        D
    } else {
        return Err(Error::BadDuration(arg));
    };
    if number.is_empty() {
        return Err(Error::BadDuration(arg));
    }
    // The error is built only when needed: building and dropping it costs every call.
    let range = || Error::DurationRange { arg, max: max_text };
    let n = parse_u64(number, arg).map_err(|_| range())?;
    match n.checked_mul(scale) {
        Some(us) if us >= MS && us <= max_us => Ok(us),
        _ => Err(range()),
    }
}

/// Microseconds in a day, for bounds written as constants elsewhere (now in `bounds`).
pub use crate::bounds::DAY_US;

/// A holder or reservation id: 1 to 256 bytes.
pub fn parse_id<'a>(bytes: &'a [u8], what: &'static str) -> Result<&'a [u8], Error> {
    if bytes.is_empty() || bytes.len() > MAX_ID_LEN {
        return Err(Error::BadId(what));
    }
    Ok(bytes)
}

/// The options shared by every command that takes a rule: `BURST`, `COST`, `ALGO`.
#[derive(Debug, Default)]
pub struct RuleOptions {
    pub burst: Option<u64>,
    pub cost: Option<u64>,
    pub algo: Option<Algo>,
}

impl RuleOptions {
    /// Consumes one rule option at `args[i]` if it is one, returning how many arguments it took.
    pub fn take<A: AsRef<[u8]>>(&mut self, args: &[A], i: usize) -> Result<usize, Error> {
        let Some(token) = args.get(i).map(AsRef::as_ref) else {
            return Ok(0);
        };
        let value = |name: &'static str| {
            args.get(i + 1)
                .map(AsRef::as_ref)
                .ok_or(Error::MissingValue(name))
        };
        if token.eq_ignore_ascii_case(token::BURST.as_bytes()) {
            set_once(
                &mut self.burst,
                token::BURST,
                parse_count(value(token::BURST)?, token::BURST, 1, MAX_COUNT)?,
            )?;
        } else if token.eq_ignore_ascii_case(token::COST.as_bytes()) {
            set_once(
                &mut self.cost,
                token::COST,
                parse_count(value(token::COST)?, token::COST, 1, MAX_COUNT)?,
            )?;
        } else if token.eq_ignore_ascii_case(token::ALGO.as_bytes()) {
            set_once(
                &mut self.algo,
                token::ALGO,
                Algo::parse(value(token::ALGO)?)?,
            )?;
        } else {
            return Ok(0);
        }
        Ok(2)
    }

    /// Builds and validates the rule for `limit` per `period`.
    pub fn rule(&self, limit: &[u8], period: &[u8]) -> Result<(Algo, Rule, u64), Error> {
        let algo = self.algo.unwrap_or(Algo::Gcra);
        let limit = parse_count(limit, "limit", 1, MAX_COUNT)?;
        let period = parse_duration(period, "period", MAX_PERIOD_US, MAX_PERIOD_TEXT)?;
        let rule = Rule::new(algo, limit, period, self.burst)?;
        let cost = self.cost.unwrap_or(1);
        check_cost(cost, &rule)?;
        Ok((algo, rule, cost))
    }
}

pub fn set_once<T>(slot: &mut Option<T>, name: &'static str, value: T) -> Result<(), Error> {
    if slot.is_some() {
        return Err(Error::Duplicate(name));
    }
    *slot = Some(value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEN_Y: u64 = 3650 * DAY_US;

    fn dur(s: &str) -> Result<u64, Error> {
        parse_duration(s.as_bytes(), "period", TEN_Y, "3650d")
    }

    #[test]
    fn durations_in_every_unit() {
        assert_eq!(dur("250ms"), Ok(250_000));
        assert_eq!(dur("10s"), Ok(10_000_000));
        assert_eq!(dur("1m"), Ok(60_000_000));
        assert_eq!(dur("2H"), Ok(7_200_000_000));
        assert_eq!(dur("1d"), Ok(86_400_000_000));
        assert_eq!(dur("3650d"), Ok(TEN_Y));
    }

    #[test]
    fn bare_number_asks_for_a_unit() {
        assert_eq!(dur("10"), Err(Error::MissingUnit("period")));
        assert!(Error::MissingUnit("period")
            .to_string()
            .contains("needs a unit"));
    }

    #[test]
    fn malformed_durations_are_refused() {
        for bad in [
            "", "s", "ms", "-1s", "+1s", "1.5s", "1 s", "1sec", "1w", "1s1", "0x10s",
        ] {
            assert!(dur(bad).is_err(), "{bad:?} was accepted");
        }
        for bad in [
            "0s",
            "0ms",
            "3651d",
            "99999999999999999999d",
            "9223372036854775807d",
        ] {
            assert_eq!(
                dur(bad),
                Err(Error::DurationRange {
                    arg: "period",
                    max: "3650d"
                }),
                "{bad}"
            );
        }
    }

    #[test]
    fn integers_refuse_signs_overflow_and_junk() {
        assert_eq!(parse_u64(b"0", "n"), Ok(0));
        assert_eq!(parse_u64(b"9223372036854775807", "n"), Ok(i64::MAX as u64));
        assert!(matches!(
            parse_u64(b"9223372036854775808", "n"),
            Err(Error::OutOfRange { .. })
        ));
        assert!(matches!(
            parse_u64(b"99999999999999999999999", "n"),
            Err(Error::OutOfRange { .. })
        ));
        assert!(matches!(
            parse_u64(b"-1", "n"),
            Err(Error::OutOfRange { .. })
        ));
        for bad in ["", "-", "+1", " 1", "1 ", "1e3", "abc", "١"] {
            assert_eq!(
                parse_u64(bad.as_bytes(), "n"),
                Err(Error::NotInteger("n")),
                "{bad}"
            );
        }
    }

    #[test]
    fn counts_name_their_range() {
        assert_eq!(parse_count(b"5", "limit", 1, 10), Ok(5));
        let e = parse_count(b"0", "limit", 1, 10).unwrap_err();
        assert_eq!(e.to_string(), "ERR limit must be in the range [1, 10]");
        let e = parse_count(b"-5", "limit", 1, 10).unwrap_err();
        assert_eq!(e.to_string(), "ERR limit must be in the range [1, 10]");
        let e = parse_count(b"9223372036854775808", "limit", 1, 10).unwrap_err();
        assert_eq!(e.to_string(), "ERR limit must be in the range [1, 10]");
    }
}
