//! A real `redis-server` (or `valkey-server`) with the freshly built module, for each test.
//!
//! The server binary is `$RL_SERVER` (default `redis-server` on the PATH); the module is
//! `$RL_MODULE` or this build's `target/<profile>/librl.so`. Each server gets a free loopback
//! port and its own directory, and is killed when dropped.

#![allow(dead_code)] // each test file uses a different part of the harness

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Once;
use std::thread::sleep;
use std::time::{Duration, Instant};

pub use redis::{cmd, Connection, Value};

static BUILD: Once = Once::new();

/// The module to load. `cargo test` does not rebuild the `cdylib`, so the first call builds it
/// (a no-op when fresh): the tests always run the code they were compiled with.
pub fn module_path() -> PathBuf {
    if let Ok(p) = std::env::var("RL_MODULE") {
        return PathBuf::from(p);
    }
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    BUILD.call_once(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
        let mut build = Command::new(cargo);
        build
            .args(["build", "--lib", "--quiet"])
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        if profile == "release" {
            build.arg("--release");
        }
        let status = build.status().expect("cannot run cargo build");
        assert!(status.success(), "building the module failed");
    });
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    target.join(profile).join("librl.so")
}

pub fn server_binary() -> String {
    std::env::var("RL_SERVER").unwrap_or_else(|_| "redis-server".to_string())
}

/// True when the suite runs against Valkey (some replies differ in wording).
pub fn is_valkey() -> bool {
    server_binary().contains("valkey")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free loopback port")
}

static NEXT_DIR: AtomicU32 = AtomicU32::new(0);

pub struct Server {
    child: Option<Child>,
    pub port: u16,
    pub dir: PathBuf,
    extra: Vec<String>,
}

impl Server {
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// Starts a server with extra `--name value` configuration.
    pub fn start_with(extra: &[&str]) -> Server {
        let n = NEXT_DIR.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("rl-test-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("test dir");
        let mut server = Server {
            child: None,
            port: 0,
            dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        server.boot();
        server
    }

    fn boot(&mut self) {
        for _attempt in 0..5 {
            if self.port == 0 || self.child.is_some() {
                self.port = free_port();
            }
            let mut command = Command::new(server_binary());
            command
                .arg("--port")
                .arg(self.port.to_string())
                .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                .args([
                    "--enable-debug-command",
                    "yes",
                    "--enable-module-command",
                    "yes",
                ])
                .arg("--dir")
                .arg(&self.dir)
                .arg("--logfile")
                .arg(self.dir.join("server.log"))
                .arg("--loadmodule")
                .arg(module_path())
                .args(&self.extra)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let child = command.spawn().expect("cannot start the server binary");
            self.child = Some(child);
            if self.wait_ready() {
                return;
            }
            self.kill();
        }
        panic!("server did not start; log:\n{}", self.log());
    }

    /// Waits up to 10 s for PING to answer; false if the process died or never answered.
    fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(_)) = child.try_wait() {
                    return false;
                }
            }
            if let Ok(mut c) = self.try_conn() {
                if cmd("PING").query::<String>(&mut c).is_ok() {
                    return true;
                }
            }
            sleep(Duration::from_millis(20));
        }
        false
    }

    fn try_conn(&self) -> redis::RedisResult<Connection> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))?;
        client.get_connection_with_timeout(Duration::from_secs(5))
    }

    pub fn conn(&self) -> Connection {
        self.try_conn().expect("connect")
    }

    /// A RESP3 connection.
    pub fn conn3(&self) -> Connection {
        let url = format!("redis://127.0.0.1:{}/?protocol=resp3", self.port);
        redis::Client::open(url)
            .and_then(|c| c.get_connection())
            .expect("connect resp3")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// True while the server process runs (a crash would end it).
    pub fn alive(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server (SHUTDOWN, saving when `save`) and starts it again on the same
    /// directory and port, with `extra` configuration added.
    pub fn restart(&mut self, save: bool, extra: &[&str]) {
        let verb = if save { "SAVE" } else { "NOSAVE" };
        let _ = cmd("SHUTDOWN").arg(verb).query::<()>(&mut self.conn());
        if let Some(mut child) = self.child.take() {
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        self.extra.extend(extra.iter().map(|s| s.to_string()));
        self.boot();
    }

    /// Makes this server a replica of `primary` and waits until the link is up.
    pub fn replicate_from(&self, primary: &Server) {
        let mut c = self.conn();
        let _: () = cmd("REPLICAOF")
            .arg("127.0.0.1")
            .arg(primary.port)
            .query(&mut c)
            .expect("replicaof");
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let info: String = cmd("INFO")
                .arg("replication")
                .query(&mut c)
                .unwrap_or_default();
            if info.contains("master_link_status:up") {
                return;
            }
            sleep(Duration::from_millis(50));
        }
        panic!("replica link never came up");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Waits until `replica` has applied everything `primary` has sent so far.
pub fn wait_for_sync(primary: &Server, replica: &Server) {
    let mut p = primary.conn();
    let mut r = replica.conn();
    let offset = |c: &mut Connection, field: &str| -> i64 {
        let info: String = cmd("INFO").arg("replication").query(c).unwrap_or_default();
        info.lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(-1)
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let want = offset(&mut p, "master_repl_offset:");
        if want >= 0 && offset(&mut r, "slave_repl_offset:") >= want {
            return;
        }
        sleep(Duration::from_millis(20));
    }
    panic!("replica did not catch up");
}

/// `RL.ADMIT` with its arguments split on spaces, as RESP2 integers.
pub fn admit(c: &mut Connection, line: &str) -> Vec<i64> {
    let mut command = cmd("RL.ADMIT");
    for word in line.split_whitespace() {
        command.arg(word);
    }
    command
        .query(c)
        .unwrap_or_else(|e| panic!("RL.ADMIT {line}: {e}"))
}

/// A command's error text, panicking if it succeeded.
pub fn error_of(c: &mut Connection, args: &[&[u8]]) -> String {
    let mut command = cmd(std::str::from_utf8(args[0]).expect("command name"));
    for a in &args[1..] {
        command.arg(*a);
    }
    match command.query::<Value>(c) {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => error_text(&e),
    }
}

/// The full error line the server sent ("ERR ...", "WRONGTYPE ...").
pub fn error_text(e: &redis::RedisError) -> String {
    let code = e.code().unwrap_or("");
    let detail = e.detail().unwrap_or("");
    format!("{code} {detail}").trim().to_string()
}

pub fn digest(c: &mut Connection, key: &[u8]) -> String {
    cmd("DEBUG")
        .arg("DIGEST-VALUE")
        .arg(key)
        .query::<Vec<String>>(c)
        .expect("digest")[0]
        .clone()
}

pub fn pttl(c: &mut Connection, key: &[u8]) -> i64 {
    cmd("PTTL").arg(key).query(c).expect("pttl")
}

/// A field of an `INFO` section, as text (`None` when the server does not print it).
pub fn info_field(c: &mut Connection, section: &str, field: &str) -> Option<String> {
    let info: String = cmd("INFO").arg(section).query(c).ok()?;
    let prefix = format!("{field}:");
    info.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .map(|v| v.trim().to_string())
}

/// Polls `ready` every 50 ms until it holds, panicking with `what` after `secs` seconds.
pub fn wait_until(secs: u64, what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !ready() {
        assert!(
            Instant::now() < deadline,
            "timed out after {secs} s: {what}"
        );
        sleep(Duration::from_millis(50));
    }
}

/// A small deterministic xorshift generator, so that a failing random test reproduces.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
