//! RL.MULTI: all or nothing over several keys and rules.

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

fn multi(c: &mut Connection, line: &str) -> redis::RedisResult<Value> {
    let mut command = cmd("RL.MULTI");
    for w in line.split_whitespace() {
        command.arg(w);
    }
    command.query(c)
}

/// (allowed, denied_by, retry_after_ms, [(name, remaining, reset_after_ms)])
type Reply = (i64, Option<String>, i64, Vec<(String, i64, i64)>);

fn decide(c: &mut Connection, line: &str) -> Reply {
    let v = multi(c, line).unwrap_or_else(|e| panic!("{line}: {e}"));
    redis::from_redis_value(&v).unwrap()
}

fn rules_for(user: usize) -> String {
    format!(
        "3 {{t:atlas}}:user:{user} {{t:atlas}} {{t:atlas}}:route:catalog \
         RULE user 2 1s BURST 20 RULE tenant 1000 1m RULE route 100000 1h"
    )
}

#[test]
fn the_tenant_rule_stops_50_users_each_within_their_own_limit() {
    let s = Server::start();
    let mut c = s.conn();
    // 50 users × 20 requests: each within its burst of 20, together the tenant's 1000.
    for round in 0..20 {
        let mut pipe = redis::pipe();
        for user in 0..50 {
            let mut command = cmd("RL.MULTI");
            for w in rules_for(user).split_whitespace() {
                command.arg(w);
            }
            pipe.add_command(command);
        }
        let replies: Vec<Reply> = pipe.query(&mut c).unwrap();
        assert!(replies.iter().all(|r| r.0 == 1), "round {round}");
    }
    // 0.6 s later every user has a token again (2 per second), but the tenant got back only
    // about 10 of its 1000 per minute: most users are refused by the tenant rule.
    std::thread::sleep(std::time::Duration::from_millis(600));
    let mut refused = 0;
    for user in 0..50 {
        let keys = [
            format!("{{t:atlas}}:user:{user}"),
            "{t:atlas}".to_string(),
            "{t:atlas}:route:catalog".to_string(),
        ];
        let before: Vec<String> = keys.iter().map(|k| digest(&mut c, k.as_bytes())).collect();
        let (allowed, denied_by, retry, rules) = decide(&mut c, &rules_for(user));
        if allowed == 1 {
            continue;
        }
        refused += 1;
        assert_eq!(denied_by.as_deref(), Some("tenant"), "user {user}");
        // The tenant gets one unit back every 60 ms.
        assert!((1..=60).contains(&retry), "retry {retry}");
        assert_eq!(rules[0].0, "user");
        assert_eq!(
            rules[0].1, 0,
            "the user rule would admit, spending its one token"
        );
        assert_eq!(rules[1].1, 0);
        // No partial debit: nothing changed anywhere.
        let after: Vec<String> = keys.iter().map(|k| digest(&mut c, k.as_bytes())).collect();
        assert_eq!(before, after, "user {user}");
    }
    assert!(refused >= 35, "only {refused} of 50 refused");
}

#[test]
fn an_admission_spends_every_rule_with_its_own_cost() {
    let s = Server::start();
    let mut c = s.conn();
    let (allowed, denied_by, retry, rules) = decide(
        &mut c,
        "2 a b RULE first 10 1m COST 3 RULE second 5 1m ALGO window COST 2",
    );
    assert_eq!((allowed, denied_by, retry), (1, None, 0));
    assert_eq!(rules[0], ("first".to_string(), 7, 18_000));
    assert_eq!((rules[1].0.as_str(), rules[1].1), ("second", 3));
    assert_eq!(admit(&mut c, "a 10 1m COST 1 DRYRUN")[1], 6);
}

#[test]
fn the_first_refusing_rule_is_named_and_the_longest_wait_reported() {
    let s = Server::start();
    let mut c = s.conn();
    admit(&mut c, "x 1 1s");
    admit(&mut c, "y 1 1m");
    let (allowed, denied_by, retry, _) =
        decide(&mut c, "3 w x y RULE ok 5 1s RULE fast 1 1s RULE slow 1 1m");
    assert_eq!(allowed, 0);
    assert_eq!(denied_by.as_deref(), Some("fast"));
    assert!(retry > 59_000, "the longest wait: {retry}");
    let exists: i64 = cmd("EXISTS").arg("w").query(&mut c).unwrap();
    assert_eq!(exists, 0, "the admitting rule was not spent either");
}

#[test]
fn dry_run_changes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    let (allowed, _, _, rules) = decide(&mut c, "2 a b RULE r1 5 1s RULE r2 5 1s DRYRUN");
    assert_eq!(allowed, 1);
    assert_eq!(rules[0].1, 4);
    let n: i64 = cmd("EXISTS").arg("a").arg("b").query(&mut c).unwrap();
    assert_eq!(n, 0);
}

#[test]
fn malformed_calls_are_errors() {
    let s = Server::start();
    let mut c = s.conn();
    admit(&mut c, "a 5 1m");
    let before = digest(&mut c, b"a");
    let cases = [
        ("2 a a RULE x 1 1s RULE y 1 1s", "ERR key 'a' given more than once"),
        ("2 a b RULE x 1 1s", "ERR numkeys is 2 but 1 RULE clauses were given"),
        ("1 a RULE x 1 1s RULE y 1 1s", "ERR numkeys is 1 but 2 RULE clauses were given"),
        ("1 a RULE x 1 1s NOPE", "ERR syntax error near 'NOPE'"),
        ("0 a RULE x 1 1s", "ERR numkeys must be in the range [1, 32]"),
        ("9 a RULE x 1 1s", "ERR wrong number of arguments for 'RL.MULTI' command"),
        ("1 a RULE x 5 1m ALGO window", "ERR key holds an ALGO gcra limiter, not window: use another key, or DEL this one to change the algorithm"),
    ];
    for (line, want) in cases {
        let e = multi(&mut c, line).unwrap_err();
        assert_eq!(error_text(&e), want, "{line}");
    }
    assert_eq!(digest(&mut c, b"a"), before);
}

#[test]
fn resp3_reply_is_a_map_with_nested_rules() {
    let s = Server::start();
    let mut c = s.conn3();
    let v = multi(&mut c, "1 a RULE only 5 1s").unwrap();
    let Value::Map(fields) = v else {
        panic!("{v:?}")
    };
    let names: Vec<String> = fields
        .iter()
        .map(|(k, _)| redis::from_redis_value(k).unwrap())
        .collect();
    assert_eq!(names, ["allowed", "denied_by", "retry_after_ms", "rules"]);
    let Value::Array(rules) = &fields[3].1 else {
        panic!()
    };
    assert!(matches!(rules[0], Value::Map(_)), "{:?}", rules[0]);
}

#[test]
fn getkeys_reports_every_key() {
    let s = Server::start();
    let mut c = s.conn();
    let keys: Vec<String> = cmd("COMMAND")
        .arg("GETKEYS")
        .arg("RL.MULTI")
        .arg(2)
        .arg("{t}:u")
        .arg("{t}")
        .arg("RULE")
        .arg("a")
        .arg(1)
        .arg("1s")
        .arg("RULE")
        .arg("b")
        .arg(1)
        .arg("1s")
        .query(&mut c)
        .unwrap();
    assert_eq!(keys, ["{t}:u", "{t}"]);
}
