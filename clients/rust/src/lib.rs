//! Client for the redis-rl module: typed commands over the `redis` crate ([`Rl`]), and with the
//! `gateway` feature (on by default) the gateway of `clients/CONTRACT.md` as tower middleware,
//! a driver of the engine in `redis-rl-engine` ([`Gateway`], [`RateLimitLayer`],
//! [`ConcurrencyLimitLayer`]). A user who only calls [`Rl`] turns the feature off and compiles
//! no HTTP stack.

mod allocate;
pub mod client;
mod error;
#[cfg(feature = "gateway")]
pub mod gateway;
pub mod mode;

pub use allocate::Allotment;
pub use client::{
    Decision, Error, GrantReply, KeyInfo, Lease, MultiDecision, Rl, RlConnection, RuleOutcome,
    Settlement,
};
#[cfg(feature = "gateway")]
pub use gateway::{
    concurrency::ConcurrencyLimitLayer, layer::RateLimitLayer, Caller, Gateway, Verdict,
};
pub use mode::Mode;
pub use rl_core::rule::Algo;
/// The engine every gateway face drives.
pub use rl_engine as engine;
/// Typed requests, one per command, built into the exact arguments of `commands.md`.
pub use rl_engine::wire::command;
pub use rl_engine::wire::command::{Acquire, Admit, Grant, Multi, MultiRule};

// The README's examples are compiled with the crate's doc tests, so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
