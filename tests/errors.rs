//! Every bad input gets an error reply, changes nothing, and never crashes the server —
//! including the inputs that abort Redis under redis-cell today.

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

fn err(c: &mut Connection, line: &str) -> String {
    let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
    error_of(c, &args)
}

#[test]
fn bad_arguments_name_the_rule_they_broke() {
    let s = Server::start();
    let mut c = s.conn();
    let cases: &[(&str, &str)] = &[
        (
            "RL.ADMIT",
            "ERR wrong number of arguments for 'RL.ADMIT' command",
        ),
        (
            "RL.ADMIT k",
            "ERR wrong number of arguments for 'RL.ADMIT' command",
        ),
        (
            "RL.ADMIT k 10",
            "ERR wrong number of arguments for 'RL.ADMIT' command",
        ),
        (
            "RL.ADMIT k 10 10",
            "ERR period needs a unit: add ms, s, m, h or d (for example 10s)",
        ),
        (
            "RL.ADMIT k 10 s",
            "ERR period must be a positive integer followed by ms, s, m, h or d (for example 10s)",
        ),
        (
            "RL.ADMIT k 10 1w",
            "ERR period must be a positive integer followed by ms, s, m, h or d (for example 10s)",
        ),
        (
            "RL.ADMIT k 10 0s",
            "ERR period must be between 1ms and 3650d",
        ),
        (
            "RL.ADMIT k 10 -1s",
            "ERR period must be a positive integer followed by ms, s, m, h or d (for example 10s)",
        ),
        (
            "RL.ADMIT k 10 9223372036854775807ms",
            "ERR period must be between 1ms and 3650d",
        ),
        (
            "RL.ADMIT k 10 99999999999999999999999d",
            "ERR period must be between 1ms and 3650d",
        ),
        (
            "RL.ADMIT k 0 1s",
            "ERR limit must be in the range [1, 1000000000000000]",
        ),
        (
            "RL.ADMIT k -1 1s",
            "ERR limit must be in the range [1, 1000000000000000]",
        ),
        (
            "RL.ADMIT k 9223372036854775807 1s",
            "ERR limit must be in the range [1, 1000000000000000]",
        ),
        (
            "RL.ADMIT k 9223372036854775808 1s",
            "ERR limit must be in the range [1, 1000000000000000]",
        ),
        ("RL.ADMIT k 1.5 1s", "ERR limit must be an integer"),
        ("RL.ADMIT k  1s", "ERR limit must be an integer"),
        (
            "RL.ADMIT k 10 1s BURST 0",
            "ERR BURST must be in the range [1, 1000000000000000]",
        ),
        ("RL.ADMIT k 10 1s BURST", "ERR BURST needs a value"),
        (
            "RL.ADMIT k 10 1s COST 11",
            "ERR COST 11 exceeds the capacity 10: such a request could never be admitted",
        ),
        (
            "RL.ADMIT k 10 1s COST -3",
            "ERR COST must be in the range [1, 1000000000000000]",
        ),
        ("RL.ADMIT k 10 1s ALGO", "ERR ALGO needs a value"),
        (
            "RL.ADMIT k 10 1s ALGO fixed",
            "ERR ALGO must be one of gcra, bucket, window, sliding, log (got 'fixed')",
        ),
        (
            "RL.ADMIT k 10 1s COST 1 COST 1",
            "ERR COST given more than once",
        ),
        ("RL.ADMIT k 10 1s NOPE", "ERR syntax error near 'NOPE'"),
        (
            "RL.ADMIT k 10 1s \u{1F600}",
            "ERR syntax error near '\\xf0\\x9f\\x98\\x80'",
        ),
        (
            "RL.ADMIT k 1 10d BURST 10000",
            "ERR capacity / limit * period (the time to refill the capacity) must be at most 3650d",
        ),
    ];
    for (line, want) in cases {
        let got = err(&mut c, line);
        if want.starts_with("ERR wrong number") {
            // The server checks the declared arity itself, in its own words.
            assert!(
                got.starts_with("ERR wrong number of arguments"),
                "{line}: {got}"
            );
        } else {
            assert_eq!(&got, want, "{line}");
        }
    }
    let keys: Vec<String> = cmd("KEYS").arg("*").query(&mut c).unwrap();
    assert!(keys.is_empty(), "an error created keys: {keys:?}");
}

#[test]
fn other_types_get_wrongtype_and_stay_untouched() {
    let s = Server::start();
    let mut c = s.conn();
    let _: () = cmd("RPUSH").arg("list").arg("a").query(&mut c).unwrap();
    let _: () = cmd("SET").arg("empty").arg("").query(&mut c).unwrap();
    let _: () = cmd("SET")
        .arg("text")
        .arg("not a number")
        .query(&mut c)
        .unwrap();
    let _: () = cmd("SET")
        .arg("num")
        .arg("1764000000000000000")
        .query(&mut c)
        .unwrap();
    let _: () = cmd("HSET")
        .arg("hash")
        .arg("f")
        .arg("v")
        .query(&mut c)
        .unwrap();
    for key in ["list", "empty", "text", "num", "hash"] {
        let e = err(&mut c, &format!("RL.ADMIT {key} 10 1s"));
        assert!(e.starts_with("WRONGTYPE"), "{key}: {e}");
    }
    let v: String = cmd("GET").arg("text").query(&mut c).unwrap();
    assert_eq!(v, "not a number");
    let n: i64 = cmd("LLEN").arg("list").query(&mut c).unwrap();
    assert_eq!(n, 1);
}

#[test]
fn an_error_leaves_an_existing_key_unchanged() {
    let s = Server::start();
    let mut c = s.conn();
    admit(&mut c, "k 10 1m COST 3");
    let before = digest(&mut c, b"k");
    for line in [
        "RL.ADMIT k 10 1m COST 11",
        "RL.ADMIT k 10 1m BURST 5 COST 6",
        "RL.ADMIT k 10 1m ALGO window",
        "RL.ADMIT k 10 1m bogus",
    ] {
        err(&mut c, line);
        assert_eq!(digest(&mut c, b"k"), before, "{line}");
    }
}

#[test]
fn setstate_refuses_payloads_that_do_not_decode() {
    let s = Server::start();
    let mut c = s.conn();
    for payload in [&b""[..], b"\x01", b"\x09\x00", b"garbage", &[0xff; 64]] {
        let e = error_of(&mut c, &[b"RL.SETSTATE", b"k", payload]);
        assert!(e.starts_with("ERR invalid limiter state payload"), "{e}");
    }
    let e = error_of(&mut c, &[b"RL.SETSTATE", b"k", b"x", b"k2"]);
    assert!(e.starts_with("ERR wrong number of arguments"), "{e}");
    // All or nothing: a bad second payload leaves the first key unwritten. A valid payload:
    // version 2, gcra, 1 per hour, TAT 90 minutes from now (in debt), no reservations.
    let t: Vec<u64> = cmd("TIME").query(&mut c).unwrap();
    let tat = (t[0] + 5_400) * 1_000_000;
    let mut good = vec![2u8, 0];
    for v in [1u64, 3_600_000_000, 1] {
        good.extend_from_slice(&v.to_le_bytes());
    }
    good.extend_from_slice(&i128::from(tat).to_le_bytes());
    good.extend_from_slice(&0u32.to_le_bytes());
    let e = error_of(&mut c, &[b"RL.SETSTATE", b"a", &good, b"b", b"junk"]);
    assert!(e.starts_with("ERR invalid limiter state payload"), "{e}");
    let keys: Vec<String> = cmd("KEYS").arg("*").query(&mut c).unwrap();
    assert!(keys.is_empty());
    let _: () = cmd("RL.SETSTATE")
        .arg("a")
        .arg(&good)
        .query(&mut c)
        .unwrap();
    assert!(
        pttl(&mut c, b"a") > 5_300_000,
        "a good payload is taken, expiring when full"
    );
}

fn pick<'a>(rng: &mut Rng, items: &[&'a [u8]]) -> &'a [u8] {
    items[rng.below(items.len() as u64) as usize]
}

#[test]
fn random_argument_lists_never_crash_the_server() {
    let mut s = Server::start();
    let mut c = s.conn();
    let _: () = cmd("RPUSH").arg("list").arg("a").query(&mut c).unwrap();
    let words: &[&[u8]] = &[
        b"1",
        b"0",
        b"-1",
        b"2",
        b"20",
        b"1000000000000000",
        b"1000000000000001",
        b"9223372036854775807",
        b"9223372036854775808",
        b"-9223372036854775808",
        b"18446744073709551616",
        b"1s",
        b"0s",
        b"1ms",
        b"3650d",
        b"3651d",
        b"10",
        b"s",
        b"",
        b"BURST",
        b"COST",
        b"ALGO",
        b"DRYRUN",
        b"gcra",
        b"bucket",
        b"window",
        b"sliding",
        b"log",
        b"burst",
        b"\xff\xfe",
        b"\x00",
        b"1\x00s",
        b"k",
        b"list",
        b"PXAT",
        b"99999999999999999999d",
    ];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for i in 0..3000 {
        let mut command = cmd(if i % 10 == 0 {
            "RL.SETSTATE"
        } else {
            "RL.ADMIT"
        });
        let key: &[u8] = if rng.next().is_multiple_of(4) {
            b"list"
        } else {
            b"k"
        };
        command.arg(key);
        for _ in 0..(rng.next() % 9) {
            command.arg(pick(&mut rng, words));
        }
        let _ = command.query::<Value>(&mut c);
    }
    assert!(s.alive(), "the server died; log:\n{}", s.log());
    let pong: String = cmd("PING").query(&mut c).unwrap();
    assert_eq!(pong, "PONG");
}
