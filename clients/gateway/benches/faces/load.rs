//! The load: HTTP/1.1 clients (one keep-alive connection per task) in a closed loop, calls at a
//! fixed rate in an open loop, and the counts of store calls.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tonic::transport::Channel;

use crate::common::{cmd, Server};

pub(crate) type Sender = SendRequest<Empty<Bytes>>;

pub(crate) async fn connect(addr: SocketAddr) -> Sender {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("an HTTP/1.1 connection");
    tokio::spawn(connection);
    sender
}

/// One GET; its status.
pub(crate) async fn get(sender: &mut Sender, addr: SocketAddr, path: &str, user: &str) -> u16 {
    sender.ready().await.expect("the connection is open");
    let request = hyper::Request::get(path)
        .header("host", addr.to_string())
        .header("x-user", user)
        .body(Empty::new())
        .expect("a request");
    let response = sender.send_request(request).await.expect("a response");
    let status = response.status().as_u16();
    response.into_body().collect().await.expect("a body");
    status
}

pub(crate) async fn text(addr: SocketAddr, path: &str) -> String {
    let mut sender = connect(addr).await;
    let request = hyper::Request::get(path)
        .header("host", addr.to_string())
        .body(Empty::new())
        .expect("a request");
    let response = sender.send_request(request).await.expect("a response");
    let body = response.into_body().collect().await.expect("a body");
    String::from_utf8_lossy(&body.to_bytes()).into_owned()
}

pub(crate) fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

/// `n` sequential requests on `sender`, each timed.
pub(crate) async fn sequential(
    sender: &mut Sender,
    addr: SocketAddr,
    path: &str,
    n: usize,
    into: &mut Vec<Duration>,
) {
    for _ in 0..n {
        let start = Instant::now();
        let status = get(sender, addr, path, "u1").await;
        into.push(start.elapsed());
        assert_eq!(status, 200, "GET {path} on {addr}");
    }
}

/// `none`, or each status other than 200 with its count.
pub(crate) fn not_ok(load: &Load) -> String {
    let mut parts: Vec<String> = Vec::new();
    if load.refused > 0 {
        parts.push(format!("429 × {}", load.refused));
    }
    parts.extend(load.statuses.iter().map(|(s, n)| format!("{s} × {n}")));
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

#[derive(Default)]
pub(crate) struct Load {
    pub(crate) ok: u64,
    pub(crate) refused: u64,
    pub(crate) other: u64,
    /// The statuses other than 200 and 429, with their counts.
    pub(crate) statuses: std::collections::BTreeMap<u16, u64>,
    pub(crate) elapsed: Duration,
    pub(crate) latencies: Vec<Duration>,
}

impl Load {
    pub(crate) fn add(&mut self, other: Load) {
        self.ok += other.ok;
        self.refused += other.refused;
        self.other += other.other;
        for (status, n) in other.statuses {
            *self.statuses.entry(status).or_default() += n;
        }
        self.elapsed += other.elapsed;
        self.latencies.extend(other.latencies);
    }

    pub(crate) fn per_second(&self) -> f64 {
        (self.ok + self.refused + self.other) as f64 / self.elapsed.as_secs_f64()
    }
}

/// `connections` connections, each sending back to back for `run` (closed loop), each its own
/// user.
pub(crate) async fn closed_loop(
    addr: SocketAddr,
    path: &str,
    connections: usize,
    run: Duration,
) -> Load {
    let mut senders = Vec::with_capacity(connections);
    for _ in 0..connections {
        senders.push(connect(addr).await);
    }
    let start = Instant::now();
    let end = start + run;
    let tasks: Vec<_> = senders
        .into_iter()
        .enumerate()
        .map(|(i, mut sender)| {
            let path = path.to_string();
            tokio::spawn(async move {
                let user = format!("u{i}");
                let mut load = Load::default();
                while Instant::now() < end {
                    let t = Instant::now();
                    match get(&mut sender, addr, &path, &user).await {
                        200 => load.ok += 1,
                        429 => load.refused += 1,
                        status => {
                            load.other += 1;
                            *load.statuses.entry(status).or_default() += 1;
                        }
                    }
                    load.latencies.push(t.elapsed());
                }
                load
            })
        })
        .collect();
    let mut total = Load::default();
    for task in tasks {
        total.add(task.await.expect("a load task"));
    }
    total.elapsed = start.elapsed();
    total
}

// ---------------------------------------------------------------------------------------------
// Open loop at a fixed rate.

pub(crate) struct Timed {
    /// From the scheduled instant to the answer.
    pub(crate) latency: Duration,
    /// From the scheduled instant to the send (the load generator's own lateness).
    pub(crate) lag: Duration,
    pub(crate) ok: bool,
}

pub(crate) type BoxBool = std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send>>;
/// One request of a series: the request's number in, whether it succeeded out.
pub(crate) type Call = Arc<dyn Fn(u64) -> BoxBool + Send + Sync>;

/// Calls `call` `rate` times a second for `run`, each at its scheduled instant from a pacing
/// thread (never waiting for earlier answers), and times each from that instant.
pub(crate) async fn open_loop(rate: u64, run: Duration, call: &Call) -> Vec<Timed> {
    let handle = tokio::runtime::Handle::current();
    let call = Arc::clone(call);
    let n = rate * run.as_millis() as u64 / 1000;
    let period = Duration::from_nanos(1_000_000_000 / rate);
    let pacer = std::thread::spawn(move || {
        let start = Instant::now() + Duration::from_millis(5);
        let mut tasks = Vec::with_capacity(n as usize);
        for i in 0..n {
            let at = start + period * u32::try_from(i).expect("fewer than 2^32 requests");
            let now = Instant::now();
            if at > now {
                std::thread::sleep(at - now);
            }
            let request = call(i);
            tasks.push(handle.spawn(async move {
                let sent = Instant::now();
                let ok = request.await;
                let done = Instant::now();
                Timed {
                    latency: done - at,
                    lag: sent.saturating_duration_since(at),
                    ok,
                }
            }));
        }
        tasks
    });
    let tasks = tokio::task::spawn_blocking(move || pacer.join().expect("the pacer"))
        .await
        .expect("the pacer");
    let mut out = Vec::with_capacity(tasks.len());
    for task in tasks {
        out.push(task.await.expect("a request"));
    }
    out
}

/// `RLS_TRACE=1`: on stderr, the 100 ms windows of a round in which requests took more than
/// 1 ms, with how many did (a stall shows as one window, a slow service as many).
pub(crate) fn slow_windows(name: &str, n: usize, rate: u64, timed: &[Timed]) {
    let per_window = (rate / 10).max(1) as usize;
    let windows: Vec<String> = timed
        .chunks(per_window)
        .enumerate()
        .filter_map(|(w, chunk)| {
            let slow = chunk
                .iter()
                .filter(|t| t.latency > Duration::from_millis(1))
                .count();
            let worst = chunk.iter().map(|t| t.latency).max()?;
            (slow > 0).then(|| format!("{}ms:{slow}/max{}us", w * 100, worst.as_micros()))
        })
        .collect();
    eprintln!("RLS_TRACE {n} {name}: {}", windows.join(" "));
}

#[derive(Default)]
pub(crate) struct Series {
    /// The p99 of each round, in µs.
    pub(crate) round_p99: Vec<f64>,
    /// CPU ticks of the rl-gateways and of Redis during this series' rounds.
    pub(crate) cpu: (u64, u64),
    pub(crate) latencies: Vec<Duration>,
    pub(crate) lags: Vec<Duration>,
    pub(crate) failed: u64,
    pub(crate) sent: u64,
    pub(crate) seconds: f64,
}

impl Series {
    pub(crate) fn add(&mut self, timed: Vec<Timed>, seconds: f64) {
        self.seconds += seconds;
        let mut round: Vec<Duration> = timed.iter().map(|t| t.latency).collect();
        round.sort();
        self.round_p99.push(percentile(&round, 0.99));
        for t in timed {
            self.sent += 1;
            self.failed += u64::from(!t.ok);
            self.latencies.push(t.latency);
            self.lags.push(t.lag);
        }
    }

    pub(crate) fn sort(&mut self) {
        self.latencies.sort();
        self.lags.sort();
    }
}

pub(crate) fn descriptors(n: usize, user: u64) -> Vec<RateLimitDescriptor> {
    (1..=n)
        .map(|i| RateLimitDescriptor {
            entries: vec![Entry {
                key: format!("d{i}"),
                value: format!("u{user}"),
            }],
            ..RateLimitDescriptor::default()
        })
        .collect()
}

/// `ShouldRateLimit` with `n` descriptors, over `channel`, for 1,000 users in turn.
pub(crate) fn rls_call(channel: Channel, n: usize) -> Call {
    Arc::new(move |i| {
        let mut client = RateLimitServiceClient::new(channel.clone());
        Box::pin(async move {
            let request = RateLimitRequest {
                domain: "bench".into(),
                descriptors: descriptors(n, i % 1000),
                hits_addend: 1,
            };
            match client.should_rate_limit(request).await {
                Ok(r) => r.into_inner().overall_code == Code::Ok as i32,
                Err(_) => false,
            }
        })
    })
}

/// `ShouldRateLimit` with the one descriptor `key=value`, the same for every request.
pub(crate) fn rls_one(channel: Channel, key: &'static str, value: &'static str) -> Call {
    Arc::new(move |_| {
        let mut client = RateLimitServiceClient::new(channel.clone());
        Box::pin(async move {
            let request = RateLimitRequest {
                domain: "bench".into(),
                descriptors: vec![RateLimitDescriptor {
                    entries: vec![Entry {
                        key: key.into(),
                        value: value.into(),
                    }],
                    ..RateLimitDescriptor::default()
                }],
                hits_addend: 1,
            };
            match client.should_rate_limit(request).await {
                Ok(r) => r.into_inner().overall_code == Code::Ok as i32,
                Err(_) => false,
            }
        })
    })
}

/// The `RL.MULTI` rl-gateway sends for `n` descriptors (the same keys, rules and options),
/// straight to the server.
pub(crate) fn multi_call(conn: redis::aio::MultiplexedConnection, n: usize) -> Call {
    Arc::new(move |i| {
        let mut conn = conn.clone();
        Box::pin(async move {
            let mut c = redis::cmd("RL.MULTI");
            c.arg(n);
            for r in 1..=n {
                c.arg(format!("rls:bench:d{r}=u{}#window", i % 1000));
            }
            for r in 0..n {
                c.arg("RULE")
                    .arg(r)
                    .arg(1_000_000_000u64)
                    .arg("1s")
                    .arg("COST")
                    .arg(1)
                    .arg("ALGO")
                    .arg("window");
            }
            c.query_async::<redis::Value>(&mut conn).await.is_ok()
        })
    })
}

// ---------------------------------------------------------------------------------------------
// Counting store calls.

/// Calls of the module's commands the server has counted.
pub(crate) fn server_calls(server: &Server) -> u64 {
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

/// The sum of a metric's samples (every label set) in `/metrics`.
pub(crate) async fn metric(admin: SocketAddr, name: &str) -> u64 {
    let body = text(admin, "/metrics").await;
    body.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}
