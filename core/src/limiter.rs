//! One limiter: the rule it was last used with and the state of its algorithm.
//!
//! This is the value a key holds. Every algorithm's state is a variant of [`State`], so one Redis
//! type carries all of them and one codec persists them.

use super::error::Error;
use super::log::Log;
use super::rate::{self, Decision};
use super::reserve::{Reservation, Reservations, Settlement, MAX_KEEP_US};
use super::rule::{
    Algo, Family, Rule, MAX_CLOCK_SKEW_US, MAX_COUNT, MAX_PERIOD_US, MAX_SEMAPHORE_CAPACITY,
};
use super::semaphore::{Acquire, Semaphore};
use super::window::{window_start, Fixed, Sliding};

/// A 128-bit integer kept as two words, so that the limiter keeps 8-byte alignment and stays
/// small (an `i128` field would pad every key's value to 16-byte alignment).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Wide([u64; 2]);

impl Wide {
    pub fn get(self) -> i128 {
        (i128::from(self.0[0] as i64) << 64) | i128::from(self.0[1])
    }

    pub fn new(v: i128) -> Wide {
        Wide([(v >> 64) as i64 as u64, v as u64])
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Theoretical arrival time of the next conforming request, in microseconds times `limit`
    /// (so one emission interval is exactly `period_us`). Zero for a fresh key.
    Gcra {
        tat: Wide,
    },
    /// The level in ticks (see `rate`) as counted at `updated_us`.
    Bucket {
        updated_us: u64,
        level: Wide,
    },
    Window(Fixed),
    Sliding(Sliding),
    Log(Box<Log>),
    Semaphore(Box<Semaphore>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limiter {
    rule: Rule,
    state: State,
    /// Reservations of `RESERVE` (gcra and bucket only); boxed so that keys without any stay
    /// small.
    reservations: Option<Box<Reservations>>,
}

impl Limiter {
    /// The state of a key that does not exist: full capacity.
    pub fn new(algo: Algo, rule: Rule) -> Limiter {
        let state = match algo {
            Algo::Gcra => State::Gcra { tat: Wide::new(0) },
            Algo::Bucket => State::Bucket {
                updated_us: 0,
                level: Wide::new(rate::capacity(&rule)),
            },
            Algo::Window => State::Window(Fixed::default()),
            Algo::Sliding => State::Sliding(Sliding::default()),
            Algo::Log => State::Log(Box::default()),
            Algo::Semaphore => State::Semaphore(Box::default()),
        };
        Limiter {
            rule,
            state,
            reservations: None,
        }
    }

    /// A gcra limiter with no reservation whose theoretical arrival time is `tat` ticks: what a
    /// compact key (see `state::value`) unpacks to.
    pub fn gcra_at(rule: Rule, tat: i128) -> Limiter {
        Limiter {
            rule,
            state: State::Gcra {
                tat: Wide::new(tat),
            },
            reservations: None,
        }
    }

    /// Rebuilds a limiter from decoded parts, refusing states no command could have produced
    /// whatever its clock did (the bounds that need no clock; see [`Limiter::check_times`]).
    pub fn from_parts(rule: Rule, state: State) -> Result<Limiter, Error> {
        let cap = rate::capacity(&rule);
        let refused = match &state {
            State::Gcra { tat } if tat.get() < 0 => Some("gcra TAT is negative"),
            // now * limit + twice the capacity (a full debt) bounds any TAT we write.
            State::Gcra { tat }
                if tat.get() > i128::from(i64::MAX) * i128::from(rule.limit()) + 2 * cap =>
            {
                Some("gcra TAT is out of range")
            }
            State::Bucket { level, .. } if level.get() > cap || level.get() < -cap => {
                Some("bucket level is beyond the capacity or the debt floor")
            }
            State::Window(w) if w.start_us != window_start(w.start_us, rule.period_us()) => {
                Some("window start is not aligned to the period")
            }
            // An admission leaves at most `limit` in the window, under the rule it stores.
            State::Window(w) if w.count > rule.limit() => Some("window count is above the limit"),
            State::Sliding(s) if s.start_us != window_start(s.start_us, rule.period_us()) => {
                Some("sliding window start is not aligned to the period")
            }
            State::Sliding(s) if s.current > rule.limit() => {
                Some("sliding current count is above the limit")
            }
            // The previous window was counted under an earlier rule: any limit there was.
            State::Sliding(s) if s.previous > MAX_COUNT => {
                Some("sliding previous count is above the largest limit")
            }
            State::Log(log) if log.total() > rule.limit() => Some("log holds more than its limit"),
            State::Semaphore(s) if s.len() > MAX_SEMAPHORE_CAPACITY as usize => {
                Some("semaphore holds more leases than the largest capacity")
            }
            _ => None,
        };
        if let Some(why) = refused {
            return Err(Error::BadPayload(why));
        }
        Ok(Limiter {
            rule,
            state,
            reservations: None,
        })
    }

    /// Refuses a state that counted further ahead of `now_us` (this server's clock) than the
    /// tolerated skew allows: a TAT, a window or a lease no command on a clock within
    /// [`MAX_CLOCK_SKEW_US`] of this one could have written. Applied to states that come from
    /// elsewhere (`RESTORE`, a client's `RL.SETSTATE`), not to what this server or its primary
    /// wrote, which loads whatever the clock did meanwhile.
    pub fn check_times(&self, now_us: u64) -> Result<(), Error> {
        let horizon = now_us.saturating_add(MAX_CLOCK_SKEW_US);
        let refused = match &self.state {
            State::Gcra { tat } => {
                let bound = i128::from(horizon) * i128::from(self.rule.limit())
                    + 2 * rate::capacity(&self.rule);
                (tat.get() > bound).then_some("gcra TAT is ahead of the server's clock")
            }
            State::Semaphore(s) => (s.full_at_us() > horizon.saturating_add(MAX_PERIOD_US))
                .then_some("lease expiry is ahead of the server's clock"),
            _ => {
                (self.time_floor() > horizon).then_some("state time is ahead of the server's clock")
            }
        };
        let reservations = self.reservations.as_deref();
        let refused = refused.or_else(|| {
            reservations.and_then(|r| {
                r.entries()
                    .any(|(_, r)| {
                        r.expires_us > horizon.saturating_add(MAX_KEEP_US)
                            || r.reset_after_us > MAX_PERIOD_US + MAX_CLOCK_SKEW_US
                    })
                    .then_some("reservation time is ahead of the server's clock")
            })
        });
        match refused {
            Some(why) => Err(Error::BadPayload(why)),
            None => Ok(()),
        }
    }

    /// The latest instant this state counted at (for gcra, the earliest a TAT can have been
    /// written, which is at most a full debt and a full capacity ahead; 0 for semaphores, whose
    /// times are deadlines). A clock that stepped back before it reads as this instant: the
    /// key's own time line, on which nothing is minted and a debt is never forgiven.
    pub(crate) fn time_floor(&self) -> u64 {
        match &self.state {
            State::Gcra { tat } => {
                let written = tat.get() - 2 * rate::capacity(&self.rule);
                rate::ticks_to_us(&self.rule, written)
            }
            State::Bucket { updated_us, .. } => *updated_us,
            State::Window(w) => w.start_us,
            State::Sliding(s) => s.start_us,
            State::Log(log) => log.newest_us(),
            State::Semaphore(_) => 0,
        }
    }

    /// Attaches decoded reservations (only gcra and bucket keys take them).
    pub fn with_reservations(mut self, r: Reservations) -> Result<Limiter, Error> {
        if r.is_empty() {
            return Ok(self);
        }
        if self.algo().family() != Family::Rate {
            return Err(Error::BadPayload("reservations on a key that takes none"));
        }
        // Counts as some admission and settlement replied them, under any rule there was.
        let sane = |r: &Reservation| {
            (1..=MAX_COUNT).contains(&r.estimate)
                && r.remaining <= MAX_COUNT
                && r.settled.is_none_or(|s| {
                    s.remaining <= MAX_COUNT && s.delta.unsigned_abs() <= 2 * MAX_COUNT
                })
        };
        if !r.entries().all(|(_, r)| sane(r)) {
            return Err(Error::BadPayload("reservation count out of range"));
        }
        self.reservations = Some(Box::new(r));
        Ok(self)
    }

    pub fn reservations(&self) -> Option<&Reservations> {
        self.reservations.as_deref()
    }

    pub fn rule(&self) -> &Rule {
        &self.rule
    }

    pub fn state(&self) -> &State {
        &self.state
    }

    pub fn algo(&self) -> Algo {
        match self.state {
            State::Gcra { .. } => Algo::Gcra,
            State::Bucket { .. } => Algo::Bucket,
            State::Window(_) => Algo::Window,
            State::Sliding(_) => Algo::Sliding,
            State::Log(_) => Algo::Log,
            State::Semaphore(_) => Algo::Semaphore,
        }
    }

    /// Available capacity at `now_us` in ticks of this limiter's rule (gcra and bucket only).
    fn level_at(&self, now_us: u64) -> i128 {
        let cap = rate::capacity(&self.rule);
        match self.state {
            State::Gcra { tat } => {
                let now = i128::from(now_us) * i128::from(self.rule.limit());
                cap - (tat.get() - now).max(0)
            }
            State::Bucket { updated_us, level } => {
                // A clock that stepped back refills nothing.
                let elapsed = now_us.saturating_sub(updated_us);
                level
                    .get()
                    .saturating_add(rate::refill(&self.rule, elapsed, 2 * cap))
                    .min(cap)
            }
            _ => cap,
        }
    }

    /// Decides `cost` units under `rule` at `now_us`. When admitted and not `dry`, the state
    /// moves to `algo` and `rule` and is spent; otherwise nothing changes.
    ///
    /// A clock behind the key's own time line (it stepped back) decides at the key's time, and
    /// the waits replied count from the real clock: waiting `retry_after` is always enough.
    pub fn admit(
        &mut self,
        algo: Algo,
        rule: Rule,
        cost: u64,
        now_us: u64,
        dry: bool,
    ) -> Result<Decision, Error> {
        let at = now_us.max(self.time_floor());
        let mut d = self.decide_at(algo, rule, cost, at, dry)?;
        let behind = at - now_us;
        if behind > 0 {
            for wait in [&mut d.retry_after_us, &mut d.reset_after_us] {
                if *wait > 0 {
                    *wait = wait.saturating_add(behind);
                }
            }
        }
        Ok(d)
    }

    fn decide_at(
        &mut self,
        algo: Algo,
        rule: Rule,
        cost: u64,
        now_us: u64,
        dry: bool,
    ) -> Result<Decision, Error> {
        let commit = !dry;
        let decision = match (&mut self.state, algo) {
            (State::Gcra { .. } | State::Bucket { .. }, Algo::Gcra | Algo::Bucket) => {
                let level = rate::convert(self.level_at(now_us), &self.rule, &rule);
                let (decision, after) = rate::decide(&rule, level, cost);
                if decision.allowed && commit {
                    self.store(algo, rule, after, now_us);
                }
                return Ok(decision);
            }
            (State::Window(w), Algo::Window) => {
                let (decision, after) = w
                    .convert(&self.rule, &rule, now_us)
                    .decide(&rule, cost, now_us);
                if decision.allowed && commit {
                    *w = after;
                }
                decision
            }
            (State::Window(w), Algo::Sliding) => {
                let s = Sliding::from_fixed(w.convert(&self.rule, &rule, now_us));
                let (decision, after) = s.decide(&rule, cost, now_us);
                if decision.allowed && commit {
                    self.state = State::Sliding(after);
                }
                decision
            }
            (State::Sliding(s), Algo::Sliding) => {
                let (decision, after) = s
                    .convert(&self.rule, &rule, now_us)
                    .decide(&rule, cost, now_us);
                if decision.allowed && commit {
                    *s = after;
                }
                decision
            }
            (State::Sliding(s), Algo::Window) => {
                let w = s.convert(&self.rule, &rule, now_us).to_fixed();
                let (decision, after) = w.decide(&rule, cost, now_us);
                if decision.allowed && commit {
                    self.state = State::Window(after);
                }
                decision
            }
            (State::Log(log), Algo::Log) => {
                let decision = log.decide(&rule, cost, now_us);
                if decision.allowed && commit {
                    log.record(&rule, cost, now_us);
                }
                decision
            }
            _ => {
                return Err(Error::AlgoMismatch {
                    stored: self.algo().name(),
                    asked: algo.name(),
                })
            }
        };
        if decision.allowed && commit {
            self.rule = rule;
        }
        Ok(decision)
    }

    fn store(&mut self, algo: Algo, rule: Rule, level: i128, now_us: u64) {
        let cap = rate::capacity(&rule);
        self.state = match algo {
            Algo::Bucket => {
                let updated_us = match self.state {
                    State::Bucket { updated_us, .. } => updated_us.max(now_us),
                    _ => now_us,
                };
                State::Bucket {
                    updated_us,
                    level: Wide::new(level),
                }
            }
            _ => {
                let now = i128::from(now_us) * i128::from(rule.limit());
                State::Gcra {
                    tat: Wide::new(now + cap - level),
                }
            }
        };
        self.rule = rule;
    }

    /// The instant (µs since the epoch) from which this state equals an absent key: full again.
    pub fn full_at_us(&self) -> u64 {
        match &self.state {
            State::Gcra { tat } => rate::ticks_to_us(&self.rule, tat.get()),
            State::Bucket { updated_us, level } => {
                let missing = rate::capacity(&self.rule) - level.get();
                updated_us.saturating_add(rate::ticks_to_us(&self.rule, missing))
            }
            State::Window(w) => w.full_at_us(&self.rule),
            State::Sliding(s) => s.full_at_us(&self.rule),
            State::Log(log) => log.full_at_us(&self.rule),
            State::Semaphore(s) => s.full_at_us(),
        }
        .max(self.reservations.as_ref().map_or(0, |r| r.until_us()))
    }

    /// True when the state equals an absent key's and nothing else is kept: the key can go.
    pub fn is_void(&self) -> bool {
        match &self.state {
            State::Semaphore(s) => s.is_empty() && self.reservations.is_none(),
            _ => false,
        }
    }

    /// When the key holding this limiter expires: the millisecond it is full again.
    pub fn expire_at_ms(&self) -> u64 {
        self.full_at_us().div_ceil(1000)
    }

    /// Bytes this limiter holds outside its own struct.
    pub fn heap_bytes(&self) -> usize {
        match &self.state {
            State::Log(log) => std::mem::size_of::<Log>() + log.heap_bytes(),
            State::Semaphore(s) => std::mem::size_of::<Semaphore>() + s.heap_bytes(),
            _ => 0,
        }
        .saturating_add(
            self.reservations
                .as_ref()
                .map_or(0, |r| std::mem::size_of::<Reservations>() + r.heap_bytes()),
        )
    }

    /// `RESERVE id`: admits `cost` as an estimate and remembers the decision under `id` until
    /// `keep_us` from now. A retry with a live `id` replies the original decision and spends
    /// nothing.
    #[allow(clippy::too_many_arguments)]
    pub fn reserve(
        &mut self,
        algo: Algo,
        rule: Rule,
        cost: u64,
        id: &[u8],
        keep_us: u64,
        now_us: u64,
        dry: bool,
    ) -> Result<(Decision, bool), Error> {
        if algo.family() != Family::Rate || self.algo().family() != Family::Rate {
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
                limit: self.rule.burst(),
            };
            return Ok((original, false));
        }
        let live = self.reservations.as_ref().map_or(0, |r| r.live(now_us));
        if live >= super::reserve::MAX_RESERVATIONS {
            return Err(Error::TooManyReservations);
        }
        let d = self.admit(algo, rule, cost, now_us, dry)?;
        if d.allowed && !dry {
            let r = Reservation {
                estimate: cost,
                remaining: d.remaining,
                reset_after_us: d.reset_after_us,
                expires_us: now_us.saturating_add(keep_us),
                settled: None,
            };
            self.reservations
                .get_or_insert_default()
                .insert(id, r, now_us);
        }
        Ok((d, d.allowed && !dry))
    }

    /// Settles reservation `id` with the `actual` cost: the difference from the estimate is
    /// debited (the level may go down to minus the capacity) or credited (never above the
    /// capacity). `None` for an unknown or forgotten id. Settling again replies the first
    /// settlement and changes nothing; the flag tells whether this call changed the state.
    pub fn settle(&mut self, id: &[u8], actual: u64, now_us: u64) -> Option<(Settlement, bool)> {
        let r = *self.reservations.as_ref()?.get(id, now_us)?;
        if let Some(done) = r.settled {
            return Some((done, false));
        }
        let delta = i128::from(actual) - i128::from(r.estimate);
        let rule = self.rule;
        let (cap, token) = (rate::capacity(&rule), rate::token(&rule));
        let level = self.level_at(now_us);
        let after = (level - delta * token).clamp(-cap, cap);
        self.store(self.algo(), rule, after, now_us);
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
        Some((s, true))
    }

    /// The state as a decision of cost 0: what is available now, nothing spent.
    pub fn peek(&mut self, now_us: u64) -> Decision {
        let rule = self.rule;
        let full_in = self.full_at_us().saturating_sub(now_us);
        match &self.state {
            State::Semaphore(s) => Decision {
                allowed: true,
                remaining: rule.limit().saturating_sub(s.in_flight(now_us)),
                retry_after_us: 0,
                reset_after_us: full_in,
                limit: rule.limit(),
            },
            // Cost 0 against the key's own rule always decides: the algorithm matches.
            _ => self
                .admit(self.algo(), rule, 0, now_us, true)
                .unwrap_or(Decision {
                    allowed: false,
                    remaining: 0,
                    retry_after_us: 0,
                    reset_after_us: full_in,
                    limit: rule.burst(),
                }),
        }
    }

    /// Units owed (gcra and bucket after settlements that cost more than reserved).
    pub fn debt(&self, now_us: u64) -> u64 {
        match self.state {
            State::Gcra { .. } | State::Bucket { .. } => {
                let owed = (-self.level_at(now_us)).max(0);
                let token = rate::token(&self.rule);
                u64::try_from((owed + token - 1) / token).unwrap_or(u64::MAX)
            }
            _ => 0,
        }
    }

    fn semaphore(&mut self) -> Result<&mut Semaphore, Error> {
        let stored = self.algo().name();
        match &mut self.state {
            State::Semaphore(s) => Ok(s),
            _ => Err(Error::AlgoMismatch {
                stored,
                asked: Algo::Semaphore.name(),
            }),
        }
    }

    /// `RL.ACQUIRE`: a slot of `rule.limit()` for `rule.period_us()`. Changes nothing when
    /// refused or `dry`.
    pub fn acquire(
        &mut self,
        rule: Rule,
        holder: Option<&[u8]>,
        now_us: u64,
        dry: bool,
    ) -> Result<Acquire, Error> {
        let s = self.semaphore()?;
        let a = s.acquire(rule.limit(), rule.period_us(), holder, now_us, dry);
        if a.acquired && !dry {
            self.rule = rule;
        }
        Ok(a)
    }

    /// The semaphore's next generated-id sequence number (0 for other algorithms).
    pub fn next_lease_id(&self) -> u64 {
        match &self.state {
            State::Semaphore(s) => s.next_id(),
            _ => 0,
        }
    }

    /// Replays a semaphore write (see `Semaphore::apply`) under `rule`.
    pub fn apply_lease(
        &mut self,
        rule: Rule,
        holder: &[u8],
        expiry_us: u64,
        now_us: u64,
        next_id: u64,
    ) -> Result<(), Error> {
        self.semaphore()?
            .apply(holder, expiry_us, now_us, next_id)?;
        self.rule = rule;
        Ok(())
    }

    /// `RL.RELEASE`: true when `holder` held a slot, which is now free.
    pub fn release(&mut self, holder: &[u8], now_us: u64) -> Result<bool, Error> {
        Ok(self.semaphore()?.release(holder, now_us))
    }

    /// `RL.RENEW`: true when `holder`'s live lease now lasts `lease_us` from now.
    pub fn renew(&mut self, holder: &[u8], lease_us: u64, now_us: u64) -> Result<bool, Error> {
        Ok(self.semaphore()?.renew(holder, lease_us, now_us))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_764_000_000_000_000;

    fn rule(limit: u64, period_us: u64, burst: Option<u64>) -> Rule {
        Rule::new(Algo::Gcra, limit, period_us, burst).unwrap()
    }

    #[test]
    fn wide_round_trips() {
        for v in [0, 1, -1, i128::MAX, i128::MIN, 1 << 100, -(1 << 90) + 7] {
            assert_eq!(Wide::new(v).get(), v);
        }
    }

    #[test]
    fn p_read_worked_example_for_both_algorithms() {
        for algo in [Algo::Gcra, Algo::Bucket] {
            let r = rule(2, 1_000_000, Some(20));
            let mut l = Limiter::new(algo, r);
            for _ in 0..20 {
                assert!(l.admit(algo, r, 1, T0, false).unwrap().allowed);
            }
            let d = l.admit(algo, r, 1, T0, false).unwrap();
            assert!(!d.allowed);
            assert_eq!(d.retry_after_ms(), 500);
            assert_eq!(d.reset_after_ms(), 10_000);
            // 1.5 s later three tokens are back; an export of cost 10 waits 3.5 s.
            let d = l.admit(algo, r, 10, T0 + 1_500_000, false).unwrap();
            assert!(!d.allowed);
            assert_eq!(d.remaining, 3);
            assert_eq!(d.retry_after_ms(), 3500);
            // Waiting exactly retry_after_ms is enough.
            let d = l.admit(algo, r, 10, T0 + 5_000_000, false).unwrap();
            assert!(d.allowed, "{algo:?}");
            assert_eq!(d.remaining, 0);
            assert_eq!(l.full_at_us(), T0 + 15_000_000);
        }
    }

    #[test]
    fn dry_run_changes_nothing() {
        let r = rule(5, 1_000_000, None);
        for algo in [Algo::Gcra, Algo::Bucket] {
            let mut l = Limiter::new(algo, r);
            let before = l.clone();
            let d = l.admit(algo, r, 5, T0, true).unwrap();
            assert!(d.allowed);
            assert_eq!(d.remaining, 0);
            assert_eq!(l, before);
        }
    }

    #[test]
    fn a_clock_that_steps_back_mints_nothing() {
        let r = rule(1, 1_000_000, Some(1));
        for algo in [Algo::Gcra, Algo::Bucket] {
            let mut l = Limiter::new(algo, r);
            assert!(l.admit(algo, r, 1, T0, false).unwrap().allowed);
            assert!(!l.admit(algo, r, 1, T0 - 10_000_000, false).unwrap().allowed);
            assert!(!l.admit(algo, r, 1, T0 + 999_999, false).unwrap().allowed);
            assert!(l.admit(algo, r, 1, T0 + 1_000_000, false).unwrap().allowed);
        }
    }

    #[test]
    fn thirds_do_not_drift_over_a_long_run() {
        // 3 per second: the emission interval is 333,333.33 µs, which no integer µs can hold.
        // A burst of 3 keeps the level below the capacity, so no refill is clipped.
        let r = rule(3, 1_000_000, Some(3));
        for algo in [Algo::Gcra, Algo::Bucket] {
            let mut l = Limiter::new(algo, r);
            let mut admitted = 0u64;
            let mut now = T0;
            // Poll every 1 ms for 1000 s: exactly 3 per second plus the initial burst.
            while now <= T0 + 1_000_000_000 {
                if l.admit(algo, r, 1, now, false).unwrap().allowed {
                    admitted += 1;
                }
                now += 1_000;
            }
            assert_eq!(admitted, 3003, "{algo:?}");
        }
    }

    #[test]
    fn gcra_and_bucket_convert_keeping_the_level() {
        let r = rule(5, 1_000_000, None);
        let mut l = Limiter::new(Algo::Gcra, r);
        l.admit(Algo::Gcra, r, 1, T0, false).unwrap();
        let d = l.admit(Algo::Bucket, r, 1, T0, false).unwrap();
        assert_eq!(d.remaining, 3);
        assert_eq!(l.algo(), Algo::Bucket);
        let d = l.admit(Algo::Gcra, r, 1, T0 + 200_000, false).unwrap();
        assert_eq!(d.remaining, 3);
        assert_eq!(l.algo(), Algo::Gcra);
    }

    #[test]
    fn payload_states_out_of_range_are_refused() {
        let r = rule(5, 1_000_000, None);
        let cap = rate::capacity(&r);
        assert!(Limiter::from_parts(r, State::Gcra { tat: Wide::new(-1) }).is_err());
        let over = State::Bucket {
            updated_us: 0,
            level: Wide::new(cap + 1),
        };
        assert!(Limiter::from_parts(r, over).is_err());
        let debt = State::Bucket {
            updated_us: 0,
            level: Wide::new(-cap),
        };
        assert!(Limiter::from_parts(r, debt).is_ok());
    }
}

#[cfg(test)]
mod hints {
    use super::*;
    use crate::rule::MAX_CLOCK_SKEW_US;
    use proptest::prelude::*;

    const S: u64 = 1_000_000;
    const T0: u64 = 1_764_000_000 * S;

    #[test]
    fn a_window_ahead_of_a_clock_that_stepped_back_counts_the_wait_from_the_real_clock() {
        let r = Rule::new(Algo::Window, 1, S, None).unwrap();
        let mut l = Limiter::new(Algo::Window, r);
        assert!(
            l.admit(Algo::Window, r, 1, T0 + 5 * S, false)
                .unwrap()
                .allowed
        );
        // The clock steps back 5 s: the key's window still ends at T0 + 6 s.
        let d = l.admit(Algo::Window, r, 1, T0, false).unwrap();
        assert!(!d.allowed);
        assert_eq!((d.retry_after_ms(), d.reset_after_ms()), (6000, 6000));
        assert!(
            !l.admit(Algo::Window, r, 1, T0 + 5_999_999, true)
                .unwrap()
                .allowed
        );
        assert!(
            l.admit(Algo::Window, r, 1, T0 + 6 * S, true)
                .unwrap()
                .allowed
        );
    }

    proptest! {
        /// Whatever the clock did, a refused request waits `retry_after_ms` and is admitted
        /// (nothing else spent meanwhile), for every algorithm.
        #[test]
        fn waiting_the_hint_is_always_enough(
            algo in 0usize..5,
            steps in prop::collection::vec((-20_000_000i64..3_000_000, 1u64..4), 1..40),
        ) {
            let algo = Algo::ALL[algo];
            let burst = (algo.family() == Family::Rate).then_some(4);
            let r = Rule::new(algo, 3, 2 * S, burst).unwrap();
            let mut l = Limiter::new(algo, r);
            let mut now = T0 + 30 * S;
            for (step, cost) in steps {
                now = now.saturating_add_signed(step);
                let d = l.admit(algo, r, cost, now, false).unwrap();
                prop_assert!(d.remaining <= d.limit);
                if !d.allowed {
                    let later = now + d.retry_after_ms() * 1000;
                    prop_assert!(l.admit(algo, r, cost, later, true).unwrap().allowed,
                        "{:?}: refused again after waiting {} ms", algo, d.retry_after_ms());
                }
            }
        }
    }

    #[test]
    fn a_retried_reserve_never_replies_more_than_the_capacity() {
        let big = Rule::new(Algo::Gcra, 100, S, None).unwrap();
        let small = Rule::new(Algo::Gcra, 5, S, None).unwrap();
        let mut l = Limiter::new(Algo::Gcra, big);
        let (d, _) = l.reserve(Algo::Gcra, big, 1, b"r", S, T0, false).unwrap();
        assert_eq!((d.remaining, d.limit), (99, 100));
        // Much later, another call lowers the capacity to 5.
        l.admit(Algo::Gcra, small, 1, T0 + 500_000, false).unwrap();
        let (d, changed) = l
            .reserve(Algo::Gcra, small, 1, b"r", S, T0 + 500_000, false)
            .unwrap();
        assert!(!changed);
        assert_eq!((d.allowed, d.remaining, d.limit), (true, 5, 5));
    }

    #[test]
    fn states_no_command_could_write_are_refused_naming_the_field() {
        let w = Rule::new(Algo::Window, 10, S, None).unwrap();
        let e = Limiter::from_parts(
            w,
            State::Window(Fixed {
                start_us: T0,
                count: 11,
            }),
        );
        assert_eq!(e, Err(Error::BadPayload("window count is above the limit")));
        let s = Rule::new(Algo::Sliding, 10, S, None).unwrap();
        let huge = Sliding {
            start_us: T0,
            previous: u64::MAX,
            current: 1,
        };
        let e = Limiter::from_parts(s, State::Sliding(huge));
        assert_eq!(
            e,
            Err(Error::BadPayload(
                "sliding previous count is above the largest limit"
            ))
        );
        // Times: fine within the skew, refused beyond it.
        let ahead = |start_us| Limiter::from_parts(w, State::Window(Fixed { start_us, count: 1 }));
        assert!(ahead(T0 + MAX_CLOCK_SKEW_US)
            .unwrap()
            .check_times(T0)
            .is_ok());
        assert_eq!(
            ahead(T0 + MAX_CLOCK_SKEW_US + S).unwrap().check_times(T0),
            Err(Error::BadPayload(
                "state time is ahead of the server's clock"
            ))
        );
        let g = Rule::new(Algo::Gcra, 10, S, None).unwrap();
        let far = i128::from(T0 + 1000 * 365 * 86_400 * S) * 10;
        let l = Limiter::from_parts(
            g,
            State::Gcra {
                tat: Wide::new(far),
            },
        )
        .unwrap();
        assert_eq!(
            l.check_times(T0),
            Err(Error::BadPayload("gcra TAT is ahead of the server's clock"))
        );
    }
}

#[cfg(test)]
mod size {
    /// Every key pays for this (plus Redis's own overhead): keep it within jemalloc's 64-byte
    /// size class. Documented in commands.md.
    #[test]
    fn a_limiter_is_64_bytes() {
        assert_eq!(std::mem::size_of::<super::Limiter>(), 64);
    }
}
