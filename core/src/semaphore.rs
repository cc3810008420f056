//! A concurrency semaphore with leases: at most `capacity` holders at once, each until its lease
//! expires. A crashed holder's slot comes back by expiry.
//!
//! Leases are indexed by holder and by expiry, so acquire, release and renew cost O(log n) and
//! finding the earliest expiry is O(1); nothing scans the live leases. Expired leases do not
//! count; they are dropped when the semaphore is next written, so a refusal or a release of an
//! unknown holder changes nothing.

use crate::algorithm::Algorithm;
use crate::bounds::{MAX_PERIOD_US, MAX_SEMAPHORE_CAPACITY};
use crate::entries::Entries;
use crate::error::Error;
use crate::rule::Rule;

/// Longest holder id, in bytes.
pub const MAX_HOLDER_LEN: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Semaphore {
    /// Holder → expiry (µs since the epoch); `None` when there is no lease, so a semaphore
    /// stays two words inside the limiter and one allocation holds its first lease.
    leases: Option<Box<Entries<()>>>,
    /// Sequence number for generated holder ids.
    next_id: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acquire {
    pub acquired: bool,
    pub holder: Vec<u8>,
    pub in_flight: u64,
    pub retry_after_us: u64,
}

impl Semaphore {
    /// Rebuilds a semaphore from (holder, expiry) pairs in the order `leases()` gives them
    /// (earliest expiry first, then by holder), so that every state has one encoding; `None`
    /// on a duplicate holder or another order.
    pub fn from_leases(leases: Vec<(Box<[u8]>, u64)>, next_id: u64) -> Option<Semaphore> {
        let ordered = leases
            .iter()
            .zip(leases.iter().skip(1))
            .all(|(a, b)| (a.1, &a.0) < (b.1, &b.0));
        if !ordered {
            return None;
        }
        let mut s = Semaphore {
            next_id,
            ..Semaphore::default()
        };
        for (holder, expiry) in leases {
            if holder.is_empty() || holder.len() > MAX_HOLDER_LEN || s.holds(&holder, 0) {
                return None;
            }
            s.set(&holder, expiry);
        }
        Some(s)
    }

    /// Leases, earliest expiry first.
    pub fn leases(&self) -> impl Iterator<Item = (&[u8], u64)> {
        self.leases
            .iter()
            .flat_map(|l| l.by_expiry().map(|(expiry, holder, ())| (holder, expiry)))
    }

    pub fn next_id(&self) -> u64 {
        self.next_id
    }

    fn holds(&self, holder: &[u8], now_us: u64) -> bool {
        self.leases
            .as_ref()
            .and_then(|l| l.get(holder))
            .is_some_and(|(e, _)| e > now_us)
    }

    /// Leases still live at `now_us`.
    pub fn in_flight(&self, now_us: u64) -> u64 {
        self.leases.as_ref().map_or(0, |l| l.live(now_us) as u64)
    }

    fn earliest_live(&self, now_us: u64) -> Option<u64> {
        self.leases.as_ref()?.earliest_after(now_us)
    }

    /// Drops the leases that expired by `now_us`.
    fn prune(&mut self, now_us: u64) {
        if let Some(l) = self.leases.as_mut() {
            l.prune(now_us);
        }
        self.drop_if_empty();
    }

    fn set(&mut self, holder: &[u8], expiry: u64) {
        self.leases
            .get_or_insert_default()
            .insert(holder, expiry, ());
    }

    fn remove(&mut self, holder: &[u8]) {
        if let Some(l) = self.leases.as_mut() {
            l.remove(holder);
        }
        self.drop_if_empty();
    }

    fn drop_if_empty(&mut self) {
        if self.leases.as_ref().is_some_and(|l| l.is_empty()) {
            self.leases = None;
        }
    }

    /// Takes (or, for a holder that already has one, renews) a slot until `now + lease_us`.
    /// A holder id is generated when none is given. Changes nothing when refused.
    pub fn acquire(
        &mut self,
        capacity: u64,
        lease_us: u64,
        holder: Option<&[u8]>,
        now_us: u64,
        dry: bool,
    ) -> Acquire {
        let renewing = holder.is_some_and(|h| self.holds(h, now_us));
        let live = self.in_flight(now_us);
        if !renewing && live >= capacity {
            let retry = self.earliest_live(now_us).map_or(0, |e| e - now_us);
            return Acquire {
                acquired: false,
                holder: holder.map(<[u8]>::to_vec).unwrap_or_default(),
                in_flight: live,
                retry_after_us: retry,
            };
        }
        let holder = match holder {
            Some(h) => h.to_vec(),
            None => format!("{now_us:x}-{:x}", self.next_id).into_bytes(),
        };
        let in_flight = if renewing { live } else { live + 1 };
        if !dry {
            self.prune(now_us);
            self.set(&holder, now_us.saturating_add(lease_us));
            if !renewing && self.next_id < u64::MAX {
                self.next_id += 1;
            }
        }
        Acquire {
            acquired: true,
            holder,
            in_flight,
            retry_after_us: 0,
        }
    }

    /// Replays a write made on the primary: drop what expired by `now_us`, then give `holder`
    /// a lease until `expiry_us` (or remove its lease for 0). Deterministic, so a replica
    /// applying it holds the primary's exact state.
    ///
    /// Refused, changing nothing, when no acquire, renew or release at `now_us` could have
    /// written it: an expiry that is not within one longest lease after `now_us`, or one lease
    /// more than the largest capacity (the state could then not be saved and loaded back).
    pub fn apply(
        &mut self,
        holder: &[u8],
        expiry_us: u64,
        now_us: u64,
        next_id: u64,
    ) -> Result<(), Error> {
        if expiry_us != 0 && !(now_us < expiry_us && expiry_us - now_us <= MAX_PERIOD_US) {
            return Err(Error::BadLease);
        }
        let adds = expiry_us != 0 && !self.holds(holder, now_us);
        if adds && self.in_flight(now_us) >= MAX_SEMAPHORE_CAPACITY {
            return Err(Error::TooManyLeases);
        }
        self.prune(now_us);
        if expiry_us == 0 {
            self.remove(holder);
        } else {
            self.set(holder, expiry_us);
        }
        self.next_id = next_id;
        Ok(())
    }

    /// Gives a slot back; false (and no change) when `holder` holds none.
    pub fn release(&mut self, holder: &[u8], now_us: u64) -> bool {
        if !self.holds(holder, now_us) {
            return false;
        }
        self.remove(holder);
        self.prune(now_us);
        true
    }

    /// Extends a live lease to `now + lease_us`; false (and no change) when it has expired.
    pub fn renew(&mut self, holder: &[u8], lease_us: u64, now_us: u64) -> bool {
        if !self.holds(holder, now_us) {
            return false;
        }
        self.prune(now_us);
        self.set(holder, now_us.saturating_add(lease_us));
        true
    }

    /// When the last lease expires; 0 when there is none (the key then equals an absent one).
    pub fn last_expiry_us(&self) -> u64 {
        self.leases.as_ref().map_or(0, |l| l.latest())
    }

    pub fn is_empty(&self) -> bool {
        self.leases.is_none()
    }

    /// Leases kept, expired ones included until the next write drops them.
    pub fn len(&self) -> usize {
        self.leases.as_ref().map_or(0, |l| l.len())
    }

    /// Heap bytes: the leases' allocation and what it holds.
    pub fn heap_bytes(&self) -> usize {
        self.leases
            .as_ref()
            .map_or(0, |l| std::mem::size_of::<Entries<()>>() + l.heap_bytes())
    }
}

// The semaphore leases rather than admits: it answers the inspection, not `Decide`.
impl Algorithm for Semaphore {
    fn fresh(_: &Rule) -> Semaphore {
        Semaphore::default()
    }

    /// Why no command could have written this semaphore: more leases than any capacity.
    fn refused(&self, _: &Rule) -> Option<&'static str> {
        (self.len() > MAX_SEMAPHORE_CAPACITY as usize)
            .then_some("semaphore holds more leases than the largest capacity")
    }

    /// Why no command on a clock before `horizon_us` could have written this semaphore: a lease
    /// ends later than the longest lease from then.
    fn ahead(&self, _: &Rule, horizon_us: u64) -> Option<&'static str> {
        (self.last_expiry_us() > horizon_us.saturating_add(MAX_PERIOD_US))
            .then_some("lease expiry is ahead of the server's clock")
    }

    /// Its times are deadlines, not counts: a clock that stepped back reads them as they are.
    fn time_floor(&self, _: &Rule) -> u64 {
        0
    }

    fn full_at_us(&self, _: &Rule) -> u64 {
        self.last_expiry_us()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000;
    const T0: u64 = 1_764_000_000 * S;

    #[test]
    fn three_exports_in_flight_then_wait_for_the_earliest() {
        let mut s = Semaphore::default();
        for (i, h) in [b"a", b"b", b"c"].iter().enumerate() {
            let r = s.acquire(3, 60 * S, Some(*h), T0 + i as u64 * S, false);
            assert!(r.acquired);
            assert_eq!(r.in_flight, i as u64 + 1);
        }
        let r = s.acquire(3, 60 * S, Some(b"d"), T0 + 10 * S, false);
        assert!(!r.acquired);
        assert_eq!(r.in_flight, 3);
        assert_eq!(r.retry_after_us, 50 * S, "a's lease ends at T0 + 60 s");
        // A crashed holder's slot comes back by expiry.
        let r = s.acquire(3, 60 * S, Some(b"d"), T0 + 60 * S, false);
        assert!(r.acquired);
        assert_eq!(r.in_flight, 3);
        assert_eq!(s.leases().count(), 3, "the expired lease was dropped");
    }

    #[test]
    fn release_is_idempotent_and_renew_after_expiry_fails() {
        let mut s = Semaphore::default();
        s.acquire(3, 10 * S, Some(b"a"), T0, false);
        let before = s.clone();
        assert!(!s.release(b"zz", T0), "not held");
        assert_eq!(s, before);
        assert!(s.release(b"a", T0 + S));
        assert!(!s.release(b"a", T0 + S), "twice");
        s.acquire(3, 10 * S, Some(b"b"), T0, false);
        assert!(!s.release(b"b", T0 + 10 * S), "after expiry");
        assert!(!s.renew(b"b", 10 * S, T0 + 10 * S));
        s.acquire(3, 10 * S, Some(b"c"), T0, false);
        assert!(s.renew(b"c", 30 * S, T0 + 5 * S));
        assert_eq!(s.last_expiry_us(), T0 + 35 * S);
    }

    #[test]
    fn reacquiring_renews_instead_of_taking_a_second_slot() {
        let mut s = Semaphore::default();
        s.acquire(1, 10 * S, Some(b"a"), T0, false);
        let r = s.acquire(1, 10 * S, Some(b"a"), T0 + 5 * S, false);
        assert!(r.acquired);
        assert_eq!(r.in_flight, 1);
        assert_eq!(s.last_expiry_us(), T0 + 15 * S);
    }

    #[test]
    fn generated_holders_are_distinct() {
        let mut s = Semaphore::default();
        let a = s.acquire(5, S, None, T0, false).holder;
        let b = s.acquire(5, S, None, T0, false).holder;
        assert_ne!(a, b);
        assert!(s.release(&a, T0));
    }

    #[test]
    fn large_capacity_stays_logarithmic() {
        let mut s = Semaphore::default();
        for i in 0..5000u64 {
            let h = i.to_string();
            assert!(
                s.acquire(5000, 60 * S, Some(h.as_bytes()), T0 + i, false)
                    .acquired
            );
        }
        assert!(
            !s.acquire(5000, 60 * S, Some(b"x"), T0 + 6000, false)
                .acquired
        );
        assert_eq!(s.in_flight(T0 + 6000), 5000);
    }
}
