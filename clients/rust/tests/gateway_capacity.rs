//! Capacity through the tower layer in front of a real server: a flood of batch work at twice
//! what the capacity admits leaves every critical request served, and the shed batch requests
//! get the capacity's 503 (section 14 of the contract).

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

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::routing::post;
use axum::Router;
use common::{Server, TempFile};
use redis_rl_client::RateLimitLayer;

const POLICY: &str = r#"{
  "version": 1, "default": {"rules": []},
  "identity": {"tenant": "x-tenant"},
  "rules": {"tenant": {"key": "{t:${tenant}}:all", "limit": 100000, "period": "1s"}},
  "capacity": {"orders": {"limit": {"fixed": 8}}},
  "routes": [
    {"method": "POST", "path": "/checkout", "rules": ["tenant"], "capacity": "orders", "priority": "critical"},
    {"method": "POST", "path": "/export", "rules": ["tenant"], "capacity": "orders", "priority": "batch"}
  ]
}"#;

/// A backend whose every request takes 50 ms.
async fn work() -> &'static str {
    tokio::time::sleep(Duration::from_millis(50)).await;
    "done"
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_flood_at_twice_the_capacity_leaves_critical_requests_served() {
    let server = Server::start();
    let policy = TempFile::new("capacity.json", POLICY);
    let gateway = support::gateway(server.port, &policy.0).await;
    let app = Router::new()
        .route("/checkout", post(work))
        .route("/export", post(work))
        .layer(RateLimitLayer::new(gateway));
    let base = support::serve(app).await;
    let http = reqwest::Client::new();
    let running = Arc::new(AtomicBool::new(true));
    let (served, shed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut flood = Vec::new();
    for _ in 0..16 {
        let (http, base, running) = (http.clone(), base.clone(), running.clone());
        let (served, shed) = (served.clone(), shed.clone());
        flood.push(tokio::spawn(async move {
            while running.load(Ordering::Relaxed) {
                let r = http
                    .post(format!("{base}/export"))
                    .header("x-tenant", "acme")
                    .send()
                    .await
                    .unwrap();
                match r.status().as_u16() {
                    200 => served.fetch_add(1, Ordering::Relaxed),
                    503 => {
                        let body: serde_json::Value =
                            serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
                        assert_eq!(body["type"], "urn:redis-rl:problem:capacity-exceeded");
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        shed.fetch_add(1, Ordering::Relaxed)
                    }
                    other => panic!("batch answered {other}"),
                };
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..10 {
        let calls = (0..4).map(|_| {
            http.post(format!("{base}/checkout"))
                .header("x-tenant", "acme")
                .send()
        });
        for r in futures_util::future::join_all(calls).await {
            assert_eq!(r.unwrap().status(), 200);
        }
    }
    running.store(false, Ordering::Relaxed);
    for f in flood {
        f.await.unwrap();
    }
    let (served, shed) = (served.load(Ordering::Relaxed), shed.load(Ordering::Relaxed));
    assert!(
        served > 0 && shed > 0,
        "batch: {served} served, {shed} shed"
    );
}
