//! The pure core of redis-rl: parsing, validation and every algorithm's arithmetic over
//! integers, with the time passed in. Nothing here knows about Redis (the crate does not depend
//! on it), so the module and the clients decide with the same code; tests drive it with a fake
//! clock.
//!
//! Arranged by concept, each layer importing only those below it:
//! - Leaves: `bounds` (every documented bound), `algo` (the algorithms' names and families),
//!   `wide` (the 128-bit integer rate states keep), `protocol` (the names of commands, option
//!   tokens and reply fields) and `entries` (the keyed, expiring entries leases and
//!   reservations use).
//! - `error` (the error texts built from the bounds), then `rule` (a validated rule), `ask` (what
//!   one call asks: algorithm, rule, cost, dry run), `decision` (what every algorithm replies)
//!   and `parse` (the helpers every command's parser shares); `deadline` (a spending call's
//!   `DEADLINE`, read and judged against the clock).
//! - `algorithm`: what every algorithm's state answers, under the same names. Under it, the
//!   algorithms, each with its state's arithmetic and bounds: `gcra` and `bucket` (over the tick
//!   arithmetic they share, in `rate`), `window`, `sliding`, `log`, and the concurrency
//!   `semaphore`; and `reservations`, what a key keeps of its reservations.
//! - `state`: the one enum of every algorithm's state; `limiter`: the value a key holds (a rule,
//!   a state and its reservations), which only dispatches.
//! - What is built on the limiter: `reserve` (reserve now, settle later), `acquire` (the
//!   semaphore's leases), `grant` (a chunk spent locally), `multi` (all or nothing over several
//!   limiters), `throttle` (redis-cell's `CL.THROTTLE`).
//! - `request`: one parser per command, over the helpers in `parse`.
//! - `allocate`: a global rule's limit shared across regions by the home store (`RL.ALLOCATE`),
//!   beside the limiters: it keeps reporters, not a limiter's state.

pub mod acquire;
pub mod algo;
pub mod algorithm;
pub mod allocate;
pub mod ask;
pub mod bounds;
pub mod bucket;
pub mod deadline;
pub mod decision;
pub mod entries;
#[cfg(test)]
mod equivalence;
pub mod error;
pub mod gcra;
pub mod grant;
pub mod limiter;
pub mod log;
pub mod multi;
pub mod parse;
pub mod protocol;
pub mod rate;
pub mod request;
pub mod reservations;
pub mod reserve;
pub mod rule;
pub mod semaphore;
pub mod sliding;
pub mod state;
pub mod throttle;
pub mod wide;
pub mod window;
