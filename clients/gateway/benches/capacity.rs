//! Capacity on the wall clock (section 14 of the contract): rl-gateway's reverse proxy with an
//! adaptive capacity in front of an upstream of known capacity (a fixed number of slots, each
//! request holding one for a fixed service time, the others waiting in FIFO order), at twice
//! that capacity with a mix of priorities, against the same load sent straight to the upstream.
//! It prints a Markdown table: goodput (answers within 1 s, as a share of what the upstream can
//! serve), each class's served share, critical p50 and p99, and the limit the gateway learned.
//! It reports; it asserts nothing.
//!
//! Knobs: SLOTS=8 SERVICE_MS=25 LOAD=2.0 RUN_SECONDS=10.

// A benchmark stops at its first surprise.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::routing::post;
use axum::Router;
use tokio::sync::Semaphore;

const DEADLINE: Duration = Duration::from_secs(1);
/// Critical, standard and batch, in this order: a fifth, a half, the rest.
const CLASSES: [(&str, &str, u32); 3] = [
    ("critical", "/checkout", 20),
    ("standard", "/orders/7", 50),
    ("batch", "/reports/export", 30),
];

fn knob<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The upstream: `slots` requests served at once, each for `service`; the others wait in order.
async fn upstream(slots: usize, service: Duration) -> SocketAddr {
    let gate = Arc::new(Semaphore::new(slots));
    let work = move || {
        let gate = Arc::clone(&gate);
        async move {
            let _slot = gate.acquire().await.unwrap();
            tokio::time::sleep(service).await;
            "ok"
        }
    };
    let app = Router::new()
        .route("/checkout", post(work.clone()))
        .route("/orders/7", post(work.clone()))
        .route("/reports/export", post(work));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

struct Gateway {
    child: Child,
    proxy: String,
    admin: String,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn gateway(upstream: SocketAddr, slots: usize) -> Gateway {
    let policy = serde_json::json!({
        "version": 1, "default": {"rules": []}, "identity": {"tenant": "x-tenant"},
        "rules": {"tenant": {"key": "{t:${tenant}}:all", "limit": 1_000_000, "period": "1s"}},
        "capacity": {"upstream": {"limit": {"adaptive": {"min": 1, "max": slots * 8, "initial": slots}}}},
        "routes": [
            {"method": "POST", "path": "/checkout", "rules": ["tenant"], "capacity": "upstream", "priority": "critical"},
            {"method": "POST", "path": "/orders/{id}", "rules": ["tenant"], "capacity": "upstream"},
            {"method": "POST", "path": "/reports/export", "rules": ["tenant"], "capacity": "upstream", "priority": "batch"}
        ]
    });
    let file = std::env::temp_dir().join(format!("rl-capacity-bench-{}.json", std::process::id()));
    std::fs::write(&file, policy.to_string()).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_rl-gateway"))
        .args(["--policy", file.to_str().unwrap(), "--store", "memory://"])
        .args(["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
        .args(["--upstream", &format!("http://{upstream}")])
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let (mut proxy, mut admin) = (String::new(), String::new());
    while proxy.is_empty() || admin.is_empty() {
        let line = lines.next().unwrap().unwrap();
        let rest = line.strip_prefix("listening on ").unwrap();
        let (addr, face) = rest.split_once(' ').unwrap();
        match face {
            "(proxy)" => proxy = format!("http://{addr}"),
            "(admin)" => admin = format!("http://{addr}"),
            _ => {}
        }
    }
    std::fs::remove_file(&file).unwrap();
    Gateway {
        child,
        proxy,
        admin,
    }
}

/// One answer: its class, whether it was served (2xx), and how long it took.
type Answer = (usize, bool, Duration);

/// Requests at `rate` a second for `seconds`, open loop (each at its time, whatever the ones
/// before it), classes drawn in the mix's proportions.
async fn load(base: &str, rate: f64, seconds: u64) -> Vec<Answer> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(1024)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let answers: Arc<Mutex<Vec<Answer>>> = Arc::default();
    let total = (rate * seconds as f64) as u64;
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::with_capacity(total as usize);
    for i in 0..total {
        let at = start + Duration::from_secs_f64(i as f64 / rate);
        tokio::time::sleep_until(at).await;
        // The mix, deterministic: out of every 100 requests, 20 critical, 50 standard, 30 batch.
        let slot = (i * 37 % 100) as u32;
        let class = if slot < CLASSES[0].2 {
            0
        } else if slot < CLASSES[0].2 + CLASSES[1].2 {
            1
        } else {
            2
        };
        let url = format!("{base}{}", CLASSES[class].1);
        let (client, answers) = (client.clone(), Arc::clone(&answers));
        tasks.push(tokio::spawn(async move {
            let sent = Instant::now();
            let served = client
                .post(url)
                .header("x-tenant", "acme")
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            answers
                .lock()
                .unwrap()
                .push((class, served, sent.elapsed()));
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let answers = answers.lock().unwrap();
    answers.clone()
}

fn percentile(mut v: Vec<Duration>, p: f64) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v.sort();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn row(name: &str, answers: &[Answer], capacity: f64, seconds: u64, limit: &str) -> String {
    let good = answers
        .iter()
        .filter(|(_, ok, t)| *ok && *t <= DEADLINE)
        .count() as f64;
    let served = |class: usize| {
        let of: Vec<_> = answers.iter().filter(|(c, ..)| *c == class).collect();
        let ok = of.iter().filter(|(_, ok, t)| *ok && *t <= DEADLINE).count();
        format!("{:.0} %", 100.0 * ok as f64 / of.len().max(1) as f64)
    };
    let critical: Vec<Duration> = answers
        .iter()
        .filter(|(c, ok, _)| *c == 0 && *ok)
        .map(|(.., t)| *t)
        .collect();
    format!(
        "| {name} | {:.0} % | {} | {} | {} | {:.1} | {:.1} | {limit} |",
        100.0 * good / (capacity * seconds as f64),
        served(0),
        served(1),
        served(2),
        percentile(critical.clone(), 0.5).as_secs_f64() * 1e3,
        percentile(critical, 0.99).as_secs_f64() * 1e3,
    )
}

#[tokio::main]
async fn main() {
    let slots: usize = knob("SLOTS", 8);
    let service = Duration::from_millis(knob("SERVICE_MS", 25));
    let factor: f64 = knob("LOAD", 2.0);
    let seconds: u64 = knob("RUN_SECONDS", 10);
    let capacity = slots as f64 / service.as_secs_f64();
    let rate = capacity * factor;
    println!(
        "upstream: {slots} slots x {} ms = {capacity:.0} requests/s; load {factor}x = {rate:.0}/s for {seconds} s; mix 20 % critical, 50 % standard, 30 % batch\n",
        service.as_millis()
    );
    println!("| path | goodput (answers ≤ 1 s, share of capacity) | critical served | standard served | batch served | critical p50 ms | critical p99 ms | limit learned |");
    println!("|---|---|---|---|---|---|---|---|");
    let up = upstream(slots, service).await;
    let gw = gateway(up, slots);
    // A few seconds at the upstream's own pace first, so the limit starts from what it learned.
    load(&gw.proxy, capacity * 0.5, 3).await;
    let through = load(&gw.proxy, rate, seconds).await;
    let metrics = reqwest::get(format!("{}/metrics", gw.admin))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let limit = metrics
        .lines()
        .find_map(|l| l.strip_prefix("rl_gateway_capacity_limit{capacity=\"upstream\"} "))
        .unwrap_or("?")
        .to_string();
    println!(
        "{}",
        row("through rl-gateway", &through, capacity, seconds, &limit)
    );
    drop(gw);
    // A fresh upstream, so no queue is left from the first run.
    let up = upstream(slots, service).await;
    let direct = load(&format!("http://{up}"), rate, seconds).await;
    println!(
        "{}",
        row(
            "straight to the upstream",
            &direct,
            capacity,
            seconds,
            "none"
        )
    );
}
