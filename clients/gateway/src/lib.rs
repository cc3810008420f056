//! rl-gateway: the enforcement point of `clients/CONTRACT.md` section 10, for stacks that will
//! not link a library. Every face decides with the engine (`redis-rl-engine`) through the Rust
//! client's gateway, against Redis or the in-memory store.

pub mod admin;
pub mod auth;
pub mod policy_cmd;
pub mod proxy;
pub mod regions;
pub mod replay;
pub mod rls;
pub mod server;
pub mod shutdown;
pub mod store;
