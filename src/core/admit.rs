//! The typed request of `RL.ADMIT`, parsed from the arguments after the key.

use super::error::{printable, Error};
use super::parse::{parse_count, parse_duration};
use super::rule::{check_cost, Algo, Rule, MAX_COUNT, MAX_PERIOD_TEXT, MAX_PERIOD_US};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmitRequest {
    pub algo: Algo,
    pub rule: Rule,
    pub cost: u64,
    pub dry_run: bool,
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
        if token.eq_ignore_ascii_case(b"BURST") {
            set_once(
                &mut self.burst,
                "BURST",
                parse_count(value("BURST")?, "BURST", 1, MAX_COUNT)?,
            )?;
        } else if token.eq_ignore_ascii_case(b"COST") {
            set_once(
                &mut self.cost,
                "COST",
                parse_count(value("COST")?, "COST", 1, MAX_COUNT)?,
            )?;
        } else if token.eq_ignore_ascii_case(b"ALGO") {
            set_once(&mut self.algo, "ALGO", Algo::parse(value("ALGO")?)?)?;
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

/// Parses `limit period [BURST b] [COST c] [ALGO a] [DRYRUN]` (the arguments after the key).
pub fn parse_admit<A: AsRef<[u8]>>(args: &[A]) -> Result<AdmitRequest, Error> {
    let (Some(limit), Some(period)) = (args.first(), args.get(1)) else {
        return Err(Error::Arity("RL.ADMIT"));
    };
    let mut options = RuleOptions::default();
    let mut dry_run = false;
    let mut i = 2;
    while let Some(token) = args.get(i).map(AsRef::as_ref) {
        let taken = options.take(args, i)?;
        if taken > 0 {
            i += taken;
        } else if token.eq_ignore_ascii_case(b"DRYRUN") {
            if dry_run {
                return Err(Error::Duplicate("DRYRUN"));
            }
            dry_run = true;
            i += 1;
        } else {
            return Err(Error::Syntax(printable(token)));
        }
    }
    let (algo, rule, cost) = options.rule(limit.as_ref(), period.as_ref())?;
    Ok(AdmitRequest {
        algo,
        rule,
        cost,
        dry_run,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<AdmitRequest, Error> {
        let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        parse_admit(&args)
    }

    #[test]
    fn defaults() {
        let r = parse("10 1s").unwrap();
        assert_eq!(r.algo, Algo::Gcra);
        assert_eq!(r.rule.limit(), 10);
        assert_eq!(r.rule.burst(), 10);
        assert_eq!(r.rule.period_us(), 1_000_000);
        assert_eq!(r.cost, 1);
        assert!(!r.dry_run);
    }

    #[test]
    fn options_in_any_order_and_case() {
        let r = parse("2 1s dryrun algo BUCKET cost 3 Burst 20").unwrap();
        assert_eq!(r.algo, Algo::Bucket);
        assert_eq!(r.rule.burst(), 20);
        assert_eq!(r.cost, 3);
        assert!(r.dry_run);
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
                "100001 1s ALGO log",
                "ERR limit must be in the range [1, 100000]",
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
