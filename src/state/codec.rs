//! The versioned byte encoding of a limiter.
//!
//! One encoding serves every place a value leaves the process: RDB (and so `DUMP`, `MIGRATE` and
//! an RDB-preamble AOF), the `RL.SETSTATE` effects sent to replicas and the AOF, and
//! `DEBUG DIGEST-VALUE`. Every field is bounds-checked on the way in: a payload that decodes is
//! one some command could have produced. Given this server's clock, decoding also refuses times
//! further ahead of it than the tolerated clock skew (see `Limiter::check_times`).
//!
//! Layout (little-endian):
//!
//! | bytes | field |
//! |---|---|
//! | 1 | encoding version (2; version 1 is still read) |
//! | 1 | algorithm code |
//! | 8 | limit (the capacity for a semaphore) |
//! | 8 | period in µs (the lease for a semaphore) |
//! | 8 | capacity (BURST) |
//! | … | the algorithm's state, below |
//! | … | version 2: reservations, below |
//!
//! | algorithm | state |
//! |---|---|
//! | 0 gcra | TAT in µs × limit (i128) |
//! | 1 bucket | µs of the count (u64), level in ticks (i128) |
//! | 2 window | window start µs (u64), count (u64) |
//! | 3 sliding | window start µs (u64), previous count (u64), current count (u64) |
//! | 4 log | entry count (u32), then per entry: µs (u64), cost (u32), oldest first |
//! | 5 semaphore | next generated id (u64), lease count (u32), then per lease: holder length (u16), holder, expiry µs (u64), earliest first |
//!
//! Reservations (version 2): count (u32), then per reservation in id order: id length (u16),
//! id, estimate (u64), remaining (u64), reset_after µs (u64), forgotten at µs (u64), settled
//! (u8 0 or 1), and when settled: delta (i64), remaining (u64).

use std::collections::VecDeque;

use smallvec::SmallVec;

use crate::core::bucket::Bucket;
use crate::core::error::Error;
use crate::core::gcra::Gcra;
use crate::core::limiter::{Limiter, State, Wide};
use crate::core::log::{Entry, Log};
use crate::core::reservations::{
    Reservation, Reservations, Settlement, MAX_ID_LEN, MAX_RESERVATIONS,
};
use crate::core::rule::{Algo, Rule, MAX_LOG_LIMIT, MAX_SEMAPHORE_CAPACITY};
use crate::core::semaphore::{Semaphore, MAX_HOLDER_LEN};
use crate::core::sliding::Sliding;
use crate::core::window::Fixed;

pub const VERSION: u8 = 2;

/// An encoding; the fixed-size states fit inline, so encoding them never allocates.
pub struct Encoded(SmallVec<[u8; 64]>);

impl Encoded {
    fn push(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }

    fn push_bytes(&mut self, bytes: &[u8]) {
        // Ids and holders are at most 256 bytes, which fits u16.
        self.push(&u16::try_from(bytes.len()).unwrap_or(u16::MAX).to_le_bytes());
        self.push(bytes);
    }

    fn push_count(&mut self, n: usize) {
        // Every collection is bounded far below u32::MAX.
        self.push(&u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes());
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// The fixed-size start of an encoding, written in place.
struct Head {
    buf: [u8; HEAD_CAPACITY],
    len: usize,
}

/// Header (26 bytes), the largest fixed-size state (`bucket` and `sliding`, 24 bytes) and an
/// empty reservation count (4 bytes).
const HEAD_CAPACITY: usize = 64;
const _: () = assert!(2 + 3 * 8 + 24 + 4 <= HEAD_CAPACITY);

impl Default for Head {
    fn default() -> Self {
        Head {
            buf: [0; HEAD_CAPACITY],
            len: 0,
        }
    }
}

impl Head {
    /// Appends `bytes`. Its callers write at most 54 bytes in all, so everything fits;
    /// `encodings_are_the_frozen_bytes` below would catch a field that did not.
    fn put(&mut self, bytes: &[u8]) {
        let end = self.len.saturating_add(bytes.len());
        if let Some(dst) = self.buf.get_mut(self.len..end) {
            dst.copy_from_slice(bytes);
            self.len = end;
        }
    }

    fn into_encoded(self) -> Encoded {
        Encoded(SmallVec::from_buf_and_len(self.buf, self.len))
    }
}

pub fn encode(limiter: &Limiter) -> Encoded {
    encode_parts(limiter, true)
}

/// The encoding of the limiter's rule and state alone, as if it held no reservation: what
/// `RL.RESERVESET` sends with the one reservation that changed.
pub fn encode_without_reservations(limiter: &Limiter) -> Encoded {
    encode_parts(limiter, false)
}

fn encode_parts(limiter: &Limiter, with_reservations: bool) -> Encoded {
    let rule = limiter.rule();
    // The header and a fixed-size state (at most 50 bytes) are written into a plain array and
    // handed to the vector whole: one `extend_from_slice` per field cost about 60 instructions
    // each, a good part of an `RL.ADMIT`'s effect with a replica attached.
    let mut head = Head::default();
    head.put(&[VERSION, limiter.algo().code()]);
    head.put(&rule.limit().to_le_bytes());
    head.put(&rule.period_us().to_le_bytes());
    head.put(&rule.burst().to_le_bytes());
    match limiter.state() {
        State::Gcra(g) => head.put(&g.tat.get().to_le_bytes()),
        State::Bucket(b) => {
            head.put(&b.updated_us.to_le_bytes());
            head.put(&b.level.get().to_le_bytes());
        }
        State::Window(w) => {
            head.put(&w.start_us.to_le_bytes());
            head.put(&w.count.to_le_bytes());
        }
        State::Sliding(s) => {
            head.put(&s.start_us.to_le_bytes());
            head.put(&s.previous.to_le_bytes());
            head.put(&s.current.to_le_bytes());
        }
        State::Log(_) | State::Semaphore(_) => {}
    }
    let reservations: Vec<_> = limiter
        .reservations()
        .filter(|_| with_reservations)
        .map(|r| r.entries().collect())
        .unwrap_or_default();
    let variable = matches!(limiter.state(), State::Log(_) | State::Semaphore(_));
    if !variable && reservations.is_empty() {
        // The common case (every write of `RL.ADMIT` without reservations): one copy in all.
        head.put(&0u32.to_le_bytes());
        return head.into_encoded();
    }
    let mut out = head.into_encoded();
    match limiter.state() {
        State::Log(log) => {
            let entries = log.entries();
            out.push_count(entries.len());
            for e in entries {
                out.push(&e.at_us.to_le_bytes());
                out.push(&e.cost.to_le_bytes());
            }
        }
        State::Semaphore(s) => {
            out.push(&s.next_id().to_le_bytes());
            out.push_count(s.leases().count());
            for (holder, expiry) in s.leases() {
                out.push_bytes(holder);
                out.push(&expiry.to_le_bytes());
            }
        }
        _ => {}
    }
    out.push_count(reservations.len());
    for (id, r) in reservations {
        out.push_bytes(id);
        for v in [r.estimate, r.remaining, r.reset_after_us, r.expires_us] {
            out.push(&v.to_le_bytes());
        }
        match r.settled {
            None => out.push(&[0]),
            Some(s) => {
                out.push(&[1]);
                out.push(&s.delta.to_le_bytes());
                out.push(&s.remaining.to_le_bytes());
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

    fn i64(&mut self) -> Result<i64, Error> {
        Ok(i64::from_le_bytes(self.take()?))
    }

    fn i128(&mut self) -> Result<i128, Error> {
        Ok(i128::from_le_bytes(self.take()?))
    }

    /// A length-prefixed byte string of at most `max` bytes.
    fn bytes(&mut self, max: usize) -> Result<Box<[u8]>, Error> {
        let len = usize::from(u16::from_le_bytes(self.take()?));
        if len == 0 || len > max || len > self.rest.len() {
            return Err(Error::BadPayload("bad id length"));
        }
        let (head, tail) = self.rest.split_at(len);
        self.rest = tail;
        Ok(head.into())
    }

    /// A count of at most `max` items of at least `min_size` bytes each: checked against the
    /// bytes left before anything is allocated for them.
    fn count(&mut self, max: u64, min_size: usize) -> Result<usize, Error> {
        let n = self.u32()?;
        let n_usize = usize::try_from(n).map_err(|_| Error::BadPayload("count"))?;
        if u64::from(n) > max || n_usize.saturating_mul(min_size) > self.rest.len() {
            return Err(Error::BadPayload("count does not match the payload"));
        }
        Ok(n_usize)
    }
}

/// Decodes a payload; with `now_us`, a state from elsewhere, also checked against this clock.
pub fn decode(bytes: &[u8], now_us: Option<u64>) -> Result<Limiter, Error> {
    let mut r = Reader { rest: bytes };
    let version = r.u8()?;
    if !(1..=VERSION).contains(&version) {
        return Err(Error::BadPayload("unknown encoding version"));
    }
    let algo = Algo::from_code(r.u8()?).ok_or(Error::BadPayload("unknown algorithm"))?;
    if version == 1 && algo == Algo::Semaphore {
        return Err(Error::BadPayload("unknown algorithm"));
    }
    let (limit, period_us, burst) = (r.u64()?, r.u64()?, r.u64()?);
    let rule = Rule::restore(algo, limit, period_us, burst)
        .map_err(|_| Error::BadPayload("parameters out of range"))?;
    let state = match algo {
        Algo::Gcra => State::Gcra(Gcra {
            tat: Wide::new(r.i128()?),
        }),
        Algo::Bucket => State::Bucket(Bucket {
            updated_us: r.u64()?,
            level: Wide::new(r.i128()?),
        }),
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
            let n = r.count(MAX_LOG_LIMIT, 12)?;
            let mut entries = VecDeque::with_capacity(n);
            for _ in 0..n {
                entries.push_back(Entry {
                    at_us: r.u64()?,
                    cost: r.u32()?,
                });
            }
            let log = Log::from_entries(entries).ok_or(Error::BadPayload("log out of order"))?;
            State::Log(Box::new(log))
        }
        Algo::Semaphore => {
            let next_id = r.u64()?;
            let n = r.count(MAX_SEMAPHORE_CAPACITY, 11)?;
            let mut leases = Vec::with_capacity(n);
            for _ in 0..n {
                leases.push((r.bytes(MAX_HOLDER_LEN)?, r.u64()?));
            }
            let s = Semaphore::from_leases(leases, next_id)
                .ok_or(Error::BadPayload("leases out of order"))?;
            State::Semaphore(s)
        }
    };
    let mut limiter = Limiter::from_parts(rule, state)?;
    if version >= 2 {
        let n = r.count(MAX_RESERVATIONS as u64, 36)?;
        let mut entries = Vec::with_capacity(n);
        for _ in 0..n {
            let id = r.bytes(MAX_ID_LEN)?;
            let (estimate, remaining, reset_after_us, expires_us) =
                (r.u64()?, r.u64()?, r.u64()?, r.u64()?);
            let settled = match r.u8()? {
                0 => None,
                1 => Some(Settlement {
                    delta: r.i64()?,
                    remaining: r.u64()?,
                }),
                _ => return Err(Error::BadPayload("bad settlement flag")),
            };
            let res = Reservation {
                estimate,
                remaining,
                reset_after_us,
                expires_us,
                settled,
            };
            entries.push((id, res));
        }
        let reservations =
            Reservations::from_entries(entries).ok_or(Error::BadPayload("ids out of order"))?;
        limiter = limiter.with_reservations(reservations)?;
    }
    if !r.rest.is_empty() {
        return Err(Error::BadPayload("trailing bytes"));
    }
    if let Some(now_us) = now_us {
        limiter.check_times(now_us)?;
    }
    Ok(limiter)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ask::Ask;

    fn sample(algo: Algo) -> Limiter {
        let burst = matches!(algo, Algo::Gcra | Algo::Bucket).then_some(20);
        let rule = Rule::new(algo, 20, 1_000_000, burst).unwrap();
        let mut l = Limiter::new(algo, rule);
        for i in 0..7 {
            let now = 1_764_000_000_123_456 + i * 1000;
            match algo {
                Algo::Semaphore => {
                    let holder = format!("worker-{i}");
                    let h = (i % 2 == 0).then_some(holder.as_bytes());
                    assert!(l.acquire(rule, h, now, false).unwrap().acquired);
                }
                Algo::Gcra | Algo::Bucket if i % 3 == 0 => {
                    let id = format!("export-{i}");
                    l.reserve_ask(Ask::new(algo, rule, 2), id.as_bytes(), 3_600_000_000, now)
                        .unwrap();
                    if i == 3 {
                        l.settle(id.as_bytes(), 5, now).unwrap();
                    }
                }
                _ => {
                    l.admit(algo, rule, 1 + i % 2, now, false).unwrap();
                }
            }
        }
        l
    }

    #[test]
    fn round_trips() {
        for algo in Algo::ALL {
            let l = sample(algo);
            assert_eq!(decode(encode(&l).as_bytes(), None), Ok(l));
        }
    }

    #[test]
    fn every_truncation_and_extension_is_refused() {
        for algo in Algo::ALL {
            let bytes = encode(&sample(algo)).as_bytes().to_vec();
            for n in 0..bytes.len() {
                assert!(decode(&bytes[..n], None).is_err(), "{algo:?} prefix {n}");
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert!(
                decode(&longer, None).is_err(),
                "{algo:?} with a trailing byte"
            );
        }
    }

    #[test]
    fn corrupt_fields_are_refused() {
        let bytes = encode(&sample(Algo::Bucket)).as_bytes().to_vec();
        let corrupt = |at: usize, v: u8| {
            let mut b = bytes.clone();
            b[at] = v;
            decode(&b, None)
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
        assert!(decode(&bytes, None).is_ok());
        let mut count = bytes.clone();
        count[26] += 1;
        assert!(
            decode(&count, None).is_err(),
            "entry count larger than the entries"
        );
        let mut huge = bytes.clone();
        huge[26..30].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(
            decode(&huge, None).is_err(),
            "entry count beyond the largest limit"
        );
        let mut order = bytes.clone();
        order[30..38].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(decode(&order, None).is_err(), "entries out of order");
        let mut zero = bytes.clone();
        zero[38..42].copy_from_slice(&0u32.to_le_bytes());
        assert!(decode(&zero, None).is_err(), "an entry of cost 0");
    }

    /// Every shape's encoding, byte for byte as the earlier encoder wrote it: replicas, AOF
    /// files and RDB files of either side read the same bytes.
    #[test]
    fn encodings_are_the_frozen_bytes() {
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        let got: Vec<String> = Algo::ALL
            .into_iter()
            .flat_map(|algo| {
                let l = sample(algo);
                [
                    hex(encode(&l).as_bytes()),
                    hex(encode_without_reservations(&l).as_bytes()),
                ]
            })
            .collect();
        assert_eq!(got, FROZEN);
    }

    const FROZEN: [&str; 12] = [
        concat!(
            "0200140000000000000040420f00000000001400000000000000c08eb71cf9567d00000000000000",
            "00000300000008006578706f72742d3002000000000000001200000000000000a086010000000000",
            "40c6f7175a4406000008006578706f72742d3302000000000000000d00000000000000784b050000",
            "000000f8d1f7175a4406000103000000000000000a0000000000000008006578706f72742d360200",
            "0000000000000500000000000000405a0b0000000000b0ddf7175a44060000",
        ),
        concat!(
            "0200140000000000000040420f00000000001400000000000000c08eb71cf9567d00000000000000",
            "000000000000",
        ),
        concat!(
            "0201140000000000000040420f00000000001400000000000000b03964415944060000204e000000",
            "000000000000000000000300000008006578706f72742d3002000000000000001200000000000000",
            "a08601000000000040c6f7175a4406000008006578706f72742d3302000000000000000d00000000",
            "000000784b050000000000f8d1f7175a4406000103000000000000000a0000000000000008006578",
            "706f72742d3602000000000000000500000000000000405a0b0000000000b0ddf7175a44060000",
        ),
        concat!(
            "0201140000000000000040420f00000000001400000000000000b03964415944060000204e000000",
            "0000000000000000000000000000",
        ),
        concat!(
            "0202140000000000000040420f0000000000140000000000000000406241594406000a0000000000",
            "000000000000",
        ),
        concat!(
            "0202140000000000000040420f0000000000140000000000000000406241594406000a0000000000",
            "000000000000",
        ),
        concat!(
            "0203140000000000000040420f000000000014000000000000000040624159440600000000000000",
            "00000a0000000000000000000000",
        ),
        concat!(
            "0203140000000000000040420f000000000014000000000000000040624159440600000000000000",
            "00000a0000000000000000000000",
        ),
        concat!(
            "0204140000000000000040420f000000000014000000000000000700000040226441594406000100",
            "0000282664415944060002000000102a64415944060001000000f82d64415944060002000000e031",
            "64415944060001000000c83564415944060002000000b0396441594406000100000000000000",
        ),
        concat!(
            "0204140000000000000040420f000000000014000000000000000700000040226441594406000100",
            "0000282664415944060002000000102a64415944060001000000f82d64415944060002000000e031",
            "64415944060001000000c83564415944060002000000b0396441594406000100000000000000",
        ),
        concat!(
            "0205140000000000000040420f000000000014000000000000000700000000000000070000000800",
            "776f726b65722d3080647341594406000f00363434353934313634323632382d3168687341594406",
            "000800776f726b65722d32506c7341594406000f00363434353934313634326466382d3338707341",
            "594406000800776f726b65722d3420747341594406000f00363434353934313634333563382d3508",
            "787341594406000800776f726b65722d36f07b73415944060000000000",
        ),
        concat!(
            "0205140000000000000040420f000000000014000000000000000700000000000000070000000800",
            "776f726b65722d3080647341594406000f00363434353934313634323632382d3168687341594406",
            "000800776f726b65722d32506c7341594406000f00363434353934313634326466382d3338707341",
            "594406000800776f726b65722d3420747341594406000f00363434353934313634333563382d3508",
            "787341594406000800776f726b65722d36f07b73415944060000000000",
        ),
    ];

    /// A frozen version-1 payload: decoding it must keep working in every later release.
    #[test]
    fn version_1_fixture_still_loads() {
        let hex = include_str!("../../tests/fixtures/gcra-v1.hex").trim();
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        let l = decode(&bytes, None).unwrap();
        assert_eq!(l.algo(), Algo::Gcra);
        assert_eq!(
            (l.rule().limit(), l.rule().period_us(), l.rule().burst()),
            (2, 1_000_000, 20)
        );
        // Seven admissions at t = 1_764_000_000.123456 s: full again 3.5 s later.
        assert_eq!(l.full_at_us(), 1_764_000_003_623_456);
    }
}
