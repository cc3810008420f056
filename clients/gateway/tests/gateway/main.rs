//! rl-gateway's tests, in one binary (each links the whole HTTP, gRPC and Redis stack, so one
//! link instead of fourteen): each module a face or a subcommand, against real processes on
//! loopback.

// Test code stops at its first surprise: all of it, not only the `#[test]` functions that
// clippy.toml covers, may unwrap, expect, panic and index.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use rl_testkit as common;
mod rls_support;
mod support;

mod auth;
mod capacity;
mod charge;
mod envoy_example;
mod fleet;
mod follow;
mod forward_auth;
mod forward_auth_hostile;
mod lifecycle;
mod policy_cli;
mod policy_cmd;
mod proxy;
mod regions;
mod replay;
mod rls;
mod rls_config;
mod rls_envoy_protos;
mod rls_grant;
mod rls_reference;
mod rls_store;
mod stall;
