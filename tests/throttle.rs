//! CL.THROTTLE: a drop-in for redis-cell, pinned against its documented semantics.

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

fn throttle(c: &mut Connection, line: &str) -> Vec<i64> {
    let mut command = cmd("CL.THROTTLE");
    for w in line.split_whitespace() {
        command.arg(w);
    }
    command
        .query(c)
        .unwrap_or_else(|e| panic!("CL.THROTTLE {line}: {e}"))
}

/// redis-cell's README example and its test table, at one instant (inside MULTI/EXEC).
#[test]
fn replies_match_redis_cell_at_one_instant() {
    let s = Server::start();
    let mut c = s.conn();
    // (arguments after the key, [limited, limit, remaining, retry_after_s, reset_after_s])
    let cases: &[(&str, [i64; 5])] = &[
        ("4 1 1 6", [1, 5, 5, -1, 0]), // larger than the capacity: never, and nothing spent
        ("4 1 1", [0, 5, 4, -1, 1]),
        ("4 1 1", [0, 5, 3, -1, 2]),
        ("4 1 1", [0, 5, 2, -1, 3]),
        ("4 1 1", [0, 5, 1, -1, 4]),
        ("4 1 1", [0, 5, 0, -1, 5]),
        ("4 1 1", [1, 5, 0, 1, 5]),
        ("4 1 1 0", [0, 5, 0, -1, 5]), // a peek (quantity 0) is never limited and spends nothing
    ];
    let mut pipe = redis::pipe();
    pipe.atomic();
    for (args, _) in cases {
        let mut command = cmd("CL.THROTTLE");
        command.arg("user123");
        for w in args.split_whitespace() {
            command.arg(w);
        }
        pipe.add_command(command);
    }
    let replies: Vec<Vec<i64>> = pipe.query(&mut c).unwrap();
    for ((args, want), got) in cases.iter().zip(&replies) {
        assert_eq!(got, &want.to_vec(), "CL.THROTTLE user123 {args}");
    }
    // redis-cell's README: 30 per 60 s with a burst of 15 → capacity 16.
    assert_eq!(throttle(&mut c, "readme 15 30 60"), vec![0, 16, 15, -1, 2]);
}

#[test]
fn a_key_written_by_redis_cell_carries_over() {
    let s = Server::start();
    let mut c = s.conn();
    let t: Vec<u64> = cmd("TIME").query(&mut c).unwrap();
    let now_ns = (t[0] * 1_000_000 + t[1]) * 1000;
    // redis-cell stored a TAT 3 s ahead for a 1-per-second limit of 5: 2 left.
    let tat = now_ns + 3_000_000_000;
    let _: () = cmd("SET")
        .arg("cell")
        .arg(tat.to_string())
        .arg("PX")
        .arg(3000)
        .query(&mut c)
        .unwrap();
    let r = throttle(&mut c, "cell 4 1 1 0");
    assert_eq!((r[0], r[2], r[4]), (0, 2, 3));
    let kind: String = cmd("TYPE").arg("cell").query(&mut c).unwrap();
    assert_eq!(kind, "string", "a peek converts nothing");
    let r = throttle(&mut c, "cell 4 1 1");
    assert_eq!((r[0], r[2]), (0, 1));
    let kind: String = cmd("TYPE").arg("cell").query(&mut c).unwrap();
    assert_eq!(
        kind, "rllimiter",
        "the first admission stores the native type"
    );
    assert_eq!(throttle(&mut c, "cell 4 1 1")[2], 0);
    assert_eq!(throttle(&mut c, "cell 4 1 1")[0], 1);
}

#[test]
fn absurd_arguments_are_errors_not_answers() {
    let s = Server::start();
    let mut c = s.conn();
    let _: () = cmd("SET").arg("text").arg("hello").query(&mut c).unwrap();
    let cases: &[(&[&[u8]], &str)] = &[
        (
            &[b"k", b"-1", b"1", b"1"],
            "ERR max_burst must be in the range [0, 999999999999999]",
        ),
        (
            &[b"k", b"1", b"0", b"1"],
            "ERR count must be in the range [1, 1000000000000000]",
        ),
        (
            &[b"k", b"1", b"-5", b"1"],
            "ERR count must be in the range [1, 1000000000000000]",
        ),
        (
            &[b"k", b"1", b"1", b"0"],
            "ERR period must be in the range [1, 315360000]",
        ),
        (&[b"k", b"1", b"1", b"1s"], "ERR period must be an integer"),
        (
            &[b"k", b"1", b"1", b"1", b"-1"],
            "ERR quantity must be in the range [0, 1000000000000000]",
        ),
        (
            &[b"k", b"9223372036854775807", b"1", b"1"],
            "ERR max_burst must be in the range [0, 999999999999999]",
        ),
        (
            &[b"k", b"1000", b"1", b"315360000"],
            "ERR capacity / limit * period (the time to refill the capacity) must be at most 3650d",
        ),
        (
            &[b"text", b"1", b"1", b"1"],
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
    ];
    for (args, want) in cases {
        let mut full: Vec<&[u8]> = vec![b"CL.THROTTLE"];
        full.extend_from_slice(args);
        assert_eq!(&error_of(&mut c, &full), want, "{args:?}");
    }
    let e = error_of(&mut c, &[b"CL.THROTTLE", b"k", b"1", b"1"]);
    assert!(e.starts_with("ERR wrong number of arguments"), "{e}");
    let n: i64 = cmd("EXISTS").arg("k").query(&mut c).unwrap();
    assert_eq!(n, 0);
}

#[test]
fn replies_are_an_array_in_resp3_too() {
    let s = Server::start();
    let mut c = s.conn3();
    let v: Value = cmd("CL.THROTTLE")
        .arg("k")
        .arg(1)
        .arg(1)
        .arg(1)
        .query(&mut c)
        .unwrap();
    assert!(matches!(v, Value::Array(_)), "{v:?}");
}

#[test]
fn conversion_replicates_as_state() {
    let primary = Server::start();
    let replica = Server::start();
    replica.replicate_from(&primary);
    let mut c = primary.conn();
    let _: () = cmd("SET").arg("cell").arg("1").query(&mut c).unwrap();
    throttle(&mut c, "cell 4 1 60");
    wait_for_sync(&primary, &replica);
    let mut r = replica.conn();
    assert_eq!(digest(&mut c, b"cell"), digest(&mut r, b"cell"));
    let kind: String = cmd("TYPE").arg("cell").query(&mut r).unwrap();
    assert_eq!(kind, "rllimiter");
}
