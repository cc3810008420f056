//! `RL.ALLOCATE`, the home store's allocation of a global rule's limit, through a real server:
//! the core's worked numbers, leases and forgetting, refusals that change nothing, the effects a
//! replica and the AOF receive, and the script mode answering as the module on the same calls.

// Test code stops at its first surprise: all of it, not only the `#[test]` functions that
// clippy.toml covers, may unwrap, expect, panic and index.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::thread::sleep;
use std::time::Duration;

use common::*;
use rl_testkit as common;
mod script_mode;

use script_mode::{load_script, module_call, script_call};

const TERMS: &str = "RESERVE 1000 REGIONS 3";

fn words(line: &str) -> Vec<String> {
    line.split_whitespace().map(str::to_string).collect()
}

/// `RL.ALLOCATE key 10000 <report> RESERVE 1000 REGIONS 3 [extra]`: allocation, lease_ms,
/// region_demand, total_demand.
fn allocate(c: &mut Connection, key: &str, report: &str, extra: &str) -> Vec<i64> {
    let line = format!("RL.ALLOCATE {key} 10000 {report} {TERMS} {extra}");
    module_call(c, &words(&line)).map_or_else(
        |e| panic!("{line}: {e}"),
        |v| redis::from_redis_value(&v).unwrap(),
    )
}

/// The key's records, sorted by field, each as (field, [demand, seen_ms, granted, held]).
fn records(c: &mut Connection, key: &str) -> Vec<(String, Vec<u64>)> {
    let mut all: Vec<(String, String)> = cmd("HGETALL").arg(key).query(c).unwrap();
    all.sort();
    all.into_iter()
        .map(|(f, v)| (f, v.split(' ').map(|n| n.parse().unwrap()).collect()))
        .collect()
}

fn server_ms(c: &mut Connection) -> u64 {
    let (secs, micros): (u64, u64) = cmd("TIME").query(c).unwrap();
    secs * 1000 + micros / 1000
}

fn pexpiretime(c: &mut Connection, key: &str) -> i64 {
    cmd("PEXPIRETIME").arg(key).query(c).unwrap()
}

/// The core's worked example, three regions sharing 10,000 with 1,000 held back: first the
/// grants capped by what the others hold, then the pool shared 2:1:0 above the floors once
/// each says it holds its grant.
#[test]
fn the_worked_numbers_through_the_command() {
    let s = Server::start();
    let mut c = s.conn();
    let k = "{t:atlas}:alloc";
    let before = server_ms(&mut c);
    assert_eq!(
        allocate(&mut c, k, "eu g1 6000 150", ""),
        [8700, 10000, 6000, 6000]
    );
    assert_eq!(
        allocate(&mut c, k, "us g1 3000 150", ""),
        [1150, 10000, 3000, 9000]
    );
    assert_eq!(
        allocate(&mut c, k, "ap g1 0 150", ""),
        [150, 10000, 0, 9000]
    );
    assert_eq!(
        allocate(&mut c, k, "eu g1 6000 8700", ""),
        [5850, 10000, 6000, 9000]
    );
    // Until eu says it holds its smaller grant (its answer may have been lost), the home counts
    // it at what it held: us stays capped.
    assert_eq!(
        allocate(&mut c, k, "us g1 3000 1150", ""),
        [1150, 10000, 3000, 9000]
    );
    assert_eq!(
        allocate(&mut c, k, "eu g1 6000 5850", ""),
        [5850, 10000, 6000, 9000]
    );
    assert_eq!(
        allocate(&mut c, k, "us g1 3000 1150", ""),
        [3000, 10000, 3000, 9000]
    );
    assert_eq!(
        allocate(&mut c, k, "ap g1 0 150", ""),
        [150, 10000, 0, 9000]
    );
    let after = server_ms(&mut c);
    // Each reporter's record: its demand, when it was seen, its grant and what it held.
    let recs = records(&mut c, k);
    let fields: Vec<&str> = recs.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(fields, ["ap g1", "eu g1", "us g1"]);
    for ((_, r), (demand, granted, held)) in
        recs.iter()
            .zip([(0, 150, 150), (6000, 5850, 5850), (3000, 3000, 1150)])
    {
        assert_eq!((r[0], r[2], r[3]), (demand, granted, held));
        assert!((before..=after).contains(&r[1]), "seen_ms {r:?}");
    }
    // The key lives ten leases after its last report.
    let last = recs.iter().map(|(_, r)| r[1]).max().unwrap();
    assert_eq!(pexpiretime(&mut c, k), (last + 100_000) as i64);
    let v = allocate(&mut c, k, "eu g2 3000 0", "");
    // A second gateway of eu adds to its region's demand: eu's live demand is now 9,000 of
    // 12,000, below the cap that us's 3,000 and ap's floor leave.
    assert_eq!(v, [150 + 8550 * 9000 / 12000, 10000, 9000, 12000]);
    assert_eq!(v[0], 6562);
}

/// A reporter silent past its lease counts at the smaller of its grant and the safe share, and
/// its demand no more; silent for ten leases it is deleted and its region counts at the floor.
#[test]
fn a_silent_reporter_is_counted_down_then_forgotten() {
    let s = Server::start();
    let mut c = s.conn();
    let k = "alloc:silent";
    let lease = "LEASE 300ms";
    let t0 = server_ms(&mut c);
    assert_eq!(allocate(&mut c, k, "eu g1 9000 0", lease)[0], 8700);
    let us = allocate(&mut c, k, "us g1 9000 0", lease);
    assert!(
        server_ms(&mut c) < t0 + 300,
        "the machine is too slow for this test"
    );
    assert_eq!(us, [1150, 300, 9000, 18000]);
    sleep(Duration::from_millis(600));
    // eu counts at the safe share (3,000) and no demand: us gets its whole target, capped.
    assert_eq!(
        allocate(&mut c, k, "us g1 9000 1150", lease),
        [10000 - 3000 - 150, 300, 9000, 9000]
    );
    assert_eq!(records(&mut c, k).len(), 2);
    sleep(Duration::from_millis(2700));
    // eu's record is 3.3 s old: forgotten, deleted, and its region at the floor.
    assert_eq!(
        allocate(&mut c, k, "us g1 9000 6850", lease),
        [150 + 8550, 300, 9000, 9000]
    );
    let fields: Vec<String> = records(&mut c, k).into_iter().map(|(f, _)| f).collect();
    assert_eq!(fields, ["us g1"]);
}

/// Every key with its dump and absolute expiry.
fn snapshot(c: &mut Connection) -> Vec<(String, Vec<u8>, i64)> {
    let mut keys: Vec<String> = cmd("KEYS").arg("*").query(c).unwrap();
    keys.sort();
    keys.into_iter()
        .map(|k| {
            let dump: Vec<u8> = cmd("DUMP").arg(&k).query(c).unwrap();
            let at = pexpiretime(c, &k);
            (k, dump, at)
        })
        .collect()
}

/// Every refusal names its argument (or the key's problem) and changes nothing: same keys,
/// same dumps, same expiries.
#[test]
fn bad_input_changes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    allocate(&mut c, "a", "eu g1 600 150", "");
    let _: () = cmd("SET").arg("str").arg("x").query(&mut c).unwrap();
    admit(&mut c, "lim 10 1h");
    let _: () = cmd("HSET")
        .arg("foreign")
        .arg("eu g1")
        .arg("1 2 3")
        .query(&mut c)
        .unwrap();
    let _: () = cmd("HSET")
        .arg("plain")
        .arg("a")
        .arg("1")
        .query(&mut c)
        .unwrap();
    let wrongtype = "WRONGTYPE Operation against a key holding the wrong kind of value";
    let foreign =
        "ERR key holds a hash that is not an allocation record: use another key, or DEL this one";
    let names = "must be 1 to 64 bytes of letters, digits, '-', '_', '.' and ':'";
    let long = "g".repeat(65);
    let cases: Vec<(String, String)> = vec![
        (
            "a 10000 eu g1 600".into(),
            "ERR wrong number of arguments for 'RL.ALLOCATE' command".into(),
        ),
        (
            "a 0 eu g1 600 150".into(),
            "ERR limit must be in the range [1, 1000000000000000]".into(),
        ),
        (
            "a x eu g1 600 150".into(),
            "ERR limit must be an integer".into(),
        ),
        (
            "a 10000 e/u g1 600 150".into(),
            format!("ERR region {names}"),
        ),
        (
            format!("a 10000 eu {long} 600 150"),
            format!("ERR reporter {names}"),
        ),
        (
            "a 10000 eu g1 1000000000001 150".into(),
            "ERR demand must be in the range [0, 1000000000000]".into(),
        ),
        (
            "a 10000 eu g1 600 -1".into(),
            "ERR held must be in the range [0, 1000000000000000]".into(),
        ),
        (
            "a 10000 eu g1 600 150 RESERVE 10000".into(),
            "ERR RESERVE must be in the range [0, 9999]".into(),
        ),
        (
            "a 10000 eu g1 600 150 REGIONS 65".into(),
            "ERR REGIONS must be in the range [1, 64]".into(),
        ),
        (
            "a 10000 eu g1 600 150 LEASE 2d".into(),
            "ERR LEASE must be between 1ms and 1d".into(),
        ),
        (
            "a 10000 eu g1 600 150 LEASE 10".into(),
            "ERR LEASE needs a unit: add ms, s, m, h or d (for example 10s)".into(),
        ),
        (
            "a 10000 eu g1 600 150 LEASE".into(),
            "ERR LEASE needs a value".into(),
        ),
        (
            "a 10000 eu g1 600 150 REGIONS 2 REGIONS 2".into(),
            "ERR REGIONS given more than once".into(),
        ),
        (
            "a 10000 eu g1 600 150 WANT 2".into(),
            "ERR syntax error near 'WANT'".into(),
        ),
        ("str 10000 eu g1 600 150".into(), wrongtype.into()),
        ("lim 10000 eu g1 600 150".into(), wrongtype.into()),
        ("foreign 10000 eu g2 600 150".into(), foreign.into()),
        ("plain 10000 eu g2 600 150".into(), foreign.into()),
    ];
    let before = snapshot(&mut c);
    for (line, want) in &cases {
        let args = words(&format!("RL.ALLOCATE {line}"));
        let err = module_call(&mut c, &args).expect_err(line);
        // The server words its own arity check with the command in lower case.
        let got = error_text(&err).replace("'rl.allocate'", "'RL.ALLOCATE'");
        assert_eq!(&got, want, "{line}");
        assert_eq!(snapshot(&mut c), before, "{line} changed something");
    }
}

/// A key keeps at most 256 reporters: the 257th is refused and nothing changes; one already
/// known is still answered.
#[test]
fn a_full_key_refuses_a_new_reporter() {
    let s = Server::start();
    let mut c = s.conn();
    let mut pipe = redis::pipe();
    for i in 0..256 {
        pipe.cmd("RL.ALLOCATE")
            .arg("full")
            .arg(1_000_000)
            .arg("eu")
            .arg(format!("g{i}"))
            .arg(1)
            .arg(0)
            .ignore();
    }
    let () = pipe.query(&mut c).unwrap();
    let before = snapshot(&mut c);
    let err = module_call(&mut c, &words("RL.ALLOCATE full 1000000 eu new 1 0")).unwrap_err();
    assert_eq!(
        error_text(&err),
        "ERR the key keeps 256 reporters already: a new one is refused until one is forgotten"
    );
    assert_eq!(snapshot(&mut c), before);
    module_call(&mut c, &words("RL.ALLOCATE full 1000000 eu g7 1 0")).unwrap();
}

#[test]
fn resp3_replies_a_map() {
    let s = Server::start();
    let mut c = s.conn3();
    let v: Value = module_call(
        &mut c,
        &words(&format!("RL.ALLOCATE m 10000 eu g1 6000 150 {TERMS}")),
    )
    .unwrap();
    let Value::Map(fields) = v else {
        panic!("expected a map, got {v:?}")
    };
    let got: Vec<(String, i64)> = fields
        .iter()
        .map(|(k, v)| {
            (
                redis::from_redis_value(k).unwrap(),
                redis::from_redis_value(v).unwrap(),
            )
        })
        .collect();
    let want = [
        ("allocation", 8700),
        ("lease_ms", 10000),
        ("region_demand", 6000),
        ("total_demand", 6000),
    ];
    assert_eq!(got, want.map(|(n, v)| (n.to_string(), v)));
}

/// The AOF's text, every file of it.
fn aof_text(dir: &std::path::Path) -> String {
    let mut text = String::new();
    for entry in std::fs::read_dir(dir.join("appendonlydir")).unwrap() {
        let path = entry.unwrap().path();
        text.push_str(&String::from_utf8_lossy(&std::fs::read(path).unwrap()));
    }
    text
}

/// A replica and the AOF receive the effects (`HSET`, `HDEL` of the forgotten, an absolute
/// `PEXPIREAT`), never the command: the replica's hash and expiry are the primary's, and a
/// reload from the AOF, before and after a rewrite, keeps both.
#[test]
fn replicas_and_the_aof_keep_the_primary_hash_and_expiry() {
    let mut primary = Server::start_with(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--aof-use-rdb-preamble",
        "no",
    ]);
    let replica = Server::start();
    replica.replicate_from(&primary);
    let mut c = primary.conn();
    let k = "{t:atlas}:alloc";
    // Leases of 100 ms: eu is forgotten a second after its report, while us keeps the key
    // (which lives a second after the last report).
    allocate(&mut c, k, "eu g1 6000 150", "LEASE 100ms");
    sleep(Duration::from_millis(600));
    allocate(&mut c, k, "us g1 3000 150", "LEASE 100ms");
    sleep(Duration::from_millis(600));
    allocate(&mut c, k, "us g1 3000 1150", "LEASE 100ms");
    // Then under a longer lease, so the key outlives the restarts below.
    allocate(&mut c, k, "us g1 3000 1150", "LEASE 1h");
    let fields: Vec<String> = records(&mut c, k).into_iter().map(|(f, _)| f).collect();
    assert_eq!(fields, ["us g1"], "eu forgotten");
    let state = |c: &mut Connection| (digest(c, k.as_bytes()), pexpiretime(c, k));
    let want = state(&mut c);
    assert!(want.1 > server_ms(&mut c) as i64 + 9 * 3_600_000);
    wait_for_sync(&primary, &replica);
    assert_eq!(state(&mut replica.conn()), want, "the replica");
    let aof = aof_text(&primary.dir);
    assert!(
        !aof.contains("RL.ALLOCATE"),
        "the command itself was logged"
    );
    for effect in ["HSET", "HDEL", "PEXPIREAT"] {
        assert!(aof.contains(effect), "no {effect} in the AOF");
    }
    drop(replica);
    primary.restart(false, &[]);
    assert_eq!(state(&mut primary.conn()), want, "loaded from the effects");
    let _: () = cmd("BGREWRITEAOF").query(&mut primary.conn()).unwrap();
    wait_until(30, "the AOF rewrite", || {
        let info: String = cmd("INFO")
            .arg("persistence")
            .query(&mut primary.conn())
            .unwrap();
        info.contains("aof_rewrite_in_progress:0") && !info.contains("aof_rewrite_scheduled:1")
    });
    primary.restart(false, &[]);
    assert_eq!(state(&mut primary.conn()), want, "loaded from the rewrite");
}

// ---------------------------------------------------------------------------------------------
// The script mode, side by side with the module.

struct Pair {
    _module: Server,
    _plain: Server,
    m: Connection,
    p: Connection,
    sha: String,
}

impl Pair {
    fn start() -> Pair {
        let module = Server::start();
        let plain = Server::start_plain(&[]);
        let (m, mut p) = (module.conn(), plain.conn());
        let sha = load_script(&mut p);
        Pair {
            _module: module,
            _plain: plain,
            m,
            p,
            sha,
        }
    }

    /// Sends `args` to both; asserts the replies (values or error texts) are the same.
    fn same(&mut self, args: &[String]) -> Result<Value, String> {
        let text = |r: redis::RedisResult<Value>| r.map_err(|e| error_text(&e));
        let m = text(module_call(&mut self.m, args))
            .map_err(|e| e.replace("'rl.allocate'", "'RL.ALLOCATE'"));
        let p = text(script_call(&mut self.p, &self.sha, args));
        assert_eq!(m, p, "{}", args.join(" "));
        m
    }

    /// Both keys hold the same records, but for the times they were seen (a few ms apart), and
    /// expire within a second of each other.
    fn same_key(&mut self, key: &str) {
        let strip = |r: Vec<(String, Vec<u64>)>| -> Vec<(String, u64, u64, u64)> {
            r.into_iter().map(|(f, v)| (f, v[0], v[2], v[3])).collect()
        };
        let (m, p) = (records(&mut self.m, key), records(&mut self.p, key));
        for ((_, a), (_, b)) in m.iter().zip(&p) {
            assert!(a[1].abs_diff(b[1]) < 1000, "seen_ms {a:?} {b:?}");
        }
        assert_eq!(strip(m), strip(p), "{key}");
        let (a, b) = (pexpiretime(&mut self.m, key), pexpiretime(&mut self.p, key));
        assert!(a.abs_diff(b) < 1000, "expiry {a} {b}");
    }
}

/// Random reports, with limits up to 10^15 and demands up to 10^12 (where a double would
/// round), and every kind of bad argument: the script replies, refuses and records as the
/// module does.
#[test]
fn script_mode_answers_as_the_module() {
    let mut pair = Pair::start();
    let mut rng = Rng(0x5eed_a110c);
    let limits: [u64; 5] = [1, 7, 10_000, 999_999_999_999_989, 1_000_000_000_000_000];
    let demands = ["0", "1", "3", "6000", "999999999999", "1000000000000"];
    let junk = [
        "-1",
        "x",
        "",
        "RESERVE",
        "LEASE",
        "0ms",
        "2d",
        "65",
        "e/u",
        "1000000000001",
    ];
    let regions = ["eu", "us", "ap", "sa", "af"];
    let (mut answered, mut largest) = (0, 0);
    for round in 0..600 {
        let limit = limits[round / 120];
        let reserve = limit * [0, 1, 10, 99][rng.below(4) as usize] / 100;
        let mut args = words(&format!(
            "RL.ALLOCATE k{} {limit} {} g{} {} {} RESERVE {reserve} REGIONS {}",
            rng.below(4),
            regions[rng.below(5) as usize],
            rng.below(3),
            demands[rng.below(demands.len() as u64) as usize],
            rng.below(limit + 1),
            1 + rng.below(4),
        ));
        if rng.below(20) == 0 {
            // One argument broken, or an option cut short.
            let at = 2 + rng.below(args.len() as u64 - 1) as usize;
            if at < args.len() {
                args[at] = junk[rng.below(junk.len() as u64) as usize].into();
            } else {
                args.push("LEASE".into());
            }
        }
        if let Ok(v) = pair.same(&args) {
            answered += 1;
            largest = largest.max(redis::from_redis_value::<Vec<i64>>(&v).unwrap()[0]);
        }
    }
    assert!(answered > 450, "{answered} of 600 answered");
    assert!(
        largest > 100_000_000_000_000,
        "the largest allocation was {largest}"
    );
    for k in 0..4 {
        pair.same_key(&format!("k{k}"));
    }
}

/// Leases running out and reporters forgotten, in both modes; foreign hashes, other types and
/// a full key refused alike; and a home moved between the modes with its hash as it is.
#[test]
fn script_mode_leases_forgetting_and_refusals_match_the_module() {
    let mut pair = Pair::start();
    let call = |line: &str| words(&format!("RL.ALLOCATE {line} {TERMS} LEASE 300ms"));
    let ints = |v: Value| redis::from_redis_value::<Vec<i64>>(&v).unwrap();
    assert_eq!(
        ints(pair.same(&call("f 10000 eu g1 9000 0")).unwrap())[0],
        8700
    );
    assert_eq!(
        ints(pair.same(&call("f 10000 us g1 9000 0")).unwrap())[0],
        1150
    );
    sleep(Duration::from_millis(800));
    // eu is past its lease: at the safe share, its demand no more.
    let v = pair.same(&call("f 10000 us g1 9000 1150")).unwrap();
    assert_eq!(ints(v), [6850, 300, 9000, 9000]);
    sleep(Duration::from_millis(2600));
    // eu is forgotten (3.4 s), us past its lease (2.6 s): ap has all the live demand, capped by
    // us's safe share and eu's floor.
    let v = pair.same(&call("f 10000 ap g1 10 0")).unwrap();
    assert_eq!(ints(v), [10000 - 3000 - 150, 300, 10, 10]);
    pair.same_key("f");
    assert_eq!(records(&mut pair.m, "f").len(), 2, "eu forgotten");

    for c in [&mut pair.m, &mut pair.p] {
        let _: () = cmd("SET").arg("str").arg("x").query(c).unwrap();
        let _: () = cmd("HSET")
            .arg("h")
            .arg("eu g1")
            .arg("1 2 3 +4")
            .query(c)
            .unwrap();
    }
    assert!(pair
        .same(&call("str 10000 eu g 1 1"))
        .unwrap_err()
        .starts_with("WRONGTYPE"));
    assert!(pair
        .same(&call("h 10000 eu g 1 1"))
        .unwrap_err()
        .contains("not an allocation record"));
    for i in 0..256 {
        pair.same(&words(&format!("RL.ALLOCATE full 1000000 eu g{i} 1 0")))
            .unwrap();
    }
    assert!(pair
        .same(&words("RL.ALLOCATE full 1000000 eu new 1 0"))
        .unwrap_err()
        .contains("256 reporters"));

    // The module's hash, copied as it is to the script's server (and back), answers the same.
    let moved: Vec<(String, String)> = cmd("HGETALL").arg("f").query(&mut pair.m).unwrap();
    for (f, v) in &moved {
        let _: () = cmd("HSET")
            .arg("moved")
            .arg(f)
            .arg(v)
            .query(&mut pair.p)
            .unwrap();
        let _: () = cmd("HSET")
            .arg("moved")
            .arg(f)
            .arg(v)
            .query(&mut pair.m)
            .unwrap();
    }
    let v = pair.same(&call("moved 10000 eu g1 100 150")).unwrap();
    assert_eq!(ints(v)[2], 100);
}
