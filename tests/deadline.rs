//! `DEADLINE unix-ms` on the spending commands: past it by the server's clock, a call changes
//! nothing (no key read, created or written), propagates nothing to a replica or the AOF, and
//! answers `DEADLINE ...`; on or before it, the call is the same call without the option. The
//! deadlines are written from the server's own `TIME`, the clock the commands decide with.

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

/// The server's clock in milliseconds since the Unix epoch.
fn server_ms(c: &mut Connection) -> u64 {
    let (secs, micros): (u64, u64) = cmd("TIME").query(c).unwrap();
    secs * 1000 + micros / 1000
}

/// One call of each spending command on `key` (an `RL.MULTI` on `key` and a second key of its
/// slot), with `DEADLINE` when `deadline` is given.
fn spending_calls(key: &str, deadline: Option<u64>) -> Vec<Vec<String>> {
    let w = |s: &str| s.split(' ').map(str::to_string).collect::<Vec<_>>();
    let mut calls = vec![
        w(&format!("RL.ADMIT {key}:a 10 1h BURST 20 COST 3")),
        w(&format!(
            "RL.ADMIT {key}:r 10 1h COST 2 RESERVE job-1 KEEP 10m"
        )),
        w(&format!("RL.ADMIT {key}:w 10 1m ALGO window DRYRUN")),
        w(&format!(
            "RL.MULTI 2 {{{key}}}:u {{{key}}}:t RULE user 5 1h RULE tenant 100 1m ALGO sliding"
        )),
        w(&format!(
            "RL.GRANT {key}:g 100 1s BURST 1000 WANT 40 TTL 1s"
        )),
        w(&format!("RL.ACQUIRE {key}:s 3 1m ID holder-1")),
    ];
    if let Some(ms) = deadline {
        for call in &mut calls {
            call.extend(["DEADLINE".to_string(), ms.to_string()]);
        }
    }
    calls
}

fn run(c: &mut Connection, call: &[String]) -> redis::RedisResult<Value> {
    let mut command = cmd(&call[0]);
    for a in &call[1..] {
        command.arg(a);
    }
    command.query(c)
}

/// Every key of the database with what a state comparison needs: its digest and absolute
/// expiry.
fn everything(c: &mut Connection) -> Vec<(String, String, i64)> {
    let mut keys: Vec<String> = cmd("KEYS").arg("*").query(c).unwrap();
    keys.sort();
    keys.into_iter()
        .map(|k| {
            let expiry: i64 = cmd("PEXPIRETIME").arg(&k).query(c).unwrap();
            (k.clone(), digest(c, k.as_bytes()), expiry)
        })
        .collect()
}

/// `RL.INFO` of a key without the fields that hold an instant or a wait from now.
fn timeless_info(c: &mut Connection, key: &str) -> Vec<(String, Value)> {
    let info: Vec<Value> = cmd("RL.INFO").arg(key).query(c).unwrap();
    let timed = [
        "tat_us",
        "updated_us",
        "reset_after_ms",
        "ttl_ms",
        "next_expiry_ms",
        "window_start_ms",
    ];
    info.chunks(2)
        .map(|pair| {
            (
                redis::from_redis_value::<String>(&pair[0]).unwrap(),
                pair[1].clone(),
            )
        })
        .filter(|(name, _)| !timed.contains(&name.as_str()))
        .collect()
}

/// Takes the waits out of a spending command's reply (each replaced by 0) and returns them:
/// `retry_after_ms` and `reset_after_ms` of `RL.ADMIT`, `valid_ms` and `retry_after_ms` of
/// `RL.GRANT`, `retry_after_ms` of `RL.ACQUIRE`, and of `RL.MULTI` its `retry_after_ms` and
/// each rule's `reset_after_ms`.
fn waits(command: &str, reply: &mut Value) -> Vec<i64> {
    fn take(v: &mut Value) -> i64 {
        match std::mem::replace(v, Value::Int(0)) {
            Value::Int(n) => n,
            other => panic!("a wait that is not an integer: {other:?}"),
        }
    }
    let Value::Array(fields) = reply else {
        panic!("not an array: {reply:?}")
    };
    let positions: &[usize] = match command {
        "RL.ADMIT" | "RL.GRANT" => &[2, 3],
        "RL.ACQUIRE" => &[3],
        "RL.MULTI" => &[2],
        other => panic!("not a spending command: {other}"),
    };
    let mut out: Vec<i64> = positions.iter().map(|&i| take(&mut fields[i])).collect();
    if command == "RL.MULTI" {
        let Value::Array(rules) = &mut fields[3] else {
            panic!("no rules: {fields:?}")
        };
        for rule in rules {
            let Value::Array(record) = rule else {
                panic!("a rule that is not an array: {rule:?}")
            };
            out.push(take(&mut record[2]));
        }
    }
    out
}

fn counters(c: &mut Connection) -> Vec<(String, String)> {
    let info: String = cmd("INFO").arg("rl").query(c).unwrap();
    info.lines()
        .filter(|l| l.contains("_admitted:") || l.contains("_refused:"))
        .map(|l| l.split_once(':').unwrap())
        .map(|(a, b)| (a.to_string(), b.trim().to_string()))
        .collect()
}

fn repl_offset(c: &mut Connection) -> i64 {
    info_field(c, "replication", "master_repl_offset")
        .and_then(|v| v.parse().ok())
        .unwrap()
}

fn late_text(e: &redis::RedisError) -> String {
    let text = error_text(e);
    assert!(
        text.starts_with("DEADLINE the call reached the server ")
            && text.ends_with("ms after its deadline; it changed nothing"),
        "{text}"
    );
    text
}

#[test]
fn a_late_call_changes_nothing_on_new_and_existing_keys() {
    let s = Server::start();
    let mut c = s.conn();
    // On fresh keys: none is created.
    let past = server_ms(&mut c) - 5000;
    for call in spending_calls("fresh", Some(past)) {
        let e = run(&mut c, &call).unwrap_err();
        let text = late_text(&e);
        // The server's clock is 5 s past the deadline, give or take the test's own time.
        let late: u64 = text
            .strip_prefix("DEADLINE the call reached the server ")
            .and_then(|t| t.split("ms").next())
            .unwrap()
            .parse()
            .unwrap();
        assert!((5000..15_000).contains(&late), "{text}");
    }
    assert_eq!(everything(&mut c), vec![]);

    // On keys that exist: their states and expiries stay as they were, and so do the
    // decisions counted (a late call counts as a call only).
    for call in spending_calls("old", None) {
        run(&mut c, &call).unwrap();
    }
    let before = everything(&mut c);
    assert_eq!(before.len(), 6, "{before:?}"); // the window key was a dry run
    let counted = counters(&mut c);
    let calls_before = info_field(&mut c, "rl", "rl_admit_calls").unwrap();
    let past = server_ms(&mut c) - 1;
    for call in spending_calls("old", Some(past)) {
        late_text(&run(&mut c, &call).unwrap_err());
    }
    assert_eq!(everything(&mut c), before);
    assert_eq!(counters(&mut c), counted);
    let calls_after = info_field(&mut c, "rl", "rl_admit_calls").unwrap();
    assert_eq!(
        calls_after.parse::<u64>().unwrap(),
        calls_before.parse::<u64>().unwrap() + 3
    );
    // Redis counts the replies by their code.
    let stat = info_field(&mut c, "errorstats", "errorstat_DEADLINE").unwrap();
    assert_eq!(stat, "count=12", "{stat}");

    // A late call on a key of another type answers DEADLINE: the key is not read.
    let _: () = cmd("SET").arg("str").arg("x").query(&mut c).unwrap();
    let e = run(
        &mut c,
        &["RL.ADMIT", "str", "1", "1s", "DEADLINE", "1"].map(String::from),
    )
    .unwrap_err();
    late_text(&e);
}

#[test]
fn a_call_on_time_is_the_call_without_a_deadline() {
    let s = Server::start();
    let mut c = s.conn();
    let soon = server_ms(&mut c) + 10_000;
    for (with, without) in spending_calls("on", Some(soon))
        .into_iter()
        .zip(spending_calls("off", None))
    {
        let (a, b) = (run(&mut c, &with).unwrap(), run(&mut c, &without).unwrap());
        let (mut a, mut b) = (a, b);
        // The waits may differ by the milliseconds between the calls: an `ALGO window` wait runs
        // to the window's end, so it is one shorter when a millisecond passed in between.
        for (x, y) in waits(&with[0], &mut a)
            .into_iter()
            .zip(waits(&with[0], &mut b))
        {
            assert!((x - y).abs() <= 50, "{with:?}: {x} {y}");
        }
        assert_eq!(a, b, "{with:?}");
    }
    let all = everything(&mut c);
    assert_eq!(all.len(), 12, "{all:?}");
    let on = all.iter().filter(|(k, _, _)| k.contains("on"));
    let off = all.iter().filter(|(k, _, _)| k.contains("off"));
    for ((k1, _, e1), (k2, _, e2)) in on.zip(off) {
        assert_eq!(k1.replace("on", "off"), *k2);
        // The states, but for the instants in them (the calls ran microseconds apart).
        assert_eq!(timeless_info(&mut c, k1), timeless_info(&mut c, k2), "{k1}");
        // Written within the same few milliseconds.
        assert!((e1 - e2).abs() < 1000, "{k1}: {e1} {e2}");
    }
    // The deadline itself, to the millisecond: the server's clock may equal it.
    let now = server_ms(&mut c) + 50;
    admit(&mut c, &format!("edge 10 1s DEADLINE {now}"));
}

#[test]
fn a_late_call_propagates_nothing_and_an_applied_one_its_effect_only() {
    let primary = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let replica = Server::start();
    replica.replicate_from(&primary);
    let mut c = primary.conn();
    for call in spending_calls("k", None) {
        run(&mut c, &call).unwrap();
    }
    wait_for_sync(&primary, &replica);
    let aof = || {
        let mut aof = Vec::new();
        for entry in std::fs::read_dir(primary.dir.join("appendonlydir")).unwrap() {
            let path = entry.unwrap().path();
            if path.to_string_lossy().ends_with(".incr.aof") {
                aof.extend(std::fs::read(path).unwrap());
            }
        }
        String::from_utf8_lossy(&aof).into_owned()
    };
    let (offset, written) = (repl_offset(&mut c), aof());
    let past = server_ms(&mut c) - 1000;
    for call in spending_calls("k", Some(past)) {
        late_text(&run(&mut c, &call).unwrap_err());
    }
    // Inside a script, a late call fails alone and the script propagates only the rest.
    let script = "local late = redis.pcall('RL.ADMIT', KEYS[1], 5, '1h', 'DEADLINE', ARGV[1]) \
                  local on_time = redis.call('RL.ADMIT', KEYS[2], 5, '1h', 'DEADLINE', ARGV[2]) \
                  return {late['err'], on_time[1]}";
    let (late, admitted): (String, i64) = cmd("EVAL")
        .arg(script)
        .arg(2)
        .arg(&["t1", "t2"])
        .arg(past)
        .arg(past + 60_000)
        .query(&mut c)
        .unwrap();
    assert!(
        late.starts_with("DEADLINE the call reached the server"),
        "{late}"
    );
    assert_eq!(admitted, 1);
    let exists: i64 = cmd("EXISTS").arg("t1").query(&mut c).unwrap();
    assert_eq!(exists, 0);
    assert!(repl_offset(&mut c) > offset);
    let text = aof();
    let new = &text[written.len()..];
    assert_eq!(new.matches("RL.SETSTATE").count(), 1, "{new}");
    assert!(!new.contains("t1"), "{new}");
    assert!(!new.contains("DEADLINE"), "{new}");

    // Only what was applied reaches the replica, and without its deadline: the replica holds
    // exactly the primary's keys.
    let soon = server_ms(&mut c) + 10_000;
    for call in spending_calls("n", Some(soon)) {
        run(&mut c, &call).unwrap();
    }
    wait_for_sync(&primary, &replica);
    let mut r = replica.conn();
    assert_eq!(everything(&mut r), everything(&mut c));
    assert!(!aof().contains("DEADLINE"));
    let keys: Vec<String> = cmd("KEYS").arg("t1").query(&mut r).unwrap();
    assert!(keys.is_empty());
}

#[test]
fn a_bad_deadline_is_an_error_that_changes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    let now = server_ms(&mut c);
    let ahead = (now + 3_600_000 + 60_000).to_string();
    let micros = (now * 1000).to_string();
    let cases: [(&[&str], &str); 9] = [
        (
            &["RL.ADMIT", "k", "1", "1s", "DEADLINE"],
            "ERR DEADLINE needs a value",
        ),
        (
            &["RL.ADMIT", "k", "1", "1s", "DEADLINE", "soon"],
            "ERR DEADLINE must be a Unix time in milliseconds (an integer)",
        ),
        (
            &["RL.ADMIT", "k", "1", "1s", "DEADLINE", "-1"],
            "ERR DEADLINE must be a Unix time in milliseconds (an integer)",
        ),
        (
            &["RL.ADMIT", "k", "1", "1s", "DEADLINE", "1", "DEADLINE", "1"],
            "ERR DEADLINE given more than once",
        ),
        (
            &["RL.ADMIT", "k", "1", "1s", "DEADLINE", micros.as_str()],
            "ERR DEADLINE is more than 1h after the server's clock: it is a Unix time in milliseconds",
        ),
        (
            &["RL.MULTI", "1", "k", "RULE", "x", "1", "1s", "DEADLINE", ahead.as_str()],
            "ERR DEADLINE is more than 1h after the server's clock: it is a Unix time in milliseconds",
        ),
        (
            &["RL.GRANT", "k", "1", "1s", "WANT", "1", "DEADLINE", "9223372036854775808"],
            "ERR DEADLINE must be a Unix time in milliseconds (an integer)",
        ),
        (
            &["RL.ACQUIRE", "k", "1", "1s", "DEADLINE", "1", "ID"],
            "ERR ID needs a value",
        ),
        // An argument error comes first, even past the deadline.
        (
            &["RL.ADMIT", "k", "1", "1", "DEADLINE", "1"],
            "ERR period needs a unit: add ms, s, m, h or d (for example 10s)",
        ),
    ];
    for (args, want) in cases {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        assert_eq!(error_of(&mut c, &args), want, "{args:?}");
    }
    // The release, renewal and settlement take no deadline: they free, however late.
    for args in [
        &["RL.RELEASE", "k", "h", "DEADLINE", "1"][..],
        &["RL.RENEW", "k", "h", "1s", "DEADLINE", "1"],
        &["RL.SETTLE", "k", "id", "1", "DEADLINE", "1"],
    ] {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        let e = error_of(&mut c, &args);
        assert!(e.starts_with("ERR"), "{e}");
    }
    assert_eq!(everything(&mut c), vec![]);
}
