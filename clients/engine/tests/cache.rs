// Test code stops at its first surprise: all of it, not only the `#[test]` functions that
// clippy.toml covers, may unwrap, expect, panic and index.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::time::Duration;

use proptest::prelude::*;
use rl_engine::cache::NegativeCache;
use rl_engine::Instant;

const MS: Duration = Duration::from_millis(1);

fn cache(entries: usize, max_ms: u64) -> NegativeCache {
    NegativeCache::new(
        NonZeroUsize::new(entries).unwrap(),
        MS * max_ms as u32,
        usize::MAX,
    )
}

#[test]
fn refuses_costs_at_least_the_refused_one_for_min_of_retry_and_max() {
    let c = cache(10, 250);
    let t0 = Instant::from_micros(1_000_000);
    c.refused("read", "u17", 10, MS * 3500, t0);
    assert_eq!(c.check("read", "u17", 10, t0), Some(MS * 250));
    assert_eq!(c.check("read", "u17", 11, t0 + MS * 100), Some(MS * 150));
    // A cheaper request might fit in what is left: ask the store.
    assert_eq!(c.check("read", "u17", 9, t0 + MS * 100), None);
    // Another rule or key is not refused.
    assert_eq!(c.check("write", "u17", 10, t0), None);
    assert_eq!(c.check("read", "u18", 10, t0), None);
    assert_eq!(c.check("read", "u17", 10, t0 + MS * 250), None);
    // The expired entry is gone.
    assert!(c.is_empty());

    // R shorter than max bounds it.
    c.refused("read", "u17", 1, MS * 40, t0);
    assert_eq!(c.check("read", "u17", 1, t0 + MS * 39), Some(MS));
    assert_eq!(c.check("read", "u17", 1, t0 + MS * 40), None);
    // A zero wait records nothing.
    c.refused("read", "u17", 1, Duration::ZERO, t0);
    assert!(c.is_empty());
}

#[test]
fn names_cannot_collide_across_rule_and_key() {
    let c = cache(10, 250);
    let t0 = Instant::from_micros(1_000_000);
    c.refused("ab", "c", 1, MS * 100, t0);
    assert_eq!(c.check("a", "bc", 1, t0), None);
    assert!(c.check("ab", "c", 1, t0).is_some());
}

#[test]
fn bounded_with_the_least_recently_used_evicted_first() {
    let c = cache(2, 250);
    let t0 = Instant::from_micros(1_000_000);
    c.refused("r", "a", 1, MS * 100, t0);
    c.refused("r", "b", 1, MS * 100, t0);
    // Touch a, so b is the least recently used.
    assert!(c.check("r", "a", 1, t0).is_some());
    c.refused("r", "c", 1, MS * 100, t0);
    assert_eq!(c.len(), 2);
    assert!(c.check("r", "a", 1, t0).is_some());
    assert!(c.check("r", "b", 1, t0).is_none());
    assert!(c.check("r", "c", 1, t0).is_some());
}

#[derive(Debug, Clone)]
enum Op {
    Refuse { key: u8, cost: u64, retry_ms: u64 },
    Check { key: u8, cost: u64 },
    Advance { ms: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..4, 1u64..5, 0u64..1000).prop_map(|(key, cost, retry_ms)| Op::Refuse {
            key,
            cost,
            retry_ms
        }),
        (0u8..4, 1u64..5).prop_map(|(key, cost)| Op::Check { key, cost }),
        (0u64..300).prop_map(|ms| Op::Advance { ms }),
    ]
}

proptest! {
    /// A local refusal only ever happens inside min(R, max) of the latest store refusal of that
    /// key, for a cost at least the refused one, and says exactly the wait left.
    #[test]
    fn never_refuses_after_min_of_retry_and_max(max_ms in 1u64..400, ops in proptest::collection::vec(op(), 1..200)) {
        let c = cache(100, max_ms);
        let t0 = Instant::from_micros(1_000_000);
        let mut now = t0;
        let mut last: HashMap<u8, (u64, Instant, u64)> = HashMap::new();
        for op in ops {
            match op {
                Op::Refuse { key, cost, retry_ms } => {
                    c.refused("rule", &key.to_string(), cost, MS * retry_ms as u32, now);
                    if retry_ms > 0 {
                        last.insert(key, (cost, now, retry_ms));
                    }
                }
                Op::Advance { ms } => now += MS * ms as u32,
                Op::Check { key, cost } => {
                    let got = c.check("rule", &key.to_string(), cost, now);
                    let want = last.get(&key).and_then(|&(refused, at, retry_ms)| {
                        let until = at + MS * retry_ms.min(max_ms) as u32;
                        (now < until && cost >= refused).then(|| until.duration_since(now))
                    });
                    prop_assert_eq!(got, want);
                    if let Some(wait) = got {
                        prop_assert!(wait <= MS * max_ms as u32);
                    }
                }
            }
        }
    }
}
