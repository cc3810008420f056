//! Shaping work: the concurrency semaphore, reserve-then-settle, leased token chunks.

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

use std::thread::sleep;
use std::time::{Duration, Instant};

/// (acquired, holder, in_flight, retry_after_ms)
type Acquired = (i64, Option<String>, i64, i64);

fn acquire(c: &mut Connection, line: &str) -> Acquired {
    let mut command = cmd("RL.ACQUIRE");
    for w in line.split_whitespace() {
        command.arg(w);
    }
    command
        .query(c)
        .unwrap_or_else(|e| panic!("RL.ACQUIRE {line}: {e}"))
}

fn int_cmd(c: &mut Connection, args: &[&str]) -> i64 {
    let mut command = cmd(args[0]);
    for a in &args[1..] {
        command.arg(*a);
    }
    command.query(c).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn settle(c: &mut Connection, key: &str, id: &str, actual: u64) -> Option<(i64, i64)> {
    cmd("RL.SETTLE")
        .arg(key)
        .arg(id)
        .arg(actual)
        .query(c)
        .unwrap()
}

#[test]
fn three_exports_in_flight_the_fourth_waits_for_the_earliest_lease() {
    let s = Server::start();
    let mut c = s.conn();
    let a = acquire(&mut c, "exports:{t:atlas} 3 2s ID job-1");
    assert_eq!(a, (1, Some("job-1".into()), 1, 0));
    sleep(Duration::from_millis(300));
    acquire(&mut c, "exports:{t:atlas} 3 2s ID job-2");
    acquire(&mut c, "exports:{t:atlas} 3 2s ID job-3");
    let (ok, holder, in_flight, retry) = acquire(&mut c, "exports:{t:atlas} 3 2s ID job-4");
    assert_eq!((ok, holder.as_deref(), in_flight), (0, Some("job-4"), 3));
    // job-1's lease ends 2 s after it began, about 1.7 s from now.
    assert!((1200..=1700).contains(&retry), "retry {retry}");
    // Re-acquiring with the same holder renews instead of taking a second slot.
    let (ok, _, in_flight, _) = acquire(&mut c, "exports:{t:atlas} 3 2s ID job-2");
    assert_eq!((ok, in_flight), (1, 3));
    // job-1 crashed: its slot comes back by expiry.
    sleep(Duration::from_millis(retry as u64 + 20));
    let (ok, _, in_flight, _) = acquire(&mut c, "exports:{t:atlas} 3 2s ID job-4");
    assert_eq!((ok, in_flight), (1, 3));
}

#[test]
fn release_is_idempotent_renew_after_expiry_fails_and_the_key_goes_with_its_last_lease() {
    let s = Server::start();
    let mut c = s.conn();
    let (_, holder, _, _) = acquire(&mut c, "sem 2 200ms");
    let holder = holder.expect("a generated holder");
    acquire(&mut c, "sem 2 200ms ID other");
    let before = digest(&mut c, b"sem");
    assert_eq!(int_cmd(&mut c, &["RL.RELEASE", "sem", "nobody"]), 0);
    assert_eq!(
        digest(&mut c, b"sem"),
        before,
        "releasing what is not held changes nothing"
    );
    assert_eq!(int_cmd(&mut c, &["RL.RELEASE", "sem", &holder]), 1);
    assert_eq!(int_cmd(&mut c, &["RL.RELEASE", "sem", &holder]), 0, "twice");
    assert_eq!(int_cmd(&mut c, &["RL.RENEW", "sem", "other", "200ms"]), 1);
    let ttl = pttl(&mut c, b"sem");
    assert!(
        (100..=201).contains(&ttl),
        "the key lives as long as its last lease: {ttl}"
    );
    sleep(Duration::from_millis(250));
    assert_eq!(
        int_cmd(&mut c, &["RL.RENEW", "sem", "other", "1s"]),
        0,
        "after expiry"
    );
    assert_eq!(
        int_cmd(&mut c, &["RL.RELEASE", "sem", "other"]),
        0,
        "after expiry"
    );
    let exists: i64 = cmd("EXISTS").arg("sem").query(&mut c).unwrap();
    assert_eq!(exists, 0, "the key expired with its last lease");
    // Releasing the last live lease deletes the key at once.
    acquire(&mut c, "sem2 1 1h ID only");
    assert_eq!(int_cmd(&mut c, &["RL.RELEASE", "sem2", "only"]), 1);
    let exists: i64 = cmd("EXISTS").arg("sem2").query(&mut c).unwrap();
    assert_eq!(exists, 0);
}

#[test]
fn semaphore_errors() {
    let s = Server::start();
    let mut c = s.conn();
    admit(&mut c, "rate 5 1s");
    let e = error_of(&mut c, &[b"RL.ACQUIRE", b"rate", b"3", b"1s"]);
    assert!(
        e.starts_with("ERR key holds an ALGO gcra limiter, not semaphore"),
        "{e}"
    );
    let e = error_of(&mut c, &[b"RL.ACQUIRE", b"k", b"0", b"1s"]);
    assert_eq!(e, "ERR capacity must be in the range [1, 100000]");
    let e = error_of(&mut c, &[b"RL.ACQUIRE", b"k", b"3", b"10"]);
    assert!(e.contains("needs a unit"), "{e}");
    let e = error_of(&mut c, &[b"RL.RELEASE", b"k", b""]);
    assert_eq!(e, "ERR holder must be 1 to 256 bytes");
    acquire(&mut c, "sem 3 1m");
    let e = error_of(&mut c, &[b"RL.ADMIT", b"sem", b"3", b"1m"]);
    assert!(
        e.starts_with("ERR key holds an ALGO semaphore limiter"),
        "{e}"
    );
}

#[test]
fn a_thousand_slots_stay_fast_and_exact() {
    let s = Server::start();
    let mut c = s.conn();
    let mut pipe = redis::pipe();
    for i in 0..2000 {
        pipe.cmd("RL.ACQUIRE")
            .arg("big")
            .arg(1000)
            .arg("1m")
            .arg("ID")
            .arg(format!("h{i}"));
    }
    let replies: Vec<Acquired> = pipe.query(&mut c).unwrap();
    assert_eq!(replies.iter().filter(|r| r.0 == 1).count(), 1000);
    assert_eq!(replies[1999].2, 1000);
}

#[test]
fn reserve_then_settle_exports_of_unknown_cost() {
    let s = Server::start();
    let mut c = s.conn();
    let key = "u:17";
    let r = admit(
        &mut c,
        &format!("{key} 2 1s BURST 20 COST 10 RESERVE exp-1"),
    );
    assert_eq!(r[..3], [1, 10, 0]);
    // A retry of the same RESERVE returns the original decision and spends nothing.
    assert_eq!(
        admit(
            &mut c,
            &format!("{key} 2 1s BURST 20 COST 10 RESERVE exp-1")
        ),
        r
    );
    // It cost 14: 4 more are debited.
    assert_eq!(settle(&mut c, key, "exp-1", 14), Some((4, 6)));
    let before = digest(&mut c, key.as_bytes());
    assert_eq!(
        settle(&mut c, key, "exp-1", 14),
        Some((4, 6)),
        "a retried settle"
    );
    assert_eq!(digest(&mut c, key.as_bytes()), before, "changes nothing");
    // Another cost 6 of its 10: 4 are credited.
    admit(&mut c, &format!("{key} 2 1s BURST 20 COST 5 RESERVE exp-2"));
    let (delta, _) = settle(&mut c, key, "exp-2", 1).unwrap();
    assert_eq!(delta, -4);
    assert_eq!(settle(&mut c, key, "unknown", 3), None);
    let n: Option<(i64, i64)> = cmd("RL.SETTLE")
        .arg("nokey")
        .arg("x")
        .arg(1)
        .query(&mut c)
        .unwrap();
    assert_eq!(n, None);
}

/// `RL.SETTLE ... FORGET`, as a gateway settles a request keyed by its `Idempotency-Key`
/// after a 2xx: the key reused later is charged again.
#[test]
fn a_settlement_with_forget_lets_the_same_id_be_charged_anew() {
    let s = Server::start();
    let mut c = s.conn();
    let key = "tenant:7";
    // 10 an hour, capacity 100: nothing refills while the test runs.
    let reserve = format!("{key} 10 1h BURST 100 COST 10 RESERVE idem-1");
    assert_eq!(admit(&mut c, &reserve)[..2], [1, 90]);
    let forget = |c: &mut Connection, actual: u64, token: &str| -> Option<(i64, i64)> {
        cmd("RL.SETTLE")
            .arg(key)
            .arg("idem-1")
            .arg(actual)
            .arg(token)
            .query(c)
            .unwrap()
    };
    assert_eq!(forget(&mut c, 14, "FORGET"), Some((4, 86)));
    let before = digest(&mut c, key.as_bytes());
    assert_eq!(settle(&mut c, key, "idem-1", 14), None, "a retried settle");
    assert_eq!(forget(&mut c, 14, "forget"), None, "a retried forget");
    assert_eq!(digest(&mut c, key.as_bytes()), before, "changes nothing");
    // The same id reserves, and spends, anew: 86 - 10.
    assert_eq!(admit(&mut c, &reserve)[..2], [1, 76]);
    assert_eq!(admit(&mut c, &reserve)[..2], [1, 76], "a retry of that one");
    // Settled first, forgotten later: the first settlement, and only the forget time changes.
    assert_eq!(settle(&mut c, key, "idem-1", 10), Some((0, 76)));
    let info_before = reservations_and_tokens(&mut c, key);
    assert_eq!(forget(&mut c, 50, "Forget"), Some((0, 76)));
    assert_eq!(settle(&mut c, key, "idem-1", 10), None);
    assert_eq!(info_before.1, reservations_and_tokens(&mut c, key).1);
    assert_eq!(reservations_and_tokens(&mut c, key).0, 0, "none live");
    assert_eq!(forget(&mut c, 1, "FORGET"), None, "nothing to forget");
    // A bad token or one too many: an error, and nothing changes.
    admit(
        &mut c,
        &format!("{key} 10 1h BURST 100 COST 10 RESERVE idem-2"),
    );
    let before = digest(&mut c, key.as_bytes());
    let e = error_of(
        &mut c,
        &[b"RL.SETTLE", key.as_bytes(), b"idem-2", b"1", b"KEEP"],
    );
    assert_eq!(e, "ERR syntax error near 'KEEP'");
    let e = error_of(
        &mut c,
        &[
            b"RL.SETTLE",
            key.as_bytes(),
            b"idem-2",
            b"1",
            b"FORGET",
            b"FORGET",
        ],
    );
    assert_eq!(e, "ERR wrong number of arguments for 'RL.SETTLE' command");
    assert_eq!(digest(&mut c, key.as_bytes()), before);
    assert_eq!(
        settle(&mut c, key, "idem-2", 10),
        Some((0, 66)),
        "still there"
    );
}

/// `RL.INFO`'s `reservations` (live ones) and `remaining`.
fn reservations_and_tokens(c: &mut Connection, key: &str) -> (i64, i64) {
    let info: Vec<Value> = cmd("RL.INFO").arg(key).query(c).unwrap();
    let field = |name: &str| -> i64 {
        let at = info
            .iter()
            .step_by(2)
            .position(|v| redis::from_redis_value::<String>(v).unwrap() == name)
            .unwrap_or_else(|| panic!("no {name} in {info:?}"));
        redis::from_redis_value(&info[2 * at + 1]).unwrap()
    };
    (field("reservations"), field("remaining"))
}

#[test]
fn debt_is_bounded_and_refuses_until_repaid() {
    let s = Server::start();
    let mut c = s.conn();
    admit(&mut c, "d 10 1s COST 10 RESERVE big");
    // 990 more owed, but the debt stops at minus the capacity: 10 are applied.
    assert_eq!(settle(&mut c, "d", "big", 1000), Some((10, 0)));
    let r = admit(&mut c, "d 10 1s");
    assert_eq!(r[0], 0);
    // 10 owed (the floor is minus the capacity) and 1 to spend, at 10 per second.
    assert!((1000..=1100).contains(&r[2]), "{r:?}");
    let info: Vec<Value> = cmd("RL.INFO").arg("d").query(&mut c).unwrap();
    let names: Vec<String> = info
        .iter()
        .step_by(2)
        .map(|v| redis::from_redis_value(v).unwrap())
        .collect();
    let debt_at = names.iter().position(|n| n == "debt").unwrap();
    let debt: i64 = redis::from_redis_value(&info[2 * debt_at + 1]).unwrap();
    assert!((9..=10).contains(&debt), "debt {debt}");
}

#[test]
fn reservation_errors() {
    let s = Server::start();
    let mut c = s.conn();
    let e = error_of(
        &mut c,
        &[
            b"RL.ADMIT",
            b"w",
            b"5",
            b"1s",
            b"ALGO",
            b"window",
            b"RESERVE",
            b"x",
        ],
    );
    assert_eq!(e, "ERR reservations are only for ALGO gcra and bucket keys");
    let e = error_of(&mut c, &[b"RL.ADMIT", b"w", b"5", b"1s", b"KEEP", b"1m"]);
    assert_eq!(e, "ERR RESERVE (for KEEP) is required");
    let e = error_of(&mut c, &[b"RL.SETTLE", b"w", b"x", b"-1"]);
    assert_eq!(e, "ERR actual must be in the range [0, 1000000000000000]");
}

#[test]
fn grants_are_partial_when_less_is_available() {
    let s = Server::start();
    let mut c = s.conn();
    let g: Vec<i64> = cmd("RL.GRANT")
        .arg(&["g", "10", "1h", "WANT", "4", "TTL", "250ms"])
        .query(&mut c)
        .unwrap();
    assert_eq!(g, vec![4, 6, 250, 0]);
    let g: Vec<i64> = cmd("RL.GRANT")
        .arg(&["g", "10", "1h", "WANT", "100"])
        .query(&mut c)
        .unwrap();
    assert_eq!(g, vec![6, 0, 1000, 0]);
    let before = digest(&mut c, b"g");
    let g: Vec<i64> = cmd("RL.GRANT")
        .arg(&["g", "10", "1h", "WANT", "100"])
        .query(&mut c)
        .unwrap();
    assert_eq!(&g[..3], &[0, 0, 1000]);
    assert!(
        (359_000..=360_000).contains(&g[3]),
        "one unit every 6 minutes: {g:?}"
    );
    assert_eq!(
        digest(&mut c, b"g"),
        before,
        "an empty grant changes nothing"
    );
    let w: Vec<i64> = cmd("RL.GRANT")
        .arg(&["w", "10", "1h", "ALGO", "window", "WANT", "3", "TTL", "1d"])
        .query(&mut c)
        .unwrap();
    assert!(w[2] <= 3_600_000, "clamped to the window end: {w:?}");
}

/// A hot key: 100 gateways spending leased chunks of a 40,000 per second limit.
#[test]
fn one_hundred_gateways_call_the_store_hundreds_of_times_a_second() {
    let s = Server::start();
    let mut c = s.conn();
    let (burst, rate) = (10_000u64, 40_000u64);
    // (tokens, valid until, backing off until)
    let mut gateways = vec![(0u64, Instant::now(), Instant::now()); 100];
    let (mut calls, mut admitted, mut offered) = (0u64, 0u64, 0u64);
    let start = Instant::now();
    let run = Duration::from_millis(1500);
    let mut i = 0usize;
    // Offer about 40,000 requests per second, spread over the gateways round-robin.
    while start.elapsed() < run {
        let due = (start.elapsed().as_micros() as u64 * rate / 1_000_000).saturating_sub(offered);
        for _ in 0..due {
            offered += 1;
            i = (i + 1) % gateways.len();
            let now = Instant::now();
            let gw = &mut gateways[i];
            if (gw.0 == 0 || now >= gw.1) && now >= gw.2 {
                calls += 1;
                let g: Vec<u64> = cmd("RL.GRANT")
                    .arg(&[
                        "hot", "40000", "1s", "BURST", "10000", "WANT", "100", "TTL", "250ms",
                    ])
                    .query(&mut c)
                    .unwrap();
                let backoff = if g[0] == 0 {
                    Duration::from_millis(10)
                } else {
                    Duration::ZERO
                };
                *gw = (g[0], now + Duration::from_millis(g[2]), now + backoff);
            }
            if gw.0 > 0 {
                gw.0 -= 1;
                admitted += 1;
            }
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let per_second = calls as f64 / seconds;
    assert!(offered > 40_000, "the test offered only {offered}");
    assert!(
        per_second < 1_500.0,
        "{per_second:.0} store calls per second for {offered} requests"
    );
    // Exact bound: the burst plus the rate over the run.
    let bound = burst as f64 + rate as f64 * seconds;
    assert!(
        (admitted as f64) <= bound,
        "admitted {admitted} > {bound:.0}"
    );
}
