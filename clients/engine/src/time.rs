//! The engine's clock: an instant is a count of microseconds since the Unix epoch that the
//! driver gives with every call (its wall clock advanced by a monotonic one in production, a
//! script in tests), so no decision depends on when the code happens to run.

use std::ops::{Add, AddAssign};
use std::time::Duration;

/// An instant, in microseconds since the Unix epoch: the local fallback limiters read it as the
/// module reads its wall clock, and an override's `expires` is compared with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(u64);

impl Instant {
    pub const fn from_micros(us: u64) -> Instant {
        Instant(us)
    }

    pub const fn as_micros(self) -> u64 {
        self.0
    }

    /// `None` past the clock's range, which no policy duration reaches from a real clock.
    pub fn checked_add(self, d: Duration) -> Option<Instant> {
        let us = u64::try_from(d.as_micros()).ok()?;
        self.0.checked_add(us).map(Instant)
    }

    /// The instant `d` later, or the end of the clock's range.
    pub fn saturating_add(self, d: Duration) -> Instant {
        self.checked_add(d).unwrap_or(Instant(u64::MAX))
    }

    /// How long after `earlier` this is; zero when it is not after.
    pub fn duration_since(self, earlier: Instant) -> Duration {
        Duration::from_micros(self.0.saturating_sub(earlier.0))
    }
}

impl Instant {
    /// The system clock now: for the drivers' conveniences (a policy loaded now, metrics
    /// rendered now); the engine's decisions take the instant they are given.
    pub fn wall() -> Instant {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Instant(u64::try_from(now.as_micros()).unwrap_or(u64::MAX))
    }
}

/// Milliseconds of a duration, saturated (no policy duration comes near the limit).
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Add<Duration> for Instant {
    type Output = Instant;

    /// Saturates at the end of the clock's range.
    fn add(self, d: Duration) -> Instant {
        self.saturating_add(d)
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = self.saturating_add(d);
    }
}

/// An RFC 3339 timestamp (`2026-12-07T00:00:00Z`, `2026-12-07T01:00:00.5+01:00`) as an instant
/// of the Unix-epoch clock the drivers give. `None` for any other text, or a time before 1970.
pub fn parse_rfc3339(text: &str) -> Option<Instant> {
    let b = text.as_bytes();
    let digits = |from: usize, n: usize| -> Option<i64> {
        let part = b.get(from..from.checked_add(n)?)?;
        part.iter().try_fold(0i64, |acc, d| {
            d.is_ascii_digit().then(|| acc * 10 + i64::from(d - b'0'))
        })
    };
    let sep = |at: usize, allowed: &[u8]| b.get(at).is_some_and(|c| allowed.contains(c));
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt ") && sep(13, b":") && sep(16, b":")) {
        return None;
    }
    let (year, month, day) = (digits(0, 4)?, digits(5, 2)?, digits(8, 2)?);
    let (hour, minute, second) = (digits(11, 2)?, digits(14, 2)?, digits(17, 2)?);
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    let days_in_month = *month_days.get(usize::try_from(month).ok()?.checked_sub(1)?)?;
    // A leap second (:60) is read as the next second's start, as Unix time has none.
    if day < 1 || day > days_in_month || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut at = 19;
    let mut micros = 0i64;
    if sep(at, b".") {
        at += 1;
        let start = at;
        while let Some(d) = b.get(at).filter(|d| d.is_ascii_digit()) {
            if at - start < 6 {
                micros = micros * 10 + i64::from(d - b'0');
            }
            at += 1;
        }
        if at == start {
            return None;
        }
        for _ in (at - start)..6 {
            micros *= 10;
        }
    }
    let offset = match b.get(at) {
        Some(b'Z' | b'z') if b.len() == at + 1 => 0,
        Some(sign @ (b'+' | b'-')) if b.len() == at + 6 && sep(at + 3, b":") => {
            let (h, m) = (digits(at + 1, 2)?, digits(at + 4, 2)?);
            if h > 23 || m > 59 {
                return None;
            }
            let minutes = h * 60 + m;
            if *sign == b'+' {
                minutes
            } else {
                -minutes
            }
        }
        _ => return None,
    };
    // Days from 1970-01-01 to the date (the civil-from-days inverse, proleptic Gregorian).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset * 60;
    let us = seconds.checked_mul(1_000_000)?.checked_add(micros)?;
    u64::try_from(us).ok().map(Instant)
}

/// An instant in RFC 3339, UTC (`2026-12-07T00:00:00Z`, `2024-02-29T12:00:00.25Z`): a fraction
/// of a second only when there is one. The inverse of [`parse_rfc3339`] for instants in UTC.
pub fn format_rfc3339(at: Instant) -> String {
    let us = at.as_micros();
    let (secs, micros) = (us / 1_000_000, us % 1_000_000);
    let (days, secs) = (secs / 86_400, secs % 86_400);
    let (h, m, s) = (secs / 3_600, secs / 60 % 60, secs % 60);
    let frac = if micros == 0 {
        String::new()
    } else {
        format!(".{micros:06}").trim_end_matches('0').to_string()
    };
    match civil(days) {
        Some((year, month, day)) => {
            format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}{frac}Z")
        }
        // Unreachable (a u64 of µs is under 2.2e8 days, far from any overflow below), but an
        // instant is still worth printing exactly.
        None => format!("{us}us after the epoch"),
    }
}

/// The civil date of a count of days since 1970-01-01 (Hinnant's algorithm, proleptic
/// Gregorian).
fn civil(days: u64) -> Option<(u64, u64, u64)> {
    let z = days.checked_add(719_468)?;
    let (era, doe) = (z / 146_097, z % 146_097);
    let yoe = doe
        .checked_sub(doe / 1_460)?
        .checked_add(doe / 36_524)?
        .checked_sub(doe / 146_096)?
        / 365;
    let doy = doe.checked_sub(
        yoe.checked_mul(365)?
            .checked_add(yoe / 4)?
            .checked_sub(yoe / 100)?,
    )?;
    let mp = doy.checked_mul(5)?.checked_add(2)? / 153;
    let day = doy
        .checked_sub(mp.checked_mul(153)?.checked_add(2)? / 5)?
        .checked_add(1)?;
    let month = if mp < 10 {
        mp.checked_add(3)?
    } else {
        mp.checked_sub(9)?
    };
    let year = era
        .checked_mul(400)?
        .checked_add(yoe)?
        .checked_add(u64::from(month <= 2))?;
    Some((year, month, day))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        // The parser reads text from a policy file: no input may panic it.
        #[test]
        fn rfc3339_never_panics(text in "\\PC{0,40}") {
            let _ = parse_rfc3339(&text);
        }

        #[test]
        fn rfc3339_near_misses_never_panic(
            text in "[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{0,12})?([Zz]|[+-][0-9]{2}:[0-9]{2})?"
        ) {
            let _ = parse_rfc3339(&text);
        }

        // An offset moves the instant by exactly its minutes.
        #[test]
        fn rfc3339_offsets_shift_the_instant(h in 0u64..24, m in 0u64..60) {
            let utc = parse_rfc3339("2026-06-15T12:00:00Z").map(Instant::as_micros);
            let east = parse_rfc3339(&format!("2026-06-15T12:00:00+{h:02}:{m:02}"));
            let shift = (h * 60 + m) * 60_000_000;
            prop_assert_eq!(east.map(Instant::as_micros), utc.map(|u| u - shift));
        }
    }

    #[test]
    fn instants_formatted() {
        let f = |us| format_rfc3339(Instant::from_micros(us));
        assert_eq!(f(0), "1970-01-01T00:00:00Z");
        assert_eq!(f(1_767_225_600_000_000), "2026-01-01T00:00:00Z");
        assert_eq!(f(1_709_208_000_250_000), "2024-02-29T12:00:00.25Z");
        assert_eq!(f(951_868_799_000_001), "2000-02-29T23:59:59.000001Z");
        assert!(f(u64::MAX).ends_with('Z'));
        let at = Instant::from_micros(1_767_225_600_000_000);
        assert_eq!(parse_rfc3339(&format_rfc3339(at)), Some(at));
    }

    #[test]
    fn rfc3339_instants() {
        let at = |t: &str| parse_rfc3339(t).map(Instant::as_micros);
        assert_eq!(at("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(at("2026-01-01T00:00:00Z"), Some(1_767_225_600_000_000));
        assert_eq!(at("2026-12-07T00:00:00Z"), Some(1_796_601_600_000_000));
        assert_eq!(at("2026-12-07T01:30:00+01:30"), Some(1_796_601_600_000_000));
        assert_eq!(at("2026-12-06T23:00:00-01:00"), Some(1_796_601_600_000_000));
        assert_eq!(at("2024-02-29T12:00:00.25Z"), Some(1_709_208_000_250_000));
        assert_eq!(
            at("2024-02-29t12:00:00.1234567z"),
            Some(1_709_208_000_123_456)
        );
        for bad in [
            "",
            "2026-12-07",
            "2026-12-07T00:00:00",
            "2025-02-29T00:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-00-01T00:00:00Z",
            "2026-12-07T24:00:00Z",
            "2026-12-07T00:00:00.Z",
            "2026-12-07T00:00:00+0100",
            "2026-12-07T00:00:00Z ",
            "1969-12-31T23:59:59Z",
            "２026-12-07T00:00:00Z",
        ] {
            assert_eq!(at(bad), None, "{bad}");
        }
    }
}
