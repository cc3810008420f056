//! What no caller may do, over real HTTP in front of a real server: request variants the
//! framework routes to a handler (`HEAD` as `GET`, a trailing slash) are decided by that
//! route's rules; identities are bytes (a Latin-1 user is not anonymous, nor another user);
//! an identity over 256 bytes is a 431 that asks nothing of the store.

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
use common::{Server, TempFile};
use redis_rl_client::RateLimitLayer;

const POLICY: &str = r#"{
  "version": 1, "default": {"rules": []},
  "identity": {"user": "x-user"},
  "rules": {"user": {"key": "u:${user}", "limit": 2, "period": "1h"}},
  "routes": [
    {"method": "GET", "path": "/catalog", "rules": ["user"]},
    {"method": "POST", "path": "/checkout", "rules": ["user"]}
  ]
}"#;

fn admits(server: &Server) -> u64 {
    let info: String = common::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.conn())
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_rl.multi:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn variants_of_a_request_and_identities_in_bytes_are_decided_by_their_route() {
    let server = Server::start();
    let policy = TempFile::new("variants.json", POLICY);
    let gateway = support::gateway(server.port, &policy.0).await;
    let app = Router::new()
        .route("/catalog", get(|| async { "catalog" }))
        .route("/checkout", post(|| async { "checkout" }))
        .route("/checkout/", post(|| async { "checkout" }))
        .layer(RateLimitLayer::new(gateway));
    let base = support::serve(app).await;
    let http = reqwest::Client::new();

    // HEAD runs the GET handler, so it spends the GET route's budget: 2 per hour in all.
    let statuses = |responses: Vec<reqwest::Response>| -> Vec<u16> {
        responses.iter().map(|r| r.status().as_u16()).collect()
    };
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(
            http.head(format!("{base}/catalog"))
                .header("x-user", "ann")
                .send()
                .await
                .unwrap(),
        );
    }
    assert_eq!(statuses(got), [200, 200, 429]);

    // A trailing slash reaches the same handler: the same budget.
    let mut got = Vec::new();
    for path in ["/checkout", "/checkout/", "/checkout/"] {
        got.push(
            http.post(format!("{base}{path}"))
                .header("x-user", "bob")
                .send()
                .await
                .unwrap(),
        );
    }
    assert_eq!(statuses(got), [200, 200, 429]);

    // Latin-1 'é' (one byte, not UTF-8) is a user of its own: not anonymous, not 'é'.
    let user = |value: &[u8]| {
        let value = reqwest::header::HeaderValue::from_bytes(value).unwrap();
        http.get(format!("{base}/catalog"))
            .header("x-user", value)
            .send()
    };
    for _ in 0..2 {
        assert_eq!(user(b"\xe9").await.unwrap().status(), 200);
    }
    assert_eq!(user(b"\xe9").await.unwrap().status(), 429);
    assert_eq!(user("é".as_bytes()).await.unwrap().status(), 200);
    assert_eq!(
        http.get(format!("{base}/catalog"))
            .send()
            .await
            .unwrap()
            .status(),
        200,
        "anonymous has a budget of its own"
    );

    // 256 bytes are an identity; 257 are a 431 and no store call.
    let before = admits(&server);
    let long = user(&[b'a'; 257]).await.unwrap();
    assert_eq!(long.status(), 431);
    assert_eq!(long.headers()["content-type"], "application/problem+json");
    assert_eq!(admits(&server), before);
    assert_eq!(user(&[b'a'; 256]).await.unwrap().status(), 200);

    // A target above the root is a 400 from the gateway, not a request for /catalog. HTTP
    // clients remove dot segments before sending, so this one is written by hand.
    let addr = base.trim_start_matches("http://").to_string();
    let answer = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut raw = std::net::TcpStream::connect(addr).unwrap();
        raw.write_all(b"GET /../catalog HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .unwrap();
        let mut answer = Vec::new();
        raw.read_to_end(&mut answer).unwrap();
        answer
    })
    .await
    .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("\"title\":\"Bad Request\""), "{answer}");
}
