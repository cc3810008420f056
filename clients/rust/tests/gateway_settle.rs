//! `settle` rules over real HTTP in front of a real server: the estimate reserved, settled at
//! the units the backend reports, an `Idempotency-Key` not charged again until an attempt
//! answered a 2xx, and a key that keeps as many reservations as the module allows refusing the
//! caller with a 429 (never a 500, never the breaker).

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

use axum::routing::{get, post};
use axum::Router;
use common::{cmd, Server, TempFile};
use redis_rl_client::{RateLimitLayer, Rl};

const POLICY: &str = r#"{
  "version": 1, "default": {"rules": []},
  "identity": {"user": "x-user", "tenant": "x-tenant"},
  "rules": {
    "export": {"key": "{t:${tenant}}:export", "limit": 100, "period": "1h", "cost": 10, "settle": true},
    "user":   {"key": "{t:${tenant}}:user:${user}", "limit": 4, "period": "1h"}
  },
  "routes": [
    {"method": "POST", "path": "/export", "rules": ["export", "user"]},
    {"method": "GET", "path": "/catalog", "rules": ["user"]}
  ]
}"#;

/// Answers with the status `?status=N` (200 without) and reports `X-Actual-Cost: N` for
/// `?units=N`.
async fn backend(uri: axum::http::Uri) -> axum::response::Response {
    let param = |name: &str| {
        uri.query()?
            .split('&')
            .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
            .map(str::to_owned)
    };
    let mut response = axum::response::IntoResponse::into_response("done");
    if let Some(status) = param("status") {
        *response.status_mut() = status.parse().unwrap();
    }
    if let Some(units) = param("units") {
        response
            .headers_mut()
            .insert("x-actual-cost", units.parse().unwrap());
    }
    response
}

async fn start(server: &Server) -> (String, TempFile) {
    let policy = TempFile::new("settle.json", POLICY);
    let gateway = support::gateway(server.port, &policy.0).await;
    let app = Router::new()
        .route("/export", post(backend))
        .route("/catalog", get(backend))
        .layer(RateLimitLayer::new(gateway));
    (support::serve(app).await, policy)
}

fn header<'a>(response: &'a reqwest::Response, name: &str) -> &'a str {
    response
        .headers()
        .get(name)
        .map_or("", |v| v.to_str().unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_reported_cost_is_settled_and_an_idempotency_key_charged_again_after_a_2xx() {
    let server = Server::start();
    let (base, _policy) = start(&server).await;
    let client = redis::Client::open(format!("redis://127.0.0.1:{}/", server.port)).unwrap();
    let rl = Rl::new(client.get_multiplexed_async_connection().await.unwrap());
    let remaining = || async {
        rl.info(b"{t:atlas}:export")
            .await
            .unwrap()
            .unwrap()
            .remaining
    };
    let http = reqwest::Client::new();
    let export = |query: &str, key: Option<&str>| {
        let mut request = http
            .post(format!("{base}/export{query}"))
            .header("x-tenant", "atlas")
            .header("x-user", "ann");
        if let Some(key) = key {
            request = request.header("idempotency-key", key);
        }
        request.send()
    };

    // The estimate (10) is reserved; the backend failed, so it is kept for the key's retry.
    let failed = export("?status=502", Some("k1")).await.unwrap();
    assert_eq!(failed.status(), 502);
    assert!(header(&failed, "ratelimit").starts_with(r#""export";r=90;"#));
    assert_eq!(remaining().await, 90);
    // The retry is not charged again (the user rule still counts it); its 200 settles the
    // reservation at the 3 units the backend reported and forgets it.
    assert_eq!(export("?units=3", Some("k1")).await.unwrap().status(), 200);
    assert_eq!(remaining().await, 97);
    // The same key after that 2xx is charged like a new request.
    assert_eq!(export("?units=3", Some("k1")).await.unwrap().status(), 200);
    assert_eq!(remaining().await, 94);
    // No report: the estimate stands.
    assert_eq!(export("", None).await.unwrap().status(), 200);
    assert_eq!(remaining().await, 84);
    // The user rule refuses the 5th request after the reservation was made: it is refunded.
    let refused = export("?units=1", None).await.unwrap();
    assert_eq!(refused.status(), 429);
    let body: serde_json::Value = serde_json::from_str(&refused.text().await.unwrap()).unwrap();
    assert_eq!(body["violated-policies"], serde_json::json!(["user"]));
    assert_eq!(remaining().await, 84);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_full_of_reservations_refuses_the_caller_with_a_429_and_trips_nothing() {
    // The script rewrites a key's reservations at each call: filling one takes minutes there.
    // Its refusal's text is the module's, which is what the engine reads (the engine's
    // `a_full_reservation_table_is_told_apart_in_module_and_script_mode`).
    if common::script_mode() {
        return;
    }
    let server = Server::start();
    let (base, _policy) = start(&server).await;
    // 10,000 attempts under distinct Idempotency-Keys still held: the module keeps no more.
    let mut pipe = redis::pipe();
    for i in 0..10_000 {
        pipe.add_command(
            cmd("RL.ADMIT")
                .arg("{t:full}:export")
                .arg(1_000_000)
                .arg("1h")
                .arg("RESERVE")
                .arg(format!("held-{i}"))
                .clone(),
        )
        .ignore();
    }
    pipe.query::<()>(&mut server.conn()).unwrap();
    let http = reqwest::Client::new();
    let export = |tenant: &str, user: String| {
        http.post(format!("{base}/export"))
            .header("x-tenant", tenant)
            .header("x-user", user)
            .header("idempotency-key", "one-more")
            .send()
    };
    for i in 0..6 {
        let refused = export("full", format!("u{i}")).await.unwrap();
        assert_eq!(refused.status(), 429);
        assert_eq!(header(&refused, "retry-after"), "3600");
        let body: serde_json::Value = serde_json::from_str(&refused.text().await.unwrap()).unwrap();
        assert_eq!(body["violated-policies"], serde_json::json!(["export"]));
    }
    // Six refusals later the breaker is closed: another tenant is decided by the store.
    let other = export("other", "ann".to_owned()).await.unwrap();
    assert_eq!(other.status(), 200);
    assert!(header(&other, "ratelimit").starts_with(r#""export";r=90;"#));
}
