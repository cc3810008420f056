//! A real 3-primary cluster on loopback, the module loaded on every node, built with
//! `redis-cli --cluster create` (or `$RL_CLI`; `valkey-cli` when the suite runs against Valkey
//! and it is on the PATH). Shared by the module's cluster tests and the client's.

use super::*;
use std::process::Command;
use std::thread::sleep;
use std::time::{Duration, Instant};

pub const SLOTS: i64 = 16384;

pub fn cli_binary() -> String {
    if let Ok(cli) = std::env::var("RL_CLI") {
        return cli;
    }
    if is_valkey() {
        let found = Command::new("valkey-cli")
            .arg("--version")
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if found {
            return "valkey-cli".to_string();
        }
    }
    "redis-cli".to_string()
}

/// Runs the cluster CLI and returns its stdout, panicking with all its output on failure.
pub fn run_cli(args: &[String]) -> String {
    let out = Command::new(cli_binary())
        .args(args)
        .output()
        .expect("cannot run the cluster CLI");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{} {args:?} failed: {}\n{stdout}\n{stderr}",
        cli_binary(),
        out.status
    );
    stdout
}

pub fn int(v: &Value) -> i64 {
    redis::from_redis_value(v).unwrap_or_else(|e| panic!("{v:?}: {e}"))
}

/// One node's view of the slot map: `(first, last, port of the primary)`, sorted.
pub fn slot_map(c: &mut Connection) -> Vec<(i64, i64, u16)> {
    let v: Value = cmd("CLUSTER").arg("SLOTS").query(c).expect("CLUSTER SLOTS");
    let Value::Array(ranges) = v else {
        panic!("CLUSTER SLOTS: {v:?}")
    };
    let mut map: Vec<(i64, i64, u16)> = ranges
        .iter()
        .map(|range| {
            let Value::Array(parts) = range else {
                panic!("{range:?}")
            };
            let Value::Array(primary) = &parts[2] else {
                panic!("{range:?}")
            };
            let ip: String = redis::from_redis_value(&primary[0]).unwrap();
            assert_eq!(ip, "127.0.0.1", "{range:?}");
            (int(&parts[0]), int(&parts[1]), int(&primary[1]) as u16)
        })
        .collect();
    map.sort();
    map
}

pub fn cluster_state_ok(c: &mut Connection) -> bool {
    let info: String = cmd("CLUSTER").arg("INFO").query(c).unwrap_or_default();
    info.lines().any(|l| l.trim() == "cluster_state:ok")
}

pub struct Cluster {
    pub nodes: Vec<Server>,
}

impl Cluster {
    /// Three primaries, all slots assigned, every node `cluster_state:ok` and agreeing on the map.
    pub fn start() -> Cluster {
        let nodes: Vec<Server> = (0..3)
            .map(|_| {
                Server::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "5000",
                ])
            })
            .collect();
        let mut args = vec!["--cluster".to_string(), "create".to_string()];
        args.extend(nodes.iter().map(|s| format!("127.0.0.1:{}", s.port)));
        args.extend(["--cluster-replicas", "0", "--cluster-yes"].map(String::from));
        run_cli(&args);
        let cluster = Cluster { nodes };
        cluster.wait_converged("after create");
        cluster
    }

    pub fn conn(&self, i: usize) -> Connection {
        self.nodes[i].conn()
    }

    pub fn port(&self, i: usize) -> u16 {
        self.nodes[i].port
    }

    /// Waits (30 s at most) until every node says `cluster_state:ok` and all have the same
    /// slot map, covering all slots; returns that map.
    pub fn wait_converged(&self, when: &str) -> Vec<(i64, i64, u16)> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut conns: Vec<Connection> = (0..3).map(|i| self.conn(i)).collect();
        loop {
            let ok = conns.iter_mut().all(cluster_state_ok);
            let maps: Vec<_> = conns.iter_mut().map(slot_map).collect();
            let covered: i64 = maps[0].iter().map(|(a, b, _)| b - a + 1).sum();
            if ok && covered == SLOTS && maps.iter().all(|m| *m == maps[0]) {
                return maps[0].clone();
            }
            if Instant::now() > deadline {
                panic!("cluster did not converge {when}: ok={ok} maps={maps:?}");
            }
            sleep(Duration::from_millis(100));
        }
    }
}
