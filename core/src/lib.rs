//! The pure core of redis-rl: parsing, validation and every algorithm's arithmetic over
//! integers, with the time passed in. Nothing here knows about Redis (the crate does not depend
//! on it), so the module and the clients decide with the same code; tests drive it with a fake
//! clock.

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
pub mod parse;
pub mod rate;
pub mod request;
pub mod reservations;
pub mod rule;
pub mod semaphore;
pub mod sliding;
pub mod throttle;
pub mod window;
