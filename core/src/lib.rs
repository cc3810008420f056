//! The pure core of redis-rl: parsing, validation and every algorithm's arithmetic over
//! integers, with the time passed in. Nothing here knows about Redis (the crate does not depend
//! on it), so the module and the clients decide with the same code; tests drive it with a fake
//! clock.
//!
//! Arranged by concept:
//! - `limiter`: the value a key holds (a rule and one algorithm's state); it only dispatches.
//! - The algorithms, each with its state's arithmetic and bounds: `gcra` and `bucket` (over the
//!   shared tick arithmetic and the [`rate::Decision`] every algorithm replies, in `rate`),
//!   `window`, `sliding`, `log`, and the concurrency `semaphore`.
//! - What is built on them: `reservations` (reserve now, settle later), `grant` (a chunk spent
//!   locally), `multi` (all or nothing over several limiters), `throttle` (redis-cell's
//!   `CL.THROTTLE`).
//! - `request`: one parser per command, over the helpers in `parse`; `rule` and `error` hold the
//!   bounds and the error texts built from them.

// The module runs this code inside Redis, where a panic aborts the server with every user's
// data: outside tests, nothing may unwrap, index or panic.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::todo,
        clippy::unimplemented,
        clippy::indexing_slicing
    )
)]

pub mod bucket;
#[cfg(test)]
mod equivalence;
pub mod error;
pub mod gcra;
pub mod grant;
pub mod limiter;
pub mod log;
pub mod multi;
pub mod names;
pub mod parse;
pub mod rate;
pub mod request;
pub mod reservations;
pub mod rule;
pub mod semaphore;
pub mod sliding;
pub mod throttle;
pub mod window;
