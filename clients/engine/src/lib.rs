//! The gateway engine of redis-rl: everything a gateway decides, written once and without I/O
//! (`clients/CONTRACT.md` sections 1 to 7 and 9). It is given a request, the time and the
//! replies of the store calls it asked for, and answers with the next calls or the verdict;
//! every driver (the tower layer, the Python and Node bindings, `rl-gateway`) does only the
//! I/O, with its own ecosystem's Redis client and HTTP framework. Clock and randomness are
//! injected, so the same inputs give the same outputs, which is what `clients/vectors/`
//! scenarios hold every binding to.
//!
//! - [`policy`]: the versioned JSON policy, validated with the JSON path of a bad field.
//! - [`engine`]: the state machine ([`Engine`], [`Step`], [`Verdict`], [`Holdings`]).
//! - [`cache`], [`breaker`], [`fallback`]: the negative cache, the breaker, the local limiters.
//! - [`headers`], [`problem`], [`metrics`]: what callers and operators see.
//! - [`wire`]: commands as argument vectors (module or script encoding) and replies parsed.
//! - [`memory`]: a store that answers those calls in memory with the core's arithmetic.

mod allocation;
pub mod breaker;
pub mod cache;
pub mod capacity;
pub mod engine;
pub mod fallback;
pub mod headers;
pub mod identity;
pub mod memory;
pub mod metrics;
pub mod policy;
pub mod problem;
pub mod rng;
mod table;
pub mod time;
pub mod wire;

pub use engine::{
    AllocationReport, AllocationUse, Answer, Call, Caller, Engine, Holdings, LogLevel, LogRecord,
    Options, Pending, Request, Step, Tables, Verdict, VerdictKind,
};
pub use identity::Headers;
pub use metrics::Metrics;
pub use policy::{Policy, PolicyError};
pub use table::TableUse;
pub use time::Instant;
pub use wire::{Mode, Reply};

// The README's example is compiled and run with the crate's doc tests, so it cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
