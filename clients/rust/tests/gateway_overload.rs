//! The gateway's own overload is not the store's failure (CONTRACT.md section 12): a store
//! call whose deadline passed while this process's runtime was too busy to notice is shed
//! (503, counted `shed`), and the breaker counts nothing; the same missed deadline on a
//! runtime that was free is the store's failure, and opens it. Redis is stopped (`SIGSTOP`)
//! in both, so only the runtime differs.

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

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use axum::http::HeaderMap;
use common::{Server, TempFile};
use redis::aio::MultiplexedConnection;
use redis_rl_client::gateway::{HttpHeaders, Request, VerdictKind};
use redis_rl_client::Gateway;

const POLICY: &str = r#"{
  "version": 1, "default": {"rules": []},
  "identity": {"user": "x-user"},
  "rules": {"write": {"key": "w:${user}", "limit": 1000, "period": "1s"}},
  "routes": [{"method": "POST", "path": "/checkout", "rules": ["write"],
              "on_store_error": {"mode": "deny"}}],
  "store": {"timeout": "50ms", "breaker": {"failures": 1, "open": "10s"}, "ramp": "1ms"}
}"#;

/// Redis stopped until dropped.
struct Stopped(String);

impl Stopped {
    fn new(server: &Server) -> Stopped {
        let pid = server.pid().unwrap().to_string();
        assert!(Command::new("kill")
            .args(["-STOP", &pid])
            .status()
            .unwrap()
            .success());
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-CONT", &self.0]).status();
    }
}

/// Starts a checkout's decision on its own task and lets it send its call.
async fn checkout(
    gateway: &Arc<Gateway<MultiplexedConnection>>,
) -> tokio::task::JoinHandle<VerdictKind> {
    let gateway = Arc::clone(gateway);
    let task = tokio::spawn(async move {
        let mut headers = HeaderMap::new();
        headers.insert("x-user", "ann".parse().unwrap());
        let request = Request {
            method: "POST",
            path: "/checkout",
            headers: &HttpHeaders(&headers),
            peer: None,
            caller: None,
            case_insensitive: false,
        };
        gateway.decide(&request).await.0.kind
    });
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    task
}

fn metric(gateway: &Gateway<MultiplexedConnection>, series: &str) -> Option<String> {
    let text = gateway.metrics().render();
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')
            .map(str::to_string)
    })
}

// One thread: while the test sleeps on it, no timer of the runtime can fire.
#[tokio::test(flavor = "current_thread")]
async fn a_deadline_missed_while_the_runtime_was_busy_sheds_without_opening_the_breaker() {
    let server = Server::start();
    let policy = TempFile::new("overload.json", POLICY);
    let gateway = support::gateway(server.port, &policy.0).await;
    let stopped = Stopped::new(&server);

    let task = checkout(&gateway).await;
    // The runtime's only thread is busy: the 50 ms deadline passes unnoticed, 250 ms late.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(task.await.unwrap(), VerdictKind::Shed);
    let shed = r#"rl_gateway_decisions_total{route="POST /checkout",rule="write",outcome="shed"}"#;
    assert_eq!(metric(&gateway, shed).as_deref(), Some("1"));
    let closed = r#"rl_gateway_breaker_state{state="closed"}"#;
    assert_eq!(metric(&gateway, closed).as_deref(), Some("1"));

    // The same missed deadline on a free runtime is the store's: the posture, and the breaker
    // (one failure opens it here) opens.
    let task = checkout(&gateway).await;
    assert_eq!(task.await.unwrap(), VerdictKind::Unavailable);
    let open = r#"rl_gateway_breaker_state{state="open"}"#;
    assert_eq!(metric(&gateway, open).as_deref(), Some("1"));
    drop(stopped);
}
