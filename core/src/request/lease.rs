//! The semaphore's requests, parsed from the arguments after the key: `RL.ACQUIRE`,
//! `RL.RELEASE`, `RL.RENEW`, and `RL.LEASESET` (the effect they propagate).

use crate::deadline::parse_deadline;
use crate::error::{printable, Error};
use crate::parse::{parse_count, parse_duration, parse_id, parse_u64, set_once};
use crate::protocol::{command, token};
use crate::rule::{Algo, Rule, MAX_PERIOD_TEXT, MAX_PERIOD_US, MAX_SEMAPHORE_CAPACITY};

fn parse_lease(bytes: &[u8]) -> Result<u64, Error> {
    parse_duration(bytes, "lease", MAX_PERIOD_US, MAX_PERIOD_TEXT)
}

/// `RL.ACQUIRE`'s request: the semaphore's rule, the holder when given, the deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcquireRequest<'a> {
    pub rule: Rule,
    pub holder: Option<&'a [u8]>,
    /// `DEADLINE`: Unix milliseconds after which the call changes nothing.
    pub deadline_ms: Option<u64>,
}

/// Parses `capacity lease [ID holder] [DEADLINE unix-ms]` (after the key).
pub fn parse_acquire<A: AsRef<[u8]>>(args: &[A]) -> Result<AcquireRequest<'_>, Error> {
    let (capacity, lease, mut rest) = match args {
        [c, l, rest @ ..] => (c.as_ref(), l.as_ref(), rest),
        _ => return Err(Error::Arity(command::ACQUIRE)),
    };
    let capacity = parse_count(capacity, "capacity", 1, MAX_SEMAPHORE_CAPACITY)?;
    let lease = parse_lease(lease)?;
    let (mut holder, mut deadline) = (None, None);
    while let Some((token, tail)) = rest.split_first() {
        let token = token.as_ref();
        let name = if token.eq_ignore_ascii_case(token::ID.as_bytes()) {
            token::ID
        } else if token.eq_ignore_ascii_case(token::DEADLINE.as_bytes()) {
            token::DEADLINE
        } else {
            return Err(Error::Syntax(printable(token)));
        };
        let (value, tail) = tail.split_first().ok_or(Error::MissingValue(name))?;
        if name == token::ID {
            set_once(&mut holder, name, parse_id(value.as_ref(), "holder")?)?;
        } else {
            set_once(&mut deadline, name, parse_deadline(value.as_ref())?)?;
        }
        rest = tail;
    }
    Ok(AcquireRequest {
        rule: Rule::new(Algo::Semaphore, capacity, lease, None)?,
        holder,
        deadline_ms: deadline,
    })
}

/// Parses `holder lease` (after the key) of `RL.RENEW`.
pub fn parse_renew<A: AsRef<[u8]>>(args: &[A]) -> Result<(&[u8], u64), Error> {
    match args {
        [holder, lease] => Ok((
            parse_id(holder.as_ref(), "holder")?,
            parse_lease(lease.as_ref())?,
        )),
        _ => Err(Error::Arity(command::RENEW)),
    }
}

/// Parses `holder` (after the key) of `RL.RELEASE`.
pub fn parse_release<A: AsRef<[u8]>>(args: &[A]) -> Result<&[u8], Error> {
    match args {
        [holder] => parse_id(holder.as_ref(), "holder"),
        _ => Err(Error::Arity(command::RELEASE)),
    }
}

/// One lease change replayed by `RL.LEASESET`, as the primary made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseSet<'a> {
    /// The semaphore's rule: its capacity and lease.
    pub rule: Rule,
    /// The primary's clock when it made the change (µs).
    pub now_us: u64,
    /// The id the semaphore generates next.
    pub next_id: u64,
    pub holder: &'a [u8],
    /// When the lease ends (µs); 0 removes it.
    pub expiry_us: u64,
}

/// Parses `capacity lease_us now_us next_id holder expiry_us` (after the key) of `RL.LEASESET`.
pub fn parse_leaseset<A: AsRef<[u8]>>(args: &[A]) -> Result<LeaseSet<'_>, Error> {
    let [capacity, lease, now, next_id, holder, expiry] = args else {
        return Err(Error::Arity(command::LEASESET));
    };
    let number = |b: &A, name| parse_u64(b.as_ref(), name);
    let (capacity, lease) = (number(capacity, "capacity")?, number(lease, "lease_us")?);
    Ok(LeaseSet {
        rule: Rule::restore(Algo::Semaphore, capacity, lease, capacity)?,
        now_us: number(now, "now_us")?,
        next_id: number(next_id, "next_id")?,
        holder: parse_id(holder.as_ref(), "holder")?,
        expiry_us: number(expiry, "expiry_us")?,
    })
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
        let r = parse_acquire(&with_id).unwrap();
        assert_eq!(
            (r.rule.limit(), r.rule.period_us(), r.holder, r.deadline_ms),
            (3, 60 * S, Some(&b"job-7"[..]), None)
        );
        assert_eq!(parse_acquire(&args("3 60s")).unwrap().holder, None);
        for line in [
            "3 60s DEADLINE 1767225600050 id job-7",
            "3 60s ID job-7 deadline 1767225600050",
        ] {
            let a = args(line);
            let r = parse_acquire(&a).unwrap();
            assert_eq!(
                (r.holder, r.deadline_ms),
                (Some(&b"job-7"[..]), Some(1_767_225_600_050))
            );
        }
        let e = |r: Result<AcquireRequest<'_>, Error>| r.unwrap_err().to_string();
        let cases = [
            ("0 60s", "ERR capacity must be in the range [1, 100000]"),
            (
                "3 60",
                "ERR lease needs a unit: add ms, s, m, h or d (for example 10s)",
            ),
            ("3 60s ID", "ERR ID needs a value"),
            ("3 60s HOLDER x", "ERR syntax error near 'HOLDER'"),
            ("3 60s ID a ID b", "ERR ID given more than once"),
            ("3 60s ID a DEADLINE", "ERR DEADLINE needs a value"),
            (
                "3 60s DEADLINE -5",
                "ERR DEADLINE must be a Unix time in milliseconds (an integer)",
            ),
        ];
        for (line, want) in cases {
            let a = args(line);
            assert_eq!(e(parse_acquire(&a)), want, "{line}");
        }
        let renew = args("job-7 30s");
        assert_eq!(parse_renew(&renew).unwrap(), (&b"job-7"[..], 30 * S));
        assert_eq!(parse_release(&args("job-7")).unwrap(), b"job-7");
        assert_eq!(
            parse_release(&args("a b")).unwrap_err().to_string(),
            "ERR wrong number of arguments for 'RL.RELEASE' command"
        );
        let set_args = args("3 60000000 5 9 job-7 65");
        let set = parse_leaseset(&set_args).unwrap();
        assert_eq!(
            (
                set.rule.limit(),
                set.rule.period_us(),
                set.now_us,
                set.next_id
            ),
            (3, 60 * S, 5, 9)
        );
        assert_eq!((set.holder, set.expiry_us), (&b"job-7"[..], 65));
        assert_eq!(
            parse_leaseset(&args("3 60000000 5 x job-7 65"))
                .unwrap_err()
                .to_string(),
            "ERR next_id must be an integer"
        );
    }
}
