//! The typed requests of `RL.ACQUIRE` and `RL.RENEW`, parsed from the arguments after the key.

use crate::error::{printable, Error};
use crate::parse::{parse_count, parse_duration, parse_id};
use crate::rule::{Algo, Rule, MAX_PERIOD_TEXT, MAX_PERIOD_US, MAX_SEMAPHORE_CAPACITY};

fn parse_lease(bytes: &[u8]) -> Result<u64, Error> {
    parse_duration(bytes, "lease", MAX_PERIOD_US, MAX_PERIOD_TEXT)
}

/// Parses `capacity lease [ID holder]` (after the key) into the semaphore's rule and holder.
pub fn parse_acquire<A: AsRef<[u8]>>(args: &[A]) -> Result<(Rule, Option<&[u8]>), Error> {
    let (capacity, lease, rest) = match args {
        [c, l, rest @ ..] => (c.as_ref(), l.as_ref(), rest),
        _ => return Err(Error::Arity(crate::names::ACQUIRE)),
    };
    let capacity = parse_count(capacity, "capacity", 1, MAX_SEMAPHORE_CAPACITY)?;
    let lease = parse_lease(lease)?;
    let holder = match rest {
        [] => None,
        [token, id] if token.as_ref().eq_ignore_ascii_case(b"ID") => {
            Some(parse_id(id.as_ref(), "holder")?)
        }
        [token] if token.as_ref().eq_ignore_ascii_case(b"ID") => {
            return Err(Error::MissingValue("ID"))
        }
        [token, ..] => return Err(Error::Syntax(printable(token.as_ref()))),
    };
    Ok((Rule::new(Algo::Semaphore, capacity, lease, None)?, holder))
}

/// Parses `holder lease` (after the key) of `RL.RENEW`.
pub fn parse_renew<A: AsRef<[u8]>>(args: &[A]) -> Result<(&[u8], u64), Error> {
    match args {
        [holder, lease] => Ok((
            parse_id(holder.as_ref(), "holder")?,
            parse_lease(lease.as_ref())?,
        )),
        _ => Err(Error::Arity(crate::names::RENEW)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000;

    #[test]
    fn parsing() {
        let args =
            |l: &'static str| -> Vec<&'static [u8]> { l.split(' ').map(str::as_bytes).collect() };
        let with_id = args("3 60s ID job-7");
        let (rule, holder) = parse_acquire(&with_id).unwrap();
        assert_eq!(
            (rule.limit(), rule.period_us(), holder),
            (3, 60 * S, Some(&b"job-7"[..]))
        );
        assert_eq!(parse_acquire(&args("3 60s")).unwrap().1, None);
        let e = |r: Result<(Rule, Option<&[u8]>), Error>| r.unwrap_err().to_string();
        let cases = [
            ("0 60s", "ERR capacity must be in the range [1, 100000]"),
            (
                "3 60",
                "ERR lease needs a unit: add ms, s, m, h or d (for example 10s)",
            ),
            ("3 60s ID", "ERR ID needs a value"),
            ("3 60s HOLDER x", "ERR syntax error near 'HOLDER'"),
        ];
        for (line, want) in cases {
            let a = args(line);
            assert_eq!(e(parse_acquire(&a)), want, "{line}");
        }
        let renew = args("job-7 30s");
        assert_eq!(parse_renew(&renew).unwrap(), (&b"job-7"[..], 30 * S));
    }
}
