//! rl-gateway in front of a real Redis with the module: the admin face (`/healthz`, `/readyz`,
//! `/metrics`, `POST /-/reload`), SIGHUP, a start while Redis is down, and SIGTERM draining a
//! request in flight and releasing its slot, or, past the drain, answering those still running
//! and freeing what they hold before the exit.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::common::{Server, TempFile};
use crate::rls_support::{codes, request};
use crate::support::{policy_file, upstream, write_policy, Gateway};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use serde_json::json;

fn policy(version: u64, prefix: &str) -> serde_json::Value {
    json!({
        "version": version,
        "identity": {"user": "x-user"},
        "rules": {
            "user": {"key": format!("{prefix}:u:${{user}}"), "limit": 100, "period": "1m"},
            "slots": {"key": format!("{prefix}:slots"), "concurrency": 1, "lease": "30s"}
        },
        "routes": [
            {"method": "GET", "path": "/orders/{id}", "rules": ["user"],
             "on_store_error": {"mode": "deny"}},
            {"method": "POST", "path": "/export", "rules": ["slots"]}
        ],
        "store": {"timeout": "200ms", "breaker": {"failures": 1000, "open": "1s"}},
        "default": {"rules": []}
    })
}

fn start(port: u16, file: &std::path::Path, upstream: &str) -> Gateway {
    Gateway::start(&[
        "--policy",
        file.to_str().unwrap(),
        "--store",
        &format!("redis://127.0.0.1:{port}"),
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        upstream,
        "--admin",
        "127.0.0.1:0",
    ])
}

/// Polls `check` until it holds, for at most 20 s: what the test waits for, not how long.
async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check().await {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn metric(gw: &Gateway, series: &str) -> Option<String> {
    let text = reqwest::get(format!("{}/metrics", gw.url("admin")))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')
            .map(str::to_string)
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn the_admin_face_reports_and_reloads_and_sighup_reloads_too() {
    let redis = Server::start();
    let (up, _) = upstream().await;
    let file = policy_file(&policy(1, "adm"));
    let gw = start(redis.port, &file, &up);
    let admin = gw.url("admin");
    assert_eq!(
        reqwest::get(format!("{admin}/healthz"))
            .await
            .unwrap()
            .status(),
        200
    );
    gw.ready().await;
    let r = reqwest::Client::new()
        .get(format!("{}/orders/1", gw.url("proxy")))
        .header("x-user", "ann")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let admitted =
        r#"rl_gateway_decisions_total{route="GET /orders/{id}",rule="user",outcome="admit"}"#;
    assert_eq!(metric(&gw, admitted).await.as_deref(), Some("1"));
    // The decision went to the store: its key is there.
    let mut c = redis.conn();
    let exists: i64 = redis::cmd("EXISTS").arg("adm:u:ann").query(&mut c).unwrap();
    assert_eq!(exists, 1);

    let reload = || {
        reqwest::Client::new()
            .post(format!("{admin}/-/reload"))
            .send()
    };
    let same = reload().await.unwrap();
    assert_eq!(same.status(), 409);
    std::fs::write(&file, "{\"version\": 2,").unwrap();
    let invalid = reload().await.unwrap();
    assert_eq!(invalid.status(), 400);
    let body: serde_json::Value = invalid.json().await.unwrap();
    assert!(body["error"].as_str().unwrap().contains("line 1"), "{body}");
    write_policy(&file, &policy(2, "adm"));
    let ok = reload().await.unwrap();
    assert_eq!(ok.status(), 200);
    assert_eq!(
        ok.json::<serde_json::Value>().await.unwrap(),
        json!({"version": 2})
    );

    write_policy(&file, &policy(3, "adm"));
    gw.signal("HUP");
    eventually("SIGHUP puts version 3 in force", async || {
        metric(&gw, "rl_gateway_policy_version").await.as_deref() == Some("3")
    })
    .await;
}

fn rls(requests_per_unit: u32) -> String {
    format!(
        "domain: edge\nstore_timeout: 1s\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: hour\n      requests_per_unit: {requests_per_unit}\n"
    )
}

/// Both faces: a reload after a change of the rate limit service's file alone puts it in force
/// and says so, though the policy file is unchanged; a reload refused for one file changes
/// neither.
#[tokio::test(flavor = "multi_thread")]
async fn a_reload_with_only_the_rls_file_changed_puts_it_in_force() {
    let redis = Server::start();
    let (up, _) = upstream().await;
    let file = policy_file(&policy(1, "both"));
    let rls_file = TempFile::new("reload-rls.yaml", &rls(1));
    let gw = Gateway::start(&[
        "--policy",
        file.to_str().unwrap(),
        "--store",
        &format!("redis://127.0.0.1:{}", redis.port),
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &up,
        "--admin",
        "127.0.0.1:0",
        "--grpc",
        "127.0.0.1:0",
        "--rls-config",
        rls_file.0.to_str().unwrap(),
    ]);
    gw.ready().await;
    let mut client = RateLimitServiceClient::connect(gw.url("grpc"))
        .await
        .unwrap();
    let mut ask = async || {
        let r = client
            .should_rate_limit(request("edge", &[&[("user", "ann")]], 1))
            .await
            .unwrap()
            .into_inner();
        codes(&r)
    };
    // The one unit of the hour spent (no refusal yet: a refusal would be cached for a moment,
    // whatever the limit after the reload).
    assert_eq!(ask().await, [(Code::Ok, 0)]);

    let reload = || {
        reqwest::Client::new()
            .post(format!("{}/-/reload", gw.url("admin")))
            .send()
    };
    std::fs::write(&rls_file.0, rls(3)).unwrap();
    let ok = reload().await.unwrap();
    assert_eq!(ok.status(), 200);
    assert_eq!(
        ok.json::<serde_json::Value>().await.unwrap(),
        json!({"version": 1})
    );
    // The count of the hour stays; the new limit leaves two more, where the old one refused.
    assert_eq!(ask().await, [(Code::Ok, 1)]);

    // An invalid policy file refuses the reload, and the changed rate limit file stays unread.
    std::fs::write(&file, "{\"version\": 2,").unwrap();
    std::fs::write(&rls_file.0, rls(100)).unwrap();
    assert_eq!(reload().await.unwrap().status(), 400);
    assert_eq!(ask().await, [(Code::Ok, 0)]);
    assert_eq!(ask().await, [(Code::OverLimit, 0)]);
}

#[tokio::test(flavor = "multi_thread")]
async fn started_while_redis_is_down_it_listens_answers_its_posture_and_recovers() {
    let mut redis = Server::start();
    redis.stop();
    let (up, _) = upstream().await;
    let file = policy_file(&policy(1, "down"));
    let gw = start(redis.port, &file, &up);
    let admin = gw.url("admin");
    assert_eq!(
        reqwest::get(format!("{admin}/healthz"))
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        reqwest::get(format!("{admin}/readyz"))
            .await
            .unwrap()
            .status(),
        503
    );
    let order = || {
        reqwest::Client::new()
            .get(format!("{}/orders/1", gw.url("proxy")))
            .header("x-user", "ann")
            .send()
    };
    assert_eq!(order().await.unwrap().status(), 503);
    redis.start_again();
    gw.ready().await;
    eventually("decisions return to the store", async || {
        order().await.is_ok_and(|r| r.status() == 200)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_lets_the_request_in_flight_finish_and_releases_its_slot() {
    let redis = Server::start();
    let (up, seen) = upstream().await;
    let file = policy_file(&policy(1, "drain"));
    let gw = start(redis.port, &file, &up);
    gw.ready().await;
    let url = format!("{}/export?ms=1500", gw.url("proxy"));
    let in_flight = tokio::spawn(async move {
        let r = reqwest::Client::new().post(url).send().await.unwrap();
        (r.status(), r.headers().get("ratelimit").is_some())
    });
    eventually("the upstream has the request", async || {
        !seen.lock().unwrap().is_empty()
    })
    .await;
    let mut c = redis.conn();
    let held: Vec<redis::Value> = redis::cmd("RL.INFO")
        .arg("drain:slots")
        .query(&mut c)
        .unwrap();
    assert!(format!("{held:?}").contains("in_flight"), "{held:?}");
    gw.signal("TERM");
    let (status, _) = in_flight.await.unwrap();
    assert_eq!(status, 200);
    let (code, log) = gw.wait(Duration::from_secs(20));
    assert_eq!(code, Some(0), "{log}");
    let info: redis::Value = redis::cmd("RL.INFO")
        .arg("drain:slots")
        .query(&mut c)
        .unwrap();
    // Released: the semaphore's key is gone (an empty semaphore is full capacity again).
    assert_eq!(info, redis::Value::Nil, "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_past_the_drain_answers_503_and_frees_every_slot_before_the_exit() {
    let redis = Server::start();
    let (up, seen) = upstream().await;
    let file = policy_file(&json!({
        "version": 1,
        "rules": {
            "slots": {"key": "cut:slots", "concurrency": 3, "lease": "1m"},
            "export": {"key": "cut:export", "limit": 100, "period": "1h", "settle": true}
        },
        "routes": [{"method": "POST", "path": "/export", "rules": ["slots", "export"]}],
        "store": {"timeout": "200ms"},
        "default": {"rules": []}
    }));
    let gw = Gateway::start(&[
        "--policy",
        file.to_str().unwrap(),
        "--store",
        &format!("redis://127.0.0.1:{}", redis.port),
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &up,
        "--admin",
        "127.0.0.1:0",
        "--drain-timeout",
        "300ms",
    ]);
    gw.ready().await;
    // Three requests the upstream holds for a minute: every slot taken.
    let url = format!("{}/export?ms=60000", gw.url("proxy"));
    let callers: Vec<_> = (0..3)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move {
                let r = reqwest::Client::new().post(url).send().await.unwrap();
                let status = r.status();
                let kind = r.headers()["content-type"].to_str().unwrap().to_string();
                let body: serde_json::Value = r.json().await.unwrap();
                (status, kind, body)
            })
        })
        .collect();
    eventually("the upstream holds three requests", async || {
        seen.lock().unwrap().len() == 3
    })
    .await;
    let mut c = redis.conn();
    let info = |c: &mut redis::Connection, key: &str| {
        let fields: HashMap<String, redis::Value> =
            redis::cmd("RL.INFO").arg(key).query(c).unwrap_or_default();
        fields
    };
    assert_eq!(info(&mut c, "cut:slots")["in_flight"], redis::Value::Int(3));
    assert_eq!(
        info(&mut c, "cut:export")["reservations"],
        redis::Value::Int(3)
    );
    let signalled = Instant::now();
    gw.signal("TERM");
    for caller in callers {
        let (status, kind, body) = caller.await.unwrap();
        assert_eq!(status, 503);
        assert_eq!(kind, "application/problem+json");
        assert_eq!(body["status"], 503);
        assert!(
            body["detail"].as_str().unwrap().contains("stopped"),
            "{body}"
        );
    }
    let (code, log) = gw.wait(Duration::from_secs(20));
    let exited = signalled.elapsed();
    assert_eq!(code, Some(0), "{log}");
    // Right after the exit: no slot held, no reservation left (each settled at its estimate).
    assert_eq!(
        redis::cmd("RL.INFO")
            .arg("cut:slots")
            .query::<redis::Value>(&mut c)
            .unwrap(),
        redis::Value::Nil,
        "{log}"
    );
    let export = info(&mut c, "cut:export");
    assert!(
        export
            .get("reservations")
            .is_none_or(|live| *live == redis::Value::Int(0)),
        "{export:?}\n{log}"
    );
    // Each cut request's decision record says why.
    assert_eq!(log.matches("reason=\"drain\"").count(), 3, "{log}");
    assert!(exited < Duration::from_secs(5), "{exited:?}");
}
