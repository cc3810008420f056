//! `RESERVE` and `RL.SETTLE` on a limiter: admit an estimate now, settle the actual cost later,
//! and replay either on a replica (`RL.RESERVESET`).
//!
//! Built on the limiter (it decides through [`Limiter::admit`] and stores levels through the
//! rate arithmetic); what a key keeps of its reservations is the plain data of `reservations`,
//! which the limiter holds without importing this.

use crate::ask::Ask;
use crate::bounds::{MAX_KEEP_US, MAX_RESERVATIONS};
use crate::error::Error;
use crate::limiter::{Limiter, State};
use crate::rate::{self, Decision};
use crate::reservations::{sane, Reservation, Reservations, Settlement};
use crate::rule::Family;

impl Limiter {
    /// Attaches decoded reservations (only gcra and bucket keys take them).
    pub fn with_reservations(mut self, r: Reservations) -> Result<Limiter, Error> {
        if r.is_empty() {
            return Ok(self);
        }
        if self.algo().family() != Family::Rate {
            return Err(Error::BadPayload("reservations on a key that takes none"));
        }
        if !r.entries().all(|(_, r)| sane(&r)) {
            return Err(Error::BadPayload("reservation count out of range"));
        }
        self.reservations = Some(Box::new(r));
        Ok(self)
    }

    pub fn reservations(&self) -> Option<&Reservations> {
        self.reservations.as_deref()
    }

    /// Takes the reservations out, leaving a limiter without any (a valid state).
    pub fn take_reservations(&mut self) -> Option<Reservations> {
        self.reservations.take().map(|r| *r)
    }

    /// `RESERVE id`: admits the ask's cost as an estimate and remembers the decision under `id`
    /// until `keep_us` from now. A retry with a live `id` replies the original decision and
    /// spends nothing. The flag tells whether a reservation was made.
    pub fn reserve_ask(
        &mut self,
        ask: Ask,
        id: &[u8],
        keep_us: u64,
        now_us: u64,
    ) -> Result<(Decision, bool), Error> {
        if ask.algo.family() != Family::Rate || self.algo().family() != Family::Rate {
            return Err(Error::ReserveNeedsRate);
        }
        if let Some(r) = self.reservations.as_ref().and_then(|rs| rs.get(id, now_us)) {
            // The original reply, but never more than the key's capacity now (a later call
            // may have lowered BURST).
            let original = Decision {
                allowed: true,
                remaining: r.remaining.min(self.rule.burst()),
                retry_after_us: 0,
                reset_after_us: r.reset_after_us,
                capacity: self.rule.burst(),
            };
            return Ok((original, false));
        }
        let live = self.reservations.as_ref().map_or(0, |r| r.live(now_us));
        if live >= MAX_RESERVATIONS {
            return Err(Error::TooManyReservations);
        }
        let d = self.admit_ask(ask, now_us)?;
        let reserved = d.allowed && !ask.dry_run;
        if reserved {
            let r = Reservation {
                estimate: ask.cost,
                remaining: d.remaining,
                reset_after_us: d.reset_after_us,
                expires_us: now_us.saturating_add(keep_us),
                settled: None,
            };
            self.reservations
                .get_or_insert_default()
                .insert(id, r, now_us);
        }
        Ok((d, reserved))
    }

    /// Settles reservation `id` with the `actual` cost: the difference from the estimate is
    /// debited (the level may go down to minus the capacity) or credited (never above the
    /// capacity). `None` for an unknown or forgotten id. Settling again replies the first
    /// settlement and changes nothing; the flag tells whether this call changed the state.
    pub fn settle(&mut self, id: &[u8], actual: u64, now_us: u64) -> Option<(Settlement, bool)> {
        self.settle_then(id, actual, now_us, false)
    }

    /// [`Limiter::settle`], then, with `forget`, the reservation is forgotten a microsecond
    /// later (the least time a replica's replay can be told): a retried settlement then
    /// replies nil, and `RESERVE id` reserves anew. Forgetting a settled reservation replies
    /// its first settlement and changes only its forget time.
    pub fn settle_then(
        &mut self,
        id: &[u8],
        actual: u64,
        now_us: u64,
        forget: bool,
    ) -> Option<(Settlement, bool)> {
        let r = self.reservations.as_ref()?.get(id, now_us)?;
        if let Some(done) = r.settled {
            if forget {
                self.forget_after(id, now_us);
            }
            return Some((done, forget));
        }
        let delta = i128::from(actual) - i128::from(r.estimate);
        let rule = self.rule;
        let (cap, token) = (rate::capacity(&rule), rate::token(&rule));
        // A clock that stepped back settles on the key's own time line, as admissions decide:
        // a level read before the last write would credit capacity that was never spent.
        let at = now_us.max(self.time_floor());
        let level = self.level_at(at);
        let after = (level - delta * token).clamp(-cap, cap);
        self.store(self.algo(), rule, after, at);
        // What was applied: the whole difference, or less where a bound clamped it (in whole
        // units, toward zero).
        let applied = if after == level - delta * token {
            delta
        } else {
            (level - after) / token
        };
        let s = Settlement {
            delta: i64::try_from(applied).unwrap_or(i64::MAX),
            remaining: u64::try_from(after.max(0) / token).unwrap_or(0),
        };
        if let Some(rs) = self.reservations.as_mut() {
            rs.settle(id, s, now_us);
        }
        if forget {
            self.forget_after(id, now_us);
        }
        Some((s, true))
    }

    /// Forgets `id` a microsecond after `now_us`, first dropping the reservations forgotten by
    /// then: `RL.RESERVESET` replays every change at `now_us` that way, so a replica holds the
    /// same reservations (a settled one forgotten without this would keep expired ones a
    /// replica drops, and their digests would differ).
    fn forget_after(&mut self, id: &[u8], now_us: u64) {
        if let Some(rs) = self.reservations.as_mut() {
            rs.prune(now_us);
            rs.forget_at(id, now_us.saturating_add(1));
        }
    }

    /// Replays one reservation change made on a primary at `now_us` (`RL.RESERVESET`): the key
    /// becomes `to`, the rate state the primary wrote (without reservations), and keeps the
    /// reservations it had (when it held a rate state) but those forgotten by `now_us`, with
    /// `id`'s set to `r`. The primary did exactly this, so a replica holds its exact state, in
    /// O(log n) rather than a copy of every reservation.
    ///
    /// Refused, changing nothing, when no reserve or settle at `now_us` could have written it.
    pub fn replay_reservation(
        &mut self,
        to: Limiter,
        id: &[u8],
        r: Reservation,
        now_us: u64,
    ) -> Result<(), Error> {
        if to.algo().family() != Family::Rate || to.reservations.is_some() {
            return Err(Error::BadPayload(
                "a reservation goes with a gcra or bucket state without reservations",
            ));
        }
        // No bound on `reset_after_us`: a clock that stepped back lengthens it without limit.
        let keep = r.expires_us.saturating_sub(now_us);
        if !sane(&r) || keep == 0 || keep > MAX_KEEP_US {
            return Err(Error::BadPayload("reservation out of range"));
        }
        let kept = match self.algo().family() {
            Family::Rate => self.reservations.as_deref(),
            _ => None,
        };
        let others = kept.map_or(0, |k| {
            k.live(now_us) - usize::from(k.get(id, now_us).is_some())
        });
        if others >= MAX_RESERVATIONS {
            return Err(Error::TooManyReservations);
        }
        let mut kept = match self.algo().family() {
            Family::Rate => self.reservations.take(),
            _ => None,
        };
        *self = to;
        let rs = kept.get_or_insert_default();
        rs.prune(now_us);
        rs.keep(id, r);
        self.reservations = kept;
        Ok(())
    }

    /// Units owed (gcra and bucket after settlements that cost more than reserved).
    pub fn debt(&self, now_us: u64) -> u64 {
        let now_us = now_us.max(self.time_floor());
        match self.state {
            State::Gcra(_) | State::Bucket(_) => {
                let owed = (-self.level_at(now_us)).max(0);
                let token = rate::token(&self.rule);
                u64::try_from((owed + token - 1) / token).unwrap_or(u64::MAX)
            }
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::ask::Ask;
    use crate::limiter::Limiter;
    use crate::rule::{Algo, Rule};

    const S: u64 = 1_000_000;
    const T0: u64 = 1_764_000_000 * S;
    const HOUR: u64 = 3600 * S;

    /// A per-user read bucket: capacity 20, refilled at 2 per second.
    fn read_bucket(algo: Algo) -> (Limiter, Rule) {
        let rule = Rule::new(algo, 2, S, Some(20)).unwrap();
        (Limiter::new(algo, rule), rule)
    }

    #[test]
    fn an_export_that_cost_14_debits_4_more() {
        for algo in [Algo::Gcra, Algo::Bucket] {
            let (mut l, rule) = read_bucket(algo);
            let (d, _) = l
                .reserve_ask(Ask::new(algo, rule, 10), b"exp-1", HOUR, T0)
                .unwrap();
            assert_eq!((d.allowed, d.remaining), (true, 10));
            let (s, changed) = l.settle(b"exp-1", 14, T0).unwrap();
            assert!(changed);
            assert_eq!((s.delta, s.remaining), (4, 6));
            // Retried: same reply, nothing changes.
            let before = l.clone();
            assert_eq!(l.settle(b"exp-1", 14, T0), Some((s, false)));
            assert_eq!(l, before);
        }
    }

    #[test]
    fn a_clock_that_stepped_back_settles_on_the_keys_time_line() {
        for algo in [Algo::Gcra, Algo::Bucket] {
            let (mut l, rule) = read_bucket(algo);
            l.reserve_ask(Ask::new(algo, rule, 10), b"exp-4", HOUR, T0)
                .unwrap();
            let (s, changed) = l.settle(b"exp-4", 6, T0 - 20 * S).unwrap();
            assert!(changed);
            // The whole credit, no more; `remaining` is read at the key's time, which for gcra
            // is a lower bound of when it was written, so it may count less refill.
            assert_eq!(s.delta, -4, "{algo:?}");
            assert!(s.remaining <= 14, "{algo:?}: {s:?}");
            let now = l.admit(algo, rule, 0, T0, true).unwrap();
            assert_eq!(now.remaining, 14, "{algo:?}");
        }
    }

    #[test]
    fn an_export_that_cost_6_credits_4_but_never_above_capacity() {
        for algo in [Algo::Gcra, Algo::Bucket] {
            let (mut l, rule) = read_bucket(algo);
            l.reserve_ask(Ask::new(algo, rule, 10), b"exp-2", HOUR, T0)
                .unwrap();
            let (s, _) = l.settle(b"exp-2", 6, T0).unwrap();
            assert_eq!((s.delta, s.remaining), (-4, 14));
            // A credit larger than what was spent stops at the capacity.
            l.reserve_ask(Ask::new(algo, rule, 1), b"exp-3", HOUR, T0)
                .unwrap();
            let (s, _) = l.settle(b"exp-3", 0, T0 + 60 * S).unwrap();
            assert_eq!(
                (s.delta, s.remaining),
                (0, 20),
                "already full: nothing to credit"
            );
        }
    }

    #[test]
    fn debt_refuses_until_refill_repays_it_and_is_bounded_by_the_capacity() {
        for algo in [Algo::Gcra, Algo::Bucket] {
            let (mut l, rule) = read_bucket(algo);
            l.reserve_ask(Ask::new(algo, rule, 20), b"big", HOUR, T0)
                .unwrap();
            // Actual 100: the balance stops at -20 (minus the capacity), so 20 of the 80 apply.
            let (s, _) = l.settle(b"big", 100, T0).unwrap();
            assert_eq!((s.delta, s.remaining), (20, 0));
            assert_eq!(l.debt(T0), 20);
            let d = l.admit(algo, rule, 1, T0, false).unwrap();
            assert!(!d.allowed);
            // 20 owed plus 1 to spend at 2 per second: 10.5 s.
            assert_eq!(d.retry_after_ms(), 10_500);
            assert!(
                l.admit(algo, rule, 1, T0 + 10_500_000, false)
                    .unwrap()
                    .allowed
            );
        }
    }

    #[test]
    fn a_retried_reserve_replies_the_original_without_spending() {
        let (mut l, rule) = read_bucket(Algo::Gcra);
        let (first, changed) = l
            .reserve_ask(Ask::new(Algo::Gcra, rule, 5), b"r", HOUR, T0)
            .unwrap();
        assert!(changed);
        let before = l.clone();
        let (again, changed) = l
            .reserve_ask(Ask::new(Algo::Gcra, rule, 5), b"r", HOUR, T0 + S)
            .unwrap();
        assert!(!changed);
        assert_eq!(first, again);
        assert_eq!(l, before);
        // Forgotten after KEEP: the same id reserves anew.
        let (later, _) = l
            .reserve_ask(Ask::new(Algo::Gcra, rule, 5), b"r", HOUR, T0 + HOUR)
            .unwrap();
        assert_eq!(later.remaining, 15);
        assert_eq!(l.settle(b"unknown", 1, T0 + HOUR), None);
        assert_eq!(l.settle(b"r", 1, T0 + 3 * HOUR), None, "forgotten");
    }

    #[test]
    fn a_settlement_with_forget_lets_the_same_id_be_charged_anew() {
        for algo in [Algo::Gcra, Algo::Bucket] {
            // 10 per hour, capacity 100: nothing refills in the microseconds this test spans.
            let rule = Rule::new(algo, 10, HOUR, Some(100)).unwrap();
            let mut l = Limiter::new(algo, rule);
            let ask = Ask::new(algo, rule, 10);
            let (d, _) = l.reserve_ask(ask, b"idem-1", HOUR, T0).unwrap();
            assert_eq!(d.remaining, 90);
            let (s, changed) = l.settle_then(b"idem-1", 14, T0, true).unwrap();
            assert!(changed);
            assert_eq!((s.delta, s.remaining), (4, 86), "{algo:?}");
            let r = l.reservations().unwrap().entries().next().unwrap().1;
            assert_eq!(r.expires_us, T0 + 1, "forgotten a microsecond later");
            // A retried settlement a microsecond later finds nothing, and changes nothing.
            let before = l.clone();
            assert_eq!(l.settle(b"idem-1", 14, T0 + 1), None);
            assert_eq!(l.settle_then(b"idem-1", 14, T0 + 1, true), None);
            assert_eq!(l, before);
            // The same id reserves, and spends, anew: 86 - 10.
            let (d, changed) = l.reserve_ask(ask, b"idem-1", HOUR, T0 + 1).unwrap();
            assert!(changed && d.allowed);
            assert_eq!(d.remaining, 76, "{algo:?}");
            assert_eq!(l.reservations().unwrap().live(T0 + 1), 1);
            // And settles anew: a credit of 10 this time.
            let (s, _) = l.settle(b"idem-1", 0, T0 + 2).unwrap();
            assert_eq!((s.delta, s.remaining), (-10, 86), "{algo:?}");
        }
    }

    #[test]
    fn forgetting_a_settled_reservation_replies_its_first_settlement() {
        for algo in [Algo::Gcra, Algo::Bucket] {
            let rule = Rule::new(algo, 10, HOUR, Some(100)).unwrap();
            let mut l = Limiter::new(algo, rule);
            l.reserve_ask(Ask::new(algo, rule, 10), b"idem-2", HOUR, T0)
                .unwrap();
            let (first, _) = l.settle(b"idem-2", 14, T0).unwrap();
            let state = l.state().clone();
            // Another actual, later: the first reply, and only the forget time changes.
            let (s, changed) = l.settle_then(b"idem-2", 3, T0 + S, true).unwrap();
            assert!(changed, "the forget time changed");
            assert_eq!(s, first);
            assert_eq!((s.delta, s.remaining), (4, 86), "{algo:?}");
            assert_eq!(*l.state(), state, "{algo:?}: the balance is untouched");
            let (_, r) = l.reservations().unwrap().entries().next().unwrap();
            assert_eq!((r.expires_us, r.settled), (T0 + S + 1, Some(first)));
            assert_eq!(l.settle(b"idem-2", 14, T0 + S + 1), None);
        }
    }

    /// What a replica does with the effect (`RL.RESERVESET` of the reservation as the primary
    /// holds it, at the primary's time) leaves it equal to the primary, forgotten reservations
    /// not yet dropped included.
    #[test]
    fn a_forgetting_settlement_replays_to_the_same_state() {
        let (mut primary, rule) = read_bucket(Algo::Gcra);
        let ask = Ask::new(Algo::Gcra, rule, 2);
        primary.reserve_ask(ask, b"short", S, T0).unwrap();
        primary.reserve_ask(ask, b"first", HOUR, T0).unwrap();
        primary.reserve_ask(ask, b"second", HOUR, T0).unwrap();
        primary.settle(b"second", 5, T0).unwrap();
        let mut replica = primary.clone();
        let replay = |primary: &Limiter, replica: &mut Limiter, id: &[u8], now| {
            let mut to = primary.clone();
            to.take_reservations();
            let r = primary.reservations().unwrap().get(id, now).unwrap();
            replica.replay_reservation(to, id, r, now).unwrap();
        };
        // "short" is forgotten by now: forgetting the settled "second" drops it, as the replay
        // does.
        let now = T0 + 2 * S;
        for (id, actual) in [(&b"second"[..], 9), (b"first", 1)] {
            let (_, changed) = primary.settle_then(id, actual, now, true).unwrap();
            assert!(changed);
            replay(&primary, &mut replica, id, now);
            assert_eq!(replica, primary, "{}", String::from_utf8_lossy(id));
        }
        assert_eq!(primary.reservations().unwrap().entries().count(), 2);
        assert_eq!(primary.reservations().unwrap().live(now + 1), 0);
    }

    #[test]
    fn a_refused_reserve_is_not_remembered() {
        let (mut l, rule) = read_bucket(Algo::Bucket);
        l.admit(Algo::Bucket, rule, 18, T0, false).unwrap();
        let (d, changed) = l
            .reserve_ask(Ask::new(Algo::Bucket, rule, 10), b"r", HOUR, T0)
            .unwrap();
        assert!(!d.allowed && !changed);
        assert!(l.reservations().is_none());
        assert_eq!(l.settle(b"r", 10, T0), None);
    }

    #[test]
    fn only_rate_keys_take_reservations() {
        let rule = Rule::new(Algo::Window, 5, S, None).unwrap();
        let mut l = Limiter::new(Algo::Window, rule);
        let e = l
            .reserve_ask(Ask::new(Algo::Window, rule, 1), b"r", HOUR, T0)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "ERR reservations are only for ALGO gcra and bucket keys"
        );
    }

    #[test]
    fn a_retried_reserve_never_replies_more_than_the_capacity() {
        let big = Rule::new(Algo::Gcra, 100, S, None).unwrap();
        let small = Rule::new(Algo::Gcra, 5, S, None).unwrap();
        let mut l = Limiter::new(Algo::Gcra, big);
        let (d, _) = l
            .reserve_ask(Ask::new(Algo::Gcra, big, 1), b"r", S, T0)
            .unwrap();
        assert_eq!((d.remaining, d.capacity), (99, 100));
        // Much later, another call lowers the capacity to 5.
        l.admit(Algo::Gcra, small, 1, T0 + 500_000, false).unwrap();
        let (d, changed) = l
            .reserve_ask(Ask::new(Algo::Gcra, small, 1), b"r", S, T0 + 500_000)
            .unwrap();
        assert!(!changed);
        assert_eq!((d.allowed, d.remaining, d.capacity), (true, 5, 5));
    }
}
