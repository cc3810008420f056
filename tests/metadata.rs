//! What the server reports about the module: MODULE LIST, COMMAND INFO/DOCS/GETKEYS, INFO rl.

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

fn flatten(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Array(items) | Value::Set(items) => items.iter().for_each(|i| flatten(i, out)),
        Value::Map(pairs) => pairs.iter().for_each(|(k, v)| {
            flatten(k, out);
            flatten(v, out);
        }),
        other => {
            if let Ok(s) = redis::from_redis_value::<String>(other) {
                out.push(s);
            }
        }
    }
}

fn words(c: &mut Connection, args: &[&str]) -> Vec<String> {
    let mut command = cmd(args[0]);
    for a in &args[1..] {
        command.arg(*a);
    }
    let v: Value = command.query(c).unwrap();
    let mut out = Vec::new();
    flatten(&v, &mut out);
    out
}

#[test]
fn module_is_listed_as_rl() {
    let s = Server::start();
    let w = words(&mut s.conn(), &["MODULE", "LIST"]);
    assert!(w.contains(&"rl".to_string()), "{w:?}");
}

#[test]
fn command_info_has_flags_and_key_positions() {
    let s = Server::start();
    let mut c = s.conn();
    let w = words(&mut c, &["COMMAND", "INFO", "RL.ADMIT"]);
    for flag in ["write", "denyoom", "fast"] {
        assert!(w.contains(&flag.to_string()), "{flag} missing from {w:?}");
    }
    let keys: Vec<String> = cmd("COMMAND")
        .arg("GETKEYS")
        .arg("RL.ADMIT")
        .arg("user:17")
        .arg(10)
        .arg("1s")
        .arg("BURST")
        .arg(20)
        .query(&mut c)
        .unwrap();
    assert_eq!(keys, vec!["user:17"]);
}

#[test]
fn command_docs_describe_every_argument() {
    let s = Server::start();
    let w = words(&mut s.conn(), &["COMMAND", "DOCS", "RL.ADMIT"]);
    for expected in [
        "Admits or refuses one request against a rate limit, atomically.",
        "limit",
        "period",
        "BURST",
        "COST",
        "ALGO",
        "gcra",
        "bucket",
        "DRYRUN",
    ] {
        assert!(
            w.contains(&expected.to_string()),
            "{expected} missing from {w:?}"
        );
    }
    for (command, arg) in [
        ("RL.MULTI", "numkeys"),
        ("RL.MULTI", "RULE"),
        ("RL.INFO", "key"),
        ("CL.THROTTLE", "max_burst"),
        ("CL.THROTTLE", "quantity"),
    ] {
        let w = words(&mut s.conn(), &["COMMAND", "DOCS", command]);
        assert!(w.contains(&"summary".to_string()), "{command}: {w:?}");
        assert!(w.contains(&"complexity".to_string()), "{command}: {w:?}");
        assert!(w.contains(&arg.to_string()), "{command} lacks {arg}: {w:?}");
    }
    let w = words(&mut s.conn(), &["COMMAND", "DOCS", "RL.SETSTATE"]);
    assert!(w.contains(&"payload".to_string()), "{w:?}");
}

#[test]
fn info_section_counts_calls_and_keys() {
    let s = Server::start();
    let mut c = s.conn();
    admit(&mut c, "a 1 1h");
    admit(&mut c, "a 1 1h");
    admit(&mut c, "b 1 1h ALGO bucket");
    let _ = error_of(&mut c, &[b"RL.ADMIT", b"a", b"1", b"1"]);
    let info: String = cmd("INFO").arg("rl").query(&mut c).unwrap();
    for line in [
        "rl_admit_calls:4",
        "rl_admit_admitted:2",
        "rl_admit_refused:1",
        "rl_keys_gcra:1",
        "rl_keys_bucket:1",
    ] {
        assert!(info.contains(line), "{line} missing from {info}");
    }
    // Switching a key between gcra and bucket moves it between the counts.
    admit(&mut c, "c 5 1h ALGO bucket");
    admit(&mut c, "c 5 1h ALGO gcra");
    let info: String = cmd("INFO").arg("rl").query(&mut c).unwrap();
    assert!(
        info.contains("rl_keys_gcra:2") && info.contains("rl_keys_bucket:1"),
        "{info}"
    );
    let _: () = cmd("FLUSHALL").arg("SYNC").query(&mut c).unwrap();
    let info: String = cmd("INFO").arg("rl").query(&mut c).unwrap();
    assert!(info.contains("rl_keys_gcra:0"), "{info}");
}

#[test]
fn writes_are_refused_when_out_of_memory() {
    let s = Server::start();
    let mut c = s.conn();
    let _: () = cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(1)
        .query(&mut c)
        .unwrap();
    let e = error_of(&mut c, &[b"RL.ADMIT", b"k", b"1", b"1s"]);
    assert!(e.starts_with("OOM"), "{e}");
}
