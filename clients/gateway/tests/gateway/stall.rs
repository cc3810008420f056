//! The proxy face in front of a Redis that stalls under traffic (`SIGSTOP` for 5 s, then
//! `SIGCONT`): the calls the gateway gave up on during the stall, whose requests the route's
//! fallback decided, are not applied when Redis comes back. What Redis counts in the end is what
//! the store decided (the gateway's `admit` decisions) plus the calls applied late, and those
//! are at most `store.breaker.failures`. The same stall with a `DEADLINE` that cannot cut it
//! (`store.skew` of 59 minutes, what every call was before it had one) applies every call the
//! gateway sent during the stall, which is what makes the first measure a test.

use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::Server;
use crate::support::{policy_file, upstream, Gateway};
use redis_rl_client::Rl;
use serde_json::json;

const FAILURES: u64 = 5;
const KEY: &str = "stall:hits";

/// One window rule that admits everything (its count is exactly the units spent), and a
/// fallback that admits everything too: every request is answered 200, by the store or by
/// the fallback, and the metrics say which.
fn policy(skew: &str) -> serde_json::Value {
    json!({
        "version": 1,
        "rules": {"hits": {"key": KEY, "algo": "window", "limit": 1_000_000_000u64, "period": "1d"}},
        "routes": [{
            "method": "GET", "path": "/r", "rules": ["hits"],
            "on_store_error": {"mode": "fallback", "limit": 1_000_000_000u64, "period": "1s"}
        }],
        "store": {"timeout": "50ms", "skew": skew, "breaker": {"failures": FAILURES, "open": "1s"}},
        "default": {"rules": []}
    })
}

fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Resumes the stopped server when dropped, so that a failing test leaves none frozen.
struct Stopped(u32);

impl Drop for Stopped {
    fn drop(&mut self) {
        signal(self.0, "CONT");
    }
}

/// A counter of the gateway's Prometheus text, 0 when absent.
async fn metric(gw: &Gateway, series: &str) -> u64 {
    let text = reqwest::get(format!("{}/metrics", gw.url("admin")))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0)
}

/// What one stall gave.
#[derive(Debug)]
struct Stall {
    /// Requests answered while Redis was stopped.
    during: u64,
    /// Requests the store decided (`admit`) and the fallback decided, over the whole run.
    by_store: u64,
    by_fallback: u64,
    /// What Redis counted in the end.
    counted: u64,
}

impl Stall {
    /// Units Redis counted that no decision of the store stands for: calls applied late.
    fn late(&self) -> u64 {
        self.counted.saturating_sub(self.by_store)
    }
}

/// Four clients send requests back to back: 1 s with Redis up, 5 s with it stopped, 1 s after
/// it resumed.
async fn stall(skew: &str) -> Stall {
    let redis = Server::start();
    let (up, _) = upstream().await;
    let file = policy_file(&policy(skew));
    let store = format!("redis://127.0.0.1:{}", redis.port);
    let mut gw = Gateway::start(&[
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
    // Every decision of the fallback is a record on stderr.
    gw.discard_log();
    gw.ready().await;
    let url = format!("{}/r", gw.url("proxy"));
    let running = Arc::new(AtomicBool::new(true));
    let answered = Arc::new(AtomicU64::new(0));
    let mut clients = Vec::new();
    for _ in 0..4 {
        let (url, running, answered) = (url.clone(), running.clone(), answered.clone());
        clients.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            while running.load(Ordering::Relaxed) {
                let r = client.get(&url).send().await.unwrap();
                assert_eq!(r.status(), 200);
                answered.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let pid = redis.pid().unwrap();
    signal(pid, "STOP");
    let stopped = Stopped(pid);
    let before = answered.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let during = answered.load(Ordering::Relaxed) - before;
    drop(stopped);
    tokio::time::sleep(Duration::from_secs(1)).await;
    running.store(false, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }
    let series = |outcome: &str| {
        format!(r#"rl_gateway_decisions_total{{route="GET /r",rule="hits",outcome="{outcome}"}}"#)
    };
    let (by_store, by_fallback) = (
        metric(&gw, &series("admit")).await,
        metric(&gw, &series("fallback_admit")).await,
    );
    let rl = Rl::new(
        redis::Client::open(store)
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap(),
    );
    let info = rl.info(KEY.as_bytes()).await.unwrap().unwrap();
    Stall {
        during,
        by_store,
        by_fallback,
        counted: info.count.unwrap(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn calls_cut_by_the_deadline_are_not_applied_when_a_stalled_redis_comes_back() {
    let with = stall("1s").await;
    eprintln!(
        "with DEADLINE (store.skew 1s): {with:?}, applied late {}",
        with.late()
    );
    let without = stall("59m").await;
    eprintln!(
        "with a DEADLINE that cannot cut the stall (store.skew 59m): {without:?}, applied late {}",
        without.late()
    );
    // The stall was traffic: the fallback decided what Redis could not.
    for s in [&with, &without] {
        assert!(s.during > 100 && s.by_fallback >= s.during, "{s:?}");
        assert!(s.by_store > 0, "{s:?}");
    }
    assert!(with.late() <= FAILURES, "{with:?}");
    assert!(without.late() > FAILURES, "{without:?}");
}
