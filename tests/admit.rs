//! RL.ADMIT against a real server: commands.md's worked examples, reply fields, TTLs, DRYRUN,
//! RESP3, MULTI/EXEC and Lua.

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

/// Runs `lines` inside one MULTI/EXEC so they see (almost) the same instant.
fn atomically(c: &mut Connection, lines: &[&str]) -> Vec<Vec<i64>> {
    let mut pipe = redis::pipe();
    pipe.atomic();
    for line in lines {
        let mut command = cmd("RL.ADMIT");
        for w in line.split_whitespace() {
            command.arg(w);
        }
        pipe.add_command(command);
    }
    pipe.query(c).expect("exec")
}

#[test]
fn a_read_bucket_admits_20_then_refuses_with_500ms() {
    let s = Server::start();
    let mut c = s.conn();
    for algo in ["gcra", "bucket"] {
        let key = format!("u17:{algo}");
        let line = format!("{key} 2 1s BURST 20 ALGO {algo}");
        let replies = atomically(&mut c, &vec![line.as_str(); 21]);
        for (i, r) in replies.iter().take(20).enumerate() {
            assert_eq!(
                r,
                &vec![1, 19 - i as i64, 0, 500 * (i as i64 + 1), 20],
                "call {i}"
            );
        }
        assert_eq!(replies[20], vec![0, 0, 500, 10_000, 20]);
        let ttl = pttl(&mut c, key.as_bytes());
        // The expiry is rounded up to the next millisecond.
        assert!((9_900..=10_001).contains(&ttl), "ttl {ttl}");
    }
}

#[test]
fn cost_10_with_3_left_waits_3500ms() {
    let s = Server::start();
    let mut c = s.conn();
    let replies = atomically(
        &mut c,
        &["u17 2 1s BURST 20 COST 17", "u17 2 1s BURST 20 COST 10"],
    );
    assert_eq!(replies[0], vec![1, 3, 0, 8_500, 20]);
    assert_eq!(replies[1], vec![0, 3, 3_500, 8_500, 20]);
}

#[test]
fn gcra_and_bucket_agree_call_by_call() {
    let s = Server::start();
    let mut c = s.conn();
    let mut split = 0;
    for round in 0..40 {
        let cost = 1 + round % 4;
        let replies = atomically(
            &mut c,
            &[
                &format!("g 5 200ms BURST 7 COST {cost}"),
                &format!("b 5 200ms BURST 7 COST {cost} ALGO bucket"),
            ],
        );
        let (g, b) = (&replies[0], &replies[1]);
        if g[..2] != b[..2] {
            // Each command reads the clock itself, so within one MULTI the two decide some
            // microseconds apart (more on a loaded machine), and each key's debt dates from its
            // own read when it was last full. That may split a decision at a token's boundary,
            // and only there: remaining one unit apart, or a refusal due within a few milliseconds.
            // Both start again from full.
            split += 1;
            let near = if g[0] == b[0] {
                g[1].abs_diff(b[1]) <= 1
            } else {
                g[2].max(b[2]) <= 10
            };
            assert!(
                near,
                "round {round}: gcra {g:?}, bucket {b:?} disagree beyond the clock reads"
            );
            let _: () = cmd("DEL").arg("g").arg("b").query(&mut c).unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(7));
    }
    assert!(split <= 4, "{split} of 40 rounds split at a boundary");
}

#[test]
fn dry_run_decides_but_changes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        admit(&mut c, "fresh 10 1s COST 4 DRYRUN"),
        vec![1, 6, 0, 400, 10]
    );
    let exists: i64 = cmd("EXISTS").arg("fresh").query(&mut c).unwrap();
    assert_eq!(exists, 0, "a dry run must not create the key");
    admit(&mut c, "k 10 1m COST 5");
    let before = digest(&mut c, b"k");
    let d = admit(&mut c, "k 10 1m COST 5 DRYRUN");
    assert_eq!((d[0], d[1]), (1, 0));
    assert_eq!(digest(&mut c, b"k"), before);
    let d = admit(&mut c, "k 10 1m COST 6 DRYRUN");
    assert_eq!(d[0], 0);
    assert_eq!(digest(&mut c, b"k"), before);
}

#[test]
fn refusal_changes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    admit(&mut c, "k 1 1h");
    let before = (digest(&mut c, b"k"), pttl(&mut c, b"k"));
    assert_eq!(admit(&mut c, "k 1 1h")[0], 0);
    let after = (digest(&mut c, b"k"), pttl(&mut c, b"k"));
    assert_eq!(before.0, after.0);
    assert!(after.1 <= before.1);
}

#[test]
fn key_expires_when_full_again() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(admit(&mut c, "k 10 1s COST 3"), vec![1, 7, 0, 300, 10]);
    let ttl = pttl(&mut c, b"k");
    assert!((200..=301).contains(&ttl), "ttl {ttl}");
    std::thread::sleep(std::time::Duration::from_millis(350));
    let exists: i64 = cmd("EXISTS").arg("k").query(&mut c).unwrap();
    assert_eq!(exists, 0);
}

#[test]
fn changed_parameters_keep_the_spent_tokens() {
    let s = Server::start();
    let mut c = s.conn();
    admit(&mut c, "k 10 1h COST 8");
    // Same key, a larger capacity: the 2 remaining tokens carry over, nothing is minted.
    let d = admit(&mut c, "k 10 1h BURST 100");
    assert_eq!(d[1], 1);
    assert_eq!(d[4], 100);
}

#[test]
fn resp3_replies_are_maps_with_named_fields() {
    let s = Server::start();
    let mut c = s.conn3();
    let v: Value = cmd("RL.ADMIT")
        .arg("k")
        .arg(5)
        .arg("1s")
        .query(&mut c)
        .unwrap();
    let Value::Map(fields) = v else {
        panic!("expected a map, got {v:?}")
    };
    let names: Vec<String> = fields
        .iter()
        .map(|(k, _)| redis::from_redis_value::<String>(k).unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "allowed",
            "remaining",
            "retry_after_ms",
            "reset_after_ms",
            "capacity"
        ]
    );
    let values: Vec<i64> = fields
        .iter()
        .map(|(_, v)| redis::from_redis_value::<i64>(v).unwrap())
        .collect();
    assert_eq!(values, vec![1, 4, 0, 200, 5]);
}

#[test]
fn binary_key_names_are_ordinary_keys() {
    let s = Server::start();
    let mut c = s.conn();
    let key: &[u8] = &[0xff, 0xfe, 0x00, b'k', 0x80];
    let r: Vec<i64> = cmd("RL.ADMIT")
        .arg(key)
        .arg(1)
        .arg("1m")
        .query(&mut c)
        .unwrap();
    assert_eq!(r[0], 1);
    let r: Vec<i64> = cmd("RL.ADMIT")
        .arg(key)
        .arg(1)
        .arg("1m")
        .query(&mut c)
        .unwrap();
    assert_eq!(r[0], 0);
    let t: String = cmd("TYPE").arg(key).query(&mut c).unwrap();
    assert_eq!(t, "rllimiter");
}

#[test]
fn works_from_lua() {
    let s = Server::start();
    let mut c = s.conn();
    let script = "local a = redis.call('RL.ADMIT', KEYS[1], 2, '1s', 'BURST', 3) \
                  local b = redis.call('RL.ADMIT', KEYS[1], 2, '1s', 'BURST', 3, 'COST', 3) \
                  return {a[1], a[2], b[1], b[3]}";
    let r: Vec<i64> = cmd("EVAL")
        .arg(script)
        .arg(1)
        .arg("lua")
        .query(&mut c)
        .unwrap();
    assert_eq!(r, vec![1, 2, 0, 500]);
}

#[test]
fn largest_values_do_not_overflow() {
    let s = Server::start();
    let mut c = s.conn();
    let max = "1000000000000000";
    let r = admit(&mut c, &format!("big {max} 3650d BURST {max} COST {max}"));
    assert_eq!(r, vec![1, 0, 0, 315_360_000_000, 1_000_000_000_000_000]);
    let r = admit(&mut c, &format!("big {max} 3650d BURST {max} COST {max}"));
    assert_eq!(r[0], 0);
    assert_eq!(r[2], 315_360_000_000);
    let r = admit(&mut c, "tiny 1 1ms");
    assert_eq!(r, vec![1, 0, 0, 1, 1]);
}
