//! The gateway's own benchmarks, against a real server with the module (`cargo build --release`
//! first; `RL_SERVER` picks the server binary, as in the tests):
//!
//! - hot key: 100 gateways, 40,000 requests/s in all, one global rule spent from leased chunks
//!   of 100: store calls per admitted request, admitted against `burst + rate × T`, tokens
//!   stranded per lease;
//! - denial flood: 5,000 requests/s per gateway on one refused key: store calls per gateway
//!   against one per negative-cache `max`;
//! - overhead: the latency the layer adds per request (p50, p99, sequential requests over one
//!   keep-alive connection) and requests/s on one runtime thread, against the same axum service
//!   without it.
//!
//! `cargo bench -p redis-rl-client --bench gateway` prints one Markdown table per part; results
//! are in the crate's README. `SECONDS_PER_RUN` (default 5) sets each load's length.

// A benchmark stops at its first surprise: it may unwrap, expect, panic and index (the
// workspace's lints forbid them outside tests, and a benchmark is not run by its test harness).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use rl_testkit as common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::routing::get;
use axum::Router;
use common::{cmd, Server, TempFile};
use http::HeaderMap;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{Cmd, Pipeline, RedisFuture, Value};
use redis_rl_client::gateway::PolicyStore;
use redis_rl_client::gateway::{HttpHeaders, Request, VerdictKind};
use redis_rl_client::{Gateway, RateLimitLayer, Rl, RlConnection};

/// A connection that counts what the gateway asked of the store: calls, and the units
/// `RL.GRANT` leased (its reply's first field).
#[derive(Clone)]
struct Counting {
    inner: MultiplexedConnection,
    granted: Arc<AtomicU64>,
    leases: Arc<AtomicU64>,
}

impl ConnectionLike for Counting {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let reply = self.inner.req_packed_command(cmd).await?;
            let is_grant = matches!(cmd.args_iter().next(),
                Some(redis::Arg::Simple(name)) if name.eq_ignore_ascii_case(b"RL.GRANT"));
            if let (true, Value::Array(fields)) = (is_grant, &reply) {
                if let Some(&Value::Int(units)) = fields.first() {
                    self.granted
                        .fetch_add(u64::try_from(units).unwrap_or(0), Ordering::Relaxed);
                    self.leases
                        .fetch_add(u64::from(units > 0), Ordering::Relaxed);
                }
            }
            Ok(reply)
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.inner.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

impl RlConnection for Counting {}

fn policy(rules: &str, routes: &str) -> String {
    format!(
        r#"{{"version": 1, "default": {{"rules": []}}, "identity": {{"user": "x-user"}},
  "rules": {{{rules}}}, "routes": [{routes}],
  "negative_cache": {{"max": "250ms", "entries": 10000}},
  "store": {{"timeout": "500ms", "breaker": {{"failures": 1000, "open": "1s"}}, "ramp": "1s"}},
  "retry_after_jitter": 0}}"#
    )
}

/// Calls of the module's commands the server has counted (`INFO commandstats`).
fn store_calls(server: &Server) -> u64 {
    let info: String = cmd("INFO")
        .arg("commandstats")
        .query(&mut server.conn())
        .expect("INFO commandstats");
    info.lines()
        .map(str::to_ascii_lowercase)
        .filter(|l| l.starts_with("cmdstat_rl."))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// `n` gateways, each on its own connection; the units leased by all of them, and each one's
/// leases.
async fn gateways(
    server: &Server,
    policy: &TempFile,
    n: usize,
) -> (
    Vec<Arc<Gateway<Counting>>>,
    Arc<AtomicU64>,
    Vec<Arc<AtomicU64>>,
) {
    let client =
        redis::Client::open(format!("redis://127.0.0.1:{}/", server.port)).expect("a client");
    let granted = Arc::new(AtomicU64::new(0));
    let (mut all, mut leases) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        let inner = client
            .get_multiplexed_async_connection()
            .await
            .expect("a connection");
        let conn = Counting {
            inner,
            granted: Arc::clone(&granted),
            leases: Arc::new(AtomicU64::new(0)),
        };
        leases.push(Arc::clone(&conn.leases));
        let store = PolicyStore::load_file(&policy.0).expect("the policy");
        all.push(Arc::new(Gateway::new(Rl::new(conn), store, Arc::default())));
    }
    (all, granted, leases)
}

fn request<'a>(path: &'a str, headers: &'a HttpHeaders<'a>) -> Request<'a> {
    Request {
        method: "GET",
        path,
        headers,
        peer: Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        caller: None,
        case_insensitive: false,
    }
}

/// The units a gateway still holds: what it admits before it asks the store for a new chunk.
async fn held(gateway: &Gateway<Counting>, leases: &AtomicU64, path: &str) -> u64 {
    let map = HeaderMap::new();
    let headers = HttpHeaders(&map);
    let before = leases.load(Ordering::Relaxed);
    let mut units = 0;
    while gateway.decide(&request(path, &headers)).await.0.kind == VerdictKind::Admit
        && leases.load(Ordering::Relaxed) == before
    {
        units += 1;
    }
    units
}

#[derive(Default)]
struct Tally {
    admitted: AtomicU64,
    refused: AtomicU64,
    unavailable: AtomicU64,
}

impl Tally {
    /// Admitted, refused, unavailable.
    fn counts(&self) -> [u64; 3] {
        [&self.admitted, &self.refused, &self.unavailable].map(|c| c.load(Ordering::Relaxed))
    }
}

/// Each gateway decides `per_tick` requests every 10 ms for `run`, from its own task.
async fn offer(
    gateways: &[Arc<Gateway<Counting>>],
    path: &'static str,
    per_tick: u32,
    run: Duration,
) -> Arc<Tally> {
    let tally = Arc::new(Tally::default());
    let tasks: Vec<_> = gateways
        .iter()
        .map(|gateway| {
            let (gateway, tally) = (Arc::clone(gateway), Arc::clone(&tally));
            tokio::spawn(async move {
                let map = HeaderMap::new();
                let headers = HttpHeaders(&map);
                let parts = request(path, &headers);
                let mut tick = tokio::time::interval(Duration::from_millis(10));
                let end = Instant::now() + run;
                while Instant::now() < end {
                    tick.tick().await;
                    for _ in 0..per_tick {
                        let (verdict, _leases) = gateway.decide(&parts).await;
                        let counter = match verdict.kind {
                            VerdictKind::Admit => &tally.admitted,
                            VerdictKind::Refuse => &tally.refused,
                            VerdictKind::Unavailable
                            | VerdictKind::Error
                            | VerdictKind::Reject
                            | VerdictKind::Shed => &tally.unavailable,
                        };
                        counter.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a load task");
    }
    tally
}

fn run_length() -> Duration {
    let secs = std::env::var("SECONDS_PER_RUN")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    Duration::from_secs(secs)
}

async fn hot_key(server: &Server) {
    const GATEWAYS: usize = 100;
    const RATE: u64 = 40_000;
    const WANT: u64 = 100;
    let rules = format!(
        r#""global": {{"key": "bench:hot", "limit": {RATE}, "period": "1s",
           "grant": {{"want": {WANT}, "ttl": "250ms"}}}}"#
    );
    let route = r#"{"method": "GET", "path": "/hot", "rules": ["global"],
                    "on_store_error": {"mode": "deny"}}"#;
    let file = TempFile::new("hot.json", &policy(&rules, route));
    let (gateways, granted, per_gateway) = gateways(server, &file, GATEWAYS).await;
    let before = store_calls(server);
    let start = Instant::now();
    // 100 gateways × 4 requests per 10 ms = 40,000 requests/s.
    let tally = offer(&gateways, "/hot", 4, run_length()).await;
    let elapsed = start.elapsed();
    let calls = store_calls(server) - before;
    let [admitted, refused, unavailable] = tally.counts();
    let granted = granted.load(Ordering::Relaxed);
    let leases: u64 = per_gateway.iter().map(|l| l.load(Ordering::Relaxed)).sum();
    let bound = RATE + RATE * elapsed.as_micros() as u64 / 1_000_000;
    // What the gateways still hold when the load stops is valid, not stranded: their next
    // requests would spend it. What lapsed unspent during the run is the rest.
    let mut still_held = 0;
    for (gateway, leases) in gateways.iter().zip(&per_gateway) {
        still_held += held(gateway, leases, "/hot").await;
    }
    let lapsed = granted.saturating_sub(admitted + still_held);
    let secs = elapsed.as_secs_f64();
    let offered = admitted + refused + unavailable;
    let percent = |part: u64, whole: u64| 100.0 * part as f64 / whole.max(1) as f64;
    println!(
        "\n### Hot key: {GATEWAYS} gateways, one rule `{RATE} 1s`, chunks of {WANT}, {secs:.1} s\n"
    );
    println!("| measure | value | bound |");
    println!("|---|---:|---|");
    let rows = [
        (
            "requests offered (per second)",
            format!("{offered} ({:.0})", offered as f64 / secs),
            String::new(),
        ),
        (
            "admitted",
            admitted.to_string(),
            format!("≤ burst + rate × T = {bound}"),
        ),
        (
            "refused / unavailable",
            format!("{refused} / {unavailable}"),
            String::new(),
        ),
        ("store calls (RL.*)", calls.to_string(), String::new()),
        (
            "store calls per admitted request",
            format!("{:.3} %", percent(calls, admitted)),
            "≤ 1 %".into(),
        ),
        (
            "units leased / leases",
            format!("{granted} / {leases}"),
            String::new(),
        ),
        (
            "units still held at the end (valid chunks)",
            still_held.to_string(),
            format!("≤ {GATEWAYS} × {WANT}"),
        ),
        (
            "store calls per admitted request, counting those as spent",
            format!("{:.3} %", percent(calls, admitted + still_held)),
            "≤ 1 %".into(),
        ),
        (
            "units that lapsed unspent, per lease",
            format!("{:.2}", lapsed as f64 / leases.max(1) as f64),
            format!("≤ want = {WANT}"),
        ),
    ];
    for (measure, value, bound) in rows {
        println!("| {measure} | {value} | {bound} |");
    }
}

async fn denial_flood(server: &Server) {
    const GATEWAYS: usize = 4;
    let file = TempFile::new(
        "flood.json",
        &policy(
            r#""login": {"key": "bench:flood", "limit": 1, "period": "1h"}"#,
            r#"{"method": "GET", "path": "/login", "rules": ["login"], "on_store_error": {"mode": "deny"}}"#,
        ),
    );
    let (gateways, _, _) = gateways(server, &file, GATEWAYS).await;
    // The one unit goes first, so every request of the flood is refused.
    let first = offer(&gateways[..1], "/login", 1, Duration::from_millis(1)).await;
    assert_eq!(first.admitted.load(Ordering::Relaxed), 1);
    let before = store_calls(server);
    let start = Instant::now();
    // 50 requests per 10 ms = 5,000 requests/s per gateway.
    let tally = offer(&gateways, "/login", 50, run_length()).await;
    let elapsed = start.elapsed();
    let calls = store_calls(server) - before;
    let per_gateway = calls as f64 / GATEWAYS as f64;
    let bound = (elapsed.as_millis() as f64 / 250.0).ceil() + 1.0;
    println!("\n### Denial flood: {GATEWAYS} gateways, 5,000 requests/s each on one refused key, negative cache `max` 250 ms, {:.1} s\n", elapsed.as_secs_f64());
    println!("| measure | value | bound |");
    println!("|---|---:|---|");
    println!(
        "| requests refused / admitted | {} / {} | admitted 0 |",
        tally.refused.load(Ordering::Relaxed),
        tally.admitted.load(Ordering::Relaxed)
    );
    println!("| store calls per gateway | {per_gateway:.1} | ≤ one per 250 ms = {bound:.0} |");
    println!(
        "| store calls per refused request | {:.4} % | |",
        100.0 * calls as f64 / tally.refused.load(Ordering::Relaxed).max(1) as f64
    );
}

/// Serves `app` on a runtime of one thread of its own; returns its address.
fn serve_on_one_thread(app: Router) -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            tx.send(listener.local_addr().expect("an address"))
                .expect("send");
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .await
            .expect("serve");
        });
    });
    rx.recv().expect("the server's address")
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).map_or(0.0, |d| d.as_secs_f64() * 1e6)
}

async fn latencies(http: &reqwest::Client, url: &str, n: usize, into: &mut Vec<Duration>) {
    for _ in 0..n {
        let start = Instant::now();
        let response = http
            .get(url)
            .header("x-user", "u1")
            .send()
            .await
            .expect("a response");
        assert_eq!(response.status(), 200);
        response.bytes().await.expect("a body");
        into.push(start.elapsed());
    }
}

/// Requests/s with `connections` clients sending back to back for `run`.
async fn throughput(url: &str, connections: usize, run: Duration) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let end = Instant::now() + run;
    let tasks: Vec<_> = (0..connections)
        .map(|i| {
            let (url, done) = (url.to_string(), Arc::clone(&done));
            tokio::spawn(async move {
                let http = reqwest::Client::new();
                while Instant::now() < end {
                    let response = http
                        .get(&url)
                        .header("x-user", format!("u{i}"))
                        .send()
                        .await
                        .expect("a response");
                    assert_eq!(response.status(), 200);
                    response.bytes().await.expect("a body");
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a client task");
    }
    done.load(Ordering::Relaxed) as f64 / run.as_secs_f64()
}

async fn overhead(server: &Server) {
    let file = TempFile::new(
        "overhead.json",
        &policy(
            r#""user": {"key": "bench:user:${user}", "limit": 1000000, "period": "1s"}"#,
            r#"{"method": "GET", "path": "/x", "rules": ["user"], "on_store_error": {"mode": "deny"}}"#,
        ),
    );
    let client =
        redis::Client::open(format!("redis://127.0.0.1:{}/", server.port)).expect("a client");
    let conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("a connection");
    let gateway = Arc::new(Gateway::new(
        Rl::new(conn),
        PolicyStore::load_file(&file.0).expect("the policy"),
        Arc::default(),
    ));
    let plain = Router::new().route("/x", get(|| async { "ok" }));
    let gated = plain.clone().layer(RateLimitLayer::new(gateway));
    let plain = format!("http://{}/x", serve_on_one_thread(plain));
    let gated = format!("http://{}/x", serve_on_one_thread(gated));
    let http = reqwest::Client::new();
    // Warm both connections, then alternate blocks so drift on a shared machine hits both.
    let (mut p, mut g) = (Vec::new(), Vec::new());
    latencies(&http, &plain, 200, &mut Vec::new()).await;
    latencies(&http, &gated, 200, &mut Vec::new()).await;
    for _ in 0..10 {
        latencies(&http, &plain, 500, &mut p).await;
        latencies(&http, &gated, 500, &mut g).await;
    }
    p.sort();
    g.sort();
    let run = run_length();
    let plain_rps = throughput(&plain, 32, run).await;
    let gated_rps = throughput(&gated, 32, run).await;
    println!("\n### Overhead: one axum service, with and without the layer (one rule, one RL.MULTI per request)\n");
    println!("| measure | plain axum | with the layer | added |");
    println!("|---|---:|---:|---:|");
    for (name, q) in [("p50 latency (µs)", 0.5), ("p99 latency (µs)", 0.99)] {
        let (a, b) = (percentile(&p, q), percentile(&g, q));
        println!(
            "| {name}, 5,000 sequential requests | {a:.0} | {b:.0} | {:.0} |",
            b - a
        );
    }
    println!("| requests/s, 32 connections, server on one runtime thread | {plain_rps:.0} | {gated_rps:.0} | {:.2}x |", gated_rps / plain_rps);
}

fn main() {
    let server = Server::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    println!(
        "Server: {}; module: {}",
        common::server_binary(),
        common::module_path().display()
    );
    runtime.block_on(async {
        hot_key(&server).await;
        denial_flood(&server).await;
        overhead(&server).await;
    });
}
