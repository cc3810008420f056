//! Decision logs: a sample of decisions, every shadow refusal and every admission without the
//! store, carrying route, rule, policy version and outcome, never a key or an identity.

// Test code stops at its first surprise: all of it, not only the `#[test]` functions that
// clippy.toml covers, may unwrap, expect, panic and index.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use rl_testkit as common;
mod support;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use common::{Server, TempFile};
use http::HeaderMap;
use redis_rl_client::gateway::PolicyStore;
use redis_rl_client::gateway::{HttpHeaders, Request, VerdictKind};
use redis_rl_client::{Gateway, Rl};
use support::Captured;

const POLICY: &str = r#"{
  "version": 4, "default": {"rules": []},
  "identity": {"user": "x-user"},
  "rules": {
    "user":  {"key": "user:${user}", "limit": 2, "period": "1h"},
    "probe": {"key": "probe:${user}", "limit": 1, "period": "1h", "shadow": true}
  },
  "routes": [
    {"method": "GET", "path": "/a", "rules": ["user", "probe"], "on_store_error": {"mode": "allow"}}
  ],
  "store": {"timeout": "200ms", "breaker": {"failures": 100, "open": "1s"}}
}"#;

async fn decide(gateway: &Gateway<redis::aio::MultiplexedConnection>) -> VerdictKind {
    let mut headers = HeaderMap::new();
    headers.insert("x-user", "ann-4711".parse().unwrap());
    let parts = Request {
        method: "GET",
        path: "/a",
        headers: &HttpHeaders(&headers),
        peer: Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        caller: None,
        case_insensitive: false,
    };
    gateway.decide(&parts).await.0.kind
}

// One thread, so the subscriber set for the test sees every event of the gateway.
#[tokio::test(flavor = "current_thread")]
async fn a_sample_of_decisions_and_every_shadow_refusal_and_open_admission_are_logged() {
    let captured = Captured::default();
    let _default = tracing::subscriber::set_default(captured.subscriber());

    let server = Server::start();
    let policy = TempFile::new("logs.json", POLICY);
    let client = redis::Client::open(format!("redis://127.0.0.1:{}/", server.port)).unwrap();
    let rl = Rl::new(client.get_multiplexed_async_connection().await.unwrap());
    let store = || PolicyStore::load_file(&policy.0).unwrap();
    let all = Gateway::new(rl.clone(), store(), Arc::default()).with_decision_log_sample(1.0);
    let none = Gateway::new(rl, store(), Arc::default()).with_decision_log_sample(0.0);

    // Sampled: the first request is admitted, and so by its shadow rule (1 per hour).
    assert_eq!(decide(&all).await, VerdictKind::Admit);
    let lines = captured.lines_of("redis_rl_client::decision");
    assert_eq!(lines.len(), 1, "{lines:?}");
    for part in [
        "redis_rl_client::decision",
        "decision",
        r#"route="GET /a""#,
        r#"rule="user""#,
        "policy_version=4",
        r#"outcome="admit""#,
    ] {
        assert!(lines[0].contains(part), "{part} missing from {}", lines[0]);
    }
    // Not sampled: the second is admitted, unlogged, but its shadow rule's refusal is logged.
    assert_eq!(decide(&none).await, VerdictKind::Admit);
    let lines = captured.lines_of("redis_rl_client::decision");
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines[1].contains("a shadow rule would have refused"),
        "{}",
        lines[1]
    );
    assert!(lines[1].contains(r#"rule="probe""#), "{}", lines[1]);

    // The store gone, the route allows: logged every time, as a warning.
    drop(server);
    assert_eq!(decide(&none).await, VerdictKind::Unavailable);
    let lines = captured.lines_of("redis_rl_client::decision");
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(lines[2].contains("WARN"), "{}", lines[2]);
    assert!(lines[2].contains(r#"outcome="open_admit""#), "{}", lines[2]);
    // Keys and identities never appear.
    assert!(lines.iter().all(|l| !l.contains("ann-4711")), "{lines:?}");
}
