//! Following a published policy cannot be steered around (`clients/CONTRACT.md` section 11):
//! entries written into Redis by hand, as an attacker or a mistaken script would, against a
//! fleet's gateway. The document's own version governs; a refused entry is logged once, counted
//! in `rl_gateway_policy_rejected_total`, and blocks no later `policy publish`; a restart with a
//! good cache starts on it; a document is read only when it changed, and one past the size
//! bound is never read.

use std::time::{Duration, Instant};

use crate::common::{info_field, Server};
use crate::fleet::{follower, policy, publish, version};
use crate::support::{upstream, Gateway};
use serde_json::json;

/// The policy document's size bound (`redis_rl_client::gateway::published::MAX_DOCUMENT_BYTES`).
const BOUND: usize = 8 << 20;

/// Writes the entry at `rl:policy` by hand, bypassing `policy publish`, and notifies the fleet.
fn write_entry(redis: &Server, version_field: &str, document: &str, published_at_ms: &str) {
    let mut c = redis.conn();
    let _: i64 = redis::cmd("HSET")
        .arg("rl:policy")
        .arg("version")
        .arg(version_field)
        .arg("document")
        .arg(document)
        .arg("published_by")
        .arg("by-hand")
        .arg("published_at_ms")
        .arg(published_at_ms)
        .query(&mut c)
        .unwrap();
    let _: i64 = redis::cmd("PUBLISH")
        .arg("rl:policy")
        .arg(version_field)
        .query(&mut c)
        .unwrap();
}

fn now_ms() -> String {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        .to_string()
}

async fn metric(gw: &Gateway, series: &str) -> Option<String> {
    let text = reqwest::get(format!("{}/metrics", gw.url("admin")))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    let prefix = format!("{series} ");
    text.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()).map(str::to_string))
}

/// Waits (at most 20 s) until `series` reads `value`.
async fn until(gw: &Gateway, series: &str, value: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = metric(gw, series).await;
        if now.as_deref() == Some(value) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{series} never read {value} (last {now:?})"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The gateway's log once it stopped: the lines that say a snapshot was refused.
fn refusals(gw: Gateway) -> Vec<String> {
    gw.signal("KILL");
    let (_, log) = gw.wait(Duration::from_secs(10));
    log.lines()
        .filter(|l| l.contains("is refused"))
        .map(str::to_string)
        .collect()
}

/// What Redis sent to its clients so far: a document read shows here by its size.
fn sent(redis: &Server) -> u64 {
    info_field(&mut redis.conn(), "stats", "total_net_output_bytes")
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_version_field_that_disagrees_with_its_document_is_refused_and_blocks_no_publish() {
    let (up, _) = upstream().await;
    // `policy publish` runs one script, with the module and without.
    for redis in [Server::start(), Server::start_plain(&[])] {
        assert_eq!(publish(&redis, 1, "ops").0, Some(0));
        let gw = follower(&redis, &up, &["--policy-poll", "100ms"]);
        assert_eq!(version(&gw).await.as_deref(), Some("1"));
        // The field claims 9, the document is version 5: never in force.
        write_entry(&redis, "9", &policy(5).to_string(), &now_ms());
        until(&gw, "rl_gateway_policy_rejected_total", "1").await;
        assert_eq!(version(&gw).await.as_deref(), Some("1"));
        // A correct publication is compared with the document's version, not the field's.
        let (code, out, err) = publish(&redis, 2, "ops");
        assert_eq!(code, Some(0), "{err}");
        assert_eq!(out, "published version 2 at rl:policy\n");
        assert!(
            err.contains("replaced an entry the gateways refuse"),
            "{err}"
        );
        until(&gw, "rl_gateway_policy_version", "2").await;
        // The field claims less than the document: refused too, and no block either.
        write_entry(&redis, "3", &policy(900).to_string(), &now_ms());
        until(&gw, "rl_gateway_policy_rejected_total", "2").await;
        assert_eq!(version(&gw).await.as_deref(), Some("2"));
        assert_eq!(publish(&redis, 3, "ops").0, Some(0));
        until(&gw, "rl_gateway_policy_version", "3").await;
        // A publication below a correct entry is still refused.
        let (code, _, err) = publish(&redis, 3, "ops");
        assert_eq!(code, Some(1), "{err}");
        assert_eq!(refusals(gw).len(), 2);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restart_with_a_good_cache_starts_on_it_whatever_the_store_holds() {
    let redis = Server::start();
    let (up, _) = upstream().await;
    assert_eq!(publish(&redis, 4, "ops").0, Some(0));
    let dir = std::env::temp_dir().join(format!("rl-gateway-follow-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cache = dir.join("policy.cache.json");
    let cache = cache.to_str().unwrap();
    drop(follower(&redis, &up, &["--policy-cache", cache]));
    let invalid = json!({"version": 5, "routes": []}).to_string();
    let oversized = json!({"version": 7, "pad": "x".repeat(BOUND)}).to_string();
    let held = [
        ("5", invalid.clone()),
        ("9", policy(6).to_string()),
        ("7", oversized),
    ];
    for (field, document) in &held {
        write_entry(&redis, field, document, &now_ms());
        let gw = follower(&redis, &up, &["--policy-cache", cache]);
        assert_eq!(version(&gw).await.as_deref(), Some("4"));
        until(&gw, "rl_gateway_policy_rejected_total", "1").await;
        let refused = refusals(gw);
        assert_eq!(refused.len(), 1, "{refused:?}");
    }
    // Without a cache to start on, a refused entry is a refusal to start, saying why.
    write_entry(&redis, "5", &invalid, &now_ms());
    let store = format!("redis://127.0.0.1:{}", redis.port);
    let (code, _, err) = crate::support::run(&[
        "--policy",
        "store:rl:policy",
        "--store",
        &store,
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &up,
    ]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("is refused") && err.contains("no policy cache"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_document_is_read_only_when_it_changed_and_never_past_the_bound() {
    let redis = Server::start();
    let (up, _) = upstream().await;
    assert_eq!(publish(&redis, 1, "ops").0, Some(0));
    let gw = follower(&redis, &up, &["--policy-poll", "20ms"]);
    assert_eq!(version(&gw).await.as_deref(), Some("1"));
    // Past the bound: refused by its length, never read.
    let big = json!({"version": 2, "pad": "x".repeat(BOUND + 1024)}).to_string();
    let before = sent(&redis);
    write_entry(&redis, "2", &big, &now_ms());
    until(&gw, "rl_gateway_policy_rejected_total", "1").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let read = sent(&redis) - before;
    eprintln!("past the bound: {read} bytes sent in 1 s of polls every 20 ms");
    assert!(
        read < 1 << 20,
        "{read} bytes sent for a document never to be read"
    );
    // Under the bound but invalid: read once, not at each of some fifty polls.
    let invalid = json!({"version": 3, "routes": [], "pad": "x".repeat(1 << 20)}).to_string();
    let before = sent(&redis);
    write_entry(&redis, "3", &invalid, &now_ms());
    until(&gw, "rl_gateway_policy_rejected_total", "2").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let read = sent(&redis) - before;
    eprintln!("1 MiB, invalid: {read} bytes sent in 1 s of polls every 20 ms");
    assert!(
        (1 << 20..2 << 20).contains(&read),
        "{read} bytes sent for one read of a 1 MiB document"
    );
    assert_eq!(version(&gw).await.as_deref(), Some("1"));
}

#[tokio::test(flavor = "multi_thread")]
async fn every_distinct_refused_document_is_logged_once_and_counted() {
    let redis = Server::start();
    let (up, _) = upstream().await;
    assert_eq!(publish(&redis, 1, "ops").0, Some(0));
    let gw = follower(&redis, &up, &["--policy-poll", "20ms"]);
    assert_eq!(version(&gw).await.as_deref(), Some("1"));
    let first = json!({"version": 2, "routes": []}).to_string();
    let second = json!({"version": 3, "rules": {}}).to_string();
    let at = now_ms();
    write_entry(&redis, "2", &first, &at);
    until(&gw, "rl_gateway_policy_rejected_total", "1").await;
    write_entry(&redis, "3", &second, &at);
    until(&gw, "rl_gateway_policy_rejected_total", "2").await;
    // The first again, exactly: the same document, neither logged nor counted twice.
    write_entry(&redis, "2", &first, &at);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        metric(&gw, "rl_gateway_policy_rejected_total")
            .await
            .as_deref(),
        Some("2")
    );
    assert_eq!(version(&gw).await.as_deref(), Some("1"));
    let refused = refusals(gw);
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(refused[0].contains("version 2"), "{refused:?}");
    assert!(refused[1].contains("version 3"), "{refused:?}");
}
