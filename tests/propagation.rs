//! The module builds no effect that Redis would drop (no replica, no backlog, no AOF), and yet
//! every replica and every AOF ends up with what it would have had: a replica that attaches
//! while the module skips, a partial resync, a promotion, an AOF turned on at runtime. Each case
//! compares every key's value digest and absolute expiry on both sides. The gate itself, and the
//! changes skipped effects still count, are tested in `skip_effects.rs`.

// Test code stops at its first surprise: all of it, not only the `#[test]` functions that
// clippy.toml covers, may unwrap, expect, panic and index.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use common::*;
use rl_testkit as common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A first full sync starts at once instead of after `repl-diskless-sync-delay`'s 5 s.
const FAST_SYNC: [&str; 2] = ["--repl-diskless-sync-delay", "0"];
const NO_DIGEST: &str = "0000000000000000000000000000000000000000";

/// One command of the mix. Small limits per hour (a unit lasts minutes) and leases of a minute
/// keep every key alive for minutes, so that none expires while the digests are compared;
/// refusals are part of the mix.
/// Most keys belong to a `phase` (the traffic moves to new keys every 100 commands): a key is
/// written in one stretch of time only, so an effect missed then is not repaired by a later
/// write of the whole state.
fn one_command(c: &mut Connection, rng: &mut Rng, phase: u64) {
    let cost = (1 + rng.below(3)).to_string();
    match rng.below(20) {
        0..=9 => {
            // A key keeps its algorithm: its number picks it.
            let k = rng.below(40);
            let algo = ["gcra", "bucket", "window", "sliding"][(k % 4) as usize];
            let _: Value = cmd("RL.ADMIT")
                .arg(format!("a:{phase}:{k}"))
                .arg(20)
                .arg("1h")
                .arg("COST")
                .arg(&cost)
                .arg("ALGO")
                .arg(algo)
                .query(c)
                .expect("RL.ADMIT");
        }
        10 => {
            let _: Value = cmd("RL.ADMIT")
                .arg(format!("l:{}", rng.below(20)))
                .arg(50)
                .arg("1h")
                .arg("ALGO")
                .arg("log")
                .query(c)
                .expect("RL.ADMIT log");
        }
        11 | 12 => {
            let m = 2 * rng.below(5);
            let _: Value = cmd("RL.MULTI")
                .arg(2)
                .arg(format!("m:{phase}:{m}"))
                .arg(format!("m:{phase}:{}", m + 1))
                .arg(&["RULE", "x", "20", "1h", "COST"])
                .arg(&cost)
                .arg(&["RULE", "y", "30", "1h", "ALGO", "bucket"])
                .query(c)
                .expect("RL.MULTI");
        }
        13..=15 => {
            let _: Value = cmd("RL.ACQUIRE")
                .arg(format!("s:{}", rng.below(20)))
                .arg(3)
                .arg("1m")
                .arg("ID")
                .arg(format!("h{}", rng.below(5)))
                .query(c)
                .expect("RL.ACQUIRE");
        }
        16 | 17 => {
            // Releasing the last lease deletes the key: a propagated DEL.
            let _: Value = cmd("RL.RELEASE")
                .arg(format!("s:{}", rng.below(20)))
                .arg(format!("h{}", rng.below(5)))
                .query(c)
                .expect("RL.RELEASE");
        }
        18 => {
            let mut pipe = redis::pipe();
            pipe.atomic();
            for _ in 0..3 {
                pipe.cmd("RL.ADMIT")
                    .arg(format!("x:{phase}:{}", rng.below(10)))
                    .arg(20)
                    .arg("1h");
            }
            let _: Value = pipe.query(c).expect("MULTI/EXEC");
        }
        _ => {
            let _: Value = cmd("EVAL")
                .arg("return redis.call('RL.ADMIT', KEYS[1], ARGV[1], ARGV[2])")
                .arg(1)
                .arg(format!("e:{phase}:{}", rng.below(10)))
                .arg(20)
                .arg("1h")
                .query(c)
                .expect("EVAL");
        }
    }
}

/// The mix, sent from a thread to one server until stopped.
struct Traffic {
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl Traffic {
    fn start(server: &Server, seed: u64) -> Traffic {
        let mut c = server.conn();
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicU64::new(0));
        let (s, d) = (stop.clone(), done.clone());
        let thread = std::thread::spawn(move || {
            let mut rng = Rng(seed);
            let mut n = 0;
            while !s.load(Ordering::Relaxed) {
                one_command(&mut c, &mut rng, seed % 1000 + n / 100);
                n += 1;
                d.store(n, Ordering::Relaxed);
            }
        });
        Traffic {
            stop,
            done,
            thread: Some(thread),
        }
    }

    /// Waits until `n` more commands were answered.
    fn run_for(&mut self, n: u64) {
        let target = self.done.load(Ordering::Relaxed) + n;
        wait_until(300, "the traffic to run", || {
            self.done.load(Ordering::Relaxed) >= target
                || self.thread.as_ref().is_none_or(|t| t.is_finished())
        });
        if self.thread.as_ref().is_none_or(|t| t.is_finished()) {
            self.finish();
            panic!("the traffic thread ended");
        }
    }

    /// Stops the traffic; a panic in the thread fails the test here.
    fn finish(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().expect("the traffic thread panicked");
        }
    }
}

impl Drop for Traffic {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `INFO rl`'s `rl_replication_receivers`: 0 while the module skips building effects.
fn receivers(c: &mut Connection) -> i64 {
    info_field(c, "rl", "rl_replication_receivers")
        .and_then(|v| v.parse().ok())
        .expect("rl_replication_receivers")
}

fn info_int(c: &mut Connection, section: &str, field: &str) -> i64 {
    info_field(c, section, field)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("INFO {section} has no integer {field}"))
}

fn pexpiretime(c: &mut Connection, key: &[u8]) -> i64 {
    cmd("PEXPIRETIME").arg(key).query(c).expect("pexpiretime")
}

/// A key as compared: its value digest and its absolute expiry in ms.
fn snapshot(c: &mut Connection, key: &[u8]) -> (String, i64) {
    (digest(c, key), pexpiretime(c, key))
}

fn keys(c: &mut Connection) -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = cmd("KEYS").arg("*").query(c).expect("keys");
    keys.sort();
    keys
}

/// After the replica caught up, every key has the same value and expiry on both sides, and
/// the replica has no key the primary lacks. The primary is read before and after the replica
/// so that a key expiring meanwhile is skipped rather than reported. Returns the keys compared.
fn assert_same_keys(primary: &Server, replica: &Server) -> usize {
    wait_for_sync(primary, replica);
    let (mut p, mut r) = (primary.conn(), replica.conn());
    let mut compared = 0;
    let mut all = keys(&mut p);
    all.extend(keys(&mut r));
    all.sort();
    all.dedup();
    for k in &all {
        let before = snapshot(&mut p, k);
        let on_replica = snapshot(&mut r, k);
        let after = snapshot(&mut p, k);
        if before != after {
            continue; // expired while compared
        }
        let name = String::from_utf8_lossy(k);
        if before.0 == NO_DIGEST {
            assert_eq!(on_replica.0, NO_DIGEST, "{name} is only on the replica");
            continue;
        }
        assert_eq!(before, on_replica, "key {name} differs (digest, expiry)");
        compared += 1;
    }
    compared
}

/// A primary that never had a replica stops building effects; a replica then attaches while
/// the traffic goes on, and ends up identical.
fn replica_attaches_under_traffic(primary_args: &[&str], replica_args: &[&str]) {
    let primary = Server::start_with(primary_args);
    let mut p = primary.conn();
    let mut traffic = Traffic::start(&primary, 0x9e37_79b9_7f4a_7c15);
    wait_until(60, "the module to see no receiver", || {
        receivers(&mut p) == 0
    });
    traffic.run_for(2000);
    assert_eq!(receivers(&mut p), 0, "still skipping before the replica");
    let replica = Server::start_with(replica_args);
    replica.replicate_from(&primary);
    assert_eq!(receivers(&mut p), 1, "a replica receives effects");
    traffic.run_for(3000);
    traffic.finish();
    let compared = assert_same_keys(&primary, &replica);
    assert!(compared > 200, "only {compared} keys compared");
}

#[test]
fn a_replica_attaching_under_traffic_gets_everything_disk_sync() {
    replica_attaches_under_traffic(&["--repl-diskless-sync", "no"], &[]);
}

#[test]
fn a_replica_attaching_under_traffic_gets_everything_diskless_sync() {
    // Writes during the delay before the fork are skipped and reach the replica in the RDB.
    let delayed = [
        "--repl-diskless-sync",
        "yes",
        "--repl-diskless-sync-delay",
        "1",
    ];
    replica_attaches_under_traffic(&delayed, &[]);
}

#[test]
fn a_replica_attaching_under_traffic_gets_everything_dual_channel() {
    if !is_valkey() {
        return; // Valkey's dual-channel replication only
    }
    let dual = ["--dual-channel-replication-enabled", "yes"];
    let mut primary = vec!["--repl-diskless-sync", "yes"];
    primary.extend(["--repl-diskless-sync-delay", "1"]);
    primary.extend(dual);
    replica_attaches_under_traffic(&primary, &dual);
}

/// Stops (`STOP`) or resumes (`CONT`) a server process.
fn signal(server: &Server, sig: &str) {
    let pid = server.pid().expect("server running").to_string();
    let status = std::process::Command::new("kill")
        .args([&format!("-{sig}"), &pid])
        .status()
        .expect("kill");
    assert!(status.success(), "kill -{sig} {pid}");
}

/// Stops the replica and cuts its link: the primary has no replica left but keeps its backlog.
fn disconnect(primary: &Server, replica: &Server) {
    let mut p = primary.conn();
    signal(replica, "STOP");
    let _: i64 = cmd("CLIENT")
        .arg(&["KILL", "TYPE", "replica"])
        .query(&mut p)
        .expect("client kill");
    wait_until(30, "the replica to be gone", || {
        info_int(&mut p, "replication", "connected_slaves") == 0
    });
}

#[test]
fn a_partial_resync_gets_everything() {
    // A backlog large enough for what the traffic writes while the replica is away.
    let mut args = FAST_SYNC.to_vec();
    args.extend(["--repl-backlog-size", "256mb"]);
    let primary = Server::start_with(&args);
    let replica = Server::start();
    replica.replicate_from(&primary);
    let mut p = primary.conn();
    let mut traffic = Traffic::start(&primary, 0x2545_f491_4f6c_dd1d);
    traffic.run_for(1000);
    let (full, partial) = (
        info_int(&mut p, "stats", "sync_full"),
        info_int(&mut p, "stats", "sync_partial_ok"),
    );
    disconnect(&primary, &replica);
    // With the backlog kept, the module never stops building effects (over 2+ timer periods).
    let until = Instant::now() + Duration::from_millis(2500);
    while Instant::now() < until {
        assert_eq!(receivers(&mut p), 1, "the backlog can still serve a PSYNC");
        traffic.run_for(50);
    }
    signal(&replica, "CONT");
    wait_until(60, "a partial resync", || {
        info_int(&mut p, "stats", "sync_partial_ok") > partial
    });
    traffic.run_for(2000);
    traffic.finish();
    assert_eq!(
        info_int(&mut p, "stats", "sync_full"),
        full,
        "no full resync"
    );
    let compared = assert_same_keys(&primary, &replica);
    assert!(compared > 200, "only {compared} keys compared");
}

#[test]
fn a_replica_back_after_its_backlog_expired_gets_everything() {
    // The backlog goes 1 s after the last replica left; the module then stops building effects,
    // and the replica's return is a full resync.
    let mut args = FAST_SYNC.to_vec();
    args.extend(["--repl-backlog-ttl", "1"]);
    let primary = Server::start_with(&args);
    let replica = Server::start();
    replica.replicate_from(&primary);
    let mut p = primary.conn();
    let mut traffic = Traffic::start(&primary, 0x5851_f42d_4c95_7f2d);
    traffic.run_for(1000);
    let full = info_int(&mut p, "stats", "sync_full");
    disconnect(&primary, &replica);
    wait_until(60, "the backlog to be freed", || {
        info_int(&mut p, "replication", "repl_backlog_active") == 0
    });
    wait_until(60, "the module to see no receiver", || {
        receivers(&mut p) == 0
    });
    traffic.run_for(2000);
    signal(&replica, "CONT");
    wait_until(60, "a full resync", || {
        info_int(&mut p, "stats", "sync_full") > full
    });
    let mut r = replica.conn();
    wait_until(60, "the replica's link", || {
        info_field(&mut r, "replication", "master_link_status").as_deref() == Some("up")
    });
    traffic.run_for(2000);
    traffic.finish();
    let compared = assert_same_keys(&primary, &replica);
    assert!(compared > 200, "only {compared} keys compared");
}

#[test]
fn a_promoted_replica_feeds_its_own_replica() {
    let primary = Server::start_with(&FAST_SYNC);
    let middle = Server::start_with(&FAST_SYNC);
    let leaf = Server::start();
    middle.replicate_from(&primary);
    leaf.replicate_from(&middle);
    let mut traffic = Traffic::start(&primary, 0x1405_7b7e_f767_814f);
    traffic.run_for(2000);
    traffic.finish();
    wait_for_sync(&primary, &middle);
    wait_for_sync(&middle, &leaf);
    let mut m = middle.conn();
    let _: () = cmd("REPLICAOF")
        .arg(&["NO", "ONE"])
        .query(&mut m)
        .expect("replicaof no one");
    let mut l = leaf.conn();
    wait_until(60, "the leaf's link to the promoted replica", || {
        info_field(&mut l, "replication", "master_link_status").as_deref() == Some("up")
    });
    let mut traffic = Traffic::start(&middle, 0xd1b5_4a32_d192_ed03);
    // Written on the promoted replica over 2+ timer periods: always built, since it has a
    // backlog and a replica.
    let until = Instant::now() + Duration::from_millis(2500);
    while Instant::now() < until {
        assert_eq!(receivers(&mut m), 1, "the promoted replica has a replica");
        traffic.run_for(50);
    }
    traffic.run_for(2000);
    traffic.finish();
    let compared = assert_same_keys(&middle, &leaf);
    assert!(compared > 200, "only {compared} keys compared");
}

/// The server's clock, in Unix ms.
fn server_ms(c: &mut Connection) -> i64 {
    let (s, us): (i64, i64) = cmd("TIME").query(c).expect("time");
    s * 1000 + us / 1000
}

#[test]
fn an_aof_turned_on_at_runtime_gets_everything() {
    let server = Server::start();
    let mut c = server.conn();
    let mut traffic = Traffic::start(&server, 0x6c07_8965_4f2a_11d3);
    wait_until(60, "the module to see no receiver", || {
        receivers(&mut c) == 0
    });
    traffic.run_for(2000);
    let _: () = cmd("CONFIG")
        .arg(&["SET", "appendonly", "yes"])
        .query(&mut c)
        .expect("config set appendonly");
    traffic.run_for(1000);
    wait_until(120, "the AOF rewrite to finish", || {
        info_int(&mut c, "persistence", "aof_rewrite_in_progress") == 0
            && info_int(&mut c, "persistence", "aof_rewrite_scheduled") == 0
    });
    // The rewrite's fork set the flag; once it is clear again, only the AOF check keeps the
    // effects coming.
    wait_until(60, "the module to see no receiver again", || {
        receivers(&mut c) == 0
    });
    traffic.run_for(2000);
    traffic.finish();
    let before: Vec<(Vec<u8>, (String, i64))> = keys(&mut c)
        .into_iter()
        .map(|k| {
            let s = snapshot(&mut c, &k);
            (k, s)
        })
        .collect();
    assert!(before.len() > 200, "only {} keys", before.len());
    let _: () = cmd("DEBUG").arg("LOADAOF").query(&mut c).expect("loadaof");
    let now = server_ms(&mut c);
    let mut compared = 0;
    for (k, was) in &before {
        let is = snapshot(&mut c, k);
        let name = String::from_utf8_lossy(k);
        // DEBUG DIGEST-VALUE still sees a key that expired but was not reclaimed.
        if (is.0 == NO_DIGEST || is.1 == -2) && (0..=now).contains(&was.1) {
            continue; // expired since
        }
        assert_eq!(
            &is, was,
            "key {name} after loading the AOF (digest, expiry)"
        );
        compared += 1;
    }
    assert!(compared > 200, "only {compared} keys compared");
    let after = keys(&mut c);
    assert!(
        after.iter().all(|k| before.iter().any(|(b, _)| b == k)),
        "the AOF made keys that were not there"
    );
}
