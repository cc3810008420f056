//! What rl-gateway's tests share: the binary started as a process on loopback ports, an
//! upstream that echoes what it received, and policy files.

#![allow(dead_code)] // each test file uses a different part

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use axum::Router;

/// A running rl-gateway, killed when dropped.
pub struct Gateway {
    child: Child,
    /// Each face's address, by face name (`proxy`, `auth`, `admin`, `grpc`).
    pub faces: HashMap<String, SocketAddr>,
    stderr: Option<ChildStderr>,
}

impl Gateway {
    /// Starts the binary with `args` and waits until every face it was given listens.
    pub fn start(args: &[&str]) -> Gateway {
        Gateway::spawn(Command::new(env!("CARGO_BIN_EXE_rl-gateway")), args)
    }

    /// The same, the process allowed one CPU (`taskset -c 0`), as an operator pins it.
    pub fn start_on_one_cpu(args: &[&str]) -> Gateway {
        let mut taskset = Command::new("taskset");
        taskset.args(["-c", "0", env!("CARGO_BIN_EXE_rl-gateway")]);
        Gateway::spawn(taskset, args)
    }

    fn spawn(mut command: Command, args: &[&str]) -> Gateway {
        let mut child = command
            .args(args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let faces_wanted = ["--listen", "--auth", "--admin", "--grpc"]
            .iter()
            .filter(|f| args.contains(f))
            .count();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut faces = HashMap::new();
        while faces.len() < faces_wanted {
            let Some(Ok(line)) = lines.next() else {
                let mut err = String::new();
                child
                    .stderr
                    .take()
                    .unwrap()
                    .read_to_string(&mut err)
                    .unwrap();
                panic!("rl-gateway {args:?} ended before listening:\n{err}");
            };
            // `listening on ADDR (face)`
            let rest = line.strip_prefix("listening on ").unwrap();
            let (addr, face) = rest.split_once(' ').unwrap();
            let face = face.trim_matches(['(', ')']);
            faces.insert(face.to_string(), addr.parse().unwrap());
        }
        let stderr = child.stderr.take();
        Gateway {
            child,
            faces,
            stderr,
        }
    }

    /// Waits (at most 20 s) until `/readyz` says the store answers: until its connection is
    /// made, a gateway answers with the routes' postures.
    pub async fn ready(&self) {
        let ready = format!("{}/readyz", self.url("admin"));
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !reqwest::get(&ready).await.is_ok_and(|r| r.status() == 200) {
            assert!(std::time::Instant::now() < deadline, "never ready");
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    pub fn url(&self, face: &str) -> String {
        format!("http://{}", self.faces[face])
    }

    /// How many threads the process runs now.
    pub fn threads(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/task", self.child.id()))
            .unwrap()
            .count()
    }

    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).unwrap()
    }

    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Reads the log in the background and drops it: a gateway that logs more than a pipe holds
    /// (64 KiB: a few hundred decision records) would otherwise block on its next line.
    pub fn discard_log(&mut self) {
        if let Some(mut err) = self.stderr.take() {
            std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
        }
    }

    /// Waits for the process to exit (at most `within`), with its exit code and its log.
    pub fn wait(mut self, within: Duration) -> (Option<i32>, String) {
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let mut log = String::new();
                if let Some(mut err) = self.stderr.take() {
                    err.read_to_string(&mut log).unwrap();
                }
                return (status.code(), log);
            }
            assert!(
                std::time::Instant::now() < deadline,
                "rl-gateway did not exit"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the binary to its end (a refusal to start, a subcommand): exit code, stdout, stderr.
pub fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rl-gateway"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// A policy file in a fresh directory of its own.
pub fn policy_file(json: &serde_json::Value) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "rl-gateway-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("policy.json");
    write_policy(&file, json);
    file
}

pub fn write_policy(file: &Path, json: &serde_json::Value) {
    std::fs::write(file, serde_json::to_vec_pretty(json).unwrap()).unwrap();
}

/// What the upstream received: method, path and query, headers, body.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub uri: String,
    pub headers: http::HeaderMap,
    pub body: Vec<u8>,
}

/// An upstream on a loopback port: answers 200 with the body it received, `?units=N` with
/// `X-Actual-Cost: N`, `?ms=N` after N ms, `?status=N` with that status; keeps what it saw.
pub async fn upstream() -> (String, Arc<Mutex<Vec<Seen>>>) {
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let kept = Arc::clone(&seen);
    let app = Router::new().fallback(move |request: Request| {
        let kept = Arc::clone(&kept);
        async move {
            let (parts, body) = request.into_parts();
            // A body the gateway broke off (its caller stopped sending) is not the request.
            let Ok(body) = axum::body::to_bytes(body, 1 << 20).await else {
                return Response::new(Body::empty());
            };
            let body = body.to_vec();
            let query: HashMap<String, String> = parts
                .uri
                .query()
                .unwrap_or_default()
                .split('&')
                .filter_map(|p| p.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            kept.lock().unwrap().push(Seen {
                method: parts.method.to_string(),
                uri: parts.uri.to_string(),
                headers: parts.headers.clone(),
                body: body.clone(),
            });
            if let Some(ms) = query.get("ms") {
                tokio::time::sleep(Duration::from_millis(ms.parse().unwrap())).await;
            }
            let mut response = Response::new(Body::from(body));
            if let Some(units) = query.get("units") {
                response
                    .headers_mut()
                    .insert("x-actual-cost", units.parse().unwrap());
            }
            if let Some(status) = query.get("status") {
                *response.status_mut() = status.parse::<u16>().unwrap().try_into().unwrap();
            }
            response
                .headers_mut()
                .insert("connection", "x-upstream-secret".parse().unwrap());
            response
                .headers_mut()
                .insert("x-upstream-secret", "1".parse().unwrap());
            response
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), seen)
}

/// A loopback port nothing listens on (bound, then closed).
pub fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}
