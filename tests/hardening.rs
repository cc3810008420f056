//! What a hostile user, an operator and a clock can do: states no command could write are
//! refused, every state a command can write saves and loads back, hints are honest after the
//! clock steps back, and a value that fails to load says why in the server's log.

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

use std::time::{SystemTime, UNIX_EPOCH};

const S: u64 = 1_000_000;

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_micros() as u64
}

/// A version-2 payload (see `src/state/codec.rs`): header, the algorithm's state, reservations.
fn payload(algo: u8, limit: u64, period_us: u64, burst: u64, state: &[u8], res: &[u8]) -> Vec<u8> {
    let mut p = vec![2, algo];
    for v in [limit, period_us, burst] {
        p.extend_from_slice(&v.to_le_bytes());
    }
    p.extend_from_slice(state);
    p.extend_from_slice(res);
    p
}

fn words(values: &[u64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn no_reservations() -> Vec<u8> {
    0u32.to_le_bytes().to_vec()
}

fn window(count: u64, start: u64) -> Vec<u8> {
    payload(2, 10, S, 10, &words(&[start, count]), &no_reservations())
}

fn setstate(c: &mut Connection, key: &str, p: &[u8]) -> redis::RedisResult<()> {
    cmd("RL.SETSTATE").arg(key).arg(p).query(c)
}

#[test]
fn crafted_states_no_command_could_write_are_refused_naming_the_field() {
    let s = Server::start();
    let mut c = s.conn();
    let now = now_us();
    let aligned = now - now % S;
    let year = 365 * 86_400 * S;
    let gcra_tat = |tat: i128| payload(0, 10, S, 10, &tat.to_le_bytes(), &no_reservations());
    let mut bucket_state = words(&[u64::MAX - 5]);
    bucket_state.extend_from_slice(&(10i128 * S as i128).to_le_bytes());
    let sliding = |previous: u64, current: u64| {
        payload(
            3,
            10,
            S,
            10,
            &words(&[aligned, previous, current]),
            &no_reservations(),
        )
    };
    let mut lease = words(&[1]);
    lease.extend_from_slice(&1u32.to_le_bytes());
    lease.extend_from_slice(&1u16.to_le_bytes());
    lease.push(b'h');
    lease.extend_from_slice(&u64::MAX.to_le_bytes());
    let mut reservation = 1u32.to_le_bytes().to_vec();
    reservation.extend_from_slice(&1u16.to_le_bytes());
    reservation.push(b'r');
    reservation.extend_from_slice(&words(&[1, 9, 100_000, u64::MAX]));
    reservation.push(0);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "gcra TAT 1000 years ahead",
            gcra_tat(i128::from(now + 1000 * year) * 10),
            "gcra TAT is ahead of the server's clock",
        ),
        (
            "bucket counted near 2^64",
            payload(1, 10, S, 10, &bucket_state, &no_reservations()),
            "state time is ahead of the server's clock",
        ),
        (
            "window count 10^15 against a limit of 10",
            window(1_000_000_000_000_000, aligned),
            "window count is above the limit",
        ),
        (
            "window starting near 2^64",
            window(1, u64::MAX - u64::MAX % S),
            "state time is ahead of the server's clock",
        ),
        (
            "sliding previous count 2^64-1",
            sliding(u64::MAX, 0),
            "sliding previous count is above the largest limit",
        ),
        (
            "sliding current count 2^64-1",
            sliding(0, u64::MAX),
            "sliding current count is above the limit",
        ),
        (
            "lease expiring at 2^64-1",
            payload(5, 3, 60 * S, 3, &lease, &no_reservations()),
            "lease expiry is ahead of the server's clock",
        ),
        (
            "reservation forgotten at 2^64-1",
            gcra_tat(0)
                .into_iter()
                .take(42)
                .chain(reservation)
                .collect(),
            "reservation time is ahead of the server's clock",
        ),
    ];
    admit(&mut c, "k 10 1s");
    let before = digest(&mut c, b"k");
    for (what, p, why) in cases {
        let e = setstate(&mut c, "k", &p).expect_err(what);
        assert_eq!(
            error_text(&e),
            format!("ERR invalid limiter state payload: {why}"),
            "{what}"
        );
        assert_eq!(digest(&mut c, b"k"), before, "{what}: the key changed");
    }
    // Within the tolerated clock skew (1 hour), a state ahead of this clock is accepted.
    setstate(&mut c, "ahead", &window(3, aligned + 1800 * S)).expect("30 minutes ahead");
    let e = setstate(&mut c, "ahead", &window(3, aligned + 3700 * S)).unwrap_err();
    assert!(error_text(&e).ends_with("state time is ahead of the server's clock"));
}

/// The error `RL.LEASESET` answers for `line`.
fn leaseset_error(c: &mut Connection, line: &[&str]) -> String {
    let e = cmd("RL.LEASESET").arg(line).query::<()>(c).unwrap_err();
    error_text(&e)
}

/// 100,000 leases is what loading takes: a replayed lease change beyond it is refused, so the
/// key still saves and loads (it used to empty the whole database on `DEBUG RELOAD`).
#[test]
fn leaseset_stops_at_the_largest_capacity_and_the_key_reloads() {
    let s = Server::start();
    let mut c = s.conn();
    let now = now_us();
    let expiry = (now + 3600 * S).to_string();
    let now_s = now.to_string();
    for chunk in 0..10 {
        let mut pipe = redis::pipe();
        for i in chunk * 10_000..(chunk + 1) * 10_000 {
            pipe.cmd("RL.LEASESET")
                .arg(&[
                    "sem:big",
                    "3",
                    "60000000",
                    &now_s,
                    "0",
                    &format!("h{i}"),
                    &expiry,
                ])
                .ignore();
        }
        let () = pipe.query(&mut c).expect("100,000 leases are accepted");
    }
    let line = ["sem:big", "3", "60000000", &now_s, "0", "one-more", &expiry];
    assert_eq!(
        leaseset_error(&mut c, &line),
        "ERR the key keeps 100000 leases already (the largest capacity)"
    );
    let before = digest(&mut c, b"sem:big");
    let dump: Vec<u8> = cmd("DUMP").arg("sem:big").query(&mut c).unwrap();
    // With a TTL, like the original: the digest counts whether a key has one.
    let () = cmd("RESTORE")
        .arg("sem:copy")
        .arg(pttl(&mut c, b"sem:big"))
        .arg(&dump)
        .query(&mut c)
        .expect("the DUMP restores");
    assert_eq!(digest(&mut c, b"sem:copy"), before);
    let () = cmd("DEBUG").arg("RELOAD").query(&mut c).expect("reload");
    let keys: i64 = cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(keys, 2, "nothing lost on reload");
    assert_eq!(digest(&mut c, b"sem:big"), before);
    // An expiry that no lease taken at now_us could have is refused too.
    let far = (now + 3651 * 86_400 * S).to_string();
    let line = ["sem:big", "3", "60000000", &now_s, "0", "h1", &far];
    assert_eq!(
        leaseset_error(&mut c, &line),
        "ERR expiry_us must be 0 or after now_us by at most 3650d"
    );
    let ahead = (now + 2 * 3600 * S).to_string();
    let line = ["sem:x", "3", "60000000", &ahead, "0", "h1", &far];
    assert_eq!(
        leaseset_error(&mut c, &line),
        "ERR now_us is more than 1h ahead of the server's clock"
    );
}

#[test]
fn a_value_that_fails_to_load_says_why_in_the_log() {
    assert_eq!(
        crc64(b"123456789"),
        0xe9c6_d914_c4b8_d9ca,
        "the check value"
    );
    let s = Server::start();
    let mut c = s.conn();
    let now = now_us();
    let aligned = now - now % S;
    let good = window(3, aligned);
    setstate(&mut c, "w", &good).unwrap();
    // Uncompressed, so that the payload can be found and patched inside the DUMP.
    let () = cmd("CONFIG")
        .arg(&["SET", "rdbcompression", "no"])
        .query(&mut c)
        .unwrap();
    let mut dump: Vec<u8> = cmd("DUMP").arg("w").query(&mut c).unwrap();
    let at = dump
        .windows(good.len())
        .position(|w| w == good.as_slice())
        .expect("the payload inside the DUMP");
    let bad = window(11, aligned);
    dump[at..at + bad.len()].copy_from_slice(&bad);
    let body = dump.len() - 8;
    let crc = crc64(&dump[..body]).to_le_bytes();
    dump[body..].copy_from_slice(&crc);
    let e = cmd("RESTORE")
        .arg("w2")
        .arg(0)
        .arg(&dump)
        .query::<()>(&mut c)
        .unwrap_err();
    assert!(error_text(&e).contains("Bad data format"), "{e}");
    let exists: i64 = cmd("EXISTS").arg("w2").query(&mut c).unwrap();
    assert_eq!(exists, 0);
    let log = s.log();
    assert!(
        log.contains("redis-rl: cannot load a limiter: window count is above the limit"),
        "the reason is logged:\n{log}"
    );
}

#[test]
fn after_the_clock_steps_back_waiting_the_hint_is_enough() {
    let s = Server::start();
    let mut c = s.conn();
    // A window that a clock 5 s ahead filled: as if this server's clock stepped back 5 s.
    let now = now_us();
    let start = now - now % S + 5 * S;
    setstate(&mut c, "w", &window(10, start)).unwrap();
    let d = admit(&mut c, "w 10 1s ALGO window");
    assert_eq!(d[0], 0);
    // The window ends 5-6 s from now, on the key's own time line.
    assert!((5000..=6000).contains(&d[2]), "retry_after_ms {}", d[2]);
    assert!((5000..=6000).contains(&d[3]), "reset_after_ms {}", d[3]);
}

#[test]
fn multi_reports_each_rule_as_admit_dryrun_would() {
    let s = Server::start();
    let mut c = s.conn();
    admit(&mut c, "full 1 1m");
    let ok = admit(&mut c, "open 10 1m COST 3 DRYRUN");
    let v: Value = cmd("RL.MULTI")
        .arg(&["2", "open", "full", "RULE", "open", "10", "1m", "COST", "3"])
        .arg(&["RULE", "full", "1", "1m"])
        .query(&mut c)
        .unwrap();
    type Rules = Vec<(String, i64, i64)>;
    let (allowed, denied, _, rules): (i64, Option<String>, i64, Rules) =
        redis::from_redis_value(&v).unwrap();
    assert_eq!((allowed, denied.as_deref()), (0, Some("full")));
    assert_eq!(
        (rules[0].1, rules[0].2),
        (ok[1], ok[3]),
        "the admitting rule: what it would hold after spending COST"
    );
    let full = admit(&mut c, "full 1 1m DRYRUN");
    assert_eq!((rules[1].1, rules[1].2), (full[1], full[3]));
}

#[test]
fn a_retried_reserve_never_replies_more_than_the_capacity() {
    let s = Server::start();
    let mut c = s.conn();
    let first = admit(&mut c, "r 100 1h RESERVE job");
    assert_eq!((first[0], first[1], first[4]), (1, 99, 100));
    admit(&mut c, "r 100 1h BURST 5");
    let again = admit(&mut c, "r 100 1h BURST 5 RESERVE job");
    assert_eq!(again[0], 1);
    assert!(
        again[1] <= again[4],
        "remaining {} > limit {}",
        again[1],
        again[4]
    );
}

#[test]
fn an_empty_grant_says_when_to_come_back() {
    let s = Server::start();
    let mut c = s.conn();
    let g: Vec<i64> = cmd("RL.GRANT")
        .arg(&["g", "10", "1h", "WANT", "10"])
        .query(&mut c)
        .unwrap();
    assert_eq!(g, vec![10, 0, 1000, 0]);
    let g: Vec<i64> = cmd("RL.GRANT")
        .arg(&["g", "10", "1h", "WANT", "10"])
        .query(&mut c)
        .unwrap();
    assert_eq!(&g[..3], &[0, 0, 1000]);
    // One unit every 6 minutes.
    assert!(
        (359_000..=360_000).contains(&g[3]),
        "retry_after_ms {}",
        g[3]
    );
    let mut c3 = s.conn3();
    let m: std::collections::HashMap<String, i64> = cmd("RL.GRANT")
        .arg(&["g", "10", "1h", "WANT", "10"])
        .query(&mut c3)
        .unwrap();
    assert_eq!(m.len(), 4);
    assert!(m["retry_after_ms"] > 359_000, "{m:?}");
}

#[test]
fn writes_that_grow_memory_are_refused_out_of_memory() {
    let s = Server::start();
    let mut c = s.conn();
    let now = now_us();
    let line = [
        "s",
        "3",
        "60000000",
        &now.to_string(),
        "1",
        "h",
        &(now + 60 * S).to_string(),
    ];
    let () = cmd("CONFIG")
        .arg(&["SET", "maxmemory", "1"])
        .query(&mut c)
        .unwrap();
    let e = cmd("RL.LEASESET")
        .arg(&line)
        .query::<()>(&mut c)
        .unwrap_err();
    assert!(error_text(&e).starts_with("OOM"), "{e}");
    let e = setstate(&mut c, "w", &window(1, now - now % S)).unwrap_err();
    assert!(error_text(&e).starts_with("OOM"), "{e}");
    let () = cmd("CONFIG")
        .arg(&["SET", "maxmemory", "0"])
        .query(&mut c)
        .unwrap();
    let () = cmd("RL.LEASESET").arg(&line).query(&mut c).unwrap();
}

/// `RL.INFO`'s live reservation count of `key`.
fn reservations(c: &mut Connection, key: &str) -> i64 {
    let info: Vec<Value> = cmd("RL.INFO").arg(key).query(c).expect("RL.INFO");
    let at = info
        .iter()
        .position(|v| matches!(v, Value::BulkString(b) if b == b"reservations"))
        .unwrap_or_else(|| panic!("no reservations field: {info:?}"));
    match &info[at + 1] {
        Value::Int(n) => *n,
        other => panic!("reservations: {other:?}"),
    }
}

/// `RL.RESERVESET` from a client: what a primary's reserve or settle propagates applies in
/// place (forgetting what expired by its `now_us`), and what none could have written is refused,
/// changing nothing.
#[test]
fn a_replayed_reservation_change_applies_alone_and_is_checked() {
    let s = Server::start();
    let mut c = s.conn();
    let base = now_us() - 3 * 3600 * S;
    let gcra = payload(0, 10, S, 10, &0i128.to_le_bytes(), &no_reservations());
    let set = |c: &mut Connection, key: &str, now: u64, id: &str, rest: &[u64]| {
        let mut command = cmd("RL.RESERVESET");
        command.arg(key).arg(&gcra).arg(now).arg(id).arg(rest);
        command.query::<()>(c)
    };
    let hour = 3600 * S;
    set(&mut c, "k", base, "r1", &[base + hour, 1, 9, 100_000]).expect("r1");
    set(
        &mut c,
        "k",
        base + S,
        "r2",
        &[base + 2 * hour, 2, 7, 300_000],
    )
    .expect("r2");
    // Both were forgotten hours ago, so the key expired as it was written.
    let exists: i64 = cmd("EXISTS").arg("k").query(&mut c).unwrap();
    assert_eq!(exists, 0);
    let now = now_us();
    set(&mut c, "k", now, "r3", &[now + hour, 1, 9, 100_000]).expect("r3");
    assert_eq!(reservations(&mut c, "k"), 1);
    set(&mut c, "k", now, "r3", &[now + hour, 1, 9, 100_000, 0, 10]).expect("r3 settled");
    assert_eq!(reservations(&mut c, "k"), 1);

    let before = digest(&mut c, b"k");
    let mut carrying = gcra.clone();
    carrying.truncate(carrying.len() - 4);
    carrying.extend_from_slice(&1u32.to_le_bytes());
    carrying.extend_from_slice(&2u16.to_le_bytes());
    carrying.extend_from_slice(b"r9");
    carrying.extend_from_slice(&words(&[1, 9, 100_000, now + hour]));
    carrying.push(0);
    let cases: Vec<(&str, Vec<u8>, Vec<u64>, &str)> = vec![
        (
            "a window state",
            window(3, now - now % S),
            vec![now, now + hour, 1, 9, 0],
            "ERR invalid limiter state payload: a reservation goes with a gcra or bucket state without reservations",
        ),
        (
            "a payload carrying reservations",
            carrying,
            vec![now, now + hour, 1, 9, 0],
            "ERR invalid limiter state payload: a reservation goes with a gcra or bucket state without reservations",
        ),
        (
            "forgotten when made",
            gcra.clone(),
            vec![now, now, 1, 9, 0],
            "ERR invalid limiter state payload: reservation out of range",
        ),
        (
            "kept longer than KEEP allows",
            gcra.clone(),
            vec![now, now + 8 * 24 * hour, 1, 9, 0],
            "ERR invalid limiter state payload: reservation out of range",
        ),
        (
            "an estimate of 0",
            gcra.clone(),
            vec![now, now + hour, 0, 9, 0],
            "ERR invalid limiter state payload: reservation out of range",
        ),
        (
            "a settlement beyond any capacity",
            gcra.clone(),
            vec![now, now + hour, 1, 9, 0, u64::MAX >> 1, 5],
            "ERR invalid limiter state payload: reservation out of range",
        ),
        (
            "made 2 hours ahead",
            gcra.clone(),
            vec![now + 2 * hour, now + 3 * hour, 1, 9, 0],
            "ERR now_us is more than 1h ahead of the server's clock",
        ),
    ];
    for (what, p, n, want) in cases {
        let e = cmd("RL.RESERVESET")
            .arg("k")
            .arg(p)
            .arg(n[0])
            .arg("r4")
            .arg(&n[1..])
            .query::<()>(&mut c)
            .expect_err(what);
        assert_eq!(error_text(&e), want, "{what}");
        assert_eq!(digest(&mut c, b"k"), before, "{what}: the key changed");
    }
    let e = cmd("RL.RESERVESET")
        .arg("k")
        .arg(&gcra)
        .arg(now)
        .arg("r4")
        .arg(&[now + hour, 1, 9][..])
        .query::<()>(&mut c)
        .unwrap_err();
    assert_eq!(
        error_text(&e),
        "ERR wrong number of arguments for 'RL.RESERVESET' command"
    );
    let _: () = cmd("SET").arg("s").arg("x").query(&mut c).unwrap();
    let e = set(&mut c, "s", now, "r1", &[now + hour, 1, 9, 100_000]).unwrap_err();
    assert!(error_text(&e).starts_with("WRONGTYPE"), "{e}");
}
