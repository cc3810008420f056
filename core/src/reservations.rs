//! Reservations: admit with an estimated cost now, settle the actual cost later. This is what a
//! key keeps of them; reserving and settling on a limiter are `reserve`'s.
//!
//! A reservation remembers the decision it was admitted with (so a retried `RESERVE` with the same
//! id replies the same and spends nothing) and, once settled, the settlement's reply (so a retried
//! `RL.SETTLE` replies the same and changes nothing). Each is forgotten `KEEP` after it was made.

use crate::bounds::{MAX_CLOCK_SKEW_US, MAX_COUNT, MAX_PERIOD_US};
use crate::entries::Entries;

pub use crate::bounds::{DEFAULT_KEEP_US, MAX_ID_LEN, MAX_KEEP_US, MAX_RESERVATIONS};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settlement {
    /// Units debited (positive) or credited (negative) by the settlement, after clamping.
    pub delta: i64,
    pub remaining: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reservation {
    pub estimate: u64,
    /// The admission's reply fields: remaining and reset_after (µs), as first replied.
    pub remaining: u64,
    pub reset_after_us: u64,
    /// When the reservation is forgotten (µs since the epoch).
    pub expires_us: u64,
    pub settled: Option<Settlement>,
}

/// A reservation as kept: its expiry is the entry's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Kept {
    estimate: u64,
    remaining: u64,
    reset_after_us: u64,
    settled: Option<Settlement>,
}

impl Kept {
    fn reservation(self, expires_us: u64) -> Reservation {
        Reservation {
            estimate: self.estimate,
            remaining: self.remaining,
            reset_after_us: self.reset_after_us,
            expires_us,
            settled: self.settled,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Reservations {
    by_id: Entries<Kept>,
}

impl Reservations {
    /// Rebuilds reservations from entries in id order (as `entries()` gives them), so that
    /// every state has one encoding; `None` on a duplicate or another order.
    pub fn from_entries(entries: Vec<(Box<[u8]>, Reservation)>) -> Option<Reservations> {
        if !entries
            .iter()
            .zip(entries.iter().skip(1))
            .all(|(a, b)| a.0 < b.0)
            || entries.len() > MAX_RESERVATIONS
        {
            return None;
        }
        let mut r = Reservations::default();
        for (id, res) in entries {
            if id.is_empty() || id.len() > MAX_ID_LEN {
                return None;
            }
            r.keep(&id, res);
        }
        Some(r)
    }

    /// Forgets the reservations that expired by `now_us`.
    pub(crate) fn prune(&mut self, now_us: u64) {
        self.by_id.prune(now_us);
    }

    pub(crate) fn keep(&mut self, id: &[u8], r: Reservation) {
        let kept = Kept {
            estimate: r.estimate,
            remaining: r.remaining,
            reset_after_us: r.reset_after_us,
            settled: r.settled,
        };
        self.by_id.insert(id, r.expires_us, kept);
    }

    /// Every reservation, in id order.
    pub fn entries(&self) -> impl Iterator<Item = (&[u8], Reservation)> {
        self.by_id
            .by_id()
            .map(|(id, expires_us, kept)| (id, kept.reservation(expires_us)))
    }

    /// The reservation under `id`, unless it was forgotten by `now_us`.
    pub fn get(&self, id: &[u8], now_us: u64) -> Option<Reservation> {
        let (expires_us, kept) = self.by_id.get(id)?;
        (expires_us > now_us).then(|| kept.reservation(expires_us))
    }

    /// Live reservations at `now_us`.
    pub fn live(&self, now_us: u64) -> usize {
        self.by_id.live(now_us)
    }

    /// Records a reservation, dropping the forgotten ones. False when the key already keeps
    /// `MAX_RESERVATIONS`.
    pub fn insert(&mut self, id: &[u8], r: Reservation, now_us: u64) -> bool {
        self.by_id.prune(now_us);
        if self.by_id.len() >= MAX_RESERVATIONS {
            return false;
        }
        self.keep(id, r);
        true
    }

    pub fn settle(&mut self, id: &[u8], s: Settlement, now_us: u64) {
        self.by_id.prune(now_us);
        if let Some(r) = self.by_id.get_mut(id) {
            r.settled = Some(s);
        }
    }

    /// Moves `id`'s forget time to `at_us` (no later than it was).
    pub fn forget_at(&mut self, id: &[u8], at_us: u64) {
        if let Some((expires_us, kept)) = self.by_id.get(id) {
            let (expires_us, kept) = (expires_us.min(at_us), *kept);
            self.by_id.insert(id, expires_us, kept);
        }
    }

    /// When the last reservation is forgotten (0 when there is none).
    pub fn until_us(&self) -> u64 {
        self.by_id.latest()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// True while they are few enough to be kept in one small array (see `entries`).
    pub fn is_few(&self) -> bool {
        self.by_id.is_few()
    }

    /// Why no admission on a clock before `horizon_us` could have made one of these: forgotten
    /// too late, or full too late.
    pub(crate) fn ahead(&self, horizon_us: u64) -> Option<&'static str> {
        self.entries()
            .any(|(_, r)| {
                r.expires_us > horizon_us.saturating_add(MAX_KEEP_US)
                    || r.reset_after_us > MAX_PERIOD_US + MAX_CLOCK_SKEW_US
            })
            .then_some("reservation time is ahead of the server's clock")
    }

    /// Heap bytes outside this struct.
    pub fn heap_bytes(&self) -> usize {
        self.by_id.heap_bytes()
    }
}

/// Counts as some admission and settlement replied them, under any rule there was.
pub(crate) fn sane(r: &Reservation) -> bool {
    (1..=MAX_COUNT).contains(&r.estimate)
        && r.remaining <= MAX_COUNT
        && r.settled
            .is_none_or(|s| s.remaining <= MAX_COUNT && s.delta.unsigned_abs() <= 2 * MAX_COUNT)
}
