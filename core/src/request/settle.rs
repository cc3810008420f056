//! `RL.SETTLE`'s request, parsed from the arguments after the key.

use crate::error::Error;
use crate::parse::{parse_count, parse_id};
use crate::protocol::command;
use crate::rule::MAX_COUNT;

/// Parses `id actual` (after the key): the reservation and the units it actually cost.
pub fn parse_settle<A: AsRef<[u8]>>(args: &[A]) -> Result<(&[u8], u64), Error> {
    match args {
        [id, actual] => Ok((
            parse_id(id.as_ref(), "id")?,
            parse_count(actual.as_ref(), "actual", 0, MAX_COUNT)?,
        )),
        _ => Err(Error::Arity(command::SETTLE)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsing() {
        assert_eq!(parse_settle(&["req-1", "0"]).unwrap(), (&b"req-1"[..], 0));
        let e = |args: &[&str]| parse_settle(args).unwrap_err().to_string();
        assert_eq!(
            e(&["req-1", "-1"]),
            "ERR actual must be in the range [0, 1000000000000000]"
        );
        assert_eq!(
            e(&["req-1"]),
            "ERR wrong number of arguments for 'RL.SETTLE' command"
        );
    }
}
