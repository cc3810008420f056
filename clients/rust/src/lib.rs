//! Client for the redis-rl module: typed commands, and the gateway of `CLIENTS.md`.

// Replies and requests come from servers and callers: a gateway must answer, not panic.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing
    )
)]

pub mod cache;
pub mod client;
pub mod command;
pub mod concurrency;
pub mod gateway;
pub mod headers;
pub mod layer;
pub mod metrics;
pub mod mode;
pub mod policy;
pub mod posture;
pub mod problem;
pub mod reply;
pub mod retry;

pub use client::{Rl, RlConnection};
pub use command::{Acquire, Admit, Grant, Multi, MultiRule};
pub use concurrency::ConcurrencyLimitLayer;
pub use gateway::{Caller, Gateway, Verdict};
pub use layer::RateLimitLayer;
pub use mode::Mode;
pub use reply::{
    Decision, Error, GrantReply, KeyInfo, Lease, MultiDecision, RuleOutcome, Settlement,
};
pub use rl_core::rule::Algo;

// The README's examples are compiled with the crate's doc tests, so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
