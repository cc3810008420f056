//! The typed request of `RL.MULTI`: several keys, one rule each, all or nothing.

use crate::protocol::{command, token};
use smallvec::SmallVec;

use crate::ask::Ask;
use crate::deadline::parse_deadline;
use crate::error::{printable, Error};
use crate::parse::{parse_count, set_once, RuleOptions};
use crate::rule::{Algo, Rule};

/// Most keys one `RL.MULTI` call may check.
pub const MAX_MULTI_KEYS: u64 = 32;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultiRule<'a> {
    pub name: &'a [u8],
    pub algo: Algo,
    pub rule: Rule,
    pub cost: u64,
}

impl MultiRule<'_> {
    /// What this rule asks of its key (whether the call is a dry run is `RL.MULTI`'s, for all).
    pub fn ask(&self) -> Ask {
        Ask::new(self.algo, self.rule, self.cost)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultiRequest<'a> {
    /// Argument positions of the keys, for opening them.
    pub key_positions: std::ops::Range<usize>,
    pub rules: SmallVec<[MultiRule<'a>; 8]>,
    pub dry_run: bool,
    /// `DEADLINE`: Unix milliseconds after which the call changes nothing.
    pub deadline_ms: Option<u64>,
}

/// Reads `numkeys` (argument 1) and checks that that many keys follow it. Used on its own to
/// answer a cluster's key-position request.
pub fn key_range<A: AsRef<[u8]>>(args: &[A]) -> Result<std::ops::Range<usize>, Error> {
    let numkeys = args.get(1).ok_or(Error::Arity(command::MULTI))?;
    let n = parse_count(numkeys.as_ref(), "numkeys", 1, MAX_MULTI_KEYS)?;
    let n = usize::try_from(n).unwrap_or(usize::MAX);
    if args.len() < 2 + n {
        return Err(Error::Arity(command::MULTI));
    }
    Ok(2..2 + n)
}

/// Parses `RL.MULTI numkeys key [key ...] RULE name limit period [options] ... [DRYRUN]
/// [DEADLINE unix-ms]`, given every argument including the command name.
pub fn parse_multi<A: AsRef<[u8]>>(args: &[A]) -> Result<MultiRequest<'_>, Error> {
    let keys = key_range(args)?;
    let key_args = args.get(keys.clone()).unwrap_or_default();
    for (i, key) in key_args.iter().enumerate() {
        if key_args
            .iter()
            .skip(i + 1)
            .any(|k| k.as_ref() == key.as_ref())
        {
            return Err(Error::DuplicateKey(printable(key.as_ref())));
        }
    }
    let mut rules = SmallVec::new();
    let (mut dry_run, mut deadline) = (None, None);
    let mut i = keys.end;
    while let Some(token) = args.get(i).map(AsRef::as_ref) {
        if token.eq_ignore_ascii_case(token::DRYRUN.as_bytes()) {
            set_once(&mut dry_run, token::DRYRUN, ())?;
            i += 1;
            continue;
        }
        if token.eq_ignore_ascii_case(token::DEADLINE.as_bytes()) {
            let v = args.get(i + 1).map(AsRef::as_ref);
            let v = v.ok_or(Error::MissingValue(token::DEADLINE))?;
            set_once(&mut deadline, token::DEADLINE, parse_deadline(v)?)?;
            i += 2;
            continue;
        }
        if !token.eq_ignore_ascii_case(token::RULE.as_bytes()) {
            return Err(Error::Syntax(printable(token)));
        }
        let (Some(name), Some(limit), Some(period)) = (
            args.get(i + 1).map(AsRef::as_ref),
            args.get(i + 2).map(AsRef::as_ref),
            args.get(i + 3).map(AsRef::as_ref),
        ) else {
            return Err(Error::IncompleteRule);
        };
        i += 4;
        let mut options = RuleOptions::default();
        loop {
            let taken = options.take(args, i)?;
            if taken == 0 {
                break;
            }
            i += taken;
        }
        let (algo, rule, cost) = options.rule(limit, period)?;
        rules.push(MultiRule {
            name,
            algo,
            rule,
            cost,
        });
    }
    if rules.len() != keys.len() {
        return Err(Error::RuleCount {
            keys: keys.len(),
            rules: rules.len(),
        });
    }
    Ok(MultiRequest {
        key_positions: keys,
        rules,
        dry_run: dry_run.is_some(),
        deadline_ms: deadline,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<MultiRequest<'static>, Error> {
        let args: Vec<&'static [u8]> = line
            .split(' ')
            .map(|w| &*Box::leak(w.as_bytes().to_vec().into_boxed_slice()))
            .collect();
        let args: &'static [&'static [u8]] = Box::leak(args.into_boxed_slice());
        parse_multi(args)
    }

    #[test]
    fn user_tenant_and_route_rules() {
        let r = parse(
            "RL.MULTI 3 {t:atlas}:u17 {t:atlas} {t:atlas}:catalog \
             RULE user 2 1s BURST 20 RULE tenant 1000 1m RULE route 500 1s COST 2 ALGO window DRYRUN",
        )
        .unwrap();
        assert_eq!(r.key_positions, 2..5);
        assert_eq!(r.rules.len(), 3);
        assert_eq!(r.rules[0].name, b"user");
        assert_eq!(r.rules[0].rule.burst(), 20);
        assert_eq!(r.rules[1].rule.period_us(), 60_000_000);
        assert_eq!((r.rules[2].algo, r.rules[2].cost), (Algo::Window, 2));
        assert!(r.dry_run);
        assert_eq!(r.deadline_ms, None);
    }

    #[test]
    fn a_deadline_for_the_whole_call_between_or_after_the_clauses() {
        for line in [
            "RL.MULTI 2 a b RULE x 1 1s DEADLINE 1767225600050 RULE y 1 1s",
            "RL.MULTI 2 a b RULE x 1 1s RULE y 1 1s COST 1 deadline 1767225600050",
        ] {
            let r = parse(line).unwrap();
            assert_eq!((r.rules.len(), r.deadline_ms), (2, Some(1_767_225_600_050)));
        }
    }

    #[test]
    fn errors() {
        let cases = [
            (
                "RL.MULTI",
                "ERR wrong number of arguments for 'RL.MULTI' command",
            ),
            (
                "RL.MULTI 0 k RULE a 1 1s",
                "ERR numkeys must be in the range [1, 32]",
            ),
            ("RL.MULTI x k RULE a 1 1s", "ERR numkeys must be an integer"),
            (
                "RL.MULTI 3 a b",
                "ERR wrong number of arguments for 'RL.MULTI' command",
            ),
            (
                "RL.MULTI 2 a a RULE x 1 1s RULE y 1 1s",
                "ERR key 'a' given more than once",
            ),
            (
                "RL.MULTI 2 a b RULE x 1 1s",
                "ERR numkeys is 2 but 1 RULE clauses were given",
            ),
            (
                "RL.MULTI 1 a RULE x 1 1s RULE y 1 1s",
                "ERR numkeys is 1 but 2 RULE clauses were given",
            ),
            (
                "RL.MULTI 1 a RULE x 1",
                "ERR RULE needs a name, a limit and a period",
            ),
            (
                "RL.MULTI 1 a RULE x 1 1s BOGUS",
                "ERR syntax error near 'BOGUS'",
            ),
            (
                "RL.MULTI 1 a RULE x 1 1",
                "ERR period needs a unit: add ms, s, m, h or d (for example 10s)",
            ),
            (
                "RL.MULTI 1 a RULE x 5 1s COST 6",
                "ERR COST 6 exceeds the capacity 5: such a request could never be admitted",
            ),
            (
                "RL.MULTI 1 a RULE x 5 1s DRYRUN DRYRUN",
                "ERR DRYRUN given more than once",
            ),
            ("RL.MULTI 1 a x 5 1s", "ERR syntax error near 'x'"),
            (
                "RL.MULTI 1 a RULE x 5 1s DEADLINE",
                "ERR DEADLINE needs a value",
            ),
            (
                "RL.MULTI 1 a RULE x 5 1s DEADLINE 1 DEADLINE 1",
                "ERR DEADLINE given more than once",
            ),
            (
                "RL.MULTI 1 a RULE x 5 1s DEADLINE soon",
                "ERR DEADLINE must be a Unix time in milliseconds (an integer)",
            ),
        ];
        for (line, want) in cases {
            assert_eq!(parse(line).unwrap_err().to_string(), want, "{line}");
        }
    }
}
