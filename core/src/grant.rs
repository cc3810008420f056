//! `RL.GRANT`: lease a chunk of tokens that a client spends locally.
//!
//! One store call admits up to `WANT` units at once; the client spends them without a round
//! trip until `valid_ms` runs out, and unspent ones simply lapse. Overshoot is zero (every unit
//! was admitted by the store); under-admission is bounded by the outstanding chunks.

use super::admit::{set_once, RuleOptions};
use super::error::{printable, Error};
use super::parse::{parse_count, parse_duration, DAY_US};
use super::rule::{Algo, Rule, MAX_COUNT};

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
}

/// Parses `limit period [BURST b] [ALGO a] WANT n [TTL duration]` (after the key).
pub fn parse_grant<A: AsRef<[u8]>>(args: &[A]) -> Result<GrantRequest, Error> {
    let (Some(limit), Some(period)) = (args.first(), args.get(1)) else {
        return Err(Error::Arity("RL.GRANT"));
    };
    let mut options = RuleOptions::default();
    let (mut want, mut ttl) = (None, None);
    let mut i = 2;
    while let Some(token) = args.get(i).map(AsRef::as_ref) {
        let taken = options.take(args, i)?;
        if taken > 0 {
            i += taken;
            continue;
        }
        let value = args.get(i + 1).map(AsRef::as_ref);
        if token.eq_ignore_ascii_case(b"WANT") {
            let v = value.ok_or(Error::MissingValue("WANT"))?;
            set_once(&mut want, "WANT", parse_count(v, "WANT", 1, MAX_COUNT)?)?;
        } else if token.eq_ignore_ascii_case(b"TTL") {
            let v = value.ok_or(Error::MissingValue("TTL"))?;
            set_once(&mut ttl, "TTL", parse_duration(v, "TTL", MAX_TTL_US, "1d")?)?;
        } else {
            return Err(Error::Syntax(printable(token)));
        }
        i += 2;
    }
    if options.cost.is_some() {
        return Err(Error::Syntax("COST".into()));
    }
    let want = want.ok_or(Error::MissingOption("WANT"))?;
    let (algo, rule, _) = options.rule(limit.as_ref(), period.as_ref())?;
    Ok(GrantRequest {
        algo,
        rule,
        want,
        ttl_us: ttl.unwrap_or(DEFAULT_TTL_US),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::Limiter;

    const S: u64 = 1_000_000;
    const T0: u64 = 1_764_000_000 * S;

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
    }

    #[test]
    fn partial_grants_and_window_clamping() {
        let g = parse("10 1m ALGO window WANT 4 TTL 1h").unwrap();
        let mut l = Limiter::new(g.algo, g.rule);
        let now = T0 + 50 * S; // 10 s before the minute ends
        let a = l.grant(g.algo, g.rule, 4, g.ttl_us, now).unwrap();
        assert_eq!((a.granted, a.remaining, a.valid_us), (4, 6, 10 * S));
        let b = l.grant(g.algo, g.rule, 100, g.ttl_us, now).unwrap();
        assert_eq!((b.granted, b.remaining), (6, 0));
        let c = l.grant(g.algo, g.rule, 100, g.ttl_us, now).unwrap();
        assert_eq!((c.granted, c.remaining), (0, 0));
    }

    /// A hot key: a global limit of 40,000 per second across 100 gateways, offered exactly
    /// that. Each gateway leases chunks of 100 valid for 250 ms and spends them locally; after
    /// an empty grant it refuses locally for 10 ms (the client's negative cache).
    #[test]
    fn one_hundred_gateways_make_hundreds_of_store_calls_not_forty_thousand() {
        let g = parse("40000 1s BURST 10000 WANT 100 TTL 250ms").unwrap();
        let mut store = Limiter::new(g.algo, g.rule);
        // (tokens, valid until, backing off until)
        let mut gateways = [(0u64, 0u64, 0u64); 100];
        let (mut calls, mut admitted, mut offered) = (0u64, 0u64, 0u64);
        let seconds = 10;
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        // 40 requests per millisecond, to random gateways.
        for ms in 0..seconds * 1000 {
            let now = T0 + ms * 1000;
            for _ in 0..40 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let gw = &mut gateways[(seed % 100) as usize];
                offered += 1;
                if (gw.0 == 0 || now >= gw.1) && now >= gw.2 {
                    calls += 1;
                    let lease = store.grant(g.algo, g.rule, g.want, g.ttl_us, now).unwrap();
                    let backoff = if lease.granted == 0 { now + 10_000 } else { 0 };
                    *gw = (lease.granted, now + lease.valid_us, backoff);
                }
                if gw.0 > 0 {
                    gw.0 -= 1;
                    admitted += 1;
                }
            }
        }
        let per_second = calls / seconds;
        assert!(
            (300..=700).contains(&per_second),
            "{per_second} store calls per second"
        );
        // Never more than the limit's exact bound: the burst plus the rate over the run.
        let bound = 10_000 + 40_000 * seconds;
        assert!(admitted <= bound, "admitted {admitted} > {bound}");
        // Under-admission is bounded by the chunks parked in gateways when the run ends and by
        // chunks that lapsed unspent: a few percent here.
        assert!(
            admitted >= offered * 95 / 100,
            "admitted {admitted} of {offered}"
        );
    }
}
