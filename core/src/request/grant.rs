//! The typed request of `RL.GRANT`, parsed from the arguments after the key.

use crate::deadline::parse_deadline;
use crate::error::{printable, Error};
use crate::parse::{parse_count, parse_duration, set_once, RuleOptions, DAY_US};
use crate::protocol::{command, token};
use crate::rule::{Algo, Rule, MAX_COUNT};

/// Longest `TTL` a grant may be spent for.
pub const MAX_TTL_US: u64 = DAY_US;
/// The `TTL` when none is given.
pub const DEFAULT_TTL_US: u64 = 1_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrantRequest {
    pub algo: Algo,
    pub rule: Rule,
    pub want: u64,
    pub ttl_us: u64,
    /// `DEADLINE`: Unix milliseconds after which the call changes nothing.
    pub deadline_ms: Option<u64>,
}

/// Parses `limit period [BURST b] [ALGO a] WANT n [TTL duration] [DEADLINE unix-ms]` (after
/// the key).
pub fn parse_grant<A: AsRef<[u8]>>(args: &[A]) -> Result<GrantRequest, Error> {
    let (Some(limit), Some(period)) = (args.first(), args.get(1)) else {
        return Err(Error::Arity(command::GRANT));
    };
    let mut options = RuleOptions::default();
    let (mut want, mut ttl, mut deadline) = (None, None, None);
    let mut i = 2;
    while let Some(token) = args.get(i).map(AsRef::as_ref) {
        let taken = options.take(args, i)?;
        if taken > 0 {
            i += taken;
            continue;
        }
        let value = args.get(i + 1).map(AsRef::as_ref);
        if token.eq_ignore_ascii_case(token::WANT.as_bytes()) {
            let v = value.ok_or(Error::MissingValue(token::WANT))?;
            set_once(
                &mut want,
                token::WANT,
                parse_count(v, token::WANT, 1, MAX_COUNT)?,
            )?;
        } else if token.eq_ignore_ascii_case(token::TTL.as_bytes()) {
            let v = value.ok_or(Error::MissingValue(token::TTL))?;
            set_once(
                &mut ttl,
                token::TTL,
                parse_duration(v, token::TTL, MAX_TTL_US, "1d")?,
            )?;
        } else if token.eq_ignore_ascii_case(token::DEADLINE.as_bytes()) {
            let v = value.ok_or(Error::MissingValue(token::DEADLINE))?;
            set_once(&mut deadline, token::DEADLINE, parse_deadline(v)?)?;
        } else {
            return Err(Error::Syntax(printable(token)));
        }
        i += 2;
    }
    if options.cost.is_some() {
        return Err(Error::Syntax(token::COST.into()));
    }
    let want = want.ok_or(Error::MissingOption(token::WANT))?;
    let (algo, rule, _) = options.rule(limit.as_ref(), period.as_ref())?;
    Ok(GrantRequest {
        algo,
        rule,
        want,
        ttl_us: ttl.unwrap_or(DEFAULT_TTL_US),
        deadline_ms: deadline,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000;

    fn parse(line: &str) -> Result<GrantRequest, Error> {
        let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        parse_grant(&args)
    }

    #[test]
    fn parsing() {
        let g = parse("40000 1s BURST 10000 WANT 100 TTL 250ms").unwrap();
        assert_eq!((g.want, g.ttl_us, g.rule.burst()), (100, 250_000, 10_000));
        assert_eq!(parse("5 1s WANT 2").unwrap().ttl_us, S);
        assert_eq!(
            parse("5 1s").unwrap_err().to_string(),
            "ERR WANT is required"
        );
        assert_eq!(
            parse("5 1s WANT 2 COST 1").unwrap_err().to_string(),
            "ERR syntax error near 'COST'"
        );
        assert_eq!(
            parse("5 1s WANT 0").unwrap_err().to_string(),
            "ERR WANT must be in the range [1, 1000000000000000]"
        );
        assert_eq!(
            parse("5 1s WANT 1 TTL 2d").unwrap_err().to_string(),
            "ERR TTL must be between 1ms and 1d"
        );
        assert_eq!(parse("5 1s WANT 2").unwrap().deadline_ms, None);
        let g = parse("5 1s DEADLINE 1767225600050 WANT 2").unwrap();
        assert_eq!(g.deadline_ms, Some(1_767_225_600_050));
        assert_eq!(
            parse("5 1s WANT 2 DEADLINE").unwrap_err().to_string(),
            "ERR DEADLINE needs a value"
        );
    }
}
