//! What every algorithm's state answers, under the same names and signatures, so the limiter
//! dispatches each question one way whatever the key holds.
//!
//! [`Algorithm`] is the inspection every state answers (`gcra`, `bucket`, `window`, `sliding`,
//! `log` and the `semaphore`); [`Decide`] is the decision of the algorithms whose state is a
//! small value that deciding copies: all but `log`, which decides by reading its entries and
//! records an admission in place (`Log::decide`, `Log::record`) rather than copy them, and the
//! semaphore, which leases rather than admits.

use crate::decision::Decision;
use crate::rule::Rule;

pub trait Algorithm {
    /// The state of a key that does not exist: full capacity.
    fn fresh(rule: &Rule) -> Self
    where
        Self: Sized;

    /// Why no command could have written this state under `rule`, whatever its clock did.
    fn refused(&self, rule: &Rule) -> Option<&'static str>;

    /// The latest instant this state counted at: the key's own time line, which a clock that
    /// stepped back reads as now (0 for a state whose times are deadlines).
    fn time_floor(&self, rule: &Rule) -> u64;

    /// Why no command on a clock before `horizon_us` could have written this state: by default,
    /// it counted after the horizon.
    fn ahead(&self, rule: &Rule, horizon_us: u64) -> Option<&'static str> {
        (self.time_floor(rule) > horizon_us).then_some("state time is ahead of the server's clock")
    }

    /// The instant (µs since the epoch) from which this state equals an absent key: full again.
    fn full_at_us(&self, rule: &Rule) -> u64;
}

pub trait Decide: Algorithm + Sized {
    /// Decides `cost` units under `rule` at `now_us` without changing anything: the decision and
    /// the state spending it leaves (the same state when refused).
    fn decide(&self, rule: &Rule, cost: u64, now_us: u64) -> (Decision, Self);

    /// This state, counted under `from`, re-expressed under `to` at `now_us`: what was spent
    /// carries over and nothing is minted.
    fn convert(&self, from: &Rule, to: &Rule, now_us: u64) -> Self;
}
