//! One limiter: the rule it was last used with and the state of its algorithm.
//!
//! This is the value a key holds. `Limiter` only dispatches: each algorithm's arithmetic and
//! bounds live in its own module (`gcra`, `bucket`, `window`, `sliding`, `log`, `semaphore`),
//! which answers for its own state (see `algorithm`); [`State`] names the one a key holds.
//! Reservations (`reserve`), grants (`grant`), leases (`acquire`), `RL.MULTI` (`multi`) and
//! `CL.THROTTLE` (`throttle`) are built on it.

use crate::algorithm::Decide;
use crate::ask::Ask;
use crate::bucket::Bucket;
use crate::error::Error;
use crate::gcra::Gcra;
use crate::log::Log;
use crate::rate::{self, Decision};
use crate::reservations::Reservations;
use crate::rule::{Algo, Rule, MAX_CLOCK_SKEW_US};
use crate::sliding::Sliding;

// Re-exported: `State` and `Wide` were first defined here, and callers name them by this path.
pub use crate::state::State;
pub use crate::wide::Wide;

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
        Limiter {
            rule,
            state: State::fresh(algo, &rule),
            reservations: None,
        }
    }

    /// A gcra limiter with no reservation whose theoretical arrival time is `tat` ticks: what a
    /// compact key (see the module's `state::value`) unpacks to.
    pub fn gcra_at(rule: Rule, tat: i128) -> Limiter {
        Limiter {
            rule,
            state: State::Gcra(Gcra {
                tat: Wide::new(tat),
            }),
            reservations: None,
        }
    }

    /// Rebuilds a limiter from decoded parts, refusing states no command could have produced
    /// whatever its clock did (the bounds that need no clock; see [`Limiter::check_times`]).
    pub fn from_parts(rule: Rule, state: State) -> Result<Limiter, Error> {
        if let Some(why) = state.algorithm().refused(&rule) {
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
        let refused = self.state.algorithm().ahead(&self.rule, horizon);
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
        self.state.algorithm().time_floor(&self.rule)
    }

    pub fn rule(&self) -> &Rule {
        &self.rule
    }

    pub fn state(&self) -> &State {
        &self.state
    }

    pub fn algo(&self) -> Algo {
        self.state.algo()
    }

    /// Available capacity at `now_us` in ticks of this limiter's rule (gcra and bucket only).
    pub(crate) fn level_at(&self, now_us: u64) -> i128 {
        match &self.state {
            State::Gcra(g) => g.level(&self.rule, now_us),
            State::Bucket(b) => b.level(&self.rule, now_us),
            _ => rate::capacity(&self.rule),
        }
    }

    /// Decides what `ask` asks at `now_us`. When admitted and not a dry run, the state moves to
    /// its algorithm and rule and is spent; otherwise nothing changes.
    pub fn admit_ask(&mut self, ask: Ask, now_us: u64) -> Result<Decision, Error> {
        let admission = self.decide_ask(ask, now_us)?;
        Ok(if ask.dry_run {
            admission.decision
        } else {
            self.spend(admission)
        })
    }

    /// [`Limiter::admit_ask`] with the ask's parts one by one.
    pub fn admit(
        &mut self,
        algo: Algo,
        rule: Rule,
        cost: u64,
        now_us: u64,
        dry: bool,
    ) -> Result<Decision, Error> {
        let ask = Ask {
            dry_run: dry,
            ..Ask::new(algo, rule, cost)
        };
        self.admit_ask(ask, now_us)
    }

    /// Decides what `ask` asks at `now_us` without changing anything, dry run or not: the
    /// decision, and what [`Limiter::spend`] applies when the caller goes ahead. Deciding
    /// several limiters first and spending only if all admit is `RL.MULTI`'s one pass.
    ///
    /// A clock behind the key's own time line (it stepped back) decides at the key's time, and
    /// the waits replied count from the real clock: waiting `retry_after` is always enough.
    pub fn decide_ask(&self, ask: Ask, now_us: u64) -> Result<Admission, Error> {
        let at = now_us.max(self.time_floor());
        let mut admission = self.decide_at(ask, at)?;
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

    /// [`Limiter::decide_ask`] with the ask's parts one by one.
    pub fn decide(
        &self,
        algo: Algo,
        rule: Rule,
        cost: u64,
        now_us: u64,
    ) -> Result<Admission, Error> {
        self.decide_ask(Ask::new(algo, rule, cost), now_us)
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

    fn decide_at(&self, ask: Ask, now_us: u64) -> Result<Admission, Error> {
        let Ask {
            algo, rule, cost, ..
        } = ask;
        let from = &self.rule;
        let (decision, state) = match (&self.state, algo) {
            (State::Gcra(g), Algo::Gcra) => {
                let (decision, after) = convert_and_decide(g, from, &rule, cost, now_us);
                (decision, State::Gcra(after))
            }
            (State::Bucket(b), Algo::Bucket) => {
                let (decision, after) = convert_and_decide(b, from, &rule, cost, now_us);
                (decision, State::Bucket(after))
            }
            // Across the rate family, through the level both count in.
            (State::Gcra(_) | State::Bucket(_), Algo::Gcra | Algo::Bucket) => {
                let level = rate::convert(self.level_at(now_us), from, &rule);
                let (decision, after) = rate::decide(&rule, level, cost);
                (decision, self.at_level(algo, &rule, after, now_us))
            }
            (State::Window(w), Algo::Window) => {
                let (decision, after) = convert_and_decide(w, from, &rule, cost, now_us);
                (decision, State::Window(after))
            }
            (State::Window(w), Algo::Sliding) => {
                let s = Sliding::from_fixed(w.convert(from, &rule, now_us));
                let (decision, after) = s.decide(&rule, cost, now_us);
                (decision, State::Sliding(after))
            }
            (State::Sliding(s), Algo::Sliding) => {
                let (decision, after) = convert_and_decide(s, from, &rule, cost, now_us);
                (decision, State::Sliding(after))
            }
            (State::Sliding(s), Algo::Window) => {
                let w = s.convert(from, &rule, now_us).to_fixed();
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
            (Algo::Bucket, State::Bucket(b)) => State::Bucket(b.recount(level, now_us)),
            (Algo::Bucket, _) => State::Bucket(Bucket::at_level(rule, level, now_us)),
            _ => State::Gcra(Gcra::at_level(rule, level, now_us)),
        }
    }

    /// Moves a gcra or bucket state to `algo` and `rule`, holding `level` ticks at `now_us`.
    pub(crate) fn store(&mut self, algo: Algo, rule: Rule, level: i128, now_us: u64) {
        self.state = self.at_level(algo, &rule, level, now_us);
        self.rule = rule;
    }

    /// The instant (µs since the epoch) from which this state equals an absent key: full again.
    pub fn full_at_us(&self) -> u64 {
        self.state
            .algorithm()
            .full_at_us(&self.rule)
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
                .admit_ask(Ask::new(self.algo(), rule, 0).dry(), now_us)
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

/// Converts a state counted under `from` to `to` and decides on it: how an algorithm whose
/// state deciding copies takes a call for itself.
fn convert_and_decide<A: Decide>(
    state: &A,
    from: &Rule,
    to: &Rule,
    cost: u64,
    now_us: u64,
) -> (Decision, A) {
    state.convert(from, to, now_us).decide(to, cost, now_us)
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
