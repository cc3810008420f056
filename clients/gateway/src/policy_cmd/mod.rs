//! `rl-gateway policy check` and `policy diff` (CONTRACT.md section 11): the numbers somebody
//! typed, shown the way they will be enforced, so that `5000` per minute entered as per second
//! is read before it ships.
//!
//! Pure functions: the caller reads the files, prints, and picks the exit status. A document
//! is validated by the engine (`Policy::from_json_at`, the gateways' own code and messages),
//! and every number in a table is the engine's choice for that caller (`Policy::effective`).
//! Arithmetic is exact ([`Ratio`]); a value that is not a whole number is shown to four
//! significant digits, prefixed `~`.

// A policy is operator input: no number in it can overflow the arithmetic that reads it (the
// workspace's lints keep a bad one an error message, never a panic).
#![cfg_attr(not(test), deny(clippy::arithmetic_side_effects))]

mod capacities;
mod check;
mod diff;
mod doc;
mod numbers;
mod ratio;
mod table;

pub use check::Report;
pub use diff::{Cut, Diff};
pub use numbers::{Measure, Subject};
pub use ratio::Ratio;

use doc::Doc;
use rl_engine::Instant;

/// Validates `text` as a gateway loading it at `now` would (the engine's exact message on
/// refusal: `invalid policy: rules.read.period: ...`) and tabulates every rule's effective
/// numbers for each plan and each override active at `now`.
pub fn check(text: &str, now: Instant) -> Result<Report, String> {
    Doc::load(text, now).map(|doc| Report::of(&doc))
}

/// Both documents, loaded at `now`, in one table with the changed cells marked, and the cuts.
/// The error names the document: `old: invalid policy: ...` or `new: ...`.
pub fn diff(old: &str, new: &str, now: Instant) -> Result<Diff, String> {
    let old = Doc::load(old, now).map_err(|e| format!("old: {e}"))?;
    let new = Doc::load(new, now).map_err(|e| format!("new: {e}"))?;
    Ok(Diff::of(&old, &new))
}
