//! ALGO window, sliding and log through the server: commands.md's worked examples, TTLs, the log's bound.

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
use std::time::Duration;

/// The server's clock in microseconds.
fn server_us(c: &mut Connection) -> u64 {
    let t: Vec<u64> = cmd("TIME").query(c).unwrap();
    t[0] * 1_000_000 + t[1]
}

/// Sleeps until `offset_us` into the next period of `period_us` (epoch-aligned), by the
/// server's clock.
fn sleep_until_phase(c: &mut Connection, period_us: u64, offset_us: u64) {
    let now = server_us(c);
    let next = now - now % period_us + period_us + offset_us;
    sleep(Duration::from_micros(next - now));
}

fn burst(c: &mut Connection, line: &str, n: usize) -> Vec<Vec<i64>> {
    let mut pipe = redis::pipe();
    pipe.atomic();
    for _ in 0..n {
        let mut command = cmd("RL.ADMIT");
        for w in line.split_whitespace() {
            command.arg(w);
        }
        pipe.add_command(command);
    }
    pipe.query(c).unwrap()
}

#[test]
fn a_window_admits_twice_its_limit_across_the_boundary() {
    let s = Server::start();
    let mut c = s.conn();
    // Anonymous clients per IP address (20 per 10 s) scaled to 1 s windows: 20 at 0.9 s into a window, 20 at 0.1 s into the next.
    sleep_until_phase(&mut c, 1_000_000, 900_000);
    let first = burst(&mut c, "ip:1 20 1s ALGO window", 21);
    assert!(first[..20].iter().all(|r| r[0] == 1));
    assert_eq!(first[20][0], 0, "the 21st in a window is refused");
    assert!(
        (1..=100).contains(&first[20][2]),
        "retry at the window end: {:?}",
        first[20]
    );
    sleep_until_phase(&mut c, 1_000_000, 100_000);
    let second = burst(&mut c, "ip:1 20 1s ALGO window", 20);
    assert!(
        second.iter().all(|r| r[0] == 1),
        "40 admitted across the boundary"
    );
    let ttl = pttl(&mut c, b"ip:1");
    assert!(
        (800..=900).contains(&ttl),
        "the key expires at the window end: {ttl}"
    );
}

#[test]
fn sliding_and_log_refuse_the_boundary_doubling() {
    let s = Server::start();
    let mut c = s.conn();
    sleep_until_phase(&mut c, 1_000_000, 900_000);
    burst(&mut c, "sl 20 1s ALGO sliding", 20);
    let came = server_us(&mut c);
    burst(&mut c, "lg 20 1s ALGO log", 20);
    let came_by = server_us(&mut c);
    sleep_until_phase(&mut c, 1_000_000, 100_000);
    let sliding = burst(&mut c, "sl 20 1s ALGO sliding", 20);
    let admitted = sliding.iter().filter(|r| r[0] == 1).count();
    // The estimate weighs the previous 20 by about 0.9: about 2 more fit.
    assert!((1..=3).contains(&admitted), "sliding admitted {admitted}");
    let asked = server_us(&mut c);
    let log = burst(&mut c, "lg 20 1s ALGO log", 20);
    let asked_by = server_us(&mut c);
    assert!(log.iter().all(|r| r[0] == 0), "the exact log admits none");
    // They leave 1 s after they came (about 0.8 s from now), by the server's clock around
    // each burst: a busy machine may delay a burst, never the arithmetic.
    let soonest = (came + 1_000_000).saturating_sub(asked_by) / 1000;
    let latest = (came_by + 1_000_000).saturating_sub(asked).div_ceil(1000);
    let retry = u64::try_from(log[0][2]).unwrap();
    assert!(
        (soonest..=latest).contains(&retry) && (700..=900).contains(&retry),
        "{:?}, expected {soonest}..={latest} ms",
        log[0]
    );
}

#[test]
fn log_limit_is_bounded() {
    let s = Server::start();
    let mut c = s.conn();
    let e = error_of(
        &mut c,
        &[b"RL.ADMIT", b"k", b"10001", b"1s", b"ALGO", b"log"],
    );
    assert_eq!(e, "ERR limit must be in the range [1, 10000]");
    let e = error_of(
        &mut c,
        &[
            b"RL.ADMIT",
            b"k",
            b"10",
            b"1s",
            b"ALGO",
            b"window",
            b"BURST",
            b"5",
        ],
    );
    assert_eq!(e, "ERR BURST is not allowed with ALGO window");
    // A full log of the largest limit, one entry per request, stays a valid key.
    let r = admit(&mut c, "big 10000 1h ALGO log COST 10000");
    assert_eq!(r[..3], [1, 0, 0]);
    let usage: i64 = cmd("MEMORY").arg("USAGE").arg("big").query(&mut c).unwrap();
    assert!(usage < 1000, "one entry: {usage} bytes");
}

#[test]
fn refused_log_requests_are_not_recorded() {
    let s = Server::start();
    let mut c = s.conn();
    admit(&mut c, "lg 2 1m ALGO log COST 2");
    let before = digest(&mut c, b"lg");
    for _ in 0..100 {
        assert_eq!(admit(&mut c, "lg 2 1m ALGO log")[0], 0);
    }
    assert_eq!(digest(&mut c, b"lg"), before);
}

#[test]
fn families_do_not_mix_on_one_key() {
    let s = Server::start();
    let mut c = s.conn();
    admit(&mut c, "k 5 1m ALGO window COST 2");
    // window and sliding convert into each other, keeping the count.
    assert_eq!(admit(&mut c, "k 5 1m ALGO sliding")[1], 2);
    let e = error_of(&mut c, &[b"RL.ADMIT", b"k", b"5", b"1m", b"ALGO", b"gcra"]);
    assert_eq!(
        e,
        "ERR key holds an ALGO sliding limiter, not gcra: use another key, or DEL this one to change the algorithm"
    );
    let e = error_of(&mut c, &[b"RL.ADMIT", b"k", b"5", b"1m", b"ALGO", b"log"]);
    assert!(
        e.starts_with("ERR key holds an ALGO sliding limiter"),
        "{e}"
    );
}
