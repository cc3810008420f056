//! [`Ask`]: what one call asks of a limiter, as one value.
//!
//! The algorithm, the rule, the cost and whether it is a dry run travel together from the parser
//! to the limiter, so no function between them takes them one by one.

use crate::rule::{Algo, Rule};

/// `cost` units under `rule` with `algo`; spent when admitted unless `dry_run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ask {
    pub algo: Algo,
    pub rule: Rule,
    pub cost: u64,
    pub dry_run: bool,
}

impl Ask {
    /// Asks to spend `cost` units (not a dry run).
    pub fn new(algo: Algo, rule: Rule, cost: u64) -> Ask {
        Ask {
            algo,
            rule,
            cost,
            dry_run: false,
        }
    }

    /// The same ask as a dry run: decided, nothing spent.
    pub fn dry(self) -> Ask {
        Ask {
            dry_run: true,
            ..self
        }
    }

    /// The same ask for `cost` units.
    pub fn cost(self, cost: u64) -> Ask {
        Ask { cost, ..self }
    }
}
