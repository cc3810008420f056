//! The typed request of `CL.THROTTLE` (redis-cell's arguments: `max_burst count period
//! [quantity]`, period in whole seconds).

use crate::error::Error;
use crate::parse::parse_count;
use crate::protocol::command;
use crate::rule::{Algo, Rule, MAX_COUNT, MAX_PERIOD_US};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThrottleRequest {
    pub rule: Rule,
    pub quantity: u64,
}

/// Parses the arguments after the key: `max_burst count period [quantity]`.
pub fn parse_throttle<A: AsRef<[u8]>>(args: &[A]) -> Result<ThrottleRequest, Error> {
    let [max_burst, count, period, rest @ ..] = args else {
        return Err(Error::Arity(command::THROTTLE));
    };
    if rest.len() > 1 {
        return Err(Error::Arity(command::THROTTLE));
    }
    let max_burst = parse_count(max_burst.as_ref(), "max_burst", 0, MAX_COUNT - 1)?;
    let count = parse_count(count.as_ref(), "count", 1, MAX_COUNT)?;
    let period_s = parse_count(period.as_ref(), "period", 1, MAX_PERIOD_US / 1_000_000)?;
    let quantity = match rest.first() {
        Some(q) => parse_count(q.as_ref(), "quantity", 0, MAX_COUNT)?,
        None => 1,
    };
    let rule = Rule::new(Algo::Gcra, count, period_s * 1_000_000, Some(max_burst + 1))?;
    Ok(ThrottleRequest { rule, quantity })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_checked() {
        let bad = |line: &str| {
            let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
            parse_throttle(&args).unwrap_err().to_string()
        };
        assert_eq!(
            bad("-1 1 1"),
            "ERR max_burst must be in the range [0, 999999999999999]"
        );
        assert_eq!(
            bad("1 0 1"),
            "ERR count must be in the range [1, 1000000000000000]"
        );
        assert_eq!(
            bad("1 1 0"),
            "ERR period must be in the range [1, 315360000]"
        );
        assert_eq!(
            bad("1 1 1 -1"),
            "ERR quantity must be in the range [0, 1000000000000000]"
        );
        assert_eq!(
            bad("1 1"),
            "ERR wrong number of arguments for 'CL.THROTTLE' command"
        );
        assert_eq!(
            bad("1 1 1 1 1"),
            "ERR wrong number of arguments for 'CL.THROTTLE' command"
        );
    }
}
