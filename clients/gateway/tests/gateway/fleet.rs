//! `policy publish` and `--policy store:KEY` against a real Redis: a snapshot stored only when
//! its version is higher (with and without the module, one winner of a race), a fleet of three
//! gateways following a publication by its notice, a start from the cache file while Redis is
//! down, and a clear refusal to start without one.

use std::time::{Duration, Instant};

use crate::common::Server;
use crate::support::{policy_file, run, upstream, Gateway};
use serde_json::json;

pub(crate) fn policy(version: u64) -> serde_json::Value {
    json!({
        "version": version,
        "identity": {"user": "x-user"},
        "rules": {"user": {"key": "fleet:u:${user}", "limit": 100, "period": "1m"}},
        "routes": [{"method": "GET", "path": "/orders/{id}", "rules": ["user"]}],
        "default": {"rules": []}
    })
}

pub(crate) fn publish(redis: &Server, version: u64, by: &str) -> (Option<i32>, String, String) {
    let file = policy_file(&policy(version));
    run(&[
        "policy",
        "publish",
        file.to_str().unwrap(),
        "--store",
        &format!("redis://127.0.0.1:{}", redis.port),
        "--by",
        by,
    ])
}

pub(crate) fn follower(redis: &Server, up: &str, extra: &[&str]) -> Gateway {
    let store = format!("redis://127.0.0.1:{}", redis.port);
    let mut args = vec![
        "--policy",
        "store:rl:policy",
        "--store",
        &store,
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        up,
        "--admin",
        "127.0.0.1:0",
    ];
    args.extend_from_slice(extra);
    Gateway::start(&args)
}

pub(crate) async fn version(gw: &Gateway) -> Option<String> {
    let text = reqwest::get(format!("{}/metrics", gw.url("admin")))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines().find_map(|l| {
        l.strip_prefix("rl_gateway_policy_version ")
            .map(str::to_string)
    })
}

fn assert_publishes(redis: &Server) {
    let (code, out, err) = publish(redis, 3, "ana");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "published version 3 at rl:policy\n");
    for lower_or_same in [3, 2] {
        let (code, _, err) = publish(redis, lower_or_same, "ben");
        assert_eq!(code, Some(1));
        assert!(
            err.contains(&format!("version {lower_or_same} not published: version 3 is in force at rl:policy (published by ana at 20")),
            "{err}"
        );
    }
    let mut c = redis.conn();
    let stored: Vec<String> = redis::cmd("HMGET")
        .arg("rl:policy")
        .arg(&["version", "published_by"])
        .query(&mut c)
        .unwrap();
    assert_eq!(stored, ["3", "ana"]);
}

#[test]
fn a_snapshot_is_stored_only_above_the_version_in_force_with_or_without_the_module() {
    assert_publishes(&Server::start());
    assert_publishes(&Server::start_plain(&[]));
}

#[test]
fn an_invalid_document_is_never_published() {
    let redis = Server::start();
    let file = policy_file(&json!({"version": 1, "routes": []}));
    let (code, _, err) = run(&[
        "policy",
        "publish",
        file.to_str().unwrap(),
        "--store",
        &format!("redis://127.0.0.1:{}", redis.port),
    ]);
    assert_eq!(code, Some(2));
    assert!(err.contains("invalid policy"), "{err}");
    let mut c = redis.conn();
    let exists: i64 = redis::cmd("EXISTS").arg("rl:policy").query(&mut c).unwrap();
    assert_eq!(exists, 0);
}

#[test]
fn of_two_publishers_racing_with_one_version_exactly_one_wins() {
    let redis = Server::start();
    for version in 1..=5u64 {
        let racers: Vec<_> = ["left", "right"]
            .into_iter()
            .map(|by| {
                let file = policy_file(&policy(version));
                std::process::Command::new(env!("CARGO_BIN_EXE_rl-gateway"))
                    .args([
                        "policy",
                        "publish",
                        file.to_str().unwrap(),
                        "--by",
                        by,
                        "--store",
                    ])
                    .arg(format!("redis://127.0.0.1:{}", redis.port))
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let codes: Vec<Option<i32>> = racers
            .into_iter()
            .map(|r| r.wait_with_output().unwrap().status.code())
            .collect();
        let mut sorted = codes.clone();
        sorted.sort();
        assert_eq!(sorted, [Some(0), Some(1)], "round {version}: {codes:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_of_three_follows_a_publication_by_its_notice() {
    let redis = Server::start();
    assert_eq!(publish(&redis, 1, "ops").0, Some(0));
    let (up, _) = upstream().await;
    // A poll an hour apart: what reaches the fleet here comes by the notice.
    let fleet: Vec<Gateway> = (0..3)
        .map(|_| follower(&redis, &up, &["--policy-poll", "1h"]))
        .collect();
    for gw in &fleet {
        assert_eq!(version(gw).await.as_deref(), Some("1"));
    }
    let published = Instant::now();
    assert_eq!(publish(&redis, 2, "ops").0, Some(0));
    for gw in &fleet {
        let deadline = Instant::now() + Duration::from_secs(20);
        while version(gw).await.as_deref() != Some("2") {
            assert!(Instant::now() < deadline, "a gateway never followed");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    eprintln!("the fleet followed in {:?}", published.elapsed());
    fleet[0].ready().await;
    let r = reqwest::Client::new()
        .get(format!("{}/orders/1", fleet[0].url("proxy")))
        .header("x-user", "ann")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn redis_down_at_start_starts_from_the_cache_and_without_one_refuses() {
    let mut redis = Server::start();
    assert_eq!(publish(&redis, 4, "ops").0, Some(0));
    let (up, _) = upstream().await;
    let dir = std::env::temp_dir().join(format!("rl-gateway-cache-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cache = dir.join("policy.cache.json");
    let cache = cache.to_str().unwrap();
    drop(follower(&redis, &up, &["--policy-cache", cache]));
    redis.stop();
    let gw = follower(&redis, &up, &["--policy-cache", cache]);
    assert_eq!(version(&gw).await.as_deref(), Some("4"));
    let text = reqwest::get(format!("{}/metrics", gw.url("admin")))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(text.contains("rl_gateway_policy_age_seconds "), "{text}");
    drop(gw);
    let (code, _, err) = run(&[
        "--policy",
        "store:rl:policy",
        "--store",
        &format!("redis://127.0.0.1:{}", redis.port),
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &up,
    ]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("the store is unreachable") && err.contains("no policy cache"),
        "{err}"
    );
}
