//! Effect replication: a replica holds byte-identical state however late it applies the
//! stream, and commands that change nothing propagate nothing.

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

const ALGOS: [&str; 5] = ["gcra", "bucket", "window", "sliding", "log"];

/// A rule's arguments (limit, period and options) for keys of family `slot % 3`, so that a key
/// keeps one algorithm family and its calls succeed.
fn random_rule(rng: &mut Rng, slot: u64) -> Vec<String> {
    let algo = match slot % 3 {
        0 => ALGOS[rng.below(2) as usize],
        1 => ALGOS[2 + rng.below(2) as usize],
        _ => "log",
    };
    let limit = 1 + rng.below(8);
    let mut args = vec![
        limit.to_string(),
        ["100ms", "1s", "7s", "1m"][rng.below(4) as usize].to_string(),
    ];
    let mut capacity = limit;
    if slot.is_multiple_of(3) {
        capacity = limit + rng.below(10);
        args.extend(["BURST".into(), capacity.to_string()]);
    }
    args.extend(["COST".into(), (1 + rng.below(capacity)).to_string()]);
    args.extend(["ALGO".into(), algo.into()]);
    args
}

fn random_admit(rng: &mut Rng) -> Vec<String> {
    let slot = rng.below(100);
    let mut args = vec![format!("r:{slot}")];
    args.extend(random_rule(rng, slot));
    if rng.below(8) == 0 {
        args.push("DRYRUN".into());
    }
    args
}

/// RL.MULTI over three keys, one of each algorithm family.
fn random_multi(rng: &mut Rng) -> Vec<String> {
    let base = 3 * rng.below(10);
    let slots = [base, base + 1, base + 2];
    let mut args = vec!["3".to_string()];
    args.extend(slots.iter().map(|s| format!("m:{s}")));
    for (i, s) in slots.iter().enumerate() {
        args.extend([String::from("RULE"), format!("rule{i}")]);
        args.extend(random_rule(rng, *s));
    }
    args
}

#[test]
fn randomized_workload_leaves_identical_digests() {
    let primary = Server::start();
    let replica = Server::start();
    replica.replicate_from(&primary);
    let mut c = primary.conn();
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let lua = "return redis.call('RL.ADMIT', KEYS[1], unpack(ARGV))";
    for round in 0..3000 {
        match rng.below(16) {
            12 => {
                let key = format!("sem:{}", rng.below(10));
                let holder = format!("h{}", rng.below(8));
                let verb = ["RL.ACQUIRE", "RL.RELEASE", "RL.RENEW"][rng.below(3) as usize];
                let mut command = cmd(verb);
                command.arg(&key);
                match verb {
                    "RL.ACQUIRE" => {
                        command
                            .arg(3)
                            .arg(["50ms", "1s", "1m"][rng.below(3) as usize]);
                        if rng.below(4) > 0 {
                            command.arg("ID").arg(&holder);
                        }
                    }
                    "RL.RELEASE" => {
                        command.arg(&holder);
                    }
                    _ => {
                        command.arg(&holder).arg("1s");
                    }
                }
                let _: Value = command.query(&mut c).expect("semaphore");
            }
            13 => {
                let key = format!("res:{}", rng.below(10));
                let id = format!("id{}", rng.below(20));
                let _: Value = cmd("RL.ADMIT")
                    .arg(&key)
                    .arg(5)
                    .arg("1s")
                    .arg("BURST")
                    .arg(20)
                    .arg("COST")
                    .arg(1 + rng.below(20))
                    .arg("RESERVE")
                    .arg(&id)
                    .arg("KEEP")
                    .arg(["200ms", "1m"][rng.below(2) as usize])
                    .query(&mut c)
                    .expect("reserve");
            }
            14 => {
                let key = format!("res:{}", rng.below(10));
                let id = format!("id{}", rng.below(20));
                let mut settle = cmd("RL.SETTLE");
                settle.arg(&key).arg(&id).arg(rng.below(40));
                if rng.below(3) == 0 {
                    settle.arg("FORGET");
                }
                let _: Value = settle.query(&mut c).expect("settle");
            }
            15 => {
                let slot = rng.below(100);
                let mut args = vec![format!("r:{slot}")];
                let rule = random_rule(&mut rng, slot);
                // RL.GRANT takes the rule without COST.
                let cost_at = rule.iter().position(|a| a == "COST").unwrap();
                args.extend(rule[..cost_at].iter().cloned());
                args.extend(rule[cost_at + 2..].iter().cloned());
                args.extend(["WANT".into(), (1 + rng.below(6)).to_string()]);
                let _: Value = cmd("RL.GRANT").arg(&args).query(&mut c).expect("grant");
            }
            10 => {
                let a = random_multi(&mut rng);
                let _: Value = cmd("RL.MULTI").arg(&a).query(&mut c).expect("multi");
            }
            11 => {
                let key = format!("cell:{}", rng.below(20));
                let quantity = rng.below(4);
                let _: Value = cmd("CL.THROTTLE")
                    .arg(key)
                    .arg(4)
                    .arg(2)
                    .arg(1)
                    .arg(quantity)
                    .query(&mut c)
                    .expect("throttle");
            }
            0 => {
                let mut pipe = redis::pipe();
                pipe.atomic();
                for _ in 0..5 {
                    let a = random_admit(&mut rng);
                    pipe.cmd("RL.ADMIT").arg(&a);
                }
                let _: Value = pipe.query(&mut c).expect("exec");
            }
            1 => {
                let a = random_admit(&mut rng);
                let _: Value = cmd("EVAL")
                    .arg(lua)
                    .arg(1)
                    .arg(&a[0])
                    .arg(&a[1..])
                    .query(&mut c)
                    .expect("eval");
            }
            _ => {
                let a = random_admit(&mut rng);
                let _: Value = cmd("RL.ADMIT").arg(&a).query(&mut c).expect("admit");
            }
        }
        if round % 500 == 0 {
            // Let time pass so that refills, not only spending, are exercised.
            std::thread::sleep(std::time::Duration::from_millis(30));
        }
    }
    wait_for_sync(&primary, &replica);
    let mut r = replica.conn();
    let mut keys: Vec<Vec<u8>> = cmd("KEYS").arg("*").query(&mut c).unwrap();
    keys.sort();
    assert!(keys.len() > 50, "only {} keys", keys.len());
    let mut compared = 0;
    for k in &keys {
        let p = digest(&mut c, k);
        if p == "0000000000000000000000000000000000000000" {
            continue; // expired between KEYS and here
        }
        assert_eq!(p, digest(&mut r, k), "key {}", String::from_utf8_lossy(k));
        compared += 1;
    }
    assert!(compared > 50);
}

fn settle(c: &mut Connection, key: &str, id: &str, actual: u64, forget: bool) -> Value {
    let mut command = cmd("RL.SETTLE");
    command.arg(key).arg(id).arg(actual);
    if forget {
        command.arg("FORGET");
    }
    command.query(c).expect("RL.SETTLE")
}

/// `RL.SETTLE ... FORGET` reaches the replica as the primary left the key: the reservation is
/// forgotten there too, so after a failover a retried settlement replies nil and the same id
/// is charged anew.
#[test]
fn a_forgotten_reservation_is_forgotten_on_the_replica() {
    let primary = Server::start();
    let replica = Server::start();
    replica.replicate_from(&primary);
    let (mut c, mut r) = (primary.conn(), replica.conn());
    let key = "idem:{t:7}";
    let pair = |a: i64, b: i64| Value::Array(vec![Value::Int(a), Value::Int(b)]);
    let state = |c: &mut Connection| -> (String, i64, Value) {
        let at: i64 = cmd("PEXPIRETIME").arg(key).query(c).unwrap();
        let info: Vec<Value> = cmd("RL.INFO").arg(key).query(c).unwrap();
        let live = info
            .chunks(2)
            .find(|f| f[0] == Value::BulkString(b"reservations".to_vec()))
            .map(|f| f[1].clone())
            .expect("reservations in RL.INFO");
        (digest(c, key.as_bytes()), at, live)
    };
    // 10 an hour, capacity 100: nothing refills while the test runs.
    let rule = "10 1h BURST 100 COST 10";
    assert_eq!(admit(&mut c, &format!("{key} {rule} RESERVE k1"))[1], 90);
    assert_eq!(
        admit(&mut c, &format!("{key} {rule} RESERVE k2 KEEP 100ms"))[1],
        80
    );
    assert_eq!(settle(&mut c, key, "k1", 14, false), pair(4, 76));
    // k2 is forgotten by the time the settled k1 is: that write drops it on both sides.
    std::thread::sleep(std::time::Duration::from_millis(150));
    assert_eq!(settle(&mut c, key, "k1", 30, true), pair(4, 76));
    wait_for_sync(&primary, &replica);
    let on_primary = state(&mut c);
    assert_eq!(on_primary.2, Value::Int(0), "none live");
    assert_eq!(state(&mut r), on_primary);
    // A reservation settled and forgotten at once.
    assert_eq!(admit(&mut c, &format!("{key} {rule} RESERVE k3"))[1], 66);
    assert_eq!(settle(&mut c, key, "k3", 5, true), pair(-5, 71));
    wait_for_sync(&primary, &replica);
    let on_primary = state(&mut c);
    assert_eq!(on_primary.2, Value::Int(0), "none live");
    assert_eq!(state(&mut r), on_primary);
    // The failover: the replica answers as the primary would have.
    let _: () = cmd("REPLICAOF").arg("NO").arg("ONE").query(&mut r).unwrap();
    for id in ["k1", "k2", "k3"] {
        assert_eq!(settle(&mut r, key, id, 14, false), Value::Nil, "{id}");
    }
    assert_eq!(admit(&mut r, &format!("{key} {rule} RESERVE k1"))[1], 61);
    assert_eq!(admit(&mut r, &format!("{key} {rule} RESERVE k3"))[1], 51);
}

fn repl_offset(c: &mut Connection) -> i64 {
    let info: String = cmd("INFO").arg("replication").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("master_repl_offset:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

#[test]
fn refusals_and_dry_runs_propagate_nothing() {
    let primary = Server::start();
    let replica = Server::start();
    replica.replicate_from(&primary);
    let mut c = primary.conn();
    admit(&mut c, "k 1 1h");
    let before = repl_offset(&mut c);
    assert_eq!(admit(&mut c, "k 1 1h")[0], 0);
    assert_eq!(admit(&mut c, "other 1 1h DRYRUN")[0], 1);
    let _ = error_of(&mut c, &[b"RL.ADMIT", b"k", b"1", b"1"]);
    assert_eq!(repl_offset(&mut c), before);
    admit(&mut c, "other 1 1h");
    assert!(repl_offset(&mut c) > before);
}

#[test]
fn the_aof_records_effects_not_commands() {
    let s = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut c = s.conn();
    admit(&mut c, "k 5 1s");
    let _: Value = cmd("EVAL")
        .arg("return redis.call('RL.ADMIT', KEYS[1], 5, '1s')")
        .arg(1)
        .arg("lua")
        .query(&mut c)
        .unwrap();
    // A semaphore propagates each lease change, not every lease.
    for holder in ["a", "b"] {
        let _: Value = cmd("RL.ACQUIRE")
            .arg("sem")
            .arg(1000)
            .arg("1m")
            .arg("ID")
            .arg(holder)
            .query(&mut c)
            .unwrap();
    }
    let _: i64 = cmd("RL.RELEASE").arg("sem").arg("a").query(&mut c).unwrap();
    // RL.MULTI propagates its keys' states in one command.
    let _: Value = cmd("RL.MULTI")
        .arg(&[
            "2", "m1", "m2", "RULE", "x", "5", "1s", "RULE", "y", "5", "1s",
        ])
        .query(&mut c)
        .unwrap();
    let mut aof = Vec::new();
    for entry in std::fs::read_dir(s.dir.join("appendonlydir")).expect("aof dir") {
        let path = entry.unwrap().path();
        if path.to_string_lossy().ends_with(".incr.aof") {
            aof.extend(std::fs::read(path).unwrap());
        }
    }
    let text = String::from_utf8_lossy(&aof);
    assert_eq!(text.matches("RL.SETSTATE").count(), 3, "{text}");
    assert_eq!(text.matches("RL.LEASESET").count(), 3, "{text}");
    assert!(!text.contains("MULTI\r"), "no MULTI/EXEC wrapper: {text}");
    assert!(!text.contains("RL.ADMIT"), "{text}");
    assert!(!text.contains("EVAL"), "{text}");
}
