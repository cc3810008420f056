//! [`State`]: what a key holds of its algorithm, one variant per algorithm.
//!
//! Every algorithm's state is a variant, so one Redis type carries all of them and one codec
//! persists them. The algorithms know nothing of this enum (each answers for its own state, see
//! `algorithm`); the limiter above holds one and dispatches to the variant.

use crate::algorithm::Algorithm;
use crate::bucket::Bucket;
use crate::gcra::Gcra;
use crate::log::Log;
use crate::rule::{Algo, Rule};
use crate::semaphore::Semaphore;
use crate::sliding::Sliding;
use crate::window::Fixed;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    Gcra(Gcra),
    Bucket(Bucket),
    Window(Fixed),
    Sliding(Sliding),
    /// Boxed: a log's entries would make every key's value as large as the largest variant.
    Log(Box<Log>),
    Semaphore(Semaphore),
}

impl State {
    /// The state of a key that does not exist under `algo` and `rule`: full capacity.
    pub fn fresh(algo: Algo, rule: &Rule) -> State {
        match algo {
            Algo::Gcra => State::Gcra(Gcra::fresh(rule)),
            Algo::Bucket => State::Bucket(Bucket::fresh(rule)),
            Algo::Window => State::Window(Fixed::fresh(rule)),
            Algo::Sliding => State::Sliding(Sliding::fresh(rule)),
            Algo::Log => State::Log(Box::new(Log::fresh(rule))),
            Algo::Semaphore => State::Semaphore(Semaphore::fresh(rule)),
        }
    }

    pub fn algo(&self) -> Algo {
        match self {
            State::Gcra(_) => Algo::Gcra,
            State::Bucket(_) => Algo::Bucket,
            State::Window(_) => Algo::Window,
            State::Sliding(_) => Algo::Sliding,
            State::Log(_) => Algo::Log,
            State::Semaphore(_) => Algo::Semaphore,
        }
    }

    /// The variant's state, for the questions every algorithm answers the same way.
    pub fn algorithm(&self) -> &dyn Algorithm {
        match self {
            State::Gcra(g) => g,
            State::Bucket(b) => b,
            State::Window(w) => w,
            State::Sliding(s) => s,
            State::Log(log) => log.as_ref(),
            State::Semaphore(s) => s,
        }
    }
}
