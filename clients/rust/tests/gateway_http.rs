//! The gateway layer over real HTTP, in front of a real server with the module: headers on
//! admission, 429 with its body, the negative cache sparing the store, the postures when the
//! server is gone, and the northstar example end to end.

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

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::routing::{get, post};
use axum::{Extension, Router};
use common::{cmd, Server, TempFile};
use redis::aio::MultiplexedConnection;
use redis_rl_client::gateway::PolicyStore;
use redis_rl_client::{Gateway, RateLimitLayer, Rl, Verdict};

const POLICY: &str = r#"{
  "version": 3, "default": {"rules": []},
  "identity": {"user": "x-user", "tenant": "x-tenant"},
  "rules": {
    "read":   {"key": "{t:${tenant}}:read:${user}", "limit": 1, "period": "1m", "burst": 20},
    "tenant": {"key": "{t:${tenant}}:tenant", "limit": 1000, "period": "1m", "public": false},
    "write":  {"key": "{t:${tenant}}:write:${user}", "limit": 5, "period": "1s", "burst": 10}
  },
  "routes": [
    {"method": "GET", "path": "/catalog", "rules": ["read", "tenant"],
     "on_store_error": {"mode": "fallback", "limit": 3, "period": "1m", "burst": 3}},
    {"method": "POST", "path": "/checkout", "rules": ["write"], "on_store_error": {"mode": "deny"}}
  ],
  "negative_cache": {"max": "5s", "entries": 1000},
  "store": {"timeout": "200ms", "breaker": {"failures": 2, "open": "10s"}, "ramp": "1s"},
  "retry_after_jitter": 0.2
}"#;

/// The handler reports how the gateway admitted it, from the request's extensions.
async fn handler(Extension(verdict): Extension<Verdict>) -> String {
    format!("{:?} v{}", verdict.kind, verdict.policy_version)
}

/// Answers after `?ms=N` milliseconds, holding the request's semaphore slots meanwhile, and
/// reports `X-Actual-Cost: N` for `?units=N`.
async fn slow(uri: axum::http::Uri) -> axum::response::Response {
    let param = |name: &str| {
        uri.query()?
            .split('&')
            .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
            .map(|n| n.parse::<u64>().unwrap())
    };
    tokio::time::sleep(Duration::from_millis(param("ms").unwrap_or(0))).await;
    let mut response = axum::response::IntoResponse::into_response("done");
    if let Some(units) = param("units") {
        response.headers_mut().insert("x-actual-cost", units.into());
    }
    response
}

async fn start_gateway(
    server: &Server,
    policy: &TempFile,
) -> (String, Arc<Gateway<MultiplexedConnection>>) {
    let gateway = support::gateway(server.port, &policy.0).await;
    let app = Router::new()
        .route("/catalog", get(handler))
        .route("/checkout", post(handler))
        .route("/free", get(handler))
        .route("/export", post(slow))
        .layer(RateLimitLayer::new(Arc::clone(&gateway)))
        .route("/healthz", get(|| async { "ok" }));
    (support::serve(app).await, gateway)
}

fn multi_calls(server: &Server) -> u64 {
    calls(server, "rl.multi")
}

fn calls(server: &Server, command: &str) -> u64 {
    u64::try_from(common::command_calls(&mut server.conn(), command)).unwrap()
}

fn header<'a>(response: &'a reqwest::Response, name: &str) -> &'a str {
    response
        .headers()
        .get(name)
        .map_or("", |v| v.to_str().unwrap())
}

async fn get_catalog(http: &reqwest::Client, base: &str, user: Option<&str>) -> reqwest::Response {
    let mut request = http
        .get(format!("{base}/catalog"))
        .header("x-tenant", "atlas");
    if let Some(user) = user {
        request = request.header("x-user", user);
    }
    request.send().await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn admits_with_headers_refuses_the_21st_then_refuses_from_the_cache() {
    let server = Server::start();
    let policy = TempFile::new("admit.json", POLICY);
    let (base, gateway) = start_gateway(&server, &policy).await;
    let http = reqwest::Client::new();

    let first = get_catalog(&http, &base, Some("ann")).await;
    assert_eq!(first.status(), 200);
    assert_eq!(
        header(&first, "ratelimit-policy"),
        r#""read";q=1;w=60;rl-burst=20, "tenant";q=1000;w=60"#
    );
    assert!(
        header(&first, "ratelimit").starts_with(r#""read";r=19;t="#),
        "{}",
        header(&first, "ratelimit")
    );
    assert_eq!(first.text().await.unwrap(), "Admit v3");

    // Without a user, the non-public tenant rule is hidden.
    let anonymous = get_catalog(&http, &base, None).await;
    assert_eq!(anonymous.status(), 200);
    assert_eq!(
        header(&anonymous, "ratelimit-policy"),
        r#""read";q=1;w=60;rl-burst=20"#
    );

    for n in 2..=20 {
        let response = get_catalog(&http, &base, Some("ann")).await;
        assert_eq!(response.status(), 200, "request {n}");
    }
    let refused = get_catalog(&http, &base, Some("ann")).await;
    assert_eq!(refused.status(), 429);
    // One token a minute: the true wait is about 60 s, jitter adds at most 20 %.
    let retry: u64 = header(&refused, "retry-after").parse().unwrap();
    assert!((58..=73).contains(&retry), "Retry-After {retry}");
    assert_eq!(header(&refused, "content-type"), "application/problem+json");
    assert!(header(&refused, "ratelimit").contains(r#""read";r=0;t="#));
    let body: serde_json::Value = serde_json::from_str(&refused.text().await.unwrap()).unwrap();
    assert_eq!(body["status"], 429);
    assert_eq!(body["violated-policies"], serde_json::json!(["read"]));

    // 22 requests asked the store once each; the next ones are refused locally.
    assert_eq!(multi_calls(&server), 22);
    for _ in 0..5 {
        let cached = get_catalog(&http, &base, Some("ann")).await;
        assert_eq!(cached.status(), 429);
        assert!(header(&cached, "retry-after").parse::<u64>().unwrap() >= 1);
    }
    assert_eq!(multi_calls(&server), 22);
    // Another user is not refused by ann's entry.
    assert_eq!(get_catalog(&http, &base, Some("bob")).await.status(), 200);
    assert_eq!(multi_calls(&server), 23);

    let metrics = gateway.metrics().render();
    for line in [
        r#"rl_gateway_decisions_total{route="GET /catalog",rule="read",outcome="admit"} 22"#,
        r#"rl_gateway_decisions_total{route="GET /catalog",rule="read",outcome="refuse"} 1"#,
        r#"rl_gateway_decisions_total{route="GET /catalog",rule="read",outcome="refuse_cached"} 5"#,
        "rl_gateway_policy_version 3",
    ] {
        assert!(metrics.contains(line), "{line} missing from\n{metrics}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn store_down_deny_answers_503_fast_and_fallback_keeps_its_cap() {
    let server = Server::start();
    let policy = TempFile::new("down.json", POLICY);
    let (base, gateway) = start_gateway(&server, &policy).await;
    let http = reqwest::Client::new();
    let checkout = || {
        http.post(format!("{base}/checkout"))
            .header("x-tenant", "atlas")
            .header("x-user", "ann")
            .send()
    };
    assert_eq!(checkout().await.unwrap().status(), 200);

    drop(server);
    for _ in 0..4 {
        let started = Instant::now();
        let denied = checkout().await.unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(denied.status(), 503);
        assert!(header(&denied, "retry-after").parse::<u64>().unwrap() >= 10);
        assert_eq!(header(&denied, "ratelimit"), "");
        assert_eq!(header(&denied, "content-type"), "application/problem+json");
        let body: serde_json::Value = serde_json::from_str(&denied.text().await.unwrap()).unwrap();
        assert_eq!(body["status"], 503);
        assert_eq!(body["title"], "Service Unavailable");
    }

    // The fallback admits its burst of 3 for ann's key, then refuses.
    for n in 1..=3 {
        let response = get_catalog(&http, &base, Some("ann")).await;
        assert_eq!(response.status(), 200, "fallback request {n}");
        assert_eq!(response.text().await.unwrap(), "Unavailable v3");
    }
    let refused = get_catalog(&http, &base, Some("ann")).await;
    assert_eq!(refused.status(), 429);
    let body: serde_json::Value = serde_json::from_str(&refused.text().await.unwrap()).unwrap();
    assert_eq!(body["violated-policies"], serde_json::json!(["read"]));

    assert_eq!(
        http.get(format!("{base}/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let metrics = gateway.metrics().render();
    for line in [
        r#"rl_gateway_decisions_total{route="POST /checkout",rule="write",outcome="unavailable_deny"} 4"#,
        r#"rl_gateway_decisions_total{route="GET /catalog",rule="read",outcome="fallback_admit"} 3"#,
        r#"rl_gateway_decisions_total{route="GET /catalog",rule="read",outcome="fallback_refuse"} 1"#,
        r#"rl_gateway_breaker_state{state="open"} 1"#,
    ] {
        assert!(metrics.contains(line), "{line} missing from\n{metrics}");
    }
}

/// The northstar process, killed when the test ends.
struct Northstar(Child);

impl Drop for Northstar {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn northstar_serves_the_policy_end_to_end() {
    let server = Server::start();
    let example = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("northstar.policy.json"),
    )
    .unwrap();
    let policy = TempFile::new("northstar.json", &example);
    let mut child = Command::new(env!("CARGO_BIN_EXE_northstar"))
        .args(["--redis", &format!("redis://127.0.0.1:{}", server.port)])
        .args(["--listen", "127.0.0.1:0", "--policy"])
        .arg(&policy.0)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let _northstar = Northstar(child);
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        line
    })
    .await
    .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_string();
    let base = format!("http://{addr}");
    let http = reqwest::Client::new();

    assert_eq!(
        http.get(format!("{base}/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let catalog = http
        .get(format!("{base}/catalog?units=3"))
        .header("x-tenant", "atlas")
        .header("x-user", "ann")
        .send()
        .await
        .unwrap();
    assert_eq!(catalog.status(), 200);
    assert_eq!(header(&catalog, "x-actual-cost"), "3");
    assert!(header(&catalog, "ratelimit").starts_with(r#""read";r=19;t="#));
    let body: serde_json::Value = serde_json::from_str(&catalog.text().await.unwrap()).unwrap();
    assert_eq!(body["path"], "/catalog");

    // Plans: the tenant map gives globex and initech their plan's numbers, atlas the default's.
    for (tenant, inflight, limit) in [("globex", 8, 1000), ("initech", 3, 20), ("atlas", 3, 100)] {
        let export = http
            .post(format!("{base}/reports/export"))
            .header("x-tenant", tenant)
            .send()
            .await
            .unwrap();
        assert_eq!(export.status(), 200, "{tenant}");
        assert_eq!(
            header(&export, "ratelimit-policy"),
            format!(r#""inflight";q={inflight};qu="concurrent-requests", "export";q={limit};w=60"#),
            "{tenant}"
        );
    }

    // A template route: each order id has its own budget (`//orders/18/` is `/orders/18`);
    // an exempt route is never limited, and counted.
    let order = |path: &'static str| {
        http.get(format!("{base}{path}"))
            .header("x-tenant", "ns-orders")
            .send()
    };
    let mut codes = Vec::new();
    for _ in 0..6 {
        codes.push(order("/orders/17").await.unwrap().status().as_u16());
    }
    assert_eq!(codes, [200, 200, 200, 200, 200, 429]);
    let other = order("//orders/18/").await.unwrap();
    assert_eq!(other.status(), 200);
    assert_eq!(header(&other, "ratelimit-policy"), r#""order";q=5;w=60"#);
    assert!(header(&other, "ratelimit").starts_with(r#""order";r=4;"#));
    for _ in 0..20 {
        let status = http.get(format!("{base}/status")).send().await.unwrap();
        assert_eq!(status.status(), 200);
        assert!(status.headers().get("ratelimit").is_none());
    }

    // The login rule counts failed attempts: 20 per 10 s per IP, then 429.
    for n in 1..=20 {
        let login = http.post(format!("{base}/login")).send().await.unwrap();
        assert_eq!(login.status(), 401, "login {n}");
    }
    let login = http
        .post(format!("{base}/login"))
        .header("x-password", "ok")
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), 429);

    let metrics = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("rl_gateway_policy_version 7"), "{metrics}");
    assert!(metrics.contains(
        r#"rl_gateway_decisions_total{route="POST /login",rule="anon",outcome="refuse"} 1"#
    ));
    assert!(metrics
        .contains(r#"rl_gateway_decisions_total{route="status",rule="",outcome="exempt"} 20"#));

    // Reloading the same version is refused; a higher one is taken.
    let stale = http.post(format!("{base}/-/reload")).send().await.unwrap();
    assert_eq!(stale.status(), 409);
    std::fs::write(
        &policy.0,
        example.replace("\"version\": 7", "\"version\": 8"),
    )
    .unwrap();
    let fresh = http.post(format!("{base}/-/reload")).send().await.unwrap();
    assert_eq!(fresh.status(), 200);
    assert_eq!(fresh.text().await.unwrap(), r#"{"version":8}"#);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_no_route_names_passes_without_a_store_call() {
    let server = Server::start();
    let policy = TempFile::new("pass.json", POLICY);
    let (base, _gateway) = start_gateway(&server, &policy).await;
    let http = reqwest::Client::new();
    let before = multi_calls(&server);
    let response = http.get(format!("{base}/free")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "ratelimit"), "");
    assert_eq!(response.text().await.unwrap(), "Admit v3");
    assert_eq!(multi_calls(&server), before);
}

const SEMAPHORE_POLICY: &str = r#"{
  "version": 1, "default": {"rules": []},
  "identity": {"user": "x-user", "tenant": "x-tenant"},
  "rules": {
    "inflight": {"key": "{t:${tenant}}:inflight", "concurrency": 2, "lease": "60s"},
    "export":   {"key": "{t:${tenant}}:export", "limit": 1, "period": "1h", "burst": 3},
    "probe":    {"key": "probe:${user}", "limit": 1, "period": "1h", "shadow": true}
  },
  "routes": [{"method": "POST", "path": "/export", "rules": ["inflight", "export", "probe"]}]
}"#;

async fn in_flight(rl: &Rl<MultiplexedConnection>) -> u64 {
    let info = rl.info(b"{t:atlas}:inflight").await.unwrap();
    info.and_then(|i| i.in_flight).unwrap_or(0)
}

/// Waits until the slots are released (the release is sent once the response body is done).
async fn wait_released(rl: &Rl<MultiplexedConnection>) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while in_flight(rl).await > 0 {
        assert!(Instant::now() < deadline, "the slots were never released");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn semaphores_hold_while_the_backend_works_and_shadow_rules_never_refuse() {
    let server = Server::start();
    let policy = TempFile::new("semaphore.json", SEMAPHORE_POLICY);
    let (base, gateway) = start_gateway(&server, &policy).await;
    let client = redis::Client::open(format!("redis://127.0.0.1:{}/", server.port)).unwrap();
    let rl = Rl::new(client.get_multiplexed_async_connection().await.unwrap());
    let http = reqwest::Client::new();
    let export = |ms: u64| {
        http.post(format!("{base}/export?ms={ms}"))
            .header("x-tenant", "atlas")
            .header("x-user", "ann")
            .send()
    };

    // Two slow exports hold both slots; a third is refused by the semaphore, not the rate.
    let (a, b) = (tokio::spawn(export(800)), tokio::spawn(export(800)));
    let deadline = Instant::now() + Duration::from_secs(5);
    while in_flight(&rl).await < 2 {
        assert!(
            Instant::now() < deadline,
            "the slow exports never both held a slot"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let third = export(0).await.unwrap();
    assert_eq!(third.status(), 429);
    assert!(header(&third, "ratelimit").starts_with(r#""inflight";r=0;t="#));
    let body: serde_json::Value = serde_json::from_str(&third.text().await.unwrap()).unwrap();
    assert_eq!(body["violated-policies"], serde_json::json!(["inflight"]));
    for slow in [a, b] {
        let done = slow.await.unwrap().unwrap();
        assert_eq!(done.status(), 200);
        assert_eq!(
            header(&done, "ratelimit-policy"),
            r#""inflight";q=2;qu="concurrent-requests", "export";q=1;w=3600;rl-burst=3"#
        );
        assert_eq!(done.text().await.unwrap(), "done");
    }
    wait_released(&rl).await;

    // A semaphore refusal is not cached: the slot is free again, so the next one is admitted.
    assert_eq!(export(0).await.unwrap().status(), 200);
    wait_released(&rl).await;
    // The rate is spent (3 of 3): the slot acquired first is released after the refusal.
    let refused = export(0).await.unwrap();
    assert_eq!(refused.status(), 429);
    let body: serde_json::Value = serde_json::from_str(&refused.text().await.unwrap()).unwrap();
    assert_eq!(body["violated-policies"], serde_json::json!(["export"]));
    wait_released(&rl).await;

    // The shadow rule ran on its own key, admitted once, would have refused twice.
    let exists: bool = cmd("EXISTS")
        .arg("shadow:probe:ann")
        .query(&mut server.conn())
        .unwrap();
    assert!(exists);
    let metrics = gateway.metrics().render();
    for line in [
        r#"rl_gateway_decisions_total{route="POST /export",rule="export",outcome="admit"} 3"#,
        r#"rl_gateway_decisions_total{route="POST /export",rule="inflight",outcome="refuse"} 1"#,
        r#"rl_gateway_decisions_total{route="POST /export",rule="export",outcome="refuse"} 1"#,
        r#"rl_gateway_decisions_total{route="POST /export",rule="probe",outcome="shadow_refuse"} 2"#,
    ] {
        assert!(metrics.contains(line), "{line} missing from\n{metrics}");
    }
}

const GRANT_POLICY: &str = r#"{
  "version": 1, "default": {"rules": []},
  "identity": {"user": "x-user"},
  "rules": {
    "global": {"key": "global:catalog", "limit": 10, "period": "1h", "grant": {"want": 10, "ttl": "1m"}},
    "user":   {"key": "user:${user}", "limit": 3, "period": "1h"}
  },
  "routes": [{"method": "GET", "path": "/catalog", "rules": ["global", "user"]}]
}"#;

#[tokio::test(flavor = "multi_thread")]
async fn grant_rules_spend_a_leased_chunk_locally_and_take_back_refused_tokens() {
    let server = Server::start();
    let policy = TempFile::new("grant.json", GRANT_POLICY);
    let (base, gateway) = start_gateway(&server, &policy).await;
    let http = reqwest::Client::new();
    let catalog = |user: &'static str| {
        http.get(format!("{base}/catalog"))
            .header("x-user", user)
            .send()
    };

    // One chunk of 10 serves ann's 3, ann's refused 4th (its token given back), then 3 + 3 + 1.
    for user in ["ann", "ann", "ann"] {
        assert_eq!(catalog(user).await.unwrap().status(), 200);
    }
    let refused = catalog("ann").await.unwrap();
    assert_eq!(refused.status(), 429);
    let body: serde_json::Value = serde_json::from_str(&refused.text().await.unwrap()).unwrap();
    assert_eq!(body["violated-policies"], serde_json::json!(["user"]));
    for user in ["bob", "bob", "bob", "cyd", "cyd", "cyd", "dan"] {
        assert_eq!(catalog(user).await.unwrap().status(), 200, "{user}");
    }
    // In script mode every command is one EVALSHA: there the refill counter tells the grants.
    if !common::script_mode() {
        assert_eq!(calls(&server, "rl.grant"), 1);
    }
    assert!(gateway
        .metrics()
        .render()
        .contains(r#"rl_gateway_grant_refills_total{rule="global"} 1"#));

    // The chunk is spent and the store has nothing left: refused by the global rule.
    let spent = catalog("dan").await.unwrap();
    assert_eq!(spent.status(), 429);
    assert!(header(&spent, "retry-after").parse::<u64>().unwrap() >= 1);
    let body: serde_json::Value = serde_json::from_str(&spent.text().await.unwrap()).unwrap();
    assert_eq!(body["violated-policies"], serde_json::json!(["global"]));
    if !common::script_mode() {
        assert_eq!(calls(&server, "rl.grant"), 2);
    }
    let metrics = gateway.metrics().render();
    assert!(
        metrics.contains(r#"rl_gateway_grant_refills_total{rule="global"} 2"#),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slot_is_renewed_while_the_backend_works_past_its_lease() {
    let server = Server::start();
    let short = SEMAPHORE_POLICY.replace(r#""lease": "60s""#, r#""lease": "300ms""#);
    let policy = TempFile::new("renew.json", &short);
    let (base, _gateway) = start_gateway(&server, &policy).await;
    let client = redis::Client::open(format!("redis://127.0.0.1:{}/", server.port)).unwrap();
    let rl = Rl::new(client.get_multiplexed_async_connection().await.unwrap());
    let http = reqwest::Client::new();
    let slow = tokio::spawn(
        http.post(format!("{base}/export?ms=1200"))
            .header("x-tenant", "atlas")
            .header("x-user", "ann")
            .send(),
    );
    // Three leases later the slot is still held: the heartbeat renewed it.
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(in_flight(&rl).await, 1);
    assert_eq!(slow.await.unwrap().unwrap().status(), 200);
    wait_released(&rl).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn legacy_headers_are_sent_on_request() {
    let server = Server::start();
    let policy = TempFile::new("legacy.json", POLICY);
    let client = redis::Client::open(format!("redis://127.0.0.1:{}/", server.port)).unwrap();
    let conn = client.get_multiplexed_async_connection().await.unwrap();
    let gateway = Gateway::new(
        Rl::new(conn),
        PolicyStore::load_file(&policy.0).unwrap(),
        Arc::default(),
    )
    .with_legacy_headers();
    let app = Router::new()
        .route("/catalog", get(handler))
        .layer(RateLimitLayer::new(Arc::new(gateway)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let response = get_catalog(&reqwest::Client::new(), &base, Some("ann")).await;
    assert_eq!(response.status(), 200);
    // The read rule, with 19 of 20 left, is tighter than the tenant's 999 of 1000.
    assert_eq!(header(&response, "x-ratelimit-limit"), "1");
    assert_eq!(header(&response, "x-ratelimit-remaining"), "19");
    assert!(header(&response, "ratelimit").starts_with(r#""read";r=19;"#));
}
