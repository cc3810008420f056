//! The driver's own overload, judged once for every driver: a call that missed its deadline
//! while the driver's loop ran late is the gateway's overload, not the store's failure; a
//! request arriving while the loop is stalled two store timeouts is shed at the door.

// Test code stops at its first surprise: all of it, not only the `#[test]` functions that
// clippy.toml covers, may unwrap, expect, panic and index.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::sync::Arc;
use std::time::Duration;

use rl_engine::{Answer, Engine, Options, Policy};

fn engine(timeout: &str) -> Engine {
    let doc = format!(
        r#"{{"version": 1, "rules": {{}}, "routes": [], "default": {{"rules": []}},
            "store": {{"timeout": "{timeout}"}}}}"#
    );
    Engine::new(
        Policy::from_json(&doc).unwrap(),
        Arc::default(),
        Options::default(),
    )
}

const MS: Duration = Duration::from_millis(1);

#[test]
fn a_missed_call_is_overload_past_a_quarter_of_its_time_and_five_milliseconds() {
    let e = engine("50ms");
    // A quarter of 40 ms is 10 ms: 9 ms late is the store's timeout, 10 ms the loop's.
    assert_eq!(e.missed(40 * MS, 9 * MS), Answer::Timeout);
    assert_eq!(e.missed(40 * MS, 10 * MS), Answer::Overloaded);
    // A call sent with 8 ms left: a quarter is 2 ms, under the floor of 5 ms.
    assert_eq!(e.missed(8 * MS, 4 * MS), Answer::Timeout);
    assert_eq!(e.missed(8 * MS, 5 * MS), Answer::Overloaded);
    // Not late at all: the store did not answer in time.
    assert_eq!(e.missed(Duration::ZERO, Duration::ZERO), Answer::Timeout);
}

#[test]
fn only_a_stall_under_way_of_two_timeouts_sheds_at_the_door() {
    let e = engine("10ms");
    assert!(!e.saturated(19 * MS));
    assert!(e.saturated(20 * MS));
    assert!(!e.saturated(Duration::ZERO));
}
