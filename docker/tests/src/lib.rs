//! What the docker tests share: the image under test, free loopback ports, connections that wait
//! for a server to answer, and Compose projects taken down when dropped. Every container uses the
//! host's network, and every server binds 127.0.0.1 only.

use redis::{cmd, Connection, Value};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// The image under test, `name:tag`, from `RL_IMAGE` (docker/test sets it per variant).
pub fn image() -> String {
    std::env::var("RL_IMAGE").unwrap_or_else(|_| "redis-rl:latest".to_owned())
}

/// The image's name and tag apart, as testcontainers takes them.
pub fn image_name_and_tag() -> (String, String) {
    let image = image();
    match image.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => (name.to_owned(), tag.to_owned()),
        _ => (image, "latest".to_owned()),
    }
}

/// The docker/ folder, where the Compose files are.
pub fn docker_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("docker/tests has a parent")
        .to_path_buf()
}

const FIRST_PORT: u32 = 27000;
const BLOCK: u32 = 200;
const BLOCKS: u32 = 10;
const BUS_OFFSET: u16 = 10000;
static NEXT_PORT: AtomicU32 = AtomicU32::new(0);

/// A port in 27000..29000 that this process did not hand out before and that is free now,
/// together with its cluster bus port (+10000). Each process starts at its own block, so two runs
/// side by side rarely meet.
pub fn free_port() -> u16 {
    let start = FIRST_PORT + std::process::id() % BLOCKS * BLOCK;
    for _ in 0..BLOCK {
        let n = NEXT_PORT.fetch_add(1, Ordering::SeqCst) % BLOCK;
        let port = u16::try_from(start + n).expect("ports stay below 29000");
        let free = [port, port + BUS_OFFSET]
            .iter()
            .all(|p| TcpListener::bind(("127.0.0.1", *p)).is_ok());
        if free {
            return port;
        }
    }
    panic!(
        "no free port (with its port + {BUS_OFFSET}) in {start}..{}",
        start + BLOCK
    );
}

/// A connection to 127.0.0.1:`port` that answered `PING`, retried for up to 30 s.
pub fn connect(port: u16) -> Connection {
    let timeout = Duration::from_secs(30);
    let deadline = Instant::now() + timeout;
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).expect("valid URL");
    loop {
        let attempt = client
            .get_connection_with_timeout(Duration::from_secs(2))
            .and_then(|mut c| cmd("PING").query::<String>(&mut c).map(|_| c));
        match attempt {
            Ok(c) => return c,
            Err(e) if Instant::now() > deadline => panic!("127.0.0.1:{port} never answered: {e}"),
            Err(_) => sleep(Duration::from_millis(100)),
        }
    }
}

/// Polls `check` every 100 ms until it holds, panicking with `what` after `timeout`.
pub fn wait_until(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        sleep(Duration::from_millis(100));
    }
}

/// `DUMP key`: the key's value serialised as the server persists it, byte for byte equal on two
/// servers of one version exactly when they hold the same state for the key (unlike `DEBUG
/// DIGEST-VALUE`, it needs no debug command enabled in the topologies). Panics if the key is
/// missing.
pub fn dump(c: &mut Connection, key: &str) -> Vec<u8> {
    let dumped: Option<Vec<u8>> = cmd("DUMP")
        .arg(key)
        .query(c)
        .unwrap_or_else(|e| panic!("DUMP {key}: {e}"));
    dumped.unwrap_or_else(|| panic!("{key} does not exist"))
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

/// One field of an `INFO` section, e.g. `info_field(c, "replication", "role")`.
pub fn info_field(c: &mut Connection, section: &str, field: &str) -> Option<String> {
    let info: String = cmd("INFO").arg(section).query(c).ok()?;
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .map(|v| v.trim().to_owned())
}

/// The names of the loaded modules, from `MODULE LIST`.
pub fn module_names(c: &mut Connection) -> Vec<String> {
    let modules: Vec<Vec<Value>> = cmd("MODULE").arg("LIST").query(c).expect("MODULE LIST");
    modules
        .iter()
        .filter_map(|fields| {
            fields.chunks(2).find_map(|pair| match pair {
                [Value::BulkString(k), Value::BulkString(v)] if k == b"name" => {
                    Some(String::from_utf8_lossy(v).into_owned())
                }
                _ => None,
            })
        })
        .collect()
}

/// Every container, volume and Compose project of these tests is named with this prefix and the
/// process id, so docker/test can remove what a killed run left behind.
pub const NAME_PREFIX: &str = "rltest";

/// A name unique to this process for a container or a volume.
pub fn unique_name(what: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    format!("{NAME_PREFIX}{}{what}{n}", std::process::id())
}

/// A docker-compose project on one of the Compose files in docker/, with its own name and the
/// environment that picks its ports and image; `down -v` when dropped, so no container or
/// volume outlives the test.
pub struct Compose {
    file: PathBuf,
    project: String,
    env: Vec<(String, String)>,
}

impl Compose {
    pub fn up(file: &str, env: Vec<(String, String)>) -> Compose {
        let project = unique_name("compose");
        let mut env = env;
        env.push(("RL_IMAGE".to_owned(), image()));
        let compose = Compose {
            file: docker_dir().join(file),
            project,
            env,
        };
        compose.run(&["up", "-d"]);
        compose
    }

    fn output(&self, args: &[&str]) -> std::process::Output {
        Command::new("docker-compose")
            .arg("-f")
            .arg(&self.file)
            .arg("-p")
            .arg(&self.project)
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .output()
            .expect("docker-compose runs")
    }

    pub fn run(&self, args: &[&str]) -> String {
        let output = self.output(args);
        assert!(
            output.status.success(),
            "docker-compose {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }
}

impl Drop for Compose {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let logs = self.output(&["logs", "--no-color", "--tail", "40"]);
            eprintln!("{}", String::from_utf8_lossy(&logs.stdout));
        }
        let down = self.output(&["down", "-v", "-t", "1"]);
        if !down.status.success() {
            eprintln!(
                "docker-compose down failed: {}",
                String::from_utf8_lossy(&down.stderr)
            );
        }
    }
}

/// A named volume, removed when dropped (after the containers using it).
pub struct Volume(pub String);

impl Volume {
    pub fn new(tag: &str) -> Volume {
        Volume(unique_name(tag))
    }
}

impl Drop for Volume {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["volume", "rm", "-f", &self.0])
            .output();
    }
}
