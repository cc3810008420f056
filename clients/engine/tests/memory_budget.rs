//! The in-memory store is bounded in bytes (`clients/CONTRACT.md` section 12): keys whose
//! state is full again go first, then the least recently used live ones, counted.

// Test code stops at its first surprise: all of it, not only the `#[test]` functions that
// clippy.toml covers, may unwrap, expect, panic and index.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use rl_engine::memory::MemoryStore;
use rl_engine::wire::Reply;

const T0: u64 = 1_767_225_600_000_000;

fn admit(store: &mut MemoryStore, key: &str, period: &str, now_us: u64) -> Reply {
    let args: Vec<Vec<u8>> = ["RL.ADMIT", key, "1", period]
        .iter()
        .map(|a| a.as_bytes().to_vec())
        .collect();
    store.call(&args, now_us)
}

fn allowed(reply: &Reply) -> i64 {
    match reply {
        Reply::Array(items) => match items.first() {
            Some(Reply::Int(n)) => *n,
            other => panic!("not a decision: {other:?}"),
        },
        other => panic!("not a decision: {other:?}"),
    }
}

#[test]
fn ten_thousand_keys_stay_within_the_budget() {
    let budget = 256 << 10;
    let mut store = MemoryStore::with_budget(budget);
    for i in 0..10_000u64 {
        let key = format!("u:{i:0>200}");
        assert_eq!(allowed(&admit(&mut store, &key, "1h", T0 + i)), 1);
        assert!(
            store.bytes() <= budget,
            "{} bytes at key {i}",
            store.bytes()
        );
    }
    // Each key costs its 202 bytes and the fixed overhead: the budget holds a few hundred.
    assert!(
        store.len() > 100 && store.len() < 10_000,
        "{} keys",
        store.len()
    );
    assert_eq!(store.evicted(), 10_000 - store.len() as u64);
    // The newest key is kept and still refuses; the oldest was forgotten and admits again.
    assert_eq!(
        allowed(&admit(
            &mut store,
            &format!("u:{:0>200}", 9_999),
            "1h",
            T0 + 10_000
        )),
        0
    );
    assert_eq!(
        allowed(&admit(
            &mut store,
            &format!("u:{:0>200}", 0),
            "1h",
            T0 + 10_001
        )),
        1
    );
}

const BUDGET: usize = 64 << 10;

fn store_of() -> MemoryStore {
    MemoryStore::with_budget(BUDGET)
}

#[test]
fn expired_keys_go_before_live_ones() {
    // A live key first, so it is the least recently used of all; then short-lived keys that
    // fill two thirds of the budget.
    let mut store = store_of();
    assert_eq!(allowed(&admit(&mut store, "live", "1h", T0)), 1);
    let per_key = {
        admit(&mut store, &format!("short:{:0>100}", 0), "1ms", T0);
        store.bytes() / store.len()
    };
    let third = BUDGET / 3 / per_key;
    for i in 1..2 * third {
        admit(
            &mut store,
            &format!("short:{i:0>100}"),
            "1ms",
            T0 + i as u64,
        );
    }
    assert_eq!(store.len(), 2 * third + 1);
    // Two seconds on every short key is full again, and two thirds more overflow the budget:
    // the short keys are dropped, not the live one.
    let later = T0 + 2_000_000;
    for i in 0..2 * third {
        admit(
            &mut store,
            &format!("next:{i:0>100}"),
            "1ms",
            later + i as u64,
        );
    }
    assert!(store.bytes() <= BUDGET);
    assert_eq!(store.len(), 2 * third + 1);
    assert_eq!(allowed(&admit(&mut store, "live", "1h", later)), 0);
    assert_eq!(store.evicted(), 0);
}
