//! The concurrency layer over real HTTP in front of a real server: slots held while the
//! service works and released after the response, a full semaphore answered 429 with its
//! headers, and the two answers when the store is gone.

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

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::routing::get;
use axum::Router;
use common::Server;
use redis::aio::ConnectionManager;
use redis_rl_client::gateway::concurrency::WhenUnavailable;
use redis_rl_client::{ConcurrencyLimitLayer, Rl};
use rl_engine::metrics::Metrics;

async fn rl(port: u16) -> Rl<ConnectionManager> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    Rl::new(client.get_connection_manager().await.unwrap())
}

/// Two slots per tenant (`x-tenant`; a request without one is not limited), in front of a
/// handler that works for `?ms=N` milliseconds.
async fn serve(
    rl: Rl<ConnectionManager>,
    unavailable: WhenUnavailable,
    metrics: Arc<Metrics>,
) -> String {
    let layer = ConcurrencyLimitLayer::new(rl, "reports", 2, Duration::from_secs(30), |request| {
        let tenant = request
            .headers()
            .get("x-tenant")
            .and_then(|v| v.to_str().ok())
            .map(|t| format!("reports:{t}"));
        async move { tenant }
    })
    .unwrap()
    .timeout(Duration::from_millis(200))
    .when_unavailable(unavailable)
    .metrics(metrics);
    let app = Router::new()
        .route(
            "/report",
            get(|uri: axum::http::Uri| async move {
                let ms = uri
                    .query()
                    .and_then(|q| q.strip_prefix("ms="))
                    .map_or(0, |n| n.parse().unwrap());
                tokio::time::sleep(Duration::from_millis(ms)).await;
                "report"
            }),
        )
        .layer(layer);
    support::serve(app).await
}

async fn in_flight(rl: &Rl<ConnectionManager>) -> u64 {
    let info = rl.info(b"reports:atlas").await.unwrap();
    info.and_then(|i| i.in_flight).unwrap_or(0)
}

async fn until_in_flight(rl: &Rl<ConnectionManager>, want: u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while in_flight(rl).await != want {
        assert!(Instant::now() < deadline, "in flight never reached {want}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn header(response: &reqwest::Response, name: &str) -> String {
    response
        .headers()
        .get(name)
        .map_or(String::new(), |v| v.to_str().unwrap().to_string())
}

#[tokio::test(flavor = "multi_thread")]
async fn holds_a_slot_per_request_and_refuses_past_the_capacity() {
    let server = Server::start();
    let metrics = Arc::new(Metrics::default());
    let base = serve(
        rl(server.port).await,
        WhenUnavailable::Deny,
        Arc::clone(&metrics),
    )
    .await;
    let observer = rl(server.port).await;
    let http = reqwest::Client::new();
    let report = |ms: u64, tenant: Option<&str>| {
        let mut r = http.get(format!("{base}/report?ms={ms}"));
        if let Some(t) = tenant {
            r = r.header("x-tenant", t);
        }
        r.send()
    };

    let slow = [
        tokio::spawn(report(700, Some("atlas"))),
        tokio::spawn(report(700, Some("atlas"))),
    ];
    until_in_flight(&observer, 2).await;
    let third = report(0, Some("atlas")).await.unwrap();
    assert_eq!(third.status(), 429);
    assert_eq!(
        header(&third, "ratelimit-policy"),
        r#""reports";q=2;qu="concurrent-requests""#
    );
    assert!(header(&third, "ratelimit").starts_with(r#""reports";r=0;t="#));
    // The earliest lease ends in about 30 s: that is when a slot is sure to be free.
    let retry: u64 = header(&third, "retry-after").parse().unwrap();
    assert!((29..=30).contains(&retry), "Retry-After {retry}");
    let body: serde_json::Value = serde_json::from_str(&third.text().await.unwrap()).unwrap();
    assert_eq!(body["violated-policies"], serde_json::json!(["reports"]));
    // Another tenant has slots of its own; a request with no key is not limited.
    assert_eq!(report(0, Some("zenith")).await.unwrap().status(), 200);
    assert_eq!(report(0, None).await.unwrap().status(), 200);

    // The first to acquire saw one slot left, the second none.
    let mut seen = Vec::new();
    for done in slow {
        let done = done.await.unwrap().unwrap();
        assert_eq!(done.status(), 200);
        seen.push(header(&done, "ratelimit"));
        assert_eq!(done.text().await.unwrap(), "report");
    }
    seen.sort();
    assert_eq!(seen, [r#""reports";r=0;t=0"#, r#""reports";r=1;t=0"#]);
    // Released once the responses were sent: the next request is admitted.
    until_in_flight(&observer, 0).await;
    let again = report(0, Some("atlas")).await.unwrap();
    assert_eq!(again.status(), 200);
    assert_eq!(header(&again, "ratelimit"), r#""reports";r=1;t=0"#);
    // Four admitted on a key (two tenants; the keyless request is not counted), one refused.
    let text = metrics.render();
    for line in [
        r#"rl_gateway_decisions_total{route="reports",rule="reports",outcome="admit"} 4"#,
        r#"rl_gateway_decisions_total{route="reports",rule="reports",outcome="refuse"} 1"#,
    ] {
        assert!(text.contains(line), "{line} missing from\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_store_that_cannot_answer_denies_or_allows_as_configured() {
    let server = Server::start();
    let port = server.port;
    let metrics = Arc::new(Metrics::default());
    let deny = serve(rl(port).await, WhenUnavailable::Deny, Arc::clone(&metrics)).await;
    let allow = serve(rl(port).await, WhenUnavailable::Allow, Arc::clone(&metrics)).await;
    drop(server);
    let http = reqwest::Client::new();
    let get = |base: &str| {
        http.get(format!("{base}/report"))
            .header("x-tenant", "atlas")
            .send()
    };

    let started = Instant::now();
    let denied = get(&deny).await.unwrap();
    assert_eq!(denied.status(), 503);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "a 503 must come fast"
    );
    assert!(header(&denied, "ratelimit").is_empty());
    assert_eq!(header(&denied, "retry-after"), "1");
    assert_eq!(header(&denied, "content-type"), "application/problem+json");
    assert_eq!(get(&allow).await.unwrap().status(), 200);
    let text = metrics.render();
    for outcome in ["unavailable_deny", "open_admit"] {
        let line = format!(r#"rule="reports",outcome="{outcome}"}} 1"#);
        assert!(text.contains(&line), "{line} missing from\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_capacity_or_a_lease_the_module_would_refuse_is_refused_at_once() {
    let server = Server::start();
    let none = |_: &axum::http::Request<axum::body::Body>| async { None::<String> };
    let lease = Duration::from_secs(1);
    for (capacity, lease, wrong) in [
        (0, lease, "capacity 0"),
        (100_001, lease, "capacity 100001"),
        (1, Duration::ZERO, "lease 0ns"),
        (
            1,
            Duration::from_micros(1500),
            "not a whole number of milliseconds",
        ),
    ] {
        match ConcurrencyLimitLayer::new(rl(server.port).await, "r", capacity, lease, none) {
            Err(redis_rl_client::Error::InvalidRequest(text)) => {
                assert!(text.contains(wrong), "{text}")
            }
            Err(other) => panic!("{other:?}"),
            Ok(_) => panic!("{wrong} was accepted"),
        }
    }
}
