//! The pure core: parsing, validation and every algorithm's arithmetic over integers, with the
//! time passed in. Nothing here knows about Redis; `tests` drive it with a fake clock.

pub mod admit;
#[cfg(test)]
mod equivalence;
pub mod error;
pub mod grant;
pub mod limiter;
pub mod log;
pub mod multi;
pub mod parse;
pub mod rate;
pub mod reserve;
pub mod rule;
pub mod semaphore;
pub mod throttle;
pub mod window;
