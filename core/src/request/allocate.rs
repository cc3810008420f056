//! The typed request of `RL.ALLOCATE`, parsed from the arguments after the key.

use crate::allocate::{valid_name, Report, Terms, MAX_DEMAND, MAX_REGIONS};
use crate::error::{printable, Error};
use crate::parse::{parse_count, parse_duration, set_once, DAY_US};
use crate::protocol::{command, token};
use crate::rule::MAX_COUNT;

/// The `LEASE` when none is given.
pub const DEFAULT_LEASE_MS: u64 = 10_000;
/// Longest `LEASE`: a grant outliving a day would pin a region's share through any outage.
pub const MAX_LEASE_US: u64 = DAY_US;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocateRequest {
    pub terms: Terms,
    pub report: Report,
}

/// Parses `limit region reporter demand held [RESERVE units] [REGIONS n] [LEASE duration]`
/// (after the key).
pub fn parse_allocate<A: AsRef<[u8]>>(args: &[A]) -> Result<AllocateRequest, Error> {
    let [limit, region, reporter, demand, held, ..] = args else {
        return Err(Error::Arity(command::ALLOCATE));
    };
    let limit = parse_count(limit.as_ref(), "limit", 1, MAX_COUNT)?;
    let (region, reporter) = (region.as_ref(), reporter.as_ref());
    if !valid_name(region) {
        return Err(Error::BadName("region"));
    }
    if !valid_name(reporter) {
        return Err(Error::BadName("reporter"));
    }
    let demand = parse_count(demand.as_ref(), "demand", 0, MAX_DEMAND)?;
    let held = parse_count(held.as_ref(), "held", 0, MAX_COUNT)?;
    let (mut reserve, mut regions, mut lease) = (None, None, None);
    let mut i = 5;
    while let Some(token) = args.get(i).map(AsRef::as_ref) {
        let value = args.get(i + 1).map(AsRef::as_ref);
        if token.eq_ignore_ascii_case(token::RESERVE.as_bytes()) {
            let v = value.ok_or(Error::MissingValue(token::RESERVE))?;
            // Strictly below the limit: a pool of zero would grant every region nothing.
            let n = parse_count(v, token::RESERVE, 0, limit.saturating_sub(1))?;
            set_once(&mut reserve, token::RESERVE, n)?;
        } else if token.eq_ignore_ascii_case(token::REGIONS.as_bytes()) {
            let v = value.ok_or(Error::MissingValue(token::REGIONS))?;
            let n = parse_count(v, token::REGIONS, 1, MAX_REGIONS)?;
            set_once(&mut regions, token::REGIONS, n)?;
        } else if token.eq_ignore_ascii_case(token::LEASE.as_bytes()) {
            let v = value.ok_or(Error::MissingValue(token::LEASE))?;
            let us = parse_duration(v, token::LEASE, MAX_LEASE_US, "1d")?;
            set_once(&mut lease, token::LEASE, us / 1_000)?;
        } else {
            return Err(Error::Syntax(printable(token)));
        }
        i += 2;
    }
    Ok(AllocateRequest {
        terms: Terms {
            limit,
            reserve: reserve.unwrap_or(0),
            regions: regions.unwrap_or(1),
            lease_ms: lease.unwrap_or(DEFAULT_LEASE_MS),
        },
        report: Report {
            region: region.to_vec(),
            id: reporter.to_vec(),
            demand,
            held,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<AllocateRequest, Error> {
        let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        parse_allocate(&args)
    }

    fn err(line: &str) -> String {
        parse(line).unwrap_err().to_string()
    }

    #[test]
    fn defaults_and_options() {
        let r = parse("10000 eu gw-1 600 150").unwrap();
        assert_eq!(
            r.terms,
            Terms {
                limit: 10_000,
                reserve: 0,
                regions: 1,
                lease_ms: 10_000
            }
        );
        assert_eq!(
            (r.report.region.as_slice(), r.report.id.as_slice()),
            (&b"eu"[..], &b"gw-1"[..])
        );
        assert_eq!((r.report.demand, r.report.held), (600, 150));
        let r = parse("10000 eu gw-1 600 150 reserve 1000 REGIONS 3 lease 2s").unwrap();
        assert_eq!(
            (r.terms.reserve, r.terms.regions, r.terms.lease_ms),
            (1_000, 3, 2_000)
        );
    }

    #[test]
    fn every_bad_argument_is_named() {
        assert_eq!(
            err("10000 eu gw 1"),
            "ERR wrong number of arguments for 'RL.ALLOCATE' command"
        );
        assert_eq!(
            err("0 eu gw 1 1"),
            "ERR limit must be in the range [1, 1000000000000000]"
        );
        assert_eq!(
            err("10 e/u gw 1 1"),
            "ERR region must be 1 to 64 bytes of letters, digits, '-', '_', '.' and ':'"
        );
        assert!(err(&format!("10 eu {} 1 1", "g".repeat(65))).starts_with("ERR reporter must"));
        assert_eq!(err("10 eu gw x 1"), "ERR demand must be an integer");
        assert_eq!(
            err("10 eu gw 1000000000001 1"),
            "ERR demand must be in the range [0, 1000000000000]"
        );
        assert_eq!(
            err("10 eu gw 1 -1"),
            "ERR held must be in the range [0, 1000000000000000]"
        );
        assert_eq!(
            err("10 eu gw 1 1 RESERVE 10"),
            "ERR RESERVE must be in the range [0, 9]"
        );
        assert_eq!(
            err("10 eu gw 1 1 REGIONS 0"),
            "ERR REGIONS must be in the range [1, 64]"
        );
        assert_eq!(
            err("10 eu gw 1 1 LEASE 2d"),
            "ERR LEASE must be between 1ms and 1d"
        );
        assert_eq!(
            err("10 eu gw 1 1 LEASE 10"),
            "ERR LEASE needs a unit: add ms, s, m, h or d (for example 10s)"
        );
        assert_eq!(err("10 eu gw 1 1 REGIONS"), "ERR REGIONS needs a value");
        assert_eq!(
            err("10 eu gw 1 1 REGIONS 2 REGIONS 2"),
            "ERR REGIONS given more than once"
        );
        assert_eq!(err("10 eu gw 1 1 WANT 2"), "ERR syntax error near 'WANT'");
    }
}
