//! The gateway's options beyond the basics, over real HTTP in front of real servers: a caller
//! resolved asynchronously by the application, `durable` rules waiting for a replica (on
//! connections of their own), and shadow semaphores.

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

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::routing::get;
use axum::{Extension, Router};
use common::{cmd, digest, info_field, wait_for_sync, Server, TempFile};
use redis::aio::MultiplexedConnection;
use redis_rl_client::gateway::PolicyStore;
use redis_rl_client::{Caller, Gateway, RateLimitLayer, Rl};

fn exists(server: &Server, key: &str) -> bool {
    cmd("EXISTS").arg(key).query(&mut server.conn()).unwrap()
}

const IDENTIFY_POLICY: &str = r#"{
  "version": 1, "default": {"rules": []},
  "identity": {"user": "x-user", "tenant": "x-tenant"},
  "rules": {"user": {"key": "{t:${tenant}}:user:${user}", "limit": 2, "period": "1h"}},
  "routes": [{"method": "GET", "path": "/me", "rules": ["user"]}]
}"#;

#[tokio::test(flavor = "multi_thread")]
async fn an_application_resolves_the_caller_asynchronously_in_place_of_the_headers() {
    let server = Server::start();
    let policy = TempFile::new("identify.json", IDENTIFY_POLICY);
    let gateway = support::gateway(server.port, &policy.0).await;
    // The application's own lookup: a bearer token names a user of a tenant.
    let tokens: Arc<HashMap<&str, (&str, &str)>> =
        Arc::new(HashMap::from([("t-ann", ("ann", "acme"))]));
    let layer = RateLimitLayer::new(gateway).identify(move |request| {
        let token = request
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::to_string);
        let tokens = Arc::clone(&tokens);
        async move {
            tokio::time::sleep(Duration::from_millis(2)).await; // a lookup that takes a while
            let (user, tenant) = tokens.get(token?.as_str())?;
            Some(Caller {
                user: Some(user.to_string()),
                tenant: Some(tenant.to_string()),
            })
        }
    });
    let app = Router::new()
        .route(
            "/me",
            get(|caller: Option<Extension<Caller>>| async move {
                caller.map_or("headers".to_string(), |c| c.0.user.unwrap_or_default())
            }),
        )
        .layer(layer);
    let base = support::serve(app).await;
    let http = reqwest::Client::new();
    let me = |token: Option<&str>| {
        let mut r = http
            .get(format!("{base}/me"))
            .header("x-user", "mallory")
            .header("x-tenant", "other");
        if let Some(token) = token {
            r = r.header("authorization", format!("Bearer {token}"));
        }
        r.send()
    };

    // A resolved caller is keyed by what the application said, whatever the headers claim,
    // and the handler sees it.
    let first = me(Some("t-ann")).await.unwrap();
    assert_eq!(first.status(), 200);
    assert_eq!(first.text().await.unwrap(), "ann");
    assert!(exists(&server, "{t:acme}:user:ann"));
    assert!(!exists(&server, "{t:other}:user:mallory"));
    assert_eq!(me(Some("t-ann")).await.unwrap().status(), 200);
    assert_eq!(me(Some("t-ann")).await.unwrap().status(), 429);
    // An unknown token leaves the caller to the headers: another key, its own budget.
    let unresolved = me(Some("t-unknown")).await.unwrap();
    assert_eq!(unresolved.status(), 200);
    assert_eq!(unresolved.text().await.unwrap(), "headers");
    assert!(exists(&server, "{t:other}:user:mallory"));
}

const DURABLE_POLICY: &str = r#"{
  "version": 1, "default": {"rules": []},
  "identity": {"user": "x-user"},
  "rules": {
    "pay":  {"key": "{pay}:user:${user}", "limit": 5, "period": "1h", "durable": true},
    "read": {"key": "{pay}:read:${user}", "limit": 5, "period": "1h"}
  },
  "routes": [
    {"method": "GET", "path": "/pay", "rules": ["pay"]},
    {"method": "GET", "path": "/read", "rules": ["read"]}
  ],
  "store": {"timeout": "150ms"}
}"#;

/// `/pay` (durable) and `/read` behind `gateway`; its base URL.
async fn serve_pay_and_read(gateway: &Arc<Gateway<MultiplexedConnection>>) -> String {
    let app = Router::new()
        .route("/pay", get(|| async { "paid" }))
        .route("/read", get(|| async { "read" }))
        .layer(RateLimitLayer::new(Arc::clone(gateway)));
    support::serve(app).await
}

const UNREPLICATED: &str =
    r#"rl_gateway_decisions_total{route="GET /pay",rule="pay",outcome="unreplicated_admit"}"#;

#[tokio::test(flavor = "multi_thread")]
async fn durable_rules_wait_for_a_replica_and_count_admissions_none_acknowledged() {
    let primary = Server::start();
    let policy = TempFile::new("durable.json", DURABLE_POLICY);
    let gateway = support::gateway(primary.port, &policy.0).await;
    let base = serve_pay_and_read(&gateway).await;
    let http = reqwest::Client::new();
    let get = |path: &'static str| {
        http.get(format!("{base}{path}"))
            .header("x-user", "ann")
            .send()
    };

    // No replica: the admission stands once WAIT has given up, and is counted.
    let started = Instant::now();
    assert_eq!(get("/pay").await.unwrap().status(), 200);
    assert!(
        started.elapsed() >= Duration::from_millis(150),
        "WAIT 1 150 was not sent"
    );
    let metrics = gateway.metrics().render();
    assert!(metrics.contains(&format!("{UNREPLICATED} 1")), "{metrics}");
    // A rule that is not durable does not wait.
    assert_eq!(get("/read").await.unwrap().status(), 200);
    assert!(!gateway
        .metrics()
        .render()
        .contains("rule=\"read\",outcome=\"unreplicated"));

    // With a replica, the admission is acknowledged and the replica holds the same state.
    let replica = Server::start();
    replica.replicate_from(&primary);
    wait_for_sync(&primary, &replica);
    // A replica that has just loaded the primary's snapshot is sent the stream only after its
    // first acknowledgement, up to a second later: wait for one, on a write of its own.
    let mut p = primary.conn();
    let _: () = cmd("SET").arg("warm-up").arg(1).query(&mut p).unwrap();
    let acked: i64 = cmd("WAIT").arg(1).arg(10_000).query(&mut p).unwrap();
    assert_eq!(acked, 1, "the replica never acknowledged a write");
    assert_eq!(get("/pay").await.unwrap().status(), 200);
    let metrics = gateway.metrics().render();
    assert!(metrics.contains(&format!("{UNREPLICATED} 1")), "{metrics}");
    assert!(
        metrics.contains(r#"rule="pay",outcome="admit"} 2"#),
        "{metrics}"
    );
    let key: &[u8] = b"{pay}:user:ann";
    assert_eq!(
        digest(&mut replica.conn(), key),
        digest(&mut primary.conn(), key),
        "the acknowledged debit is on the replica"
    );
}

const SHADOW_SEMAPHORE_POLICY: &str = r#"{
  "version": 1, "default": {"rules": []},
  "identity": {"tenant": "x-tenant"},
  "rules": {
    "slots": {"key": "{t:${tenant}}:slots", "concurrency": 1, "lease": "10s", "shadow": true},
    "rate":  {"key": "{t:${tenant}}:rate", "limit": 100, "period": "1h"}
  },
  "routes": [{"method": "GET", "path": "/work", "rules": ["slots", "rate"]}]
}"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_shadow_semaphore_holds_slots_of_its_own_and_never_refuses() {
    let server = Server::start();
    let policy = TempFile::new("shadow-semaphore.json", SHADOW_SEMAPHORE_POLICY);
    let gateway = support::gateway(server.port, &policy.0).await;
    let app = Router::new()
        .route(
            "/work",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(600)).await;
                "done"
            }),
        )
        .layer(RateLimitLayer::new(Arc::clone(&gateway)));
    let base = support::serve(app).await;
    let http = reqwest::Client::new();
    let work = || {
        http.get(format!("{base}/work"))
            .header("x-tenant", "atlas")
            .send()
    };
    let rl = Rl::new(
        redis::Client::open(format!("redis://127.0.0.1:{}/", server.port))
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap(),
    );
    let in_flight = || async {
        let info = rl.info(b"shadow:{t:atlas}:slots").await.unwrap();
        info.and_then(|i| i.in_flight).unwrap_or(0)
    };
    let until = |want: u64, what: &'static str| {
        let in_flight = &in_flight;
        async move {
            let deadline = Instant::now() + Duration::from_secs(5);
            while in_flight().await != want {
                assert!(Instant::now() < deadline, "{what}");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };

    let first = tokio::spawn(work());
    until(1, "the first request never held its shadow slot").await;
    // The shadow semaphore is full, yet the second request runs, with no header of it.
    let second = work().await.unwrap();
    assert_eq!(second.status(), 200);
    assert!(!second
        .headers()
        .get("ratelimit-policy")
        .unwrap()
        .to_str()
        .unwrap()
        .contains("slots"));
    assert_eq!(first.await.unwrap().unwrap().status(), 200);
    until(0, "the shadow slot was never released").await;
    assert!(
        !exists(&server, "{t:atlas}:slots"),
        "the real key is never touched"
    );
    let metrics = gateway.metrics().render();
    assert!(
        metrics.contains(r#"rule="slots",outcome="shadow_refuse"} 1"#),
        "{metrics}"
    );
    assert!(
        !metrics.contains(r#"rule="slots",outcome="admit""#),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn durable_routes_wait_on_connections_of_their_own() {
    let server = Server::start();
    // A WAIT of a whole second, so the other route's request surely runs meanwhile.
    let policy = TempFile::new("durable-own.json", &DURABLE_POLICY.replace("150ms", "1s"));
    let client = redis::Client::open(format!("redis://127.0.0.1:{}/", server.port)).unwrap();
    let connection = || async { Rl::new(client.get_multiplexed_async_connection().await.unwrap()) };
    let gateway = Arc::new(
        Gateway::new(
            connection().await,
            PolicyStore::load_file(&policy.0).unwrap(),
            Arc::default(),
        )
        .with_durable_connections(vec![connection().await]),
    );
    let base = serve_pay_and_read(&gateway).await;
    let http = reqwest::Client::new();
    let get = |path: &'static str| {
        http.get(format!("{base}{path}"))
            .header("x-user", "ann")
            .send()
    };

    let pay = tokio::spawn(get("/pay"));
    let deadline = Instant::now() + Duration::from_secs(5);
    while info_field(&mut server.conn(), "clients", "blocked_clients").as_deref() != Some("1") {
        assert!(
            Instant::now() < deadline,
            "the durable request's WAIT never blocked"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The WAIT blocks its own connection only: the other route is answered meanwhile.
    assert_eq!(get("/read").await.unwrap().status(), 200);
    assert!(
        !pay.is_finished(),
        "the read was answered only after the WAIT"
    );
    assert_eq!(pay.await.unwrap().unwrap().status(), 200);
    let metrics = gateway.metrics().render();
    assert!(metrics.contains(&format!("{UNREPLICATED} 1")), "{metrics}");
}
