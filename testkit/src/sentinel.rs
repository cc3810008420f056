//! A Sentinel (the server binary in `--sentinel` mode, without the module) watching one
//! primary, for the tests of clients that follow a primary through a failover.

use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use redis::{cmd, Connection, Value};

use super::{free_port, server_binary, Server, NEXT_DIR};

/// The name the Sentinel knows the primary by.
pub const NAME: &str = "rl";

pub struct Sentinel {
    child: Child,
    pub port: u16,
    dir: std::path::PathBuf,
}

impl Sentinel {
    /// A Sentinel watching `primary` as [`NAME`] with a quorum of one, so that it alone may
    /// fail the primary over; it answers once it knows `replicas` replicas of it.
    pub fn watch(primary: &Server, replicas: usize) -> Sentinel {
        let n = NEXT_DIR.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("rl-sentinel-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("sentinel dir");
        let port = free_port();
        // Sentinel rewrites its file as it learns the topology, so it is its own.
        let conf = dir.join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {dir}\nlogfile {dir}/sentinel.log\n\
                 sentinel monitor {NAME} 127.0.0.1 {primary} 1\n\
                 sentinel down-after-milliseconds {NAME} 1000\n\
                 sentinel failover-timeout {NAME} 5000\n",
                dir = dir.display(),
                primary = primary.port,
            ),
        )
        .expect("sentinel.conf");
        let child = Command::new(server_binary())
            .arg(&conf)
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("cannot start the server binary as a Sentinel");
        let mut sentinel = Sentinel { child, port, dir };
        sentinel.wait_until(20, "the Sentinel to know the primary's replicas", |c| {
            let known: Vec<Value> = cmd("SENTINEL")
                .arg("REPLICAS")
                .arg(NAME)
                .query(c)
                .unwrap_or_default();
            known.len() >= replicas
        });
        sentinel
    }

    /// Fails the primary over to a replica (without asking other Sentinels) and returns the
    /// new primary's port once the Sentinel names it.
    pub fn fail_over(&mut self) -> u16 {
        let before = self.primary_port();
        let _: () = cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(NAME)
            .query(&mut self.conn())
            .expect("SENTINEL FAILOVER");
        self.wait_until(30, "a new primary", |c| {
            primary_of(c).is_some_and(|p| p != before)
        });
        self.primary_port()
    }

    /// The port of the primary the Sentinel names now.
    pub fn primary_port(&self) -> u16 {
        primary_of(&mut self.conn()).expect("the Sentinel names a primary")
    }

    pub fn conn(&self) -> Connection {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let tried = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))
                .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
                .and_then(|mut c| cmd("PING").query::<String>(&mut c).map(|_| c));
            match tried {
                Ok(c) => return c,
                Err(e) if Instant::now() >= deadline => panic!(
                    "cannot connect to the Sentinel: {e}; its log:\n{}",
                    std::fs::read_to_string(self.dir.join("sentinel.log")).unwrap_or_default()
                ),
                Err(_) => sleep(Duration::from_millis(50)),
            }
        }
    }

    fn wait_until(
        &mut self,
        secs: u64,
        what: &str,
        mut ready: impl FnMut(&mut Connection) -> bool,
    ) {
        let mut c = self.conn();
        let deadline = Instant::now() + Duration::from_secs(secs);
        while !ready(&mut c) {
            assert!(
                Instant::now() < deadline,
                "waited {secs} s for {what}; the Sentinel's log:\n{}",
                std::fs::read_to_string(self.dir.join("sentinel.log")).unwrap_or_default()
            );
            sleep(Duration::from_millis(100));
        }
    }
}

fn primary_of(c: &mut Connection) -> Option<u16> {
    let addr: Vec<String> = cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(NAME)
        .query(c)
        .ok()?;
    addr.get(1)?.parse().ok()
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
