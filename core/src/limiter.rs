//! One limiter: the rule it was last used with and the state of its algorithm.
//!
//! This is the value a key holds. Every algorithm's state is a variant of [`State`], so one Redis
//! type carries all of them and one codec persists them. `Limiter` only dispatches: each
//! algorithm's arithmetic and bounds live in its own module (`gcra`, `bucket`, `window`,
//! `sliding`, `log`, `semaphore`), and so do reservations (`reservations`) and grants (`grant`).

use crate::error::Error;
use crate::log::Log;
use crate::rate::{self, Decision};
use crate::reservations::Reservations;
use crate::rule::{Algo, Rule, MAX_CLOCK_SKEW_US};
use crate::semaphore::Semaphore;
use crate::sliding::Sliding;
use crate::window::Fixed;
use crate::{bucket, gcra};

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
    Semaphore(Semaphore),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limiter {
    pub(crate) rule: Rule,
    pub(crate) state: State,
    /// Reservations of `RESERVE` (gcra and bucket only); boxed so that keys without any stay
    /// small.
    pub(crate) reservations: Option<Box<Reservations>>,
}

/// A decision made without changing the limiter (see [`Limiter::decide`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    pub decision: Decision,
    /// What spending it changes; `None` when refused.
    spend: Option<Spend>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Spend {
    /// The state and rule that replace the limiter's.
    State { rule: Rule, state: State },
    /// A log records in place, rather than being copied.
    Log { rule: Rule, cost: u64, now_us: u64 },
}

impl Admission {
    fn new(decision: Decision, spend: Spend) -> Admission {
        Admission {
            decision,
            spend: decision.allowed.then_some(spend),
        }
    }
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
            Algo::Semaphore => State::Semaphore(Semaphore::default()),
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
        let refused = match &state {
            State::Gcra { tat } => gcra::refused(&rule, tat.get()),
            State::Bucket { level, .. } => bucket::refused(&rule, level.get()),
            State::Window(w) => w.refused(&rule),
            State::Sliding(s) => s.refused(&rule),
            State::Log(log) => log.refused(&rule),
            State::Semaphore(s) => s.refused(),
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
            State::Gcra { tat } => gcra::ahead(&self.rule, tat.get(), horizon),
            State::Semaphore(s) => s.ahead(horizon),
            _ => {
                (self.time_floor() > horizon).then_some("state time is ahead of the server's clock")
            }
        };
        let refused = refused.or_else(|| self.reservations.as_deref()?.ahead(horizon));
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
            State::Gcra { tat } => gcra::time_floor(&self.rule, tat.get()),
            State::Bucket { updated_us, .. } => *updated_us,
            State::Window(w) => w.start_us,
            State::Sliding(s) => s.start_us,
            State::Log(log) => log.newest_us(),
            State::Semaphore(_) => 0,
        }
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
    pub(crate) fn level_at(&self, now_us: u64) -> i128 {
        match self.state {
            State::Gcra { tat } => gcra::level(&self.rule, tat.get(), now_us),
            State::Bucket { updated_us, level } => {
                bucket::level(&self.rule, updated_us, level.get(), now_us)
            }
            _ => rate::capacity(&self.rule),
        }
    }

    /// Decides `cost` units under `rule` at `now_us`. When admitted and not `dry`, the state
    /// moves to `algo` and `rule` and is spent; otherwise nothing changes.
    pub fn admit(
        &mut self,
        algo: Algo,
        rule: Rule,
        cost: u64,
        now_us: u64,
        dry: bool,
    ) -> Result<Decision, Error> {
        let admission = self.decide(algo, rule, cost, now_us)?;
        Ok(if dry {
            admission.decision
        } else {
            self.spend(admission)
        })
    }

    /// Decides `cost` units under `rule` at `now_us` without changing anything: the decision,
    /// and what [`Limiter::spend`] applies when the caller goes ahead. Deciding several limiters
    /// first and spending only if all admit is `RL.MULTI`'s one pass.
    ///
    /// A clock behind the key's own time line (it stepped back) decides at the key's time, and
    /// the waits replied count from the real clock: waiting `retry_after` is always enough.
    pub fn decide(
        &self,
        algo: Algo,
        rule: Rule,
        cost: u64,
        now_us: u64,
    ) -> Result<Admission, Error> {
        let at = now_us.max(self.time_floor());
        let mut admission = self.decide_at(algo, rule, cost, at)?;
        let behind = at - now_us;
        if behind > 0 {
            let d = &mut admission.decision;
            for wait in [&mut d.retry_after_us, &mut d.reset_after_us] {
                if *wait > 0 {
                    *wait = wait.saturating_add(behind);
                }
            }
        }
        Ok(admission)
    }

    /// Applies an admission this limiter decided (and nothing changed since): an admitted one
    /// moves the state to its algorithm and rule, spent; a refused one changes nothing.
    pub fn spend(&mut self, admission: Admission) -> Decision {
        let Admission { decision, spend } = admission;
        match spend {
            None => {}
            Some(Spend::State { rule, state }) => {
                self.state = state;
                self.rule = rule;
            }
            Some(Spend::Log { rule, cost, now_us }) => {
                if let State::Log(log) = &mut self.state {
                    log.record(&rule, cost, now_us);
                    self.rule = rule;
                }
            }
        }
        decision
    }

    fn decide_at(
        &self,
        algo: Algo,
        rule: Rule,
        cost: u64,
        now_us: u64,
    ) -> Result<Admission, Error> {
        let (decision, state) = match (&self.state, algo) {
            (State::Gcra { .. } | State::Bucket { .. }, Algo::Gcra | Algo::Bucket) => {
                let level = rate::convert(self.level_at(now_us), &self.rule, &rule);
                let (decision, after) = rate::decide(&rule, level, cost);
                (decision, self.at_level(algo, &rule, after, now_us))
            }
            (State::Window(w), Algo::Window) => {
                let (decision, after) = w
                    .convert(&self.rule, &rule, now_us)
                    .decide(&rule, cost, now_us);
                (decision, State::Window(after))
            }
            (State::Window(w), Algo::Sliding) => {
                let s = Sliding::from_fixed(w.convert(&self.rule, &rule, now_us));
                let (decision, after) = s.decide(&rule, cost, now_us);
                (decision, State::Sliding(after))
            }
            (State::Sliding(s), Algo::Sliding) => {
                let (decision, after) = s
                    .convert(&self.rule, &rule, now_us)
                    .decide(&rule, cost, now_us);
                (decision, State::Sliding(after))
            }
            (State::Sliding(s), Algo::Window) => {
                let w = s.convert(&self.rule, &rule, now_us).to_fixed();
                let (decision, after) = w.decide(&rule, cost, now_us);
                (decision, State::Window(after))
            }
            (State::Log(log), Algo::Log) => {
                let decision = log.decide(&rule, cost, now_us);
                let spend = Spend::Log { rule, cost, now_us };
                return Ok(Admission::new(decision, spend));
            }
            _ => {
                return Err(Error::AlgoMismatch {
                    stored: self.algo().name(),
                    asked: algo.name(),
                })
            }
        };
        Ok(Admission::new(decision, Spend::State { rule, state }))
    }

    /// A gcra or bucket state for `algo` and `rule` holding `level` ticks at `now_us`.
    fn at_level(&self, algo: Algo, rule: &Rule, level: i128, now_us: u64) -> State {
        match (algo, &self.state) {
            (Algo::Bucket, State::Bucket { updated_us, .. }) => {
                bucket::at_level(level, *updated_us, now_us)
            }
            (Algo::Bucket, _) => bucket::at_level(level, now_us, now_us),
            _ => gcra::at_level(rule, level, now_us),
        }
    }

    /// Moves a gcra or bucket state to `algo` and `rule`, holding `level` ticks at `now_us`.
    pub(crate) fn store(&mut self, algo: Algo, rule: Rule, level: i128, now_us: u64) {
        self.state = self.at_level(algo, &rule, level, now_us);
        self.rule = rule;
    }

    /// The instant (µs since the epoch) from which this state equals an absent key: full again.
    pub fn full_at_us(&self) -> u64 {
        match &self.state {
            State::Gcra { tat } => gcra::full_at_us(&self.rule, tat.get()),
            State::Bucket { updated_us, level } => {
                bucket::full_at_us(&self.rule, *updated_us, level.get())
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
            State::Semaphore(s) => s.heap_bytes(),
            _ => 0,
        }
        .saturating_add(
            self.reservations
                .as_ref()
                .map_or(0, |r| std::mem::size_of::<Reservations>() + r.heap_bytes()),
        )
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
                capacity: rule.limit(),
            },
            // Cost 0 against the key's own rule always decides: the algorithm matches.
            _ => self
                .admit(self.algo(), rule, 0, now_us, true)
                .unwrap_or(Decision {
                    allowed: false,
                    remaining: 0,
                    retry_after_us: 0,
                    reset_after_us: full_in,
                    capacity: rule.burst(),
                }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wide_round_trips() {
        for v in [0, 1, -1, i128::MAX, i128::MIN, 1 << 100, -(1 << 90) + 7] {
            assert_eq!(Wide::new(v).get(), v);
        }
    }
}

#[cfg(test)]
mod hints {
    use super::*;
    use crate::rule::Family;
    use proptest::prelude::*;

    const S: u64 = 1_000_000;
    const T0: u64 = 1_764_000_000 * S;

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
                prop_assert!(d.remaining <= d.capacity);
                if !d.allowed {
                    let later = now + d.retry_after_ms() * 1000;
                    prop_assert!(l.admit(algo, r, cost, later, true).unwrap().allowed,
                        "{:?}: refused again after waiting {} ms", algo, d.retry_after_ms());
                }
            }
        }
    }
}

#[cfg(test)]
mod size {
    /// Every key pays for this (plus Redis's own overhead): keep it within jemalloc's 64-byte
    /// size class. Documented in docs/internals.md.
    #[test]
    fn a_limiter_is_64_bytes() {
        assert_eq!(std::mem::size_of::<super::Limiter>(), 64);
    }
}
