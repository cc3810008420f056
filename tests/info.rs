//! RL.INFO explains a key: algorithm, parameters as last used, state, TTL.

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

fn info(c: &mut Connection, key: &str) -> Vec<(String, Value)> {
    let v: Value = cmd("RL.INFO").arg(key).query(c).unwrap();
    match v {
        Value::Array(items) => items
            .chunks(2)
            .map(|p| (redis::from_redis_value(&p[0]).unwrap(), p[1].clone()))
            .collect(),
        Value::Map(pairs) => pairs
            .into_iter()
            .map(|(k, v)| (redis::from_redis_value(&k).unwrap(), v))
            .collect(),
        other => panic!("{other:?}"),
    }
}

fn int(fields: &[(String, Value)], name: &str) -> i64 {
    let (_, v) = fields
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("{name}"));
    redis::from_redis_value(v).unwrap()
}

fn names(fields: &[(String, Value)]) -> Vec<&str> {
    fields.iter().map(|(n, _)| n.as_str()).collect()
}

#[test]
fn explains_every_algorithm() {
    let s = Server::start();
    let mut c = s.conn();
    admit(&mut c, "g 2 1s BURST 20 COST 5");
    let f = info(&mut c, "g");
    assert_eq!(
        names(&f),
        [
            "algo",
            "limit",
            "period_ms",
            "capacity",
            "remaining",
            "reset_after_ms",
            "tat_us",
            "debt",
            "ttl_ms"
        ]
    );
    assert_eq!(redis::from_redis_value::<String>(&f[0].1).unwrap(), "gcra");
    assert_eq!(
        (int(&f, "limit"), int(&f, "period_ms"), int(&f, "capacity")),
        (2, 1000, 20)
    );
    assert_eq!(int(&f, "remaining"), 15);
    assert!((2400..=2500).contains(&int(&f, "reset_after_ms")));
    assert!((2400..=2501).contains(&int(&f, "ttl_ms")));

    admit(&mut c, "b 2 1s BURST 20 COST 5 ALGO bucket");
    let f = info(&mut c, "b");
    assert_eq!(int(&f, "tokens"), 15);
    assert!(names(&f).contains(&"updated_us"));

    admit(&mut c, "w 10 1m ALGO window COST 3");
    let f = info(&mut c, "w");
    assert_eq!((int(&f, "count"), int(&f, "remaining")), (3, 7));
    assert_eq!(int(&f, "window_start_ms") % 60_000, 0);

    admit(&mut c, "s 10 1m ALGO sliding COST 4");
    let f = info(&mut c, "s");
    assert_eq!((int(&f, "previous"), int(&f, "current")), (0, 4));

    admit(&mut c, "l 10 1m ALGO log COST 2");
    admit(&mut c, "l 10 1m ALGO log COST 3");
    let f = info(&mut c, "l");
    assert_eq!(
        (
            int(&f, "entries"),
            int(&f, "logged_units"),
            int(&f, "remaining")
        ),
        (2, 5, 5)
    );
}

#[test]
fn missing_and_foreign_keys() {
    let s = Server::start();
    let mut c = s.conn();
    let v: Value = cmd("RL.INFO").arg("nothing").query(&mut c).unwrap();
    assert_eq!(v, Value::Nil);
    let _: () = cmd("SET").arg("str").arg("x").query(&mut c).unwrap();
    let e = error_of(&mut c, &[b"RL.INFO", b"str"]);
    assert!(e.starts_with("WRONGTYPE"), "{e}");
    let e = error_of(&mut c, &[b"RL.INFO", b"a", b"b"]);
    assert!(e.starts_with("ERR wrong number of arguments"), "{e}");
}

#[test]
fn reading_changes_nothing_and_replicates_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    admit(&mut c, "l 10 100ms ALGO log COST 2");
    std::thread::sleep(std::time::Duration::from_millis(150));
    admit(&mut c, "keep 1 1h");
    let before = digest(&mut c, b"keep");
    let f = info(&mut c, "keep");
    assert_eq!(int(&f, "remaining"), 0);
    assert_eq!(digest(&mut c, b"keep"), before);
    let v: Value = cmd("RL.INFO").arg("l").query(&mut c).unwrap();
    assert_eq!(v, Value::Nil, "the log expired with its last entry");
}
