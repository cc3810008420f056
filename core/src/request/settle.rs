//! `RL.SETTLE`'s request, parsed from the arguments after the key.

use crate::error::{printable, Error};
use crate::parse::{parse_count, parse_id};
use crate::protocol::{command, token};
use crate::rule::MAX_COUNT;

/// `id actual [FORGET]` (after the key): the reservation, the units it actually cost, and
/// whether it is forgotten once settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settle<'a> {
    pub id: &'a [u8],
    pub actual: u64,
    pub forget: bool,
}

/// Parses `id actual [FORGET]` (after the key).
pub fn parse_settle<A: AsRef<[u8]>>(args: &[A]) -> Result<Settle<'_>, Error> {
    let (id, actual, forget) = match args {
        [id, actual] => (id, actual, false),
        [id, actual, option] => {
            let option = option.as_ref();
            if !option.eq_ignore_ascii_case(token::FORGET.as_bytes()) {
                return Err(Error::Syntax(printable(option)));
            }
            (id, actual, true)
        }
        _ => return Err(Error::Arity(command::SETTLE)),
    };
    Ok(Settle {
        id: parse_id(id.as_ref(), "id")?,
        actual: parse_count(actual.as_ref(), "actual", 0, MAX_COUNT)?,
        forget,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsing() {
        let settle = |id, actual, forget| Settle { id, actual, forget };
        assert_eq!(
            parse_settle(&["req-1", "0"]).unwrap(),
            settle(b"req-1", 0, false)
        );
        assert_eq!(
            parse_settle(&["req-1", "7", "forget"]).unwrap(),
            settle(b"req-1", 7, true)
        );
        let e = |args: &[&str]| parse_settle(args).unwrap_err().to_string();
        assert_eq!(
            e(&["req-1", "-1"]),
            "ERR actual must be in the range [0, 1000000000000000]"
        );
        assert_eq!(e(&["req-1", "1", "KEEP"]), "ERR syntax error near 'KEEP'");
        assert_eq!(
            e(&["req-1"]),
            "ERR wrong number of arguments for 'RL.SETTLE' command"
        );
        assert_eq!(
            e(&["req-1", "1", "FORGET", "FORGET"]),
            "ERR wrong number of arguments for 'RL.SETTLE' command"
        );
    }
}
