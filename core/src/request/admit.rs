//! The typed request of `RL.ADMIT`, parsed from the arguments after the key.

use crate::ask::Ask;
use crate::deadline::parse_deadline;
use crate::error::{printable, Error};
use crate::parse::{parse_duration, parse_id, set_once, RuleOptions};
use crate::protocol::{command, token};
use crate::reservations::{DEFAULT_KEEP_US, MAX_KEEP_US};
use crate::rule::Family;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmitRequest<'a> {
    /// The algorithm, rule, cost and dry run.
    pub ask: Ask,
    pub reserve: Option<Reserve<'a>>,
    /// `DEADLINE`: Unix milliseconds after which the call changes nothing.
    pub deadline_ms: Option<u64>,
}

/// `RESERVE id [KEEP duration]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reserve<'a> {
    pub id: &'a [u8],
    pub keep_us: u64,
}

/// Parses `limit period [BURST b] [COST c] [ALGO a] [DRYRUN] [RESERVE id [KEEP duration]]
/// [DEADLINE unix-ms]` (the arguments after the key).
pub fn parse_admit<A: AsRef<[u8]>>(args: &[A]) -> Result<AdmitRequest<'_>, Error> {
    let (Some(limit), Some(period)) = (args.first(), args.get(1)) else {
        return Err(Error::Arity(command::ADMIT));
    };
    let mut options = RuleOptions::default();
    let mut dry_run = false;
    let (mut id, mut keep, mut deadline) = (None, None, None);
    let mut i = 2;
    while let Some(token) = args.get(i).map(AsRef::as_ref) {
        let taken = options.take(args, i)?;
        let value = args.get(i + 1).map(AsRef::as_ref);
        if taken > 0 {
            i += taken;
        } else if token.eq_ignore_ascii_case(token::RESERVE.as_bytes()) {
            let v = value.ok_or(Error::MissingValue(token::RESERVE))?;
            set_once(&mut id, token::RESERVE, parse_id(v, "RESERVE id")?)?;
            i += 2;
        } else if token.eq_ignore_ascii_case(token::KEEP.as_bytes()) {
            let v = value.ok_or(Error::MissingValue(token::KEEP))?;
            set_once(
                &mut keep,
                token::KEEP,
                parse_duration(v, token::KEEP, MAX_KEEP_US, "7d")?,
            )?;
            i += 2;
        } else if token.eq_ignore_ascii_case(token::DEADLINE.as_bytes()) {
            let v = value.ok_or(Error::MissingValue(token::DEADLINE))?;
            set_once(&mut deadline, token::DEADLINE, parse_deadline(v)?)?;
            i += 2;
        } else if token.eq_ignore_ascii_case(token::DRYRUN.as_bytes()) {
            if dry_run {
                return Err(Error::Duplicate(token::DRYRUN));
            }
            dry_run = true;
            i += 1;
        } else {
            return Err(Error::Syntax(printable(token)));
        }
    }
    let (algo, rule, cost) = options.rule(limit.as_ref(), period.as_ref())?;
    if keep.is_some() && id.is_none() {
        return Err(Error::MissingOption("RESERVE (for KEEP)"));
    }
    if id.is_some() && algo.family() != Family::Rate {
        return Err(Error::ReserveNeedsRate);
    }
    Ok(AdmitRequest {
        ask: Ask {
            algo,
            rule,
            cost,
            dry_run,
        },
        reserve: id.map(|id| Reserve {
            id,
            keep_us: keep.unwrap_or(DEFAULT_KEEP_US),
        }),
        deadline_ms: deadline,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rule::Algo;

    fn parse(line: &str) -> Result<AdmitRequest<'static>, Error> {
        let args: Vec<&'static [u8]> = line
            .split(' ')
            .map(|w| &*Box::leak(w.as_bytes().to_vec().into_boxed_slice()))
            .collect();
        parse_admit(Box::leak(args.into_boxed_slice()))
    }

    #[test]
    fn defaults() {
        let r = parse("10 1s").unwrap();
        assert_eq!(r.ask.algo, Algo::Gcra);
        assert_eq!(r.ask.rule.limit(), 10);
        assert_eq!(r.ask.rule.burst(), 10);
        assert_eq!(r.ask.rule.period_us(), 1_000_000);
        assert_eq!(r.ask.cost, 1);
        assert!(!r.ask.dry_run);
    }

    #[test]
    fn options_in_any_order_and_case() {
        let r = parse("2 1s dryrun algo BUCKET cost 3 Burst 20").unwrap();
        assert_eq!(r.ask.algo, Algo::Bucket);
        assert_eq!(r.ask.rule.burst(), 20);
        assert_eq!(r.ask.cost, 3);
        assert!(r.ask.dry_run);
    }

    #[test]
    fn reserve_and_keep() {
        let r = parse("2 1s BURST 20 COST 10 RESERVE exp-1 KEEP 10m").unwrap();
        let reserve = r.reserve.unwrap();
        assert_eq!((reserve.id, reserve.keep_us), (&b"exp-1"[..], 600_000_000));
        assert_eq!(
            parse("2 1s RESERVE x").unwrap().reserve.unwrap().keep_us,
            DEFAULT_KEEP_US
        );
        let e = |l: &str| parse(l).unwrap_err().to_string();
        assert_eq!(e("2 1s KEEP 1m"), "ERR RESERVE (for KEEP) is required");
        assert_eq!(e("2 1s RESERVE"), "ERR RESERVE needs a value");
        assert_eq!(
            e("2 1s RESERVE a RESERVE b"),
            "ERR RESERVE given more than once"
        );
        assert_eq!(
            e("2 1s RESERVE x KEEP 8d"),
            "ERR KEEP must be between 1ms and 7d"
        );
        assert_eq!(
            e("2 1s ALGO window RESERVE x"),
            "ERR reservations are only for ALGO gcra and bucket keys"
        );
        assert_eq!(
            e(&format!("2 1s RESERVE {}", "x".repeat(257))),
            "ERR RESERVE id must be 1 to 256 bytes"
        );
    }

    #[test]
    fn deadline_anywhere_among_the_options() {
        assert_eq!(parse("10 1s").unwrap().deadline_ms, None);
        let r = parse("10 1s DEADLINE 1767225600050 COST 2 deadlinE_ignored").unwrap_err();
        assert_eq!(r.to_string(), "ERR syntax error near 'deadlinE_ignored'");
        let r = parse("10 1s COST 2 RESERVE r deadline 1767225600050").unwrap();
        assert_eq!(r.deadline_ms, Some(1_767_225_600_050));
        assert_eq!(r.ask.cost, 2);
        let e = |l: &str| parse(l).unwrap_err().to_string();
        assert_eq!(e("10 1s DEADLINE"), "ERR DEADLINE needs a value");
        assert_eq!(
            e("10 1s DEADLINE 1 DEADLINE 2"),
            "ERR DEADLINE given more than once"
        );
        assert_eq!(
            e("10 1s DEADLINE 10s"),
            "ERR DEADLINE must be a Unix time in milliseconds (an integer)"
        );
    }

    #[test]
    fn errors_name_the_argument() {
        let cases = [
            ("10", "ERR wrong number of arguments for 'RL.ADMIT' command"),
            (
                "10 1",
                "ERR period needs a unit: add ms, s, m, h or d (for example 10s)",
            ),
            (
                "0 1s",
                "ERR limit must be in the range [1, 1000000000000000]",
            ),
            (
                "-3 1s",
                "ERR limit must be in the range [1, 1000000000000000]",
            ),
            ("abc 1s", "ERR limit must be an integer"),
            (
                "9223372036854775807 1s",
                "ERR limit must be in the range [1, 1000000000000000]",
            ),
            ("10 1s BURST", "ERR BURST needs a value"),
            ("10 1s BURST 5 BURST 6", "ERR BURST given more than once"),
            (
                "10 1s COST 11",
                "ERR COST 11 exceeds the capacity 10: such a request could never be admitted",
            ),
            (
                "10 1s COST 0",
                "ERR COST must be in the range [1, 1000000000000000]",
            ),
            ("10 1s FOO", "ERR syntax error near 'FOO'"),
            ("10 1s DRYRUN DRYRUN", "ERR DRYRUN given more than once"),
            (
                "10 1s ALGO leaky",
                "ERR ALGO must be one of gcra, bucket, window, sliding, log (got 'leaky')",
            ),
            (
                "10001 1s ALGO log",
                "ERR limit must be in the range [1, 10000]",
            ),
            (
                "10 1s ALGO window BURST 3",
                "ERR BURST is not allowed with ALGO window",
            ),
        ];
        for (line, want) in cases {
            assert_eq!(parse(line).unwrap_err().to_string(), want, "{line}");
        }
    }
}
