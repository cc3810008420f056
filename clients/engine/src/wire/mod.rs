//! The store's side of the wire, without any I/O: typed requests built into the exact
//! arguments of `commands.md` ([`command`]), the replies a driver hands back ([`Reply`]) parsed
//! into typed records ([`reply`]), and the two encodings a call can take: the module's native
//! command, or the same command through `clients/scripts/rl.lua` on a server without the
//! module (`clients/SPEC.md` section 5).

pub mod command;
pub mod reply;

use std::fmt;
use std::sync::LazyLock;

use smallvec::SmallVec;

/// The arguments of one command, the command's name first: one buffer of their bytes and
/// where each ends, so building a call allocates once whatever its length (an argument per
/// `Vec` took one allocation each, about 30 for an `RL.MULTI` of two rules).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Args {
    bytes: Vec<u8>,
    /// Held inline up to `ENDS` arguments (a list of its own was a second allocation per call).
    ends: SmallVec<[usize; ENDS]>,
}

/// The arguments most calls fit in: an `RL.MULTI` of two rules takes about 16.
const ENDS: usize = 24;

impl Args {
    pub fn new(name: &str) -> Args {
        // Room for most calls (an `RL.MULTI` of two rules takes about 16 arguments and 150
        // bytes), so that building one does not grow it.
        let mut args = Args {
            bytes: Vec::with_capacity(256),
            ends: SmallVec::new(),
        };
        args.arg(name);
        args
    }

    /// Appends one argument: bytes as they are, numbers in decimal.
    pub fn arg(&mut self, value: impl ToArg) -> &mut Args {
        value.write_arg(&mut self.bytes);
        self.ends.push(self.bytes.len());
        self
    }

    /// How many arguments, the name included.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Argument `i` (0 is the name).
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        let end = *self.ends.get(i)?;
        let start = match i.checked_sub(1) {
            Some(before) => *self.ends.get(before)?,
            None => 0,
        };
        self.bytes.get(start..end)
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        (0..self.ends.len()).map(|i| self.get(i).unwrap_or_default())
    }

    /// Each argument in a vector of its own, as a store that takes them so wants them.
    pub fn to_vecs(&self) -> Vec<Vec<u8>> {
        self.iter().map(<[u8]>::to_vec).collect()
    }

    /// Where the keys the command touches are: argument 1, or for `RL.MULTI` the `numkeys`
    /// arguments after `numkeys`; `WAIT` touches none.
    pub fn key_range(&self) -> Result<std::ops::Range<usize>, Error> {
        let Some(name) = self.get(0) else {
            return Err(Error::InvalidRequest("an empty command".into()));
        };
        if name.eq_ignore_ascii_case(b"WAIT") {
            return Ok(1..1);
        }
        if !name.eq_ignore_ascii_case(b"RL.MULTI") {
            return Ok(1..self.len().min(2));
        }
        let numkeys = self
            .get(1)
            .and_then(|n| std::str::from_utf8(n).ok())
            .and_then(|n| n.parse::<usize>().ok())
            .ok_or_else(|| Error::InvalidRequest("RL.MULTI without numkeys".into()))?;
        let end = numkeys.saturating_add(2);
        if end > self.len() {
            return Err(Error::InvalidRequest(
                "RL.MULTI with fewer keys than numkeys".into(),
            ));
        }
        Ok(2..end)
    }

    /// The keys the command touches, in order (see [`Args::key_range`]).
    pub fn keys(&self) -> Result<impl ExactSizeIterator<Item = &[u8]> + '_, Error> {
        Ok(self.key_range()?.map(|i| self.get(i).unwrap_or_default()))
    }

    /// The same command in the given encoding. In script mode it is
    /// `EVALSHA <sha> M k1..kM NAME args...`: the module's own arguments, keys declared.
    pub fn encode(&self, mode: Mode) -> Result<Vec<Vec<u8>>, Error> {
        if mode == Mode::Module || self.get(0).is_some_and(|n| n.eq_ignore_ascii_case(b"WAIT")) {
            return Ok(self.to_vecs());
        }
        let keys = self.keys()?;
        let mut out = Vec::with_capacity(3 + keys.len() + self.len());
        out.push(b"EVALSHA".to_vec());
        out.push(script_sha().as_bytes().to_vec());
        out.push(keys.len().to_string().into_bytes());
        out.extend(keys.map(<[u8]>::to_vec));
        out.extend(self.iter().map(<[u8]>::to_vec));
        Ok(out)
    }
}

impl fmt::Debug for Args {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.iter().map(String::from_utf8_lossy))
            .finish()
    }
}

/// What can be an argument: written onto the end of a call's bytes.
pub trait ToArg {
    fn write_arg(&self, out: &mut Vec<u8>);
}

impl ToArg for &[u8] {
    fn write_arg(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self);
    }
}

impl ToArg for &Vec<u8> {
    fn write_arg(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self);
    }
}

impl ToArg for &str {
    fn write_arg(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.as_bytes());
    }
}

impl ToArg for &String {
    fn write_arg(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.as_bytes());
    }
}

impl ToArg for String {
    fn write_arg(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.as_bytes());
    }
}

impl ToArg for u64 {
    fn write_arg(&self, out: &mut Vec<u8>) {
        decimal(*self, out);
    }
}

impl ToArg for usize {
    fn write_arg(&self, out: &mut Vec<u8>) {
        decimal(u64::try_from(*self).unwrap_or(u64::MAX), out);
    }
}

/// `n` in decimal, without formatting machinery or an allocation of its own.
fn decimal(n: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(decimal_digits(n, &mut [0; 20]).as_bytes());
}

/// `n`'s decimal digits, written by hand into `digits` (`write!` cost about 500 instructions a
/// number, on every admission).
pub(crate) fn decimal_digits(mut n: u64, digits: &mut [u8; 20]) -> &str {
    let mut at = digits.len();
    loop {
        at = at.saturating_sub(1);
        if let Some(d) = digits.get_mut(at) {
            // n % 10 < 10: the cast cannot truncate.
            *d = b'0' + (n % 10) as u8;
        }
        n /= 10;
        if n == 0 || at == 0 {
            break;
        }
    }
    // ASCII digits only: never invalid UTF-8.
    std::str::from_utf8(digits.get(at..).unwrap_or_default()).unwrap_or_default()
}

/// A reply as a driver hands it back, whatever its Redis client: RESP2 and RESP3 shapes alike
/// (a RESP3 boolean as `Int` 0 or 1, a double as its text in `Bulk`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Nil,
    Int(i64),
    Bulk(Vec<u8>),
    Status(String),
    /// A server error, its code first (`ERR ...`, `WRONGTYPE ...`, `LOADING ...`).
    Error(String),
    Array(Vec<Reply>),
    Map(Vec<(Reply, Reply)>),
}

/// Why a call gave no decision. The gateway's three outcomes hang on telling these apart: only
/// [`Error::Unavailable`] may lead to a route's posture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The store could not answer: I/O, timeout, refused or dropped connection, cluster down,
    /// `LOADING`, `BUSY`, `TRYAGAIN`, `MASTERDOWN`, `READONLY`, `OOM`, `NOSCRIPT`, ...
    Unavailable(String),
    /// The module refused the call (an `ERR`, `WRONGTYPE` or `CROSSSLOT` reply): the request is
    /// wrong, retrying it will not help. The text is the server's, code first.
    Refused(String),
    /// The server answered something this client does not understand.
    Unexpected(String),
    /// Refused before any round trip: the request cannot be sent as given (a duration finer
    /// than a millisecond; `RL.MULTI` keys in several cluster slots).
    InvalidRequest(String),
}

impl Error {
    /// A server error by its code: `ERR`, `WRONGTYPE` and `CROSSSLOT` are verdicts on the
    /// request; every other code (`LOADING`, `BUSY`, `OOM`, `NOPERM`, codes this client does
    /// not know) says the store could not answer.
    pub fn from_server(text: &str) -> Error {
        let code = text.split(' ').next().unwrap_or_default();
        if matches!(code, "ERR" | "WRONGTYPE" | "CROSSSLOT") {
            Error::Refused(text.to_string())
        } else {
            Error::Unavailable(text.to_string())
        }
    }

    pub fn is_unavailable(&self) -> bool {
        matches!(self, Error::Unavailable(_))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Unavailable(e) => write!(f, "the store could not answer: {e}"),
            Error::Refused(text) => write!(f, "the module refused the call: {text}"),
            Error::Unexpected(what) => write!(f, "unexpected reply: {what}"),
            Error::InvalidRequest(what) => write!(f, "invalid request: {what}"),
        }
    }
}

impl std::error::Error for Error {}

/// Which implementation of the commands the store runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mode {
    /// The module is loaded: native commands.
    Module,
    /// It is not: `EVALSHA` of [`SCRIPT`].
    Script,
}

impl Mode {
    pub const ALL: [Mode; 2] = [Mode::Module, Mode::Script];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Module => "module",
            Mode::Script => "script",
        }
    }
}

/// The script that stands for the module on a server without it.
pub const SCRIPT: &str = include_str!("../../../scripts/rl.lua");

static SHA: LazyLock<String> = LazyLock::new(|| sha1_smol::Sha1::from(SCRIPT).digest().to_string());

/// The script's SHA1, computed from the text shipped, so it cannot drift from a copy.
pub fn script_sha() -> &'static str {
    SHA.as_str()
}

/// The cluster slot of a key: CRC16 (XMODEM) of the key, or of its hash tag, the text between
/// the first `{` and the next `}` when that is not empty.
pub fn slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = key.get(open + 1..)?;
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| rest.get(..close)).flatten()
    });
    crc16(tagged.unwrap_or(key)) % 16384
}

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_the_hash_tag_rule() {
        // Values from the Redis Cluster specification's examples and `CLUSTER KEYSLOT`.
        assert_eq!(slot(b"123456789"), 12739);
        assert_eq!(slot(b"{user1000}.following"), slot(b"{user1000}.followers"));
        assert_eq!(slot(b"foo{}{bar}"), slot(b"foo{}{bar}"));
        assert_ne!(slot(b"foo{}{bar}"), slot(b"bar"));
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
        assert_eq!(slot(b"foo{bar}{zap}"), slot(b"bar"));
    }

    #[test]
    fn a_script_call_declares_the_keys_and_keeps_the_arguments() {
        let mut admit = Args::new("RL.ADMIT");
        admit.arg("user:17").arg(2u64).arg("1s");
        let words = |v: Vec<Vec<u8>>| -> Vec<String> {
            v.into_iter()
                .map(|a| String::from_utf8(a).unwrap())
                .collect()
        };
        assert_eq!(
            words(admit.encode(Mode::Script).unwrap()),
            [
                "EVALSHA",
                script_sha(),
                "1",
                "user:17",
                "RL.ADMIT",
                "user:17",
                "2",
                "1s"
            ]
        );
        assert_eq!(
            words(admit.encode(Mode::Module).unwrap()),
            ["RL.ADMIT", "user:17", "2", "1s"]
        );
        let mut multi = Args::new("RL.MULTI");
        multi
            .arg(2u64)
            .arg("{t}:a")
            .arg("{t}:b")
            .arg("u")
            .arg(1u64)
            .arg("1s");
        assert_eq!(
            words(multi.encode(Mode::Script).unwrap()),
            [
                "EVALSHA",
                script_sha(),
                "2",
                "{t}:a",
                "{t}:b",
                "RL.MULTI",
                "2",
                "{t}:a",
                "{t}:b",
                "u",
                "1",
                "1s"
            ]
        );
        let mut short = Args::new("RL.MULTI");
        short.arg(3u64).arg("a");
        assert!(matches!(
            short.encode(Mode::Script),
            Err(Error::InvalidRequest(_))
        ));
    }
}
