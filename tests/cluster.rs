//! A real 3-primary Redis Cluster on loopback, the module loaded on every node: the commands
//! are routed (`MOVED`, `CROSSSLOT`) and the limiters survive live resharding (`MIGRATE`).
//! Each test gets its own cluster (see `common::cluster`).

// Test code stops at its first surprise: all of it, not only the `#[test]` functions that
// clippy.toml covers, may unwrap, expect, panic and index.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use common::cluster::*;
use common::*;
use rl_testkit as common;

use redis::ErrorKind;

use std::time::Instant;

/// Runs `args` on `c`, which must answer `MOVED <slot> 127.0.0.1:<port>`; checks the parsed
/// redirect too.
fn assert_moved(c: &mut Connection, args: &[&str], slot: i64, port: u16) {
    let mut command = cmd(args[0]);
    for a in &args[1..] {
        command.arg(*a);
    }
    let e = match command.query::<Value>(c) {
        Ok(v) => panic!("{args:?}: expected MOVED, got {v:?}"),
        Err(e) => e,
    };
    assert_eq!(e.kind(), ErrorKind::Moved, "{args:?}: {e}");
    assert_eq!(
        error_text(&e),
        format!("MOVED {slot} 127.0.0.1:{port}"),
        "{args:?}"
    );
    let addr = format!("127.0.0.1:{port}");
    assert_eq!(e.redirect_node(), Some((addr.as_str(), slot as u16)));
}

#[test]
fn rl_admit_is_redirected_to_the_node_owning_the_key() {
    let cluster = Cluster::start();
    let key = "user:17";
    let slot = keyslot(&mut cluster.conn(0), key);
    assert_eq!(slot, 4440, "CRC16 of user:17");
    let owner = cluster.owner(slot);
    let args = words("RL.ADMIT user:17 5 1s");
    for wrong in (0..3).filter(|&i| i != owner) {
        let mut c = cluster.conn(wrong);
        assert_moved(&mut c, &args, slot, cluster.port(owner));
        assert_eq!(dbsize(&mut c), 0, "node {wrong} wrote nothing");
    }
    let mut c = cluster.conn(owner);
    // Separate calls: a millisecond may pass between them, so times are checked in ranges.
    assert_eq!(admit(&mut c, "user:17 5 1s"), [1, 4, 0, 200, 5]);
    let r = admit(&mut c, "user:17 5 1s COST 4");
    assert_eq!((&r[..3], r[4]), (&[1, 0, 0][..], 5));
    assert!((990..=1000).contains(&r[3]), "reset {r:?}");
    let r = admit(&mut c, "user:17 5 1s");
    assert_eq!(r[..2], [0, 0]);
    assert!((190..=200).contains(&r[2]), "retry {r:?}");
    assert_eq!(dbsize(&mut c), 1);
}

/// (allowed, denied_by, retry_after_ms, [(name, remaining, reset_after_ms)])
type MultiReply = (i64, Option<String>, i64, Vec<(String, i64, i64)>);

#[test]
fn rl_multi_needs_one_slot_and_is_redirected_to_its_owner() {
    let cluster = Cluster::start();
    let untagged = words("RL.MULTI 2 a b RULE x 5 1s RULE y 5 1s");
    let tagged = words("RL.MULTI 2 {t:atlas}:user:17 {t:atlas} RULE x 5 1s RULE y 5 1s");
    {
        let mut c = cluster.conn(0);
        assert_ne!(keyslot(&mut c, "a"), keyslot(&mut c, "b"));
        let keys: Vec<String> = cmd("COMMAND")
            .arg("GETKEYS")
            .arg(&tagged)
            .query(&mut c)
            .expect("GETKEYS");
        assert_eq!(keys, ["{t:atlas}:user:17", "{t:atlas}"]);
    }
    for i in 0..3 {
        let mut c = cluster.conn(i);
        let mut command = cmd(untagged[0]);
        command.arg(&untagged[1..]);
        let e = command.query::<Value>(&mut c).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::CrossSlot, "node {i}: {e}");
        assert_eq!(
            error_text(&e),
            "CROSSSLOT Keys in request don't hash to the same slot",
            "node {i}"
        );
    }
    let slot = keyslot(&mut cluster.conn(0), "{t:atlas}");
    assert_eq!(keyslot(&mut cluster.conn(0), "{t:atlas}:user:17"), slot);
    let owner = cluster.owner(slot);
    for wrong in (0..3).filter(|&i| i != owner) {
        let mut c = cluster.conn(wrong);
        assert_moved(&mut c, &tagged, slot, cluster.port(owner));
        assert_eq!(dbsize(&mut c), 0, "node {wrong} wrote nothing");
    }
    let mut c = cluster.conn(owner);
    let mut command = cmd(tagged[0]);
    command.arg(&tagged[1..]);
    let reply: MultiReply = command.query(&mut c).expect("RL.MULTI on the owner");
    assert_eq!(
        reply,
        (
            1,
            None,
            0,
            vec![("x".to_string(), 4, 200), ("y".to_string(), 4, 200)]
        )
    );
    assert_eq!(dbsize(&mut c), 2);
}

#[test]
fn cl_throttle_and_rl_info_are_redirected_too() {
    let cluster = Cluster::start();
    let key = "throttled";
    let slot = keyslot(&mut cluster.conn(0), key);
    let owner = cluster.owner(slot);
    let throttle = words("CL.THROTTLE throttled 4 1 1");
    let info = words("RL.INFO throttled");
    for wrong in (0..3).filter(|&i| i != owner) {
        let mut c = cluster.conn(wrong);
        assert_moved(&mut c, &throttle, slot, cluster.port(owner));
        assert_moved(&mut c, &info, slot, cluster.port(owner));
        assert_eq!(dbsize(&mut c), 0, "node {wrong} wrote nothing");
    }
    let mut c = cluster.conn(owner);
    let v: Value = cmd("RL.INFO").arg(key).query(&mut c).unwrap();
    assert_eq!(v, Value::Nil);
    let reply: Vec<i64> = cmd(throttle[0]).arg(&throttle[1..]).query(&mut c).unwrap();
    assert_eq!(reply, [0, 5, 4, -1, 1]);
    let v: Vec<Value> = cmd("RL.INFO").arg(key).query(&mut c).unwrap();
    let field = |name: &str| -> Value {
        let i = v
            .iter()
            .position(|f| redis::from_redis_value::<String>(f).ok().as_deref() == Some(name))
            .unwrap_or_else(|| panic!("no {name} in {v:?}"));
        v[i + 1].clone()
    };
    assert_eq!(
        (int(&field("limit")), int(&field("capacity"))),
        (1, 5),
        "{v:?}"
    );
    assert_eq!(int(&field("period_ms")), 1000, "{v:?}");
    // Nothing was written on the wrong nodes, before or after.
    for wrong in (0..3).filter(|&i| i != owner) {
        assert_eq!(dbsize(&mut cluster.conn(wrong)), 0);
    }
}

#[test]
fn limiters_survive_live_resharding() {
    let cluster = Cluster::start();
    let map = cluster.wait_converged("before resharding");
    // A owns slot 0 (and so the lowest slots); B owns the last slot.
    let (a, b) = (cluster.owner_in(&map, 0), cluster.owner_in(&map, SLOTS - 1));
    assert_ne!(a, b);
    let a_slots = cluster.slots_of(&map, a);
    let (mut ca, mut cb) = (cluster.conn(a), cluster.conn(b));

    // Candidate keys `{rs<i>}:limiter`, by slot; keep the 20 in A's lowest slots.
    let candidates: Vec<String> = (0..4000).map(|i| format!("{{rs{i}}}:limiter")).collect();
    let slots = keyslots(&mut ca, &candidates);
    let mut found: Vec<(usize, String, i64)> = candidates
        .into_iter()
        .zip(slots)
        .filter(|(_, s)| a_slots.contains(s))
        .map(|(k, s)| (a_slots.iter().position(|x| *x == s).unwrap(), k, s))
        .collect();
    found.sort();
    found.truncate(20);
    assert_eq!(found.len(), 20);
    // Moving A's first N slots covers every chosen key.
    let n = found.last().unwrap().0 + 1;
    assert!(n <= 1000, "keys spread over {n} slots");

    let algos = [
        "5 1h COST 2",
        "5 1h COST 2 ALGO bucket",
        "5 1d COST 2 ALGO window",
        "5 1d COST 2 ALGO sliding",
        "5 1h COST 2 ALGO log",
    ];
    let day = server_secs(&mut ca) / 86_400;
    struct Limiter {
        key: String,
        slot: i64,
        args: String,
        digest: String,
        pttl: i64,
    }
    let mut limiters = Vec::new();
    for (i, (_, key, slot)) in found.into_iter().enumerate() {
        let args = format!("{key} {}", algos[i % algos.len()]);
        let reply = admit(&mut ca, &args);
        assert_eq!(reply[..3], [1, 3, 0], "{args}: {reply:?}");
        assert_eq!(reply[4], 5, "{args}");
        limiters.push(Limiter {
            digest: digest(&mut ca, key.as_bytes()),
            pttl: pttl(&mut ca, key.as_bytes()),
            key,
            slot,
            args,
        });
    }
    let recorded = Instant::now();
    assert_eq!(dbsize(&mut ca), 20);
    assert_eq!(dbsize(&mut cb), 0);
    for l in &limiters {
        assert!(l.pttl > 0, "{}: pttl {}", l.args, l.pttl);
        assert_ne!(l.digest, "0".repeat(40), "{}", l.args);
    }

    let out = run_cli(&[
        "--cluster".to_string(),
        "reshard".to_string(),
        format!("127.0.0.1:{}", cluster.port(a)),
        "--cluster-from".to_string(),
        cluster.id(a),
        "--cluster-to".to_string(),
        cluster.id(b),
        "--cluster-slots".to_string(),
        n.to_string(),
        "--cluster-yes".to_string(),
    ]);
    let elapsed = recorded.elapsed().as_millis() as i64;

    // What the CLI says it moved (the lines it prints while moving, not its plan): A's first
    // N slots, in ascending order.
    let from_to = format!(
        " from 127.0.0.1:{} to 127.0.0.1:{}:",
        cluster.port(a),
        cluster.port(b)
    );
    let moved: Vec<i64> = out
        .lines()
        .filter_map(|l| l.strip_prefix("Moving slot "))
        .filter(|l| l.contains(&from_to))
        .map(|l| l.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(moved, a_slots[..n], "reshard output:\n{out}");
    // And what the cluster now says, on every node.
    let after = cluster.wait_converged("after resharding");
    for &s in &a_slots[..n] {
        assert_eq!(cluster.owner_in(&after, s), b, "slot {s}");
    }
    for &s in &a_slots[n..] {
        assert_eq!(cluster.owner_in(&after, s), a, "slot {s}");
    }
    assert_eq!(dbsize(&mut ca), 0, "A gave away all its keys");
    assert_eq!(dbsize(&mut cb), 20, "B got them all");

    let same_day = server_secs(&mut cb) / 86_400 == day;
    let c = 3 - a - b;
    for l in &limiters {
        let key = l.key.as_bytes();
        let args = words(&l.args);
        let mut full = vec!["RL.ADMIT"];
        full.extend(&args);
        assert_moved(&mut ca, &full, l.slot, cluster.port(b));
        assert_moved(&mut cluster.conn(c), &full, l.slot, cluster.port(b));
        assert_eq!(digest(&mut cb, key), l.digest, "{}", l.args);
        let now = pttl(&mut cb, key);
        assert!(now > 0, "{}: pttl {now}", l.args);
        assert!(
            (0..=elapsed + 100).contains(&(l.pttl - now)),
            "{}: pttl {} before, {now} after, {elapsed} ms apart",
            l.args,
            l.pttl
        );
        if !same_day && (l.args.contains("window") || l.args.contains("sliding")) {
            continue; // a new daily window began during the test (23:59:59 UTC)
        }
        // The state continues: 3 left, 2 more spent, then a cost of 2 no longer fits.
        let reply = admit(&mut cb, &l.args);
        assert_eq!(reply[..3], [1, 1, 0], "{}: {reply:?}", l.args);
        let reply = admit(&mut cb, &l.args);
        assert_eq!(reply[..2], [0, 1], "{}: {reply:?}", l.args);
        assert!(reply[2] > 0, "{}: {reply:?}", l.args);
    }
}
