//! The native type through RDB, AOF (with and without the RDB preamble), DUMP/RESTORE, COPY,
//! MEMORY USAGE and DEBUG DIGEST-VALUE; corrupt and truncated payloads are refused.

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

/// Builds keys of both algorithms in several states, returns their names.
fn populate(c: &mut Connection) -> Vec<String> {
    let mut keys = Vec::new();
    for i in 0..30 {
        let algo = ["gcra", "bucket", "window", "sliding", "log"][i % 5];
        let key = format!("p:{algo}:{i}");
        let burst = if i % 5 < 2 { " BURST 50" } else { "" };
        for _ in 0..3 {
            admit(c, &format!("{key} 50 1h{burst} COST {} ALGO {algo}", 1 + i));
        }
        keys.push(key);
    }
    for i in 0..5 {
        let key = format!("p:sem:{i}");
        for h in 0..=i {
            let _: Value = cmd("RL.ACQUIRE")
                .arg(&key)
                .arg(10)
                .arg("1h")
                .arg("ID")
                .arg(format!("holder-{h}"))
                .query(c)
                .unwrap();
        }
        keys.push(key);
        let key = format!("p:res:{i}");
        for r in 0..=i {
            admit(c, &format!("{key} 5 1h BURST 50 COST 2 RESERVE r{r}"));
        }
        let _: Value = cmd("RL.SETTLE")
            .arg(&key)
            .arg("r0")
            .arg(7)
            .query(c)
            .unwrap();
        keys.push(key);
    }
    keys
}

fn snapshot(c: &mut Connection, keys: &[String]) -> Vec<(String, i64)> {
    keys.iter()
        .map(|k| (digest(c, k.as_bytes()), pttl(c, k.as_bytes())))
        .collect()
}

fn assert_same(before: &[(String, i64)], after: &[(String, i64)]) {
    assert_eq!(before.len(), after.len());
    for (b, a) in before.iter().zip(after) {
        assert_eq!(b.0, a.0, "digest changed");
        assert!(
            a.1 > 0 && (b.1 - a.1).abs() < 5_000,
            "ttl {} became {}",
            b.1,
            a.1
        );
    }
}

#[test]
fn debug_reload_keeps_state_and_ttl() {
    let s = Server::start();
    let mut c = s.conn();
    let keys = populate(&mut c);
    let before = snapshot(&mut c, &keys);
    let _: () = cmd("DEBUG").arg("RELOAD").query(&mut c).unwrap();
    assert_same(&before, &snapshot(&mut c, &keys));
}

#[test]
fn restart_from_rdb_keeps_state() {
    let mut s = Server::start();
    let keys = populate(&mut s.conn());
    let before = snapshot(&mut s.conn(), &keys);
    s.restart(true, &[]);
    assert_same(&before, &snapshot(&mut s.conn(), &keys));
}

fn aof_round_trip(preamble: &str) {
    let mut s = Server::start_with(&["--appendonly", "yes", "--aof-use-rdb-preamble", preamble]);
    let mut c = s.conn();
    let keys = populate(&mut c);
    // The effects as logged, then a rewrite, then more effects on top of it.
    let _: () = cmd("BGREWRITEAOF").query(&mut c).unwrap();
    loop {
        let info: String = cmd("INFO").arg("persistence").query(&mut c).unwrap();
        if info.contains("aof_rewrite_in_progress:0") && !info.contains("aof_rewrite_scheduled:1") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    admit(&mut c, "p:gcra:0 1 1h BURST 50 COST 7");
    let before = snapshot(&mut c, &keys);
    s.restart(false, &[]);
    assert_same(&before, &snapshot(&mut s.conn(), &keys));
}

#[test]
fn aof_with_rdb_preamble_keeps_state() {
    aof_round_trip("yes");
}

#[test]
fn aof_without_rdb_preamble_keeps_state() {
    aof_round_trip("no");
}

/// The commands of the AOF's incremental files, each as its arguments (RESP arrays of bulk
/// strings, binary-safe).
fn aof_commands(dir: &std::path::Path) -> Vec<Vec<Vec<u8>>> {
    let mut aof = Vec::new();
    for entry in std::fs::read_dir(dir.join("appendonlydir")).expect("aof dir") {
        let path = entry.unwrap().path();
        if path.to_string_lossy().ends_with(".incr.aof") {
            aof.extend(std::fs::read(path).unwrap());
        }
    }
    let mut rest = &aof[..];
    let line = |rest: &mut &[u8], prefix: u8| -> usize {
        let end = find(rest, b"\r\n");
        assert_eq!(rest[0], prefix, "{}", String::from_utf8_lossy(rest));
        let n = std::str::from_utf8(&rest[1..end]).unwrap().parse().unwrap();
        *rest = &rest[end + 2..];
        n
    };
    let mut out = Vec::new();
    while !rest.is_empty() {
        let argc = line(&mut rest, b'*');
        let mut args = Vec::with_capacity(argc);
        for _ in 0..argc {
            let len = line(&mut rest, b'$');
            args.push(rest[..len].to_vec());
            rest = &rest[len + 2..];
        }
        out.push(args);
    }
    out
}

/// `RL.SETTLE ... FORGET` is logged as the forget time the primary set (a microsecond after
/// the settlement), so an AOF load forgets the reservation too, before and after a rewrite.
#[test]
fn a_forgotten_reservation_stays_forgotten_after_an_aof_load() {
    let mut s = Server::start_with(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--aof-use-rdb-preamble",
        "no",
    ]);
    let mut c = s.conn();
    let key = "idem:t7";
    // 10 an hour, capacity 100: nothing refills while the test runs.
    let rule = "10 1h BURST 100 COST 10";
    let settle = |c: &mut Connection, id: &str, actual: u64, forget: bool| {
        let mut command = cmd("RL.SETTLE");
        command.arg(key).arg(id).arg(actual);
        if forget {
            command.arg("FORGET");
        }
        command.query::<Option<(i64, i64)>>(c).unwrap()
    };
    assert_eq!(admit(&mut c, &format!("{key} {rule} RESERVE k1"))[1], 90);
    assert_eq!(settle(&mut c, "k1", 14, true), Some((4, 86)));
    assert_eq!(admit(&mut c, &format!("{key} {rule} RESERVE k2"))[1], 76);
    assert_eq!(settle(&mut c, "k2", 3, false), Some((-7, 83)));
    assert_eq!(settle(&mut c, "k2", 3, true), Some((-7, 83)));
    // Each change is one RL.RESERVESET: the two that forget set expires_us to now_us + 1 µs.
    let forgets: Vec<(bool, usize)> = aof_commands(&s.dir)
        .iter()
        .filter(|a| a[0].eq_ignore_ascii_case(b"RL.RESERVESET"))
        .map(|a| {
            let n = |i: usize| -> u64 { String::from_utf8_lossy(&a[i]).parse().unwrap() };
            (n(5) == n(3) + 1, a.len())
        })
        .collect();
    assert_eq!(
        forgets,
        [(false, 9), (true, 11), (false, 9), (false, 11), (true, 11)],
        "(expires_us is now_us + 1, arguments) of each"
    );
    let state = |c: &mut Connection| -> (String, i64) {
        let at: i64 = cmd("PEXPIRETIME").arg(key).query(c).unwrap();
        (digest(c, key.as_bytes()), at)
    };
    let before = state(&mut c);
    // From the logged effects, then from a rewrite (RL.SETSTATE of the whole key).
    s.restart(false, &[]);
    assert_eq!(state(&mut s.conn()), before, "loaded from the effects");
    let _: () = cmd("BGREWRITEAOF").query(&mut s.conn()).unwrap();
    wait_until(30, "the AOF rewrite", || {
        let info: String = cmd("INFO").arg("persistence").query(&mut s.conn()).unwrap();
        info.contains("aof_rewrite_in_progress:0") && !info.contains("aof_rewrite_scheduled:1")
    });
    s.restart(false, &[]);
    let mut c = s.conn();
    assert_eq!(state(&mut c), before, "loaded from the rewrite");
    assert_eq!(settle(&mut c, "k1", 14, false), None);
    assert_eq!(settle(&mut c, "k2", 3, false), None);
    assert_eq!(admit(&mut c, &format!("{key} {rule} RESERVE k1"))[1], 73);
    assert_eq!(admit(&mut c, &format!("{key} {rule} RESERVE k2"))[1], 63);
}

/// `RL.INFO`'s `entries` of a `log` key (0 when the key does not exist).
fn log_entries(c: &mut Connection, key: &str) -> u64 {
    let v: Value = cmd("RL.INFO").arg(key).query(c).unwrap();
    let Value::Array(items) = v else {
        assert_eq!(v, Value::Nil, "{key}");
        return 0;
    };
    let at = items
        .iter()
        .position(|i| redis::from_redis_value::<String>(i).ok().as_deref() == Some("entries"))
        .unwrap_or_else(|| panic!("{key}: no entries in {items:?}"));
    redis::from_redis_value(&items[at + 1]).unwrap()
}

/// With `appendfsync always` Redis writes and fsyncs the AOF before it sends any reply, so a
/// `kill -9` under traffic forgets no acknowledged admission: every key holds at least the
/// admissions its client saw acknowledged, and at most one more per client (the one in flight).
/// Three crashes, each after a second and a half of traffic from four clients on 40 keys.
#[test]
fn kill_9_with_appendfsync_always_forgets_no_acknowledged_admission() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    const CLIENTS: usize = 4;
    const KEYS: usize = 10;
    let mut s = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut acked = vec![vec![0u64; KEYS]; CLIENTS];
    for round in 0..3 {
        let started = Arc::new(AtomicBool::new(false));
        let clients: Vec<_> = (0..CLIENTS)
            .map(|t| {
                let mut c = s.conn();
                let started = Arc::clone(&started);
                std::thread::spawn(move || {
                    let mut acked = vec![0u64; KEYS];
                    for i in 0.. {
                        let k = i % KEYS;
                        let reply: redis::RedisResult<Vec<i64>> = cmd("RL.ADMIT")
                            .arg(format!("k:{t}:{k}"))
                            .arg(10000)
                            .arg("1d")
                            .arg("ALGO")
                            .arg("log")
                            .query(&mut c);
                        // The server is gone.
                        let Ok(reply) = reply else { break };
                        assert_eq!(reply[0], 1, "k:{t}:{k} refused: {reply:?}");
                        acked[k] += 1;
                        started.store(true, Ordering::Relaxed);
                    }
                    acked
                })
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(1500));
        assert!(
            started.load(Ordering::Relaxed),
            "no admission in round {round}"
        );
        s.crash_and_restart(&[]);
        for (t, client) in clients.into_iter().enumerate() {
            let seen = client.join().expect("a client panicked");
            for (k, n) in seen.into_iter().enumerate() {
                acked[t][k] += n;
            }
        }
        let mut c = s.conn();
        for (t, keys) in acked.iter_mut().enumerate() {
            let mut extra = 0;
            for (k, want) in keys.iter_mut().enumerate() {
                let held = log_entries(&mut c, &format!("k:{t}:{k}"));
                assert!(
                    held >= *want,
                    "round {round}: k:{t}:{k} holds {held} admissions, {want} were acknowledged"
                );
                extra += held - *want;
                // The unacknowledged one that reached the AOF counts from now on.
                *want = held;
            }
            assert!(
                extra <= 1,
                "round {round}: client {t} has {extra} unacknowledged"
            );
        }
    }
    let total: u64 = acked.iter().flatten().sum();
    assert!(total > 100, "only {total} admissions in three rounds");
}

#[test]
fn dump_restore_copy_and_memory_usage() {
    let s = Server::start();
    let mut c = s.conn();
    admit(&mut c, "src 2 1s BURST 20 COST 7");
    let d = digest(&mut c, b"src");
    let dump: Vec<u8> = cmd("DUMP").arg("src").query(&mut c).unwrap();
    // The digest covers whether a TTL is set, so restore with one.
    let _: () = cmd("RESTORE")
        .arg("dst")
        .arg(60_000)
        .arg(&dump)
        .query(&mut c)
        .unwrap();
    assert_eq!(digest(&mut c, b"dst"), d);
    let copied: i64 = cmd("COPY").arg("src").arg("cpy").query(&mut c).unwrap();
    assert_eq!(copied, 1);
    assert_eq!(digest(&mut c, b"cpy"), d);
    assert!(pttl(&mut c, b"cpy") > 0, "COPY keeps the TTL");
    // The copy is independent: spending it leaves the source alone.
    admit(&mut c, "cpy 2 1s BURST 20 COST 5");
    assert_eq!(digest(&mut c, b"src"), d);
    let usage: i64 = cmd("MEMORY").arg("USAGE").arg("src").query(&mut c).unwrap();
    assert!((40..=200).contains(&usage), "MEMORY USAGE {usage}");
    let info: String = cmd("INFO").arg("rl").query(&mut c).unwrap();
    assert!(info.contains("rl_keys_gcra:3"), "{info}");
}

/// Replaces a DUMP payload's body and recomputes its checksum, so only the module sees the
/// damage.
fn reseal(body: &[u8], rdb_version: &[u8]) -> Vec<u8> {
    let mut out = body.to_vec();
    out.extend_from_slice(rdb_version);
    let crc = crc64(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

fn find(haystack: &[u8], needle: &[u8]) -> usize {
    haystack
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("pattern in payload")
}

#[test]
fn corrupt_and_truncated_restore_payloads_are_refused() {
    // Uncompressed, so the test can find and damage our bytes inside the payload.
    let mut s = Server::start_with(&["--rdbcompression", "no"]);
    let mut c = s.conn();
    admit(&mut c, "src 12345 1s BURST 20000 COST 7");
    let dump: Vec<u8> = cmd("DUMP").arg("src").query(&mut c).unwrap();
    assert_eq!(
        crc64(b"123456789"),
        0xe9c6_d914_c4b8_d9ca,
        "CRC implementation"
    );
    let (body, tail) = dump.split_at(dump.len() - 10);
    let version = &tail[..2];
    assert_eq!(
        reseal(body, version),
        dump,
        "resealing an intact payload changes nothing"
    );
    // Our payload: version 2, algorithm 0, limit 12345 little-endian.
    let at = find(body, &[2, 0, 0x39, 0x30, 0, 0, 0, 0, 0, 0]);
    let mut broken: Vec<(String, Vec<u8>)> = Vec::new();
    let mut zero_limit = body.to_vec();
    zero_limit[at + 2] = 0;
    zero_limit[at + 3] = 0;
    broken.push(("limit 0".into(), reseal(&zero_limit, version)));
    let mut bad_version = body.to_vec();
    bad_version[at] = 99;
    broken.push(("unknown encoding".into(), reseal(&bad_version, version)));
    let mut bad_algo = body.to_vec();
    bad_algo[at + 1] = 42;
    broken.push(("unknown algorithm".into(), reseal(&bad_algo, version)));
    // One byte short, with the string length adjusted so only our decoder notices.
    let mut short = body.to_vec();
    short[at - 1] -= 1;
    short.remove(at + 10);
    broken.push(("short payload".into(), reseal(&short, version)));
    // Cut inside the module data: the server's reader runs out of bytes.
    for cut in [body.len() - 1, body.len() - 5, at + 3, at - 1, 12, 3] {
        broken.push((format!("cut at {cut}"), reseal(&body[..cut], version)));
    }
    for (what, payload) in broken {
        let r = cmd("RESTORE")
            .arg("dst")
            .arg(0)
            .arg(&payload)
            .query::<Value>(&mut c);
        assert!(r.is_err(), "{what}: accepted");
        assert!(s.alive(), "{what}: crashed the server; log:\n{}", s.log());
        let exists: i64 = cmd("EXISTS").arg("dst").query(&mut c).unwrap();
        assert_eq!(exists, 0, "{what}: left a key");
    }
    let _: () = cmd("RESTORE")
        .arg("dst")
        .arg(0)
        .arg(&dump)
        .query(&mut c)
        .unwrap();
    assert!(s.alive());
    drop(c);
    s.restart(false, &[]);
}

fn unhex(s: &str) -> Vec<u8> {
    let s = s.trim();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Payloads written by version 1 load in every later release.
#[test]
fn frozen_version_1_payloads_still_load() {
    let s = Server::start();
    let mut c = s.conn();
    let dump = unhex(include_str!("fixtures/gcra-v1.dump.hex"));
    let _: () = cmd("RESTORE")
        .arg("b")
        .arg(0)
        .arg(&dump)
        .query(&mut c)
        .unwrap();
    let info: Vec<Value> = cmd("RL.INFO").arg("b").query(&mut c).unwrap();
    let fields: Vec<String> = info
        .iter()
        .map(|v| redis::from_redis_value::<String>(v).unwrap())
        .collect();
    let field = |name: &str| {
        let i = fields.iter().position(|f| f == name).unwrap();
        fields[i + 1].clone()
    };
    assert_eq!(field("algo"), "gcra");
    assert_eq!(field("limit"), "2");
    assert_eq!(field("period_ms"), "1000");
    assert_eq!(field("capacity"), "20");
    assert_eq!(field("tat_us"), "1764000003623456");
}

/// Version 2 payloads (a semaphore with leases, a gcra key with a settled reservation) load and
/// re-encode byte for byte.
#[test]
fn frozen_version_2_payloads_still_load() {
    let s = Server::start();
    let mut c = s.conn();
    for (key, file, algo) in [
        (
            "sem",
            include_str!("fixtures/semaphore-v2.dump.hex"),
            "semaphore",
        ),
        (
            "res",
            include_str!("fixtures/reserved-gcra-v2.dump.hex"),
            "gcra",
        ),
    ] {
        let dump = unhex(file);
        let _: () = cmd("RESTORE")
            .arg(key)
            .arg(0)
            .arg(&dump)
            .query(&mut c)
            .unwrap();
        let info: Vec<Value> = cmd("RL.INFO").arg(key).query(&mut c).unwrap();
        let first: String = redis::from_redis_value(&info[1]).unwrap();
        assert_eq!(first, algo);
        let again: Vec<u8> = cmd("DUMP").arg(key).query(&mut c).unwrap();
        // The last 10 bytes are the server's RDB version and checksum, which differ by server.
        assert_eq!(
            again[..again.len() - 10],
            dump[..dump.len() - 10],
            "{key} changed"
        );
    }
}
