//! A real 3-primary cluster on loopback for the cluster tests, built with the cluster CLI
//! (`redis-cli --cluster create`, `$RL_CLI`, or `valkey-cli` when the suite runs against Valkey
//! and it is on the PATH).

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

pub fn keyslot(c: &mut Connection, key: &str) -> i64 {
    cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(c)
        .expect("KEYSLOT")
}

pub fn dbsize(c: &mut Connection) -> i64 {
    cmd("DBSIZE").query(c).expect("DBSIZE")
}

pub struct Cluster {
    pub nodes: Vec<Server>,
}

/// The slot of each key, in one pipeline.
pub fn keyslots(c: &mut Connection, keys: &[String]) -> Vec<i64> {
    let mut pipe = redis::pipe();
    for k in keys {
        pipe.cmd("CLUSTER").arg("KEYSLOT").arg(k);
    }
    pipe.query(c).expect("KEYSLOT pipeline")
}

impl Cluster {
    /// Three primaries, all slots assigned, every node `cluster_state:ok` and agreeing on the map.
    pub fn start() -> Cluster {
        Cluster::start_nodes(Server::start_with)
    }

    /// The same cluster without the module, whatever `RL_MODE` says (the scripts' tests).
    pub fn start_plain() -> Cluster {
        Cluster::start_nodes(Server::start_plain)
    }

    fn start_nodes(start: fn(&[&str]) -> Server) -> Cluster {
        let nodes: Vec<Server> = (0..3)
            .map(|_| {
                start(&[
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

    pub fn id(&self, i: usize) -> String {
        cmd("CLUSTER")
            .arg("MYID")
            .query(&mut self.conn(i))
            .expect("MYID")
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

    /// The index of the node owning `slot` in `map`.
    pub fn owner_in(&self, map: &[(i64, i64, u16)], slot: i64) -> usize {
        let (_, _, port) = map
            .iter()
            .find(|(a, b, _)| (*a..=*b).contains(&slot))
            .unwrap_or_else(|| panic!("slot {slot} unassigned: {map:?}"));
        self.nodes
            .iter()
            .position(|s| s.port == *port)
            .expect("owner is one of ours")
    }

    pub fn owner(&self, slot: i64) -> usize {
        self.owner_in(&slot_map(&mut self.conn(0)), slot)
    }

    /// The slots node `i` owns, ascending.
    pub fn slots_of(&self, map: &[(i64, i64, u16)], i: usize) -> Vec<i64> {
        map.iter()
            .filter(|(_, _, p)| *p == self.port(i))
            .flat_map(|(a, b, _)| *a..=*b)
            .collect()
    }
}

pub fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// Seconds since the epoch by the server's clock.
pub fn server_secs(c: &mut Connection) -> i64 {
    let t: Vec<String> = cmd("TIME").query(c).expect("TIME");
    t[0].parse().unwrap()
}
