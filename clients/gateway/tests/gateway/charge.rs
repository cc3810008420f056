//! A rule charged only by failed responses (`charge.on_status`), through the proxy face on a
//! real Redis: failed logins counted exactly under concurrency, successful ones free.

use std::sync::Arc;

use crate::common::Server;
use crate::support::{policy_file, upstream, Gateway};
use serde_json::json;

const LIMIT: u64 = 5;

fn policy() -> serde_json::Value {
    json!({
        "version": 1,
        "identity": {"user": "x-account"},
        "rules": {
            "failures": {"key": "{login:${user}}:failed", "limit": LIMIT, "period": "15m",
                         "charge": {"on_status": [401, 403]}}
        },
        "routes": [{"method": "POST", "path": "/login", "rules": ["failures"]}],
        "default": {"rules": []}
    })
}

async fn gateway(
    redis: &Server,
) -> (
    Gateway,
    String,
    Arc<std::sync::Mutex<Vec<crate::support::Seen>>>,
) {
    let (up, seen) = upstream().await;
    let file = policy_file(&policy());
    let store = format!("redis://127.0.0.1:{}", redis.port);
    let gw = Gateway::start(&[
        "--policy",
        file.to_str().unwrap(),
        "--store",
        &store,
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &up,
        "--admin",
        "127.0.0.1:0",
    ]);
    gw.ready().await;
    let url = format!("{}/login", gw.url("proxy"));
    (gw, url, seen)
}

/// What the account's failures leave, asked of Redis without spending: a dry run answers
/// whether one more would pass and what would remain after it.
fn remaining(redis: &Server, account: &str) -> u64 {
    let reply: Vec<i64> = redis::cmd("RL.ADMIT")
        .arg(format!("{{login:{account}}}:failed"))
        .arg(LIMIT)
        .arg("15m")
        .arg("DRYRUN")
        .query(&mut redis.conn())
        .unwrap();
    u64::try_from(reply[0] + reply[1]).unwrap()
}

/// Forty wrong passwords for one account at once, each taking 50 ms at the backend: exactly
/// the limit reaches the backend (the others are refused while those are in flight or
/// after they failed), and Redis holds exactly that many failures.
#[tokio::test(flavor = "multi_thread")]
async fn concurrent_failed_logins_are_counted_exactly() {
    let redis = Server::start();
    let (_gw, url, seen) = gateway(&redis).await;
    let client = reqwest::Client::new();
    let attempts = (0..40).map(|_| {
        let (client, url) = (client.clone(), url.clone());
        tokio::spawn(async move {
            client
                .post(format!("{url}?status=401&ms=50"))
                .header("x-account", "alice")
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        })
    });
    let mut statuses = Vec::new();
    for a in attempts {
        statuses.push(a.await.unwrap());
    }
    let failed = statuses.iter().filter(|s| **s == 401).count() as u64;
    let refused = statuses.iter().filter(|s| **s == 429).count() as u64;
    assert_eq!((failed, refused), (LIMIT, 40 - LIMIT), "{statuses:?}");
    assert_eq!(seen.lock().unwrap().len() as u64, LIMIT);
    // The settlements are sent before the responses pass on: the count is final now, and it
    // refuses the next attempt, right password or not.
    let next = client
        .post(url.clone())
        .header("x-account", "alice")
        .send()
        .await
        .unwrap();
    assert_eq!(next.status(), 429);
    assert_eq!(remaining(&redis, "alice"), 0);
}

/// Successful logins are free: a hundred in a row for one account, all admitted; then the
/// account's failures still have the whole limit.
#[tokio::test(flavor = "multi_thread")]
async fn successful_logins_are_free() {
    let redis = Server::start();
    let (_gw, url, _seen) = gateway(&redis).await;
    let client = reqwest::Client::new();
    for _ in 0..100 {
        let ok = client
            .post(url.clone())
            .header("x-account", "bob")
            .send()
            .await
            .unwrap();
        assert_eq!(ok.status(), 200);
    }
    assert_eq!(remaining(&redis, "bob"), LIMIT);
    let mut statuses = Vec::new();
    for _ in 0..(LIMIT + 2) {
        let r = client
            .post(format!("{url}?status=403"))
            .header("x-account", "bob")
            .send()
            .await
            .unwrap();
        statuses.push(r.status().as_u16());
    }
    assert_eq!(remaining(&redis, "bob"), 0);
    let mut want = vec![403; LIMIT as usize];
    want.extend([429, 429]);
    assert_eq!(statuses, want);
}
