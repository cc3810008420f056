//! Client for the redis-rl module: typed commands, and the gateway of `CLIENTS.md`.

pub mod cache;
pub mod metrics;
pub mod policy;
pub mod posture;
pub mod problem;
pub mod retry;
