//! The gate that lets the module skip building effects (`skip-effects`, `INFO rl`'s
//! `rl_skip_effects`): on by default only on the servers it was verified on, off in cluster mode
//! and with `skip-effects no`, a bad argument refusing the load; and skipped effects still count
//! as changes for the RDB `save` points. What a replica or an AOF receives while effects are
//! skipped is in `propagation.rs`.

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

use std::time::{Duration, Instant};

/// A first full sync starts at once instead of after `repl-diskless-sync-delay`'s 5 s.
const FAST_SYNC: [&str; 2] = ["--repl-diskless-sync-delay", "0"];

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

/// The same commands, on new keys, with the changes they count (as the RDB `save` points do).
fn changes_counted(server: &Server) -> i64 {
    let mut c = server.conn();
    let before = info_int(&mut c, "persistence", "rdb_changes_since_last_save");
    admit(&mut c, "n1 1 1h");
    admit(&mut c, "n1 1 1h"); // refused: no change
    admit(&mut c, "n2 1 1h DRYRUN"); // no change
    admit(&mut c, "n3 5 1h ALGO log");
    let _: Value = cmd("RL.MULTI")
        .arg(&["3", "q1", "q2", "q3", "RULE", "a", "5", "1h"])
        .arg(&["RULE", "b", "5", "1h", "RULE", "c", "5", "1h"])
        .query(&mut c)
        .expect("RL.MULTI");
    let _: Value = cmd("RL.ACQUIRE")
        .arg(&["sem", "2", "1m", "ID", "h"])
        .query(&mut c)
        .expect("RL.ACQUIRE");
    let _: i64 = cmd("RL.RELEASE")
        .arg(&["sem", "h"])
        .query(&mut c)
        .expect("RL.RELEASE");
    let _: Value = cmd("EVAL")
        .arg("return redis.call('RL.ADMIT', KEYS[1], 5, '1h')")
        .arg(1)
        .arg("lua")
        .query(&mut c)
        .expect("EVAL");
    // Two hash commands on the key (HSET, PEXPIREAT), each with its effect.
    let _: Value = cmd("RL.ALLOCATE")
        .arg(&["alloc", "100", "eu", "g1", "5", "0"])
        .query(&mut c)
        .expect("RL.ALLOCATE");
    let mut pipe = redis::pipe();
    pipe.atomic();
    pipe.cmd("RL.ADMIT").arg(&["t1", "5", "1h"]);
    pipe.cmd("RL.ADMIT").arg(&["t2", "5", "1h"]);
    let _: Value = pipe.query(&mut c).expect("MULTI/EXEC");
    info_int(&mut c, "persistence", "rdb_changes_since_last_save") - before
}

#[test]
fn skipped_effects_still_count_as_changes() {
    let alone = Server::start();
    let mut a = alone.conn();
    wait_until(60, "the module to see no receiver", || {
        receivers(&mut a) == 0
    });
    let primary = Server::start_with(&FAST_SYNC);
    let replica = Server::start();
    replica.replicate_from(&primary);
    let skipped = changes_counted(&alone);
    let built = changes_counted(&primary);
    assert_eq!(receivers(&mut a), 0, "the lone server skipped");
    assert_eq!(
        skipped, built,
        "the same changes with and without a replica"
    );
    // n1, n3, the RL.MULTI, the acquire, the release (a DEL), the script, two in MULTI/EXEC,
    // and the allocation's two hash commands and their two effects.
    assert_eq!(built, 12);
    wait_for_sync(&primary, &replica);
}

#[test]
fn cluster_mode_always_builds_effects() {
    // Valkey streams writes to atomic slot migration targets, which `INFO replication` does not
    // show: a cluster node keeps building effects, replica or not (over 2+ timer periods).
    let node = Server::start_with(&["--cluster-enabled", "yes"]);
    let mut c = node.conn();
    let until = Instant::now() + Duration::from_millis(2500);
    while Instant::now() < until {
        assert_eq!(receivers(&mut c), 1, "a cluster node builds effects");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether this suite's server is one the gate was verified on: Redis 7.0.x or Valkey 9.1.x,
/// read from `INFO server` independently of the module.
fn verified_server(c: &mut Connection) -> bool {
    let name = info_field(c, "server", "server_name");
    let (flavor, version) = match name.as_deref() {
        Some("valkey") => ("valkey", info_field(c, "server", "valkey_version")),
        None | Some("redis") => ("redis", info_field(c, "server", "redis_version")),
        Some(_) => return false,
    };
    let version = version.expect("a version in INFO server");
    let major_minor: Vec<&str> = version.split('.').take(2).collect();
    matches!(
        (flavor, major_minor.as_slice()),
        ("redis", ["7", "0"]) | ("valkey", ["9", "1"])
    )
}

/// `INFO rl`'s gate fields: (`rl_skip_effects`, `rl_skip_effects_why`).
fn gate(c: &mut Connection) -> (String, String) {
    let on = info_field(c, "rl", "rl_skip_effects").expect("rl_skip_effects");
    let why = info_field(c, "rl", "rl_skip_effects_why").expect("rl_skip_effects_why");
    (on, why)
}

#[test]
fn the_gate_is_on_by_default_only_on_verified_servers() {
    let s = Server::start();
    let mut c = s.conn();
    if verified_server(&mut c) {
        assert_eq!(gate(&mut c), ("1".into(), "verified_server".into()));
        wait_until(60, "the module to see no receiver", || {
            receivers(&mut c) == 0
        });
    } else {
        assert_eq!(gate(&mut c), ("0".into(), "unverified_server".into()));
    }
    // `auto` is the default, in any case.
    let auto = Server::start_with(&["skip-effects", "AUTO"]);
    assert_eq!(gate(&mut auto.conn()), gate(&mut c));
}

#[test]
fn skip_effects_no_always_builds_effects() {
    let s = Server::start_with(&["skip-effects", "no"]);
    let mut c = s.conn();
    assert_eq!(gate(&mut c), ("0".into(), "module_argument".into()));
    // A lone server, which the timer would clear within a second or two when the gate is on.
    let until = Instant::now() + Duration::from_millis(3000);
    while Instant::now() < until {
        admit(&mut c, "k 5 1h");
        assert_eq!(receivers(&mut c), 1, "effects are built");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_bad_module_argument_refuses_the_load() {
    for (args, why) in [
        (
            &["skip-effects", "maybe"][..],
            "redis-rl: skip-effects must be auto or no, not 'maybe'",
        ),
        (
            &["skip-effects"][..],
            "skip-effects must be auto or no, not ''",
        ),
        (
            &["skip_effects", "no"][..],
            "redis-rl: unknown module argument 'skip_effects'",
        ),
    ] {
        let log = Server::refused_start(args);
        assert!(log.contains(why), "{args:?}: no '{why}' in the log:\n{log}");
        assert!(
            log.contains("the module is not loaded"),
            "{args:?}: the log does not say the module was refused:\n{log}"
        );
    }
}
