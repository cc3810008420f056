//! Every way a request can be refused before any state is touched.
//!
//! Messages start with `ERR`, name the argument, and give the rule it broke, because that text is
//! exactly what reaches the user at `redis-cli` or in a client's exception. One does not: a call
//! past its `DEADLINE` was well formed, and answers with its own code, `DEADLINE`.

use std::fmt;

use crate::algo::Algo;
use crate::bounds::{
    MAX_CLOCK_SKEW_TEXT, MAX_ID_LEN, MAX_PERIOD_TEXT, MAX_RESERVATIONS, MAX_SEMAPHORE_CAPACITY,
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// Wrong number of arguments for the named command.
    Arity(&'static str),
    /// An argument that must be an integer is not one (or does not fit in 64 bits).
    NotInteger(&'static str),
    /// A count outside its documented range.
    OutOfRange {
        arg: &'static str,
        min: u64,
        max: u64,
    },
    /// A duration given without a unit.
    MissingUnit(&'static str),
    /// A duration with a malformed number or an unknown unit.
    BadDuration(&'static str),
    /// A duration outside its documented range.
    DurationRange {
        arg: &'static str,
        max: &'static str,
    },
    /// A keyword option that needs a value got none.
    MissingValue(&'static str),
    /// A keyword option the command requires is missing.
    MissingOption(&'static str),
    /// A keyword option given twice.
    Duplicate(&'static str),
    /// A token that is not an option of this command.
    Syntax(String),
    /// An algorithm name that is not one of ours.
    UnknownAlgo(String),
    /// An option that makes no sense with the chosen algorithm.
    OptionNotAllowed {
        option: &'static str,
        algo: &'static str,
    },
    /// COST above the capacity: such a request could never be admitted.
    CostAboveCapacity { cost: u64, capacity: u64 },
    /// The time to refill the whole capacity is beyond what a key may live.
    RefillTooLong,
    /// The key holds a limiter of another algorithm family.
    AlgoMismatch {
        stored: &'static str,
        asked: &'static str,
    },
    /// The same key named twice in one `RL.MULTI`.
    DuplicateKey(String),
    /// `numkeys` and the number of RULE clauses differ.
    RuleCount { keys: usize, rules: usize },
    /// A RULE clause cut short.
    IncompleteRule,
    /// `RESERVE` or `RL.SETTLE` on an algorithm that takes no reservations.
    ReserveNeedsRate,
    /// The key keeps as many reservations as it may.
    TooManyReservations,
    /// A holder or reservation id that is empty or too long.
    BadId(&'static str),
    /// A time argument further ahead of the server's clock than the tolerated skew.
    AheadOfClock(&'static str),
    /// `RL.LEASESET` with an expiry no lease taken at its `now_us` could have.
    BadLease,
    /// `RL.LEASESET` would give the key more leases than the largest capacity.
    TooManyLeases,
    /// A state payload (replication, AOF, RESTORE) that does not decode.
    BadPayload(&'static str),
    /// A `DEADLINE` that is not a count of milliseconds.
    BadDeadline,
    /// A `DEADLINE` further ahead of the server's clock than the tolerated skew.
    DeadlineAhead,
    /// The call reached the server's clock past its `DEADLINE`: it changed nothing. Not an
    /// `ERR`: the request was well formed, and the code names what happened.
    Late { late_ms: u64 },
    /// `RL.ALLOCATE` on a key whose reporters are all kept already.
    TooManyReporters(usize),
    /// A region or reporter name outside `[A-Za-z0-9._:-]{1,64}`.
    BadName(&'static str),
    /// `RL.ALLOCATE` on a hash holding a field this module did not write.
    BadAllocation,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Arity(cmd) => write!(f, "ERR wrong number of arguments for '{cmd}' command"),
            Error::NotInteger(arg) => write!(f, "ERR {arg} must be an integer"),
            Error::OutOfRange { arg, min, max } => {
                write!(f, "ERR {arg} must be in the range [{min}, {max}]")
            }
            Error::MissingUnit(arg) => write!(
                f,
                "ERR {arg} needs a unit: add ms, s, m, h or d (for example 10s)"
            ),
            Error::BadDuration(arg) => write!(
                f,
                "ERR {arg} must be a positive integer followed by ms, s, m, h or d (for example 10s)"
            ),
            Error::DurationRange { arg, max } => {
                write!(f, "ERR {arg} must be between 1ms and {max}")
            }
            Error::MissingValue(opt) => write!(f, "ERR {opt} needs a value"),
            Error::MissingOption(opt) => write!(f, "ERR {opt} is required"),
            Error::Duplicate(opt) => write!(f, "ERR {opt} given more than once"),
            Error::Syntax(token) => write!(f, "ERR syntax error near '{token}'"),
            Error::UnknownAlgo(name) => {
                f.write_str("ERR ALGO must be one of ")?;
                let names = Algo::ALL.into_iter().filter(|a| *a != Algo::Semaphore);
                for (i, algo) in names.enumerate() {
                    let sep = if i == 0 { "" } else { ", " };
                    write!(f, "{sep}{}", algo.name())?;
                }
                write!(f, " (got '{name}')")
            }
            Error::OptionNotAllowed { option, algo } => {
                write!(f, "ERR {option} is not allowed with ALGO {algo}")
            }
            Error::CostAboveCapacity { cost, capacity } => write!(
                f,
                "ERR COST {cost} exceeds the capacity {capacity}: such a request could never be admitted"
            ),
            Error::RefillTooLong => write!(
                f,
                "ERR capacity / limit * period (the time to refill the capacity) must be at most {MAX_PERIOD_TEXT}"
            ),
            Error::AlgoMismatch { stored, asked } => write!(
                f,
                "ERR key holds an ALGO {stored} limiter, not {asked}: use another key, or DEL this one to change the algorithm"
            ),
            Error::DuplicateKey(key) => write!(f, "ERR key '{key}' given more than once"),
            Error::RuleCount { keys, rules } => write!(
                f,
                "ERR numkeys is {keys} but {rules} RULE clauses were given"
            ),
            Error::IncompleteRule => write!(f, "ERR RULE needs a name, a limit and a period"),
            Error::ReserveNeedsRate => write!(
                f,
                "ERR reservations are only for ALGO gcra and bucket keys"
            ),
            Error::TooManyReservations => write!(
                f,
                "ERR the key keeps {MAX_RESERVATIONS} reservations already: settle them or let them expire"
            ),
            Error::BadId(what) => write!(f, "ERR {what} must be 1 to {MAX_ID_LEN} bytes"),
            Error::AheadOfClock(arg) => write!(
                f,
                "ERR {arg} is more than {} ahead of the server's clock",
                MAX_CLOCK_SKEW_TEXT
            ),
            Error::BadLease => write!(
                f,
                "ERR expiry_us must be 0 or after now_us by at most {}",
                MAX_PERIOD_TEXT
            ),
            Error::TooManyLeases => write!(
                f,
                "ERR the key keeps {} leases already (the largest capacity)",
                MAX_SEMAPHORE_CAPACITY
            ),
            Error::BadPayload(why) => write!(f, "ERR invalid limiter state payload: {why}"),
            Error::BadDeadline => f.write_str(
                "ERR DEADLINE must be a Unix time in milliseconds (an integer)",
            ),
            Error::DeadlineAhead => write!(
                f,
                "ERR DEADLINE is more than {MAX_CLOCK_SKEW_TEXT} after the server's clock: it is a Unix time in milliseconds"
            ),
            Error::Late { late_ms } => write!(
                f,
                "DEADLINE the call reached the server {late_ms}ms after its deadline; it changed nothing"
            ),
            Error::TooManyReporters(max) => write!(
                f,
                "ERR the key keeps {max} reporters already: a new one is refused until one is forgotten"
            ),
            Error::BadName(arg) => write!(
                f,
                "ERR {arg} must be 1 to 64 bytes of letters, digits, '-', '_', '.' and ':'"
            ),
            Error::BadAllocation => f.write_str(
                "ERR key holds a hash that is not an allocation record: use another key, or DEL this one",
            ),
        }
    }
}

impl std::error::Error for Error {}

/// A user's token as it may appear inside an error reply: printable ASCII is kept, anything else
/// becomes `\xNN`, and long tokens are cut, so the reply is valid UTF-8 on a single line.
pub fn printable(token: &[u8]) -> String {
    let mut out = String::new();
    for &b in token.iter().take(64) {
        if b.is_ascii_graphic() || b == b' ' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    if token.len() > 64 {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_escapes_bytes_a_reply_cannot_carry() {
        assert_eq!(printable(b"FOO"), "FOO");
        assert_eq!(printable(b"a\r\nb\xff\x00"), "a\\x0d\\x0ab\\xff\\x00");
        assert_eq!(printable(&[b'x'; 70]), format!("{}...", "x".repeat(64)));
    }
}
