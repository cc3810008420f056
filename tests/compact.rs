//! The three shapes of a key's value: a gcra key without reservations is a 16-byte compact value
//! naming an interned rule, a gcra key with a few reservations that compact value and its
//! reservations in one allocation, anything else a boxed limiter. A key moves between them as
//! commands change it; whatever the shape, replies, persistence and replication are those of
//! one value.

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

fn usage(c: &mut Connection, key: &str) -> i64 {
    cmd("MEMORY")
        .arg("USAGE")
        .arg(key)
        .arg("SAMPLES")
        .arg(0)
        .query(c)
        .expect("memory usage")
}

fn settle(c: &mut Connection, key: &str, id: &str, actual: u64) {
    let _: Value = cmd("RL.SETTLE")
        .arg(key)
        .arg(id)
        .arg(actual)
        .query(c)
        .expect("settle");
}

#[test]
fn a_gcra_key_is_48_bytes_smaller_than_a_boxed_one_and_keeps_few_reservations_beside() {
    let server = Server::start();
    let mut c = server.conn();
    admit(&mut c, "g 10 1h");
    admit(&mut c, "b 10 1h ALGO bucket");
    // Same key length, same expiry: only the value differs (16 bytes against 64).
    assert_eq!(usage(&mut c, "b") - usage(&mut c, "g"), 48);
    // A few reservations live beside the compact value, in one allocation: with one, 112 bytes
    // in place of 16 (a boxed limiter would add its 64 and a second allocation of 96).
    let compact = usage(&mut c, "g");
    admit(&mut c, "g 10 1h RESERVE r1");
    assert_eq!(usage(&mut c, "g") - compact, 96);
    // Settled, it keeps that shape, a second reservation beside the first.
    settle(&mut c, "g", "r1", 1);
    assert_eq!(usage(&mut c, "g") - compact, 96);
    admit(&mut c, "g 10 1h RESERVE r2");
    assert!(usage(&mut c, "g") - compact > 96);
    // Another rule moves the key to a new value: its reservations go along.
    admit(&mut c, "g 20 1h");
    let settled: Vec<i64> = cmd("RL.SETTLE")
        .arg("g")
        .arg("r2")
        .arg(1)
        .query(&mut c)
        .unwrap();
    assert_eq!(settled.len(), 2, "r2 was kept: {settled:?}");
}

fn rules_in_use(c: &mut Connection) -> String {
    let info: String = cmd("INFO").arg("rl").query(c).unwrap();
    let line = info.lines().find(|l| l.starts_with("rl_rules:"));
    line.unwrap_or_else(|| panic!("{info}")).to_string()
}

#[test]
fn info_counts_the_rules_compact_keys_share() {
    let server = Server::start();
    let mut c = server.conn();
    for i in 0..50 {
        admit(&mut c, &format!("tier1:{i} 10 1h"));
        admit(&mut c, &format!("tier2:{i} 100 1h"));
    }
    admit(&mut c, "boxed 1000 1h ALGO bucket");
    assert_eq!(rules_in_use(&mut c), "rl_rules:2");
    let _: () = cmd("FLUSHALL").arg("SYNC").query(&mut c).unwrap();
    assert_eq!(rules_in_use(&mut c), "rl_rules:0");
}

/// One key through every shape change, against a key that stays boxed all along (bucket keys
/// are never compact) for the arithmetic, a replica for the digest, and DEBUG RELOAD.
#[test]
fn a_key_changing_shape_keeps_its_state_everywhere() {
    let primary = Server::start();
    let replica = Server::start();
    replica.replicate_from(&primary);
    let mut c = primary.conn();
    let mut r = replica.conn();
    let steps = [
        "k 10 1h BURST 20 COST 3",             // new: compact
        "k 10 1h BURST 20 COST 2",             // same rule: TAT in place
        "k 30 1h BURST 20 COST 2",             // another rule: re-interned
        "k 30 1h BURST 20 COST 1 ALGO bucket", // bucket: boxed
        "k 30 1h BURST 20 COST 1",             // gcra again: packed on the next write
        "k 30 1h BURST 20 COST 1",
        "k 30 1h BURST 20 COST 4 RESERVE a", // a reservation: boxed
        "k 30 1h BURST 20 COST 1",
    ];
    let (mut remaining, mut sizes) = (Vec::new(), Vec::new());
    for step in steps {
        remaining.push(admit(&mut c, step)[1]);
        sizes.push(usage(&mut c, "k"));
        wait_for_sync(&primary, &replica);
        assert_eq!(digest(&mut c, b"k"), digest(&mut r, b"k"), "after {step}");
    }
    let compact = sizes[0];
    assert_eq!(
        sizes[..6],
        [compact, compact, compact, compact + 48, compact, compact]
    );
    assert!(sizes[6] > compact + 48 && sizes[7] == sizes[6], "{sizes:?}");
    settle(&mut c, "k", "a", 4);
    remaining.push(admit(&mut c, "k 30 1h BURST 20 COST 1")[1]);
    assert_eq!(remaining, [17, 15, 13, 12, 11, 10, 6, 5, 4]);
    wait_for_sync(&primary, &replica);
    let before = digest(&mut c, b"k");
    assert_eq!(before, digest(&mut r, b"k"));
    let _: () = cmd("DEBUG").arg("RELOAD").query(&mut c).expect("reload");
    assert_eq!(digest(&mut c, b"k"), before);
}

#[test]
fn copies_and_many_rules_stay_apart() {
    let server = Server::start();
    let mut c = server.conn();
    admit(&mut c, "src 10 1h COST 4");
    let _: i64 = cmd("COPY").arg("src").arg("dst").query(&mut c).unwrap();
    assert_eq!(admit(&mut c, "dst 10 1h COST 1")[1], 5);
    assert_eq!(admit(&mut c, "src 10 1h")[1], 5);
    assert_eq!(admit(&mut c, "src 10 1h")[1], 4);
    // 3,000 keys with 3,000 rules, rewritten with others, then read back: each key keeps its
    // own rule however ids are reused.
    for round in 0..3u64 {
        let mut pipe = redis::pipe();
        for i in 0..3000u64 {
            pipe.cmd("RL.ADMIT")
                .arg(format!("many:{i}"))
                .arg(1000 + i * 7 + round)
                .arg("1h")
                .ignore();
        }
        if round == 1 {
            pipe.cmd("FLUSHALL").arg("ASYNC").ignore();
        }
        let _: () = pipe.query(&mut c).unwrap();
    }
    for i in (0..3000u64).step_by(97) {
        let info: Vec<Value> = cmd("RL.INFO")
            .arg(format!("many:{i}"))
            .query(&mut c)
            .unwrap();
        let limit = info
            .chunks(2)
            .find(|kv| kv[0] == Value::BulkString(b"limit".to_vec()))
            .map(|kv| kv[1].clone());
        assert_eq!(
            limit,
            Some(Value::Int((1000 + i * 7 + 2) as i64)),
            "many:{i}"
        );
    }
}

#[test]
fn lazily_freed_keys_release_their_rules_while_the_server_writes_and_saves() {
    let server = Server::start_with(&["--lazyfree-lazy-user-flush", "yes"]);
    let mut c = server.conn();
    for round in 0..5u64 {
        let mut pipe = redis::pipe();
        for i in 0..20_000u64 {
            pipe.cmd("RL.ADMIT")
                .arg(format!("lf:{i}"))
                .arg(10 + i % 50 + round)
                .arg("1h")
                .ignore();
        }
        let _: () = pipe.query(&mut c).unwrap();
        // A snapshot forked over these keys while they are freed; refused while the previous
        // round's is still running, which is as good.
        let _: redis::RedisResult<Value> = cmd("BGSAVE").query(&mut c);
        let _: () = cmd("FLUSHALL").query(&mut c).unwrap(); // asynchronous, by the configuration
    }
    for i in 0..100u64 {
        admit(&mut c, &format!("after:{i} {} 1h", 10 + i % 50));
    }
    let before: Vec<String> = (0..100)
        .map(|i| digest(&mut c, format!("after:{i}").as_bytes()))
        .collect();
    let _: () = cmd("DEBUG").arg("RELOAD").query(&mut c).expect("reload");
    let after: Vec<String> = (0..100)
        .map(|i| digest(&mut c, format!("after:{i}").as_bytes()))
        .collect();
    assert_eq!(before, after);
    assert_eq!(admit(&mut c, "after:0 10 1h")[1], 8);
}

/// `MEMORY USAGE` of a key of each shape is within a tenth of what the key costs: its
/// `used_memory` delta per key, less what a string key's `MEMORY USAGE` also leaves out (the
/// server's own per-key structures), over the same key names with an expiry alike.
#[test]
fn memory_usage_tells_what_a_key_costs_within_a_tenth() {
    const KEYS: usize = 4000;
    let server = Server::start();
    let mut c = server.conn();
    let used = |c: &mut Connection| -> i64 {
        info_field(c, "memory", "used_memory")
            .expect("used_memory")
            .parse()
            .expect("a number")
    };
    // (bytes per key by the used_memory delta, MEMORY USAGE of user:0)
    let mut measure = |command: &str| -> (f64, i64) {
        let _: () = cmd("FLUSHALL").arg("SYNC").query(&mut c).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        let before = used(&mut c);
        let mut pipe = redis::pipe();
        for i in 0..KEYS {
            let line = command.replace("{i}", &i.to_string());
            let mut words = line.split(' ');
            let mut one = cmd(words.next().unwrap());
            for w in words {
                one.arg(w);
            }
            pipe.add_command(one).ignore();
        }
        let _: () = pipe.query(&mut c).unwrap();
        // Let the incremental rehashing of the key tables finish, as the bench does.
        std::thread::sleep(std::time::Duration::from_millis(1000));
        let delta = used(&mut c) - before;
        let size: usize = cmd("DBSIZE").query(&mut c).unwrap();
        assert_eq!(size, KEYS, "{command}");
        (delta as f64 / KEYS as f64, usage(&mut c, "user:0"))
    };
    let (string_bytes, string_usage) = measure("SET user:{i} 1764000000000000000 PX 3600000");
    let left_out = string_bytes - string_usage as f64;
    for command in [
        "RL.ADMIT user:{i} 10 3650d",
        "RL.ADMIT user:{i} 10 3650d ALGO bucket",
        "RL.ACQUIRE user:{i} 1000 1h ID h-000000000012-3",
        "RL.ADMIT user:{i} 1000 3650d RESERVE r-000000000012-3",
    ] {
        let (bytes, reported) = measure(command);
        let truth = bytes - left_out;
        let off = (reported as f64 - truth).abs() / truth;
        assert!(
            off <= 0.10,
            "{command}: MEMORY USAGE {reported}, the key costs {bytes:.1} B, {truth:.1} B \
             besides what a string key's leaves out ({string_bytes:.1} - {string_usage}): \
             {:.1} % off",
            off * 100.0
        );
    }
}
