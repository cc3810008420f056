//! The versioned byte encoding of a limiter.
//!
//! One encoding serves every place a value leaves the process: RDB (and so `DUMP`, `MIGRATE` and
//! an RDB-preamble AOF), the `RL.SETSTATE` effects sent to replicas and the AOF, and
//! `DEBUG DIGEST-VALUE`. Every field is bounds-checked on the way in: a payload that decodes is
//! one some command could have produced.
//!
//! Version 1 layout (little-endian):
//!
//! | bytes | field |
//! |---|---|
//! | 1 | encoding version (1) |
//! | 1 | algorithm code (0 gcra, 1 bucket) |
//! | 8 | limit |
//! | 8 | period in µs |
//! | 8 | capacity (BURST) |
//! | 16 | gcra: TAT (µs × limit); bucket: 8 bytes µs of the count, 16 bytes level in ticks |

use crate::core::error::Error;
use crate::core::limiter::{Limiter, State, Wide};
use crate::core::rule::{Algo, Rule};

pub const VERSION: u8 = 1;
/// Longest encoding of a gcra or bucket limiter.
pub const MAX_RATE_LEN: usize = 50;

/// A fixed-capacity output buffer: encoding never allocates.
pub struct Encoded {
    buf: [u8; MAX_RATE_LEN],
    len: usize,
}

impl Encoded {
    fn push(&mut self, bytes: &[u8]) {
        // The layout is fixed and fits MAX_RATE_LEN; `get_mut` keeps an error from panicking.
        if let Some(dst) = self.buf.get_mut(self.len..self.len + bytes.len()) {
            dst.copy_from_slice(bytes);
            self.len += bytes.len();
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or(&[])
    }
}

pub fn encode(limiter: &Limiter) -> Encoded {
    let mut out = Encoded {
        buf: [0; MAX_RATE_LEN],
        len: 0,
    };
    let rule = limiter.rule();
    out.push(&[VERSION, limiter.algo().code()]);
    out.push(&rule.limit().to_le_bytes());
    out.push(&rule.period_us().to_le_bytes());
    out.push(&rule.burst().to_le_bytes());
    match limiter.state() {
        State::Gcra { tat } => out.push(&tat.get().to_le_bytes()),
        State::Bucket { updated_us, level } => {
            out.push(&updated_us.to_le_bytes());
            out.push(&level.get().to_le_bytes());
        }
    }
    out
}

struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], Error> {
        let (head, tail) = self
            .rest
            .split_first_chunk::<N>()
            .ok_or(Error::BadPayload("truncated"))?;
        self.rest = tail;
        Ok(*head)
    }

    fn u8(&mut self) -> Result<u8, Error> {
        Ok(self.take::<1>()?[0])
    }

    fn u64(&mut self) -> Result<u64, Error> {
        Ok(u64::from_le_bytes(self.take()?))
    }

    fn i128(&mut self) -> Result<i128, Error> {
        Ok(i128::from_le_bytes(self.take()?))
    }
}

pub fn decode(bytes: &[u8]) -> Result<Limiter, Error> {
    let mut r = Reader { rest: bytes };
    match r.u8()? {
        1 => decode_v1(&mut r),
        _ => Err(Error::BadPayload("unknown encoding version")),
    }
}

fn decode_v1(r: &mut Reader<'_>) -> Result<Limiter, Error> {
    let algo = Algo::from_code(r.u8()?).ok_or(Error::BadPayload("unknown algorithm"))?;
    let (limit, period_us, burst) = (r.u64()?, r.u64()?, r.u64()?);
    let rule = Rule::restore(algo, limit, period_us, burst)
        .map_err(|_| Error::BadPayload("parameters out of range"))?;
    let state = match algo {
        Algo::Gcra => State::Gcra {
            tat: Wide::new(r.i128()?),
        },
        Algo::Bucket => State::Bucket {
            updated_us: r.u64()?,
            level: Wide::new(r.i128()?),
        },
        _ => return Err(Error::BadPayload("unknown algorithm")),
    };
    if !r.rest.is_empty() {
        return Err(Error::BadPayload("trailing bytes"));
    }
    Limiter::from_parts(rule, state)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(algo: Algo) -> Limiter {
        let rule = Rule::new(algo, 2, 1_000_000, Some(20)).unwrap();
        let mut l = Limiter::new(algo, rule);
        for _ in 0..7 {
            l.admit(algo, rule, 1, 1_764_000_000_123_456, false)
                .unwrap();
        }
        l
    }

    #[test]
    fn round_trips() {
        for algo in [Algo::Gcra, Algo::Bucket] {
            let l = sample(algo);
            assert_eq!(decode(encode(&l).as_bytes()), Ok(l));
        }
    }

    #[test]
    fn every_truncation_and_extension_is_refused() {
        for algo in [Algo::Gcra, Algo::Bucket] {
            let bytes = encode(&sample(algo)).as_bytes().to_vec();
            for n in 0..bytes.len() {
                assert!(decode(&bytes[..n]).is_err(), "{algo:?} prefix {n}");
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert_eq!(decode(&longer), Err(Error::BadPayload("trailing bytes")));
        }
    }

    #[test]
    fn corrupt_fields_are_refused() {
        let bytes = encode(&sample(Algo::Bucket)).as_bytes().to_vec();
        let corrupt = |at: usize, v: u8| {
            let mut b = bytes.clone();
            b[at] = v;
            decode(&b)
        };
        assert!(corrupt(0, 9).is_err(), "version");
        assert!(corrupt(1, 77).is_err(), "algorithm");
        assert!(corrupt(2, 0).is_err(), "limit 0");
        assert!(corrupt(9, 0xff).is_err(), "limit above the bound");
        assert!(corrupt(17, 0xff).is_err(), "period above the bound");
        assert!(corrupt(49, 0x7f).is_err(), "level above the capacity");
    }

    /// A frozen version-1 payload: decoding it must keep working in every later release.
    #[test]
    fn version_1_fixture_still_loads() {
        let hex = include_str!("../../tests/fixtures/gcra-v1.hex").trim();
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        let l = decode(&bytes).unwrap();
        assert_eq!(l.algo(), Algo::Gcra);
        assert_eq!(
            (l.rule().limit(), l.rule().period_us(), l.rule().burst()),
            (2, 1_000_000, 20)
        );
        // Seven admissions at t = 1_764_000_000.123456 s: full again 3.5 s later.
        assert_eq!(l.full_at_us(), 1_764_000_003_623_456);
    }
}
