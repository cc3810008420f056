//! Every table the engine keeps is bounded by the policy, whatever the number of callers:
//! 100,000 distinct callers, each refused once by the store (negative cache), each spending a
//! chunk of its own (grant rule), then each decided by the local fallback while the store is
//! down, leave at most `negative_cache.entries` entries in each table; and callers with the
//! longest identities allowed leave at most `Options::table_bytes` in each.

// Test code stops at its first surprise: all of it, not only the `#[test]` functions that
// clippy.toml covers, may unwrap, expect, panic and index.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::sync::Arc;

use rl_engine::memory::MemoryStore;
use rl_engine::{Answer, Engine, Instant, Options, Policy, Request, Step, Verdict};

const ENTRIES: usize = 1000;
const CALLERS: u64 = 100_000;

fn policy() -> Policy {
    policy_of(ENTRIES)
}

fn policy_of(entries: usize) -> Policy {
    Policy::from_json(&format!(
        r#"{{
  "version": 1, "default": {{"rules": []}},
  "identity": {{"user": "x-user"}},
  "rules": {{
    "user":  {{"key": "u:${{user}}", "limit": 1, "period": "1h"}},
    "chunk": {{"key": "c:${{user}}", "limit": 100, "period": "1s", "grant": {{"want": 10}}}}
  }},
  "routes": [{{"method": "GET", "path": "/", "rules": ["user", "chunk"],
               "on_store_error": {{"mode": "fallback", "limit": 1, "period": "1h"}}}}],
  "negative_cache": {{"entries": {entries}}}
}}"#
    ))
    .unwrap()
}

fn decide(engine: &Engine, store: Option<&mut MemoryStore>, user: &str, now: Instant) -> Verdict {
    let headers = vec![("x-user", user.to_string())];
    let request = Request {
        method: "GET",
        path: "/",
        headers: &headers,
        peer: None,
        caller: None,
        case_insensitive: false,
    };
    let (mut pending, mut step) = engine.begin(&request, now);
    let mut store = store;
    loop {
        match step {
            Step::Done(verdict) => return verdict,
            Step::Wait { until } => step = engine.resume(&mut pending, Vec::new(), until),
            Step::Calls { calls, .. } => {
                let answers = calls
                    .iter()
                    .map(|c| match store.as_deref_mut() {
                        Some(s) => Answer::Reply(s.call(&c.args.to_vecs(), now.as_micros())),
                        None => Answer::Failed("connection refused".into()),
                    })
                    .collect();
                step = engine.resume(&mut pending, answers, now);
            }
        }
    }
}

#[test]
fn a_hundred_thousand_callers_stay_within_the_tables_bounds() {
    let options = Options {
        log_sample: 0.0,
        ..Options::default()
    };
    let engine = Engine::new(policy(), Arc::default(), options);
    let mut store = MemoryStore::new();
    let now = Instant::from_micros(1_767_225_600_000_000);
    for i in 0..CALLERS {
        let user = format!("user-{i}");
        assert_eq!(decide(&engine, Some(&mut store), &user, now).status, None);
        assert_eq!(
            decide(&engine, Some(&mut store), &user, now).status,
            Some(429)
        );
    }
    let t = engine.tables();
    assert_eq!(
        (t.negative_cache.entries, t.chunks.entries),
        (ENTRIES, ENTRIES)
    );
    assert_eq!(t.fallback.entries, 0);

    // The store goes away: five failures open the breaker, and every caller is decided by
    // its own local limiter.
    let mut fallback_admits = 0;
    for i in 0..CALLERS {
        let verdict = decide(&engine, None, &format!("other-{i}"), now);
        fallback_admits += u64::from(verdict.status.is_none());
    }
    assert_eq!(fallback_admits, CALLERS);
    let t = engine.tables();
    assert!(
        t.negative_cache.entries <= ENTRIES && t.chunks.entries <= ENTRIES,
        "{t:?}"
    );
    assert_eq!(t.fallback.entries, ENTRIES);
}

#[test]
fn the_longest_identities_stay_within_the_tables_byte_budget() {
    const BUDGET: usize = 1 << 20;
    let options = Options {
        log_sample: 0.0,
        table_bytes: BUDGET,
        ..Options::default()
    };
    // The entry bound out of reach: only the bytes bound the tables.
    let engine = Engine::new(policy_of(1_000_000), Arc::default(), options);
    let mut store = MemoryStore::new();
    let now = Instant::from_micros(1_767_225_600_000_000);
    // 256 bytes, the most an identity may be (one more is a 431).
    let user = |i: u64| format!("{i:0>256}");
    for i in 0..10_000 {
        assert_eq!(
            decide(&engine, Some(&mut store), &user(i), now).status,
            None
        );
        assert_eq!(
            decide(&engine, Some(&mut store), &user(i), now).status,
            Some(429)
        );
    }
    for i in 0..10_000 {
        let verdict = decide(&engine, None, &user(1_000_000 + i), now);
        assert_eq!(verdict.status, None);
    }
    // An entry is its key and value and the table's bookkeeping: 300 to 400 bytes here, so
    // 2,700 to 3,050 of the 10,000 callers are held, the most recent.
    let t = engine.tables();
    for table in [t.negative_cache, t.chunks, t.fallback] {
        assert!(table.bytes <= BUDGET && table.bytes > BUDGET / 2, "{t:?}");
        assert!((2_000..4_000).contains(&table.entries), "{t:?}");
    }
}
