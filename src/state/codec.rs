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
//! | … | the algorithm's state, below |
//!
//! | algorithm | state |
//! |---|---|
//! | 0 gcra | TAT in µs × limit (i128) |
//! | 1 bucket | µs of the count (u64), level in ticks (i128) |
//! | 2 window | window start µs (u64), count (u64) |
//! | 3 sliding | window start µs (u64), previous count (u64), current count (u64) |
//! | 4 log | entry count (u32), then per entry: µs (u64), cost (u32), oldest first |

use std::collections::VecDeque;

use smallvec::SmallVec;

use crate::core::error::Error;
use crate::core::limiter::{Limiter, State, Wide};
use crate::core::log::{Entry, Log};
use crate::core::rule::{Algo, Rule, MAX_LOG_LIMIT};
use crate::core::window::{Fixed, Sliding};

pub const VERSION: u8 = 1;

/// An encoding; the fixed-size states fit inline, so encoding them never allocates.
pub struct Encoded(SmallVec<[u8; 64]>);

impl Encoded {
    fn push(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

pub fn encode(limiter: &Limiter) -> Encoded {
    let mut out = Encoded(SmallVec::new());
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
        State::Window(w) => {
            out.push(&w.start_us.to_le_bytes());
            out.push(&w.count.to_le_bytes());
        }
        State::Sliding(s) => {
            out.push(&s.start_us.to_le_bytes());
            out.push(&s.previous.to_le_bytes());
            out.push(&s.current.to_le_bytes());
        }
        State::Log(log) => {
            let entries = log.entries();
            // A log holds at most MAX_LOG_LIMIT entries, which fits u32.
            out.push(
                &u32::try_from(entries.len())
                    .unwrap_or(u32::MAX)
                    .to_le_bytes(),
            );
            for e in entries {
                out.push(&e.at_us.to_le_bytes());
                out.push(&e.cost.to_le_bytes());
            }
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

    fn u32(&mut self) -> Result<u32, Error> {
        Ok(u32::from_le_bytes(self.take()?))
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
        Algo::Window => State::Window(Fixed {
            start_us: r.u64()?,
            count: r.u64()?,
        }),
        Algo::Sliding => State::Sliding(Sliding {
            start_us: r.u64()?,
            previous: r.u64()?,
            current: r.u64()?,
        }),
        Algo::Log => {
            let n = r.u32()?;
            if u64::from(n) > MAX_LOG_LIMIT {
                return Err(Error::BadPayload("log longer than its largest limit"));
            }
            // Each entry takes 12 bytes: check the length before reserving memory for it.
            if r.rest.len() != n as usize * 12 {
                return Err(Error::BadPayload("log length does not match its entries"));
            }
            let mut entries = VecDeque::with_capacity(n as usize);
            for _ in 0..n {
                entries.push_back(Entry {
                    at_us: r.u64()?,
                    cost: r.u32()?,
                });
            }
            let log = Log::from_entries(entries).ok_or(Error::BadPayload("log out of order"))?;
            State::Log(Box::new(log))
        }
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
        let burst = matches!(algo, Algo::Gcra | Algo::Bucket).then_some(20);
        let rule = Rule::new(algo, 20, 1_000_000, burst).unwrap();
        let mut l = Limiter::new(algo, rule);
        for i in 0..7 {
            let now = 1_764_000_000_123_456 + i * 1000;
            l.admit(algo, rule, 1 + i % 2, now, false).unwrap();
        }
        l
    }

    #[test]
    fn round_trips() {
        for algo in Algo::ALL {
            let l = sample(algo);
            assert_eq!(decode(encode(&l).as_bytes()), Ok(l));
        }
    }

    #[test]
    fn every_truncation_and_extension_is_refused() {
        for algo in Algo::ALL {
            let bytes = encode(&sample(algo)).as_bytes().to_vec();
            for n in 0..bytes.len() {
                assert!(decode(&bytes[..n]).is_err(), "{algo:?} prefix {n}");
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert!(decode(&longer).is_err(), "{algo:?} with a trailing byte");
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

    #[test]
    fn corrupt_logs_are_refused() {
        let bytes = encode(&sample(Algo::Log)).as_bytes().to_vec();
        assert!(decode(&bytes).is_ok());
        let mut count = bytes.clone();
        count[26] += 1;
        assert!(
            decode(&count).is_err(),
            "entry count larger than the entries"
        );
        let mut huge = bytes.clone();
        huge[26..30].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(
            decode(&huge).is_err(),
            "entry count beyond the largest limit"
        );
        let mut order = bytes.clone();
        order[30..38].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(decode(&order).is_err(), "entries out of order");
        let mut zero = bytes.clone();
        zero[38..42].copy_from_slice(&0u32.to_le_bytes());
        assert!(decode(&zero).is_err(), "an entry of cost 0");
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
