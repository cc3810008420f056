//! northstar and a store that goes away: started while Redis is down it listens at once and
//! serves its postures, and decisions return to the store within `breaker.open` plus a second
//! of the store coming back, whether it was down at the start or killed and restarted.

// Test code stops at its first surprise: all of it, not only the `#[test]` functions that
// clippy.toml covers, may unwrap, expect, panic and index.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use rl_testkit as common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Server, TempFile};

const POLICY: &str = r#"{
  "version": 1, "default": {"rules": []},
  "identity": {"user": "x-user"},
  "rules": {"write": {"key": "w:${user}", "limit": 1000, "period": "1s"}},
  "routes": [{"method": "POST", "path": "/checkout", "rules": ["write"],
              "on_store_error": {"mode": "deny"}}],
  "store": {"timeout": "50ms", "breaker": {"failures": 2, "open": "1s"}, "ramp": "1ms"}
}"#;

/// `breaker.open` plus a second, as the contract allows, and half a second for a loaded
/// machine to start the server and the process.
const BACK_WITHIN: Duration = Duration::from_millis(2500);

struct Northstar(Child);

impl Drop for Northstar {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts northstar on `port` and returns its base URL once it says it listens.
fn northstar(port: u16, policy: &TempFile) -> (Northstar, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_northstar"))
        .args(["--redis", &format!("redis://127.0.0.1:{port}")])
        .args(["--listen", "127.0.0.1:0", "--policy"])
        .arg(&policy.0)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let child = Northstar(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_string();
    (child, format!("http://{addr}"))
}

async fn checkout(http: &reqwest::Client, base: &str) -> u16 {
    http.post(format!("{base}/checkout"))
        .header("x-user", "ann")
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// How long until a checkout is admitted again.
async fn until_admitted(http: &reqwest::Client, base: &str) -> Duration {
    let started = Instant::now();
    while checkout(http, base).await != 200 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "decisions never came back to the store"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn started_while_the_store_is_down_it_listens_and_comes_back() {
    let mut server = Server::start();
    server.stop();
    let policy = TempFile::new("reconnect-down.json", POLICY);
    let started = Instant::now();
    let (_northstar, base) = northstar(server.port, &policy);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let http = reqwest::Client::new();
    for _ in 0..3 {
        let asked = Instant::now();
        assert_eq!(checkout(&http, &base).await, 503);
        assert!(
            asked.elapsed() < Duration::from_millis(500),
            "{:?}",
            asked.elapsed()
        );
    }
    server.start_again();
    let back = until_admitted(&http, &base).await;
    assert!(back < BACK_WITHIN, "admitted again after {back:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_killed_and_restarted_is_used_again_within_a_second_of_the_breaker() {
    let mut server = Server::start();
    let policy = TempFile::new("reconnect-restart.json", POLICY);
    let (_northstar, base) = northstar(server.port, &policy);
    let http = reqwest::Client::new();
    until_admitted(&http, &base).await;
    server.crash_and_restart(&[]);
    let back = until_admitted(&http, &base).await;
    assert!(back < BACK_WITHIN, "admitted again after {back:?}");
}

/// A store whose first reply on each connection comes `delay` after the connection: the relay
/// accepts at once and only then connects to the server. A loaded machine makes a fresh
/// gateway's connection this slow.
async fn slow_to_answer(port: u16, delay: Duration) -> u16 {
    let relay = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let relay_port = relay.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (mut caller, _) = relay.accept().await.unwrap();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let mut server = tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .unwrap();
                let _ = tokio::io::copy_bidirectional(&mut caller, &mut server).await;
            });
        }
    });
    relay_port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_request_waits_for_the_connection_still_being_made() {
    let server = Server::start();
    let port = slow_to_answer(server.port, Duration::from_millis(300)).await;
    // The store's deadline is a second: the connection's 300 ms fit in it.
    let policy = TempFile::new(
        "reconnect-first.json",
        &POLICY.replace(r#""timeout": "50ms""#, r#""timeout": "1s""#),
    );
    let (_northstar, base) = northstar(port, &policy);
    let first = reqwest::Client::new()
        .post(format!("{base}/checkout"))
        .header("x-user", "ann")
        .send()
        .await
        .unwrap();
    // The store's answer (a posture would be 503, without a RateLimit field).
    assert_eq!(first.status(), 200);
    let ratelimit = first.headers()["ratelimit"].to_str().unwrap();
    assert!(ratelimit.starts_with(r#""write";r=999;"#), "{ratelimit}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_request_just_after_the_store_comes_up_is_the_stores() {
    let mut server = Server::start();
    server.stop();
    let policy = TempFile::new(
        "reconnect-late.json",
        &POLICY.replace(r#""timeout": "50ms""#, r#""timeout": "1s""#),
    );
    let (_northstar, base) = northstar(server.port, &policy);
    // Its first attempt was refused; the next is not due before the request comes.
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.start_again();
    let first = reqwest::Client::new()
        .post(format!("{base}/checkout"))
        .header("x-user", "ann")
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    let ratelimit = first.headers()["ratelimit"].to_str().unwrap();
    assert!(ratelimit.starts_with(r#""write";r=999;"#), "{ratelimit}");
}
