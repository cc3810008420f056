use std::num::NonZeroUsize;
use std::time::Duration;

use redis_rl_client::policy::OnStoreError;
use redis_rl_client::posture::{
    with_deadline, Breaker, BreakerState, Fallback, Pass, StoreFailure,
};
use rl_core::rule::{Algo, Rule};
use tokio::time::{advance, sleep, Instant};

const FALLBACK: OnStoreError = OnStoreError::Allow;

fn breaker() -> Breaker {
    Breaker::new(3, Duration::from_secs(1), Duration::from_secs(10))
}

/// Enters with a draw of 0 (always the store when anything may go there) and reports.
fn call(b: &Breaker, ok: bool) -> bool {
    match b.enter(Instant::now(), &FALLBACK, 0.0) {
        Pass::Store(c) => {
            if ok {
                c.succeeded(Instant::now())
            } else {
                c.failed(Instant::now())
            }
            true
        }
        Pass::Posture => false,
    }
}

#[tokio::test(start_paused = true)]
async fn deadline_turns_a_slow_store_into_a_timeout() {
    let t0 = Instant::now();
    let slow = async {
        sleep(Duration::from_millis(100)).await;
        Ok::<_, String>(1)
    };
    assert_eq!(
        with_deadline(Duration::from_millis(50), slow).await,
        Err(StoreFailure::Timeout)
    );
    assert_eq!(t0.elapsed(), Duration::from_millis(50));
    let fast = async { Ok::<_, String>(2) };
    assert_eq!(with_deadline(Duration::from_millis(50), fast).await, Ok(2));
    let failing = async { Err::<u8, _>("down".to_string()) };
    assert_eq!(
        with_deadline(Duration::from_millis(50), failing).await,
        Err(StoreFailure::Error("down".to_string()))
    );
}

#[tokio::test(start_paused = true)]
async fn opens_after_consecutive_failures_only() {
    let b = breaker();
    assert!(call(&b, false));
    assert!(call(&b, false));
    assert!(call(&b, true)); // a success resets the count
    assert!(call(&b, false));
    assert!(call(&b, false));
    assert_eq!(b.state(Instant::now()), BreakerState::Closed);
    assert!(call(&b, false));
    assert_eq!(b.state(Instant::now()), BreakerState::Open);
    assert!(!call(&b, true), "an open breaker asks nobody");
    advance(Duration::from_millis(999)).await;
    assert!(!call(&b, true));
    advance(Duration::from_millis(1)).await;
    assert_eq!(b.state(Instant::now()), BreakerState::HalfOpen);
}

#[tokio::test(start_paused = true)]
async fn half_open_lets_one_probe_at_a_time() {
    let b = breaker();
    for _ in 0..3 {
        call(&b, false);
    }
    advance(Duration::from_secs(1)).await;
    let Pass::Store(probe) = b.enter(Instant::now(), &FALLBACK, 0.0) else {
        panic!("the first request after open is the probe")
    };
    assert!(probe.is_probe());
    assert!(matches!(
        b.enter(Instant::now(), &FALLBACK, 0.0),
        Pass::Posture
    ));
    // A failed probe opens again for the whole period.
    probe.failed(Instant::now());
    assert_eq!(b.state(Instant::now()), BreakerState::Open);
    advance(Duration::from_millis(999)).await;
    assert!(!call(&b, true));
    advance(Duration::from_millis(1)).await;

    // A cancelled probe frees the slot for the next request.
    let Pass::Store(probe) = b.enter(Instant::now(), &FALLBACK, 0.0) else {
        panic!("probe")
    };
    drop(probe);
    let Pass::Store(probe) = b.enter(Instant::now(), &FALLBACK, 0.0) else {
        panic!("probe again")
    };
    assert!(probe.is_probe());
    probe.succeeded(Instant::now());
    assert_eq!(b.state(Instant::now()), BreakerState::Ramping);
}

#[tokio::test(start_paused = true)]
async fn ramp_sends_a_linearly_growing_share_to_the_store() {
    let b = breaker();
    for _ in 0..3 {
        call(&b, false);
    }
    advance(Duration::from_secs(1)).await;
    let Pass::Store(probe) = b.enter(Instant::now(), &FALLBACK, 0.0) else {
        panic!("probe")
    };
    probe.succeeded(Instant::now());

    let goes_to_store =
        |draw: f64, on: &OnStoreError| matches!(b.enter(Instant::now(), on, draw), Pass::Store(_));
    let fallback = OnStoreError::Fallback(Rule::new(Algo::Gcra, 1, 1000, None).unwrap());
    // At the start of the ramp nothing goes to the store except deny routes.
    assert!(!goes_to_store(0.0, &fallback));
    assert!(goes_to_store(0.99, &OnStoreError::Deny));
    advance(Duration::from_millis(2500)).await;
    assert!(goes_to_store(0.2499, &fallback));
    assert!(!goes_to_store(0.25, &fallback));
    assert!(!goes_to_store(0.9, &OnStoreError::Allow));
    advance(Duration::from_millis(5000)).await;
    assert!(goes_to_store(0.7499, &fallback));
    assert!(!goes_to_store(0.75, &fallback));
    assert_eq!(b.state(Instant::now()), BreakerState::Ramping);
    advance(Duration::from_millis(2500)).await;
    assert_eq!(b.state(Instant::now()), BreakerState::Closed);
    assert!(goes_to_store(0.999, &fallback));

    // Failures during a ramp count toward opening again.
    let b = breaker();
    for _ in 0..3 {
        call(&b, false);
    }
    advance(Duration::from_secs(1)).await;
    let Pass::Store(probe) = b.enter(Instant::now(), &FALLBACK, 0.0) else {
        panic!("probe")
    };
    probe.succeeded(Instant::now());
    for _ in 0..3 {
        let Pass::Store(c) = b.enter(Instant::now(), &OnStoreError::Deny, 0.5) else {
            panic!("deny routes go to the store during the ramp")
        };
        c.failed(Instant::now());
    }
    assert_eq!(b.state(Instant::now()), BreakerState::Open);
}

#[tokio::test(start_paused = true)]
async fn late_outcomes_of_calls_let_through_before_opening_are_ignored() {
    let b = breaker();
    let Pass::Store(late) = b.enter(Instant::now(), &FALLBACK, 0.0) else {
        panic!("closed")
    };
    for _ in 0..3 {
        call(&b, false);
    }
    late.succeeded(Instant::now());
    assert_eq!(b.state(Instant::now()), BreakerState::Open);
}

#[test]
fn zero_ramp_closes_at_once() {
    let b = Breaker::new(1, Duration::ZERO, Duration::ZERO);
    assert!(call(&b, false));
    let Pass::Store(probe) = b.enter(Instant::now(), &FALLBACK, 0.0) else {
        panic!("probe")
    };
    assert!(probe.is_probe());
    probe.succeeded(Instant::now());
    assert_eq!(b.state(Instant::now()), BreakerState::Closed);
}

#[test]
fn fallback_decides_with_the_module_arithmetic_per_key() {
    const S: u64 = 1_000_000;
    const T0: u64 = 1_764_000_000 * S;
    // The seeds' P-READ: 2 per second, burst 20.
    let f = Fallback::new(
        Rule::new(Algo::Gcra, 2, S, Some(20)).unwrap(),
        NonZeroUsize::new(2).unwrap(),
    );
    for i in 0..20 {
        assert!(f.admit_at("u17", 1, T0).allowed, "call {i}");
    }
    let d = f.admit_at("u17", 1, T0);
    assert!(!d.allowed);
    assert_eq!(d.retry_after_ms(), 500);
    // Another key has its own limiter.
    assert!(f.admit_at("u18", 1, T0).allowed);
    assert!(f.admit_at("u17", 1, T0 + S / 2).allowed);
    // Bounded: a third key evicts the least recently used (u18), which starts full again.
    assert!(f.admit_at("u19", 1, T0).allowed);
    assert!(
        !f.admit_at("u17", 1, T0 + S / 2).allowed,
        "u17 kept its state"
    );
    let d = f.admit_at("u18", 1, T0);
    assert_eq!((d.allowed, d.remaining), (true, 19));
    // A cost above the capacity (policy validation keeps routes from it) is refused.
    assert!(!f.admit_at("u20", 21, T0).allowed);
    // Wall-clock path: a fresh key admits.
    assert!(f.admit("fresh", 1).allowed);
    assert_eq!(f.rule().burst(), 20);
}

mod breaker_properties {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Enter { draw: f64, deny: bool },
        Finish { which: usize, ok: bool },
        Cancel { which: usize },
        Advance { ms: u64 },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0.0f64..1.0, any::<bool>()).prop_map(|(draw, deny)| Op::Enter { draw, deny }),
            (0usize..8, any::<bool>()).prop_map(|(which, ok)| Op::Finish { which, ok }),
            (0usize..8).prop_map(|which| Op::Cancel { which }),
            (0u64..400).prop_map(|ms| Op::Advance { ms }),
        ]
    }

    proptest! {
        /// Whatever happens, at most one probe is in flight, an open breaker lets nothing
        /// through, and `failures` consecutive failures of a closed breaker open it.
        #[test]
        fn one_probe_at_most_and_nothing_through_while_open(ops in proptest::collection::vec(op(), 1..300)) {
            let b = Breaker::new(3, Duration::from_millis(500), Duration::from_millis(1000));
            let fallback = OnStoreError::Allow;
            let mut now = Instant::now();
            let mut calls = Vec::new();
            let mut closed_failures = 0;
            for op in ops {
                match op {
                    Op::Enter { draw, deny } => {
                        let before = b.state(now);
                        let on = if deny { OnStoreError::Deny } else { fallback };
                        match b.enter(now, &on, draw) {
                            Pass::Store(c) => {
                                prop_assert!(before != BreakerState::Open);
                                calls.push(c);
                            }
                            Pass::Posture => prop_assert!(before != BreakerState::Closed),
                        }
                        prop_assert!(calls.iter().filter(|c| c.is_probe()).count() <= 1);
                    }
                    Op::Finish { which, ok } if which < calls.len() => {
                        let c = calls.remove(which);
                        let counted = b.state(now) == BreakerState::Closed && !c.is_probe();
                        if ok { c.succeeded(now) } else { c.failed(now) }
                        if counted {
                            closed_failures = if ok { 0 } else { closed_failures + 1 };
                            if closed_failures == 3 {
                                prop_assert_eq!(b.state(now), BreakerState::Open);
                                closed_failures = 0;
                            }
                        } else {
                            closed_failures = 0;
                        }
                    }
                    Op::Cancel { which } if which < calls.len() => drop(calls.remove(which)),
                    Op::Finish { .. } | Op::Cancel { .. } => {}
                    Op::Advance { ms } => now += Duration::from_millis(ms),
                }
            }
        }
    }
}
