//! `DEADLINE unix-ms`: the instant after which a spending call (`RL.ADMIT`, `RL.MULTI`,
//! `RL.GRANT`, `RL.ACQUIRE`) changes nothing.
//!
//! A client gives up on a call at its own deadline and decides the request another way (its
//! posture). Without a deadline on the call, a store that stalled (a paused process, a long
//! fork, a saturated network) runs every call it had received once it comes back, and each of
//! them spends again what the posture already decided. With one, a call that reaches the
//! server's clock past its deadline is refused before any key is read: it spends nothing,
//! propagates nothing, and its reply (which nobody waits for) says so.
//!
//! The deadline is the client's wall clock, judged by the server's (the clock the command
//! decides with): a client sends its own now, plus its timeout, plus an allowance for the skew
//! between the two clocks. A server clock ahead of the client's by more than that allowance
//! refuses calls as late (a posture, never a wrong count); one behind it weakens the guard by
//! the difference.

use crate::bounds::MAX_CLOCK_SKEW_US;
use crate::error::Error;
use crate::parse::parse_u64;

/// A `DEADLINE` value: milliseconds since the Unix epoch.
pub fn parse_deadline(bytes: &[u8]) -> Result<u64, Error> {
    parse_u64(bytes, "DEADLINE").map_err(|_| Error::BadDeadline)
}

/// Whether a call with `deadline_ms` may run at `now_us` (the server's wall clock, the one the
/// command decides with). Late: `Error::Late`, with how late. A deadline further ahead than the
/// tolerated clock skew is refused too: no client within that skew can have meant it, and it is
/// what a deadline written in microseconds (or any unit but milliseconds) looks like.
pub fn check(deadline_ms: Option<u64>, now_us: u64) -> Result<(), Error> {
    let Some(deadline_ms) = deadline_ms else {
        return Ok(());
    };
    let deadline_us = deadline_ms.saturating_mul(1000);
    if now_us > deadline_us {
        return Err(Error::Late {
            late_ms: (now_us - deadline_us).div_ceil(1000),
        });
    }
    if deadline_us - now_us > MAX_CLOCK_SKEW_US {
        return Err(Error::DeadlineAhead);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW_US: u64 = 1_767_225_600_000_000;

    #[test]
    fn a_deadline_is_milliseconds_since_the_epoch() {
        assert_eq!(parse_deadline(b"1767225600250"), Ok(1_767_225_600_250));
        assert_eq!(parse_deadline(b"0"), Ok(0));
        for bad in ["", "-1", "1.5", "1s", "+1", "99999999999999999999"] {
            assert_eq!(
                parse_deadline(bad.as_bytes()).map_err(|e| e.to_string()),
                Err("ERR DEADLINE must be a Unix time in milliseconds (an integer)".into()),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_call_runs_until_its_deadline_included() {
        let ms = NOW_US / 1000;
        assert_eq!(check(None, NOW_US), Ok(()));
        assert_eq!(check(Some(ms), NOW_US), Ok(()));
        assert_eq!(check(Some(ms + 50), NOW_US), Ok(()));
        assert_eq!(check(Some(ms), NOW_US + 1), Err(Error::Late { late_ms: 1 }));
        assert_eq!(
            check(Some(ms - 5000), NOW_US).map_err(|e| e.to_string()),
            Err("DEADLINE the call reached the server 5000ms after its deadline; it changed nothing".into())
        );
        assert_eq!(check(Some(0), NOW_US), Err(Error::Late { late_ms: ms }));
    }

    #[test]
    fn a_deadline_beyond_the_tolerated_skew_is_refused() {
        let ms = NOW_US / 1000;
        let hour = MAX_CLOCK_SKEW_US / 1000;
        assert_eq!(check(Some(ms + hour), NOW_US), Ok(()));
        assert_eq!(
            check(Some(ms + hour + 1), NOW_US).map_err(|e| e.to_string()),
            Err("ERR DEADLINE is more than 1h after the server's clock: it is a Unix time in milliseconds".into())
        );
        // Microseconds for milliseconds, and the largest value the parser takes.
        assert_eq!(check(Some(NOW_US), NOW_US), Err(Error::DeadlineAhead));
        assert_eq!(
            check(Some(i64::MAX as u64), NOW_US),
            Err(Error::DeadlineAhead)
        );
    }
}
