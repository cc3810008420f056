//! A real `redis-server` (or `valkey-server`) with the freshly built module, for each test.
//!
//! The server binary is `$RL_SERVER` (default `redis-server` on the PATH); the module is
//! `$RL_MODULE` or this build's `target/<profile>/librl.so` in the workspace. Each server gets
//! its own loopback port (see [`free_port`]) and directory, and is killed when dropped.
//! Connections are retried and checked with PING, so a loaded machine slows the suite down
//! rather than failing it. Every crate's tests and benchmarks use it as a dev-dependency.

// A test stops at its first surprise, and so does its harness: it may unwrap, expect, panic
// and index.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Once;
use std::thread::sleep;
use std::time::{Duration, Instant};

pub use redis::{cmd, Connection, Value};

pub mod cluster;
pub mod sentinel;

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
            .args(["build", "-p", "redis-rl", "--lib", "--quiet"])
            .current_dir(workspace_root());
        if profile == "release" {
            build.arg("--release");
        }
        let status = build.status().expect("cannot run cargo build");
        assert!(status.success(), "building the module failed");
    });
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| workspace_root().join("target"));
    target.join(profile).join("librl.so")
}

/// The workspace's root: this harness also serves the client crate, whose manifest directory
/// is a member's, not the module's.
fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .find(|dir| {
            std::fs::read_to_string(dir.join("Cargo.toml"))
                .is_ok_and(|toml| toml.lines().any(|l| l.trim() == "[workspace]"))
        })
        .unwrap_or(manifest)
        .to_path_buf()
}

pub fn server_binary() -> String {
    std::env::var("RL_SERVER").unwrap_or_else(|_| "redis-server".to_string())
}

/// `RL_MODE=script`: servers start without the module, so a client's suite runs in its script
/// mode (`clients/SPEC.md` section 5) against `clients/scripts/rl.lua`.
pub fn script_mode() -> bool {
    std::env::var("RL_MODE").is_ok_and(|mode| mode == "script")
}

/// True when the suite runs against Valkey (some replies differ in wording).
pub fn is_valkey() -> bool {
    server_binary().contains("valkey")
}

/// Servers listen on `FIRST_PORT..FIRST_PORT + PORT_SPAN`; a cluster node also binds its bus on
/// the port + 10000, which lands in the next span, so no server's port is another's bus. Both
/// spans stay below Linux's ephemeral range (32768 and up), from which the kernel picks the
/// local ports of outgoing connections.
const FIRST_PORT: u16 = 12000;
const PORT_SPAN: u16 = 10000;
const BUS_OFFSET: u16 = 10000;
/// Each test binary hands out ports from its own block, chosen by its pid, so binaries running
/// at the same time rarely share one; a port still taken (by a server of another binary or
/// anything else) is skipped, and a server that loses a race for its port is booted again on
/// the next one.
const BLOCK: u16 = 200;

static NEXT_PORT: AtomicU32 = AtomicU32::new(0);

/// True when both the port and its cluster bus port can be bound on 127.0.0.1 right now.
fn port_is_free(port: u16) -> bool {
    [port, port + BUS_OFFSET]
        .iter()
        .all(|p| TcpListener::bind(("127.0.0.1", *p)).is_ok())
}

/// A port no other server of this process was given recently (threads share the counter) and
/// that is free now, together with its bus port.
fn free_port() -> u16 {
    let blocks = u32::from(PORT_SPAN / BLOCK);
    let start = u32::from(FIRST_PORT) + std::process::id() % blocks * u32::from(BLOCK);
    for _ in 0..BLOCK {
        let n = NEXT_PORT.fetch_add(1, Ordering::SeqCst) % u32::from(BLOCK);
        let port = u16::try_from(start + n).expect("ports stay below 22000");
        if port_is_free(port) {
            return port;
        }
    }
    panic!(
        "no free port (with its port + {BUS_OFFSET}) in {start}..{}",
        start + u32::from(BLOCK)
    );
}

static NEXT_DIR: AtomicU32 = AtomicU32::new(0);

pub struct Server {
    child: Option<Child>,
    pub port: u16,
    pub dir: PathBuf,
    extra: Vec<String>,
    module: bool,
}

impl Server {
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// Starts a server with extra `--name value` configuration. Words before the first `--name`
    /// follow `--loadmodule librl.so` directly, so they are module arguments.
    pub fn start_with(extra: &[&str]) -> Server {
        let mut server = Server::unstarted(extra);
        server.boot(false);
        server
    }

    /// Starts a server without the module, whatever `RL_MODE` says.
    pub fn start_plain(extra: &[&str]) -> Server {
        let mut server = Server::unstarted(extra);
        server.module = false;
        server.boot(false);
        server
    }

    /// Starts a server with `extra` configuration that must make it exit at startup (a module
    /// argument it refuses, say), and returns its log. Panics if it answers PING instead.
    pub fn refused_start(extra: &[&str]) -> String {
        let mut server = Server::unstarted(extra);
        for _attempt in 0..5 {
            server.port = free_port();
            server.spawn();
            if server.wait_ready() {
                panic!("the server started with {extra:?}; log:\n{}", server.log());
            }
            server.kill();
            let log = server.log();
            // Lost a race for the port: that is not the refusal asked for.
            if !log.contains("Address already in use") {
                return log;
            }
            let _ = std::fs::remove_file(server.dir.join("server.log"));
        }
        panic!("no free port to try {extra:?} on");
    }

    fn unstarted(extra: &[&str]) -> Server {
        let n = NEXT_DIR.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("rl-test-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("test dir");
        Server {
            child: None,
            port: 0,
            dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            module: !script_mode(),
        }
    }

    /// Starts the server, on a new port for each attempt unless `same_port` (a restart, whose
    /// replicas and cluster peers know the port). An attempt fails when the process exits (a
    /// port taken meanwhile) or never answers PING.
    fn boot(&mut self, same_port: bool) {
        for _attempt in 0..5 {
            if !same_port || self.port == 0 {
                self.port = free_port();
            }
            self.spawn();
            if self.wait_ready() {
                return;
            }
            self.kill();
        }
        panic!("server did not start; log:\n{}", self.log());
    }

    fn spawn(&mut self) {
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
            .arg(self.dir.join("server.log"));
        if self.module {
            command.arg("--loadmodule").arg(module_path());
        }
        command
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.child = Some(command.spawn().expect("cannot start the server binary"));
    }

    /// Waits up to 10 s for the server to answer; false if the process died or never answered.
    fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(_)) = child.try_wait() {
                    return false;
                }
            }
            if self.answers() {
                return true;
            }
            sleep(Duration::from_millis(20));
        }
        false
    }

    /// True when this very server (its pid) answers on its port. A raw socket with timeouts:
    /// a listener that accepts and never answers fails the probe instead of hanging it, and
    /// another server that won a race for the port is not taken for this one.
    fn answers(&self) -> bool {
        let Some(pid) = self.pid() else {
            return false;
        };
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
        if s.write_all(b"INFO server\r\n").is_err() {
            return false;
        }
        let want = format!("\r\nprocess_id:{pid}\r\n");
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
            if String::from_utf8_lossy(&got).contains(&want) {
                return true;
            }
        }
        false
    }

    /// Connects and checks the connection with PING, retrying for up to 20 s: on a loaded
    /// machine a server that has just answered PING may still reset a new connection.
    fn connect(&self, url: &str) -> Connection {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut wait = Duration::from_millis(10);
        let mut attempts = 0;
        loop {
            attempts += 1;
            // Only the PING times out: tests may block longer on purpose.
            let tried = redis::Client::open(url)
                .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
                .and_then(|c| c.set_read_timeout(Some(Duration::from_secs(5))).map(|_| c))
                .and_then(|mut c| cmd("PING").query::<String>(&mut c).map(|_| c))
                .and_then(|c| c.set_read_timeout(None).map(|_| c));
            match tried {
                Ok(c) => return c,
                Err(e) if Instant::now() >= deadline => panic!(
                    "cannot connect to {url} after {attempts} attempts: {e}; server log:\n{}",
                    self.log()
                ),
                Err(_) => {
                    sleep(wait);
                    wait = (wait * 2).min(Duration::from_millis(500));
                }
            }
        }
    }

    pub fn conn(&self) -> Connection {
        self.connect(&format!("redis://127.0.0.1:{}/", self.port))
    }

    /// A RESP3 connection.
    pub fn conn3(&self) -> Connection {
        self.connect(&format!("redis://127.0.0.1:{}/?protocol=resp3", self.port))
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
        self.boot(true);
    }

    /// Whether the next restart loads the module: a server that gains or loses it, as one
    /// does when an operator loads the module into a server that ran the scripts.
    pub fn with_module_on_restart(&mut self, module: bool) {
        self.module = module;
    }

    /// Kills the server with SIGKILL and leaves it down, keeping its port and directory for
    /// [`Server::start_again`]: a store that is down when a client starts.
    pub fn stop(&mut self) {
        self.kill();
    }

    /// Starts a stopped server again on its port.
    pub fn start_again(&mut self) {
        self.boot(true);
    }

    /// Kills the server with SIGKILL (no save, no last flush: only what it had already written
    /// to its AOF or RDB survives) and starts it again on the same directory and port, with
    /// `extra` configuration added.
    pub fn crash_and_restart(&mut self, extra: &[&str]) {
        self.kill();
        self.extra.extend(extra.iter().map(|s| s.to_string()));
        self.boot(true);
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

/// How many times the server ran `command` (lower case, `rl.multi`): its `commandstats` count.
/// In script mode every command is one `EVALSHA`, so this counts the script's calls that ran
/// (those answered `NOSCRIPT` did not), whatever command they stood for: a test relying on it
/// there sends one kind of command only.
pub fn command_calls(c: &mut Connection, command: &str) -> i64 {
    // Redis prints a module command's name as registered (`cmdstat_RL.MULTI`).
    let mut stat = |section: &str, field: &str, key: &str| -> i64 {
        let info: String = cmd("INFO").arg(section).query(c).unwrap_or_default();
        let prefix = format!("{field}:");
        info.lines()
            .find_map(|l| {
                let l = l.to_ascii_lowercase();
                let rest = l.strip_prefix(&prefix.to_ascii_lowercase())?.to_string();
                rest.split(',')
                    .find_map(|part| part.strip_prefix(key))?
                    .parse()
                    .ok()
            })
            .unwrap_or(0)
    };
    if script_mode() {
        stat("commandstats", "cmdstat_evalsha", "calls=")
            - stat("errorstats", "errorstat_noscript", "count=")
    } else {
        stat("commandstats", &format!("cmdstat_{command}"), "calls=")
    }
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
    // An endless generator, not an iterator: the tests call it by the name xorshift's papers use.
    #[allow(clippy::should_implement_trait)]
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

/// Redis's CRC-64 (Jones polynomial, reflected), which DUMP payloads end with.
pub fn crc64(data: &[u8]) -> u64 {
    let mut crc = 0u64;
    for &b in data {
        crc ^= u64::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x95ac_9329_ac4b_c9b5
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// A file under the temporary directory, named for this process, removed when dropped.
pub struct TempFile(pub PathBuf);

impl TempFile {
    pub fn new(name: &str, text: &str) -> TempFile {
        let path = std::env::temp_dir().join(format!("rl-{}-{name}", std::process::id()));
        std::fs::write(&path, text).expect("write a temporary file");
        TempFile(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
